//! `snapshot-agent point-in-time`: a snapshot of the cluster as it was at a chosen revision (or
//! at the archive's newest), built off to the side from a base snapshot and the continuous
//! archive (docs/point-in-time-recovery.md), without touching the cluster. Runs in the etcd
//! image (the cluster's own `etcd` and `etcdutl`), with scratch space for the base and the
//! scratch etcd's data:
//!
//! 1. download the base snapshot and check its sha256;
//! 2. restore it into scratch space with its own revision (no bump: the replay continues its
//!    history) and start an etcd there, on loopback;
//! 3. replay the archive into it up to the target and prove the result against the hashes the
//!    archiver recorded ([`super::replay`]);
//! 4. stream a snapshot of it to S3 as any snapshot save does (sha256, the scratch's `HashKV`
//!    at the target), and stop the scratch etcd.
//!
//! The result restores like any snapshot: in place by an EtcdRecovery, or as a new cluster's
//! bootstrap (a clone of the cluster at that revision).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::archive::store::Store;
use super::dial::{self, EtcdTls};
use super::replay::{self, Replayed};
use super::save::{self, SaveArgs};
use super::scratch::{free_port, restore, Scratch};
use super::verify::expected_sha256;
use super::Artifact;
use crate::objectstore::{Failure, Location, S3Args, S3};

/// How long the scratch etcd gets to answer after it starts.
const SCRATCH_DEADLINE: Duration = Duration::from_secs(90);

#[derive(clap::Args, Debug, Clone)]
pub struct PointInTimeArgs {
    /// The archive: `--s3-bucket`, and `--s3-key` as its key prefix; the base snapshot and the
    /// result are in the same bucket.
    #[command(flatten)]
    pub s3: S3Args,
    /// The base snapshot's exact key: a snapshot at or before the target revision, of the
    /// cluster the archive is of (the archive's window starts at one).
    #[arg(long)]
    pub base_key: String,
    /// The base snapshot's sha256 (`sha256:<hex>` or hex), e.g. its EtcdSnapshot's
    /// status.artifact.checksum.
    #[arg(long)]
    pub base_sha256: String,
    /// The revision to build; the archive's newest when absent.
    #[arg(long)]
    pub to_revision: Option<i64>,
    /// The result's key prefix (like a snapshot destination's key); the object is
    /// `<prefix><output-name>.db`.
    #[arg(long, default_value = "")]
    pub output_prefix: String,
    /// The result's name: the stored file is `<name>.db`.
    #[arg(long)]
    pub output_name: String,
    /// Stamped on the result (the overwrite guard): a rerun with the same UID replaces its own
    /// object, any other object of that key is never overwritten.
    #[arg(long)]
    pub output_uid: String,
    /// The etcdutl of the cluster's etcd version.
    #[arg(long)]
    pub etcdutl: PathBuf,
    /// The etcd of the cluster's etcd version (the scratch etcd).
    #[arg(long)]
    pub etcd: PathBuf,
    /// Scratch space (an emptyDir): the base snapshot and the scratch etcd's data.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The scratch etcd's `--max-txn-ops`: at least the cluster's (one archived revision is one
    /// transaction).
    #[arg(long, default_value_t = 100_000)]
    pub max_txn_ops: u32,
    /// The scratch etcd's `--max-request-bytes`: at least the cluster's.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub max_request_bytes: u64,
    /// The scratch etcd's `--quota-backend-bytes`: at least the cluster's.
    #[arg(long, default_value_t = 8 * 1024 * 1024 * 1024)]
    pub quota_backend_bytes: u64,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
}

/// What the build made, as the termination log says it (`{"pointInTime":{...}}`): compact, as a
/// termination message holds at most 4 KiB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PointInTime {
    /// The base snapshot's URI.
    pub base: String,
    /// The revision the base holds.
    pub base_revision: i64,
    /// The revision built: the state stored is the cluster's at this revision.
    pub target_revision: i64,
    /// Events replayed, and leases granted again (see [`super::replay`]).
    pub events: usize,
    pub leases_granted: usize,
    /// How many of the hashes the archiver recorded in `(base, target]` the result matched, and
    /// the newest of them.
    pub hashes_proven: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proven_at_revision: Option<i64>,
    /// Recorded hashes that could not be compared (the cluster compacted before the base).
    pub not_compared: usize,
    /// The stored result.
    pub artifact: Artifact,
}

impl PointInTime {
    fn of(base: String, replayed: Replayed, artifact: Artifact) -> Self {
        PointInTime {
            base,
            base_revision: replayed.base_revision,
            target_revision: replayed.target_revision,
            events: replayed.events,
            leases_granted: replayed.leases_granted,
            hashes_proven: replayed.proven_at.len(),
            proven_at_revision: replayed.proven_at.iter().copied().max(),
            not_compared: replayed.not_compared.len(),
            artifact,
        }
    }
}

pub async fn run(args: PointInTimeArgs) -> Result<PointInTime, Failure> {
    let want_sha = expected_sha256(&args.base_sha256)?;
    if args.base_key.trim().is_empty() {
        return Err(Failure::permanent(
            "--base-key is empty: pass the exact key of the base snapshot (a snapshot at or before the target)",
        ));
    }
    let store = Store::from_args(&args.s3).await?;
    std::fs::create_dir_all(&args.work_dir)
        .map_err(|e| Failure::transient(format!("creating {}: {e}", args.work_dir.display())))?;

    // 1. The base, byte for byte the one its save recorded.
    let base = Location {
        bucket: store.bucket.clone(),
        key: args.base_key.trim().to_string(),
    };
    let db = args.work_dir.join("base.db");
    let got = S3::new(&args.s3).await?.download(&base, &db).await?;
    if got.sha256 != want_sha {
        return Err(Failure::permanent(format!(
            "the base snapshot {} has sha256 {}, not {want_sha} as --base-sha256 says: it is not the snapshot \
             its save wrote; choose another base",
            base.uri(),
            got.sha256
        )));
    }

    // 2. Restored with its own revision, and an etcd on it.
    let data = args.work_dir.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data)
            .map_err(|e| Failure::transient(format!("removing {}: {e}", data.display())))?;
    }
    let peer = format!("http://127.0.0.1:{}", free_port()?);
    restore(&args.etcdutl, &db, &data, &peer)
        .await
        .map_err(|m| Failure::permanent(format!("restoring the base {}: {m}", base.uri())))?;
    let extra = [
        format!("--max-txn-ops={}", args.max_txn_ops),
        format!("--max-request-bytes={}", args.max_request_bytes),
        format!("--quota-backend-bytes={}", args.quota_backend_bytes),
    ];
    let mut scratch = Scratch::start(&args.etcd, &data, &peer, &extra)?;
    let built = build(&args, &store, &mut scratch).await;
    scratch.stop().await;
    let (replayed, artifact) = built?;
    Ok(PointInTime::of(base.uri(), replayed, artifact))
}

/// Steps 3 and 4, on the running scratch etcd.
async fn build(
    args: &PointInTimeArgs,
    store: &Store,
    scratch: &mut Scratch,
) -> Result<(Replayed, Artifact), Failure> {
    let client = ready(scratch).await?;
    let replayed = replay::replay_to(store, client, args.to_revision).await?;
    tracing::info!(
        base = replayed.base_revision,
        target = replayed.target_revision,
        proven = ?replayed.proven_at,
        "replayed; saving the result"
    );
    let artifact = save::run(SaveArgs {
        endpoints: vec![scratch.client_url.clone()],
        snapshot_name: args.output_name.clone(),
        snapshot_uid: args.output_uid.clone(),
        tls: EtcdTls::default(),
        s3: S3Args {
            s3_key: Some(args.output_prefix.clone()),
            ..args.s3.clone()
        },
        pvc_claim: None,
        pvc_mount: None,
        pvc_sub_path: None,
        termination_log: args.work_dir.join("save.log"),
    })
    .await?;
    Ok((replayed, artifact))
}

/// A client of the scratch etcd once it answers.
async fn ready(scratch: &mut Scratch) -> Result<etcd_client::Client, Failure> {
    let deadline = tokio::time::Instant::now() + SCRATCH_DEADLINE;
    let mut last = String::new();
    loop {
        if let Some(status) = scratch.exited() {
            return Err(Failure::permanent(format!(
                "the scratch etcd on the restored base exited ({status}) before answering"
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Failure::transient(format!(
                "the scratch etcd on the restored base did not answer within {}s: {last}",
                SCRATCH_DEADLINE.as_secs()
            )));
        }
        match dial::connect(
            std::slice::from_ref(&scratch.client_url),
            &EtcdTls::default(),
        )
        .await
        {
            Ok(mut client) => match client.status().await {
                Ok(_) => return Ok(client),
                Err(e) => last = e.to_string(),
            },
            Err(f) => last = f.message,
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
