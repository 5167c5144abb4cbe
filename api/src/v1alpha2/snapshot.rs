//! `EtcdSnapshot`: a one-shot snapshot of a cluster to S3 or a PVC. The spec is immutable.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{LocalReference, SnapshotDestination};

// The messages of the CEL rules declared in this file. `api::validate` reports each broken
// rule with the same text, so what the runbook quotes reads the same with the webhook installed.
/// The CEL rule's message: An EtcdSnapshot's spec after create.
pub const CEL_SNAPSHOT_IMMUTABLE: &str = "EtcdSnapshot spec is immutable: a snapshot is taken once; create a new EtcdSnapshot with another name instead";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "etcd-operator.cozystack.io",
    version = "v1alpha2",
    kind = "EtcdSnapshot",
    plural = "etcdsnapshots",
    namespaced,
    status = "EtcdSnapshotStatus",
    derive = "PartialEq",
    doc = "A one-shot snapshot of an EtcdCluster stored in S3 or on a PVC.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Verified",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Verified\")].status"
    ),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".status.artifact.sizeBytes"
    ),
    printcolumn(
        name = "Completed",
        type_ = "date",
        json_path = ".status.completionTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    shortname = "esnap",
    category = "etcd"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message(CEL_SNAPSHOT_IMMUTABLE))]
pub struct EtcdSnapshotSpec {
    /// The EtcdCluster (same namespace) to snapshot.
    pub cluster_ref: LocalReference,
    /// Where the snapshot is stored.
    pub destination: SnapshotDestination,
    /// Verify the snapshot once it is Complete (default true): a Job reads the stored object
    /// back, checks its sha256, restores it into scratch space with the cluster's own etcdutl
    /// and compares its `hashkv` with what the cluster reported at save time; the result is
    /// the `Verified` condition and `status.verification`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
}

impl EtcdSnapshot {
    /// The incarnation of its cluster the snapshot records it was taken of.
    pub fn origin(&self) -> SnapshotOrigin {
        let status = self.status.as_ref();
        SnapshotOrigin {
            cluster_uid: status.and_then(|s| s.cluster_uid.clone()),
            cluster_id: status.and_then(|s| s.cluster_id.clone()),
            created: self.metadata.creation_timestamp.clone(),
        }
    }
}

impl EtcdSnapshotSpec {
    /// Whether the snapshot is verified once Complete (`spec.verify`, default true).
    pub fn verify(&self) -> bool {
        self.verify.unwrap_or(true)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SnapshotPhase {
    #[default]
    Pending,
    Started,
    Complete,
    Failed,
}

impl SnapshotPhase {
    /// Complete and Failed never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, SnapshotPhase::Complete | SnapshotPhase::Failed)
    }
}

/// The stored snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotArtifact {
    /// `s3://<bucket>/<key>` or `pvc://<claim>/<path>`.
    pub uri: String,
    pub size_bytes: i64,
    /// `sha256:<hex>`.
    pub checksum: String,
}

/// What the snapshotted member reported for `HashKV` at a revision the snapshot holds, taken
/// by the snapshot agent just before the save (on the member the save then streamed from).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordedHashKv {
    /// The revision hashed: the member's revision when the save began (the snapshot holds it).
    pub revision: i64,
    /// etcd's `HashKV` (a CRC-32C of the key-value history up to `revision`).
    pub hash: i64,
    /// The compaction revision the hash was computed over (hashes are comparable only at the
    /// same compaction).
    pub compact_revision: i64,
}

/// A successful verification of the stored snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotVerification {
    /// When the verification Job reported.
    pub verified_at: Time,
    /// The revision whose `hashkv` the restored copy matched.
    pub revision: i64,
    /// That `hashkv`.
    pub hash: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<SnapshotPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<SnapshotArtifact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The cluster's `hashkv` recorded at save time (what verification compares against);
    /// absent when the agent could not record it.
    #[serde(default, rename = "hashKV", skip_serializing_if = "Option::is_none")]
    pub hash_kv: Option<RecordedHashKv>,
    /// The last successful verification (the `Verified` condition says whether one ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<SnapshotVerification>,
    /// The UID of the EtcdCluster the snapshot was taken of, recorded when its Job was created
    /// (not in the reference API). A cluster deleted and created again under the same name is
    /// another object with another UID: an EtcdRecovery by name and auto-recovery restore only a
    /// snapshot of the cluster's own incarnation. Absent on snapshots saved before the operator
    /// recorded it: those count as the cluster's only if created after it.
    #[serde(
        default,
        rename = "clusterUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_uid: Option<String>,
    /// The etcd cluster ID (16 lowercase hex digits, the cluster's `status.clusterID`) of the
    /// cluster the snapshot was taken of, as latched when its Job was created or, for a cluster
    /// that had not formed yet, when the snapshot completed (not in the reference API).
    #[serde(default, rename = "clusterID", skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
}

impl EtcdSnapshotStatus {
    /// The `Verified` condition: `Some(true)` verified, `Some(false)` shown bad or not
    /// verifiable, `None` not decided (being verified, or never asked for).
    pub fn verified(&self) -> Option<bool> {
        let c = self
            .conditions
            .iter()
            .find(|c| c.type_ == crate::conditions::snapshot::VERIFIED)?;
        match c.status.as_str() {
            "True" => Some(true),
            "False" => Some(false),
            _ => None,
        }
    }

    /// Whether a verification is under way (`Verified=Unknown`).
    pub fn verifying(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == crate::conditions::snapshot::VERIFIED && c.status == "Unknown")
    }
}

/// Which incarnation of its EtcdCluster a snapshot was taken of, as the snapshot records it: an
/// EtcdCluster deleted and created again under the same name (the way to change an immutable
/// field) is another object, with another UID and another etcd cluster ID, and must never be
/// rolled back to its predecessor's data by an EtcdRecovery that names the snapshot or by
/// auto-recovery.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotOrigin {
    /// `status.clusterUID`.
    pub cluster_uid: Option<String>,
    /// `status.clusterID`.
    pub cluster_id: Option<String>,
    /// The EtcdSnapshot's `metadata.creationTimestamp` (its Job starts after it). Not
    /// `status.startTime`: a rollback to the reference operator prunes that, never this.
    pub created: Option<Time>,
}

impl SnapshotOrigin {
    /// Whether the snapshot was taken of the EtcdCluster whose UID is `uid`, created at
    /// `created`: it records that UID; or it records none (taken before the operator recorded
    /// it, or the record was pruned by a rollback to the reference operator) and the EtcdSnapshot
    /// was created strictly after that cluster — two EtcdClusters of one name never exist at
    /// once, so a Job started since this one's creation saved this one. Anything else, a missing
    /// timestamp included, is not known to be this cluster's.
    pub fn is_of(&self, uid: &str, created: Option<&Time>) -> bool {
        if uid.is_empty() {
            return false;
        }
        match (&self.cluster_uid, &self.created, created) {
            (Some(recorded), _, _) => recorded == uid,
            (None, Some(snapshot), Some(cluster)) => snapshot > cluster,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Option<Time> {
        Timestamp::from_second(1_700_000_000 + s).ok().map(Time)
    }

    #[test]
    fn a_snapshot_is_a_clusters_by_its_recorded_uid_else_only_if_created_after_the_cluster() {
        let recorded = |uid: &str| SnapshotOrigin {
            cluster_uid: Some(uid.into()),
            created: at(-100),
            ..Default::default()
        };
        // The record decides, whatever the times.
        assert!(recorded("u1").is_of("u1", at(0).as_ref()));
        assert!(!recorded("u0").is_of("u1", at(-200).as_ref()));
        // Taken before the operator recorded it: only a snapshot created after the cluster
        // (strictly: timestamps are whole seconds) saved this cluster.
        let unrecorded = |created| SnapshotOrigin {
            created,
            ..Default::default()
        };
        assert!(unrecorded(at(1)).is_of("u1", at(0).as_ref()));
        assert!(!unrecorded(at(0)).is_of("u1", at(0).as_ref()));
        assert!(!unrecorded(at(-1)).is_of("u1", at(0).as_ref()));
        // Not known: refused.
        assert!(!unrecorded(None).is_of("u1", at(0).as_ref()));
        assert!(!unrecorded(at(1)).is_of("u1", None));
        assert!(!recorded("").is_of("", None));
    }
}
