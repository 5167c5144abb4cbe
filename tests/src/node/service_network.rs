//! The real node's Service network, as a cluster has it: kube-proxy (built by
//! `tools/nodebins/build.sh` from the control plane's Kubernetes module, iptables mode) rewrites
//! ClusterIPs to endpoints, and the `kubernetes` Service leads Pods to the apiserver.
//!
//! The apiserver listens on loopback only (the tests' network rule), so the node relays its own
//! address, port [`APISERVER_RELAY_PORT`], to it: a plain TCP relay (the TLS is the apiserver's,
//! its certificate names the Service's ClusterIP), and the `kubernetes` EndpointSlice names that
//! address, as the apiserver's endpoint reconciler would name its advertised address. The Service
//! range is routed to a blackhole on the host: a packet to a ClusterIP that kube-proxy did not
//! rewrite goes nowhere.
//!
//! What kube-proxy does to the host, and undoes: its `KUBE-*` chains in the host's iptables
//! (removed when the node stops, by `kube-proxy --cleanup`); it leaves the conntrack sysctls and
//! `route_localnet` as they are (`conntrack.maxPerCore: 0`, zero timeouts, `localhostNodePorts:
//! false`).

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::env::control_plane::SERVICE_CLUSTER_IP_RANGE;
use crate::env::process::Process;
use crate::env::{ControlPlane, Error};

const USER: &str = "system:kube-proxy";
/// The port on the node's address that leads to the apiserver.
pub const APISERVER_RELAY_PORT: u16 = 6443;
const FIELD_MANAGER: &str = "real-node.etcd-operator.test";

/// Relay `address:APISERVER_RELAY_PORT` to the apiserver on loopback, until aborted.
pub async fn relay_apiserver(cp: &ControlPlane, address: &str) -> Result<JoinHandle<()>, Error> {
    let target = cp
        .server_url()
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let listen = format!("{address}:{APISERVER_RELAY_PORT}");
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(Error::io(format!(
            "listening on {listen} for the apiserver relay"
        )))?;
    Ok(tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }))
}

/// The `kubernetes` Service's EndpointSlice: the node's relay (the apiserver runs with
/// `--endpoint-reconciler-type=none`, so nothing else writes it).
pub async fn publish_apiserver(cp: &ControlPlane, address: &str) -> Result<(), Error> {
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": FIELD_MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": APISERVER_RELAY_PORT, "protocol": "TCP"}],
    }))
    .map_err(|e| Error::Unsupported(format!("building the kubernetes EndpointSlice: {e}")))?;
    Api::<EndpointSlice>::namespaced(cp.client()?, "default")
        .patch(
            "kubernetes",
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&slice),
        )
        .await
        .map_err(Error::kube("publishing the kubernetes EndpointSlice"))?;
    Ok(())
}

/// Route the Service range to a blackhole (undone by [`unroute_services`]).
pub fn blackhole_services() -> Result<(), Error> {
    unroute_services();
    super::run(
        "ip",
        &["route", "add", "blackhole", SERVICE_CLUSTER_IP_RANGE],
    )
    .map(|_| ())
}

pub fn unroute_services() {
    let _ = super::run(
        "ip",
        &["route", "del", "blackhole", SERVICE_CLUSTER_IP_RANGE],
    );
}

/// Start kube-proxy for node `name` (whose Pods live in `pod_cidr`) as `system:kube-proxy`, with
/// the rights of the bootstrap role `system:node-proxier`; returns once it has programmed the
/// Services (its healthz answers 200).
pub async fn start_kube_proxy(
    cp: &ControlPlane,
    name: &str,
    address: &str,
    pod_cidr: &str,
    root: &Path,
    log: &Path,
) -> Result<Process, Error> {
    let binary = super::nodebin("kube-proxy")?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "real-node:kube-proxy"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:node-proxier"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }))
    .map_err(|e| Error::Unsupported(format!("building kube-proxy's ClusterRoleBinding: {e}")))?;
    super::create_or_keep(
        &Api::<ClusterRoleBinding>::all(cp.client()?),
        &binding,
        "kube-proxy's ClusterRoleBinding",
    )
    .await?;
    let kubeconfig = super::component_kubeconfig(cp, USER, root)?;
    let healthz = super::free_port()?;
    let metrics = super::free_port()?;
    let config = root.join("kube-proxy.yaml");
    super::write(
        &config,
        &json!({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig},
            "mode": "iptables",
            "hostnameOverride": name,
            "bindAddress": address,
            "healthzBindAddress": format!("127.0.0.1:{healthz}"),
            "metricsBindAddress": format!("127.0.0.1:{metrics}"),
            "clusterCIDR": pod_cidr,
            "detectLocalMode": "ClusterCIDR",
            "nodePortAddresses": [format!("{address}/32")],
            "iptables": {"localhostNodePorts": false, "masqueradeAll": false},
            "conntrack": {
                "maxPerCore": 0, "min": 0,
                "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
            },
        })
        .to_string(),
    )?;
    let mut command = Command::new(&binary);
    command
        .arg(format!("--config={}", config.display()))
        .arg("--v=2");
    let process = Process::spawn("kube-proxy", command, log)?;
    super::wait_ok("kube-proxy", healthz, "/healthz", log).await?;
    Ok(process)
}

/// Remove every rule kube-proxy made (`kube-proxy --cleanup`).
pub fn clean_up_kube_proxy() {
    if let Ok(binary) = super::nodebin("kube-proxy") {
        let _ = Command::new(binary)
            .arg("--cleanup")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}
