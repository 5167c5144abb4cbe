//! Client configs for dialing TLS servers this project talks to (etcd members, the webhook in
//! tests): trust exactly the given CA bundle, optionally present a client certificate (mTLS).
//! Built on aws-lc-rs, TLS 1.2+ only. The inputs are bytes (e.g. the keys of a Secret read from
//! the API) or files; nothing here reads the system trust store.

use std::path::Path;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::pem::{self, PemError};
use crate::server::PROTOCOL_VERSIONS;

/// Why a client config cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("CA certificate #{index} in {origin} cannot be trusted: {source}")]
    BadCa {
        origin: String,
        index: usize,
        #[source]
        source: rustls::Error,
    },
    #[error("the client certificate or key in {origin} cannot be used: {source}")]
    BadIdentity {
        origin: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the crypto provider rejects the protocol versions TLS 1.2/1.3: {0}")]
    Versions(#[source] rustls::Error),
}

/// A client certificate chain and its key.
pub struct ClientIdentity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// A client config trusting `ca_bundle` only, presenting `identity` when given. `origin` names
/// the source of the material in errors (a file, or `Secret ns/name`).
pub fn client_config(
    ca_bundle: &[CertificateDer<'static>],
    identity: Option<ClientIdentity>,
    origin: &str,
) -> Result<ClientConfig, ClientConfigError> {
    let mut roots = RootCertStore::empty();
    for (index, ca) in ca_bundle.iter().enumerate() {
        roots
            .add(ca.clone())
            .map_err(|source| ClientConfigError::BadCa {
                origin: origin.to_string(),
                index,
                source,
            })?;
    }
    let builder = ClientConfig::builder_with_provider(crate::provider())
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .map_err(ClientConfigError::Versions)?
        .with_root_certificates(roots);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some(ClientIdentity { chain, key }) => {
            builder.with_client_auth_cert(chain, key).map_err(|source| {
                ClientConfigError::BadIdentity {
                    origin: origin.to_string(),
                    source,
                }
            })
        }
    }
}

/// [`client_config`] from PEM bytes: a CA bundle, and optionally a certificate chain and key.
pub fn client_config_from_pem(
    ca_pem: &[u8],
    identity_pem: Option<(&[u8], &[u8])>,
    origin: &str,
) -> Result<ClientConfig, ClientConfigError> {
    let ca = pem::parse_certificates(ca_pem, Path::new(&format!("{origin} (CA bundle)")))?;
    let identity = match identity_pem {
        None => None,
        Some((cert, key)) => Some(ClientIdentity {
            chain: pem::parse_certificates(cert, Path::new(&format!("{origin} (certificate)")))?,
            key: pem::parse_private_key(key, Path::new(&format!("{origin} (key)")))?,
        }),
    };
    client_config(&ca, identity, origin)
}

/// [`client_config`] from files: a CA bundle, and optionally a certificate chain and key file.
pub fn client_config_from_files(
    ca_bundle: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientConfig, ClientConfigError> {
    let ca = pem::read_certificates(ca_bundle)?;
    let identity = match identity {
        None => None,
        Some((cert, key)) => Some(ClientIdentity {
            chain: pem::read_certificates(cert)?,
            key: pem::read_private_key(key)?,
        }),
    };
    client_config(&ca, identity, &ca_bundle.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mint::TestCa;

    #[test]
    fn config_with_and_without_client_certificate() {
        let ca = TestCa::new("client-test").unwrap();
        let client = ca.client_cert("etcd-operator", &[]).unwrap();
        assert!(
            !client_config_from_pem(ca.cert_pem().as_bytes(), None, "test")
                .unwrap()
                .client_auth_cert_resolver
                .has_certs()
        );
        let config = client_config_from_pem(
            ca.cert_pem().as_bytes(),
            Some((client.cert_pem.as_bytes(), client.key_pem.as_bytes())),
            "test",
        )
        .unwrap();
        assert!(config.client_auth_cert_resolver.has_certs());
    }

    #[test]
    fn empty_ca_bundle_is_an_error_naming_the_origin() {
        let err = client_config_from_pem(b"", None, "Secret ns/etcd-ca")
            .err()
            .unwrap();
        assert!(err.to_string().contains("Secret ns/etcd-ca"), "{err}");
    }
}
