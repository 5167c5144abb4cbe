//! The schedule's decisions, without I/O: which finished snapshots retention removes, and how
//! each is removed. When a run is due is [`crate::cron`]'s, shared with defrag policies.

use api::v1alpha2::{EtcdSnapshotStatus, SnapshotPhase};
use chrono::{DateTime, Utc};

/// Where one of the schedule's snapshots stands, as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not finished yet (Pending, Started, or no status).
    Running,
    Complete,
    Failed,
}

/// What retention with `requireVerified` knows of a Complete snapshot's verification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verification {
    /// `Verified=True`.
    Verified,
    /// `Verified=Unknown`: the verification Job has not reported yet.
    Pending,
    /// `Verified=False`, or no verification at all (asked for none, or taken before the
    /// operator verified snapshots).
    #[default]
    Unverified,
}

/// One of the schedule's snapshots, as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub name: String,
    pub created: DateTime<Utc>,
    pub state: State,
    pub verification: Verification,
}

/// Where a snapshot stands, from its status.
pub fn state_of(status: Option<&EtcdSnapshotStatus>) -> State {
    match status.and_then(|s| s.phase) {
        Some(SnapshotPhase::Complete) => State::Complete,
        Some(SnapshotPhase::Failed) => State::Failed,
        _ => State::Running,
    }
}

/// A snapshot's verification, from its status.
pub fn verification_of(status: Option<&EtcdSnapshotStatus>) -> Verification {
    match status {
        Some(s) if s.verifying() => Verification::Pending,
        Some(s) if s.verified() == Some(true) => Verification::Verified,
        _ => Verification::Unverified,
    }
}

/// The finished snapshots to delete, oldest first. Complete and Failed snapshots are counted
/// apart, newest first: a Complete one goes when it is beyond the newest `keep_last` Complete
/// ones or older than `max_age_seconds`, a Failed one when it is beyond the newest `keep_last`
/// Failed ones or older than `max_age_seconds`. Failed runs therefore never push a good
/// snapshot out, and the newest Complete snapshot is never pruned by any rule (a long outage or
/// a suspended schedule must not leave no backup at all). Running snapshots are never pruned
/// and count towards nothing.
///
/// With `require_verified`, only verified snapshots count as good ones: the same rules apply
/// with verified, unverified (Complete but `Verified=False` or never verified) and Failed
/// snapshots counted apart, the newest verified one never pruned, and one still being verified
/// neither counted nor pruned. A snapshot goes only when both counts drop it, so nothing is
/// deleted that retention without `require_verified` would keep, and an unverified snapshot
/// never pushes a verified one out.
pub fn prune_with(snapshots: &[Owned], retention: &Retention, now: DateTime<Utc>) -> Vec<String> {
    let by_phase = prune_by(snapshots, retention, now, |s| match s.state {
        State::Running => None,
        State::Complete => Some(Class::Good),
        State::Failed => Some(Class::Failed),
    });
    if !retention.require_verified {
        return by_phase;
    }
    let by_verification = prune_by(snapshots, retention, now, |s| {
        match (s.state, s.verification) {
            (State::Running, _) | (State::Complete, Verification::Pending) => None,
            (State::Complete, Verification::Verified) => Some(Class::Good),
            (State::Complete, Verification::Unverified) => Some(Class::Unverified),
            (State::Failed, _) => Some(Class::Failed),
        }
    });
    by_phase
        .into_iter()
        .filter(|name| by_verification.contains(name))
        .collect()
}

/// [`prune_with`] without `require_verified`.
pub fn prune(
    snapshots: &[Owned],
    keep_last: Option<i32>,
    max_age_seconds: Option<i64>,
    now: DateTime<Utc>,
) -> Vec<String> {
    let retention = Retention {
        keep_last,
        max_age_seconds,
        require_verified: false,
    };
    prune_with(snapshots, &retention, now)
}

/// `spec.retention` as the planner reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub keep_last: Option<i32>,
    pub max_age_seconds: Option<i64>,
    pub require_verified: bool,
}

/// The groups retention counts apart; the newest `Good` one is never pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Good,
    Unverified,
    Failed,
}

/// The snapshots `class` puts in a group (`None`: neither counted nor pruned) beyond the
/// newest `keep_last` of their group or older than `max_age_seconds`, except the newest good
/// one; oldest first.
fn prune_by(
    snapshots: &[Owned],
    retention: &Retention,
    now: DateTime<Utc>,
    class: impl Fn(&Owned) -> Option<Class>,
) -> Vec<String> {
    let keep = retention
        .keep_last
        .map(|k| usize::try_from(k.max(0)).unwrap_or(0));
    let too_old = |s: &Owned| {
        retention
            .max_age_seconds
            .is_some_and(|m| (now - s.created).num_seconds() > m)
    };
    let mut gone: Vec<&Owned> = Vec::new();
    for group in [Class::Good, Class::Unverified, Class::Failed] {
        let mut these: Vec<&Owned> = snapshots
            .iter()
            .filter(|s| class(s) == Some(group))
            .collect();
        // Newest first; the name breaks ties (it carries the run's minute).
        these.sort_by(|a, b| b.created.cmp(&a.created).then(b.name.cmp(&a.name)));
        for (i, s) in these.into_iter().enumerate() {
            let newest_good = group == Class::Good && i == 0;
            if !newest_good && (keep.is_some_and(|k| i >= k) || too_old(s)) {
                gone.push(s);
            }
        }
    }
    gone.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    gone.into_iter().map(|s| s.name.clone()).collect()
}

/// Where a pruned snapshot was to be stored, as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    S3,
    Pvc(Claim),
}

/// The destination claim of a PVC snapshot, now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Bound to a volume: a Pod can mount it.
    Bound,
    /// Pending: never bound, so no Pod ever wrote to it.
    Pending,
    /// Missing or Lost: no Pod can reach its files any more.
    Gone,
}

/// One snapshot retention prunes: what it finished as, where it was to be stored, and whether
/// it recorded a stored copy (`status.artifact`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub state: State,
    pub destination: Destination,
    pub artifact: bool,
}

/// What a prune Job's agent does with a file at the snapshot's path that the snapshot did not
/// write (its `.uid` sidecar names another UID, or there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unowned {
    /// Fail the Job: the snapshot says it stored a file there, so a stranger in its place is
    /// for a human to look at, and the EtcdSnapshot is kept.
    Fail,
    /// Leave the file and succeed: the snapshot may never have written there, so the file is
    /// not its to prune, and nothing keeps the EtcdSnapshot.
    Leave,
}

/// How retention removes what a pruned snapshot stored, before the EtcdSnapshot goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Delete the S3 object at `status.artifact.uri`.
    S3Artifact,
    /// Delete the S3 object at the snapshot's key if its UID metadata names the snapshot (a
    /// Failed snapshot may have stored its object all the same).
    S3IfOwned,
    /// Run the `<snapshot>-prune` Job on the file at the snapshot's path (`<subPath>/<name>.db`,
    /// the snapshot Job's own naming); it removes the file only if its `.uid` sidecar names the
    /// snapshot.
    PvcJob(Unowned),
    /// Nothing can have been stored where the operator could reach it: why.
    Nothing(&'static str),
}

/// How to remove what `pruned` stored. Deleting the EtcdSnapshot first would forget a stored
/// copy for good, so everything that may have been written is looked for, and only what the
/// snapshot itself wrote (its UID stamp) is deleted.
pub fn removal(pruned: &Pruned) -> Removal {
    match pruned.destination {
        Destination::S3 if pruned.artifact => Removal::S3Artifact,
        Destination::S3 => Removal::S3IfOwned,
        Destination::Pvc(_) if pruned.artifact || pruned.state == State::Complete => {
            Removal::PvcJob(Unowned::Fail)
        }
        // Failed: nothing recorded, but the agent may have renamed its file into place before
        // it was killed or its Job lost. Its `.uid` sidecar (written before the rename) tells
        // its own file from a stranger's; a stranger's is not this snapshot's to prune and
        // must not keep it forever.
        Destination::Pvc(Claim::Bound) => Removal::PvcJob(Unowned::Leave),
        Destination::Pvc(Claim::Pending) => {
            Removal::Nothing("the destination claim was never bound: nothing was written")
        }
        Destination::Pvc(Claim::Gone) => {
            Removal::Nothing("the destination claim is gone: no Pod can reach a file on it")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 10, h, m, 0).unwrap()
    }

    fn owned(name: &str, m: u32, state: State) -> Owned {
        Owned {
            name: name.into(),
            created: at(10, m),
            state,
            verification: Verification::Unverified,
        }
    }

    fn checked(name: &str, m: u32, verification: Verification) -> Owned {
        Owned {
            verification,
            ..owned(name, m, State::Complete)
        }
    }

    fn requiring(keep_last: Option<i32>, max_age_seconds: Option<i64>) -> Retention {
        Retention {
            keep_last,
            max_age_seconds,
            require_verified: true,
        }
    }

    #[test]
    fn with_required_verification_unverified_snapshots_never_push_verified_ones_out() {
        use Verification::{Unverified, Verified};
        // Two verified runs, then three whose verification failed (a corrupting store).
        let all = [
            checked("good-1", 1, Verified),
            checked("good-2", 2, Verified),
            checked("bad-3", 3, Unverified),
            checked("bad-4", 4, Unverified),
            checked("bad-5", 5, Unverified),
        ];
        // Counted as Complete alike, keepLast 2 would leave only bad-4 and bad-5.
        assert_eq!(
            prune(&all, Some(2), None, at(10, 6)),
            ["good-1", "good-2", "bad-3"]
        );
        // Requiring verification: both verified ones stay, the unverified count apart.
        assert_eq!(
            prune_with(&all, &requiring(Some(2), None), at(10, 6)),
            ["bad-3"]
        );
    }

    #[test]
    fn a_snapshot_being_verified_is_neither_counted_nor_pruned() {
        use Verification::{Pending, Verified};
        let all = [
            checked("good-1", 1, Verified),
            checked("good-2", 2, Verified),
            checked("checking-3", 3, Pending),
        ];
        // Without the requirement checking-3 counts as Complete and pushes good-1 out.
        assert_eq!(prune(&all, Some(2), None, at(10, 4)), ["good-1"]);
        // With it, good-1 and good-2 are the two counted; checking-3 waits for its result.
        assert!(prune_with(&all, &requiring(Some(2), None), at(10, 4)).is_empty());
        // Once it is verified it counts, and good-1 goes.
        let done = [
            checked("good-1", 1, Verified),
            checked("good-2", 2, Verified),
            checked("checking-3", 3, Verified),
        ];
        assert_eq!(
            prune_with(&done, &requiring(Some(2), None), at(10, 4)),
            ["good-1"]
        );
    }

    #[test]
    fn required_verification_never_prunes_what_plain_retention_keeps() {
        use State::Failed;
        use Verification::{Pending, Unverified, Verified};
        // Every mix of four snapshots: whatever the verification says, the pruned set is a
        // subset of what retention by phase alone prunes, and the newest verified one stays.
        let kinds = [
            (State::Complete, Verified),
            (State::Complete, Unverified),
            (State::Complete, Pending),
            (Failed, Unverified),
            (State::Running, Unverified),
        ];
        for a in kinds {
            for b in kinds {
                for c in kinds {
                    for d in kinds {
                        let all: Vec<Owned> = [a, b, c, d]
                            .iter()
                            .enumerate()
                            .map(|(i, (state, verification))| Owned {
                                verification: *verification,
                                ..owned(&format!("s{i}"), i as u32 + 1, *state)
                            })
                            .collect();
                        for (keep, age) in [(Some(1), None), (Some(2), Some(90)), (None, Some(60))]
                        {
                            let plain = prune(&all, keep, age, at(10, 6));
                            let strict = prune_with(&all, &requiring(keep, age), at(10, 6));
                            assert!(
                                strict.iter().all(|n| plain.contains(n)),
                                "{all:?} {keep:?} {age:?}: {strict:?} not within {plain:?}"
                            );
                            let newest_verified = all
                                .iter()
                                .filter(|s| {
                                    s.state == State::Complete && s.verification == Verified
                                })
                                .max_by_key(|s| s.created);
                            if let Some(n) = newest_verified {
                                assert!(!strict.contains(&n.name), "{all:?}: {strict:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn retention_prunes_the_oldest_finished_beyond_keep_last_and_by_age() {
        let all = [
            owned("a", 1, State::Complete),
            owned("b", 2, State::Complete),
            owned("c", 3, State::Complete),
            owned("d", 4, State::Running),
            owned("e", 5, State::Complete),
        ];
        // Newest two finished kept (e, c); the running d neither counts nor goes.
        assert_eq!(prune(&all, Some(2), None, at(10, 6)), ["a", "b"]);
        assert_eq!(prune(&all, Some(5), None, at(10, 6)), Vec::<String>::new());
        // maxAge 150s at 10:06: a (10:01), b (10:02) and c (10:03) are older; d is running.
        assert_eq!(prune(&all, None, Some(150), at(10, 6)), ["a", "b", "c"]);
        assert_eq!(prune(&all, Some(4), Some(270), at(10, 6)), ["a"]);
        assert!(prune(&all, None, None, at(10, 6)).is_empty());
    }

    #[test]
    fn failed_snapshots_never_push_complete_ones_out_of_keep_last() {
        use State::{Complete, Failed};
        // Two good runs, then a week of failures (expired credentials).
        let all = [
            owned("good-1", 1, Complete),
            owned("good-2", 2, Complete),
            owned("bad-3", 3, Failed),
            owned("bad-4", 4, Failed),
            owned("bad-5", 5, Failed),
            owned("bad-6", 6, Failed),
        ];
        // keepLast 2 keeps both Complete ones; the Failed ones are kept by their own count of 2.
        assert_eq!(prune(&all, Some(2), None, at(10, 7)), ["bad-3", "bad-4"]);
        // keepLast 1: the newest Complete and the newest Failed stay.
        assert_eq!(
            prune(&all, Some(1), None, at(10, 7)),
            ["good-1", "bad-3", "bad-4", "bad-5"]
        );
    }

    #[test]
    fn complete_snapshots_beyond_keep_last_go_whatever_failed_around_them() {
        use State::{Complete, Failed, Running};
        let all = [
            owned("good-1", 1, Complete),
            owned("bad-2", 2, Failed),
            owned("good-3", 3, Complete),
            owned("good-4", 4, Complete),
            owned("bad-5", 5, Failed),
            owned("run-6", 6, Running),
        ];
        assert_eq!(prune(&all, Some(2), None, at(10, 7)), ["good-1"]);
        assert_eq!(
            prune(&all, Some(1), None, at(10, 7)),
            ["good-1", "bad-2", "good-3"]
        );
    }

    #[test]
    fn the_newest_complete_snapshot_survives_max_age() {
        use State::{Complete, Failed};
        // A long outage: everything is older than maxAge (60s at 11:00).
        let all = [
            owned("good-1", 1, Complete),
            owned("good-2", 2, Complete),
            owned("bad-3", 3, Failed),
        ];
        let now = at(11, 0);
        assert_eq!(prune(&all, None, Some(60), now), ["good-1", "bad-3"]);
        assert_eq!(prune(&all, Some(5), Some(60), now), ["good-1", "bad-3"]);
        // Nothing but failures: they all age out; nothing else to keep.
        let failed = [owned("bad-1", 1, Failed), owned("bad-2", 2, Failed)];
        assert_eq!(prune(&failed, Some(5), Some(60), now), ["bad-1", "bad-2"]);
    }

    fn pruned(state: State, destination: Destination, artifact: bool) -> Pruned {
        Pruned {
            state,
            destination,
            artifact,
        }
    }

    #[test]
    fn a_failed_pvc_snapshot_is_pruned_through_a_prune_job_that_leaves_files_not_its_own() {
        use Claim::{Bound, Gone, Pending};
        use State::{Complete, Failed};
        let table = [
            // A Complete snapshot recorded its file: a stranger in its place fails the Job
            // and keeps the EtcdSnapshot for a human.
            (
                pruned(Complete, Destination::Pvc(Bound), true),
                Removal::PvcJob(Unowned::Fail),
            ),
            // A Failed one records nothing, yet may have written its file (killed after the
            // rename, the Job lost): the same Job at the same path removes it if its `.uid`
            // names the snapshot, and leaves any other file without holding the snapshot.
            (
                pruned(Failed, Destination::Pvc(Bound), false),
                Removal::PvcJob(Unowned::Leave),
            ),
            // A claim never bound was never written to; a missing or lost one cannot be
            // reached by any Pod: a Job would wait forever for nothing.
            (
                pruned(Failed, Destination::Pvc(Pending), false),
                Removal::Nothing("the destination claim was never bound: nothing was written"),
            ),
            (
                pruned(Failed, Destination::Pvc(Gone), false),
                Removal::Nothing("the destination claim is gone: no Pod can reach a file on it"),
            ),
            (pruned(Complete, Destination::S3, true), Removal::S3Artifact),
            (pruned(Failed, Destination::S3, false), Removal::S3IfOwned),
        ];
        for (p, want) in table {
            assert_eq!(removal(&p), want, "{p:?}");
        }
    }
}
