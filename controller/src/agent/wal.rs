//! A member's raft position read from its write-ahead log, for a member whose etcd does not run
//! (`snapshot-agent position`). `etcdutl` has no command that prints it (`snapshot status` reads
//! a bbolt file's revision, hash and keys, not the raft log), so the WAL is decoded here, the way
//! etcd's own `wal.ReadAll` does in read-only mode (server/storage/wal/decoder.go, wal.go).
//!
//! Pure: records in, position out. The caller lists the files and hands each one's bytes as a
//! reader; nothing here opens a file.
//!
//! The format: `<data-dir>/member/wal/<seq:016x>-<index:016x>.wal`, read in sequence order. Each
//! file is a run of frames: an 8-byte little-endian length field (the low 56 bits are the
//! record's size; when the top bit is set, the low 3 bits of the top byte are the padding that
//! aligns the frame to 8 bytes), then a `walpb.Record{type=1, crc=2, data=3}`. A zero length is
//! the preallocated rest of the file. Every record but a CRC record carries the CRC-32C
//! (Castagnoli) of all record data so far, rolling across files; a CRC record carries the value
//! the previous file ended with and restarts the rolling sum from it.

use std::io::Read;

use crc::{Crc, CRC_32_ISCSI};
use prost::Message;

use crate::agent_job::position::DiskPosition;

const METADATA: i64 = 1;
const ENTRY: i64 = 2;
const STATE: i64 = 3;
const CRC: i64 = 4;
const SNAPSHOT: i64 = 5;

/// etcd's torn-write check works in disk sectors of this size.
const SECTOR: u64 = 512;
const FRAME: u64 = 8;

const CASTAGNOLI: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// `walpb.Record`.
#[derive(Clone, PartialEq, Message)]
struct Record {
    #[prost(int64, optional, tag = "1")]
    kind: Option<i64>,
    #[prost(uint32, optional, tag = "2")]
    crc: Option<u32>,
    #[prost(bytes = "vec", optional, tag = "3")]
    data: Option<Vec<u8>>,
}

/// `etcdserverpb.Metadata`.
#[derive(Clone, PartialEq, Message)]
struct Metadata {
    #[prost(uint64, optional, tag = "1")]
    node_id: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    cluster_id: Option<u64>,
}

/// `raftpb.Entry` (its type and data are not read).
#[derive(Clone, PartialEq, Message)]
struct Entry {
    #[prost(uint64, optional, tag = "2")]
    term: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    index: Option<u64>,
}

/// `raftpb.HardState` (its vote is not read).
#[derive(Clone, PartialEq, Message)]
struct HardState {
    #[prost(uint64, optional, tag = "1")]
    term: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    commit: Option<u64>,
}

/// `walpb.Snapshot`.
#[derive(Clone, PartialEq, Message)]
struct Snapshot {
    #[prost(uint64, optional, tag = "1")]
    index: Option<u64>,
    #[prost(uint64, optional, tag = "2")]
    term: Option<u64>,
}

/// A WAL that cannot be read: the file, the offset of the frame and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file} at offset {offset}: {what}")]
pub struct WalError {
    pub file: String,
    pub offset: u64,
    pub what: String,
}

/// A WAL that holds no position at all (no files, no metadata, no HardState).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoPosition(pub String);

/// One WAL file by its name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WalFile {
    pub seq: u64,
    pub index: u64,
    pub name: String,
}

/// The WAL files among a directory's entry names (others, like etcd's preallocated `N.tmp`, are
/// ignored), in sequence order. Their sequence numbers must follow each other, as etcd requires.
pub fn wal_files<I, S>(names: I) -> Result<Vec<WalFile>, NoPosition>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut files: Vec<WalFile> = names
        .into_iter()
        .map(Into::into)
        .filter_map(|name| {
            let stem = name.strip_suffix(".wal")?;
            let (seq, index) = stem.split_once('-')?;
            let seq = u64::from_str_radix(seq, 16).ok()?;
            let index = u64::from_str_radix(index, 16).ok()?;
            Some(WalFile { seq, index, name })
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(NoPosition(
            "no WAL file (<seq>-<index>.wal): this is not an etcd member's data directory, or \
             its member never started"
                .into(),
        ));
    }
    for pair in files.windows(2) {
        if pair[1].seq != pair[0].seq + 1 {
            return Err(NoPosition(format!(
                "WAL files {} and {} do not follow each other (a file in between is missing): \
                 the log cannot be read as a whole",
                pair[0].name, pair[1].name
            )));
        }
    }
    Ok(files)
}

/// Reads WAL files in order and keeps what the position needs.
#[derive(Debug, Default)]
pub struct WalReader {
    crc: u32,
    metadata: Option<Vec<u8>>,
    ids: Option<(u64, u64)>,
    state: Option<(u64, u64)>,
    last: Option<(u64, u64)>,
    files: Vec<String>,
    torn_tail: Option<String>,
}

/// How a frame's read ended short.
enum Short {
    /// Nothing at all: the end of the file.
    Nothing,
    /// Part of what was asked for.
    Partial,
}

/// Fill `buf` from `input`; `Err(Short)` when it ends first.
fn fill(input: &mut impl Read, buf: &mut [u8]) -> Result<Result<(), Short>, std::io::Error> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => {
                return Ok(Err(if got == 0 {
                    Short::Nothing
                } else {
                    Short::Partial
                }))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Ok(()))
}

/// etcd's `isTornEntry`: a frame whose bytes, cut at disk-sector boundaries, have a chunk of
/// only zeros was never completely written (`data` starts at `offset` in the file).
fn torn(data: &[u8], offset: u64) -> bool {
    let mut at = 0usize;
    let mut file_off = offset;
    while at < data.len() {
        let room = usize::try_from(SECTOR - file_off % SECTOR).unwrap_or(usize::MAX);
        let len = room.min(data.len() - at);
        if data[at..at + len].iter().all(|b| *b == 0) {
            return true;
        }
        at += len;
        file_off += len as u64;
    }
    false
}

/// The record and padding sizes of a frame's length field.
fn frame_size(field: u64) -> (u64, u64) {
    let record = field & !(0xffu64 << 56);
    let padding = if field >> 63 == 1 {
        (field >> 56) & 0x7
    } else {
        0
    };
    (record, padding)
}

/// The CRC-32C of `data` continuing from `previous` (etcd's rolling `crc.New(prev, table)`).
pub fn crc_update(previous: u32, data: &[u8]) -> u32 {
    let mut digest = CASTAGNOLI.digest_with_initial((!previous).reverse_bits());
    digest.update(data);
    digest.finalize()
}

impl WalReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Read one file of `size` bytes. `newest`: it is the last file, whose torn tail (a frame
    /// cut short or partly zero, left by a crash mid-write) ends the log as etcd's repair on
    /// start would; in an older file the same is corruption.
    pub fn read_file(
        &mut self,
        name: &str,
        size: u64,
        mut input: impl Read,
        newest: bool,
    ) -> Result<(), WalError> {
        self.files.push(name.to_string());
        let mut offset = 0u64;
        let err = |offset: u64, what: String| WalError {
            file: name.to_string(),
            offset,
            what,
        };
        let io = |offset: u64, e: std::io::Error| err(offset, format!("reading failed: {e}"));
        loop {
            let mut len = [0u8; 8];
            match fill(&mut input, &mut len).map_err(|e| io(offset, e))? {
                Ok(()) => {}
                Err(Short::Nothing) => return Ok(()),
                Err(Short::Partial) => {
                    return self.tail(newest, offset, "the length field is cut short", &err)
                }
            }
            let field = u64::from_le_bytes(len);
            if field == 0 {
                // The preallocated rest of the file.
                return Ok(());
            }
            let (record, padding) = frame_size(field);
            let room = size.saturating_sub(offset + FRAME);
            if record.saturating_add(padding) > room {
                return self.tail(
                    newest,
                    offset,
                    &format!(
                        "a {record}-byte record does not fit in the {room} bytes left of the file"
                    ),
                    &err,
                );
            }
            let total = usize::try_from(record + padding)
                .map_err(|_| err(offset, format!("a {record}-byte record is too large")))?;
            let mut data = vec![0u8; total];
            match fill(&mut input, &mut data).map_err(|e| io(offset, e))? {
                Ok(()) => {}
                Err(_) => return self.tail(newest, offset, "the record is cut short", &err),
            }
            let is_torn = || newest && torn(&data, offset + FRAME);
            let body = &data[..data.len() - padding as usize];
            let rec = match Record::decode(body) {
                Ok(rec) => rec,
                Err(_) if is_torn() => {
                    return self.tail(newest, offset, "a partly written record", &err)
                }
                Err(e) => return Err(err(offset, format!("not a WAL record: {e}"))),
            };
            let kind = rec.kind.unwrap_or_default();
            let carried = rec.crc.unwrap_or_default();
            let payload = rec.data.unwrap_or_default();
            if kind == CRC {
                if self.crc != 0 && carried != self.crc {
                    return Err(err(
                        offset,
                        format!(
                            "CRC record carries {carried:#010x}, but the log before it sums to \
                             {:#010x}: the files do not belong together",
                            self.crc
                        ),
                    ));
                }
                self.crc = carried;
            } else {
                let sum = crc_update(self.crc, &payload);
                if carried != sum {
                    if is_torn() {
                        return self.tail(newest, offset, "a partly written record", &err);
                    }
                    return Err(err(
                        offset,
                        format!(
                            "CRC mismatch (record says {carried:#010x}, its data sums to \
                             {sum:#010x}): the log is corrupt here"
                        ),
                    ));
                }
                self.crc = sum;
                self.apply(kind, &payload)
                    .map_err(|what| err(offset, what))?;
            }
            offset += FRAME + record + padding;
        }
    }

    /// A frame cut short: the end of the readable log in the newest file, corruption elsewhere.
    fn tail(
        &mut self,
        newest: bool,
        offset: u64,
        what: &str,
        err: &dyn Fn(u64, String) -> WalError,
    ) -> Result<(), WalError> {
        if newest {
            let file = self.files.last().cloned().unwrap_or_default();
            self.torn_tail = Some(format!(
                "{file} at offset {offset}: {what} (a torn write etcd cuts off when it starts); \
                 the position is the last complete record's"
            ));
            Ok(())
        } else {
            Err(err(
                offset,
                format!("{what} in a file that is not the newest: the log is corrupt here"),
            ))
        }
    }

    /// Take a verified record's content.
    fn apply(&mut self, kind: i64, data: &[u8]) -> Result<(), String> {
        match kind {
            METADATA => {
                if let Some(seen) = &self.metadata {
                    if seen != data {
                        return Err("the metadata (member and cluster ID) differs from an \
                                    earlier file's: the files are not one member's"
                            .into());
                    }
                }
                let m = Metadata::decode(data).map_err(|e| format!("bad metadata: {e}"))?;
                self.ids = Some((
                    m.node_id.unwrap_or_default(),
                    m.cluster_id.unwrap_or_default(),
                ));
                self.metadata = Some(data.to_vec());
            }
            ENTRY => {
                let e = Entry::decode(data).map_err(|e| format!("bad entry: {e}"))?;
                self.last = Some((e.term.unwrap_or_default(), e.index.unwrap_or_default()));
            }
            STATE => {
                let s = HardState::decode(data).map_err(|e| format!("bad HardState: {e}"))?;
                self.state = Some((s.term.unwrap_or_default(), s.commit.unwrap_or_default()));
            }
            SNAPSHOT => {
                let s = Snapshot::decode(data).map_err(|e| format!("bad snapshot record: {e}"))?;
                let (index, term) = (s.index.unwrap_or_default(), s.term.unwrap_or_default());
                // The log before a snapshot is in the snapshot: the last entry is at least it.
                if self.last.is_none_or(|(_, i)| i < index) {
                    self.last = Some((term, index));
                }
            }
            other => return Err(format!("unknown record type {other}")),
        }
        Ok(())
    }

    /// The position the files read hold.
    pub fn position(self) -> Result<DiskPosition, NoPosition> {
        let files = self.files.join(", ");
        let Some((member_id, cluster_id)) = self.ids else {
            return Err(NoPosition(format!(
                "the WAL ({files}) holds no metadata record: it is not a member's log"
            )));
        };
        let Some((term, commit)) = self.state else {
            return Err(NoPosition(format!(
                "the WAL ({files}) holds no HardState: the member never took part in an \
                 election or a commit, it holds no data to recover from"
            )));
        };
        let (last_term, last_index) = self.last.unwrap_or_default();
        Ok(DiskPosition {
            member_id,
            cluster_id,
            term,
            commit,
            last_term,
            last_index,
            files: self.files,
            torn_tail: self.torn_tail,
        })
    }
}

#[cfg(test)]
mod tests;
