//! Watch and cache plumbing for [`crate::run`]: what the controllers' watch caches keep, how
//! large a page of the initial list is, how many reconciles of one controller run at once, and
//! the metadata-only triggers.
//!
//! One operator carries many clusters (a thousand paused ones is the design point, see
//! docs/performance.md, "Many clusters"), so what is kept per object counts:
//!
//! - each controller's own kind is cached (the mappers and the reconcilers start from it), but
//!   without `metadata.managedFields` and the `kubectl.kubernetes.io/last-applied-configuration`
//!   annotation, which no reconcile reads and which are often larger than the spec;
//! - the EtcdCluster cache also drops `status`: the cluster reconcile reads the cluster fresh
//!   before it plans (a cached status can lag behind the operator's own writes), and the mappers
//!   read `spec.tls` only;
//! - objects that only wake a reconcile (owned children, member Pods, referenced Secrets, the
//!   cluster seen from the member controller) are watched as metadata only
//!   (`Api<PartialObjectMeta<K>>`, which kube-runtime's `owns` uses too) and not cached;
//! - the initial list is read in pages of [`PAGE_SIZE`] objects, so decoding it never holds more
//!   than one page;
//! - at most [`CONCURRENCY`] reconciles of one controller run at once: after a restart every
//!   object is due at the same moment, and unbounded they would all hold their reads at once.

use std::fmt::Debug;

use api::v1alpha2::EtcdCluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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

/// A cached EtcdCluster: also without its status (the reconcile reads the cluster fresh).
pub fn cluster(object: &mut Lenient<EtcdCluster>) {
    object.trim(strip_meta, |c| c.status = None);
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
    Controller::for_stream(stream, reader).with_config(config())
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn a_cached_cluster_keeps_spec_names_and_labels_only() {
        let mut c: Lenient<EtcdCluster> = serde_json::from_value(stored()).unwrap();
        cluster(&mut c);
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
        assert_eq!(typed.status, None);
        assert_eq!(typed.spec.version, "3.6.11");
        assert!(typed.spec.tls.is_some(), "the Secret mapper reads spec.tls");
    }

    #[test]
    fn other_kinds_keep_their_status() {
        let mut c: Lenient<EtcdCluster> = serde_json::from_value(stored()).unwrap();
        lenient(&mut c);
        assert_eq!(c.meta().managed_fields, None);
        assert_eq!(c.decoded().unwrap().meta().managed_fields, None);
        assert!(c.decoded().unwrap().status.is_some());

        let mut typed: EtcdCluster = serde_json::from_value(stored()).unwrap();
        plain(&mut typed);
        assert_eq!(typed.metadata.managed_fields, None);
        assert!(typed.status.is_some());
    }
}
