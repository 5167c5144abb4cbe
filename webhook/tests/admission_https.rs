//! The webhook over real TLS: defaults, warnings, EtcdMember ownership, malformed and oversized
//! bodies, readiness that follows the certificate, metrics, HTTP/2, and shutdown.

// Test helpers outside `#[test]` functions: a failed set-up step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use hyper::StatusCode;
use serde_json::{json, Value};
use support::{cluster, review, Connection, Harness, CONTROLLER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use webhook::AntiAffinity;

const TERM: &str = "podAffinityTerm";

async fn mutate_create(harness: &Harness, object: &Value) -> (Value, Value) {
    let response = harness
        .review(
            "/mutate",
            &review("CREATE", "EtcdCluster", Some(object.clone()), None, "alice"),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    (support::apply_patch(object, &response), response)
}

/// A CREATE of a valid EtcdCluster: allowed whenever the webhook serves.
fn valid_create() -> Value {
    review(
        "CREATE",
        "EtcdCluster",
        Some(cluster("main", json!({"version": "3.6.11"}))),
        None,
        "alice",
    )
}

fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn webhook_rejects_storage_shrink_with_both_sizes_in_message() {
    let harness = Harness::start().await;
    let old = cluster(
        "main",
        json!({"version": "3.6.11", "storage": {"size": "10Gi"}}),
    );
    let new = cluster(
        "main",
        json!({"version": "3.6.11", "storage": {"size": "5Gi"}}),
    );
    let response = harness
        .review(
            "/validate",
            &review("UPDATE", "EtcdCluster", Some(new), Some(old), "alice"),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("EtcdCluster \"main\" is invalid"),
        "{message}"
    );
    for needle in ["spec.storage.size", "10Gi", "5Gi"] {
        assert!(message.contains(needle), "{needle} missing: {message}");
    }
}

#[tokio::test]
async fn webhook_lists_every_violation_with_old_and_new_values() {
    let harness = Harness::start().await;
    let old = cluster(
        "main",
        json!({"version": "3.6.11", "storage": {"size": "10Gi", "storageClassName": "fast"}}),
    );
    let new = cluster(
        "main",
        json!({"version": "3.6", "storage": {"size": "5Gi", "storageClassName": "slow"}}),
    );
    let response = harness
        .review(
            "/validate",
            &review("UPDATE", "EtcdCluster", Some(new), Some(old), "alice"),
        )
        .await;
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("(3 problems)"), "{message}");
    for needle in [
        "spec.version",
        "spec.storage.size",
        "spec.storage.storageClassName",
        "fast",
        "slow",
    ] {
        assert!(message.contains(needle), "{needle} missing: {message}");
    }
    let causes = response["status"]["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 3, "{response}");
}

#[tokio::test]
async fn defrag_is_judged_by_the_mirror_on_create_and_its_spec_is_immutable() {
    let harness = Harness::start().await;
    let defrag = |rule: Value| {
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdDefrag",
               "metadata": {"name": "weekly", "namespace": "default"},
               "spec": {"clusterRef": {"name": "main"}, "rule": rule}})
    };
    let good = defrag(json!({"freeSpaceAbove": "1Gi", "quotaUsageAbove": "80%"}));
    for path in ["/validate", "/mutate"] {
        let created = harness
            .review(
                path,
                &review("CREATE", "EtcdDefrag", Some(good.clone()), None, "alice"),
            )
            .await;
        assert_eq!(created["allowed"], true, "{path}: {created}");
    }
    // Two problems at once: all=true with a gate field, and minReclaim above freeSpaceAbove.
    let bad = defrag(json!({"all": true, "freeSpaceAbove": "64Mi", "minReclaim": "128Mi"}));
    for path in ["/validate", "/mutate"] {
        let denied = harness
            .review(
                path,
                &review("CREATE", "EtcdDefrag", Some(bad.clone()), None, "alice"),
            )
            .await;
        assert_eq!(denied["allowed"], false, "{path}: {denied}");
        let message = denied["status"]["message"].as_str().unwrap();
        assert!(message.contains("(2 problems)"), "{message}");
        for needle in ["spec.rule:", "all=true", "spec.rule.minReclaim", "128Mi"] {
            assert!(message.contains(needle), "{needle} missing: {message}");
        }
    }
    let updated = harness
        .review(
            "/validate",
            &review(
                "UPDATE",
                "EtcdDefrag",
                Some(defrag(json!({"all": true}))),
                Some(good),
                "alice",
            ),
        )
        .await;
    assert_eq!(updated["allowed"], false, "{updated}");
    let message = updated["status"]["message"].as_str().unwrap();
    assert!(message.contains("immutable"), "{message}");
}

#[tokio::test]
async fn valid_snapshot_is_allowed_and_its_spec_is_immutable() {
    let harness = Harness::start().await;
    let snapshot = |bucket: &str| {
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshot",
               "metadata": {"name": "nightly", "namespace": "default"},
               "spec": {"clusterRef": {"name": "main"},
                        "destination": {"s3": {"endpoint": "https://s3.example", "bucket": bucket,
                                               "credentialsSecretRef": {"name": "s3"}}}}})
    };
    let created = harness
        .review(
            "/validate",
            &review("CREATE", "EtcdSnapshot", Some(snapshot("a")), None, "alice"),
        )
        .await;
    assert_eq!(created["allowed"], true, "{created}");
    let updated = harness
        .review(
            "/validate",
            &review(
                "UPDATE",
                "EtcdSnapshot",
                Some(snapshot("b")),
                Some(snapshot("a")),
                "alice",
            ),
        )
        .await;
    assert_eq!(updated["allowed"], false, "{updated}");
    assert!(updated["status"]["message"]
        .as_str()
        .unwrap()
        .contains("spec"));
}

#[tokio::test]
async fn delete_is_allowed_without_judging_the_object() {
    let harness = Harness::start().await;
    let broken = cluster("main", json!({"version": "not-a-version"}));
    let response = harness
        .review(
            "/validate",
            &review("DELETE", "EtcdCluster", None, Some(broken), "alice"),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
}

#[tokio::test]
async fn unparsable_spec_is_denied_naming_the_field() {
    let harness = Harness::start().await;
    let object = cluster("main", json!({"version": "3.6.11", "replicas": "three"}));
    let response = harness
        .review(
            "/validate",
            &review("CREATE", "EtcdCluster", Some(object), None, "alice"),
        )
        .await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.replicas"), "{message}");
}

#[tokio::test]
async fn create_gets_preferred_anti_affinity_for_its_cluster_label() {
    let harness = Harness::start().await;
    let (patched, response) =
        mutate_create(&harness, &cluster("main", json!({"version": "3.6.11"}))).await;
    assert!(warnings(&response).is_empty(), "{response}");
    let preferred = &patched["spec"]["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(preferred["weight"], 100);
    assert_eq!(preferred[TERM]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        preferred[TERM]["labelSelector"]["matchLabels"],
        json!({"etcd-operator.cozystack.io/cluster": "main"})
    );
}

#[tokio::test]
async fn required_anti_affinity_flag_adds_a_required_term() {
    let harness = Harness::start_with(|c| c.anti_affinity = AntiAffinity::Required).await;
    let (patched, _) =
        mutate_create(&harness, &cluster("main", json!({"version": "3.6.11"}))).await;
    let required = &patched["spec"]["affinity"]["podAntiAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(required["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        required["labelSelector"]["matchLabels"]["etcd-operator.cozystack.io/cluster"],
        "main"
    );
}

#[tokio::test]
async fn user_set_fields_are_never_overridden() {
    let harness = Harness::start().await;
    let spec = json!({
        "version": "3.6.11",
        "storage": {"size": "1Gi", "medium": "Memory"},
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"team": "db"}}, "topologyKey": "topology.kubernetes.io/zone"}]}},
        "resources": {"limits": {"memory": "3Gi", "cpu": "2"}}
    });
    let object = cluster("main", spec);
    let (patched, response) = mutate_create(&harness, &object).await;
    assert!(response["patch"].is_null(), "{response}");
    assert_eq!(patched, object);
}

#[tokio::test]
async fn memory_cluster_gets_limit_and_request_from_size_plus_headroom() {
    let harness = Harness::start().await;
    let object = cluster(
        "main",
        json!({"version": "3.6.11", "storage": {"size": "2Gi", "medium": "Memory"},
               "resources": {"requests": {"cpu": "250m"}}}),
    );
    let (patched, _) = mutate_create(&harness, &object).await;
    assert_eq!(
        patched["spec"]["resources"],
        json!({"limits": {"memory": "2304Mi"}, "requests": {"cpu": "250m", "memory": "2304Mi"}})
    );
    // What the apiserver stores next is what the validating webhook sees: no memory warning.
    let validated = harness
        .review(
            "/validate",
            &review("CREATE", "EtcdCluster", Some(patched), None, "alice"),
        )
        .await;
    assert_eq!(validated["allowed"], true);
    // (The one warning left is about the cluster's missing TLS.)
    let w = warnings(&validated);
    assert!(!w.iter().any(|w| w.contains("memory")), "{validated}");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("spec.tls.client and spec.tls.peer are unset"),
        "{w:?}"
    );
}

#[tokio::test]
async fn memory_headroom_and_defaults_flags_are_honoured() {
    let harness = Harness::start_with(|c| {
        c.memory_headroom = k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into())
    })
    .await;
    let object = cluster(
        "main",
        json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"}}),
    );
    let (patched, _) = mutate_create(&harness, &object).await;
    assert_eq!(patched["spec"]["resources"]["limits"]["memory"], "2Gi");

    let off = Harness::start_with(|c| {
        c.memory_defaults = false;
        c.anti_affinity = AntiAffinity::Off;
    })
    .await;
    let (patched, response) = mutate_create(&off, &object).await;
    assert!(response["patch"].is_null(), "{response}");
    let validated = off
        .review(
            "/validate",
            &review("CREATE", "EtcdCluster", Some(patched), None, "alice"),
        )
        .await;
    let w = warnings(&validated);
    assert!(w.iter().any(|w| w.contains("limits.memory")), "{w:?}");
    assert!(w.iter().any(|w| w.contains("podAntiAffinity")), "{w:?}");
}

#[tokio::test]
async fn generate_name_create_skips_anti_affinity_with_a_warning() {
    let harness = Harness::start().await;
    let object = json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
                        "metadata": {"generateName": "etcd-", "namespace": "default"},
                        "spec": {"version": "3.6.11"}});
    let (patched, response) = mutate_create(&harness, &object).await;
    assert!(patched["spec"].get("affinity").is_none(), "{patched}");
    let w = warnings(&response);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("generateName"), "{w:?}");
}

#[tokio::test]
async fn even_and_large_replica_counts_are_allowed_with_warnings() {
    let harness = Harness::start().await;
    for (replicas, needle) in [(4, "even"), (9, "more than 7"), (8, "even")] {
        let object = cluster("main", json!({"version": "3.6.11", "replicas": replicas}));
        let response = harness
            .review(
                "/validate",
                &review("CREATE", "EtcdCluster", Some(object), None, "alice"),
            )
            .await;
        assert_eq!(response["allowed"], true);
        let w = warnings(&response);
        assert!(w.iter().any(|w| w.contains(needle)), "{replicas}: {w:?}");
    }
}

#[tokio::test]
async fn mutate_leaves_updates_and_other_kinds_alone() {
    let harness = Harness::start().await;
    let object = cluster("main", json!({"version": "3.6.11"}));
    let update = harness
        .review(
            "/mutate",
            &review(
                "UPDATE",
                "EtcdCluster",
                Some(object.clone()),
                Some(object),
                "alice",
            ),
        )
        .await;
    assert_eq!(update["allowed"], true);
    assert!(update["patch"].is_null(), "{update}");
}

fn member(dormant: bool, finalizers: &[&str]) -> Value {
    json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdMember",
           "metadata": {"name": "main-x7k2p", "namespace": "default", "finalizers": finalizers,
                        "labels": {"etcd-operator.cozystack.io/cluster": "main"}},
           "spec": {"clusterName": "main", "version": "3.6.11", "dormant": dormant}})
}

#[tokio::test]
async fn etcd_member_update_by_the_controller_is_allowed() {
    let harness = Harness::start().await;
    let response = harness
        .review(
            "/validate",
            &review(
                "UPDATE",
                "EtcdMember",
                Some(member(true, &[])),
                Some(member(false, &[])),
                CONTROLLER,
            ),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
}

#[tokio::test]
async fn etcd_member_update_by_another_user_is_denied_as_operator_owned() {
    let harness = Harness::start().await;
    let response = harness
        .review(
            "/validate",
            &review(
                "UPDATE",
                "EtcdMember",
                Some(member(true, &[])),
                Some(member(false, &[])),
                "alice",
            ),
        )
        .await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 403);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("operator-owned") && message.contains("alice"),
        "{message}"
    );
    assert!(message.contains(CONTROLLER), "{message}");
}

#[tokio::test]
async fn etcd_member_finalizer_removal_is_allowed_to_anyone_only_once_it_is_terminating() {
    let harness = Harness::start().await;
    let cleanup = "etcd-operator.cozystack.io/member-cleanup";
    let user = "alice";
    let live = harness
        .review(
            "/validate",
            &review(
                "UPDATE",
                "EtcdMember",
                Some(member(false, &[])),
                Some(member(false, &[cleanup])),
                user,
            ),
        )
        .await;
    assert_eq!(live["allowed"], false, "{live}");
    assert_eq!(live["status"]["code"], 403);

    let terminating = |finalizers: &[&str]| {
        let mut object = member(false, finalizers);
        object["metadata"]["deletionTimestamp"] = json!("2026-01-02T03:04:05Z");
        object
    };
    let stuck = harness
        .review(
            "/validate",
            &review(
                "UPDATE",
                "EtcdMember",
                Some(terminating(&[])),
                Some(terminating(&[cleanup])),
                user,
            ),
        )
        .await;
    assert_eq!(stuck["allowed"], true, "{stuck}");
}

/// `review` through a subresource (`status`), as the apiserver sends a write to `/status`.
fn through_subresource(mut review: Value, subresource: &str) -> Value {
    review["request"]["subResource"] = json!(subresource);
    review["request"]["requestSubResource"] = json!(subresource);
    review
}

fn member_with_status(is_voter: bool) -> Value {
    let mut object = member(false, &["etcd-operator.cozystack.io/member-cleanup"]);
    object["status"] = json!({"memberID": "8e9e05c52164694d", "isVoter": is_voter});
    object
}

#[tokio::test]
async fn etcd_member_create_is_the_controllers_alone() {
    let harness = Harness::start().await;
    let create = |user: &str| review("CREATE", "EtcdMember", Some(member(false, &[])), None, user);
    let denied = harness.review("/validate", &create("alice")).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    assert_eq!(denied["status"]["code"], 403);
    let message = denied["status"]["message"].as_str().unwrap();
    for needle in ["operator-owned", "create", "\"alice\"", CONTROLLER] {
        assert!(message.contains(needle), "{needle} missing: {message}");
    }
    let allowed = harness.review("/validate", &create(CONTROLLER)).await;
    assert_eq!(allowed["allowed"], true, "{allowed}");
}

/// A status write that demotes a voter (`isVoter: false`) would make a later deletion skip the
/// etcd MemberRemove: only the controller may write a member's status.
#[tokio::test]
async fn etcd_member_status_write_is_the_controllers_alone() {
    let harness = Harness::start().await;
    let demote = |user: &str| {
        through_subresource(
            review(
                "UPDATE",
                "EtcdMember",
                Some(member_with_status(false)),
                Some(member_with_status(true)),
                user,
            ),
            "status",
        )
    };
    let denied = harness.review("/validate", &demote("alice")).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    assert_eq!(denied["status"]["code"], 403);
    let message = denied["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("operator-owned") && message.contains("status"),
        "{message}"
    );
    let allowed = harness.review("/validate", &demote(CONTROLLER)).await;
    assert_eq!(allowed["allowed"], true, "{allowed}");
}

/// The memory default is computed on create; growing `storage.size` later leaves the tmpfs
/// sizeLimit above the container's limit. The update is allowed (the spec is valid) with a
/// warning naming the field, both values and the fix.
#[tokio::test]
async fn memory_size_growth_past_the_limit_warns_with_both_values() {
    let harness = Harness::start().await;
    let memory = |size: &str| {
        cluster(
            "main",
            json!({"version": "3.6.11", "storage": {"size": size, "medium": "Memory"},
                   "resources": {"limits": {"memory": "1280Mi"}, "requests": {"memory": "1280Mi"}}}),
        )
    };
    let grown = harness
        .review(
            "/validate",
            &review(
                "UPDATE",
                "EtcdCluster",
                Some(memory("2Gi")),
                Some(memory("1Gi")),
                "alice",
            ),
        )
        .await;
    assert_eq!(grown["allowed"], true, "{grown}");
    let w = warnings(&grown);
    let limit = w
        .iter()
        .find(|w| w.contains("spec.resources.limits.memory"))
        .unwrap_or_else(|| panic!("no limit warning in {w:?}"));
    for needle in ["1280Mi", "2Gi", "spec.storage.size", "2304Mi"] {
        assert!(limit.contains(needle), "{needle} missing: {limit}");
    }
    assert!(limit.len() < 256, "{} characters: {limit}", limit.len());
    // The size the create-time default was computed for gets no such warning.
    let kept = harness
        .review(
            "/validate",
            &review(
                "UPDATE",
                "EtcdCluster",
                Some(memory("1Gi")),
                Some(memory("512Mi")),
                "alice",
            ),
        )
        .await;
    assert!(
        !warnings(&kept)
            .iter()
            .any(|w| w.contains("spec.resources.limits.memory")),
        "{kept}"
    );
}

#[tokio::test]
async fn version_downgrade_and_skipped_minor_are_denied_with_both_versions() {
    let harness = Harness::start().await;
    let update = |old: &str, new: &str| {
        review(
            "UPDATE",
            "EtcdCluster",
            Some(cluster("main", json!({"version": new}))),
            Some(cluster("main", json!({"version": old}))),
            "alice",
        )
    };
    for (old, new, why) in [
        ("3.6.1", "3.5.9", "downgrade"),
        ("3.6.4", "3.6.1", "downgrade"),
        ("3.5.9", "3.7.0", "skips minor version 3.6"),
    ] {
        let response = harness.review("/validate", &update(old, new)).await;
        assert_eq!(response["allowed"], false, "{old} -> {new}: {response}");
        let message = response["status"]["message"].as_str().unwrap();
        for needle in [
            "spec.version",
            why,
            &format!("(was {old}, now {new})"),
            "upgrading-etcd",
        ] {
            assert!(message.contains(needle), "{needle} missing: {message}");
        }
    }
    for (old, new) in [("3.6.1", "3.6.4"), ("3.5.21", "3.6.0")] {
        let response = harness.review("/validate", &update(old, new)).await;
        assert_eq!(response["allowed"], true, "{old} -> {new}: {response}");
    }
}

#[tokio::test]
async fn controller_username_flag_changes_who_may_update_members() {
    let harness =
        Harness::start_with(|c| c.controller_username = "system:serviceaccount:ops:etcd".into())
            .await;
    let by = |user: &str| {
        review(
            "UPDATE",
            "EtcdMember",
            Some(member(true, &[])),
            Some(member(false, &[])),
            user,
        )
    };
    assert_eq!(
        harness
            .review("/validate", &by("system:serviceaccount:ops:etcd"))
            .await["allowed"],
        true
    );
    assert_eq!(
        harness.review("/validate", &by(CONTROLLER)).await["allowed"],
        false
    );
}

#[tokio::test]
async fn malformed_bodies_get_a_4xx_with_the_reason() {
    let harness = Harness::start().await;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not json", b"{\"apiVersion\":".to_vec(), "not JSON"),
        ("empty", Vec::new(), "not JSON"),
        ("a list", b"[1,2,3]".to_vec(), "AdmissionReview"),
        (
            "v1beta1",
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}"#.to_vec(),
            "admission.k8s.io/v1",
        ),
        (
            "wrong kind",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"Pod","request":{"uid":"u"}}"#.to_vec(),
            "AdmissionReview",
        ),
        (
            "no request",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            "no request",
        ),
    ];
    for path in ["/validate", "/mutate"] {
        for (name, body, reason) in &cases {
            let (status, text) = harness.post(path, body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {name}");
            let text = String::from_utf8_lossy(&text);
            assert!(text.contains(reason), "{path} {name}: {text}");
        }
    }
}

#[tokio::test]
async fn unreadable_request_with_a_uid_is_denied_in_a_review() {
    let harness = Harness::start().await;
    let mut body = valid_create();
    body["request"]["object"]["metadata"]["labels"] = json!("not-a-map");
    let response = harness.review("/validate", &body).await;
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("request.object"), "{message}");
}

#[tokio::test]
async fn oversized_body_gets_413() {
    let harness = Harness::start_with(|c| c.max_body_bytes = 64 * 1024).await;
    let mut body = valid_create();
    body["request"]["object"]["metadata"]["annotations"] =
        json!({"padding": "x".repeat(70 * 1024)});
    let (status, _) = harness
        .post("/validate", serde_json::to_vec(&body).unwrap())
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // The connection and the server are fine afterwards.
    let ok = valid_create();
    assert_eq!(harness.review("/validate", &ok).await["allowed"], true);
    let (_, metrics) = harness.admin_get("/metrics").await;
    assert!(
        metrics.contains(r#"reason="body_too_large"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn update_of_an_object_at_the_etcd_request_limit_fits_the_default_body_cap() {
    let harness = Harness::start().await;
    // etcd refuses requests over 1.5 MiB by default, so that is the largest stored object; an
    // UPDATE review carries it twice (object and oldObject).
    let mut object = cluster("main", json!({"version": "3.6.11"}));
    object["metadata"]["annotations"] = json!({"padding": "x".repeat(1536 * 1024 - 512)});
    let body = review(
        "UPDATE",
        "EtcdCluster",
        Some(object.clone()),
        Some(object),
        "alice",
    );
    assert!(serde_json::to_vec(&body).unwrap().len() > 3 << 20);
    assert_eq!(harness.review("/validate", &body).await["allowed"], true);
}

#[tokio::test]
async fn wrong_method_and_unknown_path_are_4xx() {
    let harness = Harness::start().await;
    let mut conn = harness.connect().await;
    let (status, _) = conn.send("GET", "/validate", "").await.unwrap();
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = conn.post("/nope", "{}").await.unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn readyz_is_503_until_the_certificate_appears_then_200() {
    let harness = Harness::start_without_cert(|_| {}).await;
    let (status, body) = harness.admin_get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("certificate"), "{body}");
    assert_eq!(harness.admin_get("/healthz").await.0, StatusCode::OK);
    assert!(
        Connection::https(harness.webhook.tls_addr, harness.ca.cert_pem())
            .await
            .is_err(),
        "no certificate: the handshake must fail"
    );

    harness.write_cert();
    harness.wait_ready().await;
    assert_eq!(harness.admin_get("/readyz").await.0, StatusCode::OK);
    let ok = valid_create();
    assert_eq!(harness.review("/validate", &ok).await["allowed"], true);
}

#[tokio::test]
async fn rotated_serving_certificate_is_used_without_restart() {
    let harness = Harness::start().await;
    let mut before = harness.connect().await;
    let next = harness.ca.server_cert(&["localhost"]).unwrap();
    harness.mount.write_tls(&next, Some(&harness.ca)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while harness.webhook.reload_stats.reloads() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "rotation not picked up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let served = harness.webhook.resolver.current().unwrap();
    assert_eq!(served.end_entity_cert().unwrap(), &next.cert_der);
    // Open connections keep working, new ones handshake with the new certificate.
    let ok = valid_create();
    assert_eq!(before.review("/validate", &ok).await["allowed"], true);
    assert_eq!(harness.review("/validate", &ok).await["allowed"], true);
}

#[tokio::test]
async fn metrics_count_requests_by_operation_kind_and_verdict() {
    let harness = Harness::start().await;
    let good = cluster("main", json!({"version": "3.6.11"}));
    let bad = cluster("main", json!({"version": "x"}));
    harness
        .review(
            "/validate",
            &review("CREATE", "EtcdCluster", Some(good.clone()), None, "alice"),
        )
        .await;
    harness
        .review(
            "/validate",
            &review("CREATE", "EtcdCluster", Some(bad), None, "alice"),
        )
        .await;
    harness
        .review(
            "/mutate",
            &review("CREATE", "EtcdCluster", Some(good), None, "alice"),
        )
        .await;
    harness.post("/validate", "nope").await;
    let (status, text) = harness.admin_get("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for needle in [
        r#"etcd_operator_webhook_admission_requests_total{webhook="validate",operation="CREATE",kind="EtcdCluster",allowed="true"} 1"#,
        r#"etcd_operator_webhook_admission_requests_total{webhook="validate",operation="CREATE",kind="EtcdCluster",allowed="false"} 1"#,
        r#"etcd_operator_webhook_admission_requests_total{webhook="mutate",operation="CREATE",kind="EtcdCluster",allowed="true"} 1"#,
        r#"etcd_operator_webhook_admission_malformed_requests_total{webhook="validate",reason="not_json"} 1"#,
        r#"etcd_operator_webhook_admission_duration_seconds_count{webhook="validate"} 3"#,
        "etcd_operator_webhook_certificate_reloads_total 1",
        "etcd_operator_webhook_certificate_reload_failures_total 0",
        "etcd_operator_webhook_certificate_loaded 1",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
}

#[tokio::test]
async fn http2_clients_are_served() {
    let harness = Harness::start().await;
    let mut conn = Connection::https_h2(harness.webhook.tls_addr, harness.ca.cert_pem())
        .await
        .unwrap();
    let ok = valid_create();
    for _ in 0..3 {
        assert_eq!(conn.review("/validate", &ok).await["allowed"], true);
    }
}

#[tokio::test]
async fn tls_client_that_does_not_trust_the_ca_cannot_connect_and_is_counted() {
    let harness = Harness::start().await;
    let stranger = certs::mint::TestCa::new("someone-else").unwrap();
    assert!(
        Connection::https(harness.webhook.tls_addr, stranger.cert_pem())
            .await
            .is_err()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, text) = harness.admin_get("/metrics").await;
        if text.contains("etcd_operator_webhook_tls_handshake_failures_total 1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn shutdown_stops_both_listeners() {
    let harness = Harness::start().await;
    let tls = harness.webhook.tls_addr;
    let admin = harness.webhook.admin_addr;
    let Harness { webhook, ca, .. } = harness;
    tokio::time::timeout(Duration::from_secs(15), webhook.shutdown(Duration::ZERO))
        .await
        .expect("shutdown finishes within the grace period");
    assert!(Connection::https(tls, ca.cert_pem()).await.is_err());
    assert!(support::http_get(admin, "/healthz").await.is_err());
}

#[tokio::test]
async fn shutdown_reports_not_ready_while_draining_and_finishes_the_request_in_flight() {
    let harness = Harness::start().await;
    let (tls, admin) = (harness.webhook.tls_addr, harness.webhook.admin_addr);
    let Harness {
        webhook, ca, tmp, ..
    } = harness;
    let ok = valid_create();

    // An admission request whose body is half sent when the shutdown begins.
    let body = serde_json::to_vec(&ok).unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    let mut in_flight = Connection::tls(tls, ca.cert_pem(), b"http/1.1")
        .await
        .unwrap();
    let head = format!(
        "POST /validate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    in_flight.write_all(head.as_bytes()).await.unwrap();
    in_flight.write_all(first).await.unwrap();
    in_flight.flush().await.unwrap();

    let shutdown = tokio::spawn(webhook.shutdown(Duration::from_secs(2)));

    // Draining: not ready, yet new admission requests are still answered.
    loop {
        let (status, _) = support::http_get(admin, "/readyz")
            .await
            .expect("the admin port serves during the drain");
        if status == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut during = Connection::https(tls, ca.cert_pem())
        .await
        .expect("new connections are accepted during the drain");
    assert_eq!(during.review("/validate", &ok).await["allowed"], true);

    // After the drain the listener closes; the request already in flight still gets its answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while Connection::https(tls, ca.cert_pem()).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "still accepting after the drain"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    in_flight.write_all(rest).await.unwrap();
    in_flight.flush().await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    // The server closes the connection after this answer (shutdown turns keep-alive off).
    while let Ok(n @ 1..) = in_flight.read(&mut chunk).await {
        answer.extend_from_slice(&chunk[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    let (_, json) = answer.split_once("\r\n\r\n").unwrap();
    let json: Value = serde_json::from_str(json).unwrap();
    assert_eq!(json["response"]["allowed"], true, "{json}");

    tokio::time::timeout(Duration::from_secs(15), shutdown)
        .await
        .expect("shutdown finishes within the grace period")
        .unwrap();
    drop(tmp);
}
