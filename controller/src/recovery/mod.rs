//! The EtcdRecovery controller, its I/O shell: observes the recovery, its cluster, the
//! cluster's EtcdMembers and their Pods and what each member's etcd says about itself, asks
//! [`plan::next`] for the one thing to do, does it and writes status. Phases go `Pending` →
//! `Running` → `Complete` | `Failed`; terminal phases never change. The plan is written before
//! any step acts, and each step before its work, so an operator restarted anywhere resumes.
//!
//! It touches a cluster only through what the other controllers already honour: the cluster's
//! [`RECOVERY_ANNOTATION`] (the cluster controller holds), a member's `spec.dormant` (the member
//! controller deletes its Pod and keeps its PVC), the survivor's [`FORCE_NEW_CLUSTER_ANNOTATION`]
//! (its Pod is built with `--force-new-cluster`), the deletion of the survivor's one forced Pod,
//! of the Pods of members being deleted (their controller only runs their cleanup finalizer,
//! which waits while the cluster is held) and of the discarded EtcdMembers (their cleanup
//! finalizer finds them gone from etcd). Adding
//! the members back is the cluster controller's normal scale-up. Before a survivor is chosen, a
//! member whose etcd does not run has its raft position read from its data PVC by a position Job
//! it owns (`disk.rs`). A point-in-time source is built off to the side by a build Job it owns
//! before anything is planned (`point_in_time.rs`), then restored as the snapshot it stored.

mod act;
mod disk;
mod overdue;
pub mod plan;
mod point_in_time;
mod snapshot;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::conditions::{reason, recovery as ctype};
use api::labels;
use api::v1alpha2::{
    EtcdCluster, EtcdMember, EtcdRecovery, EtcdRecoveryStatus, RecoveryPhase, RecoveryResult,
    RecoveryStep, FORCE_NEW_CLUSTER_ANNOTATION, RECOVERY_ANNOTATION, RESTORE_ID_ANNOTATION,
    RESTORE_IN_PLACE_ANNOTATION,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};

use crate::conditions::set_condition;
use crate::context::Context;
use crate::etcd::access::{Access, User};
use crate::etcd::format_id;
use crate::events::{Action, Reason};
use crate::pods::pod_view;
use crate::{shell, topology, Error};
use plan::{ClusterFacts, EtcdFacts, Facts, MemberFacts, Next, PodFacts, Source};

/// How long one member's etcd may take to answer `Status` and `MemberList`.
const STATUS_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a waiting recovery looks again (Pods starting, members being deleted, the
/// cluster controller adding members back: none of it is an event on the EtcdRecovery).
const RECHECK: Duration = Duration::from_secs(3);
/// How soon a recovery looks again after a step.
const SOON: Duration = Duration::from_millis(200);

/// Reconcile one EtcdRecovery (run through [`crate::shell::reconcile`]: timing, metrics and the
/// error policy are the shell's).
pub async fn reconcile(recovery: Arc<EtcdRecovery>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let ns = recovery.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<EtcdRecovery> = Api::namespaced(ctx.client.clone(), &ns);
    // The cache may lag behind our own status writes: decide from the stored object.
    let Some(recovery) = api.get_opt(&recovery.name_any()).await? else {
        return Ok(Requeue::await_change());
    };
    let status = recovery.status.clone().unwrap_or_default();
    if status.phase.is_some_and(RecoveryPhase::is_terminal)
        || recovery.metadata.deletion_timestamp.is_some()
    {
        return Ok(Requeue::await_change());
    }
    let cluster_name = recovery.spec.cluster_ref.name.clone();
    let cluster = Api::<EtcdCluster>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&cluster_name)
        .await?;
    let facts = observe(&ctx, &ns, &api, &recovery, cluster.as_ref()).await?;
    let next = plan::next(&facts);
    let now = Timestamp::now();
    match next {
        Next::Wait { reason, message } => {
            let mut new = status.clone();
            let was = ready_reason(&status);
            ready(&recovery, &mut new, false, reason, message.clone(), now);
            if recovery.status.as_ref() != Some(&new) {
                write(&api, &recovery, &new).await?;
            }
            // A wait that needs a human is announced once, where `kubectl describe` shows it.
            if reason == reason::MEMBER_POD_STUCK && was.as_deref() != Some(reason) {
                tracing::warn!(recovery = %recovery.name_any(), namespace = %ns, note = %message, "recovery waits for a stuck Pod");
                ctx.event(
                    &recovery,
                    true,
                    Reason::RecoveryStep,
                    Action::Recover,
                    message,
                )
                .await;
            }
            Ok(Requeue::requeue(RECHECK))
        }
        Next::Fail { reason, message } => {
            let said = Said::new(reason, message, Reason::RecoveryFailed, Action::Fail);
            record(&ctx, &api, &recovery, said.warning(), |new| {
                new.phase = Some(RecoveryPhase::Failed);
                new.completed_at = Some(Time(now));
            })
            .await?;
            Ok(Requeue::await_change())
        }
        Next::RecordPlan(p) => {
            let from = match (&p.snapshot, &p.snapshot_uri) {
                (None, None) => None,
                _ => Some(plan::restored_of(&p)),
            };
            let from = match from {
                Some(snapshot) => format!(
                    "{snapshot} (revision {}, restored into {} with --bump-revision {})",
                    p.revision
                        .map_or_else(|| "unrecorded".into(), |r| r.to_string()),
                    p.member.clone().unwrap_or_default(),
                    p.bump_revision.unwrap_or_default()
                ),
                None => format!(
                    "{} (commit index {}, raft term {}, revision {})",
                    p.member.clone().unwrap_or_default(),
                    p.raft_index.unwrap_or_default(),
                    p.raft_term.unwrap_or_default(),
                    p.revision
                        .map_or_else(|| "unknown".into(), |r| r.to_string())
                ),
            };
            let note = format!(
                "plan: rebuild cluster {cluster_name} from {from}; {}",
                p.lost.clone().unwrap_or_default()
            );
            let said = Said::new(
                reason::RECOVERING,
                note,
                Reason::RecoveryPlanned,
                Action::Recover,
            );
            record(&ctx, &api, &recovery, said, |new| {
                new.plan = Some(*p);
                new.phase = Some(RecoveryPhase::Running);
                new.step = Some(RecoveryStep::PauseCluster);
                new.started_at = Some(Time(now));
            })
            .await?;
            Ok(Requeue::requeue(SOON))
        }
        Next::Advance(step) => {
            let note = format!("step {}", step.as_str());
            let said = Said::new(
                reason::RECOVERING,
                note,
                Reason::RecoveryStep,
                Action::Recover,
            );
            record(&ctx, &api, &recovery, said, |new| new.step = Some(step)).await?;
            Ok(Requeue::requeue(SOON))
        }
        Next::Act(work) => {
            act::act(&ctx, &ns, &api, &recovery, &status, &cluster_name, work).await?;
            Ok(Requeue::requeue(SOON))
        }
        Next::Complete => {
            let result = result_of(&ctx, &ns, &facts, cluster.as_ref()).await;
            let unknown =
                |v: Option<i64>| v.map_or_else(|| "unknown".to_string(), |v| v.to_string());
            let note = format!(
                "cluster {cluster_name} is Available again with {} member(s) re-added ({}); \
                 cluster ID {}, {} keys at revision {}",
                result.members_re_added.len(),
                result.members_re_added.join(", "),
                result
                    .cluster_id
                    .clone()
                    .unwrap_or_else(|| "unknown".into()),
                unknown(result.keys),
                unknown(result.revision),
            );
            let mut said = Said::new(
                reason::COMPLETE,
                note,
                Reason::RecoveryComplete,
                Action::Complete,
            );
            said.ok = true;
            record(&ctx, &api, &recovery, said, |new| {
                new.result = Some(result);
                new.phase = Some(RecoveryPhase::Complete);
                new.completed_at = Some(Time(now));
            })
            .await?;
            Ok(Requeue::await_change())
        }
    }
}

/// What a status change says: the Ready condition, the log line and the Event.
struct Said {
    ok: bool,
    warning: bool,
    reason: &'static str,
    note: String,
    event: Reason,
    action: Action,
}

impl Said {
    fn new(reason: &'static str, note: String, event: Reason, action: Action) -> Self {
        Said {
            ok: false,
            warning: false,
            reason,
            note,
            event,
            action,
        }
    }

    fn warning(mut self) -> Self {
        self.warning = true;
        self
    }
}

/// Change the recovery's status with `change`, set its Ready condition, write it (guarded by the
/// resourceVersion read), log and announce it: the one way a phase, plan or step is recorded.
async fn record(
    ctx: &Context,
    api: &Api<EtcdRecovery>,
    recovery: &EtcdRecovery,
    said: Said,
    change: impl FnOnce(&mut EtcdRecoveryStatus),
) -> Result<(), Error> {
    let mut new = recovery.status.clone().unwrap_or_default();
    change(&mut new);
    let now = Timestamp::now();
    ready(
        recovery,
        &mut new,
        said.ok,
        said.reason,
        said.note.clone(),
        now,
    );
    write(api, recovery, &new).await?;
    let (name, ns) = (
        recovery.name_any(),
        recovery.namespace().unwrap_or_default(),
    );
    if said.warning {
        tracing::warn!(recovery = %name, namespace = %ns, note = %said.note, "recovery failed");
    } else {
        tracing::info!(recovery = %name, namespace = %ns, note = %said.note, "recovery");
    }
    ctx.event(recovery, said.warning, said.event, said.action, said.note)
        .await;
    Ok(())
}

/// The reason of the recovery's Ready condition, if it has one.
fn ready_reason(status: &EtcdRecoveryStatus) -> Option<String> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == ctype::READY)
        .map(|c| c.reason.clone())
}

fn ready(
    recovery: &EtcdRecovery,
    status: &mut EtcdRecoveryStatus,
    ok: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let generation = recovery.metadata.generation;
    status.observed_generation = generation;
    if status.phase.is_none() {
        status.phase = Some(RecoveryPhase::Pending);
    }
    set_condition(
        &mut status.conditions,
        ctype::READY,
        ok,
        reason,
        message,
        generation,
        now,
    );
}

async fn write(
    api: &Api<EtcdRecovery>,
    recovery: &EtcdRecovery,
    status: &EtcdRecoveryStatus,
) -> Result<EtcdRecovery, Error> {
    shell::write_status(api, recovery, recovery.status.as_ref(), status).await
}

/// Everything [`plan::next`] reads. etcd is asked only where the plan needs it: every running
/// member before the plan, the survivor while it is restarted.
async fn observe(
    ctx: &Context,
    ns: &str,
    api: &Api<EtcdRecovery>,
    recovery: &EtcdRecovery,
    cluster: Option<&EtcdCluster>,
) -> Result<Facts, Error> {
    let status = recovery.status.clone().unwrap_or_default();
    let source = &recovery.spec.source;
    // A point in time, once built, is restored as the snapshot it stored.
    let source = match (
        &source.survivor,
        recovery.snapshot_source(),
        &source.point_in_time,
    ) {
        (_, Some(snapshot), _) => match snapshot::stored_facts(snapshot) {
            Some(stored) => Source::Stored(stored),
            None => Source::Snapshot(snapshot.name.clone().unwrap_or_default()),
        },
        // Observed below, before the plan.
        (_, None, Some(_)) => Source::PointInTime(plan::Build::Start),
        (survivor, None, None) => Source::Survivor {
            member: survivor.as_ref().and_then(|s| s.member.clone()),
        },
    };
    let mut facts = Facts {
        name: recovery.name_any(),
        uid: recovery.uid().unwrap_or_default(),
        cluster_name: recovery.spec.cluster_ref.name.clone(),
        phase: status.phase.unwrap_or_default(),
        step: status.step,
        plan: status.plan.clone(),
        forced_pod_uid: status.forced_pod_uid.clone(),
        source,
        confirmed: recovery.spec.healthy_rollback_confirmed(),
        allow_unverified: recovery.spec.unverified_snapshot_allowed(),
        snapshot: None,
        highest_snapshot_revision: None,
        cluster: None,
        other_recovery: None,
        members: Vec::new(),
        age_secs: recovery
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|created| {
                let age = k8s_openapi::jiff::Timestamp::now().as_second() - created.0.as_second();
                u64::try_from(age).unwrap_or(0)
            })
            // Not stored yet: the recovery is brand new.
            .unwrap_or(0),
    };
    let Some(cluster) = cluster else {
        return Ok(facts);
    };
    let cluster_status = cluster.status.clone().unwrap_or_default();
    let available = cluster_status
        .conditions
        .iter()
        .any(|c| c.type_ == api::conditions::cluster::AVAILABLE && c.status == "True")
        && cluster_status.ready_members >= cluster.spec.replicas;
    facts.cluster = Some(ClusterFacts {
        held_by: cluster.annotations().get(RECOVERY_ANNOTATION).cloned(),
        replicas: cluster.spec.replicas,
        cluster_id: cluster_status.cluster_id.clone(),
        uid: cluster.uid().unwrap_or_default(),
        created: cluster.metadata.creation_timestamp.clone(),
        available,
    });
    if facts.plan.is_none() {
        facts.other_recovery = first_other_recovery(api, recovery, cluster).await?;
        match &mut facts.source {
            Source::Snapshot(name) => {
                (facts.snapshot, facts.highest_snapshot_revision) =
                    snapshot::observe(ctx, ns, Some(name.as_str()), &facts.cluster_name).await?;
            }
            Source::Stored(stored) => {
                if let Some(source) = recovery.snapshot_source() {
                    stored.missing = snapshot::missing(ctx, ns, source).await?;
                }
                (_, facts.highest_snapshot_revision) =
                    snapshot::observe(ctx, ns, None, &facts.cluster_name).await?;
            }
            Source::PointInTime(build) => {
                *build = point_in_time::observe(ctx, ns, recovery).await?;
            }
            Source::Survivor { .. } => {}
        }
    }

    let selector = ListParams::default().labels(&labels::cluster_selector(&cluster.name_any()));
    let members: Vec<EtcdMember> = Api::<EtcdMember>::namespaced(ctx.client.clone(), ns)
        .list(&selector)
        .await?
        .items
        .into_iter()
        .filter(|m| m.spec.cluster_name == cluster.name_any())
        .collect();
    let pods: BTreeMap<String, Pod> = Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .list(&selector)
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    let survivor = facts.plan.as_ref().and_then(|p| p.member.clone());
    let (planned, step) = (facts.plan.is_some(), facts.step);
    let ask = |m: &EtcdMember| match (planned, step) {
        (false, _) => true,
        (
            true,
            Some(
                RecoveryStep::ForceNewCluster
                | RecoveryStep::RestartSurvivor
                | RecoveryStep::RestoreSnapshot,
            ),
        ) => survivor.as_deref() == Some(m.name_any().as_str()),
        _ => false,
    };
    let mut access: Option<Result<Access, String>> = None;
    for member in &members {
        let name = member.name_any();
        let restore_failure = pods.get(&name).and_then(crate::pods::restore_failure);
        let pod = pods.get(&name).map(|p| {
            let view = pod_view(p);
            PodFacts {
                uid: view.uid,
                ready: view.ready,
                deleting: p.metadata.deletion_timestamp.is_some(),
                force_new_cluster: runs_force_new_cluster(p),
            }
        });
        let mut facts_of = MemberFacts {
            name: name.clone(),
            dormant: member.spec.dormant,
            bootstrap: member.spec.bootstrap,
            restore_marked: restore_marked_by(member, recovery),
            restore_failure,
            forced: member
                .annotations()
                .contains_key(FORCE_NEW_CLUSTER_ANNOTATION),
            deleting: member.metadata.deletion_timestamp.is_some(),
            pod: pod.clone(),
            etcd: None,
            note: None,
            claim: false,
            on_disk: None,
            pod_overdue: None,
        };
        match &pod {
            None => facts_of.note = Some("no Pod".to_string()),
            Some(p) if p.deleting => facts_of.note = Some("its Pod is being deleted".to_string()),
            Some(_) if ask(member) => {
                if access.is_none() {
                    access = Some(
                        Access::load_or_why(&ctx.client, &ctx.metrics, cluster, User::Anonymous)
                            .await?,
                    );
                }
                match access.as_ref() {
                    Some(Ok(access)) => {
                        let url = topology::client_url(member, cluster);
                        match ask_member(access, &url).await {
                            Ok(e) => facts_of.etcd = Some(e),
                            Err(why) => facts_of.note = Some(why),
                        }
                    }
                    Some(Err(why)) => facts_of.note = Some(why.clone()),
                    None => {}
                }
            }
            Some(_) => {}
        }
        if step == Some(RecoveryStep::StopMembers) {
            if let Some(p) = pods.get(&name) {
                facts_of.pod_overdue = overdue::overdue(ctx, p).await;
            }
        }
        // Before a survivor is chosen, a member whose etcd does not answer may still hold the
        // most data: its position is read from its data dir.
        if !planned && matches!(facts.source, Source::Survivor { .. }) && facts_of.etcd.is_none() {
            disk::observe(ctx, ns, recovery, member, &mut facts_of).await?;
        }
        facts.members.push(facts_of);
    }
    Ok(facts)
}

/// Whether `member` carries this recovery's restore mark: its name, and its UID
/// ([`RESTORE_ID_ANNOTATION`]). A mark of an earlier recovery of the same name (another
/// snapshot, left by one that failed half-way) is not this one's. A mark written before the UID
/// was recorded is matched by name.
fn restore_marked_by(member: &EtcdMember, recovery: &EtcdRecovery) -> bool {
    let annotations = member.annotations();
    annotations.get(RESTORE_IN_PLACE_ANNOTATION) == Some(&recovery.name_any())
        && annotations
            .get(RESTORE_ID_ANNOTATION)
            .is_none_or(|uid| Some(uid) == recovery.uid().as_ref())
}

/// Whether the Pod's etcd container was started with `--force-new-cluster`.
fn runs_force_new_cluster(pod: &Pod) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        c.args
            .iter()
            .flatten()
            .chain(c.command.iter().flatten())
            .any(|a| a == "--force-new-cluster")
    })
}

/// What one member's etcd says about itself, from its own process.
async fn ask_member(access: &Access, url: &str) -> Result<EtcdFacts, String> {
    let asked = async {
        let mut client = access
            .dial_with_timeout(&[url.to_string()], STATUS_TIMEOUT)
            .await?;
        let status = client.member_status().await?;
        let (_, listed) = client.member_list().await?;
        Ok::<_, crate::etcd::EtcdError>((status, listed.len()))
    }
    .await;
    match asked {
        Ok((s, members)) => Ok(EtcdFacts {
            member_id: s.member_id,
            cluster_id: s.cluster_id,
            leader: s.leader,
            raft_term: s.raft_term,
            raft_index: s.raft_index,
            revision: s.revision,
            members,
            is_learner: s.is_learner,
        }),
        Err(e) => Err(format!("its etcd did not answer: {}", e.stable_message())),
    }
}

/// An unfinished EtcdRecovery of the same cluster that goes first: the one holding the cluster,
/// else the oldest (by creation, then name).
async fn first_other_recovery(
    api: &Api<EtcdRecovery>,
    recovery: &EtcdRecovery,
    cluster: &EtcdCluster,
) -> Result<Option<String>, Error> {
    let me = recovery.name_any();
    if let Some(holder) = cluster.annotations().get(RECOVERY_ANNOTATION) {
        if *holder != me {
            return Ok(Some(holder.clone()));
        }
    }
    let key = |r: &EtcdRecovery| {
        (
            r.metadata.creation_timestamp.as_ref().map(|t| t.0),
            r.name_any(),
        )
    };
    let mine = key(recovery);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|r| r.name_any() != me)
        .filter(|r| r.spec.cluster_ref.name == recovery.spec.cluster_ref.name)
        .filter(|r| {
            !r.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(RecoveryPhase::is_terminal)
        })
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| key(r) < mine)
        .map(|r| r.name_any())
        .next())
}

/// What the recovered cluster holds: its cluster ID, its keys and revision (asked through its
/// ready members as root), and the members added back.
async fn result_of(
    ctx: &Context,
    ns: &str,
    facts: &Facts,
    cluster: Option<&EtcdCluster>,
) -> RecoveryResult {
    let survivor = facts.plan.as_ref().and_then(|p| p.member.clone());
    let mut result = RecoveryResult {
        members_re_added: facts
            .members
            .iter()
            .filter(|m| Some(&m.name) != survivor.as_ref())
            .map(|m| m.name.clone())
            .collect(),
        ..Default::default()
    };
    let Some(cluster) = cluster else {
        return result;
    };
    let selector = ListParams::default().labels(&labels::cluster_selector(&cluster.name_any()));
    let Ok(members) = Api::<EtcdMember>::namespaced(ctx.client.clone(), ns)
        .list(&selector)
        .await
    else {
        return result;
    };
    let ready: Vec<&str> = facts
        .members
        .iter()
        .filter(|m| m.pod.as_ref().is_some_and(|p| p.ready))
        .map(|m| m.name.as_str())
        .collect();
    let urls: Vec<String> = members
        .items
        .iter()
        .filter(|m| ready.contains(&m.name_any().as_str()))
        .map(|m| topology::client_url(m, cluster))
        .collect();
    let asked = async {
        let access = Access::load(&ctx.client, &ctx.metrics, cluster, User::Root)
            .await
            .map_err(|e| e.to_string())?;
        let mut client = access.dial(&urls).await.map_err(|e| e.stable_message())?;
        let (id, _) = client.member_list().await.map_err(|e| e.stable_message())?;
        let (keys, revision) = client.key_count().await.map_err(|e| e.stable_message())?;
        Ok::<_, String>((id, keys, revision))
    }
    .await;
    match asked {
        Ok((id, keys, revision)) => {
            result.cluster_id = Some(format_id(id));
            result.keys = Some(keys);
            result.revision = Some(revision);
        }
        Err(e) => {
            tracing::warn!(cluster = %cluster.name_any(), error = %e, "cannot read the recovered cluster's keys");
        }
    }
    result
}
