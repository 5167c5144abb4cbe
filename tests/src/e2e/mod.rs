//! End-to-end support: one environment per test binary — the control plane (CRDs, controller
//! manager, scheduler), the pod runner running member Pods as real etcd processes, and the
//! operator binary — plus helpers to create clusters, wait for conditions and check data through a
//! real etcd client.

use api::v1alpha2::{EtcdCluster, EtcdClusterSpec};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::OnceCell;

use crate::env::{ControlPlane, Kubernetes};
use crate::operator::Operator;
use crate::podrunner::PodRunner;
use crate::OrPanic;

mod cluster;
mod etcd;

pub use etcd::{
    check_keys, churn, dial, etcd_client, free, member_client, member_view, put_keys, read_keys,
    read_member_keys, write_keys, Keys, MemberView,
};

/// The operator image the e2e operator is started with (`--operator-image`).
pub const OPERATOR_IMAGE: &str = "etcd-operator:test";
const OPERATOR_IMAGE_ARG: &str = "--operator-image=etcd-operator:test";

pub struct Env {
    pub cp: &'static ControlPlane,
    pub runner: PodRunner,
    pub operator: Operator,
}

/// The test binary's environment, started by the first test that asks.
pub async fn env() -> &'static Env {
    static ENV: OnceCell<Env> = OnceCell::const_new();
    ENV.get_or_init(|| start(PodRunner::builder(), &[])).await
}

/// A control plane, a pod runner from `runner` and the operator with `extra` arguments (for a
/// test binary that needs other settings than [`env`]'s).
pub async fn start(runner: crate::podrunner::PodRunnerBuilder, extra: &[&str]) -> Env {
    stage(runner).await.operator(None, extra).await
}

/// The shared start's first step, for a suite that prepares what the operator must find when it
/// starts (stored objects, a cluster built by hand): the binary's control plane, a pod runner
/// from `runner`, and the namespace the operator will run in. [`Staged::operator`] finishes it.
pub async fn stage(runner: crate::podrunner::PodRunnerBuilder) -> Staged {
    stage_with(Start::default().runner(runner)).await
}

/// What the shared start builds. The default is [`env`]'s: the current Kubernetes with the CRDs,
/// kube-controller-manager and kube-scheduler, and a pod runner; the options are for the suites
/// that need less or another Kubernetes.
pub struct Start {
    kubernetes: Kubernetes,
    crds: bool,
    runner: Option<crate::podrunner::PodRunnerBuilder>,
    apart: Option<&'static str>,
}

impl Default for Start {
    fn default() -> Self {
        Self {
            kubernetes: Kubernetes::default(),
            crds: true,
            runner: Some(PodRunner::builder()),
            apart: None,
        }
    }
}

impl Start {
    /// The pod runner from `runner`.
    pub fn runner(mut self, runner: crate::podrunner::PodRunnerBuilder) -> Self {
        self.runner = Some(runner);
        self
    }

    /// No pod runner, and so neither kube-controller-manager nor kube-scheduler: nothing runs
    /// Pods (the operator's objects are only stored).
    pub fn without_pods(mut self) -> Self {
        self.runner = None;
        self
    }

    /// Without the project's CRDs (for a suite whose chart install brings them).
    pub fn without_crds(mut self) -> Self {
        self.crds = false;
        self
    }

    /// Kubernetes `kubernetes` instead of the current one.
    pub fn kubernetes(mut self, kubernetes: Kubernetes) -> Self {
        self.kubernetes = kubernetes;
        self
    }

    /// A control plane no other test of the binary gets (the same shape with another `tag`
    /// is another control plane): for a test that must not see what the others install, such
    /// as cert-manager's API.
    pub fn apart(mut self, tag: &'static str) -> Self {
        self.apart = Some(tag);
        self
    }
}

/// The shared start's first step with `start`'s options: see [`stage`].
pub async fn stage_with(start: Start) -> Staged {
    let mut cp = ControlPlane::builder().kubernetes(start.kubernetes);
    if start.crds {
        cp = cp.with_crds();
    }
    if start.runner.is_some() {
        cp = cp.with_controller_manager().with_scheduler();
    }
    if let Some(tag) = start.apart {
        cp = cp.apart(tag);
    }
    let cp = cp.shared().await.or_panic();
    let runner = match start.runner {
        Some(runner) => Some(runner.start(cp).await.or_panic()),
        None => None,
    };
    let lease_ns = cp.namespace("operator").await.or_panic();
    Staged {
        cp,
        runner,
        lease_ns,
    }
}

/// The control plane and pod runner of the shared start, before the operator runs.
pub struct Staged {
    pub cp: &'static ControlPlane,
    /// `None` for a start [`Start::without_pods`].
    pub runner: Option<PodRunner>,
    /// The operator's own namespace (its Lease, `POD_NAMESPACE`) unless it watches one namespace.
    pub lease_ns: String,
}

impl Staged {
    /// Start the operator with `extra` arguments: cluster-wide with its Lease in
    /// [`Staged::lease_ns`], or, with `watch`, limited to that namespace and its Lease there.
    pub async fn operator(self, watch: Option<&str>, extra: &[&str]) -> Env {
        let operator = self.operator_only(watch, extra).await;
        let runner = self
            .runner
            .expect("a start without_pods has no Env: use Staged::operator_only");
        Env {
            cp: self.cp,
            runner,
            operator,
        }
    }

    /// [`Staged::operator`]'s operator alone, for a start [`Start::without_pods`].
    pub async fn operator_only(&self, watch: Option<&str>, extra: &[&str]) -> Operator {
        // The pod runner maps `etcd-operator:test` to the cargo-built binaries: snapshot Jobs
        // run the agent from it.
        let mut args = vec![OPERATOR_IMAGE_ARG];
        args.extend_from_slice(extra);
        let lease_ns = watch.unwrap_or(&self.lease_ns);
        Operator::start_with(self.cp, lease_ns, watch, &args)
            .await
            .or_panic()
    }
}

/// The cluster is serving `replicas` Ready members with `Available=True/QuorumHealthy` and nothing
/// in progress.
pub fn healthy(c: &EtcdCluster, replicas: i32) -> bool {
    let s = c.status.clone().unwrap_or_default();
    s.ready_members == replicas
        && s.observed.as_ref().is_some_and(|o| o.replicas == replicas)
        && condition(c, "Available").is_some_and(|(st, r, _)| st == "True" && r == "QuorumHealthy")
        && condition(c, "Progressing").is_some_and(|(st, _, _)| st == "False")
}

pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `(status, reason, message)` of a cluster condition.
pub fn condition(c: &EtcdCluster, type_: &str) -> Option<(String, String, String)> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| (x.status.clone(), x.reason.clone(), x.message.clone()))
}

pub fn spec(replicas: i32) -> EtcdClusterSpec {
    EtcdClusterSpec {
        replicas,
        version: "3.6.16".to_string(),
        ..Default::default()
    }
}
