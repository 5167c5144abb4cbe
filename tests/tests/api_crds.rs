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

/// A condition as the operator writes it (the schema requires every field).
fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": "as the operator says",
           "lastTransitionTime": "2026-06-01T10:00:00Z"})
}

/// Create `kind` objects in `ns`, each `(name, spec, status)`; the status is written through the
/// status subresource, as the operator writes it.
async fn create_with_status(
    client: &Client,
    ns: &str,
    kind: &str,
    objects: &[(&str, Value, Option<Value>)],
) {
    let resource = corpus::resource(kind).unwrap_or_else(|| panic!("the {kind} CRD"));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    for (name, spec, status) in objects {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": api::v1alpha2::API_VERSION, "kind": kind,
            "metadata": {"name": name, "namespace": ns}, "spec": spec,
        }))
        .or_panic();
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {kind} {ns}/{name}: {e}"));
        if let Some(status) = status {
            api.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("writing the status of {kind} {ns}/{name}: {e}"));
        }
    }
}

/// Whether a cell is a relative time as kubectl prints a `date` column (`5s`, `3m2s`, `188d`).
fn is_relative_time(cell: &str) -> bool {
    !cell.is_empty()
        && cell
            .chars()
            .all(|c| c.is_ascii_digit() || "ydhms".contains(c))
}

/// The cells of a kubectl table, header first. Columns are found from the header, whose names
/// are two or more spaces apart (a name may hold one space: `CLUSTER ID`); a cell may be empty.
fn table_cells(table: &str) -> Vec<Vec<String>> {
    let header = table.lines().next().unwrap_or_default();
    let bytes = header.as_bytes();
    let starts: Vec<usize> = (0..bytes.len())
        .filter(|&i| bytes[i] != b' ' && (i == 0 || (i >= 2 && bytes[i - 2..i] == *b"  ")))
        .collect();
    table
        .lines()
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(n, &from)| {
                    let to = starts.get(n + 1).copied().unwrap_or(line.len());
                    line.get(from.min(line.len())..to.min(line.len()))
                        .unwrap_or_default()
                        .trim()
                        .to_string()
                })
                .collect()
        })
        .collect()
}

/// A `kubectl get` table with its relative times (`AGE`, `COMPLETED`: they move with the clock)
/// replaced by `<age>`, laid out again as kubectl lays a table out (each column as wide as its
/// widest cell plus three spaces and at least six, the last column unpadded), so the whole
/// table can be compared.
fn relative_times_masked(table: &str) -> String {
    let mut rows = table_cells(table);
    let names = rows.first().cloned().unwrap_or_default();
    for row in rows.iter_mut().skip(1) {
        for (cell, name) in row.iter_mut().zip(&names) {
            if (name == "AGE" || name == "COMPLETED") && is_relative_time(cell) {
                *cell = "<age>".to_string();
            }
        }
    }
    let widths: Vec<usize> = (0..names.len())
        .map(|i| (rows.iter().map(|r| r[i].len()).max().unwrap_or(0) + 3).max(6))
        .collect();
    let mut out = String::new();
    for row in rows {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}", width = widths[i]));
            }
        }
        out.push('\n');
    }
    out
}

/// `kubectl get` with `args` in `ns`, relative times masked.
async fn kubectl_get(cp: &ControlPlane, ns: &str, args: &[&str]) -> String {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-n", ns]);
    let out = cp.kubectl_ok(&all).await.or_panic();
    relative_times_masked(&out)
}

/// The first questions about a cluster, its snapshots and its recoveries are answered by
/// `kubectl get` (and `-o wide`), under the full names and the short ones, on a real apiserver.
#[tokio::test]
async fn kubectl_get_answers_availability_verification_and_recovery_progress() {
    let cp = control_plane().await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("columns").await.or_panic();
    create_with_status(
        &client,
        &ns,
        "EtcdCluster",
        &[
            (
                "healthy",
                json!({"version": "3.6.11", "replicas": 3}),
                Some(json!({"readyMembers": 3, "clusterID": "8e9e05c52164694d",
                            "leader": "healthy-7xk2p",
                            "members": [{"name": "healthy-7xk2p", "memberID": "91bc3c398fb3c146",
                                         "role": "Leader", "ready": true, "version": "3.6.11",
                                         "dbSize": 20480, "dbSizeInUse": 16384,
                                         "raftIndex": 4127, "raftTerm": 3}],
                            "conditions": [condition("Available", "True", "QuorumHealthy")]})),
            ),
            (
                "lost",
                json!({"version": "3.5.17", "replicas": 5}),
                Some(json!({"readyMembers": 1, "clusterID": "cdf818194e3a8c32",
                            "conditions": [condition("Available", "False", "QuorumLost")]})),
            ),
            ("new", json!({"version": "3.6.11"}), None),
        ],
    )
    .await;
    // The member view survives the schema's pruning, typed as the operator writes it.
    let healthy = Api::<api::v1alpha2::EtcdCluster>::namespaced(client.clone(), &ns)
        .get("healthy")
        .await
        .or_panic();
    let status = healthy.status.unwrap_or_default();
    assert_eq!(status.leader.as_deref(), Some("healthy-7xk2p"));
    assert_eq!(
        status.members,
        [api::v1alpha2::ClusterMemberStatus {
            name: "healthy-7xk2p".to_string(),
            member_id: Some("91bc3c398fb3c146".to_string()),
            role: Some(api::v1alpha2::MemberRole::Leader),
            ready: true,
            version: Some("3.6.11".to_string()),
            db_size: Some(20480),
            db_size_in_use: Some(16384),
            raft_index: Some(4127),
            raft_term: Some(3),
            alarms: Vec::new(),
        }]
    );
    let sha = format!("sha256:{}", "ab".repeat(32));
    let s3 = json!({"s3": {"bucket": "backups", "key": "healthy/"}});
    create_with_status(
        &client,
        &ns,
        "EtcdSnapshot",
        &[
            (
                "nightly",
                json!({"clusterRef": {"name": "healthy"}, "destination": s3}),
                Some(json!({"phase": "Complete",
                            "artifact": {"uri": "s3://backups/healthy/nightly.db",
                                         "sizeBytes": 20512, "checksum": sha},
                            "startTime": "2026-06-01T02:00:00Z",
                            "completionTime": "2026-06-01T02:00:09Z",
                            "conditions": [condition("Ready", "True", "SnapshotStored"),
                                           condition("Verified", "True", "SnapshotVerified")]})),
            ),
            (
                "running",
                json!({"clusterRef": {"name": "healthy"}, "destination": s3}),
                Some(
                    json!({"phase": "Started", "startTime": "2026-06-01T03:00:00Z",
                            "conditions": [condition("Ready", "False", "JobRunning")]}),
                ),
            ),
            (
                "tampered",
                json!({"clusterRef": {"name": "healthy"}, "destination": s3}),
                Some(json!({"phase": "Complete",
                            "artifact": {"uri": "s3://backups/healthy/tampered.db",
                                         "sizeBytes": 4096, "checksum": sha},
                            "completionTime": "2026-06-01T04:00:07Z",
                            "conditions": [condition("Ready", "True", "SnapshotStored"),
                                           condition("Verified", "False", "ChecksumMismatch")]})),
            ),
        ],
    )
    .await;
    create_with_status(
        &client,
        &ns,
        "EtcdRecovery",
        &[
            (
                "from-snapshot",
                json!({"clusterRef": {"name": "lost"}, "source": {"snapshot": {"name": "nightly"}}}),
                Some(json!({"phase": "Complete", "step": "WaitAvailable",
                            "plan": {"member": "lost-q8w2n", "snapshot": "nightly"}})),
            ),
            (
                "from-survivor",
                json!({"clusterRef": {"name": "lost"}, "source": {"survivor": {}}}),
                Some(json!({"phase": "Running", "step": "ForceNewCluster",
                            "plan": {"member": "lost-x7k2p"}})),
            ),
            (
                "waiting",
                json!({"clusterRef": {"name": "lost"},
                       "source": {"survivor": {"member": "lost-x7k2p"}}}),
                None,
            ),
        ],
    )
    .await;

    let clusters = [
        "NAME      VERSION   REPLICAS   READY   AVAILABLE   REASON          AGE",
        "healthy   3.6.11    3          3       True        QuorumHealthy   <age>",
        "lost      3.5.17    5          1       False       QuorumLost      <age>",
        "new       3.6.11    3                                              <age>",
    ];
    let clusters_wide = [
        "NAME      VERSION   REPLICAS   READY   AVAILABLE   REASON          AGE     CLUSTER ID         LEADER",
        "healthy   3.6.11    3          3       True        QuorumHealthy   <age>   8e9e05c52164694d   healthy-7xk2p",
        "lost      3.5.17    5          1       False       QuorumLost      <age>   cdf818194e3a8c32   ",
        "new       3.6.11    3                                              <age>                      ",
    ];
    let snapshots = [
        "NAME       CLUSTER   PHASE      VERIFIED   SIZE    COMPLETED   AGE",
        "nightly    healthy   Complete   True       20512   <age>       <age>",
        "running    healthy   Started                                   <age>",
        "tampered   healthy   Complete   False      4096    <age>       <age>",
    ];
    let recoveries = [
        "NAME            CLUSTER   PHASE      STEP              SOURCE                                 AGE",
        r#"from-snapshot   lost      Complete   WaitAvailable     {"snapshot":{"name":"nightly"}}        <age>"#,
        r#"from-survivor   lost      Running    ForceNewCluster   {"survivor":{}}                        <age>"#,
        r#"waiting         lost                                   {"survivor":{"member":"lost-x7k2p"}}   <age>"#,
    ];
    let recoveries_wide = [
        "NAME            CLUSTER   PHASE      STEP              SOURCE                                 AGE     MEMBER       SNAPSHOT",
        r#"from-snapshot   lost      Complete   WaitAvailable     {"snapshot":{"name":"nightly"}}        <age>   lost-q8w2n   nightly"#,
        r#"from-survivor   lost      Running    ForceNewCluster   {"survivor":{}}                        <age>   lost-x7k2p   "#,
        r#"waiting         lost                                   {"survivor":{"member":"lost-x7k2p"}}   <age>                "#,
    ];
    let table = |lines: &[&str]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    for (args, want) in [
        (&["etcdcluster"][..], table(&clusters)),
        (&["ec"][..], table(&clusters)),
        (&["etcdcluster", "-o", "wide"][..], table(&clusters_wide)),
        (&["ec", "-o", "wide"][..], table(&clusters_wide)),
        (&["etcdsnapshot"][..], table(&snapshots)),
        (&["esnap"][..], table(&snapshots)),
        (&["esnap", "-o", "wide"][..], table(&snapshots)),
        (&["etcdrecovery"][..], table(&recoveries)),
        (&["erec"][..], table(&recoveries)),
        (&["erec", "-o", "wide"][..], table(&recoveries_wide)),
    ] {
        let got = kubectl_get(cp, &ns, args).await;
        assert_eq!(got, want, "kubectl get {}:\n{got}", args.join(" "));
    }
}

/// Each short name resolves to its kind on a real apiserver (kubectl resolves names through
/// discovery, which `kubectl api-resources` prints) and belongs to nothing else there: no
/// built-in resource has it as its name or a short name. docs/api.md lists the operators'
/// CRDs checked besides.
#[tokio::test]
async fn short_names_resolve_to_their_kind_and_collide_with_no_resource() {
    let cp = control_plane().await;
    let ns = cp.namespace("short-names").await.or_panic();
    let out = cp.kubectl_ok(&["api-resources"]).await.or_panic();
    // A table with no relative times comes back as kubectl printed it: the layout is kubectl's.
    assert_eq!(relative_times_masked(&out), out);
    let rows = table_cells(&out);
    assert_eq!(
        rows.first().map(Vec::as_slice),
        Some(&["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"].map(String::from)[..]),
        "{out}"
    );
    for (short, kind) in [
        ("ec", "EtcdCluster"),
        ("em", "EtcdMember"),
        ("esnap", "EtcdSnapshot"),
        ("esched", "EtcdSnapshotSchedule"),
        ("erec", "EtcdRecovery"),
        ("edefrag", "EtcdDefrag"),
        ("edpol", "EtcdDefragPolicy"),
    ] {
        let owners: Vec<(&str, &str)> = rows
            .iter()
            .skip(1)
            .filter(|row| row[0] == short || row[1].split(',').any(|s| s == short))
            .map(|row| (row[2].as_str(), row[4].as_str()))
            .collect();
        assert_eq!(
            owners,
            [(api::v1alpha2::API_VERSION, kind)],
            "short name {short}:\n{out}"
        );
        cp.kubectl_ok(&["get", short, "-n", &ns])
            .await
            .unwrap_or_else(|e| panic!("kubectl get {short}: {e}"));
    }
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
