//! What the snapshot, restore and schedule suites set up alike: the claim `backups` their PVC
//! destinations point at, and an on-demand EtcdSnapshot. Creating only: waiting and checking
//! stay with each suite.

use api::v1alpha2::{EtcdSnapshot, EtcdSnapshotSpec, LocalReference, SnapshotDestination};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

use crate::e2e::Env;
use crate::OrPanic;

/// Create the 1Gi claim `backups` in `ns`.
pub async fn create_backups_claim(env: &Env, ns: &str) -> PersistentVolumeClaim {
    crate::harness::create(
        &env.client(),
        ns,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "backups"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await
}

/// Create the EtcdSnapshot `name` of `cluster` to `dest`.
pub async fn create_snapshot(
    env: &Env,
    ns: &str,
    name: &str,
    cluster: &str,
    dest: SnapshotDestination,
) {
    let s = EtcdSnapshot::new(
        name,
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: cluster.to_string(),
            },
            destination: dest,
            verify: None,
        },
    );
    Api::<EtcdSnapshot>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &s)
        .await
        .or_panic();
}
