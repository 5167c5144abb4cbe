use super::*;
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
