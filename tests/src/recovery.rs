//! What the `EtcdRecovery` suites share: creating a recovery in a test's [`Scope`] and waiting
//! on its status.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::v1alpha2::{
    EtcdRecovery, EtcdRecoverySpec, LocalReference, RecoveryPhase, RecoveryPlan, RecoverySource,
    RecoveryStep, RECOVERY_ANNOTATION,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use crate::e2e::Env;
use crate::harness::eventually_every;
use crate::operator::Scope;
use crate::workload::{Report, Rollback, Workload};
use crate::OrPanic;
use serde_json::json;

/// How often [`wait_recovery`] asks.
const POLL: Duration = Duration::from_millis(200);

/// The EtcdRecoveries of the scope's namespace.
pub fn recoveries(s: &Scope) -> Api<EtcdRecovery> {
    Api::namespaced(s.env.client(), &s.ns)
}

/// Create EtcdRecovery `name` of `cluster` from `source`; `confirm` sets
/// `confirmHealthyClusterRollback`.
pub async fn create_recovery(
    s: &Scope,
    name: &str,
    cluster: &str,
    source: RecoverySource,
    confirm: bool,
) {
    let mut r = EtcdRecovery::new(
        name,
        EtcdRecoverySpec {
            cluster_ref: LocalReference {
                name: cluster.into(),
            },
            source,
            confirm_healthy_cluster_rollback: confirm.then_some(true),
            allow_unverified_snapshot: None,
        },
    );
    r.metadata.namespace = Some(s.ns.clone());
    recoveries(s)
        .create(&PostParams::default(), &r)
        .await
        .or_panic();
}

/// Wait until the recovery's status satisfies `check`; returns it. The timeout names the
/// test's operator logs and the last status.
pub async fn wait_recovery(
    s: &Scope,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&EtcdRecovery) -> bool,
) -> EtcdRecovery {
    let what = format!("{}/{name}: {what} (operator logs: {})", s.ns, s.logs());
    eventually_every(&what, timeout, POLL, || async {
        let r = recoveries(s).get(name).await.or_panic();
        if check(&r) {
            Ok(r)
        } else {
            Err(format!(
                "status: {}",
                serde_json::to_string_pretty(&r.status).unwrap_or_default()
            ))
        }
    })
    .await
}

/// The recovery's `Ready` condition (a finished recovery always has one).
pub fn ready_condition(r: &EtcdRecovery) -> Condition {
    r.status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == "Ready")
        .cloned()
        .unwrap_or_else(|| panic!("{}: no Ready condition: {:?}", r.name_any(), r.status))
}

/// The recovery's phase, if it has a status.
pub fn phase(r: &EtcdRecovery) -> Option<RecoveryPhase> {
    r.status.as_ref().and_then(|s| s.phase)
}

/// The highest revision the cluster answers with now.
pub async fn revision(env: &Env, ns: &str, cluster: &str) -> i64 {
    let mut etcd = env.etcd_client(ns, cluster).await;
    etcd.get("e2e/", None)
        .await
        .or_panic()
        .header()
        .map(|h| h.revision())
        .expect("a response header")
}

/// Every member lost with its data: PVCs force-deleted (the protection finalizer removed, as a
/// storage admin would) and Pods deleted at once.
pub async fn lose_all(env: &Env, ns: &str, cluster: &str) {
    let members = env.member_names(ns, cluster).await;
    lose_members(&env.client(), ns, &members).await;
}

/// The members `victims` lost with their data, as [`lose_all`] loses every member.
pub async fn lose_members(client: &kube::Client, ns: &str, victims: &[String]) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for victim in victims {
        let pvc = format!("data-{victim}");
        pvcs.delete(&pvc, &DeleteParams::default()).await.or_panic();
        pvcs.patch(
            &pvc,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .or_panic();
        pods.delete(victim, &DeleteParams::default().grace_period(0))
            .await
            .or_panic();
    }
}

/// How many keys under `prefix` the cluster holds.
pub async fn count(env: &Env, ns: &str, cluster: &str, prefix: &str) -> i64 {
    let mut etcd = env.etcd_client(ns, cluster).await;
    etcd.get(
        prefix,
        Some(
            etcd_client::GetOptions::new()
                .with_prefix()
                .with_count_only(),
        ),
    )
    .await
    .or_panic()
    .count()
}

/// What a cluster was before it lost every member.
pub struct Before {
    /// The keys `e2e/*` written before the snapshot restored.
    pub kept: BTreeMap<String, String>,
    /// The highest revision read before the loss.
    pub max: i64,
    pub client_service_uid: Option<String>,
}

/// The cluster `name` before the loss: `kept`, its revision now and its client Service.
pub async fn before(env: &Env, ns: &str, name: &str, kept: BTreeMap<String, String>) -> Before {
    let services: Api<Service> = Api::namespaced(env.client(), ns);
    let client_service_uid = services
        .get(&format!("{name}-client"))
        .await
        .or_panic()
        .uid();
    Before {
        kept,
        max: revision(env, ns, name).await,
        client_service_uid,
    }
}

/// What a Complete snapshot recovery must have left: 3 voters, nothing holding the cluster, the
/// same client Service object, every key from before the snapshot and none of the `late/` ones
/// written after it, the revision above the pre-failure maximum, a watch from that revision
/// answered with a compaction, and the recovery's Events.
pub async fn assert_restored(
    env: &Env,
    ns: &str,
    name: &str,
    recovery: &EtcdRecovery,
    b: &Before,
    within: Duration,
) {
    assert_rebuilt(env, ns, name, recovery, b, within).await;
    // Every key written before the snapshot; none written after it.
    env.check_keys(ns, name, &b.kept).await;
    assert_eq!(
        count(env, ns, name, "late/").await,
        0,
        "writes after the snapshot are rolled back"
    );
}

/// What any Complete in-place recovery from a stored state must have left, whatever its keys:
/// 3 voters, nothing holding the cluster, the same client Service object, the revision above
/// the pre-failure maximum, a watch from that revision answered with a compaction, and the
/// recovery's Events.
pub async fn assert_rebuilt(
    env: &Env,
    ns: &str,
    name: &str,
    recovery: &EtcdRecovery,
    b: &Before,
    within: Duration,
) {
    let c = env.wait_healthy(ns, name, 3, within).await;
    assert!(
        !c.annotations().contains_key(RECOVERY_ANNOTATION),
        "{:?}",
        c.annotations()
    );
    let voters = env.etcd_members(ns, name).await;
    assert_eq!(voters.len(), 3, "{voters:?}");
    assert!(voters.iter().all(|(_, learner)| !learner), "{voters:?}");
    // The same client Service object.
    let services: Api<Service> = Api::namespaced(env.client(), ns);
    let now = services.get(&format!("{name}-client")).await.or_panic();
    assert_eq!(now.uid(), b.client_service_uid);
    // The revision is above anything a client saw before the loss.
    let after = revision(env, ns, name).await;
    assert!(after > b.max, "revision {after} <= {}", b.max);
    // A watch resumed from an old revision is told it was compacted, not left silent.
    let mut etcd = env.etcd_client(ns, name).await;
    let mut stream = etcd
        .watch(
            "e2e/",
            Some(
                etcd_client::WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(b.max),
            ),
        )
        .await
        .or_panic();
    // The first answer may only say the watch was created; the compaction follows it.
    let compacted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let resp = stream
                .message()
                .await
                .or_panic()
                .expect("the watch stream ended without a compaction");
            assert!(
                resp.events().is_empty(),
                "a watch from a compacted revision delivered events: {resp:?}"
            );
            if resp.compact_revision() > 0 || resp.canceled() {
                break resp;
            }
        }
    })
    .await
    .expect("the watch from the old revision answers with a compaction within 30 s");
    assert!(
        compacted.compact_revision() > b.max,
        "compact revision {} for a watch from {}: {compacted:?}",
        compacted.compact_revision(),
        b.max
    );
    // Events tell the story.
    assert_told(env, ns, recovery).await;
}

/// Wait (up to `within`) until `workload` has a write acknowledged at revision `from` or above;
/// that revision.
pub async fn acknowledged_from(
    workload: &Workload,
    ns: &str,
    name: &str,
    from: i64,
    within: Duration,
) -> i64 {
    let what = format!("{ns}/{name}: a write acknowledged at revision {from} or above");
    eventually_every(&what, within, POLL, || async {
        match workload.newest_revision() {
            Some(r) if r >= from => Ok(r),
            newest => Err(format!("newest acknowledged revision {newest:?}")),
        }
    })
    .await
}

/// The recovery's Events tell its story: planned, each step, complete.
pub async fn assert_told(env: &Env, ns: &str, recovery: &EtcdRecovery) {
    let reasons: BTreeSet<String> = env
        .events(ns, &recovery.name_any())
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for expected in ["RecoveryPlanned", "RecoveryStep", "RecoveryComplete"] {
        assert!(reasons.contains(expected), "{expected} in {reasons:?}");
    }
}

/// After an in-place restore: wait until the restored cluster has acknowledged `writes_after`
/// of the workload's writes, then judge its whole history as a rollback to the snapshot —
/// writes up to it kept, later ones rolled back, and the first restored revision above anything
/// acknowledged before the loss (`before_max`).
pub async fn finish_rolled_back(
    workload: Workload,
    ns: &str,
    name: &str,
    rollback: Rollback,
    before_max: i64,
    writes_after: i64,
    within: Duration,
) {
    let first = acknowledged_from(&workload, ns, name, rollback.restored_at, within).await;
    acknowledged_from(&workload, ns, name, first + writes_after, within).await;
    let (report, rolled) = workload.finish_after_rollback(rollback).await;
    println!("{}\n{report}\n{rolled}", Report::HEADER);
    assert!(rolled.kept_before > 0, "{rolled}");
    assert!(rolled.rolled_back > 0, "{rolled}");
    assert!(
        rolled.acknowledged_after >= u64::try_from(writes_after).unwrap_or_default(),
        "{rolled}"
    );
    let pre_failure_max = rolled.pre_failure_max.unwrap_or_default().max(before_max);
    assert!(
        rolled.first_after.is_some_and(|f| f > pre_failure_max),
        "{rolled}"
    );
}

/// Wait (up to `within`) until recovery `name` has reached its RestoreSnapshot step (or a later
/// one); the plan it recorded before acting.
pub async fn plan_at_restore(s: &Scope, name: &str, within: Duration) -> RecoveryPlan {
    let running = wait_recovery(s, name, "step RestoreSnapshot", within, |r| {
        r.status
            .as_ref()
            .and_then(|st| st.step)
            .is_some_and(|st| st >= RecoveryStep::RestoreSnapshot)
    })
    .await;
    running.status.and_then(|st| st.plan).unwrap_or_default()
}
