//! The snapshot branch: which snapshots are restored, the plan, and the restore step.

use super::super::tests::*;
use super::*;
use crate::recovery::plan::{next, PodFacts, Source};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn snap(revision: i64) -> SnapshotFacts {
    SnapshotFacts {
        name: "nightly".into(),
        cluster: "c".into(),
        phase: SnapshotPhase::Complete,
        verified: Some(true),
        verifying: false,
        revision: Some(revision),
        uri: Some("s3://b/nightly.db".into()),
        unrestorable: None,
        origin: SnapshotOrigin {
            cluster_uid: Some(CLUSTER_UID.into()),
            cluster_id: Some(format_id(CLUSTER_ID)),
            created: Some(Time(
                created().0 + k8s_openapi::jiff::SignedDuration::from_secs(60),
            )),
        },
    }
}

/// All three members lost (no Pods), restoring `nightly` at revision 100.
fn lost_all() -> Facts {
    let mut f = facts(vec![lost("a"), lost("b"), lost("c")]);
    f.source = Source::Snapshot("nightly".into());
    f.snapshot = Some(snap(100));
    f
}

fn failed(next: Next) -> (&'static str, String) {
    match next {
        Next::Fail { reason, message } => (reason, message),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_missing_snapshot_fails_before_changing_anything() {
    let mut f = lost_all();
    f.snapshot = None;
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::SNAPSHOT_NOT_USABLE);
    assert!(message.contains("does not exist"), "{message}");
    assert!(message.contains("nothing was changed"), "{message}");
}

#[test]
fn only_a_complete_snapshot_of_this_cluster_is_restored() {
    let mut f = lost_all();
    f.snapshot.as_mut().unwrap().cluster = "other".into();
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::SNAPSHOT_NOT_USABLE);
    assert!(message.contains("cluster other, not of c"), "{message}");

    let mut f = lost_all();
    f.snapshot.as_mut().unwrap().phase = SnapshotPhase::Failed;
    assert_eq!(failed(next(&f)).0, reason::SNAPSHOT_NOT_USABLE);

    let mut f = lost_all();
    f.snapshot.as_mut().unwrap().phase = SnapshotPhase::Started;
    assert!(matches!(
        next(&f),
        Next::Wait {
            reason: reason::WAITING_FOR_SNAPSHOT,
            ..
        }
    ));
}

#[test]
fn an_unverified_snapshot_needs_the_users_word() {
    // Verification failed: refused, naming the way out.
    let mut f = lost_all();
    f.snapshot.as_mut().unwrap().verified = Some(false);
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::SNAPSHOT_NOT_USABLE);
    assert!(message.contains("allowUnverifiedSnapshot"), "{message}");
    // Never verified: refused too.
    f.snapshot.as_mut().unwrap().verified = None;
    assert_eq!(failed(next(&f)).0, reason::SNAPSHOT_NOT_USABLE);
    // Being verified: waits.
    f.snapshot.as_mut().unwrap().verifying = true;
    assert!(matches!(
        next(&f),
        Next::Wait {
            reason: reason::WAITING_FOR_SNAPSHOT,
            ..
        }
    ));
    // With the user's word it is restored.
    f.allow_unverified = true;
    assert!(matches!(next(&f), Next::RecordPlan(_)));
}

#[test]
fn a_healthy_cluster_is_rolled_back_only_when_confirmed() {
    let mut f = lost_all();
    f.members = vec![
        running("a", etcd(1, 2, 500, 1, 3)),
        running("b", etcd(2, 2, 500, 1, 3)),
        lost("c"),
    ];
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::HEALTHY_CLUSTER_NOT_CONFIRMED);
    assert!(message.contains("Nothing was changed"), "{message}");
    assert!(
        message.contains("confirmHealthyClusterRollback"),
        "{message}"
    );
    f.confirmed = true;
    assert!(matches!(next(&f), Next::RecordPlan(_)));
}

#[test]
fn the_plan_restores_into_the_seed_and_bumps_past_the_highest_known_revision() {
    let mut f = lost_all();
    f.members[1].bootstrap = true;
    // Member a answered at revision 1000 (raft index 500); a later snapshot recorded 1500.
    f.members[0] = running("a", etcd(1, 2, 500, 0, 3));
    f.highest_snapshot_revision = Some(1500);
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("b"), "the seed is chosen");
    assert_eq!(plan.snapshot.as_deref(), Some("nightly"));
    assert_eq!(plan.revision, Some(100));
    assert_eq!(plan.highest_known_revision, Some(1500));
    assert_eq!(plan.bump_revision, Some(1400 + BUMP_MARGIN));
    assert_eq!(plan.discarded_members, ["a", "c"]);
    let lost = plan.lost.unwrap();
    assert!(lost.contains("every write after it is lost"), "{lost}");
    assert!(lost.contains(".pre-restore-rec"), "{lost}");
}

#[test]
fn without_a_seed_the_first_member_by_name_is_restored_into() {
    let mut f = lost_all();
    f.members.reverse();
    assert_eq!(planned(next(&f)).member.as_deref(), Some("a"));
}

#[test]
fn bump_revision_lifts_the_first_restored_revision_above_every_known_one() {
    assert_eq!(bump_revision(Some(100), Some(100)), BUMP_MARGIN);
    assert_eq!(bump_revision(Some(100), Some(5_000)), 4_900 + BUMP_MARGIN);
    // Nothing known beyond the snapshot, or nothing known at all.
    assert_eq!(bump_revision(Some(100), None), BUMP_MARGIN);
    assert_eq!(bump_revision(None, Some(7)), 7 + BUMP_MARGIN);
    for (s, h) in [(1, 2), (10, 10_000_000), (0, 0)] {
        assert!(s + bump_revision(Some(s), Some(h)) > h);
    }
}

/// A snapshot recovery past its plan, restoring into `a`.
fn restoring(step: RecoveryStep, members: Vec<MemberFacts>) -> Facts {
    let mut f = at(step, members);
    f.source = Source::Snapshot("nightly".into());
    f.snapshot = Some(snap(100));
    f.plan.as_mut().unwrap().snapshot = Some("nightly".into());
    f
}

fn dormant(name: &str) -> MemberFacts {
    MemberFacts {
        dormant: true,
        ..lost(name)
    }
}

fn restored(name: &str, cluster_id: u64, ready: bool) -> MemberFacts {
    let mut e = etcd(1, 1, 3, 1, 1).unwrap();
    e.cluster_id = cluster_id;
    MemberFacts {
        restore_marked: true,
        pod: Some(PodFacts {
            uid: "u".into(),
            ready,
            ..Default::default()
        }),
        etcd: ready.then_some(e),
        ..lost(name)
    }
}

#[test]
fn stopped_members_lead_to_the_restore_not_to_force_new_cluster() {
    let f = restoring(RecoveryStep::StopMembers, vec![dormant("a"), dormant("b")]);
    assert_eq!(next(&f), Next::Advance(RecoveryStep::RestoreSnapshot));
}

#[test]
fn the_restore_wakes_its_member_and_leaves_the_others_dormant_with_their_data() {
    let f = restoring(
        RecoveryStep::RestoreSnapshot,
        vec![dormant("a"), dormant("b")],
    );
    assert_eq!(next(&f), Next::Act(Work::RestoreInto("a".into())));
    // Marked and awake but not running yet: wait; nobody else is touched.
    let f = restoring(
        RecoveryStep::RestoreSnapshot,
        vec![restored("a", 0, false), dormant("b")],
    );
    assert!(matches!(next(&f), Next::Wait { .. }));
    // A failed restore is reported, the others still keep their data.
    let mut a = restored("a", 0, false);
    a.restore_failure = Some("sha256 mismatch".into());
    let f = restoring(RecoveryStep::RestoreSnapshot, vec![a, dormant("b")]);
    match next(&f) {
        Next::Wait { message, .. } => {
            assert!(message.contains("sha256 mismatch"), "{message}");
            assert!(message.contains("keep their data"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_latched_cluster_id_follows_the_restored_member_before_others_go() {
    let f = restoring(
        RecoveryStep::RestoreSnapshot,
        vec![restored("a", 0xdef, true), dormant("b")],
    );
    assert_eq!(next(&f), Next::Act(Work::LatchClusterId(format_id(0xdef))));
    // Latched already (or the same ID: restored with the seed's identity): on to the others.
    let f = restoring(
        RecoveryStep::RestoreSnapshot,
        vec![restored("a", CLUSTER_ID, true), dormant("b")],
    );
    assert_eq!(next(&f), Next::Advance(RecoveryStep::RemoveOthers));
}

#[test]
fn the_restore_mark_goes_before_the_cluster_is_released() {
    let mut f = restoring(
        RecoveryStep::ResumeCluster,
        vec![restored("a", CLUSTER_ID, true)],
    );
    f.cluster.as_mut().unwrap().held_by = Some("rec".into());
    assert_eq!(next(&f), Next::Act(Work::UnmarkRestore("a".into())));
    f.members[0].restore_marked = false;
    assert_eq!(next(&f), Next::Act(Work::ReleaseCluster));
}

const STORED_URI: &str = "s3://backups/other/nightly.db";

/// All three members lost, restoring a snapshot given by its S3 object.
fn lost_all_stored(sha256: Option<&str>) -> Facts {
    let mut f = facts(vec![lost("a"), lost("b"), lost("c")]);
    f.source = Source::Stored(StoredFacts {
        uri: STORED_URI.into(),
        sha256: sha256.map(str::to_string),
        missing: None,
    });
    f
}

#[test]
fn a_stored_snapshot_bumps_past_the_highest_known_revision_counting_its_own_as_zero() {
    let mut f = lost_all_stored(Some("sha256:00"));
    f.highest_snapshot_revision = Some(5_000);
    let plan = planned(next(&f));
    assert_eq!(plan.snapshot, None, "no EtcdSnapshot is named");
    assert_eq!(plan.snapshot_uri.as_deref(), Some(STORED_URI));
    assert_eq!(
        plan.revision, None,
        "its revision is known only once it is read"
    );
    assert_eq!(plan.highest_known_revision, Some(5_000));
    assert_eq!(plan.bump_revision, Some(5_000 + BUMP_MARGIN));
    assert_eq!(plan.member.as_deref(), Some("a"));
    assert_eq!(plan.discarded_members, ["b", "c"]);
    let lost = plan.lost.unwrap();
    assert!(lost.contains(STORED_URI), "{lost}");
    assert!(lost.contains("counts it as 0"), "{lost}");
    // A member that answered counts too; nothing known at all leaves the margin alone.
    let mut f = lost_all_stored(Some("sha256:00"));
    f.members[1] = running("b", etcd(2, 2, 700, 0, 3));
    assert_eq!(planned(next(&f)).bump_revision, Some(1_400 + BUMP_MARGIN));
    let f = lost_all_stored(Some("sha256:00"));
    let plan = planned(next(&f));
    assert_eq!(plan.highest_known_revision, None);
    assert_eq!(plan.bump_revision, Some(BUMP_MARGIN));
}

#[test]
fn a_stored_snapshot_without_a_checksum_needs_the_users_word() {
    let mut f = lost_all_stored(None);
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::SNAPSHOT_NOT_USABLE);
    assert!(message.contains("nothing was changed"), "{message}");
    assert!(message.contains("allowUnverifiedSnapshot"), "{message}");
    assert!(message.contains("sha256"), "{message}");
    f.allow_unverified = true;
    assert!(matches!(next(&f), Next::RecordPlan(_)));
}

#[test]
fn a_stored_snapshot_that_cannot_be_read_fails_before_changing_anything() {
    let mut f = lost_all_stored(Some("sha256:00"));
    if let Source::Stored(s) = &mut f.source {
        s.missing = Some(
            "Secret s3-creds (spec.source.snapshot.s3.credentialsSecretRef) does not exist".into(),
        );
    }
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::SNAPSHOT_NOT_USABLE);
    assert!(message.contains("s3-creds"), "{message}");
    assert!(message.contains(STORED_URI), "{message}");
    assert!(message.contains("nothing was changed"), "{message}");
}

#[test]
fn a_healthy_cluster_is_rolled_back_to_a_stored_snapshot_only_when_confirmed() {
    let mut f = lost_all_stored(Some("sha256:00"));
    f.members = vec![
        running("a", etcd(1, 2, 500, 1, 3)),
        running("b", etcd(2, 2, 500, 1, 3)),
        lost("c"),
    ];
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::HEALTHY_CLUSTER_NOT_CONFIRMED);
    assert!(message.contains(STORED_URI), "{message}");
    f.confirmed = true;
    assert!(matches!(next(&f), Next::RecordPlan(_)));
}

#[test]
fn a_stored_snapshot_is_restored_through_the_same_steps() {
    let stored = |step, members| {
        let mut f = at(step, members);
        f.source = lost_all_stored(Some("sha256:00")).source;
        f.plan.as_mut().unwrap().snapshot_uri = Some(STORED_URI.into());
        f
    };
    let f = stored(RecoveryStep::StopMembers, vec![dormant("a"), dormant("b")]);
    assert_eq!(next(&f), Next::Advance(RecoveryStep::RestoreSnapshot));
    let f = stored(
        RecoveryStep::RestoreSnapshot,
        vec![dormant("a"), dormant("b")],
    );
    assert_eq!(next(&f), Next::Act(Work::RestoreInto("a".into())));
    let f = stored(
        RecoveryStep::RestoreSnapshot,
        vec![restored("a", 0, false), dormant("b")],
    );
    match next(&f) {
        Next::Wait { message, .. } => assert!(message.contains(STORED_URI), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_snapshot_of_a_previous_cluster_of_the_same_name_is_refused_by_name_with_the_way_out() {
    // Recorded another UID: the cluster was deleted and created again since.
    let mut f = lost_all();
    let origin = &mut f.snapshot.as_mut().unwrap().origin;
    origin.cluster_uid = Some("old-uid".into());
    origin.cluster_id = Some("00000000000000ff".into());
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::SNAPSHOT_NOT_USABLE);
    for part in [
        "EtcdSnapshot nightly",
        "old-uid",
        "00000000000000ff",
        CLUSTER_UID,
        &format_id(CLUSTER_ID),
        "nothing was changed",
        "spec.source.snapshot.s3",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }

    // Recorded nothing (taken before the operator recorded it) and created before the cluster:
    // it may be the previous cluster's, so it is refused too.
    let mut f = lost_all();
    let origin = &mut f.snapshot.as_mut().unwrap().origin;
    *origin = SnapshotOrigin {
        created: Some(Time(
            created().0 - k8s_openapi::jiff::SignedDuration::from_secs(60),
        )),
        ..Default::default()
    };
    let (reason, message) = failed(next(&f));
    assert_eq!(reason, reason::SNAPSHOT_NOT_USABLE);
    assert!(message.contains("records no cluster UID"), "{message}");
    assert!(message.contains("spec.source.snapshot.s3"), "{message}");

    // Recorded nothing but created after the cluster: this cluster's.
    let mut f = lost_all();
    f.snapshot.as_mut().unwrap().origin = SnapshotOrigin {
        created: Some(Time(
            created().0 + k8s_openapi::jiff::SignedDuration::from_secs(60),
        )),
        ..Default::default()
    };
    assert_eq!(planned(next(&f)).snapshot.as_deref(), Some("nightly"));
}
