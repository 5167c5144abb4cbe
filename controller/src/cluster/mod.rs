//! The EtcdCluster reconciler: `plan` decides, `status` renders conditions; the I/O shell lives
//! in `reconcile`; `data_home` finds where a broken member's data lives; `ca_set` judges a CA change by the CAs each member loaded; `alarms` turns etcd's alarms into a condition; `volumes` grows member PVCs; `view` holds the member facts the planner and its rules read.

pub mod alarms;
pub mod ca_set;
pub mod data_home;
pub mod plan;
pub mod reconcile;
pub mod status;
pub mod view;
pub mod volumes;
