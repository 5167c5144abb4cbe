//! The operator's writes from an older read, against a real apiserver. An EtcdCluster status
//! write must never revert what someone else wrote in between (the runbook forces the progress
//! deadline through the status subresource while the operator is reconciling). A member
//! deletion the cluster controller planned must never delete a member changed in between (an
//! EtcdRecovery stopped it and restored a snapshot into it while the plan's etcd call timed
//! out).

use api::labels::ALLOW_DELETION_ANNOTATION;
use api::v1alpha2::{EtcdCluster, EtcdClusterStatus, EtcdMember, RESTORE_IN_PLACE_ANNOTATION};
use controller::deletion::delete_member_as_observed;
use controller::shell::write_status;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
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

#[tokio::test]
async fn a_member_deletion_planned_from_a_stale_read_never_deletes_a_member_changed_since() {
    let cp = ControlPlane::builder()
        .with_crds()
        .shared()
        .await
        .or_panic();
    let ns = cp.namespace("memberdel").await.or_panic();
    let api: Api<EtcdMember> = Api::namespaced(cp.client().or_panic(), &ns);
    let member: EtcdMember = serde_json::from_value(json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdMember",
        "metadata": {"name": "c-m1"},
        "spec": {"clusterName": "c", "version": "3.6.11"},
    }))
    .or_panic();
    api.create(&PostParams::default(), &member).await.or_panic();
    // The cluster controller reads the member and plans its deletion; before it acts, an
    // EtcdRecovery wakes the member to restore a snapshot into it.
    let read = api.get("c-m1").await.or_panic();
    api.patch(
        "c-m1",
        &PatchParams::default(),
        &Patch::Merge(&json!({
            "metadata": {"annotations": {RESTORE_IN_PLACE_ANNOTATION: "r"}},
            "spec": {"dormant": false},
        })),
    )
    .await
    .or_panic();

    let result = delete_member_as_observed(&api, &read).await;
    assert!(
        matches!(&result, Err(kube::Error::Api(e)) if e.code == 409),
        "a deletion planned from a stale read must be refused as a conflict, got {result:?}"
    );
    let now = api.get("c-m1").await.or_panic();
    assert!(
        now.metadata.deletion_timestamp.is_none(),
        "the member changed since the read was deleted"
    );
    assert!(
        !now.annotations().contains_key(ALLOW_DELETION_ANNOTATION),
        "the refused deletion left its mark: {:?}",
        now.annotations()
    );

    // From a fresh read the same deletion goes through.
    let fresh = api.get("c-m1").await.or_panic();
    assert!(delete_member_as_observed(&api, &fresh).await.or_panic());
    assert!(api.get_opt("c-m1").await.or_panic().is_none());
}
