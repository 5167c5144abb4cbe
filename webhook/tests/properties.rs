//! Property tests against the running webhook over HTTPS: random and half-valid bodies never
//! cause a 5xx (or a panic, which would surface as a dropped connection), and random edits of
//! a valid EtcdCluster are allowed exactly when `api::validate` finds nothing wrong — so the
//! webhook never admits an object the validator rejects. Bounded to a few hundred cases each.

// Test helpers outside `#[test]` functions: a failed set-up step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Mutex;

use hyper::StatusCode;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::{json, Value};
use support::{cluster, review, Connection, Harness};

const CASES: u32 = 256;

/// A webhook on a runtime of its own, and one keep-alive connection (re-opened if it breaks).
struct Target {
    runtime: tokio::runtime::Runtime,
    harness: Harness,
    conn: Mutex<Option<Connection>>,
}

impl Target {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let harness = runtime.block_on(Harness::start());
        Self {
            runtime,
            harness,
            conn: Mutex::new(None),
        }
    }

    fn post(&self, path: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
        let mut slot = self.conn.lock().unwrap();
        self.runtime.block_on(async {
            for _ in 0..2 {
                if slot.is_none() {
                    *slot = Some(self.harness.connect().await);
                }
                let conn = slot.as_mut().unwrap();
                match conn.post(path, body.clone()).await {
                    Ok((status, body)) => return (status, body.to_vec()),
                    Err(_) => *slot = None, // the server closed it; one retry on a new one
                }
            }
            panic!("the webhook dropped two connections in a row for one request");
        })
    }

    /// POST and require an AdmissionReview answer (HTTP 200), returning its `response`.
    fn review(&self, path: &str, body: &Value) -> Result<Value, TestCaseError> {
        let (status, raw) = self.post(path, serde_json::to_vec(body).unwrap());
        prop_assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&raw));
        let answer: Value = serde_json::from_slice(&raw).unwrap();
        prop_assert!(answer["response"]["allowed"].is_boolean(), "{}", answer);
        Ok(answer["response"].clone())
    }
}

fn runner() -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..12).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(vec![
            "",
            "3.6.11",
            "3.5.0",
            "v3.6.11",
            "1Gi",
            "512Mi",
            "0",
            "-1Gi",
            "10Gi",
            "1",
            "268435456",
            "Memory",
            "periodic",
            "revision",
            "1h",
            "30m",
            "Issuer",
            "ClusterIssuer",
            "name",
            "key/",
            "snap.db",
            "CREATE",
            "UPDATE",
            "DELETE",
        ])
        .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "name", "size", "medium", "s3", "pvc", "key", "kind", "spec", "uid"
                ]),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

/// Set (or with `None` remove) the value at `path`, creating objects on the way.
fn set(target: &mut Value, path: &[&str], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = target;
    for key in parents {
        if !node.is_object() {
            *node = json!({});
        }
        node = node
            .as_object_mut()
            .unwrap()
            .entry(key.to_string())
            .or_insert_with(|| json!({}));
    }
    if !node.is_object() {
        *node = json!({});
    }
    let map = node.as_object_mut().unwrap();
    match value {
        Some(v) => {
            map.insert(last.to_string(), v);
        }
        None => {
            map.remove(*last);
        }
    }
}

const SPEC_PATHS: &[&[&str]] = &[
    &["replicas"],
    &["version"],
    &["storage"],
    &["storage", "size"],
    &["storage", "medium"],
    &["storage", "storageClassName"],
    &["progressDeadlineSeconds"],
    &["tls"],
    &["tls", "client"],
    &["tls", "client", "serverSecretRef"],
    &["tls", "client", "serverSecretRef", "name"],
    &["tls", "client", "operatorClientSecretRef"],
    &["tls", "client", "certManager"],
    &["tls", "client", "certManager", "serverIssuerRef"],
    &["tls", "client", "certManager", "serverIssuerRef", "kind"],
    &["tls", "peer"],
    &["tls", "peer", "secretRef"],
    &["tls", "peer", "certManager"],
    &["auth"],
    &["auth", "enabled"],
    &["auth", "rootCredentialsSecretRef"],
    &["bootstrap"],
    &["bootstrap", "restore", "source", "s3", "key"],
    &["bootstrap", "restore", "source", "pvc"],
    &["options", "quotaBackendBytes"],
    &["options", "autoCompactionMode"],
    &["options", "autoCompactionRetention"],
    &["options", "snapshotCount"],
    &["resources"],
    &["resources", "limits", "memory"],
    &["resources", "requests"],
    &["affinity"],
    &["affinity", "podAntiAffinity"],
    &["topologySpreadConstraints"],
    &["imagePullSecrets"],
    &["additionalMetadata", "labels"],
    &["tolerations"],
    &["nodeSelector"],
    &["priorityClassName"],
];

fn valid_spec() -> Value {
    json!({
        "version": "3.6.11",
        "replicas": 3,
        "storage": {"size": "1Gi"},
        "progressDeadlineSeconds": 600,
        "tls": {"client": {"serverSecretRef": {"name": "srv"}}, "peer": {"secretRef": {"name": "peer"}}},
        "auth": {"enabled": true, "rootCredentialsSecretRef": {"name": "root"}},
        "options": {"quotaBackendBytes": 0, "autoCompactionMode": "periodic",
                    "autoCompactionRetention": "1h", "snapshotCount": 10000}
    })
}

type Edits = Vec<(usize, Option<Value>)>;

fn edits() -> impl Strategy<Value = Edits> {
    prop::collection::vec(
        (
            0..SPEC_PATHS.len(),
            prop::option::weighted(0.85, json_value()),
        ),
        0..5,
    )
}

fn edited(edits: &Edits) -> Value {
    let mut spec = valid_spec();
    for (path, value) in edits {
        set(&mut spec, SPEC_PATHS[*path], value.clone());
    }
    spec
}

#[test]
fn random_bodies_never_get_a_5xx() {
    let target = Target::start();
    let bytes = prop::collection::vec(any::<u8>(), 0..512);
    runner()
        .run(&bytes, |body| {
            for path in ["/validate", "/mutate"] {
                let (status, _) = target.post(path, body.clone());
                prop_assert!(
                    status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
                    "{path}: {status}"
                );
            }
            Ok(())
        })
        .unwrap();
}

const REVIEW_PATHS: &[&[&str]] = &[
    &["apiVersion"],
    &["kind"],
    &["request"],
    &["request", "uid"],
    &["request", "kind"],
    &["request", "kind", "kind"],
    &["request", "kind", "group"],
    &["request", "operation"],
    &["request", "name"],
    &["request", "subResource"],
    &["request", "userInfo"],
    &["request", "userInfo", "username"],
    &["request", "object"],
    &["request", "object", "metadata"],
    &["request", "object", "metadata", "name"],
    &["request", "object", "spec"],
    &["request", "oldObject"],
    &["request", "oldObject", "spec"],
    &["request", "dryRun"],
];

#[test]
fn half_valid_reviews_get_an_answer_or_a_400_never_a_5xx() {
    let target = Target::start();
    let strategy = prop::collection::vec(
        (
            0..REVIEW_PATHS.len(),
            prop::option::weighted(0.85, json_value()),
        ),
        1..4,
    );
    runner()
        .run(&strategy, |edits| {
            let mut body = review(
                "UPDATE",
                "EtcdCluster",
                Some(cluster("prop", valid_spec())),
                Some(cluster("prop", valid_spec())),
                "alice",
            );
            for (path, value) in &edits {
                set(&mut body, REVIEW_PATHS[*path], value.clone());
            }
            for path in ["/validate", "/mutate"] {
                let (status, raw) = target.post(path, serde_json::to_vec(&body).unwrap());
                prop_assert!(
                    status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
                    "{path}: {status} for {body}"
                );
                if status == StatusCode::OK {
                    let answer: Value = serde_json::from_slice(&raw).unwrap();
                    prop_assert!(answer["response"]["allowed"].is_boolean(), "{answer}");
                    prop_assert_eq!(&answer["response"]["uid"], &body["request"]["uid"]);
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn edited_cluster_create_is_allowed_exactly_when_the_validator_finds_nothing() {
    let target = Target::start();
    runner()
        .run(&edits(), |edits| {
            let object = cluster("prop", edited(&edits));
            let violations = api::validate::object("EtcdCluster", &object, None);
            let response = target.review(
                "/validate",
                &review("CREATE", "EtcdCluster", Some(object.clone()), None, "alice"),
            )?;
            prop_assert_eq!(
                response["allowed"].as_bool(),
                Some(violations.is_empty()),
                "{} → {} / {:?}",
                object,
                response,
                violations
            );
            if !violations.is_empty() {
                let message = response["status"]["message"].as_str().unwrap_or_default();
                for v in &violations {
                    prop_assert!(
                        message.contains(&v.field),
                        "{} missing in {}",
                        v.field,
                        message
                    );
                }
            }

            // Mutation: the same verdict as validation (invalid objects are denied there, before
            // the CRD's CEL runs); for valid ones the patch always applies and never turns the
            // object invalid.
            let mutated = target.review(
                "/mutate",
                &review("CREATE", "EtcdCluster", Some(object.clone()), None, "alice"),
            )?;
            prop_assert_eq!(mutated["allowed"].as_bool(), Some(violations.is_empty()));
            let mut patched = object.clone();
            if let Some(patch) = support::patch_of(&mutated) {
                prop_assert!(
                    json_patch::patch(&mut patched, &patch).is_ok(),
                    "{:?} on {}",
                    patch,
                    object
                );
            }
            if violations.is_empty() {
                let after = api::validate::object("EtcdCluster", &patched, None);
                prop_assert!(after.is_empty(), "defaults broke {}: {:?}", patched, after);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn edited_cluster_update_is_never_allowed_when_the_transition_is_invalid() {
    let target = Target::start();
    runner()
        .run(&(edits(), edits()), |(old_edits, new_edits)| {
            let old = cluster("prop", edited(&old_edits));
            let new = cluster("prop", edited(&new_edits));
            let violations = api::validate::object("EtcdCluster", &new, Some(&old));
            let unchanged = old["spec"] == new["spec"];
            let response = target.review(
                "/validate",
                &review(
                    "UPDATE",
                    "EtcdCluster",
                    Some(new.clone()),
                    Some(old.clone()),
                    "alice",
                ),
            )?;
            let expected = unchanged || violations.is_empty();
            prop_assert_eq!(
                response["allowed"].as_bool(),
                Some(expected),
                "{} → {}: {} / {:?}",
                old,
                new,
                response,
                violations
            );
            Ok(())
        })
        .unwrap();
}
