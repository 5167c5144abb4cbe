//! The EtcdDefrag controller, its I/O shell: a one-shot run that defragments one cluster's members, one member
//! per reconcile, followers before the leader, only while the whole cluster is healthy
//! (`Pending` with the reason otherwise). Phases go `Pending` → `Running` → `Complete` |
//! `Failed`; terminal phases never change and a finished run is never repeated. At most one
//! run per cluster is `Running`; after a run that brought every member below the backend quota,
//! a raised NOSPACE alarm is disarmed. `ttlSecondsAfterFinished` deletes a finished run.

mod act;
pub(super) mod observe;

use act::{await_answer, complete, defer, defragment, finish, step, Ended, Unfinished};
use observe::{observe, url_of};
pub mod plan;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::conditions::reason;
use api::quantity::format_bytes;
use api::v1alpha2::{
    DefragMemberStatus, DefragOutcome, DefragPhase, EtcdCluster, EtcdDefrag, EtcdDefragStatus,
    EtcdMember,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Resource, ResourceExt};

use crate::context::Context;
use crate::etcd::access::{Access, User};
use crate::events::{Action, Reason};
use crate::{shell, Error};
use plan::{phase, render, Gate, Next, Outcome};

/// Bound on a run's `AlarmDisarm` call. A `Defragment` call's bound is sized to the member's
/// database ([`crate::config::DefragTimeout`]).
pub const MEMBER_RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on a member's `Status` answer while checking health.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// A run still Running this long after it started fails with `DeadlineExceeded`.
pub const ACTIVE_DEADLINE: Duration = Duration::from_secs(30 * 60);
const RETRY_PAUSE: Duration = Duration::from_secs(2);
/// How often a waiting run looks again.
const RECHECK: Duration = Duration::from_secs(5);
/// How soon a run looks again after moving leadership (the members see the new leader).
const RECHECK_SOON: Duration = Duration::from_secs(1);

/// Reconcile one EtcdDefrag (run through [`crate::shell::reconcile_lenient`]: timing, metrics
/// and the error policy are the shell's).
pub async fn reconcile(defrag: Arc<EtcdDefrag>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    reconcile_inner(&defrag, &ctx).await
}

/// Write the run's status, from what `defrag` holds to `status`, guarded by `defrag`'s
/// resourceVersion ([`shell::write_status`]): a concurrent write fails the reconcile, which plans
/// again from a fresh read. Returns the written object, whose resourceVersion the next write of
/// the same reconcile carries.
async fn write(
    api: &Api<EtcdDefrag>,
    defrag: &EtcdDefrag,
    status: &EtcdDefragStatus,
) -> Result<EtcdDefrag, Error> {
    shell::write_status(api, defrag, defrag.status.as_ref(), status).await
}

/// Delete a finished run once its TTL has passed; otherwise wake when it does.
async fn expire(
    api: &Api<EtcdDefrag>,
    defrag: &EtcdDefrag,
    now: Timestamp,
) -> Result<Requeue, Error> {
    let (Some(ttl), Some(done)) = (
        defrag.spec.ttl_seconds_after_finished,
        defrag.status.as_ref().and_then(|s| s.completed_at.as_ref()),
    ) else {
        return Ok(Requeue::await_change());
    };
    let elapsed = Duration::try_from(now.duration_since(done.0)).unwrap_or_default();
    let ttl = Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
    if elapsed >= ttl {
        match api
            .delete(&defrag.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(defrag = %defrag.name_any(), "deleted finished EtcdDefrag after ttlSecondsAfterFinished");
        return Ok(Requeue::await_change());
    }
    Ok(Requeue::requeue(ttl - elapsed + Duration::from_millis(200)))
}

async fn reconcile_inner(defrag: &EtcdDefrag, ctx: &Context) -> Result<Requeue, Error> {
    let ns = defrag.namespace().ok_or(Error::NoNamespace)?;
    let name = defrag.name_any();
    let api: Api<EtcdDefrag> = Api::namespaced(ctx.client.clone(), &ns);
    // The cache may lag behind our own status writes: decide from the stored object.
    let Some(mut defrag) = api.get_opt(&name).await? else {
        return Ok(Requeue::await_change());
    };
    let now = Timestamp::now();
    if phase(&defrag).is_terminal() {
        return expire(&api, &defrag, now).await;
    }
    if defrag.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change());
    }
    let mut status = defrag.status.clone().unwrap_or_default();
    let running = phase(&defrag) == DefragPhase::Running;
    let cluster_name = defrag.spec.cluster_ref.name.clone();

    // A run that has been going too long stops, wherever it is.
    if let Some(started) = status.started_at.as_ref().filter(|_| running) {
        let age = Duration::try_from(now.duration_since(started.0)).unwrap_or_default();
        if age >= ACTIVE_DEADLINE {
            let o = Outcome {
                phase: DefragPhase::Failed,
                reason: reason::DEADLINE_EXCEEDED,
                message: format!(
                    "the run did not finish within {}s of starting; create a new EtcdDefrag to \
                     process the remaining members",
                    ACTIVE_DEADLINE.as_secs()
                ),
            };
            return finish(ctx, &api, &defrag, &mut status, &o, now).await;
        }
    }

    let wait = |reason: &'static str, message: String| Outcome {
        phase: if running {
            DefragPhase::Running
        } else {
            DefragPhase::Pending
        },
        reason,
        message,
    };
    let Some(cluster) = Api::<EtcdCluster>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&cluster_name)
        .await?
    else {
        let o = wait(
            reason::CLUSTER_NOT_FOUND,
            format!(
                "EtcdCluster {cluster_name} (spec.clusterRef.name) does not exist in this namespace"
            ),
        );
        return defer(ctx, &api, &defrag, &mut status, &o, now).await;
    };

    if !running {
        let runs = api.list(&ListParams::default()).await?.items;
        if let Some(first) = plan::blocking_run(&defrag, &runs) {
            let o = wait(
                reason::WAITING_FOR_RUN,
                format!(
                    "EtcdDefrag {first} of cluster {cluster_name} goes first; runs of one cluster \
                     never overlap"
                ),
            );
            return defer(ctx, &api, &defrag, &mut status, &o, now).await;
        }
    }

    let access = match Access::load_or_why(&ctx.client, &ctx.metrics, &cluster, User::Root).await? {
        Ok(a) => a,
        Err(why) => {
            let o = wait(reason::CREDENTIALS_NOT_READY, why);
            return defer(ctx, &api, &defrag, &mut status, &o, now).await;
        }
    };
    let (members, conns, alarms) = observe(ctx, &ns, &cluster, &access).await?;
    if let Some(why) = plan::unhealthy(cluster.spec.replicas, &members, &alarms) {
        let o = wait(
            reason::CLUSTER_UNHEALTHY,
            format!("waiting for cluster {cluster_name} to be healthy: {why}"),
        );
        return defer(ctx, &api, &defrag, &mut status, &o, now).await;
    }
    if !running {
        let o = Outcome {
            phase: DefragPhase::Running,
            reason: reason::RUNNING,
            message: format!(
                "defragmenting the {} member(s) of cluster {cluster_name}, followers first",
                members.len()
            ),
        };
        tracing::info!(defrag = %name, namespace = %ns, cluster = %cluster_name, "defrag run started");
        ctx.event(
            &defrag,
            false,
            Reason::DefragStarted,
            Action::Defragment,
            format!("started defragmenting cluster {cluster_name}"),
        )
        .await;
        return step(&api, &defrag, &mut status, &o, now, Duration::ZERO).await;
    }

    let done: BTreeSet<String> = status
        .members
        .iter()
        .filter(|m| m.outcome.is_some())
        .map(|m| m.name.clone())
        .collect();
    let (member, role) = match plan::next_step(&members, &done) {
        None => {
            return complete(
                ctx,
                &api,
                &defrag,
                &cluster,
                &mut status,
                &members,
                &conns,
                &alarms,
                &access,
                now,
            )
            .await;
        }
        Some(Next::MoveLeader { from, to, to_id }) => {
            let url = url_of(&members, &conns, &from.name);
            let moved = async {
                let mut client = access
                    .dial_with_timeout(std::slice::from_ref(&url), STATUS_TIMEOUT)
                    .await?;
                client.move_leader(to_id).await
            }
            .await;
            let message = match moved {
                Ok(()) => {
                    tracing::info!(defrag = %name, from = %from.name, to = %to.name, "moved leadership before defragmenting the leader");
                    ctx.event_related(
                        &defrag,
                        Some(member_ref(&ns, &from.name)),
                        false,
                        Reason::LeaderMoved,
                        Action::MoveLeader,
                        format!(
                            "moved leadership from {} to {} before defragmenting {}",
                            from.name, to.name, from.name
                        ),
                    )
                    .await;
                    // Remembered so the member is reported as the leader it was.
                    if !status.members.iter().any(|m| m.name == from.name) {
                        status.members.push(DefragMemberStatus {
                            name: from.name.clone(),
                            role: Some(plan::LEADER.to_string()),
                            ..Default::default()
                        });
                    }
                    format!(
                        "moved leadership from {} to {} before defragmenting {}",
                        from.name, to.name, from.name
                    )
                }
                Err(e) => format!(
                    "moving leadership from {} to {} before defragmenting {} failed, trying \
                     again: {}",
                    from.name,
                    to.name,
                    from.name,
                    e.stable_message()
                ),
            };
            let o = Outcome {
                phase: DefragPhase::Running,
                reason: reason::RUNNING,
                message,
            };
            return step(
                &api,
                &defrag,
                &mut status,
                &o,
                Timestamp::now(),
                RECHECK_SOON,
            )
            .await;
        }
        Some(Next::Member(m, role)) => (m, role),
    };
    let prior = status
        .members
        .iter()
        .find(|m| m.name == member.name)
        .cloned();
    // A leader whose leadership was moved away is reported as the leader it was.
    let role = if prior.as_ref().and_then(|p| p.role.as_deref()) == Some(plan::LEADER) {
        plan::LEADER
    } else {
        role
    };
    let Ok(current) = member.status.clone() else {
        return Ok(Requeue::requeue(RECHECK));
    };
    let rule = defrag.spec.rule();
    let url = url_of(&members, &conns, &member.name);
    let mut entry = prior.clone().unwrap_or_else(|| DefragMemberStatus {
        name: member.name.clone(),
        ..Default::default()
    });
    entry.role = Some(role.to_string());
    let sent = prior.as_ref().filter(|p| plan::in_flight(p)).is_some();
    let gate = if sent {
        // An earlier reconcile sent the call and did not see its end: it is never sent again.
        Gate::Defragment(entry.reason.clone().unwrap_or_default())
    } else {
        entry.db_size_before = Some(current.db_size);
        plan::gate(&rule, current.db_size, current.db_size_in_use, member.quota)
    };
    let before = entry.db_size_before.unwrap_or(current.db_size);
    match gate {
        Gate::Skip(why) => {
            entry.outcome = Some(DefragOutcome::Skipped);
            entry.reason = Some(why);
            ctx.metrics.count_defrag_member("Skipped", 0, None);
        }
        Gate::Defragment(why) => {
            let took = Instant::now();
            let limit = ctx.config.defrag_timeout.for_size(before);
            let result = if sent {
                await_answer(&url, &access).await.map(|after| {
                    Ended::Unanswered(after, "its earlier call was not seen to end".to_string())
                })
            } else {
                let mut client = match access
                    .dial_with_timeout(std::slice::from_ref(&url), limit.max(STATUS_TIMEOUT))
                    .await
                {
                    Ok(c) => c,
                    // Nothing was sent: the next reconcile tries again.
                    Err(e) => {
                        let o = Outcome {
                            phase: DefragPhase::Running,
                            reason: reason::RUNNING,
                            message: format!(
                                "cannot reach member {} to defragment it, trying again: {}",
                                member.name,
                                e.stable_message()
                            ),
                        };
                        return step(&api, &defrag, &mut status, &o, now, RECHECK).await;
                    }
                };
                // Recorded before the call: whatever happens next, it is the only one.
                entry.reason = Some(why.clone());
                status.members.retain(|m| m.name != entry.name);
                status.members.push(entry.clone());
                let o = Outcome {
                    phase: DefragPhase::Running,
                    reason: reason::RUNNING,
                    message: format!(
                        "defragmenting {role} {} (dbSize {}; the call may take {:.1}s)",
                        member.name,
                        format_bytes(before),
                        limit.as_secs_f32()
                    ),
                };
                render(&defrag, &mut status, &o, Timestamp::now());
                defrag = write(&api, &defrag, &status).await?;
                defragment(&mut client, limit, &url, &access).await
            };
            let judged = result.and_then(|ended| match ended {
                Ended::Answered(after) => Ok((Some(after), why.clone())),
                Ended::SizeUnavailable(e) => Ok((None, plan::after_size_unavailable(&why, &e))),
                Ended::Unanswered(after, e) => match plan::judge_unanswered(before, &after) {
                    Ok(j) => Ok((
                        Some(after),
                        format!(
                            "{why}; the Defragment call did not answer ({e}) and was not \
                             repeated; {j}"
                        ),
                    )),
                    Err(j) => Err(Unfinished::Failed(format!(
                        "the Defragment call did not answer ({e}) and was not repeated, as etcd \
                         finishes a defragmentation even when its caller gives up; once the \
                         member answered again: {j}"
                    ))),
                },
            });
            match judged {
                Ok((after, why)) => {
                    let after = after.map(|a| a.db_size);
                    let reclaimed = after.map(|a| (before - a).max(0));
                    entry.outcome = Some(DefragOutcome::Defragmented);
                    entry.reason = Some(why);
                    entry.db_size_after = after;
                    entry.reclaimed_bytes = reclaimed;
                    ctx.metrics.count_defrag_member(
                        "Defragmented",
                        reclaimed.unwrap_or(0),
                        Some(took.elapsed()),
                    );
                    tracing::info!(defrag = %name, member = %member.name, role, ?reclaimed, "defragmented member");
                    let sizes = match (after, reclaimed) {
                        (Some(a), Some(r)) => format!(
                            "dbSize {} -> {}, reclaimed {}",
                            format_bytes(before),
                            format_bytes(a),
                            format_bytes(r)
                        ),
                        _ => format!(
                            "dbSize {} -> unknown ({})",
                            format_bytes(before),
                            reason::AFTER_SIZE_UNAVAILABLE
                        ),
                    };
                    ctx.event_related(
                        &defrag,
                        Some(member_ref(&ns, &member.name)),
                        false,
                        Reason::MemberDefragmented,
                        Action::Defragment,
                        format!("defragmented {role} {}: {sizes}", member.name),
                    )
                    .await;
                }
                Err(Unfinished::Waiting(why)) => {
                    // The member is still busy (or down): the call stays recorded as sent.
                    let o = Outcome {
                        phase: DefragPhase::Running,
                        reason: reason::RUNNING,
                        message: format!(
                            "waiting for member {} to answer again after its Defragment call: \
                             {why}",
                            member.name
                        ),
                    };
                    return step(&api, &defrag, &mut status, &o, Timestamp::now(), RECHECK).await;
                }
                Err(Unfinished::Failed(e)) => {
                    entry.outcome = Some(DefragOutcome::Failed);
                    entry.reason = Some(format!("defragment failed: {e}"));
                    ctx.metrics
                        .count_defrag_member("Failed", 0, Some(took.elapsed()));
                    ctx.event_related(
                        &defrag,
                        Some(member_ref(&ns, &member.name)),
                        true,
                        Reason::MemberDefragFailed,
                        Action::Defragment,
                        format!("defragmenting {role} {} failed: {e}", member.name),
                    )
                    .await;
                }
            }
        }
    }
    entry.finished_at = Some(Time(Timestamp::now()));
    let failed_leader = role == plan::LEADER && entry.outcome == Some(DefragOutcome::Failed);
    let message = format!(
        "member {} ({role}): {}",
        entry.name,
        entry.reason.clone().unwrap_or_default()
    );
    status.members.retain(|m| m.name != entry.name);
    status.members.push(entry);
    if failed_leader {
        let o = Outcome {
            phase: DefragPhase::Failed,
            reason: reason::LEADER_FAILED,
            message: format!("the leader could not be defragmented, so the run fails: {message}"),
        };
        return finish(ctx, &api, &defrag, &mut status, &o, Timestamp::now()).await;
    }
    let o = Outcome {
        phase: DefragPhase::Running,
        reason: reason::RUNNING,
        message,
    };
    step(
        &api,
        &defrag,
        &mut status,
        &o,
        Timestamp::now(),
        Duration::ZERO,
    )
    .await
}

/// The EtcdMember a per-member Event relates to.
fn member_ref(ns: &str, name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(EtcdMember::api_version(&()).into_owned()),
        kind: Some(EtcdMember::kind(&()).into_owned()),
        namespace: Some(ns.to_string()),
        name: Some(name.to_string()),
        ..Default::default()
    }
}
