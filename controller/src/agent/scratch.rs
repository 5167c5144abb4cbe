//! A scratch etcd: a snapshot restored into the agent's scratch space as a one-member cluster, and
//! an etcd started on it on loopback for as long as the agent needs it (the verification of an
//! etcd 3.5 snapshot, the point-in-time build). Nothing outside the Job reaches it; the process
//! is killed when [`Scratch`] is dropped.

use std::path::Path;
use std::process::{ExitStatus, Stdio};

use crate::objectstore::Failure;

/// The member's name inside a scratch restore (nothing outside the Job sees it).
const NAME: &str = "scratch";

/// `etcdutl snapshot restore` of `db` into `out` as a one-member cluster at `peer`, without
/// moving the revision (the scratch etcd must hold the snapshot's own history). Its output on
/// failure.
pub async fn restore(etcdutl: &Path, db: &Path, out: &Path, peer: &str) -> Result<(), String> {
    let output = tokio::process::Command::new(etcdutl)
        .arg("snapshot")
        .arg("restore")
        .arg(db)
        .arg(format!("--name={NAME}"))
        .arg(format!("--initial-cluster={NAME}={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--data-dir={}", out.display()))
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("running {}: {e}", etcdutl.display()))?;
    if output.status.success() && out.join("member/snap/db").is_file() {
        return Ok(());
    }
    Err(format!(
        "{} snapshot restore failed ({}): {}",
        etcdutl.display(),
        output.status,
        tail(&output.stderr, &output.stdout)
    ))
}

/// The last lines a tool printed, for a message.
pub fn tail(stderr: &[u8], stdout: &[u8]) -> String {
    let text = if stderr.is_empty() { stdout } else { stderr };
    let text = String::from_utf8_lossy(text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// A free port on loopback (for the scratch etcd's peer and client URLs).
pub fn free_port() -> Result<u16, Failure> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Failure::transient(format!("finding a free loopback port: {e}")))
}

/// An etcd running on a data dir [`restore`]d for `peer`.
pub struct Scratch {
    child: tokio::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub client_url: String,
}

impl Scratch {
    /// Start `etcd` on `data` (restored for `peer`), serving clients on a free loopback port;
    /// `extra`: more flags (`--max-txn-ops=...`). Its output is discarded.
    pub fn start(
        etcd: &Path,
        data: &Path,
        peer: &str,
        extra: &[String],
    ) -> Result<Scratch, Failure> {
        let client_url = format!("http://127.0.0.1:{}", free_port()?);
        let child = tokio::process::Command::new(etcd)
            .arg(format!("--name={NAME}"))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={NAME}={peer}"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::permanent(format!("running {}: {e}", etcd.display())))?;
        Ok(Scratch { child, client_url })
    }

    /// The exit status, once the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Stop the process and wait for it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
