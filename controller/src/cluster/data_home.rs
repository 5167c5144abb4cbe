//! Where a member's data lives, for the planner's replacement rules ([`DataHome`]): the
//! member's PVC → its bound PV → the PV's node affinity (a Node-local volume names one host) or,
//! for a volume no single Node holds and for a Memory member, the Pod's Node → that Node's
//! existence and readiness. Looked up only for members whose Pod cannot run; every API error
//! gives [`DataHome::Unknown`], which is never grounds for a replacement. Reads Nodes (get, and
//! list by the hostname label) and PersistentVolumes (get); writes nothing.

use api::v1alpha2::EtcdMember;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::plan::DataHome;

/// The label kubelet sets to the host's name; local volume provisioners pin PVs with it.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// How a Node is named by what points at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRef {
    /// By object name: a Pod's `spec.nodeName`, a PV's `matchFields` on `metadata.name`.
    Name(String),
    /// By its `kubernetes.io/hostname` label (usually, not always, the Node's name).
    Hostname(String),
}

impl NodeRef {
    fn value(&self) -> &str {
        match self {
            NodeRef::Name(v) | NodeRef::Hostname(v) => v,
        }
    }
}

/// Where the data of a member is, before any Node is looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// Decided without a Node (a lost volume, network storage, nothing to go by).
    Known(DataHome),
    /// On (or, for the Pod's Node, reached through) this Node.
    Node(NodeRef),
}

/// The one host a PV is pinned to: every term of its required node affinity names hosts (by
/// the hostname label or by Node name), and together they name exactly one. A PV pinned to a
/// zone, or to no Node at all, is not Node-local: a Pod can mount it elsewhere.
pub fn pinned_host(pv: &PersistentVolume) -> Option<NodeRef> {
    let terms = &pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    let mut hosts: Vec<NodeRef> = Vec::new();
    for term in terms {
        let by_label = term
            .match_expressions
            .iter()
            .flatten()
            .filter(|e| e.key == HOSTNAME_LABEL && e.operator == "In");
        let by_name = term
            .match_fields
            .iter()
            .flatten()
            .filter(|e| e.key == "metadata.name" && e.operator == "In");
        let mut in_term: Vec<NodeRef> = by_label
            .flat_map(|e| e.values.iter().flatten().cloned().map(NodeRef::Hostname))
            .chain(by_name.flat_map(|e| e.values.iter().flatten().cloned().map(NodeRef::Name)))
            .collect();
        if in_term.is_empty() {
            // A term that does not name a host lets the volume go elsewhere.
            return None;
        }
        hosts.append(&mut in_term);
    }
    let first = hosts.first()?;
    hosts.iter().all(|h| h == first).then(|| first.clone())
}

/// Where `member`'s data is, from its Pod, its claim and the claim's PV (`pv`: `None` when the
/// claim is not bound, `Some(None)` when its PV does not exist).
pub fn place(
    member: &EtcdMember,
    pod: Option<&Pod>,
    pvc: Option<&PersistentVolumeClaim>,
    pv: Option<Option<&PersistentVolume>>,
) -> Place {
    let pod_node = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
        .map(NodeRef::Name);
    if member.spec.storage.is_memory() {
        // tmpfs: the data is in the Pod, on the Pod's Node; a Pod never scheduled holds none.
        return match pod_node {
            Some(node) => Place::Node(node),
            None => Place::Known(DataHome::Unknown),
        };
    }
    // A claim that is gone is the lost-PVC rule's (DataLost), not this one's.
    let Some(pvc) = pvc else {
        return Place::Known(DataHome::Unknown);
    };
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    let volume = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty());
    if phase == Some("Lost") {
        return Place::Known(DataHome::VolumeGone {
            volume: volume.unwrap_or_else(|| pvc.name_any()),
        });
    }
    let (Some(volume), Some("Bound")) = (volume, phase) else {
        return Place::Known(DataHome::Unknown);
    };
    match pv {
        None => Place::Known(DataHome::Unknown),
        Some(None) => Place::Known(DataHome::VolumeGone { volume }),
        Some(Some(pv)) => match pinned_host(pv) {
            Some(host) => Place::Node(host),
            // Network storage: its data follows the Pod to any Node. What can still hold the
            // member is the Node its Pod is stuck on.
            None => match pod_node {
                Some(node) => Place::Node(node),
                None => Place::Known(DataHome::Reachable),
            },
        },
    }
}

/// What the Node `node` (found under `wanted`) says about data on it: Ready, or NotReady since
/// its `Ready` condition's last transition. A Node without a `Ready` condition (just
/// registered) is not judged.
pub fn node_state(node: &Node) -> DataHome {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => DataHome::Reachable,
        Some(c) => match &c.last_transition_time {
            Some(t) => DataHome::NodeNotReady {
                node: node.name_any(),
                since: t.0,
            },
            None => DataHome::Unknown,
        },
        None => DataHome::Unknown,
    }
}

/// The data home of `member` (see the module docs); one PV get and one Node get or list.
pub async fn look_up(
    client: &Client,
    member: &EtcdMember,
    pod: Option<&Pod>,
    pvc: Option<&PersistentVolumeClaim>,
) -> DataHome {
    let name = member.name_any();
    let volume = pvc
        .and_then(|c| c.spec.as_ref())
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty() && !member.spec.storage.is_memory());
    let pv = match volume {
        Some(volume) => match Api::<PersistentVolume>::all(client.clone())
            .get_opt(&volume)
            .await
        {
            Ok(pv) => Some(pv),
            Err(e) => {
                tracing::warn!(member = %name, pv = %volume, error = %e, "could not read the member's PersistentVolume; not judging where its data is");
                return DataHome::Unknown;
            }
        },
        None => None,
    };
    let node = match place(member, pod, pvc, pv.as_ref().map(Option::as_ref)) {
        Place::Known(home) => return home,
        Place::Node(node) => node,
    };
    let nodes = Api::<Node>::all(client.clone());
    let found = match &node {
        NodeRef::Name(n) => nodes.get_opt(n).await.map(|n| n.into_iter().collect()),
        NodeRef::Hostname(h) => nodes
            .list(&ListParams::default().labels(&format!("{HOSTNAME_LABEL}={h}")))
            .await
            .map(|l| l.items),
    };
    match found {
        Ok(found) => match found.as_slice() {
            [] => DataHome::NodeGone {
                node: node.value().to_string(),
            },
            [one] => node_state(one),
            // Two Nodes claim the host: not ours to judge.
            _ => DataHome::Unknown,
        },
        Err(e) => {
            tracing::warn!(member = %name, node = %node.value(), error = %e, "could not read the Node holding the member's data; not judging where its data is");
            DataHome::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(affinity: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv"},
            "spec": {"nodeAffinity": affinity},
        }))
        .unwrap()
    }

    fn hostname_term(hosts: &[&str]) -> serde_json::Value {
        serde_json::json!({"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
        ]})
    }

    #[test]
    fn a_pv_is_node_local_only_when_its_affinity_names_exactly_one_host() {
        let local =
            pv(serde_json::json!({"required": {"nodeSelectorTerms": [hostname_term(&["n1"])]}}));
        assert_eq!(pinned_host(&local), Some(NodeRef::Hostname("n1".into())));
        let by_name = pv(serde_json::json!({"required": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
        ]}}));
        assert_eq!(pinned_host(&by_name), Some(NodeRef::Name("n2".into())));
        for not_local in [
            serde_json::json!(null),
            serde_json::json!({"required": {"nodeSelectorTerms": [hostname_term(&["n1", "n2"])]}}),
            serde_json::json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}
            ]}]}}),
            serde_json::json!({"required": {"nodeSelectorTerms": [
                hostname_term(&["n1"]),
                {"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}
                ]}
            ]}}),
        ] {
            assert_eq!(pinned_host(&pv(not_local.clone())), None, "{not_local}");
        }
    }

    fn member(memory: bool) -> EtcdMember {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c-a", "namespace": "n"},
            "spec": {"clusterName": "c", "version": "3.6.11",
                "storage": if memory { serde_json::json!({"medium": "Memory", "size": "1Gi"}) }
                    else { serde_json::json!({"size": "1Gi"}) }},
        }))
        .unwrap()
    }

    fn pod(node: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c-a"},
            "spec": {"containers": [], "nodeName": node},
        }))
        .unwrap()
    }

    fn pvc(phase: &str, volume: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data-c-a"},
            "spec": {"volumeName": volume},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn the_data_is_on_the_local_volumes_host_else_where_the_pod_is_stuck() {
        let m = member(false);
        let local =
            pv(serde_json::json!({"required": {"nodeSelectorTerms": [hostname_term(&["n1"])]}}));
        let network = pv(serde_json::json!(null));
        let bound = pvc("Bound", Some("pv"));
        // An unschedulable Pod (no Node) whose volume is pinned: the volume's host.
        assert_eq!(
            place(&m, Some(&pod(None)), Some(&bound), Some(Some(&local))),
            Place::Node(NodeRef::Hostname("n1".into()))
        );
        // Network storage: the Node the Pod is on, or reachable from anywhere.
        assert_eq!(
            place(
                &m,
                Some(&pod(Some("n3"))),
                Some(&bound),
                Some(Some(&network))
            ),
            Place::Node(NodeRef::Name("n3".into()))
        );
        assert_eq!(
            place(&m, Some(&pod(None)), Some(&bound), Some(Some(&network))),
            Place::Known(DataHome::Reachable)
        );
        // The PV is gone, or the claim says so.
        assert_eq!(
            place(&m, Some(&pod(None)), Some(&bound), Some(None)),
            Place::Known(DataHome::VolumeGone {
                volume: "pv".into()
            })
        );
        assert_eq!(
            place(&m, None, Some(&pvc("Lost", Some("pv"))), None),
            Place::Known(DataHome::VolumeGone {
                volume: "pv".into()
            })
        );
        // Not bound yet, or no claim (the lost-PVC rule's): nothing to judge.
        assert_eq!(
            place(&m, Some(&pod(None)), Some(&pvc("Pending", None)), None),
            Place::Known(DataHome::Unknown)
        );
        assert_eq!(
            place(&m, Some(&pod(None)), None, None),
            Place::Known(DataHome::Unknown)
        );
        // A Memory member: the Pod's Node, or nothing when it never had one.
        let mem = member(true);
        assert_eq!(
            place(&mem, Some(&pod(Some("n2"))), None, None),
            Place::Node(NodeRef::Name("n2".into()))
        );
        assert_eq!(
            place(&mem, Some(&pod(None)), None, None),
            Place::Known(DataHome::Unknown)
        );
    }

    #[test]
    fn a_node_is_not_ready_since_its_ready_conditions_last_transition() {
        let node = |ready: serde_json::Value| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1"},
                "status": {"conditions": ready},
            }))
            .unwrap()
        };
        assert_eq!(
            node_state(&node(
                serde_json::json!([{"type": "Ready", "status": "True"}])
            )),
            DataHome::Reachable
        );
        assert_eq!(
            node_state(&node(
                serde_json::json!([{"type": "Ready", "status": "Unknown",
                "lastTransitionTime": "2026-11-25T10:00:00Z"}])
            )),
            DataHome::NodeNotReady {
                node: "n1".into(),
                since: "2026-11-25T10:00:00Z".parse().unwrap()
            }
        );
        assert_eq!(node_state(&node(serde_json::json!([]))), DataHome::Unknown);
    }
}
