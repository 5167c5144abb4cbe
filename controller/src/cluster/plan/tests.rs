use super::*;
use api::v1alpha2::{EtcdClusterSpec, EtcdClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn cluster(replicas: i32, status: Option<EtcdClusterStatus>) -> EtcdCluster {
    let mut c = EtcdCluster::new(
        "c",
        EtcdClusterSpec {
            replicas,
            version: "3.6.11".into(),
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("n".into());
    c.metadata.uid = Some("uid".into());
    c.status = status;
    c
}

fn locked(
    replicas: i32,
    cluster_id: Option<u64>,
    deadline: Option<i64>,
) -> Option<EtcdClusterStatus> {
    Some(EtcdClusterStatus {
        observed: Some(ObservedSpec {
            replicas,
            version: "3.6.11".into(),
            generation: None,
        }),
        cluster_id: cluster_id.map(|id| format!("{id:016x}")),
        progress_deadline: deadline.map(|d| Time(ts(d))),
        ..Default::default()
    })
}

fn m(name: &str, created: i64) -> MemberView {
    MemberView {
        name: name.into(),
        created: ts(created),
        deleting: false,
        bootstrap: false,
        dormant: false,
        pending: false,
        memory: false,
        recorded_pod_uid: Some(format!("pod-{name}")),
        pod: Some(PodView {
            uid: format!("pod-{name}"),
            ready: true,
            restart_count: 0,
            oom_killed: false,
        }),
    }
}

fn url(name: &str) -> String {
    format!("http://{name}.c.n.svc:2380")
}

fn e(id: u64, name: &str, learner: bool) -> EtcdMemberInfo {
    EtcdMemberInfo {
        id,
        name: name.into(),
        peer_urls: vec![url(name)],
        is_learner: learner,
    }
}

fn etcd(members: Vec<EtcdMemberInfo>) -> EtcdView {
    EtcdView::Members {
        cluster_id: 0xabc,
        members,
    }
}

fn run(c: &EtcdCluster, members: Vec<MemberView>, etcd: EtcdView) -> Plan {
    plan(&Observed {
        cluster: c,
        members,
        etcd,
        now: ts(100),
        cert_manager_missing: false,
    })
}

#[test]
fn first_reconcile_locks_the_spec_and_creates_the_seed() {
    let c = cluster(3, None);
    let p = run(&c, vec![], EtcdView::NotAsked);
    assert_eq!(p.locked_because, Some(reason::INITIAL_SNAPSHOT));
    assert_eq!(p.observed.replicas, 3);
    assert_eq!(p.progress_deadline, Some(ts(100 + 600)));
    assert_eq!(p.action, Action::CreateSeed);
}

#[test]
fn seed_created_without_initial_cluster_is_completed_with_itself() {
    let c = cluster(3, locked(3, None, Some(700)));
    let mut seed = m("c-seed", 1);
    seed.bootstrap = true;
    seed.pending = true;
    seed.pod = None;
    let p = run(&c, vec![seed], EtcdView::NotAsked);
    assert_eq!(
        p.action,
        Action::CompletePending {
            member: "c-seed".into(),
            peer_url: url("c-seed"),
            already_added: true,
            initial_cluster_after_add: format!("c-seed={}", url("c-seed")),
        }
    );
}

#[test]
fn cluster_id_is_latched_only_when_the_seed_is_alone() {
    let c = cluster(3, locked(3, None, Some(700)));
    let mut seed = m("c-seed", 1);
    seed.bootstrap = true;
    let p = run(&c, vec![seed.clone()], etcd(vec![e(7, "c-seed", false)]));
    assert_eq!(
        p.action,
        Action::LatchClusterId {
            cluster_id: 0xabc,
            seed: "c-seed".into(),
            member_id: 7
        }
    );
    let p = run(
        &c,
        vec![seed],
        etcd(vec![e(7, "c-seed", false), e(8, "other", false)]),
    );
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
}

#[test]
fn seed_without_pod_waits_for_seed() {
    let c = cluster(3, locked(3, None, Some(700)));
    let mut seed = m("c-seed", 1);
    seed.bootstrap = true;
    seed.pod = None;
    let p = run(&c, vec![seed], EtcdView::NotAsked);
    assert!(p.facts.seed_without_pod);
    assert!(matches!(p.action, Action::Wait(_)));
}

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
fn never_bootstrapped_paused_cluster_does_nothing() {
    let c = cluster(0, None);
    let p = run(&c, vec![], EtcdView::NotAsked);
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("paused from the start")),
        "{:?}",
        p.action
    );
    assert!(p.facts.paused);
    assert_eq!(p.phase, Phase::Reconciled);
}

#[test]
fn mid_flight_spec_edit_is_not_acted_on_until_target_reached() {
    // Locked at 3, currently 2 ready members, user now asks for 5.
    let c = cluster(5, locked(3, Some(0xabc), Some(700)));
    let p = run(
        &c,
        vec![m("c-a", 1), m("c-b", 2)],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", false)]),
    );
    assert_eq!(p.observed.replicas, 3);
    assert_eq!(p.locked_because, None);
    assert_eq!(p.action, Action::CreateMember);
}

#[test]
fn expired_deadline_before_cluster_id_is_bootstrap_failed_and_terminal() {
    let c = cluster(3, locked(3, None, Some(50)));
    let mut seed = m("c-seed", 1);
    seed.bootstrap = true;
    seed.pod.as_mut().unwrap().ready = false;
    let p = run(&c, vec![seed.clone()], EtcdView::Unreachable("dial".into()));
    assert_eq!(p.phase, Phase::BootstrapFailed);
    // A spec edit does not revive a failed bootstrap: delete and recreate.
    let c = cluster(1, locked(3, None, Some(50)));
    let p = run(&c, vec![seed], EtcdView::Unreachable("dial".into()));
    assert_eq!(p.phase, Phase::BootstrapFailed);
}

#[test]
fn expired_deadline_after_bootstrap_parks_until_spec_edit_then_retries() {
    let c = cluster(3, locked(3, Some(0xabc), Some(50)));
    let members = vec![m("c-a", 1)];
    let view = etcd(vec![e(1, "c-a", false)]);
    let p = run(&c, members.clone(), view.clone());
    assert_eq!(p.phase, Phase::DeadlineExceeded);
    assert!(matches!(p.action, Action::Wait(_)));
    let edited = cluster(2, locked(3, Some(0xabc), Some(50)));
    let p = run(&edited, members, view);
    assert_eq!(p.locked_because, Some(reason::RETRY_AFTER_DEADLINE));
    assert_eq!(p.observed.replicas, 2);
    assert_eq!(p.progress_deadline, Some(ts(700)));
    assert_eq!(p.phase, Phase::Progressing);
    assert_eq!(p.action, Action::CreateMember);
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
    looping.pod = Some(PodView {
        uid: "pod-c-b".into(),
        ready: false,
        restart_count: 6,
        oom_killed: false,
    });
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
fn reached_target_clears_the_deadline() {
    let c = cluster(1, locked(1, Some(0xabc), Some(700)));
    let p = run(&c, vec![m("c-a", 1)], etcd(vec![e(1, "c-a", false)]));
    assert_eq!(p.phase, Phase::Reconciled);
    assert_eq!(p.progress_deadline, None);
    assert_eq!(p.action, Action::None);
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
fn member_lost_after_the_target_was_reached_is_repaired_without_a_deadline() {
    // Reached earlier (no deadline in the status); one of three Pods hangs.
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut hung = m("c-b", 2);
    hung.pod.as_mut().unwrap().ready = false;
    let view = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    let p = run(&c, vec![m("c-a", 1), hung, m("c-c", 3)], view);
    assert_eq!(p.phase, Phase::Progressing);
    assert_eq!(
        p.progress_deadline, None,
        "a repair must never park a serving cluster at a deadline"
    );
}

fn parked(c: &mut EtcdCluster, at_generation: i64) {
    c.status.as_mut().unwrap().conditions.push(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: api::conditions::cluster::PROGRESSING.into(),
            status: "False".into(),
            reason: reason::DEADLINE_EXCEEDED.into(),
            message: String::new(),
            observed_generation: Some(at_generation),
            last_transition_time: Time(ts(50)),
        },
    );
}

#[test]
fn any_spec_edit_after_the_deadline_retries_the_same_target() {
    let members = vec![m("c-a", 1)];
    let view = etcd(vec![e(1, "c-a", false)]);

    // Parked at generation 2, nothing edited since: stays parked.
    let mut c = cluster(3, locked(3, Some(0xabc), Some(50)));
    c.metadata.generation = Some(2);
    parked(&mut c, 2);
    let p = run(&c, members.clone(), view.clone());
    assert_eq!(p.phase, Phase::DeadlineExceeded);

    // An edit that keeps replicas and version (say, resources) bumps the generation: retried.
    c.metadata.generation = Some(3);
    let p = run(&c, members.clone(), view.clone());
    assert_eq!(p.locked_because, Some(reason::RETRY_AFTER_DEADLINE));
    assert_eq!(p.observed.replicas, 3);
    assert_eq!(p.observed.generation, Some(3));
    assert_eq!(p.progress_deadline, Some(ts(700)));
    assert_eq!(p.phase, Phase::Progressing);
    assert_eq!(p.action, Action::CreateMember);

    // Before the deadline, an edit that keeps the target is not a retry signal.
    let mut c = cluster(3, locked(3, Some(0xabc), Some(500)));
    c.metadata.generation = Some(3);
    parked(&mut c, 2);
    let p = run(&c, members, view);
    assert_eq!(p.locked_because, None);
}

#[test]
fn cluster_asking_for_tls_auth_or_restore_is_held_before_its_seed() {
    let mut c = cluster(3, None);
    c.spec.tls = Some(api::v1alpha2::TlsSpec {
        peer: Some(Default::default()),
        ..Default::default()
    });
    c.spec.bootstrap = Some(api::v1alpha2::BootstrapSpec {
        restore: Some(Default::default()),
    });
    let p = run(&c, vec![], EtcdView::NotAsked);
    assert_eq!(
        p.facts.unsupported,
        vec!["spec.tls.peer", "spec.bootstrap.restore"]
    );
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("spec.tls.peer")),
        "no seed is created: {:?}",
        p.action
    );
    // Without them the same cluster bootstraps.
    let p = run(&cluster(3, None), vec![], EtcdView::NotAsked);
    assert!(p.facts.unsupported.is_empty());
    assert_eq!(p.action, Action::CreateSeed);
}
