//! The position Job `<member>-wal-<recovery>` of a survivor recovery (docs/disaster-recovery.md,
//! "From a survivor"): for a member that holds data but whose etcd does not run, the operator's
//! image runs `snapshot-agent position` on the member's data PVC, mounted read-only, and reports
//! the raft position its write-ahead log holds ([`DiskPosition`]) in its termination message.
//! Pinned to the node of the member's Pod when it has one (a ReadWriteOnce volume attaches to one
//! node). Owned by the EtcdRecovery. Pure.

use api::v1alpha2::{EtcdMember, EtcdRecovery};
use serde::Serialize;

use super::*;
use crate::builders::pod::{data_dir, DATA_DIR, DATA_VOLUME};

/// The `app.kubernetes.io/component` of a position Job.
pub const COMPONENT: &str = "position";

/// A member's raft position as its data dir's WAL holds it (what `snapshot-agent position`
/// reports as `{"position": {...}}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskPosition {
    pub member_id: u64,
    pub cluster_id: u64,
    /// The last HardState's term (a running member's `Status` raft term).
    pub term: u64,
    /// The last HardState's commit index (a running member's `Status` raft index).
    pub commit: u64,
    /// The last entry in the log (appended; committed only up to `commit`).
    pub last_term: u64,
    pub last_index: u64,
    /// The WAL files read, in order.
    #[serde(default)]
    pub files: Vec<String>,
    /// Where the newest file's torn tail (a crash mid-write) ended the readable log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torn_tail: Option<String>,
}

/// The position Job's name for `member` in the recovery with `recovery_uid`: at most 63
/// characters (Job names are Pod label values), distinct per recovery.
pub fn position_job_name(member: &str, recovery_uid: &str) -> String {
    let uid: String = recovery_uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    let suffix = format!("-wal-{uid}");
    let mut base: String = member.chars().take(63 - suffix.len()).collect();
    while base.ends_with(['-', '.']) {
        base.pop();
    }
    format!("{base}{suffix}")
}

/// The Job that reads `member`'s position from its data PVC, owned by `recovery`; `node`: the
/// node its Pod is on, if it has one.
pub fn position_job(
    recovery: &EtcdRecovery,
    member: &EtcdMember,
    node: Option<&str>,
    operator_image: &str,
) -> Job {
    let name = member.name_any();
    let uid = recovery.uid().unwrap_or_default();
    let owner = JobOwner {
        reference: OwnerReference {
            api_version: EtcdRecovery::api_version(&()).to_string(),
            kind: EtcdRecovery::kind(&()).to_string(),
            name: recovery.name_any(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        namespace: recovery.namespace().unwrap_or_default(),
        cluster: member.spec.cluster_name.clone(),
    };
    let args = vec![
        "snapshot-agent".to_string(),
        "position".to_string(),
        format!("--data-dir={}", data_dir(member)),
        format!("--member={name}"),
        format!("--termination-log={TERMINATION_LOG}"),
    ];
    let volume = Volume {
        name: DATA_VOLUME.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: labels::pvc_name(&name),
            read_only: Some(true),
        }),
        ..Default::default()
    };
    let mut job = owned_job(
        owner,
        &position_job_name(&name, &uid),
        COMPONENT,
        operator_image,
        AgentPod {
            args,
            env: Vec::new(),
            volumes: vec![volume],
            mounts: vec![mount(DATA_VOLUME, DATA_DIR, true)],
            service_account: None,
            image: None,
        },
    );
    if let Some(pod) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        pod.node_name = node.map(str::to_string);
        // It mounts the member's data volume, so it runs where the member may run: on the
        // member's (tainted, labelled) nodes. With a node given the kubelet still refuses a Pod
        // that does not tolerate a NoExecute taint there.
        pod.tolerations =
            (!member.spec.tolerations.is_empty()).then(|| member.spec.tolerations.clone());
        pod.node_selector =
            (!member.spec.node_selector.is_empty()).then(|| member.spec.node_selector.clone());
    }
    job
}

/// What a finished (or running) position Job says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PositionRead {
    /// Still running (or not started yet).
    Reading,
    Read(DiskPosition),
    /// The Job failed, or succeeded without a position: why.
    Failed(String),
}

/// The position Job's outcome from its view (see [`job_view`]).
pub fn position_read(view: &JobView) -> PositionRead {
    match job_result(view, |r| r.position.clone(), "a position") {
        Ok(None) => PositionRead::Reading,
        Ok(Some(p)) => PositionRead::Read(p),
        Err(why) => PositionRead::Failed(why),
    }
}

#[cfg(test)]
mod tests;
