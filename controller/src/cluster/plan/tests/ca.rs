//! CA changes judged by the CAs each member loaded: refused, rolled, recorded.

use super::*;

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
        Action::Record {
            member: "c-a".into(),
            revision: Revision::TrustBundle,
            value: "t".into()
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
        Action::Record {
            member: "c-a".into(),
            revision: Revision::TrustBundle,
            value: crate::cluster::ca_set::UNKNOWN.into()
        }
    );
    // c-b started after it: it runs the current one.
    let p = run([40, 60, 60], [Some("unknown"), None, None]);
    assert_eq!(
        p.action,
        Action::Record {
            member: "c-b".into(),
            revision: Revision::TrustBundle,
            value: "new".into()
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
