//! Every Event reason and action with the string users see: a rename fails here first.

use super::{Action, Reason};

#[test]
fn every_event_reason_keeps_its_string() {
    let expected = [
        (Reason::Bootstrapping, "Bootstrapping"),
        (Reason::ClusterDiscovered, "ClusterDiscovered"),
        (Reason::MemberAdded, "MemberAdded"),
        (Reason::MemberPromoted, "MemberPromoted"),
        (Reason::ScalingDown, "ScalingDown"),
        (Reason::Pausing, "Pausing"),
        (Reason::ReplacingMember, "ReplacingMember"),
        (Reason::ReplacingAdoptedMember, "ReplacingAdoptedMember"),
        (Reason::MemberReplaced, "MemberReplaced"),
        (Reason::Paused, "Paused"),
        (Reason::Resumed, "Resumed"),
        (Reason::GhostMemberRemoved, "GhostMemberRemoved"),
        (Reason::DeletionMarkRemoved, "DeletionMarkRemoved"),
        (Reason::RollingRestart, "RollingRestart"),
        (Reason::LeaderMoved, "LeaderMoved"),
        (Reason::PeerAutoTlsRestored, "PeerAutoTLSRestored"),
        (Reason::AuthEnabled, "AuthEnabled"),
        (Reason::RootPasswordRotated, "RootPasswordRotated"),
        (Reason::VolumeExpansion, "VolumeExpansion"),
        (Reason::EtcdAlarm, "EtcdAlarm"),
        (Reason::BootstrapFailed, "BootstrapFailed"),
        (Reason::DeadlineExceeded, "DeadlineExceeded"),
        (Reason::MemoryRolloutUnsafe, "MemoryRolloutUnsafe"),
        (Reason::UnsafeCaChange, "UnsafeCAChange"),
        (Reason::PodCreated, "PodCreated"),
        (Reason::PodDeleted, "PodDeleted"),
        (Reason::PodRestarted, "PodRestarted"),
        (Reason::PvcCreated, "PVCCreated"),
        (Reason::PvcAdopted, "PVCAdopted"),
        (Reason::PvcDeleted, "PVCDeleted"),
        (Reason::MemberKeptInEtcd, "MemberKeptInEtcd"),
        (Reason::MemberReattached, "MemberReattached"),
        (Reason::VolumeExpansionRequested, "VolumeExpansionRequested"),
        (Reason::VolumeExpanded, "VolumeExpanded"),
        (Reason::MemberRemoved, "MemberRemoved"),
        (Reason::SnapshotStarted, "SnapshotStarted"),
        (Reason::SnapshotStored, "SnapshotStored"),
        (Reason::SnapshotJobLost, "SnapshotJobLost"),
        (Reason::JobFailed, "JobFailed"),
        (Reason::AuthLatchTimeout, "AuthLatchTimeout"),
        (Reason::SnapshotVerifying, "SnapshotVerifying"),
        (Reason::SnapshotVerified, "SnapshotVerified"),
        (
            Reason::SnapshotVerificationFailed,
            "SnapshotVerificationFailed",
        ),
        (Reason::InvalidSchedule, "InvalidSchedule"),
        (Reason::MissedSchedule, "MissedSchedule"),
        (Reason::SnapshotCreated, "SnapshotCreated"),
        (Reason::SnapshotReplaced, "SnapshotReplaced"),
        (Reason::SnapshotPruned, "SnapshotPruned"),
        (Reason::PruneFailed, "PruneFailed"),
        (Reason::ArchiverStarted, "ArchiverStarted"),
        (Reason::ArchiveGap, "ArchiveGap"),
        (Reason::ArchiveFailed, "ArchiveFailed"),
        (Reason::DefragCreated, "DefragCreated"),
        (Reason::DefragSkipped, "DefragSkipped"),
        (Reason::StampedRun, "StampedRun"),
        (Reason::ConcurrencyForbidden, "ConcurrencyForbidden"),
        (Reason::DefragDeferred, "DefragDeferred"),
        (Reason::DefragStarted, "DefragStarted"),
        (Reason::DefragComplete, "DefragComplete"),
        (Reason::DefragFailed, "DefragFailed"),
        (Reason::MemberDefragmented, "MemberDefragmented"),
        (Reason::MemberDefragFailed, "MemberDefragFailed"),
        (Reason::AlarmDisarmed, "AlarmDisarmed"),
        (Reason::RecoveryPlanned, "RecoveryPlanned"),
        (Reason::RecoveryCreated, "RecoveryCreated"),
        (Reason::RecoveryNotStarted, "RecoveryNotStarted"),
        (Reason::RecoveryStep, "RecoveryStep"),
        (Reason::RecoveryComplete, "RecoveryComplete"),
        (Reason::RecoveryFailed, "RecoveryFailed"),
        (Reason::InvalidSpec, "InvalidSpec"),
        (Reason::OwnershipConflict, "OwnershipConflict"),
    ];
    assert_eq!(
        expected.len(),
        Reason::ALL.len(),
        "a reason is missing from this list"
    );
    for (i, (reason, string)) in expected.iter().enumerate() {
        assert_eq!(
            Reason::ALL[i],
            *reason,
            "Reason::ALL is out of order at {i}"
        );
        assert_eq!(reason.reason(), *string, "{reason:?}");
    }
}

#[test]
fn every_event_action_keeps_its_string() {
    let expected = [
        (Action::Adopt, "Adopt"),
        (Action::Annotate, "Annotate"),
        (Action::AlarmDisarm, "AlarmDisarm"),
        (Action::AlarmList, "AlarmList"),
        (Action::AuthEnable, "AuthEnable"),
        (Action::Complete, "Complete"),
        (Action::Create, "Create"),
        (Action::CreateJob, "CreateJob"),
        (Action::CreateSeed, "CreateSeed"),
        (Action::Decode, "Decode"),
        (Action::Defragment, "Defragment"),
        (Action::Delete, "Delete"),
        (Action::DeleteMember, "DeleteMember"),
        (Action::ExpandVolume, "ExpandVolume"),
        (Action::Fail, "Fail"),
        (Action::LatchClusterId, "LatchClusterID"),
        (Action::MemberAddAsLearner, "MemberAddAsLearner"),
        (Action::MemberPromote, "MemberPromote"),
        (Action::MemberRemove, "MemberRemove"),
        (Action::MoveLeader, "MoveLeader"),
        (Action::Parse, "Parse"),
        (Action::Pause, "Pause"),
        (Action::ProgressDeadline, "ProgressDeadline"),
        (Action::Prune, "Prune"),
        (Action::Reattach, "Reattach"),
        (Action::Reconcile, "Reconcile"),
        (Action::Recover, "Recover"),
        (Action::RestartMember, "RestartMember"),
        (Action::RollingRestart, "RollingRestart"),
        (Action::Rollout, "Rollout"),
        (Action::SetDormant, "SetDormant"),
        (Action::Skip, "Skip"),
        (Action::UserChangePassword, "UserChangePassword"),
        (Action::Verify, "Verify"),
        (Action::WakeDormant, "WakeDormant"),
    ];
    assert_eq!(
        expected.len(),
        Action::ALL.len(),
        "an action is missing from this list"
    );
    for (i, (action, string)) in expected.iter().enumerate() {
        assert_eq!(
            Action::ALL[i],
            *action,
            "Action::ALL is out of order at {i}"
        );
        assert_eq!(action.action(), *string, "{action:?}");
    }
}

#[test]
fn events_that_repeat_a_condition_reason_map_back_from_it() {
    use api::conditions::reason;
    for r in [reason::BOOTSTRAP_FAILED, reason::DEADLINE_EXCEEDED] {
        assert_eq!(Reason::parked(r).map(|e| e.reason()), Some(r));
    }
    for r in [reason::MEMORY_ROLLOUT_UNSAFE, reason::UNSAFE_CA_CHANGE] {
        assert_eq!(Reason::rollout_refused(r).map(|e| e.reason()), Some(r));
    }
    assert_eq!(Reason::parked(reason::RECONCILED), None);
    assert_eq!(Reason::rollout_refused(reason::ROLLING_RESTART), None);
}
