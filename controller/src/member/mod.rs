//! The EtcdMember reconciler: the member's Pod, its status and its voter label. The PVC (creation,
//! adoption, growth, deletion) is `claim.rs`'s, the cleanup finalizer that removes a member whose
//! deletion is meant from etcd and then deletes its PVC is `finalize.rs`'s; the decisions are
//! `plan.rs`'s (pure).

use std::collections::BTreeMap;
use std::sync::Arc;

use api::conditions::{member as mtype, reason};
use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::builders::pod::{
    member_pod, PodParams, INITIAL_CLUSTER_STATE_ANNOTATION, STATE_EXISTING, STATE_NEW,
};
use crate::conditions::set_condition;
use crate::context::{Context, FIELD_MANAGER};
use crate::etcd::access::{Access, User};
use crate::events::{Action, Reason};
use crate::pods::pod_view;
use crate::topology;
use crate::{controller_uid, Error};
use claim::{adopt_claim, binds_immediately, create_pvc, grow_claim, VOLUME_RECHECK};
use finalize::finalize;
use plan::{Claim, MemberFacts, PodFacts, Step};

mod claim;
mod finalize;
pub mod plan;

/// Reconcile one EtcdMember (run through [`crate::shell::reconcile_lenient`]: timing, metrics,
/// the `OwnershipConflict` Event and the error policy are the shell's).
pub async fn reconcile(member: Arc<EtcdMember>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    reconcile_inner(&member, &ctx).await
}

async fn reconcile_inner(member: &EtcdMember, ctx: &Context) -> Result<Requeue, Error> {
    let ns = member.namespace().ok_or(Error::NoNamespace)?;
    let name = member.name_any();
    let uid = member.uid().ok_or(Error::NoUid)?;
    let client = ctx.client.clone();
    let members: Api<EtcdMember> = Api::namespaced(client.clone(), &ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);

    let cluster = clusters
        .get_opt(&member.spec.cluster_name)
        .await?
        .filter(|c| c.uid() == controller_uid(member));

    if member.metadata.deletion_timestamp.is_some() {
        return finalize(member, cluster.as_ref(), ctx).await;
    }
    if cluster
        .as_ref()
        .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    {
        // The cluster is going: no claim or Pod is created for it any more (its cleanup
        // finalizer deletes the claims it finds; one created after would be left behind).
        return Ok(Requeue::await_change());
    }
    if !member
        .finalizers()
        .iter()
        .any(|f| f == labels::MEMBER_CLEANUP_FINALIZER)
    {
        let mut finalizers = member.finalizers().to_vec();
        finalizers.push(labels::MEMBER_CLEANUP_FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": member.resource_version()}});
        members
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    // The component label needs the generated name, so the cluster controller adds it in a second
    // call after creating the member; an operator that died in between left it off.
    if member.labels().get(labels::APP_COMPONENT) != Some(&name) {
        let patch = json!({"metadata": {"labels": {labels::APP_COMPONENT: name}}});
        members
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }

    let formed = cluster
        .as_ref()
        .and_then(|c| c.status.as_ref())
        .is_some_and(|s| s.cluster_id.is_some());
    let status = member.status.clone().unwrap_or_default();
    let generation = member.metadata.generation;
    let now = Timestamp::now();
    let mut conditions = status.conditions.clone();
    let mut new_status = status.clone();
    new_status.observed_generation = generation;

    let pod = pods.get_opt(&name).await?;
    let claim = match member.spec.storage.is_memory() {
        true => None,
        false => match pvcs.get_opt(&labels::pvc_name(&name)).await? {
            // Ours, or made ours: the UID mark in place of an owner reference (so deleting
            // this object never takes the data), or the claim a re-created member re-attaches
            // to. Another member's is never adopted (an error until it goes).
            Some(c) => Some(adopt_claim(member, c, &pvcs, ctx).await?),
            None => None,
        },
    };
    if let Some(p) = &pod {
        if controller_uid(p).as_deref() != Some(uid.as_str()) {
            return Err(Error::Conflict(format!(
                "Pod {name} exists but is not owned by this EtcdMember; waiting for it to be garbage-collected"
            )));
        }
    }

    let claim_state = match &claim {
        _ if member.spec.storage.is_memory() => Claim::NotUsed,
        None => Claim::Missing,
        Some(c) if c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") => {
            Claim::Bound
        }
        Some(c) => Claim::Pending {
            immediate: pod.is_none() && binds_immediately(c, ctx).await,
        },
    };
    let claim_bound = matches!(claim_state, Claim::Bound);
    let facts = MemberFacts {
        name: name.clone(),
        pending: member.spec.initial_cluster.is_empty(),
        dormant: member.spec.dormant,
        had_pod: status.pod_uid.is_some(),
        claim_recorded: status.pvc_name.is_some(),
        restoring_in_place: member.spec.restore.is_some()
            && member
                .annotations()
                .contains_key(api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION),
        claim: Some(claim_state),
        pod: pod.as_ref().map(|p| PodFacts {
            ready: pod_view(p).ready,
            deleting: p.metadata.deletion_timestamp.is_some(),
            restart_for: restart_for(member, p),
        }),
        member_id_known: status.member_id.is_some(),
    };
    let planned = plan::plan(&facts);
    if claim.is_some() {
        new_status.pvc_name = Some(labels::pvc_name(&name));
    }
    match planned.step {
        Step::None => {}
        Step::DeletePod => {
            pods.delete(&name, &DeleteParams::default()).await?;
            ctx.event(
                member,
                false,
                Reason::PodDeleted,
                Action::Pause,
                format!(
                    "deleted Pod {name}: the member is dormant; its data stays on PVC {}",
                    labels::pvc_name(&name)
                ),
            )
            .await;
        }
        Step::RestartPod => {
            pods.delete(&name, &DeleteParams::default()).await?;
            ctx.event(
                member,
                false,
                Reason::PodRestarted,
                Action::RollingRestart,
                format!(
                    "deleted Pod {name} to start it again for {}; its data and member ID are \
                     kept",
                    facts.pod.and_then(|p| p.restart_for).unwrap_or("a rollout")
                ),
            )
            .await;
        }
        Step::CreateClaim => {
            create_pvc(member, &pvcs, ctx).await?;
            new_status.pvc_name = Some(labels::pvc_name(&name));
        }
        Step::CreatePod => {
            let params = PodParams {
                etcd_image_repository: &ctx.config.etcd_image_repository,
                voter: status.is_voter,
                bootstrap_new_cluster: member.spec.bootstrap && !formed,
                operator_image: ctx.config.operator_image.as_deref(),
            };
            let want = member_pod(member, &params)?;
            let created = pods
                .create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..Default::default()
                    },
                    &want,
                )
                .await?;
            new_status.pod_name = Some(name.clone());
            new_status.pod_uid = created.uid();
            let state = if params.bootstrap_new_cluster {
                "it bootstraps a new cluster"
            } else {
                "it joins the existing cluster"
            };
            ctx.event(
                member,
                false,
                Reason::PodCreated,
                Action::Create,
                format!("created Pod {name}; {state}"),
            )
            .await;
        }
        Step::SyncPod => {
            if let Some(p) = &pod {
                sync_pod_metadata(member, p, &pods, status.is_voter, formed).await?;
                new_status.pod_name = Some(name.clone());
                new_status.pod_uid = p.uid();
            }
            if planned.ready.0 {
                if let Some(version) = running_version(member, cluster.as_ref(), ctx).await {
                    new_status.version = Some(version);
                }
            }
        }
    }
    if member.spec.dormant {
        new_status.pod_name = None;
        new_status.pod_uid = None;
    }
    // A failed restore init container keeps the Pod unready; say why, in the agent's words.
    let (ready, why, message) = match pod.as_ref().and_then(crate::pods::restore_failure) {
        Some(failure) if !planned.ready.0 => (
            false,
            reason::RESTORE_FAILED,
            format!(
                "the restore init container failed: {failure} (kubectl logs {name} -c restore)"
            ),
        ),
        _ => planned.ready,
    };
    set_condition(
        &mut conditions,
        mtype::READY,
        ready,
        why,
        message,
        generation,
        now,
    );

    // Drift is measured against what the cluster asks for now (its locked target), not the
    // member's own spec, which keeps the version it was created with.
    let wanted = cluster
        .as_ref()
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.observed.as_ref())
        .map(|o| o.version.clone())
        .unwrap_or_else(|| member.spec.version.clone());
    match &new_status.version {
        Some(running) if running != &wanted => set_condition(
            &mut conditions,
            mtype::VERSION_DRIFTED,
            true,
            reason::VERSION_MISMATCH,
            if member.spec.version == wanted {
                format!(
                    "etcd runs version {running}, the cluster asks for {wanted}; the member's Pod \
                     runs the image tagged {wanted}, so that image does not hold etcd {wanted}"
                )
            } else {
                format!(
                    "etcd runs version {running}, the cluster asks for {wanted}; the rolling \
                     upgrade restarts this member with {wanted} in its turn (one member at a \
                     time, the leader last)"
                )
            },
            generation,
            now,
        ),
        Some(_) => set_condition(
            &mut conditions,
            mtype::VERSION_DRIFTED,
            false,
            reason::VERSION_MATCHED,
            format!("running version {wanted}"),
            generation,
            now,
        ),
        None => {}
    }
    let recheck = match claim.as_ref().filter(|_| claim_bound) {
        Some(c) => grow_claim(member, c, &pvcs, ctx, &mut conditions, generation, now).await?,
        None => false,
    };
    new_status.conditions = conditions;
    if new_status != status {
        let patch = json!({"status": {
            "podName": new_status.pod_name, "podUID": new_status.pod_uid, "pvcName": new_status.pvc_name,
            "version": new_status.version, "observedGeneration": new_status.observed_generation,
            "conditions": new_status.conditions,
        }});
        members
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(match recheck {
        true => Requeue::requeue(VOLUME_RECHECK),
        false => Requeue::await_change(),
    })
}

/// Why `pod` must start again for `member`, if it must. Only a value the Pod records and that
/// differs counts: a Pod without a record (an older operator's, or adopted) is not restarted for
/// lack of one (the cluster controller records it).
fn restart_for(member: &EtcdMember, pod: &Pod) -> Option<&'static str> {
    let recorded = |key: &str| pod.annotations().get(key);
    if let Some(want) = member.annotations().get(labels::TRUST_BUNDLE_ANNOTATION) {
        if recorded(labels::TRUST_BUNDLE_ANNOTATION) != Some(want) {
            return Some("the new CA bundle");
        }
    }
    if let (Some(want), Some(runs)) = (
        member
            .annotations()
            .get(labels::IMAGE_REPOSITORY_ANNOTATION),
        recorded(labels::IMAGE_REPOSITORY_ANNOTATION),
    ) {
        if want != runs {
            return Some("the new etcd image repository");
        }
    }
    recorded(labels::TEMPLATE_HASH_ANNOTATION)
        .is_some_and(|h| *h != crate::template::hash(&member.spec))
        .then_some("the member's new spec (version, resources or options)")
}

/// The version etcd reports for this member (dialed directly; the member is Ready).
async fn running_version(
    member: &EtcdMember,
    cluster: Option<&EtcdCluster>,
    ctx: &Context,
) -> Option<String> {
    let cluster = cluster?;
    // Status answers without a user even with auth on.
    let access = Access::load(&ctx.client, &ctx.metrics, cluster, User::Anonymous)
        .await
        .ok()?;
    let mut etcd = access
        .dial(&[topology::client_url(member, cluster)])
        .await
        .ok()?;
    etcd.version().await.ok()
}

/// Keep the voter label in step with etcd, put back the operator's labels if someone removed
/// them (Services, the PDB and watches select by them), and retire `initial-cluster-state=new`
/// once formed.
async fn sync_pod_metadata(
    member: &EtcdMember,
    pod: &Pod,
    pods: &Api<Pod>,
    voter: bool,
    formed: bool,
) -> Result<(), Error> {
    let labels_now = pod.labels();
    let missing: BTreeMap<String, String> =
        labels::member_labels(&member.spec.cluster_name, &member.name_any())
            .into_iter()
            .filter(|(k, v)| labels_now.get(k) != Some(v))
            .collect();
    let has_role = labels_now.get(labels::ROLE).map(String::as_str) == Some(labels::ROLE_VOTER);
    let state = pod
        .annotations()
        .get(INITIAL_CLUSTER_STATE_ANNOTATION)
        .map(String::as_str);
    let mut patch = json!({"metadata": {}});
    let mut label_patch = serde_json::Map::new();
    for (k, v) in missing {
        label_patch.insert(k, json!(v));
    }
    if voter != has_role {
        let value = if voter {
            json!(labels::ROLE_VOTER)
        } else {
            serde_json::Value::Null
        };
        label_patch.insert(labels::ROLE.to_string(), value);
    }
    if !label_patch.is_empty() {
        patch["metadata"]["labels"] = serde_json::Value::Object(label_patch);
    }
    if formed && state == Some(STATE_NEW) {
        patch["metadata"]["annotations"] =
            json!({INITIAL_CLUSTER_STATE_ANNOTATION: STATE_EXISTING});
    }
    if patch["metadata"].as_object().is_some_and(|m| !m.is_empty()) {
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
