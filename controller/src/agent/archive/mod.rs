//! `snapshot-agent archive`: the continuous archive's writer (docs/point-in-time-recovery.md).
//! Watches the whole keyspace from the revision after the newest archived one (or
//! `--from-revision` for an empty archive) and writes every event to S3 as segments
//! ([`crate::archive`]), flushed every `--flush-interval` and whenever `--segment-max-bytes`
//! are buffered. Every `--hash-interval` it records the cluster's `HashKV` at the newest
//! archived revision, what a replay is later proven against.
//!
//! Resuming is what makes the archive continuous: a segment is one PUT (there or not), the
//! archiver restarts from the newest stored segment, and it flushes only whole watch responses,
//! which hold whole revisions (etcd never splits a revision across watch responses unless
//! fragmenting is asked for). So after any restart, SIGKILL included, there is no gap and no
//! revision archived twice. A watch cut off by a compaction (the archiver fell behind what the
//! cluster keeps) is a gap the archiver cannot fill: it stops with a permanent failure naming
//! both revisions, so that a new base snapshot starts a new window.
//!
//! Runs until SIGTERM (flushes, exit 0) or a permanent failure (exit 2). A transient failure
//! (etcd or the object store away) is retried: the buffer is kept and the watch resumes after
//! the newest buffered revision.

pub mod store;

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::MissedTickBehavior;

use super::dial::{self, EtcdTls};
use crate::archive::{self, Kind, Record, RecordedHash, Window};
use crate::objectstore::{Failure, S3Args};
use store::Store;

/// Buffered bytes past which the archiver stops reading the watch until a flush succeeds:
/// memory stays bounded while the object store is away.
const BACKLOG_FACTOR: usize = 4;
const RETRY: Duration = Duration::from_secs(1);

#[derive(clap::Args, Debug, Clone)]
pub struct ArchiveArgs {
    /// etcd client URLs, comma-separated (https:// with TLS).
    #[arg(long, value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    #[command(flatten)]
    pub tls: EtcdTls,
    /// The archive: `--s3-bucket`, and `--s3-key` as its key prefix.
    #[command(flatten)]
    pub s3: S3Args,
    /// Where an empty archive starts: the revision after its base snapshot's.
    #[arg(long, default_value_t = 1)]
    pub from_revision: i64,
    /// How often buffered events are written as a segment (the archive's RPO).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub flush_interval: Duration,
    /// A segment is written as soon as this much is buffered.
    #[arg(long, default_value_t = 4 << 20)]
    pub segment_max_bytes: usize,
    /// How often the cluster's HashKV at the newest archived revision is recorded.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub hash_interval: Duration,
    /// What a watch cut off by a compaction does: `stop` (exit 2 naming the lost revisions) or
    /// `continue` from the oldest revision the cluster still has, leaving the lost ones as a
    /// gap between two segments (what the operator's archiver does: it reports the gap).
    #[arg(long, value_enum, default_value_t = OnCompaction::Stop)]
    pub on_compaction: OnCompaction,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
}

/// `--on-compaction`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCompaction {
    Stop,
    Continue,
}

/// What the archiver holds between flushes.
struct Archiver {
    store: Store,
    max_bytes: usize,
    /// Events of whole revisions not yet stored, in order.
    buffer: Vec<Record>,
    buffered_bytes: usize,
    /// The next revision to take from the watch.
    next: i64,
    /// The newest stored revision.
    stored: Option<i64>,
    /// The newest revision whose hash was recorded.
    hashed: Option<i64>,
    /// The cluster's revision as the last watch response said.
    cluster: i64,
}

pub async fn run(args: ArchiveArgs) -> Result<String, Failure> {
    if args.from_revision < 1 {
        return Err(Failure::permanent(format!(
            "--from-revision {} is not a revision: pass the revision after the base snapshot's (1 for a whole history)",
            args.from_revision
        )));
    }
    if args.flush_interval.is_zero() || args.hash_interval.is_zero() {
        return Err(Failure::permanent(
            "--flush-interval and --hash-interval must be longer than 0s",
        ));
    }
    let store = Store::from_args(&args.s3).await?;
    let window = Window::of(&store.segments().await?);
    if !window.gaps.is_empty() || !window.overlaps.is_empty() {
        tracing::warn!(gaps = ?window.gaps, overlaps = ?window.overlaps, "the archive is not continuous; archiving on after its newest segment");
    }
    let mut archiver = Archiver {
        store,
        max_bytes: args.segment_max_bytes.max(1),
        buffer: Vec::new(),
        buffered_bytes: 0,
        next: window.resume_from(args.from_revision),
        stored: window.last,
        hashed: None,
        cluster: 0,
    };
    tracing::info!(from = archiver.next, newest_stored = ?window.last, "archiving");
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| Failure::transient(format!("installing the SIGTERM handler: {e}")))?;
    let mut flush = tokio::time::interval(args.flush_interval);
    flush.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut hash = tokio::time::interval(args.hash_interval);
    hash.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let mut client = match dial::connect(&args.endpoints, &args.tls).await {
            Ok(c) => c,
            Err(e) if !e.permanent => {
                tracing::warn!("{}; trying again", e.message);
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let options = WatchOptions::new()
            .with_all_keys()
            .with_start_revision(archiver.next)
            .with_progress_notify();
        let mut watch = match client.watch("", Some(options)).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "starting the watch; trying again");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        loop {
            tokio::select! {
                _ = term.recv() => {
                    archiver.flush().await?;
                    return Ok(format!(
                        "archived up to revision {} (SIGTERM)",
                        archiver.stored.map_or("none".into(), |r| r.to_string())
                    ));
                }
                _ = flush.tick() => {
                    if let Err(e) = archiver.flush().await {
                        if e.permanent {
                            return Err(e);
                        }
                        tracing::warn!("{}; keeping the events and trying again", e.message);
                    }
                }
                _ = hash.tick() => archiver.record_hash(&client).await,
                message = watch.message() => match message {
                    Ok(Some(response)) => {
                        if response.canceled() {
                            if response.compact_revision() > 0 && args.on_compaction == OnCompaction::Continue {
                                archiver.flush().await?;
                                if archiver.stored.is_some() {
                                    tracing::warn!(
                                        lost_from = archiver.next,
                                        lost_to = response.compact_revision() - 1,
                                        "the watch was cut off by a compaction: the archive has a gap; archiving on from the oldest revision the cluster has"
                                    );
                                } else {
                                    tracing::info!(
                                        from = response.compact_revision(),
                                        "the cluster's history starts after a compaction: an empty archive starts there"
                                    );
                                }
                                archiver.next = archiver.next.max(response.compact_revision());
                                break;
                            }
                            if response.compact_revision() > 0 {
                                archiver.flush().await?;
                                return Err(Failure::permanent(format!(
                                    "the archive's watch from revision {} was cut off: etcd has compacted up to revision {}, \
                                     so revisions {}..{} are lost to the archive (a gap); start a new window from a fresh \
                                     base snapshot (--from-revision after its revision)",
                                    archiver.next,
                                    response.compact_revision(),
                                    archiver.next,
                                    response.compact_revision()
                                )));
                            }
                            tracing::warn!(reason = response.cancel_reason(), "the watch was canceled; watching again");
                            break;
                        }
                        if let Some(h) = response.header() {
                            archiver.cluster = archiver.cluster.max(h.revision());
                        }
                        archiver.take(response.events());
                        if archiver.buffered_bytes >= archiver.max_bytes {
                            archiver.flush_backlogged(&mut term).await?;
                        }
                    }
                    Ok(None) => {
                        tracing::warn!("the watch stream ended; watching again");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the watch broke; watching again");
                        tokio::time::sleep(RETRY).await;
                        break;
                    }
                },
            }
        }
    }
}

/// A watch event as the archive keeps it (`None` for an event without its key-value).
pub fn record_of(event: &etcd_client::Event) -> Option<Record> {
    let kv = event.kv()?;
    Some(Record {
        kind: match event.event_type() {
            EventType::Put => Kind::Put,
            EventType::Delete => Kind::Delete,
        },
        key: kv.key().to_vec(),
        value: kv.value().to_vec(),
        mod_revision: kv.mod_revision(),
        create_revision: kv.create_revision(),
        version: kv.version(),
        lease: kv.lease(),
    })
}

impl Archiver {
    /// Buffer the events of one watch response (whole revisions). Anything before `next` was
    /// taken already (a watch resumed after a break sends from `next` anyway).
    fn take(&mut self, events: &[etcd_client::Event]) {
        for event in events {
            let Some(record) = record_of(event) else {
                continue;
            };
            if record.mod_revision < self.next {
                continue;
            }
            self.buffered_bytes += record.encoded_len();
            self.buffer.push(record);
        }
        if let Some(last) = self.buffer.last() {
            self.next = self.next.max(last.mod_revision + 1);
        }
    }

    /// Store the buffered events as one segment.
    async fn flush(&mut self) -> Result<(), Failure> {
        let Some((name, bytes)) = archive::encode(&self.buffer) else {
            return Ok(());
        };
        let size = bytes.len();
        self.store.put(name.key(&self.store.prefix), bytes).await?;
        tracing::info!(
            first = name.first,
            last = name.last,
            records = self.buffer.len(),
            bytes = size,
            behind = self.cluster.saturating_sub(name.last).max(0),
            "segment stored"
        );
        self.buffer.clear();
        self.buffered_bytes = 0;
        self.stored = Some(name.last);
        Ok(())
    }

    /// Flush a full buffer, retrying while the store is away, reading nothing meanwhile once
    /// the backlog is [`BACKLOG_FACTOR`] segments: etcd's watch then waits for us.
    async fn flush_backlogged(
        &mut self,
        term: &mut tokio::signal::unix::Signal,
    ) -> Result<(), Failure> {
        loop {
            match self.flush().await {
                Ok(()) => return Ok(()),
                Err(e) if e.permanent => return Err(e),
                Err(e) if self.buffered_bytes < self.max_bytes * BACKLOG_FACTOR => {
                    tracing::warn!("{}; reading on, trying again at the next flush", e.message);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!("{}; the backlog is full, waiting for the store", e.message);
                    tokio::select! {
                        _ = term.recv() => return Err(Failure::transient(format!(
                            "SIGTERM while the object store was away: {} buffered revisions not stored", self.buffer.len()
                        ))),
                        _ = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        }
    }

    /// Record the cluster's HashKV at the newest stored revision, if it moved since the last.
    async fn record_hash(&mut self, client: &Client) {
        let Some(revision) = self.stored.filter(|r| Some(*r) != self.hashed) else {
            return;
        };
        let answer = match client.maintenance_client().hash_kv(revision).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(revision, error = %e, "HashKV failed; recording the next one");
                return;
            }
        };
        let recorded = RecordedHash {
            revision,
            hash: answer.hash(),
            compact_revision: answer.compact_version(),
        };
        let body = match serde_json::to_vec(&recorded) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "serialising the hash");
                return;
            }
        };
        match self
            .store
            .put(RecordedHash::key(&self.store.prefix, revision), body)
            .await
        {
            Ok(()) => {
                tracing::info!(
                    revision,
                    hash = recorded.hash,
                    compact_revision = recorded.compact_revision,
                    "cluster hash recorded"
                );
                self.hashed = Some(revision);
            }
            Err(e) => tracing::warn!("{}; recording the next one", e.message),
        }
    }
}
