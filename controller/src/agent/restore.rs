//! `snapshot-agent restore`: the seed member's `restore` init container. Fetches the snapshot
//! onto the data volume (after a 2x free-space pre-flight), verifies its sha256, runs the
//! cluster's own `etcdutl snapshot restore` into a work directory on the same volume and
//! renames the result into place. Idempotent: an initialised data dir (one holding `member`) is
//! never touched; a half-done earlier attempt (the work directory) is removed and redone.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::pvc::{io_failure, recorded_sha256, sync_dir};
use super::{Artifact, Outcome};
use crate::objectstore::{hex, Failure, Location, S3Args, Uploaded, S3};

/// The work directory inside the data dir: the download and etcdutl's output.
pub const WORK_DIR: &str = ".restore";

/// How far a restore moves the revision past the snapshot's (etcdutl `--bump-revision`). Clients
/// of the cluster the snapshot came from (a kube-apiserver's watch cache and informers) hold
/// revisions written after it; a restored store that counted on from the snapshot's revision would
/// hand out those numbers again for other changes, and a watch resumed from one of them would
/// silently miss events. A billion revisions is more than any cluster writes between two
/// snapshots (over three years at 10 writes a second), and still leaves etcd's int64 revision
/// space practically untouched.
pub const DEFAULT_BUMP_REVISION: u64 = 1_000_000_000;

#[derive(clap::Args, Debug, Clone)]
pub struct RestoreArgs {
    /// The member's etcd data dir.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The member's name (etcd --name).
    #[arg(long)]
    pub name: String,
    #[arg(long)]
    pub initial_cluster: String,
    #[arg(long)]
    pub initial_cluster_token: String,
    #[arg(long)]
    pub initial_advertise_peer_urls: String,
    /// The etcdutl binary of the cluster's etcd version.
    #[arg(long)]
    pub etcdutl: PathBuf,
    #[command(flatten)]
    pub s3: S3Args,
    /// PVC source: path of the `.db` file.
    #[arg(long)]
    pub pvc_file: Option<PathBuf>,
    /// The sha256 (hex) the snapshot must have; else the one its checksum object (S3) or sidecar
    /// (PVC) records.
    #[arg(long)]
    pub expected_sha256: Option<String>,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    /// How far the restored revision jumps past the snapshot's; the skipped range is marked
    /// compacted (etcdutl `--mark-compacted`), so a watch resumed from it is told to relist.
    /// 0 keeps the snapshot's own revision (only safe when nothing ever read the source).
    #[arg(long, default_value_t = DEFAULT_BUMP_REVISION)]
    pub bump_revision: u64,
    /// In-place restore (an EtcdRecovery from a snapshot): the directory, inside the data dir,
    /// that the member's previous `member` directory is moved into (never deleted) before the
    /// snapshot is restored in its place. A `restored` marker in it records that this restore
    /// is done, so a restarted Pod does not restore again over the data written since.
    #[arg(long)]
    pub set_aside: Option<String>,
}

/// The marker an in-place restore writes into its set-aside directory once done.
pub const RESTORED_MARKER: &str = "restored";

/// What a `restored` marker records: the snapshot restored (its URI, and its sha256 when known).
/// A marker written before these were recorded holds the text `restored` and records nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Marker {
    pub source: Option<String>,
    pub sha256: Option<String>,
}

impl Marker {
    /// Read a marker's text: JSON, or anything else (the older plain `restored`) as a marker
    /// that records nothing.
    pub fn parse(text: &str) -> Marker {
        serde_json::from_str(text).unwrap_or_default()
    }

    /// Whether this marker says the restore of `source` (with `sha256`, when known) is done. A
    /// marker that records nothing was written by an older version for the only restore its
    /// directory was ever used for: done.
    pub fn is_for(&self, source: &str, sha256: Option<&str>) -> bool {
        let same_source = self.source.as_deref().is_none_or(|s| s == source);
        let same_sha = match (self.sha256.as_deref(), sha256) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        same_source && same_sha
    }
}

/// Where an in-place restore stands, read from the data dir.
#[derive(Debug, PartialEq, Eq)]
pub enum InPlace {
    /// This restore is done (its marker is there): nothing to do.
    Done,
    /// Restored and moved into place, but the marker is missing (stopped just before writing
    /// it): write it, nothing else.
    MarkOnly,
    /// The previous data is still in `member`: move it aside first.
    SetAside,
    /// Nothing in `member` (set aside already, or an empty volume): restore.
    Restore,
    /// The directory's marker records the restore of another snapshot: this restore is not
    /// done, and the directory is not this restore's to use.
    OtherRestore(Marker),
}

/// Pure: the state of an in-place restore from what exists. `member`: the data dir's `member`;
/// `aside_member`: `member` inside the set-aside dir; `marker`: the marker there, and whether
/// it is this restore's ([`Marker::is_for`]).
pub fn in_place_state(member: bool, aside_member: bool, marker: Option<(Marker, bool)>) -> InPlace {
    match (marker, member, aside_member) {
        (Some((_, true)), _, _) => InPlace::Done,
        (Some((other, false)), _, _) => InPlace::OtherRestore(other),
        // The old data is aside and a restored `member` is in place: only the marker is missing.
        (None, true, true) => InPlace::MarkOnly,
        (None, true, false) => InPlace::SetAside,
        (None, false, _) => InPlace::Restore,
    }
}

/// Move the previous data aside (or recognise the restore of `source` as done). `Ok(true)`:
/// restore now.
fn prepare_in_place(
    data_dir: &Path,
    aside: &str,
    source: &str,
    sha256: Option<&str>,
) -> Result<bool, Failure> {
    if aside.is_empty() || aside.contains('/') || aside == "member" || aside.starts_with("..") {
        return Err(Failure::permanent(format!(
            "--set-aside {aside:?} must be a plain directory name other than member"
        )));
    }
    let dir = data_dir.join(aside);
    let member = data_dir.join("member");
    let marker = match std::fs::read_to_string(dir.join(RESTORED_MARKER)) {
        Ok(text) => {
            let m = Marker::parse(&text);
            let ours = m.is_for(source, sha256);
            Some((m, ours))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(io_failure(
                &format!("reading {}", dir.join(RESTORED_MARKER).display()),
                e,
            ))
        }
    };
    let state = in_place_state(member.exists(), dir.join("member").exists(), marker);
    tracing::info!(data_dir = %data_dir.display(), aside = %dir.display(), ?state, "in-place restore");
    match state {
        InPlace::Done => Ok(false),
        InPlace::OtherRestore(other) => Err(Failure::permanent(format!(
            "{} records the restore of {} (sha256 {}), not of {source}: this directory belongs \
             to another restore, and its data is left as it is; an EtcdRecovery's set-aside \
             directory is named by its UID, so this happens only when a mark was copied from \
             another member or recovery: remove the member's restore annotations and create a new \
             EtcdRecovery (docs/disaster-recovery.md, 'A recovery that failed half-way')",
            dir.join(RESTORED_MARKER).display(),
            other.source.as_deref().unwrap_or("an unrecorded snapshot"),
            other.sha256.as_deref().unwrap_or("unrecorded"),
        ))),
        InPlace::MarkOnly => {
            mark_restored(&dir, source, sha256)?;
            Ok(false)
        }
        InPlace::SetAside => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| io_failure(&format!("creating {}", dir.display()), e))?;
            std::fs::rename(&member, dir.join("member")).map_err(|e| {
                io_failure(
                    &format!("moving the previous data {} aside", member.display()),
                    e,
                )
            })?;
            sync_dir(data_dir)?;
            sync_dir(&dir)?;
            tracing::info!(to = %dir.display(), "the previous data is set aside, not deleted");
            Ok(true)
        }
        InPlace::Restore => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| io_failure(&format!("creating {}", dir.display()), e))?;
            Ok(true)
        }
    }
}

/// Write the marker of the restore of `source` (with its sha256 when known) into `dir`.
fn mark_restored(dir: &Path, source: &str, sha256: Option<&str>) -> Result<(), Failure> {
    let marker = dir.join(RESTORED_MARKER);
    let text = serde_json::to_vec(&Marker {
        source: Some(source.to_string()),
        sha256: sha256.map(str::to_string),
    })
    .map_err(|e| Failure::permanent(format!("encoding the restore marker: {e}")))?;
    std::fs::write(&marker, text)
        .map_err(|e| io_failure(&format!("writing {}", marker.display()), e))?;
    sync_dir(dir)
}

enum Source {
    S3(S3, Location),
    File(PathBuf),
}

pub async fn run(args: RestoreArgs) -> Result<Outcome, Failure> {
    if args.set_aside.is_none() && args.data_dir.join("member").exists() {
        tracing::info!(data_dir = %args.data_dir.display(), "already initialised: the data dir holds a member directory; nothing to restore");
        return Ok(Outcome::Skipped(format!(
            "{} already initialised",
            args.data_dir.display()
        )));
    }
    let expected = match &args.expected_sha256 {
        Some(h) => Some(parse_sha256(h)?),
        None => None,
    };
    let source = source(&args).await?;
    let source_uri = match &source {
        Source::S3(_, at) => at.uri(),
        Source::File(file) => format!("file://{}", file.display()),
    };
    if let Some(aside) = &args.set_aside {
        if !args.data_dir.exists() {
            std::fs::create_dir_all(&args.data_dir)
                .map_err(|e| io_failure(&format!("creating {}", args.data_dir.display()), e))?;
        }
        if !prepare_in_place(&args.data_dir, aside, &source_uri, expected.as_deref())? {
            return Ok(Outcome::Skipped(format!(
                "{} already restored in place from {source_uri} ({aside}/{RESTORED_MARKER})",
                args.data_dir.display()
            )));
        }
    }
    if !args.etcdutl.is_file() {
        return Err(Failure::permanent(format!(
            "--etcdutl {} does not exist; pass the etcdutl of the cluster's etcd version",
            args.etcdutl.display()
        )));
    }
    let (uri, size, recorded) = match &source {
        Source::S3(s3, at) => {
            let (size, sha) = s3.head(at).await?;
            (at.uri(), size, sha)
        }
        Source::File(file) => {
            let meta = std::fs::metadata(file).map_err(|e| {
                Failure::permanent(format!(
                    "--pvc-file {}: {e}; point spec.bootstrap.restore's PVC path at the snapshot's .db file",
                    file.display()
                ))
            })?;
            (
                format!("file://{}", file.display()),
                meta.len(),
                recorded_sha256(file),
            )
        }
    };
    let want_sha = expected.or(recorded);
    tracing::info!(
        uri,
        size,
        sha256 = want_sha.as_deref().unwrap_or("unknown"),
        "restoring"
    );

    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| io_failure(&format!("creating {}", args.data_dir.display()), e))?;
    let work = args.data_dir.join(WORK_DIR);
    if work.exists() {
        tracing::info!(work = %work.display(), "removing a half-done earlier attempt");
        std::fs::remove_dir_all(&work)
            .map_err(|e| io_failure(&format!("removing {}", work.display()), e))?;
    }
    preflight(size, free_bytes(&args.data_dir)?, &args.data_dir)?;
    std::fs::create_dir_all(&work)
        .map_err(|e| io_failure(&format!("creating {}", work.display()), e))?;

    let (db, got) = match &source {
        Source::S3(s3, at) => {
            let db = work.join("snapshot.db");
            let got = s3.download(at, &db).await?;
            (db, got)
        }
        // The file is on a volume already: verify and restore from it in place.
        Source::File(file) => (file.clone(), hash_file(file).await?),
    };
    if got.size != size {
        return Err(Failure::transient(format!(
            "{uri}: fetched {} bytes, expected {size}; retry",
            got.size
        )));
    }
    match &want_sha {
        Some(want) if *want != got.sha256 => {
            return Err(Failure::permanent(format!(
                "{uri} has sha256 {}, but {want} was recorded for it: the stored snapshot is corrupt or \
                 was replaced; restore from another snapshot",
                got.sha256
            )))
        }
        Some(_) => tracing::info!(sha256 = %got.sha256, "checksum verified"),
        None => tracing::info!(sha256 = %got.sha256, "no checksum recorded for the source; not verified"),
    }

    let out = work.join("data");
    etcdutl_restore(&args, &db, &out).await?;
    let target = args.data_dir.join("member");
    std::fs::rename(out.join("member"), &target).map_err(|e| {
        io_failure(
            &format!(
                "moving the restored member directory to {}",
                target.display()
            ),
            e,
        )
    })?;
    sync_dir(&args.data_dir)?;
    if let Some(aside) = &args.set_aside {
        mark_restored(&args.data_dir.join(aside), &source_uri, Some(&got.sha256))?;
    }
    std::fs::remove_dir_all(&work)
        .map_err(|e| io_failure(&format!("removing {}", work.display()), e))?;
    tracing::info!(data_dir = %args.data_dir.display(), "restored");
    Ok(Outcome::Restored(Artifact {
        uri,
        size_bytes: got.size,
        checksum: format!("sha256:{}", got.sha256),
        hash_kv: None,
    }))
}

async fn source(args: &RestoreArgs) -> Result<Source, Failure> {
    match (&args.s3.s3_bucket, &args.pvc_file) {
        (Some(_), Some(_)) => Err(Failure::permanent(
            "both --s3-bucket and --pvc-file are set; restore from exactly one source",
        )),
        (Some(bucket), None) => {
            let key = args.s3.s3_key.clone().unwrap_or_default();
            if key.is_empty() || bucket.is_empty() {
                return Err(Failure::permanent(
                    "restoring from S3 needs --s3-bucket and --s3-key (the exact object key, e.g. backups/snap-1.db)",
                ));
            }
            Ok(Source::S3(
                S3::new(&args.s3).await?,
                Location {
                    bucket: bucket.clone(),
                    key,
                },
            ))
        }
        (None, Some(file)) => Ok(Source::File(file.clone())),
        (None, None) => Err(Failure::permanent(
            "no source: pass --s3-bucket with --s3-key, or --pvc-file",
        )),
    }
}

/// The restore needs room for the fetched file and the restored data (about its size again).
pub fn preflight(size: u64, free: u64, data_dir: &Path) -> Result<(), Failure> {
    let need = size.saturating_mul(2);
    if free >= need {
        return Ok(());
    }
    Err(Failure::permanent(format!(
        "not enough space to restore: the snapshot is {} ({size} bytes) and restoring needs twice that, {} \
         ({need} bytes), free on the filesystem of {}, which has {} ({free} bytes) free; give the cluster a \
         bigger storage.size (spec.storage.size) or restore a smaller snapshot",
        human(size),
        human(need),
        data_dir.display(),
        human(free)
    )))
}

/// Bytes available to an unprivileged writer on `dir`'s filesystem.
fn free_bytes(dir: &Path) -> Result<u64, Failure> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(|e| {
        Failure::transient(format!("reading the free space of {}: {e}", dir.display()))
    })?;
    #[allow(clippy::useless_conversion)] // the field widths differ between targets
    Ok(u64::from(st.blocks_available()).saturating_mul(u64::from(st.fragment_size())))
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn parse_sha256(text: &str) -> Result<String, Failure> {
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

pub(super) async fn hash_file(file: &Path) -> Result<Uploaded, Failure> {
    use tokio::io::AsyncReadExt;
    let mut f = tokio::fs::File::open(file)
        .await
        .map_err(|e| io_failure(&format!("opening {}", file.display()), e))?;
    let mut hasher = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let mut buf = vec![0u8; 1024 * 1024];
    let mut size = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .await
            .map_err(|e| io_failure(&format!("reading {}", file.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(Uploaded {
        size,
        sha256: hex(hasher.finish().as_ref()),
    })
}

async fn etcdutl_restore(args: &RestoreArgs, db: &Path, out: &Path) -> Result<(), Failure> {
    let mut cmd = tokio::process::Command::new(&args.etcdutl);
    cmd.arg("snapshot")
        .arg("restore")
        .arg(db)
        .arg(format!("--name={}", args.name))
        .arg(format!("--initial-cluster={}", args.initial_cluster))
        .arg(format!(
            "--initial-cluster-token={}",
            args.initial_cluster_token
        ))
        .arg(format!(
            "--initial-advertise-peer-urls={}",
            args.initial_advertise_peer_urls
        ))
        .arg(format!("--data-dir={}", out.display()))
        .stdin(Stdio::null());
    if args.bump_revision > 0 {
        // etcdutl requires the two together (3.5.10+ and 3.6).
        cmd.arg(format!("--bump-revision={}", args.bump_revision))
            .arg("--mark-compacted");
    }
    tracing::info!(command = ?cmd.as_std(), "running etcdutl");
    let status = cmd
        .status()
        .await
        .map_err(|e| Failure::permanent(format!("running {}: {e}", args.etcdutl.display())))?;
    if !status.success() {
        return Err(Failure::permanent(format!(
            "{} snapshot restore failed ({status}); its output is above in this log. A snapshot taken by a \
             newer etcd than the cluster's version cannot be restored by it",
            args.etcdutl.display()
        )));
    }
    if !out.join("member").is_dir() {
        return Err(Failure::transient(format!(
            "{} snapshot restore left no member directory in {}",
            args.etcdutl.display(),
            out.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preflight_needs_twice_the_size() {
        let dir = Path::new("/var/lib/etcd");
        preflight(100, 200, dir).unwrap();
        let e = preflight(64 << 20, (100 << 20) + 5, dir).unwrap_err();
        assert!(e.permanent);
        assert!(e.message.contains("64.0 MiB"), "{e}");
        assert!(e.message.contains("128.0 MiB"), "{e}");
        assert!(e.message.contains("100.0 MiB"), "{e}");
        assert!(e.message.contains("storage.size"), "{e}");
    }

    #[test]
    fn in_place_restore_sets_old_data_aside_once_and_never_restores_twice() {
        let ours = Some((Marker::default(), true));
        // Old data in place, nothing aside: move it aside (never delete it).
        assert_eq!(in_place_state(true, false, None), InPlace::SetAside);
        // Moved aside (or an empty volume): restore.
        assert_eq!(in_place_state(false, true, None), InPlace::Restore);
        assert_eq!(in_place_state(false, false, None), InPlace::Restore);
        // Restored into place but stopped before the marker: mark, do not move it aside again.
        assert_eq!(in_place_state(true, true, None), InPlace::MarkOnly);
        // Done: a restarted Pod keeps what etcd wrote since.
        assert_eq!(in_place_state(true, true, ours.clone()), InPlace::Done);
        assert_eq!(in_place_state(true, false, ours), InPlace::Done);
    }

    #[test]
    fn a_marker_of_another_snapshot_is_not_done() {
        let m = Marker {
            source: Some("s3://b/one.db".into()),
            sha256: Some("aa".into()),
        };
        assert!(m.is_for("s3://b/one.db", Some("aa")));
        assert!(m.is_for("s3://b/one.db", None));
        assert!(!m.is_for("s3://b/two.db", Some("aa")));
        assert!(!m.is_for("s3://b/one.db", Some("bb")));
        // The plain marker of an older version records nothing: its one restore is done.
        assert_eq!(Marker::parse("restored\n"), Marker::default());
        assert!(Marker::parse("restored\n").is_for("s3://b/two.db", Some("bb")));
        assert_eq!(
            in_place_state(true, true, Some((m.clone(), false))),
            InPlace::OtherRestore(m)
        );
    }

    #[test]
    fn in_place_restore_keeps_the_previous_data_and_skips_on_the_second_run() {
        let dir = std::env::temp_dir().join(format!("restore-in-place-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("member/snap")).unwrap();
        std::fs::write(dir.join("member/snap/db"), b"old").unwrap();
        let one = "s3://b/one.db";
        assert!(prepare_in_place(&dir, ".pre-restore-r", one, None).unwrap());
        assert!(!dir.join("member").exists());
        assert_eq!(
            std::fs::read(dir.join(".pre-restore-r/member/snap/db")).unwrap(),
            b"old"
        );
        // The restore puts a new member in place and marks it done.
        std::fs::create_dir_all(dir.join("member")).unwrap();
        mark_restored(&dir.join(".pre-restore-r"), one, Some("aa")).unwrap();
        assert!(!prepare_in_place(&dir, ".pre-restore-r", one, Some("aa")).unwrap());
        assert!(dir.join("member").exists());
        // The same directory asked to restore another snapshot: refused, nothing moved.
        let e = prepare_in_place(&dir, ".pre-restore-r", "s3://b/two.db", None).unwrap_err();
        assert!(e.permanent);
        assert!(e.message.contains("s3://b/one.db"), "{e}");
        assert!(dir.join("member").exists());
        // Another recovery's directory: the current data is set aside there and restored over.
        assert!(prepare_in_place(&dir, ".pre-restore-r2", "s3://b/two.db", None).unwrap());
        assert!(dir.join(".pre-restore-r2/member").exists());
        assert!(prepare_in_place(&dir, "../x", one, None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn expected_sha256_accepts_the_artifact_form() {
        let h = "ab".repeat(32);
        assert_eq!(
            parse_sha256(&format!("sha256:{}", h.to_uppercase())).unwrap(),
            h
        );
        assert!(parse_sha256("abc")
            .unwrap_err()
            .message
            .contains("--expected-sha256"));
    }
}
