//! Automatic recovery, when a cluster asks for it with
//! [`api::v1alpha2::AUTO_RECOVERY_ANNOTATION`]: a cluster that has stayed `QuorumLost` or
//! `AllMembersLost` past [`api::v1alpha2::AUTO_RECOVERY_GRACE_SECONDS`] gets the EtcdRecovery
//! its condition message names, created by the operator. Off by default. One recovery per
//! outage: its name carries the time the cluster became unavailable, so a reconcile that runs
//! again creates nothing new, and a recovery that failed is not retried behind the user's back.
//! `survivor` recovers from the member with the most data; `snapshot` in place from the newest
//! Verified Complete EtcdSnapshot of the cluster (none: a Warning Event `RecoveryNotStarted`
//! says so and nothing is done).

use api::conditions::{cluster as ctype, reason};
use api::v1alpha2::{
    EtcdCluster, EtcdClusterStatus, EtcdRecovery, EtcdRecoverySpec, EtcdSnapshot, LocalReference,
    RecoverySource, SnapshotPhase, SurvivorSource, AUTO_RECOVERY_ANNOTATION,
    AUTO_RECOVERY_GRACE_SECONDS, RECOVERY_ANNOTATION,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::events::{Action, Reason};
use crate::Error;

/// What the annotation asks for, once the cluster has been lost long enough.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Create this EtcdRecovery from a survivor.
    Survivor(String),
    /// Create this EtcdRecovery from the newest Verified Complete EtcdSnapshot.
    Snapshot(String),
    /// The annotation asks for something this version does not do (the value, as written).
    NotBuilt(String),
}

/// Whether the operator should start a recovery of `cluster` now that its status is `status`.
pub fn wanted(cluster: &EtcdCluster, status: &EtcdClusterStatus, now: Timestamp) -> Option<Wanted> {
    let mode = cluster.annotations().get(AUTO_RECOVERY_ANNOTATION)?;
    if cluster.annotations().contains_key(RECOVERY_ANNOTATION) || cluster.spec.replicas == 0 {
        return None;
    }
    let lost = status.conditions.iter().find(|c| {
        c.type_ == ctype::AVAILABLE
            && c.status == "False"
            && (c.reason == reason::QUORUM_LOST || c.reason == reason::ALL_MEMBERS_LOST)
    })?;
    let since = lost.last_transition_time.0;
    if now.as_second() - since.as_second() < AUTO_RECOVERY_GRACE_SECONDS {
        return None;
    }
    let name = format!("{}-auto-{}", cluster.name_any(), since.as_second());
    match mode.as_str() {
        "survivor" => Some(Wanted::Survivor(name)),
        "snapshot" => Some(Wanted::Snapshot(name)),
        other => Some(Wanted::NotBuilt(other.to_string())),
    }
}

/// The newest (by completion, then name) Complete, `Verified=True` EtcdSnapshot of `cluster`,
/// taken of this incarnation of it (never one of a deleted cluster of the same name: see
/// [`api::v1alpha2::SnapshotOrigin::is_of`]).
pub fn newest_verified(snapshots: &[EtcdSnapshot], cluster: &EtcdCluster) -> Option<String> {
    let (name, uid) = (cluster.name_any(), cluster.uid().unwrap_or_default());
    let created = cluster.metadata.creation_timestamp.as_ref();
    snapshots
        .iter()
        .filter(|s| s.spec.cluster_ref.name == name)
        .filter_map(|s| {
            let st = s.status.as_ref()?;
            (st.phase == Some(SnapshotPhase::Complete)
                && st.verified() == Some(true)
                && s.origin().is_of(&uid, created))
            .then(|| (st.completion_time.as_ref().map(|t| t.0), s.name_any()))
        })
        .max()
        .map(|(_, name)| name)
}

/// Create the EtcdRecovery [`wanted`] asks for (once: an existing one of that name is left as it
/// is) and announce it on the cluster.
pub(super) async fn start(
    cluster: &EtcdCluster,
    ctx: &Context,
    status: &EtcdClusterStatus,
) -> Result<(), Error> {
    let Some(wanted) = wanted(cluster, status, Timestamp::now()) else {
        return Ok(());
    };
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let (name, snapshot) = match wanted {
        Wanted::Survivor(name) => (name, None),
        Wanted::Snapshot(name) => (name, Some(())),
        Wanted::NotBuilt(mode) => {
            tracing::debug!(cluster = %cluster.name_any(), %mode, "auto-recovery mode not built");
            return Ok(());
        }
    };
    let api: Api<EtcdRecovery> = Api::namespaced(ctx.client.clone(), &ns);
    if api.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let snapshot = match snapshot {
        None => None,
        Some(()) => {
            let all = Api::<EtcdSnapshot>::namespaced(ctx.client.clone(), &ns)
                .list(&Default::default())
                .await?
                .items;
            match newest_verified(&all, cluster) {
                Some(s) => Some(s),
                None => {
                    ctx.event(
                        cluster,
                        true,
                        Reason::RecoveryNotStarted,
                        Action::Create,
                        format!(
                            "the cluster has been unavailable for over \
                             {AUTO_RECOVERY_GRACE_SECONDS}s and asks for a recovery from a \
                             snapshot ({AUTO_RECOVERY_ANNOTATION}=snapshot), but it has no \
                             Complete EtcdSnapshot with Verified=True taken since it was created \
                             (status.clusterUID {}); nothing was done. Recover by hand \
                             (docs/disaster-recovery.md)",
                            cluster.uid().unwrap_or_default()
                        ),
                    )
                    .await;
                    return Ok(());
                }
            }
        }
    };
    let mode = if snapshot.is_some() {
        "snapshot"
    } else {
        "survivor"
    };
    let mut recovery = EtcdRecovery::new(
        &name,
        EtcdRecoverySpec {
            cluster_ref: LocalReference {
                name: cluster.name_any(),
            },
            source: RecoverySource {
                survivor: snapshot
                    .is_none()
                    .then_some(SurvivorSource { member: None }),
                snapshot: snapshot.clone().map(|name| LocalReference { name }.into()),
            },
            confirm_healthy_cluster_rollback: None,
            allow_unverified_snapshot: None,
        },
    );
    recovery.metadata.namespace = Some(ns);
    match api.create(&PostParams::default(), &recovery).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    ctx.event(
        cluster,
        true,
        Reason::RecoveryCreated,
        Action::Create,
        format!(
            "the cluster has been unavailable for over {AUTO_RECOVERY_GRACE_SECONDS}s and asks \
             for it ({AUTO_RECOVERY_ANNOTATION}={mode}): created EtcdRecovery {name}{}",
            snapshot
                .map(|s| format!(" from EtcdSnapshot {s}"))
                .unwrap_or_default()
        ),
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::EtcdClusterSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn lost_cluster(mode: Option<&str>) -> (EtcdCluster, EtcdClusterStatus) {
        let mut c = EtcdCluster::new(
            "c",
            EtcdClusterSpec {
                replicas: 3,
                version: "3.6.11".into(),
                ..Default::default()
            },
        );
        if let Some(mode) = mode {
            c.metadata.annotations =
                Some([(AUTO_RECOVERY_ANNOTATION.to_string(), mode.to_string())].into());
        }
        let status = EtcdClusterStatus {
            conditions: vec![Condition {
                type_: ctype::AVAILABLE.into(),
                status: "False".into(),
                reason: reason::QUORUM_LOST.into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(at(0)),
            }],
            ..Default::default()
        };
        (c, status)
    }

    #[test]
    fn only_an_annotated_cluster_lost_past_the_grace_period_is_recovered() {
        let (c, s) = lost_cluster(None);
        assert_eq!(wanted(&c, &s, at(3600)), None);
        let (c, s) = lost_cluster(Some("survivor"));
        assert_eq!(wanted(&c, &s, at(AUTO_RECOVERY_GRACE_SECONDS - 1)), None);
        let name = format!("c-auto-{}", at(0).as_second());
        assert_eq!(
            wanted(&c, &s, at(AUTO_RECOVERY_GRACE_SECONDS)),
            Some(Wanted::Survivor(name.clone()))
        );
        // The same outage always names the same recovery: it is created once.
        assert_eq!(
            wanted(&c, &s, at(AUTO_RECOVERY_GRACE_SECONDS + 600)),
            Some(Wanted::Survivor(name))
        );
    }

    #[test]
    fn a_healthy_held_or_paused_cluster_is_left_alone() {
        let (c, mut s) = lost_cluster(Some("survivor"));
        s.conditions[0].status = "True".into();
        s.conditions[0].reason = reason::QUORUM_HEALTHY.into();
        assert_eq!(wanted(&c, &s, at(3600)), None);
        let (mut c, s) = lost_cluster(Some("survivor"));
        c.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(RECOVERY_ANNOTATION.to_string(), "r1".to_string());
        assert_eq!(wanted(&c, &s, at(3600)), None);
        let (mut c, s) = lost_cluster(Some("survivor"));
        c.spec.replicas = 0;
        assert_eq!(wanted(&c, &s, at(3600)), None);
    }

    #[test]
    fn a_snapshot_request_names_its_recovery_and_an_unknown_mode_is_not_acted_on() {
        let (c, s) = lost_cluster(Some("snapshot"));
        assert_eq!(
            wanted(&c, &s, at(3600)),
            Some(Wanted::Snapshot(format!("c-auto-{}", at(0).as_second())))
        );
        let (c, s) = lost_cluster(Some("bogus"));
        assert_eq!(
            wanted(&c, &s, at(3600)),
            Some(Wanted::NotBuilt("bogus".into()))
        );
    }

    #[test]
    fn auto_recovery_takes_the_newest_verified_complete_snapshot_of_the_cluster() {
        use api::v1alpha2::{EtcdSnapshotSpec, EtcdSnapshotStatus};
        let snap = |name: &str, cluster: &str, done: i64, complete: bool, verified: &str| {
            let mut s = EtcdSnapshot::new(
                name,
                EtcdSnapshotSpec {
                    cluster_ref: LocalReference {
                        name: cluster.into(),
                    },
                    ..Default::default()
                },
            );
            s.status = Some(EtcdSnapshotStatus {
                phase: Some(if complete {
                    SnapshotPhase::Complete
                } else {
                    SnapshotPhase::Failed
                }),
                completion_time: Some(Time(at(done))),
                cluster_uid: Some(format!("{cluster}-uid")),
                conditions: vec![Condition {
                    type_: api::conditions::snapshot::VERIFIED.into(),
                    status: verified.into(),
                    reason: "R".into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: Time(at(done)),
                }],
                ..Default::default()
            });
            s
        };
        let all = vec![
            snap("old-good", "c", 10, true, "True"),
            snap("new-bad", "c", 30, true, "False"),
            snap("newer-failed", "c", 40, false, "True"),
            snap("other-cluster", "d", 50, true, "True"),
            snap("good", "c", 20, true, "True"),
        ];
        let c = cluster_c();
        assert_eq!(newest_verified(&all, &c).as_deref(), Some("good"));
        assert_eq!(newest_verified(&all[1..4], &c), None);
    }

    /// Cluster c, UID c-uid, created at -3600 (after a previous c was deleted).
    fn cluster_c() -> EtcdCluster {
        let (mut c, _) = lost_cluster(Some("snapshot"));
        c.metadata.uid = Some("c-uid".into());
        c.metadata.creation_timestamp = Some(Time(at(-3600)));
        c
    }

    /// A Complete, Verified=True snapshot of cluster `c` created at `created`, completed at
    /// `done`, recording the cluster UID `uid` (None: taken before the operator recorded it).
    fn verified_of(name: &str, uid: Option<&str>, created: i64, done: i64) -> EtcdSnapshot {
        use api::v1alpha2::{EtcdSnapshotSpec, EtcdSnapshotStatus};
        let mut s = EtcdSnapshot::new(
            name,
            EtcdSnapshotSpec {
                cluster_ref: LocalReference { name: "c".into() },
                ..Default::default()
            },
        );
        s.metadata.creation_timestamp = Some(Time(at(created)));
        s.status = Some(EtcdSnapshotStatus {
            phase: Some(SnapshotPhase::Complete),
            completion_time: Some(Time(at(done))),
            cluster_uid: uid.map(str::to_string),
            conditions: vec![Condition {
                type_: api::conditions::snapshot::VERIFIED.into(),
                status: "True".into(),
                reason: "R".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(at(done)),
            }],
            ..Default::default()
        });
        s
    }

    #[test]
    fn auto_recovery_never_takes_a_snapshot_of_a_previous_cluster_of_the_same_name() {
        let c = cluster_c();
        let previous = vec![
            verified_of("previous", Some("old-uid"), -7300, -7200),
            // Taken before the operator recorded UIDs, and before this c existed.
            verified_of("previous-unrecorded", None, -4000, -3900),
        ];
        assert_eq!(newest_verified(&previous, &c), None);
        // Its own snapshots are taken, the newest first; one that records no UID counts as its
        // own only when it was created after the cluster.
        let mut all = previous.clone();
        all.push(verified_of("mine", Some("c-uid"), -600, -590));
        assert_eq!(newest_verified(&all, &c).as_deref(), Some("mine"));
        all.push(verified_of("mine-unrecorded", None, -300, -290));
        assert_eq!(
            newest_verified(&all, &c).as_deref(),
            Some("mine-unrecorded")
        );
    }
}
