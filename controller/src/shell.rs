//! The shell every controller shares around its own I/O: the one status writer.
//!
//! A status write is a JSON merge patch guarded by the `resourceVersion` the reconcile read: a
//! concurrent writer turns it into a conflict that the next reconcile retries on fresh data,
//! never a decision made twice on stale status. Keys the new status drops are cleared with
//! `null` at every depth (RFC 7386 would otherwise keep them).
//!
//! This module holds no controller's decisions: it must not name a controller's module, read an
//! object other than the one it writes, or decide what the status says.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};

use crate::Error;

/// A merge patch that turns status `old` into `new`: `new` itself, plus a `null` for every key of
/// `old` that `new` lacks, at every depth where both are objects.
pub fn status_merge_patch<T: serde::Serialize>(
    old: Option<&T>,
    new: &T,
) -> Result<serde_json::Value, Error> {
    let mut patch = serde_json::to_value(new)?;
    if let Some(old) = old {
        clear_dropped(&serde_json::to_value(old)?, &mut patch);
    }
    Ok(patch)
}

/// Add a `null` to `patch` for every key of `old` it lacks, at every depth where both are
/// objects (RFC 7386 merges nested objects key by key, so a key dropped inside one would stay).
fn clear_dropped(old: &serde_json::Value, patch: &mut serde_json::Value) {
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

/// Merge-patch `obj`'s status from `old` to `new`, guarded by its resourceVersion (a conflict
/// is retried by the next reconcile on fresh data).
pub async fn write_status<K, S>(
    api: &Api<K>,
    obj: &K,
    old: Option<&S>,
    new: &S,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize,
{
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": obj.resource_version()},
        "status": status_merge_patch(old, new)?,
    });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// [`write_status`], only when `new` differs from `old` (an unchanged status is not written).
pub async fn write_status_if_changed<K, S>(
    api: &Api<K>,
    obj: &K,
    old: Option<&S>,
    new: &S,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if old == Some(new) {
        return Ok(());
    }
    write_status(api, obj, old, new).await
}

#[cfg(test)]
mod tests;
