//! The HTTP surface. On the TLS port: `POST /validate` and `POST /mutate`, each taking an
//! AdmissionReview and answering one (bodies above `--max-body-bytes` get 413, unreadable ones
//! 400, or a denial when the request's uid could be read). On the admin port (plain, or TLS
//! with `/metrics` for authorized readers only under `--metrics-secure`):
//! `/healthz` (the process serves), `/readyz` (a serving certificate is loaded and the server
//! is not shutting down) and `/metrics`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use certs::CertResolver;
use secure_admin::{require_metrics_reader, ApiReviews, Gate};

use crate::admission;
use crate::config::Policy;
use crate::metrics::{Endpoint, Metrics};

/// Shared by every handler.
#[derive(Debug)]
pub struct AppState {
    pub policy: Policy,
    pub metrics: Arc<Metrics>,
    pub resolver: Arc<CertResolver>,
    pub shutting_down: AtomicBool,
}

/// The routes served over TLS.
pub fn admission_router(state: Arc<AppState>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// The routes served on the admin port; with a `gate` (`--metrics-secure`) `/metrics` answers
/// only authorized readers, the probes stay open (the kubelet sends no token).
pub fn admin_router(state: Arc<AppState>, gate: Option<Arc<Gate>>) -> Router {
    let mut metrics_route = get(metrics);
    if let Some(gate) = gate {
        metrics_route = metrics_route.route_layer(from_fn_with_state(
            gate,
            require_metrics_reader::<ApiReviews>,
        ));
    }
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", metrics_route)
        .with_state(state)
}

async fn validate(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(&state, Endpoint::Validate, body)
}

async fn mutate(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(&state, Endpoint::Mutate, body)
}

fn answer(state: &AppState, endpoint: Endpoint, body: Result<Bytes, BytesRejection>) -> Response {
    let started = Instant::now();
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let status = rejection.status();
            let reason = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "body_too_large"
            } else {
                "unreadable_body"
            };
            state.metrics.malformed(endpoint, reason, started.elapsed());
            tracing::warn!(webhook = endpoint.as_str(), %status, "admission body rejected: {}", rejection.body_text());
            return (status, rejection.body_text()).into_response();
        }
    };
    let request = match admission::parse_review(&body) {
        Ok(request) => request,
        Err(err) => {
            state
                .metrics
                .malformed(endpoint, err.reason(), started.elapsed());
            tracing::warn!(webhook = endpoint.as_str(), error = %err, "unreadable AdmissionReview");
            return match err.uid() {
                Some(uid) => {
                    Json(admission::unreadable_denial(uid, &err).into_review()).into_response()
                }
                None => (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
            };
        }
    };
    let response = match endpoint {
        Endpoint::Validate => admission::validate(&request, &state.policy),
        Endpoint::Mutate => admission::mutate(&request, &state.policy),
    };
    let operation = admission::operation_name(&request.operation);
    state.metrics.answered(
        endpoint,
        operation,
        &request.kind,
        response.allowed,
        started.elapsed(),
    );
    if response.allowed {
        tracing::debug!(webhook = endpoint.as_str(), operation, kind = %request.kind.kind,
            namespace = request.namespace.as_deref().unwrap_or_default(), name = %request.name, "admitted");
    } else {
        tracing::info!(webhook = endpoint.as_str(), operation, kind = %request.kind.kind,
            namespace = request.namespace.as_deref().unwrap_or_default(), name = %request.name,
            user = request.user_info.username.as_deref().unwrap_or_default(),
            reason = %response.result.reason, "denied");
    }
    Json(response.into_review()).into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    if !state.resolver.is_loaded() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no serving certificate loaded yet (see the certificate_reload_failures metric and the logs)",
        )
            .into_response();
    }
    "ok".into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    match state.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
}
