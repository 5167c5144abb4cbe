//! The point-in-time branch of the recovery planner (`spec.source.pointInTime`): before anything
//! is planned, the cluster's state at the chosen revision is built off to the side — the build
//! Job restores a verified snapshot of the schedule into scratch space, replays the archive to
//! the revision, proves the result against the hashes the cluster recorded and stores it — and
//! recorded in `status.pointInTime`; from then on the recovery is the in-place restore of that
//! stored snapshot ([`super::snapshot::plan_stored`]). Nothing of the cluster changes while it
//! builds, and a build that cannot be done fails the recovery before anything is changed. Pure.

use api::conditions::reason;
use api::v1alpha2::PointInTimeStatus;

use super::{fail, refuse_healthy, wait, Facts, Next, Work};

/// Where the build of a point-in-time source stands (until its result is recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Build {
    /// It cannot be built (no such schedule, nothing archived, no verified base inside the
    /// archive's run, a revision past the archive, no operator image): why.
    Unusable(String),
    /// There is no build Job yet: start it.
    Start,
    /// The build Job (its name) runs.
    Building(String),
    /// The build Job stored the state: what to record.
    Built(Box<PointInTimeStatus>),
    /// The build Job failed: why.
    Failed(String),
}

/// Before the plan: build the point in time, and record what was built.
pub(super) fn plan_build(f: &Facts, build: &Build) -> Next {
    // Safety rule: never roll back a healthy cluster unasked, even off to the side (the build
    // takes minutes; the refusal is worth more before them).
    if let Some(refused) = refuse_healthy(f, |m, leader| {
        format!(
            "the cluster has a working quorum (member {} follows leader {leader}): going back to \
             an earlier point would discard every write made after it. Nothing was changed. If \
             that is what you want, create a new EtcdRecovery with \
             spec.confirmHealthyClusterRollback: true",
            m.name
        )
    }) {
        return refused;
    }
    match build {
        Build::Unusable(why) => fail(
            reason::POINT_IN_TIME_NOT_USABLE,
            format!("{why}; nothing was changed"),
        ),
        Build::Start => Next::Act(Work::BuildPointInTime),
        Build::Building(job) => wait(
            reason::BUILDING_POINT_IN_TIME,
            format!(
                "Job {job} builds the cluster's state off to the side (the base snapshot restored \
                 into scratch space, the archive replayed and proven, the result stored); nothing \
                 of the cluster is changed before it is done"
            ),
        ),
        Build::Built(built) => Next::Act(Work::RecordPointInTime(built.clone())),
        Build::Failed(why) => fail(
            reason::POINT_IN_TIME_NOT_USABLE,
            format!("the build of the point in time failed: {why}; nothing was changed"),
        ),
    }
}

#[cfg(test)]
mod tests;
