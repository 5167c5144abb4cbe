use std::time::Duration;

use super::*;
use crate::workload::history::{Read, Seen, Watched};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn key(i: u64) -> String {
    format!("wl/{i:08}")
}

fn value(i: u64) -> String {
    format!("v{i}")
}

/// Put `i` sent at `20 * i` ms and answered 5 ms later at `revision`.
fn acked(i: u64, revision: i64) -> Attempt {
    Attempt {
        key: key(i),
        value: value(i),
        sent: ms(20 * i),
        answered: ms(20 * i + 5),
        outcome: Outcome::Acknowledged { revision },
    }
}

fn failed(i: u64) -> Attempt {
    Attempt {
        key: key(i),
        value: value(i),
        sent: ms(20 * i),
        answered: ms(20 * i + 2000),
        outcome: Outcome::Failed {
            class: ErrorClass::TimedOut,
            error: "timed out".into(),
        },
    }
}

fn seen(i: u64, revision: i64) -> Seen {
    Seen {
        key: key(i),
        value: value(i),
        revision,
        deleted: false,
    }
}

/// A history where puts 0..n were acknowledged at revisions 10.., all kept and all watched.
fn clean(n: u64) -> History {
    let attempts: Vec<Attempt> = (0..n).map(|i| acked(i, 10 + i as i64)).collect();
    let kept = attempts
        .iter()
        .map(|a| (a.key.clone(), (a.value.clone(), a.revision().unwrap_or(0))))
        .collect();
    let events = (0..n).map(|i| seen(i, 10 + i as i64)).collect();
    History {
        prefix: "wl/".into(),
        attempts,
        reads: Vec::new(),
        watched: Watched {
            events,
            rewatches: 0,
            compacted: None,
        },
        kept,
        fault_started: None,
        fault_ended: None,
        fault_windows: Vec::new(),
        ended: ms(20 * n),
    }
}

fn read(i: u64, written_at: i64, result: ReadResult) -> Read {
    Read {
        key: key(i),
        value: value(i),
        written_at,
        sent: ms(20 * i + 10),
        result,
    }
}

#[test]
fn a_clean_history_has_no_violation_and_counts_every_write() {
    let verdict = check(&clean(5));
    assert_eq!(verdict.violations, vec![]);
    assert_eq!(verdict.figures.attempted, 5);
    assert_eq!(verdict.figures.acknowledged, 5);
    assert_eq!(verdict.figures.lost, 0);
    assert_eq!(
        verdict.figures.watch,
        WatchOutcome::Complete {
            events: 5,
            rewatches: 0
        }
    );
}

#[test]
fn an_acknowledged_write_missing_at_the_end_is_lost_naming_key_and_revision() {
    let mut h = clean(5);
    h.kept.remove(&key(3));
    let verdict = check(&h);
    assert_eq!(verdict.figures.lost, 1);
    assert_eq!(
        verdict.violations,
        vec![Violation::Lost {
            key: key(3),
            revision: 13
        }]
    );
    assert!(verdict.violations[0].to_string().contains("wl/00000003"));
    assert!(verdict.violations[0].to_string().contains("revision 13"));
}

#[test]
fn an_acknowledged_write_with_another_value_is_lost() {
    let mut h = clean(3);
    h.kept.insert(key(1), ("other".into(), 11));
    let verdict = check(&h);
    assert_eq!(verdict.figures.lost, 1);
    assert!(matches!(
        &verdict.violations[..],
        [Violation::Changed { key: k, revision: 11, .. }, Violation::Phantom { .. }] if *k == key(1)
    ));
}

#[test]
fn an_unacknowledged_write_may_be_kept_or_not() {
    let mut h = clean(3);
    h.attempts.push(failed(3));
    h.attempts.push(failed(4));
    // Put 3 was applied after all (and watched), put 4 was not.
    h.kept.insert(key(3), (value(3), 13));
    h.watched.events.push(seen(3, 13));
    let verdict = check(&h);
    assert_eq!(verdict.violations, vec![]);
    assert_eq!(verdict.figures.attempted, 5);
    assert_eq!(verdict.figures.acknowledged, 3);
    assert_eq!(verdict.figures.failed.get(&ErrorClass::TimedOut), Some(&2));
}

#[test]
fn a_key_no_put_wrote_is_a_phantom() {
    let mut h = clean(2);
    h.kept.insert("wl/zzz".into(), ("x".into(), 40));
    assert_eq!(
        check(&h).violations,
        vec![Violation::Phantom {
            key: "wl/zzz".into(),
            value: "x".into(),
            revision: 40
        }]
    );
}

#[test]
fn a_revision_going_backwards_in_acknowledgement_order_is_caught() {
    let mut h = clean(4);
    // Put 2 acknowledged at 11, below put 1's 11: not strictly increasing.
    h.attempts[2].outcome = Outcome::Acknowledged { revision: 11 };
    h.kept.insert(key(2), (value(2), 11));
    h.watched.events[2].revision = 11;
    let verdict = check(&h);
    assert!(
        verdict
            .violations
            .contains(&Violation::RevisionNotIncreasing {
                key: key(2),
                revision: 11,
                previous_key: key(1),
                previous_revision: 11
            }),
        "{:?}",
        verdict.violations
    );
}

#[test]
fn a_duplicate_watch_event_is_caught() {
    let mut h = clean(3);
    h.watched.events.push(seen(1, 11));
    let verdict = check(&h);
    assert!(verdict.violations.contains(&Violation::WatchDuplicate {
        key: key(1),
        first: 11,
        second: 11
    }));
}

#[test]
fn a_watch_event_out_of_revision_order_is_caught() {
    let mut h = clean(3);
    h.watched.events.swap(0, 1);
    let verdict = check(&h);
    assert_eq!(
        verdict.violations,
        vec![Violation::WatchOutOfOrder {
            key: key(0),
            revision: 10,
            previous_key: key(1),
            previous_revision: 11
        }]
    );
}

#[test]
fn an_acknowledged_write_the_watch_never_delivered_is_caught() {
    let mut h = clean(3);
    h.watched.events.remove(1);
    assert_eq!(
        check(&h).violations,
        vec![Violation::WatchMissed {
            key: key(1),
            revision: 11
        }]
    );
}

#[test]
fn a_watch_event_at_another_revision_than_acknowledged_is_caught() {
    let mut h = clean(3);
    h.watched.events[2].revision = 15;
    let violations = check(&h).violations;
    assert!(matches!(
        &violations[..],
        [Violation::WatchWrong { revision: 15, .. }]
    ));
}

#[test]
fn a_compaction_excuses_only_the_events_after_the_last_one_seen() {
    let mut h = clean(5);
    h.watched.events.truncate(2);
    h.watched.compacted = Some(30);
    let verdict = check(&h);
    assert_eq!(verdict.violations, vec![]);
    assert!(matches!(
        verdict.figures.watch,
        WatchOutcome::Compacted {
            compact_revision: 30,
            ..
        }
    ));
    // A gap before the last event seen is not excused.
    let mut h = clean(5);
    h.watched.events.remove(1);
    h.watched.compacted = Some(30);
    assert_eq!(
        check(&h).violations,
        vec![Violation::WatchMissed {
            key: key(1),
            revision: 11
        }]
    );
}

#[test]
fn a_committed_write_the_watch_saw_but_the_end_lacks_is_caught() {
    let mut h = clean(2);
    h.attempts.push(failed(2));
    h.watched.events.push(seen(2, 12));
    assert_eq!(
        check(&h).violations,
        vec![Violation::WatchedNotKept {
            key: key(2),
            revision: 12
        }]
    );
}

#[test]
fn a_read_that_misses_an_acknowledged_write_is_stale() {
    let mut h = clean(3);
    h.reads.push(read(
        1,
        11,
        ReadResult::Found {
            value: value(1),
            mod_revision: 11,
            header_revision: 11,
        },
    ));
    h.reads.push(read(
        2,
        12,
        ReadResult::Missing {
            header_revision: 11,
        },
    ));
    let verdict = check(&h);
    assert_eq!(verdict.violations.len(), 1, "{:?}", verdict.violations);
    assert!(
        matches!(&verdict.violations[0], Violation::StaleRead { key: k, written_at: 12, .. } if *k == key(2))
    );
}

#[test]
fn a_read_served_below_a_revision_already_read_went_back() {
    let mut h = clean(3);
    let found = |i: u64, header_revision: i64| ReadResult::Found {
        value: value(i),
        mod_revision: 10 + i as i64,
        header_revision,
    };
    h.reads.push(read(1, 11, found(1, 14)));
    h.reads.push(read(1, 11, found(1, 12)));
    h.reads.push(read(
        2,
        12,
        ReadResult::Failed {
            class: ErrorClass::BetweenLeaders,
            error: "etcdserver: leader changed".into(),
        },
    ));
    let verdict = check(&h);
    assert_eq!(
        verdict.violations,
        vec![Violation::ReadWentBack {
            key: key(1),
            header_revision: 12,
            previous_revision: 14
        }]
    );
    assert_eq!(verdict.figures.reads, 3);
    assert_eq!(verdict.figures.failed_reads, 1);
}

#[test]
fn the_longest_gap_spans_failed_puts_and_the_tail() {
    let mut h = clean(3);
    // Acks at 5, 25, 45 ms; then two failures and an ack answered at 1000 ms.
    h.attempts.push(failed(3));
    h.attempts.push(Attempt {
        answered: ms(1000),
        ..acked(4, 20)
    });
    h.kept.insert(key(4), (value(4), 20));
    h.watched.events.push(seen(4, 20));
    h.ended = ms(1100);
    let verdict = check(&h);
    assert_eq!(verdict.violations, vec![]);
    assert_eq!(verdict.figures.longest_write_gap, ms(955));
}

#[test]
fn latency_before_and_during_the_fault_are_apart() {
    let mut h = clean(10);
    // Puts sent from 100 ms on are in the fault; make them slow.
    h.fault_started = Some(ms(100));
    h.fault_ended = Some(ms(160));
    for a in h.attempts.iter_mut().filter(|a| a.sent >= ms(100)) {
        a.answered = a.sent + ms(300);
    }
    let f = check(&h).figures;
    assert_eq!(f.p99_before, ms(5));
    assert_eq!(f.p99_during, ms(300));
    assert_eq!(f.acknowledged_during, 3);
}

#[test]
fn writes_acknowledged_in_each_fault_window_are_counted_apart() {
    // Puts sent every 20 ms from 0 to 180 ms; two faults, the second with no put in it.
    let mut h = clean(10);
    h.fault_windows = vec![(ms(30), ms(90)), (ms(182), ms(200))];
    assert_eq!(check(&h).figures.acknowledged_per_fault, vec![3, 0]);
    h.fault_windows.clear();
    assert!(check(&h).figures.acknowledged_per_fault.is_empty());
}

#[test]
fn p99_takes_the_nearest_rank() {
    assert_eq!(p99(vec![]), Duration::ZERO);
    assert_eq!(p99(vec![ms(7)]), ms(7));
    let hundred: Vec<Duration> = (1..=100).map(ms).collect();
    assert_eq!(p99(hundred), ms(99));
    let two_hundred: Vec<Duration> = (1..=200).rev().map(ms).collect();
    assert_eq!(p99(two_hundred), ms(198));
}
