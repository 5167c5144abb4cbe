//! End to end: verified snapshots (docs/snapshots.md, "Verification"). A Complete EtcdSnapshot
//! gets a verification Job (the operator binary run in the cluster's own etcd image by the pod
//! runner) that reads the stored object back from MinIO or the PVC, checks its sha256, restores
//! it with the cluster's etcdutl and compares its hashkv with the one the save recorded: a good
//! snapshot reads `Verified=True` with the revision; one byte flipped in the stored object
//! (rewritten through the S3 API) reads `Verified=False/ChecksumMismatch` naming both sums; a
//! recorded hashkv that the data does not match reads `Verified=False/HashKVMismatch`; one with no
//! recorded hashkv reads `Verified=True/HashKVNotCompared`, saying it was not compared; a 3.5
//! cluster (whose etcdutl has no `hashkv`) is verified by running its own etcd on the copy.
//!
//! To change the stored object (or the record) after the save and before the verification,
//! a suspended Job of the verification Job's name is created first: the operator never uses a
//! Job it does not own, so the verification waits until the test deletes it.

use std::time::Duration;

use api::v1alpha2::{
    EtcdSnapshot, PvcLocation, S3Location, SecretReference, SnapshotDestination, SnapshotPhase,
};
use aws_sdk_s3::primitives::ByteStream;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;
use tests::backup::{create_backups_claim, create_snapshot};
use tests::e2e::{env, spec, Env};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(240);
const RUN: Duration = Duration::from_secs(240);

fn sha256_hex(bytes: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn s3_dest(endpoint: &str, bucket: &str) -> SnapshotDestination {
    SnapshotDestination {
        s3: Some(S3Location {
            endpoint: Some(endpoint.to_string()),
            bucket: bucket.to_string(),
            key: Some("vc/".into()),
            region: None,
            force_path_style: Some(true),
            credentials_secret_ref: Some(SecretReference::new("s3-creds")),
            ..Default::default()
        }),
        pvc: None,
    }
}

/// `(status, reason, message)` of the snapshot's `Verified` condition.
fn verified(s: &EtcdSnapshot) -> Option<(String, String, String)> {
    s.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Verified")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The snapshot once its `Verified` condition is True or False.
async fn decided(env: &Env, ns: &str, name: &str) -> EtcdSnapshot {
    let api = Api::<EtcdSnapshot>::namespaced(env.client(), ns);
    tests::harness::eventually(&format!("{name}: Verified decided"), RUN, || async {
        let s = api.get(name).await.map_err(|e| e.to_string())?;
        match verified(&s) {
            Some((st, _, _)) if st == "True" || st == "False" => Ok(s),
            other => Err(format!(
                "phase {:?}, Verified {other:?}",
                s.status.as_ref().and_then(|s| s.phase)
            )),
        }
    })
    .await
}

/// The snapshot once Complete and waiting for its verification (`Verified=Unknown`).
async fn complete_and_waiting(env: &Env, ns: &str, name: &str) -> EtcdSnapshot {
    let api = Api::<EtcdSnapshot>::namespaced(env.client(), ns);
    tests::harness::eventually(
        &format!("{name}: Complete, Verified=Unknown"),
        RUN,
        || async {
            let s = api.get(name).await.map_err(|e| e.to_string())?;
            let phase = s.status.as_ref().and_then(|s| s.phase);
            match (phase, verified(&s)) {
                (Some(SnapshotPhase::Complete), Some((st, _, _))) if st == "Unknown" => Ok(s),
                (Some(SnapshotPhase::Failed), v) => panic!("{name} failed: {:?} {v:?}", s.status),
                (p, v) => Err(format!("phase {p:?}, Verified {v:?}")),
            }
        },
    )
    .await
}

/// A suspended Job named like the snapshot's verification Job: the operator will not use it,
/// so the verification waits until it is deleted.
async fn hold_verification(env: &Env, ns: &str, snapshot: &str) {
    let _: Job = tests::harness::create(
        &env.client(),
        ns,
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": format!("{snapshot}-verify")},
               "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "hold", "image": "busybox", "command": ["true"]}]}}}}),
    )
    .await;
}

async fn release_verification(env: &Env, ns: &str, snapshot: &str) {
    Api::<Job>::namespaced(env.client(), ns)
        .delete(&format!("{snapshot}-verify"), &DeleteParams::background())
        .await
        .or_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_snapshot_is_verified_and_a_flipped_byte_or_a_wrong_hashkv_is_caught() {
    let env = env().await;
    let ns = env.namespace("verify").await;
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    let name = "vc";
    env.create_cluster(&ns, name, spec(1)).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;
    let keys = env.write_keys(&ns, name, 50).await;
    let mut etcd = env.etcd_client(&ns, name).await;
    let written = etcd
        .get("e2e/0", None)
        .await
        .or_panic()
        .header()
        .map(|h| h.revision())
        .expect("a response header");

    // Held verifications first, so nothing can verify them before the test changes them.
    hold_verification(env, &ns, "vc-flipped").await;
    hold_verification(env, &ns, "vc-wrong-kv").await;
    hold_verification(env, &ns, "vc-no-kv").await;
    for s in ["vc-good", "vc-flipped", "vc-wrong-kv", "vc-no-kv"] {
        create_snapshot(env, &ns, s, name, s3_dest(&endpoint, &minio.bucket)).await;
    }

    // A good snapshot: Verified=True at the revision the save recorded, which holds every
    // write made before it.
    let good = decided(env, &ns, "vc-good").await;
    let status = good.status.clone().unwrap_or_default();
    let (st, reason, message) = verified(&good).unwrap_or_default();
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "SnapshotVerified"),
        "{message}"
    );
    let recorded = status
        .hash_kv
        .clone()
        .expect("status.hashKV recorded at save time");
    let verification = status.verification.clone().expect("status.verification");
    assert_eq!(verification.revision, recorded.revision);
    assert_eq!(verification.hash, recorded.hash);
    assert!(
        recorded.revision >= written,
        "recorded revision {} is before the last write ({written})",
        recorded.revision
    );
    assert!(
        message.contains(&format!("revision {}", recorded.revision))
            && message.contains("as the cluster reported at save time"),
        "{message}"
    );
    let log = env
        .cp
        .kubectl_ok(&["logs", "-n", &ns, "job/vc-good-verify"])
        .await
        .or_panic();
    assert!(log.contains("etcdutl hashkv"), "{log}");
    let events = env.events(&ns, "vc-good").await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("SnapshotVerified")),
        "{events:?}"
    );

    // One byte flipped in the stored object, rewritten through the S3 API with its metadata.
    let flipped = complete_and_waiting(env, &ns, "vc-flipped").await;
    let artifact = flipped
        .status
        .clone()
        .and_then(|s| s.artifact)
        .expect("status.artifact");
    let key = "vc/vc-flipped.db";
    let (_, metadata, mut bytes) = minio.object(key).await;
    assert_eq!(artifact.checksum, format!("sha256:{}", sha256_hex(&bytes)));
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    let corrupted = sha256_hex(&bytes);
    minio
        .root_client()
        .put_object()
        .bucket(&minio.bucket)
        .key(key)
        .set_metadata(Some(metadata))
        .body(ByteStream::from(bytes))
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutObject {key}: {e:?}"));
    release_verification(env, &ns, "vc-flipped").await;
    let flipped = decided(env, &ns, "vc-flipped").await;
    let (st, reason, message) = verified(&flipped).unwrap_or_default();
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "ChecksumMismatch"),
        "{message}"
    );
    assert!(
        message.contains(&artifact.checksum) && message.contains(&corrupted),
        "the message names the recorded and the stored sha256: {message}"
    );
    assert!(flipped.status.and_then(|s| s.verification).is_none());
    let events = env.events(&ns, "vc-flipped").await;
    assert!(
        events.iter().any(|e| {
            e.reason.as_deref() == Some("SnapshotVerificationFailed")
                && e.type_.as_deref() == Some("Warning")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("ChecksumMismatch"))
        }),
        "{events:?}"
    );

    // The stored object intact, but a recorded hashkv the data does not have: the restored
    // copy is hashed at the recorded revision and the difference named.
    let wrong = complete_and_waiting(env, &ns, "vc-wrong-kv").await;
    let recorded = wrong
        .status
        .clone()
        .and_then(|s| s.hash_kv)
        .expect("status.hashKV");
    let bogus = (recorded.hash + 1) % (1 << 32);
    Api::<EtcdSnapshot>::namespaced(env.client(), &ns)
        .patch_status(
            "vc-wrong-kv",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hashKV": {"hash": bogus}}})),
        )
        .await
        .or_panic();
    release_verification(env, &ns, "vc-wrong-kv").await;
    let wrong = decided(env, &ns, "vc-wrong-kv").await;
    let (st, reason, message) = verified(&wrong).unwrap_or_default();
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "HashKVMismatch"),
        "{message}"
    );
    for part in [
        format!("revision {}", recorded.revision),
        format!("is {}", recorded.hash),
        format!("reported {bogus}"),
    ] {
        assert!(message.contains(&part), "{part}: {message}");
    }

    // No hashkv recorded (as when the member did not answer HashKV): still Verified=True, with
    // its own reason and a message that says the content was not compared.
    complete_and_waiting(env, &ns, "vc-no-kv").await;
    Api::<EtcdSnapshot>::namespaced(env.client(), &ns)
        .patch_status(
            "vc-no-kv",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hashKV": null}})),
        )
        .await
        .or_panic();
    release_verification(env, &ns, "vc-no-kv").await;
    let uncompared = decided(env, &ns, "vc-no-kv").await;
    let (st, reason, message) = verified(&uncompared).unwrap_or_default();
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "HashKVNotCompared"),
        "{message}"
    );
    assert!(
        message.contains("not compared") && message.contains("no hashkv"),
        "{message}"
    );

    // Verification reads the store only: the cluster kept every key.
    env.check_keys(&ns, name, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_5_pvc_snapshot_is_verified_by_the_clusters_own_etcd() {
    let env = env().await;
    let ns = env.namespace("verify35").await;
    create_backups_claim(env, &ns).await;
    let name = "v35";
    let mut cluster = spec(1);
    cluster.version = "3.5.35".into();
    env.create_cluster(&ns, name, cluster).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;
    env.write_keys(&ns, name, 20).await;
    create_snapshot(
        env,
        &ns,
        "v35-pvc",
        name,
        SnapshotDestination {
            s3: None,
            pvc: Some(PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("etcd".into()),
            }),
        },
    )
    .await;
    let s = decided(env, &ns, "v35-pvc").await;
    let (st, reason, message) = verified(&s).unwrap_or_default();
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "SnapshotVerified"),
        "{message}"
    );
    let status = s.status.unwrap_or_default();
    let recorded = status.hash_kv.expect("status.hashKV");
    let verification = status.verification.expect("status.verification");
    assert_eq!(
        (verification.revision, verification.hash),
        (recorded.revision, recorded.hash)
    );
    assert!(
        message.contains("as the cluster reported at save time"),
        "{message}"
    );
    let log = env
        .cp
        .kubectl_ok(&["logs", "-n", &ns, "job/v35-pvc-verify"])
        .await
        .or_panic();
    assert!(log.contains("running etcd on the restored copy"), "{log}");
    // The Job ran the 3.5 image (whose etcdutl has no hashkv: etcd itself answered).
    let job = Api::<Job>::namespaced(env.client(), &ns)
        .get("v35-pvc-verify")
        .await
        .or_panic();
    let image = job
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].image.clone().unwrap_or_default())
        .unwrap_or_default();
    assert!(image.ends_with(":v3.5.35"), "{image}");
}

/// An EtcdSnapshot of `schedule` as its runs are: labelled with its name and owned by it.
async fn create_owned_snapshot(
    env: &Env,
    ns: &str,
    name: &str,
    schedule: &api::v1alpha2::EtcdSnapshotSchedule,
    dest: &SnapshotDestination,
) {
    let _: EtcdSnapshot = tests::harness::create(
        &env.client(),
        ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshot",
               "metadata": {"name": name,
                   "labels": {"etcd-operator.cozystack.io/schedule": schedule.metadata.name},
                   "ownerReferences": [{"apiVersion": "etcd-operator.cozystack.io/v1alpha2",
                       "kind": "EtcdSnapshotSchedule", "name": schedule.metadata.name,
                       "uid": schedule.metadata.uid, "controller": true}]},
               "spec": {"clusterRef": {"name": "vs"}, "destination": dest}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_requiring_verification_keeps_a_bad_snapshot_from_pushing_out_the_good_one() {
    let env = env().await;
    let ns = env.namespace("verifysched").await;
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    env.create_cluster(&ns, "vs", spec(1)).await;
    env.wait_healthy(&ns, "vs", 1, BOOT).await;
    env.write_keys(&ns, "vs", 20).await;
    let dest = s3_dest(&endpoint, &minio.bucket);
    // Suspended: retention runs, no run of its own interferes; the test creates its runs.
    let schedule: api::v1alpha2::EtcdSnapshotSchedule = tests::harness::create(
        &env.client(),
        &ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshotSchedule",
               "metadata": {"name": "vs"},
               "spec": {"clusterRef": {"name": "vs"}, "schedule": "@daily", "suspend": true,
                        "snapshotTemplate": {"destination": dest},
                        "retention": {"keepLast": 1, "requireVerified": true}}}),
    )
    .await;
    create_owned_snapshot(env, &ns, "vs-good", &schedule, &dest).await;
    let good = decided(env, &ns, "vs-good").await;
    assert_eq!(verified(&good).map(|v| v.0), Some("True".to_string()));

    // A newer run whose stored object goes bad before it is verified.
    hold_verification(env, &ns, "vs-bad").await;
    create_owned_snapshot(env, &ns, "vs-bad", &schedule, &dest).await;
    complete_and_waiting(env, &ns, "vs-bad").await;
    let key = "vc/vs-bad.db";
    let (_, metadata, mut bytes) = minio.object(key).await;
    bytes[0] ^= 0xff;
    minio
        .root_client()
        .put_object()
        .bucket(&minio.bucket)
        .key(key)
        .set_metadata(Some(metadata))
        .body(ByteStream::from(bytes))
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutObject {key}: {e:?}"));
    release_verification(env, &ns, "vs-bad").await;
    let bad = decided(env, &ns, "vs-bad").await;
    assert_eq!(
        verified(&bad).map(|v| (v.0, v.1)),
        Some(("False".to_string(), "ChecksumMismatch".to_string()))
    );

    // keepLast 1 counted over Complete snapshots would prune vs-good now; counted over
    // verified ones it keeps it, with its object, and the bad one stays in its own count.
    let snapshots = Api::<EtcdSnapshot>::namespaced(env.client(), &ns);
    tests::harness::throughout(Duration::from_secs(40), Duration::from_secs(2), || async {
        for name in ["vs-good", "vs-bad"] {
            assert!(
                snapshots.get_opt(name).await.or_panic().is_some(),
                "{name} was pruned"
            );
        }
    })
    .await;
    let objects: Vec<String> = minio.objects().await.into_iter().map(|(k, _)| k).collect();
    assert!(
        objects.contains(&"vc/vs-good.db".to_string()),
        "{objects:?}"
    );

    // The setting is what kept it: without it, the newest Complete one (the bad one) counts and
    // the good one is pruned with its object.
    Api::<api::v1alpha2::EtcdSnapshotSchedule>::namespaced(env.client(), &ns)
        .patch(
            "vs",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"retention": {"requireVerified": false}}})),
        )
        .await
        .or_panic();
    tests::harness::eventually("vs-good pruned without requireVerified", RUN, || async {
        match snapshots
            .get_opt("vs-good")
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(_) => Err("vs-good still there".to_string()),
        }
    })
    .await;
    let objects: Vec<String> = minio.objects().await.into_iter().map(|(k, _)| k).collect();
    assert!(
        !objects.contains(&"vc/vs-good.db".to_string()),
        "{objects:?}"
    );
}
