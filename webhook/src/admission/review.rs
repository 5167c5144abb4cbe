//! Reading an `admission.k8s.io/v1` AdmissionReview body into a request, and saying precisely
//! what is wrong with one that cannot be read. Judges nothing.

use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use serde_json::Value;

pub type Request = AdmissionRequest<DynamicObject>;

pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
pub const REVIEW_KIND: &str = "AdmissionReview";

/// Why a body is not an answerable AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the request body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error(
        "expected apiVersion {REVIEW_API_VERSION:?} and kind {REVIEW_KIND:?}, got apiVersion {api_version:?} and kind {kind:?}; register the webhook with admissionReviewVersions [v1]"
    )]
    WrongType { api_version: String, kind: String },
    #[error("the AdmissionReview has no request")]
    MissingRequest,
    #[error("the AdmissionReview request cannot be read at {path}: {message}")]
    Unreadable {
        uid: Option<String>,
        path: String,
        message: String,
    },
}

impl ReviewError {
    /// The request's uid when it could be read: then the answer is a denial in a review rather
    /// than an HTTP error.
    pub fn uid(&self) -> Option<&str> {
        match self {
            ReviewError::Unreadable { uid, .. } => uid.as_deref().filter(|u| !u.is_empty()),
            _ => None,
        }
    }

    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            ReviewError::NotJson(_) => "not_json",
            ReviewError::WrongType { .. } => "wrong_type",
            ReviewError::MissingRequest => "missing_request",
            ReviewError::Unreadable { .. } => "unreadable_request",
        }
    }
}

/// Read an AdmissionReview body. Never panics on any input.
pub fn parse_review(body: &[u8]) -> Result<Request, ReviewError> {
    // Fast path: what the apiserver sends parses straight into the typed review. Anything else
    // takes the slow path below, which exists to say precisely what is wrong.
    if let Ok(review) = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        if review.types.api_version == REVIEW_API_VERSION && review.types.kind == REVIEW_KIND {
            if let Ok(request) = review.try_into() {
                return Ok(request);
            }
        }
    }
    let value: Value = serde_json::from_slice(body).map_err(ReviewError::NotJson)?;
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default();
    if text("apiVersion") != REVIEW_API_VERSION || text("kind") != REVIEW_KIND {
        return Err(ReviewError::WrongType {
            api_version: text("apiVersion").to_string(),
            kind: text("kind").to_string(),
        });
    }
    let request = match value.get("request") {
        None | Some(Value::Null) => return Err(ReviewError::MissingRequest),
        Some(request) => request,
    };
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    let review: AdmissionReview<DynamicObject> =
        serde_path_to_error::deserialize(value).map_err(|err| ReviewError::Unreadable {
            uid,
            path: err.path().to_string(),
            message: err.inner().to_string(),
        })?;
    review.try_into().map_err(|_| ReviewError::MissingRequest)
}

/// The answer to a review that could be read only far enough to find its uid.
pub fn unreadable_denial(uid: &str, err: &ReviewError) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid(err.to_string());
    response.uid = uid.to_string();
    response.result.code = 400;
    response
}

/// `Operation` as the apiserver spells it (metrics, logs).
pub fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}
