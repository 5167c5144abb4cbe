//! Wiring: the kube-runtime controllers, driven by watches. EtcdCluster reconciles on changes
//! to the cluster, its EtcdMembers, Services and PDB, and its member Pods; EtcdMember reconciles on
//! changes to the member and its Pod and PVC; EtcdSnapshot on changes to the snapshot and its Job.
//!
//! EtcdClusters and EtcdMembers are watched as [`Lenient`] objects: one stored object the
//! operator cannot decode is reported and skipped (see [`crate::lenient`]) instead of failing
//! the watch of every object of its kind.

use std::sync::Arc;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember, EtcdSnapshot};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::lenient::{self, Lenient};
use crate::{cluster, member, snapshot};

fn api<K>(ctx: &Context, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    }
}

/// Run both controllers until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let ns = namespace.as_deref();
    let managed = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::APP_MANAGED_BY,
        labels::MANAGED_BY_VALUE
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let clusters = Controller::new(
        api::<Lenient<EtcdCluster>>(&ctx, ns),
        watcher::Config::default(),
    )
    .owns(
        api::<Lenient<EtcdMember>>(&ctx, ns),
        watcher::Config::default(),
    )
    .owns(api::<Service>(&ctx, ns), managed.clone())
    .owns(api::<PodDisruptionBudget>(&ctx, ns), managed.clone())
    .watches(api::<Pod>(&ctx, ns), managed.clone(), |pod| {
        let cluster = pod.labels().get(labels::CLUSTER)?.clone();
        Some(ObjectRef::<Lenient<EtcdCluster>>::new(&cluster).within(&pod.namespace()?))
    })
    .graceful_shutdown_on(stopped(stop_rx.clone()))
    .run(
        |object, ctx| lenient::reconcile_or_report(object, ctx, cluster::reconcile::reconcile),
        |object, error, ctx| {
            lenient::error_policy(object, error, ctx, cluster::reconcile::error_policy)
        },
        ctx.clone(),
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "cluster controller event");
        }
    });

    let members = Controller::new(
        api::<Lenient<EtcdMember>>(&ctx, ns),
        watcher::Config::default(),
    );
    // A member's status depends on its cluster too (the locked version it is compared with):
    // a cluster change wakes its members, found in the member controller's own cache.
    let member_cache = members.store();
    let members = members
        .owns(api::<Pod>(&ctx, ns), managed.clone())
        .owns(api::<PersistentVolumeClaim>(&ctx, ns), managed)
        .watches(
            api::<Lenient<EtcdCluster>>(&ctx, ns),
            watcher::Config::default(),
            move |cluster| {
                let (name, ns) = (cluster.name_any(), cluster.namespace());
                member_cache
                    .state()
                    .into_iter()
                    .filter(|m| {
                        m.decoded()
                            .is_ok_and(|m| m.spec.cluster_name == name && m.namespace() == ns)
                    })
                    .map(|m| ObjectRef::from_obj(m.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            |object, ctx| lenient::reconcile_or_report(object, ctx, member::reconcile),
            |object, error, ctx| lenient::error_policy(object, error, ctx, member::error_policy),
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "member controller event");
            }
        });

    // EtcdSnapshots: their Jobs (owned; the Job's status follows its Pods).
    let snapshots = Controller::new(
        api::<Lenient<EtcdSnapshot>>(&ctx, ns),
        watcher::Config::default(),
    )
    .owns(api::<Job>(&ctx, ns), watcher::Config::default())
    .graceful_shutdown_on(stopped(stop_rx))
    .run(
        |object, ctx| lenient::reconcile_or_report(object, ctx, snapshot::reconcile),
        |object, error, ctx| lenient::error_policy(object, error, ctx, snapshot::error_policy),
        ctx,
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "snapshot controller event");
        }
    });

    tokio::join!(clusters, members, snapshots);
}
