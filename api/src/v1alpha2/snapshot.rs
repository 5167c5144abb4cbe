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
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
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
