//! End to end, the safety rules of the controller: what it must never do to a member's data or a
//! healthy member, and what it must still do on a degraded cluster. Each scenario runs real etcd
//! members through the pod runner and checks every key it wrote.

use std::collections::BTreeSet;
use std::time::Duration;

use api::conditions::{cluster as ctype, member as mtype, reason};
use api::labels;
use api::v1alpha2::{EtcdMember, StorageMedium};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::adopt::restarts;
use tests::e2e::{condition, env, pod_ready, spec, Env};
use tests::harness::{eventually, eventually_every, seen, throughout, POLL};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);

async fn member_id(env: &Env, ns: &str, member: &str) -> String {
    let api: Api<EtcdMember> = Api::namespaced(env.client(), ns);
    api.get(member)
        .await
        .or_panic()
        .status
        .and_then(|s| s.member_id)
        .unwrap_or_else(|| panic!("{member} has no member ID"))
}

/// A member that is not the seed (the seed has its own safeguard: `initial-cluster-state`).
async fn non_seed(env: &Env, ns: &str, cluster: &str) -> String {
    env.members(ns, cluster)
        .await
        .into_iter()
        .find(|m| !m.spec.bootstrap)
        .map(|m| m.name_any())
        .expect("a non-seed member")
}

/// IDs etcd lists, as 16-digit hex.
async fn etcd_ids(env: &Env, ns: &str, cluster: &str) -> BTreeSet<String> {
    let mut client = env.etcd_client(ns, cluster).await;
    client
        .member_list()
        .await
        .or_panic()
        .members()
        .iter()
        .map(|m| format!("{:016x}", m.id()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_whose_pvc_vanished_is_replaced_never_restarted_on_an_empty_volume() {
    let env = env().await;
    let ns = env.namespace("pvclost").await;
    env.create_cluster(&ns, "pl", spec(3)).await;
    env.wait_healthy(&ns, "pl", 3, BOOT).await;
    let keys = env.write_keys(&ns, "pl", 50).await;
    let victim = non_seed(env, &ns, "pl").await;
    let victim_id = member_id(env, &ns, &victim).await;
    let pvc = format!("data-{victim}");

    // The disk is gone for good: the claim is deleted (its protection finalizer removed, as a
    // storage admin force-deleting it would) and the Pod with it.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client(), &ns);
    pvcs.delete(&pvc, &DeleteParams::default()).await.or_panic();
    pvcs.patch(
        &pvc,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .or_panic();
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    pods.delete(&victim, &DeleteParams::default().grace_period(0))
        .await
        .or_panic();

    // An empty volume under the member's old etcd ID would rejoin with an empty Raft log: the
    // claim must never come back, and the member must be replaced by a new one.
    eventually(
        &format!(
            "{victim} replaced; operator log: {}",
            env.operator.log().display()
        ),
        BOOT,
        || async {
            if let Some(p) = pvcs.get_opt(&pvc).await.or_panic() {
                if p.metadata.deletion_timestamp.is_none() {
                    panic!(
                        "PVC {pvc} was recreated empty for member {victim} (etcd ID {victim_id}); operator log: {}",
                        env.operator.log().display()
                    );
                }
            }
            seen(env.member_names(&ns, "pl").await, |names| {
                !names.contains(&victim) && names.len() == 3
            })
        },
    )
    .await;
    env.wait_healthy(&ns, "pl", 3, BOOT).await;
    let ids = etcd_ids(env, &ns, "pl").await;
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(
        !ids.contains(&victim_id),
        "the lost member's ID {victim_id} is still in etcd: {ids:?}"
    );
    env.check_keys(&ns, "pl", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_with_old_restarts_that_hangs_briefly_is_not_replaced() {
    let env = env().await;
    let ns = env.namespace("restarts").await;
    env.create_cluster(&ns, "rs", spec(3)).await;
    env.wait_healthy(&ns, "rs", 3, BOOT).await;
    let keys = env.write_keys(&ns, "rs", 20).await;
    let before = env.member_names(&ns, "rs").await;
    let target = non_seed(env, &ns, "rs").await;
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);

    let unchanged = |names: &Vec<String>, when: &str| {
        assert_eq!(
            names,
            &before,
            "a member was replaced {when}; operator log: {}",
            env.operator.log().display()
        );
    };
    // Five crashes, each one recovered: a lifetime restart count at the old threshold.
    for n in 1..=5 {
        env.runner.kill_container(&ns, &target, "etcd").or_panic();
        eventually_every(
            &format!("{target} back after crash {n}"),
            Duration::from_secs(90),
            Duration::from_millis(200),
            || async {
                let p = pods.get(&target).await.or_panic();
                if restarts(&p) >= n && pod_ready(&p) {
                    return Ok(());
                }
                unchanged(&env.member_names(&ns, "rs").await, "while it restarted");
                Err(format!(
                    "restarts {}, ready {}",
                    restarts(&p),
                    pod_ready(&p)
                ))
            },
        )
        .await;
    }
    // Now it hangs (a node blip: the process is alive, readiness fails) for a while: not a
    // crash loop, so nothing is replaced.
    env.runner.stop_container(&ns, &target, "etcd").or_panic();
    let was_unready = std::cell::Cell::new(false);
    throughout(Duration::from_secs(25), POLL, || async {
        let p = pods.get(&target).await.or_panic();
        was_unready.set(was_unready.get() | !pod_ready(&p));
        unchanged(&env.member_names(&ns, "rs").await, "while it hung");
    })
    .await;
    let was_unready = was_unready.get();
    assert!(was_unready, "{target} never became unready while stopped");
    env.runner.resume_container(&ns, &target, "etcd").or_panic();
    env.wait_healthy(&ns, "rs", 3, BOOT).await;
    unchanged(&env.member_names(&ns, "rs").await, "after it recovered");
    env.check_keys(&ns, "rs", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_stuck_pending_fails_bootstrap_when_the_deadline_expires_by_itself() {
    let env = env().await;
    let ns = env.namespace("expiry").await;
    // No image for 3.4.x: the seed's container never starts, nothing else changes.
    let mut broken = spec(1);
    broken.version = "3.4.0".into();
    broken.progress_deadline_seconds = 15;
    env.create_cluster(&ns, "ex", broken).await;
    // Nobody touches the status: the operator must wake up at the deadline on its own.
    env.wait_for(
        &ns,
        "ex",
        "Available=False/BootstrapFailed at the natural deadline",
        Duration::from_secs(75),
        |c| {
            condition(c, ctype::AVAILABLE)
                .is_some_and(|(s, r, _)| s == "False" && r == reason::BOOTSTRAP_FAILED)
        },
    )
    .await;
    let events = env.events(&ns, "ex").await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some(reason::BOOTSTRAP_FAILED)
                && e.type_.as_deref() == Some("Warning")),
        "no BootstrapFailed Warning Event: {:?}",
        events.iter().map(|e| &e.reason).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_of_a_degraded_cluster_acts_at_once_and_removes_the_hung_member() {
    let env = env().await;
    let ns = env.namespace("degraded").await;
    env.create_cluster(&ns, "dg", spec(3)).await;
    env.wait_healthy(&ns, "dg", 3, BOOT).await;
    let keys = env.write_keys(&ns, "dg", 30).await;
    // The oldest member hangs; scale-down would pick the newest, which etcd refuses to remove
    // while another voter is down.
    let hung = env
        .members(&ns, "dg")
        .await
        .into_iter()
        .find(|m| m.spec.bootstrap)
        .map(|m| m.name_any())
        .expect("the seed");
    env.runner.stop_container(&ns, &hung, "etcd").or_panic();
    env.wait_for(
        &ns,
        "dg",
        "Degraded=True/MembersUnhealthy",
        Duration::from_secs(90),
        |c| {
            condition(c, ctype::DEGRADED)
                .is_some_and(|(s, r, _)| s == "True" && r == reason::MEMBERS_UNHEALTHY)
        },
    )
    .await;
    env.scale(&ns, "dg", 2).await;
    let c = env
        .wait_healthy(&ns, "dg", 2, Duration::from_secs(120))
        .await;
    assert_eq!(
        c.status.and_then(|s| s.observed).map(|o| o.replicas),
        Some(2)
    );
    let names = env.member_names(&ns, "dg").await;
    assert!(
        !names.contains(&hung),
        "the hung member {hung} should have been removed first: {names:?}"
    );
    let etcd = env.etcd_members(&ns, "dg").await;
    assert_eq!(etcd.len(), 2, "{etcd:?}");
    env.check_keys(&ns, "dg", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghost_member_without_an_etcdmember_is_reported_and_removed() {
    let env = env().await;
    let ns = env.namespace("ghost").await;
    env.create_cluster(&ns, "gh", spec(3)).await;
    env.wait_healthy(&ns, "gh", 3, BOOT).await;
    let keys = env.write_keys(&ns, "gh", 20).await;
    // A voter that no EtcdMember describes (say, a member whose finalizer was removed by hand
    // before MemberRemove). Its name never resolves, so nothing is ever sent to it.
    let ghost_url = format!("http://ghost-zz.gh.{ns}.svc:2380");
    let client = env.etcd_client(&ns, "gh").await;
    // etcd refuses to add a voter until every member has been connected for a few seconds
    // ("unhealthy cluster"), which a cluster that just became Ready may not be yet.
    let added = eventually_every(
        "etcd to accept the ghost member",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            match client.clone().member_add([ghost_url.as_str()], None).await {
                Ok(added) => Ok(added),
                Err(e) if e.to_string().contains("unhealthy cluster") => Err(e.to_string()),
                Err(e) => panic!("adding the ghost member: {e}"),
            }
        },
    )
    .await;
    let ghost_id = format!("{:016x}", added.member().map(|m| m.id()).unwrap_or(0));
    eventually_every(
        &format!(
            "ghost {ghost_id} removed; operator log: {}",
            env.operator.log().display()
        ),
        Duration::from_secs(90),
        Duration::from_millis(500),
        || async {
            seen(etcd_ids(env, &ns, "gh").await, |ids| {
                !ids.contains(&ghost_id)
            })
        },
    )
    .await;
    env.wait_healthy(&ns, "gh", 3, BOOT).await;
    let events = env.events(&ns, "gh").await;
    let note = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("GhostMemberRemoved"))
        .and_then(|e| e.message.clone())
        .unwrap_or_else(|| {
            panic!(
                "no GhostMemberRemoved Event: {:?}",
                events.iter().map(|e| &e.reason).collect::<Vec<_>>()
            )
        });
    assert!(
        note.contains(&ghost_id) && note.contains(&ghost_url),
        "{note}"
    );
    // Scaling works again afterwards.
    env.scale(&ns, "gh", 4).await;
    env.wait_healthy(&ns, "gh", 4, BOOT).await;
    env.check_keys(&ns, "gh", &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relabelled_memory_member_pod_is_not_mistaken_for_a_lost_one() {
    let env = env().await;
    let ns = env.namespace("relabel").await;
    let mut memory = spec(3);
    memory.storage.medium = Some(StorageMedium::Memory);
    memory.storage.size = k8s_openapi::apimachinery::pkg::api::resource::Quantity("256Mi".into());
    env.create_cluster(&ns, "rl", memory).await;
    env.wait_healthy(&ns, "rl", 3, BOOT).await;
    let keys = env.write_keys(&ns, "rl", 20).await;
    let before = env.member_names(&ns, "rl").await;
    let etcd_before = etcd_ids(env, &ns, "rl").await;
    let target = non_seed(env, &ns, "rl").await;
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    let uids_before = member_pod_uids(&pods, &before).await;
    assert_eq!(uids_before.len(), 3, "{uids_before:?}");
    // Someone strips the cluster label from a member Pod: it is still the member's Pod (same
    // name, owned by the member), with its tmpfs data.
    pods.patch(
        &target,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {labels::CLUSTER: null}}})),
    )
    .await
    .or_panic();
    // Until the label is back, and for a settle window after it (a replacement could follow the
    // relabel a moment later), no member and no member Pod is replaced. Every read must succeed:
    // an error fails the test rather than skipping a sample.
    const SETTLE: Duration = Duration::from_secs(20);
    // The same members and Pods; whether the target carries the cluster label again.
    let intact_then_labelled = || async {
        assert_eq!(
            env.member_names(&ns, "rl").await,
            before,
            "a member was replaced because its Pod lost a label; operator log: {}",
            env.operator.log().display()
        );
        assert_eq!(
            member_pod_uids(&pods, &before).await,
            uids_before,
            "a member's Pod was replaced after its label was stripped; operator log: {}",
            env.operator.log().display()
        );
        let p = pods.get(&target).await.or_panic();
        p.labels().get(labels::CLUSTER).map(String::as_str) == Some("rl")
    };
    eventually(
        &format!("the operator to put the cluster label back on {target}"),
        Duration::from_secs(30),
        || async {
            if intact_then_labelled().await {
                Ok(())
            } else {
                Err("not labelled".to_string())
            }
        },
    )
    .await;
    throughout(SETTLE, POLL, || async {
        assert!(
            intact_then_labelled().await,
            "the cluster label went again from {target}"
        );
    })
    .await;
    env.wait_healthy(&ns, "rl", 3, BOOT).await;
    // At the end: the same members, the same Pods, the same etcd members, every key.
    assert_eq!(env.member_names(&ns, "rl").await, before);
    assert_eq!(
        member_pod_uids(&pods, &before).await,
        uids_before,
        "a member's Pod was replaced"
    );
    assert_eq!(
        etcd_ids(env, &ns, "rl").await,
        etcd_before,
        "etcd's membership changed"
    );
    env.check_keys(&ns, "rl", &keys).await;
}

/// The UID of each named member's Pod (found by name: a relabelled Pod is still the member's);
/// a member without a Pod is absent from the map.
async fn member_pod_uids(
    pods: &Api<Pod>,
    members: &[String],
) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for m in members {
        if let Some(p) = pods.get_opt(m).await.or_panic() {
            if p.metadata.deletion_timestamp.is_none() {
                out.insert(m.clone(), p.uid().unwrap_or_default());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_pdb_with_the_cluster_name_is_never_overwritten_or_deleted() {
    let env = env().await;
    let ns = env.namespace("pdb").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(env.client(), &ns);
    let foreign: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "pd"},
        "spec": {"minAvailable": 7, "selector": {"matchLabels": {"app": "someone-else"}}}
    }))
    .or_panic();
    pdbs.create(&PostParams::default(), &foreign)
        .await
        .or_panic();
    env.create_cluster(&ns, "pd", spec(1)).await;
    eventually_every(
        &format!(
            "an OwnershipConflict Event naming the PDB; operator log: {}",
            env.operator.log().display()
        ),
        BOOT,
        Duration::from_millis(300),
        || async {
            let events = env.events(&ns, "pd").await;
            let conflict = events.iter().any(|e| {
                e.reason.as_deref() == Some("OwnershipConflict")
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("PodDisruptionBudget pd"))
            });
            if conflict {
                return Ok(());
            }
            Err(format!(
                "{:?}",
                events
                    .iter()
                    .map(|e| (&e.reason, &e.message))
                    .collect::<Vec<_>>()
            ))
        },
    )
    .await;
    let have = pdbs.get("pd").await.or_panic();
    let spec = have.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(7)),
        "the foreign PDB was changed: {have:?}"
    );
    assert!(
        have.owner_references().is_empty(),
        "the foreign PDB was adopted"
    );
    // Once it is out of the way, the operator's own PDB appears.
    pdbs.delete("pd", &DeleteParams::default()).await.or_panic();
    eventually_every(
        "the operator to create its own PDB",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || async {
            seen(pdbs.get_opt("pd").await.or_panic(), |p| {
                p.as_ref().is_some_and(|p| !p.owner_references().is_empty())
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_the_image_does_not_hold_is_reported_after_the_rollout() {
    // The test environment's etcd 3.6 build answers to every 3.6 tag: after a patch upgrade the
    // Pod runs the new tag, etcd still reports the old version, and the member says so.
    let env = env().await;
    let ns = env.namespace("version").await;
    env.create_cluster(&ns, "vr", spec(1)).await;
    env.wait_healthy(&ns, "vr", 1, BOOT).await;
    let api = env.clusters(&ns);
    api.patch(
        "vr",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"version": "3.6.17"}})),
    )
    .await
    .or_panic();
    eventually_every(
        "the member rolled to 3.6.17 and reported drifted",
        Duration::from_secs(120),
        Duration::from_millis(300),
        || async {
            let members = env.members(&ns, "vr").await;
            let pods = env.pods(&ns, "vr").await;
            let on_new_image = !pods.is_empty()
                && pods.iter().all(|p| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.containers[0].image.clone())
                        .is_some_and(|i| i.ends_with("3.6.17"))
                });
            let drifted = members.iter().all(|m| {
                m.status
                    .as_ref()
                    .and_then(|s| {
                        s.conditions
                            .iter()
                            .find(|c| c.type_ == mtype::VERSION_DRIFTED)
                    })
                    .is_some_and(|c| {
                        c.status == "True"
                            && c.reason == reason::VERSION_MISMATCH
                            && c.message.contains("3.6.17")
                            && c.message.contains("3.6.16")
                            && c.message.contains("does not hold")
                    })
            });
            if on_new_image && drifted && !members.is_empty() {
                return Ok(());
            }
            Err(format!(
                "{:?}",
                members.iter().map(|m| &m.status).collect::<Vec<_>>()
            ))
        },
    )
    .await;
    // The rollout itself is done: the cluster does not keep progressing.
    env.wait_for(
        &ns,
        "vr",
        "Progressing=False",
        Duration::from_secs(60),
        |c| condition(c, ctype::PROGRESSING).is_some_and(|(s, _, _)| s == "False"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_of_a_one_member_memory_cluster_is_refused_and_keeps_every_key() {
    // The only member of a Memory cluster holds the only copy of the data: a rollout would
    // replace it by an empty one. The version edit is refused with a condition, the member (same
    // EtcdMember, same Pod) and every key survive.
    let env = env().await;
    let ns = env.namespace("memroll").await;
    let mut memory = spec(1);
    memory.storage.medium = Some(StorageMedium::Memory);
    memory.storage.size = k8s_openapi::apimachinery::pkg::api::resource::Quantity("256Mi".into());
    env.create_cluster(&ns, "mr", memory).await;
    env.wait_healthy(&ns, "mr", 1, BOOT).await;
    let keys = env.write_keys(&ns, "mr", 20).await;
    let before = env.member_names(&ns, "mr").await;
    let [member] = before.as_slice() else {
        panic!("one member expected: {before:?}");
    };
    let pods: Api<Pod> = Api::namespaced(env.client(), &ns);
    let pod_uid = pods.get(member).await.or_panic().uid();
    env.clusters(&ns)
        .patch(
            "mr",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"version": "3.6.17"}})),
        )
        .await
        .or_panic();
    let survives = |names: &Vec<String>, uid: Option<String>| {
        assert_eq!(
            names,
            &before,
            "the rollout replaced the only Memory member; operator log: {}",
            env.operator.log().display()
        );
        assert_eq!(
            uid,
            pod_uid,
            "the only Memory member's Pod was replaced; operator log: {}",
            env.operator.log().display()
        );
    };
    let pod_uid_now = || async { pods.get_opt(member).await.or_panic().and_then(|p| p.uid()) };
    let (status, message) = eventually_every(
        "Progressing=False/MemoryRolloutUnsafe",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || async {
            survives(&env.member_names(&ns, "mr").await, pod_uid_now().await);
            let c = env.cluster(&ns, "mr").await;
            condition(&c, ctype::PROGRESSING)
                .filter(|(_, r, _)| r == reason::MEMORY_ROLLOUT_UNSAFE)
                .map(|(status, _, message)| (status, message))
                .ok_or_else(|| format!("{:?}", c.status))
        },
    )
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains(member.as_str())
            && message.contains("only copy")
            && message.contains("--replicas=3"),
        "{message}"
    );
    // It stays refused: nothing is replaced while the operator keeps reconciling.
    throughout(
        Duration::from_secs(20),
        Duration::from_millis(500),
        || async {
            survives(&env.member_names(&ns, "mr").await, pod_uid_now().await);
        },
    )
    .await;
    let warned = env.events(&ns, "mr").await.iter().any(|e| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some(reason::MEMORY_ROLLOUT_UNSAFE)
    });
    assert!(
        warned,
        "no Warning Event MemoryRolloutUnsafe on the cluster"
    );
    let c = env.cluster(&ns, "mr").await;
    assert!(
        condition(&c, ctype::AVAILABLE).is_some_and(|(s, _, _)| s == "True"),
        "{:?}",
        c.status
    );
    env.check_keys(&ns, "mr", &keys).await;
}
