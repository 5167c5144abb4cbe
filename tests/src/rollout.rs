//! Helpers for rolling-restart tests: a writer that puts one key every 100 ms through a real etcd
//! client until stopped and reports every acknowledged write (and when), every write it sent,
//! the failed ones by class (typed: the client's error variant, gRPC code and transport error
//! types, never its text) and the longest time between two successful writes (the
//! unavailability a client saw), with the read-back check (acknowledged ⊆ stored ⊆ attempted);
//! a wait for a rollout to finish that samples the Ready members meanwhile; and the restart
//! order from the Events.

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

/// At most this many of a writer's puts may time out per member restarted during a rollout.
/// The writer has one request in flight at a time, so a restart can leave at most the one it
/// had sent to that member unanswered (the member's network gone before it closed the
/// connection); every other way a restart shows is an answer within the 2 s timeout: a
/// refused connection or stream, a reset, or etcd's `raft proposal dropped` while the operator
/// moves leadership before restarting the leader. A put that waits out the timeout once per
/// attempt, attempt after attempt, is a cluster without a leader (the leader restarted before
/// leadership moved) or a member that hangs, which is what the bound is there to catch.
pub const TIMEOUTS_PER_RESTART: u64 = 1;

#[derive(Debug)]
pub struct WriterReport {
    /// Every acknowledged write, key → value.
    pub written: BTreeMap<String, String>,
    /// When each acknowledged write was acknowledged, in the order they were.
    pub acknowledged_at: Vec<Instant>,
    /// Every write sent, acknowledged or not, key → value: the writer retries a failed key with
    /// the same value, so this is `written` and at most the one key it was retrying when it
    /// stopped, which etcd may have applied.
    pub attempted: BTreeMap<String, String>,
    pub failed: u64,
    /// Of `failed`, see [`FailedWrite::Unsent`].
    pub unsent: u64,
    /// Of `failed`, see [`FailedWrite::CutOff`].
    pub cut_off: u64,
    /// Of `failed`, see [`FailedWrite::TimedOut`]; bounded by the caller (see
    /// [`TIMEOUTS_PER_RESTART`]).
    pub timed_out: u64,
    /// Of `failed`, see [`FailedWrite::Refused`]: none is expected anywhere.
    pub refused: u64,
    /// The first few errors of the failed writes with their class, for the report.
    pub errors: Vec<String>,
    /// Every refused write's error (up to 20).
    pub refusals: Vec<String>,
    pub longest_gap: Duration,
}

/// Why a put got no acknowledgement, from the typed error the client returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedWrite {
    /// No member processed it, so nothing was applied: the connection to the endpoint the
    /// client picked could not be made (refused, its name gone, the TCP connect timed out: a
    /// member being restarted), the member refused the HTTP/2 stream (`REFUSED_STREAM`: RFC
    /// 9113 8.7, not processed), hyper dropped the request before sending it (its connection
    /// closed), or raft dropped the proposal (`raft proposal dropped`, raft's
    /// `ErrProposalDropped`: `Propose` refused the entry during a leadership transfer, so it was
    /// never appended to the log). Safe to retry, as etcd's own Go client does.
    Unsent,
    /// Sent, then cut off in transport (the member went away mid-request: the connection reset,
    /// the stream reset or dropped with the member's GOAWAY; h2 reports GOAWAY and reset alike
    /// through hyper, so both are counted here, the side that assumes it may have been applied).
    /// The outcome is unknown; the writer retries the same key with the same value, and the
    /// read-back decides whether anything was lost.
    CutOff,
    /// No answer within the client's 2 s request timeout (tonic's deadline), or etcd's
    /// `DEADLINE_EXCEEDED`. The outcome is unknown; counted apart from the transport classes
    /// because a member that hangs or a cluster without a leader shows as this, and bounded.
    TimedOut,
    /// Anything else: etcd answered with a refusal of its own (e.g. `leader changed`, `request
    /// timed out`, an auth or quota error), or a TLS peer refused the connection (a
    /// certificate not trusted either way: rustls reports every certificate and alert failure
    /// as `InvalidData`), or the connection failed for a reason that is not the member being
    /// away (HTTP/2 not negotiated). A failed write in every test.
    Refused,
}

impl FailedWrite {
    pub fn label(self) -> &'static str {
        match self {
            FailedWrite::Unsent => "unsent",
            FailedWrite::CutOff => "cut off",
            FailedWrite::TimedOut => "timed out",
            FailedWrite::Refused => "refused",
        }
    }
}

// gRPC status codes (the same numbers in every gRPC implementation; tonic's `Code` is not
// nameable from this crate, which reaches tonic only through etcd-client).
const CANCELLED: i32 = 1;
const DEADLINE_EXCEEDED: i32 = 4;
const UNAVAILABLE: i32 = 14;

/// raft's `ErrProposalDropped`, as etcd returns it (gRPC `Unknown` with the error's text).
const PROPOSAL_DROPPED: &str = "raft proposal dropped";

/// The class of a failed put (see [`FailedWrite`]), from the error's variant, its gRPC code and
/// the types in its source chain: tonic puts the transport error it mapped to the status
/// there (the connector's `io::Error`, hyper's `Error`); a status etcd itself answered
/// carries none.
pub fn classify(e: &etcd_client::Error) -> FailedWrite {
    let (code, source): (Option<i32>, Option<&(dyn std::error::Error + 'static)>) = match e {
        etcd_client::Error::GRpcStatus(status) => (
            Some(status.code() as i32),
            std::error::Error::source(status),
        ),
        etcd_client::Error::TransportError(t) => (None, std::error::Error::source(t)),
        etcd_client::Error::IoError(io) => (None, Some(io as &(dyn std::error::Error + 'static))),
        _ => return FailedWrite::Refused,
    };
    let Some(source) = source else {
        // etcd's own answer.
        return match e {
            etcd_client::Error::GRpcStatus(status) if status.message() == PROPOSAL_DROPPED => {
                FailedWrite::Unsent
            }
            _ if code == Some(DEADLINE_EXCEEDED) => FailedWrite::TimedOut,
            _ => FailedWrite::Refused,
        };
    };
    let chain: Vec<&(dyn std::error::Error + 'static)> =
        std::iter::successors(Some(source), |e| e.source()).collect();
    let io = chain
        .iter()
        .find_map(|e| e.downcast_ref::<std::io::Error>());
    if io.is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData) {
        return FailedWrite::Refused;
    }
    let hyper = chain.iter().find_map(|e| e.downcast_ref::<hyper::Error>());
    match hyper {
        // Never on a connection: the connector failed, or tonic's deadline expired (tonic maps
        // its `TimeoutExpired` to `Cancelled`; hyper's own cancellations carry a hyper error).
        None if code == Some(CANCELLED) => FailedWrite::TimedOut,
        None if io.is_some() => FailedWrite::Unsent,
        None => FailedWrite::Refused,
        Some(h) if h.is_canceled() => FailedWrite::Unsent,
        // tonic maps an h2 `REFUSED_STREAM` to `Unavailable`, and hyper's keep-alive timeout
        // too (a connection that stopped answering: outcome unknown).
        Some(h) if code == Some(UNAVAILABLE) && !h.is_timeout() && io.is_none() => {
            FailedWrite::Unsent
        }
        Some(_) => FailedWrite::CutOff,
    }
}

impl WriterReport {
    /// How many writes were acknowledged between `from` and `to`.
    pub fn acknowledged_between(&self, from: Instant, to: Instant) -> usize {
        self.acknowledged_at
            .iter()
            .filter(|at| **at >= from && **at <= to)
            .count()
    }

    /// Panics unless `stored` (the keys under the writer's prefix at the end) holds every
    /// acknowledged write with its value and nothing the writer did not send.
    #[track_caller]
    pub fn assert_kept(&self, what: &str, stored: &BTreeMap<String, String>) {
        let wrong = compare_history(&self.written, &self.attempted, stored);
        assert!(
            wrong.is_empty(),
            "{what}: the store does not hold what the writer wrote ({} acknowledged, {} \
             attempted, {} stored): {}",
            self.written.len(),
            self.attempted.len(),
            stored.len(),
            wrong.join("; ")
        );
    }

    /// Panics if a write was refused, or more timed out than `restarts` member restarts
    /// explain (see [`TIMEOUTS_PER_RESTART`]).
    #[track_caller]
    pub fn assert_failures_explained(&self, what: &str, restarts: u64) {
        assert_eq!(
            self.refused, 0,
            "{what}: writes refused: {:?}",
            self.refusals
        );
        assert!(
            self.timed_out <= TIMEOUTS_PER_RESTART * restarts,
            "{what}: {} writes timed out, more than {TIMEOUTS_PER_RESTART} per member \
             restarted ({restarts}): {:?}",
            self.timed_out,
            self.errors
        );
    }
}

/// What is wrong with `stored` against a writer's history: every acknowledged write must be
/// there with its value (acknowledged ⊆ stored), and every stored key must be one the writer
/// sent, with the value it sent (stored ⊆ attempted: an unacknowledged put may have been
/// applied). Empty when it holds.
pub fn compare_history(
    acknowledged: &BTreeMap<String, String>,
    attempted: &BTreeMap<String, String>,
    stored: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (k, v) in acknowledged {
        match stored.get(k) {
            None => wrong.push(format!("acknowledged {k}={v} missing")),
            Some(s) if s != v => wrong.push(format!("acknowledged {k}={v} holds {s}")),
            Some(_) => {}
        }
    }
    for (k, s) in stored {
        match attempted.get(k) {
            None => wrong.push(format!("unexpected {k}={s}, never written")),
            Some(v) if v != s && !acknowledged.contains_key(k) => {
                wrong.push(format!("unexpected {k}={s}, written as {v}"))
            }
            Some(_) => {}
        }
    }
    wrong
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
                acknowledged_at: Vec::new(),
                attempted: BTreeMap::new(),
                failed: 0,
                unsent: 0,
                cut_off: 0,
                timed_out: 0,
                refused: 0,
                errors: Vec::new(),
                refusals: Vec::new(),
                longest_gap: Duration::ZERO,
            };
            let mut last_ok = Instant::now();
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let key = format!("{prefix}{i:06}");
                let value = format!("v{i}");
                report.attempted.insert(key.clone(), value.clone());
                match client.put(key.clone(), value.clone(), None).await {
                    Ok(_) => {
                        report.longest_gap = report.longest_gap.max(last_ok.elapsed());
                        last_ok = Instant::now();
                        report.acknowledged_at.push(last_ok);
                        report.written.insert(key, value);
                        i += 1;
                    }
                    Err(e) => {
                        report.failed += 1;
                        let class = classify(&e);
                        match class {
                            FailedWrite::Unsent => report.unsent += 1,
                            FailedWrite::CutOff => report.cut_off += 1,
                            FailedWrite::TimedOut => report.timed_out += 1,
                            FailedWrite::Refused => {
                                report.refused += 1;
                                if report.refusals.len() < 20 {
                                    report.refusals.push(e.to_string());
                                }
                            }
                        }
                        if report.errors.len() < 5 {
                            report.errors.push(format!("{}: {e}", class.label()));
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
    restart_events(env, ns, cluster)
        .await
        .into_iter()
        .map(|(_, m)| m)
        .collect()
}

/// The current members' `PodRestarted` Events: (when, member), oldest first.
pub async fn restart_events(
    env: &Env,
    ns: &str,
    cluster: &str,
) -> Vec<(k8s_openapi::jiff::Timestamp, String)> {
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
    events
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

#[cfg(test)]
mod tests;
