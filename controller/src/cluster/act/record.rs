//! Recording what a member runs where nothing was recorded (a [`Revision`] annotation on its
//! Pod and on the member), so that it is not restarted only for lack of a record.

use api::labels;
use api::v1alpha2::EtcdMember;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use crate::cluster::observe::Seen;
use crate::cluster::plan::Revision;
use crate::Error;

/// Record `value` as the `revision` a member runs where nothing was recorded. A template only on
/// the Pod (the member's own is its spec); a trust bundle with the CA set it stands for.
pub(super) async fn record(
    pods_api: &Api<Pod>,
    members_api: &Api<EtcdMember>,
    seen: &Seen,
    member: &str,
    revision: Revision,
    value: &str,
) -> Result<(), Error> {
    let mut annotations = vec![(revision.annotation(), value)];
    match revision {
        Revision::Template => {
            let patch =
                json!({"metadata": {"annotations": {labels::TEMPLATE_HASH_ANNOTATION: value}}});
            pods_api
                .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            return Ok(());
        }
        Revision::TrustBundle => {
            // The CA set goes with the fingerprint; a fingerprint recorded as unknown (a Pod
            // that may run an older bundle) has an unknown set too.
            let cas = if value == crate::cluster::ca_set::UNKNOWN {
                Some(crate::cluster::ca_set::UNKNOWN)
            } else {
                seen.tls.trusted_cas.as_deref()
            };
            annotations.extend(cas.map(|c| (labels::TRUSTED_CAS_ANNOTATION, c)));
        }
        Revision::ImageRepository => {}
    }
    record_on_pod_then_member(
        pods_api,
        members_api,
        seen.members.pods.contains_key(member),
        member,
        &annotations,
    )
    .await
}

/// Record what a member's running Pod already runs with (an annotation) on the Pod, then on the
/// member. The Pod first: a crash in between leaves a member without a record, which records
/// again; the other order would leave a Pod the member controller restarts.
async fn record_on_pod_then_member(
    pods_api: &Api<Pod>,
    members_api: &Api<EtcdMember>,
    has_pod: bool,
    member: &str,
    annotations: &[(&str, &str)],
) -> Result<(), Error> {
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let patch = json!({"metadata": {"annotations": annotations}});
    if has_pod {
        pods_api
            .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    members_api
        .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
