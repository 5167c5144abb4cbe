//! The EtcdRecovery rules: a cluster and exactly one source on create; the spec never changes
//! after.

use super::fields::{bounded_length, non_empty};
use super::transition::spec_unchanged;
use super::Violation;
use crate::v1alpha2::{
    EtcdRecoverySpec, CEL_RECOVERY_ONE_SOURCE, CEL_RECOVERY_UNVERIFIED_NEEDS_SNAPSHOT,
};

/// The schema's bound on `spec.source.survivor.member` (an object name).
const MEMBER_NAME_MAX: usize = 253;

/// Every violation of an EtcdRecovery spec on create.
pub fn recovery_create(spec: &EtcdRecoverySpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    let source = &spec.source;
    match (&source.survivor, &source.snapshot) {
        (Some(_), Some(_)) => out.push(Violation::of_rule(
            "spec.source",
            CEL_RECOVERY_ONE_SOURCE,
            "both are set",
            "keep survivor to rebuild from the member with the most data, or snapshot to roll \
             back to a stored EtcdSnapshot, not both",
        )),
        (None, None) => out.push(Violation::of_rule(
            "spec.source",
            CEL_RECOVERY_ONE_SOURCE,
            "neither is set",
            "write source: {survivor: {}} to rebuild from the member with the most data",
        )),
        _ => {}
    }
    if let Some(member) = source.survivor.as_ref().and_then(|s| s.member.as_deref()) {
        out.extend(bounded_length(
            "spec.source.survivor.member",
            member,
            MEMBER_NAME_MAX,
        ));
    }
    if let Some(snapshot) = &source.snapshot {
        out.extend(non_empty("spec.source.snapshot.name", &snapshot.name));
    }
    if spec.allow_unverified_snapshot.is_some() && source.snapshot.is_none() {
        out.push(Violation::of_rule(
            "spec.allowUnverifiedSnapshot",
            CEL_RECOVERY_UNVERIFIED_NEEDS_SNAPSHOT,
            "set without spec.source.snapshot",
            "remove spec.allowUnverifiedSnapshot, or recover from a snapshot",
        ));
    }
    out
}

/// Every violation of an EtcdRecovery update: the spec never changes.
pub fn recovery_update(old: &EtcdRecoverySpec, new: &EtcdRecoverySpec) -> Vec<Violation> {
    let mut out = recovery_create(new);
    out.extend(spec_unchanged(
        old,
        new,
        "cannot be changed: a recovery's spec is immutable, it runs once",
        "EtcdRecovery",
    ));
    out
}
