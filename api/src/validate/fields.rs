//! The shape rules the schema states for single fields (`minLength`, `maxLength`, `minimum`,
//! `maximum`), shared by the kinds. No rule of a kind lives here.

use super::Violation;

/// A name the object refers to (a cluster, Secret, claim, issuer or bucket): never empty.
pub(super) fn non_empty(field: &str, value: &str) -> Option<Violation> {
    value
        .is_empty()
        .then(|| Violation::new(field, "must not be empty", "name an existing object"))
}

/// A string with the schema's `minLength: 1` and `maxLength`.
pub(super) fn bounded_length(field: &str, value: &str, max: usize) -> Option<Violation> {
    let length = value.chars().count();
    (length == 0 || length > max).then(|| {
        Violation::new(
            field,
            format!("must be 1 to {max} characters long, not {length}"),
            "shorten it, or remove the field to use the default",
        )
        .value(format!("{value:?}"))
    })
}

/// An integer field with the schema's `minimum`/`maximum`.
pub(super) fn in_range(
    field: &str,
    value: Option<i64>,
    min: i64,
    max: i64,
    hint: &str,
) -> Option<Violation> {
    let v = value?;
    (v < min || v > max)
        .then(|| Violation::new(field, format!("must be between {min} and {max}"), hint).value(v))
}
