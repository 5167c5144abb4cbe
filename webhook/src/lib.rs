//! The etcd-operator admission webhook: validates `EtcdCluster`, `EtcdSnapshot`, `EtcdDefrag`,
//! `EtcdRecovery`, `EtcdSnapshotSchedule` and `EtcdDefragPolicy` objects with the rules of [`api::validate`]
//! (all violations at once, with fixes), keeps `EtcdMember`s operator-owned, defaults what CEL
//! cannot (pod anti-affinity, memory limits for tmpfs members) and warns about risky choices.
//! Served over rustls with a certificate re-read from the mounted Secret as it rotates.
//!
//! The pure decisions live in [`admission`], [`defaulting`] and [`warnings`]; [`routes`] and
//! [`server`] are the HTTP and TLS edges; [`metrics`] is what `/metrics` shows.

pub mod admission;
pub mod config;
pub mod defaulting;
pub mod metrics;
pub mod routes;
pub mod server;
pub mod warnings;

pub use config::{AntiAffinity, Config, Policy};
pub use server::{start, RunningWebhook, ServerError};
