//! **Test support only** (feature `mint`): a throw-away CA and the leaf certificates tests need —
//! a server certificate with SANs, client certificates — plus [`SecretMount`], which lays files
//! out exactly as the kubelet mounts a Secret (timestamped directory, `..data` symlink swapped
//! atomically, one symlink per key). No binary of the project enables this feature.
//!
//! Keys are ECDSA P-256 (fast to generate); certificates are valid from yesterday for a year,
//! unless a test asks for another period ([`TestCa::server_cert_valid`]).

use std::io;
use std::ops::Range;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

/// Why minting or laying out test material failed.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    #[error("rcgen: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    KeyPair(#[from] crate::server::KeyPairError),
}

/// A self-signed test CA that signs server and client certificates.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
}

/// A leaf certificate and its key, as PEM (what a `kubernetes.io/tls` Secret holds) and DER.
#[derive(Clone, Debug)]
pub struct MintedCert {
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: CertificateDer<'static>,
    key_pkcs8_der: Vec<u8>,
}

impl MintedCert {
    /// The private key as DER (a fresh copy each call; `PrivateKeyDer` is not `Clone`).
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_pkcs8_der.clone()))
    }

    /// The pair as rustls serves it.
    pub fn certified_key(&self) -> Result<CertifiedKey, crate::server::KeyPairError> {
        crate::server::certified_key_from_pem(
            self.cert_pem.as_bytes(),
            self.key_pem.as_bytes(),
            Path::new("minted certificate"),
            Path::new("minted key"),
        )
    }
}

/// From yesterday for a year.
fn default_validity() -> Range<SystemTime> {
    let now = SystemTime::now();
    now - Duration::from_secs(24 * 3600)..now + Duration::from_secs(365 * 24 * 3600)
}

fn set_validity(params: &mut CertificateParams, validity: Range<SystemTime>) {
    params.not_before = validity.start.into();
    params.not_after = validity.end.into();
}

fn distinguished_name(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for org in organizations {
        dn.push(DnType::OrganizationName, *org);
    }
    dn
}

impl TestCa {
    /// A new CA with its own key.
    pub fn new(common_name: &str) -> Result<Self, MintError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, default_validity());
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate as PEM (a `ca.crt`, or a webhook configuration's caBundle).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// A server certificate (server and client auth usages) for the given SANs; entries that
    /// parse as IP addresses become IP SANs, the rest DNS SANs.
    pub fn server_cert(&self, sans: &[&str]) -> Result<MintedCert, MintError> {
        self.server_cert_valid(sans, default_validity())
    }

    /// Like [`TestCa::server_cert`], valid from `validity.start` to `validity.end` (in the past
    /// for an expired certificate, in the future for one not valid yet).
    pub fn server_cert_valid(
        &self,
        sans: &[&str],
        validity: Range<SystemTime>,
    ) -> Result<MintedCert, MintError> {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name =
            distinguished_name(sans.first().copied().unwrap_or("server"), &[]);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.sign(params, validity)
    }

    /// A client certificate with `CN=<common_name>` and one `O=` per organization (Kubernetes
    /// reads them as user name and groups, e.g. `O=system:masters`).
    pub fn client_cert(
        &self,
        common_name: &str,
        organizations: &[&str],
    ) -> Result<MintedCert, MintError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(common_name, organizations);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params, default_validity())
    }

    fn sign(
        &self,
        mut params: CertificateParams,
        validity: Range<SystemTime>,
    ) -> Result<MintedCert, MintError> {
        set_validity(&mut params, validity);
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(MintedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_pkcs8_der: key.serialize_der(),
        })
    }
}

/// A directory laid out like a kubelet Secret volume:
///
/// ```text
/// dir/..2026_01_02_15_04_05.000000001/tls.crt   the payload of one revision
/// dir/..data -> ..2026_01_02_15_04_05.000000001  swapped atomically (rename of ..data_tmp)
/// dir/tls.crt -> ..data/tls.crt                  stable names, created once
/// ```
///
/// Each [`SecretMount::write`] is one revision, replacing the previous one atomically, as the
/// kubelet's atomic writer does on a Secret update.
pub struct SecretMount {
    dir: PathBuf,
}

static REVISION: AtomicU64 = AtomicU64::new(0);

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> MintError + 'a {
    move |source| MintError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

impl SecretMount {
    /// Use `dir` (created if missing) as the mount point.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, MintError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(io_err("cannot create", &dir))?;
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Publish a new revision holding exactly `files` (name, content).
    pub fn write(&self, files: &[(&str, &[u8])]) -> Result<(), MintError> {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let revision = REVISION.fetch_add(1, Ordering::Relaxed);
        let ts_name = format!(
            "..{}_{:09}.{:06}",
            since_epoch.as_secs(),
            since_epoch.subsec_nanos(),
            revision
        );
        let ts_dir = self.dir.join(&ts_name);
        std::fs::create_dir(&ts_dir).map_err(io_err("cannot create", &ts_dir))?;
        for (name, content) in files {
            let path = ts_dir.join(name);
            std::fs::write(&path, content).map_err(io_err("cannot write", &path))?;
        }

        let data = self.dir.join("..data");
        let previous = std::fs::read_link(&data).ok();
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&ts_name, &tmp).map_err(io_err("cannot link", &tmp))?;
        std::fs::rename(&tmp, &data).map_err(io_err("cannot rename onto", &data))?;

        for (name, _) in files {
            let link = self.dir.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(name), &link)
                    .map_err(io_err("cannot link", &link))?;
            }
        }
        if let Some(previous) = previous {
            let old = self.dir.join(previous);
            std::fs::remove_dir_all(&old).map_err(io_err("cannot remove", &old))?;
        }
        Ok(())
    }

    /// Publish a `kubernetes.io/tls` revision: `tls.crt`, `tls.key` and, when given, `ca.crt`.
    pub fn write_tls(&self, cert: &MintedCert, ca: Option<&TestCa>) -> Result<(), MintError> {
        self.write_tls_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes(), ca)
    }

    /// Like [`SecretMount::write_tls`] with arbitrary bytes (for broken-rotation tests).
    pub fn write_tls_pem(
        &self,
        cert_pem: &[u8],
        key_pem: &[u8],
        ca: Option<&TestCa>,
    ) -> Result<(), MintError> {
        let mut files: Vec<(&str, &[u8])> = vec![("tls.crt", cert_pem), ("tls.key", key_pem)];
        if let Some(ca) = ca {
            files.push(("ca.crt", ca.cert_pem().as_bytes()));
        }
        self.write(&files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_mount_swaps_the_data_symlink_and_keeps_stable_names() {
        let tmp = tempfile::tempdir().unwrap();
        let mount = SecretMount::new(tmp.path().join("certs")).unwrap();
        mount.write(&[("tls.crt", b"one")]).unwrap();
        let first = std::fs::read_link(mount.dir().join("..data")).unwrap();
        mount.write(&[("tls.crt", b"two")]).unwrap();
        let second = std::fs::read_link(mount.dir().join("..data")).unwrap();
        assert_ne!(first, second);
        assert!(!mount.dir().join(&first).exists(), "old revision removed");
        assert_eq!(
            std::fs::read_link(mount.dir().join("tls.crt")).unwrap(),
            Path::new("..data/tls.crt")
        );
        assert_eq!(std::fs::read(mount.dir().join("tls.crt")).unwrap(), b"two");
    }
}
