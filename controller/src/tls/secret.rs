//! One TLS Secret as read, and the checks of its keys: present, non-empty and PEM of the right
//! kind, named by the spec field (or the Certificate) it comes from. Also the operator's client
//! material built from the server and operator-client Secrets. Pure: the Secrets are read in
//! [`super`].

use std::collections::BTreeMap;
use std::path::Path;

use api::v1alpha2::TlsSecret;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::ByteString;
use kube::ResourceExt;

use super::{ClientTls, Role, CA_CRT, TLS_CRT, TLS_KEY};

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
    /// When its `ca.crt` last changed, as far as the API records it (see [`ca_changed`]).
    pub ca_changed: Option<Timestamp>,
}

/// When `secret`'s `ca.crt` last changed, as far as the API records it. Kubernetes keeps, per
/// field manager, the last time that manager changed any of the fields it owns
/// (`metadata.managedFields[].time`), not per key: the latest time of a manager owning `ca.crt`
/// (under `data` or `stringData`) is at or after its last change (a renewal of `tls.crt` by the
/// same manager moves it too). Without such an entry, the latest change of any manager; without
/// managed fields, the Secret's creation.
pub fn ca_changed(secret: &Secret) -> Option<Timestamp> {
    let fields = secret.metadata.managed_fields.iter().flatten();
    let time = |f: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
        f.time.as_ref().map(|t| t.0)
    };
    let owning = fields
        .clone()
        .filter(|f| {
            f.fields_v1
                .as_ref()
                .is_some_and(|v| v.0.to_string().contains("\"f:ca.crt\""))
        })
        .filter_map(time)
        .max();
    owning
        .or_else(|| fields.filter_map(time).max())
        .or_else(|| secret.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

impl ReadSecret {
    pub fn from_secret(secret: &Secret) -> Self {
        Self {
            name: secret.name_any(),
            data: Some(secret.data.clone().unwrap_or_default()),
            resource_version: secret.resource_version().unwrap_or_default(),
            origin: None,
            certificate: None,
            ca_changed: ca_changed(secret),
        }
    }

    pub fn absent(name: &str) -> Self {
        Self {
            name: name.to_string(),
            data: None,
            resource_version: String::new(),
            origin: None,
            certificate: None,
            ca_changed: None,
        }
    }

    /// Tag the read with where the Secret comes from.
    pub(super) fn of(mut self, secret: &TlsSecret) -> Self {
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

/// The bytes under `key` in `secret`; empty when the key or the Secret is absent.
pub(super) fn key<'a>(secret: &'a ReadSecret, key: &str) -> &'a [u8] {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| v.0.as_slice())
        .unwrap_or_default()
}
