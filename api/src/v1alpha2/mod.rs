//! The `etcd-operator.cozystack.io/v1alpha2` kinds.

// `#[kube(printcolumn(type_ = ...))]` repeats the same key per column; clippy reads that as a
// duplicated attribute.
#![allow(clippy::duplicated_attributes)]

mod cluster;
mod common;
mod defrag;
mod identity;
mod member;
mod placement;
mod policy;
mod recovery;
mod schedule;
mod snapshot;

pub use cluster::*;
pub use common::*;
pub use defrag::*;
pub use identity::*;
pub use member::*;
pub use placement::*;
pub use policy::*;
pub use recovery::*;
pub use schedule::*;
pub use snapshot::*;

pub const GROUP: &str = "etcd-operator.cozystack.io";
pub const VERSION: &str = "v1alpha2";
pub const API_VERSION: &str = "etcd-operator.cozystack.io/v1alpha2";
