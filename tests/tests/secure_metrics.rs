//! `--metrics-secure` (the chart's `metrics.secure`) on a real kube-apiserver: the real operator
//! binary, running as the chart's ServiceAccount under the chart's RBAC rendered with
//! `metrics.secure=true`, serves its admin port over TLS and `/metrics` only to a bearer token
//! the apiserver authenticates (TokenReview) and authorizes for `get /metrics`
//! (SubjectAccessReview): no token and a made-up token get 401, the token of a ServiceAccount
//! without the chart's `<fullname>-metrics-reader` binding 403, a bound one 200 with the
//! operator's metrics; the probes stay open. The same for the webhook binary with
//! `--metrics-secure` (run with the control plane's admin kubeconfig: its reviews are allowed).

use std::time::Duration;

use certs::mint::TestCa;
use serde_json::Value;
use tests::env::process::Process;
use tests::env::ControlPlane;
use tests::helm::Helm;
use tests::operator::{admin_request, Operator};
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

/// An admin port served over TLS, and how to reach it.
struct AdminPort<'a> {
    addr: &'a str,
    tls: &'a std::sync::Arc<rustls::ClientConfig>,
}

/// `GET /metrics` with `bearer` once the binary can ask the apiserver: a 503 (a review the
/// apiserver refused while the just-applied RBAC is not effective yet, or a port not up yet) is
/// retried.
async fn scrape(port: &AdminPort<'_>, bearer: Option<&str>) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = admin_request(port.addr, Some(port.tls), "/metrics", bearer)
            .await
            .unwrap_or((503, "not answering yet".into()));
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

    let client = std::sync::Arc::new(
        certs::client::client_config_from_pem(ca.cert_pem().as_bytes(), None, "test").or_panic(),
    );
    let port = AdminPort {
        addr: operator.admin_addr(),
        tls: &client,
    };
    let user = |name: &str| format!("system:serviceaccount:{ns}:{name}");
    assert_gate(
        &port,
        (&stranger, &user("stranger")),
        &reader,
        "# TYPE etcd_operator_",
    )
    .await;

    // The webhook, with the same certificate for both of its ports.
    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .or_panic()
            .port()
    };
    let (listen, admin) = (free_port(), free_port());
    let mut cmd = std::process::Command::new(tests::webhook::binary().or_panic());
    cmd.env("KUBECONFIG", cp.kubeconfig())
        .env("RUST_LOG", "info")
        .arg(format!("--tls-cert-dir={}", dir.path().display()))
        .arg(format!("--listen=127.0.0.1:{listen}"))
        .arg(format!("--admin-listen=127.0.0.1:{admin}"))
        .arg("--metrics-secure=true")
        .arg(&cert_dir)
        .arg("--shutdown-grace-seconds=1");
    let _webhook = Process::spawn(
        "etcd-operator-webhook",
        cmd,
        &cp.log_dir().join("etcd-operator-webhook-secure.log"),
    )
    .or_panic();
    let addr = format!("127.0.0.1:{admin}");
    let port = AdminPort {
        addr: &addr,
        tls: &client,
    };
    assert_gate(
        &port,
        (&stranger, &user("stranger")),
        &reader,
        "# TYPE etcd_operator_webhook_",
    )
    .await;
}

/// The gate on `port`: probes open; no token and a made-up one 401, `stranger`'s token 403
/// naming the user, `reader`'s 200 with a metric family starting `family`, both again from the
/// cache.
async fn assert_gate(
    port: &AdminPort<'_>,
    (stranger, stranger_user): (&str, &str),
    reader: &str,
    family: &str,
) {
    let (status, body) = scrape(port, None).await;
    assert_eq!(status, 401, "{}: no token: {body}", port.addr);
    let (status, body) = admin_request(port.addr, Some(port.tls), "/healthz", None)
        .await
        .or_panic();
    assert_eq!((status, body.as_str()), (200, "ok"), "{}", port.addr);
    let (status, body) = scrape(port, Some("not-a-token")).await;
    assert_eq!(status, 401, "{}: a made-up token: {body}", port.addr);
    let (status, body) = scrape(port, Some(stranger)).await;
    assert_eq!(
        status, 403,
        "{}: a ServiceAccount without the binding: {body}",
        port.addr
    );
    assert!(body.contains(stranger_user), "{body}");

    // The binding may take a moment to reach the authorizer; a refusal is cached only briefly.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, body) = scrape(port, Some(reader)).await;
        if status == 200 {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: the bound ServiceAccount still gets {status}: {body}",
            port.addr
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(body.contains(family), "{body}");

    // The same tokens again are answered from the cache: still 200 and 403.
    assert_eq!(scrape(port, Some(reader)).await.0, 200);
    assert_eq!(scrape(port, Some(stranger)).await.0, 403);
}
