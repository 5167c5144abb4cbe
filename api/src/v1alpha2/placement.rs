//! Where an EtcdCluster's members run: `spec.tolerations`, `spec.nodeSelector` and
//! `spec.priorityClassName`, with the names and types of a PodSpec. This file holds their
//! schemas (k8s-openapi's types, bounded so the apiserver can afford the CEL rules) and the
//! rules' patterns and messages, which `api::validate` quotes.
//!
//! The rules are the ones the apiserver applies to a Pod's spec (a toleration's operator,
//! value, effect and `tolerationSeconds`; label syntax of the node selector; a DNS-1123
//! subdomain as the priority class name): a cluster that breaks them would be accepted and its
//! member Pods refused at every reconcile.

use kube::core::{validate, Rule};
use schemars::{JsonSchema, Schema, SchemaGenerator};

/// The most tolerations a cluster may carry. A bound the apiserver needs to estimate the cost
/// of the CEL rules over the list; a Pod needs a handful.
pub const MAX_TOLERATIONS: usize = 64;
/// The most node selector labels a cluster may carry (the same reason as [`MAX_TOLERATIONS`]).
pub const MAX_NODE_SELECTOR_LABELS: usize = 64;
/// A label key (a qualified name): an optional DNS-1123 subdomain prefix of at most
/// [`LABEL_PREFIX_MAX_LEN`] characters and `/`, then a name of at most 63 characters
/// (alphanumerics, `-`, `_`, `.`, alphanumeric at both ends).
pub const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// The longest prefix of a label key (a DNS-1123 subdomain).
pub const LABEL_PREFIX_MAX_LEN: usize = 253;
/// The longest label key: the longest prefix, `/` and the longest name.
pub const LABEL_KEY_MAX_LEN: usize = LABEL_PREFIX_MAX_LEN + 1 + 63;
/// A label value: empty, or at most 63 characters (alphanumerics, `-`, `_`, `.`, alphanumeric
/// at both ends).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";
pub const LABEL_VALUE_MAX_LEN: usize = 63;
/// A DNS-1123 subdomain (a PriorityClass's name): lowercase alphanumerics, `-` and `.`,
/// alphanumeric at both ends of every dot-separated part.
pub const DNS1123_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;
/// The longest toleration operator or effect the schema admits (`PreferNoSchedule` is 16).
pub const TOLERATION_WORD_MAX_LEN: usize = 16;

/// The effects a toleration may name (empty: every effect).
pub const TOLERATION_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// The CEL rule's message: a toleration's operator.
pub const CEL_TOLERATION_OPERATOR: &str = "a toleration's operator must be Equal (the default: the taint's value must equal value) or Exists (any value of the key; no value)";
/// The CEL rule's message: `operator: Exists` with a value.
pub const CEL_TOLERATION_EXISTS_VALUE: &str = "a toleration with operator Exists matches every value of its key and must not set value; remove value, or use operator Equal";
/// The CEL rule's message: a toleration without a key.
pub const CEL_TOLERATION_EMPTY_KEY: &str = "a toleration without a key tolerates every taint and needs operator Exists; set key (e.g. dedicated) or operator: Exists";
/// The CEL rule's message: a toleration's key.
pub const CEL_TOLERATION_KEY: &str = "a toleration's key must be a label key: an optional DNS subdomain prefix of at most 253 characters and '/', then a name of at most 63 characters (letters, digits, '-', '_', '.', starting and ending with a letter or digit), e.g. dedicated or example.com/etcd";
/// The CEL rule's message: a toleration's value.
pub const CEL_TOLERATION_VALUE: &str = "a toleration's value must be a label value: at most 63 characters (letters, digits, '-', '_', '.', starting and ending with a letter or digit), e.g. etcd";
/// The CEL rule's message: a toleration's effect.
pub const CEL_TOLERATION_EFFECT: &str = "a toleration's effect must be NoSchedule, PreferNoSchedule or NoExecute (or empty for every effect)";
/// The CEL rule's message: `tolerationSeconds` without `NoExecute`.
pub const CEL_TOLERATION_SECONDS: &str = "a toleration's tolerationSeconds applies only to effect NoExecute (how long a running Pod stays on a node after such a taint appears); set effect: NoExecute or remove tolerationSeconds";
/// The CEL rule's message: a node selector's key.
pub const CEL_NODE_SELECTOR_KEY: &str = "spec.nodeSelector keys must be label keys: an optional DNS subdomain prefix of at most 253 characters and '/', then a name of at most 63 characters (letters, digits, '-', '_', '.', starting and ending with a letter or digit), e.g. node-role.kubernetes.io/etcd";
/// The CEL rule's message: a node selector's value.
pub const CEL_NODE_SELECTOR_VALUE: &str = "spec.nodeSelector values must be label values: at most 63 characters (letters, digits, '-', '_', '.', starting and ending with a letter or digit), or empty";
/// The CEL rule's message: the priority class name.
pub const CEL_PRIORITY_CLASS_NAME: &str = "spec.priorityClassName must name a PriorityClass: a DNS-1123 subdomain of at most 253 characters (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit), e.g. etcd-critical";

/// A label key as a CEL condition on `s`: the pattern, and a prefix (what precedes `/`, which
/// the pattern admits once at most) of at most [`LABEL_PREFIX_MAX_LEN`] characters.
fn label_key_rule(s: &str) -> String {
    format!(
        "{s}.matches('{}') && {s}.indexOf('/') <= {LABEL_PREFIX_MAX_LEN}",
        cel_quoted(LABEL_KEY_PATTERN)
    )
}

/// A pattern inside a single-quoted CEL string: a backslash is written twice.
fn cel_quoted(pattern: &str) -> String {
    pattern.replace('\\', "\\\\")
}

fn rule(expression: String, message: &'static str, field: &str) -> Rule {
    Rule::new(expression).message(message).field_path(field)
}

fn set(schema: &mut Schema, pointer: &str, key: &str, value: serde_json::Value) {
    if let Some(object) = schema
        .pointer_mut(pointer)
        .and_then(serde_json::Value::as_object_mut)
    {
        object.insert(key.to_string(), value);
    }
}

/// `spec.tolerations`: k8s-openapi's `Toleration` list, bounded, each item carrying the
/// rules the apiserver applies to a Pod's tolerations.
pub fn tolerations_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Vec<k8s_openapi::api::core::v1::Toleration>>::json_schema(generator);
    schema.insert("maxItems".into(), MAX_TOLERATIONS.into());
    let props = "/items/properties";
    set(
        &mut schema,
        &format!("{props}/key"),
        "maxLength",
        LABEL_KEY_MAX_LEN.into(),
    );
    set(
        &mut schema,
        &format!("{props}/value"),
        "maxLength",
        LABEL_VALUE_MAX_LEN.into(),
    );
    for word in ["operator", "effect"] {
        set(
            &mut schema,
            &format!("{props}/{word}"),
            "maxLength",
            TOLERATION_WORD_MAX_LEN.into(),
        );
    }
    let rules = [
        rule(
            "!has(self.operator) || self.operator in ['', 'Equal', 'Exists']".into(),
            CEL_TOLERATION_OPERATOR,
            ".operator",
        ),
        rule(
            "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''".into(),
            CEL_TOLERATION_EXISTS_VALUE,
            ".value",
        ),
        rule(
            "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')".into(),
            CEL_TOLERATION_EMPTY_KEY,
            ".operator",
        ),
        rule(
            format!("!has(self.key) || self.key == '' || ({})", label_key_rule("self.key")),
            CEL_TOLERATION_KEY,
            ".key",
        ),
        rule(
            format!("!has(self.value) || self.value.matches('{}')", cel_quoted(LABEL_VALUE_PATTERN)),
            CEL_TOLERATION_VALUE,
            ".value",
        ),
        rule(
            "!has(self.effect) || self.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute']".into(),
            CEL_TOLERATION_EFFECT,
            ".effect",
        ),
        rule(
            "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')".into(),
            CEL_TOLERATION_SECONDS,
            ".tolerationSeconds",
        ),
    ];
    if let Some(item) = schema.get_mut("items") {
        if let Ok(mut item_schema) = Schema::try_from(item.clone()) {
            for r in rules {
                // Serializing a Rule of plain strings cannot fail.
                let _ = validate(&mut item_schema, r);
            }
            *item = item_schema.to_value();
        }
    }
    schema
}

/// `spec.nodeSelector`: a map of label keys to label values, bounded.
pub fn node_selector_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <std::collections::BTreeMap<String, String>>::json_schema(generator);
    schema.insert("maxProperties".into(), MAX_NODE_SELECTOR_LABELS.into());
    set(
        &mut schema,
        "/additionalProperties",
        "maxLength",
        LABEL_VALUE_MAX_LEN.into(),
    );
    for r in [
        Rule::new(format!("self.all(k, {})", label_key_rule("k"))).message(CEL_NODE_SELECTOR_KEY),
        Rule::new(format!(
            "self.all(k, self[k].matches('{}'))",
            cel_quoted(LABEL_VALUE_PATTERN)
        ))
        .message(CEL_NODE_SELECTOR_VALUE),
    ] {
        let _ = validate(&mut schema, r);
    }
    schema
}

/// `spec.priorityClassName`: empty (the default priority) or a DNS-1123 subdomain.
pub fn priority_class_name_schema(generator: &mut SchemaGenerator) -> Schema {
    optional_dns1123_subdomain_schema(generator, CEL_PRIORITY_CLASS_NAME)
}

/// An optional name of an object whose names are DNS-1123 subdomains: empty, or one of at most
/// [`DNS1123_SUBDOMAIN_MAX_LEN`] characters; `message` names the field and says what fits.
pub(super) fn optional_dns1123_subdomain_schema(
    generator: &mut SchemaGenerator,
    message: &'static str,
) -> Schema {
    let mut schema = <Option<String>>::json_schema(generator);
    schema.insert("maxLength".into(), DNS1123_SUBDOMAIN_MAX_LEN.into());
    let _ = validate(
        &mut schema,
        Rule::new(format!(
            "self == '' || self.matches('{}')",
            cel_quoted(DNS1123_SUBDOMAIN_PATTERN)
        ))
        .message(message),
    );
    schema
}
