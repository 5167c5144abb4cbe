//! One Pod's life on a runner Node, like kubelet's pod worker: create the sandbox (network
//! namespace, hostname, hosts files, volumes), run init containers in order and then the
//! containers, supervise them (exits, restart policy with back-off, probes, image changes), write
//! the Pod's status whenever it changes, and on deletion run preStop hooks, send SIGTERM, wait the
//! grace period, SIGKILL, tear the sandbox down and delete the Pod with grace period 0.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::container_env::{kubelet_env, process_env, PodPlace};
use super::dns::PodHosts;
use super::exec::ExecTarget;
use super::images::{container_argv, resolve_command, ResolvedImage};
use super::network::PodNetwork;
use super::probes::{self, ProbeTarget, Probes, SharedProbeState};
use super::registry::{ContainerEntry, PodEntry};
use super::sandbox::{self, BindMount, Identity, Plan};
use super::status::{self, ContainerView, State, Terminated};
use super::volumes::{self, Volumes};
use super::Ctx;
use crate::env::process::Process;

/// How often a Pod worker looks at its processes when nothing else wakes it.
const TICK: Duration = Duration::from_millis(200);
/// How often Secret/ConfigMap/downward API volumes are re-read.
const VOLUME_REFRESH: Duration = Duration::from_secs(5);
/// A container that ran this long resets its restart back-off.
const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
/// Termination messages are cut to this many bytes (kubelet's limit).
const MAX_TERMINATION_MESSAGE: usize = 4096;

/// Why a running container is being stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
enum StopReason {
    /// A liveness or startup probe gave up: restart per restart policy.
    Unhealthy(String),
    /// Its image changed in the spec: restart whatever the policy.
    SpecChanged,
    /// The Pod is being deleted: never restart.
    Deleting,
}

#[derive(Debug)]
struct Stopping {
    reason: StopReason,
    deadline: Instant,
    pre_stop: Option<JoinHandle<()>>,
    term_sent: bool,
    killed: bool,
}

#[derive(Debug)]
struct Instance {
    process: Process,
    index: u32,
    started_at: Timestamp,
    since: Instant,
    image: String,
    container_id: String,
    termination_log: Option<PathBuf>,
    log: PathBuf,
    probe_state: SharedProbeState,
    _probes: Probes,
    target: ProbeTarget,
    stopping: Option<Stopping>,
}

#[derive(Debug)]
struct ContainerRun {
    name: String,
    init: bool,
    starts: u32,
    instance: Option<Instance>,
    state: State,
    last: Option<Terminated>,
    image_id: String,
    container_id: Option<String>,
    backoff: Duration,
    retry_at: Option<Instant>,
    image_failures: u32,
    /// Exited for good (an init container that succeeded, or no restart by policy).
    done: bool,
}

impl ContainerRun {
    fn new(name: &str, init: bool) -> Self {
        Self {
            name: name.to_string(),
            init,
            starts: 0,
            instance: None,
            state: State::waiting("ContainerCreating", None),
            last: None,
            image_id: String::new(),
            container_id: None,
            backoff: Duration::ZERO,
            retry_at: None,
            image_failures: 0,
            done: false,
        }
    }

    fn succeeded(&self) -> bool {
        matches!(&self.state, State::Terminated(t) if t.exit_code == 0)
    }
}

#[derive(Debug)]
struct Sandbox {
    network: Option<PodNetwork>,
    ip: IpAddr,
    proxy: Option<JoinHandle<()>>,
    hosts_file: Option<PathBuf>,
    hostname_file: PathBuf,
    resolv_file: PathBuf,
    hostname: String,
}

/// Whether the worker goes on.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Finished,
}

pub struct PodWorker {
    ctx: Arc<Ctx>,
    entry: Arc<PodEntry>,
    rx: watch::Receiver<Option<Arc<Pod>>>,
    shutdown: watch::Receiver<bool>,
    uid: String,
    ns: String,
    name: String,
    pod_dir: PathBuf,
    log_dir: PathBuf,
    sandbox: Option<Sandbox>,
    sandbox_error: Option<String>,
    pod_ip: Option<IpAddr>,
    volumes: Volumes,
    containers: Vec<ContainerRun>,
    conditions: BTreeMap<String, (bool, Timestamp)>,
    start_time: Option<Timestamp>,
    last_status: Option<Value>,
    terminating: Option<Instant>,
    terminal: bool,
    last_refresh: Instant,
}

fn exit_code(status: std::process::ExitStatus) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code, None),
        (None, Some(sig)) => (128 + sig, Some(sig)),
        (None, None) => (255, None),
    }
}

fn pid_of(p: u32) -> Option<Pid> {
    i32::try_from(p).ok().map(Pid::from_raw)
}

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("path {} contains NUL", p.display()))
}

fn restart_policy(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_else(|| "Always".to_string())
}

fn container_spec<'a>(pod: &'a Pod, name: &str, init: bool) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    if init {
        spec.init_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
    } else {
        spec.containers.iter().find(|c| c.name == name)
    }
}

/// The uid, gid and groups a container runs with, or why it may not run (runAsNonRoot). The user: its securityContext's, else the Pod's, else the image's `User`
/// (`image_user`), else root.
fn identity(
    pod: &Pod,
    container: &Container,
    image_user: Option<(u32, u32)>,
) -> Result<(Identity, bool, bool), String> {
    let psc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let csc = container.security_context.clone().unwrap_or_default();
    let set_uid = csc.run_as_user.or(psc.run_as_user);
    let (image_uid, image_gid) = image_user.unwrap_or((0, 0));
    let uid = set_uid.unwrap_or(i64::from(image_uid));
    // The image's group goes with the image's user only (a runtime takes runAsUser's group from
    // the image's /etc/passwd; no Pod here sets runAsUser without runAsGroup).
    let gid = csc
        .run_as_group
        .or(psc.run_as_group)
        .unwrap_or(if set_uid.is_none() {
            i64::from(image_gid)
        } else {
            0
        });
    let non_root = csc.run_as_non_root.or(psc.run_as_non_root).unwrap_or(false);
    if non_root && uid == 0 {
        return Err(format!(
            "container {:?} has runAsNonRoot and image will run as root (set runAsUser)",
            container.name
        ));
    }
    let mut groups: Vec<u32> = Vec::new();
    if let Some(g) = psc.fs_group.and_then(|g| u32::try_from(g).ok()) {
        groups.push(g);
    }
    for g in psc.supplemental_groups.iter().flatten() {
        if let Ok(g) = u32::try_from(*g) {
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
    }
    let uid = u32::try_from(uid).map_err(|_| format!("invalid runAsUser {uid}"))?;
    let gid = u32::try_from(gid).map_err(|_| format!("invalid runAsGroup {gid}"))?;
    let no_new_privs = csc.allow_privilege_escalation == Some(false);
    let readonly_root = csc.read_only_root_filesystem == Some(true);
    Ok((Identity { uid, gid, groups }, no_new_privs, readonly_root))
}

/// Bind a Pod's own network namespace to a listener on 127.0.0.1:`port` inside it that forwards
/// to the apiserver on the host's loopback, so in-cluster clients find `KUBERNETES_SERVICE_HOST`.
async fn apiserver_proxy(netns: PathBuf, port: u16) -> Result<JoinHandle<()>, String> {
    let listener = tokio::task::spawn_blocking(move || {
        // A thread of its own: it changes network namespace for good and then ends.
        std::thread::spawn(move || -> std::io::Result<std::net::TcpListener> {
            let ns = fs::File::open(&netns)?;
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)?;
            let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .join()
    })
    .await
    .map_err(|e| format!("apiserver proxy: {e}"))?
    .map_err(|_| "apiserver proxy thread panicked".to_string())?
    .map_err(|e| format!("binding the apiserver proxy on 127.0.0.1:{port} in the pod: {e}"))?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }))
}

impl PodWorker {
    pub fn new(
        ctx: Arc<Ctx>,
        pod: &Pod,
        rx: watch::Receiver<Option<Arc<Pod>>>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
        let pod_dir = ctx.state_dir.join("pods").join(&uid);
        let log_dir = ctx.log_root.join(format!("{ns}_{name}_{short}"));
        let entry = Arc::new(PodEntry {
            namespace: ns.clone(),
            name: name.clone(),
            uid: uid.clone(),
            since: Instant::now(),
            state: Mutex::new(Default::default()),
            execs: Mutex::default(),
        });
        ctx.registry.insert(entry.clone());
        let mut containers = Vec::new();
        if let Some(spec) = &pod.spec {
            for c in spec.init_containers.iter().flatten() {
                containers.push(ContainerRun::new(&c.name, true));
            }
            for c in &spec.containers {
                containers.push(ContainerRun::new(&c.name, false));
            }
        }
        if let Ok(mut state) = entry.state.lock() {
            for c in &containers {
                state.containers.insert(
                    c.name.clone(),
                    ContainerEntry {
                        log_dir: log_dir.join(&c.name),
                        ..ContainerEntry::default()
                    },
                );
            }
        }
        // Resume the restart count a previous runner reported (a runner restart is a kubelet
        // restart: the containers start again, counted as restarts).
        let previous: BTreeMap<String, i32> = pod
            .status
            .iter()
            .flat_map(|s| {
                s.container_statuses
                    .iter()
                    .flatten()
                    .chain(s.init_container_statuses.iter().flatten())
            })
            .map(|c| (c.name.clone(), c.restart_count))
            .collect();
        for c in &mut containers {
            if let Some(n) = previous.get(&c.name).filter(|n| **n > 0) {
                c.starts = u32::try_from(*n).unwrap_or(0) + 1;
            }
        }
        Self {
            volumes: Volumes::new(&pod_dir),
            ctx,
            entry,
            rx,
            shutdown,
            uid,
            ns,
            name,
            pod_dir,
            log_dir,
            sandbox: None,
            sandbox_error: None,
            pod_ip: None,
            containers,
            conditions: BTreeMap::new(),
            start_time: None,
            last_status: None,
            terminating: None,
            terminal: false,
            last_refresh: Instant::now(),
        }
    }

    fn note(&self, line: &str) {
        self.ctx.journal(&format!(
            "{}/{} ({}): {line}",
            self.ns, self.name, &self.uid
        ));
    }

    pub async fn run(mut self) {
        let first = self.rx.borrow().clone();
        if let Some(pod) = &first {
            // A Pod that finished before this runner saw it is left as it is.
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed"))
                && pod.metadata.deletion_timestamp.is_none()
            {
                self.terminal = true;
            }
        }
        loop {
            if *self.shutdown.borrow() {
                self.kill_all();
                self.release_sandbox().await;
                break;
            }
            let pod = self.rx.borrow_and_update().clone();
            let flow = match pod {
                None => {
                    self.note("deleted from the API; killing its containers");
                    self.kill_all();
                    self.release_sandbox().await;
                    Flow::Finished
                }
                Some(pod) => self.sync(&pod).await,
            };
            if flow == Flow::Finished {
                break;
            }
            tokio::select! {
                changed = self.rx.changed() => {
                    if changed.is_err() {
                        // The dispatcher is gone: the runner is stopping.
                        self.kill_all();
                        self.release_sandbox().await;
                        break;
                    }
                }
                _ = self.shutdown.changed() => {}
                _ = tokio::time::sleep(TICK) => {}
            }
        }
        let _ = fs::remove_dir_all(&self.pod_dir);
        self.ctx.registry.remove(&self.uid);
    }

    async fn sync(&mut self, pod: &Pod) -> Flow {
        if pod.metadata.deletion_timestamp.is_some() {
            return self.terminate(pod).await;
        }
        if self.terminal {
            return Flow::Continue;
        }
        if self.start_time.is_none() {
            self.start_time = Some(Timestamp::now());
        }
        if self.sandbox.is_none() {
            match self.create_sandbox(pod).await {
                Ok(sandbox) => {
                    self.pod_ip = Some(sandbox.ip);
                    self.sandbox = Some(sandbox);
                    self.sandbox_error = None;
                }
                Err(message) => {
                    if self.sandbox_error.as_deref() != Some(message.as_str()) {
                        self.note(&format!("sandbox: {message}"));
                    }
                    self.sandbox_error = Some(message);
                    self.write_status(pod, false).await;
                    return Flow::Continue;
                }
            }
        }
        let host_ip = self.ctx.host_ip.clone();
        let pod_ip = self.pod_ip.map(|ip| ip.to_string());
        let place = volumes::Place {
            client: &self.ctx.client,
            pod,
            host_ip: &host_ip,
            pod_ip: pod_ip.as_deref(),
            allocatable: self.ctx.allocatable,
        };
        if let Err(message) = self.volumes.set_up(&place).await {
            if self.sandbox_error.as_deref() != Some(message.as_str()) {
                self.note(&format!("volumes: {message}"));
            }
            self.sandbox_error = Some(message);
            self.write_status(pod, false).await;
            return Flow::Continue;
        }
        self.sandbox_error = None;
        if self.last_refresh.elapsed() >= VOLUME_REFRESH {
            self.last_refresh = Instant::now();
            for name in self.volumes.refresh(&place).await {
                self.note(&format!("volume {name:?} updated"));
            }
        }

        let policy = restart_policy(pod);
        let mut initialized = true;
        for i in 0..self.containers.len() {
            if !self.containers[i].init {
                continue;
            }
            self.drive(i, pod, &policy).await;
            if !self.containers[i].succeeded() {
                initialized = false;
                break;
            }
        }
        for i in 0..self.containers.len() {
            if self.containers[i].init {
                continue;
            }
            if initialized {
                self.drive(i, pod, &policy).await;
            } else if self.containers[i].instance.is_none() {
                self.containers[i].state = State::waiting("PodInitializing", None);
            }
        }
        let (init, main) = self.views();
        let phase = status::phase(&init, &main, &policy, false);
        if phase == "Succeeded" || phase == "Failed" {
            self.note(&format!("reached phase {phase}"));
            self.terminal = true;
            self.write_status(pod, false).await;
            self.release_sandbox().await;
            return Flow::Continue;
        }
        self.write_status(pod, false).await;
        Flow::Continue
    }

    async fn create_sandbox(&mut self, pod: &Pod) -> Result<Sandbox, String> {
        let spec = pod.spec.clone().unwrap_or_default();
        let host_network = spec.host_network == Some(true);
        let node = spec.node_name.clone().unwrap_or_default();
        let mut hostname = if host_network {
            node.clone()
        } else {
            spec.hostname.clone().unwrap_or_else(|| self.name.clone())
        };
        hostname.truncate(63);
        let hostname = hostname.trim_end_matches(['-', '.']).to_string();
        fs::create_dir_all(&self.pod_dir)
            .map_err(|e| format!("creating {}: {e}", self.pod_dir.display()))?;
        let hostname_file = self.pod_dir.join("etc-hostname");
        fs::write(&hostname_file, format!("{hostname}\n")).map_err(|e| e.to_string())?;
        let resolv_file = self.pod_dir.join("resolv.conf");
        // No name server anyone could reach: names resolve through the hosts file only.
        fs::write(
            &resolv_file,
            format!(
                "# etcd-operator test pod runner: cluster names are in /etc/hosts\nnameserver 127.0.0.1\nsearch {ns}.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
                ns = self.ns
            ),
        )
        .map_err(|e| e.to_string())?;
        if host_network {
            return Ok(Sandbox {
                network: None,
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                proxy: None,
                hosts_file: None,
                hostname_file,
                resolv_file,
                hostname,
            });
        }
        let ip = self
            .ctx
            .ip_pool
            .lock()
            .ok()
            .and_then(|mut p| p.allocate())
            .ok_or_else(|| "no free pod IP in the runner's /24".to_string())?;
        let key: String = self
            .uid
            .chars()
            .filter(|c| c.is_ascii_hexdigit())
            .take(8)
            .collect();
        let network = match PodNetwork::create(self.ctx.slot_n, &key, ip).await {
            Ok(n) => n,
            Err(e) => {
                if let Ok(mut p) = self.ctx.ip_pool.lock() {
                    p.release(ip);
                }
                return Err(format!("creating the pod network: {e}"));
            }
        };
        let proxy = match apiserver_proxy(network.netns_path(), self.ctx.apiserver_port).await {
            Ok(p) => p,
            Err(e) => {
                let n = network.clone();
                let _ = tokio::task::spawn_blocking(move || n.delete_blocking()).await;
                if let Ok(mut p) = self.ctx.ip_pool.lock() {
                    p.release(ip);
                }
                return Err(e);
            }
        };
        let hosts_file = self.pod_dir.join("etc-hosts");
        let aliases = spec
            .host_aliases
            .iter()
            .flatten()
            .map(|a| (a.ip.clone(), a.hostnames.clone().unwrap_or_default()))
            .collect();
        self.ctx.dns.add_pod(
            &self.uid,
            &hosts_file,
            PodHosts {
                namespace: self.ns.clone(),
                ip: Some(IpAddr::V4(ip)),
                hostname: hostname.clone(),
                subdomain: spec.subdomain.clone().filter(|s| !s.is_empty()),
                aliases,
            },
        );
        if let Ok(mut state) = self.entry.state.lock() {
            state.network = Some(network.clone());
            state.hosts_file = Some(hosts_file.clone());
        }
        self.note(&format!("sandbox up: {} ip {ip}", network.netns));
        Ok(Sandbox {
            network: Some(network),
            ip: IpAddr::V4(ip),
            proxy: Some(proxy),
            hosts_file: Some(hosts_file),
            hostname_file,
            resolv_file,
            hostname,
        })
    }

    /// Stop the network, the apiserver proxy and tmpfs volumes; the status keeps the Pod IP.
    async fn release_sandbox(&mut self) {
        self.entry.kill_execs(None);
        self.volumes.tear_down();
        let Some(sandbox) = self.sandbox.take() else {
            return;
        };
        if let Some(proxy) = &sandbox.proxy {
            proxy.abort();
        }
        self.ctx.dns.remove_pod(&self.uid);
        if let Some(network) = sandbox.network {
            let ip = network.ip;
            let n = network.clone();
            let _ = tokio::task::spawn_blocking(move || n.delete_blocking()).await;
            if let Ok(mut p) = self.ctx.ip_pool.lock() {
                p.release(ip);
            }
        }
        if let Ok(mut state) = self.entry.state.lock() {
            state.network = None;
        }
    }

    fn kill_all(&mut self) {
        self.entry.kill_execs(None);
        for c in &mut self.containers {
            if let Some(inst) = c.instance.take() {
                inst.process.kill();
            }
        }
        if let Ok(mut state) = self.entry.state.lock() {
            for c in state.containers.values_mut() {
                c.running = None;
            }
        }
    }

    /// Start, supervise or restart container `i`.
    async fn drive(&mut self, i: usize, pod: &Pod, policy: &str) {
        let name = self.containers[i].name.clone();
        let init = self.containers[i].init;
        let Some(spec) = container_spec(pod, &name, init).cloned() else {
            return;
        };
        if self.containers[i].instance.is_some() {
            self.supervise(i, pod, &spec, policy);
            return;
        }
        let c = &self.containers[i];
        if c.done || self.terminating.is_some() {
            return;
        }
        if c.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.start(i, pod, &spec, policy).await;
    }

    /// The Pod spec's `terminationGracePeriodSeconds`, if set.
    fn spec_grace(pod: &Pod) -> Option<i64> {
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
    }

    fn grace(pod: &Pod, probe_grace: Option<i64>) -> Duration {
        let seconds = probe_grace
            .or_else(|| Self::spec_grace(pod))
            .unwrap_or(30)
            .max(0);
        Duration::from_secs(u64::try_from(seconds).unwrap_or(30))
    }

    fn supervise(&mut self, i: usize, pod: &Pod, spec: &Container, policy: &str) {
        let exited = self.containers[i]
            .instance
            .as_ref()
            .and_then(|inst| inst.process.exited());
        if let Some(status) = exited {
            let Some(inst) = self.containers[i].instance.take() else {
                return;
            };
            // Whatever the main process left in its group dies with it, and so does every
            // command exec'd into the container (the PID namespace of a real container goes
            // away with PID 1).
            inst.process.kill();
            self.entry.kill_execs(Some(&self.containers[i].name));
            let (code, signal) = exit_code(status);
            let message = self.termination_message(&inst, spec, code);
            let term = Terminated {
                exit_code: code,
                signal,
                reason: if code == 0 { "Completed" } else { "Error" }.to_string(),
                message,
                started_at: Some(inst.started_at),
                finished_at: Timestamp::now(),
                container_id: Some(inst.container_id.clone()),
            };
            let restart_anyway = inst
                .stopping
                .as_ref()
                .is_some_and(|s| s.reason == StopReason::SpecChanged);
            let deleting = inst
                .stopping
                .as_ref()
                .is_some_and(|s| s.reason == StopReason::Deleting);
            self.note(&format!(
                "container {} (#{}) exited with {code}{}",
                self.containers[i].name,
                inst.index,
                signal.map(|s| format!(" (signal {s})")).unwrap_or_default()
            ));
            if let Ok(mut state) = self.entry.state.lock() {
                if let Some(entry) = state.containers.get_mut(&self.containers[i].name) {
                    entry.running = None;
                }
            }
            self.record_exit(
                i,
                term,
                policy,
                inst.since.elapsed(),
                restart_anyway,
                deleting,
            );
            return;
        }
        let grace = {
            let inst = self.containers[i].instance.as_ref();
            let probe_grace = inst
                .and_then(|x| x.probe_state.lock().ok().and_then(|s| s.kill.clone()))
                .and_then(|_| {
                    spec.liveness_probe
                        .as_ref()
                        .and_then(|p| p.termination_grace_period_seconds)
                        .or_else(|| {
                            spec.startup_probe
                                .as_ref()
                                .and_then(|p| p.termination_grace_period_seconds)
                        })
                });
            Self::grace(pod, probe_grace)
        };
        let name = self.containers[i].name.clone();
        let mut note = None;
        if let Some(inst) = self.containers[i].instance.as_mut() {
            if inst.stopping.is_none() {
                let kill = inst.probe_state.lock().ok().and_then(|s| s.kill.clone());
                if let Some(message) = kill {
                    note = Some(format!("container {name}: {message}; restarting"));
                    inst.stopping = Some(begin_stop(
                        inst,
                        spec,
                        StopReason::Unhealthy(message),
                        grace,
                    ));
                } else if inst.image != spec.image.clone().unwrap_or_default() {
                    note = Some(format!(
                        "container {name}: image changed to {:?}; restarting",
                        spec.image
                    ));
                    inst.stopping = Some(begin_stop(inst, spec, StopReason::SpecChanged, grace));
                }
            }
            advance_stop(inst);
        }
        if let Some(note) = note {
            self.note(&note);
        }
    }

    /// What happens after an instance ended (or failed to start): done, or back-off and restart.
    fn record_exit(
        &mut self,
        i: usize,
        term: Terminated,
        policy: &str,
        ran_for: Duration,
        restart_anyway: bool,
        deleting: bool,
    ) {
        let initial = self.ctx.backoff.0;
        let max = self.ctx.backoff.1;
        let c = &mut self.containers[i];
        c.container_id = term.container_id.clone();
        let failed = term.exit_code != 0;
        let restart = !deleting
            && self.terminating.is_none()
            && (restart_anyway
                || if c.init {
                    failed && policy != "Never"
                } else {
                    match policy {
                        "Never" => false,
                        "OnFailure" => failed,
                        _ => true,
                    }
                });
        if !restart {
            c.state = State::Terminated(term);
            c.done = true;
            return;
        }
        if ran_for >= BACKOFF_RESET_AFTER || c.backoff.is_zero() {
            c.backoff = initial;
        } else {
            c.backoff = (c.backoff * 2).min(max);
        }
        if restart_anyway {
            c.retry_at = None;
        } else {
            c.retry_at = Some(Instant::now() + c.backoff);
        }
        c.state = State::waiting(
            "CrashLoopBackOff",
            Some(format!(
                "back-off {:?} restarting failed container={} pod={}_{}({})",
                c.backoff, c.name, self.name, self.ns, self.uid
            )),
        );
        c.last = Some(term);
    }

    fn termination_message(&self, inst: &Instance, spec: &Container, code: i32) -> Option<String> {
        let from_file = inst
            .termination_log
            .as_ref()
            .and_then(|p| fs::read(p).ok())
            .map(|mut b| {
                b.truncate(MAX_TERMINATION_MESSAGE);
                String::from_utf8_lossy(&b).into_owned()
            })
            .filter(|m| !m.is_empty());
        if from_file.is_some() {
            return from_file;
        }
        if code != 0 && spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
        {
            let tail = crate::env::logs::tail(&inst.log, 80);
            let start = tail.len().saturating_sub(2048);
            let start = (start..tail.len())
                .find(|i| tail.is_char_boundary(*i))
                .unwrap_or(tail.len());
            return Some(tail[start..].to_string()).filter(|m| !m.is_empty());
        }
        None
    }

    async fn start(&mut self, i: usize, pod: &Pod, spec: &Container, policy: &str) {
        let name = spec.name.clone();
        if self.containers[i].init && spec.restart_policy.as_deref() == Some("Always") {
            self.config_error(
                i,
                format!(
                    "init container {name:?} has restartPolicy Always (a sidecar); the pod runner \
                     does not support sidecar containers"
                ),
            );
            return;
        }
        let image_ref = spec.image.clone().unwrap_or_default();
        let image = match self.ctx.images.resolve(&image_ref) {
            Ok(image) => image,
            Err(message) => {
                let c = &mut self.containers[i];
                c.image_failures += 1;
                let reason = if c.image_failures == 1 {
                    "ErrImagePull"
                } else {
                    "ImagePullBackOff"
                };
                if c.image_failures == 1 {
                    self.note(&format!("container {name}: {message}"));
                }
                let c = &mut self.containers[i];
                c.state = State::waiting(reason, Some(message));
                let backoff = self.ctx.backoff.0 * 2u32.saturating_pow(c.image_failures.min(6));
                c.retry_at = Some(Instant::now() + backoff.min(self.ctx.backoff.1));
                return;
            }
        };
        self.containers[i].image_failures = 0;
        self.containers[i].image_id = image.image_id.clone();
        let (id, no_new_privs, readonly_root) = match identity(pod, spec, image.user) {
            Ok(x) => x,
            Err(message) => {
                self.config_error(i, message);
                return;
            }
        };
        let host_ip = self.ctx.host_ip.clone();
        let pod_ip = self.pod_ip.map(|ip| ip.to_string());
        let host_network = self.sandbox.as_ref().is_some_and(|s| s.network.is_none());
        let place = PodPlace {
            pod,
            host_ip: &host_ip,
            pod_ip: pod_ip.as_deref(),
            allocatable: self.ctx.allocatable,
            apiserver_host: "127.0.0.1",
            apiserver_port: self.ctx.apiserver_port,
        };
        let kube_env = match kubelet_env(&self.ctx.client, &place, spec).await {
            Ok(env) => env,
            Err(message) => {
                self.config_error(i, message);
                return;
            }
        };
        let hostname = self
            .sandbox
            .as_ref()
            .map(|s| s.hostname.clone())
            .unwrap_or_default();
        let path_var = image.path_env();
        let env = process_env(
            &kube_env,
            &image.env,
            &path_var,
            &hostname,
            &image.home(id.uid),
        );
        let expand_all = |words: &Option<Vec<String>>| -> Vec<String> {
            words.iter().flatten().map(|a| kube_env.expand(a)).collect()
        };
        let command = expand_all(&spec.command);
        let args = expand_all(&spec.args);
        let argv = container_argv(&image, &command, &args);

        let index = self.containers[i].starts;
        self.containers[i].starts += 1;
        let container_id = format!("pod-runner://{}-{}-{}", &self.uid, name, index);
        let log_dir = self.log_dir.join(&name);
        let log = log_dir.join(format!("{index}.log"));
        let _ = fs::create_dir_all(&log_dir);
        if let Ok(mut state) = self.entry.state.lock() {
            if let Some(entry) = state.containers.get_mut(&name) {
                entry.current = Some(index);
                entry.running = None;
            }
        }
        let started_at = Timestamp::now();
        let program = match argv.first() {
            None => Err(format!(
                "no command specified: the container sets no command and image {image_ref} has no default"
            )),
            Some(program) => match self.volume_program(spec, program) {
                Some(found) => found,
                None => resolve_command(&image, program).map(|p| image.in_container(&p)),
            },
        };
        let program = match program {
            Ok(p) => p,
            Err(message) => {
                let _ = fs::write(&log, b"");
                self.start_error(i, policy, started_at, container_id, message);
                return;
            }
        };
        let termination_path = spec
            .termination_message_path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/dev/termination-log".to_string());
        let termination_log = self
            .pod_dir
            .join("containers")
            .join(&name)
            .join(format!("termination-log-{index}"));
        let mounts = match self.mounts(
            spec,
            &image,
            &kube_env,
            &termination_path,
            &termination_log,
            &id,
            host_network,
        ) {
            Ok(m) => m,
            Err(message) => {
                self.containers[i].starts -= 1;
                let c = &mut self.containers[i];
                c.state = State::waiting("CreateContainerError", Some(message));
                c.retry_at = Some(Instant::now() + self.ctx.backoff.0);
                return;
            }
        };
        let workdir = spec
            .working_dir
            .clone()
            .filter(|w| !w.is_empty())
            .or_else(|| image.working_dir.clone());
        let plan = Plan {
            join_net: match self.sandbox.as_ref().and_then(|s| s.network.as_ref()) {
                Some(net) => match fs::File::open(net.netns_path()) {
                    Ok(f) => Some(f),
                    Err(e) => {
                        self.start_error(
                            i,
                            policy,
                            started_at,
                            container_id,
                            format!("opening the pod's network namespace: {e}"),
                        );
                        return;
                    }
                },
                None => None,
            },
            new_mount_namespace: true,
            readonly_root,
            mounts,
            hostname: Some(OsString::from(&hostname)),
            identity: Some(id.clone()),
            no_new_privs,
            workdir: Some(match &workdir {
                Some(w) => match c_path(Path::new(w)) {
                    Ok(c) => c,
                    Err(m) => {
                        self.start_error(i, policy, started_at, container_id, m);
                        return;
                    }
                },
                None => CString::from(c"/"),
            }),
            ..Plan::default()
        };
        let mut cmd = std::process::Command::new(&program);
        cmd.arg0(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(env.vars().iter().map(|(k, v)| (k, v)));
        let progress = match sandbox::install(&mut cmd, plan) {
            Ok(p) => p,
            Err(e) => {
                self.start_error(
                    i,
                    policy,
                    started_at,
                    container_id,
                    format!("preparing the container: {e}"),
                );
                return;
            }
        };
        let label = format!("pod {}/{} container {name} #{index}", self.ns, self.name);
        let process = match Process::spawn(&label, cmd, &log) {
            Ok(p) => p,
            Err(e) => {
                let step = progress.failed_step();
                self.start_error(
                    i,
                    policy,
                    started_at,
                    container_id,
                    format!(
                        "failed to start {} ({}) while {step}: {e}",
                        argv[0],
                        program.display()
                    ),
                );
                return;
            }
        };
        drop(progress);
        self.note(&format!(
            "container {name} #{index} started: pid {} {} {:?} as uid {} gid {} groups {:?}",
            process.pid(),
            program.display(),
            &argv[1..],
            id.uid,
            id.gid,
            id.groups
        ));
        let target = ProbeTarget {
            pod_ip: self.pod_ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            ports: spec.ports.clone().unwrap_or_default(),
            exec: ExecTarget {
                name: format!("{}/{}/{name}", self.ns, self.name),
                pid: process.pid(),
                env: env.vars().to_vec(),
                identity: Some(id),
                image: image.clone(),
                workdir: workdir.map(PathBuf::from),
                no_new_privs,
            },
        };
        let probe_state: SharedProbeState = Arc::default();
        let probes = if self.containers[i].init {
            probes::spawn(None, None, None, target.clone(), probe_state.clone())
        } else {
            probes::spawn(
                spec.startup_probe.clone(),
                spec.liveness_probe.clone(),
                spec.readiness_probe.clone(),
                target.clone(),
                probe_state.clone(),
            )
        };
        if let Ok(mut state) = self.entry.state.lock() {
            if let Some(entry) = state.containers.get_mut(&name) {
                entry.running = Some(target.exec.clone());
            }
        }
        let c = &mut self.containers[i];
        c.container_id = Some(container_id.clone());
        c.state = State::Running { started_at };
        c.instance = Some(Instance {
            process,
            index,
            started_at,
            since: Instant::now(),
            image: image_ref,
            container_id,
            termination_log: Some(termination_log),
            log,
            probe_state,
            _probes: probes,
            target,
            stopping: None,
        });
    }

    fn config_error(&mut self, i: usize, message: String) {
        let c = &mut self.containers[i];
        if !matches!(&c.state, State::Waiting { reason, message: m } if reason == "CreateContainerConfigError" && m.as_deref() == Some(message.as_str()))
        {
            let name = c.name.clone();
            self.note(&format!(
                "container {name}: CreateContainerConfigError: {message}"
            ));
        }
        let c = &mut self.containers[i];
        c.state = State::waiting("CreateContainerConfigError", Some(message));
        c.retry_at = Some(Instant::now() + Duration::from_secs(1));
    }

    /// A container that could not be started at all: like containerd's `StartError`, a
    /// terminated instance with exit code 128, then the restart policy.
    fn start_error(
        &mut self,
        i: usize,
        policy: &str,
        started_at: Timestamp,
        container_id: String,
        message: String,
    ) {
        self.note(&format!(
            "container {}: StartError: {message}",
            self.containers[i].name
        ));
        let term = Terminated {
            exit_code: 128,
            signal: None,
            reason: "StartError".to_string(),
            message: Some(message),
            started_at: Some(started_at),
            finished_at: Timestamp::now(),
            container_id: Some(container_id),
        };
        self.record_exit(i, term, policy, Duration::ZERO, false, false);
    }

    /// The container's bind mounts: volumes at their `mountPath`s (`subPath` inside them), the
    /// Pod's hosts, hostname and resolv.conf files, and the termination-message file. Mount points
    /// are created where needed: inside the parent volume for nested mounts, else on the host as
    /// empty directories (or empty files), which is harmless.
    /// A command given by an absolute path under one of the container's volume mounts (a binary
    /// an init container copied into an emptyDir) runs from the volume, as on a real node: the
    /// in-container path, after checking the file is there and executable in the volume.
    /// `None` when the path is not under a volume mount (then the image is searched).
    fn volume_program(&self, spec: &Container, program: &str) -> Option<Result<PathBuf, String>> {
        let path = Path::new(program);
        if !path.is_absolute() {
            return None;
        }
        let (vm, rest) = spec.volume_mounts.iter().flatten().find_map(|vm| {
            path.strip_prefix(&vm.mount_path)
                .ok()
                .filter(|rest| !rest.as_os_str().is_empty())
                .map(|rest| (vm, rest.to_path_buf()))
        })?;
        let volume = self.volumes.dirs.get(&vm.name)?;
        let sub = vm.sub_path.as_deref().filter(|s| !s.is_empty());
        let host = match sub {
            Some(sub) => volume.path.join(sub).join(&rest),
            None => volume.path.join(&rest),
        };
        let executable = fs::metadata(&host)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        Some(if executable {
            Ok(path.to_path_buf())
        } else {
            Err(format!(
                "exec: {program:?}: no such executable file in volume {:?} mounted at {}",
                vm.name, vm.mount_path
            ))
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn mounts(
        &self,
        spec: &Container,
        image: &ResolvedImage,
        env: &super::container_env::EnvList,
        termination_path: &str,
        termination_log: &Path,
        id: &Identity,
        host_network: bool,
    ) -> Result<Vec<BindMount>, String> {
        let mut wanted: Vec<(PathBuf, PathBuf, bool)> = Vec::new();
        for vm in spec.volume_mounts.iter().flatten() {
            let volume =
                self.volumes.dirs.get(&vm.name).ok_or_else(|| {
                    format!("volumeMount {:?} names no volume of the pod", vm.name)
                })?;
            let sub = match (&vm.sub_path, &vm.sub_path_expr) {
                (Some(s), _) if !s.is_empty() => Some(s.clone()),
                (_, Some(e)) if !e.is_empty() => Some(env.expand(e)),
                _ => None,
            };
            let source = match sub {
                Some(sub) => {
                    let rel = volumes::safe_relative(&sub)
                        .map_err(|m| format!("volumeMount {:?} subPath: {m}", vm.name))?;
                    let source = volume.path.join(rel);
                    if fs::symlink_metadata(&source).is_err() {
                        fs::create_dir_all(&source)
                            .map_err(|e| format!("creating subPath {}: {e}", source.display()))?;
                        if let Some(gid) = self.fs_group() {
                            let _ = volumes::apply_fs_group(&source, gid, false);
                        }
                    }
                    let resolved = fs::canonicalize(&source)
                        .map_err(|e| format!("subPath {}: {e}", source.display()))?;
                    // A symlink in a volume must not lead a subPath out of it (kubelet's rule).
                    // Payload volumes resolve through their own `..data` directory.
                    let root =
                        fs::canonicalize(&volume.path).unwrap_or_else(|_| volume.path.clone());
                    if !resolved.starts_with(&root) {
                        return Err(format!(
                            "subPath {:?} of volume {:?} leads outside the volume",
                            sub_display(&source, &volume.path),
                            vm.name
                        ));
                    }
                    resolved
                }
                None => volume.path.clone(),
            };
            let target = PathBuf::from(&vm.mount_path);
            if !target.is_absolute() || target == Path::new("/") {
                return Err(format!(
                    "mountPath {:?} must be an absolute path other than /",
                    vm.mount_path
                ));
            }
            wanted.push((
                source,
                target,
                vm.read_only == Some(true) || volume.readonly,
            ));
        }
        for (dir, at) in image.mounts() {
            wanted.push((dir.clone(), at.clone(), true));
        }
        if let Some(sandbox) = &self.sandbox {
            if !host_network {
                if let Some(hosts) = &sandbox.hosts_file {
                    wanted.push((hosts.clone(), PathBuf::from("/etc/hosts"), true));
                }
                wanted.push((
                    sandbox.hostname_file.clone(),
                    PathBuf::from("/etc/hostname"),
                    true,
                ));
                wanted.push((
                    sandbox.resolv_file.clone(),
                    PathBuf::from("/etc/resolv.conf"),
                    true,
                ));
            }
        }
        if let Some(dir) = termination_log.parent() {
            fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        fs::write(termination_log, b"").map_err(|e| e.to_string())?;
        let _ = std::os::unix::fs::chown(termination_log, Some(id.uid), Some(id.gid));
        let _ = fs::set_permissions(termination_log, fs::Permissions::from_mode(0o666));
        wanted.push((
            termination_log.to_path_buf(),
            PathBuf::from(termination_path),
            false,
        ));

        // Parents before children, so a nested mount lands inside its parent volume.
        wanted.sort_by_key(|(_, target, _)| target.components().count());
        // A container's own /tmp, as its image filesystem would give it (`kubectl cp` unpacks
        // there), unless a volume covers it. Mounted last: the sources of the other mounts live
        // under the host's /tmp.
        if !wanted.iter().any(|(_, t, _)| t.starts_with("/tmp")) {
            if let Some(dir) = termination_log.parent() {
                let tmp = dir.join("tmp");
                fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
                fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777))
                    .map_err(|e| format!("chmod {}: {e}", tmp.display()))?;
                wanted.push((tmp, PathBuf::from("/tmp"), false));
            }
        }
        let mut out = Vec::new();
        for (k, (source, target, readonly)) in wanted.iter().enumerate() {
            let parent = wanted[..k]
                .iter()
                .filter(|(_, t, _)| target.starts_with(t) && target != t)
                .max_by_key(|(_, t, _)| t.components().count());
            let mount_point = match parent {
                Some((psource, ptarget, _)) => match target.strip_prefix(ptarget) {
                    Ok(rel) => psource.join(rel),
                    Err(_) => target.clone(),
                },
                None => target.clone(),
            };
            ensure_mount_point(&mount_point, source.is_dir())?;
            out.push(BindMount {
                source: c_path(source)?,
                target: c_path(target)?,
                readonly: *readonly,
            });
        }
        Ok(out)
    }

    fn fs_group(&self) -> Option<u32> {
        self.rx
            .borrow()
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.fs_group)
            .and_then(|g| u32::try_from(g).ok())
    }

    async fn terminate(&mut self, pod: &Pod) -> Flow {
        if self.terminating.is_none() {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .or_else(|| Self::spec_grace(pod))
                .unwrap_or(30)
                .max(0);
            let grace = Duration::from_secs(u64::try_from(grace).unwrap_or(30));
            self.terminating = Some(Instant::now() + grace);
            if let Ok(mut state) = self.entry.state.lock() {
                state.deleting = true;
            }
            self.note(&format!("deleting with a grace period of {grace:?}"));
            for c in &mut self.containers {
                let name = c.name.clone();
                let init = c.init;
                if let Some(inst) = c.instance.as_mut() {
                    if let Some(spec) = container_spec(pod, &name, init) {
                        let reason = StopReason::Deleting;
                        match inst.stopping.as_mut() {
                            Some(s) => {
                                s.reason = reason;
                                s.deadline = s.deadline.min(Instant::now() + grace);
                            }
                            None => inst.stopping = Some(begin_stop(inst, spec, reason, grace)),
                        }
                    }
                } else if !c.done {
                    c.done = true;
                    if let Some(last) = c.last.take() {
                        c.state = State::Terminated(last);
                    }
                }
            }
        }
        let policy = restart_policy(pod);
        for i in 0..self.containers.len() {
            let name = self.containers[i].name.clone();
            let init = self.containers[i].init;
            if self.containers[i].instance.is_none() {
                continue;
            }
            if let Some(spec) = container_spec(pod, &name, init).cloned() {
                self.supervise(i, pod, &spec, &policy);
            } else if let Some(inst) = self.containers[i].instance.as_mut() {
                advance_stop(inst);
            }
        }
        if self.containers.iter().any(|c| c.instance.is_some()) {
            self.write_status(pod, false).await;
            return Flow::Continue;
        }
        self.release_sandbox().await;
        self.write_status(pod, true).await;
        let api = Api::<Pod>::namespaced(self.ctx.client.clone(), &self.ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&self.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                self.note(&format!("deleting with grace 0 failed (will retry): {e}"));
                return Flow::Continue;
            }
        }
        self.note("stopped and deleted");
        self.ctx.mark_finished(&self.uid);
        Flow::Finished
    }

    fn views(&self) -> (Vec<ContainerView>, Vec<ContainerView>) {
        let mut init = Vec::new();
        let mut main = Vec::new();
        let pod = self.rx.borrow().clone();
        for c in &self.containers {
            let (ready, started) = match &c.instance {
                Some(inst) if inst.stopping.is_none() => inst
                    .probe_state
                    .lock()
                    .map(|s| (s.started && s.ready, s.started))
                    .unwrap_or((false, false)),
                Some(_) => (false, true),
                None => (false, false),
            };
            let image = pod
                .as_ref()
                .and_then(|p| container_spec(p, &c.name, c.init))
                .and_then(|s| s.image.clone())
                .unwrap_or_default();
            let mut state = c.state.clone();
            if let (Some(message), State::Waiting { reason, .. }) = (&self.sandbox_error, &c.state)
            {
                if reason == "ContainerCreating" {
                    state = State::waiting("ContainerCreating", Some(message.clone()));
                }
            }
            let view = ContainerView {
                name: c.name.clone(),
                image,
                image_id: c.image_id.clone(),
                container_id: c.container_id.clone(),
                state,
                last: c.last.clone(),
                restart_count: i32::try_from(c.starts.saturating_sub(1)).unwrap_or(i32::MAX),
                ready: ready && !c.init,
                started: started && c.instance.is_some(),
            };
            if c.init {
                init.push(view);
            } else {
                main.push(view);
            }
        }
        (init, main)
    }

    async fn write_status(&mut self, pod: &Pod, terminal: bool) {
        let (init, main) = self.views();
        let policy = restart_policy(pod);
        let phase = status::phase(&init, &main, &policy, terminal);
        let gates: Vec<String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.condition_type)
            .collect();
        let existing = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let unmet: Vec<String> = gates
            .into_iter()
            .filter(|g| !existing.iter().any(|c| &c.type_ == g && c.status == "True"))
            .collect();
        let conditions = status::conditions(
            self.sandbox.is_some(),
            &init,
            &main,
            phase,
            if unmet.is_empty() { Ok(()) } else { Err(unmet) },
        );
        let now = Timestamp::now();
        let mut list = Vec::new();
        for (type_, c) in &conditions {
            let since = match self.conditions.get(*type_) {
                Some((status, since)) if *status == c.status => *since,
                _ => {
                    // Keep the API's transition time when the status is the same as written
                    // before this worker existed.
                    existing
                        .iter()
                        .find(|e| e.type_ == *type_ && (e.status == "True") == c.status)
                        .and_then(|e| e.last_transition_time.as_ref().map(|t| t.0))
                        .unwrap_or(now)
                }
            };
            self.conditions.insert(type_.to_string(), (c.status, since));
            let mut v = json!({
                "type": type_,
                "observedGeneration": pod.metadata.generation,
                "status": if c.status { "True" } else { "False" },
                "lastProbeTime": null,
                "lastTransitionTime": status::time(since),
            });
            if let Some(r) = &c.reason {
                v["reason"] = json!(r);
            }
            if let Some(m) = &c.message {
                v["message"] = json!(m);
            }
            list.push(v);
        }
        if !existing.iter().any(|c| c.type_ == "PodScheduled") {
            list.push(
                json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                             "lastTransitionTime": status::time(self.start_time.unwrap_or(now))}),
            );
        }
        let mut status = json!({
            "observedGeneration": pod.metadata.generation,
            "phase": phase,
            "conditions": list,
            "hostIP": self.ctx.host_ip,
            "hostIPs": [{"ip": self.ctx.host_ip}],
            "containerStatuses": main.iter().map(ContainerView::json).collect::<Vec<_>>(),
        });
        if let Some(t) = self.start_time {
            status["startTime"] = json!(status::time(t));
        }
        if let Some(ip) = self.pod_ip {
            status["podIP"] = json!(ip.to_string());
            status["podIPs"] = json!([{"ip": ip.to_string()}]);
        }
        if !init.is_empty() {
            status["initContainerStatuses"] =
                json!(init.iter().map(ContainerView::json).collect::<Vec<_>>());
        }
        if self.last_status.as_ref() == Some(&status) {
            return;
        }
        let api = Api::<Pod>::namespaced(self.ctx.client.clone(), &self.ns);
        let patch = json!({"status": status});
        match api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
        {
            Ok(_) => {
                if self.last_status.as_ref().and_then(|s| s.get("phase")) != Some(&json!(phase)) {
                    self.note(&format!("phase {phase}"));
                }
                self.last_status = Some(status);
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => self.note(&format!("writing status failed (will retry): {e}")),
        }
    }
}

/// Run the preStop hook (if any) and then send SIGTERM, with SIGKILL at the deadline
/// ([`advance_stop`] drives it).
fn begin_stop(
    inst: &mut Instance,
    spec: &Container,
    reason: StopReason,
    grace: Duration,
) -> Stopping {
    let pre_stop = spec
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .filter(|_| {
            reason == StopReason::Deleting
                || matches!(reason, StopReason::Unhealthy(_))
                || reason == StopReason::SpecChanged
        })
        .map(|handler| {
            let action = probes::handler_action(handler);
            let target = inst.target.clone();
            tokio::spawn(async move {
                let _ = probes::check(&action, &target, grace).await;
            })
        });
    let mut stopping = Stopping {
        reason,
        deadline: Instant::now() + grace,
        pre_stop,
        term_sent: false,
        killed: false,
    };
    advance_stop_parts(inst.process.pid(), &mut stopping);
    stopping
}

fn advance_stop(inst: &mut Instance) {
    let pid = inst.process.pid();
    if let Some(s) = inst.stopping.as_mut() {
        advance_stop_parts(pid, s);
    }
}

fn advance_stop_parts(pid: u32, s: &mut Stopping) {
    let hook_done = s.pre_stop.as_ref().is_none_or(|h| h.is_finished());
    if !s.term_sent && (hook_done || Instant::now() >= s.deadline) {
        if let Some(pid) = pid_of(pid) {
            // Like a container runtime: the signal goes to the main process only.
            let _ = kill(pid, Signal::SIGTERM);
        }
        s.term_sent = true;
    }
    if !s.killed && Instant::now() >= s.deadline {
        if let Some(pid) = pid_of(pid) {
            let _ = killpg(pid, Signal::SIGKILL);
        }
        s.killed = true;
    }
}

fn sub_display(source: &Path, root: &Path) -> String {
    source
        .strip_prefix(root)
        .unwrap_or(source)
        .display()
        .to_string()
}

/// Create a mount point: a directory, or an empty file when a file is mounted.
fn ensure_mount_point(path: &Path, dir: bool) -> Result<(), String> {
    if fs::symlink_metadata(path).is_ok() {
        return Ok(());
    }
    let result = if dir {
        fs::create_dir_all(path)
    } else {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        fs::write(path, b"")
    };
    result.map_err(|e| format!("creating mount point {}: {e}", path.display()))
}
