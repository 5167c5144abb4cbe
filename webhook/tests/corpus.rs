//! The shared validation corpus (api/testdata/validation-corpus.yaml), case by case, as real
//! AdmissionReviews to the webhook over HTTPS: every verdict must match the recorded one, and
//! every denial must name the recorded field.

// Test helpers outside `#[test]` functions: a failed set-up step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::{review, Harness, CONTROLLER};

fn object_of(case: &api::corpus::Case) -> Value {
    case.object(&format!("corpus-{}", case.name), "default")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_corpus_case_gets_its_recorded_verdict_over_https() {
    let harness = Harness::start().await;
    let mut conn = harness.connect().await;
    let cases = api::corpus::cases();
    assert!(!cases.is_empty());
    let mut mismatches = Vec::new();
    for case in &cases {
        let old = case.old_object(&format!("corpus-{}", case.name), "default");
        let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
        let body = review(operation, &case.kind, Some(object_of(case)), old, "alice");
        let response = conn.review("/validate", &body).await;
        let allowed = response["allowed"].as_bool().unwrap_or_default();
        if allowed != case.allowed {
            mismatches.push(format!(
                "{}: expected allowed={}, got {response}",
                case.name, case.allowed
            ));
            continue;
        }
        if !allowed {
            let message = response["status"]["message"].as_str().unwrap_or_default();
            assert_eq!(response["status"]["code"], 422, "{}: {response}", case.name);
            assert_eq!(
                response["status"]["reason"], "Invalid",
                "{}: {response}",
                case.name
            );
            if let Some(field) = &case.field {
                if !message.contains(field.as_str()) {
                    mismatches.push(format!(
                        "{}: message does not name {field}: {message}",
                        case.name
                    ));
                }
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Defaults never turn an object the validator accepts into one it rejects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_applied_to_accepted_corpus_clusters_are_still_accepted() {
    let harness = Harness::start().await;
    let mut conn = harness.connect().await;
    let creates = api::corpus::cases()
        .into_iter()
        .filter(|c| c.kind == "EtcdCluster" && c.old_spec.is_none() && c.allowed);
    let mut checked = 0;
    for case in creates {
        let object = object_of(&case);
        let mutated = conn
            .review(
                "/mutate",
                &review("CREATE", "EtcdCluster", Some(object.clone()), None, "alice"),
            )
            .await;
        assert_eq!(mutated["allowed"], true, "{}: {mutated}", case.name);
        let patched = support::apply_patch(&object, &mutated);
        assert!(
            patched["spec"]["affinity"]["podAntiAffinity"].is_object(),
            "{}: {patched}",
            case.name
        );
        let validated = conn
            .review(
                "/validate",
                &review(
                    "CREATE",
                    "EtcdCluster",
                    Some(patched.clone()),
                    None,
                    CONTROLLER,
                ),
            )
            .await;
        assert_eq!(
            validated["allowed"], true,
            "{}: {patched} → {validated}",
            case.name
        );
        checked += 1;
    }
    assert!(checked > 5, "only {checked} accepted create cases");
}
