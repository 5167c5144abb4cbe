//! Running a command inside a running container: its network, UTS and mount namespaces (entered
//! through `/proc/<pid>/ns/*`), its user and groups, its environment and working directory, the
//! command looked up on its image's `PATH`. Used by exec probes, preStop hooks,
//! [`super::PodRunner::exec`] and the kubelet's streaming `exec` endpoint.

use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::images::resolve_command;
pub use super::images::ResolvedImage;
use super::sandbox::{self, Identity, Plan};
use super::Error;
use crate::env::process::contain;

/// How to get into one running container.
#[derive(Clone, Debug)]
pub struct ExecTarget {
    /// `<ns>/<pod>/<container>`, for messages.
    pub name: String,
    pub pid: u32,
    pub env: Vec<(String, String)>,
    pub identity: Option<Identity>,
    pub image: ResolvedImage,
    pub workdir: Option<PathBuf>,
    pub no_new_privs: bool,
}

/// What an exec printed, and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit code; `None` when killed by a signal (or the timeout).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

fn open_ns(pid: u32, kind: &str) -> Result<File, Error> {
    let path = format!("/proc/{pid}/ns/{kind}");
    File::open(&path).map_err(Error::io(format!(
        "opening {path} (is the container running?)"
    )))
}

/// Where an exec'd command's standard streams go.
#[derive(Debug)]
pub enum ExecStdio {
    Pipes {
        stdin: Stdio,
        stdout: Stdio,
        stderr: Stdio,
    },
    /// All three on this pseudo-terminal slave, which becomes the controlling terminal of a new
    /// session (`TERM=xterm` unless the container sets it, as containerd does).
    Terminal(File),
}

/// Start `argv` in the container with the given stdio, in its own process group (with a
/// terminal: its own session), with a parent-death signal (so it cannot outlive the runner).
pub fn spawn(
    target: &ExecTarget,
    argv: &[String],
    stdio: ExecStdio,
) -> Result<tokio::process::Child, Error> {
    let program = argv
        .first()
        .ok_or_else(|| Error::Unsupported("exec needs a command".into()))?;
    let path = resolve_command(&target.image, program)
        .map(|p| target.image.in_container(&p))
        .map_err(|message| Error::Unsupported(format!("exec in {}: {message}", target.name)))?;
    let workdir =
        match &target.workdir {
            Some(dir) => Some(CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
                Error::Unsupported(format!("workingDir {} has a NUL", dir.display()))
            })?),
            None => Some(CString::from(c"/")),
        };
    let mut cmd = Command::new(&path);
    cmd.arg0(program)
        .args(&argv[1..])
        .env_clear()
        .envs(target.env.iter().map(|(k, v)| (k, v)));
    let tty = match stdio {
        ExecStdio::Pipes {
            stdin,
            stdout,
            stderr,
        } => {
            cmd.stdin(stdin).stdout(stdout).stderr(stderr);
            None
        }
        ExecStdio::Terminal(slave) => {
            let dup = || {
                slave
                    .try_clone()
                    .map_err(Error::io("duplicating the terminal"))
            };
            cmd.stdin(dup()?).stdout(dup()?).stderr(dup()?);
            if !target.env.iter().any(|(k, _)| k == "TERM") {
                cmd.env("TERM", "xterm");
            }
            Some(slave)
        }
    };
    let in_session = tty.is_some();
    let plan = Plan {
        join_net: Some(open_ns(target.pid, "net")?),
        join_uts: Some(open_ns(target.pid, "uts")?),
        join_mnt: Some(open_ns(target.pid, "mnt")?),
        identity: target.identity.clone(),
        no_new_privs: target.no_new_privs,
        workdir,
        controlling_tty: tty,
        parent_death_signal: in_session,
        ..Plan::default()
    };
    let progress = sandbox::install(&mut cmd, plan)
        .map_err(Error::io(format!("preparing exec in {}", target.name)))?;
    if !in_session {
        // After the sandbox steps: changing the uid clears the parent-death signal.
        contain(&mut cmd);
    }
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let spawned = cmd.spawn();
    match spawned {
        Ok(child) => Ok(child),
        Err(e) => {
            drop(cmd);
            Err(Error::Io {
                what: format!(
                    "exec {program} in {} failed while {}",
                    target.name,
                    progress.failed_step()
                ),
                source: e,
            })
        }
    }
}

/// Run `argv` in the container with `stdin`, killing it after `timeout`.
pub async fn exec(
    target: &ExecTarget,
    argv: &[String],
    stdin: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<ExecOutput, Error> {
    let stdin_pipe = if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    let mut child = spawn(
        target,
        argv,
        ExecStdio::Pipes {
            stdin: stdin_pipe,
            stdout: Stdio::piped(),
            stderr: Stdio::piped(),
        },
    )?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        tokio::spawn(async move {
            let _ = pipe.write_all(&input).await;
        });
    }
    let pgid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => Ok(ExecOutput {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            timed_out: false,
        }),
        Ok(Err(e)) => Err(Error::io(format!("waiting for exec in {}", target.name))(e)),
        Err(_) => {
            // The child was dropped (and killed); take whatever it started with it.
            if let Some(pgid) = pgid.and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pgid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Ok(ExecOutput {
                code: None,
                timed_out: true,
                ..ExecOutput::default()
            })
        }
    }
}
