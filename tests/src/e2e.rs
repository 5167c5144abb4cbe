//! End-to-end support: one environment per test binary — the control plane (CRDs, controller
//! manager, scheduler), the pod runner running member Pods as real etcd processes, and the
//! operator binary — plus helpers to create clusters, wait for conditions and check data through a
//! real etcd client.

use std::collections::BTreeMap;
use std::time::Duration;

use api::v1alpha2::{EtcdCluster, EtcdClusterSpec, EtcdMember};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::env::{ControlPlane, Kubernetes};
use crate::harness::{eventually_every, POLL};
use crate::operator::Operator;
use crate::podrunner::PodRunner;
use crate::OrPanic;

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

impl Env {
    pub fn client(&self) -> Client {
        self.cp.client().or_panic()
    }

    pub async fn namespace(&self, prefix: &str) -> String {
        self.cp.namespace(prefix).await.or_panic()
    }

    /// MinIO (plain HTTP) on the pod bridge, the Service `minio` for it in `ns`, and the Secret
    /// `s3-creds` with its writer's keys (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`). Returns
    /// the server, its data directory (keep it for as long as the server) and the endpoint URL
    /// Pods and the operator use.
    pub async fn minio(&self, ns: &str) -> (crate::env::minio::Minio, tempfile::TempDir, String) {
        let client = self.client();
        let root = tempfile::tempdir().or_panic();
        let minio = crate::env::minio::Minio::start_on(
            self.cp.testbins(),
            root.path(),
            false,
            std::net::IpAddr::V4(self.runner.host_address()),
        )
        .await
        .or_panic();
        let endpoint = minio.expose(&client, ns, "minio").await;
        let _: k8s_openapi::api::core::v1::Secret = crate::harness::create(
            &client,
            ns,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"},
                   "stringData": {"AWS_ACCESS_KEY_ID": minio.writer.access_key,
                                  "AWS_SECRET_ACCESS_KEY": minio.writer.secret_key}}),
        )
        .await;
        (minio, root, endpoint)
    }

    pub fn clusters(&self, ns: &str) -> Api<EtcdCluster> {
        Api::namespaced(self.client(), ns)
    }

    pub async fn create_cluster(&self, ns: &str, name: &str, spec: EtcdClusterSpec) -> EtcdCluster {
        let cluster = EtcdCluster::new(name, spec);
        self.clusters(ns)
            .create(&PostParams::default(), &cluster)
            .await
            .or_panic()
    }

    pub async fn scale(&self, ns: &str, name: &str, replicas: i32) {
        let patch = json!({"spec": {"replicas": replicas}});
        self.clusters(ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .or_panic();
    }

    pub async fn cluster(&self, ns: &str, name: &str) -> EtcdCluster {
        self.clusters(ns).get(name).await.or_panic()
    }

    pub async fn members(&self, ns: &str, cluster: &str) -> Vec<EtcdMember> {
        let api: Api<EtcdMember> = Api::namespaced(self.client(), ns);
        api.list(&ListParams::default().labels(&api::labels::cluster_selector(cluster)))
            .await
            .or_panic()
            .items
    }

    /// EtcdMember name → etcd member ID (`status.memberID`, empty while unknown).
    pub async fn member_ids(&self, ns: &str, cluster: &str) -> BTreeMap<String, String> {
        self.members(ns, cluster)
            .await
            .iter()
            .map(|m| {
                let id = m.status.as_ref().and_then(|s| s.member_id.clone());
                (m.name_any(), id.unwrap_or_default())
            })
            .collect()
    }

    /// The names of the cluster's EtcdMembers, in the API's list order.
    pub async fn member_names(&self, ns: &str, cluster: &str) -> Vec<String> {
        self.members(ns, cluster)
            .await
            .iter()
            .map(|m| m.name_any())
            .collect()
    }

    pub async fn pods(&self, ns: &str, cluster: &str) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client(), ns);
        api.list(&ListParams::default().labels(&api::labels::cluster_selector(cluster)))
            .await
            .or_panic()
            .items
    }

    pub async fn pvcs(&self, ns: &str, cluster: &str) -> Vec<PersistentVolumeClaim> {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client(), ns);
        api.list(&ListParams::default().labels(&api::labels::cluster_selector(cluster)))
            .await
            .or_panic()
            .items
    }

    /// The Events about the object `name` in `ns` (any kind), as listed.
    pub async fn events(&self, ns: &str, name: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client(), ns)
            .list(&ListParams::default())
            .await
            .or_panic()
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect()
    }

    /// Wait until the cluster is `Available=False` for `reason` with a message naming `naming`;
    /// returns the message.
    pub async fn wait_unavailable(
        &self,
        ns: &str,
        name: &str,
        reason: &str,
        naming: &str,
        timeout: Duration,
    ) -> String {
        let what = format!("Available=False/{reason} naming {naming}");
        let c = self
            .wait_for(ns, name, &what, timeout, |c| {
                condition(c, "Available")
                    .is_some_and(|(st, r, m)| st == "False" && r == reason && m.contains(naming))
            })
            .await;
        condition(&c, "Available").expect("Available condition").2
    }

    /// Wait until `check` holds for the cluster; on timeout, panic with the last status and the
    /// operator's log location.
    pub async fn wait_for(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&EtcdCluster) -> bool,
    ) -> EtcdCluster {
        let what = format!(
            "{ns}/{name}: {what} (operator log: {})",
            self.operator.log().display()
        );
        self.wait_for_every(ns, name, &what, timeout, POLL, check)
            .await
    }

    /// [`Env::wait_for`] asking every `every`, with `what` said as given.
    pub async fn wait_for_every(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        timeout: Duration,
        every: Duration,
        check: impl Fn(&EtcdCluster) -> bool,
    ) -> EtcdCluster {
        eventually_every(what, timeout, every, || async {
            let c = self.cluster(ns, name).await;
            if check(&c) {
                Ok(c)
            } else {
                Err(format!(
                    "status: {}",
                    serde_json::to_string_pretty(&c.status).unwrap_or_default()
                ))
            }
        })
        .await
    }

    /// Wait for `replicas` Ready members and `Available=True/QuorumHealthy`.
    pub async fn wait_healthy(
        &self,
        ns: &str,
        name: &str,
        replicas: i32,
        timeout: Duration,
    ) -> EtcdCluster {
        self.wait_for(
            ns,
            name,
            &format!("{replicas} ready members and QuorumHealthy"),
            timeout,
            |c| healthy(c, replicas),
        )
        .await
    }

    /// The cluster's member Pods that are Ready and not being deleted.
    pub async fn ready_pods(&self, ns: &str, cluster: &str) -> Vec<Pod> {
        self.pods(ns, cluster)
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
            .collect()
    }

    /// `etcdctl <args>` in the `etcd` container of a Ready member Pod; `(exit code, stdout,
    /// stderr)`.
    pub async fn etcdctl(
        &self,
        ns: &str,
        cluster: &str,
        args: &[&str],
    ) -> (Option<i32>, String, String) {
        let pod = self
            .ready_pods(ns, cluster)
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{ns}/{cluster}: no ready member Pod to exec into"));
        let mut argv = vec!["etcdctl", "--command-timeout=5s"];
        argv.extend_from_slice(args);
        let out = self
            .runner
            .exec(ns, &pod.name_any(), "etcd", &argv)
            .await
            .or_panic();
        (out.code, out.stdout, out.stderr)
    }

    /// `etcdctl member list` inside a member Pod: `(name, is_learner)` per member.
    pub async fn etcd_members(&self, ns: &str, cluster: &str) -> Vec<(String, bool)> {
        let pods = self.pods(ns, cluster).await;
        let pod = pods
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none() && crate::e2e::pod_ready(p))
            .unwrap_or_else(|| panic!("{ns}/{cluster}: no ready member Pod to exec into"));
        let out = self
            .runner
            .exec(
                ns,
                &pod.name_any(),
                "etcd",
                &[
                    "etcdctl",
                    "--endpoints=http://localhost:2379",
                    "member",
                    "list",
                    "-w",
                    "json",
                ],
            )
            .await
            .or_panic();
        assert_eq!(
            out.code,
            Some(0),
            "etcdctl member list failed: {}",
            out.stderr
        );
        let v: serde_json::Value = serde_json::from_str(&out.stdout).or_panic();
        v["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m["name"].as_str().unwrap_or_default().to_string(),
                    m["isLearner"].as_bool().unwrap_or(false),
                )
            })
            .collect()
    }

    /// A real etcd client on the cluster's member names (see [`etcd_client`]).
    pub async fn etcd_client(&self, ns: &str, cluster: &str) -> etcd_client::Client {
        etcd_client(&self.client(), ns, cluster).await
    }

    /// Write `count` keys `e2e/<i>` = `v<i>` and return them (see [`write_keys`]).
    pub async fn write_keys(
        &self,
        ns: &str,
        cluster: &str,
        count: usize,
    ) -> BTreeMap<String, String> {
        write_keys(&self.client(), ns, cluster, count).await
    }

    /// Every key [`Env::write_keys`] wrote is present with its value, read linearizably through
    /// the cluster (see [`check_keys`]).
    pub async fn check_keys(&self, ns: &str, cluster: &str, keys: &BTreeMap<String, String>) {
        let mut etcd = self.etcd_client(ns, cluster).await;
        let what = format!("{ns}/{cluster}");
        check_keys(&mut etcd, &what, "e2e/", keys, Keys::AtLeast).await
    }
}

/// A real etcd client on the Ready members' DNS names (resolved through the runner's hosts block).
pub async fn etcd_client(client: &Client, ns: &str, cluster: &str) -> etcd_client::Client {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let endpoints: Vec<String> = pods
        .list(&ListParams::default().labels(&api::labels::cluster_selector(cluster)))
        .await
        .or_panic()
        .items
        .iter()
        .filter(|p| pod_ready(p))
        .map(|p| format!("http://{}.{cluster}.{ns}.svc:2379", p.name_any()))
        .collect();
    assert!(
        !endpoints.is_empty(),
        "{ns}/{cluster}: no ready member to dial"
    );
    dial(endpoints).await
}

/// A plain etcd client of `endpoints` (5 s to connect, 10 s a request).
pub async fn dial(endpoints: Vec<String>) -> etcd_client::Client {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(10));
    etcd_client::Client::connect(endpoints, Some(options))
        .await
        .or_panic()
}

/// Write `count` keys `e2e/<i>` = `v<i>` through a real etcd client and return them.
pub async fn write_keys(
    client: &Client,
    ns: &str,
    cluster: &str,
    count: usize,
) -> BTreeMap<String, String> {
    let mut etcd = etcd_client(client, ns, cluster).await;
    put_keys(&mut etcd, "e2e/", count).await
}

/// Write `count` keys `<prefix><i>` = `v<i>` through `etcd` and return them.
pub async fn put_keys(
    etcd: &mut etcd_client::Client,
    prefix: &str,
    count: usize,
) -> BTreeMap<String, String> {
    let mut keys = BTreeMap::new();
    for i in 0..count {
        let (k, v) = (format!("{prefix}{i:04}"), format!("v{i}"));
        etcd.put(k.clone(), v.clone(), None).await.or_panic();
        keys.insert(k, v);
    }
    keys
}

/// Every key under `prefix` with its value, read linearizably through `etcd`.
pub async fn read_keys(etcd: &mut etcd_client::Client, prefix: &str) -> BTreeMap<String, String> {
    etcd.get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .or_panic()
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap_or_default().to_string(),
                kv.value_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// What [`check_keys`] demands of the keys it reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Every written key is there with its value; other keys under the prefix may be too.
    AtLeast,
    /// The keys under the prefix are exactly the written ones, with their values.
    Exactly,
}

/// The suites' one check that data survived: read every key under `prefix` linearizably through
/// `etcd` and compare with `keys` as `expect` says; panics naming `what`, the keys missing or
/// changed and, with [`Keys::Exactly`], the unexpected ones.
pub async fn check_keys(
    etcd: &mut etcd_client::Client,
    what: &str,
    prefix: &str,
    keys: &BTreeMap<String, String>,
    expect: Keys,
) {
    let got = read_keys(etcd, prefix).await;
    let missing: Vec<_> = keys
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    let unexpected: Vec<_> = match expect {
        Keys::AtLeast => Vec::new(),
        Keys::Exactly => got.keys().filter(|k| !keys.contains_key(*k)).collect(),
    };
    assert!(
        missing.is_empty() && unexpected.is_empty(),
        "{what}: {} of {} keys lost or changed: {:?}; {} unexpected keys: {:?}",
        missing.len(),
        keys.len(),
        &missing[..missing.len().min(10)],
        unexpected.len(),
        &unexpected[..unexpected.len().min(10)]
    );
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

/// Write `count` values of `size` bytes under `prefix`, then delete them and compact away every
/// old revision: the backend keeps its size but little of it is in use.
pub async fn churn(etcd: &mut etcd_client::Client, prefix: &str, count: usize, size: usize) {
    let value = vec![b'x'; size];
    for i in 0..count {
        etcd.put(format!("{prefix}{i:05}"), value.clone(), None)
            .await
            .or_panic();
    }
    free(etcd, prefix).await;
    // etcd updates dbSizeInUse when its backend commits (every 100ms while writes come in): one
    // more write makes every member count the freed pages.
    etcd.put(format!("{prefix}done"), "", None).await.or_panic();
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Delete everything under `prefix` and compact physically up to that revision.
pub async fn free(etcd: &mut etcd_client::Client, prefix: &str) {
    let deleted = etcd
        .delete(
            prefix,
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .or_panic();
    let revision = deleted.header().map(|h| h.revision()).unwrap_or_default();
    etcd.compact(
        revision,
        Some(etcd_client::CompactionOptions::new().with_physical()),
    )
    .await
    .or_panic();
}

/// A client on one member Pod alone: its own IP, so every request is answered by that member
/// (no failover to the others).
pub async fn member_client(pod: &Pod) -> Result<etcd_client::Client, String> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| format!("Pod {} has no IP", pod.name_any()))?;
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(10));
    etcd_client::Client::connect([format!("http://{ip}:2379")], Some(options))
        .await
        .map_err(|e| format!("{}: connect to {ip}:2379: {e}", pod.name_any()))
}

/// What one member says of itself in its Status response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// etcd's cluster ID, from the response header.
    pub cluster_id: u64,
    /// The member's own ID.
    pub member_id: u64,
    /// The ID of the member it takes for the leader (0: none).
    pub leader: u64,
}

/// Ask one member Pod's etcd (on its own endpoint) for its Status.
pub async fn member_view(pod: &Pod) -> Result<MemberView, String> {
    let mut etcd = member_client(pod).await?;
    let status = etcd
        .status()
        .await
        .map_err(|e| format!("{}: Status: {e}", pod.name_any()))?;
    let header = status
        .header()
        .ok_or_else(|| format!("{}: Status without a header", pod.name_any()))?;
    Ok(MemberView {
        cluster_id: header.cluster_id(),
        member_id: header.member_id(),
        leader: status.leader(),
    })
}

impl Env {
    /// Every current member's Pod (not being deleted) asked on its own endpoint: Pod name →
    /// its Status, or the error that kept it from answering three tries in a row.
    pub async fn member_views(
        &self,
        ns: &str,
        cluster: &str,
    ) -> BTreeMap<String, Result<MemberView, String>> {
        let members: Vec<String> = self.member_names(ns, cluster).await;
        let mut out = BTreeMap::new();
        for pod in self.pods(ns, cluster).await {
            // Only the Pods of current members: a removed member's Pod may linger until the
            // garbage collector takes it.
            if pod.metadata.deletion_timestamp.is_some() || !members.contains(&pod.name_any()) {
                continue;
            }
            let mut view = member_view(&pod).await;
            for _ in 0..2 {
                if view.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                view = member_view(&pod).await;
            }
            out.insert(pod.name_any(), view);
        }
        out
    }

    /// etcd's cluster ID as every one of `replicas` member Pods reports it on its own endpoint;
    /// panics unless each of them answers and all name the same cluster.
    pub async fn etcd_cluster_id(&self, ns: &str, cluster: &str, replicas: usize) -> u64 {
        let views = self.member_views(ns, cluster).await;
        let ids: BTreeMap<&String, u64> = views
            .iter()
            .map(|(pod, v)| match v {
                Ok(v) => (pod, v.cluster_id),
                Err(e) => panic!("{ns}/{cluster}: member {pod} did not answer: {e}"),
            })
            .collect();
        assert_eq!(
            ids.len(),
            replicas,
            "{ns}/{cluster}: {} member Pods answered, want {replicas}: {ids:?}",
            ids.len()
        );
        let mut distinct: Vec<u64> = ids.values().copied().collect();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            1,
            "{ns}/{cluster}: the members name different etcd clusters: {ids:x?}"
        );
        distinct[0]
    }
}

/// Every key under `prefix` as `pod`'s member alone holds it: a serializable read on its own
/// endpoint, answered from its local data without asking the leader.
pub async fn read_member_keys(pod: &Pod, prefix: &str) -> BTreeMap<String, String> {
    let mut etcd = member_client(pod).await.or_panic();
    etcd.get(
        prefix,
        Some(
            etcd_client::GetOptions::new()
                .with_prefix()
                .with_serializable(),
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("{}: serializable read of {prefix}: {e}", pod.name_any()))
    .kvs()
    .iter()
    .map(|kv| {
        (
            kv.key_str().unwrap_or_default().to_string(),
            kv.value_str().unwrap_or_default().to_string(),
        )
    })
    .collect()
}
