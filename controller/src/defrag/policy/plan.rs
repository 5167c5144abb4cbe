//! The pure decisions of an EtcdDefragPolicy: what the schedule asks of a reconcile ([`tick`]:
//! stamp, skip as forbidden or late, consume the ticks missed while suspended), the run it
//! stamps (named for the tick's second, owned by the policy, labelled with the policy and the
//! cluster, carrying its rule and TTL), the `Active` condition, whether a check is due, which
//! member a check selects (as the run would judge it), and which finished runs the history
//! deletes.
//!
//! Pure: values in, values out; the policy's I/O is in `mod.rs`.

use api::conditions::reason;
use api::labels;
use api::v1alpha2::{
    DefragConcurrencyPolicy, DefragPhase, EtcdDefrag, EtcdDefragPolicy, EtcdDefragSpec,
    HistoryLimits, MAX_MISSED_TICKS,
};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::cron::Schedule;
use crate::defrag::run::plan::{self, Gate};
use crate::Error;

/// On the EtcdDefrags a policy creates: the policy's name.
pub const POLICY_LABEL: &str = labels::DEFRAG_POLICY;

/// The ticks of a schedule in `(since, now]`, walked at most [`MAX_MISSED_TICKS`] deep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// The newest tick, if any.
    pub latest: Option<DateTime<Utc>>,
    /// How many older ticks in the window were passed over (at most `MAX_MISSED_TICKS`).
    pub passed_over: usize,
    /// More than `MAX_MISSED_TICKS` ticks were missed: the backlog collapses into the newest.
    pub collapsed: bool,
}

/// Walk the ticks in `(since, now]`: after downtime only the newest is acted on; a backlog of
/// more than [`MAX_MISSED_TICKS`] is not walked to its end but collapses into the newest tick.
pub fn walk(schedule: &Schedule, since: DateTime<Utc>, now: DateTime<Utc>) -> Walk {
    let mut seen = 0;
    let mut at = since;
    while let Some(next) = schedule.next_after(at).filter(|t| *t <= now) {
        seen += 1;
        at = next;
        if seen > MAX_MISSED_TICKS {
            return Walk {
                latest: schedule.latest_in(at, now).or(Some(at)),
                passed_over: MAX_MISSED_TICKS,
                collapsed: true,
            };
        }
    }
    Walk {
        latest: (seen > 0).then_some(at),
        passed_over: seen.saturating_sub(1),
        collapsed: false,
    }
}

/// What the schedule knows at a reconcile.
#[derive(Clone, Debug)]
pub struct TickFacts<'a> {
    /// `status.lastScheduleTime`, or the policy's creation when it has none.
    pub since: DateTime<Utc>,
    pub now: DateTime<Utc>,
    pub suspended: bool,
    /// The last reconcile saw the policy suspended (its `Active` condition says `Suspended`)
    /// and now it is not: the ticks missed meanwhile are consumed, not backfilled.
    pub resuming: bool,
    pub concurrency: DefragConcurrencyPolicy,
    pub starting_deadline_seconds: Option<i64>,
    /// The policy's unfinished runs.
    pub active: &'a [String],
}

/// What to do about the schedule now. Every variant but `Nothing` consumes its tick: it
/// becomes `status.lastScheduleTime`, so it is never acted on again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tick {
    /// No tick is due (or the policy is suspended: nothing is consumed while it is).
    Nothing,
    /// Stamp the run of this tick.
    Stamp { at: DateTime<Utc>, walk: Walk },
    /// `Forbid`: a run of the policy is unfinished; the tick is skipped.
    Forbidden { at: DateTime<Utc>, walk: Walk },
    /// The tick is more than `startingDeadlineSeconds` late: skipped, not started late.
    Late {
        at: DateTime<Utc>,
        late_by: i64,
        walk: Walk,
    },
    /// The policy was just resumed: the ticks missed while it was suspended are consumed.
    Resumed { at: DateTime<Utc>, walk: Walk },
}

impl Tick {
    /// The tick consumed, if any (the new `lastScheduleTime`).
    pub fn consumed(&self) -> Option<DateTime<Utc>> {
        match self {
            Tick::Nothing => None,
            Tick::Stamp { at, .. }
            | Tick::Forbidden { at, .. }
            | Tick::Late { at, .. }
            | Tick::Resumed { at, .. } => Some(*at),
        }
    }
}

/// The schedule's decision. Precedence: suspended (nothing consumed, so nothing is lost if the
/// suspension is undone before a reconcile sees it), no tick, just resumed (no backfill), past
/// the deadline (a late run is never started), forbidden by an unfinished run, stamp.
pub fn tick(schedule: &Schedule, f: &TickFacts<'_>) -> Tick {
    if f.suspended {
        return Tick::Nothing;
    }
    let w = walk(schedule, f.since, f.now);
    let Some(at) = w.latest else {
        return Tick::Nothing;
    };
    if f.resuming {
        return Tick::Resumed { at, walk: w };
    }
    let late_by = (f.now - at).num_seconds();
    if f.starting_deadline_seconds.is_some_and(|d| late_by > d) {
        return Tick::Late {
            at,
            late_by,
            walk: w,
        };
    }
    if !f.active.is_empty() && f.concurrency == DefragConcurrencyPolicy::Forbid {
        return Tick::Forbidden { at, walk: w };
    }
    Tick::Stamp { at, walk: w }
}

/// What a walk passed over, for an Event's message ("" when nothing was).
pub fn passed_over(w: &Walk) -> String {
    match (w.collapsed, w.passed_over) {
        (true, n) => format!(
            "; more than {n} earlier ticks were missed while the operator was not acting on this \
             policy, collapsed into this one"
        ),
        (false, 0) => String::new(),
        (false, 1) => "; 1 earlier tick was missed and is not run late".to_string(),
        (false, n) => format!("; {n} earlier ticks were missed and are not run late"),
    }
}

/// The `Active` condition (the reference's): status, reason and message.
pub fn active_condition(
    suspended: bool,
    invalid_schedule: Option<&str>,
    scheduled_message: String,
) -> (bool, &'static str, String) {
    if let Some(why) = invalid_schedule {
        return (false, reason::INVALID_SCHEDULE, why.to_string());
    }
    if suspended {
        return (
            false,
            reason::SUSPENDED,
            "spec.suspend is true: no runs are stamped; ticks missed meanwhile are not \
             backfilled when it is cleared"
                .to_string(),
        );
    }
    (true, reason::SCHEDULED, scheduled_message)
}

/// A run of the policy as the history sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub name: String,
    pub created: DateTime<Utc>,
    pub phase: Option<DefragPhase>,
}

/// The finished runs the history deletes, oldest first: per phase beyond the newest
/// `limits.complete` Complete and `limits.failed` Failed runs, then beyond the newest
/// `limits.total` of the finished runs left. Unfinished runs are never deleted.
pub fn history_to_delete(runs: &[Run], limits: HistoryLimits) -> Vec<String> {
    // Newest first; the name (it carries the tick) breaks ties.
    let newest_first = |a: &&Run, b: &&Run| b.created.cmp(&a.created).then(b.name.cmp(&a.name));
    let mut gone: Vec<&Run> = Vec::new();
    for (phase, keep) in [
        (DefragPhase::Complete, limits.complete),
        (DefragPhase::Failed, limits.failed),
    ] {
        let Some(keep) = keep else { continue };
        let mut of: Vec<&Run> = runs.iter().filter(|r| r.phase == Some(phase)).collect();
        of.sort_by(newest_first);
        gone.extend(of.into_iter().skip(keep));
    }
    if let Some(keep) = limits.total {
        let mut left: Vec<&Run> = runs
            .iter()
            .filter(|r| r.phase.is_some_and(DefragPhase::is_terminal))
            .filter(|r| !gone.iter().any(|g| g.name == r.name))
            .collect();
        left.sort_by(newest_first);
        gone.extend(left.into_iter().skip(keep));
    }
    gone.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    gone.into_iter().map(|r| r.name.clone()).collect()
}

/// Whether a check is due: never made, or the last one `interval` seconds ago or more.
pub fn check_due(last: Option<DateTime<Utc>>, interval: i64, now: DateTime<Utc>) -> bool {
    last.is_none_or(|l| (now - l).num_seconds() >= interval)
}

/// The first member the rule selects and why, among `(member, dbSize, dbSizeInUse, quota)`: each
/// member's usage is measured against the quota it runs with (its Pod's
/// `--quota-backend-bytes`), which during a rollout of a new quota is not yet the spec's.
pub fn first_selected(
    rule: &api::v1alpha2::DefragRule,
    members: &[(String, i64, i64, i64)],
) -> Option<(String, String)> {
    members.iter().find_map(|(name, size, in_use, quota)| {
        match plan::gate(rule, *size, *in_use, *quota) {
            Gate::Defragment(why) => Some((name.clone(), why)),
            Gate::Skip(_) => None,
        }
    })
}

pub fn finished(d: &EtcdDefrag) -> bool {
    d.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(DefragPhase::is_terminal)
}

/// The name of the run a policy stamps at `at`: `<policy>-<unix seconds>`, the reference's.
pub fn run_name(policy: &str, at: DateTime<Utc>) -> String {
    format!("{policy}-{}", at.timestamp())
}

/// The EtcdDefrag the policy creates at `at`: owned by the policy (deleted with it), labelled
/// with the policy and the cluster, carrying the policy's rule and TTL verbatim.
pub fn new_run(policy: &EtcdDefragPolicy, at: DateTime<Utc>) -> Result<EtcdDefrag, Error> {
    let name = policy.name_any();
    let mut run_labels = labels::cluster_labels(&policy.spec.cluster_ref.name);
    run_labels.insert(POLICY_LABEL.to_string(), name.clone());
    let owner = OwnerReference {
        api_version: EtcdDefragPolicy::api_version(&()).to_string(),
        kind: EtcdDefragPolicy::kind(&()).to_string(),
        name: name.clone(),
        uid: policy.uid().ok_or(Error::NoUid)?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    Ok(EtcdDefrag {
        metadata: ObjectMeta {
            name: Some(run_name(&name, at)),
            namespace: policy.namespace(),
            labels: Some(run_labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: EtcdDefragSpec {
            cluster_ref: policy.spec.cluster_ref.clone(),
            rule: policy.spec.rule.clone(),
            ttl_seconds_after_finished: policy.spec.ttl_seconds_after_finished,
        },
        status: None,
    })
}

#[cfg(test)]
mod tests;
