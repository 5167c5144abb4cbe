//! What a defrag run (and a policy's check) sees of its cluster: each running member's
//! readiness, quota and own `Status`, and the alarms etcd lists. Reads only; it decides nothing (that is [`super::plan`]'s) and writes nothing.

use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::plan::{self, MemberObservation};
use super::STATUS_TIMEOUT;
use crate::context::Context;
use crate::etcd::access::Access;
use crate::etcd::Alarm;
use crate::{topology, Error};

/// A member's client URL with the connection to use for it.
pub(crate) struct Member {
    pub(super) url: String,
}

/// The cluster's running members (added to etcd, not dormant, not being deleted) with their
/// Pods' readiness and their own `Status`; the alarms etcd lists.
pub(crate) async fn observe(
    ctx: &Context,
    ns: &str,
    cluster: &EtcdCluster,
    access: &Access,
) -> Result<(Vec<MemberObservation>, Vec<Member>, Vec<(u64, Alarm)>), Error> {
    let name = cluster.name_any();
    let uid = cluster.uid().unwrap_or_default();
    let selector = ListParams::default().labels(&api::labels::cluster_selector(&name));
    let members: Vec<EtcdMember> = Api::<EtcdMember>::namespaced(ctx.client.clone(), ns)
        .list(&selector)
        .await?
        .items
        .into_iter()
        .filter(|m| crate::controller_uid(m).as_deref() == Some(uid.as_str()))
        .filter(|m| !m.spec.dormant && !m.spec.initial_cluster.is_empty())
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .collect();
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns)
        .list(&selector)
        .await?
        .items;
    let mut observed = Vec::new();
    let mut conns = Vec::new();
    let mut alarms = None;
    for m in &members {
        let member = m.name_any();
        let pod = pods.iter().find(|p| {
            p.name_any() == member
                && p.metadata.deletion_timestamp.is_none()
                && crate::controller_uid(*p) == m.uid()
        });
        let ready = pod.is_some_and(|p| crate::pods::pod_view(p).ready);
        let url = topology::client_url(m, cluster);
        // A running Pod that is not Ready is asked too: a raised alarm fails etcd's /health.
        let status = if pod.is_some() {
            match access
                .dial_with_timeout(std::slice::from_ref(&url), STATUS_TIMEOUT)
                .await
            {
                Ok(mut client) => {
                    let status = client.member_status().await.map_err(|e| e.to_string());
                    if alarms.is_none() && status.is_ok() {
                        alarms = client.alarms().await.ok();
                    }
                    status
                }
                Err(e) => Err(e.stable_message()),
            }
        } else {
            Err("it has no running Pod".to_string())
        };
        observed.push(MemberObservation {
            name: member,
            ready,
            quota: pod.map_or_else(|| plan::cluster_quota(cluster), plan::running_quota),
            status,
        });
        conns.push(Member { url });
    }
    Ok((observed, conns, alarms.unwrap_or_default()))
}

/// The client URL of member `name`.
pub(super) fn url_of(members: &[MemberObservation], conns: &[Member], name: &str) -> String {
    members
        .iter()
        .zip(conns)
        .find(|(m, _)| m.name == name)
        .map(|(_, c)| c.url.clone())
        .unwrap_or_default()
}
