//! Builders: pure functions from the API objects to the Kubernetes objects the operator owns.
//! No I/O; every builder is unit-tested on values.

pub mod pdb;
pub mod pod;
pub mod pvc;
pub mod restore;
pub mod s3_access;
pub mod service;

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

/// The member's data volume and where etcd's data dir is mounted: shared by the etcd container
/// and the restore init container, which fills it before etcd starts.
pub const DATA_VOLUME: &str = "data";
pub const DATA_DIR: &str = "/var/lib/etcd";

pub(crate) fn mount(
    name: &str,
    path: &str,
    read_only: bool,
) -> k8s_openapi::api::core::v1::VolumeMount {
    k8s_openapi::api::core::v1::VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// An environment variable read from `key` of Secret `secret` (which must have it).
pub(crate) fn secret_env(
    name: &str,
    secret: &str,
    key: &str,
) -> k8s_openapi::api::core::v1::EnvVar {
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, SecretKeySelector};
    EnvVar {
        name: name.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_string(),
                key: key.to_string(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    #[error("object has no namespace")]
    NoNamespace,
    #[error("{0} has no uid yet; it must be read back from the API before children are built")]
    NoUid(String),
    #[error("member {0} is pending (no initialCluster yet); it gets no Pod until it has been added to etcd")]
    PendingMember(String),
    #[error("member {0} restores a snapshot, but the operator runs without --operator-image (OPERATOR_IMAGE), whose binary the restore init container runs; set it (the Helm chart does) and restart the operator")]
    NoOperatorImage(String),
    #[error("member {0}: {1}")]
    InvalidRestore(String, String),
}

/// Metadata for an object that belongs to a member (its Pod, its PVC): the member's labels merged
/// over the user's additional metadata, owned by the member.
pub fn member_metadata(member: &EtcdMember, owner: OwnerReference) -> ObjectMeta {
    let name = member.name_any();
    let extra = member.spec.additional_metadata.as_ref();
    ObjectMeta {
        name: Some(name.clone()),
        namespace: member.namespace(),
        labels: Some(labels::merge_user_metadata(
            labels::member_labels(&member.spec.cluster_name, &name),
            extra.map(|m| &m.labels),
        )),
        annotations: non_empty(labels::merge_user_metadata(
            BTreeMap::new(),
            extra.map(|m| &m.annotations),
        )),
        owner_references: Some(vec![owner]),
        ..Default::default()
    }
}

/// Metadata for a cluster-wide object (Services, PDB, Certificates), owned by the EtcdCluster.
pub fn cluster_metadata(cluster: &EtcdCluster, name: String) -> Result<ObjectMeta, BuildError> {
    let owner = cluster
        .controller_owner_ref(&())
        .ok_or_else(|| BuildError::NoUid(cluster.name_any()))?;
    let extra = cluster.spec.additional_metadata.as_ref();
    Ok(ObjectMeta {
        name: Some(name),
        namespace: Some(cluster.namespace().ok_or(BuildError::NoNamespace)?),
        labels: Some(labels::merge_user_metadata(
            labels::cluster_labels(&cluster.name_any()),
            extra.map(|m| &m.labels),
        )),
        annotations: non_empty(labels::merge_user_metadata(
            BTreeMap::new(),
            extra.map(|m| &m.annotations),
        )),
        owner_references: Some(vec![owner]),
        ..Default::default()
    })
}

fn non_empty(map: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then_some(map)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use api::v1alpha2::{EtcdClusterSpec, EtcdMemberSpec};

    pub fn member(name: &str, cluster: &str, ns: &str) -> EtcdMember {
        let mut m = EtcdMember::new(
            name,
            EtcdMemberSpec {
                cluster_name: cluster.to_string(),
                version: "3.6.11".to_string(),
                initial_cluster: crate::naming::initial_cluster_entry(name, cluster, ns, false),
                cluster_token: format!("{ns}-{cluster}-uid"),
                ..Default::default()
            },
        );
        m.metadata.namespace = Some(ns.to_string());
        m.metadata.uid = Some(format!("uid-{name}"));
        m
    }

    /// The toleration of the dedicated nodes in docs/scheduling.md.
    pub fn dedicated_toleration() -> k8s_openapi::api::core::v1::Toleration {
        k8s_openapi::api::core::v1::Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("etcd".into()),
            effect: Some("NoSchedule".into()),
            toleration_seconds: None,
        }
    }

    pub fn cluster(name: &str, ns: &str) -> EtcdCluster {
        let mut c = EtcdCluster::new(
            name,
            EtcdClusterSpec {
                version: "3.6.11".to_string(),
                ..Default::default()
            },
        );
        c.metadata.namespace = Some(ns.to_string());
        c.metadata.uid = Some(format!("uid-{name}"));
        c
    }

    #[test]
    fn additional_metadata_is_merged_and_operator_keys_win() {
        let mut c = cluster("c", "n");
        c.spec.additional_metadata = Some(api::v1alpha2::AdditionalMetadata {
            labels: BTreeMap::from([
                ("team".into(), "db".into()),
                (labels::CLUSTER.into(), "forged".into()),
            ]),
            annotations: BTreeMap::from([("note".into(), "x".into())]),
        });
        let meta = cluster_metadata(&c, "c".into()).unwrap();
        let l = meta.labels.unwrap();
        assert_eq!(l["team"], "db");
        assert_eq!(l[labels::CLUSTER], "c");
        assert_eq!(meta.annotations.unwrap()["note"], "x");
    }
}
