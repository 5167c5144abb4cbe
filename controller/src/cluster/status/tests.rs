use super::*;
use crate::cluster::plan::Plan;
use api::v1alpha2::{EtcdClusterSpec, ObservedSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

fn cluster() -> EtcdCluster {
    let mut c = EtcdCluster::new(
        "c",
        EtcdClusterSpec {
            version: "3.6.11".into(),
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("n".into());
    c.metadata.uid = Some("u1".into());
    c
}

fn plan(replicas: i32, phase: Phase, facts: Facts, action: Action) -> Plan {
    Plan {
        observed: ObservedSpec {
            replicas,
            version: "3.6.11".into(),
            ..Default::default()
        },
        progress_deadline: None,
        locked_because: None,
        phase,
        action,
        hold: Hold::first(&facts, phase),
        facts,
    }
}

fn cond<'a>(s: &'a EtcdClusterStatus, t: &str) -> &'a Condition {
    s.conditions
        .iter()
        .find(|c| c.type_ == t)
        .expect("condition")
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

#[test]
fn healthy_cluster_reports_quorum_healthy_and_reconciled() {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("00000000000000ab".into()),
        ..Default::default()
    });
    let facts = Facts {
        formed: true,
        ready_members: 3,
        voters: 3,
        ready_voters: 3,
        live_members: 3,
        ..Default::default()
    };
    let s = render(
        &c,
        &plan(3, Phase::Reconciled, facts, Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_HEALTHY);
    assert_eq!(cond(&s, ctype::PROGRESSING).reason, reason::RECONCILED);
    assert_eq!(cond(&s, ctype::DEGRADED).status, "False");
    assert_eq!(s.cluster_token.as_deref(), Some("n-c-u1"));
    assert_eq!(
        s.selector.as_deref(),
        Some("etcd-operator.cozystack.io/cluster=c")
    );
    assert_eq!(s.ready_members, 3);
}

/// A formed cluster paused with its data kept on PVC `data-c-x`.
fn paused_with_data() -> Facts {
    Facts {
        formed: true,
        live_members: 1,
        dormant_pvc: Some("data-c-x".into()),
        ..Default::default()
    }
}

#[test]
fn paused_message_names_the_preserved_pvc_or_says_never_bootstrapped() {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let facts = paused_with_data();
    let s = render(
        &c,
        &plan(0, Phase::Reconciled, facts, Action::None),
        None,
        now(),
    );
    let a = cond(&s, ctype::AVAILABLE);
    assert_eq!(
        (a.status.as_str(), a.reason.as_str()),
        ("False", reason::PAUSED)
    );
    assert!(
        a.message.contains("data is preserved on PVC data-c-x"),
        "{}",
        a.message
    );
    let s = render(
        &cluster(),
        &plan(0, Phase::Reconciled, Facts::default(), Action::None),
        None,
        now(),
    );
    assert!(cond(&s, ctype::AVAILABLE)
        .message
        .contains("never bootstrapped"));
}

#[test]
fn minority_ready_is_quorum_lost_and_majority_is_quorum_available() {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let f = |ready| Facts {
        formed: true,
        ready_members: ready,
        voters: 3,
        ready_voters: ready,
        live_members: 3,
        ..Default::default()
    };
    let s = render(
        &c,
        &plan(3, Phase::Progressing, f(1), Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_LOST);
    assert_eq!(cond(&s, ctype::DEGRADED).reason, reason::QUORUM_LOST);
    let s = render(
        &c,
        &plan(3, Phase::Progressing, f(2), Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_AVAILABLE);
    assert_eq!(cond(&s, ctype::DEGRADED).reason, reason::MEMBERS_UNHEALTHY);
}

#[test]
fn unchanged_condition_keeps_its_transition_time() {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let facts = Facts {
        formed: true,
        ready_members: 1,
        voters: 1,
        ready_voters: 1,
        live_members: 1,
        ..Default::default()
    };
    let first = render(
        &c,
        &plan(1, Phase::Reconciled, facts.clone(), Action::None),
        None,
        now(),
    );
    c.status = Some(first.clone());
    let later = Timestamp::from_second(1_800_000_999).unwrap();
    let second = render(
        &c,
        &plan(1, Phase::Reconciled, facts, Action::None),
        None,
        later,
    );
    assert_eq!(
        first, second,
        "a steady cluster renders an identical status"
    );
}

#[test]
fn a_failed_seed_restore_shows_the_agents_message_on_available_and_progressing() {
    let facts = Facts {
        restore_failure: Some("not enough space to restore: the snapshot is 2.0 MiB".into()),
        live_members: 1,
        ..Default::default()
    };
    let s = render(
        &cluster(),
        &plan(3, Phase::Progressing, facts, Action::None),
        None,
        now(),
    );
    for t in [ctype::AVAILABLE, ctype::PROGRESSING] {
        let c = cond(&s, t);
        assert_eq!(c.reason, reason::RESTORE_FAILED, "{t}");
        assert!(
            c.message.contains("not enough space to restore"),
            "{t}: {}",
            c.message
        );
        assert!(c.message.contains("-c restore"), "{t}: {}", c.message);
    }
    assert_eq!(cond(&s, ctype::AVAILABLE).status, "False");
}

#[test]
fn unsupported_fields_are_named_with_the_way_out() {
    let facts = Facts {
        unsupported: vec!["spec.auth.enabled"],
        ..Default::default()
    };
    let s = render(
        &cluster(),
        &plan(3, Phase::Progressing, facts, Action::None),
        None,
        now(),
    );
    for t in [ctype::AVAILABLE, ctype::PROGRESSING] {
        let c = cond(&s, t);
        assert_eq!(c.status, "False");
        assert_eq!(c.reason, reason::SPEC_NOT_SUPPORTED);
        assert!(
            c.message.contains("spec.auth.enabled") && c.message.contains("recreate"),
            "{}",
            c.message
        );
    }
}

#[test]
fn an_unusable_tls_secret_is_named_while_the_operator_waits_for_it() {
    let problem = "Secret ns/c-peer-tls (spec.tls.peer.secretRef) does not exist; create it \
                   with the keys tls.crt, tls.key, ca.crt";
    let facts = Facts {
        tls_secret_problem: Some(problem.to_string()),
        ..Default::default()
    };
    let s = render(
        &cluster(),
        &plan(3, Phase::Progressing, facts, Action::None),
        None,
        now(),
    );
    for (t, status) in [(ctype::AVAILABLE, "False"), (ctype::PROGRESSING, "True")] {
        let c = cond(&s, t);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (status, reason::TLS_SECRET_NOT_READY, problem),
            "{t}"
        );
    }
}

#[test]
fn cert_manager_waits_are_their_own_reasons() {
    let waiting =
        "waiting for cert-manager to issue Secret ns/c-server-tls for Certificate c-server";
    let facts = Facts {
        tls_secret_problem: Some(waiting.to_string()),
        waiting_for_certificate: true,
        ..Default::default()
    };
    let s = render(
        &cluster(),
        &plan(3, Phase::Progressing, facts, Action::None),
        None,
        now(),
    );
    for (t, status) in [(ctype::AVAILABLE, "False"), (ctype::PROGRESSING, "True")] {
        let c = cond(&s, t);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (status, reason::WAITING_FOR_CERTIFICATE, waiting),
            "{t}"
        );
    }
    let facts = Facts {
        cert_manager_missing: true,
        ..Default::default()
    };
    let s = render(
        &cluster(),
        &plan(3, Phase::Progressing, facts, Action::None),
        None,
        now(),
    );
    for t in [ctype::AVAILABLE, ctype::PROGRESSING] {
        let c = cond(&s, t);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", reason::CERT_MANAGER_NOT_INSTALLED),
            "{t}"
        );
        assert!(c.message.contains("install cert-manager"), "{}", c.message);
    }
}

#[test]
fn terminal_phases_name_the_recovery() {
    let s = render(
        &cluster(),
        &plan(3, Phase::BootstrapFailed, Facts::default(), Action::None),
        None,
        now(),
    );
    let a = cond(&s, ctype::AVAILABLE);
    assert_eq!(a.reason, reason::BOOTSTRAP_FAILED);
    assert!(a.message.contains("delete"), "{}", a.message);
    let s = render(
        &cluster(),
        &plan(
            3,
            Phase::Progressing,
            Facts {
                seed_without_pod: true,
                ..Default::default()
            },
            Action::None,
        ),
        None,
        now(),
    );
    assert_eq!(
        cond(&s, ctype::PROGRESSING).reason,
        reason::WAITING_FOR_SEED
    );
}

#[test]
fn a_refused_memory_rollout_names_the_member_why_and_the_ways_out() {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let facts = Facts {
        formed: true,
        ready_members: 1,
        voters: 1,
        ready_voters: 1,
        live_members: 1,
        template_rollout: Some((0, 1)),
        memory_rollout_unsafe: Some("c-x7k2p".into()),
        ..Default::default()
    };
    let s = render(
        &c,
        &plan(1, Phase::Progressing, facts, Action::Wait("refused".into())),
        None,
        now(),
    );
    let p = cond(&s, ctype::PROGRESSING);
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("False", reason::MEMORY_ROLLOUT_UNSAFE)
    );
    for part in [
        "c-x7k2p",
        "only copy",
        "the spec",
        "--replicas=3",
        "revert the change",
    ] {
        assert!(p.message.contains(part), "{part}: {}", p.message);
    }
    // The cluster itself serves: only the rollout is refused.
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_HEALTHY);
}

#[test]
fn a_running_restore_is_reported_with_its_source_unless_an_attempt_failed() {
    let facts = Facts {
        restoring: Some("pvc://backups/etcd/rc.db".into()),
        live_members: 1,
        ..Default::default()
    };
    let s = render(
        &cluster(),
        &plan(3, Phase::Progressing, facts.clone(), Action::None),
        None,
        now(),
    );
    for (t, status) in [(ctype::AVAILABLE, "False"), (ctype::PROGRESSING, "True")] {
        let c = cond(&s, t);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            (status, reason::RESTORING),
            "{t}"
        );
        assert!(
            c.message.contains("pvc://backups/etcd/rc.db"),
            "{t}: {}",
            c.message
        );
    }
    // A retry after a failed attempt keeps the failure's message.
    let facts = Facts {
        restore_failure: Some("checksum mismatch".into()),
        ..facts
    };
    let s = render(
        &cluster(),
        &plan(3, Phase::Progressing, facts, Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::PROGRESSING).reason, reason::RESTORE_FAILED);
}

#[test]
fn bootstrap_after_waiting_for_seed_is_still_the_initial_snapshot() {
    let mut c = cluster();
    let waiting = render(
        &c,
        &plan(
            3,
            Phase::Progressing,
            Facts {
                seed_without_pod: true,
                ..Default::default()
            },
            Action::None,
        ),
        None,
        now(),
    );
    c.status = Some(waiting);
    let s = render(
        &c,
        &plan(3, Phase::Progressing, Facts::default(), Action::None),
        None,
        now(),
    );
    let p = cond(&s, ctype::PROGRESSING);
    assert_eq!(
        (p.status.as_str(), p.reason.as_str()),
        ("True", reason::INITIAL_SNAPSHOT)
    );
}

#[test]
fn a_member_whose_pod_cannot_be_scheduled_is_named_with_the_schedulers_message() {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let message = "0/3 nodes are available: 3 Insufficient cpu.";
    let facts = Facts {
        formed: true,
        ready_members: 2,
        voters: 3,
        ready_voters: 2,
        live_members: 3,
        template_rollout: Some((1, 3)),
        unschedulable: Some(("c-b".into(), message.into())),
        ..Default::default()
    };
    let s = render(
        &c,
        &plan(3, Phase::Progressing, facts, Action::None),
        None,
        now(),
    );
    for t in [ctype::DEGRADED, ctype::PROGRESSING] {
        let m = &cond(&s, t).message;
        assert!(
            m.contains("member c-b's Pod cannot be scheduled") && m.contains(message),
            "{t}: {m}"
        );
    }
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_AVAILABLE);
}

/// A formed 3-member cluster whose members report no Ready Pod; `lost`: none has a Pod at all
/// and etcd did not answer.
fn members_down(lost: bool) -> Facts {
    Facts {
        formed: true,
        ready_members: 0,
        voters: 3,
        ready_voters: 0,
        live_members: 3,
        broken_members: 3,
        all_members_lost: lost,
        etcd_error: None,
        ..Default::default()
    }
}

/// The cluster after a status rendered at `at` from `facts`.
fn rendered_at(facts: Facts, at: Timestamp) -> EtcdCluster {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let status = render(
        &c,
        &plan(3, Phase::Reconciled, facts, Action::None),
        None,
        at,
    );
    c.status = Some(status);
    c
}

#[test]
fn every_member_gone_for_a_while_is_all_members_lost_naming_the_recovery() {
    // Quorum was lost a minute ago (the Pods went), and still no member has a Pod.
    let before = now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(60))
        .unwrap();
    let c = rendered_at(members_down(true), before);
    let s = render(
        &c,
        &plan(3, Phase::Reconciled, members_down(true), Action::None),
        None,
        now(),
    );
    for (t, status) in [
        (ctype::AVAILABLE, "False"),
        (ctype::PROGRESSING, "False"),
        (ctype::DEGRADED, "True"),
    ] {
        let got = cond(&s, t);
        assert_eq!(
            (got.status.as_str(), got.reason.as_str()),
            (status, reason::ALL_MEMBERS_LOST),
            "{t}"
        );
    }
    assert_eq!(s.ready_members, 0);
    let message = &cond(&s, ctype::AVAILABLE).message;
    for part in [
        "every member is gone",
        "Complete and Verified EtcdSnapshot",
        "kubectl get etcdsnapshot -n",
        r#""snapshot":{"name":"<snapshot>"}"#,
        "docs/disaster-recovery.md",
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
    // Said once, it stays while the loss lasts (no flapping back to QuorumLost).
    let mut again = c.clone();
    again.status = Some(s);
    let s = render(
        &again,
        &plan(3, Phase::Reconciled, members_down(true), Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::ALL_MEMBERS_LOST);
}

#[test]
fn a_moment_without_member_pods_is_quorum_lost_not_all_members_lost() {
    // Available was True until now: a Pod being recreated leaves none for a moment.
    let healthy = Facts {
        ready_members: 3,
        ready_voters: 3,
        broken_members: 0,
        ..members_down(false)
    };
    let c = rendered_at(healthy, now());
    let s = render(
        &c,
        &plan(3, Phase::Reconciled, members_down(true), Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_LOST);
    assert_eq!(cond(&s, ctype::DEGRADED).reason, reason::QUORUM_LOST);
}

#[test]
fn all_members_lost_clears_as_soon_as_a_member_pod_is_back() {
    let before = now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(60))
        .unwrap();
    let mut c = rendered_at(members_down(true), before);
    let lost = render(
        &c,
        &plan(3, Phase::Reconciled, members_down(true), Action::None),
        None,
        before
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(40))
            .unwrap(),
    );
    assert_eq!(
        cond(&lost, ctype::DEGRADED).reason,
        reason::ALL_MEMBERS_LOST
    );
    c.status = Some(lost);
    // The Pods exist again but are not Ready yet: quorum is still lost, the members are not.
    let s = render(
        &c,
        &plan(3, Phase::Reconciled, members_down(false), Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_LOST);
    assert_eq!(cond(&s, ctype::DEGRADED).reason, reason::QUORUM_LOST);
    assert_eq!(cond(&s, ctype::PROGRESSING).reason, reason::RECONCILED);
    // Ready again: healthy.
    let ready = Facts {
        ready_members: 3,
        ready_voters: 3,
        broken_members: 0,
        ..members_down(false)
    };
    let s = render(
        &c,
        &plan(3, Phase::Reconciled, ready, Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_HEALTHY);
    assert_eq!(cond(&s, ctype::DEGRADED).status, "False");
}

#[test]
fn quorum_lost_names_the_etcd_recovery_to_apply() {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let facts = Facts {
        formed: true,
        ready_members: 1,
        voters: 3,
        ready_voters: 1,
        live_members: 3,
        ..Default::default()
    };
    let s = render(
        &c,
        &plan(3, Phase::Progressing, facts, Action::None),
        None,
        now(),
    );
    for t in [ctype::AVAILABLE, ctype::DEGRADED] {
        let m = &cond(&s, t).message;
        assert!(
            m.contains(r#""kind":"EtcdRecovery""#)
                && m.contains(r#""name":"c-recovery""#)
                && m.contains(r#""survivor":{}"#)
                && m.contains("kubectl create -f -"),
            "{t}: {m}"
        );
    }
    // Available also names the rebuild from a snapshot, for when no member kept its data.
    let m = &cond(&s, ctype::AVAILABLE).message;
    assert!(
        m.contains("if no member kept its data")
            && m.contains(r#""snapshot":{"name":"<snapshot>"}"#)
            && m.contains(r#""name":"c-restore""#),
        "{m}"
    );
}

#[test]
fn all_members_lost_names_the_etcd_recovery_to_apply() {
    let before = now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(60))
        .unwrap();
    let c = rendered_at(members_down(true), before);
    let s = render(
        &c,
        &plan(3, Phase::Reconciled, members_down(true), Action::None),
        None,
        now(),
    );
    let available = cond(&s, ctype::AVAILABLE);
    assert_eq!(available.reason, reason::ALL_MEMBERS_LOST);
    let m = &available.message;
    assert!(
        m.contains(r#""survivor":{}"#)
            && m.contains(r#""snapshot":{"name":"<snapshot>"}"#)
            && m.contains(r#""name":"c-restore""#)
            && !m.contains("does not yet"),
        "{m}"
    );
}

#[test]
fn a_cluster_held_by_a_recovery_says_so_and_names_it() {
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let facts = Facts {
        formed: true,
        ready_members: 0,
        voters: 3,
        live_members: 3,
        recovery: Some("r1".into()),
        ..Default::default()
    };
    let p = plan(3, Phase::Progressing, facts, Action::None);
    assert_eq!(p.hold, Some(Hold::Recovering("r1".into())));
    let s = render(&c, &p, None, now());
    for t in [ctype::AVAILABLE, ctype::PROGRESSING] {
        let cond = cond(&s, t);
        assert_eq!(cond.reason, reason::RECOVERING, "{t}");
        assert!(cond.message.contains("EtcdRecovery r1"), "{}", cond.message);
    }
}

/// A cluster resumed after an hour's pause: the first reconcile sees no member Pod yet (the
/// woken Pods are being created). Available has been False (Paused) for an hour, but the loss
/// has not begun: it must read QuorumLost (not AllMembersLost), with the loss starting now.
#[test]
fn a_cluster_resumed_after_a_long_pause_is_not_all_members_lost_at_once() {
    let hour_ago = now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(3600))
        .unwrap();
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let paused = Facts {
        live_members: 3,
        ..paused_with_data()
    };
    let s = render(
        &c,
        &plan(0, Phase::Reconciled, paused, Action::None),
        None,
        hour_ago,
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::PAUSED);
    c.status = Some(s);
    let s = render(
        &c,
        &plan(3, Phase::Reconciled, members_down(true), Action::None),
        None,
        now(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_LOST);
    // Still within the 30 s that a Pod being created gets, counted from the loss itself.
    c.status = Some(s);
    let s = render(
        &c,
        &plan(3, Phase::Reconciled, members_down(true), Action::None),
        None,
        now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(20))
            .unwrap(),
    );
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_LOST);
    assert_eq!(s.quorum_lost_since, Some(Time(now())));
}

/// `status.quorumLostSince` is the outage's own start: set when the loss is first rendered, kept
/// while it lasts and while an EtcdRecovery holds the cluster (a recovery that failed and let go
/// names the same outage), cleared by anything else.
#[test]
fn quorum_lost_since_is_the_outage_start_kept_through_a_recovery_and_cleared_after() {
    let secs = |n: i64| {
        now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(n))
            .unwrap()
    };
    let mut c = cluster();
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("ab".into()),
        ..Default::default()
    });
    let healthy = Facts {
        ready_members: 3,
        ready_voters: 3,
        broken_members: 0,
        ..members_down(false)
    };
    let mut step = |facts: Facts, at: Timestamp| {
        let s = render(
            &c,
            &plan(3, Phase::Reconciled, facts, Action::None),
            None,
            at,
        );
        c.status = Some(s.clone());
        s
    };
    let s = step(healthy.clone(), now());
    assert_eq!(s.quorum_lost_since, None);
    let s = step(members_down(false), secs(10));
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_LOST);
    assert_eq!(s.quorum_lost_since, Some(Time(secs(10))));
    // Every Pod gone 20 s into the outage: AllMembersLost once 30 s have passed since its start.
    let s = step(members_down(true), secs(30));
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::QUORUM_LOST);
    let s = step(members_down(true), secs(40));
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::ALL_MEMBERS_LOST);
    assert_eq!(s.quorum_lost_since, Some(Time(secs(10))));
    // Held by a recovery: the same outage.
    let held = Facts {
        recovery: Some("r1".into()),
        ..members_down(true)
    };
    let s = step(held, secs(100));
    assert_eq!(cond(&s, ctype::AVAILABLE).reason, reason::RECOVERING);
    assert_eq!(s.quorum_lost_since, Some(Time(secs(10))));
    let s = step(members_down(false), secs(200));
    assert_eq!(s.quorum_lost_since, Some(Time(secs(10))));
    // A majority ready again ends it.
    let s = step(healthy, secs(300));
    assert_eq!(s.quorum_lost_since, None);
}
