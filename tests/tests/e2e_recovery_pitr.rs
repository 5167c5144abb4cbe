//! End to end, `EtcdRecovery` to a point in time (`spec.source.pointInTime`): the state built off
//! to the side from a schedule's verified snapshot and its continuous archive (in MinIO), then
//! restored in place (docs/point-in-time-recovery.md).
//!
//! To the newest point: a 3-member cluster whose schedule archives it (`flushInterval: 500ms`)
//! and has a verified snapshot as the archive's base, a writer acknowledging puts until every
//! member is lost with its PVC; `EtcdRecovery{pointInTime: {schedule}}` brings it back with every
//! write acknowledged more than `flushInterval` + 1 s before the loss, each with its value (the
//! measured RPO is printed), the revision above the pre-loss maximum, a watch from it told of the
//! compaction, the same client Service.
//!
//! To a revision: on a healthy cluster, `revision: R` in the middle of the archive with
//! `confirmHealthyClusterRollback`: the keyspace is exactly the cluster's at R, nothing written
//! after it, and the build's proof is recorded.
//!
//! Every test runs its own operator limited to its namespace; the control plane and the pod
//! runner are shared by the binary.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::v1alpha2::{
    EtcdRecovery, EtcdSnapshotSchedule, PointInTimeSource, PointInTimeStatus, RecoveryPhase,
    RecoverySource,
};
use etcd_client::GetOptions;
use kube::Api;
use serde_json::json;
use tokio::sync::OnceCell;

use tests::e2e::{spec, Env};
use tests::harness::eventually;
use tests::operator::{shared_env, Scope};
use tests::podrunner::PodRunner;
use tests::recovery::{assert_rebuilt, before, create_recovery, lose_all, phase, wait_recovery};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(240);
/// The schedule runs every minute; its first snapshot verifies within a minute or two.
const BASE: Duration = Duration::from_secs(300);
const RECOVER: Duration = Duration::from_secs(600);
const FLUSH: Duration = Duration::from_millis(500);

async fn lab() -> &'static Env {
    static LAB: OnceCell<Env> = OnceCell::const_new();
    LAB.get_or_init(|| shared_env(PodRunner::builder(), "pitr-idle"))
        .await
}

/// One test's namespace and its operator, with the operator image its archiver, build, snapshot
/// and restore containers run the agent from.
async fn scope(prefix: &str) -> Scope {
    let image = format!("--operator-image={}", tests::e2e::OPERATOR_IMAGE);
    Scope::new(lab().await, prefix, &[image.as_str()]).await
}

/// Cluster `name` (3 members) with keys `e2e/*`, and its schedule `<name>-s` archiving it to
/// MinIO, once the archive has a verified base. The MinIO server (keep it) and the keys.
async fn archived_cluster(
    s: &Scope,
    name: &str,
) -> (
    tests::env::minio::Minio,
    tempfile::TempDir,
    BTreeMap<String, String>,
) {
    let env = s.env;
    let ns = &s.ns;
    let (minio, root, endpoint) = env.minio(ns).await;
    env.create_cluster(ns, name, spec(3)).await;
    env.wait_healthy(ns, name, 3, BOOT).await;
    let keys = env.write_keys(ns, name, 40).await;
    let schedule = format!("{name}-s");
    let _: EtcdSnapshotSchedule = tests::harness::create(
        &env.client(),
        ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshotSchedule",
               "metadata": {"name": schedule},
               "spec": {"clusterRef": {"name": name}, "schedule": "* * * * *",
                        "snapshotTemplate": {"destination": {"s3": {
                            "endpoint": endpoint, "bucket": minio.bucket, "key": "pitr/",
                            "forcePathStyle": true,
                            "credentialsSecretRef": {"name": "s3-creds"}}}},
                        "retention": {"keepLast": 3},
                        "archive": {"flushInterval": "500ms", "hashInterval": "2s"}}}),
    )
    .await;
    let schedules: Api<EtcdSnapshotSchedule> = Api::namespaced(env.client(), ns);
    eventually(
        &format!(
            "{ns}/{schedule}: a verified snapshot is the archive's base (operator logs: {})",
            s.logs()
        ),
        BASE,
        || async {
            let status = schedules
                .get(&schedule)
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|st| st.archive)
                .unwrap_or_default();
            status
                .window_start_revision
                .map(|_| ())
                .ok_or_else(|| format!("status.archive {status:?}"))
        },
    )
    .await;
    (minio, root, keys)
}

/// The newest archived revision the schedule reports, once it is at least `revision`.
async fn archived_to(s: &Scope, schedule: &str, revision: i64) {
    let schedules: Api<EtcdSnapshotSchedule> = Api::namespaced(s.env.client(), &s.ns);
    eventually(
        &format!(
            "{}/{schedule}: the archive reaches revision {revision}",
            s.ns
        ),
        Duration::from_secs(90),
        || async {
            let archive = schedules
                .get(schedule)
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|st| st.archive)
                .unwrap_or_default();
            match archive.newest_revision {
                Some(r) if r >= revision => Ok(()),
                _ => Err(format!("status.archive {archive:?}")),
            }
        },
    )
    .await;
}

/// The recovery `name` once Complete (a Failed one fails the test), with what it built.
async fn completed(s: &Scope, name: &str) -> (EtcdRecovery, PointInTimeStatus) {
    let done = wait_recovery(s, name, "phase Complete", RECOVER, |r| match phase(r) {
        Some(RecoveryPhase::Failed) => panic!("the recovery failed: {:?}", r.status),
        p => p == Some(RecoveryPhase::Complete),
    })
    .await;
    let built = done
        .status
        .as_ref()
        .and_then(|st| st.point_in_time.clone())
        .or_panic_none();
    (done, built)
}

fn to_the_point(schedule: &str, revision: Option<i64>) -> RecoverySource {
    RecoverySource {
        point_in_time: Some(PointInTimeSource {
            schedule: schedule.into(),
            revision,
        }),
        ..Default::default()
    }
}

/// Every key under the test's prefixes and its value, at `revision` (None: now).
async fn keys_under(
    etcd: &mut etcd_client::Client,
    prefixes: &[&str],
    revision: Option<i64>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for prefix in prefixes {
        let mut options = GetOptions::new().with_prefix();
        if let Some(r) = revision {
            options = options.with_revision(r);
        }
        let answer = etcd.get(*prefix, Some(options)).await.or_panic();
        for kv in answer.kvs() {
            out.insert(
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_members_lost_come_back_at_the_newest_archived_point_losing_at_most_the_flush_interval()
{
    let s = scope("pitr-new").await;
    let env = s.env;
    let ns = s.ns.clone();
    let name = "pn";
    let (_minio, _minio_root, kept) = archived_cluster(&s, name).await;

    // A writer: each put acknowledged is remembered with the time it was acknowledged.
    let acknowledged: Arc<Mutex<Vec<(String, String, Instant)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (acknowledged, stop) = (acknowledged.clone(), stop.clone());
        let mut etcd = env.etcd_client(&ns, name).await;
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (key, value) = (format!("w/{i:06}"), format!("v{i}"));
                let put = tokio::time::timeout(
                    Duration::from_secs(2),
                    etcd.put(key.clone(), value.clone(), None),
                );
                if let Ok(Ok(_)) = put.await {
                    if let Ok(mut a) = acknowledged.lock() {
                        a.push((key, value, Instant::now()));
                    }
                    i += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(20)).await;
    let before = before(env, &ns, name, kept).await;
    let lost_at = Instant::now();
    lose_all(env, &ns, name).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.or_panic();
    let acknowledged = acknowledged.lock().map(|a| a.clone()).unwrap_or_default();
    assert!(
        acknowledged.len() > 50,
        "the writer wrote: {}",
        acknowledged.len()
    );

    create_recovery(
        &s,
        "pn-back",
        name,
        to_the_point(&format!("{name}-s"), None),
        false,
    )
    .await;
    let (done, built) = completed(&s, "pn-back").await;
    assert!(
        built.snapshot.is_some() && built.revision.is_some(),
        "{built:?}"
    );
    let plan = done
        .status
        .as_ref()
        .and_then(|st| st.plan.clone())
        .or_panic_none();
    assert_eq!(
        plan.snapshot_uri.as_deref(),
        built
            .snapshot
            .as_ref()
            .and_then(|sn| sn.s3.as_ref())
            .map(|s3| format!(
                "s3://{}/{}",
                s3.bucket,
                s3.key.as_deref().unwrap_or_default()
            ))
            .as_deref(),
        "the plan restores what the build stored"
    );
    assert_rebuilt(env, &ns, name, &done, &before, BOOT).await;
    env.check_keys(&ns, name, &before.kept).await;

    // Every write acknowledged more than flushInterval + 1 s before the loss is there, with its
    // value; the RPO is the time from the newest write kept to the loss.
    let mut etcd = env.etcd_client(&ns, name).await;
    let now = keys_under(&mut etcd, &["w/"], None).await;
    let margin = FLUSH + Duration::from_secs(1);
    let mut newest_kept: Option<Instant> = None;
    for (key, value, at) in &acknowledged {
        match now.get(key) {
            Some(v) => {
                assert_eq!(v, value, "{key}");
                newest_kept = newest_kept.max(Some(*at));
            }
            None if *at + margin <= lost_at => panic!(
                "{key}, acknowledged {:?} before the loss, is gone",
                lost_at.duration_since(*at)
            ),
            None => {}
        }
    }
    let rpo = newest_kept.map(|t| lost_at.saturating_duration_since(t));
    println!(
        "point-in-time recovery to the newest point: {} writes acknowledged, {} kept, RPO {rpo:?} \
         (flushInterval {FLUSH:?}); built at revision {:?} from {} (revision {}), {:?} hashes proven",
        acknowledged.len(),
        now.len(),
        built.revision,
        built.base,
        built.base_revision,
        built.hashes_proven
    );
    // The newest write kept is at most one write interval older than the margin allows.
    assert!(
        rpo.is_some_and(|r| r <= margin + Duration::from_secs(1)),
        "RPO {rpo:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_cluster_goes_back_to_exactly_its_keyspace_at_a_revision_when_confirmed() {
    let s = scope("pitr-rev").await;
    let env = s.env;
    let ns = s.ns.clone();
    let name = "pr";
    let (_minio, _minio_root, _kept) = archived_cluster(&s, name).await;
    let mut etcd = env.etcd_client(&ns, name).await;
    for i in 0..30 {
        etcd.put(format!("a/{i:03}"), format!("a{i}"), None)
            .await
            .or_panic();
    }
    // Overwrites and deletes before R, so R's state is not a prefix of the history.
    for i in 0..10 {
        etcd.put(format!("a/{i:03}"), format!("a{i}-again"), None)
            .await
            .or_panic();
        etcd.delete(format!("e2e/{i}"), None).await.or_panic();
    }
    let target = etcd
        .get("a/", None)
        .await
        .or_panic()
        .header()
        .map(|h| h.revision())
        .or_panic_none();
    let at_target = keys_under(&mut etcd, &["a/", "b/", "e2e/"], Some(target)).await;
    for i in 0..30 {
        etcd.put(format!("b/{i:03}"), format!("b{i}"), None)
            .await
            .or_panic();
        etcd.put(format!("a/{i:03}"), "after the target", None)
            .await
            .or_panic();
    }
    let newest = etcd
        .get("b/", None)
        .await
        .or_panic()
        .header()
        .map(|h| h.revision())
        .or_panic_none();
    archived_to(&s, &format!("{name}-s"), newest).await;
    let before = before(env, &ns, name, BTreeMap::new()).await;

    create_recovery(
        &s,
        "pr-back",
        name,
        to_the_point(&format!("{name}-s"), Some(target)),
        true,
    )
    .await;
    let (done, built) = completed(&s, "pr-back").await;
    assert_eq!(built.revision, Some(target), "{built:?}");
    assert!(built.base_revision <= target, "{built:?}");
    assert_rebuilt(env, &ns, name, &done, &before, BOOT).await;
    let mut etcd = env.etcd_client(&ns, name).await;
    assert_eq!(
        keys_under(&mut etcd, &["a/", "b/", "e2e/"], None).await,
        at_target,
        "the keyspace is exactly the cluster's at revision {target}: nothing written after it"
    );
}

trait OrPanicNone<T> {
    fn or_panic_none(self) -> T;
}

impl<T> OrPanicNone<T> for Option<T> {
    #[track_caller]
    fn or_panic_none(self) -> T {
        self.unwrap_or_else(|| panic!("missing"))
    }
}
