//! The member Pod's volumes and the etcd container's mounts: the data volume and the TLS
//! Secrets. The restore init containers add their own in `builders::restore`.

use api::labels;
use api::v1alpha2::EtcdMember;
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, SecretVolumeSource, Volume,
    VolumeMount,
};
use kube::ResourceExt;

use super::{CLIENT_TLS_DIR, DATA_DIR, DATA_VOLUME, PEER_TLS_DIR};
use crate::builders::mount;

fn secret_volume(name: &str, secret: &str) -> Volume {
    Volume {
        name: name.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The member's volumes and the etcd container's mounts of them: its data (a PVC, or a tmpfs
/// with `storage.medium: Memory`) and the TLS Secrets it serves with.
pub(super) fn member_volumes(member: &EtcdMember) -> (Vec<Volume>, Vec<VolumeMount>) {
    let name = member.name_any();
    let spec = &member.spec;
    let data_volume = if spec.storage.is_memory() {
        Volume {
            name: DATA_VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                size_limit: Some(spec.storage.size.clone()),
            }),
            ..Default::default()
        }
    } else {
        Volume {
            name: DATA_VOLUME.to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: labels::pvc_name(&name),
                read_only: None,
            }),
            ..Default::default()
        }
    };
    let mut volumes = vec![data_volume];
    let mut mounts = vec![mount(DATA_VOLUME, DATA_DIR, false)];
    let tls = spec.tls.clone().unwrap_or_default();
    if let Some(secret) = &tls.client_server_secret_ref {
        volumes.push(secret_volume("client-tls", &secret.name));
        mounts.push(mount("client-tls", CLIENT_TLS_DIR, true));
    }
    if let Some(secret) = &tls.peer_secret_ref {
        volumes.push(secret_volume("peer-tls", &secret.name));
        mounts.push(mount("peer-tls", PEER_TLS_DIR, true));
    }
    (volumes, mounts)
}
