//! The admin port: `/healthz`, `/readyz` (ready once the API has answered) and `/metrics`.
//! Plain HTTP by default. With `--metrics-secure` it is served over TLS with the certificate
//! mounted at `--metrics-cert-dir`, and `/metrics` answers only a bearer token the apiserver
//! authenticates and authorizes for `get /metrics` ([`secure_admin::gate`]); the probes stay
//! open (the kubelet sends no token, and they tell nothing).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::routing::get;
use axum::Router;
use secure_admin::{require_metrics_reader, ApiReviews, Gate};

use crate::metrics::Metrics;

/// What the admin port shows.
#[derive(Clone)]
pub struct Admin {
    pub metrics: Metrics,
    pub ready: Arc<AtomicBool>,
}

/// How the admin port is served.
pub enum Transport {
    /// Plain HTTP, `/metrics` open to anyone who reaches the port.
    Plain,
    /// TLS with the `kubernetes.io/tls` Secret mounted at `cert_dir`; `/metrics` for readers
    /// only, reviewed through `client`.
    Secure {
        cert_dir: PathBuf,
        client: kube::Client,
    },
}

/// Why the admin port could not be served.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("binding the admin listener {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the secure admin port's TLS config: {0}")]
    Tls(#[from] certs::server::ServerConfigError),
    #[error("serving the admin port: {0}")]
    Serve(#[source] std::io::Error),
}

fn router(admin: Admin, gate: Option<Arc<Gate>>) -> Router {
    let mut metrics = get(|State(a): State<Admin>| async move { a.metrics.render() });
    if let Some(gate) = gate {
        metrics = metrics.route_layer(from_fn_with_state(
            gate,
            require_metrics_reader::<ApiReviews>,
        ));
    }
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(a): State<Admin>| async move {
                if a.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready")
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "not ready: the API has not answered yet",
                    )
                }
            }),
        )
        .route("/metrics", metrics)
        .with_state(admin)
}

/// Serve the admin port on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, admin: Admin, transport: Transport) -> Result<(), AdminError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| AdminError::Bind { addr, source })?;
    match transport {
        Transport::Plain => axum::serve(listener, router(admin, None))
            .await
            .map_err(AdminError::Serve),
        Transport::Secure { cert_dir, client } => {
            let tls = secure_admin::tls_from_secret_dir(&cert_dir, std::future::pending())?;
            let gate = Arc::new(Gate::new(ApiReviews::new(client)));
            tracing::info!(%addr, cert_dir = %cert_dir.display(), "admin port served over TLS; /metrics for authorized readers only");
            secure_admin::serve_tls(
                listener,
                tls,
                router(admin, Some(gate)),
                Arc::new(|| {}),
                std::future::pending(),
                Duration::ZERO,
            )
            .await;
            Ok(())
        }
    }
}
