//! TLS material of a cluster, from the user's own Secrets (`spec.tls.client.serverSecretRef`,
//! `operatorClientSecretRef`, `spec.tls.peer.secretRef`) or from the Secrets cert-manager issues
//! for the operator's Certificates (names from [`TlsSecrets`], the one place that maps the spec
//! to Secrets). Owns two things: the operator's etcd client material (trust from the server
//! Secret's `ca.crt`, identity from the operator-client Secret's `tls.crt`/`tls.key`), and the
//! check that the Secrets member Pods mount hold what etcd reads. A missing or broken Secret is
//! reported by name (a condition), never by Pods stuck in ContainerCreating or etcd
//! crash-looping. Reads Secrets; writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub use api::v1alpha2::TlsRole as Role;
use api::v1alpha2::{TlsSecret, TlsSecrets, TlsSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
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

/// The Secrets of one cluster's `spec.tls`, as read.
struct Read {
    peer: Option<ReadSecret>,
    server: Option<ReadSecret>,
    operator_client: Option<ReadSecret>,
}

async fn read_all(
    client: &Client,
    namespace: &str,
    cluster: &str,
    tls: Option<&TlsSpec>,
) -> Result<Read, TlsSecretError> {
    let secrets = TlsSecrets::of(cluster, tls);
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut out = Read {
        peer: None,
        server: None,
        operator_client: None,
    };
    if let Some(peer) = &secrets.peer {
        let peer = read(&api, namespace, peer).await?;
        check_mounted(namespace, &peer, Role::Peer)?;
        out.peer = Some(peer);
    }
    if let Some(server) = &secrets.server {
        out.server = Some(read(&api, namespace, server).await?);
    }
    if let Some(s) = &secrets.operator_client {
        out.operator_client = Some(read(&api, namespace, s).await?);
    }
    Ok(out)
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
    let read = read_all(client, namespace, cluster, tls).await?;
    match &read.server {
        None => Ok(None),
        Some(server) => client_tls(namespace, server, read.operator_client.as_ref()).map(Some),
    }
}

/// What the cluster controller takes from the TLS Secrets: the operator's client material and
/// the fingerprint of the trust bundles member Pods run with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    pub client: Option<ClientTls>,
    /// See [`trust_bundle`]; `None` when etcd verifies no certificate against a Secret's CA.
    pub trust_bundle: Option<String>,
    /// The CAs of those bundles and the certificates members are presented (see [`CaTrust`]);
    /// `None` with `trust_bundle`.
    pub ca_trust: Option<CaTrust>,
}

/// A CA bundle etcd loads at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bundle {
    /// The peer Secret's `ca.crt` (`--peer-trusted-ca-file`).
    Peer,
    /// The server Secret's `ca.crt` with client mTLS (`--trusted-ca-file`).
    Client,
}

impl Bundle {
    fn key(self) -> &'static str {
        match self {
            Bundle::Peer => "peer",
            Bundle::Client => "client",
        }
    }
}

/// The CA certificates of the bundles etcd loads at start-up, each as [`ca_fingerprint`]: what
/// a member started with them trusts. Recorded on each EtcdMember and its Pod
/// ([`api::labels::TRUSTED_CAS_ANNOTATION`]) next to the [`trust_bundle`] fingerprint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaSet {
    pub peer: BTreeSet<String>,
    pub client: BTreeSet<String>,
}

impl CaSet {
    pub fn of(&self, bundle: Bundle) -> &BTreeSet<String> {
        match bundle {
            Bundle::Peer => &self.peer,
            Bundle::Client => &self.client,
        }
    }

    /// `peer=<fp>,<fp>;client=<fp>`, bundles without a CA left out.
    pub fn render(&self) -> String {
        [Bundle::Peer, Bundle::Client]
            .into_iter()
            .filter(|b| !self.of(*b).is_empty())
            .map(|b| {
                let fps: Vec<&str> = self.of(b).iter().map(String::as_str).collect();
                format!("{}={}", b.key(), fps.join(","))
            })
            .collect::<Vec<_>>()
            .join(";")
    }

    /// The set [`CaSet::render`] wrote; `None` for anything else (`unknown`, a hand edit).
    pub fn parse(value: &str) -> Option<Self> {
        let mut out = CaSet::default();
        for part in value.split(';').filter(|p| !p.is_empty()) {
            let (bundle, fps) = part.split_once('=')?;
            let set = match bundle {
                "peer" => &mut out.peer,
                "client" => &mut out.client,
                _ => return None,
            };
            for fp in fps.split(',') {
                if fp.is_empty() || !fp.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                set.insert(fp.to_string());
            }
        }
        Some(out)
    }
}

/// A certificate the members are presented from the Secrets as they are now (leaves are
/// re-read on every handshake, so running members present it too once the kubelet refreshed
/// the volume), and the CAs of the current bundle it chains to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Presented {
    /// The bundle a member verifies it against.
    pub bundle: Bundle,
    /// `<namespace>/<name>` of the Secret holding it.
    pub secret: String,
    /// Where the Secret comes from (the spec field, or the issuing Certificate).
    pub origin: String,
    /// What it is, for messages.
    pub what: &'static str,
    /// [`ca_fingerprint`]s of the certificates of the bundle it is accepted against.
    pub anchors: BTreeSet<String>,
}

/// What a change of the CA bundles is judged by (see `cluster::ca_set`): the CAs a member
/// started now would trust, and the certificates every member is presented now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaTrust {
    pub bundles: CaSet,
    pub presented: Vec<Presented>,
    /// The latest [`ca_changed`] of the Secrets whose `ca.crt` etcd loads: a member whose etcd
    /// started before it may run an older bundle.
    pub changed: Option<Timestamp>,
}

/// A CA certificate's identity in a [`CaSet`]: the first 8 bytes of the sha256 of its DER, hex.
pub fn ca_fingerprint(der: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn ca_set_of(secret: &ReadSecret) -> BTreeSet<String> {
    certs::pem::parse_certificates(key(secret, CA_CRT), Path::new(CA_CRT))
        .map(|cas| cas.iter().map(|c| ca_fingerprint(c)).collect())
        .unwrap_or_default()
}

/// [`CaTrust`] of Secrets whose chains [`check_chains`] accepted: `server` only with client
/// mTLS (then `operator_client` is the certificate the operator presents to every member).
fn ca_trust(
    namespace: &str,
    server: Option<&ReadSecret>,
    operator_client: Option<&ReadSecret>,
    peer: Option<&ReadSecret>,
) -> CaTrust {
    let mut out = CaTrust::default();
    let mut presented = |bundle: Bundle, ca: &ReadSecret, leaf: &ReadSecret, role, what| {
        let origin = format!("Secret {namespace}/{} key tls.crt", leaf.name);
        let anchors =
            certs::verify::client_cert_anchors(key(ca, CA_CRT), key(leaf, TLS_CRT), &origin)
                .map(|cas| cas.iter().map(|c| ca_fingerprint(c)).collect())
                .unwrap_or_default();
        out.presented.push(Presented {
            bundle,
            secret: format!("{namespace}/{}", leaf.name),
            origin: leaf
                .origin
                .clone()
                .unwrap_or_else(|| Role::secret_field(role).to_string()),
            what,
            anchors,
        });
    };
    if let Some(peer) = peer {
        presented(Bundle::Peer, peer, peer, Role::Peer, "peer certificate");
    }
    if let (Some(server), Some(op)) = (server, operator_client) {
        presented(
            Bundle::Client,
            server,
            op,
            Role::OperatorClient,
            "operator client certificate",
        );
    }
    let mtls_server = server.filter(|_| operator_client.is_some());
    out.changed = [peer, mtls_server]
        .into_iter()
        .flatten()
        .filter_map(|s| s.ca_changed)
        .max();
    out.bundles = CaSet {
        peer: peer.map(ca_set_of).unwrap_or_default(),
        client: server
            .filter(|_| operator_client.is_some())
            .map(ca_set_of)
            .unwrap_or_default(),
    };
    out
}

/// [`load`], and beyond it: every certificate checked the way its verifier will check it
/// (chain to the trusted CA, validity, usage, and the names of `hosts`, the members' DNS names),
/// so a wrong SAN or a CA that does not match is reported naming the Secret before a handshake
/// fails somewhere; and the trust-bundle fingerprint.
pub async fn load_checked(
    client: &Client,
    namespace: &str,
    cluster: &str,
    tls: Option<&TlsSpec>,
    hosts: &[String],
) -> Result<Loaded, TlsSecretError> {
    let read = read_all(client, namespace, cluster, tls).await?;
    let client = match &read.server {
        None => None,
        Some(server) => Some(client_tls(
            namespace,
            server,
            read.operator_client.as_ref(),
        )?),
    };
    check_chains(namespace, cluster, &read, hosts)?;
    let mtls = read.operator_client.is_some();
    let trust_bundle = trust_bundle(read.server.as_ref().filter(|_| mtls), read.peer.as_ref());
    let ca_trust = trust_bundle.is_some().then(|| {
        ca_trust(
            namespace,
            read.server.as_ref(),
            read.operator_client.as_ref(),
            read.peer.as_ref(),
        )
    });
    Ok(Loaded {
        trust_bundle,
        ca_trust,
        client,
    })
}

fn key<'a>(secret: &'a ReadSecret, key: &str) -> &'a [u8] {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| v.0.as_slice())
        .unwrap_or_default()
}

fn mismatch(namespace: &str, secret: &ReadSecret, role: Role, detail: String) -> TlsSecretError {
    TlsSecretError::Unusable {
        namespace: namespace.to_string(),
        name: secret.name.clone(),
        field: secret
            .origin
            .clone()
            .unwrap_or_else(|| role.secret_field().to_string()),
        detail,
    }
}

/// A name under a cluster's headless Service, to check the chains of its certificates with
/// before any member exists (the name itself is not checked then).
fn probe_host(namespace: &str, cluster: &str) -> String {
    crate::naming::member_host(&format!("{cluster}-probe"), cluster, namespace)
}

/// The checks of [`load_checked`] on Secrets already read (and key-checked). Without `hosts` (no
/// member yet) the chains are checked, the names are not.
fn check_chains(
    namespace: &str,
    cluster: &str,
    read: &Read,
    hosts: &[String],
) -> Result<(), TlsSecretError> {
    use certs::verify::{self, VerifyError};
    let probe = [probe_host(namespace, cluster)];
    let names_checked = !hosts.is_empty();
    let hosts = if names_checked { hosts } else { &probe[..] };
    let server_cert = |ca: &[u8], cert: &[u8], host: &str, origin: &str| match verify::server_cert(
        ca, cert, host, origin,
    ) {
        Err(VerifyError::NotValidForName { .. }) if !names_checked => Ok(()),
        other => other,
    };
    let fix = |e: &VerifyError, ca_secret: &str| match e {
        VerifyError::NotValidForName { .. } => format!(
            "; re-issue it with DNS SANs covering every member (see docs/tls.md: \
             *.{cluster}.{namespace}.svc and *.{cluster}.{namespace}.svc.<cluster-domain>)"
        ),
        VerifyError::UnknownIssuer => format!(
            "; put the CA that issued it into {ca_secret} ca.crt (a bundle of old and new \
             CA while rotating), or re-issue it from that CA"
        ),
        VerifyError::Expired | VerifyError::NotValidYet => "; renew it".to_string(),
        _ => String::new(),
    };
    if let Some(server) = &read.server {
        let origin = format!("Secret {namespace}/{} key tls.crt", server.name);
        for host in hosts {
            server_cert(key(server, CA_CRT), key(server, TLS_CRT), host, &origin).map_err(|e| {
                mismatch(
                    namespace,
                    server,
                    Role::Server,
                    format!(
                        "its tls.crt would be refused by clients trusting its ca.crt: {e}{}",
                        fix(&e, "the same Secret's")
                    ),
                )
            })?;
        }
        if let Some(op) = &read.operator_client {
            let origin = format!("Secret {namespace}/{} key tls.crt", op.name);
            verify::client_cert(key(server, CA_CRT), key(op, TLS_CRT), &origin).map_err(|e| {
                let ca_secret = format!("Secret {namespace}/{}", server.name);
                mismatch(
                    namespace,
                    op,
                    Role::OperatorClient,
                    format!(
                        "its tls.crt would be refused by etcd, which checks client certificates                          against {ca_secret} ca.crt: {e}{}",
                        fix(&e, &ca_secret)
                    ),
                )
            })?;
        }
    }
    if let Some(peer) = &read.peer {
        let origin = format!("Secret {namespace}/{} key tls.crt", peer.name);
        for host in hosts {
            server_cert(key(peer, CA_CRT), key(peer, TLS_CRT), host, &origin).map_err(
                |e| {
                    mismatch(
                        namespace,
                        peer,
                        Role::Peer,
                        format!(
                            "its tls.crt would be refused by the other members, which trust its                              ca.crt: {e}{}",
                            fix(&e, "the same Secret's")
                        ),
                    )
                },
            )?;
        }
        verify::client_cert(key(peer, CA_CRT), key(peer, TLS_CRT), &origin).map_err(|e| {
            mismatch(
                namespace,
                peer,
                Role::Peer,
                format!(
                    "its tls.crt would be refused as a peer client certificate: {e}{}",
                    fix(&e, "the same Secret's")
                ),
            )
        })?;
    }
    Ok(())
}

/// The fingerprint of the CA bundles etcd loads once at start-up (`--trusted-ca-file` with
/// client mTLS, `--peer-trusted-ca-file`): a change of either needs the members restarted,
/// while leaf certificates and keys are re-read on every handshake and need nothing. A short
/// sha256 hex over both, `None` when etcd trusts no Secret's CA.
pub fn trust_bundle(server: Option<&ReadSecret>, peer: Option<&ReadSecret>) -> Option<String> {
    if server.is_none() && peer.is_none() {
        return None;
    }
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for (label, secret) in [("server", server), ("peer", peer)] {
        if let Some(secret) = secret {
            // The certificates, not the PEM text: re-encoding the same bundle rolls nothing.
            let ca = key(secret, CA_CRT);
            let ders = certs::pem::parse_certificates(ca, Path::new(CA_CRT))
                .map(|certs| certs.into_iter().map(|c| c.to_vec()).collect())
                .unwrap_or_else(|_| vec![ca.to_vec()]);
            ctx.update(label.as_bytes());
            for der in ders {
                ctx.update(&(der.len() as u64).to_be_bytes());
                ctx.update(&der);
            }
        }
    }
    let digest = ctx.finish();
    Some(
        digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
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
            ca_changed: None,
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

    fn tls_secret(name: &str, leaf: &certs::mint::MintedCert, ca_pem: &str) -> ReadSecret {
        secret(
            name,
            "1",
            &[
                (TLS_CRT, &leaf.cert_pem),
                (TLS_KEY, &leaf.key_pem),
                (CA_CRT, ca_pem),
            ],
        )
    }

    #[test]
    fn wrong_sans_and_foreign_cas_are_named_with_the_secret_and_the_fix() {
        let ca = TestCa::new("etcd-ca").unwrap();
        let other = TestCa::new("other-ca").unwrap();
        let good = ca
            .server_cert(&["*.c.ns.svc", "*.c.ns.svc.cluster.local"])
            .unwrap();
        let hosts = vec!["c-abcde.c.ns.svc".to_string()];
        let read = |server: ReadSecret, op: Option<ReadSecret>, peer: Option<ReadSecret>| Read {
            server: Some(server),
            operator_client: op,
            peer,
        };
        let server = tls_secret("c-server", &good, ca.cert_pem());
        let peer = tls_secret("c-peer", &good, ca.cert_pem());
        let op_leaf = ca.client_cert("root", &[]).unwrap();
        let op = secret(
            "c-op",
            "1",
            &[(TLS_CRT, &op_leaf.cert_pem), (TLS_KEY, &op_leaf.key_pem)],
        );
        check_chains(
            "ns",
            "c",
            &read(server.clone(), Some(op.clone()), Some(peer.clone())),
            &hosts,
        )
        .unwrap();

        let wrong_names = ca.server_cert(&["*.other.ns.svc"]).unwrap();
        let msg = check_chains(
            "ns",
            "c",
            &read(
                tls_secret("c-server", &wrong_names, ca.cert_pem()),
                None,
                None,
            ),
            &hosts,
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("ns/c-server")
                && msg.contains("spec.tls.client.serverSecretRef")
                && msg.contains("not valid for c-abcde.c.ns.svc")
                && msg.contains("*.c.ns.svc and"),
            "{msg}"
        );

        let msg = check_chains(
            "ns",
            "c",
            &read(
                server.clone(),
                None,
                Some(tls_secret("c-peer", &good, other.cert_pem())),
            ),
            &hosts,
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("ns/c-peer")
                && msg.contains("spec.tls.peer.secretRef")
                && msg.contains("not signed by a CA in the trust bundle")
                && msg.contains("ca.crt"),
            "{msg}"
        );

        let foreign_op = other.client_cert("root", &[]).unwrap();
        let op = secret(
            "c-op",
            "1",
            &[
                (TLS_CRT, &foreign_op.cert_pem),
                (TLS_KEY, &foreign_op.key_pem),
            ],
        );
        let msg = check_chains("ns", "c", &read(server, Some(op), None), &hosts)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("ns/c-op") && msg.contains("Secret ns/c-server ca.crt"),
            "{msg}"
        );
    }

    #[test]
    fn the_trust_bundle_fingerprint_follows_the_cas_only() {
        let ca = TestCa::new("etcd-ca").unwrap();
        let new_ca = TestCa::new("new-ca").unwrap();
        let leaf = ca.server_cert(&["*.c.ns.svc"]).unwrap();
        let renewed = ca.server_cert(&["*.c.ns.svc"]).unwrap();
        let peer = tls_secret("p", &leaf, ca.cert_pem());
        let before = trust_bundle(None, Some(&peer)).unwrap();
        assert_eq!(before.len(), 16);
        // A renewed leaf from the same CA: no change.
        assert_eq!(
            trust_bundle(None, Some(&tls_secret("p", &renewed, ca.cert_pem()))),
            Some(before.clone())
        );
        // The same CA re-encoded (other line breaks): no change.
        let reencoded = ca.cert_pem().replace('\n', "\r\n");
        assert_eq!(
            trust_bundle(None, Some(&tls_secret("p", &leaf, &reencoded))),
            Some(before.clone())
        );
        // A new CA in the bundle: a change.
        let bundle = format!("{}{}", ca.cert_pem(), new_ca.cert_pem());
        assert_ne!(
            trust_bundle(None, Some(&tls_secret("p", &leaf, &bundle))),
            Some(before.clone())
        );
        // The server CA counts only when given (client mTLS).
        assert_ne!(trust_bundle(Some(&peer), Some(&peer)), Some(before));
        assert_eq!(trust_bundle(None, None), None);
    }

    #[test]
    fn the_ca_trust_lists_the_bundle_cas_and_the_ca_each_presented_certificate_chains_to() {
        let old = TestCa::new("old-ca").unwrap();
        let new = TestCa::new("new-ca").unwrap();
        let fp = |ca: &TestCa| ca_fingerprint(ca.cert_der());
        let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
        let peer_leaf = new.server_cert(&["*.c.ns.svc"]).unwrap();
        let op_leaf = old.client_cert("root", &[]).unwrap();
        let server = tls_secret(
            "c-server",
            &old.server_cert(&["x"]).unwrap(),
            old.cert_pem(),
        );
        let op = secret(
            "c-op",
            "1",
            &[(TLS_CRT, &op_leaf.cert_pem), (TLS_KEY, &op_leaf.key_pem)],
        );
        let peer = tls_secret("c-peer", &peer_leaf, &bundle);
        let t = ca_trust("ns", Some(&server), Some(&op), Some(&peer));
        assert_eq!(t.bundles.peer, [fp(&old), fp(&new)].into_iter().collect());
        assert_eq!(t.bundles.client, [fp(&old)].into_iter().collect());
        assert_eq!(t.presented.len(), 2);
        assert_eq!(t.presented[0].bundle, Bundle::Peer);
        assert_eq!(t.presented[0].secret, "ns/c-peer");
        assert_eq!(t.presented[0].origin, "spec.tls.peer.secretRef");
        assert_eq!(t.presented[0].anchors, [fp(&new)].into_iter().collect());
        assert_eq!(t.presented[1].bundle, Bundle::Client);
        assert_eq!(t.presented[1].secret, "ns/c-op");
        assert_eq!(t.presented[1].anchors, [fp(&old)].into_iter().collect());
        // Server TLS without mTLS: etcd loads no client bundle, the operator presents nothing.
        let t = ca_trust("ns", Some(&server), None, Some(&peer));
        assert!(t.bundles.client.is_empty());
        assert_eq!(t.presented.len(), 1);
    }

    #[test]
    fn the_ca_change_time_is_the_latest_write_of_a_manager_owning_ca_crt() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let entry = |fields: serde_json::Value, s: i64| ManagedFieldsEntry {
            fields_v1: Some(FieldsV1(fields)),
            time: Some(Time(at(s))),
            ..Default::default()
        };
        let mut secret = Secret::default();
        secret.metadata.creation_timestamp = Some(Time(at(10)));
        assert_eq!(ca_changed(&secret), Some(at(10)));
        secret.metadata.managed_fields = Some(vec![
            entry(
                serde_json::json!({"f:data": {".": {}, "f:ca.crt": {}}}),
                100,
            ),
            entry(serde_json::json!({"f:metadata": {"f:labels": {}}}), 500),
        ]);
        assert_eq!(ca_changed(&secret), Some(at(100)));
        // A later write of ca.crt through stringData (kubectl apply of a stringData manifest).
        secret.metadata.managed_fields.as_mut().unwrap().push(entry(
            serde_json::json!({"f:stringData": {"f:ca.crt": {}}}),
            300,
        ));
        assert_eq!(ca_changed(&secret), Some(at(300)));
        // No entry names ca.crt: the latest write of any manager.
        secret.metadata.managed_fields = Some(vec![entry(serde_json::json!({}), 200)]);
        assert_eq!(ca_changed(&secret), Some(at(200)));
    }
}
