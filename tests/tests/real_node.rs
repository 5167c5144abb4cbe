//! A real node (`tests::node::RealNode`: kubelet, containerd, runc, the CNI bridge) registered
//! with the test control plane under its own identity, running an etcd member Pod from the image
//! built like etcd's official one (distroless: `etcd`, `etcdctl`, `etcdutl` only) under the
//! restricted Pod Security profile: UID 65532, a read-only root, no capabilities, seccomp
//! `RuntimeDefault`. The documented `kubectl exec ... -- etcdctl` recipe works through the real
//! streaming path, a shell does not exist in the member, and `kubectl logs` reads etcd's log.
//!
//! Needs root, `ETCD_OPERATOR_TESTBINS` (with kubelet) and the node images
//! (`ETCD_OPERATOR_NODE_IMAGES`, `bash tools/node-images/build.sh`); `make test-node` provides
//! both.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde_json::json;
use tests::env::{ControlPlane, NodeLifecycle};
use tests::harness::eventually;
use tests::node::RealNode;
use tests::OrPanic;

const NODE: &str = "node-1";

/// The uid a process whose command line contains `needle` runs as (its real uid).
fn uid_of_process_naming(needle: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            if !String::from_utf8_lossy(&cmdline).contains(needle) {
                return None;
            }
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_member_runs_distroless_and_restricted_under_a_real_kubelet() {
    let cp = ControlPlane::builder()
        .with_controller_manager()
        .with_scheduler()
        // Removes the not-ready taint the apiserver puts on a new Node once it is Ready, as on
        // any cluster.
        .with_node_lifecycle(NodeLifecycle::default())
        .with_real_nodes()
        .start()
        .await
        .or_panic();
    let mut node = RealNode::start(&cp, NODE).await.or_panic();
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

    // The restricted profile enforced, as a production namespace would have it.
    let ns = cp.namespace("real-node").await.or_panic();
    cp.kubectl_ok(&[
        "label",
        "namespace",
        &ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ])
    .await
    .or_panic();
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
    let health = cp
        .kubectl_ok(&[
            "exec",
            "-n",
            &ns,
            "etcd-0",
            "-c",
            "etcd",
            "--",
            "etcdctl",
            "endpoint",
            "health",
            "--cluster",
        ])
        .await
        .or_panic();
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
    node.stop();
}
