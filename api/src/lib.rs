//! The `etcd-operator.cozystack.io/v1alpha2` API: kinds, defaults, condition vocabulary, labels
//! and validation. Pure: no I/O, no clients. Both the controller and the webhook depend on it.

pub mod conditions;
#[cfg(feature = "corpus")]
pub mod corpus;
pub mod crd;
pub mod cron;
pub mod labels;
pub mod quantity;
pub mod v1alpha2;
pub mod validate;
