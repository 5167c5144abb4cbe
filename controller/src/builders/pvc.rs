//! The member's data PVC, `data-<member>`: labelled with its cluster and member, marked with the
//! member's UID ([`labels::MEMBER_UID_ANNOTATION`]) and its cluster's
//! ([`labels::CLUSTER_UID_ANNOTATION`]: which incarnation of a cluster name it belongs to) and
//! owned by nothing, so neither a Pod's
//! deletion, a pause, nor the deletion of the EtcdMember object takes the data. The operator
//! deletes it itself once its member is out of etcd, or with the cluster. Also whose a claim is
//! ([`claim_of`]), for the member that adopts it and the cluster that judges its data.

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::EtcdMember;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use kube::{Resource, ResourceExt};

use super::{member_metadata, BuildError};

/// `None` for Memory members, which keep their data in a tmpfs emptyDir.
pub fn member_pvc(member: &EtcdMember) -> Result<Option<PersistentVolumeClaim>, BuildError> {
    if member.spec.storage.is_memory() {
        return Ok(None);
    }
    let name = member.name_any();
    let owner = member
        .controller_owner_ref(&())
        .ok_or_else(|| BuildError::NoUid(name.clone()))?;
    let uid = owner.uid.clone();
    let mut meta = member_metadata(member, owner);
    meta.name = Some(labels::pvc_name(&name));
    meta.owner_references = None;
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(labels::MEMBER_UID_ANNOTATION.to_string(), uid);
    if let Some(cluster) = cluster_uid(member) {
        annotations.insert(labels::CLUSTER_UID_ANNOTATION.to_string(), cluster);
    }
    Ok(Some(PersistentVolumeClaim {
        metadata: meta,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            // Absent = the default StorageClass; "" = no dynamic provisioning.
            storage_class_name: member.spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    member.spec.storage.size.clone(),
                )])),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    }))
}

/// The UID of the EtcdCluster a member belongs to (its EtcdCluster owner reference), recorded on
/// its claim as [`labels::CLUSTER_UID_ANNOTATION`]: the cluster's cleanup finalizer deletes only
/// the claims of its own incarnation.
pub fn cluster_uid(member: &EtcdMember) -> Option<String> {
    member
        .owner_references()
        .iter()
        .find(|o| o.kind == "EtcdCluster" && o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// Whose a data claim is, as far as one member is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimOwner {
    /// Marked with this member's UID and owned by no EtcdMember: the member's, as this
    /// operator writes them.
    Member,
    /// The member's under an EtcdMember owner reference (written by an older version of this
    /// operator or by the reference operator): the member's, once the owner reference is
    /// replaced by the UID mark ([`ClaimOwner::Member`]); until then a deletion of the member
    /// object would take it.
    OwnedByReference,
    /// Left by a member of the same name deleted without the break-glass annotation (its place
    /// in etcd kept) and marked with the UID the re-created member names in
    /// [`labels::REATTACH_ANNOTATION`]: its data, to adopt.
    Reattach,
    /// Another member's (another UID, an owner reference of another object), or unmarked:
    /// never adopted.
    Foreign,
}

/// Whose `claim` is for `member`: by the UID mark, an owner reference and the re-attach mark, each
/// conclusive (UIDs are never reused), never by name or label alone.
pub fn claim_of(claim: &PersistentVolumeClaim, member: &EtcdMember) -> ClaimOwner {
    let uid = member.metadata.uid.as_deref().unwrap_or_default();
    let owners = claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    let member_owners: Vec<_> = owners.iter().filter(|o| o.kind == "EtcdMember").collect();
    let mark = claim.annotations().get(labels::MEMBER_UID_ANNOTATION);
    if uid.is_empty() {
        return ClaimOwner::Foreign;
    }
    if member_owners.iter().any(|o| o.uid == uid) {
        return ClaimOwner::OwnedByReference;
    }
    if !member_owners.is_empty() || owners.iter().any(|o| o.controller == Some(true)) {
        // Another member's (being garbage-collected with it) or another controller's.
        return ClaimOwner::Foreign;
    }
    match mark {
        Some(m) if m == uid => ClaimOwner::Member,
        Some(m) if member.annotations().get(labels::REATTACH_ANNOTATION) == Some(m) => {
            ClaimOwner::Reattach
        }
        _ => ClaimOwner::Foreign,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::tests::member;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn pvc_is_named_after_the_member_and_requests_the_storage_size() {
        let mut m = member("c-abcde", "c", "n");
        let cluster = crate::builders::tests::cluster("c", "n");
        m.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
        m.spec.storage.size = Quantity("5Gi".into());
        m.spec.storage.storage_class_name = Some(String::new());
        let pvc = member_pvc(&m).unwrap().unwrap();
        assert_eq!(pvc.metadata.name.as_deref(), Some("data-c-abcde"));
        let spec = pvc.spec.unwrap();
        assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOnce"]);
        assert_eq!(spec.storage_class_name.as_deref(), Some(""));
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"],
            Quantity("5Gi".into())
        );
        let labels = pvc.metadata.labels.unwrap();
        assert_eq!(labels[labels::CLUSTER], "c");
        assert_eq!(labels[labels::APP_COMPONENT], "c-abcde");
        // No owner: deleting the EtcdMember object never garbage-collects the data.
        assert_eq!(pvc.metadata.owner_references, None);
        let annotations = pvc.metadata.annotations.clone().unwrap();
        assert_eq!(
            annotations[labels::MEMBER_UID_ANNOTATION],
            m.metadata.uid.clone().unwrap()
        );
        // The incarnation of the cluster it belongs to, for the cluster's cleanup finalizer.
        assert_eq!(
            annotations.get(labels::CLUSTER_UID_ANNOTATION),
            cluster.metadata.uid.as_ref()
        );
        assert_eq!(
            claim_of(&member_pvc(&m).unwrap().unwrap(), &m),
            ClaimOwner::Member
        );
    }

    fn with_owner(mut pvc: PersistentVolumeClaim, kind: &str, uid: &str) -> PersistentVolumeClaim {
        pvc.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "etcd-operator.cozystack.io/v1alpha2".into(),
                kind: kind.into(),
                name: "x".into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        ]);
        pvc
    }

    #[test]
    fn a_claim_is_adopted_only_by_its_member_or_the_member_re_created_for_it() {
        let m = member("c-abcde", "c", "n");
        let uid = m.metadata.uid.clone().unwrap();
        let ours = member_pvc(&m).unwrap().unwrap();
        // The reference operator's claim (and ours before): owned by the member.
        let mut old = with_owner(ours.clone(), "EtcdMember", &uid);
        old.metadata.annotations = None;
        assert_eq!(claim_of(&old, &m), ClaimOwner::OwnedByReference);
        // Owned by another member (being garbage-collected with it): never adopted.
        assert_eq!(
            claim_of(&with_owner(ours.clone(), "EtcdMember", "other"), &m),
            ClaimOwner::Foreign
        );
        // Left by a deleted member of the same name: adopted only by the member re-created for
        // exactly that claim.
        let mut again = m.clone();
        again.metadata.uid = Some("new-uid".into());
        assert_eq!(claim_of(&ours, &again), ClaimOwner::Foreign);
        again.metadata.annotations = Some(BTreeMap::from([(
            labels::REATTACH_ANNOTATION.to_string(),
            uid.clone(),
        )]));
        assert_eq!(claim_of(&ours, &again), ClaimOwner::Reattach);
        again.metadata.annotations = Some(BTreeMap::from([(
            labels::REATTACH_ANNOTATION.to_string(),
            "someone-else".to_string(),
        )]));
        assert_eq!(claim_of(&ours, &again), ClaimOwner::Foreign);
    }

    #[test]
    fn memory_members_have_no_pvc() {
        let mut m = member("c-abcde", "c", "n");
        m.spec.storage.medium = Some(api::v1alpha2::StorageMedium::Memory);
        assert_eq!(member_pvc(&m).unwrap(), None);
    }
}
