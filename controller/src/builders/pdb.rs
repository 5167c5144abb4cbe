//! The PodDisruptionBudget `<cluster>` over voter Pods: voluntary evictions may never push the
//! voters below a majority.

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::EtcdCluster;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{cluster_metadata, BuildError};

/// `max(voters, target) / 2 + 1`: a majority of the larger of what runs and what is wanted, so a
/// scale step in progress never lowers the bar (1→1, 3→2, 4→3, 5→3).
pub fn min_available(voters: i32, target_replicas: i32) -> i32 {
    voters.max(target_replicas) / 2 + 1
}

/// `None` while there are no voters (before bootstrap, while paused): a budget over nothing
/// would only block drains.
pub fn voter_pdb(
    cluster: &EtcdCluster,
    voters: i32,
    target_replicas: i32,
) -> Result<Option<PodDisruptionBudget>, BuildError> {
    if voters == 0 {
        return Ok(None);
    }
    Ok(Some(PodDisruptionBudget {
        metadata: cluster_metadata(cluster, cluster.name_any())?,
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available(voters, target_replicas))),
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (labels::CLUSTER.to_string(), cluster.name_any()),
                    (labels::ROLE.to_string(), labels::ROLE_VOTER.to_string()),
                ])),
                match_expressions: None,
            }),
            ..Default::default()
        }),
        status: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::tests::cluster;

    #[test]
    fn min_available_is_a_majority_of_the_larger_of_voters_and_target() {
        assert_eq!(min_available(1, 1), 1);
        assert_eq!(min_available(3, 3), 2);
        assert_eq!(min_available(4, 3), 3);
        assert_eq!(min_available(5, 5), 3);
        assert_eq!(min_available(3, 5), 3);
        assert_eq!(min_available(1, 0), 1);
    }

    #[test]
    fn pdb_selects_voters_and_is_absent_without_voters() {
        let c = cluster("my-etcd", "n");
        assert_eq!(voter_pdb(&c, 0, 3).unwrap(), None);
        let pdb = voter_pdb(&c, 3, 3).unwrap().unwrap();
        assert_eq!(pdb.metadata.name.as_deref(), Some("my-etcd"));
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.min_available, Some(IntOrString::Int(2)));
        let sel = spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(sel[labels::ROLE], "voter");
        assert_eq!(sel[labels::CLUSTER], "my-etcd");
    }
}
