//! What the runner knows about its running Pods, shared between the Pod workers (which write it),
//! the kubelet log server and the fault hooks (which read it).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
}

#[derive(Debug, Default)]
pub struct PodState {
    pub deleting: bool,
    pub network: Option<PodNetwork>,
    pub hosts_file: Option<PathBuf>,
    pub containers: BTreeMap<String, ContainerEntry>,
}

/// Every Pod of the runner, by UID.
#[derive(Debug, Default)]
pub struct Registry {
    pods: Mutex<HashMap<String, Arc<PodEntry>>>,
}

impl Registry {
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
