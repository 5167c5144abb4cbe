//! `EtcdCluster`: the user-facing kind. Its spec carries every CEL rule that relates sibling
//! subtrees (replicas vs. medium, auth vs. tls, immutability of tls/auth/bootstrap).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    AdditionalMetadata, EtcdOptions, IssuerReference, RestoreSource, SecretReference, StorageSpec,
};

// The messages of the CEL rules declared in this file. `api::validate` reports each broken
// rule with the same text, so what the runbook quotes reads the same with the webhook installed.
/// The CEL rule's message: The name rule on the EtcdCluster root.
pub const CEL_CLUSTER_NAME: &str = "metadata.name must be a DNS-1035 label of at most 56 characters (lowercase letters, digits and '-', starting with a letter, ending with a letter or digit): the operator names Services <name> and <name>-client and Pods <name>-xxxxx after the cluster, and those names are DNS labels of at most 63 characters; choose a name such as my-etcd";

/// The CEL rule's message: `spec.replicas: 0` with Memory storage.
pub const CEL_MEMORY_PAUSE: &str = "spec.replicas=0 with spec.storage.medium=Memory is unsupported: a paused member's tmpfs data is lost, so the cluster could not resume; keep replicas >= 1, or delete the cluster to tear it down";

/// The CEL rule's message: A restore into Memory storage.
pub const CEL_MEMORY_RESTORE: &str = "spec.bootstrap.restore is unsupported with spec.storage.medium=Memory: a restored tmpfs seed would lose the data on its first restart; use PVC storage for a restored cluster";

/// The CEL rule's message: Root auth without client TLS.
pub const CEL_AUTH_NEEDS_CLIENT_TLS: &str = "spec.auth.enabled requires spec.tls.client: root credentials must not cross the network in plaintext; configure spec.tls.client or set auth.enabled=false";

/// The CEL rule's message: Root auth without its credentials Secret.
pub const CEL_AUTH_NEEDS_SECRET: &str = "spec.auth.enabled requires spec.auth.rootCredentialsSecretRef: name a kubernetes.io/basic-auth Secret holding the root username and password";

/// The CEL rule's message: `spec.tls` after create (the runbook quotes this text).
pub const CEL_TLS_IMMUTABLE: &str = "spec.tls cannot be added to or removed from an existing cluster; delete and recreate the cluster to change TLS (it cannot be changed in place either)";

/// The CEL rule's message: `spec.auth` after create.
pub const CEL_AUTH_IMMUTABLE: &str = "spec.auth cannot be added to, removed from or changed on an existing cluster; delete and recreate the cluster to change authentication";

/// The CEL rule's message: `spec.bootstrap` after create.
pub const CEL_BOOTSTRAP_IMMUTABLE: &str = "spec.bootstrap cannot be added to, removed from or changed on an existing cluster: restore happens only at first bootstrap; create a new cluster to restore";

/// The CEL rule's message: The upgrade path of `spec.version` ([`VERSION_UPGRADE_RULE`]).
pub const CEL_VERSION_UPGRADE: &str = "spec.version may only move as etcd upgrades: a patch upgrade within the minor version (3.6.1 to 3.6.4) or to the next minor version (3.5.x to 3.6.y); etcd does not support skipping a minor version, and a downgrade (even of the patch) needs etcd's downgrade API, which the operator does not drive; set an allowed version";

/// The CEL rule's message: `spec.tls.client`: one source.
pub const CEL_CLIENT_TLS_SOURCE: &str = "spec.tls.client needs exactly one of serverSecretRef (your own Secret) or certManager (operator-emitted Certificates)";

/// The CEL rule's message: An operator client Secret with cert-manager.
pub const CEL_OPERATOR_CLIENT_WITH_CERT_MANAGER: &str = "spec.tls.client.operatorClientSecretRef cannot be combined with certManager; use certManager.operatorClientIssuerRef for an operator client certificate";

/// The CEL rule's message: `spec.tls.peer`: one source.
pub const CEL_PEER_TLS_SOURCE: &str = "spec.tls.peer needs exactly one of secretRef (your own Secret) or certManager (an operator-emitted Certificate)";

pub const DEFAULT_REPLICAS: i32 = 3;
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// The most members a cluster may ask for. etcd advises 3, 5 or 7 (the webhook warns above 7):
/// every write waits for a majority and the leader replicates to every member, so no useful etcd
/// cluster comes near this. The bound catches typos (`1000` for `10`) and, above all, keeps the
/// value within the `int32` the operator decodes, which Kubernetes before 1.36 does not enforce.
pub const MAX_REPLICAS: i32 = 99;
/// The longest progress deadline: 30 days. A target that takes longer than that is not making
/// progress; the bound also keeps `now + deadline` far inside every clock's range.
pub const MAX_PROGRESS_DEADLINE_SECONDS: i32 = 30 * 24 * 60 * 60;
/// The longest EtcdCluster name: the client Service `<name>-client` must fit a DNS-1035 label
/// (63 characters), and so must the members' Pod names `<name>-xxxxx`.
pub const CLUSTER_NAME_MAX_LEN: usize = 56;
/// A DNS-1035 label (Service names are): a lowercase letter first, then `[a-z0-9-]`, alphanumeric last.
pub const CLUSTER_NAME_PATTERN: &str = r"^[a-z]([-a-z0-9]*[a-z0-9])?$";
/// `X.Y.Z`; the image tag is `v<version>`. Each part has at most 9 digits, so it is a number
/// both CEL's `int()` and Rust read without overflow (the upgrade-path rule compares them).
pub const VERSION_PATTERN: &str = r"^[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}$";
/// The longest `X.Y.Z` the pattern admits (three 9-digit parts and two dots); the schema's
/// `maxLength`, which also bounds the cost the apiserver estimates for the CEL rules.
pub const VERSION_MAX_LEN: usize = 29;

/// The CEL transition rule for `spec.version` (see [`crate::validate::version_upgrade`]): same
/// major; the next minor, or the same minor with a patch not lower. Written for Kubernetes 1.29's
/// CEL (no semver library, no `cel.bind`): `split` and `int()` on parts the pattern keeps to nine
/// digits. A stored version that does not match the pattern (an object from older rules) is not
/// judged by this rule.
pub const VERSION_UPGRADE_RULE: &str = concat!(
    "self.version == oldSelf.version",
    " || !oldSelf.version.matches('^[0-9]{1,9}\\\\.[0-9]{1,9}\\\\.[0-9]{1,9}$')",
    " || !self.version.matches('^[0-9]{1,9}\\\\.[0-9]{1,9}\\\\.[0-9]{1,9}$')",
    " || (int(self.version.split('.')[0]) == int(oldSelf.version.split('.')[0])",
    " && (int(self.version.split('.')[1]) == int(oldSelf.version.split('.')[1]) + 1",
    " || (int(self.version.split('.')[1]) == int(oldSelf.version.split('.')[1])",
    " && int(self.version.split('.')[2]) >= int(oldSelf.version.split('.')[2]))))",
);

fn default_replicas() -> i32 {
    DEFAULT_REPLICAS
}

fn default_progress_deadline_seconds() -> i32 {
    DEFAULT_PROGRESS_DEADLINE_SECONDS
}

/// Desired state of an etcd cluster.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "etcd-operator.cozystack.io",
    version = "v1alpha2",
    kind = "EtcdCluster",
    plural = "etcdclusters",
    namespaced,
    status = "EtcdClusterStatus",
    derive = "PartialEq",
    doc = "An etcd cluster managed by the operator.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.readyMembers",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyMembers"),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    // `-o wide`.
    printcolumn(
        name = "Cluster ID",
        type_ = "string",
        json_path = ".status.clusterID",
        priority = 1
    ),
    printcolumn(
        name = "Leader",
        type_ = "string",
        json_path = ".status.leader",
        priority = 1
    ),
    shortname = "ec",
    category = "etcd",
    validation = Rule::new("!has(self.metadata.name) || (self.metadata.name.size() <= 56 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$'))")
        .message(CEL_CLUSTER_NAME)
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!(self.replicas == 0 && has(self.storage.medium) && self.storage.medium == 'Memory')")
        .message(CEL_MEMORY_PAUSE)
        .field_path(".replicas"),
    validation = Rule::new("!has(self.bootstrap) || !has(self.bootstrap.restore) || !has(self.storage.medium) || self.storage.medium != 'Memory'")
        .message(CEL_MEMORY_RESTORE)
        .field_path(".bootstrap"),
    validation = Rule::new("!has(self.auth) || !has(self.auth.enabled) || !self.auth.enabled || (has(self.tls) && has(self.tls.client))")
        .message(CEL_AUTH_NEEDS_CLIENT_TLS)
        .field_path(".auth"),
    validation = Rule::new("!has(self.auth) || !has(self.auth.enabled) || !self.auth.enabled || has(self.auth.rootCredentialsSecretRef)")
        .message(CEL_AUTH_NEEDS_SECRET)
        .field_path(".auth"),
    validation = Rule::new("has(self.tls) == has(oldSelf.tls) && (!has(self.tls) || self.tls == oldSelf.tls)")
        .message(CEL_TLS_IMMUTABLE)
        .field_path(".tls"),
    validation = Rule::new("has(self.auth) == has(oldSelf.auth) && (!has(self.auth) || self.auth == oldSelf.auth)")
        .message(CEL_AUTH_IMMUTABLE)
        .field_path(".auth"),
    validation = Rule::new("has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)")
        .message(CEL_BOOTSTRAP_IMMUTABLE)
        .field_path(".bootstrap"),
    validation = Rule::new(VERSION_UPGRADE_RULE)
        .message(CEL_VERSION_UPGRADE)
        .field_path(".version"),
)]
pub struct EtcdClusterSpec {
    /// Number of members. `0` pauses the cluster (one dormant member keeps the data).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub replicas: i32,
    /// etcd version `X.Y.Z`; the member image is `<repository>:v<version>`. On update it may
    /// only move as etcd upgrades: a patch upgrade, or to the next minor version.
    #[schemars(regex(pattern = r"^[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}$"), length(max = VERSION_MAX_LEN))]
    pub version: String,
    /// Per-member storage.
    #[serde(default)]
    pub storage: StorageSpec,
    /// Seconds the operator may spend reaching a new target before it gives up
    /// (`BootstrapFailed` / `DeadlineExceeded`).
    #[serde(default = "default_progress_deadline_seconds")]
    #[schemars(range(min = 1, max = MAX_PROGRESS_DEADLINE_SECONDS))]
    pub progress_deadline_seconds: i32,
    /// TLS for the client (2379) and peer (2380) listeners. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    /// Root authentication. Immutable; requires `tls.client`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSpec>,
    /// How the cluster is first bootstrapped (restore from a snapshot). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<BootstrapSpec>,
    /// Resources of the etcd container (default requests 100m CPU / 128Mi memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Affinity of every member Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Topology spread constraints of every member Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Labels and annotations merged onto every object the operator creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_metadata: Option<AdditionalMetadata>,
    /// etcd server options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<EtcdOptions>,
    /// Pull secrets for the etcd image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Tolerations of every member Pod, as in a PodSpec: let the members run on tainted
    /// (dedicated) nodes. A change rolls the members one at a time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::v1alpha2::placement::tolerations_schema")]
    pub tolerations: Vec<Toleration>,
    /// Node labels every member Pod requires, as in a PodSpec. A change rolls the members one
    /// at a time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::v1alpha2::placement::node_selector_schema")]
    pub node_selector: BTreeMap<String, String>,
    /// The PriorityClass of every member Pod, as in a PodSpec (e.g. one that protects etcd
    /// from preemption). A change rolls the members one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::v1alpha2::placement::priority_class_name_schema")]
    pub priority_class_name: Option<String>,
}

impl Default for EtcdClusterSpec {
    fn default() -> Self {
        Self {
            replicas: DEFAULT_REPLICAS,
            version: String::new(),
            storage: StorageSpec::default(),
            progress_deadline_seconds: DEFAULT_PROGRESS_DEADLINE_SECONDS,
            tls: None,
            auth: None,
            bootstrap: None,
            resources: None,
            affinity: None,
            topology_spread_constraints: Vec::new(),
            additional_metadata: None,
            options: None,
            image_pull_secrets: Vec::new(),
            tolerations: Vec::new(),
            node_selector: BTreeMap::new(),
            priority_class_name: None,
        }
    }
}

impl EtcdClusterSpec {
    /// The client listener (2379) serves TLS.
    pub fn client_tls(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.client.is_some())
    }

    /// The peer listener (2380) serves (mutual) TLS.
    pub fn peer_tls(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.peer.is_some())
    }
}

impl EtcdCluster {
    /// The members run etcd's `--peer-auto-tls` (a cluster adopted from the aenix operator, see
    /// [`crate::labels::PEER_AUTO_TLS_ANNOTATION`]) and no peer Secret is configured.
    pub fn peer_auto_tls(&self) -> bool {
        !self.spec.peer_tls() && crate::labels::peer_auto_tls(kube::ResourceExt::annotations(self))
    }

    /// The peer URLs are `https://`: peer TLS from Secrets, or peer auto-TLS.
    pub fn peer_https(&self) -> bool {
        self.spec.peer_tls() || self.peer_auto_tls()
    }
}

/// TLS for the two etcd listeners; each is optional and independent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Client listener (2379). mTLS when an operator-client source is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientTlsSpec>,
    /// Peer listener (2380); always mutual.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerTlsSpec>,
}

/// Client-listener TLS: BYO Secrets or cert-manager, never both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.serverSecretRef) != has(self.certManager)")
        .message(CEL_CLIENT_TLS_SOURCE),
    validation = Rule::new("!(has(self.operatorClientSecretRef) && has(self.certManager))")
        .message(CEL_OPERATOR_CLIENT_WITH_CERT_MANAGER)
        .field_path(".operatorClientSecretRef"),
)]
pub struct ClientTlsSpec {
    /// Secret with `tls.crt`, `tls.key` and `ca.crt` for the client listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_secret_ref: Option<SecretReference>,
    /// Secret with the operator's client certificate (`tls.crt`, `tls.key`); enables mTLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_client_secret_ref: Option<SecretReference>,
    /// Have the operator emit cert-manager Certificates instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<ClientCertManagerSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertManagerSpec {
    /// Issuer of the `<cluster>-server` Certificate.
    pub server_issuer_ref: IssuerReference,
    /// Issuer of the `<cluster>-operator-client` Certificate; enables mTLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_client_issuer_ref: Option<IssuerReference>,
}

/// Peer-listener TLS: BYO Secret or cert-manager, never both.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.secretRef) != has(self.certManager)")
    .message(CEL_PEER_TLS_SOURCE))]
pub struct PeerTlsSpec {
    /// Secret with `tls.crt`, `tls.key` and `ca.crt` for the peer listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<PeerCertManagerSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeerCertManagerSpec {
    /// Issuer of the `<cluster>-peer` Certificate.
    pub issuer_ref: IssuerReference,
}

/// Single-user root authentication.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    /// Enable etcd authentication once the cluster has converged.
    #[serde(default)]
    pub enabled: bool,
    /// A `kubernetes.io/basic-auth` Secret (`username`, `password`) for the root user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_credentials_secret_ref: Option<SecretReference>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// Initialise the seed's data directory from a snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    pub source: RestoreSource,
}

/// The target the operator locked in (see the locking pattern): a snapshot of every spec field
/// that members are built from, taken when the operator starts working towards it. Members are
/// created from this snapshot, never from `spec` directly, so an edit made while a target is in
/// flight waits until that target is reached (or its deadline passes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedSpec {
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Absent only in a snapshot written by an operator version that latched replicas and
    /// version alone (see [`ObservedSpec::is_legacy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<EtcdOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_metadata: Option<AdditionalMetadata>,
    // Placement. Unset ones are not written, so a target without them reads (and hashes) as
    // one written before they existed: an operator upgrade restarts no member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// The `metadata.generation` this target was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

impl ObservedSpec {
    /// The snapshot of `spec` (and the generation it was taken from) that the locking pattern
    /// latches.
    pub fn of(spec: &EtcdClusterSpec, generation: Option<i64>) -> Self {
        Self {
            replicas: spec.replicas,
            version: spec.version.clone(),
            storage: Some(spec.storage.clone()),
            resources: spec.resources.clone(),
            options: spec.options.clone(),
            affinity: spec.affinity.clone(),
            topology_spread_constraints: spec.topology_spread_constraints.clone(),
            image_pull_secrets: spec.image_pull_secrets.clone(),
            additional_metadata: spec.additional_metadata.clone(),
            tolerations: spec.tolerations.clone(),
            node_selector: spec.node_selector.clone(),
            priority_class_name: spec.priority_class_name.clone(),
            generation,
        }
    }

    /// Written by an operator version that latched only replicas and version (it built members
    /// from the live spec for every other field): it has no `storage`, which every snapshot
    /// taken now has.
    pub fn is_legacy(&self) -> bool {
        self.storage.is_none()
    }

    /// Whether two snapshots ask for the same target: every latched field equal (the generation
    /// it was taken from does not count), compared by meaning rather than spelling: the
    /// reference operator latches an unset `resources` as `{}` and writes quantities in
    /// canonical form (`1Gi` for `1073741824`), and a cluster it latched must not look edited.
    pub fn same_target(&self, other: &Self) -> bool {
        self.normalized() == other.normalized()
    }

    fn normalized(&self) -> Self {
        let mut n = Self {
            generation: None,
            ..self.clone()
        };
        if n.resources
            .as_ref()
            .is_some_and(|r| *r == ResourceRequirements::default())
        {
            n.resources = None;
        }
        // An empty name asks for the default priority, as no name does.
        if n.priority_class_name.as_deref() == Some("") {
            n.priority_class_name = None;
        }
        if let Some(storage) = n.storage.as_mut() {
            if let Some(bytes) = crate::quantity::to_bytes(&storage.size) {
                storage.size = Quantity(bytes.to_string());
            }
        }
        n
    }

    /// The storage this target asks for (a legacy snapshot's caller fills it from the spec).
    pub fn storage(&self) -> StorageSpec {
        self.storage.clone().unwrap_or_default()
    }
}

/// Observed state of an etcd cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// Members whose Pod is Ready.
    #[serde(default)]
    pub ready_members: i32,
    /// Label selector of the member Pods (scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// etcd cluster ID, 16 lowercase hex digits, latched at bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "clusterID")]
    pub cluster_id: Option<String>,
    /// `--initial-cluster-token`, `<namespace>-<name>-<uid>`, latched on the first reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_token: Option<String>,
    /// Whether etcd authentication has been enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_enabled: Option<bool>,
    /// The locked target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<ObservedSpec>,
    /// When the operator stops trying to reach `observed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<Time>,
    /// Members the operator considers broken.
    #[serde(default)]
    pub broken_members: i32,
    /// When the current outage began: the first time the operator rendered `Available=False`
    /// with reason `QuorumLost` or `AllMembersLost` for it (kept while an EtcdRecovery holds the
    /// cluster; cleared once a majority is ready again, or while the cluster is paused or
    /// unavailable for another reason). The grace before `AllMembersLost` is said and before an
    /// automatic recovery starts counts from here, not from the condition's
    /// `lastTransitionTime` (which does not move when only the reason changes, e.g. from
    /// `Paused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_lost_since: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Each member as etcd itself reports it (its Maintenance Status answer and the alarm
    /// list), sorted by name. Informational: the operator decides nothing from it. Written when
    /// a role, readiness, version, ID, term or alarm changes; the raft index and the database
    /// sizes alone at most every 30 seconds, once they moved far (docs/observability.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<ClusterMemberStatus>,
    /// The name of the member etcd reports as its leader, when one is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
}

/// One member as etcd itself reports it (`status.members[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMemberStatus {
    /// The member's name (its EtcdMember's, and etcd's `--name`).
    pub name: String,
    /// etcd's member ID, 16 lowercase hex digits (as `etcdctl member list -w table` prints it).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "memberID")]
    pub member_id: Option<String>,
    /// `Leader`, `Follower` or `Learner`; absent while the member does not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<MemberRole>,
    /// The member's Pod is Ready and the member answered the operator's status call.
    #[serde(default)]
    pub ready: bool,
    /// The etcd server version the member reports (`3.6.5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// etcd's `dbSize`: bytes allocated by the backend file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size: Option<i64>,
    /// etcd's `dbSizeInUse`: the bytes of `dbSize` holding live data (the rest a
    /// defragmentation gives back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size_in_use: Option<i64>,
    /// The raft log index the member has reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_index: Option<i64>,
    /// The raft term the member is in (it grows with each election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_term: Option<i64>,
    /// The alarms etcd has raised for this member: `NOSPACE`, `CORRUPT`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<String>,
}

/// A member's part in raft, as etcd reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MemberRole {
    Leader,
    Follower,
    /// A non-voting member catching up before its promotion.
    Learner,
}
