//! What the recovery observes of a member Pod that does not go: how far past its deletion
//! deadline it is and the state of its Node, for `StopMembers`' message (plan.rs names it and
//! the way out). Read only once the Pod is late enough for the planner to name it.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use super::plan::{self, NodeState, Overdue};
use crate::context::Context;

/// A Pod being deleted that still exists past its deletion deadline: by how much, and its Node
/// (read only once the Pod is late enough for the planner to name it).
pub(super) async fn overdue(ctx: &Context, pod: &Pod) -> Option<Overdue> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?.0;
    let secs = u64::try_from(Timestamp::now().as_second() - deadline.as_second()).ok()?;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let node_state = match &node {
        Some(node) if secs >= plan::STUCK_AFTER_SECS => {
            match Api::<Node>::all(ctx.client.clone()).get_opt(node).await {
                Ok(None) => Some(NodeState::Gone),
                Ok(Some(n)) => Some(node_ready(&n)),
                // Only a hint in a message: a Node that cannot be read is named without it.
                Err(e) => {
                    tracing::debug!(%node, error = %e, "cannot read the Node of a stuck Pod");
                    None
                }
            }
        }
        _ => None,
    };
    Some(Overdue {
        secs,
        deadline: deadline.to_string(),
        node,
        node_state,
    })
}

fn node_ready(node: &Node) -> NodeState {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if ready {
        NodeState::Ready
    } else {
        NodeState::NotReady
    }
}
