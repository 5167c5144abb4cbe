//! What the workload saw, as plain values: every put the writer made with its outcome, every read,
//! every watch event, the keys read back at the end and the fault's window. The check
//! ([`super::check`]) judges a [`History`] without any I/O, so its unit tests feed it histories
//! by hand.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Everything one workload run recorded. Times are offsets from the workload's start.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The key prefix every write used.
    pub prefix: String,
    /// Every put, in the order the writer made them (one at a time).
    pub attempts: Vec<Attempt>,
    /// Every read, in the order the reader made them (one at a time).
    pub reads: Vec<Read>,
    pub watched: Watched,
    /// The keys under the prefix as a linearizable read found them after the writer stopped:
    /// key → (value, mod revision).
    pub kept: BTreeMap<String, (String, i64)>,
    /// When the (last) fault started and ended (see `Workload::fault_started`).
    pub fault_started: Option<Duration>,
    pub fault_ended: Option<Duration>,
    /// Every fault's window, in order (a test may mark several); one still open when the writer
    /// stopped ends at `ended`.
    pub fault_windows: Vec<(Duration, Duration)>,
    /// When the writer stopped.
    pub ended: Duration,
}

/// One put.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub key: String,
    pub value: String,
    pub sent: Duration,
    /// When the answer (or the error) came.
    pub answered: Duration,
    pub outcome: Outcome,
}

impl Attempt {
    /// The revision etcd acknowledged the put at, if it did.
    pub fn revision(&self) -> Option<i64> {
        match self.outcome {
            Outcome::Acknowledged { revision } => Some(revision),
            Outcome::Failed { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// etcd acknowledged the put at this revision: it must be kept.
    Acknowledged { revision: i64 },
    /// No acknowledgement. The put may still have been applied (a timed-out or cut-off request,
    /// a proposal committed after its leader changed): it may be present or absent, never changed.
    Failed { class: ErrorClass, error: String },
}

/// Why a request got no answer, in the classes a client tells apart. All of them are normal
/// while a fault lasts; they are counted, not failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorClass {
    /// etcd's members were electing a leader (`leader changed`, `no leader`, `request timed
    /// out, possibly due to previous leader failure`).
    BetweenLeaders,
    /// The member picked could not be reached or went away (gRPC `Unavailable`, transport).
    Unavailable,
    /// No answer within the request timeout (the client's or etcd's own).
    TimedOut,
    /// etcd refused the request for a reason of its own (e.g. `database space exceeded`).
    Refused,
}

impl ErrorClass {
    pub fn label(self) -> &'static str {
        match self {
            ErrorClass::BetweenLeaders => "between leaders",
            ErrorClass::Unavailable => "unavailable",
            ErrorClass::TimedOut => "timed out",
            ErrorClass::Refused => "refused",
        }
    }
}

/// One linearizable read of a key whose put was acknowledged before the read was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub key: String,
    /// The value and revision its put was acknowledged with.
    pub value: String,
    pub written_at: i64,
    pub sent: Duration,
    pub result: ReadResult,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadResult {
    Found {
        value: String,
        mod_revision: i64,
        /// The store revision the read was served at (the response header's).
        header_revision: i64,
    },
    Missing {
        header_revision: i64,
    },
    Failed {
        class: ErrorClass,
        error: String,
    },
}

/// What the watcher received, from the start revision on, across its re-watches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watched {
    pub events: Vec<Seen>,
    /// How often the stream broke (member gone, no leader) and was opened again from the revision
    /// after the last event seen, as etcd's own client does.
    pub rewatches: u64,
    /// etcd cancelled the watch because the revision it asked for was compacted (the
    /// compaction revision): events after the last seen may be missing, and are not judged.
    pub compacted: Option<i64>,
}

/// One watch event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub key: String,
    pub value: String,
    pub revision: i64,
    pub deleted: bool,
}

/// How the watch ended, for the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchOutcome {
    /// Every acknowledged write was seen exactly once, in revision order.
    Complete { events: u64, rewatches: u64 },
    /// etcd compacted the revision the watcher had to resume from.
    Compacted {
        events: u64,
        rewatches: u64,
        compact_revision: i64,
    },
}

impl fmt::Display for WatchOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchOutcome::Complete { events, rewatches } => {
                write!(f, "complete: {events} events, {rewatches} re-watches")
            }
            WatchOutcome::Compacted {
                events,
                rewatches,
                compact_revision,
            } => write!(
                f,
                "compacted at {compact_revision}: {events} events, {rewatches} re-watches"
            ),
        }
    }
}
