//! Applying one image layer (a tar stream) onto a root filesystem, as a container runtime does:
//! ustar/GNU/PAX headers, regular files, directories, symbolic and hard links with their modes
//! and owners; OCI whiteouts (`.wh.<name>` removes `<name>`, `.wh..wh..opq` empties its directory);
//! device nodes and FIFOs are skipped (nothing the operator image ships). No path may leave the
//! root, neither by `..` nor through a symbolic link the layers made.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::unpack::inside;

const BLOCK: usize = 512;
const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// A NUL-terminated header field.
fn field(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// An octal number field (or GNU's base-256 form, high bit set).
fn number(bytes: &[u8]) -> io::Result<u64> {
    if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        let mut n: u64 = u64::from(bytes[0] & 0x7f);
        for b in &bytes[1..] {
            n = n
                .checked_mul(256)
                .and_then(|n| n.checked_add(u64::from(*b)))
                .ok_or_else(|| invalid("base-256 number overflows".into()))?;
        }
        return Ok(n);
    }
    let text = field(bytes);
    let text = text.trim_matches(|c: char| c == ' ' || c == '\0');
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).map_err(|e| invalid(format!("header number {text:?}: {e}")))
}

/// PAX extended header records: `<len> <key>=<value>\n`.
fn pax(data: &[u8]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = data;
    while let Some(space) = rest.iter().position(|b| *b == b' ') {
        let Some(len) = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|l| l.parse::<usize>().ok())
        else {
            break;
        };
        if len <= space || len > rest.len() {
            break;
        }
        let record = &rest[space + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(eq) = record.iter().position(|b| *b == b'=') {
            out.insert(
                String::from_utf8_lossy(&record[..eq]).into_owned(),
                String::from_utf8_lossy(&record[eq + 1..]).into_owned(),
            );
        }
        rest = &rest[len..];
    }
    out
}

/// Fail when a directory on the way from `root` to `path`'s parent is a symbolic link: a layer's
/// link must not carry later entries out of the root.
fn check_parents(root: &Path, path: &Path) -> io::Result<()> {
    let Ok(rel) = path.strip_prefix(root) else {
        return Err(invalid(format!("{} is outside the root", path.display())));
    };
    let mut at = root.to_path_buf();
    let parents: Vec<_> = rel.components().collect();
    for c in parents.iter().take(parents.len().saturating_sub(1)) {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(invalid(format!(
                    "{} goes through the symbolic link {}",
                    path.display(),
                    at.display()
                )))
            }
            Ok(m) if !m.is_dir() => {
                return Err(invalid(format!("{} is not a directory", at.display())))
            }
            Ok(_) => {}
            Err(_) => fs::create_dir_all(&at)?,
        }
    }
    Ok(())
}

/// Remove what is at `path` unless it is a directory and `keep_dir`.
fn clear(path: &Path, keep_dir: bool) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() && keep_dir => Ok(()),
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => Ok(()),
    }
}

fn own(path: &Path, uid: u64, gid: u64) -> io::Result<()> {
    let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
        return Err(invalid(format!("owner {uid}:{gid} of {}", path.display())));
    };
    match std::os::unix::fs::lchown(path, Some(uid), Some(gid)) {
        // Not root: the files stay the caller's, as with a rootless runtime.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(()),
        other => other,
    }
}

/// Apply the tar stream `tar` onto `root`.
pub fn apply(tar: &[u8], root: &Path) -> io::Result<()> {
    let mut offset = 0;
    let mut next_path: Option<String> = None;
    let mut next_link: Option<String> = None;
    let mut next_pax: HashMap<String, String> = HashMap::new();
    while offset + BLOCK <= tar.len() {
        let header = &tar[offset..offset + BLOCK];
        if header.iter().all(|b| *b == 0) {
            return Ok(());
        }
        let stored: u64 = header
            .iter()
            .enumerate()
            .map(|(i, b)| u64::from(if (148..156).contains(&i) { b' ' } else { *b }))
            .sum();
        if number(&header[148..156])? != stored {
            return Err(invalid(format!("bad header checksum at byte {offset}")));
        }
        let kind = header[156];
        let mut size = number(&header[124..136])?;
        if let Some(s) = next_pax.get("size").and_then(|s| s.parse().ok()) {
            size = s;
        }
        let size = usize::try_from(size).map_err(|_| invalid("entry too large".into()))?;
        let data_start = offset + BLOCK;
        let data_end = data_start
            .checked_add(size)
            .filter(|e| *e <= tar.len())
            .ok_or_else(|| invalid(format!("entry at byte {offset} runs past the end")))?;
        let data = &tar[data_start..data_end];
        offset = data_start + size.div_ceil(BLOCK) * BLOCK;

        match kind {
            b'x' => {
                next_pax = pax(data);
                continue;
            }
            b'g' => continue,
            b'L' => {
                next_path = Some(field(data));
                continue;
            }
            b'K' => {
                next_link = Some(field(data));
                continue;
            }
            _ => {}
        }
        let mut name = field(&header[0..100]);
        if &header[257..262] == b"ustar" {
            let prefix = field(&header[345..500]);
            if !prefix.is_empty() {
                name = format!("{prefix}/{name}");
            }
        }
        let pax_now = std::mem::take(&mut next_pax);
        let name = next_path
            .take()
            .or_else(|| pax_now.get("path").cloned())
            .unwrap_or(name);
        let link = next_link
            .take()
            .or_else(|| pax_now.get("linkpath").cloned())
            .unwrap_or_else(|| field(&header[157..257]));
        let mode = (number(&header[100..108])? & 0o7777) as u32;
        let uid = pax_now
            .get("uid")
            .and_then(|v| v.parse().ok())
            .map_or_else(|| number(&header[108..116]), Ok)?;
        let gid = pax_now
            .get("gid")
            .and_then(|v| v.parse().ok())
            .map_or_else(|| number(&header[116..124]), Ok)?;

        let path = inside(root, &name)?;
        if path == root {
            if kind == b'5' {
                fs::set_permissions(root, fs::Permissions::from_mode(mode))?;
                own(root, uid, gid)?;
            }
            continue;
        }
        check_parents(root, &path)?;
        let base = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if base == OPAQUE {
            if let Some(dir) = path.parent() {
                for entry in fs::read_dir(dir)? {
                    clear(&entry?.path(), false)?;
                }
            }
            continue;
        }
        if let Some(hidden) = base.strip_prefix(WHITEOUT) {
            clear(&path.with_file_name(hidden), false)?;
            continue;
        }
        match kind {
            b'0' | 0 | b'7' => {
                clear(&path, false)?;
                fs::write(&path, data)?;
                own(&path, uid, gid)?;
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
            }
            b'5' => {
                clear(&path, true)?;
                fs::create_dir_all(&path)?;
                own(&path, uid, gid)?;
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
            }
            b'2' => {
                clear(&path, false)?;
                std::os::unix::fs::symlink(&link, &path)?;
                own(&path, uid, gid)?;
            }
            b'1' => {
                let target: PathBuf = inside(root, &link)?;
                check_parents(root, &target)?;
                clear(&path, false)?;
                fs::hard_link(&target, &path)?;
            }
            // Character and block devices, FIFOs: nothing to make for a process on the host.
            b'3' | b'4' | b'6' => {}
            other => {
                return Err(invalid(format!(
                    "entry {name:?} has tar type {:?}, which a layer does not hold",
                    other as char
                )))
            }
        }
    }
    Err(invalid("the tar stream ends without its end blocks".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One ustar header block (+ data) for the tests.
    fn entry(name: &str, kind: u8, mode: u32, data: &[u8], link: &str) -> Vec<u8> {
        let mut h = vec![0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(format!("{mode:07o}").as_bytes());
        h[108..115].copy_from_slice(b"0000000");
        h[116..123].copy_from_slice(b"0000000");
        h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        h.extend_from_slice(data);
        h.resize(h.len().div_ceil(BLOCK) * BLOCK, 0);
        h
    }

    fn end(mut v: Vec<u8>) -> Vec<u8> {
        v.extend_from_slice(&[0u8; 2 * BLOCK]);
        v
    }

    #[test]
    fn files_dirs_links_and_whiteouts() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut layer = Vec::new();
        layer.extend(entry("./", b'5', 0o755, b"", ""));
        layer.extend(entry("usr/local/bin/", b'5', 0o755, b"", ""));
        layer.extend(entry("usr/local/bin/tool", b'0', 0o755, b"#!", ""));
        layer.extend(entry("usr/local/bin/alias", b'2', 0o777, b"", "tool"));
        layer.extend(entry(
            "usr/local/bin/hard",
            b'1',
            0o755,
            b"",
            "usr/local/bin/tool",
        ));
        layer.extend(entry("tmp/", b'5', 0o1777, b"", ""));
        layer.extend(entry("etc/gone", b'0', 0o644, b"x", ""));
        apply(&end(layer), root).unwrap();
        let tool = root.join("usr/local/bin/tool");
        assert_eq!(fs::read(&tool).unwrap(), b"#!");
        assert_eq!(
            fs::metadata(&tool).unwrap().permissions().mode() & 0o7777,
            0o755
        );
        assert_eq!(
            fs::read_link(root.join("usr/local/bin/alias")).unwrap(),
            Path::new("tool")
        );
        assert_eq!(fs::read(root.join("usr/local/bin/hard")).unwrap(), b"#!");
        assert_eq!(
            fs::metadata(root.join("tmp")).unwrap().permissions().mode() & 0o7777,
            0o1777
        );

        let mut upper = entry("etc/.wh.gone", b'0', 0o644, b"", "");
        upper.extend(entry("usr/local/bin/.wh..wh..opq", b'0', 0o644, b"", ""));
        apply(&end(upper), root).unwrap();
        assert!(!root.join("etc/gone").exists());
        assert!(root.join("usr/local/bin").is_dir());
        assert_eq!(fs::read_dir(root.join("usr/local/bin")).unwrap().count(), 0);
    }

    #[test]
    fn escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir(&root).unwrap();
        let up = end(entry("../evil", b'0', 0o644, b"x", ""));
        assert!(apply(&up, &root).is_err());
        let mut through_link = entry("out", b'2', 0o777, b"", "/");
        through_link.extend(entry("out/evil", b'0', 0o644, b"x", ""));
        let err = apply(&end(through_link), &root).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let mut bad = entry("x", b'0', 0o644, b"x", "");
        bad[0] = b'y';
        assert!(apply(&end(bad), &root)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
        assert!(apply(&entry("x", b'0', 0o644, b"x", ""), &root).is_err());
    }
}
