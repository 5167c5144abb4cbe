//! The etcd container: its image (repository and version), resources, security context and
//! ports, put together with the flags, probes and mounts built beside it.

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::EtcdMember;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, ObjectFieldSelector, ResourceRequirements,
    SecurityContext, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use super::probes::{liveness_probe, readiness_probe};
use super::{ETCD_CONTAINER, INITIAL_CLUSTER_STATE_ANNOTATION};
use crate::naming::{CLIENT_PORT, METRICS_PORT, PEER_PORT};

/// The etcd image repository `member` runs: the one recorded on it by the cluster controller
/// ([`labels::IMAGE_REPOSITORY_ANNOTATION`]), else the operator's `--etcd-image-repository`.
pub fn image_repository<'a>(member: &'a EtcdMember, flag: &'a str) -> &'a str {
    member
        .annotations()
        .get(labels::IMAGE_REPOSITORY_ANNOTATION)
        .map(String::as_str)
        .filter(|r| !r.is_empty())
        .unwrap_or(flag)
}

pub fn etcd_image(repository: &str, version: &str) -> String {
    format!("{repository}:v{version}")
}

/// The etcd container's resources: `spec.resources` when it sets anything, else
/// [`default_resources`]. An empty `resources: {}` counts as unset: the reference operator writes
/// exactly that into every EtcdMember and `status.observed` when the user set none (a Go struct
/// is never omitted), and its Pods then get the default requests, so ours must too.
pub fn container_resources(resources: Option<&ResourceRequirements>) -> ResourceRequirements {
    match resources {
        Some(r) if *r != ResourceRequirements::default() => r.clone(),
        _ => default_resources(),
    }
}

/// The default requests when `spec.resources` is unset.
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("100m".to_string())),
            ("memory".to_string(), Quantity("128Mi".to_string())),
        ])),
        ..Default::default()
    }
}

/// The etcd container's security context (also the restore init containers'): no privilege
/// escalation, no capabilities, never root.
pub(super) fn etcd_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: None,
        }),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

fn port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: number,
        protocol: Some("TCP".to_string()),
        ..Default::default()
    }
}

/// The etcd container: etcd with [`super::flags::etcd_args`], told the initial cluster state
/// through the downward API (see [`INITIAL_CLUSTER_STATE_ANNOTATION`]), with its ports, probes,
/// resources and mounts.
pub(super) fn etcd_container(
    image: String,
    args: Vec<String>,
    resources: ResourceRequirements,
    mounts: Vec<VolumeMount>,
    security_context: SecurityContext,
) -> Container {
    Container {
        name: ETCD_CONTAINER.to_string(),
        image: Some(image),
        command: Some(vec!["etcd".to_string()]),
        args: Some(args),
        env: Some(vec![EnvVar {
            name: "INITIAL_CLUSTER_STATE".to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!(
                        "metadata.annotations['{INITIAL_CLUSTER_STATE_ANNOTATION}']"
                    ),
                    api_version: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ports: Some(vec![
            port("client", CLIENT_PORT),
            port("peer", PEER_PORT),
            port("metrics", METRICS_PORT),
        ]),
        liveness_probe: Some(liveness_probe()),
        readiness_probe: Some(readiness_probe()),
        resources: Some(resources),
        volume_mounts: Some(mounts),
        security_context: Some(security_context),
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Default::default()
    }
}
