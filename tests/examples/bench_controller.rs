//! `make bench` (controller part): measures, does not pass or fail.
//!
//! - time from apply to Ready for 3 and 5 members;
//! - the operator's share of each scale-up step: from "previous member's Pod Ready" (as observed
//!   through the API) to "next EtcdMember created";
//! - API writes by the operator during an idle period (default 300 s; `BENCH_IDLE_SECS`);
//! - the operator's RSS with 300 paused EtcdClusters.
//!
//! Runs the same environment as the e2e suites (real apiserver, pod runner, operator binary).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use tests::e2e::{condition, env, pod_ready, spec, Env};
use tests::OrPanic;

/// Poll members and Pods, recording when each member first appeared and its Pod first became
/// Ready (local monotonic time), until the cluster has `replicas` Ready members.
async fn observe_bootstrap(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: i32,
    start: Instant,
) -> (Duration, Vec<Duration>) {
    let mut appeared: BTreeMap<String, Instant> = BTreeMap::new();
    let mut ready: BTreeMap<String, Instant> = BTreeMap::new();
    let deadline = start + Duration::from_secs(300);
    loop {
        let now = Instant::now();
        for m in env.members(ns, name).await {
            appeared.entry(m.name_any()).or_insert(now);
        }
        for p in env.pods(ns, name).await {
            if pod_ready(&p) {
                ready.entry(p.name_any()).or_insert(now);
            }
        }
        let c = env.cluster(ns, name).await;
        let healthy = c
            .status
            .as_ref()
            .is_some_and(|s| s.ready_members == replicas)
            && condition(&c, "Available")
                .is_some_and(|(s, r, _)| s == "True" && r == "QuorumHealthy");
        if healthy {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}/{name} did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let total = start.elapsed();
    // Members in creation order; step k's operator share = member k appeared − member k-1 Ready.
    let mut order: Vec<(&String, &Instant)> = appeared.iter().collect();
    order.sort_by_key(|(_, t)| **t);
    let mut steps = Vec::new();
    for pair in order.windows(2) {
        let (prev, _) = pair[0];
        let (_, next_appeared) = pair[1];
        if let Some(prev_ready) = ready.get(prev) {
            steps.push(next_appeared.saturating_duration_since(*prev_ready));
        }
    }
    (total, steps)
}

/// Sum of `apiserver_request_total` for write verbs on the resources only the operator writes.
async fn operator_writes(env: &Env) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).or_panic();
    let text = env.client().request_text(req).await.or_panic();
    let operator_resources = [
        "etcdclusters",
        "etcdmembers",
        "services",
        "poddisruptionbudgets",
        "events",
    ];
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            [
                "\"POST\"",
                "\"PUT\"",
                "\"PATCH\"",
                "\"DELETE\"",
                "\"APPLY\"",
            ]
            .iter()
            .any(|v| l.contains(&format!("verb={v}")))
        })
        .filter(|l| {
            operator_resources.iter().any(|r| l.contains(&format!("resource=\"{r}\"")))
                // Pod metadata writes are the operator's; Pod status writes are the pod runner's.
                || (l.contains("resource=\"pods\"") && l.contains("subresource=\"\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn fmt(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let env = env().await;
    let idle = std::env::var("BENCH_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300u64);
    let clusters = std::env::var("BENCH_PAUSED_CLUSTERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300usize);
    println!(
        "controller bench (operator binary: {})",
        tests::operator::bin_dir().display()
    );

    let mut results = Vec::new();
    for replicas in [3, 5] {
        let ns = env.namespace(&format!("bench{replicas}")).await;
        let start = Instant::now();
        env.create_cluster(&ns, "b", spec(replicas)).await;
        let (total, steps) = observe_bootstrap(env, &ns, "b", replicas, start).await;
        let worst = steps.iter().max().copied().unwrap_or_default();
        let mean = steps.iter().sum::<Duration>() / u32::try_from(steps.len().max(1)).unwrap_or(1);
        println!(
            "apply → Ready, {replicas} members: {}; operator share per scale-up step: mean {}, max {} ({} steps)",
            fmt(total),
            fmt(mean),
            fmt(worst),
            steps.len()
        );
        results.push((replicas, total, mean, worst));
    }

    // Scale the Ready 3-member cluster to 5: two learner steps on a cluster that is serving.
    {
        let ns = env.namespace("benchscale").await;
        env.create_cluster(&ns, "b", spec(3)).await;
        observe_bootstrap(env, &ns, "b", 3, Instant::now()).await;
        let start = Instant::now();
        env.scale(&ns, "b", 5).await;
        let (total, steps) = observe_bootstrap(env, &ns, "b", 5, start).await;
        let worst = steps.iter().max().copied().unwrap_or_default();
        println!(
            "scale 3 → 5 (Ready): {}; operator share per step: max {}",
            fmt(total),
            fmt(worst)
        );
    }

    // Let the last member status and version probes land before the idle window opens.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let rss_before = env.operator.rss_bytes().unwrap_or_default();
    let before = operator_writes(env).await;
    println!(
        "idle: watching operator API writes for {idle} s with {} healthy clusters ...",
        results.len()
    );
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let after = operator_writes(env).await;
    println!(
        "API writes by the operator during {idle} s idle: {}",
        after - before
    );

    let ns = env.namespace("benchpaused").await;
    let api: Api<api::v1alpha2::EtcdCluster> = Api::namespaced(env.client(), &ns);
    let started = Instant::now();
    for i in 0..clusters {
        let c = api::v1alpha2::EtcdCluster::new(&format!("p{i:03}"), spec(0));
        api.create(&PostParams::default(), &c).await.or_panic();
    }
    loop {
        let list = api.list(&Default::default()).await.or_panic().items;
        let paused = list
            .iter()
            .filter(|c| condition(c, "Available").is_some_and(|(_, r, _)| r == "Paused"))
            .count();
        if paused == clusters {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "only {paused}/{clusters} clusters reached Paused"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss = env.operator.rss_bytes().unwrap_or_default();
    println!(
        "operator RSS: {:.1} MiB with 2 running clusters, {:.1} MiB with {clusters} paused clusters more (all Paused after {})",
        rss_before as f64 / 1048576.0,
        rss as f64 / 1048576.0,
        fmt(started.elapsed())
    );
}
