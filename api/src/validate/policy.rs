//! The EtcdDefragPolicy rules beyond what it shares with the snapshot schedule (`schedule.rs`):
//! its name (the value of its runs' `defrag-policy` label) and the reference's released fields
//! (`startingDeadlineSeconds`, `historyLimit`, `ttlSecondsAfterFinished`, each 0 or more).

use super::{cel, Violation};
use crate::v1alpha2::{EtcdDefragPolicySpec, MAX_POLICY_NAME};

/// A policy's name: at most [`MAX_POLICY_NAME`] characters, as its runs carry it as a label
/// value (the CRD's root CEL rule). The apiserver checks the rest of the name's shape.
pub(super) fn policy_name(name: &str) -> Option<Violation> {
    let length = name.chars().count();
    (length > MAX_POLICY_NAME).then(|| {
        Violation::of_rule(
            "metadata.name",
            cel::POLICY_NAME,
            format!("this name is {length} characters long"),
            "",
        )
        .value(format!("{name:?}"))
    })
}

/// The released fields' bounds: each is 0 or more (the CRD's `minimum: 0`).
pub(super) fn released_fields(spec: &EtcdDefragPolicySpec) -> Vec<Violation> {
    [
        (
            "spec.startingDeadlineSeconds",
            spec.starting_deadline_seconds,
            "leave it unset to act on a missed tick however late, or give the seconds a tick may \
             still be started after its time",
        ),
        (
            "spec.historyLimit",
            spec.history_limit.map(i64::from),
            "leave it unset to keep the per-phase limits (or the runs' TTL), or give how many \
             finished runs to keep",
        ),
        (
            "spec.ttlSecondsAfterFinished",
            spec.ttl_seconds_after_finished.map(i64::from),
            "leave it unset to keep each run after it finishes",
        ),
    ]
    .into_iter()
    .filter_map(|(field, value, hint)| {
        value
            .filter(|v| *v < 0)
            .map(|v| Violation::new(field, "must be 0 or more", hint).value(v))
    })
    .collect()
}
