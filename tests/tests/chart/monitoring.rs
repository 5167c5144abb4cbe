//! The chart's monitoring (docs/observability.md): the etcd PodMonitor selects the Pods the
//! operator builds and labels its targets from their labels; the alert rules select the series
//! the two monitors produce (jobs, labels), pass `promtool check rules` and their unit tests in
//! tests/promrules/ (each alert fires on a bad series and stays quiet on a good one), link to
//! anchors that exist; the dashboard is valid JSON for the Grafana sidecar; every metric the
//! rules and the dashboard name is in `tests::monitoring`'s list (which tests/tests/e2e_metrics.rs
//! checks against real scrapes) and every listed one is used.
//!
//! Needs `ETCD_OPERATOR_PROMTOOL` (tools/promtool/build.sh) besides the testbins.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use api::v1alpha2::EtcdMember;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use tests::monitoring::{self, ETCD_METRICS, OPERATOR_METRICS, SYNTHETIC, WEBHOOK_METRICS};

use super::*;

/// The values that render every monitoring object (the webhook's among them).
const ALL_MONITORING: &[&str] = &[
    "webhook.enabled=true",
    "metrics.serviceMonitor.enabled=true",
    "metrics.etcd.podMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "metrics.dashboard.enabled=true",
];

/// The job of the member series: the PodMonitor takes it from the Pods' `jobLabel` label.
const ETCD_JOB: &str = "etcd";
/// The job of the operator's series: the ServiceMonitor's Service name (no `jobLabel`).
const OPERATOR_JOB: &str = "etcd-operator-metrics";
/// The job of the webhook's series: its ServiceMonitor's Service name.
const WEBHOOK_JOB: &str = "etcd-operator-webhook";

/// Labels prometheus-operator puts on every target of a PodMonitor / ServiceMonitor.
const POD_TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "endpoint",
];
const SERVICE_TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "endpoint",
    "service",
];
/// The labels of the operator's own metrics (controller/src/metrics.rs).
const OPERATOR_METRIC_LABELS: &[&str] = &[
    "namespace",
    "cluster",
    "controller",
    "reason",
    "type",
    "secret",
    "schedule",
    "phase",
    "op",
    "result",
    "outcome",
];
/// Labels of etcd's own series the queries use (histogram buckets, gRPC, apply).
const ETCD_METRIC_LABELS: &[&str] = &["le", "grpc_method", "op"];

/// A member of cluster `cluster` in `ns`, as the cluster controller creates it (added to etcd).
fn member(name: &str, cluster: &str, ns: &str) -> EtcdMember {
    serde_json::from_value(json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
        "kind": "EtcdMember",
        "metadata": {"name": name, "namespace": ns, "uid": "member-uid",
                     "labels": api::labels::member_labels(cluster, name)},
        "spec": {"clusterName": cluster, "version": "3.6.16",
                 "initialCluster": format!("{name}=http://{name}.{cluster}.{ns}.svc:2380"),
                 "clusterToken": format!("{ns}-{cluster}-uid")}
    }))
    .or_panic()
}

/// The member Pod the operator builds (the controller's own builder), voter or learner.
fn member_pod(voter: bool) -> Pod {
    controller::builders::pod::member_pod(
        &member("main-abcde", "main", "db"),
        &controller::builders::pod::PodParams {
            etcd_image_repository: "quay.io/coreos/etcd",
            voter,
            bootstrap_new_cluster: false,
            operator_image: Some("op:1"),
        },
    )
    .or_panic()
}

/// Prometheus' name for a Pod label in service discovery.
fn meta_label(label: &str) -> String {
    let sanitized: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("__meta_kubernetes_pod_label_{sanitized}")
}

/// Whether a `LabelSelector` (matchLabels, matchExpressions) selects `labels`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let by_expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str() {
                Some("Exists") => labels.contains_key(key),
                Some("DoesNotExist") => !labels.contains_key(key),
                Some("In") => labels
                    .get(key)
                    .is_some_and(|v| values.contains(&v.as_str())),
                Some("NotIn") => !labels
                    .get(key)
                    .is_some_and(|v| values.contains(&v.as_str())),
                other => panic!("unknown selector operator {other:?}"),
            }
        });
    by_labels && by_expressions
}

/// The target labels the PodMonitor gives a Pod with `labels`: `job` from `jobLabel` and each
/// relabeling that copies a Pod label.
fn pod_monitor_target_labels(
    pm: &Value,
    labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let job_label = pm["spec"]["jobLabel"].as_str().unwrap_or_default();
    out.insert(
        "job".to_string(),
        labels.get(job_label).cloned().unwrap_or_default(),
    );
    for endpoint in pm["spec"]["podMetricsEndpoints"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for r in endpoint["relabelings"].as_array().into_iter().flatten() {
            assert_eq!(r["action"], "replace", "{r}");
            let source: Vec<&str> = r["sourceLabels"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(source.len(), 1, "one source label: {r}");
            let value = labels
                .iter()
                .find(|(k, _)| meta_label(k) == source[0])
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| {
                    panic!(
                        "relabeling {r} reads {} but the member Pod has no such label: {labels:?}",
                        source[0]
                    )
                });
            out.insert(
                r["targetLabel"].as_str().unwrap_or_default().to_string(),
                value,
            );
        }
    }
    out
}

#[tokio::test]
async fn pod_monitor_selects_the_member_pods_the_operator_builds_and_labels_them_by_cluster() {
    let r = render_values(&["metrics.etcd.podMonitor.enabled=true"]).await;
    let pm = r.find("PodMonitor", "etcd-operator-etcd");
    assert_eq!(pm["spec"]["namespaceSelector"], json!({"any": true}));
    for voter in [true, false] {
        let pod = member_pod(voter);
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert!(
            selects(&pm["spec"]["selector"], &labels),
            "the PodMonitor {} does not select a member Pod (voter: {voter}) labelled {labels:?}",
            pm["spec"]["selector"]
        );
        let target = pod_monitor_target_labels(pm, &labels);
        assert_eq!(target.get("job").map(String::as_str), Some(ETCD_JOB));
        assert_eq!(target.get("cluster").map(String::as_str), Some("main"));
        // The endpoint's port is the etcd container's port serving --listen-metrics-urls.
        let spec = pod.spec.as_ref().expect("a pod spec");
        let etcd = &spec.containers[0];
        let port_name = pm["spec"]["podMetricsEndpoints"][0]["port"]
            .as_str()
            .unwrap_or_default();
        let port = etcd
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(port_name))
            .unwrap_or_else(|| panic!("the etcd container has no port {port_name}"));
        let metrics_url = format!(
            "--listen-metrics-urls=http://0.0.0.0:{}",
            port.container_port
        );
        assert!(
            etcd.args.iter().flatten().any(|a| *a == metrics_url),
            "{metrics_url} not in {:?}",
            etcd.args
        );
        assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["scheme"], "http");
    }
    // Snapshot and restore Jobs' Pods carry the cluster's app labels but are no members.
    let job_pod = api::labels::job_labels("main");
    assert!(
        !selects(&pm["spec"]["selector"], &job_pod),
        "a snapshot Job's Pod is selected: {job_pod:?}"
    );

    // watchNamespace narrows it; an explicit list wins.
    let r = render_values(&[
        "metrics.etcd.podMonitor.enabled=true",
        "watchNamespace=team-a",
    ])
    .await;
    assert_eq!(
        r.find("PodMonitor", "etcd-operator-etcd")["spec"]["namespaceSelector"],
        json!({"matchNames": ["team-a"]})
    );
    let r = render_values(&[
        "metrics.etcd.podMonitor.enabled=true",
        "metrics.etcd.podMonitor.namespaces={db,cache}",
    ])
    .await;
    assert_eq!(
        r.find("PodMonitor", "etcd-operator-etcd")["spec"]["namespaceSelector"],
        json!({"matchNames": ["db", "cache"]})
    );
}

/// Every rule of the rendered PrometheusRule: `(alert, expr, annotations)`.
fn rules(r: &Rendered) -> Vec<(String, String, Value)> {
    r.find("PrometheusRule", FULLNAME)["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|rule| {
            (
                rule["alert"].as_str().unwrap_or_default().to_string(),
                rule["expr"].as_str().unwrap_or_default().to_string(),
                rule["annotations"].clone(),
            )
        })
        .collect()
}

/// `job="…"` matchers of the selectors of `metric` in `expr`.
fn jobs_of(expr: &str, metric: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find(metric) {
        let after = &rest[at + metric.len()..];
        let boundary_before = rest[..at]
            .chars()
            .last()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        if boundary_before && after.starts_with('{') {
            let end = after.find('}').unwrap_or(after.len());
            let matchers = &after[1..end];
            let job = matchers
                .split(',')
                .find_map(|m| m.trim().strip_prefix("job=\""))
                .map(|j| j.trim_end_matches('"').to_string());
            out.push(job.unwrap_or_else(|| format!("(no job matcher in {metric}{{{matchers}}})")));
        } else if boundary_before
            && !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            out.push(format!("(no selector on {metric})"));
        }
        rest = after;
    }
    out
}

#[tokio::test]
async fn alert_rules_select_the_jobs_and_labels_the_monitors_produce() {
    let r = render_values(ALL_MONITORING).await;
    // The operator's per-cluster series carry the cluster's namespace: the ServiceMonitor must
    // keep it, or Prometheus renames it exported_namespace and every join on namespace is empty.
    let sm = r.find("ServiceMonitor", FULLNAME);
    assert_eq!(sm["spec"]["endpoints"][0]["honorLabels"], true, "{sm}");
    assert!(
        sm["spec"]["jobLabel"].is_null(),
        "the job is the Service name"
    );
    let service = r.find("Service", OPERATOR_JOB);
    assert_eq!(service["metadata"]["name"], OPERATOR_JOB);
    let pm = r.find("PodMonitor", "etcd-operator-etcd");
    let pod_labels = member_pod(true).metadata.labels.unwrap_or_default();
    let etcd_target = pod_monitor_target_labels(pm, &pod_labels);

    let etcd_labels: BTreeSet<&str> = POD_TARGET_LABELS
        .iter()
        .copied()
        .chain(etcd_target.keys().map(String::as_str))
        .chain(ETCD_METRIC_LABELS.iter().copied())
        .collect();
    let operator_labels: BTreeSet<&str> = SERVICE_TARGET_LABELS
        .iter()
        .chain(OPERATOR_METRIC_LABELS)
        .copied()
        .collect();

    let rules = rules(&r);
    assert!(rules.len() >= 15, "{} rules", rules.len());
    let mut problems = Vec::new();
    for (alert, expr, _) in &rules {
        for metric in monitoring::metric_names(expr) {
            let want = if metric.starts_with("etcd_operator_webhook_") {
                vec![WEBHOOK_JOB]
            } else if metric.starts_with("etcd_operator_") {
                vec![OPERATOR_JOB]
            } else if SYNTHETIC.contains(&metric.as_str()) {
                vec![OPERATOR_JOB, ETCD_JOB, WEBHOOK_JOB]
            } else {
                vec![ETCD_JOB]
            };
            for job in jobs_of(expr, &metric) {
                if !want.contains(&job.as_str()) {
                    problems.push(format!(
                        "{alert}: {metric} selects job {job}, want {want:?}"
                    ));
                }
            }
        }
        let labels_ok: BTreeSet<&str> = if expr.contains("etcd_operator_") {
            operator_labels.union(&etcd_labels).copied().collect()
        } else {
            etcd_labels.clone()
        };
        for label in monitoring::label_names(expr) {
            if !labels_ok.contains(label.as_str()) {
                problems.push(format!(
                    "{alert}: label {label} is on none of the series it reads"
                ));
            }
        }
    }
    // Joins of etcd's and the operator's series (EtcdLearnerStuck) go through labels both have.
    for label in ["namespace", "cluster"] {
        assert!(
            etcd_labels.contains(label) && operator_labels.contains(label),
            "{label}: etcd targets {etcd_labels:?}, operator {operator_labels:?}"
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The heading anchors of a Markdown file, as GitHub makes them: lowercase, punctuation dropped,
/// spaces to dashes. Lines in fenced code blocks (shell comments) are no headings.
pub(super) fn doc_anchors(doc: &Path) -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("reading {}: {e}", doc.display()));
    let mut in_fence = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                in_fence = !in_fence;
                return false;
            }
            !in_fence
        })
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn every_alert_links_to_its_runbook_section_and_says_what_happened() {
    let r = render_values(&[
        "metrics.prometheusRule.enabled=true",
        "webhook.enabled=true",
        "metrics.prometheusRule.runbookBaseURL=https://docs.example.test/observability.md",
    ])
    .await;
    let anchors = doc_anchors(&repo_root().join("docs/observability.md"));
    for (alert, _, annotations) in rules(&r) {
        let url = annotations["runbook_url"].as_str().unwrap_or_default();
        let anchor = alert.to_lowercase();
        assert_eq!(
            url,
            format!("https://docs.example.test/observability.md#{anchor}"),
            "{alert}"
        );
        assert!(
            anchors.contains(&anchor),
            "{alert}: docs/observability.md has no section #{anchor}"
        );
        for key in ["summary", "description"] {
            assert!(
                !annotations[key].as_str().unwrap_or_default().is_empty(),
                "{alert} has no {key}"
            );
        }
        let severity = r.find("PrometheusRule", FULLNAME)["spec"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .find(|rule| rule["alert"] == alert.as_str())
            .map(|rule| rule["labels"]["severity"].clone())
            .unwrap_or_default();
        assert!(
            severity == "warning" || severity == "critical",
            "{alert}: severity {severity}"
        );
    }
}

/// With the defaults every runbook_url is a page of this repository's docs on GitHub (the
/// repository of the workspace Cargo.toml, branch main), and names a heading of that file.
#[tokio::test]
async fn every_default_runbook_url_is_a_heading_in_this_repositorys_docs() {
    let r = render_values(&[
        "metrics.prometheusRule.enabled=true",
        "webhook.enabled=true",
    ])
    .await;
    let blob = format!("{}/blob/main/", workspace_package("repository"));
    let mut problems = Vec::new();
    let rules = rules(&r);
    for (alert, _, annotations) in &rules {
        let url = annotations["runbook_url"].as_str().unwrap_or_default();
        let Some((path, anchor)) = url
            .strip_prefix(blob.as_str())
            .and_then(|rest| rest.split_once('#'))
        else {
            problems.push(format!(
                "{alert}: {url} is no page of {blob} with an anchor"
            ));
            continue;
        };
        let file = repo_root().join(path);
        if !path.starts_with("docs/") || !path.ends_with(".md") || !file.is_file() {
            problems.push(format!(
                "{alert}: {url} names {path}, no Markdown file in docs/"
            ));
        } else if !doc_anchors(&file).contains(anchor) {
            problems.push(format!("{alert}: {path} has no heading #{anchor}"));
        }
    }
    assert!(rules.len() >= 15, "{} rules", rules.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test]
async fn verified_snapshot_max_age_is_the_alerts_threshold_in_seconds() {
    for (value, seconds) in [
        (None, 172_800),
        (Some("36h"), 129_600),
        (Some("90m"), 5_400),
    ] {
        let mut values = vec!["metrics.prometheusRule.enabled=true".to_string()];
        values.extend(value.map(|v| format!("metrics.prometheusRule.verifiedSnapshotMaxAge={v}")));
        let r = render_values(&values).await;
        let (_, expr, annotations) = rules(&r)
            .into_iter()
            .find(|(alert, _, _)| alert == "EtcdNoRecentVerifiedSnapshot")
            .unwrap_or_else(|| panic!("no EtcdNoRecentVerifiedSnapshot rule"));
        assert!(
            expr.trim_end().ends_with(&format!("> {seconds}")),
            "{value:?}: {expr}"
        );
        let summary = annotations["summary"].as_str().unwrap_or_default();
        assert!(summary.contains(value.unwrap_or("2d")), "{summary}");
    }
}

/// The webhook's alerts exist only with the webhook; the certificate threshold is the value in
/// seconds, and an unreachable webhook is critical only when it blocks writes (failurePolicy
/// Fail). Its ServiceMonitor scrapes the webhook Service's `metrics` port, which leads to the
/// container's admin port.
#[tokio::test]
async fn webhook_alerts_and_monitor_follow_the_webhook_and_its_values() {
    let alerts = |r: &Rendered| -> BTreeMap<String, Value> {
        r.find("PrometheusRule", FULLNAME)["spec"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|rule| (rule["alert"].as_str().unwrap_or_default().to_string(), rule))
            .collect()
    };
    let without = render_values(&["metrics.prometheusRule.enabled=true"]).await;
    let names = alerts(&without);
    assert!(
        !names.keys().any(|a| a.starts_with("EtcdOperatorWebhook")),
        "{:?}",
        names.keys()
    );
    for (extra, severity, seconds) in [
        (vec![], "critical", 604_800),
        (
            vec![
                "webhook.validation.failurePolicy=Ignore",
                "metrics.prometheusRule.webhookCertificateExpiresWithin=72h",
            ],
            "warning",
            259_200,
        ),
    ] {
        let mut values = vec![
            "metrics.prometheusRule.enabled=true",
            "webhook.enabled=true",
        ];
        values.extend(extra);
        let rules = alerts(&render_values(&values).await);
        let down = &rules["EtcdOperatorWebhookDown"];
        assert_eq!(down["labels"]["severity"], severity, "{values:?}: {down}");
        let expiring = rules["EtcdOperatorWebhookCertificateExpiring"]["expr"]
            .as_str()
            .unwrap_or_default();
        assert!(
            expiring.trim_end().ends_with(&format!("< {seconds}")),
            "{values:?}: {expiring}"
        );
    }

    let r = render_values(&[
        "metrics.serviceMonitor.enabled=true",
        "webhook.enabled=true",
    ])
    .await;
    let sm = r.find("ServiceMonitor", WEBHOOK_JOB);
    let service = r.find("Service", WEBHOOK_JOB);
    let labels: BTreeMap<String, String> =
        serde_json::from_value(service["metadata"]["labels"].clone()).or_panic();
    assert!(selects(&sm["spec"]["selector"], &labels), "{sm}");
    let operator_sm = r.find("ServiceMonitor", FULLNAME);
    assert!(
        !selects(&operator_sm["spec"]["selector"], &labels),
        "the operator's monitor also selects the webhook Service"
    );
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics", "{sm}");
    let port = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "metrics")
        .unwrap_or_else(|| panic!("no port metrics on {service}"));
    assert_eq!(port["targetPort"], "admin", "{service}");
    let deployment = r.find("Deployment", WEBHOOK_JOB);
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--admin-listen=0.0.0.0:8080"), "{args}");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["ports"][1],
        json!({"name": "admin", "containerPort": 8080, "protocol": "TCP"})
    );
    let r = render_values(&["metrics.serviceMonitor.enabled=true"]).await;
    assert_eq!(
        r.all("ServiceMonitor").len(),
        1,
        "a webhook monitor without the webhook"
    );
}

/// The promtool binary (tools/promtool/build.sh, `ETCD_OPERATOR_PROMTOOL`).
fn promtool() -> PathBuf {
    let path = std::env::var_os("ETCD_OPERATOR_PROMTOOL").unwrap_or_else(|| {
        panic!(
            "ETCD_OPERATOR_PROMTOOL is not set: build promtool with `bash tools/promtool/build.sh` \
             and set it to <printed directory>/promtool (the Makefile does)"
        )
    });
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "ETCD_OPERATOR_PROMTOOL={} is no file: run `bash tools/promtool/build.sh`",
        path.display()
    );
    path
}

fn run_promtool(args: &[&Path]) -> String {
    let out = std::process::Command::new(promtool())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running promtool: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?} failed ({}):\n{text}",
        out.status
    );
    text
}

#[tokio::test]
async fn alert_rules_pass_promtool_check_and_fire_only_on_their_bad_series() {
    let r = render_values(&[
        "metrics.prometheusRule.enabled=true",
        "webhook.enabled=true",
    ])
    .await;
    let rule = r.find("PrometheusRule", FULLNAME);
    let dir = tempfile::tempdir().or_panic();

    // The rule file as rendered, annotations and all.
    let checked = dir.path().join("rendered-rules.yaml");
    std::fs::write(&checked, yaml_serde::to_string(&rule["spec"]).or_panic()).or_panic();
    let out = run_promtool(&[Path::new("check"), Path::new("rules"), checked.as_path()]);
    assert!(out.contains("SUCCESS"), "{out}");

    // The unit tests compare alerts by their labels: the same rules without annotations.
    let mut spec = rule["spec"].clone();
    for group in spec["groups"].as_array_mut().into_iter().flatten() {
        for rule in group["rules"].as_array_mut().into_iter().flatten() {
            if let Some(r) = rule.as_object_mut() {
                r.remove("annotations");
            }
        }
    }
    std::fs::write(
        dir.path().join("etcd-operator-rules.yaml"),
        yaml_serde::to_string(&spec).or_panic(),
    )
    .or_panic();
    let tests_file = helm::chart_dir().join("../../tests/promrules/etcd-operator.test.yaml");
    let copied = dir.path().join("etcd-operator.test.yaml");
    std::fs::copy(&tests_file, &copied).or_panic();
    let out = run_promtool(&[Path::new("test"), Path::new("rules"), copied.as_path()]);
    assert!(out.contains("SUCCESS"), "{out}");

    // Every alert has a case where it fires and one where it stays quiet.
    let tests: Value =
        yaml_serde::from_str(&std::fs::read_to_string(&tests_file).or_panic()).or_panic();
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for t in tests["tests"].as_array().into_iter().flatten() {
        for check in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = check["alertname"].as_str().unwrap_or_default().to_string();
            if check["exp_alerts"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            {
                fires.insert(name);
            } else {
                quiet.insert(name);
            }
        }
    }
    let alerts: BTreeSet<String> = rules(&r).into_iter().map(|(a, _, _)| a).collect();
    let never_fires: Vec<_> = alerts.difference(&fires).collect();
    let never_quiet: Vec<_> = alerts.difference(&quiet).collect();
    assert!(
        never_fires.is_empty() && never_quiet.is_empty(),
        "alerts without a firing case: {never_fires:?}; without a quiet case: {never_quiet:?}"
    );
    let unknown: Vec<_> = fires
        .union(&quiet)
        .filter(|a| !alerts.contains(*a))
        .collect();
    assert!(
        unknown.is_empty(),
        "tests of alerts the chart does not have: {unknown:?}"
    );
}

/// Every PromQL expression of the dashboard (panel targets and template variables).
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(target["expr"].as_str().unwrap_or_default().to_string());
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(q) = var["query"]["query"].as_str() {
            // label_values(<selector>, <label>)
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(sel, _)| sel.to_string())
                .unwrap_or_else(|| q.to_string());
            out.push(inner);
        }
    }
    out
}

#[tokio::test]
async fn dashboard_is_a_sidecar_config_map_of_per_cluster_panels() {
    let r = render_values(&["metrics.dashboard.enabled=true"]).await;
    let cm = r.find("ConfigMap", "etcd-operator-dashboard");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["namespace"], NAMESPACE);
    let text = cm["data"]["etcd-clusters.json"]
        .as_str()
        .unwrap_or_default();
    let dashboard: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("the dashboard is not JSON: {e}"));
    assert_eq!(dashboard["uid"], "etcd-operator-clusters");
    let vars: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "namespace", "cluster"]);
    let titles: Vec<&str> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["title"].as_str())
        .collect();
    for want in [
        "Role of each member",
        "Leader changes (1h)",
        "DB size vs quota",
        "Apply latency (p99)",
        "WAL fsync (p99)",
        "Age of the newest successful scheduled snapshot",
        "Reconciles",
    ] {
        assert!(titles.contains(&want), "no panel {want}: {titles:?}");
    }
    // Every panel query of a cluster's own series is filtered to the chosen cluster.
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(!expr.is_empty(), "{panel}");
            let cluster_series = monitoring::metric_names(expr).iter().any(|m| {
                !m.starts_with("etcd_operator_reconcile")
                    && !m.starts_with("etcd_operator_defrag")
                    && !m.starts_with("etcd_operator_etcd_call")
            });
            if cluster_series {
                assert!(
                    expr.contains(r#"namespace="$namespace",cluster="$cluster""#),
                    "{expr}"
                );
            }
        }
    }
    // The file the ConfigMap carries is the one in the chart (no templating of its braces).
    let file = std::fs::read_to_string(monitoring::dashboard_path()).or_panic();
    assert_eq!(text.trim(), file.trim());
    // Off by default.
    assert!(render(&[]).await.all("ConfigMap").is_empty());
}

#[tokio::test]
async fn the_metric_list_is_exactly_what_the_rules_and_the_dashboard_use() {
    let r = render_values(ALL_MONITORING).await;
    let mut used = BTreeSet::new();
    for (_, expr, _) in rules(&r) {
        used.extend(monitoring::metric_names(&expr));
    }
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring::dashboard_path()).or_panic())
            .or_panic();
    for q in dashboard_queries(&dashboard) {
        used.extend(monitoring::metric_names(&q));
    }
    let listed: BTreeSet<String> = ETCD_METRICS
        .iter()
        .chain(OPERATOR_METRICS)
        .chain(WEBHOOK_METRICS)
        .chain(SYNTHETIC)
        .map(|s| s.to_string())
        .collect();
    let unlisted: Vec<_> = used.difference(&listed).collect();
    let unused: Vec<_> = listed.difference(&used).collect();
    assert!(
        unlisted.is_empty() && unused.is_empty(),
        "used but not in tests::monitoring (so no scrape checks them): {unlisted:?}; listed but \
         used by no rule or panel: {unused:?}"
    );
}

#[tokio::test]
async fn monitoring_objects_render_only_on_request_and_lint_clean() {
    let r = render(&[]).await;
    for kind in [
        "PodMonitor",
        "PrometheusRule",
        "ServiceMonitor",
        "ConfigMap",
    ] {
        assert!(r.all(kind).is_empty(), "{kind} rendered by default");
    }
    let helm = Helm::new(None).or_panic();
    let chart = helm::chart_dir();
    let mut args = vec![
        "lint".to_string(),
        "--strict".into(),
        chart.to_string_lossy().to_string(),
    ];
    args.extend(set_args(
        &ALL_MONITORING
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    ));
    let out = helm.run(&args).await.or_panic();
    assert!(
        out.contains("0 chart(s) failed") && !out.contains("[WARNING]"),
        "{out}"
    );
    for (set, expect) in [
        ("metrics.etcd.podMonitor.enabeld=true", "enabeld"),
        ("metrics.prometheusRule.runbookBaseURL=", "runbookBaseURL"),
        (
            "metrics.prometheusRule.verifiedSnapshotMaxAge=2 days",
            "verifiedSnapshotMaxAge",
        ),
        ("metrics.dashboard.labels=x", "labels"),
    ] {
        let err = render_error(&["--set", set]).await;
        assert!(err.contains(expect), "--set {set}: {err}");
    }
}
