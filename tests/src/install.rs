//! The operator as users install it: `charts/etcd-operator` installed with the real helm into the
//! test control plane, its Deployments run by the pod runner from the chart's own image reference
//! (mapped to the project's image as `make test-image` builds it: an OCI image layout the runner
//! unpacks and runs with its entrypoint, user, working directory and environment), the controller
//! and webhook reaching the API with their ServiceAccount tokens, and, when asked, the real
//! cert-manager issuing the webhook's serving certificate.
//!
//! One [`Installed`] per test binary: the chart is cluster-scoped (CRDs, webhook configurations,
//! ClusterRoles), so the scenarios that install it take turns through [`Installed::turn`].
//!
//! [`Installed::start_on_real_nodes`] is the same on real nodes ([`crate::node::RealNodes`]):
//! kubelets run the chart's Pods from the test image, imported under the chart's default image
//! reference.

use std::collections::BTreeMap;
use std::time::Duration;

use api::v1alpha2::EtcdCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Mutex, MutexGuard, OnceCell};

use crate::e2e::{condition, healthy, pod_ready};
use crate::env::cert_manager::CertManager;
use crate::env::{ControlPlane, ControlPlaneBuilder};
use crate::harness::{eventually_every, poll};
use crate::helm::{chart_dir, Error, Helm};
use crate::node::RealNodes;
use crate::podrunner::PodRunner;
use crate::OrPanic;

/// The release name and namespace the installation runbook uses.
pub const RELEASE: &str = "etcd-operator";
pub const NAMESPACE: &str = "etcd-operator-system";
/// The chart's default image repository (this project's image, named after its repository
/// github.com/cozystack/etcd-operator-rs); the pod runner maps every tag of it to the test image.
pub const IMAGE_REPOSITORY: &str = "ghcr.io/cozystack/etcd-operator-rs";
/// The controller Deployment (named after the release) and the webhook's.
pub const CONTROLLER: &str = "etcd-operator";

/// The `kubectl` arguments for the logs of the controller's `manager` container, then `more`.
pub fn manager_logs_args(more: &[&str]) -> Vec<String> {
    let deploy = format!("deploy/{CONTROLLER}");
    let args = ["logs", "-n", NAMESPACE, &deploy, "-c", "manager"];
    args.iter().chain(more).map(|a| a.to_string()).collect()
}
pub const WEBHOOK: &str = "etcd-operator-webhook";
/// How long `helm install/upgrade --wait` may take: Pods start as local processes in seconds,
/// but the two cores are shared with everything else.
pub const HELM_TIMEOUT: &str = "4m";

/// What runs the Pods: the pod runner, or real nodes (one per binary or demo: the size of the
/// variants does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Nodes {
    Runner(PodRunner),
    Real(RealNodes),
}

impl Nodes {
    /// The names of the Nodes.
    pub fn names(&self) -> Vec<String> {
        match self {
            Nodes::Runner(runner) => runner.node_names(),
            Nodes::Real(nodes) => nodes.names(),
        }
    }

    /// Where to look when a Pod misbehaves: the pod runner's journal, or the real nodes' logs
    /// (kubelet, containerd, kube-proxy and the Pods' own, per node).
    pub fn logs(&self, cp: &ControlPlane) -> std::path::PathBuf {
        match self {
            Nodes::Runner(runner) => runner.journal().to_path_buf(),
            Nodes::Real(_) => cp.log_dir().join("real-nodes"),
        }
    }
}

/// The chart's default image reference: `IMAGE_REPOSITORY:<appVersion of Chart.yaml>`.
pub fn chart_image() -> Result<String, crate::env::Error> {
    let path = chart_dir().join("Chart.yaml");
    let chart = std::fs::read_to_string(&path)
        .map_err(crate::env::Error::io(format!("reading {}", path.display())))?;
    let app_version = chart
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .ok_or_else(|| {
            crate::env::Error::Unsupported(format!("{} has no appVersion", path.display()))
        })?;
    Ok(format!("{IMAGE_REPOSITORY}:{app_version}"))
}

pub struct Installed {
    pub cp: ControlPlane,
    pub nodes: Nodes,
    pub cert_manager: CertManager,
    pub helm: Helm,
    turn: Mutex<()>,
}

/// The test binary's installation environment: a control plane without the CRDs (the chart
/// brings them), the pod runner with the project's image mapped, and cert-manager.
pub async fn installed() -> &'static Installed {
    static ENV: OnceCell<Installed> = OnceCell::const_new();
    ENV.get_or_init(|| async { Installed::start().await.or_panic() })
        .await
}

impl Installed {
    pub async fn start() -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Self::start_with(ControlPlane::builder()).await
    }

    /// [`Installed::start`] on a control plane of `builder`'s shape (kube-controller-manager and
    /// kube-scheduler added): e.g. one whose controllers act under another identity.
    pub async fn start_with(
        builder: ControlPlaneBuilder,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Self::start_with_images(builder, &[]).await
    }

    /// [`Installed::start_with`], the pod runner also mapping each `(image, OCI layout)` of
    /// `images` (e.g. an earlier commit's operator image under its chart's reference).
    pub async fn start_with_images(
        builder: ControlPlaneBuilder,
        images: &[(&str, std::path::PathBuf)],
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let cp = builder
            .with_controller_manager()
            .with_scheduler()
            .start()
            .await?;
        let runner = images
            .iter()
            .fold(
                PodRunner::builder().operator_image(IMAGE_REPOSITORY),
                |b, (image, layout)| b.oci_image(image, layout.clone()),
            )
            .start(&cp)
            .await?;
        Self::finish(cp, Nodes::Runner(runner)).await
    }

    /// The same on `count` real nodes: kubelets run the chart's Pods from the test image
    /// (`make test-image`), imported under the chart's default image reference.
    pub async fn start_on_real_nodes(
        count: u8,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let cp = crate::node::control_plane(ControlPlane::builder())
            .start()
            .await?;
        let nodes = RealNodes::start(&cp, count).await?;
        let archive = crate::podrunner::test_image_layout()
            .parent()
            .map(|dir| dir.join("etcd-operator.tar"))
            .ok_or("the test image layout has no parent directory")?;
        nodes.import_image(&archive, &chart_image()?)?;
        Self::finish(cp, Nodes::Real(nodes)).await
    }

    async fn finish(
        cp: ControlPlane,
        nodes: Nodes,
    ) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let cert_manager = CertManager::start(&cp).await?;
        let helm = Helm::new(Some(cp.kubeconfig()))?;
        Ok(Self {
            cp,
            nodes,
            cert_manager,
            helm,
            turn: Mutex::new(()),
        })
    }

    /// One scenario at a time: hold the guard while the chart is installed.
    pub async fn turn(&self) -> MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    pub fn client(&self) -> Client {
        self.cp.client().or_panic()
    }

    /// `helm install etcd-operator charts/etcd-operator -n etcd-operator-system --create-namespace
    /// --wait` with `--set` values; returns helm's output (NOTES included).
    pub async fn install(&self, sets: &[&str]) -> Result<String, Error> {
        self.release(&chart_dir(), "install", "--create-namespace", sets)
            .await
    }

    /// `helm upgrade --reuse-values --wait` with more `--set` values.
    pub async fn upgrade(&self, sets: &[&str]) -> Result<String, Error> {
        self.release(&chart_dir(), "upgrade", "--reuse-values", sets)
            .await
    }

    /// `helm install` of the chart in `chart` (another version of it), as [`Installed::install`].
    pub async fn install_chart(
        &self,
        chart: &std::path::Path,
        sets: &[&str],
    ) -> Result<String, Error> {
        self.release(chart, "install", "--create-namespace", sets)
            .await
    }

    /// `helm upgrade --reset-then-reuse-values --wait` to this repository's chart: the upgrade
    /// docs/installation.md gives (the new chart's defaults for values the release never set).
    pub async fn upgrade_to_this_chart(&self, sets: &[&str]) -> Result<String, Error> {
        self.release(&chart_dir(), "upgrade", "--reset-then-reuse-values", sets)
            .await
    }

    async fn release(
        &self,
        chart: &std::path::Path,
        verb: &str,
        flag: &str,
        sets: &[&str],
    ) -> Result<String, Error> {
        let chart = chart.to_string_lossy();
        let mut args = vec![
            verb,
            RELEASE,
            &chart,
            "--namespace",
            NAMESPACE,
            flag,
            "--wait",
            "--timeout",
            HELM_TIMEOUT,
        ];
        for set in sets {
            args.extend(["--set", set]);
        }
        self.helm.run(args).await
    }

    /// `helm uninstall --wait`: the release's objects go, the kept CRDs stay.
    pub async fn uninstall(&self) -> Result<String, Error> {
        self.helm
            .run([
                "uninstall",
                RELEASE,
                "--namespace",
                NAMESPACE,
                "--wait",
                "--timeout",
                HELM_TIMEOUT,
            ])
            .await
    }

    /// The Pods of a Deployment of the release (by its selector), newest first.
    pub async fn deployment_pods(&self, deployment: &str) -> Vec<Pod> {
        let client = self.client();
        let d = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
            .get(deployment)
            .await
            .or_panic();
        let selector = d
            .spec
            .and_then(|s| s.selector.match_labels)
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut pods = Api::<Pod>::namespaced(client, NAMESPACE)
            .list(&ListParams::default().labels(&selector))
            .await
            .or_panic()
            .items;
        pods.retain(|p| p.metadata.deletion_timestamp.is_none());
        pods.sort_by_key(|p| std::cmp::Reverse(p.metadata.creation_timestamp.clone()));
        pods
    }

    /// Wait until exactly `replicas` Pods of the Deployment are Ready and none is terminating
    /// (a rollout finished), returning them.
    pub async fn wait_rolled_out(&self, deployment: &str, replicas: usize) -> Vec<Pod> {
        eventually_every(
            &format!(
                "deployment {NAMESPACE}/{deployment} to roll out to {replicas} ready Pods; Pods' \
                 logs {}",
                self.nodes.logs(&self.cp).display()
            ),
            Duration::from_secs(240),
            Duration::from_millis(500),
            || async {
                let d = Api::<Deployment>::namespaced(self.client(), NAMESPACE)
                    .get(deployment)
                    .await
                    .or_panic();
                let status = d.status.clone().unwrap_or_default();
                let generation = d.metadata.generation.unwrap_or_default();
                let pods = self.deployment_pods(deployment).await;
                let done = status.observed_generation == Some(generation)
                    && status.updated_replicas.unwrap_or_default() as usize == replicas
                    && status.ready_replicas.unwrap_or_default() as usize == replicas
                    && status.replicas.unwrap_or_default() as usize == replicas
                    && pods.len() == replicas
                    && pods.iter().all(pod_ready);
                if done {
                    return Ok(pods);
                }
                Err(format!(
                    "status {}",
                    serde_json::to_string(&status).unwrap_or_default()
                ))
            },
        )
        .await
    }

    /// Wait until the cluster is serving `replicas` healthy members; panics with its status.
    pub async fn wait_healthy(&self, ns: &str, name: &str, replicas: i32) -> EtcdCluster {
        let api: Api<EtcdCluster> = Api::namespaced(self.client(), ns);
        let last = poll(
            Duration::from_secs(240),
            Duration::from_millis(500),
            || async {
                let c = api.get(name).await.or_panic();
                if healthy(&c, replicas) {
                    Ok(c)
                } else {
                    Err(c)
                }
            },
        )
        .await;
        match last {
            Ok(c) => c,
            Err(c) => {
                let args = manager_logs_args(&["--tail=40"]);
                let logs = self
                    .cp
                    .kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>())
                    .await
                    .map(|o| o.stdout + &o.stderr)
                    .unwrap_or_default();
                panic!(
                    "{ns}/{name}: not healthy with {replicas} members in time; Available={:?}; \
                     status {}\nmanager log tail:\n{logs}",
                    condition(&c, "Available"),
                    serde_json::to_string_pretty(&c.status).unwrap_or_default(),
                );
            }
        }
    }

    /// Create a namespace for a scenario's clusters.
    pub async fn namespace(&self, prefix: &str) -> String {
        self.cp.namespace(prefix).await.or_panic()
    }

    /// Create an EtcdCluster from JSON `spec` through the admin client.
    pub async fn create_cluster(&self, ns: &str, name: &str, spec: serde_json::Value) {
        let cluster: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
            "kind": "EtcdCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }))
        .or_panic();
        Api::<EtcdCluster>::namespaced(self.client(), ns)
            .create(&PostParams::default(), &cluster)
            .await
            .or_panic();
    }

    /// Write keys through a real etcd client, and check them later.
    pub async fn write_keys(&self, ns: &str, cluster: &str, n: usize) -> BTreeMap<String, String> {
        crate::e2e::write_keys(&self.client(), ns, cluster, n).await
    }

    pub async fn check_keys(&self, ns: &str, cluster: &str, keys: &BTreeMap<String, String>) {
        let mut etcd = crate::e2e::etcd_client(&self.client(), ns, cluster).await;
        let what = format!("{ns}/{cluster}");
        crate::e2e::check_keys(&mut etcd, &what, "e2e/", keys, crate::e2e::Keys::AtLeast).await
    }

    /// The names of the release's Pods with their restart counts, to show nothing restarted.
    pub async fn restarts(&self, deployment: &str) -> BTreeMap<String, i32> {
        self.deployment_pods(deployment)
            .await
            .iter()
            .map(|p| (p.name_any(), restart_count(p)))
            .collect()
    }
}

/// The restarts of all of `pod`'s containers, summed.
pub fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or_default()
}

/// The operator of an earlier commit, as `tools/upgrade-from/build.sh` builds it (`make
/// upgrade-from`): its chart, its test image, and the image reference its chart names by default.
pub struct UpgradeFrom {
    pub commit: String,
    pub chart: std::path::PathBuf,
    pub layout: std::path::PathBuf,
    /// `<values' image.repository>:<Chart.yaml's appVersion>` of that chart.
    pub image: String,
}

/// Where `tools/upgrade-from/build.sh` put the earlier operator (`ETCD_OPERATOR_UPGRADE_FROM`,
/// which the Makefile exports); an error that says how to build it when it is not there.
pub fn upgrade_from() -> Result<UpgradeFrom, crate::env::Error> {
    use crate::env::Error;
    let dir = std::env::var_os("ETCD_OPERATOR_UPGRADE_FROM")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .ok_or_else(|| {
            Error::Unsupported(
                "ETCD_OPERATOR_UPGRADE_FROM is not set: run the suite through make (make \
                 upgrade-from builds the earlier operator), or export it as `bash \
                 tools/upgrade-from/build.sh` prints"
                    .into(),
            )
        })?;
    if !dir.join(".done").is_file() {
        return Err(Error::Unsupported(format!(
            "{} holds no finished build: run `make upgrade-from`",
            dir.display()
        )));
    }
    let read = |path: std::path::PathBuf| {
        std::fs::read_to_string(&path).map_err(Error::io(format!("reading {}", path.display())))
    };
    let chart = dir.join("chart");
    let values: serde_json::Value = yaml_serde::from_str(&read(chart.join("values.yaml"))?)
        .map_err(|e| Error::Unsupported(format!("{}/values.yaml: {e}", chart.display())))?;
    let repository = values["image"]["repository"]
        .as_str()
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "{}/values.yaml has no image.repository",
                chart.display()
            ))
        })?
        .to_string();
    let app_version = read(chart.join("Chart.yaml"))?
        .lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .ok_or_else(|| {
            Error::Unsupported(format!("{}/Chart.yaml has no appVersion", chart.display()))
        })?;
    Ok(UpgradeFrom {
        commit: read(dir.join("COMMIT"))?.trim().to_string(),
        layout: dir.join("oci"),
        image: format!("{repository}:{app_version}"),
        chart,
    })
}
