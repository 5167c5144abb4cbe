use api::v1alpha2::{
    EtcdRecoverySpec, EtcdRecoveryStatus, EtcdSnapshotSpec, EtcdSnapshotStatus, LocalReference,
    RecoveryPlan, RecoveryResult, RecoveryStep, SnapshotArtifact, SnapshotVerification,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::fixtures::{self, at, cond};

fn cluster(available: &str, reason: &str) -> EtcdCluster {
    fixtures::cluster(vec![cond(
        "Available",
        available,
        reason,
        "1 of 3 voters ready",
    )])
}

fn snapshot(
    cluster: &str,
    uid: Option<&str>,
    phase: SnapshotPhase,
    verified: Option<&str>,
) -> EtcdSnapshot {
    let mut s = EtcdSnapshot::new(
        "demo-snapshot-x",
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: cluster.into(),
            },
            ..Default::default()
        },
    );
    s.status = Some(EtcdSnapshotStatus {
        phase: Some(phase),
        cluster_uid: uid.map(String::from),
        completion_time: Some(Time(at(0))),
        artifact: Some(SnapshotArtifact {
            uri: "pvc://backups/etcd/demo-snapshot-x.db".into(),
            size_bytes: 1,
            checksum: "sha256:0".into(),
        }),
        verification: Some(SnapshotVerification {
            verified_at: Time(at(3)),
            revision: 1234,
            hash: 1,
        }),
        conditions: verified
            .map(|v| vec![cond("Verified", v, "SnapshotVerified", "checked")])
            .unwrap_or_default(),
        ..Default::default()
    });
    s
}

fn member(name: &str, ready: bool, index: Option<i64>) -> ClusterMemberStatus {
    ClusterMemberStatus {
        name: name.into(),
        ready,
        raft_index: index,
        role: ready.then(|| "Follower".to_string()),
        ..Default::default()
    }
}

#[test]
fn a_verified_complete_snapshot_of_the_cluster_is_accepted() {
    let c = cluster("False", "QuorumLost");
    assert!(check_snapshot(
        &c,
        &snapshot(
            "demo",
            Some("uid-now"),
            SnapshotPhase::Complete,
            Some("True")
        ),
        false
    )
    .is_ok());
    // No UID recorded (an older operator's): the operator decides by creation time; not refused here.
    assert!(check_snapshot(
        &c,
        &snapshot("demo", None, SnapshotPhase::Complete, Some("True")),
        false
    )
    .is_ok());
}

#[test]
fn another_clusters_or_incarnations_snapshot_is_refused() {
    let c = cluster("False", "QuorumLost");
    let e = check_snapshot(
        &c,
        &snapshot("other", None, SnapshotPhase::Complete, Some("True")),
        false,
    )
    .expect_err("other cluster");
    assert!(
        e.to_string()
            .contains("is a snapshot of cluster other, not of demo"),
        "{e}"
    );
    let e = check_snapshot(
        &c,
        &snapshot(
            "demo",
            Some("uid-before"),
            SnapshotPhase::Complete,
            Some("True"),
        ),
        false,
    )
    .expect_err("earlier incarnation");
    assert!(
        e.to_string()
            .contains("taken of an earlier cluster named demo (UID uid-before"),
        "{e}"
    );
    assert!(e.to_string().ends_with("nothing was created"), "{e}");
}

#[test]
fn a_snapshot_not_complete_or_not_verified_is_refused_unless_allowed() {
    let c = cluster("False", "QuorumLost");
    let e = check_snapshot(
        &c,
        &snapshot("demo", None, SnapshotPhase::Started, None),
        true,
    )
    .expect_err("started");
    assert!(e.to_string().contains("is Started, not Complete"), "{e}");
    let unverified = snapshot("demo", None, SnapshotPhase::Complete, None);
    let e = check_snapshot(&c, &unverified, false).expect_err("unverified");
    assert!(
        e.to_string()
            .contains("is not Verified=True (it has no Verified condition)"),
        "{e}"
    );
    assert!(e.to_string().contains("--allow-unverified"), "{e}");
    assert!(check_snapshot(&c, &unverified, true).is_ok());
    let bad = snapshot("demo", None, SnapshotPhase::Complete, Some("False"));
    let e = check_snapshot(&c, &bad, false).expect_err("bad");
    assert!(
        e.to_string()
            .contains("Verified=False SnapshotVerified: checked"),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("do not restore it unless you checked it by hand"),
        "{e}"
    );
}

#[test]
fn a_healthy_cluster_is_recovered_only_when_confirmed() {
    let healthy = cluster("True", "QuorumHealthy");
    let e = refuse_healthy(&healthy, false).expect_err("healthy");
    assert!(
        e.to_string()
            .contains("EtcdCluster demo is Available (QuorumHealthy"),
        "{e}"
    );
    assert!(e.to_string().contains("--confirm-healthy-rollback"), "{e}");
    assert!(refuse_healthy(&healthy, true).is_ok());
    assert!(refuse_healthy(&cluster("False", "QuorumLost"), false).is_ok());
}

#[test]
fn the_survivor_plan_says_the_operator_chooses_and_what_the_others_lose() {
    let c = cluster("False", "QuorumLost");
    let members = [
        member("demo-a", true, Some(1042)),
        member("demo-b", false, None),
        member("demo-c", false, None),
    ];
    let text = plan_text(&c, &members, &Source::Survivor(None), at(60));
    assert!(
        text.starts_with("Recovery of EtcdCluster prod/demo from a surviving member\n"),
        "{text}"
    );
    assert!(
        text.contains("members now: demo-a (ready, follower, raft index 1042), demo-b (not ready), demo-c (not ready)"),
        "{text}"
    );
    assert!(
        text.contains("the member with the highest raft commit index"),
        "{text}"
    );
    assert!(
        text.contains("A write that only a discarded member had stored is lost"),
        "{text}"
    );
    // It does not name a survivor the operator has not chosen.
    assert!(!text.contains("survivor:    demo-a"), "{text}");
    let named = plan_text(&c, &members, &Source::Survivor(Some("demo-b")), at(60));
    assert!(named.contains("survivor:    demo-b, as asked"), "{named}");
}

#[test]
fn the_snapshot_plan_says_its_revision_and_age_and_that_later_writes_are_lost() {
    let c = cluster("False", "AllMembersLost");
    let s = snapshot(
        "demo",
        Some("uid-now"),
        SnapshotPhase::Complete,
        Some("True"),
    );
    let text = plan_text(&c, &[], &Source::Snapshot(&s), at(3 * 3600));
    assert!(
        text.starts_with("Recovery of EtcdCluster prod/demo from EtcdSnapshot demo-snapshot-x\n"),
        "{text}"
    );
    assert!(
        text.contains("snapshot:    revision 1234, completed 2027-01-15T08:00:00Z (3h ago), pvc://backups/etcd/demo-snapshot-x.db"),
        "{text}"
    );
    assert!(
        text.contains("kept:        every write up to revision 1234"),
        "{text}"
    );
    assert!(
        text.contains("lost:        every write after the snapshot"),
        "{text}"
    );
    assert!(text.contains("members now: none"), "{text}");
}

fn recovery(status: EtcdRecoveryStatus) -> EtcdRecovery {
    let mut r = EtcdRecovery::new("demo-recovery-x", EtcdRecoverySpec::default());
    r.status = Some(status);
    r
}

#[test]
fn a_recovery_is_followed_through_its_steps_to_its_result() {
    let running = recovery(EtcdRecoveryStatus {
        phase: Some(RecoveryPhase::Running),
        step: Some(RecoveryStep::ForceNewCluster),
        conditions: vec![cond("Ready", "False", "Recovering", "forcing demo-a")],
        plan: Some(RecoveryPlan {
            member: Some("demo-a".into()),
            discarded_members: vec!["demo-b".into(), "demo-c".into()],
            lost: Some("the data of demo-b, demo-c is discarded".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_eq!(
        judge(&running),
        Progress::Going("Running, step ForceNewCluster (Recovering: forcing demo-a)".into())
    );
    assert_eq!(
        recorded_plan(&running).as_deref(),
        Some("The operator's plan (status.plan):\n  member:    demo-a\n  discarded: demo-b, demo-c\n  lost:      the data of demo-b, demo-c is discarded\n")
    );
    let complete = recovery(EtcdRecoveryStatus {
        phase: Some(RecoveryPhase::Complete),
        result: Some(RecoveryResult {
            cluster_id: Some("5a0f".into()),
            members_re_added: vec!["demo-d".into(), "demo-e".into()],
            keys: Some(200),
            revision: Some(230),
        }),
        ..Default::default()
    });
    assert_eq!(
        judge(&complete),
        Progress::Done("Complete: cluster ID 5a0f, 200 keys at revision 230; members added back: demo-d, demo-e".into())
    );
    let failed = recovery(EtcdRecoveryStatus {
        phase: Some(RecoveryPhase::Failed),
        conditions: vec![cond(
            "Ready",
            "False",
            "RecoveryNotPossible",
            "demo-x is a learner",
        )],
        ..Default::default()
    });
    assert_eq!(
        judge(&failed),
        Progress::Failed("RecoveryNotPossible: demo-x is a learner".into())
    );
    assert_eq!(recorded_plan(&failed), None);
}
