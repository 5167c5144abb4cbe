//! The messages of the CEL rules declared on kinds whose types live outside this module's
//! reach (`v1alpha2/{schedule,policy,defrag}.rs`), copied verbatim, and how the violations of
//! the defrag rule's checks are matched to them. The rules of EtcdCluster and EtcdSnapshot use
//! the constants their types declare (`crate::v1alpha2::CEL_*`), so there is nothing to copy.
//!
//! A copy can drift from its rule: `every_copied_message_is_a_rule_of_the_crds` (below) fails
//! when a rule's message changes without its copy, and the shared corpus compares every
//! rejection of the validator with the CEL message of the same rule.

use super::Violation;

/// EtcdSnapshotSchedule: the name rule on the CRD root.
pub(super) const SCHEDULE_NAME: &str = "metadata.name must be a DNS label of at most 44 characters: the schedule names its snapshots <name>-<unix minutes> and their Jobs <snapshot>-snapshot, which must stay within 63 characters; choose a shorter name such as my-etcd-hourly";
/// EtcdSnapshotSchedule: the shape of `spec.schedule`.
pub(super) const SCHEDULE_CRON: &str = "spec.schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, e.g. '0 */6 * * *') or one of @hourly, @daily, @weekly, @monthly, @yearly";
/// EtcdSnapshotSchedule and EtcdDefragPolicy: the shape of `spec.timeZone`.
pub(super) const TIME_ZONE: &str =
    "spec.timeZone must be an IANA time zone name such as UTC or Europe/Berlin";
/// EtcdSnapshotSchedule: `spec.retention` is not empty.
pub(super) const RETENTION_EMPTY: &str =
    "spec.retention needs keepLast, maxAge or both; remove spec.retention to keep every snapshot";
/// EtcdSnapshotSchedule: the shape of `spec.retention.maxAge`.
pub(super) const RETENTION_MAX_AGE: &str =
    "spec.retention.maxAge must be a whole number of minutes, hours or days such as 30m, 12h or 7d";

/// EtcdSnapshotSchedule: `spec.archive` needs an S3 destination.
pub(super) const ARCHIVE_NEEDS_S3: &str = "spec.archive needs an S3 destination (spec.snapshotTemplate.destination.s3): the archive's segments are stored beside the schedule's snapshots, and a PVC destination cannot hold them; use an S3 destination or remove spec.archive";
/// EtcdSnapshotSchedule: the shape of `spec.archive.flushInterval`.
pub(super) const ARCHIVE_FLUSH_INTERVAL: &str = "spec.archive.flushInterval must be 100ms to 999ms or 1s to 99s, such as 500ms or 2s: how often the archiver stores what it buffered";
/// EtcdSnapshotSchedule: the shape of `spec.archive.hashInterval`.
pub(super) const ARCHIVE_HASH_INTERVAL: &str =
    "spec.archive.hashInterval must be a whole number of seconds or minutes such as 30s or 5m";

/// EtcdDefragPolicy: the name rule on the CRD root.
pub(super) const POLICY_NAME: &str = "metadata.name must be at most 63 characters: the policy's runs carry it as the value of the etcd-operator.cozystack.io/defrag-policy label; choose a shorter name such as my-etcd-defrag";
/// EtcdDefragPolicy: a schedule, a check interval or both.
pub(super) const POLICY_TRIGGER: &str = "spec needs schedule (runs on a cron schedule), checkInterval (a run when a check finds a member worth defragmenting) or both";
/// EtcdDefragPolicy: `rule.all` with `checkInterval`.
pub(super) const POLICY_ALL_WITH_CHECKS: &str = "spec.rule.all=true with spec.checkInterval would defragment every member at every check; remove checkInterval and use schedule for unconditional runs, or set a rule such as freeSpaceAbove";
/// EtcdDefragPolicy: the shape of `spec.schedule`.
pub(super) const POLICY_CRON: &str = "spec.schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, e.g. '0 3 * * *') or one of @hourly, @daily, @weekly, @monthly, @yearly";
/// EtcdDefragPolicy: the shape of `spec.checkInterval`.
pub(super) const CHECK_INTERVAL: &str =
    "spec.checkInterval must be a whole number of minutes or hours such as 10m or 1h";

/// EtcdDefrag: the spec after create.
pub(super) const DEFRAG_IMMUTABLE: &str = "EtcdDefrag spec is immutable: a defrag runs once; create a new EtcdDefrag with another name instead";
/// A defrag rule: `all` alone.
const DEFRAG_ALL_EXCLUSIVE: &str = "spec.rule.all=true defragments every member unconditionally and cannot be combined with freeSpaceAbove, quotaUsageAbove or minReclaim; remove those fields or set all=false";
/// A defrag rule: `minReclaim` not above `freeSpaceAbove`.
const DEFRAG_MIN_RECLAIM_ABOVE_FREE: &str = "spec.rule.minReclaim must not be above spec.rule.freeSpaceAbove (defaults 32Mi and 200Mi): a member with that much reclaimable space is defragmented anyway; lower minReclaim or raise freeSpaceAbove";
/// A defrag rule: `quotaUsageAbove` a whole percentage below 100.
const DEFRAG_QUOTA_USAGE: &str = "spec.rule.quotaUsageAbove must be a whole percentage from 1% to 99% (100% and above are refused: at 100% the quota is already exhausted and etcd has raised NOSPACE); write e.g. 80%";
/// A defrag rule: a positive `freeSpaceAbove`.
const DEFRAG_FREE_SPACE_POSITIVE: &str =
    "spec.rule.freeSpaceAbove must be a positive quantity such as 200Mi or 1Gi";
/// A defrag rule: a positive `minReclaim`.
const DEFRAG_MIN_RECLAIM_POSITIVE: &str =
    "spec.rule.minReclaim must be a positive quantity such as 32Mi";

/// The defrag rule's checks (shared by EtcdDefrag and EtcdDefragPolicy) report their violations
/// without the rule's message: give each the message of the CEL rule it mirrors, by its field
/// and what it says. A violation that matches none is left as it is.
pub(super) fn attach_defrag_rule_messages(violations: &mut [Violation]) {
    for v in violations.iter_mut().filter(|v| v.rule.is_none()) {
        v.rule = match v.field.as_str() {
            "spec.rule" if v.message.starts_with("all=true") => Some(DEFRAG_ALL_EXCLUSIVE),
            "spec.rule.minReclaim" if v.message.starts_with("must not be above") => {
                Some(DEFRAG_MIN_RECLAIM_ABOVE_FREE)
            }
            "spec.rule.minReclaim" => Some(DEFRAG_MIN_RECLAIM_POSITIVE),
            "spec.rule.freeSpaceAbove" => Some(DEFRAG_FREE_SPACE_POSITIVE),
            "spec.rule.quotaUsageAbove" => Some(DEFRAG_QUOTA_USAGE),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_copied_message_is_a_rule_of_the_crds() {
        let messages = crate::crd::cel_messages();
        for copied in [
            SCHEDULE_NAME,
            SCHEDULE_CRON,
            TIME_ZONE,
            RETENTION_EMPTY,
            RETENTION_MAX_AGE,
            ARCHIVE_NEEDS_S3,
            ARCHIVE_FLUSH_INTERVAL,
            ARCHIVE_HASH_INTERVAL,
            POLICY_NAME,
            POLICY_TRIGGER,
            POLICY_ALL_WITH_CHECKS,
            POLICY_CRON,
            CHECK_INTERVAL,
            DEFRAG_IMMUTABLE,
            DEFRAG_ALL_EXCLUSIVE,
            DEFRAG_MIN_RECLAIM_ABOVE_FREE,
            DEFRAG_FREE_SPACE_POSITIVE,
            DEFRAG_MIN_RECLAIM_POSITIVE,
            DEFRAG_QUOTA_USAGE,
        ] {
            assert!(
                messages.iter().any(|m| m == copied),
                "no CEL rule of the CRDs has the message {copied:?}: copy the rule's new message here"
            );
        }
    }
}
