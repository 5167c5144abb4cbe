//! The fault suite's instrument: a client workload that runs through a whole scenario against a
//! cluster's members and checks, at the end, that etcd kept every promise it made to it.
//!
//! [`Workload::start`] dials the cluster's Ready members by their DNS names (as
//! [`crate::e2e::etcd_client`] does, over TLS and as root when the cluster has them) and starts
//! a writer (unique sequential keys at a steady pace, each acknowledged one recorded with its
//! revision and latency; a put without an answer is never retried), a reader (linearizable gets
//! of the newest acknowledged key) and a watcher (the prefix from the start revision). Members
//! that become Ready later (a scale-up, a replacement) are added to the clients as they appear.
//! [`Workload::finish`] stops them, reads every key back and runs [`check::check`]; it panics
//! naming the key and revision of every violation, or returns the [`Report`].
//! [`Workload::finish_after_rollback`] does the same for a run through an in-place restore from
//! a snapshot, with [`rollback::check_rollback`].
//!
//! Transient errors while a fault lasts (leader changed, unavailable, timed out) are normal for
//! a client: they are counted in the report, never failures.

mod access;
pub mod check;
pub mod history;
mod report;
pub mod rollback;
mod run;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::GetOptions;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::e2e::Env;
use crate::OrPanic;
pub use access::Access;
pub use check::{Figures, Violation};
use history::{Attempt, Read, Watched};
pub use history::{ErrorClass, History, WatchOutcome};
pub use report::{Report, AVAILABLE_WRITE_GAP};
pub use rollback::{Rollback, RollbackFigures};
use run::Shared;

/// How long [`Workload::finish`] waits for the watcher to deliver the last acknowledged write,
/// and for a final read to be answered.
const CATCH_UP: Duration = Duration::from_secs(60);
/// How often the clients learn of members that became Ready.
const ENDPOINT_SYNC: Duration = Duration::from_secs(2);

/// A running workload; see the module docs.
pub struct Workload {
    label: String,
    target: Target,
    shared: Arc<Shared>,
    /// Every fault's (start, end) as marked, in order.
    fault: Mutex<Vec<(Duration, Option<Duration>)>>,
    stop_clients: watch::Sender<bool>,
    stop_watcher: watch::Sender<bool>,
    writer: JoinHandle<Vec<Attempt>>,
    reader: JoinHandle<Vec<Read>>,
    watcher: JoinHandle<Watched>,
    sync: JoinHandle<()>,
}

crate::debug_fields!(Workload, |w| { "label": w.label, "cluster": w.target.cluster, "prefix": w.target.prefix });

/// What a workload runs against and under which keys.
struct Target {
    ns: String,
    cluster: String,
    prefix: String,
    kube: Client,
    access: Access,
    /// When it started, for the Events it reports.
    wall_start: Timestamp,
}

impl Workload {
    /// Starts a writer, a reader and a watcher against cluster `name` in `ns`, through the
    /// cluster's client endpoints (TLS and root auth when the cluster has them), from the
    /// current revision.
    pub async fn start(env: &Env, ns: &str, name: &str) -> Workload {
        let kube = env.client();
        let access = Access::of_cluster(&kube, ns, name).await;
        Self::start_with(env, ns, name, access).await
    }

    /// [`Workload::start`] with the client's TLS and credentials given.
    pub async fn start_with(env: &Env, ns: &str, name: &str, access: Access) -> Workload {
        static RUNS: AtomicU32 = AtomicU32::new(0);
        let kube = env.client();
        let prefix = format!(
            "workload-{}-{}/",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::SeqCst)
        );
        let endpoints = ready_endpoints(&kube, ns, name, access.scheme()).await;
        assert!(
            !endpoints.is_empty(),
            "{ns}/{name}: no Ready member for the workload to dial"
        );
        let clients = access.dial(&endpoints, true).await;
        let watch_client = access.dial(&endpoints, false).await;
        let mut probe = clients.clone();
        let from = current_revision(&mut probe, &prefix).await;

        let shared = Arc::new(Shared {
            started: Instant::now(),
            newest: Mutex::new(None),
            watched_up_to: AtomicI64::new(from),
        });
        let (stop_clients, clients_stop) = watch::channel(false);
        let (stop_watcher, watcher_stop) = watch::channel(false);
        let writer = tokio::spawn(run::write(
            clients.clone(),
            prefix.clone(),
            shared.clone(),
            clients_stop.clone(),
        ));
        let reader = tokio::spawn(run::read(
            clients.clone(),
            shared.clone(),
            clients_stop.clone(),
        ));
        let watcher = tokio::spawn(run::watch(
            watch_client.clone(),
            prefix.clone(),
            from,
            shared.clone(),
            watcher_stop.clone(),
        ));
        let sync = tokio::spawn(sync_endpoints(
            kube.clone(),
            ns.to_string(),
            name.to_string(),
            access.scheme(),
            endpoints.into_iter().collect(),
            vec![clients, watch_client],
            watcher_stop,
        ));
        Workload {
            label: name.to_string(),
            target: Target {
                ns: ns.to_string(),
                cluster: name.to_string(),
                prefix,
                kube,
                access,
                wall_start: Timestamp::now(),
            },
            shared,
            fault: Mutex::new(Vec::new()),
            stop_clients,
            stop_watcher,
            writer,
            reader,
            watcher,
            sync,
        }
    }

    /// Names the run in its report row (default: the cluster's name).
    pub fn named(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }

    /// Marks a fault's start and end: the before/during latency figures are of the last fault;
    /// the writes acknowledged during each fault are counted apart
    /// ([`Report::acknowledged_per_fault`]). A start while a fault is open is ignored.
    pub fn fault_started(&self) {
        if let Ok(mut f) = self.fault.lock() {
            if f.last().is_none_or(|(_, end)| end.is_some()) {
                f.push((self.shared.started.elapsed(), None));
            }
        }
    }

    pub fn fault_ended(&self) {
        if let Ok(mut f) = self.fault.lock() {
            if let Some((_, end @ None)) = f.last_mut() {
                *end = Some(self.shared.started.elapsed());
            }
        }
    }

    /// What the workload has acknowledged so far (for a test that waits for writes to flow
    /// again): the newest acknowledged key's revision, if any.
    pub fn newest_revision(&self) -> Option<i64> {
        self.shared
            .newest
            .lock()
            .ok()
            .and_then(|n| n.as_ref().map(|(_, _, r)| *r))
    }

    /// Stops all three, runs the check, returns the figures; panics with a precise message
    /// (which key, which revision) on any violation.
    pub async fn finish(self) -> Report {
        let (label, target, history) = self.stop().await;
        let verdict = check::check(&history);
        target
            .report(
                label,
                &history,
                verdict.figures,
                verdict.violations.as_slice(),
            )
            .await
    }

    /// [`Workload::finish`] for a run through `rollback` (every member lost, the cluster
    /// restored in place from a snapshot): the writes after the snapshot must be gone, the rest
    /// kept ([`rollback::check_rollback`]). Returns the figures with the rollback's.
    pub async fn finish_after_rollback(self, rollback: Rollback) -> (Report, RollbackFigures) {
        let (label, target, history) = self.stop().await;
        let verdict = rollback::check_rollback(&history, &rollback);
        let report = target
            .report(
                label,
                &history,
                verdict.figures,
                verdict.violations.as_slice(),
            )
            .await;
        (report, verdict.rollback)
    }

    /// Stops the writer and the reader, lets the watcher catch up, reads every key back: the
    /// run's label, target and history.
    async fn stop(self) -> (String, Target, History) {
        let Workload {
            label,
            target,
            shared,
            fault,
            stop_clients,
            stop_watcher,
            writer,
            reader,
            watcher,
            sync,
        } = self;
        let _ = stop_clients.send(true);
        let attempts = writer.await.or_panic();
        let reads = reader.await.or_panic();
        let ended = shared.started.elapsed();
        // The watcher gets until the last acknowledged write's revision arrives (it may be
        // re-watching after the fault); a watch that never gets there shows in the check as
        // missed events.
        let last = attempts.iter().filter_map(Attempt::revision).max();
        if let Some(last) = last {
            let deadline = Instant::now() + CATCH_UP;
            // A watcher told of a compaction has ended: nothing more will arrive.
            while shared.watched_up_to.load(Ordering::SeqCst) < last
                && Instant::now() < deadline
                && !watcher.is_finished()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let _ = stop_watcher.send(true);
        let watched = watcher.await.or_panic();
        sync.abort();

        let kept = target.read_back().await;
        let marked = fault.lock().map(|f| f.clone()).unwrap_or_default();
        let (fault_started, fault_ended) = marked
            .last()
            .map(|(start, end)| (Some(*start), *end))
            .unwrap_or_default();
        let fault_windows = marked
            .iter()
            .map(|(start, end)| (*start, end.unwrap_or(ended)))
            .collect();
        let history = History {
            prefix: target.prefix.clone(),
            attempts,
            reads,
            watched,
            kept,
            fault_started,
            fault_ended,
            fault_windows,
            ended,
        };
        (label, target, history)
    }
}

impl Target {
    /// The run's [`Report`]; panics naming every violation (the first 20) when there is one.
    async fn report(
        &self,
        label: String,
        history: &History,
        figures: Figures,
        violations: &[impl std::fmt::Display],
    ) -> Report {
        let events = self.operator_events().await;
        let report = Report::new(label, history, figures, events);
        if !violations.is_empty() {
            let shown: Vec<String> = violations
                .iter()
                .take(20)
                .map(|v| format!("  - {v}"))
                .collect();
            panic!(
                "{}/{}: the workload under {} found {} violation(s) of etcd's guarantees:\n{}\n{report:?}",
                self.ns,
                self.cluster,
                self.prefix,
                violations.len(),
                shown.join("\n"),
            );
        }
        report
    }

    /// Every key under the prefix, linearizably, in pages, through a fresh client on the members
    /// that are Ready now (the ones dialled at the start may be gone). Reads refused while the
    /// cluster is between leaders or unreachable are made again until [`CATCH_UP`] has passed.
    async fn read_back(&self) -> BTreeMap<String, (String, i64)> {
        let what = format!(
            "{}/{}: reading back the workload's keys under {}",
            self.ns, self.cluster, self.prefix
        );
        let deadline = Instant::now() + CATCH_UP;
        loop {
            match self.read_back_once().await {
                Ok(kept) => return kept,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("{what}: {e}; again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }

    async fn read_back_once(&self) -> Result<BTreeMap<String, (String, i64)>, String> {
        let endpoints =
            ready_endpoints(&self.kube, &self.ns, &self.cluster, self.access.scheme()).await;
        if endpoints.is_empty() {
            return Err("no Ready member".to_string());
        }
        let mut etcd = self.access.dial(&endpoints, true).await;
        let end = prefix_end(&self.prefix);
        let mut kept = BTreeMap::new();
        let mut from = self.prefix.clone().into_bytes();
        loop {
            let page = etcd
                .get(
                    from.clone(),
                    Some(GetOptions::new().with_range(end.clone()).with_limit(1000)),
                )
                .await
                .map_err(|e| e.to_string())?;
            for kv in page.kvs() {
                kept.insert(
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    (
                        String::from_utf8_lossy(kv.value()).into_owned(),
                        kv.mod_revision(),
                    ),
                );
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(kept),
            }
        }
    }

    /// The reasons of the Events about the operator's objects in the namespace (the cluster,
    /// its members, snapshots, defrag runs) since the start, with how often each came.
    async fn operator_events(&self) -> BTreeMap<String, u64> {
        let events =
            Api::<k8s_openapi::api::core::v1::Event>::namespaced(self.kube.clone(), &self.ns)
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
        let mut reasons = BTreeMap::new();
        for e in events {
            // The operator's objects (clusters, members, snapshots, defrag runs) are the ones it
            // reports Events about.
            let ours = e
                .involved_object
                .api_version
                .as_deref()
                .is_some_and(|v| v.starts_with(&format!("{}/", api::v1alpha2::GROUP)));
            let at = e
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
                .or(e.last_timestamp.as_ref().map(|t| t.0))
                .or(e.event_time.as_ref().map(|t| t.0));
            if ours && at.is_some_and(|at| at >= self.wall_start) {
                let count = e
                    .series
                    .as_ref()
                    .and_then(|s| s.count)
                    .or(e.count)
                    .unwrap_or(1);
                *reasons.entry(e.reason.unwrap_or_default()).or_insert(0) +=
                    u64::try_from(count).unwrap_or(1);
            }
        }
        reasons
    }
}

/// The end of the key range under `prefix` (its last byte incremented, as etcd's `WithPrefix`).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The store's revision now, read linearizably (the watch starts after it).
async fn current_revision(etcd: &mut etcd_client::Client, prefix: &str) -> i64 {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        match etcd
            .get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
        {
            Ok(r) => return r.header().map(|h| h.revision()).unwrap_or(0),
            Err(e) if Instant::now() < deadline => {
                eprintln!("workload: reading the start revision: {e}; again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("workload: reading the start revision: {e}"),
        }
    }
}

/// Keeps the clients' endpoints in step with the cluster, as etcd's client does with its
/// endpoint auto-sync: a member that became Ready is added; one whose Pod is gone (removed by a
/// scale-down or a replacement) is dropped, never the last one. A member that is only unready
/// stays: it may come back, and meanwhile the balancer finds it failing.
async fn sync_endpoints(
    kube: Client,
    ns: String,
    cluster: String,
    scheme: &'static str,
    mut known: BTreeSet<String>,
    clients: Vec<etcd_client::Client>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(ENDPOINT_SYNC) => {}
            _ = stop.changed() => return,
        }
        let Some(pods) = member_pods(&kube, &ns, &cluster).await else {
            continue;
        };
        let endpoint = |p: &Pod| format!("{scheme}://{}.{cluster}.{ns}.svc:2379", p.name_any());
        let existing: BTreeSet<String> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(endpoint)
            .collect();
        for joined in pods.iter().filter(|p| ready(p)).map(endpoint) {
            if known.insert(joined.clone()) {
                for client in &clients {
                    let _ = client.add_endpoint(&joined).await;
                }
            }
        }
        let gone: Vec<String> = known.difference(&existing).cloned().collect();
        for endpoint in gone {
            if known.len() <= 1 {
                break;
            }
            known.remove(&endpoint);
            for client in &clients {
                let _ = client.remove_endpoint(&endpoint).await;
            }
        }
    }
}

/// The cluster's member Pods (`None` when the list failed: the caller tries again).
async fn member_pods(kube: &Client, ns: &str, cluster: &str) -> Option<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), ns);
    let selector = api::labels::cluster_selector(cluster);
    pods.list(&kube::api::ListParams::default().labels(&selector))
        .await
        .ok()
        .map(|l| l.items)
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none() && crate::e2e::pod_ready(p)
}

/// `<scheme>://<pod>.<cluster>.<ns>.svc:2379` of the cluster's Ready member Pods (none on a
/// failed list: the caller tries again).
async fn ready_endpoints(kube: &Client, ns: &str, cluster: &str, scheme: &str) -> Vec<String> {
    member_pods(kube, ns, cluster)
        .await
        .unwrap_or_default()
        .iter()
        .filter(|p| ready(p))
        .map(|p| format!("{scheme}://{}.{cluster}.{ns}.svc:2379", p.name_any()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn the_prefix_range_ends_at_the_prefix_with_its_last_byte_incremented() {
        assert_eq!(prefix_end("workload-1-0/"), b"workload-1-00".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
