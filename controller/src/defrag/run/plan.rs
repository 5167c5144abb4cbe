//! The pure decisions of an EtcdDefrag run: whether the cluster is healthy enough to touch, which
//! run of a cluster goes first, which member is next (followers first; leadership is moved off
//! the leader before its turn), whether a member passes the rule's gate, how long its
//! `Defragment` call may take, how a call that did not answer in time is judged, and whether the
//! NOSPACE alarm may be disarmed.

use std::collections::BTreeSet;

use api::v1alpha2::DefragMemberStatus;
use k8s_openapi::api::core::v1::Pod;

use api::conditions::defrag::{DEFRAG_CHECKED, READY};
use api::conditions::reason;
use api::quantity::{format_bytes, to_bytes};
use api::v1alpha2::{DefragOutcome, DefragPhase, DefragRule, EtcdDefrag, EtcdDefragStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::conditions::set_condition;
use crate::etcd::{format_id, Alarm, MemberStatus};

/// etcd's backend quota when `--quota-backend-bytes` is unset or 0.
pub const DEFAULT_QUOTA_BYTES: i64 = 2 * 1024 * 1024 * 1024;
/// How far a member's applied raft index may trail the highest raft index among the members
/// before it counts as lagging.
pub const MAX_RAFT_LAG: u64 = 1000;

pub const LEADER: &str = "leader";
pub const FOLLOWER: &str = "follower";

/// One member as observed before a step: its Pod's readiness, the backend quota its Pod runs
/// with and its own `Status` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberObservation {
    /// The EtcdMember's name.
    pub name: String,
    pub ready: bool,
    /// The backend quota the member's running Pod was started with ([`running_quota`]), which
    /// lags `spec.options.quotaBackendBytes` until the member is rolled.
    pub quota: i64,
    /// The member's `Status`, or why it did not answer.
    pub status: Result<MemberStatus, String>,
}

/// The backend quota a member's Pod runs etcd with: its etcd container's last
/// `--quota-backend-bytes` flag (etcd takes the last), or etcd's default without one.
pub fn running_quota(pod: &Pod) -> i64 {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice());
    let etcd =
        containers.and_then(|cs| cs.iter().find(|c| c.name == "etcd").or_else(|| cs.first()));
    let configured = etcd.and_then(|c| {
        c.command
            .iter()
            .chain(c.args.iter())
            .flatten()
            .filter_map(|a| a.strip_prefix("--quota-backend-bytes="))
            .filter_map(|v| v.trim().parse::<i64>().ok())
            .next_back()
    });
    quota(configured)
}

/// Why the NOSPACE alarm must stay raised after a run, or `None` when every member's dbSize is
/// below the quota that member runs with (not the spec's: a raised quota counts only once the
/// member was restarted with it).
pub fn nospace_stays(members: &[MemberObservation]) -> Option<String> {
    for m in members {
        match &m.status {
            Err(e) => return Some(format!("member {} does not answer status: {e}", m.name)),
            Ok(s) if s.db_size >= m.quota => {
                return Some(format!(
                    "member {}'s dbSize {} is at or above the {} quota it runs with",
                    m.name,
                    format_bytes(s.db_size),
                    format_bytes(m.quota)
                ))
            }
            Ok(_) => {}
        }
    }
    None
}

/// A `Defragment` call for this member was (maybe) sent and its outcome is not known yet: the
/// entry is written before the call, so a restarted operator never sends a second one.
pub fn in_flight(entry: &DefragMemberStatus) -> bool {
    entry.outcome.is_none() && entry.db_size_before.is_some()
}

/// The outcome of a `Defragment` call that ended without an answer (a timeout, a dropped
/// connection), judged once the member answers `Status` again, from its dbSize: `Ok` when the
/// file shrank or holds (almost) no free pages any more, which only a defragmentation does;
/// `Err` with why otherwise.
pub fn judge_unanswered(db_size_before: i64, after: &MemberStatus) -> Result<String, String> {
    let free = (after.db_size - after.db_size_in_use).max(0);
    let slack = (1024 * 1024).max(after.db_size / 50);
    let sizes = format!(
        "dbSize {} -> {} ({} free)",
        format_bytes(db_size_before),
        format_bytes(after.db_size),
        format_bytes(free)
    );
    if after.db_size < db_size_before || free <= slack {
        Ok(format!("etcd finished it: {sizes}"))
    } else {
        Err(format!("{sizes}: the file was not compacted"))
    }
}

/// Why the cluster cannot be defragmented now, or `None` when it can: every member is Ready,
/// answers `Status`, follows the same live leader, is a voter, does not lag, and no alarm
/// other than NOSPACE is raised (a defragmentation is how NOSPACE is cleared; with NOSPACE
/// raised, Pods are not Ready, as etcd fails /health, and readiness is not required).
pub fn unhealthy(
    replicas: i32,
    members: &[MemberObservation],
    alarms: &[(u64, Alarm)],
) -> Option<String> {
    if replicas == 0 {
        return Some("the cluster is paused (spec.replicas=0)".into());
    }
    if (members.len() as i64) < i64::from(replicas) {
        return Some(format!(
            "the cluster has {} of its {replicas} members",
            members.len()
        ));
    }
    // etcd fails /health (the readiness probe) while an alarm is raised: with NOSPACE, a member
    // that answers Status below counts as healthy.
    let nospace = alarms.iter().any(|(_, a)| *a == Alarm::NoSpace);
    if let Some(m) = members.iter().find(|m| !m.ready && !nospace) {
        return Some(format!("member {} is not Ready", m.name));
    }
    let mut statuses = Vec::with_capacity(members.len());
    for m in members {
        match &m.status {
            Err(e) => return Some(format!("member {} does not answer status: {e}", m.name)),
            Ok(s) if s.is_learner => {
                return Some(format!(
                    "member {} is a learner (the membership is changing)",
                    m.name
                ))
            }
            Ok(s) => statuses.push((m.name.as_str(), s)),
        }
    }
    let leaders: BTreeSet<u64> = statuses.iter().map(|(_, s)| s.leader).collect();
    if leaders.contains(&0) || leaders.len() != 1 {
        return Some(format!(
            "the members do not agree on a leader ({})",
            statuses
                .iter()
                .map(|(n, s)| format!("{n} follows {}", format_id(s.leader)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(&leader) = leaders.iter().next() {
        if !statuses.iter().any(|(_, s)| s.member_id == leader) {
            return Some(format!(
                "the leader {} is not one of the cluster's members",
                format_id(leader)
            ));
        }
    }
    let top = statuses
        .iter()
        .map(|(_, s)| s.raft_index)
        .max()
        .unwrap_or(0);
    if let Some((n, s)) = statuses
        .iter()
        .find(|(_, s)| top.saturating_sub(s.raft_applied_index) > MAX_RAFT_LAG)
    {
        return Some(format!(
            "member {n} lags: applied raft index {} against {top} (more than {MAX_RAFT_LAG} behind)",
            s.raft_applied_index
        ));
    }
    if let Some((id, _)) = alarms.iter().find(|(_, a)| *a == Alarm::Corrupt) {
        return Some(format!(
            "etcd raised a CORRUPT alarm for member {}: its data diverged; replace that member \
             instead of defragmenting",
            format_id(*id)
        ));
    }
    None
}

/// The member to process next: a follower not yet processed (by name), and the leader only
/// when every follower is done. `None` when all are done.
pub fn next_member<'a>(
    members: &'a [MemberObservation],
    done: &BTreeSet<String>,
) -> Option<(&'a MemberObservation, &'static str)> {
    let leader = members
        .iter()
        .filter_map(|m| m.status.as_ref().ok())
        .map(|s| s.leader)
        .next()
        .unwrap_or(0);
    let is_leader = |m: &MemberObservation| m.status.as_ref().is_ok_and(|s| s.member_id == leader);
    let mut left: Vec<&MemberObservation> =
        members.iter().filter(|m| !done.contains(&m.name)).collect();
    left.sort_by(|a, b| is_leader(a).cmp(&is_leader(b)).then(a.name.cmp(&b.name)));
    left.first()
        .map(|m| (*m, if is_leader(m) { LEADER } else { FOLLOWER }))
}

/// The next step of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next<'a> {
    /// Process this member, in this role.
    Member(&'a MemberObservation, &'static str),
    /// The leader's turn has come: hand leadership to `to` (etcd member ID `to_id`), a member
    /// already processed, so the leader is defragmented as a follower. A defragmenting leader
    /// stalls the cluster's heartbeats and can cost an election.
    MoveLeader {
        from: &'a MemberObservation,
        to: &'a MemberObservation,
        to_id: u64,
    },
}

/// The next step: [`next_member`], except that the leader of a cluster of more than one member
/// first hands its leadership to a processed member (by name).
pub fn next_step<'a>(
    members: &'a [MemberObservation],
    done: &BTreeSet<String>,
) -> Option<Next<'a>> {
    let (m, role) = next_member(members, done)?;
    if role != LEADER || members.len() < 2 {
        return Some(Next::Member(m, role));
    }
    let successor = members
        .iter()
        .filter(|o| o.name != m.name)
        .filter_map(|o| o.status.as_ref().ok().map(|s| (o, s.member_id)))
        .min_by_key(|(o, _)| (!done.contains(&o.name), o.name.clone()));
    Some(match successor {
        Some((to, to_id)) => Next::MoveLeader { from: m, to, to_id },
        None => Next::Member(m, role),
    })
}

/// Whether a member passes the gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Defragment it; the text says why.
    Defragment(String),
    /// Skip it; the text says why.
    Skip(String),
}

/// The rule's gate for a member of `db_size` bytes, `in_use` of them live, under a backend
/// quota of `quota` bytes.
pub fn gate(rule: &DefragRule, db_size: i64, in_use: i64, quota: i64) -> Gate {
    if rule.is_all() {
        return Gate::Defragment("spec.rule.all is true".into());
    }
    let reclaimable = (db_size - in_use).max(0);
    // The CRD and the webhook validate both quantities; an unparsable one falls back to its
    // default rather than defragmenting unconditionally.
    let free = to_bytes(&rule.free_space_above())
        .or_else(|| to_bytes(&DefragRule::default().free_space_above()))
        .unwrap_or(i64::MAX);
    let min = to_bytes(&rule.min_reclaim())
        .or_else(|| to_bytes(&DefragRule::default().min_reclaim()))
        .unwrap_or(i64::MAX);
    let r = format_bytes(reclaimable);
    if reclaimable > free {
        return Gate::Defragment(format!(
            "{r} reclaimable exceeds freeSpaceAbove {}",
            format_bytes(free)
        ));
    }
    if let Some(percent) = rule.quota_usage_above.as_deref().and_then(parse_percent) {
        let over = i128::from(db_size) * 100 > i128::from(quota) * i128::from(percent);
        if over && reclaimable > min {
            return Gate::Defragment(format!(
                "dbSize {} is above {percent}% of the {} quota and {r} reclaimable exceeds \
                 minReclaim {}",
                format_bytes(db_size),
                format_bytes(quota),
                format_bytes(min)
            ));
        }
        if over {
            return Gate::Skip(format!(
                "{r} reclaimable is not above minReclaim {}",
                format_bytes(min)
            ));
        }
    }
    Gate::Skip(format!(
        "{r} reclaimable is not above freeSpaceAbove {}",
        format_bytes(free)
    ))
}

/// `80%` → 80.
fn parse_percent(p: &str) -> Option<u32> {
    p.strip_suffix('%')?
        .parse::<u32>()
        .ok()
        .filter(|p| (1..=100).contains(p))
}

/// The backend quota of a cluster with `--quota-backend-bytes` set to `configured`.
pub fn quota(configured: Option<i64>) -> i64 {
    configured.filter(|q| *q > 0).unwrap_or(DEFAULT_QUOTA_BYTES)
}

/// The backend quota of `cluster` (`spec.options.quotaBackendBytes`, or etcd's default).
pub fn cluster_quota(cluster: &api::v1alpha2::EtcdCluster) -> i64 {
    quota(
        cluster
            .spec
            .options
            .as_ref()
            .and_then(|o| o.quota_backend_bytes),
    )
}

/// The run of the same cluster that goes before `this`, if any: unfinished runs take turns, a
/// Running one first, then by creation time and name.
pub fn blocking_run(this: &EtcdDefrag, runs: &[EtcdDefrag]) -> Option<String> {
    let key = |d: &EtcdDefrag| {
        let phase = d.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
        (
            phase != DefragPhase::Running,
            d.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .unwrap_or(Timestamp::MAX),
            d.name_any(),
        )
    };
    runs.iter()
        .filter(|d| d.spec.cluster_ref.name == this.spec.cluster_ref.name)
        .filter(|d| d.metadata.deletion_timestamp.is_none())
        .filter(|d| {
            !d.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(DefragPhase::is_terminal)
        })
        .min_by_key(|d| key(d))
        .map(|d| d.name_any())
        .filter(|first| *first != this.name_any())
}

/// The run's phase (Pending before its first status).
pub fn phase(d: &EtcdDefrag) -> DefragPhase {
    d.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
}

/// What a step changes: the new phase and the `Ready` condition.
pub struct Outcome {
    pub phase: DefragPhase,
    pub reason: &'static str,
    pub message: String,
}

/// The reference's `DefragChecked` condition for a step whose `Ready` reason is `ready_reason`:
/// `False`/`Queued` while another run of the cluster goes first, `False`/`ClusterNotHealthy`
/// while the cluster cannot be defragmented (not found, credentials not usable, unhealthy), and
/// `True`/`Running` once the run was admitted and works on the members. `None` leaves the
/// condition as it was (a finished run keeps what it last saw).
pub fn checked(ready_reason: &str) -> Option<(bool, &'static str)> {
    match ready_reason {
        reason::WAITING_FOR_RUN => Some((false, reason::QUEUED)),
        reason::CLUSTER_UNHEALTHY | reason::CLUSTER_NOT_FOUND | reason::CREDENTIALS_NOT_READY => {
            Some((false, reason::CLUSTER_NOT_HEALTHY))
        }
        reason::RUNNING => Some((true, reason::RUNNING)),
        _ => None,
    }
}

/// Whether a step that waits (`DefragChecked` False) starts a new wait, i.e. is worth a
/// `DefragDeferred` Event: the condition was not already False with the same reason.
pub fn newly_deferred(status: &EtcdDefragStatus, ready_reason: &str) -> bool {
    let Some((false, why)) = checked(ready_reason) else {
        return false;
    };
    !status
        .conditions
        .iter()
        .any(|c| c.type_ == DEFRAG_CHECKED && c.status == "False" && c.reason == why)
}

/// A member's reason when its `Defragment` call answered but its size could not be read
/// afterwards: it was defragmented; `dbSizeAfter` and `reclaimedBytes` stay unknown.
pub fn after_size_unavailable(why: &str, error: &str) -> String {
    format!(
        "{}: {why}; the Defragment call answered, but the member's Status failed afterwards          ({error}), so its size after the defrag is unknown",
        reason::AFTER_SIZE_UNAVAILABLE
    )
}

/// The run's status after a step: its phase, the `Ready` and `DefragChecked` conditions, when
/// it started and ended, and how many members it defragmented.
pub fn render(defrag: &EtcdDefrag, status: &mut EtcdDefragStatus, o: &Outcome, now: Timestamp) {
    let generation = defrag.metadata.generation;
    status.observed_generation = generation;
    if let Some((ok, why)) = checked(o.reason) {
        set_condition(
            &mut status.conditions,
            DEFRAG_CHECKED,
            ok,
            why,
            o.message.clone(),
            generation,
            now,
        );
    }
    set_condition(
        &mut status.conditions,
        READY,
        o.phase == DefragPhase::Complete,
        o.reason,
        o.message.clone(),
        generation,
        now,
    );
    if o.phase != DefragPhase::Pending && status.started_at.is_none() {
        status.started_at = Some(Time(now));
    }
    if o.phase.is_terminal() {
        status.completed_at = Some(Time(now));
    }
    status.defragmented = Some(
        status
            .members
            .iter()
            .filter(|m| m.outcome == Some(DefragOutcome::Defragmented))
            .count() as i32,
    );
    status.phase = Some(o.phase);
}

#[cfg(test)]
mod tests;
