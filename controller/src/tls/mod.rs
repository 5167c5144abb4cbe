//! TLS material of a cluster, from the user's own Secrets (`spec.tls.client.serverSecretRef`,
//! `operatorClientSecretRef`, `spec.tls.peer.secretRef`) or from the Secrets cert-manager issues
//! for the operator's Certificates (names from [`TlsSecrets`], the one place that maps the spec
//! to Secrets). Owns two things: the operator's etcd client material (trust from the server
//! Secret's `ca.crt`, identity from the operator-client Secret's `tls.crt`/`tls.key`), and the
//! check that the Secrets member Pods mount hold what etcd reads. A missing or broken Secret is
//! reported by name (a condition), never by Pods stuck in ContainerCreating or etcd
//! crash-looping. Reads Secrets; writes nothing.
//!
//! This file holds the reads (the only I/O: Secrets by name, through the API) and what they
//! return; the checks are pure and live beside it: one Secret's keys and the operator's client
//! material in `secret.rs`, the chains and names of the certificates in `chains.rs`, the CA
//! bundles members trust in `trust.rs`.

mod chains;
mod secret;
mod trust;

pub use api::v1alpha2::TlsRole as Role;
use api::v1alpha2::{TlsSecret, TlsSecrets, TlsSpec};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

pub use secret::{ca_changed, check_mounted, client_tls, ReadSecret, TlsSecretError};
pub use trust::{ca_fingerprint, trust_bundle, Bundle, CaSet, CaTrust, Presented};

use chains::check_chains;
use trust::ca_trust;

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

/// When the certificate (`tls.crt`) of each TLS Secret read expires, by Secret name, in
/// seconds since 1970. For the metrics: an expired or unverifiable certificate is listed too
/// (that is when it matters), a `tls.crt` that does not parse is not.
pub type Expiries = Vec<(String, i64)>;

fn expiries(read: &Read) -> Expiries {
    [&read.server, &read.peer, &read.operator_client]
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some((
                s.name.clone(),
                certs::verify::not_after(secret::key(s, TLS_CRT))?,
            ))
        })
        .collect()
}

/// [`load`], and beyond it: every certificate checked the way its verifier will check it
/// (chain to the trusted CA, validity, usage, and the names of `hosts`, the members' DNS names),
/// so a wrong SAN or a CA that does not match is reported naming the Secret before a handshake
/// fails somewhere; and the trust-bundle fingerprint. Beside the result, the certificates'
/// [`Expiries`] of every Secret that could be read, whether or not the checks pass.
pub async fn load_checked(
    client: &Client,
    namespace: &str,
    cluster: &str,
    tls: Option<&TlsSpec>,
    hosts: &[String],
) -> (Expiries, Result<Loaded, TlsSecretError>) {
    let read = match read_all(client, namespace, cluster, tls).await {
        Ok(read) => read,
        Err(e) => return (Vec::new(), Err(e)),
    };
    (expiries(&read), check(namespace, cluster, &read, hosts))
}

fn check(
    namespace: &str,
    cluster: &str,
    read: &Read,
    hosts: &[String],
) -> Result<Loaded, TlsSecretError> {
    let client = match &read.server {
        None => None,
        Some(server) => Some(client_tls(
            namespace,
            server,
            read.operator_client.as_ref(),
        )?),
    };
    check_chains(namespace, cluster, read, hosts)?;
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

#[cfg(test)]
mod tests;
