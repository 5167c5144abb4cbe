//! Choosing the survivor from live and on-disk positions.

use super::super::tests::*;
use super::*;
use crate::recovery::plan::{next, PodFacts, Source};

/// A member whose Pod is gone but whose data PVC stays, its data dir read (`read`).
fn stopped(name: &str, read: Option<PositionRead>) -> MemberFacts {
    MemberFacts {
        claim: true,
        on_disk: read,
        ..lost(name)
    }
}

fn disk(id: u64, term: u64, commit: u64) -> Option<PositionRead> {
    Some(PositionRead::Read(DiskPosition {
        member_id: id,
        cluster_id: CLUSTER_ID,
        term,
        commit,
        last_term: term,
        last_index: commit + 1,
        files: vec!["0000000000000000-0000000000000000.wal".into()],
        torn_tail: None,
    }))
}

fn waited(next: Next) -> String {
    match next {
        Next::Wait { reason, message } => {
            assert_eq!(reason, reason::WAITING_FOR_SURVIVOR, "{message}");
            message
        }
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[test]
fn a_stopped_member_ahead_of_the_live_one_is_the_survivor() {
    let f = facts(vec![
        running("a", etcd(1, 4, 100, 0, 3)),
        stopped("b", disk(2, 4, 130)),
        lost("c"),
    ]);
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("b"));
    assert_eq!((plan.raft_term, plan.raft_index), (Some(4), Some(130)));
    assert_eq!(plan.member_id.as_deref(), Some("0000000000000002"));
    assert_eq!(plan.revision, None, "a data dir's revision is not known");
    let b = plan
        .candidates
        .iter()
        .find(|c| c.name == "b")
        .cloned()
        .unwrap();
    assert_eq!((b.raft_term, b.raft_index), (Some(4), Some(130)));
    assert!(
        b.note.unwrap_or_default().contains("from its data dir"),
        "the plan says where the figures came from"
    );
    let a = plan
        .candidates
        .iter()
        .find(|c| c.name == "a")
        .cloned()
        .unwrap();
    assert!(a.note.unwrap_or_default().contains("running etcd"));
    assert!(plan
        .lost
        .unwrap_or_default()
        .contains("read from its data dir"));
}

#[test]
fn a_live_member_ahead_of_a_stopped_one_is_the_survivor() {
    let f = facts(vec![
        stopped("a", disk(1, 4, 90)),
        running("b", etcd(2, 4, 100, 0, 3)),
    ]);
    assert_eq!(planned(next(&f)).member.as_deref(), Some("b"));
    // A higher term wins over a higher index.
    let f = facts(vec![
        stopped("a", disk(1, 5, 50)),
        running("b", etcd(2, 4, 100, 0, 3)),
    ]);
    assert_eq!(planned(next(&f)).member.as_deref(), Some("a"));
}

#[test]
fn on_a_tie_the_live_member_is_preferred() {
    for order in [["a", "b"], ["b", "a"]] {
        let members = order
            .iter()
            .map(|n| match *n {
                "a" => stopped("a", disk(1, 4, 100)),
                _ => running("b", etcd(2, 4, 100, 0, 3)),
            })
            .collect();
        assert_eq!(planned(next(&facts(members))).member.as_deref(), Some("b"));
    }
}

#[test]
fn a_member_holding_data_whose_etcd_does_not_run_gets_a_position_job_first() {
    let f = facts(vec![
        running("a", etcd(1, 4, 100, 0, 3)),
        stopped("b", None),
        stopped("c", None),
        lost("d"),
    ]);
    assert_eq!(
        next(&f),
        Next::Act(Work::ReadPositions(vec!["b".into(), "c".into()])),
        "only the members with a PVC and no etcd are read; d holds no data"
    );
    // A Pod that is not Ready and whose etcd does not answer: read too.
    let mut crashing = running("b", None);
    crashing.claim = true;
    let f = facts(vec![running("a", etcd(1, 4, 100, 0, 3)), crashing]);
    assert_eq!(next(&f), Next::Act(Work::ReadPositions(vec!["b".into()])));
}

#[test]
fn the_plan_waits_for_every_read_and_never_picks_from_a_partial_set() {
    let f = facts(vec![
        running("a", etcd(1, 4, 100, 0, 3)),
        stopped("b", Some(PositionRead::Reading)),
    ]);
    let message = waited(next(&f));
    assert!(message.contains("b (its position Job runs)"), "{message}");
    // A Pod still going: not read from under it yet.
    let mut going = running("b", None);
    going.claim = true;
    going.pod = Some(PodFacts {
        deleting: true,
        ..going.pod.unwrap_or_default()
    });
    let message = waited(next(&facts(vec![
        running("a", etcd(1, 4, 100, 0, 3)),
        going,
    ])));
    assert!(
        message.contains("b (its Pod is being deleted)"),
        "{message}"
    );
}

#[test]
fn a_ready_pod_whose_etcd_does_not_answer_is_not_read_from_under_it() {
    let mut busy = running("b", None);
    busy.claim = true;
    busy.pod = Some(PodFacts {
        ready: true,
        ..busy.pod.unwrap_or_default()
    });
    assert!(!needs_disk_read(&busy));
    let f = facts(vec![running("a", etcd(1, 4, 100, 0, 3)), busy]);
    assert_eq!(planned(next(&f)).member.as_deref(), Some("a"));
}

#[test]
fn a_failed_read_makes_a_non_candidate_with_its_reason_in_the_plan() {
    let f = facts(vec![
        running("a", etcd(1, 4, 100, 0, 3)),
        stopped(
            "b",
            Some(PositionRead::Failed(
                "no WAL file under /var/lib/etcd/member/wal".into(),
            )),
        ),
    ]);
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("a"));
    let b = plan
        .candidates
        .iter()
        .find(|c| c.name == "b")
        .cloned()
        .unwrap();
    assert_eq!((b.raft_term, b.raft_index), (None, None));
    assert!(b.note.unwrap_or_default().contains("no WAL file"));
    // Nobody readable at all: wait, saying why each is not a candidate.
    let f = facts(vec![stopped(
        "b",
        Some(PositionRead::Failed("CRC mismatch".into())),
    )]);
    let message = waited(next(&f));
    assert!(
        message.contains("b: its data dir cannot be read: CRC mismatch"),
        "{message}"
    );
}

#[test]
fn a_data_dir_of_another_cluster_is_not_a_survivor() {
    let Some(PositionRead::Read(mut other)) = disk(2, 9, 999) else {
        unreachable!()
    };
    other.cluster_id = 0xdef;
    let f = facts(vec![
        running("a", etcd(1, 2, 5, 0, 3)),
        stopped("b", Some(PositionRead::Read(other))),
    ]);
    assert_eq!(planned(next(&f)).member.as_deref(), Some("a"));
}

#[test]
fn a_named_stopped_member_is_read_then_taken_or_refused() {
    let named = |m: MemberFacts| {
        let mut f = facts(vec![running("a", etcd(1, 4, 100, 0, 3)), m]);
        f.source = Source::Survivor {
            member: Some("b".into()),
        };
        f
    };
    assert_eq!(
        next(&named(stopped("b", None))),
        Next::Act(Work::ReadPositions(vec!["b".into()]))
    );
    waited(next(&named(stopped("b", Some(PositionRead::Reading)))));
    let plan = planned(next(&named(stopped("b", disk(2, 4, 90)))));
    assert_eq!(plan.member.as_deref(), Some("b"));
    assert!(plan
        .lost
        .unwrap_or_default()
        .contains("a is at term 4 index 100 (revision 200), ahead of the survivor"));
    match next(&named(stopped(
        "b",
        Some(PositionRead::Failed("bad".into())),
    ))) {
        Next::Fail { reason, message } => {
            assert_eq!(reason, reason::RECOVERY_NOT_POSSIBLE);
            assert!(message.contains("cannot be read: bad"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
