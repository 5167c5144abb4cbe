//! Watches that survive an object they cannot decode.
//!
//! kube-runtime's typed watcher decodes a whole list response at once: one stored object that
//! does not fit the Rust types (e.g. `replicas: 2147483648`, which Kubernetes before 1.36 stores
//! because it does not enforce `format: int32`, and which CRDs without a `maximum` let through)
//! fails the list, the watcher retries forever, and no object of the kind is reconciled in any
//! namespace. [`Lenient<K>`] decodes each object on its own: the watch always succeeds, a good
//! object reaches its reconciler as before, and an undecodable one is reported — logged with its
//! namespace, name and the field that failed, and a Warning Event `InvalidSpec` on it — and left
//! alone until it changes.
//!
//! This module owns only the decoding and the report; the reconcile wrapper
//! ([`crate::shell::reconcile_lenient`]) calls them, and the reconcilers keep their typed
//! signatures (`reconcile(Arc<K>, Arc<Context>)`).

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

use crate::context::Context;
use crate::events::{Action, Reason};

/// An object of kind `K` as the watch delivers it: its metadata always, the typed object when it
/// decodes, otherwise why not.
#[derive(Clone, Debug)]
pub struct Lenient<K> {
    metadata: ObjectMeta,
    decoded: Result<Arc<K>, Undecodable>,
}

/// Why an object does not decode: the field (`spec.replicas`) and what is wrong with it, with
/// the fix, as `api::validate` words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecodable {
    pub field: String,
    pub problem: String,
}

impl<K> Lenient<K> {
    /// The typed object, or why it does not decode.
    pub fn decoded(&self) -> Result<&Arc<K>, &Undecodable> {
        self.decoded.as_ref()
    }

    /// Trim what a watch cache need not keep (see [`crate::watches`]): `meta` is applied to the
    /// metadata and to the typed object's, `typed` to the typed object. Right after decoding the
    /// typed object is not shared yet, so this copies nothing.
    pub fn trim(&mut self, meta: impl Fn(&mut ObjectMeta), typed: impl FnOnce(&mut K))
    where
        K: Resource + Clone,
    {
        meta(&mut self.metadata);
        if let Ok(object) = &mut self.decoded {
            let object = Arc::make_mut(object);
            meta(object.meta_mut());
            typed(object);
        }
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        // Without readable metadata the object cannot even be named; the apiserver never sends
        // such an object, so this is the one error that still fails the list.
        let metadata = match value.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m).map_err(D::Error::custom)?,
            None => return Err(D::Error::missing_field("metadata")),
        };
        let decoded = api::validate::parse::<K>("", &value)
            .map(Arc::new)
            .map_err(|v| Undecodable {
                field: if v.field.is_empty() {
                    "the object".to_string()
                } else {
                    v.field.clone()
                },
                problem: v.to_string(),
            });
        Ok(Self { metadata, decoded })
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What the Warning Event says: the object, that it is skipped, the field, the problem, the fix.
pub fn note<K: Resource<DynamicType = ()>>(object: &Lenient<K>, why: &Undecodable) -> String {
    format!(
        "{} {}/{} cannot be read by the operator, so it is not reconciled (other objects are): {}. \
         It was stored under looser rules (an older CRD without this bound, or a Kubernetes that does not enforce the field's format); \
         edit {} to a value the current CRD accepts, and the operator picks it up.",
        K::kind(&()),
        object.namespace().unwrap_or_default(),
        object.name_any(),
        why.problem,
        why.field
    )
}

/// Report an object the operator cannot decode: logged with its namespace, name and the field
/// that failed, counted as a reconcile error `Undecodable`, and a Warning Event on it.
pub async fn report<K: Resource<DynamicType = ()>>(
    object: &Lenient<K>,
    why: &Undecodable,
    ctx: &Context,
) {
    let kind = K::kind(&());
    tracing::error!(
        kind = %kind,
        namespace = object.namespace().unwrap_or_default(),
        name = object.name_any(),
        field = %why.field,
        error = %why.problem,
        "cannot decode the object; it is not reconciled until it is fixed"
    );
    ctx.metrics.count_error(&kind.to_lowercase(), "Undecodable");
    ctx.event(
        object,
        true,
        Reason::InvalidSpec,
        Action::Decode,
        note(object, why),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{EtcdCluster, EtcdMember};
    use kube::core::ObjectList;
    use serde_json::json;

    fn cluster(name: &str, replicas: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
            "metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}"), "resourceVersion": "7"},
            "spec": {"version": "3.6.11", "replicas": replicas},
        })
    }

    #[test]
    fn one_undecodable_object_does_not_fail_the_list() {
        let list = json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdClusterList",
            "metadata": {"resourceVersion": "9"},
            "items": [cluster("good", json!(3)), cluster("bad", json!(2147483648u64))],
        });
        // What the typed watcher did before: the whole list fails.
        assert!(serde_json::from_value::<ObjectList<EtcdCluster>>(list.clone()).is_err());

        let list: ObjectList<Lenient<EtcdCluster>> =
            serde_json::from_value(list).expect("the list decodes");
        assert_eq!(list.items.len(), 2);
        let good = list.items[0].decoded().expect("good decodes");
        assert_eq!(good.spec.replicas, 3);
        assert_eq!(list.items[0].name_any(), "good");
        let bad = &list.items[1];
        assert_eq!(bad.name_any(), "bad");
        assert_eq!(bad.namespace().as_deref(), Some("prod"));
        let why = bad.decoded().expect_err("bad does not decode");
        assert_eq!(why.field, "spec.replicas");
        assert!(why.problem.contains("2147483648"), "{why:?}");
        let note = note(bad, why);
        for part in [
            "EtcdCluster prod/bad",
            "spec.replicas",
            "2147483648",
            "not reconciled",
        ] {
            assert!(note.contains(part), "{part} missing: {note}");
        }
    }

    #[test]
    fn lenient_objects_keep_the_kind_for_urls_and_owner_references() {
        assert_eq!(
            Lenient::<EtcdMember>::url_path(&(), Some("ns")),
            EtcdMember::url_path(&(), Some("ns"))
        );
        let bad: Lenient<EtcdCluster> =
            serde_json::from_value(cluster("bad", json!("three"))).expect("decodes leniently");
        let reference = bad.object_ref(&());
        assert_eq!(reference.kind.as_deref(), Some("EtcdCluster"));
        assert_eq!(reference.uid.as_deref(), Some("uid-bad"));
        assert_eq!(
            reference.api_version.as_deref(),
            Some(api::v1alpha2::API_VERSION)
        );
    }
}
