//! The test control plane itself, in full (etcd, apiserver, kube-controller-manager,
//! kube-scheduler): its controllers and scheduler act on objects, and dropping it leaves no
//! process and no files behind. The end-to-end suites build on exactly this. And a component
//! whose port another process already serves is not taken for started.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tests::env::control_plane::temp_root;
use tests::env::etcd::{Etcd, EtcdConfig};
use tests::env::{ControlPlane, Testbins};
use tests::harness::{eventually, seen};
use tests::OrPanic;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn controllers_and_scheduler_act_and_drop_leaves_nothing_running() {
    let cp = ControlPlane::builder()
        .with_controller_manager()
        .with_scheduler()
        .start()
        .await
        .or_panic();
    let client = cp.client().or_panic();
    let ns = cp.namespace("full").await.or_panic();

    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web:1"}]},
            },
        },
    }))
    .or_panic();
    Api::<Deployment>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &deployment)
        .await
        .or_panic();

    // The deployment and replicaset controllers (kube-controller-manager) make a Pod ...
    let replicasets = Api::<ReplicaSet>::namespaced(client.clone(), &ns);
    eventually("a ReplicaSet for the Deployment", TIMEOUT, || async {
        let list = replicasets
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        seen(list.items.len(), |n| *n > 0).map(drop)
    })
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    // ... and the scheduler, with no Node to offer, marks it unschedulable.
    eventually("the scheduler to judge the Pod", TIMEOUT, || async {
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let conditions = list
            .items
            .into_iter()
            .next()
            .and_then(|pod| pod.status?.conditions);
        seen(conditions, |conditions| {
            conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
        })
        .map(drop)
    })
    .await;

    let pids: Vec<u32> = cp_pids(&cp);
    let root = cp.root().to_path_buf();
    assert_eq!(
        pids.len(),
        4,
        "etcd, apiserver, controller manager, scheduler"
    );
    drop(cp);
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} outlived its control plane"
        );
    }
    assert!(
        !root.exists(),
        "{} outlived its control plane",
        root.display()
    );
}

fn cp_pids(cp: &ControlPlane) -> Vec<u32> {
    cp.processes().iter().map(|p| p.pid()).collect()
}

/// Tests side by side pick ports before their components bind them: a member started on a client
/// port another etcd already serves must fail to start (its bind is refused), not be reported
/// started because the other etcd answers `/health` there (a test then reads the other's keys).
#[tokio::test]
async fn an_etcd_on_a_port_another_etcd_serves_is_not_taken_for_started() {
    let bins = Testbins::from_env().or_panic();
    let etcd_bin = bins.binary("etcd-3.6", "etcd").or_panic();
    let tmp = temp_root().or_panic();
    let logs = tmp.path().join("logs");
    let first = EtcdConfig::new("first", "first-token").or_panic();
    let _serving = Etcd::start(&etcd_bin, &first, &tmp.path().join("first"), &logs)
        .await
        .or_panic();
    let mut second = EtcdConfig::new("second", "second-token").or_panic();
    second.client_url = first.client_url.clone();
    match Etcd::start(&etcd_bin, &second, &tmp.path().join("second"), &logs).await {
        Ok(_) => panic!(
            "a second etcd on {} was reported started: the first one answered for it",
            first.client_url
        ),
        Err(e) => assert!(e.to_string().contains("address already in use"), "{e}"),
    }
}
