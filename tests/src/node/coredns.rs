//! The real nodes' cluster DNS: CoreDNS (built by `tools/nodebins/build.sh` with the kubernetes
//! plugin and no forwarder), serving `cluster.local` from the test apiserver on the host's
//! node-network address, port 53, behind the `kube-system/kube-dns` Service whose ClusterIP the
//! kubelets write into every Pod's `resolv.conf` (`clusterDNS`), as a cluster runs it. It
//! answers Service names and the `<hostname>.<subdomain>.<ns>.svc` names of Pods behind headless
//! Services (an etcd member's peer and client URLs) and, as kubeadm's default Corefile does, the
//! reverse names of those Pods' addresses (etcd's peer TLS depends on them); it refuses every other
//! zone: nothing is asked upstream. It reads the API as `system:coredns`, with the rights CoreDNS's
//! own manifests grant.

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::Api;
use serde_json::json;

use crate::env::process::Process;
use crate::env::{ControlPlane, Error};

const USER: &str = "system:coredns";

/// What CoreDNS's own deployment manifests grant it: read Services, EndpointSlices, Namespaces
/// and Pods.
async fn grant(cp: &ControlPlane) -> Result<(), Error> {
    let client = cp.client()?;
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": USER},
        "rules": [
            {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
             "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
             "verbs": ["list", "watch"]},
        ],
    }))
    .map_err(|e| Error::Unsupported(format!("building CoreDNS's ClusterRole: {e}")))?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }))
    .map_err(|e| Error::Unsupported(format!("building CoreDNS's ClusterRoleBinding: {e}")))?;
    super::create_or_keep(
        &Api::<ClusterRole>::all(client.clone()),
        &role,
        "CoreDNS's ClusterRole",
    )
    .await?;
    super::create_or_keep(
        &Api::<ClusterRoleBinding>::all(client),
        &binding,
        "CoreDNS's ClusterRoleBinding",
    )
    .await
}

/// The `kube-system/kube-dns` Service with ClusterIP `cluster_ip`, its endpoint CoreDNS on
/// `address` (selector-less: CoreDNS runs on the host, not in a Pod).
async fn publish(cp: &ControlPlane, address: &str, cluster_ip: &str) -> Result<(), Error> {
    let client = cp.client()?;
    let ports = json!([{"name": "dns", "port": 53, "protocol": "UDP"},
                       {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]);
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
                     "labels": {"k8s-app": "kube-dns"}},
        "spec": {"clusterIP": cluster_ip, "ports": ports},
    }))
    .map_err(|e| Error::Unsupported(format!("building the kube-dns Service: {e}")))?;
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
                     "labels": {"kubernetes.io/service-name": "kube-dns"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": ports,
    }))
    .map_err(|e| Error::Unsupported(format!("building the kube-dns EndpointSlice: {e}")))?;
    super::create_or_keep(
        &Api::<Service>::namespaced(client.clone(), "kube-system"),
        &service,
        "the kube-dns Service",
    )
    .await?;
    super::create_or_keep(
        &Api::<EndpointSlice>::namespaced(client, "kube-system"),
        &slice,
        "the kube-dns EndpointSlice",
    )
    .await
}

/// Start CoreDNS on `address:53` for `cp` behind the `kube-dns` Service at `cluster_ip`, its
/// files under `root`, its log in `log`; returns once its kubernetes plugin has synced (its
/// `ready` endpoint answers).
pub async fn start(
    cp: &ControlPlane,
    address: &str,
    cluster_ip: &str,
    root: &Path,
    log: &Path,
) -> Result<Process, Error> {
    let binary = super::nodebin("coredns")?;
    grant(cp).await?;
    publish(cp, address, cluster_ip).await?;
    let kubeconfig = super::component_kubeconfig(cp, cp.server_url(), USER, root)?;
    let ready_port = super::free_port()?;
    let health_port = super::free_port()?;
    let corefile = root.join("Corefile");
    // kubeadm's default Corefile without its forwarder and cache: the kubernetes plugin also
    // answers the reverse zones, so a Pod IP behind a headless Service resolves back to
    // `<hostname>.<subdomain>.<ns>.svc.cluster.local` (etcd's peer TLS checks a connecting peer's
    // certificate against that name); an address it does not know gets NXDOMAIN.
    super::write(
        &corefile,
        &format!(
            "cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {{\n    bind {address}\n    errors\n    \
             health 127.0.0.1:{health_port}\n    ready 127.0.0.1:{ready_port}\n    \
             kubernetes cluster.local in-addr.arpa ip6.arpa {{\n        kubeconfig {kubeconfig}\n        \
             pods insecure\n    }}\n}}\n",
            kubeconfig = kubeconfig.display(),
        ),
    )?;
    let mut command = Command::new(&binary);
    command
        .arg("-conf")
        .arg(&corefile)
        .arg("-dns.port")
        .arg("53")
        .current_dir(root);
    let process = Process::spawn("coredns", command, log)?;
    super::wait_ok(
        "CoreDNS",
        std::net::SocketAddr::from(([127, 0, 0, 1], ready_port)),
        "/ready",
        log,
    )
    .await?;
    Ok(process)
}
