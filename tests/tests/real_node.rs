//! A real node (`tests::node::RealNode`: kubelet, containerd, runc, the CNI bridge) registered
//! with the test control plane under its own identity, running an etcd member Pod from the image
//! built like etcd's official one (distroless: `etcd`, `etcdctl`, `etcdutl` only) under the
//! restricted Pod Security profile: UID 65532, a read-only root, no capabilities, seccomp
//! `RuntimeDefault`. The documented `kubectl exec ... -- etcdctl` recipe works through the real
//! streaming path, a shell does not exist in the member, and `kubectl logs` reads etcd's log.
//!
//! And an EtcdCluster of three members, reconciled by the operator, on three nodes (one member
//! each): their Pods under the kubelets with PVCs bound to local volumes, peers finding each
//! other through CoreDNS, a member's etcd killed inside its container restarted by the kubelet as
//! the same member, with every key kept, then scaled 3 → 5 → 3, paused and resumed.
//!
//! And the chart as users install it: `helm install` with the webhook and cert-manager-issued
//! webhook certificates into a namespace enforcing the restricted profile, the controller and the
//! webhook running from the project's image (imported under the chart's reference) under runc as
//! UID 65532, reaching the apiserver through the `kubernetes` Service (kube-proxy), the webhook
//! called by the apiserver, the controller reconciling a cluster whose members find each other
//! through CoreDNS.
//!
//! Needs root, `ETCD_OPERATOR_TESTBINS` (with kubelet) and the node images
//! (`ETCD_OPERATOR_NODE_IMAGES`, `bash tools/node-images/build.sh`); `make test-node` provides
//! both.

use std::time::Duration;

use api::v1alpha2::{EtcdCluster, EtcdRecovery, EtcdSnapshot, RecoveryPhase, SnapshotPhase};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::env::ControlPlane;
use tests::harness::eventually;
use tests::node::{pids_naming, uid_of, RealNodes};
use tests::operator::Operator;
use tests::OrPanic;

/// The first node's name (`RealNodes` names them `node-1` …).
const NODE: &str = "node-1";
/// The nodes a cluster's members spread over: one each, as a production cluster places them.
const NODES: u8 = 3;

/// One set of real nodes per host: the tests of this binary take turns.
static ONE_NODE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The uid a process whose command line contains `needle` runs as (its real uid).
fn uid_of_process_naming(needle: &str) -> Option<u32> {
    pids_naming(needle).into_iter().find_map(uid_of)
}

/// A control plane with `count` real nodes Ready (and the CRDs when `crds`), and a namespace
/// enforcing the restricted Pod Security profile, as a production namespace would have it.
async fn real_nodes(crds: bool, prefix: &str, count: u8) -> (ControlPlane, RealNodes, String) {
    let mut builder = ControlPlane::builder();
    if crds {
        builder = builder.with_crds();
    }
    let cp = tests::node::control_plane(builder).start().await.or_panic();
    let nodes = RealNodes::start(&cp, count).await.or_panic();
    let ns = cp.namespace(prefix).await.or_panic();
    cp.kubectl_ok(&[
        "label",
        "namespace",
        &ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ])
    .await
    .or_panic();
    (cp, nodes, ns)
}

/// The runbook's recipe in member `pod`, through the apiserver and the kubelet's streaming
/// server: `etcdctl endpoint health --cluster`'s output.
async fn endpoint_health(cp: &ControlPlane, ns: &str, pod: &str) -> String {
    cp.kubectl_ok(&[
        "exec",
        "-n",
        ns,
        pod,
        "-c",
        "etcd",
        "--",
        "etcdctl",
        "endpoint",
        "health",
        "--cluster",
    ])
    .await
    .or_panic()
}

/// `kubectl apply -f` of `manifest` (a JSON object, or a `List`), written under the control
/// plane's root as `<stem>.json`: the objects go in as a user's file does.
async fn kubectl_apply(cp: &ControlPlane, stem: &str, manifest: serde_json::Value) {
    let file = cp.root().join(format!("{stem}.json"));
    std::fs::write(&file, manifest.to_string()).or_panic();
    cp.kubectl_ok(&["apply", "-f", &file.to_string_lossy()])
        .await
        .or_panic();
}

/// Create EtcdCluster `name` in `ns` with `spec` (JSON, as a user writes it); the stored object.
async fn create_cluster(
    clusters: &Api<EtcdCluster>,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> EtcdCluster {
    let cluster: EtcdCluster = serde_json::from_value(json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
        "kind": "EtcdCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .or_panic();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .or_panic()
}

/// Wait until object `name` of `api` satisfies `done`; returns it (the timeout names `what` and
/// the object's last state).
async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&K) -> bool,
) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(what, timeout, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        if done(&object) {
            Ok(object)
        } else {
            Err(format!("{object:?}"))
        }
    })
    .await
}

/// A real node, the operator on the host, and a 3-member EtcdCluster `name` of etcd `version`
/// Ready in a restricted namespace: the start of the operator-on-host scenarios.
struct Scene {
    cp: ControlPlane,
    nodes: RealNodes,
    ns: String,
    client: kube::Client,
    operator: Operator,
    clusters: Api<EtcdCluster>,
    pods: Api<Pod>,
    selector: ListParams,
}

async fn scene(prefix: &str, name: &str, version: &str) -> Scene {
    let (cp, nodes, ns) = real_nodes(true, prefix, NODES).await;
    let client = cp.client().or_panic();
    let operator = host_operator(&cp).await;
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    // The anti-affinity the webhook defaults (the operator runs here without it).
    let spread = webhook::defaulting::member_anti_affinity(name, webhook::AntiAffinity::Preferred);
    create_cluster(
        &clusters,
        &ns,
        name,
        json!({"replicas": 3, "version": version, "affinity": {"podAntiAffinity": spread}}),
    )
    .await;
    let what = format!("3 members of {name} ({version}) Ready on the real nodes");
    wait_healthy(&clusters, name, 3, &what).await;
    Scene {
        pods: Api::namespaced(client.clone(), &ns),
        selector: ListParams::default().labels(&api::labels::cluster_selector(name)),
        cp,
        nodes,
        ns,
        client,
        operator,
        clusters,
    }
}

/// The keys under `e2e/` of cluster `name` are exactly `keys` (the tests' one data check), read
/// through the cluster; `what` names the moment in a failure.
async fn assert_exactly_the_keys(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    keys: &std::collections::BTreeMap<String, String>,
) {
    let mut etcd = tests::e2e::etcd_client(client, ns, name).await;
    tests::e2e::check_keys(&mut etcd, what, "e2e/", keys, tests::e2e::Keys::Exactly).await;
}

/// Each of `members` on a node of its own, one of `nodes`: the anti-affinity spread them.
fn assert_spread(members: &[Pod], nodes: &RealNodes) {
    let names = nodes.names();
    let placed: Vec<(String, String)> = members
        .iter()
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            (p.name_any(), node.unwrap_or_default())
        })
        .collect();
    for (pod, node) in &placed {
        assert!(
            names.contains(node),
            "{pod} is on {node:?}, not a real node {names:?}"
        );
    }
    let distinct: std::collections::BTreeSet<&String> = placed.iter().map(|(_, n)| n).collect();
    assert_eq!(
        distinct.len(),
        members.len(),
        "members share a node: {placed:?}"
    );
}

/// The operator on the host, cluster-wide, with the chart's RBAC and its Lease in a namespace
/// of its own.
async fn host_operator(cp: &ControlPlane) -> Operator {
    let lease_ns = cp.namespace("operator").await.or_panic();
    Operator::start(cp, &lease_ns, None).await.or_panic()
}

/// Wait until EtcdCluster `name` serves `replicas` Ready members, nothing in progress.
async fn wait_healthy(clusters: &Api<EtcdCluster>, name: &str, replicas: i32, what: &str) {
    eventually(what, Duration::from_secs(180), || async {
        let c = clusters.get(name).await.map_err(|e| e.to_string())?;
        if tests::e2e::healthy(&c, replicas) {
            Ok(())
        } else {
            Err(format!("{:?}", c.status))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_member_runs_distroless_and_restricted_under_a_real_kubelet() {
    let _turn = ONE_NODE.lock().await;
    let (cp, mut nodes, ns) = real_nodes(false, "real-node", 1).await;
    let client = cp.client().or_panic();

    let registered = Api::<Node>::all(client.clone()).get(NODE).await.or_panic();
    let info = registered
        .status
        .and_then(|s| s.node_info)
        .expect("the kubelet reports its node info");
    assert_eq!(Some(info.kubelet_version.as_str()), cp.kubernetes_version());
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "{info:?}"
    );

    let version = std::fs::read_to_string(cp.testbins().dir().join("etcd-3.6/VERSION"))
        .or_panic()
        .trim()
        .to_string();
    let marker = format!("real-node-{}", std::process::id());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "etcd-0", "namespace": ns},
        "spec": {
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 5,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "etcd",
                "image": format!("quay.io/coreos/etcd:{version}"),
                "command": [
                    "etcd", format!("--name={marker}"), "--data-dir=/var/lib/etcd/data",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    "--advertise-client-urls=http://127.0.0.1:2379",
                    "--listen-metrics-urls=http://0.0.0.0:2381",
                ],
                "securityContext": {
                    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 2381}, "periodSeconds": 2},
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }))
    .or_panic();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await.or_panic();
    eventually(
        "etcd-0 Ready on the real node",
        Duration::from_secs(90),
        || async {
            let p = pods.get("etcd-0").await.map_err(|e| e.to_string())?;
            let on = p.spec.as_ref().and_then(|s| s.node_name.clone());
            let ready = tests::e2e::pod_ready(&p);
            if ready && on.as_deref() == Some(NODE) {
                Ok(())
            } else {
                Err(format!("node {on:?}, status {:?}", p.status))
            }
        },
    )
    .await;

    // The runbook's recipe, through the apiserver and the kubelet's real streaming server.
    let health = endpoint_health(&cp, &ns, "etcd-0").await;
    assert!(
        health.contains("is healthy: successfully committed proposal"),
        "{health}"
    );
    // The official image has no shell: what a runbook must never rely on.
    let shell = cp
        .kubectl(&[
            "exec", "-n", &ns, "etcd-0", "-c", "etcd", "--", "sh", "-c", "true",
        ])
        .await
        .or_panic();
    assert!(
        !shell.success && shell.stderr.contains("executable file not found"),
        "a shell ran in the distroless member: {shell:?}"
    );
    let logs = cp
        .kubectl_ok(&["logs", "-n", &ns, "etcd-0", "-c", "etcd"])
        .await
        .or_panic();
    assert!(logs.contains("ready to serve client requests"), "{logs}");
    assert_eq!(
        uid_of_process_naming(&format!("--name={marker}")),
        Some(65532),
        "etcd does not run as 65532"
    );

    // Deleted through the API, the kubelet stops it.
    pods.delete("etcd-0", &DeleteParams::default())
        .await
        .or_panic();
    eventually("etcd-0 gone", Duration::from_secs(60), || async {
        match pods.get_opt("etcd-0").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(uid_of_process_naming(&format!("--name={marker}")), None);
    nodes.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_runs_a_three_member_cluster_on_the_real_node_and_the_kubelet_restarts_a_killed_member(
) {
    let _turn = ONE_NODE.lock().await;
    let Scene {
        cp,
        mut nodes,
        ns,
        client,
        operator,
        clusters,
        pods,
        selector,
    } = scene("real-cluster", "real", "3.6.16").await;
    let members = pods.list(&selector).await.or_panic().items;
    assert_eq!(members.len(), 3, "{members:?}");
    assert_spread(&members, &nodes);
    for pod in &members {
        // Each one's etcd runs as the image's non-root user, under runc.
        let name = pod.name_any();
        assert_eq!(
            uid_of_process_naming(&format!("--name={name}")),
            Some(65532),
            "{name}'s etcd"
        );
    }
    // The claims are bound to local volumes on the node, which the kubelet gave the Pods' fsGroup.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for claim in claims.list(&selector).await.or_panic() {
        let volume = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .expect("a bound claim");
        let pv = volumes.get(&volume).await.or_panic();
        let spec = pv.spec.expect("a PV spec");
        let path = spec.local.expect("a local volume").path;
        let meta = std::fs::metadata(&path).or_panic();
        assert_eq!(
            std::os::unix::fs::MetadataExt::gid(&meta),
            65532,
            "{path} is not the Pod's fsGroup's"
        );
    }

    let keys = tests::e2e::write_keys(&client, &ns, "real", 100).await;
    // The runbook's recipe, through the kubelet's streaming server, in the distroless image: the
    // peers' names resolve through CoreDNS inside the Pod.
    let first = members[0].name_any();
    let health = endpoint_health(&cp, &ns, &first).await;
    assert_eq!(
        health
            .matches("is healthy: successfully committed proposal")
            .count(),
        3,
        "{health}"
    );

    // A member's etcd killed inside its container: the kubelet restarts it, the same Pod and
    // the same etcd member, with its data.
    let victim = members[1].clone();
    let victim_name = victim.name_any();
    let before = tests::e2e::member_view(&victim).await.or_panic();
    let pids = pids_naming(&format!("--name={victim_name}"));
    assert_eq!(pids.len(), 1, "{victim_name}'s etcd processes: {pids:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .or_panic();
    eventually(
        "the killed member restarted in place and Ready",
        Duration::from_secs(120),
        || async {
            let p = pods.get(&victim_name).await.map_err(|e| e.to_string())?;
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.name == "etcd"))
                .map(|c| c.restart_count)
                .unwrap_or(0);
            if p.uid() == victim.uid() && restarts >= 1 && tests::e2e::pod_ready(&p) {
                Ok(p)
            } else {
                Err(format!("uid {:?}, restarts {restarts}", p.uid()))
            }
        },
    )
    .await;
    let restarted = pods.get(&victim_name).await.or_panic();
    let after = tests::e2e::member_view(&restarted).await.or_panic();
    assert_eq!(
        (after.cluster_id, after.member_id),
        (before.cluster_id, before.member_id)
    );
    assert_ne!(pids_naming(&format!("--name={victim_name}")), pids);
    let own = tests::e2e::read_member_keys(&restarted, "e2e/").await;
    assert_eq!(own, keys, "{victim_name}'s own data after the restart");
    wait_healthy(&clusters, "real", 3, "3 members Ready again").await;
    assert_exactly_the_keys(
        &client,
        &ns,
        "real",
        "after the kubelet restarted a member",
        &keys,
    )
    .await;

    // Scaled 3 → 5 → 3 on the real node: learners join through CoreDNS names, their claims bind
    // to new local volumes, and every key stays.
    for replicas in [5, 3] {
        clusters
            .patch(
                "real",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .or_panic();
        let what = format!("{replicas} members Ready on the real node");
        wait_healthy(&clusters, "real", replicas, &what).await;
        // The removed members' Pods end as the kubelet finishes their graceful termination.
        let names = nodes.names();
        eventually(
            &format!("exactly {replicas} member Pods, all on the real nodes"),
            Duration::from_secs(60),
            || async {
                let running = pods.list(&selector).await.map_err(|e| e.to_string())?.items;
                let placed: Vec<(String, Option<String>)> = running
                    .iter()
                    .map(|p| {
                        (
                            p.name_any(),
                            p.spec.as_ref().and_then(|s| s.node_name.clone()),
                        )
                    })
                    .collect();
                let on_nodes = placed
                    .iter()
                    .filter(|(_, n)| n.as_ref().is_some_and(|n| names.contains(n)))
                    .count();
                if running.len() == replicas as usize && on_nodes == running.len() {
                    Ok(())
                } else {
                    Err(format!("{} Pods: {placed:?}", running.len()))
                }
            },
        )
        .await;
        assert_exactly_the_keys(
            &client,
            &ns,
            "real",
            &format!("scaled to {replicas}"),
            &keys,
        )
        .await;
    }

    // Paused (`replicas: 0`): the last member goes dormant, its Pod deleted, its local volume
    // kept on its node; resumed, etcd restarts there from the same data, same cluster.
    let before = tests::e2e::member_view(&pods.list(&selector).await.or_panic().items[0])
        .await
        .or_panic()
        .cluster_id;
    let scale = |replicas: i32| {
        let clusters = clusters.clone();
        async move {
            clusters
                .patch(
                    "real",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await
                .or_panic();
        }
    };
    scale(0).await;
    wait_for(
        &clusters,
        "real",
        "Available=False/Paused",
        Duration::from_secs(180),
        |c| {
            tests::e2e::condition(c, "Available")
                .is_some_and(|(s, r, _)| s == "False" && r == "Paused")
        },
    )
    .await;
    eventually(
        "no member Pod while paused",
        Duration::from_secs(60),
        || async {
            let left = pods.list(&selector).await.map_err(|e| e.to_string())?.items;
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{} Pods", left.len()))
            }
        },
    )
    .await;
    scale(3).await;
    wait_healthy(&clusters, "real", 3, "3 members Ready after the resume").await;
    let resumed = pods.list(&selector).await.or_panic().items;
    let after = tests::e2e::member_view(&resumed[0]).await.or_panic();
    assert_eq!(
        after.cluster_id, before,
        "the resumed cluster is the same etcd cluster"
    );
    assert_exactly_the_keys(&client, &ns, "real", "after the pause and resume", &keys).await;

    dedicated_nodes_take_only_the_members_that_tolerate_them(&cp, &nodes, &ns, &clusters, &pods)
        .await;

    operator.stop(Duration::from_secs(5)).await;
    clusters
        .delete("real", &DeleteParams::default())
        .await
        .or_panic();
    nodes.stop();
}

/// Two of the three nodes made etcd's own (docs/scheduling.md: tainted `dedicated=etcd:NoSchedule`
/// and labelled `dedicated=etcd`): a cluster that tolerates the taint and selects the label has
/// all its members there, and only there; one without is kept off them, on the one ordinary
/// node (the scheduler honours the taint). The running cluster is left alone
/// (NoSchedule does not evict).
async fn dedicated_nodes_take_only_the_members_that_tolerate_them(
    cp: &ControlPlane,
    nodes: &RealNodes,
    ns: &str,
    clusters: &Api<EtcdCluster>,
    pods: &Api<Pod>,
) {
    let names = nodes.names();
    let (ordinary, dedicated) = names.split_first().expect("three nodes");
    for node in dedicated {
        cp.kubectl_ok(&["taint", "nodes", node, "dedicated=etcd:NoSchedule"])
            .await
            .or_panic();
        cp.kubectl_ok(&["label", "nodes", node, "dedicated=etcd"])
            .await
            .or_panic();
    }
    create_cluster(
        clusters,
        ns,
        "placed",
        json!({"replicas": 3, "version": "3.6.16",
               "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "etcd",
                                "effect": "NoSchedule"}],
               "nodeSelector": {"dedicated": "etcd"}}),
    )
    .await;
    create_cluster(
        clusters,
        ns,
        "plain",
        json!({"replicas": 1, "version": "3.6.16"}),
    )
    .await;
    wait_healthy(
        clusters,
        "placed",
        3,
        "3 members of placed Ready on the dedicated nodes",
    )
    .await;
    wait_healthy(
        clusters,
        "plain",
        1,
        "the member of plain Ready off the dedicated nodes",
    )
    .await;
    let node_of = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    };
    let placed = pods
        .list(&ListParams::default().labels(&api::labels::cluster_selector("placed")))
        .await
        .or_panic()
        .items;
    assert_eq!(placed.len(), 3, "{placed:?}");
    for p in &placed {
        assert!(
            dedicated.contains(&node_of(p)),
            "{} is on {:?}, not a dedicated node {dedicated:?}",
            p.name_any(),
            node_of(p)
        );
        let spec = p.spec.as_ref().expect("a Pod spec");
        assert_eq!(
            spec.node_selector
                .as_ref()
                .and_then(|s| s.get("dedicated"))
                .map(String::as_str),
            Some("etcd")
        );
    }
    let plain = pods
        .list(&ListParams::default().labels(&api::labels::cluster_selector("plain")))
        .await
        .or_panic()
        .items;
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert_eq!(
        &node_of(&plain[0]),
        ordinary,
        "a member without the toleration on a tainted node"
    );
    for name in ["placed", "plain"] {
        clusters
            .delete(name, &DeleteParams::default())
            .await
            .or_panic();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_the_operator_and_its_webhook_restricted_on_the_real_node() {
    let _turn = ONE_NODE.lock().await;
    let (cp, mut nodes, ns) = real_nodes(false, "real-chart", NODES).await;
    let client = cp.client().or_panic();
    let archive = tests::podrunner::test_image_layout()
        .parent()
        .expect("the layout's directory")
        .join("etcd-operator.tar");
    nodes
        .import_image(&archive, &tests::install::chart_image().or_panic())
        .or_panic();
    let _cert_manager = tests::env::CertManager::start(&cp).await.or_panic();

    // The release's namespace enforces the restricted profile before the chart goes in.
    let release_ns = tests::install::NAMESPACE;
    cp.kubectl_ok(&["create", "namespace", release_ns])
        .await
        .or_panic();
    cp.kubectl_ok(&[
        "label",
        "namespace",
        release_ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ])
    .await
    .or_panic();
    let helm = tests::helm::Helm::new(Some(cp.kubeconfig())).or_panic();
    let chart = tests::helm::chart_dir();
    let printed = helm
        .run([
            "install",
            tests::install::RELEASE,
            &chart.to_string_lossy(),
            "--namespace",
            release_ns,
            "--set",
            "webhook.enabled=true",
            "--set",
            "webhook.certificate.mode=certManager",
            "--wait",
            "--timeout",
            tests::install::HELM_TIMEOUT,
        ])
        .await
        .or_panic();

    // Both Deployments' Pods run on a real node, as the image's user, from the chart's image.
    let pods: Api<Pod> = Api::namespaced(client.clone(), release_ns);
    let running = pods.list(&ListParams::default()).await.or_panic().items;
    for deployment in [tests::install::CONTROLLER, tests::install::WEBHOOK] {
        let pod = running
            .iter()
            .find(|p| {
                p.name_any().starts_with(&format!("{deployment}-")) && tests::e2e::pod_ready(p)
            })
            .unwrap_or_else(|| panic!("no Ready Pod of {deployment}: {running:?}"));
        let on = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        assert!(
            on.as_ref().is_some_and(|n| nodes.names().contains(n)),
            "{deployment} runs on {on:?}"
        );
        let images: Vec<&str> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .filter_map(|c| c.image.as_deref())
            .collect();
        assert_eq!(
            images,
            [tests::install::chart_image().or_panic().as_str()],
            "{deployment}"
        );
        for status in pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
        {
            let id = status.container_id.as_deref().expect("a started container");
            assert_eq!(
                nodes.container_uid(id).or_panic(),
                65532,
                "{deployment}/{}",
                status.name
            );
        }
    }

    // The quickstart the install printed, pasted as it is: its cluster becomes Ready.
    let quickstart = tests::helm::notes_sample_command(&printed)
        .unwrap_or_else(|| panic!("helm install printed no sample cluster:\n{printed}"));
    host_shell(&cp, &quickstart).await;
    let sample: Api<EtcdCluster> = Api::namespaced(client.clone(), "default");
    wait_healthy(&sample, "my-etcd", 3, "the NOTES' sample cluster Ready").await;
    sample
        .delete("my-etcd", &DeleteParams::default())
        .await
        .or_panic();

    // The apiserver calls the webhook (its Service, the Pod's address), and the controller in its
    // Pod reconciles: the members find each other through CoreDNS.
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    let created = create_cluster(
        &clusters,
        &ns,
        "charted",
        json!({"replicas": 3, "version": "3.6.16"}),
    )
    .await;
    // The webhook's defaulting (preferred anti-affinity) is on the stored object.
    assert!(
        created
            .spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .is_some(),
        "the webhook did not default the anti-affinity: {:?}",
        created.spec.affinity
    );
    wait_healthy(
        &clusters,
        "charted",
        3,
        "3 members Ready, reconciled from a Pod",
    )
    .await;
    let members = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&api::labels::cluster_selector("charted")))
        .await
        .or_panic()
        .items;
    // The defaulted anti-affinity spread the members, one on each node.
    assert_spread(&members, &nodes);
    let health = endpoint_health(&cp, &ns, &members[0].name_any()).await;
    assert_eq!(
        health
            .matches("is healthy: successfully committed proposal")
            .count(),
        3,
        "{health}"
    );

    // A snapshot to S3 (MinIO on the host, a Service of the namespace: CoreDNS, then
    // kube-proxy's rewrite) taken by the operator's agent Job under the restricted profile, and a
    // new cluster restored from it: its seed's init containers run the operator binary inside the
    // distroless etcd image.
    let keys = tests::e2e::write_keys(&client, &ns, "charted", 100).await;
    let minio = tests::env::minio::Minio::start_on(
        cp.testbins(),
        &cp.root().join("minio"),
        false,
        nodes.gateway().parse().or_panic(),
    )
    .await
    .or_panic();
    let endpoint = minio.expose(&client, &ns, "s3").await;
    let location = |key: &str| {
        json!({
            "endpoint": endpoint, "bucket": minio.bucket, "key": key,
            "forcePathStyle": true, "credentialsSecretRef": {"name": "s3-creds"},
        })
    };
    kubectl_apply(
        &cp,
        "snapshot",
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "s3-creds", "namespace": ns},
             "stringData": {"AWS_ACCESS_KEY_ID": minio.writer.access_key,
                            "AWS_SECRET_ACCESS_KEY": minio.writer.secret_key}},
            {"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshot",
             "metadata": {"name": "charted-s3", "namespace": ns},
             "spec": {"clusterRef": {"name": "charted"}, "destination": {"s3": location("real/")}}},
        ]}),
    )
    .await;
    let snapshots: Api<EtcdSnapshot> = Api::namespaced(client.clone(), &ns);
    let snapshot = wait_for(
        &snapshots,
        "charted-s3",
        "snapshot charted-s3 Complete",
        Duration::from_secs(180),
        |s| s.status.as_ref().and_then(|st| st.phase) == Some(SnapshotPhase::Complete),
    )
    .await;
    let artifact = snapshot
        .status
        .and_then(|s| s.artifact)
        .expect("status.artifact");
    let object = artifact
        .uri
        .strip_prefix(&format!("s3://{}/", minio.bucket))
        .unwrap_or_else(|| panic!("artifact {} is not in the bucket", artifact.uri));
    let (size, _, _) = minio.object(object).await;
    assert_eq!(size, artifact.size_bytes);
    create_cluster(
        &clusters,
        &ns,
        "restored",
        json!({"replicas": 3, "version": "3.6.16",
               "bootstrap": {"restore": {"source": {"s3": location(object)}}}}),
    )
    .await;
    wait_healthy(&clusters, "restored", 3, "3 members restored from S3").await;
    let ids = |c: EtcdCluster| c.status.and_then(|s| s.cluster_id);
    assert_ne!(
        ids(clusters.get("restored").await.or_panic()),
        ids(clusters.get("charted").await.or_panic()),
        "a restore makes a new cluster"
    );
    assert_exactly_the_keys(
        &client,
        &ns,
        "restored",
        "restored from the real node's snapshot",
        &keys,
    )
    .await;
    for name in ["charted", "restored"] {
        clusters
            .delete(name, &DeleteParams::default())
            .await
            .or_panic();
    }

    // TLS from cert-manager Certificates (client mTLS, peers) and root auth, applied as a user
    // would: the kubelet mounts the Secrets cert-manager wrote, etcd reads them as 65532.
    kubectl_apply(&cp, "secured", secured_cluster(&ns)).await;
    wait_healthy(&clusters, "secured", 3, "3 TLS members with auth Ready").await;
    wait_for(
        &clusters,
        "secured",
        "status.authEnabled",
        Duration::from_secs(60),
        |c| c.status.as_ref().and_then(|s| s.auth_enabled) == Some(true),
    )
    .await;
    let member = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&api::labels::cluster_selector("secured")))
        .await
        .or_panic()
        .items[0]
        .name_any();
    // docs/tls.md and docs/auth.md: etcdctl in the member with the mounted certificates.
    let etcdctl = |user: Option<&'static str>, args: &'static [&'static str]| {
        let mut all = vec![
            "exec".to_string(),
            "-n".into(),
            ns.clone(),
            member.clone(),
            "-c".into(),
            "etcd".into(),
            "--".into(),
            "etcdctl".into(),
            "--endpoints=https://localhost:2379".into(),
            "--cacert=/etc/etcd/tls/client/ca.crt".into(),
            "--cert=/etc/etcd/tls/client/tls.crt".into(),
            "--key=/etc/etcd/tls/client/tls.key".into(),
        ];
        all.extend(user.map(|u| format!("--user={u}")));
        all.extend(args.iter().map(|a| a.to_string()));
        let cp = &cp;
        async move {
            let args: Vec<&str> = all.iter().map(String::as_str).collect();
            cp.kubectl(&args).await.or_panic()
        }
    };
    // Every member commits a linearizable read. The first try may come while the members are
    // still slow from enabling auth on a loaded machine (a fresh-clone run saw all three time out
    // at etcdctl's 5 s, with "apply request took too long" in the members' logs): asked again
    // until all three answer, as a user would.
    eventually(
        "etcdctl endpoint health --cluster (root) to find 3 healthy members",
        Duration::from_secs(90),
        || async {
            let health = etcdctl(Some(ROOT_LOGIN), &["endpoint", "health", "--cluster"]).await;
            let healthy = health
                .stdout
                .matches("is healthy: successfully committed proposal")
                .count();
            if healthy == 3 {
                Ok(())
            } else {
                Err(format!("{healthy} healthy: {health:?}"))
            }
        },
    )
    .await;
    // The writes are asked again while etcdctl only timed out (a fresh-clone CI run saw the root
    // login's Authenticate exceed etcdctl's 5 s right after the health check passed): the
    // outcome that matters is an answer, refused for the anonymous write and accepted for root.
    let answered = |user: Option<&'static str>, args: &'static [&'static str]| {
        let etcdctl = &etcdctl;
        eventually(
            "etcdctl put to answer rather than time out",
            Duration::from_secs(60),
            move || async move {
                let out = etcdctl(user, args).await;
                if out.stderr.contains("deadline exceeded") {
                    Err(format!("{out:?}"))
                } else {
                    Ok(out)
                }
            },
        )
    };
    let anonymous = answered(None, &["put", "secured", "no"]).await;
    assert!(
        !anonymous.success
            && (anonymous.stderr.contains("user name is empty")
                || anonymous.stderr.contains("permission denied")),
        "a write without the root login must be refused by etcd's auth: {anonymous:?}"
    );
    let root = answered(Some(ROOT_LOGIN), &["put", "secured", "yes"]).await;
    assert!(root.success, "{root:?}");
    // docs/tls.md's recipe for etcdctl on the user's machine, as written: the operator-client
    // certificate from its Secret, `kubectl port-forward` through the kubelet's streaming server.
    let recipe = documented_block("tls.md", "kubectl port-forward")
        .replace("<cluster>", "secured")
        .replace("<ns>", &ns);
    let listed = host_shell(&cp, &format!("POD={member}\n{recipe}")).await;
    assert_eq!(
        listed.matches("| started |").count(),
        3,
        "the port-forward recipe's member list: {listed}"
    );
    clusters
        .delete("secured", &DeleteParams::default())
        .await
        .or_panic();
    nodes.stop();
}

/// The first ```sh block of docs/`doc` that contains `needle`.
fn documented_block(doc: &str, needle: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(doc);
    let text = std::fs::read_to_string(&path).or_panic();
    text.split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .find(|block| block.contains(needle))
        .unwrap_or_else(|| panic!("no sh block with {needle:?} in {}", path.display()))
        .to_string()
}

/// Run `script` in bash on the host as a user's terminal would: the tests' `kubectl` and
/// `etcdctl` on `PATH`, `KUBECONFIG` set, a scratch directory; background jobs end with it. Its
/// stdout; it must succeed.
async fn host_shell(cp: &ControlPlane, script: &str) -> String {
    let bin = cp.user_tools("shell").or_panic();
    let dir = bin
        .parent()
        .expect("the tools' directory is under the root")
        .to_path_buf();
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}"
            ))
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("KUBECONFIG", cp.kubeconfig())
            .env("HOME", &dir)
            .current_dir(&dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out running {script}"))
    .or_panic();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script}\nfailed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The root login of [`secured_cluster`]'s credentials Secret.
const ROOT_LOGIN: &str = "root:real-node-pw";

/// A CA Issuer bootstrapped by a self-signed one (cert-manager's documented way), the root
/// credentials Secret, and a 3-member EtcdCluster `secured` with client mTLS and peer TLS from
/// that issuer and root auth: one `kubectl apply`.
fn secured_cluster(ns: &str) -> serde_json::Value {
    let issuer = |name: &str, spec: serde_json::Value| {
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    json!({"apiVersion": "v1", "kind": "List", "items": [
        issuer("selfsigned", json!({"selfSigned": {}})),
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
         "metadata": {"name": "etcd-ca", "namespace": ns},
         "spec": {"isCA": true, "commonName": "etcd-ca", "secretName": "etcd-ca",
                  "privateKey": {"algorithm": "ECDSA", "size": 256},
                  "issuerRef": {"name": "selfsigned", "kind": "Issuer", "group": "cert-manager.io"}}},
        issuer("etcd-ca", json!({"ca": {"secretName": "etcd-ca"}})),
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/basic-auth",
         "metadata": {"name": "secured-root", "namespace": ns},
         "stringData": {"username": "root", "password": ROOT_LOGIN.trim_start_matches("root:")}},
        {"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
         "metadata": {"name": "secured", "namespace": ns},
         "spec": {
             "replicas": 3, "version": "3.6.16",
             "tls": {
                 "client": {"certManager": {"serverIssuerRef": {"name": "etcd-ca"},
                                            "operatorClientIssuerRef": {"name": "etcd-ca"}}},
                 "peer": {"certManager": {"issuerRef": {"name": "etcd-ca", "kind": "Issuer"}}},
             },
             "auth": {"enabled": true, "rootCredentialsSecretRef": {"name": "secured-root"}},
         }},
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_5_cluster_upgrades_to_3_6_on_the_real_node_with_no_acknowledged_write_lost() {
    let _turn = ONE_NODE.lock().await;
    let old = std::fs::read_to_string(
        tests::env::Testbins::from_env()
            .or_panic()
            .dir()
            .join("etcd-3.5/VERSION"),
    )
    .or_panic()
    .trim()
    .trim_start_matches('v')
    .to_string();
    let Scene {
        // Kept to the end: dropping it stops the control plane.
        cp: _cp,
        mut nodes,
        ns,
        client,
        operator,
        clusters,
        pods,
        selector,
    } = scene("real-upgrade", "up", &old).await;
    let keys = tests::e2e::write_keys(&client, &ns, "up", 100).await;
    let before = pods.list(&selector).await.or_panic().items;
    let endpoints: Vec<String> = before
        .iter()
        .map(|p| format!("http://{}.up.{ns}.svc:2379", p.name_any()))
        .collect();
    let mut views = Vec::new();
    for pod in &before {
        views.push(tests::e2e::member_view(pod).await.or_panic());
    }

    // 3.5 → 3.6 with a writer running: the kubelet replaces each member's container image, the
    // member keeps its volume.
    let writer = tests::rollout::Writer::start(endpoints, None, "w/");
    tokio::time::sleep(Duration::from_secs(2)).await;
    clusters
        .patch(
            "up",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "3.6.16"}})),
        )
        .await
        .or_panic();
    let old_uids: Vec<String> = before.iter().map(|p| p.uid().unwrap_or_default()).collect();
    eventually(
        "every member restarted on 3.6.16 and the cluster healthy",
        Duration::from_secs(300),
        || async {
            let c = clusters.get("up").await.map_err(|e| e.to_string())?;
            let now = pods.list(&selector).await.map_err(|e| e.to_string())?.items;
            let upgraded = now.iter().all(|p| {
                let image = p.spec.as_ref().and_then(|s| s.containers[0].image.clone());
                image.is_some_and(|i| i.ends_with(":v3.6.16"))
                    && !old_uids.contains(&p.uid().unwrap_or_default())
            });
            if upgraded && now.len() == 3 && tests::e2e::healthy(&c, 3) {
                Ok(())
            } else {
                Err(format!(
                    "{} Pods, upgraded {upgraded}: {:?}",
                    now.len(),
                    c.status
                ))
            }
        },
    )
    .await;
    let report = writer.finish().await;
    let after = pods.list(&selector).await.or_panic().items;
    let mut etcd = tests::e2e::etcd_client(&client, &ns, "up").await;
    let stored = tests::e2e::read_keys(&mut etcd, "w/").await;
    report.assert_kept("3.5 → 3.6 on the real node", &stored);
    report.assert_failures_explained("3.5 → 3.6 on the real node", 3);
    assert!(!report.written.is_empty(), "the writer wrote nothing");
    tests::e2e::check_keys(
        &mut etcd,
        "upgraded on the real node",
        "e2e/",
        &keys,
        tests::e2e::Keys::Exactly,
    )
    .await;
    // The same members, by name and etcd ID, in the same cluster, each its own data.
    let mut after_views = Vec::new();
    for pod in &before {
        let now = after
            .iter()
            .find(|p| p.name_any() == pod.name_any())
            .unwrap_or_else(|| panic!("{} is gone", pod.name_any()));
        after_views.push(tests::e2e::member_view(now).await.or_panic());
        assert_eq!(
            tests::e2e::read_member_keys(now, "e2e/").await,
            keys,
            "{}'s own data",
            now.name_any()
        );
    }
    let ids = |v: &[tests::e2e::MemberView]| -> Vec<(u64, u64)> {
        v.iter().map(|v| (v.cluster_id, v.member_id)).collect()
    };
    assert_eq!(ids(&after_views), ids(&views));
    eprintln!(
        "3.5 → 3.6 on the real node: {} writes acknowledged, {} failed, longest gap {:?}",
        report.written.len(),
        report.failed,
        report.longest_gap
    );

    operator.stop(Duration::from_secs(5)).await;
    nodes.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_lost_with_their_volumes_are_rebuilt_from_the_survivor_on_the_real_node() {
    let _turn = ONE_NODE.lock().await;
    let Scene {
        cp,
        mut nodes,
        ns,
        client,
        operator,
        clusters,
        pods,
        selector,
    } = scene("real-recovery", "rv", "3.6.16").await;
    let keys = tests::e2e::write_keys(&client, &ns, "rv", 100).await;
    let members = pods.list(&selector).await.or_panic().items;
    let survivor = members[0].name_any();
    let cluster_id = tests::e2e::member_view(&members[0])
        .await
        .or_panic()
        .cluster_id;

    // Two members lost with their volumes (claims force-deleted, Pods gone): quorum is lost, and
    // the cluster says what to apply.
    let lost: Vec<String> = members[1..].iter().map(|p| p.name_any()).collect();
    tests::recovery::lose_members(&client, &ns, &lost).await;
    eventually(
        "Available=False/QuorumLost naming EtcdRecovery",
        Duration::from_secs(120),
        || async {
            let c = clusters.get("rv").await.map_err(|e| e.to_string())?;
            match tests::e2e::condition(&c, "Available") {
                Some((st, reason, msg))
                    if st == "False" && reason == "QuorumLost" && msg.contains("EtcdRecovery") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // Lost means gone: the kubelet stops a force-deleted Pod's containers moments after the API
    // forgets it, and until then the survivor still follows a leader (a recovery then refuses,
    // rightly: HealthyClusterNotConfirmed).
    eventually(
        "the lost members' etcd processes ended",
        Duration::from_secs(60),
        || async {
            let running: Vec<&String> = lost
                .iter()
                .filter(|m| !pids_naming(&format!("--name={m}")).is_empty())
                .collect();
            if running.is_empty() {
                Ok(())
            } else {
                Err(format!("still running: {running:?}"))
            }
        },
    )
    .await;

    // docs/disaster-recovery.md: the survivor recovery, applied as written there.
    kubectl_apply(
        &cp,
        "recovery",
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdRecovery",
               "metadata": {"name": "rv-recovery", "namespace": ns},
               "spec": {"clusterRef": {"name": "rv"}, "source": {"survivor": {}}}}),
    )
    .await;
    let recoveries: Api<EtcdRecovery> = Api::namespaced(client.clone(), &ns);
    let done = wait_for(
        &recoveries,
        "rv-recovery",
        "the recovery Complete",
        Duration::from_secs(300),
        |r| r.status.as_ref().and_then(|s| s.phase) == Some(RecoveryPhase::Complete),
    )
    .await;
    let plan = done.status.and_then(|s| s.plan).unwrap_or_default();
    assert_eq!(plan.member.as_deref(), Some(survivor.as_str()), "{plan:?}");
    wait_healthy(&clusters, "rv", 3, "3 members Ready after the recovery").await;
    let now = pods.list(&selector).await.or_panic().items;
    assert!(now.iter().any(|p| p.name_any() == survivor), "{now:?}");
    for pod in &now {
        assert_eq!(
            tests::e2e::member_view(pod).await.or_panic().cluster_id,
            cluster_id,
            "{} answers for another cluster",
            pod.name_any()
        );
    }
    assert_exactly_the_keys(
        &client,
        &ns,
        "rv",
        "rebuilt from the survivor on the real node",
        &keys,
    )
    .await;

    operator.stop(Duration::from_secs(5)).await;
    nodes.stop();
}
