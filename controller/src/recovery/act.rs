//! The work of one recovery step: the patches and deletions the planner's [`Work`] names, each
//! announced as an Event on the EtcdRecovery.

use api::v1alpha2::{
    EtcdCluster, EtcdMember, EtcdRecovery, EtcdRecoveryStatus, FORCE_NEW_CLUSTER_ANNOTATION,
    RECOVERY_ANNOTATION, RESTORE_IN_PLACE_ANNOTATION,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::plan::Work;
use super::{snapshot, write};
use crate::context::Context;
use crate::deletion::delete_exactly;
use crate::events::{Action, Reason};
use crate::Error;

/// Do the work of the current step, announce it, and record what must be remembered.
pub(super) async fn act(
    ctx: &Context,
    ns: &str,
    api: &Api<EtcdRecovery>,
    recovery: &EtcdRecovery,
    status: &EtcdRecoveryStatus,
    cluster_name: &str,
    work: Work,
) -> Result<(), Error> {
    let name = recovery.name_any();
    let clusters: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), ns);
    let members: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), ns);
    let merge = |v: serde_json::Value| Patch::Merge(v);
    let params = PatchParams::default();
    let (action, note) = match work {
        Work::HoldCluster => {
            let patch = json!({"metadata": {"annotations": {RECOVERY_ANNOTATION: name}}});
            clusters.patch(cluster_name, &params, &merge(patch)).await?;
            (
                Action::Annotate,
                format!(
                    "set {RECOVERY_ANNOTATION}={name} on EtcdCluster {cluster_name}: the cluster \
                     controller holds every membership change"
                ),
            )
        }
        Work::StopMembers(names) => {
            let patch = json!({"spec": {"dormant": true}});
            for member in &names {
                members
                    .patch(member, &params, &merge(patch.clone()))
                    .await?;
            }
            (
                Action::SetDormant,
                format!(
                    "stopping members {}: dormant, their Pods are deleted and their PVCs kept",
                    names.join(", ")
                ),
            )
        }
        Work::StopDeleting(stopping) => {
            // The Pods of members being deleted: by name, only the one observed (a Pod of that
            // name with another UID is not the one the plan saw).
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            for (member, uid) in &stopping {
                delete_exactly(&pods, member, uid).await?;
            }
            let names: Vec<&str> = stopping.iter().map(|(m, _)| m.as_str()).collect();
            (
                Action::Delete,
                format!(
                    "stopping members {} that are being deleted: their Pods are deleted (their \
                     EtcdMembers only wait for their cleanup finalizer, which goes on once the \
                     cluster is rebuilt)",
                    names.join(", ")
                ),
            )
        }
        Work::ForceSurvivor(member) => {
            let patch = json!({
                "metadata": {"annotations": {FORCE_NEW_CLUSTER_ANNOTATION: name}},
                "spec": {"dormant": false},
            });
            members.patch(&member, &params, &merge(patch)).await?;
            (
                Action::WakeDormant,
                format!("starting {member} once with --force-new-cluster"),
            )
        }
        Work::RecordForcedPod(uid) => {
            let mut new = status.clone();
            new.forced_pod_uid = Some(uid.clone());
            write(api, recovery, &new).await?;
            (
                Action::Recover,
                format!("the survivor runs alone as a one-member cluster (Pod UID {uid})"),
            )
        }
        Work::UnforceSurvivor(member) => {
            let patch = json!({"metadata": {"annotations": {FORCE_NEW_CLUSTER_ANNOTATION: null}}});
            members.patch(&member, &params, &merge(patch)).await?;
            (
                Action::Annotate,
                format!("removed {FORCE_NEW_CLUSTER_ANNOTATION} from {member}"),
            )
        }
        Work::RestartPod { member, uid } => {
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            // Gone already, or another Pod by now: the forced one is not running.
            delete_exactly(&pods, &member, &uid).await?;
            (
                Action::RestartMember,
                format!("restarting {member} without --force-new-cluster"),
            )
        }
        Work::DeleteMembers(names) => {
            // Meant, as the cluster controller's own deletions: the member finalizer then
            // removes the member from etcd (the rebuilt cluster no longer lists it) and deletes
            // its PVC; without the mark it would keep the discarded data.
            for member in &names {
                crate::deletion::delete_member_as_meant(&members, member, "Recovery").await?;
            }
            (
                Action::DeleteMember,
                format!(
                    "deleting the discarded members {} with their PVCs; the cluster controller \
                     adds new ones",
                    names.join(", ")
                ),
            )
        }
        Work::RestoreInto(member) => {
            let plan = status.plan.clone().unwrap_or_default();
            let patch = match snapshot::mark_patch(ctx, ns, recovery, &plan).await {
                Ok(patch) => patch,
                Err(why) => {
                    tracing::warn!(recovery = %name, namespace = %ns, %why, "cannot mark the restore");
                    ctx.event(recovery, true, Reason::RecoveryStep, Action::Recover, why)
                        .await;
                    return Ok(());
                }
            };
            members.patch(&member, &params, &merge(patch)).await?;
            (
                Action::WakeDormant,
                format!(
                    "restoring {} into {member} as a one-member cluster (--bump-revision {}); \
                     its previous data is set aside on its PVC, the other members stay stopped \
                     with theirs",
                    super::plan::restored_of(&plan),
                    plan.bump_revision.unwrap_or_default()
                ),
            )
        }
        Work::LatchClusterId(id) => {
            let patch = json!({"status": {"clusterID": id}});
            clusters
                .patch_status(cluster_name, &params, &merge(patch))
                .await?;
            (
                Action::Recover,
                format!(
                    "the restored cluster answers with ID {id}: latched on EtcdCluster \
                     {cluster_name} (status.clusterID)"
                ),
            )
        }
        Work::UnmarkRestore(member) => {
            members
                .patch(&member, &params, &merge(snapshot::unmark_patch()))
                .await?;
            (
                Action::Annotate,
                format!("removed {RESTORE_IN_PLACE_ANNOTATION} and spec.restore from {member}"),
            )
        }
        Work::ReadPositions(names) => {
            let jobs = super::disk::start(ctx, ns, recovery, &names).await?;
            (
                Action::CreateJob,
                format!(
                    "reading the raft position of {} from their data dirs (their etcd does not \
                     run): position Jobs {}",
                    names.join(", "),
                    jobs.join(", ")
                ),
            )
        }
        Work::BuildPointInTime => {
            let note = super::point_in_time::start(ctx, ns, api, recovery).await?;
            (Action::CreateJob, note)
        }
        Work::RecordPointInTime(built) => {
            let mut new = status.clone();
            let note = format!(
                "built the cluster's state at revision {} from EtcdSnapshot {} (revision {}),                  {} recorded hash(es) matched, stored at {}: restoring it in place",
                built.revision.map_or_else(|| "?".into(), |r| r.to_string()),
                built.base,
                built.base_revision,
                built.hashes_proven.unwrap_or(0),
                built
                    .snapshot
                    .as_ref()
                    .and_then(|s| s.s3.as_ref())
                    .map_or_else(String::new, |s3| format!(
                        "s3://{}/{}",
                        s3.bucket,
                        s3.key.as_deref().unwrap_or_default()
                    )),
            );
            new.point_in_time = Some(*built);
            write(api, recovery, &new).await?;
            (Action::Recover, note)
        }
        Work::ReleaseCluster => {
            let patch = json!({"metadata": {"annotations": {RECOVERY_ANNOTATION: null}}});
            clusters.patch(cluster_name, &params, &merge(patch)).await?;
            (
                Action::Annotate,
                format!(
                    "removed {RECOVERY_ANNOTATION} from EtcdCluster {cluster_name}: the cluster \
                     controller adds the members back"
                ),
            )
        }
    };
    tracing::info!(recovery = %name, namespace = %ns, %note, "recovery step");
    ctx.event(recovery, false, Reason::RecoveryStep, action, note)
        .await;
    Ok(())
}
