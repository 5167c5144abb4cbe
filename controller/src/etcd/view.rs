//! What etcd reports, as plain data: member IDs, `MemberList` entries and the view of a cluster's
//! membership the planners read. No I/O.

pub fn format_id(id: u64) -> String {
    format!("{id:016x}")
}

pub fn parse_id(hex: &str) -> Option<u64> {
    u64::from_str_radix(hex, 16).ok()
}

/// A member of the etcd cluster as `MemberList` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMemberInfo {
    pub id: u64,
    /// Empty for a learner that has been added but has not started yet.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
}

/// What etcd said when asked for its members (through voters only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtcdView {
    /// Not asked: no member could be dialed (no ready voter, or none exists yet).
    NotAsked,
    Members {
        cluster_id: u64,
        members: Vec<EtcdMemberInfo>,
    },
    Unreachable(String),
}

impl EtcdView {
    pub fn members(&self) -> Option<&[EtcdMemberInfo]> {
        match self {
            EtcdView::Members { members, .. } => Some(members),
            _ => None,
        }
    }
}
