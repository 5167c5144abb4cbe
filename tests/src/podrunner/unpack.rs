//! OCI image layouts (what `make image` / `make test-image` write, see tools/image/build.sh),
//! read the way a container runtime pulls them: `index.json` → manifest → config and layers, each
//! blob checked against its digest and size, the layers applied in order (whiteouts included) into
//! a root filesystem. The root filesystem is cached by manifest digest, so every Pod of every suite
//! runs the same unpacked files and a rebuilt image unpacks once.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

/// What a container runtime takes from an image's config (`config` of the OCI image config).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `NAME=value` pairs split at the first `=`, in order.
    pub env: Vec<(String, String)>,
    /// `uid`, `uid:gid`, `name` or `name:group`; empty: root.
    pub user: String,
    pub working_dir: String,
}

/// An image unpacked into a root filesystem.
#[derive(Clone, Debug)]
pub struct Unpacked {
    /// `sha256:…` of the manifest (the image's digest, `imageID`).
    pub digest: String,
    pub config: ImageConfig,
    pub rootfs: PathBuf,
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct RuntimeConfig {
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
    #[serde(default)]
    cmd: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    working_dir: Option<String>,
}

#[derive(Deserialize)]
struct RootFs {
    diff_ids: Vec<String>,
}

#[derive(Deserialize)]
struct ConfigBlob {
    #[serde(default)]
    config: Option<RuntimeConfig>,
    rootfs: RootFs,
}

const REF_NAME: &str = "org.opencontainers.image.ref.name";

fn sha256_hex(data: &[u8]) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// `blobs/sha256/<hex>` of `layout`, after checking the digest's form.
fn blob_path(layout: &Path, digest: &str) -> Result<PathBuf, String> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            format!(
                "image {}: digest {digest:?} is not sha256:<64 hex digits>",
                layout.display()
            )
        })?;
    Ok(layout.join("blobs").join("sha256").join(hex))
}

/// A blob's bytes, checked against its descriptor's size and digest.
fn read_blob(layout: &Path, d: &Descriptor) -> Result<Vec<u8>, String> {
    let path = blob_path(layout, &d.digest)?;
    let data = fs::read(&path).map_err(|e| format!("reading blob {}: {e}", path.display()))?;
    if data.len() as u64 != d.size {
        return Err(format!(
            "blob {} has {} bytes, its descriptor says {}: the image layout is damaged; rebuild it",
            path.display(),
            data.len(),
            d.size
        ));
    }
    let got = format!("sha256:{}", sha256_hex(&data));
    if got != d.digest {
        return Err(format!(
            "blob {} hashes to {got}, not {}: the image layout is damaged; rebuild it",
            path.display(),
            d.digest
        ));
    }
    Ok(data)
}

fn parse<'a, T: Deserialize<'a>>(what: &str, data: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(data).map_err(|e| format!("parsing the image's {what}: {e}"))
}

/// The manifest of `layout` named `tag` (its `org.opencontainers.image.ref.name`), or its only
/// manifest when `tag` is `None`.
fn pick_manifest<'a>(
    layout: &Path,
    index: &'a Index,
    tag: Option<&str>,
) -> Result<&'a Descriptor, String> {
    let manifests: Vec<&Descriptor> = index
        .manifests
        .iter()
        .filter(|d| d.media_type.is_empty() || d.media_type.contains("manifest"))
        .collect();
    let names = || {
        manifests
            .iter()
            .map(|d| {
                d.annotations
                    .get(REF_NAME)
                    .map(String::as_str)
                    .unwrap_or("<untagged>")
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match tag {
        Some(tag) => manifests
            .iter()
            .find(|d| d.annotations.get(REF_NAME).map(String::as_str) == Some(tag))
            .copied()
            .ok_or_else(|| {
                format!(
                    "image layout {} has no manifest tagged {tag:?} (it has: {})",
                    layout.display(),
                    names()
                )
            }),
        None => match manifests.as_slice() {
            [one] => Ok(one),
            _ => Err(format!(
                "image layout {} holds {} image manifests ({}); name the tag",
                layout.display(),
                manifests.len(),
                names()
            )),
        },
    }
}

/// Read `layout`'s image (`tag`, or its only one) and unpack it under `cache` unless a previous
/// call did: `cache/<manifest hex>/` is the root filesystem.
pub fn unpack_cached(layout: &Path, tag: Option<&str>, cache: &Path) -> Result<Unpacked, String> {
    let index_path = layout.join("index.json");
    let index = fs::read(&index_path).map_err(|e| {
        format!(
            "reading {}: {e} (is {} an OCI image layout? `make test-image` writes the tests' one)",
            index_path.display(),
            layout.display()
        )
    })?;
    let index: Index = parse("index.json", &index)?;
    let manifest_desc = pick_manifest(layout, &index, tag)?;
    let manifest: Manifest = parse("manifest", &read_blob(layout, manifest_desc)?)?;
    let config_blob = read_blob(layout, &manifest.config)?;
    let config: ConfigBlob = parse("config", &config_blob)?;
    if config.rootfs.diff_ids.len() != manifest.layers.len() {
        return Err(format!(
            "image {}: the config lists {} layer diff_ids, the manifest {} layers",
            layout.display(),
            config.rootfs.diff_ids.len(),
            manifest.layers.len()
        ));
    }
    let runtime = config.config.unwrap_or_default();
    let image_config = ImageConfig {
        entrypoint: runtime.entrypoint.unwrap_or_default(),
        cmd: runtime.cmd.unwrap_or_default(),
        env: runtime
            .env
            .unwrap_or_default()
            .iter()
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (kv.clone(), String::new()),
            })
            .collect(),
        user: runtime.user.unwrap_or_default(),
        working_dir: runtime.working_dir.unwrap_or_default(),
    };
    let hex = manifest_desc
        .digest
        .strip_prefix("sha256:")
        .unwrap_or(&manifest_desc.digest)
        .to_string();
    let rootfs = cache.join(&hex);
    if !rootfs.join(".unpacked").exists() {
        fs::create_dir_all(cache).map_err(|e| format!("creating {}: {e}", cache.display()))?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let staging = cache.join(format!(".unpacking-{hex}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&staging);
        let result = unpack_layers(layout, &manifest.layers, &config.rootfs.diff_ids, &staging)
            .and_then(|()| {
                fs::write(staging.join(".unpacked"), &manifest_desc.digest)
                    .map_err(|e| format!("writing {}: {e}", staging.display()))
            });
        if let Err(e) = result {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        // Another test binary may have unpacked the same digest meanwhile: theirs stays.
        if fs::rename(&staging, &rootfs).is_err() {
            let _ = fs::remove_dir_all(&staging);
            if !rootfs.join(".unpacked").exists() {
                return Err(format!("moving the unpacked image to {}", rootfs.display()));
            }
        }
        prune(cache, &rootfs);
    }
    // The cache's clock: what was used lately stays (see `prune`).
    let _ =
        fs::File::open(rootfs.join(".unpacked")).and_then(|f| f.set_modified(SystemTime::now()));
    Ok(Unpacked {
        digest: manifest_desc.digest.clone(),
        config: image_config,
        rootfs,
    })
}

/// Remove the root filesystems of other digests nobody used for a day (a rebuilt test image
/// leaves its predecessor behind; suites running at the same time use the same one).
fn prune(cache: &Path, keep: &Path) {
    let Ok(entries) = fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == keep {
            continue;
        }
        let age = fs::metadata(path.join(".unpacked"))
            .or_else(|_| fs::metadata(&path))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if age.is_some_and(|a| a > Duration::from_secs(24 * 3600)) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

fn unpack_layers(
    layout: &Path,
    layers: &[Descriptor],
    diff_ids: &[String],
    root: &Path,
) -> Result<(), String> {
    fs::create_dir_all(root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        let blob = read_blob(layout, layer)?;
        let tar = if layer.media_type.ends_with("+gzip") || layer.media_type.ends_with(".gzip") {
            gunzip(&blob).map_err(|e| format!("gunzip of layer {}: {e}", layer.digest))?
        } else if layer.media_type.ends_with(".tar") || layer.media_type.ends_with("tar") {
            blob
        } else {
            return Err(format!(
                "layer {} has media type {:?}; the pod runner reads tar and tar+gzip layers",
                layer.digest, layer.media_type
            ));
        };
        let got = format!("sha256:{}", sha256_hex(&tar));
        if &got != diff_id {
            return Err(format!(
                "layer {} uncompresses to {got}, the config's diff_id is {diff_id}",
                layer.digest
            ));
        }
        super::tar::apply(&tar, root).map_err(|e| format!("layer {}: {e}", layer.digest))?;
    }
    Ok(())
}

/// The host's `gzip -dc` (the test binaries are unoptimized: the Rust inflater takes a minute for
/// the test image's layer under load, gzip a second), flate2 where there is no gzip.
fn gunzip(data: &[u8]) -> io::Result<Vec<u8>> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let child = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(data).read_to_end(&mut out)?;
        return Ok(out);
    };
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("gzip stdin"))?;
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| io::Error::other("gzip writer panicked"))??;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "gzip -dc: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// `path` inside the root filesystem `root`, refusing `..` and absolute escapes.
pub fn inside(root: &Path, path: &str) -> io::Result<PathBuf> {
    let mut out = root.to_path_buf();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("path {path:?} leaves the image's root"),
                ))
            }
        }
    }
    Ok(out)
}

/// `(uid, gid)` of the image's `User` (`uid`, `uid:gid`, `name`, `name:group`), names looked up in
/// the image's own `/etc/passwd` and `/etc/group`, the group defaulting to the user's.
pub fn image_user(rootfs: &Path, user: &str) -> Result<(u32, u32), String> {
    if user.is_empty() {
        return Ok((0, 0));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let passwd = fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    let entry = |name_or_id: &str| {
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4 && (f[0] == name_or_id || f[2] == name_or_id))
                .then(|| (f[2].parse::<u32>().ok(), f[3].parse::<u32>().ok()))
        })
    };
    let uid = match u.parse::<u32>() {
        Ok(uid) => uid,
        Err(_) => entry(u)
            .and_then(|(uid, _)| uid)
            .ok_or_else(|| format!("image user {u:?} is not in the image's /etc/passwd"))?,
    };
    let gid = match g {
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => {
                let group = fs::read_to_string(rootfs.join("etc/group")).unwrap_or_default();
                group
                    .lines()
                    .find_map(|l| {
                        let f: Vec<&str> = l.split(':').collect();
                        (f.len() >= 3 && f[0] == g).then(|| f[2].parse::<u32>().ok())?
                    })
                    .ok_or_else(|| format!("image group {g:?} is not in the image's /etc/group"))?
            }
        },
        None => entry(&uid.to_string())
            .and_then(|(_, gid)| gid)
            .unwrap_or(0),
    };
    Ok((uid, gid))
}

/// The home directory of `uid` in the image's `/etc/passwd`.
pub fn image_home(rootfs: &Path, uid: u32) -> Option<String> {
    let passwd = fs::read_to_string(rootfs.join("etc/passwd")).ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2] == uid.to_string()).then(|| f[5].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_resolve_by_id_and_name() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("etc")).unwrap();
        fs::write(
            dir.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        )
        .unwrap();
        fs::write(dir.path().join("etc/group"), "root:x:0:\nstaff:x:50:\n").unwrap();
        let r = dir.path();
        assert_eq!(image_user(r, "65532:65532").unwrap(), (65532, 65532));
        assert_eq!(image_user(r, "nonroot").unwrap(), (65532, 65532));
        assert_eq!(image_user(r, "65532").unwrap(), (65532, 65532));
        assert_eq!(image_user(r, "nonroot:staff").unwrap(), (65532, 50));
        assert_eq!(image_user(r, "1234").unwrap(), (1234, 0));
        assert_eq!(image_user(r, "").unwrap(), (0, 0));
        assert!(image_user(r, "ghost").unwrap_err().contains("\"ghost\""));
        assert_eq!(image_home(r, 65532).as_deref(), Some("/home/nonroot"));
    }

    #[test]
    fn paths_stay_inside_the_root() {
        let root = Path::new("/r");
        assert_eq!(
            inside(root, "/usr/bin/x").unwrap(),
            Path::new("/r/usr/bin/x")
        );
        assert_eq!(inside(root, "./etc").unwrap(), Path::new("/r/etc"));
        assert!(inside(root, "../etc").is_err());
        assert!(inside(root, "a/../../etc").is_err());
    }
}
