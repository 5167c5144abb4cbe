use super::*;
use api::v1alpha2::{EtcdClusterStatus, ObservedSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

#[test]
fn shared_status_patch_clears_what_the_new_status_dropped_at_every_depth() {
    let old = json!({
        "phase": "Running",
        "observed": {"replicas": 3, "resources": {"requests": {"cpu": "100m"}}},
        "startedAt": "2026-11-23T00:00:00Z",
    });
    let new = json!({"phase": "Complete", "observed": {"replicas": 5}});
    let patch = status_merge_patch(Some(&old), &new).unwrap();
    assert_eq!(patch["startedAt"], serde_json::Value::Null);
    assert_eq!(patch["observed"]["resources"], serde_json::Value::Null);
    let mut applied = old.clone();
    json_patch::merge(&mut applied, &patch);
    assert_eq!(applied, new, "patch {patch}");
}

#[test]
fn shared_status_patch_without_an_old_status_is_the_new_one() {
    let new = json!({"phase": "Pending"});
    assert_eq!(status_merge_patch(None, &new).unwrap(), new);
}

fn stale_write() -> Error {
    Error::Kube(kube::Error::Api(
        kube::core::Status::failure("the object has been modified", "Conflict")
            .with_code(409)
            .boxed(),
    ))
}

#[test]
fn the_backoff_table_keeps_each_controllers_delays_and_the_clusters_fast_stale_write_retry() {
    let other = Error::EtcdUnavailable;
    let table: Vec<(&str, u128, u128)> = CONTROLLERS
        .iter()
        .map(|c| {
            (
                c.name,
                backoff(c, &stale_write()).as_millis(),
                backoff(c, &other).as_millis(),
            )
        })
        .collect();
    assert_eq!(
        table,
        [
            ("etcdcluster", 200, 5000),
            ("etcdmember", 5000, 5000),
            ("etcdsnapshot", 5000, 5000),
            ("etcdsnapshotschedule", 10000, 10000),
            ("etcddefrag", 5000, 5000),
            ("etcddefragpolicy", 10000, 10000),
            ("etcdrecovery", 5000, 5000),
        ]
    );
}

#[test]
fn controller_metric_names_are_the_kinds_in_lower_case() {
    // The undecodable-object report counts under the kind in lower case: the same label.
    for c in CONTROLLERS {
        assert_eq!(c.name, c.kind.to_lowercase());
    }
    let names: std::collections::BTreeSet<_> = CONTROLLERS.iter().map(|c| c.name).collect();
    assert_eq!(names.len(), CONTROLLERS.len());
}

#[test]
fn only_the_owners_of_named_children_announce_ownership_conflicts() {
    let announcing: Vec<&str> = CONTROLLERS
        .iter()
        .filter(|c| c.conflict_event)
        .map(|c| c.name)
        .collect();
    assert_eq!(announcing, ["etcdcluster", "etcdmember"]);
}

#[test]
fn status_patch_clears_fields_the_new_status_dropped() {
    let old = EtcdClusterStatus {
        progress_deadline: Some(Time(Timestamp::from_second(1_800_000_000).unwrap())),
        observed: Some(ObservedSpec {
            replicas: 3,
            ..Default::default()
        }),
        ..Default::default()
    };
    let new = EtcdClusterStatus {
        observed: old.observed.clone(),
        ..Default::default()
    };
    let patch = status_merge_patch(Some(&old), &new).unwrap();
    assert_eq!(patch["progressDeadline"], serde_json::Value::Null);
    assert!(patch.as_object().unwrap().contains_key("progressDeadline"));
    assert_eq!(patch["observed"]["replicas"], 3);
}

/// A field dropped inside a nested object (the latched target losing `resources` when the
/// spec no longer sets them) must be cleared too: applied to the old status, the patch gives
/// exactly the new one.
#[test]
fn status_patch_clears_nested_fields_the_new_status_dropped() {
    let old: EtcdClusterStatus = serde_json::from_value(serde_json::json!({
        "observed": {
            "replicas": 3,
            "version": "3.6.16",
            "resources": {"requests": {"cpu": "100m"}},
            "options": {"quota-backend-bytes": "1"}
        },
        "conditions": [{"type": "Available", "status": "True", "reason": "QuorumHealthy",
                        "message": "", "lastTransitionTime": "2026-11-23T00:00:00Z"}]
    }))
    .unwrap();
    let new: EtcdClusterStatus = serde_json::from_value(serde_json::json!({
        "observed": {"replicas": 5, "version": "3.6.16"},
    }))
    .unwrap();
    let patch = status_merge_patch(Some(&old), &new).unwrap();
    let mut applied = serde_json::to_value(&old).unwrap();
    json_patch::merge(&mut applied, &patch);
    assert_eq!(
        applied,
        serde_json::to_value(&new).unwrap(),
        "patch {patch}"
    );
}
