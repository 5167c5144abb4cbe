//! The build Job `<recovery>-pitr-<uid>` of a point-in-time recovery
//! (docs/point-in-time-recovery.md): the cluster's own etcd image running the operator binary
//! (copied in by an `install-tools` init container, as for a verification) as `snapshot-agent
//! point-in-time`: the base snapshot restored into an emptyDir with its own revision, an etcd
//! started there, the schedule's archive replayed up to the target and proven against the
//! recorded hashes, the result stored beside the schedule's snapshots. It never dials the
//! cluster. Owned by the EtcdRecovery. Also the choice of the base. Pure.

use api::v1alpha2::{ArchiveStatus, EtcdRecovery, S3Location};

use super::verify::ETCD;
use super::*;
use crate::builders::restore::ETCDUTL;

/// The `app.kubernetes.io/component` of a build Job.
pub const COMPONENT: &str = "point-in-time";
const SCRATCH_VOLUME: &str = "scratch";
const SCRATCH_DIR: &str = "/scratch";
/// Room in the scratch space beyond the base's download and restored copy: what the replay
/// adds, up to the scratch etcd's quota (`--quota-backend-bytes`), and its WAL.
const SCRATCH_GROWTH: i64 = 9 << 30;

/// A verified snapshot of the schedule, as a base of the build.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Base {
    /// The EtcdSnapshot's name.
    pub name: String,
    /// The revision its verification matched.
    pub revision: i64,
    /// Its object's key in the schedule's bucket.
    pub key: String,
    /// `sha256:<hex>`, as its artifact records it.
    pub checksum: String,
    pub size_bytes: i64,
}

/// The base for a build to `target` (`None`: the newest archived revision) from the schedule's
/// verified snapshots `bases`: the newest at or before the target from which the archive's
/// newest run of segments goes on without a gap. `schedule`: the schedule's name, for messages.
pub fn choose_base(
    schedule: &str,
    archive: Option<&ArchiveStatus>,
    bases: &[Base],
    target: Option<i64>,
) -> Result<Base, String> {
    let (Some(newest), Some(first)) = (
        archive.and_then(|a| a.newest_revision),
        archive.and_then(|a| a.first_revision),
    ) else {
        return Err(format!(
            "EtcdSnapshotSchedule {schedule} has archived nothing yet (status.archive.newestRevision \
             is unset): check that it has spec.archive and that its archiver Pod {schedule}-archive runs"
        ));
    };
    if let Some(target) = target.filter(|t| *t > newest) {
        return Err(format!(
            "revision {target} (spec.source.pointInTime.revision) is past the newest revision the \
             archive of EtcdSnapshotSchedule {schedule} holds, {newest}; choose one up to it, or \
             remove the revision to go back to the newest"
        ));
    }
    let target = target.unwrap_or(newest);
    // The run of segments from `first` on covers every revision after a base at `first - 1` or
    // later.
    bases
        .iter()
        .filter(|b| b.revision <= target && b.revision >= first - 1)
        .max_by_key(|b| b.revision)
        .cloned()
        .ok_or_else(|| {
            let mut known: Vec<i64> = bases.iter().map(|b| b.revision).collect();
            known.sort_unstable();
            format!(
                "no verified snapshot of EtcdSnapshotSchedule {schedule} is at or before revision \
                 {target} and inside the archive's run of revisions {first} to {newest} (verified \
                 snapshots at revisions {known:?}): choose a revision from the schedule's \
                 status.archive.windowStartRevision on, or wait for its next verified snapshot"
            )
        })
}

/// The build Job's name for the recovery `recovery` with `uid`: at most 63 characters, distinct
/// per recovery.
pub fn point_in_time_job_name(recovery: &str, uid: &str) -> String {
    let uid: String = uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    let suffix = format!("-pitr-{uid}");
    let mut base: String = recovery.chars().take(63 - suffix.len()).collect();
    while base.ends_with(['-', '.']) {
        base.pop();
    }
    format!("{base}{suffix}")
}

/// What a build Job needs beyond the recovery and its cluster.
pub struct Build<'a> {
    /// The schedule's S3 destination (its bucket, endpoint and credentials).
    pub s3: &'a S3Location,
    /// The archive's key prefix (ends in `/`).
    pub archive_prefix: String,
    pub base: &'a Base,
    pub revision: Option<i64>,
}

/// The key prefix the result is stored under: `<destination key>point-in-time/`.
pub fn output_prefix(s3: &S3Location) -> String {
    let key = s3.key.as_deref().unwrap_or("");
    match key {
        "" => "point-in-time/".to_string(),
        k if k.ends_with('/') => format!("{k}point-in-time/"),
        k => format!("{k}/point-in-time/"),
    }
}

/// The build Job of `recovery` of `cluster`, run in `etcd_image` (the cluster's).
pub fn point_in_time_job(
    recovery: &EtcdRecovery,
    cluster: &EtcdCluster,
    build: &Build,
    operator_image: &str,
    etcd_image: &str,
) -> Job {
    let name = recovery.name_any();
    let uid = recovery.uid().unwrap_or_default();
    let ns = recovery.namespace().unwrap_or_default();
    let owner = JobOwner {
        reference: OwnerReference {
            api_version: EtcdRecovery::api_version(&()).to_string(),
            kind: EtcdRecovery::kind(&()).to_string(),
            name: name.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        namespace: ns.clone(),
        cluster: cluster.name_any(),
    };
    let job_name = point_in_time_job_name(&name, &uid);
    let mut args = vec![
        "snapshot-agent".to_string(),
        "point-in-time".to_string(),
        format!("--s3-bucket={}", build.s3.bucket),
        format!("--s3-key={}", build.archive_prefix),
        format!("--base-key={}", build.base.key),
        format!("--base-sha256={}", build.base.checksum),
        format!("--output-prefix={}", output_prefix(build.s3)),
        format!("--output-name={job_name}"),
        format!("--output-uid={uid}"),
        format!("--etcdutl={ETCDUTL}"),
        format!("--etcd={ETCD}"),
        format!("--work-dir={SCRATCH_DIR}"),
        format!("--termination-log={TERMINATION_LOG}"),
    ];
    if let Some(revision) = build.revision {
        args.push(format!("--to-revision={revision}"));
    }
    let (tools, tools_mount, image) = in_etcd_image(operator_image, etcd_image);
    // The download, its restored copy and what the replay adds: bounded, so a build that
    // outgrows it is evicted instead of filling the node's disk.
    let scratch = scratch_volume(SCRATCH_VOLUME, build.base.size_bytes, SCRATCH_GROWTH);
    // The base holds the cluster's auth store: with root auth on, the replay logs in as root.
    let mut env = cluster_access(cluster, &ns).env;
    let mut volumes = vec![tools, scratch];
    let mut mounts = vec![tools_mount, mount(SCRATCH_VOLUME, SCRATCH_DIR, false)];
    let service_account =
        s3_access(build.s3).add_to(&mut args, &mut env, &mut volumes, &mut mounts);
    owned_job(
        owner,
        &job_name,
        COMPONENT,
        operator_image,
        AgentPod {
            args,
            env,
            volumes,
            mounts,
            service_account,
            image: Some(image),
        },
    )
}

/// What the agent reports of a build (`{"pointInTime":{...}}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuiltReport {
    pub base_revision: i64,
    pub target_revision: i64,
    #[serde(default)]
    pub hashes_proven: i64,
    #[serde(default)]
    pub proven_at_revision: Option<i64>,
    pub artifact: ReportedArtifact,
}

/// What a build Job says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildRead {
    /// Still running (or not started yet).
    Building,
    Built(BuiltReport),
    /// The Job failed, or succeeded without a result: why.
    Failed(String),
}

/// The build Job's outcome from its view (see [`job_view`]).
pub fn build_read(view: &JobView) -> BuildRead {
    match job_result(view, |r| r.point_in_time.clone(), "a result") {
        Ok(None) => BuildRead::Building,
        Ok(Some(built)) => BuildRead::Built(built),
        Err(why) => BuildRead::Failed(why),
    }
}

#[cfg(test)]
mod tests;
