//! End to end: EtcdSnapshots of real etcd clusters taken by the snapshot Job the operator creates
//! (the operator image run by the pod runner as the snapshot agent), its phases and `Ready`
//! reasons, the artifact from the agent's termination message, and the failures that must not
//! be retried silently.

use std::time::Duration;

use api::v1alpha2::{EtcdSnapshot, PvcLocation, S3Location, SnapshotDestination, SnapshotPhase};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::backup::{create_backups_claim, create_snapshot};
use tests::e2e::{env, spec, Env};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
const RUN: Duration = Duration::from_secs(180);

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

/// `(phase, Ready reason, Ready message)` once `done` holds for them.
async fn wait_snapshot(
    env: &Env,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(Option<SnapshotPhase>, &str) -> bool,
) -> EtcdSnapshot {
    let api = Api::<EtcdSnapshot>::namespaced(env.client(), ns);
    tests::harness::eventually(what, timeout, || async {
        let s = api.get(name).await.map_err(|e| e.to_string())?;
        let status = s.status.clone().unwrap_or_default();
        let reason = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.reason.clone())
            .unwrap_or_default();
        if done(status.phase, &reason) {
            Ok(s)
        } else {
            Err(format!(
                "phase {:?}, Ready {reason}: {:?}",
                status.phase, status.conditions
            ))
        }
    })
    .await
}

fn ready(s: &EtcdSnapshot) -> (String, String, String) {
    s.status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pvc_snapshot_completes_with_the_stored_files_size_and_sha256() {
    let env = env().await;
    let ns = env.namespace("snap").await;
    let name = "sp";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 200).await;

    create_backups_claim(env, &ns).await;
    create_snapshot(env, &ns, "first", name, backups_dest()).await;
    let s = wait_snapshot(env, &ns, "first", "Complete", RUN, |p, _| {
        p.is_some_and(|p| p.is_terminal())
    })
    .await;
    let status = s.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(SnapshotPhase::Complete),
        "{:?}",
        ready(&s)
    );
    assert_eq!(ready(&s).1, "SnapshotStored");
    let artifact = status.artifact.expect("status.artifact");
    assert_eq!(artifact.uri, "pvc://backups/etcd/first.db");
    assert!(status.start_time.is_some() && status.completion_time.is_some());

    // The file on the claim is what the status says.
    let dir = env.runner.claim_dir(&ns, "backups").await.or_panic();
    let bytes = std::fs::read(dir.join("etcd/first.db")).or_panic();
    assert_eq!(bytes.len() as i64, artifact.size_bytes);
    assert_eq!(
        artifact.checksum,
        format!(
            "sha256:{}",
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &bytes)
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    );
    let sidecar = std::fs::read_to_string(dir.join("etcd/first.db.uid")).or_panic();
    assert_eq!(sidecar.trim(), s.metadata.uid.clone().unwrap_or_default());
    // Taking it changed nothing in the cluster.
    env.check_keys(&ns, name, &keys).await;

    // A snapshot whose file already belongs to another snapshot is refused: the first one's file
    // and sidecar are put where the second one writes.
    std::fs::rename(dir.join("etcd/first.db"), dir.join("etcd/first-again.db")).or_panic();
    std::fs::rename(
        dir.join("etcd/first.db.uid"),
        dir.join("etcd/first-again.db.uid"),
    )
    .or_panic();
    create_snapshot(env, &ns, "first-again", name, backups_dest()).await;
    let s = wait_snapshot(env, &ns, "first-again", "Failed", RUN, |p, _| {
        p.is_some_and(|p| p.is_terminal())
    })
    .await;
    let (_, reason, message) = ready(&s);
    assert_eq!(
        s.status.and_then(|st| st.phase),
        Some(SnapshotPhase::Failed)
    );
    assert_eq!(reason, "JobFailed");
    assert!(message.contains("first-again.db"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_a_missing_cluster_waits_and_a_deleted_job_fails_it() {
    let env = env().await;
    let ns = env.namespace("snaplost").await;

    // No such cluster: Pending with ClusterNotFound, and no Job.
    let dest = SnapshotDestination {
        // TEST-NET-1: nothing answers, so the agent is still connecting when its Job is deleted.
        s3: Some(S3Location {
            endpoint: Some("http://192.0.2.1:9000".into()),
            bucket: "b".into(),
            force_path_style: Some(true),
            credentials_secret_ref: Some(api::v1alpha2::SecretReference::new("s3-creds")),
            ..Default::default()
        }),
        pvc: None,
    };
    let _: k8s_openapi::api::core::v1::Secret = tests::harness::create(
        &env.client(),
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"},
               "stringData": {"AWS_ACCESS_KEY_ID": "writer", "AWS_SECRET_ACCESS_KEY": "not-checked"}}),
    )
    .await;
    create_snapshot(env, &ns, "orphan", "nope", dest.clone()).await;
    let s = wait_snapshot(env, &ns, "orphan", "ClusterNotFound", RUN, |p, r| {
        p == Some(SnapshotPhase::Pending) && r == "ClusterNotFound"
    })
    .await;
    assert!(ready(&s).2.contains("nope"), "{:?}", ready(&s));
    let jobs = Api::<Job>::namespaced(env.client(), &ns);
    assert!(jobs.get_opt("orphan-snapshot").await.or_panic().is_none());

    // A Job deleted while the agent runs: Failed with SnapshotJobLost, never re-run.
    let name = "sl";
    env.create_cluster(&ns, name, spec(1)).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;
    create_snapshot(env, &ns, "lost", name, dest).await;
    wait_snapshot(env, &ns, "lost", "Started", RUN, |p, _| {
        p == Some(SnapshotPhase::Started)
    })
    .await;
    jobs.delete(
        "lost-snapshot",
        &DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
            ..Default::default()
        },
    )
    .await
    .or_panic();
    let s = wait_snapshot(env, &ns, "lost", "SnapshotJobLost", RUN, |p, _| {
        p.is_some_and(|p| p.is_terminal())
    })
    .await;
    let (_, reason, message) = ready(&s);
    assert_eq!(reason, "SnapshotJobLost", "{message}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        jobs.get_opt("lost-snapshot").await.or_panic().is_none(),
        "the snapshot Job was re-created"
    );
}

/// The reference runbook picks "a member Pod" with `kubectl get pod -l
/// etcd-operator.cozystack.io/cluster=<cluster> -o jsonpath='{.items[0].metadata.name}'` and runs
/// `etcdctl` in it. A finished snapshot Job's Pod whose name sorts before every member's must not
/// be that `.items[0]`: Job Pods name their cluster under their own label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runbooks_member_pod_recipe_skips_a_snapshot_job_pod_that_sorts_first() {
    let env = env().await;
    let ns = env.namespace("recipe").await;
    let name = "rb";
    env.create_cluster(&ns, name, spec(1)).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;
    let keys = env.write_keys(&ns, name, 20).await;

    // "a-first-snapshot-xxxxx" sorts before "rb-xxxxx", the member's Pod.
    create_backups_claim(env, &ns).await;
    create_snapshot(env, &ns, "a-first", name, backups_dest()).await;
    let s = wait_snapshot(env, &ns, "a-first", "Complete", RUN, |p, _| {
        p.is_some_and(|p| p.is_terminal())
    })
    .await;
    assert_eq!(
        s.status.as_ref().and_then(|st| st.phase),
        Some(SnapshotPhase::Complete),
        "{:?}",
        ready(&s)
    );
    let pods = Api::<Pod>::namespaced(env.client(), &ns);
    let job_pods = pods
        .list(&ListParams::default().labels("job-name=a-first-snapshot"))
        .await
        .or_panic()
        .items;
    let job_pod = job_pods
        .first()
        .unwrap_or_else(|| panic!("the snapshot Job's finished Pod is gone: {job_pods:?}"));
    let job_pod_name = job_pod.name_any();
    let members: Vec<String> = env
        .members(&ns, name)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert!(
        members.iter().all(|m| job_pod_name < *m),
        "the Job Pod {job_pod_name} must sort before the members {members:?} for this test"
    );
    let labels = job_pod.labels();
    assert_eq!(
        labels.get(api::labels::JOB_CLUSTER).map(String::as_str),
        Some(name),
        "{labels:?}"
    );
    assert!(!labels.contains_key(api::labels::CLUSTER), "{labels:?}");

    // The recipe, as the runbook writes it, with the real kubectl.
    let selector = format!("{}={name}", api::labels::CLUSTER);
    let pod = env
        .cp
        .kubectl_ok(&[
            "get",
            "pod",
            "-l",
            &selector,
            "-n",
            &ns,
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .await
        .or_panic();
    let pod = pod.trim().to_string();
    assert!(
        members.contains(&pod),
        "`kubectl get pod -l {selector}` put {pod:?} first, not a member of {members:?}"
    );
    let out = env
        .cp
        .kubectl(&[
            "exec",
            "-n",
            &ns,
            &pod,
            "--",
            "etcdctl",
            "--endpoints=http://localhost:2379",
            "endpoint",
            "health",
            "--cluster",
        ])
        .await
        .or_panic();
    assert!(
        out.success && format!("{}{}", out.stdout, out.stderr).contains("is healthy"),
        "etcdctl in {pod}: {out:?}"
    );
    // The Job's Pods are found under their own label (with the component: the snapshot's
    // verification Job runs beside it under the same cluster label, component `verify`).
    let job_selector = format!(
        "{}={name},{}=snapshot",
        api::labels::JOB_CLUSTER,
        api::labels::APP_COMPONENT
    );
    let listed = env
        .cp
        .kubectl_ok(&[
            "get",
            "pod",
            "-l",
            &job_selector,
            "-n",
            &ns,
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await
        .or_panic();
    assert_eq!(listed.trim(), job_pod_name);
    env.check_keys(&ns, name, &keys).await;
}
