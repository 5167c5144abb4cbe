//! The EtcdDefragPolicy controller: stamps EtcdDefrag runs `<policy>-<unix seconds of the tick>`
//! (owned by the policy, labelled with the policy and the cluster, carrying its rule and TTL) at
//! the ticks of its cron schedule, as the reference's released policy does (`suspend` without
//! backfill, `concurrencyPolicy`, `startingDeadlineSeconds`, a bounded missed-tick walk,
//! `historyLimit`), and — our extension — every `checkInterval` when a member passes the policy's
//! rule as the run would judge it, so a check that finds nothing creates nothing. The decisions
//! are [`plan`]'s; the runs themselves are the EtcdDefrag controller's ([`super::run`]).

pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use api::conditions::defrag_policy::{ACTIVE, READY};
use api::conditions::reason;
use api::v1alpha2::{
    DefragPhase, EtcdCluster, EtcdDefrag, EtcdDefragPolicy, EtcdDefragPolicyStatus, LocalReference,
};
use chrono::{DateTime, Utc};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};

use super::run::observe::observe;
use crate::conditions::set_condition;
use crate::context::Context;
use crate::cron::{to_chrono, to_time, Schedule};
use crate::etcd::access::{Access, User};
use crate::events::{Action, Reason};
use crate::Error;
use plan::{
    active_condition, check_due, finished, first_selected, history_to_delete, new_run, passed_over,
    tick, Run, Tick, TickFacts, POLICY_LABEL,
};

/// How often a policy with an unfinished run looks again (its end feeds the history).
const ACTIVE_RECHECK: Duration = Duration::from_secs(15);

/// Create the run; an existing one of the same second counts as created (the tick was acted on
/// by a reconcile whose status write did not land).
async fn create_run(
    ctx: &Context,
    policy: &EtcdDefragPolicy,
    runs: &Api<EtcdDefrag>,
    mine: &mut Vec<EtcdDefrag>,
    at: DateTime<Utc>,
    announce: Reason,
    why: String,
) -> Result<(), Error> {
    let run = new_run(policy, at)?;
    let name = run.name_any();
    match runs.create(&PostParams::default(), &run).await {
        Ok(created) => {
            mine.push(created);
            tracing::info!(policy = %policy.name_any(), run = %name, %why, "created defrag run");
            let verb = if announce == Reason::StampedRun {
                "stamped"
            } else {
                "created"
            };
            ctx.event(
                policy,
                false,
                announce,
                Action::Create,
                format!("{verb} EtcdDefrag {name}: {why}"),
            )
            .await;
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Check the members against the rule: `Ok(Some((member, why)))` when one qualifies,
/// `Ok(None)` when none does, `Err(message)` when the check could not be made.
async fn check(
    ctx: &Context,
    ns: &str,
    policy: &EtcdDefragPolicy,
) -> Result<Result<Option<(String, String)>, String>, Error> {
    let cluster_name = &policy.spec.cluster_ref.name;
    let Some(cluster) = Api::<EtcdCluster>::namespaced(ctx.client.clone(), ns)
        .get_opt(cluster_name)
        .await?
    else {
        return Ok(Err(format!(
            "EtcdCluster {cluster_name} (spec.clusterRef.name) does not exist in namespace {ns}"
        )));
    };
    let access = match Access::load_or_why(&ctx.client, &ctx.metrics, &cluster, User::Root).await? {
        Ok(x) => x,
        Err(message) => return Ok(Err(message)),
    };
    let (observed, _, _) = observe(ctx, ns, &cluster, &access).await?;
    let sizes: Vec<(String, i64, i64, i64)> = observed
        .iter()
        .filter_map(|m| {
            m.status
                .as_ref()
                .ok()
                .map(|s| (m.name.clone(), s.db_size, s.db_size_in_use, m.quota))
        })
        .collect();
    if sizes.is_empty() {
        return Ok(Err(format!(
            "no member of EtcdCluster {cluster_name} answered its Status call"
        )));
    }
    let rule = policy.spec.rule.clone().unwrap_or_default();
    Ok(Ok(first_selected(&rule, &sizes)))
}

pub async fn reconcile(policy: Arc<EtcdDefragPolicy>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let ns = policy.namespace().ok_or(Error::NoNamespace)?;
    let name = policy.name_any();
    let policies: Api<EtcdDefragPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let runs: Api<EtcdDefrag> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(policy) = policies.get_opt(&name).await? else {
        return Ok(Requeue::await_change());
    };
    let now = Utc::now();
    let mut status = policy.status.clone().unwrap_or_default();
    status.observed_generation = policy.metadata.generation;
    let cron = match policy.spec.schedule.as_deref() {
        None => None,
        Some(expression) => match Schedule::parse(expression, policy.spec.time_zone_name()) {
            Ok(c) => Some(c),
            Err(e) => {
                let why = e.to_string();
                set_conditions(&policy, &mut status, false, reason::INVALID_SCHEDULE, &why);
                ctx.event(&policy, true, Reason::InvalidSchedule, Action::Parse, why)
                    .await;
                write(&policies, &policy, &status).await?;
                return Ok(Requeue::await_change());
            }
        },
    };
    let interval = policy.spec.check_interval_seconds();

    let uid = policy.uid();
    let mut mine: Vec<EtcdDefrag> = runs
        .list(&ListParams::default().labels(&format!("{POLICY_LABEL}={name}")))
        .await?
        .items
        .into_iter()
        .filter(|d| crate::controller_uid(d) == uid)
        .collect();
    let active: Vec<String> = mine
        .iter()
        .filter(|d| !finished(d))
        .map(|d| d.name_any())
        .collect();

    let mut created = false;
    if let Some(cron) = &cron {
        let since = status
            .last_schedule_time
            .as_ref()
            .or(policy.metadata.creation_timestamp.as_ref())
            .map(to_chrono)
            .unwrap_or(now);
        let facts = TickFacts {
            since,
            now,
            suspended: policy.spec.suspended(),
            resuming: !policy.spec.suspended() && was_suspended(&policy),
            concurrency: policy.spec.concurrency(),
            starting_deadline_seconds: policy.spec.starting_deadline_seconds,
            active: &active,
        };
        let decided = tick(cron, &facts);
        act_on_tick(ctx.as_ref(), &policy, &runs, &mut mine, &decided, &active).await?;
        if matches!(decided, Tick::Stamp { .. }) {
            status.last_run_time = Some(to_time(now));
            created = true;
        }
        if let Some(at) = decided.consumed() {
            status.last_schedule_time = Some(to_time(at));
        }
    }

    let mut last_check_note = None;
    let last_check = status.last_check_time.as_ref().map(to_chrono);
    let check_now = interval.is_some_and(|i| !created && check_due(last_check, i, now));
    if !policy.spec.suspended() && check_now && active.is_empty() {
        status.last_check_time = Some(to_time(now));
        match check(ctx.as_ref(), &ns, &policy).await? {
            Ok(Some((member, why))) => {
                create_run(
                    ctx.as_ref(),
                    &policy,
                    &runs,
                    &mut mine,
                    now,
                    Reason::DefragCreated,
                    format!("member {member}: {why}"),
                )
                .await?;
                status.last_run_time = Some(to_time(now));
                last_check_note = Some(format!(
                    "the last check found member {member} worth a defrag ({why})"
                ));
            }
            Ok(None) => {
                last_check_note =
                    Some("the last check found no member the rule selects".to_string());
            }
            Err(message) => {
                last_check_note = Some(format!("the last check could not be made: {message}"));
            }
        }
    }

    let history: Vec<Run> = mine
        .iter()
        .map(|d| Run {
            name: d.name_any(),
            created: d
                .metadata
                .creation_timestamp
                .as_ref()
                .map(to_chrono)
                .unwrap_or(now),
            phase: d.status.as_ref().and_then(|s| s.phase),
        })
        .collect();
    for gone in history_to_delete(&history, policy.spec.history()) {
        match runs.delete(&gone, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(policy = %name, run = %gone, "deleted defrag run beyond the history limit");
        mine.retain(|d| d.name_any() != gone);
    }

    status.active = mine
        .iter()
        .filter(|d| !finished(d))
        .map(|d| LocalReference { name: d.name_any() })
        .collect();
    status.active.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(t) = mine
        .iter()
        .filter_map(|d| d.status.as_ref())
        .filter(|s| s.phase == Some(DefragPhase::Complete))
        .filter_map(|s| s.completed_at.clone())
        .max_by_key(|t| t.0)
    {
        status.last_successful_time = Some(t);
    }

    let next_fire = cron.as_ref().and_then(|c| c.next_after(now));
    let next_check = interval.map(|i| {
        status
            .last_check_time
            .as_ref()
            .map(to_chrono)
            .unwrap_or(now)
            + chrono::Duration::seconds(i)
    });
    let mut parts = Vec::new();
    if let Some(t) = next_fire {
        parts.push(format!("next scheduled run at {t}"));
    }
    if let Some(t) = next_check {
        parts.push(format!("next check at {t}"));
    }
    if let Some(note) = last_check_note.or_else(|| previous_note(&policy)) {
        parts.push(note);
    }
    let (ok, reason, message) = active_condition(policy.spec.suspended(), None, parts.join("; "));
    set_conditions(&policy, &mut status, ok, reason, &message);
    if policy.status.as_ref() != Some(&status) {
        write(&policies, &policy, &status).await?;
    }

    let until = |t: DateTime<Utc>| {
        (t - now)
            .to_std()
            .unwrap_or(Duration::from_secs(1))
            .max(Duration::from_secs(1))
    };
    let mut wait = Duration::from_secs(3600);
    if !policy.spec.suspended() {
        for t in next_fire.into_iter().chain(next_check) {
            wait = wait.min(until(t));
        }
    }
    if !status.active.is_empty() {
        wait = wait.min(ACTIVE_RECHECK);
    }
    Ok(Requeue::requeue(wait))
}

/// Perform the schedule's decision: stamp the run, or announce why the tick was skipped.
async fn act_on_tick(
    ctx: &Context,
    policy: &EtcdDefragPolicy,
    runs: &Api<EtcdDefrag>,
    mine: &mut Vec<EtcdDefrag>,
    decided: &Tick,
    active: &[String],
) -> Result<(), Error> {
    match decided {
        Tick::Nothing => {}
        Tick::Stamp { at, walk } => {
            let why = format!("the tick at {at}{}", passed_over(walk));
            create_run(ctx, policy, runs, mine, *at, Reason::StampedRun, why).await?;
        }
        Tick::Forbidden { at, walk } => {
            let message = format!(
                "skipped the tick at {at}: EtcdDefrag {} of this policy has not finished and                  spec.concurrencyPolicy is Forbid (set Allow to queue runs behind it){}",
                active.join(", "),
                passed_over(walk)
            );
            ctx.event(
                policy,
                false,
                Reason::ConcurrencyForbidden,
                Action::Skip,
                message,
            )
            .await;
        }
        Tick::Late { at, late_by, walk } => {
            let message = format!(
                "skipped the tick at {at}: acted on {late_by}s after it, later than                  spec.startingDeadlineSeconds {} allows; the next tick runs as scheduled{}",
                policy.spec.starting_deadline_seconds.unwrap_or_default(),
                passed_over(walk)
            );
            ctx.event(policy, true, Reason::MissedSchedule, Action::Skip, message)
                .await;
        }
        Tick::Resumed { at, walk } => {
            tracing::info!(policy = %policy.name_any(), tick = %at, passed_over = walk.passed_over, "resumed: ticks missed while suspended are not backfilled");
        }
    }
    Ok(())
}

/// Whether the last reconcile saw the policy suspended: its `Active` condition (or, written by
/// an operator before it had one, `Ready`) says `Suspended`.
fn was_suspended(policy: &EtcdDefragPolicy) -> bool {
    let conditions = policy.status.as_ref().map(|s| s.conditions.as_slice());
    let reason_of = |type_: &str| {
        conditions
            .into_iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .map(|c| c.reason.as_str())
    };
    reason_of(ACTIVE)
        .or_else(|| reason_of(READY))
        .is_some_and(|r| r == reason::SUSPENDED)
}

/// The last check's note of the current Ready message, kept until the next check.
fn previous_note(policy: &EtcdDefragPolicy) -> Option<String> {
    policy
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == READY)?
        .message
        .split("; ")
        .find(|p| p.starts_with("the last check"))
        .map(str::to_string)
}

/// Set `Active` (the reference's) and `Ready` (ours, which stays True while suspended).
fn set_conditions(
    policy: &EtcdDefragPolicy,
    status: &mut EtcdDefragPolicyStatus,
    active: bool,
    reason: &str,
    message: &str,
) {
    let generation = policy.metadata.generation;
    let now = Timestamp::now();
    let ready = active || reason == reason::SUSPENDED;
    for (type_, ok) in [(ACTIVE, active), (READY, ready)] {
        set_condition(
            &mut status.conditions,
            type_,
            ok,
            reason,
            message.to_string(),
            generation,
            now,
        );
    }
}

async fn write(
    api: &Api<EtcdDefragPolicy>,
    policy: &EtcdDefragPolicy,
    status: &EtcdDefragPolicyStatus,
) -> Result<(), Error> {
    crate::shell::write_status(api, policy, policy.status.as_ref(), status)
        .await
        .map(drop)
}
