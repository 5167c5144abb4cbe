//! The member template: the fields of an EtcdMember's spec its Pod is built from and that a
//! rollout may change on a running member (version, resources, options, affinity, topology
//! spread, image pull secrets, additional metadata). Storage, TLS, the cluster token and the
//! bootstrap fields are fixed for a member's life and are not part of it.
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

/// The merge patch that gives a member `target`'s template (absent fields cleared).
pub fn member_patch(target: &ObservedSpec) -> serde_json::Value {
    serde_json::json!({"spec": {
        "version": target.version,
        "resources": target.resources,
        "options": target.options,
        "affinity": target.affinity,
        "topologySpreadConstraints": target.topology_spread_constraints,
        "imagePullSecrets": target.image_pull_secrets,
        "additionalMetadata": target.additional_metadata,
    }})
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
        let patch = member_patch(&target);
        assert_eq!(patch["spec"]["version"], "3.6.17");
        assert!(patch["spec"]["resources"].is_null());
        assert!(patch["spec"].as_object().unwrap().contains_key("resources"));
    }
}
