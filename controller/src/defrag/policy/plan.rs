//! The pure decisions of an EtcdDefragPolicy: the run it creates (named for the minute, owned by
//! the policy, labelled with its name, carrying its rule), whether a check is due, which member a
//! check selects (as the run would judge it), and which finished runs the history deletes.
//!
//! Pure: values in, values out; the policy's I/O is in `mod.rs`.

use api::labels;
use api::v1alpha2::{DefragPhase, EtcdDefrag, EtcdDefragPolicy, EtcdDefragSpec};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::cron::run_name;
use crate::defrag::run::plan::{self, Gate};
use crate::Error;

/// On the EtcdDefrags a policy creates: the policy's name.
pub const POLICY_LABEL: &str = labels::DEFRAG_POLICY;
/// A run of the policy as the history sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub name: String,
    pub created: DateTime<Utc>,
    pub phase: Option<DefragPhase>,
}

/// The finished runs beyond the newest `keep_complete` Complete and `keep_failed` Failed
/// ones, oldest first. Unfinished runs are never deleted.
pub fn history_to_delete(runs: &[Run], keep_complete: usize, keep_failed: usize) -> Vec<String> {
    let mut gone = Vec::new();
    for (phase, keep) in [
        (DefragPhase::Complete, keep_complete),
        (DefragPhase::Failed, keep_failed),
    ] {
        let mut of: Vec<&Run> = runs.iter().filter(|r| r.phase == Some(phase)).collect();
        // Newest first; the name (it carries the minute) breaks ties.
        of.sort_by(|a, b| b.created.cmp(&a.created).then(b.name.cmp(&a.name)));
        gone.extend(
            of.into_iter()
                .skip(keep)
                .map(|r| (r.created, r.name.clone())),
        );
    }
    gone.sort();
    gone.into_iter().map(|(_, n)| n).collect()
}

/// Whether a check is due: never made, or the last one `interval` seconds ago or more.
pub fn check_due(last: Option<DateTime<Utc>>, interval: i64, now: DateTime<Utc>) -> bool {
    last.is_none_or(|l| (now - l).num_seconds() >= interval)
}

/// The first member the rule selects and why, among `(member, dbSize, dbSizeInUse, quota)`: each
/// member's usage is measured against the quota it runs with (its Pod's
/// `--quota-backend-bytes`), which during a rollout of a new quota is not yet the spec's.
pub fn first_selected(
    rule: &api::v1alpha2::DefragRule,
    members: &[(String, i64, i64, i64)],
) -> Option<(String, String)> {
    members.iter().find_map(|(name, size, in_use, quota)| {
        match plan::gate(rule, *size, *in_use, *quota) {
            Gate::Defragment(why) => Some((name.clone(), why)),
            Gate::Skip(_) => None,
        }
    })
}

pub fn finished(d: &EtcdDefrag) -> bool {
    d.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(DefragPhase::is_terminal)
}

/// The EtcdDefrag the policy creates at `at`.
pub fn new_run(policy: &EtcdDefragPolicy, at: DateTime<Utc>) -> Result<EtcdDefrag, Error> {
    let name = policy.name_any();
    let mut run_labels = labels::cluster_labels(&policy.spec.cluster_ref.name);
    run_labels.insert(POLICY_LABEL.to_string(), name.clone());
    let owner = OwnerReference {
        api_version: EtcdDefragPolicy::api_version(&()).to_string(),
        kind: EtcdDefragPolicy::kind(&()).to_string(),
        name: name.clone(),
        uid: policy.uid().ok_or(Error::NoUid)?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    Ok(EtcdDefrag {
        metadata: ObjectMeta {
            name: Some(run_name(&name, at)),
            namespace: policy.namespace(),
            labels: Some(run_labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: EtcdDefragSpec {
            cluster_ref: policy.spec.cluster_ref.clone(),
            rule: policy.spec.rule.clone(),
            ttl_seconds_after_finished: None,
        },
        status: None,
    })
}

#[cfg(test)]
mod tests;
