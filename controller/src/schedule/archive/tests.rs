use super::*;

fn seg(first: i64, last: i64, at: i64) -> Listed {
    Listed {
        key: SegmentName { first, last }.key("etcd/archive/hourly/"),
        stored_at: Some(at),
    }
}

#[test]
fn the_status_names_the_newest_revision_the_run_its_base_and_the_gaps() {
    let listed = [
        seg(5, 9, 100),
        seg(10, 20, 110),
        // 21..=30 lost to a compaction.
        seg(31, 40, 200),
        seg(41, 50, 210),
        // Not a segment of this archive.
        Listed {
            key: "etcd/archive/hourly/segments/garbage".into(),
            stored_at: Some(1),
        },
    ];
    let status = status_of("etcd/archive/hourly/", &listed, &[7, 35, 60]);
    assert_eq!(status.newest_revision, Some(50));
    assert_eq!(status.newest_time.map(|t| t.0.as_second()), Some(210));
    assert_eq!(status.first_revision, Some(31));
    // 7 anchors only the older run; 60 is past the archive; 35 is inside the newest run.
    assert_eq!(status.window_start_revision, Some(35));
    assert_eq!(status.gaps, ["21-30"]);
    assert_eq!(status.segments, Some(4));
}

#[test]
fn an_empty_archive_has_an_empty_status() {
    let status = status_of("etcd/archive/hourly/", &[], &[35]);
    assert_eq!(status, ArchiveStatus::default());
}

#[test]
fn only_the_newest_gaps_are_listed() {
    let listed: Vec<Listed> = (0..15).map(|i| seg(i * 10, i * 10 + 5, i)).collect();
    let status = status_of("etcd/archive/hourly/", &listed, &[]);
    assert_eq!(status.gaps.len(), SHOWN_GAPS);
    assert_eq!(status.gaps.last().map(String::as_str), Some("136-139"));
}

#[test]
fn a_caught_up_archive_lags_by_nothing_however_old_its_newest_segment() {
    assert_eq!(
        lag(Some(50), Some(50), Some(100), 10_000),
        (Some(0), Some(0))
    );
}

#[test]
fn a_behind_archive_lags_by_the_revisions_it_lacks_and_its_newest_segment_s_age() {
    assert_eq!(
        lag(Some(80), Some(50), Some(100), 130),
        (Some(30), Some(30))
    );
    // A clock behind the store's never makes the lag negative.
    assert_eq!(lag(Some(51), Some(50), Some(100), 90), (Some(1), Some(0)));
}

#[test]
fn an_empty_archive_lags_by_every_revision_and_unknown_seconds() {
    assert_eq!(lag(Some(12), None, None, 130), (Some(12), None));
}

#[test]
fn without_the_cluster_s_revision_the_lag_is_unknown() {
    assert_eq!(lag(None, Some(50), Some(100), 130), (None, None));
}
