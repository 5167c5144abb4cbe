//! The EtcdDefrag rules: the size gate of a defrag rule (shared with EtcdDefragPolicy), the
//! TTL, and a spec that never changes after create.

use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::fields::non_empty;
use super::transition::spec_unchanged;
use super::Violation;
use crate::quantity;
use crate::v1alpha2::{DefragRule, EtcdDefragSpec, QUOTA_USAGE_PATTERN};

static QUOTA_USAGE_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(QUOTA_USAGE_PATTERN).expect("QUOTA_USAGE_PATTERN is a valid regex")
});

/// A positive quantity (`freeSpaceAbove`, `minReclaim`), parsed; `None` after reporting why not.
fn positive_quantity(
    field: &str,
    q: &Quantity,
    example: &str,
    out: &mut Vec<Violation>,
) -> Option<quantity::ParsedQuantity> {
    match quantity::parse(q) {
        Err(e) => {
            out.push(Violation::new(
                field,
                format!("must be a quantity: {e}"),
                format!("write a size such as {example}"),
            ));
            None
        }
        Ok(parsed) if !parsed.is_positive() => {
            out.push(
                Violation::new(
                    field,
                    "must be greater than 0",
                    format!("write a size such as {example}, or leave it unset for the default"),
                )
                .value(&q.0),
            );
            None
        }
        Ok(parsed) => Some(parsed),
    }
}

pub(super) fn defrag_rule(rule: &DefragRule) -> Vec<Violation> {
    let mut out = Vec::new();
    let prefix = "spec.rule";
    if rule.is_all() {
        let others: Vec<&str> = [
            ("freeSpaceAbove", rule.free_space_above.is_some()),
            ("quotaUsageAbove", rule.quota_usage_above.is_some()),
            ("minReclaim", rule.min_reclaim.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if !others.is_empty() {
            out.push(Violation::new(
                prefix,
                format!(
                    "all=true defragments every member unconditionally and cannot be combined with {}",
                    others.join(", ")
                ),
                "remove those fields, or set all=false to defragment by the size gate",
            ));
        }
    }
    if let Some(p) = &rule.quota_usage_above {
        if !QUOTA_USAGE_RE.is_match(p) {
            out.push(
                Violation::new(
                    format!("{prefix}.quotaUsageAbove"),
                    "must be a whole percentage from 1% to 99% (100% and above are refused: at 100% the quota is already exhausted and etcd has raised NOSPACE)",
                    "write e.g. 80%",
                )
                .value(p),
            );
        }
    }
    let free = positive_quantity(
        &format!("{prefix}.freeSpaceAbove"),
        &rule.free_space_above(),
        "200Mi",
        &mut out,
    );
    let min = positive_quantity(
        &format!("{prefix}.minReclaim"),
        &rule.min_reclaim(),
        "32Mi",
        &mut out,
    );
    if let (Some(free), Some(min)) = (free, min) {
        if min > free {
            out.push(
                Violation::new(
                    format!("{prefix}.minReclaim"),
                    format!(
                        "must not be above freeSpaceAbove ({}; defaults: minReclaim 32Mi, \
                         freeSpaceAbove 200Mi): a member with that much reclaimable space is \
                         defragmented anyway",
                        rule.free_space_above().0
                    ),
                    "lower minReclaim or raise freeSpaceAbove",
                )
                .value(&rule.min_reclaim().0),
            );
        }
    }
    out
}

/// Every violation of an EtcdDefrag spec on create.
pub fn defrag_create(spec: &EtcdDefragSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    if let Some(rule) = &spec.rule {
        out.extend(defrag_rule(rule));
    }
    if let Some(ttl) = spec.ttl_seconds_after_finished.filter(|t| *t < 0) {
        out.push(
            Violation::new(
                "spec.ttlSecondsAfterFinished",
                "must be 0 or more",
                "leave it unset to keep the object after it finishes",
            )
            .value(ttl),
        );
    }
    out
}

/// Every violation of an EtcdDefrag update: the spec never changes.
pub fn defrag_update(old: &EtcdDefragSpec, new: &EtcdDefragSpec) -> Vec<Violation> {
    let mut out = defrag_create(new);
    out.extend(spec_unchanged(
        old,
        new,
        "cannot be changed: a defrag's spec is immutable, it runs once",
        "EtcdDefrag",
    ));
    out
}
