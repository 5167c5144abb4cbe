//! The check of a history that ran through a rollback: every member lost, then the cluster
//! rebuilt in place from a snapshot (`EtcdRecovery{snapshot}`). Such a recovery loses the writes
//! after the snapshot by design, so [`super::check::check`]'s "every acknowledged write is kept"
//! does not hold as is. What must hold instead, given what the test knows of the rollback
//! ([`Rollback`]):
//!
//! - every write acknowledged at or below the snapshot's recorded revision is kept with its value;
//! - the writes the lost cluster acknowledged that are kept form a prefix (in revision order) of
//!   everything it acknowledged: the snapshot is one point of its history, so no write is
//!   missing below a kept one;
//! - every write it acknowledged above the revision read once the snapshot was Complete is gone
//!   (the snapshot cannot hold it);
//! - every write the restored cluster acknowledged is kept, and the lost cluster never handed out
//!   one of the restored cluster's revisions (the revision bump cleared everything it had given);
//! - the watcher was told of the rollback by a compaction at or above the restored cluster's
//!   first revision, never left silent;
//! - and everything else [`super::check::check`] asks (revision order, watch order and
//!   duplicates, reads that go back, phantom keys), with the writes rolled back excused where
//!   their loss shows: a read of one of them after the restore finds it absent, a watched one is
//!   not there at the end.
//!
//! The snapshot's recorded revision (its hashKV's, taken just before the save streamed) is a
//! lower bound of what it holds: writes acknowledged between the two are kept, and are counted
//! apart ([`RollbackFigures::kept_past_recorded`]). No I/O.

use std::fmt;

use super::check::{self, Figures, Violation};
use super::history::{Attempt, History, ReadResult};

/// What a test knows of a rollback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rollback {
    /// The revision the snapshot is known to hold (the recovery plan's `revision`: the
    /// snapshot's verified or recorded hashKV revision): every write acknowledged at or below
    /// it must be kept.
    pub snapshot_revision: i64,
    /// A revision read once the snapshot was Complete: the snapshot holds nothing above it, so
    /// every write the lost cluster acknowledged above it must be gone.
    pub taken_by: i64,
    /// The revision the restored cluster starts from (the plan's `revision + bumpRevision`):
    /// every revision the lost cluster gave is below it, every one the restored cluster gives
    /// at or above it.
    pub restored_at: i64,
}

/// A rollback's figures, beside the run's [`Figures`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RollbackFigures {
    pub rollback: Rollback,
    /// Writes the lost cluster acknowledged that are kept (the snapshot held them).
    pub kept_before: u64,
    /// Of those, the ones acknowledged above the snapshot's recorded revision.
    pub kept_past_recorded: u64,
    /// The highest revision of a kept write the lost cluster acknowledged: where the snapshot
    /// cut the writer's history.
    pub cut: Option<i64>,
    /// Writes the lost cluster acknowledged that are gone, as documented.
    pub rolled_back: u64,
    /// The highest revision the lost cluster acknowledged to the writer.
    pub pre_failure_max: Option<i64>,
    /// Writes the restored cluster acknowledged (all kept, or the check fails).
    pub acknowledged_after: u64,
    /// The lowest revision the restored cluster acknowledged to the writer.
    pub first_after: Option<i64>,
    /// The compaction revision the watcher was told of.
    pub watch_compacted_at: Option<i64>,
}

/// One broken promise of a rollback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RollbackViolation {
    /// A violation of the ordinary check that the rollback does not excuse.
    Check(Violation),
    /// A key the lost cluster wrote after the snapshot was taken is still there.
    NotRolledBack {
        key: String,
        revision: i64,
        taken_by: i64,
    },
    /// The lost cluster acknowledged a revision the restored cluster may give again: before
    /// the loss, at or above the restored cluster's first revision.
    RevisionReused {
        key: String,
        revision: i64,
        restored_at: i64,
    },
    /// The watcher was not told of the rollback by a compaction at or above the restored
    /// cluster's first revision (none, or an older one).
    WatchNotCompacted {
        compacted: Option<i64>,
        restored_at: i64,
    },
}

impl fmt::Display for RollbackViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollbackViolation::Check(v) => fmt::Display::fmt(v, f),
            RollbackViolation::NotRolledBack {
                key,
                revision,
                taken_by,
            } => write!(
                f,
                "not rolled back: {key} at revision {revision} is there, though the snapshot was \
                 Complete by revision {taken_by}"
            ),
            RollbackViolation::RevisionReused {
                key,
                revision,
                restored_at,
            } => write!(
                f,
                "revision reused: {key} was acknowledged at revision {revision} before the loss, \
                 at or above the restored cluster's first revision {restored_at}"
            ),
            RollbackViolation::WatchNotCompacted {
                compacted: None,
                restored_at,
            } => write!(
                f,
                "watch silent: the watcher was never told of the rollback (no compaction; the \
                 restored cluster starts at revision {restored_at})"
            ),
            RollbackViolation::WatchNotCompacted {
                compacted: Some(c),
                restored_at,
            } => write!(
                f,
                "watch compacted at revision {c}, below the restored cluster's first revision \
                 {restored_at}"
            ),
        }
    }
}

/// The verdict on a history that ran through a rollback.
#[derive(Clone, Debug)]
pub struct RollbackVerdict {
    /// The ordinary figures; `lost` counts only the losses the rollback does not excuse.
    pub figures: Figures,
    pub rollback: RollbackFigures,
    pub violations: Vec<RollbackViolation>,
}

/// Judge `h`, which ran through `rb`; see the module docs.
pub fn check_rollback(h: &History, rb: &Rollback) -> RollbackVerdict {
    let acked: Vec<(&Attempt, i64)> = h
        .attempts
        .iter()
        .filter_map(|a| a.revision().map(|r| (a, r)))
        .collect();
    let (before, after): (Vec<_>, Vec<_>) = acked.iter().partition(|(_, r)| *r < rb.restored_at);
    let cut = before
        .iter()
        .filter(|(a, _)| h.kept.contains_key(&a.key))
        .map(|(_, r)| *r)
        .max();
    // Below this every write of the lost cluster must be kept; above it (up to the restored
    // cluster's first revision) every one is rolled back.
    let boundary = cut
        .unwrap_or(rb.snapshot_revision)
        .max(rb.snapshot_revision);
    let rolled_back_revision = |r: i64| r > boundary && r < rb.restored_at;

    // A read of a rolled-back write served by the restored cluster finds it absent: excused.
    let mut judged = h.clone();
    judged.reads.retain(|r| {
        !(rolled_back_revision(r.written_at)
            && matches!(&r.result, ReadResult::Missing { header_revision } if *header_revision >= rb.restored_at))
    });
    let base = check::check(&judged);

    let mut violations = Vec::new();
    let mut rolled_back = 0;
    for v in base.violations {
        match &v {
            Violation::Lost { revision, .. } if rolled_back_revision(*revision) => {
                rolled_back += 1;
            }
            Violation::WatchedNotKept { revision, .. } if rolled_back_revision(*revision) => {}
            _ => violations.push(RollbackViolation::Check(v)),
        }
    }
    for (key, (_, revision)) in &h.kept {
        if *revision > rb.taken_by && *revision < rb.restored_at {
            violations.push(RollbackViolation::NotRolledBack {
                key: key.clone(),
                revision: *revision,
                taken_by: rb.taken_by,
            });
        }
    }
    // Only a marked fault tells the lost cluster's answers apart by time.
    let fault_started = h.fault_started.unwrap_or(std::time::Duration::ZERO);
    for (a, revision) in &after {
        if a.answered < fault_started {
            violations.push(RollbackViolation::RevisionReused {
                key: a.key.clone(),
                revision: *revision,
                restored_at: rb.restored_at,
            });
        }
    }
    if h.watched.compacted.is_none_or(|c| c < rb.restored_at) {
        violations.push(RollbackViolation::WatchNotCompacted {
            compacted: h.watched.compacted,
            restored_at: rb.restored_at,
        });
    }

    let mut figures = base.figures;
    figures.lost = violations
        .iter()
        .filter(|v| {
            matches!(
                v,
                RollbackViolation::Check(Violation::Lost { .. } | Violation::Changed { .. })
            )
        })
        .count() as u64;
    let kept: Vec<i64> = before
        .iter()
        .filter(|(a, _)| h.kept.contains_key(&a.key))
        .map(|(_, r)| *r)
        .collect();
    let rollback = RollbackFigures {
        rollback: *rb,
        kept_before: kept.len() as u64,
        kept_past_recorded: kept.iter().filter(|r| **r > rb.snapshot_revision).count() as u64,
        cut,
        rolled_back,
        pre_failure_max: before.iter().map(|(_, r)| *r).max(),
        acknowledged_after: after.len() as u64,
        first_after: after.iter().map(|(_, r)| *r).min(),
        watch_compacted_at: h.watched.compacted,
    };
    RollbackVerdict {
        figures,
        rollback,
        violations,
    }
}

impl fmt::Display for RollbackFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or_none = |r: Option<i64>| r.map_or_else(|| "none".to_string(), |r| r.to_string());
        write!(
            f,
            "snapshot at revision {} (Complete by {}): {} writes of the lost cluster kept ({} past \
             the recorded revision, the last at {}), {} rolled back (the lost cluster reached {}); \
             the restored cluster starts at {}: {} writes acknowledged from revision {}; the \
             watch was told of a compaction at {}",
            self.rollback.snapshot_revision,
            self.rollback.taken_by,
            self.kept_before,
            self.kept_past_recorded,
            or_none(self.cut),
            self.rolled_back,
            or_none(self.pre_failure_max),
            self.rollback.restored_at,
            self.acknowledged_after,
            or_none(self.first_after),
            or_none(self.watch_compacted_at),
        )
    }
}

#[cfg(test)]
mod tests;
