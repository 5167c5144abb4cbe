//! The e2e suites' etcd side: a client on a cluster's Ready members or on one member's own
//! endpoint, writing, reading and checking keys, churn and status per member. Nothing here
//! changes Kubernetes objects.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::{pod_ready, Env};
use crate::OrPanic;

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

/// etcd's refusals while its members elect a leader (`rpctypes.ErrGRPCLeaderChanged`,
/// `ErrGRPCNoLeader`, `ErrGRPCTimeoutDueToLeaderFail`).
const BETWEEN_LEADERS: [&str; 3] = [
    "etcdserver: leader changed",
    "etcdserver: no leader",
    "etcdserver: request timed out, possibly due to previous leader failure",
];

/// Every key under `prefix` with its value, read linearizably through `etcd`. A read refused
/// because the cluster is between leaders (etcd's "leader changed", "no leader" and "request
/// timed out, possibly due to previous leader failure", which a test that just evicted or
/// restarted a member can meet) is made again for up to 30 s, as any etcd client would; every
/// other error, or one lasting longer, fails the test.
pub async fn read_keys(etcd: &mut etcd_client::Client, prefix: &str) -> BTreeMap<String, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = etcd
            .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
            .await;
        match got {
            Ok(got) => return key_values(&got),
            Err(etcd_client::Error::GRpcStatus(status))
                if BETWEEN_LEADERS.contains(&status.message())
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("reading the keys under {prefix:?}: {e}"),
        }
    }
}

/// The keys of a range response with their values (as text).
fn key_values(got: &etcd_client::GetResponse) -> BTreeMap<String, String> {
    got.kvs()
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
    let got = etcd
        .get(
            prefix,
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_serializable(),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("{}: serializable read of {prefix}: {e}", pod.name_any()));
    key_values(&got)
}
