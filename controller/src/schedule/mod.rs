//! The EtcdSnapshotSchedule controller: creates an EtcdSnapshot `<schedule>-<unix minutes>` at
//! each fire time of the cron schedule (owned by the schedule, labelled with its name), honours
//! the concurrency policy and the starting deadline, prunes the finished snapshots it created
//! by the retention policy (the EtcdSnapshot and its S3 object, or its PVC file through a
//! `<snapshot>-prune` Job), and requeues itself at the next fire time. The decisions are in [`plan`].

mod archive;
pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api::conditions::reason;
use api::conditions::schedule::READY;
use api::labels;
use api::v1alpha2::{
    ConcurrencyPolicy, EtcdSnapshot, EtcdSnapshotSchedule, EtcdSnapshotScheduleStatus,
    EtcdSnapshotSpec, LocalReference, S3Location,
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Resource, ResourceExt};

use crate::agent_job;
use crate::conditions::set_condition;
use crate::context::Context;
use crate::cron::{due, run_name, to_chrono, to_time, Due, Schedule};
use crate::events::{Action, Reason};
use crate::metrics::ScheduleTimes;
use crate::objectstore::{file_name, snapshot_key, Location, S3Args, S3};
use crate::shell;
use crate::Error;

use plan::{Owned, Removal, Unowned};

/// How often a schedule with unfinished snapshots looks again (their end may allow a run
/// skipped by `Forbid`, and retention counts finished snapshots only).
const ACTIVE_RECHECK: Duration = Duration::from_secs(15);
/// How often a schedule with `spec.archive` reads its archive's listing into the status (and
/// looks at its archiver Pod, which its deletion also brings back through the watch).
const ARCHIVE_RECHECK: Duration = Duration::from_secs(15);

/// The snapshots of `schedule` among `all`: labelled with its name and owned by it.
fn owned_by<'a>(schedule: &EtcdSnapshotSchedule, all: &'a [EtcdSnapshot]) -> Vec<&'a EtcdSnapshot> {
    all.iter().filter(|s| owns(schedule, *s)).collect()
}

/// Whether `schedule` is an owner of `object` (by UID).
fn owns(schedule: &EtcdSnapshotSchedule, object: &impl ResourceExt) -> bool {
    let uid = schedule.uid();
    object
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == uid.as_ref() && o.kind == "EtcdSnapshotSchedule")
}

fn finished(s: &EtcdSnapshot) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.phase)
        .is_some_and(|p| p.is_terminal())
}

/// The EtcdSnapshot a run at `at` creates.
fn new_snapshot(schedule: &EtcdSnapshotSchedule, at: DateTime<Utc>) -> Result<EtcdSnapshot, Error> {
    let name = schedule.name_any();
    let uid = schedule.uid().ok_or(Error::NoUid)?;
    let template = &schedule.spec.snapshot_template;
    let user = template.metadata.as_ref();
    let mut operator = labels::cluster_labels(&schedule.spec.cluster_ref.name);
    operator.insert(labels::SCHEDULE.to_string(), name.clone());
    let owner = OwnerReference {
        api_version: EtcdSnapshotSchedule::api_version(&()).to_string(),
        kind: EtcdSnapshotSchedule::kind(&()).to_string(),
        name: name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let annotations: BTreeMap<String, String> =
        labels::merge_user_metadata(BTreeMap::new(), user.map(|m| &m.annotations));
    Ok(EtcdSnapshot {
        metadata: ObjectMeta {
            name: Some(run_name(&name, at)),
            namespace: schedule.namespace(),
            labels: Some(labels::merge_user_metadata(
                operator,
                user.map(|m| &m.labels),
            )),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: EtcdSnapshotSpec {
            cluster_ref: schedule.spec.cluster_ref.clone(),
            destination: template.destination.clone(),
            verify: template.verify,
        },
        status: None,
    })
}

pub async fn reconcile(
    schedule: Arc<EtcdSnapshotSchedule>,
    ctx: Arc<Context>,
) -> Result<Requeue, Error> {
    let ns = schedule.namespace().ok_or(Error::NoNamespace)?;
    let name = schedule.name_any();
    let schedules: Api<EtcdSnapshotSchedule> = Api::namespaced(ctx.client.clone(), &ns);
    let snapshots: Api<EtcdSnapshot> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(schedule) = schedules.get_opt(&name).await? else {
        ctx.metrics.forget_schedule(&ns, &name);
        return Ok(Requeue::await_change());
    };
    let now = Utc::now();
    let mut status = schedule.status.clone().unwrap_or_default();
    status.observed_generation = schedule.metadata.generation;
    let parsed = Schedule::parse(&schedule.spec.schedule, schedule.spec.time_zone_name());
    let cron = match parsed {
        Ok(c) => c,
        Err(e) => {
            set_ready(
                &schedule,
                &mut status,
                false,
                reason::INVALID_SCHEDULE,
                e.to_string(),
            );
            ctx.event(
                &schedule,
                true,
                Reason::InvalidSchedule,
                Action::Parse,
                e.to_string(),
            )
            .await;
            write(&schedules, &schedule, &status).await?;
            return Ok(Requeue::await_change());
        }
    };

    let listed = snapshots
        .list(&ListParams::default().labels(&format!("{}={name}", labels::SCHEDULE)))
        .await?
        .items;
    let mut mine: Vec<EtcdSnapshot> = owned_by(&schedule, &listed).into_iter().cloned().collect();

    if !schedule.spec.suspended() {
        let since = status
            .last_schedule_time
            .as_ref()
            .or(schedule.metadata.creation_timestamp.as_ref())
            .map(to_chrono)
            .unwrap_or(now);
        match due(&cron, since, now, schedule.spec.starting_deadline_seconds) {
            Due::Nothing => {}
            Due::Missed(t) => {
                status.last_schedule_time = Some(to_time(t));
                ctx.event(
                    &schedule,
                    true,
                    Reason::MissedSchedule,
                    Action::Skip,
                    format!(
                        "the run at {t} is past spec.startingDeadlineSeconds ({}s); skipped",
                        schedule.spec.starting_deadline_seconds.unwrap_or_default()
                    ),
                )
                .await;
            }
            Due::Run(t) => {
                let active: Vec<String> = mine
                    .iter()
                    .filter(|s| !finished(s))
                    .map(|s| s.name_any())
                    .collect();
                let run = match schedule.spec.concurrency() {
                    ConcurrencyPolicy::Allow => true,
                    ConcurrencyPolicy::Forbid => active.is_empty(),
                    ConcurrencyPolicy::Replace => {
                        for a in &active {
                            delete_snapshot(&snapshots, a).await?;
                            ctx.event(
                                &schedule,
                                false,
                                Reason::SnapshotReplaced,
                                Action::Delete,
                                format!("deleted unfinished EtcdSnapshot {a} (concurrencyPolicy Replace)"),
                            )
                            .await;
                        }
                        mine.retain(finished);
                        true
                    }
                };
                if run {
                    let snapshot = new_snapshot(&schedule, t)?;
                    let sname = snapshot.name_any();
                    match snapshots.create(&PostParams::default(), &snapshot).await {
                        Ok(created) => {
                            mine.push(created);
                            ctx.event(
                                &schedule,
                                false,
                                Reason::SnapshotCreated,
                                Action::Create,
                                format!("created EtcdSnapshot {sname} for the run at {t}"),
                            )
                            .await;
                        }
                        Err(kube::Error::Api(e)) if e.code == 409 => {}
                        Err(e) => return Err(e.into()),
                    }
                    status.last_schedule_time = Some(to_time(t));
                }
            }
        }
    }

    let pruning = prune(&schedule, &ctx, &snapshots, &mut mine, now).await?;
    status.archive = archive::reconcile(&ctx, &schedule, &mine, status.archive.as_ref()).await?;

    status.active = mine
        .iter()
        .filter(|s| !finished(s))
        .map(|s| LocalReference { name: s.name_any() })
        .collect();
    status.active.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(t) = mine
        .iter()
        .filter_map(|s| s.status.as_ref())
        .filter(|s| s.phase == Some(api::v1alpha2::SnapshotPhase::Complete))
        .filter_map(|s| s.completion_time.clone())
        .max_by_key(|t| t.0)
    {
        status.last_successful_time = Some(t);
    }
    let (reason, message) = if schedule.spec.suspended() {
        (
            reason::SUSPENDED,
            "spec.suspend is true: no new snapshots".to_string(),
        )
    } else {
        (
            reason::SCHEDULED,
            match cron.next_after(now) {
                Some(next) => format!("next run at {next}"),
                None => "the schedule has no future run".to_string(),
            },
        )
    };
    set_ready(&schedule, &mut status, true, reason, message);
    if schedule.status.as_ref() != Some(&status) {
        write(&schedules, &schedule, &status).await?;
    }
    let seconds = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref().map(|t| t.0.as_second())
    };
    ctx.metrics.record_schedule(
        &ns,
        &name,
        &schedule.spec.cluster_ref.name,
        ScheduleTimes {
            last_schedule: seconds(&status.last_schedule_time),
            last_success: seconds(&status.last_successful_time),
            archive_lag_seconds: status.archive.as_ref().and_then(|a| a.lag_seconds),
            archive_lag_revisions: status.archive.as_ref().and_then(|a| a.lag_revisions),
        },
    );

    let mut wait = match cron.next_after(now) {
        Some(next) if !schedule.spec.suspended() => (next - now)
            .to_std()
            .unwrap_or(Duration::from_secs(1))
            .max(Duration::from_secs(1)),
        _ => Duration::from_secs(3600),
    };
    if !status.active.is_empty() || pruning {
        wait = wait.min(ACTIVE_RECHECK);
    }
    if schedule.spec.archive.is_some() {
        wait = wait.min(ARCHIVE_RECHECK);
    }
    Ok(Requeue::requeue(wait))
}

/// Retention: delete the finished snapshots the policy drops, oldest first, each with its
/// stored object. Whether a PVC file's prune Job is still running.
async fn prune(
    schedule: &EtcdSnapshotSchedule,
    ctx: &Context,
    snapshots: &Api<EtcdSnapshot>,
    mine: &mut Vec<EtcdSnapshot>,
    now: DateTime<Utc>,
) -> Result<bool, Error> {
    let Some(retention) = &schedule.spec.retention else {
        return Ok(false);
    };
    let mut pending = false;
    let owned: Vec<Owned> = mine
        .iter()
        .map(|s| Owned {
            name: s.name_any(),
            created: s
                .metadata
                .creation_timestamp
                .as_ref()
                .map(to_chrono)
                .unwrap_or(now),
            state: plan::state_of(s.status.as_ref()),
            verification: plan::verification_of(s.status.as_ref()),
        })
        .collect();
    let policy = plan::Retention {
        keep_last: retention.keep_last,
        max_age_seconds: retention.max_age_seconds(),
        require_verified: retention.require_verified.unwrap_or(false),
    };
    for gone in plan::prune_with(&owned, &policy, now) {
        let Some(snapshot) = mine.iter().find(|s| s.name_any() == gone) else {
            continue;
        };
        let stored = match delete_stored(ctx, snapshot).await {
            Ok(Stored::Deleted(what)) => what,
            Ok(Stored::Pending) => {
                pending = true;
                continue;
            }
            Err(message) => {
                // The object stays (and is retried next time) rather than losing track of the
                // stored file.
                ctx.event(schedule, true, Reason::PruneFailed, Action::Prune, message)
                    .await;
                continue;
            }
        };
        delete_snapshot(snapshots, &gone).await?;
        tracing::info!(schedule = %schedule.name_any(), snapshot = %gone, "pruned snapshot");
        ctx.event(
            schedule,
            false,
            Reason::SnapshotPruned,
            Action::Prune,
            format!("deleted EtcdSnapshot {gone} ({stored}) by spec.retention"),
        )
        .await;
        mine.retain(|s| s.name_any() != gone);
    }
    Ok(pending)
}

async fn delete_snapshot(api: &Api<EtcdSnapshot>, name: &str) -> Result<(), Error> {
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Where deleting a snapshot's stored copy stands.
enum Stored {
    /// Done; what was done, for the event.
    Deleted(String),
    /// A prune Job is removing the PVC file.
    Pending,
}

/// Delete what `snapshot` stored: its S3 object (here), or its PVC file (a prune Job, since only
/// a Pod can mount the claim), as [`plan::removal`] says. An error leaves the snapshot in place,
/// to be retried.
async fn delete_stored(ctx: &Context, snapshot: &EtcdSnapshot) -> Result<Stored, String> {
    let uri = snapshot
        .status
        .as_ref()
        .and_then(|s| s.artifact.as_ref())
        .map(|a| a.uri.clone());
    let state = plan::state_of(snapshot.status.as_ref());
    let dest = &snapshot.spec.destination;
    let destination = match (&dest.s3, &dest.pvc) {
        (Some(_), _) => plan::Destination::S3,
        (None, Some(pvc)) => {
            plan::Destination::Pvc(claim_state(ctx, snapshot, &pvc.claim_name).await?)
        }
        (None, None) => return Ok(Stored::Deleted("no destination".to_string())),
    };
    let pruned = plan::Pruned {
        state,
        destination,
        artifact: uri.is_some(),
    };
    match (plan::removal(&pruned), &dest.s3) {
        (Removal::S3Artifact | Removal::S3IfOwned, Some(s3)) => {
            delete_s3_object(ctx, snapshot, s3, uri.as_deref()).await
        }
        (Removal::PvcJob(unowned), _) => {
            let at = uri.unwrap_or_else(|| pvc_uri(snapshot));
            delete_pvc_file(ctx, snapshot, &at, unowned).await
        }
        (Removal::Nothing(why), _) => Ok(Stored::Deleted(why.to_string())),
        (Removal::S3Artifact | Removal::S3IfOwned, None) => {
            Ok(Stored::Deleted("no destination".to_string()))
        }
    }
}

/// Where the snapshot Job of `snapshot` writes its PVC file: `pvc://<claim>/[<subPath>/]<name>.db`.
fn pvc_uri(snapshot: &EtcdSnapshot) -> String {
    let Some(pvc) = &snapshot.spec.destination.pvc else {
        return String::new();
    };
    let file = file_name(&snapshot.name_any());
    match pvc.sub_path.as_deref().map(|s| s.trim_matches('/')) {
        Some(sub) if !sub.is_empty() => format!("pvc://{}/{sub}/{file}", pvc.claim_name),
        _ => format!("pvc://{}/{file}", pvc.claim_name),
    }
}

/// Whether the destination claim can hold a file a Pod wrote.
async fn claim_state(
    ctx: &Context,
    snapshot: &EtcdSnapshot,
    claim: &str,
) -> Result<plan::Claim, String> {
    let ns = snapshot.namespace().unwrap_or_default();
    let pvc = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
        .get_opt(claim)
        .await
        .map_err(|e| format!("reading PersistentVolumeClaim {ns}/{claim}: {e}"))?;
    let Some(pvc) = pvc else {
        return Ok(plan::Claim::Gone);
    };
    // A claim's phase only moves Pending → Bound → Lost: a Pending one was never mounted.
    Ok(match pvc.status.and_then(|s| s.phase).as_deref() {
        Some("Bound") => plan::Claim::Bound,
        Some("Lost") => plan::Claim::Gone,
        _ => plan::Claim::Pending,
    })
}

/// Delete an S3 snapshot's object, and abort the multipart uploads its agent may have left at
/// the key (killed without running its SIGTERM handler). A Complete snapshot's object is the
/// one at `status.artifact.uri`; a Failed one has none recorded, but may have stored its object
/// all the same (the agent crashed after CompleteMultipartUpload, the Job was lost): the object
/// at its key goes if its UID metadata names this snapshot.
async fn delete_s3_object(
    ctx: &Context,
    snapshot: &EtcdSnapshot,
    s3: &S3Location,
    uri: Option<&str>,
) -> Result<Stored, String> {
    let name = snapshot.name_any();
    let at = match uri {
        Some(uri) => parse_s3_uri(uri).ok_or_else(|| {
            format!(
                "EtcdSnapshot {name} has artifact uri {uri:?}, not s3://<bucket>/<key>; delete the \
                 object by hand and then the EtcdSnapshot"
            )
        })?,
        None => Location {
            bucket: s3.bucket.clone(),
            key: snapshot_key(s3.key.as_deref(), &name),
        },
    };
    let ns = snapshot.namespace().unwrap_or_default();
    let client = s3_client(ctx, &ns, s3).await?;
    let mut done = Vec::new();
    // Best effort: a policy without s3:ListBucketMultipartUploads cannot list them, and the
    // bucket's lifecycle rule is the fallback for those.
    match client.abort_uploads(&at).await {
        Ok(0) => {}
        Ok(n) => done.push(format!("aborted {n} unfinished upload(s) of {}", at.uri())),
        Err(f) => {
            tracing::warn!(snapshot = %name, uri = %at.uri(), "cannot abort stale multipart uploads: {}", f.message)
        }
    }
    if uri.is_some() {
        client.delete(&at).await.map_err(|f| f.message)?;
        done.insert(0, format!("deleted {}", at.uri()));
    } else {
        let uid = snapshot.uid().unwrap_or_default();
        if client
            .delete_if_owned(&at, &uid)
            .await
            .map_err(|f| f.message)?
        {
            done.insert(
                0,
                format!("deleted {}, stored although the snapshot failed", at.uri()),
            );
        }
    }
    Ok(Stored::Deleted(if done.is_empty() {
        "nothing stored".to_string()
    } else {
        done.join("; ")
    }))
}

/// Run (or follow) the snapshot's prune Job; its agent removes the file only if the snapshot
/// wrote it.
async fn delete_pvc_file(
    ctx: &Context,
    snapshot: &EtcdSnapshot,
    uri: &str,
    unowned: Unowned,
) -> Result<Stored, String> {
    let ns = snapshot.namespace().unwrap_or_default();
    let name = agent_job::prune_job_name(&snapshot.name_any());
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let job = jobs
        .get_opt(&name)
        .await
        .map_err(|e| format!("reading Job {ns}/{name}: {e}"))?;
    let Some(job) = job else {
        let Some(image) = ctx.config.operator_image.as_deref() else {
            return Err(format!(
                "{uri} cannot be deleted: the operator runs without --operator-image (chart: \
                 image.repository), so it cannot start the Job that mounts the claim; the \
                 EtcdSnapshot {} is kept",
                snapshot.name_any()
            ));
        };
        let Some(want) = agent_job::prune_job(snapshot, image, unowned == Unowned::Leave) else {
            return Ok(Stored::Deleted(format!("{uri} left in place")));
        };
        match jobs.create(&PostParams::default(), &want).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(format!("creating Job {ns}/{name}: {e}")),
        }
        tracing::info!(job = %name, %uri, "started the prune Job");
        return Ok(Stored::Pending);
    };
    let pods: Vec<Pod> = Api::<Pod>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .map_err(|e| format!("listing the Pods of Job {ns}/{name}: {e}"))?
        .items;
    let view = agent_job::job_view(&job, &pods);
    let report = view
        .report
        .as_deref()
        .and_then(agent_job::AgentReport::parse)
        .unwrap_or_default();
    if view.succeeded {
        return Ok(Stored::Deleted(
            report
                .deleted
                .or(report.left_in_place)
                .unwrap_or_else(|| format!("deleted {uri}")),
        ));
    }
    if let Some(failed) = view.failed {
        return Err(format!(
            "Job {name} could not delete {uri}: {} (kubectl logs job/{name}); the EtcdSnapshot is \
             kept and the Job retried once its TTL removes it",
            report.error.unwrap_or(failed)
        ));
    }
    Ok(Stored::Pending)
}

fn parse_s3_uri(uri: &str) -> Option<Location> {
    let (bucket, key) = uri.strip_prefix("s3://")?.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then(|| Location {
        bucket: bucket.to_string(),
        key: key.to_string(),
    })
}

/// An S3 client for `s3`: with the credentials of its Secret, or, for a destination without
/// one (cloud identity), with the operator's own credential chain (the controller's
/// ServiceAccount's role: docs/cloud-identity.md).
async fn s3_client(ctx: &Context, ns: &str, s3: &S3Location) -> Result<S3, String> {
    let args = S3Args {
        s3_bucket: Some(s3.bucket.clone()),
        s3_key: None,
        s3_endpoint: s3.endpoint.clone(),
        s3_region: s3.region.clone().unwrap_or_else(|| "us-east-1".to_string()),
        s3_force_path_style: s3.force_path_style.unwrap_or(false),
        s3_ca_file: None,
    };
    let Some(secret_ref) = &s3.credentials_secret_ref else {
        return S3::from_chain(&args).await.map_err(|f| f.message);
    };
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get(&secret_ref.name)
        .await
        .map_err(|e| format!("reading Secret {ns}/{}: {e}", secret_ref.name))?;
    let data = secret.data.unwrap_or_default();
    let key = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).to_string())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("Secret {ns}/{} has no {k}", secret_ref.name))
    };
    S3::with_credentials(
        &args,
        key("AWS_ACCESS_KEY_ID")?,
        key("AWS_SECRET_ACCESS_KEY")?,
    )
    .map_err(|f| f.message)
}

fn set_ready(
    schedule: &EtcdSnapshotSchedule,
    status: &mut EtcdSnapshotScheduleStatus,
    ok: bool,
    reason: &str,
    message: String,
) {
    set_condition(
        &mut status.conditions,
        READY,
        ok,
        reason,
        message,
        schedule.metadata.generation,
        Timestamp::now(),
    );
}

async fn write(
    api: &Api<EtcdSnapshotSchedule>,
    schedule: &EtcdSnapshotSchedule,
    status: &EtcdSnapshotScheduleStatus,
) -> Result<(), Error> {
    shell::write_status(api, schedule, schedule.status.as_ref(), status)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_uris_split_into_bucket_and_key() {
        assert_eq!(
            parse_s3_uri("s3://b/p/x.db"),
            Some(Location {
                bucket: "b".into(),
                key: "p/x.db".into()
            })
        );
        for bad in ["pvc://c/x.db", "s3://b", "s3:///k", "s3://b/"] {
            assert_eq!(parse_s3_uri(bad), None, "{bad}");
        }
    }
}
