//! The real nodes' Service network, as a cluster has it: kube-proxy (built by
//! `tools/nodebins/build.sh` from the control plane's Kubernetes module, iptables mode) in each
//! node's network namespace rewrites ClusterIPs to endpoints, and the `kubernetes` Service leads
//! Pods to the apiserver.
//!
//! The apiserver listens on loopback only (the tests' network rule), so the host relays its
//! address on the node network, port [`APISERVER_RELAY_PORT`], to it: a plain TCP relay (the TLS
//! is the apiserver's, its certificate names that address and the Service's ClusterIP). The
//! kubelets and kube-proxies dial it, and the `kubernetes` EndpointSlice names it, as the
//! apiserver's endpoint reconciler would name its advertised address. The Service range is routed
//! to a blackhole on the host: a packet to a ClusterIP that kube-proxy did not rewrite goes
//! nowhere.
//!
//! kube-proxy's `KUBE-*` chains live in its node's namespace and go with it; it leaves the
//! conntrack sysctls and `route_localnet` as they are (`conntrack.maxPerCore: 0`, zero timeouts,
//! `localhostNodePorts: false`).

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

/// The node a kube-proxy serves.
pub struct KubeProxyNode<'a> {
    pub name: &'a str,
    /// The node's address: kube-proxy's bind and healthz address.
    pub address: &'a str,
    /// The apiserver as the node reaches it.
    pub server_url: &'a str,
}

/// Start kube-proxy for `node` as `system:kube-proxy`, with the rights of the bootstrap role
/// `system:node-proxier`, from `command` (the binary, in the node's namespace, and any flags of
/// its own); returns once it has programmed the Services (its healthz answers 200).
pub async fn start_kube_proxy(
    cp: &ControlPlane,
    mut command: Command,
    node: KubeProxyNode<'_>,
    root: &Path,
    log: &Path,
) -> Result<Process, Error> {
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
    let kubeconfig = super::component_kubeconfig(cp, node.server_url, USER, root)?;
    let address = node.address;
    let healthz = 10256;
    let config = root.join("kube-proxy.yaml");
    super::write(
        &config,
        &json!({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig},
            "mode": "iptables",
            "hostnameOverride": node.name,
            "bindAddress": address,
            "healthzBindAddress": format!("{address}:{healthz}"),
            "metricsBindAddress": "127.0.0.1:10249",
            "clusterCIDR": super::POD_RANGE,
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
    command.arg(format!("--config={}", config.display()));
    let process = Process::spawn(&format!("kube-proxy-{}", node.name), command, log)?;
    let healthz_addr = format!("{address}:{healthz}")
        .parse()
        .map_err(|e| Error::Unsupported(format!("kube-proxy's healthz address: {e}")))?;
    super::wait_ok("kube-proxy", healthz_addr, "/healthz", log).await?;
    Ok(process)
}
