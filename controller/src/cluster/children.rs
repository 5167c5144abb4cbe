//! The cluster's owned children, kept in shape every reconcile: the headless and client
//! Services, the voter PodDisruptionBudget, cert-manager Certificates, the members' volume size,
//! each member's etcd ID and voter flag, and the operator's deletion marks no plan stands behind
//! (removed, as [`super::marks`] decides). None of these is a membership change; an object in
//! the way that the cluster does not own is never adopted or changed (a conflict is reported).
//!
//! The Services and the PDB are compared with the watch caches first: a cached copy that is in
//! shape means nothing to do, with no read. Anything else is decided on a fresh read, as if there
//! were no cache: a cache only ever says "nothing to do" (see [`super::reconcile::caches`]).

use std::time::Duration;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember, EtcdMemberStatus, TlsSecrets};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::observe::Seen;
use super::plan::{self, EtcdView, Plan};
use super::reconcile::caches::Caches;
use super::{marks, volumes};
use crate::builders::{pdb, service};
use crate::context::{Context, FIELD_MANAGER};
use crate::etcd::format_id;
use crate::events::{Action, Reason};
use crate::naming;
use crate::Error;

/// cert-manager TLS: without cert-manager's API nothing is created (no Certificate, no seed);
/// with it, the Certificates are kept in shape before their Secrets are read. `true` when the
/// cluster asks for cert-manager Certificates and cert-manager is not installed.
pub(super) async fn ensure_certificates(
    cluster: &EtcdCluster,
    ctx: &Context,
) -> Result<bool, Error> {
    let wants_cert_manager = TlsSecrets::of(&cluster.name_any(), cluster.spec.tls.as_ref())
        .cert_manager()
        .next()
        .is_some();
    let missing = wants_cert_manager && !ctx.cert_manager.installed(&ctx.client).await?;
    if wants_cert_manager && !missing {
        crate::cert_manager::ensure_certificates(&ctx.client, cluster, &ctx.config.cluster_domain)
            .await?;
    }
    Ok(missing)
}

/// What [`keep_in_shape`] did that the reconcile needs to know.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// A PDB in the way was reported: retry after this.
    pub retry: Option<Requeue>,
    /// A member was patched (its status or its volume size).
    pub members_written: bool,
}

/// After the step: the members' etcd IDs and voter flags, their volume size, the voter PDB.
/// A PDB in the way is reported (an Event) and retried: [`Kept::retry`].
pub(super) async fn keep_in_shape(
    cluster: &EtcdCluster,
    ctx: &Context,
    caches: &Caches,
    plan: &Plan,
    seen: &Seen,
) -> Result<Kept, Error> {
    let mut kept = Kept::default();
    let members_api: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &seen.ns);
    let members = &seen.members.items;
    if let EtcdView::Members {
        members: etcd_members,
        ..
    } = &seen.etcd_view
    {
        kept.members_written |=
            sync_member_status(&members_api, cluster, members, etcd_members).await?;
    }
    let stale = marks::stale_marks(members, &plan.action, plan.hold.as_ref());
    kept.members_written |= remove_stale_marks(cluster, ctx, &members_api, &stale).await?;
    if let Some(size) = plan.observed.storage.as_ref().map(|s| &s.size) {
        kept.members_written |=
            grow_member_volumes(cluster, ctx, &members_api, members, size).await?;
    }
    let voters = match &seen.etcd_view {
        EtcdView::Members { members, .. } => {
            members.iter().filter(|m| !m.is_learner).count() as i32
        }
        _ => members
            .iter()
            .filter(|m| m.status.as_ref().is_some_and(|s| s.is_voter) && !m.spec.dormant)
            .count() as i32,
    };
    if let Some(conflict) = ensure_pdb(cluster, ctx, caches, voters, plan.observed.replicas).await?
    {
        // Not the operator's to touch; everything else goes on, and the PDB is retried.
        ctx.event(
            cluster,
            true,
            Reason::OwnershipConflict,
            Action::Reconcile,
            conflict,
        )
        .await;
        kept.retry = Some(Requeue::requeue(Duration::from_secs(5)));
    }
    Ok(kept)
}

/// Remove the operator's deletion mark (both annotations) from the members [`marks::stale_marks`]
/// found, each only as read (the patch carries its `resourceVersion`: a member marked again
/// since, by an EtcdRecovery or this controller's next plan, is left to the next reconcile).
/// `true` when a member was patched.
async fn remove_stale_marks(
    cluster: &EtcdCluster,
    ctx: &Context,
    members_api: &Api<EtcdMember>,
    stale: &[&EtcdMember],
) -> Result<bool, Error> {
    let mut patched = false;
    for m in stale {
        let name = m.name_any();
        let planned = m
            .annotations()
            .get(labels::DELETION_PLANNED_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let patch = json!({"metadata": {
            "annotations": {
                labels::ALLOW_DELETION_ANNOTATION: null,
                labels::DELETION_PLANNED_ANNOTATION: null,
            },
            "resourceVersion": m.resource_version(),
        }});
        match members_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => patched = true,
            // Changed or gone since the read: judged again from the next one.
            Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409) => continue,
            Err(e) => return Err(e.into()),
        }
        let note = format!(
            "removed the deletion mark ({}, {}={planned}) from EtcdMember {name}: no plan \
             deletes it any longer (its deletion was refused, or the operator stopped before \
             it), so the member deletion protection guards it again",
            labels::ALLOW_DELETION_ANNOTATION,
            labels::DELETION_PLANNED_ANNOTATION
        );
        tracing::info!(cluster = %cluster.name_any(), member = %name, "{note}");
        ctx.event(
            cluster,
            true,
            Reason::DeletionMarkRemoved,
            Action::Annotate,
            note,
        )
        .await;
    }
    Ok(patched)
}

/// Give every PVC member whose `spec.storage.size` is below the latched target the target size;
/// the member controller then expands its PVC online (no restart, so all at once). `true` when
/// a member was patched.
async fn grow_member_volumes(
    cluster: &EtcdCluster,
    ctx: &Context,
    members_api: &Api<EtcdMember>,
    members: &[EtcdMember],
    size: &Quantity,
) -> Result<bool, Error> {
    let grow = volumes::members_to_grow(members, size);
    if grow.is_empty() {
        return Ok(false);
    }
    let patch = json!({"spec": {"storage": {"size": size}}});
    for m in &grow {
        members_api
            .patch(
                &m.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    let names: Vec<String> = grow.iter().map(|m| m.name_any()).collect();
    tracing::info!(cluster = %cluster.name_any(), size = %size.0, members = ?names, "growing member volumes");
    ctx.event(
        cluster,
        false,
        Reason::VolumeExpansion,
        Action::ExpandVolume,
        format!(
            "spec.storage.size is {}: the PVCs of {} grow online, without restarts",
            size.0,
            names.join(", ")
        ),
    )
    .await;
    Ok(true)
}

/// Record each member's etcd ID and voter flag (matched by peer URL) when they changed. `true`
/// when a member was patched.
async fn sync_member_status(
    api: &Api<EtcdMember>,
    cluster: &EtcdCluster,
    members: &[EtcdMember],
    etcd_members: &[plan::EtcdMemberInfo],
) -> Result<bool, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let mut patched = false;
    for m in members
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
    {
        let name = m.name_any();
        let url = naming::peer_url(&name, &naming::member_service(m), &ns, cluster.peer_https());
        let Some(entry) = etcd_members
            .iter()
            .find(|e| e.peer_urls.iter().any(|u| u == &url))
        else {
            continue;
        };
        let current = m.status.clone().unwrap_or_default();
        let want = EtcdMemberStatus {
            member_id: Some(format_id(entry.id)),
            is_voter: !entry.is_learner,
            ..current.clone()
        };
        if want != current {
            patch_member_status(
                api,
                &name,
                json!({"memberID": want.member_id, "isVoter": want.is_voter}),
            )
            .await?;
            patched = true;
        }
    }
    Ok(patched)
}

/// Merge `fields` into a member's status.
pub(super) async fn patch_member_status(
    api: &Api<EtcdMember>,
    member: &str,
    fields: serde_json::Value,
) -> Result<(), Error> {
    api.patch_status(
        member,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": fields})),
    )
    .await?;
    Ok(())
}

/// Keep the headless and client Services in shape: create them, put back what was edited that
/// members and clients depend on; one the cluster does not own is a conflict, never adopted.
pub(super) async fn ensure_services(
    cluster: &EtcdCluster,
    ctx: &Context,
    caches: &Caches,
) -> Result<(), Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    for svc in [
        service::headless_service(cluster)?,
        service::client_service(cluster)?,
    ] {
        let name = svc.name_any();
        let cached = caches.service(&ns, &name);
        if service_in_shape(cached.as_deref(), &svc, cluster.uid().as_deref()) {
            continue;
        }
        match api.get_opt(&name).await? {
            None => {
                api.create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..Default::default()
                    },
                    &svc,
                )
                .await?;
            }
            Some(have) if crate::controller_uid(&have) != cluster.uid() => {
                return Err(Error::Conflict(format!(
                    "Service {name} exists but is not owned by EtcdCluster {}; it is never adopted \
                     (it could route to other Pods): delete or rename it",
                    cluster.name_any()
                )));
            }
            Some(have) if service::drifted(&have, &svc) => {
                // Someone edited what members and clients depend on (selector, ports,
                // publishNotReadyAddresses): put it back.
                let mut body = serde_json::to_value(&svc)?;
                body["apiVersion"] = json!("v1");
                body["kind"] = json!("Service");
                api.patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await?;
                tracing::info!(cluster = %cluster.name_any(), service = %name, "restored a drifted Service");
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Safety rule "a cache only says nothing to do", for a Service: the cached copy is the
/// cluster's own and carries what members and clients depend on. Anything else (missing, not
/// the cluster's, drifted) is decided on a fresh read.
pub(super) fn service_in_shape(
    cached: Option<&Service>,
    want: &Service,
    owner: Option<&str>,
) -> bool {
    cached.is_some_and(|have| {
        owner.is_some()
            && crate::controller_uid(have).as_deref() == owner
            && !service::drifted(have, want)
    })
}

/// Safety rule "a cache only says nothing to do", for the voter PDB: no PDB is wanted and none is
/// cached, or the cached one is the cluster's own with the wanted budget. Anything else is
/// decided on a fresh read. (A PDB of someone else's without the operator's labels is never in
/// the cache; it is found by the fresh read when a PDB is wanted.)
pub(super) fn pdb_in_shape(
    cached: Option<&PodDisruptionBudget>,
    want: Option<&PodDisruptionBudget>,
    owner: Option<&str>,
) -> bool {
    match (cached, want) {
        (None, None) => true,
        (Some(have), Some(want)) => {
            owner.is_some()
                && crate::controller_uid(have).as_deref() == owner
                && pdb_same(have, want)
        }
        _ => false,
    }
}

/// The PDB has the wanted budget, selector and labels.
fn pdb_same(have: &PodDisruptionBudget, want: &PodDisruptionBudget) -> bool {
    have.spec.as_ref().map(|s| (&s.min_available, &s.selector))
        == want.spec.as_ref().map(|s| (&s.min_available, &s.selector))
        && want
            .labels()
            .iter()
            .all(|(k, v)| have.labels().get(k) == Some(v))
}

/// Keep the voter PDB in shape. A PDB of the same name that the EtcdCluster does not own is
/// never changed or deleted (it may protect someone else's Pods): the conflict is returned.
async fn ensure_pdb(
    cluster: &EtcdCluster,
    ctx: &Context,
    caches: &Caches,
    voters: i32,
    target: i32,
) -> Result<Option<String>, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    let wanted = pdb::voter_pdb(cluster, voters, target)?;
    let cached = caches.pdb(&ns, &name);
    if pdb_in_shape(cached.as_deref(), wanted.as_ref(), cluster.uid().as_deref()) {
        return Ok(None);
    }
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = api.get_opt(&name).await?;
    if let Some(have) = &existing {
        if crate::controller_uid(have) != cluster.uid() {
            return Ok(Some(format!(
                "PodDisruptionBudget {name} exists but is not owned by EtcdCluster {name}; it is \
                 never adopted, changed or deleted (it may guard other Pods): delete or rename it \
                 so the operator can create the voter PDB"
            )));
        }
    }
    match wanted {
        None => {
            if existing.is_some() {
                api.delete(&name, &DeleteParams::default()).await?;
            }
        }
        Some(want) => {
            let same = existing.as_ref().is_some_and(|have| pdb_same(have, &want));
            if !same {
                let pp = PatchParams::apply(FIELD_MANAGER).force();
                let mut want = want;
                want.metadata.managed_fields = None;
                let body = serde_json::to_value(&want)?;
                let mut body = body;
                body["apiVersion"] = json!("policy/v1");
                body["kind"] = json!("PodDisruptionBudget");
                api.patch(&name, &pp, &Patch::Apply(&body)).await?;
            }
        }
    }
    Ok(None)
}
