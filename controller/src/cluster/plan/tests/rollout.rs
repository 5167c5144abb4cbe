//! Rolling restarts for a new trust bundle, template or etcd image repository; Memory members.

use super::*;

/// `v` rolled to `target`: the member and its Pod on its template.
fn on_template(mut v: MemberView, target: &ObservedSpec) -> MemberView {
    v.template_hash = crate::template::target_hash(target);
    if let Some(p) = v.pod.as_mut() {
        p.template_hash = Some(v.template_hash.clone());
    }
    v
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
        restore_failure: None,
        kept_claims: Default::default(),
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
    let updated = |v: MemberView| on_template(v, &p.observed);
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

#[test]
fn placement_edit_rolls_the_members_one_at_a_time_the_leader_last() {
    let mut c = cluster(3, locked(3, Some(0xabc), None));
    c.spec.priority_class_name = Some("etcd-critical".into());
    c.spec.node_selector = [("dedicated".to_string(), "etcd".to_string())].into();
    let led_by = |c: &EtcdCluster, members: Vec<MemberView>, leader| {
        plan(&Observed {
            leader: Some(leader),
            ..observed(c, members, three_voters())
        })
    };
    let p = led_by(&c, vec![m("c-a", 1), m("c-b", 2), m("c-c", 3)], 3);
    assert_eq!(p.locked_because, Some(reason::SPEC_CHANGED));
    assert_eq!(
        p.observed.priority_class_name.as_deref(),
        Some("etcd-critical")
    );
    assert_eq!(p.facts.template_rollout, Some((0, 3)));
    // c-c leads: a follower first, one member per step.
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-a".into(),
            trust_bundle: None,
            template: true,
            last: false,
            image_repository: None,
        }
    );
    // The members created from the new target carry it.
    let next = member_spec("c", &p.observed, "tok".into(), false, None);
    assert_eq!(next.priority_class_name.as_deref(), Some("etcd-critical"));
    assert_eq!(next.node_selector["dedicated"], "etcd");

    // Both followers on the new template: the leader hands over before it is rolled.
    let mut c2 = c.clone();
    c2.status = Some(crate::cluster::status::render(&c, &p, None, ts(100)));
    let updated = |v: MemberView| on_template(v, &p.observed);
    let members = vec![updated(m("c-a", 1)), updated(m("c-b", 2)), m("c-c", 3)];
    let p = led_by(&c2, members.clone(), 3);
    assert_eq!(p.facts.template_rollout, Some((2, 3)));
    assert!(
        matches!(&p.action, Action::MoveLeader { from, .. } if from == "c-c"),
        "{:?}",
        p.action
    );
    let p = led_by(&c2, members, 1);
    assert_eq!(
        p.action,
        Action::RollMember {
            member: "c-c".into(),
            trust_bundle: None,
            template: true,
            last: true,
            image_repository: None,
        }
    );
}

#[test]
fn a_cluster_without_placement_fields_rolls_nothing() {
    // Members built before the placement fields existed: their template is the target's.
    let c = cluster(3, locked(3, Some(0xabc), None));
    assert!(c.spec.tolerations.is_empty() && c.spec.priority_class_name.is_none());
    let p = run(
        &c,
        vec![m("c-a", 1), m("c-b", 2), m("c-c", 3)],
        three_voters(),
    );
    assert_eq!(p.facts.template_rollout, None);
    assert!(
        !matches!(p.action, Action::RollMember { .. }),
        "{:?}",
        p.action
    );
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
        Action::Record {
            member: "c-a".into(),
            revision: Revision::TrustBundle,
            value: "new".into()
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
            restore_failure: None,
            kept_claims: Default::default(),
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
        restore_failure: None,
        kept_claims: Default::default(),
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
        Action::Record {
            member: "c-a".into(),
            revision: Revision::ImageRepository,
            value: "new".into()
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
        restore_failure: None,
        kept_claims: Default::default(),
        ca_trust: None,
    });
    assert!(
        matches!(&p.action, Action::Wait(w) if w.contains("paused")),
        "{:?}",
        p.action
    );
    assert!(p.facts.rollout_paused);
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
        restore_failure: None,
        kept_claims: Default::default(),
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
        restore_failure: None,
        kept_claims: Default::default(),
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
