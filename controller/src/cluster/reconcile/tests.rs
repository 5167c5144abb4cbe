use super::*;
use crate::cluster::act::{member_tls, needs_peer_auto_tls_restored};
use crate::cluster::plan::{self, Action, Phase};
use api::labels;
use api::v1alpha2::ObservedSpec;
use api::v1alpha2::{EtcdMember, MemberTls};

fn plan_at(phase: Phase, formed: bool, deadline: Option<Timestamp>) -> Plan {
    Plan {
        observed: ObservedSpec {
            replicas: 3,
            ..Default::default()
        },
        progress_deadline: deadline,
        locked_because: None,
        phase,
        action: Action::None,
        hold: None,
        facts: plan::Facts {
            formed,
            ..Default::default()
        },
    }
}

#[test]
fn a_running_deadline_wakes_the_reconcile_when_it_expires() {
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let at = |secs| Some(now + k8s_openapi::jiff::SignedDuration::from_secs(secs));
    // Before formation, nothing sends an event when a seed Pod stays Pending: the deadline
    // itself (or the seed re-dial) must wake the reconcile.
    let r = next_check(&plan_at(Phase::Progressing, false, at(3)), now);
    assert_eq!(r, Requeue::requeue(Duration::from_millis(3100)));
    let r = next_check(&plan_at(Phase::Progressing, false, at(600)), now);
    assert_eq!(r, Requeue::requeue(SEED_RECHECK));
    let r = next_check(&plan_at(Phase::Progressing, true, at(10)), now);
    assert_eq!(r, Requeue::requeue(Duration::from_millis(10_100)));
    // Parked: only a spec edit (a watch event) resumes it.
    let r = next_check(&plan_at(Phase::BootstrapFailed, false, at(-5)), now);
    assert_eq!(r, Requeue::await_change());
    let r = next_check(&plan_at(Phase::Reconciled, true, None), now);
    assert_eq!(r, Requeue::requeue(HEALTH_RECHECK));
}

#[test]
fn the_requeue_follows_the_planners_hold() {
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let held = |phase, hold| Plan {
        hold: Some(hold),
        ..plan_at(phase, true, None)
    };
    let tls = || Hold::TlsSecret {
        problem: "Secret ns/c-server does not exist".into(),
        waiting_for_certificate: false,
    };
    // What is waited on is looked at again soon: a Secret, or cert-manager's API.
    assert_eq!(
        next_check(&held(Phase::Progressing, tls()), now),
        Requeue::requeue(TLS_SECRET_RECHECK)
    );
    assert_eq!(
        next_check(&held(Phase::Progressing, Hold::CertManagerMissing), now),
        Requeue::requeue(CERT_MANAGER_RECHECK)
    );
    // Behind a passed deadline a missing Secret changes nothing: only a spec edit resumes.
    let mut parked = held(Phase::DeadlineExceeded, Hold::DeadlineExceeded);
    parked.facts.tls_secret_problem = Some("Secret ns/c-server does not exist".into());
    parked.facts.cert_manager_missing = true;
    assert_eq!(next_check(&parked, now), Requeue::await_change());
}

#[test]
fn a_lost_peer_auto_tls_annotation_is_restored_only_for_auto_tls_members() {
    let mut cluster = EtcdCluster::new("c", Default::default());
    let member = |auto: bool| {
        let mut m = EtcdMember::new("c-a", Default::default());
        m.spec.tls = auto.then(|| MemberTls {
            peer_auto_tls: true,
            ..MemberTls::default()
        });
        m
    };
    assert!(needs_peer_auto_tls_restored(
        &cluster,
        &[member(false), member(true)]
    ));
    assert!(!needs_peer_auto_tls_restored(&cluster, &[member(false)]));
    cluster.metadata.annotations = Some(
        [(
            labels::PEER_AUTO_TLS_ANNOTATION.to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    assert!(!needs_peer_auto_tls_restored(&cluster, &[member(true)]));
    assert_eq!(member_tls(&cluster).map(|t| t.peer_auto_tls), Some(true));
}
