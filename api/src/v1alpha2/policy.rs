//! `EtcdDefragPolicy`: EtcdDefrag runs of one cluster created on a cron schedule, when a check
//! finds a member worth defragmenting, or both, with history limits on the runs it created. The
//! controller lives in `controller::defrag::policy`; the cron expression and time zone are parsed
//! there and in the webhook (CEL checks only their shape).
//!
//! A superset of the reference operator's released (v0.5.5) kind: every released field
//! (`schedule`, `suspend`, `concurrencyPolicy`, `startingDeadlineSeconds`, `historyLimit`, `rule`,
//! `ttlSecondsAfterFinished`; status `lastScheduleTime`, `lastSuccessfulTime`, `active`,
//! `conditions`) with its type, bounds and meaning, plus ours (`timeZone`, `checkInterval`,
//! `successfulRunsHistoryLimit`, `failedRunsHistoryLimit`; status `lastRunTime`, `lastCheckTime`,
//! `observedGeneration`). No schema default is injected: an object applied server-side reads
//! back as written.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::LocalReference;
use super::defrag::DefragRule;

/// The longest policy name: its runs carry it as the value of the
/// `etcd-operator.cozystack.io/defrag-policy` label (at most 63 characters); the runs' own names,
/// `<policy>-<unix seconds of the tick>`, stay far below the 253 an object name may have.
pub const MAX_POLICY_NAME: usize = 63;
/// The most missed ticks walked after downtime; a longer backlog collapses into one run (of the
/// newest tick).
pub const MAX_MISSED_TICKS: usize = 100;
/// The largest history limit.
pub const MAX_HISTORY_LIMIT: i32 = 100;
/// `successfulRunsHistoryLimit` when unset.
pub const DEFAULT_SUCCESSFUL_HISTORY: i32 = 3;
/// `failedRunsHistoryLimit` when unset.
pub const DEFAULT_FAILED_HISTORY: i32 = 1;
/// `checkInterval`: a whole number of minutes or hours (`10m`, `1h`).
pub const CHECK_INTERVAL_PATTERN: &str = r"^[1-9][0-9]{0,4}(m|h)$";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "etcd-operator.cozystack.io",
    version = "v1alpha2",
    kind = "EtcdDefragPolicy",
    plural = "etcddefragpolicies",
    namespaced,
    status = "EtcdDefragPolicyStatus",
    derive = "PartialEq",
    doc = "EtcdDefrag runs of an EtcdCluster created on a cron schedule and/or when a periodic check finds a member worth defragmenting.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(
        name = "Last Schedule",
        type_ = "date",
        json_path = ".status.lastScheduleTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    shortname = "edpol",
    category = "etcd",
    validation = Rule::new("!has(self.metadata.name) || self.metadata.name.size() <= 63")
        .message("metadata.name must be at most 63 characters: the policy's runs carry it as the value of the etcd-operator.cozystack.io/defrag-policy label; choose a shorter name such as my-etcd-defrag")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.schedule) || has(self.checkInterval)")
        .message("spec needs schedule (runs on a cron schedule), checkInterval (a run when a check finds a member worth defragmenting) or both"),
    validation = Rule::new("!has(self.checkInterval) || !has(self.rule) || !has(self.rule.all) || !self.rule.all")
        .message("spec.rule.all=true with spec.checkInterval would defragment every member at every check; remove checkInterval and use schedule for unconditional runs, or set a rule such as freeSpaceAbove")
        .field_path(".checkInterval"),
)]
pub struct EtcdDefragPolicySpec {
    /// The EtcdCluster (same namespace) whose members are defragmented.
    pub cluster_ref: LocalReference,
    /// A 5-field cron expression (`minute hour day-of-month month day-of-week`, e.g.
    /// `0 3 * * *`), read in UTC unless `timeZone` says otherwise, or a macro (`@hourly`,
    /// `@daily`, `@weekly`, `@monthly`, `@yearly`): a run `<policy>-<unix seconds of the tick>`
    /// is stamped at each tick, and defragments the members `rule` selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(r"self.matches('^\\s*(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^\\s]+(\\s+[^\\s]+){4})\\s*$')")
        .message("spec.schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, e.g. '0 3 * * *') or one of @hourly, @daily, @weekly, @monthly, @yearly"))]
    #[schemars(length(min = 1, max = 256))]
    pub schedule: Option<String>,
    /// The IANA time zone the schedule is read in (e.g. `Europe/Berlin`); default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(r"self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$')")
        .message("spec.timeZone must be an IANA time zone name such as UTC or Europe/Berlin"))]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// How often the members are checked against `rule` (`10m`, `1h`); a run is created as soon
    /// as one qualifies. The first check is made when the policy is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(r"self.matches('^[1-9][0-9]{0,4}(m|h)$')")
        .message("spec.checkInterval must be a whole number of minutes or hours such as 10m or 1h"))]
    #[schemars(length(max = 6))]
    pub check_interval: Option<String>,
    /// Which members the runs defragment, copied verbatim into each run's `spec.rule`. Absent
    /// means the default gate (`freeSpaceAbove: 200Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<DefragRule>,
    /// Stop stamping runs; runs in flight are left alone and history limits still apply.
    /// Clearing it resumes at the next tick: ticks missed while suspended are not backfilled.
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// What a due tick does while a run of this policy has not finished: `Forbid` (the default)
    /// skips the tick (Event `ConcurrencyForbidden`); `Allow` stamps the run anyway, and it
    /// queues behind the unfinished one (runs of one cluster never overlap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_policy: Option<DefragConcurrencyPolicy>,
    /// A tick acted on more than this many seconds after its time (the operator was down) is
    /// skipped rather than started late: consumed, and reported (Event `MissedSchedule`).
    /// Absent means no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,
    /// How many finished (Complete or Failed) runs of the policy are kept, the oldest deleted
    /// first. `successfulRunsHistoryLimit` and `failedRunsHistoryLimit`, when set, refine it per
    /// phase. Absent: with `ttlSecondsAfterFinished`, cleanup is left to the runs' TTL (and the
    /// per-phase limits that are set); without, the per-phase limits apply (default 3 Complete,
    /// 1 Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub history_limit: Option<i32>,
    /// Copied into each run: the run deletes itself this many seconds after it finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Keep at most the newest this many Complete runs of the policy (default 3 when neither
    /// `historyLimit` nor `ttlSecondsAfterFinished` is set, else no per-phase limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_HISTORY_LIMIT))]
    pub successful_runs_history_limit: Option<i32>,
    /// Keep at most the newest this many Failed runs of the policy (default 1 when neither
    /// `historyLimit` nor `ttlSecondsAfterFinished` is set, else no per-phase limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_HISTORY_LIMIT))]
    pub failed_runs_history_limit: Option<i32>,
}

impl EtcdDefragPolicySpec {
    pub fn suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }

    /// The time zone name, `UTC` when unset.
    pub fn time_zone_name(&self) -> &str {
        self.time_zone.as_deref().unwrap_or("UTC")
    }

    /// `checkInterval` in seconds, if set and well formed.
    pub fn check_interval_seconds(&self) -> Option<i64> {
        let s = self.check_interval.as_deref()?;
        let (n, unit) = s.split_at(s.len().checked_sub(1)?);
        let n: i64 = n.parse().ok()?;
        let unit = match unit {
            "m" => 60,
            "h" => 3600,
            _ => return None,
        };
        (n > 0).then_some(n * unit)
    }

    pub fn concurrency(&self) -> DefragConcurrencyPolicy {
        self.concurrency_policy.unwrap_or_default()
    }

    /// How many finished runs are kept, in total and per phase. `historyLimit` (the reference's)
    /// caps the total; ours refine it per phase when set. Our per-phase defaults (3 Complete, 1
    /// Failed) fill an unset per-phase limit only when neither `historyLimit` nor
    /// `ttlSecondsAfterFinished` is set: a reference policy that leaves cleanup to one of them
    /// keeps that meaning, and a policy of ours keeps its limits as before.
    pub fn history(&self) -> HistoryLimits {
        let count = |v: Option<i32>| v.map(|n| n.max(0) as usize);
        let total = count(self.history_limit);
        let ours_default = total.is_none() && self.ttl_seconds_after_finished.is_none();
        let or_default = |v: Option<i32>, default: i32| {
            count(v).or(ours_default.then_some(default.max(0) as usize))
        };
        HistoryLimits {
            total,
            complete: or_default(
                self.successful_runs_history_limit,
                DEFAULT_SUCCESSFUL_HISTORY,
            ),
            failed: or_default(self.failed_runs_history_limit, DEFAULT_FAILED_HISTORY),
        }
    }
}

/// The finished runs a policy keeps; `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistoryLimits {
    /// Finished runs in all (`historyLimit`).
    pub total: Option<usize>,
    /// Complete runs (`successfulRunsHistoryLimit`).
    pub complete: Option<usize>,
    /// Failed runs (`failedRunsHistoryLimit`).
    pub failed: Option<usize>,
}

/// What a due tick does while an earlier run of the policy has not finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DefragConcurrencyPolicy {
    /// Stamp the run anyway; it waits for its turn behind the unfinished one.
    Allow,
    /// Skip the tick (it is consumed and reported).
    #[default]
    Forbid,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdDefragPolicyStatus {
    /// When the newest run of the policy was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_time: Option<Time>,
    /// The newest tick acted on: stamped, or deliberately skipped (forbidden, past its deadline,
    /// missed while suspended). The next tick is looked for after it, so a tick is never acted
    /// on twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the members were last checked against the rule (`checkInterval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check_time: Option<Time>,
    /// When the newest Complete run of the policy completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The policy's runs not finished yet (an atomic list, as the reference's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub active: Vec<LocalReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_interval_reads_minutes_and_hours_and_rejects_the_rest() {
        let s = |v: &str| EtcdDefragPolicySpec {
            check_interval: Some(v.into()),
            ..Default::default()
        };
        assert_eq!(s("10m").check_interval_seconds(), Some(600));
        assert_eq!(s("2h").check_interval_seconds(), Some(7200));
        for bad in ["", "m", "0m", "1d", "1.5h", "-1h"] {
            assert_eq!(s(bad).check_interval_seconds(), None, "{bad}");
        }
    }

    #[test]
    fn history_limits_default_to_three_and_one_only_when_nothing_else_decides() {
        let h = |s: EtcdDefragPolicySpec| s.history();
        let limits = |total, complete, failed| HistoryLimits {
            total,
            complete,
            failed,
        };
        assert_eq!(h(Default::default()), limits(None, Some(3), Some(1)));
        // The reference's historyLimit caps the total; ours are not defaulted under it.
        let s = EtcdDefragPolicySpec {
            history_limit: Some(2),
            ..Default::default()
        };
        assert_eq!(h(s), limits(Some(2), None, None));
        // Ours refine it when set.
        let s = EtcdDefragPolicySpec {
            history_limit: Some(5),
            failed_runs_history_limit: Some(1),
            ..Default::default()
        };
        assert_eq!(h(s), limits(Some(5), None, Some(1)));
        // A reference policy that leaves cleanup to the runs' TTL keeps every run until then.
        let s = EtcdDefragPolicySpec {
            ttl_seconds_after_finished: Some(3600),
            ..Default::default()
        };
        assert_eq!(h(s), limits(None, None, None));
        // Ours as before: an unset per-phase limit keeps its default beside a set one.
        let s = EtcdDefragPolicySpec {
            successful_runs_history_limit: Some(1),
            ..Default::default()
        };
        assert_eq!(h(s), limits(None, Some(1), Some(1)));
        // Negative values (refused at admission) keep nothing rather than wrapping around.
        let s = EtcdDefragPolicySpec {
            history_limit: Some(-1),
            ..Default::default()
        };
        assert_eq!(h(s), limits(Some(0), None, None));
    }

    #[test]
    fn concurrency_defaults_to_forbid() {
        assert_eq!(
            EtcdDefragPolicySpec::default().concurrency(),
            DefragConcurrencyPolicy::Forbid
        );
    }
}
