//! The Rust mirror of every validation rule the CRDs carry (OpenAPI bounds, patterns and enums,
//! and the CEL rules), returning *all* violations of an object or transition at once, each with
//! its field path, offending value, previous value and how to fix it.
//!
//! The CRD's CEL rules are the source of truth for accept/reject; the tests in this crate and the
//! API-layer suite run one shared corpus through both and require the same verdict. Messages here
//! are richer than CEL can produce, but must never accept what CEL rejects or reject what it accepts,
//! with one deliberate exception: a cron expression or time zone (EtcdSnapshotSchedule,
//! EtcdDefragPolicy) is parsed here as the controller parses it, where CEL can check only its
//! shape; a CEL-only install accepts `61 * * * *` and reports it in the object's status instead.
//!
//! This file holds the [`Violation`], its rendering and [`object`], which judges a whole object
//! by kind; the rules of each kind are in `cluster.rs`, `snapshot.rs`, `defrag.rs`, `recovery.rs` and
//! `schedule.rs` (schedules and defrag policies), with what they share beside them (`parse.rs`,
//! `fields.rs`, `location.rs`, `transition.rs`). No I/O and no clock anywhere in here.

mod cel;
mod cluster;
mod defrag;
mod fields;
mod location;
mod parse;
mod placement;
mod policy;
mod recovery;
mod schedule;
mod snapshot;
mod transition;

use std::fmt;

use serde::de::DeserializeOwned;

use crate::v1alpha2::{
    EtcdClusterSpec, EtcdDefragPolicySpec, EtcdDefragSpec, EtcdRecoverySpec,
    EtcdSnapshotScheduleSpec, EtcdSnapshotSpec, MAX_SCHEDULE_NAME,
};

pub use cluster::{cluster_create, cluster_name, cluster_update, version_upgrade};
pub use defrag::{defrag_create, defrag_update};
pub use parse::parse;
pub use recovery::{recovery_create, recovery_update};
pub use schedule::{policy_spec, schedule_spec};
pub use snapshot::{snapshot_create, snapshot_update};

use schedule::runs_owner_name;

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// JSON path of the offending field, e.g. `spec.storage.size`.
    pub field: String,
    /// The offending value, rendered for a human.
    pub value: Option<String>,
    /// The previous value, for update rules.
    pub old_value: Option<String>,
    /// The message of the CRD's CEL rule this violation mirrors, verbatim, when it mirrors one:
    /// it leads the rendering, so the text a user sees without the webhook (and the runbook
    /// quotes) is in the webhook's answer too.
    pub rule: Option<&'static str>,
    /// What is wrong; with a `rule`, the detail the rule's message cannot give (may be empty).
    pub message: String,
    /// How to fix it (may be empty when the rule's message says it).
    pub hint: String,
}

impl Violation {
    fn new(field: impl Into<String>, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: None,
            old_value: None,
            rule: None,
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// A violation of the CEL rule whose message is `rule`, with `detail` saying what exactly
    /// is wrong here (empty when the rule's message says it all) and `hint` the fix.
    fn of_rule(
        field: impl Into<String>,
        rule: &'static str,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self::new(field, detail, hint).rule(rule)
    }

    /// Mark this violation as the CEL rule's whose message is `rule`.
    fn rule(mut self, rule: &'static str) -> Self {
        self.rule = Some(rule);
        self
    }

    fn value(mut self, value: impl fmt::Display) -> Self {
        self.value = Some(value.to_string());
        self
    }

    fn old_value(mut self, value: impl fmt::Display) -> Self {
        self.old_value = Some(value.to_string());
        self
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rule, self.message.is_empty()) {
            (Some(rule), true) => write!(f, "{}: {rule}", self.field)?,
            (Some(rule), false) => write!(f, "{}: {rule} — {}", self.field, self.message)?,
            (None, _) => write!(f, "{}: {}", self.field, self.message)?,
        }
        match (&self.old_value, &self.value) {
            (Some(old), Some(new)) => write!(f, " (was {old}, now {new})")?,
            (None, Some(new)) => write!(f, " (got {new})")?,
            _ => {}
        }
        if !self.hint.is_empty() {
            write!(f, "; {}", self.hint)?;
        }
        Ok(())
    }
}

/// Render a list of violations the way the webhook reports them: a count, then one per line.
pub fn render(kind: &str, name: &str, violations: &[Violation]) -> String {
    let mut out = format!(
        "{kind} {name:?} is invalid ({} problem{}):",
        violations.len(),
        if violations.len() == 1 { "" } else { "s" }
    );
    for v in violations {
        out.push_str("\n- ");
        out.push_str(&v.to_string());
    }
    out
}

/// Validate a whole object as it arrives from the API (create when `old` is `None`, else update),
/// by kind. Unreadable specs are reported as violations naming the field that failed to parse.
pub fn object(
    kind: &str,
    new: &serde_json::Value,
    old: Option<&serde_json::Value>,
) -> Vec<Violation> {
    fn spec_of<T: DeserializeOwned>(obj: &serde_json::Value) -> Result<T, Box<Violation>> {
        match obj.get("spec") {
            Some(spec) => parse("spec", spec),
            None => Err(Box::new(Violation::new(
                "spec",
                "is required",
                "add a spec to the object",
            ))),
        }
    }
    fn judge<T: DeserializeOwned>(
        new: &serde_json::Value,
        old: Option<&serde_json::Value>,
        create: fn(&T) -> Vec<Violation>,
        update: fn(&T, &T) -> Vec<Violation>,
    ) -> Vec<Violation> {
        let new = match spec_of::<T>(new) {
            Ok(spec) => spec,
            Err(v) => return vec![*v],
        };
        match old.map(spec_of::<T>) {
            None => create(&new),
            Some(Ok(old)) => update(&old, &new),
            // Judging the new spec alone would skip every transition rule (shrink, immutable
            // subtrees), so an update whose stored object cannot be read is denied.
            Some(Err(unreadable)) => vec![stored_spec_unreadable(&unreadable)],
        }
    }
    match kind {
        // The name rule is a plain (non-transition) CEL rule on the CRD root, so the apiserver
        // evaluates it on update too; so does this mirror.
        "EtcdCluster" => {
            let mut out: Vec<Violation> = named(new).and_then(cluster_name).into_iter().collect();
            out.extend(judge::<EtcdClusterSpec>(
                new,
                old,
                cluster_create,
                cluster_update,
            ));
            out
        }
        "EtcdSnapshot" => judge::<EtcdSnapshotSpec>(new, old, snapshot_create, snapshot_update),
        "EtcdRecovery" => judge::<EtcdRecoverySpec>(new, old, recovery_create, recovery_update),
        "EtcdDefrag" => {
            let mut out = judge::<EtcdDefragSpec>(new, old, defrag_create, defrag_update);
            cel::attach_defrag_rule_messages(&mut out);
            out
        }
        // Plain rules, judged on create and update alike (the specs are mutable).
        "EtcdSnapshotSchedule" => {
            let mut out: Vec<Violation> = named(new)
                .and_then(|n| runs_owner_name(n, MAX_SCHEDULE_NAME, cel::SCHEDULE_NAME))
                .into_iter()
                .collect();
            out.extend(judge::<EtcdSnapshotScheduleSpec>(
                new,
                old,
                schedule_spec,
                |_, new| schedule_spec(new),
            ));
            out
        }
        "EtcdDefragPolicy" => {
            let mut out: Vec<Violation> = named(new)
                .and_then(policy::policy_name)
                .into_iter()
                .collect();
            out.extend(judge::<EtcdDefragPolicySpec>(
                new,
                old,
                policy_spec,
                |_, new| policy_spec(new),
            ));
            cel::attach_defrag_rule_messages(&mut out);
            out
        }
        other => vec![Violation::new(
            "kind",
            format!("{other:?} is not validated here"),
            "send only EtcdCluster, EtcdSnapshot, EtcdDefrag, EtcdRecovery, EtcdSnapshotSchedule and EtcdDefragPolicy objects to this validator",
        )],
    }
}

/// The object's `metadata.name`, when it has one (`generateName` is resolved before admission).
fn named(object: &serde_json::Value) -> Option<&str> {
    object.pointer("/metadata/name").and_then(|n| n.as_str())
}

/// The violation for an update whose stored (old) object does not parse.
fn stored_spec_unreadable(why: &Violation) -> Violation {
    Violation::new(
        "spec",
        format!(
            "cannot be checked: the stored object could not be read ({}: {}), so this update cannot be compared with it",
            why.field, why.message
        ),
        "the stored object was written under other rules (an older operator, or while this webhook was not called); \
         labels, annotations and finalizers can still be changed, but to change the spec delete and recreate the object",
    )
}

#[cfg(test)]
mod tests;
