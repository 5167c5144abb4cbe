//! The runner's Nodes: registered like kubelet registers them (hostname and zone labels, no taints,
//! allocatable resources, Ready, InternalIP 127.0.0.1, the kubelet port that serves container
//! logs), with their Leases in `kube-node-lease` renewed every few seconds.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use super::{now_micro, now_rfc3339, Error};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
pub const LEASE_DURATION_SECONDS: i32 = 40;
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
pub const STATUS_HEARTBEAT: Duration = Duration::from_secs(40);
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// One Node the runner registers.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub name: String,
    pub zone: String,
}

/// What every Node reports.
#[derive(Clone, Debug)]
pub struct NodeReport {
    pub kubelet_port: u16,
    pub kubelet_version: String,
    pub cpu: String,
    pub memory: String,
    pub pods: String,
    /// `status.declaredFeatures` (KEP-5328): `ExtendWebSocketsToKubelet` tells an apiserver
    /// ≥ 1.36 to pass kubectl's WebSocket streams through instead of translating them to SPDY.
    pub declared_features: Vec<String>,
}

/// The feature a kubelet that serves WebSocket streams declares.
pub const WEBSOCKETS_FEATURE: &str = "ExtendWebSocketsToKubelet";

/// The features a kubelet of `version` (`v1.37.1`) declares: `ExtendWebSocketsToKubelet` from
/// 1.36 on, when it is on by default; older apiservers have no `declaredFeatures` field.
pub fn declared_features(version: &str, websockets: bool) -> Vec<String> {
    let minor = version
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok());
    if websockets && minor.is_some_and(|m| m >= 36) {
        vec![WEBSOCKETS_FEATURE.to_string()]
    } else {
        Vec::new()
    }
}

fn labels(node: &NodeInfo) -> Value {
    json!({
        HOSTNAME_LABEL: node.name,
        ZONE_LABEL: node.zone,
        REGION_LABEL: "pod-runner",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
        "node.kubernetes.io/instance-type": "pod-runner",
    })
}

fn status(node: &NodeInfo, report: &NodeReport) -> Value {
    let now = now_rfc3339();
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
    };
    let resources = json!({
        "cpu": report.cpu, "memory": report.memory, "pods": report.pods,
        "ephemeral-storage": "100Gi",
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut status = json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status (etcd-operator test pod runner)"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": node.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": report.kubelet_port}},
        "nodeInfo": {
            "machineID": format!("pod-runner-{}", node.name),
            "systemUUID": format!("pod-runner-{}", node.name),
            "bootID": format!("pod-runner-{}", std::process::id()),
            "kernelVersion": kernel.trim(),
            "osImage": "etcd-operator test pod runner",
            "containerRuntimeVersion": "pod-runner://0.1.0",
            "kubeletVersion": report.kubelet_version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
        },
    });
    if !report.declared_features.is_empty() {
        status["declaredFeatures"] = json!(report.declared_features);
    }
    status
}

/// Create or update each Node (labels, no taints, schedulable), then its status and Lease.
pub async fn register(
    client: &Client,
    nodes: &[NodeInfo],
    report: &NodeReport,
) -> Result<(), Error> {
    let api = Api::<Node>::all(client.clone());
    for node in nodes {
        let object: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name, "labels": labels(node)},
            "spec": {},
        }))
        .map_err(|e| Error::Unsupported(format!("building Node {}: {e}", node.name)))?;
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            // A Node from an earlier runner on the same control plane: take it over.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::kube(format!("creating Node {}", node.name))(e)),
        }
        // The TaintNodesByCondition admission plugin gives every new Node the
        // `node.kubernetes.io/not-ready` taint, which the node lifecycle controller (not run
        // here) would lift once the Node is Ready.
        api.patch(
            &node.name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": labels(node)},
                "spec": {"taints": null, "unschedulable": null},
            })),
        )
        .await
        .map_err(Error::kube(format!("updating Node {}", node.name)))?;
        patch_status(client, node, report).await?;
        renew_lease(client, node).await?;
    }
    Ok(())
}

pub async fn patch_status(
    client: &Client,
    node: &NodeInfo,
    report: &NodeReport,
) -> Result<(), Error> {
    Api::<Node>::all(client.clone())
        .patch_status(
            &node.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status(node, report)})),
        )
        .await
        .map_err(Error::kube(format!(
            "writing the status of Node {}",
            node.name
        )))?;
    Ok(())
}

pub async fn renew_lease(client: &Client, node: &NodeInfo) -> Result<(), Error> {
    let api = Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE);
    let spec = json!({
        "holderIdentity": node.name,
        "leaseDurationSeconds": LEASE_DURATION_SECONDS,
        "renewTime": now_micro(),
    });
    let patched = api
        .patch(
            &node.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await;
    match patched {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let uid = Api::<Node>::all(client.clone())
                .get(&node.name)
                .await
                .ok()
                .and_then(|n| n.metadata.uid);
            let mut metadata = json!({"name": node.name, "namespace": LEASE_NAMESPACE});
            if let Some(uid) = uid {
                metadata["ownerReferences"] = json!([{
                    "apiVersion": "v1", "kind": "Node", "name": node.name, "uid": uid,
                }]);
            }
            let lease: Lease = serde_json::from_value(json!({"metadata": metadata, "spec": spec}))
                .map_err(|e| Error::Unsupported(format!("building Lease {}: {e}", node.name)))?;
            api.create(&PostParams::default(), &lease)
                .await
                .map_err(Error::kube(format!("creating Lease {}", node.name)))?;
            Ok(())
        }
        Err(e) => Err(Error::kube(format!("renewing Lease {}", node.name))(e)),
    }
}

/// Renew Leases and status until the task is aborted (a failed Node's no more); failures are retried on the next tick (the
/// apiserver may be restarted by a test).
pub(crate) async fn heartbeat(
    client: Client,
    nodes: Vec<NodeInfo>,
    report: NodeReport,
    failed: std::sync::Arc<super::FailedNodes>,
) {
    let mut since_status = Duration::ZERO;
    loop {
        tokio::time::sleep(LEASE_RENEW).await;
        since_status += LEASE_RENEW;
        for node in nodes.iter().filter(|n| !failed.contains(&n.name)) {
            let _ = renew_lease(&client, node).await;
            if since_status >= STATUS_HEARTBEAT {
                let _ = patch_status(&client, node, &report).await;
            }
        }
        if since_status >= STATUS_HEARTBEAT {
            since_status = Duration::ZERO;
        }
    }
}
