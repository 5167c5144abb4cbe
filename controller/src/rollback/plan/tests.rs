use super::*;
use crate::builders::pvc::member_pvc;
use crate::builders::tests::{cluster as bare_cluster, member as bare_member};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// A cluster as ours leaves it: our cleanup finalizer on, a resourceVersion read.
fn cluster() -> EtcdCluster {
    let mut c = bare_cluster("c", "n");
    c.metadata.finalizers = Some(vec![
        "other.example/keep".into(),
        labels::CLUSTER_CLEANUP_FINALIZER.into(),
    ]);
    c.metadata.resource_version = Some("10".into());
    c
}

/// A member as ours creates it: controlled by the cluster, the shared member finalizer on.
fn member(name: &str) -> EtcdMember {
    let mut m = bare_member(name, "c", "n");
    m.metadata.owner_references = controller_ref(&cluster()).map(|o| vec![o]);
    m.metadata.finalizers = Some(vec![labels::MEMBER_CLEANUP_FINALIZER.into()]);
    m.metadata.resource_version = Some(format!("rv-{name}"));
    m
}

/// Its data claim as ours writes it: the UID mark, no owner.
fn claim(m: &EtcdMember) -> PersistentVolumeClaim {
    let mut c = member_pvc(m).unwrap().unwrap();
    c.metadata.resource_version = Some(format!("rv-pvc-{}", m.name_any()));
    c
}

/// Its Pod as ours writes it: owned by the member.
fn pod(m: &EtcdMember) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(m.name_any()),
            owner_references: m.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn facts(members: &[EtcdMember]) -> Facts {
    Facts {
        cluster: cluster(),
        members: members.to_vec(),
        claims: members.iter().map(claim).collect(),
        pods: members.iter().map(pod).collect(),
    }
}

fn change<'a>(plan: &'a Plan, kind: Kind, name: &str) -> &'a Change {
    plan.changes
        .iter()
        .find(|c| c.kind == kind && c.name == name)
        .unwrap_or_else(|| panic!("no {kind:?} {name} change in {plan:#?}"))
}

#[test]
fn each_data_claim_gets_its_member_as_controller_owner_blocking_deletion() {
    let m = member("c-a");
    let plan = build(&facts(std::slice::from_ref(&m)));
    assert!(plan.refusals.is_empty(), "{plan:#?}");
    let c = change(&plan, Kind::PersistentVolumeClaim, "data-c-a");
    assert_eq!(
        c.patch,
        json!({"metadata": {
            "resourceVersion": "rv-pvc-c-a",
            "ownerReferences": [{
                "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
                "kind": "EtcdMember",
                "name": "c-a",
                "uid": "uid-c-a",
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        }})
    );
}

#[test]
fn our_cluster_finalizer_is_removed_and_every_other_finalizer_kept() {
    let plan = build(&facts(&[member("c-a")]));
    let c = change(&plan, Kind::EtcdCluster, "c");
    assert_eq!(
        c.patch,
        json!({"metadata": {"resourceVersion": "10", "finalizers": ["other.example/keep"]}})
    );
    // The member finalizer is the reference's own: no member change at all.
    assert!(
        plan.changes.iter().all(|c| c.kind != Kind::EtcdMember),
        "{plan:#?}"
    );
}

#[test]
fn a_prepared_cluster_plans_nothing() {
    let m = member("c-a");
    let mut f = facts(std::slice::from_ref(&m));
    f.cluster.metadata.finalizers = Some(vec!["other.example/keep".into()]);
    f.claims[0].metadata.owner_references = controller_ref(&m).map(|o| vec![o]);
    let plan = build(&f);
    assert_eq!(plan, Plan::default());
    assert!(render("c", &plan).contains("nothing to change"));
}

#[test]
fn a_claim_already_owned_by_its_member_is_left_even_without_the_controller_flag() {
    // The reference checks kind and UID only; an older operator's reference passes as it is.
    let m = member("c-a");
    let mut f = facts(std::slice::from_ref(&m));
    f.claims[0].metadata.owner_references = m.owner_ref(&()).map(|o| vec![o]);
    let plan = build(&f);
    assert!(plan
        .changes
        .iter()
        .all(|c| c.kind != Kind::PersistentVolumeClaim));
}

#[test]
fn a_claim_marked_for_a_re_created_member_goes_to_the_member_that_adopts_it() {
    let old = member("c-a");
    let mut new = member("c-a");
    new.metadata.uid = Some("uid-new".into());
    new.annotations_mut().insert(
        labels::REATTACH_ANNOTATION.into(),
        old.metadata.uid.clone().unwrap(),
    );
    let f = Facts {
        claims: vec![claim(&old)],
        pods: vec![],
        ..facts(std::slice::from_ref(&new))
    };
    let plan = build(&f);
    let c = change(&plan, Kind::PersistentVolumeClaim, "data-c-a");
    assert_eq!(c.patch["metadata"]["ownerReferences"][0]["uid"], "uid-new");
}

#[test]
fn another_members_claim_is_left_and_said() {
    let m = member("c-a");
    let mut other = member("c-a");
    other.metadata.uid = Some("uid-gone".into());
    let f = Facts {
        claims: vec![claim(&other)],
        ..facts(std::slice::from_ref(&m))
    };
    let plan = build(&f);
    assert!(plan
        .changes
        .iter()
        .all(|c| c.kind != Kind::PersistentVolumeClaim));
    assert!(
        plan.notes.iter().any(|n| n.contains("data-c-a")),
        "{plan:#?}"
    );
}

#[test]
fn a_claim_of_no_member_is_said_with_the_command_to_delete_it() {
    let m = member("c-a");
    let gone = member("c-gone");
    let f = Facts {
        claims: vec![claim(&m), claim(&gone)],
        ..facts(std::slice::from_ref(&m))
    };
    let plan = build(&f);
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("kubectl delete pvc data-c-gone")),
        "{plan:#?}"
    );
}

#[test]
fn memory_members_have_no_claim_to_own() {
    let mut f = facts(&[member("c-a")]);
    f.members[0].spec.storage.medium = Some(api::v1alpha2::StorageMedium::Memory);
    let plan = build(&f);
    assert!(plan.notes.is_empty(), "{plan:#?}");
    assert_eq!(plan.changes.len(), 1, "{plan:#?}");
}

#[test]
fn a_member_without_its_cluster_as_controller_gets_it_and_another_controller_is_kept() {
    let mut bare = member("c-a");
    bare.metadata.owner_references = None;
    let mut foreign = member("c-b");
    foreign.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "x".into(),
        uid: "uid-x".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    let plan = build(&facts(&[bare, foreign]));
    let c = change(&plan, Kind::EtcdMember, "c-a");
    assert_eq!(c.patch["metadata"]["ownerReferences"][0]["uid"], "uid-c");
    assert_eq!(
        c.patch["metadata"]["ownerReferences"][0]["controller"],
        true
    );
    assert!(plan.changes.iter().all(|c| c.name != "c-b"), "{plan:#?}");
    assert!(plan.notes.iter().any(|n| n.contains("ConfigMap x")));
}

#[test]
fn a_pod_without_its_member_as_owner_gets_it() {
    let m = member("c-a");
    let mut f = facts(std::slice::from_ref(&m));
    f.pods[0].metadata.owner_references = None;
    let plan = build(&f);
    let c = change(&plan, Kind::Pod, "c-a");
    assert_eq!(c.patch["metadata"]["ownerReferences"][0]["uid"], "uid-c-a");
}

#[test]
fn an_integer_compaction_retention_becomes_the_string_the_reference_schema_takes() {
    let mut m = member("c-a");
    let options = EtcdOptions {
        auto_compaction_retention: Some(IntOrString::Int(1)),
        ..Default::default()
    };
    m.spec.options = Some(options.clone());
    let mut f = facts(std::slice::from_ref(&m));
    f.cluster.spec.options = Some(options.clone());
    f.cluster.status = Some(api::v1alpha2::EtcdClusterStatus {
        observed: Some(api::v1alpha2::ObservedSpec {
            options: Some(options),
            ..Default::default()
        }),
        ..Default::default()
    });
    let plan = build(&f);
    let want = json!({"options": {"autoCompactionRetention": "1"}});
    assert_eq!(change(&plan, Kind::EtcdCluster, "c").patch["spec"], want);
    assert_eq!(change(&plan, Kind::EtcdMember, "c-a").patch["spec"], want);
    assert_eq!(
        change(&plan, Kind::EtcdClusterStatus, "c").patch,
        json!({"status": {"observed": want}})
    );
}

#[test]
fn a_cluster_being_deleted_or_held_by_a_recovery_is_refused_and_nothing_planned() {
    let mut f = facts(&[member("c-a")]);
    f.cluster.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let plan = build(&f);
    assert!(plan.changes.is_empty());
    assert_eq!(plan.refusals[0].field, "metadata.deletionTimestamp");

    let mut f = facts(&[member("c-a")]);
    f.cluster
        .annotations_mut()
        .insert(RECOVERY_ANNOTATION.into(), "r1".into());
    let plan = build(&f);
    assert!(plan.changes.is_empty());
    let text = plan.refusals[0].to_string();
    assert!(text.contains("EtcdRecovery r1"), "{text}");
    assert!(text.contains("Fix:"), "{text}");
}

#[test]
fn a_held_and_renewed_lease_refuses_and_a_released_or_stale_one_does_not() {
    let lease = |holder: Option<&str>, ago: i64| LeaseFacts {
        name: "ops/etcd-operator-leader".into(),
        holder: holder.map(str::to_string),
        renewed_ago: Some(ago),
        duration_seconds: Some(15),
    };
    let refusal = controller_running(&lease(Some("pod-1"), 3)).unwrap();
    assert!(refusal.to_string().contains("pod-1"), "{refusal}");
    assert!(refusal.fix.contains("--replicas=0"));
    assert_eq!(controller_running(&lease(None, 3)), None);
    assert_eq!(controller_running(&lease(Some(""), 3)), None);
    assert_eq!(controller_running(&lease(Some("pod-1"), 600)), None);
}
