//! End to end: snapshots to a real S3 server (MinIO, reached by the snapshot Job's Pod through a
//! Service) and onto a PVC, then new clusters restored from them at first bootstrap: the seed's
//! `install-tools` and `restore` init containers (the operator binary run inside the cluster's
//! own etcd image, with that image's etcdutl), every key back, a new cluster ID, the init
//! container's log readable with kubectl, and a too-small data volume failing early with the
//! agent's size message on the member and the cluster; and a restore slower than the progress
//! deadline (MinIO hung past it) that is waited for, never given up as BootstrapFailed.

use std::collections::BTreeMap;
use std::time::Duration;

use api::v1alpha2::{
    BootstrapSpec, EtcdCluster, EtcdClusterSpec, EtcdMember, EtcdSnapshot, PvcLocation,
    RestoreSource, RestoreSpec, S3Location, SecretReference, SnapshotDestination, SnapshotPhase,
    StorageSpec,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use tests::backup::{create_backups_claim, create_snapshot};
use tests::e2e::{condition, env, spec, Env};
use tests::harness::throughout;
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(240);
const RUN: Duration = Duration::from_secs(180);

fn sha256_hex(bytes: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The snapshot once it reached a terminal phase; it must be Complete.
async fn completed(env: &Env, ns: &str, name: &str) -> EtcdSnapshot {
    let api = Api::<EtcdSnapshot>::namespaced(env.client(), ns);
    let s = tests::harness::eventually(&format!("snapshot {name} terminal"), RUN, || async {
        let s = api.get(name).await.map_err(|e| e.to_string())?;
        match s.status.as_ref().and_then(|st| st.phase) {
            Some(p) if p.is_terminal() => Ok(s),
            _ => Err(format!("{:?}", s.status)),
        }
    })
    .await;
    let status = s.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(SnapshotPhase::Complete),
        "{name}: {:?}",
        status.conditions
    );
    s
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

fn restoring(replicas: i32, source: RestoreSource) -> EtcdClusterSpec {
    EtcdClusterSpec {
        bootstrap: Some(BootstrapSpec {
            restore: Some(RestoreSpec { source }),
        }),
        ..spec(replicas)
    }
}

/// The cluster's seed EtcdMember (the one that bootstrapped it).
async fn seed(env: &Env, ns: &str, cluster: &str) -> EtcdMember {
    env.members(ns, cluster)
        .await
        .into_iter()
        .find(|m| m.spec.bootstrap)
        .unwrap_or_else(|| panic!("{ns}/{cluster}: no seed member"))
}

/// Delete the cluster and wait until its members, Pods and PVCs are gone.
async fn delete_cluster(env: &Env, ns: &str, name: &str) {
    env.clusters(ns)
        .delete(name, &DeleteParams::foreground())
        .await
        .or_panic();
    let client = env.client();
    let selector = ListParams::default().labels(&api::labels::cluster_selector(name));
    tests::harness::eventually(
        &format!("{ns}/{name} gone with its members, Pods and PVCs"),
        RUN,
        || async {
            let clusters = Api::<EtcdCluster>::namespaced(client.clone(), ns);
            let members = Api::<EtcdMember>::namespaced(client.clone(), ns);
            let pods = Api::<Pod>::namespaced(client.clone(), ns);
            let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns);
            let left = (
                clusters
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some(),
                members
                    .list(&selector)
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len(),
                // Member Pods only (Job Pods of an older operator carried the cluster label too).
                pods.list(&selector)
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .iter()
                    .filter(|p| {
                        p.labels()
                            .get(api::labels::APP_COMPONENT)
                            .map(String::as_str)
                            != Some("snapshot")
                    })
                    .count(),
                pvcs.list(&selector)
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len(),
            );
            if left == (false, 0, 0, 0) {
                Ok(())
            } else {
                Err(format!("(cluster, members, pods, pvcs) left: {left:?}"))
            }
        },
    )
    .await;
}

/// Keys big enough that the snapshot is well over 1 MiB (the too-small volume below), plus the
/// usual small ones; all under `e2e/` so [`Env::check_keys`] reads them back.
async fn write_data(env: &Env, ns: &str, cluster: &str) -> BTreeMap<String, String> {
    let mut keys = env.write_keys(ns, cluster, 100).await;
    let mut etcd = env.etcd_client(ns, cluster).await;
    for i in 0..48 {
        let (k, v) = (
            format!("e2e/big/{i:02}"),
            format!("{i:02}").repeat(16 * 1024),
        );
        etcd.put(k.clone(), v.clone(), None).await.or_panic();
        keys.insert(k, v);
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_and_pvc_snapshots_restore_into_new_clusters_and_a_small_volume_fails_early() {
    let env = env().await;
    let ns = env.namespace("restore").await;
    let client = env.client();

    // MinIO on the pod bridge, a Service for it, and the writer's credentials.
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    create_backups_claim(env, &ns).await;

    // A 3-member cluster with data, snapshotted to S3 and to the PVC.
    let name = "rc";
    env.create_cluster(&ns, name, spec(3)).await;
    let old = env.wait_healthy(&ns, name, 3, BOOT).await;
    let old_id = old.status.and_then(|s| s.cluster_id).expect("cluster ID");
    let keys = write_data(env, &ns, name).await;
    create_snapshot(
        env,
        &ns,
        "rc-s3",
        name,
        SnapshotDestination {
            s3: Some(s3_location(&endpoint, &minio.bucket, "rc/")),
            pvc: None,
        },
    )
    .await;
    create_snapshot(
        env,
        &ns,
        "rc-pvc",
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

    let s3 = completed(env, &ns, "rc-s3").await;
    let artifact = s3
        .status
        .clone()
        .and_then(|s| s.artifact)
        .expect("status.artifact");
    assert_eq!(artifact.uri, format!("s3://{}/rc/rc-s3.db", minio.bucket));
    let (size, metadata, bytes) = minio.object("rc/rc-s3.db").await;
    assert_eq!(size, artifact.size_bytes);
    assert_eq!(bytes.len() as i64, artifact.size_bytes);
    assert!(
        artifact.size_bytes > 1 << 20,
        "the snapshot ({} bytes) must exceed the small volume below",
        artifact.size_bytes
    );
    assert_eq!(artifact.checksum, format!("sha256:{}", sha256_hex(&bytes)));
    assert_eq!(
        metadata.get("snapshot-uid"),
        s3.metadata.uid.as_ref(),
        "{metadata:?}"
    );
    // The agent's own log through kubectl (its last line is the artifact it reported).
    let log = env
        .cp
        .kubectl_ok(&["logs", "-n", &ns, "job/rc-s3-snapshot"])
        .await
        .or_panic();
    assert!(
        log.contains("\"artifact\"") && log.contains(&artifact.uri),
        "kubectl logs job/rc-s3-snapshot: {log}"
    );
    let pvc = completed(env, &ns, "rc-pvc").await;
    assert_eq!(
        pvc.status.and_then(|s| s.artifact).map(|a| a.uri),
        Some("pvc://backups/etcd/rc-pvc.db".to_string())
    );

    delete_cluster(env, &ns, name).await;

    // Restores: from the PVC into another cluster, and from S3 onto a volume smaller than twice
    // the snapshot (the sized class gives the volume exactly the requested capacity).
    env.create_cluster(
        &ns,
        "rp",
        restoring(
            3,
            RestoreSource {
                s3: None,
                pvc: Some(PvcLocation {
                    claim_name: "backups".into(),
                    sub_path: Some("etcd/rc-pvc.db".into()),
                }),
            },
        ),
    )
    .await;
    env.create_cluster(
        &ns,
        "small",
        EtcdClusterSpec {
            storage: StorageSpec {
                size: Quantity("1Mi".into()),
                storage_class_name: Some(env.runner.sized_storage_class()),
                ..Default::default()
            },
            ..restoring(
                1,
                RestoreSource {
                    s3: Some(s3_location(&endpoint, &minio.bucket, "rc/rc-s3.db")),
                    pvc: None,
                },
            )
        },
    )
    .await;
    // The old name again, from S3, once the old cluster is gone.
    env.create_cluster(
        &ns,
        name,
        restoring(
            3,
            RestoreSource {
                s3: Some(s3_location(&endpoint, &minio.bucket, "rc/rc-s3.db")),
                pvc: None,
            },
        ),
    )
    .await;

    // Too small: the member and the cluster say so in the agent's words, and nothing formed.
    let small = env
        .wait_for(&ns, "small", "Available=False/RestoreFailed", RUN, |c| {
            condition(c, "Available").is_some_and(|(_, r, _)| r == "RestoreFailed")
        })
        .await;
    let (status, _, message) = condition(&small, "Available").unwrap_or_default();
    assert_eq!(status, "False");
    assert!(
        message.contains("not enough space to restore") && message.contains("storage.size"),
        "{message}"
    );
    assert!(small.status.and_then(|s| s.cluster_id).is_none());
    let ready = tests::harness::eventually(
        "the small seed's Ready=False/RestoreFailed",
        RUN,
        || async {
            let member = seed(env, &ns, "small").await;
            let ready = member
                .status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")
                .ok_or_else(|| "no Ready condition".to_string())?;
            if ready.reason == "RestoreFailed" {
                Ok(ready)
            } else {
                Err(format!("{ready:?}"))
            }
        },
    )
    .await;
    assert_eq!(ready.status, "False");
    assert!(
        ready.message.contains("not enough space to restore"),
        "{}",
        ready.message
    );

    for cluster in [name, "rp"] {
        let restored = env.wait_healthy(&ns, cluster, 3, BOOT).await;
        env.check_keys(&ns, cluster, &keys).await;
        let id = restored
            .status
            .and_then(|s| s.cluster_id)
            .expect("cluster ID");
        assert_ne!(
            id, old_id,
            "{cluster}: a restored cluster gets a new cluster ID"
        );
        let seed_pod = seed(env, &ns, cluster).await.name_any();
        let log = env
            .cp
            .kubectl_ok(&["logs", "-n", &ns, &seed_pod, "-c", "restore"])
            .await
            .or_panic();
        assert!(
            log.contains("\"restored\""),
            "{cluster}: restore log: {log}"
        );
        // Only the seed restored: the other members joined with the usual Pod.
        for m in env.members(&ns, cluster).await {
            let pod: Pod = Api::namespaced(client.clone(), &ns)
                .get(&m.name_any())
                .await
                .or_panic();
            let init = pod
                .spec
                .and_then(|s| s.init_containers)
                .unwrap_or_default()
                .len();
            assert_eq!(init, usize::from(m.spec.bootstrap) * 2, "{}", m.name_any());
        }
    }

    // A restore slower than the progress deadline: MinIO hangs (SIGSTOP) while the seed's
    // restore init container reads from it, for longer than progressDeadlineSeconds. The
    // bootstrap is not given up (never BootstrapFailed): Progressing=True/Restoring names the
    // source, and once MinIO answers again the cluster forms with every key.
    minio.stop().or_panic();
    let deadline_seconds = 30;
    let created = std::time::Instant::now();
    env.create_cluster(
        &ns,
        "slow",
        EtcdClusterSpec {
            progress_deadline_seconds: deadline_seconds,
            ..restoring(
                1,
                RestoreSource {
                    s3: Some(s3_location(&endpoint, &minio.bucket, "rc/rc-s3.db")),
                    pvc: None,
                },
            )
        },
    )
    .await;
    let source = format!("s3://{}/rc/rc-s3.db", minio.bucket);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let never_failed = |c: &EtcdCluster| {
        for t in ["Available", "Progressing"] {
            assert!(
                condition(c, t).is_none_or(|(_, r, _)| r != "BootstrapFailed"),
                "a restore still running was given up at the deadline: {:?}; operator log: {}",
                c.status,
                env.operator.log().display()
            );
        }
    };
    let restore_started = tests::harness::eventually(
        "the slow seed's restore init container running",
        RUN,
        || async {
            never_failed(&env.cluster(&ns, "slow").await);
            let Some(member) = env
                .members(&ns, "slow")
                .await
                .into_iter()
                .find(|m| m.spec.bootstrap)
            else {
                return Err("no seed yet".to_string());
            };
            let pod = pods
                .get_opt(&member.name_any())
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no seed Pod yet".to_string())?;
            let running = pod
                .status
                .and_then(|s| s.init_container_statuses)
                .unwrap_or_default()
                .iter()
                .any(|c| {
                    c.name == "restore" && c.state.as_ref().is_some_and(|s| s.running.is_some())
                });
            if running {
                Ok(std::time::Instant::now())
            } else {
                Err("the restore init container is not running".to_string())
            }
        },
    )
    .await;
    // Hold MinIO past the deadline (but within the agent's 60 s read timeout).
    let reported = std::cell::Cell::new(false);
    let hold = (Duration::from_secs(deadline_seconds as u64 + 15))
        .saturating_sub(created.elapsed())
        .max(Duration::from_secs(20).saturating_sub(restore_started.elapsed()));
    throughout(hold, Duration::from_millis(500), || async {
        let c = env.cluster(&ns, "slow").await;
        never_failed(&c);
        if let Some((status, _, message)) =
            condition(&c, "Progressing").filter(|(_, r, _)| r == "Restoring")
        {
            assert_eq!(status, "True");
            assert!(message.contains(&source), "{message}");
            reported.set(true);
        }
    })
    .await;
    let reported = reported.get();
    assert!(
        restore_started.elapsed() < Duration::from_secs(55),
        "the hold outlasted the agent's read timeout: the test would measure a failed attempt"
    );
    assert!(
        reported,
        "no Progressing=True/Restoring while the restore ran"
    );
    minio.resume().or_panic();
    env.wait_healthy(&ns, "slow", 1, BOOT).await;
    env.check_keys(&ns, "slow", &keys).await;
    never_failed(&env.cluster(&ns, "slow").await);
}
