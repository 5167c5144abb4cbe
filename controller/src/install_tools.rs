//! `etcd-operator install-tools --to DIR`: the first init container of a restoring seed copies
//! the operator's own executable into a shared emptyDir, so the next init container can run the
//! snapshot agent inside the cluster's etcd image (next to that image's `etcdutl`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The copy's file name in the target directory.
pub const BINARY: &str = "etcd-operator";

/// Copy the running executable to `<to>/etcd-operator` (mode 0755) through a temporary file
/// and a rename, so a restarted init container never leaves a half-written binary behind.
pub fn install(to: &Path) -> anyhow::Result<PathBuf> {
    let source = std::env::current_exe().context("finding the operator's own executable")?;
    install_from(&source, to)
}

fn install_from(source: &Path, to: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let target = to.join(BINARY);
    let temp = to.join(format!(".{BINARY}.tmp"));
    // Streamed (the binary is large), then flushed to the volume.
    std::fs::copy(source, &temp).with_context(|| {
        format!(
            "copying {} to {} (is --to a writable volume?)",
            source.display(),
            temp.display()
        )
    })?;
    std::fs::File::open(&temp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("flushing {}", temp.display()))?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", temp.display()))?;
    std::fs::rename(&temp, &target)
        .with_context(|| format!("renaming {} to {}", temp.display(), target.display()))?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_an_executable_and_replaces_an_earlier_copy() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("src-bin");
        std::fs::write(&source, b"#!/bin/sh\necho hi\n").unwrap();
        let to = dir.path().join("tools");
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(to.join(BINARY), b"old").unwrap();
        let target = install_from(&source, &to).unwrap();
        assert_eq!(target, to.join(BINARY));
        assert_eq!(std::fs::read(&target).unwrap(), b"#!/bin/sh\necho hi\n");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(!to.join(format!(".{BINARY}.tmp")).exists());
    }

    #[test]
    fn an_unwritable_target_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("src-bin");
        std::fs::write(&source, b"x").unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"").unwrap();
        let err = install_from(&source, &blocker.join("sub")).unwrap_err();
        assert!(format!("{err:#}").contains("file/sub"), "{err:#}");
    }
}
