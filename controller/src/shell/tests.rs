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
