//! The member's cleanup finalizer: for a deletion that is meant (the operator's own, or the
//! `allow-deletion` break-glass; never an operator mark written for another UID, see
//! [`labels::deletion_meant`]), MemberRemove against the remaining voters and then the PVC,
//! before the EtcdMember (and with it its Pod) goes; for any other deletion, nothing: the member
//! keeps its place in etcd and its PVC ([`super::plan::farewell`]). While an EtcdRecovery holds
//! the cluster with every voter stopped, a meant deletion waits for the member the recovery
//! rebuilds the cluster from ([`super::plan::remover`]); the recovery stops its Pod. It never
//! creates, stops or deletes a Pod, and never creates a PVC.

use std::collections::BTreeMap;
use std::time::Duration;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember, RECOVERY_ANNOTATION};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::claim::delete_claim;
use super::plan::{farewell, remover, Farewell, Remover};
use crate::context::Context;
use crate::etcd::access::{Access, User};
use crate::etcd::format_id;
use crate::events::{Action, Reason};
use crate::pods::pod_view;
use crate::topology;
use crate::Error;

/// How often a member deleted while an EtcdRecovery holds its cluster looks for the member the
/// recovery rebuilds the cluster from (the recovery sends the member controller no event).
const AWAIT_RECOVERY: Duration = Duration::from_secs(5);

/// The cleanup finalizer, as [`farewell`] decides: MemberRemove against the remaining voters and
/// then the PVC for a meant deletion; nothing for a stray one (the member keeps its place in etcd
/// and its PVC); nothing when the whole cluster is going away (nothing is left to remove from,
/// waiting would deadlock the deletion, and the cluster's own finalizer deletes the PVCs).
pub(super) async fn finalize(
    member: &EtcdMember,
    cluster: Option<&EtcdCluster>,
    ctx: &Context,
) -> Result<Requeue, Error> {
    let name = member.name_any();
    let ns = member.namespace().ok_or(Error::NoNamespace)?;
    let members: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    if !member
        .finalizers()
        .iter()
        .any(|f| f == labels::MEMBER_CLEANUP_FINALIZER)
    {
        return Ok(Requeue::await_change());
    }
    let cluster_going = match cluster {
        None => true,
        Some(c) => c.metadata.deletion_timestamp.is_some(),
    };
    // The operator's mark names the member it was written for: copied onto a member re-created
    // under the name (a GitOps tool, a restored backup) it means nothing for this one.
    let uid = member.uid().unwrap_or_default();
    let allowed = labels::deletion_meant(member.annotations(), &uid);
    match (
        farewell(cluster_going, allowed, member.spec.storage.is_memory()),
        cluster,
    ) {
        (Farewell::RemoveFromEtcd, Some(cluster)) => {
            match remove_from_etcd(member, cluster, ctx).await? {
                Removal::OutOfEtcd => {
                    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
                    delete_claim(member, &pvcs, ctx).await?;
                }
                Removal::Unknown => {}
                Removal::AwaitRecovery(recovery) => {
                    // Its Pod is the recovery's to stop; its MemberRemove and its PVC wait for the
                    // member the recovery rebuilds the cluster from.
                    tracing::info!(
                        member = %name,
                        %recovery,
                        "deleted member waits for EtcdRecovery {recovery} to rebuild the cluster before \
                         its finalizer removes it from etcd and deletes its PVC"
                    );
                    return Ok(Requeue::requeue(AWAIT_RECOVERY));
                }
            }
        }
        (Farewell::Keep, Some(cluster)) => {
            let without = match labels::deletion_planned_uid(member.annotations()) {
                Some(other) if labels::deletion_allowed(member.annotations()) => format!(
                    "with an {} annotation the operator wrote for another member (UID {other:?}, \
                     not {uid:?}: copied onto this one), which does not count",
                    labels::DELETION_PLANNED_ANNOTATION
                ),
                _ => format!(
                    "without the {} annotation",
                    labels::ALLOW_DELETION_ANNOTATION
                ),
            };
            let note = format!(
                "EtcdMember {name} was deleted {without}: it stays a member of etcd and its PVC \
                 {} is kept; while etcd lists it, the operator re-creates the EtcdMember on that \
                 data",
                labels::pvc_name(&name)
            );
            tracing::info!(member = %name, "{note}");
            ctx.event(
                cluster,
                true,
                Reason::MemberKeptInEtcd,
                Action::DeleteMember,
                note,
            )
            .await;
        }
        _ => {}
    }
    let finalizers: Vec<String> = member
        .finalizers()
        .iter()
        .filter(|f| *f != labels::MEMBER_CLEANUP_FINALIZER)
        .cloned()
        .collect();
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": member.resource_version()}});
    members
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(Requeue::await_change())
}

/// Where the member stands after [`remove_from_etcd`].
#[derive(Clone, Debug, PartialEq, Eq)]
enum Removal {
    /// Removed now, or etcd's member list (read from a voter) no longer has it: its data can
    /// never serve again.
    OutOfEtcd,
    /// No other voter to ask (the last member, or a cluster that never formed): nothing is
    /// known, the PVC is kept.
    Unknown,
    /// The cluster is held by this EtcdRecovery, which stopped the voters: the finalizer stays
    /// and looks again.
    AwaitRecovery(String),
}

async fn remove_from_etcd(
    member: &EtcdMember,
    cluster: &EtcdCluster,
    ctx: &Context,
) -> Result<Removal, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let cluster_name = cluster.name_any();
    let name = member.name_any();
    let members: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = ListParams::default().labels(&labels::cluster_selector(&cluster_name));
    let ready: BTreeMap<String, bool> = pods
        .list(&selector)
        .await?
        .items
        .iter()
        .map(|p| (p.name_any(), pod_view(p).ready))
        .collect();
    let other_voters: Vec<EtcdMember> = members
        .list(&selector)
        .await?
        .items
        .into_iter()
        .filter(|m| m.name_any() != name)
        .filter(|m| m.status.as_ref().is_some_and(|s| s.is_voter))
        .collect();
    let others: Vec<(String, bool)> = other_voters
        .iter()
        .map(|m| {
            let voter = m.name_any();
            let up = ready.get(&voter).copied().unwrap_or(false);
            (voter, up)
        })
        .collect();
    let held_by = cluster.annotations().get(RECOVERY_ANNOTATION);
    let through = match remover(&others, held_by.map(String::as_str)) {
        Remover::Voters(through) => through,
        Remover::NoOtherVoter => return Ok(Removal::Unknown),
        Remover::AwaitRecovery(recovery) => return Ok(Removal::AwaitRecovery(recovery)),
        Remover::Unavailable => return Err(Error::EtcdUnavailable),
    };
    let endpoints: Vec<String> = other_voters
        .iter()
        .filter(|m| through.contains(&m.name_any()))
        .map(|m| topology::client_url(m, cluster))
        .collect();
    // MemberRemove needs root once auth is on.
    let access = Access::load(&ctx.client, &ctx.metrics, cluster, User::Root).await?;
    let mut etcd = access.dial(&endpoints).await?;
    let (_, listed) = etcd.member_list().await?;
    if let Some(id) = topology::entry_of(member, cluster, &listed).map(|e| e.id) {
        match etcd.member_remove(id).await {
            Ok(()) => {
                tracing::info!(member = %name, id = %format_id(id), "removed member from etcd");
                let note = format!("removed {name} (ID {}) from etcd", format_id(id));
                ctx.event(
                    cluster,
                    false,
                    Reason::MemberRemoved,
                    Action::MemberRemove,
                    note.clone(),
                )
                .await;
                ctx.event(
                    member,
                    false,
                    Reason::MemberRemoved,
                    Action::MemberRemove,
                    note,
                )
                .await;
            }
            Err(e) if e.is_member_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Removal::OutOfEtcd)
}
