//! What a defrag run does to its cluster and its status: write a step, finish the run (count it,
//! announce it, disarm NOSPACE when safe), send a member's one `Defragment` call and wait for the
//! member to answer again. It decides nothing itself: [`super::plan`] does.

use std::time::{Duration, Instant};

use api::conditions::reason;
use api::quantity::format_bytes;
use api::v1alpha2::{DefragOutcome, DefragPhase, EtcdCluster, EtcdDefrag, EtcdDefragStatus};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};

use super::observe::Member;
use super::plan::{self, render, MemberObservation, Outcome};
use super::{write, MEMBER_RPC_TIMEOUT, RECHECK, RETRY_PAUSE, STATUS_TIMEOUT};
use crate::context::Context;
use crate::etcd::access::Access;
use crate::etcd::{format_id, Alarm, Etcd, MemberStatus};
use crate::events::{Action, Reason};
use crate::Error;

/// Write the status after a non-terminal step and look again after `again` (at once for zero).
pub(super) async fn step(
    api: &Api<EtcdDefrag>,
    defrag: &EtcdDefrag,
    status: &mut EtcdDefragStatus,
    o: &Outcome,
    now: Timestamp,
    again: Duration,
) -> Result<Requeue, Error> {
    let before = status.clone();
    render(defrag, status, o, now);
    if defrag.status.as_ref() != Some(status) || before != *status {
        write(api, defrag, status).await?;
    }
    Ok(if again.is_zero() {
        Requeue::requeue(Duration::from_millis(100))
    } else {
        Requeue::requeue(again)
    })
}

/// Write the status of a run that waits (its `DefragChecked` condition False: queued behind
/// another run, or the cluster not healthy) and look again after [`RECHECK`]; a new wait is
/// announced with a `DefragDeferred` Event (the reference's), a continuing one is not repeated.
pub(super) async fn defer(
    ctx: &Context,
    api: &Api<EtcdDefrag>,
    defrag: &EtcdDefrag,
    status: &mut EtcdDefragStatus,
    o: &Outcome,
    now: Timestamp,
) -> Result<Requeue, Error> {
    let announce = plan::newly_deferred(status, o.reason);
    let requeue = step(api, defrag, status, o, now, RECHECK).await?;
    if announce {
        ctx.event(
            defrag,
            false,
            Reason::DefragDeferred,
            Action::Defragment,
            o.message.clone(),
        )
        .await;
    }
    Ok(requeue)
}

/// Write a terminal status, count the run and announce it.
pub(super) async fn finish(
    ctx: &Context,
    api: &Api<EtcdDefrag>,
    defrag: &EtcdDefrag,
    status: &mut EtcdDefragStatus,
    o: &Outcome,
    now: Timestamp,
) -> Result<Requeue, Error> {
    render(defrag, status, o, now);
    write(api, defrag, status).await?;
    let outcome = if o.phase == DefragPhase::Complete {
        "Complete"
    } else {
        "Failed"
    };
    let took = status
        .started_at
        .as_ref()
        .and_then(|s| Duration::try_from(now.duration_since(s.0)).ok());
    ctx.metrics.count_defrag_run(outcome, took);
    ctx.event(
        defrag,
        o.phase != DefragPhase::Complete,
        if o.phase == DefragPhase::Complete {
            Reason::DefragComplete
        } else {
            Reason::DefragFailed
        },
        Action::Defragment,
        o.message.clone(),
    )
    .await;
    match defrag.spec.ttl_seconds_after_finished {
        Some(ttl) => Ok(Requeue::requeue(Duration::from_secs(
            u64::try_from(ttl).unwrap_or(0),
        ))),
        None => Ok(Requeue::await_change()),
    }
}

/// Every member is processed: disarm NOSPACE when every member is below the quota now, then
/// end the run (Failed when a member failed).
#[allow(clippy::too_many_arguments)]
pub(super) async fn complete(
    ctx: &Context,
    api: &Api<EtcdDefrag>,
    defrag: &EtcdDefrag,
    cluster: &EtcdCluster,
    status: &mut EtcdDefragStatus,
    members: &[MemberObservation],
    conns: &[Member],
    alarms: &[(u64, Alarm)],
    access: &Access,
    now: Timestamp,
) -> Result<Requeue, Error> {
    let nospace: Vec<u64> = alarms
        .iter()
        .filter(|(_, a)| *a == Alarm::NoSpace)
        .map(|(id, _)| *id)
        .collect();
    let stays = plan::nospace_stays(members);
    let mut note = String::new();
    if !nospace.is_empty() {
        if let Some(why) = stays {
            note = format!(
                "; the NOSPACE alarm stays raised: {why} (delete data and compact, or raise \
                 spec.options.quotaBackendBytes and let the members roll)"
            );
        } else {
            let Some(url) = conns.first().map(|c| c.url.clone()) else {
                return Ok(Requeue::requeue(RECHECK));
            };
            let mut client = access.dial_with_timeout(&[url], MEMBER_RPC_TIMEOUT).await?;
            for id in &nospace {
                client.disarm_nospace(*id).await?;
            }
            let ids: Vec<String> = nospace.iter().map(|id| format_id(*id)).collect();
            note = format!(
                "; disarmed the NOSPACE alarm ({}), writes are accepted again",
                ids.join(", ")
            );
            tracing::info!(cluster = %cluster.name_any(), "disarmed NOSPACE after defragmentation");
            let message = format!(
                "every member's dbSize is below the quota it runs with after EtcdDefrag {}: \
                 disarmed the NOSPACE alarm ({}); etcd accepts writes again",
                defrag.name_any(),
                ids.join(", ")
            );
            ctx.event(
                cluster,
                false,
                Reason::AlarmDisarmed,
                Action::AlarmDisarm,
                message.clone(),
            )
            .await;
            ctx.event(
                defrag,
                false,
                Reason::AlarmDisarmed,
                Action::AlarmDisarm,
                message,
            )
            .await;
        }
    }
    let failed: Vec<String> = status
        .members
        .iter()
        .filter(|m| m.outcome == Some(DefragOutcome::Failed))
        .map(|m| m.name.clone())
        .collect();
    let defragmented = status
        .members
        .iter()
        .filter(|m| m.outcome == Some(DefragOutcome::Defragmented))
        .count();
    let reclaimed: i64 = status
        .members
        .iter()
        .filter_map(|m| m.reclaimed_bytes)
        .sum();
    let o = if failed.is_empty() {
        Outcome {
            phase: DefragPhase::Complete,
            reason: reason::COMPLETE,
            message: format!(
                "defragmented {defragmented} of {} member(s), reclaimed {}{note}",
                status.members.len(),
                format_bytes(reclaimed)
            ),
        }
    } else {
        Outcome {
            phase: DefragPhase::Failed,
            reason: reason::MEMBERS_FAILED,
            message: format!(
                "defragmenting {} failed (see status.members); reclaimed {}{note}",
                failed.join(", "),
                format_bytes(reclaimed)
            ),
        }
    };
    finish(ctx, api, defrag, status, &o, now).await
}

/// Why a member's outcome is not known yet, or is a failure.
pub(super) enum Unfinished {
    /// The member did not answer again within [`AWAIT_ANSWER`]: a later reconcile looks again.
    Waiting(String),
    Failed(String),
}

/// How a member's one `Defragment` call ended.
pub(super) enum Ended {
    /// It answered; the member's status afterwards.
    Answered(MemberStatus),
    /// It answered, but the member's `Status` failed afterwards (why): defragmented, size
    /// unknown (`AfterSizeUnavailable`).
    SizeUnavailable(String),
    /// It ended without an answer (why); the member's status once it answered again.
    Unanswered(MemberStatus, String),
}

/// Send the one `Defragment` call of a member, bounded by `limit`, and say how it ended. Such a
/// call is never repeated: etcd ignores the caller giving up and runs the defragmentation to
/// its end, so a second call would queue a second one behind it. The member is waited for
/// instead.
pub(super) async fn defragment(
    client: &mut Etcd,
    limit: Duration,
    url: &str,
    access: &Access,
) -> Result<Ended, Unfinished> {
    let unanswered = match tokio::time::timeout(limit, client.defragment()).await {
        Ok(Ok(())) => {
            return Ok(match client.member_status().await {
                Ok(after) => Ended::Answered(after),
                Err(e) => Ended::SizeUnavailable(e.to_string()),
            })
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {}s", limit.as_secs_f32()),
    };
    tracing::info!(url, why = %unanswered, "the Defragment call ended without an answer; waiting for the member");
    let after = await_answer(url, access).await?;
    Ok(Ended::Unanswered(after, unanswered))
}

/// How long one reconcile waits for a member to answer again after its `Defragment` call.
const AWAIT_ANSWER: Duration = Duration::from_secs(60);

/// Wait until the member at `url` serves a read and answers `Status` again: a defragmenting
/// member holds its backend locked, so a read waits until the defragmentation is over.
pub(super) async fn await_answer(url: &str, access: &Access) -> Result<MemberStatus, Unfinished> {
    let deadline = Instant::now() + AWAIT_ANSWER;
    loop {
        let answer = async {
            let mut client = access
                .dial_with_timeout(&[url.to_string()], STATUS_TIMEOUT)
                .await?;
            client.serializable_read().await?;
            client.member_status().await
        }
        .await;
        let last = match answer {
            Ok(status) => return Ok(status),
            Err(e) => e.stable_message(),
        };
        if Instant::now() >= deadline {
            return Err(Unfinished::Waiting(last));
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}
