//! How a change to what may not change is reported: at the first sub-field that differs, with
//! its old and new value as compact JSON. Decides nothing about which fields are immutable;
//! the rules of each kind do.

use serde::Serialize;

use super::Violation;

pub(super) fn immutable<T: PartialEq + Serialize>(
    out: &mut Vec<Violation>,
    field: &str,
    old: &Option<T>,
    new: &Option<T>,
    what: &str,
) {
    let change = match (old, new) {
        (None, Some(_)) => "cannot be added to an existing cluster",
        (Some(_), None) => "cannot be removed from an existing cluster",
        (Some(o), Some(n)) if o != n => "cannot be changed on an existing cluster",
        _ => return,
    };
    out.push(changed(
        field,
        old,
        new,
        change,
        format!("restore the previous value; to change {what}, delete and recreate the cluster"),
    ));
}

/// A change to the immutable `field`, reported at the first sub-field that differs, with its
/// old and new value, so the user sees what changed and not only where.
fn changed<T: Serialize>(field: &str, old: &T, new: &T, message: &str, hint: String) -> Violation {
    let as_json = |v: &T| serde_json::to_value(v).ok();
    let Some(diff) = first_difference(field, as_json(old).as_ref(), as_json(new).as_ref()) else {
        return Violation::new(field, message, hint);
    };
    let message = if diff.field == field {
        message.to_string()
    } else {
        format!("{message}: {field} is immutable")
    };
    Violation::new(diff.field, message, hint)
        .old_value(shown_json(diff.old.as_ref()))
        .value(shown_json(diff.new.as_ref()))
}

/// Where two JSON values first differ (object keys in sorted order); absent and `null` are both
/// unset.
struct Difference {
    field: String,
    old: Option<serde_json::Value>,
    new: Option<serde_json::Value>,
}

fn first_difference(
    path: &str,
    old: Option<&serde_json::Value>,
    new: Option<&serde_json::Value>,
) -> Option<Difference> {
    use serde_json::Value;
    let old = old.filter(|v| !v.is_null());
    let new = new.filter(|v| !v.is_null());
    match (old, new) {
        (Some(Value::Object(o)), Some(Value::Object(n))) => {
            let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
            keys.into_iter()
                .find_map(|k| first_difference(&format!("{path}.{k}"), o.get(k), n.get(k)))
        }
        (Some(Value::Array(o)), Some(Value::Array(n))) if o.len() == n.len() => o
            .iter()
            .zip(n)
            .enumerate()
            .find_map(|(i, (o, n))| first_difference(&format!("{path}[{i}]"), Some(o), Some(n))),
        (o, n) if o == n => None,
        (o, n) => Some(Difference {
            field: path.to_string(),
            old: o.cloned(),
            new: n.cloned(),
        }),
    }
}

/// Compact JSON for a message, `unset` for nothing, cut short past a couple of hundred bytes.
fn shown_json(value: Option<&serde_json::Value>) -> String {
    const MAX_CHARS: usize = 200;
    let Some(value) = value else {
        return "unset".to_string();
    };
    let text = value.to_string();
    if text.chars().count() <= MAX_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_CHARS).collect();
    cut.push('…');
    cut
}

/// The violation of a one-shot kind's update that changes its spec (which is immutable).
pub(super) fn spec_unchanged<T: PartialEq + Serialize>(
    old: &T,
    new: &T,
    message: &str,
    kind: &str,
) -> Option<Violation> {
    (old != new).then(|| {
        changed(
            "spec",
            old,
            new,
            message,
            format!("create a new {kind} with another name instead of editing this one"),
        )
    })
}
