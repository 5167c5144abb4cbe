use api::v1alpha2::{
    DefragPhase, EtcdDefragSpec, EtcdDefragStatus, EtcdRecoverySpec, EtcdRecoveryStatus,
    EtcdSnapshotSpec, EtcdSnapshotStatus, LocalReference, RecoveryPhase, RecoveryStep,
    SnapshotArtifact, SnapshotPhase, SnapshotVerification,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::fixtures::{at, cluster, cond};

fn member(name: &str, role: &str, ready: bool) -> ClusterMemberStatus {
    ClusterMemberStatus {
        name: name.into(),
        member_id: Some(format!("{name}-id")),
        role: Some(role.into()),
        ready,
        version: Some("3.6.5".into()),
        db_size: Some(4 * 1024 * 1024),
        db_size_in_use: Some(1024 * 1024 + 512 * 1024),
        raft_index: Some(1042),
        raft_term: Some(2),
        alarms: Vec::new(),
    }
}

fn snapshot(name: &str, cluster_uid: Option<&str>, created: i64, verified: &str) -> EtcdSnapshot {
    let mut s = EtcdSnapshot::new(
        name,
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: "demo".into(),
            },
            ..Default::default()
        },
    );
    s.metadata.creation_timestamp = Some(Time(at(created)));
    s.status = Some(EtcdSnapshotStatus {
        phase: Some(SnapshotPhase::Complete),
        completion_time: Some(Time(at(created + 5))),
        cluster_uid: cluster_uid.map(String::from),
        artifact: Some(SnapshotArtifact {
            uri: format!("pvc://backups/etcd/{name}.db"),
            size_bytes: 1,
            checksum: "sha256:00".into(),
        }),
        verification: Some(SnapshotVerification {
            verified_at: Time(at(created + 9)),
            revision: 77,
            hash: 1,
        }),
        conditions: vec![cond("Verified", verified, "SnapshotVerified", "")],
        ..Default::default()
    });
    s
}

fn view<'a>(
    c: &'a EtcdCluster,
    members: &'a [ClusterMemberStatus],
    reported: bool,
    leader: Option<&'a str>,
) -> StatusView<'a> {
    StatusView {
        cluster: c,
        members,
        reported,
        leader,
        newest_verified: None,
        activity: &[],
        now: at(600),
    }
}

#[test]
fn status_prints_the_leader_and_every_member_with_sizes_and_raft_index() {
    let mut c = cluster(vec![cond(
        "Available",
        "True",
        "QuorumHealthy",
        "3 of 3 voters ready",
    )]);
    if let Some(st) = c.status.as_mut() {
        st.ready_members = 2;
    }
    let members = [
        member("demo-a", "Leader", true),
        member("demo-b", "Follower", true),
        member("demo-c", "Learner", false),
    ];
    let text = render(&view(&c, &members, true, Some("demo-a")));
    assert!(
        text.starts_with(
            "EtcdCluster prod/demo: etcd 3.6.5, 2 of 3 members ready, cluster ID 5a0f5c1f62e6a3b1\nLeader: demo-a\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("demo-a   demo-a-id   Leader     yes     3.6.5     1.5 MiB / 4.0 MiB       1042         -"),
        "{text}"
    );
    assert!(
        text.contains("demo-c   demo-c-id   Learner    no "),
        "{text}"
    );
    assert!(
        text.contains("Available   True     QuorumHealthy   10m   3 of 3 voters ready"),
        "{text}"
    );
    assert!(
        text.contains("Newest verified snapshot: none of this cluster"),
        "{text}"
    );
    assert!(text.contains("no Progressing condition yet"), "{text}");
}

#[test]
fn members_without_etcds_answers_say_the_leader_is_unknown_and_show_voters() {
    let c = cluster(vec![]);
    let mut m = member("demo-a", "x", true);
    m.role = None;
    m.db_size = None;
    m.db_size_in_use = None;
    m.raft_index = None;
    let text = render(&view(&c, &[m], false, None));
    assert!(
        text.contains("Leader: unknown (this operator does not report status.members"),
        "{text}"
    );
    assert!(
        text.contains("demo-a   demo-a-id   Voter   yes     3.6.5     -"),
        "{text}"
    );
}

#[test]
fn a_member_reported_with_alarms_lists_them() {
    let c = cluster(vec![]);
    let mut m = member("demo-a", "Leader", true);
    m.alarms = vec!["NOSPACE".into(), "CORRUPT".into()];
    let text = render(&view(&c, &[m], true, Some("demo-a")));
    assert!(text.contains("1042         NOSPACE,CORRUPT"), "{text}");
}

#[test]
fn the_newest_verified_snapshot_is_this_incarnations_by_completion_time() {
    let c = cluster(vec![]);
    let snapshots = [
        snapshot("old", Some("uid-now"), 10, "True"),
        snapshot("newer-unverified", Some("uid-now"), 30, "False"),
        snapshot(
            "newest-of-a-deleted-cluster",
            Some("uid-before"),
            40,
            "True",
        ),
        // No UID recorded: counts when created after the cluster (at 0).
        snapshot("new", None, 20, "True"),
        snapshot("before-the-cluster", None, -5, "True"),
    ];
    let newest = newest_verified(&c, &snapshots).map(|s| s.name_any());
    assert_eq!(newest.as_deref(), Some("new"));

    let mut v = view(&c, &[], true, None);
    v.newest_verified = newest_verified(&c, &snapshots);
    let text = render(&v);
    assert!(
        text.contains(
            "Newest verified snapshot: new (Verified, SnapshotVerified), completed 2027-01-15T08:00:25Z (9m ago), pvc://backups/etcd/new.db, revision 77"
        ),
        "{text}"
    );
}

#[test]
fn the_operator_line_tells_working_holding_and_idle_apart() {
    let working = cluster(vec![cond(
        "Progressing",
        "True",
        "RollingRestart",
        "rolling demo-b",
    )]);
    let holding = cluster(vec![cond(
        "Progressing",
        "False",
        "UnsafeCAChange",
        "refused",
    )]);
    let idle = cluster(vec![cond("Progressing", "False", "Reconciled", "")]);
    assert!(render(&view(&working, &[], true, None))
        .contains("  working: Progressing=True RollingRestart: rolling demo-b\n"));
    assert!(render(&view(&holding, &[], true, None))
        .contains("  holding: Progressing=False UnsafeCAChange: refused\n"));
    assert!(
        render(&view(&idle, &[], true, None)).contains("  idle: Progressing=False Reconciled\n")
    );
}

#[test]
fn unfinished_recoveries_defrags_and_snapshots_of_the_cluster_are_listed() {
    let of = |name: &str| LocalReference { name: name.into() };
    let mut running = EtcdRecovery::new(
        "demo-recovery",
        EtcdRecoverySpec {
            cluster_ref: of("demo"),
            ..Default::default()
        },
    );
    running.status = Some(EtcdRecoveryStatus {
        phase: Some(RecoveryPhase::Running),
        step: Some(RecoveryStep::ForceNewCluster),
        ..Default::default()
    });
    let mut done = running.clone();
    done.metadata.name = Some("done".into());
    done.status = Some(EtcdRecoveryStatus {
        phase: Some(RecoveryPhase::Complete),
        ..Default::default()
    });
    let mut other = running.clone();
    other.spec.cluster_ref = of("other");
    let mut defrag = EtcdDefrag::new(
        "demo-defrag",
        EtcdDefragSpec {
            cluster_ref: of("demo"),
            ..Default::default()
        },
    );
    defrag.status = Some(EtcdDefragStatus {
        phase: Some(DefragPhase::Pending),
        ..Default::default()
    });
    let mut verifying = snapshot("s1", Some("uid-now"), 1, "Unknown");
    if let Some(st) = verifying.status.as_mut() {
        st.conditions = vec![cond("Verified", "Unknown", "Verifying", "")];
    }
    let finished = snapshot("s2", Some("uid-now"), 1, "True");
    let got = activity(
        "demo",
        &[running, done, other],
        &[defrag],
        &[verifying, finished],
    );
    let lines: Vec<String> = got
        .iter()
        .map(|a| format!("{} {}: {}", a.kind, a.name, a.state))
        .collect();
    assert_eq!(
        lines,
        [
            "EtcdRecovery demo-recovery: Running, step ForceNewCluster",
            "EtcdDefrag demo-defrag: Pending",
            "EtcdSnapshot s1: Complete, being verified",
        ]
    );
}
