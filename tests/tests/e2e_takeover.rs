//! End to end, taking over a live cluster of the reference operator: with our operator not
//! running, the test builds a 3-member cluster the way the reference operator leaves one — the
//! EtcdCluster with its latched status, EtcdMembers with spec and status, member Pods with the
//! reference's own command line, probes, labels and owner references, PVCs, both Services and
//! the PDB — around real etcd members (a seed, then learners added and promoted, as the
//! reference bootstraps), writes keys, and only then starts our operator. It must adopt the
//! cluster as it stands (same Pods, same IDs, no membership write) and then scale it like a
//! native one.
//!
//! The objects are written as raw JSON (not through our Rust types), so what reaches the API is
//! the reference's shape, not ours.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};
use tests::adopt::{
    self, controller_ref, create_raw, member_list, restarts, wait_pods_ready, OrPanicNone,
};
use tests::e2e::{condition, Env};
use tests::harness::{eventually_every, throughout};
use tests::podrunner::PodRunner;
use tests::OrPanic;

const NAME: &str = "ref";
const VERSION: &str = "3.6.16";
const BOOT: Duration = Duration::from_secs(180);
/// How long the adopted cluster is watched for restarts and membership writes before it is
/// scaled.
const SETTLE: Duration = Duration::from_secs(25);

fn cluster_labels() -> Value {
    json!({
        "app.kubernetes.io/name": "etcd",
        "app.kubernetes.io/instance": NAME,
        "app.kubernetes.io/managed-by": "etcd-operator",
        "etcd-operator.cozystack.io/cluster": NAME,
    })
}

fn member_labels(member: &str) -> Value {
    let mut l = cluster_labels();
    l["app.kubernetes.io/component"] = json!(member);
    l
}

fn peer_url(member: &str, ns: &str) -> String {
    format!("http://{member}.{NAME}.{ns}.svc:2380")
}

fn dynamic<K: kube::Resource<DynamicType = ()>>(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()))
}

/// The member Pod exactly as the reference's `buildPod` renders it for a plaintext PVC member.
fn reference_pod(ns: &str, member: &str, member_uid: &str, spec: &Value, state: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": member, "namespace": ns,
            "labels": voter_labels(member),
            "ownerReferences": controller_ref("etcd-operator.cozystack.io/v1alpha2", "EtcdMember", member, member_uid),
        },
        "spec": {
            "hostname": member,
            "subdomain": NAME,
            "automountServiceAccountToken": false,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "etcd",
                "image": format!("quay.io/coreos/etcd:v{VERSION}"),
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                "command": [
                    "etcd",
                    format!("--name={member}"),
                    "--data-dir=/var/lib/etcd",
                    "--listen-peer-urls=http://0.0.0.0:2380",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    format!("--advertise-client-urls=http://{member}.{NAME}.{ns}.svc:2379"),
                    format!("--initial-advertise-peer-urls={}", peer_url(member, ns)),
                    format!("--initial-cluster={}", spec["initialCluster"].as_str().unwrap_or_default()),
                    format!("--initial-cluster-token={}", spec["clusterToken"].as_str().unwrap_or_default()),
                    format!("--initial-cluster-state={state}"),
                    "--listen-metrics-urls=http://0.0.0.0:2381",
                ],
                "ports": [
                    {"name": "client", "containerPort": 2379},
                    {"name": "peer", "containerPort": 2380},
                    {"name": "metrics", "containerPort": 2381},
                ],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "livenessProbe": {
                    "tcpSocket": {"port": 2380},
                    "initialDelaySeconds": 15, "periodSeconds": 10, "failureThreshold": 3,
                },
                "readinessProbe": {
                    "httpGet": {"path": "/health", "port": 2381},
                    "initialDelaySeconds": 5, "periodSeconds": 5, "failureThreshold": 3,
                },
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{member}")}}],
        },
    })
}

/// A voter Pod's labels: the member's plus the role the PDB selects.
fn voter_labels(member: &str) -> Value {
    let mut l = member_labels(member);
    l["etcd-operator.cozystack.io/role"] = json!("voter");
    l
}

struct Before {
    /// `status.observed` and the `Progressing` condition as the reference left them.
    observed: Value,
    progressing: Value,
    /// Service name → (uid, resourceVersion): adopted as they are, not rewritten.
    service_versions: BTreeMap<String, String>,
    pods: BTreeMap<String, (String, i32)>,
    pvcs: BTreeMap<String, String>,
    members: BTreeMap<String, (String, String)>,
    services: BTreeMap<String, String>,
    pdb: String,
    cluster_id: String,
    etcd: BTreeSet<(String, String, bool)>,
}

/// etcd through the given members' DNS names under the cluster's headless Service.
async fn etcd_at(ns: &str, members: &[String]) -> etcd_client::Client {
    let members: Vec<(String, String)> = members
        .iter()
        .map(|m| (m.clone(), NAME.to_string()))
        .collect();
    adopt::etcd_at(ns, &members).await
}

/// `(id, name, is_learner)` of every etcd member.
async fn etcd_membership(ns: &str, members: &[String]) -> (u64, BTreeSet<(String, String, bool)>) {
    let (cluster_id, listed) = member_list(&mut etcd_at(ns, members).await).await;
    let set = listed
        .into_iter()
        .map(|m| (m.id, m.name, m.learner))
        .collect();
    (cluster_id, set)
}

/// The PVC as the reference's `ensurePVC` writes it.
fn reference_pvc(ns: &str, member: &str, member_uid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": format!("data-{member}"), "namespace": ns,
            "labels": member_labels(member),
            "ownerReferences": controller_ref("etcd-operator.cozystack.io/v1alpha2", "EtcdMember", member, member_uid),
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })
}

/// An EtcdMember as the reference creates it (generateName, finalizer, controller owner), still
/// pending: no `initialCluster` yet.
async fn reference_member(
    client: &Client,
    ns: &str,
    cluster_uid: &str,
    token: &str,
    seed: bool,
) -> (String, String, Value) {
    let members = dynamic::<EtcdMember>(client, ns);
    let mut spec = json!({
        "clusterName": NAME, "version": VERSION, "storage": {"size": "1Gi"}, "resources": {},
        "initialCluster": "", "clusterToken": token,
    });
    if seed {
        spec["bootstrap"] = json!(true);
    }
    let created = create_raw(
        &members,
        json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdMember",
            "metadata": {
                "generateName": format!("{NAME}-"), "namespace": ns,
                "labels": cluster_labels(),
                "finalizers": ["etcd-operator.cozystack.io/member-cleanup"],
                "ownerReferences": controller_ref("etcd-operator.cozystack.io/v1alpha2", "EtcdCluster", NAME, cluster_uid),
            },
            "spec": spec,
        }),
    )
    .await;
    if seed {
        // The reference pre-stamps the seed as a voter.
        members
            .patch_status(
                &created.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"isVoter": true}})),
            )
            .await
            .or_panic();
    }
    (created.name_any(), created.uid().or_panic_none(), spec)
}

/// The member once it is in etcd's list: its `initialCluster` and component label, then (the
/// reference's member controller) its PVC and its Pod.
async fn start_member(
    client: &Client,
    ns: &str,
    (name, uid, mut spec): (String, String, Value),
    initial_cluster: String,
) -> String {
    let members = dynamic::<EtcdMember>(client, ns);
    spec["initialCluster"] = json!(initial_cluster);
    members
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({
                "metadata": {"labels": member_labels(&name)},
                "spec": {"initialCluster": spec["initialCluster"]},
            })),
        )
        .await
        .or_panic();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    create_raw(&pvcs, reference_pvc(ns, &name, &uid)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let state = if spec["bootstrap"] == json!(true) {
        "new"
    } else {
        "existing"
    };
    create_raw(&pods, reference_pod(ns, &name, &uid, &spec, state)).await;
    name
}

/// Build the reference cluster and return what must survive the takeover.
async fn build_reference_cluster(client: &Client, ns: &str) -> (Before, BTreeMap<String, String>) {
    let clusters = dynamic::<EtcdCluster>(client, ns);
    let cluster = create_raw(
        &clusters,
        json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
            "metadata": {"name": NAME, "namespace": ns},
            "spec": {"replicas": 3, "version": VERSION, "storage": {"size": "1Gi"}},
        }),
    )
    .await;
    let cluster_uid = cluster.uid().or_panic_none();
    let generation = cluster.metadata.generation.unwrap_or(1);
    let token = format!("{ns}-{NAME}-{cluster_uid}");
    // The reference's first reconcile: the whole spec latched, the token recorded.
    let observed = json!({
        "replicas": 3, "version": VERSION, "storage": {"size": "1Gi"}, "resources": {},
    });
    clusters
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"observed": observed, "clusterToken": token}})),
        )
        .await
        .or_panic();

    let owner = controller_ref(
        "etcd-operator.cozystack.io/v1alpha2",
        "EtcdCluster",
        NAME,
        &cluster_uid,
    );
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    create_raw(
        &services,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": ns, "labels": cluster_labels(), "ownerReferences": owner},
            "spec": {
                "clusterIP": "None", "publishNotReadyAddresses": true,
                "selector": {"etcd-operator.cozystack.io/cluster": NAME},
                "ports": [{"name": "client", "port": 2379}, {"name": "peer", "port": 2380}],
            },
        }),
    )
    .await;
    create_raw(
        &services,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("{NAME}-client"), "namespace": ns, "labels": cluster_labels(), "ownerReferences": owner},
            "spec": {
                "selector": {"etcd-operator.cozystack.io/cluster": NAME},
                "ports": [{"name": "client", "port": 2379}],
            },
        }),
    )
    .await;

    // Bootstrap as the reference does: the seed alone with --initial-cluster-state=new, then each
    // further member added as a learner, started with the member list of the moment, promoted.
    let pending = reference_member(client, ns, &cluster_uid, &token, true).await;
    let seed_entry = format!("{}={}", pending.0, peer_url(&pending.0, ns));
    let seed = start_member(client, ns, pending, seed_entry).await;
    wait_pods_ready(client, ns, std::slice::from_ref(&seed), BOOT).await;
    let mut names = vec![seed.clone()];
    for _ in 0..2 {
        let etcd = etcd_at(ns, &names).await;
        let pending = reference_member(client, ns, &cluster_uid, &token, false).await;
        let url = peer_url(&pending.0, ns);
        let added = eventually_every(
            &format!("MemberAddAsLearner({url})"),
            BOOT,
            Duration::from_secs(1),
            || async {
                etcd.clone()
                    .member_add(
                        [url.clone()],
                        Some(etcd_client::MemberAddOptions::new().with_is_learner()),
                    )
                    .await
                    .map_err(|e| e.to_string())
            },
        )
        .await;
        let id = added.member().map(|m| m.id()).or_panic_none();
        // As the reference: every listed member by name (a learner not started yet is named
        // after its peer URL's host), sorted.
        let mut parts: Vec<String> = added
            .member_list()
            .iter()
            .filter_map(|m| {
                let peer = m.peer_urls().first()?;
                let name = if m.name().is_empty() {
                    peer.trim_start_matches("http://")
                        .split('.')
                        .next()?
                        .to_string()
                } else {
                    m.name().to_string()
                };
                Some(format!("{name}={peer}"))
            })
            .collect();
        parts.sort();
        let joiner = start_member(client, ns, pending, parts.join(",")).await;
        wait_pods_ready(client, ns, std::slice::from_ref(&joiner), BOOT).await;
        eventually_every(
            &format!("MemberPromote({id:016x})"),
            BOOT,
            Duration::from_secs(1),
            || async {
                etcd.clone()
                    .member_promote(id)
                    .await
                    .map_err(|e| e.to_string())
            },
        )
        .await;
        names.push(joiner);
    }

    // Member status as the reference's member and cluster controllers leave it.
    let (cluster_id, etcd_members) = etcd_membership(ns, &names).await;
    let members = dynamic::<EtcdMember>(client, ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let now = now.split('.').next().unwrap_or_default().to_string() + "Z";
    for name in &names {
        let pod = pods.get(name).await.or_panic();
        let id = etcd_members
            .iter()
            .find(|(_, n, _)| n == name)
            .map(|(id, _, _)| id.clone())
            .or_panic_none();
        let generation = members.get(name).await.or_panic().metadata.generation;
        members
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {
                    "memberID": id, "podName": name, "podUID": pod.uid(), "isVoter": true,
                    "replicas": 1,
                    "selector": format!("etcd-operator.cozystack.io/cluster={NAME},app.kubernetes.io/component={name}"),
                    "pvcName": format!("data-{name}"), "version": VERSION,
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "PodReady", "message": "etcd member is ready",
                         "observedGeneration": generation, "lastTransitionTime": now},
                        {"type": "VersionDrifted", "status": "False", "reason": "VersionMatched",
                         "message": format!("running etcd version \"{VERSION}\" matches intended spec.version"),
                         "observedGeneration": generation, "lastTransitionTime": now},
                    ],
                }})),
            )
            .await
            .or_panic();
    }
    let cond = |t: &str, s: &str, r: &str, m: &str| {
        json!({"type": t, "status": s, "reason": r, "message": m,
               "observedGeneration": generation, "lastTransitionTime": now})
    };
    clusters
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {
                "readyMembers": 3,
                "selector": format!("etcd-operator.cozystack.io/cluster={NAME}"),
                "clusterID": format!("{cluster_id:016x}"),
                "conditions": [
                    cond("Available", "True", "QuorumHealthy", "All members are ready"),
                    cond("Progressing", "False", "Reconciled", "actual state matches status.observed"),
                    cond("Degraded", "False", "QuorumHealthy", ""),
                ],
            }})),
        )
        .await
        .or_panic();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb = create_raw(
        &pdbs,
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": NAME, "namespace": ns, "labels": cluster_labels(), "ownerReferences": owner},
            "spec": {
                "minAvailable": 2,
                "selector": {"matchLabels": {"etcd-operator.cozystack.io/cluster": NAME, "etcd-operator.cozystack.io/role": "voter"}},
            },
        }),
    )
    .await;

    // Keys written through the running cluster.
    let mut etcd = etcd_at(ns, &names).await;
    let mut keys = BTreeMap::new();
    for i in 0..100 {
        let (k, v) = (format!("e2e/{i:04}"), format!("v{i}"));
        etcd.put(k.clone(), v.clone(), None).await.or_panic();
        keys.insert(k, v);
    }

    let latched = clusters.get(NAME).await.or_panic();
    let mut before = Before {
        observed: latched.data["status"]["observed"].clone(),
        progressing: latched.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Progressing")
            .cloned()
            .unwrap_or_default(),
        service_versions: BTreeMap::new(),
        pods: BTreeMap::new(),
        pvcs: BTreeMap::new(),
        members: BTreeMap::new(),
        services: BTreeMap::new(),
        pdb: pdb.uid().or_panic_none(),
        cluster_id: format!("{cluster_id:016x}"),
        etcd: etcd_members,
    };
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for name in &names {
        let pod = pods.get(name).await.or_panic();
        before
            .pods
            .insert(name.clone(), (pod.uid().or_panic_none(), restarts(&pod)));
        let pvc = pvcs.get(&format!("data-{name}")).await.or_panic();
        before
            .pvcs
            .insert(pvc.name_any(), pvc.uid().or_panic_none());
        let m = members.get(name).await.or_panic();
        let id = m.data["status"]["memberID"].as_str().unwrap_or_default();
        before
            .members
            .insert(name.clone(), (m.uid().or_panic_none(), id.to_string()));
    }
    for svc in [NAME.to_string(), format!("{NAME}-client")] {
        let s = services.get(&svc).await.or_panic();
        before
            .service_versions
            .insert(svc.clone(), s.resource_version().or_panic_none());
        before.services.insert(svc, s.uid().or_panic_none());
    }
    (before, keys)
}

/// Everything the reference built is still there, unchanged where it matters.
async fn assert_adopted_as_is(env: &Env, ns: &str, before: &Before) {
    let client = env.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for (name, (uid, restart_count)) in &before.pods {
        let pod = pods.get_opt(name).await.or_panic().unwrap_or_else(|| {
            panic!(
                "reference Pod {name} is gone; operator log: {}",
                env.operator.log().display()
            )
        });
        assert_eq!(
            pod.uid().as_ref(),
            Some(uid),
            "Pod {name} was recreated; operator log: {}",
            env.operator.log().display()
        );
        assert!(
            pod.metadata.deletion_timestamp.is_none(),
            "Pod {name} is being deleted"
        );
        assert_eq!(
            restarts(&pod),
            *restart_count,
            "Pod {name}'s etcd restarted"
        );
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for (name, uid) in &before.pvcs {
        let pvc = pvcs.get(name).await.or_panic();
        assert_eq!(pvc.uid().as_ref(), Some(uid), "PVC {name} was recreated");
        assert!(
            pvc.metadata.deletion_timestamp.is_none(),
            "PVC {name} is being deleted"
        );
    }
    let members: Api<EtcdMember> = Api::namespaced(client.clone(), ns);
    for (name, (uid, id)) in &before.members {
        let m = members.get(name).await.or_panic();
        assert_eq!(
            m.uid().as_ref(),
            Some(uid),
            "EtcdMember {name} was recreated"
        );
        assert!(
            m.metadata.deletion_timestamp.is_none(),
            "EtcdMember {name} is being deleted"
        );
        let status = m.status.clone().unwrap_or_default();
        assert_eq!(
            status.member_id.as_ref(),
            Some(id),
            "EtcdMember {name}'s member ID"
        );
        assert!(status.is_voter, "EtcdMember {name} is no longer a voter");
    }
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    for (name, uid) in &before.services {
        let s = services.get(name).await.or_panic();
        assert_eq!(s.uid().as_ref(), Some(uid), "Service {name} was recreated");
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb = pdbs
        .get_opt(NAME)
        .await
        .or_panic()
        .expect("the PDB is kept");
    assert_eq!(
        pdb.uid().as_ref(),
        Some(&before.pdb),
        "the PDB was recreated"
    );
    let names: Vec<String> = before.pods.keys().cloned().collect();
    let (cluster_id, etcd) = etcd_membership(ns, &names).await;
    assert_eq!(
        format!("{cluster_id:016x}"),
        before.cluster_id,
        "etcd cluster ID"
    );
    assert_eq!(etcd, before.etcd, "etcd's member list changed");
    let c: Api<EtcdCluster> = Api::namespaced(client, ns);
    let status = c.get(NAME).await.or_panic().status.unwrap_or_default();
    assert_eq!(
        status.cluster_id.as_ref(),
        Some(&before.cluster_id),
        "status.clusterID"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_reference_cluster_is_adopted_without_restarts_then_scales_3_5_3() {
    let staged = tests::e2e::stage(PodRunner::builder()).await;
    let cp = staged.cp;
    let client = cp.client().or_panic();
    let ns = cp.namespace("takeover").await.or_panic();
    let started = Instant::now();
    let (before, keys) = build_reference_cluster(&client, &ns).await;
    eprintln!("reference cluster built in {:?}", started.elapsed());

    let env = staged.operator(None, &[]).await;

    // Watch the adopted cluster for a while: nothing restarts, nothing in etcd changes, the
    // status is continued.
    throughout(SETTLE, Duration::from_secs(2), || {
        assert_adopted_as_is(&env, &ns, &before)
    })
    .await;
    // Status continued, not restarted: the reference's latched target is kept as the current
    // target (no relatch: Progressing never flipped to SpecChanged), the Services untouched.
    let now = dynamic::<EtcdCluster>(&client, &ns)
        .get(NAME)
        .await
        .or_panic();
    let mut observed = now.data["status"]["observed"].clone();
    if let Some(o) = observed.as_object_mut() {
        o.remove("generation");
    }
    assert_eq!(
        observed,
        before.observed,
        "status.observed was relatched on takeover; operator log: {}",
        env.operator.log().display()
    );
    let progressing = now.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Progressing")
        .cloned()
        .unwrap_or_default();
    assert_eq!(progressing["status"], "False", "{progressing}");
    assert_eq!(
        progressing["lastTransitionTime"], before.progressing["lastTransitionTime"],
        "Progressing changed status during the takeover: {progressing}"
    );
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    for (name, version) in &before.service_versions {
        let s = services.get(name).await.or_panic();
        assert_eq!(
            s.resource_version().as_ref(),
            Some(version),
            "Service {name} was rewritten"
        );
    }
    let c = env.wait_healthy(&ns, NAME, 3, BOOT).await;
    let status = c.status.clone().unwrap_or_default();
    assert_eq!(
        status.cluster_token.as_deref(),
        Some(format!("{ns}-{NAME}-{}", c.uid().unwrap_or_default()).as_str())
    );
    assert_eq!(
        condition(&c, "Available").map(|(s, r, _)| (s, r)),
        Some(("True".into(), "QuorumHealthy".into()))
    );
    assert_adopted_as_is(&env, &ns, &before).await;
    let log = std::fs::read_to_string(env.operator.log()).unwrap_or_default();
    for write in [
        "added member as learner",
        "removed member from etcd",
        "promoted learner",
        "removed a ghost member",
        "deleting member",
        "bootstrapping single-node cluster",
    ] {
        assert!(
            !log.contains(write),
            "the operator wrote to etcd membership while adopting ({write:?}); log: {}",
            env.operator.log().display()
        );
    }
    env.check_keys(&ns, NAME, &keys).await;

    // From here on it is a cluster like any other, except that its members run without
    // --max-learners (the reference's Pods, kept as they are): etcd accepts one learner at a
    // time there, so each new member is added only after the previous one was promoted.
    env.scale(&ns, NAME, 5).await;
    env.wait_healthy(&ns, NAME, 5, BOOT).await;
    env.check_keys(&ns, NAME, &keys).await;
    // Each add came after the previous learner's promotion (never two learners at once), and
    // no add was refused for too many learners.
    let log = std::fs::read_to_string(env.operator.log()).unwrap_or_default();
    let steps: Vec<&str> = log
        .lines()
        .filter_map(|l| {
            if l.contains("added member as learner") {
                Some("add")
            } else if l.contains("promoted learner") {
                Some("promote")
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        steps,
        ["add", "promote", "add", "promote"],
        "members running without --max-learners join one at a time; log: {}",
        env.operator.log().display()
    );
    assert!(
        !log.contains("too many learner"),
        "an add was refused for too many learners; log: {}",
        env.operator.log().display()
    );
    let (_, etcd) = etcd_membership(&ns, &env.member_names(&ns, NAME).await).await;
    assert_eq!(etcd.len(), 5, "{etcd:?}");
    assert!(etcd.iter().all(|(_, _, learner)| !learner), "{etcd:?}");
    // Members built from the reference's latched target (`resources: {}`) get the default
    // requests, like the reference's own Pods.
    for pod in env.pods(&ns, NAME).await {
        let requests = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].resources.as_ref())
            .and_then(|r| r.requests.clone())
            .unwrap_or_default();
        assert_eq!(
            requests.get("cpu").map(|q| q.0.as_str()),
            Some("100m"),
            "Pod {} has no default requests: {requests:?}",
            pod.name_any()
        );
    }

    env.scale(&ns, NAME, 3).await;
    env.wait_healthy(&ns, NAME, 3, BOOT).await;
    env.check_keys(&ns, NAME, &keys).await;
    // The newest members go first: the three the reference built are the ones left, untouched.
    let mut left = env.member_names(&ns, NAME).await;
    left.sort();
    let original: Vec<String> = before.pods.keys().cloned().collect();
    assert_eq!(left, original);
    assert_adopted_as_is(&env, &ns, &before).await;
}
