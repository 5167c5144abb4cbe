//! Starting and stopping the webhook: the TLS listener ([`secure_admin::serve_tls`]: tokio-rustls
//! handshakes, then hyper serving HTTP/1.1 or HTTP/2 per connection), the admin listener (plain,
//! or TLS with the metrics-reader gate under `--metrics-secure`), and the certificate
//! reloader — all tied to one shutdown signal. The serving certificate is resolved per
//! handshake from [`certs::CertReloader`], so a rotated Secret needs no restart.
//!
//! Stopping drains first: `/readyz` turns 503 while both ports keep serving, because the
//! endpoints controller and kube-proxy (and the apiserver's pooled connections) take a few
//! seconds to stop sending to a Pod that is no longer ready; a listener closed at once would
//! refuse admission requests still routed here.

use std::future::IntoFuture;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use certs::{CertReloader, CertResolver, ReloadStats};
use secure_admin::{ApiReviews, Gate};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::routes::{self, AppState};

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot build the TLS server config: {0}")]
    Tls(#[from] certs::server::ServerConfigError),
    #[error("--metrics-secure needs the Kubernetes API (in-cluster config or a kubeconfig) to review scrapes: {0}")]
    Kube(#[source] kube::Error),
}

/// A started webhook. Dropping it stops everything too, without waiting.
pub struct RunningWebhook {
    /// Where `/validate` and `/mutate` are served (TLS).
    pub tls_addr: SocketAddr,
    /// Where `/healthz`, `/readyz` and `/metrics` are served (plain HTTP).
    pub admin_addr: SocketAddr,
    pub resolver: Arc<CertResolver>,
    pub reload_stats: Arc<ReloadStats>,
    state: Arc<AppState>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningWebhook {
    /// Answer `/readyz` with 503 at once and keep serving for `drain`; then stop accepting,
    /// let in-flight requests finish (up to the configured grace), and return when every
    /// listener and the reloader have stopped.
    pub async fn shutdown(self, drain: Duration) {
        self.state.shutting_down.store(true, Ordering::Relaxed);
        if !drain.is_zero() {
            tracing::info!(
                drain_seconds = drain.as_secs_f64(),
                "not ready any more; serving on while endpoints drain"
            );
            tokio::time::sleep(drain).await;
        }
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Resolves once `rx` says stop (or its sender is gone).
async fn stopped(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { what, addr, source })
}

/// Bind both ports, load the certificate if it is there already, and serve until
/// [`RunningWebhook::shutdown`].
pub async fn start(config: Config) -> Result<RunningWebhook, ServerError> {
    let cert: PathBuf = config.tls_cert_dir.join(&config.tls_cert_file);
    let key: PathBuf = config.tls_cert_dir.join(&config.tls_key_file);
    let reloader = Arc::new(CertReloader::new(cert, key).with_resync(config.tls_resync()));
    let resolver = reloader.resolver();
    let reload_stats = reloader.stats();
    // Load what is mounted already, so a Pod whose Secret is in place is ready at once; a missing
    // or broken certificate is logged by the reloader and retried on every change.
    let initial = reloader.clone();
    if let Err(err) = tokio::task::spawn_blocking(move || initial.reload_now()).await {
        tracing::error!(error = %err, "initial certificate load failed to run");
    }

    let mut tls = certs::server::server_config(resolver.clone())?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tls = Arc::new(tls);

    let metrics = Arc::new(Metrics::new(reload_stats.clone(), resolver.clone()));
    let state = Arc::new(AppState {
        policy: config.policy(),
        metrics: metrics.clone(),
        resolver: resolver.clone(),
        shutting_down: AtomicBool::new(false),
    });

    let tls_listener = bind("webhook TLS", config.listen).await?;
    let admin_listener = bind("admin", config.admin_listen).await?;
    let tls_addr = local_addr(&tls_listener, config.listen);
    let admin_addr = local_addr(&admin_listener, config.admin_listen);

    let (shutdown, rx) = watch::channel(false);
    let grace = Duration::from_secs(config.shutdown_grace_seconds);
    let secure = if config.metrics_secure {
        let client = kube::Client::try_default()
            .await
            .map_err(ServerError::Kube)?;
        let tls = secure_admin::tls_from_secret_dir(&config.metrics_cert_dir, stopped(rx.clone()))?;
        Some((tls, Arc::new(Gate::new(ApiReviews::new(client)))))
    } else {
        None
    };
    let handshake_failed: Arc<dyn Fn() + Send + Sync> =
        Arc::new(move || metrics.handshake_failed());
    let admin = routes::admin_router(state.clone(), secure.as_ref().map(|(_, gate)| gate.clone()));
    let admin_task = match secure {
        Some((tls, _)) => tokio::spawn(secure_admin::serve_tls(
            admin_listener,
            tls,
            admin,
            Arc::new(|| {}),
            stopped(rx.clone()),
            grace,
        )),
        None => tokio::spawn(serve_admin(admin_listener, admin, rx.clone(), grace)),
    };
    let tasks = vec![
        reloader.spawn(stopped(rx.clone())),
        tokio::spawn(secure_admin::serve_tls(
            tls_listener,
            tls,
            routes::admission_router(state.clone(), config.max_body_bytes),
            handshake_failed,
            stopped(rx),
            grace,
        )),
        admin_task,
    ];
    tracing::info!(%tls_addr, %admin_addr, cert_dir = %config.tls_cert_dir.display(), "webhook listening");
    Ok(RunningWebhook {
        tls_addr,
        admin_addr,
        resolver,
        reload_stats,
        state,
        shutdown,
        tasks,
    })
}

fn local_addr(listener: &TcpListener, requested: SocketAddr) -> SocketAddr {
    listener.local_addr().unwrap_or(requested)
}

async fn serve_admin(
    listener: TcpListener,
    app: Router,
    stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let serving = axum::serve(listener, app)
        .with_graceful_shutdown(stopped(stop.clone()))
        .into_future();
    tokio::select! {
        served = serving => if let Err(err) = served {
            tracing::error!(error = %err, "admin server failed");
        },
        // The admin port has no header timeout: a client that never finishes its request must
        // not hold the exit up past the grace period.
        _ = async { stopped(stop).await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_seconds = grace.as_secs(), "admin connections still open after the shutdown grace period; closing them");
        }
    }
}
