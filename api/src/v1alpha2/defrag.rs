//! `EtcdDefrag`: a one-shot, run-to-completion request to defragment one cluster's members,
//! modelled on `EtcdSnapshot` (the spec is immutable, terminal phases are sticky). The
//! controller is `controller::defrag`; docs/defrag.md describes the behaviour.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::LocalReference;

/// `freeSpaceAbove` when the rule leaves it unset (and the whole gate when there is no rule).
pub const DEFAULT_FREE_SPACE_ABOVE: &str = "200Mi";
/// `minReclaim` when the rule leaves it unset.
pub const DEFAULT_MIN_RECLAIM: &str = "32Mi";
/// `quotaUsageAbove`: a whole percentage from 1% to 99%, the released reference's pattern. At
/// 100% the backend is already full (etcd raised NOSPACE), so the threshold would never help.
pub const QUOTA_USAGE_PATTERN: &str = r"^[1-9][0-9]?%$";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "etcd-operator.cozystack.io",
    version = "v1alpha2",
    kind = "EtcdDefrag",
    plural = "etcddefrags",
    namespaced,
    status = "EtcdDefragStatus",
    derive = "PartialEq",
    doc = "A one-shot defragmentation of an EtcdCluster's members, one member at a time.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterRef.name"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Defragmented",
        type_ = "integer",
        json_path = ".status.defragmented"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    shortname = "edefrag",
    category = "etcd"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf")
    .message("EtcdDefrag spec is immutable: a defrag runs once; create a new EtcdDefrag with another name instead"))]
pub struct EtcdDefragSpec {
    /// The EtcdCluster (same namespace) to defragment.
    pub cluster_ref: LocalReference,
    /// Which members to defragment. Absent means the default gate (`freeSpaceAbove: 200Mi`),
    /// never `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<DefragRule>,
    /// Delete this object that many seconds after it finishes (Complete or Failed, counted from
    /// `status.completedAt`); unset keeps it. The EtcdDefrag controller deletes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// Which members a run defragments. `all: true` takes every member and excludes the other
/// fields; otherwise a member is defragmented when its reclaimable space (`dbSize -
/// dbSizeInUse`) exceeds `freeSpaceAbove`, or, when `dbSize` exceeds `quotaUsageAbove` of the
/// backend quota, exceeds `minReclaim`.
///
/// The defaults of `freeSpaceAbove` (200Mi) and `minReclaim` (32Mi) are applied when the rule is
/// read ([`DefragRule::free_space_above`], [`DefragRule::min_reclaim`]), not written into the
/// object: a stored default would contradict `all: true`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.all) || !self.all || (!has(self.freeSpaceAbove) && !has(self.quotaUsageAbove) && !has(self.minReclaim))")
        .message("spec.rule.all=true defragments every member unconditionally and cannot be combined with freeSpaceAbove, quotaUsageAbove or minReclaim; remove those fields or set all=false"),
    validation = Rule::new("!isQuantity(string(has(self.minReclaim) ? self.minReclaim : '32Mi')) || !isQuantity(string(has(self.freeSpaceAbove) ? self.freeSpaceAbove : '200Mi')) || quantity(string(has(self.minReclaim) ? self.minReclaim : '32Mi')).compareTo(quantity(string(has(self.freeSpaceAbove) ? self.freeSpaceAbove : '200Mi'))) <= 0")
        .message("spec.rule.minReclaim must not be above spec.rule.freeSpaceAbove (defaults 32Mi and 200Mi): a member with that much reclaimable space is defragmented anyway; lower minReclaim or raise freeSpaceAbove")
        .field_path(".minReclaim"),
)]
pub struct DefragRule {
    /// Defragment every member, unconditionally. Exclusive with the other fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
    /// Defragment a member whose reclaimable space exceeds this (default 200Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))")
        .message("spec.rule.freeSpaceAbove must be a positive quantity such as 200Mi or 1Gi"))]
    pub free_space_above: Option<Quantity>,
    /// A percentage of the backend quota from `1%` to `99%` such as `80%`: above it, the floor
    /// drops to `minReclaim`. Unset by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]?%$"), length(max = 4))]
    #[x_kube(validation = Rule::new(r"self.matches('^[1-9][0-9]?%$')")
        .message("spec.rule.quotaUsageAbove must be a whole percentage from 1% to 99% (100% and above are refused: at 100% the quota is already exhausted and etcd has raised NOSPACE); write e.g. 80%"))]
    pub quota_usage_above: Option<String>,
    /// The least reclaimable space worth a defrag (default 32Mi); not above `freeSpaceAbove`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))")
        .message("spec.rule.minReclaim must be a positive quantity such as 32Mi"))]
    pub min_reclaim: Option<Quantity>,
}

impl DefragRule {
    pub fn is_all(&self) -> bool {
        self.all == Some(true)
    }

    /// `freeSpaceAbove`, or its default.
    pub fn free_space_above(&self) -> Quantity {
        self.free_space_above
            .clone()
            .unwrap_or_else(|| Quantity(DEFAULT_FREE_SPACE_ABOVE.to_string()))
    }

    /// `minReclaim`, or its default.
    pub fn min_reclaim(&self) -> Quantity {
        self.min_reclaim
            .clone()
            .unwrap_or_else(|| Quantity(DEFAULT_MIN_RECLAIM.to_string()))
    }
}

impl EtcdDefragSpec {
    /// The rule in force: the given one, or the default gate.
    pub fn rule(&self) -> DefragRule {
        self.rule.clone().unwrap_or_default()
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DefragPhase {
    #[default]
    Pending,
    Running,
    Complete,
    Failed,
}

impl DefragPhase {
    /// Complete and Failed never change again (a finished run is never re-run).
    pub fn is_terminal(self) -> bool {
        matches!(self, DefragPhase::Complete | DefragPhase::Failed)
    }
}

/// What happened to one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DefragOutcome {
    Skipped,
    Defragmented,
    Failed,
}

/// One member's part in a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragMemberStatus {
    /// The EtcdMember.
    pub name: String,
    /// `leader` or `follower` when the member was processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<DefragOutcome>,
    /// Why it was skipped or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size_before: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size_after: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaimed_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdDefragStatus {
    /// Pending → Running → Complete | Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DefragPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Members defragmented by this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defragmented: Option<i32>,
    /// Each member's outcome, keyed by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub members: Vec<DefragMemberStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
