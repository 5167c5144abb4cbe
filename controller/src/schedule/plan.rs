//! The schedule's decisions, without I/O: which finished snapshots retention removes, and how
//! each is removed. When a run is due is [`crate::cron`]'s, shared with defrag policies.

use chrono::{DateTime, Utc};

/// Where one of the schedule's snapshots stands, as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not finished yet (Pending, Started, or no status).
    Running,
    Complete,
    Failed,
}

/// One of the schedule's snapshots, as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub name: String,
    pub created: DateTime<Utc>,
    pub state: State,
}

/// The finished snapshots to delete, oldest first. Complete and Failed snapshots are counted
/// apart, newest first: a Complete one goes when it is beyond the newest `keep_last` Complete
/// ones or older than `max_age_seconds`, a Failed one when it is beyond the newest `keep_last`
/// Failed ones or older than `max_age_seconds`. Failed runs therefore never push a good
/// snapshot out, and the newest Complete snapshot is never pruned by any rule (a long outage or
/// a suspended schedule must not leave no backup at all). Running snapshots are never pruned
/// and count towards nothing.
pub fn prune(
    snapshots: &[Owned],
    keep_last: Option<i32>,
    max_age_seconds: Option<i64>,
    now: DateTime<Utc>,
) -> Vec<String> {
    let keep = keep_last.map(|k| usize::try_from(k.max(0)).unwrap_or(0));
    let too_old = |s: &Owned| max_age_seconds.is_some_and(|m| (now - s.created).num_seconds() > m);
    let mut gone: Vec<&Owned> = Vec::new();
    for state in [State::Complete, State::Failed] {
        let mut these: Vec<&Owned> = snapshots.iter().filter(|s| s.state == state).collect();
        // Newest first; the name breaks ties (it carries the run's minute).
        these.sort_by(|a, b| b.created.cmp(&a.created).then(b.name.cmp(&a.name)));
        for (i, s) in these.into_iter().enumerate() {
            let newest_complete = state == State::Complete && i == 0;
            if !newest_complete && (keep.is_some_and(|k| i >= k) || too_old(s)) {
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
