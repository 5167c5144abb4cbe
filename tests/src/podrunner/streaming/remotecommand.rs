//! `exec` and `attach` independent of the wire: what to run (from the kubelet URL the apiserver
//! builds), running it with the client's streams, and the `metav1.Status` kubelet reports on
//! the error stream when it ends (`v4.channel.k8s.io` and later), which kubectl turns into its
//! own exit code.

use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::super::exec::{self, ExecStdio, ExecTarget};
use super::super::kubelet::follow;
use super::super::registry::PodEntry;

/// An `exec` or `attach` request as the apiserver sends it on to the kubelet:
/// `/{exec,attach}/{ns}/{pod}[/{uid}]/{container}?command=..&input=1&output=1&error=1&tty=1`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub namespace: String,
    pub pod: String,
    pub uid: Option<String>,
    pub container: String,
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

fn truthy(v: &str) -> bool {
    matches!(v, "1" | "true" | "True" | "TRUE")
}

impl Request {
    /// Parse the path below `/exec/` or `/attach/` and the query.
    pub fn parse(rest: &str, query: &str) -> Result<Self, String> {
        let parts: Vec<&str> = rest.split('/').collect();
        let (namespace, pod, uid, container) = match parts[..] {
            [ns, pod, container] => (ns, pod, None, container),
            [ns, pod, uid, container] => (ns, pod, Some(uid.to_string()), container),
            _ => {
                return Err(format!(
                    "expected {{namespace}}/{{pod}}[/{{uid}}]/{{container}}, got {rest:?}"
                ))
            }
        };
        let mut request = Request {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            uid,
            container: container.to_string(),
            ..Request::default()
        };
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "command" => request.command.push(v.into_owned()),
                "input" | "stdin" => request.stdin = truthy(&v),
                "output" | "stdout" => request.stdout = truthy(&v),
                "error" | "stderr" => request.stderr = truthy(&v),
                "tty" => request.tty = truthy(&v),
                _ => {}
            }
        }
        if !(request.stdin || request.stdout || request.stderr) {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        // With a TTY the terminal merges stderr into stdout (kubelet's rule).
        if request.tty {
            request.stderr = false;
        }
        Ok(request)
    }
}

/// How long a TTY session waits for the client's first terminal size before starting.
const FIRST_SIZE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How a command ended, as reported on the error stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Exited(i32),
    /// It could not run (no such command, the container stopped, ...).
    Failed(String),
}

impl Outcome {
    /// The `metav1.Status` kubelet writes: Success; NonZeroExitCode with the code as the
    /// `ExitCode` cause (kubectl exits with it); InternalError otherwise.
    pub fn status(&self) -> serde_json::Value {
        match self {
            Outcome::Exited(0) => json!({"metadata": {}, "status": "Success"}),
            Outcome::Exited(code) => json!({
                "metadata": {},
                "status": "Failure",
                "message": format!("command terminated with non-zero exit code: exit status {code}"),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
            }),
            Outcome::Failed(message) => {
                let message = format!("error executing command in container: {message}");
                json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": format!("Internal error occurred: {message}"),
                    "reason": "InternalError",
                    "details": {"causes": [{"message": message}]},
                    "code": 500,
                })
            }
        }
    }
}

/// The client's side of a session, whatever the wire: data from the client's stdin (ends at
/// its EOF), sinks for stdout and stderr (closed by dropping them), terminal sizes (JSON
/// `{"Width":..,"Height":..}` objects, one or more per message, newline-separated).
#[derive(Debug, Default)]
pub struct Streams {
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    pub stdout: Option<mpsc::Sender<Bytes>>,
    pub stderr: Option<mpsc::Sender<Bytes>>,
    pub resize: Option<mpsc::Receiver<Bytes>>,
}

/// The terminal sizes in one resize message.
pub fn terminal_sizes(message: &[u8]) -> Vec<(u16, u16)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Size {
        width: u16,
        height: u16,
    }
    message
        .split(|b| *b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .filter_map(|line| serde_json::from_slice::<Size>(line).ok())
        .map(|s| (s.width, s.height))
        .collect()
}

/// A pseudo-terminal: the master (this side) and the slave (the command's stdio).
fn open_terminal() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    use std::os::unix::fs::OpenOptionsExt;
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOCTTY)
        .open(std::ffi::OsStr::from_bytes(name.as_bytes()))?;
    Ok((std::fs::File::from(master), slave))
}

async fn pump<R: AsyncRead + Unpin>(mut from: R, to: mpsc::Sender<Bytes>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Kills an exec'd process group when the session ends before the command does (the client
/// went away). Once the leader is reaped its id may be reused, so it is no longer tracked.
struct Tracked {
    entry: Arc<PodEntry>,
    pgid: Option<u32>,
    reaped: bool,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            self.entry.untrack_exec(pgid);
            if self.reaped {
                return;
            }
            if let Ok(pid) = i32::try_from(pgid) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Start `command` and track its process group with the Pod.
fn spawn_tracked(
    entry: Arc<PodEntry>,
    container: &str,
    target: &ExecTarget,
    command: &[String],
    stdio: ExecStdio,
) -> Result<(tokio::process::Child, Tracked), Outcome> {
    let child = exec::spawn(target, command, stdio).map_err(|e| Outcome::Failed(e.to_string()))?;
    let pgid = child.id();
    if let Some(pgid) = pgid {
        entry.track_exec(container, pgid);
    }
    let tracked = Tracked {
        entry,
        pgid,
        reaped: false,
    };
    Ok((child, tracked))
}

/// Run `command` in the container with `streams` (on a pseudo-terminal with `tty`, its output
/// on stdout); returns once it exited and its output was handed to the sinks.
pub async fn run_exec(
    entry: Arc<PodEntry>,
    container: &str,
    target: &ExecTarget,
    command: &[String],
    tty: bool,
    streams: Streams,
) -> Outcome {
    if tty {
        return run_on_terminal(entry, container, target, command, streams).await;
    }
    let Streams {
        stdin,
        stdout,
        stderr,
        resize: _,
    } = streams;
    let pipe_if = |wanted: bool| {
        if wanted {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    let stdio = ExecStdio::Pipes {
        stdin: pipe_if(stdin.is_some()),
        stdout: pipe_if(stdout.is_some()),
        stderr: pipe_if(stderr.is_some()),
    };
    let (mut child, mut tracked) = match spawn_tracked(entry, container, target, command, stdio) {
        Ok(x) => x,
        Err(outcome) => return outcome,
    };
    let mut pumps = Vec::new();
    if let (Some(mut rx), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // Not joined: a command that never reads its stdin must not hold the session open.
        tokio::spawn(async move {
            while let Some(data) = rx.recv().await {
                if pipe.write_all(&data).await.is_err() {
                    return;
                }
            }
            let _ = pipe.shutdown().await;
        });
    }
    if let (Some(tx), Some(pipe)) = (stdout, child.stdout.take()) {
        pumps.push(tokio::spawn(pump(pipe, tx)));
    }
    if let (Some(tx), Some(pipe)) = (stderr, child.stderr.take()) {
        pumps.push(tokio::spawn(pump(pipe, tx)));
    }
    let status = child.wait().await;
    tracked.reaped = status.is_ok();
    drop(tracked);
    for p in pumps {
        let _ = p.await;
    }
    exit_outcome(status)
}

fn exit_outcome(status: std::io::Result<std::process::ExitStatus>) -> Outcome {
    match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            // A signal ends it as a shell reports it: 128 + the signal number.
            Outcome::Exited(
                status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            )
        }
        Err(e) => Outcome::Failed(format!("waiting for the command: {e}")),
    }
}

/// `kubectl exec -t`: the command on a new pseudo-terminal, stdin written to its master, what
/// the master reads sent as stdout, window sizes applied to it.
async fn run_on_terminal(
    entry: Arc<PodEntry>,
    container: &str,
    target: &ExecTarget,
    command: &[String],
    streams: Streams,
) -> Outcome {
    let (master, slave) = match open_terminal() {
        Ok(pair) => pair,
        Err(e) => return Outcome::Failed(format!("allocating a terminal: {e}")),
    };
    let writer = match master.try_clone() {
        Ok(w) => w,
        Err(e) => return Outcome::Failed(format!("allocating a terminal: {e}")),
    };
    let sizer = match master.try_clone() {
        Ok(w) => w,
        Err(e) => return Outcome::Failed(format!("allocating a terminal: {e}")),
    };
    let apply = move |message: &[u8]| {
        for (width, height) in terminal_sizes(message) {
            let size = rustix::termios::Winsize {
                ws_row: height,
                ws_col: width,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            let _ = rustix::termios::tcsetwinsize(&sizer, size);
        }
    };
    if let Some(mut resize) = streams.resize {
        // kubectl sends its terminal's size as soon as the streams are up: wait a moment for it,
        // so the command starts with the right size rather than 0x0.
        let first = tokio::time::timeout(FIRST_SIZE_WAIT, resize.recv()).await;
        if let Ok(Some(message)) = &first {
            apply(message);
        }
        if !matches!(first, Ok(None)) {
            tokio::spawn(async move {
                while let Some(message) = resize.recv().await {
                    apply(&message);
                }
            });
        }
    }
    let stdio = ExecStdio::Terminal(slave);
    let (mut child, mut tracked) = match spawn_tracked(entry, container, target, command, stdio) {
        Ok(x) => x,
        Err(outcome) => return outcome,
    };
    if let Some(mut rx) = streams.stdin {
        let mut pipe = tokio::fs::File::from_std(writer);
        tokio::spawn(async move {
            while let Some(data) = rx.recv().await {
                if pipe.write_all(&data).await.is_err() || pipe.flush().await.is_err() {
                    return;
                }
            }
        });
    }
    // Reading the master ends (EIO) once every holder of the slave is gone.
    let output = streams
        .stdout
        .map(|tx| tokio::spawn(pump(tokio::fs::File::from_std(master), tx)));
    let status = child.wait().await;
    tracked.reaped = status.is_ok();
    drop(tracked);
    if let Some(output) = output {
        let _ = output.await;
    }
    exit_outcome(status)
}

/// The log of the running instance of `container`, if it runs.
fn running_log(entry: &PodEntry, container: &str) -> Option<std::path::PathBuf> {
    entry.state.lock().ok().and_then(|s| {
        s.containers
            .get(container)
            .filter(|c| c.running.is_some())
            .and_then(|c| c.current.map(|n| c.log(n)))
    })
}

/// Attach to a container's main process: what it prints from now on (stdout and stderr, as
/// the pod runner keeps them in one log), until it stops. Its stdin is not open (containers
/// run with stdin from /dev/null), so `kubectl attach -i` fails with a clear message.
pub async fn run_attach(entry: Arc<PodEntry>, request: &Request, streams: Streams) -> Outcome {
    if streams.stdin.is_some() {
        return Outcome::Failed(format!(
            "container {:?} has no stdin to attach to: the pod runner starts containers with \
             stdin closed (use kubectl exec -i)",
            request.container
        ));
    }
    let Some(log) = running_log(&entry, &request.container) else {
        return Outcome::Failed(format!("container {:?} is not running", request.container));
    };
    let Some(out) = streams.stdout.or(streams.stderr) else {
        return Outcome::Exited(0);
    };
    let offset = tokio::fs::metadata(&log)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    let (container, current) = (request.container.clone(), log.clone());
    let live = Arc::new(move || running_log(&entry, &container).as_ref() == Some(&current));
    let output = follow(Bytes::new(), log, offset, live);
    futures::pin_mut!(output);
    while let Some(Ok(frame)) = output.next().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if !data.is_empty() && out.send(data).await.is_err() {
            break;
        }
    }
    Outcome::Exited(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kubelet_exec_url() {
        let r = Request::parse(
            "ns/etcd-0/etcd",
            "command=etcdctl&command=--endpoints%3Dhttp%3A%2F%2Flocalhost%3A2379&command=member+list&output=1&error=1",
        )
        .unwrap();
        assert_eq!(r.namespace, "ns");
        assert_eq!(r.pod, "etcd-0");
        assert_eq!(r.container, "etcd");
        assert_eq!(r.uid, None);
        assert_eq!(
            r.command,
            [
                "etcdctl",
                "--endpoints=http://localhost:2379",
                "member list"
            ]
        );
        assert!(r.stdout && r.stderr && !r.stdin && !r.tty);

        let r =
            Request::parse("ns/p/uid-1/c", "command=sh&input=1&output=1&error=1&tty=1").unwrap();
        assert_eq!(r.uid.as_deref(), Some("uid-1"));
        assert!(r.stdin && r.stdout && r.tty);
        assert!(!r.stderr, "a TTY merges stderr into stdout");

        assert!(Request::parse("ns/p", "command=sh&output=1").is_err());
        assert!(Request::parse("ns/p/c", "command=sh").is_err());
    }

    #[test]
    fn resize_messages_carry_one_or_more_sizes() {
        assert_eq!(
            terminal_sizes(b"{\"Width\":80,\"Height\":24}\n"),
            [(80, 24)]
        );
        assert_eq!(
            terminal_sizes(b"{\"Width\":100,\"Height\":40}\n{\"Width\":120,\"Height\":50}"),
            [(100, 40), (120, 50)]
        );
        assert!(terminal_sizes(b"garbage").is_empty());
    }

    #[test]
    fn exit_codes_become_the_status_kubectl_reads() {
        assert_eq!(Outcome::Exited(0).status()["status"], "Success");
        let failed = Outcome::Exited(3).status();
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
        let internal = Outcome::Failed("no such file".into()).status();
        assert_eq!(internal["reason"], "InternalError");
        assert_eq!(internal["code"], 500);
    }
}
