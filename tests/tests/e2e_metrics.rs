//! End to end: the monitoring of docs/observability.md against reality. A 3-member cluster with
//! peer TLS (so it has a certificate to expire), an EtcdSnapshotSchedule that runs every minute,
//! an EtcdDefrag and an EtcdSnapshot whose Job name is taken (a reconcile error), all run by the
//! real operator on real etcd members; then every metric the chart's alert rules and dashboard
//! use (`tests::monitoring`'s list, which tests/tests/chart/monitoring.rs checks against the
//! rendered files) is read from a real scrape: etcd's from each member's metrics URL on its Pod
//! IP, the operator's from its admin port, with the labels the rules join on. The chart's
//! PodMonitor, rendered by the real helm, selects these member Pods (and no snapshot Job Pod) and
//! points at the port that serves those metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{json, Value};
use tests::backup::create_backups_claim;
use tests::e2e::env;
use tests::helm::Helm;
use tests::monitoring::{sampled_names, ETCD_METRICS, OPERATOR_METRICS};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
/// A schedule firing every minute has run (and completed) a snapshot within this.
const SCHEDULED: Duration = Duration::from_secs(240);

/// `GET /metrics` on `ip:2381`, the member's metrics URL (`--listen-metrics-urls`).
async fn member_metrics(ip: IpAddr) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect((ip, 2381))
        .await
        .map_err(|e| format!("connecting to {ip}:2381: {e}"))?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    Ok(response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string())
}

fn pod_ip(p: &Pod) -> IpAddr {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok())
        .unwrap_or_else(|| panic!("Pod {} has no pod IP", p.name_any()))
}

/// The lines of `metric` in an exposition.
fn samples<'a>(text: &'a str, metric: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}

fn labels_of(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.labels.clone().unwrap_or_default()
}

/// Whether a PodMonitor's `LabelSelector` selects `labels` (matchLabels, Exists expressions).
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
        && selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| match e["operator"].as_str() {
                Some("Exists") => labels.contains_key(e["key"].as_str().unwrap_or_default()),
                other => panic!("an operator the chart does not use: {other:?}"),
            })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_alerts_and_dashboard_use_is_served_by_real_members_and_the_operator() {
    let env = env().await;
    let ns = env.namespace("metrics").await;
    let name = "mon";

    // Peer TLS from a Secret of ours: its certificate's expiry is exported.
    let material = tests::tls::mint(name, &ns);
    tests::tls::create_peer_secret(env, &ns, "mon-peer", &material).await;
    env.create_cluster(
        &ns,
        name,
        tests::tls::tls_spec(3, None, None, Some("mon-peer")),
    )
    .await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 50).await;

    // A schedule running every minute, a defragmentation, and a snapshot whose Job name is
    // already taken by a Job it does not own (the snapshot controller's reconcile fails).
    create_backups_claim(env, &ns).await;
    tests::harness::create::<api::v1alpha2::EtcdSnapshotSchedule>(
        &env.client(),
        &ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshotSchedule",
               "metadata": {"name": "minutely"},
               "spec": {"clusterRef": {"name": name}, "schedule": "* * * * *",
                        "snapshotTemplate": {"destination": {"pvc": {"claimName": "backups", "subPath": "sched"}}},
                        "retention": {"keepLast": 2}}}),
    )
    .await;
    // A schedule with the continuous archive (to MinIO; its runs are a year apart): the
    // archive's lag behind the cluster is exported.
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    tests::harness::create::<api::v1alpha2::EtcdSnapshotSchedule>(
        &env.client(),
        &ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshotSchedule",
               "metadata": {"name": "archived"},
               "spec": {"clusterRef": {"name": name}, "schedule": "0 0 1 1 *",
                        "snapshotTemplate": {"destination": {"s3": {
                            "endpoint": endpoint, "bucket": minio.bucket, "key": "mon/",
                            "forcePathStyle": true,
                            "credentialsSecretRef": {"name": "s3-creds"}}}},
                        "retention": {"keepLast": 1},
                        "archive": {}}}),
    )
    .await;
    tests::harness::create::<api::v1alpha2::EtcdDefrag>(
        &env.client(),
        &ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdDefrag",
               "metadata": {"name": "once"},
               "spec": {"clusterRef": {"name": name}, "rule": {"all": true}}}),
    )
    .await;
    tests::harness::create::<k8s_openapi::api::batch::v1::Job>(
        &env.client(),
        &ns,
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": api::labels::snapshot_job_name("taken")},
               "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "x", "image": "not-run.example.test/x:1"}]}}}}),
    )
    .await;
    tests::backup::create_snapshot(
        env,
        &ns,
        "taken",
        name,
        api::v1alpha2::SnapshotDestination {
            s3: None,
            pvc: Some(api::v1alpha2::PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("taken".into()),
            }),
        },
    )
    .await;

    // The operator: every listed metric has samples, the per-cluster ones with this cluster's
    // namespace and name (the labels the rules join etcd's series on).
    let cluster_labels = format!("namespace=\"{ns}\",cluster=\"{name}\"");
    let schedule_labels = format!("namespace=\"{ns}\",schedule=\"minutely\",cluster=\"{name}\"");
    let archive_labels = format!("namespace=\"{ns}\",schedule=\"archived\",cluster=\"{name}\"");
    let operator = tests::harness::eventually_every(
        "every metric of tests::monitoring::OPERATOR_METRICS in the operator's /metrics",
        SCHEDULED,
        Duration::from_secs(5),
        || async {
            let text = env
                .operator
                .get("/metrics")
                .await
                .map_err(|e| e.to_string())?;
            let have = sampled_names(&text);
            let missing: Vec<&str> = OPERATOR_METRICS
                .iter()
                .copied()
                .filter(|m| !have.contains(*m))
                .collect();
            if !missing.is_empty() {
                return Err(format!("no samples of {missing:?}"));
            }
            for per_cluster in [
                "etcd_operator_cluster_desired_members",
                "etcd_operator_cluster_ready_members",
                "etcd_operator_cluster_voters",
                "etcd_operator_cluster_condition",
                "etcd_operator_certificate_expiry_timestamp_seconds",
                "etcd_operator_snapshots_total",
            ] {
                if !samples(&text, per_cluster)
                    .iter()
                    .any(|l| l.contains(&cluster_labels))
                {
                    return Err(format!("no {per_cluster}{{{cluster_labels},…}}"));
                }
            }
            for per_schedule in [
                "etcd_operator_snapshot_schedule_last_schedule_timestamp_seconds",
                "etcd_operator_snapshot_schedule_last_success_timestamp_seconds",
            ] {
                if !samples(&text, per_schedule)
                    .iter()
                    .any(|l| l.contains(&schedule_labels))
                {
                    return Err(format!("no {per_schedule}{{{schedule_labels}}}"));
                }
            }
            if !samples(&text, "etcd_operator_snapshot_schedule_archive_lag_seconds")
                .iter()
                .any(|l| l.contains(&archive_labels))
            {
                return Err(format!(
                    "no etcd_operator_snapshot_schedule_archive_lag_seconds{{{archive_labels}}}"
                ));
            }
            Ok(text)
        },
    )
    .await;
    let line = |metric: &str, more: &str| -> String {
        samples(&operator, metric)
            .into_iter()
            .find(|l| l.contains(&cluster_labels) && l.contains(more))
            .unwrap_or_else(|| panic!("no {metric}{{{cluster_labels},{more}}} in:\n{operator}"))
            .to_string()
    };
    assert!(
        line("etcd_operator_cluster_desired_members", "").ends_with(" 3"),
        "{operator}"
    );
    assert!(
        line(
            "etcd_operator_cluster_condition",
            "type=\"Available\",reason=\"QuorumHealthy\""
        )
        .ends_with(" 1"),
        "{operator}"
    );
    // The expiry is the peer certificate's own.
    let expiry: i64 = line(
        "etcd_operator_certificate_expiry_timestamp_seconds",
        "secret=\"mon-peer\"",
    )
    .rsplit(' ')
    .next()
    .and_then(|v| v.parse().ok())
    .unwrap_or_default();
    assert_eq!(
        Some(expiry),
        certs::verify::not_after(material.peer.cert_pem.as_bytes())
    );
    let completed: f64 = line("etcd_operator_snapshots_total", "phase=\"Complete\"")
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default();
    assert!(
        completed >= 1.0,
        "a scheduled snapshot completed: {operator}"
    );
    assert!(
        samples(&operator, "etcd_operator_reconcile_errors_total")
            .iter()
            .any(|l| l.contains("controller=\"etcdsnapshot\"")
                && l.contains("reason=\"OwnershipConflict\"")),
        "the taken Job's conflict is counted: {operator}"
    );

    // Each member, on the metrics URL of its Pod IP: every listed etcd metric.
    let pods = env.pods(&ns, name).await;
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let ip = pod_ip(pod);
        let text = tests::harness::eventually(
            &format!("every etcd metric the monitoring uses on {ip}:2381"),
            Duration::from_secs(60),
            || async {
                let text = member_metrics(ip).await?;
                let have = sampled_names(&text);
                let missing: Vec<&str> = ETCD_METRICS
                    .iter()
                    .copied()
                    .filter(|m| !have.contains(*m))
                    .collect();
                if missing.is_empty() {
                    Ok(text)
                } else {
                    Err(format!("no samples of {missing:?}"))
                }
            },
        )
        .await;
        assert_eq!(
            samples(&text, "etcd_server_has_leader"),
            ["etcd_server_has_leader 1"],
            "{}",
            pod.name_any()
        );
    }

    // The chart's PodMonitor selects exactly these Pods among the namespace's, with the
    // labels the rules read, on the container port that served the metrics above.
    let helm = Helm::new(None).or_panic();
    let rendered = helm
        .template(
            "etcd-operator",
            "etcd-operator-system",
            &["--set", "metrics.etcd.podMonitor.enabled=true"],
        )
        .await
        .or_panic();
    let pm = yaml_serde::Deserializer::from_str(&rendered)
        .filter_map(|d| Value::deserialize(d).ok())
        .find(|d| d["kind"] == "PodMonitor")
        .expect("a PodMonitor rendered");
    let all = Api::<Pod>::namespaced(env.client(), &ns)
        .list(&ListParams::default())
        .await
        .or_panic()
        .items;
    let selected: BTreeSet<String> = all
        .iter()
        .filter(|p| selects(&pm["spec"]["selector"], &labels_of(p)))
        .map(ResourceExt::name_any)
        .collect();
    let members: BTreeSet<String> = pods.iter().map(ResourceExt::name_any).collect();
    assert_eq!(
        selected,
        members,
        "Pods in {ns}: {:?}",
        all.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
    );
    let job_label = pm["spec"]["jobLabel"].as_str().unwrap_or_default();
    let port = pm["spec"]["podMetricsEndpoints"][0]["port"]
        .as_str()
        .unwrap_or_default();
    for pod in &pods {
        let labels = labels_of(pod);
        assert_eq!(labels.get(job_label).map(String::as_str), Some("etcd"));
        assert_eq!(
            labels.get(api::labels::CLUSTER).map(String::as_str),
            Some(name)
        );
        let etcd = &pod.spec.as_ref().expect("a pod spec").containers[0];
        let p = etcd
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(port))
            .unwrap_or_else(|| panic!("{} has no port {port}", pod.name_any()));
        assert_eq!(p.container_port, 2381);
    }

    env.check_keys(&ns, name, &keys).await;
}
