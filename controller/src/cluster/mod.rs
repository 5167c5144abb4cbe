//! The EtcdCluster controller. [`reconcile`] runs observe → plan → act → publish: `observe`
//! gathers the facts, `plan` decides the one next step (pure), `act` performs it, `children`
//! keeps the Services, PDB, Certificates and volumes in shape, `publish` renders (`status`, pure)
//! and writes the status; `auth` performs root auth (decided purely in `auth::decide`).
//! `data_home` finds where a broken member's data lives; `ca_set` judges a CA change by the CAs
//! each member loaded; `marks` which of the operator's deletion marks no plan stands behind; `alarms` turns etcd's alarms into a condition; `volumes` grows member
//! PVCs; `view` holds the member facts the planner and its rules read; `cleanup` is the cluster's
//! finalizer that deletes its data PVCs (owned by nothing) when the cluster is deleted;
//! `auto_recovery` creates the EtcdRecovery a cluster annotated for it asks for once it has been
//! lost long enough; `roster` renders `status.members[]` and `status.leader` from what each
//! member answers about itself (pure).

mod act;
pub mod alarms;
pub mod auth;
pub mod auto_recovery;
pub mod ca_set;
mod children;
mod cleanup;
pub mod data_home;
pub mod marks;
mod observe;
pub mod plan;
mod publish;
pub mod reconcile;
pub mod roster;
pub mod status;
pub mod view;
pub mod volumes;
