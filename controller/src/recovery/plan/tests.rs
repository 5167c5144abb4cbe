use super::*;

pub(super) const CLUSTER_ID: u64 = 0xabc;
pub(super) const CLUSTER_UID: &str = "c-uid";

/// When the EtcdCluster of the fixtures was created.
pub(super) fn created() -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap_or_default())
}

pub(super) fn etcd(
    id: u64,
    term: u64,
    index: u64,
    leader: u64,
    members: usize,
) -> Option<EtcdFacts> {
    Some(EtcdFacts {
        member_id: id,
        cluster_id: CLUSTER_ID,
        leader,
        raft_term: term,
        raft_index: index,
        revision: (index * 2) as i64,
        members,
        is_learner: false,
    })
}

pub(super) fn running(name: &str, etcd: Option<EtcdFacts>) -> MemberFacts {
    MemberFacts {
        name: name.into(),
        pod: Some(PodFacts {
            uid: format!("{name}-uid"),
            ready: false,
            deleting: false,
            force_new_cluster: false,
        }),
        etcd,
        ..Default::default()
    }
}

pub(super) fn lost(name: &str) -> MemberFacts {
    MemberFacts {
        name: name.into(),
        note: Some("no Pod".into()),
        ..Default::default()
    }
}

pub(super) fn facts(members: Vec<MemberFacts>) -> Facts {
    Facts {
        name: "rec".into(),
        uid: "rec-uid".into(),
        cluster_name: "c".into(),
        phase: RecoveryPhase::Pending,
        step: None,
        plan: None,
        forced_pod_uid: None,
        source: Source::Survivor { member: None },
        confirmed: false,
        allow_unverified: false,
        snapshot: None,
        highest_snapshot_revision: None,
        cluster: Some(ClusterFacts {
            held_by: None,
            replicas: 3,
            cluster_id: Some(format_id(CLUSTER_ID)),
            uid: CLUSTER_UID.into(),
            created: Some(created()),
            available: false,
        }),
        other_recovery: None,
        members,
        // Past the first look-again window unless a test says otherwise.
        age_secs: LEADER_SETTLE_SECS + 50,
    }
}

/// Facts of a recovery past its plan, at `step`, with survivor `a`.
pub(super) fn at(step: RecoveryStep, members: Vec<MemberFacts>) -> Facts {
    let mut f = facts(members);
    f.phase = RecoveryPhase::Running;
    f.step = Some(step);
    f.plan = Some(RecoveryPlan {
        member: Some("a".into()),
        ..Default::default()
    });
    f
}

pub(super) fn planned(next: Next) -> RecoveryPlan {
    match next {
        Next::RecordPlan(p) => *p,
        other => panic!("expected a plan, got {other:?}"),
    }
}

#[test]
fn survivor_is_the_member_with_the_highest_commit_index_then_term() {
    let f = facts(vec![
        running("a", etcd(1, 5, 80, 0, 3)),
        running("b", etcd(2, 5, 100, 0, 3)),
        running("c", etcd(3, 6, 90, 0, 3)),
    ]);
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("b"));
    assert_eq!((plan.raft_term, plan.raft_index), (Some(5), Some(100)));
    assert_eq!(plan.member_id.as_deref(), Some("0000000000000002"));
    assert_eq!(plan.discarded_members, vec!["a", "c"]);
    assert_eq!(plan.candidates.len(), 3);
    assert!(plan.lost.unwrap_or_default().contains("a, c"));
}

#[test]
fn members_that_did_not_answer_are_never_chosen_and_their_reason_is_shown() {
    let f = facts(vec![
        lost("a"),
        running("b", etcd(2, 3, 10, 0, 3)),
        lost("c"),
    ]);
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("b"));
    let a = plan.candidates.iter().find(|c| c.name == "a").cloned();
    assert_eq!(a.and_then(|c| c.note).as_deref(), Some("no Pod"));
}

#[test]
fn no_answering_member_waits_instead_of_guessing() {
    let f = facts(vec![lost("a"), lost("b")]);
    match next(&f) {
        Next::Wait { reason, message } => {
            assert_eq!(reason, reason::WAITING_FOR_SURVIVOR);
            assert!(message.contains("a: no Pod"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_member_of_another_cluster_is_not_a_survivor() {
    let mut other = etcd(2, 9, 999, 0, 1).unwrap_or_default();
    other.cluster_id = 0xdef;
    let f = facts(vec![
        running("a", etcd(1, 2, 5, 0, 3)),
        running("b", Some(other)),
    ]);
    assert_eq!(planned(next(&f)).member.as_deref(), Some("a"));
}

#[test]
fn a_healthy_cluster_is_refused_without_the_confirmation() {
    let f = facts(vec![
        running("a", etcd(1, 2, 5, 2, 3)),
        running("b", etcd(2, 2, 5, 2, 3)),
    ]);
    match next(&f) {
        Next::Fail { reason, message } => {
            assert_eq!(reason, reason::HEALTHY_CLUSTER_NOT_CONFIRMED);
            assert!(
                message.contains("confirmHealthyClusterRollback"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    let mut confirmed = f.clone();
    confirmed.confirmed = true;
    assert!(matches!(next(&confirmed), Next::RecordPlan(_)));
}

#[test]
fn a_leader_reported_in_the_recoverys_first_seconds_is_looked_at_again_before_any_refusal() {
    // Right after two of three members died, the survivor still names the leader it lost.
    let mut f = facts(vec![
        running("a", etcd(1, 2, 5, 2, 3)),
        lost("b"),
        lost("c"),
    ]);
    f.age_secs = 1;
    match next(&f) {
        Next::Wait { reason, message } => {
            assert_eq!(reason, reason::CONFIRMING_QUORUM_LOST);
            assert!(message.contains("Nothing was changed"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Once its election timer fired it names none: the recovery plans from it.
    let forgotten = facts(vec![
        running("a", etcd(1, 2, 5, 0, 3)),
        lost("b"),
        lost("c"),
    ]);
    let mut young = forgotten.clone();
    young.age_secs = 1;
    assert_eq!(planned(next(&young)).member.as_deref(), Some("a"));
    // A leader still there after the window is a working quorum: refused, terminal.
    f.age_secs = LEADER_SETTLE_SECS;
    assert!(matches!(
        next(&f),
        Next::Fail { reason, .. } if reason == reason::HEALTHY_CLUSTER_NOT_CONFIRMED
    ));
}

#[test]
fn a_named_survivor_is_taken_even_when_behind_and_the_plan_says_what_is_lost() {
    let mut f = facts(vec![
        running("a", etcd(1, 2, 5, 0, 3)),
        running("b", etcd(2, 2, 9, 0, 3)),
    ]);
    f.source = Source::Survivor {
        member: Some("a".into()),
    };
    let plan = planned(next(&f));
    assert_eq!(plan.member.as_deref(), Some("a"));
    assert!(plan
        .lost
        .unwrap_or_default()
        .contains("b is at commit index 9 (term 2"));
}

#[test]
fn a_named_survivor_that_does_not_exist_fails_and_one_that_does_not_answer_waits() {
    let mut f = facts(vec![running("a", etcd(1, 2, 5, 0, 3)), lost("b")]);
    f.source = Source::Survivor {
        member: Some("zz".into()),
    };
    assert!(matches!(next(&f), Next::Fail { .. }));
    f.source = Source::Survivor {
        member: Some("b".into()),
    };
    assert!(matches!(
        next(&f),
        Next::Wait {
            reason: reason::WAITING_FOR_SURVIVOR,
            ..
        }
    ));
}

#[test]
fn a_missing_cluster_waits_and_another_recovery_goes_first() {
    let mut f = facts(vec![running("a", etcd(1, 2, 5, 0, 3))]);
    f.cluster = None;
    assert!(matches!(
        next(&f),
        Next::Wait {
            reason: reason::CLUSTER_NOT_FOUND,
            ..
        }
    ));
    let mut f = facts(vec![running("a", etcd(1, 2, 5, 0, 3))]);
    f.other_recovery = Some("first".into());
    match next(&f) {
        Next::Wait { message, .. } => assert!(message.contains("first"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn pause_holds_the_cluster_then_moves_on() {
    let mut f = at(RecoveryStep::PauseCluster, vec![running("a", None)]);
    assert_eq!(next(&f), Next::Act(Work::HoldCluster));
    if let Some(c) = f.cluster.as_mut() {
        c.held_by = Some("rec".into());
    }
    assert_eq!(next(&f), Next::Advance(RecoveryStep::StopMembers));
}

#[test]
fn stop_makes_every_member_dormant_and_waits_for_their_pods() {
    let mut f = at(
        RecoveryStep::StopMembers,
        vec![running("a", None), lost("b")],
    );
    assert_eq!(
        next(&f),
        Next::Act(Work::StopMembers(vec!["a".into(), "b".into()]))
    );
    for m in &mut f.members {
        m.dormant = true;
    }
    assert!(matches!(next(&f), Next::Wait { .. }));
    f.members[0].pod = None;
    assert_eq!(next(&f), Next::Advance(RecoveryStep::ForceNewCluster));
}

fn survivor_alone(uid: &str) -> MemberFacts {
    MemberFacts {
        name: "a".into(),
        forced: true,
        pod: Some(PodFacts {
            uid: uid.into(),
            ready: true,
            deleting: false,
            force_new_cluster: true,
        }),
        etcd: etcd(1, 3, 50, 1, 1),
        ..Default::default()
    }
}

#[test]
fn force_new_cluster_records_the_pod_that_ran_alone_with_the_flag() {
    let mut dormant = lost("a");
    dormant.dormant = true;
    let f = at(RecoveryStep::ForceNewCluster, vec![dormant, lost("b")]);
    assert_eq!(next(&f), Next::Act(Work::ForceSurvivor("a".into())));

    // Started, but etcd still lists the old members: not alone yet.
    let mut starting = survivor_alone("p1");
    starting.etcd = etcd(1, 3, 50, 0, 3);
    let f = at(RecoveryStep::ForceNewCluster, vec![starting, lost("b")]);
    assert!(matches!(next(&f), Next::Wait { .. }));

    let mut f = at(
        RecoveryStep::ForceNewCluster,
        vec![survivor_alone("p1"), lost("b")],
    );
    assert_eq!(next(&f), Next::Act(Work::RecordForcedPod("p1".into())));
    f.forced_pod_uid = Some("p1".into());
    assert_eq!(next(&f), Next::Advance(RecoveryStep::RestartSurvivor));
}

#[test]
fn restart_drops_the_flag_then_restarts_only_the_forced_pod_once() {
    let mut f = at(RecoveryStep::RestartSurvivor, vec![survivor_alone("p1")]);
    f.forced_pod_uid = Some("p1".into());
    assert_eq!(next(&f), Next::Act(Work::UnforceSurvivor("a".into())));
    f.members[0].forced = false;
    assert_eq!(
        next(&f),
        Next::Act(Work::RestartPod {
            member: "a".into(),
            uid: "p1".into()
        })
    );
    // A resumed operator finds a new Pod without the flag: never restarted again.
    f.members[0].pod = Some(PodFacts {
        uid: "p2".into(),
        ready: true,
        deleting: false,
        force_new_cluster: false,
    });
    assert_eq!(next(&f), Next::Advance(RecoveryStep::RemoveOthers));
    // Another Pod that still runs with the flag (not the one recorded) is restarted too.
    f.members[0].pod = Some(PodFacts {
        uid: "p3".into(),
        ready: true,
        deleting: false,
        force_new_cluster: true,
    });
    assert_eq!(
        next(&f),
        Next::Act(Work::RestartPod {
            member: "a".into(),
            uid: "p3".into()
        })
    );
}

#[test]
fn the_discarded_members_are_deleted_never_the_survivor() {
    let mut survivor = survivor_alone("p2");
    survivor.forced = false;
    let mut f = at(
        RecoveryStep::RemoveOthers,
        vec![survivor, lost("b"), lost("c")],
    );
    assert_eq!(
        next(&f),
        Next::Act(Work::DeleteMembers(vec!["b".into(), "c".into()]))
    );
    f.members[1].deleting = true;
    f.members[2].deleting = true;
    assert!(matches!(next(&f), Next::Wait { .. }));
    f.members.truncate(1);
    assert_eq!(next(&f), Next::Advance(RecoveryStep::ResumeCluster));
}

#[test]
fn a_lost_survivor_fails_the_recovery() {
    let f = at(RecoveryStep::RemoveOthers, vec![lost("b")]);
    assert!(matches!(next(&f), Next::Fail { .. }));
}

/// A member the cluster controller added back after the release: Pod Ready, no etcd answer (the
/// recovery does not ask members at this step).
fn re_added(name: &str) -> MemberFacts {
    let mut m = running(name, None);
    if let Some(p) = m.pod.as_mut() {
        p.ready = true;
    }
    m
}

/// The cluster controller had not reconciled while the recovery held the cluster (its etcd
/// calls to the lost members were timing out), so the status still reads `Available` with 3
/// ready members from before the loss: the survivor alone must not complete the recovery.
#[test]
fn a_stale_available_status_does_not_complete_a_recovery_whose_members_are_not_back() {
    let mut survivor = survivor_alone("p2");
    survivor.forced = false;
    let mut f = at(RecoveryStep::WaitAvailable, vec![survivor]);
    if let Some(c) = f.cluster.as_mut() {
        c.available = true;
    }
    assert!(matches!(next(&f), Next::Wait { .. }), "{:?}", next(&f));
    // One member back, its Pod not Ready yet: still waiting.
    f.members.push(running("d", None));
    f.members.push(re_added("e"));
    assert!(matches!(next(&f), Next::Wait { .. }), "{:?}", next(&f));
    // A discarded member still being deleted is not one of the cluster's members.
    f.members[1] = being_deleted("b");
    if let Some(p) = f.members[1].pod.as_mut() {
        p.ready = true;
    }
    assert!(matches!(next(&f), Next::Wait { .. }), "{:?}", next(&f));
    f.members[1] = re_added("d");
    assert_eq!(next(&f), Next::Complete);
}

#[test]
fn resume_releases_the_cluster_and_completes_once_available() {
    let mut survivor = survivor_alone("p2");
    survivor.forced = false;
    let mut f = at(RecoveryStep::ResumeCluster, vec![survivor]);
    if let Some(c) = f.cluster.as_mut() {
        c.held_by = Some("rec".into());
    }
    assert_eq!(next(&f), Next::Act(Work::ReleaseCluster));
    if let Some(c) = f.cluster.as_mut() {
        c.held_by = None;
    }
    assert_eq!(next(&f), Next::Advance(RecoveryStep::WaitAvailable));
    f.step = Some(RecoveryStep::WaitAvailable);
    assert!(matches!(next(&f), Next::Wait { .. }));
    if let Some(c) = f.cluster.as_mut() {
        c.available = true;
    }
    f.members.push(re_added("d"));
    f.members.push(re_added("e"));
    assert_eq!(next(&f), Next::Complete);
}

/// A member the user deleted (the break-glass annotation) while the quorum was lost: its
/// finalizer waits for a Ready voter to take its MemberRemove, so its Pod stays.
fn being_deleted(name: &str) -> MemberFacts {
    let mut m = running(name, None);
    m.deleting = true;
    m
}

fn stopped(name: &str) -> MemberFacts {
    let mut m = lost(name);
    m.dormant = true;
    m
}

#[test]
fn stop_deletes_the_pod_of_a_member_being_deleted_instead_of_waiting_for_it() {
    let mut f = at(
        RecoveryStep::StopMembers,
        vec![stopped("a"), being_deleted("b"), stopped("c")],
    );
    // Its controller only runs its finalizer, which waits for the voters the recovery stopped:
    // the recovery stops its Pod itself (the one observed, by UID).
    assert_eq!(
        next(&f),
        Next::Act(Work::StopDeleting(vec![("b".into(), "b-uid".into())]))
    );
    // Its Pod going: waited for, not deleted again.
    if let Some(p) = f.members[1].pod.as_mut() {
        p.deleting = true;
    }
    assert!(matches!(next(&f), Next::Wait { .. }));
    // Its Pod gone: the EtcdMember still waits for its finalizer, the recovery goes on.
    f.members[1].pod = None;
    assert_eq!(next(&f), Next::Advance(RecoveryStep::ForceNewCluster));
}

#[test]
fn members_being_deleted_are_stopped_after_the_others_are_made_dormant() {
    let f = at(
        RecoveryStep::StopMembers,
        vec![running("a", None), being_deleted("b")],
    );
    assert_eq!(next(&f), Next::Act(Work::StopMembers(vec!["a".into()])));
}

#[test]
fn a_survivor_being_deleted_fails_the_recovery_until_it_runs_alone() {
    // A member being deleted runs no Pod again: the cluster cannot be rebuilt from it.
    for step in [
        RecoveryStep::PauseCluster,
        RecoveryStep::StopMembers,
        RecoveryStep::ForceNewCluster,
        RecoveryStep::RestartSurvivor,
    ] {
        let f = at(step, vec![being_deleted("a"), stopped("b")]);
        match next(&f) {
            Next::Fail { reason, message } => {
                assert_eq!(reason, reason::RECOVERY_NOT_POSSIBLE, "{step:?}");
                assert!(
                    message.contains("a is being deleted") && message.contains("PVC data-a"),
                    "{message}"
                );
            }
            other => panic!("{step:?}: {other:?}"),
        }
    }
    // Once the cluster runs from it, its deletion is an ordinary one: the recovery goes on.
    let mut survivor = survivor_alone("p2");
    survivor.forced = false;
    survivor.deleting = true;
    let f = at(RecoveryStep::RemoveOthers, vec![survivor, stopped("b")]);
    assert_eq!(next(&f), Next::Act(Work::DeleteMembers(vec!["b".into()])));
}

fn stuck(name: &str, secs: u64, node_state: Option<NodeState>) -> MemberFacts {
    let mut m = running(name, None);
    m.dormant = true;
    if let Some(p) = m.pod.as_mut() {
        p.deleting = true;
    }
    m.pod_overdue = Some(Overdue {
        secs,
        deadline: "2026-01-01T00:00:00Z".into(),
        node: Some("n1".into()),
        node_state,
    });
    m
}

fn waiting(next: Next) -> (&'static str, String) {
    match next {
        Next::Wait { reason, message } => (reason, message),
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[test]
fn a_pod_stuck_terminating_is_named_with_its_node_and_the_way_out() {
    // Just past its deadline: the usual wait.
    let f = at(
        RecoveryStep::StopMembers,
        vec![stopped("a"), stuck("b", 10, Some(NodeState::NotReady))],
    );
    assert_eq!(waiting(next(&f)).0, reason::RECOVERING);

    let f = at(
        RecoveryStep::StopMembers,
        vec![stopped("a"), stuck("b", 600, Some(NodeState::NotReady))],
    );
    let (why, message) = waiting(next(&f));
    assert_eq!(why, reason::MEMBER_POD_STUCK);
    for part in [
        "member b on Node n1",
        "deadline (2026-01-01T00:00:00Z)",
        "Node n1 is NotReady",
        "NotReady",
        "--force --grace-period=0",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    let f = at(
        RecoveryStep::StopMembers,
        vec![stopped("a"), stuck("b", 600, Some(NodeState::Gone))],
    );
    let (_, message) = waiting(next(&f));
    assert!(
        message.contains("Node n1 no longer exists") && message.contains("--force"),
        "{message}"
    );
    // On a Ready Node the kubelet runs: look at the Pod, forcing it would not stop etcd sooner.
    let f = at(
        RecoveryStep::StopMembers,
        vec![stopped("a"), stuck("b", 600, Some(NodeState::Ready))],
    );
    let (why, message) = waiting(next(&f));
    assert_eq!(why, reason::MEMBER_POD_STUCK);
    assert!(
        message.contains("kubectl describe pod b") && !message.contains("--force"),
        "{message}"
    );
}
