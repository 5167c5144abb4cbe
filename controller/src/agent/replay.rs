//! `snapshot-agent replay`: bring a scratch etcd, restored from an archive's base snapshot, to
//! a target revision by replaying the archive's segments (docs/point-in-time-recovery.md), and
//! prove the result against the cluster's own hashes.
//!
//! Each archived revision is applied as one transaction, in order, so the scratch etcd's
//! revision numbers, versions and create revisions come out as the cluster's were; a
//! transaction that does not land on the archived revision stops the replay (it would be a
//! different history). Leases: a key keeps its lease ID; a lease the scratch etcd does not know
//! (granted after the base snapshot) is granted again under its ID for [`GRANTED_TTL`] (the
//! archive never sees a lease's TTL), and every lease is kept alive while the replay runs, so
//! none expires into the replayed history. Afterwards every hash the archiver recorded inside
//! `(base, target]` is compared with the scratch etcd's `HashKV` at the same revision and
//! compact revision: all equal is the proof that the state is exact.
//!
//! The scratch etcd is the caller's: started from the base with `--max-txn-ops` and
//! `--max-request-bytes` at least the cluster's (one archived revision is one transaction).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{
    Client, LeaseGrantOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp,
};
use serde::Serialize;

use super::archive::store::Store;
use super::dial::{self, EtcdTls};
use crate::archive::{self, Kind, Record, RecordedHash, SegmentName, Window};
use crate::etcd::EtcdError;
use crate::objectstore::{Failure, S3Args};

/// The TTL of a lease granted again by the replay: an owner that still holds the lease keeps
/// it alive under the same ID after the recovery; an abandoned one expires an hour later.
pub const GRANTED_TTL: i64 = 3600;

#[derive(clap::Args, Debug, Clone)]
pub struct ReplayArgs {
    /// The scratch etcd restored from the base snapshot.
    #[arg(long, value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    #[command(flatten)]
    pub tls: EtcdTls,
    /// The archive: `--s3-bucket`, and `--s3-key` as its key prefix.
    #[command(flatten)]
    pub s3: S3Args,
    /// The revision to stop at; the archive's newest when absent.
    #[arg(long)]
    pub to_revision: Option<i64>,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
}

/// What a replay did, as the termination log says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replayed {
    /// The scratch etcd's revision before the replay (the base snapshot's).
    pub base_revision: i64,
    pub target_revision: i64,
    pub events: usize,
    pub leases_granted: usize,
    /// The recorded hashes the result was compared with, all equal.
    pub proven_at: Vec<i64>,
    /// Recorded hashes inside the range that could not be compared, and why.
    pub not_compared: Vec<String>,
}

pub async fn run(args: ReplayArgs) -> Result<Replayed, Failure> {
    let store = Store::from_args(&args.s3).await?;
    let client = dial::connect(&args.endpoints, &args.tls).await?;
    replay_to(&store, client, args.to_revision).await
}

/// Replay `store`'s archive into the scratch etcd `client` reaches, from its revision (the base
/// snapshot's) up to `to_revision` (the archive's newest when `None`), then prove the result.
pub async fn replay_to(
    store: &Store,
    mut client: Client,
    to_revision: Option<i64>,
) -> Result<Replayed, Failure> {
    let base = revision_of(&mut client).await?;
    let names = store.segments().await?;
    let newest = Window::of(&names).last.ok_or_else(|| {
        Failure::permanent(format!(
            "the archive s3://{}/{} holds no segment",
            store.bucket, store.prefix
        ))
    })?;
    let target = to_revision.unwrap_or(newest);
    if target < base {
        return Err(Failure::permanent(format!(
            "--to-revision {target} is before the scratch etcd's revision {base}: choose a base snapshot at or before it, \
             and restore it with `snapshot-agent restore --bump-revision=0` (a bumped restore does not keep the snapshot's revision)"
        )));
    }
    let chosen = archive::segments_for(&names, base, target).map_err(|missing| {
        Failure::permanent(format!(
            "revision {missing} is not in the archive (it holds up to {newest}, with the gaps its window shows): \
             choose a target inside the window, or a base snapshot after the gap"
        ))
    })?;
    let keeper = tokio::spawn(keep_leases_alive(client.clone()));
    let replayed = replay(store, &mut client, &chosen, base, target).await;
    keeper.abort();
    let (events, leases_granted) = replayed?;
    let (proven_at, not_compared) = prove(store, &mut client, base, target).await?;
    Ok(Replayed {
        base_revision: base,
        target_revision: target,
        events,
        leases_granted,
        proven_at,
        not_compared,
    })
}

async fn revision_of(client: &mut Client) -> Result<i64, Failure> {
    let status = client
        .status()
        .await
        .map_err(|e| Failure::transient(format!("asking the scratch etcd its status: {e}")))?;
    status
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| Failure::transient("the scratch etcd's status has no header"))
}

/// Apply the archived revisions `base+1..=target` of `segments`, each as one transaction.
async fn replay(
    store: &Store,
    client: &mut Client,
    segments: &[SegmentName],
    base: i64,
    target: i64,
) -> Result<(usize, usize), Failure> {
    let mut granted: HashSet<i64> = HashSet::new();
    let mut leases_granted = 0;
    let mut events = 0;
    // The newest revision applied: a segment that overlaps the one before it (two archivers
    // that ran at once) gives only its revisions after it.
    let mut applied = base;
    for name in segments {
        let key = name.key(&store.prefix);
        let bytes = store.get(key.clone()).await?;
        let records = archive::decode(*name, &bytes)
            .map_err(|e| Failure::permanent(format!("s3://{}/{key}: {e}", store.bucket)))?;
        let mut revisions: BTreeMap<i64, Vec<&Record>> = BTreeMap::new();
        for r in records
            .iter()
            .filter(|r| r.mod_revision > applied && r.mod_revision <= target)
        {
            revisions.entry(r.mod_revision).or_default().push(r);
        }
        for (revision, records) in revisions {
            for lease in records.iter().map(|r| r.lease).filter(|l| *l != 0) {
                if granted.insert(lease) && grant(client, lease).await? {
                    leases_granted += 1;
                }
            }
            let ops: Vec<TxnOp> = records
                .iter()
                .map(|r| match r.kind {
                    Kind::Put => TxnOp::put(
                        r.key.clone(),
                        r.value.clone(),
                        (r.lease != 0).then(|| PutOptions::new().with_lease(r.lease)),
                    ),
                    Kind::Delete => TxnOp::delete(r.key.clone(), None),
                })
                .collect();
            events += ops.len();
            let answer = client
                .txn(Txn::new().and_then(ops))
                .await
                .map_err(|e| {
                    Failure::permanent(format!(
                        "replaying revision {revision} into the scratch etcd: {e} (start it with --max-txn-ops and \
                         --max-request-bytes at least the cluster's)"
                    ))
                })?;
            let landed = answer.header().map_or(0, |h| h.revision());
            if landed != revision {
                return Err(Failure::permanent(format!(
                    "the replay of revision {revision} landed on revision {landed}: the scratch etcd's history is not \
                     the archive's (a base snapshot of another cluster, or a write to the scratch etcd)"
                )));
            }
            applied = revision;
        }
    }
    Ok((events, leases_granted))
}

/// Grant `lease` under its ID unless the scratch etcd has it (from the base). True if granted.
async fn grant(client: &mut Client, lease: i64) -> Result<bool, Failure> {
    match client
        .lease_grant(GRANTED_TTL, Some(LeaseGrantOptions::new().with_id(lease)))
        .await
    {
        Ok(_) => Ok(true),
        Err(source) => {
            let e = EtcdError::Call {
                op: "LeaseGrant",
                source,
            };
            if e.is_lease_exists() {
                Ok(false)
            } else {
                Err(Failure::transient(format!(
                    "granting lease {lease:x} in the scratch etcd: {e}"
                )))
            }
        }
    }
}

/// Keep every lease of the scratch etcd alive until aborted: a lease of the base snapshot that
/// expired mid-replay would delete its keys into the replayed history.
async fn keep_leases_alive(mut client: Client) {
    let mut kept: HashMap<i64, (LeaseKeeper, LeaseKeepAliveStream)> = HashMap::new();
    loop {
        if let Ok(list) = client.leases().await {
            for lease in list.leases() {
                if let std::collections::hash_map::Entry::Vacant(slot) = kept.entry(lease.id()) {
                    if let Ok(pair) = client.lease_keep_alive(lease.id()).await {
                        slot.insert(pair);
                    }
                }
            }
        }
        let mut lost = Vec::new();
        for (id, (keeper, stream)) in kept.iter_mut() {
            let alive = keeper.keep_alive().await.is_ok()
                && matches!(
                    tokio::time::timeout(Duration::from_secs(2), stream.message()).await,
                    Ok(Ok(Some(_)))
                );
            if !alive {
                lost.push(*id);
            }
        }
        for id in lost {
            kept.remove(&id);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Compare the scratch etcd's HashKV with every hash the archiver recorded in `(base, target]`,
/// compacting the scratch etcd to a recorded hash's compact revision first when it holds more
/// history. Any difference fails the replay.
async fn prove(
    store: &Store,
    client: &mut Client,
    base: i64,
    target: i64,
) -> Result<(Vec<i64>, Vec<String>), Failure> {
    let mut revisions: Vec<i64> = store
        .hash_revisions()
        .await?
        .into_iter()
        .filter(|r| *r > base && *r <= target)
        .collect();
    revisions.sort_unstable();
    let mut recorded = Vec::new();
    for revision in revisions {
        let bytes = store
            .get(RecordedHash::key(&store.prefix, revision))
            .await?;
        match serde_json::from_slice::<RecordedHash>(&bytes) {
            Ok(h) => recorded.push(h),
            Err(e) => {
                tracing::warn!(revision, error = %e, "unreadable recorded hash; not compared")
            }
        }
    }
    // Compaction only goes forward: compare in order of compact revision.
    recorded.sort_by_key(|h| (h.compact_revision, h.revision));
    let (mut proven, mut not_compared) = (Vec::new(), Vec::new());
    for h in recorded {
        let ours = hash_at(client, h.revision).await?;
        let ours = if ours.compact_revision < h.compact_revision {
            client
                .compact(h.compact_revision, None)
                .await
                .map_err(|e| {
                    Failure::transient(format!(
                        "compacting the scratch etcd to {}: {e}",
                        h.compact_revision
                    ))
                })?;
            hash_at(client, h.revision).await?
        } else {
            ours
        };
        if ours.compact_revision != h.compact_revision {
            not_compared.push(format!(
                "revision {}: the cluster hashed from compact revision {}, the base snapshot starts at {}",
                h.revision, h.compact_revision, ours.compact_revision
            ));
            continue;
        }
        if ours.hash != h.hash {
            return Err(Failure::permanent(format!(
                "the replayed state differs from the cluster's at revision {}: HashKV {} here, {} recorded by the \
                 archiver (compact revision {}); the archive or the base snapshot does not hold the cluster's history",
                h.revision, ours.hash, h.hash, h.compact_revision
            )));
        }
        proven.push(h.revision);
    }
    proven.sort_unstable();
    Ok((proven, not_compared))
}

async fn hash_at(client: &mut Client, revision: i64) -> Result<RecordedHash, Failure> {
    let answer = client
        .maintenance_client()
        .hash_kv(revision)
        .await
        .map_err(|e| {
            Failure::transient(format!("HashKV at {revision} on the scratch etcd: {e}"))
        })?;
    Ok(RecordedHash {
        revision,
        hash: answer.hash(),
        compact_revision: answer.compact_version(),
    })
}
