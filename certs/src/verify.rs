//! Checks a certificate against the CA bundle that will verify it and the names it will be
//! dialed by, before anything relies on it: the same WebPKI verification a TLS peer runs during
//! the handshake (chain to a trusted root, validity period, extended key usage, DNS/IP SAN), so
//! a mismatch is found when a Secret is read, not as a handshake failure in some log.

use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, RootCertStore};

use crate::pem::PemError;

/// Why a certificate would be refused.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("the CA bundle holds no usable certificate: {0}")]
    NoRoots(String),
    #[error("it is not valid for {name}")]
    NotValidForName { name: String },
    #[error("it is not signed by a CA in the trust bundle")]
    UnknownIssuer,
    #[error("it has expired")]
    Expired,
    #[error("it is not valid yet")]
    NotValidYet,
    #[error("its extended key usage does not allow {usage}")]
    WrongUsage { usage: &'static str },
    #[error("it is rejected: {0}")]
    Other(String),
}

impl VerifyError {
    fn from_rustls(e: rustls::Error, name: &str, usage: &'static str) -> Self {
        match e {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => VerifyError::NotValidForName {
                    name: name.to_string(),
                },
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    VerifyError::UnknownIssuer
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    VerifyError::Expired
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    VerifyError::NotValidYet
                }
                CertificateError::InvalidPurpose
                | CertificateError::InvalidPurposeContext { .. } => {
                    VerifyError::WrongUsage { usage }
                }
                other => VerifyError::Other(format!("{other:?}")),
            },
            other => VerifyError::Other(other.to_string()),
        }
    }
}

fn roots(ca_pem: &[u8], origin: &str) -> Result<RootCertStore, VerifyError> {
    let cas = crate::pem::parse_certificates(ca_pem, std::path::Path::new(origin))?;
    let mut store = RootCertStore::empty();
    let (_, ignored) = store.add_parsable_certificates(cas);
    if store.is_empty() {
        return Err(VerifyError::NoRoots(format!(
            "{ignored} certificate(s) in {origin} cannot be used as trust anchors"
        )));
    }
    Ok(store)
}

fn chain(cert_pem: &[u8], origin: &str) -> Result<Vec<CertificateDer<'static>>, VerifyError> {
    Ok(crate::pem::parse_certificates(
        cert_pem,
        std::path::Path::new(origin),
    )?)
}

/// Would a TLS client trusting `ca_pem` accept `cert_pem` (leaf first, then intermediates) from
/// a server it dials as `name` (a DNS name or an IP address)?
pub fn server_cert(
    ca_pem: &[u8],
    cert_pem: &[u8],
    name: &str,
    origin: &str,
) -> Result<(), VerifyError> {
    let roots = roots(ca_pem, origin)?;
    let certs = chain(cert_pem, origin)?;
    let Some((leaf, intermediates)) = certs.split_first() else {
        return Err(VerifyError::Other("no certificate".into()));
    };
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots.into(),
        crate::provider(),
    )
    .build()
    .map_err(|e| VerifyError::NoRoots(e.to_string()))?;
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|e| VerifyError::Other(format!("{name:?} is not a DNS name or IP: {e}")))?;
    verifier
        .verify_server_cert(leaf, intermediates, &server_name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| VerifyError::from_rustls(e, name, "serverAuth"))
}

/// Would a TLS server trusting `ca_pem` for client certificates accept `cert_pem`?
pub fn client_cert(ca_pem: &[u8], cert_pem: &[u8], origin: &str) -> Result<(), VerifyError> {
    let roots = roots(ca_pem, origin)?;
    let certs = chain(cert_pem, origin)?;
    let Some((leaf, intermediates)) = certs.split_first() else {
        return Err(VerifyError::Other("no certificate".into()));
    };
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), crate::provider())
        .build()
        .map_err(|e| VerifyError::NoRoots(e.to_string()))?;
    verifier
        .verify_client_cert(leaf, intermediates, UnixTime::now())
        .map(|_| ())
        .map_err(|e| VerifyError::from_rustls(e, "", "clientAuth"))
}

/// The certificates of the bundle `ca_pem` that `cert_pem` (leaf first, then intermediates) is
/// accepted against as a client certificate, each tried as the only trust anchor: the CAs a
/// verifier must hold to accept it. Empty when none does (the usual [`client_cert`] error says
/// why).
pub fn client_cert_anchors(
    ca_pem: &[u8],
    cert_pem: &[u8],
    origin: &str,
) -> Result<Vec<CertificateDer<'static>>, VerifyError> {
    let cas = crate::pem::parse_certificates(ca_pem, std::path::Path::new(origin))?;
    let certs = chain(cert_pem, origin)?;
    let Some((leaf, intermediates)) = certs.split_first() else {
        return Err(VerifyError::Other("no certificate".into()));
    };
    let mut out = Vec::new();
    for ca in cas {
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates([ca.clone()]);
        if added == 0 {
            continue;
        }
        let Ok(verifier) =
            WebPkiClientVerifier::builder_with_provider(store.into(), crate::provider()).build()
        else {
            continue;
        };
        if verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .is_ok()
        {
            out.push(ca);
        }
    }
    Ok(out)
}

/// When the first certificate of `cert_pem` (the leaf of a chain) stops being valid, in seconds
/// since 1970; `None` when there is no certificate or it does not parse. For monitoring: what a
/// verifier does with it is [`server_cert`] and [`client_cert`].
pub fn not_after(cert_pem: &[u8]) -> Option<i64> {
    let chain = chain(cert_pem, "tls.crt").ok()?;
    let leaf = chain.first()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mint::TestCa;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_certificate_from_the_bundle_ca_for_the_dialed_name_passes() {
        let ca = TestCa::new("ca").unwrap();
        let leaf = ca.server_cert(&["*.c.ns.svc"]).unwrap();
        server_cert(
            ca.cert_pem().as_bytes(),
            leaf.cert_pem.as_bytes(),
            "c-abcde.c.ns.svc",
            "t",
        )
        .unwrap();
        client_cert(ca.cert_pem().as_bytes(), leaf.cert_pem.as_bytes(), "t").unwrap();
    }

    #[test]
    fn not_after_reads_the_leaf_and_refuses_what_is_no_certificate() {
        let ca = TestCa::new("ca").unwrap();
        let day = Duration::from_secs(86_400);
        let now = SystemTime::now();
        let leaf = ca
            .server_cert_valid(&["*.c.ns.svc"], now - day..now + 10 * day)
            .unwrap();
        let want = (now + 10 * day)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let got = not_after(leaf.cert_pem.as_bytes()).unwrap();
        assert!((got - want).abs() <= 1, "{got} vs {want}");
        assert_eq!(not_after(b"not a certificate"), None);
        assert_eq!(not_after(b""), None);
    }

    #[test]
    fn wrong_name_foreign_ca_expiry_and_usage_are_told_apart() {
        let ca = TestCa::new("ca").unwrap();
        let other = TestCa::new("other").unwrap();
        let leaf = ca.server_cert(&["*.c.ns.svc"]).unwrap();
        let err = server_cert(
            ca.cert_pem().as_bytes(),
            leaf.cert_pem.as_bytes(),
            "m.other.ns.svc",
            "t",
        )
        .unwrap_err();
        assert!(
            matches!(&err, VerifyError::NotValidForName { name } if name == "m.other.ns.svc"),
            "{err:?}"
        );
        let err = server_cert(
            other.cert_pem().as_bytes(),
            leaf.cert_pem.as_bytes(),
            "m.c.ns.svc",
            "t",
        )
        .unwrap_err();
        assert!(matches!(err, VerifyError::UnknownIssuer), "{err:?}");
        let err =
            client_cert(other.cert_pem().as_bytes(), leaf.cert_pem.as_bytes(), "t").unwrap_err();
        assert!(matches!(err, VerifyError::UnknownIssuer), "{err:?}");

        let day = Duration::from_secs(86_400);
        let now = SystemTime::now();
        let expired = ca
            .server_cert_valid(&["*.c.ns.svc"], now - 3 * day..now - day)
            .unwrap();
        let err = server_cert(
            ca.cert_pem().as_bytes(),
            expired.cert_pem.as_bytes(),
            "m.c.ns.svc",
            "t",
        )
        .unwrap_err();
        assert!(matches!(err, VerifyError::Expired), "{err:?}");

        let client_only = ca.client_cert("root", &[]).unwrap();
        let err = server_cert(
            ca.cert_pem().as_bytes(),
            client_only.cert_pem.as_bytes(),
            "m.c.ns.svc",
            "t",
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                VerifyError::WrongUsage {
                    usage: "serverAuth"
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn a_bundle_of_old_and_new_ca_accepts_leaves_of_either() {
        let old = TestCa::new("old").unwrap();
        let new = TestCa::new("new").unwrap();
        let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
        for ca in [&old, &new] {
            let leaf = ca.server_cert(&["*.c.ns.svc"]).unwrap();
            server_cert(
                bundle.as_bytes(),
                leaf.cert_pem.as_bytes(),
                "m.c.ns.svc",
                "t",
            )
            .unwrap();
        }
    }

    #[test]
    fn the_anchors_of_a_client_certificate_are_the_bundle_cas_that_issued_it() {
        let old = TestCa::new("old").unwrap();
        let new = TestCa::new("new").unwrap();
        let leaf = new.client_cert("peer", &[]).unwrap();
        let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
        let anchors =
            client_cert_anchors(bundle.as_bytes(), leaf.cert_pem.as_bytes(), "t").unwrap();
        let new_der =
            crate::pem::parse_certificates(new.cert_pem().as_bytes(), std::path::Path::new("t"))
                .unwrap();
        assert_eq!(anchors, new_der);
        let anchors =
            client_cert_anchors(old.cert_pem().as_bytes(), leaf.cert_pem.as_bytes(), "t").unwrap();
        assert!(anchors.is_empty());
    }
}
