//! The operator's own deletion of an EtcdMember. Shared by the cluster controller (scale-down,
//! replacement) and the recovery controller (the discarded members).
//!
//! The mark the operator writes before its delete is two annotations:
//! [`labels::ALLOW_DELETION_ANNOTATION`] (which the member deletion protection and the member's
//! finalizer honour) and [`labels::DELETION_PLANNED_ANNOTATION`] (`<member UID>/<reason>`: what the
//! operator meant). A mark whose delete fails is removed at once ([`unmark`]); one left by an
//! operator that died in between is removed by the cluster controller once no plan stands
//! behind it.
//!
//! Also [`delete_exactly`], the delete of one object by name and UID that the cluster's cleanup
//! and the recovery's Pod deletions share.

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::EtcdMember;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

/// Delete `name` only while it is the object with `uid` (a UID precondition): `Ok(false)` when
/// it is gone already or the name now holds another object (404, 409).
pub async fn delete_exactly<K>(api: &Api<K>, name: &str, uid: &str) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Delete EtcdMember `name` as meant, for `reason` (the mark's
/// [`labels::DELETION_PLANNED_ANNOTATION`]): first mark it (the member deletion protection lets
/// the marked deletion through, and the member's finalizer then removes it from etcd and deletes
/// its PVC; a deletion without the mark keeps both), then delete it, preconditioned on the UID
/// the mark names. A member already gone is not an error; `Ok(false)` says it was not there. A
/// delete that fails leaves no mark.
pub async fn delete_member_as_meant(
    api: &Api<EtcdMember>,
    name: &str,
    reason: &str,
) -> Result<bool, kube::Error> {
    let Some(member) = api.get_opt(name).await? else {
        return Ok(false);
    };
    let uid = member.uid().unwrap_or_default();
    let meant = json!({"metadata": {"annotations": mark(&uid, reason)}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&meant))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
        Err(e) => return Err(e),
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: member.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    delete_marked(api, name, &params, member.annotations()).await
}

/// [`delete_member_as_meant`] for a deletion decided from `observed`, the EtcdMember as the
/// caller read it: only while the member is still as read. The mark is a merge patch carrying
/// the read `resourceVersion` and the deletion is preconditioned on the member's UID and the
/// version the mark returned, so a member someone changed in between (an EtcdRecovery that
/// stopped it and restored a snapshot into it, while the caller's plan waited on an etcd call
/// that timed out) fails with a 409 Conflict and is left alone, its mark removed again: the
/// caller plans again from a fresh read. A member already gone is `Ok(false)`.
pub async fn delete_member_as_observed(
    api: &Api<EtcdMember>,
    observed: &EtcdMember,
    reason: &str,
) -> Result<bool, kube::Error> {
    let name = observed.name_any();
    let uid = observed.uid().unwrap_or_default();
    let meant = json!({"metadata": {
        "annotations": mark(&uid, reason),
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
    delete_marked(api, &name, &params, observed.annotations()).await
}

/// The two annotations of the operator's mark.
fn mark(uid: &str, reason: &str) -> Value {
    json!({
        labels::ALLOW_DELETION_ANNOTATION: "true",
        labels::DELETION_PLANNED_ANNOTATION: labels::deletion_planned(uid, reason),
    })
}

/// The delete of a member just marked; when it fails (a 409 from its preconditions, or any
/// other error) the mark is removed again before the error is returned: a mark no deletion
/// followed would let a later stray delete through the protection. `before` are the member's
/// annotations as read before the mark, to keep a user's own break-glass.
async fn delete_marked(
    api: &Api<EtcdMember>,
    name: &str,
    params: &DeleteParams,
    before: &BTreeMap<String, String>,
) -> Result<bool, kube::Error> {
    match api.delete(name, params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => {
            unmark(api, name, before).await;
            Err(e)
        }
    }
}

/// Remove the operator's mark from member `name`, best effort (gone already is fine; a failure
/// is logged, and the cluster controller removes a mark no plan stands behind later).
/// `allow-deletion` stays when the member carried it before as a user's break-glass (without the
/// operator's own annotation).
async fn unmark(api: &Api<EtcdMember>, name: &str, before: &BTreeMap<String, String>) {
    let users_break_glass = labels::deletion_allowed(before)
        && !before.contains_key(labels::DELETION_PLANNED_ANNOTATION);
    let mut annotations = serde_json::Map::new();
    annotations.insert(labels::DELETION_PLANNED_ANNOTATION.into(), Value::Null);
    if !users_break_glass {
        annotations.insert(labels::ALLOW_DELETION_ANNOTATION.into(), Value::Null);
    }
    let patch = json!({"metadata": {"annotations": annotations}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            tracing::warn!(member = %name, error = %e, "could not remove the deletion mark of a deletion that failed; the cluster controller removes it once no plan stands behind it");
        }
    }
}
