//! Test support shared by the webhook's integration tests and its bench: a real webhook on
//! loopback with a minted certificate in a directory laid out like a mounted Secret, and small
//! HTTPS / HTTP clients (hyper over tokio-rustls, keep-alive) to talk to it.

// Each test binary uses part of this module; a failed set-up step should fail loudly.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use certs::mint::{SecretMount, TestCa};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use webhook::{Config, RunningWebhook};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub const CONTROLLER: &str = "system:serviceaccount:etcd-operator-system:etcd-operator";
pub const GROUP: &str = "etcd-operator.cozystack.io";

/// A webhook served on loopback, its Secret mount and the CA its certificate chains to.
pub struct Harness {
    pub tmp: tempfile::TempDir,
    pub mount: SecretMount,
    pub ca: TestCa,
    pub webhook: RunningWebhook,
}

impl Harness {
    /// A webhook with default flags and a certificate in place before it starts.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// Like [`Harness::start`] with flags changed by `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Self {
        Self::launch(tweak, true).await
    }

    /// A webhook whose Secret mount is still empty.
    pub async fn start_without_cert(tweak: impl FnOnce(&mut Config)) -> Self {
        Self::launch(tweak, false).await
    }

    async fn launch(tweak: impl FnOnce(&mut Config), with_cert: bool) -> Self {
        certs::install_default_provider();
        let tmp = tempfile::tempdir().unwrap();
        let mount = SecretMount::new(tmp.path().join("serving-certs")).unwrap();
        let ca = TestCa::new("webhook-test-ca").unwrap();
        if with_cert {
            // Mounted before the container starts, as the kubelet does.
            let cert = ca.server_cert(&["localhost", "127.0.0.1"]).unwrap();
            mount.write_tls(&cert, Some(&ca)).unwrap();
        }
        let mut config = Config::for_tests(mount.dir());
        tweak(&mut config);
        let webhook = webhook::start(config).await.unwrap();
        let harness = Self {
            tmp,
            mount,
            ca,
            webhook,
        };
        if with_cert {
            harness.wait_ready().await;
        }
        harness
    }

    /// Publish a fresh serving certificate for `localhost` / `127.0.0.1`.
    pub fn write_cert(&self) {
        let cert = self.ca.server_cert(&["localhost", "127.0.0.1"]).unwrap();
        self.mount.write_tls(&cert, Some(&self.ca)).unwrap();
    }

    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok((status, _)) = http_get(self.webhook.admin_addr, "/readyz").await {
                if status == StatusCode::OK {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "webhook not ready within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A keep-alive HTTPS connection to the admission port.
    pub async fn connect(&self) -> Connection {
        Connection::https(self.webhook.tls_addr, self.ca.cert_pem())
            .await
            .unwrap()
    }

    /// POST `body` to `path` on a new HTTPS connection.
    pub async fn post(&self, path: &str, body: impl Into<Bytes>) -> (StatusCode, Bytes) {
        self.connect().await.post(path, body).await.unwrap()
    }

    /// POST a review to `path`, require HTTP 200, and return the review's `response`.
    pub async fn review(&self, path: &str, review: &Value) -> Value {
        self.connect().await.review(path, review).await
    }

    pub async fn admin_get(&self, path: &str) -> (StatusCode, String) {
        let (status, body) = http_get(self.webhook.admin_addr, path).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// One client connection (HTTP/1.1 keep-alive, or HTTP/2 when negotiated with ALPN `h2`).
pub struct Connection {
    sender: Sender,
}

fn tls_client_config(ca_pem: &str, alpn: &[u8]) -> rustls::ClientConfig {
    let mut config =
        certs::client::client_config_from_pem(ca_pem.as_bytes(), None, "test CA").unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

impl Connection {
    /// HTTP/1.1 over TLS, trusting only `ca_pem`, checking the name `localhost`.
    pub async fn https(addr: SocketAddr, ca_pem: &str) -> Result<Self, BoxError> {
        let tls = Self::tls(addr, ca_pem, b"http/1.1").await?;
        let (sender, conn) = http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(Self {
            sender: Sender::H1(sender),
        })
    }

    /// HTTP/2 over TLS (ALPN `h2`), as the apiserver may use.
    pub async fn https_h2(addr: SocketAddr, ca_pem: &str) -> Result<Self, BoxError> {
        let tls = Self::tls(addr, ca_pem, b"h2").await?;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        Ok(Self {
            sender: Sender::H2(sender),
        })
    }

    /// A bare TLS stream (ALPN `alpn`), for tests that write HTTP by hand.
    pub async fn tls(
        addr: SocketAddr,
        ca_pem: &str,
        alpn: &[u8],
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, BoxError> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_client_config(ca_pem, alpn)));
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        Ok(connector
            .connect(ServerName::try_from("localhost")?, tcp)
            .await?)
    }

    /// Plain HTTP/1.1.
    pub async fn http(addr: SocketAddr) -> Result<Self, BoxError> {
        let tcp = TcpStream::connect(addr).await?;
        let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        Ok(Self {
            sender: Sender::H1(sender),
        })
    }

    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<(StatusCode, Bytes), BoxError> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, "localhost")
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body.into()))?;
        let response = match &mut self.sender {
            Sender::H1(sender) => {
                sender.ready().await?;
                sender.send_request(request).await?
            }
            Sender::H2(sender) => {
                sender.ready().await?;
                sender.send_request(request).await?
            }
        };
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    pub async fn post(
        &mut self,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<(StatusCode, Bytes), BoxError> {
        self.send("POST", path, body).await
    }

    /// POST a review, require HTTP 200 and a well-formed answer for the same uid, and return
    /// its `response`.
    pub async fn review(&mut self, path: &str, review: &Value) -> Value {
        let (status, body) = self
            .post(path, serde_json::to_vec(review).unwrap())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1", "{answer}");
        assert_eq!(answer["kind"], "AdmissionReview", "{answer}");
        let response = answer["response"].clone();
        assert_eq!(response["uid"], review["request"]["uid"], "{answer}");
        assert!(response["allowed"].is_boolean(), "{answer}");
        response
    }
}

/// GET over plain HTTP (the admin port).
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(StatusCode, Bytes), BoxError> {
    Connection::http(addr)
        .await?
        .send("GET", path, Bytes::new())
        .await
}

/// An `admission.k8s.io/v1` AdmissionReview as the apiserver sends it.
pub fn review(
    operation: &str,
    kind: &str,
    object: Option<Value>,
    old_object: Option<Value>,
    username: &str,
) -> Value {
    let name = object
        .as_ref()
        .or(old_object.as_ref())
        .and_then(|o| o["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_string();
    let plural = format!("{}s", kind.to_lowercase());
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{operation}-{kind}-{name}").to_lowercase(),
            "kind": {"group": GROUP, "version": "v1alpha2", "kind": kind},
            "resource": {"group": GROUP, "version": "v1alpha2", "resource": plural},
            "requestKind": {"group": GROUP, "version": "v1alpha2", "kind": kind},
            "requestResource": {"group": GROUP, "version": "v1alpha2", "resource": plural},
            "name": name,
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": username, "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old_object,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// An EtcdCluster object named `name` in `default`.
pub fn cluster(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
        "kind": "EtcdCluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec
    })
}

/// The JSONPatch of a mutate `response`, if any. The bytes arrive as a JSON array of numbers
/// (how kube serializes `Vec<u8>`, and Go decodes into `[]byte`) or as base64.
pub fn patch_of(response: &Value) -> Option<json_patch::Patch> {
    let raw: Vec<u8> = match &response["patch"] {
        Value::Null => return None,
        Value::String(encoded) => base64_decode(encoded),
        Value::Array(bytes) => bytes
            .iter()
            .map(|b| u8::try_from(b.as_u64().unwrap()).unwrap())
            .collect(),
        other => panic!("unexpected patch encoding: {other}"),
    };
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    Some(serde_json::from_slice(&raw).unwrap())
}

/// Apply the JSONPatch of a mutate `response` (if any) to `object`.
pub fn apply_patch(object: &Value, response: &Value) -> Value {
    let mut patched = object.clone();
    if let Some(patch) = patch_of(response) {
        json_patch::patch(&mut patched, &patch).unwrap();
    }
    patched
}

/// Standard base64 (what `Vec<u8>` becomes in the review JSON).
pub fn base64_decode(input: &str) -> Vec<u8> {
    fn value(c: u8) -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            other => panic!("not base64: {other}"),
        }
    }
    let mut out = Vec::new();
    for chunk in input.trim_end_matches('=').as_bytes().chunks(4) {
        let mut acc = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            acc |= value(*c) << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}
