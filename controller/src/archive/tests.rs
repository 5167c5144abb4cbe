use super::*;

fn put(rev: i64, key: &str, value: &str) -> Record {
    Record {
        kind: Kind::Put,
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        mod_revision: rev,
        create_revision: rev,
        version: 1,
        lease: 0,
    }
}

fn delete(rev: i64, key: &str) -> Record {
    Record {
        kind: Kind::Delete,
        key: key.as_bytes().to_vec(),
        value: Vec::new(),
        mod_revision: rev,
        create_revision: 0,
        version: 0,
        lease: 0,
    }
}

fn name(first: i64, last: i64) -> SegmentName {
    SegmentName { first, last }
}

#[test]
fn a_segment_decodes_to_the_records_it_was_made_of() {
    let mut leased = put(8, "b", "2");
    leased.lease = 0x7a3f;
    leased.version = 3;
    let records = vec![put(7, "a", "1"), leased, delete(8, "c"), put(9, "", "")];
    let (n, bytes) = encode(&records).expect("records");
    assert_eq!(n, name(7, 9));
    assert_eq!(decode(n, &bytes), Ok(records));
}

#[test]
fn no_records_make_no_segment() {
    assert_eq!(encode(&[]), None);
}

#[test]
fn a_flipped_byte_is_caught_by_the_checksum_or_the_gzip_crc() {
    let (n, bytes) = encode(&[put(5, "k", "v"), put(6, "k", "w")]).expect("records");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_end(&mut raw)
        .expect("gzip");
    // Damage the body and compress it again: only the segment's own checksum can tell.
    let at = raw.len() - 40;
    raw[at] ^= 0x01;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&raw).expect("vec");
    let damaged = gz.finish().expect("vec");
    assert_eq!(decode(n, &damaged), Err(SegmentError::Checksum));
    // Damage the stored bytes: gzip's own CRC (or inflate) refuses them.
    let mut stored = bytes.clone();
    let mid = stored.len() / 2;
    stored[mid] ^= 0xff;
    assert!(decode(n, &stored).is_err());
    // Cut short.
    assert!(decode(n, &bytes[..bytes.len() - 9]).is_err());
}

#[test]
fn a_segment_stored_under_another_range_is_refused() {
    let (_, bytes) = encode(&[put(5, "k", "v"), put(6, "k", "w")]).expect("records");
    assert!(matches!(
        decode(name(5, 7), &bytes),
        Err(SegmentError::Mismatch { .. })
    ));
}

#[test]
fn names_sort_in_revision_order_and_parse_back() {
    let keys: Vec<String> = [name(9, 10), name(100, 120), name(11, 99)]
        .iter()
        .map(|n| n.key("archives/demo/"))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    let parsed: Vec<SegmentName> = sorted
        .iter()
        .filter_map(|k| SegmentName::parse("archives/demo/", k))
        .collect();
    assert_eq!(parsed, vec![name(9, 10), name(11, 99), name(100, 120)]);
    assert_eq!(
        SegmentName::parse(
            "",
            "segments/00000000000000000009-00000000000000000010.seg.gz"
        ),
        Some(name(9, 10))
    );
}

#[test]
fn keys_that_are_not_segments_of_the_prefix_are_ignored() {
    for key in [
        "other/segments/00000000000000000009-00000000000000000010.seg.gz",
        "a/segments/9-10.seg.gz",
        "a/segments/00000000000000000010-00000000000000000009.seg.gz",
        "a/segments/00000000000000000000-00000000000000000009.seg.gz",
        "a/segments/00000000000000000009-00000000000000000010.seg",
        "a/hashes/00000000000000000009.json",
    ] {
        assert_eq!(SegmentName::parse("a/", key), None, "{key}");
    }
    assert_eq!(
        RecordedHash::parse("a/", &RecordedHash::key("a/", 42)),
        Some(42)
    );
    assert_eq!(RecordedHash::parse("a/", "a/hashes/42.json"), None);
}

#[test]
fn a_contiguous_archive_resumes_after_its_newest_revision() {
    let w = Window::of(&[name(11, 20), name(5, 10), name(21, 21)]);
    assert_eq!((w.first, w.last), (Some(5), Some(21)));
    assert!(w.gaps.is_empty() && w.overlaps.is_empty());
    assert_eq!(w.resume_from(1), 22);
    assert_eq!(Window::of(&[]).resume_from(7), 7);
}

#[test]
fn a_missing_range_is_a_gap_and_the_window_starts_after_it() {
    let w = Window::of(&[name(5, 10), name(15, 20), name(21, 30)]);
    assert_eq!(w.gaps, vec![(11, 14)]);
    assert_eq!((w.first, w.last), (Some(15), Some(30)));
}

#[test]
fn a_revision_written_twice_is_an_overlap() {
    let w = Window::of(&[name(5, 10), name(8, 12), name(13, 13)]);
    assert_eq!(w.overlaps, vec![name(8, 12)]);
    assert_eq!(w.last, Some(13));
    assert!(w.gaps.is_empty());
}

#[test]
fn a_replay_takes_the_segments_from_after_the_base_to_the_target() {
    let names = [name(1, 10), name(11, 20), name(21, 30), name(31, 40)];
    assert_eq!(
        segments_for(&names, 15, 25),
        Ok(vec![name(11, 20), name(21, 30)])
    );
    assert_eq!(segments_for(&names, 20, 20), Ok(vec![]));
    assert_eq!(segments_for(&names, 0, 40).map(|s| s.len()), Ok(4));
}

#[test]
fn a_replay_past_the_archive_or_across_a_gap_names_the_missing_revision() {
    assert_eq!(segments_for(&[name(1, 10)], 0, 11), Err(11));
    assert_eq!(segments_for(&[name(1, 10), name(13, 20)], 5, 15), Err(11));
    assert_eq!(segments_for(&[name(3, 10)], 0, 5), Err(1));
}

#[test]
fn a_replay_across_overlapping_segments_takes_each_once_in_order() {
    let names = [name(10, 20), name(15, 25), name(21, 30)];
    assert_eq!(
        segments_for(&names, 9, 30),
        Ok(vec![name(10, 20), name(15, 25), name(21, 30)])
    );
    assert_eq!(segments_for(&names, 22, 24), Ok(vec![name(15, 25)]));
}

#[test]
fn a_schedules_archive_lives_under_its_destination_key() {
    assert_eq!(schedule_prefix(None, "hourly"), "archive/hourly/");
    assert_eq!(schedule_prefix(Some(""), "hourly"), "archive/hourly/");
    assert_eq!(
        schedule_prefix(Some("my-etcd/"), "hourly"),
        "my-etcd/archive/hourly/"
    );
    assert_eq!(
        schedule_prefix(Some("my-etcd"), "hourly"),
        "my-etcd/archive/hourly/"
    );
}

#[test]
fn the_window_starts_at_the_oldest_verified_snapshot_the_newest_run_reaches() {
    // Two runs: 10..=20, then a gap, then 31..=50.
    let w = Window::of(&[name(10, 20), name(31, 40), name(41, 50)]);
    // 15 is inside the older run only; 30 is right before the newest run; 45 inside it.
    assert_eq!(window_base(&w, &[15, 30, 45]), Some(30));
    assert_eq!(window_base(&w, &[15, 45]), Some(45));
    // A snapshot newer than the newest archived revision anchors nothing yet.
    assert_eq!(window_base(&w, &[15, 51]), None);
    assert_eq!(window_base(&w, &[]), None);
    assert_eq!(window_base(&Window::default(), &[30]), None);
}
