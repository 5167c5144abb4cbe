//! End to end, adopting a running aenix (`etcd.aenix.io/v1alpha1`) cluster in place with
//! `etcd-operator migrate --from-aenix`: with our operator not running, the test builds a 3-member
//! cluster the way the aenix operator leaves one — its CRD and EtcdCluster, the cluster-state
//! ConfigMap, the `<cluster>` ClusterIP and `<cluster>-headless` Services, the StatefulSet, and the
//! Pods and PVCs as the StatefulSet controller writes them (aenix labels, command line, data dir
//! `/var/run/etcd/default.etcd`, `<cluster>-headless` peer URLs, and the aenix default peer
//! auto-TLS: `--peer-auto-tls` with https peer URLs) — around real etcd members, and
//! writes keys. The test control plane runs no StatefulSet controller, so the test creates the Pods
//! and PVCs itself, exactly as that controller would (owner reference, `statefulset.kubernetes.io/`
//! labels, claims from the volumeClaimTemplate), and reports the StatefulSet's status.
//!
//! Then: the dry run changes nothing; `--apply` adopts (same Pod UIDs, member IDs, cluster ID,
//! keys); our operator, started afterwards, keeps it Ready; a scale-up adds a native member; and
//! the adopted members are replaced one by one by native ones on request. Every member, adopted
//! or native, runs `--peer-auto-tls` with https peer URLs throughout.
//!
//! The validating and mutating webhooks are registered (failurePolicy `Fail`) for the whole run,
//! as with the chart's `webhook.enabled=true`, and the migration runs as a cluster admin who is
//! not the controller (its own client certificate, `O=system:masters`): the adoption's
//! EtcdMember creates and status writes go through the webhook's migration allowance, while the
//! same admin creating an unmarked EtcdMember is still refused.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::{Duration, Instant};

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};
use tests::adopt::{
    controller_ref, create_raw, etcd_at, member_list, restarts, wait_pods_ready, OrPanicNone,
};
use tests::e2e::{check_keys, pod_ready, put_keys, Keys};
use tests::env::pki::Leaf;
use tests::env::ControlPlane;
use tests::harness::{eventually_every, throughout};
use tests::podrunner::PodRunner;
use tests::webhook::{self, FailurePolicy, Webhook};
use tests::OrPanic;

const NAME: &str = "legacy";
const VERSION: &str = "3.6.16";
const BOOT: Duration = Duration::from_secs(180);
/// How long the adopted cluster is watched under our operator for restarts and membership writes.
const SETTLE: Duration = Duration::from_secs(20);
const CRD: &str = include_str!("../testdata/aenix-etcdcluster-crd.yaml");
/// The cluster admin who runs the migration: not the controller.
const MIGRATING_USER: &str = "migrating-admin";

fn aenix_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("etcd.aenix.io", "v1alpha1", "EtcdCluster");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// The labels the aenix operator puts on its StatefulSet's Pods (and selects them by).
fn aenix_labels() -> Value {
    json!({
        "app.kubernetes.io/name": "etcd",
        "app.kubernetes.io/instance": NAME,
        "app.kubernetes.io/managed-by": "etcd-operator",
    })
}

async fn install_aenix_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = yaml_serde::from_str(CRD).or_panic();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating the aenix CRD: {e}"),
    }
    eventually_every(
        "the aenix CRD established",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let conditions = crds
                .get(&crd.name_any())
                .await
                .or_panic()
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default();
            let established = conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established
                .then_some(())
                .ok_or_else(|| format!("{conditions:?}"))
        },
    )
    .await;
}

fn member_name(i: usize) -> String {
    format!("{NAME}-{i}")
}

fn legacy_peer_url(member: &str, ns: &str) -> String {
    format!("https://{member}.{NAME}-headless.{ns}.svc:2380")
}

/// The Pod template of the aenix StatefulSet with its defaults: `spec.security.tls.peerSecret`
/// unset, so etcd runs `--peer-auto-tls` with https peer URLs (aenix-io/etcd-operator
/// internal/controller/factory/statefulset.go).
fn pod_template(image: &str) -> Value {
    json!({
        "metadata": {"labels": aenix_labels()},
        "spec": {
            "containers": [{
                "name": "etcd",
                "image": image,
                "command": [
                    "etcd",
                    "--name=$(POD_NAME)",
                    "--peer-auto-tls",
                    "--listen-peer-urls=https://0.0.0.0:2380",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    format!("--initial-advertise-peer-urls=https://$(POD_NAME).{NAME}-headless.$(POD_NAMESPACE).svc:2380"),
                    "--data-dir=/var/run/etcd/default.etcd",
                    format!("--advertise-client-urls=http://$(POD_NAME).{NAME}-headless.$(POD_NAMESPACE).svc:2379"),
                ],
                "ports": [{"name": "peer", "containerPort": 2380}, {"name": "client", "containerPort": 2379}],
                "envFrom": [{"configMapRef": {"name": format!("{NAME}-cluster-state")}}],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                ],
                "volumeMounts": [{"name": "data", "mountPath": "/var/run/etcd"}],
                "startupProbe": {"httpGet": {"path": "/readyz?serializable=false", "port": 2379}, "initialDelaySeconds": 1, "periodSeconds": 5},
                "livenessProbe": {"httpGet": {"path": "/livez", "port": 2379}, "initialDelaySeconds": 5, "periodSeconds": 5},
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 2379}, "initialDelaySeconds": 5, "periodSeconds": 5},
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    })
}

/// What must survive the migration.
struct Before {
    pods: BTreeMap<String, String>,
    pvcs: BTreeMap<String, String>,
    /// Member name → etcd member ID (hex).
    ids: BTreeMap<String, String>,
    cluster_id: String,
    keys: BTreeMap<String, String>,
}

/// `(Pod name, subdomain)` of every Ready Pod not being deleted (adopted Pods live under
/// `<cluster>-headless`, native ones under `<cluster>`).
async fn ready_members(client: &Client, ns: &str) -> kube::Result<Vec<(String, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let sub = p.spec.as_ref()?.subdomain.clone()?;
            Some((p.name_any(), sub))
        })
        .collect())
}

/// etcd through every Ready Pod of the cluster, each under its own subdomain.
async fn etcd_of(client: &Client, ns: &str) -> etcd_client::Client {
    let members = ready_members(client, ns).await.or_panic();
    assert!(!members.is_empty(), "{ns}: no Ready member Pod");
    etcd_at(ns, &members).await
}

/// The keys written before the migration, all there and nothing else, read through etcd.
async fn check_keys_kept(client: &Client, ns: &str, before: &Before) {
    let mut etcd = etcd_of(client, ns).await;
    check_keys(&mut etcd, ns, "e2e/", &before.keys, Keys::Exactly).await;
}

/// `(cluster ID, member ID hex → (name, first peer URL, learner))`.
async fn membership(
    client: &Client,
    ns: &str,
) -> (String, BTreeMap<String, (String, String, bool)>) {
    let (cluster_id, listed) = member_list(&mut etcd_of(client, ns).await).await;
    let members = listed
        .into_iter()
        .map(|m| (m.id, (m.name, m.peer_url, m.learner)))
        .collect();
    (format!("{cluster_id:016x}"), members)
}

/// Voters etcd lists right now, if a Ready member answers (members come and go meanwhile).
async fn try_voters(client: &Client, ns: &str) -> Option<usize> {
    let endpoints: Vec<String> = ready_members(client, ns)
        .await
        .ok()?
        .into_iter()
        .map(|(name, sub)| format!("http://{name}.{sub}.{ns}.svc:2379"))
        .collect();
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(5));
    let mut etcd = etcd_client::Client::connect(endpoints, Some(options))
        .await
        .ok()?;
    let list = etcd.member_list().await.ok()?;
    Some(list.members().iter().filter(|m| !m.is_learner()).count())
}

/// The aenix cluster as its operator and the StatefulSet controller leave it, running.
async fn build_aenix_cluster(client: &Client, ns: &str) -> Before {
    let image = format!("quay.io/coreos/etcd:v{VERSION}");
    let aenix = create_raw(
        &aenix_api(client, ns),
        json!({
            "apiVersion": "etcd.aenix.io/v1alpha1", "kind": "EtcdCluster",
            "metadata": {"name": NAME, "namespace": ns},
            "spec": {
                "replicas": 3,
                "options": {"quota-backend-bytes": "2147483648"},
                "podTemplate": {"spec": {"containers": [{"name": "etcd", "image": image}]}},
                "storage": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                }}},
            },
        }),
    )
    .await;
    let owner = controller_ref(
        "etcd.aenix.io/v1alpha1",
        "EtcdCluster",
        NAME,
        &aenix.uid().or_panic_none(),
    );
    let names: Vec<String> = (0..3).map(member_name).collect();
    let initial: Vec<String> = names
        .iter()
        .map(|m| format!("{m}={}", legacy_peer_url(m, ns)))
        .collect();
    create_raw(
        &Api::<ConfigMap>::namespaced(client.clone(), ns),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{NAME}-cluster-state"), "namespace": ns, "ownerReferences": owner},
            "data": {
                "ETCD_INITIAL_CLUSTER_STATE": "new",
                "ETCD_INITIAL_CLUSTER": initial.join(","),
                "ETCD_INITIAL_CLUSTER_TOKEN": format!("{NAME}-{ns}"),
            },
        }),
    )
    .await;
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    create_raw(
        &services,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("{NAME}-headless"), "namespace": ns, "labels": aenix_labels(), "ownerReferences": owner},
            "spec": {
                "clusterIP": "None", "publishNotReadyAddresses": true, "selector": aenix_labels(),
                "ports": [{"name": "peer", "port": 2380}, {"name": "client", "port": 2379}],
            },
        }),
    )
    .await;
    create_raw(
        &services,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NAME, "namespace": ns, "labels": aenix_labels(), "ownerReferences": owner},
            "spec": {"selector": aenix_labels(), "ports": [{"name": "client", "port": 2379}]},
        }),
    )
    .await;
    let sts = create_raw(
        &Api::<StatefulSet>::namespaced(client.clone(), ns),
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": NAME, "namespace": ns, "ownerReferences": owner},
            "spec": {
                "replicas": 3, "serviceName": format!("{NAME}-headless"), "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": aenix_labels()},
                "template": pod_template(&image),
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }],
            },
        }),
    )
    .await;
    let sts_owner = controller_ref("apps/v1", "StatefulSet", NAME, &sts.uid().or_panic_none());
    // As the StatefulSet controller creates them: the claim from the template (selector labels,
    // no owner), then the Pod with its identity, the claim substituted for the template volume.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for (i, m) in names.iter().enumerate() {
        create_raw(
            &pvcs,
            json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": format!("data-{m}"), "namespace": ns, "labels": aenix_labels()},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }),
        )
        .await;
        let mut pod = pod_template(&image);
        let mut pod_labels = aenix_labels();
        pod_labels["controller-revision-hash"] = json!(format!("{NAME}-7d4b9c8f5"));
        pod_labels["statefulset.kubernetes.io/pod-name"] = json!(m);
        pod_labels["apps.kubernetes.io/pod-index"] = json!(i.to_string());
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"] =
            json!({"name": m, "namespace": ns, "labels": pod_labels, "ownerReferences": sts_owner});
        pod["spec"]["hostname"] = json!(m);
        pod["spec"]["subdomain"] = json!(format!("{NAME}-headless"));
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] =
            json!(format!("data-{m}"));
        create_raw(&pods, pod).await;
    }
    wait_pods_ready(client, ns, &names, BOOT).await;
    Api::<StatefulSet>::namespaced(client.clone(), ns)
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {
                "replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3,
                "availableReplicas": 3, "observedGeneration": 1,
            }})),
        )
        .await
        .or_panic();

    let with_service: Vec<(String, String)> = names
        .iter()
        .map(|m| (m.clone(), format!("{NAME}-headless")))
        .collect();
    let mut etcd = etcd_at(ns, &with_service).await;
    let keys = put_keys(&mut etcd, "e2e/", 100).await;
    let (cluster_id, members) = membership(client, ns).await;
    assert_eq!(members.len(), 3, "{members:?}");
    let mut before = Before {
        pods: BTreeMap::new(),
        pvcs: BTreeMap::new(),
        ids: members
            .iter()
            .map(|(id, (name, _, _))| (name.clone(), id.clone()))
            .collect(),
        cluster_id,
        keys,
    };
    for m in &names {
        before.pods.insert(
            m.clone(),
            pods.get(m).await.or_panic().uid().or_panic_none(),
        );
        let pvc = format!("data-{m}");
        before.pvcs.insert(
            pvc.clone(),
            pvcs.get(&pvc).await.or_panic().uid().or_panic_none(),
        );
    }
    before
}

/// A kubeconfig for [`MIGRATING_USER`], a cluster admin (`O=system:masters`) with its own client
/// certificate from the control plane's client CA, written into `dir`.
fn migrating_admin_kubeconfig(cp: &ControlPlane, dir: &std::path::Path) -> std::path::PathBuf {
    let (cert, key) = cp
        .pki()
        .client_ca
        .sign(Leaf {
            common_name: MIGRATING_USER,
            organizations: &["system:masters"],
            sans: &[],
            usages: &[rcgen::ExtendedKeyUsagePurpose::ClientAuth],
        })
        .or_panic();
    let (cert_file, key_file) = (
        dir.join("migrating-admin.crt"),
        dir.join("migrating-admin.key"),
    );
    std::fs::write(&cert_file, cert).or_panic();
    std::fs::write(&key_file, key).or_panic();
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": cp.server_url(),
            "certificate-authority": cp.pki().serving_ca_file,
        }}],
        "users": [{"name": MIGRATING_USER, "user": {
            "client-certificate": cert_file,
            "client-key": key_file,
        }}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": MIGRATING_USER}}],
        "current-context": "test",
    });
    let path = dir.join("migrating-admin.kubeconfig");
    // JSON is YAML: kubectl and kube-rs read it as a kubeconfig.
    std::fs::write(&path, kubeconfig.to_string()).or_panic();
    path
}

/// Start the webhook binary (the operator's identity as `--controller-username`), register both
/// configurations with failurePolicy `Fail`, and wait until the apiserver calls it: the
/// migrating admin's dry-run create of an EtcdMember without the migration's marker is refused
/// by the webhook as operator-owned (and must stay refused: the allowance is for the migration's
/// own writes only).
async fn start_webhook(
    cp: &ControlPlane,
    client: &Client,
    ns: &str,
    as_admin: Client,
    operator_user: &str,
) -> Webhook {
    let hook = Webhook::start(cp, &[&format!("--controller-username={operator_user}")])
        .await
        .or_panic();
    webhook::register(client, "migrate-aenix", &hook, FailurePolicy::Fail)
        .await
        .or_panic();
    let members: Api<EtcdMember> = Api::namespaced(as_admin, ns);
    let unmarked: EtcdMember = serde_json::from_value(json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
        "kind": "EtcdMember",
        "metadata": {"name": "unmarked", "namespace": ns},
        "spec": {"clusterName": NAME, "version": VERSION, "initialCluster": "",
                 "clusterToken": "t", "storage": {"size": "1Gi"}},
    }))
    .or_panic();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refusal = webhook::wait_until(
        "the webhook to refuse the admin's unmarked EtcdMember",
        Duration::from_secs(60),
        || {
            let (members, unmarked, dry_run) = (&members, &unmarked, &dry_run);
            async move {
                Ok(match members.create(dry_run, unmarked).await {
                    Err(kube::Error::Api(s)) if s.message.contains("operator-owned") => {
                        Some(s.message)
                    }
                    _ => None,
                })
            }
        },
    )
    .await
    .or_panic();
    assert!(refusal.contains(MIGRATING_USER), "{refusal}");
    hook
}

/// `etcd-operator migrate --from-aenix NAME -n ns [extra]`, as the migrating admin runs it.
fn migrate(kubeconfig: &std::path::Path, ns: &str, extra: &[&str]) -> Output {
    let mut args = vec!["migrate", "--from-aenix", NAME, "-n", ns];
    args.extend_from_slice(extra);
    tests::operator::run_subcommand(kubeconfig, &args)
}

/// Resource versions of everything the dry run must leave alone.
async fn versions(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let mut v = Versions {
        client,
        ns,
        out: BTreeMap::new(),
    };
    v.of::<Pod>("pod").await;
    v.of::<PersistentVolumeClaim>("pvc").await;
    v.of::<Service>("svc").await;
    v.of::<StatefulSet>("sts").await;
    v.list("aenix", aenix_api(client, ns)).await;
    v.of::<EtcdCluster>("etcdcluster").await;
    v.of::<EtcdMember>("etcdmember").await;
    v.out
}

/// `<kind>/<name>` → resource version of the objects listed so far in one namespace.
struct Versions<'a> {
    client: &'a Client,
    ns: &'a str,
    out: BTreeMap<String, String>,
}

impl Versions<'_> {
    /// Adds every `K` of the namespace.
    async fn of<K>(&mut self, kind: &str)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        self.list(kind, Api::<K>::namespaced(self.client.clone(), self.ns))
            .await;
    }

    /// Adds every object `api` lists.
    async fn list<K>(&mut self, kind: &str, api: Api<K>)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        for o in api.list(&Default::default()).await.or_panic() {
            self.out.insert(
                format!("{kind}/{}", o.name_any()),
                o.resource_version().unwrap_or_default(),
            );
        }
    }
}

/// The adopted Pods are the aenix ones, running since before the migration, each owned by its
/// EtcdMember; etcd's cluster ID is unchanged and it still lists the adopted members under their
/// IDs (and, with `exact`, no other member).
async fn assert_adopted(client: &Client, ns: &str, before: &Before, exact: bool, log: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let members: Api<EtcdMember> = Api::namespaced(client.clone(), ns);
    for (name, uid) in &before.pods {
        let pod = pods
            .get_opt(name)
            .await
            .or_panic()
            .unwrap_or_else(|| panic!("adopted Pod {name} is gone; {log}"));
        assert_eq!(
            pod.uid().as_ref(),
            Some(uid),
            "Pod {name} was recreated; {log}"
        );
        assert!(
            pod.metadata.deletion_timestamp.is_none(),
            "Pod {name} is being deleted; {log}"
        );
        assert_eq!(restarts(&pod), 0, "Pod {name}'s etcd restarted; {log}");
        let m = members.get(name).await.or_panic();
        assert_eq!(
            tests_controller_uid(&pod),
            m.uid(),
            "Pod {name} is not owned by EtcdMember {name}"
        );
        assert_eq!(
            m.status.as_ref().and_then(|s| s.member_id.clone()).as_ref(),
            before.ids.get(name),
            "EtcdMember {name}'s member ID"
        );
    }
    let (cluster_id, etcd) = membership(client, ns).await;
    assert_eq!(cluster_id, before.cluster_id, "etcd cluster ID");
    let ids: BTreeMap<String, String> = etcd
        .iter()
        .map(|(id, (name, _, _))| (name.clone(), id.clone()))
        .filter(|(name, _)| exact || before.ids.contains_key(name))
        .collect();
    assert_eq!(ids, before.ids, "etcd's member list changed; {log}");
}

fn tests_controller_uid(obj: &impl kube::Resource) -> Option<String> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aenix_cluster_is_adopted_in_place_then_scales_and_is_replaced_by_native_members() {
    let staged = tests::e2e::stage(PodRunner::builder()).await;
    let cp = staged.cp;
    let client = cp.client().or_panic();
    install_aenix_crd(&client).await;
    let ns = cp.namespace("aenix").await.or_panic();
    let started = Instant::now();
    let before = build_aenix_cluster(&client, &ns).await;
    eprintln!("aenix cluster built in {:?}", started.elapsed());

    // The webhook is on, and the migration runs as a cluster admin who is not the operator.
    let dir = tempfile::tempdir_in(cp.root()).or_panic();
    let kubeconfig = migrating_admin_kubeconfig(cp, dir.path());
    let as_admin = Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).or_panic(),
            &Default::default(),
        )
        .await
        .or_panic(),
    )
    .or_panic();
    // The operator runs later as the chart's ServiceAccount in its own namespace: that identity
    // is the webhook's `--controller-username`, as the chart sets it.
    let operator_user = tests::chart_rbac::Identity::for_operator(cp, &staged.lease_ns, None)
        .await
        .or_panic()
        .username();
    let _hook = start_webhook(cp, &client, &ns, as_admin, &operator_user).await;

    // The dry run prints the plan and changes nothing.
    let untouched = versions(&client, &ns).await;
    let out = migrate(&kubeconfig, &ns, &[]);
    assert!(out.status.success(), "the dry run failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "[ok] the aenix operator is stopped",
        "propagationPolicy=Orphan",
        "etcd-operator.cozystack.io/headless-service-name",
        "[ok] peers use etcd's --peer-auto-tls",
        "etcd-operator.cozystack.io/peer-auto-tls=true",
        "Dry run: nothing was changed",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected:?} not in the plan:\n{stdout}"
        );
    }
    assert!(!stdout.contains("[FAIL]"), "{stdout}");
    assert_eq!(
        versions(&client, &ns).await,
        untouched,
        "the dry run changed objects"
    );

    // --apply adopts in place.
    let out = migrate(&kubeconfig, &ns, &["--apply"]);
    assert!(out.status.success(), "the apply failed");
    assert_adopted(&client, &ns, &before, true, "after --apply").await;
    let members: Api<EtcdMember> = Api::namespaced(client.clone(), &ns);
    for name in before.pods.keys() {
        let m = members.get(name).await.or_panic();
        let ann = m.annotations();
        assert_eq!(
            ann.get(labels::HEADLESS_SERVICE_ANNOTATION)
                .map(String::as_str),
            Some("legacy-headless")
        );
        assert_eq!(
            ann.get(labels::DATA_DIR_SUBPATH_ANNOTATION)
                .map(String::as_str),
            Some("default.etcd")
        );
        assert!(
            m.spec.tls.as_ref().is_some_and(|t| t.peer_auto_tls),
            "adopted member {name}: spec.tls.peerAutoTLS"
        );
    }
    let adopted = Api::<EtcdCluster>::namespaced(client.clone(), &ns)
        .get(NAME)
        .await
        .or_panic();
    assert!(
        adopted.peer_auto_tls(),
        "the adopted EtcdCluster does not record peer auto-TLS"
    );
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    for (name, uid) in &before.pvcs {
        let pvc = pvcs.get(name).await.or_panic();
        assert_eq!(pvc.uid().as_ref(), Some(uid), "PVC {name} was recreated");
        assert_eq!(
            pvc.labels().get(labels::CLUSTER).map(String::as_str),
            Some(NAME)
        );
        assert!(
            tests_controller_uid(&pvc).is_some(),
            "PVC {name} has no owner"
        );
    }
    assert!(
        Api::<StatefulSet>::namespaced(client.clone(), &ns)
            .get_opt(NAME)
            .await
            .or_panic()
            .is_none(),
        "the StatefulSet is still there"
    );
    assert!(
        aenix_api(&client, &ns)
            .get_opt(NAME)
            .await
            .or_panic()
            .is_none(),
        "the aenix EtcdCluster is still there"
    );
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let headless = services.get(NAME).await.or_panic();
    assert_eq!(
        headless.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()),
        Some("None"),
        "Service {NAME} is not headless"
    );
    assert!(services
        .get_opt(&format!("{NAME}-client"))
        .await
        .or_panic()
        .is_some());
    let legacy_svc = services.get(&format!("{NAME}-headless")).await.or_panic();
    assert_eq!(
        legacy_svc.owner_references().len(),
        3,
        "the legacy headless Service is owned by the three adopted members"
    );
    let status = Api::<EtcdCluster>::namespaced(client.clone(), &ns)
        .get(NAME)
        .await
        .or_panic()
        .status
        .unwrap_or_default();
    assert_eq!(status.cluster_id.as_ref(), Some(&before.cluster_id));
    check_keys_kept(&client, &ns, &before).await;

    // Our operator takes it from here and keeps it as it is.
    let env = staged.operator(None, &[]).await;
    let log = format!("operator log: {}", env.operator.log().display());
    env.wait_healthy(&ns, NAME, 3, BOOT).await;
    throughout(SETTLE, Duration::from_secs(2), || {
        assert_adopted(&client, &ns, &before, true, &log)
    })
    .await;
    let text = std::fs::read_to_string(env.operator.log()).unwrap_or_default();
    for write in [
        "added member as learner",
        "removed member from etcd",
        "removed a ghost member",
        "deleting member",
    ] {
        assert!(
            !text.contains(write),
            "the operator changed etcd membership while adopting ({write:?}); {log}"
        );
    }
    check_keys_kept(&client, &ns, &before).await;

    // The peer auto-TLS annotation, removed by hand, is set back: without it the operator would
    // compute http:// peer URLs and new members could not join.
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    annotate(&clusters, labels::PEER_AUTO_TLS_ANNOTATION, Value::Null).await;
    eventually_every(
        &format!("the removed peer auto-TLS annotation set back; {log}"),
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            let c = clusters.get(NAME).await.or_panic();
            c.peer_auto_tls()
                .then_some(())
                .ok_or_else(|| format!("annotations: {:?}", c.annotations()))
        },
    )
    .await;

    // A scale-up adds a native member.
    env.scale(&ns, NAME, 4).await;
    env.wait_healthy(&ns, NAME, 4, BOOT).await;
    let native: Vec<EtcdMember> = env
        .members(&ns, NAME)
        .await
        .into_iter()
        .filter(|m| !before.pods.contains_key(&m.name_any()))
        .collect();
    assert_eq!(native.len(), 1, "one member was added");
    assert_native(&client, &ns, &native[0]).await;
    assert_adopted(&client, &ns, &before, false, &log).await;
    check_keys_kept(&client, &ns, &before).await;

    // On request, the adopted members are replaced one at a time by native ones.
    annotate(&clusters, labels::REPLACE_ADOPTED_ANNOTATION, json!("true")).await;
    let min_voters = std::cell::Cell::new(usize::MAX);
    eventually_every(
        &format!("the adopted members replaced; {log}"),
        BOOT * 4,
        Duration::from_secs(2),
        || async {
            let members = env.members(&ns, NAME).await;
            let adopted = members
                .iter()
                .filter(|m| before.pods.contains_key(&m.name_any()))
                .count();
            let voters = try_voters(&client, &ns).await;
            if let Some(voters) = voters {
                min_voters.set(min_voters.get().min(voters));
            }
            let c = env.cluster(&ns, NAME).await;
            // etcd's own count too: the status written just before the last adopted member's
            // removal still reads healthy with 4 while etcd lists 3.
            if adopted == 0 && tests::e2e::healthy(&c, 4) && voters == Some(4) {
                Ok(())
            } else {
                Err(format!(
                    "adopted members left: {adopted}; etcd voters: {voters:?}"
                ))
            }
        },
    )
    .await;
    let min_voters = min_voters.get();
    assert!(
        min_voters >= 3,
        "a replacement left fewer than 3 voters of 4 ({min_voters}): not one at a time"
    );
    let (cluster_id, etcd) = membership(&client, &ns).await;
    assert_eq!(cluster_id, before.cluster_id, "cluster ID changed");
    assert_eq!(etcd.len(), 4, "{etcd:?}");
    for (name, url, learner) in etcd.values() {
        assert!(!learner, "{name} is a learner");
        assert_eq!(
            url,
            &format!("https://{name}.{NAME}.{ns}.svc:2380"),
            "{name} is not native"
        );
    }
    for m in env.members(&ns, NAME).await {
        assert_native(&client, &ns, &m).await;
    }
    check_keys_kept(&client, &ns, &before).await;
    // The legacy headless Service went with the last adopted member.
    eventually_every(
        "the legacy headless Service gone with the adopted members",
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            match services
                .get_opt(&format!("{NAME}-headless"))
                .await
                .or_panic()
            {
                Some(_) => Err("still there".to_string()),
                None => Ok(()),
            }
        },
    )
    .await;
}

/// Sets (or, with null, removes) annotation `key` of the EtcdCluster.
async fn annotate(clusters: &Api<EtcdCluster>, key: &str, value: Value) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    clusters
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .or_panic();
}

/// A member the operator created: no reserved annotation, its Pod under the cluster's own Service.
async fn assert_native(client: &Client, ns: &str, m: &EtcdMember) {
    let name = m.name_any();
    for key in [
        labels::HEADLESS_SERVICE_ANNOTATION,
        labels::DATA_DIR_SUBPATH_ANNOTATION,
    ] {
        assert!(
            !m.annotations().contains_key(key),
            "native member {name} carries {key}"
        );
    }
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .or_panic();
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.subdomain.as_deref(),
        Some(NAME),
        "Pod {name}'s subdomain"
    );
    let args = spec.containers[0].args.clone().unwrap_or_default();
    assert!(
        args.contains(&format!(
            "--initial-advertise-peer-urls=https://{name}.{NAME}.{ns}.svc:2380"
        )),
        "{args:?}"
    );
    assert!(
        args.contains(&"--data-dir=/var/lib/etcd".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--peer-auto-tls".to_string()),
        "native member {name} must keep peer auto-TLS: {args:?}"
    );
    assert!(
        m.spec.tls.as_ref().is_some_and(|t| t.peer_auto_tls),
        "native member {name}: spec.tls.peerAutoTLS"
    );
}
