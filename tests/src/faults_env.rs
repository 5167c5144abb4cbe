//! The environment-level faults of the fault suite (`tests/tests/e2e_faults_env.rs`): what a
//! user's cluster lives through around the operator rather than inside etcd — the kube-apiserver
//! or the control plane's etcd restarted, a Node that stops reporting while its Node object stays,
//! the webhook, MinIO or cert-manager down for a while, the operator restarted with another flag.
//!
//! Each fault is a pair (break, repair) or one call that does both and says how long the
//! component was gone. They act on the real processes the environment started ([`ControlPlane`],
//! [`PodRunner`], [`Webhook`], [`Minio`], [`CertManager`], [`Operator`]), in place: whoever holds
//! them keeps using them afterwards, on the same ports and data. Nothing here waits for the
//! operator; the suites judge what it does.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;

use crate::env::cert_manager::CertManager;
use crate::env::minio::Minio;
use crate::env::{ControlPlane, Error};
use crate::harness::poll;
use crate::operator::Operator;
use crate::podrunner::PodRunner;
use crate::webhook::Webhook;

/// How a component is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM and the component's own shutdown (a rolling update of a static Pod), SIGKILL if it
    /// takes more than a few seconds.
    Graceful,
    /// SIGKILL at once (a crashed process, a machine reset).
    Crash,
}

impl Stop {
    fn crash(self) -> bool {
        self == Stop::Crash
    }
}

/// Restart the kube-apiserver on its port with its flags (its data is in the control plane's
/// etcd, untouched). Every client's requests fail and every watch ends until it is back; kube
/// clients reconnect on their own. Returns how long it was down (stop to `/readyz`).
pub async fn restart_apiserver(cp: &ControlPlane, how: Stop) -> Result<Duration, Error> {
    cp.restart_apiserver(how.crash()).await
}

/// Restart the control plane's etcd on its ports and data directory. The apiserver stays up but
/// answers with errors meanwhile; its watches on etcd are re-established, so clients' watches
/// may be told to re-list, and resourceVersions continue from etcd's revision. Returns how long
/// it was down (stop to the apiserver ready again).
pub async fn restart_control_plane_etcd(cp: &ControlPlane, how: Stop) -> Result<Duration, Error> {
    cp.restart_etcd(how.crash()).await
}

/// Make `node` NotReady without deleting it: the machine behind it dies (the runner kills its
/// containers without a word to the API and stops its Lease and status heartbeat). What follows
/// is kube-controller-manager's, on a control plane started
/// [`with_node_lifecycle`](crate::env::ControlPlaneBuilder::with_node_lifecycle): once the grace
/// period passes the node lifecycle controller marks the Node `Ready=Unknown` and taints it
/// `node.kubernetes.io/unreachable`, and after the Pods' toleration the taint eviction controller
/// deletes them, which no kubelet confirms: they stay Terminating. Returns once the Node is
/// NotReady and tainted, with how long that took.
pub async fn node_not_ready(
    cp: &ControlPlane,
    runner: &PodRunner,
    node: &str,
) -> Result<Duration, Error> {
    let Some(lifecycle) = cp.node_lifecycle() else {
        return Err(Error::Unsupported(format!(
            "Node {node} would never go NotReady: this control plane runs no node lifecycle \
             controller (start it with ControlPlaneBuilder::with_node_lifecycle)"
        )));
    };
    let began = Instant::now();
    runner.stop_node(node);
    let nodes = Api::<Node>::all(cp.client()?);
    let timeout = lifecycle.grace + Duration::from_secs(60);
    poll(timeout, Duration::from_secs(1), || async {
        let n = nodes.get(node).await.map_err(|e| e.to_string())?;
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| {
                ts.iter()
                    .any(|t| t.key == "node.kubernetes.io/unreachable" && t.effect == "NoExecute")
            });
        if ready.as_deref() != Some("True") && tainted {
            Ok(())
        } else {
            Err(format!(
                "Ready {ready:?}, unreachable NoExecute taint: {tainted}"
            ))
        }
    })
    .await
    .map_err(|last| Error::Timeout {
        what: format!("Node {node} to be marked NotReady and tainted unreachable"),
        timeout,
        last,
        log_dir: cp.log_dir().to_path_buf(),
        tails: String::new(),
    })?;
    Ok(began.elapsed())
}

/// Wait until the Pod `ns/pod` is Terminating (deleted, not gone: no kubelet confirmed it) and
/// return its UID.
pub async fn wait_stuck_terminating(
    cp: &ControlPlane,
    ns: &str,
    pod: &str,
    timeout: Duration,
) -> Result<String, Error> {
    let pods = Api::<Pod>::namespaced(cp.client()?, ns);
    poll(timeout, Duration::from_secs(1), || async {
        match pods.get_opt(pod).await.map_err(|e| e.to_string())? {
            Some(p) if p.metadata.deletion_timestamp.is_some() => {
                Ok(p.metadata.uid.unwrap_or_default())
            }
            Some(_) => Err("not deleted yet".to_string()),
            None => Err("gone: something confirmed its deletion".to_string()),
        }
    })
    .await
    .map_err(|last| Error::Timeout {
        what: format!("Pod {ns}/{pod} to be evicted and stay Terminating"),
        timeout,
        last,
        log_dir: cp.log_dir().to_path_buf(),
        tails: String::new(),
    })
}

/// Stop the webhook (its registrations stay: the apiserver's calls fail and each registration's
/// failure policy decides).
pub async fn stop_webhook(webhook: &Webhook) {
    webhook.stop().await;
}

/// Start the webhook again on its addresses and wait until it is ready.
pub async fn start_webhook(webhook: &Webhook) -> Result<(), crate::webhook::Error> {
    webhook.start_again().await
}

/// Stop MinIO (SIGKILL: the connections of an upload in flight are cut). Its data stays.
pub fn stop_minio(minio: &mut Minio) {
    minio.kill();
}

/// Start MinIO again on the same port and data and wait until it answers S3 requests.
pub async fn start_minio(minio: &mut Minio) -> Result<(), Error> {
    minio.restart().await
}

/// Stop cert-manager's controller and cainjector: nothing is issued or renewed meanwhile.
pub async fn stop_cert_manager(cert_manager: &CertManager) {
    cert_manager.stop().await;
}

/// Start cert-manager again and wait until its controller works.
pub async fn start_cert_manager(
    cert_manager: &CertManager,
    cp: &ControlPlane,
) -> Result<(), Error> {
    cert_manager.start_again(cp).await
}

/// Restart the operator with other flags (`extra_args` replace the previous ones entirely), as a
/// `helm upgrade` changing a value does: the old process is stopped gracefully, its successor
/// acts once the old leader Lease has expired.
pub async fn restart_operator_with(
    operator: Operator,
    cp: &ControlPlane,
    extra_args: &[&str],
) -> Result<Operator, Error> {
    operator.replace_with(cp, extra_args).await
}
