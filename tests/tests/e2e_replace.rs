//! End to end: automatic replacement of members whose Node is gone. A 5-member cluster on
//! Node-local volumes (the pod runner's local class), one member per Node; a Node fails for good
//! (its containers killed, the Node deleted, kube-controller-manager's pod GC deletes its Pods),
//! so the member's new Pod cannot be scheduled anywhere (its volume's node affinity names the dead
//! Node). After `--replace-broken-members-after` (20 s here) the operator removes the member from
//! etcd and a new member takes its place; a second Node fails while the first replacement runs.
//! Quorum is never lost, a writer keeps writing, every key is kept.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::v1alpha2::{EtcdClusterSpec, StorageSpec};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube_runtime::watcher;
use tests::e2e::{condition, spec, start, Env};
use tests::podrunner::PodRunner;
use tests::rollout::{event_messages, Writer};
use tests::OrPanic;
use tokio::sync::OnceCell;

const BOOT: Duration = Duration::from_secs(300);
const REPLACE: Duration = Duration::from_secs(300);
/// The writer's longest pause allowed: a member lost costs at most a leader election.
const LONGEST_GAP: Duration = Duration::from_secs(20);

async fn env() -> &'static Env {
    static ENV: OnceCell<Env> = OnceCell::const_new();
    ENV.get_or_init(|| {
        start(
            PodRunner::builder().nodes(7),
            &["--replace-broken-members-after=20s"],
        )
    })
    .await
}

async fn wait_replaced(env: &Env, ns: &str, member: &str) -> String {
    let deadline = Instant::now() + REPLACE;
    loop {
        // The Event on the member (the cluster's, of one reason, fold into one series).
        let replaced = event_messages(env, ns, member, "MemberReplaced").await;
        if let Some(m) = replaced
            .iter()
            .find(|m| m.contains(&format!("member {member}'s")))
        {
            return m.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{member} not replaced within {REPLACE:?}; MemberReplaced Events: {replaced:?}; \
             operator log {}",
            env.operator.log().display()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_whose_node_is_gone_are_replaced_one_at_a_time_keeping_quorum() {
    let env = env().await;
    let ns = env.namespace("replace").await;
    let name = "rp";
    let one_per_node = serde_json::from_value(serde_json::json!({
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {api::labels::CLUSTER: name}},
        }]}
    }))
    .or_panic();
    env.create_cluster(
        &ns,
        name,
        EtcdClusterSpec {
            storage: StorageSpec {
                size: Quantity("1Gi".into()),
                storage_class_name: Some(env.runner.local_storage_class()),
                ..Default::default()
            },
            affinity: Some(one_per_node),
            ..spec(5)
        },
    )
    .await;
    env.wait_healthy(&ns, name, 5, BOOT).await;
    let keys = env.write_keys(&ns, name, 100).await;
    let before = env.member_ids(&ns, name).await;
    let nodes: BTreeMap<String, String> = env
        .pods(&ns, name)
        .await
        .iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            (p.name_any(), node.unwrap_or_default())
        })
        .collect();
    let distinct: BTreeSet<&String> = nodes.values().collect();
    assert_eq!(distinct.len(), 5, "one member per Node: {nodes:?}");
    let mut names = nodes.keys().cloned();
    let (first, second) = (
        names.next().expect("a first member"),
        names.next().expect("a second member"),
    );
    let survivors: Vec<String> = names.collect();

    // A writer on the members that stay, and a sampler of the cluster's availability.
    let endpoints: Vec<String> = survivors
        .iter()
        .map(|m| format!("http://{m}.{name}.{ns}.svc:2379"))
        .collect();
    let writer = Writer::start(endpoints, None, "e2e/w/");
    let stop = Arc::new(AtomicBool::new(false));
    // A watch, not polling: every Available state the operator writes is seen. A watch error
    // (the watcher lists again and the states between are lost) or its end is recorded, and
    // "never unavailable" is not claimed across one.
    let sampler = {
        let (stop, clusters) = (stop.clone(), env.clusters(&ns));
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = watcher(clusters, config).boxed();
        tokio::spawn(async move {
            let (mut seen, mut gaps) = (BTreeSet::new(), Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(Duration::from_millis(500), stream.next()).await {
                    Err(_) => {}
                    Ok(None) => {
                        gaps.push("the watch ended".to_string());
                        break;
                    }
                    Ok(Some(Err(e))) => gaps.push(format!("watch error: {e}")),
                    Ok(Some(Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)))) => {
                        if let Some((status, reason, _)) = condition(&c, "Available") {
                            seen.insert(format!("{status}/{reason}"));
                        }
                    }
                    Ok(Some(Ok(_))) => {}
                }
            }
            (seen, gaps)
        })
    };

    env.runner.fail_node(&nodes[&first]).await.or_panic();
    let note = wait_replaced(env, &ns, &first).await;
    assert!(
        note.contains("could not be scheduled") && note.contains("keep quorum"),
        "{note}"
    );
    // The second failure while the first replacement runs.
    env.runner.fail_node(&nodes[&second]).await.or_panic();
    wait_replaced(env, &ns, &second).await;

    // Both gone, five members again, all voters, new etcd IDs for the new ones.
    let deadline = Instant::now() + REPLACE;
    let after = loop {
        let now = env.member_ids(&ns, name).await;
        let settled = now.len() == 5
            && !now.contains_key(&first)
            && !now.contains_key(&second)
            && now.values().all(|id| !id.is_empty());
        if settled {
            break now;
        }
        assert!(Instant::now() < deadline, "members now: {now:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    env.wait_healthy(&ns, name, 5, REPLACE).await;
    stop.store(true, Ordering::Relaxed);
    let (availability, watch_gaps) = sampler.await.or_panic();
    let report = writer.finish().await;

    let in_etcd = env.etcd_members(&ns, name).await;
    assert_eq!(in_etcd.len(), 5, "{in_etcd:?}");
    assert!(in_etcd.iter().all(|(_, learner)| !learner), "{in_etcd:?}");
    let old_ids: BTreeSet<&String> = [&before[&first], &before[&second]].into_iter().collect();
    assert!(
        after.values().all(|id| !old_ids.contains(id)),
        "a removed member's etcd ID is back: {after:?} (removed {old_ids:?})"
    );
    for s in &survivors {
        assert_eq!(after.get(s), before.get(s), "survivor {s} changed");
    }
    println!(
        "replacement: Available seen {availability:?}; writer {} writes, {} failed, longest gap {:?}",
        report.written.len(),
        report.failed,
        report.longest_gap
    );
    assert!(
        watch_gaps.is_empty(),
        "the Available watch has gaps, so it cannot show the cluster stayed available: {watch_gaps:?}"
    );
    assert!(
        !availability.is_empty() && availability.iter().all(|a| a.starts_with("True/")),
        "the cluster was unavailable at some point: {availability:?}"
    );
    assert!(report.longest_gap < LONGEST_GAP, "{:?}", report.longest_gap);
    env.check_keys(&ns, name, &keys).await;
    env.check_keys(&ns, name, &report.written).await;
}
