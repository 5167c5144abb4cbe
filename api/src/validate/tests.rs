use serde_json::json;

use super::*;
use crate::v1alpha2::{
    CEL_CLUSTER_NAME, CEL_SNAPSHOT_IMMUTABLE, CEL_STORAGE_SHRINK, CEL_TLS_IMMUTABLE,
    CLUSTER_NAME_MAX_LEN,
};

fn cluster(spec: serde_json::Value) -> EtcdClusterSpec {
    parse("spec", &spec).expect("spec parses")
}

#[test]
fn shrink_message_names_both_sizes_and_the_fix() {
    let old = cluster(json!({"version": "3.6.11", "storage": {"size": "10Gi"}}));
    let new = cluster(json!({"version": "3.6.11", "storage": {"size": "5Gi"}}));
    let v = cluster_update(&old, &new);
    assert_eq!(v.len(), 1, "{v:?}");
    let text = v[0].to_string();
    assert_eq!(v[0].field, "spec.storage.size");
    assert_eq!(v[0].old_value.as_deref(), Some("10Gi"));
    assert_eq!(v[0].value.as_deref(), Some("5Gi"));
    assert!(
        text.starts_with(&format!("spec.storage.size: {CEL_STORAGE_SHRINK}"))
            && text.contains("(was 10Gi, now 5Gi)"),
        "{text}"
    );
}

#[test]
fn immutable_subtree_change_names_the_sub_field_and_both_values() {
    let old = cluster(
        json!({"version": "3.6.11", "tls": {"client": {"serverSecretRef": {"name": "a"}}}}),
    );
    let new = cluster(
        json!({"version": "3.6.11", "tls": {"client": {"serverSecretRef": {"name": "b"}}}}),
    );
    let v = cluster_update(&old, &new);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.tls.client.serverSecretRef.name");
    assert_eq!(v[0].old_value.as_deref(), Some("\"a\""));
    assert_eq!(v[0].value.as_deref(), Some("\"b\""));
    let text = v[0].to_string();
    assert!(
        text.contains(CEL_TLS_IMMUTABLE)
            && text.contains("this update changes spec.tls (was \"a\", now \"b\")"),
        "{text}"
    );
}

#[test]
fn immutable_subtree_added_shows_it_as_compact_json() {
    let old = cluster(json!({"version": "3.6.11"}));
    let new = cluster(json!({"version": "3.6.11", "tls": {"peer": {"secretRef": {"name": "p"}}}}));
    let v = cluster_update(&old, &new);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.tls");
    assert_eq!(v[0].old_value.as_deref(), Some("unset"));
    assert_eq!(
        v[0].value.as_deref(),
        Some(r#"{"peer":{"secretRef":{"name":"p"}}}"#)
    );
    assert_eq!(v[0].rule, Some(CEL_TLS_IMMUTABLE));
    assert!(
        v[0].message.contains("this update adds spec.tls"),
        "{}",
        v[0]
    );
}

#[test]
fn snapshot_spec_change_names_what_changed() {
    let spec = |bucket: &str| {
        parse::<EtcdSnapshotSpec>(
            "spec",
            &json!({"clusterRef": {"name": "main"}, "destination": {"s3": {"bucket": bucket}}}),
        )
        .expect("spec parses")
    };
    let v = snapshot_update(&spec("a"), &spec("b"));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.destination.s3.bucket");
    assert_eq!(v[0].old_value.as_deref(), Some("\"a\""));
    assert_eq!(v[0].value.as_deref(), Some("\"b\""));
    // The CEL rule's words, which send the user to a new EtcdSnapshot.
    let text = v[0].to_string();
    assert!(
        text.contains(CEL_SNAPSHOT_IMMUTABLE) && text.contains("create a new EtcdSnapshot"),
        "{text}"
    );
}

#[test]
fn update_of_an_unreadable_stored_object_is_denied_not_judged_as_create() {
    let old =
        json!({"spec": {"version": "3.6.11", "storage": {"size": "10Gi"}, "replicas": "three"}});
    // A shrink: judged as a create it would pass.
    let new = json!({"spec": {"version": "3.6.11", "storage": {"size": "5Gi"}}});
    let v = object("EtcdCluster", &new, Some(&old));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec");
    let text = v[0].to_string();
    assert!(
        text.contains("stored object could not be read")
            && text.contains("spec.replicas")
            && text.contains("delete and recreate"),
        "{text}"
    );
}

#[test]
fn memory_size_beyond_int64_is_accepted_without_panic() {
    let spec = cluster(
        json!({"version": "3.6.11", "storage": {"size": "100000000000000P", "medium": "Memory"}}),
    );
    assert_eq!(cluster_create(&spec), vec![]);
    let bigger = cluster(
        json!({"version": "3.6.11", "storage": {"size": "200000000000000P", "medium": "Memory"}}),
    );
    assert_eq!(cluster_update(&bigger, &spec).len(), 1);
}

#[test]
fn every_violation_is_reported_at_once() {
    let spec = cluster(json!({
        "version": "3.6",
        "replicas": 0,
        "storage": {"size": "0", "medium": "Memory"},
        "auth": {"enabled": true},
        "tls": {"peer": {}},
    }));
    let fields: Vec<_> = cluster_create(&spec).into_iter().map(|v| v.field).collect();
    for f in [
        "spec.replicas",
        "spec.version",
        "spec.storage.size",
        "spec.auth.enabled",
        "spec.auth.rootCredentialsSecretRef",
        "spec.tls.peer",
    ] {
        assert!(fields.iter().any(|x| x == f), "{f} missing from {fields:?}");
    }
}

#[test]
fn unreadable_values_name_the_field_path() {
    let err = parse::<EtcdClusterSpec>(
        "spec",
        &json!({"version": "3.6.11", "tls": {"client": {"certManager": {"serverIssuerRef": {"name": "ca", "kind": "Vault"}}}}}),
    )
    .unwrap_err();
    assert_eq!(
        err.field,
        "spec.tls.client.certManager.serverIssuerRef.kind"
    );
    assert!(err.message.contains("Vault"), "{err}");
    let err = parse::<EtcdClusterSpec>("spec", &json!({"replicas": "three"})).unwrap_err();
    assert_eq!(err.field, "spec.replicas");
}

#[test]
fn cluster_name_verdict_is_the_cel_rule_verdict() {
    let pattern = regex::Regex::new(crate::v1alpha2::CLUSTER_NAME_PATTERN).expect("regex");
    let long = "a".repeat(CLUSTER_NAME_MAX_LEN);
    let too_long = "a".repeat(CLUSTER_NAME_MAX_LEN + 1);
    for name in [
        "a",
        "a1",
        "a-b",
        "my-etcd",
        &long,
        &too_long,
        "",
        "-",
        "a-",
        "9lives",
        "my.cluster",
        "Upper",
        "uPPer",
        "a_b",
        "a--b",
        "é",
        "aé",
        "a b",
    ] {
        let cel = pattern.is_match(name) && name.chars().count() <= CLUSTER_NAME_MAX_LEN;
        assert_eq!(cluster_name(name).is_none(), cel, "{name:?}");
    }
}

#[test]
fn cluster_name_violation_says_what_is_wrong_and_why() {
    let v = cluster_name("9my.etcd-").expect("a violation");
    assert_eq!(v.field, "metadata.name");
    assert_eq!(v.value.as_deref(), Some("\"9my.etcd-\""));
    for part in [
        "starts with '9'",
        "contains '.'",
        "ends with '-'",
        "<name>-client",
    ] {
        assert!(v.to_string().contains(part), "{part} missing from {v}");
    }
    assert_eq!(v.rule, Some(CEL_CLUSTER_NAME));
    let v = cluster_name(&"a".repeat(57)).expect("a violation");
    assert!(v.message.contains("is 57 characters long"), "{v}");
}

#[test]
fn cluster_name_is_judged_on_create_and_update_and_absent_passes() {
    let spec = json!({"version": "3.6.11"});
    let named = |name: &str| json!({"metadata": {"name": name}, "spec": spec});
    let create = object("EtcdCluster", &named("9lives"), None);
    assert_eq!(create.len(), 1, "{create:?}");
    assert_eq!(create[0].field, "metadata.name");
    let update = object("EtcdCluster", &named("9lives"), Some(&named("9lives")));
    assert_eq!(update.len(), 1, "{update:?}");
    let generated = json!({"metadata": {"generateName": "my-etcd-"}, "spec": spec});
    assert_eq!(object("EtcdCluster", &generated, None), vec![]);
}

#[test]
fn unknown_kind_is_denied_not_ignored() {
    let v = object("Pod", &json!({"spec": {}}), None);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].field, "kind");
}

#[test]
fn render_lists_every_problem() {
    let spec = cluster(json!({"version": "x", "replicas": -2}));
    let text = render("EtcdCluster", "demo", &cluster_create(&spec));
    assert!(
        text.starts_with("EtcdCluster \"demo\" is invalid (2 problems):"),
        "{text}"
    );
    assert!(
        text.contains("\n- spec.replicas: must be 0 or more (got -2)"),
        "{text}"
    );
}

fn with_spec(kind: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": kind,
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

#[test]
fn cron_expressions_and_time_zones_cel_cannot_parse_are_refused_with_field_and_value() {
    let schedule = |cron: &str, tz: Option<&str>| {
        let mut spec = json!({"clusterRef": {"name": "e"}, "schedule": cron,
            "snapshotTemplate": {"destination": {"pvc": {"claimName": "b"}}}});
        if let Some(tz) = tz {
            spec["timeZone"] = json!(tz);
        }
        object("EtcdSnapshotSchedule", &with_spec("", "s", spec), None)
    };
    assert_eq!(schedule("*/5 * * * *", Some("Europe/Berlin")), vec![]);
    assert_eq!(schedule("@hourly", None), vec![]);
    for bad in [
        "61 * * * *",
        "* 24 * * *",
        "* * 32 * *",
        "* * * 13 *",
        "*/0 * * * *",
    ] {
        let v = schedule(bad, None);
        assert_eq!(v.len(), 1, "{bad}: {v:?}");
        assert_eq!(v[0].field, "spec.schedule");
        assert_eq!(v[0].value.as_deref(), Some(format!("{bad:?}").as_str()));
        assert!(
            v[0].message.contains("not a valid cron expression"),
            "{v:?}"
        );
    }
    let v = schedule("0 * * * *", Some("Mars/Olympus"));
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.timeZone");
    assert_eq!(v[0].value.as_deref(), Some("\"Mars/Olympus\""));
    assert!(v[0].to_string().contains("Europe/Berlin"), "{v:?}");

    // A policy's time zone is judged with or without a schedule.
    let policy =
        |spec: serde_json::Value| object("EtcdDefragPolicy", &with_spec("", "p", spec), None);
    let v = policy(
        json!({"clusterRef": {"name": "e"}, "checkInterval": "1h", "timeZone": "Mars/Olympus"}),
    );
    assert_eq!(
        v.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
        ["spec.timeZone"]
    );
    let v = policy(json!({"clusterRef": {"name": "e"}, "schedule": "0 3 31 2 *"}));
    assert_eq!(
        v,
        vec![],
        "a valid expression that never fires is for the controller to report"
    );
}

#[test]
fn schedule_and_policy_report_every_problem_at_once() {
    let spec = json!({"clusterRef": {"name": ""}, "schedule": "0 * * *",
        "startingDeadlineSeconds": 0,
        "retention": {"keepLast": 0, "maxAge": "1w"},
        "snapshotTemplate": {"destination": {}}});
    let name = "x".repeat(45);
    let fields: Vec<String> = object("EtcdSnapshotSchedule", &with_spec("", &name, spec), None)
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(
        fields,
        [
            "metadata.name",
            "spec.clusterRef.name",
            "spec.schedule",
            "spec.snapshotTemplate.destination",
            "spec.startingDeadlineSeconds",
            "spec.retention.keepLast",
            "spec.retention.maxAge",
        ]
    );
    let spec = json!({"clusterRef": {"name": "e"}, "checkInterval": "30s",
        "rule": {"all": true}, "failedRunsHistoryLimit": -1});
    let fields: Vec<String> = object("EtcdDefragPolicy", &with_spec("", "p", spec), None)
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(
        fields,
        [
            "spec.checkInterval",
            "spec.rule.all",
            "spec.failedRunsHistoryLimit"
        ]
    );
    // Updates are judged as creates: both specs are mutable.
    let old = with_spec(
        "",
        "p",
        json!({"clusterRef": {"name": "e"}, "schedule": "@daily"}),
    );
    let new = with_spec(
        "",
        "p",
        json!({"clusterRef": {"name": "e"}, "schedule": "@weekly"}),
    );
    assert_eq!(object("EtcdDefragPolicy", &new, Some(&old)), vec![]);
}

/// The reference runbook quotes the apiserver's CEL messages; a user with the webhook installed
/// reads the validator's answer, which must contain those words as written there.
#[test]
fn the_runbooks_quoted_messages_are_in_the_validators_answer() {
    let memory = json!({"version": "3.6.11", "replicas": 3, "storage": {"size": "256Mi", "medium": "Memory"}});
    let mut paused = memory.clone();
    paused["replicas"] = json!(0);
    let text = render(
        "EtcdCluster",
        "my-mem-etcd",
        &cluster_update(&cluster(memory), &cluster(paused)),
    );
    assert!(
        text.contains("spec.replicas=0 with spec.storage.medium=Memory is unsupported: "),
        "{text}"
    );
    let tls = cluster(
        json!({"version": "3.6.11", "tls": {"client": {"serverSecretRef": {"name": "s"}}}}),
    );
    let plain = cluster(json!({"version": "3.6.11"}));
    let text = render("EtcdCluster", "my-cluster", &cluster_update(&tls, &plain));
    assert!(
        text.contains(
            "spec.tls cannot be added to or removed from an existing cluster; delete and recreate"
        ),
        "{text}"
    );
    // ... with what only the webhook can add: which way it changed, and the values.
    assert!(text.contains("this update removes spec.tls"), "{text}");
    assert!(text.contains("now unset)"), "{text}");
}

#[test]
fn a_toleration_violation_names_the_item_its_value_and_the_rule() {
    let spec = cluster(json!({"version": "3.6.11", "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "etcd", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists", "value": "etcd"},
    ]}));
    let v = cluster_create(&spec);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].field, "spec.tolerations[1].value");
    assert_eq!(
        v[0].rule,
        Some(crate::v1alpha2::CEL_TOLERATION_EXISTS_VALUE)
    );
    let text = v[0].to_string();
    assert!(
        text.contains("(got \"etcd\")") && text.contains("remove value, or use operator Equal"),
        "{text}"
    );
}

#[test]
fn placement_rules_of_a_pod_are_each_reported() {
    let spec = cluster(json!({"version": "3.6.11",
        "tolerations": [
            {"key": "dedicated", "operator": "exists"},
            {"operator": "Equal", "value": "etcd"},
            {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30},
            {"key": "dedicated", "value": "etcd", "effect": "NoRun"},
        ],
        "nodeSelector": {"-bad": "etcd", "dedicated": "etcd/nodes"},
        "priorityClassName": "Etcd-Critical",
    }));
    let v = cluster_create(&spec);
    let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.tolerations[0].operator",
            "spec.tolerations[1].operator",
            "spec.tolerations[2].tolerationSeconds",
            "spec.tolerations[3].effect",
            "spec.nodeSelector",
            "spec.nodeSelector[\"dedicated\"]",
            "spec.priorityClassName",
        ],
        "{v:#?}"
    );
    // A lowercase operator gets told it is case-sensitive.
    assert!(v[0].hint.contains("case-sensitive"), "{}", v[0]);
    assert!(v[4].to_string().contains("\"-bad\""), "{}", v[4]);
}

#[test]
fn label_keys_are_judged_as_kubernetes_does() {
    let judged = |key: &str| {
        let spec = cluster(json!({"version": "3.6.11", "nodeSelector": {key: "x"}}));
        cluster_create(&spec).is_empty()
    };
    for good in [
        "dedicated",
        "node-role.kubernetes.io/etcd",
        "a",
        "A_b.c-D",
        &"n".repeat(63),
        &format!("{}/{}", "p".repeat(253), "n".repeat(63)),
    ] {
        assert!(judged(good), "{good:?} refused");
    }
    for bad in [
        "",
        "/name",
        "-x",
        "x-",
        "Example.com/x",
        "a/b/c",
        &"n".repeat(64),
        &format!("{}/x", "p".repeat(254)),
    ] {
        assert!(!judged(bad), "{bad:?} accepted");
    }
}
