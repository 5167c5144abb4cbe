//! The EtcdSnapshotSchedule and EtcdDefragPolicy rules: objects that create runs named after
//! themselves, on a cron schedule parsed as the controller parses it (and, for a policy, a
//! check interval). Their specs are mutable: the same rules on create and update.

use std::sync::LazyLock;

use super::defrag::defrag_rule;
use super::fields::{bounded_length, in_range, non_empty};
use super::location::destination;
use super::{cel, Violation};
use crate::cron::{Schedule, ScheduleError};
use crate::v1alpha2::{
    EtcdDefragPolicySpec, EtcdSnapshotScheduleSpec, CHECK_INTERVAL_PATTERN, FLUSH_INTERVAL_PATTERN,
    HASH_INTERVAL_PATTERN, MAX_AGE_PATTERN, MAX_HISTORY_LIMIT, MAX_KEEP_LAST,
};

static DNS_LABEL_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("a valid regex"));
static MAX_AGE_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(MAX_AGE_PATTERN).expect("MAX_AGE_PATTERN is a valid regex"));
static FLUSH_INTERVAL_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(FLUSH_INTERVAL_PATTERN).expect("FLUSH_INTERVAL_PATTERN is a valid regex")
});
static HASH_INTERVAL_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(HASH_INTERVAL_PATTERN).expect("HASH_INTERVAL_PATTERN is a valid regex")
});
static CHECK_INTERVAL_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(CHECK_INTERVAL_PATTERN).expect("CHECK_INTERVAL_PATTERN is a valid regex")
});

/// The name of an object whose runs are named `<name>-<unix minutes>`: a DNS label short enough
/// for the runs' names (the CRD's root CEL rule, whose message is `rule`).
pub(super) fn runs_owner_name(name: &str, max: usize, rule: &'static str) -> Option<Violation> {
    let label = DNS_LABEL_RE.is_match(name);
    let length = name.chars().count();
    let problem = match (length > max, label) {
        (true, _) => format!("is {length} characters long"),
        (false, false) => "is not a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit)".to_string(),
        (false, true) => return None,
    };
    Some(
        Violation::of_rule("metadata.name", rule, format!("this name {problem}"), "")
            .value(format!("{name:?}")),
    )
}

/// The cron expression and time zone, parsed as the controller parses them: CEL checks only
/// their shape, so `61 * * * *` or `Mars/Olympus` pass the CRD and are refused here.
/// `rule` is the message of the kind's CEL rule on the expression's shape.
fn cron_schedule(
    expression: &str,
    time_zone: Option<&str>,
    rule: &'static str,
    out: &mut Vec<Violation>,
) {
    if let Some(tz) = time_zone {
        out.extend(bounded_length("spec.timeZone", tz, 64));
    }
    if expression.is_empty() || expression.chars().count() > 256 {
        out.extend(bounded_length("spec.schedule", expression, 256));
        if expression.is_empty() {
            // The shape rule rejects an empty expression too, as the apiserver reports.
            out.push(
                Violation::of_rule("spec.schedule", rule, "this one is empty", "").value("\"\""),
            );
        }
        return;
    }
    match Schedule::parse(expression, time_zone.unwrap_or("UTC")) {
        Ok(_) => {}
        Err(ScheduleError::Cron { value, reason }) => out.push(
            Violation::of_rule(
                "spec.schedule",
                rule,
                format!("this one is not a valid cron expression: {reason}"),
                "",
            )
            .value(format!("{value:?}")),
        ),
        Err(ScheduleError::TimeZone { value }) => out.push(
            Violation::of_rule(
                "spec.timeZone",
                cel::TIME_ZONE,
                "this one is not a known IANA time zone",
                "see `timedatectl list-timezones` for the names, e.g. America/New_York",
            )
            .value(format!("{value:?}")),
        ),
    }
}

/// Every violation of an EtcdSnapshotSchedule spec (create and update alike).
pub fn schedule_spec(spec: &EtcdSnapshotScheduleSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    cron_schedule(
        &spec.schedule,
        spec.time_zone.as_deref(),
        cel::SCHEDULE_CRON,
        &mut out,
    );
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
            out.push(Violation::of_rule(
                "spec.retention",
                cel::RETENTION_EMPTY,
                "",
                "",
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
                Violation::of_rule("spec.retention.maxAge", cel::RETENTION_MAX_AGE, "", "")
                    .value(format!("{age:?}")),
            );
        }
    }
    if let Some(archive) = &spec.archive {
        if spec.snapshot_template.destination.s3.is_none() {
            out.push(Violation::of_rule(
                "spec.archive",
                cel::ARCHIVE_NEEDS_S3,
                "",
                "",
            ));
        }
        if let Some(v) = archive
            .flush_interval
            .as_deref()
            .filter(|v| !FLUSH_INTERVAL_RE.is_match(v))
        {
            out.push(
                Violation::of_rule(
                    "spec.archive.flushInterval",
                    cel::ARCHIVE_FLUSH_INTERVAL,
                    "",
                    "",
                )
                .value(format!("{v:?}")),
            );
        }
        if let Some(v) = archive
            .hash_interval
            .as_deref()
            .filter(|v| !HASH_INTERVAL_RE.is_match(v))
        {
            out.push(
                Violation::of_rule(
                    "spec.archive.hashInterval",
                    cel::ARCHIVE_HASH_INTERVAL,
                    "",
                    "",
                )
                .value(format!("{v:?}")),
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
        out.push(Violation::of_rule(
            "spec",
            cel::POLICY_TRIGGER,
            "without either the policy would never create a run",
            "",
        ));
    }
    if let Some(expression) = &spec.schedule {
        cron_schedule(
            expression,
            spec.time_zone.as_deref(),
            cel::POLICY_CRON,
            &mut out,
        );
    } else if let Some(tz) = spec.time_zone.as_deref() {
        // No schedule to read in it, but the field is still judged as the controller reads it.
        cron_schedule("* * * * *", Some(tz), cel::POLICY_CRON, &mut out);
    }
    if let Some(interval) = spec.check_interval.as_deref() {
        if !CHECK_INTERVAL_RE.is_match(interval) {
            out.push(
                Violation::of_rule("spec.checkInterval", cel::CHECK_INTERVAL, "", "")
                    .value(format!("{interval:?}")),
            );
        }
    }
    out.extend(super::policy::released_fields(spec));
    if let Some(rule) = &spec.rule {
        out.extend(defrag_rule(rule));
        if rule.is_all() && spec.check_interval.is_some() {
            out.push(Violation::of_rule(
                "spec.rule.all",
                cel::POLICY_ALL_WITH_CHECKS,
                "",
                "",
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
