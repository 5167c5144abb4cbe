//! Where component logs go, and showing them when a test fails.
//!
//! Every component writes stdout and stderr to one file under
//! `${CARGO_TARGET_DIR:-<workspace>/target}/test-logs/<test binary>-<pid>/<control plane>/`, kept
//! after the run. A panic hook (installed with the first registered log) prints the tail of every
//! registered log once, on the first failure in the test binary; later failures print only where
//! the logs are, so one broken apiserver does not bury the assertion messages.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

/// Lines of each log shown on failure.
pub const TAIL_LINES: usize = 40;

/// Log dirs of finished runs of the same test binary kept besides the current one.
const KEEP_OLD_RUNS: usize = 3;

static REGISTERED: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();
static TAILS_PRINTED: AtomicBool = AtomicBool::new(false);

/// Cargo's target directory: `$CARGO_TARGET_DIR` when set, else the directory the test binary
/// runs from (`<target>/<profile>/deps/<binary>`), else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return if dir.is_absolute() {
            dir
        } else {
            workspace.join(dir)
        };
    }
    if let Ok(exe) = std::env::current_exe() {
        let deps = exe.parent();
        if deps.and_then(Path::file_name).is_some_and(|n| n == "deps") {
            if let Some(target) = deps.and_then(Path::parent).and_then(Path::parent) {
                return target.to_path_buf();
            }
        }
    }
    workspace.join("target")
}

/// The test binary's name without Cargo's hash suffix (`api_crds-0123abcd...` -> `api_crds`).
pub fn binary_name() -> String {
    let stem = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "tests".to_string());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => stem,
    }
}

/// This test binary's log directory (`<target>/test-logs/<binary>-<pid>`), created on first use;
/// older runs' directories of the same binary beyond the newest few are removed then.
pub fn run_dir() -> PathBuf {
    static PRUNED: Once = Once::new();
    let base = target_dir().join("test-logs");
    let name = binary_name();
    let dir = base.join(format!("{name}-{}", std::process::id()));
    PRUNED.call_once(|| prune_old_runs(&base, &name));
    dir
}

fn prune_old_runs(base: &Path, binary: &str) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    let prefix = format!("{binary}-");
    let mut old: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !super::process::pid_alive(pid))
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    old.sort();
    let excess = old.len().saturating_sub(KEEP_OLD_RUNS);
    for (_, path) in old.into_iter().take(excess) {
        let _ = fs::remove_dir_all(path);
    }
}

/// Remember a component's log so a failing test shows its tail.
pub fn register(component: &str, path: &Path) {
    if let Ok(mut logs) = REGISTERED.lock() {
        logs.push((component.to_string(), path.to_path_buf()));
    }
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            print_on_failure();
        }));
    });
}

fn print_on_failure() {
    let Ok(logs) = REGISTERED.lock() else {
        return;
    };
    if logs.is_empty() {
        return;
    }
    if TAILS_PRINTED.swap(true, Ordering::SeqCst) {
        eprintln!(
            "component logs: {}",
            logs.iter()
                .map(|(_, p)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return;
    }
    for (component, path) in logs.iter() {
        eprintln!(
            "---- last {TAIL_LINES} lines of {component} ({}) ----\n{}",
            path.display(),
            tail(path, TAIL_LINES)
        );
    }
}

/// The last `lines` lines of a file (reads at most the last 64 KiB).
pub fn tail(path: &Path, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        fs::write(&path, text).unwrap();
        assert_eq!(tail(&path, 2), "line 99\nline 100");
        assert!(tail(&dir.path().join("absent"), 2).starts_with("(cannot read"));
    }

    #[test]
    fn binary_name_drops_cargo_hash() {
        // The unit-test binary of this crate is `tests-<hash>`.
        assert_eq!(binary_name(), "tests");
    }
}
