//! The PVC backend: `<mount>[/<subPath>]/<name>.db` written through a temp file in the same
//! directory (fsync, rename, fsync of the directory), with a `<file>.uid` sidecar naming the
//! snapshot that wrote it (the overwrite guard) and a `<file>.sha256` sidecar in `sha256sum`
//! format (what a restore verifies).

use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use crate::objectstore::{hex, Failure, Uploaded};

/// The snapshot file and the path the URI names (relative to the volume root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub file: PathBuf,
    pub relative: String,
}

/// `<mount>[/<sub_path>]/<name>.db`; `sub_path` must stay inside the volume.
pub fn target(mount: &Path, sub_path: Option<&str>, name: &str) -> Result<Target, Failure> {
    let file = crate::objectstore::file_name(name);
    let sub = sub_path.unwrap_or("").trim_matches('/');
    if !sub.is_empty() {
        let escapes = Path::new(sub)
            .components()
            .any(|c| !matches!(c, Component::Normal(_)));
        if escapes {
            return Err(Failure::permanent(format!(
                "--pvc-sub-path {sub:?} must be a relative path inside the volume without '..' or '.'; \
                 fix spec.destination.pvc's path"
            )));
        }
    }
    let relative = if sub.is_empty() {
        file
    } else {
        format!("{sub}/{file}")
    };
    Ok(Target {
        file: mount.join(&relative),
        relative,
    })
}

/// The partial file an agent of snapshot `uid` streams into before renaming it to `file`:
/// `.<file>.<uid>.tmp` beside it.
pub fn temp_file(file: &Path, uid: &str) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    file.with_file_name(format!(".{name}.{uid}.tmp"))
}

pub fn uid_sidecar(file: &Path) -> PathBuf {
    with_suffix(file, ".uid")
}

pub fn sha256_sidecar(file: &Path) -> PathBuf {
    with_suffix(file, ".sha256")
}

fn with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The overwrite guard: no file, or a file whose sidecar names `uid`.
pub fn check_overwrite(file: &Path, uid: &str, uri: &str) -> Result<(), Failure> {
    if !file.exists() {
        return Ok(());
    }
    let sidecar = uid_sidecar(file);
    match std::fs::read_to_string(&sidecar) {
        Ok(owner) if owner.trim() == uid => {
            tracing::info!(uri, "the file exists from an earlier attempt of this snapshot; overwriting it");
            Ok(())
        }
        Ok(owner) => Err(Failure::permanent(format!(
            "{uri} already holds the snapshot with UID {}, not this one ({uid}); refusing to overwrite it: \
             choose another path or snapshot name, or delete the file",
            owner.trim()
        ))),
        Err(e) => Err(Failure::permanent(format!(
            "{uri} already exists and its UID sidecar {} cannot be read ({e}); refusing to overwrite a file \
             this snapshot did not write: choose another path or snapshot name, or delete the file",
            sidecar.display()
        ))),
    }
}

/// Stream `chunks` into `target`, durably, and write the sidecars.
pub async fn write<S>(target: &Target, uid: &str, mut chunks: S) -> Result<Uploaded, Failure>
where
    S: Stream<Item = Result<Vec<u8>, Failure>> + Unpin,
{
    let dir = target
        .file
        .parent()
        .ok_or_else(|| Failure::permanent("the snapshot file has no directory"))?
        .to_path_buf();
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| io_failure(&format!("creating {}", dir.display()), e))?;
    let name = target
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = temp_file(&target.file, uid);
    let result = async {
        let mut out = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| io_failure(&format!("creating {}", tmp.display()), e))?;
        let mut hasher = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        let mut size = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            hasher.update(&chunk);
            size += chunk.len() as u64;
            out.write_all(&chunk)
                .await
                .map_err(|e| io_failure(&format!("writing {}", tmp.display()), e))?;
        }
        if size == 0 {
            return Err(Failure::transient(
                "etcd sent an empty snapshot; retry (is the member healthy?)",
            ));
        }
        out.sync_all()
            .await
            .map_err(|e| io_failure(&format!("syncing {}", tmp.display()), e))?;
        drop(out);
        let done = Uploaded {
            size,
            sha256: hex(hasher.finish().as_ref()),
        };
        write_small(&uid_sidecar(&target.file), &format!("{uid}\n"))?;
        write_small(
            &sha256_sidecar(&target.file),
            &format!("{}  {name}\n", done.sha256),
        )?;
        std::fs::rename(&tmp, &target.file)
            .map_err(|e| io_failure(&format!("renaming {} into place", tmp.display()), e))?;
        sync_dir(&dir)?;
        Ok(done)
    }
    .await;
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Write a small file through a temp file and rename (durable).
fn write_small(path: &Path, text: &str) -> Result<(), Failure> {
    let tmp = with_suffix(path, ".tmp");
    let mut f = std::fs::File::create(&tmp)
        .map_err(|e| io_failure(&format!("creating {}", tmp.display()), e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io_failure(&format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_failure(&format!("renaming {}", tmp.display()), e))
}

pub fn sync_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_failure(&format!("syncing the directory {}", dir.display()), e))
}

/// The sha256 a `<file>.sha256` sidecar records, if there is one.
pub fn recorded_sha256(file: &Path) -> Option<String> {
    let text = std::fs::read_to_string(sha256_sidecar(file)).ok()?;
    let hex = text.split_whitespace().next()?.to_ascii_lowercase();
    (hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit())).then_some(hex)
}

/// A disk error: a full or read-only volume will not fix itself, anything else may.
pub fn io_failure(what: &str, e: std::io::Error) -> Failure {
    let hint = match e.raw_os_error() {
        Some(nix::libc::ENOSPC) => "; the volume is full: give it more space",
        Some(nix::libc::EROFS) => "; the volume is mounted read-only",
        Some(nix::libc::EACCES) | Some(nix::libc::EPERM) => {
            "; the agent may not write there: check the volume's ownership and fsGroup"
        }
        _ => "",
    };
    let permanent = hint.contains("read-only") || hint.contains("may not write");
    let message = format!("{what}: {e}{hint}");
    if permanent {
        Failure::permanent(message)
    } else {
        Failure::transient(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_joins_the_sub_path() {
        let t = target(Path::new("/mnt"), None, "s").unwrap();
        assert_eq!(t.file, Path::new("/mnt/s.db"));
        assert_eq!(t.relative, "s.db");
        let t = target(Path::new("/mnt"), Some("a/b/"), "s").unwrap();
        assert_eq!(t.file, Path::new("/mnt/a/b/s.db"));
        assert_eq!(t.relative, "a/b/s.db");
        for bad in ["../x", "a/../../b", "./a"] {
            let e = target(Path::new("/mnt"), Some(bad), "s").unwrap_err();
            assert!(e.permanent && e.message.contains("--pvc-sub-path"), "{bad}");
        }
    }

    #[test]
    fn the_guard_refuses_foreign_and_unmarked_files() {
        let dir = tempdir();
        let file = dir.join("s.db");
        check_overwrite(&file, "u1", "pvc://c/s.db").unwrap();
        std::fs::write(&file, b"x").unwrap();
        let e = check_overwrite(&file, "u1", "pvc://c/s.db").unwrap_err();
        assert!(e.permanent && e.message.contains("sidecar"), "{e}");
        std::fs::write(uid_sidecar(&file), "u2\n").unwrap();
        let e = check_overwrite(&file, "u1", "pvc://c/s.db").unwrap_err();
        assert!(e.message.contains("u2"), "{e}");
        std::fs::write(uid_sidecar(&file), "u1\n").unwrap();
        check_overwrite(&file, "u1", "pvc://c/s.db").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn write_is_durable_and_leaves_no_temp_file() {
        let dir = tempdir();
        let t = target(&dir, Some("sub"), "s").unwrap();
        let chunks = futures::stream::iter(vec![Ok(b"hello ".to_vec()), Ok(b"world".to_vec())]);
        let done = write(&t, "u1", chunks).await.unwrap();
        assert_eq!(done.size, 11);
        assert_eq!(std::fs::read(&t.file).unwrap(), b"hello world");
        assert_eq!(
            recorded_sha256(&t.file).as_deref(),
            Some(done.sha256.as_str())
        );
        assert_eq!(
            done.sha256,
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        let names: Vec<_> = std::fs::read_dir(dir.join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        // A failing stream leaves neither the file nor a temp file behind.
        let t2 = target(&dir, Some("sub"), "t").unwrap();
        let chunks = futures::stream::iter(vec![
            Ok(b"x".to_vec()),
            Err(Failure::transient("stream broke")),
        ]);
        assert!(write(&t2, "u1", chunks).await.is_err());
        assert!(!t2.file.exists());
        assert_eq!(std::fs::read_dir(dir.join("sub")).unwrap().count(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "snapshot-agent-pvc-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
