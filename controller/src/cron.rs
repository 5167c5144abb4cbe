//! Cron, shared by snapshot schedules and defrag policies: the parsed expression and time zone,
//! which run is due now (missed runs and the starting deadline), the name of the object a run
//! creates, and the conversions between the API's timestamps and chrono's.
//!
//! Pure: no I/O, no controller's types. What a run does is its controller's.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The cron expression and time zone, parsed as the webhook parses them at admission.
pub use api::cron::{Schedule, ScheduleError};

/// What to do now about creating a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// Take the run scheduled at this time.
    Run(DateTime<Utc>),
    /// The most recent run was missed by more than the starting deadline: skip it.
    Missed(DateTime<Utc>),
    /// Nothing is due.
    Nothing,
}

/// The run due at `now`: the most recent fire time after `since` (the last scheduled run, or
/// the schedule's creation), if it is not older than `starting_deadline_seconds`.
pub fn due(
    schedule: &Schedule,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
    starting_deadline_seconds: Option<i64>,
) -> Due {
    match schedule.latest_in(since, now) {
        None => Due::Nothing,
        Some(t) => match starting_deadline_seconds {
            Some(d) if (now - t).num_seconds() > d => Due::Missed(t),
            _ => Due::Run(t),
        },
    }
}

/// The object a run at `at` creates (a schedule's snapshot, a policy's defrag run):
/// `<owner>-<unix minutes>`.
pub fn run_name(schedule: &str, at: DateTime<Utc>) -> String {
    format!("{schedule}-{}", at.timestamp().div_euclid(60))
}

/// An API timestamp as chrono's, to the second.
pub fn to_chrono(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), 0).unwrap_or_default()
}

/// A chrono time as the API's timestamp, to the second.
pub fn to_time(t: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(t.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[cfg(test)]
mod tests;
