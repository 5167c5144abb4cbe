//! Ports for the components the tests start, and whether a started component really holds its own.
//!
//! A component is told its port on its command line, so the port is chosen (bound to port 0 and
//! released) before the component binds it, and something else may take it in between. Two guards:
//! - [`free_port`] never hands the same port out twice in one test binary. The tests of a binary
//!   run side by side; before this, two of them could be given one port, and the second member's
//!   readiness check was answered by the first one's server: the test then read another test's
//!   keys (seen in `snapshot_agent`, a restore that "lost" 50 of 150 keys).
//! - [`listens`] tells whether the listener on a port is the started process's own, so that a
//!   readiness check answered by another binary's server on the same port is not taken for the
//!   component's: the component fails to bind, exits, and its start reports the taken port.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::net::TcpListener;
use std::sync::Mutex;

use super::Error;

/// Every port [`free_port`] handed out in this process.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// How many ports the kernel may offer that were handed out before, before giving up.
const ATTEMPTS: usize = 64;

/// A loopback port free right now and not handed out before in this test binary. Another process
/// may still take it before the component binds it: check with [`listens`] and retry on a new one.
pub(crate) fn free_port() -> Result<u16, Error> {
    for _ in 0..ATTEMPTS {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(Error::io("binding a loopback port"))?;
        let port = listener
            .local_addr()
            .map_err(Error::io("reading a bound port"))?
            .port();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(Error::Unsupported(format!(
        "the kernel offered {ATTEMPTS} loopback ports that this test binary had handed out already"
    )))
}

/// Whether process `pid` holds a listening TCP socket on `port` (any local address), from
/// `/proc/net/tcp{,6}` (the sockets of the tests' network namespace, where the components run)
/// and the process's open files.
pub(crate) fn listens(pid: u32, port: u16) -> bool {
    let sockets = listening_sockets(port);
    if sockets.is_empty() {
        return false;
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).ok().is_some_and(|target| {
            target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|inode| inode.parse::<u64>().ok())
                .is_some_and(|inode| sockets.contains(&inode))
        })
    })
}

/// The inodes of the sockets listening on `port`.
fn listening_sockets(port: u16) -> HashSet<u64> {
    const LISTEN: &str = "0A";
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        // `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode`
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if *state == LISTEN && local_port == Some(port) {
                if let Ok(inode) = inode.parse() {
                    inodes.insert(inode);
                }
            }
        }
    }
    inodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_handed_out_once() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }

    #[test]
    fn the_listener_of_a_port_is_told_from_another_process() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listens(std::process::id(), port));
        // pid 1 does not hold this test's socket.
        assert!(!listens(1, port));
        drop(listener);
        assert!(!listens(std::process::id(), port));
    }
}
