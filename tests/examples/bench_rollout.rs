//! `make bench` (rollout part): measures, does not pass or fail.
//!
//! One 3-member PVC cluster on etcd 3.5.35 goes through three rollouts, with a writer putting a
//! key every 100 ms through each:
//!
//! - a version upgrade to 3.6.16;
//! - a template change (a memory request);
//! - an EtcdDefrag after ~24 MiB of values were written, deleted and compacted away.
//!
//! For a restart step: the step time (the old Pod seen terminating → its replacement Ready) and
//! the operator's share between steps (the previous replacement Ready → the next Pod seen
//! terminating, which includes the health checks and, before the leader's turn, MoveLeader).
//! For the defrag: the time per member (the previous member's dbSize drop → this member's, the
//! first from the EtcdDefrag's creation) and, for comparison, etcd's own `Defragment` call on a
//! member of the same size, timed directly; the difference is the operator's share. For each
//! rollout, the writer's longest time between two successful writes. Observations come from
//! polling every 50 ms through the API and etcd, so times are ±50 ms.
//!
//! Runs the same environment as the e2e suites (real apiserver, pod runner, operator binary).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::v1alpha2::{DefragPhase, DefragRule, EtcdDefrag, EtcdDefragSpec, LocalReference};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::e2e::{churn, env, pod_ready, spec, Env};
use tests::rollout::{uids, Writer};
use tests::OrPanic;

const POLL: Duration = Duration::from_millis(50);
const ROLL: Duration = Duration::from_secs(300);

/// When one member's old Pod was first seen terminating and its replacement first Ready.
struct Step {
    member: String,
    down: Instant,
    up: Instant,
}

/// Poll the Pods until every Pod of `before` was replaced and the replacement is Ready.
async fn observe_restarts(
    env: &Env,
    ns: &str,
    cluster: &str,
    before: &BTreeMap<String, String>,
) -> Vec<Step> {
    let started = Instant::now();
    let mut down: BTreeMap<String, Instant> = BTreeMap::new();
    let mut up: BTreeMap<String, Instant> = BTreeMap::new();
    while up.len() < before.len() {
        let now = Instant::now();
        let pods = env.pods(ns, cluster).await;
        for (name, old_uid) in before {
            let pod = pods.iter().find(|p| &p.name_any() == name);
            let old_running = pod.is_some_and(|p| {
                p.uid().as_ref() == Some(old_uid) && p.metadata.deletion_timestamp.is_none()
            });
            if !old_running {
                down.entry(name.clone()).or_insert(now);
            }
            if pod.is_some_and(|p| p.uid().as_ref() != Some(old_uid) && pod_ready(p)) {
                up.entry(name.clone()).or_insert(now);
            }
        }
        assert!(
            started.elapsed() < ROLL,
            "{ns}/{cluster}: not rolled within {ROLL:?} (down {:?}, up {:?})",
            down.keys(),
            up.keys()
        );
        tokio::time::sleep(POLL).await;
    }
    let mut steps: Vec<Step> = up
        .into_iter()
        .map(|(member, up)| Step {
            down: down.get(&member).copied().unwrap_or(up),
            member,
            up,
        })
        .collect();
    steps.sort_by_key(|s| s.down);
    steps
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn print_restarts(kind: &str, started: Instant, steps: &[Step], longest_gap: Duration) {
    for (i, s) in steps.iter().enumerate() {
        let share = match i {
            0 => format!("{} (edit → first restart)", secs(s.down - started)),
            _ => secs(s.down.saturating_duration_since(steps[i - 1].up)),
        };
        println!(
            "{kind:<18} {:>2}  {:<12} {:>9}  {:>28}",
            i + 1,
            s.member,
            secs(s.up - s.down),
            share
        );
    }
    println!("{kind:<18} writer's longest gap {}", secs(longest_gap));
}

/// A client of one member only.
async fn member_client(endpoint: &str) -> etcd_client::Client {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(30));
    etcd_client::Client::connect([endpoint], Some(options))
        .await
        .or_panic()
}

async fn db_size(client: &mut etcd_client::Client) -> i64 {
    client.status().await.or_panic().db_size()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let env = env().await;
    let ns = env.namespace("bench-rollout").await;
    let name = "roll";
    env.create_cluster(
        &ns,
        name,
        api::v1alpha2::EtcdClusterSpec {
            version: "3.5.35".into(),
            ..spec(3)
        },
    )
    .await;
    env.wait_healthy(&ns, name, 3, Duration::from_secs(180))
        .await;
    let endpoints: Vec<String> = env
        .ready_pods(&ns, name)
        .await
        .iter()
        .map(|p| format!("http://{}.{name}.{ns}.svc:2379", p.name_any()))
        .collect();
    println!(
        "rollout bench: 3-member PVC cluster, writer every 100 ms; times ±{} ms",
        POLL.as_millis()
    );
    println!(
        "{:<18} {:>2}  {:<12} {:>9}  {:>28}",
        "rollout", "#", "member", "step", "operator share"
    );

    let edits = [
        ("version 3.5→3.6", json!({"spec": {"version": "3.6.16"}})),
        (
            "template (memory)",
            json!({"spec": {"resources": {"requests": {"memory": "64Mi"}}}}),
        ),
    ];
    for (kind, patch) in edits {
        let before = uids(&env.pods(&ns, name).await);
        let writer = Writer::start(endpoints.clone(), None, &format!("w-{}/", before.len()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let started = Instant::now();
        env.clusters(&ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .or_panic();
        let steps = observe_restarts(env, &ns, name, &before).await;
        env.wait_healthy(&ns, name, 3, ROLL).await;
        let report = writer.finish().await;
        print_restarts(kind, started, &steps, report.longest_gap);
    }

    // Defrag: ~24 MiB freed, then one run over the three members.
    let mut etcd = env.etcd_client(&ns, name).await;
    churn(&mut etcd, "churn/", 384, 64 * 1024).await;
    let mut members = Vec::new();
    for endpoint in &endpoints {
        let mut client = member_client(endpoint).await;
        let size = db_size(&mut client).await;
        members.push((endpoint.clone(), client, size, None::<Instant>));
    }
    let writer = Writer::start(endpoints.clone(), None, "w-defrag/");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let run = EtcdDefrag::new(
        "bench",
        EtcdDefragSpec {
            cluster_ref: LocalReference { name: name.into() },
            rule: Some(DefragRule {
                all: Some(true),
                ..Default::default()
            }),
            ttl_seconds_after_finished: None,
        },
    );
    let defrags = Api::<EtcdDefrag>::namespaced(env.client(), &ns);
    defrags
        .create(&PostParams::default(), &run)
        .await
        .or_panic();
    while members.iter().any(|m| m.3.is_none()) {
        for (_, client, before, done) in members.iter_mut() {
            if done.is_none() && db_size(client).await < *before / 2 {
                *done = Some(Instant::now());
            }
        }
        assert!(started.elapsed() < ROLL, "the defrag did not finish");
        tokio::time::sleep(POLL).await;
    }
    loop {
        let d = defrags.get("bench").await.or_panic();
        let phase = d.status.and_then(|s| s.phase);
        if phase == Some(DefragPhase::Complete) {
            break;
        }
        assert!(started.elapsed() < ROLL, "the defrag ended {phase:?}");
        tokio::time::sleep(POLL).await;
    }
    let finished = started.elapsed();
    let report = writer.finish().await;
    members.sort_by_key(|m| m.3);
    // etcd's own Defragment on a member of the same size, for the operator's share.
    churn(&mut etcd, "again/", 384, 64 * 1024).await;
    let direct_on = members[0].0.trim_start_matches("http://").to_string();
    let direct = Instant::now();
    members[0].1.defragment().await.or_panic();
    let direct = direct.elapsed();
    let mut previous = started;
    for (i, (endpoint, _, before, done)) in members.iter().enumerate() {
        let done = done.unwrap_or(previous);
        let step = done.saturating_duration_since(previous);
        println!(
            "{:<18} {:>2}  {:<12} {:>9}  {:>28}",
            "defrag",
            i + 1,
            endpoint
                .trim_start_matches("http://")
                .split('.')
                .next()
                .unwrap_or_default(),
            secs(step),
            format!(
                "{} ({} MiB db)",
                secs(step.saturating_sub(direct)),
                before / (1 << 20)
            )
        );
        previous = done;
    }
    println!(
        "{:<18} etcd's own Defragment on {}: {}; run created → Complete {}; writer's longest gap {}",
        "defrag",
        direct_on,
        secs(direct),
        secs(finished),
        secs(report.longest_gap)
    );
}
