//! `EtcdSnapshotSchedule`: EtcdSnapshots of one cluster taken on a cron schedule, with
//! retention of the ones it created. The controller lives in `controller::schedule`; the cron
//! expression and time zone are parsed there and in the webhook (CEL checks only their shape).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{AdditionalMetadata, LocalReference, SnapshotDestination};

/// The longest schedule name: snapshots are named `<schedule>-<unix minutes>` (8 digits until
/// the year 2160) and their Jobs `<snapshot>-snapshot`, a label value of at most 63 characters.
pub const MAX_SCHEDULE_NAME: usize = 44;
/// The largest `retention.keepLast`.
pub const MAX_KEEP_LAST: i32 = 1000;
/// `retention.maxAge`: a whole number of minutes, hours or days (`30m`, `12h`, `7d`).
pub const MAX_AGE_PATTERN: &str = r"^[1-9][0-9]{0,5}(m|h|d)$";
/// `archive.flushInterval`: 100 to 999 milliseconds or 1 to 99 seconds (`500ms`, `2s`).
pub const FLUSH_INTERVAL_PATTERN: &str = r"^([1-9][0-9]{2}ms|[1-9][0-9]?s)$";
/// `archive.hashInterval`: a whole number of seconds or minutes (`30s`, `5m`).
pub const HASH_INTERVAL_PATTERN: &str = r"^([1-9][0-9]{0,3}s|[1-9][0-9]?m)$";
/// `archive.flushInterval` when unset: the most writes a loss of the whole cluster costs.
pub const DEFAULT_FLUSH_INTERVAL: &str = "2s";
/// `archive.hashInterval` when unset.
pub const DEFAULT_HASH_INTERVAL: &str = "30s";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "etcd-operator.cozystack.io",
    version = "v1alpha2",
    kind = "EtcdSnapshotSchedule",
    plural = "etcdsnapshotschedules",
    namespaced,
    status = "EtcdSnapshotScheduleStatus",
    derive = "PartialEq",
    doc = "EtcdSnapshots of an EtcdCluster taken on a cron schedule, the oldest pruned by a retention policy.",
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
    shortname = "esched",
    category = "etcd",
    validation = Rule::new("!has(self.metadata.name) || (self.metadata.name.size() <= 44 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))")
        .message("metadata.name must be a DNS label of at most 44 characters: the schedule names its snapshots <name>-<unix minutes> and their Jobs <snapshot>-snapshot, which must stay within 63 characters; choose a shorter name such as my-etcd-hourly")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.archive) || has(self.snapshotTemplate.destination.s3)")
    .message("spec.archive needs an S3 destination (spec.snapshotTemplate.destination.s3): the archive's segments are stored beside the schedule's snapshots, and a PVC destination cannot hold them; use an S3 destination or remove spec.archive"))]
pub struct EtcdSnapshotScheduleSpec {
    /// The EtcdCluster (same namespace) to snapshot.
    pub cluster_ref: LocalReference,
    /// A 5-field cron expression (`minute hour day-of-month month day-of-week`, e.g.
    /// `0 */6 * * *`) or a macro (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`).
    #[x_kube(validation = Rule::new(r"self.matches('^\\s*(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^\\s]+(\\s+[^\\s]+){4})\\s*$')")
        .message("spec.schedule must be a 5-field cron expression (minute hour day-of-month month day-of-week, e.g. '0 */6 * * *') or one of @hourly, @daily, @weekly, @monthly, @yearly"))]
    #[schemars(length(min = 1, max = 256))]
    pub schedule: String,
    /// The IANA time zone the schedule is read in (e.g. `Europe/Berlin`); default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(r"self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$')")
        .message("spec.timeZone must be an IANA time zone name such as UTC or Europe/Berlin"))]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// Stop creating snapshots (retention still runs). Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// What to do when a run is due while the previous snapshot is still running. Default
    /// `Forbid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// The snapshots to create.
    pub snapshot_template: SnapshotTemplate,
    /// Which of the schedule's snapshots to keep; absent keeps all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<SnapshotRetention>,
    /// A run missed by more than this many seconds (the operator was down, the schedule was
    /// suspended) is skipped. Unset: only the most recent missed run is taken, however late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 31_622_400))]
    pub starting_deadline_seconds: Option<i64>,
    /// A continuous archive of every revision of the cluster after the schedule's snapshots,
    /// seconds behind it, for point-in-time recovery (docs/point-in-time-recovery.md). S3
    /// destinations only. Absent: snapshots only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveSpec>,
}

/// The continuous archive: an archiver Pod `<schedule>-archive` watches the cluster's whole
/// keyspace and stores every revision, as segments, under `<destination key>archive/<schedule>/`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveSpec {
    /// How often the archiver stores what it buffered as one segment: the most writes the loss
    /// of the whole cluster costs. `100ms` to `999ms` or `1s` to `99s`; default `2s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(r"self.matches('^([1-9][0-9]{2}ms|[1-9][0-9]?s)$')")
        .message("spec.archive.flushInterval must be 100ms to 999ms or 1s to 99s, such as 500ms or 2s: how often the archiver stores what it buffered"))]
    #[schemars(length(max = 16))]
    pub flush_interval: Option<String>,
    /// How often the archiver records the cluster's own `HashKV`, what a point-in-time
    /// recovery is proven exact against. Seconds or minutes (`30s`, `5m`); default `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(r"self.matches('^([1-9][0-9]{0,3}s|[1-9][0-9]?m)$')")
        .message("spec.archive.hashInterval must be a whole number of seconds or minutes such as 30s or 5m"))]
    #[schemars(length(max = 16))]
    pub hash_interval: Option<String>,
}

impl ArchiveSpec {
    pub fn flush_interval(&self) -> &str {
        self.flush_interval
            .as_deref()
            .unwrap_or(DEFAULT_FLUSH_INTERVAL)
    }

    pub fn hash_interval(&self) -> &str {
        self.hash_interval
            .as_deref()
            .unwrap_or(DEFAULT_HASH_INTERVAL)
    }
}

impl EtcdSnapshotScheduleSpec {
    pub fn suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }

    pub fn concurrency(&self) -> ConcurrencyPolicy {
        self.concurrency_policy.unwrap_or_default()
    }

    /// The time zone name, `UTC` when unset.
    pub fn time_zone_name(&self) -> &str {
        self.time_zone.as_deref().unwrap_or("UTC")
    }
}

/// What to do with a run that is due while an earlier snapshot of the schedule is not finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConcurrencyPolicy {
    /// Create the new snapshot anyway.
    Allow,
    /// Skip the run.
    #[default]
    Forbid,
    /// Delete the unfinished snapshots, then create the new one.
    Replace,
}

/// The EtcdSnapshots the schedule creates: their destination and extra metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotTemplate {
    /// Labels and annotations put on each snapshot (keys under `etcd-operator.cozystack.io/`
    /// are the operator's and are dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<AdditionalMetadata>,
    /// Where each snapshot is stored.
    pub destination: SnapshotDestination,
    /// Each snapshot's `spec.verify` (default true: verified once Complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
}

/// Which snapshots of the schedule are kept. Complete and Failed snapshots are counted apart: a
/// snapshot goes when it is outside the newest `keepLast` of its phase or older than `maxAge`,
/// except the newest Complete snapshot, which no rule prunes. Snapshots still running are never
/// pruned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.keepLast) || has(self.maxAge)")
    .message("spec.retention needs keepLast, maxAge or both; remove spec.retention to keep every snapshot"))]
pub struct SnapshotRetention {
    /// Keep the newest this many Complete snapshots, and separately the newest this many Failed
    /// ones (failed runs never push a good snapshot out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_KEEP_LAST))]
    pub keep_last: Option<i32>,
    /// Prune finished snapshots older than this (`30m`, `12h`, `7d`); the newest Complete
    /// snapshot is kept whatever its age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(r"self.matches('^[1-9][0-9]{0,5}(m|h|d)$')")
        .message("spec.retention.maxAge must be a whole number of minutes, hours or days such as 30m, 12h or 7d"))]
    pub max_age: Option<String>,
    /// Count only verified snapshots (`Verified=True`) as good ones: unverified and
    /// failed-verification Complete snapshots are counted apart (like Failed ones) and one
    /// still being verified is neither counted nor pruned, so a bad snapshot never pushes a
    /// verified one out of `keepLast`. Never prunes a snapshot that retention without it would
    /// keep. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_verified: Option<bool>,
}

impl SnapshotRetention {
    /// `maxAge` in seconds, if set and well formed.
    pub fn max_age_seconds(&self) -> Option<i64> {
        let s = self.max_age.as_deref()?;
        let (n, unit) = s.split_at(s.len().checked_sub(1)?);
        let n: i64 = n.parse().ok()?;
        let unit = match unit {
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return None,
        };
        (n > 0).then_some(n * unit)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSnapshotScheduleStatus {
    /// The fire time of the newest snapshot created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the newest Complete snapshot of the schedule completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The schedule's snapshots not finished yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<LocalReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// What the continuous archive holds, as its segments in the object store say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveStatus>,
}

/// The continuous archive as stored: read from the listing of its segments.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveStatus {
    /// The newest archived revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_revision: Option<i64>,
    /// When the segment holding the newest archived revision was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_time: Option<Time>,
    /// The first revision of the archive's newest contiguous run (revisions from here to
    /// `newestRevision` are all archived).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_revision: Option<i64>,
    /// The revision of the oldest verified snapshot of the schedule that the contiguous run
    /// starts right after or covers (its base): a point-in-time recovery reaches every
    /// revision from this one to `newestRevision`. Absent until such a base snapshot exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start_revision: Option<i64>,
    /// Revisions the archive lacks between its segments (`<first>-<last>`), oldest first: the
    /// archiver fell behind a compaction. At most the newest 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<String>,
    /// How many segments are stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<i64>,
    /// How many revisions the cluster was ahead of the archive when the operator last compared
    /// them (every 15 s): 0 when every revision is archived. Absent when no member answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_revisions: Option<i64>,
    /// How far behind the cluster the archive is, in seconds: 0 when every revision is
    /// archived, else how long ago the segment holding the newest archived revision was stored
    /// (an upper bound: the revisions after it may be younger). Absent when no member answered
    /// or nothing is archived yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_age_reads_minutes_hours_days_and_rejects_the_rest() {
        let r = |s: &str| SnapshotRetention {
            keep_last: None,
            max_age: Some(s.into()),
            require_verified: None,
        };
        assert_eq!(r("30m").max_age_seconds(), Some(1800));
        assert_eq!(r("12h").max_age_seconds(), Some(43_200));
        assert_eq!(r("7d").max_age_seconds(), Some(604_800));
        for bad in ["", "m", "0d", "1w", "1.5h", "-1h"] {
            assert_eq!(r(bad).max_age_seconds(), None, "{bad}");
        }
    }
}
