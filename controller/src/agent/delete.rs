//! `snapshot-agent delete`: remove a snapshot file a schedule's retention pruned from a PVC
//! destination, with its sidecars. Only a file whose `.uid` sidecar names the snapshot is
//! removed (the overwrite guard's rule, turned round): a file another snapshot wrote, or one
//! whose owner cannot be read, stays. A file already gone is success (a retried Job).

use std::path::{Path, PathBuf};

use super::{check_snapshot_name, pvc};
use crate::objectstore::Failure;

#[derive(clap::Args, Debug, Clone)]
pub struct DeleteArgs {
    /// The EtcdSnapshot's name: the file is `<name>.db`.
    #[arg(long)]
    pub snapshot_name: String,
    /// The EtcdSnapshot's UID: the file is removed only when its `.uid` sidecar names it.
    #[arg(long)]
    pub snapshot_uid: String,
    /// The claim's name (for messages).
    #[arg(long)]
    pub pvc_claim: String,
    /// Where the claim is mounted.
    #[arg(long)]
    pub pvc_mount: PathBuf,
    /// Directory inside the volume.
    #[arg(long)]
    pub pvc_sub_path: Option<String>,
    /// A file at the path that this snapshot did not write (its `.uid` sidecar names another
    /// snapshot, or there is none) is left in place and reported, and the command succeeds:
    /// for a snapshot that failed, which may never have written there. Without it such a file
    /// fails the command permanently.
    #[arg(long)]
    pub leave_unowned: bool,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
}

/// What the command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removed {
    /// The snapshot's own file and sidecars are gone (or were already).
    Deleted(String),
    /// The file at the path is not this snapshot's and stays (`--leave-unowned`): why.
    LeftInPlace(String),
}

/// What was removed, for the termination log.
pub fn run(args: &DeleteArgs) -> Result<Removed, Failure> {
    check_snapshot_name(&args.snapshot_name)?;
    let uid = args.snapshot_uid.trim();
    if uid.is_empty() {
        return Err(Failure::permanent(
            "--snapshot-uid is empty; pass the EtcdSnapshot's metadata.uid",
        ));
    }
    let target = pvc::target(
        &args.pvc_mount,
        args.pvc_sub_path.as_deref(),
        &args.snapshot_name,
    )?;
    let uri = format!("pvc://{}/{}", args.pvc_claim, target.relative);
    // The partial file of an agent of this snapshot killed mid-write (its name carries the
    // UID, so it is this snapshot's whoever holds the final name).
    remove_file(&pvc::temp_file(&target.file, uid))?;
    match remove(&target.file, uid, &uri) {
        Ok(done) => Ok(Removed::Deleted(done)),
        Err(Unowned(why)) if args.leave_unowned => {
            tracing::info!(uri, "{why}");
            Ok(Removed::LeftInPlace(why))
        }
        Err(Unowned(why)) => Err(Failure::permanent(why)),
        Err(Io(f)) => Err(f),
    }
}

/// Why a file was not removed.
enum NotRemoved {
    /// The file is not this snapshot's.
    Unowned(String),
    Io(Failure),
}
use NotRemoved::{Io, Unowned};

impl From<Failure> for NotRemoved {
    fn from(f: Failure) -> Self {
        Io(f)
    }
}

fn remove(file: &Path, uid: &str, uri: &str) -> Result<String, NotRemoved> {
    let sidecar = pvc::uid_sidecar(file);
    if !file.exists() {
        // A retried Job after the file went, or a snapshot that never wrote: drop the sidecars
        // that may be left, if they are this snapshot's.
        if read_owner(&sidecar).as_deref() == Some(uid) {
            remove_file(&pvc::sha256_sidecar(file))?;
            remove_file(&sidecar)?;
        }
        tracing::info!(uri, "nothing to delete: the file is gone");
        return Ok(format!("{uri} was already gone"));
    }
    match read_owner(&sidecar) {
        Some(owner) if owner == uid => {}
        Some(owner) => {
            return Err(Unowned(format!(
                "{uri} holds the snapshot with UID {owner}, not this one ({uid}); it is left in \
                 place: another snapshot wrote it"
            )))
        }
        None => {
            return Err(Unowned(format!(
                "{uri} has no readable UID sidecar ({}); it is left in place, since the agent \
                 cannot tell that this snapshot wrote it: delete it by hand if it is not needed",
                sidecar.display()
            )))
        }
    }
    remove_file(file)?;
    remove_file(&pvc::sha256_sidecar(file))?;
    // The owner record goes last: a crash before leaves a sidecar the retry recognises.
    remove_file(&sidecar)?;
    if let Some(dir) = file.parent() {
        pvc::sync_dir(dir)?;
    }
    tracing::info!(uri, "deleted the snapshot file and its sidecars");
    Ok(format!("deleted {uri}"))
}

fn read_owner(sidecar: &Path) -> Option<String> {
    std::fs::read_to_string(sidecar)
        .ok()
        .map(|s| s.trim().to_string())
}

fn remove_file(path: &Path) -> Result<(), Failure> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(pvc::io_failure(&format!("removing {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mount: &Path, uid: &str) -> DeleteArgs {
        DeleteArgs {
            snapshot_name: "daily-1".into(),
            snapshot_uid: uid.into(),
            pvc_claim: "backups".into(),
            pvc_mount: mount.to_path_buf(),
            pvc_sub_path: Some("etcd".into()),
            leave_unowned: false,
            termination_log: mount.join("log"),
        }
    }

    fn stored(mount: &Path, owner: Option<&str>) -> PathBuf {
        let dir = mount.join("etcd");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("daily-1.db");
        std::fs::write(&file, b"snapshot").unwrap();
        std::fs::write(pvc::sha256_sidecar(&file), "ab  daily-1.db\n").unwrap();
        if let Some(owner) = owner {
            std::fs::write(pvc::uid_sidecar(&file), owner).unwrap();
        }
        file
    }

    #[test]
    fn the_snapshots_own_file_and_sidecars_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let file = stored(dir.path(), Some("uid-1\n"));
        let done = run(&args(dir.path(), "uid-1")).unwrap();
        assert_eq!(
            done,
            Removed::Deleted("deleted pvc://backups/etcd/daily-1.db".into())
        );
        assert!(!file.exists());
        assert!(!pvc::uid_sidecar(&file).exists());
        assert!(!pvc::sha256_sidecar(&file).exists());
        // Again (a retried Job): success, nothing to do.
        assert!(matches!(
            run(&args(dir.path(), "uid-1")).unwrap(),
            Removed::Deleted(m) if m.contains("already gone")
        ));
    }

    #[test]
    fn with_leave_unowned_another_snapshots_file_stays_and_the_command_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let file = stored(dir.path(), Some("uid-2\n"));
        let mut a = args(dir.path(), "uid-1");
        a.leave_unowned = true;
        let done = run(&a).unwrap();
        assert!(
            matches!(&done, Removed::LeftInPlace(m) if m.contains("UID uid-2")),
            "{done:?}"
        );
        for kept in [
            file.clone(),
            pvc::uid_sidecar(&file),
            pvc::sha256_sidecar(&file),
        ] {
            assert!(kept.exists(), "{} removed", kept.display());
        }
        // No `.uid` at all: nobody's to remove either.
        std::fs::remove_file(pvc::uid_sidecar(&file)).unwrap();
        assert!(
            matches!(run(&a).unwrap(), Removed::LeftInPlace(m) if m.contains("no readable UID"))
        );
        assert!(file.exists() && pvc::sha256_sidecar(&file).exists());
        // Nothing at the path (a snapshot that wrote nothing): success at once.
        let empty = tempfile::tempdir().unwrap();
        let mut a = args(empty.path(), "uid-1");
        a.leave_unowned = true;
        assert!(matches!(run(&a).unwrap(), Removed::Deleted(m) if m.contains("already gone")));
    }

    #[test]
    fn the_partial_file_of_an_agent_killed_mid_write_goes_whoever_holds_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = stored(dir.path(), Some("uid-2"));
        let mine = pvc::temp_file(&file, "uid-1");
        let theirs = pvc::temp_file(&file, "uid-2");
        std::fs::write(&mine, b"half a snapshot").unwrap();
        std::fs::write(&theirs, b"being written").unwrap();
        let mut a = args(dir.path(), "uid-1");
        a.leave_unowned = true;
        assert!(matches!(run(&a).unwrap(), Removed::LeftInPlace(_)));
        assert!(!mine.exists());
        assert!(theirs.exists() && file.exists());
    }

    #[test]
    fn another_snapshots_file_or_an_unowned_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let file = stored(dir.path(), Some("uid-2"));
        let e = run(&args(dir.path(), "uid-1")).unwrap_err();
        assert!(e.permanent && e.message.contains("UID uid-2"), "{e}");
        assert!(file.exists());
        std::fs::remove_file(pvc::uid_sidecar(&file)).unwrap();
        let e = run(&args(dir.path(), "uid-1")).unwrap_err();
        assert!(e.message.contains("no readable UID sidecar"), "{e}");
        assert!(file.exists());
    }

    #[test]
    fn a_sub_path_outside_the_volume_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args(dir.path(), "uid-1");
        a.pvc_sub_path = Some("../x".into());
        assert!(run(&a).unwrap_err().message.contains("--pvc-sub-path"));
    }
}
