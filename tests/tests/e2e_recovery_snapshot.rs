//! End to end, `EtcdRecovery` from a snapshot, in place: a 3-member cluster with keys, a
//! verified EtcdSnapshot in MinIO, more writes, then all three members lost with their PVCs. An
//! `EtcdRecovery{snapshot}` (with the operator SIGKILLed once the restore step is recorded)
//! rebuilds the same EtcdCluster from the snapshot: Available with 3 voters, the same client
//! Service, every key written before the snapshot readable and those after it gone, the revision
//! above the pre-failure maximum, and a watch resumed from an old revision told it was
//! compacted. A snapshot recovery of a healthy cluster without the confirmation changes nothing.
//!
//! Every test runs its own operator limited to its namespace; the control plane and the pod
//! runner are shared by the binary.

use std::collections::BTreeSet;
use std::time::Duration;

use api::conditions::reason;
use api::v1alpha2::{
    EtcdRecovery, EtcdSnapshot, LocalReference, RecoveryPhase, RecoverySource, RecoveryStep,
    S3Location, SecretReference, SnapshotDestination, RECOVERY_ANNOTATION,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use tests::backup::create_snapshot;
use tests::e2e::{spec, Env};
use tests::harness::eventually_every;
use tests::operator::{shared_env, Scope};
use tests::podrunner::PodRunner;
use tests::recovery::{create_recovery, ready_condition, wait_recovery};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(240);
const SNAPSHOT: Duration = Duration::from_secs(240);
const RECOVER: Duration = Duration::from_secs(420);

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
    }
}

/// A verified snapshot `name` of `cluster` in MinIO.
async fn verified_snapshot(s: &Scope, cluster: &str, name: &str, endpoint: &str, bucket: &str) {
    let dest = SnapshotDestination {
        s3: Some(S3Location {
            endpoint: Some(endpoint.to_string()),
            bucket: bucket.to_string(),
            key: Some("rs/".into()),
            region: None,
            force_path_style: Some(true),
            credentials_secret_ref: Some(SecretReference::new("s3-creds")),
        }),
        pvc: None,
    };
    create_snapshot(s.env, &s.ns, name, cluster, dest).await;
    let api: Api<EtcdSnapshot> = Api::namespaced(s.env.client(), &s.ns);
    let what = format!("{}/{name}: Complete and Verified=True", s.ns);
    eventually_every(&what, SNAPSHOT, Duration::from_millis(500), || async {
        let s = api.get(name).await.or_panic();
        let status = s.status.clone().unwrap_or_default();
        match status.verified() {
            Some(true) => Ok(()),
            Some(false) => panic!("{name} failed verification: {status:?}"),
            None => Err(format!("{status:?}")),
        }
    })
    .await
}

fn phase(r: &EtcdRecovery) -> Option<RecoveryPhase> {
    r.status.as_ref().and_then(|s| s.phase)
}

/// The highest revision the cluster answers with now.
async fn revision(env: &Env, ns: &str, cluster: &str) -> i64 {
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
async fn lose_all(env: &Env, ns: &str, cluster: &str) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client(), ns);
    let pods: Api<Pod> = Api::namespaced(env.client(), ns);
    for victim in env.member_names(ns, cluster).await {
        let pvc = format!("data-{victim}");
        pvcs.delete(&pvc, &DeleteParams::default()).await.or_panic();
        pvcs.patch(
            &pvc,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .or_panic();
        pods.delete(&victim, &DeleteParams::default().grace_period(0))
            .await
            .or_panic();
    }
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
    verified_snapshot(&s, name, "rs-nightly", &endpoint, &minio.bucket).await;
    // Writes after the snapshot: lost by the rollback.
    let mut etcd = env.etcd_client(&ns, name).await;
    for i in 0..50 {
        etcd.put(format!("late/{i}"), "v", None).await.or_panic();
    }
    let before_max = revision(env, &ns, name).await;
    let services: Api<Service> = Api::namespaced(env.client(), &ns);
    let client_service = services
        .get(&format!("{name}-client"))
        .await
        .or_panic()
        .uid();

    lose_all(env, &ns, name).await;
    create_recovery(&s, "rs-restore", name, from_snapshot("rs-nightly"), false).await;
    // The plan is recorded before anything is touched, then the operator dies once the restore
    // step is recorded and a new one finishes the job.
    let running = wait_recovery(&s, "rs-restore", "step RestoreSnapshot", RECOVER, |r| {
        r.status
            .as_ref()
            .and_then(|st| st.step)
            .is_some_and(|st| st >= RecoveryStep::RestoreSnapshot)
    })
    .await;
    let plan = running
        .status
        .clone()
        .unwrap_or_default()
        .plan
        .unwrap_or_default();
    assert_eq!(plan.snapshot.as_deref(), Some("rs-nightly"), "{plan:?}");
    assert!(plan.revision.is_some_and(|r| r > 0), "{plan:?}");
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

    let c = env.wait_healthy(&ns, name, 3, BOOT).await;
    assert!(
        !c.annotations().contains_key(RECOVERY_ANNOTATION),
        "{:?}",
        c.annotations()
    );
    let voters = env.etcd_members(&ns, name).await;
    assert_eq!(voters.len(), 3, "{voters:?}");
    assert!(voters.iter().all(|(_, learner)| !learner), "{voters:?}");
    // The same client Service object.
    let now = services.get(&format!("{name}-client")).await.or_panic();
    assert_eq!(now.uid(), client_service);
    // Every key written before the snapshot; none written after it.
    env.check_keys(&ns, name, &kept).await;
    let mut etcd = env.etcd_client(&ns, name).await;
    let late = etcd
        .get(
            "late/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .or_panic();
    assert_eq!(late.count(), 0, "writes after the snapshot are rolled back");
    // The revision is above anything a client saw before the loss.
    let after = revision(env, &ns, name).await;
    assert!(after > before_max, "revision {after} <= {before_max}");
    // A watch resumed from an old revision is told it was compacted, not left silent.
    let mut stream = etcd
        .watch(
            "e2e/",
            Some(
                etcd_client::WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(before_max),
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
        compacted.compact_revision() > before_max,
        "compact revision {} for a watch from {before_max}: {compacted:?}",
        compacted.compact_revision()
    );
    // Events tell the story.
    let reasons: BTreeSet<String> = env
        .events(&ns, &done.name_any())
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for expected in ["RecoveryPlanned", "RecoveryStep", "RecoveryComplete"] {
        assert!(reasons.contains(expected), "{expected} in {reasons:?}");
    }
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
