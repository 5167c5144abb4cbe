//! The operator's EtcdCluster status writes against a real apiserver: a write built from an
//! older read must never revert what someone else wrote in between (the runbook forces the
//! progress deadline through the status subresource while the operator is reconciling).

use api::v1alpha2::{EtcdCluster, EtcdClusterStatus};
use controller::shell::write_status;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use tests::e2e::spec;
use tests::env::ControlPlane;
use tests::OrPanic;

#[tokio::test]
async fn status_write_from_a_stale_read_never_reverts_a_concurrent_status_edit() {
    let cp = ControlPlane::builder()
        .with_crds()
        .shared()
        .await
        .or_panic();
    let ns = cp.namespace("status").await.or_panic();
    let api: Api<EtcdCluster> = Api::namespaced(cp.client().or_panic(), &ns);
    api.create(&PostParams::default(), &EtcdCluster::new("st", spec(3)))
        .await
        .or_panic();
    let future = Time(Timestamp::now() + SignedDuration::from_secs(600));
    let initial = EtcdClusterStatus {
        progress_deadline: Some(future.clone()),
        ..Default::default()
    };
    let read = api.get("st").await.or_panic();
    let read = write_status(&api, &read, read.status.as_ref(), &initial)
        .await
        .or_panic();

    // The operator has read the cluster (`read`); now a person forces the deadline.
    let past = Time(Timestamp::now() - SignedDuration::from_secs(1));
    api.patch_status(
        "st",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"progressDeadline": past}})),
    )
    .await
    .or_panic();

    // The operator's next write, planned from its older read, must not land.
    let planned = EtcdClusterStatus {
        progress_deadline: Some(future),
        ready_members: 1,
        ..Default::default()
    };
    let result = write_status(&api, &read, read.status.as_ref(), &planned).await;
    assert!(
        result.as_ref().is_err_and(|e| e.is_stale_write()),
        "a write from a stale read must be refused as a conflict, got {result:?}"
    );
    let now = api.get("st").await.or_panic();
    // metav1.Time is stored with second precision.
    assert_eq!(
        now.status
            .and_then(|s| s.progress_deadline)
            .map(|t| t.0.as_second()),
        Some(past.0.as_second()),
        "the forced deadline was reverted"
    );

    // From a fresh read the same write goes through.
    let fresh = api.get("st").await.or_panic();
    let written = write_status(&api, &fresh, fresh.status.as_ref(), &planned)
        .await
        .or_panic();
    assert_eq!(written.status.map(|s| s.ready_members), Some(1));
}
