//! Conditions as both reconcilers write them. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Set a condition, keeping `lastTransitionTime` when the status is unchanged.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = if status { "True" } else { "False" };
    set_condition_status(conditions, type_, status, reason, message, generation, now);
}

/// [`set_condition`] with the status as written (`True`, `False` or `Unknown`).
pub fn set_condition_status(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = status.to_string();
    let existing = conditions.iter().position(|c| c.type_ == type_);
    let last_transition_time = match existing.map(|i| &conditions[i]) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now),
    };
    let condition = Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    };
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}
