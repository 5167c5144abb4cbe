//! `make bench` (controller part): measures, does not pass or fail.
//!
//! - time from apply to Ready for 3 and 5 members, and of a scale from 3 to 5, each with the
//!   per-member timeline (created, added to etcd, Pod Ready, voter) and the load average;
//! - the operator's share of each sequential scale-up step: from "previous member's Pod Ready"
//!   (as observed through the API) to "next EtcdMember created";
//! - API writes by the operator during an idle period (default 300 s; `BENCH_IDLE_SECS`);
//! - the operator's RSS with 300 paused EtcdClusters.
//!
//! `BENCH_PARTS=ready,scale,idle,paused` picks the parts (all by default).
//!
//! Runs the same environment as the e2e suites (real apiserver, pod runner, operator binary).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use tests::e2e::{condition, env, pod_ready, spec, Env};
use tests::OrPanic;

/// When each member reached each step of joining, from the start of the measured part (local
/// monotonic time, polled every 50 ms through the API).
#[derive(Default)]
struct Joined {
    /// The EtcdMember exists (pending).
    created: Option<Duration>,
    /// `spec.initialCluster` is set: added to etcd, its Pod may start.
    completed: Option<Duration>,
    /// The Pod is Ready.
    ready: Option<Duration>,
    /// `status.isVoter`: promoted (as the operator recorded it).
    voter: Option<Duration>,
}

/// Poll members and Pods, recording when each member reached each step ([`Joined`]), until the
/// cluster has `replicas` Ready members, `Available=True/QuorumHealthy`.
async fn observe_bootstrap(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: i32,
    start: Instant,
) -> (Duration, Vec<Duration>, BTreeMap<String, Joined>) {
    let mut seen: BTreeMap<String, Joined> = BTreeMap::new();
    let deadline = start + Duration::from_secs(300);
    loop {
        let now = start.elapsed();
        for m in env.members(ns, name).await {
            let j = seen.entry(m.name_any()).or_default();
            j.created.get_or_insert(now);
            if !m.spec.initial_cluster.is_empty() {
                j.completed.get_or_insert(now);
            }
            if m.status.as_ref().is_some_and(|s| s.is_voter) {
                j.voter.get_or_insert(now);
            }
        }
        for p in env.pods(ns, name).await {
            if pod_ready(&p) {
                seen.entry(p.name_any())
                    .or_default()
                    .ready
                    .get_or_insert(now);
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
    // Members in creation order; step k's operator share = member k appeared − member k-1 Ready
    // (only where member k appeared after member k-1 was Ready: a batch has no such wait).
    let mut order: Vec<(&String, Duration)> = seen
        .iter()
        .filter_map(|(n, j)| Some((n, j.created?)))
        .collect();
    order.sort_by_key(|(_, t)| *t);
    let mut steps = Vec::new();
    for pair in order.windows(2) {
        let (prev, _) = pair[0];
        let (_, next_appeared) = pair[1];
        if let Some(prev_ready) = seen.get(prev).and_then(|j| j.ready) {
            if next_appeared > prev_ready {
                steps.push(next_appeared - prev_ready);
            }
        }
    }
    (total, steps, seen)
}

/// The per-step timeline: one line per member, in creation order.
fn print_timeline(seen: &BTreeMap<String, Joined>) {
    let mut rows: Vec<(&String, &Joined)> = seen.iter().collect();
    rows.sort_by_key(|(_, j)| j.created);
    let at = |d: Option<Duration>| d.map(fmt).unwrap_or_else(|| "—".into());
    for (name, j) in rows {
        println!(
            "    {name}: created {}, added {}, Pod Ready {}, voter {}",
            at(j.created),
            at(j.completed),
            at(j.ready),
            at(j.voter)
        );
    }
}

/// The parts to run (`BENCH_PARTS`, comma-separated): `ready` (apply → Ready, 3 and 5
/// members), `scale` (3 → 5), `idle` (writes while idle), `paused` (RSS with paused clusters).
fn part(name: &str) -> bool {
    std::env::var("BENCH_PARTS")
        .map(|p| p.split(',').any(|x| x.trim() == name))
        .unwrap_or(true)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
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
    for replicas in [3, 5].into_iter().filter(|_| part("ready")) {
        let ns = env.namespace(&format!("bench{replicas}")).await;
        let start = Instant::now();
        env.create_cluster(&ns, "b", spec(replicas)).await;
        let (total, steps, seen) = observe_bootstrap(env, &ns, "b", replicas, start).await;
        let worst = steps.iter().max().copied().unwrap_or_default();
        let mean = steps.iter().sum::<Duration>() / u32::try_from(steps.len().max(1)).unwrap_or(1);
        println!(
            "apply → Ready, {replicas} members: {} (load {}); operator share per sequential step: mean {}, max {} ({} steps)",
            fmt(total),
            loadavg(),
            fmt(mean),
            fmt(worst),
            steps.len()
        );
        print_timeline(&seen);
        results.push((replicas, total, mean, worst));
    }

    // Scale a Ready 3-member cluster to 5: the new members join a cluster that is serving.
    if part("scale") {
        let ns = env.namespace("benchscale").await;
        env.create_cluster(&ns, "b", spec(3)).await;
        observe_bootstrap(env, &ns, "b", 3, Instant::now()).await;
        // Let etcd's 5-second connection rule be met, as on a cluster that has been serving.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let start = Instant::now();
        env.scale(&ns, "b", 5).await;
        let (total, steps, seen) = observe_bootstrap(env, &ns, "b", 5, start).await;
        let worst = steps.iter().max().copied().unwrap_or_default();
        println!(
            "scale 3 → 5 (Ready): {} (load {}); operator share per sequential step: max {}",
            fmt(total),
            loadavg(),
            fmt(worst)
        );
        print_timeline(&seen);
    }
    if !part("idle") && !part("paused") {
        return;
    }

    // Let the last member status and version probes land before the idle window opens.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let rss_before = env.operator.rss_bytes().unwrap_or_default();
    if part("idle") {
        idle_writes(env, idle, results.len()).await;
    }
    if part("paused") {
        paused_rss(env, clusters, rss_before).await;
    }
}

/// API writes by the operator during `idle` seconds with the clusters created so far.
async fn idle_writes(env: &Env, idle: u64, healthy: usize) {
    let before = operator_writes(env).await;
    println!("idle: watching operator API writes for {idle} s with {healthy} healthy clusters ...");
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let after = operator_writes(env).await;
    println!(
        "API writes by the operator during {idle} s idle: {}",
        after - before
    );
}

/// The operator's RSS after `clusters` paused EtcdClusters were added and reached Paused.
async fn paused_rss(env: &Env, clusters: usize, rss_before: u64) {
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
