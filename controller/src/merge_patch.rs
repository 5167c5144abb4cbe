//! JSON merge patches (RFC 7386) that remove what they mean to remove. A merge patch merges
//! nested objects key by key, so a key the new value dropped inside an object (a label, a
//! resource limit) would stay unless the patch names it with `null`. Pure.

/// Add a `null` to `patch` for every key of `old` it lacks, at every depth where both are
/// objects: applied to `old`, the patch then gives exactly `patch`'s content.
pub fn clear_dropped(old: &serde_json::Value, patch: &mut serde_json::Value) {
    let (serde_json::Value::Object(old), serde_json::Value::Object(fields)) = (old, patch) else {
        return;
    };
    for (key, old_value) in old {
        match fields.get_mut(key) {
            Some(new_value) => clear_dropped(old_value, new_value),
            None => {
                fields.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_patch_with_the_dropped_keys_nulled_gives_the_new_value_at_every_depth() {
        let old = json!({"a": {"x": 1, "y": 2}, "b": 1, "c": [1, 2]});
        let new = json!({"a": {"x": 1}, "c": [1]});
        let mut patch = new.clone();
        clear_dropped(&old, &mut patch);
        assert_eq!(
            patch,
            json!({"a": {"x": 1, "y": null}, "b": null, "c": [1]})
        );
        let mut doc = old;
        json_patch::merge(&mut doc, &patch);
        assert_eq!(doc, new);
    }
}
