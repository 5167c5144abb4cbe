//! The operator's configuration (`Config`, set from its flags, with its defaults) and the pure
//! values it carries, such as the bound on one member's `Defragment` call. A low module: plain
//! data and pure functions; it names no controller module and does no I/O.

use std::time::Duration;

/// The operator's configuration, from its flags (`main.rs`); every reconcile reads it through
/// the context.
#[derive(Clone, Debug)]
pub struct Config {
    /// Repository of the etcd image; the tag is `v<version>`.
    pub etcd_image_repository: String,
    /// Cluster DNS suffix (for certificate SANs).
    pub cluster_domain: String,
    /// The operator's own image: snapshot Jobs run it as the snapshot agent.
    pub operator_image: Option<String>,
    /// How long a member's Pod may stay unschedulable before the member is replaced
    /// (`--replace-broken-members-after`); `None`: never.
    pub replace_broken_members_after: Option<Duration>,
    /// The Secret in the operator's own namespace recording the root passwords it set in etcd.
    pub auth_record: crate::auth::RecordRef,
    /// The bound on one member's `Defragment` call, sized to its database.
    pub defrag_timeout: DefragTimeout,
}

/// `--replace-broken-members-after`'s default: long enough for a Node reboot or a slow volume
/// attach, short enough that a cluster does not run a member short for long.
pub const DEFAULT_REPLACE_BROKEN_MEMBERS_AFTER: Duration = Duration::from_secs(300);

impl Default for Config {
    fn default() -> Self {
        Self {
            etcd_image_repository: "quay.io/coreos/etcd".to_string(),
            cluster_domain: "cluster.local".to_string(),
            operator_image: None,
            replace_broken_members_after: Some(DEFAULT_REPLACE_BROKEN_MEMBERS_AFTER),
            auth_record: crate::auth::RecordRef {
                namespace: "default".to_string(),
                name: crate::auth::DEFAULT_RECORD_SECRET.to_string(),
            },
            defrag_timeout: DefragTimeout::default(),
        }
    }
}

/// The bound on one member's `Defragment` call: `base` plus `per_gib` for each GiB of its
/// dbSize, at most [`MAX_DEFRAG_TIMEOUT`] (and never below `base`). etcd copies every live key
/// into a new file, so the time grows with the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefragTimeout {
    pub base: Duration,
    pub per_gib: Duration,
}

/// The longest a single `Defragment` call is given (before the run's own deadline).
pub const MAX_DEFRAG_TIMEOUT: Duration = Duration::from_secs(10 * 60);

impl Default for DefragTimeout {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(60),
            per_gib: Duration::from_secs(60),
        }
    }
}

impl DefragTimeout {
    pub fn for_size(&self, db_size: i64) -> Duration {
        let gib = db_size.max(0) as f64 / (1024.0 * 1024.0 * 1024.0);
        let extra = Duration::try_from_secs_f64(self.per_gib.as_secs_f64() * gib)
            .unwrap_or(MAX_DEFRAG_TIMEOUT);
        self.base
            .saturating_add(extra)
            .min(MAX_DEFRAG_TIMEOUT.max(self.base))
    }
}

#[cfg(test)]
mod tests;
