//! Real Kubernetes nodes for the tests: kubelets (built from the control plane's own Kubernetes
//! module by `tools/testbins`), Debian's containerd and runc, the CNI bridge plugin, and images
//! imported from the archives `tools/node-images/build.sh` writes (the pause image and etcd images
//! built like etcd's own: distroless, `etcd`, `etcdctl`, `etcdutl` only). Nothing is pulled: an
//! image not imported fails its Pod with `ErrImagePull` naming it.
//!
//! [`RealNodes::start`] starts one or several nodes for a control plane started
//! [`crate::env::ControlPlaneBuilder::with_real_nodes`] (the Node authorizer, NodeRestriction, the
//! apiserver's kubelet client certificate), each registered under its own identity,
//! `system:node:<name>` in `system:nodes`, and returns once every Node is Ready. Each node
//! ([`kubelet::RealNode`]) runs its containerd, kubelet and kube-proxy in a network namespace of
//! its own, as kind runs each node in a container: an address on the node network (a bridge of
//! the host's, `rn<slot>`, `10.217.0.0/24`; the host is `10.217.0.1`, node *i* `10.217.0.(10+i)`)
//! and a Pod range `10.216.<i>.0/24` that the host routes to it. No masquerade, no default route
//! anywhere: a Pod reaches Pods and Services, nothing beyond the machine.
//!
//! This machine's cgroups are v1 (hybrid): the kubelets run with `failCgroupV1: false` and
//! `cgroupDriver: cgroupfs`, each under a cgroup root of its own; the sandbox lacks
//! `CAP_SYS_RESOURCE`, so containerd's CRI plugin runs with `restrict_oom_score_adj` (without it
//! runc fails with "can't get final child's PID from pipe: EOF"); `evictionHard: {}` and image GC
//! off, as the test machine's disk is fuller than the kubelet's default thresholds allow (it would
//! report DiskPressure at once).
//!
//! The kubelet changes a few things of the host whatever its configuration: the sysctls
//! `vm.overcommit_memory`, `kernel.panic` and `kernel.panic_on_oops` (restored when the nodes
//! stop), and the paths `/var/log/containers`, `/var/lib/kubelet/device-plugins`, containerd's
//! shim sockets under `/run/containerd/s` (removed when the nodes stop, if they made them). The
//! nodes share the mount namespace of the host, so their kubelets share the fixed
//! `/var/lib/kubelet/device-plugins` (each one's registration socket replaces the last's; no
//! device plugin runs here, so none is lost) and `/var/log/containers` (links named by Pod and
//! container, which never collide). One set of nodes per host at a time: [`RealNodes::start`]
//! takes a lock.
//!
//! On the host, what a cluster provides and the tests need: CoreDNS ([`coredns`]) on the host's
//! node-network address behind the `kube-dns` Service (the kubelets' `clusterDNS`); the apiserver
//! relayed to that address ([`service_network`]), where the kubelets, kube-proxies and the
//! `kubernetes` Service reach it; a local-volume provisioner for the default StorageClass
//! [`STORAGE_CLASS`] (`WaitForFirstConsumer`, `local` PVs pinned to a node, root-owned directories
//! the kubelet gives a Pod's `fsGroup`, as on a freshly formatted disk), the pod runner's
//! [`crate::podrunner::storage`] provisioner; and, for processes on the host (the operator under
//! test, the tests' own etcd clients), the cluster's Service and member names in a marked block
//! of the host's `/etc/hosts` ([`crate::podrunner::dns`]).

pub mod coredns;
pub mod kubelet;
pub mod service_network;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use nix::fcntl::{Flock, FlockArg};
use rcgen::ExtendedKeyUsagePurpose;

pub use kubelet::RealNode;

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

/// The default StorageClass of a control plane with real nodes: local volumes on the nodes.
pub const STORAGE_CLASS: &str = "real-node-local";
/// The host's address on the node network: the nodes' gateway, where the apiserver relay,
/// CoreDNS (and a test's MinIO) listen for them.
pub const GATEWAY: &str = "10.217.0.1";
/// The node network: the host's bridge and the nodes' addresses.
pub const NODE_NETWORK: &str = "10.217.0.0/24";
/// The Pod range of all nodes (node *i* has `10.216.<i>.0/24`).
pub const POD_RANGE: &str = "10.216.0.0/16";
/// The `kube-dns` Service's ClusterIP, the kubelets' `clusterDNS`.
pub const CLUSTER_DNS: &str = "10.0.0.10";
/// The most nodes a host runs (their Pod ranges are `10.216.1.0/24` …).
pub const MAX_NODES: u8 = 9;
/// The real nodes' block in the host's `/etc/hosts`: a number above the pod runners' slots,
/// which they never sweep; the host lock makes it the only one.
const HOSTS_SLOT: u8 = 250;

const SYSCTLS: &[&str] = &[
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
];
/// Paths outside the nodes' roots the kubelet or containerd create whatever the configuration.
const HOST_PATHS: &[&str] = &[
    "/var/log/containers",
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/run/containerd",
];

/// Running real nodes and what the host runs for them. Dropping it stops them and restores the
/// host (see the module docs).
pub struct RealNodes {
    nodes: Vec<RealNode>,
    bridge: String,
    coredns: Option<Process>,
    /// The Service range is routed to a blackhole (by these nodes).
    blackholed: bool,
    /// The relay, the provisioner and the host's DNS block, on the runtime that started the
    /// nodes.
    services: Vec<tokio::task::JoinHandle<()>>,
    hosts: Arc<dns::HostsFiles>,
    sysctls: BTreeMap<String, String>,
    made_paths: Vec<PathBuf>,
    _lock: Flock<fs::File>,
}

crate::debug_fields!(RealNodes, |n| {
    "nodes": n.nodes,
    "bridge": n.bridge,
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
fn component_kubeconfig(
    cp: &ControlPlane,
    server_url: &str,
    user: &str,
    dir: &Path,
) -> Result<PathBuf, Error> {
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
        server_url,
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

/// Wait until `http://<addr><path>` answers 200: a component of the node is ready.
async fn wait_ok(
    component: &str,
    addr: std::net::SocketAddr,
    path: &str,
    log: &Path,
) -> Result<(), Error> {
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
        ("nsenter (apt-get install util-linux)", "/usr/bin/nsenter"),
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
/// Whether `name` is `rn<digits>`, or `rn<digits><separator><digits>` when `separator` is given:
/// a node network's bridge, a node's namespace (`-`) or its veth's host end (`v`).
fn is_node_name(name: &str, separator: Option<char>) -> bool {
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let Some(rest) = name.strip_prefix("rn") else {
        return false;
    };
    match separator {
        None => digits(rest),
        Some(sep) => rest
            .split_once(sep)
            .is_some_and(|(slot, index)| digits(slot) && digits(index)),
    }
}

/// What a node network or node left behind when its test run was killed (the lock is ours, so
/// nothing of them runs): namespaces `rn<slot>-<i>`, their veths, bridges `rn<slot>`, cgroup
/// roots.
fn remove_stale_nodes() {
    for line in run("ip", &["netns", "list"]).unwrap_or_default().lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if is_node_name(name, Some('-')) {
            let _ = run("ip", &["netns", "del", name]);
            kubelet::remove_cgroup_root(name);
        }
    }
    for line in run("ip", &["-o", "link", "show"])
        .unwrap_or_default()
        .lines()
    {
        let name = line.split(": ").nth(1).unwrap_or_default();
        let name = name.split('@').next().unwrap_or_default();
        if is_node_name(name, None) || is_node_name(name, Some('v')) {
            let _ = run("ip", &["link", "del", name]);
        }
    }
}

/// What a control plane needs for real nodes, on top of `builder`: kube-controller-manager and
/// kube-scheduler, the node lifecycle controller (it removes the not-ready taint the apiserver puts
/// on a new Node once it is Ready, as on any cluster) and the apiserver readied for kubelets
/// ([`crate::env::ControlPlaneBuilder::with_real_nodes`]).
pub fn control_plane(builder: crate::env::ControlPlaneBuilder) -> crate::env::ControlPlaneBuilder {
    builder
        .with_controller_manager()
        .with_scheduler()
        .with_node_lifecycle(crate::env::NodeLifecycle::default())
        .with_real_nodes()
}

impl RealNodes {
    /// Start `count` nodes, `node-1` …, for `cp` (started
    /// [`crate::env::ControlPlaneBuilder::with_real_nodes`]); returns once every Node is Ready and
    /// its kube-proxy has programmed the Services.
    pub async fn start(cp: &ControlPlane, count: u8) -> Result<Self, Error> {
        if !(1..=MAX_NODES).contains(&count) {
            return Err(Error::Unsupported(format!(
                "{count} real nodes asked for: a host runs 1 to {MAX_NODES}"
            )));
        }
        let images = images_dir()?;
        check_prerequisites(&images)?;
        let kubelet_bin = cp.testbins().binary("k8s", "kubelet")?;
        nodebin("coredns")?;
        nodebin("kube-proxy")?;
        let lock = lock_host()?;
        // What a run that was killed left (the lock is ours now).
        dns::write_host_block(HOSTS_SLOT, None).map_err(Error::io(
            "removing a stale real-node block from /etc/hosts",
        ))?;
        remove_stale_nodes();

        let slot = std::process::id() % 200 + 20;
        let bridge = format!("rn{slot}");
        let root = cp.root().join("real-nodes");
        let logs = cp.log_dir().join("real-nodes");
        let mut nodes = RealNodes {
            nodes: Vec::new(),
            bridge: bridge.clone(),
            coredns: None,
            blackholed: false,
            services: Vec::new(),
            hosts: Arc::new(dns::HostsFiles::new(HOSTS_SLOT)),
            sysctls: BTreeMap::new(),
            made_paths: HOST_PATHS
                .iter()
                .map(PathBuf::from)
                .filter(|p| !p.exists())
                .collect(),
            _lock: lock,
        };
        for sysctl in SYSCTLS {
            let value = run("sysctl", &["-n", sysctl])?;
            nodes
                .sysctls
                .insert(sysctl.to_string(), value.trim().to_string());
        }

        // The node network: the host's bridge, its address the nodes' gateway. The host forwards
        // what arrives on it (a node's Pod to another node's Pod) and nothing else.
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run(
            "ip",
            &["addr", "add", &format!("{GATEWAY}/24"), "dev", &bridge],
        )?;
        run("ip", &["link", "set", &bridge, "up"])?;
        write(
            Path::new(&format!("/proc/sys/net/ipv4/conf/{bridge}/forwarding")),
            "1",
        )?;
        service_network::blackhole_services()?;
        nodes.blackholed = true;
        nodes
            .services
            .push(service_network::relay_apiserver(cp, GATEWAY).await?);
        service_network::publish_apiserver(cp, GATEWAY).await?;
        nodes.coredns = Some(
            coredns::start(
                cp,
                GATEWAY,
                CLUSTER_DNS,
                &root.join("coredns"),
                &logs.join("coredns.log"),
            )
            .await?,
        );

        let server_url = format!(
            "https://{GATEWAY}:{}",
            service_network::APISERVER_RELAY_PORT
        );
        let wiring = kubelet::Wiring {
            cp,
            kubelet: &kubelet_bin,
            images: &images,
            bridge: &bridge,
            gateway: GATEWAY,
            server_url: &server_url,
            cluster_dns: CLUSTER_DNS,
            root: &root,
            logs: &logs,
            prefix: &bridge,
        };
        let names: Vec<String> = (1..=count).map(|i| format!("node-{i}")).collect();
        let started = futures::future::join_all(
            names
                .iter()
                .zip(1..=count)
                .map(|(name, index)| RealNode::start(&wiring, index, name)),
        )
        .await;
        let mut failed = Vec::new();
        for node in started {
            match node {
                Ok(node) => nodes.nodes.push(node),
                Err(e) => failed.push(e.to_string()),
            }
        }
        if !failed.is_empty() {
            return Err(Error::Unsupported(failed.join("; ")));
        }

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
        let report =
            |what: &'static str| move |problem: &str| eprintln!("real nodes: {what}: {problem}");
        nodes.services.push(tokio::spawn(storage::serve(
            client.clone(),
            vec![provisioner],
            report("storage"),
        )));
        nodes.services.push(tokio::spawn(dns::serve(
            client,
            nodes.hosts.clone(),
            report("hosts"),
        )));
        Ok(nodes)
    }

    pub fn nodes(&self) -> &[RealNode] {
        &self.nodes
    }

    /// The names of the nodes, `node-1` ….
    pub fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name().to_string()).collect()
    }

    /// The host's address on the node network ([`GATEWAY`]), where a host process serves Pods
    /// (behind a selector-less Service).
    pub fn gateway(&self) -> &str {
        GATEWAY
    }

    /// The real uid the main process of container `container_id` (a Pod status's `containerID`,
    /// `containerd://<id>`) runs as, read on the host from the task a node's containerd started.
    pub fn container_uid(&self, container_id: &str) -> Result<u32, Error> {
        let id = container_id.trim_start_matches("containerd://");
        for node in &self.nodes {
            if let Some(pid) = node.task_pid(id)? {
                return uid_of(pid)
                    .ok_or_else(|| Error::Unsupported(format!("no Uid in /proc/{pid}/status")));
            }
        }
        Err(Error::Unsupported(format!(
            "no task {id} in the containerd of any node ({})",
            self.names().join(", ")
        )))
    }

    /// Import the OCI image archive `archive` into every node's containerd (namespace `k8s.io`)
    /// under `reference`, as a registry-less node gets an image: its Pods run it, nothing is
    /// pulled.
    pub fn import_image(&self, archive: &Path, reference: &str) -> Result<(), Error> {
        for node in &self.nodes {
            node.import_image(archive, reference)?;
        }
        Ok(())
    }

    /// Stop every node and give the host back: see the module docs. Also what dropping the
    /// nodes does.
    pub fn stop(&mut self) {
        for service in self.services.drain(..) {
            service.abort();
        }
        let _ = self.hosts.remove_host_block();
        for node in &mut self.nodes {
            node.stop();
        }
        self.nodes.clear();
        if let Some(coredns) = self.coredns.take() {
            coredns.kill();
        }
        if std::mem::take(&mut self.blackholed) {
            service_network::unroute_services();
        }
        let _ = run("ip", &["link", "del", &self.bridge]);
        for path in &self.made_paths {
            let _ = fs::remove_dir_all(path);
        }
        for (sysctl, value) in &self.sysctls {
            let _ = run("sysctl", &["-qw", &format!("{sysctl}={value}")]);
        }
    }
}

impl Drop for RealNodes {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One set of real nodes per host: the kubelet's fixed paths and sysctls are the host's, and
/// the node network's addresses are fixed.
fn lock_host() -> Result<Flock<fs::File>, Error> {
    let path = std::env::temp_dir().join("etcd-operator-real-node.lock");
    let file =
        fs::File::create(&path).map_err(Error::io(format!("creating {}", path.display())))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        Error::Unsupported(format!(
            "real nodes of another test run on this host ({}: {e})",
            path.display()
        ))
    })
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
