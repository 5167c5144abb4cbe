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

use super::view::{DataHome, MemberView};
use crate::context::Context;
use crate::events::{Action, Reason};
use crate::Error;

/// How long a member Pod whose etcd has not started yet gets before an automatic recovery
/// counts its member as lost: scheduling, attaching its volume, pulling the image. A Pod created
/// by a resume, a rollout or a rescheduling is given this long, counted from its creation; one
/// whose etcd already exited (restarts, crash loop) is not starting, it is failing, and one
/// whose etcd runs without being Ready is waiting for its peers (the outage's own 60 s cover
/// an election).
pub const POD_START_ALLOWANCE_SECONDS: i64 = 300;

/// What the annotation asks for, once the cluster has been lost long enough.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Create this EtcdRecovery from a survivor.
    Survivor(String),
    /// Create this EtcdRecovery from the newest Verified Complete EtcdSnapshot.
    Snapshot(String),
    /// A snapshot recovery is asked for, but these members still hold their data: rolling
    /// them back to a snapshot would lose what they hold beyond it, so nothing is created.
    SnapshotRefused(Vec<String>),
    /// The annotation asks for something this version does not do (the value, as written).
    NotBuilt(String),
}

/// Members whose data is still where a Pod can reach it: a PVC member whose claim is there and
/// whose volume and Node were not deleted; a Memory member whose Pod still exists (its data
/// lives in that Pod). A member never added to etcd holds nothing.
pub fn holding_data(members: &[MemberView]) -> Vec<String> {
    members
        .iter()
        .filter(|m| !m.deleting && !m.pending)
        .filter(|m| {
            if m.memory {
                m.pod.as_ref().is_some_and(|p| !p.terminating)
            } else {
                !m.data_lost
                    && !matches!(
                        m.data_home,
                        DataHome::NodeGone { .. } | DataHome::VolumeGone { .. }
                    )
            }
        })
        .map(|m| m.name.clone())
        .collect()
}

/// Members whose Pod is starting: created less than [`POD_START_ALLOWANCE_SECONDS`] ago, not
/// being deleted, and its etcd container has not started yet (not running, never exited).
pub fn starting(members: &[MemberView], now: Timestamp) -> Vec<String> {
    members
        .iter()
        .filter(|m| !m.deleting)
        .filter(|m| {
            m.pod.as_ref().is_some_and(|p| {
                !p.ready
                    && !p.terminating
                    && p.started.is_none()
                    && p.restart_count == 0
                    && !p.crash_loop_backoff
                    && p.created.is_some_and(|c| {
                        now.as_second() - c.as_second() < POD_START_ALLOWANCE_SECONDS
                    })
            })
        })
        .map(|m| m.name.clone())
        .collect()
}

/// Whether the operator should start a recovery of `cluster` now that its status is `status`
/// and its members are `members`. Each guard keeps a cluster that is not truly lost from being
/// rebuilt behind its user's back:
/// - the outage is the cluster's own (`QuorumLost`/`AllMembersLost`), and has lasted
///   [`AUTO_RECOVERY_GRACE_SECONDS`] counted from its own start (`status.quorumLostSince`),
///   never from how long `Available` was False for another reason (a pause);
/// - no member Pod is still starting ([`starting`]): a resume, a rollout or a rescheduling
///   leaves members without quorum until their Pods run;
/// - a recovery from a snapshot rolls back: only when no member holds its data any more
///   ([`holding_data`]); otherwise it is refused (a member with its data recovers without a
///   rollback, from the survivor, and a majority with their data comes back by itself).
pub fn wanted(
    cluster: &EtcdCluster,
    status: &EtcdClusterStatus,
    members: &[MemberView],
    now: Timestamp,
) -> Option<Wanted> {
    let mode = cluster.annotations().get(AUTO_RECOVERY_ANNOTATION)?;
    if cluster.annotations().contains_key(RECOVERY_ANNOTATION) || cluster.spec.replicas == 0 {
        return None;
    }
    status.conditions.iter().find(|c| {
        c.type_ == ctype::AVAILABLE
            && c.status == "False"
            && (c.reason == reason::QUORUM_LOST || c.reason == reason::ALL_MEMBERS_LOST)
    })?;
    let since = status.quorum_lost_since.as_ref()?.0;
    if now.as_second() - since.as_second() < AUTO_RECOVERY_GRACE_SECONDS {
        return None;
    }
    if !starting(members, now).is_empty() {
        return None;
    }
    let name = format!("{}-auto-{}", cluster.name_any(), since.as_second());
    match mode.as_str() {
        "survivor" => Some(Wanted::Survivor(name)),
        "snapshot" => {
            let holding = holding_data(members);
            Some(if holding.is_empty() {
                Wanted::Snapshot(name)
            } else {
                Wanted::SnapshotRefused(holding)
            })
        }
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

/// The Warning of a snapshot recovery refused because members still hold their data.
fn snapshot_refused(cluster: &EtcdCluster, holding: &[String]) -> String {
    format!(
        "the cluster has been unavailable for over {AUTO_RECOVERY_GRACE_SECONDS}s and asks for a \
         recovery from a snapshot ({AUTO_RECOVERY_ANNOTATION}=snapshot), but member(s) {} still \
         hold their data: restoring a snapshot would roll back every write they hold after it, so \
         no EtcdRecovery was created. If their Pods come back the cluster recovers by itself; if \
         they cannot, rebuild it from the member with the most data (an EtcdRecovery with \
         source.survivor, docs/disaster-recovery.md section 2, the command is in the Available \
         condition of EtcdCluster {}); restore a snapshot by hand only if their data is known bad",
        holding.join(", "),
        cluster.name_any()
    )
}

/// Create the EtcdRecovery [`wanted`] asks for (once: an existing one of that name is left as it
/// is) and announce it on the cluster.
pub(super) async fn start(
    cluster: &EtcdCluster,
    ctx: &Context,
    status: &EtcdClusterStatus,
    members: &[MemberView],
) -> Result<(), Error> {
    let Some(wanted) = wanted(cluster, status, members, Timestamp::now()) else {
        return Ok(());
    };
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let (name, snapshot) = match wanted {
        Wanted::Survivor(name) => (name, None),
        Wanted::Snapshot(name) => (name, Some(())),
        Wanted::SnapshotRefused(holding) => {
            ctx.event(
                cluster,
                true,
                Reason::RecoveryNotStarted,
                Action::Create,
                snapshot_refused(cluster, &holding),
            )
            .await;
            return Ok(());
        }
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
                point_in_time: None,
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
    use crate::pods::PodView;
    use api::v1alpha2::EtcdClusterSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    /// A cluster annotated with `mode`, whose Available condition turned False at `at(0)` and
    /// whose outage (quorumLostSince) began at `at(0)` too.
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
            quorum_lost_since: Some(Time(at(0))),
            ..Default::default()
        };
        (c, status)
    }

    /// A PVC member whose claim is gone and which has no Pod: nothing of it is left.
    fn gone(name: &str) -> MemberView {
        MemberView {
            recorded_pod_uid: None,
            pod: None,
            data_lost: true,
            template_hash: String::new(),
            ..crate::cluster::plan::tests::m(name, -10_000)
        }
    }

    /// A PVC member with its claim, whose Pod was created at `at(created)` and whose etcd has
    /// not started.
    fn with_data(name: &str, created: i64) -> MemberView {
        MemberView {
            data_lost: false,
            pod: Some(PodView {
                uid: format!("pod-{name}"),
                created: Some(at(created)),
                ..Default::default()
            }),
            ..gone(name)
        }
    }

    fn all_gone() -> Vec<MemberView> {
        vec![gone("c-a"), gone("c-b"), gone("c-c")]
    }

    #[test]
    fn only_an_annotated_cluster_lost_past_the_grace_period_is_recovered() {
        let (c, s) = lost_cluster(None);
        assert_eq!(wanted(&c, &s, &all_gone(), at(3600)), None);
        let (c, s) = lost_cluster(Some("survivor"));
        assert_eq!(
            wanted(&c, &s, &all_gone(), at(AUTO_RECOVERY_GRACE_SECONDS - 1)),
            None
        );
        let name = format!("c-auto-{}", at(0).as_second());
        assert_eq!(
            wanted(&c, &s, &all_gone(), at(AUTO_RECOVERY_GRACE_SECONDS)),
            Some(Wanted::Survivor(name.clone()))
        );
        // The same outage always names the same recovery: it is created once.
        assert_eq!(
            wanted(&c, &s, &all_gone(), at(AUTO_RECOVERY_GRACE_SECONDS + 600)),
            Some(Wanted::Survivor(name))
        );
    }

    /// Paused for an hour (Available=False since then), resumed: the loss began at the resume,
    /// and the grace counts from there, whatever the condition's lastTransitionTime says.
    #[test]
    fn the_grace_counts_from_the_outage_not_from_available_turning_false() {
        for mode in ["survivor", "snapshot"] {
            let (c, mut s) = lost_cluster(Some(mode));
            s.conditions[0].reason = reason::ALL_MEMBERS_LOST.into();
            s.quorum_lost_since = Some(Time(at(3590)));
            assert_eq!(wanted(&c, &s, &all_gone(), at(3600)), None, "{mode}");
            assert!(
                wanted(&c, &s, &all_gone(), at(3590 + AUTO_RECOVERY_GRACE_SECONDS)).is_some(),
                "{mode}"
            );
            // A status written before the outage's start was recorded: not yet.
            s.quorum_lost_since = None;
            assert_eq!(wanted(&c, &s, &all_gone(), at(3600)), None, "{mode}");
        }
    }

    /// Woken, rolled or rescheduled Pods get the time a Pod needs to start.
    #[test]
    fn no_recovery_while_a_member_pod_is_starting() {
        let (c, s) = lost_cluster(Some("survivor"));
        let members = vec![with_data("c-a", 3500), gone("c-b"), gone("c-c")];
        assert_eq!(wanted(&c, &s, &members, at(3600)), None);
        assert!(wanted(&c, &s, &members, at(3500 + POD_START_ALLOWANCE_SECONDS)).is_some());
        // A Pod whose etcd runs is not starting: it waits for its peers (the survivor of a
        // cluster that lost the others).
        let mut running = with_data("c-a", 3500);
        if let Some(p) = running.pod.as_mut() {
            p.started = Some(at(3510));
        }
        assert!(wanted(&c, &s, &[running, gone("c-b"), gone("c-c")], at(3600)).is_some());
        // A Pod whose etcd already exited is failing, not starting.
        let mut crashing = with_data("c-a", 3500);
        if let Some(p) = crashing.pod.as_mut() {
            p.restart_count = 2;
        }
        assert!(wanted(&c, &s, &[crashing, gone("c-b"), gone("c-c")], at(3600)).is_some());
        // A Ready Pod is not starting, nor is one being deleted.
        let mut ready = with_data("c-a", 3500);
        if let Some(p) = ready.pod.as_mut() {
            p.ready = true;
        }
        assert_eq!(starting(&[ready], at(3600)), Vec::<String>::new());
        let mut leaving = with_data("c-a", 3500);
        if let Some(p) = leaving.pod.as_mut() {
            p.terminating = true;
        }
        assert_eq!(starting(&[leaving], at(3600)), Vec::<String>::new());
    }

    /// A 1-member cluster whose upgraded Pod is Pending for long, or members that kept their
    /// data while their Pods are down: a snapshot would roll back data that still exists.
    #[test]
    fn a_snapshot_recovery_is_refused_while_a_member_holds_its_data() {
        let (c, s) = lost_cluster(Some("snapshot"));
        let members = vec![with_data("c-a", -1000), gone("c-b"), gone("c-c")];
        assert_eq!(
            wanted(&c, &s, &members, at(3600)),
            Some(Wanted::SnapshotRefused(vec!["c-a".into()]))
        );
        let mut one = c.clone();
        one.spec.replicas = 1;
        assert_eq!(
            wanted(&one, &s, &[with_data("c-a", -1000)], at(3600)),
            Some(Wanted::SnapshotRefused(vec!["c-a".into()]))
        );
        // Its volume's Node deleted: the data went with it.
        let mut node_gone = with_data("c-a", -1000);
        node_gone.data_home = DataHome::NodeGone { node: "n1".into() };
        assert_eq!(
            wanted(&c, &s, &[node_gone, gone("c-b"), gone("c-c")], at(3600)),
            Some(Wanted::Snapshot(format!("c-auto-{}", at(0).as_second())))
        );
        // A Memory member's data lives in its Pod: gone with it.
        let mut memory = gone("c-a");
        memory.memory = true;
        memory.data_lost = false;
        assert!(matches!(
            wanted(&c, &s, &[memory.clone(), gone("c-b")], at(3600)),
            Some(Wanted::Snapshot(_))
        ));
        memory.pod = with_data("c-a", -1000).pod;
        assert_eq!(
            wanted(&c, &s, &[memory, gone("c-b")], at(3600)),
            Some(Wanted::SnapshotRefused(vec!["c-a".into()]))
        );
        // A survivor recovery keeps the most data: it is not refused.
        let (c, s) = lost_cluster(Some("survivor"));
        assert!(matches!(
            wanted(&c, &s, &members, at(3600)),
            Some(Wanted::Survivor(_))
        ));
    }

    #[test]
    fn a_healthy_held_or_paused_cluster_is_left_alone() {
        let (c, mut s) = lost_cluster(Some("survivor"));
        s.conditions[0].status = "True".into();
        s.conditions[0].reason = reason::QUORUM_HEALTHY.into();
        assert_eq!(wanted(&c, &s, &all_gone(), at(3600)), None);
        let (mut c, s) = lost_cluster(Some("survivor"));
        c.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(RECOVERY_ANNOTATION.to_string(), "r1".to_string());
        assert_eq!(wanted(&c, &s, &all_gone(), at(3600)), None);
        let (mut c, s) = lost_cluster(Some("survivor"));
        c.spec.replicas = 0;
        assert_eq!(wanted(&c, &s, &all_gone(), at(3600)), None);
    }

    #[test]
    fn a_snapshot_request_names_its_recovery_and_an_unknown_mode_is_not_acted_on() {
        let (c, s) = lost_cluster(Some("snapshot"));
        assert_eq!(
            wanted(&c, &s, &all_gone(), at(3600)),
            Some(Wanted::Snapshot(format!("c-auto-{}", at(0).as_second())))
        );
        let (c, s) = lost_cluster(Some("bogus"));
        assert_eq!(
            wanted(&c, &s, &all_gone(), at(3600)),
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
