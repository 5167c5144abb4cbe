//! End to end: an EtcdSnapshotSchedule firing every minute with `keepLast: 2` to a PVC, on a
//! real cluster with the real operator and snapshot Jobs: snapshots appear named after the
//! schedule and complete, the oldest are pruned (only the schedule's own), and `suspend` stops
//! new ones.

use std::collections::BTreeSet;
use std::time::Duration;

use api::labels;
use api::v1alpha2::{EtcdSnapshot, EtcdSnapshotSchedule, SnapshotPhase};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;
use tests::e2e::{env, spec};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_minute_keep_last_two_prunes_the_oldest_and_suspend_stops_it() {
    let env = env().await;
    let ns = env.namespace("sched").await;
    env.create_cluster(&ns, "sc", spec(1)).await;
    env.wait_healthy(&ns, "sc", 1, BOOT).await;
    let _: PersistentVolumeClaim = tests::harness::create(
        &env.client(),
        &ns,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "backups"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
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
    let status = schedules
        .get("every-minute")
        .await
        .or_panic()
        .status
        .unwrap_or_default();
    assert!(status.last_schedule_time.is_some() && status.last_successful_time.is_some());

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
}
