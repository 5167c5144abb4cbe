//! The operator's own deletion of an EtcdMember. Shared by the cluster controller (scale-down,
//! replacement) and the recovery controller (the discarded members).

use api::labels;
use api::v1alpha2::EtcdMember;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
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
