//! Where a member is: its client and peer URLs, and the join between an EtcdMember and its entry
//! in etcd's member list. Written once, here; pure (no I/O).
//!
//! A member is found in etcd's list by its peer URL (what `MemberAdd` registered), and, for an
//! entry whose URL was changed by hand or by an older operator, by the member ID its status
//! recorded.

use api::v1alpha2::{EtcdCluster, EtcdMember};
use kube::ResourceExt;

use crate::etcd::{parse_id, EtcdMemberInfo};
use crate::naming;

/// The URL clients (and the operator) dial `member` at.
pub fn client_url(member: &EtcdMember, cluster: &EtcdCluster) -> String {
    naming::client_url(
        &member.name_any(),
        &naming::member_service(member),
        &cluster.namespace().unwrap_or_default(),
        cluster.spec.client_tls(),
    )
}

/// The URL peers dial `member` at: what etcd lists for it.
pub fn peer_url(member: &EtcdMember, cluster: &EtcdCluster) -> String {
    naming::peer_url(
        &member.name_any(),
        &naming::member_service(member),
        &cluster.namespace().unwrap_or_default(),
        cluster.peer_https(),
    )
}

/// The entry of etcd's member list that advertises `peer_url`.
pub fn entry_by_peer_url<'a>(
    listed: &'a [EtcdMemberInfo],
    peer_url: &str,
) -> Option<&'a EtcdMemberInfo> {
    listed
        .iter()
        .find(|e| e.peer_urls.iter().any(|u| u == peer_url))
}

/// `member`'s entry in etcd's member list: by its peer URL, else by the member ID its status
/// recorded (when etcd still lists that ID).
pub fn entry_of<'a>(
    member: &EtcdMember,
    cluster: &EtcdCluster,
    listed: &'a [EtcdMemberInfo],
) -> Option<&'a EtcdMemberInfo> {
    entry_by_peer_url(listed, &peer_url(member, cluster)).or_else(|| {
        let id = member
            .status
            .as_ref()
            .and_then(|s| s.member_id.as_deref())
            .and_then(parse_id)?;
        listed.iter().find(|e| e.id == id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{EtcdClusterSpec, EtcdMemberSpec, EtcdMemberStatus};

    fn cluster() -> EtcdCluster {
        let mut c = EtcdCluster::new("c", EtcdClusterSpec::default());
        c.metadata.namespace = Some("n".into());
        c
    }

    fn member(name: &str, id: Option<&str>) -> EtcdMember {
        let mut m = EtcdMember::new(
            name,
            EtcdMemberSpec {
                cluster_name: "c".into(),
                ..Default::default()
            },
        );
        m.metadata.namespace = Some("n".into());
        m.status = id.map(|id| EtcdMemberStatus {
            member_id: Some(id.into()),
            ..Default::default()
        });
        m
    }

    fn entry(id: u64, url: &str) -> EtcdMemberInfo {
        EtcdMemberInfo {
            id,
            name: String::new(),
            peer_urls: vec![url.into()],
            is_learner: false,
        }
    }

    #[test]
    fn a_member_is_reached_through_its_clusters_headless_service() {
        let (c, m) = (cluster(), member("c-a", None));
        assert_eq!(client_url(&m, &c), "http://c-a.c.n.svc:2379");
        assert_eq!(peer_url(&m, &c), "http://c-a.c.n.svc:2380");
    }

    #[test]
    fn a_member_is_joined_to_its_etcd_entry_by_peer_url_then_by_recorded_id() {
        let c = cluster();
        let listed = [
            entry(1, "http://c-a.c.n.svc:2380"),
            entry(2, "http://10.0.0.9:2380"),
        ];
        assert_eq!(
            entry_of(&member("c-a", None), &c, &listed).map(|e| e.id),
            Some(1)
        );
        // The URL was changed by hand: the ID its status recorded still finds it.
        let b = member("c-b", Some("0000000000000002"));
        assert_eq!(entry_of(&b, &c, &listed).map(|e| e.id), Some(2));
        // An ID etcd no longer lists, and no URL: no entry.
        let gone = member("c-x", Some("0000000000000009"));
        assert_eq!(entry_of(&gone, &c, &listed), None);
    }
}
