//! The step a plan chooses ([`Action`]) and why a member is deleted ([`DeleteReason`]). Types
//! only: deciding is for the planner, performing for the reconciler's `act`.

use super::Revision;

/// An etcd member that no EtcdMember of this cluster describes (matched by peer URL): left
/// behind by an EtcdMember deleted without the break-glass annotation or a finalizer removed by
/// hand, or added to etcd by someone else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ghost {
    pub id: u64,
    /// etcd's name for it (empty until it has started).
    pub name: String,
    pub peer_url: String,
    pub is_learner: bool,
}

/// The one thing to do this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the seed EtcdMember (bootstrap=true, initialCluster set after its name is known).
    CreateSeed,
    /// Create an EtcdMember for the next scale-up step (pending until added to etcd).
    CreateMember,
    /// Set a created member's `spec.initialCluster`; for a non-seed member, first
    /// `MemberAddAsLearner(peer_url)` unless etcd already lists that peer URL (crash recovery).
    CompletePending {
        member: String,
        peer_url: String,
        already_added: bool,
        /// The `--initial-cluster` value once the member is in etcd's list (for a seed: itself).
        initial_cluster_after_add: String,
    },
    /// The seed is alone in etcd: record the cluster ID and the seed's member ID.
    LatchClusterId {
        cluster_id: u64,
        seed: String,
        member_id: u64,
    },
    Promote {
        member: String,
        member_id: u64,
    },
    /// Delete an EtcdMember; its finalizer runs MemberRemove.
    DeleteMember {
        member: String,
        why: DeleteReason,
    },
    SetDormant {
        member: String,
        dormant: bool,
    },
    /// `MemberRemove` of an etcd member no EtcdMember describes.
    RemoveGhost(Ghost),
    /// Create the EtcdMember `member` again, already complete (`initial_cluster`), for an etcd
    /// member no EtcdMember describes whose data PVC was kept (its object was deleted without
    /// the break-glass annotation): it adopts the PVC marked `claim_uid` and restarts on that
    /// data under its etcd member ID.
    ReattachMember {
        member: String,
        claim_uid: String,
        initial_cluster: String,
    },
    /// Record what a member (and its Pod) runs where nothing was recorded: the current trust
    /// bundle or image repository on a member created before the operator tracked them (or
    /// adopted), taken to run the current one (a trust bundle recorded as
    /// [`crate::cluster::ca_set::UNKNOWN`] when it may run an older one); the template hash
    /// of its member on a Pod created by an older operator version (or adopted), taken to run
    /// that template. Nothing is restarted for lack of a record.
    Record {
        member: String,
        revision: Revision,
        value: String,
    },
    /// Give the member the current trust bundle and the locked target's template: the member
    /// controller restarts its Pod, which then runs them (a PVC member keeps its data and member
    /// ID).
    RollMember {
        member: String,
        /// The trust bundle to record, when it changes.
        trust_bundle: Option<String>,
        /// The member's template differs from the target's: patch it.
        template: bool,
        /// The etcd image repository to record, when it changes.
        image_repository: Option<String>,
        /// The last member to restart: the leader, after leadership was moved away from it.
        last: bool,
    },
    /// Hand leadership from `from` to `to` (etcd member ID `to_id`) before `from` is restarted.
    MoveLeader {
        from: String,
        to: String,
        to_id: u64,
    },
    /// Nothing to do now; a watch event or the periodic health check brings the next step.
    Wait(String),
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    ScaleDown,
    Pause,
    MemoryPodLost,
    CrashLooping,
    /// The member's PVC is gone.
    DataLost,
    /// A member adopted from the aenix operator, replaced by a native one on request
    /// ([`api::labels::REPLACE_ADOPTED_ANNOTATION`]).
    ReplaceAdopted,
    /// A Memory member runs an old trust bundle or template: it cannot restart without losing
    /// its data, so it is replaced by a new member.
    Rollout,
    /// The member's Pod could not be scheduled for longer than `--replace-broken-members-after`
    /// (its Node is gone with its local volume, its PVC is lost, ...).
    Unschedulable,
    /// The member's Node has been NotReady for longer than `--replace-broken-members-after` and
    /// its Pod is stuck Terminating there.
    NodeNotReady,
}

impl DeleteReason {
    /// The reason as the operator's deletion mark names it
    /// ([`api::labels::DELETION_PLANNED_ANNOTATION`]: `<uid>/<reason>`).
    pub fn name(&self) -> &'static str {
        match self {
            DeleteReason::ScaleDown => "ScaleDown",
            DeleteReason::Pause => "Pause",
            DeleteReason::MemoryPodLost => "MemoryPodLost",
            DeleteReason::CrashLooping => "CrashLooping",
            DeleteReason::DataLost => "DataLost",
            DeleteReason::ReplaceAdopted => "ReplaceAdopted",
            DeleteReason::Rollout => "Rollout",
            DeleteReason::Unschedulable => "Unschedulable",
            DeleteReason::NodeNotReady => "NodeNotReady",
        }
    }
}
