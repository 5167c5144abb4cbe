use super::*;
use api::v1alpha2::{EtcdClusterSpec, EtcdClusterStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
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
            ..ObservedSpec::of(&cluster(replicas, None).spec, None)
        }),
        cluster_id: cluster_id.map(|id| format!("{id:016x}")),
        progress_deadline: deadline.map(|d| Time(ts(d))),
        ..Default::default()
    })
}

/// The template hash of a member built from [`cluster`]'s spec.
fn template() -> String {
    crate::template::target_hash(&ObservedSpec::of(&cluster(1, None).spec, None))
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
        voter: true,
        version: "3.6.11".into(),
        recorded_pod_uid: Some(format!("pod-{name}")),
        service: None,
        pod: Some(PodView {
            uid: format!("pod-{name}"),
            ready: true,
            template_hash: Some(template()),
            ..Default::default()
        }),
        data_lost: false,
        trust_bundle: None,
        trusted_cas: None,
        template_hash: template(),
        data_home: DataHome::Unknown,
        image_repository: None,
    }
}

/// A Pod waiting in CrashLoopBackOff, last crashed a minute before `ts(100)`.
fn crash_looping_pod(name: &str) -> PodView {
    PodView {
        uid: format!("pod-{name}"),
        ready: false,
        restart_count: 6,
        oom_killed: false,
        crash_loop_backoff: true,
        terminating: false,
        unschedulable: None,
        last_exit: Some(ts(40)),
        trust_bundle: None,
        trusted_cas: None,
        started: None,
        template_hash: None,
        image_repository: None,
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
    run_with(c, members, etcd, None)
}

/// [`run`] with `--replace-broken-members-after` at `after` seconds.
fn run_with(c: &EtcdCluster, members: Vec<MemberView>, etcd: EtcdView, after: Option<i64>) -> Plan {
    plan(&Observed {
        replace_broken_after: after.map(SignedDuration::from_secs),
        ..observed(c, members, etcd)
    })
}

/// What [`run`] plans from: `members` and `etcd` at `ts(100)`, nothing else in the way.
fn observed(c: &EtcdCluster, members: Vec<MemberView>, etcd: EtcdView) -> Observed<'_> {
    Observed {
        cluster: c,
        replace_broken_after: None,
        members,
        etcd,
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: None,
        leader: None,
        image_repository: None,
        restoring: None,
        ca_trust: None,
    }
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
fn cluster_with_a_restore_source_bootstraps_its_seed() {
    // spec.bootstrap.restore is implemented: the seed is created (and stamped with the source
    // by the reconciler), nothing is held as unsupported.
    let mut c = cluster(3, None);
    c.spec.tls = Some(peer_cert_manager());
    c.spec.bootstrap = Some(api::v1alpha2::BootstrapSpec {
        restore: Some(Default::default()),
    });
    let p = run(&c, vec![], EtcdView::NotAsked);
    assert!(p.facts.unsupported.is_empty());
    assert_eq!(p.action, Action::CreateSeed);
}

fn peer_cert_manager() -> api::v1alpha2::TlsSpec {
    api::v1alpha2::TlsSpec {
        peer: Some(api::v1alpha2::PeerTlsSpec {
            secret_ref: None,
            cert_manager: Some(api::v1alpha2::PeerCertManagerSpec {
                issuer_ref: api::v1alpha2::IssuerReference::new("ca", Default::default()),
            }),
        }),
        ..Default::default()
    }
}

#[test]
fn cert_manager_tls_waits_for_cert_manager_and_for_its_secrets_before_the_seed() {
    let mut c = cluster(3, None);
    c.spec.tls = Some(peer_cert_manager());
    let observed = |missing: bool, problem: Option<&str>| Observed {
        cluster: &c,
        replace_broken_after: None,
        members: vec![],
        etcd: EtcdView::NotAsked,
        now: ts(100),
        cert_manager_missing: missing,
        tls_secret_problem: problem.map(str::to_string),
        waiting_for_certificate: problem.is_some(),
        auth_problem: None,
        trust_bundle: None,
        leader: None,
        image_repository: None,
        restoring: None,
        ca_trust: None,
    };
    let p = plan(&observed(false, None));
    assert!(p.facts.unsupported.is_empty(), "{:?}", p.facts.unsupported);
    assert_eq!(p.action, Action::CreateSeed);

    let p = plan(&observed(true, None));
    assert!(p.facts.cert_manager_missing);
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("cert-manager")),
        "{:?}",
        p.action
    );

    let waiting = "waiting for cert-manager to issue Secret ns/c-peer-tls for Certificate c-peer";
    let p = plan(&observed(false, Some(waiting)));
    assert_eq!(p.phase, Phase::Progressing);
    assert!(p.facts.waiting_for_certificate);
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("c-peer-tls")),
        "{:?}",
        p.action
    );
}

#[test]
fn byo_secret_tls_bootstraps_and_a_missing_secret_holds_the_seed_with_its_name() {
    let mut c = cluster(3, None);
    c.spec.tls = Some(api::v1alpha2::TlsSpec {
        client: Some(api::v1alpha2::ClientTlsSpec {
            server_secret_ref: Some(api::v1alpha2::SecretReference::new("c-server-tls")),
            operator_client_secret_ref: Some(api::v1alpha2::SecretReference::new("c-op-tls")),
            cert_manager: None,
        }),
        peer: Some(api::v1alpha2::PeerTlsSpec {
            secret_ref: Some(api::v1alpha2::SecretReference::new("c-peer-tls")),
            cert_manager: None,
        }),
    });
    let p = run(&c, vec![], EtcdView::NotAsked);
    assert!(p.facts.unsupported.is_empty(), "{:?}", p.facts.unsupported);
    assert_eq!(p.action, Action::CreateSeed);

    let problem = "Secret ns/c-peer-tls (spec.tls.peer.secretRef) does not exist".to_string();
    let p = plan(&Observed {
        cluster: &c,
        replace_broken_after: None,
        members: vec![],
        etcd: EtcdView::NotAsked,
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: Some(problem.clone()),
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: None,
        leader: None,
        image_repository: None,
        restoring: None,
        ca_trust: None,
    });
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("c-peer-tls")),
        "{:?}",
        p.action
    );
    assert_eq!(p.facts.tls_secret_problem, Some(problem));
}

#[test]
fn an_auth_problem_holds_every_membership_change_and_names_its_reason() {
    // Scale-up wanted on a formed cluster, but etcd refuses the operator's login.
    let c = cluster(3, locked(1, Some(0xabc), None));
    let problem = super::AuthProblem {
        reason: api::conditions::reason::AUTH_CREDENTIALS_REJECTED,
        message: "etcd rejected the root password from Secret ns/root".into(),
    };
    let observed = |auth_problem| Observed {
        cluster: &c,
        replace_broken_after: None,
        members: vec![m("c-a", 1)],
        etcd: etcd(vec![e(1, "c-a", false)]),
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem,
        trust_bundle: None,
        leader: None,
        image_repository: None,
        restoring: None,
        ca_trust: None,
    };
    let p = plan(&observed(Some(problem.clone())));
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("AuthCredentialsRejected") && w.contains("ns/root")),
        "{:?}",
        p.action
    );
    assert_eq!(p.facts.auth_problem, Some(problem));
    // Without it the same cluster scales.
    assert_eq!(plan(&observed(None)).action, Action::CreateMember);
}

#[test]
fn root_auth_is_not_held_as_unsupported() {
    let mut c = cluster(3, None);
    c.spec.auth = Some(api::v1alpha2::AuthSpec {
        enabled: true,
        root_credentials_secret_ref: Some(api::v1alpha2::SecretReference::new("root")),
    });
    let p = run(&c, vec![], EtcdView::NotAsked);
    assert!(p.facts.unsupported.is_empty(), "{:?}", p.facts.unsupported);
    assert_eq!(p.action, Action::CreateSeed);
}

// --- hardening: each of these failed on the planner before the fix ---

fn three_voters() -> EtcdView {
    etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ])
}

fn unready(mut v: MemberView) -> MemberView {
    v.pod.as_mut().unwrap().ready = false;
    v
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
fn edit_on_a_degraded_cluster_is_locked_at_once_and_drops_the_hung_member() {
    // The target was reached (no deadline), then c-b hung; the user scales down to 2.
    let c = cluster(2, locked(3, Some(0xabc), None));
    let p = run(
        &c,
        vec![m("c-a", 1), unready(m("c-b", 2)), m("c-c", 3)],
        three_voters(),
    );
    assert_eq!(p.observed.replicas, 2);
    assert_eq!(p.locked_because, Some(reason::SPEC_CHANGED));
    assert_eq!(p.progress_deadline, Some(ts(700)));
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

#[test]
fn another_cluster_id_stops_every_membership_change() {
    let c = cluster(5, locked(3, Some(0xabc), None));
    let p = run(
        &c,
        vec![m("c-a", 1), m("c-b", 2), m("c-c", 3)],
        EtcdView::Members {
            cluster_id: 0xdef,
            members: vec![e(1, "c-a", false), e(2, "c-b", false), e(3, "c-c", false)],
        },
    );
    assert_eq!(
        p.facts.cluster_id_mismatch,
        Some(("0000000000000abc".into(), "0000000000000def".into()))
    );
    assert!(
        matches!(p.action, Action::Wait(ref w) if w.contains("0000000000000def")),
        "{:?}",
        p.action
    );
}

#[test]
fn version_edit_rolls_the_members_one_at_a_time_the_leader_last() {
    let mut c = cluster(3, locked(3, Some(0xabc), None));
    c.spec.version = "3.6.12".into();
    let members = vec![m("c-a", 1), m("c-b", 2), m("c-c", 3)];
    let view = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    let observed = |members: Vec<MemberView>, leader| Observed {
        cluster: &c,
        replace_broken_after: None,
        members,
        etcd: view.clone(),
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: None,
        leader: Some(leader),
        image_repository: None,
        restoring: None,
        ca_trust: None,
    };
    let p = plan(&observed(members.clone(), 1));
    assert_eq!(p.observed.version, "3.6.12");
    assert_eq!(p.locked_because, Some(reason::SPEC_CHANGED));
    assert_eq!(p.phase, Phase::Progressing);
    assert_eq!(p.facts.template_rollout, Some((0, 3)));
    // c-a leads: a follower first.
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-b".into(),
            trust_bundle: None,
            template: true,
            last: false,
            image_repository: None,
        }
    );
    let s = crate::cluster::status::render(&c, &p, None, ts(100));
    let progressing = s
        .conditions
        .iter()
        .find(|x| x.type_ == api::conditions::cluster::PROGRESSING)
        .unwrap();
    assert_eq!(progressing.status, "True");
    assert!(
        progressing.message.contains("version 3.6.12") && progressing.message.contains("0 of 3"),
        "{}",
        progressing.message
    );
    // Two followers updated: leadership moves to one of them before the leader restarts.
    let mut c2 = c.clone();
    c2.status = Some(crate::cluster::status::render(&c, &p, None, ts(100)));
    let new_template = crate::template::target_hash(&p.observed);
    let updated = |mut v: MemberView| {
        v.template_hash = new_template.clone();
        if let Some(p) = v.pod.as_mut() {
            p.template_hash = Some(new_template.clone());
        }
        v
    };
    let members = vec![m("c-a", 1), updated(m("c-b", 2)), updated(m("c-c", 3))];
    let p = plan(&Observed {
        cluster: &c2,
        replace_broken_after: None,
        ..observed(members.clone(), 1)
    });
    assert_eq!(p.facts.template_rollout, Some((2, 3)));
    assert_eq!(
        p.action,
        Action::MoveLeader {
            from: "c-a".into(),
            to: "c-b".into(),
            to_id: 2
        }
    );
    let p = plan(&Observed {
        cluster: &c2,
        replace_broken_after: None,
        ..observed(members, 2)
    });
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-a".into(),
            trust_bundle: None,
            template: true,
            last: true,
            image_repository: None,
        }
    );
}

fn resources(memory: &str) -> k8s_openapi::api::core::v1::ResourceRequirements {
    k8s_openapi::api::core::v1::ResourceRequirements {
        limits: Some(
            [(
                "memory".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(memory.into()),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

/// Two voters serving, mid-way through a scale-up to 3.
fn two_of_three_serving() -> (Vec<MemberView>, EtcdView) {
    (
        vec![m("c-a", 1), m("c-b", 2)],
        etcd(vec![e(1, "c-a", false), e(2, "c-b", false)]),
    )
}

#[test]
fn a_target_latched_by_the_reference_operator_is_not_mistaken_for_an_edit() {
    // The reference writes an unset `resources` as `{}` and quantities in canonical form; the
    // user's spec has no resources and spells the size in bytes. Taking over such a cluster must
    // not relatch it (Progressing=True/SpecChanged on a cluster nobody edited).
    let mut c = cluster(3, locked(3, Some(0xabc), None));
    c.spec.storage.size = Quantity("1073741824".into());
    let observed = c.status.as_mut().unwrap().observed.as_mut().unwrap();
    observed.resources = Some(Default::default());
    observed.storage = Some(api::v1alpha2::StorageSpec {
        size: Quantity("1Gi".into()),
        ..Default::default()
    });
    observed.generation = None;
    let three = vec![m("c-a", 1), m("c-b", 2), m("c-c", 3)];
    let in_etcd = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    let p = run(&c, three.clone(), in_etcd.clone());
    assert_eq!(p.locked_because, None);
    assert_eq!(p.phase, Phase::Reconciled);
    assert_eq!(p.action, Action::None);
    // A real edit still is one.
    c.spec.storage.size = Quantity("2Gi".into());
    let p = run(&c, three, in_etcd);
    assert_eq!(p.locked_because, Some(reason::SPEC_CHANGED));
}

#[test]
fn resources_edit_during_a_scale_up_waits_for_the_next_target() {
    // Locked at 3 with 1Gi; two members serve; the user now sets a 2Gi limit.
    let mut c = cluster(3, locked(3, Some(0xabc), Some(700)));
    c.status
        .as_mut()
        .unwrap()
        .observed
        .as_mut()
        .unwrap()
        .resources = Some(resources("1Gi"));
    c.spec.resources = Some(resources("2Gi"));
    let (two, two_in_etcd) = two_of_three_serving();
    let p = run(&c, two, two_in_etcd);
    assert_eq!(p.locked_because, None);
    assert_eq!(p.action, Action::CreateMember);
    // The member created next is built from the locked target, not the edited spec.
    let next = member_spec("c", &p.observed, "tok".into(), false, None);
    assert_eq!(next.resources, Some(resources("1Gi")));
    assert_eq!(next.version, "3.6.11");

    // Once 3 serve the old target is reached and the edit is latched as a new target.
    let old_target = c.status.as_ref().unwrap().observed.clone().unwrap();
    let three: Vec<MemberView> = [m("c-a", 1), m("c-b", 2), m("c-c", 3)]
        .into_iter()
        .map(|mut v| {
            v.template_hash = crate::template::target_hash(&old_target);
            if let Some(p) = v.pod.as_mut() {
                p.template_hash = Some(v.template_hash.clone());
            }
            v
        })
        .collect();
    let p = run(
        &c,
        three,
        etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", false),
            e(3, "c-c", false),
        ]),
    );
    assert_eq!(p.locked_because, Some(reason::SPEC_CHANGED));
    assert_eq!(p.observed.resources, Some(resources("2Gi")));
    let next = member_spec("c", &p.observed, "tok".into(), false, None);
    assert_eq!(next.resources, Some(resources("2Gi")));
}

#[test]
fn every_latched_field_makes_a_new_target() {
    let base = cluster(3, None);
    let t = target_of(&base);
    assert!(same_target(&t, &target_of(&base)));
    let mut other = base.clone();
    other.metadata.generation = Some(9);
    assert!(
        same_target(&t, &target_of(&other)),
        "generation alone is no new target"
    );
    type Edit = Box<dyn Fn(&mut EtcdClusterSpec)>;
    let edits: Vec<(&str, Edit)> = vec![
        ("replicas", Box::new(|s| s.replicas = 5)),
        ("version", Box::new(|s| s.version = "3.6.12".into())),
        ("storage", Box::new(|s| s.storage.size.0 = "2Gi".into())),
        (
            "resources",
            Box::new(|s| s.resources = Some(resources("1Gi"))),
        ),
        (
            "options",
            Box::new(|s| {
                s.options = Some(api::v1alpha2::EtcdOptions {
                    snapshot_count: Some(5000),
                    ..Default::default()
                })
            }),
        ),
        (
            "affinity",
            Box::new(|s| s.affinity = Some(Default::default())),
        ),
        (
            "topologySpreadConstraints",
            Box::new(|s| s.topology_spread_constraints = vec![Default::default()]),
        ),
        (
            "imagePullSecrets",
            Box::new(|s| s.image_pull_secrets = vec![Default::default()]),
        ),
        (
            "additionalMetadata",
            Box::new(|s| s.additional_metadata = Some(Default::default())),
        ),
    ];
    for (field, edit) in edits {
        let mut edited = base.clone();
        edit(&mut edited.spec);
        assert!(!same_target(&t, &target_of(&edited)), "{field}");
    }
}

#[test]
fn a_snapshot_from_an_older_operator_reads_the_other_fields_from_the_spec() {
    // An older operator latched replicas and version only; a scale-up is in flight.
    let mut c = cluster(5, locked(3, Some(0xabc), Some(700)));
    c.spec.resources = Some(resources("2Gi"));
    let legacy = ObservedSpec {
        replicas: 3,
        version: "3.6.11".into(),
        ..Default::default()
    };
    assert!(legacy.is_legacy());
    c.status.as_mut().unwrap().observed = Some(legacy);
    let (two, two_in_etcd) = two_of_three_serving();
    let p = run(&c, two, two_in_etcd);
    // Still the locked replicas (the edit to 5 waits), the rest as that operator used it.
    assert_eq!(p.observed.replicas, 3);
    assert_eq!(p.locked_because, None);
    assert_eq!(p.action, Action::CreateMember);
    assert!(!p.observed.is_legacy());
    assert_eq!(p.observed.resources, Some(resources("2Gi")));
}

/// A cluster held for cert-manager (missing, or not issued yet) does not run out of its
/// progress deadline before anything could be attempted; a BYO Secret wait still does.
#[test]
fn the_progress_deadline_does_not_run_out_while_cert_manager_holds_the_seed() {
    let mut c = cluster(3, None);
    c.spec.tls = Some(peer_cert_manager());
    let first = run(&c, vec![], EtcdView::NotAsked);
    c.status = Some(api::v1alpha2::EtcdClusterStatus {
        observed: Some(first.observed.clone()),
        progress_deadline: first
            .progress_deadline
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
        ..Default::default()
    });
    let late = first.progress_deadline.unwrap() + SignedDuration::from_secs(3600);
    let at = |missing: bool, waiting: bool| {
        plan(&Observed {
            cluster: &c,
            replace_broken_after: None,
            members: vec![],
            etcd: EtcdView::NotAsked,
            now: late,
            cert_manager_missing: missing,
            tls_secret_problem: waiting.then(|| "waiting".to_string()),
            waiting_for_certificate: waiting,
            auth_problem: None,
            trust_bundle: None,
            leader: None,
            image_repository: None,
            restoring: None,
            ca_trust: None,
        })
    };
    for (missing, waiting) in [(true, false), (false, true)] {
        let p = at(missing, waiting);
        assert_eq!(p.phase, Phase::Progressing, "{missing} {waiting}");
        assert!(p.progress_deadline.is_some_and(|d| d > late));
    }
    // No longer held, with a deadline long past (no reconcile refreshed it): parks as before.
    let p = at(false, false);
    assert_eq!(p.phase, Phase::BootstrapFailed);
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

/// [`plan`] of `members` with the Secrets holding trust bundle `want` and `leader` leading.
fn plan_trust(
    c: &EtcdCluster,
    members: Vec<MemberView>,
    etcd: EtcdView,
    want: &str,
    leader: u64,
) -> Plan {
    plan(&Observed {
        cluster: c,
        replace_broken_after: None,
        members,
        etcd,
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: Some(want.into()),
        leader: Some(leader),
        image_repository: None,
        restoring: None,
        ca_trust: None,
    })
}

/// A whole 3-member cluster (ids 1, 2, 3 for c-a, c-b, c-c) whose members record `trust[i]`
/// and whose Pods started with `pods[i]`, planned with the Secrets holding `want`.
fn trust_run(trust: [Option<&str>; 3], pods: [Option<&str>; 3], want: &str, leader: u64) -> Plan {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let members = ["c-a", "c-b", "c-c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut v = m(name, i as i64);
            v.trust_bundle = trust[i].map(str::to_string);
            if let Some(p) = v.pod.as_mut() {
                p.trust_bundle = pods[i].map(str::to_string);
            }
            v
        })
        .collect();
    let etcd = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    plan_trust(&c, members, etcd, want, leader)
}

#[test]
fn members_without_a_recorded_ca_bundle_record_the_current_one_without_a_restart() {
    let p = trust_run(
        [None, Some("new"), Some("new")],
        [None, Some("new"), Some("new")],
        "new",
        1,
    );
    assert_eq!(
        p.action,
        Action::RecordTrustBundle {
            member: "c-a".into(),
            trust_bundle: "new".into()
        }
    );
    // Not counted as a rollout: nothing is restarted for them.
    assert_eq!(p.facts.trust_rollout, None);
    let p = trust_run([Some("new"); 3], [Some("new"); 3], "new", 1);
    assert_eq!(p.action, Action::None);
    assert_eq!(p.phase, Phase::Reconciled);
}

#[test]
fn a_new_ca_bundle_restarts_followers_first_one_at_a_time() {
    // c-b leads: c-a is restarted first.
    let p = trust_run([Some("old"); 3], [Some("old"); 3], "new", 2);
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-a".into(),
            trust_bundle: Some("new".into()),
            template: false,
            last: false,
            image_repository: None,
        }
    );
    assert_eq!(p.facts.trust_rollout, Some((0, 3)));
    // c-a is told, its Pod still runs the old bundle: wait, restart nothing else.
    let p = trust_run(
        [Some("new"), Some("old"), Some("old")],
        [Some("old"), Some("old"), Some("old")],
        "new",
        2,
    );
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("restarting member c-a")),
        "{:?}",
        p.action
    );
    // c-a runs it: the other follower, c-c, next.
    let p = trust_run(
        [Some("new"), Some("old"), Some("old")],
        [Some("new"), Some("old"), Some("old")],
        "new",
        2,
    );
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-c".into(),
            trust_bundle: Some("new".into()),
            template: false,
            last: false,
            image_repository: None,
        }
    );
    assert_eq!(p.facts.trust_rollout, Some((1, 3)));
}

#[test]
fn the_leader_goes_last_after_leadership_moved_to_an_updated_member() {
    let p = trust_run(
        [Some("old"), Some("new"), Some("new")],
        [Some("old"), Some("new"), Some("new")],
        "new",
        1,
    );
    assert_eq!(
        p.action,
        Action::MoveLeader {
            from: "c-a".into(),
            to: "c-b".into(),
            to_id: 2
        }
    );
    // Leadership moved to c-b: c-a, the last, is restarted.
    let p = trust_run(
        [Some("old"), Some("new"), Some("new")],
        [Some("old"), Some("new"), Some("new")],
        "new",
        2,
    );
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-a".into(),
            trust_bundle: Some("new".into()),
            template: false,
            last: true,
            image_repository: None,
        }
    );
}

#[test]
fn a_ca_bundle_rollout_step_waits_for_a_whole_cluster() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut members: Vec<MemberView> = ["c-a", "c-b", "c-c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut v = m(name, i as i64);
            v.trust_bundle = Some("old".into());
            v
        })
        .collect();
    members[2].pod.as_mut().unwrap().ready = false;
    let p = plan_trust(
        &c,
        members,
        etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", false),
            e(3, "c-c", false),
        ]),
        "new",
        1,
    );
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("every member is a Ready voter")),
        "{:?}",
        p.action
    );
}

#[test]
fn a_memory_member_is_replaced_not_restarted_for_a_new_ca_bundle() {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let members: Vec<MemberView> = ["c-a", "c-b", "c-c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut v = m(name, i as i64);
            v.memory = true;
            v.trust_bundle = Some("old".into());
            v
        })
        .collect();
    let p = plan_trust(
        &c,
        members,
        etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", false),
            e(3, "c-c", false),
        ]),
        "new",
        3,
    );
    assert_eq!(
        p.action,
        Action::DeleteMember {
            member: "c-a".into(),
            why: DeleteReason::Rollout
        }
    );
}

#[test]
fn a_new_member_without_a_pod_yet_is_not_taken_for_a_restart() {
    // c-c was just added: its member records the current bundle, its Pod does not exist yet.
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut members: Vec<MemberView> = ["c-a", "c-b", "c-c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut v = m(name, i as i64);
            v.trust_bundle = Some("t".into());
            if let Some(p) = v.pod.as_mut() {
                p.trust_bundle = Some("t".into());
            }
            v
        })
        .collect();
    members[2].pod = None;
    members[2].recorded_pod_uid = None;
    let p = plan_trust(
        &c,
        members,
        etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", false),
            e(3, "c-c", true),
        ]),
        "t",
        1,
    );
    assert_eq!(p.facts.trust_rollout, None);
    assert!(
        !matches!(&p.action, Action::Wait(w) if w.contains("restarting")),
        "{:?}",
        p.action
    );
}

#[test]
fn a_paused_rollout_restarts_no_further_member_until_resumed() {
    let mut c = cluster(3, locked(3, Some(0xabc), None));
    c.spec.version = "3.6.12".into();
    c.metadata.annotations = Some(
        [(
            api::labels::ROLLOUT_PAUSED_ANNOTATION.to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    let members = vec![m("c-a", 1), m("c-b", 2), m("c-c", 3)];
    let view = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    let run_with = |c: &EtcdCluster| {
        plan(&Observed {
            cluster: c,
            replace_broken_after: None,
            members: members.clone(),
            etcd: view.clone(),
            now: ts(100),
            cert_manager_missing: false,
            tls_secret_problem: None,
            waiting_for_certificate: false,
            auth_problem: None,
            trust_bundle: None,
            leader: Some(1),
            image_repository: None,
            restoring: None,
            ca_trust: None,
        })
    };
    let p = run_with(&c);
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("paused")),
        "{:?}",
        p.action
    );
    assert!(p.facts.rollout_paused);
    let s = crate::cluster::status::render(&c, &p, None, ts(100));
    let progressing = s
        .conditions
        .iter()
        .find(|x| x.type_ == api::conditions::cluster::PROGRESSING)
        .unwrap();
    assert!(
        progressing.message.contains("paused by"),
        "{}",
        progressing.message
    );
    c.metadata.annotations = None;
    assert!(matches!(run_with(&c).action, Action::RollMember { .. }));
}

/// A whole 3-member cluster (ids 1, 2, 3 for c-a, c-b, c-c) whose members record the image
/// repository `members[i]` and whose Pods run `pods[i]`, planned with the operator's flag `want`.
fn repository_run(
    members: [Option<&str>; 3],
    pods: [Option<&str>; 3],
    want: &str,
    leader: u64,
) -> Plan {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let views = ["c-a", "c-b", "c-c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut v = m(name, i as i64);
            v.image_repository = members[i].map(str::to_string);
            if let Some(p) = v.pod.as_mut() {
                p.image_repository = pods[i].map(str::to_string);
            }
            v
        })
        .collect();
    let etcd = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    plan(&Observed {
        cluster: &c,
        replace_broken_after: None,
        members: views,
        etcd,
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: None,
        leader: Some(leader),
        image_repository: Some(want.into()),
        restoring: None,
        ca_trust: None,
    })
}

#[test]
fn members_without_a_recorded_image_repository_record_the_flag_without_a_restart() {
    let p = repository_run(
        [None, Some("new"), None],
        [None, Some("new"), None],
        "new",
        1,
    );
    assert_eq!(
        p.action,
        Action::RecordImageRepository {
            member: "c-a".into(),
            repository: "new".into()
        }
    );
    assert_eq!(p.facts.image_rollout, None);
    let p = repository_run([Some("new"); 3], [Some("new"); 3], "new", 1);
    assert_eq!(p.action, Action::None);
    assert_eq!(p.phase, Phase::Reconciled);
}

#[test]
fn a_new_image_repository_rolls_followers_one_at_a_time_and_the_leader_last() {
    // c-a leads: c-b first, with only the repository to change.
    let p = repository_run([Some("old"); 3], [Some("old"); 3], "new", 1);
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-b".into(),
            trust_bundle: None,
            template: false,
            image_repository: Some("new".into()),
            last: false,
        }
    );
    assert_eq!(p.facts.image_rollout, Some((0, 3)));
    // c-b is told, its Pod still runs the old image: nothing else is restarted meanwhile.
    let p = repository_run(
        [Some("old"), Some("new"), Some("old")],
        [Some("old"), Some("old"), Some("old")],
        "new",
        1,
    );
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("restarting member c-b")),
        "{:?}",
        p.action
    );
    // Followers done: leadership moves to an updated member before the leader's turn.
    let p = repository_run(
        [Some("old"), Some("new"), Some("new")],
        [Some("old"), Some("new"), Some("new")],
        "new",
        1,
    );
    assert_eq!(
        p.action,
        Action::MoveLeader {
            from: "c-a".into(),
            to: "c-b".into(),
            to_id: 2
        }
    );
    assert_eq!(p.facts.image_rollout, Some((2, 3)));
    // A paused rollout restarts nobody.
    let mut c = cluster(3, locked(3, Some(0xabc), None));
    c.metadata.annotations = Some(
        [(
            api::labels::ROLLOUT_PAUSED_ANNOTATION.to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    let mut views = vec![m("c-a", 0), m("c-b", 1), m("c-c", 2)];
    for v in &mut views {
        v.image_repository = Some("old".into());
    }
    let p = plan(&Observed {
        cluster: &c,
        replace_broken_after: None,
        members: views,
        etcd: etcd(vec![
            e(1, "c-a", false),
            e(2, "c-b", false),
            e(3, "c-c", false),
        ]),
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: None,
        leader: Some(1),
        image_repository: Some("new".into()),
        restoring: None,
        ca_trust: None,
    });
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("paused")),
        "{:?}",
        p.action
    );
    assert!(p.facts.rollout_paused);
}

/// An unschedulable Pod since `since`, its Node gone with its local volume.
fn unschedulable(name: &str, since: i64) -> MemberView {
    let mut v = unschedulable_at(
        name,
        since,
        "0/3 nodes are available: 1 node(s) had volume node affinity conflict",
    );
    v.data_home = DataHome::NodeGone {
        node: format!("node-{name}"),
    };
    v
}

/// A member whose Pod has been unschedulable since `since` with the scheduler's `message`, its
/// data's home not looked up.
fn unschedulable_at(name: &str, since: i64, message: &str) -> MemberView {
    let mut v = m(name, 2);
    v.pod = Some(PodView {
        uid: format!("pod-{name}-2"),
        ready: false,
        unschedulable: Some((ts(since), message.into())),
        ..Default::default()
    });
    v
}

fn run_replacing(c: &EtcdCluster, members: Vec<MemberView>, after: Option<i64>) -> Plan {
    let three = etcd(vec![
        e(1, "c-a", false),
        e(2, "c-b", false),
        e(3, "c-c", false),
    ]);
    run_with(c, members, three, after)
}

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

/// The scheduler's message for a Pod that asks for more cpu than any Node has.
const NO_CPU: &str = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are \
    available: 3 No preemption victims found for incoming pod.";

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

/// What a rollout is for: a spec edit (new template), a new CA bundle, a new image repository.
#[derive(Clone, Copy, Debug)]
enum RolloutCause {
    Template,
    TrustBundle,
    ImageRepository,
}

/// A whole Memory cluster of `names` (ids 1.. in order, the first leading) whose members run
/// the old CA bundle, image repository and template, planned with `cause` changed.
fn memory_rollout_run(names: &[&str], cause: RolloutCause) -> (EtcdCluster, Plan) {
    let replicas = names.len() as i32;
    let mut c = cluster(replicas, locked(replicas, Some(0xabc), None));
    if let RolloutCause::Template = cause {
        c.spec.version = "3.6.12".into();
    }
    let members = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut v = m(name, i as i64);
            v.memory = true;
            v.trust_bundle = Some("old".into());
            v.image_repository = Some("old".into());
            if let Some(p) = v.pod.as_mut() {
                p.trust_bundle = Some("old".into());
                p.image_repository = Some("old".into());
            }
            v
        })
        .collect();
    let view = etcd(
        names
            .iter()
            .enumerate()
            .map(|(i, name)| e(i as u64 + 1, name, false))
            .collect(),
    );
    let p = plan(&Observed {
        cluster: &c,
        replace_broken_after: None,
        members,
        etcd: view,
        now: ts(100),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: Some(match cause {
            RolloutCause::TrustBundle => "new".into(),
            _ => "old".into(),
        }),
        leader: Some(1),
        image_repository: Some(match cause {
            RolloutCause::ImageRepository => "new".into(),
            _ => "old".into(),
        }),
        restoring: None,
        ca_trust: None,
    });
    (c, p)
}

/// Deleting the only member of a Memory cluster deletes the only copy of its data: no rollout
/// (spec edit, CA bundle, image repository) ever does it; the cluster says why and what to do.
#[test]
fn a_rollout_never_deletes_the_only_member_of_a_memory_cluster() {
    for cause in [
        RolloutCause::Template,
        RolloutCause::TrustBundle,
        RolloutCause::ImageRepository,
    ] {
        let (_, p) = memory_rollout_run(&["c-a"], cause);
        assert!(
            !matches!(p.action, Action::DeleteMember { .. }),
            "{cause:?}: {:?}",
            p.action
        );
        assert!(
            matches!(&p.action, Action::Wait(w) if w.contains("c-a") && w.contains("only copy")),
            "{cause:?}: {:?}",
            p.action
        );
    }
}

/// With other voters holding the data, Memory members are still replaced one at a time.
#[test]
fn a_memory_rollout_with_three_members_replaces_one_at_a_time() {
    for cause in [
        RolloutCause::Template,
        RolloutCause::TrustBundle,
        RolloutCause::ImageRepository,
    ] {
        let (_, p) = memory_rollout_run(&["c-a", "c-b", "c-c"], cause);
        // c-a leads: a follower goes first.
        assert_eq!(
            p.action,
            Action::DeleteMember {
                member: "c-b".into(),
                why: DeleteReason::Rollout
            },
            "{cause:?}"
        );
    }
}

/// A seed restoring a snapshot slower than the progress deadline: the bootstrap is not given
/// up while the restore init container runs; the deadline is kept ahead and the restore shown.
#[test]
fn a_restore_running_past_the_deadline_is_not_a_failed_bootstrap() {
    let c = cluster(3, locked(3, None, Some(50)));
    let mut seed = m("c-seed", 1);
    seed.bootstrap = true;
    seed.pod.as_mut().unwrap().ready = false;
    let at = |restoring: Option<&str>| {
        plan(&Observed {
            cluster: &c,
            replace_broken_after: None,
            members: vec![seed.clone()],
            etcd: EtcdView::NotAsked,
            now: ts(100),
            cert_manager_missing: false,
            tls_secret_problem: None,
            waiting_for_certificate: false,
            auth_problem: None,
            trust_bundle: None,
            leader: None,
            image_repository: None,
            restoring: restoring.map(str::to_string),
            ca_trust: None,
        })
    };
    let p = at(Some("s3://snapshots/rc/rc-s3.db"));
    assert_eq!(p.phase, Phase::Progressing);
    assert!(
        p.progress_deadline.is_some_and(|d| d > ts(100)),
        "{:?}",
        p.progress_deadline
    );
    assert_eq!(
        p.facts.restoring.as_deref(),
        Some("s3://snapshots/rc/rc-s3.db")
    );
    let s = crate::cluster::status::render(&c, &p, None, ts(100));
    let progressing = s
        .conditions
        .iter()
        .find(|x| x.type_ == api::conditions::cluster::PROGRESSING)
        .unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("True", reason::RESTORING)
    );
    assert!(
        progressing.message.contains("s3://snapshots/rc/rc-s3.db"),
        "{}",
        progressing.message
    );
    // Not restoring (not started, or failed and waiting to be retried): the deadline holds.
    assert_eq!(at(None).phase, Phase::BootstrapFailed);
}

/// The refusal runs no deadline (it cannot run out into DeadlineExceeded while the user
/// decides), and the way out it names, a scale to 3, is locked at once: the new members join
/// first, then the old member is replaced with the data on two others.
#[test]
fn a_refused_memory_rollout_runs_no_deadline_and_a_scale_to_three_is_taken_at_once() {
    let (c, p) = memory_rollout_run(&["c-a"], RolloutCause::Template);
    assert_eq!(p.facts.memory_rollout_unsafe.as_deref(), Some("c-a"));
    assert_eq!(p.progress_deadline, None);
    assert_eq!(p.observed.version, "3.6.12");
    let mut scaled = c.clone();
    scaled.status = Some(crate::cluster::status::render(&c, &p, None, ts(100)));
    scaled.spec.replicas = 3;
    let mut a = m("c-a", 0);
    a.memory = true;
    let observed = |members: Vec<MemberView>, view: EtcdView| Observed {
        cluster: &scaled,
        replace_broken_after: None,
        members,
        etcd: view,
        now: ts(200),
        cert_manager_missing: false,
        tls_secret_problem: None,
        waiting_for_certificate: false,
        auth_problem: None,
        trust_bundle: None,
        leader: Some(1),
        image_repository: None,
        restoring: None,
        ca_trust: None,
    };
    let p = plan(&observed(vec![a.clone()], etcd(vec![e(1, "c-a", false)])));
    assert_eq!(p.locked_because, Some(reason::SPEC_CHANGED));
    assert_eq!(p.observed.replicas, 3);
    assert_eq!(p.facts.memory_rollout_unsafe, None);
    assert!(p.progress_deadline.is_some());
    assert_eq!(p.action, Action::CreateMember);
    // Three members, two on the new spec: the old one is now replaced.
    let new_template = crate::template::target_hash(&p.observed);
    let mut members = vec![a];
    for (name, created) in [("c-b", 1), ("c-c", 2)] {
        let mut v = m(name, created);
        v.memory = true;
        v.template_hash = new_template.clone();
        v.pod.as_mut().unwrap().template_hash = Some(new_template.clone());
        members.push(v);
    }
    let mut grown = scaled.clone();
    grown.status = Some(crate::cluster::status::render(&scaled, &p, None, ts(200)));
    let p = plan(&Observed {
        cluster: &grown,
        ..observed(
            members,
            etcd(vec![
                e(1, "c-a", false),
                e(2, "c-b", false),
                e(3, "c-c", false),
            ]),
        )
    });
    assert_eq!(p.facts.memory_rollout_unsafe, None);
    assert_eq!(
        p.action,
        Action::MoveLeader {
            from: "c-a".into(),
            to: "c-b".into(),
            to_id: 2
        }
    );
}

#[test]
fn a_member_left_unschedulable_by_a_reverted_edit_is_rolled_back_without_waiting_for_it() {
    // The user's edit asked for more cpu than any Node has; c-b was rolled first and its new Pod
    // cannot be scheduled. The user reverts: the locked target is the old template again, and
    // c-b is told the bad one. c-b serves nothing, so restarting it on the corrected template
    // costs no availability; waiting for it to be a Ready voter first would wait forever.
    let c = cluster(3, locked(3, Some(0xabc), None));
    let mut bad = ObservedSpec::of(&c.spec, None);
    bad.resources = Some(resources("64"));
    let bad = crate::template::target_hash(&bad);
    for pod in [
        unschedulable_at("c-b", 0, NO_CPU).pod.unwrap(),
        // Crashing on an option the edit set, not yet long enough to be replaced for it.
        PodView {
            restart_count: 2,
            ..crash_looping_pod("c-b")
        },
    ] {
        let mut b = m("c-b", 2);
        b.template_hash = bad.clone();
        b.pod = Some(PodView {
            template_hash: Some(bad.clone()),
            ..pod
        });
        b.data_home = DataHome::Reachable;
        let p = run_replacing(&c, vec![m("c-a", 1), b, m("c-c", 3)], None);
        assert_eq!(
            p.action,
            Action::RollMember {
                member: "c-b".into(),
                trust_bundle: None,
                template: true,
                image_repository: None,
                last: true,
            }
        );
    }
    // A stale member that runs (Ready) still waits its turn in the ordinary rollout, which needs
    // every member to be a Ready voter: here c-c is not.
    let mut b = m("c-b", 2);
    b.template_hash = bad.clone();
    b.pod.as_mut().unwrap().template_hash = Some(bad.clone());
    let mut down = m("c-c", 3);
    down.pod.as_mut().unwrap().ready = false;
    let p = run_replacing(&c, vec![m("c-a", 1), b, down], None);
    assert!(matches!(p.action, Action::Wait(_)), "{:?}", p.action);
}

/// A whole 3-member cluster (ids 1, 2, 3 for c-a, c-b, c-c, c-b leading) whose members and Pods
/// run trust bundle `fp` with the peer CAs `cas`, planned with the Secrets holding bundle
/// `want` of CAs `bundle` and a peer certificate issued by `leaf_ca`.
fn ca_change_run(fp: &str, cas: Option<&str>, want: &str, bundle: &[&str], leaf_ca: &str) -> Plan {
    let c = cluster(3, locked(3, Some(0xabc), None));
    let members = ["c-a", "c-b", "c-c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut v = m(name, i as i64);
            v.trust_bundle = Some(fp.into());
            v.trusted_cas = cas.map(str::to_string);
            if let Some(p) = v.pod.as_mut() {
                p.trust_bundle = Some(fp.into());
                p.trusted_cas = cas.map(str::to_string);
            }
            v
        })
        .collect();
    let set = |fps: &[&str]| fps.iter().map(|s| s.to_string()).collect();
    plan(&Observed {
        trust_bundle: Some(want.into()),
        ca_trust: Some(crate::tls::CaTrust {
            bundles: crate::tls::CaSet {
                peer: set(bundle),
                client: Default::default(),
            },
            presented: vec![crate::tls::Presented {
                bundle: crate::tls::Bundle::Peer,
                secret: "n/c-peer".into(),
                origin: "spec.tls.peer.secretRef".into(),
                what: "peer certificate",
                anchors: set(&[leaf_ca]),
            }],
            changed: Some(ts(50)),
        }),
        leader: Some(2),
        ..observed(
            &c,
            members,
            etcd(vec![
                e(1, "c-a", false),
                e(2, "c-b", false),
                e(3, "c-c", false),
            ]),
        )
    })
}

#[test]
fn a_one_step_ca_change_is_refused_with_a_condition_and_no_member_restarted() {
    // ca.crt and the peer leaf moved from CA aa to CA bb in one edit; every member loaded aa.
    let p = ca_change_run("old", Some("peer=aa"), "new", &["bb"], "bb");
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("refused")),
        "{:?}",
        p.action
    );
    assert_eq!(p.progress_deadline, None);
    let s = crate::cluster::status::render(
        &cluster(3, locked(3, Some(0xabc), None)),
        &p,
        None,
        ts(100),
    );
    let progressing = s
        .conditions
        .iter()
        .find(|x| x.type_ == api::conditions::cluster::PROGRESSING)
        .unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("False", reason::UNSAFE_CA_CHANGE)
    );
    assert!(
        progressing
            .message
            .contains("Secret n/c-peer (spec.tls.peer.secretRef)")
            && progressing.message.contains("both the old and the new CA"),
        "{}",
        progressing.message
    );
}

#[test]
fn adding_a_ca_to_the_bundle_first_is_rolled() {
    let p = ca_change_run("old", Some("peer=aa"), "new", &["aa", "bb"], "aa");
    assert_eq!(p.facts.unsafe_ca_change, None);
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-a".into(),
            trust_bundle: Some("new".into()),
            template: false,
            last: false,
            image_repository: None,
        }
    );
    // Dropping the old CA once the leaves come from the new one: rolled too.
    let p = ca_change_run("both", Some("peer=aa,bb"), "new", &["bb"], "bb");
    assert!(
        matches!(p.action, Action::RollMember { .. }),
        "{:?}",
        p.action
    );
}

#[test]
fn a_member_running_the_current_bundle_records_its_ca_set_without_a_restart() {
    // Members of an operator version that recorded only the fingerprint.
    let p = ca_change_run("t", None, "t", &["aa"], "aa");
    assert_eq!(
        p.action,
        Action::RecordTrustBundle {
            member: "c-a".into(),
            trust_bundle: "t".into()
        }
    );
    assert_eq!(p.facts.trust_rollout, None);
    // Recorded: nothing to do.
    let p = ca_change_run("t", Some("peer=aa"), "t", &["aa"], "aa");
    assert_eq!(p.action, Action::None);
}

#[test]
fn an_adopted_member_whose_etcd_started_before_the_ca_changed_is_recorded_unknown_and_rolled() {
    // Adopted members record no bundle; the Secrets' ca.crt last changed at ts(50).
    let run = |starts: [i64; 3], recorded: [Option<&str>; 3]| {
        let c = cluster(3, locked(3, Some(0xabc), None));
        let members = ["c-a", "c-b", "c-c"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut v = m(name, i as i64);
                let cas = recorded[i].map(|r| if r == "new" { "peer=aa" } else { r });
                v.trust_bundle = recorded[i].map(str::to_string);
                v.trusted_cas = cas.map(str::to_string);
                if let Some(p) = v.pod.as_mut() {
                    p.trust_bundle = recorded[i].map(str::to_string);
                    p.trusted_cas = cas.map(str::to_string);
                    p.started = Some(ts(starts[i]));
                }
                v
            })
            .collect();
        plan(&Observed {
            trust_bundle: Some("new".into()),
            ca_trust: Some(crate::tls::CaTrust {
                changed: Some(ts(50)),
                ..Default::default()
            }),
            leader: Some(2),
            ..observed(
                &c,
                members,
                etcd(vec![
                    e(1, "c-a", false),
                    e(2, "c-b", false),
                    e(3, "c-c", false),
                ]),
            )
        })
    };
    // c-a's etcd started before the change: it may run the old bundle.
    let p = run([40, 60, 60], [None, None, None]);
    assert_eq!(
        p.action,
        Action::RecordTrustBundle {
            member: "c-a".into(),
            trust_bundle: crate::cluster::ca_set::UNKNOWN.into()
        }
    );
    // c-b started after it: it runs the current one.
    let p = run([40, 60, 60], [Some("unknown"), None, None]);
    assert_eq!(
        p.action,
        Action::RecordTrustBundle {
            member: "c-b".into(),
            trust_bundle: "new".into()
        }
    );
    // Recorded: c-a, unknown, is rolled (one at a time, the usual rollout).
    let p = run([40, 60, 60], [Some("unknown"), Some("new"), Some("new")]);
    assert_eq!(p.facts.trust_rollout, Some((2, 3)));
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-a".into(),
            trust_bundle: Some("new".into()),
            template: false,
            last: true,
            image_repository: None,
        }
    );
}
