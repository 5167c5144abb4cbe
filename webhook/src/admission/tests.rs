use serde_json::{json, Value};

use super::member::GARBAGE_COLLECTORS;
use super::*;

fn review(op: &str, kind: &str, object: Value, old: Option<Value>, user: &str) -> Request {
    let resource = format!("{}s", kind.to_lowercase());
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7f0a1c7e-0000-4000-8000-000000000001",
            "kind": {"group": GROUP, "version": "v1alpha2", "kind": kind},
            "resource": {"group": GROUP, "version": "v1alpha2", "resource": resource},
            "name": object["metadata"]["name"].as_str().unwrap_or_default(),
            "namespace": "default",
            "operation": op,
            "userInfo": {"username": user},
            "object": object,
            "oldObject": old,
            "dryRun": false,
        }
    });
    parse_review(body.to_string().as_bytes()).unwrap()
}

fn cluster(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn member(spec: Value, finalizers: &[&str]) -> Value {
    json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdMember",
           "metadata": {"name": "main-abcde", "namespace": "default", "finalizers": finalizers},
           "spec": spec})
}

const CONTROLLER: &str = crate::config::DEFAULT_CONTROLLER_USERNAME;

#[test]
fn webhook_rejects_storage_shrink_with_both_sizes_in_message() {
    let req = review(
        "UPDATE",
        "EtcdCluster",
        cluster(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "5Gi"}}),
        ),
        Some(cluster(
            "main",
            json!({"version": "3.6.11", "storage": {"size": "10Gi"}}),
        )),
        "alice",
    );
    let resp = validate(&req, &Policy::default());
    assert!(!resp.allowed);
    assert_eq!(resp.result.code, 422);
    assert_eq!(resp.result.reason, "Invalid");
    let msg = &resp.result.message;
    assert!(
        msg.contains("spec.storage.size") && msg.contains("10Gi") && msg.contains("5Gi"),
        "{msg}"
    );
    assert_eq!(resp.uid, "7f0a1c7e-0000-4000-8000-000000000001");
}

#[test]
fn every_violation_is_listed_with_its_field() {
    let req = review(
        "CREATE",
        "EtcdCluster",
        cluster(
            "main",
            json!({"version": "v3", "replicas": -1, "progressDeadlineSeconds": 0}),
        ),
        None,
        "alice",
    );
    let resp = validate(&req, &Policy::default());
    assert!(!resp.allowed);
    for field in [
        "spec.version",
        "spec.replicas",
        "spec.progressDeadlineSeconds",
    ] {
        assert!(
            resp.result.message.contains(field),
            "{field}: {}",
            resp.result.message
        );
    }
    let causes = resp.result.details.unwrap().causes;
    assert_eq!(causes.len(), 3, "{causes:?}");
    // kubectl renders `<field>: <message>`; the field is not repeated inside the message.
    for cause in &causes {
        assert!(
            !cause.message.starts_with(&cause.field) && !cause.message.is_empty(),
            "{cause:?}"
        );
    }
}

#[test]
fn unchanged_spec_update_is_allowed_even_if_the_stored_spec_breaks_a_rule() {
    let old = cluster("main", json!({"version": "latest"}));
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"team": "db"});
    let resp = validate(
        &review("UPDATE", "EtcdCluster", new, Some(old), "alice"),
        &Policy::default(),
    );
    assert!(resp.allowed);
}

#[test]
fn update_without_old_object_is_denied_not_guessed() {
    let req = review(
        "UPDATE",
        "EtcdCluster",
        cluster("main", json!({"version": "3.6.11"})),
        None,
        "alice",
    );
    let resp = validate(&req, &Policy::default());
    assert!(!resp.allowed);
    assert!(
        resp.result.message.contains("oldObject"),
        "{}",
        resp.result.message
    );
}

#[test]
fn delete_is_allowed() {
    let req = review(
        "DELETE",
        "EtcdCluster",
        cluster("main", json!({"version": "bad"})),
        None,
        "alice",
    );
    assert!(validate(&req, &Policy::default()).allowed);
}

#[test]
fn even_replicas_are_allowed_with_a_warning() {
    let req = review(
        "CREATE",
        "EtcdCluster",
        cluster("main", json!({"version": "3.6.11", "replicas": 4})),
        None,
        "alice",
    );
    let resp = validate(&req, &Policy::default());
    assert!(resp.allowed);
    let warnings = resp.warnings.unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("spec.replicas=4 is even"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("spec.tls.client and spec.tls.peer are unset"),
        "{warnings:?}"
    );
}

#[test]
fn member_update_by_the_controller_is_allowed() {
    let req = review(
        "UPDATE",
        "EtcdMember",
        member(json!({"clusterName": "main", "dormant": true}), &[]),
        Some(member(json!({"clusterName": "main"}), &[])),
        CONTROLLER,
    );
    assert!(validate(&req, &Policy::default()).allowed);
}

#[test]
fn member_update_by_anyone_else_is_denied_as_operator_owned() {
    let req = review(
        "UPDATE",
        "EtcdMember",
        member(json!({"clusterName": "main", "dormant": true}), &[]),
        Some(member(json!({"clusterName": "main"}), &[])),
        "alice",
    );
    let resp = validate(&req, &Policy::default());
    assert!(!resp.allowed);
    assert_eq!(resp.result.code, 403);
    assert!(
        resp.result.message.contains("operator-owned"),
        "{}",
        resp.result.message
    );
    assert!(
        resp.result.message.contains("status"),
        "{}",
        resp.result.message
    );
}

#[test]
fn member_create_and_status_write_by_anyone_else_are_denied() {
    let spec = json!({"clusterName": "main"});
    let create = |user| {
        review(
            "CREATE",
            "EtcdMember",
            member(spec.clone(), &[]),
            None,
            user,
        )
    };
    let denied = validate(&create("alice"), &Policy::default());
    assert!(!denied.allowed);
    assert_eq!(denied.result.code, 403);
    assert!(
        denied.result.message.contains("may create EtcdMembers"),
        "{}",
        denied.result.message
    );
    assert!(validate(&create(CONTROLLER), &Policy::default()).allowed);

    let mut voter = member(spec.clone(), &[CLEANUP]);
    voter["status"] = json!({"isVoter": true});
    let mut demoted = voter.clone();
    demoted["status"]["isVoter"] = json!(false);
    let status_write = |user| {
        let mut req = review(
            "UPDATE",
            "EtcdMember",
            demoted.clone(),
            Some(voter.clone()),
            user,
        );
        req.sub_resource = Some("status".to_string());
        req
    };
    let denied = validate(&status_write("alice"), &Policy::default());
    assert!(!denied.allowed);
    assert!(
        denied.result.message.contains("isVoter=false"),
        "{}",
        denied.result.message
    );
    assert!(validate(&status_write(CONTROLLER), &Policy::default()).allowed);
}

/// A review as `user` in `groups` (the apiserver sends the authenticated user's groups).
fn as_member_of(mut req: Request, groups: &[&str]) -> Request {
    req.user_info.groups = Some(groups.iter().map(|g| g.to_string()).collect());
    req
}

/// An EtcdMember as `etcd-operator migrate --from-aenix --apply` creates it.
fn adopted_member() -> Value {
    let mut m = member(json!({"clusterName": "main"}), &[CLEANUP]);
    m["metadata"]["annotations"] = json!({ADOPTED_FROM_ANNOTATION: "0b1c-aenix-uid"});
    m
}

fn status_write(new: Value, old: Value, user: &str, groups: &[&str]) -> Request {
    let mut req = as_member_of(review("UPDATE", "EtcdMember", new, Some(old), user), groups);
    req.sub_resource = Some("status".to_string());
    req
}

#[test]
fn cluster_admin_may_create_a_member_marked_as_the_migrations() {
    let create = |object: Value, groups: &[&str]| {
        validate(
            &as_member_of(review("CREATE", "EtcdMember", object, None, "ops"), groups),
            &Policy::default(),
        )
    };
    for group in ["system:masters", "kubeadm:cluster-admins"] {
        assert!(
            create(adopted_member(), &[group, "system:authenticated"]).allowed,
            "{group}"
        );
    }
    // An ordinary user (a namespace admin, say), marker or not: refused.
    let denied = create(adopted_member(), &["system:authenticated", "tenant-admins"]);
    assert!(!denied.allowed);
    assert!(
        denied.result.message.contains(ADOPTED_FROM_ANNOTATION),
        "the refusal names the migration's way: {}",
        denied.result.message
    );
    // A cluster admin without the marker: refused (only the migration's writes are let in).
    let unmarked = member(json!({"clusterName": "main"}), &[CLEANUP]);
    assert!(!create(unmarked, &["system:masters"]).allowed);
    let mut empty = adopted_member();
    empty["metadata"]["annotations"][ADOPTED_FROM_ANNOTATION] = json!("");
    assert!(!create(empty, &["system:masters"]).allowed);
    // With the allowance turned off, a cluster admin is refused like anyone.
    let off = Policy {
        migration_groups: Vec::new(),
        ..Policy::default()
    };
    let req = as_member_of(
        review("CREATE", "EtcdMember", adopted_member(), None, "ops"),
        &["system:masters"],
    );
    assert!(!validate(&req, &off).allowed);
}

#[test]
fn cluster_admin_may_latch_only_the_first_status_of_a_migrated_member() {
    let unlatched = adopted_member();
    let mut latched = adopted_member();
    latched["status"] = json!({"memberID": "8e9e05c52164694d", "isVoter": true});
    let admin = ["system:masters"];
    assert!(
        validate(
            &status_write(latched.clone(), unlatched.clone(), "ops", &admin),
            &Policy::default()
        )
        .allowed,
        "the migration's first status write"
    );
    // Once recorded, the status is the operator's: isVoter=false would let the member's
    // deletion skip MemberRemove.
    let mut demoted = latched.clone();
    demoted["status"]["isVoter"] = json!(false);
    let denied = validate(
        &status_write(demoted, latched.clone(), "ops", &admin),
        &Policy::default(),
    );
    assert!(!denied.allowed);
    assert!(
        denied.result.message.contains("isVoter=false"),
        "{}",
        denied.result.message
    );
    // A member the migration did not create, or a write dropping the marker: refused.
    let plain = member(json!({"clusterName": "main"}), &[CLEANUP]);
    let mut plain_latched = plain.clone();
    plain_latched["status"] = latched["status"].clone();
    assert!(
        !validate(
            &status_write(plain_latched, plain, "ops", &admin),
            &Policy::default()
        )
        .allowed
    );
    let mut unmarked = latched.clone();
    unmarked["metadata"]["annotations"] = json!({});
    assert!(
        !validate(
            &status_write(unmarked, unlatched.clone(), "ops", &admin),
            &Policy::default()
        )
        .allowed
    );
    // Not a cluster admin: refused.
    assert!(
        !validate(
            &status_write(
                latched.clone(),
                unlatched.clone(),
                "alice",
                &["system:authenticated"]
            ),
            &Policy::default()
        )
        .allowed
    );
    // A spec update of a migrated member stays the controller's, admin or not.
    let mut edited = unlatched.clone();
    edited["spec"]["dormant"] = json!(true);
    let req = as_member_of(
        review("UPDATE", "EtcdMember", edited, Some(unlatched), "ops"),
        &admin,
    );
    assert!(!validate(&req, &Policy::default()).allowed);
}

#[test]
fn migrated_cluster_is_created_without_defaults() {
    let mut adopted = cluster("main", json!({"version": "3.6.16", "replicas": 3}));
    adopted["metadata"]["annotations"] = json!({ADOPTED_FROM_ANNOTATION: "0b1c-aenix-uid"});
    let resp = mutate(
        &review("CREATE", "EtcdCluster", adopted, None, "ops"),
        &Policy::default(),
    );
    assert!(resp.allowed && resp.patch.is_none(), "{resp:?}");
    let native = cluster("main", json!({"version": "3.6.16", "replicas": 3}));
    let resp = mutate(
        &review("CREATE", "EtcdCluster", native, None, "ops"),
        &Policy::default(),
    );
    assert!(
        resp.patch.is_some(),
        "a native cluster still gets its anti-affinity"
    );
}

const CLEANUP: &str = "etcd-operator.cozystack.io/member-cleanup";

fn terminating(mut member: Value) -> Value {
    member["metadata"]["deletionTimestamp"] = json!("2026-01-02T03:04:05Z");
    member
}

fn member_update_by(user: &str, new: Value, old: Value) -> AdmissionResponse {
    validate(
        &review("UPDATE", "EtcdMember", new, Some(old), user),
        &Policy::default(),
    )
}

#[test]
fn live_member_finalizer_removal_by_anyone_else_is_denied() {
    let spec = json!({"clusterName": "main"});
    let resp = member_update_by("alice", member(spec.clone(), &[]), member(spec, &[CLEANUP]));
    assert!(!resp.allowed);
    assert_eq!(resp.result.code, 403);
    assert!(
        resp.result.message.contains("deletionTimestamp"),
        "{}",
        resp.result.message
    );
}

#[test]
fn terminating_member_finalizer_removal_by_anyone_is_allowed() {
    let spec = json!({"clusterName": "main"});
    let old = terminating(member(
        spec.clone(),
        &["example.com/a", CLEANUP, "example.com/b"],
    ));
    for kept in [
        &[][..],
        &["example.com/a", "example.com/b"],
        &["example.com/b"],
    ] {
        let new = terminating(member(spec.clone(), kept));
        assert!(
            member_update_by("alice", new, old.clone()).allowed,
            "keeping {kept:?}"
        );
    }
}

#[test]
fn terminating_member_takes_nothing_but_finalizer_removal_from_anyone_else() {
    let spec = json!({"clusterName": "main"});
    let old = terminating(member(spec.clone(), &[CLEANUP]));
    let mut relabelled = terminating(member(spec.clone(), &[]));
    relabelled["metadata"]["labels"] = json!({"team": "db"});
    let mut disowned = terminating(member(spec.clone(), &[]));
    disowned["metadata"]["ownerReferences"] = json!([]);
    let mut owned = old.clone();
    owned["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]);
    for (what, new, old) in [
        (
            "finalizer added",
            terminating(member(spec.clone(), &[CLEANUP, "example.com/hold"])),
            old.clone(),
        ),
        (
            "finalizers reordered",
            terminating(member(spec.clone(), &["b", "a"])),
            terminating(member(spec.clone(), &["a", "b"])),
        ),
        ("nothing removed", old.clone(), old.clone()),
        ("removal and a label", relabelled, old.clone()),
        ("removal and the owner", disowned, owned),
        (
            "removal and the spec",
            terminating(member(json!({"clusterName": "main", "dormant": true}), &[])),
            old.clone(),
        ),
    ] {
        assert!(!member_update_by("alice", new, old).allowed, "{what}");
    }
}

#[test]
fn garbage_collector_may_orphan_a_member_and_nobody_else_may() {
    let spec = json!({"clusterName": "main"});
    let mut owned = member(spec.clone(), &[CLEANUP]);
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
        "name": "main", "uid": "u", "controller": true
    }]);
    let mut orphaned = owned.clone();
    orphaned["metadata"]["ownerReferences"] = json!([]);
    for gc in GARBAGE_COLLECTORS {
        assert!(
            member_update_by(gc, orphaned.clone(), owned.clone()).allowed,
            "{gc}"
        );
    }
    assert!(!member_update_by("alice", orphaned.clone(), owned.clone()).allowed);
    // A distribution's garbage collector under another name, listed in
    // memberDeletionProtection.additionalAllowedUsers.
    let listed = Policy {
        deletion_allowed_users: vec!["distribution:gc".into()],
        ..Policy::default()
    };
    let by_listed = review(
        "UPDATE",
        "EtcdMember",
        orphaned.clone(),
        Some(owned.clone()),
        "distribution:gc",
    );
    assert!(validate(&by_listed, &listed).allowed);
    assert!(!validate(&by_listed, &Policy::default()).allowed);
    let mut orphaned_and_relabelled = orphaned;
    orphaned_and_relabelled["metadata"]["labels"] = json!({"team": "db"});
    assert!(
        !member_update_by(GARBAGE_COLLECTORS[0], orphaned_and_relabelled, owned).allowed,
        "the garbage collector gets nothing beyond removing owner references"
    );
}

#[test]
fn configured_controller_username_is_the_one_honoured() {
    let policy = Policy {
        controller_username: "system:serviceaccount:ops:etcd".into(),
        ..Policy::default()
    };
    let new = member(json!({"clusterName": "main", "dormant": true}), &[]);
    let old = member(json!({"clusterName": "main"}), &[]);
    let by = |user| review("UPDATE", "EtcdMember", new.clone(), Some(old.clone()), user);
    assert!(validate(&by("system:serviceaccount:ops:etcd"), &policy).allowed);
    assert!(!validate(&by(CONTROLLER), &policy).allowed);
}

#[test]
fn mutate_patches_only_etcd_cluster_create() {
    let spec = json!({"version": "3.6.11"});
    let create = review(
        "CREATE",
        "EtcdCluster",
        cluster("main", spec.clone()),
        None,
        "alice",
    );
    assert!(mutate(&create, &Policy::default()).patch.is_some());
    let update = review(
        "UPDATE",
        "EtcdCluster",
        cluster("main", spec.clone()),
        Some(cluster("main", spec.clone())),
        "alice",
    );
    assert!(mutate(&update, &Policy::default()).patch.is_none());
    let snapshot = review(
        "CREATE",
        "EtcdSnapshot",
        json!({"metadata": {"name": "s"}, "spec": {"clusterRef": {"name": "main"},
               "destination": {"pvc": {"claimName": "backups"}}}}),
        None,
        "alice",
    );
    let resp = mutate(&snapshot, &Policy::default());
    assert!(resp.allowed && resp.patch.is_none());
}

#[test]
fn mutate_denies_invalid_objects_with_every_violation_before_cel_runs() {
    let bad = review(
        "CREATE",
        "EtcdCluster",
        cluster("main", json!({"version": "3.6", "replicas": -1})),
        None,
        "alice",
    );
    let resp = mutate(&bad, &Policy::default());
    assert!(!resp.allowed);
    assert!(resp.patch.is_none());
    let message = resp.result.message;
    assert!(message.contains("(2 problems)"), "{message}");
    assert!(
        message.contains("spec.version") && message.contains("spec.replicas"),
        "{message}"
    );
    let snapshot = review(
        "CREATE",
        "EtcdSnapshot",
        json!({"metadata": {"name": "s"}, "spec": {"clusterRef": {"name": "main"}, "destination": {}}}),
        None,
        "alice",
    );
    assert!(!mutate(&snapshot, &Policy::default()).allowed);
}

#[test]
fn malformed_reviews_are_errors_not_panics() {
    assert!(matches!(parse_review(b"{"), Err(ReviewError::NotJson(_))));
    assert!(matches!(
        parse_review(
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
        ),
        Err(ReviewError::WrongType { .. })
    ));
    assert!(matches!(
        parse_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#),
        Err(ReviewError::MissingRequest)
    ));
    let err = parse_review(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"CREATE"}}"#,
    )
    .unwrap_err();
    assert_eq!(err.uid(), Some("u1"));
    let denial = unreadable_denial("u1", &err);
    assert!(!denial.allowed && denial.uid == "u1");
}

fn annotated(mut member: Value, annotations: Value) -> Value {
    member["metadata"]["annotations"] = annotations;
    member
}

const BREAK_GLASS: &str = api::labels::ALLOW_DELETION_ANNOTATION;

#[test]
fn a_user_deleting_a_member_is_refused_with_the_break_glass_annotation_named() {
    let old = member(json!({"clusterName": "main"}), &[CLEANUP]);
    let resp = validate(
        &review("DELETE", "EtcdMember", Value::Null, Some(old), "alice"),
        &Policy::default(),
    );
    assert!(!resp.allowed);
    assert_eq!(resp.result.code, 403);
    let msg = &resp.result.message;
    assert!(
        msg.contains(&format!(
            "kubectl annotate etcdmember main-abcde -n default {BREAK_GLASS}=true"
        )),
        "{msg}"
    );
}

#[test]
fn a_member_carrying_the_break_glass_annotation_may_be_deleted_by_anyone() {
    let old = annotated(
        member(json!({"clusterName": "main"}), &[CLEANUP]),
        json!({BREAK_GLASS: "true"}),
    );
    let req = review("DELETE", "EtcdMember", Value::Null, Some(old), "alice");
    assert!(validate(&req, &Policy::default()).allowed);
    // Any other value is no break-glass.
    let old = annotated(
        member(json!({"clusterName": "main"}), &[CLEANUP]),
        json!({BREAK_GLASS: "yes"}),
    );
    let req = review("DELETE", "EtcdMember", Value::Null, Some(old), "alice");
    assert!(!validate(&req, &Policy::default()).allowed);
}

#[test]
fn the_operator_the_garbage_collector_and_the_namespace_controller_delete_members() {
    let old = member(json!({"clusterName": "main"}), &[CLEANUP]);
    for user in [
        CONTROLLER,
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:serviceaccount:kube-system:namespace-controller",
        "system:kube-controller-manager",
    ] {
        let req = review("DELETE", "EtcdMember", Value::Null, Some(old.clone()), user);
        assert!(validate(&req, &Policy::default()).allowed, "{user}");
    }
    // Other kinds' deletions are not judged.
    let req = review(
        "DELETE",
        "EtcdCluster",
        Value::Null,
        Some(cluster("main", json!({"version": "3.6.11"}))),
        "alice",
    );
    assert!(validate(&req, &Policy::default()).allowed);
}

#[test]
fn anyone_may_set_the_break_glass_annotation_and_nothing_else_with_it() {
    let spec = json!({"clusterName": "main"});
    let old = member(spec.clone(), &[CLEANUP]);
    let marked = annotated(old.clone(), json!({BREAK_GLASS: "true"}));
    assert!(member_update_by("alice", marked.clone(), old.clone()).allowed);
    // Removing it again is as open.
    assert!(member_update_by("alice", old.clone(), marked.clone()).allowed);
    // With a spec change, a label or another annotation: the controller's alone.
    let mut more = marked.clone();
    more["spec"]["dormant"] = json!(true);
    assert!(!member_update_by("alice", more, old.clone()).allowed);
    let more = annotated(
        old.clone(),
        json!({BREAK_GLASS: "true", "example.com/x": "y"}),
    );
    assert!(!member_update_by("alice", more, old).allowed);
}
