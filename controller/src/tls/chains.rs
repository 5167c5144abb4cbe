//! The checks of [`super::load_checked`] beyond the keys: every certificate verified the way
//! its verifier will (chain to the trusted CA, validity, usage, the members' DNS names), and a
//! failure named with the Secret and the fix. Pure: it takes the Secrets already read.

use super::secret::key;
use super::{Read, ReadSecret, Role, TlsSecretError, CA_CRT, TLS_CRT};

/// The error for a certificate of `secret` its verifier would refuse, named by where the Secret
/// comes from.
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

/// The checks of [`load_checked`](super::load_checked) on Secrets already read (and
/// key-checked). Without `hosts` (no member yet) the chains are checked, the names are not.
pub(super) fn check_chains(
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
                        "its tls.crt would be refused by etcd, which checks client certificates against {ca_secret} ca.crt: {e}{}",
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
                            "its tls.crt would be refused by the other members, which trust its ca.crt: {e}{}",
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
