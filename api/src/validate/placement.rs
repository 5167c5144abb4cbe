//! The placement rules of an EtcdCluster (`spec.tolerations`, `spec.nodeSelector`,
//! `spec.priorityClassName`), judged as the CRD's rules judge them (see
//! `crate::v1alpha2::placement`): the rules the apiserver applies to a Pod's spec, and the
//! schema's bounds. A string longer than the schema admits (an operator or effect over 16
//! characters, a value over 63, a key over 317) also breaks the rule of its field, which is what
//! is reported.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::api::core::v1::Toleration;

use super::Violation;
use crate::v1alpha2::{
    EtcdClusterSpec, CEL_NODE_SELECTOR_KEY, CEL_NODE_SELECTOR_VALUE, CEL_PRIORITY_CLASS_NAME,
    CEL_TOLERATION_EFFECT, CEL_TOLERATION_EMPTY_KEY, CEL_TOLERATION_EXISTS_VALUE,
    CEL_TOLERATION_KEY, CEL_TOLERATION_OPERATOR, CEL_TOLERATION_SECONDS, CEL_TOLERATION_VALUE,
    DNS1123_SUBDOMAIN_MAX_LEN, DNS1123_SUBDOMAIN_PATTERN, LABEL_KEY_MAX_LEN, LABEL_KEY_PATTERN,
    LABEL_PREFIX_MAX_LEN, LABEL_VALUE_MAX_LEN, LABEL_VALUE_PATTERN, MAX_NODE_SELECTOR_LABELS,
    MAX_TOLERATIONS, TOLERATION_EFFECTS,
};

static LABEL_KEY_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(LABEL_KEY_PATTERN).expect("LABEL_KEY_PATTERN is a valid regex")
});
static LABEL_VALUE_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(LABEL_VALUE_PATTERN).expect("LABEL_VALUE_PATTERN is a valid regex")
});
pub(super) static DNS1123_SUBDOMAIN_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(DNS1123_SUBDOMAIN_PATTERN)
        .expect("DNS1123_SUBDOMAIN_PATTERN is a valid regex")
});

/// Every violation of the placement fields of `spec`.
pub(super) fn placement(spec: &EtcdClusterSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    if spec.tolerations.len() > MAX_TOLERATIONS {
        out.push(
            Violation::new(
                "spec.tolerations",
                format!("must have at most {MAX_TOLERATIONS} items"),
                "tolerate the taints of the nodes meant for etcd only; an empty key with operator Exists tolerates every taint",
            )
            .value(spec.tolerations.len()),
        );
    }
    for (i, t) in spec.tolerations.iter().enumerate() {
        out.extend(toleration(&format!("spec.tolerations[{i}]"), t));
    }
    out.extend(node_selector(&spec.node_selector));
    if let Some(name) = spec
        .priority_class_name
        .as_deref()
        .filter(|n| !n.is_empty())
    {
        if name.chars().count() > DNS1123_SUBDOMAIN_MAX_LEN || !DNS1123_SUBDOMAIN_RE.is_match(name)
        {
            out.push(
                Violation::of_rule(
                    "spec.priorityClassName",
                    CEL_PRIORITY_CLASS_NAME,
                    "",
                    "`kubectl get priorityclasses` lists the names; remove the field for the default priority",
                )
                .value(format!("{name:?}")),
            );
        }
    }
    out
}

/// A label key's problem, if any: the pattern, a prefix of at most [`LABEL_PREFIX_MAX_LEN`]
/// characters, and the schema's length bound.
fn label_key_problem(key: &str) -> Option<String> {
    let length = key.chars().count();
    if length > LABEL_KEY_MAX_LEN {
        return Some(format!("it is {length} characters long"));
    }
    if !LABEL_KEY_RE.is_match(key) {
        return Some(match key.split_once('/') {
            Some((_, name)) if name.chars().count() > 63 => {
                format!(
                    "its name after '/' is {} characters long",
                    name.chars().count()
                )
            }
            None if length > 63 => format!("it is {length} characters long"),
            _ => "it is not label key syntax".to_string(),
        });
    }
    match key.split_once('/') {
        Some((prefix, _)) if prefix.len() > LABEL_PREFIX_MAX_LEN => Some(format!(
            "its prefix before '/' is {} characters long",
            prefix.len()
        )),
        _ => None,
    }
}

fn label_value_ok(value: &str) -> bool {
    value.chars().count() <= LABEL_VALUE_MAX_LEN && LABEL_VALUE_RE.is_match(value)
}

/// One toleration, as the apiserver judges a Pod's (and the schema bounds it).
fn toleration(at: &str, t: &Toleration) -> Vec<Violation> {
    let mut out = Vec::new();
    let key = t.key.as_deref().unwrap_or("");
    let operator = t.operator.as_deref();
    let value = t.value.as_deref();
    let effect = t.effect.as_deref();

    if let Some(op) = operator.filter(|op| !["", "Equal", "Exists"].contains(op)) {
        let hint = if op.eq_ignore_ascii_case("equal") || op.eq_ignore_ascii_case("exists") {
            "the operator is case-sensitive: write Equal or Exists"
        } else {
            ""
        };
        out.push(
            Violation::of_rule(format!("{at}.operator"), CEL_TOLERATION_OPERATOR, "", hint)
                .value(format!("{op:?}")),
        );
    }
    let exists = operator == Some("Exists");
    if exists {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.push(
                Violation::of_rule(format!("{at}.value"), CEL_TOLERATION_EXISTS_VALUE, "", "")
                    .value(format!("{v:?}")),
            );
        }
    }
    if key.is_empty() && !exists {
        out.push(
            Violation::of_rule(
                format!("{at}.operator"),
                CEL_TOLERATION_EMPTY_KEY,
                "this toleration has no key",
                "",
            )
            .value(format!("{:?}", operator.unwrap_or(""))),
        );
    }
    if !key.is_empty() {
        if let Some(problem) = label_key_problem(key) {
            out.push(
                Violation::of_rule(format!("{at}.key"), CEL_TOLERATION_KEY, problem, "")
                    .value(format!("{key:?}")),
            );
        }
    }
    if let Some(v) = value.filter(|v| !label_value_ok(v)) {
        out.push(
            Violation::of_rule(format!("{at}.value"), CEL_TOLERATION_VALUE, "", "")
                .value(format!("{v:?}")),
        );
    }
    if let Some(e) = effect.filter(|e| !e.is_empty() && !TOLERATION_EFFECTS.contains(e)) {
        out.push(
            Violation::of_rule(format!("{at}.effect"), CEL_TOLERATION_EFFECT, "", "")
                .value(format!("{e:?}")),
        );
    }
    if let Some(seconds) = t.toleration_seconds {
        if effect != Some("NoExecute") {
            out.push(
                Violation::of_rule(
                    format!("{at}.tolerationSeconds"),
                    CEL_TOLERATION_SECONDS,
                    format!("the effect is {:?}", effect.unwrap_or("")),
                    "",
                )
                .value(seconds),
            );
        }
    }
    out
}

fn node_selector(selector: &BTreeMap<String, String>) -> Vec<Violation> {
    let mut out = Vec::new();
    if selector.len() > MAX_NODE_SELECTOR_LABELS {
        out.push(
            Violation::new(
                "spec.nodeSelector",
                format!("must have at most {MAX_NODE_SELECTOR_LABELS} labels"),
                "select the nodes meant for etcd by one or two labels (e.g. node-role.kubernetes.io/etcd)",
            )
            .value(selector.len()),
        );
    }
    for (key, value) in selector {
        if let Some(problem) = label_key_problem(key) {
            out.push(
                Violation::of_rule(
                    "spec.nodeSelector",
                    CEL_NODE_SELECTOR_KEY,
                    format!("the key {key:?}: {problem}"),
                    "",
                )
                .value(format!("{key:?}")),
            );
        }
        if !label_value_ok(value) {
            out.push(
                Violation::of_rule(
                    format!("spec.nodeSelector[{key:?}]"),
                    CEL_NODE_SELECTOR_VALUE,
                    "",
                    "",
                )
                .value(format!("{value:?}")),
            );
        }
    }
    out
}
