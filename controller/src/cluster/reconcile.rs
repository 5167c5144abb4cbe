//! The EtcdCluster reconcile, in four steps: observe (fresh lists, the Secrets, etcd's view;
//! [`super::observe`]), plan (pure; [`super::plan`]), act (the one step planned;
//! [`super::act`]), publish (the owned children, then the status written only when it changed;
//! [`super::children`], [`super::publish`]). Also the requeue policy. It decides nothing itself:
//! every decision is the planner's.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use api::v1alpha2::EtcdCluster;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};

use super::act::{self, Acted};
use super::plan::{self, Action, Hold, Phase, Plan};
use super::{children, cleanup, observe, publish, status};
use crate::context::Context;
use crate::etcd::access::ClusterKey;
use crate::{shell, Error};

/// How often a formed cluster's membership and health are re-checked: etcd can change without a
/// Kubernetes event (a member falls out of quorum, a learner catches up).
pub const HEALTH_RECHECK: Duration = Duration::from_secs(30);

/// Reconcile an EtcdCluster (run through [`crate::shell::reconcile_lenient`]: timing, metrics,
/// the `OwnershipConflict` Event and the error policy are the shell's): read it fresh and run one
/// pass; a cluster gone meanwhile has its cached etcd client and its metrics forgotten.
pub async fn reconcile(cluster: Arc<EtcdCluster>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    match fresh_cluster(&cluster, &ctx).await? {
        Some(fresh) => reconcile_inner(&fresh, &ctx).await,
        None => {
            ctx.etcd.forget(&ClusterKey::of(&cluster));
            if let Some(ns) = cluster.namespace() {
                ctx.metrics.forget_cluster(&ns, &cluster.name_any());
            }
            Ok(Requeue::await_change())
        }
    }
}

/// The cluster as the API has it now, not as the watch cache last saw it: the cache can lag
/// behind this operator's own status writes, and planning from a stale `status.observed` acts on
/// an old target (it removed the member the previous reconcile had just added for the new one).
async fn fresh_cluster(cluster: &EtcdCluster, ctx: &Context) -> Result<Option<EtcdCluster>, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    Ok(api.get_opt(&cluster.name_any()).await?)
}

/// One reconcile of a cluster read fresh: observe, plan, act, publish.
async fn reconcile_inner(cluster: &EtcdCluster, ctx: &Context) -> Result<Requeue, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        // Owner references garbage-collect the rest; member finalizers see the deletion; the
        // data PVCs (owned by nothing) are the cleanup finalizer's.
        return cleanup::finalize(cluster, ctx).await;
    }
    let finalized;
    let cluster = match cleanup::ensure_finalizer(cluster, ctx).await? {
        Some(updated) => {
            finalized = updated;
            &finalized
        }
        None => cluster,
    };
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;

    // Observe.
    let members = observe::members(cluster, ctx).await?;
    if act::needs_peer_auto_tls_restored(cluster, &members) {
        return act::restore_peer_auto_tls(cluster, ctx).await;
    }
    let members = observe::member_children(cluster, ctx, members).await?;
    children::ensure_services(cluster, ctx).await?;
    let cert_manager_missing = children::ensure_certificates(cluster, ctx).await?;
    let mut seen = match observe::etcd(cluster, ctx, members, cert_manager_missing).await? {
        ControlFlow::Continue(seen) => seen,
        ControlFlow::Break(requeue) => return Ok(requeue),
    };

    // Plan: the facts are fixed from here on.
    let now = Timestamp::now();
    let plan = plan::plan(&seen.observed(cluster, ctx, now));
    tracing::debug!(cluster = %seen.name, namespace = %ns, action = ?plan.action, phase = ?plan.phase, "planned");
    let mut requeue = next_check(&plan, now);

    // Persist a newly locked target before acting on it: if this action fails or the operator
    // dies half-way, the next reconcile must resume the step towards the same target, not keep
    // the old one and undo the step (a member created for 5 replicas removed again as surplus).
    let mut stored = cluster.clone();
    if plan.locked_because.is_some() && !matches!(plan.action, Action::None | Action::Wait(_)) {
        let status_api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
        let locked = status::render(cluster, &plan, None, now);
        stored = shell::write_status(&status_api, &stored, stored.status.as_ref(), &locked).await?;
    }

    // Act.
    let latched = match act::act(cluster, ctx, &plan, &mut seen).await? {
        Acted::Done {
            latched,
            requeue: sooner,
        } => {
            requeue = sooner.unwrap_or(requeue);
            latched
        }
        Acted::Stop(requeue) => return Ok(requeue),
    };

    // Publish.
    if let Some(retry) = children::keep_in_shape(cluster, ctx, &plan, &seen).await? {
        requeue = retry;
    }
    if let Some(sooner) = publish::publish(cluster, ctx, &plan, &mut seen, latched, &stored).await?
    {
        requeue = sooner;
    }
    Ok(requeue)
}

/// When to look again without a watch event: a formed cluster every [`HEALTH_RECHECK`]; a
/// seed that cannot be reached yet every [`SEED_RECHECK`]; and, whatever else, at the progress
/// deadline, so that it expires on time even when nothing else changes (a seed Pod stuck
/// Pending sends no event).
fn next_check(plan: &Plan, now: Timestamp) -> Requeue {
    let formed = plan.facts.formed;
    let mut after = match plan.phase {
        Phase::Reconciled if formed && plan.observed.replicas > 0 => Some(HEALTH_RECHECK),
        Phase::Progressing if formed => Some(HEALTH_RECHECK),
        Phase::Progressing
            if plan.observed.replicas > 0 && !matches!(plan.hold, Some(Hold::Unsupported(_))) =>
        {
            Some(SEED_RECHECK)
        }
        _ => None,
    };
    // What holds the cluster is the planner's (one precedence, [`Hold::first`]); a hold behind a
    // passed deadline or unsupported fields waits for a spec edit like the rest of the cluster.
    match &plan.hold {
        Some(Hold::TlsSecret { .. } | Hold::Auth(_)) => {
            // Referenced TLS Secrets are watched (this is the fallback for a missed event); the
            // auth Secret is read, not watched: look again soon for the one being waited on.
            after = Some(TLS_SECRET_RECHECK);
        }
        Some(Hold::CertManagerMissing) => {
            // Nothing cert-manager does wakes this cluster: ask discovery again now and then,
            // so installing cert-manager is picked up without restarting the operator.
            after = Some(CERT_MANAGER_RECHECK);
        }
        _ => {}
    }
    if plan.facts.joining.is_some() {
        // A completed member's etcd starting sends no event; the next joiner waits for it.
        after = Some(after.map_or(JOINING_RECHECK, |a| a.min(JOINING_RECHECK)));
    }
    if plan.phase == Phase::Progressing {
        if let Some(deadline) = plan.progress_deadline {
            let left = Duration::try_from(deadline.duration_since(now))
                .unwrap_or_default()
                .saturating_add(Duration::from_millis(100));
            after = Some(after.map_or(left, |a| a.min(left)));
        }
    }
    match after {
        Some(d) => Requeue::requeue(d),
        None => Requeue::await_change(),
    }
}

/// How often a seed that is not reachable yet is dialed again (its Pod's readiness changes wake
/// the reconcile sooner).
pub const SEED_RECHECK: Duration = Duration::from_secs(5);

/// How often etcd is asked again while a member that was given its initial cluster has not
/// started (the next member joins only after it).
pub const JOINING_RECHECK: Duration = Duration::from_millis(300);

/// How often a missing or unusable TLS Secret is read again.
pub const TLS_SECRET_RECHECK: Duration = Duration::from_secs(10);

/// How often a cluster held for a missing cert-manager looks for it again.
pub const CERT_MANAGER_RECHECK: Duration = Duration::from_secs(15);

#[cfg(test)]
mod tests;
