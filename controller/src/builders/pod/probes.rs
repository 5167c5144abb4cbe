//! The etcd container's probes: liveness that never depends on quorum, readiness that is
//! etcd's own health except for a NOSPACE alarm.

use k8s_openapi::api::core::v1::{HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::naming::{METRICS_PORT, PEER_PORT};

/// The etcd container's readiness probe path, on the metrics listener.
pub const READINESS_PATH: &str = "/health?exclude=NOSPACE";

/// Liveness only asks "is the process serving its peer port": never quorum-aware, so a
/// partitioned minority is not restarted into a crash loop.
pub(super) fn liveness_probe() -> Probe {
    Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(PEER_PORT),
            host: None,
        }),
        initial_delay_seconds: Some(10),
        period_seconds: Some(10),
        timeout_seconds: Some(5),
        failure_threshold: Some(6),
        ..Default::default()
    }
}

/// Readiness is etcd's own health (a leader, a quorum read answered) except for a raised
/// NOSPACE alarm: under it etcd still serves reads, deletes and compactions, the very
/// remedies, and the Pods must stay behind the client Service and count for rollouts.
/// etcd 3.5 and 3.6 both honour `exclude` on the metrics listener.
pub(super) fn readiness_probe() -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(READINESS_PATH.to_string()),
            port: IntOrString::Int(METRICS_PORT),
            scheme: Some("HTTP".to_string()),
            ..Default::default()
        }),
        period_seconds: Some(2),
        timeout_seconds: Some(5),
        failure_threshold: Some(3),
        ..Default::default()
    }
}
