//! A point-in-time recovery's build (`spec.source.pointInTime`, docs/point-in-time-recovery.md):
//! the schedule, its archive and its verified snapshots read, the base chosen
//! ([`choose_base`]), the build Job created when the planner asks ([`start`]) and read back
//! ([`observe`]) into what the planner decides on ([`Build`]).

use api::labels;
use api::v1alpha2::{
    EtcdCluster, EtcdRecovery, EtcdSnapshot, EtcdSnapshotSchedule, PointInTimeSource,
    PointInTimeStatus, RecoverySnapshotSource, S3Location, SnapshotPhase,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};

use super::plan::Build;
use super::write;
use crate::agent_job::job_view;
use crate::agent_job::point_in_time::{
    build_read, choose_base, point_in_time_job, point_in_time_job_name, Base, BuildRead,
    BuiltReport,
};
use crate::archive::schedule_prefix;
use crate::context::Context;
use crate::Error;

const NO_IMAGE: &str = "the operator runs without --operator-image (OPERATOR_IMAGE), so it has \
                        no image for the build Job of a point-in-time recovery; set it (the Helm \
                        chart does) and restart the operator";

/// Where a build starts from: the schedule's S3 destination, its archive, the chosen base, the
/// cluster (for its etcd image and root login) and the operator image.
struct Prepared {
    schedule: String,
    s3: S3Location,
    base: Base,
    cluster: EtcdCluster,
    image: String,
}

/// What the build of `recovery`'s point in time says: its Job's state, or, before there is a
/// Job, whether one can be started.
pub(super) async fn observe(
    ctx: &Context,
    ns: &str,
    recovery: &EtcdRecovery,
) -> Result<Build, Error> {
    let Some(source) = recovery.spec.source.point_in_time.as_ref() else {
        return Ok(Build::Unusable("spec.source.pointInTime is unset".into()));
    };
    let uid = recovery.uid().unwrap_or_default();
    let job_name = point_in_time_job_name(&recovery.name_any(), &uid);
    let Some(job) = Api::<Job>::namespaced(ctx.client.clone(), ns)
        .get_opt(&job_name)
        .await?
    else {
        return Ok(match prepare(ctx, ns, recovery, source).await? {
            Ok(_) => Build::Start,
            Err(why) => Build::Unusable(why),
        });
    };
    if crate::controller_uid(&job).as_deref() != Some(uid.as_str()) {
        return Ok(Build::Unusable(format!(
            "Job {ns}/{job_name} exists but is not this EtcdRecovery's; delete it so the \
             recovery can build the point in time"
        )));
    }
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={job_name}")))
        .await?
        .items;
    Ok(match build_read(&job_view(&job, &pods)) {
        BuildRead::Building => Build::Building(job_name),
        BuildRead::Failed(why) => Build::Failed(why),
        BuildRead::Built(report) => match built(ctx, ns, recovery, source, report).await? {
            Ok(status) => Build::Built(Box::new(status)),
            Err(why) => Build::Failed(why),
        },
    })
}

/// Record the base in `status.pointInTime` and create the build Job; what was done.
pub(super) async fn start(
    ctx: &Context,
    ns: &str,
    api: &Api<EtcdRecovery>,
    recovery: &EtcdRecovery,
) -> Result<String, Error> {
    let Some(source) = recovery.spec.source.point_in_time.as_ref() else {
        return Ok("spec.source.pointInTime is unset: nothing to build".into());
    };
    let p = match prepare(ctx, ns, recovery, source).await? {
        Ok(p) => p,
        // Seen by the next look's `observe`, which fails the recovery with it.
        Err(why) => return Ok(why),
    };
    let mut status = recovery.status.clone().unwrap_or_default();
    status.point_in_time = Some(PointInTimeStatus {
        base: p.base.name.clone(),
        base_revision: p.base.revision,
        revision: source.revision,
        ..Default::default()
    });
    write(api, recovery, &status).await?;
    let etcd_image = crate::builders::pod::etcd_image(
        &ctx.config.etcd_image_repository,
        &p.cluster.spec.version,
    );
    let job = point_in_time_job(
        recovery,
        &p.cluster,
        &crate::agent_job::point_in_time::Build {
            s3: &p.s3,
            archive_prefix: schedule_prefix(p.s3.key.as_deref(), &p.schedule),
            base: &p.base,
            revision: source.revision,
        },
        &p.image,
        &etcd_image,
    );
    match Api::<Job>::namespaced(ctx.client.clone(), ns)
        .create(&PostParams::default(), &job)
        .await
    {
        Ok(_) => {}
        // Created by an earlier try: it is read back on the next look.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(format!(
        "building the cluster's state at {} off to the side: Job {} restores EtcdSnapshot {} \
         (revision {}) into scratch space and replays the archive of EtcdSnapshotSchedule {} \
         after it",
        source.revision.map_or_else(
            || "the newest archived revision".into(),
            |r| format!("revision {r}")
        ),
        job.name_any(),
        p.base.name,
        p.base.revision,
        p.schedule
    ))
}

/// The schedule, its destination, the base and the cluster of a build, or why there is none.
async fn prepare(
    ctx: &Context,
    ns: &str,
    recovery: &EtcdRecovery,
    source: &PointInTimeSource,
) -> Result<Result<Prepared, String>, Error> {
    let Some(image) = ctx.config.operator_image.clone() else {
        return Ok(Err(NO_IMAGE.into()));
    };
    let name = &source.schedule;
    let cluster_name = &recovery.spec.cluster_ref.name;
    let Some(schedule) = Api::<EtcdSnapshotSchedule>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?
    else {
        return Ok(Err(format!(
            "EtcdSnapshotSchedule {name} (spec.source.pointInTime.schedule) does not exist in \
             namespace {ns}"
        )));
    };
    if &schedule.spec.cluster_ref.name != cluster_name {
        return Ok(Err(format!(
            "EtcdSnapshotSchedule {name} archives EtcdCluster {}, not {cluster_name}",
            schedule.spec.cluster_ref.name
        )));
    }
    let (Some(s3), Some(_)) = (
        schedule.spec.snapshot_template.destination.s3.clone(),
        schedule.spec.archive.as_ref(),
    ) else {
        return Ok(Err(format!(
            "EtcdSnapshotSchedule {name} has no continuous archive (spec.archive, with an S3 \
             destination): there is nothing to go back through"
        )));
    };
    let Some(cluster) = Api::<EtcdCluster>::namespaced(ctx.client.clone(), ns)
        .get_opt(cluster_name)
        .await?
    else {
        return Ok(Err(format!("EtcdCluster {cluster_name} does not exist")));
    };
    let snapshots = Api::<EtcdSnapshot>::namespaced(ctx.client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{}={name}", labels::SCHEDULE)))
        .await?
        .items;
    let bases = bases(&schedule, &cluster, &s3, &snapshots);
    let archive = schedule.status.as_ref().and_then(|s| s.archive.as_ref());
    Ok(
        choose_base(name, archive, &bases, source.revision).map(|base| Prepared {
            schedule: name.clone(),
            s3,
            base,
            cluster,
            image,
        }),
    )
}

/// The schedule's snapshots that can be a base: its own (by owner), of this incarnation of the
/// cluster, Complete, `Verified=True`, stored in the schedule's bucket.
fn bases(
    schedule: &EtcdSnapshotSchedule,
    cluster: &EtcdCluster,
    s3: &S3Location,
    snapshots: &[EtcdSnapshot],
) -> Vec<Base> {
    let schedule_uid = schedule.uid();
    let cluster_uid = cluster.uid().unwrap_or_default();
    let in_bucket = format!("s3://{}/", s3.bucket);
    snapshots
        .iter()
        .filter(|s| {
            s.owner_references()
                .iter()
                .any(|o| o.kind == "EtcdSnapshotSchedule" && Some(&o.uid) == schedule_uid.as_ref())
        })
        .filter(|s| {
            s.origin()
                .is_of(&cluster_uid, cluster.metadata.creation_timestamp.as_ref())
        })
        .filter_map(|s| {
            let status = s.status.as_ref()?;
            if status.phase != Some(SnapshotPhase::Complete) || status.verified() != Some(true) {
                return None;
            }
            let artifact = status.artifact.as_ref()?;
            Some(Base {
                name: s.name_any(),
                revision: status.verification.as_ref()?.revision,
                key: artifact.uri.strip_prefix(&in_bucket)?.to_string(),
                checksum: artifact.checksum.clone(),
                size_bytes: artifact.size_bytes,
            })
        })
        .collect()
}

/// What to record of a finished build: the base recorded when it started, and the stored
/// result as a snapshot source (the schedule's destination with the result's key).
async fn built(
    ctx: &Context,
    ns: &str,
    recovery: &EtcdRecovery,
    source: &PointInTimeSource,
    report: BuiltReport,
) -> Result<Result<PointInTimeStatus, String>, Error> {
    let Some(schedule) = Api::<EtcdSnapshotSchedule>::namespaced(ctx.client.clone(), ns)
        .get_opt(&source.schedule)
        .await?
    else {
        return Ok(Err(format!(
            "EtcdSnapshotSchedule {} was deleted while its state was built; its destination \
             (the result's bucket and credentials) is gone with it",
            source.schedule
        )));
    };
    let Some(s3) = schedule.spec.snapshot_template.destination.s3 else {
        return Ok(Err(format!(
            "EtcdSnapshotSchedule {} no longer has an S3 destination",
            source.schedule
        )));
    };
    let uri = &report.artifact.artifact.uri;
    let Some(key) = uri.strip_prefix(&format!("s3://{}/", s3.bucket)) else {
        return Ok(Err(format!(
            "the build stored {uri}, outside the schedule's bucket {}",
            s3.bucket
        )));
    };
    let started = recovery
        .status
        .as_ref()
        .and_then(|s| s.point_in_time.clone())
        .unwrap_or_default();
    Ok(Ok(PointInTimeStatus {
        base: started.base,
        base_revision: report.base_revision,
        revision: Some(report.target_revision),
        hashes_proven: Some(report.hashes_proven),
        snapshot: Some(RecoverySnapshotSource {
            s3: Some(S3Location {
                key: Some(key.to_string()),
                ..s3.clone()
            }),
            sha256: Some(report.artifact.artifact.checksum.clone()),
            ..Default::default()
        }),
    }))
}
