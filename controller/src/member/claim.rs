//! The member's PVC: creating it, adopting it (the UID mark in place of an EtcdMember owner
//! reference, or the claim a re-created member re-attaches to; whose it is is
//! [`crate::builders::pvc::claim_of`]'s), deleting it once the member is out of etcd, whether
//! its StorageClass binds at once, and growing it to `spec.storage.size` (the `VolumeExpanded`
//! condition). What to grow to is `crate::volume`'s pure plan; this file only reads the claim
//! and its class and patches. It never touches the Pod or etcd.

use std::time::Duration;

use api::conditions::{member as mtype, reason};
use api::labels;
use api::v1alpha2::EtcdMember;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::builders::pvc::{claim_of, cluster_uid, member_pvc, ClaimOwner};
use crate::conditions::set_condition;
use crate::context::{Context, FIELD_MANAGER};
use crate::events::{Action, Reason};
use crate::volume;
use crate::Error;

/// How often a member whose PVC cannot grow looks at its StorageClass again (an edit of the
/// class sends no event the member controller watches).
pub(super) const VOLUME_RECHECK: Duration = Duration::from_secs(60);

/// Raise the bound claim's request to `spec.storage.size` when it grew and the StorageClass
/// allows it, and set the `VolumeExpanded` condition (see [`volume`]). Whether to look again
/// later.
pub(super) async fn grow_claim(
    member: &EtcdMember,
    claim: &PersistentVolumeClaim,
    pvcs: &Api<PersistentVolumeClaim>,
    ctx: &Context,
    conditions: &mut Vec<Condition>,
    generation: Option<i64>,
    now: Timestamp,
) -> Result<bool, Error> {
    let want = &member.spec.storage.size;
    let pvc = claim.name_any();
    let spec = claim.spec.as_ref();
    let requested = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    let capacity = claim
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    let class = spec
        .and_then(|s| s.storage_class_name.as_deref())
        .filter(|c| !c.is_empty());
    let class_allows = match class {
        Some(class) if volume::request_short(want, requested) => {
            Api::<StorageClass>::all(ctx.client.clone())
                .get_opt(class)
                .await?
                .map(|sc| sc.allow_volume_expansion == Some(true))
        }
        _ => None,
    };
    let had = conditions
        .iter()
        .find(|c| c.type_ == mtype::VOLUME_EXPANDED)
        .cloned();
    let mut growth = volume::plan(
        want,
        &volume::ClaimFacts {
            pvc: &pvc,
            requested,
            capacity,
            class,
            class_allows,
            had_condition: had.is_some(),
        },
    );
    if let Some(size) = &growth.request {
        let patch = json!({"spec": {"resources": {"requests": {"storage": size}}}});
        match pvcs
            .patch(&pvc, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                ctx.event(
                    member,
                    false,
                    Reason::VolumeExpansionRequested,
                    Action::ExpandVolume,
                    format!(
                        "raised PVC {pvc}'s request from {} to {} for spec.storage.size; the \
                         volume grows online",
                        requested.map(|q| q.0.as_str()).unwrap_or("no size"),
                        size.0
                    ),
                )
                .await;
            }
            // Admission refusing the resize (the class or the claim does not allow it).
            Err(kube::Error::Api(e)) if matches!(e.code, 403 | 422) => {
                growth.condition = Some((
                    false,
                    reason::VOLUME_EXPANSION_FAILED,
                    format!(
                        "the API server refused to expand PVC {pvc} to {}: {}",
                        size.0, e.message
                    ),
                ));
                growth.recheck = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some((status, why, message)) = growth.condition {
        if status && had.as_ref().is_some_and(|c| c.status != "True") {
            ctx.event(
                member,
                false,
                Reason::VolumeExpanded,
                Action::ExpandVolume,
                message.clone(),
            )
            .await;
        }
        set_condition(
            conditions,
            mtype::VOLUME_EXPANDED,
            status,
            why,
            message,
            generation,
            now,
        );
    }
    Ok(growth.recheck)
}

/// Whether a claim's StorageClass binds at once (`Immediate`, the Kubernetes default). With
/// `WaitForFirstConsumer`, or a class that cannot be read, the Pod must come first.
pub(super) async fn binds_immediately(claim: &PersistentVolumeClaim, ctx: &Context) -> bool {
    let Some(class) = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
    else {
        return false;
    };
    let classes: Api<StorageClass> = Api::all(ctx.client.clone());
    match classes.get_opt(&class).await {
        Ok(Some(sc)) => sc.volume_binding_mode.as_deref().unwrap_or("Immediate") == "Immediate",
        _ => false,
    }
}

pub(super) async fn create_pvc(
    member: &EtcdMember,
    pvcs: &Api<PersistentVolumeClaim>,
    ctx: &Context,
) -> Result<(), Error> {
    let Some(want) = member_pvc(member)? else {
        return Ok(());
    };
    let pvc_name = want.name_any();
    pvcs.create(
        &PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        },
        &want,
    )
    .await?;
    ctx.event(
        member,
        false,
        Reason::PvcCreated,
        Action::Create,
        format!("created PVC {pvc_name} for the member's data"),
    )
    .await;
    Ok(())
}

/// Make `claim` the member's as this operator keeps them: its UID mark and its cluster's, no
/// EtcdMember owner reference (whose garbage collection would take the data with the member object). For a claim
/// under an owner reference (an older version of this operator's, the reference operator's) or
/// one a re-created member re-attaches to; a claim of another member is an error and is left
/// alone. Returns the claim as it now is.
pub(super) async fn adopt_claim(
    member: &EtcdMember,
    claim: PersistentVolumeClaim,
    pvcs: &Api<PersistentVolumeClaim>,
    ctx: &Context,
) -> Result<PersistentVolumeClaim, Error> {
    let owner = claim_of(&claim, member);
    let pvc = claim.name_any();
    let uid = member.uid().unwrap_or_default();
    let cluster_uid = cluster_uid(member);
    let why = match owner {
        ClaimOwner::Member => return record_cluster(member, claim, cluster_uid, pvcs).await,
        ClaimOwner::Foreign => {
            return Err(Error::Conflict(format!(
                "PVC {pvc} exists but is not this EtcdMember's (another member's UID or none \
                 in its {} annotation, or another owner); it is never adopted: waiting for it \
                 to go",
                labels::MEMBER_UID_ANNOTATION
            )))
        }
        ClaimOwner::OwnedByReference => format!(
            "PVC {pvc} no longer has the EtcdMember as its owner; it is marked with the \
             member's UID instead, so deleting the EtcdMember object never takes the data"
        ),
        ClaimOwner::Reattach => format!(
            "re-attached PVC {pvc}, kept when the member's previous EtcdMember object was \
             deleted; the member restarts on its data under its etcd member ID"
        ),
    };
    let kept: Vec<_> = claim
        .owner_references()
        .iter()
        .filter(|o| o.kind != "EtcdMember")
        .cloned()
        .collect();
    let patch = json!({"metadata": {
        "ownerReferences": if kept.is_empty() { serde_json::Value::Null } else { json!(kept) },
        "annotations": {
            labels::MEMBER_UID_ANNOTATION: uid,
            labels::CLUSTER_UID_ANNOTATION: cluster_uid,
        },
        "resourceVersion": claim.resource_version(),
    }});
    let adopted = pvcs
        .patch(&pvc, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    tracing::info!(member = %member.name_any(), pvc = %pvc, "{why}");
    ctx.event(member, false, Reason::PvcAdopted, Action::Adopt, why)
        .await;
    Ok(adopted)
}

/// A claim of the member's without [`labels::CLUSTER_UID_ANNOTATION`] (created or adopted by an
/// operator before the mark): the mark of the member's cluster, recorded once, so that the
/// cluster's cleanup finalizer knows the claim for its own incarnation's (see
/// `cluster::cleanup`). Returns the claim as it now is.
async fn record_cluster(
    member: &EtcdMember,
    claim: PersistentVolumeClaim,
    cluster_uid: Option<String>,
    pvcs: &Api<PersistentVolumeClaim>,
) -> Result<PersistentVolumeClaim, Error> {
    let Some(cluster_uid) = cluster_uid else {
        return Ok(claim);
    };
    if claim
        .annotations()
        .contains_key(labels::CLUSTER_UID_ANNOTATION)
        || claim.metadata.deletion_timestamp.is_some()
    {
        return Ok(claim);
    }
    let patch = json!({"metadata": {
        "annotations": {labels::CLUSTER_UID_ANNOTATION: cluster_uid},
        "resourceVersion": claim.resource_version(),
    }});
    let pvc = claim.name_any();
    let marked = pvcs
        .patch(&pvc, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    tracing::info!(member = %member.name_any(), pvc = %pvc, cluster_uid = %cluster_uid, "recorded the cluster's UID on the member's PVC");
    Ok(marked)
}

/// Delete the member's PVC, the member being out of etcd (its data can never serve again):
/// only the claim that is this member's (its UID mark or its owner reference), and only the
/// version read (a precondition on its UID). Gone already is done.
pub(super) async fn delete_claim(
    member: &EtcdMember,
    pvcs: &Api<PersistentVolumeClaim>,
    ctx: &Context,
) -> Result<(), Error> {
    let pvc = labels::pvc_name(&member.name_any());
    let Some(claim) = pvcs.get_opt(&pvc).await? else {
        return Ok(());
    };
    if !matches!(
        claim_of(&claim, member),
        ClaimOwner::Member | ClaimOwner::OwnedByReference
    ) || claim.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: claim.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match pvcs.delete(&pvc, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    ctx.event(
        member,
        false,
        Reason::PvcDeleted,
        Action::Delete,
        format!("deleted PVC {pvc}: the member is out of etcd, its data can never serve again"),
    )
    .await;
    Ok(())
}
