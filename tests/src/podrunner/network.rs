//! The pod network: one host bridge per runner with a /24 of 10.213.0.0/16, a network namespace and
//! veth pair per Pod, and the sweep that removes what a crashed runner left behind.
//!
//! Several runners may share the machine (parallel test binaries, other checkouts): each claims a
//! *slot* by holding an exclusive `flock` on `/run/eop-podrunner/slot-<n>.lock` for its lifetime.
//! Slot `n` owns the bridge `eopbr<n>`, the subnet `10.213.<n>.0/24`, the network namespaces
//! `eop-<n>-*`, host veths `eop<n>v*`, the `/etc/hosts` block of slot `n` and its state directory.
//! A lock nobody holds means its owner is gone (the kernel drops locks of dead processes), so its
//! leftovers may be removed.
//!
//! Nothing here routes anywhere: Pods get no default route, the host gets only the bridge's
//! connected /24, and forwarding is left as it is.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::fcntl::{Flock, FlockArg};
use nix::mount::{umount2, MntFlags};

use super::Error;

/// Locks (slots, the `/etc/hosts` lock) live here: a fixed path, so runners with different
/// `TMPDIR`s still see each other.
pub const LOCK_DIR: &str = "/run/eop-podrunner";
pub const MAX_SLOTS: u8 = 64;
pub const NETNS_DIR: &str = "/run/netns";

/// Slots held by runners of this process, swept at exit if still held then.
static HELD: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

extern "C" fn sweep_held_slots() {
    let _ = std::panic::catch_unwind(|| {
        let held = HELD.lock().map(|h| h.clone()).unwrap_or_default();
        for n in held {
            sweep_slot(n);
        }
    });
}

fn hold(n: u8) {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        super::sandbox::at_exit(sweep_held_slots);
    });
    if let Ok(mut held) = HELD.lock() {
        held.push(n);
    }
}

/// The slot was torn down: nothing to sweep at exit.
pub fn release(n: u8) {
    if let Ok(mut held) = HELD.lock() {
        held.retain(|h| *h != n);
    }
}

/// The claimed slot: its lock is held as long as this lives.
pub struct Slot {
    pub n: u8,
    pub state_dir: PathBuf,
    _lock: Flock<File>,
}

crate::debug_fields!(Slot, |s| { "n": s.n, "state_dir": s.state_dir });

impl Slot {
    pub fn bridge(&self) -> String {
        bridge_name(self.n)
    }

    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.n, 1)
    }

    pub fn netns_prefix(&self) -> String {
        netns_prefix(self.n)
    }
}

pub fn bridge_name(n: u8) -> String {
    format!("eopbr{n}")
}

pub fn netns_prefix(n: u8) -> String {
    format!("eop-{n}-")
}

fn veth_prefix(n: u8) -> String {
    format!("eop{n}v")
}

/// Where slot `n` keeps Pod directories (volumes, hosts files).
pub fn state_dir(n: u8) -> PathBuf {
    std::env::temp_dir()
        .join("eop-podrunner")
        .join(format!("slot-{n}"))
}

fn lock_path(n: u8) -> PathBuf {
    Path::new(LOCK_DIR).join(format!("slot-{n}.lock"))
}

fn try_lock(n: u8) -> Result<Option<Flock<File>>, Error> {
    let path = lock_path(n);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(Error::io(format!("opening {}", path.display())))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(Error::Io {
            what: format!("locking {}", path.display()),
            source: e.into(),
        }),
    }
}

/// Run `ip` with `args`; its stderr in the error.
pub fn ip(args: &[&str]) -> Result<String, Error> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(Error::io(format!("running ip {}", args.join(" "))))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(Error::Command {
            command: format!("ip {}", args.join(" ")),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

/// [`ip`] off the async runtime's threads.
pub async fn ip_async(args: Vec<String>) -> Result<String, Error> {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ip(&args)
    })
    .await
    .map_err(|e| Error::Stopped(format!("ip task: {e}")))?
}

fn host_links() -> Vec<String> {
    dir_names("/sys/class/net")
}

fn netns_names() -> Vec<String> {
    dir_names(NETNS_DIR)
}

/// The names in `dir` (none when it cannot be read).
fn dir_names(dir: &str) -> Vec<String> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Mount points (decoded) from /proc/self/mounts.
pub fn mount_points() -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split(' ').nth(1))
        .map(|p| PathBuf::from(decode_mount_path(p)))
        .collect()
}

/// `/proc/mounts` escapes space, tab, newline and backslash as octal.
fn decode_mount_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(code) = u8::from_str_radix(digits, 8) {
                out.push(code);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmount (lazily) everything mounted under `dir`, deepest first.
pub fn unmount_under(dir: &Path) {
    let mut points: Vec<PathBuf> = mount_points()
        .into_iter()
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = umount2(&p, MntFlags::MNT_DETACH);
    }
}

/// Kill every process in network namespace `name`, then delete it.
pub fn delete_netns(name: &str) {
    if let Ok(pids) = ip(&["netns", "pids", name]) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    let _ = ip(&["netns", "delete", name]);
}

/// Remove everything slot `n` may have left: processes in its namespaces, the namespaces, veths,
/// the bridge, mounts and files under its state directory, its `/etc/hosts` block. The caller
/// holds the slot's lock.
pub fn sweep_slot(n: u8) {
    let prefix = netns_prefix(n);
    for ns in netns_names().iter().filter(|ns| ns.starts_with(&prefix)) {
        delete_netns(ns);
    }
    let veth = veth_prefix(n);
    let bridge = bridge_name(n);
    for link in host_links() {
        if link.starts_with(&veth) || link == bridge {
            let _ = ip(&["link", "delete", &link]);
        }
    }
    let dir = state_dir(n);
    unmount_under(&dir);
    let _ = fs::remove_dir_all(&dir);
    let _ = super::dns::write_host_block(n, None);
}

/// Slots that have something on this machine: a netns, a link, a state dir or a hosts block.
fn slots_with_leftovers() -> BTreeSet<u8> {
    let mut slots = BTreeSet::new();
    let parse = |s: &str| s.parse::<u8>().ok();
    for ns in netns_names() {
        if let Some(rest) = ns.strip_prefix("eop-") {
            if let Some(n) = rest.split('-').next().and_then(parse) {
                slots.insert(n);
            }
        }
    }
    for link in host_links() {
        if let Some(n) = link.strip_prefix("eopbr").and_then(parse) {
            slots.insert(n);
        } else if let Some(rest) = link.strip_prefix("eop") {
            if let Some(n) = rest.split('v').next().and_then(parse) {
                slots.insert(n);
            }
        }
    }
    if let Ok(entries) = fs::read_dir(std::env::temp_dir().join("eop-podrunner")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = name.strip_prefix("slot-").and_then(parse) {
                slots.insert(n);
            }
        }
    }
    slots.extend(super::dns::host_block_slots());
    slots
}

/// Remove the leftovers of every slot whose owner is gone. Returns the slots swept.
pub fn sweep_abandoned() -> Result<Vec<u8>, Error> {
    fs::create_dir_all(LOCK_DIR).map_err(Error::io(format!("creating {LOCK_DIR}")))?;
    let mut swept = Vec::new();
    for n in slots_with_leftovers() {
        if n >= MAX_SLOTS {
            continue;
        }
        if let Some(lock) = try_lock(n)? {
            sweep_slot(n);
            drop(lock);
            swept.push(n);
        }
    }
    Ok(swept)
}

/// Whether 10.213.n.0/24 overlaps an address or route that is not ours.
fn subnet_in_use(n: u8) -> bool {
    let ours = bridge_name(n);
    let needle = format!("10.213.{n}.");
    let routes = ip(&["-4", "route", "show", "table", "all"]).unwrap_or_default();
    let addrs = ip(&["-4", "-o", "addr", "show"]).unwrap_or_default();
    routes
        .lines()
        .chain(addrs.lines())
        .any(|line| line.contains(&needle) && !line.contains(&ours))
        || routes.lines().any(|l| l.starts_with("10.213.0.0/16"))
}

/// Claim a free slot, sweep what its previous owner left, and bring up its bridge.
pub fn claim_slot() -> Result<Slot, Error> {
    fs::create_dir_all(LOCK_DIR).map_err(Error::io(format!("creating {LOCK_DIR}")))?;
    for n in 0..MAX_SLOTS {
        let Some(lock) = try_lock(n)? else { continue };
        sweep_slot(n);
        if subnet_in_use(n) {
            continue;
        }
        let bridge = bridge_name(n);
        let gateway = format!("10.213.{n}.1/24");
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        // No IPv6 on the bridge: nothing of ours speaks it, and it keeps the link quiet.
        let _ = fs::write(
            format!("/proc/sys/net/ipv6/conf/{bridge}/disable_ipv6"),
            "1",
        );
        ip(&["addr", "add", &gateway, "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        let state_dir = state_dir(n);
        fs::create_dir_all(&state_dir)
            .map_err(Error::io(format!("creating {}", state_dir.display())))?;
        hold(n);
        return Ok(Slot {
            n,
            state_dir,
            _lock: lock,
        });
    }
    Err(Error::Unsupported(format!(
        "no free pod-runner slot: all {MAX_SLOTS} locks in {LOCK_DIR} are held by running test \
         binaries (or their subnets 10.213.<n>.0/24 are in use)"
    )))
}

/// Addresses of a slot's /24 handed to Pods, round-robin so a recreated Pod gets a new address
/// (as on a real node) and stale caches are noticed.
#[derive(Debug)]
pub struct IpPool {
    n: u8,
    next: u8,
    used: BTreeSet<u8>,
}

impl IpPool {
    pub fn new(n: u8) -> Self {
        Self {
            n,
            next: 2,
            used: BTreeSet::new(),
        }
    }

    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in 2..=254u16 {
            let candidate = self.next;
            self.next = if self.next >= 254 { 2 } else { self.next + 1 };
            if self.used.insert(candidate) {
                return Some(Ipv4Addr::new(10, 213, self.n, candidate));
            }
        }
        None
    }

    pub fn release(&mut self, ip: Ipv4Addr) {
        self.used.remove(&ip.octets()[3]);
    }
}

/// One Pod's network namespace and veth.
#[derive(Clone, Debug)]
pub struct PodNetwork {
    pub netns: String,
    pub host_veth: String,
    pub ip: Ipv4Addr,
}

impl PodNetwork {
    pub fn netns_path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.netns)
    }

    /// Create the namespace, a veth pair with one end on the bridge, and `eth0` with `ip`/24
    /// inside; no routes beyond the connected /24.
    pub async fn create(slot_n: u8, key: &str, ip: Ipv4Addr) -> Result<Self, Error> {
        let net = PodNetwork {
            netns: format!("{}{key}", netns_prefix(slot_n)),
            host_veth: format!("{}{key}", veth_prefix(slot_n)),
            ip,
        };
        let peer = format!("eop{slot_n}p{key}");
        let bridge = bridge_name(slot_n);
        let ns = net.netns.clone();
        let veth = net.host_veth.clone();
        let cidr = format!("{ip}/24");
        let result = tokio::task::spawn_blocking(move || -> Result<(), Error> {
            ip_cmd(&["netns", "add", &ns])?;
            ip_cmd(&[
                "link", "add", &veth, "type", "veth", "peer", "name", &peer, "netns", &ns,
            ])?;
            let _ = fs::write(format!("/proc/sys/net/ipv6/conf/{veth}/disable_ipv6"), "1");
            ip_cmd(&["link", "set", &veth, "master", &bridge, "up"])?;
            ip_cmd(&["-n", &ns, "link", "set", &peer, "name", "eth0"])?;
            ip_cmd(&["-n", &ns, "addr", "add", &cidr, "dev", "eth0"])?;
            ip_cmd(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip_cmd(&["-n", &ns, "link", "set", "lo", "up"])?;
            Ok(())
        })
        .await
        .map_err(|e| Error::Stopped(format!("network setup task: {e}")))?;
        if let Err(e) = result {
            net.delete_blocking();
            return Err(e);
        }
        Ok(net)
    }

    /// Delete the namespace (and with it `eth0` and its host peer).
    pub fn delete_blocking(&self) {
        delete_netns(&self.netns);
        if Path::new("/sys/class/net").join(&self.host_veth).exists() {
            let _ = ip(&["link", "delete", &self.host_veth]);
        }
    }

    /// Take the host end of the veth down (or up again): the Pod keeps its address but no packet
    /// reaches it, like a cut cable.
    pub async fn set_link(&self, up: bool) -> Result<(), Error> {
        ip_async(vec![
            "link".into(),
            "set".into(),
            self.host_veth.clone(),
            if up { "up" } else { "down" }.into(),
        ])
        .await
        .map(drop)
    }
}

fn ip_cmd(args: &[&str]) -> Result<(), Error> {
    ip(args).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_hands_out_round_robin_and_reuses_released() {
        let mut pool = IpPool::new(7);
        let a = pool.allocate().unwrap();
        let b = pool.allocate().unwrap();
        assert_eq!(a, Ipv4Addr::new(10, 213, 7, 2));
        assert_eq!(b, Ipv4Addr::new(10, 213, 7, 3));
        pool.release(a);
        assert_eq!(pool.allocate().unwrap(), Ipv4Addr::new(10, 213, 7, 4));
        for _ in 0..251 {
            assert!(pool.allocate().is_some());
        }
        assert!(pool.allocate().is_none());
    }

    #[test]
    fn decodes_escaped_mount_paths() {
        assert_eq!(decode_mount_path("/a\\040b"), "/a b");
        assert_eq!(decode_mount_path("/plain"), "/plain");
        assert_eq!(decode_mount_path("/end\\"), "/end\\");
    }
}
