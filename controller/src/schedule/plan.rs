//! The schedule's decisions, without I/O: parsing the cron expression and time zone, which run
//! is due now (missed runs and the starting deadline), when to wake next, and which finished
//! snapshots retention removes.

use chrono::{DateTime, Utc};

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

/// The snapshot a run at `at` creates: `<schedule>-<unix minutes>`.
pub fn snapshot_name(schedule: &str, at: DateTime<Utc>) -> String {
    format!("{schedule}-{}", at.timestamp().div_euclid(60))
}

/// One of the schedule's snapshots, as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub name: String,
    pub created: DateTime<Utc>,
    /// Complete or Failed.
    pub finished: bool,
}

/// The finished snapshots to delete, oldest first: those beyond the newest `keep_last`
/// finished ones, and those older than `max_age_seconds`. Running snapshots are never pruned
/// and do not count towards `keep_last`.
pub fn prune(
    snapshots: &[Owned],
    keep_last: Option<i32>,
    max_age_seconds: Option<i64>,
    now: DateTime<Utc>,
) -> Vec<String> {
    let mut finished: Vec<&Owned> = snapshots.iter().filter(|s| s.finished).collect();
    // Newest first; the name breaks ties (it carries the run's minute).
    finished.sort_by(|a, b| b.created.cmp(&a.created).then(b.name.cmp(&a.name)));
    let keep = keep_last.map(|k| usize::try_from(k.max(0)).unwrap_or(0));
    let mut gone: Vec<&Owned> = finished
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            keep.is_some_and(|k| *i >= k)
                || max_age_seconds.is_some_and(|m| (now - s.created).num_seconds() > m)
        })
        .map(|(_, s)| *s)
        .collect();
    gone.reverse();
    gone.into_iter().map(|s| s.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 10, h, m, 0).unwrap()
    }

    #[test]
    fn only_the_most_recent_missed_run_is_taken_within_the_deadline() {
        let s = Schedule::parse("* * * * *", "UTC").unwrap();
        let now = at(10, 5) + chrono::Duration::seconds(20);
        // Five runs missed since 10:00: only 10:05 is taken.
        assert_eq!(due(&s, at(10, 0), now, None), Due::Run(at(10, 5)));
        assert_eq!(due(&s, at(10, 0), now, Some(30)), Due::Run(at(10, 5)));
        assert_eq!(due(&s, at(10, 0), now, Some(10)), Due::Missed(at(10, 5)));
        // The run at `since` itself is not taken again.
        assert_eq!(due(&s, at(10, 5), now, None), Due::Nothing);
        // Missed for years: still one run, the newest.
        let long_ago = Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(due(&s, long_ago, now, None), Due::Run(at(10, 5)));
    }

    #[test]
    fn snapshot_names_carry_the_unix_minute() {
        assert_eq!(
            snapshot_name("nightly", Utc.timestamp_opt(1_800_000_000, 0).unwrap()),
            "nightly-30000000"
        );
    }

    #[test]
    fn retention_prunes_the_oldest_finished_beyond_keep_last_and_by_age() {
        let s = |name: &str, m: u32, finished: bool| Owned {
            name: name.into(),
            created: at(10, m),
            finished,
        };
        let all = [
            s("a", 1, true),
            s("b", 2, true),
            s("c", 3, true),
            s("d", 4, false),
            s("e", 5, true),
        ];
        // Newest two finished kept (e, c); the running d neither counts nor goes.
        assert_eq!(prune(&all, Some(2), None, at(10, 6)), ["a", "b"]);
        assert_eq!(prune(&all, Some(5), None, at(10, 6)), Vec::<String>::new());
        // maxAge 150s at 10:06: a (10:01), b (10:02) and c (10:03) are older; d is running.
        assert_eq!(prune(&all, None, Some(150), at(10, 6)), ["a", "b", "c"]);
        assert_eq!(prune(&all, Some(4), Some(270), at(10, 6)), ["a"]);
        assert!(prune(&all, None, None, at(10, 6)).is_empty());
    }
}
