//! The shared corpus judged client-side: the generated CRD schema (OpenAPI structure, bounds,
//! patterns and enums via a JSON-schema validator; CEL rules via kube's CEL evaluator, both on the
//! defaulted object as the apiserver does) and the Rust validator must both reach each case's
//! recorded verdict, and every rejection must name the case's field.

use api::corpus::{cases, Case};
use kube::core::cel::{apply_defaults, Validator};
use serde_json::Value;

struct Schemas {
    cluster: Value,
    snapshot: Value,
    defrag: Value,
    recovery: Value,
    schedule: Value,
    policy: Value,
}

fn schemas() -> Schemas {
    let by_kind: Vec<(String, Value)> = api::crd::all()
        .into_iter()
        .map(|crd| {
            (
                crd.spec.names.kind.clone(),
                api::crd::schema_json(&crd).expect("schema"),
            )
        })
        .collect();
    let take = |kind: &str| {
        by_kind
            .iter()
            .find(|(k, _)| k == kind)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("no CRD for {kind}"))
    };
    let cluster = take("EtcdCluster");
    let snapshot = take("EtcdSnapshot");
    let defrag = take("EtcdDefrag");
    let recovery = take("EtcdRecovery");
    let schedule = take("EtcdSnapshotSchedule");
    let policy = take("EtcdDefragPolicy");
    Schemas {
        cluster,
        snapshot,
        defrag,
        recovery,
        schedule,
        policy,
    }
}

/// The structural schema written as plain JSON Schema: `nullable` becomes a null type, and
/// int-or-string becomes both types. CEL rules are left for the CEL evaluator.
fn as_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                match k.as_str() {
                    "nullable" | "x-kubernetes-int-or-string" | "x-kubernetes-validations" => {}
                    "format" => {}
                    "properties" | "additionalProperties" | "items" => {
                        out.insert(k.clone(), as_json_schema_map_or_schema(k, v));
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                out.insert("type".into(), serde_json::json!(["integer", "string"]));
            }
            if map.get("nullable") == Some(&Value::Bool(true)) {
                match out.get("type").cloned() {
                    Some(Value::String(t)) => {
                        out.insert("type".into(), serde_json::json!([t, "null"]));
                    }
                    Some(Value::Array(mut ts)) => {
                        ts.push("null".into());
                        out.insert("type".into(), Value::Array(ts));
                    }
                    _ => {}
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn as_json_schema_map_or_schema(key: &str, v: &Value) -> Value {
    match (key, v) {
        ("properties", Value::Object(props)) => Value::Object(
            props
                .iter()
                .map(|(name, s)| (name.clone(), as_json_schema(s)))
                .collect(),
        ),
        _ => as_json_schema(v),
    }
}

fn json_path_to_field(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

/// What the apiserver would say, short of a real one: every schema and CEL error as text.
fn schema_verdict(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<String> {
    let defaulted = apply_defaults(schema, obj);
    let validator = jsonschema::validator_for(&as_json_schema(schema)).expect("schema compiles");
    let mut errors: Vec<String> = validator
        .iter_errors(&defaulted)
        .map(|e| {
            let mut field = json_path_to_field(&e.instance_path().to_string());
            // The apiserver reports a missing property at the property's own path.
            if let jsonschema::error::ValidationErrorKind::Required { property } = e.kind() {
                field = format!("{field}.{}", property.as_str().unwrap_or_default());
            }
            format!("{field}: {e}")
        })
        .collect();
    if let Err(cel) = Validator::new().validate(schema, obj, old) {
        errors.extend(cel.iter().map(|e| e.to_string()));
    }
    errors
}

fn rust_verdict(case: &Case) -> Vec<String> {
    let new = case.object("x", "default");
    let old = case.old_object("x", "default");
    api::validate::object(&case.kind, &new, old.as_ref())
        .iter()
        .map(|v| v.to_string())
        .collect()
}

#[test]
fn corpus_cases_have_unique_names_and_rejections_name_a_field() {
    let cases = cases();
    let mut names: Vec<_> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "duplicate case names");
    for c in &cases {
        assert_eq!(
            c.allowed,
            c.field.is_none(),
            "{}: a rejection needs `field`, an acceptance none",
            c.name
        );
    }
}

/// A case that names its object is judged as a create in a namespace shared with every other
/// case: an update would be sent to the name the suite picked, and a name used twice would
/// collide on a real apiserver.
#[test]
fn cases_with_their_own_object_name_are_unique_creates() {
    let cases = cases();
    let mut names = Vec::new();
    for c in cases.iter().filter(|c| c.metadata_name.is_some()) {
        assert!(
            c.old_spec.is_none(),
            "{}: metadataName on an update",
            c.name
        );
        names.push(c.metadata_name.as_deref());
    }
    let count = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), count, "a metadataName is used twice");
}

#[test]
fn every_design_rule_has_an_accepted_and_a_rejected_case() {
    let cases = cases();
    for rule in [
        "1 ", "2 ", "3 ", "4 ", "5 ", "6 ", "7 ", "8 ", "9 ", "10 ", "11 ", "12 ", "13 ",
    ] {
        let of_rule: Vec<_> = cases.iter().filter(|c| c.rule.starts_with(rule)).collect();
        assert!(
            of_rule.iter().any(|c| c.allowed),
            "rule {rule}has no accepted case"
        );
        assert!(
            of_rule.iter().any(|c| !c.allowed),
            "rule {rule}has no rejected case"
        );
    }
    for rule in ["3 ", "4 ", "5 ", "13 "] {
        assert!(
            cases
                .iter()
                .any(|c| c.rule.starts_with(rule) && c.old_spec.is_some() && c.allowed)
                && cases
                    .iter()
                    .any(|c| c.rule.starts_with(rule) && c.old_spec.is_some() && !c.allowed),
            "update rule {rule}needs an accepted and a rejected transition"
        );
    }
}

#[test]
fn crd_schema_and_rust_validator_agree_on_every_corpus_case() {
    let schemas = schemas();
    let mut failures = Vec::new();
    for case in cases() {
        let schema = match case.kind.as_str() {
            "EtcdCluster" => &schemas.cluster,
            "EtcdSnapshot" => &schemas.snapshot,
            "EtcdDefrag" => &schemas.defrag,
            "EtcdRecovery" => &schemas.recovery,
            "EtcdSnapshotSchedule" => &schemas.schedule,
            "EtcdDefragPolicy" => &schemas.policy,
            k => panic!("{}: unknown kind {k}", case.name),
        };
        let obj = case.object("x", "default");
        let old = case.old_object("x", "default");
        if let Some(old) = &old {
            let errs = schema_verdict(schema, old, None);
            if !errs.is_empty() {
                failures.push(format!(
                    "{}: oldSpec is itself invalid: {errs:?}",
                    case.name
                ));
                continue;
            }
        }
        let by_schema = schema_verdict(schema, &obj, old.as_ref());
        let by_rust = rust_verdict(&case);
        for (judge, errors) in [("CRD schema/CEL", &by_schema), ("api::validate", &by_rust)] {
            if errors.is_empty() != case.allowed {
                failures.push(format!(
                    "{}: {judge} says {} (expected {}): {errors:?}",
                    case.name,
                    if errors.is_empty() {
                        "allowed"
                    } else {
                        "denied"
                    },
                    if case.allowed { "allowed" } else { "denied" },
                ));
            }
            if let Some(field) = &case.field {
                if !errors.is_empty() && !errors.iter().any(|e| e.contains(field.as_str())) {
                    failures.push(format!(
                        "{}: {judge} does not name {field}: {errors:?}",
                        case.name
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreement(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The name rule is guarded for an object without a name (only `generateName`): the apiserver
/// assigns the name before validating, but a client-side check may see the object before that.
#[test]
fn name_rule_passes_an_object_that_only_has_generate_name() {
    let schema = schemas().cluster;
    let generated = serde_json::json!({
        "apiVersion": api::v1alpha2::API_VERSION,
        "kind": "EtcdCluster",
        "metadata": {"generateName": "my-etcd-", "namespace": "default"},
        "spec": {"version": "3.6.11"},
    });
    assert_eq!(
        schema_verdict(&schema, &generated, None),
        Vec::<String>::new()
    );
    assert_eq!(
        api::validate::object("EtcdCluster", &generated, None),
        vec![]
    );
    let mut named = generated.clone();
    named["metadata"]["name"] = "9lives".into();
    let errors = schema_verdict(&schema, &named, None);
    assert!(
        errors.len() == 1 && errors[0].contains("metadata.name"),
        "{errors:?}"
    );
}

/// The runbook quotes the apiserver's CEL messages; with the webhook installed the user reads
/// the validator's rendering instead. So every CEL rule that rejects a corpus case must have its
/// message, verbatim, in the validator's answer on the same case.
#[test]
fn rust_validator_answers_carry_the_message_of_every_cel_rule_that_rejects() {
    let schemas = schemas();
    let messages = api::crd::cel_messages();
    let mut missing = Vec::new();
    let mut compared = 0;
    // A bare suffix or sign ("Gi", "-") is the quantity 0 to the apiserver (and to
    // `api::quantity`), but not a quantity to kube's client-side CEL evaluator, so it fires
    // another rule here than on an apiserver; the suite on a real apiserver compares these.
    const CLIENT_CEL_QUANTITY_DIVERGES: [&str; 2] = [
        "memory-size-bare-suffix-rejected",
        "memory-size-bare-sign-rejected",
    ];
    for case in cases()
        .iter()
        .filter(|c| !c.allowed && !CLIENT_CEL_QUANTITY_DIVERGES.contains(&c.name.as_str()))
    {
        let schema = match case.kind.as_str() {
            "EtcdCluster" => &schemas.cluster,
            "EtcdSnapshot" => &schemas.snapshot,
            "EtcdDefrag" => &schemas.defrag,
            "EtcdRecovery" => &schemas.recovery,
            "EtcdSnapshotSchedule" => &schemas.schedule,
            _ => &schemas.policy,
        };
        let obj = case.object("x", "default");
        let old = case.old_object("x", "default");
        let Err(cel) = Validator::new().validate(schema, &obj, old.as_ref()) else {
            continue;
        };
        let cel: Vec<String> = cel.iter().map(|e| e.to_string()).collect();
        let rust = rust_verdict(case).join("\n");
        for message in messages
            .iter()
            .filter(|m| cel.iter().any(|e| e.contains(*m)))
        {
            compared += 1;
            if !rust.contains(message.as_str()) {
                missing.push(format!(
                    "{}: CEL says {message:?}; the validator says {rust:?}",
                    case.name
                ));
            }
        }
    }
    assert!(compared > 20, "only {compared} CEL rejections compared");
    assert!(
        missing.is_empty(),
        "{} CEL message(s) missing from the validator's answer:\n{}",
        missing.len(),
        missing.join("\n")
    );
}
