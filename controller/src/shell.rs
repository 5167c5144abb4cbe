//! The shell every controller shares around its own I/O: the one reconcile wrapper and the one
//! status writer.
//!
//! Every reconcile goes through [`reconcile`] (or [`reconcile_lenient`] for kinds watched as
//! [`Lenient`] objects): it times the reconcile, records the reconcile metrics under the
//! controller's name, turns an ownership conflict into a Warning Event where the controller
//! asks for it, and reports an object the operator cannot decode. Every failed reconcile is
//! retried after the delay [`error_policy`] reads from one table ([`CONTROLLERS`]), by
//! controller and kind of error.
//!
//! A status write is a JSON merge patch guarded by the `resourceVersion` the reconcile read: a
//! concurrent writer turns it into a conflict that the next reconcile retries on fresh data,
//! never a decision made twice on stale status. Keys the new status drops are cleared with
//! `null` at every depth (RFC 7386 would otherwise keep them).
//!
//! This module holds no controller's decisions: it must not name a controller's module, read an
//! object other than the one it writes, or decide what the status says.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Resource, ResourceExt};

use crate::context::Context;
use crate::events::{Action, Reason};
use crate::lenient::{self, Lenient};
use crate::Error;

/// One controller as the wrapper sees it: the name its metrics carry, the kind its logs name,
/// its back-offs, and whether an ownership conflict is announced on the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Controller {
    /// The `controller` label of `etcd_operator_reconciles_total`,
    /// `etcd_operator_reconcile_duration_seconds` and `etcd_operator_reconcile_errors_total`:
    /// the kind in lower case.
    pub name: &'static str,
    /// The kind, as logs name it.
    pub kind: &'static str,
    /// How soon a failed reconcile is retried, by kind of error.
    pub backoff: Backoff,
    /// An [`Error::Conflict`] (an object of the controller's naming owned by someone else) is
    /// announced as a Warning Event `OwnershipConflict` on the reconciled object: only a person
    /// can resolve it.
    pub conflict_event: bool,
}

/// How soon a failed reconcile is retried, by kind of error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The object changed since it was read (HTTP 409 on a write carrying the read
    /// `resourceVersion`): plan again from a fresh read.
    pub stale_write: Duration,
    /// Anything else (the API, etcd, a Secret, a build or ownership error).
    pub other: Duration,
}

impl Backoff {
    const fn uniform(after: Duration) -> Self {
        Self {
            stale_write: after,
            other: after,
        }
    }
}

/// The back-off table, one row per controller (docs/architecture.md shows it). The delays are
/// the ones each controller had before the wrapper: only the cluster retries a stale write
/// sooner, since its status writes race its members' and it must plan again from fresh data.
pub const CONTROLLERS: [Controller; 7] = [
    CLUSTER,
    MEMBER,
    SNAPSHOT,
    SCHEDULE,
    DEFRAG,
    DEFRAG_POLICY,
    RECOVERY,
];

pub const CLUSTER: Controller = Controller {
    name: "etcdcluster",
    kind: "EtcdCluster",
    backoff: Backoff {
        stale_write: Duration::from_millis(200),
        other: Duration::from_secs(5),
    },
    conflict_event: true,
};

pub const MEMBER: Controller = Controller {
    name: "etcdmember",
    kind: "EtcdMember",
    backoff: Backoff::uniform(Duration::from_secs(5)),
    conflict_event: true,
};

pub const SNAPSHOT: Controller = Controller {
    name: "etcdsnapshot",
    kind: "EtcdSnapshot",
    backoff: Backoff::uniform(Duration::from_secs(5)),
    conflict_event: false,
};

pub const SCHEDULE: Controller = Controller {
    name: "etcdsnapshotschedule",
    kind: "EtcdSnapshotSchedule",
    backoff: Backoff::uniform(Duration::from_secs(10)),
    conflict_event: false,
};

pub const DEFRAG: Controller = Controller {
    name: "etcddefrag",
    kind: "EtcdDefrag",
    backoff: Backoff::uniform(Duration::from_secs(5)),
    conflict_event: false,
};

pub const DEFRAG_POLICY: Controller = Controller {
    name: "etcddefragpolicy",
    kind: "EtcdDefragPolicy",
    backoff: Backoff::uniform(Duration::from_secs(10)),
    conflict_event: false,
};

pub const RECOVERY: Controller = Controller {
    name: "etcdrecovery",
    kind: "EtcdRecovery",
    backoff: Backoff::uniform(Duration::from_secs(5)),
    conflict_event: false,
};

/// Run `reconcile` on `object`: timed, counted, its error counted by label and, for an
/// ownership conflict, announced on the object (see [`Controller`]).
pub async fn reconcile<K, F, Fut>(
    controller: &Controller,
    object: Arc<K>,
    ctx: Arc<Context>,
    reconcile: F,
) -> Result<Requeue, Error>
where
    K: Resource<DynamicType = ()>,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Requeue, Error>>,
{
    let started = Instant::now();
    let result = reconcile(Arc::clone(&object), Arc::clone(&ctx)).await;
    ctx.metrics
        .observe_reconcile(controller.name, started.elapsed());
    if let Err(e) = &result {
        ctx.metrics.count_error(controller.name, e.metric_label());
        if let (Error::Conflict(why), true) = (e, controller.conflict_event) {
            ctx.event(
                object.as_ref(),
                true,
                Reason::OwnershipConflict,
                Action::Reconcile,
                why.clone(),
            )
            .await;
        }
    }
    result
}

/// [`reconcile`] for a kind watched as [`Lenient`] objects: a decodable object is reconciled as
/// above; one the operator cannot decode is reported (see [`crate::lenient`]) and left alone
/// until it changes (an edit that fixes it triggers a new reconcile).
pub async fn reconcile_lenient<K, F, Fut>(
    controller: &Controller,
    object: Arc<Lenient<K>>,
    ctx: Arc<Context>,
    reconcile_typed: F,
) -> Result<Requeue, Error>
where
    K: Resource<DynamicType = ()>,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Requeue, Error>>,
{
    match object.decoded() {
        Ok(typed) => reconcile(controller, Arc::clone(typed), ctx, reconcile_typed).await,
        Err(why) => {
            lenient::report(object.as_ref(), why, &ctx).await;
            Ok(Requeue::await_change())
        }
    }
}

/// The one error policy: retry after the controller's delay for the kind of `error`.
pub fn error_policy(controller: &Controller, error: &Error) -> Requeue {
    Requeue::requeue(backoff(controller, error))
}

/// The delay before retrying a reconcile of `controller` that failed with `error` (logged).
pub fn backoff(controller: &Controller, error: &Error) -> Duration {
    if error.is_stale_write() {
        tracing::debug!(%error, "{} changed during the reconcile; retrying", controller.kind);
        return controller.backoff.stale_write;
    }
    tracing::warn!(%error, "{} reconcile failed", controller.kind);
    controller.backoff.other
}

/// A merge patch that turns status `old` into `new`: `new` itself, plus a `null` for every key of
/// `old` that `new` lacks, at every depth where both are objects.
pub fn status_merge_patch<T: serde::Serialize>(
    old: Option<&T>,
    new: &T,
) -> Result<serde_json::Value, Error> {
    let mut patch = serde_json::to_value(new)?;
    if let Some(old) = old {
        crate::merge_patch::clear_dropped(&serde_json::to_value(old)?, &mut patch);
    }
    Ok(patch)
}

/// Merge-patch `obj`'s status from `old` to `new`, guarded by the resourceVersion this reconcile
/// read: a concurrent write (the runbook's forced deadline, another status edit) makes it fail
/// with a conflict instead of being silently reverted, and the reconcile is retried from a fresh
/// read. Returns the written object.
pub async fn write_status<K, S>(api: &Api<K>, obj: &K, old: Option<&S>, new: &S) -> Result<K, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize,
{
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": obj.resource_version()},
        "status": status_merge_patch(old, new)?,
    });
    Ok(api
        .patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?)
}

/// [`write_status`], only when `new` differs from `old` (an unchanged status is not written).
pub async fn write_status_if_changed<K, S>(
    api: &Api<K>,
    obj: &K,
    old: Option<&S>,
    new: &S,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if old == Some(new) {
        return Ok(());
    }
    write_status(api, obj, old, new).await.map(drop)
}

#[cfg(test)]
mod tests;
