//! The check of a workload's [`History`], in the spirit of etcd's robustness tests (lighter):
//! every acknowledged write is kept with its value and revision; acknowledged revisions increase
//! strictly in acknowledgement order; the watch delivered every acknowledged write exactly once,
//! in revision order (unless etcd compacted it away, which is reported); no read saw the store
//! older than it was already known to be. Plus the figures a report prints. No I/O.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use super::history::{Attempt, ErrorClass, History, Outcome, ReadResult, WatchOutcome};

/// One broken promise, naming the key and the revisions involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// An acknowledged write is not there at the end.
    Lost { key: String, revision: i64 },
    /// An acknowledged write is there with another value or revision.
    Changed {
        key: String,
        revision: i64,
        value: String,
        found_value: String,
        found_revision: i64,
    },
    /// A key under the prefix no put wrote, or one with a value its put did not carry.
    Phantom {
        key: String,
        value: String,
        revision: i64,
    },
    /// Acknowledged revisions did not increase in acknowledgement order.
    RevisionNotIncreasing {
        key: String,
        revision: i64,
        previous_key: String,
        previous_revision: i64,
    },
    /// The watch never delivered an acknowledged write.
    WatchMissed { key: String, revision: i64 },
    /// The watch delivered a key twice.
    WatchDuplicate {
        key: String,
        first: i64,
        second: i64,
    },
    /// The watch delivered an event at or below the revision of the one before it.
    WatchOutOfOrder {
        key: String,
        revision: i64,
        previous_key: String,
        previous_revision: i64,
    },
    /// The watch delivered a write with another value or revision than acknowledged, a delete,
    /// or a key no put wrote.
    WatchWrong {
        key: String,
        revision: i64,
        what: String,
    },
    /// The watch delivered a write (so etcd committed it) that is not there at the end.
    WatchedNotKept { key: String, revision: i64 },
    /// A linearizable read, sent after its key's put was acknowledged, did not see that put.
    StaleRead {
        key: String,
        written_at: i64,
        found: String,
    },
    /// A read was served at a store revision below one an earlier read had already seen.
    ReadWentBack {
        key: String,
        header_revision: i64,
        previous_revision: i64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Lost { key, revision } => write!(
                f,
                "lost: {key}, acknowledged at revision {revision}, is not there"
            ),
            Violation::Changed {
                key,
                revision,
                value,
                found_value,
                found_revision,
            } => write!(
                f,
                "changed: {key}, acknowledged as {value:?} at revision {revision}, \
                 is {found_value:?} at revision {found_revision}"
            ),
            Violation::Phantom {
                key,
                value,
                revision,
            } => write!(
                f,
                "phantom: {key} = {value:?} at revision {revision} was never written so"
            ),
            Violation::RevisionNotIncreasing {
                key,
                revision,
                previous_key,
                previous_revision,
            } => write!(
                f,
                "revision order: {key} was acknowledged at revision {revision}, after \
                 {previous_key} at revision {previous_revision}"
            ),
            Violation::WatchMissed { key, revision } => write!(
                f,
                "watch missed: {key}, acknowledged at revision {revision}, was never delivered"
            ),
            Violation::WatchDuplicate { key, first, second } => write!(
                f,
                "watch duplicate: {key} delivered at revision {first} and again at revision {second}"
            ),
            Violation::WatchOutOfOrder {
                key,
                revision,
                previous_key,
                previous_revision,
            } => write!(
                f,
                "watch order: {key} at revision {revision} came after {previous_key} at \
                 revision {previous_revision}"
            ),
            Violation::WatchWrong {
                key,
                revision,
                what,
            } => write!(f, "watch wrong: {key} at revision {revision}: {what}"),
            Violation::WatchedNotKept { key, revision } => write!(
                f,
                "committed but lost: {key} was delivered by the watch at revision {revision} \
                 and is not there at the end"
            ),
            Violation::StaleRead {
                key,
                written_at,
                found,
            } => write!(
                f,
                "stale read: {key}, acknowledged at revision {written_at} before the read was \
                 sent, read as {found}"
            ),
            Violation::ReadWentBack {
                key,
                header_revision,
                previous_revision,
            } => write!(
                f,
                "read went back: the read of {key} was served at revision {header_revision}, \
                 below revision {previous_revision} an earlier read saw"
            ),
        }
    }
}

/// The figures of a run (whatever the verdict).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Figures {
    pub attempted: u64,
    pub acknowledged: u64,
    /// Of `acknowledged`, the puts sent while the fault lasted (the cluster kept serving).
    pub acknowledged_during: u64,
    /// Of `acknowledged`, the puts sent during each fault window of the history, in order.
    pub acknowledged_per_fault: Vec<u64>,
    /// Unacknowledged puts by class.
    pub failed: BTreeMap<ErrorClass, u64>,
    /// Acknowledged writes missing or changed at the end.
    pub lost: u64,
    /// The longest time without an acknowledged write: from the start to the first, between
    /// two, and from the last to the writer's stop.
    pub longest_write_gap: Duration,
    /// p99 latency of the acknowledged puts sent before the fault started (all of them when no
    /// fault was marked) and of those sent while it lasted.
    pub p99_before: Duration,
    pub p99_during: Duration,
    pub reads: u64,
    pub failed_reads: u64,
    pub watch: WatchOutcome,
}

/// The verdict on a history: its figures and every violation found, in the order checked.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub figures: Figures,
    pub violations: Vec<Violation>,
}

pub fn check(h: &History) -> Verdict {
    let mut violations = Vec::new();
    let written: HashMap<&str, &Attempt> = h.attempts.iter().map(|a| (a.key.as_str(), a)).collect();
    let acked: Vec<(&Attempt, i64)> = h
        .attempts
        .iter()
        .filter_map(|a| a.revision().map(|r| (a, r)))
        .collect();

    // Acknowledged revisions increase strictly: the writer waits for each answer before the
    // next put, so a later acknowledgement at a lower revision means etcd reordered history.
    for pair in acked.windows(2) {
        let ((prev, prev_rev), (next, next_rev)) = (pair[0], pair[1]);
        if next_rev <= prev_rev {
            violations.push(Violation::RevisionNotIncreasing {
                key: next.key.clone(),
                revision: next_rev,
                previous_key: prev.key.clone(),
                previous_revision: prev_rev,
            });
        }
    }

    // Every acknowledged write is kept, as written.
    let mut lost = 0;
    for (a, revision) in &acked {
        match h.kept.get(&a.key) {
            None => {
                lost += 1;
                violations.push(Violation::Lost {
                    key: a.key.clone(),
                    revision: *revision,
                });
            }
            Some((value, found)) if value != &a.value || found != revision => {
                lost += 1;
                violations.push(Violation::Changed {
                    key: a.key.clone(),
                    revision: *revision,
                    value: a.value.clone(),
                    found_value: value.clone(),
                    found_revision: *found,
                });
            }
            Some(_) => {}
        }
    }
    // Nothing is there that no put wrote (an unacknowledged put may be there, as sent).
    for (key, (value, revision)) in &h.kept {
        if written.get(key.as_str()).is_none_or(|a| &a.value != value) {
            violations.push(Violation::Phantom {
                key: key.clone(),
                value: value.clone(),
                revision: *revision,
            });
        }
    }

    check_watch(h, &written, &acked, &mut violations);
    check_reads(h, &mut violations);

    let figures = figures(h, &acked, lost);
    Verdict {
        figures,
        violations,
    }
}

fn check_watch(
    h: &History,
    written: &HashMap<&str, &Attempt>,
    acked: &[(&Attempt, i64)],
    violations: &mut Vec<Violation>,
) {
    let mut delivered: HashMap<&str, i64> = HashMap::new();
    let mut previous: Option<(&str, i64)> = None;
    for e in &h.watched.events {
        if let Some((previous_key, previous_revision)) = previous {
            if e.revision <= previous_revision {
                violations.push(Violation::WatchOutOfOrder {
                    key: e.key.clone(),
                    revision: e.revision,
                    previous_key: previous_key.to_string(),
                    previous_revision,
                });
            }
        }
        previous = Some((e.key.as_str(), e.revision));
        if let Some(first) = delivered.insert(&e.key, e.revision) {
            violations.push(Violation::WatchDuplicate {
                key: e.key.clone(),
                first,
                second: e.revision,
            });
            continue;
        }
        let wrong = |what: String| Violation::WatchWrong {
            key: e.key.clone(),
            revision: e.revision,
            what,
        };
        if e.deleted {
            violations.push(wrong("a delete, and nothing deletes".into()));
            continue;
        }
        match written.get(e.key.as_str()) {
            None => violations.push(wrong("no put wrote this key".into())),
            Some(a) if a.value != e.value => violations.push(wrong(format!(
                "value {:?}, the put carried {:?}",
                e.value, a.value
            ))),
            Some(a) => match a.outcome {
                Outcome::Acknowledged { revision } if revision != e.revision => {
                    violations.push(wrong(format!("the put was acknowledged at {revision}")))
                }
                // An acknowledged write missing at the end is reported as lost above.
                Outcome::Acknowledged { .. } => {}
                Outcome::Failed { .. } if !h.kept.contains_key(&e.key) => {
                    violations.push(Violation::WatchedNotKept {
                        key: e.key.clone(),
                        revision: e.revision,
                    });
                }
                Outcome::Failed { .. } => {}
            },
        }
    }
    // Every acknowledged write was delivered, up to where a compaction cut the watch off.
    let last_seen = h.watched.events.iter().map(|e| e.revision).max();
    for (a, revision) in acked {
        let excused = h.watched.compacted.is_some() && last_seen.is_none_or(|l| *revision > l);
        if !delivered.contains_key(a.key.as_str()) && !excused {
            violations.push(Violation::WatchMissed {
                key: a.key.clone(),
                revision: *revision,
            });
        }
    }
}

fn check_reads(h: &History, violations: &mut Vec<Violation>) {
    let mut newest: Option<i64> = None;
    for r in &h.reads {
        let header = match &r.result {
            ReadResult::Found {
                header_revision, ..
            }
            | ReadResult::Missing { header_revision } => *header_revision,
            ReadResult::Failed { .. } => continue,
        };
        if let Some(previous_revision) = newest.filter(|n| header < *n) {
            violations.push(Violation::ReadWentBack {
                key: r.key.clone(),
                header_revision: header,
                previous_revision,
            });
        }
        newest = Some(newest.map_or(header, |n| n.max(header)));
        let found = match &r.result {
            ReadResult::Found {
                value,
                mod_revision,
                ..
            } if (value, *mod_revision) == (&r.value, r.written_at) => continue,
            ReadResult::Found {
                value,
                mod_revision,
                header_revision,
            } => format!("{value:?} at revision {mod_revision} (served at {header_revision})"),
            ReadResult::Missing { header_revision } => {
                format!("absent (served at revision {header_revision})")
            }
            ReadResult::Failed { .. } => continue,
        };
        violations.push(Violation::StaleRead {
            key: r.key.clone(),
            written_at: r.written_at,
            found,
        });
    }
}

fn figures(h: &History, acked: &[(&Attempt, i64)], lost: u64) -> Figures {
    let mut failed = BTreeMap::new();
    for a in &h.attempts {
        if let Outcome::Failed { class, .. } = a.outcome {
            *failed.entry(class).or_insert(0) += 1;
        }
    }
    let mut longest_write_gap = Duration::ZERO;
    let mut last = Duration::ZERO;
    for (a, _) in acked {
        longest_write_gap = longest_write_gap.max(a.answered.saturating_sub(last));
        last = a.answered;
    }
    longest_write_gap = longest_write_gap.max(h.ended.saturating_sub(last));

    let fault_start = h.fault_started.unwrap_or(Duration::MAX);
    let fault_end = h.fault_ended.unwrap_or(Duration::MAX);
    let latency = |from: Duration, to: Duration| {
        let window: Vec<Duration> = acked
            .iter()
            .filter(|(a, _)| a.sent >= from && a.sent < to)
            .map(|(a, _)| a.answered.saturating_sub(a.sent))
            .collect();
        p99(window)
    };
    let acknowledged_during = acked
        .iter()
        .filter(|(a, _)| a.sent >= fault_start && a.sent < fault_end)
        .count() as u64;
    let acknowledged_per_fault = h
        .fault_windows
        .iter()
        .map(|(from, to)| {
            acked
                .iter()
                .filter(|(a, _)| a.sent >= *from && a.sent < *to)
                .count() as u64
        })
        .collect();
    let failed_reads = h
        .reads
        .iter()
        .filter(|r| matches!(r.result, ReadResult::Failed { .. }))
        .count() as u64;
    let events = h.watched.events.len() as u64;
    let rewatches = h.watched.rewatches;
    let watch = match h.watched.compacted {
        None => WatchOutcome::Complete { events, rewatches },
        Some(compact_revision) => WatchOutcome::Compacted {
            events,
            rewatches,
            compact_revision,
        },
    };
    Figures {
        attempted: h.attempts.len() as u64,
        acknowledged: acked.len() as u64,
        acknowledged_during,
        acknowledged_per_fault,
        failed,
        lost,
        longest_write_gap,
        p99_before: latency(Duration::ZERO, fault_start),
        p99_during: latency(fault_start, fault_end),
        reads: h.reads.len() as u64,
        failed_reads,
        watch,
    }
}

/// The 99th percentile (nearest rank) of `samples`; zero for none.
pub fn p99(mut samples: Vec<Duration>) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort();
    let rank = (samples.len() * 99).div_ceil(100);
    samples[rank.saturating_sub(1)]
}

#[cfg(test)]
mod tests;
