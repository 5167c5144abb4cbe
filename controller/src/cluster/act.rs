//! Performs the one step the cluster planner chose ([`Action`]): creates or deletes an
//! EtcdMember, adds or promotes a learner, latches the cluster ID, records or rolls what a
//! member runs, moves etcd's leader, with an Event for each a user would want to see. One
//! membership change per reconcile; it decides nothing (that is the planner's) and touches no
//! owned child (Services, PDB, volumes: see [`super::children`]).

use std::time::Duration;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::children;
use super::observe::Seen;
use super::plan::{self, Action, DataHome, DeleteReason, EtcdView, MemberView, Plan, Revision};
use crate::builders::pod::{INITIAL_CLUSTER_STATE_ANNOTATION, STATE_EXISTING};
use crate::context::Context;
use crate::etcd::format_id;
use crate::events::{Action as EventAction, Reason};
use crate::Error;
use crate::{naming, topology};

mod create;
mod record;

#[cfg(test)]
pub(super) use create::member_tls;
use create::{create_member, set_initial_cluster, Reattach};
use record::record;

/// What the step left for the rest of the reconcile.
pub(super) enum Acted {
    /// Go on (status, children); `latched` is the cluster ID just latched, `requeue` replaces
    /// the planned recheck when the step wants to look again sooner.
    Done {
        latched: Option<String>,
        requeue: Option<Requeue>,
    },
    /// etcd is not ready for the step yet: end this reconcile here and look again then.
    Stop(Requeue),
}

/// Perform `plan.action`.
pub(super) async fn act(
    cluster: &EtcdCluster,
    ctx: &Context,
    plan: &Plan,
    seen: &mut Seen,
) -> Result<Acted, Error> {
    let name = cluster.name_any();
    let members_api: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &seen.ns);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &seen.ns);
    let mut latched = None;
    let mut requeue = None;
    match &plan.action {
        Action::CreateSeed => {
            tracing::info!(cluster = %name, "bootstrapping single-node cluster");
            let seed = create_member(
                cluster,
                ctx,
                &plan.observed,
                true,
                seen.tls.trust_bundle.as_deref(),
                seen.tls.trusted_cas.as_deref(),
                None,
            )
            .await?;
            let seed_name = seed.name_any();
            let url = naming::peer_url(&seed_name, &name, &seen.ns, cluster.peer_https());
            set_initial_cluster(&members_api, &seed_name, &format!("{seed_name}={url}")).await?;
            ctx.event(
                cluster,
                false,
                Reason::Bootstrapping,
                EventAction::CreateSeed,
                format!("created seed member {seed_name}"),
            )
            .await;
        }
        Action::CreateMember => {
            let member = create_member(
                cluster,
                ctx,
                &plan.observed,
                false,
                seen.tls.trust_bundle.as_deref(),
                seen.tls.trusted_cas.as_deref(),
                None,
            )
            .await?;
            let member_name = member.name_any();
            let url = naming::peer_url(&member_name, &name, &seen.ns, cluster.peer_https());
            // Continue the same step at once; each part is recoverable if we crash in between.
            if let (
                Some(etcd),
                EtcdView::Members {
                    members: etcd_members,
                    ..
                },
            ) = (seen.etcd.as_mut(), &seen.etcd_view)
            {
                if let Err(e) = etcd.member_add_as_learner(&url).await {
                    if !e.is_reconfig_too_soon() && !e.is_too_many_learners() {
                        return Err(e.into());
                    }
                    // The member stays pending; the next reconcile completes the step.
                    tracing::info!(cluster = %name, member = %member_name, error = %e, "etcd accepts the next member later (5-second connection rule, or as many learners as a member allows); retrying in 1 s");
                    return Ok(Acted::Stop(Requeue::requeue(Duration::from_secs(1))));
                }
                tracing::info!(cluster = %name, member = %member_name, "added member as learner");
                let initial = plan::initial_cluster(etcd_members, &member_name, &url);
                set_initial_cluster(&members_api, &member_name, &initial).await?;
                ctx.event(
                    cluster,
                    false,
                    Reason::MemberAdded,
                    EventAction::MemberAddAsLearner,
                    format!("added {member_name} as a learner"),
                )
                .await;
            }
        }
        Action::CompletePending {
            member,
            peer_url,
            already_added,
            initial_cluster_after_add,
        } => {
            tracing::info!(cluster = %name, member = %member, "completing pending scale-up member before further action");
            if !already_added {
                let Some(etcd) = seen.etcd.as_mut() else {
                    return Err(Error::EtcdUnavailable);
                };
                if let Err(e) = etcd.member_add_as_learner(peer_url).await {
                    if !e.is_reconfig_too_soon() && !e.is_too_many_learners() {
                        return Err(e.into());
                    }
                    tracing::info!(cluster = %name, member = %member, error = %e, "etcd accepts the next member later (5-second connection rule, or as many learners as a member allows); retrying in 1 s");
                    return Ok(Acted::Stop(Requeue::requeue(Duration::from_secs(1))));
                }
                tracing::info!(cluster = %name, member = %member, "added member as learner");
                ctx.event(
                    cluster,
                    false,
                    Reason::MemberAdded,
                    EventAction::MemberAddAsLearner,
                    format!("added {member} as a learner"),
                )
                .await;
            }
            set_initial_cluster(&members_api, member, initial_cluster_after_add).await?;
        }
        Action::LatchClusterId {
            cluster_id,
            seed,
            member_id,
        } => {
            latched = Some(format_id(*cluster_id));
            children::patch_member_status(
                &members_api,
                seed,
                json!({"memberID": format_id(*member_id), "isVoter": true}),
            )
            .await?;
            // From now on no Pod may bootstrap a new cluster, even the seed after a data loss.
            let patch = json!({"metadata": {"annotations": {INITIAL_CLUSTER_STATE_ANNOTATION: STATE_EXISTING}}});
            if let Err(e) = pods_api
                .patch(seed, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(error = %e, "could not mark the seed Pod as existing; the member controller will retry");
            }
            ctx.event(
                cluster,
                false,
                Reason::ClusterDiscovered,
                EventAction::LatchClusterId,
                format!("cluster formed with ID {}", format_id(*cluster_id)),
            )
            .await;
            requeue = Some(Requeue::requeue(Duration::from_millis(200)));
        }
        Action::Promote { member, member_id } => {
            let Some(etcd) = seen.etcd.as_mut() else {
                return Err(Error::EtcdUnavailable);
            };
            match etcd.member_promote(*member_id).await {
                Ok(()) => {
                    tracing::info!(cluster = %name, member = %member, "promoted learner");
                    ctx.event(
                        cluster,
                        false,
                        Reason::MemberPromoted,
                        EventAction::MemberPromote,
                        format!("promoted {member} to voter"),
                    )
                    .await;
                    requeue = Some(Requeue::requeue(Duration::from_millis(200)));
                }
                Err(e) if e.is_learner_not_ready() => {
                    tracing::info!(cluster = %name, member = %member, "learner not yet promotable; will retry");
                    requeue = Some(Requeue::requeue(Duration::from_secs(1)));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Action::DeleteMember { member, why } => {
            let (reason, note) = match why {
                DeleteReason::ScaleDown => (Reason::ScalingDown, format!("removing member {member} (newest first)")),
                DeleteReason::Pause => (Reason::Pausing, format!("removing member {member} on the way to a pause")),
                DeleteReason::MemoryPodLost => (Reason::ReplacingMember, format!("member {member} lost its Pod and its tmpfs data; replacing it")),
                DeleteReason::CrashLooping => (Reason::ReplacingMember, format!("member {member} is crash-looping; replacing it while the others keep quorum")),
                DeleteReason::DataLost => (Reason::ReplacingMember, format!("member {member} lost its PVC and its data; removing it from etcd and replacing it, never restarting it on an empty volume under its old member ID")),
                DeleteReason::ReplaceAdopted => (Reason::ReplacingAdoptedMember, format!("replacing member {member}, adopted from the aenix operator, by a native one as {} asks", labels::REPLACE_ADOPTED_ANNOTATION)),
                DeleteReason::Rollout => (Reason::RollingRestart, format!("replacing Memory member {member} so that its successor runs the new CA bundle or spec (a Memory member cannot restart without losing its data)")),
                DeleteReason::Unschedulable | DeleteReason::NodeNotReady => (Reason::MemberReplaced, replaced_note(member, &seen.members.views, ctx)),
            };
            tracing::info!(cluster = %name, member = %member, reason = reason.reason(), "deleting member");
            // The operator's own deletion is meant: marked as such, its finalizer removes the
            // member from etcd and then deletes its PVC (a deletion without the mark keeps both).
            // Only the member as observed: the plan's facts can be seconds old by now (an etcd
            // call that timed out in between), and a member changed since (an EtcdRecovery
            // stopped it or restored a snapshot into it) is planned for again from a fresh read.
            let Some(observed) = seen.members.items.iter().find(|m| m.name_any() == *member) else {
                // Planned from views of these very members: not reached; plan again.
                return Ok(Acted::Stop(Requeue::requeue(Duration::from_millis(200))));
            };
            crate::deletion::delete_member_as_observed(&members_api, observed, why.name()).await?;
            if matches!(
                why,
                DeleteReason::Unschedulable | DeleteReason::NodeNotReady
            ) {
                // On the member too: the cluster's Events of one reason fold into one series,
                // and each replacement is to be found by the member it replaced.
                if let Some(m) = seen.members.items.iter().find(|m| m.name_any() == *member) {
                    ctx.event(m, true, reason, EventAction::DeleteMember, note.clone())
                        .await;
                }
            }
            ctx.event(
                cluster,
                matches!(
                    why,
                    DeleteReason::MemoryPodLost
                        | DeleteReason::CrashLooping
                        | DeleteReason::DataLost
                        | DeleteReason::Unschedulable
                        | DeleteReason::NodeNotReady
                ),
                reason,
                EventAction::DeleteMember,
                note,
            )
            .await;
        }
        Action::SetDormant { member, dormant } => {
            let patch = json!({"spec": {"dormant": dormant}});
            members_api
                .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            if *dormant {
                tracing::info!(cluster = %name, member = %member, "pausing: member is now dormant");
                ctx.event(
                    cluster,
                    false,
                    Reason::Paused,
                    EventAction::SetDormant,
                    format!("member {member} is dormant; its PVC keeps the data"),
                )
                .await;
            } else {
                tracing::info!(cluster = %name, member = %member, "waking dormant member");
                ctx.event(
                    cluster,
                    false,
                    Reason::Resumed,
                    EventAction::WakeDormant,
                    format!("waking dormant member {member}"),
                )
                .await;
            }
        }
        Action::ReattachMember {
            member,
            claim_uid,
            initial_cluster,
        } => {
            create_member(
                cluster,
                ctx,
                &plan.observed,
                false,
                seen.tls.trust_bundle.as_deref(),
                seen.tls.trusted_cas.as_deref(),
                Some(Reattach {
                    member,
                    claim_uid,
                    initial_cluster,
                }),
            )
            .await?;
            tracing::info!(cluster = %name, member = %member, "re-created a member on its kept PVC");
            ctx.event(
                cluster,
                false,
                Reason::MemberReattached,
                EventAction::Reattach,
                format!(
                    "re-created EtcdMember {member}, deleted without the {} annotation while \
                     etcd still lists it: it restarts on its PVC {} under its etcd member ID",
                    labels::ALLOW_DELETION_ANNOTATION,
                    labels::pvc_name(member)
                ),
            )
            .await;
            requeue = Some(Requeue::requeue(Duration::from_millis(200)));
        }
        Action::RemoveGhost(ghost) => {
            let Some(etcd) = seen.etcd.as_mut() else {
                return Err(Error::EtcdUnavailable);
            };
            let id = format_id(ghost.id);
            match etcd.member_remove(ghost.id).await {
                Ok(()) => {}
                Err(e) if e.is_member_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            tracing::info!(cluster = %name, member_id = %id, peer_url = %ghost.peer_url, "removed a ghost member from etcd");
            ctx.event(
                cluster,
                true,
                Reason::GhostMemberRemoved,
                EventAction::MemberRemove,
                format!(
                    "removed etcd member {id} ({}) that no EtcdMember describes",
                    ghost.peer_url
                ),
            )
            .await;
            requeue = Some(Requeue::requeue(Duration::from_millis(200)));
        }
        Action::Record {
            member,
            revision,
            value,
        } => {
            record(&pods_api, &members_api, seen, member, *revision, value).await?;
            tracing::info!(cluster = %name, member = %member, value = %value, "{}", match revision {
                Revision::TrustBundle => "recorded the CA bundle a member runs with",
                Revision::ImageRepository => "recorded the etcd image repository a member runs",
                Revision::Template => "recorded the template a member's Pod runs",
            });
            requeue = Some(Requeue::requeue(Duration::from_millis(200)));
        }
        Action::RollMember {
            member,
            trust_bundle,
            template,
            image_repository,
            last,
        } => {
            // One patch: the member controller sees the new bundle and template together and
            // restarts the Pod once.
            let current = seen
                .members
                .items
                .iter()
                .find(|m| m.name_any() == *member)
                .map(|m| m.spec.clone())
                .unwrap_or_default();
            let mut patch = if *template {
                crate::template::member_patch(&current, &plan.observed)
            } else {
                json!({})
            };
            let mut annotations = serde_json::Map::new();
            if let Some(trust) = trust_bundle {
                annotations.insert(labels::TRUST_BUNDLE_ANNOTATION.into(), json!(trust));
                if let Some(cas) = &seen.tls.trusted_cas {
                    annotations.insert(labels::TRUSTED_CAS_ANNOTATION.into(), json!(cas));
                }
            }
            if let Some(repository) = image_repository {
                annotations.insert(
                    labels::IMAGE_REPOSITORY_ANNOTATION.into(),
                    json!(repository),
                );
            }
            if !annotations.is_empty() {
                patch["metadata"] = json!({ "annotations": annotations });
            }
            members_api
                .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let role = if *last {
                "the last; a leader hands leadership over first"
            } else {
                "a follower"
            };
            let mut parts = Vec::new();
            if trust_bundle.is_some() {
                parts.push("the new CA bundle".to_string());
            }
            if *template {
                parts.push(format!("the new spec (version {})", plan.observed.version));
            }
            if let Some(repository) = image_repository {
                parts.push(format!("the etcd image repository {repository}"));
            }
            let what = parts.join(" and ");
            let counted = if *template {
                Revision::Template
            } else if trust_bundle.is_some() {
                Revision::TrustBundle
            } else {
                Revision::ImageRepository
            };
            let (done, total) = plan.facts.rollout(counted).unwrap_or_default();
            tracing::info!(cluster = %name, member = %member, done, total, "restarting member for {what}");
            ctx.event(
                cluster,
                false,
                Reason::RollingRestart,
                EventAction::RestartMember,
                format!(
                    "restarting member {member} ({role}) for {what}; {done} of {total} members \
                     are updated"
                ),
            )
            .await;
        }
        Action::MoveLeader { from, to, to_id } => {
            // MoveLeader is served by the leader only: dial it alone.
            let leader_member = seen.members.items.iter().find(|m| &m.name_any() == from);
            let Some(leader_member) = leader_member else {
                return Err(Error::EtcdUnavailable);
            };
            let url = topology::client_url(leader_member, cluster);
            let mut direct = seen.access.dial(&[url]).await?;
            direct.move_leader(*to_id).await?;
            tracing::info!(cluster = %name, from = %from, to = %to, "moved leadership before restarting the leader");
            ctx.event(
                cluster,
                false,
                Reason::LeaderMoved,
                EventAction::MoveLeader,
                format!("moved leadership from {from} to {to} before restarting {from}"),
            )
            .await;
            requeue = Some(Requeue::requeue(Duration::from_millis(500)));
        }
        Action::Wait(why) => {
            // The runbook's "key signals" are these messages, so they are logged at info.
            tracing::info!(cluster = %name, namespace = %seen.ns, "{why}");
        }
        Action::None => {}
    }
    Ok(Acted::Done { latched, requeue })
}

/// The `MemberReplaced` Event's message: where the member's data was, why it is out of reach
/// for good, and for how long.
fn replaced_note(member: &str, views: &[MemberView], ctx: &Context) -> String {
    let view = views.iter().find(|v| v.name == member);
    let scheduler = view
        .and_then(|v| v.pod.as_ref())
        .and_then(|p| p.unschedulable.as_ref())
        .map(|(_, m)| m.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "no reason given".to_string());
    let after = ctx
        .config
        .replace_broken_members_after
        .map(|d| humantime::format_duration(d).to_string())
        .unwrap_or_default();
    let why = match view.map(|v| &v.data_home) {
        Some(DataHome::NodeGone { node }) => format!(
            "its Pod could not be scheduled for {after} or more ({scheduler}): its volume is \
             pinned to Node {node}, which no longer exists"
        ),
        Some(DataHome::VolumeGone { volume }) => format!(
            "its Pod could not be scheduled for {after} or more ({scheduler}): its \
             PersistentVolume {volume} no longer exists"
        ),
        Some(DataHome::NodeNotReady { node, since }) => format!(
            "its Pod is stuck Terminating on Node {node}, NotReady since {since} ({after} or \
             more): the machine is gone although its Node object stays"
        ),
        _ => format!("its Pod could not be scheduled for {after} or more ({scheduler})"),
    };
    format!(
        "member {member}'s data is out of reach for good: {why}; removing it from etcd and \
         replacing it with a new member while the others keep quorum (its PVC goes with it). \
         Turn this off with the annotation {}=\"false\" or --replace-broken-members-after=0",
        labels::REPLACE_BROKEN_MEMBERS_ANNOTATION
    )
}

/// A member runs peer auto-TLS but the cluster's [`labels::PEER_AUTO_TLS_ANNOTATION`] is gone
/// (removed by hand): without it every peer URL would be computed as `http://`, which etcd does
/// not list, and new members could not join.
pub(super) fn needs_peer_auto_tls_restored(cluster: &EtcdCluster, members: &[EtcdMember]) -> bool {
    !cluster.peer_https()
        && members
            .iter()
            .any(|m| m.spec.tls.as_ref().is_some_and(|t| t.peer_auto_tls))
}

/// Set [`labels::PEER_AUTO_TLS_ANNOTATION`] back, with a Warning Event; the reconcile starts over.
pub(super) async fn restore_peer_auto_tls(
    cluster: &EtcdCluster,
    ctx: &Context,
) -> Result<Requeue, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({"metadata": {"annotations": {labels::PEER_AUTO_TLS_ANNOTATION: "true"}}});
    api.patch(
        &cluster.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    ctx.event(
        cluster,
        true,
        Reason::PeerAutoTlsRestored,
        EventAction::Annotate,
        format!(
            "members run etcd's --peer-auto-tls: the annotation {}=true was set back (etcd cannot \
             mix TLS and plaintext peers; see docs/migration.md)",
            labels::PEER_AUTO_TLS_ANNOTATION
        ),
    )
    .await;
    Ok(Requeue::requeue(Duration::from_millis(200)))
}
