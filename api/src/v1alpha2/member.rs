//! `EtcdMember`: one per etcd member, created and owned by the operator. Owns the member's Pod
//! and PVC. Users read these; they should not edit them.

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster::{RestoreSpec, TlsSpec};
use super::common::{AdditionalMetadata, EtcdOptions, SecretReference, StorageSpec};

/// Desired state of one etcd member, copied from its cluster's locked spec at creation.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "etcd-operator.cozystack.io",
    version = "v1alpha2",
    kind = "EtcdMember",
    plural = "etcdmembers",
    namespaced,
    status = "EtcdMemberStatus",
    derive = "PartialEq",
    doc = "One member of an etcd cluster. Created and owned by the operator.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterName"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Running", type_ = "string", json_path = ".status.version"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    category = "etcd"
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdMemberSpec {
    /// The EtcdCluster this member belongs to.
    pub cluster_name: String,
    /// etcd version `X.Y.Z` of this member's Pod.
    pub version: String,
    #[serde(default)]
    pub storage: StorageSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_metadata: Option<AdditionalMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<EtcdOptions>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// True for the seed: the first member, started with `--initial-cluster-state=new` while
    /// the cluster has not formed.
    #[serde(default)]
    pub bootstrap: bool,
    /// `--initial-cluster`; empty while the member is pending (no Pod yet). Written even when
    /// empty: the reference operator's schema requires it, so a rollback can still update a
    /// pending member.
    #[serde(default)]
    pub initial_cluster: String,
    /// `--initial-cluster-token`; always written (required by the reference's schema).
    #[serde(default)]
    pub cluster_token: String,
    /// A paused cluster's last member: no Pod, PVC kept.
    #[serde(default)]
    pub dormant: bool,
    /// TLS material resolved from the cluster's spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<MemberTls>,
    /// Snapshot to restore the data directory from (seed of a restored cluster only); the same
    /// shape as the cluster's `spec.bootstrap.restore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,
    /// Pods this member runs: 1, or 0 while dormant. Carried for wire compatibility with the
    /// reference operator's EtcdMembers; this operator reads `dormant`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub replicas: Option<i32>,
}

/// The Secrets a member Pod mounts, resolved from the cluster's `spec.tls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberTls {
    /// Secret (`tls.crt`, `tls.key`, `ca.crt`) for the client listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_server_secret_ref: Option<SecretReference>,
    /// Whether clients must present a certificate (`--client-cert-auth`).
    #[serde(default, rename = "clientMTLS")]
    pub client_mtls: bool,
    /// Secret (`tls.crt`, `tls.key`, `ca.crt`) for the peer listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_secret_ref: Option<SecretReference>,
    /// etcd's self-signed peer certificates (`--peer-auto-tls`), when no peer Secret is given.
    #[serde(default, rename = "peerAutoTLS")]
    pub peer_auto_tls: bool,
}

impl MemberTls {
    /// The member view of a cluster's BYO-Secret TLS: the server and peer Secrets the Pod mounts,
    /// and mTLS on the client listener when the operator has a client identity. cert-manager
    /// sources are not resolved here (their Secrets are named by the Certificates); `None` when
    /// neither listener uses a Secret of the user's.
    pub fn from_cluster(tls: Option<&TlsSpec>) -> Option<Self> {
        let tls = tls?;
        let client = tls.client.as_ref();
        let member = Self {
            client_server_secret_ref: client.and_then(|c| c.server_secret_ref.clone()),
            client_mtls: client.is_some_and(|c| c.operator_client_secret_ref.is_some()),
            peer_secret_ref: tls.peer.as_ref().and_then(|p| p.secret_ref.clone()),
            peer_auto_tls: false,
        };
        (member.client_server_secret_ref.is_some() || member.peer_secret_ref.is_some())
            .then_some(member)
    }
}

/// Observed state of one etcd member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdMemberStatus {
    /// etcd member ID, 16 lowercase hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "memberID")]
    pub member_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "podUID")]
    pub pod_uid: Option<String>,
    /// True once the member is a voter (promoted from learner).
    #[serde(default)]
    pub is_voter: bool,
    /// `data-<member>`, absent for Memory members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_name: Option<String>,
    /// The etcd version the member reports running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Pods running for this member (0 or 1); carried for wire compatibility with the
    /// reference operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label selector of this member's Pod; carried for wire compatibility with the reference
    /// operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1alpha2::{ClientTlsSpec, PeerTlsSpec};

    #[test]
    fn member_tls_follows_the_clusters_byo_secrets() {
        assert_eq!(MemberTls::from_cluster(None), None);
        let full = TlsSpec {
            client: Some(ClientTlsSpec {
                server_secret_ref: Some(SecretReference::new("s")),
                operator_client_secret_ref: Some(SecretReference::new("o")),
                cert_manager: None,
            }),
            peer: Some(PeerTlsSpec {
                secret_ref: Some(SecretReference::new("p")),
                cert_manager: None,
            }),
        };
        assert_eq!(
            MemberTls::from_cluster(Some(&full)),
            Some(MemberTls {
                client_server_secret_ref: Some(SecretReference::new("s")),
                client_mtls: true,
                peer_secret_ref: Some(SecretReference::new("p")),
                peer_auto_tls: false,
            })
        );
        // Server TLS only: no client certificate is required.
        let server_only = TlsSpec {
            client: Some(ClientTlsSpec {
                server_secret_ref: Some(SecretReference::new("s")),
                ..Default::default()
            }),
            peer: None,
        };
        let m = MemberTls::from_cluster(Some(&server_only)).unwrap();
        assert!(!m.client_mtls && m.peer_secret_ref.is_none());
        // Peer only: the client listener stays plaintext.
        let peer_only = TlsSpec {
            client: None,
            peer: full.peer.clone(),
        };
        let m = MemberTls::from_cluster(Some(&peer_only)).unwrap();
        assert!(m.client_server_secret_ref.is_none() && !m.client_mtls);
    }
}
