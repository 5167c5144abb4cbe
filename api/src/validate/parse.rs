//! Reading a spec (or any typed part of an object) from JSON into the `v1alpha2` types, with a
//! type error turned into a [`Violation`] that names the field, as the apiserver would. Judges
//! no rule beyond the types and the integer bounds the schema carries.

use serde::de::DeserializeOwned;

use super::Violation;
use crate::v1alpha2::{
    MAX_PROGRESS_DEADLINE_SECONDS, MAX_QUOTA_BACKEND_BYTES, MAX_REPLICAS, MAX_SNAPSHOT_COUNT,
};

/// Deserialize a `spec` (or any typed part of an object; `prefix` is its path, empty for a whole
/// object) from JSON, turning a type error into a violation that names the field where it
/// happened (`spec.tls.client.certManager.serverIssuerRef.kind`). Boxed: a violation is larger
/// than a `Result` should carry on its success path.
pub fn parse<T: DeserializeOwned>(
    prefix: &str,
    value: &serde_json::Value,
) -> Result<T, Box<Violation>> {
    serde_path_to_error::deserialize(value)
        .map_err(|err| {
            let inner = err.path().to_string();
            let mut field = if inner == "." || inner.is_empty() {
                prefix.to_string()
            } else if prefix.is_empty() {
                inner
            } else {
                format!("{prefix}.{inner}")
            };
            let detail = err.inner().to_string();
            // serde reports a missing field at its parent; name the field itself, as the apiserver does.
            if let Some(missing) = detail
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split('`').next())
            {
                field = format!("{field}.{missing}");
                return Violation::new(
                    field,
                    "is required",
                    "set it (see `kubectl explain` for the field)",
                );
            }
            if let Some(out_of_range) = integer_out_of_range(&field, &detail) {
                return out_of_range;
            }
            Violation::new(
                field,
                format!("cannot be read: {detail}"),
                "fix the value's type or spelling (see `kubectl explain` for the field)",
            )
        })
        .map_err(Box::new)
}

/// The bounds and the fix of the integer fields with bounds of their own (the CRD schema carries
/// the same as `minimum`/`maximum`).
fn integer_bounds(field: &str) -> Option<(i64, i64, &'static str)> {
    Some(match field {
        "spec.replicas" => (
            0,
            MAX_REPLICAS.into(),
            "set the number of members (3 or 5 for production, 0 to pause)",
        ),
        "spec.progressDeadlineSeconds" => (
            1,
            MAX_PROGRESS_DEADLINE_SECONDS.into(),
            "leave it unset for the default of 600 seconds",
        ),
        "spec.options.quotaBackendBytes" => (
            0,
            MAX_QUOTA_BACKEND_BYTES,
            "etcd suggests at most 8589934592 (8Gi); leave it unset (or 0) for etcd's default of 2GiB",
        ),
        "spec.options.snapshotCount" => (
            1,
            MAX_SNAPSHOT_COUNT,
            "leave it unset for etcd's default of 10000",
        ),
        _ => return None,
    })
}

/// A number that does not fit the field's integer type (serde's ``invalid value: integer `N`,
/// expected i32``), said as the schema's bound says it.
fn integer_out_of_range(field: &str, detail: &str) -> Option<Violation> {
    let rest = detail.strip_prefix("invalid value: integer `")?;
    let (number, expected) = rest.split_once("`, expected ")?;
    let (min, max, hint) = match (integer_bounds(field), expected) {
        (Some(bounds), _) => bounds,
        (None, "i32" | "a 32-bit integer") => (
            i32::MIN.into(),
            i32::MAX.into(),
            "use a value that fits a 32-bit integer (see `kubectl explain` for the field)",
        ),
        (None, _) => return None,
    };
    Some(Violation::new(field, format!("must be between {min} and {max}"), hint).value(number))
}
