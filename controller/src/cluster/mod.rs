//! The EtcdCluster reconciler: `plan` decides, `status` renders conditions; the I/O shell lives
//! in `reconcile`.

pub mod plan;
pub mod reconcile;
pub mod status;
