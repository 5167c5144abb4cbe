//! What the runner knows about its running Pods, shared between the Pod workers (which write it),
//! the kubelet log server and the fault hooks (which read it).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::exec::ExecTarget;
use super::network::PodNetwork;

/// One container of a Pod.
#[derive(Clone, Debug, Default)]
pub struct ContainerEntry {
    /// `<dir>/<instance>.log`, one file per start.
    pub log_dir: PathBuf,
    /// The instance number (= restart count) of the newest start, if any.
    pub current: Option<u32>,
    /// The running instance: its process group leader and how to exec into it.
    pub running: Option<ExecTarget>,
}

impl ContainerEntry {
    pub fn log(&self, instance: u32) -> PathBuf {
        self.log_dir.join(format!("{instance}.log"))
    }
}

/// One Pod the runner runs.
#[derive(Debug)]
pub struct PodEntry {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub since: Instant,
    pub state: Mutex<PodState>,
    /// Process groups of the commands `kubectl exec` started in the Pod, with their container:
    /// they end with the container (its restart) or the Pod, as in a container's PID namespace.
    pub execs: Mutex<Vec<(String, u32)>>,
}

impl PodEntry {
    pub fn track_exec(&self, container: &str, pgid: u32) {
        if let Ok(mut execs) = self.execs.lock() {
            execs.push((container.to_string(), pgid));
        }
    }

    pub fn untrack_exec(&self, pgid: u32) {
        if let Ok(mut execs) = self.execs.lock() {
            execs.retain(|(_, p)| *p != pgid);
        }
    }

    /// SIGKILL the exec'd process groups of `container` (every container: `None`).
    pub fn kill_execs(&self, container: Option<&str>) {
        let Ok(mut execs) = self.execs.lock() else {
            return;
        };
        execs.retain(|(c, pgid)| {
            if container.is_some_and(|name| name != c) {
                return true;
            }
            if let Ok(pgid) = i32::try_from(*pgid) {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
            false
        });
    }
}

#[derive(Debug, Default)]
pub struct PodState {
    pub deleting: bool,
    pub network: Option<PodNetwork>,
    pub hosts_file: Option<PathBuf>,
    pub containers: BTreeMap<String, ContainerEntry>,
}

/// One streaming session the kubelet endpoint accepted: which endpoint, for which Pod, over
/// which wire protocol (what the apiserver actually sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSession {
    /// `exec`, `attach` or `portforward`.
    pub endpoint: String,
    pub namespace: String,
    pub pod: String,
    /// The negotiated protocol: `v4.channel.k8s.io` (SPDY/3.1), `v5.channel.k8s.io`
    /// (WebSocket), `portforward.k8s.io` (SPDY/3.1), `SPDY/3.1+portforward.k8s.io` (WebSocket).
    pub protocol: String,
}

/// Every Pod of the runner, by UID.
#[derive(Debug, Default)]
pub struct Registry {
    pods: Mutex<HashMap<String, Arc<PodEntry>>>,
    sessions: Mutex<Vec<StreamSession>>,
}

impl Registry {
    pub fn record_session(&self, session: StreamSession) {
        if let Ok(mut s) = self.sessions.lock() {
            s.push(session);
        }
    }

    pub fn sessions(&self) -> Vec<StreamSession> {
        self.sessions.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn insert(&self, entry: Arc<PodEntry>) {
        if let Ok(mut pods) = self.pods.lock() {
            pods.insert(entry.uid.clone(), entry);
        }
    }

    pub fn remove(&self, uid: &str) {
        if let Ok(mut pods) = self.pods.lock() {
            pods.remove(uid);
        }
    }

    pub fn all(&self) -> Vec<Arc<PodEntry>> {
        self.pods
            .lock()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The Pod `ns/name`: the newest one not being deleted, else the newest.
    pub fn find(&self, ns: &str, name: &str) -> Option<Arc<PodEntry>> {
        let mut matching: Vec<Arc<PodEntry>> = self
            .all()
            .into_iter()
            .filter(|p| p.namespace == ns && p.name == name)
            .collect();
        matching.sort_by_key(|p| {
            let deleting = p.state.lock().map(|s| s.deleting).unwrap_or(true);
            (!deleting, p.since)
        });
        matching.pop()
    }

    pub fn container(&self, ns: &str, pod: &str, container: &str) -> Option<ContainerEntry> {
        let entry = self.find(ns, pod)?;
        let state = entry.state.lock().ok()?;
        state.containers.get(container).cloned()
    }
}
