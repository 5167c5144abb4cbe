//! The EtcdCluster reconcile, in four steps: observe (the members, their Pods and PVCs, the
//! Secrets, etcd's view; [`super::observe`]), plan (pure; [`super::plan`]), act (the one step
//! planned; [`super::act`]), publish (the owned children, then the status written only when it
//! changed; [`super::children`], [`super::publish`]). Also the requeue policy, and which reads
//! may come from the watch caches ([`caches`]: the cluster, its members, Services and PDB, read
//! fresh only when the cache may be behind this process's own writes). It decides nothing
//! itself: every decision is the planner's.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};

use super::act::{self, Acted};
use super::plan::{self, Action, Hold, Phase, Plan};
use super::{children, cleanup, observe, publish, status};
use crate::context::Context;
use crate::etcd::access::ClusterKey;
use crate::{shell, Error};

pub mod caches;

pub use caches::Caches;
use caches::{Own, OwnWrites, Read};

/// How often a formed cluster's membership and health are re-checked: etcd can change without a
/// Kubernetes event (a member falls out of quorum, a learner catches up).
pub const HEALTH_RECHECK: Duration = Duration::from_secs(30);

/// Reconcile an EtcdCluster (run through [`crate::shell::reconcile_lenient`]: timing, metrics,
/// the `OwnershipConflict` Event and the error policy are the shell's): read it (from the cache
/// when the cache holds this process's own writes, see [`caches`]) and run one pass; a cluster
/// gone meanwhile has its cached etcd client and its metrics forgotten.
pub async fn reconcile(
    cluster: Arc<EtcdCluster>,
    ctx: Arc<Context>,
    caches: Arc<Caches>,
) -> Result<Requeue, Error> {
    if !caches.ready().await {
        // A watch is gone: the controller is stopping.
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    }
    let mut own = caches.own(&cluster);
    let read =
        match caches::cluster_read(own.cluster.as_ref(), cluster.resource_version().as_deref()) {
            Read::Cache => Some(cluster.as_ref().clone()),
            Read::Fresh => {
                let fresh = fresh_cluster(&cluster, &ctx).await?;
                // A fresh read holds every write this process made before it.
                own.cluster = fresh
                    .as_ref()
                    .and_then(|c| c.resource_version())
                    .map(OwnWrites::In)
                    .or(Some(OwnWrites::Unknown));
                fresh
            }
        };
    match read {
        Some(current) => {
            let result = reconcile_inner(&current, &ctx, &caches, &mut own).await;
            if result.is_err() {
                own = Own::after_failure();
            }
            caches.record(&current, own);
            result
        }
        None => {
            let key = ClusterKey::of(&cluster);
            ctx.etcd.forget(&key);
            ctx.counters_written(key.as_str(), None);
            caches.forget(&cluster);
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

/// The cluster's members: from the cache unless this process may have written one the cache
/// has not been seen to hold ([`caches::members_read`]); a fresh list that the cache matches
/// makes the cache trusted again.
async fn members(
    cluster: &EtcdCluster,
    ctx: &Context,
    caches: &Caches,
    own: &mut Own,
) -> Result<Vec<EtcdMember>, Error> {
    let cached = caches.members(cluster);
    if let (Read::Cache, Some(cached)) = (caches::members_read(own.members_written), &cached) {
        return Ok(cached.clone());
    }
    let fresh = observe::members(cluster, ctx).await?;
    own.members_written = !cached.is_some_and(|c| caches::cache_holds(&fresh, &c));
    Ok(fresh)
}

/// One reconcile of a cluster: observe, plan, act, publish. `own` is kept up to date with what
/// it writes, for the next reconcile's reads.
async fn reconcile_inner(
    cluster: &EtcdCluster,
    ctx: &Context,
    caches: &Caches,
    own: &mut Own,
) -> Result<Requeue, Error> {
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
    let members = members(cluster, ctx, caches, own).await?;
    if act::needs_peer_auto_tls_restored(cluster, &members) {
        // A metadata patch, outside the status writer.
        own.cluster = Some(OwnWrites::Unknown);
        return act::restore_peer_auto_tls(cluster, ctx).await;
    }
    let members = observe::member_children(cluster, ctx, members).await?;
    children::ensure_services(cluster, ctx, caches).await?;
    let cert_manager_missing = children::ensure_certificates(cluster, ctx).await?;
    let mut seen = match observe::etcd(cluster, ctx, members, cert_manager_missing).await? {
        ControlFlow::Continue(seen) => seen,
        ControlFlow::Break(requeue) => {
            // Root auth's state was latched in the status, outside the status writer.
            own.cluster = Some(OwnWrites::Unknown);
            return Ok(requeue);
        }
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
        own.cluster = stored.resource_version().map(OwnWrites::In);
    }
    if !matches!(plan.action, Action::None | Action::Wait(_)) {
        // The step may create, delete or patch a member.
        own.members_written = true;
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
    let kept = children::keep_in_shape(cluster, ctx, caches, &plan, &seen).await?;
    own.members_written |= kept.members_written;
    if let Some(retry) = kept.retry {
        requeue = retry;
    }
    let published = publish::publish(cluster, ctx, &plan, &mut seen, latched, &mut stored).await?;
    if stored.resource_version() != cluster.resource_version() {
        // The status writer returned the cluster as written: the next reconcile may plan from
        // the cache once it shows this version.
        own.cluster = stored.resource_version().map(OwnWrites::In);
    }
    if let Some(sooner) = published {
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
