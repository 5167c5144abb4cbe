//! Watch and cache plumbing for [`crate::run`]: what the controllers' watch caches keep, how
//! large a page of the initial list is, how many reconciles of one controller run at once, and
//! the metadata-only triggers, and the caches the cluster reconcile reads its members, Services
//! and PDB from.
//!
//! One operator carries many clusters (a thousand paused ones is the design point, see
//! docs/performance.md, "Many clusters"), so what is kept per object counts:
//!
//! - each controller's own kind is cached (the mappers and the reconcilers start from it), but
//!   without `metadata.managedFields` and the `kubectl.kubernetes.io/last-applied-configuration`
//!   annotation, which no reconcile reads and which are often larger than the spec;
//! - the EtcdCluster cache keeps `status`: the cluster reconcile plans from the cached cluster
//!   when the cache holds the operator's own last write (`cluster::reconcile::caches`);
//! - the cluster controller's members, Services and PDBs are cached too ([`reflected`]: the same
//!   watch fills the cache and wakes the cluster, so a woken reconcile finds the change in the
//!   cache), without managed fields and, for Services and PDBs, without `status`;
//! - objects that only wake a reconcile (the member controller's Pods and PVCs, the cluster's
//!   member Pods, referenced Secrets, the cluster seen from the member controller) are watched
//!   as metadata only (`Api<PartialObjectMeta<K>>`, which kube-runtime's `owns` uses too) and
//!   not cached;
//! - the initial list is read in pages of [`PAGE_SIZE`] objects, so decoding it never holds more
//!   than one page;
//! - at most [`CONCURRENCY`] reconciles of one controller run at once: after a restart every
//!   object is due at the same moment, and unbounded they would all hold their reads at once;
//! - a controller's watches retry after an error on [`trigger_backoff`]'s short schedule, so the
//!   operator is back at work seconds after an apiserver restart.

use std::fmt::Debug;
use std::time::Duration;

use futures::Stream;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::{controller, reflector, watcher, Controller, WatchStreamExt};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::lenient::Lenient;

/// Objects per page of a watch's initial list (kube-runtime's default is 500).
pub const PAGE_SIZE: u32 = 100;

/// Reconciles of one controller in flight at once (kube-runtime's default is unbounded). Enough
/// that the running clusters' health checks, due every 30 s, do not keep an edited cluster
/// waiting for a slot; few enough that a restart with thousands of clusters does not hold
/// thousands of reconciles' reads in memory at once.
pub const CONCURRENCY: u16 = 64;

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The runtime settings of every controller.
pub fn config() -> controller::Config {
    controller::Config::default().concurrency(CONCURRENCY)
}

/// The first and the longest wait of [`trigger_backoff`], and how long without an error resets it.
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const BACKOFF_RESET: Duration = Duration::from_secs(30);

/// How a controller's watches wait after an error before they watch (or list) again: 0.5 s,
/// doubling up to 5 s, and back to 0.5 s once 30 s pass without an error.
///
/// kube-runtime's default is client-go's (0.8 s doubling up to 30 s, reset only after 120 s
/// without an error), and one schedule serves all the watches of a controller. An apiserver
/// restart walks it up while the apiserver is down; then every watch comes back with an expired
/// resourceVersion (410), whose re-list waited the next step, up to 30 s, again and again: a
/// rollout sat idle about 90 s after the apiserver was back (docs/reliability.md, fault 2). One
/// operator's few dozen watches retrying every 5 s are no load on an apiserver.
pub fn trigger_backoff() -> ResetTimerBackoff<Doubling> {
    ResetTimerBackoff::new(Doubling { next: BACKOFF_MIN }, BACKOFF_RESET)
}

/// [`BACKOFF_MIN`] doubling up to [`BACKOFF_MAX`].
pub struct Doubling {
    next: Duration,
}

impl Iterator for Doubling {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (wait * 2).min(BACKOFF_MAX);
        Some(wait)
    }
}

impl Backoff for Doubling {
    fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

/// Drop from metadata what no reconcile reads: the managed fields and kubectl's last-applied
/// copy of the object.
pub fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// A cached object of a kind decoded as is.
pub fn plain<K: Resource>(object: &mut K) {
    strip_meta(object.meta_mut());
}

/// A cached object of a kind watched as [`Lenient`].
pub fn lenient<K: Resource + Clone>(object: &mut Lenient<K>) {
    object.trim(strip_meta, |_| {});
}

/// A cached Service: the drift check reads its metadata and spec, never its status.
pub fn service(object: &mut Service) {
    strip_meta(&mut object.metadata);
    object.status = None;
}

/// A cached PodDisruptionBudget: the operator compares its spec and labels, never its status.
pub fn pdb(object: &mut PodDisruptionBudget) {
    strip_meta(&mut object.metadata);
    object.status = None;
}

/// A cache of `K` (each object as `trim` leaves it, listed in pages of [`PAGE_SIZE`]) and the
/// stream of its changes, for `Controller::owns_stream`: each change is in the cache before it
/// wakes the owner, and a deletion wakes it too.
pub fn reflected<K>(
    api: Api<K>,
    wc: watcher::Config,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, wc.page_size(PAGE_SIZE))
        .modify(trim)
        .reflect(writer)
        .touched_objects();
    (reader, stream)
}

/// A controller of `K` whose cache keeps each object as `trim` leaves it, listed in pages of
/// [`PAGE_SIZE`] and run with [`config`].
pub fn controller<K>(
    api: Api<K>,
    wc: watcher::Config,
    trim: impl FnMut(&mut K) + Send + 'static,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, wc.page_size(PAGE_SIZE))
        .modify(trim)
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(stream, reader)
        .with_config(config())
        .trigger_backoff(trigger_backoff())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_retry_within_five_seconds_and_start_short_again_after_a_reset() {
        let mut backoff = Doubling { next: BACKOFF_MIN };
        let waits: Vec<u64> = backoff
            .by_ref()
            .take(7)
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(waits, [500, 1000, 2000, 4000, 5000, 5000, 5000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(BACKOFF_MIN));
    }
    use api::v1alpha2::EtcdCluster;
    use kube::ResourceExt;
    use serde_json::json;

    fn stored() -> serde_json::Value {
        json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u1",
                "labels": {"team": "x"},
                "annotations": {LAST_APPLIED: "{\"big\":true}", "keep": "me"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"version": "3.6.11", "replicas": 0,
                     "tls": {"peer": {"secretRef": {"name": "shared"}}}},
            "status": {"readyMembers": 0, "observedGeneration": 3},
        })
    }

    #[test]
    fn a_cached_cluster_keeps_spec_status_names_and_labels() {
        let mut c: Lenient<EtcdCluster> = serde_json::from_value(stored()).unwrap();
        lenient(&mut c);
        for meta in [c.meta(), c.decoded().unwrap().meta()] {
            assert_eq!(meta.managed_fields, None);
            let annotations = meta.annotations.clone().unwrap_or_default();
            assert!(!annotations.contains_key(LAST_APPLIED));
            assert_eq!(annotations.get("keep").map(String::as_str), Some("me"));
            assert_eq!(meta.uid.as_deref(), Some("u1"));
            assert_eq!(
                meta.labels.clone().unwrap_or_default().get("team").cloned(),
                Some("x".to_string())
            );
        }
        let typed = c.decoded().unwrap();
        assert_eq!(
            typed.status.as_ref().and_then(|s| s.observed_generation),
            Some(3),
            "the reconcile plans from the cached status"
        );
        assert_eq!(typed.spec.version, "3.6.11");
        assert!(typed.spec.tls.is_some(), "the Secret mapper reads spec.tls");

        let mut typed: EtcdCluster = serde_json::from_value(stored()).unwrap();
        plain(&mut typed);
        assert_eq!(typed.metadata.managed_fields, None);
        assert!(typed.status.is_some());
    }

    #[test]
    fn cached_services_and_pdbs_keep_what_the_drift_checks_read() {
        let mut svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "labels": {"l": "v"},
                         "annotations": {LAST_APPLIED: "{}", "a": "b"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "EtcdCluster",
                                              "name": "c", "uid": "u1", "controller": true}],
                         "managedFields": [{"manager": "m"}]},
            "spec": {"selector": {"s": "t"}, "ports": [{"port": 2379}],
                     "publishNotReadyAddresses": true},
            "status": {"loadBalancer": {}},
        }))
        .unwrap();
        service(&mut svc);
        assert_eq!(svc.metadata.managed_fields, None);
        assert_eq!(svc.status, None);
        assert_eq!(svc.annotations().get("a").map(String::as_str), Some("b"));
        assert!(!svc.annotations().contains_key(LAST_APPLIED));
        assert_eq!(svc.labels().get("l").map(String::as_str), Some("v"));
        assert_eq!(crate::controller_uid(&svc).as_deref(), Some("u1"));
        let spec = svc.spec.unwrap_or_default();
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(spec.ports.unwrap_or_default().len(), 1);

        let mut budget: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "managedFields": [{"manager": "m"}]},
            "spec": {"minAvailable": 2},
            "status": {"currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1,
                       "expectedPods": 3},
        }))
        .unwrap();
        pdb(&mut budget);
        assert_eq!(budget.metadata.managed_fields, None);
        assert_eq!(budget.status, None);
        assert!(budget.spec.and_then(|s| s.min_available).is_some());
    }
}
