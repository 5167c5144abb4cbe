//! The member's data PVC, `data-<member>`, owned by the EtcdMember (so it survives Pod deletion
//! and pause, and is garbage-collected with the member).

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
    let mut meta = member_metadata(member, owner);
    meta.name = Some(labels::pvc_name(&name));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::tests::member;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn pvc_is_named_after_the_member_and_requests_the_storage_size() {
        let mut m = member("c-abcde", "c", "n");
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
        assert_eq!(pvc.metadata.owner_references.unwrap()[0].kind, "EtcdMember");
    }

    #[test]
    fn memory_members_have_no_pvc() {
        let mut m = member("c-abcde", "c", "n");
        m.spec.storage.medium = Some(api::v1alpha2::StorageMedium::Memory);
        assert_eq!(member_pvc(&m).unwrap(), None);
    }
}
