//! End to end, `EtcdRecovery` from a snapshot given by its S3 object (no EtcdSnapshot object),
//! in place: a 3-member cluster with keys, an EtcdSnapshot stored in MinIO, more writes, then
//! the EtcdSnapshot object deleted (its stored object stays) and all three members lost with
//! their PVCs. An `EtcdRecovery{snapshot: {s3: …, sha256: …}}` rebuilds the same EtcdCluster from
//! the object: Available with 3 voters, the same client Service, every key written before the
//! snapshot readable and those after it gone, the revision above the pre-failure maximum. The
//! same recovery with a sha256 the object does not have restores nothing and says why.
//!
//! Every test runs its own operator limited to its namespace; the control plane and the pod
//! runner are shared by the binary.

use std::collections::BTreeSet;
use std::time::Duration;

use api::v1alpha2::{
    EtcdSnapshot, EtcdSnapshotSpec, LocalReference, RecoveryPhase, RecoverySnapshotSource,
    RecoverySource, RecoveryStep, S3Location, SecretReference, SnapshotArtifact,
    SnapshotDestination, SnapshotPhase, RECOVERY_ANNOTATION,
};
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use tokio::sync::OnceCell;

use tests::e2e::{spec, Env};
use tests::env::minio::Minio;
use tests::harness::eventually_every;
use tests::operator::{shared_env, Scope};
use tests::podrunner::PodRunner;
use tests::recovery::{create_recovery, lose_all, phase, ready_condition, revision, wait_recovery};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(240);
const SNAPSHOT: Duration = Duration::from_secs(240);
const RECOVER: Duration = Duration::from_secs(420);

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
    }
}

/// Take EtcdSnapshot `name` of `cluster` into MinIO (unverified: only its stored object and
/// checksum matter here), wait for it to be Complete, then delete the EtcdSnapshot object; the
/// stored object stays. Returns the artifact it recorded.
async fn stored_then_forgotten(
    s: &Scope,
    cluster: &str,
    name: &str,
    endpoint: &str,
    minio: &Minio,
) -> SnapshotArtifact {
    let api: Api<EtcdSnapshot> = Api::namespaced(s.env.client(), &s.ns);
    let snapshot = EtcdSnapshot::new(
        name,
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: cluster.to_string(),
            },
            destination: SnapshotDestination {
                s3: Some(s3_location(endpoint, &minio.bucket, "inline/")),
                pvc: None,
            },
            verify: Some(false),
        },
    );
    api.create(&PostParams::default(), &snapshot)
        .await
        .or_panic();
    let what = format!("{}/{name}: Complete with an artifact", s.ns);
    let artifact = eventually_every(&what, SNAPSHOT, Duration::from_millis(500), || async {
        let status = api.get(name).await.or_panic().status.unwrap_or_default();
        match (status.phase, &status.artifact) {
            (Some(SnapshotPhase::Complete), Some(a)) => Ok(a.clone()),
            (Some(SnapshotPhase::Failed), _) => panic!("{name} failed: {status:?}"),
            _ => Err(format!("{status:?}")),
        }
    })
    .await;
    api.delete(name, &DeleteParams::default()).await.or_panic();
    let what = format!("{}/{name}: deleted", s.ns);
    eventually_every(&what, SNAPSHOT, Duration::from_millis(200), || async {
        match api.get_opt(name).await.or_panic() {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
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
    let before_max = revision(env, &ns, name).await;
    let services: Api<Service> = Api::namespaced(env.client(), &ns);
    let client_service = services
        .get(&format!("{name}-client"))
        .await
        .or_panic()
        .uid();

    lose_all(env, &ns, name).await;
    let key = key_of(&artifact, &minio.bucket);
    let source = from_object(&endpoint, &minio.bucket, &key, &artifact.checksum);
    create_recovery(&s, "ri-restore", name, source, false).await;
    let running = wait_recovery(&s, "ri-restore", "step RestoreSnapshot", RECOVER, |r| {
        r.status
            .as_ref()
            .and_then(|st| st.step)
            .is_some_and(|st| st >= RecoveryStep::RestoreSnapshot)
    })
    .await;
    // The plan names the object, not an EtcdSnapshot; the snapshot's revision is unknown until
    // it is read, so the bump alone lifts the restored revisions past everything before.
    let plan = running
        .status
        .clone()
        .unwrap_or_default()
        .plan
        .unwrap_or_default();
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

    let c = env.wait_healthy(&ns, name, 3, BOOT).await;
    assert!(
        !c.annotations().contains_key(RECOVERY_ANNOTATION),
        "{:?}",
        c.annotations()
    );
    let voters = env.etcd_members(&ns, name).await;
    assert_eq!(voters.len(), 3, "{voters:?}");
    assert!(voters.iter().all(|(_, learner)| !learner), "{voters:?}");
    let now = services.get(&format!("{name}-client")).await.or_panic();
    assert_eq!(now.uid(), client_service, "the same client Service object");
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
    let after = revision(env, &ns, name).await;
    assert!(after > before_max, "revision {after} <= {before_max}");
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
