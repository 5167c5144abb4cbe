//! End to end: an EtcdSnapshotSchedule firing every minute with `keepLast: 2` to a PVC, on a
//! real cluster with the real operator and snapshot Jobs: snapshots appear named after the
//! schedule and complete, the oldest are pruned (only the schedule's own), and `suspend` stops
//! new ones; Failed snapshots beyond `keepLast` are pruned through prune Jobs that remove the
//! file a Failed snapshot wrote and leave another snapshot's. The same with an S3 destination on a real MinIO: a pruned snapshot's object is gone
//! from the bucket, the kept one's is there; then the credentials go bad and the failed runs
//! that follow never push the good snapshot (or its object) out of `keepLast`. And the
//! continuous archive of `spec.archive`: its archiver Pod stores every write once (read back from
//! MinIO, checksums checked), the status follows it and finds its base among the schedule's
//! verified snapshots, a change of the spec replaces the archiver with no gap and no duplicate,
//! and removing the field removes the archiver.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::labels;
use api::v1alpha2::{EtcdSnapshot, EtcdSnapshotSchedule, SnapshotPhase};
use controller::archive::{SegmentName, Window};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;
use tests::backup::create_backups_claim;
use tests::e2e::{env, put_keys, spec};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_minute_keep_last_two_prunes_the_oldest_and_suspend_stops_it() {
    let env = env().await;
    let ns = env.namespace("sched").await;
    env.create_cluster(&ns, "sc", spec(1)).await;
    env.wait_healthy(&ns, "sc", 1, BOOT).await;
    create_backups_claim(env, &ns).await;
    let _: EtcdSnapshotSchedule = tests::harness::create(
        &env.client(),
        &ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshotSchedule",
               "metadata": {"name": "every-minute"},
               "spec": {"clusterRef": {"name": "sc"}, "schedule": "* * * * *",
                        "snapshotTemplate": {"destination": {"pvc": {"claimName": "backups", "subPath": "sched"}}},
                        "retention": {"keepLast": 2}}}),
    )
    .await;
    let snapshots = Api::<EtcdSnapshot>::namespaced(env.client(), &ns);
    let schedules = Api::<EtcdSnapshotSchedule>::namespaced(env.client(), &ns);
    let selector = format!("{}=every-minute", labels::SCHEDULE);
    let list = || async {
        snapshots
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|l| l.items)
            .map_err(|e| e.to_string())
    };

    // Three runs: the first one created is pruned once the third completes.
    let seen = std::sync::Mutex::new(BTreeSet::new());
    let first = tests::harness::eventually(
        "three scheduled snapshots, the oldest pruned, two Complete kept",
        Duration::from_secs(300),
        || async {
            let items = list().await?;
            let mut seen = seen.lock().map_err(|e| e.to_string())?;
            for s in &items {
                seen.insert(s.metadata.name.clone().unwrap_or_default());
            }
            let complete = items
                .iter()
                .filter(|s| {
                    s.status.as_ref().and_then(|st| st.phase) == Some(SnapshotPhase::Complete)
                })
                .count();
            let oldest = seen.iter().next().cloned().unwrap_or_default();
            let oldest_gone = !items
                .iter()
                .any(|s| s.metadata.name.as_deref() == Some(&oldest));
            if seen.len() >= 3 && oldest_gone && complete == 2 && items.len() == 2 {
                Ok(oldest)
            } else {
                Err(format!(
                    "seen {seen:?}, now {} with {complete} Complete",
                    items.len()
                ))
            }
        },
    )
    .await;
    assert!(first.starts_with("every-minute-"), "{first}");
    // The pruned snapshot's file went with it (a prune Job mounted the claim), the kept ones'
    // files are there.
    let dir = env
        .runner
        .claim_dir(&ns, "backups")
        .await
        .or_panic()
        .join("sched");
    tests::harness::eventually(
        "the pruned snapshot's file deleted from the PVC",
        Duration::from_secs(60),
        || async {
            let files: BTreeSet<String> = std::fs::read_dir(&dir)
                .map_err(|e| e.to_string())?
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            let gone = [".db", ".db.uid", ".db.sha256"]
                .iter()
                .all(|x| !files.contains(&format!("{first}{x}")));
            if gone {
                Ok(files)
            } else {
                Err(format!("{files:?}"))
            }
        },
    )
    .await;
    for s in list().await.or_panic() {
        if s.status.as_ref().and_then(|st| st.phase) == Some(SnapshotPhase::Complete) {
            let kept = dir.join(format!("{}.db", s.metadata.name.unwrap_or_default()));
            assert!(kept.exists(), "{} missing", kept.display());
        }
    }
    let pruned = tests::rollout::event_messages(env, &ns, "every-minute", "SnapshotPruned").await;
    assert!(
        pruned
            .iter()
            .any(|m| m.contains(&format!("deleted pvc://backups/sched/{first}.db"))),
        "{pruned:?}"
    );
    let status = schedules
        .get("every-minute")
        .await
        .or_panic()
        .status
        .unwrap_or_default();
    assert!(status.last_schedule_time.is_some() && status.last_successful_time.is_some());

    // Failed snapshots of the schedule (made by hand, their cluster missing so no Job runs,
    // then marked Failed): retention keeps the newest two Failed ones and prunes the rest
    // through prune Jobs on the same path the snapshot Job writes, while the suspended window
    // below runs. failed-1 wrote its file (and a partial one) before failing: all of it goes;
    // failed-2's path holds another snapshot's file: it stays, and the EtcdSnapshot goes all
    // the same; failed-3 wrote nothing: it goes.
    let owner = schedules.get("every-minute").await.or_panic();
    let owner_uid = owner.metadata.uid.clone().expect("the schedule has a UID");
    let mut failed_uid = Vec::new();
    for i in 1..=5 {
        let s: EtcdSnapshot = tests::harness::create(
            &env.client(),
            &ns,
            json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshot",
                   "metadata": {"name": format!("every-minute-failed-{i}"),
                                "labels": {labels::SCHEDULE: "every-minute"},
                                "ownerReferences": [{"apiVersion": "etcd-operator.cozystack.io/v1alpha2",
                                    "kind": "EtcdSnapshotSchedule", "name": "every-minute", "uid": owner_uid,
                                    "controller": true}]},
                   "spec": {"clusterRef": {"name": "no-such-cluster"},
                            "destination": {"pvc": {"claimName": "backups", "subPath": "sched"}}}}),
        )
        .await;
        failed_uid.push(s.metadata.uid.expect("a created snapshot has a UID"));
    }
    let at = |i: usize, x: &str| dir.join(format!("every-minute-failed-{i}{x}"));
    let write = |path: std::path::PathBuf, text: &str| std::fs::write(&path, text).or_panic();
    write(at(1, ".db"), "a snapshot written before the agent died");
    write(at(1, ".db.uid"), &format!("{}\n", failed_uid[0]));
    write(at(1, ".db.sha256"), "00  every-minute-failed-1.db\n");
    let partial = dir.join(format!(".every-minute-failed-1.db.{}.tmp", failed_uid[0]));
    write(partial.clone(), "half a snapshot");
    write(at(2, ".db"), "another snapshot's file");
    write(at(2, ".db.uid"), "some-other-uid\n");
    for i in 1..=5 {
        snapshots
            .patch_status(
                &format!("every-minute-failed-{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Failed"}})),
            )
            .await
            .or_panic();
    }

    // Suspended: after the snapshot in flight (if any) ends, nothing new for over a minute.
    schedules
        .patch(
            "every-minute",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .or_panic();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before: BTreeSet<String> = list()
        .await
        .or_panic()
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    tokio::time::sleep(Duration::from_secs(75)).await;
    let after: BTreeSet<String> = list()
        .await
        .or_panic()
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(
        after.is_subset(&before),
        "suspended, yet new snapshots: before {before:?}, after {after:?}"
    );

    // Retention ran while suspended: the three oldest Failed snapshots are gone, the newest
    // two kept, and only failed-1's own files were removed.
    tests::harness::eventually(
        "the three oldest Failed snapshots pruned through their prune Jobs",
        Duration::from_secs(90),
        || async {
            let names: BTreeSet<String> = list()
                .await?
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .filter(|n| n.starts_with("every-minute-failed-"))
                .collect();
            let want: BTreeSet<String> = ["every-minute-failed-4", "every-minute-failed-5"]
                .map(String::from)
                .into();
            (names == want).then_some(()).ok_or(format!("{names:?}"))
        },
    )
    .await;
    for gone in [at(1, ".db"), at(1, ".db.uid"), at(1, ".db.sha256"), partial] {
        assert!(!gone.exists(), "{} was not removed", gone.display());
    }
    for kept in [at(2, ".db"), at(2, ".db.uid")] {
        assert!(
            kept.exists(),
            "{} (another snapshot's) was removed",
            kept.display()
        );
    }
    // (The SnapshotPruned Events of one schedule are folded into one series that keeps the
    // first message, so the agents' reports are checked through the files above.)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_retention_deletes_pruned_objects_and_failed_runs_never_prune_the_good_one() {
    let env = env().await;
    let ns = env.namespace("sched-s3").await;
    let client = env.client();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    env.create_cluster(&ns, "s3c", spec(1)).await;
    env.wait_healthy(&ns, "s3c", 1, BOOT).await;
    let _: EtcdSnapshotSchedule = tests::harness::create(
        &client,
        &ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshotSchedule",
               "metadata": {"name": "to-s3"},
               "spec": {"clusterRef": {"name": "s3c"}, "schedule": "* * * * *",
                        "snapshotTemplate": {"destination": {"s3": {
                            "endpoint": endpoint, "bucket": minio.bucket, "key": "sched/",
                            "forcePathStyle": true,
                            "credentialsSecretRef": {"name": "s3-creds"}}}},
                        "retention": {"keepLast": 1}}}),
    )
    .await;
    let snapshots = Api::<EtcdSnapshot>::namespaced(client.clone(), &ns);
    let selector = format!("{}=to-s3", labels::SCHEDULE);
    // Two runs: the first one's object is uploaded, then deleted with it once the second is
    // Complete.
    let seen = std::sync::Mutex::new(BTreeSet::new());
    let uploaded = std::sync::Mutex::new(BTreeSet::new());
    let (first, kept) = tests::harness::eventually(
        "two scheduled S3 snapshots, the first pruned, one Complete kept",
        Duration::from_secs(240),
        || async {
            let items = snapshots
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?
                .items;
            let mut seen = seen.lock().map_err(|e| e.to_string())?;
            let mut uploaded = uploaded.lock().map_err(|e| e.to_string())?;
            for s in &items {
                seen.insert(s.metadata.name.clone().unwrap_or_default());
                if let Some(a) = s.status.as_ref().and_then(|st| st.artifact.as_ref()) {
                    uploaded.insert(a.uri.clone());
                }
            }
            let first = seen.iter().next().cloned().unwrap_or_default();
            let complete: Vec<&EtcdSnapshot> = items
                .iter()
                .filter(|s| {
                    s.status.as_ref().and_then(|st| st.phase) == Some(SnapshotPhase::Complete)
                })
                .collect();
            let first_gone = !items
                .iter()
                .any(|s| s.metadata.name.as_deref() == Some(&first));
            match complete.first() {
                Some(k) if seen.len() >= 2 && first_gone && items.len() == 1 => {
                    Ok((first, k.metadata.name.clone().unwrap_or_default()))
                }
                _ => Err(format!(
                    "seen {seen:?}, now {} with {} Complete",
                    items.len(),
                    complete.len()
                )),
            }
        },
    )
    .await;
    // The first snapshot had reached the bucket; now only the kept one's object is there.
    let uploaded = uploaded.into_inner().or_panic();
    let first_uri = format!("s3://{}/sched/{first}.db", minio.bucket);
    assert!(
        uploaded.contains(&first_uri),
        "{first_uri} never uploaded: {uploaded:?}"
    );
    let objects: Vec<String> = minio.objects().await.into_iter().map(|(k, _)| k).collect();
    // Each object with its checksum object; the pruned snapshot's went with it.
    assert_eq!(
        objects,
        [
            format!("sched/{kept}.db"),
            format!("sched/{kept}.db.sha256")
        ],
        "the bucket holds {objects:?}"
    );
    let pruned = tests::rollout::event_messages(env, &ns, "to-s3", "SnapshotPruned").await;
    assert!(
        pruned
            .iter()
            .any(|m| m.contains(&first) && m.contains(&format!("deleted {first_uri}"))),
        "{pruned:?}"
    );

    // The credentials go bad (a rotated key): new runs fail, and retention must not count them
    // against the good snapshot: after two Failed runs the Complete one and its object remain.
    let _: Secret = tests::harness::create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wrong-creds"},
               "stringData": {"AWS_ACCESS_KEY_ID": minio.writer.access_key,
                              "AWS_SECRET_ACCESS_KEY": "not-the-secret-key"}}),
    )
    .await;
    let schedules = Api::<EtcdSnapshotSchedule>::namespaced(client, &ns);
    schedules
        .patch(
            "to-s3",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"snapshotTemplate": {"destination": {"s3": {
                "credentialsSecretRef": {"name": "wrong-creds"}}}}}})),
        )
        .await
        .or_panic();
    let failed_seen = std::sync::Mutex::new(BTreeSet::new());
    tests::harness::eventually(
        "two Failed runs with the wrong credentials",
        Duration::from_secs(240),
        || async {
            let items = snapshots
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?
                .items;
            let mut failed_seen = failed_seen.lock().map_err(|e| e.to_string())?;
            for s in &items {
                if s.status.as_ref().and_then(|st| st.phase) == Some(SnapshotPhase::Failed) {
                    failed_seen.insert(s.metadata.name.clone().unwrap_or_default());
                }
            }
            if failed_seen.len() >= 2 {
                Ok(())
            } else {
                Err(format!("Failed so far: {failed_seen:?}"))
            }
        },
    )
    .await;
    // Wait for a reconcile that saw both failures finished: a run stays in the schedule's
    // `status.active` from the reconcile that created it until the first reconcile that finds
    // it finished, and that reconcile applies retention before it writes the status. Once no
    // Failed run is listed there, retention has had its chance to prune with them counted.
    let failed_runs = failed_seen.into_inner().or_panic();
    let waited = std::time::Instant::now();
    tests::harness::eventually(
        "a schedule reconcile after the Failed runs (none left in status.active)",
        Duration::from_secs(120),
        || async {
            let schedule = schedules.get("to-s3").await.map_err(|e| e.to_string())?;
            let active: Vec<String> = schedule
                .status
                .iter()
                .flat_map(|st| st.active.iter().map(|r| r.name.clone()))
                .collect();
            if failed_runs.iter().any(|f| active.contains(f)) {
                Err(format!(
                    "status.active {active:?}, Failed runs {failed_runs:?}"
                ))
            } else {
                Ok(())
            }
        },
    )
    .await;
    eprintln!(
        "the schedule reconciled after the Failed runs {failed_runs:?} within {:?}",
        waited.elapsed()
    );
    let items = snapshots
        .list(&ListParams::default().labels(&selector))
        .await
        .or_panic()
        .items;
    // A run that had started before the switch may have completed (and replaced the first kept
    // one): the newest Complete snapshot is the one that must be left.
    let complete: Vec<String> = items
        .iter()
        .filter(|s| s.status.as_ref().and_then(|st| st.phase) == Some(SnapshotPhase::Complete))
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    assert!(
        complete.len() == 1 && complete[0].as_str() >= kept.as_str(),
        "the good snapshot ({kept} or newer) was pruned by failed runs; left: {:?}",
        items
            .iter()
            .map(|s| (
                s.metadata.name.clone(),
                s.status.as_ref().and_then(|st| st.phase)
            ))
            .collect::<Vec<_>>()
    );
    let objects: Vec<String> = minio.objects().await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        objects,
        [
            format!("sched/{}.db", complete[0]),
            format!("sched/{}.db.sha256", complete[0])
        ],
        "the good snapshot's object (and its checksum object) must be the one left in the bucket"
    );
    schedules
        .patch(
            "to-s3",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .or_panic();
}

/// Every record of the archive under `prefix` in the bucket, decoded (checksums checked), and
/// the window its segment names make.
async fn archived(
    minio: &tests::env::minio::Minio,
    prefix: &str,
) -> (Window, Vec<controller::archive::Record>) {
    let mut names = Vec::new();
    let mut records = Vec::new();
    for (key, _) in minio.objects().await {
        let Some(name) = SegmentName::parse(prefix, &key) else {
            continue;
        };
        let (_, _, body) = minio.object(&key).await;
        records.extend(
            controller::archive::decode(name, &body)
                .unwrap_or_else(|e| panic!("segment {key} does not decode: {e}")),
        );
        names.push(name);
    }
    (Window::of(&names), records)
}

/// The revisions of `keys` in the archive: each key must be there exactly once (one put each)
/// with the value written.
fn archived_once(records: &[controller::archive::Record], keys: &BTreeMap<String, String>) {
    for (key, value) in keys {
        let puts: Vec<_> = records.iter().filter(|r| r.key == key.as_bytes()).collect();
        assert_eq!(puts.len(), 1, "{key} is archived {} times", puts.len());
        assert_eq!(puts[0].value, value.as_bytes(), "{key}'s archived value");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_on_the_schedule_holds_every_write_once_and_its_archiver_follows_spec_archive() {
    let env = env().await;
    let ns = env.namespace("sched-arch").await;
    let client = env.client();
    let (minio, _minio_root, endpoint) = env.minio(&ns).await;
    env.create_cluster(&ns, "arc", spec(1)).await;
    env.wait_healthy(&ns, "arc", 1, BOOT).await;
    let schedules = Api::<EtcdSnapshotSchedule>::namespaced(client.clone(), &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let _: EtcdSnapshotSchedule = tests::harness::create(
        &client,
        &ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshotSchedule",
               "metadata": {"name": "arch"},
               "spec": {"clusterRef": {"name": "arc"}, "schedule": "* * * * *",
                        "snapshotTemplate": {"destination": {"s3": {
                            "endpoint": endpoint, "bucket": minio.bucket, "key": "pitr/",
                            "forcePathStyle": true,
                            "credentialsSecretRef": {"name": "s3-creds"}}}},
                        "retention": {"keepLast": 2},
                        "archive": {"flushInterval": "500ms", "hashInterval": "5s"}}}),
    )
    .await;
    let prefix = "pitr/archive/arch/";
    let running = |pods: Api<Pod>| async move {
        let pod = pods
            .get_opt("arch-archive")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Pod arch-archive")?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        match phase.as_deref() {
            Some("Running") => Ok(pod),
            other => Err(format!("arch-archive is {other:?}")),
        }
    };
    let first =
        tests::harness::eventually("the archiver Pod runs", Duration::from_secs(120), || {
            running(pods.clone())
        })
        .await;

    let mut etcd = env.etcd_client(&ns, "arc").await;
    let mut written = put_keys(&mut etcd, "pitr-a/", 40).await;
    let newest = |etcd: etcd_client::Client| async move {
        let mut etcd = etcd;
        etcd.get("pitr", None)
            .await
            .or_panic()
            .header()
            .map_or(0, |h| h.revision())
    };
    let written_at = newest(etcd.clone()).await;
    let reported = |schedules: Api<EtcdSnapshotSchedule>, at: i64| async move {
        let s = schedules.get("arch").await.map_err(|e| e.to_string())?;
        let archive = s.status.and_then(|st| st.archive).unwrap_or_default();
        match archive.newest_revision {
            Some(r) if r >= at => Ok(archive),
            _ => Err(format!(
                "status.archive {archive:?}, waiting for revision {at}"
            )),
        }
    };
    let status = tests::harness::eventually(
        "status.archive reaches the last write's revision",
        Duration::from_secs(90),
        || reported(schedules.clone(), written_at),
    )
    .await;
    assert!(status.gaps.is_empty(), "gaps: {:?}", status.gaps);
    assert!(status.newest_time.is_some(), "{status:?}");
    // No writes now: the archive catches up with the cluster, and says so (status and metric).
    tests::harness::eventually(
        "status.archive reads caught up (lag 0 revisions, 0 seconds)",
        Duration::from_secs(60),
        || async {
            let s = schedules.get("arch").await.map_err(|e| e.to_string())?;
            let archive = s.status.and_then(|st| st.archive).unwrap_or_default();
            match (archive.lag_revisions, archive.lag_seconds) {
                (Some(0), Some(0)) => Ok(()),
                other => Err(format!("lag {other:?} in {archive:?}")),
            }
        },
    )
    .await;
    let lag_line = format!(
        "etcd_operator_snapshot_schedule_archive_lag_seconds{{namespace=\"{ns}\",schedule=\"arch\",cluster=\"arc\"}} 0"
    );
    let metrics = env.operator.get("/metrics").await.or_panic();
    assert!(
        metrics.lines().any(|l| l == lag_line),
        "{lag_line} in the operator's metrics"
    );
    let (window, records) = archived(&minio, prefix).await;
    assert!(
        window.gaps.is_empty() && window.overlaps.is_empty(),
        "{window:?}"
    );
    assert!(window.last >= Some(written_at), "{window:?}");
    archived_once(&records, &written);

    // The schedule's first verified snapshot inside the archive's run becomes the window's base.
    let base = tests::harness::eventually(
        "a verified snapshot of the schedule is the archive's base",
        Duration::from_secs(300),
        || async {
            let s = schedules.get("arch").await.map_err(|e| e.to_string())?;
            let archive = s.status.and_then(|st| st.archive).unwrap_or_default();
            archive
                .window_start_revision
                .map(|b| (b, archive))
                .ok_or_else(|| "no windowStartRevision yet".to_string())
        },
    )
    .await;
    assert!(
        base.0 >= base.1.first_revision.unwrap_or(i64::MAX) - 1
            && Some(base.0) <= base.1.newest_revision,
        "{base:?}"
    );

    // A change of spec.archive replaces the archiver; the archive goes on with no gap and no
    // revision twice.
    schedules
        .patch(
            "arch",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"archive": {"flushInterval": "1s"}}})),
        )
        .await
        .or_panic();
    let first_uid = first.metadata.uid.clone();
    tests::harness::eventually("a new archiver Pod runs", Duration::from_secs(120), || {
        let pods = pods.clone();
        let first_uid = first_uid.clone();
        async move {
            let pod = running(pods).await?;
            let args = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers[0].args.clone())
                .unwrap_or_default();
            if pod.metadata.uid != first_uid && args.iter().any(|a| a == "--flush-interval=1s") {
                Ok(())
            } else {
                Err(format!("arch-archive is still the first one: {args:?}"))
            }
        }
    })
    .await;
    written.extend(put_keys(&mut etcd, "pitr-b/", 20).await);
    let written_at = newest(etcd.clone()).await;
    tests::harness::eventually(
        "status.archive reaches the writes after the replacement",
        Duration::from_secs(90),
        || reported(schedules.clone(), written_at),
    )
    .await;
    let (window, records) = archived(&minio, prefix).await;
    assert!(
        window.gaps.is_empty() && window.overlaps.is_empty(),
        "{window:?}"
    );
    archived_once(&records, &written);

    // Without spec.archive the archiver goes; the stored archive stays.
    schedules
        .patch(
            "arch",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"archive": null}})),
        )
        .await
        .or_panic();
    tests::harness::eventually(
        "the archiver Pod is gone and status.archive with it",
        Duration::from_secs(90),
        || async {
            let pod = pods
                .get_opt("arch-archive")
                .await
                .map_err(|e| e.to_string())?;
            let s = schedules.get("arch").await.map_err(|e| e.to_string())?;
            let archive = s.status.and_then(|st| st.archive);
            match (&pod, &archive) {
                (None, None) => Ok(()),
                _ => Err(format!(
                    "Pod {:?}, status.archive {archive:?}",
                    pod.map(|p| p.metadata.uid)
                )),
            }
        },
    )
    .await;
    let (window, _) = archived(&minio, prefix).await;
    assert!(window.last >= Some(written_at), "{window:?}");
}
