//! End to end, `EtcdRecovery` from a survivor: a 3-member cluster loses two members with their
//! PVCs (quorum lost for good), an EtcdRecovery rebuilds it in place from the member that is
//! left, and the cluster comes back Available with 3 members, the same cluster ID, the same
//! client Service and every key written before. Once more with the operator SIGKILLed at
//! recorded steps and restarted; and once with the survivor's etcd frozen, its raft position read
//! from its data dir by a position Job. A recovery of a healthy cluster without the confirmation
//! changes nothing. A cluster annotated for automatic recovery gets its EtcdRecovery from the
//! operator.
//!
//! A member deleted with the break-glass annotation while the quorum is lost (Terminating, its
//! finalizer waiting for a voter) does not hold the recovery up: its Pod is stopped with the
//! others, and it goes with its PVC once the cluster is rebuilt.
//!
//! Every test runs its own operator limited to its namespace (the crash test kills and restarts
//! it); the control plane and the pod runner are shared by the binary.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::conditions::{cluster as ctype, reason};
use api::labels;
use api::v1alpha2::{
    EtcdMember, EtcdRecovery, RecoveryPhase, RecoverySource, RecoveryStep, SurvivorSource,
    AUTO_RECOVERY_ANNOTATION, RECOVERY_ANNOTATION,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use tests::e2e::{condition, spec, Env};
use tests::harness::eventually_every;
use tests::operator::{shared_env, Scope};
use tests::podrunner::PodRunner;
use tests::recovery::{assert_told, create_recovery, ready_condition, recoveries, wait_recovery};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
/// Two lost members are noticed after the survivor's readiness probe fails, then a reconcile.
const NOTICE: Duration = Duration::from_secs(90);
/// A recovery: stop, force, restart, delete, then two learners added one at a time.
const RECOVER: Duration = Duration::from_secs(300);

/// The binary's control plane and pod runner, with an operator that watches a namespace no test
/// uses: each test brings its own ([`Scope`]).
async fn lab() -> &'static Env {
    static LAB: OnceCell<Env> = OnceCell::const_new();
    LAB.get_or_init(|| shared_env(PodRunner::builder(), "recovery-idle"))
        .await
}

/// One test's namespace and its operator (restarted after a kill), with the operator image its
/// position Jobs run the agent from, as the chart sets it.
async fn scope(prefix: &str) -> Scope {
    let image = format!("--operator-image={}", tests::e2e::OPERATOR_IMAGE);
    Scope::new(lab().await, prefix, &[image.as_str()]).await
}

/// From the survivor with the most data.
fn survivor() -> RecoverySource {
    RecoverySource {
        survivor: Some(SurvivorSource { member: None }),
        snapshot: None,
        point_in_time: None,
    }
}

fn phase(r: &EtcdRecovery) -> Option<RecoveryPhase> {
    r.status.as_ref().and_then(|s| s.phase)
}

fn step(r: &EtcdRecovery) -> Option<RecoveryStep> {
    r.status.as_ref().and_then(|s| s.step)
}

/// What a cluster was before it lost two members.
struct Before {
    keys: BTreeMap<String, String>,
    survivor: String,
    cluster_id: u64,
    client_service_uid: String,
}

/// A 3-member cluster with keys written. Returns the keys, the first member by name (the
/// survivor), the cluster ID and the client Service's UID, and the members' names, sorted.
async fn written(s: &Scope, name: &str) -> (Before, Vec<String>) {
    let env = s.env;
    let ns = &s.ns;
    env.create_cluster(ns, name, spec(3)).await;
    env.wait_healthy(ns, name, 3, BOOT).await;
    let keys = env.write_keys(ns, name, 200).await;
    let cluster_id = env.etcd_cluster_id(ns, name, 3).await;
    let services: Api<Service> = Api::namespaced(env.client(), ns);
    let client_service = services
        .get(&format!("{name}-client"))
        .await
        .or_panic()
        .uid()
        .unwrap_or_default();

    let mut names = env.member_names(ns, name).await;
    names.sort();
    let before = Before {
        keys,
        survivor: names[0].clone(),
        cluster_id,
        client_service_uid: client_service,
    };
    (before, names)
}

/// The cluster says it lost its quorum, and which EtcdRecovery to apply.
async fn told_quorum_lost(s: &Scope, name: &str) {
    let message = s
        .env
        .wait_unavailable(&s.ns, name, reason::QUORUM_LOST, "EtcdRecovery", NOTICE)
        .await;
    assert!(
        message.contains(&format!("{name}-recovery")) && message.contains("survivor"),
        "{message}"
    );
}

/// A 3-member cluster with keys written ([`written`]), then two members lost with their data:
/// their PVCs deleted (the protection finalizer removed, as a storage admin force-deleting them
/// would) and their Pods with them.
async fn lose_two_of_three(s: &Scope, name: &str) -> Before {
    let (before, names) = written(s, name).await;
    tests::recovery::lose_members(&s.env.client(), &s.ns, &names[1..]).await;
    told_quorum_lost(s, name).await;
    before
}

/// What a Complete recovery must have left: 3 voters serving the same cluster ID and every key,
/// the same client Service, the plan naming the survivor, the result naming the members added
/// back, nothing holding the cluster.
async fn assert_recovered(s: &Scope, name: &str, recovery: &EtcdRecovery, before: &Before) {
    let env = s.env;
    let ns = &s.ns;
    let Before {
        keys,
        survivor,
        cluster_id,
        client_service_uid: client_service,
    } = before;
    let status = recovery.status.clone().unwrap_or_default();
    let plan = status.plan.clone().unwrap_or_default();
    assert_eq!(plan.member.as_deref(), Some(survivor.as_str()), "{plan:?}");
    assert!(
        plan.raft_term.is_some_and(|t| t > 0) && plan.raft_index.is_some_and(|i| i > 0),
        "the plan records the survivor's raft position: {plan:?}"
    );
    assert_eq!(plan.discarded_members.len(), 2, "{plan:?}");

    let c = env
        .wait_for(ns, name, "3 ready members after the recovery", BOOT, |c| {
            tests::e2e::healthy(c, 3)
        })
        .await;
    assert!(
        !c.annotations().contains_key(RECOVERY_ANNOTATION),
        "the recovery still holds the cluster: {:?}",
        c.annotations()
    );
    assert_eq!(
        condition(&c, ctype::AVAILABLE).map(|(st, _, _)| st),
        Some("True".to_string())
    );
    // etcd itself: three voters, each answering with the cluster ID from before.
    let voters = env.etcd_members(ns, name).await;
    assert_eq!(voters.len(), 3, "{voters:?}");
    assert!(voters.iter().all(|(_, learner)| !learner), "{voters:?}");
    assert_eq!(env.etcd_cluster_id(ns, name, 3).await, *cluster_id);
    assert_eq!(
        c.status.as_ref().and_then(|s| s.cluster_id.clone()),
        Some(format!("{cluster_id:016x}")),
        "the latched cluster ID"
    );
    // The survivor is still a member; the two others are new.
    let members: BTreeSet<String> = env.member_names(ns, name).await.into_iter().collect();
    assert!(members.contains(survivor), "{members:?}");
    let result = status.result.clone().unwrap_or_default();
    assert_eq!(result.members_re_added.len(), 2, "{result:?}");
    for added in &result.members_re_added {
        assert!(members.contains(added), "{added} not in {members:?}");
        assert!(!plan.discarded_members.contains(added), "{added}");
    }
    assert_eq!(
        result.cluster_id.as_deref(),
        Some(format!("{cluster_id:016x}").as_str())
    );
    assert!(
        result.keys.is_some_and(|k| k >= keys.len() as i64),
        "{result:?}"
    );
    // Every key written before, read through the cluster.
    env.check_keys(ns, name, keys).await;
    // The same client Service object (never recreated, so clients keep their address).
    let services: Api<Service> = Api::namespaced(env.client(), ns);
    let now = services.get(&format!("{name}-client")).await.or_panic();
    assert_eq!(now.uid().as_deref(), Some(client_service.as_str()));
    // Events tell the story.
    assert_told(env, ns, recovery).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivor_recovery_rebuilds_a_cluster_that_lost_two_of_three_members() {
    let s = scope("recover").await;
    let before = lose_two_of_three(&s, "rv").await;

    create_recovery(&s, "rv-recovery", "rv", survivor(), false).await;
    let done = wait_recovery(&s, "rv-recovery", "phase Complete", RECOVER, |r| {
        phase(r) == Some(RecoveryPhase::Complete)
    })
    .await;
    assert_recovered(&s, "rv", &done, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_whose_etcd_does_not_answer_is_read_from_its_data_dir_and_rebuilt_from() {
    let s = scope("recover-disk").await;
    let before = lose_two_of_three(&s, "rd").await;
    // The survivor's etcd stops answering (SIGSTOP: its process holds its data but serves
    // nothing), so its raft position can only come from its data dir.
    let frozen = tests::faults::freeze_member(s.env, &s.ns, &before.survivor);

    create_recovery(&s, "rd-recovery", "rd", survivor(), false).await;
    let planned = wait_recovery(&s, "rd-recovery", "a plan", RECOVER, |r| {
        r.status.as_ref().is_some_and(|st| st.plan.is_some())
    })
    .await;
    let plan = planned.status.and_then(|st| st.plan).unwrap_or_default();
    let candidate = plan
        .candidates
        .iter()
        .find(|c| c.name == before.survivor)
        .cloned()
        .unwrap_or_else(|| panic!("{} is not a candidate: {plan:?}", before.survivor));
    let note = candidate.note.clone().unwrap_or_default();
    assert!(
        note.contains("from its data dir"),
        "the survivor's figures come from its WAL: {candidate:?}"
    );
    assert!(
        candidate.raft_term.is_some_and(|t| t > 0) && candidate.raft_index.is_some_and(|i| i > 200),
        "past the 200 writes: {candidate:?}"
    );
    assert_eq!(
        (plan.raft_term, plan.raft_index),
        (candidate.raft_term, candidate.raft_index)
    );
    // It was read by a position Job, owned by the recovery, on the survivor's read-only claim.
    let jobs: Api<Job> = Api::namespaced(s.env.client(), &s.ns);
    let read = jobs
        .list(&ListParams::default().labels("app.kubernetes.io/component=position"))
        .await
        .or_panic()
        .items;
    let job = read
        .iter()
        .find(|j| {
            j.name_any()
                .starts_with(&format!("{}-wal-", before.survivor))
        })
        .unwrap_or_else(|| panic!("no position Job of {}: {read:?}", before.survivor));
    let owner = job.owner_references();
    assert!(
        owner
            .iter()
            .any(|o| o.kind == "EtcdRecovery" && o.name == "rd-recovery"),
        "{owner:?}"
    );
    let claim = job
        .spec
        .as_ref()
        .and_then(|sp| sp.template.spec.as_ref())
        .and_then(|p| p.volumes.as_ref())
        .and_then(|v| v.first())
        .and_then(|v| v.persistent_volume_claim.clone())
        .unwrap_or_default();
    assert_eq!(claim.claim_name, format!("data-{}", before.survivor));
    assert_eq!(claim.read_only, Some(true));
    // The recovery stops the member next (its Pod may be gone already): let its process go.
    drop(frozen);

    let done = wait_recovery(&s, "rd-recovery", "phase Complete", RECOVER, |r| {
        phase(r) == Some(RecoveryPhase::Complete)
    })
    .await;
    assert_recovered(&s, "rd", &done, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivor_recovery_finishes_after_the_operator_is_killed_at_recorded_steps() {
    let mut s = scope("recover-crash").await;
    let before = lose_two_of_three(&s, "rk").await;

    create_recovery(&s, "rk-recovery", "rk", survivor(), false).await;
    for at in [RecoveryStep::StopMembers, RecoveryStep::RestartSurvivor] {
        wait_recovery(&s, "rk-recovery", &format!("step {at:?}"), RECOVER, |r| {
            step(r).is_some_and(|st| st >= at)
        })
        .await;
        s.crash_and_restart().await;
    }
    let done = wait_recovery(&s, "rk-recovery", "phase Complete", RECOVER, |r| {
        phase(r) == Some(RecoveryPhase::Complete)
    })
    .await;
    assert_recovered(&s, "rk", &done, &before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_of_a_healthy_cluster_without_confirmation_changes_nothing() {
    let s = scope("recover-healthy").await;
    let env = s.env;
    env.create_cluster(&s.ns, "rh", spec(3)).await;
    env.wait_healthy(&s.ns, "rh", 3, BOOT).await;
    let pods_before: BTreeSet<String> = env
        .pods(&s.ns, "rh")
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();

    create_recovery(&s, "rh-recovery", "rh", survivor(), false).await;
    let failed = wait_recovery(&s, "rh-recovery", "phase Failed", NOTICE, |r| {
        phase(r) == Some(RecoveryPhase::Failed)
    })
    .await;
    let ready = ready_condition(&failed);
    assert_eq!(ready.reason, reason::HEALTHY_CLUSTER_NOT_CONFIRMED);
    assert!(
        ready.message.contains("confirmHealthyClusterRollback"),
        "{}",
        ready.message
    );
    assert!(failed.status.and_then(|s| s.plan).is_none());
    // Nothing was touched: the same Pods, no member dormant, nothing holds the cluster.
    let c = env.wait_healthy(&s.ns, "rh", 3, BOOT).await;
    assert!(!c.annotations().contains_key(RECOVERY_ANNOTATION));
    assert!(env
        .members(&s.ns, "rh")
        .await
        .iter()
        .all(|m| !m.spec.dormant));
    let pods_after: BTreeSet<String> = env
        .pods(&s.ns, "rh")
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    assert_eq!(pods_before, pods_after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_annotated_for_auto_recovery_is_recovered_without_a_human() {
    let s = scope("recover-auto").await;
    let env = s.env;
    // Annotated before anything is lost (the cluster is created by lose_two_of_three, so the
    // annotation is set as soon as it exists).
    let annotate = async {
        eventually_every(
            "the cluster rx exists",
            BOOT,
            Duration::from_millis(200),
            || async {
                let api = env.clusters(&s.ns);
                match api.get_opt("rx").await.or_panic() {
                    Some(_) => {
                        api.patch(
                            "rx",
                            &PatchParams::default(),
                            &Patch::Merge(&json!({"metadata": {"annotations": {
                                AUTO_RECOVERY_ANNOTATION: "survivor"}}})),
                        )
                        .await
                        .or_panic();
                        Ok(())
                    }
                    None => Err("not yet".to_string()),
                }
            },
        )
        .await
    };
    let (before, ()) = tokio::join!(lose_two_of_three(&s, "rx"), annotate);

    let what = format!(
        "{}: an EtcdRecovery rx-auto-* created by the operator and Complete (operator logs: {})",
        s.ns,
        s.logs()
    );
    let done = eventually_every(&what, RECOVER, Duration::from_millis(500), || async {
        let all = recoveries(&s)
            .list(&Default::default())
            .await
            .or_panic()
            .items;
        let auto: Vec<&EtcdRecovery> = all
            .iter()
            .filter(|r| r.name_any().starts_with("rx-auto-"))
            .collect();
        match auto.as_slice() {
            [one] if phase(one) == Some(RecoveryPhase::Complete) => Ok((*one).clone()),
            [_, _, ..] => panic!("more than one automatic recovery: {auto:?}"),
            _ => Err(format!(
                "{:?}",
                auto.iter()
                    .map(|r| (r.name_any(), phase(r)))
                    .collect::<Vec<_>>()
            )),
        }
    })
    .await;
    assert_recovered(&s, "rx", &done, &before).await;
    let reasons: BTreeSet<String> = env
        .events(&s.ns, "rx")
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert!(reasons.contains("RecoveryCreated"), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_deleted_while_the_quorum_is_lost_does_not_hold_up_the_recovery() {
    let s = scope("recover-deleting").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "rt");
    let (before, names) = written(&s, name).await;
    let (deleted, lost) = (names[1].clone(), names[2].clone());
    // The quorum goes: one member lost with its data, another cut off from everyone (its Pod
    // and its etcd keep running, no peer reaches it).
    let _cut = tests::faults::cut_member(env, ns, &deleted).await;
    tests::recovery::lose_members(&env.client(), ns, std::slice::from_ref(&lost)).await;
    told_quorum_lost(&s, name).await;

    // The runbook's break-glass delete of the cut-off member: its finalizer waits for a Ready
    // voter to take its MemberRemove, and no voter is Ready.
    let members: Api<EtcdMember> = Api::namespaced(env.client(), ns);
    let pods: Api<Pod> = Api::namespaced(env.client(), ns);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client(), ns);
    members
        .patch(
            &deleted,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                labels::ALLOW_DELETION_ANNOTATION: "true"}}})),
        )
        .await
        .or_panic();
    members
        .delete(&deleted, &DeleteParams::default())
        .await
        .or_panic();
    let terminating = members.get(&deleted).await.or_panic();
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "{deleted} is Terminating: {:?}",
        terminating.metadata
    );
    let pod = pods.get(&deleted).await.or_panic();
    assert!(
        pod.metadata.deletion_timestamp.is_none(),
        "its Pod still runs: {:?}",
        pod.metadata
    );

    let survivor = RecoverySource {
        survivor: Some(SurvivorSource {
            member: Some(before.survivor.clone()),
        }),
        snapshot: None,
        point_in_time: None,
    };
    create_recovery(&s, "rt-recovery", name, survivor, false).await;
    let done = wait_recovery(&s, "rt-recovery", "phase Complete", RECOVER, |r| {
        phase(r) == Some(RecoveryPhase::Complete)
    })
    .await;
    assert_recovered(&s, name, &done, &before).await;
    let plan = done
        .status
        .clone()
        .and_then(|st| st.plan)
        .unwrap_or_default();
    assert!(plan.discarded_members.contains(&deleted), "{plan:?}");
    // The recovery stopped its Pod (it was still Terminating then) ...
    let stopped = env
        .events(ns, "rt-recovery")
        .await
        .into_iter()
        .filter_map(|e| e.message)
        .any(|m| m.contains(&deleted) && m.contains("being deleted"));
    assert!(stopped, "no Event of rt-recovery says it stopped {deleted}");
    // ... and its finalizer finished once the cluster was rebuilt: the member and its PVC are
    // gone, as the break-glass delete asked, and etcd does not list it (three voters, above).
    assert!(members.get_opt(&deleted).await.or_panic().is_none());
    let claim = labels::pvc_name(&deleted);
    eventually_every(
        &format!("PVC {claim} gone"),
        BOOT,
        Duration::from_millis(500),
        || async {
            match pvcs.get_opt(&claim).await.or_panic() {
                None => Ok(()),
                Some(c) => Err(format!("still there: {:?}", c.metadata.deletion_timestamp)),
            }
        },
    )
    .await;
}
