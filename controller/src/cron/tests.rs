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
        run_name("nightly", Utc.timestamp_opt(1_800_000_000, 0).unwrap()),
        "nightly-30000000"
    );
}
