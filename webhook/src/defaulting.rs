//! Defaults the mutating webhook adds to an `EtcdCluster` on create — the ones CEL cannot
//! express — as a JSONPatch that only ever *adds* fields the user left unset:
//!
//! - **Pod anti-affinity** on `kubernetes.io/hostname` for the cluster's member label
//!   (`etcd-operator.cozystack.io/cluster=<name>`), preferred (weight 100) or required. Skipped
//!   with a warning when the object has no name yet (`generateName`): the selector needs it.
//! - **Memory for tmpfs members** (`storage.medium: Memory`): tmpfs pages are charged to the
//!   Pod, so `resources.limits.memory = storage.size + headroom`, and a matching request when
//!   none is set. A user-set limit is kept as is; a user-set request larger than the computed
//!   limit raises the limit to it, so request ≤ limit always holds.
//!
//! Patches are built against the raw JSON so that an absent parent is added as a whole object
//! and a present one is extended key by key; nothing the user wrote is replaced.

use std::collections::BTreeMap;

use api::quantity;
use api::v1alpha2::EtcdClusterSpec;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::{PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Map, Value};

use crate::config::{AntiAffinity, Policy};

/// Node spreading key: one member per node.
pub const HOSTNAME_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";
/// Weight of the preferred anti-affinity term (the strongest preference).
pub const PREFERRED_WEIGHT: i32 = 100;

/// The patch for one object, and warnings about defaults that could not be applied.
#[derive(Debug, Default)]
pub struct Defaults {
    pub patch: Patch,
    pub warnings: Vec<String>,
}

impl Defaults {
    fn add(&mut self, path: &[&str], value: Value) {
        self.patch.0.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(path.iter().copied()),
            value,
        }));
    }
}

/// The member anti-affinity for `cluster` in `mode` (`None` when off).
pub fn member_anti_affinity(cluster: &str, mode: AntiAffinity) -> Option<PodAntiAffinity> {
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                api::labels::CLUSTER.to_string(),
                cluster.to_string(),
            )])),
            ..Default::default()
        }),
        topology_key: HOSTNAME_TOPOLOGY_KEY.to_string(),
        ..Default::default()
    };
    match mode {
        AntiAffinity::Off => None,
        AntiAffinity::Preferred => Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: PREFERRED_WEIGHT,
                    pod_affinity_term: term,
                },
            ]),
            ..Default::default()
        }),
        AntiAffinity::Required => Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..Default::default()
        }),
    }
}

/// `value` as an object, treating an absent key and `null` alike (both mean "unset").
fn object_at<'a>(parent: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    parent.get(key).and_then(Value::as_object)
}

fn is_unset(parent: Option<&Map<String, Value>>, key: &str) -> bool {
    parent.and_then(|p| p.get(key)).is_none_or(Value::is_null)
}

/// The defaults for an EtcdCluster being created as `name` with the raw `spec`. A spec that
/// does not parse gets no defaults: the validating webhook rejects it with the reason.
pub fn cluster_defaults(name: &str, spec: &Value, policy: &Policy) -> Defaults {
    let mut out = Defaults::default();
    let Ok(typed) = api::validate::parse::<EtcdClusterSpec>("spec", spec) else {
        return out;
    };
    anti_affinity(&mut out, name, spec, policy);
    if policy.memory_defaults && typed.storage.is_memory() {
        memory(&mut out, &typed, spec, policy);
    }
    out
}

fn anti_affinity(out: &mut Defaults, name: &str, spec: &Value, policy: &Policy) {
    let affinity = object_at(spec, "affinity");
    if !is_unset(affinity, "podAntiAffinity") {
        return;
    }
    if policy.anti_affinity == AntiAffinity::Off {
        return;
    }
    if name.is_empty() {
        out.warnings.push(
            "spec.affinity.podAntiAffinity was not defaulted: the object has no name yet (generateName) and the selector needs it; set podAntiAffinity yourself or create the cluster with a fixed name"
                .to_string(),
        );
        return;
    }
    let Some(term) = member_anti_affinity(name, policy.anti_affinity) else {
        return;
    };
    let term = match serde_json::to_value(term) {
        Ok(v) => v,
        Err(err) => {
            tracing::error!(error = %err, "cannot serialize the default anti-affinity");
            return;
        }
    };
    match affinity {
        Some(_) => out.add(&["spec", "affinity", "podAntiAffinity"], term),
        None => out.add(&["spec", "affinity"], json!({ "podAntiAffinity": term })),
    }
}

fn memory(out: &mut Defaults, typed: &EtcdClusterSpec, spec: &Value, policy: &Policy) {
    let resources = typed.resources.as_ref();
    let user_limit = resources
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"));
    if user_limit.is_some() {
        return;
    }
    if !quantity::parse(&typed.storage.size).is_ok_and(|size| size.is_positive()) {
        return; // invalid with medium Memory; the validating webhook says so
    }
    let Some(mut limit) = quantity::add(&typed.storage.size, &policy.memory_headroom) else {
        return;
    };
    let user_request = resources
        .and_then(|r| r.requests.as_ref())
        .and_then(|l| l.get("memory"));
    if let Some(request) = user_request {
        // Compared exactly, so a request beyond the i64 range still wins over the limit.
        if let (Ok(r), Ok(l)) = (quantity::parse(request), quantity::parse(&limit)) {
            if r > l {
                limit = request.clone();
            }
        }
    }
    let memory = |q: &Quantity| json!({ "memory": q.0 });

    let raw_resources = object_at(spec, "resources");
    let Some(raw_resources) = raw_resources else {
        let mut whole = Map::new();
        whole.insert("limits".into(), memory(&limit));
        if user_request.is_none() {
            whole.insert("requests".into(), memory(&limit));
        }
        out.add(&["spec", "resources"], Value::Object(whole));
        return;
    };
    let mut set = |field: &str| {
        if is_unset(Some(raw_resources), field) {
            out.add(&["spec", "resources", field], memory(&limit));
        } else {
            out.add(&["spec", "resources", field, "memory"], json!(limit.0));
        }
    };
    set("limits");
    if user_request.is_none() {
        set("requests");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(anti_affinity: AntiAffinity) -> Policy {
        Policy {
            anti_affinity,
            ..Policy::default()
        }
    }

    /// Apply the defaults for `name`/`spec` to a whole object and return the resulting spec.
    fn defaulted(name: &str, spec: Value, policy: &Policy) -> (Value, Vec<String>) {
        let defaults = cluster_defaults(name, &spec, policy);
        let mut object = json!({"metadata": {"name": name}, "spec": spec});
        json_patch::patch(&mut object, &defaults.patch).unwrap();
        (object["spec"].clone(), defaults.warnings)
    }

    #[test]
    fn preferred_anti_affinity_is_added_for_the_cluster_label() {
        let (spec, warnings) = defaulted("main", json!({"version": "3.6.11"}), &Policy::default());
        assert!(warnings.is_empty());
        assert_eq!(
            spec["affinity"],
            json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"etcd-operator.cozystack.io/cluster": "main"}},
                    "topologyKey": "kubernetes.io/hostname"
                }
            }]}})
        );
    }

    #[test]
    fn required_anti_affinity_when_asked() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11"}),
            &policy(AntiAffinity::Required),
        );
        assert_eq!(
            spec["affinity"]["podAntiAffinity"],
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"etcd-operator.cozystack.io/cluster": "main"}},
                "topologyKey": "kubernetes.io/hostname"
            }]})
        );
    }

    #[test]
    fn node_affinity_is_kept_when_anti_affinity_is_added_beside_it() {
        let node_affinity = json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
        ]}});
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "affinity": {"nodeAffinity": node_affinity}}),
            &Policy::default(),
        );
        assert_eq!(spec["affinity"]["nodeAffinity"], node_affinity);
        assert!(spec["affinity"]["podAntiAffinity"].is_object());
    }

    #[test]
    fn user_anti_affinity_is_never_replaced() {
        let mine = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"team": "db"}}, "topologyKey": "topology.kubernetes.io/zone"
        }]});
        let spec = json!({"version": "3.6.11", "affinity": {"podAntiAffinity": mine}});
        let defaults = cluster_defaults("main", &spec, &policy(AntiAffinity::Required));
        assert!(defaults.patch.0.is_empty(), "{:?}", defaults.patch);
    }

    #[test]
    fn null_affinity_counts_as_unset() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "affinity": null}),
            &Policy::default(),
        );
        assert!(spec["affinity"]["podAntiAffinity"].is_object());
    }

    #[test]
    fn anti_affinity_off_adds_nothing() {
        let defaults = cluster_defaults(
            "main",
            &json!({"version": "3.6.11"}),
            &policy(AntiAffinity::Off),
        );
        assert!(defaults.patch.0.is_empty());
        assert!(defaults.warnings.is_empty());
    }

    #[test]
    fn generate_name_skips_anti_affinity_with_a_warning() {
        let defaults = cluster_defaults("", &json!({"version": "3.6.11"}), &Policy::default());
        assert!(defaults.patch.0.is_empty());
        assert_eq!(defaults.warnings.len(), 1);
        assert!(
            defaults.warnings[0].contains("generateName"),
            "{:?}",
            defaults.warnings
        );
    }

    #[test]
    fn memory_cluster_gets_limit_and_request_of_size_plus_headroom() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"}}),
            &Policy::default(),
        );
        assert_eq!(
            spec["resources"],
            json!({"limits": {"memory": "1280Mi"}, "requests": {"memory": "1280Mi"}})
        );
    }

    #[test]
    fn memory_defaults_extend_existing_resources_without_touching_cpu() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "256Mi", "medium": "Memory"},
                   "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}}),
            &Policy::default(),
        );
        assert_eq!(
            spec["resources"],
            json!({"limits": {"cpu": "2", "memory": "512Mi"}, "requests": {"cpu": "500m", "memory": "512Mi"}})
        );
    }

    #[test]
    fn memory_defaults_add_missing_limits_object_beside_requests() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "256Mi", "medium": "Memory"},
                   "resources": {"requests": {"cpu": "1"}}}),
            &Policy::default(),
        );
        assert_eq!(
            spec["resources"],
            json!({"limits": {"memory": "512Mi"}, "requests": {"cpu": "1", "memory": "512Mi"}})
        );
    }

    #[test]
    fn user_memory_limit_is_kept_and_nothing_is_added() {
        let resources = json!({"limits": {"memory": "700Mi"}});
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"}, "resources": resources}),
            &policy(AntiAffinity::Off),
        );
        assert_eq!(spec["resources"], resources);
    }

    #[test]
    fn larger_user_request_raises_the_default_limit_to_it() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"},
                   "resources": {"requests": {"memory": "4Gi"}}}),
            &Policy::default(),
        );
        assert_eq!(
            spec["resources"],
            json!({"limits": {"memory": "4Gi"}, "requests": {"memory": "4Gi"}})
        );
    }

    #[test]
    fn smaller_user_request_is_kept_below_the_default_limit() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"},
                   "resources": {"requests": {"memory": "300Mi"}}}),
            &Policy::default(),
        );
        assert_eq!(
            spec["resources"],
            json!({"limits": {"memory": "1280Mi"}, "requests": {"memory": "300Mi"}})
        );
    }

    #[test]
    fn bare_integer_size_and_custom_headroom_add_up() {
        let p = Policy {
            memory_headroom: Quantity("1Gi".into()),
            ..Policy::default()
        };
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": 268435456, "medium": "Memory"}}),
            &p,
        );
        assert_eq!(spec["resources"]["limits"]["memory"], json!("1280Mi"));
    }

    #[test]
    fn memory_limit_beyond_int64_saturates_instead_of_overflowing() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "100000000000000P", "medium": "Memory"}}),
            &Policy::default(),
        );
        let max = json!(i64::MAX.to_string());
        assert_eq!(
            spec["resources"],
            json!({"limits": {"memory": max}, "requests": {"memory": max}})
        );
    }

    #[test]
    fn user_request_beyond_int64_raises_the_limit_to_it() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"},
                   "resources": {"requests": {"memory": "1e30"}}}),
            &Policy::default(),
        );
        assert_eq!(spec["resources"]["limits"]["memory"], json!("1e30"));
    }

    #[test]
    fn memory_defaults_off_or_pvc_storage_add_no_resources() {
        let off = Policy {
            memory_defaults: false,
            ..policy(AntiAffinity::Off)
        };
        let memory = json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"}});
        assert!(cluster_defaults("main", &memory, &off).patch.0.is_empty());
        let pvc = json!({"version": "3.6.11", "storage": {"size": "1Gi"}});
        assert!(cluster_defaults("main", &pvc, &policy(AntiAffinity::Off))
            .patch
            .0
            .is_empty());
    }

    #[test]
    fn zero_sized_memory_cluster_gets_no_memory_defaults() {
        let spec = json!({"version": "3.6.11", "storage": {"size": "0", "medium": "Memory"}});
        assert!(cluster_defaults("main", &spec, &policy(AntiAffinity::Off))
            .patch
            .0
            .is_empty());
    }

    #[test]
    fn unreadable_spec_gets_no_defaults() {
        for spec in [
            json!(null),
            json!("x"),
            json!({"version": 3}),
            json!({"version": "3.6.11", "resources": "big"}),
        ] {
            let defaults = cluster_defaults("main", &spec, &Policy::default());
            assert!(defaults.patch.0.is_empty(), "{spec}");
        }
    }

    #[test]
    fn all_defaults_together_apply_cleanly() {
        let (spec, _) = defaulted(
            "main",
            json!({"version": "3.6.11", "replicas": 3, "storage": {"size": "512Mi", "medium": "Memory"}}),
            &policy(AntiAffinity::Required),
        );
        assert!(spec["affinity"]["podAntiAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_array());
        assert_eq!(spec["resources"]["limits"]["memory"], json!("768Mi"));
        assert_eq!(spec["replicas"], json!(3));
        assert_eq!(
            spec["storage"],
            json!({"size": "512Mi", "medium": "Memory"})
        );
    }
}
