//! The control plane's PKI, minted fresh per control plane: a serving CA and the apiserver's
//! certificate, a client CA and the admin's client certificate (`O=system:masters`, so RBAC never
//! stands in a test's way), and the service-account signing key. All keys are ECDSA P-256, which
//! every component accepts (the apiserver signs service-account tokens with ES256).

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::Error;

/// Names the apiserver's certificate is valid for: loopback, and the in-cluster names a pod
/// would use (the pod runner points `KUBERNETES_SERVICE_HOST` at 127.0.0.1, but clients may
/// still verify against `kubernetes.default.svc`; on the real node Pods dial the `kubernetes`
/// Service's ClusterIP, the first address of `SERVICE_CLUSTER_IP_RANGE`, and the real nodes'
/// kubelets the host's relay on the node network, `crate::node::GATEWAY`).
pub const APISERVER_SANS: &[&str] = &[
    "127.0.0.1",
    "10.0.0.1",
    "10.217.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// A certificate authority that can sign more certificates (e.g. for a webhook under test).
pub struct Authority {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    pub fn new(common_name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A leaf certificate and its PKCS#8 key, both PEM.
    pub fn sign(&self, leaf: Leaf<'_>) -> Result<(String, String), Error> {
        let key = KeyPair::generate()?;
        let sans: Vec<String> = leaf.sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, leaf.common_name);
        for org in leaf.organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *org);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = leaf.usages.to_vec();
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// What a leaf certificate is for.
pub struct Leaf<'a> {
    pub common_name: &'a str,
    pub organizations: &'a [&'a str],
    pub sans: &'a [&'a str],
    pub usages: &'a [ExtendedKeyUsagePurpose],
}

/// The files of a minted PKI, all PEM.
pub struct Pki {
    pub serving_ca: Authority,
    pub client_ca: Authority,
    /// `serving-ca.crt`: what clients of the apiserver trust (also `--root-ca-file`).
    pub serving_ca_file: PathBuf,
    pub apiserver_cert_file: PathBuf,
    pub apiserver_key_file: PathBuf,
    /// `client-ca.crt`: the apiserver's `--client-ca-file`.
    pub client_ca_file: PathBuf,
    pub admin_cert_file: PathBuf,
    pub admin_key_file: PathBuf,
    /// Private key signing service-account tokens (`--service-account-signing-key-file`,
    /// kube-controller-manager's `--service-account-private-key-file`).
    pub service_account_key_file: PathBuf,
    /// Its public half (`--service-account-key-file`).
    pub service_account_pub_file: PathBuf,
    /// The front-proxy (request-header) CA and the apiserver's proxy client certificate, as a
    /// kubeadm cluster has them; without them kube-controller-manager and kube-scheduler log an
    /// error for the missing request-header CA several times a second.
    pub front_proxy_ca_file: PathBuf,
    pub front_proxy_client_cert_file: PathBuf,
    pub front_proxy_client_key_file: PathBuf,
    /// The apiserver's client certificate towards kubelets (`--kubelet-client-certificate`,
    /// `system:masters` as kubeadm's `apiserver-kubelet-client`): what a real kubelet, which
    /// authenticates and authorizes its callers, lets through for exec, logs and port-forward.
    pub kubelet_client_cert_file: PathBuf,
    pub kubelet_client_key_file: PathBuf,
}

/// The proxy client's name, `--requestheader-allowed-names`.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

impl Pki {
    /// Mint everything into `dir` (created if needed).
    pub fn mint(dir: &Path) -> Result<Self, Error> {
        fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        let write = |name: &str, pem: &str| -> Result<PathBuf, Error> {
            let path = dir.join(name);
            fs::write(&path, pem).map_err(Error::io(format!("writing {}", path.display())))?;
            Ok(path)
        };

        let serving_ca = Authority::new("etcd-operator-tests serving CA")?;
        let (apiserver_cert, apiserver_key) = serving_ca.sign(Leaf {
            common_name: "kube-apiserver",
            organizations: &[],
            sans: APISERVER_SANS,
            usages: &[ExtendedKeyUsagePurpose::ServerAuth],
        })?;
        let client_ca = Authority::new("etcd-operator-tests client CA")?;
        let (admin_cert, admin_key) = client_ca.sign(Leaf {
            common_name: "admin",
            organizations: &["system:masters"],
            sans: &[],
            usages: &[ExtendedKeyUsagePurpose::ClientAuth],
        })?;
        let sa_key = KeyPair::generate()?;
        let front_proxy_ca = Authority::new("etcd-operator-tests front-proxy CA")?;
        let (proxy_cert, proxy_key) = front_proxy_ca.sign(Leaf {
            common_name: FRONT_PROXY_CLIENT,
            organizations: &[],
            sans: &[],
            usages: &[ExtendedKeyUsagePurpose::ClientAuth],
        })?;

        let (kubelet_client_cert, kubelet_client_key) = client_ca.sign(Leaf {
            common_name: "kube-apiserver-kubelet-client",
            organizations: &["system:masters"],
            sans: &[],
            usages: &[ExtendedKeyUsagePurpose::ClientAuth],
        })?;

        Ok(Self {
            serving_ca_file: write("serving-ca.crt", &serving_ca.cert_pem)?,
            apiserver_cert_file: write("apiserver.crt", &apiserver_cert)?,
            apiserver_key_file: write("apiserver.key", &apiserver_key)?,
            client_ca_file: write("client-ca.crt", &client_ca.cert_pem)?,
            admin_cert_file: write("admin.crt", &admin_cert)?,
            admin_key_file: write("admin.key", &admin_key)?,
            service_account_key_file: write("service-account.key", &sa_key.serialize_pem())?,
            service_account_pub_file: write("service-account.pub", &sa_key.public_key_pem())?,
            front_proxy_ca_file: write("front-proxy-ca.crt", &front_proxy_ca.cert_pem)?,
            front_proxy_client_cert_file: write("front-proxy-client.crt", &proxy_cert)?,
            front_proxy_client_key_file: write("front-proxy-client.key", &proxy_key)?,
            kubelet_client_cert_file: write("apiserver-kubelet-client.crt", &kubelet_client_cert)?,
            kubelet_client_key_file: write("apiserver-kubelet-client.key", &kubelet_client_key)?,
            serving_ca,
            client_ca,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mints_every_file_as_pem() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::mint(dir.path()).unwrap();
        for (path, header) in [
            (&pki.serving_ca_file, "CERTIFICATE"),
            (&pki.apiserver_cert_file, "CERTIFICATE"),
            (&pki.apiserver_key_file, "PRIVATE KEY"),
            (&pki.client_ca_file, "CERTIFICATE"),
            (&pki.admin_cert_file, "CERTIFICATE"),
            (&pki.admin_key_file, "PRIVATE KEY"),
            (&pki.service_account_key_file, "PRIVATE KEY"),
            (&pki.service_account_pub_file, "PUBLIC KEY"),
            (&pki.front_proxy_ca_file, "CERTIFICATE"),
            (&pki.front_proxy_client_cert_file, "CERTIFICATE"),
            (&pki.front_proxy_client_key_file, "PRIVATE KEY"),
        ] {
            let text = fs::read_to_string(path).unwrap();
            assert!(
                text.starts_with(&format!("-----BEGIN {header}-----")),
                "{}: {text}",
                path.display()
            );
        }
    }
}
