//! The real node's cluster DNS: CoreDNS (built by `tools/coredns/build.sh` with the kubernetes
//! plugin and no forwarder), serving `cluster.local` from the test apiserver on the node's address,
//! port 53, the address the kubelet writes into every Pod's `resolv.conf` (`clusterDNS`). It
//! answers Service names and the `<hostname>.<subdomain>.<ns>.svc` names of Pods behind headless
//! Services (an etcd member's peer and client URLs), and refuses every other zone: nothing is asked
//! upstream. It reads the API as `system:coredns`, with the rights CoreDNS's own manifests grant.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use rcgen::ExtendedKeyUsagePurpose;
use serde_json::json;

use crate::env::pki::Leaf;
use crate::env::process::Process;
use crate::env::{ControlPlane, Error};

/// The environment variable naming CoreDNS's directory (what `bash tools/coredns/build.sh`
/// prints); unset, the script is asked with `--print-dir`.
pub const COREDNS_ENV: &str = "ETCD_OPERATOR_COREDNS";
const USER: &str = "system:coredns";

/// The CoreDNS binary: under [`COREDNS_ENV`], else where the build script puts it.
pub fn binary() -> Result<PathBuf, Error> {
    let dir = match std::env::var_os(COREDNS_ENV).filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/coredns/build.sh");
            PathBuf::from(super::run("bash", &[&script.to_string_lossy(), "--print-dir"])?.trim())
        }
    };
    let binary = dir.join("coredns");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(Error::Unsupported(format!(
            "{} is missing: build CoreDNS with `bash tools/coredns/build.sh` and point \
             {COREDNS_ENV} at the directory it prints (make test does both)",
            binary.display()
        )))
    }
}

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
    let created = Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await;
    ok_if_exists(created, "CoreDNS's ClusterRole")?;
    let created = Api::<ClusterRoleBinding>::all(client)
        .create(&PostParams::default(), &binding)
        .await;
    ok_if_exists(created, "CoreDNS's ClusterRoleBinding")
}

fn ok_if_exists<T>(result: Result<T, kube::Error>, what: &str) -> Result<(), Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(Error::kube(format!("creating {what}"))(e)),
    }
}

/// Start CoreDNS on `address:53` for `cp`, its files under `root`, its log in `log`; returns
/// once its kubernetes plugin has synced (its `ready` endpoint answers).
pub async fn start(
    cp: &ControlPlane,
    address: &str,
    root: &Path,
    log: &Path,
) -> Result<Process, Error> {
    let binary = binary()?;
    grant(cp).await?;
    let (cert, key) = cp.pki().client_ca.sign(Leaf {
        common_name: USER,
        organizations: &[],
        sans: &[],
        usages: &[ExtendedKeyUsagePurpose::ClientAuth],
    })?;
    super::write(&root.join("coredns.crt"), &cert)?;
    super::write(&root.join("coredns.key"), &key)?;
    let kubeconfig = root.join("coredns.kubeconfig");
    crate::env::control_plane::write_kubeconfig_for(
        &kubeconfig,
        cp.server_url(),
        cp.pki(),
        (
            USER,
            json!({
                "client-certificate": root.join("coredns.crt"),
                "client-key": root.join("coredns.key"),
            }),
        ),
        None,
    )?;
    let ready_port = super::free_port()?;
    let health_port = super::free_port()?;
    let corefile = root.join("Corefile");
    super::write(
        &corefile,
        &format!(
            "cluster.local:53 {{\n    bind {address}\n    errors\n    health 127.0.0.1:{health_port}\n    \
             ready 127.0.0.1:{ready_port}\n    kubernetes cluster.local {{\n        kubeconfig {kubeconfig}\n    }}\n}}\n",
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
    let ready = std::net::SocketAddr::from(([127, 0, 0, 1], ready_port));
    let url = format!("http://{ready}/ready");
    crate::harness::poll(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            match crate::webhook::http_get(ready, "/ready").await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
    .map_err(|e| {
        Error::Unsupported(format!(
            "CoreDNS never became ready on {url} ({e:?}); log {}",
            log.display()
        ))
    })?;
    Ok(process)
}
