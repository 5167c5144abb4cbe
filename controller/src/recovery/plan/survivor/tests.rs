//! Choosing the survivor from live and on-disk positions.

use super::super::tests::*;
use super::*;
use crate::recovery::plan::{next, Facts, PodFacts, Source};

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

/// The plan's candidate `name`.
fn candidate(plan: &RecoveryPlan, name: &str) -> RecoveryCandidate {
    let found = plan.candidates.iter().find(|c| c.name == name);
    found
        .cloned()
        .unwrap_or_else(|| panic!("no candidate {name} in {plan:?}"))
}

/// The message of a wait with reason `expected`.
fn waited_with(expected: &str, next: Next) -> String {
    match next {
        Next::Wait { reason, message } => {
            assert_eq!(reason, expected, "{message}");
            message
        }
        other => panic!("expected a wait ({expected}), got {other:?}"),
    }
}

fn waited(next: Next) -> String {
    waited_with(reason::WAITING_FOR_SURVIVOR, next)
}

/// The message of a failure before anything was changed.
fn refused(next: Next) -> String {
    let Next::Fail { reason, message } = next else {
        panic!("expected a failure, got {next:?}")
    };
    assert_eq!(reason, reason::RECOVERY_NOT_POSSIBLE, "{message}");
    message
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
    let b = candidate(&plan, "b");
    assert_eq!((b.raft_term, b.raft_index), (Some(4), Some(130)));
    assert!(
        b.note.unwrap_or_default().contains("from its data dir"),
        "the plan says where the figures came from"
    );
    let a = candidate(&plan, "a");
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
    // A higher commit index wins over a higher term: `--force-new-cluster` keeps the entries up
    // to the commit index, and committed prefixes never diverge, so b holds everything a does.
    let f = facts(vec![
        stopped("a", disk(1, 5, 50)),
        running("b", etcd(2, 4, 100, 0, 3)),
    ]);
    assert_eq!(planned(next(&f)).member.as_deref(), Some("b"));
}

#[test]
fn the_highest_commit_index_wins_then_the_term_then_a_running_member() {
    let f = facts(vec![
        running("a", etcd(1, 4, 100, 0, 3)),
        stopped("b", disk(2, 5, 100)),
        running("c", etcd(3, 6, 90, 0, 3)),
    ]);
    let plan = planned(next(&f));
    assert_eq!(
        plan.member.as_deref(),
        Some("b"),
        "commit index 100 beats c's 90 at a higher term; on a tie the term beats a running member"
    );
    assert_eq!((plan.raft_term, plan.raft_index), (Some(5), Some(100)));
    let lost = plan.lost.unwrap_or_default();
    assert!(!lost.contains("ahead"), "nobody holds more than b: {lost}");
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

/// A member whose etcd does not run and whose data dir could not be read.
fn unreadable(name: &str, why: &str) -> MemberFacts {
    stopped(name, Some(PositionRead::Failed(why.into())))
}

#[test]
fn a_failed_read_stops_the_choice_naming_the_member_its_error_and_the_fix() {
    let f = facts(vec![
        running("a", etcd(1, 4, 100, 0, 3)),
        unreadable("b", "no WAL file under /var/lib/etcd/member/wal"),
    ]);
    // b may hold the most data: no survivor is chosen.
    let message = waited_with(reason::POSITION_READ_FAILED, next(&f));
    for part in [
        "b: its data dir cannot be read: no WAL file under /var/lib/etcd/member/wal",
        "spec.source.survivor.member",
        "the data of b is discarded",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    // Nobody readable at all: the same.
    let f = facts(vec![unreadable("b", "CRC mismatch"), lost("c")]);
    let message = waited_with(reason::POSITION_READ_FAILED, next(&f));
    assert!(
        message.contains("b: its data dir cannot be read: CRC mismatch"),
        "{message}"
    );
}

#[test]
fn with_a_survivor_named_an_unreadable_member_is_discarded_as_the_plan_says() {
    let mut f = facts(vec![
        running("a", etcd(1, 4, 100, 0, 3)),
        unreadable("b", "no WAL file under /var/lib/etcd/member/wal"),
    ]);
    f.source = Source::Survivor {
        member: Some("a".into()),
    };
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("a"));
    assert_eq!(plan.discarded_members, vec!["b"]);
    let b = candidate(&plan, "b");
    assert_eq!((b.raft_term, b.raft_index), (None, None));
    assert!(b.note.unwrap_or_default().contains("no WAL file"));
}

fn learner(e: Option<EtcdFacts>) -> Option<EtcdFacts> {
    e.map(|e| EtcdFacts {
        is_learner: true,
        ..e
    })
}

fn being_deleted(m: MemberFacts) -> MemberFacts {
    MemberFacts {
        deleting: true,
        ..m
    }
}

fn named(survivor: &str, members: Vec<MemberFacts>) -> Facts {
    let mut f = facts(members);
    f.source = Source::Survivor {
        member: Some(survivor.into()),
    };
    f
}

#[test]
fn a_learner_is_never_chosen_even_with_the_highest_commit_index() {
    let f = facts(vec![
        running("a", etcd(1, 4, 90, 0, 3)),
        running("b", learner(etcd(2, 4, 100, 0, 3))),
    ]);
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("a"));
    let b = candidate(&plan, "b");
    assert!(b
        .note
        .unwrap_or_default()
        .contains("not a candidate: it is a learner"));
    let said = plan.lost.unwrap_or_default();
    assert!(
        said.contains("b is at commit index 100 (term 4, revision 200), ahead of the survivor"),
        "{said}"
    );
    // The only member with a position is a learner: wait, saying so.
    let message = waited(next(&facts(vec![
        running("b", learner(etcd(2, 4, 100, 0, 3))),
        lost("c"),
    ])));
    assert!(message.contains("b: it is a learner"), "{message}");
}

#[test]
fn a_named_learner_is_refused() {
    let message = refused(next(&named(
        "b",
        vec![
            running("a", etcd(1, 4, 90, 0, 3)),
            running("b", learner(etcd(2, 4, 100, 0, 3))),
        ],
    )));
    for part in ["member b", "learner", "--force-new-cluster"] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
}

#[test]
fn a_member_being_deleted_is_never_chosen() {
    let f = facts(vec![
        running("a", etcd(1, 4, 90, 0, 3)),
        being_deleted(running("b", etcd(2, 4, 100, 0, 3))),
        being_deleted(stopped("c", disk(3, 4, 120))),
    ]);
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("a"));
    let lost = plan.lost.unwrap_or_default();
    assert!(
        lost.contains("c is at commit index 120") && lost.contains("being deleted"),
        "{lost}"
    );
    let message = refused(next(&named(
        "b",
        vec![
            running("a", etcd(1, 4, 90, 0, 3)),
            being_deleted(running("b", etcd(2, 4, 100, 0, 3))),
        ],
    )));
    for part in ["member b", "being deleted"] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    // Named while it has no position yet: refused too (a member being deleted is not read).
    refused(next(&named(
        "b",
        vec![
            running("a", etcd(1, 4, 90, 0, 3)),
            being_deleted(stopped("b", None)),
        ],
    )));
}

#[test]
fn a_named_survivor_is_behind_only_when_another_has_a_higher_commit_index() {
    // (a's term and commit index, b's, whether the plan says b is ahead)
    for (a, b, ahead) in [((5, 50), (4, 100), true), ((4, 100), (5, 50), false)] {
        let members = vec![
            running("a", etcd(1, a.0, a.1, 0, 3)),
            running("b", etcd(2, b.0, b.1, 0, 3)),
        ];
        let lost = planned(next(&named("a", members))).lost.unwrap_or_default();
        let says = format!(
            "b is at commit index {} (term {}, revision {}), ahead of the survivor",
            b.1,
            b.0,
            b.1 * 2
        );
        assert_eq!(lost.contains(&says), ahead, "{lost}");
        assert_eq!(
            lost.contains("ahead"),
            ahead,
            "a higher term is no more data: {lost}"
        );
    }
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
        .contains("a is at commit index 100 (term 4, revision 200), ahead of the survivor"));
    let message = refused(next(&named(unreadable("b", "bad"))));
    assert!(message.contains("cannot be read: bad"), "{message}");
}
