//! Who may read `/metrics` when it is served securely: the bearer token of the request is
//! authenticated by the apiserver (TokenReview), and the user it names must be allowed `get` on
//! the non-resource URL `/metrics` (SubjectAccessReview) — the ClusterRole the chart ships as
//! `<fullname>-metrics-reader`. No token or a token the apiserver does not know: 401; a user
//! without the permission: 403; the apiserver unreachable: 503 (never cached).
//!
//! Each verdict is kept for a while per token ([`ALLOWED_TTL`], [`REFUSED_TTL`]), so a scrape
//! every 15–30 s costs the apiserver two reviews a minute per scraper, not per scrape; refusals
//! expire sooner so a binding just granted takes effect within seconds.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
// tokio's clock, so the cache's expiry can be tested with paused time.
use tokio::time::Instant;

/// The non-resource URL and verb a scraper must be allowed.
pub const METRICS_PATH: &str = "/metrics";
pub const METRICS_VERB: &str = "get";
/// How long an allowed token is let through without asking again.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused token is refused without asking again.
pub const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Cached tokens at most: a flood of made-up tokens must not grow the process without bound.
const MAX_CACHED: usize = 1024;

/// What the gate decided for one token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed {
        user: String,
    },
    /// No bearer token, or one the apiserver does not authenticate.
    Unauthenticated,
    /// Authenticated, but not allowed `get` on `/metrics`.
    Forbidden {
        user: String,
    },
}

impl Verdict {
    fn ttl(&self) -> Duration {
        match self {
            Verdict::Allowed { .. } => ALLOWED_TTL,
            Verdict::Unauthenticated | Verdict::Forbidden { .. } => REFUSED_TTL,
        }
    }
}

/// A review the apiserver did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("TokenReview failed: {0}")]
    TokenReview(#[source] kube::Error),
    #[error("SubjectAccessReview of {user} for get {METRICS_PATH} failed: {source}")]
    AccessReview {
        user: String,
        #[source]
        source: kube::Error,
    },
}

/// The two questions put to the apiserver (the I/O seam; [`ApiReviews`] asks the real one).
pub trait Reviews: Send + Sync + 'static {
    /// The user `token` authenticates as, or `None`.
    fn authenticate(
        &self,
        token: &str,
    ) -> impl Future<Output = Result<Option<UserInfo>, ReviewError>> + Send;
    /// Whether `user` may `get` the non-resource URL `/metrics`.
    fn may_read_metrics(
        &self,
        user: &UserInfo,
    ) -> impl Future<Output = Result<bool, ReviewError>> + Send;
}

/// [`Reviews`] through the binary's kube client (RBAC: `create` on `tokenreviews` and
/// `subjectaccessreviews`).
#[derive(Clone)]
pub struct ApiReviews {
    client: kube::Client,
}

impl ApiReviews {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl Reviews for ApiReviews {
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let answered = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(ReviewError::TokenReview)?;
        Ok(answered
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user))
    }

    async fn may_read_metrics(&self, user: &UserInfo) -> Result<bool, ReviewError> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_string()),
                    verb: Some(METRICS_VERB.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answered = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError::AccessReview {
                user: user.username.clone().unwrap_or_default(),
                source,
            })?;
        Ok(answered.status.is_some_and(|s| s.allowed))
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The reviews and what they answered lately.
pub struct Gate<R = ApiReviews> {
    reviews: R,
    cache: Mutex<HashMap<String, (Instant, Verdict)>>,
}

impl<R: Reviews> Gate<R> {
    pub fn new(reviews: R) -> Self {
        Self {
            reviews,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, token: &str, now: Instant) -> Option<Verdict> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let (at, verdict) = cache.get(token)?;
        (now.duration_since(*at) < verdict.ttl()).then(|| verdict.clone())
    }

    fn remember(&self, token: &str, verdict: &Verdict, now: Instant) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (at, v)| now.duration_since(*at) < v.ttl());
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(token.to_string(), (now, verdict.clone()));
    }

    /// The verdict for a request with these headers.
    pub async fn verdict(&self, headers: &HeaderMap) -> Result<Verdict, ReviewError> {
        let Some(token) = bearer_token(headers) else {
            return Ok(Verdict::Unauthenticated);
        };
        if let Some(verdict) = self.cached(token, Instant::now()) {
            return Ok(verdict);
        }
        let verdict = match self.reviews.authenticate(token).await? {
            None => Verdict::Unauthenticated,
            Some(user) => {
                let name = user.username.clone().unwrap_or_default();
                if self.reviews.may_read_metrics(&user).await? {
                    Verdict::Allowed { user: name }
                } else {
                    Verdict::Forbidden { user: name }
                }
            }
        };
        self.remember(token, &verdict, Instant::now());
        Ok(verdict)
    }
}

/// axum middleware (`route_layer(from_fn_with_state(gate, require_metrics_reader))`): the
/// request goes on only when its token is allowed to read the metrics.
pub async fn require_metrics_reader<R: Reviews>(
    State(gate): State<Arc<Gate<R>>>,
    request: Request,
    next: Next,
) -> Response {
    match gate.verdict(request.headers()).await {
        Ok(Verdict::Allowed { .. }) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized: send a ServiceAccount token as Authorization: Bearer <token>\n",
        )
            .into_response(),
        Ok(Verdict::Forbidden { user }) => (
            StatusCode::FORBIDDEN,
            format!("Forbidden: {user} may not get {METRICS_PATH}; bind it to the ClusterRole <fullname>-metrics-reader\n"),
        )
            .into_response(),
        Err(err) => {
            tracing::warn!(error = %err, "cannot review a metrics scrape");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot review the request: {err}\n"),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tokens `reader-*` are readers, `other-*` are users without the permission; anything else
    /// is unknown. Counts the reviews asked.
    #[derive(Default)]
    struct FakeApiserver {
        asked: AtomicUsize,
    }

    impl Reviews for Arc<FakeApiserver> {
        async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
            self.asked.fetch_add(1, Ordering::Relaxed);
            Ok(
                (token.starts_with("reader-") || token.starts_with("other-")).then(|| UserInfo {
                    username: Some(format!("system:serviceaccount:ns:{token}")),
                    ..Default::default()
                }),
            )
        }

        async fn may_read_metrics(&self, user: &UserInfo) -> Result<bool, ReviewError> {
            self.asked.fetch_add(1, Ordering::Relaxed);
            Ok(user
                .username
                .as_deref()
                .is_some_and(|u| u.ends_with(":reader-1")))
        }
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        headers
    }

    #[test]
    fn bearer_token_takes_the_scheme_in_any_case_and_nothing_else() {
        assert_eq!(bearer_token(&bearer("abc")), Some("abc"));
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "bearer  xyz ".parse().unwrap());
        assert_eq!(bearer_token(&headers), Some("xyz"));
        for value in ["Basic dXNlcjpwdw==", "Bearer", "Bearer ", "token"] {
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            assert_eq!(bearer_token(&headers), None, "{value}");
        }
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[tokio::test]
    async fn reader_is_allowed_other_user_forbidden_unknown_token_unauthenticated() {
        let gate = Gate::new(Arc::new(FakeApiserver::default()));
        assert_eq!(
            gate.verdict(&bearer("reader-1")).await.unwrap(),
            Verdict::Allowed {
                user: "system:serviceaccount:ns:reader-1".into()
            }
        );
        assert_eq!(
            gate.verdict(&bearer("other-1")).await.unwrap(),
            Verdict::Forbidden {
                user: "system:serviceaccount:ns:other-1".into()
            }
        );
        assert_eq!(
            gate.verdict(&bearer("made-up")).await.unwrap(),
            Verdict::Unauthenticated
        );
        assert_eq!(
            gate.verdict(&HeaderMap::new()).await.unwrap(),
            Verdict::Unauthenticated
        );
    }

    #[tokio::test(start_paused = true)]
    async fn verdicts_are_reused_until_their_ttl_and_refusals_expire_sooner() {
        let apiserver = Arc::new(FakeApiserver::default());
        let gate = Gate::new(apiserver.clone());
        let asked = || apiserver.asked.load(Ordering::Relaxed);
        for _ in 0..5 {
            gate.verdict(&bearer("reader-1")).await.unwrap();
            gate.verdict(&bearer("other-1")).await.unwrap();
        }
        assert_eq!(asked(), 4, "two reviews per token, once");
        tokio::time::advance(REFUSED_TTL).await;
        gate.verdict(&bearer("reader-1")).await.unwrap();
        gate.verdict(&bearer("other-1")).await.unwrap();
        assert_eq!(
            asked(),
            6,
            "the refusal is asked again, the allowance is not"
        );
        tokio::time::advance(ALLOWED_TTL).await;
        gate.verdict(&bearer("reader-1")).await.unwrap();
        assert_eq!(asked(), 8);
    }

    #[tokio::test]
    async fn cache_stays_bounded_under_made_up_tokens() {
        let gate = Gate::new(Arc::new(FakeApiserver::default()));
        for i in 0..(3 * MAX_CACHED) {
            gate.verdict(&bearer(&format!("made-up-{i}")))
                .await
                .unwrap();
        }
        assert!(gate.cache.lock().unwrap().len() <= MAX_CACHED);
    }
}
