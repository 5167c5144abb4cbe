//! The EtcdSnapshotSchedule CEL rules, judged by kube's CEL evaluator on the generated CRD
//! schema: a well-formed schedule passes, and each rule rejects its bad value with a message
//! naming the field.

use kube::core::cel::Validator;
use serde_json::{json, Value};

fn schema() -> Value {
    let crd = api::crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "EtcdSnapshotSchedule")
        .expect("the EtcdSnapshotSchedule CRD");
    api::crd::schema_json(&crd).expect("schema")
}

fn object(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshotSchedule",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn good_spec() -> Value {
    json!({
        "clusterRef": {"name": "my-etcd"},
        "schedule": "*/5 * * * *",
        "timeZone": "Europe/Berlin",
        "snapshotTemplate": {"destination": {"pvc": {"claimName": "backups"}}},
        "retention": {"keepLast": 3, "maxAge": "7d"},
    })
}

fn errors(obj: &Value) -> Vec<String> {
    match Validator::new().validate(&schema(), obj, None) {
        Ok(()) => vec![],
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn a_well_formed_schedule_passes() {
    assert_eq!(
        errors(&object("my-etcd-hourly", good_spec())),
        Vec::<String>::new()
    );
    let mut spec = good_spec();
    spec["schedule"] = json!("@daily");
    spec["retention"] = json!({"keepLast": 1});
    assert_eq!(errors(&object("x", spec)), Vec::<String>::new());
}

#[test]
fn each_rule_rejects_its_bad_value_naming_the_field() {
    let case = |field: &str, value: Value, name: &str, want: &str| {
        let mut spec = good_spec();
        if !field.is_empty() {
            spec[field] = value;
        }
        let errs = errors(&object(name, spec));
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{field} in a spec named {name}: {errs:?}"
        );
    };
    case(
        "schedule",
        json!("* * * *"),
        "s",
        "spec.schedule must be a 5-field cron",
    );
    case(
        "schedule",
        json!("* * * * * *"),
        "s",
        "spec.schedule must be a 5-field cron",
    );
    case(
        "schedule",
        json!("@sometimes"),
        "s",
        "spec.schedule must be a 5-field cron",
    );
    case(
        "timeZone",
        json!("Europe Berlin"),
        "s",
        "spec.timeZone must be an IANA",
    );
    case(
        "retention",
        json!({}),
        "s",
        "spec.retention needs keepLast, maxAge or both",
    );
    case(
        "retention",
        json!({"maxAge": "1w"}),
        "s",
        "spec.retention.maxAge must be",
    );
    case(
        "",
        json!(null),
        &"a".repeat(45),
        "metadata.name must be a DNS label of at most 44",
    );
}
