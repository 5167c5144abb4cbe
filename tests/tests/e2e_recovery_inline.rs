//! End to end, `EtcdRecovery` from a snapshot given by its location (no EtcdSnapshot object),
//! in place.
//!
//! From an S3 object: a 3-member cluster with keys, an EtcdSnapshot stored in MinIO, more writes,
//! then the EtcdSnapshot object deleted (its stored object stays) and all three members lost with
//! their PVCs. An `EtcdRecovery{snapshot: {s3: …, sha256: …}}` rebuilds the same EtcdCluster from
//! the object: Available with 3 voters, the same client Service, every key written before the
//! snapshot readable and those after it gone, the revision above the pre-failure maximum. The
//! same recovery with a sha256 the object does not have restores nothing and says why.
//!
//! From a file on a claim: the same with the fault suite's workload running, an EtcdSnapshot
//! written to the claim `backups`, deleted, and its file moved to a path no EtcdSnapshot named,
//! without its sidecars; `EtcdRecovery{snapshot: {pvc: {claimName, subPath}, sha256}}` restores
//! from it, and the workload's history is judged as a rollback to the snapshot. A `subPath`
//! naming no file on the claim restores nothing: the recovery waits at `RestoreSnapshot` with
//! the restore's own words, the cluster held.
//!
//! Every test runs its own operator limited to its namespace; the control plane and the pod
//! runner are shared by the binary.

use std::time::Duration;

use api::v1alpha2::{
    EtcdSnapshot, EtcdSnapshotSpec, LocalReference, PvcLocation, RecoveryPhase,
    RecoverySnapshotSource, RecoverySource, RecoveryStep, S3Location, SecretReference,
    SnapshotArtifact, SnapshotDestination, SnapshotPhase, RECOVERY_ANNOTATION,
};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use tokio::sync::OnceCell;

use tests::backup::create_backups_claim;
use tests::e2e::{spec, Env};
use tests::env::minio::Minio;
use tests::harness::eventually_every;
use tests::operator::{shared_env, Scope};
use tests::podrunner::PodRunner;
use tests::recovery::{
    assert_restored, before, create_recovery, finish_rolled_back, lose_all, phase, plan_at_restore,
    ready_condition, revision, wait_recovery,
};
use tests::workload::{Rollback, Workload};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(240);
const SNAPSHOT: Duration = Duration::from_secs(240);
const RECOVER: Duration = Duration::from_secs(420);
/// Writes the workload must have acknowledged after the recovery completed.
const WRITES_AFTER: i64 = 100;

async fn lab() -> &'static Env {
    static LAB: OnceCell<Env> = OnceCell::const_new();
    LAB.get_or_init(|| shared_env(PodRunner::builder(), "inlrec-idle"))
        .await
}

/// One test's namespace and its operator, with the operator image its snapshot and restore
/// containers run the agent from (a restart keeps it).
async fn scope(prefix: &str) -> Scope {
    let image = format!("--operator-image={}", tests::e2e::OPERATOR_IMAGE);
    Scope::new(lab().await, prefix, &[image.as_str()]).await
}

fn s3_location(endpoint: &str, bucket: &str, key: &str) -> S3Location {
    S3Location {
        endpoint: Some(endpoint.to_string()),
        bucket: bucket.to_string(),
        key: Some(key.to_string()),
        region: None,
        force_path_style: Some(true),
        credentials_secret_ref: Some(SecretReference::new("s3-creds")),
        ..Default::default()
    }
}

/// Where an EtcdSnapshot cut the cluster's history, and what it stored.
struct Taken {
    artifact: SnapshotArtifact,
    /// The revision the agent recorded (its hashKV's, just before the save streamed): the
    /// snapshot holds every write up to it. None when the agent could not record it.
    recorded: Option<i64>,
    /// The cluster's revision once the snapshot read Complete: it holds nothing above it.
    complete_by: i64,
}

/// Take EtcdSnapshot `name` of `cluster` to `destination` (unverified: only its stored copy and
/// checksum matter here), wait for it to be Complete, then delete the EtcdSnapshot object; what
/// it stored stays (a hand-made EtcdSnapshot has no prune). Returns what it recorded.
async fn taken_then_forgotten(
    s: &Scope,
    cluster: &str,
    name: &str,
    destination: SnapshotDestination,
) -> Taken {
    let api: Api<EtcdSnapshot> = Api::namespaced(s.env.client(), &s.ns);
    let snapshot = EtcdSnapshot::new(
        name,
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: cluster.to_string(),
            },
            destination,
            verify: Some(false),
        },
    );
    api.create(&PostParams::default(), &snapshot)
        .await
        .or_panic();
    let what = format!("{}/{name}: Complete with an artifact", s.ns);
    let status = eventually_every(&what, SNAPSHOT, Duration::from_millis(500), || async {
        let status = api.get(name).await.or_panic().status.unwrap_or_default();
        match status.phase {
            Some(SnapshotPhase::Complete) if status.artifact.is_some() => Ok(status),
            Some(SnapshotPhase::Failed) => panic!("{name} failed: {status:?}"),
            _ => Err(format!("{status:?}")),
        }
    })
    .await;
    let complete_by = revision(s.env, &s.ns, cluster).await;
    api.delete(name, &DeleteParams::default()).await.or_panic();
    let what = format!("{}/{name}: deleted", s.ns);
    eventually_every(&what, SNAPSHOT, Duration::from_millis(200), || async {
        match api.get_opt(name).await.or_panic() {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    Taken {
        recorded: status.hash_kv.as_ref().map(|h| h.revision),
        artifact: status.artifact.unwrap_or_default(),
        complete_by,
    }
}

/// [`taken_then_forgotten`] into MinIO; the stored object is checked to outlive its
/// EtcdSnapshot. Returns the artifact it recorded.
async fn stored_then_forgotten(
    s: &Scope,
    cluster: &str,
    name: &str,
    endpoint: &str,
    minio: &Minio,
) -> SnapshotArtifact {
    let destination = SnapshotDestination {
        s3: Some(s3_location(endpoint, &minio.bucket, "inline/")),
        pvc: None,
    };
    let artifact = taken_then_forgotten(s, cluster, name, destination)
        .await
        .artifact;
    // Only the stored object is left: the inline source is the one way back.
    let (size, _, _) = minio.object(&key_of(&artifact, &minio.bucket)).await;
    assert_eq!(
        size, artifact.size_bytes,
        "the stored object outlives its EtcdSnapshot"
    );
    artifact
}

/// The object key of an `s3://<bucket>/<key>` artifact.
fn key_of(artifact: &SnapshotArtifact, bucket: &str) -> String {
    artifact
        .uri
        .strip_prefix(&format!("s3://{bucket}/"))
        .unwrap_or_else(|| panic!("{} is not in bucket {bucket}", artifact.uri))
        .to_string()
}

/// From the S3 object `key`, checked against `sha256`.
fn from_object(endpoint: &str, bucket: &str, key: &str, sha256: &str) -> RecoverySource {
    RecoverySource {
        survivor: None,
        snapshot: Some(RecoverySnapshotSource {
            s3: Some(s3_location(endpoint, bucket, key)),
            sha256: Some(sha256.to_string()),
            ..Default::default()
        }),
        point_in_time: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_s3_recovery_rebuilds_a_lost_cluster_whose_etcdsnapshot_is_gone() {
    let s = scope("inlrec").await;
    let env = s.env;
    let ns = s.ns.clone();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    let name = "ri";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let kept = env.write_keys(&ns, name, 100).await;
    let artifact = stored_then_forgotten(&s, name, "ri-nightly", &endpoint, &minio).await;
    // Writes after the snapshot: lost by the rollback.
    let mut etcd = env.etcd_client(&ns, name).await;
    for i in 0..50 {
        etcd.put(format!("late/{i}"), "v", None).await.or_panic();
    }
    let before = before(env, &ns, name, kept).await;

    lose_all(env, &ns, name).await;
    let key = key_of(&artifact, &minio.bucket);
    let source = from_object(&endpoint, &minio.bucket, &key, &artifact.checksum);
    create_recovery(&s, "ri-restore", name, source, false).await;
    let plan = plan_at_restore(&s, "ri-restore", RECOVER).await;
    // The plan names the object, not an EtcdSnapshot; the snapshot's revision is unknown until
    // it is read, so the bump alone lifts the restored revisions past everything before.
    assert_eq!(plan.snapshot, None, "{plan:?}");
    assert_eq!(plan.snapshot_uri.as_deref(), Some(artifact.uri.as_str()));
    assert_eq!(plan.revision, None, "{plan:?}");
    assert!(
        plan.bump_revision.is_some_and(|b| b >= 1_000_000_000),
        "{plan:?}"
    );
    assert!(
        plan.lost
            .as_deref()
            .is_some_and(|l| l.contains(&artifact.uri) && l.contains("every write after it")),
        "{plan:?}"
    );
    let done = wait_recovery(
        &s,
        "ri-restore",
        "phase Complete",
        RECOVER,
        |r| match phase(r) {
            Some(RecoveryPhase::Failed) => panic!("the recovery failed: {:?}", r.status),
            p => p == Some(RecoveryPhase::Complete),
        },
    )
    .await;

    // 3 voters, released, the same client Service object, the keys from before the snapshot and
    // none after it, the revision above the pre-failure maximum, a watch from it told of the
    // compaction, the recovery's Events.
    assert_restored(env, &ns, name, &done, &before, BOOT).await;
    // No member keeps the restore mark or the checksum annotation.
    for m in env.members(&ns, name).await {
        for annotation in [
            api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION,
            api::v1alpha2::RESTORE_SHA256_ANNOTATION,
        ] {
            assert!(
                !m.annotations().contains_key(annotation),
                "{}: {annotation}",
                m.name_any()
            );
        }
        assert!(m.spec.restore.is_none(), "{}", m.name_any());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_recovery_with_a_sha256_the_object_does_not_have_restores_nothing() {
    let s = scope("inlrec-sha").await;
    let env = s.env;
    let ns = s.ns.clone();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    let name = "rw";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let artifact = stored_then_forgotten(&s, name, "rw-nightly", &endpoint, &minio).await;
    lose_all(env, &ns, name).await;
    let key = key_of(&artifact, &minio.bucket);
    // Another object's checksum: the restore must refuse this one.
    let wrong = format!("sha256:{}", "0".repeat(64));
    assert_ne!(wrong, artifact.checksum);
    let source = from_object(&endpoint, &minio.bucket, &key, &wrong);
    create_recovery(&s, "rw-restore", name, source, false).await;
    let stuck = wait_recovery(
        &s,
        "rw-restore",
        "waiting at RestoreSnapshot, naming the checksum mismatch",
        RECOVER,
        |r| {
            let at_restore =
                r.status.as_ref().and_then(|st| st.step) == Some(RecoveryStep::RestoreSnapshot);
            at_restore
                && r.status
                    .iter()
                    .flat_map(|st| st.conditions.iter())
                    .any(|c| c.type_ == "Ready" && c.message.contains("sha256"))
        },
    )
    .await;
    let ready = ready_condition(&stuck);
    assert!(
        ready.message.contains("restore") && ready.message.contains(&"0".repeat(64)),
        "{}",
        ready.message
    );
    assert_eq!(phase(&stuck), Some(RecoveryPhase::Running));
    // Nothing was restored: no member runs etcd, the cluster stays held.
    let c = env.clusters(&ns).get(name).await.or_panic();
    assert_eq!(
        c.annotations().get(RECOVERY_ANNOTATION).map(String::as_str),
        Some("rw-restore")
    );
    assert!(
        env.pods(&ns, name).await.iter().all(|p| !p
            .status
            .as_ref()
            .and_then(|st| st.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.ready))),
        "no member Pod is ready"
    );
}

/// The directory `etcd` on the claim `backups`.
fn backups_dest() -> SnapshotDestination {
    SnapshotDestination {
        s3: None,
        pvc: Some(PvcLocation {
            claim_name: "backups".into(),
            sub_path: Some("etcd".into()),
        }),
    }
}

/// From the file `path` on claim `claim`, checked against `sha256`.
fn from_file(claim: &str, path: &str, sha256: &str) -> RecoverySource {
    RecoverySource {
        survivor: None,
        snapshot: Some(RecoverySnapshotSource {
            pvc: Some(PvcLocation {
                claim_name: claim.to_string(),
                sub_path: Some(path.to_string()),
            }),
            sha256: Some(sha256.to_string()),
            ..Default::default()
        }),
        point_in_time: None,
    }
}

fn sha256_of(bytes: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_pvc_recovery_rebuilds_a_lost_cluster_from_a_snapshot_file_on_a_claim() {
    let s = scope("inlpvc").await;
    let env = s.env;
    let ns = s.ns.clone();
    create_backups_claim(env, &ns).await;
    let name = "rf";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let kept = env.write_keys(&ns, name, 100).await;
    // A client writing, reading and watching through the snapshot, the loss and the recovery.
    let workload = Workload::start(env, &ns, name)
        .await
        .named("all members lost, EtcdRecovery{snapshot: {pvc}} in place");
    let taken = taken_then_forgotten(&s, name, "rf-nightly", backups_dest()).await;
    assert_eq!(taken.artifact.uri, "pvc://backups/etcd/rf-nightly.db");
    let recorded = taken
        .recorded
        .unwrap_or_else(|| panic!("rf-nightly: Complete without a recorded hashKV revision"));
    // The file outlives its EtcdSnapshot. It is moved where no EtcdSnapshot ever wrote and its
    // sidecars removed, as a copy put there by hand would be: the recovery can only read it by
    // the claim and path it is given, and check it only against the sha256 it is given.
    let dir = env.runner.claim_dir(&ns, "backups").await.or_panic();
    let written = dir.join("etcd/rf-nightly.db");
    let bytes = std::fs::read(&written).or_panic();
    assert_eq!(bytes.len() as i64, taken.artifact.size_bytes);
    assert_eq!(sha256_of(&bytes), taken.artifact.checksum);
    std::fs::create_dir_all(dir.join("by-hand")).or_panic();
    let copy = dir.join("by-hand/rf.db");
    std::fs::rename(&written, &copy).or_panic();
    for sidecar in ["etcd/rf-nightly.db.sha256", "etcd/rf-nightly.db.uid"] {
        std::fs::remove_file(dir.join(sidecar)).or_panic();
    }
    // Writes after the snapshot: lost by the rollback.
    let mut etcd = env.etcd_client(&ns, name).await;
    for i in 0..50 {
        etcd.put(format!("late/{i}"), "v", None).await.or_panic();
    }
    let before = before(env, &ns, name, kept).await;

    workload.fault_started();
    lose_all(env, &ns, name).await;
    let source = from_file("backups", "by-hand/rf.db", &taken.artifact.checksum);
    create_recovery(&s, "rf-restore", name, source, false).await;
    let plan = plan_at_restore(&s, "rf-restore", RECOVER).await;
    // The plan names the file on the claim; its revision is unknown until it is read.
    assert_eq!(plan.snapshot, None, "{plan:?}");
    assert_eq!(
        plan.snapshot_uri.as_deref(),
        Some("pvc://backups/by-hand/rf.db")
    );
    assert_eq!(plan.revision, None, "{plan:?}");
    let bump = plan.bump_revision.unwrap_or_default();
    assert!(bump >= 1_000_000_000, "{plan:?}");
    assert!(
        plan.lost.as_deref().is_some_and(
            |l| l.contains("pvc://backups/by-hand/rf.db") && l.contains("every write after it")
        ),
        "{plan:?}"
    );
    let done = wait_recovery(
        &s,
        "rf-restore",
        "phase Complete",
        RECOVER,
        |r| match phase(r) {
            Some(RecoveryPhase::Failed) => panic!("the recovery failed: {:?}", r.status),
            p => p == Some(RecoveryPhase::Complete),
        },
    )
    .await;
    workload.fault_ended();

    // The same cluster, in place.
    // 3 voters, released, the same client Service object, the keys from before the snapshot and
    // none after it, the revision above the pre-failure maximum, a watch from it told of the
    // compaction, the recovery's Events.
    assert_restored(env, &ns, name, &done, &before, BOOT).await;
    // The source is read, never consumed: the file is still on the claim, unchanged.
    assert_eq!(std::fs::read(&copy).or_panic(), bytes, "the snapshot file");
    // No member keeps the restore mark or the checksum annotation.
    for m in env.members(&ns, name).await {
        for annotation in [
            api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION,
            api::v1alpha2::RESTORE_SHA256_ANNOTATION,
        ] {
            assert!(
                !m.annotations().contains_key(annotation),
                "{}: {annotation}",
                m.name_any()
            );
        }
        assert!(m.spec.restore.is_none(), "{}", m.name_any());
    }

    // The workload: writes acknowledged by the restored cluster, then its whole history judged
    // as a rollback to the snapshot. The snapshot holds at least `recorded`, so the restored
    // revisions start at `recorded + bump` or above.
    let restored_at = recorded + bump;
    let rollback = Rollback {
        snapshot_revision: recorded,
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
async fn inline_pvc_recovery_from_a_path_with_no_file_restores_nothing_and_names_the_path() {
    let s = scope("inlpvc-miss").await;
    let env = s.env;
    let ns = s.ns.clone();
    create_backups_claim(env, &ns).await;
    let name = "rm";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    lose_all(env, &ns, name).await;
    // The claim exists (the plan accepts it) but holds no such file: a typo in subPath.
    let sha = format!("sha256:{}", "0".repeat(64));
    let source = from_file("backups", "etcd/no-such.db", &sha);
    create_recovery(&s, "rm-restore", name, source, false).await;
    let stuck = wait_recovery(
        &s,
        "rm-restore",
        "waiting at RestoreSnapshot, naming the missing file",
        RECOVER,
        |r| {
            let at_restore =
                r.status.as_ref().and_then(|st| st.step) == Some(RecoveryStep::RestoreSnapshot);
            at_restore
                && r.status
                    .iter()
                    .flat_map(|st| st.conditions.iter())
                    .any(|c| {
                        c.type_ == "Ready"
                            && c.message.contains("the restore into")
                            && c.message.contains("etcd/no-such.db")
                    })
        },
    )
    .await;
    // The restore's own words: the file it looked for and why it is not there.
    let ready = ready_condition(&stuck);
    assert!(ready.message.contains("No such file"), "{}", ready.message);
    assert_eq!(phase(&stuck), Some(RecoveryPhase::Running));
    // Nothing was restored: the cluster stays held and no member runs etcd.
    let c = env.clusters(&ns).get(name).await.or_panic();
    assert_eq!(
        c.annotations().get(RECOVERY_ANNOTATION).map(String::as_str),
        Some("rm-restore")
    );
    assert!(
        env.pods(&ns, name).await.iter().all(|p| !p
            .status
            .as_ref()
            .and_then(|st| st.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.ready))),
        "no member Pod is ready"
    );
}
