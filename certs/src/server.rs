//! The server side: a [`CertResolver`] that hands rustls whatever certificate is current at the
//! moment of each handshake, and the [`server_config`] built around it (aws-lc-rs, TLS 1.2+).
//!
//! The resolver is the only place the serving certificate lives, so swapping it (see
//! [`crate::reload`]) takes effect on the next handshake without touching open connections or
//! restarting listeners.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, SupportedProtocolVersion};
use x509_parser::time::ASN1Time;

use crate::pem::{self, PemError};

/// The protocol versions every config of this crate allows: TLS 1.3 and 1.2, nothing older.
pub const PROTOCOL_VERSIONS: &[&SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// Why a certificate/key pair cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum KeyPairError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("the private key in {key} cannot be used: {source}")]
    UnusableKey {
        key: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the private key in {key} does not belong to the certificate in {cert}: {source}")]
    KeyMismatch {
        cert: String,
        key: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the certificate in {cert} cannot be read as X.509: {reason}")]
    UnreadableCertificate { cert: String, reason: String },
    #[error(
        "the certificate in {cert} expired at {not_after} (now {now}); renew it, e.g. see the cert-manager Certificate's status"
    )]
    Expired {
        cert: String,
        not_after: String,
        now: String,
    },
    #[error(
        "the certificate in {cert} is not valid before {not_before} (now {now}); it is judged again on every re-read, so a clock skew resolves itself"
    )]
    NotYetValid {
        cert: String,
        not_before: String,
        now: String,
    },
}

/// Why a server config cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ServerConfigError {
    #[error("the crypto provider rejects the protocol versions TLS 1.2/1.3: {0}")]
    Versions(#[source] rustls::Error),
}

/// Build a [`CertifiedKey`] from PEM bytes, checking that the key belongs to the leaf
/// certificate. `cert_origin` / `key_origin` name the files in errors.
pub fn certified_key_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_origin: &Path,
    key_origin: &Path,
) -> Result<CertifiedKey, KeyPairError> {
    let chain = pem::parse_certificates(cert_pem, cert_origin)?;
    let key = pem::parse_private_key(key_pem, key_origin)?;
    let provider = crate::provider();
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|source| KeyPairError::UnusableKey {
            key: key_origin.display().to_string(),
            source,
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    // Strict: a key whose public half cannot be compared is refused too, so a half-rotated
    // Secret (new cert, old key) never replaces a working pair.
    certified
        .keys_match()
        .map_err(|source| KeyPairError::KeyMismatch {
            cert: cert_origin.display().to_string(),
            key: key_origin.display().to_string(),
            source,
        })?;
    Ok(certified)
}

/// Check that `now` lies within the validity period of the leaf certificate of `certified`:
/// clients refuse a certificate outside it, so it is no better than none. `cert_origin` names
/// the file in errors.
pub fn check_validity(
    certified: &CertifiedKey,
    cert_origin: &Path,
    now: SystemTime,
) -> Result<(), KeyPairError> {
    let cert = || cert_origin.display().to_string();
    let unreadable = |reason: String| KeyPairError::UnreadableCertificate {
        cert: cert(),
        reason,
    };
    let leaf = certified
        .end_entity_cert()
        .map_err(|err| unreadable(err.to_string()))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|err| unreadable(err.to_string()))?;
    let validity = parsed.validity();
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
    });
    let shown = |t: i64| {
        ASN1Time::from_timestamp(t)
            .map(|t| t.to_string())
            .unwrap_or_else(|_| format!("{t} s since 1970"))
    };
    if now < validity.not_before.timestamp() {
        return Err(KeyPairError::NotYetValid {
            cert: cert(),
            not_before: validity.not_before.to_string(),
            now: shown(now),
        });
    }
    if now > validity.not_after.timestamp() {
        return Err(KeyPairError::Expired {
            cert: cert(),
            not_after: validity.not_after.to_string(),
            now: shown(now),
        });
    }
    Ok(())
}

/// Read a certificate chain and its key from files (see [`certified_key_from_pem`]).
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, KeyPairError> {
    let cert_pem = pem::read_file(cert)?;
    let key_pem = pem::read_file(key)?;
    certified_key_from_pem(&cert_pem, &key_pem, cert, key)
}

/// The current serving certificate, consulted on every TLS handshake. Empty until the first
/// certificate is stored; a handshake then fails (there is nothing to present) rather than
/// serving something made up.
#[derive(Default)]
pub struct CertResolver {
    current: ArcSwapOption<CertifiedKey>,
}

impl CertResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Serve `key` from the next handshake on.
    pub fn store(&self, key: Arc<CertifiedKey>) {
        self.current.store(Some(key));
    }

    /// The certificate handshakes get now, if any.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }

    /// Whether a certificate is loaded (readiness of a TLS server hangs on this).
    pub fn is_loaded(&self) -> bool {
        self.current.load().is_some()
    }

    /// When the certificate handshakes get now stops being valid, in seconds since 1970; `None`
    /// while none is loaded. For monitoring (a reloader only stores certificates that parse).
    pub fn not_after(&self) -> Option<i64> {
        let current = self.current()?;
        let leaf = current.end_entity_cert().ok()?;
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
        Some(parsed.validity().not_after.timestamp())
    }
}

impl fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertResolver")
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

/// A server config on aws-lc-rs, TLS 1.2+ only, without client authentication, taking its
/// certificate from `resolver` on every handshake. Set `alpn_protocols` on the result as the
/// server needs.
pub fn server_config(
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<ServerConfig, ServerConfigError> {
    Ok(ServerConfig::builder_with_provider(crate::provider())
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(ServerConfigError::Versions)?
        .with_no_client_auth()
        .with_cert_resolver(resolver))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mint::TestCa;
    use std::time::Duration;

    /// A server certificate for `localhost` from a fresh CA, and its key pair as loaded.
    fn minted_pair() -> (crate::mint::MintedCert, CertifiedKey) {
        let ca = TestCa::new("server-test").unwrap();
        let leaf = ca.server_cert(&["localhost"]).unwrap();
        let key = certified_key_from_pem(
            leaf.cert_pem.as_bytes(),
            leaf.key_pem.as_bytes(),
            Path::new("tls.crt"),
            Path::new("tls.key"),
        )
        .unwrap();
        (leaf, key)
    }

    #[test]
    fn pair_from_one_mint_is_accepted() {
        let (leaf, key) = minted_pair();
        assert_eq!(key.end_entity_cert().unwrap(), &leaf.cert_der);
    }

    #[test]
    fn resolver_reports_the_not_after_of_the_certificate_it_serves() {
        let resolver = CertResolver::new();
        assert_eq!(resolver.not_after(), None);
        let (leaf, key) = minted_pair();
        resolver.store(Arc::new(key));
        assert_eq!(
            resolver.not_after(),
            crate::verify::not_after(leaf.cert_pem.as_bytes())
        );
        assert!(resolver.not_after().is_some());
    }

    #[test]
    fn key_of_another_certificate_is_a_mismatch_naming_both_files() {
        let ca = TestCa::new("server-test").unwrap();
        let a = ca.server_cert(&["localhost"]).unwrap();
        let b = ca.server_cert(&["localhost"]).unwrap();
        let err = certified_key_from_pem(
            a.cert_pem.as_bytes(),
            b.key_pem.as_bytes(),
            Path::new("/mnt/tls.crt"),
            Path::new("/mnt/tls.key"),
        )
        .unwrap_err();
        assert!(matches!(err, KeyPairError::KeyMismatch { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("/mnt/tls.crt") && msg.contains("/mnt/tls.key"),
            "{msg}"
        );
    }

    #[test]
    fn validity_period_is_checked_against_the_given_time_naming_file_and_dates() {
        let ca = TestCa::new("server-test").unwrap();
        let now = SystemTime::now();
        let day = Duration::from_secs(24 * 3600);
        let leaf = ca
            .server_cert_valid(&["localhost"], now - 2 * day..now - day)
            .unwrap()
            .certified_key()
            .unwrap();
        let origin = Path::new("/mnt/tls.crt");
        let err = check_validity(&leaf, origin, now).unwrap_err();
        assert!(matches!(err, KeyPairError::Expired { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("/mnt/tls.crt") && msg.contains("renew"),
            "{msg}"
        );
        assert!(msg.contains("expired at") && msg.contains("now "), "{msg}");
        assert!(check_validity(&leaf, origin, now - day - day / 2).is_ok());
        let err = check_validity(&leaf, origin, now - 3 * day).unwrap_err();
        assert!(matches!(err, KeyPairError::NotYetValid { .. }), "{err}");
    }

    #[test]
    fn resolver_is_empty_until_a_certificate_is_stored() {
        let ca = TestCa::new("server-test").unwrap();
        let leaf = ca.server_cert(&["localhost"]).unwrap();
        let resolver = CertResolver::new();
        assert!(!resolver.is_loaded());
        resolver.store(Arc::new(leaf.certified_key().unwrap()));
        assert!(resolver.is_loaded());
    }

    #[test]
    fn only_tls12_and_tls13_are_offered() {
        let versions: Vec<_> = PROTOCOL_VERSIONS.iter().map(|v| v.version).collect();
        assert_eq!(
            versions,
            [
                rustls::ProtocolVersion::TLSv1_3,
                rustls::ProtocolVersion::TLSv1_2
            ]
        );
        assert!(server_config(Arc::new(CertResolver::new())).is_ok());
    }
}
