//! Test fixtures the commands' tests share: times and conditions.

use api::v1alpha2::{EtcdCluster, EtcdClusterSpec, EtcdClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// `s` seconds after a fixed instant (2027-01-15T08:00:00Z).
pub fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).expect("time")
}

/// A condition that changed at [`at`]`(0)`.
pub fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(at(0)),
        observed_generation: None,
    }
}

/// EtcdCluster prod/demo (3 replicas of etcd 3.6.5, created at [`at`]`(0)`) with `conditions`.
pub fn cluster(conditions: Vec<Condition>) -> EtcdCluster {
    let mut c = EtcdCluster::new(
        "demo",
        EtcdClusterSpec {
            replicas: 3,
            version: "3.6.5".into(),
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("prod".into());
    c.metadata.uid = Some("uid-now".into());
    c.metadata.creation_timestamp = Some(Time(at(0)));
    c.status = Some(EtcdClusterStatus {
        cluster_id: Some("5a0f5c1f62e6a3b1".into()),
        conditions,
        ..Default::default()
    });
    c
}
