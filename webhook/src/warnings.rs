//! Advice returned as admission warnings (`kubectl` prints them; the request still succeeds):
//! choices that are valid but risky for an etcd cluster. Each message names the field, says
//! why it matters and what to do, and stays under the 256 characters the apiserver keeps.

use api::quantity;
use api::v1alpha2::EtcdClusterSpec;

use crate::config::{AntiAffinity, Policy};

/// Above this, every write waits for more acknowledgements without useful extra tolerance.
pub const MAX_ADVISED_REPLICAS: i32 = 7;

/// Where a user learns to set up TLS for a cluster (this project's docs/tls.md).
pub const TLS_DOCS_URL: &str =
    "https://github.com/cozystack/etcd-operator-rs/blob/main/docs/tls.md";

/// Warnings for an EtcdCluster spec as it will be stored (after defaulting).
pub fn cluster_advice(spec: &EtcdClusterSpec, policy: &Policy) -> Vec<String> {
    let mut out = Vec::new();
    let replicas = spec.replicas;
    if replicas > 0 && replicas % 2 == 0 {
        out.push(format!(
            "spec.replicas={replicas} is even: it tolerates no more member failures than {} (quorum is {}); prefer an odd count such as {} or {}",
            replicas - 1,
            replicas / 2 + 1,
            replicas - 1,
            replicas + 1
        ));
    }
    if replicas > MAX_ADVISED_REPLICAS {
        out.push(format!(
            "spec.replicas={replicas} is more than {MAX_ADVISED_REPLICAS}: every write must reach a majority, so large clusters write slower without useful extra fault tolerance; prefer 5 or 7"
        ));
    }
    let memory_limit = spec
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"));
    if spec.storage.is_memory() && memory_limit.is_none() {
        out.push(format!(
            "spec.storage.medium=Memory without spec.resources.limits.memory: tmpfs data counts as the member's memory, so an unbounded member can exhaust its node; set limits.memory to storage.size ({}) plus headroom",
            spec.storage.size.0
        ));
    }
    if let Some(limit) = memory_limit.filter(|_| spec.storage.is_memory()) {
        out.extend(memory_limit_below_tmpfs(spec, limit, policy));
    }
    let anti_affinity_set = spec
        .affinity
        .as_ref()
        .is_some_and(|a| a.pod_anti_affinity.is_some());
    if policy.anti_affinity == AntiAffinity::Off && !anti_affinity_set {
        out.push(
            "spec.affinity.podAntiAffinity is unset: several members may share a node, and losing that node can lose quorum; add a podAntiAffinity on kubernetes.io/hostname for the etcd-operator.cozystack.io/cluster label"
                .to_string(),
        );
    }
    out
}

/// A cluster whose client or peer listener serves plain text. Anyone who reaches port 2379 of
/// a client listener without TLS reads and writes every key (etcd has no authentication
/// without it: `spec.auth` requires `tls.client`), and peers without TLS replicate every write
/// in the clear; both are valid for a throw-away cluster, so this warns instead of refusing.
/// Given on every create and update of such a cluster: `spec.tls` is immutable, so an update
/// is the reminder that the data moves in the clear until the cluster is recreated with TLS.
pub fn plaintext_advice(spec: &EtcdClusterSpec) -> Option<String> {
    let plain = match (spec.client_tls(), spec.peer_tls()) {
        (true, true) => return None,
        (false, false) => "spec.tls.client and spec.tls.peer are unset: anyone reaching port 2379 reads and writes every key, and members replicate in plain text",
        (false, true) => "spec.tls.client is unset: anyone reaching port 2379 reads and writes every key in plain text",
        (true, false) => "spec.tls.peer is unset: members replicate every write in plain text on port 2380",
    };
    Some(format!(
        "{plain}; TLS is chosen when a cluster is created: {TLS_DOCS_URL}"
    ))
}

/// A Memory cluster whose memory limit leaves less than `--memory-headroom` above the tmpfs
/// size. The create-time default is `storage.size + headroom`, but `storage.size` may grow
/// later (the default is not recomputed: a running cluster's resources are the user's to
/// change), and then the tmpfs `sizeLimit` reaches or passes the container's limit: the member
/// is OOM-killed before its tmpfs is full.
fn memory_limit_below_tmpfs(
    spec: &EtcdClusterSpec,
    limit: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    policy: &Policy,
) -> Option<String> {
    let size = &spec.storage.size;
    let needed = quantity::add(size, &policy.memory_headroom)?;
    let (Ok(have), Ok(want)) = (quantity::parse(limit), quantity::parse(&needed)) else {
        return None;
    };
    (have < want).then(|| {
        format!(
            "spec.resources.limits.memory={} leaves less than {} above spec.storage.size={} (medium Memory: tmpfs data counts against the limit), so etcd is OOM-killed as its tmpfs fills; set limits.memory to {} or more",
            limit.0, policy.memory_headroom.0, size.0, needed.0
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Affinity, PodAntiAffinity, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn spec(json: serde_json::Value) -> EtcdClusterSpec {
        serde_json::from_value(json).unwrap()
    }

    fn off() -> Policy {
        Policy {
            anti_affinity: AntiAffinity::Off,
            ..Policy::default()
        }
    }

    #[test]
    fn odd_replicas_with_defaults_get_no_advice() {
        let s = spec(serde_json::json!({"version": "3.6.11", "replicas": 3}));
        assert!(cluster_advice(&s, &Policy::default()).is_empty());
        let paused = spec(serde_json::json!({"version": "3.6.11", "replicas": 0}));
        assert!(cluster_advice(&paused, &Policy::default()).is_empty());
    }

    #[test]
    fn even_replicas_are_warned_with_the_odd_neighbours() {
        let w = cluster_advice(
            &spec(serde_json::json!({"version": "3.6.11", "replicas": 4})),
            &Policy::default(),
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("spec.replicas=4") && w[0].contains("3 or 5"),
            "{w:?}"
        );
    }

    #[test]
    fn more_than_seven_replicas_is_warned() {
        let w = cluster_advice(
            &spec(serde_json::json!({"version": "3.6.11", "replicas": 9})),
            &Policy::default(),
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("more than 7"), "{w:?}");
    }

    #[test]
    fn memory_medium_without_memory_limit_is_warned_and_with_one_is_not() {
        let mut s = spec(
            serde_json::json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"}}),
        );
        let w = cluster_advice(&s, &Policy::default());
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("limits.memory") && w[0].contains("1Gi"),
            "{w:?}"
        );
        s.resources = Some(ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("2Gi".into()),
            )])),
            ..Default::default()
        });
        assert!(cluster_advice(&s, &Policy::default()).is_empty());
    }

    #[test]
    fn memory_limit_below_size_plus_headroom_is_warned_with_both_values() {
        let s = |size: &str, limit: &str| {
            spec(serde_json::json!({"version": "3.6.11",
                "storage": {"size": size, "medium": "Memory"},
                "resources": {"limits": {"memory": limit}}}))
        };
        let w = cluster_advice(&s("2Gi", "1280Mi"), &Policy::default());
        assert_eq!(w.len(), 1, "{w:?}");
        for needle in [
            "limits.memory=1280Mi",
            "256Mi",
            "size=2Gi",
            "2304Mi or more",
        ] {
            assert!(w[0].contains(needle), "{needle} missing: {w:?}");
        }
        assert!(cluster_advice(&s("1Gi", "1280Mi"), &Policy::default()).is_empty());
        assert!(cluster_advice(&s("1Gi", "8Gi"), &Policy::default()).is_empty());
        let pvc = spec(
            serde_json::json!({"version": "3.6.11", "storage": {"size": "10Gi"},
            "resources": {"limits": {"memory": "1Gi"}}}),
        );
        assert!(cluster_advice(&pvc, &Policy::default()).is_empty());
    }

    #[test]
    fn missing_anti_affinity_is_warned_only_when_defaulting_is_off() {
        let mut s = spec(serde_json::json!({"version": "3.6.11"}));
        assert!(cluster_advice(&s, &Policy::default()).is_empty());
        let w = cluster_advice(&s, &off());
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("podAntiAffinity"), "{w:?}");
        s.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity::default()),
            ..Default::default()
        });
        assert!(cluster_advice(&s, &off()).is_empty());
    }

    #[test]
    fn cluster_without_tls_is_warned_with_the_listeners_and_the_docs_link() {
        let none = plaintext_advice(&spec(serde_json::json!({"version": "3.6.11"})));
        let none = none.expect("a cluster without spec.tls is warned");
        for needle in [
            "spec.tls.client and spec.tls.peer",
            "port 2379",
            TLS_DOCS_URL,
        ] {
            assert!(none.contains(needle), "{needle} missing: {none}");
        }
        let secret = |name: &str| serde_json::json!({"name": name});
        let client = serde_json::json!({"serverSecretRef": secret("server")});
        let peer = serde_json::json!({"secretRef": secret("peer")});
        let only_client = plaintext_advice(&spec(
            serde_json::json!({"version": "3.6.11", "tls": {"client": client}}),
        ))
        .expect("peers in plain text are warned");
        assert!(
            only_client.starts_with("spec.tls.peer is unset"),
            "{only_client}"
        );
        let only_peer = plaintext_advice(&spec(
            serde_json::json!({"version": "3.6.11", "tls": {"peer": peer}}),
        ))
        .expect("clients in plain text are warned");
        assert!(
            only_peer.starts_with("spec.tls.client is unset"),
            "{only_peer}"
        );
        assert_eq!(
            plaintext_advice(&spec(serde_json::json!({"version": "3.6.11",
                "tls": {"client": client, "peer": peer}}))),
            None
        );
    }

    #[test]
    fn every_warning_fits_what_the_apiserver_keeps() {
        let s = spec(
            serde_json::json!({"version": "3.6.11", "replicas": 12, "storage": {"size": "1024Gi", "medium": "Memory"}}),
        );
        let mut w = cluster_advice(&s, &off());
        w.extend(plaintext_advice(&s));
        assert_eq!(w.len(), 5, "{w:?}");
        for warning in w {
            assert!(warning.len() < 256, "{} chars: {warning}", warning.len());
        }
    }
}
