//! The etcd-operator controller. Reconcile decisions are pure functions (`builders`, `plan`) of
//! observed state; the reconcilers around them only read caches, call one planner, perform one
//! step and write status.

pub mod builders;
pub mod cluster;
pub mod naming;
