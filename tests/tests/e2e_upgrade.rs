//! End to end: rolling changes of running members with a writer running throughout. A minor
//! version upgrade (etcd 3.5 → 3.6) of a 3-member PVC cluster restarts one member at a time,
//! followers first and the leader last after MoveLeader, keeping the cluster ID, the member IDs
//! and every key, until etcd's own cluster version is 3.6; then a resources change rolls the
//! members the same way. A five-member patch upgrade, and a new priority class, roll the same
//! way.

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;
use tests::e2e::{env, spec, Env};
use tests::harness::{eventually_every, seen};
use tests::rollout::{event_messages, restarts_in_order, uids, wait_rolled, Writer};
use tests::OrPanic;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOOT: Duration = Duration::from_secs(180);
const ROLL: Duration = Duration::from_secs(300);
/// The longest a writer may go without a successful write: follower restarts cost nothing, the
/// leader's hand-over one quick election (seconds at most on a loaded test machine).
const LONGEST_GAP: Duration = Duration::from_secs(15);

/// etcd's `/version` of one member: `(server version, cluster version)`.
async fn versions(host: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect((host, 2379))
        .await
        .or_panic();
    stream
        .write_all(format!("GET /version HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .or_panic();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.or_panic();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(body).or_panic();
    (
        v["etcdserver"].as_str().unwrap_or_default().to_string(),
        v["etcdcluster"].as_str().unwrap_or_default().to_string(),
    )
}

/// Waits until every member reports running `version` (from etcd, in its status).
async fn wait_members_run(env: &Env, ns: &str, cluster: &str, version: &str) {
    eventually_every(
        &format!("every member to report {version}"),
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let members = env.members(ns, cluster).await;
            let running: Vec<Option<String>> = members
                .iter()
                .map(|m| m.status.as_ref().and_then(|s| s.version.clone()))
                .collect();
            seen(running, |running| {
                !running.is_empty() && running.iter().all(|v| v.as_deref() == Some(version))
            })
        },
    )
    .await;
}

/// Checks the leader restarted last: leadership moved away from the member restarted last.
async fn leader_last(env: &Env, ns: &str, cluster: &str, restarted: &[String]) {
    let moved = event_messages(env, ns, cluster, "LeaderMoved").await;
    let last = restarted.last().expect("a member was restarted");
    assert!(
        moved.iter().any(|m| m.contains(&format!("from {last} "))),
        "leadership was not moved off {last}, restarted last: {moved:?} / {restarted:?}"
    );
}

/// Applies `edit` (a merge patch of the spec) to the running `replicas`-member cluster `name`
/// with a writer (keys under `prefix`) running, and checks the rollout that follows: never more
/// than one member down, each member restarted once, the leader last after MoveLeader, the
/// member IDs and `keys` kept, every acknowledged write stored, no long gap; `what` names it.
#[allow(clippy::too_many_arguments)]
async fn rolled_one_at_a_time_with_a_writer(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: usize,
    edit: serde_json::Value,
    prefix: &str,
    keys: &std::collections::BTreeMap<String, String>,
    what: &str,
) {
    let pods = env.ready_pods(ns, name).await;
    let endpoints: Vec<String> = pods
        .iter()
        .map(|p| format!("http://{}.{name}.{ns}.svc:2379", p.name_any()))
        .collect();
    let ids = env.member_ids(ns, name).await;
    let before = uids(&pods);
    let writer = Writer::start(endpoints, None, prefix);
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": edit})),
        )
        .await
        .or_panic();
    let (fewest_ready, _) = wait_rolled(env, ns, name, replicas, &before, ROLL).await;
    let report = writer.finish().await;
    assert!(
        fewest_ready + 1 >= replicas,
        "more than one member down at a time: only {fewest_ready} of {replicas} Ready at one point"
    );
    let restarted = restarts_in_order(env, ns, name).await;
    assert_eq!(
        restarted.len(),
        replicas,
        "one restart per member: {restarted:?}"
    );
    let unique: std::collections::BTreeSet<&String> = restarted.iter().collect();
    assert_eq!(
        unique.len(),
        replicas,
        "each member restarted once: {restarted:?}"
    );
    leader_last(env, ns, name, &restarted).await;
    assert_eq!(env.member_ids(ns, name).await, ids, "members changed IDs");
    env.check_keys(ns, name, keys).await;
    let mut etcd = tests::e2e::etcd_client(&env.client(), ns, name).await;
    assert!(!report.written.is_empty(), "the writer wrote nothing");
    report.assert_kept(
        &format!("the {what}'s writer"),
        &tests::e2e::read_keys(&mut etcd, prefix).await,
    );
    eprintln!(
        "writer during the {what}: {} writes, {} failed ({} unsent, {} cut off, {} timed out, \
         {} refused), longest gap {:?}",
        report.written.len(),
        report.failed,
        report.unsent,
        report.cut_off,
        report.timed_out,
        report.refused,
        report.longest_gap
    );
    assert!(
        report.longest_gap < LONGEST_GAP,
        "the writer was blocked for {:?} during the {what}",
        report.longest_gap
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minor_upgrade_and_a_resources_change_roll_one_member_at_a_time_keeping_every_key() {
    let env = env().await;
    let ns = env.namespace("upgrade").await;
    let name = "up";
    env.create_cluster(
        &ns,
        name,
        api::v1alpha2::EtcdClusterSpec {
            version: "3.5.35".into(),
            ..spec(3)
        },
    )
    .await;
    let c = env.wait_healthy(&ns, name, 3, BOOT).await;
    let cluster_id = c.status.as_ref().and_then(|s| s.cluster_id.clone());
    let etcd_id = env.etcd_cluster_id(&ns, name, 3).await;
    let keys = env.write_keys(&ns, name, 100).await;
    let pods = env.ready_pods(&ns, name).await;
    let hosts: Vec<String> = pods
        .iter()
        .map(|p| format!("{}.{name}.{ns}.svc", p.name_any()))
        .collect();
    let endpoints: Vec<String> = hosts.iter().map(|h| format!("http://{h}:2379")).collect();
    wait_members_run(env, &ns, name, "3.5.35").await;
    let ids = env.member_ids(&ns, name).await;
    let (_, cluster_version) = versions(&hosts[0]).await;
    assert!(cluster_version.starts_with("3.5"), "{cluster_version}");

    // 3.5 → 3.6, one member at a time, with a writer running.
    let writer = Writer::start(endpoints.clone(), None, "w1/");
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.clusters(&ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"version": "3.6.16"}})),
        )
        .await
        .or_panic();
    let before = uids(&pods);
    let (fewest_ready, _) = wait_rolled(env, &ns, name, 3, &before, ROLL).await;
    let upgrade = writer.finish().await;
    assert!(
        fewest_ready >= 2,
        "quorum lost: only {fewest_ready} of 3 members Ready at one point"
    );
    wait_members_run(env, &ns, name, "3.6.16").await;
    for p in env.pods(&ns, name).await {
        let image = p.spec.as_ref().map(|s| s.containers[0].image.clone());
        assert!(
            image.flatten().is_some_and(|i| i.ends_with("3.6.16")),
            "{} not on the new image",
            p.name_any()
        );
    }
    // etcd raises its cluster version by itself once every member runs 3.6 (the leader checks
    // every few seconds).
    let deadline = Instant::now() + Duration::from_secs(60);
    for host in &hosts {
        eventually_every(
            &format!("{host}'s cluster version 3.6"),
            deadline.saturating_duration_since(Instant::now()),
            Duration::from_secs(1),
            || async {
                let (server, cluster) = versions(host).await;
                assert_eq!(server, "3.6.16", "{host}");
                seen(cluster, |c| c.starts_with("3.6"))
            },
        )
        .await;
    }
    let c = env.cluster(&ns, name).await;
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_id.clone()),
        cluster_id,
        "a new cluster ID"
    );
    assert_eq!(
        env.etcd_cluster_id(&ns, name, 3).await,
        etcd_id,
        "the upgraded members answer for another etcd cluster"
    );
    assert_eq!(
        env.member_ids(&ns, name).await,
        ids,
        "members changed their etcd IDs"
    );
    let restarted = restarts_in_order(env, &ns, name).await;
    assert_eq!(restarted.len(), 3, "one restart per member: {restarted:?}");
    leader_last(env, &ns, name, &restarted).await;
    env.check_keys(&ns, name, &keys).await;

    // A resources change rolls them the same way; paused first, it restarts nothing until the
    // pause is lifted.
    let writer = Writer::start(endpoints.clone(), None, "w2/");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = uids(&env.pods(&ns, name).await);
    let paused = |on: bool| {
        json!({"metadata": {"annotations": {
            "etcd-operator.cozystack.io/rollout-paused": if on { json!("true") } else { json!(null) }
        }}})
    };
    env.clusters(&ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&paused(true)))
        .await
        .or_panic();
    env.clusters(&ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"resources": {"requests": {"memory": "64Mi"}}}})),
        )
        .await
        .or_panic();
    env.wait_for(&ns, name, "the paused rollout reported", BOOT, |c| {
        tests::e2e::condition(c, "Progressing")
            .is_some_and(|(st, _, msg)| st == "True" && msg.contains("paused by"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        uids(&env.pods(&ns, name).await),
        before,
        "a member restarted while the rollout was paused"
    );
    env.clusters(&ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&paused(false)))
        .await
        .or_panic();
    let (fewest_ready, _) = wait_rolled(env, &ns, name, 3, &before, ROLL).await;
    let resources = writer.finish().await;
    assert!(
        fewest_ready >= 2,
        "quorum lost: only {fewest_ready} of 3 members Ready at one point"
    );
    for p in env.pods(&ns, name).await {
        let memory = p
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].resources.clone())
            .and_then(|r| r.requests)
            .and_then(|r| r.get("memory").cloned());
        assert_eq!(
            memory.map(|q| q.0),
            Some("64Mi".to_string()),
            "{}",
            p.name_any()
        );
    }
    assert_eq!(env.member_ids(&ns, name).await, ids);
    env.check_keys(&ns, name, &keys).await;

    let mut etcd = tests::e2e::etcd_client(&env.client(), &ns, name).await;
    for (what, report) in [("upgrade", &upgrade), ("resources", &resources)] {
        eprintln!(
            "writer during the {what} rollout: {} writes, {} failed ({} unsent, {} cut off, {} \
             timed out, {} refused), longest gap between writes {:?}",
            report.written.len(),
            report.failed,
            report.unsent,
            report.cut_off,
            report.timed_out,
            report.refused,
            report.longest_gap
        );
        assert!(!report.written.is_empty(), "the writer wrote nothing");
        let prefix = if what == "upgrade" { "w1/" } else { "w2/" };
        // The put the writer was retrying when it stopped may have been applied: what is
        // stored lies between what was acknowledged and what was sent.
        report.assert_kept(
            &format!("the {what} rollout's writer"),
            &tests::e2e::read_keys(&mut etcd, prefix).await,
        );
        assert!(
            report.longest_gap < LONGEST_GAP,
            "the writer was blocked for {:?} during the {what} rollout",
            report.longest_gap
        );
    }
}

/// A patch upgrade and a resources change in one edit of a 5-member cluster: one rollout, each
/// member restarted once, never more than one down, the leader last; every key and member ID
/// kept. (The test environment's etcd 3.6 build answers to every 3.6 tag, so etcd itself reports
/// the same version before and after: what is checked is the rollout and the Pods' images.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_upgrade_with_new_resources_rolls_five_members_one_at_a_time() {
    let env = env().await;
    let ns = env.namespace("upgrade5").await;
    let name = "five";
    env.create_cluster(
        &ns,
        name,
        api::v1alpha2::EtcdClusterSpec {
            version: "3.6.15".into(),
            ..spec(5)
        },
    )
    .await;
    env.wait_healthy(&ns, name, 5, BOOT).await;
    let keys = env.write_keys(&ns, name, 100).await;
    rolled_one_at_a_time_with_a_writer(
        env,
        &ns,
        name,
        5,
        json!({"version": "3.6.16", "resources": {"requests": {"memory": "80Mi"}}}),
        "w5/",
        &keys,
        "5-member rollout",
    )
    .await;
    for p in env.pods(&ns, name).await {
        let etcd = &p.spec.as_ref().expect("a Pod spec").containers[0];
        assert_eq!(
            etcd.image.as_deref(),
            Some("quay.io/coreos/etcd:v3.6.16"),
            "{}",
            p.name_any()
        );
        let memory = etcd
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("memory"))
            .map(|q| q.0.clone());
        assert_eq!(memory.as_deref(), Some("80Mi"), "{}", p.name_any());
    }
    for m in env.members(&ns, name).await {
        assert_eq!(m.spec.version, "3.6.16", "{}", m.name_any());
    }
}

/// A new `priorityClassName` (docs/scheduling.md) on a running 3-member cluster with a writer
/// running: the members are rolled one at a time, the leader last after MoveLeader, each Pod
/// created with the class (the apiserver's Priority admission resolves it to the class's value),
/// the member IDs and every key kept, no acknowledged write lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_class_change_rolls_the_members_one_at_a_time_losing_no_write() {
    use k8s_openapi::api::scheduling::v1::PriorityClass;

    let env = env().await;
    let ns = env.namespace("priority").await;
    let name = "prio";
    // Cluster-scoped: named after the test's namespace, so a rerun never finds it taken.
    let class_name = format!("{ns}-etcd");
    let classes: kube::Api<PriorityClass> = kube::Api::all(env.client());
    classes
        .create(
            &Default::default(),
            &PriorityClass {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(class_name.clone()),
                    ..Default::default()
                },
                value: 1_000_000,
                description: Some("etcd members of the priority rollout test".into()),
                ..Default::default()
            },
        )
        .await
        .or_panic();
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 100).await;
    for p in env.pods(&ns, name).await {
        let spec = p.spec.as_ref().expect("a Pod spec");
        assert_eq!(spec.priority_class_name, None, "{}", p.name_any());
    }
    rolled_one_at_a_time_with_a_writer(
        env,
        &ns,
        name,
        3,
        json!({"priorityClassName": class_name}),
        "wp/",
        &keys,
        "priority rollout",
    )
    .await;
    for p in env.pods(&ns, name).await {
        let spec = p.spec.as_ref().expect("a Pod spec");
        assert_eq!(
            (spec.priority_class_name.as_deref(), spec.priority),
            (Some(class_name.as_str()), Some(1_000_000)),
            "{}",
            p.name_any()
        );
    }
    for m in env.members(&ns, name).await {
        assert_eq!(
            m.spec.priority_class_name.as_deref(),
            Some(class_name.as_str())
        );
    }
    classes
        .delete(&class_name, &Default::default())
        .await
        .or_panic();
}
