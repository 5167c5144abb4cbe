//! `make bench` (many clusters): measures, does not pass or fail.
//!
//! Runs the e2e environment (real apiserver, pod runner, the operator binary) with
//! `BENCH_SCALE_RUNNING` running 3-member clusters (default 20) and `BENCH_SCALE_PAUSED` paused
//! ones (`replicas: 0`, default 1000), then reports:
//!
//! - the operator's `VmRSS` / `VmHWM` with the running clusters alone and with all of them;
//! - API writes by the operator while idle (`BENCH_IDLE_SECS`, default 60), and the reads the
//!   rest of the environment (pod runner, controller-manager) makes in the same window;
//! - edit → first write: from a spec edit (`progressDeadlineSeconds`) on one paused and one
//!   running cluster to the operator's status write acknowledging it (`observedGeneration`),
//!   polled every 10 ms;
//! - a full resync: the operator is restarted, and the API reads (GET and LIST, by resource, from
//!   `apiserver_request_total`, minus the environment's own read rate measured while idle) until
//!   it has reconciled every cluster once, per object.
//!
//! Creating thousands of objects on the test apiserver takes a while: creates run 32 at a time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::v1alpha2::EtcdCluster;
use futures::StreamExt;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use tests::e2e::{condition, healthy, spec, Env};
use tests::OrPanic;

const CONCURRENCY: usize = 32;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// `VmRSS`, `VmHWM` and `RssAnon` (the heap, without the mapped binary) of a process, in bytes.
fn memory(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_default()
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"), field("RssAnon:"))
}

fn print_memory(what: &str, pid: u32) {
    let (rss, hwm, anon) = memory(pid);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "RSS {what}: {} (peak {}, anonymous {}); load {}",
        mib(rss),
        mib(hwm),
        mib(anon),
        load.trim()
    );
}

/// The objects of the kinds a cluster reconcile reads, as the apiserver counts them
/// (`apiserver_resource_objects`, `apiserver_storage_objects` before Kubernetes 1.34).
async fn stored_objects(env: &Env) -> f64 {
    let kinds = [
        "etcdclusters",
        "etcdmembers",
        "pods",
        "persistentvolumeclaims",
        "services",
        "poddisruptionbudgets",
    ];
    let text = apiserver_metrics(env).await;
    let count = |metric: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(metric))
            .filter(|l| {
                label(l, "resource")
                    .and_then(|r| r.split('.').next())
                    .is_some_and(|r| kinds.contains(&r))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(0.0, |a, b| a + b)
    };
    match count("apiserver_resource_objects{") {
        n if n > 0.0 => n,
        _ => count("apiserver_storage_objects{"),
    }
}

async fn apiserver_metrics(env: &Env) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).or_panic();
    env.client().request_text(req).await.or_panic()
}

fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

/// `apiserver_request_total` summed by `(verb, resource)` for the verbs given.
async fn requests(env: &Env, verbs: &[&str]) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for l in apiserver_metrics(env)
        .await
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let (Some(verb), Some(resource)) = (label(l, "verb"), label(l, "resource")) else {
            continue;
        };
        if !verbs.contains(&verb) || label(l, "subresource").is_some_and(|s| !s.is_empty()) {
            continue;
        }
        if let Some(v) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *out.entry((verb.to_string(), resource.to_string()))
                .or_default() += v;
        }
    }
    out
}

fn delta(
    after: &BTreeMap<(String, String), f64>,
    before: &BTreeMap<(String, String), f64>,
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or_default()))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// Sum of `apiserver_request_total` for write verbs on the resources only the operator writes.
async fn operator_writes(env: &Env) -> f64 {
    let writes = requests(env, &["POST", "PUT", "PATCH", "DELETE", "APPLY"]).await;
    let status = {
        let text = apiserver_metrics(env).await;
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| {
                ["PUT", "PATCH", "APPLY"]
                    .iter()
                    .any(|v| label(l, "verb") == Some(v))
                    && ["etcdclusters", "etcdmembers"]
                        .iter()
                        .any(|r| label(l, "resource") == Some(r))
                    && label(l, "subresource") == Some("status")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let operator_resources = [
        "etcdclusters",
        "etcdmembers",
        "services",
        "poddisruptionbudgets",
        "events",
        // Pod metadata writes are the operator's; Pod status writes (a subresource, not counted
        // by `requests`) are the pod runner's.
        "pods",
    ];
    writes
        .iter()
        .filter(|((_, r), _)| operator_resources.contains(&r.as_str()))
        .map(|(_, v)| v)
        .sum::<f64>()
        + status
}

/// The operator's own counter of cluster reconciles.
async fn cluster_reconciles(env: &Env) -> f64 {
    let text = env.operator.get("/metrics").await.unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("etcd_operator_reconciles_total{controller=\"etcdcluster\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_default()
}

fn paused(c: &EtcdCluster) -> bool {
    condition(c, "Available").is_some_and(|(_, r, _)| r == "Paused")
}

/// Wait until every cluster in `ns` passes `done`; returns how long it took.
async fn wait_all(
    env: &Env,
    ns: &str,
    count: usize,
    what: &str,
    done: impl Fn(&EtcdCluster) -> bool,
) -> Duration {
    let start = Instant::now();
    let api: Api<EtcdCluster> = Api::namespaced(env.client(), ns);
    loop {
        let mut n = 0;
        let mut params = ListParams::default().limit(500);
        loop {
            let page = api.list(&params).await.or_panic();
            n += page.items.iter().filter(|c| done(c)).count();
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => params = params.continue_token(&c),
                _ => break,
            }
        }
        if n >= count {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "only {n}/{count} clusters in {ns} are {what}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn create_many(env: &Env, ns: &str, prefix: &str, count: usize, replicas: i32) -> Duration {
    let start = Instant::now();
    let api: Api<EtcdCluster> = Api::namespaced(env.client(), ns);
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let c = EtcdCluster::new(&format!("{prefix}{i:04}"), spec(replicas));
                api.create(&PostParams::default(), &c).await.or_panic();
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    start.elapsed()
}

/// Edit `spec.progressDeadlineSeconds` and time until the operator's status write acknowledges
/// the new generation.
async fn edit_to_write(env: &Env, ns: &str, name: &str) -> Duration {
    let api: Api<EtcdCluster> = Api::namespaced(env.client(), ns);
    let before = api.get(name).await.or_panic();
    let deadline = before.spec.progress_deadline_seconds + 1;
    let start = Instant::now();
    let edited = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"progressDeadlineSeconds": deadline}})),
        )
        .await
        .or_panic();
    let generation = edited.metadata.generation.unwrap_or_default();
    loop {
        let c = api.get(name).await.or_panic();
        if c.status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .is_some_and(|g| g >= generation)
        {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{ns}/{name}: generation {generation} not acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn print_reads(title: &str, reads: &BTreeMap<(String, String), f64>) {
    println!("{title}");
    for ((verb, resource), n) in reads {
        println!("  {verb:>5} {resource:<28} {n:>8.0}");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let running = env_number("BENCH_SCALE_RUNNING", 20);
    let paused_count = env_number("BENCH_SCALE_PAUSED", 1000);
    let idle = env_number("BENCH_IDLE_SECS", 60) as u64;
    let mut env = tests::e2e::start(tests::podrunner::PodRunner::builder(), &[]).await;
    println!(
        "many-clusters bench: {running} running 3-member clusters, {paused_count} paused (operator binary: {})",
        tests::operator::bin_dir().display()
    );

    let ns_run = env.namespace("scalerun").await;
    let took = create_many(&env, &ns_run, "r", running, 3).await;
    let ready = wait_all(&env, &ns_run, running, "Ready", |c| healthy(c, 3)).await;
    println!(
        "{running} running clusters created in {:.1} s, all Ready {:.1} s later",
        took.as_secs_f64(),
        ready.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    print_memory(
        &format!("with {running} running clusters"),
        env.operator.pid(),
    );

    let ns_paused = env.namespace("scalepaused").await;
    let took = create_many(&env, &ns_paused, "p", paused_count, 0).await;
    let all_paused = wait_all(&env, &ns_paused, paused_count, "Paused", paused).await;
    println!(
        "{paused_count} paused clusters created in {:.1} s, all Paused {:.1} s later",
        took.as_secs_f64(),
        all_paused.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    print_memory(
        &format!("with {running} running + {paused_count} paused"),
        env.operator.pid(),
    );

    // Idle: the operator's writes, and all reads (the running clusters' health checks, the
    // environment's own): the baseline the resync below is measured against.
    let writes_before = operator_writes(&env).await;
    let reads_before = requests(&env, &["GET", "LIST"]).await;
    let idle_start = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let background = delta(&requests(&env, &["GET", "LIST"]).await, &reads_before);
    let idle_secs = idle_start.elapsed().as_secs_f64();
    println!(
        "API writes by the operator during {idle} s idle: {}",
        operator_writes(&env).await - writes_before
    );
    print_reads(
        &format!("API reads in {idle_secs:.0} s idle (health checks of the running clusters every 30 s, the environment):"),
        &background,
    );

    if paused_count > 0 {
        let took = edit_to_write(&env, &ns_paused, "p0000").await;
        println!(
            "edit → first write, paused cluster: {:.3} s",
            took.as_secs_f64()
        );
    }
    if running > 0 {
        let took = edit_to_write(&env, &ns_run, "r0000").await;
        println!(
            "edit → first write, running cluster: {:.3} s",
            took.as_secs_f64()
        );
    }

    // Full resync: a fresh operator lists every kind and reconciles every cluster once.
    let total = (running + paused_count) as f64;
    let lease_ns = env.operator.namespace().to_string();
    env.operator.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reads_before = requests(&env, &["GET", "LIST"]).await;
    let resync_start = Instant::now();
    env.operator = tests::operator::Operator::start_with(
        env.cp,
        &lease_ns,
        None,
        &[&format!("--operator-image={}", tests::e2e::OPERATOR_IMAGE)],
    )
    .await
    .or_panic();
    loop {
        if cluster_reconciles(&env).await >= total {
            break;
        }
        assert!(
            resync_start.elapsed() < Duration::from_secs(900),
            "the restarted operator did not reconcile {total} clusters"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let resync = resync_start.elapsed();
    // Let the requeues the first pass asked for land (children created, status written).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let window = resync_start.elapsed().as_secs_f64();
    let reads = delta(&requests(&env, &["GET", "LIST"]).await, &reads_before);
    let scale = window / idle_secs;
    let operator_reads: BTreeMap<(String, String), f64> = reads
        .iter()
        .map(|(k, v)| {
            let bg = background.get(k).copied().unwrap_or_default() * scale;
            (k.clone(), (v - bg).max(0.0).round())
        })
        .filter(|(_, v)| *v > 0.0)
        .collect();
    print_reads(
        &format!(
            "full resync: every cluster reconciled {:.1} s after the restart; API reads in {window:.1} s, \
             less the environment's idle rate:",
            resync.as_secs_f64()
        ),
        &operator_reads,
    );
    let sum: f64 = operator_reads.values().sum();
    let objects = stored_objects(&env).await;
    println!(
        "full resync: {sum:.0} reads for {total:.0} clusters = {:.2} per cluster; \
         {objects:.0} objects of the kinds a reconcile reads (clusters, members, Pods, PVCs, \
         Services, PDBs) = {:.2} reads per object",
        sum / total.max(1.0),
        sum / objects.max(1.0)
    );
    print_memory("after the resync", env.operator.pid());
}
