//! The schedule's decisions: a tick is stamped once, skipped when forbidden or late, the
//! backlog after downtime is bounded and collapsed, and a suspension is never backfilled.

use super::super::*;
use chrono::{Duration, TimeZone};

fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 10, h, m, s).unwrap()
}

fn every_minute() -> Schedule {
    Schedule::parse("* * * * *", "UTC").unwrap()
}

fn facts(since: DateTime<Utc>, now: DateTime<Utc>) -> TickFacts<'static> {
    TickFacts {
        since,
        now,
        suspended: false,
        resuming: false,
        concurrency: DefragConcurrencyPolicy::Forbid,
        starting_deadline_seconds: None,
        active: &[],
    }
}

fn walked(latest: DateTime<Utc>, passed_over: usize, collapsed: bool) -> Walk {
    Walk {
        latest: Some(latest),
        passed_over,
        collapsed,
    }
}

#[test]
fn a_due_tick_is_stamped_once_and_then_nothing_until_the_next() {
    let s = every_minute();
    let first = tick(&s, &facts(t(10, 0, 30), t(10, 1, 2)));
    assert_eq!(
        first,
        Tick::Stamp {
            at: t(10, 1, 0),
            walk: walked(t(10, 1, 0), 0, false)
        }
    );
    // lastScheduleTime is now 10:01: the same tick is never acted on again.
    let consumed = first.consumed().unwrap();
    assert_eq!(tick(&s, &facts(consumed, t(10, 1, 40))), Tick::Nothing);
    assert!(matches!(
        tick(&s, &facts(consumed, t(10, 2, 0))),
        Tick::Stamp { at, .. } if at == t(10, 2, 0)
    ));
}

#[test]
fn five_field_cron_is_read_in_utc_without_a_time_zone() {
    let s = Schedule::parse("0 3 * * *", "UTC").unwrap();
    assert_eq!(
        tick(&s, &facts(t(2, 0, 0), t(3, 0, 5))).consumed(),
        Some(t(3, 0, 0))
    );
    assert_eq!(tick(&s, &facts(t(2, 0, 0), t(2, 59, 59))), Tick::Nothing);
}

#[test]
fn after_downtime_only_the_newest_tick_is_acted_on_and_the_rest_are_counted() {
    let s = every_minute();
    let got = tick(&s, &facts(t(10, 0, 0), t(10, 5, 10)));
    assert_eq!(
        got,
        Tick::Stamp {
            at: t(10, 5, 0),
            walk: walked(t(10, 5, 0), 4, false)
        }
    );
    assert!(passed_over(&walked(t(10, 5, 0), 4, false)).contains("4 earlier ticks"));
}

#[test]
fn a_backlog_longer_than_the_walk_bound_collapses_into_one_run_of_the_newest_tick() {
    let s = every_minute();
    let now = t(10, 0, 20);
    let since = now - Duration::hours(5);
    let got = tick(&s, &facts(since, now));
    assert_eq!(
        got,
        Tick::Stamp {
            at: t(10, 0, 0),
            walk: walked(t(10, 0, 0), MAX_MISSED_TICKS, true)
        }
    );
    // Exactly the bound is still walked, not collapsed.
    let since = t(10, 0, 0) - Duration::minutes(MAX_MISSED_TICKS as i64);
    let w = walk(&s, since, now);
    assert_eq!(w, walked(t(10, 0, 0), MAX_MISSED_TICKS - 1, false));
    let w = walk(&s, since - Duration::minutes(1), now);
    assert!(w.collapsed, "{w:?}");
    assert_eq!(w.latest, Some(t(10, 0, 0)));
    assert!(passed_over(&w).contains("collapsed"));
}

#[test]
fn a_tick_past_the_starting_deadline_is_skipped_and_consumed() {
    let s = every_minute();
    let mut f = facts(t(9, 59, 0), t(10, 0, 45));
    f.starting_deadline_seconds = Some(30);
    let got = tick(&s, &f);
    assert!(
        matches!(got, Tick::Late { at, late_by: 45, .. } if at == t(10, 0, 0)),
        "{got:?}"
    );
    assert_eq!(got.consumed(), Some(t(10, 0, 0)));
    // Within the deadline it is stamped; a deadline of 0 takes only an on-time tick.
    f.now = t(10, 0, 30);
    assert!(matches!(tick(&s, &f), Tick::Stamp { .. }));
    f.starting_deadline_seconds = Some(0);
    f.now = t(10, 0, 0);
    assert!(matches!(tick(&s, &f), Tick::Stamp { .. }));
    f.now = t(10, 0, 1);
    assert!(matches!(tick(&s, &f), Tick::Late { late_by: 1, .. }));
}

#[test]
fn forbid_skips_and_consumes_a_tick_while_a_run_is_unfinished_and_allow_stamps_it() {
    let s = every_minute();
    let active = ["p-1773136800".to_string()];
    let mut f = facts(t(10, 0, 0), t(10, 1, 1));
    f.active = &active;
    let got = tick(&s, &f);
    assert!(
        matches!(got, Tick::Forbidden { at, .. } if at == t(10, 1, 0)),
        "{got:?}"
    );
    assert_eq!(got.consumed(), Some(t(10, 1, 0)));
    f.concurrency = DefragConcurrencyPolicy::Allow;
    assert!(matches!(tick(&s, &f), Tick::Stamp { .. }));
    // Late beats forbidden: the tick is reported as missed either way, never started late.
    f.concurrency = DefragConcurrencyPolicy::Forbid;
    f.starting_deadline_seconds = Some(0);
    assert!(matches!(tick(&s, &f), Tick::Late { .. }));
}

#[test]
fn a_suspended_policy_consumes_nothing_and_a_resumed_one_does_not_backfill() {
    let s = every_minute();
    let mut f = facts(t(10, 0, 0), t(10, 30, 5));
    f.suspended = true;
    assert_eq!(tick(&s, &f), Tick::Nothing);
    f.suspended = false;
    f.resuming = true;
    let got = tick(&s, &f);
    assert!(
        matches!(got, Tick::Resumed { at, .. } if at == t(10, 30, 0)),
        "{got:?}"
    );
    // The next tick after the resumption is stamped as usual.
    let mut next = facts(got.consumed().unwrap(), t(10, 31, 0));
    next.resuming = false;
    assert!(matches!(tick(&s, &next), Tick::Stamp { at, .. } if at == t(10, 31, 0)));
}

#[test]
fn the_active_condition_says_scheduled_suspended_or_invalid() {
    let (ok, r, _) = active_condition(false, None, "next tick at 10:00".into());
    assert_eq!((ok, r), (true, reason::SCHEDULED));
    let (ok, r, m) = active_condition(true, None, String::new());
    assert_eq!((ok, r), (false, reason::SUSPENDED));
    assert!(m.contains("spec.suspend"), "{m}");
    let (ok, r, m) = active_condition(
        true,
        Some("spec.schedule \"x\" is not valid"),
        String::new(),
    );
    assert_eq!((ok, r), (false, reason::INVALID_SCHEDULE));
    assert!(m.contains("spec.schedule"), "{m}");
}
