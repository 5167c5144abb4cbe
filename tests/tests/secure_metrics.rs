//! `--metrics-secure` (the chart's `metrics.secure`) on a real kube-apiserver: the real operator
//! binary, running as the chart's ServiceAccount under the chart's RBAC rendered with
//! `metrics.secure=true`, serves its admin port over TLS and `/metrics` only to a bearer token
//! the apiserver authenticates (TokenReview) and authorizes for `get /metrics`
//! (SubjectAccessReview): no token and a made-up token get 401, the token of a ServiceAccount
//! without the chart's `<fullname>-metrics-reader` binding 403, a bound one 200 with the
//! operator's metrics; the probes stay open.

use std::time::Duration;

use certs::mint::TestCa;
use serde_json::Value;
use tests::env::ControlPlane;
use tests::helm::Helm;
use tests::operator::Operator;
use tests::OrPanic;

/// A ServiceAccount token from the TokenRequest API (`kubectl create token`).
async fn token(cp: &ControlPlane, ns: &str, service_account: &str) -> String {
    cp.kubectl_ok(&["create", "serviceaccount", "-n", ns, service_account])
        .await
        .or_panic();
    cp.kubectl_ok(&["create", "token", "-n", ns, service_account])
        .await
        .or_panic()
        .trim()
        .to_string()
}

/// `GET /metrics` with `bearer` once the operator can ask the apiserver: a 503 (a review the
/// apiserver refused while the just-applied RBAC is not effective yet) is retried.
async fn scrape(operator: &Operator, bearer: Option<&str>) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = operator.request("/metrics", bearer).await.or_panic();
        if status != 503 || tokio::time::Instant::now() > deadline {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_metrics_refuse_unauthenticated_and_unauthorized_scrapes_and_serve_readers() {
    let cp = ControlPlane::builder().with_crds().start().await.or_panic();
    let ns = cp.namespace("operator").await.or_panic();

    // The admin port's certificate, as the chart mounts it (tls.crt, tls.key, ca.crt).
    let dir = tempfile::tempdir().or_panic();
    let ca = TestCa::new("metrics-ca").or_panic();
    let leaf = ca.server_cert(&["localhost"]).or_panic();
    for (file, pem) in [
        ("tls.crt", leaf.cert_pem.as_str()),
        ("tls.key", leaf.key_pem.as_str()),
        ("ca.crt", ca.cert_pem()),
    ] {
        std::fs::write(dir.path().join(file), pem).or_panic();
    }
    let cert_dir = format!("--metrics-cert-dir={}", dir.path().display());

    // The operator starts under the chart's default RBAC; metrics.secure adds the reviews'
    // ClusterRole and the metrics-reader ClusterRole. Applied from the chart as rendered.
    let operator = Operator::start_with(
        &cp,
        &ns,
        None,
        &["--metrics-secure=true", cert_dir.as_str()],
    )
    .await
    .or_panic();
    let release = operator.identity().release().to_string();
    let rendered = Helm::new(None)
        .or_panic()
        .template(
            &release,
            &ns,
            &[
                "--show-only",
                "templates/metrics-secure.yaml",
                "--set",
                "metrics.secure=true",
            ],
        )
        .await
        .or_panic();
    let rbac: Vec<Value> = yaml_serde::Deserializer::from_str(&rendered)
        .map(|d| serde::Deserialize::deserialize(d).or_panic())
        .filter(|d: &Value| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ClusterRole"))
        })
        .collect();
    assert_eq!(rbac.len(), 3, "{rendered}");
    let file = dir.path().join("rbac.yaml");
    std::fs::write(
        &file,
        rbac.iter()
            .map(|d| yaml_serde::to_string(d).or_panic())
            .collect::<Vec<_>>()
            .join("---\n"),
    )
    .or_panic();
    cp.kubectl_ok(&["apply", "--server-side", "-f", &file.to_string_lossy()])
        .await
        .or_panic();

    let stranger = token(&cp, &ns, "stranger").await;
    let reader = token(&cp, &ns, "prometheus").await;
    cp.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("{release}-prometheus"),
        &format!("--clusterrole={release}-metrics-reader"),
        &format!("--serviceaccount={ns}:prometheus"),
    ])
    .await
    .or_panic();

    // The probes answer without a token, over TLS (Operator::start waited on /readyz so).
    let (status, body) = operator.request("/healthz", None).await.or_panic();
    assert_eq!((status, body.as_str()), (200, "ok"));

    let (status, body) = scrape(&operator, None).await;
    assert_eq!(status, 401, "no token: {body}");
    let (status, body) = scrape(&operator, Some("not-a-token")).await;
    assert_eq!(status, 401, "a made-up token: {body}");
    let (status, body) = scrape(&operator, Some(&stranger)).await;
    assert_eq!(status, 403, "a ServiceAccount without the binding: {body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{ns}:stranger")),
        "{body}"
    );

    // The binding may take a moment to reach the authorizer; a refusal is cached only briefly.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, body) = scrape(&operator, Some(&reader)).await;
        if status == 200 {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bound ServiceAccount still gets {status}: {body}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(body.contains("# TYPE etcd_operator_"), "{body}");

    // The same token again is answered from the cache, still 200; the stranger still 403.
    assert_eq!(scrape(&operator, Some(&reader)).await.0, 200);
    assert_eq!(scrape(&operator, Some(&stranger)).await.0, 403);
}
