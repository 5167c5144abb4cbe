//! `networkPolicy.enabled` (docs/installation.md#network-policies): the policies select the Pods
//! they guard and name ports those Pods declare, follow `watchNamespace` and their values, and
//! are accepted by a real apiserver.

use serde_json::{json, Value};

use super::*;

/// The controller's NetworkPolicy (the webhook's is named [`WEBHOOK`]).
const CONTROLLER_POLICY: &str = FULLNAME;

/// Whether a `matchLabels`-only selector selects the Pods of a Deployment's template.
fn selects_pods_of(selector: &Value, deployment: &Value) -> bool {
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    selector["matchLabels"]
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| &labels[k] == v))
}

/// The named container ports of a Deployment's first container.
fn port_names(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect()
}

/// The `(port, protocol)` pairs of a list of rules (ingress or egress).
fn ports_of(rule: &Value) -> Vec<(Value, String)> {
    rule["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["port"].clone(),
                p["protocol"].as_str().unwrap_or("TCP").to_string(),
            )
        })
        .collect()
}

/// The egress rule that opens `port`.
fn egress_to(policy: &Value, port: u16) -> &Value {
    policy["spec"]["egress"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|rule| ports_of(rule).iter().any(|(p, _)| *p == json!(port)))
        .unwrap_or_else(|| panic!("no egress rule to port {port}: {policy}"))
}

#[tokio::test]
async fn network_policies_guard_the_controller_and_webhook_pods_on_their_own_ports() {
    assert!(render(&[]).await.all("NetworkPolicy").is_empty());
    let r = render_values(&["networkPolicy.enabled=true", "webhook.enabled=true"]).await;
    assert_eq!(r.all("NetworkPolicy").len(), 2, "{:?}", r.names());
    let controller = r.find("Deployment", FULLNAME);
    let webhook = r.find("Deployment", WEBHOOK);

    let policy = r.find("NetworkPolicy", CONTROLLER_POLICY);
    let spec = &policy["spec"];
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    assert!(
        selects_pods_of(&spec["podSelector"], controller),
        "{policy}"
    );
    assert!(!selects_pods_of(&spec["podSelector"], webhook), "{policy}");
    // In: only the metrics port, from anyone by default.
    let ingress = spec["ingress"].as_array().cloned().unwrap_or_default();
    assert_eq!(ingress.len(), 1, "{policy}");
    assert_eq!(
        ports_of(&ingress[0]),
        [(json!("metrics"), "TCP".to_string())]
    );
    assert!(ingress[0]["from"].is_null(), "{policy}");
    assert!(port_names(controller).contains(&"metrics".to_string()));
    // Out: the apiserver on both of its ports to anywhere, etcd members' client port in any
    // namespace, DNS.
    let api = egress_to(policy, 6443);
    assert_eq!(
        ports_of(api),
        [(json!(443), "TCP".into()), (json!(6443), "TCP".into())]
    );
    assert!(api["to"].is_null(), "{api}");
    let etcd = egress_to(policy, 2379);
    assert_eq!(
        etcd["to"],
        json!([{
            "podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "etcd",
                "app.kubernetes.io/managed-by": "etcd-operator",
            }},
            "namespaceSelector": {},
        }])
    );
    assert_eq!(
        ports_of(egress_to(policy, 53)),
        [(json!(53), "UDP".into()), (json!(53), "TCP".into())]
    );
    assert_eq!(spec["egress"].as_array().map(Vec::len), Some(3), "{policy}");

    let policy = r.find("NetworkPolicy", WEBHOOK);
    let spec = &policy["spec"];
    assert!(selects_pods_of(&spec["podSelector"], webhook), "{policy}");
    assert!(
        !selects_pods_of(&spec["podSelector"], controller),
        "{policy}"
    );
    let opened: Vec<_> = spec["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(ports_of)
        .map(|(port, _)| port)
        .collect();
    assert_eq!(opened, [json!("https"), json!("admin")], "{policy}");
    let declared = port_names(webhook);
    assert!(declared.contains(&"https".to_string()) && declared.contains(&"admin".to_string()));
    // The apiserver calls the webhook from no Pod: the webhook port has no `from`.
    assert!(spec["ingress"][0]["from"].is_null(), "{policy}");
    assert_eq!(
        spec["egress"],
        json!([]),
        "the webhook calls nothing: {policy}"
    );
}

#[tokio::test]
async fn network_policies_follow_watch_namespace_and_their_values() {
    let prometheus = json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    });
    let s3 = json!({"to": [{"ipBlock": {"cidr": "198.51.100.7/32"}}], "ports": [{"port": 9000, "protocol": "TCP"}]});
    let values = json!({
        "webhook": {"enabled": true},
        "watchNamespace": "team-a",
        "networkPolicy": {
            "enabled": true,
            "apiServer": {"ports": [6443], "cidrs": ["192.0.2.10/32", "192.0.2.11/32"]},
            "metricsFrom": [prometheus],
            "extraEgress": [s3],
        },
    });
    let dir = tempfile::tempdir().or_panic();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, yaml_serde::to_string(&values).or_panic()).or_panic();
    let r = render(&["-f", &file.to_string_lossy()]).await;
    let policy = r.find("NetworkPolicy", CONTROLLER_POLICY);
    assert_eq!(
        egress_to(policy, 2379)["to"][0]["namespaceSelector"],
        json!({"matchLabels": {"kubernetes.io/metadata.name": "team-a"}})
    );
    let api = egress_to(policy, 6443);
    assert_eq!(ports_of(api), [(json!(6443), "TCP".into())]);
    assert_eq!(
        api["to"],
        json!([{"ipBlock": {"cidr": "192.0.2.10/32"}}, {"ipBlock": {"cidr": "192.0.2.11/32"}}])
    );
    assert_eq!(policy["spec"]["ingress"][0]["from"], json!([prometheus]));
    assert_eq!(egress_to(policy, 9000), &s3);
    let webhook = r.find("NetworkPolicy", WEBHOOK);
    assert!(webhook["spec"]["ingress"][0]["from"].is_null(), "{webhook}");
    assert_eq!(webhook["spec"]["ingress"][1]["from"], json!([prometheus]));

    for (set, expect) in [
        ("networkPolicy.enabeld=true", "enabeld"),
        ("networkPolicy.apiServer.cidrs={10.0.0.1}", "cidrs"),
        ("networkPolicy.apiServer.ports={0}", "ports"),
    ] {
        let err = render_error(&["--set", set]).await;
        assert!(err.contains(expect), "--set {set}: {err}");
    }
}

/// `helm template` of release `release` into `ns` with `extra` arguments, applied with a
/// server-side dry run on the shared apiserver (its schemas and validation) into `ns`, which is
/// created first: what kubectl printed. Fails the test when the apiserver refuses anything.
pub(super) async fn dry_run_applied(release: &str, ns: &str, extra: &[&str]) -> String {
    let cp = install_plane().await;
    let out = cp.kubectl(&["create", "namespace", ns]).await.or_panic();
    assert!(
        out.success || out.stderr.contains("AlreadyExists"),
        "{}",
        out.stderr
    );
    let text = Helm::new(None)
        .or_panic()
        .template(release, ns, extra)
        .await
        .or_panic();
    let dir = tempfile::tempdir().or_panic();
    let path = dir.path().join("rendered.yaml");
    std::fs::write(&path, &text).or_panic();
    let path = path.to_string_lossy();
    let out = cp
        .kubectl(&["apply", "--server-side", "--dry-run=server", "-f", &path])
        .await
        .or_panic();
    assert!(out.success, "{extra:?}: {}\n{text}", out.stderr);
    out.stdout
}

/// Both policies, with and without the optional parts, as the apiserver takes them (server-side
/// dry run: its schema and validation of NetworkPolicy).
#[tokio::test]
async fn network_policies_are_accepted_by_the_apiserver() {
    for sets in [
        vec!["networkPolicy.enabled=true", "webhook.enabled=true"],
        vec![
            "networkPolicy.enabled=true",
            "webhook.enabled=true",
            "watchNamespace=team-a",
            "networkPolicy.apiServer.cidrs={192.0.2.10/32}",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
            "networkPolicy.extraEgress[0].ports[0].port=9000",
        ],
    ] {
        let mut extra = vec!["--show-only", "templates/networkpolicy.yaml"];
        extra.extend(sets.iter().flat_map(|s| ["--set", *s]));
        let applied = dry_run_applied("np", "netpol-system", &extra).await;
        for name in ["np-etcd-operator", "np-etcd-operator-webhook"] {
            let line = format!(
                "networkpolicy.networking.k8s.io/{name} serverside-applied (server dry run)"
            );
            assert!(applied.contains(&line), "{sets:?}: {applied}");
        }
    }
}
