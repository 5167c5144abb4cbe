//! Every Kubernetes Event the controller emits: its reason ([`Reason`]) and its action
//! ([`Action`]), each spelled once. The strings are part of the user-facing contract
//! (`kubectl describe`, alerting on reasons, the e2e suites): never rename one.
//!
//! This module only names Events; it does no I/O ([`crate::context::Context::event`] publishes
//! them). Condition types and reasons live in `api::conditions`; an Event that repeats a
//! condition's reason takes the string from there.

use api::conditions::reason as condition;

/// The reason of an Event: what happened, as `kubectl describe` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    // EtcdCluster: membership
    Bootstrapping,
    ClusterDiscovered,
    MemberAdded,
    MemberPromoted,
    ScalingDown,
    Pausing,
    ReplacingMember,
    ReplacingAdoptedMember,
    MemberReplaced,
    Paused,
    Resumed,
    GhostMemberRemoved,
    /// The operator's deletion mark was removed from a member no plan deletes any longer.
    DeletionMarkRemoved,
    RollingRestart,
    LeaderMoved,
    // EtcdCluster: TLS, auth, volumes, alarms
    PeerAutoTlsRestored,
    AuthEnabled,
    RootPasswordRotated,
    VolumeExpansion,
    EtcdAlarm,
    // EtcdCluster: parked or refused (the Available or Progressing condition's reason)
    BootstrapFailed,
    DeadlineExceeded,
    MemoryRolloutUnsafe,
    UnsafeCaChange,
    // EtcdMember
    PodCreated,
    PodDeleted,
    PodRestarted,
    PvcCreated,
    PvcAdopted,
    PvcDeleted,
    MemberKeptInEtcd,
    MemberReattached,
    VolumeExpansionRequested,
    VolumeExpanded,
    MemberRemoved,
    // EtcdSnapshot (a failure repeats the Ready condition's reason)
    SnapshotStarted,
    SnapshotStored,
    SnapshotJobLost,
    JobFailed,
    AuthLatchTimeout,
    /// A Complete snapshot's verification Job was created.
    SnapshotVerifying,
    SnapshotVerified,
    /// Verified=False: the snapshot is bad, or could not be verified (the message says which).
    SnapshotVerificationFailed,
    // EtcdSnapshotSchedule, EtcdDefragPolicy
    InvalidSchedule,
    MissedSchedule,
    SnapshotCreated,
    SnapshotReplaced,
    SnapshotPruned,
    PruneFailed,
    /// The schedule's archiver Pod was created (or replaced after a change of spec.archive).
    ArchiverStarted,
    /// The continuous archive lacks revisions between two segments (the archiver fell behind
    /// a compaction).
    ArchiveGap,
    /// The archive could not be listed, or its archiver not run (the message says why).
    ArchiveFailed,
    DefragCreated,
    DefragSkipped,
    /// A policy stamped the run of a scheduled tick (the reference's word).
    StampedRun,
    /// A tick of a `concurrencyPolicy: Forbid` policy came while a run of it was unfinished.
    ConcurrencyForbidden,
    // EtcdDefrag
    /// The run waits: another run of the cluster goes first, or the cluster is not healthy.
    DefragDeferred,
    DefragStarted,
    DefragComplete,
    DefragFailed,
    MemberDefragmented,
    MemberDefragFailed,
    AlarmDisarmed,
    // EtcdRecovery (and the EtcdCluster it rebuilds)
    /// The plan is recorded: which member survives, at which raft term and index, what is lost.
    RecoveryPlanned,
    /// The operator created an EtcdRecovery for a cluster annotated for automatic recovery.
    RecoveryCreated,
    /// A cluster annotated `auto-recovery: snapshot` has no Verified Complete EtcdSnapshot to
    /// recover from: nothing was done.
    RecoveryNotStarted,
    /// A step of the recovery is taken (the note says which and what it did).
    RecoveryStep,
    RecoveryComplete,
    RecoveryFailed,
    // Any kind
    InvalidSpec,
    OwnershipConflict,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: &[Reason] = &[
        Reason::Bootstrapping,
        Reason::ClusterDiscovered,
        Reason::MemberAdded,
        Reason::MemberPromoted,
        Reason::ScalingDown,
        Reason::Pausing,
        Reason::ReplacingMember,
        Reason::ReplacingAdoptedMember,
        Reason::MemberReplaced,
        Reason::Paused,
        Reason::Resumed,
        Reason::GhostMemberRemoved,
        Reason::DeletionMarkRemoved,
        Reason::RollingRestart,
        Reason::LeaderMoved,
        Reason::PeerAutoTlsRestored,
        Reason::AuthEnabled,
        Reason::RootPasswordRotated,
        Reason::VolumeExpansion,
        Reason::EtcdAlarm,
        Reason::BootstrapFailed,
        Reason::DeadlineExceeded,
        Reason::MemoryRolloutUnsafe,
        Reason::UnsafeCaChange,
        Reason::PodCreated,
        Reason::PodDeleted,
        Reason::PodRestarted,
        Reason::PvcCreated,
        Reason::PvcAdopted,
        Reason::PvcDeleted,
        Reason::MemberKeptInEtcd,
        Reason::MemberReattached,
        Reason::VolumeExpansionRequested,
        Reason::VolumeExpanded,
        Reason::MemberRemoved,
        Reason::SnapshotStarted,
        Reason::SnapshotStored,
        Reason::SnapshotJobLost,
        Reason::JobFailed,
        Reason::AuthLatchTimeout,
        Reason::SnapshotVerifying,
        Reason::SnapshotVerified,
        Reason::SnapshotVerificationFailed,
        Reason::InvalidSchedule,
        Reason::MissedSchedule,
        Reason::SnapshotCreated,
        Reason::SnapshotReplaced,
        Reason::SnapshotPruned,
        Reason::PruneFailed,
        Reason::ArchiverStarted,
        Reason::ArchiveGap,
        Reason::ArchiveFailed,
        Reason::DefragCreated,
        Reason::DefragSkipped,
        Reason::StampedRun,
        Reason::ConcurrencyForbidden,
        Reason::DefragDeferred,
        Reason::DefragStarted,
        Reason::DefragComplete,
        Reason::DefragFailed,
        Reason::MemberDefragmented,
        Reason::MemberDefragFailed,
        Reason::AlarmDisarmed,
        Reason::RecoveryPlanned,
        Reason::RecoveryCreated,
        Reason::RecoveryNotStarted,
        Reason::RecoveryStep,
        Reason::RecoveryComplete,
        Reason::RecoveryFailed,
        Reason::InvalidSpec,
        Reason::OwnershipConflict,
    ];

    /// The Event's `reason` field.
    pub fn reason(&self) -> &'static str {
        match self {
            Reason::Bootstrapping => "Bootstrapping",
            Reason::ClusterDiscovered => "ClusterDiscovered",
            Reason::MemberAdded => "MemberAdded",
            Reason::MemberPromoted => "MemberPromoted",
            Reason::ScalingDown => "ScalingDown",
            Reason::Pausing => "Pausing",
            Reason::ReplacingMember => "ReplacingMember",
            Reason::ReplacingAdoptedMember => "ReplacingAdoptedMember",
            Reason::MemberReplaced => "MemberReplaced",
            Reason::Paused => "Paused",
            Reason::Resumed => "Resumed",
            Reason::GhostMemberRemoved => "GhostMemberRemoved",
            Reason::DeletionMarkRemoved => "DeletionMarkRemoved",
            Reason::RollingRestart => "RollingRestart",
            Reason::LeaderMoved => "LeaderMoved",
            Reason::PeerAutoTlsRestored => "PeerAutoTLSRestored",
            Reason::AuthEnabled => "AuthEnabled",
            Reason::RootPasswordRotated => "RootPasswordRotated",
            Reason::VolumeExpansion => "VolumeExpansion",
            Reason::EtcdAlarm => "EtcdAlarm",
            Reason::BootstrapFailed => condition::BOOTSTRAP_FAILED,
            Reason::DeadlineExceeded => condition::DEADLINE_EXCEEDED,
            Reason::MemoryRolloutUnsafe => condition::MEMORY_ROLLOUT_UNSAFE,
            Reason::UnsafeCaChange => condition::UNSAFE_CA_CHANGE,
            Reason::PodCreated => "PodCreated",
            Reason::PodDeleted => "PodDeleted",
            Reason::PodRestarted => "PodRestarted",
            Reason::PvcCreated => "PVCCreated",
            Reason::PvcAdopted => "PVCAdopted",
            Reason::PvcDeleted => "PVCDeleted",
            Reason::MemberKeptInEtcd => "MemberKeptInEtcd",
            Reason::MemberReattached => "MemberReattached",
            Reason::VolumeExpansionRequested => "VolumeExpansionRequested",
            Reason::VolumeExpanded => "VolumeExpanded",
            Reason::MemberRemoved => "MemberRemoved",
            Reason::SnapshotStarted => "SnapshotStarted",
            Reason::SnapshotStored => "SnapshotStored",
            Reason::SnapshotJobLost => condition::SNAPSHOT_JOB_LOST,
            Reason::JobFailed => condition::JOB_FAILED,
            Reason::AuthLatchTimeout => condition::AUTH_LATCH_TIMEOUT,
            Reason::SnapshotVerifying => "SnapshotVerifying",
            Reason::SnapshotVerified => condition::SNAPSHOT_VERIFIED,
            Reason::SnapshotVerificationFailed => "SnapshotVerificationFailed",
            Reason::InvalidSchedule => "InvalidSchedule",
            Reason::MissedSchedule => "MissedSchedule",
            Reason::SnapshotCreated => "SnapshotCreated",
            Reason::SnapshotReplaced => "SnapshotReplaced",
            Reason::SnapshotPruned => "SnapshotPruned",
            Reason::PruneFailed => "PruneFailed",
            Reason::ArchiverStarted => "ArchiverStarted",
            Reason::ArchiveGap => "ArchiveGap",
            Reason::ArchiveFailed => "ArchiveFailed",
            Reason::DefragCreated => "DefragCreated",
            Reason::DefragSkipped => "DefragSkipped",
            Reason::StampedRun => "StampedRun",
            Reason::ConcurrencyForbidden => "ConcurrencyForbidden",
            Reason::DefragDeferred => "DefragDeferred",
            Reason::DefragStarted => "DefragStarted",
            Reason::DefragComplete => "DefragComplete",
            Reason::DefragFailed => "DefragFailed",
            Reason::MemberDefragmented => "MemberDefragmented",
            Reason::MemberDefragFailed => "MemberDefragFailed",
            Reason::AlarmDisarmed => "AlarmDisarmed",
            Reason::RecoveryPlanned => "RecoveryPlanned",
            Reason::RecoveryCreated => "RecoveryCreated",
            Reason::RecoveryNotStarted => "RecoveryNotStarted",
            Reason::RecoveryStep => "RecoveryStep",
            Reason::RecoveryComplete => "RecoveryComplete",
            Reason::RecoveryFailed => "RecoveryFailed",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::OwnershipConflict => "OwnershipConflict",
        }
    }

    /// The Event announcing a cluster parked at its progress deadline, when the Available
    /// condition's reason says so (`None` for any other reason).
    pub fn parked(available_reason: &str) -> Option<Reason> {
        match available_reason {
            condition::BOOTSTRAP_FAILED => Some(Reason::BootstrapFailed),
            condition::DEADLINE_EXCEEDED => Some(Reason::DeadlineExceeded),
            _ => None,
        }
    }

    /// The Event announcing a refused rollout, when the Progressing condition's reason says so
    /// (`None` for any other reason).
    pub fn rollout_refused(progressing_reason: &str) -> Option<Reason> {
        match progressing_reason {
            condition::MEMORY_ROLLOUT_UNSAFE => Some(Reason::MemoryRolloutUnsafe),
            condition::UNSAFE_CA_CHANGE => Some(Reason::UnsafeCaChange),
            _ => None,
        }
    }
}

/// The action of an Event: what the operator did (or tried), the Event's `action` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Adopt,
    Annotate,
    AlarmDisarm,
    AlarmList,
    AuthEnable,
    Complete,
    Create,
    CreateJob,
    CreateSeed,
    Decode,
    Defragment,
    Delete,
    DeleteMember,
    ExpandVolume,
    Fail,
    LatchClusterId,
    MemberAddAsLearner,
    MemberPromote,
    MemberRemove,
    MoveLeader,
    Parse,
    Pause,
    ProgressDeadline,
    Prune,
    Reattach,
    Reconcile,
    Recover,
    RestartMember,
    RollingRestart,
    Rollout,
    SetDormant,
    Skip,
    UserChangePassword,
    Verify,
    WakeDormant,
}

impl Action {
    /// Every action, in declaration order.
    pub const ALL: &[Action] = &[
        Action::Adopt,
        Action::Annotate,
        Action::AlarmDisarm,
        Action::AlarmList,
        Action::AuthEnable,
        Action::Complete,
        Action::Create,
        Action::CreateJob,
        Action::CreateSeed,
        Action::Decode,
        Action::Defragment,
        Action::Delete,
        Action::DeleteMember,
        Action::ExpandVolume,
        Action::Fail,
        Action::LatchClusterId,
        Action::MemberAddAsLearner,
        Action::MemberPromote,
        Action::MemberRemove,
        Action::MoveLeader,
        Action::Parse,
        Action::Pause,
        Action::ProgressDeadline,
        Action::Prune,
        Action::Reattach,
        Action::Reconcile,
        Action::Recover,
        Action::RestartMember,
        Action::RollingRestart,
        Action::Rollout,
        Action::SetDormant,
        Action::Skip,
        Action::UserChangePassword,
        Action::Verify,
        Action::WakeDormant,
    ];

    /// The Event's `action` field.
    pub fn action(&self) -> &'static str {
        match self {
            Action::Adopt => "Adopt",
            Action::Annotate => "Annotate",
            Action::AlarmDisarm => "AlarmDisarm",
            Action::AlarmList => "AlarmList",
            Action::AuthEnable => "AuthEnable",
            Action::Complete => "Complete",
            Action::Create => "Create",
            Action::CreateJob => "CreateJob",
            Action::CreateSeed => "CreateSeed",
            Action::Decode => "Decode",
            Action::Defragment => "Defragment",
            Action::Delete => "Delete",
            Action::DeleteMember => "DeleteMember",
            Action::ExpandVolume => "ExpandVolume",
            Action::Fail => "Fail",
            Action::LatchClusterId => "LatchClusterID",
            Action::MemberAddAsLearner => "MemberAddAsLearner",
            Action::MemberPromote => "MemberPromote",
            Action::MemberRemove => "MemberRemove",
            Action::MoveLeader => "MoveLeader",
            Action::Parse => "Parse",
            Action::Pause => "Pause",
            Action::ProgressDeadline => "ProgressDeadline",
            Action::Prune => "Prune",
            Action::Reattach => "Reattach",
            Action::Reconcile => "Reconcile",
            Action::Recover => "Recover",
            Action::RestartMember => "RestartMember",
            Action::RollingRestart => "RollingRestart",
            Action::Rollout => "Rollout",
            Action::SetDormant => "SetDormant",
            Action::Skip => "Skip",
            Action::UserChangePassword => "UserChangePassword",
            Action::Verify => "Verify",
            Action::WakeDormant => "WakeDormant",
        }
    }
}

#[cfg(test)]
mod tests;
