//! The operator's own deletion of an EtcdMember. Shared by the cluster controller (scale-down,
//! replacement) and the recovery controller (the discarded members).

use api::labels;
use api::v1alpha2::EtcdMember;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;

/// Delete EtcdMember `name` as meant: first mark it with
/// [`labels::ALLOW_DELETION_ANNOTATION`] (the member deletion protection lets the operator's
/// marked deletion through, and the member's finalizer then removes it from etcd and deletes its
/// PVC; a deletion without the mark keeps both), then delete it. A member already gone is not
/// an error; `Ok(false)` says it was not there.
pub async fn delete_member_as_meant(
    api: &Api<EtcdMember>,
    name: &str,
) -> Result<bool, kube::Error> {
    let meant = json!({"metadata": {"annotations": {labels::ALLOW_DELETION_ANNOTATION: "true"}}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&meant))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
        Err(e) => return Err(e),
    }
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// [`delete_member_as_meant`] for a deletion decided from `observed`, the EtcdMember as the
/// caller read it: only while the member is still as read. The mark is a merge patch carrying
/// the read `resourceVersion` and the deletion is preconditioned on the member's UID and the
/// version the mark returned, so a member someone changed in between (an EtcdRecovery that
/// stopped it and restored a snapshot into it, while the caller's plan waited on an etcd call
/// that timed out) fails with a 409 Conflict and is left alone: the caller plans again from a
/// fresh read. A member already gone is `Ok(false)`.
pub async fn delete_member_as_observed(
    api: &Api<EtcdMember>,
    observed: &EtcdMember,
) -> Result<bool, kube::Error> {
    let name = observed.name_any();
    let meant = json!({"metadata": {
        "annotations": {labels::ALLOW_DELETION_ANNOTATION: "true"},
        "resourceVersion": observed.resource_version(),
    }});
    let marked = match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&meant))
        .await
    {
        Ok(marked) => marked,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
        Err(e) => return Err(e),
    };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: observed.uid(),
            resource_version: marked.resource_version(),
        }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}
