//! End to end, the environment-level faults of the fault suite (issue 26, part B): with the
//! workload writing, reading and watching through the cluster's client Service the whole time,
//! each test breaks something around the operator ([`tests::faults_env`]) and ends with the
//! workload's check (every acknowledged write readable, in order, seen once by the watcher) and
//! the cluster Available with the asked-for members:
//!
//! - the kube-apiserver restarted in the middle of a scale step and of a rollout (2);
//! - the control plane's etcd restarted in the middle of a scale step (3);
//! - a Node that stops reporting while its Node object stays: the real node lifecycle and taint
//!   eviction controllers mark it NotReady and evict the member's Pod, which stays Terminating;
//!   the operator replaces the member one at a time, never below quorum (8);
//! - the webhook down while users edit: CEL still refuses a bad edit, a good one is admitted and
//!   acted on; with the chart's `Fail` policy edits wait for the webhook instead (10);
//! - MinIO killed in the middle of a snapshot's multipart upload: the snapshot completes with the
//!   whole object or fails with none, and no multipart upload is left (11);
//! - cert-manager down while a Certificate renews: the members keep serving the old leaf, the
//!   renewal completes once it is back, no member restarts (12);
//! - the operator restarted with another `--etcd-image-repository` in the middle of a rollout
//!   (3.5 → 3.6): every member ends on the new repository and version, one at a time (14); and
//!   what keeps that restart cheap, an operator stopped by SIGTERM releasing its leader Lease.
//!
//! Each test prints the workload's report row and the operator Events it saw (the figures of
//! docs/reliability.md, "Environment faults"). The faults that restart the apiserver or its etcd
//! or need the node lifecycle controllers get a control plane of their own; the others share the
//! binary's control plane and pod runner, each with its own operator limited to its namespace.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::v1alpha2::{
    ClientCertManagerSpec, ClientTlsSpec, EtcdClusterSpec, EtcdSnapshot, IssuerKind,
    IssuerReference, PeerCertManagerSpec, PeerTlsSpec, S3Location, SecretReference,
    SnapshotDestination, SnapshotPhase, TlsSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::e2e::{condition, spec, stage_with, Env, Start};
use tests::env::{CertManager, ControlPlane, NodeLifecycle};
use tests::faults_env::{self, Stop};
use tests::harness::{eventually, eventually_every, poll};
use tests::operator::{shared_env, Operator, Scope};
use tests::podrunner::PodRunner;
use tests::quorum;
use tests::rollout::{uids, wait_rolled};
use tests::tls::{cm_create, renew};
use tests::workload::{Report, Workload, AVAILABLE_WRITE_GAP};
use tests::OrPanic;
use tokio::sync::OnceCell;

const BOOT: Duration = Duration::from_secs(240);
const HEAL: Duration = Duration::from_secs(300);
const ROLL: Duration = Duration::from_secs(420);
/// An etcd image repository other than the default, as an air-gapped install would mirror it.
const MIRROR: &str = "registry.example.test/mirror/etcd";
const OPERATOR_IMAGE_ARG: &str = "--operator-image=etcd-operator:test";

// ---------------------------------------------------------------------------------------------
// Environments

/// The binary's shared control plane and pod runner: for the faults that break nothing shared.
/// Each test brings its own operator (see [`scope`]).
async fn lab() -> &'static Env {
    static LAB: OnceCell<Env> = OnceCell::const_new();
    LAB.get_or_init(|| shared_env(PodRunner::builder().etcd_repository(MIRROR), "faults-idle"))
        .await
}

/// A test's namespace in the lab and the operator that owns it.
async fn scope(prefix: &str) -> Scope {
    Scope::new(lab().await, prefix, &[OPERATOR_IMAGE_ARG]).await
}

/// A control plane, pod runner and cluster-wide operator of their own (`tag`), for a fault that
/// hits the whole control plane.
async fn apart(tag: &'static str) -> Env {
    stage_with(Start::default().apart(tag))
        .await
        .operator(None, &[])
        .await
}

/// The workload's report row (its label is the fault; the operator's Events about the cluster
/// and its members are in it) and what was done, printed for docs/reliability.md.
fn record(what: &str, report: &Report) {
    eprintln!(
        "reliability: {report}\nreliability: {} — {what}",
        report.label
    );
}

/// Every member of the cluster is a voter in etcd's own member list, `replicas` of them.
///
/// The list is asked inside a member Pod once every member answers on its own client endpoint: a
/// member that has just joined is Ready (etcd's `/health` on the metrics port, the readiness
/// probe, passes once it has a leader and reads) several seconds before it has published itself
/// through raft and serves on its client port, and an `etcdctl member list` sent to it then times
/// out (seen under load: the 5th member, Ready and just promoted, still not serving 5 s later).
async fn voters(env: &Env, ns: &str, name: &str, replicas: usize) {
    eventually_every(
        &format!("{ns}/{name}: every member serving on its client endpoint"),
        HEAL,
        Duration::from_secs(1),
        || async {
            let views = env.member_views(ns, name).await;
            if views.values().all(Result::is_ok) {
                Ok(())
            } else {
                Err(format!("{views:?}"))
            }
        },
    )
    .await;
    let members = env.etcd_members(ns, name).await;
    assert_eq!(members.len(), replicas, "etcd's member list: {members:?}");
    assert!(
        members.iter().all(|(_, learner)| !learner),
        "a learner left behind: {members:?}"
    );
}

/// Wait until the cluster has more EtcdMembers than `than` (a scale-up step under way).
async fn step_started(env: &Env, ns: &str, name: &str, than: usize) {
    eventually(
        &format!("{ns}/{name}: a scale step under way"),
        HEAL,
        || async {
            let members = env.member_names(ns, name).await;
            (members.len() > than)
                .then_some(())
                .ok_or(format!("{members:?}"))
        },
    )
    .await;
}

/// Wait until a rollout has restarted its first member (a member Pod of `before` replaced or
/// Terminating).
async fn rollout_started(env: &Env, ns: &str, name: &str, before: &BTreeMap<String, String>) {
    eventually(
        &format!("{ns}/{name}: the rollout's first restart"),
        ROLL,
        || async {
            let pods = env.pods(ns, name).await;
            let moved = pods.iter().any(|p| {
                p.metadata.deletion_timestamp.is_some()
                    || before.get(&p.name_any()) != p.uid().as_ref()
            }) || pods.len() < before.len();
            moved.then_some(()).ok_or(format!("{:?}", uids(&pods)))
        },
    )
    .await;
}

/// Delete the cluster while its operator still runs (its members' finalizers need it), so a
/// finished test stops competing for the CPU. Best effort: a cleanup, not a check.
async fn finish(env: &Env, ns: &str, name: &str) {
    let _ = env
        .cp
        .kubectl(&["delete", "etcdcluster", name, "-n", ns, "--wait=false"])
        .await;
    let _ = poll(
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            if env.pods(ns, name).await.is_empty() {
                Ok(())
            } else {
                Err(())
            }
        },
    )
    .await;
}

async fn patch_spec(env: &Env, ns: &str, name: &str, spec: serde_json::Value) {
    env.clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .or_panic();
}

// ---------------------------------------------------------------------------------------------
// 2, 3: the control plane restarted

/// The kube-apiserver crashes while the operator adds the 4th member of a 3 → 5 scale-up, and is
/// restarted gracefully while it rolls a resources change: the operator's watches reconnect, the
/// scale finishes at 5 voters, the rollout at one member at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restarted_in_a_scale_step_and_in_a_rollout() {
    let env = apart("faults-apiserver").await;
    let ns = env.namespace("f-apiserver").await;
    let name = "api";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let workload = Workload::start(&env, &ns, name)
        .await
        .named("2 kube-apiserver restarted");
    tokio::time::sleep(Duration::from_secs(5)).await;

    env.scale(&ns, name, 5).await;
    step_started(&env, &ns, name, 3).await;
    workload.fault_started();
    let down = faults_env::restart_apiserver(env.cp, Stop::Crash)
        .await
        .or_panic();
    env.wait_healthy(&ns, name, 5, HEAL).await;
    workload.fault_ended();
    voters(&env, &ns, name, 5).await;

    let before = uids(&env.pods(&ns, name).await);
    patch_spec(
        &env,
        &ns,
        name,
        json!({"resources": {"requests": {"cpu": "150m"}}}),
    )
    .await;
    rollout_started(&env, &ns, name, &before).await;
    workload.fault_started();
    let down_rollout = faults_env::restart_apiserver(env.cp, Stop::Graceful)
        .await
        .or_panic();
    // Not the operator's part: kube-scheduler can keep a ghost of the Pod the rollout deleted
    // while the apiserver was down and leave its successor Pending for good (its cache
    // "corrupted", seen here once in four runs); restarted as an operator of the control plane
    // would restart it (docs/reliability.md, "Environment faults").
    env.cp.restart_scheduler().await.or_panic();
    let (fewest_ready, reasons) = wait_rolled(&env, &ns, name, 5, &before, ROLL).await;
    workload.fault_ended();
    let report = workload.finish().await;
    report.assert_available(AVAILABLE_WRITE_GAP);
    assert!(
        fewest_ready >= 4,
        "only {fewest_ready} of 5 Ready in the rollout"
    );
    assert!(reasons.contains("SpecChanged"), "{reasons:?}");
    voters(&env, &ns, name, 5).await;
    env.wait_healthy(&ns, name, 5, HEAL).await;
    record(
        &format!(
            "kube-apiserver SIGKILLed while the 4th member of 3 → 5 was added (down {down:.1?}), \
             then SIGTERMed in a resources rollout of 5 (down {down_rollout:.1?})"
        ),
        &report,
    );
}

/// The control plane's etcd crashes while the operator adds the 4th member of a 3 → 5 scale-up:
/// every watch of the operator is reset, resourceVersions continue from etcd's data, the scale
/// finishes with 5 voters and the first three members keep their etcd IDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_etcd_restarted_in_a_scale_step() {
    let env = apart("faults-etcd").await;
    let ns = env.namespace("f-etcd").await;
    let name = "cpe";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let ids = env.member_ids(&ns, name).await;
    let workload = Workload::start(&env, &ns, name)
        .await
        .named("3 control plane etcd restarted");
    tokio::time::sleep(Duration::from_secs(5)).await;

    env.scale(&ns, name, 5).await;
    step_started(&env, &ns, name, 3).await;
    workload.fault_started();
    let down = faults_env::restart_control_plane_etcd(env.cp, Stop::Crash)
        .await
        .or_panic();
    env.wait_healthy(&ns, name, 5, HEAL).await;
    workload.fault_ended();
    let report = workload.finish().await;
    report.assert_available(AVAILABLE_WRITE_GAP);
    voters(&env, &ns, name, 5).await;
    let after = env.member_ids(&ns, name).await;
    for (member, id) in &ids {
        assert_eq!(
            after.get(member),
            Some(id),
            "member {member} changed: {after:?}"
        );
    }
    record(
        &format!(
            "control plane's etcd SIGKILLed while the 4th member of 3 → 5 was added (down {down:.1?})"
        ),
        &report,
    );
}

// ---------------------------------------------------------------------------------------------
// 8: a Node NotReady, its member's Pod stuck Terminating

/// A control plane with the node lifecycle and taint eviction controllers (30 s grace, 10 s
/// tolerations), four Nodes, and an operator replacing unreachable members after 20 s.
async fn lifecycle_env() -> Env {
    let cp: &'static ControlPlane = ControlPlane::builder()
        .with_crds()
        .with_controller_manager()
        .with_scheduler()
        .with_node_lifecycle(NodeLifecycle::default())
        .shared()
        .await
        .or_panic();
    let runner = PodRunner::builder()
        .nodes(4)
        .node_prefix("lifecycle")
        .start(cp)
        .await
        .or_panic();
    let lease_ns = cp.namespace("operator").await.or_panic();
    let operator = Operator::start_with(
        cp,
        &lease_ns,
        None,
        &[OPERATOR_IMAGE_ARG, "--replace-broken-members-after=20s"],
    )
    .await
    .or_panic();
    Env {
        cp,
        runner,
        operator,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_on_a_node_gone_not_ready_is_replaced_without_losing_quorum() {
    let env = lifecycle_env().await;
    let ns = env.namespace("f-node").await;
    let name = "nn";
    // One member per Node, so one dead Node costs one member.
    let one_per_node = serde_json::from_value(json!({
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {api::labels::CLUSTER: name}},
        }]},
    }))
    .or_panic();
    env.create_cluster(
        &ns,
        name,
        EtcdClusterSpec {
            affinity: Some(one_per_node),
            ..spec(3)
        },
    )
    .await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let before = env.member_ids(&ns, name).await;
    let pods = env.pods(&ns, name).await;
    let victim = pods.first().expect("a member Pod").clone();
    let node = victim
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a scheduled member");
    let workload = Workload::start(&env, &ns, name)
        .await
        .named("8 Node NotReady");
    tokio::time::sleep(Duration::from_secs(5)).await;

    // etcd's member list and the member Pods' readiness through the fault, every change kept.
    let sampler = quorum::watch(env.client(), &ns, name);
    workload.fault_started();
    let began = Instant::now();
    let not_ready = faults_env::node_not_ready(env.cp, &env.runner, &node)
        .await
        .or_panic();
    let uid = faults_env::wait_stuck_terminating(env.cp, &ns, &victim.name_any(), HEAL)
        .await
        .or_panic();
    assert_eq!(Some(&uid), victim.metadata.uid.as_ref());
    let evicted = began.elapsed();
    let victim_member = victim.name_any();
    eventually(
        &format!("{ns}/{name}: member {victim_member} replaced"),
        HEAL,
        || async {
            let ids = env.member_ids(&ns, name).await;
            (!ids.contains_key(&victim_member)
                && ids.len() == 3
                && ids.values().all(|i| !i.is_empty()))
            .then_some(())
            .ok_or(format!("{ids:?}"))
        },
    )
    .await;
    env.wait_healthy(&ns, name, 3, HEAL).await;
    workload.fault_ended();
    let healed = began.elapsed();
    let (timeline, unanswered) = sampler.stop();
    let report = workload.finish().await;
    report.assert_available(AVAILABLE_WRITE_GAP);
    voters(&env, &ns, name, 3).await;
    // The quorum, measured: never more than the 3 voters asked for (the operator removes the
    // unreachable member before it adds its replacement, docs/reliability.md), and a majority
    // of the voters Ready in every sample; the timeline shows the victim's vote gone.
    for (i, s) in timeline.iter().enumerate() {
        eprintln!("quorum sample {i}: {s:?}");
    }
    assert!(
        !timeline.is_empty(),
        "no member list answered through the fault ({unanswered} samples unanswered)"
    );
    for s in &timeline {
        assert!(
            s.voters.len() <= 3 && s.has_majority_ready(),
            "more than 3 voters, or no Ready majority of them: {s:?} (timeline {timeline:?})"
        );
    }
    assert!(
        timeline
            .iter()
            .any(|s| !s.voters.contains(&victim_member) && !s.learners.contains(&victim_member)),
        "no sample shows {victim_member} out of etcd: {timeline:?}"
    );
    let after = env.member_ids(&ns, name).await;
    assert!(
        after
            .values()
            .all(|id| Some(id) != before.get(&victim_member)),
        "the replaced member's etcd ID is back: {after:?}"
    );
    for (m, id) in &before {
        if *m != victim_member {
            assert_eq!(after.get(m), Some(id), "survivor {m} changed");
        }
    }
    let replaced = tests::rollout::event_messages(&env, &ns, name, "MemberReplaced").await;
    assert!(
        replaced.iter().any(|m| m.contains(&node)),
        "no MemberReplaced Event naming {node}: {replaced:?}"
    );
    record(
        &format!(
            "Node {node} stopped reporting: NotReady after {not_ready:.0?}, member Pod evicted \
             and Terminating after {evicted:.0?}, replaced and 3 Ready after {healed:.0?}"
        ),
        &report,
    );
}

// ---------------------------------------------------------------------------------------------
// 10: the webhook down while users edit

/// Register `hook` for the test's namespace only (the other tests' operators write their
/// EtcdMembers under other names) with the given validating policy (mutation: Ignore, the
/// chart's default), and wait until the apiserver calls it.
async fn register_for(env: &Env, ns: &str, hook: &tests::webhook::Webhook, validation: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use tests::webhook::{mutating_configuration, validating_configuration, FailurePolicy};
    let config = format!("faults-{ns}");
    let only_ns = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    let mut validating =
        serde_json::to_value(validating_configuration(&config, hook, FailurePolicy::Fail))
            .or_panic();
    validating["webhooks"][0]["namespaceSelector"] = only_ns.clone();
    validating["webhooks"][0]["failurePolicy"] = json!(validation);
    let mut mutating =
        serde_json::to_value(mutating_configuration(&config, hook, FailurePolicy::Ignore))
            .or_panic();
    mutating["webhooks"][0]["namespaceSelector"] = only_ns;
    let pp = PatchParams::apply("e2e-faults-env").force();
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating).or_panic();
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(mutating).or_panic();
    Api::<ValidatingWebhookConfiguration>::all(env.client())
        .patch(&config, &pp, &Patch::Apply(&validating))
        .await
        .or_panic();
    Api::<MutatingWebhookConfiguration>::all(env.client())
        .patch(&config, &pp, &Patch::Apply(&mutating))
        .await
        .or_panic();
}

/// Try the edit `spec` on the cluster; the apiserver's refusal message, if refused.
async fn edit(env: &Env, ns: &str, name: &str, spec: serde_json::Value) -> Option<String> {
    match env
        .clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
    {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(status.message),
        Err(e) => panic!("editing {ns}/{name}: {e}"),
    }
}

/// With the webhook down: under the chart's `Fail` validation edits are refused naming the
/// webhook (the cluster keeps serving); under `Ignore` a downgrade is still refused by the CRD's
/// CEL rule and a scale 3 → 5 is admitted and carried out; back up, the webhook judges again. The
/// workload writes through the cluster the whole time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_down_while_users_edit() {
    let s = scope("f-webhook").await;
    let (env, ns, name) = (s.env, s.ns.clone(), "wh");
    let username = s.operator.identity().username();
    let controller = format!("--controller-username={username}");
    let hook = tests::webhook::Webhook::start(env.cp, &[&controller])
        .await
        .or_panic();
    register_for(env, &ns, &hook, "Fail").await;
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let downgrade = json!({"version": "3.5.0"});
    // The webhook answers (its own message), once the apiserver has picked the registration up.
    eventually(
        "the webhook to judge edits",
        Duration::from_secs(30),
        || async {
            match edit(env, &ns, name, downgrade.clone()).await {
                Some(m) if m.contains("admission webhook") && m.contains("denied") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let workload = Workload::start(env, &ns, name)
        .await
        .named("10 webhook down");
    tokio::time::sleep(Duration::from_secs(3)).await;

    workload.fault_started();
    let began = Instant::now();
    faults_env::stop_webhook(&hook).await;
    // The CRD's CEL rules run before validating webhooks: the downgrade is refused by CEL alone
    // (the mutating webhook, Ignore, is skipped).
    let cel_refuses = || async {
        let refused = edit(env, &ns, name, downgrade.clone()).await;
        assert!(
            refused.as_deref().is_some_and(|m| {
                m.contains(api::v1alpha2::CEL_VERSION_UPGRADE) && !m.contains("webhook")
            }),
            "the downgrade with the webhook down: {refused:?}"
        );
    };
    cel_refuses().await;
    // The chart's default, validation Fail: a good edit waits for the webhook, which is named.
    let refused = edit(env, &ns, name, json!({"replicas": 5})).await;
    assert!(
        refused
            .as_deref()
            .is_some_and(|m| m.contains("failed calling webhook")),
        "a scale with the webhook down under Fail: {refused:?}"
    );
    env.wait_healthy(&ns, name, 3, HEAL).await;

    // Ignore: CEL alone judges, the operator acts on what it admits.
    register_for(env, &ns, &hook, "Ignore").await;
    eventually(
        "the scale to be admitted once validation is Ignore",
        Duration::from_secs(30),
        || async {
            match edit(env, &ns, name, json!({"replicas": 5})).await {
                None => Ok(()),
                Some(m) => Err(m),
            }
        },
    )
    .await;
    cel_refuses().await;
    env.wait_healthy(&ns, name, 5, HEAL).await;
    assert_eq!(env.cluster(&ns, name).await.spec.version, "3.6.16");
    let down = began.elapsed();

    faults_env::start_webhook(&hook).await.or_panic();
    let back = edit(env, &ns, name, downgrade.clone()).await;
    assert!(
        back.as_deref()
            .is_some_and(|m| m.contains("admission webhook") && m.contains("denied")),
        "the webhook back: {back:?}"
    );
    workload.fault_ended();
    let report = workload.finish().await;
    report.assert_available(AVAILABLE_WRITE_GAP);
    voters(env, &ns, name, 5).await;
    record(
        &format!(
            "webhook stopped for {down:.0?} (Fail: edits refused naming it; Ignore: CEL refused \
             the downgrade, 3 → 5 admitted and carried out)"
        ),
        &report,
    );
    tests::webhook::unregister(&env.client(), &format!("faults-{ns}"))
        .await
        .or_panic();
    finish(env, &ns, name).await;
}

// ---------------------------------------------------------------------------------------------
// 11: S3 down in the middle of a multipart upload

fn sha256_hex(bytes: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_down_in_the_middle_of_a_multipart_upload() {
    let s = scope("f-s3").await;
    let (env, ns, name) = (s.env, s.ns.clone(), "s3");
    let (mut minio, _minio_root, endpoint) = env.minio(&ns).await;
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    // About 30 MiB: four parts of 8 MiB, so an upload lasts long enough to be caught mid-way.
    let mut etcd = env.etcd_client(&ns, name).await;
    for i in 0..120 {
        let value = format!("{i:03}").repeat(256 * 1024 / 3);
        etcd.put(format!("big/{i:03}"), value, None)
            .await
            .or_panic();
    }
    let workload = Workload::start(env, &ns, name)
        .await
        .named("11 S3 down mid-upload");
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Kill MinIO once the upload is in progress; an upload that finished before it was seen is
    // tried again under another name.
    let mut caught = None;
    for attempt in 0..3 {
        let snapshot = format!("mid-{attempt}");
        let key = format!("faults/{snapshot}.db");
        tests::backup::create_snapshot(
            env,
            &ns,
            &snapshot,
            name,
            SnapshotDestination {
                s3: Some(S3Location {
                    endpoint: Some(endpoint.clone()),
                    bucket: minio.bucket.clone(),
                    key: Some("faults/".into()),
                    region: None,
                    force_path_style: Some(true),
                    credentials_secret_ref: Some(SecretReference::new("s3-creds")),
                    ..Default::default()
                }),
                pvc: None,
            },
        )
        .await;
        let in_flight = poll(BOOT, Duration::from_millis(20), || async {
            if !minio.uploads(&key).await.is_empty() {
                return Ok(true);
            }
            if minio.objects().await.iter().any(|(k, _)| *k == key) {
                return Ok(false);
            }
            Err(())
        })
        .await
        .unwrap_or_else(|()| panic!("snapshot {snapshot} never started its upload"));
        if in_flight {
            faults_env::stop_minio(&mut minio);
            workload.fault_started();
            caught = Some((snapshot, key));
            break;
        }
    }
    let (snapshot, key) = caught.expect("an upload caught in progress in three attempts");
    tokio::time::sleep(Duration::from_secs(10)).await;
    faults_env::start_minio(&mut minio).await.or_panic();
    workload.fault_ended();

    let api = Api::<EtcdSnapshot>::namespaced(env.client(), &ns);
    let done = eventually(&format!("snapshot {snapshot} terminal"), HEAL, || async {
        let s = api.get(&snapshot).await.map_err(|e| e.to_string())?;
        match s.status.as_ref().and_then(|st| st.phase) {
            Some(p) if p.is_terminal() => Ok(s),
            _ => Err(format!("{:?}", s.status)),
        }
    })
    .await;
    let status = done.status.clone().unwrap_or_default();
    // No dangling upload, whichever way it ended (the agent aborts, retrying while MinIO is
    // back up).
    eventually(
        &format!("no multipart upload of {key} left"),
        Duration::from_secs(150),
        || async {
            let left = minio.uploads(&key).await;
            left.is_empty().then_some(()).ok_or(format!("{left:?}"))
        },
    )
    .await;
    let stored = minio.objects().await;
    let outcome = match status.phase {
        Some(SnapshotPhase::Complete) => {
            let artifact = status
                .artifact
                .clone()
                .expect("a Complete snapshot's artifact");
            let (size, metadata, bytes) = minio.object(&key).await;
            assert_eq!(size, artifact.size_bytes);
            assert_eq!(bytes.len() as i64, artifact.size_bytes);
            assert_eq!(artifact.checksum, format!("sha256:{}", sha256_hex(&bytes)));
            assert_eq!(metadata.get("snapshot-uid"), done.metadata.uid.as_ref());
            assert!(
                artifact.size_bytes > 25 << 20,
                "{} bytes",
                artifact.size_bytes
            );
            format!(
                "Complete after retrying ({} bytes, sha256 verified)",
                artifact.size_bytes
            )
        }
        _ => {
            assert!(
                !stored.iter().any(|(k, _)| *k == key),
                "a Failed snapshot left {key}: {stored:?}"
            );
            format!("Failed ({:?}), no object stored", status.conditions)
        }
    };
    let report = workload.finish().await;
    report.assert_available(AVAILABLE_WRITE_GAP);
    env.wait_healthy(&ns, name, 3, HEAL).await;
    record(
        &format!(
            "MinIO SIGKILLed with {snapshot}'s multipart upload in progress, back after 10 s: \
             {outcome}; no upload left"
        ),
        &report,
    );
    finish(env, &ns, name).await;
}

// ---------------------------------------------------------------------------------------------
// 12: cert-manager down while a Certificate renews

async fn cert_manager_on(env: &'static Env) -> &'static CertManager {
    static CM: OnceCell<CertManager> = OnceCell::const_new();
    CM.get_or_init(|| async { CertManager::start(env.cp).await.or_panic() })
        .await
}

/// A CA Issuer `etcd-ca` (self-signed Issuer → CA Certificate → CA Issuer).
async fn ca_issuer(env: &Env, ns: &str) {
    cm_create(
        env,
        ns,
        "Issuer",
        json!({"metadata": {"name": "selfsigned"}, "spec": {"selfSigned": {}}}),
    )
    .await;
    cm_create(
        env,
        ns,
        "Certificate",
        json!({"metadata": {"name": "etcd-ca"}, "spec": {
            "isCA": true, "commonName": "etcd-ca", "secretName": "etcd-ca",
            "privateKey": {"algorithm": "ECDSA", "size": 256},
            "issuerRef": {"name": "selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
        }}),
    )
    .await;
    cm_create(
        env,
        ns,
        "Issuer",
        json!({"metadata": {"name": "etcd-ca"}, "spec": {"ca": {"secretName": "etcd-ca"}}}),
    )
    .await;
}

fn cert_manager_spec(replicas: i32) -> EtcdClusterSpec {
    let issuer = || IssuerReference::new("etcd-ca", IssuerKind::Issuer);
    EtcdClusterSpec {
        tls: Some(TlsSpec {
            client: Some(ClientTlsSpec {
                cert_manager: Some(ClientCertManagerSpec {
                    server_issuer_ref: issuer(),
                    operator_client_issuer_ref: Some(issuer()),
                }),
                ..Default::default()
            }),
            peer: Some(PeerTlsSpec {
                secret_ref: None,
                cert_manager: Some(PeerCertManagerSpec {
                    issuer_ref: issuer(),
                }),
            }),
        }),
        ..spec(replicas)
    }
}

async fn secret_key(env: &Env, ns: &str, secret: &str, key: &str) -> String {
    let s = Api::<Secret>::namespaced(env.client(), ns)
        .get(secret)
        .await
        .or_panic();
    let bytes = s
        .data
        .and_then(|d| d.get(key).cloned())
        .unwrap_or_else(|| panic!("Secret {ns}/{secret} has no {key}"));
    String::from_utf8(bytes.0).or_panic()
}

/// Every member serves the leaf `pem` on its client port.
async fn serving(env: &Env, ns: &str, name: &str, pods: &[Pod], pem: &str, within: Duration) {
    let ca = secret_key(env, ns, &format!("{name}-server-tls"), "ca.crt").await;
    let crt = secret_key(env, ns, &format!("{name}-operator-client-tls"), "tls.crt").await;
    let key = secret_key(env, ns, &format!("{name}-operator-client-tls"), "tls.key").await;
    let want = tests::tls::der_of(pem);
    for p in pods {
        let host = format!("{}.{name}.{ns}.svc", p.name_any());
        eventually_every(
            &format!("{host} to serve the expected certificate"),
            within,
            Duration::from_secs(1),
            || async {
                let served = tests::tls::served_certificate(&host, 2379, &ca, (&crt, &key)).await;
                if served.as_ref().is_ok_and(|der| *der == want) {
                    return Ok(());
                }
                Err(format!("{:?}", served.map(|d| d.len())))
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_manager_down_while_a_certificate_renews() {
    let env = lab().await;
    let cm = cert_manager_on(env).await;
    // The operator starts after cert-manager is installed, so it watches the Certificates.
    let s = scope("f-certmanager").await;
    let (ns, name) = (s.ns.clone(), "cm");
    ca_issuer(env, &ns).await;
    env.create_cluster(&ns, name, cert_manager_spec(3)).await;
    env.wait_healthy(&ns, name, 3, HEAL).await;
    let pods = env.ready_pods(&ns, name).await;
    let before = uids(&pods);
    let server = format!("{name}-server-tls");
    let old = secret_key(env, &ns, &server, "tls.crt").await;
    let workload = Workload::start(env, &ns, name)
        .await
        .named("12 cert-manager down");
    tokio::time::sleep(Duration::from_secs(5)).await;

    workload.fault_started();
    let began = Instant::now();
    faults_env::stop_cert_manager(cm).await;
    renew(env, &ns, &format!("{name}-server")).await;
    // Nothing renews it meanwhile; the members keep serving the old leaf.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(secret_key(env, &ns, &server, "tls.crt").await, old);
    serving(env, &ns, name, &pods, &old, Duration::from_secs(10)).await;
    env.wait_healthy(&ns, name, 3, HEAL).await;

    faults_env::start_cert_manager(cm, env.cp).await.or_panic();
    let down = began.elapsed();
    let new = eventually_every(
        "cert-manager to complete the renewal once back",
        HEAL,
        Duration::from_secs(1),
        || async {
            let now = secret_key(env, &ns, &server, "tls.crt").await;
            (now != old)
                .then_some(now)
                .ok_or("the old certificate".to_string())
        },
    )
    .await;
    serving(env, &ns, name, &pods, &new, Duration::from_secs(120)).await;
    workload.fault_ended();
    let report = workload.finish().await;
    report.assert_available(AVAILABLE_WRITE_GAP);
    assert_eq!(
        uids(&env.pods(&ns, name).await),
        before,
        "a member restarted"
    );
    env.wait_healthy(&ns, name, 3, HEAL).await;
    record(
        &format!(
            "cert-manager stopped for {down:.0?} with {name}-server's renewal requested: the old \
             leaf served meanwhile, the new one by every member after, no restart"
        ),
        &report,
    );
    finish(env, &ns, name).await;
}

// ---------------------------------------------------------------------------------------------
// 14: the operator restarted with another image repository in the middle of a rollout

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_restarted_with_another_image_repository_mid_rollout() {
    let s = scope("f-registry").await;
    let (env, ns, name) = (s.env, s.ns.clone(), "reg");
    env.create_cluster(
        &ns,
        name,
        EtcdClusterSpec {
            version: "3.5.35".into(),
            ..spec(3)
        },
    )
    .await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let before = uids(&env.pods(&ns, name).await);
    let workload = Workload::start(env, &ns, name)
        .await
        .named("14 operator restarted, new repository");
    tokio::time::sleep(Duration::from_secs(5)).await;

    patch_spec(env, &ns, name, json!({"version": "3.6.16"})).await;
    rollout_started(env, &ns, name, &before).await;
    workload.fault_started();
    let mirror = format!("--etcd-image-repository={MIRROR}");
    let operator =
        faults_env::restart_operator_with(s.operator, env.cp, &[OPERATOR_IMAGE_ARG, &mirror])
            .await
            .or_panic();
    let (fewest_ready, reasons) = wait_rolled(env, &ns, name, 3, &before, ROLL).await;
    // Members rolled to 3.6 by the first operator are rolled again onto the mirror.
    let want = format!("{MIRROR}:v3.6.16");
    eventually(
        &format!("{ns}/{name}: every member on {want}"),
        ROLL,
        || async {
            let c = env.cluster(&ns, name).await;
            let images: Vec<String> = env
                .pods(&ns, name)
                .await
                .iter()
                .filter_map(|p| p.spec.as_ref()?.containers.first()?.image.clone())
                .collect();
            (images.len() == 3 && images.iter().all(|i| *i == want) && tests::e2e::healthy(&c, 3))
                .then_some(())
                .ok_or(format!("{images:?}, {:?}", condition(&c, "Progressing")))
        },
    )
    .await;
    workload.fault_ended();
    let report = workload.finish().await;
    report.assert_available(AVAILABLE_WRITE_GAP);
    assert!(
        fewest_ready >= 2,
        "quorum lost: only {fewest_ready} of 3 Ready"
    );
    voters(env, &ns, name, 3).await;
    record(
        &format!(
            "3.5.35 → 3.6.16 rollout, operator restarted after the first restart with \
             --etcd-image-repository={MIRROR}; Progressing reasons {reasons:?}"
        ),
        &report,
    );
    finish(env, &ns, name).await;
    drop(operator);
}

/// What makes fault 14's restart cheap: an operator stopped by SIGTERM (a Deployment rollout, a
/// `helm upgrade`) releases its leader Lease on the way out, so its successor takes over at once
/// instead of after the Lease's 15 s, with the clusters unattended meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_stopped_gracefully_releases_its_leader_lease() {
    let s = scope("f-lease").await;
    let lease = s
        .operator
        .identity()
        .arg("--leader-election-lease")
        .unwrap_or("etcd-operator-leader")
        .to_string();
    let leases = Api::<Lease>::namespaced(s.env.client(), &s.ns);
    let holder = || async {
        leases
            .get_opt(&lease)
            .await
            .or_panic()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty())
    };
    eventually(
        &format!("the operator to hold Lease {}/{lease}", s.ns),
        Duration::from_secs(60),
        || async { holder().await.ok_or("no holder".to_string()) },
    )
    .await;
    s.operator.stop(Duration::from_secs(10)).await;
    assert_eq!(
        holder().await,
        None,
        "Lease {}/{lease} still held after the operator exited (log {})",
        s.ns,
        s.operator.log().display()
    );
}
