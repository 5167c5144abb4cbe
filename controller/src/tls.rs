//! TLS material of a cluster, from the user's own Secrets (`spec.tls.client.serverSecretRef`,
//! `operatorClientSecretRef`, `spec.tls.peer.secretRef`) or from the Secrets cert-manager issues
//! for the operator's Certificates (names from [`TlsSecrets`], the one place that maps the spec
//! to Secrets). Owns two things: the operator's etcd client material (trust from the server
//! Secret's `ca.crt`, identity from the operator-client Secret's `tls.crt`/`tls.key`), and the
//! check that the Secrets member Pods mount hold what etcd reads. A missing or broken Secret is
//! reported by name (a condition), never by Pods stuck in ContainerCreating or etcd
//! crash-looping. Reads Secrets; writes nothing.

use std::collections::BTreeMap;
use std::path::Path;

pub use api::v1alpha2::TlsRole as Role;
use api::v1alpha2::{TlsSecret, TlsSecrets, TlsSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::{Api, Client, ResourceExt};

pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";

/// What the operator dials a TLS client listener with. `revision` names the Secret versions it
/// was read from, so a cached connection is rebuilt when either Secret changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    pub ca_pem: Vec<u8>,
    /// `(tls.crt, tls.key)` of the operator-client Secret (mTLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    pub revision: String,
}

/// The keys a Secret of `role` must hold.
fn keys(role: Role) -> &'static [&'static str] {
    match role {
        Role::OperatorClient => &[TLS_CRT, TLS_KEY],
        Role::Server | Role::Peer => &[TLS_CRT, TLS_KEY, CA_CRT],
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsSecretError {
    #[error(
        "Secret {namespace}/{name} ({field}) does not exist; create it with the keys {}",
        keys(*.role).join(", ")
    )]
    Missing {
        namespace: String,
        name: String,
        field: String,
        role: Role,
    },
    /// A Secret of an operator-emitted Certificate that cert-manager has not issued yet.
    #[error(
        "waiting for cert-manager to issue Secret {namespace}/{name} for Certificate \
         {certificate}; `kubectl describe certificate -n {namespace} {certificate}` shows why it \
         is not issued yet"
    )]
    NotIssued {
        namespace: String,
        name: String,
        certificate: String,
    },
    #[error("Secret {namespace}/{name} ({field}) has no key {key}; it needs {}", keys(*.role).join(", "))]
    MissingKey {
        namespace: String,
        name: String,
        field: String,
        role: Role,
        key: &'static str,
    },
    #[error("Secret {namespace}/{name} ({field}) cannot be used: {detail}")]
    Unusable {
        namespace: String,
        name: String,
        field: String,
        detail: String,
    },
    #[error("cannot read Secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl TlsSecretError {
    /// The Secret is there but wrong, or not there: the user (or their certificate pipeline)
    /// must act. A failed read is transient.
    pub fn is_user_fixable(&self) -> bool {
        !matches!(self, TlsSecretError::Api { .. })
    }

    /// cert-manager has not issued the Secret yet: a wait, not a fault.
    pub fn is_waiting_for_certificate(&self) -> bool {
        matches!(self, TlsSecretError::NotIssued { .. })
    }
}

/// One Secret as read: its name and, if it exists, its data and resourceVersion.
#[derive(Clone, Debug, Default)]
pub struct ReadSecret {
    pub name: String,
    pub data: Option<BTreeMap<String, ByteString>>,
    pub resource_version: String,
    /// Where the Secret comes from, for messages (the spec field, or the issuing Certificate);
    /// `None` reads as the role's spec field.
    pub origin: Option<String>,
    /// The operator-emitted Certificate that issues it (cert-manager Secrets).
    pub certificate: Option<String>,
}

impl ReadSecret {
    pub fn from_secret(secret: &Secret) -> Self {
        Self {
            name: secret.name_any(),
            data: Some(secret.data.clone().unwrap_or_default()),
            resource_version: secret.resource_version().unwrap_or_default(),
            origin: None,
            certificate: None,
        }
    }

    pub fn absent(name: &str) -> Self {
        Self {
            name: name.to_string(),
            data: None,
            resource_version: String::new(),
            origin: None,
            certificate: None,
        }
    }

    /// Tag the read with where the Secret comes from.
    fn of(mut self, secret: &TlsSecret) -> Self {
        self.origin = Some(secret.origin());
        self.certificate = secret.certificate().map(str::to_string);
        self
    }
}

/// The keys of `secret` that `role` needs, each checked as PEM of the right kind.
fn checked_keys(
    namespace: &str,
    secret: &ReadSecret,
    role: Role,
) -> Result<BTreeMap<&'static str, Vec<u8>>, TlsSecretError> {
    let field = secret
        .origin
        .clone()
        .unwrap_or_else(|| role.secret_field().to_string());
    let data = secret
        .data
        .as_ref()
        .ok_or_else(|| match &secret.certificate {
            Some(certificate) => TlsSecretError::NotIssued {
                namespace: namespace.to_string(),
                name: secret.name.clone(),
                certificate: certificate.clone(),
            },
            None => TlsSecretError::Missing {
                namespace: namespace.to_string(),
                name: secret.name.clone(),
                field: field.clone(),
                role,
            },
        })?;
    let mut out = BTreeMap::new();
    for key in keys(role) {
        let value = data
            .get(*key)
            .map(|v| v.0.clone())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| TlsSecretError::MissingKey {
                namespace: namespace.to_string(),
                name: secret.name.clone(),
                field: field.clone(),
                role,
                key,
            })?;
        let origin = format!("Secret {namespace}/{} key {key}", secret.name);
        let parsed = if *key == TLS_KEY {
            certs::pem::parse_private_key(&value, Path::new(&origin)).map(|_| ())
        } else {
            certs::pem::parse_certificates(&value, Path::new(&origin)).map(|_| ())
        };
        parsed.map_err(|e| TlsSecretError::Unusable {
            namespace: namespace.to_string(),
            name: secret.name.clone(),
            field: field.clone(),
            detail: e.to_string(),
        })?;
        out.insert(*key, value);
    }
    Ok(out)
}

/// Checks a Secret a member Pod mounts (server or peer): present, with `tls.crt`, `tls.key` and
/// `ca.crt` as PEM.
pub fn check_mounted(
    namespace: &str,
    secret: &ReadSecret,
    role: Role,
) -> Result<(), TlsSecretError> {
    checked_keys(namespace, secret, role).map(|_| ())
}

/// The operator's client material from the server Secret (trust) and, for mTLS, the
/// operator-client Secret (identity), checked by building the rustls client config from it.
pub fn client_tls(
    namespace: &str,
    server: &ReadSecret,
    operator_client: Option<&ReadSecret>,
) -> Result<ClientTls, TlsSecretError> {
    let server_keys = checked_keys(namespace, server, Role::Server)?;
    let ca_pem = server_keys.get(CA_CRT).cloned().unwrap_or_default();
    let mut revision = format!("{}@{}", server.name, server.resource_version);
    let identity = match operator_client {
        None => None,
        Some(secret) => {
            let keys = checked_keys(namespace, secret, Role::OperatorClient)?;
            revision.push_str(&format!("/{}@{}", secret.name, secret.resource_version));
            Some((
                keys.get(TLS_CRT).cloned().unwrap_or_default(),
                keys.get(TLS_KEY).cloned().unwrap_or_default(),
            ))
        }
    };
    let origin_secret = operator_client.unwrap_or(server);
    certs::client::client_config_from_pem(
        &ca_pem,
        identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
        &format!("Secret {namespace}/{}", origin_secret.name),
    )
    .map_err(|e| TlsSecretError::Unusable {
        namespace: namespace.to_string(),
        name: origin_secret.name.clone(),
        field: origin_secret.origin.clone().unwrap_or_else(|| {
            if operator_client.is_some() {
                Role::OperatorClient.secret_field().to_string()
            } else {
                Role::Server.secret_field().to_string()
            }
        }),
        detail: e.to_string(),
    })?;
    Ok(ClientTls {
        ca_pem,
        identity,
        revision,
    })
}

async fn read(
    api: &Api<Secret>,
    namespace: &str,
    secret: &TlsSecret,
) -> Result<ReadSecret, TlsSecretError> {
    let name = &secret.name;
    match api.get_opt(name).await {
        Ok(Some(found)) => Ok(ReadSecret::from_secret(&found).of(secret)),
        Ok(None) => Ok(ReadSecret::absent(name).of(secret)),
        Err(source) => Err(TlsSecretError::Api {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        }),
    }
}

/// Reads and checks every TLS Secret of cluster `cluster`'s `tls` (the user's, or cert-manager's
/// for the operator's Certificates): the peer Secret and the server Secret the Pods mount, and
/// the operator's client material. `Ok(None)` when the client listener is plaintext.
pub async fn load(
    client: &Client,
    namespace: &str,
    cluster: &str,
    tls: Option<&TlsSpec>,
) -> Result<Option<ClientTls>, TlsSecretError> {
    let secrets = TlsSecrets::of(cluster, tls);
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if let Some(peer) = &secrets.peer {
        check_mounted(namespace, &read(&api, namespace, peer).await?, Role::Peer)?;
    }
    let Some(server) = &secrets.server else {
        return Ok(None);
    };
    let server = read(&api, namespace, server).await?;
    let operator_client = match &secrets.operator_client {
        Some(s) => Some(read(&api, namespace, s).await?),
        None => None,
    };
    client_tls(namespace, &server, operator_client.as_ref()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use certs::mint::TestCa;

    fn secret(name: &str, rv: &str, keys: &[(&str, &str)]) -> ReadSecret {
        ReadSecret {
            name: name.to_string(),
            data: Some(
                keys.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            resource_version: rv.to_string(),
            origin: None,
            certificate: None,
        }
    }

    #[test]
    fn client_material_takes_trust_from_the_server_secret_and_identity_from_the_operator_secret() {
        let ca = TestCa::new("etcd-ca").unwrap();
        let server = ca.server_cert(&["*.c.ns.svc"]).unwrap();
        let op = ca.client_cert("etcd-operator", &[]).unwrap();
        let server_secret = secret(
            "c-server-tls",
            "7",
            &[
                (TLS_CRT, &server.cert_pem),
                (TLS_KEY, &server.key_pem),
                (CA_CRT, ca.cert_pem()),
            ],
        );
        let op_secret = secret(
            "c-op",
            "9",
            &[(TLS_CRT, &op.cert_pem), (TLS_KEY, &op.key_pem)],
        );
        let tls = client_tls("ns", &server_secret, Some(&op_secret)).unwrap();
        assert_eq!(tls.ca_pem, ca.cert_pem().as_bytes());
        assert_eq!(
            tls.identity,
            Some((
                op.cert_pem.clone().into_bytes(),
                op.key_pem.clone().into_bytes()
            ))
        );
        assert_eq!(tls.revision, "c-server-tls@7/c-op@9");
        // Server TLS only: no identity, and a new resourceVersion is a new revision.
        let mut renewed = server_secret.clone();
        renewed.resource_version = "8".into();
        let tls = client_tls("ns", &renewed, None).unwrap();
        assert_eq!(tls.identity, None);
        assert_eq!(tls.revision, "c-server-tls@8");
    }

    #[test]
    fn missing_or_broken_secrets_are_named_with_the_field_and_the_keys() {
        let err = client_tls("ns", &ReadSecret::absent("c-server-tls"), None).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("ns/c-server-tls")
                && msg.contains("spec.tls.client.serverSecretRef")
                && msg.contains("tls.crt, tls.key, ca.crt"),
            "{msg}"
        );
        assert!(err.is_user_fixable());

        let ca = TestCa::new("etcd-ca").unwrap();
        let no_ca = secret("c-peer", "1", &[(TLS_CRT, ca.cert_pem()), (TLS_KEY, "x")]);
        let msg = check_mounted("ns", &no_ca, Role::Peer)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("no key tls.key") || msg.contains("cannot be used"),
            "{msg}"
        );
        let garbage = secret(
            "c-peer",
            "1",
            &[(TLS_CRT, "not pem"), (TLS_KEY, "x"), (CA_CRT, "y")],
        );
        let msg = check_mounted("ns", &garbage, Role::Peer)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("ns/c-peer")
                && msg.contains("spec.tls.peer.secretRef")
                && msg.contains("tls.crt"),
            "{msg}"
        );
        let op = secret("c-op", "1", &[(TLS_CRT, ca.cert_pem())]);
        let server = ca.server_cert(&["x"]).unwrap();
        let server_secret = secret(
            "s",
            "1",
            &[
                (TLS_CRT, &server.cert_pem),
                (TLS_KEY, &server.key_pem),
                (CA_CRT, ca.cert_pem()),
            ],
        );
        let msg = client_tls("ns", &server_secret, Some(&op))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("ns/c-op") && msg.contains("no key tls.key"),
            "{msg}"
        );
    }

    #[test]
    fn a_cert_manager_secret_not_issued_yet_is_a_wait_naming_the_certificate() {
        use api::v1alpha2::{IssuerKind, IssuerReference, TlsSecretSource};
        let source = TlsSecret {
            role: Role::Server,
            name: "db-server-tls".into(),
            source: TlsSecretSource::CertManager {
                certificate: "db-server".into(),
                issuer: IssuerReference::new("ca", IssuerKind::Issuer),
            },
        };
        let err =
            client_tls("ns", &ReadSecret::absent("db-server-tls").of(&source), None).unwrap_err();
        assert!(err.is_waiting_for_certificate() && err.is_user_fixable());
        let msg = err.to_string();
        assert!(
            msg.contains("ns/db-server-tls")
                && msg.contains("Certificate db-server")
                && msg.contains("kubectl describe certificate -n ns db-server"),
            "{msg}"
        );
        // Issued but without the CA (an issuer that does not fill ca.crt): named as cert-manager's.
        let ca = TestCa::new("etcd-ca").unwrap();
        let server = ca.server_cert(&["x"]).unwrap();
        let issued = secret(
            "db-server-tls",
            "1",
            &[(TLS_CRT, &server.cert_pem), (TLS_KEY, &server.key_pem)],
        )
        .of(&source);
        let err = client_tls("ns", &issued, None).unwrap_err();
        assert!(!err.is_waiting_for_certificate());
        let msg = err.to_string();
        assert!(
            msg.contains("issued by cert-manager for Certificate db-server")
                && msg.contains("no key ca.crt"),
            "{msg}"
        );
    }
}
