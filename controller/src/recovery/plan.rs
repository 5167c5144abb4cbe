//! The recovery planner: from what the recovery controller observed — the EtcdRecovery, its
//! cluster, the cluster's EtcdMembers, their Pods and what each member's etcd says about itself —
//! to the one thing this reconcile does. Pure; the reconciler around it only reads, performs the
//! work and writes status.
//!
//! A recovery goes through the steps of [`RecoveryStep`] in order (the snapshot branch's own
//! steps are in `snapshot.rs`; the choice of a survivor, from running members and from the data
//! dirs of stopped ones, in `survivor.rs`). The step is
//! recorded in `status.step` before its work is done, and each step is recognised from the world
//! as it is (a member already dormant, a Pod already restarted), so an operator that dies
//! anywhere resumes where it stopped without doing anything twice.

use api::conditions::reason;
use api::v1alpha2::{RecoveryPhase, RecoveryPlan, RecoveryStep};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::agent_job::position::PositionRead;
use crate::etcd::format_id;

mod point_in_time;
mod snapshot;
mod survivor;
pub use point_in_time::Build;
pub use snapshot::{bump_revision, restored_of, SnapshotFacts, StoredFacts, BUMP_MARGIN};
pub use survivor::needs_disk_read;

/// What the recovery rebuilds from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The member with the highest commit index (then term), or the one named.
    Survivor { member: Option<String> },
    /// A stored EtcdSnapshot, restored in place.
    Snapshot(String),
    /// A snapshot given by its S3 object or PVC file (no EtcdSnapshot), restored in place; also
    /// the state a point-in-time source built, once recorded.
    Stored(StoredFacts),
    /// A point in time not built yet.
    PointInTime(Build),
}

/// What one member's etcd says about itself (the Maintenance `Status` call answered by its own
/// process), with the membership it sees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdFacts {
    pub member_id: u64,
    pub cluster_id: u64,
    /// The leader it follows (0: none).
    pub leader: u64,
    pub raft_term: u64,
    pub raft_index: u64,
    pub revision: i64,
    /// How many members its own (serializable) member list holds.
    pub members: usize,
    /// It is a learner (Status `isLearner`): etcd's `--force-new-cluster` makes no voter of
    /// it, so it is never the survivor.
    pub is_learner: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    pub ready: bool,
    pub deleting: bool,
    /// Its etcd runs with `--force-new-cluster` (read from the Pod's own command line).
    pub force_new_cluster: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberFacts {
    pub name: String,
    pub dormant: bool,
    /// The seed (`spec.bootstrap`).
    pub bootstrap: bool,
    /// Carries [`api::v1alpha2::FORCE_NEW_CLUSTER_ANNOTATION`].
    pub forced: bool,
    /// Carries [`api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION`] naming this recovery.
    pub restore_marked: bool,
    /// Why its Pod's restore init container failed, while it has not succeeded.
    pub restore_failure: Option<String>,
    pub deleting: bool,
    pub pod: Option<PodFacts>,
    /// What its etcd answered, when it was asked and answered.
    pub etcd: Option<EtcdFacts>,
    /// Why it was not asked or did not answer.
    pub note: Option<String>,
    /// It has its data PVC (a member on memory storage, or whose claim is gone, holds no data
    /// once its Pod is gone).
    pub claim: bool,
    /// Its raft position read from its data dir by a position Job (None: no such Job), for a
    /// survivor recovery still choosing its survivor ([`needs_disk_read`]).
    pub on_disk: Option<PositionRead>,
    /// Its Pod is being deleted and still exists past its deletion deadline (observed while the
    /// members are stopped).
    pub pod_overdue: Option<Overdue>,
}

/// A Pod that outlived its deletion deadline (its `deletionTimestamp`: the delete request plus
/// the Pod's grace period): its kubelet has not confirmed that its containers stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overdue {
    /// Seconds past the deadline.
    pub secs: u64,
    /// The deadline (RFC 3339): messages name it rather than the time past it, so that a
    /// waiting recovery's status does not change on every look.
    pub deadline: String,
    /// The Node it was scheduled to (None: none).
    pub node: Option<String>,
    /// That Node's state (None: not read).
    pub node_state: Option<NodeState>,
}

/// The state of the Node a stuck Pod runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    Ready,
    /// Exists, its `Ready` condition is not `True`.
    NotReady,
    /// No such Node object.
    Gone,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// The value of [`api::v1alpha2::RECOVERY_ANNOTATION`]: the recovery that holds it.
    pub held_by: Option<String>,
    pub replicas: i32,
    /// `status.clusterID`.
    pub cluster_id: Option<String>,
    /// `metadata.uid` and `metadata.creationTimestamp`: the incarnation a snapshot restored by
    /// name must be of ([`api::v1alpha2::SnapshotOrigin::is_of`]).
    pub uid: String,
    pub created: Option<Time>,
    /// `Available=True` with `readyMembers` at `spec.replicas`.
    pub available: bool,
}

/// Everything the planner reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The EtcdRecovery's name.
    pub name: String,
    /// The EtcdRecovery's UID: an in-place restore's set-aside directory is named by it.
    pub uid: String,
    /// `spec.clusterRef.name`.
    pub cluster_name: String,
    pub phase: RecoveryPhase,
    pub step: Option<RecoveryStep>,
    pub plan: Option<RecoveryPlan>,
    pub forced_pod_uid: Option<String>,
    pub source: Source,
    pub confirmed: bool,
    /// `spec.allowUnverifiedSnapshot`.
    pub allow_unverified: bool,
    /// The EtcdSnapshot of a snapshot source (None: it does not exist).
    pub snapshot: Option<SnapshotFacts>,
    /// The highest revision any EtcdSnapshot of the cluster recorded.
    pub highest_snapshot_revision: Option<i64>,
    pub cluster: Option<ClusterFacts>,
    /// An unfinished EtcdRecovery of the same cluster that goes first (it holds the cluster, or
    /// it was created earlier).
    pub other_recovery: Option<String>,
    pub members: Vec<MemberFacts>,
    /// Seconds since the EtcdRecovery was created.
    pub age_secs: u64,
}

/// The work of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// Set [`api::v1alpha2::RECOVERY_ANNOTATION`] on the cluster.
    HoldCluster,
    /// Make these members dormant (their Pods go, their PVCs stay).
    StopMembers(Vec<String>),
    /// Delete the Pods of these members being deleted (member name, Pod UID): their controller
    /// only runs their cleanup finalizer, which never stops a Pod.
    StopDeleting(Vec<(String, String)>),
    /// Annotate the survivor for `--force-new-cluster` and wake it.
    ForceSurvivor(String),
    /// Remember the Pod that runs with `--force-new-cluster` (its UID).
    RecordForcedPod(String),
    /// Remove the annotation from the survivor.
    UnforceSurvivor(String),
    /// Delete the survivor's Pod that ran with the flag (by name, with this UID).
    RestartPod { member: String, uid: String },
    /// Delete the discarded EtcdMembers (their finalizer finds them gone from etcd).
    DeleteMembers(Vec<String>),
    /// Remove [`api::v1alpha2::RECOVERY_ANNOTATION`] from the cluster.
    ReleaseCluster,
    /// Mark this member for the in-place restore of the plan's snapshot
    /// ([`api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION`], `spec.restore`) and wake it.
    RestoreInto(String),
    /// Set the cluster's latched `status.clusterID` to the restored cluster's (this ID).
    LatchClusterId(String),
    /// Remove the in-place restore mark and `spec.restore` from the restored member.
    UnmarkRestore(String),
    /// Start the position Jobs of these members: their raft position is read from their data
    /// dirs, as their etcd does not run.
    ReadPositions(Vec<String>),
    /// Start the build Job of a point-in-time source.
    BuildPointInTime,
    /// Record what the build stored (`status.pointInTime`): the recovery restores it.
    RecordPointInTime(Box<api::v1alpha2::PointInTimeStatus>),
}

/// The planner's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing to do now; look again soon. The Ready condition says why.
    Wait {
        reason: &'static str,
        message: String,
    },
    /// Fail before anything was changed (or nothing more can be done).
    Fail {
        reason: &'static str,
        message: String,
    },
    /// Record the plan (phase Running, first step) before any step acts.
    RecordPlan(Box<RecoveryPlan>),
    /// Record that the recovery moves on to this step.
    Advance(RecoveryStep),
    /// Do the work of the current step.
    Act(Work),
    /// Every step is done and the cluster is Available.
    Complete,
}

pub(super) fn wait(reason: &'static str, message: impl Into<String>) -> Next {
    Next::Wait {
        reason,
        message: message.into(),
    }
}

pub(super) fn fail(reason: &'static str, message: impl Into<String>) -> Next {
    Next::Fail {
        reason,
        message: message.into(),
    }
}

/// A cluster with a working quorum: a member follows a leader. (A leader exists only while a
/// majority of voters reach it; etcd's CheckQuorum makes a cut-off leader step down.)
fn has_quorum(members: &[MemberFacts]) -> Option<&MemberFacts> {
    members
        .iter()
        .find(|m| m.etcd.as_ref().is_some_and(|e| e.leader != 0))
}

/// How long after its creation a recovery looks again before a leader one of its members
/// reports makes it refuse. A follower keeps reporting its leader until its election timer fires
/// (etcd's `--election-timeout`, 1 s by default, randomized up to twice that): right after the
/// quorum is lost, the survivor still names the leader that lost it. Applying an EtcdRecovery
/// the moment the cluster reads `QuorumLost` must not fail for that.
pub const LEADER_SETTLE_SECS: u64 = 10;

/// The refusal of a recovery that would discard a cluster with a working quorum the user did not
/// confirm discarding, `refusal` saying what would be lost; `None` when the recovery may go on.
/// Safety rule: never roll back a healthy cluster unasked. In the recovery's first
/// [`LEADER_SETTLE_SECS`] a reported leader makes it wait and look again, never go on.
pub(super) fn refuse_healthy(
    f: &Facts,
    refusal: impl FnOnce(&MemberFacts, String) -> String,
) -> Option<Next> {
    let m = has_quorum(&f.members).filter(|_| !f.confirmed)?;
    let leader = format_id(m.etcd.as_ref().map(|e| e.leader).unwrap_or_default());
    if f.age_secs < LEADER_SETTLE_SECS {
        return Some(wait(
            reason::CONFIRMING_QUORUM_LOST,
            format!(
                "member {} still follows leader {leader}; a member names a leader that lost its \
                 quorum for up to an election timeout, so the recovery looks again until \
                 {LEADER_SETTLE_SECS} s after it was created, and refuses if a leader is still \
                 there. Nothing was changed",
                m.name
            ),
        ));
    }
    Some(fail(
        reason::HEALTHY_CLUSTER_NOT_CONFIRMED,
        refusal(m, leader),
    ))
}

pub(super) fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Before the plan: whether and from what the recovery may act.
fn plan_first(f: &Facts, cluster: &ClusterFacts) -> Next {
    if let Some(other) = &f.other_recovery {
        return wait(
            reason::WAITING_FOR_SURVIVOR,
            format!(
                "EtcdRecovery {other} of the same cluster goes first; recoveries of one cluster \
                 never overlap"
            ),
        );
    }
    let Some(latched) = cluster.cluster_id.as_deref() else {
        return fail(
            reason::RECOVERY_NOT_POSSIBLE,
            "the cluster never formed (status.clusterID is unset): there is nothing to recover; \
             delete and recreate the EtcdCluster"
                .to_string(),
        );
    };
    if cluster.replicas == 0 {
        return fail(
            reason::RECOVERY_NOT_POSSIBLE,
            "the cluster is paused (spec.replicas=0): resume it first (set spec.replicas), then \
             create a new EtcdRecovery if it does not come back"
                .to_string(),
        );
    }
    let member = match &f.source {
        Source::Snapshot(snapshot) => return snapshot::plan_first(f, snapshot),
        Source::Stored(stored) => return snapshot::plan_stored(f, stored),
        Source::PointInTime(build) => return point_in_time::plan_build(f, build),
        Source::Survivor { member } => member.as_deref(),
    };
    if let Some(refused) = refuse_healthy(f, |m, leader| {
        format!(
            "the cluster has a working quorum (member {} follows leader {leader}): a recovery \
             would discard every member but one. Nothing was changed. If that is what you want, \
             create a new EtcdRecovery with spec.confirmHealthyClusterRollback: true",
            m.name
        )
    }) {
        return refused;
    }
    let latched_id = crate::etcd::parse_id(latched);
    match survivor::choose(&f.members, member, latched_id) {
        Ok(survivor) => Next::RecordPlan(Box::new(survivor::plan_of(
            survivor, &f.members, latched_id,
        ))),
        Err(next) => *next,
    }
}

/// How long past its deletion deadline a member's Pod may linger before the recovery says it is
/// stuck (a Pod's deletion normally completes within its grace period).
pub const STUCK_AFTER_SECS: u64 = 60;

/// `StopMembers` waits for these members' Pods to go; a Pod past its deletion deadline by
/// [`STUCK_AFTER_SECS`] is named with its Node and the way out. The recovery never forces it
/// itself: until its kubelet confirms, the member's etcd may still run on its data, and the
/// survivor woken beside it would share that data or its old membership.
fn stopping_wait(with_pods: &[&MemberFacts]) -> Next {
    let stuck: Vec<String> = with_pods
        .iter()
        .filter_map(|m| {
            let overdue = m.pod_overdue.as_ref()?;
            (overdue.secs >= STUCK_AFTER_SECS).then(|| stuck_pod(&m.name, overdue))
        })
        .collect();
    if stuck.is_empty() {
        let names: Vec<&str> = with_pods.iter().map(|m| m.name.as_str()).collect();
        return wait(
            reason::RECOVERING,
            format!(
                "stopping the members: waiting for the Pods of {} to go",
                names.join(", ")
            ),
        );
    }
    wait(
        reason::MEMBER_POD_STUCK,
        format!("stopping the members: {}", stuck.join("; ")),
    )
}

/// Why the Pod of `member` does not go, and what to do.
fn stuck_pod(member: &str, overdue: &Overdue) -> String {
    let on = overdue
        .node
        .as_deref()
        .map(|n| format!(" on Node {n}"))
        .unwrap_or_default();
    let past = format!(
        "the Pod of member {member}{on} is still terminating past its deletion deadline ({})",
        overdue.deadline
    );
    let force = format!(
        "force the Pod's deletion (kubectl delete pod {member} --force --grace-period=0, in the \
         recovery's namespace) and the recovery goes on"
    );
    match (overdue.node.as_deref(), overdue.node_state) {
        (Some(node), Some(NodeState::NotReady)) => format!(
            "{past}. Node {node} is NotReady: its kubelet cannot confirm that etcd stopped, and \
             the recovery does not go on while it may still run. If Node {node} is down for good \
             (powered off, removed), {force}; if it comes back, the Pod goes by itself"
        ),
        (Some(node), Some(NodeState::Gone)) => {
            format!("{past}. Node {node} no longer exists, so nothing of it runs: {force}")
        }
        (Some(node), Some(NodeState::Ready)) => format!(
            "{past}. Node {node} is Ready, yet its kubelet has not stopped the Pod: look at why \
             (kubectl describe pod {member}: a finalizer on the Pod, a volume that does not \
             detach, a container that ignores SIGTERM)"
        ),
        _ => format!("{past}. If its Node is down for good, {force}"),
    }
}

/// The survivor's etcd runs alone: it lists itself only and leads.
pub(super) fn runs_alone(m: &MemberFacts) -> bool {
    m.etcd
        .as_ref()
        .is_some_and(|e| e.members == 1 && e.leader == e.member_id && e.leader != 0)
}

pub fn next(f: &Facts) -> Next {
    if f.phase.is_terminal() {
        return Next::Wait {
            reason: reason::COMPLETE,
            message: String::new(),
        };
    }
    let Some(cluster) = &f.cluster else {
        return wait(
            reason::CLUSTER_NOT_FOUND,
            format!(
                "EtcdCluster {} (spec.clusterRef.name) does not exist in this namespace",
                f.cluster_name
            ),
        );
    };
    let (Some(plan), Some(step)) = (&f.plan, f.step) else {
        return plan_first(f, cluster);
    };
    let Some(survivor_name) = plan.member.clone() else {
        return fail(
            reason::RECOVERY_NOT_POSSIBLE,
            "status.plan names no member to rebuild from; create a new EtcdRecovery",
        );
    };
    let survivor = f.members.iter().find(|m| m.name == survivor_name);
    let others: Vec<&MemberFacts> = f
        .members
        .iter()
        .filter(|m| m.name != survivor_name)
        .collect();
    let Some(survivor) = survivor else {
        // Only this recovery ever deletes members while it holds the cluster, and never the
        // survivor (or the member restored into): its loss is a fault it cannot repair.
        return fail(
            reason::RECOVERY_NOT_POSSIBLE,
            format!(
                "the member the cluster is rebuilt from, {survivor_name}, is gone (its EtcdMember \
                 was deleted during the recovery); the cluster stays held by this recovery: see \
                 docs/disaster-recovery.md, 'A recovery that failed half-way'"
            ),
        );
    };
    if survivor.deleting && step < RecoveryStep::RemoveOthers {
        // A member being deleted never runs a Pod again (its controller only runs its cleanup
        // finalizer): the cluster cannot be rebuilt from it. Its finalizer takes no MemberRemove
        // and deletes no data while no other voter is Ready, which holds while the recovery
        // keeps the others stopped.
        return fail(
            reason::RECOVERY_NOT_POSSIBLE,
            format!(
                "{survivor_name} is being deleted (its EtcdMember has a deletion timestamp), and \
                 the cluster was to be rebuilt from it: a member being deleted never runs a Pod \
                 again. Nothing more is changed: the cluster stays held by this recovery if it \
                 is, and the member's data stays on PVC {} while no other member runs. See \
                 docs/disaster-recovery.md, 'A recovery that failed half-way'",
                api::labels::pvc_name(&survivor_name)
            ),
        );
    }
    match step {
        RecoveryStep::PauseCluster => {
            if cluster.held_by.as_deref() == Some(f.name.as_str()) {
                Next::Advance(RecoveryStep::StopMembers)
            } else {
                Next::Act(Work::HoldCluster)
            }
        }
        RecoveryStep::StopMembers => {
            let running: Vec<String> = f
                .members
                .iter()
                .filter(|m| !m.dormant && !m.deleting)
                .map(|m| m.name.clone())
                .collect();
            if !running.is_empty() {
                return Next::Act(Work::StopMembers(running));
            }
            // A member being deleted runs only its cleanup finalizer, which waits for a Ready
            // voter to take its MemberRemove — the voters this step stops — and never stops its
            // Pod: waiting for that Pod would wait for ever. The recovery deletes it (the member
            // controller never starts a Pod for a member being deleted); the finalizer goes on
            // once the member the cluster is rebuilt from runs.
            let deleting: Vec<(String, String)> = f
                .members
                .iter()
                .filter(|m| m.deleting)
                .filter_map(|m| {
                    let pod = m.pod.as_ref().filter(|p| !p.deleting)?;
                    Some((m.name.clone(), pod.uid.clone()))
                })
                .collect();
            if !deleting.is_empty() {
                return Next::Act(Work::StopDeleting(deleting));
            }
            let with_pods: Vec<&MemberFacts> =
                f.members.iter().filter(|m| m.pod.is_some()).collect();
            if with_pods.is_empty() {
                Next::Advance(match f.source {
                    // A point in time is a stored snapshot once built (before any step).
                    Source::Snapshot(_) | Source::Stored(_) | Source::PointInTime(_) => {
                        RecoveryStep::RestoreSnapshot
                    }
                    Source::Survivor { .. } => RecoveryStep::ForceNewCluster,
                })
            } else {
                stopping_wait(&with_pods)
            }
        }
        RecoveryStep::RestoreSnapshot => snapshot::restore_step(f, cluster, survivor),
        RecoveryStep::ForceNewCluster => {
            if !survivor.forced || survivor.dormant {
                return Next::Act(Work::ForceSurvivor(survivor_name));
            }
            match &survivor.pod {
                Some(p)
                    if p.ready && !p.deleting && p.force_new_cluster && runs_alone(survivor) =>
                {
                    if f.forced_pod_uid.as_deref() == Some(p.uid.as_str()) {
                        Next::Advance(RecoveryStep::RestartSurvivor)
                    } else {
                        Next::Act(Work::RecordForcedPod(p.uid.clone()))
                    }
                }
                _ => wait(
                    reason::RECOVERING,
                    format!(
                        "waiting for {survivor_name} to start with --force-new-cluster and lead \
                         a one-member cluster{}",
                        survivor
                            .note
                            .as_deref()
                            .map(|n| format!(" ({n})"))
                            .unwrap_or_default()
                    ),
                ),
            }
        }
        RecoveryStep::RestartSurvivor => {
            if survivor.forced {
                return Next::Act(Work::UnforceSurvivor(survivor_name));
            }
            match &survivor.pod {
                // Whatever started it, a Pod whose etcd runs with the flag is restarted: a
                // later restart of its container would force the membership down to this
                // member again and drop every member added back by then.
                Some(p)
                    if p.force_new_cluster
                        || f.forced_pod_uid.as_deref() == Some(p.uid.as_str()) =>
                {
                    if p.deleting {
                        wait(
                            reason::RECOVERING,
                            format!("waiting for {survivor_name}'s Pod to stop"),
                        )
                    } else {
                        Next::Act(Work::RestartPod {
                            member: survivor_name,
                            uid: p.uid.clone(),
                        })
                    }
                }
                Some(p) if p.ready && !p.deleting && runs_alone(survivor) => {
                    Next::Advance(RecoveryStep::RemoveOthers)
                }
                _ => wait(
                    reason::RECOVERING,
                    format!("waiting for {survivor_name} to run again without --force-new-cluster"),
                ),
            }
        }
        RecoveryStep::RemoveOthers => {
            let live: Vec<String> = others
                .iter()
                .filter(|m| !m.deleting)
                .map(|m| m.name.clone())
                .collect();
            if !live.is_empty() {
                return Next::Act(Work::DeleteMembers(live));
            }
            if others.is_empty() {
                Next::Advance(RecoveryStep::ResumeCluster)
            } else {
                wait(
                    reason::RECOVERING,
                    format!(
                        "waiting for the discarded members {} to be deleted",
                        others
                            .iter()
                            .map(|m| m.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            }
        }
        RecoveryStep::ResumeCluster => {
            if survivor.restore_marked {
                // Before the cluster controller takes over: a later restart of the Pod must not
                // meet a restore request (the agent would skip it, but the mark is done with).
                Next::Act(Work::UnmarkRestore(survivor_name))
            } else if cluster.held_by.as_deref() == Some(f.name.as_str()) {
                Next::Act(Work::ReleaseCluster)
            } else {
                Next::Advance(RecoveryStep::WaitAvailable)
            }
        }
        RecoveryStep::WaitAvailable => {
            // The status alone is not proof: while the recovery held the cluster, the cluster
            // controller may not have finished a reconcile (its calls to the lost members time
            // out), so `Available` with every member ready can still be the status from before
            // the loss. The members themselves must be back too: as many live EtcdMembers as
            // `spec.replicas`, each with its Pod Ready.
            let back = f
                .members
                .iter()
                .filter(|m| !m.deleting && !m.dormant)
                .filter(|m| m.pod.as_ref().is_some_and(|p| p.ready && !p.deleting))
                .count();
            if cluster.available && i32::try_from(back).unwrap_or(i32::MAX) >= cluster.replicas {
                Next::Complete
            } else {
                wait(
                    reason::RECOVERING,
                    format!(
                        "the cluster runs from {survivor_name}; the cluster controller adds the \
                         other {} member(s) back as learners, one at a time ({back} of {} \
                         members back with a Ready Pod)",
                        (cluster.replicas - 1).max(0),
                        cluster.replicas
                    ),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests;
