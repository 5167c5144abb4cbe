//! `status.members[]` and `status.leader` of an EtcdCluster, as etcd itself reports them (the
//! shape agreed for issue 41 item 3), read from the status JSON so the plugin works against an
//! operator that writes them and degrades to the EtcdMembers against one that does not.

use serde::Deserialize;

/// One member as etcd reports it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMemberStatus {
    pub name: String,
    #[serde(default, rename = "memberID")]
    pub member_id: Option<String>,
    /// `Leader`, `Follower` or `Learner`.
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub version: Option<String>,
    /// Bytes allocated (the backend file).
    #[serde(default)]
    pub db_size: Option<i64>,
    #[serde(default)]
    pub db_size_in_use: Option<i64>,
    #[serde(default)]
    pub raft_index: Option<i64>,
    #[serde(default)]
    pub raft_term: Option<i64>,
    #[serde(default)]
    pub alarms: Vec<String>,
}

/// The two fields of `status` this module reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MembersStatus {
    #[serde(default)]
    pub members: Vec<ClusterMemberStatus>,
    #[serde(default)]
    pub leader: Option<String>,
}

impl MembersStatus {
    /// From an EtcdCluster's JSON; absent or unreadable fields read as none reported.
    pub fn of(cluster: &serde_json::Value) -> Self {
        cluster
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .unwrap_or_default()
    }
}

/// The cluster's members: `status.members` when the operator reports them (`true`), else from
/// its EtcdMembers (`false`), sorted by name; and the leader it reports.
pub async fn of_cluster(
    o: &crate::objects::Objects,
    cluster: &str,
    raw: &serde_json::Value,
) -> crate::error::Result<(MembersStatus, bool)> {
    let mut reported = MembersStatus::of(raw);
    if !reported.members.is_empty() {
        return Ok((reported, true));
    }
    let selector = format!("{}={}", api::labels::CLUSTER, cluster);
    let mut members: Vec<_> = o
        .list::<api::v1alpha2::EtcdMember>(Some(&selector))
        .await?
        .iter()
        .map(from_etcd_member)
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    reported.members = members;
    Ok((reported, false))
}

/// A member from its EtcdMember alone (an operator that does not report `status.members`):
/// its ID, voter or learner, Pod readiness and version; no role beyond learner, no sizes.
pub fn from_etcd_member(m: &api::v1alpha2::EtcdMember) -> ClusterMemberStatus {
    let status = m.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == api::conditions::member::READY && c.status == "True");
    ClusterMemberStatus {
        name: kube::ResourceExt::name_any(m),
        member_id: status.member_id,
        role: (!status.is_voter).then(|| "Learner".to_string()),
        ready,
        version: status.version,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_agreed_shape_is_read_from_the_status() {
        let c = json!({"status": {"leader": "demo-a", "members": [
            {"name": "demo-a", "memberID": "8e9e05c52164694d", "role": "Leader", "ready": true,
             "version": "3.6.5", "dbSize": 4096, "dbSizeInUse": 2048, "raftIndex": 9,
             "raftTerm": 2, "alarms": ["NOSPACE"]},
            {"name": "demo-b", "ready": false}
        ]}});
        let s = MembersStatus::of(&c);
        assert_eq!(s.leader.as_deref(), Some("demo-a"));
        assert_eq!(s.members[0].member_id.as_deref(), Some("8e9e05c52164694d"));
        assert_eq!(s.members[0].db_size_in_use, Some(2048));
        assert_eq!(s.members[0].alarms, ["NOSPACE"]);
        assert_eq!(
            s.members[1],
            ClusterMemberStatus {
                name: "demo-b".into(),
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_status_without_members_reads_as_none_reported() {
        assert_eq!(
            MembersStatus::of(&json!({"status": {"readyMembers": 3}})),
            MembersStatus::default()
        );
        assert_eq!(MembersStatus::of(&json!({})), MembersStatus::default());
    }
}
