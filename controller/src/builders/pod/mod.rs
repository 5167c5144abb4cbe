//! The member Pod: one etcd process per EtcdMember, named after the member.
//!
//! This file holds the Pod's constants and its assembly ([`member_pod`]): metadata,
//! annotations, the restore init containers and the Pod spec. The parts are beside it: etcd's
//! command line in `flags.rs`, the etcd container, its image and resources in `container.rs`,
//! its probes in `probes.rs`, the volumes in `volumes.rs`. Pure, like every builder.

mod container;
mod flags;
mod probes;
mod volumes;

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::EtcdMember;
use k8s_openapi::api::core::v1::{Pod, PodSecurityContext, PodSpec, SeccompProfile};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::{member_metadata, restore, BuildError};
use crate::naming;

pub use container::{container_resources, default_resources, etcd_image, image_repository};
pub use flags::{
    data_dir, etcd_args, max_learners_of_args, max_learners_of_version, ETCD_DEFAULT_MAX_LEARNERS,
    MAX_LEARNERS,
};
pub use probes::READINESS_PATH;

use container::{etcd_container, etcd_security_context};
use flags::peer_tls;
use volumes::member_volumes;

pub const ETCD_CONTAINER: &str = "etcd";
pub use super::{DATA_DIR, DATA_VOLUME};
pub const CLIENT_TLS_DIR: &str = "/etc/etcd/tls/client";
pub const PEER_TLS_DIR: &str = "/etc/etcd/tls/peer";
pub const NONROOT_ID: i64 = 65532;

/// Annotation on the Pod holding `new` or `existing`. etcd reads it through the
/// `INITIAL_CLUSTER_STATE` environment variable (a downward-API field reference) on every
/// container start, so once the cluster has formed the operator flips it to `existing` and a seed
/// whose data directory is wiped afterwards can never form a new, empty cluster.
pub const INITIAL_CLUSTER_STATE_ANNOTATION: &str =
    "etcd-operator.cozystack.io/initial-cluster-state";
pub const STATE_NEW: &str = "new";
pub const STATE_EXISTING: &str = "existing";

/// What the Pod needs beyond the member itself.
#[derive(Clone, Debug)]
pub struct PodParams<'a> {
    /// Image repository of etcd, e.g. `quay.io/coreos/etcd`.
    pub etcd_image_repository: &'a str,
    /// Whether the member is a voter (gets the role label).
    pub voter: bool,
    /// Whether this Pod may bootstrap a new cluster (`--initial-cluster-state=new`): only the
    /// seed, and only while the cluster has not formed.
    pub bootstrap_new_cluster: bool,
    /// The operator's own image (`--operator-image`): the restore init containers of a seed
    /// with `spec.restore` copy the snapshot agent out of it.
    pub operator_image: Option<&'a str>,
}

/// The member Pod, owned by its EtcdMember.
pub fn member_pod(member: &EtcdMember, params: &PodParams<'_>) -> Result<Pod, BuildError> {
    let name = member.name_any();
    let spec = &member.spec;
    let args = etcd_args(member)?;
    let owner = member
        .controller_owner_ref(&())
        .ok_or_else(|| BuildError::NoUid(name.clone()))?;

    let mut meta: ObjectMeta = member_metadata(member, owner);
    if params.voter {
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(labels::ROLE.to_string(), labels::ROLE_VOTER.to_string());
    }
    let state = if params.bootstrap_new_cluster {
        STATE_NEW
    } else {
        STATE_EXISTING
    };
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        INITIAL_CLUSTER_STATE_ANNOTATION.to_string(),
        state.to_string(),
    );
    // The CA bundles the Pod starts with: the member controller restarts it when its member
    // asks for another.
    if let Some(trust) = member.annotations().get(labels::TRUST_BUNDLE_ANNOTATION) {
        annotations.insert(labels::TRUST_BUNDLE_ANNOTATION.to_string(), trust.clone());
    }
    if let Some(cas) = member.annotations().get(labels::TRUSTED_CAS_ANNOTATION) {
        annotations.insert(labels::TRUSTED_CAS_ANNOTATION.to_string(), cas.clone());
    }
    annotations.insert(
        labels::TEMPLATE_HASH_ANNOTATION.to_string(),
        crate::template::hash(spec),
    );
    let repository = image_repository(member, params.etcd_image_repository);
    annotations.insert(
        labels::IMAGE_REPOSITORY_ANNOTATION.to_string(),
        repository.to_string(),
    );

    let (mut volumes, mounts) = member_volumes(member);

    let image = etcd_image(repository, &spec.version);
    let security_context = etcd_security_context();
    let resources = container_resources(spec.resources.as_ref());
    // Only a seed that bootstraps a new cluster restores, or a member an EtcdRecovery restores a
    // snapshot into in place; the agent itself skips a data dir that is already initialised
    // (in place: one whose restore is marked done).
    let mut init_containers = Vec::new();
    let mut service_account = None;
    let in_place = restore::in_place_of(member);
    if let (true, Some(restore)) = (
        params.bootstrap_new_cluster || in_place.is_some(),
        &spec.restore,
    ) {
        let operator_image = params
            .operator_image
            .ok_or_else(|| BuildError::NoOperatorImage(name.clone()))?;
        let namespace = member.namespace().ok_or(BuildError::NoNamespace)?;
        let peer_url = naming::peer_url(
            &name,
            &naming::member_service(member),
            &namespace,
            peer_tls(member),
        );
        let (containers, extra) = restore::init_containers(
            member,
            restore,
            &restore::Identity {
                name: &name,
                peer_url: &peer_url,
            },
            &data_dir(member),
            &restore::Shared {
                operator_image,
                etcd_image: &image,
                security_context: &security_context,
                resources: &resources,
            },
            in_place.as_ref(),
        )?;
        init_containers = containers;
        volumes.extend(extra);
        // An S3 source's cloud identity: the restore init container reads the object as that
        // ServiceAccount (the etcd container mounts no token of it).
        service_account = restore::service_account(restore);
    }

    let container = etcd_container(image, args, resources, mounts, security_context);

    Ok(Pod {
        metadata: meta,
        spec: Some(PodSpec {
            hostname: Some(name.clone()),
            subdomain: Some(naming::member_service(member)),
            service_account_name: service_account,
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(NONROOT_ID),
                run_as_group: Some(NONROOT_ID),
                fs_group: Some(NONROOT_ID),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_string(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            affinity: spec.affinity.clone(),
            topology_spread_constraints: (!spec.topology_spread_constraints.is_empty())
                .then(|| spec.topology_spread_constraints.clone()),
            image_pull_secrets: (!spec.image_pull_secrets.is_empty())
                .then(|| spec.image_pull_secrets.clone()),
            tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
            node_selector: (!spec.node_selector.is_empty()).then(|| spec.node_selector.clone()),
            priority_class_name: spec.priority_class_name.clone().filter(|n| !n.is_empty()),
            init_containers: (!init_containers.is_empty()).then_some(init_containers),
            containers: vec![container],
            volumes: Some(volumes),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests;
