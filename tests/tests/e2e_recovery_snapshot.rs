//! End to end, `EtcdRecovery` from a snapshot, in place: a 3-member cluster with keys and the
//! fault suite's workload running (a writer, a reader, a watcher), a verified EtcdSnapshot in
//! MinIO, more writes, then all three members lost with their PVCs. An `EtcdRecovery{snapshot}`
//! (with the operator SIGKILLed once the restore step is recorded) rebuilds the same EtcdCluster
//! from the snapshot: Available with 3 voters, the same client Service, every key written before
//! the snapshot readable and those after it gone, the revision above the pre-failure maximum, a
//! watch resumed from an old revision told it was compacted, and the workload's history judged
//! as a rollback ([`tests::workload::rollback`]). A cluster annotated `auto-recovery: snapshot`
//! that loses every member gets that recovery from the operator, from its newest verified
//! snapshot, with no human action. A snapshot recovery of a healthy cluster without the
//! confirmation changes nothing. A snapshot of a cluster deleted and created again under the
//! same name is refused by name, naming both incarnations.
//!
//! Every test runs its own operator limited to its namespace; the control plane and the pod
//! runner are shared by the binary.

use std::collections::BTreeSet;
use std::time::Duration;

use api::conditions::reason;
use api::v1alpha2::{
    EtcdRecovery, EtcdSnapshot, EtcdSnapshotSpec, LocalReference, RecoveryPhase, RecoverySource,
    S3Location, SecretReference, SnapshotDestination, SnapshotPhase, AUTO_RECOVERY_ANNOTATION,
    RECOVERY_ANNOTATION,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use tests::backup::create_snapshot;
use tests::e2e::{spec, Env};
use tests::harness::eventually_every;
use tests::operator::{shared_env, Scope};
use tests::podrunner::PodRunner;
use tests::recovery::{
    assert_restored, before, count, create_recovery, finish_rolled_back, lose_all, phase,
    plan_at_restore, ready_condition, recoveries, revision, wait_recovery,
};
use tests::workload::{Rollback, Workload};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(240);
const SNAPSHOT: Duration = Duration::from_secs(240);
const RECOVER: Duration = Duration::from_secs(420);
/// Every member gone is said after 30 s of unavailability; the operator creates the automatic
/// recovery once the cluster has been unavailable for 60 s, looking every 30 s.
const AUTO_START: Duration = Duration::from_secs(150);
/// Writes the workload must have acknowledged after the recovery completed.
const WRITES_AFTER: i64 = 100;

async fn lab() -> &'static Env {
    static LAB: OnceCell<Env> = OnceCell::const_new();
    LAB.get_or_init(|| shared_env(PodRunner::builder(), "snaprec-idle"))
        .await
}

/// One test's namespace and its operator, with the operator image its snapshot, verification and
/// restore containers run the agent from (a restart keeps it).
async fn scope(prefix: &str) -> Scope {
    let image = format!("--operator-image={}", tests::e2e::OPERATOR_IMAGE);
    Scope::new(lab().await, prefix, &[image.as_str()]).await
}

/// From EtcdSnapshot `name`.
fn from_snapshot(name: &str) -> RecoverySource {
    RecoverySource {
        survivor: None,
        snapshot: Some(LocalReference { name: name.into() }.into()),
        point_in_time: None,
    }
}

/// The test's MinIO bucket, under `rs/`.
fn minio_destination(endpoint: &str, bucket: &str) -> SnapshotDestination {
    SnapshotDestination {
        s3: Some(S3Location {
            endpoint: Some(endpoint.to_string()),
            bucket: bucket.to_string(),
            key: Some("rs/".into()),
            region: None,
            force_path_style: Some(true),
            credentials_secret_ref: Some(SecretReference::new("s3-creds")),
            ..Default::default()
        }),
        pvc: None,
    }
}

/// Where a snapshot cut the cluster's history, as far as the test can tell.
struct Taken {
    /// The revision the agent recorded (its hashKV's, just before the save streamed): the
    /// snapshot holds every write up to it.
    recorded: i64,
    /// The cluster's revision once the snapshot read Complete: it holds nothing above it.
    complete_by: i64,
}

/// Wait for `name` to be Complete; the cluster's revision then.
async fn wait_complete(s: &Scope, cluster: &str, name: &str) -> (EtcdSnapshot, i64) {
    let api: Api<EtcdSnapshot> = Api::namespaced(s.env.client(), &s.ns);
    let what = format!("{}/{name}: Complete", s.ns);
    let snapshot = eventually_every(&what, SNAPSHOT, Duration::from_millis(200), || async {
        let snapshot = api.get(name).await.or_panic();
        let status = snapshot.status.clone().unwrap_or_default();
        match status.phase {
            Some(SnapshotPhase::Complete) => Ok(snapshot),
            Some(SnapshotPhase::Failed) => panic!("{name} failed: {status:?}"),
            _ => Err(format!("{status:?}")),
        }
    })
    .await;
    (snapshot, revision(s.env, &s.ns, cluster).await)
}

/// A verified snapshot `name` of `cluster` in MinIO.
async fn verified_snapshot(
    s: &Scope,
    cluster: &str,
    name: &str,
    endpoint: &str,
    bucket: &str,
) -> Taken {
    create_snapshot(
        s.env,
        &s.ns,
        name,
        cluster,
        minio_destination(endpoint, bucket),
    )
    .await;
    let (complete, complete_by) = wait_complete(s, cluster, name).await;
    let recorded = complete
        .status
        .and_then(|st| st.hash_kv)
        .map(|h| h.revision)
        .unwrap_or_else(|| panic!("{name}: Complete without a recorded hashKV revision"));
    let api: Api<EtcdSnapshot> = Api::namespaced(s.env.client(), &s.ns);
    let what = format!("{}/{name}: Verified=True", s.ns);
    eventually_every(&what, SNAPSHOT, Duration::from_millis(500), || async {
        let s = api.get(name).await.or_panic();
        let status = s.status.clone().unwrap_or_default();
        match status.verified() {
            Some(true) => Ok(()),
            Some(false) => panic!("{name} failed verification: {status:?}"),
            None => Err(format!("{status:?}")),
        }
    })
    .await;
    Taken {
        recorded,
        complete_by,
    }
}

/// A Complete snapshot `name` of `cluster` in MinIO taken with `spec.verify: false`.
async fn unverified_snapshot(s: &Scope, cluster: &str, name: &str, endpoint: &str, bucket: &str) {
    let mut snapshot = EtcdSnapshot::new(
        name,
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: cluster.into(),
            },
            destination: minio_destination(endpoint, bucket),
            verify: Some(false),
        },
    );
    snapshot.metadata.namespace = Some(s.ns.clone());
    Api::<EtcdSnapshot>::namespaced(s.env.client(), &s.ns)
        .create(&PostParams::default(), &snapshot)
        .await
        .or_panic();
    let (complete, _) = wait_complete(s, cluster, name).await;
    assert_eq!(complete.status.and_then(|st| st.verified()), None);
}

/// Annotate `name` with `auto-recovery: snapshot`.
async fn annotate_auto_snapshot(env: &Env, ns: &str, name: &str) {
    env.clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {
                AUTO_RECOVERY_ANNOTATION: "snapshot"}}})),
        )
        .await
        .or_panic();
}

/// `count` keys `<prefix><i>` = `v`.
async fn put(env: &Env, ns: &str, cluster: &str, prefix: &str, count: usize) {
    let mut etcd = env.etcd_client(ns, cluster).await;
    for i in 0..count {
        etcd.put(format!("{prefix}{i}"), "v", None).await.or_panic();
    }
}

/// The recovery's plan (recorded before it acts).
fn plan_of(r: &EtcdRecovery) -> api::v1alpha2::RecoveryPlan {
    r.status
        .clone()
        .unwrap_or_default()
        .plan
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_recovery_rebuilds_a_cluster_that_lost_every_member_in_place() {
    let mut s = scope("snaprec").await;
    let env = s.env;
    let ns = s.ns.clone();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    let name = "rs";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let kept = env.write_keys(&ns, name, 100).await;
    // A client writing, reading and watching through the snapshot, the loss and the recovery.
    let workload = Workload::start(env, &ns, name)
        .await
        .named("all members lost, EtcdRecovery{snapshot} in place");
    let taken = verified_snapshot(&s, name, "rs-nightly", &endpoint, &minio.bucket).await;
    // Writes after the snapshot: lost by the rollback.
    put(env, &ns, name, "late/", 50).await;
    let before = before(env, &ns, name, kept).await;

    workload.fault_started();
    lose_all(env, &ns, name).await;
    create_recovery(&s, "rs-restore", name, from_snapshot("rs-nightly"), false).await;
    // The plan is recorded before anything is touched, then the operator dies once the restore
    // step is recorded and a new one finishes the job.
    let plan = plan_at_restore(&s, "rs-restore", RECOVER).await;
    assert_eq!(plan.snapshot.as_deref(), Some("rs-nightly"), "{plan:?}");
    assert_eq!(plan.revision, Some(taken.recorded), "{plan:?}");
    assert!(
        plan.bump_revision.is_some_and(|b| b >= 1_000_000_000),
        "{plan:?}"
    );
    assert!(
        plan.lost
            .as_deref()
            .is_some_and(|l| l.contains("every write after it is lost")),
        "{plan:?}"
    );
    s.crash_and_restart().await;
    let done = wait_recovery(&s, "rs-restore", "phase Complete", RECOVER, |r| {
        phase(r) == Some(RecoveryPhase::Complete)
    })
    .await;
    workload.fault_ended();
    assert_restored(env, &ns, name, &done, &before, BOOT).await;

    // The workload: writes acknowledged by the restored cluster, then its whole history judged
    // as a rollback to the snapshot.
    let restored_at = taken.recorded + plan.bump_revision.unwrap_or_default();
    let rollback = Rollback {
        snapshot_revision: taken.recorded,
        taken_by: taken.complete_by,
        restored_at,
    };
    finish_rolled_back(
        workload,
        &ns,
        name,
        rollback,
        before.max,
        WRITES_AFTER,
        BOOT,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_annotated_for_auto_recovery_from_a_snapshot_is_restored_without_a_human() {
    let s = scope("snaprec-auto").await;
    let env = s.env;
    let ns = s.ns.clone();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    let name = "ra";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    annotate_auto_snapshot(env, &ns, name).await;
    let kept = env.write_keys(&ns, name, 100).await;
    verified_snapshot(&s, name, "ra-older", &endpoint, &minio.bucket).await;
    // Kept only if the newest verified snapshot is the one restored.
    put(env, &ns, name, "between/", 20).await;
    verified_snapshot(&s, name, "ra-newest", &endpoint, &minio.bucket).await;
    // Newer, Complete, but not verified: never restored automatically.
    unverified_snapshot(&s, name, "ra-unverified", &endpoint, &minio.bucket).await;
    put(env, &ns, name, "late/", 50).await;
    let before = before(env, &ns, name, kept).await;

    lose_all(env, &ns, name).await;
    let lost = std::time::Instant::now();
    let lost_at = k8s_openapi::jiff::Timestamp::now();
    // The cluster says every member is gone, naming both recoveries a human could apply.
    let message = env
        .wait_unavailable(
            &ns,
            name,
            reason::ALL_MEMBERS_LOST,
            "EtcdRecovery",
            AUTO_START,
        )
        .await;
    assert!(
        message.contains("survivor") && message.contains("snapshot"),
        "{message}"
    );
    // No human acts: the operator creates the recovery itself, once.
    let what = format!(
        "{ns}: an EtcdRecovery {name}-auto-* created by the operator and Complete (operator          logs: {})",
        s.logs()
    );
    let done = eventually_every(
        &what,
        AUTO_START + RECOVER,
        Duration::from_millis(500),
        || async {
            let all = recoveries(&s)
                .list(&Default::default())
                .await
                .or_panic()
                .items;
            assert!(
                all.iter()
                    .all(|r| r.name_any().starts_with(&format!("{name}-auto-"))),
                "a recovery not created by the operator: {:?}",
                all.iter().map(|r| r.name_any()).collect::<Vec<_>>()
            );
            match all.as_slice() {
                [one] if phase(one) == Some(RecoveryPhase::Complete) => Ok(one.clone()),
                [_, _, ..] => panic!("more than one automatic recovery: {all:?}"),
                _ => Err(format!(
                    "{:?}",
                    all.iter()
                        .map(|r| (
                            r.name_any(),
                            phase(r),
                            r.status.as_ref().and_then(|s| s.step)
                        ))
                        .collect::<Vec<_>>()
                )),
            }
        },
    )
    .await;
    let created_after = done
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second() - lost_at.as_second());
    println!(
        "{}: created {created_after:?} s after the loss, Complete after {:.0} s",
        done.name_any(),
        lost.elapsed().as_secs_f64()
    );
    // From the newest Complete, Verified snapshot of the cluster.
    let source = &done.spec.source;
    assert!(source.survivor.is_none(), "{source:?}");
    assert_eq!(
        source.snapshot.as_ref().and_then(|r| r.name.as_deref()),
        Some("ra-newest"),
        "{source:?}"
    );
    assert_eq!(plan_of(&done).snapshot.as_deref(), Some("ra-newest"));
    assert_restored(env, &ns, name, &done, &before, BOOT).await;
    assert_eq!(count(env, &ns, name, "between/").await, 20);
    // Reported on the cluster: which recovery, from which snapshot.
    let created: Vec<String> = env
        .events(&ns, name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RecoveryCreated"))
        .filter_map(|e| e.message)
        .collect();
    assert!(
        created
            .iter()
            .any(|m| m.contains(&done.name_any()) && m.contains("EtcdSnapshot ra-newest")),
        "RecoveryCreated Events: {created:?}"
    );
    assert_eq!(
        recoveries(&s)
            .list(&Default::default())
            .await
            .or_panic()
            .items
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_recovery_of_a_healthy_cluster_without_confirmation_changes_nothing() {
    let s = scope("snaprec-healthy").await;
    let env = s.env;
    let ns = s.ns.clone();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    env.create_cluster(&ns, "rh", spec(3)).await;
    env.wait_healthy(&ns, "rh", 3, BOOT).await;
    verified_snapshot(&s, "rh", "rh-nightly", &endpoint, &minio.bucket).await;
    let pods_before: BTreeSet<String> = env
        .pods(&ns, "rh")
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    create_recovery(&s, "rh-restore", "rh", from_snapshot("rh-nightly"), false).await;
    let failed = wait_recovery(&s, "rh-restore", "phase Failed", BOOT, |r| {
        phase(r) == Some(RecoveryPhase::Failed)
    })
    .await;
    let ready = ready_condition(&failed);
    assert_eq!(ready.reason, reason::HEALTHY_CLUSTER_NOT_CONFIRMED);
    assert!(
        ready.message.contains("confirmHealthyClusterRollback")
            && ready.message.contains("rh-nightly"),
        "{}",
        ready.message
    );
    assert!(failed.status.and_then(|s| s.plan).is_none());
    let c = env.wait_healthy(&ns, "rh", 3, BOOT).await;
    assert!(!c.annotations().contains_key(RECOVERY_ANNOTATION));
    assert!(env.members(&ns, "rh").await.iter().all(|m| !m.spec.dormant
        && !m
            .annotations()
            .contains_key(api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION)));
    let pods_after: BTreeSet<String> = env
        .pods(&ns, "rh")
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    assert_eq!(pods_before, pods_after);
}

/// Every EtcdRecovery of the test's namespace, by name.
async fn recovery_names(s: &Scope) -> Vec<String> {
    recoveries(s)
        .list(&Default::default())
        .await
        .or_panic()
        .items
        .iter()
        .map(|r| r.name_any())
        .collect()
}

/// A cluster annotated `auto-recovery: snapshot`, with a verified snapshot to restore, paused for
/// 90 s and resumed with a writer running: the woken Pods take a moment to start, which is no
/// loss. No EtcdRecovery is created (before the fix the first reconcile after the resume said
/// `AllMembersLost` with the pause's timestamp and restored the snapshot over live data), no
/// acknowledged write is lost, and the cluster is Available again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_annotated_for_auto_recovery_resumed_after_a_long_pause_is_not_rolled_back() {
    let s = scope("snaprec-pause").await;
    let env = s.env;
    let ns = s.ns.clone();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    let name = "rp";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    annotate_auto_snapshot(env, &ns, name).await;
    env.write_keys(&ns, name, 20).await;
    verified_snapshot(&s, name, "rp-nightly", &endpoint, &minio.bucket).await;
    // Written after the snapshot: a rollback would lose them.
    put(env, &ns, name, "late/", 50).await;
    let workload = Workload::start(env, &ns, name)
        .await
        .named("auto-recovery=snapshot, paused 90 s and resumed");
    tokio::time::sleep(Duration::from_secs(3)).await;

    workload.fault_started();
    env.scale(&ns, name, 0).await;
    env.wait_unavailable(&ns, name, reason::PAUSED, "paused", BOOT)
        .await;
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert_eq!(recovery_names(&s).await, Vec::<String>::new());
    env.scale(&ns, name, 3).await;
    // Watched through the resume and for the automatic recovery's whole grace after it: no
    // recovery, ever.
    let resumed = std::time::Instant::now();
    let mut healthy_at = None;
    while resumed.elapsed() < Duration::from_secs(150) {
        let names = recovery_names(&s).await;
        assert!(
            names.is_empty(),
            "EtcdRecovery created for a cluster that was only resumed: {names:?} (operator logs: {})",
            s.logs()
        );
        let c = env.cluster(&ns, name).await;
        if healthy_at.is_none() && tests::e2e::healthy(&c, 3) {
            healthy_at = Some(resumed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        healthy_at.is_some(),
        "not healthy 150 s after the resume (operator logs: {})",
        s.logs()
    );
    workload.fault_ended();
    env.wait_healthy(&ns, name, 3, BOOT).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let report = workload.finish().await;
    assert!(report.acknowledged > 0, "{report:?}");
    assert!(
        report.acknowledged > report.acknowledged_during,
        "no write acknowledged after the resume: {report:?}"
    );
    assert_eq!(count(env, &ns, name, "late/").await, 50);
    assert!(env
        .events(&ns, name)
        .await
        .iter()
        .all(|e| e.reason.as_deref() != Some("RecoveryCreated")));
}

/// Two EtcdRecoveries of the same name, one after the other, from two snapshots: each restores
/// its own snapshot (before the fix the second found the first's `restored` marker in a
/// directory named after the recovery, and completed without restoring anything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_recoveries_of_the_same_name_each_restore_their_own_snapshot() {
    let s = scope("snaprec-twice").await;
    let env = s.env;
    let ns = s.ns.clone();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    let name = "rt";
    env.create_cluster(&ns, name, spec(1)).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;
    put(env, &ns, name, "one/", 20).await;
    verified_snapshot(&s, name, "rt-one", &endpoint, &minio.bucket).await;
    put(env, &ns, name, "two/", 20).await;
    verified_snapshot(&s, name, "rt-two", &endpoint, &minio.bucket).await;
    put(env, &ns, name, "three/", 20).await;

    // The name the condition messages suggest, twice.
    let recovery = format!("{name}-restore");
    for (snapshot, two) in [("rt-one", 0), ("rt-two", 20)] {
        create_recovery(&s, &recovery, name, from_snapshot(snapshot), true).await;
        let done = wait_recovery(&s, &recovery, "phase Complete", RECOVER, |r| {
            phase(r) == Some(RecoveryPhase::Complete)
        })
        .await;
        assert_eq!(plan_of(&done).snapshot.as_deref(), Some(snapshot));
        env.wait_healthy(&ns, name, 1, BOOT).await;
        assert_eq!(count(env, &ns, name, "one/").await, 20, "after {snapshot}");
        assert_eq!(count(env, &ns, name, "two/").await, two, "after {snapshot}");
        assert_eq!(count(env, &ns, name, "three/").await, 0, "after {snapshot}");
        recoveries(&s)
            .delete(&recovery, &Default::default())
            .await
            .or_panic();
        let what = format!("{ns}/{recovery} deleted");
        eventually_every(&what, BOOT, Duration::from_millis(500), || async {
            match recoveries(&s).get_opt(&recovery).await.or_panic() {
                None => Ok(()),
                Some(r) => Err(format!("{:?}", r.metadata.finalizers)),
            }
        })
        .await;
    }
}

/// docs/snapshots.md, "Which cluster a snapshot belongs to": the snapshot records the UID and
/// etcd cluster ID of the cluster it saved; once that cluster is deleted and created again under
/// the same name, an EtcdRecovery naming the old snapshot fails `SnapshotNotUsable` before
/// anything is changed, naming the snapshot, both UIDs and the way out (its location).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_a_deleted_cluster_of_the_same_name_is_not_restored_by_name() {
    let s = scope("snaprec-reborn").await;
    let env = s.env;
    let ns = s.ns.clone();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    let name = "rb";
    env.create_cluster(&ns, name, spec(1)).await;
    let first = env.wait_healthy(&ns, name, 1, BOOT).await;
    verified_snapshot(&s, name, "rb-old", &endpoint, &minio.bucket).await;
    let old = Api::<EtcdSnapshot>::namespaced(env.client(), &ns)
        .get("rb-old")
        .await
        .or_panic()
        .status
        .unwrap_or_default();
    let (old_uid, old_id) = (
        first.uid().unwrap_or_default(),
        first.status.clone().and_then(|st| st.cluster_id),
    );
    assert_eq!(old.cluster_uid.as_deref(), Some(old_uid.as_str()));
    assert_eq!(old.cluster_id, old_id);

    // Deleted and created again under the same name, as the docs say to change an immutable
    // field.
    env.cp
        .kubectl_ok(&["delete", "etcdcluster", name, "-n", &ns, "--wait=false"])
        .await
        .or_panic();
    eventually_every(
        &format!(
            "{name}: its members, PVCs and object gone; operator logs: {}",
            s.logs()
        ),
        BOOT,
        Duration::from_millis(500),
        || async {
            let (members, pvcs) = (env.members(&ns, name).await, env.pvcs(&ns, name).await);
            let cluster = env.clusters(&ns).get_opt(name).await.or_panic();
            if members.is_empty() && pvcs.is_empty() && cluster.is_none() {
                Ok(())
            } else {
                Err(format!(
                    "{} members, {} PVCs, cluster {}",
                    members.len(),
                    pvcs.len(),
                    if cluster.is_some() {
                        "still there"
                    } else {
                        "gone"
                    }
                ))
            }
        },
    )
    .await;
    env.create_cluster(&ns, name, spec(1)).await;
    let second = env.wait_healthy(&ns, name, 1, BOOT).await;
    let new_uid = second.uid().unwrap_or_default();
    assert_ne!(new_uid, old_uid);
    let pods_before: BTreeSet<String> = env
        .pods(&ns, name)
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();

    // Confirmed, so only the incarnation can stop it.
    create_recovery(&s, "rb-restore", name, from_snapshot("rb-old"), true).await;
    let failed = wait_recovery(&s, "rb-restore", "phase Failed", BOOT, |r| {
        phase(r) == Some(RecoveryPhase::Failed)
    })
    .await;
    let ready = ready_condition(&failed);
    assert_eq!(
        ready.reason,
        reason::SNAPSHOT_NOT_USABLE,
        "{}",
        ready.message
    );
    for part in [
        "EtcdSnapshot rb-old",
        old_uid.as_str(),
        new_uid.as_str(),
        "nothing was changed",
        "spec.source.snapshot.s3",
    ] {
        assert!(ready.message.contains(part), "{part}: {}", ready.message);
    }
    assert!(failed.status.and_then(|st| st.plan).is_none());
    let c = env.wait_healthy(&ns, name, 1, BOOT).await;
    assert!(!c.annotations().contains_key(RECOVERY_ANNOTATION));
    let pods_after: BTreeSet<String> = env
        .pods(&ns, name)
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    assert_eq!(pods_before, pods_after);
}
