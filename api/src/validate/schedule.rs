//! The EtcdSnapshotSchedule and EtcdDefragPolicy rules: objects that create runs named after
//! themselves, on a cron schedule parsed as the controller parses it (and, for a policy, a
//! check interval). Their specs are mutable: the same rules on create and update.

use std::sync::LazyLock;

use super::defrag::defrag_rule;
use super::fields::{bounded_length, in_range, non_empty};
use super::location::destination;
use super::Violation;
use crate::cron::{Schedule, ScheduleError};
use crate::v1alpha2::{
    EtcdDefragPolicySpec, EtcdSnapshotScheduleSpec, CHECK_INTERVAL_PATTERN, MAX_AGE_PATTERN,
    MAX_HISTORY_LIMIT, MAX_KEEP_LAST,
};

static DNS_LABEL_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("a valid regex"));
static MAX_AGE_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(MAX_AGE_PATTERN).expect("MAX_AGE_PATTERN is a valid regex"));
static CHECK_INTERVAL_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(CHECK_INTERVAL_PATTERN).expect("CHECK_INTERVAL_PATTERN is a valid regex")
});

pub(super) const SCHEDULE_NAMES: &str =
    "the schedule names its snapshots <name>-<unix minutes> and their Jobs <snapshot>-snapshot";

/// The name of an object whose runs are named `<name>-<unix minutes>`: a DNS label short enough
/// for the runs' names (the CRD's root CEL rule).
pub(super) fn runs_owner_name(name: &str, max: usize, why: &str) -> Option<Violation> {
    let label = DNS_LABEL_RE.is_match(name);
    let length = name.chars().count();
    let problem = match (length > max, label) {
        (true, _) => format!("is {length} characters long"),
        (false, false) => "is not a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit)".to_string(),
        (false, true) => return None,
    };
    Some(
        Violation::new(
            "metadata.name",
            format!(
                "must be a DNS label of at most {max} characters, because {why}, which must stay within 63 characters; this name {problem}"
            ),
            "choose a shorter name of lowercase letters, digits and '-', e.g. my-etcd-nightly",
        )
        .value(format!("{name:?}")),
    )
}

/// The cron expression and time zone, parsed as the controller parses them: CEL checks only
/// their shape, so `61 * * * *` or `Mars/Olympus` pass the CRD and are refused here.
fn cron_schedule(expression: &str, time_zone: Option<&str>, out: &mut Vec<Violation>) {
    if let Some(tz) = time_zone {
        out.extend(bounded_length("spec.timeZone", tz, 64));
    }
    if expression.is_empty() || expression.chars().count() > 256 {
        out.extend(bounded_length("spec.schedule", expression, 256));
        return;
    }
    match Schedule::parse(expression, time_zone.unwrap_or("UTC")) {
        Ok(_) => {}
        Err(ScheduleError::Cron { value, reason }) => out.push(
            Violation::new(
                "spec.schedule",
                format!("is not a valid cron expression: {reason}"),
                "use 5 fields, minute hour day-of-month month day-of-week (e.g. '0 */6 * * *'), or @hourly, @daily, @weekly, @monthly, @yearly",
            )
            .value(format!("{value:?}")),
        ),
        Err(ScheduleError::TimeZone { value }) => out.push(
            Violation::new(
                "spec.timeZone",
                "is not a known IANA time zone",
                "use a name from the tz database such as UTC, Europe/Berlin or America/New_York (see `timedatectl list-timezones`)",
            )
            .value(format!("{value:?}")),
        ),
    }
}

/// Every violation of an EtcdSnapshotSchedule spec (create and update alike).
pub fn schedule_spec(spec: &EtcdSnapshotScheduleSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    cron_schedule(&spec.schedule, spec.time_zone.as_deref(), &mut out);
    out.extend(destination(
        "spec.snapshotTemplate.destination",
        &spec.snapshot_template.destination,
    ));
    out.extend(in_range(
        "spec.startingDeadlineSeconds",
        spec.starting_deadline_seconds,
        1,
        31_622_400,
        "leave it unset to take the most recent missed run however late, or give up to a year in seconds",
    ));
    if let Some(r) = &spec.retention {
        if r.keep_last.is_none() && r.max_age.is_none() {
            out.push(Violation::new(
                "spec.retention",
                "sets neither keepLast nor maxAge",
                "set keepLast, maxAge or both; remove spec.retention to keep every snapshot",
            ));
        }
        out.extend(in_range(
            "spec.retention.keepLast",
            r.keep_last.map(i64::from),
            1,
            MAX_KEEP_LAST.into(),
            "keep at least the newest snapshot; remove keepLast to prune by maxAge only",
        ));
        if let Some(age) = r.max_age.as_deref().filter(|a| !MAX_AGE_RE.is_match(a)) {
            out.push(
                Violation::new(
                    "spec.retention.maxAge",
                    "must be a whole number of minutes, hours or days",
                    "write e.g. 30m, 12h or 7d",
                )
                .value(format!("{age:?}")),
            );
        }
    }
    out
}

/// Every violation of an EtcdDefragPolicy spec (create and update alike).
pub fn policy_spec(spec: &EtcdDefragPolicySpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    if spec.schedule.is_none() && spec.check_interval.is_none() {
        out.push(Violation::new(
            "spec",
            "sets neither schedule nor checkInterval, so the policy would never create a run",
            "set schedule (runs on a cron schedule), checkInterval (a run when a check finds a member worth defragmenting) or both",
        ));
    }
    if let Some(expression) = &spec.schedule {
        cron_schedule(expression, spec.time_zone.as_deref(), &mut out);
    } else if let Some(tz) = spec.time_zone.as_deref() {
        // No schedule to read in it, but the field is still judged as the controller reads it.
        cron_schedule("* * * * *", Some(tz), &mut out);
    }
    if let Some(interval) = spec.check_interval.as_deref() {
        if !CHECK_INTERVAL_RE.is_match(interval) {
            out.push(
                Violation::new(
                    "spec.checkInterval",
                    "must be a whole number of minutes or hours",
                    "write e.g. 10m or 1h",
                )
                .value(format!("{interval:?}")),
            );
        }
    }
    out.extend(super::policy::released_fields(spec));
    if let Some(rule) = &spec.rule {
        out.extend(defrag_rule(rule));
        if rule.is_all() && spec.check_interval.is_some() {
            out.push(Violation::new(
                "spec.rule.all",
                "true with spec.checkInterval would defragment every member at every check",
                "remove checkInterval and use schedule for unconditional runs, or set a rule such as freeSpaceAbove instead of all",
            ));
        }
    }
    for (field, limit) in [
        (
            "spec.successfulRunsHistoryLimit",
            spec.successful_runs_history_limit,
        ),
        (
            "spec.failedRunsHistoryLimit",
            spec.failed_runs_history_limit,
        ),
    ] {
        out.extend(in_range(
            field,
            limit.map(i64::from),
            0,
            MAX_HISTORY_LIMIT.into(),
            "leave it unset for the default (3 Complete, 1 Failed)",
        ));
    }
    out
}
