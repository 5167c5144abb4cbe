//! The WAL reader on crafted logs: a clean log, the preallocated zeros after it, a torn tail,
//! a corrupt record, logs spread over files, and garbage (never a panic).

use super::*;

/// A WAL file written the way etcd's encoder writes one.
struct Log {
    bytes: Vec<u8>,
    crc: u32,
}

impl Log {
    /// A file that starts, as etcd's do, with a CRC record carrying the previous file's sum.
    fn new(previous: u32) -> Self {
        let mut log = Log {
            bytes: Vec::new(),
            crc: previous,
        };
        log.frame(&Record {
            kind: Some(CRC),
            crc: Some(previous),
            data: None,
        });
        log
    }

    /// A first file: CRC record, metadata, the empty snapshot record.
    fn first(member: u64, cluster: u64) -> Self {
        let mut log = Log::new(0);
        log.metadata(member, cluster);
        log.snapshot(0, 0);
        log
    }

    fn frame(&mut self, rec: &Record) {
        let body = rec.encode_to_vec();
        let padding = (8 - body.len() % 8) % 8;
        let mut field = body.len() as u64;
        if padding != 0 {
            field |= (0x80 | padding as u64) << 56;
        }
        self.bytes.extend_from_slice(&field.to_le_bytes());
        self.bytes.extend_from_slice(&body);
        self.bytes.extend(std::iter::repeat_n(0u8, padding));
    }

    fn record(&mut self, kind: i64, data: Vec<u8>) -> &mut Self {
        self.crc = crc_update(self.crc, &data);
        self.frame(&Record {
            kind: Some(kind),
            crc: Some(self.crc),
            data: Some(data),
        });
        self
    }

    fn metadata(&mut self, member: u64, cluster: u64) -> &mut Self {
        let m = Metadata {
            node_id: Some(member),
            cluster_id: Some(cluster),
        };
        self.record(METADATA, m.encode_to_vec())
    }

    fn entry(&mut self, term: u64, index: u64) -> &mut Self {
        let e = Entry {
            term: Some(term),
            index: Some(index),
        };
        // An entry's type and payload, as raft writes them (fields 1 and 4), are skipped.
        let mut data = e.encode_to_vec();
        data.extend_from_slice(&[0x08, 0x00, 0x22, 0x03, b'p', b'u', b't']);
        self.record(ENTRY, data)
    }

    fn state(&mut self, term: u64, commit: u64) -> &mut Self {
        let s = HardState {
            term: Some(term),
            commit: Some(commit),
        };
        // The vote (field 2) is skipped.
        let mut data = s.encode_to_vec();
        data.extend_from_slice(&[0x10, 0x07]);
        self.record(STATE, data)
    }

    fn snapshot(&mut self, index: u64, term: u64) -> &mut Self {
        let s = Snapshot {
            index: Some(index),
            term: Some(term),
        };
        self.record(SNAPSHOT, s.encode_to_vec())
    }

    /// A member at term 3 with entries 1..=5, committed up to 4.
    fn sample() -> Self {
        let mut log = Log::first(0xaa, 0xcc);
        log.state(2, 0);
        for i in 1..=3 {
            log.entry(2, i);
        }
        log.state(2, 3)
            .state(3, 3)
            .entry(3, 4)
            .entry(3, 5)
            .state(3, 4);
        log
    }
}

/// Read `files` (name, bytes) as one WAL.
fn read(files: &[(&str, &[u8])]) -> Result<DiskPosition, String> {
    let mut reader = WalReader::new();
    for (n, (name, bytes)) in files.iter().enumerate() {
        reader
            .read_file(name, bytes.len() as u64, *bytes, n + 1 == files.len())
            .map_err(|e| e.to_string())?;
    }
    reader.position().map_err(|e| e.to_string())
}

const FILE: &str = "0000000000000000-0000000000000000.wal";
const NEXT: &str = "0000000000000001-0000000000000006.wal";

#[test]
fn the_rolling_crc_is_castagnoli_continued_from_the_previous_sum() {
    assert_eq!(crc_update(0, b"123456789"), 0xe306_9283);
    let (a, b) = (b"the first record".as_slice(), b"and the next".as_slice());
    let whole = [a, b].concat();
    assert_eq!(crc_update(crc_update(0, a), b), crc_update(0, &whole));
}

#[test]
fn a_frame_length_carries_its_padding_in_the_top_byte() {
    assert_eq!(frame_size(13), (13, 0));
    assert_eq!(frame_size(13 | (0x83u64 << 56)), (13, 3));
}

#[test]
fn a_clean_log_gives_the_last_hard_state_and_the_last_entry() {
    let log = Log::sample();
    let p = read(&[(FILE, &log.bytes)]).unwrap();
    assert_eq!((p.member_id, p.cluster_id), (0xaa, 0xcc));
    assert_eq!((p.term, p.commit), (3, 4));
    assert_eq!((p.last_term, p.last_index), (3, 5));
    assert_eq!(p.torn_tail, None);
    assert_eq!(p.files, vec![FILE.to_string()]);
}

#[test]
fn the_preallocated_zeros_after_the_log_end_it() {
    let mut log = Log::sample();
    log.bytes.extend(std::iter::repeat_n(0u8, 4096));
    let p = read(&[(FILE, &log.bytes)]).unwrap();
    assert_eq!((p.term, p.commit, p.last_index), (3, 4, 5));
    assert_eq!(p.torn_tail, None);
}

#[test]
fn a_torn_tail_of_the_newest_file_ends_the_log_at_the_last_complete_record() {
    let mut log = Log::sample();
    log.entry(3, 6).state(3, 6);
    // Cut in the middle of the last record (the HardState that commits 6).
    let cut = log.bytes.len() - 5;
    let p = read(&[(FILE, &log.bytes[..cut])]).unwrap();
    assert_eq!(
        (p.term, p.commit),
        (3, 4),
        "the cut HardState does not count"
    );
    assert_eq!(p.last_index, 6, "the complete entry before it does");
    let tail = p.torn_tail.expect("the torn tail is reported");
    assert!(tail.contains(FILE) && tail.contains("offset"), "{tail}");
    // Only the length field of the next frame: the same.
    let mut log = Log::sample();
    log.bytes.extend_from_slice(&[0x10, 0, 0]);
    let p = read(&[(FILE, &log.bytes)]).unwrap();
    assert_eq!((p.term, p.commit, p.last_index), (3, 4, 5));
    assert!(p.torn_tail.is_some());
    // A record whose last sector was never written (zeros) after a complete log.
    let mut log = Log::sample();
    let at = log.bytes.len();
    log.entry(3, 6);
    let frame_end = log.bytes.len();
    log.bytes[at + 8..frame_end].fill(0);
    log.bytes.extend(std::iter::repeat_n(0u8, 512));
    let p = read(&[(FILE, &log.bytes)]).unwrap();
    assert_eq!((p.commit, p.last_index), (4, 5));
    assert!(p.torn_tail.is_some());
}

#[test]
fn a_cut_record_in_an_older_file_is_an_error_naming_the_file_and_offset() {
    let log = Log::sample();
    let cut = log.bytes.len() - 5;
    let next = Log::new(log.crc);
    let e = read(&[(FILE, &log.bytes[..cut]), (NEXT, &next.bytes)]).unwrap_err();
    assert!(
        e.starts_with(FILE) && e.contains("at offset") && e.contains("corrupt"),
        "{e}"
    );
}

#[test]
fn a_corrupt_record_is_an_error_never_a_guess() {
    let mut log = Log::sample();
    let at = log.bytes.len();
    log.entry(3, 6).state(3, 6);
    // Flip a byte inside the entry's payload ("put"): its CRC no longer matches.
    let put = log.bytes[at..]
        .windows(3)
        .position(|w| w == b"put")
        .expect("the payload")
        + at;
    log.bytes[put] ^= 0x01;
    let e = read(&[(FILE, &log.bytes)]).unwrap_err();
    assert!(e.contains("CRC mismatch"), "{e}");
    assert!(e.contains(&format!("{FILE} at offset {at}")), "{e}");
}

#[test]
fn files_follow_each_other_through_their_crc_records() {
    let mut first = Log::sample();
    first.entry(3, 6);
    let mut next = Log::new(first.crc);
    next.metadata(0xaa, 0xcc)
        .state(3, 6)
        .entry(4, 7)
        .state(4, 7);
    let p = read(&[(FILE, &first.bytes), (NEXT, &next.bytes)]).unwrap();
    assert_eq!((p.term, p.commit, p.last_term, p.last_index), (4, 7, 4, 7));
    assert_eq!(p.files.len(), 2);
    // A next file whose CRC record does not carry the first file's sum is not its successor.
    let mut stranger = Log::new(first.crc ^ 1);
    stranger.metadata(0xaa, 0xcc).state(4, 7);
    let e = read(&[(FILE, &first.bytes), (NEXT, &stranger.bytes)]).unwrap_err();
    assert!(
        e.starts_with(NEXT) && e.contains("do not belong together"),
        "{e}"
    );
    // Nor is one of another member.
    let mut other = Log::new(first.crc);
    other.metadata(0xbb, 0xcc).state(4, 7);
    let e = read(&[(FILE, &first.bytes), (NEXT, &other.bytes)]).unwrap_err();
    assert!(e.contains("not one member's"), "{e}");
}

#[test]
fn a_later_entry_at_a_lower_index_replaces_the_conflicting_tail() {
    let mut log = Log::sample();
    // A new leader's entry 5 overwrites the old term-3 entries 5 (raft's log conflict).
    log.entry(4, 5).state(4, 5);
    let p = read(&[(FILE, &log.bytes)]).unwrap();
    assert_eq!((p.last_term, p.last_index), (4, 5));
}

#[test]
fn a_log_without_metadata_or_hard_state_holds_no_position() {
    let e = read(&[(FILE, &Log::new(0).bytes)]).unwrap_err();
    assert!(e.contains("no metadata"), "{e}");
    let e = read(&[(FILE, &Log::first(1, 2).bytes)]).unwrap_err();
    assert!(e.contains("no HardState"), "{e}");
    let e = read(&[(FILE, &[])]).unwrap_err();
    assert!(e.contains("no metadata"), "{e}");
}

#[test]
fn garbage_is_an_error_or_a_torn_tail_and_never_a_panic() {
    let e = read(&[(FILE, b"this is not a write-ahead log at all!!")]).unwrap_err();
    assert!(e.contains(FILE), "{e}");
    // A length field claiming more than the file holds.
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(&[1; 64]);
    assert!(read(&[(FILE, &huge)]).is_err());
    // Random bytes and every prefix and single-byte change of a real log: no panic.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..500 {
        let len = (random() % 300) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| random() as u8).collect();
        let _ = read(&[(FILE, &bytes)]);
    }
    let log = Log::sample();
    for cut in 0..log.bytes.len() {
        let _ = read(&[(FILE, &log.bytes[..cut])]);
        let mut changed = log.bytes.clone();
        changed[cut] ^= random() as u8 | 1;
        if let Ok(p) = read(&[(FILE, &changed)]) {
            // A change the reader accepts is one that left a valid prefix: never a later
            // position than the log holds.
            assert!(p.commit <= 4 && p.last_index <= 5, "{p:?}");
        }
    }
}

#[test]
fn wal_files_are_ordered_and_must_follow_each_other() {
    let files = wal_files([NEXT, "0.tmp", FILE, "lost+found"]).unwrap();
    assert_eq!(
        files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        [FILE, NEXT]
    );
    assert_eq!((files[1].seq, files[1].index), (1, 6));
    let e = wal_files([FILE, "0000000000000002-0000000000000009.wal"]).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    let e = wal_files(["0.tmp"]).unwrap_err();
    assert!(e.to_string().contains("no WAL file"), "{e}");
}
