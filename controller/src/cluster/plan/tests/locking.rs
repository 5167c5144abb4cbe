//! Locking the target: the first snapshot, mid-flight edits, the progress deadline and its parking.

use super::*;

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
fn reached_target_clears_the_deadline() {
    let c = cluster(1, locked(1, Some(0xabc), Some(700)));
    let p = run(&c, vec![m("c-a", 1)], etcd(vec![e(1, "c-a", false)]));
    assert_eq!(p.phase, Phase::Reconciled);
    assert_eq!(p.progress_deadline, None);
    assert_eq!(p.action, Action::None);
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
        (
            "tolerations",
            Box::new(|s| s.tolerations = vec![Default::default()]),
        ),
        (
            "nodeSelector",
            Box::new(|s| s.node_selector = [("a".into(), "b".into())].into()),
        ),
        (
            "priorityClassName",
            Box::new(|s| s.priority_class_name = Some("etcd-critical".into())),
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
