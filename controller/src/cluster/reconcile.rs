//! The EtcdCluster reconciler's I/O shell: observe (fresh lists of members and Pods, etcd's member
//! list through voters), call the planner, perform its one action, keep the Services and PDB in
//! shape, and write status only when it changed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember, EtcdMemberSpec, EtcdMemberStatus};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::plan::{self, Action, DeleteReason, EtcdView, MemberView, Observed, PodView};
use super::status;
use crate::builders::{pdb, pod::INITIAL_CLUSTER_STATE_ANNOTATION, pod::STATE_EXISTING, service};
use crate::context::{Context, FIELD_MANAGER};
use crate::etcd::{format_id, Etcd};
use crate::naming;
use crate::Error;

/// How often a formed cluster's membership and health are re-checked: etcd can change without a
/// Kubernetes event (a member falls out of quorum, a learner catches up).
pub const HEALTH_RECHECK: Duration = Duration::from_secs(30);

pub async fn reconcile(cluster: Arc<EtcdCluster>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = Instant::now();
    let result = match fresh_cluster(&cluster, &ctx).await {
        Ok(Some(fresh)) => reconcile_inner(&fresh, &ctx).await,
        Ok(None) => Ok(Requeue::await_change()),
        Err(e) => Err(e),
    };
    ctx.metrics
        .observe_reconcile("etcdcluster", started.elapsed());
    if let Err(e) = &result {
        ctx.metrics.count_error("etcdcluster", e.metric_label());
        if let Error::Conflict(why) = e {
            // Only a person can resolve it (an object in the way); say so where they look.
            ctx.event(
                cluster.as_ref(),
                true,
                "OwnershipConflict",
                "Reconcile",
                why.clone(),
            )
            .await;
        }
    }
    result
}

/// The cluster as the API has it now, not as the watch cache last saw it: the cache can lag
/// behind this operator's own status writes, and planning from a stale `status.observed` acts on
/// an old target (it removed the member the previous reconcile had just added for the new one).
async fn fresh_cluster(cluster: &EtcdCluster, ctx: &Context) -> Result<Option<EtcdCluster>, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    Ok(api.get_opt(&cluster.name_any()).await?)
}

pub fn error_policy(_cluster: Arc<EtcdCluster>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(%error, "EtcdCluster reconcile failed");
    Requeue::requeue(Duration::from_secs(5))
}

/// Members that belong to this incarnation of the cluster (a recreated cluster of the same name
/// must not adopt members of the previous one that are still being garbage-collected).
fn owned_by(obj: &impl Resource, owner_uid: &str) -> bool {
    crate::controller_uid(obj).as_deref() == Some(owner_uid)
}

pub fn pod_view(pod: &Pod) -> PodView {
    let status = pod.status.as_ref();
    let etcd = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "etcd"));
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        && pod.metadata.deletion_timestamp.is_none();
    PodView {
        uid: pod.uid().unwrap_or_default(),
        ready,
        restart_count: etcd.map(|c| c.restart_count).unwrap_or(0),
        oom_killed: etcd
            .and_then(|c| c.last_state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled")),
    }
}

fn member_view(m: &EtcdMember, pods: &BTreeMap<String, &Pod>) -> MemberView {
    let name = m.name_any();
    MemberView {
        created: m
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
        deleting: m.metadata.deletion_timestamp.is_some(),
        bootstrap: m.spec.bootstrap,
        dormant: m.spec.dormant,
        pending: m.spec.initial_cluster.is_empty(),
        memory: m.spec.storage.is_memory(),
        recorded_pod_uid: m.status.as_ref().and_then(|s| s.pod_uid.clone()),
        pod: pods.get(&name).map(|p| pod_view(p)),
        name,
    }
}

/// Client URLs of members that can answer membership calls: voters (never learners) whose Pod is
/// Ready; before the cluster has formed, the seed.
fn voter_endpoints(
    cluster: &EtcdCluster,
    members: &[EtcdMember],
    views: &[MemberView],
    formed: bool,
) -> Vec<String> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let client_tls = cluster.spec.client_tls();
    members
        .iter()
        .zip(views)
        .filter(|(m, v)| {
            let ready = v.pod.as_ref().is_some_and(|p| p.ready) && !v.deleting;
            let voter = m.status.as_ref().is_some_and(|s| s.is_voter);
            ready && (voter || (!formed && m.spec.bootstrap))
        })
        .map(|(m, _)| naming::client_url(&m.name_any(), &name, &ns, client_tls))
        .collect()
}

async fn reconcile_inner(cluster: &EtcdCluster, ctx: &Context) -> Result<Requeue, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        // Owner references garbage-collect everything; member finalizers see the deletion.
        return Ok(Requeue::await_change());
    }
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    let uid = cluster.uid().ok_or(Error::NoUid)?;
    let client = ctx.client.clone();
    let members_api: Api<EtcdMember> = Api::namespaced(client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = ListParams::default().labels(&labels::cluster_selector(&name));

    // Fresh lists, not caches: a member created by the previous reconcile must be seen, or a
    // lagging cache would make this one create a second.
    let members: Vec<EtcdMember> = members_api
        .list(&selector)
        .await?
        .items
        .into_iter()
        .filter(|m| owned_by(m, &uid))
        .collect();
    let pods = pods_api.list(&selector).await?.items;
    let pods_by_name: BTreeMap<String, &Pod> = pods.iter().map(|p| (p.name_any(), p)).collect();
    let views: Vec<MemberView> = members
        .iter()
        .map(|m| member_view(m, &pods_by_name))
        .collect();

    ensure_services(cluster, ctx).await?;

    let formed = cluster
        .status
        .as_ref()
        .is_some_and(|s| s.cluster_id.is_some());
    let endpoints = voter_endpoints(cluster, &members, &views, formed);
    let mut etcd = None;
    let etcd_view = if endpoints.is_empty() {
        EtcdView::NotAsked
    } else {
        match Etcd::connect(&endpoints, ctx.metrics.clone()).await {
            Ok(mut client) => {
                let view = match client.member_list().await {
                    Ok((cluster_id, members)) => EtcdView::Members {
                        cluster_id,
                        members,
                    },
                    Err(e) => EtcdView::Unreachable(e.stable_message()),
                };
                etcd = Some(client);
                view
            }
            Err(e) => EtcdView::Unreachable(e.stable_message()),
        }
    };

    let now = Timestamp::now();
    let plan = plan::plan(&Observed {
        cluster,
        members: views.clone(),
        etcd: etcd_view.clone(),
        now,
        cert_manager_missing: false,
    });
    tracing::debug!(cluster = %name, namespace = %ns, action = ?plan.action, phase = ?plan.phase, "planned");

    let mut requeue = match (&plan.phase, formed) {
        (plan::Phase::Reconciled, true) if plan.observed.replicas > 0 => {
            Requeue::requeue(HEALTH_RECHECK)
        }
        (plan::Phase::Progressing, true) => Requeue::requeue(HEALTH_RECHECK),
        _ => Requeue::await_change(),
    };
    let mut latched = None;

    // Persist a newly locked target before acting on it: if this action fails or the operator
    // dies half-way, the next reconcile must resume the step towards the same target, not keep
    // the old one and undo the step (a member created for 5 replicas removed again as surplus).
    let status_api: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    let mut stored = cluster.status.clone();
    if plan.locked_because.is_some() && !matches!(plan.action, Action::None | Action::Wait(_)) {
        let locked = status::render(cluster, &plan, None, now);
        let patch = json!({"status": status_merge_patch(stored.as_ref(), &locked)?});
        status_api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        stored = Some(locked);
    }

    match &plan.action {
        Action::CreateSeed => {
            tracing::info!(cluster = %name, "bootstrapping single-node cluster");
            let seed = create_member(cluster, ctx, &plan.observed.version, true).await?;
            let seed_name = seed.name_any();
            let url = naming::peer_url(&seed_name, &name, &ns, cluster.spec.peer_tls());
            set_initial_cluster(&members_api, &seed_name, &format!("{seed_name}={url}")).await?;
            ctx.event(
                cluster,
                false,
                "Bootstrapping",
                "CreateSeed",
                format!("created seed member {seed_name}"),
            )
            .await;
        }
        Action::CreateMember => {
            let member = create_member(cluster, ctx, &plan.observed.version, false).await?;
            let member_name = member.name_any();
            let url = naming::peer_url(&member_name, &name, &ns, cluster.spec.peer_tls());
            // Continue the same step at once; each part is recoverable if we crash in between.
            if let (
                Some(etcd),
                EtcdView::Members {
                    members: etcd_members,
                    ..
                },
            ) = (etcd.as_mut(), &etcd_view)
            {
                etcd.member_add_as_learner(&url).await?;
                tracing::info!(cluster = %name, member = %member_name, "added member as learner");
                let initial = plan::initial_cluster(etcd_members, &member_name, &url);
                set_initial_cluster(&members_api, &member_name, &initial).await?;
                ctx.event(
                    cluster,
                    false,
                    "MemberAdded",
                    "MemberAddAsLearner",
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
                let Some(etcd) = etcd.as_mut() else {
                    return Err(Error::EtcdUnavailable);
                };
                etcd.member_add_as_learner(peer_url).await?;
                tracing::info!(cluster = %name, member = %member, "added member as learner");
                ctx.event(
                    cluster,
                    false,
                    "MemberAdded",
                    "MemberAddAsLearner",
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
            patch_member_status(
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
                "ClusterDiscovered",
                "LatchClusterID",
                format!("cluster formed with ID {}", format_id(*cluster_id)),
            )
            .await;
            requeue = Requeue::requeue(Duration::from_millis(200));
        }
        Action::Promote { member, member_id } => {
            let Some(etcd) = etcd.as_mut() else {
                return Err(Error::EtcdUnavailable);
            };
            match etcd.member_promote(*member_id).await {
                Ok(()) => {
                    tracing::info!(cluster = %name, member = %member, "promoted learner");
                    ctx.event(
                        cluster,
                        false,
                        "MemberPromoted",
                        "MemberPromote",
                        format!("promoted {member} to voter"),
                    )
                    .await;
                    requeue = Requeue::requeue(Duration::from_millis(200));
                }
                Err(e) if e.is_learner_not_ready() => {
                    tracing::info!(cluster = %name, member = %member, "learner not yet promotable; will retry");
                    requeue = Requeue::requeue(Duration::from_secs(1));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Action::DeleteMember { member, why } => {
            let (reason, note) = match why {
                DeleteReason::ScaleDown => ("ScalingDown", format!("removing member {member} (newest first)")),
                DeleteReason::Pause => ("Pausing", format!("removing member {member} on the way to a pause")),
                DeleteReason::MemoryPodLost => ("ReplacingMember", format!("member {member} lost its Pod and its tmpfs data; replacing it")),
                DeleteReason::CrashLooping => ("ReplacingMember", format!("member {member} is crash-looping; replacing it while the others keep quorum")),
            };
            tracing::info!(cluster = %name, member = %member, reason, "deleting member");
            members_api.delete(member, &DeleteParams::default()).await?;
            ctx.event(
                cluster,
                matches!(
                    why,
                    DeleteReason::MemoryPodLost | DeleteReason::CrashLooping
                ),
                reason,
                "DeleteMember",
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
                    "Paused",
                    "SetDormant",
                    format!("member {member} is dormant; its PVC keeps the data"),
                )
                .await;
            } else {
                tracing::info!(cluster = %name, member = %member, "waking dormant member");
                ctx.event(
                    cluster,
                    false,
                    "Resumed",
                    "WakeDormant",
                    format!("waking dormant member {member}"),
                )
                .await;
            }
        }
        Action::Wait(why) => {
            // The runbook's "key signals" are these messages, so they are logged at info.
            tracing::info!(cluster = %name, namespace = %ns, "{why}");
        }
        Action::None => {}
    }

    if let EtcdView::Members {
        members: etcd_members,
        ..
    } = &etcd_view
    {
        sync_member_status(&members_api, cluster, &members, etcd_members).await?;
    }
    let voters = match &etcd_view {
        EtcdView::Members { members, .. } => {
            members.iter().filter(|m| !m.is_learner).count() as i32
        }
        _ => members
            .iter()
            .filter(|m| m.status.as_ref().is_some_and(|s| s.is_voter) && !m.spec.dormant)
            .count() as i32,
    };
    ensure_pdb(cluster, ctx, voters, plan.observed.replicas).await?;

    let new_status = status::render(cluster, &plan, latched, Timestamp::now());
    if stored.as_ref() != Some(&new_status) {
        let patch = json!({"status": status_merge_patch(stored.as_ref(), &new_status)?});
        status_api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(requeue)
}

/// A JSON merge patch from `old` to `new`: fields `new` no longer has are sent as `null`, or a
/// merge patch would leave them in place (and the status would never converge).
pub fn status_merge_patch<T: serde::Serialize>(
    old: Option<&T>,
    new: &T,
) -> Result<serde_json::Value, Error> {
    let mut patch = serde_json::to_value(new)?;
    if let (Some(old), Some(fields)) = (old, patch.as_object_mut()) {
        if let serde_json::Value::Object(old) = serde_json::to_value(old)? {
            for key in old.keys() {
                fields.entry(key.clone()).or_insert(serde_json::Value::Null);
            }
        }
    }
    Ok(patch)
}

async fn create_member(
    cluster: &EtcdCluster,
    ctx: &Context,
    version: &str,
    seed: bool,
) -> Result<EtcdMember, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    let owner = cluster.controller_owner_ref(&()).ok_or(Error::NoUid)?;
    let spec = &cluster.spec;
    let token = cluster
        .status
        .as_ref()
        .and_then(|s| s.cluster_token.clone())
        .unwrap_or_else(|| status::cluster_token(cluster));
    let member = EtcdMember {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: Some(ns.clone()),
            labels: Some(labels::merge_user_metadata(
                labels::cluster_labels(&name),
                spec.additional_metadata.as_ref().map(|m| &m.labels),
            )),
            annotations: spec
                .additional_metadata
                .as_ref()
                .map(|m| labels::merge_user_metadata(BTreeMap::new(), Some(&m.annotations)))
                .filter(|a| !a.is_empty()),
            owner_references: Some(vec![owner]),
            finalizers: Some(vec![labels::MEMBER_CLEANUP_FINALIZER.to_string()]),
            ..Default::default()
        },
        spec: EtcdMemberSpec {
            cluster_name: name.clone(),
            version: version.to_string(),
            storage: spec.storage.clone(),
            resources: spec.resources.clone(),
            affinity: spec.affinity.clone(),
            topology_spread_constraints: spec.topology_spread_constraints.clone(),
            additional_metadata: spec.additional_metadata.clone(),
            options: spec.options.clone(),
            image_pull_secrets: spec.image_pull_secrets.clone(),
            bootstrap: seed,
            initial_cluster: String::new(),
            cluster_token: token,
            dormant: false,
            tls: None,
            restore: None,
        },
        status: None,
    };
    let api: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    let created = api.create(&PostParams::default(), &member).await?;
    // The component label needs the generated name.
    let member_name = created.name_any();
    let patch = json!({"metadata": {"labels": {labels::APP_COMPONENT: member_name}}});
    api.patch(&member_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(created)
}

async fn set_initial_cluster(
    api: &Api<EtcdMember>,
    member: &str,
    initial_cluster: &str,
) -> Result<(), Error> {
    let patch = json!({"spec": {"initialCluster": initial_cluster}});
    api.patch(member, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn patch_member_status(
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

/// Record each member's etcd ID and voter flag (matched by peer URL) when they changed.
async fn sync_member_status(
    api: &Api<EtcdMember>,
    cluster: &EtcdCluster,
    members: &[EtcdMember],
    etcd_members: &[plan::EtcdMemberInfo],
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    for m in members
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
    {
        let name = m.name_any();
        let url = naming::peer_url(&name, &cluster_name, &ns, cluster.spec.peer_tls());
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
        }
    }
    Ok(())
}

async fn ensure_services(cluster: &EtcdCluster, ctx: &Context) -> Result<(), Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    for svc in [
        service::headless_service(cluster)?,
        service::client_service(cluster)?,
    ] {
        let name = svc.name_any();
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

async fn ensure_pdb(
    cluster: &EtcdCluster,
    ctx: &Context,
    voters: i32,
    target: i32,
) -> Result<(), Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = api.get_opt(&name).await?;
    match pdb::voter_pdb(cluster, voters, target)? {
        None => {
            if existing.is_some() {
                api.delete(&name, &DeleteParams::default()).await?;
            }
        }
        Some(want) => {
            let same = existing.as_ref().is_some_and(|have| {
                have.spec.as_ref().map(|s| (&s.min_available, &s.selector))
                    == want.spec.as_ref().map(|s| (&s.min_available, &s.selector))
                    && want
                        .labels()
                        .iter()
                        .all(|(k, v)| have.labels().get(k) == Some(v))
            });
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{EtcdClusterStatus, ObservedSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn status_patch_clears_fields_the_new_status_dropped() {
        let old = EtcdClusterStatus {
            progress_deadline: Some(Time(Timestamp::from_second(1_800_000_000).unwrap())),
            observed: Some(ObservedSpec {
                replicas: 3,
                ..Default::default()
            }),
            ..Default::default()
        };
        let new = EtcdClusterStatus {
            observed: old.observed.clone(),
            ..Default::default()
        };
        let patch = status_merge_patch(Some(&old), &new).unwrap();
        assert_eq!(patch["progressDeadline"], serde_json::Value::Null);
        assert!(patch.as_object().unwrap().contains_key("progressDeadline"));
        assert_eq!(patch["observed"]["replicas"], 3);
    }
}
