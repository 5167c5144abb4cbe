use super::*;

/// Member `id`'s answer: following `leader` at `term`, at raft index `index`.
fn answer(id: u64, leader: u64, term: u64, index: u64) -> MemberStatus {
    MemberStatus {
        member_id: id,
        leader,
        raft_term: term,
        raft_index: index,
        db_size: 20_480,
        db_size_in_use: 16_384,
        version: "3.6.5".to_string(),
        ..MemberStatus::default()
    }
}

fn fact<'a>(name: &'a str, answer: Option<&'a MemberStatus>) -> MemberFacts<'a> {
    MemberFacts {
        name,
        recorded_id: None,
        pod_ready: true,
        answer,
    }
}

fn roles(r: &Roster) -> Vec<(&str, Option<MemberRole>)> {
    r.members
        .iter()
        .map(|m| (m.name.as_str(), m.role))
        .collect()
}

#[test]
fn the_member_leading_at_the_highest_term_is_leader_and_the_others_follow() {
    let (a, b, c) = (
        answer(1, 2, 4, 90),
        answer(2, 2, 4, 90),
        answer(3, 2, 4, 89),
    );
    let r = roster(
        &[
            fact("c-b", Some(&b)),
            fact("c-a", Some(&a)),
            fact("c-c", Some(&c)),
        ],
        Some(&[]),
        &[],
    );
    assert_eq!(r.leader.as_deref(), Some("c-b"));
    assert_eq!(
        roles(&r),
        [
            ("c-a", Some(MemberRole::Follower)),
            ("c-b", Some(MemberRole::Leader)),
            ("c-c", Some(MemberRole::Follower)),
        ],
        "sorted by name"
    );
    let b = &r.members[1];
    assert_eq!(b.member_id.as_deref(), Some("0000000000000002"));
    assert_eq!(b.version.as_deref(), Some("3.6.5"));
    assert_eq!((b.db_size, b.db_size_in_use), (Some(20_480), Some(16_384)));
    assert_eq!((b.raft_index, b.raft_term), (Some(90), Some(4)));
    assert!(b.ready && b.alarms.is_empty());
}

#[test]
fn a_deposed_leader_cut_off_at_an_older_term_is_not_the_leader() {
    // Member 1 still believes it leads at term 3; the others elected member 2 at term 4.
    let (a, b, c) = (
        answer(1, 1, 3, 50),
        answer(2, 2, 4, 60),
        answer(3, 2, 4, 60),
    );
    let r = roster(
        &[
            fact("c-a", Some(&a)),
            fact("c-b", Some(&b)),
            fact("c-c", Some(&c)),
        ],
        Some(&[]),
        &[],
    );
    assert_eq!(r.leader.as_deref(), Some("c-b"));
    assert_eq!(r.members[0].role, Some(MemberRole::Follower));
}

#[test]
fn the_leader_is_known_from_its_followers_when_it_does_not_answer() {
    let (b, c) = (answer(2, 1, 4, 60), answer(3, 1, 4, 60));
    let mut a = fact("c-a", None);
    a.recorded_id = Some("0000000000000001");
    let r = roster(
        &[a, fact("c-b", Some(&b)), fact("c-c", Some(&c))],
        Some(&[]),
        &[],
    );
    // The silent member keeps its name and ID, and nothing else is claimed for it.
    assert_eq!(
        r.members[0],
        ClusterMemberStatus {
            name: "c-a".to_string(),
            member_id: Some("0000000000000001".to_string()),
            ..ClusterMemberStatus::default()
        }
    );
    assert_eq!(r.leader.as_deref(), Some("c-a"), "as its followers say");
    assert_eq!(r.members[1].role, Some(MemberRole::Follower));
}

#[test]
fn no_leader_during_an_election() {
    let (a, b) = (answer(1, 0, 5, 70), answer(2, 0, 5, 70));
    let r = roster(
        &[fact("c-a", Some(&a)), fact("c-b", Some(&b))],
        Some(&[]),
        &[],
    );
    assert_eq!(r.leader, None);
    assert!(r
        .members
        .iter()
        .all(|m| m.role == Some(MemberRole::Follower)));
}

#[test]
fn a_learner_is_a_learner_whoever_it_follows() {
    let a = answer(1, 1, 2, 10);
    let mut l = answer(9, 1, 2, 4);
    l.is_learner = true;
    let r = roster(
        &[fact("c-a", Some(&a)), fact("c-l", Some(&l))],
        Some(&[]),
        &[],
    );
    assert_eq!(
        roles(&r),
        [
            ("c-a", Some(MemberRole::Leader)),
            ("c-l", Some(MemberRole::Learner))
        ]
    );
}

#[test]
fn a_member_whose_pod_is_not_ready_is_not_ready_even_when_it_answers() {
    let a = answer(1, 1, 2, 10);
    let mut f = fact("c-a", Some(&a));
    f.pod_ready = false;
    let r = roster(&[f], Some(&[]), &[]);
    assert!(!r.members[0].ready);
    assert_eq!(r.members[0].role, Some(MemberRole::Leader));
}

#[test]
fn alarms_are_listed_on_their_member_and_kept_when_the_list_cannot_be_read() {
    let (a, b) = (answer(1, 1, 2, 10), answer(2, 1, 2, 10));
    let facts = [fact("c-a", Some(&a)), fact("c-b", Some(&b))];
    let raised = [
        (2, Alarm::NoSpace),
        (2, Alarm::Corrupt),
        (2, Alarm::NoSpace),
    ];
    let r = roster(&facts, Some(&raised), &[]);
    assert!(r.members[0].alarms.is_empty());
    assert_eq!(r.members[1].alarms, ["NOSPACE", "CORRUPT"]);
    let unread = roster(&facts, None, &r.members);
    assert_eq!(unread.members[1].alarms, ["NOSPACE", "CORRUPT"]);
    let cleared = roster(&facts, Some(&[]), &r.members);
    assert!(cleared.members[1].alarms.is_empty());
}

/// A status whose roster says member `c-a` leads at raft index `index`.
fn status_at(index: u64) -> EtcdClusterStatus {
    let a = answer(1, 1, 2, index);
    publishable(
        None,
        EtcdClusterStatus::default(),
        roster(&[fact("c-a", Some(&a))], Some(&[]), &[]),
        true,
    )
}

#[test]
fn a_moved_raft_index_alone_is_not_written_until_the_counters_are_due() {
    let prior = status_at(100);
    let a = answer(1, 1, 2, 5_000);
    let fresh = roster(&[fact("c-a", Some(&a))], Some(&[]), &prior.members);
    let held = publishable(
        Some(&prior),
        EtcdClusterStatus::default(),
        fresh.clone(),
        false,
    );
    assert_eq!(held, prior, "unchanged: no write");
    let due = publishable(Some(&prior), EtcdClusterStatus::default(), fresh, true);
    assert_eq!(due.members[0].raft_index, Some(5_000));
}

#[test]
fn an_idle_clusters_creeping_raft_index_is_never_written_on_its_own() {
    let prior = status_at(100);
    let a = answer(1, 1, 2, 100 + 999);
    let fresh = roster(&[fact("c-a", Some(&a))], Some(&[]), &prior.members);
    assert_eq!(
        publishable(Some(&prior), EtcdClusterStatus::default(), fresh, true),
        prior,
        "due, but fewer than INDEX_STEP entries: no write"
    );
}

#[test]
fn a_database_grown_by_a_mebibyte_is_written_once_due() {
    let prior = status_at(100);
    let mut a = answer(1, 1, 2, 100);
    a.db_size += SIZE_STEP;
    let fresh = roster(&[fact("c-a", Some(&a))], Some(&[]), &prior.members);
    let due = publishable(Some(&prior), EtcdClusterStatus::default(), fresh, true);
    assert_eq!(due.members[0].db_size, Some(20_480 + SIZE_STEP));
}

#[test]
fn any_other_change_writes_the_fresh_counters_with_it() {
    let prior = status_at(100);
    let a = answer(1, 1, 2, 250);
    let fresh = roster(&[fact("c-a", Some(&a))], Some(&[]), &prior.members);
    // Not due, and a small move: carried along all the same.
    let next = EtcdClusterStatus {
        ready_members: 1,
        ..EtcdClusterStatus::default()
    };
    let written = publishable(Some(&prior), next, fresh, false);
    assert_eq!(written.ready_members, 1);
    assert_eq!(written.members[0].raft_index, Some(250));
}

#[test]
fn a_new_leader_is_written_at_once() {
    let prior = status_at(100);
    let (a, b) = (answer(1, 2, 3, 101), answer(2, 2, 3, 101));
    let fresh = roster(
        &[fact("c-a", Some(&a)), fact("c-b", Some(&b))],
        Some(&[]),
        &prior.members,
    );
    let written = publishable(Some(&prior), EtcdClusterStatus::default(), fresh, false);
    assert_eq!(written.leader.as_deref(), Some("c-b"));
    assert_eq!(written.members[0].role, Some(MemberRole::Follower));
}

#[test]
fn an_idle_cluster_writes_nothing_whether_or_not_the_counters_are_due() {
    let prior = status_at(100);
    let a = answer(1, 1, 2, 100);
    for due in [false, true] {
        let fresh = roster(&[fact("c-a", Some(&a))], Some(&[]), &prior.members);
        assert_eq!(
            publishable(Some(&prior), EtcdClusterStatus::default(), fresh, due),
            prior
        );
    }
}
