//! The workload's three clients at work: the writer (one put every [`WRITE_EVERY`], each waited
//! for, never retried), the reader (a linearizable get of the newest acknowledged key every
//! [`READ_EVERY`]) and the watcher (the prefix from the start revision, opened again after each
//! break from the revision after the last event, as etcd's own client does). Each records into
//! its part of the [`super::history::History`]; none judges.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{EventType, WatchOptions};
use tokio::sync::watch;

use super::history::{Attempt, ErrorClass, Outcome, Read, ReadResult, Seen, Watched};

/// The writer's pace.
pub const WRITE_EVERY: Duration = Duration::from_millis(20);
/// The reader's pace.
pub const READ_EVERY: Duration = Duration::from_millis(50);
/// How long a put or a get may take before it counts as not answered (the client's own
/// per-request timeout is the same; this bound also covers a connect that hangs).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long opening a watch may take.
const WATCH_OPEN_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before a watch is opened again.
const REWATCH_PAUSE: Duration = Duration::from_millis(200);

/// What the three tasks share: the clock, the newest acknowledged write (for the reader) and
/// the highest revision the watcher has seen (for the catch-up at the end).
pub struct Shared {
    pub started: Instant,
    pub newest: Mutex<Option<(String, String, i64)>>,
    pub watched_up_to: AtomicI64,
}

impl Shared {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A stop signal: `true` once the task must end.
pub type Stop = watch::Receiver<bool>;

fn stopped(stop: &Stop) -> bool {
    *stop.borrow()
}

/// Sleep `period` unless told to stop first; returns whether to stop.
async fn pause(stop: &mut Stop, period: Duration) -> bool {
    if stopped(stop) {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(period) => stopped(stop),
        _ = stop.changed() => true,
    }
}

/// The writer: `<prefix><seq>` = `v<seq>` once every [`WRITE_EVERY`] (a put still waiting
/// delays the next), until stopped.
pub async fn write(
    mut etcd: etcd_client::Client,
    prefix: String,
    shared: Arc<Shared>,
    mut stop: Stop,
) -> Vec<Attempt> {
    let mut attempts = Vec::new();
    let mut tick = tokio::time::interval(WRITE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for seq in 0u64.. {
        let go_on = tokio::select! {
            _ = tick.tick() => true,
            // Told to stop, or the workload is gone.
            _ = stop.changed() => false,
        };
        if !go_on || stopped(&stop) {
            break;
        }
        let key = format!("{prefix}{seq:08}");
        let value = format!("v{seq}");
        let sent = shared.now();
        let put =
            tokio::time::timeout(REQUEST_TIMEOUT, etcd.put(key.clone(), value.clone(), None)).await;
        let answered = shared.now();
        let outcome = match put {
            Ok(Ok(response)) => match response.header().map(|h| h.revision()) {
                Some(revision) => {
                    if let Ok(mut newest) = shared.newest.lock() {
                        *newest = Some((key.clone(), value.clone(), revision));
                    }
                    Outcome::Acknowledged { revision }
                }
                None => Outcome::Failed {
                    class: ErrorClass::Refused,
                    error: "a put response without a header".into(),
                },
            },
            Ok(Err(e)) => Outcome::Failed {
                class: classify(&e),
                error: e.to_string(),
            },
            Err(_) => Outcome::Failed {
                class: ErrorClass::TimedOut,
                error: format!("no answer within {REQUEST_TIMEOUT:?}"),
            },
        };
        attempts.push(Attempt {
            key,
            value,
            sent,
            answered,
            outcome,
        });
    }
    attempts
}

/// The reader: a linearizable get of the newest acknowledged key every [`READ_EVERY`].
pub async fn read(mut etcd: etcd_client::Client, shared: Arc<Shared>, mut stop: Stop) -> Vec<Read> {
    let mut reads = Vec::new();
    while !pause(&mut stop, READ_EVERY).await {
        let newest = shared.newest.lock().ok().and_then(|n| n.clone());
        let Some((key, value, written_at)) = newest else {
            continue;
        };
        let sent = shared.now();
        let got = tokio::time::timeout(REQUEST_TIMEOUT, etcd.get(key.clone(), None)).await;
        let result = match got {
            Ok(Ok(response)) => {
                let header_revision = response.header().map(|h| h.revision()).unwrap_or(0);
                match response.kvs().first() {
                    Some(kv) => ReadResult::Found {
                        value: String::from_utf8_lossy(kv.value()).into_owned(),
                        mod_revision: kv.mod_revision(),
                        header_revision,
                    },
                    None => ReadResult::Missing { header_revision },
                }
            }
            Ok(Err(e)) => ReadResult::Failed {
                class: classify(&e),
                error: e.to_string(),
            },
            Err(_) => ReadResult::Failed {
                class: ErrorClass::TimedOut,
                error: format!("no answer within {REQUEST_TIMEOUT:?}"),
            },
        };
        reads.push(Read {
            key,
            value,
            written_at,
            sent,
            result,
        });
    }
    reads
}

/// The watcher: every event under `prefix` after revision `from`, until stopped.
pub async fn watch(
    mut etcd: etcd_client::Client,
    prefix: String,
    from: i64,
    shared: Arc<Shared>,
    mut stop: Stop,
) -> Watched {
    let mut watched = Watched::default();
    let mut next = from + 1;
    'rewatch: loop {
        if stopped(&stop) {
            break;
        }
        let options = WatchOptions::new().with_prefix().with_start_revision(next);
        let opened = tokio::time::timeout(
            WATCH_OPEN_TIMEOUT,
            etcd.watch(prefix.clone(), Some(options)),
        )
        .await;
        let mut stream = match opened {
            Ok(Ok(stream)) => stream,
            _ => {
                watched.rewatches += 1;
                if pause(&mut stop, REWATCH_PAUSE).await {
                    break;
                }
                continue;
            }
        };
        loop {
            let message = tokio::select! {
                m = stream.message() => m,
                _ = stop.changed() => break 'rewatch,
            };
            let response = match message {
                Ok(Some(response)) => response,
                // The member went away or lost its leader (the client requires one): open the
                // watch again where it broke off.
                Ok(None) | Err(_) => break,
            };
            if response.canceled() {
                if response.compact_revision() > 0 {
                    watched.compacted = Some(response.compact_revision());
                    break 'rewatch;
                }
                break;
            }
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let revision = kv.mod_revision();
                watched.events.push(Seen {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    value: String::from_utf8_lossy(kv.value()).into_owned(),
                    revision,
                    deleted: event.event_type() == EventType::Delete,
                });
                next = next.max(revision + 1);
                shared.watched_up_to.fetch_max(revision, Ordering::SeqCst);
            }
        }
        watched.rewatches += 1;
        if pause(&mut stop, REWATCH_PAUSE).await {
            break;
        }
    }
    watched
}

/// etcd's refusals while its members elect a leader (`rpctypes.ErrGRPCLeaderChanged`,
/// `ErrGRPCNoLeader`, `ErrGRPCTimeoutDueToLeaderFail`, and the proposal raft dropped during a
/// leadership transfer).
const BETWEEN_LEADERS: [&str; 4] = [
    "etcdserver: leader changed",
    "etcdserver: no leader",
    "etcdserver: request timed out, possibly due to previous leader failure",
    "raft proposal dropped",
];

/// The class of a failed request (see [`ErrorClass`]).
pub fn classify(e: &etcd_client::Error) -> ErrorClass {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            if BETWEEN_LEADERS.contains(&status.message()) {
                return ErrorClass::BetweenLeaders;
            }
            // gRPC status codes (the same numbers in every gRPC implementation).
            const CANCELLED: i32 = 1;
            const UNKNOWN: i32 = 2;
            const DEADLINE_EXCEEDED: i32 = 4;
            const ABORTED: i32 = 10;
            const UNAVAILABLE: i32 = 14;
            match status.code() as i32 {
                UNAVAILABLE | UNKNOWN | ABORTED => ErrorClass::Unavailable,
                DEADLINE_EXCEEDED | CANCELLED => ErrorClass::TimedOut,
                _ => ErrorClass::Refused,
            }
        }
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            ErrorClass::Unavailable
        }
        _ => ErrorClass::Refused,
    }
}
