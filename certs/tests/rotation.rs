//! Certificate hot reload over real TLS: a Secret mount laid out like the kubelet's, a
//! tokio-rustls listener on loopback whose config resolves the certificate per handshake, and
//! rustls clients that look at what the server presents.

// Test helpers outside `#[test]` functions: a failed set-up step should fail the test loudly.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use certs::mint::{MintedCert, SecretMount, TestCa};
use certs::{CertReloader, ReloadOutcome, ReloadStats};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A TLS server that answers every connection with `ok` and closes it.
async fn serve(reloader: &CertReloader) -> SocketAddr {
    let config = certs::server::server_config(reloader.resolver()).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tls.write_all(b"ok").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    addr
}

/// Handshake with a client trusting `ca`, and return the leaf certificate the server presented.
async fn presented_certificate(addr: SocketAddr, ca: &TestCa) -> Option<CertificateDer<'static>> {
    let config =
        certs::client::client_config_from_pem(ca.cert_pem().as_bytes(), None, "test CA").unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.ok()?;
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .ok()?;
    let leaf = tls.get_ref().1.peer_certificates()?.first()?.clone();
    let mut body = Vec::new();
    let _ = tls.read_to_end(&mut body).await;
    assert_eq!(body, b"ok");
    Some(leaf)
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn failures_reach(stats: &ReloadStats, n: u64) {
    eventually(&format!("{n} refused rotations"), || async {
        stats.failures() >= n
    })
    .await;
}

struct Fixture {
    _tmp: tempfile::TempDir,
    mount: SecretMount,
    ca: TestCa,
    first: MintedCert,
    reloader: Arc<CertReloader>,
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// A served Secret mount holding `first`, followed only through directory events (the
/// periodic re-read is an hour away, so a passing rotation test proves the watch works).
async fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let mount = SecretMount::new(tmp.path().join("serving-certs")).unwrap();
    let ca = TestCa::new("rotation-test-ca").unwrap();
    let first = ca.server_cert(&["localhost", "127.0.0.1"]).unwrap();
    mount.write_tls(&first, Some(&ca)).unwrap();
    let reloader =
        Arc::new(CertReloader::for_secret_dir(mount.dir()).with_resync(Duration::from_secs(3600)));
    let (stop, stopped) = oneshot::channel::<()>();
    reloader.clone().spawn(async move {
        let _ = stopped.await;
    });
    let addr = serve(&reloader).await;
    eventually("the first certificate", || async {
        presented_certificate(addr, &ca).await.as_ref() == Some(&first.cert_der)
    })
    .await;
    Fixture {
        _tmp: tmp,
        mount,
        ca,
        first,
        reloader,
        addr,
        _stop: stop,
    }
}

#[tokio::test]
async fn rotated_secret_is_presented_on_the_next_handshake_without_restart() {
    let f = fixture().await;
    let second = f.ca.server_cert(&["localhost", "127.0.0.1"]).unwrap();
    assert_ne!(second.cert_der, f.first.cert_der);

    f.mount.write_tls(&second, Some(&f.ca)).unwrap();
    eventually("the rotated certificate", || async {
        presented_certificate(f.addr, &f.ca).await.as_ref() == Some(&second.cert_der)
    })
    .await;
    assert_eq!(f.reloader.stats().reloads(), 2);
    assert_eq!(f.reloader.stats().failures(), 0);
}

#[tokio::test]
async fn garbage_pem_keeps_the_previous_certificate_serving() {
    let f = fixture().await;
    f.mount
        .write_tls_pem(
            b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n",
            b"junk",
            None,
        )
        .unwrap();
    failures_reach(&f.reloader.stats(), 1).await;
    assert_eq!(
        presented_certificate(f.addr, &f.ca).await.as_ref(),
        Some(&f.first.cert_der)
    );
}

#[tokio::test]
async fn mismatched_key_keeps_the_previous_certificate_serving_and_a_good_pair_recovers() {
    let f = fixture().await;
    let other = f.ca.server_cert(&["localhost"]).unwrap();
    let third = f.ca.server_cert(&["localhost"]).unwrap();
    // A new certificate with the old key: what a half-finished manual rotation looks like.
    f.mount
        .write_tls_pem(other.cert_pem.as_bytes(), f.first.key_pem.as_bytes(), None)
        .unwrap();
    failures_reach(&f.reloader.stats(), 1).await;
    assert_eq!(
        presented_certificate(f.addr, &f.ca).await.as_ref(),
        Some(&f.first.cert_der)
    );

    f.mount.write_tls(&third, None).unwrap();
    eventually("recovery with a valid pair", || async {
        presented_certificate(f.addr, &f.ca).await.as_ref() == Some(&third.cert_der)
    })
    .await;
    assert_eq!(f.reloader.stats().failures(), 1);
}

#[tokio::test]
async fn expired_certificate_keeps_the_previous_certificate_serving() {
    let f = fixture().await;
    let now = SystemTime::now();
    let day = Duration::from_secs(24 * 3600);
    let expired =
        f.ca.server_cert_valid(&["localhost", "127.0.0.1"], now - 30 * day..now - day)
            .unwrap();
    f.mount.write_tls(&expired, Some(&f.ca)).unwrap();
    failures_reach(&f.reloader.stats(), 1).await;
    assert_eq!(
        presented_certificate(f.addr, &f.ca).await.as_ref(),
        Some(&f.first.cert_der)
    );
    assert_eq!(f.reloader.stats().reloads(), 1);
    let ReloadOutcome::Unchanged = f.reloader.reload_now() else {
        panic!("the refused expired certificate is not judged again");
    };
    assert_eq!(f.reloader.stats().failures(), 1);
}

#[tokio::test]
async fn periodic_reread_finds_a_directory_created_after_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("mounted-later");
    let reloader =
        Arc::new(CertReloader::for_secret_dir(&dir).with_resync(Duration::from_millis(100)));
    let (_stop, stopped) = oneshot::channel::<()>();
    reloader.clone().spawn(async move {
        let _ = stopped.await;
    });
    let addr = serve(&reloader).await;
    let ca = TestCa::new("late-ca").unwrap();
    assert_eq!(
        presented_certificate(addr, &ca).await,
        None,
        "no certificate, no handshake"
    );

    let cert = ca.server_cert(&["localhost"]).unwrap();
    SecretMount::new(&dir)
        .unwrap()
        .write_tls(&cert, None)
        .unwrap();
    eventually("the late certificate", || async {
        presented_certificate(addr, &ca).await.as_ref() == Some(&cert.cert_der)
    })
    .await;
}

/// rustls cannot speak TLS 1.1, so send a TLS 1.1 ClientHello by hand.
#[tokio::test]
async fn tls_1_1_client_hello_is_refused_with_a_protocol_version_alert() {
    let f = fixture().await;
    let mut body = vec![0x03, 0x02]; // client_version TLS 1.1
    body.extend_from_slice(&[0x42; 32]); // random
    body.push(0); // session id
                  // Suites the server does support (ECDHE-ECDSA/RSA-AES128-GCM-SHA256), so that the only
                  // thing wrong with this hello is its version.
    body.extend_from_slice(&[0x00, 0x04, 0xc0, 0x2b, 0xc0, 0x2f]);
    body.extend_from_slice(&[0x01, 0x00]); // null compression
                                           // signature_algorithms (ecdsa_secp256r1_sha256, rsa_pss_rsae_sha256): rustls wants it
                                           // before it looks at versions.
    body.extend_from_slice(&[
        0x00, 0x0a, 0x00, 0x0d, 0x00, 0x06, 0x00, 0x04, 0x04, 0x03, 0x08, 0x04,
    ]);
    let mut handshake = vec![0x01, 0x00];
    handshake.extend_from_slice(&(body.len() as u16).to_be_bytes());
    handshake.extend_from_slice(&body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);

    let mut tcp = TcpStream::connect(f.addr).await.unwrap();
    tcp.write_all(&record).await.unwrap();
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut reply)).await;
    assert!(reply.len() >= 7, "expected an alert record, got {reply:?}");
    assert_eq!(
        reply[0], 0x15,
        "an alert record, not a ServerHello: {reply:?}"
    );
    assert_eq!(reply[6], 70, "alert protocol_version: {reply:?}");
}

#[tokio::test]
async fn client_limited_to_tls12_still_connects() {
    let f = fixture().await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(f.ca.cert_der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(certs::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(f.addr).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
}
