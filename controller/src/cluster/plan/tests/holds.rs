//! Holds: cert-manager, TLS Secrets, root auth and a foreign cluster ID stop every membership change.

use super::*;

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
        restore_failure: None,
        kept_claims: Default::default(),
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
        restore_failure: None,
        kept_claims: Default::default(),
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
        restore_failure: None,
        kept_claims: Default::default(),
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
            restore_failure: None,
            kept_claims: Default::default(),
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

#[test]
fn a_recovery_holds_every_membership_change_until_it_lets_go() {
    let mut c = cluster(3, locked(3, Some(0xabc), Some(700)));
    let members = || vec![m("c-a", 1)];
    let one = || etcd(vec![e(1, "c-a", false)]);
    assert_eq!(run(&c, members(), one()).action, Action::CreateMember);
    c.metadata.annotations = Some(
        [(
            api::v1alpha2::RECOVERY_ANNOTATION.to_string(),
            "r1".to_string(),
        )]
        .into(),
    );
    let p = run(&c, members(), one());
    assert_eq!(p.hold, Some(Hold::Recovering("r1".into())));
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("EtcdRecovery r1")),
        "{:?}",
        p.action
    );
}
