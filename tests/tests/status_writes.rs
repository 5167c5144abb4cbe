//! The operator's writes from an older read, against a real apiserver. An EtcdCluster status
//! write must never revert what someone else wrote in between (the runbook forces the progress
//! deadline through the status subresource while the operator is reconciling). A member
//! deletion the cluster controller planned must never delete a member changed in between (an
//! EtcdRecovery stopped it and restored a snapshot into it while the plan's etcd call timed
//! out).

use api::labels::{ALLOW_DELETION_ANNOTATION, DELETION_PLANNED_ANNOTATION};
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
    let api = one_member("memberdel", "c-m1").await;
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

    let result = delete_member_as_observed(&api, &read, "ScaleDown").await;
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
        !now.annotations().contains_key(ALLOW_DELETION_ANNOTATION)
            && !now.annotations().contains_key(DELETION_PLANNED_ANNOTATION),
        "the refused deletion left its mark: {:?}",
        now.annotations()
    );

    // From a fresh read the same deletion goes through.
    let fresh = api.get("c-m1").await.or_panic();
    assert!(delete_member_as_observed(&api, &fresh, "ScaleDown")
        .await
        .or_panic());
    assert!(api.get_opt("c-m1").await.or_panic().is_none());
}

#[tokio::test]
async fn a_member_deletion_refused_with_a_conflict_after_its_mark_leaves_no_mark_behind() {
    let api = one_member("markdel", "c-m2").await;
    let now = refused_after_the_mark(&api, "c-m2").await;
    assert!(now.metadata.deletion_timestamp.is_none());
    // A mark left behind would let a later stray `kubectl delete` through the member deletion
    // protection, and the finalizer would take the member out of etcd with its PVC.
    assert!(
        !now.annotations().contains_key(ALLOW_DELETION_ANNOTATION)
            && !now.annotations().contains_key(DELETION_PLANNED_ANNOTATION),
        "the refused deletion left its mark: {:?}",
        now.annotations()
    );

    // A user's own break-glass set before is theirs: only the operator's annotation goes.
    api.patch(
        "c-m2",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {ALLOW_DELETION_ANNOTATION: "true"}}})),
    )
    .await
    .or_panic();
    let now = refused_after_the_mark(&api, "c-m2").await;
    assert_eq!(
        now.annotations()
            .get(ALLOW_DELETION_ANNOTATION)
            .map(String::as_str),
        Some("true"),
        "the user's break-glass was removed"
    );
    assert!(!now.annotations().contains_key(DELETION_PLANNED_ANNOTATION));
}

/// The operator's deletion of member `name` marked, then refused with a 409; the member as it
/// is afterwards. The window between the mark and the delete (another writer, or the operator
/// dying) cannot be hit on purpose from here; a read whose UID the delete's precondition refuses
/// stands for it: the mark goes through (the read's resourceVersion is current) and the delete
/// is refused.
async fn refused_after_the_mark(api: &Api<EtcdMember>, name: &str) -> EtcdMember {
    let mut read = api.get(name).await.or_panic();
    read.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let result = delete_member_as_observed(api, &read, "ScaleDown").await;
    assert!(
        matches!(&result, Err(kube::Error::Api(e)) if e.code == 409),
        "the delete must be refused as a conflict, got {result:?}"
    );
    api.get(name).await.or_panic()
}

/// A namespace of its own on the shared apiserver (no operator runs) holding one EtcdMember,
/// `name`, of cluster `c`.
async fn one_member(namespace: &str, name: &str) -> Api<EtcdMember> {
    let cp = ControlPlane::builder()
        .with_crds()
        .shared()
        .await
        .or_panic();
    let ns = cp.namespace(namespace).await.or_panic();
    let api: Api<EtcdMember> = Api::namespaced(cp.client().or_panic(), &ns);
    let member: EtcdMember = serde_json::from_value(json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdMember",
        "metadata": {"name": name},
        "spec": {"clusterName": "c", "version": "3.6.11"},
    }))
    .or_panic();
    api.create(&PostParams::default(), &member).await.or_panic();
    api
}
