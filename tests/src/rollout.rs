//! Helpers for rolling-restart tests: a writer that puts one key every 100 ms through a real etcd
//! client until stopped and reports every acknowledged write, the failed ones and the longest
//! time between two successful writes (the unavailability a client saw); a wait for a rollout to
//! finish that samples the Ready members meanwhile; and the restart order from the Events.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;

use crate::e2e::{condition, Env};
use crate::harness::eventually;
use crate::OrPanic;

pub struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<WriterReport>,
}

#[derive(Debug)]
pub struct WriterReport {
    /// Every acknowledged write, key → value.
    pub written: BTreeMap<String, String>,
    pub failed: u64,
    /// Of `failed`, the attempts no member processed: the connection to the endpoint the
    /// client picked could not be made (refused, timed out, its name gone: a member being
    /// restarted), or the member refused the request's HTTP/2 stream with GOAWAY while shutting
    /// down (RFC 9113 6.8: such streams were not processed), or raft dropped the proposal (a
    /// leadership transfer in progress). Safe to retry (the writer retries
    /// the same key), as etcd's own Go client does on its own.
    pub unsent: u64,
    /// Of `failed`, the attempts cut off in transport after they were sent (the member went away
    /// mid-request: the stream canceled, the connection reset). Their outcome is unknown to the
    /// client; the writer retries the same key with the same value, which is idempotent, and the
    /// acknowledged-write check tells whether anything was lost.
    pub cut_off: u64,
    /// The first few errors of the failed writes, for the report.
    pub errors: Vec<String>,
    pub longest_gap: Duration,
}

impl Writer {
    /// Writes `<prefix><n>` to `endpoints`; `tls` is `(CA bundle, client certificate, key)`.
    pub fn start(
        endpoints: Vec<String>,
        tls: Option<(String, String, String)>,
        prefix: &str,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let prefix = prefix.to_string();
        let task = tokio::spawn(async move {
            let mut options = ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(2))
                .with_timeout(Duration::from_secs(2));
            if let Some((ca, cert, key)) = &tls {
                options = options.with_tls(
                    TlsOptions::new()
                        .ca_certificate(Certificate::from_pem(ca))
                        .identity(Identity::from_pem(cert, key)),
                );
            }
            let mut client = etcd_client::Client::connect(endpoints, Some(options))
                .await
                .or_panic();
            let mut report = WriterReport {
                written: BTreeMap::new(),
                failed: 0,
                unsent: 0,
                cut_off: 0,
                errors: Vec::new(),
                longest_gap: Duration::ZERO,
            };
            let mut last_ok = Instant::now();
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let key = format!("{prefix}{i:06}");
                let value = format!("v{i}");
                match client.put(key.clone(), value.clone(), None).await {
                    Ok(_) => {
                        report.longest_gap = report.longest_gap.max(last_ok.elapsed());
                        last_ok = Instant::now();
                        report.written.insert(key, value);
                        i += 1;
                    }
                    Err(e) => {
                        report.failed += 1;
                        if never_sent(&e) {
                            report.unsent += 1;
                        } else if cut_off_in_transport(&e) {
                            report.cut_off += 1;
                        }
                        if report.errors.len() < 5 {
                            report.errors.push(e.to_string());
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            report.longest_gap = report.longest_gap.max(last_ok.elapsed());
            report
        });
        Self { stop, task }
    }

    pub async fn finish(self) -> WriterReport {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.or_panic()
    }
}

/// Whether no member processed a failed request (see [`WriterReport::unsent`]): tonic could not
/// connect (a `ConnectError` transport error), h2 failed the stream with the server's GOAWAY (a
/// graceful shutdown refusing streams it did not take), or etcd answered `raft proposal dropped`
/// (raft's `ErrProposalDropped`: `Propose` refused the entry, during a leadership transfer or
/// with no leader, so it was never appended to the log and is never applied).
fn never_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            status.message() == "raft proposal dropped"
                || std::error::Error::source(status)
                    .map(|source| format!("{source:?}"))
                    .is_some_and(|source| {
                        source.contains("ConnectError(") || source.contains("GoAway(")
                    })
        }
        _ => false,
    }
}

/// Whether a failed request ended in transport rather than with an answer from etcd: tonic
/// turned a transport error (hyper's canceled request, a reset connection) into the status, so
/// the status carries that error as its source. etcd's own refusals carry none.
fn cut_off_in_transport(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => std::error::Error::source(status).is_some(),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// Client URLs of `pods` (https).
pub fn endpoints(ns: &str, cluster: &str, pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| format!("https://{}.{cluster}.{ns}.svc:2379", p.name_any()))
        .collect()
}

/// Pod name → UID.
pub fn uids(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect()
}

/// Cluster Events with `reason`, oldest first, as their messages.
pub async fn event_messages(env: &Env, ns: &str, cluster: &str, reason: &str) -> Vec<String> {
    let mut events: Vec<Event> = env.events(ns, cluster).await;
    events.retain(|e| e.reason.as_deref() == Some(reason));
    events.sort_by_key(|e| {
        e.event_time
            .as_ref()
            .map(|t| t.0)
            .or(e.first_timestamp.as_ref().map(|t| t.0))
    });
    events.into_iter().filter_map(|e| e.message).collect()
}

/// The members whose Pods were restarted for a new CA bundle, by time of their `PodRestarted`
/// Event.
pub async fn restarts_in_order(env: &Env, ns: &str, cluster: &str) -> Vec<String> {
    let members: Vec<String> = env
        .members(ns, cluster)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    let mut events: Vec<(k8s_openapi::jiff::Timestamp, String)> = env
        .all_events(ns)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PodRestarted"))
        .filter_map(|e| {
            let member = e.involved_object.name.clone()?;
            let at = e
                .event_time
                .as_ref()
                .map(|t| t.0)
                .or(e.first_timestamp.as_ref().map(|t| t.0))?;
            members.contains(&member).then_some((at, member))
        })
        .collect();
    events.sort();
    events.into_iter().map(|(_, m)| m).collect()
}

/// Waits until every member Pod was replaced (none of `before`'s UIDs left), the cluster is
/// healthy with `replicas` members and no longer Progressing. Samples the Ready Pods meanwhile:
/// returns the fewest seen and every Progressing reason seen while it was True.
pub async fn wait_rolled(
    env: &Env,
    ns: &str,
    cluster: &str,
    replicas: usize,
    before: &BTreeMap<String, String>,
    within: Duration,
) -> (usize, BTreeSet<String>) {
    let fewest_ready = Cell::new(usize::MAX);
    let reasons = RefCell::new(BTreeSet::new());
    eventually(
        &format!("{ns}/{cluster}: members rolled"),
        within,
        || async {
            let pods = env.pods(ns, cluster).await;
            let ready = pods.iter().filter(|p| crate::e2e::pod_ready(p)).count();
            fewest_ready.set(fewest_ready.get().min(ready));
            let c = env.cluster(ns, cluster).await;
            let progressing = condition(&c, "Progressing");
            if let Some((st, r, _)) = &progressing {
                if st == "True" {
                    reasons.borrow_mut().insert(r.clone());
                }
            }
            let replaced = pods.len() == before.len()
                && pods
                    .iter()
                    .all(|p| before.get(&p.name_any()) != p.uid().as_ref());
            let settled = progressing.is_some_and(|(st, _, _)| st == "False");
            if replaced && settled && crate::e2e::healthy(&c, replicas as i32) {
                return Ok(());
            }
            Err(format!(
                "pods {:?}, conditions {:?}",
                uids(&pods),
                c.status.map(|s| s.conditions)
            ))
        },
    )
    .await;
    (fewest_ready.get(), reasons.into_inner())
}
