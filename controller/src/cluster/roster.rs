//! `status.members[]` and `status.leader`: each member as etcd itself reports it, from the
//! members' own Status answers and the cluster's alarm list. Pure; informational only (no plan
//! reads it).
//!
//! No churn: the raft index and the database sizes move with every write to etcd (and an idle
//! cluster's index creeps), and a status write wakes the cluster's reconcile again, so those
//! three counters alone make a write only once they are [`COUNTERS_REFRESH`] old and moved by
//! [`INDEX_STEP`] entries or [`SIZE_STEP`] bytes ([`publishable`]). Everything else (a role, the
//! leader, readiness, a version, an ID, the term, an alarm) is written when it changes.

use std::collections::BTreeMap;
use std::time::Duration;

use api::v1alpha2::{ClusterMemberStatus, EtcdClusterStatus, MemberRole};

use crate::etcd::{format_id, parse_id, Alarm, MemberStatus};

/// How old the raft index and database sizes in the status may grow while they are the only
/// thing that changed: the idle reconcile's period ([`super::reconcile::HEALTH_RECHECK`]).
pub const COUNTERS_REFRESH: Duration = Duration::from_secs(30);

/// What is known of one EtcdMember this reconcile.
#[derive(Clone, Debug, Default)]
pub struct MemberFacts<'a> {
    pub name: &'a str,
    /// `status.memberID` of the EtcdMember, as recorded.
    pub recorded_id: Option<&'a str>,
    pub pod_ready: bool,
    /// The member's own Status answer; `None` when it was not asked or did not answer.
    pub answer: Option<&'a MemberStatus>,
}

/// The members and the leader, as they would be written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roster {
    pub members: Vec<ClusterMemberStatus>,
    pub leader: Option<String>,
}

/// The roster from the members' answers. `alarms` is etcd's alarm list, `None` when it could
/// not be read (each member then keeps the alarms `prior` shows for it, instead of flapping).
pub fn roster(
    facts: &[MemberFacts<'_>],
    alarms: Option<&[(u64, Alarm)]>,
    prior: &[ClusterMemberStatus],
) -> Roster {
    let leader_id = leader_id(facts.iter().filter_map(|f| f.answer));
    let id_of = |f: &MemberFacts<'_>| {
        f.answer
            .map(|a| a.member_id)
            .or_else(|| f.recorded_id.and_then(parse_id))
    };
    // The followers name the leader even when it does not answer the operator itself.
    let leader = facts
        .iter()
        .find(|f| leader_id.is_some() && id_of(f) == leader_id)
        .map(|f| f.name.to_string());
    let mut members: Vec<ClusterMemberStatus> = facts
        .iter()
        .map(|f| {
            let id = id_of(f);
            let role = f.answer.map(|a| {
                if a.is_learner {
                    MemberRole::Learner
                } else if Some(a.member_id) == leader_id {
                    MemberRole::Leader
                } else {
                    MemberRole::Follower
                }
            });
            let alarms = match (alarms, id) {
                (Some(list), Some(id)) => alarm_names(list, id),
                (Some(_), None) => Vec::new(),
                (None, _) => prior
                    .iter()
                    .find(|p| p.name == f.name)
                    .map(|p| p.alarms.clone())
                    .unwrap_or_default(),
            };
            ClusterMemberStatus {
                name: f.name.to_string(),
                member_id: id.map(format_id),
                role,
                ready: f.pod_ready && f.answer.is_some(),
                version: f
                    .answer
                    .map(|a| a.version.clone())
                    .filter(|v| !v.is_empty()),
                db_size: f.answer.map(|a| a.db_size),
                db_size_in_use: f.answer.map(|a| a.db_size_in_use),
                raft_index: f.answer.map(|a| clamp(a.raft_index)),
                raft_term: f.answer.map(|a| clamp(a.raft_term)),
                alarms,
            }
        })
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    Roster { members, leader }
}

/// The leader etcd reports: the claim made at the highest raft term, a member's claim to lead
/// winning over what a follower at the same term says (a deposed leader cut off from the others
/// still believes it leads, at its older term). `None` during an election or with no answer.
fn leader_id<'a>(answers: impl Iterator<Item = &'a MemberStatus>) -> Option<u64> {
    answers
        .filter(|a| a.leader != 0)
        .max_by_key(|a| (a.raft_term, a.leader == a.member_id))
        .map(|a| a.leader)
}

/// The alarms raised for member `id`, by etcd's names, in a stable order.
fn alarm_names(alarms: &[(u64, Alarm)], id: u64) -> Vec<String> {
    let mut raised: Vec<Alarm> = alarms
        .iter()
        .filter(|(m, _)| *m == id)
        .map(|(_, a)| *a)
        .collect();
    raised.sort();
    raised.dedup();
    raised.iter().map(|a| a.name().to_string()).collect()
}

/// etcd's unsigned counters in the status' signed integers (a raft index never comes near
/// `i64::MAX`; saturating rather than wrapping all the same).
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `next` with the roster in it, as it is to be written. The raft index and sizes `prior` shows
/// are kept while they are all that differs, unless they are due (`counters_due`:
/// [`COUNTERS_REFRESH`] has passed since this process last wrote them) and moved by at least
/// [`INDEX_STEP`] entries or [`SIZE_STEP`] bytes: the status is then unchanged and not written.
/// When anything else changes, the write carries the fresh counters.
pub fn publishable(
    prior: Option<&EtcdClusterStatus>,
    mut next: EtcdClusterStatus,
    roster: Roster,
    counters_due: bool,
) -> EtcdClusterStatus {
    next.members = roster.members;
    next.leader = roster.leader;
    let Some(prior) = prior else {
        return next;
    };
    let before: BTreeMap<&str, &ClusterMemberStatus> =
        prior.members.iter().map(|m| (m.name.as_str(), m)).collect();
    let held = EtcdClusterStatus {
        members: next
            .members
            .iter()
            .map(|m| match before.get(m.name.as_str()) {
                Some(p) if !(counters_due && moved(m, p)) => with_counters_of(m, p),
                _ => m.clone(),
            })
            .collect(),
        ..next.clone()
    };
    if &held == prior {
        held
    } else {
        next
    }
}

/// How far the raft index must move before it alone is written again. An idle cluster's index
/// creeps (a few entries a minute), which must not make a write.
pub const INDEX_STEP: i64 = 1000;
/// How far either database size must move before it alone is written again.
pub const SIZE_STEP: i64 = 1024 * 1024;

/// Whether `fresh`'s counters moved far enough from `prior`'s to be written on their own.
fn moved(fresh: &ClusterMemberStatus, prior: &ClusterMemberStatus) -> bool {
    let far = |f: Option<i64>, p: Option<i64>, step: i64| match (f, p) {
        (Some(f), Some(p)) => f.abs_diff(p) >= step.unsigned_abs(),
        _ => false,
    };
    far(fresh.raft_index, prior.raft_index, INDEX_STEP)
        || far(fresh.db_size, prior.db_size, SIZE_STEP)
        || far(fresh.db_size_in_use, prior.db_size_in_use, SIZE_STEP)
}

/// `fresh` with `prior`'s raft index and sizes where both have them.
fn with_counters_of(
    fresh: &ClusterMemberStatus,
    prior: &ClusterMemberStatus,
) -> ClusterMemberStatus {
    let keep = |f: Option<i64>, p: Option<i64>| if f.is_some() && p.is_some() { p } else { f };
    ClusterMemberStatus {
        raft_index: keep(fresh.raft_index, prior.raft_index),
        db_size: keep(fresh.db_size, prior.db_size),
        db_size_in_use: keep(fresh.db_size_in_use, prior.db_size_in_use),
        ..fresh.clone()
    }
}

#[cfg(test)]
mod tests;
