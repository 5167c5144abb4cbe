//! Batched learners: every missing member joins at once when every member's etcd accepts that
//! many learners (`--max-learners`), one at a time otherwise; each crash window of the batch is
//! a state the planner finishes without a ghost or a duplicate.

use super::*;

/// A member whose etcd runs with the operator's `--max-learners`.
fn flagged(mut v: MemberView) -> MemberView {
    v.max_learners = crate::builders::pod::MAX_LEARNERS;
    v
}

/// A created member not yet given its initial cluster (no Pod).
fn pending(name: &str, created: i64) -> MemberView {
    let mut v = flagged(m(name, created));
    v.pending = true;
    v.voter = false;
    v.pod = None;
    v.recorded_pod_uid = None;
    v
}

/// A member given its initial cluster whose etcd has not started yet (no Pod Ready).
fn joining(name: &str, created: i64) -> MemberView {
    let mut v = flagged(m(name, created));
    v.voter = false;
    v.pod = None;
    v.recorded_pod_uid = None;
    v
}

/// etcd's entry for a learner added but not started: no name yet.
fn unstarted(id: u64, name: &str) -> EtcdMemberInfo {
    EtcdMemberInfo {
        id,
        name: String::new(),
        peer_urls: vec![url(name)],
        is_learner: true,
    }
}

fn joiner(name: &str) -> Joiner {
    Joiner {
        member: name.into(),
        peer_url: url(name),
    }
}

fn formed(replicas: i32) -> EtcdCluster {
    cluster(replicas, locked(replicas, Some(0xabc), Some(700)))
}

#[test]
fn a_new_cluster_adds_every_missing_member_as_a_learner_at_once_after_the_seed_latched() {
    let c = formed(5);
    let p = run(
        &c,
        vec![flagged(m("c-a", 1))],
        etcd(vec![e(1, "c-a", false)]),
    );
    assert_eq!(
        p.action,
        Action::AddLearners {
            create: 4,
            add: vec![],
            complete: None,
        }
    );
}

#[test]
fn a_scale_up_adds_every_new_member_at_once_only_while_every_member_is_a_ready_voter() {
    let c = formed(5);
    let three = || {
        vec![
            flagged(m("c-a", 1)),
            flagged(m("c-b", 2)),
            flagged(m("c-c", 3)),
        ]
    };
    let p = run(&c, three(), three_voters());
    assert_eq!(
        p.action,
        Action::AddLearners {
            create: 2,
            add: vec![],
            complete: None,
        }
    );

    let mut members = three();
    members[1] = unready(members[1].clone());
    let p = run(&c, members, three_voters());
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
}

#[test]
fn any_member_without_the_flag_makes_the_scale_up_one_member_at_a_time() {
    // c-b's Pod was built before the operator set --max-learners (or by the reference
    // operator): etcd's default of one learner applies on it, so it rules the cluster.
    let c = formed(5);
    let members = vec![flagged(m("c-a", 1)), m("c-b", 2), flagged(m("c-c", 3))];
    let p = run(&c, members, three_voters());
    assert_eq!(p.action, Action::CreateMember);
}

#[test]
fn a_batch_never_holds_more_learners_than_the_lowest_limit() {
    let c = formed(5);
    let mut a = m("c-a", 1);
    a.max_learners = 2;
    let p = run(&c, vec![a], etcd(vec![e(1, "c-a", false)]));
    assert_eq!(
        p.action,
        Action::AddLearners {
            create: 2,
            add: vec![],
            complete: None,
        }
    );
}

#[test]
fn crash_after_the_members_were_created_adds_them_all_before_completing_any() {
    let c = formed(3);
    let members = vec![flagged(m("c-a", 1)), pending("c-b", 2), pending("c-c", 3)];
    let p = run(&c, members, etcd(vec![e(1, "c-a", false)]));
    assert_eq!(
        p.action,
        Action::AddLearners {
            create: 0,
            add: vec![joiner("c-b"), joiner("c-c")],
            complete: None,
        }
    );
}

#[test]
fn crash_between_two_adds_adds_the_rest_then_completes_both() {
    let c = formed(3);
    let members = vec![flagged(m("c-a", 1)), pending("c-b", 2), pending("c-c", 3)];
    let p = run(
        &c,
        members,
        etcd(vec![e(1, "c-a", false), unstarted(2, "c-b")]),
    );
    assert_eq!(
        p.action,
        Action::AddLearners {
            create: 0,
            add: vec![joiner("c-c")],
            complete: Some("c-b".into()),
        }
    );
}

#[test]
fn members_are_completed_one_by_one_each_once_the_previous_one_has_started() {
    // Both added (a crash after the adds, or the step itself): one is given its list now.
    let c = formed(3);
    let members = vec![flagged(m("c-a", 1)), pending("c-b", 2), pending("c-c", 3)];
    let listed = || {
        etcd(vec![
            e(1, "c-a", false),
            unstarted(2, "c-b"),
            unstarted(3, "c-c"),
        ])
    };
    let three = format!("c-a={},c-b={},c-c={}", url("c-a"), url("c-b"), url("c-c"));
    let p = run(&c, members, listed());
    assert_eq!(
        p.action,
        Action::CompletePending {
            member: "c-b".into(),
            peer_url: url("c-b"),
            already_added: true,
            initial_cluster_after_add: three.clone(),
        }
    );
    // c-b's etcd has not started: c-c waits (two joiners starting together would wait on each
    // other's bootstrap), and the cluster is looked at again soon.
    let members = vec![flagged(m("c-a", 1)), joining("c-b", 2), pending("c-c", 3)];
    let p = run(&c, members, listed());
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
    assert_eq!(p.facts.joining.as_deref(), Some("c-b"));
    // c-b has started (named in etcd): c-c gets the same list.
    let members = vec![flagged(m("c-a", 1)), joining("c-b", 2), pending("c-c", 3)];
    let listed = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", true),
        unstarted(3, "c-c"),
    ]);
    let p = run(&c, members, listed);
    assert_eq!(
        p.action,
        Action::CompletePending {
            member: "c-c".into(),
            peer_url: url("c-c"),
            already_added: true,
            initial_cluster_after_add: three,
        }
    );
    assert_eq!(p.facts.joining, None);
}

#[test]
fn crash_after_creating_only_the_first_member_adds_it_and_creates_the_rest_in_the_same_step() {
    let c = formed(5);
    let members = vec![
        flagged(m("c-a", 1)),
        flagged(m("c-b", 2)),
        flagged(m("c-c", 3)),
        pending("c-d", 4),
    ];
    let p = run(&c, members, three_voters());
    assert_eq!(
        p.action,
        Action::AddLearners {
            create: 1,
            add: vec![joiner("c-d")],
            complete: None,
        }
    );
}

#[test]
fn no_learner_is_added_while_a_completed_member_has_not_started() {
    // c-b was given its initial cluster (etcd's list then) and its etcd has not started: adding
    // c-c now would make its first start find a list it was not given.
    let c = formed(3);
    let members = vec![flagged(m("c-a", 1)), joining("c-b", 2), pending("c-c", 3)];
    let p = run(
        &c,
        members,
        etcd(vec![e(1, "c-a", false), unstarted(2, "c-b")]),
    );
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);

    // Once it has started (named in etcd), c-c is added: c-b's first start is behind it.
    let mut b = flagged(m("c-b", 2));
    b.voter = false;
    let members = vec![flagged(m("c-a", 1)), b, pending("c-c", 3)];
    let p = run(
        &c,
        members,
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    assert!(
        matches!(&p.action, Action::CompletePending { member, already_added: false, .. } if member == "c-c"),
        "{:?}",
        p.action
    );
}

#[test]
fn pending_members_beyond_the_limit_wait_for_a_promotion() {
    // One learner's room left: c-c is added and completed, c-d waits.
    let c = formed(4);
    let mut a = m("c-a", 1);
    a.max_learners = 2;
    let mut b = flagged(m("c-b", 2));
    b.voter = false;
    let members = vec![a, b, pending("c-c", 3), pending("c-d", 4)];
    let p = run(
        &c,
        members,
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    assert_eq!(
        p.action,
        Action::CompletePending {
            member: "c-c".into(),
            peer_url: url("c-c"),
            already_added: false,
            initial_cluster_after_add: format!(
                "c-a={},c-b={},c-c={}",
                url("c-a"),
                url("c-b"),
                url("c-c")
            ),
        }
    );
}

#[test]
fn learners_are_promoted_one_after_another_as_each_is_ready() {
    let c = formed(3);
    let learner = |name: &str, created| {
        let mut v = flagged(m(name, created));
        v.voter = false;
        v
    };
    let members = vec![
        flagged(m("c-a", 1)),
        unready(learner("c-b", 2)),
        learner("c-c", 3),
    ];
    let listed = vec![e(1, "c-a", false), e(2, "c-b", true), e(3, "c-c", true)];
    let p = run(&c, members.clone(), etcd(listed.clone()));
    assert_eq!(
        p.action,
        Action::Promote {
            member: "c-c".into(),
            member_id: 3
        }
    );
    let mut listed = listed;
    listed[2].is_learner = false;
    let p = run(&c, members, etcd(listed));
    assert!(
        !matches!(p.action, Action::Promote { .. }),
        "a learner whose Pod is not Ready is not promoted: {:?}",
        p.action
    );
}

#[test]
fn the_initial_cluster_of_a_batch_lists_etcds_members_and_every_joiner() {
    let s = initial_cluster_of(
        &[e(1, "c-a", false), unstarted(2, "c-b")],
        &[joiner("c-c"), joiner("c-d")],
    );
    assert_eq!(
        s,
        format!(
            "c-a={},c-b={},c-c={},c-d={}",
            url("c-a"),
            url("c-b"),
            url("c-c"),
            url("c-d")
        )
    );
}
