//! What each member says about itself: etcd's Maintenance `Status` (leader, learner, raft index
//! and term, database sizes, version), asked of every member whose Pod runs, each through its
//! own kept client (a `Status` is answered by the member the call reaches), all at once and
//! bounded in time. It feeds `status.members[]` ([`crate::cluster::roster`]); nothing is
//! planned from it, and a member that does not answer in time is just shown without an answer.

use std::collections::BTreeMap;
use std::time::Duration;

use api::v1alpha2::EtcdCluster;
use futures::future::join_all;

use super::Members;
use crate::context::Context;
use crate::etcd::access::{Access, ClusterKey};
use crate::etcd::MemberStatus;
use crate::topology;

/// How long the members' answers are waited for: a member that is down must not slow the
/// reconcile (its connection attempt alone may take seconds).
const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// The answers, by member name.
pub(in crate::cluster) type Answers = BTreeMap<String, MemberStatus>;

/// Ask every member with a running Pod for its status.
pub(super) async fn ask_members(
    cluster: &EtcdCluster,
    ctx: &Context,
    key: &ClusterKey,
    access: &Access,
    members: &Members,
) -> Answers {
    let asks = members
        .items
        .iter()
        .zip(&members.views)
        .filter(|(_, v)| v.pod.as_ref().is_some_and(|p| !p.terminating) && !v.dormant)
        .map(|(m, v)| {
            let key = key.member(&v.name);
            let url = topology::client_url(m, cluster);
            async move {
                let asked = async {
                    let mut client = ctx.etcd.get(&key, std::slice::from_ref(&url), access).await?;
                    client.member_status().await
                };
                match tokio::time::timeout(ANSWER_WAIT, asked).await {
                    Ok(Ok(status)) => Some((v.name.clone(), status)),
                    Ok(Err(e)) => {
                        ctx.etcd.forget(&key);
                        tracing::debug!(member = %v.name, error = %e, "member did not answer its status");
                        None
                    }
                    Err(_) => {
                        ctx.etcd.forget(&key);
                        tracing::debug!(member = %v.name, "member did not answer its status in time");
                        None
                    }
                }
            }
        });
    join_all(asks).await.into_iter().flatten().collect()
}
