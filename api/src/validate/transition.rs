//! How a change to what may not change is reported: at the first sub-field that differs, with
//! its old and new value as compact JSON. Decides nothing about which fields are immutable;
//! the rules of each kind do.

use serde::Serialize;

use super::{cel, Violation};
use crate::v1alpha2::{CEL_RECOVERY_IMMUTABLE, CEL_SNAPSHOT_IMMUTABLE};

/// A subtree of an EtcdCluster spec that may not be added, removed or changed after create;
/// `rule` is the message of its CEL transition rule.
pub(super) fn immutable<T: PartialEq + Serialize>(
    out: &mut Vec<Violation>,
    field: &str,
    old: &Option<T>,
    new: &Option<T>,
    rule: &'static str,
) {
    let change = match (old, new) {
        (None, Some(_)) => format!("this update adds {field}"),
        (Some(_), None) => format!("this update removes {field}"),
        (Some(o), Some(n)) if o != n => format!("this update changes {field}"),
        _ => return,
    };
    out.push(changed(
        field,
        old,
        new,
        Some(rule),
        &change,
        "restore the previous value".to_string(),
    ));
}

/// A change to the immutable `field`, reported at the first sub-field that differs, with its
/// old and new value, so the user sees what changed and not only where.
fn changed<T: Serialize>(
    field: &str,
    old: &T,
    new: &T,
    rule: Option<&'static str>,
    detail: &str,
    hint: String,
) -> Violation {
    let as_json = |v: &T| serde_json::to_value(v).ok();
    let diff = first_difference(field, as_json(old).as_ref(), as_json(new).as_ref());
    let at = diff.as_ref().map_or(field, |d| d.field.as_str());
    let mut violation = Violation::new(at, detail, hint);
    violation.rule = rule;
    let Some(diff) = diff else {
        return violation;
    };
    violation
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

/// The violation of a one-shot kind's update that changes its spec (which is immutable),
/// reported with the message of the kind's `self == oldSelf` CEL rule, which says to create a
/// new object instead. `message` is said when the kind has no such rule.
pub(super) fn spec_unchanged<T: PartialEq + Serialize>(
    old: &T,
    new: &T,
    message: &str,
    kind: &str,
) -> Option<Violation> {
    let rule = match kind {
        "EtcdSnapshot" => Some(CEL_SNAPSHOT_IMMUTABLE),
        "EtcdDefrag" => Some(cel::DEFRAG_IMMUTABLE),
        "EtcdRecovery" => Some(CEL_RECOVERY_IMMUTABLE),
        _ => None,
    };
    (old != new).then(|| match rule {
        Some(_) => changed("spec", old, new, rule, "", String::new()),
        None => changed(
            "spec",
            old,
            new,
            None,
            message,
            format!("create a new {kind} with another name instead of editing this one"),
        ),
    })
}
