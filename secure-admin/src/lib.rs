//! The admin port served securely (`--metrics-secure` of both binaries, the chart's
//! `metrics.secure`): [`serve`] serves an axum `Router` over TLS (also the webhook's admission
//! port), and [`gate`] lets a request through to `/metrics` only with a bearer token the
//! apiserver authenticates (TokenReview) and authorizes for `get` on the non-resource URL
//! `/metrics` (SubjectAccessReview), as controller-runtime's `WithAuthenticationAndAuthorization`
//! filter does, with each verdict cached for a while as kube-rbac-proxy does.
//!
//! It links the kube client and nothing of the operator's: no etcd client, no `api` types.

pub mod gate;
pub mod serve;

pub use gate::{require_metrics_reader, ApiReviews, Gate, ReviewError, Reviews, Verdict};
pub use serve::{serve_tls, tls_from_secret_dir};
