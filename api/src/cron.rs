//! Cron schedules with a time zone (`EtcdSnapshotSchedule`, `EtcdDefragPolicy`), parsed the same
//! way by the controller, which runs them, and by the webhook, which refuses at admission what
//! the controller could not run (CEL checks only the expression's shape).

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// The most runs looked back over when the schedule was missed for a long time; older missed
/// runs are not counted, only the most recent is taken.
const MAX_LOOKBACK: usize = 1000;

/// A parsed schedule: cron expression and time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    tz: Tz,
}

/// Why a schedule cannot be used, naming the field, the value and the fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("spec.schedule {value:?} is not a valid cron expression ({reason}); use 5 fields, minute hour day-of-month month day-of-week, e.g. '0 */6 * * *', or @hourly/@daily/@weekly/@monthly/@yearly")]
    Cron { value: String, reason: String },
    #[error("spec.timeZone {value:?} is not a known IANA time zone; use a name such as UTC, Europe/Berlin or America/New_York")]
    TimeZone { value: String },
}

impl Schedule {
    pub fn parse(expression: &str, time_zone: &str) -> Result<Self, ScheduleError> {
        let tz: Tz = time_zone.parse().map_err(|_| ScheduleError::TimeZone {
            value: time_zone.to_string(),
        })?;
        let trimmed = expression.trim();
        let cron_err = |reason: String| ScheduleError::Cron {
            value: expression.to_string(),
            reason,
        };
        if !trimmed.starts_with('@') && trimmed.split_whitespace().count() != 5 {
            return Err(cron_err(format!(
                "{} fields instead of 5",
                trimmed.split_whitespace().count()
            )));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(trimmed)
            .map_err(|e| cron_err(e.to_string()))?;
        Ok(Self { cron, tz })
    }

    /// The first fire time strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&t.with_timezone(&self.tz), false)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The most recent fire time in `(after, now]`, if any.
    pub fn latest_in(&self, after: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut latest = None;
        let mut t = after;
        for _ in 0..MAX_LOOKBACK {
            match self.next_after(t) {
                Some(next) if next <= now => {
                    latest = Some(next);
                    t = next;
                }
                _ => return latest,
            }
        }
        // Missed for longer than the lookback: jump to the newest run before now directly.
        self.cron
            .find_previous_occurrence(&now.with_timezone(&self.tz), true)
            .ok()
            .map(|d| d.with_timezone(&Utc))
            .filter(|d| *d > after)
            .or(latest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 10, h, m, 0).unwrap()
    }

    #[test]
    fn next_fire_time_in_utc_and_in_a_time_zone() {
        let s = Schedule::parse("*/15 * * * *", "UTC").unwrap();
        assert_eq!(s.next_after(at(10, 0)), Some(at(10, 15)));
        assert_eq!(s.next_after(at(10, 14)), Some(at(10, 15)));
        // 02:00 in Berlin (UTC+1 in March before the switch) is 01:00 UTC.
        let s = Schedule::parse("0 2 * * *", "Europe/Berlin").unwrap();
        assert_eq!(s.next_after(at(0, 0)), Some(at(1, 0)));
        let s = Schedule::parse("@hourly", "UTC").unwrap();
        assert_eq!(s.next_after(at(10, 1)), Some(at(11, 0)));
    }

    #[test]
    fn bad_cron_and_time_zone_name_the_field_and_value() {
        for bad in ["* * * *", "* * * * * *", "61 * * * *", "a b c d e", ""] {
            let e = Schedule::parse(bad, "UTC").unwrap_err();
            assert!(matches!(e, ScheduleError::Cron { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("spec.schedule"), "{e}");
        }
        let e = Schedule::parse("* * * * *", "Mars/Olympus").unwrap_err();
        assert!(
            e.to_string().contains("spec.timeZone \"Mars/Olympus\""),
            "{e}"
        );
    }
}
