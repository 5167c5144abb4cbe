//! A formed cluster: scale up and down one member at a time, learners, ghosts, self-heal, pause.

use super::*;

#[test]
fn scale_up_adds_one_member_only_when_all_are_ready_voters() {
    let c = cluster(3, locked(3, Some(0xabc), Some(700)));
    let p = run(&c, vec![m("c-a", 1)], etcd(vec![e(1, "c-a", false)]));
    assert_eq!(p.action, Action::CreateMember);

    let mut b = m("c-b", 2);
    b.pod.as_mut().unwrap().ready = false;
    let p = run(
        &c,
        vec![m("c-a", 1), b],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
}

#[test]
fn pending_member_is_added_as_learner_unless_etcd_already_has_it() {
    let c = cluster(3, locked(3, Some(0xabc), Some(700)));
    let mut b = m("c-b", 2);
    b.pending = true;
    b.pod = None;
    b.recorded_pod_uid = None;
    let p = run(
        &c,
        vec![m("c-a", 1), b.clone()],
        etcd(vec![e(1, "c-a", false)]),
    );
    assert_eq!(
        p.action,
        Action::CompletePending {
            member: "c-b".into(),
            peer_url: url("c-b"),
            already_added: false,
            initial_cluster_after_add: format!("c-a={},c-b={}", url("c-a"), url("c-b")),
        }
    );
    // Crash after MemberAddAsLearner, before the patch: etcd lists the unnamed learner.
    let learner = EtcdMemberInfo {
        id: 2,
        name: String::new(),
        peer_urls: vec![url("c-b")],
        is_learner: true,
    };
    let p = run(
        &c,
        vec![m("c-a", 1), b],
        etcd(vec![e(1, "c-a", false), learner]),
    );
    assert!(
        matches!(
            p.action,
            Action::CompletePending {
                already_added: true,
                ..
            }
        ),
        "{:?}",
        p.action
    );
}

#[test]
fn ready_learner_is_promoted() {
    let c = cluster(3, locked(3, Some(0xabc), Some(700)));
    let p = run(
        &c,
        vec![m("c-a", 1), m("c-b", 2)],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    assert_eq!(
        p.action,
        Action::Promote {
            member: "c-b".into(),
            member_id: 2
        }
    );
}

#[test]
fn scale_down_removes_newest_member_first() {
    let c = cluster(1, locked(1, Some(0xabc), Some(700)));
    let members = vec![m("c-a", 1), m("c-c", 3), m("c-b", 3)];
    let p = run(
        &c,
        members,
        etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", false),
            e(3, "c-c", false),
        ]),
    );
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-c".into(),
            why: DeleteReason::ScaleDown
        }
    );
}

#[test]
fn nothing_else_starts_while_a_member_is_being_deleted() {
    let c = cluster(1, locked(1, Some(0xabc), Some(700)));
    let mut b = m("c-b", 2);
    b.deleting = true;
    let p = run(
        &c,
        vec![m("c-a", 1), b, m("c-c", 3)],
        etcd(vec![e(1, "c-a", false), e(3, "c-c", false)]),
    );
    assert!(matches!(p.action, Action::Wait(_)));
}

#[test]
fn pause_descends_to_one_member_then_marks_it_dormant_and_resume_wakes_it() {
    let c = cluster(0, locked(0, Some(0xabc), Some(700)));
    let p = run(
        &c,
        vec![m("c-a", 1), m("c-b", 2)],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", false)]),
    );
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-b".into(),
            why: DeleteReason::Pause
        }
    );
    let p = run(&c, vec![m("c-a", 1)], etcd(vec![e(1, "c-a", false)]));
    assert_eq!(
        p.action,
        Action::SetDormant {
            member: "c-a".into(),
            dormant: true
        }
    );

    let mut dormant = m("c-a", 1);
    dormant.dormant = true;
    dormant.pod = None;
    let p = run(&c, vec![dormant.clone()], EtcdView::NotAsked);
    assert_eq!(p.phase, Phase::Reconciled);
    assert_eq!(p.facts.dormant_pvc.as_deref(), Some("data-c-a"));

    // Resume: spec edited to 3 after the pause was reached.
    let mut resumed = cluster(3, locked(0, Some(0xabc), None));
    resumed.metadata.generation = Some(5);
    let p = run(&resumed, vec![dormant], EtcdView::NotAsked);
    assert_eq!(p.locked_because, Some(reason::SPEC_CHANGED));
    assert_eq!(
        p.action,
        Action::SetDormant {
            member: "c-a".into(),
            dormant: false
        }
    );
}

#[test]
fn memory_member_whose_pod_vanished_is_replaced() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut b = m("c-b", 2);
    b.memory = true;
    b.pod = None;
    let view = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    let p = run(&c, vec![m("c-a", 1), b.clone(), m("c-c", 3)], view.clone());
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-b".into(),
            why: DeleteReason::MemoryPodLost
        }
    );
    // A Pod with a different UID is a new, empty tmpfs too.
    b.pod = Some(PodView {
        uid: "other".into(),
        ready: false,
        ..Default::default()
    });
    let p = run(&c, vec![m("c-a", 1), b, m("c-c", 3)], view);
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-b".into(),
            why: DeleteReason::MemoryPodLost
        }
    );
}

#[test]
fn crash_looping_member_is_replaced_only_while_the_rest_keep_quorum() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let view = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    let mut looping = m("c-b", 2);
    looping.pod = Some(crash_looping_pod("c-b"));
    let p = run(
        &c,
        vec![m("c-a", 1), looping.clone(), m("c-c", 3)],
        view.clone(),
    );
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-b".into(),
            why: DeleteReason::CrashLooping
        }
    );

    let mut down = m("c-c", 3);
    down.pod.as_mut().unwrap().ready = false;
    let p = run(&c, vec![m("c-a", 1), looping.clone(), down], view.clone());
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );

    let mut oom = looping;
    oom.pod.as_mut().unwrap().oom_killed = true;
    let p = run(&c, vec![m("c-a", 1), oom, m("c-c", 3)], view);
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );
}

#[test]
fn initial_cluster_names_unstarted_learners_from_their_peer_url() {
    let learner = EtcdMemberInfo {
        id: 2,
        name: String::new(),
        peer_urls: vec![url("c-b")],
        is_learner: true,
    };
    let s = initial_cluster(&[e(1, "c-a", false), learner], "c-c", &url("c-c"));
    assert_eq!(
        s,
        format!("c-a={},c-b={},c-c={}", url("c-a"), url("c-b"), url("c-c"))
    );
}

#[test]
fn healthy_member_with_old_restarts_that_is_briefly_unready_is_not_replaced() {
    // Lifetime restarts from long ago, Ready false for a moment (its node blipped): no crash loop.
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut blip = unready(m("c-b", 2));
    blip.pod.as_mut().unwrap().restart_count = 9;
    let p = run(&c, vec![m("c-a", 1), blip, m("c-c", 3)], three_voters());
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );
}

#[test]
fn scale_down_removes_an_unready_member_before_the_newest() {
    // etcd refuses to remove a healthy voter while another is down (the rest would lose quorum).
    let c = cluster(2, locked(2, Some(0xabc), Some(700)));
    let p = run(
        &c,
        vec![m("c-a", 1), unready(m("c-b", 2)), m("c-c", 3)],
        three_voters(),
    );
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-b".into(),
            why: DeleteReason::ScaleDown
        }
    );
}

#[test]
fn scale_up_from_one_keeps_quorum_conditions_on_the_serving_voter() {
    // 1 → 3: the seed serves alone, the first joiner is a learner whose Pod is still starting.
    let c = cluster(3, locked(3, Some(0xabc), Some(700)));
    let joiner = unready(m("c-b", 2));
    let p = run(
        &c,
        vec![m("c-a", 1), joiner],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", true)]),
    );
    let s = crate::cluster::status::render(&c, &p, None, ts(100));
    let cond = |t: &str| {
        let c = s.conditions.iter().find(|c| c.type_ == t).unwrap();
        (c.status.clone(), c.reason.clone())
    };
    use api::conditions::cluster as ctype;
    assert_eq!(
        cond(ctype::AVAILABLE),
        ("True".to_string(), reason::QUORUM_HEALTHY.to_string())
    );
    assert_eq!(cond(ctype::DEGRADED).0, "False");
}

#[test]
fn crash_loop_needs_the_backoff_now_and_a_recent_crash() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let members = |p: PodView| {
        let mut b = m("c-b", 2);
        b.pod = Some(p);
        vec![m("c-a", 1), b, m("c-c", 3)]
    };
    let p = run(&c, members(crash_looping_pod("c-b")), three_voters());
    assert!(matches!(
        p.action,
        Action::DeleteMember {
            why: DeleteReason::CrashLooping,
            ..
        }
    ));
    // The last crash was long ago: whatever it waits for now, it is not this crash loop.
    let mut old = crash_looping_pod("c-b");
    old.last_exit = Some(ts(100) - CRASH_LOOP_RECENT - SignedDuration::from_secs(1));
    let p = run(&c, members(old), three_voters());
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );
    // Not ready and restarted often, but running: not a crash loop.
    let mut running = crash_looping_pod("c-b");
    running.crash_loop_backoff = false;
    let p = run(&c, members(running), three_voters());
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );
}

#[test]
fn crash_loop_quorum_guard_counts_ready_voters_not_ready_learners() {
    // Voters a, b, c; d is a Ready learner. b crash-loops and c is down: removing b would
    // leave a alone among the voters a and c — quorum lost. The ready learner must not count.
    let c = cluster(4, locked(4, Some(0xabc), Some(700)));
    let mut b = m("c-b", 2);
    b.pod = Some(crash_looping_pod("c-b"));
    let d = m("c-d", 4);
    let view = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
        e(4, "c-d", true),
    ]);
    let p = run(&c, vec![m("c-a", 1), b, unready(m("c-c", 3)), d], view);
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );
}

#[test]
fn member_whose_pvc_is_gone_is_removed_while_quorum_allows_never_restarted() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut lost = m("c-b", 2);
    lost.pod = None;
    lost.data_lost = true;
    let p = run(
        &c,
        vec![m("c-a", 1), lost.clone(), m("c-c", 3)],
        three_voters(),
    );
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-b".into(),
            why: DeleteReason::DataLost
        }
    );
    assert_eq!(p.facts.broken_members, 1);
    // With another voter down, removing it would leave one of two voters: wait.
    let p = run(
        &c,
        vec![m("c-a", 1), lost, unready(m("c-c", 3))],
        three_voters(),
    );
    assert!(
        !matches!(p.action, Action::DeleteMember { .. }),
        "{:?}",
        p.action
    );
}

#[test]
fn ghost_members_are_reported_and_removed_when_quorum_allows() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let ghost = EtcdMemberInfo {
        id: 9,
        name: String::new(),
        peer_urls: vec!["http://ghost.c.n.svc:2380".into()],
        is_learner: false,
    };
    let mut listed = vec![e(1, "c-a", false), e(2, "c-b", false), e(3, "c-c", false)];
    listed.push(ghost.clone());
    let members = vec![m("c-a", 1), m("c-b", 2), m("c-c", 3)];
    let p = run(&c, members.clone(), etcd(listed.clone()));
    let want = Ghost {
        id: 9,
        name: String::new(),
        peer_url: "http://ghost.c.n.svc:2380".into(),
        is_learner: false,
    };
    assert_eq!(p.facts.ghosts, vec![want.clone()]);
    assert_eq!(p.action, Action::RemoveGhost(want));
    assert_ne!(
        p.phase,
        Phase::Reconciled,
        "a ghost voter is not the target"
    );
    // A dead ghost voter of four, with two of three real voters down: 1 of 4 serve, not safe.
    let down = vec![m("c-a", 1), unready(m("c-b", 2)), unready(m("c-c", 3))];
    let p = run(&c, down, etcd(listed));
    assert!(
        !matches!(p.action, Action::RemoveGhost(_)),
        "{:?}",
        p.action
    );
    // A ghost learner never counts towards quorum: always removable.
    let learner = EtcdMemberInfo {
        is_learner: true,
        ..ghost
    };
    let p = run(
        &c,
        vec![m("c-a", 1), unready(m("c-b", 2)), unready(m("c-c", 3))],
        etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", false),
            e(3, "c-c", false),
            learner,
        ]),
    );
    assert!(
        matches!(p.action, Action::RemoveGhost(ref g) if g.is_learner),
        "{:?}",
        p.action
    );
    // The learner a scale-up step just added for a pending member is not a ghost.
    let mut pending = m("c-d", 4);
    pending.pending = true;
    pending.pod = None;
    let p = run(
        &cluster(4, locked(4, Some(0xabc), Some(700))),
        vec![m("c-a", 1), m("c-b", 2), m("c-c", 3), pending],
        etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", false),
            e(3, "c-c", false),
            e(4, "c-d", true),
        ]),
    );
    assert!(p.facts.ghosts.is_empty(), "{:?}", p.facts.ghosts);
}

/// Members adopted from the aenix operator: their etcd peer URLs are under `c-headless`.
fn adopted(name: &str, created: i64) -> (MemberView, EtcdMemberInfo, u64) {
    let mut v = m(name, created);
    v.service = Some("c-headless".into());
    let id = 0x100 + created as u64;
    let info = EtcdMemberInfo {
        id,
        name: name.into(),
        peer_urls: vec![format!("http://{name}.c-headless.n.svc:2380")],
        is_learner: false,
    };
    (v, info, id)
}

#[test]
fn adopted_members_match_their_legacy_peer_urls_and_are_no_ghosts() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let (a0, e0, _) = adopted("c-0", 1);
    let (a1, e1, _) = adopted("c-1", 2);
    let native = m("c-x", 3);
    let p = run(
        &c,
        vec![a0, a1, native],
        etcd(vec![e0, e1, e(3, "c-x", false)]),
    );
    assert!(p.facts.ghosts.is_empty(), "{:?}", p.facts.ghosts);
    assert_eq!(p.facts.ready_voters, 3);
    assert_eq!(p.action, Action::None);
}

#[test]
fn adopted_members_are_replaced_one_at_a_time_on_request_only_while_whole() {
    let mut c = cluster(3, locked(3, Some(0xabc), None));
    let (a0, e0, _) = adopted("c-0", 1);
    let (a1, e1, _) = adopted("c-1", 2);
    let (a2, e2, _) = adopted("c-2", 3);
    let members = vec![a0.clone(), a1.clone(), a2.clone()];
    let list = vec![e0.clone(), e1.clone(), e2.clone()];
    // Not asked: nothing.
    assert_eq!(
        run(&c, members.clone(), etcd(list.clone())).action,
        Action::None
    );
    c.metadata.annotations = Some(std::collections::BTreeMap::from([(
        api::labels::REPLACE_ADOPTED_ANNOTATION.to_string(),
        "true".to_string(),
    )]));
    assert_eq!(
        run(&c, members.clone(), etcd(list.clone())).action,
        Action::DeleteMember {
            member: "c-0".into(),
            why: DeleteReason::ReplaceAdopted,
        }
    );
    // One is being replaced (deleting): nothing else happens until it is gone, then its
    // successor is added.
    let mut going = a0.clone();
    going.deleting = true;
    let p = run(
        &c,
        vec![going, a1.clone(), a2.clone()],
        etcd(vec![e1.clone(), e2.clone()]),
    );
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
    let p = run(
        &c,
        vec![a1.clone(), a2.clone()],
        etcd(vec![e1.clone(), e2.clone()]),
    );
    assert_eq!(p.action, Action::CreateMember);
    // Its successor is still a learner: no further replacement.
    let mut fresh = m("c-n", 4);
    fresh.pod = Some(PodView {
        uid: "pod-c-n".into(),
        ready: true,
        template_hash: Some(template()),
        ..Default::default()
    });
    let p = run(
        &c,
        vec![a1.clone(), a2.clone(), fresh.clone()],
        etcd(vec![e1.clone(), e2.clone(), e(4, "c-n", true)]),
    );
    assert_eq!(
        p.action,
        Action::Promote {
            member: "c-n".into(),
            member_id: 4
        }
    );
    // A member not Ready: wait.
    let mut down = a2.clone();
    down.pod = Some(PodView {
        uid: "pod-c-2".into(),
        ready: false,
        template_hash: Some(template()),
        ..Default::default()
    });
    let p = run(
        &c,
        vec![a1.clone(), down, fresh.clone()],
        etcd(vec![e1.clone(), e2.clone(), e(4, "c-n", false)]),
    );
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
    // Whole again: the next adopted member goes.
    let p = run(
        &c,
        vec![a1, a2, fresh],
        etcd(vec![e1, e2, e(4, "c-n", false)]),
    );
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-1".into(),
            why: DeleteReason::ReplaceAdopted,
        }
    );
}

#[test]
fn peer_auto_tls_cluster_adds_learners_under_https_peer_urls() {
    let mut c = cluster(3, locked(3, Some(0xabc), Some(700)));
    c.metadata.annotations = Some(
        [(
            api::labels::PEER_AUTO_TLS_ANNOTATION.to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    let https = |name: &str| format!("https://{name}.c.n.svc:2380");
    let mut b = m("c-b", 2);
    b.pending = true;
    b.pod = None;
    b.recorded_pod_uid = None;
    let a = EtcdMemberInfo {
        peer_urls: vec![https("c-a")],
        ..e(1, "c-a", false)
    };
    let p = run(&c, vec![m("c-a", 1), b], etcd(vec![a]));
    assert_eq!(
        p.action,
        Action::CompletePending {
            member: "c-b".into(),
            peer_url: https("c-b"),
            already_added: false,
            initial_cluster_after_add: format!("c-a={},c-b={}", https("c-a"), https("c-b")),
        }
    );
}

#[test]
fn a_member_deleted_without_the_break_glass_is_re_created_on_its_kept_pvc() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    // c-c's object is gone; etcd still lists it, and its PVC was kept.
    let members = vec![m("c-a", 1), m("c-b", 2)];
    let kept = |claims: &[(&str, &str)]| Observed {
        kept_claims: claims
            .iter()
            .map(|(m, uid)| (m.to_string(), uid.to_string()))
            .collect(),
        ..observed(&c, members.clone(), three_voters())
    };
    let p = plan(&kept(&[("c-c", "uid-old")]));
    assert_eq!(
        p.action,
        Action::ReattachMember {
            member: "c-c".into(),
            claim_uid: "uid-old".into(),
            initial_cluster: format!("c-a={},c-b={},c-c={}", url("c-a"), url("c-b"), url("c-c")),
        }
    );
    // Without a kept PVC the ghost is removed from etcd (while quorum allows) as before.
    let p = plan(&kept(&[]));
    assert!(matches!(p.action, Action::RemoveGhost(_)), "{:?}", p.action);
    // A kept PVC of another name says nothing about this ghost.
    let p = plan(&kept(&[("c-z", "uid-z")]));
    assert!(matches!(p.action, Action::RemoveGhost(_)), "{:?}", p.action);
}

#[test]
fn a_ghost_named_otherwise_than_its_peer_url_is_never_re_created() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut listed = vec![e(1, "c-a", false), e(2, "c-b", false)];
    listed.push(EtcdMemberInfo {
        id: 3,
        name: "c-c".into(),
        peer_urls: vec!["http://c-c.c-headless.n.svc:2380".into()],
        is_learner: false,
    });
    let p = plan(&Observed {
        kept_claims: [("c-c".to_string(), "uid-old".to_string())].into(),
        ..observed(&c, vec![m("c-a", 1), m("c-b", 2)], etcd(listed))
    });
    assert!(
        !matches!(p.action, Action::ReattachMember { .. }),
        "{:?}",
        p.action
    );
}
