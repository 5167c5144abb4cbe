//! End to end: automatic replacement of members whose data is gone or unreachable, and never of
//! members whose Pods only cannot be scheduled. Clusters on Node-local volumes (the pod runner's
//! local class), one member per Node; `--replace-broken-members-after` is 20 s here.
//! - A Node fails for good (its containers killed, the Node deleted, kube-controller-manager's
//!   pod GC deletes its Pods), so the member's new Pod cannot be scheduled anywhere (its volume's
//!   node affinity names the dead Node): the member is removed from etcd and a new member takes
//!   its place; a second Node fails while the first replacement runs. Quorum is never lost, a
//!   writer keeps writing, every key is kept.
//! - A Node dies but its Node object stays (NotReady, its Pods evicted and stuck Terminating):
//!   the member is replaced once the Node has been NotReady for the period.
//! - A template edit makes the Pods unschedulable (a cpu request beyond every Node): nothing is
//!   replaced, the rollout stalls with a condition naming the scheduler's message, every PVC
//!   and key is kept; reverted, the stuck member is restarted on the old template once the
//!   deadline locks the revert, and the cluster heals with the same members and volumes.
//!
//! The tests share one environment and run side by side: each one's cluster is pinned (required
//! node affinity) to Nodes of its own, so a Node one test fails never hosts another's member.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use api::v1alpha2::{EtcdClusterSpec, StorageSpec};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube_runtime::watcher;
use tests::e2e::{condition, spec, start, Env};
use tests::harness::{eventually_every, seen, throughout};
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
            PodRunner::builder().nodes(GONE_NODES.end),
            &["--replace-broken-members-after=20s"],
        )
    })
    .await
}

/// Each test's Nodes (indexes into the runner's Nodes): the first test's 5 members and its 2
/// replacements, the second's 3 and 1 replacement, the third's 3. Disjoint, so the tests can
/// fail Nodes side by side.
const TEMPLATE_NODES: std::ops::Range<usize> = 0..3;
const NOTREADY_NODES: std::ops::Range<usize> = 3..7;
const GONE_NODES: std::ops::Range<usize> = 7..14;

/// A cluster of `replicas` on the local class, one member per Node and only on the runner's
/// Nodes `nodes`, Ready, with keys written.
async fn local_cluster(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: i32,
    nodes: std::ops::Range<usize>,
) -> BTreeMap<String, String> {
    let own: Vec<String> = env.runner.node_names()[nodes].to_vec();
    let one_per_node = serde_json::from_value(serde_json::json!({
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {api::labels::CLUSTER: name}},
        }]},
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In", "values": own,
            }]}],
        }},
    }))
    .or_panic();
    env.create_cluster(
        ns,
        name,
        EtcdClusterSpec {
            storage: StorageSpec {
                size: Quantity("1Gi".into()),
                storage_class_name: Some(env.runner.local_storage_class()),
                ..Default::default()
            },
            affinity: Some(one_per_node),
            ..spec(replicas)
        },
    )
    .await;
    env.wait_healthy(ns, name, replicas, BOOT).await;
    env.write_keys(ns, name, 100).await
}

/// Member Pod name → the Node it runs on.
async fn pod_nodes(env: &Env, ns: &str, name: &str) -> BTreeMap<String, String> {
    env.pods(ns, name)
        .await
        .iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            (p.name_any(), node.unwrap_or_default())
        })
        .collect()
}

async fn wait_replaced(env: &Env, ns: &str, member: &str) -> String {
    eventually_every(
        &format!(
            "{member} replaced (MemberReplaced Event); operator log {}",
            env.operator.log().display()
        ),
        REPLACE,
        Duration::from_secs(1),
        || async {
            // The Event on the member (the cluster's, of one reason, fold into one series).
            let replaced = event_messages(env, ns, member, "MemberReplaced").await;
            replaced
                .iter()
                .find(|m| m.contains(&format!("member {member}'s")))
                .cloned()
                .ok_or_else(|| format!("MemberReplaced Events: {replaced:?}"))
        },
    )
    .await
}

/// The member → etcd ID map once there are `replicas` members, none of `gone`, each with an ID.
async fn settled_ids(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: usize,
    gone: &[&String],
) -> BTreeMap<String, String> {
    eventually_every(
        &format!("{replicas} members with IDs, none of {gone:?}"),
        REPLACE,
        Duration::from_secs(1),
        || async {
            seen(env.member_ids(ns, name).await, |now| {
                now.len() == replicas
                    && gone.iter().all(|g| !now.contains_key(*g))
                    && now.values().all(|id| !id.is_empty())
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_whose_node_is_gone_are_replaced_one_at_a_time_keeping_quorum() {
    let env = env().await;
    let ns = env.namespace("replace").await;
    let name = "rp";
    let keys = local_cluster(env, &ns, name, 5, GONE_NODES).await;
    let before = env.member_ids(&ns, name).await;
    let nodes = pod_nodes(env, &ns, name).await;
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
    // A watch, not polling: every Available state the operator writes is seen. A broken
    // connection is no gap: the watcher resumes from the last resourceVersion it saw, so no
    // state is skipped. A gap is a relist (the resume was refused with 410 Gone and the states
    // between are lost) or the end of the stream; "never unavailable" is not claimed across one.
    let sampler = {
        let (stop, clusters) = (stop.clone(), env.clusters(&ns));
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = watcher(clusters, config).boxed();
        tokio::spawn(async move {
            let (mut seen, mut gaps, mut listed) = (BTreeSet::new(), Vec::new(), false);
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(Duration::from_millis(500), stream.next()).await {
                    Err(_) => {}
                    Ok(None) => {
                        gaps.push("the watch ended".to_string());
                        break;
                    }
                    Ok(Some(Err(e))) => errors.push(e.to_string()),
                    Ok(Some(Ok(watcher::Event::Init))) if listed => {
                        gaps.push(format!("the watch listed again after {errors:?}"));
                    }
                    Ok(Some(Ok(watcher::Event::InitDone))) => listed = true,
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
        note.contains("could not be scheduled")
            && note.contains("no longer exists")
            && note.contains("keep quorum"),
        "{note}"
    );
    // The second failure while the first replacement runs.
    env.runner.fail_node(&nodes[&second]).await.or_panic();
    wait_replaced(env, &ns, &second).await;

    // Both gone, five members again, all voters, new etcd IDs for the new ones.
    let after = settled_ids(env, &ns, name, 5, &[&first, &second]).await;
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

/// Whether the Pod is `PodScheduled=False/Unschedulable`, with the scheduler's message.
fn unschedulable_message(p: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| c.message.clone().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_node_dies_but_stays_registered_is_replaced_after_the_period() {
    let env = env().await;
    let ns = env.namespace("replace-notready").await;
    let name = "nr";
    let keys = local_cluster(env, &ns, name, 3, NOTREADY_NODES).await;
    let before = env.member_ids(&ns, name).await;
    let nodes = pod_nodes(env, &ns, name).await;
    let victim = nodes.keys().next().expect("a member").clone();
    let node = nodes[&victim].clone();
    let survivors: Vec<String> = nodes.keys().filter(|m| **m != victim).cloned().collect();

    env.runner.fail_node_keeping_object(&node).await.or_panic();
    let node_api = kube::Api::<k8s_openapi::api::core::v1::Node>::all(env.client());
    // The situation the operator must handle: the Node is still there, NotReady, and the
    // member's Pod is stuck Terminating on it (no kubelet confirms the eviction).
    let pod = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(env.client(), &ns)
        .get(&victim)
        .await
        .or_panic();
    assert!(
        pod.metadata.deletion_timestamp.is_some(),
        "the evicted Pod {victim} is not Terminating"
    );

    let note = wait_replaced(env, &ns, &victim).await;
    assert!(
        note.contains(&node) && note.contains("NotReady") && note.contains("Terminating"),
        "{note}"
    );
    assert!(
        node_api.get_opt(&node).await.or_panic().is_some(),
        "Node {node} was deleted: this test is about a Node that stays registered"
    );

    let after = settled_ids(env, &ns, name, 3, &[&victim]).await;
    env.wait_healthy(&ns, name, 3, REPLACE).await;
    let in_etcd = env.etcd_members(&ns, name).await;
    assert_eq!(in_etcd.len(), 3, "{in_etcd:?}");
    assert!(in_etcd.iter().all(|(_, learner)| !learner), "{in_etcd:?}");
    assert!(
        after.values().all(|id| *id != before[&victim]),
        "the removed member's etcd ID is back: {after:?}"
    );
    for s in &survivors {
        assert_eq!(after.get(s), before.get(s), "survivor {s} changed");
    }
    env.check_keys(&ns, name, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_edit_no_node_can_host_stalls_the_rollout_and_replaces_nothing() {
    let env = env().await;
    let ns = env.namespace("replace-template").await;
    let name = "tp";
    let keys = local_cluster(env, &ns, name, 3, TEMPLATE_NODES).await;
    let before = env.member_ids(&ns, name).await;
    let claims = |pvcs: Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim>| {
        pvcs.iter()
            .map(|c| (c.name_any(), c.uid().unwrap_or_default()))
            .collect::<BTreeMap<_, _>>()
    };
    let pvcs_before = claims(env.pvcs(&ns, name).await);
    assert_eq!(pvcs_before.len(), 3, "{pvcs_before:?}");

    // More cpu than any Node has (the runner's Nodes have 16): the rolled member's new Pod
    // cannot be scheduled anywhere, and neither could any new member built from this template.
    // A short progress deadline: the revert below is locked when it expires.
    let patch = serde_json::json!({"spec": {
        "resources": {"requests": {"cpu": "100"}},
        "progressDeadlineSeconds": 120,
    }});
    env.clusters(&ns)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .or_panic();

    // The rollout's first restart: a member's Pod that cannot be scheduled, and a condition
    // naming the scheduler's message.
    let (stuck, message) = eventually_every(
        "a condition naming an unschedulable member's scheduler message",
        BOOT,
        Duration::from_secs(1),
        || async {
            assert_eq!(
                env.member_ids(&ns, name).await,
                before,
                "a member was replaced or removed"
            );
            let pods = env.pods(&ns, name).await;
            let stuck = pods
                .iter()
                .find_map(|p| unschedulable_message(p).map(|m| (p.name_any(), m)));
            if let Some((pod, message)) = stuck.filter(|(_, m)| !m.is_empty()) {
                let c = env.cluster(&ns, name).await;
                let named = ["Progressing", "Degraded"].iter().any(|t| {
                    condition(&c, t)
                        .is_some_and(|(_, _, m)| m.contains(&message) && m.contains(&pod))
                });
                if named {
                    return Ok((pod, message));
                }
            }
            Err(format!(
                "Pods: {:?}; status: {}",
                pods.iter()
                    .map(|p| (p.name_any(), unschedulable_message(p)))
                    .collect::<Vec<_>>(),
                serde_json::to_string_pretty(&env.cluster(&ns, name).await.status)
                    .unwrap_or_default()
            ))
        },
    )
    .await;
    println!("stalled: {stuck}'s Pod: {message}");

    // Three times the replacement period and more than one periodic recheck: no member is
    // deleted, no PVC changes.
    throughout(Duration::from_secs(70), Duration::from_secs(1), || async {
        let members = env.member_ids(&ns, name).await;
        assert_eq!(members, before, "a member was replaced or removed");
        let pvcs = env.pvcs(&ns, name).await;
        assert!(
            pvcs.iter().all(|c| c.metadata.deletion_timestamp.is_none()),
            "a PVC is being deleted: {:?}",
            pvcs.iter().map(|c| c.name_any()).collect::<Vec<_>>()
        );
        assert_eq!(claims(pvcs), pvcs_before, "a PVC changed");
    })
    .await;
    let replaced = event_messages(env, &ns, &stuck, "MemberReplaced").await;
    assert!(replaced.is_empty(), "{replaced:?}");
    let in_etcd = env.etcd_members(&ns, name).await;
    assert_eq!(in_etcd.len(), 3, "{in_etcd:?}");
    let c = env.cluster(&ns, name).await;
    assert!(
        ["Progressing", "Degraded"]
            .iter()
            .any(|t| condition(&c, t).is_some_and(|(_, _, m)| m.contains(&stuck))),
        "the stall is no longer reported: {}",
        serde_json::to_string_pretty(&c.status).unwrap_or_default()
    );
    env.check_keys(&ns, name, &keys).await;

    // The user reverts the edit. Once the deadline locks it, the stuck member (whose Pod does not
    // run) is restarted on the old template without waiting to be a Ready voter, and the cluster
    // heals: same members, same volumes, every key.
    let revert = serde_json::json!({"spec": {"resources": null}});
    env.clusters(&ns)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&revert),
        )
        .await
        .or_panic();
    env.wait_healthy(&ns, name, 3, BOOT).await;
    eventually_every(
        "the reverted cluster to heal",
        BOOT,
        Duration::from_secs(1),
        || async {
            let pods = env.ready_pods(&ns, name).await;
            let scheduled =
                pods.len() == 3 && pods.iter().all(|p| unschedulable_message(p).is_none());
            let c = env.cluster(&ns, name).await;
            let settled = condition(&c, "Progressing")
                .is_some_and(|(status, reason, _)| status == "False" && reason == "Reconciled")
                && c.status
                    .as_ref()
                    .and_then(|s| s.observed.as_ref())
                    .is_some_and(|o| o.resources.is_none());
            if scheduled && settled {
                return Ok(());
            }
            Err(format!(
                "ready Pods {:?}; status: {}",
                pods.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
                serde_json::to_string_pretty(&c.status).unwrap_or_default()
            ))
        },
    )
    .await;
    assert_eq!(
        env.member_ids(&ns, name).await,
        before,
        "a member was replaced"
    );
    assert_eq!(
        claims(env.pvcs(&ns, name).await),
        pvcs_before,
        "a PVC changed"
    );
    env.check_keys(&ns, name, &keys).await;
}
