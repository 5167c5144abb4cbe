//! `EtcdDefragPolicy`: EtcdDefrag runs of one cluster created on a cron schedule, when a check
//! finds a member worth defragmenting, or both, with history limits on the runs it created. The
//! controller lives in `controller::defrag::policy`; the cron expression and time zone are parsed
//! there and in the webhook (CEL checks only their shape).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::LocalReference;
use super::defrag::DefragRule;

/// The longest policy name: runs are named `<policy>-<unix minutes>` (8 digits until the year
/// 2160), a label value of at most 63 characters, like the snapshot schedule's.
pub const MAX_POLICY_NAME: usize = 44;
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
    printcolumn(
        name = "Check",
        type_ = "string",
        json_path = ".spec.checkInterval"
    ),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(
        name = "Last Run",
        type_ = "date",
        json_path = ".status.lastRunTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    category = "etcd",
    validation = Rule::new("!has(self.metadata.name) || (self.metadata.name.size() <= 44 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))")
        .message("metadata.name must be a DNS label of at most 44 characters: the policy names its runs <name>-<unix minutes>, which must stay within 63 characters; choose a shorter name such as my-etcd-defrag")
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
    /// `0 3 * * *`) or a macro (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`): a run
    /// is created at each fire time, and defragments the members `rule` selects.
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
    /// Which members the runs defragment (the runs' `spec.rule`). Absent means the default gate
    /// (`freeSpaceAbove: 200Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<DefragRule>,
    /// Stop creating runs (history limits still apply). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Keep the newest this many Complete runs of the policy (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_HISTORY_LIMIT))]
    pub successful_runs_history_limit: Option<i32>,
    /// Keep the newest this many Failed runs of the policy (default 1).
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

    pub fn successful_history(&self) -> usize {
        self.successful_runs_history_limit
            .unwrap_or(DEFAULT_SUCCESSFUL_HISTORY)
            .max(0) as usize
    }

    pub fn failed_history(&self) -> usize {
        self.failed_runs_history_limit
            .unwrap_or(DEFAULT_FAILED_HISTORY)
            .max(0) as usize
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdDefragPolicyStatus {
    /// When the newest run of the policy was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_time: Option<Time>,
    /// The fire time of the newest scheduled run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the members were last checked against the rule (`checkInterval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check_time: Option<Time>,
    /// When the newest Complete run of the policy completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The policy's runs not finished yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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
    fn history_limits_default_to_three_and_one() {
        let s = EtcdDefragPolicySpec::default();
        assert_eq!((s.successful_history(), s.failed_history()), (3, 1));
    }
}
