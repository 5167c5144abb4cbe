//! The etcd seam: membership calls against a cluster, always through voters (a learner answers
//! `MemberList` and friends with "rpc not supported for learner"). Every call is bounded in time
//! and its latency recorded.
//!
//! - [`access`]: the one way to reach a cluster's etcd (endpoints, TLS, credentials, the clients
//!   kept across reconciles). Nothing else dials.
//! - `client`: the calls, on a dialed [`Etcd`].
//! - `error`: how etcd refuses, classified once ([`EtcdError`], [`AuthRefusal`]).
//! - `view`: what etcd reports, as plain data for the planners ([`EtcdMemberInfo`], [`EtcdView`]).

pub mod access;
mod client;
mod error;
mod view;

pub use access::Access;
pub use client::{Alarm, Etcd, MemberStatus};
pub use error::{AuthRefusal, EtcdError};
pub use view::{format_id, parse_id, EtcdMemberInfo, EtcdView};

#[cfg(test)]
mod tests;
