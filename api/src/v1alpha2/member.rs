//! `EtcdMember`: one per etcd member, created and owned by the operator. Owns the member's Pod
//! and PVC. Users read these; they should not edit them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster::{RestoreSpec, TlsSpec};
use super::common::{
    AdditionalMetadata, EtcdOptions, IssuerReference, SecretReference, StorageSpec,
};

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
    shortname = "em",
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
    /// The cluster's `spec.tolerations`, given to the member's Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// The cluster's `spec.nodeSelector`, given to the member's Pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// The cluster's `spec.priorityClassName`, given to the member's Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
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
    /// The member view of a cluster's TLS: the server and peer Secrets the Pod mounts (the
    /// user's own, or the ones cert-manager issues for the operator's Certificates, see
    /// [`TlsSecrets`]), and mTLS on the client listener when the operator has a client identity.
    /// `None` when both listeners are plaintext.
    pub fn from_cluster(cluster: &str, tls: Option<&TlsSpec>) -> Option<Self> {
        let secrets = TlsSecrets::of(cluster, tls);
        let member = Self {
            client_server_secret_ref: secrets
                .server
                .as_ref()
                .map(|s| SecretReference::new(&s.name)),
            client_mtls: secrets.operator_client.is_some(),
            peer_secret_ref: secrets.peer.as_ref().map(|s| SecretReference::new(&s.name)),
            peer_auto_tls: false,
        };
        (member.client_server_secret_ref.is_some() || member.peer_secret_ref.is_some())
            .then_some(member)
    }
}

/// The three TLS Secrets a cluster can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsRole {
    /// The client listener's certificate, key and trust bundle (mounted by members).
    Server,
    /// The operator's client identity on the client listener (read by the operator only).
    OperatorClient,
    /// The peer listener's certificate, key and trust bundle (mounted by members).
    Peer,
}

impl TlsRole {
    /// The spec field naming the user's own Secret for this role.
    pub fn secret_field(self) -> &'static str {
        match self {
            TlsRole::Server => "spec.tls.client.serverSecretRef",
            TlsRole::OperatorClient => "spec.tls.client.operatorClientSecretRef",
            TlsRole::Peer => "spec.tls.peer.secretRef",
        }
    }

    /// The spec field naming the cert-manager issuer for this role.
    pub fn issuer_field(self) -> &'static str {
        match self {
            TlsRole::Server => "spec.tls.client.certManager.serverIssuerRef",
            TlsRole::OperatorClient => "spec.tls.client.certManager.operatorClientIssuerRef",
            TlsRole::Peer => "spec.tls.peer.certManager.issuerRef",
        }
    }

    /// The Certificate the operator emits for this role: `<cluster>-server`,
    /// `<cluster>-operator-client`, `<cluster>-peer`.
    pub fn certificate_name(self, cluster: &str) -> String {
        let suffix = match self {
            TlsRole::Server => "server",
            TlsRole::OperatorClient => "operator-client",
            TlsRole::Peer => "peer",
        };
        format!("{cluster}-{suffix}")
    }

    /// The Secret that Certificate writes: `<certificate>-tls`.
    pub fn certificate_secret_name(self, cluster: &str) -> String {
        format!("{}-tls", self.certificate_name(cluster))
    }
}

/// Where one TLS Secret of a cluster comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSecretSource {
    /// The user's own Secret, named in the spec.
    User,
    /// Issued by cert-manager for this Certificate (in the cluster's namespace), which the
    /// operator emits with this issuer.
    CertManager {
        certificate: String,
        issuer: IssuerReference,
    },
}

/// One TLS Secret of a cluster: its role, name and origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSecret {
    pub role: TlsRole,
    pub name: String,
    pub source: TlsSecretSource,
}

impl TlsSecret {
    /// Where the Secret comes from, for messages: the spec field, or the Certificate.
    pub fn origin(&self) -> String {
        match &self.source {
            TlsSecretSource::User => self.role.secret_field().to_string(),
            TlsSecretSource::CertManager { certificate, .. } => {
                format!("issued by cert-manager for Certificate {certificate}")
            }
        }
    }

    /// The Certificate that issues this Secret, for cert-manager Secrets.
    pub fn certificate(&self) -> Option<&str> {
        match &self.source {
            TlsSecretSource::User => None,
            TlsSecretSource::CertManager { certificate, .. } => Some(certificate),
        }
    }
}

/// The effective TLS Secrets of a cluster, whether the user names them (BYO) or cert-manager
/// issues them for the operator's Certificates: the one place that maps `spec.tls` to Secret
/// names. Members mount `server` and `peer`; the operator dials with `server`'s `ca.crt` and,
/// for mTLS, `operator_client`'s identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSecrets {
    pub server: Option<TlsSecret>,
    pub operator_client: Option<TlsSecret>,
    pub peer: Option<TlsSecret>,
}

impl TlsSecrets {
    pub fn of(cluster: &str, tls: Option<&TlsSpec>) -> Self {
        let Some(tls) = tls else {
            return Self::default();
        };
        let user = |role: TlsRole, r: &SecretReference| TlsSecret {
            role,
            name: r.name.clone(),
            source: TlsSecretSource::User,
        };
        let managed = |role: TlsRole, issuer: &IssuerReference| TlsSecret {
            role,
            name: role.certificate_secret_name(cluster),
            source: TlsSecretSource::CertManager {
                certificate: role.certificate_name(cluster),
                issuer: issuer.clone(),
            },
        };
        let client = tls.client.as_ref();
        let cm = client.and_then(|c| c.cert_manager.as_ref());
        let server = match (client.and_then(|c| c.server_secret_ref.as_ref()), cm) {
            (Some(r), _) => Some(user(TlsRole::Server, r)),
            (None, Some(cm)) => Some(managed(TlsRole::Server, &cm.server_issuer_ref)),
            (None, None) => None,
        };
        let operator_client = match (
            client.and_then(|c| c.operator_client_secret_ref.as_ref()),
            cm.and_then(|cm| cm.operator_client_issuer_ref.as_ref()),
        ) {
            (Some(r), _) => Some(user(TlsRole::OperatorClient, r)),
            (None, Some(issuer)) => Some(managed(TlsRole::OperatorClient, issuer)),
            (None, None) => None,
        }
        // An operator identity is only used on a TLS client listener.
        .filter(|_| server.is_some());
        let peer = tls
            .peer
            .as_ref()
            .and_then(|p| match (&p.secret_ref, &p.cert_manager) {
                (Some(r), _) => Some(user(TlsRole::Peer, r)),
                (None, Some(cm)) => Some(managed(TlsRole::Peer, &cm.issuer_ref)),
                (None, None) => None,
            });
        Self {
            server,
            operator_client,
            peer,
        }
    }

    /// Every Secret, server first.
    pub fn all(&self) -> impl Iterator<Item = &TlsSecret> {
        [&self.server, &self.operator_client, &self.peer]
            .into_iter()
            .flatten()
    }

    /// The Secrets cert-manager issues for the operator's Certificates.
    pub fn cert_manager(&self) -> impl Iterator<Item = &TlsSecret> {
        self.all().filter(|s| s.certificate().is_some())
    }

    /// Whether `secret` is one of them.
    pub fn names(&self, secret: &str) -> bool {
        self.all().any(|s| s.name == secret)
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
        assert_eq!(MemberTls::from_cluster("c", None), None);
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
            MemberTls::from_cluster("c", Some(&full)),
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
        let m = MemberTls::from_cluster("c", Some(&server_only)).unwrap();
        assert!(!m.client_mtls && m.peer_secret_ref.is_none());
        // Peer only: the client listener stays plaintext.
        let peer_only = TlsSpec {
            client: None,
            peer: full.peer.clone(),
        };
        let m = MemberTls::from_cluster("c", Some(&peer_only)).unwrap();
        assert!(m.client_server_secret_ref.is_none() && !m.client_mtls);
    }

    #[test]
    fn cert_manager_tls_maps_to_the_certificates_secrets() {
        use crate::v1alpha2::{ClientCertManagerSpec, IssuerKind, PeerCertManagerSpec};
        let issuer = IssuerReference::new("ca", IssuerKind::Issuer);
        let tls = TlsSpec {
            client: Some(ClientTlsSpec {
                cert_manager: Some(ClientCertManagerSpec {
                    server_issuer_ref: issuer.clone(),
                    operator_client_issuer_ref: None,
                }),
                ..Default::default()
            }),
            peer: Some(PeerTlsSpec {
                secret_ref: None,
                cert_manager: Some(PeerCertManagerSpec {
                    issuer_ref: issuer.clone(),
                }),
            }),
        };
        let secrets = TlsSecrets::of("db", Some(&tls));
        let server = secrets.server.clone().unwrap();
        assert_eq!(server.name, "db-server-tls");
        assert_eq!(server.certificate(), Some("db-server"));
        assert_eq!(
            server.origin(),
            "issued by cert-manager for Certificate db-server"
        );
        assert_eq!(secrets.operator_client, None);
        assert_eq!(secrets.peer.as_ref().unwrap().name, "db-peer-tls");
        assert!(secrets.names("db-peer-tls") && !secrets.names("db-operator-client-tls"));
        // Without an operator-client issuer the operator dials with server trust only: no mTLS.
        let m = MemberTls::from_cluster("db", Some(&tls)).unwrap();
        assert_eq!(
            m,
            MemberTls {
                client_server_secret_ref: Some(SecretReference::new("db-server-tls")),
                client_mtls: false,
                peer_secret_ref: Some(SecretReference::new("db-peer-tls")),
                peer_auto_tls: false,
            }
        );
        let mut mtls = tls.clone();
        if let Some(cm) = mtls.client.as_mut().and_then(|c| c.cert_manager.as_mut()) {
            cm.operator_client_issuer_ref =
                Some(IssuerReference::new("op", IssuerKind::ClusterIssuer));
        }
        let secrets = TlsSecrets::of("db", Some(&mtls));
        let op = secrets.operator_client.unwrap();
        assert_eq!(op.name, "db-operator-client-tls");
        assert_eq!(op.certificate(), Some("db-operator-client"));
        assert!(
            MemberTls::from_cluster("db", Some(&mtls))
                .unwrap()
                .client_mtls
        );
        // BYO names stay the user's.
        let byo = TlsSecrets::of(
            "db",
            Some(&TlsSpec {
                client: None,
                peer: Some(PeerTlsSpec {
                    secret_ref: Some(SecretReference::new("mine")),
                    cert_manager: None,
                }),
            }),
        );
        let peer = byo.peer.unwrap();
        assert_eq!(
            (peer.name.as_str(), peer.origin()),
            ("mine", "spec.tls.peer.secretRef".to_string())
        );
        assert_eq!(byo.server, None);
    }
}
