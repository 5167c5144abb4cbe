//! The pod runner: a kubelet stand-in that makes the Pods scheduled to its Nodes run for real, as
//! local processes, each Pod in its own network namespace on a host bridge, each container in its
//! own mount and UTS namespace with the Pod's volumes bind-mounted, under the Pod's user.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use tests::env::ControlPlane;
//! use tests::podrunner::PodRunner;
//!
//! let cp = ControlPlane::builder().with_controller_manager().with_scheduler().start().await?;
//! let runner = PodRunner::builder().start(&cp).await?;
//! // ... create Pods, Services, PVCs; kube-scheduler binds them to the runner's Nodes ...
//! runner.kill_container("ns", "etcd-0", "etcd")?;
//! let out = runner.exec("ns", "etcd-0", "etcd", &["etcdctl", "endpoint", "health"]).await?;
//! runner.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! What it owns (see [`network`] for the slot scheme that keeps parallel runners apart): Nodes and
//! their Leases, a default StorageClass and the PVs it provisions, one bridge, Pod network
//! namespaces and veths, tmpfs mounts of `medium: Memory` volumes, hosts files and one block of
//! the host's `/etc/hosts`, the container processes, an HTTPS kubelet endpoint for container logs.
//! It must not touch anything else: no routes beyond its /24, no ClusterIPs, no other namespaces.
//!
//! It runs on a tokio runtime of its own (one thread pool for the runner's life), so one runner
//! can serve every `#[tokio::test]` of a test binary, each with its own runtime. Dropping it, or
//! [`PodRunner::shutdown`], kills every container and removes every namespace, mount, link and
//! hosts entry it made; a runner that starts removes what a crashed one left behind.

pub mod container_env;
pub mod dns;
pub mod exec;
pub mod expand;
pub mod fields;
pub mod images;
pub mod kubelet;
pub mod network;
pub mod nodes;
mod oci;
mod pod;
pub mod probes;
pub mod registry;
mod sandbox;
pub mod status;
pub mod storage;
pub mod streaming;
mod tar;
pub mod unpack;
pub mod volumes;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::Client;
use kube_runtime::watcher::{self, Event};
use kube_runtime::WatchStreamExt;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::env::{logs, ControlPlane};
pub use exec::ExecOutput;
use fields::Allocatable;
pub use images::{ImageMap, ImageRule};
use network::{IpPool, Slot};
pub use sandbox::Identity;

/// Why the pod runner could not start or do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Env(#[from] crate::env::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("the pod runner stopped: {0}")]
    Stopped(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    pub(crate) fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Kube { what, source }
    }
}

/// `metav1.Time` for now.
pub(crate) fn now_rfc3339() -> String {
    status::time(Timestamp::now())
}

/// `metav1.MicroTime` for now.
pub(crate) fn now_micro() -> String {
    let now = Timestamp::now();
    format!(
        "{}.{:06}Z",
        now.strftime("%Y-%m-%dT%H:%M:%S"),
        now.subsec_microsecond()
    )
}

/// The runner's own log: what it did to which Pod, with timestamps.
#[derive(Debug)]
struct Journal {
    path: PathBuf,
    file: Mutex<Option<File>>,
}

impl Journal {
    fn open(path: PathBuf) -> Self {
        let file = path
            .parent()
            .map(std::fs::create_dir_all)
            .and_then(Result::ok)
            .and_then(|_| File::options().create(true).append(true).open(&path).ok());
        if file.is_some() {
            logs::register("pod-runner", &path);
        }
        Self {
            path,
            file: Mutex::new(file),
        }
    }

    fn note(&self, line: &str) {
        if let Ok(mut file) = self.file.lock() {
            if let Some(f) = file.as_mut() {
                let _ = writeln!(f, "{} {line}", now_micro());
            }
        }
    }
}

/// What the runner's tasks share.
pub(crate) struct Ctx {
    client: Client,
    images: ImageMap,
    slot_n: u8,
    state_dir: PathBuf,
    log_root: PathBuf,
    host_ip: String,
    apiserver_port: u16,
    allocatable: Allocatable,
    registry: Arc<registry::Registry>,
    dns: Arc<dns::HostsFiles>,
    ip_pool: Mutex<IpPool>,
    backoff: (Duration, Duration),
    /// Pods this runner stopped and deleted; later events about them (finalizers still pending)
    /// must not start them again.
    finished: Mutex<HashSet<String>>,
    journal: Journal,
    nodes: Vec<String>,
    failed: Arc<FailedNodes>,
}

impl Ctx {
    fn journal(&self, line: &str) {
        self.journal.note(line);
    }

    fn mark_finished(&self, uid: &str) {
        if let Ok(mut f) = self.finished.lock() {
            f.insert(uid.to_string());
        }
    }

    fn is_finished(&self, uid: &str) -> bool {
        self.finished
            .lock()
            .map(|f| f.contains(uid))
            .unwrap_or(false)
    }
}

/// The OCI image layout of the operator image the tests run: `ETCD_OPERATOR_IMAGE_LAYOUT`, else
/// what `make test-image` (tools/image/build.sh --test) writes under Cargo's target directory.
pub fn test_image_layout() -> PathBuf {
    std::env::var_os("ETCD_OPERATOR_IMAGE_LAYOUT")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| logs::target_dir().join("image").join("test").join("oci"))
}

/// Where unpacked images are kept, one root filesystem per manifest digest.
pub fn image_cache_dir() -> PathBuf {
    logs::target_dir().join("image").join("unpacked")
}

/// How to start a runner. Defaults: 3 Nodes `worker-1..3` in zones `zone-a..c`, the etcd builds
/// of the testbins cache for `{quay.io/coreos/etcd,...}:v3.6.*` and `:v3.5.*`, the operator image
/// `etcd-operator:test` from the OCI image layout `make test-image` writes ([`test_image_layout`]),
/// `busybox` / `test-tools` from the host's `/bin`, StorageClass `pod-runner` (default class) and
/// `pod-runner-sized` (tmpfs volumes of the requested size, see [`storage`]), restart back-off 1 s
/// doubling to 10 s.
#[derive(Clone, Debug)]
pub struct PodRunnerBuilder {
    nodes: usize,
    node_prefix: String,
    zones: Vec<String>,
    operator_image: String,
    operator_layout: Option<PathBuf>,
    extra_images: Vec<ImageRule>,
    etcd_repositories: Vec<String>,
    tools_images: Vec<String>,
    storage_class: String,
    backoff: (Duration, Duration),
    allocatable: Allocatable,
    websocket_streaming: bool,
}

impl Default for PodRunnerBuilder {
    fn default() -> Self {
        Self {
            nodes: 3,
            node_prefix: "worker".into(),
            zones: vec!["zone-a".into(), "zone-b".into(), "zone-c".into()],
            operator_image: "etcd-operator:test".into(),
            operator_layout: None,
            extra_images: Vec::new(),
            etcd_repositories: images::DEFAULT_ETCD_REPOSITORIES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            tools_images: images::DEFAULT_TOOLS_IMAGES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            storage_class: "pod-runner".into(),
            backoff: (Duration::from_secs(1), Duration::from_secs(10)),
            allocatable: Allocatable {
                cpu_millis: 16_000,
                memory_bytes: 64 << 30,
                ephemeral_bytes: 100 << 30,
            },
            websocket_streaming: true,
        }
    }
}

impl PodRunnerBuilder {
    /// How many Nodes (at least 1); zones are assigned round-robin.
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n.max(1);
        self
    }

    pub fn node_prefix(mut self, prefix: &str) -> Self {
        self.node_prefix = prefix.to_string();
        self
    }

    pub fn zones(mut self, zones: &[&str]) -> Self {
        if !zones.is_empty() {
            self.zones = zones.iter().map(|z| z.to_string()).collect();
        }
        self
    }

    /// The operator's image reference (a reference without a tag matches every tag), served
    /// from the operator's OCI image layout.
    pub fn operator_image(mut self, image: &str) -> Self {
        self.operator_image = image.to_string();
        self
    }

    /// The OCI image layout the operator image comes from (default: [`test_image_layout`]).
    pub fn operator_image_layout(mut self, layout: impl Into<PathBuf>) -> Self {
        self.operator_layout = Some(layout.into());
        self
    }

    /// Map one more image (a reference without a tag matches every tag) to an OCI image layout,
    /// as the operator's: e.g. the operator image of an earlier commit, for an upgrade test.
    pub fn oci_image(mut self, image: &str, layout: impl Into<PathBuf>) -> Self {
        self.extra_images.push(ImageRule::Oci {
            image: image.to_string(),
            layout: layout.into(),
            tag: None,
            cache: image_cache_dir(),
        });
        self
    }

    /// Map one more image to a directory of executables.
    pub fn image(mut self, image: &str, dir: impl Into<PathBuf>) -> Self {
        self.extra_images.push(ImageRule::Exact {
            image: image.to_string(),
            dir: dir.into(),
            entrypoint: Vec::new(),
            cmd: Vec::new(),
        });
        self
    }

    /// Accept one more repository for the etcd images (e.g. the operator's
    /// `--etcd-image-repository`).
    pub fn etcd_repository(mut self, repository: &str) -> Self {
        self.etcd_repositories.push(repository.to_string());
        self
    }

    pub fn storage_class(mut self, name: &str) -> Self {
        self.storage_class = name.to_string();
        self
    }

    /// Whether the Nodes declare `ExtendWebSocketsToKubelet` on an apiserver ≥ 1.36 (default:
    /// yes, as kubelet does), so that kubectl's WebSocket streams reach the runner as they are;
    /// without it the apiserver translates them to SPDY/3.1 for the kubelet.
    pub fn websocket_streaming(mut self, declare: bool) -> Self {
        self.websocket_streaming = declare;
        self
    }

    /// Restart back-off: first delay, then doubling up to `max`.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff = (initial, max.max(initial));
        self
    }

    fn image_map(&self, cp: &ControlPlane) -> ImageMap {
        let mut rules = Vec::new();
        for (part, minor) in [("etcd-3.6", "3.6"), ("etcd-3.5", "3.5")] {
            if let Ok(etcd) = cp.testbins().binary(part, "etcd") {
                if let Some(dir) = etcd.parent() {
                    rules.push(ImageRule::Etcd {
                        repositories: self.etcd_repositories.clone(),
                        minor: minor.to_string(),
                        dir: dir.to_path_buf(),
                    });
                }
            }
        }
        rules.push(ImageRule::Oci {
            image: self.operator_image.clone(),
            layout: self
                .operator_layout
                .clone()
                .unwrap_or_else(test_image_layout),
            tag: None,
            cache: image_cache_dir(),
        });
        rules.extend(self.extra_images.iter().cloned());
        rules.push(ImageRule::Tools {
            names: self.tools_images.clone(),
        });
        ImageMap::new(rules)
    }

    /// Start a runner for `cp` (which should run kube-controller-manager and kube-scheduler:
    /// the runner relies on their EndpointSlices, PV binder and scheduling).
    pub async fn start(self, cp: &ControlPlane) -> Result<PodRunner, Error> {
        if !nix::unistd::geteuid().is_root() {
            return Err(Error::Unsupported(
                "the pod runner needs root (network namespaces, bind mounts, setuid); run the \
                 end-to-end suites as root"
                    .into(),
            ));
        }
        let apiserver_port = cp
            .server_url()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| Error::Unsupported(format!("no port in {}", cp.server_url())))?;
        let images = self.image_map(cp);
        // Unpack the operator image now (once per digest, seconds for a fresh one) rather than
        // in the runner's first container start; a missing image fails there, with its message.
        let (warm, operator_image) = (images.clone(), self.operator_image.clone());
        let _ = tokio::task::spawn_blocking(move || warm.resolve(&operator_image)).await;
        let setup = Setup {
            builder: self.clone(),
            images,
            config: cp.config().clone(),
            apiserver_port,
            kubelet_version: cp.kubernetes_version().unwrap_or("v1.33.0").to_string(),
            pv_root: cp.root().join("pod-runner-volumes"),
            log_dir: cp.log_dir().join("pod-runner"),
        };
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("pod-runner".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("pod-runner-rt")
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ =
                            ready_tx.send(Err(Error::io("building the pod runner's runtime")(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match Running::start(setup).await {
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                        Ok((running, shared)) => {
                            let _ = ready_tx.send(Ok(shared));
                            let _ = stop_rx.await;
                            running.tear_down().await;
                        }
                    }
                });
                runtime.shutdown_timeout(Duration::from_secs(2));
                let _ = done_tx.send(());
            })
            .map_err(Error::io("starting the pod runner thread"))?;
        let shared = match ready_rx.await {
            Ok(Ok(shared)) => shared,
            Ok(Err(e)) => {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
                return Err(e);
            }
            Err(_) => {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
                return Err(Error::Stopped(
                    "the runner thread ended during start-up".into(),
                ));
            }
        };
        Ok(PodRunner {
            shared,
            config: cp.config().clone(),
            control: Mutex::new(Some(Control {
                stop: stop_tx,
                done: done_rx,
                thread,
            })),
        })
    }
}

struct Setup {
    builder: PodRunnerBuilder,
    images: ImageMap,
    config: kube::Config,
    apiserver_port: u16,
    kubelet_version: String,
    pv_root: PathBuf,
    log_dir: PathBuf,
}

/// What the handle shares with the runner thread (no kube client: that one belongs to the runner's
/// runtime).
#[derive(Debug)]
struct Shared {
    registry: Arc<registry::Registry>,
    dns: Arc<dns::HostsFiles>,
    nodes: Vec<nodes::NodeInfo>,
    slot: u8,
    kubelet_port: u16,
    storage_class: String,
    pv_root: PathBuf,
    journal: PathBuf,
    images: ImageMap,
    failed: Arc<FailedNodes>,
}

/// Nodes a test failed ([`PodRunner::fail_node`]): no heartbeat, no Pods run there, and the
/// dispatcher is told to kill what runs there now.
#[derive(Debug, Default)]
pub(crate) struct FailedNodes {
    names: Mutex<HashSet<String>>,
    changed: tokio::sync::Notify,
}

impl FailedNodes {
    pub(crate) fn contains(&self, node: &str) -> bool {
        self.names.lock().is_ok_and(|n| n.contains(node))
    }
}

/// The runner thread's state between start and tear-down.
struct Running {
    ctx: Arc<Ctx>,
    slot: Slot,
    shutdown: watch::Sender<bool>,
    dispatcher: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    async fn start(setup: Setup) -> Result<(Self, Arc<Shared>), Error> {
        let swept = tokio::task::spawn_blocking(network::sweep_abandoned)
            .await
            .map_err(|e| Error::Stopped(e.to_string()))??;
        let slot = tokio::task::spawn_blocking(network::claim_slot)
            .await
            .map_err(|e| Error::Stopped(e.to_string()))??;
        match Self::start_in(setup, slot, swept).await {
            Ok(x) => Ok(x),
            Err((e, n)) => {
                if let Some(n) = n {
                    let _ = tokio::task::spawn_blocking(move || network::sweep_slot(n)).await;
                    network::release(n);
                }
                Err(e)
            }
        }
    }

    async fn start_in(
        setup: Setup,
        slot: Slot,
        swept: Vec<u8>,
    ) -> Result<(Self, Arc<Shared>), (Error, Option<u8>)> {
        let n = slot.n;
        let fail = |e: Error| (e, Some(n));
        let b = &setup.builder;
        let client = Client::try_from(setup.config.clone())
            .map_err(|e| fail(Error::kube("building the runner's client")(e)))?;
        let journal = Journal::open(setup.log_dir.join("pod-runner.log"));
        journal.note(&format!(
            "slot {n} (bridge {}, 10.213.{n}.0/24, state {}); swept abandoned slots {swept:?}; images: {}",
            slot.bridge(),
            slot.state_dir.display(),
            setup.images.describe()
        ));
        let registry = Arc::new(registry::Registry::default());
        let hosts = Arc::new(dns::HostsFiles::new(n));

        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| fail(Error::io("binding the kubelet port")(e)))?;
        let kubelet_port = listener
            .local_addr()
            .map_err(|e| fail(Error::io("reading the kubelet port")(e)))?
            .port();
        let tls = kubelet::tls_config().map_err(fail)?;
        let mut tasks = vec![tokio::spawn(kubelet::serve(
            listener,
            tls,
            registry.clone(),
        ))];

        let node_infos: Vec<nodes::NodeInfo> = (0..b.nodes)
            .map(|i| nodes::NodeInfo {
                name: format!("{}-{}", b.node_prefix, i + 1),
                zone: b.zones[i % b.zones.len()].clone(),
            })
            .collect();
        let report = nodes::NodeReport {
            kubelet_port,
            kubelet_version: setup.kubelet_version.clone(),
            cpu: format!("{}m", b.allocatable.cpu_millis),
            memory: format!("{}", b.allocatable.memory_bytes),
            pods: "110".into(),
            declared_features: nodes::declared_features(
                &setup.kubelet_version,
                b.websocket_streaming,
            ),
        };
        nodes::register(&client, &node_infos, &report)
            .await
            .map_err(fail)?;
        let failed = Arc::new(FailedNodes::default());
        tasks.push(tokio::spawn(nodes::heartbeat(
            client.clone(),
            node_infos.clone(),
            report,
            failed.clone(),
        )));

        let provisioners = vec![
            storage::Provisioner {
                class: b.storage_class.clone(),
                provisioner: "pod-runner.etcd-operator.test/hostpath".into(),
                root: setup.pv_root.clone(),
                sized: false,
                default: true,
                local: false,
            },
            storage::Provisioner {
                class: sized_class(&b.storage_class),
                provisioner: "pod-runner.etcd-operator.test/tmpfs".into(),
                root: slot.state_dir.join("sized-volumes"),
                sized: true,
                default: false,
                local: false,
            },
            storage::Provisioner {
                class: local_class(&b.storage_class),
                provisioner: "pod-runner.etcd-operator.test/local".into(),
                root: setup.pv_root.join("local"),
                sized: false,
                default: false,
                local: true,
            },
        ];
        for provisioner in &provisioners {
            std::fs::create_dir_all(&provisioner.root).map_err(|e| {
                fail(Error::io(format!(
                    "creating {}",
                    provisioner.root.display()
                ))(e))
            })?;
            provisioner.install_class(&client).await.map_err(fail)?;
        }

        let ctx = Arc::new(Ctx {
            client: client.clone(),
            images: setup.images.clone(),
            slot_n: n,
            state_dir: slot.state_dir.clone(),
            log_root: setup.log_dir.join("pods"),
            host_ip: "127.0.0.1".into(),
            apiserver_port: setup.apiserver_port,
            allocatable: b.allocatable,
            registry: registry.clone(),
            dns: hosts.clone(),
            ip_pool: Mutex::new(IpPool::new(n)),
            backoff: b.backoff,
            finished: Mutex::new(HashSet::new()),
            journal,
            nodes: node_infos.iter().map(|n| n.name.clone()).collect(),
            failed: failed.clone(),
        });
        tasks.push(tokio::spawn(run_storage(ctx.clone(), provisioners)));
        tasks.push(tokio::spawn(run_dns(ctx.clone())));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let dispatcher = tokio::spawn(run_dispatcher(ctx.clone(), shutdown_rx));
        let shared = Arc::new(Shared {
            registry,
            dns: hosts,
            nodes: node_infos,
            slot: n,
            kubelet_port,
            storage_class: b.storage_class.clone(),
            pv_root: setup.pv_root.clone(),
            journal: ctx.journal.path.clone(),
            images: setup.images,
            failed,
        });
        Ok((
            Self {
                ctx,
                slot,
                shutdown,
                dispatcher,
                tasks,
            },
            shared,
        ))
    }

    async fn tear_down(self) {
        self.ctx.journal("stopping: killing every container");
        let _ = self.shutdown.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(30), self.dispatcher).await;
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.ctx.dns.remove_host_block();
        let n = self.slot.n;
        // Whatever a worker could not remove (and the bridge) goes with the slot's sweep.
        let _ = tokio::task::spawn_blocking(move || network::sweep_slot(n)).await;
        network::release(n);
        self.ctx.journal("stopped; slot released");
        drop(self.slot);
    }
}

/// The sized StorageClass next to the default class `class`.
fn sized_class(class: &str) -> String {
    format!("{class}-sized")
}

/// The local StorageClass next to the default class `class`.
fn local_class(class: &str) -> String {
    format!("{class}-local")
}

/// Watch Pods and hand those bound to our Nodes to their workers.
async fn run_dispatcher(ctx: Arc<Ctx>, shutdown: watch::Receiver<bool>) {
    type Worker = (watch::Sender<Option<Arc<Pod>>>, JoinHandle<()>, String);
    let mut workers: HashMap<String, Worker> = HashMap::new();
    let mut listed: Option<HashSet<String>> = None;
    let api = Api::<Pod>::all(ctx.client.clone());
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut stop = shutdown.clone();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = stop.changed() => break,
            _ = ctx.failed.changed.notified() => {
                // A failed Node's Pods die with it: containers killed, nothing reported.
                for (uid, (tx, _, node)) in &workers {
                    if ctx.failed.contains(node) {
                        ctx.mark_finished(uid);
                        let _ = tx.send(None);
                    }
                }
                continue;
            }
        };
        let Some(event) = event else { break };
        match event {
            Ok(Event::Init) => listed = Some(HashSet::new()),
            Ok(Event::InitDone) => {
                if let Some(seen) = listed.take() {
                    for (uid, (tx, _, _)) in &workers {
                        if !seen.contains(uid) {
                            let _ = tx.send(None);
                        }
                    }
                }
            }
            Ok(Event::Apply(pod)) | Ok(Event::InitApply(pod)) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(seen) = listed.as_mut() {
                    seen.insert(uid.clone());
                }
                let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                let Some(node) = node.filter(|n| ctx.nodes.contains(n) && !ctx.failed.contains(n))
                else {
                    continue;
                };
                let pod = Arc::new(pod);
                match workers.get(&uid) {
                    Some((tx, handle, _)) if !handle.is_finished() => {
                        let _ = tx.send(Some(pod));
                    }
                    _ => {
                        if ctx.is_finished(&uid) {
                            continue;
                        }
                        let (tx, rx) = watch::channel(Some(pod.clone()));
                        let worker = pod::PodWorker::new(ctx.clone(), &pod, rx, shutdown.clone());
                        workers.insert(uid, (tx, tokio::spawn(worker.run()), node));
                    }
                }
            }
            Ok(Event::Delete(pod)) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some((tx, _, _)) = workers.get(&uid) {
                    let _ = tx.send(None);
                }
            }
            Err(e) => ctx.journal(&format!("pod watch: {e}")),
        }
        workers.retain(|_, (_, h, _)| !h.is_finished());
    }
    // Stopping: every worker kills its containers and releases its sandbox.
    for (_, (_, handle, _)) in workers {
        let _ = tokio::time::timeout(Duration::from_secs(20), handle).await;
    }
}

/// Keep the hosts files in step with the EndpointSlices.
async fn run_dns(ctx: Arc<Ctx>) {
    let report = ctx.clone();
    dns::serve(ctx.client.clone(), ctx.dns.clone(), move |problem| {
        report.journal(problem)
    })
    .await
}

/// Every change to a `K` in the cluster, kept in `writer`'s store (each one as `()`).
pub(crate) fn reflected<K>(
    client: &kube::Client,
    writer: kube_runtime::reflector::store::Writer<K>,
) -> impl futures::Stream<Item = Result<(), String>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    kube_runtime::reflector(
        writer,
        watcher::watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .map(|e| e.map(|_| ()).map_err(|e| e.to_string()))
}

/// Provision and reclaim PVs whenever claims or volumes change (and every few seconds).
async fn run_storage(ctx: Arc<Ctx>, provisioners: Vec<storage::Provisioner>) {
    let report = ctx.clone();
    storage::serve(ctx.client.clone(), provisioners, move |problem| {
        report.journal(&format!("storage: {problem}"))
    })
    .await
}

struct Control {
    stop: oneshot::Sender<()>,
    done: oneshot::Receiver<()>,
    thread: std::thread::JoinHandle<()>,
}

/// A running pod runner. See the module docs.
pub struct PodRunner {
    shared: Arc<Shared>,
    config: kube::Config,
    control: Mutex<Option<Control>>,
}

crate::debug_fields!(PodRunner, |r| {
    "slot": r.shared.slot,
    "nodes": r.node_names(),
    "kubelet_port": r.shared.kubelet_port,
});

impl Drop for PodRunner {
    fn drop(&mut self) {
        let control = self.control.get_mut().ok().and_then(Option::take);
        if let Some(control) = control {
            let _ = control.stop.send(());
            let _ = control.thread.join();
        }
    }
}

impl PodRunner {
    /// The pod runner suites' start: the test binary's shared control plane with
    /// kube-controller-manager and kube-scheduler, and a default runner on it; errors as text,
    /// for a `OnceCell` that every test of the binary reads.
    pub async fn start_shared() -> Result<(&'static ControlPlane, PodRunner), String> {
        let cp = ControlPlane::builder()
            .with_controller_manager()
            .with_scheduler()
            .shared()
            .await
            .map_err(|e| e.to_string())?;
        let runner = PodRunner::builder()
            .start(cp)
            .await
            .map_err(|e| e.to_string())?;
        Ok((cp, runner))
    }

    pub fn builder() -> PodRunnerBuilder {
        PodRunnerBuilder::default()
    }

    /// Stop every container and remove everything the runner made on this machine (API objects
    /// — Nodes, Leases, PVs — stay). Idempotent.
    pub async fn shutdown(&self) -> Result<(), Error> {
        let control = self
            .control
            .lock()
            .map_err(|_| Error::Stopped("a shutdown panicked".into()))?
            .take();
        let Some(control) = control else {
            return Ok(());
        };
        let _ = control.stop.send(());
        let _ = control.done.await;
        tokio::task::spawn_blocking(move || control.thread.join())
            .await
            .map_err(|e| Error::Stopped(e.to_string()))?
            .map_err(|_| Error::Stopped("the runner thread panicked".into()))
    }

    pub fn node_names(&self) -> Vec<String> {
        self.shared.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// `(node, zone)` pairs.
    pub fn nodes(&self) -> Vec<(String, String)> {
        self.shared
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.zone.clone()))
            .collect()
    }

    pub fn storage_class(&self) -> &str {
        &self.shared.storage_class
    }

    /// The StorageClass whose volumes are tmpfs mounts of exactly the requested size (a Pod
    /// sees that capacity, and runs out of space at it); they last as long as the runner.
    pub fn sized_storage_class(&self) -> String {
        sized_class(&self.shared.storage_class)
    }

    /// The host's address on the runner's pod bridge (`10.213.<slot>.1`): Pods reach a server
    /// on the host that listens on it (they have no route elsewhere).
    pub fn host_address(&self) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 213, self.shared.slot, 1)
    }

    /// The runner's slot (bridge `eopbr<n>`, subnet `10.213.<n>.0/24`, netns `eop-<n>-*`).
    pub fn slot(&self) -> u8 {
        self.shared.slot
    }

    pub fn kubelet_port(&self) -> u16 {
        self.shared.kubelet_port
    }

    /// The runner's own log (what it did to which Pod).
    pub fn journal(&self) -> &Path {
        &self.shared.journal
    }

    /// Where provisioned PVs live.
    pub fn volume_root(&self) -> &Path {
        &self.shared.pv_root
    }

    pub fn images(&self) -> &ImageMap {
        &self.shared.images
    }

    /// Every `exec`, `attach` and `port-forward` session the kubelet endpoint accepted, with the
    /// protocol it arrived in.
    pub fn stream_sessions(&self) -> Vec<registry::StreamSession> {
        self.shared.registry.sessions()
    }

    /// The current DNS records (ready endpoints of every Service).
    pub fn dns_records(&self) -> Vec<dns::Record> {
        self.shared.dns.records()
    }

    fn pod(&self, ns: &str, pod: &str) -> Result<Arc<registry::PodEntry>, Error> {
        self.shared.registry.find(ns, pod).ok_or_else(|| {
            Error::NotFound(format!("pod {ns}/{pod} is not running on the pod runner"))
        })
    }

    fn running(&self, ns: &str, pod: &str, container: &str) -> Result<exec::ExecTarget, Error> {
        self.shared
            .registry
            .container(ns, pod, container)
            .and_then(|c| c.running)
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "container {container} of pod {ns}/{pod} is not running"
                ))
            })
    }

    /// The Pod's IP (while its sandbox exists).
    pub fn pod_ip(&self, ns: &str, pod: &str) -> Option<IpAddr> {
        let entry = self.shared.registry.find(ns, pod)?;
        let state = entry.state.lock().ok()?;
        state.network.as_ref().map(|n| IpAddr::V4(n.ip))
    }

    /// The hosts file bind-mounted over the Pod's `/etc/hosts`.
    pub fn hosts_file(&self, ns: &str, pod: &str) -> Option<PathBuf> {
        let entry = self.shared.registry.find(ns, pod)?;
        let state = entry.state.lock().ok()?;
        state.hosts_file.clone()
    }

    /// The network namespace of the Pod (`/run/netns/eop-<slot>-<id>`), e.g. for `nsenter`.
    pub fn netns(&self, ns: &str, pod: &str) -> Option<PathBuf> {
        let entry = self.shared.registry.find(ns, pod)?;
        let state = entry.state.lock().ok()?;
        state.network.as_ref().map(|n| n.netns_path())
    }

    /// The pid of a running container's main process.
    pub fn container_pid(&self, ns: &str, pod: &str, container: &str) -> Option<u32> {
        self.running(ns, pod, container).ok().map(|t| t.pid)
    }

    /// Run `argv` inside a running container (its namespaces, user, env, image `PATH`), like
    /// `kubectl exec` without the streaming; killed after 30 s.
    pub async fn exec(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        argv: &[&str],
    ) -> Result<ExecOutput, Error> {
        self.exec_with(ns, pod, container, argv, None, Duration::from_secs(30))
            .await
    }

    /// [`PodRunner::exec`] with stdin and a timeout.
    pub async fn exec_with(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        argv: &[&str],
        stdin: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<ExecOutput, Error> {
        let target = self.running(ns, pod, container)?;
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        exec::exec(&target, &argv, stdin, timeout).await
    }

    fn signal(&self, ns: &str, pod: &str, container: &str, signal: Signal) -> Result<(), Error> {
        let target = self.running(ns, pod, container)?;
        let pid = i32::try_from(target.pid)
            .map_err(|_| Error::Unsupported(format!("pid {} out of range", target.pid)))?;
        killpg(Pid::from_raw(pid), signal).map_err(|e| Error::Io {
            what: format!("sending {signal} to container {container} of {ns}/{pod}"),
            source: e.into(),
        })
    }

    /// SIGKILL the container's processes (a crash): the runner restarts it per restartPolicy.
    pub fn kill_container(&self, ns: &str, pod: &str, container: &str) -> Result<(), Error> {
        self.signal(ns, pod, container, Signal::SIGKILL)
    }

    /// SIGSTOP the container's processes (a hung process: sockets open, nothing answers).
    pub fn stop_container(&self, ns: &str, pod: &str, container: &str) -> Result<(), Error> {
        self.signal(ns, pod, container, Signal::SIGSTOP)
    }

    /// SIGCONT after [`PodRunner::stop_container`].
    pub fn resume_container(&self, ns: &str, pod: &str, container: &str) -> Result<(), Error> {
        self.signal(ns, pod, container, Signal::SIGCONT)
    }

    /// Take the Pod's link down: it keeps its IP and processes, but no packet gets in or out.
    pub async fn cut_network(&self, ns: &str, pod: &str) -> Result<(), Error> {
        self.set_link(ns, pod, false).await
    }

    /// Undo [`PodRunner::cut_network`].
    pub async fn restore_network(&self, ns: &str, pod: &str) -> Result<(), Error> {
        self.set_link(ns, pod, true).await
    }

    async fn set_link(&self, ns: &str, pod: &str, up: bool) -> Result<(), Error> {
        let entry = self.pod(ns, pod)?;
        let network = entry
            .state
            .lock()
            .ok()
            .and_then(|s| s.network.clone())
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "pod {ns}/{pod} has no pod network (hostNetwork or not started)"
                ))
            })?;
        network.set_link(up).await
    }

    /// The directory of a PV (hostPath).
    pub async fn volume_dir(&self, pv: &str) -> Result<PathBuf, Error> {
        let client =
            Client::try_from(self.config.clone()).map_err(Error::kube("building a client"))?;
        let pv_obj = Api::<PersistentVolume>::all(client)
            .get(pv)
            .await
            .map_err(Error::kube(format!("reading PV {pv}")))?;
        pv_obj
            .spec
            .and_then(|s| {
                s.host_path
                    .map(|h| h.path)
                    .or_else(|| s.local.map(|l| l.path))
            })
            .map(PathBuf::from)
            .ok_or_else(|| Error::Unsupported(format!("PV {pv} has no hostPath or local path")))
    }

    /// The StorageClass whose volumes are bound to one Node (`WaitForFirstConsumer`, the PV's
    /// node affinity names the Node the scheduler chose), like local disks: a Pod whose Node is
    /// gone cannot be scheduled anywhere else.
    pub fn local_storage_class(&self) -> String {
        local_class(&self.shared.storage_class)
    }

    /// Fail a Node for good, as a machine that died: its containers are killed without a word to
    /// the API, its heartbeat stops, the Node object and its Lease are deleted (the
    /// kube-controller-manager's pod GC then deletes its Pods), and no Pod runs there again.
    pub async fn fail_node(&self, node: &str) -> Result<(), Error> {
        self.stop_node(node);
        let client =
            Client::try_from(self.config.clone()).map_err(Error::kube("building a client"))?;
        let params = kube::api::DeleteParams::default();
        match Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
            .delete(node, &params)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::kube(format!("deleting Node {node}"))(e)),
        }
        match Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            client,
            nodes::LEASE_NAMESPACE,
        )
        .delete(node, &params)
        .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Error::kube(format!("deleting Lease {node}"))(e)),
        }
    }

    /// The machine behind a Node dies: its containers are killed without a word to the API and
    /// its heartbeat (Lease, status) stops; nothing runs there again.
    pub fn stop_node(&self, node: &str) {
        if let Ok(mut names) = self.shared.failed.names.lock() {
            names.insert(node.to_string());
        }
        self.shared.failed.changed.notify_one();
    }

    /// Fail a Node whose Node object stays, as a machine that died without anyone deleting its
    /// Node: its containers are killed and its heartbeat stops (as in [`Self::fail_node`]), then
    /// what kube-controller-manager's node lifecycle and taint eviction controllers do to such a
    /// Node is done here, at once, because the test control plane does not run them (their
    /// timing, a 40 s+ monitor grace period and the Pods' 300 s default toleration, would
    /// dominate a test): the Node's `Ready` condition becomes `Unknown`
    /// (`NodeStatusUnknown`, "Kubelet stopped posting node status."), it gets the
    /// `node.kubernetes.io/unreachable` NoSchedule and NoExecute taints, and every Pod bound to
    /// it is deleted gracefully (an eviction). No kubelet confirms those deletions, so the Pods
    /// stay Terminating, as on a real cluster.
    pub async fn fail_node_keeping_object(&self, node: &str) -> Result<(), Error> {
        self.stop_node(node);
        let client =
            Client::try_from(self.config.clone()).map_err(Error::kube("building a client"))?;
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
        let current = nodes
            .get(node)
            .await
            .map_err(Error::kube(format!("reading Node {node}")))?;
        let now = now_rfc3339();
        let mut conditions: Vec<serde_json::Value> = current
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .map(|c| serde_json::to_value(c).unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        conditions.retain(|c| c["type"] != "Ready");
        conditions.push(serde_json::json!({
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }));
        let params = kube::api::PatchParams::default();
        nodes
            .patch_status(
                node,
                &params,
                &kube::api::Patch::Merge(serde_json::json!({"status": {"conditions": conditions}})),
            )
            .await
            .map_err(Error::kube(format!("marking Node {node} NotReady")))?;
        let taints = serde_json::json!({"spec": {"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": now},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now},
        ]}});
        nodes
            .patch(node, &params, &kube::api::Patch::Merge(taints))
            .await
            .map_err(Error::kube(format!("tainting Node {node} unreachable")))?;
        let pods = Api::<Pod>::all(client.clone());
        let on_node = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
        for pod in pods
            .list(&on_node)
            .await
            .map_err(Error::kube(format!("listing the Pods on Node {node}")))?
        {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            match Api::<Pod>::namespaced(client.clone(), &ns)
                .delete(&name, &kube::api::DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(Error::kube(format!("evicting Pod {ns}/{name}"))(e)),
            }
        }
        Ok(())
    }

    /// The directory behind a bound claim.
    pub async fn claim_dir(&self, ns: &str, claim: &str) -> Result<PathBuf, Error> {
        let client =
            Client::try_from(self.config.clone()).map_err(Error::kube("building a client"))?;
        let pvc = Api::<PersistentVolumeClaim>::namespaced(client, ns)
            .get(claim)
            .await
            .map_err(Error::kube(format!("reading PVC {ns}/{claim}")))?;
        let pv = pvc
            .spec
            .and_then(|s| s.volume_name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Error::NotFound(format!("PVC {ns}/{claim} is not bound")))?;
        self.volume_dir(&pv).await
    }

    /// Delete everything in a PV's directory (a lost disk), keeping the directory.
    pub async fn wipe_volume(&self, pv: &str) -> Result<(), Error> {
        let dir = self.volume_dir(pv).await?;
        storage::wipe_dir(&dir)
    }

    /// [`PodRunner::wipe_volume`] for the PV bound to a claim.
    pub async fn wipe_claim(&self, ns: &str, claim: &str) -> Result<(), Error> {
        let dir = self.claim_dir(ns, claim).await?;
        storage::wipe_dir(&dir)
    }
}
