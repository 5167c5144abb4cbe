//! The EtcdDefragPolicy CEL rules, judged by kube's CEL evaluator on the generated CRD schema: a
//! well-formed policy passes, and each rule rejects its bad value with a message naming the
//! field.

use kube::core::cel::Validator;
use serde_json::{json, Value};

fn schema() -> Value {
    let crd = api::crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "EtcdDefragPolicy")
        .expect("the EtcdDefragPolicy CRD");
    api::crd::schema_json(&crd).expect("schema")
}

fn object(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdDefragPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

fn good_spec() -> Value {
    json!({
        "clusterRef": {"name": "my-etcd"},
        "schedule": "0 3 * * 0",
        "timeZone": "Europe/Berlin",
        "checkInterval": "15m",
        "rule": {"freeSpaceAbove": "500Mi", "quotaUsageAbove": "80%"},
        "successfulRunsHistoryLimit": 3,
        "failedRunsHistoryLimit": 1,
    })
}

fn errors(obj: &Value) -> Vec<String> {
    match Validator::new().validate(&schema(), obj, None) {
        Ok(()) => vec![],
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn well_formed_policies_pass() {
    assert_eq!(
        errors(&object("my-etcd-defrag", good_spec())),
        Vec::<String>::new()
    );
    // Only a schedule, unconditional runs.
    let spec = json!({"clusterRef": {"name": "c"}, "schedule": "@weekly", "rule": {"all": true}});
    assert_eq!(errors(&object("x", spec)), Vec::<String>::new());
    // Only a check.
    let spec = json!({"clusterRef": {"name": "c"}, "checkInterval": "1h"});
    assert_eq!(errors(&object("x", spec)), Vec::<String>::new());
}

#[test]
fn each_rule_rejects_its_bad_value_naming_the_field() {
    let case = |edit: &dyn Fn(&mut Value), name: &str, want: &str| {
        let mut spec = good_spec();
        edit(&mut spec);
        let errs = errors(&object(name, spec));
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{want} for a spec named {name}: {errs:?}"
        );
    };
    let set = |field: &'static str, value: Value| {
        move |spec: &mut Value| {
            spec[field] = value.clone();
        }
    };
    let drop_both = |spec: &mut Value| {
        let o = spec.as_object_mut().expect("object");
        o.remove("schedule");
        o.remove("checkInterval");
    };
    case(&drop_both, "p", "spec needs schedule");
    case(
        &set("rule", json!({"all": true})),
        "p",
        "spec.rule.all=true with spec.checkInterval",
    );
    case(
        &set("schedule", json!("* * * *")),
        "p",
        "spec.schedule must be a 5-field cron",
    );
    case(
        &set("timeZone", json!("Europe Berlin")),
        "p",
        "spec.timeZone must be an IANA",
    );
    case(
        &set("checkInterval", json!("1d")),
        "p",
        "spec.checkInterval must be a whole number of minutes or hours",
    );
    case(
        &set("rule", json!({"all": true, "freeSpaceAbove": "1Gi"})),
        "p",
        "spec.rule.all=true defragments every member unconditionally",
    );
    case(
        &|_: &mut Value| {},
        &"a".repeat(64),
        "metadata.name must be at most 63 characters",
    );
    case(
        &set("rule", json!({"quotaUsageAbove": "100%"})),
        "p",
        "spec.rule.quotaUsageAbove must be a whole percentage from 1% to 99%",
    );
}

#[test]
fn a_policy_written_for_the_reference_passes_with_every_released_field() {
    let spec = json!({
        "clusterRef": {"name": "my-etcd"},
        "schedule": "*/5 * * * *",
        "suspend": false,
        "concurrencyPolicy": "Allow",
        "startingDeadlineSeconds": 0,
        "historyLimit": 0,
        "ttlSecondsAfterFinished": 0,
        "rule": {"freeSpaceAbove": "100Mi", "quotaUsageAbove": "99%", "minReclaim": "16Mi"},
    });
    assert_eq!(errors(&object(&"a".repeat(63), spec)), Vec::<String>::new());
}
