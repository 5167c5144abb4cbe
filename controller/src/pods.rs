//! What both reconcilers read off a member Pod: readiness and the etcd container's restart
//! history, as the planners' [`PodView`], and why a seed's `restore` init container failed.
//! Pure.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// The etcd container's name in every member Pod.
pub const ETCD_CONTAINER: &str = "etcd";

/// What a member Pod says, as the planners read it (the cluster's, through
/// `cluster::view::MemberView`, and the member's readiness).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    pub uid: String,
    /// The Pod's `creationTimestamp`: when it was created (woken, rolled, rescheduled).
    pub created: Option<Timestamp>,
    pub ready: bool,
    pub restart_count: i32,
    /// The etcd container's last termination was an OOM kill.
    pub oom_killed: bool,
    /// The Pod cannot be scheduled (`PodScheduled=False/Unschedulable`): since when, and the
    /// scheduler's message (a Node gone with the member's local volume, a lost PVC, ...).
    pub unschedulable: Option<(Timestamp, String)>,
    /// The Pod's deletion was requested (an eviction, a drain) and it has not gone yet.
    pub terminating: bool,
    /// The etcd container is waiting in `CrashLoopBackOff` right now.
    pub crash_loop_backoff: bool,
    /// When the etcd container last terminated (`lastState.terminated.finishedAt`).
    pub last_exit: Option<Timestamp>,
    /// [`api::labels::TRUST_BUNDLE_ANNOTATION`] on the Pod: the CA bundles it started with.
    pub trust_bundle: Option<String>,
    /// [`api::labels::TRUSTED_CAS_ANNOTATION`] on the Pod: the CAs it started trusting.
    pub trusted_cas: Option<String>,
    /// When the etcd container started (`state.running.startedAt`): etcd loaded its CA bundles
    /// from the Secrets as they were then.
    pub started: Option<Timestamp>,
    /// [`api::labels::TEMPLATE_HASH_ANNOTATION`] on the Pod: the template it was built from.
    pub template_hash: Option<String>,
    /// [`api::labels::IMAGE_REPOSITORY_ANNOTATION`] on the Pod: the repository it runs.
    pub image_repository: Option<String>,
}

pub fn pod_view(pod: &Pod) -> PodView {
    let status = pod.status.as_ref();
    let etcd = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == ETCD_CONTAINER));
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        && pod.metadata.deletion_timestamp.is_none();
    let last_exit = etcd
        .and_then(|c| c.last_state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    PodView {
        uid: pod.uid().unwrap_or_default(),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        ready,
        restart_count: etcd.map(|c| c.restart_count).unwrap_or(0),
        oom_killed: last_exit.is_some_and(|t| t.reason.as_deref() == Some("OOMKilled")),
        crash_loop_backoff: etcd
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff")),
        last_exit: last_exit.and_then(|t| t.finished_at.as_ref()).map(|t| t.0),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        unschedulable: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
            .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
            .filter(|_| pod.metadata.deletion_timestamp.is_none())
            .and_then(|c| {
                let since = c.last_transition_time.as_ref()?.0;
                Some((since, c.message.clone().unwrap_or_default()))
            }),
        trust_bundle: pod
            .annotations()
            .get(api::labels::TRUST_BUNDLE_ANNOTATION)
            .cloned(),
        started: etcd
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.as_ref())
            .map(|t| t.0),
        trusted_cas: pod
            .annotations()
            .get(api::labels::TRUSTED_CAS_ANNOTATION)
            .cloned(),
        template_hash: pod
            .annotations()
            .get(api::labels::TEMPLATE_HASH_ANNOTATION)
            .cloned(),
        image_repository: pod
            .annotations()
            .get(api::labels::IMAGE_REPOSITORY_ANNOTATION)
            .cloned(),
    }
}

/// Whether the Pod's `restore` init container is running now (downloading and restoring the
/// snapshot). A Pod being deleted is not restoring.
pub fn restore_running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.name == crate::builders::restore::RESTORE_CONTAINER)
            })
            .and_then(|c| c.state.as_ref())
            .is_some_and(|s| s.running.is_some())
}

/// Why the Pod's `restore` init container failed, while it has not succeeded: the agent's
/// `{"error":..}` termination message (or the log tail / exit code a crash left), from the
/// current or the last attempt. `None` when it succeeded, runs for the first time or is absent.
pub fn restore_failure(pod: &Pod) -> Option<String> {
    let restore = pod
        .status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == crate::builders::restore::RESTORE_CONTAINER)?;
    let current = restore.state.as_ref().and_then(|s| s.terminated.as_ref());
    if current.is_some_and(|t| t.exit_code == 0) {
        return None;
    }
    let failed = current
        .or_else(|| {
            restore
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
        })
        .filter(|t| t.exit_code != 0)?;
    let text = failed.message.as_deref().map(str::trim).unwrap_or_default();
    let agent = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string));
    Some(match agent {
        Some(error) => error,
        None if !text.is_empty() => text.to_string(),
        None => format!(
            "the restore init container exited with code {}{}",
            failed.exit_code,
            failed
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m", "uid": "u"},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn crash_loop_is_the_waiting_reason_now_with_the_last_exit_time() {
        let p = pod(serde_json::json!({
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{
                "name": "etcd", "image": "etcd", "imageID": "", "ready": false, "restartCount": 7,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 2, "reason": "Error",
                    "finishedAt": "2026-11-23T10:00:00Z"}}
            }]
        }));
        let v = pod_view(&p);
        assert!(v.crash_loop_backoff && !v.ready && !v.oom_killed);
        assert_eq!(v.restart_count, 7);
        assert_eq!(
            v.last_exit.map(|t| t.as_second()),
            Some(
                "2026-11-23T10:00:00Z"
                    .parse::<k8s_openapi::jiff::Timestamp>()
                    .unwrap()
                    .as_second()
            )
        );
        // Running again after old restarts: not a crash loop, whatever the count.
        let p = pod(serde_json::json!({
            "containerStatuses": [{
                "name": "etcd", "image": "etcd", "imageID": "", "ready": false, "restartCount": 9,
                "state": {"running": {}}
            }]
        }));
        assert!(!pod_view(&p).crash_loop_backoff);
    }

    #[test]
    fn restore_failure_is_the_agents_message_until_the_container_succeeds() {
        let failed = |state: &str| {
            pod(serde_json::json!({
                "initContainerStatuses": [{
                    "name": "restore", "image": "etcd", "imageID": "", "ready": false,
                    "restartCount": 1,
                    state: {"terminated": {"exitCode": 2,
                        "message": "{\"error\":\"not enough space to restore\"}"}},
                }],
            }))
        };
        assert_eq!(
            restore_failure(&failed("state")).as_deref(),
            Some("not enough space to restore")
        );
        // Restarted after the failure (waiting in back-off): the last attempt still says why.
        assert_eq!(
            restore_failure(&failed("lastState")).as_deref(),
            Some("not enough space to restore")
        );
        let ok = pod(serde_json::json!({
            "initContainerStatuses": [{
                "name": "restore", "image": "etcd", "imageID": "", "ready": false, "restartCount": 1,
                "state": {"terminated": {"exitCode": 0}},
                "lastState": {"terminated": {"exitCode": 1, "message": "old"}},
            }],
        }));
        assert_eq!(restore_failure(&ok), None);
        let crashed = pod(serde_json::json!({
            "initContainerStatuses": [{
                "name": "restore", "image": "etcd", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }],
        }));
        assert_eq!(
            restore_failure(&crashed).as_deref(),
            Some("the restore init container exited with code 137 (OOMKilled)")
        );
        assert_eq!(restore_failure(&pod(serde_json::json!({}))), None);
    }

    #[test]
    fn restore_running_is_read_from_the_restore_init_containers_state() {
        let with = |state: serde_json::Value| {
            pod(serde_json::json!({"initContainerStatuses": [{
                "name": "restore", "image": "etcd", "imageID": "", "ready": false,
                "restartCount": 0, "state": state}]}))
        };
        assert!(restore_running(&with(serde_json::json!({"running": {}}))));
        assert!(!restore_running(&with(
            serde_json::json!({"terminated": {"exitCode": 0}})
        )));
        assert!(!restore_running(&with(
            serde_json::json!({"waiting": {"reason": "PodInitializing"}})
        )));
        assert!(!restore_running(&pod(serde_json::json!({}))));
    }
}
