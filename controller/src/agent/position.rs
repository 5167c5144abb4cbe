//! `snapshot-agent position`: the raft position a member's data dir holds, for a member whose
//! etcd does not run (a survivor recovery's position Job, docs/disaster-recovery.md). Reads the
//! write-ahead log under `<data-dir>/member/wal` with [`super::wal`] and reports
//! `{"position":{...}}`; never writes to the data dir (the Job mounts it read-only).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use super::wal::{wal_files, WalReader};
use crate::agent_job::position::DiskPosition;
use crate::objectstore::Failure;

#[derive(clap::Args, Debug, Clone)]
pub struct PositionArgs {
    /// The member's etcd data dir (its `--data-dir`): the WAL is `<data-dir>/member/wal`.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The member's name (for messages).
    #[arg(long, default_value = "")]
    pub member: String,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
}

/// The position of the WAL under `data_dir`.
pub fn read_data_dir(data_dir: &Path) -> Result<DiskPosition, Failure> {
    let dir = data_dir.join("member").join("wal");
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        let fix = if e.kind() == std::io::ErrorKind::NotFound {
            ": this is not an etcd member's data dir (check --data-dir and the member's \
             data-dir-subpath annotation), or the member never started"
        } else {
            ""
        };
        Failure::permanent(format!("cannot list {}: {e}{fix}", dir.display()))
    })?;
    let mut names = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| Failure::transient(format!("listing {}: {e}", dir.display())))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    let files =
        wal_files(names).map_err(|e| Failure::permanent(format!("{}: {e}", dir.display())))?;
    let mut reader = WalReader::new();
    let count = files.len();
    for (n, file) in files.iter().enumerate() {
        let path = dir.join(&file.name);
        let opened = File::open(&path)
            .and_then(|f| f.metadata().map(|m| (m.len(), f)))
            .map_err(|e| Failure::transient(format!("opening {}: {e}", path.display())))?;
        let (size, f) = opened;
        reader
            .read_file(&file.name, size, BufReader::new(f), n + 1 == count)
            .map_err(|e| Failure::permanent(format!("{}: {e}", dir.display())))?;
    }
    reader
        .position()
        .map_err(|e| Failure::permanent(format!("{}: {e}", dir.display())))
}

/// The command: the position, logged.
pub fn run(args: &PositionArgs) -> Result<DiskPosition, Failure> {
    let p = read_data_dir(&args.data_dir)?;
    tracing::info!(
        member = %args.member,
        member_id = %format!("{:x}", p.member_id),
        cluster_id = %format!("{:x}", p.cluster_id),
        term = p.term,
        commit = p.commit,
        last_index = p.last_index,
        "raft position read from the WAL"
    );
    Ok(p)
}
