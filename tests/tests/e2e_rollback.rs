//! `etcd-operator prepare-rollback` on a cluster our operator made: the command refuses while our
//! controller holds its Lease; once the controller is stopped, its dry run changes nothing, its
//! run gives every data PVC its EtcdMember as controlling owner (blockOwnerDeletion, as the
//! reference operator's `SetControllerReference` writes it) and takes our cleanup finalizer off
//! the EtcdCluster, and a second run changes nothing. Our operator, started again, takes the
//! cluster back as it stands (PVCs back under the member-UID mark, the finalizer back) with every
//! key kept.
//!
//! With `ETCD_OPERATOR_REFERENCE_BIN` naming a build of the reference operator (its `manager`
//! binary; not part of CI, its source is not in this repository), the prepared cluster is then
//! handed to it: scaled 3 → 5 → 3, the cluster ID and every key kept. Our operator adds the
//! missing members of a new cluster as learners at once (`--max-learners`); a member the
//! reference builds runs etcd's default of one learner and fails replaying such a raft log
//! (docs/migration.md), so that phase first writes enough for every member to take a raft
//! snapshot and compact its log past those entries.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use api::labels;
use api::v1alpha2::EtcdCluster;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use tests::adopt::OrPanicNone;
use tests::e2e::{spec, Env, OPERATOR_IMAGE};
use tests::harness::eventually;
use tests::operator::{run_subcommand, Operator};
use tests::podrunner::PodRunner;
use tests::OrPanic;

const NAME: &str = "rb";
const BOOT: Duration = Duration::from_secs(240);

/// `etcd-operator prepare-rollback NAME -n ns --operator-lease <lease> [extra]` as a cluster
/// admin runs it.
fn prepare(env: &Env, ns: &str, lease: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "prepare-rollback",
        NAME,
        "-n",
        ns,
        "--operator-lease",
        lease,
    ];
    args.extend_from_slice(extra);
    run_subcommand(env.cp.kubeconfig(), &args)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every object the command may write, by kind and name, with its resourceVersion.
async fn versions(env: &Env, ns: &str) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    let c = env.cluster(ns, NAME).await;
    v.insert(format!("EtcdCluster/{}", c.name_any()), rv(&c));
    for m in env.members(ns, NAME).await {
        v.insert(format!("EtcdMember/{}", m.name_any()), rv(&m));
    }
    for p in env.pvcs(ns, NAME).await {
        v.insert(format!("PVC/{}", p.name_any()), rv(&p));
    }
    for p in env.pods(ns, NAME).await {
        v.insert(format!("Pod/{}", p.name_any()), rv(&p));
    }
    v
}

fn rv(o: &impl kube::Resource) -> String {
    o.meta().resource_version.clone().unwrap_or_default()
}

/// `(kind, uid, controller, blockOwnerDeletion)` of a PVC's owner references.
fn owners(p: &PersistentVolumeClaim) -> Vec<(String, String, Option<bool>, Option<bool>)> {
    p.owner_references()
        .iter()
        .map(|o| {
            (
                o.kind.clone(),
                o.uid.clone(),
                o.controller,
                o.block_owner_deletion,
            )
        })
        .collect()
}

fn has_cleanup_finalizer(c: &EtcdCluster) -> bool {
    c.finalizers()
        .iter()
        .any(|f| f == labels::CLUSTER_CLEANUP_FINALIZER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prepare_rollback_restores_the_owner_references_the_reference_operator_needs() {
    let env = tests::e2e::stage(PodRunner::builder())
        .await
        .operator(None, &[])
        .await;
    let ns = env.cp.namespace("rollback").await.or_panic();
    let lease = format!(
        "{}/{}",
        env.operator.namespace(),
        env.operator
            .identity()
            .arg("--leader-election-lease")
            .or_panic_none()
    );
    env.create_cluster(&ns, NAME, spec(3)).await;
    let formed = env.wait_healthy(&ns, NAME, 3, BOOT).await;
    let cluster_id = formed
        .status
        .as_ref()
        .and_then(|s| s.cluster_id.clone())
        .or_panic_none();
    let keys = env.write_keys(&ns, NAME, 20).await;
    // As ours leaves it: data PVCs without owner, our finalizer on the cluster.
    assert!(has_cleanup_finalizer(&env.cluster(&ns, NAME).await));
    for p in env.pvcs(&ns, NAME).await {
        assert!(owners(&p).is_empty(), "{:?}", owners(&p));
    }

    // Refused while our controller holds its Lease, with the fix; nothing changed.
    let before = versions(&env, &ns).await;
    let out = prepare(&env, &ns, &lease, &[]);
    assert!(!out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains(&format!("Lease {lease}")) && text.contains("--replicas=0"),
        "{text}"
    );
    assert_eq!(versions(&env, &ns).await, before);

    env.operator.stop(Duration::from_secs(10)).await;

    // The dry run lists every change and makes none.
    let before = versions(&env, &ns).await;
    let out = prepare(&env, &ns, &lease, &["--dry-run"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for p in env.pvcs(&ns, NAME).await {
        assert!(
            text.contains(&format!("PersistentVolumeClaim {}", p.name_any())),
            "{text}"
        );
    }
    assert!(text.contains(labels::CLUSTER_CLEANUP_FINALIZER), "{text}");
    assert!(text.contains("Dry run: nothing was changed"), "{text}");
    assert_eq!(versions(&env, &ns).await, before);

    // The run: what the reference reads.
    let out = prepare(&env, &ns, &lease, &[]);
    assert!(out.status.success());
    let cluster = env.cluster(&ns, NAME).await;
    assert!(
        !has_cleanup_finalizer(&cluster),
        "{:?}",
        cluster.finalizers()
    );
    let members = env.members(&ns, NAME).await;
    assert_eq!(members.len(), 3);
    for m in &members {
        // The member finalizer is the reference's own, and so is the member's controller.
        assert_eq!(m.finalizers(), [labels::MEMBER_CLEANUP_FINALIZER]);
        assert!(
            m.owner_references().iter().any(|o| o.kind == "EtcdCluster"
                && Some(&o.uid) == cluster.metadata.uid.as_ref()
                && o.controller == Some(true)),
            "{:?}",
            m.owner_references()
        );
        let uid = m.metadata.uid.clone().or_panic_none();
        let pvc = env
            .pvcs(&ns, NAME)
            .await
            .into_iter()
            .find(|p| p.name_any() == labels::pvc_name(&m.name_any()))
            .or_panic_none();
        assert_eq!(
            owners(&pvc),
            [(
                "EtcdMember".to_string(),
                uid.clone(),
                Some(true),
                Some(true)
            )]
        );
        let pod = env
            .pods(&ns, NAME)
            .await
            .into_iter()
            .find(|p| p.name_any() == m.name_any())
            .or_panic_none();
        assert!(pod.owner_references().iter().any(|o| o.uid == uid));
    }

    // Idempotent: a second run changes nothing and says so.
    let before = versions(&env, &ns).await;
    let out = prepare(&env, &ns, &lease, &[]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("nothing to change"), "{text}");
    assert!(text.contains("Prepared: 0 object(s) changed"), "{text}");
    assert_eq!(versions(&env, &ns).await, before);

    if let Ok(reference) = std::env::var("ETCD_OPERATOR_REFERENCE_BIN") {
        under_the_reference(&env, &ns, &reference, &cluster_id, &keys).await;
        return;
    }

    // Back to ours: it takes the cluster as it stands, no member replaced.
    let names = env.member_names(&ns, NAME).await;
    let image = format!("--operator-image={OPERATOR_IMAGE}");
    let ours = Operator::start_with(env.cp, env.operator.namespace(), None, &[&image])
        .await
        .or_panic();
    eventually(
        "our operator takes the PVCs and the cluster back",
        BOOT,
        || {
            let env = &env;
            let ns = ns.clone();
            async move {
                let pvcs = env.pvcs(&ns, NAME).await;
                let c = env.cluster(&ns, NAME).await;
                let back = has_cleanup_finalizer(&c) && pvcs.iter().all(|p| owners(p).is_empty());
                back.then_some(()).ok_or_else(|| {
                    format!(
                        "finalizers {:?}, PVC owners {:?}",
                        c.finalizers(),
                        pvcs.iter().map(owners).collect::<Vec<_>>()
                    )
                })
            }
        },
    )
    .await;
    let c = env.wait_healthy(&ns, NAME, 3, BOOT).await;
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_id.as_deref()),
        Some(cluster_id.as_str())
    );
    let mut after = env.member_names(&ns, NAME).await;
    let mut names = names;
    after.sort();
    names.sort();
    assert_eq!(after, names);
    env.check_keys(&ns, NAME, &keys).await;
    ours.stop(Duration::from_secs(10)).await;
}

/// The prepared cluster under the reference operator: 3 → 5 → 3, the cluster ID and the keys
/// kept, the removed members' PVCs garbage-collected with their EtcdMembers.
async fn under_the_reference(
    env: &Env,
    ns: &str,
    binary: &str,
    cluster_id: &str,
    keys: &BTreeMap<String, String>,
) {
    let log = std::fs::File::create(env.cp.log_dir().join("reference-operator.log")).or_panic();
    let mut child = std::process::Command::new(binary)
        .env("KUBECONFIG", env.cp.kubeconfig())
        .args([
            "--leader-elect=false",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
        ])
        .stdout(log.try_clone().or_panic())
        .stderr(log)
        .spawn()
        .or_panic();
    // etcd 3.6's --snapshot-count default (10000) and the 5000 entries a leader keeps after a
    // snapshot for slow followers: past both, a joining member gets a snapshot, not the log.
    let mut etcd = env.etcd_client(ns, NAME).await;
    tests::e2e::churn(&mut etcd, "rollback-compaction/", 16_000, 8).await;
    let before: Vec<String> = env.member_names(ns, NAME).await;
    for replicas in [5, 3] {
        env.scale(ns, NAME, replicas).await;
        eventually(
            &format!("the reference operator runs {replicas} members"),
            Duration::from_secs(420),
            || async move {
                let c = env.cluster(ns, NAME).await;
                let s = c.status.clone().unwrap_or_default();
                let members = env.members(ns, NAME).await;
                let pvcs = env.pvcs(ns, NAME).await;
                let done = s.ready_members == replicas
                    && members.len() == replicas as usize
                    && pvcs.len() == replicas as usize;
                done.then_some(()).ok_or_else(|| {
                    format!(
                        "readyMembers {}, {} members, {} PVCs, conditions {:?}",
                        s.ready_members,
                        members.len(),
                        pvcs.len(),
                        s.conditions
                            .iter()
                            .map(|c| (&c.type_, &c.status, &c.reason, &c.message))
                            .collect::<Vec<_>>()
                    )
                })
            },
        )
        .await;
        let c = env.cluster(ns, NAME).await;
        assert_eq!(
            c.status.as_ref().and_then(|s| s.cluster_id.as_deref()),
            Some(cluster_id)
        );
        assert_eq!(
            env.etcd_members(ns, NAME).await.len(),
            replicas as usize,
            "etcd's member list"
        );
        env.check_keys(ns, NAME, keys).await;
        eprintln!(
            "reference operator: {replicas} members {:?}",
            env.member_names(ns, NAME).await
        );
    }
    let after = env.member_names(ns, NAME).await;
    eprintln!("members before {before:?}, after 3 → 5 → 3 {after:?}");
    let _ = child.kill();
    let _ = child.wait();
}
