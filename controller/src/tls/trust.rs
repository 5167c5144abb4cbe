//! The CA bundles etcd loads once at start-up (`--trusted-ca-file` with client mTLS,
//! `--peer-trusted-ca-file`): their fingerprint, the set of CAs a member started with them
//! trusts, and the certificates members are presented. Whether a change of them is safe is
//! decided in `cluster::ca_set`, not here. Pure.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;

use super::secret::key;
use super::{ReadSecret, Role, CA_CRT, TLS_CRT};

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
    /// The latest [`ca_changed`](super::ca_changed) of the Secrets whose `ca.crt` etcd loads: a
    /// member whose etcd started before it may run an older bundle.
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

/// The [`ca_fingerprint`]s of the CAs in `secret`'s `ca.crt`.
fn ca_set_of(secret: &ReadSecret) -> BTreeSet<String> {
    certs::pem::parse_certificates(key(secret, CA_CRT), Path::new(CA_CRT))
        .map(|cas| cas.iter().map(|c| ca_fingerprint(c)).collect())
        .unwrap_or_default()
}

/// [`CaTrust`] of Secrets whose chains [`check_chains`](super::chains::check_chains) accepted:
/// `server` only with client mTLS (then `operator_client` is the certificate the operator
/// presents to every member).
pub(super) fn ca_trust(
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
