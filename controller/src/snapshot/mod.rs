//! The EtcdSnapshot controller: one Job per snapshot running the snapshot agent, its progress as
//! the snapshot's phase (`Pending` → `Started` → `Complete` | `Failed`) and `Ready` condition,
//! the stored object from the agent's termination message. Terminal phases never change; a Job
//! that vanishes after the snapshot started fails it (it is never re-run silently: a second run
//! could snapshot a different revision under the same name).

use std::sync::Arc;
use std::time::Duration;

use api::conditions::reason;
use api::conditions::snapshot::READY;
use api::v1alpha2::{EtcdCluster, EtcdSnapshot, EtcdSnapshotStatus, SnapshotPhase};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};

use crate::agent_job::{self as job, job_view, AgentReport, JobView, ReportedArtifact};
use crate::conditions::set_condition;
use crate::context::Context;
use crate::events::{Action, Reason};
use crate::shell;
use crate::Error;

/// How long a snapshot of an auth cluster waits for the operator to enable auth (the agent
/// must log in as root) before it fails with `AuthLatchTimeout`.
pub const AUTH_LATCH_TIMEOUT: Duration = Duration::from_secs(300);
const RECHECK: Duration = Duration::from_secs(10);

/// Whether the cluster can be snapshotted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterState {
    Missing,
    /// `spec.auth` is on but the operator has not enabled it in etcd yet.
    AuthNotLatched,
    Ready,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Stay `Pending` with this reason on `Ready`.
    Wait {
        reason: &'static str,
        message: String,
    },
    CreateJob,
    /// `Started`, with `JobCreated` or `JobRunning`.
    Running {
        reason: &'static str,
        message: String,
    },
    Complete(ReportedArtifact),
    Fail {
        reason: Failure,
        message: String,
    },
    /// Terminal already: nothing changes.
    Done,
}

/// Why a snapshot failed: the `Ready` condition's reason and the Warning Event's, the same string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The Job disappeared after the snapshot started.
    JobLost,
    /// The Job failed, or succeeded without reporting a stored object.
    JobFailed,
    /// The cluster asks for root auth that the operator has not enabled in time.
    AuthLatchTimeout,
}

impl Failure {
    /// The `Ready` condition's reason.
    pub fn reason(self) -> &'static str {
        match self {
            Failure::JobLost => reason::SNAPSHOT_JOB_LOST,
            Failure::JobFailed => reason::JOB_FAILED,
            Failure::AuthLatchTimeout => reason::AUTH_LATCH_TIMEOUT,
        }
    }

    /// The Warning Event announcing it.
    pub fn event(self) -> Reason {
        match self {
            Failure::JobLost => Reason::SnapshotJobLost,
            Failure::JobFailed => Reason::JobFailed,
            Failure::AuthLatchTimeout => Reason::AuthLatchTimeout,
        }
    }
}

/// The next step for a snapshot in `phase`, given its Job (`None`: there is none) and cluster.
pub fn decide(
    snapshot: &EtcdSnapshot,
    job: Option<&JobView>,
    operator_image: Option<&str>,
    cluster: &ClusterState,
    now: Timestamp,
) -> Step {
    let phase = snapshot
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .unwrap_or_default();
    let job_name = api::labels::snapshot_job_name(&snapshot.name_any());
    match (phase, job) {
        (p, _) if p.is_terminal() => Step::Done,
        (SnapshotPhase::Started, None) => Step::Fail {
            reason: Failure::JobLost,
            message: format!(
                "Job {job_name} disappeared after the snapshot started; it is not re-run (it could \
                 capture another revision under this name): create a new EtcdSnapshot"
            ),
        },
        (_, Some(j)) if j.succeeded => match j.report.as_deref().and_then(AgentReport::parse) {
            Some(AgentReport {
                artifact: Some(a), ..
            }) => Step::Complete(a),
            _ => Step::Fail {
                reason: Failure::JobFailed,
                message: format!(
                    "Job {job_name} succeeded but its agent reported no stored object \
                         (termination message: {:?})",
                    j.report.clone().unwrap_or_default()
                ),
            },
        },
        (_, Some(j)) if j.failed.is_some() => {
            let why = j
                .report
                .as_deref()
                .and_then(AgentReport::parse)
                .and_then(|r| r.error)
                .or_else(|| j.report.clone())
                .unwrap_or_default();
            Step::Fail {
                reason: Failure::JobFailed,
                message: format!(
                    "Job {job_name} failed ({}): {why}",
                    j.failed.clone().unwrap_or_default()
                ),
            }
        }
        (_, Some(j)) => Step::Running {
            reason: if j.active {
                reason::JOB_RUNNING
            } else {
                reason::JOB_CREATED
            },
            message: match &j.report {
                Some(last) if !j.active => {
                    format!("Job {job_name} is retrying; last attempt: {last}")
                }
                _ if j.active => format!("Job {job_name} is taking the snapshot"),
                _ => format!("Job {job_name} created; waiting for its Pod"),
            },
        },
        (_, None) => {
            let Some(_) = operator_image else {
                return Step::Wait {
                    reason: reason::OPERATOR_IMAGE_NOT_CONFIGURED,
                    message: "the operator runs without --operator-image (OPERATOR_IMAGE), so it \
                              has no image for the snapshot Job; set it (the Helm chart does) \
                              and restart the operator"
                        .into(),
                };
            };
            match cluster {
                ClusterState::Missing => Step::Wait {
                    reason: reason::CLUSTER_NOT_FOUND,
                    message: format!(
                        "EtcdCluster {} (spec.clusterRef.name) does not exist in this namespace",
                        snapshot.spec.cluster_ref.name
                    ),
                },
                ClusterState::AuthNotLatched => {
                    let age = snapshot
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| now.duration_since(t.0))
                        .and_then(|d| Duration::try_from(d).ok())
                        .unwrap_or_default();
                    if age >= AUTH_LATCH_TIMEOUT {
                        Step::Fail {
                            reason: Failure::AuthLatchTimeout,
                            message: format!(
                                "EtcdCluster {} asks for root auth, which the operator has not \
                                 enabled within {}s (see the cluster's conditions); create a new \
                                 EtcdSnapshot once status.authEnabled is true",
                                snapshot.spec.cluster_ref.name,
                                AUTH_LATCH_TIMEOUT.as_secs()
                            ),
                        }
                    } else {
                        Step::Wait {
                            reason: reason::AUTH_LATCH_TIMEOUT,
                            message: format!(
                                "waiting for EtcdCluster {} to have root auth enabled \
                                 (status.authEnabled) so the agent can log in",
                                snapshot.spec.cluster_ref.name
                            ),
                        }
                    }
                }
                ClusterState::Ready => Step::CreateJob,
            }
        }
    }
}

/// The status after `step`.
pub fn render(snapshot: &EtcdSnapshot, step: &Step, now: Timestamp) -> EtcdSnapshotStatus {
    let old = snapshot.status.clone().unwrap_or_default();
    let generation = snapshot.metadata.generation;
    let mut status = EtcdSnapshotStatus {
        observed_generation: generation,
        ..old.clone()
    };
    let mut set = |s: bool, r: &str, m: String| {
        set_condition(&mut status.conditions, READY, s, r, m, generation, now)
    };
    let phase = match step {
        Step::Done => return old,
        Step::Wait { reason, message } => {
            set(false, reason, message.clone());
            SnapshotPhase::Pending
        }
        Step::CreateJob => {
            set(
                false,
                reason::JOB_CREATED,
                format!(
                    "Job {} created",
                    api::labels::snapshot_job_name(&snapshot.name_any())
                ),
            );
            SnapshotPhase::Started
        }
        Step::Running { reason, message } => {
            set(false, reason, message.clone());
            SnapshotPhase::Started
        }
        Step::Complete(ReportedArtifact { artifact, hash_kv }) => {
            set(
                true,
                reason::SNAPSHOT_STORED,
                format!(
                    "stored {} ({} bytes, {})",
                    artifact.uri, artifact.size_bytes, artifact.checksum
                ),
            );
            status.artifact = Some(artifact.clone());
            status.hash_kv = hash_kv.clone();
            verify::begin(snapshot, &mut status, now);
            SnapshotPhase::Complete
        }
        Step::Fail { reason, message } => {
            set(false, reason.reason(), message.clone());
            SnapshotPhase::Failed
        }
    };
    if phase == SnapshotPhase::Started && status.start_time.is_none() {
        status.start_time = Some(Time(now));
    }
    if phase.is_terminal() {
        status.completion_time = Some(Time(now));
    }
    status.phase = Some(phase);
    status
}

/// Record in `status` which incarnation of its cluster the snapshot is taken of: the cluster's
/// UID and latched etcd cluster ID when its Job is created (the Job saves from that cluster's
/// members); the ID later, up to completion, for a cluster that had not formed then and is still
/// that incarnation. Nothing else ever changes the record, so a snapshot whose Job an older
/// operator created records nothing (then its start time decides, see
/// [`api::v1alpha2::SnapshotOrigin::is_of`]).
pub fn record_origin(status: &mut EtcdSnapshotStatus, step: &Step, cluster: Option<&EtcdCluster>) {
    let Some(cluster) = cluster else {
        return;
    };
    let id = cluster.status.as_ref().and_then(|s| s.cluster_id.clone());
    match step {
        Step::CreateJob => {
            status.cluster_uid = cluster.uid();
            status.cluster_id = id;
        }
        Step::Running { .. } | Step::Complete(_)
            if status.cluster_id.is_none()
                && status.cluster_uid.is_some()
                && status.cluster_uid == cluster.uid() =>
        {
            status.cluster_id = id;
        }
        _ => {}
    }
}

pub async fn reconcile(snapshot: Arc<EtcdSnapshot>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let ns = snapshot.namespace().ok_or(Error::NoNamespace)?;
    let name = snapshot.name_any();
    let uid = snapshot.uid().ok_or(Error::NoUid)?;
    let snapshots: Api<EtcdSnapshot> = Api::namespaced(ctx.client.clone(), &ns);
    // The cache may lag behind our own status writes: decide from the stored object.
    let Some(snapshot) = snapshots.get_opt(&name).await? else {
        return Ok(Requeue::await_change());
    };
    if snapshot
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(SnapshotPhase::is_terminal)
    {
        return verification(&snapshots, &snapshot, &ctx).await;
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let job_name = api::labels::snapshot_job_name(&name);
    let view = owned_job(&ctx, &ns, &job_name, &name, &uid).await?;
    let cluster = Api::<EtcdCluster>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&snapshot.spec.cluster_ref.name)
        .await?;
    let cluster_state = match &cluster {
        None => ClusterState::Missing,
        Some(c) if crate::auth::wanted(c.spec.auth.as_ref()) && !crate::auth::latched(c) => {
            ClusterState::AuthNotLatched
        }
        Some(_) => ClusterState::Ready,
    };
    let now = Timestamp::now();
    let step = decide(
        &snapshot,
        view.as_ref(),
        ctx.config.operator_image.as_deref(),
        &cluster_state,
        now,
    );
    let mut requeue = Requeue::await_change();
    match &step {
        Step::CreateJob => {
            let (Some(cluster), Some(image)) = (&cluster, ctx.config.operator_image.as_deref())
            else {
                return Ok(Requeue::requeue(RECHECK));
            };
            if let Some(message) = crate::service_account::missing(
                &ctx.client,
                &ns,
                snapshot.spec.destination.s3.as_ref(),
                "spec.destination.s3.serviceAccountName",
                "a new EtcdSnapshot",
            )
            .await?
            {
                let fail = Step::Fail {
                    reason: Failure::JobFailed,
                    message,
                };
                let status = render(&snapshot, &fail, now);
                write(&snapshots, &snapshot, &status).await?;
                count_terminal(&ctx, &snapshot, &status);
                return Ok(Requeue::await_change());
            }
            match job::snapshot_job(&snapshot, cluster, image) {
                Ok(j) => {
                    match jobs.create(&PostParams::default(), &j).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 409 => {}
                        Err(e) => return Err(e.into()),
                    }
                    tracing::info!(snapshot = %name, namespace = %ns, job = %job_name, "created snapshot Job");
                    ctx.event(
                        &snapshot,
                        false,
                        Reason::SnapshotStarted,
                        Action::CreateJob,
                        format!("created Job {job_name}"),
                    )
                    .await;
                }
                Err(e) => {
                    let fail = Step::Fail {
                        reason: Failure::JobFailed,
                        message: e.to_string(),
                    };
                    let status = render(&snapshot, &fail, now);
                    write(&snapshots, &snapshot, &status).await?;
                    count_terminal(&ctx, &snapshot, &status);
                    return Ok(Requeue::await_change());
                }
            }
        }
        Step::Wait { .. } => requeue = Requeue::requeue(RECHECK),
        Step::Complete(ReportedArtifact { artifact: a, .. }) => {
            tracing::info!(snapshot = %name, namespace = %ns, uri = %a.uri, size = a.size_bytes, "snapshot stored");
            ctx.event(
                &snapshot,
                false,
                Reason::SnapshotStored,
                Action::Complete,
                format!("stored {} ({} bytes, {})", a.uri, a.size_bytes, a.checksum),
            )
            .await;
        }
        Step::Fail { reason, message } => {
            tracing::warn!(snapshot = %name, namespace = %ns, reason = reason.reason(), "snapshot failed: {message}");
            ctx.event(
                &snapshot,
                true,
                reason.event(),
                Action::Fail,
                message.clone(),
            )
            .await;
        }
        Step::Running { .. } | Step::Done => {}
    }
    let mut status = render(&snapshot, &step, now);
    record_origin(&mut status, &step, cluster.as_ref());
    shell::write_status_if_changed(&snapshots, &snapshot, snapshot.status.as_ref(), &status)
        .await?;
    count_terminal(&ctx, &snapshot, &status);
    Ok(requeue)
}

/// The view of the Job `job_name` the snapshot owns (`None`: there is none). A Job of that
/// name the snapshot does not own is never used.
async fn owned_job(
    ctx: &Context,
    ns: &str,
    job_name: &str,
    name: &str,
    uid: &str,
) -> Result<Option<JobView>, Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let Some(j) = jobs.get_opt(job_name).await? else {
        return Ok(None);
    };
    if crate::controller_uid(&j).as_deref() != Some(uid) {
        return Err(Error::Conflict(format!(
            "Job {ns}/{job_name} exists but is not owned by EtcdSnapshot {name}; delete it or \
             use another snapshot name"
        )));
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pods = pods
        .list(&ListParams::default().labels(&format!("job-name={job_name}")))
        .await?
        .items;
    Ok(Some(job_view(&j, &pods)))
}

/// A terminal snapshot: its verification, if it waits for one ([`verify`]), and the newest
/// verified snapshot's age metric.
async fn verification(
    snapshots: &Api<EtcdSnapshot>,
    snapshot: &EtcdSnapshot,
    ctx: &Context,
) -> Result<Requeue, Error> {
    record_verified(ctx, snapshot);
    if !verify::pending(snapshot) {
        return Ok(Requeue::await_change());
    }
    let ns = snapshot.namespace().ok_or(Error::NoNamespace)?;
    let name = snapshot.name_any();
    let uid = snapshot.uid().ok_or(Error::NoUid)?;
    let job_name = job::verify::verify_job_name(&name);
    let view = owned_job(ctx, &ns, &job_name, &name, &uid).await?;
    let mut step = verify::decide(snapshot, view.as_ref());
    if step == verify::Verify::CreateJob {
        step = create_verify_job(ctx, snapshot, &ns, &job_name).await?;
    }
    match &step {
        verify::Verify::CreateJob => {
            ctx.event(
                snapshot,
                false,
                Reason::SnapshotVerifying,
                Action::CreateJob,
                format!("created Job {job_name} to verify the stored snapshot"),
            )
            .await;
        }
        verify::Verify::Verified(v) => {
            ctx.event(
                snapshot,
                false,
                Reason::SnapshotVerified,
                Action::Verify,
                if v.compared {
                    format!("verified at revision {} (hashkv {})", v.revision, v.hash)
                } else {
                    verify::not_compared(v)
                },
            )
            .await;
        }
        verify::Verify::Bad { reason, message } => {
            tracing::warn!(snapshot = %name, namespace = %ns, reason, "snapshot verification failed: {message}");
            ctx.event(
                snapshot,
                true,
                Reason::SnapshotVerificationFailed,
                Action::Verify,
                format!("{reason}: {message}"),
            )
            .await;
        }
        verify::Verify::Error(message) => {
            ctx.event(
                snapshot,
                true,
                Reason::SnapshotVerificationFailed,
                Action::Verify,
                format!("{}: {message}", reason::VERIFICATION_ERROR),
            )
            .await;
        }
        verify::Verify::Idle | verify::Verify::Running(_) => {}
    }
    let status = verify::render(snapshot, &step, Timestamp::now());
    shell::write_status_if_changed(snapshots, snapshot, snapshot.status.as_ref(), &status).await?;
    Ok(Requeue::await_change())
}

/// Create the verification Job in the cluster's etcd image; the step that follows (an error
/// when there is no cluster or no operator image to build it from).
async fn create_verify_job(
    ctx: &Context,
    snapshot: &EtcdSnapshot,
    ns: &str,
    job_name: &str,
) -> Result<verify::Verify, Error> {
    let cluster_name = &snapshot.spec.cluster_ref.name;
    let Some(image) = ctx.config.operator_image.as_deref() else {
        return Ok(verify::Verify::Error(
            "the operator runs without --operator-image (OPERATOR_IMAGE), so it has no image \
             for the verification Job; set it and restart the operator"
                .into(),
        ));
    };
    let Some(cluster) = Api::<EtcdCluster>::namespaced(ctx.client.clone(), ns)
        .get_opt(cluster_name)
        .await?
    else {
        return Ok(verify::Verify::Error(format!(
            "EtcdCluster {cluster_name} (spec.clusterRef.name) is gone: the verification runs \
             in the cluster's etcd image"
        )));
    };
    let etcd_image =
        crate::builders::pod::etcd_image(&ctx.config.etcd_image_repository, &cluster.spec.version);
    let j = match job::verify::verify_job(snapshot, image, &etcd_image) {
        Ok(j) => j,
        Err(e) => return Ok(verify::Verify::Error(e.to_string())),
    };
    match Api::<Job>::namespaced(ctx.client.clone(), ns)
        .create(&PostParams::default(), &j)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    tracing::info!(snapshot = %snapshot.name_any(), namespace = %ns, job = %job_name, "created verification Job");
    Ok(verify::Verify::CreateJob)
}

/// Feed the age metric of the cluster's newest verified snapshot (by its completion time).
fn record_verified(ctx: &Context, snapshot: &EtcdSnapshot) {
    let status = snapshot.status.as_ref();
    if status.and_then(EtcdSnapshotStatus::verified) != Some(true) {
        return;
    }
    let (Some(ns), Some(done)) = (
        snapshot.namespace(),
        status.and_then(|s| s.completion_time.as_ref()),
    ) else {
        return;
    };
    ctx.metrics
        .record_verified_snapshot(&ns, &snapshot.spec.cluster_ref.name, done.0.as_second());
}

/// Counts a snapshot whose terminal phase was just written (`snapshot` is the stored object the
/// write replaced: a reconcile stops early on a stored terminal phase, so each is counted once
/// per operator process).
fn count_terminal(ctx: &Context, snapshot: &EtcdSnapshot, written: &EtcdSnapshotStatus) {
    let phase = match written.phase {
        Some(SnapshotPhase::Complete) => "Complete",
        Some(SnapshotPhase::Failed) => "Failed",
        _ => return,
    };
    let ns = snapshot.namespace().unwrap_or_default();
    ctx.metrics
        .count_snapshot(&ns, &snapshot.spec.cluster_ref.name, phase);
}

async fn write(
    api: &Api<EtcdSnapshot>,
    snapshot: &EtcdSnapshot,
    status: &EtcdSnapshotStatus,
) -> Result<(), Error> {
    // Guarded by the read's resourceVersion: a concurrent writer makes this a retried conflict,
    // never a second Job decision on stale status.
    shell::write_status(api, snapshot, snapshot.status.as_ref(), status)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests;
pub mod verify;
