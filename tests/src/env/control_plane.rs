//! A real Kubernetes control plane on loopback: etcd 3.6, kube-apiserver, and on request the
//! project's CRDs, kube-controller-manager and kube-scheduler, in that order (the controller
//! manager's garbage collector re-reads discovery only every 30 s, so CRDs go in first).
//!
//! Starting takes 10-20 s, so a test binary normally shares one instance among its tests through
//! [`ControlPlaneBuilder::shared`]; the instance then lives until the process exits, and its
//! children die with it through their parent-death signal. An owned instance from
//! [`ControlPlaneBuilder::start`] kills its children and removes its files on drop.
//!
//! Clients are bound to the tokio runtime that builds them and `#[tokio::test]` makes a runtime
//! per test, so the control plane hands out a fresh [`kube::Client`] per call to
//! [`ControlPlane::client`] rather than keeping one.

use std::fs;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use rcgen::ExtendedKeyUsagePurpose;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;

use super::logs;
use super::pki::{Leaf, Pki, FRONT_PROXY_CLIENT};
pub(crate) use super::ports::free_port;
use super::ports::listens;
use super::process::{self, Process};
use super::testbins::{Kubernetes, Testbins};
use super::Error;

mod outage;
pub use outage::NodeLifecycle;

const APISERVER_READY_TIMEOUT: Duration = Duration::from_secs(180);
const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(60);
const COMPONENT_READY_TIMEOUT: Duration = Duration::from_secs(120);
const CRD_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);
/// Attempts at a component whose freshly picked port was taken by someone else meanwhile.
const PORT_ATTEMPTS: usize = 3;

/// The service CIDR; nothing routes to it (tests never dial a ClusterIP), it only has to exist —
/// and be large enough for hundreds of clusters (two Services each) in the benchmarks.
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.0.0.0/16";
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The kube-controller-manager controllers the operator's objects need (TESTING.md step 5); the
/// rest (node lifecycle, CSR signing, cloud, ...) have nothing to do without real nodes.
pub const CONTROLLERS: &[&str] = &[
    "garbage-collector-controller",
    "job-controller",
    "disruption-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "replicaset-controller",
    "deployment-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    "ttl-after-finished-controller",
    "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
];

/// What to start. Compare with [`ControlPlane::builder`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ControlPlaneBuilder {
    kubernetes: Kubernetes,
    crds: bool,
    controller_manager: bool,
    scheduler: bool,
    /// Tells apart shared control planes of the same shape (see [`ControlPlaneBuilder::apart`]).
    apart: &'static str,
    /// Run the node lifecycle and taint eviction controllers (see
    /// [`ControlPlaneBuilder::with_node_lifecycle`]).
    node_lifecycle: Option<NodeLifecycle>,
    /// Who kube-controller-manager acts as (see [`ControlPlaneBuilder::controller_identity`]).
    controller_identity: ControllerIdentity,
    /// Ready for real kubelets (see [`ControlPlaneBuilder::with_real_nodes`]).
    real_nodes: bool,
}

/// Who kube-controller-manager acts as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ControllerIdentity {
    /// As kubeadm runs it: the user `system:kube-controller-manager`, and each controller under
    /// its own ServiceAccount in `kube-system` (`--use-service-account-credentials`): the garbage
    /// collector deletes as `system:serviceaccount:kube-system:generic-garbage-collector`.
    #[default]
    Kubeadm,
    /// Every controller as this one user of `system:masters`
    /// (`--use-service-account-credentials=false`): a distribution whose controllers act under
    /// an identity the operator's chart does not name.
    User(&'static str),
}

impl ControlPlaneBuilder {
    /// Which kube-apiserver build to run (default [`Kubernetes::Current`]).
    pub fn kubernetes(mut self, kubernetes: Kubernetes) -> Self {
        self.kubernetes = kubernetes;
        self
    }

    /// Install the project's CRDs (`api::crd::all()`) and wait until they are Established.
    pub fn with_crds(mut self) -> Self {
        self.crds = true;
        self
    }

    /// Start kube-controller-manager (after the CRDs).
    pub fn with_controller_manager(mut self) -> Self {
        self.controller_manager = true;
        self
    }

    /// Start kube-scheduler.
    pub fn with_scheduler(mut self) -> Self {
        self.scheduler = true;
        self
    }

    /// Also run kube-controller-manager's node lifecycle and taint eviction controllers with the
    /// shorter periods of `lifecycle` (the apiserver's default `NoExecute` tolerations included),
    /// so that a Node whose heartbeat stops goes NotReady and its Pods are evicted as on a real
    /// cluster. Off by default: with them every suite's Nodes would depend on the pod runner's
    /// heartbeat keeping up on a loaded machine.
    pub fn with_node_lifecycle(mut self, lifecycle: NodeLifecycle) -> Self {
        self.node_lifecycle = Some(lifecycle);
        self
    }

    /// Ready the apiserver for real kubelets ([`crate::node::RealNode`]) as kubeadm does: the
    /// Node authorizer before RBAC, the NodeRestriction admission plugin, and a client certificate
    /// towards kubelets (`system:masters`), which authenticate and authorize their callers.
    pub fn with_real_nodes(mut self) -> Self {
        self.real_nodes = true;
        self
    }

    /// Run kube-controller-manager as `identity` (default [`ControllerIdentity::Kubeadm`]).
    pub fn controller_identity(mut self, identity: ControllerIdentity) -> Self {
        self.controller_identity = identity;
        self
    }

    /// A shared control plane of its own (see [`ControlPlaneBuilder::shared`]): callers of the
    /// same shape and `tag` get it, no other. For a test that needs what no other test did to
    /// its control plane (say, no cert-manager API installed). Changes nothing in what starts.
    pub fn apart(mut self, tag: &'static str) -> Self {
        self.apart = tag;
        self
    }

    /// Start a control plane owned by the caller; dropping it stops it.
    pub async fn start(self) -> Result<ControlPlane, Error> {
        ControlPlane::start(self).await
    }

    /// The test binary's one control plane of this shape, started by the first caller. A failed
    /// start is remembered: every later caller gets the same error at once instead of another
    /// slow attempt.
    pub async fn shared(self) -> Result<&'static ControlPlane, Error> {
        type Cell = OnceCell<Result<ControlPlane, String>>;
        static SHARED: Mutex<Vec<(ControlPlaneBuilder, &'static Cell)>> = Mutex::new(Vec::new());
        let cell: &'static Cell = {
            let mut shared = SHARED
                .lock()
                .map_err(|_| Error::SharedStartFailed("a test panicked while starting".into()))?;
            match shared.iter().find(|(b, _)| *b == self) {
                Some((_, cell)) => cell,
                None => {
                    let cell: &'static Cell = Box::leak(Box::new(OnceCell::new()));
                    shared.push((self.clone(), cell));
                    cell
                }
            }
        };
        match cell
            .get_or_init(|| async { self.start().await.map_err(|e| e.to_string()) })
            .await
        {
            Ok(cp) => Ok(cp),
            Err(message) => Err(Error::SharedStartFailed(message.clone())),
        }
    }
}

/// A running control plane. See the module docs.
pub struct ControlPlane {
    /// Stopped last-started-first on drop, before `root` is removed.
    processes: Vec<Process>,
    kubernetes: Kubernetes,
    kubernetes_version: Option<String>,
    testbins: Testbins,
    kubectl: PathBuf,
    server_url: String,
    etcd_url: String,
    kubeconfig: PathBuf,
    config: Config,
    pki: Pki,
    log_dir: PathBuf,
    namespaces: AtomicU64,
    started_in: Duration,
    node_lifecycle: Option<NodeLifecycle>,
    root: tempfile::TempDir,
}

crate::debug_fields!(ControlPlane, |c| {
    "kubernetes": c.kubernetes_version,
    "server": c.server_url,
    "etcd": c.etcd_url,
    "root": c.root.path(),
    "logs": c.log_dir,
    "processes": c.processes,
});

impl Drop for ControlPlane {
    fn drop(&mut self) {
        while let Some(process) = self.processes.pop() {
            process.kill();
        }
    }
}

/// What kubectl printed, and how it exited.
#[derive(Clone, Debug)]
pub struct KubectlOutput {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl ControlPlane {
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    async fn start(want: ControlPlaneBuilder) -> Result<Self, Error> {
        let began = Instant::now();
        install_crypto_provider();
        let testbins = Testbins::from_env()?;
        if want.kubernetes != Kubernetes::Current && (want.controller_manager || want.scheduler) {
            return Err(Error::Unsupported(format!(
                "only kube-apiserver is built for {}: kube-controller-manager and kube-scheduler \
                 must not be newer than the apiserver, so start them only with Kubernetes::Current",
                want.kubernetes.part()
            )));
        }
        // Resolve every binary first: a missing one should fail in milliseconds, not after etcd.
        let etcd_bin = testbins.binary("etcd-3.6", "etcd")?;
        let apiserver_bin = testbins.binary(want.kubernetes.part(), "kube-apiserver")?;
        let kubectl = testbins.binary(Kubernetes::Current.part(), "kubectl")?;
        let kcm_bin = want
            .controller_manager
            .then(|| testbins.binary(Kubernetes::Current.part(), "kube-controller-manager"))
            .transpose()?;
        let scheduler_bin = want
            .scheduler
            .then(|| testbins.binary(Kubernetes::Current.part(), "kube-scheduler"))
            .transpose()?;

        let root = temp_root()?;
        static PLANES: AtomicU64 = AtomicU64::new(0);
        let log_dir = logs::run_dir().join(format!(
            "{}-{}",
            want.kubernetes.part(),
            PLANES.fetch_add(1, Ordering::SeqCst) + 1
        ));
        fs::create_dir_all(&log_dir)
            .map_err(Error::io(format!("creating {}", log_dir.display())))?;
        let pki = Pki::mint(&root.path().join("pki"))?;

        let mut processes = Vec::new();
        let (etcd, etcd_url) = start_etcd(&etcd_bin, root.path(), &log_dir).await?;
        processes.push(etcd);

        let kubeconfig = root.path().join("admin.kubeconfig");
        let mut apiserver_extra = want
            .node_lifecycle
            .map(|l| l.apiserver_args())
            .unwrap_or_default();
        let authorization = if want.real_nodes {
            apiserver_extra.extend([
                "--enable-admission-plugins=NodeRestriction".to_string(),
                format!(
                    "--kubelet-client-certificate={}",
                    pki.kubelet_client_cert_file.display()
                ),
                format!(
                    "--kubelet-client-key={}",
                    pki.kubelet_client_key_file.display()
                ),
            ]);
            "Node,RBAC"
        } else {
            "RBAC"
        };
        apiserver_extra.push(format!("--authorization-mode={authorization}"));
        let (apiserver, server_url, config) = start_apiserver(
            &apiserver_bin,
            &etcd_url,
            &pki,
            &kubeconfig,
            &log_dir,
            &processes,
            &apiserver_extra,
        )
        .await?;
        processes.push(apiserver);

        let mut cp = ControlPlane {
            processes,
            kubernetes: want.kubernetes,
            kubernetes_version: testbins.version(want.kubernetes.part()),
            testbins,
            kubectl,
            server_url,
            etcd_url,
            kubeconfig,
            config,
            pki,
            log_dir,
            namespaces: AtomicU64::new(0),
            started_in: Duration::ZERO,
            node_lifecycle: want.node_lifecycle,
            root,
        };

        if want.crds {
            cp.install_crds(api::crd::all()).await?;
        }
        if let Some(bin) = kcm_bin {
            let kcm = cp
                .start_controller_manager(&bin, want.node_lifecycle, want.controller_identity)
                .await?;
            cp.processes.push(kcm);
        }
        if let Some(bin) = scheduler_bin {
            let scheduler = cp.start_scheduler(&bin).await?;
            cp.processes.push(scheduler);
        }
        cp.started_in = began.elapsed();
        // Straight to stderr, past the test harness's capture: start-up time belongs in every log.
        let _ = writeln!(
            std::io::stderr(),
            "control plane {} ({}) started in {:.1?}: {}; logs in {}",
            cp.kubernetes.part(),
            cp.kubernetes_version().unwrap_or("unknown version"),
            cp.started_in,
            cp.processes
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
            cp.log_dir.display()
        );
        Ok(cp)
    }

    /// How long [`ControlPlaneBuilder::start`] took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// An admin client (`system:masters`) for the current tokio runtime.
    pub fn client(&self) -> Result<Client, Error> {
        Client::try_from(self.config.clone()).map_err(Error::kube("building a kube client"))
    }

    /// The admin client configuration (for clients with other settings).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The admin kubeconfig (client certificate, trusts the serving CA).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The control plane's own etcd, `http://127.0.0.1:<port>` (not an operator-managed cluster).
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    pub fn pki(&self) -> &Pki {
        &self.pki
    }

    /// Scratch space that lives as long as the control plane.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Where this control plane's component logs are.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    pub fn testbins(&self) -> &Testbins {
        &self.testbins
    }

    pub fn kubernetes(&self) -> Kubernetes {
        self.kubernetes
    }

    /// The apiserver's version as built (`v1.37.1`), if recorded.
    pub fn kubernetes_version(&self) -> Option<&str> {
        self.kubernetes_version.as_deref()
    }

    /// The running components, in start order.
    pub fn processes(&self) -> &[Process] {
        &self.processes
    }

    /// An error naming the first component that is no longer running.
    pub fn check_running(&self) -> Result<(), Error> {
        self.processes
            .iter()
            .try_for_each(|p| p.check_running("while the tests were running"))
    }

    /// Create a fresh namespace `<prefix>-<n>-<suffix>` and return its name.
    pub async fn namespace(&self, prefix: &str) -> Result<String, Error> {
        let prefix: String = prefix
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' | '-' => c,
                'A'..='Z' => c.to_ascii_lowercase(),
                _ => '-',
            })
            .take(40)
            .collect();
        let n = self.namespaces.fetch_add(1, Ordering::SeqCst) + 1;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let name = format!("{}-{n}-{:04x}", prefix.trim_matches('-'), nanos & 0xffff);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client()?)
            .create(&PostParams::default(), &ns)
            .await
            .map_err(Error::kube(format!("creating namespace {name}")))?;
        Ok(name)
    }

    /// The built kubectl (for scripts that run it themselves, with [`ControlPlane::kubeconfig`]).
    pub fn kubectl_bin(&self) -> &Path {
        &self.kubectl
    }

    /// A directory `<root>/<name>-bin` with links named `kubectl` (the built one) and `etcdctl`
    /// (etcd 3.6's): put first on a shell's `PATH` with `KUBECONFIG` set to
    /// [`ControlPlane::kubeconfig`], the docs' commands run as written.
    pub fn user_tools(&self, name: &str) -> Result<PathBuf, Error> {
        let bin = self.root().join(format!("{name}-bin"));
        fs::create_dir_all(&bin).map_err(Error::io(format!("creating {}", bin.display())))?;
        let etcdctl = self.testbins().binary("etcd-3.6", "etcdctl")?;
        for (link, target) in [("kubectl", self.kubectl.as_path()), ("etcdctl", &etcdctl)] {
            let _ = fs::remove_file(bin.join(link));
            std::os::unix::fs::symlink(target, bin.join(link))
                .map_err(Error::io(format!("linking {link} in {}", bin.display())))?;
        }
        Ok(bin)
    }

    /// Run the built kubectl against this control plane (`--kubeconfig` and a private discovery
    /// cache are added; a cache shared across runs would hold stale discovery for a reused port).
    pub async fn kubectl(&self, args: &[&str]) -> Result<KubectlOutput, Error> {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.root.path().join("kubectl-cache"))
            .args(args)
            .env("HOME", self.root.path())
            .stdin(std::process::Stdio::null());
        process::contain(&mut cmd);
        let output = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(Error::io(format!("running kubectl {}", args.join(" "))))?;
        Ok(KubectlOutput {
            success: output.status.success(),
            status: output.status.to_string(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// [`ControlPlane::kubectl`], failing with its stderr unless it exits 0; returns stdout.
    pub async fn kubectl_ok(&self, args: &[&str]) -> Result<String, Error> {
        let out = self.kubectl(args).await?;
        if out.success {
            Ok(out.stdout)
        } else {
            Err(Error::Kubectl {
                args: args.join(" "),
                status: out.status,
                stderr: out.stderr,
            })
        }
    }

    /// Create (or replace) CRDs and wait until each is Established.
    pub async fn install_crds(&self, crds: Vec<CustomResourceDefinition>) -> Result<(), Error> {
        let client = self.client()?;
        let api = Api::<CustomResourceDefinition>::all(client);
        let mut names = Vec::new();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            match api.create(&PostParams::default(), &crd).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let existing = api
                        .get(&name)
                        .await
                        .map_err(Error::kube(format!("reading CRD {name}")))?;
                    let mut crd = crd;
                    crd.metadata.resource_version = existing.metadata.resource_version;
                    api.replace(&name, &PostParams::default(), &crd)
                        .await
                        .map_err(Error::kube(format!("replacing CRD {name}")))?;
                }
                Err(e) => return Err(Error::kube(format!("creating CRD {name}"))(e)),
            }
            names.push(name);
        }
        for name in names {
            let api = api.clone();
            self.wait_for(
                &format!("CRD {name} to be Established"),
                CRD_ESTABLISHED_TIMEOUT,
                || {
                    let api = api.clone();
                    let name = name.clone();
                    async move {
                        let crd = api.get(&name).await.map_err(|e| e.to_string())?;
                        let established = crd
                            .status
                            .and_then(|s| s.conditions)
                            .unwrap_or_default()
                            .iter()
                            .any(|c| c.type_ == "Established" && c.status == "True");
                        Ok(established.then_some(()))
                    }
                },
            )
            .await?;
        }
        Ok(())
    }

    async fn start_controller_manager(
        &self,
        bin: &Path,
        lifecycle: Option<NodeLifecycle>,
        identity: ControllerIdentity,
    ) -> Result<Process, Error> {
        let service_account_key = self.pki.service_account_key_file.display();
        let mut controllers = CONTROLLERS.to_vec();
        let (user, groups, own_accounts): (&str, &[&str], bool) = match identity {
            ControllerIdentity::Kubeadm => ("system:kube-controller-manager", &[], true),
            ControllerIdentity::User(user) => (user, &["system:masters"], false),
        };
        let mut args = vec![
            "--leader-elect=false".into(),
            format!("--use-service-account-credentials={own_accounts}"),
            format!("--service-account-private-key-file={service_account_key}"),
            format!("--root-ca-file={}", self.pki.serving_ca_file.display()),
        ];
        if let Some(lifecycle) = lifecycle {
            controllers.extend_from_slice(outage::NODE_LIFECYCLE_CONTROLLERS);
            args.extend(lifecycle.controller_manager_args());
        }
        args.push(format!("--controllers={}", controllers.join(",")));
        let kcm = self
            .start_component(bin, "kube-controller-manager", (user, groups), &args)
            .await?;
        // Controllers are running once the serviceaccount controller has filled `default`.
        let api = Api::<ServiceAccount>::namespaced(self.client()?, "default");
        self.wait_for_with(
            "the `default` ServiceAccount (kube-controller-manager's controllers running)",
            COMPONENT_READY_TIMEOUT,
            &[&kcm],
            || {
                let api = api.clone();
                async move {
                    match api.get_opt("default").await {
                        Ok(sa) => Ok(sa.map(|_| ())),
                        Err(e) => Err(e.to_string()),
                    }
                }
            },
        )
        .await?;
        Ok(kcm)
    }

    async fn start_scheduler(&self, bin: &Path) -> Result<Process, Error> {
        self.start_component(
            bin,
            "kube-scheduler",
            ("system:kube-scheduler", &[]),
            &["--leader-elect=false".into()],
        )
        .await
    }

    /// Start kube-controller-manager or kube-scheduler (`name`, logging to `<name>.log`) as
    /// kubeadm does: with a kubeconfig of its own (`<name>.kubeconfig` under the root, a client
    /// certificate for `user` in `groups`) for the API, authentication and authorization,
    /// serving on a free port of 127.0.0.1 with its certificates in `<name>-certs` under the
    /// root, then `args`; wait until its `/healthz` answers, on another port if that one was
    /// taken meanwhile.
    async fn start_component(
        &self,
        bin: &Path,
        name: &str,
        (user, groups): (&str, &[&str]),
        args: &[String],
    ) -> Result<Process, Error> {
        let kubeconfig = self.component_kubeconfig(name, user, groups)?;
        let kubeconfig = kubeconfig.display();
        let cert_dir = format!("{name}-certs");
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let mut cmd = Command::new(bin);
            cmd.arg(format!("--kubeconfig={kubeconfig}"))
                .arg(format!("--authentication-kubeconfig={kubeconfig}"))
                .arg(format!("--authorization-kubeconfig={kubeconfig}"))
                .arg("--bind-address=127.0.0.1")
                .arg(format!("--secure-port={port}"))
                .arg(format!(
                    "--cert-dir={}",
                    self.root.path().join(&cert_dir).display()
                ))
                .args(args);
            let log = self.log_dir.join(format!("{name}.log"));
            let process = Process::spawn(name, cmd, &log)?;
            match self.wait_healthz(&process, port).await {
                Ok(()) => return Ok(process),
                Err(e) if port_taken(&process) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Unsupported("no free port".into())))
    }

    /// A kubeconfig for `user` in `groups` (a client certificate the client CA signs), written
    /// to `<name>.kubeconfig` under the root.
    fn component_kubeconfig(
        &self,
        name: &str,
        user: &str,
        groups: &[&str],
    ) -> Result<PathBuf, Error> {
        let dir = self.root.path().join("pki");
        let (cert, key) = self.pki.client_ca.sign(Leaf {
            common_name: user,
            organizations: groups,
            sans: &[],
            usages: &[ExtendedKeyUsagePurpose::ClientAuth],
        })?;
        let write = |file: String, pem: &str| -> Result<PathBuf, Error> {
            let path = dir.join(file);
            fs::write(&path, pem).map_err(Error::io(format!("writing {}", path.display())))?;
            Ok(path)
        };
        let identity = serde_json::json!({
            "client-certificate": write(format!("{name}.crt"), &cert)?,
            "client-key": write(format!("{name}.key"), &key)?,
        });
        let path = self.root.path().join(format!("{name}.kubeconfig"));
        write_kubeconfig_for(&path, &self.server_url, &self.pki, (user, identity), None)?;
        Ok(path)
    }

    /// Wait until a component's own HTTPS `/healthz` on 127.0.0.1 answers `ok` (its serving
    /// certificate is self-signed, so it is not verified).
    async fn wait_healthz(&self, process: &Process, port: u16) -> Result<(), Error> {
        let url = format!("https://127.0.0.1:{port}");
        let mut config = Config::new(
            url.parse()
                .map_err(|e| Error::Unsupported(format!("bad url {url}: {e}")))?,
        );
        config.accept_invalid_certs = true;
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(5));
        let client = Client::try_from(config).map_err(Error::kube("building a client"))?;
        self.wait_for_with(
            &format!("{} /healthz on {url}", process.name()),
            COMPONENT_READY_TIMEOUT,
            &[process],
            || get_text(client.clone(), "/healthz"),
        )
        .await
    }

    async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, probe: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>, String>>,
    {
        let watched: Vec<&Process> = self.processes.iter().collect();
        wait_until(what, timeout, &watched, &self.log_dir, probe).await
    }

    async fn wait_for_with<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        extra: &[&Process],
        probe: F,
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>, String>>,
    {
        let mut watched: Vec<&Process> = self.processes.iter().collect();
        watched.extend_from_slice(extra);
        wait_until(what, timeout, &watched, &self.log_dir, probe).await
    }
}

/// One process-wide rustls provider (aws-lc-rs), as the binaries do; kube's client needs one
/// when more than one is compiled in.
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    });
}

/// `$TMPDIR/etcd-operator-tests/<binary>-<pid>-XXXX`. Roots of test binaries that are gone (a
/// shared control plane's root is never dropped) are removed first.
pub fn temp_root() -> Result<tempfile::TempDir, Error> {
    let base = std::env::temp_dir().join("etcd-operator-tests");
    fs::create_dir_all(&base).map_err(Error::io(format!("creating {}", base.display())))?;
    if let Ok(entries) = fs::read_dir(&base) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // `<binary>-<pid>-<random>`
            let pid = name
                .rsplit('-')
                .nth(1)
                .and_then(|pid| pid.parse::<u32>().ok());
            if pid.is_some_and(|pid| pid != std::process::id() && !process::pid_alive(pid)) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
    tempfile::Builder::new()
        .prefix(&format!("{}-{}-", logs::binary_name(), std::process::id()))
        .tempdir_in(&base)
        .map_err(Error::io(format!(
            "creating a temp dir in {}",
            base.display()
        )))
}

/// Whether a component that exited complains about a taken port.
fn port_taken(process: &Process) -> bool {
    process.exited().is_some()
        && logs::tail(process.log(), logs::TAIL_LINES).contains("address already in use")
}

async fn start_etcd(bin: &Path, root: &Path, log_dir: &Path) -> Result<(Process, String), Error> {
    let mut last = None;
    for _ in 0..PORT_ATTEMPTS {
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let data_dir = root.join("etcd");
        let _ = fs::remove_dir_all(&data_dir);
        let mut cmd = Command::new(bin);
        cmd.arg("--name=control-plane")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=control-plane={peer_url}"))
            .arg("--initial-cluster-state=new")
            // The control plane's own store only: its data is thrown away with the test run.
            .arg("--unsafe-no-fsync");
        let etcd = Process::spawn("etcd", cmd, &log_dir.join("etcd.log"))?;
        let ready = wait_until(
            &format!("etcd /health on {client_url}"),
            ETCD_READY_TIMEOUT,
            &[&etcd],
            log_dir,
            || etcd_healthy(etcd.pid(), client_port),
        )
        .await;
        match ready {
            Ok(()) => return Ok((etcd, client_url)),
            Err(e) if port_taken(&etcd) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Unsupported("no free port".into())))
}

/// etcd's `/health` over plain HTTP/1.0 (no client needed for one loopback GET) on 127.0.0.1:`port`,
/// once the process `pid` listens there: an answer from another process's etcd on the port is not
/// this one's health ([`listens`]).
pub(crate) async fn etcd_healthy(pid: u32, port: u16) -> Result<Option<()>, String> {
    if !listens(pid, port) {
        return Err(format!(
            "process {pid} does not listen on 127.0.0.1:{port} (yet)"
        ));
    }
    let addr = format!("127.0.0.1:{port}");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(&addr).await?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut body = String::new();
        stream.read_to_string(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    match tokio::time::timeout(Duration::from_secs(2), exchange).await {
        Ok(Ok(body)) if body.contains(r#""health":"true""#) => Ok(Some(())),
        Ok(Ok(body)) => Err(format!("unhealthy: {}", body.lines().last().unwrap_or(""))),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 2s".into()),
    }
}

async fn start_apiserver(
    bin: &Path,
    etcd_url: &str,
    pki: &Pki,
    kubeconfig: &Path,
    log_dir: &Path,
    running: &[Process],
    extra: &[String],
) -> Result<(Process, String, Config), Error> {
    let mut last = None;
    for _ in 0..PORT_ATTEMPTS {
        let port = free_port()?;
        let server_url = format!("https://127.0.0.1:{port}");
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--etcd-servers={etcd_url}"))
            .arg(format!("--secure-port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg("--endpoint-reconciler-type=none")
            .arg(format!(
                "--tls-cert-file={}",
                pki.apiserver_cert_file.display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.apiserver_key_file.display()
            ))
            .arg(format!("--client-ca-file={}", pki.client_ca_file.display()))
            .arg(format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"))
            // The discovery document names this server's own JWKS, so an OpenID relying party
            // (MinIO's STS in the cloud identity suite) can fetch the keys from where it read
            // the document; the issuer stays the in-cluster name.
            .arg(format!(
                "--service-account-jwks-uri={server_url}/openid/v1/jwks"
            ))
            .arg(format!(
                "--service-account-key-file={}",
                pki.service_account_pub_file.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                pki.service_account_key_file.display()
            ))
            .arg(format!(
                "--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"
            ))
            .arg("--allow-privileged=true")
            // Webhook calls through a Service then go to the endpoint's pod IP, never a ClusterIP.
            .arg("--enable-aggregator-routing=true")
            .arg("--kubelet-preferred-address-types=InternalIP")
            .arg(format!(
                "--requestheader-client-ca-file={}",
                pki.front_proxy_ca_file.display()
            ))
            .arg(format!(
                "--requestheader-allowed-names={FRONT_PROXY_CLIENT}"
            ))
            .arg("--requestheader-username-headers=X-Remote-User")
            .arg("--requestheader-group-headers=X-Remote-Group")
            .arg("--requestheader-extra-headers-prefix=X-Remote-Extra-")
            .arg(format!(
                "--proxy-client-cert-file={}",
                pki.front_proxy_client_cert_file.display()
            ))
            .arg(format!(
                "--proxy-client-key-file={}",
                pki.front_proxy_client_key_file.display()
            ))
            .args(extra);
        let apiserver = Process::spawn("kube-apiserver", cmd, &log_dir.join("kube-apiserver.log"))?;

        write_kubeconfig(kubeconfig, &server_url, pki)?;
        let mut config = load_kubeconfig(kubeconfig).await?;
        let mut probe_config = config.clone();
        probe_config.connect_timeout = Some(Duration::from_secs(2));
        probe_config.read_timeout = Some(Duration::from_secs(10));
        let probe = Client::try_from(probe_config).map_err(Error::kube("building a client"))?;
        let mut watched: Vec<&Process> = running.iter().collect();
        watched.push(&apiserver);
        let ready = wait_until(
            &format!("kube-apiserver /readyz on {server_url}"),
            APISERVER_READY_TIMEOUT,
            &watched,
            log_dir,
            || get_text(probe.clone(), "/readyz"),
        )
        .await;
        match ready {
            Ok(()) => {
                config.read_timeout = Some(Duration::from_secs(60));
                return Ok((apiserver, server_url, config));
            }
            Err(e) if port_taken(&apiserver) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Unsupported("no free port".into())))
}

fn write_kubeconfig(path: &Path, server_url: &str, pki: &Pki) -> Result<(), Error> {
    let admin = serde_json::json!({
        "client-certificate": pki.admin_cert_file,
        "client-key": pki.admin_key_file,
    });
    write_kubeconfig_for(path, server_url, pki, ("admin", admin), Some("default"))
}

/// A kubeconfig for the control plane at `server_url` (trusting its serving CA) as `user`
/// (`(name, the kubeconfig's user entry)`), in `namespace` when given.
pub(crate) fn write_kubeconfig_for(
    path: &Path,
    server_url: &str,
    pki: &Pki,
    (user_name, user): (&str, serde_json::Value),
    namespace: Option<&str>,
) -> Result<(), Error> {
    let mut context = serde_json::json!({"cluster": "test", "user": user_name});
    if let Some(ns) = namespace {
        context["namespace"] = serde_json::json!(ns);
    }
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "test",
            "cluster": {
                "server": server_url,
                "certificate-authority": pki.serving_ca_file,
            },
        }],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": "test", "context": context}],
        "current-context": "test",
    });
    let yaml = yaml_serde::to_string(&doc).map_err(|e| Error::Kubeconfig {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    fs::write(path, yaml).map_err(Error::io(format!("writing {}", path.display())))
}

async fn load_kubeconfig(path: &Path) -> Result<Config, Error> {
    let bad = |message: String| Error::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))
}

/// `GET path` answering `ok`.
async fn get_text(client: Client, path: &str) -> Result<Option<()>, String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(request).await {
        Ok(body) if body.trim() == "ok" => Ok(Some(())),
        Ok(body) => Err(format!("answered {body:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Poll `probe` until it yields a value, failing early when a watched process exits and with the
/// probe's last complaint and every log's tail on timeout.
pub(crate) async fn wait_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    watched: &[&Process],
    log_dir: &Path,
    mut probe: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, String>>,
{
    let start = Instant::now();
    let mut last: String;
    loop {
        for process in watched {
            process.check_running(&format!("while waiting for {what}"))?;
        }
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => last = "not yet".into(),
            Err(e) => last = e,
        }
        if start.elapsed() > timeout {
            let tails = watched
                .iter()
                .map(|p| {
                    format!(
                        "---- {} ({}) ----\n{}",
                        p.name(),
                        p.log().display(),
                        logs::tail(p.log(), 20)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            return Err(Error::Timeout {
                what: what.to_string(),
                timeout,
                last,
                log_dir: log_dir.to_path_buf(),
                tails,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}
