//! The Jobs that run the operator's own image as the snapshot agent, shared by the snapshot and
//! schedule controllers: the save Job `<snapshot>-snapshot` (`etcd-operator snapshot-agent save`,
//! dialing the cluster's client Service with the cluster's TLS material and root credentials),
//! a schedule's prune Job, what such a Job's status and Pods say ([`JobView`]), and the agent's
//! report in its termination message ([`AgentReport`]).
//!
//! The archiver Pod of a schedule's continuous archive is in [`archiver`]; the Jobs of a
//! recovery (a survivor's position, a point in time's build) in [`position`] and
//! [`point_in_time`].
//!
//! Pure: functions of the snapshot, its cluster and the operator image, or of a Job and its
//! Pods as read. No I/O, and no controller's module: both controllers use this one.

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdSnapshot, RecordedHashKv, SnapshotArtifact, TlsSecrets};
use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, PersistentVolumeClaimVolumeSource, PodSecurityContext,
    PodSpec, PodTemplateSpec, SeccompProfile, SecretVolumeSource, SecurityContext, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use serde::Deserialize;

use crate::auth;
use crate::builders::s3_access::s3_access;
use crate::builders::{mount, secret_env};

pub mod archiver;
pub mod point_in_time;
pub mod position;
pub mod verify;

/// BEHAVIOUR.md's Job settings.
pub const BACKOFF_LIMIT: i32 = 3;
pub const ACTIVE_DEADLINE_SECONDS: i64 = 1800;
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 600;
pub const CONTAINER: &str = "snapshot-agent";
/// The agent's exit code for a failure no retry can fix (an overwrite refused, access denied,
/// bad credentials, bad input): the Job fails at once instead of retrying.
pub const PERMANENT_FAILURE_EXIT_CODE: i32 = 2;
/// Where the agent writes its result (the container's termination message).
pub const TERMINATION_LOG: &str = "/dev/termination-log";
const NONROOT_ID: i64 = 65532;
const TLS_DIR: &str = "/etc/etcd-snapshot/tls";
const PVC_MOUNT: &str = "/snapshot";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JobError {
    #[error("spec.destination sets neither s3 nor pvc; set exactly one")]
    NoDestination,
}

/// Names of the Secrets the agent needs to reach the cluster's client listener: the server
/// Secret (its `ca.crt` is the trust anchor) and the operator-client Secret (mTLS identity).
pub fn client_secrets(cluster: &EtcdCluster) -> (Option<String>, Option<String>) {
    // The user's Secrets or cert-manager's for the operator's Certificates.
    let secrets = TlsSecrets::of(&cluster.name_any(), cluster.spec.tls.as_ref());
    (
        secrets.server.map(|s| s.name),
        secrets.operator_client.map(|s| s.name),
    )
}

fn secret_volume(name: &str, secret: &str) -> Volume {
    Volume {
        name: name.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_string()),
            default_mode: Some(0o440),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// How an agent reaches the cluster's client listener: `--endpoints` (the client Service), the
/// TLS flags with the Secrets they read mounted, and the root login when auth is on.
struct ClusterAccess {
    endpoint: String,
    tls_args: Vec<String>,
    env: Vec<EnvVar>,
    volumes: Vec<Volume>,
    mounts: Vec<k8s_openapi::api::core::v1::VolumeMount>,
}

fn cluster_access(cluster: &EtcdCluster, ns: &str) -> ClusterAccess {
    let tls = cluster.spec.client_tls();
    let scheme = if tls { "https" } else { "http" };
    let mut access = ClusterAccess {
        endpoint: format!(
            "--endpoints={scheme}://{}.{ns}.svc:2379",
            labels::client_service_name(&cluster.name_any())
        ),
        tls_args: Vec::new(),
        env: Vec::new(),
        volumes: Vec::new(),
        mounts: Vec::new(),
    };
    let (server, operator) = client_secrets(cluster);
    if let (true, Some(server)) = (tls, server) {
        access.volumes.push(secret_volume("server-tls", &server));
        access
            .mounts
            .push(mount("server-tls", &format!("{TLS_DIR}/server"), true));
        access
            .tls_args
            .push(format!("--ca-file={TLS_DIR}/server/ca.crt"));
        if let Some(operator) = operator {
            access.volumes.push(secret_volume("client-tls", &operator));
            access
                .mounts
                .push(mount("client-tls", &format!("{TLS_DIR}/client"), true));
            access
                .tls_args
                .push(format!("--cert-file={TLS_DIR}/client/tls.crt"));
            access
                .tls_args
                .push(format!("--key-file={TLS_DIR}/client/tls.key"));
        }
    }
    if auth::wanted(cluster.spec.auth.as_ref()) {
        if let Some(secret) = cluster
            .spec
            .auth
            .as_ref()
            .and_then(|a| a.root_credentials_secret_ref.as_ref())
        {
            access.env.push(EnvVar {
                name: "ETCD_USERNAME".into(),
                value: Some(auth::ROOT.into()),
                value_from: None,
            });
            access.env.push(secret_env(
                "ETCD_PASSWORD",
                &secret.name,
                auth::PASSWORD_KEY,
            ));
        }
    }
    access
}

/// The snapshot Job, owned by the EtcdSnapshot.
pub fn snapshot_job(
    snapshot: &EtcdSnapshot,
    cluster: &EtcdCluster,
    operator_image: &str,
) -> Result<Job, JobError> {
    let name = snapshot.name_any();
    let ns = snapshot.namespace().unwrap_or_default();
    let access = cluster_access(cluster, &ns);
    let mut args = vec![
        "snapshot-agent".to_string(),
        "save".to_string(),
        access.endpoint,
        format!("--snapshot-name={name}"),
        format!("--snapshot-uid={}", snapshot.uid().unwrap_or_default()),
        format!("--termination-log={TERMINATION_LOG}"),
    ];
    args.extend(access.tls_args);
    let mut env = access.env;
    let mut volumes = access.volumes;
    let mut mounts = access.mounts;

    let dest = &snapshot.spec.destination;
    let mut service_account = None;
    if let Some(s3) = &dest.s3 {
        args.push(format!("--s3-bucket={}", s3.bucket));
        if let Some(key) = s3.key.as_deref().filter(|k| !k.is_empty()) {
            args.push(format!("--s3-key={key}"));
        }
        service_account = s3_access(s3).add_to(&mut args, &mut env, &mut volumes, &mut mounts);
    } else if let Some(pvc) = &dest.pvc {
        volumes.push(pvc_volume(&pvc.claim_name));
        mounts.push(mount("snapshot", PVC_MOUNT, false));
        args.push(format!("--pvc-claim={}", pvc.claim_name));
        args.push(format!("--pvc-mount={PVC_MOUNT}"));
        if let Some(sub) = pvc.sub_path.as_deref().filter(|s| !s.is_empty()) {
            args.push(format!("--pvc-sub-path={sub}"));
        }
    } else {
        return Err(JobError::NoDestination);
    }

    Ok(agent_job(
        snapshot,
        &labels::snapshot_job_name(&name),
        "snapshot",
        operator_image,
        AgentPod {
            args,
            env,
            volumes,
            mounts,
            service_account,
            image: None,
        },
    ))
}

/// The Job `<snapshot>-prune` that removes a pruned snapshot's file from its PVC destination
/// (`snapshot-agent delete`: only a file whose `.uid` sidecar names this snapshot), at the path
/// the snapshot Job writes (the same name and subPath). With `leave_unowned` a file there that
/// the snapshot did not write is left in place and the Job succeeds (a Failed snapshot may have
/// written nothing); without, the Job fails permanently on it. `None` for a snapshot that is
/// not on a PVC. Owned by the snapshot, like its save Job.
pub fn prune_job(
    snapshot: &EtcdSnapshot,
    operator_image: &str,
    leave_unowned: bool,
) -> Option<Job> {
    let pvc = snapshot.spec.destination.pvc.as_ref()?;
    let name = snapshot.name_any();
    let mut args = vec![
        "snapshot-agent".to_string(),
        "delete".to_string(),
        format!("--snapshot-name={name}"),
        format!("--snapshot-uid={}", snapshot.uid().unwrap_or_default()),
        format!("--pvc-claim={}", pvc.claim_name),
        format!("--pvc-mount={PVC_MOUNT}"),
        format!("--termination-log={TERMINATION_LOG}"),
    ];
    if let Some(sub) = pvc.sub_path.as_deref().filter(|s| !s.is_empty()) {
        args.push(format!("--pvc-sub-path={sub}"));
    }
    if leave_unowned {
        args.push("--leave-unowned".to_string());
    }
    Some(agent_job(
        snapshot,
        &prune_job_name(&name),
        "prune",
        operator_image,
        AgentPod {
            args,
            env: Vec::new(),
            volumes: vec![pvc_volume(&pvc.claim_name)],
            mounts: vec![mount("snapshot", PVC_MOUNT, false)],
            service_account: None,
            image: None,
        },
    ))
}

pub fn prune_job_name(snapshot: &str) -> String {
    format!("{snapshot}-prune")
}

fn pvc_volume(claim: &str) -> Volume {
    Volume {
        name: "snapshot".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_string(),
            read_only: Some(false),
        }),
        ..Default::default()
    }
}

/// The agent container's command line and what it mounts.
#[derive(Default)]
struct AgentPod {
    args: Vec<String>,
    env: Vec<EnvVar>,
    volumes: Vec<Volume>,
    mounts: Vec<k8s_openapi::api::core::v1::VolumeMount>,
    /// The ServiceAccount of an S3 location's cloud identity (the namespace's `default` when
    /// `None`).
    service_account: Option<String>,
    /// Another image than the operator's (the cluster's etcd image for a verification), with
    /// the command that runs the agent in it and the init containers that put it there.
    image: Option<ImageOverride>,
}

/// The agent run inside another image: the operator binary copied in by an init container.
struct ImageOverride {
    image: String,
    command: Vec<String>,
    init_containers: Vec<Container>,
}

/// A Job owned by `snapshot` running the agent as BEHAVIOUR.md's settings say (backoff limit,
/// deadline, TTL, a permanent failure ends it at once, non-root, read-only root filesystem).
fn agent_job(
    snapshot: &EtcdSnapshot,
    job_name: &str,
    component: &str,
    operator_image: &str,
    pod: AgentPod,
) -> Job {
    let owner = JobOwner {
        reference: OwnerReference {
            api_version: EtcdSnapshot::api_version(&()).to_string(),
            kind: EtcdSnapshot::kind(&()).to_string(),
            name: snapshot.name_any(),
            uid: snapshot.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
        namespace: snapshot.namespace().unwrap_or_default(),
        cluster: snapshot.spec.cluster_ref.name.clone(),
    };
    owned_job(owner, job_name, component, operator_image, pod)
}

/// The object an agent Job belongs to (its controller owner reference, namespace) and the
/// cluster it serves (its labels).
struct JobOwner {
    reference: OwnerReference,
    namespace: String,
    cluster: String,
}

/// A Job running the agent for `owner` (see [`agent_job`]).
fn owned_job(
    owner: JobOwner,
    job_name: &str,
    component: &str,
    operator_image: &str,
    pod: AgentPod,
) -> Job {
    let JobOwner {
        reference: owner,
        namespace: ns,
        cluster,
    } = owner;
    // Not the member label: the runbook picks a member Pod with `-l <cluster label>` and
    // `.items[0]`, which must never land on a finished Job's Pod.
    let mut job_labels: BTreeMap<String, String> = labels::job_labels(&cluster);
    job_labels.insert(labels::APP_COMPONENT.into(), component.into());
    Job {
        metadata: ObjectMeta {
            name: Some(job_name.to_string()),
            namespace: Some(ns),
            labels: Some(job_labels.clone()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "FailJob".into(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some(CONTAINER.into()),
                        operator: "In".into(),
                        values: vec![PERMANENT_FAILURE_EXIT_CODE],
                    }),
                    on_pod_conditions: None,
                }],
            }),
            active_deadline_seconds: Some(ACTIVE_DEADLINE_SECONDS),
            ttl_seconds_after_finished: Some(TTL_SECONDS_AFTER_FINISHED),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(job_labels),
                    ..Default::default()
                }),
                spec: Some(agent_pod_spec(pod, operator_image, "Never")),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Pod spec of an agent: its one container (or the image override's), non-root with a
/// read-only root, the ServiceAccount of its S3 access, no API token mounted.
fn agent_pod_spec(pod: AgentPod, operator_image: &str, restart_policy: &str) -> PodSpec {
    let AgentPod {
        args,
        env,
        volumes,
        mounts,
        service_account,
        image,
    } = pod;
    let (image, command, init_containers) = match image {
        Some(o) => (o.image, Some(o.command), o.init_containers),
        None => (operator_image.to_string(), None, Vec::new()),
    };
    let container = Container {
        name: CONTAINER.into(),
        image: Some(image),
        command,
        args: Some(args),
        env: (!env.is_empty()).then_some(env),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        termination_message_path: Some(TERMINATION_LOG.into()),
        // The agent's result is its termination message; a crash without one falls back to
        // the log's tail, which still says why.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(restricted()),
        ..Default::default()
    };
    PodSpec {
        restart_policy: Some(restart_policy.into()),
        service_account_name: service_account,
        // A web identity's token is projected by its own volume, for its audience.
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(NONROOT_ID),
            run_as_group: Some(NONROOT_ID),
            fs_group: Some(NONROOT_ID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        init_containers: (!init_containers.is_empty()).then_some(init_containers),
        containers: vec![container],
        volumes: (!volumes.is_empty()).then_some(volumes),
        ..Default::default()
    }
}

/// The agent in the cluster's etcd image, with its own `etcd` and `etcdutl` (a verification, a
/// point-in-time build): the operator binary copied into an emptyDir by an `install-tools` init
/// container of the operator image, as for a restore. Returns the tools volume and its read-only
/// mount, which go into the Pod beside the override.
fn in_etcd_image(
    operator_image: &str,
    etcd_image: &str,
) -> (
    Volume,
    k8s_openapi::api::core::v1::VolumeMount,
    ImageOverride,
) {
    use crate::builders::restore::{BINARY, INSTALL_TOOLS_CONTAINER, TOOLS_DIR, TOOLS_VOLUME};
    let tools = Volume {
        name: TOOLS_VOLUME.into(),
        empty_dir: Some(k8s_openapi::api::core::v1::EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let install = Container {
        name: INSTALL_TOOLS_CONTAINER.into(),
        image: Some(operator_image.to_string()),
        args: Some(vec!["install-tools".into(), format!("--to={TOOLS_DIR}")]),
        volume_mounts: Some(vec![mount(TOOLS_VOLUME, TOOLS_DIR, false)]),
        security_context: Some(restricted()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let image = ImageOverride {
        image: etcd_image.to_string(),
        command: vec![format!("{TOOLS_DIR}/{BINARY}")],
        init_containers: vec![install],
    };
    (tools, mount(TOOLS_VOLUME, TOOLS_DIR, true), image)
}

/// The scratch space of an agent that restores a snapshot (an emptyDir named `name`): bounded
/// by twice the snapshot's `size_bytes` plus `room`, so one that outgrows it is evicted instead of
/// filling the node's disk.
fn scratch_volume(name: &str, size_bytes: i64, room: i64) -> Volume {
    let limit = size_bytes.max(0).saturating_mul(2).saturating_add(room);
    Volume {
        name: name.into(),
        empty_dir: Some(k8s_openapi::api::core::v1::EmptyDirVolumeSource {
            medium: None,
            size_limit: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                limit.to_string(),
            )),
        }),
        ..Default::default()
    }
}

/// The agent containers' security context: non-root, nothing to escalate, read-only root.
fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

/// The stored object a save reported, with the hashkv it recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ReportedArtifact {
    #[serde(flatten)]
    pub artifact: SnapshotArtifact,
    #[serde(default, rename = "hashKV")]
    pub hash_kv: Option<RecordedHashKv>,
}

/// A verification Job's success: the revision and hash the restored copy matched
/// (`compared: false`: the save recorded no hashkv, so they were not compared).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct VerifiedReport {
    pub revision: i64,
    pub hash: i64,
    #[serde(default)]
    pub compared: bool,
}

/// A verification Job's finding that the snapshot is bad: the `Verified=False` reason and what
/// differs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct UnverifiedReport {
    pub reason: String,
    pub message: String,
}

/// What the agent wrote to its termination message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct AgentReport {
    #[serde(default)]
    pub artifact: Option<ReportedArtifact>,
    #[serde(default)]
    pub error: Option<String>,
    /// A verification Job: the snapshot checked out.
    #[serde(default)]
    pub verified: Option<VerifiedReport>,
    /// A verification Job: the snapshot is bad.
    #[serde(default)]
    pub unverified: Option<UnverifiedReport>,
    /// A prune Job's `snapshot-agent delete`: what it removed.
    #[serde(default)]
    pub deleted: Option<String>,
    /// A prune Job's `snapshot-agent delete --leave-unowned`: the file at the path is another
    /// snapshot's (or nobody's) and stays; why.
    #[serde(default, rename = "leftInPlace")]
    pub left_in_place: Option<String>,
    /// A position Job's `snapshot-agent position`: a stopped member's raft position.
    #[serde(default)]
    pub position: Option<position::DiskPosition>,
    /// A point-in-time recovery's build Job: the state it built and stored.
    #[serde(default, rename = "pointInTime")]
    pub point_in_time: Option<point_in_time::BuiltReport>,
}

impl AgentReport {
    /// The report in `message`, if it is one (a crash leaves the log's tail instead).
    pub fn parse(message: &str) -> Option<Self> {
        serde_json::from_str::<AgentReport>(message.trim())
            .ok()
            .filter(|r| {
                r.artifact.is_some()
                    || r.error.is_some()
                    || r.deleted.is_some()
                    || r.left_in_place.is_some()
                    || r.verified.is_some()
                    || r.unverified.is_some()
                    || r.position.is_some()
                    || r.point_in_time.is_some()
            })
    }
}

/// What a recovery's agent Job (a position read, a point-in-time build) says, from its view:
/// `Ok(None)` still running (or not started), `Ok(Some(_))` the result `pick` finds in its
/// report, `Err(why)` it failed, or succeeded without `what` in its termination message.
pub fn job_result<T>(
    view: &JobView,
    pick: impl Fn(&AgentReport) -> Option<T>,
    what: &str,
) -> Result<Option<T>, String> {
    let report = view.report.as_deref().and_then(AgentReport::parse);
    if let Some(found) = report.as_ref().and_then(&pick) {
        return Ok(Some(found));
    }
    let said = report.and_then(|r| r.error).or_else(|| view.report.clone());
    if let Some(failed) = &view.failed {
        return Err(match said {
            Some(said) => format!("{said} (Job: {failed})"),
            None => format!("the Job failed: {failed}"),
        });
    }
    if view.succeeded {
        return Err(format!(
            "the Job succeeded without reporting {what} in its termination message"
        ));
    }
    Ok(None)
}

/// The Job as far as the snapshot's phase is concerned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobView {
    pub active: bool,
    pub succeeded: bool,
    /// `Failed=True`: the backoff limit or the active deadline was reached.
    pub failed: Option<String>,
    /// The newest termination message of the Job's Pods: a success's report, or the last
    /// failure's.
    pub report: Option<String>,
}

/// What a Job running the agent says: active, succeeded, failed (with the Job's reason), and the
/// newest terminated agent container's message.
pub fn job_view(job: &Job, pods: &[Pod]) -> JobView {
    let status = job.status.clone().unwrap_or_default();
    let condition = |t: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t && c.status == "True")
            .cloned()
    };
    let failed = condition("Failed").map(|c| {
        let reason = c.reason.unwrap_or_default();
        match c.message {
            Some(m) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason,
        }
    });
    // The newest terminated agent container's message.
    let mut terminated: Vec<(Timestamp, String)> = pods
        .iter()
        .filter_map(|p| {
            let cs = p.status.as_ref()?.container_statuses.as_ref()?;
            let t = cs
                .iter()
                .find(|c| c.name == CONTAINER)?
                .state
                .as_ref()?
                .terminated
                .clone()?;
            let at = t.finished_at.map(|f| f.0).unwrap_or(Timestamp::UNIX_EPOCH);
            Some((at, t.message.unwrap_or_default()))
        })
        .collect();
    terminated.sort();
    JobView {
        active: status.active.unwrap_or(0) > 0,
        succeeded: condition("Complete").is_some() || status.succeeded.unwrap_or(0) > 0,
        failed,
        report: terminated.pop().map(|(_, m)| m).filter(|m| !m.is_empty()),
    }
}

#[cfg(test)]
mod tests;
