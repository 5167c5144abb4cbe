//! A real Kubernetes node for the tests: kubelet (built from the control plane's own Kubernetes
//! module by `tools/testbins`), Debian's containerd and runc, the CNI bridge plugin, and images
//! imported from the archives `tools/node-images/build.sh` writes (the pause image and etcd images
//! built like etcd's own: distroless, `etcd`, `etcdctl`, `etcdutl` only). Nothing is pulled: an
//! image not imported fails its Pod with `ErrImagePull` naming it.
//!
//! [`RealNode::start`] registers the node with a control plane started
//! [`crate::env::ControlPlaneBuilder::with_real_nodes`] (the Node authorizer, NodeRestriction, the
//! apiserver's kubelet client certificate) under its own identity, `system:node:<name>` in
//! `system:nodes`, and waits until the Node is Ready. Its Pods get addresses on a bridge of their
//! own (`rn<slot>`, `10.216.<slot>.0/24`, no masquerade; the Pods' routes lead to the Pod and
//! Service ranges only, and the host forwards what arrives on the bridge, so that a ClusterIP
//! rewritten to another Pod reaches it), which is also the node's InternalIP, where its kubelet
//! serves exec, logs and port-forward to the apiserver.
//!
//! This machine's cgroups are v1 (hybrid): the kubelet runs with `failCgroupV1: false` and
//! `cgroupDriver: cgroupfs`; the sandbox lacks `CAP_SYS_RESOURCE`, so containerd's CRI plugin runs
//! with `restrict_oom_score_adj` (without it runc fails with "can't get final child's PID from
//! pipe: EOF"); `evictionHard: {}` and image GC off, as the test machine's disk is fuller than the
//! kubelet's default thresholds allow (it would report DiskPressure at once).
//!
//! The kubelet changes a few things of the host whatever its configuration: the sysctls
//! `vm.overcommit_memory`, `kernel.panic` and `kernel.panic_on_oops` (restored when the node
//! stops), and the paths `/var/log/containers`, `/var/lib/kubelet/device-plugins`, containerd's
//! shim sockets under `/run/containerd/s` (removed when the node stops, if the node made them).
//! One real node per host at a time: [`RealNode::start`] takes a lock.
//!
//! Beside the node, what a cluster provides and the tests need: CoreDNS ([`coredns`]) on the
//! node's address for the Pods (the kubelet's `clusterDNS`); a local-volume provisioner for the
//! default StorageClass [`STORAGE_CLASS`] (`WaitForFirstConsumer`, `local` PVs pinned to the node,
//! root-owned directories the kubelet gives a Pod's `fsGroup`, as on a freshly formatted disk),
//! the pod runner's [`crate::podrunner::storage`] provisioner; and, for processes on the host
//! (the operator under test, the tests' own etcd clients), the cluster's Service and member names
//! in a marked block of the host's `/etc/hosts` ([`crate::podrunner::dns`]).

pub mod coredns;
pub mod service_network;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use nix::fcntl::{Flock, FlockArg};
use rcgen::ExtendedKeyUsagePurpose;

use crate::env::pki::Leaf;
use crate::env::process::Process;
use crate::env::{ControlPlane, Error};
use crate::podrunner::{dns, storage};

/// The environment variable naming the node images' directory (what `bash
/// tools/node-images/build.sh` prints); unset, the script is asked with `--print-dir`.
pub const NODE_IMAGES_ENV: &str = "ETCD_OPERATOR_NODE_IMAGES";
/// The environment variable naming the directory of the node's own binaries, CoreDNS and
/// kube-proxy (what `bash tools/nodebins/build.sh` prints); unset, the script is asked with
/// `--print-dir`.
pub const NODEBINS_ENV: &str = "ETCD_OPERATOR_NODEBINS";
/// The image archives a node imports.
pub const IMAGE_ARCHIVES: &[&str] = &["pause.tar", "etcd-3.6.tar", "etcd-3.5.tar"];
/// The pause image the archives hold, the CRI's sandbox image.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The default StorageClass of a control plane with a real node: local volumes on the node.
pub const STORAGE_CLASS: &str = "real-node-local";
/// The real node's block in the host's `/etc/hosts`: a number above the pod runners' slots,
/// which they never sweep; the host lock makes it the only one.
const HOSTS_SLOT: u8 = 250;

const READY_TIMEOUT: Duration = Duration::from_secs(120);
const SYSCTLS: &[&str] = &[
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
];
/// Paths outside the node's root the kubelet or containerd create whatever the configuration.
const HOST_PATHS: &[&str] = &[
    "/var/log/containers",
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/run/containerd",
];

/// A running real node. Dropping it stops it and restores the host (see the module docs).
pub struct RealNode {
    name: String,
    root: PathBuf,
    address: String,
    bridge: String,
    socket: PathBuf,
    kubelet: Option<Process>,
    containerd: Option<Process>,
    coredns: Option<Process>,
    kube_proxy: Option<Process>,
    /// The Service range is routed to a blackhole (by this node).
    blackholed: bool,
    /// The provisioner and the host's DNS block, on the runtime that started the node.
    services: Vec<tokio::task::JoinHandle<()>>,
    hosts: Arc<dns::HostsFiles>,
    sysctls: BTreeMap<String, String>,
    made_paths: Vec<PathBuf>,
    cgroups_before: Vec<PathBuf>,
    _lock: Flock<fs::File>,
}

crate::debug_fields!(RealNode, |n| {
    "name": n.name,
    "root": n.root,
    "address": n.address,
});

/// Run a command; its stdout, or an error naming it with its stderr.
fn run(program: &str, args: &[&str]) -> Result<String, Error> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(Error::io(format!("running {program} {}", args.join(" "))))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Unsupported(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
    }
    fs::write(path, text).map_err(Error::io(format!("writing {}", path.display())))
}

fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(Error::io("picking a free port"))
}

/// The node images' directory: [`NODE_IMAGES_ENV`], else what the build script prints.
pub fn images_dir() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os(NODE_IMAGES_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/node-images/build.sh");
    let printed = run("bash", &[&script.to_string_lossy(), "--print-dir"])?;
    Ok(PathBuf::from(printed.trim()))
}

/// The node's binary `name` (`coredns`, `kube-proxy`): under [`NODEBINS_ENV`], else where the
/// build script puts it.
pub fn nodebin(name: &str) -> Result<PathBuf, Error> {
    let dir = match std::env::var_os(NODEBINS_ENV).filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/nodebins/build.sh");
            PathBuf::from(run("bash", &[&script.to_string_lossy(), "--print-dir"])?.trim())
        }
    };
    let binary = dir.join(name);
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(Error::Unsupported(format!(
            "{} is missing: build it with `bash tools/nodebins/build.sh` and point {NODEBINS_ENV} \
             at the directory it prints (make test does both)",
            binary.display()
        )))
    }
}

/// A kubeconfig under `dir` for a component of the node acting as `user` (a client certificate
/// from the control plane's client CA, no groups), as kubeadm writes one for each component.
fn component_kubeconfig(cp: &ControlPlane, user: &str, dir: &Path) -> Result<PathBuf, Error> {
    let (cert, key) = cp.pki().client_ca.sign(Leaf {
        common_name: user,
        organizations: &[],
        sans: &[],
        usages: &[ExtendedKeyUsagePurpose::ClientAuth],
    })?;
    let file = user.replace(':', "-");
    let (cert_file, key_file) = (
        dir.join(format!("{file}.crt")),
        dir.join(format!("{file}.key")),
    );
    write(&cert_file, &cert)?;
    write(&key_file, &key)?;
    let kubeconfig = dir.join(format!("{file}.kubeconfig"));
    crate::env::control_plane::write_kubeconfig_for(
        &kubeconfig,
        cp.server_url(),
        cp.pki(),
        (
            user,
            serde_json::json!({"client-certificate": cert_file, "client-key": key_file}),
        ),
        None,
    )?;
    Ok(kubeconfig)
}

/// Create `object`, or leave the one already there (a second node of the same control plane).
async fn create_or_keep<K>(api: &Api<K>, object: &K, what: &str) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&kube::api::PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(Error::kube(format!("creating {what}"))(e)),
    }
}

/// Wait until `http://127.0.0.1:<port><path>` answers 200: a component of the node is ready.
async fn wait_ok(component: &str, port: u16, path: &str, log: &Path) -> Result<(), Error> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    crate::harness::poll(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            match crate::webhook::http_get(addr, path).await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
    .map_err(|e| {
        Error::Unsupported(format!(
            "{component} never answered 200 on http://{addr}{path} ({e:?}); log {}",
            log.display()
        ))
    })
}

/// What the node needs from the host, checked before anything starts: a clear message instead of
/// a kubelet that fails a minute later.
fn check_prerequisites(images: &Path) -> Result<(), Error> {
    for (what, path) in [
        (
            "containerd (apt-get install containerd)",
            "/usr/bin/containerd",
        ),
        ("ctr (apt-get install containerd)", "/usr/bin/ctr"),
        ("runc (apt-get install runc)", "/usr/sbin/runc"),
        (
            "the CNI bridge plugin (apt-get install containernetworking-plugins)",
            "/usr/lib/cni/bridge",
        ),
        (
            "the CNI host-local plugin (apt-get install containernetworking-plugins)",
            "/usr/lib/cni/host-local",
        ),
    ] {
        if !Path::new(path).exists() {
            return Err(Error::Unsupported(format!(
                "{path} is missing: the real node needs {what}; bash tools/install-deps.sh installs it"
            )));
        }
    }
    for archive in IMAGE_ARCHIVES {
        if !images.join(archive).is_file() {
            return Err(Error::Unsupported(format!(
                "{} is missing: build the node images with `bash tools/node-images/build.sh` and \
                 point {NODE_IMAGES_ENV} at the directory it prints (make test does both)",
                images.join(archive).display()
            )));
        }
    }
    Ok(())
}

impl RealNode {
    /// Start node `name` for `cp` (started [`crate::env::ControlPlaneBuilder::with_real_nodes`]):
    /// containerd with the images imported, the bridge and CNI, the kubelet registered under the
    /// node's own identity; returns once the Node is Ready.
    pub async fn start(cp: &ControlPlane, name: &str) -> Result<Self, Error> {
        let images = images_dir()?;
        check_prerequisites(&images)?;
        let kubelet_bin = cp.testbins().binary("k8s", "kubelet")?;
        nodebin("coredns")?;
        let lock = lock_host()?;
        // A block left by a node that crashed (the lock is ours now).
        dns::write_host_block(HOSTS_SLOT, None).map_err(Error::io(
            "removing a stale real-node block from /etc/hosts",
        ))?;

        let slot = std::process::id() % 200 + 20;
        let bridge = format!("rn{slot}");
        let address = format!("10.216.{slot}.1");
        let root = cp.root().join(format!("node-{name}"));
        let logs = cp.log_dir().join(format!("node-{name}"));
        let socket = root.join("containerd/containerd.sock");
        let mut node = RealNode {
            name: name.to_string(),
            root: root.clone(),
            address: address.clone(),
            bridge: bridge.clone(),
            socket: socket.clone(),
            kubelet: None,
            containerd: None,
            coredns: None,
            kube_proxy: None,
            blackholed: false,
            services: Vec::new(),
            hosts: Arc::new(dns::HostsFiles::new(HOSTS_SLOT)),
            sysctls: BTreeMap::new(),
            made_paths: HOST_PATHS
                .iter()
                .map(PathBuf::from)
                .filter(|p| !p.exists())
                .collect(),
            cgroups_before: kubepods_cgroups(),
            _lock: lock,
        };
        for sysctl in SYSCTLS {
            let value = run("sysctl", &["-n", sysctl])?;
            node.sysctls
                .insert(sysctl.to_string(), value.trim().to_string());
        }

        // The bridge the Pods' veths join, its address the node's.
        if run("ip", &["link", "show", &bridge]).is_ok() {
            run("ip", &["link", "del", &bridge])?;
        }
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run(
            "ip",
            &["addr", "add", &format!("{address}/24"), "dev", &bridge],
        )?;
        run("ip", &["link", "set", &bridge, "up"])?;
        // A Pod dialing a ClusterIP whose endpoint is another Pod of the node: kube-proxy's
        // rewrite turns the packet back onto the bridge, which the host forwards. Only packets
        // that arrive on this bridge; the Pods' routes lead to the Pod and Service ranges alone,
        // so nothing goes off the machine.
        write(
            Path::new(&format!("/proc/sys/net/ipv4/conf/{bridge}/forwarding")),
            "1",
        )?;
        node.coredns = Some(
            coredns::start(
                cp,
                &address,
                &root.join("coredns"),
                &logs.join("coredns.log"),
            )
            .await?,
        );
        node.services
            .push(service_network::relay_apiserver(cp, &address).await?);
        service_network::blackhole_services()?;
        node.blackholed = true;
        let cni_conf = root.join("cni/net.d");
        write(
            &cni_conf.join("10-node.conflist"),
            &serde_json::json!({
                "cniVersion": "1.0.0",
                "name": "real-node",
                "plugins": [
                    {"type": "bridge", "bridge": bridge, "isGateway": false, "ipMasq": false,
                     "hairpinMode": true,
                     "ipam": {"type": "host-local", "dataDir": root.join("cni/networks"),
                              "ranges": [[{"subnet": format!("10.216.{slot}.0/24"), "gateway": address}]],
                              "routes": [{"dst": "10.216.0.0/16", "gw": address},
                                         {"dst": crate::env::control_plane::SERVICE_CLUSTER_IP_RANGE, "gw": address}]}},
                    {"type": "portmap", "capabilities": {"portMappings": true}},
                ],
            })
            .to_string(),
        )?;

        // containerd, its own root, state and socket.
        let config = root.join("containerd.toml");
        write(
            &config,
            &format!(
                r#"version = 2
root = "{root}/containerd/root"
state = "{root}/containerd/state"
oom_score = 0
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_IMAGE}"
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          Root = "{root}/containerd/runc"
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{cni}"
      max_conf_num = 1
  [plugins."io.containerd.internal.v1.opt"]
    path = "{root}/containerd/opt"
"#,
                root = root.display(),
                socket = socket.display(),
                cni = cni_conf.display(),
            ),
        )?;
        let mut containerd = Command::new("/usr/bin/containerd");
        containerd.arg(format!("--config={}", config.display()));
        node.containerd = Some(Process::spawn(
            &format!("containerd-{name}"),
            containerd,
            &logs.join("containerd.log"),
        )?);
        let address_arg = format!("--address={}", socket.display());
        let containerd_log = logs.join("containerd.log");
        crate::harness::poll(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async { run("ctr", &[&address_arg, "version"]).map(|_| ()) },
        )
        .await
        .map_err(|e| {
            Error::Unsupported(format!(
                "containerd of node {name} never answered on {} ({e}); log {}",
                socket.display(),
                containerd_log.display()
            ))
        })?;
        for archive in IMAGE_ARCHIVES {
            run(
                "ctr",
                &[
                    &address_arg,
                    "-n",
                    "k8s.io",
                    "images",
                    "import",
                    &images.join(archive).to_string_lossy(),
                ],
            )?;
        }

        // The kubelet, registered as system:node:<name>.
        let (cert, key) = cp.pki().client_ca.sign(Leaf {
            common_name: &format!("system:node:{name}"),
            organizations: &["system:nodes"],
            sans: &[],
            usages: &[ExtendedKeyUsagePurpose::ClientAuth],
        })?;
        let pki = root.join("pki");
        write(&pki.join("node.crt"), &cert)?;
        write(&pki.join("node.key"), &key)?;
        let kubeconfig = root.join("kubelet.kubeconfig");
        crate::env::control_plane::write_kubeconfig_for(
            &kubeconfig,
            cp.server_url(),
            cp.pki(),
            (
                &format!("system:node:{name}"),
                serde_json::json!({
                    "client-certificate": pki.join("node.crt"),
                    "client-key": pki.join("node.key"),
                }),
            ),
            None,
        )?;
        let kubelet_root = root.join("kubelet");
        let kubelet_config = root.join("kubelet.yaml");
        let manifests = root.join("manifests");
        fs::create_dir_all(&manifests).map_err(Error::io("creating the static Pod directory"))?;
        let kubelet_yaml = serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "staticPodPath": manifests,
            "containerRuntimeEndpoint": format!("unix://{}", socket.display()),
            "imageServiceEndpoint": format!("unix://{}", socket.display()),
            "failCgroupV1": false,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": "/",
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "imageMinimumGCAge": "24h",
            "failSwapOn": false,
            "address": address,
            "port": free_port()?,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port()?,
            "authentication": {
                "anonymous": {"enabled": false},
                "webhook": {"enabled": true},
                "x509": {"clientCAFile": cp.pki().client_ca_file},
            },
            "authorization": {"mode": "Webhook"},
            // Kept with the test's other logs (the root goes with the control plane).
            "podLogsDir": logs.join("pod-logs"),
            "volumePluginDir": root.join("volume-plugins"),
            "resolvConf": "",
            "makeIPTablesUtilChains": false,
            "clusterDomain": "cluster.local",
            "clusterDNS": [address],
            "serializeImagePulls": false,
            "registerNode": true,
        });
        write(&kubelet_config, &kubelet_yaml.to_string())?;
        let mut kubelet = Command::new(&kubelet_bin);
        kubelet
            .arg(format!("--config={}", kubelet_config.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--root-dir={}", kubelet_root.display()))
            .arg(format!("--cert-dir={}", pki.join("kubelet").display()))
            .arg(format!("--hostname-override={name}"))
            .arg(format!("--node-ip={address}"))
            .arg("--v=2");
        node.kubelet = Some(Process::spawn(
            &format!("kubelet-{name}"),
            kubelet,
            &logs.join("kubelet.log"),
        )?);

        let nodes: Api<Node> = Api::all(cp.client()?);
        let ready = crate::harness::poll(READY_TIMEOUT, Duration::from_millis(500), || {
            let nodes = nodes.clone();
            async move {
                let ready = nodes.get_opt(name).await.ok().flatten().is_some_and(|n| {
                    n.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                if ready {
                    Ok(())
                } else {
                    Err(())
                }
            }
        })
        .await;
        if ready.is_err() {
            return Err(Error::Unsupported(format!(
                "Node {name} not Ready after {READY_TIMEOUT:?}; kubelet log {}",
                logs.join("kubelet.log").display()
            )));
        }

        service_network::publish_apiserver(cp, &address).await?;
        node.kube_proxy = Some(
            service_network::start_kube_proxy(
                cp,
                name,
                &address,
                &format!("10.216.{slot}.0/24"),
                &root.join("kube-proxy"),
                &logs.join("kube-proxy.log"),
            )
            .await?,
        );

        let client = cp.client()?;
        let provisioner = storage::Provisioner {
            class: STORAGE_CLASS.into(),
            provisioner: "real-node.etcd-operator.test/local".into(),
            root: root.join("volumes"),
            sized: false,
            default: true,
            local: true,
        };
        fs::create_dir_all(&provisioner.root)
            .map_err(Error::io("creating the volumes' directory"))?;
        provisioner.install_class(&client).await.map_err(|e| {
            Error::Unsupported(format!("installing StorageClass {STORAGE_CLASS}: {e}"))
        })?;
        let report = |what: &'static str| {
            let name = name.to_string();
            move |problem: &str| eprintln!("real node {name}: {what}: {problem}")
        };
        node.services.push(tokio::spawn(storage::serve(
            client.clone(),
            vec![provisioner],
            report("storage"),
        )));
        node.services.push(tokio::spawn(dns::serve(
            client,
            node.hosts.clone(),
            report("hosts"),
        )));
        Ok(node)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's address (its InternalIP, the Pods' gateway on its bridge).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The real uid the main process of container `container_id` (a Pod status's `containerID`,
    /// `containerd://<id>`) runs as, read on the host from the task containerd started.
    pub fn container_uid(&self, container_id: &str) -> Result<u32, Error> {
        let id = container_id.trim_start_matches("containerd://");
        let address = format!("--address={}", self.socket.display());
        let tasks = run("ctr", &[&address, "-n", "k8s.io", "tasks", "ls"])?;
        let pid = tasks
            .lines()
            .find_map(|l| {
                let mut fields = l.split_whitespace();
                (fields.next() == Some(id)).then(|| fields.next())?
            })
            .ok_or_else(|| {
                Error::Unsupported(format!("no task {id} in the node's containerd: {tasks}"))
            })?;
        let pid: i32 = pid
            .parse()
            .map_err(|e| Error::Unsupported(format!("task {id}'s pid {pid:?}: {e}")))?;
        uid_of(pid).ok_or_else(|| Error::Unsupported(format!("no Uid in /proc/{pid}/status")))
    }

    /// Import the OCI image archive `archive` into the node's containerd (namespace `k8s.io`)
    /// under `reference`, as a registry-less node gets an image: its Pods run it, nothing is
    /// pulled.
    pub fn import_image(&self, archive: &Path, reference: &str) -> Result<(), Error> {
        let address = format!("--address={}", self.socket.display());
        let listed = |what: &str| {
            run("ctr", &[&address, "-n", "k8s.io", "images", "ls", "-q"]).map_err(|e| {
                Error::Unsupported(format!("listing the node's images {what} an import: {e}"))
            })
        };
        let before = listed("before")?;
        let repository = reference.rsplit_once(':').map_or(reference, |(r, _)| r);
        run(
            "ctr",
            &[
                &address,
                "-n",
                "k8s.io",
                "images",
                "import",
                "--base-name",
                repository,
                &archive.to_string_lossy(),
            ],
        )?;
        let after = listed("after")?;
        let imported: Vec<&str> = after
            .lines()
            .filter(|l| {
                !l.is_empty() && !l.starts_with("sha256:") && !before.lines().any(|b| b == *l)
            })
            .collect();
        if after.lines().any(|l| l == reference) {
            return Ok(());
        }
        let [source] = imported[..] else {
            return Err(Error::Unsupported(format!(
                "importing {} named {imported:?}, not one image to tag {reference}",
                archive.display()
            )));
        };
        run(
            "ctr",
            &[&address, "-n", "k8s.io", "images", "tag", source, reference],
        )
        .map(|_| ())
    }

    /// Stop the kubelet, every container and containerd, and give the host back: see the module
    /// docs. Also what dropping the node does.
    pub fn stop(&mut self) {
        for service in self.services.drain(..) {
            service.abort();
        }
        let _ = self.hosts.remove_host_block();
        if let Some(coredns) = self.coredns.take() {
            coredns.kill();
        }
        if let Some(kube_proxy) = self.kube_proxy.take() {
            kube_proxy.kill();
            service_network::clean_up_kube_proxy();
        }
        if std::mem::take(&mut self.blackholed) {
            service_network::unroute_services();
        }
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.kill();
        }
        let address_arg = format!("--address={}", self.socket.display());
        if self.containerd.is_some() {
            let listed = run("ctr", &[&address_arg, "-n", "k8s.io", "tasks", "ls", "-q"])
                .unwrap_or_default();
            for task in listed.lines().filter(|t| !t.is_empty()) {
                let _ = run(
                    "ctr",
                    &[
                        &address_arg,
                        "-n",
                        "k8s.io",
                        "tasks",
                        "kill",
                        "-s",
                        "KILL",
                        task,
                    ],
                );
                std::thread::sleep(Duration::from_millis(200));
                let _ = run(
                    "ctr",
                    &[&address_arg, "-n", "k8s.io", "tasks", "rm", "-f", task],
                );
            }
        }
        if let Some(containerd) = self.containerd.take() {
            containerd.kill();
        }
        // Shims of this containerd outlive it: they carry its socket in their arguments.
        kill_processes_naming(&self.socket.to_string_lossy());
        // Mounts under the node's root, deepest first.
        let root = format!("{}/", self.root.display());
        let mut mounts: Vec<String> = fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(1).map(str::to_string))
            .filter(|m| m.starts_with(&root))
            .collect();
        mounts.sort();
        for m in mounts.iter().rev() {
            if run("umount", &[m]).is_err() {
                let _ = run("umount", &["-l", m]);
            }
        }
        let _ = run("ip", &["link", "del", &self.bridge]);
        for cgroup in kubepods_cgroups() {
            if !self.cgroups_before.contains(&cgroup) {
                remove_cgroup_tree(&cgroup);
            }
        }
        for path in &self.made_paths {
            let _ = fs::remove_dir_all(path);
        }
        for (sysctl, value) in &self.sysctls {
            let _ = run("sysctl", &["-qw", &format!("{sysctl}={value}")]);
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One real node per host: the kubelet's fixed paths and sysctls are the host's.
fn lock_host() -> Result<Flock<fs::File>, Error> {
    let path = std::env::temp_dir().join("etcd-operator-real-node.lock");
    let file =
        fs::File::create(&path).map_err(Error::io(format!("creating {}", path.display())))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        Error::Unsupported(format!(
            "another real node runs on this host ({}: {e})",
            path.display()
        ))
    })
}

fn kubepods_cgroups() -> Vec<PathBuf> {
    fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("kubepods"))
        .filter(|p| p.is_dir())
        .collect()
}

/// Remove a cgroup directory tree, deepest first (cgroupfs removes the files itself).
fn remove_cgroup_tree(dir: &Path) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&entry.path());
        }
    }
    let _ = fs::remove_dir(dir);
}

/// SIGKILL every process whose command line contains `needle`.
fn kill_processes_naming(needle: &str) {
    for pid in pids_naming(needle) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The pids of the processes on the host whose command line contains `needle`.
pub fn pids_naming(needle: &str) -> Vec<i32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let cmdline = fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(needle)
                .then_some(pid)
        })
        .collect()
}

/// The real uid process `pid` runs as (None: it is gone).
pub fn uid_of(pid: i32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
