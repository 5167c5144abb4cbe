//! Types shared by more than one kind: references, storage, snapshot locations, etcd options.
//!
//! CEL rules that concern a single type live on that type; rules that relate sibling subtrees
//! live on the spec that holds them (see `cluster.rs`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// The messages of the CEL rules declared in this file. `api::validate` reports each broken
// rule with the same text, so what the runbook quotes reads the same with the webhook installed.
/// The CEL rule's message: `spec.storage.size` is a quantity.
pub const CEL_STORAGE_SIZE_QUANTITY: &str =
    "spec.storage.size must be a quantity such as 1Gi, 512Mi or a plain number of bytes";

/// The CEL rule's message: A Memory cluster's size is positive.
pub const CEL_MEMORY_SIZE_POSITIVE: &str = "spec.storage.size must be greater than 0 with spec.storage.medium=Memory: it is the tmpfs size limit of each member; set e.g. 256Mi";

/// The CEL rule's message: `spec.storage.size` only grows.
pub const CEL_STORAGE_SHRINK: &str = "spec.storage.size cannot shrink: PVCs only grow; set the previous size or larger, or delete and recreate the cluster";

/// The CEL rule's message: `spec.storage.medium` after create.
pub const CEL_STORAGE_MEDIUM_IMMUTABLE: &str = "spec.storage.medium cannot change after the cluster is created; delete and recreate the cluster to switch between PVC and Memory storage";

/// The CEL rule's message: `spec.storage.storageClassName` after create.
pub const CEL_STORAGE_CLASS_IMMUTABLE: &str = "spec.storage.storageClassName cannot be added, removed or changed after the cluster is created: a PVC's StorageClass is fixed; delete and recreate the cluster";

/// The CEL rule's message: `spec.options.autoCompactionRetention`'s shape.
pub const CEL_COMPACTION_RETENTION: &str = "spec.options.autoCompactionRetention must be a duration such as 1h or 30m, or a non-negative integer";

/// The CEL rule's message: A snapshot destination: one of s3 or pvc.
pub const CEL_DESTINATION_ONE_OF: &str =
    "exactly one of s3 or pvc must be set: choose where the snapshot is stored";

/// The CEL rule's message: A restore source: one of s3 or pvc.
pub const CEL_RESTORE_ONE_OF: &str =
    "exactly one of s3 or pvc must be set: choose where the snapshot to restore is read from";

/// The CEL rule's message: A restore source's exact S3 key.
pub const CEL_RESTORE_S3_KEY: &str = "s3.key must be the exact object key of the snapshot (for example my-etcd/my-etcd-2026-06-02.db, as in the snapshot's status.artifact.uri), not empty and not a prefix";

/// The CEL rule's message: A restore source's exact PVC path.
pub const CEL_RESTORE_PVC_SUBPATH: &str = "pvc.subPath must be the exact path of the snapshot .db file within the volume, not empty and not a directory";

/// A reference to a Secret in the same namespace as the object that holds the reference.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1))]
    pub name: String,
}

impl SecretReference {
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

/// A reference to a named object in the same namespace (used for the cluster an
/// `EtcdSnapshot` targets).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalReference {
    /// Name of the referenced object.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The kinds of cert-manager issuers a Certificate can reference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum IssuerKind {
    #[default]
    Issuer,
    ClusterIssuer,
}

impl IssuerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IssuerKind::Issuer => "Issuer",
            IssuerKind::ClusterIssuer => "ClusterIssuer",
        }
    }
}

pub const CERT_MANAGER_GROUP: &str = "cert-manager.io";

fn default_issuer_group() -> String {
    CERT_MANAGER_GROUP.to_string()
}

/// A reference to a cert-manager `Issuer` (same namespace) or `ClusterIssuer`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuerReference {
    /// Name of the Issuer or ClusterIssuer.
    #[schemars(length(min = 1))]
    pub name: String,
    /// `Issuer` (namespaced, in the cluster's namespace) or `ClusterIssuer`.
    #[serde(default)]
    pub kind: IssuerKind,
    /// API group of the issuer.
    #[serde(default = "default_issuer_group")]
    pub group: String,
}

impl IssuerReference {
    pub fn new(name: impl Into<String>, kind: IssuerKind) -> Self {
        Self {
            name: name.into(),
            kind,
            group: default_issuer_group(),
        }
    }
}

/// Where etcd keeps its data directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StorageMedium {
    /// A PersistentVolumeClaim per member (the default, written as `""`).
    #[default]
    #[serde(rename = "")]
    Default,
    /// A tmpfs `emptyDir` whose lifetime is the Pod's.
    Memory,
}

fn default_storage_size() -> Quantity {
    Quantity("1Gi".to_string())
}

/// Per-member storage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("isQuantity(string(self.size))")
        .message(CEL_STORAGE_SIZE_QUANTITY)
        .field_path(".size"),
    validation = Rule::new("(has(self.medium) && self.medium == 'Memory') ? quantity(string(self.size)).isGreaterThan(quantity('0')) : true")
        .message(CEL_MEMORY_SIZE_POSITIVE)
        .field_path(".size"),
    validation = Rule::new("quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0")
        .message(CEL_STORAGE_SHRINK)
        .field_path(".size"),
    validation = Rule::new("(has(self.medium) ? self.medium : '') == (has(oldSelf.medium) ? oldSelf.medium : '')")
        .message(CEL_STORAGE_MEDIUM_IMMUTABLE)
        .field_path(".medium"),
    validation = Rule::new("has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)")
        .message(CEL_STORAGE_CLASS_IMMUTABLE)
        .field_path(".storageClassName"),
)]
pub struct StorageSpec {
    /// PVC request per member, or the tmpfs size limit with `medium: Memory`. Grows only.
    #[serde(default = "default_storage_size")]
    pub size: Quantity,
    /// `""` (default) for a PVC per member, `Memory` for a tmpfs emptyDir. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub medium: Option<StorageMedium>,
    /// StorageClass of the member PVCs: absent uses the default class, `""` disables dynamic
    /// provisioning. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

impl Default for StorageSpec {
    fn default() -> Self {
        Self {
            size: default_storage_size(),
            medium: None,
            storage_class_name: None,
        }
    }
}

impl StorageSpec {
    pub fn is_memory(&self) -> bool {
        self.medium == Some(StorageMedium::Memory)
    }
}

/// Labels and annotations merged onto every object the operator creates for a cluster.
/// Operator-owned keys win; keys under `etcd-operator.cozystack.io/` are dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The auto-compaction modes etcd understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AutoCompactionMode {
    Periodic,
    Revision,
}

impl AutoCompactionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AutoCompactionMode::Periodic => "periodic",
            AutoCompactionMode::Revision => "revision",
        }
    }
}

/// Regex (RE2 and Rust `regex` compatible) for `autoCompactionRetention` given as a string: an
/// integer (hours for periodic, revisions for revision mode) or a Go duration such as `1h30m`.
pub const RETENTION_PATTERN: &str = r"^([0-9]+|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";

/// The largest `quotaBackendBytes`: 1 TiB. etcd suggests at most 8 GiB and only warns above it
/// (it is advisory), so the bound is far above what a working etcd uses; it catches a value
/// given in the wrong unit and keeps the flag within what etcd parses.
pub const MAX_QUOTA_BACKEND_BYTES: i64 = 1 << 40;
/// The largest `snapshotCount`: 10 million, 1000 times etcd 3.6's default of 10000. etcd keeps
/// that many raft entries in memory between snapshots, so larger values only exhaust memory.
pub const MAX_SNAPSHOT_COUNT: i64 = 10_000_000;

/// etcd server options exposed as flags on every member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdOptions {
    /// `--quota-backend-bytes`: backend size before etcd raises a NOSPACE alarm (0 = etcd default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_QUOTA_BACKEND_BYTES))]
    pub quota_backend_bytes: Option<i64>,
    /// `--auto-compaction-mode`: `periodic` or `revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_mode: Option<AutoCompactionMode>,
    /// `--auto-compaction-retention`: a duration (`1h`, `30m`) or an integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(r"string(self).matches('^([0-9]+|([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$')")
        .message(CEL_COMPACTION_RETENTION))]
    pub auto_compaction_retention: Option<IntOrString>,
    /// `--snapshot-count`: committed transactions before a raft snapshot to disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_SNAPSHOT_COUNT))]
    pub snapshot_count: Option<i64>,
}

/// An S3 (or S3-compatible) location.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.credentialsSecretRef) || !has(self.webIdentity)")
    .message(super::CEL_S3_ONE_CREDENTIAL))]
pub struct S3Location {
    /// Endpoint URL, e.g. `https://s3.example.com`; empty for AWS S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Bucket name.
    #[schemars(length(min = 1))]
    pub bucket: String,
    /// For a snapshot destination, an optional key prefix (the agent appends `<name>.db`);
    /// for a restore source, the exact object key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Region (default `us-east-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Path-style addressing (MinIO and Ceph usually need it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_path_style: Option<bool>,
    /// Secret with the keys `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`. Without it, the
    /// Pod that reads or writes the object uses the standard AWS credential chain
    /// (docs/cloud-identity.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretReference>,
    /// The ServiceAccount the snapshot, verify and restore Pods of this location run under, for
    /// cloud identity (EKS IRSA or Pod Identity, `webIdentity`); the namespace's `default` when
    /// unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::service_account_name_schema")]
    pub service_account_name: Option<String>,
    /// An assumed role: a projected token of `serviceAccountName` exchanged at STS
    /// (`AssumeRoleWithWebIdentity`) for temporary credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_identity: Option<super::S3WebIdentity>,
}

/// A location on a PersistentVolumeClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcLocation {
    /// Name of the PVC in the same namespace.
    #[schemars(length(min = 1))]
    pub claim_name: String,
    /// For a snapshot destination, an optional directory; for a restore source, the exact path of
    /// the `.db` file within the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
}

/// Where a snapshot is written (an `EtcdSnapshot` destination). Exactly one of `s3` / `pvc`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.s3) != has(self.pvc)")
    .message(CEL_DESTINATION_ONE_OF))]
pub struct SnapshotDestination {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Location>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcLocation>,
}

/// Where a snapshot is read from at restore. Exactly one of `s3` / `pvc`, with an exact locator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.s3) != has(self.pvc)")
        .message(CEL_RESTORE_ONE_OF),
    validation = Rule::new("!has(self.s3) || (has(self.s3.key) && self.s3.key != '' && !self.s3.key.endsWith('/'))")
        .message(CEL_RESTORE_S3_KEY),
    validation = Rule::new("!has(self.pvc) || (has(self.pvc.subPath) && self.pvc.subPath != '' && !self.pvc.subPath.endsWith('/'))")
        .message(CEL_RESTORE_PVC_SUBPATH),
)]
pub struct RestoreSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Location>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcLocation>,
}
