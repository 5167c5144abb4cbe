//! Support for the suites that build an etcd cluster by hand, as another operator would have left
//! it, before this operator adopts it (`e2e_takeover`, `e2e_migrate_aenix`): raw object creation
//! with owner references, a client on members by their DNS names, etcd's member list, and Pod
//! readiness and restart counts.
//!
//! It holds no scenario: what a suite builds and what it asserts of the adoption stay in the
//! suite. Nothing here starts the operator.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{json, Value};

use crate::e2e::pod_ready;
use crate::harness::eventually;
use crate::OrPanic;

/// A controller owner reference, as controller-runtime's `SetControllerReference` writes it.
pub fn controller_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!([{
        "apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true,
    }])
}

/// Create the object `body` describes through `api` (typed or dynamic).
pub async fn create_raw<K>(api: &Api<K>, body: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(body).or_panic();
    api.create(&PostParams::default(), &obj).await.or_panic()
}

/// `unwrap` for the fields the apiserver always sets (uid, resourceVersion).
pub trait OrPanicNone<T> {
    fn or_panic_none(self) -> T;
}

impl<T> OrPanicNone<T> for Option<T> {
    #[track_caller]
    fn or_panic_none(self) -> T {
        self.unwrap_or_else(|| panic!("a value the apiserver always sets is missing"))
    }
}

/// The restart count of the Pod's `etcd` container (0 before it has a status).
pub fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "etcd"))
        .map(|c| c.restart_count)
        .unwrap_or(0)
}

/// Wait until every Pod in `names` exists and is Ready.
pub async fn wait_pods_ready(client: &Client, ns: &str, names: &[String], timeout: Duration) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(
        &format!("Pods {names:?} in {ns} Ready"),
        timeout,
        || async {
            let mut not_ready = Vec::new();
            for name in names {
                match pods.get_opt(name).await.or_panic() {
                    Some(p) if pod_ready(&p) => {}
                    Some(_) => not_ready.push(format!("{name}: not Ready")),
                    None => not_ready.push(format!("{name}: no such Pod")),
                }
            }
            if not_ready.is_empty() {
                Ok(())
            } else {
                Err(not_ready.join(", "))
            }
        },
    )
    .await
}

/// etcd through the given members' DNS names, `(member, subdomain)` each.
pub async fn etcd_at(ns: &str, members: &[(String, String)]) -> etcd_client::Client {
    let endpoints: Vec<String> = members
        .iter()
        .map(|(m, service)| format!("http://{m}.{service}.{ns}.svc:2379"))
        .collect();
    crate::e2e::dial(endpoints).await
}

/// One entry of etcd's member list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The member ID, 16 hex digits.
    pub id: String,
    pub name: String,
    /// Its first peer URL.
    pub peer_url: String,
    pub learner: bool,
}

/// etcd's cluster ID and member list, as `etcd` answers.
pub async fn member_list(etcd: &mut etcd_client::Client) -> (u64, Vec<Listed>) {
    let list = etcd.member_list().await.or_panic();
    let cluster_id = list.header().map(|h| h.cluster_id()).unwrap_or_default();
    let members = list
        .members()
        .iter()
        .map(|m| Listed {
            id: format!("{:016x}", m.id()),
            name: m.name().to_string(),
            peer_url: m.peer_urls().first().cloned().unwrap_or_default(),
            learner: m.is_learner(),
        })
        .collect();
    (cluster_id, members)
}
