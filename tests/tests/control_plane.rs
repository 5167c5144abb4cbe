//! The test control plane itself, in full (etcd, apiserver, kube-controller-manager,
//! kube-scheduler): its controllers and scheduler act on objects, and dropping it leaves no
//! process and no files behind. The end-to-end suites build on exactly this. And a component
//! whose port another process already serves is not taken for started. The fault suite's
//! outages of the apiserver and of its etcd keep every object and let watches resume.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;
use kube_runtime::{watcher, WatchStreamExt};
use serde_json::json;
use tests::env::control_plane::temp_root;
use tests::env::etcd::{Etcd, EtcdConfig};
use tests::env::{ControlPlane, Testbins};
use tests::faults_env::{restart_apiserver, restart_control_plane_etcd, Stop};
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

/// The fault suite's control-plane outages (`tests::faults_env`): the kube-apiserver crashed and
/// started again, then the control plane's etcd stopped and started again, each in place. The
/// server URL stays, every object is kept with its resourceVersion, new resourceVersions
/// continue past the old ones, the same client works again, and a watch opened before the
/// outages (kube-runtime's watcher, as the operator's) sees the objects created after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_and_etcd_restarts_keep_objects_and_watches_resume() {
    let cp = ControlPlane::builder().start().await.or_panic();
    let client = cp.client().or_panic();
    let ns = cp.namespace("restart").await.or_panic();
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let create = |name: &'static str| {
        let cms = cms.clone();
        async move {
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": name}}))
                    .or_panic();
            cms.create(&PostParams::default(), &cm).await.or_panic()
        }
    };
    let revision = |cm: &ConfigMap| -> u64 {
        cm.resource_version()
            .and_then(|rv| rv.parse().ok())
            .unwrap_or_else(|| panic!("{} has no numeric resourceVersion", cm.name_any()))
    };
    let seen_names = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let watched = {
        let seen_names = seen_names.clone();
        let stream = watcher(cms.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(cm) = event {
                    seen_names.lock().or_panic().insert(cm.name_any());
                }
            }
        })
    };
    let saw = |name: &'static str| {
        let seen_names = seen_names.clone();
        async move {
            eventually(
                &format!("the watch opened before the outages to see {name}"),
                TIMEOUT,
                || async {
                    let names = seen_names.lock().map_err(|e| e.to_string())?.clone();
                    seen(names, |n| n.contains(name)).map(drop)
                },
            )
            .await
        }
    };

    let first = create("before").await;
    saw("before").await;
    let url = cp.server_url().to_string();
    let apiserver_pid = cp.process("kube-apiserver").or_panic().pid();
    let etcd_pid = cp.process("etcd").or_panic().pid();

    let api_down = restart_apiserver(&cp, Stop::Crash).await.or_panic();
    assert_eq!(cp.server_url(), url);
    assert_ne!(cp.process("kube-apiserver").or_panic().pid(), apiserver_pid);
    assert_eq!(cp.process("etcd").or_panic().pid(), etcd_pid);
    let kept = cms.get("before").await.or_panic();
    assert_eq!(kept.resource_version(), first.resource_version());
    let second = create("after-apiserver").await;
    assert!(revision(&second) > revision(&first));
    saw("after-apiserver").await;

    let etcd_down = restart_control_plane_etcd(&cp, Stop::Graceful)
        .await
        .or_panic();
    assert_ne!(cp.process("etcd").or_panic().pid(), etcd_pid);
    for (name, cm) in [("before", &first), ("after-apiserver", &second)] {
        let kept = cms.get(name).await.or_panic();
        assert_eq!(kept.resource_version(), cm.resource_version(), "{name}");
    }
    let third = create("after-etcd").await;
    assert!(revision(&third) > revision(&second));
    saw("after-etcd").await;
    cp.check_running().or_panic();
    watched.abort();
    eprintln!("kube-apiserver down {api_down:.1?}, etcd down {etcd_down:.1?}");
}
