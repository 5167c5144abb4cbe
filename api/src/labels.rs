//! Label keys, finalizers and object names. Scripts select on these; they are wire contract.

use std::collections::BTreeMap;

pub const PREFIX: &str = "etcd-operator.cozystack.io/";
pub const CLUSTER: &str = "etcd-operator.cozystack.io/cluster";
pub const ROLE: &str = "etcd-operator.cozystack.io/role";
pub const ROLE_VOTER: &str = "voter";
pub const MEMBER_CLEANUP_FINALIZER: &str = "etcd-operator.cozystack.io/member-cleanup";

pub const APP_NAME: &str = "app.kubernetes.io/name";
pub const APP_INSTANCE: &str = "app.kubernetes.io/instance";
pub const APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const APP_COMPONENT: &str = "app.kubernetes.io/component";
pub const APP_NAME_VALUE: &str = "etcd";
pub const MANAGED_BY_VALUE: &str = "etcd-operator";

/// Labels on everything the operator creates for `cluster`.
pub fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CLUSTER.to_string(), cluster.to_string()),
        (APP_NAME.to_string(), APP_NAME_VALUE.to_string()),
        (APP_INSTANCE.to_string(), cluster.to_string()),
        (APP_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
    ])
}

/// Labels on a member's own objects (EtcdMember, Pod, PVC).
pub fn member_labels(cluster: &str, member: &str) -> BTreeMap<String, String> {
    let mut labels = cluster_labels(cluster);
    labels.insert(APP_COMPONENT.to_string(), member.to_string());
    labels
}

/// `status.selector` of an EtcdCluster and the selector of its Services.
pub fn cluster_selector(cluster: &str) -> String {
    format!("{CLUSTER}={cluster}")
}

/// Merge user metadata under operator-owned keys: operator keys win, and user keys under the
/// operator's prefix are dropped so a user cannot forge the cluster or role labels.
pub fn merge_user_metadata(
    operator: BTreeMap<String, String>,
    user: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut merged: BTreeMap<String, String> = user
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with(PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    merged.extend(operator);
    merged
}

pub fn pvc_name(member: &str) -> String {
    format!("data-{member}")
}

pub fn headless_service_name(cluster: &str) -> String {
    cluster.to_string()
}

pub fn client_service_name(cluster: &str) -> String {
    format!("{cluster}-client")
}

pub fn snapshot_job_name(snapshot: &str) -> String {
    format!("{snapshot}-snapshot")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_metadata_cannot_override_operator_keys_or_forge_prefixed_ones() {
        let user = BTreeMap::from([
            (CLUSTER.to_string(), "other".to_string()),
            (ROLE.to_string(), ROLE_VOTER.to_string()),
            (APP_NAME.to_string(), "not-etcd".to_string()),
            ("team".to_string(), "storage".to_string()),
        ]);
        let merged = merge_user_metadata(cluster_labels("c1"), Some(&user));
        assert_eq!(merged[CLUSTER], "c1");
        assert_eq!(merged[APP_NAME], "etcd");
        assert_eq!(merged["team"], "storage");
        assert!(!merged.contains_key(ROLE));
    }
}
