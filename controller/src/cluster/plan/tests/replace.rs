//! Replacing members whose data is out of reach for good (--replace-broken-members-after).

use super::*;

#[test]
fn a_member_unschedulable_past_the_period_is_replaced_while_the_rest_keep_quorum() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let three = |b: MemberView, c_: MemberView| vec![m("c-a", 1), b, c_];
    // Unschedulable for 60 s of a 60 s period: replaced.
    let p = run_replacing(&c, three(unschedulable("c-b", 40), m("c-c", 3)), Some(60));
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-b".into(),
            why: DeleteReason::Unschedulable
        }
    );
    // Not yet for long enough; or the feature off (or the cluster opted out): kept.
    for (since, after) in [(41, Some(60)), (0, None)] {
        let p = run_replacing(&c, three(unschedulable("c-b", since), m("c-c", 3)), after);
        assert!(
            !matches!(p.action, Action::DeleteMember { .. }),
            "{since} {after:?}: {:?}",
            p.action
        );
    }
    // A second member down: removing c-b would leave one serving voter of two, which cannot
    // commit anything; it waits.
    let mut down = m("c-c", 3);
    down.pod.as_mut().unwrap().ready = false;
    let p = run_replacing(&c, three(unschedulable("c-b", 0), down), Some(60));
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );
    // Two unschedulable: one at a time, and the second only while quorum holds without it.
    let p = run_replacing(
        &c,
        three(unschedulable("c-b", 0), unschedulable("c-c", 0)),
        Some(60),
    );
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );
}

fn replaces(p: &Plan) -> bool {
    matches!(p.action, Action::DeleteMember { .. })
}

#[test]
fn a_pod_the_template_makes_unschedulable_is_never_replaced_and_the_stall_names_the_scheduler() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    // The rolled member's new Pod asks for more cpu than any Node has; its volume's Node is
    // there and Ready (or its volume is network storage): the cause is the template, and every
    // member built from it would be unschedulable the same way. Long past the period.
    for home in [DataHome::Reachable, DataHome::Unknown] {
        let mut b = unschedulable_at("c-b", 0, NO_CPU);
        b.data_home = home.clone();
        let p = run_replacing(&c, vec![m("c-a", 1), b, m("c-c", 3)], Some(60));
        assert!(!replaces(&p), "{home:?}: {:?}", p.action);
        assert_eq!(
            p.facts.unschedulable,
            Some(("c-b".to_string(), NO_CPU.to_string())),
            "{home:?}"
        );
    }
}

#[test]
fn a_member_whose_volume_is_on_a_cordoned_node_is_not_replaced() {
    // A local-PV Node drained for maintenance: cordoned (Ready, unschedulable), the member's
    // Pod evicted and its new one pinned by the volume to that Node. The data is there and
    // comes back with the uncordon.
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut b = unschedulable_at(
        "c-b",
        0,
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) had volume node \
         affinity conflict.",
    );
    b.data_home = DataHome::Reachable;
    let p = run_replacing(&c, vec![m("c-a", 1), b, m("c-c", 3)], Some(60));
    assert!(!replaces(&p), "{:?}", p.action);
}

#[test]
fn a_member_whose_node_is_gone_is_replaced_after_the_period() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    for home in [
        DataHome::NodeGone {
            node: "node-b".into(),
        },
        DataHome::VolumeGone {
            volume: "pv-b".into(),
        },
    ] {
        let mut b = unschedulable_at("c-b", 40, "volume node affinity conflict");
        b.data_home = home.clone();
        let p = run_replacing(&c, vec![m("c-a", 1), b.clone(), m("c-c", 3)], Some(60));
        assert_eq!(
            p.action,
            Action::DeleteMember {
                member: "c-b".into(),
                why: DeleteReason::Unschedulable
            },
            "{home:?}"
        );
        // Not yet for the whole period (a Node re-registering after a reboot).
        b.pod.as_mut().unwrap().unschedulable = Some((ts(41), "conflict".into()));
        let p = run_replacing(&c, vec![m("c-a", 1), b, m("c-c", 3)], Some(60));
        assert!(!replaces(&p), "{home:?}: {:?}", p.action);
    }
}

/// A member whose Pod was evicted from Node `node-b`, NotReady since `since`, and is stuck
/// Terminating there (no kubelet confirms the deletion).
fn stuck_on_dead_node(since: i64, terminating: bool) -> MemberView {
    let mut b = m("c-b", 2);
    if let Some(p) = b.pod.as_mut() {
        p.ready = false;
        p.terminating = terminating;
    }
    b.data_home = DataHome::NodeNotReady {
        node: "node-b".into(),
        since: ts(since),
    };
    b
}

#[test]
fn a_member_on_a_node_notready_past_the_period_with_its_pod_terminating_is_replaced() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let p = run_replacing(
        &c,
        vec![m("c-a", 1), stuck_on_dead_node(40, true), m("c-c", 3)],
        Some(60),
    );
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-b".into(),
            why: DeleteReason::NodeNotReady
        }
    );
    // NotReady for less than the period, or its Pod not being deleted (a partition: the member
    // may be back with its data any moment): kept.
    for (since, terminating) in [(41, true), (0, false)] {
        let p = run_replacing(
            &c,
            vec![
                m("c-a", 1),
                stuck_on_dead_node(since, terminating),
                m("c-c", 3),
            ],
            Some(60),
        );
        assert!(!replaces(&p), "{since} {terminating}: {:?}", p.action);
    }
    // Off, or without quorum to spare: kept.
    let p = run_replacing(
        &c,
        vec![m("c-a", 1), stuck_on_dead_node(0, true), m("c-c", 3)],
        None,
    );
    assert!(!replaces(&p), "{:?}", p.action);
    let p = run_replacing(
        &c,
        vec![
            m("c-a", 1),
            stuck_on_dead_node(0, true),
            unready(m("c-c", 3)),
        ],
        Some(60),
    );
    assert!(!replaces(&p), "{:?}", p.action);
}

#[test]
fn a_memory_member_whose_pod_is_unschedulable_is_not_replaced_by_this_path() {
    // A Memory member's data lives in its Pod: an unschedulable Pod (with the UID the member
    // recorded) never ran anywhere a Node could take the data with it.
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut b = unschedulable_at("c-b", 0, NO_CPU);
    b.memory = true;
    b.recorded_pod_uid = b.pod.as_ref().map(|p| p.uid.clone());
    let p = run_replacing(&c, vec![m("c-a", 1), b, m("c-c", 3)], Some(60));
    assert!(!replaces(&p), "{:?}", p.action);
}
