//! `make bench-node`: measures, does not pass or fail. On three real nodes (`tests::node`:
//! kubelet, containerd, runc, each node in a network namespace of its own), the time from `kubectl
//! apply` of a 3-member EtcdCluster to 3 Ready members (`status.readyMembers` and
//! `Available=True`), then of a scale 3 → 5, for this operator and, when its binary is given, for
//! the reference operator (the Go `etcd-operator.cozystack.io/v1alpha2` operator), one after the
//! other on the same nodes in one run, each in a namespace of its own with the same spec.
//!
//! The reference's binary is not part of this repository: build it from its public repository's
//! source (docs/performance.md, "Real nodes: ours and the reference") and point
//! `ETCD_OPERATOR_REFERENCE_BIN` at it. Without it the bench says so and measures ours only.
//! Both run on the host as the cluster admin (the same for both), ours with the chart's arguments.
//!
//! `BENCH_NODE_ROUNDS` (default 1) repeats each measurement.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use api::v1alpha2::EtcdCluster;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use tests::env::process::Process;
use tests::env::ControlPlane;
use tests::node::RealNodes;
use tests::OrPanic;

const REFERENCE_BIN: &str = "ETCD_OPERATOR_REFERENCE_BIN";
const VERSION: &str = "3.6.16";
const TIMEOUT: Duration = Duration::from_secs(300);

/// What runs the clusters of one measured lane; stopped when dropped.
enum Subject {
    Ours(tests::operator::Operator),
    Reference(Process),
}

impl Subject {
    async fn stop(self) {
        match self {
            Subject::Ours(operator) => operator.stop(Duration::from_secs(5)).await,
            Subject::Reference(process) => process.kill(),
        }
    }
}

async fn start_ours(cp: &ControlPlane, ns: &str) -> Subject {
    let lease = cp.namespace("bench-lease").await.or_panic();
    Subject::Ours(
        tests::operator::Operator::start(cp, &lease, Some(ns))
            .await
            .or_panic(),
    )
}

fn start_reference(cp: &ControlPlane, binary: &PathBuf, ns: &str) -> Subject {
    let probe = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .or_panic()
        .port();
    let mut command = Command::new(binary);
    command
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .arg(format!("--watch-namespace={ns}"))
        .arg("--metrics-bind-address=0")
        .arg(format!("--health-probe-bind-address=127.0.0.1:{probe}"))
        .arg("--cluster-domain=cluster.local")
        .arg(format!(
            "--operator-image={}",
            tests::install::chart_image().or_panic()
        ));
    let log = cp.log_dir().join(format!("reference-operator-{ns}.log"));
    Subject::Reference(Process::spawn("reference-operator", command, &log).or_panic())
}

/// Wait until `name` has `replicas` Ready members and `Available=True`; the time since `start`.
async fn ready(clusters: &Api<EtcdCluster>, name: &str, replicas: i32, start: Instant) -> Duration {
    loop {
        if let Ok(c) = clusters.get(name).await {
            let available = tests::e2e::condition(&c, "Available")
                .is_some_and(|(status, _, _)| status == "True");
            let ready = c.status.as_ref().map(|s| s.ready_members) == Some(replicas);
            if available && ready {
                return start.elapsed();
            }
        }
        if start.elapsed() > TIMEOUT {
            panic!("{name}: {replicas} members not Ready within {TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One round for one operator: apply → 3 Ready, then 3 → 5 Ready.
async fn round(cp: &ControlPlane, ns: &str, name: &str) -> (Duration, Duration) {
    let clusters: Api<EtcdCluster> = Api::namespaced(cp.client().or_panic(), ns);
    // The anti-affinity the webhook defaults: one member per node while there are enough.
    let spread = webhook::defaulting::member_anti_affinity(name, webhook::AntiAffinity::Preferred);
    let cluster: EtcdCluster = serde_json::from_value(json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
        "kind": "EtcdCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 3, "version": VERSION, "affinity": {"podAntiAffinity": spread}},
    }))
    .or_panic();
    let start = Instant::now();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .or_panic();
    let to_ready = ready(&clusters, name, 3, start).await;
    let start = Instant::now();
    clusters
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .or_panic();
    let to_five = ready(&clusters, name, 5, start).await;
    (to_ready, to_five)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::var("BENCH_NODE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let reference = std::env::var_os(REFERENCE_BIN)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    match &reference {
        Some(bin) if bin.is_file() => {
            println!(
                "reference operator: {} (built from its source)",
                bin.display()
            )
        }
        Some(bin) => panic!("{REFERENCE_BIN}={} is not a file", bin.display()),
        None => println!(
            "reference operator: skipped ({REFERENCE_BIN} is unset: its source is not part of \
             this repository; docs/performance.md says how to build it)"
        ),
    }
    let cp = tests::node::control_plane(ControlPlane::builder().with_crds())
        .start()
        .await
        .or_panic();
    let mut nodes = RealNodes::start(&cp, 3).await.or_panic();
    println!("three real nodes Ready: {}", nodes.names().join(", "));

    let mut lanes = vec![("ours", None)];
    if let Some(bin) = &reference {
        lanes.push(("reference", Some(bin.clone())));
    }
    let mut rows = Vec::new();
    for (lane, binary) in lanes {
        for n in 0..rounds {
            let ns = cp.namespace(&format!("bench-{lane}")).await.or_panic();
            let subject = match &binary {
                None => start_ours(&cp, &ns).await,
                Some(bin) => start_reference(&cp, bin, &ns),
            };
            let (to_ready, to_five) = round(&cp, &ns, &format!("b{n}")).await;
            println!(
                "{lane} round {}: apply → 3 Ready {:.1} s, scale 3 → 5 Ready {:.1} s (load {})",
                n + 1,
                to_ready.as_secs_f64(),
                to_five.as_secs_f64(),
                load_average()
            );
            rows.push((lane, to_ready, to_five));
            subject.stop().await;
            let _ = cp
                .kubectl(&["delete", "namespace", &ns, "--wait=false"])
                .await;
        }
    }
    println!("\n| operator | apply → 3 Ready (s) | scale 3 → 5 Ready (s) |\n|---|---|---|");
    for (lane, to_ready, to_five) in rows {
        println!(
            "| {lane} | {:.1} | {:.1} |",
            to_ready.as_secs_f64(),
            to_five.as_secs_f64()
        );
    }
    nodes.stop();
}
