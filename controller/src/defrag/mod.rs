//! Defragmentation: the EtcdDefrag controller ([`run`], a one-shot run over one cluster's
//! members) and the EtcdDefragPolicy controller ([`policy`], which creates runs on a schedule or
//! when a check finds a member worth it). Each is an I/O shell (`mod.rs`) around its pure
//! planner (`plan.rs`). Nothing else lives here.

pub mod policy;
pub mod run;
