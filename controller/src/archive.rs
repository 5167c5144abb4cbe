//! The continuous archive's format (docs/point-in-time-recovery.md): what the archiver
//! (`snapshot-agent archive`) writes, what a replay (`snapshot-agent replay`) and, later, the
//! controller read. Pure: names, encoding, decoding, and the window a listing covers.
//!
//! An archive is a key prefix (`<prefix>`) holding
//! - `segments/<first>-<last>.seg.gz`: every event of the revisions `first..=last`, in revision
//!   order, whole revisions only (a transaction's events are never split across segments);
//!   revisions are zero-padded to 20 digits so a listing's order is revision order;
//! - `hashes/<revision>.json`: the cluster's own `HashKV` at that revision ([`RecordedHash`]),
//!   taken while the cluster still held it, what a replay is proven against.
//!
//! A segment is gzip of: the magic `EOPARCH1`, `first`, `last` (i64), the record count (u32),
//! the records, then the SHA-256 of everything before it. A record is its kind (0 put,
//! 1 delete), `mod_revision`, `create_revision`, `version`, `lease` (i64), the key and the value
//! (each a u32 length and the bytes); all integers little-endian. A segment that does not decode,
//! whose checksum differs, or whose records do not match its name is [`SegmentError`]: never
//! replayed.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 8] = b"EOPARCH1";
const DIGITS: usize = 20;
const SEGMENTS: &str = "segments/";
const HASHES: &str = "hashes/";
const SEGMENT_SUFFIX: &str = ".seg.gz";
/// A record's fixed part: kind (1), four i64, two u32 lengths.
const RECORD_FIXED: usize = 1 + 4 * 8 + 2 * 4;
/// A decoded segment never claims more than this per record length (a corrupt length must not
/// make the decoder allocate gigabytes): etcd's own request limit is far below it.
const MAX_FIELD: usize = 64 << 20;

/// What happened to a key at a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Put,
    Delete,
}

/// One event of etcd's history, as the archive keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub key: Vec<u8>,
    /// Empty for a delete.
    pub value: Vec<u8>,
    pub mod_revision: i64,
    pub create_revision: i64,
    pub version: i64,
    pub lease: i64,
}

impl Record {
    /// Bytes this record takes in a segment before compression.
    pub fn encoded_len(&self) -> usize {
        RECORD_FIXED + self.key.len() + self.value.len()
    }
}

/// A segment's revision range, as its object name carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SegmentName {
    pub first: i64,
    pub last: i64,
}

impl SegmentName {
    /// The object key under the archive's `prefix` (which ends in `/` or is empty).
    pub fn key(&self, prefix: &str) -> String {
        format!(
            "{prefix}{SEGMENTS}{:0DIGITS$}-{:0DIGITS$}{SEGMENT_SUFFIX}",
            self.first, self.last
        )
    }

    /// The listing prefix of every segment under `prefix`.
    pub fn listing(prefix: &str) -> String {
        format!("{prefix}{SEGMENTS}")
    }

    /// The name in an object key, `None` for anything that is not a segment of this prefix.
    pub fn parse(prefix: &str, key: &str) -> Option<SegmentName> {
        let rest = key.strip_prefix(prefix)?.strip_prefix(SEGMENTS)?;
        let range = rest.strip_suffix(SEGMENT_SUFFIX)?;
        let (first, last) = range.split_once('-')?;
        if first.len() != DIGITS || last.len() != DIGITS {
            return None;
        }
        let name = SegmentName {
            first: first.parse().ok()?,
            last: last.parse().ok()?,
        };
        (name.first >= 1 && name.first <= name.last).then_some(name)
    }
}

/// The cluster's `HashKV` at a revision, as the archiver recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedHash {
    pub revision: i64,
    pub hash: u32,
    pub compact_revision: i64,
}

impl RecordedHash {
    pub fn key(prefix: &str, revision: i64) -> String {
        format!("{prefix}{HASHES}{revision:0DIGITS$}.json")
    }

    pub fn listing(prefix: &str) -> String {
        format!("{prefix}{HASHES}")
    }

    /// The revision in a hash object's key.
    pub fn parse(prefix: &str, key: &str) -> Option<i64> {
        let digits = key
            .strip_prefix(prefix)?
            .strip_prefix(HASHES)?
            .strip_suffix(".json")?;
        (digits.len() == DIGITS)
            .then(|| digits.parse().ok())
            .flatten()
    }
}

/// Why stored bytes are not a segment to replay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("not a gzip stream of an archive segment: {0}")]
    Unreadable(String),
    #[error("the segment does not start with the archive magic")]
    Magic,
    #[error("the segment ends early (at byte {0})")]
    Truncated(usize),
    #[error("the segment's SHA-256 differs from the one it carries: it was damaged after it was written")]
    Checksum,
    #[error("the segment says revisions {said_first}..={said_last} but holds {held}")]
    Mismatch {
        said_first: i64,
        said_last: i64,
        held: String,
    },
    #[error("record {0} is out of revision order")]
    Order(usize),
    #[error("record {0} has an unknown kind {1}")]
    UnknownKind(usize, u8),
}

/// The segment of `records` (in revision order, whole revisions), and its name; `None` for no
/// records (an archive never writes an empty segment).
pub fn encode(records: &[Record]) -> Option<(SegmentName, Vec<u8>)> {
    let name = SegmentName {
        first: records.first()?.mod_revision,
        last: records.last()?.mod_revision,
    };
    let mut raw = Vec::with_capacity(
        MAGIC.len() + 20 + records.iter().map(Record::encoded_len).sum::<usize>() + 32,
    );
    raw.extend_from_slice(MAGIC);
    raw.extend_from_slice(&name.first.to_le_bytes());
    raw.extend_from_slice(&name.last.to_le_bytes());
    raw.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for r in records {
        raw.push(match r.kind {
            Kind::Put => 0,
            Kind::Delete => 1,
        });
        for n in [r.mod_revision, r.create_revision, r.version, r.lease] {
            raw.extend_from_slice(&n.to_le_bytes());
        }
        for field in [&r.key, &r.value] {
            raw.extend_from_slice(&(field.len() as u32).to_le_bytes());
            raw.extend_from_slice(field);
        }
    }
    let digest = sha256(&raw);
    raw.extend_from_slice(&digest);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = gz.write_all(&raw);
    gz.finish().ok().map(|bytes| (name, bytes))
}

/// The records of a stored segment, checked against its checksum and against `name`.
pub fn decode(name: SegmentName, stored: &[u8]) -> Result<Vec<Record>, SegmentError> {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(stored)
        .read_to_end(&mut raw)
        .map_err(|e| SegmentError::Unreadable(e.to_string()))?;
    if raw.len() < MAGIC.len() + 20 + 32 {
        return Err(SegmentError::Truncated(raw.len()));
    }
    let (body, digest) = raw.split_at(raw.len() - 32);
    if sha256(body) != digest {
        return Err(SegmentError::Checksum);
    }
    let mut at = Reader { bytes: body, at: 0 };
    if at.take(MAGIC.len())? != MAGIC {
        return Err(SegmentError::Magic);
    }
    let (first, last) = (at.i64()?, at.i64()?);
    let count = at.u32()? as usize;
    let mut records = Vec::with_capacity(count.min(body.len() / RECORD_FIXED));
    for i in 0..count {
        let kind = match at.take(1)?[0] {
            0 => Kind::Put,
            1 => Kind::Delete,
            other => return Err(SegmentError::UnknownKind(i, other)),
        };
        let (mod_revision, create_revision, version, lease) =
            (at.i64()?, at.i64()?, at.i64()?, at.i64()?);
        let key = at.field()?;
        let value = at.field()?;
        if records
            .last()
            .is_some_and(|p: &Record| p.mod_revision > mod_revision)
        {
            return Err(SegmentError::Order(i));
        }
        records.push(Record {
            kind,
            key,
            value,
            mod_revision,
            create_revision,
            version,
            lease,
        });
    }
    let held = (
        records.first().map(|r| r.mod_revision),
        records.last().map(|r| r.mod_revision),
    );
    if (first, last) != (name.first, name.last) || held != (Some(first), Some(last)) {
        return Err(SegmentError::Mismatch {
            said_first: name.first,
            said_last: name.last,
            held: match held {
                (Some(a), Some(b)) => format!("{a}..={b} (its header says {first}..={last})"),
                _ => "no records".into(),
            },
        });
    }
    if at.at != body.len() {
        return Err(SegmentError::Truncated(at.at));
    }
    Ok(records)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SegmentError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or(SegmentError::Truncated(self.at))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn i64(&mut self) -> Result<i64, SegmentError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(i64::from_le_bytes(b))
    }
    fn u32(&mut self) -> Result<u32, SegmentError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn field(&mut self) -> Result<Vec<u8>, SegmentError> {
        let len = self.u32()? as usize;
        if len > MAX_FIELD {
            return Err(SegmentError::Truncated(self.at));
        }
        Ok(self.take(len)?.to_vec())
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// What a listing of segments covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Window {
    /// The first revision of the oldest contiguous run that reaches the newest segment.
    pub first: Option<i64>,
    /// The newest archived revision.
    pub last: Option<i64>,
    /// Revisions missing between segments (`from..=to`), oldest first.
    pub gaps: Vec<(i64, i64)>,
    /// Segments that overlap an earlier one (an archiver that wrote a revision twice).
    pub overlaps: Vec<SegmentName>,
}

impl Window {
    /// The window of `names` (any order).
    pub fn of(names: &[SegmentName]) -> Window {
        let mut sorted = names.to_vec();
        sorted.sort();
        sorted.dedup();
        let mut window = Window::default();
        let mut run_first = None;
        let mut last: Option<i64> = None;
        for name in sorted {
            match last {
                Some(l) if name.first <= l => {
                    window.overlaps.push(name);
                    last = Some(l.max(name.last));
                    continue;
                }
                Some(l) if name.first > l + 1 => {
                    window.gaps.push((l + 1, name.first - 1));
                    run_first = Some(name.first);
                }
                Some(_) => {}
                None => run_first = Some(name.first),
            }
            last = Some(name.last);
        }
        window.first = run_first;
        window.last = last;
        window
    }

    /// The revision an archiver resumes its watch from: the one after the newest archived, or
    /// `start` for an empty archive.
    pub fn resume_from(&self, start: i64) -> i64 {
        self.last.map_or(start, |l| l + 1)
    }
}

/// The key prefix of a schedule's archive: `archive/<schedule>/` under its destination's key
/// (`<key>archive/<schedule>/` when the key ends in `/`, else `<key>/archive/<schedule>/`).
pub fn schedule_prefix(destination_key: Option<&str>, schedule: &str) -> String {
    match destination_key.unwrap_or("").trim() {
        "" => format!("archive/{schedule}/"),
        p if p.ends_with('/') => format!("{p}archive/{schedule}/"),
        p => format!("{p}/archive/{schedule}/"),
    }
}

/// The base of the archive's window: the oldest of the `verified` snapshot revisions that the
/// newest contiguous run of segments starts right after or covers. A recovery reaches every
/// revision from it to [`Window::last`]. `None` when no verified snapshot anchors the run.
pub fn window_base(window: &Window, verified: &[i64]) -> Option<i64> {
    let (first, last) = (window.first?, window.last?);
    verified
        .iter()
        .copied()
        .filter(|&base| base >= first - 1 && base <= last)
        .min()
}

/// The segments to replay to reach `target` from a base snapshot at `base` (its revision): those
/// holding revisions `base+1..=target`, in order. `Err` names the first missing revision when
/// the window does not cover them contiguously.
pub fn segments_for(
    names: &[SegmentName],
    base: i64,
    target: i64,
) -> Result<Vec<SegmentName>, i64> {
    let mut sorted = names.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut next = base + 1;
    let mut chosen = Vec::new();
    for name in sorted {
        if next > target {
            break;
        }
        if name.last < next {
            continue;
        }
        if name.first > next {
            return Err(next);
        }
        chosen.push(name);
        next = name.last + 1;
    }
    if next <= target {
        return Err(next);
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests;
