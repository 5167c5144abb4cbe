//! `EtcdRecovery` (ours, beyond the reference API): a one-shot, run-to-completion rebuild of an
//! EtcdCluster in place after it lost its quorum, from its surviving member or from a stored
//! EtcdSnapshot. Like `EtcdSnapshot` and `EtcdDefrag` the spec is immutable and terminal phases
//! are sticky. The controller is `controller::recovery`; docs/disaster-recovery.md is the runbook.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    LocalReference, PvcLocation, RestoreSource, S3Location, CEL_RESTORE_PVC_SUBPATH,
    CEL_RESTORE_S3_KEY,
};

// The messages of the CEL rules declared in this file. `api::validate` reports each broken
// rule with the same text, so what the runbook quotes reads the same with the webhook installed.
/// The CEL rule's message: an EtcdRecovery's spec after create.
pub const CEL_RECOVERY_IMMUTABLE: &str = "EtcdRecovery spec is immutable: a recovery runs once; create a new EtcdRecovery with another name instead";
/// The CEL rule's message: exactly one source.
pub const CEL_RECOVERY_ONE_SOURCE: &str = "spec.source needs exactly one of survivor (rebuild from the surviving member with the most data), snapshot (rebuild from a stored snapshot: an EtcdSnapshot by name, or an S3 object or PVC file) or pointInTime (rebuild as the cluster was at a revision: an EtcdSnapshotSchedule with spec.archive, and the revision or none for the newest archived)";

/// The CEL rule's message: a snapshot source is exactly one of an EtcdSnapshot, an S3 object
/// or a PVC file.
pub const CEL_RECOVERY_SNAPSHOT_ONE_OF: &str = "spec.source.snapshot needs exactly one of name (an EtcdSnapshot in this namespace), s3 (the bucket and exact key of a stored snapshot) or pvc (a claim and the exact path of the .db file in it)";

/// The CEL rule's message: `sha256` belongs to a snapshot given by its location.
pub const CEL_RECOVERY_SHA256_INLINE_ONLY: &str = "spec.source.snapshot.sha256 applies only to a snapshot given by s3 or pvc: an EtcdSnapshot's checksum is read from its status.artifact; remove sha256";

/// The CEL rule's message: a snapshot given by its location is checked against a known sha256
/// unless the user accepts it unverified.
pub const CEL_RECOVERY_INLINE_NEEDS_CHECKSUM: &str = "spec.source.snapshot given by s3 or pvc needs spec.source.snapshot.sha256 (the stored object's checksum, e.g. the status.artifact.checksum of the EtcdSnapshot that wrote it) or spec.allowUnverifiedSnapshot: true: a snapshot given by its location has no Verified condition";

/// The CEL rule's message: `allowUnverifiedSnapshot` belongs to a snapshot source.
pub const CEL_RECOVERY_UNVERIFIED_NEEDS_SNAPSHOT: &str = "spec.allowUnverifiedSnapshot applies only to spec.source.snapshot; remove it from a survivor recovery";

/// The annotation the recovery controller sets on the EtcdCluster it works on, naming the
/// EtcdRecovery: while it is there the cluster controller changes no membership (the cluster's
/// `Available` and `Progressing` conditions say `Recovering` and name the EtcdRecovery). Set
/// before the first step that touches a member, removed once the survivor runs as a healthy
/// one-member cluster, so the cluster controller adds the other members back.
pub const RECOVERY_ANNOTATION: &str = "etcd-operator.cozystack.io/recovery";

/// The annotation the recovery controller sets on the surviving EtcdMember while its Pod is to
/// start once with etcd's `--force-new-cluster` (the value names the EtcdRecovery). Only the
/// operator writes EtcdMembers (the webhook's member guard).
pub const FORCE_NEW_CLUSTER_ANNOTATION: &str = "etcd-operator.cozystack.io/force-new-cluster";

/// On an EtcdCluster: `survivor` lets the operator create an EtcdRecovery from a survivor itself
/// once the cluster has been `QuorumLost` or `AllMembersLost` for
/// [`AUTO_RECOVERY_GRACE_SECONDS`]; `snapshot` one from the newest Verified Complete
/// EtcdSnapshot of the cluster. Off when absent.
pub const AUTO_RECOVERY_ANNOTATION: &str = "etcd-operator.cozystack.io/auto-recovery";

/// The annotation the recovery controller sets on the EtcdMember a snapshot is restored into
/// (the value names the EtcdRecovery), with the snapshot's location in `spec.restore`: its Pod
/// is built with the restore init containers, which set the member's previous data aside on its
/// PVC (never delete it) and restore the snapshot in its place as a one-member cluster.
pub const RESTORE_IN_PLACE_ANNOTATION: &str = "etcd-operator.cozystack.io/restore-in-place";

/// Beside [`RESTORE_IN_PLACE_ANNOTATION`]: the `--bump-revision` the restore uses (decimal),
/// from the recovery's plan (`status.plan.bumpRevision`).
pub const RESTORE_BUMP_REVISION_ANNOTATION: &str =
    "etcd-operator.cozystack.io/restore-bump-revision";

/// Beside [`RESTORE_IN_PLACE_ANNOTATION`], for a snapshot given by its location with
/// `spec.source.snapshot.sha256`: the sha256 the restore checks the stored object against
/// (the agent's `--expected-sha256`).
pub const RESTORE_SHA256_ANNOTATION: &str = "etcd-operator.cozystack.io/restore-sha256";

/// Beside [`RESTORE_IN_PLACE_ANNOTATION`]: the UID of the EtcdRecovery that marked the member.
/// The restore's set-aside directory and its `restored` marker are keyed by it, so a later
/// EtcdRecovery of the same name (another snapshot) is a restore of its own, never taken for
/// one already done.
pub const RESTORE_ID_ANNOTATION: &str = "etcd-operator.cozystack.io/restore-id";

/// The directory, inside a member's data dir, where an in-place restore sets the member's
/// previous `member` directory aside (it is kept; docs/disaster-recovery.md says when to remove
/// it). `key` is the EtcdRecovery's UID ([`RESTORE_ID_ANNOTATION`]); a mark written before the
/// UID was recorded names the directory by the recovery's name.
pub fn set_aside_dir(key: &str) -> String {
    format!(".pre-restore-{key}")
}

/// How long a cluster annotated with [`AUTO_RECOVERY_ANNOTATION`] must have been unavailable
/// (QuorumLost or AllMembersLost) before the operator recovers it: long enough for a member
/// that is only restarting (a Node reboot) to come back with its data.
pub const AUTO_RECOVERY_GRACE_SECONDS: i64 = 60;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "etcd-operator.cozystack.io",
    version = "v1alpha2",
    kind = "EtcdRecovery",
    plural = "etcdrecoveries",
    namespaced,
    status = "EtcdRecoveryStatus",
    derive = "PartialEq",
    doc = "A one-shot rebuild of an EtcdCluster in place after it lost its quorum: from its surviving member, or from a stored EtcdSnapshot. Destructive: what the plan in status lists as lost is gone.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step"),
    // The source as written (`{"survivor":{}}`, `{"snapshot":{"name":"nightly"}}`): a printer
    // column cannot name the key that is set, so the object is printed as JSON.
    printcolumn(name = "Source", type_ = "string", json_path = ".spec.source"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    // `-o wide`: what the plan chose.
    printcolumn(
        name = "Member",
        type_ = "string",
        json_path = ".status.plan.member",
        priority = 1
    ),
    printcolumn(
        name = "Snapshot",
        type_ = "string",
        json_path = ".status.plan.snapshot",
        priority = 1
    ),
    shortname = "erec",
    category = "etcd"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self == oldSelf").message(CEL_RECOVERY_IMMUTABLE),
    validation = Rule::new("!has(self.allowUnverifiedSnapshot) || has(self.source.snapshot)")
        .message(CEL_RECOVERY_UNVERIFIED_NEEDS_SNAPSHOT),
    validation = Rule::new("!has(self.source.snapshot) || has(self.source.snapshot.name) || has(self.source.snapshot.sha256) || (has(self.allowUnverifiedSnapshot) && self.allowUnverifiedSnapshot)")
        .message(CEL_RECOVERY_INLINE_NEEDS_CHECKSUM),
)]
pub struct EtcdRecoverySpec {
    /// The EtcdCluster (same namespace) to rebuild. It keeps its name, Services, Secrets and
    /// client URLs.
    pub cluster_ref: LocalReference,
    /// What to rebuild from.
    pub source: RecoverySource,
    /// DESTRUCTIVE. Lets the recovery act on a cluster that still has a working quorum: its
    /// members are stopped, every member but the source is discarded (with its data), and with
    /// a snapshot source every write after the snapshot is lost. Without it a recovery of a
    /// healthy cluster fails before touching anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_healthy_cluster_rollback: Option<bool>,
    /// With `source.snapshot`: restore the snapshot even though it is not `Verified=True`
    /// (verification off, failed, or the snapshot predates it). Without it such a snapshot is
    /// refused before anything is changed. The restore still checks the object's sha256. A
    /// snapshot given by `s3` or `pvc` has no Verified condition: it needs this or
    /// `source.snapshot.sha256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_unverified_snapshot: Option<bool>,
}

impl EtcdRecoverySpec {
    /// Whether the user confirmed acting on a healthy cluster.
    pub fn healthy_rollback_confirmed(&self) -> bool {
        self.confirm_healthy_cluster_rollback == Some(true)
    }

    /// Whether the user accepts a snapshot that is not `Verified=True`.
    pub fn unverified_snapshot_allowed(&self) -> bool {
        self.allow_unverified_snapshot == Some(true)
    }
}

impl EtcdRecovery {
    /// The snapshot the recovery restores: `spec.source.snapshot`, or the one a point-in-time
    /// build stored (`status.pointInTime.snapshot`, once built).
    pub fn snapshot_source(&self) -> Option<&RecoverySnapshotSource> {
        self.spec.source.snapshot.as_ref().or_else(|| {
            self.spec.source.point_in_time.as_ref()?;
            self.status
                .as_ref()?
                .point_in_time
                .as_ref()?
                .snapshot
                .as_ref()
        })
    }
}

/// Exactly one of `survivor`, `snapshot` or `pointInTime`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.survivor) ? 1 : 0) + (has(self.snapshot) ? 1 : 0) + (has(self.pointInTime) ? 1 : 0) == 1").message(CEL_RECOVERY_ONE_SOURCE))]
pub struct RecoverySource {
    /// Rebuild from a member that still holds its data: the one with the highest commit index
    /// (then term), or the one named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub survivor: Option<SurvivorSource>,
    /// Rebuild from a stored snapshot: a Complete EtcdSnapshot of this cluster by name, or an
    /// S3 object or PVC file given by its location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<RecoverySnapshotSource>,
    /// Rebuild as the cluster was at a revision, or at the newest one its continuous archive
    /// holds: the state is built off to the side from a verified snapshot of the schedule and
    /// the archive after it, proven against the cluster's recorded hashes, stored beside the
    /// schedule's snapshots and restored in place as a snapshot is
    /// (docs/point-in-time-recovery.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTimeSource>,
}

/// The point a point-in-time recovery goes back to, and where its history is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PointInTimeSource {
    /// The EtcdSnapshotSchedule (same namespace, of this cluster) with `spec.archive`: its
    /// verified snapshots are the bases, its archive the revisions after them.
    #[schemars(length(min = 1, max = 253))]
    pub schedule: String,
    /// The revision to go back to: inside the archive's window (the schedule's
    /// `status.archive.windowStartRevision` to `newestRevision`). Absent: the newest revision
    /// the archive holds (the latest point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision: Option<i64>,
}

/// The snapshot a recovery restores: exactly one of `name` (an EtcdSnapshot of the cluster,
/// `{name: x}` as before), `s3` or `pvc` (a stored snapshot with no EtcdSnapshot object: one
/// taken by another cluster, or whose EtcdSnapshot is gone; the same shapes as
/// `spec.bootstrap.restore.source` of an EtcdCluster, with the exact key or path).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("(has(self.name) ? 1 : 0) + (has(self.s3) ? 1 : 0) + (has(self.pvc) ? 1 : 0) == 1")
        .message(CEL_RECOVERY_SNAPSHOT_ONE_OF),
    validation = Rule::new("!has(self.s3) || (has(self.s3.key) && self.s3.key != '' && !self.s3.key.endsWith('/'))")
        .message(CEL_RESTORE_S3_KEY),
    validation = Rule::new("!has(self.pvc) || (has(self.pvc.subPath) && self.pvc.subPath != '' && !self.pvc.subPath.endsWith('/'))")
        .message(CEL_RESTORE_PVC_SUBPATH),
    validation = Rule::new("!has(self.sha256) || !has(self.name)")
        .message(CEL_RECOVERY_SHA256_INLINE_ONLY),
)]
pub struct RecoverySnapshotSource {
    /// The EtcdSnapshot (same namespace, of this cluster) to restore: Complete, and
    /// `Verified=True` unless `spec.allowUnverifiedSnapshot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// A snapshot in S3: the bucket, the exact object key (not a prefix), the endpoint and the
    /// credentials Secret, as in `spec.bootstrap.restore.source.s3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Location>,
    /// A snapshot file on a PVC of this namespace: the claim and the exact path of the `.db`
    /// file in it, as in `spec.bootstrap.restore.source.pvc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcLocation>,
    /// With `s3` or `pvc`: the sha256 the stored object must have (64 hex digits, optionally
    /// prefixed `sha256:`, e.g. the `status.artifact.checksum` of the EtcdSnapshot that wrote
    /// it). The restore refuses an object with another one before anything is restored.
    /// Without it `spec.allowUnverifiedSnapshot: true` is required, and the restore checks the
    /// checksum stored beside the object (S3 metadata or the `.sha256` file the agent writes),
    /// if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(sha256:)?[0-9a-fA-F]{64}$"), length(max = 71))]
    pub sha256: Option<String>,
}

impl From<LocalReference> for RecoverySnapshotSource {
    /// An EtcdSnapshot by name.
    fn from(r: LocalReference) -> Self {
        Self::named(r.name)
    }
}

impl RecoverySnapshotSource {
    /// An EtcdSnapshot by name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    /// The location of a snapshot given by `s3` or `pvc` (None for an EtcdSnapshot by name),
    /// as the restore of an EtcdMember takes it.
    pub fn location(&self) -> Option<RestoreSource> {
        (self.s3.is_some() || self.pvc.is_some()).then(|| RestoreSource {
            s3: self.s3.clone(),
            pvc: self.pvc.clone(),
        })
    }
}

/// Which member survives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SurvivorSource {
    /// The EtcdMember to rebuild from. Unset: the member with the highest commit index (then
    /// term), i.e. the most committed data; never a learner or a member being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub member: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RecoveryPhase {
    /// Not started: waiting (the cluster is missing, another recovery runs, no survivor
    /// answers yet). Nothing has been changed.
    #[default]
    Pending,
    /// The plan is recorded and the steps are being taken.
    Running,
    Complete,
    Failed,
}

impl RecoveryPhase {
    /// Complete and Failed never change again (a finished recovery is never re-run).
    pub fn is_terminal(self) -> bool {
        matches!(self, RecoveryPhase::Complete | RecoveryPhase::Failed)
    }
}

/// The steps of a recovery, in order (a survivor recovery skips `RestoreSnapshot`, a snapshot
/// recovery skips `ForceNewCluster` and `RestartSurvivor`). `status.step` names the step being
/// taken; it is written before the step acts, and every step can be taken again after an
/// operator restart (each is idempotent).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum RecoveryStep {
    /// Annotate the EtcdCluster ([`RECOVERY_ANNOTATION`]): the cluster controller holds.
    PauseCluster,
    /// Every member dormant: their Pods are deleted, their PVCs kept.
    StopMembers,
    /// The snapshot is restored into one member (its previous data set aside on its PVC), which
    /// starts as a new one-member cluster; the cluster's latched ID follows it.
    RestoreSnapshot,
    /// The survivor's Pod starts with `--force-new-cluster` until etcd lists it alone.
    ForceNewCluster,
    /// The survivor's Pod starts again without the flag.
    RestartSurvivor,
    /// The other EtcdMembers (and their PVCs) are deleted.
    RemoveOthers,
    /// The annotation goes: the cluster controller adds members back as learners, one at a
    /// time, with fresh data.
    ResumeCluster,
    /// Waiting for the cluster to be Available with all its replicas: `Available=True` and
    /// `spec.replicas` live EtcdMembers, each with a Ready Pod.
    WaitAvailable,
}

impl RecoveryStep {
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryStep::PauseCluster => "PauseCluster",
            RecoveryStep::StopMembers => "StopMembers",
            RecoveryStep::RestoreSnapshot => "RestoreSnapshot",
            RecoveryStep::ForceNewCluster => "ForceNewCluster",
            RecoveryStep::RestartSurvivor => "RestartSurvivor",
            RecoveryStep::RemoveOthers => "RemoveOthers",
            RecoveryStep::ResumeCluster => "ResumeCluster",
            RecoveryStep::WaitAvailable => "WaitAvailable",
        }
    }

    /// The step after this one in a survivor recovery (`None` after the last).
    pub fn next(self) -> Option<RecoveryStep> {
        match self {
            RecoveryStep::PauseCluster => Some(RecoveryStep::StopMembers),
            RecoveryStep::RestoreSnapshot => Some(RecoveryStep::RemoveOthers),
            RecoveryStep::StopMembers => Some(RecoveryStep::ForceNewCluster),
            RecoveryStep::ForceNewCluster => Some(RecoveryStep::RestartSurvivor),
            RecoveryStep::RestartSurvivor => Some(RecoveryStep::RemoveOthers),
            RecoveryStep::RemoveOthers => Some(RecoveryStep::ResumeCluster),
            RecoveryStep::ResumeCluster => Some(RecoveryStep::WaitAvailable),
            RecoveryStep::WaitAvailable => None,
        }
    }
}

/// What one member's etcd reported when the plan was made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryCandidate {
    /// The EtcdMember.
    pub name: String,
    /// Its raft term, commit index and MVCC revision: from its running etcd, or (term and
    /// commit index only) from its data dir's write-ahead log when its etcd does not run; unset
    /// when neither could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_term: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_index: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Where its figures came from (its running etcd, or its data dir), or why it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The plan, written before anything is changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryPlan {
    /// The surviving EtcdMember; with a snapshot source, the member the snapshot is restored
    /// into (its previous data is set aside on its PVC, not deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// The EtcdSnapshot restored (snapshot source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Where it is stored (`s3://…` or `pvc://…`) and its checksum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_uri: Option<String>,
    /// The highest revision the cluster is known to have reached before the recovery: what its
    /// members answered and what its EtcdSnapshots recorded (snapshot source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_known_revision: Option<i64>,
    /// etcdutl's `--bump-revision`: `max(highestKnownRevision - revision, 0) + 1000000000`, so
    /// the restored cluster's revisions start above anything a client saw (snapshot source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bump_revision: Option<i64>,
    /// Its etcd member ID (16 hex digits), kept across the recovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<String>,
    /// Its raft term and commit index and its MVCC revision when the plan was made: the
    /// recovered cluster holds exactly what it held. With a snapshot source, `revision` is the
    /// snapshot's (the revision its hashKV was recorded at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_term: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_index: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The cluster ID etcd keeps across `--force-new-cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// Every member considered, with what its etcd reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub candidates: Vec<RecoveryCandidate>,
    /// The EtcdMembers that are deleted with their PVCs and replaced by new, empty members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub discarded_members: Vec<String>,
    /// What will be lost, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
}

/// The outcome of a Complete recovery.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryResult {
    /// The cluster ID etcd answers with afterwards (the same as before for a survivor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// The EtcdMembers replaced by new ones the cluster controller added (every member but the one
    /// the cluster was rebuilt from).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members_re_added: Vec<String>,
    /// Keys in the cluster at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<i64>,
    /// The cluster's MVCC revision at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRecoveryStatus {
    /// Pending → Running → Complete | Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RecoveryPhase>,
    /// The step being taken (recorded before it acts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<RecoveryStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<RecoveryPlan>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<RecoveryResult>,
    /// The UID of the survivor's Pod that ran with `--force-new-cluster` (the one Pod that
    /// must be restarted without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced_pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A point-in-time recovery's build: the base it starts from and, once its Job finished,
    /// the snapshot of the target state it stored (what the restore then uses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTimeStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What a point-in-time recovery built.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PointInTimeStatus {
    /// The verified EtcdSnapshot of the schedule the state is built from.
    pub base: String,
    /// The revision it holds.
    pub base_revision: i64,
    /// The revision rebuilt (for the latest point: the archive's newest when the build ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// How many of the HashKVs the cluster reported inside the replayed range the built state
    /// matched (each at its revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashes_proven: Option<i64>,
    /// The stored snapshot of the built state: the schedule's destination with its exact key,
    /// and its sha256 (the restore checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<RecoverySnapshotSource>,
}
