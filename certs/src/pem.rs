//! Reading certificates and private keys from PEM files. Errors name the file and say what was
//! missing or malformed, because the usual cause is a Secret mounted with the wrong keys.

use std::io;
use std::path::{Path, PathBuf};

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
    #[error("{path} is not valid PEM: {source}")]
    Malformed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} holds no PEM `CERTIFICATE` block (is it the right file of the Secret?)")]
    NoCertificates { path: PathBuf },
    #[error(
        "{path} holds no PEM private key (expected a `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` block)"
    )]
    NoPrivateKey { path: PathBuf },
}

/// Read a file in full, naming it in the error.
pub fn read_file(path: &Path) -> Result<Vec<u8>, PemError> {
    std::fs::read(path).map_err(|source| PemError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every `CERTIFICATE` block in `pem`, in order (leaf first for a chain). `origin` names the file
/// in errors. At least one certificate is required.
pub fn parse_certificates(
    pem: &[u8],
    origin: &Path,
) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certs = rustls_pemfile::certs(&mut io::Cursor::new(pem))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| PemError::Malformed {
            path: origin.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(PemError::NoCertificates {
            path: origin.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key in `pem` (PKCS#8, PKCS#1 or SEC1). `origin` names the file in errors.
pub fn parse_private_key(pem: &[u8], origin: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    rustls_pemfile::private_key(&mut io::Cursor::new(pem))
        .map_err(|source| PemError::Malformed {
            path: origin.to_path_buf(),
            source,
        })?
        .ok_or_else(|| PemError::NoPrivateKey {
            path: origin.to_path_buf(),
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
}
