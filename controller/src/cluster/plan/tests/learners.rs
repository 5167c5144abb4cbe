//! Several learners at once: when every member's etcd accepts that many (`--max-learners`), the
//! next member joins as soon as the previous one's etcd has started, and the learners are
//! promoted after the last one joined; one at a time otherwise. Each crash window is a state the
//! planner finishes without a ghost or a duplicate.

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

/// A learner given its initial cluster (no Pod Ready yet).
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

fn formed(replicas: i32) -> EtcdCluster {
    cluster(replicas, locked(replicas, Some(0xabc), Some(700)))
}

/// A learner whose etcd has started (named in etcd) and whose Pod is Ready.
fn learner(name: &str, created: i64) -> MemberView {
    let mut v = flagged(m(name, created));
    v.voter = false;
    v
}

#[test]
fn the_next_member_joins_as_soon_as_the_previous_learner_started_before_any_promotion() {
    let c = formed(3);
    let p = run(
        &c,
        vec![flagged(m("c-a", 1))],
        etcd(vec![e(1, "c-a", false)]),
    );
    assert_eq!(p.action, Action::CreateMember);
    // c-b is a started, Ready learner: c-c joins first (a promotion now would make etcd's
    // 5-second connection rule apply to the next add).
    let p = run(
        &c,
        vec![flagged(m("c-a", 1)), learner("c-b", 2)],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    assert_eq!(p.action, Action::CreateMember);
}

#[test]
fn nothing_is_added_or_promoted_while_a_completed_member_has_not_started() {
    let c = formed(3);
    let p = run(
        &c,
        vec![flagged(m("c-a", 1)), joining("c-b", 2)],
        etcd(vec![e(1, "c-a", false), unstarted(2, "c-b")]),
    );
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
    assert_eq!(p.facts.joining.as_deref(), Some("c-b"));
    // A crash left c-c pending: it is neither added nor completed before c-b has started.
    let p = run(
        &c,
        vec![flagged(m("c-a", 1)), joining("c-b", 2), pending("c-c", 3)],
        etcd(vec![e(1, "c-a", false), unstarted(2, "c-b")]),
    );
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
}

#[test]
fn once_every_member_joined_the_learners_are_promoted_one_after_another() {
    let c = formed(3);
    let members = vec![flagged(m("c-a", 1)), learner("c-b", 2), learner("c-c", 3)];
    let mut listed = vec![e(1, "c-a", false), e(2, "c-b", true), e(3, "c-c", true)];
    let p = run(&c, members.clone(), etcd(listed.clone()));
    assert_eq!(
        p.action,
        Action::Promote {
            member: "c-b".into(),
            member_id: 2
        }
    );
    listed[1].is_learner = false;
    let p = run(&c, members.clone(), etcd(listed.clone()));
    assert_eq!(
        p.action,
        Action::Promote {
            member: "c-c".into(),
            member_id: 3
        }
    );
    // A learner whose Pod is not Ready waits; nothing else is promoted in its place.
    let members = vec![
        flagged(m("c-a", 1)),
        learner("c-b", 2),
        unready(learner("c-c", 3)),
    ];
    let p = run(&c, members, etcd(listed));
    assert!(
        !matches!(p.action, Action::Promote { .. }),
        "{:?}",
        p.action
    );
}

#[test]
fn any_member_without_the_flag_makes_the_joining_one_member_at_a_time() {
    // c-a's Pod was built before the operator set --max-learners (or by the reference
    // operator): etcd's default of one learner applies on it, so it rules the cluster.
    let c = formed(3);
    let p = run(
        &c,
        vec![m("c-a", 1), learner("c-b", 2)],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    assert_eq!(
        p.action,
        Action::Promote {
            member: "c-b".into(),
            member_id: 2
        }
    );
    // A pending member (a crash) is not added while the one learner etcd accepts is there.
    let p = run(
        &c,
        vec![m("c-a", 1), unready(learner("c-b", 2)), pending("c-c", 3)],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
}

#[test]
fn learners_never_outnumber_the_lowest_limit() {
    let c = formed(5);
    let mut a = flagged(m("c-a", 1));
    a.max_learners = 2;
    let members = vec![a, learner("c-b", 2), learner("c-c", 3)];
    let listed = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", true),
        e(3, "c-c", true),
    ]);
    let p = run(&c, members, listed);
    assert!(matches!(p.action, Action::Promote { .. }), "{:?}", p.action);
}

#[test]
fn a_scale_up_of_a_serving_cluster_adds_the_next_member_while_learners_wait() {
    let c = formed(5);
    let members = vec![
        flagged(m("c-a", 1)),
        flagged(m("c-b", 2)),
        flagged(m("c-c", 3)),
        learner("c-d", 4),
    ];
    let mut listed = match three_voters() {
        EtcdView::Members { members, .. } => members,
        _ => unreachable!(),
    };
    listed.push(e(4, "c-d", true));
    let p = run(&c, members.clone(), etcd(listed.clone()));
    assert_eq!(p.action, Action::CreateMember);
    // Not while a voter is down: the learner is promoted (or waits) instead.
    let mut members = members;
    members[1] = unready(members[1].clone());
    let p = run(&c, members, etcd(listed));
    assert_ne!(p.action, Action::CreateMember);
}

#[test]
fn crash_windows_of_a_joiner_with_a_started_learner_beside_it() {
    let c = formed(3);
    // CR created, not added: added and completed.
    let members = vec![flagged(m("c-a", 1)), learner("c-b", 2), pending("c-c", 3)];
    let p = run(
        &c,
        members.clone(),
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    let three = format!("c-a={},c-b={},c-c={}", url("c-a"), url("c-b"), url("c-c"));
    assert_eq!(
        p.action,
        Action::CompletePending {
            member: "c-c".into(),
            peer_url: url("c-c"),
            already_added: false,
            initial_cluster_after_add: three.clone(),
        }
    );
    // Added, not completed: completed with etcd's list.
    let p = run(
        &c,
        members,
        etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", true),
            unstarted(3, "c-c"),
        ]),
    );
    assert_eq!(
        p.action,
        Action::CompletePending {
            member: "c-c".into(),
            peer_url: url("c-c"),
            already_added: true,
            initial_cluster_after_add: three,
        }
    );
}

#[test]
fn a_ghost_is_removed_before_the_next_member_joins() {
    let c = formed(3);
    let ghost = EtcdMemberInfo {
        id: 9,
        name: "old".into(),
        peer_urls: vec![url("old")],
        is_learner: true,
    };
    let p = run(
        &c,
        vec![flagged(m("c-a", 1)), learner("c-b", 2)],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true), ghost]),
    );
    assert!(
        matches!(p.action, Action::Promote { .. } | Action::RemoveGhost(_)),
        "{:?}",
        p.action
    );
}
