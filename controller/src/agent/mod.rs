//! The snapshot agent: `etcd-operator snapshot-agent
//! save|restore|delete|verify|position|archive|replay`, the program a snapshot Job, a seed
//! member's `restore` init container, a schedule's prune Job, a verification Job and a survivor
//! recovery's position Job run (docs/snapshots.md, docs/disaster-recovery.md), and the
//! continuous archive's writer and replay (docs/point-in-time-recovery.md).
//!
//! Owns the command line of both subcommands, the outcome written to the termination log
//! (`{"artifact":{...}}` or `{"error":"..."}`) and the exit codes: 0 success, 2 a permanent
//! failure a retry cannot fix (overwrite refused, access denied, bad credentials, bad input),
//! 1 anything else. Saving is in [`save`], restoring in [`restore`], the storage backends in
//! [`s3`] (the agent's side of [`crate::objectstore`]; the concurrent part uploads in [`parts`])
//! and [`pvc`].

pub mod archive;
pub mod delete;
pub mod dial;
pub mod parts;
pub mod point_in_time;
pub mod position;
pub mod pvc;
pub mod replay;
pub mod restore;
pub mod s3;
pub mod save;
pub mod scratch;
pub mod verify;
pub mod wal;

use std::path::Path;

use crate::objectstore::Failure;

use serde::Serialize;

/// `etcd-operator snapshot-agent <save|restore>`.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum AgentCommand {
    /// Stream a snapshot of a running etcd cluster to S3 or a PVC.
    Save(save::SaveArgs),
    /// Fetch a snapshot and restore it into an empty member data directory.
    Restore(restore::RestoreArgs),
    /// Remove a pruned snapshot's file (and sidecars) from a PVC, if the snapshot wrote it.
    Delete(delete::DeleteArgs),
    /// Read a stored snapshot back, restore it into scratch space and compare its hashkv.
    Verify(verify::VerifyArgs),
    /// Read the raft position (term, commit index, member and cluster ID) from a stopped
    /// member's data dir (its write-ahead log).
    Position(position::PositionArgs),
    /// Archive every revision of a running cluster to S3, continuously (point-in-time
    /// recovery's archive), until SIGTERM.
    Archive(archive::ArchiveArgs),
    /// Replay an archive into a scratch etcd restored from its base snapshot, up to a revision,
    /// and compare the result with the cluster's recorded hashes.
    Replay(replay::ReplayArgs),
    /// Build a snapshot of the cluster at a revision (or the archive's newest) from a base
    /// snapshot and the archive, in a scratch etcd, and store it like any snapshot.
    PointInTime(point_in_time::PointInTimeArgs),
}

/// The stored snapshot, as `EtcdSnapshot.status.artifact` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub uri: String,
    pub size_bytes: u64,
    /// `sha256:<hex>`.
    pub checksum: String,
    /// The member's hashkv recorded by the save (what verification compares against).
    #[serde(rename = "hashKV", skip_serializing_if = "Option::is_none")]
    pub hash_kv: Option<verify::HashKv>,
}

/// What the termination log says.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    Artifact(Artifact),
    Restored(Artifact),
    Skipped(String),
    Deleted(String),
    LeftInPlace(String),
    Position(crate::agent_job::position::DiskPosition),
    Archived(String),
    Replayed(replay::Replayed),
    PointInTime(point_in_time::PointInTime),
    Error(String),
}

/// Run one agent command and turn its outcome into the termination log and an exit code.
pub async fn run(command: AgentCommand) -> i32 {
    let (log, result) = match command {
        AgentCommand::Verify(args) => return verify::main(args).await,
        AgentCommand::Save(args) => {
            let log = args.termination_log.clone();
            (log, save::run(args).await.map(Outcome::Artifact))
        }
        AgentCommand::Restore(args) => {
            let log = args.termination_log.clone();
            (log, restore::run(args).await)
        }
        AgentCommand::Archive(args) => {
            let log = args.termination_log.clone();
            (log, archive::run(args).await.map(Outcome::Archived))
        }
        AgentCommand::Replay(args) => {
            let log = args.termination_log.clone();
            (log, replay::run(args).await.map(Outcome::Replayed))
        }
        AgentCommand::PointInTime(args) => {
            let log = args.termination_log.clone();
            (
                log,
                point_in_time::run(args).await.map(Outcome::PointInTime),
            )
        }
        AgentCommand::Position(args) => {
            let log = args.termination_log.clone();
            (log, position::run(&args).map(Outcome::Position))
        }
        AgentCommand::Delete(args) => {
            let log = args.termination_log.clone();
            (
                log,
                delete::run(&args).map(|r| match r {
                    delete::Removed::Deleted(what) => Outcome::Deleted(what),
                    delete::Removed::LeftInPlace(why) => Outcome::LeftInPlace(why),
                }),
            )
        }
    };
    match result {
        Ok(outcome) => {
            write_termination_log(&log, &outcome);
            0
        }
        Err(failure) => {
            tracing::error!(permanent = failure.permanent, "{}", failure.message);
            write_termination_log(&log, &Outcome::Error(failure.message.clone()));
            i32::from(failure.exit_code())
        }
    }
}

fn write_termination_log(path: &Path, outcome: &Outcome) {
    let text = match serde_json::to_string(outcome) {
        Ok(t) => t,
        Err(e) => format!(r#"{{"error":"serialising the outcome: {e}"}}"#),
    };
    println!("{text}");
    if let Err(e) = std::fs::write(path, &text) {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the termination log");
    }
}

/// A snapshot name usable as a file name and key segment (a Kubernetes object name).
pub fn check_snapshot_name(name: &str) -> Result<(), Failure> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Failure::permanent(format!(
            "--snapshot-name {name:?} is not a valid EtcdSnapshot name (lower-case letters, digits, '-' and '.'); \
             pass the EtcdSnapshot's metadata.name"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_json_matches_the_contract() {
        let a = Artifact {
            uri: "s3://b/k.db".into(),
            size_bytes: 42,
            checksum: "sha256:ab".into(),
            hash_kv: None,
        };
        assert_eq!(
            serde_json::to_string(&Outcome::Artifact(a)).unwrap(),
            r#"{"artifact":{"uri":"s3://b/k.db","sizeBytes":42,"checksum":"sha256:ab"}}"#
        );
        assert_eq!(
            serde_json::to_string(&Outcome::Error("no \"x\"".into())).unwrap(),
            r#"{"error":"no \"x\""}"#
        );
        // What the controller's AgentReport reads from a prune Job.
        let left = serde_json::to_string(&Outcome::LeftInPlace("theirs".into())).unwrap();
        assert_eq!(left, r#"{"leftInPlace":"theirs"}"#);
        assert_eq!(
            crate::agent_job::AgentReport::parse(&left).and_then(|r| r.left_in_place),
            Some("theirs".to_string())
        );
    }

    #[test]
    fn snapshot_names_are_checked() {
        assert!(check_snapshot_name("daily-1.x").is_ok());
        for bad in ["", "../x", "a/b", "A", ".hidden"] {
            let e = check_snapshot_name(bad).unwrap_err();
            assert!(
                e.permanent && e.message.contains("--snapshot-name"),
                "{bad}"
            );
        }
    }
}
