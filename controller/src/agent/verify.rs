//! `snapshot-agent verify`: the verification Job of a Complete EtcdSnapshot (docs/snapshots.md,
//! "Verification"). Reads the stored object back (S3 or the PVC file), checks its size and
//! sha256 against what the save recorded, restores it into scratch space with the cluster's own
//! `etcdutl snapshot restore` (which also checks etcd's own trailing hash), and compares the
//! restored store's `hashkv` at the recorded revision with what the live member reported for
//! that revision when the save began.
//!
//! Also owns the save's side of it ([`record`], [`confirm`]): the member's `HashKV` taken just
//! before the snapshot stream, so the revision hashed is one the snapshot holds.
//!
//! The outcome goes to the termination log: `{"verified":{...}}` (exit 0), `{"unverified":
//! {"reason":..,"message":..}}` when the snapshot is shown bad (exit 2: no retry changes a
//! stored object), or `{"error":..}` when it could not be checked (the usual exit codes).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use serde::{Deserialize, Serialize};

use super::scratch::{free_port, restore, tail, Scratch};
use crate::objectstore::{Failure, Location, S3Args, Uploaded, S3};

/// How long the scratch etcd (etcd 3.5, whose etcdutl has no `hashkv`) gets to answer.
const SCRATCH_ETCD_DEADLINE: Duration = Duration::from_secs(90);

#[derive(clap::Args, Debug, Clone)]
pub struct VerifyArgs {
    /// The sha256 the save recorded (`sha256:<hex>` or hex): status.artifact.checksum.
    #[arg(long)]
    pub expected_sha256: String,
    /// The size in bytes the save recorded: status.artifact.sizeBytes.
    #[arg(long)]
    pub expected_size: u64,
    /// The revision of the recorded hashkv (status.hashKV.revision); with --hashkv and
    /// --hashkv-compact-revision. Without it only the sha256 and the restore are checked.
    #[arg(long, requires_all = ["hashkv", "hashkv_compact_revision"])]
    pub hashkv_revision: Option<i64>,
    #[arg(long, requires = "hashkv_revision")]
    pub hashkv: Option<u32>,
    #[arg(long, requires = "hashkv_revision")]
    pub hashkv_compact_revision: Option<i64>,
    /// The etcdutl of the cluster's etcd version.
    #[arg(long)]
    pub etcdutl: PathBuf,
    /// The etcd of the cluster's version (used when its etcdutl has no `hashkv`, as in 3.5).
    #[arg(long)]
    pub etcd: PathBuf,
    /// Scratch space (an emptyDir): the download and the restored data dir.
    #[arg(long)]
    pub work_dir: PathBuf,
    #[command(flatten)]
    pub s3: S3Args,
    /// PVC source: the snapshot's `.db` file (read where it is).
    #[arg(long)]
    pub pvc_file: Option<PathBuf>,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
}

/// A member's `HashKV` answer: what the save records and what the scratch restore gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HashKv {
    pub revision: i64,
    pub hash: u32,
    pub compact_revision: i64,
}

/// A verified snapshot: the revision and hash the restored copy matched (`compared: false`
/// when the save recorded no hashkv: then they are the restored copy's own, unchecked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verified {
    pub revision: i64,
    pub hash: u32,
    pub compared: bool,
}

/// A snapshot shown bad: the `Verified=False` reason and what differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unverified {
    pub reason: &'static str,
    pub message: String,
}

/// Why a verification did not end in [`Verified`].
#[derive(Debug)]
pub enum Problem {
    /// The snapshot is bad.
    Bad(Unverified),
    /// It could not be checked.
    Failed(Failure),
}

impl From<Failure> for Problem {
    fn from(f: Failure) -> Self {
        Problem::Failed(f)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Report<'a> {
    Verified(&'a Verified),
    Unverified(&'a Unverified),
    Error(&'a str),
}

/// Run the verification, write the termination log, return the exit code.
pub async fn main(args: VerifyArgs) -> i32 {
    let result = run(&args).await;
    let (report, code) = match &result {
        Ok(v) => (Report::Verified(v), 0),
        Err(Problem::Bad(u)) => {
            tracing::error!(reason = u.reason, "{}", u.message);
            (Report::Unverified(u), 2)
        }
        Err(Problem::Failed(f)) => {
            tracing::error!(permanent = f.permanent, "{}", f.message);
            (Report::Error(&f.message), i32::from(f.exit_code()))
        }
    };
    let text = serde_json::to_string(&report)
        .unwrap_or_else(|e| format!(r#"{{"error":"serialising the outcome: {e}"}}"#));
    println!("{text}");
    if let Err(e) = std::fs::write(&args.termination_log, &text) {
        tracing::warn!(path = %args.termination_log.display(), error = %e, "cannot write the termination log");
    }
    code
}

async fn run(args: &VerifyArgs) -> Result<Verified, Problem> {
    let want_sha = expected_sha256(&args.expected_sha256)?;
    let recorded = match (
        args.hashkv_revision,
        args.hashkv,
        args.hashkv_compact_revision,
    ) {
        (Some(revision), Some(hash), Some(compact_revision)) => Some(HashKv {
            revision,
            hash,
            compact_revision,
        }),
        _ => None,
    };
    std::fs::create_dir_all(&args.work_dir)
        .map_err(|e| Failure::transient(format!("creating {}: {e}", args.work_dir.display())))?;
    let (uri, db, got) = fetch(args).await?;
    check_stored(&uri, &got, &want_sha, args.expected_size).map_err(Problem::Bad)?;
    tracing::info!(uri, sha256 = %got.sha256, "the stored object is the one the save recorded");

    let data = args.work_dir.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data)
            .map_err(|e| Failure::transient(format!("removing {}: {e}", data.display())))?;
    }
    let peer = format!("http://127.0.0.1:{}", free_port()?);
    restore(&args.etcdutl, &db, &data, &peer)
        .await
        .map_err(|message| {
            Problem::Bad(Unverified {
                reason: api::conditions::reason::SNAPSHOT_RESTORE_FAILED,
                message: format!("{uri}: {message}"),
            })
        })?;
    let revision = recorded.map_or(0, |r| r.revision);
    let restored = if etcdutl_has_hashkv(&args.etcdutl).await {
        tracing::info!(revision, "hashing the restored copy with etcdutl hashkv");
        hashkv_by_etcdutl(&args.etcdutl, &data.join("member/snap/db"), revision).await
    } else {
        tracing::info!(
            revision,
            "this etcdutl has no hashkv (etcd 3.5): running etcd on the restored copy"
        );
        hashkv_by_etcd(&args.etcd, &data, &peer, revision).await
    };
    let restored = restored.map_err(|e| match e {
        HashError::Compared(message) => Problem::Failed(Failure::permanent(format!(
            "{uri}: {message}; its content could not be compared with the cluster's hashkv"
        ))),
        HashError::Other(f) => Problem::Failed(f),
    })?;
    compare(&uri, recorded.as_ref(), &restored).map_err(|u| match u {
        Compare::Bad(u) => Problem::Bad(u),
        Compare::NotComparable(m) => Problem::Failed(Failure::permanent(m)),
    })
}

/// Download the S3 object into the scratch space, or hash the PVC file where it is.
async fn fetch(args: &VerifyArgs) -> Result<(String, PathBuf, Uploaded), Failure> {
    match (&args.s3.s3_bucket, &args.pvc_file) {
        (Some(bucket), None) => {
            let key = args.s3.s3_key.clone().unwrap_or_default();
            if key.is_empty() || bucket.is_empty() {
                return Err(Failure::permanent(
                    "verifying an S3 snapshot needs --s3-bucket and --s3-key (the exact key of status.artifact.uri)",
                ));
            }
            let at = Location {
                bucket: bucket.clone(),
                key,
            };
            let db = args.work_dir.join("snapshot.db");
            let got = S3::new(&args.s3).await?.download(&at, &db).await?;
            Ok((at.uri(), db, got))
        }
        (None, Some(file)) => {
            let got = super::restore::hash_file(file).await?;
            Ok((format!("file://{}", file.display()), file.clone(), got))
        }
        _ => Err(Failure::permanent(
            "pass exactly one source: --s3-bucket with --s3-key, or --pvc-file",
        )),
    }
}

/// The hex of a `sha256:<hex>` or `<hex>` checksum given on the command line.
pub(super) fn expected_sha256(text: &str) -> Result<String, Failure> {
    let hex = text
        .trim()
        .strip_prefix("sha256:")
        .unwrap_or(text.trim())
        .to_ascii_lowercase();
    if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(hex)
    } else {
        Err(Failure::permanent(format!(
            "--expected-sha256 {text:?} is not a sha256 (64 hex digits, optionally prefixed sha256:)"
        )))
    }
}

/// The stored object must be byte for byte the one the save reported.
pub fn check_stored(
    uri: &str,
    got: &Uploaded,
    want_sha: &str,
    want_size: u64,
) -> Result<(), Unverified> {
    if got.sha256 == want_sha && got.size == want_size {
        return Ok(());
    }
    Err(Unverified {
        reason: api::conditions::reason::CHECKSUM_MISMATCH,
        message: format!(
            "{uri} now has sha256:{} ({} bytes), but the save recorded sha256:{want_sha} ({want_size} \
             bytes): the stored object was corrupted or replaced after the save; take a new snapshot",
            got.sha256, got.size
        ),
    })
}

/// Why the hashes were not compared.
#[derive(Debug, PartialEq, Eq)]
pub enum Compare {
    Bad(Unverified),
    /// The two hashes are of different things (another compaction): nothing is known.
    NotComparable(String),
}

/// The restored copy's hashkv against the recorded one.
pub fn compare(
    uri: &str,
    recorded: Option<&HashKv>,
    restored: &HashKv,
) -> Result<Verified, Compare> {
    let Some(recorded) = recorded else {
        return Ok(Verified {
            revision: restored.revision,
            hash: restored.hash,
            compared: false,
        });
    };
    if restored.compact_revision != recorded.compact_revision {
        // etcd's hashkv covers the history after the compaction revision: hashes at two
        // compactions differ on the same data. The cluster compacted between the agent's
        // HashKV and the snapshot.
        return Err(Compare::NotComparable(format!(
            "{uri}: the restored snapshot is compacted at revision {}, the hashkv recorded at save \
             time at {}: the cluster compacted during the save, so the hashes cannot be compared",
            restored.compact_revision, recorded.compact_revision
        )));
    }
    if restored.hash != recorded.hash {
        return Err(Compare::Bad(Unverified {
            reason: api::conditions::reason::HASH_KV_MISMATCH,
            message: format!(
                "{uri}: hashkv at revision {} is {} in the restored snapshot, but the cluster \
                 reported {} at save time (compact revision {}): the snapshot does not hold the \
                 data the cluster had; take a new snapshot",
                recorded.revision, restored.hash, recorded.hash, recorded.compact_revision
            ),
        }));
    }
    Ok(Verified {
        revision: recorded.revision,
        hash: recorded.hash,
        compared: true,
    })
}

enum HashError {
    /// The restored store cannot give a hash at that revision (it ends before it, or it is
    /// compacted past it).
    Compared(String),
    Other(Failure),
}

/// etcdutl 3.6 has `hashkv`; 3.5's does not.
async fn etcdutl_has_hashkv(etcdutl: &Path) -> bool {
    tokio::process::Command::new(etcdutl)
        .args(["hashkv", "--help"])
        .stdin(Stdio::null())
        .output()
        .await
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("hashkv"))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EtcdutlHashKv {
    hash: u32,
    hash_revision: i64,
    compact_revision: i64,
}

/// `etcdutl hashkv <db> --rev <revision> -w json` (etcd 3.6).
async fn hashkv_by_etcdutl(etcdutl: &Path, db: &Path, revision: i64) -> Result<HashKv, HashError> {
    let output = tokio::process::Command::new(etcdutl)
        .arg("hashkv")
        .arg(db)
        .arg(format!("--rev={revision}"))
        .arg("--write-out=json")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| {
            HashError::Other(Failure::permanent(format!(
                "running {}: {e}",
                etcdutl.display()
            )))
        })?;
    if !output.status.success() {
        let why = tail(&output.stderr, &output.stdout);
        return Err(hash_error(revision, &why));
    }
    let parsed: EtcdutlHashKv = serde_json::from_slice(&output.stdout).map_err(|e| {
        HashError::Other(Failure::permanent(format!(
            "{} hashkv printed no hash ({e}): {}",
            etcdutl.display(),
            String::from_utf8_lossy(&output.stdout)
        )))
    })?;
    Ok(HashKv {
        revision: parsed.hash_revision,
        hash: parsed.hash,
        compact_revision: parsed.compact_revision,
    })
}

/// An error of etcd's hash at `revision`: the revision is outside the restored store's history
/// (etcd's "future revision" / "compacted" errors), or anything else.
fn hash_error(revision: i64, why: &str) -> HashError {
    if why.contains("future revision") {
        HashError::Compared(format!(
            "the restored snapshot ends before revision {revision}, the one hashed at save time \
             (the save streamed from another member or attempt than the one that recorded it)"
        ))
    } else if why.contains("compacted") {
        HashError::Compared(format!(
            "the restored snapshot is compacted past revision {revision}, the one hashed at save time"
        ))
    } else {
        HashError::Other(Failure::permanent(format!(
            "hashing the restored snapshot at revision {revision}: {why}"
        )))
    }
}

/// etcd 3.5: run etcd on the restored data dir on loopback, ask it for `HashKV(revision)`, stop it.
async fn hashkv_by_etcd(
    etcd: &Path,
    data: &Path,
    peer: &str,
    revision: i64,
) -> Result<HashKv, HashError> {
    let mut scratch = Scratch::start(etcd, data, peer, &[]).map_err(HashError::Other)?;
    let deadline = tokio::time::Instant::now() + SCRATCH_ETCD_DEADLINE;
    let mut last = String::new();
    let result = loop {
        if tokio::time::Instant::now() >= deadline {
            break Err(HashError::Other(Failure::transient(format!(
                "etcd on the restored snapshot did not answer HashKV within {}s: {last}",
                SCRATCH_ETCD_DEADLINE.as_secs()
            ))));
        }
        if let Some(status) = scratch.exited() {
            break Err(HashError::Other(Failure::permanent(format!(
                "etcd on the restored snapshot exited ({status}) before answering"
            ))));
        }
        match scratch_hash_kv(&scratch.client_url, revision).await {
            Ok(h) => break Ok(h),
            Err(e) if e.contains("future revision") || e.contains("compacted") => {
                break Err(hash_error(revision, &e))
            }
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    scratch.stop().await;
    result
}

async fn scratch_hash_kv(url: &str, revision: i64) -> Result<HashKv, String> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(30));
    let client = Client::connect([url], Some(options))
        .await
        .map_err(|e| e.to_string())?;
    let resp = client
        .maintenance_client()
        .hash_kv(revision)
        .await
        .map_err(|e| e.to_string())?;
    Ok(HashKv {
        revision: resp.header().map_or(revision, |h| h.revision()),
        hash: resp.hash(),
        compact_revision: resp.compact_version(),
    })
}

/// The save's reference point: the member's hashkv at its current revision, asked just before
/// the snapshot stream, so the snapshot (taken after it, from the same member) holds that
/// revision. `None` (verification then checks sha256 and the restore only) when the member
/// does not answer: recording never fails a save.
pub async fn record(etcd: &Client) -> Option<(HashKv, u64)> {
    match etcd.maintenance_client().hash_kv(0).await {
        Ok(resp) => {
            let header = resp.header()?;
            let h = HashKv {
                revision: header.revision(),
                hash: resp.hash(),
                compact_revision: resp.compact_version(),
            };
            tracing::info!(revision = h.revision, hash = h.hash, compact_revision = h.compact_revision, member = %format!("{:x}", header.member_id()), "recorded the member's hashkv");
            Some((h, header.member_id()))
        }
        Err(e) => {
            tracing::warn!(error = %e, "HashKV failed; the snapshot's content will not be compared when it is verified");
            None
        }
    }
}

/// After the stream: keep the record only if the snapshot came from the member that recorded
/// it (the client may have reconnected to another member behind the Service meanwhile).
pub async fn confirm(etcd: &Client, recorded: Option<(HashKv, u64)>) -> Option<HashKv> {
    let (h, member) = recorded?;
    match etcd.maintenance_client().status().await {
        Ok(s) if s.header().is_some_and(|hd| hd.member_id() == member) => Some(h),
        Ok(_) => {
            tracing::warn!(
                "the snapshot came from another member than the recorded hashkv; not recording it"
            );
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "Status failed after the save; not recording the hashkv");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(revision: i64, hash: u32, compact_revision: i64) -> HashKv {
        HashKv {
            revision,
            hash,
            compact_revision,
        }
    }

    #[test]
    fn a_restored_copy_with_the_recorded_hash_is_verified_at_the_recorded_revision() {
        let got = compare("s3://b/k.db", Some(&h(42, 7, 3)), &h(42, 7, 3)).unwrap();
        assert_eq!(
            got,
            Verified {
                revision: 42,
                hash: 7,
                compared: true
            }
        );
    }

    #[test]
    fn a_different_hash_is_a_mismatch_naming_both_values_and_the_revision() {
        let Err(Compare::Bad(u)) = compare("s3://b/k.db", Some(&h(42, 7, 3)), &h(42, 8, 3)) else {
            panic!("a mismatch")
        };
        assert_eq!(u.reason, "HashKVMismatch");
        for part in ["s3://b/k.db", "revision 42", "is 8", "reported 7"] {
            assert!(u.message.contains(part), "{part}: {}", u.message);
        }
    }

    #[test]
    fn hashes_at_different_compactions_are_not_compared() {
        let got = compare("s3://b/k.db", Some(&h(42, 7, 3)), &h(42, 8, 10));
        assert!(
            matches!(&got, Err(Compare::NotComparable(m)) if m.contains("compacted")),
            "{got:?}"
        );
    }

    #[test]
    fn without_a_record_the_restore_is_verified_uncompared() {
        let got = compare("s3://b/k.db", None, &h(50, 9, 0)).unwrap();
        assert!(!got.compared);
        assert_eq!((got.revision, got.hash), (50, 9));
    }

    #[test]
    fn a_changed_object_is_a_checksum_mismatch_with_both_sums() {
        let want = "ab".repeat(32);
        let got = Uploaded {
            size: 10,
            sha256: "cd".repeat(32),
        };
        let u = check_stored("s3://b/k.db", &got, &want, 10).unwrap_err();
        assert_eq!(u.reason, "ChecksumMismatch");
        assert!(
            u.message.contains(&want) && u.message.contains(&got.sha256),
            "{}",
            u.message
        );
        let same = Uploaded {
            size: 10,
            sha256: want.clone(),
        };
        assert!(check_stored("s3://b/k.db", &same, &want, 10).is_ok());
        assert!(check_stored("s3://b/k.db", &same, &want, 11).is_err());
    }

    #[test]
    fn etcd_revision_errors_mean_not_comparable_not_bad() {
        assert!(matches!(
            hash_error(5, "mvcc: required revision is a future revision"),
            HashError::Compared(m) if m.contains("ends before revision 5")
        ));
        assert!(matches!(
            hash_error(5, "mvcc: required revision has been compacted"),
            HashError::Compared(_)
        ));
        assert!(matches!(hash_error(5, "disk on fire"), HashError::Other(_)));
    }

    #[test]
    fn the_report_json_is_what_the_controller_reads() {
        let v = Verified {
            revision: 3,
            hash: 4,
            compared: true,
        };
        assert_eq!(
            serde_json::to_string(&Report::Verified(&v)).unwrap(),
            r#"{"verified":{"revision":3,"hash":4,"compared":true}}"#
        );
        let u = Unverified {
            reason: "HashKVMismatch",
            message: "m".into(),
        };
        let text = serde_json::to_string(&Report::Unverified(&u)).unwrap();
        assert_eq!(
            text,
            r#"{"unverified":{"reason":"HashKVMismatch","message":"m"}}"#
        );
        let parsed = crate::agent_job::AgentReport::parse(&text).and_then(|r| r.unverified);
        assert_eq!(parsed.map(|u| u.reason), Some("HashKVMismatch".to_string()));
    }
}
