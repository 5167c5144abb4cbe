//! The member template: the fields of an EtcdMember's spec its Pod is built from and that a
//! rollout may change on a running member (version, resources, options, affinity, topology
//! spread, image pull secrets, additional metadata, tolerations, node selector, priority class).
//! Storage, TLS, the cluster token and the bootstrap fields are fixed for a member's life and
//! are not part of it.
//!
//! Two uses: the cluster planner compares each member's template with the locked target (a
//! member that differs is rolled, one at a time), and every member Pod records the hash of the
//! template it was built from, so the member controller restarts a Pod whose member was given a
//! new template, and only then (a new operator version that renders Pods differently restarts
//! nothing by itself). Pure.

use std::collections::BTreeMap;

use api::v1alpha2::{EtcdMemberSpec, ObservedSpec};
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// `spec`'s template as a target snapshot (replicas, storage and generation left empty).
pub fn of_member(spec: &EtcdMemberSpec) -> ObservedSpec {
    ObservedSpec {
        replicas: 0,
        version: spec.version.clone(),
        storage: None,
        resources: spec.resources.clone(),
        options: spec.options.clone(),
        affinity: spec.affinity.clone(),
        topology_spread_constraints: spec.topology_spread_constraints.clone(),
        image_pull_secrets: spec.image_pull_secrets.clone(),
        additional_metadata: spec.additional_metadata.clone(),
        tolerations: spec.tolerations.clone(),
        node_selector: spec.node_selector.clone(),
        priority_class_name: spec.priority_class_name.clone(),
        generation: None,
    }
}

/// Quantities by value (`1Gi` = `1073741824`, `500m` = `0.5`), and no resources = `{}`.
fn canonical_resources(r: Option<&ResourceRequirements>) -> Option<ResourceRequirements> {
    let r = r.filter(|r| **r != ResourceRequirements::default())?;
    let canon = |m: &Option<BTreeMap<String, Quantity>>| {
        m.as_ref().filter(|m| !m.is_empty()).map(|m| {
            m.iter()
                .map(|(k, q)| {
                    let v = api::quantity::parse(q)
                        .map(|p| format!("{p:?}"))
                        .unwrap_or_else(|_| q.0.clone());
                    (k.clone(), Quantity(v))
                })
                .collect()
        })
    };
    Some(ResourceRequirements {
        claims: r.claims.clone().filter(|c| !c.is_empty()),
        limits: canon(&r.limits),
        requests: canon(&r.requests),
    })
}

fn canonical(t: &ObservedSpec) -> ObservedSpec {
    ObservedSpec {
        replicas: 0,
        storage: None,
        generation: None,
        resources: canonical_resources(t.resources.as_ref()),
        // An empty name asks for the default priority, as no name does.
        priority_class_name: t.priority_class_name.clone().filter(|n| !n.is_empty()),
        ..t.clone()
    }
}

/// Whether a member built from `member` is what `target` asks for (compared by meaning).
pub fn matches(member: &ObservedSpec, target: &ObservedSpec) -> bool {
    canonical(member) == canonical(target)
}

/// A short hash of `spec`'s template, recorded on the Pod built from it
/// ([`api::labels::TEMPLATE_HASH_ANNOTATION`]).
pub fn hash(spec: &EtcdMemberSpec) -> String {
    target_hash(&of_member(spec))
}

/// The hash a member built from `target` has: equal to [`hash`] of a member exactly when
/// [`matches`] holds.
pub fn target_hash(target: &ObservedSpec) -> String {
    let canon = canonical(target);
    let bytes = serde_json::to_vec(&canon).unwrap_or_default();
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &bytes);
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The merge patch that gives a member now at `current` `target`'s template (absent fields
/// cleared). A merge patch merges maps key by key, so every key the target drops inside a field
/// (a node selector or additional metadata label, a resource limit) is sent as `null`:
/// otherwise the member would keep it, never match the target, and be rolled again and again.
pub fn member_patch(current: &EtcdMemberSpec, target: &ObservedSpec) -> serde_json::Value {
    let mut spec = template_fields(target);
    crate::merge_patch::clear_dropped(&template_fields(&of_member(current)), &mut spec);
    serde_json::json!({ "spec": spec })
}

/// The template's fields as an EtcdMember's spec names them, every one present (`null` when
/// unset).
fn template_fields(t: &ObservedSpec) -> serde_json::Value {
    serde_json::json!({
        "version": t.version,
        "resources": t.resources,
        "options": t.options,
        "affinity": t.affinity,
        "topologySpreadConstraints": t.topology_spread_constraints,
        "imagePullSecrets": t.image_pull_secrets,
        "additionalMetadata": t.additional_metadata,
        "tolerations": t.tolerations,
        "nodeSelector": t.node_selector,
        "priorityClassName": t.priority_class_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(version: &str) -> EtcdMemberSpec {
        EtcdMemberSpec {
            version: version.into(),
            ..Default::default()
        }
    }

    fn resources(memory: &str) -> Option<ResourceRequirements> {
        Some(ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity(memory.into()),
            )])),
            ..Default::default()
        })
    }

    #[test]
    fn a_template_matches_by_meaning_not_spelling() {
        let mut a = member("3.6.16");
        let mut target = of_member(&a);
        target.replicas = 3;
        target.generation = Some(7);
        assert!(matches(&of_member(&a), &target));
        // `{}` and no resources, `1Gi` and `1073741824`: the same.
        a.resources = Some(ResourceRequirements::default());
        assert!(matches(&of_member(&a), &target));
        a.resources = resources("1Gi");
        target.resources = resources("1073741824");
        assert!(matches(&of_member(&a), &target));
        assert_eq!(hash(&a), {
            let mut b = a.clone();
            b.resources = resources("1073741824");
            hash(&b)
        });
        // A different value or version: not the same.
        target.resources = resources("2Gi");
        assert!(!matches(&of_member(&a), &target));
        target.resources = resources("1Gi");
        target.version = "3.6.17".into();
        assert!(!matches(&of_member(&a), &target));
        assert_ne!(hash(&a), hash(&member("3.6.17")));
    }

    #[test]
    fn fields_outside_the_template_change_no_hash() {
        let a = member("3.6.16");
        let mut b = a.clone();
        b.initial_cluster = "x=http://x:2380".into();
        b.dormant = true;
        b.bootstrap = true;
        b.storage.size = Quantity("9Gi".into());
        assert_eq!(hash(&a), hash(&b));
    }

    #[test]
    fn the_member_patch_clears_what_the_target_leaves_unset() {
        let mut target = of_member(&member("3.6.17"));
        target.resources = None;
        let patch = member_patch(&member("3.6.16"), &target);
        assert_eq!(patch["spec"]["version"], "3.6.17");
        assert!(patch["spec"]["resources"].is_null());
        assert!(patch["spec"].as_object().unwrap().contains_key("resources"));
    }

    /// An operator upgrade must restart no member: a template that sets none of the placement
    /// fields serializes, and so hashes, exactly as before they existed. The hashes are those
    /// of `{"replicas":0,"version":"3.6.11"}` and of the same with `imagePullSecrets`.
    #[test]
    fn a_template_without_placement_hashes_as_before_placement_existed() {
        let mut spec = member("3.6.11");
        assert_eq!(hash(&spec), "61a1b3fcf52ef4ee");
        spec.image_pull_secrets = vec![k8s_openapi::api::core::v1::LocalObjectReference {
            name: "regcred".into(),
        }];
        assert_eq!(hash(&spec), "ee03d90b679ea3a5");
        // Written as empty rather than left out: the same.
        spec.priority_class_name = Some(String::new());
        assert_eq!(hash(&spec), "ee03d90b679ea3a5");
    }

    #[test]
    fn each_placement_field_is_part_of_the_template() {
        let base = member("3.6.11");
        let mut tolerating = base.clone();
        tolerating.tolerations = vec![crate::builders::tests::dedicated_toleration()];
        let mut selecting = base.clone();
        selecting.node_selector = BTreeMap::from([("dedicated".into(), "etcd".into())]);
        let mut prioritised = base.clone();
        prioritised.priority_class_name = Some("etcd-critical".into());
        let hashes = [&base, &tolerating, &selecting, &prioritised].map(hash);
        for (i, a) in hashes.iter().enumerate() {
            for b in &hashes[i + 1..] {
                assert_ne!(a, b, "{hashes:?}");
            }
        }
        assert!(!matches(&of_member(&base), &of_member(&prioritised)));
    }

    /// The member as the apiserver stores it after `member_patch` (RFC 7386, as kube sends it).
    fn patched(current: &EtcdMemberSpec, target: &ObservedSpec) -> EtcdMemberSpec {
        let mut doc = serde_json::json!({ "spec": current });
        json_patch::merge(&mut doc, &member_patch(current, target));
        serde_json::from_value(doc["spec"].clone()).expect("a member spec")
    }

    /// A merge patch merges maps key by key: a resource limit, a label or an annotation the
    /// target no longer has must still go, or the member never matches its target and the
    /// rollout is stuck on it.
    #[test]
    fn the_member_patch_removes_map_keys_the_target_dropped() {
        let mut current = member("3.6.11");
        current.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("1".into())),
                ("memory".to_string(), Quantity("1Gi".into())),
            ])),
            ..Default::default()
        });
        current.additional_metadata = Some(api::v1alpha2::AdditionalMetadata {
            labels: BTreeMap::from([("team".into(), "a".into()), ("tier".into(), "db".into())]),
            annotations: BTreeMap::from([("note".into(), "x".into())]),
        });
        let mut wanted = current.clone();
        wanted.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("1Gi".into()),
            )])),
            ..Default::default()
        });
        wanted.additional_metadata = Some(api::v1alpha2::AdditionalMetadata {
            labels: BTreeMap::from([("team".into(), "a".into())]),
            annotations: BTreeMap::new(),
        });
        let target = of_member(&wanted);
        let after = patched(&current, &target);
        assert!(
            matches(&of_member(&after), &target),
            "patched {:?}, wanted {:?}",
            of_member(&after),
            target
        );
    }

    #[test]
    fn the_member_patch_drops_node_selector_labels_the_target_no_longer_has() {
        let mut current = member("3.6.11");
        current.node_selector = BTreeMap::from([
            ("dedicated".into(), "etcd".into()),
            ("zone".into(), "a".into()),
        ]);
        let mut target = of_member(&member("3.6.11"));
        target.node_selector = BTreeMap::from([("dedicated".into(), "etcd2".into())]);
        let patch = member_patch(&current, &target);
        assert_eq!(
            patch["spec"]["nodeSelector"],
            serde_json::json!({"dedicated": "etcd2", "zone": null})
        );
        // Applied as a merge patch, the member then asks for the target's labels exactly.
        let mut doc = serde_json::to_value(&current).unwrap();
        json_patch::merge(&mut doc["nodeSelector"], &patch["spec"]["nodeSelector"]);
        let patched: EtcdMemberSpec = serde_json::from_value(doc).unwrap();
        assert_eq!(patched.node_selector, target.node_selector);
    }
}
