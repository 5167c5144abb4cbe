//! End to end: the operator binary against a real apiserver, with member Pods run as real etcd
//! processes by the pod runner. Every scenario that promises to keep data writes keys first and
//! checks every key after.

use std::time::Duration;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdClusterSpec, MemberRole};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::{Api, ResourceExt};
use tests::e2e::{condition, env, pod_ready, read_member_keys, spec, Env};
use tests::harness::{eventually, eventually_every, seen, throughout};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
/// How often the slower waits here ask.
const HALF: Duration = Duration::from_millis(500);

/// `kubectl <args>`, which must succeed.
async fn kubectl(env: &Env, args: &[&str]) -> String {
    env.cp.kubectl_ok(args).await.or_panic()
}

/// A fresh namespace (`prefix`) with cluster `name` of `spec` created and healthy;
/// returns the namespace and the cluster's ID as its status latched it.
async fn healthy_cluster(
    env: &Env,
    prefix: &str,
    name: &str,
    spec: EtcdClusterSpec,
) -> (String, Option<String>) {
    let ns = env.namespace(prefix).await;
    let replicas = spec.replicas;
    env.create_cluster(&ns, name, spec).await;
    let c = env.wait_healthy(&ns, name, replicas, BOOT).await;
    (ns, c.status.expect("status").cluster_id)
}

/// The PodDisruptionBudget's `minAvailable`.
async fn min_available(env: &Env, ns: &str, name: &str) -> String {
    let jsonpath = "jsonpath={.spec.minAvailable}";
    let out = kubectl(env, &["get", "pdb", name, "-n", ns, "-o", jsonpath]).await;
    out.trim().to_string()
}

/// Waits until the cluster is back to `replicas` healthy members and asserts that it is still the
/// same cluster (`when` names the step): its status' cluster ID and etcd's.
async fn assert_same_cluster(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: i32,
    (cluster_id, etcd_id): (&Option<String>, u64),
    when: &str,
) {
    let c = env.wait_healthy(ns, name, replicas, BOOT).await;
    assert_eq!(
        &c.status.expect("status").cluster_id,
        cluster_id,
        "{when}: the cluster ID changed"
    );
    assert_eq!(
        env.etcd_cluster_id(ns, name, usize::try_from(replicas).expect("replicas"))
            .await,
        etcd_id,
        "{when}: etcd's cluster ID changed (another etcd cluster formed)"
    );
}

/// Waits until the cluster is `Available=False` for `reason`; returns the condition's message.
async fn wait_unavailable(env: &Env, ns: &str, name: &str, reason: &str) -> String {
    let what = format!("Available=False/{reason}");
    let c = env
        .wait_for(ns, name, &what, BOOT, |c| {
            condition(c, "Available").is_some_and(|(s, r, _)| s == "False" && r == reason)
        })
        .await;
    condition(&c, "Available")
        .expect("the Available condition")
        .2
}

/// `status.members[]` and `status.leader` as etcd answers for a healthy cluster of `replicas`:
/// every member listed, Ready, at the spec's version, with a database and a raft position; one
/// Leader, named by `status.leader`, the others Followers. Returns the leader's name.
fn roster_leader(c: &EtcdCluster, replicas: usize) -> Result<String, String> {
    let st = c.status.clone().unwrap_or_default();
    let show = || serde_json::to_string(&st.members).unwrap_or_default();
    if st.members.len() != replicas {
        return Err(format!("{} members listed: {}", st.members.len(), show()));
    }
    for m in &st.members {
        let id_ok = m
            .member_id
            .as_ref()
            .is_some_and(|id| id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()));
        if !(m.ready
            && id_ok
            && m.version.as_deref() == Some(c.spec.version.as_str())
            && m.db_size.is_some_and(|s| s > 0)
            && m.db_size_in_use.is_some_and(|s| s > 0)
            && m.raft_index.is_some_and(|i| i > 0)
            && m.raft_term.is_some_and(|t| t > 0)
            && m.alarms.is_empty())
        {
            return Err(format!("{} is not a healthy answer: {}", m.name, show()));
        }
    }
    let leaders: Vec<&str> = st
        .members
        .iter()
        .filter(|m| m.role == Some(MemberRole::Leader))
        .map(|m| m.name.as_str())
        .collect();
    let followers = st
        .members
        .iter()
        .filter(|m| m.role == Some(MemberRole::Follower))
        .count();
    match (&leaders[..], st.leader.as_deref()) {
        ([one], Some(named)) if *one == named && followers == replicas - 1 => Ok(one.to_string()),
        _ => Err(format!("leader {:?}, members {}", st.leader, show())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_member_cluster_bootstraps_with_services_and_pdb() {
    let env = env().await;
    let ns = env.namespace("one").await;
    env.create_cluster(&ns, "solo", spec(1)).await;
    let c = env.wait_healthy(&ns, "solo", 1, BOOT).await;
    let status = c.status.unwrap();
    let id = status.cluster_id.expect("clusterID latched");
    assert_eq!(id.len(), 16, "clusterID is 16 hex digits: {id}");
    assert_eq!(
        status.selector.as_deref(),
        Some("etcd-operator.cozystack.io/cluster=solo")
    );
    assert!(status
        .cluster_token
        .unwrap()
        .starts_with(&format!("{ns}-solo-")));

    let members = env.members(&ns, "solo").await;
    assert_eq!(members.len(), 1);
    let m = &members[0];
    assert!(m.spec.bootstrap, "the only member is the seed");
    assert!(m
        .finalizers()
        .iter()
        .any(|f| f == labels::MEMBER_CLEANUP_FINALIZER));
    let ms = m.status.clone().unwrap();
    assert_eq!(ms.member_id.as_deref().map(str::len), Some(16));
    assert!(ms.is_voter);
    assert_eq!(ms.pvc_name, Some(format!("data-{}", m.name_any())));

    let pods = env.pods(&ns, "solo").await;
    assert_eq!(pods.len(), 1);
    assert_eq!(
        pods[0].labels().get(labels::ROLE).map(String::as_str),
        Some("voter")
    );
    assert_eq!(
        pods[0]
            .annotations()
            .get("etcd-operator.cozystack.io/initial-cluster-state")
            .map(String::as_str),
        Some("existing"),
        "once formed, no Pod may bootstrap a new cluster"
    );
    assert_eq!(env.pvcs(&ns, "solo").await.len(), 1);
    let out = kubectl(env, &["get", "svc,pdb", "-n", &ns, "-o", "name"]).await;
    for want in [
        "service/solo",
        "service/solo-client",
        "poddisruptionbudget.policy/solo",
    ] {
        assert!(out.lines().any(|l| l == want), "missing {want} in {out}");
    }
    let members = env.etcd_members(&ns, "solo").await;
    assert_eq!(members, vec![(m.name_any(), false)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_scale_to_five_and_back_keeping_every_key() {
    let env = env().await;
    let (ns, cluster_id) = healthy_cluster(env, "scale", "kv", spec(3)).await;
    let etcd_id = env.etcd_cluster_id(&ns, "kv", 3).await;
    let etcd = env.etcd_members(&ns, "kv").await;
    assert_eq!(etcd.len(), 3);
    assert!(
        etcd.iter().all(|(_, learner)| !learner),
        "every member is a voter: {etcd:?}"
    );
    assert_eq!(min_available(env, &ns, "kv").await, "2");

    let keys = env.write_keys(&ns, "kv", 100).await;
    let before: Vec<String> = env.member_names(&ns, "kv").await;

    env.scale(&ns, "kv", 5).await;
    env.wait_healthy(&ns, "kv", 5, BOOT).await;
    assert_eq!(
        env.etcd_cluster_id(&ns, "kv", 5).await,
        etcd_id,
        "the new members joined another etcd cluster"
    );
    let etcd = env.etcd_members(&ns, "kv").await;
    assert_eq!(etcd.len(), 5, "{etcd:?}");
    assert!(etcd.iter().all(|(_, learner)| !learner), "{etcd:?}");
    env.check_keys(&ns, "kv", &keys).await;
    assert_eq!(min_available(env, &ns, "kv").await, "3");

    env.scale(&ns, "kv", 3).await;
    let ids = (&cluster_id, etcd_id);
    assert_same_cluster(env, &ns, "kv", 3, ids, "after the scale-down").await;
    let after: Vec<String> = env.member_names(&ns, "kv").await;
    let mut kept = after.clone();
    kept.sort();
    let mut original = before.clone();
    original.sort();
    assert_eq!(
        kept, original,
        "scale-down removed the newest members first"
    );
    assert_eq!(env.etcd_members(&ns, "kv").await.len(), 3);
    env.check_keys(&ns, "kv", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_member_cluster_bootstraps_with_every_member_a_voter() {
    let env = env().await;
    let ns = env.namespace("five").await;
    env.create_cluster(&ns, "five", spec(5)).await;
    let c = env.wait_healthy(&ns, "five", 5, BOOT).await;
    assert_eq!(c.status.unwrap().ready_members, 5);
    let members = env.members(&ns, "five").await;
    assert_eq!(members.len(), 5);
    assert_eq!(
        members.iter().filter(|m| m.spec.bootstrap).count(),
        1,
        "exactly one seed"
    );
    let mut want: Vec<String> = members.iter().map(|m| m.name_any()).collect();
    want.sort();
    let mut etcd = env.etcd_members(&ns, "five").await;
    etcd.sort();
    assert_eq!(
        etcd,
        want.iter().map(|n| (n.clone(), false)).collect::<Vec<_>>(),
        "etcd lists every EtcdMember, each a voter"
    );
    let voters = env
        .pods(&ns, "five")
        .await
        .iter()
        .filter(|p| p.labels().get(labels::ROLE).map(String::as_str) == Some("voter"))
        .count();
    assert_eq!(voters, 5, "every Pod carries the voter label");
    let keys = env.write_keys(&ns, "five", 20).await;
    env.check_keys(&ns, "five", &keys).await;
}

/// A member deleted while no other voter is ready cannot be removed from etcd yet; its
/// finalizer must hold it (Terminating) rather than leave a ghost that counts towards quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_deleted_without_a_ready_voter_waits_to_leave_etcd_before_it_goes() {
    let env = env().await;
    let (ns, _) = healthy_cluster(env, "ghost", "gh", spec(3)).await;
    let keys = env.write_keys(&ns, "gh", 30).await;
    let names: Vec<String> = env.member_names(&ns, "gh").await;
    let (victim, hung) = (names[0].clone(), &names[1..]);
    for h in hung {
        env.runner.stop_container(&ns, h, "etcd").unwrap();
    }
    // Without quorum etcd's /health fails on the survivor too, so at most one stays Ready.
    env.wait_for(&ns, "gh", "quorum lost", BOOT, |c| {
        c.status.as_ref().is_some_and(|s| s.ready_members <= 1)
    })
    .await;
    // A deletion meant to remove the member (the break-glass annotation; without it the
    // member would keep its place in etcd and be re-created on its data).
    let annotation = format!("{}=true", labels::ALLOW_DELETION_ANNOTATION);
    kubectl(
        env,
        &["annotate", "etcdmember", &victim, "-n", &ns, &annotation],
    )
    .await;
    kubectl(
        env,
        &["delete", "etcdmember", &victim, "-n", &ns, "--wait=false"],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let held = env
        .members(&ns, "gh")
        .await
        .into_iter()
        .find(|m| m.name_any() == victim)
        .expect("the member is held by its finalizer while no voter can remove it from etcd");
    assert!(held.metadata.deletion_timestamp.is_some());

    for h in hung {
        env.runner.resume_container(&ns, h, "etcd").unwrap();
    }
    eventually_every(
        &format!("{victim} finalized after the voters came back"),
        BOOT,
        HALF,
        || async { seen(env.member_names(&ns, "gh").await, |n| !n.contains(&victim)) },
    )
    .await;
    env.wait_healthy(&ns, "gh", 3, BOOT).await;
    let etcd = env.etcd_members(&ns, "gh").await;
    assert_eq!(etcd.len(), 3, "a replacement joined, no ghost: {etcd:?}");
    assert!(
        !etcd.iter().any(|(n, _)| n == &victim),
        "{victim} left etcd: {etcd:?}"
    );
    env.check_keys(&ns, "gh", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_keeps_one_dormant_pvc_and_resume_keeps_cluster_id_and_keys() {
    let env = env().await;
    let (ns, cluster_id) = healthy_cluster(env, "pause", "pz", spec(3)).await;
    let etcd_id = env.etcd_cluster_id(&ns, "pz", 3).await;
    let keys = env.write_keys(&ns, "pz", 50).await;

    env.scale(&ns, "pz", 0).await;
    let message = wait_unavailable(env, &ns, "pz", "Paused").await;
    let members = env.members(&ns, "pz").await;
    assert_eq!(members.len(), 1, "one member remains");
    assert!(members[0].spec.dormant);
    let pvc = format!("data-{}", members[0].name_any());
    assert!(
        message.contains(&pvc),
        "the Paused message names the PVC: {message}"
    );
    assert!(env.pods(&ns, "pz").await.is_empty(), "no Pods while paused");
    let pvcs = env.pvcs(&ns, "pz").await;
    assert_eq!(
        pvcs.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
        vec![pvc]
    );

    env.scale(&ns, "pz", 3).await;
    let ids = (&cluster_id, etcd_id);
    assert_same_cluster(env, &ns, "pz", 3, ids, "after the resume").await;
    env.check_keys(&ns, "pz", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_member_pod_is_recreated_on_its_pvc_and_data_survives() {
    let env = env().await;
    let (ns, _) = healthy_cluster(env, "podloss", "pl", spec(3)).await;
    let keys = env.write_keys(&ns, "pl", 30).await;
    let members_before: Vec<String> = env.member_names(&ns, "pl").await;
    let etcd_ids_before = env.member_ids(&ns, "pl").await;
    // The status shows the members as etcd answers; the victim is the leader they name.
    let c = env
        .wait_for(&ns, "pl", "3 members, one Leader", BOOT, |c| {
            roster_leader(c, 3).is_ok()
        })
        .await;
    let leader = roster_leader(&c, 3).or_panic();
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    let victim_pod = pods.get(&leader).await.or_panic();
    assert!(pod_ready(&victim_pod), "the leader's Pod {leader} is Ready");
    let victim = victim_pod.name_any();
    let pod_uid = victim_pod.uid().unwrap_or_default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client(), &ns);
    let claim = labels::pvc_name(&victim);
    let pvc_uid = pvcs.get(&claim).await.or_panic().uid();
    assert!(pvc_uid.is_some(), "{claim} has no UID");
    kubectl(env, &["delete", "pod", &victim, "-n", &ns, "--wait=false"]).await;
    // Another member leads, and the status says so.
    env.wait_for(&ns, "pl", "a new leader in the status", BOOT, |c| {
        c.status
            .as_ref()
            .and_then(|s| s.leader.as_deref())
            .is_some_and(|l| l != victim)
    })
    .await;
    // The victim's Pod comes back: a new Pod (new UID) of the same name, Ready.
    let recreated = eventually(
        &format!(
            "{victim} recreated and Ready; operator log: {}",
            env.operator.log().display()
        ),
        BOOT,
        || async {
            match pods.get_opt(&victim).await.or_panic() {
                Some(p)
                    if p.uid().unwrap_or_default() != pod_uid
                        && p.metadata.deletion_timestamp.is_none()
                        && pod_ready(&p) =>
                {
                    Ok(p)
                }
                p => Err(format!(
                    "{:?}",
                    p.map(|p| (p.uid(), pod_ready(&p), p.metadata.deletion_timestamp))
                )),
            }
        },
    )
    .await;
    env.wait_healthy(&ns, "pl", 3, BOOT).await;
    env.wait_for(&ns, "pl", "3 members again, one Leader", BOOT, |c| {
        roster_leader(c, 3).is_ok()
    })
    .await;
    let members_after: Vec<String> = env.member_names(&ns, "pl").await;
    assert_eq!(
        members_before, members_after,
        "a PVC-backed member keeps its identity"
    );
    assert_eq!(
        env.member_ids(&ns, "pl").await,
        etcd_ids_before,
        "a member changed its etcd ID"
    );
    assert_eq!(
        pvcs.get(&claim).await.or_panic().uid(),
        pvc_uid,
        "{claim} was replaced: the member did not come back on its own claim"
    );
    // The member's own data survived: it alone (its own endpoint, serializable reads answered
    // from its local store) holds every key.
    eventually_every(
        &format!("{victim} alone to hold every key"),
        Duration::from_secs(10),
        HALF,
        || async {
            let own = read_member_keys(&recreated, "e2e/").await;
            let missing: Vec<&String> = keys
                .keys()
                .filter(|k| own.get(*k) != keys.get(*k))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            Err(format!(
                "{victim} alone lacks {} of {} keys: {:?}",
                missing.len(),
                keys.len(),
                &missing[..missing.len().min(10)]
            ))
        },
    )
    .await;
    env.check_keys(&ns, "pl", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_member_whose_pod_is_deleted_is_replaced_by_a_new_member() {
    let env = env().await;
    let mut s = spec(3);
    s.storage.medium = Some(api::v1alpha2::StorageMedium::Memory);
    s.storage.size = k8s_openapi::apimachinery::pkg::api::resource::Quantity("128Mi".into());
    let (ns, _) = healthy_cluster(env, "mem", "mem", s).await;
    assert!(
        env.pvcs(&ns, "mem").await.is_empty(),
        "memory members have no PVC"
    );
    let keys = env.write_keys(&ns, "mem", 30).await;
    let before: Vec<String> = env.member_names(&ns, "mem").await;
    let victim = before[1].clone();
    kubectl(env, &["delete", "pod", &victim, "-n", &ns]).await;
    // The lost member is replaced by a new one (a new name), and the victim leaves.
    eventually_every(&format!("member {victim} replaced"), BOOT, HALF, || async {
        seen(env.member_names(&ns, "mem").await, |names| {
            !names.contains(&victim) && names.len() == 3
        })
    })
    .await;
    env.wait_healthy(&ns, "mem", 3, BOOT).await;
    let etcd = env.etcd_members(&ns, "mem").await;
    assert_eq!(etcd.len(), 3);
    assert!(
        !etcd.iter().any(|(n, _)| n == &victim),
        "the lost member left etcd: {etcd:?}"
    );
    env.check_keys(&ns, "mem", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_formed_cluster_removes_every_owned_object_without_deadlock() {
    let env = env().await;
    let (ns, _) = healthy_cluster(env, "delete", "gone", spec(3)).await;
    let kind = "etcdcluster.etcd-operator.cozystack.io";
    kubectl(env, &["delete", kind, "gone", "-n", &ns, "--wait=false"]).await;
    // The member finalizers see the cluster going and skip MemberRemove; the cluster's
    // cleanup finalizer deletes the data PVCs (owned by nothing); owner references
    // garbage-collect the rest.
    eventually_every(
        "every owned object gone",
        Duration::from_secs(120),
        HALF,
        || async {
            let members = env.members(&ns, "gone").await.len();
            let pods = env.pods(&ns, "gone").await.len();
            let pvcs = env.pvcs(&ns, "gone").await.len();
            let rest = kubectl(
                env,
                &["get", "etcdcluster,svc,pdb", "-n", &ns, "-o", "name"],
            )
            .await;
            if members + pods + pvcs == 0 && rest.trim().is_empty() {
                return Ok(());
            }
            Err(format!(
                "left behind: {members} members, {pods} pods, {pvcs} PVCs, {rest:?}"
            ))
        },
    )
    .await;
}

/// A restore from a claim that does not exist: the seed cannot start, and the cluster says which
/// claim is missing instead of only showing a Pending Pod; creating the claim is not this test's
/// business (e2e_restore restores from real PVC and S3 snapshots).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_from_a_missing_claim_is_held_with_a_condition_naming_the_claim() {
    let env = env().await;
    let ns = env.namespace("restore").await;
    let mut s = spec(3);
    s.bootstrap = Some(
        serde_json::from_value(serde_json::json!(
            {"restore": {"source": {"pvc": {"claimName": "backups", "subPath": "a.db"}}}}
        ))
        .expect("a restore source"),
    );
    env.create_cluster(&ns, "restore", s).await;
    let message = wait_unavailable(env, &ns, "restore", "RestoreFailed").await;
    assert!(
        message.contains("spec.bootstrap.restore.source.pvc.claimName")
            && message.contains("\"backups\"")
            && message.contains(&ns),
        "{message}"
    );
    // The cluster writes its locked target (with this condition) just before it creates the
    // seed: the seed comes, and no other member follows it while it cannot restore.
    eventually_every(
        &format!("{ns}/restore: the seed EtcdMember"),
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let n = env.members(&ns, "restore").await.len();
            if n == 1 {
                Ok(())
            } else {
                Err(format!("{n} members"))
            }
        },
    )
    .await;
    throughout(
        Duration::from_secs(5),
        Duration::from_millis(500),
        || async {
            let members = env.members(&ns, "restore").await;
            assert_eq!(
                members.len(),
                1,
                "only the seed exists while it cannot restore: {members:?}"
            );
        },
    )
    .await;
}

/// The Services are the operator's: an edit that would cut members or clients off is put back,
/// and a Service of the same name that belongs to someone else is never adopted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drifted_services_are_restored_and_a_foreign_service_is_never_adopted() {
    let env = env().await;
    let (ns, _) = healthy_cluster(env, "svc", "sv", spec(1)).await;
    let get = |name: &'static str, path: &'static str| {
        let (env, ns) = (env, ns.clone());
        async move {
            let jsonpath = format!("jsonpath={path}");
            kubectl(env, &["get", "svc", name, "-n", &ns, "-o", &jsonpath]).await
        }
    };
    for (svc, patch) in [
        ("sv-client", r#"{"spec":{"selector":{"app":"elsewhere"}}}"#),
        ("sv", r#"{"spec":{"publishNotReadyAddresses":false}}"#),
    ] {
        kubectl(
            env,
            &["patch", "svc", svc, "-n", &ns, "--type=merge", "-p", patch],
        )
        .await;
    }
    eventually_every(
        "Services restored",
        Duration::from_secs(60),
        HALF,
        || async {
            let selector = get("sv-client", "{.spec.selector}").await;
            let published = get("sv", "{.spec.publishNotReadyAddresses}").await;
            if selector.contains("etcd-operator.cozystack.io/cluster")
                && !selector.contains("elsewhere")
                && published == "true"
            {
                return Ok(());
            }
            Err(format!(
                "selector {selector}, publishNotReadyAddresses {published}"
            ))
        },
    )
    .await;

    // Someone else's Service named like a new cluster's client Service.
    let foreign = [
        "create",
        "service",
        "clusterip",
        "other-client",
        "--tcp=80:8080",
    ];
    kubectl(env, &[&foreign[..], &["-n", &ns]].concat()).await;
    env.create_cluster(&ns, "other", spec(1)).await;
    eventually_every(
        "an OwnershipConflict event",
        Duration::from_secs(60),
        HALF,
        || async {
            let events = env
                .kubectl_events(
                    &ns,
                    "involvedObject.name=other,reason=OwnershipConflict",
                    "jsonpath={.items[*].note}{.items[*].message}",
                )
                .await;
            seen(events, |e| {
                e.contains("other-client") && e.contains("not owned")
            })
        },
    )
    .await;
    assert!(
        env.members(&ns, "other").await.is_empty(),
        "nothing built on a foreign Service"
    );
    let selector = get("other-client", "{.spec.selector}").await;
    assert!(
        !selector.contains("etcd-operator"),
        "the foreign Service was left alone: {selector}"
    );
}
