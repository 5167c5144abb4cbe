//! The schedule's continuous archive (`spec.archive`, docs/point-in-time-recovery.md): its
//! archiver Pod `<schedule>-archive` kept as the spec says (created when missing, replaced when
//! its spec is out of date or it ended, deleted with `spec.archive`), and `status.archive` read
//! from the listing of the archive's segments: the newest archived revision, the newest
//! contiguous run, its base among the schedule's verified snapshots, and the gaps (each new one
//! an `ArchiveGap` Warning Event); and how far behind the cluster it is (its `Status` revision,
//! asked of the first member that answers).

use std::time::Duration;

use api::labels;
use api::v1alpha2::{ArchiveStatus, EtcdCluster, EtcdMember, EtcdSnapshot, EtcdSnapshotSchedule};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};

use crate::agent_job::archiver::{self, archiver_pod, is_current};
use crate::archive::{schedule_prefix, window_base, SegmentName, Window};
use crate::context::Context;
use crate::etcd::access::{Access, User};
use crate::events::{Action, Reason};
use crate::objectstore::Listed;
use crate::{topology, Error};

/// At most this many gaps are listed in the status (the newest).
const SHOWN_GAPS: usize = 10;
/// How long a member may take to answer the `Status` call that gives the cluster's revision.
const REVISION_TIMEOUT: Duration = Duration::from_secs(3);

/// Keep the archiver Pod as `schedule.spec.archive` says and return the archive's status
/// (`None` without `spec.archive`). `previous` is the status written last (for new gaps).
pub(super) async fn reconcile(
    ctx: &Context,
    schedule: &EtcdSnapshotSchedule,
    mine: &[EtcdSnapshot],
    previous: Option<&ArchiveStatus>,
) -> Result<Option<ArchiveStatus>, Error> {
    let ns = schedule.namespace().ok_or(Error::NoNamespace)?;
    let name = schedule.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod_name = archiver::pod_name(&name);
    let found = pods.get_opt(&pod_name).await?;
    // A Pod of that name the schedule does not own is never touched.
    let foreign = found.as_ref().is_some_and(|p| !super::owns(schedule, p));
    let existing = found.filter(|p| super::owns(schedule, p));
    let Some(archive_on_s3) = schedule
        .spec
        .archive
        .as_ref()
        .and(schedule.spec.snapshot_template.destination.s3.as_ref())
    else {
        if existing.is_some() {
            delete(&pods, &pod_name).await?;
        }
        return Ok(None);
    };

    let cluster = Api::<EtcdCluster>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&schedule.spec.cluster_ref.name)
        .await?;
    match (cluster.as_ref(), ctx.config.operator_image.as_deref()) {
        (Some(_), Some(_)) if foreign => {
            ctx.event(
                schedule,
                true,
                Reason::ArchiveFailed,
                Action::Create,
                format!(
                    "a Pod named {pod_name} exists that this schedule does not own, so its \
                     archiver cannot run; delete that Pod (or rename the schedule)"
                ),
            )
            .await
        }
        (Some(cluster), Some(image)) => match archiver_pod(schedule, cluster, image) {
            Ok(desired) => match &existing {
                None => {
                    match pods.create(&PostParams::default(), &desired).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 409 => {}
                        Err(e) => return Err(e.into()),
                    }
                    ctx.event(
                        schedule,
                        false,
                        Reason::ArchiverStarted,
                        Action::Create,
                        format!("created the archiver Pod {pod_name}"),
                    )
                    .await;
                }
                // Replaced: a Pod's spec cannot change in place. The archiver stores what it
                // buffered on SIGTERM; the next reconcile creates the new one.
                Some(pod)
                    if pod.metadata.deletion_timestamp.is_none()
                        && (!is_current(pod, &desired) || ended(pod)) =>
                {
                    delete(&pods, &pod_name).await?;
                }
                Some(_) => {}
            },
            Err(e) => {
                ctx.event(
                    schedule,
                    true,
                    Reason::ArchiveFailed,
                    Action::Create,
                    e.to_string(),
                )
                .await
            }
        },
        (None, _) => {}
        (Some(_), None) => {
            ctx.event(
                schedule,
                true,
                Reason::ArchiveFailed,
                Action::Create,
                "the operator does not know its own image (OPERATOR_IMAGE, the chart's \
                 image.repository), so it cannot run the archiver"
                    .to_string(),
            )
            .await
        }
    }

    let prefix = schedule_prefix(archive_on_s3.key.as_deref(), &name);
    let listed = match super::s3_client(ctx, &ns, archive_on_s3).await {
        Ok(client) => client
            .list(&archive_on_s3.bucket, &SegmentName::listing(&prefix))
            .await
            .map_err(|f| f.message),
        Err(message) => Err(message),
    };
    let listed = match listed {
        Ok(l) => l,
        Err(message) => {
            ctx.event(
                schedule,
                true,
                Reason::ArchiveFailed,
                Action::Reconcile,
                format!(
                    "cannot list the archive at s3://{}/{prefix}: {message}",
                    archive_on_s3.bucket
                ),
            )
            .await;
            return Ok(previous.cloned());
        }
    };
    let mut status = status_of(&prefix, &listed, &verified_bases(mine));
    let revision = match &cluster {
        Some(cluster) => cluster_revision(ctx, cluster).await,
        None => None,
    };
    (status.lag_revisions, status.lag_seconds) = lag(
        revision,
        status.newest_revision,
        status.newest_time.as_ref().map(|t| t.0.as_second()),
        Timestamp::now().as_second(),
    );
    for gap in status
        .gaps
        .iter()
        .filter(|g| !previous.is_some_and(|p| p.gaps.contains(g)))
    {
        ctx.event(
            schedule,
            true,
            Reason::ArchiveGap,
            Action::Reconcile,
            format!(
                "the archive lacks revisions {gap}: the archiver fell behind a compaction of \
                 the cluster; point-in-time recovery reaches the revisions after the next \
                 verified snapshot of the schedule"
            ),
        )
        .await;
    }
    Ok(Some(status))
}

/// The archive's status from the listing of its segments and the revisions of the schedule's
/// verified snapshots.
pub(super) fn status_of(prefix: &str, listed: &[Listed], verified: &[i64]) -> ArchiveStatus {
    let named: Vec<(SegmentName, Option<i64>)> = listed
        .iter()
        .filter_map(|o| Some((SegmentName::parse(prefix, &o.key)?, o.stored_at)))
        .collect();
    let names: Vec<SegmentName> = named.iter().map(|(n, _)| *n).collect();
    let window = Window::of(&names);
    let newest_time = window.last.and_then(|last| {
        named
            .iter()
            .filter(|(n, _)| n.last == last)
            .filter_map(|(_, t)| *t)
            .max()
            .and_then(|s| Timestamp::from_second(s).ok())
            .map(Time)
    });
    let skip = window.gaps.len().saturating_sub(SHOWN_GAPS);
    ArchiveStatus {
        newest_revision: window.last,
        newest_time,
        first_revision: window.first,
        window_start_revision: window_base(&window, verified),
        gaps: window
            .gaps
            .iter()
            .skip(skip)
            .map(|(from, to)| format!("{from}-{to}"))
            .collect(),
        segments: (!names.is_empty()).then_some(names.len() as i64),
        lag_revisions: None,
        lag_seconds: None,
    }
}

/// How far the archive is behind the cluster at `revision` (the cluster's, `None`: unknown), in
/// revisions and seconds: `newest` is the newest archived revision, `stored_at` when its segment
/// was stored, `now` the time now (seconds since 1970). Caught up is `(0, 0)`; behind, the
/// seconds are the age of the newest segment (an upper bound on the age of the oldest revision
/// not yet archived); an empty archive is behind by every revision the cluster has, its seconds
/// unknown.
pub(super) fn lag(
    revision: Option<i64>,
    newest: Option<i64>,
    stored_at: Option<i64>,
    now: i64,
) -> (Option<i64>, Option<i64>) {
    let Some(revision) = revision else {
        return (None, None);
    };
    let behind = (revision - newest.unwrap_or(0)).max(0);
    let seconds = if behind == 0 {
        Some(0)
    } else {
        stored_at.map(|t| (now - t).max(0))
    };
    (Some(behind), seconds)
}

/// The cluster's revision as the first of its members that answers a `Status` call reports it
/// (`None`: none answered, or its TLS Secrets are missing).
async fn cluster_revision(ctx: &Context, cluster: &EtcdCluster) -> Option<i64> {
    let ns = cluster.namespace()?;
    let access = Access::load_or_why(&ctx.client, &ctx.metrics, cluster, User::Anonymous)
        .await
        .ok()?
        .ok()?;
    let selector = ListParams::default().labels(&labels::cluster_selector(&cluster.name_any()));
    let members = Api::<EtcdMember>::namespaced(ctx.client.clone(), &ns)
        .list(&selector)
        .await
        .ok()?;
    for member in members
        .items
        .iter()
        .filter(|m| m.spec.cluster_name == cluster.name_any())
    {
        let url = topology::client_url(member, cluster);
        let Ok(mut client) = access
            .dial_with_timeout(std::slice::from_ref(&url), REVISION_TIMEOUT)
            .await
        else {
            continue;
        };
        if let Ok(status) = client.member_status().await {
            return Some(status.revision);
        }
    }
    None
}

/// The revisions of the schedule's verified snapshots: the archive's possible bases.
fn verified_bases(mine: &[EtcdSnapshot]) -> Vec<i64> {
    mine.iter()
        .filter_map(|s| s.status.as_ref()?.verification.as_ref())
        .map(|v| v.revision)
        .collect()
}

/// A Pod that will not run again (restartPolicy Always ends only when evicted or its node
/// failed it).
fn ended(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed" | "Succeeded")
    )
}

async fn delete(pods: &Api<Pod>, name: &str) -> Result<(), Error> {
    match pods.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests;
