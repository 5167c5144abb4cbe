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
}
