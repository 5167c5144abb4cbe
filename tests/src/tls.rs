//! TLS material for end-to-end tests: a cluster's CAs and certificates minted the way
//! docs/tls.md describes, the Secrets that carry them, the `spec.tls` that names them, and an
//! etcd client dialing the Ready members over TLS.

use std::time::Duration;

use api::v1alpha2::{ClientTlsSpec, EtcdClusterSpec, PeerTlsSpec, SecretReference, TlsSpec};
use certs::mint::{MintedCert, TestCa};
use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use crate::e2e::{spec, Env};
use crate::OrPanic;
use serde_json::json;

/// The material of one cluster: a client CA (server and operator-client certificates) and a
/// separate peer CA, with the SANs the reference's runbook lists.
pub struct Material {
    pub client_ca: TestCa,
    pub server: MintedCert,
    pub operator: MintedCert,
    pub peer_ca: TestCa,
    pub peer: MintedCert,
}

pub fn mint(cluster: &str, ns: &str) -> Material {
    let client_ca = TestCa::new(&format!("{cluster} client CA")).or_panic();
    let peer_ca = TestCa::new(&format!("{cluster} peer CA")).or_panic();
    let (server, operator, peer) = leaves(cluster, ns, &client_ca, &peer_ca);
    Material {
        client_ca,
        server,
        operator,
        peer_ca,
        peer,
    }
}

/// `(server, operator client, peer)` leaf certificates with the runbook's SANs, signed by the
/// given client and peer CAs.
pub fn leaves(
    cluster: &str,
    ns: &str,
    client_ca: &TestCa,
    peer_ca: &TestCa,
) -> (MintedCert, MintedCert, MintedCert) {
    let server = client_ca
        .server_cert(&[
            &format!("*.{cluster}.{ns}.svc"),
            &format!("*.{cluster}.{ns}.svc.cluster.local"),
            &format!("{cluster}.{ns}.svc"),
            &format!("{cluster}.{ns}.svc.cluster.local"),
            &format!("{cluster}-client.{ns}.svc"),
            &format!("{cluster}-client.{ns}.svc.cluster.local"),
            "localhost",
            "127.0.0.1",
        ])
        .or_panic();
    let operator = client_ca.client_cert("etcd-operator", &[]).or_panic();
    let peer = peer_ca
        .server_cert(&[
            &format!("*.{cluster}.{ns}.svc"),
            &format!("*.{cluster}.{ns}.svc.cluster.local"),
        ])
        .or_panic();
    (server, operator, peer)
}

pub async fn create_secret(env: &Env, ns: &str, name: &str, keys: &[(&str, &str)]) {
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        string_data: Some(
            keys.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .or_panic();
}

pub async fn create_server_secret(env: &Env, ns: &str, name: &str, m: &Material) {
    create_cert_secret(env, ns, name, &m.server, Some(m.client_ca.cert_pem())).await;
}

pub async fn create_operator_secret(env: &Env, ns: &str, name: &str, m: &Material) {
    create_cert_secret(env, ns, name, &m.operator, None).await;
}

pub async fn create_peer_secret(env: &Env, ns: &str, name: &str, m: &Material) {
    create_cert_secret(env, ns, name, &m.peer, Some(m.peer_ca.cert_pem())).await;
}

/// A TLS Secret holding `cert` (`tls.crt`, `tls.key`) and, when given, the CA (`ca.crt`).
async fn create_cert_secret(env: &Env, ns: &str, name: &str, cert: &MintedCert, ca: Option<&str>) {
    let mut keys = vec![
        ("tls.crt", cert.cert_pem.as_str()),
        ("tls.key", cert.key_pem.as_str()),
    ];
    keys.extend(ca.map(|ca| ("ca.crt", ca)));
    create_secret(env, ns, name, &keys).await;
}

pub fn tls_spec(
    replicas: i32,
    server: Option<&str>,
    operator: Option<&str>,
    peer: Option<&str>,
) -> EtcdClusterSpec {
    EtcdClusterSpec {
        tls: Some(TlsSpec {
            client: server.map(|s| ClientTlsSpec {
                server_secret_ref: Some(SecretReference::new(s)),
                operator_client_secret_ref: operator.map(SecretReference::new),
                cert_manager: None,
            }),
            peer: peer.map(|p| PeerTlsSpec {
                secret_ref: Some(SecretReference::new(p)),
                cert_manager: None,
            }),
        }),
        ..spec(replicas)
    }
}

/// An etcd client on the Ready members, `https` with the given CA and optional identity.
pub async fn dial(
    env: &Env,
    ns: &str,
    cluster: &str,
    tls: Option<(&str, Option<(&str, &str)>)>,
) -> etcd_client::Client {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoints: Vec<String> = env
        .ready_pods(ns, cluster)
        .await
        .iter()
        .map(|p| format!("{scheme}://{}.{cluster}.{ns}.svc:2379", p.name_any()))
        .collect();
    assert!(!endpoints.is_empty(), "{ns}/{cluster}: no ready member");
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(10));
    if let Some((ca, identity)) = tls {
        let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        if let Some((cert, key)) = identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        options = options.with_tls(config);
    }
    etcd_client::Client::connect(endpoints, Some(options))
        .await
        .or_panic()
}

/// `(certificate, key)` PEM of a minted certificate, for [`dial`].
pub fn pair(c: &MintedCert) -> (&str, &str) {
    (&c.cert_pem, &c.key_pem)
}

/// Merge `keys` into a Secret (`stringData`).
pub async fn patch_secret(env: &Env, ns: &str, name: &str, keys: &[(&str, &str)]) {
    let data: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    Api::<Secret>::namespaced(env.client(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "stringData": data })),
        )
        .await
        .or_panic();
}

/// The leaf certificate (DER) a TLS listener at `host:port` presents to a client trusting
/// `ca_pem` and presenting `identity`.
pub async fn served_certificate(
    host: &str,
    port: u16,
    ca_pem: &str,
    identity: (&str, &str),
) -> Result<Vec<u8>, String> {
    let config = certs::client::client_config_from_pem(
        ca_pem.as_bytes(),
        Some((identity.0.as_bytes(), identity.1.as_bytes())),
        "test client",
    )
    .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("connect {host}:{port}: {e}"))?;
    let name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .map_err(|_| format!("TLS handshake with {host}:{port} timed out"))?
        .map_err(|e| format!("TLS handshake with {host}:{port}: {e}"))?;
    let (_, session) = tls.get_ref();
    session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or_else(|| format!("{host}:{port} presented no certificate"))
}

/// The DER of the first certificate in `pem`.
pub fn der_of(pem: &str) -> Vec<u8> {
    certs::pem::parse_certificates(pem.as_bytes(), std::path::Path::new("test"))
        .or_panic()
        .first()
        .map(|c| c.to_vec())
        .unwrap_or_default()
}

/// The cert-manager objects of `kind` (`Certificate`, `Issuer`, ...) in `ns`.
pub fn cm_api(env: &Env, ns: &str, kind: &str) -> Api<kube::api::DynamicObject> {
    Api::namespaced_with(
        env.client(),
        ns,
        &crate::env::cert_manager::api_resource(kind),
    )
}

/// Create a cert-manager object of `kind` from `body` (its metadata and spec).
pub async fn cm_create(env: &Env, ns: &str, kind: &str, body: serde_json::Value) {
    let mut object: kube::api::DynamicObject = serde_json::from_value(body).or_panic();
    object.types = Some(kube::core::TypeMeta {
        api_version: "cert-manager.io/v1".into(),
        kind: kind.into(),
    });
    cm_api(env, ns, kind)
        .create(&PostParams::default(), &object)
        .await
        .or_panic();
}

/// Ask cert-manager to re-issue `certificate` now: the `Issuing` condition `cmctl renew` sets.
/// The write carries the resourceVersion it read, and cert-manager writes the same status (its
/// readiness and issuing controllers): a write refused as a conflict (409) is made again on a
/// fresh read, as any client of an optimistically locked object does.
pub async fn renew(env: &Env, ns: &str, certificate: &str) {
    let api = cm_api(env, ns, "Certificate");
    crate::harness::eventually_every(
        &format!("Issuing=True written on Certificate {ns}/{certificate}"),
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(200),
        || async {
            let mut cert = api.get_status(certificate).await.or_panic();
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let mut conditions = cert.data["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            conditions.retain(|c| c["type"] != "Issuing");
            conditions.push(json!({
                "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                "message": "renewal requested by the test", "lastTransitionTime": now,
            }));
            cert.data["status"]["conditions"] = json!(conditions);
            match api
                .replace_status(certificate, &PostParams::default(), &cert)
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    Err(format!("conflict: {}", status.message))
                }
                Err(e) => panic!("setting Issuing=True on Certificate {ns}/{certificate}: {e}"),
            }
        },
    )
    .await;
}
