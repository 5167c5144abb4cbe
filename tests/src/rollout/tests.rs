//! The writer's error classes, from real failures of a real etcd client against local servers
//! that fail the way a restarting member does (and the ways that are no restart), and the
//! read-back comparison.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{classify, compare_history, FailedWrite};
use crate::OrPanic;

/// Short enough for a quick test, long enough for a local answer.
const TIMEOUT: Duration = Duration::from_millis(800);

/// The error of one put through a fresh client with the writer's options (shorter timeouts).
async fn put_error(endpoint: String, tls: Option<(&str, &str, &str)>) -> etcd_client::Error {
    let mut options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(TIMEOUT)
        .with_timeout(TIMEOUT);
    if let Some((ca, cert, key)) = tls {
        options = options.with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(ca))
                .identity(etcd_client::Identity::from_pem(cert, key)),
        );
    }
    let mut client = match etcd_client::Client::connect([endpoint], Some(options)).await {
        Ok(client) => client,
        Err(e) => return e,
    };
    match client.put("k", "v", None).await {
        Ok(_) => panic!("the put was acknowledged"),
        Err(e) => e,
    }
}

/// Asserts the class of the error of a put to a plain endpoint on `port`.
async fn assert_class(port: u16, class: FailedWrite) {
    let e = put_error(format!("http://127.0.0.1:{port}"), None).await;
    assert_eq!(classify(&e), class, "{e:?}");
}

/// A local port; each accepted connection is handed to `serve`.
async fn server<F, Fut>(serve: F) -> u16
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.or_panic();
    let port = listener.local_addr().or_panic().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    port
}

/// A member that reads what the client sent first (its preface, SETTINGS and the request's
/// HEADERS), then writes an empty SETTINGS frame and `frame` (raw HTTP/2), and keeps the
/// connection open a while.
async fn h2_member(frame: &[u8]) -> u16 {
    let mut frames = vec![0, 0, 0, 4, 0, 0, 0, 0, 0];
    frames.extend_from_slice(frame);
    server(move |mut stream| {
        let frames = frames.clone();
        async move {
            let mut buf = vec![0u8; 4096];
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = stream.read(&mut buf).await;
            let _ = stream.write_all(&frames).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
    .await
}

/// A gRPC server that answers every request with `code` and `message` (a trailers-only
/// response, as etcd answers a refusal).
async fn grpc_refusing(code: u16, message: &'static str) -> u16 {
    server(move |stream| async move {
        let service = hyper::service::service_fn(move |_req| async move {
            http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", code.to_string())
                .header("grpc-message", message)
                .body(http_body_util::Empty::<bytes::Bytes>::new())
        });
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
            .await;
    })
    .await
}

#[tokio::test]
async fn a_refused_connection_is_unsent() {
    let closed = TcpListener::bind("127.0.0.1:0").await.or_panic();
    let port = closed.local_addr().or_panic().port();
    drop(closed);
    assert_class(port, FailedWrite::Unsent).await;
}

#[tokio::test]
async fn a_name_that_no_longer_resolves_is_unsent() {
    let e = put_error("http://member-gone.invalid:2379".into(), None).await;
    assert_eq!(classify(&e), FailedWrite::Unsent, "{e:?}");
}

#[tokio::test]
async fn a_stream_the_member_refused_is_unsent() {
    // RST_STREAM on stream 1 with REFUSED_STREAM (7).
    let port = h2_member(&[0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 7]).await;
    assert_class(port, FailedWrite::Unsent).await;
}

#[tokio::test]
async fn a_proposal_raft_dropped_is_unsent() {
    let port = grpc_refusing(2, "raft proposal dropped").await;
    assert_class(port, FailedWrite::Unsent).await;
}

#[tokio::test]
async fn a_request_left_unanswered_times_out_and_is_not_cut_off() {
    // Accepts and reads, never answers: the client's own deadline ends the request.
    let port = server(|mut s| async move {
        let mut buf = vec![0u8; 4096];
        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
    assert_class(port, FailedWrite::TimedOut).await;
}

#[tokio::test]
async fn a_connection_reset_mid_request_is_cut_off() {
    let port = server(|mut s| async move {
        let mut buf = vec![0u8; 4096];
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = s.read(&mut buf).await;
        // A reset, not a clean close: what a member's socket gives when its process dies. (A
        // zero linger never blocks the drop, which is what the deprecation warns of.)
        #[allow(deprecated)]
        let _ = s.set_linger(Some(Duration::ZERO));
    })
    .await;
    assert_class(port, FailedWrite::CutOff).await;
}

#[tokio::test]
async fn a_stream_dropped_with_the_members_goaway_is_cut_off() {
    // GOAWAY with last stream 0 and NO_ERROR: a member shutting down.
    let port = h2_member(&[0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).await;
    assert_class(port, FailedWrite::CutOff).await;
}

#[tokio::test]
async fn etcds_own_refusal_is_refused() {
    let port = grpc_refusing(14, "etcdserver: request timed out").await;
    assert_class(port, FailedWrite::Refused).await;
}

/// A TLS server with a certificate from `server_ca` that asks for a client certificate from
/// `client_ca`, serving HTTP/2 (it never answers a request).
async fn tls_member(server_ca: &certs::mint::TestCa, client_ca: &certs::mint::TestCa) -> u16 {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let leaf = server_ca.server_cert(&["localhost"]).or_panic();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(client_ca.cert_der().clone()).or_panic();
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .build()
        .or_panic();
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![leaf.cert_der.clone()], leaf.key_der())
        .or_panic();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    server(move |s| {
        let acceptor = acceptor.clone();
        async move {
            if let Ok(mut tls) = acceptor.accept(s).await {
                let mut buf = vec![0u8; 4096];
                let _ = tls.read(&mut buf).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    })
    .await
}

/// The error of a put to a [`tls_member`] by a client that trusts the member's CA or another,
/// and presents a certificate from the CA the member trusts or from another.
async fn tls_put_error(trusts_member: bool, trusted_by_member: bool) -> etcd_client::Error {
    let server_ca = certs::mint::TestCa::new("server CA").or_panic();
    let client_ca = certs::mint::TestCa::new("client CA").or_panic();
    let other_ca = certs::mint::TestCa::new("another CA").or_panic();
    let port = tls_member(&server_ca, &client_ca).await;
    let trusted = if trusts_member { &server_ca } else { &other_ca };
    let client = if trusted_by_member {
        &client_ca
    } else {
        &other_ca
    }
    .client_cert("writer", &[])
    .or_panic();
    put_error(
        format!("https://localhost:{port}"),
        Some((trusted.cert_pem(), &client.cert_pem, &client.key_pem)),
    )
    .await
}

#[tokio::test]
async fn a_server_certificate_from_an_untrusted_ca_is_refused_not_unsent() {
    let e = tls_put_error(false, true).await;
    assert_eq!(classify(&e), FailedWrite::Refused, "{e:?}");
}

#[tokio::test]
async fn a_client_certificate_the_member_refuses_is_refused_not_cut_off() {
    let e = tls_put_error(true, false).await;
    assert_eq!(classify(&e), FailedWrite::Refused, "{e:?}");
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_stored_unacknowledged_attempt_is_accepted() {
    let acknowledged = map(&[("w/0", "v0"), ("w/1", "v1")]);
    let attempted = map(&[("w/0", "v0"), ("w/1", "v1"), ("w/2", "v2")]);
    assert!(compare_history(&acknowledged, &attempted, &attempted).is_empty());
    assert!(compare_history(&acknowledged, &attempted, &acknowledged).is_empty());
}

#[test]
fn a_missing_or_changed_acknowledged_write_is_named() {
    let acknowledged = map(&[("w/0", "v0"), ("w/1", "v1")]);
    let attempted = acknowledged.clone();
    assert_eq!(
        compare_history(&acknowledged, &attempted, &map(&[("w/1", "v1")])),
        ["acknowledged w/0=v0 missing"]
    );
    assert_eq!(
        compare_history(
            &acknowledged,
            &attempted,
            &map(&[("w/0", "v0"), ("w/1", "x")])
        ),
        ["acknowledged w/1=v1 holds x"]
    );
}

#[test]
fn a_stored_key_never_written_is_named() {
    let acknowledged = map(&[("w/0", "v0")]);
    let attempted = map(&[("w/0", "v0"), ("w/1", "v1")]);
    assert_eq!(
        compare_history(
            &acknowledged,
            &attempted,
            &map(&[("w/0", "v0"), ("w/1", "other"), ("w/9", "v9")])
        ),
        [
            "unexpected w/1=other, written as v1",
            "unexpected w/9=v9, never written"
        ]
    );
}
