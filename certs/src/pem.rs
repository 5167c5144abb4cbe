//! Reading certificates and private keys from PEM files. Errors name the file and say what was
//! missing or malformed, because the usual cause is a Secret mounted with the wrong keys.

use std::io;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why a PEM file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not valid PEM: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error("{path} holds no PEM `CERTIFICATE` block (is it the right file of the Secret?)")]
    NoCertificates { path: PathBuf },
    #[error(
        "{path} holds no PEM private key (expected a `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)"
    )]
    NoPrivateKey { path: PathBuf },
}

impl PemError {
    fn malformed(origin: &Path, err: &pem::Error) -> Self {
        PemError::Malformed {
            path: origin.to_path_buf(),
            reason: describe(err),
        }
    }
}

/// A PEM parse error in words: pki-types' own `Display` prints the marker lines as byte arrays.
fn describe(err: &pem::Error) -> String {
    match err {
        // `end_marker` holds the block's label (`CERTIFICATE`), not the whole line.
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "the file ends inside a `{label}` block (no `-----END {label}-----` line; cut short?)",
            label = String::from_utf8_lossy(end_marker).trim()
        ),
        pem::Error::IllegalSectionStart { line } => format!(
            "malformed `-----BEGIN` line `{}`",
            String::from_utf8_lossy(line).trim()
        ),
        pem::Error::Base64Decode(e) => format!("a block's base64 does not decode: {e}"),
        other => other.to_string(),
    }
}

/// Read a file in full, naming it in the error.
pub fn read_file(path: &Path) -> Result<Vec<u8>, PemError> {
    std::fs::read(path).map_err(|source| PemError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every `CERTIFICATE` block in `pem`, in order (leaf first for a chain); blocks of other kinds
/// are skipped. `origin` names the file in errors. At least one certificate is required.
pub fn parse_certificates(
    pem: &[u8],
    origin: &Path,
) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| PemError::malformed(origin, &err))?;
    if certs.is_empty() {
        return Err(PemError::NoCertificates {
            path: origin.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key in `pem` (PKCS#8, PKCS#1 or SEC1). `origin` names the file in errors.
pub fn parse_private_key(pem: &[u8], origin: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|err| match err {
        pem::Error::NoItemsFound => PemError::NoPrivateKey {
            path: origin.to_path_buf(),
        },
        err => PemError::malformed(origin, &err),
    })
}

/// A certificate chain (or CA bundle) from a file.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    parse_certificates(&read_file(path)?, path)
}

/// A private key from a file.
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    parse_private_key(&read_file(path)?, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_reported_as_no_certificate_naming_the_file() {
        let err = parse_certificates(b"not a pem file", Path::new("/mnt/tls.crt")).unwrap_err();
        assert!(matches!(err, PemError::NoCertificates { .. }));
        assert!(err.to_string().contains("/mnt/tls.crt"), "{err}");
    }

    #[test]
    fn a_certificate_file_is_not_a_key() {
        let ca = crate::mint::TestCa::new("pem-test").unwrap();
        let err =
            parse_private_key(ca.cert_pem().as_bytes(), Path::new("/mnt/tls.key")).unwrap_err();
        assert!(matches!(err, PemError::NoPrivateKey { .. }), "{err}");
        assert!(err.to_string().contains("/mnt/tls.key"), "{err}");
    }

    #[test]
    fn missing_file_error_names_the_path() {
        let err = read_certificates(Path::new("/nonexistent/dir/tls.crt")).unwrap_err();
        assert!(matches!(err, PemError::Read { .. }));
        assert!(
            err.to_string().contains("/nonexistent/dir/tls.crt"),
            "{err}"
        );
    }

    #[test]
    fn chain_keeps_leaf_first() {
        let ca = crate::mint::TestCa::new("pem-test").unwrap();
        let leaf = ca.server_cert(&["localhost"]).unwrap();
        let chain = format!("{}{}", leaf.cert_pem, ca.cert_pem());
        let certs = parse_certificates(chain.as_bytes(), Path::new("chain.pem")).unwrap();
        assert_eq!(certs.len(), 2);
        assert_eq!(certs[0], leaf.cert_der);
        assert_eq!(&certs[1], ca.cert_der());
    }

    #[test]
    fn a_key_file_is_not_a_certificate() {
        let ca = crate::mint::TestCa::new("pem-test").unwrap();
        let leaf = ca.server_cert(&["localhost"]).unwrap();
        let err =
            parse_certificates(leaf.key_pem.as_bytes(), Path::new("/mnt/tls.key")).unwrap_err();
        assert!(matches!(err, PemError::NoCertificates { .. }), "{err}");
    }

    #[test]
    fn key_is_found_after_a_certificate_in_one_file() {
        let ca = crate::mint::TestCa::new("pem-test").unwrap();
        let leaf = ca.server_cert(&["localhost"]).unwrap();
        let both = format!("{}{}", leaf.cert_pem, leaf.key_pem);
        let key = parse_private_key(both.as_bytes(), Path::new("/mnt/both.pem")).unwrap();
        assert!(matches!(key, PrivateKeyDer::Pkcs8(_)), "{key:?}");
    }

    #[test]
    fn truncated_certificate_names_the_missing_end_line_and_the_file() {
        let ca = crate::mint::TestCa::new("pem-test").unwrap();
        let pem = ca.cert_pem();
        let cut = &pem[..pem.find("-----END").unwrap()];
        let err = parse_certificates(cut.as_bytes(), Path::new("/mnt/ca.crt")).unwrap_err();
        assert!(matches!(err, PemError::Malformed { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("/mnt/ca.crt"), "{text}");
        assert!(text.contains("`-----END CERTIFICATE-----`"), "{text}");
    }

    #[test]
    fn bad_base64_in_a_key_is_malformed_not_missing() {
        let pem = "-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n";
        let err = parse_private_key(pem.as_bytes(), Path::new("/mnt/tls.key")).unwrap_err();
        assert!(matches!(err, PemError::Malformed { .. }), "{err}");
        assert!(err.to_string().contains("/mnt/tls.key"), "{err}");
    }
}
