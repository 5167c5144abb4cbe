//! End to end: online volume growth. A larger `spec.storage.size` reaches every member's PVC
//! without a restart, with a writer running throughout (the pod runner's sized class expands the
//! tmpfs under the running member, as a CSI driver and the kubelet would); a StorageClass that
//! does not allow expansion is named in a condition, and the PVC is left alone.

use std::time::Duration;

use api::v1alpha2::{EtcdClusterSpec, StorageSpec};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::e2e::{condition, env, spec, Env};
use tests::rollout::{event_messages, uids, Writer};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
const GROW: Duration = Duration::from_secs(120);
/// The writer's longest pause allowed while the volumes grow: nothing restarts, so anything
/// beyond a slow write on a loaded test machine is a failure.
const LONGEST_GAP: Duration = Duration::from_secs(5);

fn storage(pvc: &PersistentVolumeClaim) -> (Option<String>, Option<String>) {
    let requested = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone());
    let capacity = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.clone());
    (requested, capacity)
}

async fn grow(env: &Env, ns: &str, name: &str, size: &str) {
    env.clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"storage": {"size": size}}})),
        )
        .await
        .or_panic();
}

fn member_condition(m: &api::v1alpha2::EtcdMember) -> Option<(String, String, String)> {
    m.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "VolumeExpanded")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// `replicas` members with 1Gi volumes of the storage class `class`.
fn on_class(class: &str, replicas: i32) -> EtcdClusterSpec {
    EtcdClusterSpec {
        storage: StorageSpec {
            size: Quantity("1Gi".into()),
            storage_class_name: Some(class.to_string()),
            ..Default::default()
        },
        ..spec(replicas)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_larger_storage_size_expands_every_member_pvc_online_without_a_restart() {
    let env = env().await;
    let ns = env.namespace("volume").await;
    let name = "grow";
    let class = env.runner.sized_storage_class();
    env.create_cluster(&ns, name, on_class(&class, 3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 100).await;
    let pods = env.ready_pods(&ns, name).await;
    let before = uids(&pods);
    let endpoints: Vec<String> = pods
        .iter()
        .map(|p| format!("http://{}.{name}.{ns}.svc:2379", p.name_any()))
        .collect();
    let writer = Writer::start(endpoints, None, "e2e/w/");
    tokio::time::sleep(Duration::from_secs(2)).await;

    grow(env, &ns, name, "2Gi").await;
    let c = env
        .wait_for(&ns, name, "VolumesExpanded=True", GROW, |c| {
            condition(c, "VolumesExpanded").is_some_and(|(s, _, _)| s == "True")
        })
        .await;
    let report = writer.finish().await;
    let (_, why, message) = condition(&c, "VolumesExpanded").expect("a VolumesExpanded condition");
    assert_eq!(why, "VolumeExpanded");
    assert!(message.contains("2Gi"), "{message}");

    // Every PVC requests and holds 2Gi, and the volume under each member really is 2 GiB.
    let pvcs = env.pvcs(&ns, name).await;
    assert_eq!(pvcs.len(), 3);
    for pvc in &pvcs {
        assert_eq!(
            storage(pvc),
            (Some("2Gi".into()), Some("2Gi".into())),
            "{}",
            pvc.name_any()
        );
        let dir = env.runner.claim_dir(&ns, &pvc.name_any()).await.or_panic();
        let st = nix::sys::statvfs::statvfs(&dir).or_panic();
        let bytes = st.blocks() as u64 * st.fragment_size() as u64;
        assert_eq!(bytes, 2 << 30, "{} is {bytes} bytes", dir.display());
    }
    // Each member reports its own volume grown. Its controller writes that on the PVC event
    // that shows the new capacity, which can come a moment after the cluster has seen every
    // PVC at 2Gi: waited for, not assumed.
    tests::harness::eventually(
        "every member's VolumeExpanded=True/VolumeExpanded",
        Duration::from_secs(60),
        || async {
            for m in env.members(&ns, name).await {
                assert_eq!(m.spec.storage.size.0, "2Gi", "{}", m.name_any());
                match member_condition(&m) {
                    Some((status, why, _)) if status == "True" && why == "VolumeExpanded" => {}
                    other => return Err(format!("{}: {other:?}", m.name_any())),
                }
            }
            Ok(())
        },
    )
    .await;
    // No member restarted: same Pods, no container restart.
    let after = env.pods(&ns, name).await;
    assert_eq!(uids(&after), before, "a member Pod was replaced");
    for p in &after {
        let restarts: i32 = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or_default();
        assert_eq!(restarts, 0, "{} restarted", p.name_any());
    }
    let announced = event_messages(env, &ns, name, "VolumeExpansion").await;
    assert!(announced.iter().any(|m| m.contains("2Gi")), "{announced:?}");
    println!(
        "volume growth: {} writes, {} failed, longest gap {:?}",
        report.written.len(),
        report.failed,
        report.longest_gap
    );
    assert_eq!(report.failed, 0, "writes failed while the volumes grew");
    assert!(report.longest_gap < LONGEST_GAP, "{:?}", report.longest_gap);
    env.check_keys(&ns, name, &keys).await;
    env.check_keys(&ns, name, &report.written).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_class_without_expansion_is_named_and_the_pvc_left_alone() {
    let env = env().await;
    let ns = env.namespace("volume-fixed").await;
    let client = env.client();
    let class = format!("fixed-{ns}");
    // A class without a provisioner and a static volume for the one member to bind.
    let sc: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": class},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": false,
    }))
    .or_panic();
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .or_panic();
    let dir = tempfile::tempdir().or_panic();
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("static-{ns}")},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class,
            "hostPath": {"path": dir.path(), "type": "DirectoryOrCreate"},
        },
    }))
    .or_panic();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .or_panic();

    let name = "fixed";
    env.create_cluster(&ns, name, on_class(&class, 1)).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;
    let keys = env.write_keys(&ns, name, 20).await;
    let before = uids(&env.pods(&ns, name).await);
    grow(env, &ns, name, "2Gi").await;
    let c = env
        .wait_for(
            &ns,
            name,
            "VolumesExpanded=False/VolumeExpansionNotSupported",
            GROW,
            |c| {
                condition(c, "VolumesExpanded")
                    .is_some_and(|(_, why, _)| why == "VolumeExpansionNotSupported")
            },
        )
        .await;
    let (status, _, message) =
        condition(&c, "VolumesExpanded").expect("a VolumesExpanded condition");
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!(
            "StorageClass {class} does not allow volume expansion"
        )) && message.contains("allowVolumeExpansion")
            && message.contains("stays at 1Gi"),
        "{message}"
    );
    let members = env.members(&ns, name).await;
    let (_, why, member_message) =
        member_condition(&members[0]).expect("a VolumeExpanded condition");
    assert_eq!(why, "VolumeExpansionNotSupported");
    assert!(member_message.contains(&class), "{member_message}");
    // The PVC is untouched, the member runs on, the cluster stays available.
    let pvcs = env.pvcs(&ns, name).await;
    assert_eq!(storage(&pvcs[0]).0.as_deref(), Some("1Gi"));
    assert_eq!(uids(&env.pods(&ns, name).await), before);
    assert_eq!(
        condition(&c, "Available").map(|(s, _, _)| s).as_deref(),
        Some("True")
    );
    env.check_keys(&ns, name, &keys).await;
}
