//! The archiver Pod of a schedule with `spec.archive`: `<schedule>-archive`, the operator's image
//! running `snapshot-agent archive` against the cluster's client Service (the snapshot Job's TLS
//! material and root login) and the schedule's S3 destination, under
//! `<key>archive/<schedule>/` ([`crate::archive::schedule_prefix`]). A bare Pod the schedule
//! controller owns and recreates: one archiver at a time by its name, restarted in place by the
//! kubelet after a crash; the archiver itself resumes after the newest stored segment.
//!
//! Pure: a function of the schedule, its cluster and the operator image.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdSnapshotSchedule};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use super::{agent_pod_spec, cluster_access, AgentPod, TERMINATION_LOG};
use crate::archive::schedule_prefix;
use crate::builders::s3_access::s3_access;

/// The archiver Pods' `app.kubernetes.io/component`.
pub const COMPONENT: &str = "archive";
/// The hash of the Pod spec the archiver was created from: a spec that no longer matches is
/// replaced (a Pod's spec cannot be changed in place).
pub const SPEC_ANNOTATION: &str = "etcd-operator.cozystack.io/archiver-spec";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArchiverError {
    #[error(
        "spec.archive needs an S3 destination (spec.snapshotTemplate.destination.s3); use one or \
         remove spec.archive"
    )]
    NotS3,
    #[error("the schedule has no UID yet")]
    NoUid,
}

/// `<schedule>-archive` (a schedule's name is at most 44 characters).
pub fn pod_name(schedule: &str) -> String {
    format!("{schedule}-archive")
}

/// The archiver Pod of `schedule` (which has `spec.archive`), owned by it.
pub fn archiver_pod(
    schedule: &EtcdSnapshotSchedule,
    cluster: &EtcdCluster,
    operator_image: &str,
) -> Result<Pod, ArchiverError> {
    let name = schedule.name_any();
    let ns = schedule.namespace().unwrap_or_default();
    let archive = schedule.spec.archive.clone().unwrap_or_default();
    let s3 = schedule
        .spec
        .snapshot_template
        .destination
        .s3
        .as_ref()
        .ok_or(ArchiverError::NotS3)?;
    let uid = schedule.uid().ok_or(ArchiverError::NoUid)?;
    let access = cluster_access(cluster, &ns);
    let mut args = vec![
        "snapshot-agent".to_string(),
        "archive".to_string(),
        access.endpoint,
    ];
    args.extend(access.tls_args);
    let (mut env, mut volumes, mut mounts) = (access.env, access.volumes, access.mounts);
    args.push(format!("--s3-bucket={}", s3.bucket));
    args.push(format!(
        "--s3-key={}",
        schedule_prefix(s3.key.as_deref(), &name)
    ));
    let service_account = s3_access(s3).add_to(&mut args, &mut env, &mut volumes, &mut mounts);
    args.push(format!("--flush-interval={}", archive.flush_interval()));
    args.push(format!("--hash-interval={}", archive.hash_interval()));
    // A compaction that overtook the archiver is a gap the schedule reports, not a crash loop.
    args.push("--on-compaction=continue".to_string());
    args.push(format!("--termination-log={TERMINATION_LOG}"));

    let spec = agent_pod_spec(
        AgentPod {
            args,
            env,
            volumes,
            mounts,
            service_account,
            image: None,
        },
        operator_image,
        "Always",
    );
    let mut pod_labels: BTreeMap<String, String> =
        labels::job_labels(&schedule.spec.cluster_ref.name);
    pod_labels.insert(labels::APP_COMPONENT.into(), COMPONENT.into());
    pod_labels.insert(labels::SCHEDULE.into(), name.clone());
    let hash = spec_hash(&spec);
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&name)),
            namespace: Some(ns),
            labels: Some(pod_labels),
            annotations: Some(BTreeMap::from([(SPEC_ANNOTATION.to_string(), hash)])),
            owner_references: Some(vec![OwnerReference {
                api_version: EtcdSnapshotSchedule::api_version(&()).to_string(),
                kind: EtcdSnapshotSchedule::kind(&()).to_string(),
                name,
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// Whether `existing` was created from the spec `desired` has (its annotation).
pub fn is_current(existing: &Pod, desired: &Pod) -> bool {
    let of = |p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SPEC_ANNOTATION))
            .cloned()
    };
    of(existing).is_some() && of(existing) == of(desired)
}

fn spec_hash(spec: &k8s_openapi::api::core::v1::PodSpec) -> String {
    let json = serde_json::to_vec(spec).unwrap_or_default();
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &json);
    digest.as_ref()[..8]
        .iter()
        .fold(String::with_capacity(16), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests;
