use std::time::Duration;

use super::*;
use crate::workload::history::{Attempt, ErrorClass, Outcome, Read, Seen, Watched};

/// The restored cluster's first revision in these histories (snapshot 13 bumped by a billion).
const RESTORED: i64 = 1_000_000_013;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn key(i: u64) -> String {
    format!("wl/{i:08}")
}

/// Put `i` sent at `20 * i` ms and answered 5 ms later at `revision`.
fn acked(i: u64, revision: i64) -> Attempt {
    Attempt {
        key: key(i),
        value: format!("v{i}"),
        sent: ms(20 * i),
        answered: ms(20 * i + 5),
        outcome: Outcome::Acknowledged { revision },
    }
}

fn failed(i: u64) -> Attempt {
    Attempt {
        key: key(i),
        value: format!("v{i}"),
        sent: ms(20 * i),
        answered: ms(20 * i + 2000),
        outcome: Outcome::Failed {
            class: ErrorClass::Unavailable,
            error: "unavailable".into(),
        },
    }
}

fn keep(h: &mut History, i: u64) {
    let a = h.attempts.iter().find(|a| a.key == key(i)).cloned();
    let a = a.unwrap_or_else(|| panic!("no put {i}"));
    let revision = a.revision().unwrap_or(0);
    h.kept.insert(a.key, (a.value, revision));
}

/// Puts 0..10 acknowledged by the lost cluster at revisions 10..19, the snapshot recorded at 13
/// and Complete by 15, holding 10..14 (one write past its recorded revision); the fault marked at
/// put 10 (200 ms); puts 10..15 unanswered; puts 15..20 acknowledged by the restored cluster from
/// revision `RESTORED + 2` and kept; the watch saw 10..19, then a compaction at `RESTORED + 1`.
fn rolled_back() -> (History, Rollback) {
    let mut attempts: Vec<Attempt> = (0..10).map(|i| acked(i, 10 + i as i64)).collect();
    attempts.extend((10..15).map(failed));
    attempts.extend((15..20).map(|i| acked(i, RESTORED + 2 + (i as i64 - 15))));
    let events = (0..10)
        .map(|i| Seen {
            key: key(i),
            value: format!("v{i}"),
            revision: 10 + i as i64,
            deleted: false,
        })
        .collect();
    let mut h = History {
        prefix: "wl/".into(),
        attempts,
        reads: Vec::new(),
        watched: Watched {
            events,
            rewatches: 3,
            compacted: Some(RESTORED + 1),
        },
        kept: Default::default(),
        fault_started: Some(ms(200)),
        fault_ended: Some(ms(300)),
        fault_windows: vec![(ms(200), ms(300))],
        ended: ms(400),
    };
    for i in (0..5).chain(15..20) {
        keep(&mut h, i);
    }
    let rb = Rollback {
        snapshot_revision: 13,
        taken_by: 15,
        restored_at: RESTORED,
    };
    (h, rb)
}

#[test]
fn a_rollback_to_the_snapshot_passes_and_counts_what_was_kept_and_rolled_back() {
    let (h, rb) = rolled_back();
    let verdict = check_rollback(&h, &rb);
    assert_eq!(verdict.violations, vec![]);
    assert_eq!(verdict.figures.lost, 0);
    assert_eq!(
        verdict.rollback,
        RollbackFigures {
            rollback: rb,
            kept_before: 5,
            kept_past_recorded: 1,
            cut: Some(14),
            rolled_back: 5,
            pre_failure_max: Some(19),
            acknowledged_after: 5,
            first_after: Some(RESTORED + 2),
            watch_compacted_at: Some(RESTORED + 1),
        }
    );
    let shown = verdict.rollback.to_string();
    assert!(
        shown.contains("5 rolled back") && shown.contains("reached 19"),
        "{shown}"
    );
}

#[test]
fn the_ordinary_check_reports_the_rolled_back_writes_as_lost() {
    // What the variant is for: the plain check cannot tell a rollback from data loss.
    let (h, _) = rolled_back();
    assert_eq!(check::check(&h).figures.lost, 5);
}

#[test]
fn a_write_at_or_below_the_snapshot_revision_must_be_kept() {
    let (mut h, rb) = rolled_back();
    // Only 0..=2 kept: the restore ends below the snapshot's recorded revision 13.
    h.kept.remove(&key(3));
    h.kept.remove(&key(4));
    let verdict = check_rollback(&h, &rb);
    assert_eq!(
        verdict.violations,
        vec![RollbackViolation::Check(Violation::Lost {
            key: key(3),
            revision: 13
        })]
    );
    assert_eq!(verdict.figures.lost, 1);
    assert_eq!(verdict.rollback.rolled_back, 6);
}

#[test]
fn a_write_missing_below_a_kept_one_is_lost_not_rolled_back() {
    let (mut h, rb) = rolled_back();
    // 12 gone while 14 is kept: no snapshot is that history.
    h.kept.remove(&key(2));
    let verdict = check_rollback(&h, &rb);
    assert_eq!(
        verdict.violations,
        vec![RollbackViolation::Check(Violation::Lost {
            key: key(2),
            revision: 12
        })]
    );
}

#[test]
fn a_write_after_the_snapshot_was_complete_must_be_gone() {
    let (mut h, rb) = rolled_back();
    for i in 5..7 {
        keep(&mut h, i);
    }
    let verdict = check_rollback(&h, &rb);
    assert_eq!(
        verdict.violations,
        vec![RollbackViolation::NotRolledBack {
            key: key(6),
            revision: 16,
            taken_by: 15
        }]
    );
    assert!(verdict.violations[0].to_string().contains("wl/00000006"));
}

#[test]
fn a_write_of_the_restored_cluster_must_be_kept() {
    let (mut h, rb) = rolled_back();
    h.kept.remove(&key(17));
    let verdict = check_rollback(&h, &rb);
    assert_eq!(
        verdict.violations,
        vec![RollbackViolation::Check(Violation::Lost {
            key: key(17),
            revision: RESTORED + 4
        })]
    );
}

#[test]
fn a_watch_never_told_of_the_rollback_is_a_violation() {
    let (mut h, rb) = rolled_back();
    h.watched.compacted = None;
    let verdict = check_rollback(&h, &rb);
    // Besides the restored cluster's writes it never delivered.
    let silent = RollbackViolation::WatchNotCompacted {
        compacted: None,
        restored_at: RESTORED,
    };
    assert_eq!(verdict.violations.last(), Some(&silent));
    assert_eq!(verdict.violations.len(), 6, "{:?}", verdict.violations);
    assert!(silent.to_string().contains("watch silent"));
    h.watched.compacted = Some(14);
    assert!(matches!(
        check_rollback(&h, &rb).violations.as_slice(),
        [RollbackViolation::WatchNotCompacted {
            compacted: Some(14),
            ..
        }]
    ));
}

#[test]
fn the_lost_cluster_handing_out_a_restored_revision_is_a_violation() {
    let (mut h, rb) = rolled_back();
    // Put 9 answered before the fault at a revision the restored cluster gives.
    h.attempts[9].outcome = Outcome::Acknowledged {
        revision: RESTORED + 1,
    };
    keep(&mut h, 9);
    let verdict = check_rollback(&h, &rb);
    assert!(
        verdict
            .violations
            .contains(&RollbackViolation::RevisionReused {
                key: key(9),
                revision: RESTORED + 1,
                restored_at: RESTORED
            }),
        "{:?}",
        verdict.violations
    );
}

#[test]
fn a_read_of_a_rolled_back_write_is_excused_only_once_the_restored_cluster_serves_it() {
    let (mut h, rb) = rolled_back();
    let read = |header_revision| Read {
        key: key(9),
        value: "v9".into(),
        written_at: 19,
        sent: ms(350),
        result: ReadResult::Missing { header_revision },
    };
    h.reads = vec![read(RESTORED + 1)];
    assert_eq!(check_rollback(&h, &rb).violations, vec![]);
    // Absent on the lost cluster itself: a stale read.
    h.reads = vec![read(19)];
    assert!(matches!(
        check_rollback(&h, &rb).violations.as_slice(),
        [RollbackViolation::Check(Violation::StaleRead { .. })]
    ));
}
