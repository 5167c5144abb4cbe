//! `metrics.secure` (docs/observability.md#secure-metrics): both binaries get the flag, the
//! certificate mounted where the flag says and probes over HTTPS; the ServiceMonitors scrape
//! https with Prometheus' token and verify the certificate with its CA for the Service's name;
//! the reviews' RBAC exists only then and is exactly `create` on tokenreviews and
//! subjectaccessreviews; the webhook gets a token and, with network policies, egress to the API.

use serde_json::{json, Value};

use super::*;

const SECURE: &[&str] = &[
    "metrics.secure=true",
    "webhook.enabled=true",
    "metrics.serviceMonitor.enabled=true",
    "networkPolicy.enabled=true",
];
const METRICS_SECRET: &str = "etcd-operator-metrics-tls";

/// The Secret a Deployment mounts at `path`, if any.
fn secret_mounted_at(deployment: &Deployment, path: &str) -> Option<String> {
    let spec = pod_spec(deployment);
    let volume = spec.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == path)?
        .name
        .clone();
    spec.volumes
        .iter()
        .flatten()
        .find(|v| v.name == volume)?
        .secret
        .as_ref()?
        .secret_name
        .clone()
}

fn probe_schemes(deployment: &Deployment) -> Vec<Option<String>> {
    let c = &pod_spec(deployment).containers[0];
    [&c.liveness_probe, &c.readiness_probe]
        .into_iter()
        .map(|p| {
            p.as_ref()
                .and_then(|p| p.http_get.as_ref())
                .and_then(|h| h.scheme.clone())
        })
        .collect()
}

#[tokio::test]
async fn secure_metrics_wire_both_binaries_their_certificate_and_the_service_monitors() {
    let r = render_values(SECURE).await;
    let manager = r.manager();
    let flags = args(&manager);
    assert!(
        flags.contains(&"--metrics-secure=true".to_string()),
        "{flags:?}"
    );
    let dir = flags
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-cert-dir="))
        .unwrap_or_else(|| panic!("no --metrics-cert-dir in {flags:?}"));
    let controller = r.deployment(FULLNAME);
    assert_eq!(
        secret_mounted_at(&controller, dir).as_deref(),
        Some(METRICS_SECRET)
    );
    assert_eq!(
        probe_schemes(&controller),
        [Some("HTTPS".into()), Some("HTTPS".into())]
    );

    let config = r.webhook_config();
    assert!(config.metrics_secure);
    let hook = r.deployment(WEBHOOK);
    assert_eq!(
        secret_mounted_at(&hook, &config.metrics_cert_dir.to_string_lossy()).as_deref(),
        Some(METRICS_SECRET)
    );
    assert_eq!(
        probe_schemes(&hook),
        [Some("HTTPS".into()), Some("HTTPS".into())]
    );
    assert_eq!(pod_spec(&hook).automount_service_account_token, Some(true));

    // Each ServiceMonitor: https, Prometheus' own token, the Secret's CA, the Service's name,
    // and that CA verifies the Secret's certificate for that name.
    let secret: Secret =
        serde_json::from_value(r.find("Secret", METRICS_SECRET).clone()).or_panic();
    let data = secret.data.unwrap_or_default();
    for (monitor, service) in [(FULLNAME, "etcd-operator-metrics"), (WEBHOOK, WEBHOOK)] {
        let endpoint = &r.find("ServiceMonitor", monitor)["spec"]["endpoints"][0];
        assert_eq!(endpoint["scheme"], "https", "{endpoint}");
        assert_eq!(
            endpoint["bearerTokenFile"],
            "/var/run/secrets/kubernetes.io/serviceaccount/token"
        );
        let tls = &endpoint["tlsConfig"];
        assert_eq!(
            tls["ca"],
            json!({"secret": {"name": METRICS_SECRET, "key": "ca.crt"}})
        );
        assert!(tls["insecureSkipVerify"].is_null(), "{tls}");
        let server_name = format!("{service}.{NAMESPACE}.svc");
        assert_eq!(tls["serverName"], server_name.as_str());
        verifies(&data["ca.crt"].0, &data["tls.crt"].0, &server_name)
            .unwrap_or_else(|e| panic!("{monitor}: {e}"));
    }

    // RBAC: the reader role a Prometheus is bound to, and the reviews for both ServiceAccounts.
    assert_eq!(
        r.find("ClusterRole", "etcd-operator-metrics-reader")["rules"],
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let auth = r.find("ClusterRole", "etcd-operator-metrics-auth");
    assert_eq!(
        auth["rules"],
        json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        ])
    );
    let subjects: Vec<&str> = r.find("ClusterRoleBinding", "etcd-operator-metrics-auth")
        ["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(subjects, [FULLNAME, WEBHOOK]);
    // The webhook reaches the API only for these reviews.
    let policy = r.find("NetworkPolicy", WEBHOOK);
    assert_eq!(
        policy["spec"]["egress"][0]["ports"],
        json!([{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}])
    );

    // Off (the default): none of it.
    let r = render_values(&[
        "webhook.enabled=true",
        "metrics.serviceMonitor.enabled=true",
    ])
    .await;
    for (kind, name) in [
        ("Secret", METRICS_SECRET),
        ("ClusterRole", "etcd-operator-metrics-reader"),
        ("ClusterRole", "etcd-operator-metrics-auth"),
        ("ClusterRoleBinding", "etcd-operator-metrics-auth"),
    ] {
        assert!(
            r.try_find(kind, name).is_none(),
            "{kind} {name} without metrics.secure"
        );
    }
    assert!(!args(&r.manager())
        .iter()
        .any(|a| a.starts_with("--metrics-")));
    assert!(!r.webhook_config().metrics_secure);
    assert_eq!(
        probe_schemes(&r.deployment(FULLNAME)),
        [Some("HTTP".into()), Some("HTTP".into())]
    );
    assert_eq!(
        r.find("ServiceMonitor", FULLNAME)["spec"]["endpoints"][0]["scheme"],
        "http"
    );
}

#[tokio::test]
async fn secure_metrics_certificate_comes_from_cert_manager_in_its_mode() {
    let r = render_values(&[
        "metrics.secure=true",
        "webhook.enabled=true",
        "webhook.certificate.mode=certManager",
    ])
    .await;
    let certificate = r.find("Certificate", "etcd-operator-metrics");
    let secret = "etcd-operator-metrics-cert-manager-tls";
    assert_eq!(certificate["spec"]["secretName"], secret);
    assert_eq!(
        certificate["spec"]["issuerRef"],
        json!({"name": "etcd-operator-webhook-ca", "kind": "Issuer", "group": "cert-manager.io"})
    );
    let names: Vec<&str> = certificate["spec"]["dnsNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for service in ["etcd-operator-metrics", WEBHOOK] {
        assert!(
            names.contains(&format!("{service}.{NAMESPACE}.svc").as_str()),
            "{names:?}"
        );
    }
    assert!(r.try_find("Secret", METRICS_SECRET).is_none());
    let dir = args(&r.manager())
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-cert-dir=").map(str::to_string))
        .unwrap_or_else(|| panic!("no --metrics-cert-dir"));
    assert_eq!(
        secret_mounted_at(&r.deployment(FULLNAME), &dir).as_deref(),
        Some(secret)
    );
}

/// The whole secure render, as the apiserver takes it (server-side dry run).
#[tokio::test]
async fn secure_metrics_render_is_accepted_by_the_apiserver() {
    let sets = [
        "metrics.secure=true",
        "webhook.enabled=true",
        "networkPolicy.enabled=true",
        "crds.enabled=false",
    ];
    let extra: Vec<&str> = sets.iter().flat_map(|s| ["--set", *s]).collect();
    let applied = super::network::dry_run_applied("sm", "secure-metrics-system", &extra).await;
    for line in [
        "secret/sm-etcd-operator-metrics-tls serverside-applied",
        "clusterrole.rbac.authorization.k8s.io/sm-etcd-operator-metrics-reader serverside-applied",
        "clusterrolebinding.rbac.authorization.k8s.io/sm-etcd-operator-metrics-auth serverside-applied",
    ] {
        assert!(applied.contains(line), "{line}:\n{applied}");
    }
}
