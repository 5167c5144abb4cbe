//! Wiring: the kube-runtime controllers, driven by watches. EtcdCluster reconciles on changes
//! to the cluster, its EtcdMembers, Services and PDB, its member Pods, the TLS Secrets it
//! references (the user's or cert-manager's; watched as metadata only) and, when cert-manager is
//! installed at start-up, its Certificates; EtcdMember reconciles on changes to the member and
//! its Pod and PVC; EtcdSnapshot on changes to the snapshot and its Job; EtcdSnapshotSchedule on
//! changes to the schedule and its snapshots, and at its next fire time; EtcdDefrag on changes
//! to the run and on its own timer while it waits or runs; EtcdDefragPolicy on changes to the
//! policy and its runs, and at its next fire time or check; EtcdRecovery on changes to the
//! recovery and on its own timer while it waits or runs.
//!
//! Every reconcile runs through the one wrapper in [`crate::shell`] (timing, metrics, the error
//! policy's back-off table). EtcdClusters, EtcdMembers, EtcdSnapshots and EtcdDefrags are
//! watched as [`Lenient`] objects: one stored object the operator cannot decode is reported and
//! skipped (see [`crate::lenient`]) instead of failing the watch of every object of its kind.
//!
//! What the watch caches keep, the page size of their lists, the concurrency of each controller
//! and the metadata-only triggers (owned children, member Pods, Secrets, the cluster seen from the
//! member controller) are [`crate::watches`]'.

use std::sync::Arc;

use api::labels;
use api::v1alpha2::{
    EtcdCluster, EtcdDefrag, EtcdDefragPolicy, EtcdMember, EtcdRecovery, EtcdSnapshot,
    EtcdSnapshotSchedule, TlsSecrets,
};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::lenient::Lenient;
use crate::{cluster, defrag, member, recovery, schedule, shell, snapshot, watches};

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

    let clusters = watches::controller(
        api::<Lenient<EtcdCluster>>(&ctx, ns),
        watcher::Config::default(),
        watches::lenient,
    );
    // The cluster reconcile reads its members, Services and PDB from these caches (see
    // `cluster::reconcile::caches`); their watches also wake the owning cluster.
    let (member_store, member_changes) = watches::reflected(
        api::<Lenient<EtcdMember>>(&ctx, ns),
        watcher::Config::default(),
        watches::lenient,
    );
    let (service_store, service_changes) =
        watches::reflected(api::<Service>(&ctx, ns), managed.clone(), watches::service);
    let (pdb_store, pdb_changes) = watches::reflected(
        api::<PodDisruptionBudget>(&ctx, ns),
        managed.clone(),
        watches::pdb,
    );
    let caches = Arc::new(cluster::reconcile::Caches::new(
        member_store,
        service_store,
        pdb_store,
    ));
    let cluster_cache = clusters.store();
    // Metadata only: the operator needs to know that a Secret changed, not its data.
    let mut clusters = clusters.watches(
        api::<PartialObjectMeta<Secret>>(&ctx, ns),
        watcher::Config::default(),
        move |secret| referencing_clusters(&cluster_cache, &secret),
    );
    if ctx.cert_manager.known_installed() {
        let resource = crate::cert_manager::certificate_resource();
        let certificates = match ns {
            Some(ns) => Api::<DynamicObject>::namespaced_with(ctx.client.clone(), ns, &resource),
            None => Api::<DynamicObject>::all_with(ctx.client.clone(), &resource),
        };
        clusters = clusters.owns_with(certificates, resource, managed.clone());
    }
    let clusters = clusters
        .owns_stream(member_changes)
        .owns_stream(service_changes)
        .owns_stream(pdb_changes)
        // Metadata only: a Pod's labels name its cluster, and any change of the Pod (its
        // readiness too) is an event of the metadata watch.
        .watches(
            api::<PartialObjectMeta<Pod>>(&ctx, ns),
            managed.clone(),
            |pod| {
                let cluster = pod.labels().get(labels::CLUSTER)?.clone();
                Some(ObjectRef::<Lenient<EtcdCluster>>::new(&cluster).within(&pod.namespace()?))
            },
        )
        .graceful_shutdown_on(stopped(stop_rx.clone()))
        .run(
            move |object, ctx| {
                let caches = Arc::clone(&caches);
                shell::reconcile_lenient(&shell::CLUSTER, object, ctx, |cluster, ctx| {
                    cluster::reconcile::reconcile(cluster, ctx, caches)
                })
            },
            |_, error, _| shell::error_policy(&shell::CLUSTER, error),
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "cluster controller event");
            }
        });

    let members = watches::controller(
        api::<Lenient<EtcdMember>>(&ctx, ns),
        watcher::Config::default(),
        watches::lenient,
    );
    // A member's status depends on its cluster too (the locked version it is compared with):
    // a cluster change wakes its members, found in the member controller's own cache.
    let member_cache = members.store();
    let members = members
        .owns(api::<Pod>(&ctx, ns), managed.clone())
        // Metadata only: data PVCs have no owner (deleting a member object must not take its
        // data), so their member is found by name (`data-<member>`); any change of the claim
        // (its binding, a resize) is an event of the metadata watch.
        .watches(
            api::<PartialObjectMeta<PersistentVolumeClaim>>(&ctx, ns),
            managed,
            |claim| {
                let member = claim.name_any().strip_prefix("data-")?.to_string();
                Some(ObjectRef::<Lenient<EtcdMember>>::new(&member).within(&claim.namespace()?))
            },
        )
        // Metadata only: the mapper reads the cluster's name; every change is an event.
        .watches(
            api::<PartialObjectMeta<EtcdCluster>>(&ctx, ns),
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
            |object, ctx| shell::reconcile_lenient(&shell::MEMBER, object, ctx, member::reconcile),
            |_, error, _| shell::error_policy(&shell::MEMBER, error),
            ctx.clone(),
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "member controller event");
            }
        });

    // EtcdSnapshots: their Jobs (owned; the Job's status follows its Pods).
    let snapshots = watches::controller(
        api::<Lenient<EtcdSnapshot>>(&ctx, ns),
        watcher::Config::default(),
        watches::lenient,
    )
    .owns(api::<Job>(&ctx, ns), watcher::Config::default())
    .graceful_shutdown_on(stopped(stop_rx.clone()))
    .run(
        |object, ctx| shell::reconcile_lenient(&shell::SNAPSHOT, object, ctx, snapshot::reconcile),
        |_, error, _| shell::error_policy(&shell::SNAPSHOT, error),
        ctx.clone(),
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "snapshot controller event");
        }
    });

    // EtcdDefrags: each run polls its cluster's members itself while it waits or runs.
    let defrags = watches::controller(
        api::<Lenient<EtcdDefrag>>(&ctx, ns),
        watcher::Config::default(),
        watches::lenient,
    )
    .graceful_shutdown_on(stopped(stop_rx.clone()))
    .run(
        |object, ctx| shell::reconcile_lenient(&shell::DEFRAG, object, ctx, defrag::run::reconcile),
        |_, error, _| shell::error_policy(&shell::DEFRAG, error),
        ctx.clone(),
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "defrag controller event");
        }
    });

    // EtcdRecoveries: each recovery polls its cluster's members itself while it waits or runs.
    let recoveries = watches::controller(
        api::<EtcdRecovery>(&ctx, ns),
        watcher::Config::default(),
        watches::plain,
    )
    .graceful_shutdown_on(stopped(stop_rx.clone()))
    .run(
        |object, ctx| shell::reconcile(&shell::RECOVERY, object, ctx, recovery::reconcile),
        |_, error, _| shell::error_policy(&shell::RECOVERY, error),
        ctx.clone(),
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "recovery controller event");
        }
    });

    // EtcdSnapshotSchedules: the snapshots they own (a snapshot finishing allows a run skipped by
    // Forbid and feeds retention); otherwise each wakes itself at its next fire time.
    let schedules = watches::controller(
        api::<EtcdSnapshotSchedule>(&ctx, ns),
        watcher::Config::default(),
        watches::plain,
    )
    .owns(
        api::<EtcdSnapshot>(&ctx, ns),
        watcher::Config::default().labels(labels::SCHEDULE),
    )
    .graceful_shutdown_on(stopped(stop_rx.clone()))
    .run(
        |object, ctx| shell::reconcile(&shell::SCHEDULE, object, ctx, schedule::reconcile),
        |_, error, _| shell::error_policy(&shell::SCHEDULE, error),
        ctx.clone(),
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "schedule controller event");
        }
    });

    // EtcdDefragPolicies: the runs they own (a run finishing feeds the history and allows the
    // next); otherwise each wakes itself at its next fire time or check.
    let policies = watches::controller(
        api::<EtcdDefragPolicy>(&ctx, ns),
        watcher::Config::default(),
        watches::plain,
    )
    .owns(
        api::<EtcdDefrag>(&ctx, ns),
        watcher::Config::default().labels(defrag::policy::plan::POLICY_LABEL),
    )
    .graceful_shutdown_on(stopped(stop_rx))
    .run(
        |object, ctx| {
            shell::reconcile(
                &shell::DEFRAG_POLICY,
                object,
                ctx,
                defrag::policy::reconcile,
            )
        },
        |_, error, _| shell::error_policy(&shell::DEFRAG_POLICY, error),
        ctx,
    )
    .for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "defrag policy controller event");
        }
    });

    tokio::join!(clusters, members, snapshots, defrags, recoveries, schedules, policies);
}

/// The clusters (in the watch cache) whose `spec.tls` names `secret`, by its name in their
/// namespace: the user's own Secrets and the ones cert-manager issues for their Certificates.
fn referencing_clusters<S: kube::Resource + ResourceExt>(
    cache: &Store<Lenient<EtcdCluster>>,
    secret: &S,
) -> Vec<ObjectRef<Lenient<EtcdCluster>>> {
    let (name, ns) = (secret.name_any(), secret.namespace());
    cache
        .state()
        .into_iter()
        .filter(|c| {
            c.namespace() == ns
                && c.decoded()
                    .is_ok_and(|c| TlsSecrets::of(&c.name_any(), c.spec.tls.as_ref()).names(&name))
        })
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use serde_json::json;

    fn cluster(name: &str, ns: &str, tls: serde_json::Value) -> Lenient<EtcdCluster> {
        serde_json::from_value(json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
            "spec": {"version": "3.6.11", "tls": tls},
        }))
        .unwrap()
    }

    fn secret(name: &str, ns: &str) -> PartialObjectMeta<Secret> {
        let mut s = PartialObjectMeta::<Secret>::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some(ns.into());
        s
    }

    #[test]
    fn a_secret_wakes_the_clusters_that_name_it_byo_or_cert_manager() {
        let (store, mut writer) = reflector::store();
        for c in [
            cluster(
                "byo",
                "a",
                json!({"peer": {"secretRef": {"name": "shared"}}}),
            ),
            cluster(
                "cm",
                "a",
                json!({"client": {"certManager": {"serverIssuerRef": {"name": "ca"}}}}),
            ),
            cluster(
                "other-ns",
                "b",
                json!({"peer": {"secretRef": {"name": "shared"}}}),
            ),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(c));
        }
        let woken = |name: &str, ns: &str| {
            let mut names: Vec<String> = referencing_clusters(&store, &secret(name, ns))
                .into_iter()
                .map(|r| r.name)
                .collect();
            names.sort();
            names
        };
        assert_eq!(woken("shared", "a"), ["byo"]);
        assert_eq!(woken("cm-server-tls", "a"), ["cm"]);
        assert_eq!(woken("shared", "b"), ["other-ns"]);
        assert!(woken("unrelated", "a").is_empty());
        assert!(woken("cm-peer-tls", "a").is_empty(), "no peer certManager");
    }
}
