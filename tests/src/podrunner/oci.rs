//! An unpacked OCI image ([`super::unpack`]) as the runner runs it: which of its directories are
//! the container's command directories and which other files are mounted, its user, working
//! directory and environment ([`ResolvedImage`]); commands resolved inside it.

use std::path::{Path, PathBuf};

use super::images::{is_executable, ResolvedImage, TOOLS_PATH};
use super::unpack;

/// An OCI image unpacked (cached by digest) and described for the runner: its `PATH` directories
/// that exist in it are the container's command directories, mounted where the image has them.
pub(super) fn resolve(
    image: &str,
    layout: &Path,
    tag: Option<&str>,
    cache: &Path,
) -> Result<ResolvedImage, String> {
    let unpacked = unpack::unpack_cached(layout, tag, cache).map_err(|e| {
        format!(
            "image {image:?} (OCI image layout {}): {e}",
            layout.display()
        )
    })?;
    let rootfs = unpacked.rootfs;
    let config = unpacked.config;
    let image_path = config
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| TOOLS_PATH.join(":"));
    let mut path = Vec::new();
    let mut mount_at = Vec::new();
    for dir in image_path.split(':').filter(|d| d.starts_with('/')) {
        let Ok(host) = unpack::inside(&rootfs, dir) else {
            continue;
        };
        if is_real_dir(&host) && !mount_at.iter().any(|m: &PathBuf| m == Path::new(dir)) {
            path.push(host);
            mount_at.push(PathBuf::from(dir));
        }
    }
    let mut extra_mounts = Vec::new();
    image_files(&rootfs, Path::new("/"), &mount_at, &mut extra_mounts);
    let working_dir = Some(config.working_dir).filter(|w| w.starts_with('/'));
    if let Some(w) = &working_dir {
        let covered = mount_at
            .iter()
            .chain(extra_mounts.iter().map(|(_, at)| at))
            .any(|m| Path::new(w).starts_with(m));
        match unpack::inside(&rootfs, w) {
            Ok(host) if !covered && is_real_dir(&host) => {
                extra_mounts.push((host, PathBuf::from(w)));
            }
            _ => {}
        }
    }
    let user =
        unpack::image_user(&rootfs, &config.user).map_err(|e| format!("image {image:?}: {e}"))?;
    Ok(ResolvedImage {
        image: image.to_string(),
        path,
        entrypoint: config.entrypoint,
        cmd: config.cmd,
        host_paths: false,
        mount_at,
        image_id: unpacked.digest,
        rootfs: Some(rootfs),
        env: config.env,
        user: Some(user),
        working_dir,
        extra_mounts,
    })
}

fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Collect under `at` (a directory of the image, `rootfs` + `at` on the host) what to mount
/// besides the `PATH` directories `mounted`: each directory that holds a file, whole; `/etc`'s
/// files one by one; nothing under `/tmp` (the container gets its own) or `/proc`, `/sys`, `/dev`.
fn image_files(rootfs: &Path, at: &Path, mounted: &[PathBuf], out: &mut Vec<(PathBuf, PathBuf)>) {
    if mounted.iter().any(|m| m == at)
        || ["/tmp", "/proc", "/sys", "/dev"]
            .iter()
            .any(|skip| at == Path::new(skip))
    {
        return;
    }
    let host = rootfs.join(at.strip_prefix("/").unwrap_or(at));
    let Ok(entries) = std::fs::read_dir(&host) else {
        return;
    };
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if at == Path::new("/") && name == ".unpacked" {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() => dirs.push(name),
            Ok(_) => files.push(name),
            Err(_) => {}
        }
    }
    dirs.sort();
    files.sort();
    let whole = !files.is_empty() && at != Path::new("/") && at != Path::new("/etc");
    if whole {
        out.push((host, at.to_path_buf()));
        return;
    }
    if at == Path::new("/etc") {
        for f in &files {
            out.push((host.join(f), at.join(f)));
        }
    }
    for d in dirs {
        image_files(rootfs, &at.join(d), mounted, out);
    }
}

/// [`is_executable`] for a file of an unpacked image: a symbolic link is followed only while it
/// stays inside `rootfs` (an absolute link target names a file of the image, not of the host).
pub(super) fn is_executable_in(rootfs: &Path, path: &Path) -> bool {
    let mut path = path.to_path_buf();
    for _ in 0..8 {
        match std::fs::read_link(&path) {
            Ok(target) => {
                let base = match target.is_absolute() {
                    true => rootfs.to_path_buf(),
                    false => path.parent().map(Path::to_path_buf).unwrap_or_default(),
                };
                let rel = base.strip_prefix(rootfs).unwrap_or(Path::new(""));
                match unpack::inside(rootfs, &rel.join(&target).to_string_lossy()) {
                    Ok(next) => path = next,
                    Err(_) => return false,
                }
            }
            Err(_) => return is_executable(&path),
        }
    }
    false
}
