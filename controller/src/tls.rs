//! TLS material of a cluster that uses the user's own Secrets (`spec.tls.client.serverSecretRef`,
//! `operatorClientSecretRef`, `spec.tls.peer.secretRef`). Owns two things: the operator's etcd
//! client material (trust from the server Secret's `ca.crt`, identity from the operator-client
//! Secret's `tls.crt`/`tls.key`), and the check that the Secrets member Pods mount hold what etcd
//! reads. A missing or broken Secret is reported by name (a condition), never by Pods stuck in
//! ContainerCreating or etcd crash-looping. Reads Secrets; writes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use api::v1alpha2::TlsSpec;
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

/// Which Secret of `spec.tls` a problem is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    OperatorClient,
    Peer,
}

impl Role {
    fn field(self) -> &'static str {
        match self {
            Role::Server => "spec.tls.client.serverSecretRef",
            Role::OperatorClient => "spec.tls.client.operatorClientSecretRef",
            Role::Peer => "spec.tls.peer.secretRef",
        }
    }

    fn keys(self) -> &'static [&'static str] {
        match self {
            Role::OperatorClient => &[TLS_CRT, TLS_KEY],
            Role::Server | Role::Peer => &[TLS_CRT, TLS_KEY, CA_CRT],
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsSecretError {
    #[error(
        "Secret {namespace}/{name} ({field}) does not exist; create it with the keys {}",
        .role.keys().join(", ")
    )]
    Missing {
        namespace: String,
        name: String,
        field: &'static str,
        role: Role,
    },
    #[error("Secret {namespace}/{name} ({field}) has no key {key}; it needs {}", .role.keys().join(", "))]
    MissingKey {
        namespace: String,
        name: String,
        field: &'static str,
        role: Role,
        key: &'static str,
    },
    #[error("Secret {namespace}/{name} ({field}) cannot be used: {detail}")]
    Unusable {
        namespace: String,
        name: String,
        field: &'static str,
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
}

/// One Secret as read: its name and, if it exists, its data and resourceVersion.
#[derive(Clone, Debug, Default)]
pub struct ReadSecret {
    pub name: String,
    pub data: Option<BTreeMap<String, ByteString>>,
    pub resource_version: String,
}

impl ReadSecret {
    pub fn from_secret(secret: &Secret) -> Self {
        Self {
            name: secret.name_any(),
            data: Some(secret.data.clone().unwrap_or_default()),
            resource_version: secret.resource_version().unwrap_or_default(),
        }
    }

    pub fn absent(name: &str) -> Self {
        Self {
            name: name.to_string(),
            data: None,
            resource_version: String::new(),
        }
    }
}

/// The keys of `secret` that `role` needs, each checked as PEM of the right kind.
fn checked_keys(
    namespace: &str,
    secret: &ReadSecret,
    role: Role,
) -> Result<BTreeMap<&'static str, Vec<u8>>, TlsSecretError> {
    let data = secret
        .data
        .as_ref()
        .ok_or_else(|| TlsSecretError::Missing {
            namespace: namespace.to_string(),
            name: secret.name.clone(),
            field: role.field(),
            role,
        })?;
    let mut out = BTreeMap::new();
    for key in role.keys() {
        let value = data
            .get(*key)
            .map(|v| v.0.clone())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| TlsSecretError::MissingKey {
                namespace: namespace.to_string(),
                name: secret.name.clone(),
                field: role.field(),
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
            field: role.field(),
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
        field: if operator_client.is_some() {
            Role::OperatorClient.field()
        } else {
            Role::Server.field()
        },
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
    name: &str,
) -> Result<ReadSecret, TlsSecretError> {
    match api.get_opt(name).await {
        Ok(Some(secret)) => Ok(ReadSecret::from_secret(&secret)),
        Ok(None) => Ok(ReadSecret::absent(name)),
        Err(source) => Err(TlsSecretError::Api {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        }),
    }
}

/// Reads and checks every BYO Secret of `tls`: the peer Secret and the server Secret the Pods
/// mount, and the operator's client material. `Ok(None)` when the client listener is plaintext
/// (or its Secrets come from cert-manager, which this does not resolve).
pub async fn load(
    client: &Client,
    namespace: &str,
    tls: Option<&TlsSpec>,
) -> Result<Option<ClientTls>, TlsSecretError> {
    let Some(tls) = tls else {
        return Ok(None);
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if let Some(peer) = tls.peer.as_ref().and_then(|p| p.secret_ref.as_ref()) {
        check_mounted(
            namespace,
            &read(&api, namespace, &peer.name).await?,
            Role::Peer,
        )?;
    }
    let Some(server) = tls
        .client
        .as_ref()
        .and_then(|c| c.server_secret_ref.as_ref())
    else {
        return Ok(None);
    };
    let server = read(&api, namespace, &server.name).await?;
    let operator_client = match tls
        .client
        .as_ref()
        .and_then(|c| c.operator_client_secret_ref.as_ref())
    {
        Some(r) => Some(read(&api, namespace, &r.name).await?),
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
}
