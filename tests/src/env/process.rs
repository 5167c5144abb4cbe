//! Child processes that cannot outlive the test binary.
//!
//! Each child runs in its own process group (so killing it takes whatever it started) with
//! `PR_SET_PDEATHSIG=SIGKILL` (so the kernel kills it when the test binary dies, even by SIGKILL,
//! where no destructor runs). The parent-death signal fires when the *thread* that forked the child
//! exits, not the process; test threads and tokio's blocking pool come and go, so long-lived
//! children are forked on one spawner thread that lives as long as the process.
//!
//! [`Process`] kills its group on drop. What escapes both (a shared control plane whose statics are
//! never dropped is covered by the death signal; a crash of the kernel's bookkeeping is not) is
//! left to the sweeper in `.ci/run`.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::{logs, Error};

/// Put `cmd`'s child in its own process group with a parent-death signal. The signal is tied to
/// the thread that spawns it: spawn long-lived children through [`Process::spawn`].
pub fn contain(cmd: &mut Command) -> &mut Command {
    let parent = nix::unistd::getpid();
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec. It makes only the prctl(2) and
    // getppid(2) system calls, both async-signal-safe, and neither allocates nor takes locks. If
    // the parent died between fork and prctl, the signal will never come, so the child gives up.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != parent {
                return Err(io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
    cmd
}

type Job = Box<dyn FnOnce() + Send>;

/// Run `job` on the spawner thread, which never exits while the process lives.
fn on_spawner_thread<T: Send + 'static>(job: impl FnOnce() -> T + Send + 'static) -> T {
    static SPAWNER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("testbins-spawner".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .expect("starting the spawner thread");
        tx
    });
    let (tx, rx) = mpsc::sync_channel(1);
    sender
        .send(Box::new(move || {
            let _ = tx.send(job());
        }))
        .expect("the spawner thread lives as long as the process");
    rx.recv()
        .expect("the spawner thread answers every job it takes")
}

/// Whether a process with this pid exists (not a zombie check; good enough to tell a finished
/// test run's leftovers from a running one).
pub fn pid_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// What a [`Process`] was started from (program, arguments, environment changes, working
/// directory), so that it can be started again the same way ([`Process::start_again`]).
#[derive(Clone, Debug)]
struct Recipe {
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
}

impl Recipe {
    fn of(cmd: &Command) -> Self {
        Self {
            program: cmd.get_program().to_os_string(),
            args: cmd.get_args().map(|a| a.to_os_string()).collect(),
            envs: cmd
                .get_envs()
                .map(|(k, v)| (k.to_os_string(), v.map(|v| v.to_os_string())))
                .collect(),
            cwd: cmd.get_current_dir().map(Path::to_path_buf),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (key, value) in &self.envs {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        cmd
    }
}

/// A running component: its own process group, output appended to one log file, killed (with its
/// whole group) on drop. It can be stopped and started again the same way (the fault suites'
/// outages of a component), in place: whoever holds it keeps holding the new process.
pub struct Process {
    name: String,
    pid: AtomicU32,
    log: PathBuf,
    child: Mutex<Child>,
    recipe: Mutex<Recipe>,
}

/// Fork `cmd` contained, its output appended to `log`.
fn launch(name: &str, mut cmd: Command, log: &Path) -> Result<Child, Error> {
    if let Some(dir) = log.parent() {
        fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
    }
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(Error::io(format!("opening {}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(Error::io(format!("opening {}", log.display())))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    contain(&mut cmd);
    let program = cmd.get_program().to_string_lossy().into_owned();
    on_spawner_thread(move || cmd.spawn())
        .map_err(Error::io(format!("starting {name} ({program})")))
}

impl Process {
    /// Start `cmd` as `name`, stdout and stderr appended to `log`, contained as [`contain`] does,
    /// forked on the long-lived spawner thread. The log is registered for printing on failure.
    pub fn spawn(name: &str, cmd: Command, log: &Path) -> Result<Self, Error> {
        let recipe = Recipe::of(&cmd);
        let child = launch(name, cmd, log)?;
        logs::register(name, log);
        Ok(Self {
            name: name.to_string(),
            pid: AtomicU32::new(child.id()),
            log: log.to_path_buf(),
            child: Mutex::new(child),
            recipe: Mutex::new(recipe),
        })
    }

    /// Stop the process group as a supervisor does: SIGTERM, then SIGKILL once `grace` has passed
    /// (`Duration::ZERO`: SIGKILL at once, a crash). Returns when the leader has been reaped.
    /// Async so that a caller's other tasks (a workload measuring the outage) keep running.
    pub async fn stop(&self, grace: Duration) {
        self.note(&format!("stopping (grace {grace:?})"));
        if !grace.is_zero() {
            self.signal_group(Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && self.exited().is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.kill();
    }

    /// Start the process again from what it was first started with (same program, arguments,
    /// environment: same ports and data), killing what is left of the previous one first. The
    /// log goes on in the same file, after a line saying so. The caller waits for readiness.
    pub fn start_again(&self) -> Result<(), Error> {
        let recipe = self
            .recipe
            .lock()
            .map_err(|_| Error::Unsupported(format!("{}: recipe lock poisoned", self.name)))?
            .clone();
        self.respawn(recipe.command())
    }

    /// [`Process::start_again`] from another command (say, a listener that was first given port
    /// 0 now told the port it got), which also becomes what a later `start_again` runs.
    pub fn start_again_with(&self, cmd: Command) -> Result<(), Error> {
        let recipe = Recipe::of(&cmd);
        self.respawn(cmd)?;
        if let Ok(mut r) = self.recipe.lock() {
            *r = recipe;
        }
        Ok(())
    }

    fn respawn(&self, cmd: Command) -> Result<(), Error> {
        self.kill();
        self.note("starting again");
        let child = launch(&self.name, cmd, &self.log)?;
        let pid = child.id();
        let mut slot = self
            .child
            .lock()
            .map_err(|_| Error::Unsupported(format!("{}: child lock poisoned", self.name)))?;
        *slot = child;
        self.pid.store(pid, Ordering::SeqCst);
        Ok(())
    }

    /// A marked line in the log, so a reader sees where an outage began and ended.
    fn note(&self, what: &str) {
        if let Ok(mut log) = File::options().append(true).open(&self.log) {
            let _ = writeln!(log, "---- test harness: {} {what} ----", self.name);
        }
    }

    fn signal_group(&self, signal: Signal) {
        if let Ok(pid) = i32::try_from(self.pid()) {
            let _ = killpg(Pid::from_raw(pid), signal);
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::SeqCst)
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The exit status, if the process has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().ok()?;
        child.try_wait().ok().flatten()
    }

    /// An error describing this process's exit, if it has exited.
    pub fn check_running(&self, when: &str) -> Result<(), Error> {
        match self.exited() {
            None => Ok(()),
            Some(status) => Err(Error::Exited {
                component: self.name.clone(),
                status: status.to_string(),
                when: when.to_string(),
                log: self.log.clone(),
                tail: logs::tail(&self.log, logs::TAIL_LINES),
            }),
        }
    }

    /// SIGKILL the process group and reap the leader.
    pub fn kill(&self) {
        // The group id is the leader's pid (process_group(0)). ESRCH means it is already gone.
        self.signal_group(Signal::SIGKILL);
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

crate::debug_fields!(Process, |p| { "name": p.name, "pid": p.pid(), "log": p.log });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sh.log");
        let pidfile = dir.path().join("grandchild.pid");
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(format!(
            "sleep 300 & echo $! > {}; echo started; wait",
            pidfile.display()
        ));
        let process = Process::spawn("sh", cmd, &log).unwrap();
        let grandchild = wait_for_pid(&pidfile);
        assert!(pid_alive(grandchild));
        assert!(process.exited().is_none());
        drop(process);
        // The grandchild is reaped by init once killed; give it a moment.
        for _ in 0..100 {
            if !pid_alive(grandchild) || is_zombie(grandchild) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!pid_alive(grandchild) || is_zombie(grandchild));
        assert!(fs::read_to_string(&log).unwrap().contains("started"));
    }

    #[test]
    fn check_running_reports_exit_with_log_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("false.log");
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg("echo boom >&2; exit 3");
        let process = Process::spawn("failing", cmd, &log).unwrap();
        for _ in 0..200 {
            if process.exited().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let err = process
            .check_running("while testing")
            .unwrap_err()
            .to_string();
        assert!(err.contains("failing exited"), "{err}");
        assert!(err.contains("boom"), "{err}");
    }

    #[tokio::test]
    async fn a_stopped_process_starts_again_from_the_same_command() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sh.log");
        let mut cmd = Command::new("/bin/sh");
        // SIGTERM ends the shell only through its trap: the grace is used, then it exits 0.
        cmd.arg("-c")
            .arg("trap 'echo terminated; exit 0' TERM; echo \"run $MARK\"; while :; do sleep 0.05; done")
            .env("MARK", "m1");
        let process = Process::spawn("sh", cmd, &log).unwrap();
        let first = process.pid();
        wait_for_lines(&log, "run m1", 1);
        process.stop(Duration::from_secs(5)).await;
        assert!(
            process.exited().is_some_and(|s| s.success()),
            "{:?}",
            process.exited()
        );
        assert!(fs::read_to_string(&log).unwrap().contains("terminated"));
        assert!(process.check_running("after stop").is_err());

        process.start_again().unwrap();
        assert_ne!(process.pid(), first);
        assert!(process.exited().is_none());
        wait_for_lines(&log, "run m1", 2);
        let text = fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("---- test harness: sh starting again ----"),
            "{text}"
        );

        // A crash: no grace.
        let second = process.pid();
        process.stop(Duration::ZERO).await;
        assert!(!pid_alive(second) || is_zombie(second));
        drop(process);
    }

    fn wait_for_lines(path: &Path, line: &str, count: usize) {
        for _ in 0..500 {
            let text = fs::read_to_string(path).unwrap_or_default();
            if text.lines().filter(|l| *l == line).count() >= count {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{line:?} not {count} times in {}", path.display());
    }

    fn wait_for_pid(path: &Path) -> u32 {
        for _ in 0..500 {
            if let Some(pid) = fs::read_to_string(path)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return pid;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("no pid in {}", path.display());
    }

    fn is_zombie(pid: u32) -> bool {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    }
}
