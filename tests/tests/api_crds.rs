//! API layer: the project's CRDs on a real kube-apiserver (with etcd, nothing else). Every corpus
//! case gets the recorded verdict from the apiserver's schema and CEL rules and from the Rust
//! validator; defaults, printer columns, and the scale and status subresources behave as the CRD
//! declares.
//!
//! Needs `ETCD_OPERATOR_TESTBINS` (see docs/testing.md). One control plane is shared by the tests
//! of this binary; the Kubernetes 1.29 run starts its own.

use std::io::Write as _;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tests::corpus;
use tests::env::{ControlPlane, Kubernetes, Testbins};
use tests::OrPanic;

async fn control_plane() -> &'static ControlPlane {
    ControlPlane::builder()
        .with_crds()
        .shared()
        .await
        .or_panic()
}

fn clusters(client: &Client, ns: &str) -> Api<DynamicObject> {
    let resource = corpus::resource("EtcdCluster").expect("the EtcdCluster CRD");
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn cluster(name: &str, ns: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": api::v1alpha2::API_VERSION,
        "kind": "EtcdCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .expect("an EtcdCluster object")
}

async fn create_cluster(client: &Client, ns: &str, name: &str, spec: Value) -> DynamicObject {
    clusters(client, ns)
        .create(&PostParams::default(), &cluster(name, ns, spec))
        .await
        .unwrap_or_else(|e| panic!("creating EtcdCluster {ns}/{name}: {e}"))
}

/// Write to the terminal past the harness's capture, so a passing test can still say something.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

async fn assert_corpus_agrees(cp: &ControlPlane) {
    let client = cp.client().or_panic();
    let ns = cp.namespace("corpus").await.or_panic();
    let cases = api::corpus::cases();
    let started = std::time::Instant::now();
    let found = corpus::disagreements(&client, &ns, &cases).await;
    let version = cp.kubernetes_version().unwrap_or(cp.kubernetes().part());
    report(&format!(
        "corpus on Kubernetes {version}: {} cases judged in {:.1?}, {} disagreements",
        cases.len(),
        started.elapsed(),
        found.len()
    ));
    cp.check_running().or_panic();
    assert!(
        found.is_empty(),
        "{} disagreement(s) with api/testdata/validation-corpus.yaml on Kubernetes {version} \
         (namespace {ns}):\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

#[tokio::test]
async fn corpus_verdicts_agree_on_current_kubernetes() {
    assert_corpus_agrees(control_plane().await).await;
}

/// Kubernetes 1.29 is the oldest minor the CRDs are meant for: its apiserver must be built. A
/// part that is missing, or recorded as unbuildable with the machine's Go, fails the test with the
/// reason (as e2e_install's 1.29 install does): the corpus never passes on one version alone.
#[tokio::test]
async fn corpus_verdicts_agree_on_kubernetes_1_29() {
    let bins = Testbins::from_env().or_panic();
    bins.part_dir(Kubernetes::V1_29.part()).or_panic();
    let cp = ControlPlane::builder()
        .kubernetes(Kubernetes::V1_29)
        .with_crds()
        .start()
        .await
        .or_panic();
    assert_corpus_agrees(&cp).await;
}

#[tokio::test]
async fn defaults_fill_replicas_storage_size_and_progress_deadline() {
    let cp = control_plane().await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("defaults").await.or_panic();
    create_cluster(&client, &ns, "minimal", json!({"version": "3.6.11"})).await;

    let got = clusters(&client, &ns).get("minimal").await.or_panic();
    let spec = &got.data["spec"];
    assert_eq!(spec["replicas"], json!(3), "{spec}");
    assert_eq!(spec["storage"]["size"], json!("1Gi"), "{spec}");
    assert_eq!(spec["progressDeadlineSeconds"], json!(600), "{spec}");

    // What the apiserver stored reads back into the Rust type with the same defaults.
    let typed = Api::<api::v1alpha2::EtcdCluster>::namespaced(client, &ns)
        .get("minimal")
        .await
        .or_panic();
    assert_eq!(typed.spec.replicas, api::v1alpha2::DEFAULT_REPLICAS);
    assert_eq!(
        typed.spec.progress_deadline_seconds,
        api::v1alpha2::DEFAULT_PROGRESS_DEADLINE_SECONDS
    );
}

#[tokio::test]
async fn issuer_reference_kind_defaults_to_issuer() {
    let cp = control_plane().await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("issuer").await.or_panic();
    create_cluster(
        &client,
        &ns,
        "peer-cm",
        json!({"version": "3.6.11", "tls": {"peer": {"certManager": {"issuerRef": {"name": "ca"}}}}}),
    )
    .await;

    let got = clusters(&client, &ns).get("peer-cm").await.or_panic();
    let issuer = &got.data["spec"]["tls"]["peer"]["certManager"]["issuerRef"];
    assert_eq!(issuer["kind"], json!("Issuer"), "{issuer}");
    assert_eq!(issuer["group"], json!("cert-manager.io"), "{issuer}");
}

#[tokio::test]
async fn kubectl_get_prints_version_replicas_ready_and_age_columns() {
    let cp = control_plane().await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("columns").await.or_panic();
    create_cluster(
        &client,
        &ns,
        "printed",
        json!({"version": "3.6.11", "replicas": 5}),
    )
    .await;
    clusters(&client, &ns)
        .patch_status(
            "printed",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyMembers": 2}})),
        )
        .await
        .or_panic();

    let out = cp
        .kubectl_ok(&["get", "etcdcluster", "printed", "-n", &ns])
        .await
        .or_panic();
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.first().map(Vec::as_slice),
        Some(&["NAME", "VERSION", "REPLICAS", "READY", "AGE"][..]),
        "{out}"
    );
    assert_eq!(
        rows.get(1).map(|r| &r[..r.len().min(4)]),
        Some(&["printed", "3.6.11", "5", "2"][..]),
        "{out}"
    );
}

#[tokio::test]
async fn scale_subresource_sets_spec_replicas_and_reads_ready_members_and_selector() {
    let cp = control_plane().await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("scale").await.or_panic();
    let api = clusters(&client, &ns);
    create_cluster(&client, &ns, "scaled", json!({"version": "3.6.11"})).await;

    cp.kubectl_ok(&["scale", "etcdcluster", "scaled", "--replicas=5", "-n", &ns])
        .await
        .or_panic();
    let got = api.get("scaled").await.or_panic();
    assert_eq!(got.data["spec"]["replicas"], json!(5), "{:?}", got.data);

    let selector = "app.kubernetes.io/instance=scaled";
    api.patch_status(
        "scaled",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"readyMembers": 2, "selector": selector}})),
    )
    .await
    .or_panic();

    let out = cp
        .kubectl_ok(&[
            "get",
            "etcdcluster",
            "scaled",
            "-n",
            &ns,
            "--subresource=scale",
            "-o",
            "json",
        ])
        .await
        .or_panic();
    let scale: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(scale["kind"], json!("Scale"), "{scale}");
    assert_eq!(scale["spec"]["replicas"], json!(5), "{scale}");
    assert_eq!(scale["status"]["replicas"], json!(2), "{scale}");
    assert_eq!(scale["status"]["selector"], json!(selector), "{scale}");

    let scale = api.get_scale("scaled").await.or_panic();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(5));
    let status = scale.status.expect("scale status");
    assert_eq!(status.replicas, 2);
    assert_eq!(status.selector.as_deref(), Some(selector));
}

/// `split` has `replicas` in its spec, `ready` in its status, and is at generation 2.
async fn assert_split(api: &Api<DynamicObject>, replicas: i64, ready: i64) {
    let got = api.get("split").await.or_panic();
    let data = &got.data;
    assert_eq!(data["spec"]["replicas"], json!(replicas), "{data:?}");
    assert_eq!(data["status"]["readyMembers"], json!(ready), "{data:?}");
    assert_eq!(got.metadata.generation, Some(2));
}

#[tokio::test]
async fn spec_writes_ignore_status_and_status_writes_ignore_spec() {
    let cp = control_plane().await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("status").await.or_panic();
    let api = clusters(&client, &ns);
    let created = create_cluster(
        &client,
        &ns,
        "split",
        json!({"version": "3.6.11", "replicas": 3}),
    )
    .await;
    assert_eq!(created.metadata.generation, Some(1));

    api.patch_status(
        "split",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"readyMembers": 1}})),
    )
    .await
    .or_panic();
    let got = api.get("split").await.or_panic();
    assert_eq!(
        got.data["status"]["readyMembers"],
        json!(1),
        "{:?}",
        got.data
    );
    assert_eq!(
        got.metadata.generation,
        Some(1),
        "a status write bumped the generation"
    );

    // A write to the main resource changes the spec and drops the status it carries.
    let mut update = got.clone();
    update.data["spec"]["replicas"] = json!(4);
    update.data["status"]["readyMembers"] = json!(9);
    api.replace("split", &PostParams::default(), &update)
        .await
        .or_panic();
    assert_split(&api, 4, 1).await;

    // A write to the status subresource changes the status and drops the spec it carries.
    api.patch_status(
        "split",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 7}, "status": {"readyMembers": 2}})),
    )
    .await
    .or_panic();
    assert_split(&api, 4, 2).await;
}

/// The reference operator latches the whole spec into `status.observed` and reads it back (a
/// pruned `storage.size` reads as "0" there and no PVC can be made): every field it writes must
/// survive our schema, as must a reference-shaped EtcdDefrag with its status.
#[tokio::test]
async fn reference_shaped_observed_snapshot_and_defrag_status_are_kept_whole() {
    let cp = control_plane().await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("reference").await.or_panic();
    let api = clusters(&client, &ns);
    create_cluster(&client, &ns, "latched", json!({"version": "3.6.11"})).await;
    let observed = json!({
        "replicas": 3,
        "version": "3.6.11",
        "storage": {"size": "10Gi", "storageClassName": "fast"},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "options": {"quotaBackendBytes": 8589934592i64, "autoCompactionMode": "periodic",
                    "autoCompactionRetention": "1h", "snapshotCount": 10000},
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                       "whenUnsatisfiable": "ScheduleAnyway"}],
        "imagePullSecrets": [{"name": "registry"}],
        "additionalMetadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
    });
    api.patch_status(
        "latched",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observed": observed}})),
    )
    .await
    .or_panic();
    let got = api.get("latched").await.or_panic();
    assert_eq!(got.data["status"]["observed"], observed, "{:?}", got.data);

    let resource = corpus::resource("EtcdDefrag").expect("the EtcdDefrag CRD");
    let defrags: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let spec = json!({"clusterRef": {"name": "latched"}, "ttlSecondsAfterFinished": 600,
                      "rule": {"freeSpaceAbove": "100Mi", "quotaUsageAbove": "80%",
                               "minReclaim": "16Mi"}});
    let defrag: DynamicObject = serde_json::from_value(json!({
        "apiVersion": api::v1alpha2::API_VERSION, "kind": "EtcdDefrag",
        "metadata": {"name": "weekly", "namespace": ns}, "spec": spec,
    }))
    .or_panic();
    defrags
        .create(&PostParams::default(), &defrag)
        .await
        .or_panic();
    let status = json!({
        "phase": "Complete", "startedAt": "2026-06-01T10:00:00Z",
        "completedAt": "2026-06-01T10:05:00Z", "defragmented": 1,
        "members": [{"name": "latched-abcde", "role": "follower", "outcome": "Defragmented",
                     "dbSizeBefore": 300000000i64, "dbSizeAfter": 100000000i64,
                     "reclaimedBytes": 200000000i64, "finishedAt": "2026-06-01T10:04:00Z"},
                    {"name": "latched-fghij", "role": "leader", "outcome": "Skipped",
                     "reason": "below freeSpaceAbove"}],
    });
    defrags
        .patch_status(
            "weekly",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .or_panic();
    let got = defrags.get("weekly").await.or_panic();
    assert_eq!(got.data["spec"], spec, "{:?}", got.data);
    assert_eq!(got.data["status"], status, "{:?}", got.data);
}

/// The reference's answer to toggling TLS after create, from the apiserver's own CEL rule:
/// adding or removing `spec.tls` (here cert-manager TLS) is rejected with its message.
#[tokio::test]
async fn adding_or_removing_tls_after_create_is_rejected_with_the_reference_message() {
    let cp = control_plane().await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("tls-toggle").await.or_panic();
    let want =
        "spec.tls cannot be added to or removed from an existing cluster; delete and recreate";
    let tls = json!({"client": {"certManager": {"serverIssuerRef": {"name": "ca"}}},
                     "peer": {"certManager": {"issuerRef": {"name": "ca"}}}});
    create_cluster(
        &client,
        &ns,
        "with-tls",
        json!({"version": "3.6.11", "tls": tls}),
    )
    .await;
    create_cluster(&client, &ns, "plain", json!({"version": "3.6.11"})).await;
    let api = clusters(&client, &ns);
    for (name, patch) in [
        ("with-tls", json!({"spec": {"tls": null}})),
        ("plain", json!({"spec": {"tls": tls}})),
    ] {
        let err = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err("the TLS toggle is rejected");
        let text = err.to_string();
        assert!(text.contains(want), "{name}: {text}");
    }
    // Scaling a cert-manager cluster leaves spec.tls alone and is accepted.
    api.patch(
        "with-tls",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 5}})),
    )
    .await
    .or_panic();
}
