//! The end of a reconcile: the metrics, the status rendered from the plan (with the volume and
//! alarm conditions), root auth turned on once the cluster is ready for it, and the status
//! written only when it changed, with a Warning Event when the cluster parks or refuses a
//! rollout. Membership is never changed here.

use std::time::Duration;

use api::conditions::cluster as ctype;
use api::v1alpha2::{EtcdCluster, EtcdClusterStatus, EtcdMember};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};

use super::observe::{self, Seen};
use super::plan::Plan;
use super::roster::{self, MemberFacts};
use super::{alarms, auth, auto_recovery, status, volumes};
use crate::context::Context;
use crate::etcd::{Alarm, Etcd};
use crate::events::{Action, Reason};
use crate::metrics::ConditionSample;
use crate::{shell, Error};

/// Record the metrics, render and write the status after `plan` (its step latched
/// `latched`, if any). `stored` is the cluster as last written, and the written one after a
/// status write. Returns a requeue when root auth was just turned on (the next reconcile logs
/// in).
pub(super) async fn publish(
    cluster: &EtcdCluster,
    ctx: &Context,
    plan: &Plan,
    seen: &mut Seen,
    latched: Option<String>,
    stored: &mut EtcdCluster,
) -> Result<Option<Requeue>, Error> {
    let mut requeue = None;
    let etcd_counts = seen.etcd_view.members().map(|m| {
        let learners = m.iter().filter(|e| e.is_learner).count() as i64;
        (m.len() as i64 - learners, learners)
    });
    ctx.metrics.record_cluster(
        &seen.ns,
        &seen.name,
        i64::from(plan.facts.ready_members),
        etcd_counts,
    );
    let members = &seen.members.items;
    let mut new_status = status::render(cluster, plan, latched, Timestamp::now());
    if let Some(size) = plan.observed.storage.as_ref().map(|s| &s.size) {
        volumes::set_volumes_condition(
            &mut new_status.conditions,
            members,
            size,
            cluster.metadata.generation,
            Timestamp::now(),
        );
    }
    // A raised alarm fails every member's /health, so no Pod is Ready and `etcd` is None:
    // the alarms are then read from the voters' Pods directly.
    // Bounded: Pods that are not Ready because they are down must not slow the reconcile.
    let mut raised = None;
    if let Some(client) = seen.etcd.as_mut() {
        raised = show_alarms(cluster, ctx, client, members, &mut new_status).await;
    } else if seen.formed && !seen.auth.cannot_log_in() {
        let urls = observe::unready_voter_endpoints(cluster, members, &seen.members.views);
        if !urls.is_empty() {
            let read = async {
                if let Ok(mut client) = seen.access.dial(&urls).await {
                    raised = show_alarms(cluster, ctx, &mut client, members, &mut new_status).await;
                }
            };
            if tokio::time::timeout(UNREADY_ALARM_READ, read)
                .await
                .is_err()
            {
                tracing::debug!(cluster = %seen.name, "no unready voter answered the alarm list");
            }
        }
    }
    // A cluster annotated for it gets its EtcdRecovery once lost long enough; a failure to
    // create it is retried at the next reconcile and never holds the status.
    if let Err(e) = auto_recovery::start(cluster, ctx, &new_status, &seen.members.views).await {
        tracing::warn!(cluster = %seen.name, error = %e, "cannot create the automatic EtcdRecovery");
    }
    if seen.auth.wanted && !seen.auth.on && auth::ready_to_enable_auth(plan) {
        if let (Some(client), Some(creds)) = (seen.etcd.as_mut(), seen.auth.creds.as_ref()) {
            auth::enable_auth(cluster, ctx, client, creds).await?;
            ctx.etcd.forget(&seen.key);
            new_status.auth_enabled = Some(true);
            requeue = Some(Requeue::requeue(Duration::from_millis(200)));
        }
    }
    let new_status = with_roster(ctx, seen, stored.status.as_ref(), new_status, raised);
    record_metrics(ctx, cluster, seen, &new_status);
    if stored.status.as_ref() != Some(&new_status) {
        let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &seen.ns);
        let written =
            shell::write_status(&api, stored, stored.status.as_ref(), &new_status).await?;
        ctx.counters_written(seen.key.as_str(), Some(std::time::Instant::now()));
        let before = std::mem::replace(stored, written);
        announce_parking(cluster, ctx, before.status.as_ref(), &new_status).await;
    }
    Ok(requeue)
}

/// `status.members[]` and `status.leader` from the members' answers and the alarm list
/// (`raised`, `None` when it could not be read), held back while only the counters moved and
/// they are not due ([`roster::publishable`]).
fn with_roster(
    ctx: &Context,
    seen: &Seen,
    prior: Option<&EtcdClusterStatus>,
    new_status: EtcdClusterStatus,
    raised: Option<Vec<(u64, Alarm)>>,
) -> EtcdClusterStatus {
    let facts: Vec<MemberFacts<'_>> = seen
        .members
        .items
        .iter()
        .zip(&seen.members.views)
        .map(|(m, v)| MemberFacts {
            name: &v.name,
            recorded_id: m.status.as_ref().and_then(|s| s.member_id.as_deref()),
            pod_ready: v.pod.as_ref().is_some_and(|p| p.ready),
            answer: seen.answers.get(&v.name),
        })
        .collect();
    let prior_members = prior.map(|s| s.members.as_slice()).unwrap_or_default();
    let fresh = roster::roster(&facts, raised.as_deref(), prior_members);
    let due = ctx.counters_due(seen.key.as_str(), roster::COUNTERS_REFRESH);
    roster::publishable(prior, new_status, fresh, due)
}

/// What the alert rules read beside the member counts: the members the spec asks for, every
/// condition of the status about to be written, and the TLS certificates' expiry.
fn record_metrics(ctx: &Context, cluster: &EtcdCluster, seen: &Seen, status: &EtcdClusterStatus) {
    let metrics = &ctx.metrics;
    metrics.record_desired_members(&seen.ns, &seen.name, i64::from(cluster.spec.replicas));
    let conditions: Vec<ConditionSample<'_>> = status
        .conditions
        .iter()
        .map(|c| ConditionSample {
            type_: &c.type_,
            reason: &c.reason,
            status_true: c.status == "True",
        })
        .collect();
    metrics.record_conditions(&seen.ns, &seen.name, &conditions);
    metrics.record_certificates(&seen.ns, &seen.name, &seen.tls.expiries);
}

/// How long a reconcile tries to read the alarms from voters whose Pods are not Ready.
const UNREADY_ALARM_READ: Duration = Duration::from_secs(2);

/// etcd's NOSPACE and CORRUPT alarms as the `Alarm` condition, with an Event when one is
/// raised; returns the alarm list. A failed alarm read leaves the condition as it was.
async fn show_alarms(
    cluster: &EtcdCluster,
    ctx: &Context,
    client: &mut Etcd,
    members: &[EtcdMember],
    new_status: &mut api::v1alpha2::EtcdClusterStatus,
) -> Option<Vec<(u64, Alarm)>> {
    let alarms = match client.alarms().await {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(cluster = %cluster.name_any(), error = %e, "could not list etcd alarms");
            return None;
        }
    };
    let names = members
        .iter()
        .filter_map(|m| {
            let id = m.status.as_ref()?.member_id.as_deref()?;
            Some((crate::etcd::parse_id(id)?, m.name_any()))
        })
        .collect();
    let was = new_status
        .conditions
        .iter()
        .find(|c| c.type_ == ctype::ALARM)
        .map(|c| c.reason.clone());
    alarms::set_alarm_condition(
        &mut new_status.conditions,
        &alarms,
        &names,
        cluster.metadata.generation,
        Timestamp::now(),
    );
    if let Some(c) = new_status
        .conditions
        .iter()
        .find(|c| c.type_ == ctype::ALARM && c.status == "True")
    {
        if was.as_deref() != Some(c.reason.as_str()) {
            ctx.event(
                cluster,
                true,
                Reason::EtcdAlarm,
                Action::AlarmList,
                c.message.clone(),
            )
            .await;
        }
    }
    Some(alarms)
}

/// A Warning Event the moment a cluster parks at its deadline or refuses a rollout, where
/// `kubectl describe` shows it.
async fn announce_parking(
    cluster: &EtcdCluster,
    ctx: &Context,
    old: Option<&EtcdClusterStatus>,
    new: &EtcdClusterStatus,
) {
    let available = |s: Option<&EtcdClusterStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == ctype::AVAILABLE))
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let Some((why, message)) = available(Some(new)) else {
        return;
    };
    if let Some(parked) = Reason::parked(&why) {
        if available(old).map(|(r, _)| r) != Some(why.clone()) {
            ctx.event(cluster, true, parked, Action::ProgressDeadline, message)
                .await;
        }
    }
    // A refused rollout: once, when the cluster starts reporting it.
    let progressing = |s: Option<&EtcdClusterStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == ctype::PROGRESSING))
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    if let Some((why, message)) = progressing(Some(new)) {
        if let Some(refused) = Reason::rollout_refused(&why) {
            if progressing(old).map(|(r, _)| r) != Some(why.clone()) {
                ctx.event(cluster, true, refused, Action::Rollout, message)
                    .await;
            }
        }
    }
}
