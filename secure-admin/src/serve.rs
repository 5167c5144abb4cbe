//! An axum `Router` over TLS: tokio-rustls handshakes (with a deadline), then hyper serving
//! HTTP/1.1 or HTTP/2 per connection, until `stop`; then open connections get `grace` to finish.
//! The certificate is whatever the `ServerConfig`'s resolver hands out at each handshake, so a
//! rotated Secret needs no restart.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A client that does not finish its handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that does not send its request headers in this time is dropped (slowloris).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serve `app` on `listener` over TLS until `stop` resolves; `handshake_failed` is called for
/// each handshake that fails or times out (a metric). Returns once the listener is closed and
/// the connections have finished, or `grace` has passed.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    handshake_failed: Arc<dyn Fn() + Send + Sync>,
    stop: impl Future<Output = ()>,
    grace: Duration,
) {
    tokio::pin!(stop);
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(err) => {
                    // Typically EMFILE: back off instead of spinning.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let handshake_failed = handshake_failed.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    handshake_failed();
                    tracing::debug!(%peer, error = %err, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    handshake_failed();
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let connection = builder
                .serve_connection(TokioIo::new(tls), service)
                .into_owned();
            if let Err(err) = watcher.watch(connection).await {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            tracing::warn!(grace_seconds = grace.as_secs(), "connections still open after the shutdown grace period; closing them");
        }
    }
}

/// The TLS config of a secure admin port: the certificate and key of the `kubernetes.io/tls`
/// Secret mounted at `dir` (`tls.crt`, `tls.key`), re-read as the Secret rotates until `stop`
/// (a renewal that does not parse is refused and the old pair keeps serving; see
/// [`certs::reload`]). HTTP/2 and HTTP/1.1 by ALPN.
pub fn tls_from_secret_dir(
    dir: &Path,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<Arc<rustls::ServerConfig>, certs::server::ServerConfigError> {
    let reloader = Arc::new(certs::CertReloader::for_secret_dir(dir));
    if let certs::ReloadOutcome::Rejected(err) = reloader.reload_now() {
        tracing::warn!(dir = %dir.display(), error = %err, "no usable certificate for the secure admin port yet; handshakes fail until one appears");
    }
    let mut tls = certs::server::server_config(reloader.resolver())?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    reloader.spawn(stop);
    Ok(Arc::new(tls))
}
