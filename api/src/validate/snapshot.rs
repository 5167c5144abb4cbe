//! The EtcdSnapshot rules: a cluster and a destination on create; the spec never changes after.

use super::fields::non_empty;
use super::location::destination;
use super::transition::spec_unchanged;
use super::Violation;
use crate::v1alpha2::EtcdSnapshotSpec;

/// Every violation of an EtcdSnapshot spec on create.
pub fn snapshot_create(spec: &EtcdSnapshotSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    out.extend(destination("spec.destination", &spec.destination));
    out
}

/// Every violation of an EtcdSnapshot update: the spec never changes.
pub fn snapshot_update(old: &EtcdSnapshotSpec, new: &EtcdSnapshotSpec) -> Vec<Violation> {
    let mut out = snapshot_create(new);
    out.extend(spec_unchanged(
        old,
        new,
        "cannot be changed: a snapshot's spec is immutable, it is taken once",
        "EtcdSnapshot",
    ));
    out
}
