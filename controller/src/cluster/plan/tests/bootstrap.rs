//! Bootstrap: the seed, its completion, the cluster ID latched once the seed is alone, a restore.

use super::*;

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
            restore_failure: None,
            kept_claims: Default::default(),
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
