//! The only unsafe code of the pod runner: what a container process does between `fork` and `exec`
//! (and registering the exit-time sweep, [`at_exit`]),
//! so that it ends up inside its Pod — join the Pod's network namespace, get a private mount and UTS
//! namespace with the volumes bind-mounted, its hostname, and the Pod's user and groups. The same
//! plan, with "join the running container's namespaces" instead of "make new ones", runs exec
//! probes and [`super::PodRunner::exec`].
//!
//! Everything the child needs is prepared by the parent (paths as C strings, namespace files
//! opened close-on-exec) so the child only makes system calls: after `fork` in a multi-threaded
//! process it must not allocate or take locks. Each step writes its number to a close-on-exec pipe
//! first, so when the spawn fails the parent can say which step did.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, PipeReader, PipeWriter, Read};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::mount::{mount, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::unistd::{chdir, setgid, setgroups, sethostname, setuid, Gid, Uid};

/// A bind mount made inside the container's mount namespace.
#[derive(Debug)]
pub struct BindMount {
    pub source: CString,
    pub target: CString,
    pub readonly: bool,
}

/// The user a container process runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (fsGroup, supplementalGroups).
    pub groups: Vec<u32>,
}

/// What the child does before `exec`, in this order.
#[derive(Debug, Default)]
pub struct Plan {
    /// Join this network namespace (`/var/run/netns/<name>` or `/proc/<pid>/ns/net`).
    pub join_net: Option<File>,
    /// Join an existing container's UTS and mount namespaces (exec into a running container).
    pub join_uts: Option<File>,
    pub join_mnt: Option<File>,
    /// Make new mount and UTS namespaces, remount `/` as a slave, then the bind mounts.
    pub new_mount_namespace: bool,
    pub readonly_root: bool,
    pub mounts: Vec<BindMount>,
    pub hostname: Option<OsString>,
    pub identity: Option<Identity>,
    /// `allowPrivilegeEscalation: false`.
    pub no_new_privs: bool,
    pub workdir: Option<CString>,
    /// A new session with this terminal (a pseudo-terminal's slave, also the child's stdio) as
    /// its controlling terminal: `kubectl exec -t`. The child must not be put in a process group
    /// of its own first (`setsid` refuses a group leader); the new session is its group.
    pub controlling_tty: Option<File>,
    /// SIGKILL when the forking thread ends (set last: changing the uid clears it).
    pub parent_death_signal: bool,
}

const STEP_JOIN_NET: u8 = 1;
const STEP_JOIN_UTS: u8 = 2;
const STEP_JOIN_MNT: u8 = 3;
const STEP_UNSHARE: u8 = 4;
const STEP_SLAVE_ROOT: u8 = 5;
const STEP_READONLY_ROOT: u8 = 6;
const STEP_HOSTNAME: u8 = 7;
const STEP_GROUPS: u8 = 8;
const STEP_GID: u8 = 9;
const STEP_UID: u8 = 10;
const STEP_NO_NEW_PRIVS: u8 = 11;
const STEP_CHDIR: u8 = 12;
const STEP_EXEC: u8 = 13;
const STEP_SESSION: u8 = 14;
const STEP_PARENT_DEATH: u8 = 15;
/// Bind mount `i` is step `STEP_MOUNTS + 2i` (bind) and `+ 2i + 1` (read-only remount).
const STEP_MOUNTS: u8 = 32;

/// Which step a failed spawn stopped at.
pub struct Progress {
    reader: PipeReader,
    names: Vec<(u8, String)>,
}

impl Progress {
    /// A description of the last step the child started (call after the spawn failed).
    pub fn failed_step(mut self) -> String {
        let mut buf = Vec::new();
        // Non-blocking: the child is gone, so whatever it wrote is in the pipe already.
        let _ = self.reader.read_to_end(&mut buf);
        match buf.last() {
            None => "before the first namespace step (or in exec itself)".to_string(),
            Some(step) => self
                .names
                .iter()
                .find(|(n, _)| n == step)
                .map(|(_, name)| name.clone())
                .unwrap_or_else(|| format!("step {step}")),
        }
    }
}

impl Plan {
    fn step_names(&self) -> Vec<(u8, String)> {
        let mut names = vec![
            (
                STEP_JOIN_NET,
                "joining the pod's network namespace".to_string(),
            ),
            (
                STEP_JOIN_UTS,
                "joining the container's UTS namespace".to_string(),
            ),
            (
                STEP_JOIN_MNT,
                "joining the container's mount namespace".to_string(),
            ),
            (
                STEP_UNSHARE,
                "creating mount and UTS namespaces".to_string(),
            ),
            (STEP_SLAVE_ROOT, "making / a slave mount".to_string()),
            (STEP_READONLY_ROOT, "remounting / read-only".to_string()),
            (STEP_HOSTNAME, "setting the hostname".to_string()),
            (STEP_GROUPS, "setting supplementary groups".to_string()),
            (STEP_GID, "setting the group id".to_string()),
            (STEP_UID, "setting the user id".to_string()),
            (STEP_NO_NEW_PRIVS, "setting no_new_privs".to_string()),
            (STEP_CHDIR, "changing to the working directory".to_string()),
            (STEP_EXEC, "executing the command".to_string()),
            (
                STEP_SESSION,
                "making the terminal the controlling one".to_string(),
            ),
            (
                STEP_PARENT_DEATH,
                "setting the parent-death signal".to_string(),
            ),
        ];
        for (i, m) in self.mounts.iter().enumerate() {
            let step = mount_step(i);
            names.push((
                step,
                format!(
                    "bind-mounting {} at {}",
                    m.source.to_string_lossy(),
                    m.target.to_string_lossy()
                ),
            ));
            names.push((
                step.saturating_add(1),
                format!("remounting {} read-only", m.target.to_string_lossy()),
            ));
        }
        if let Some(dir) = &self.workdir {
            names[11].1 = format!(
                "changing to the working directory {}",
                dir.to_string_lossy()
            );
        }
        names
    }
}

fn mount_step(i: usize) -> u8 {
    u8::try_from(usize::from(STEP_MOUNTS) + 2 * i).unwrap_or(u8::MAX - 1)
}

/// Arrange for `cmd`'s child to carry out `plan` before `exec`. Register this before anything else
/// that uses `pre_exec` (the parent-death signal must be set after the uid changes, which clears it).
pub fn install(cmd: &mut Command, plan: Plan) -> io::Result<Progress> {
    let (reader, writer) = io::pipe()?;
    fcntl(reader.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
    let names = plan.step_names();
    // SAFETY: the closure runs in the forked child before exec. `carry_out` makes only system
    // calls (setsid, ioctl, setns, unshare, mount, sethostname, setgroups, setgid, setuid,
    // prctl, chdir, write),
    // all async-signal-safe, on values the parent prepared (C strings, open files); it neither
    // allocates nor takes locks, and errors become `io::Error`s from raw errnos.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || carry_out(&plan, &writer));
    }
    Ok(Progress { reader, names })
}

fn carry_out(plan: &Plan, progress: &PipeWriter) -> io::Result<()> {
    let step = |n: u8| {
        let _ = nix::unistd::write(progress, &[n]);
    };
    if let Some(tty) = &plan.controlling_tty {
        step(STEP_SESSION);
        rustix::process::setsid()?;
        rustix::process::ioctl_tiocsctty(tty)?;
    }
    if let Some(net) = &plan.join_net {
        step(STEP_JOIN_NET);
        setns(net, CloneFlags::CLONE_NEWNET)?;
    }
    if let Some(uts) = &plan.join_uts {
        step(STEP_JOIN_UTS);
        setns(uts, CloneFlags::CLONE_NEWUTS)?;
    }
    if let Some(mnt) = &plan.join_mnt {
        step(STEP_JOIN_MNT);
        setns(mnt, CloneFlags::CLONE_NEWNS)?;
    }
    if plan.new_mount_namespace {
        step(STEP_UNSHARE);
        unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS)?;
        // Nothing mounted here may propagate back to the host; host unmounts still reach us.
        step(STEP_SLAVE_ROOT);
        mount(
            None::<&std::ffi::CStr>,
            c"/",
            None::<&std::ffi::CStr>,
            MsFlags::MS_REC | MsFlags::MS_SLAVE,
            None::<&std::ffi::CStr>,
        )?;
        for (i, m) in plan.mounts.iter().enumerate() {
            let n = mount_step(i);
            step(n);
            mount(
                Some(m.source.as_c_str()),
                m.target.as_c_str(),
                None::<&std::ffi::CStr>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&std::ffi::CStr>,
            )?;
            if m.readonly {
                step(n.saturating_add(1));
                mount(
                    None::<&std::ffi::CStr>,
                    m.target.as_c_str(),
                    None::<&std::ffi::CStr>,
                    MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                    None::<&std::ffi::CStr>,
                )?;
            }
        }
        // After the volumes: a bind mount takes the read-only flag of the mount it comes from, so
        // volumes bound from a read-only root would be read-only too (kubelet keeps them
        // writable unless the mount says readOnly).
        if plan.readonly_root {
            step(STEP_READONLY_ROOT);
            mount(
                None::<&std::ffi::CStr>,
                c"/",
                None::<&std::ffi::CStr>,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                None::<&std::ffi::CStr>,
            )?;
        }
        if let Some(hostname) = &plan.hostname {
            step(STEP_HOSTNAME);
            sethostname(hostname)?;
        }
    }
    if let Some(id) = &plan.identity {
        step(STEP_GROUPS);
        // `Gid` is a transparent wrapper of `gid_t`; the parent built the list.
        let groups: &[u32] = &id.groups;
        let mut buf = [Gid::from_raw(0); 64];
        let n = groups.len().min(buf.len());
        for (slot, gid) in buf.iter_mut().zip(groups) {
            *slot = Gid::from_raw(*gid);
        }
        setgroups(&buf[..n])?;
        step(STEP_GID);
        setgid(Gid::from_raw(id.gid))?;
        step(STEP_UID);
        setuid(Uid::from_raw(id.uid))?;
    }
    if plan.no_new_privs {
        step(STEP_NO_NEW_PRIVS);
        nix::sys::prctl::set_no_new_privs()?;
    }
    if let Some(dir) = &plan.workdir {
        step(STEP_CHDIR);
        chdir(dir.as_c_str())?;
    }
    if plan.parent_death_signal {
        step(STEP_PARENT_DEATH);
        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    }
    step(STEP_EXEC);
    Ok(())
}

/// Run `f` when the process exits normally (libc `atexit`). A runner kept in a `static` is never
/// dropped; this is its last chance to remove its namespaces, mounts and hosts entries.
pub fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: atexit(3) only records the function pointer. `f` is a plain `extern "C" fn` that
    // takes no arguments; callers make it catch every panic so nothing unwinds into libc.
    #[allow(unsafe_code)]
    let registered = unsafe { nix::libc::atexit(f) };
    registered == 0
}
