//! The environment's operations on Kubernetes objects: namespaces, clusters, members, Pods and
//! PVCs, their waits and the Events about them. Nothing here dials etcd but through
//! [`super::etcd`]; nothing here starts a process (that is [`super`]'s shared start).

use std::collections::BTreeMap;
use std::time::Duration;

use api::v1alpha2::{EtcdCluster, EtcdClusterSpec, EtcdMember};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::{condition, etcd, healthy, pod_ready, Env, Keys};
use crate::harness::{eventually_every, POLL};
use crate::OrPanic;

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
        self.all_events(ns)
            .await
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect()
    }

    /// Every Event in `ns`, as listed.
    pub async fn all_events(&self, ns: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client(), ns)
            .list(&ListParams::default())
            .await
            .or_panic()
            .items
    }

    /// `kubectl get events -n <ns> --field-selector <selector> -o <output>`, as kubectl prints it.
    pub async fn kubectl_events(&self, ns: &str, selector: &str, output: &str) -> String {
        let args = [
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            selector,
            "-o",
            output,
        ];
        self.cp.kubectl_ok(&args).await.or_panic()
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
        // Asked of each Ready member Pod in turn until one answers: a member that has just
        // joined is Ready (etcd's `/health` on the metrics port) seconds before it has published
        // itself through raft and serves its client port, and an etcdctl sent to it times out.
        let pods = self.pods(ns, cluster).await;
        let ready: Vec<_> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && crate::e2e::pod_ready(p))
            .collect();
        assert!(
            !ready.is_empty(),
            "{ns}/{cluster}: no ready member Pod to exec into"
        );
        let mut failures = Vec::new();
        let mut answered = None;
        for pod in ready {
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
            if out.code == Some(0) {
                answered = Some(out);
                break;
            }
            failures.push(format!("{}: {}", pod.name_any(), out.stderr.trim()));
        }
        let Some(out) = answered else {
            panic!(
                "{ns}/{cluster}: etcdctl member list failed in every Ready member: {failures:?}"
            );
        };
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

    /// A real etcd client on the cluster's member names (see [`etcd::etcd_client`]).
    pub async fn etcd_client(&self, ns: &str, cluster: &str) -> etcd_client::Client {
        etcd::etcd_client(&self.client(), ns, cluster).await
    }

    /// Write `count` keys `e2e/<i>` = `v<i>` and return them (see [`etcd::write_keys`]).
    pub async fn write_keys(
        &self,
        ns: &str,
        cluster: &str,
        count: usize,
    ) -> BTreeMap<String, String> {
        etcd::write_keys(&self.client(), ns, cluster, count).await
    }

    /// Every key [`Env::write_keys`] wrote is present with its value, read linearizably through
    /// the cluster (see [`etcd::check_keys`]).
    pub async fn check_keys(&self, ns: &str, cluster: &str, keys: &BTreeMap<String, String>) {
        let mut etcd = self.etcd_client(ns, cluster).await;
        let what = format!("{ns}/{cluster}");
        etcd::check_keys(&mut etcd, &what, "e2e/", keys, Keys::AtLeast).await
    }
}
