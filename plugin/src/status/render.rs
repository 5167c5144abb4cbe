//! What `kubectl etcd status` prints, from values read before: the members, the conditions, the
//! newest verified snapshot and what the operator is doing. No I/O.

use api::conditions::{cluster as ctype, snapshot as stype};
use api::v1alpha2::{EtcdCluster, EtcdDefrag, EtcdRecovery, EtcdSnapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::format::{age, bytes, table};
use crate::members::ClusterMemberStatus;

/// Everything the status prints.
pub struct StatusView<'a> {
    pub cluster: &'a EtcdCluster,
    pub members: &'a [ClusterMemberStatus],
    /// The members come from `status.members` (etcd's answers); false: from the EtcdMembers,
    /// with no role, size or raft index (an operator that does not report them).
    pub reported: bool,
    pub leader: Option<&'a str>,
    pub newest_verified: Option<&'a EtcdSnapshot>,
    pub activity: &'a [Activity],
    pub now: Timestamp,
}

/// An EtcdRecovery, EtcdDefrag or EtcdSnapshot of the cluster that has not finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activity {
    pub kind: &'static str,
    pub name: String,
    pub state: String,
}

fn dash(v: Option<String>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or_else(|| "-".into())
}

fn condition<'c>(conditions: &'c [Condition], type_: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The snapshots taken of this incarnation of the cluster (the recovery's rule, as in
/// docs/disaster-recovery.md): its UID recorded, or none recorded and created after the cluster.
fn of_cluster(cluster: &EtcdCluster, s: &EtcdSnapshot) -> bool {
    if s.spec.cluster_ref.name != cluster.name_any() {
        return false;
    }
    match s.status.as_ref().and_then(|st| st.cluster_uid.as_deref()) {
        Some(uid) => cluster.metadata.uid.as_deref() == Some(uid),
        None => s.metadata.creation_timestamp > cluster.metadata.creation_timestamp,
    }
}

/// The newest `Verified=True` snapshot of this cluster, by completion time.
pub fn newest_verified<'s>(
    cluster: &EtcdCluster,
    snapshots: &'s [EtcdSnapshot],
) -> Option<&'s EtcdSnapshot> {
    snapshots
        .iter()
        .filter(|s| of_cluster(cluster, s))
        .filter(|s| s.status.as_ref().and_then(|st| st.verified()) == Some(true))
        .max_by_key(|s| s.status.as_ref().and_then(|st| st.completion_time.clone()))
}

fn ready_reason(conditions: &[Condition]) -> String {
    condition(conditions, "Ready")
        .map(|c| format!(" ({}: {})", c.reason, c.message))
        .unwrap_or_default()
}

/// The cluster's recoveries, defrags and snapshots that have not finished, oldest first.
pub fn activity(
    cluster: &str,
    recoveries: &[EtcdRecovery],
    defrags: &[EtcdDefrag],
    snapshots: &[EtcdSnapshot],
) -> Vec<Activity> {
    let mut out = Vec::new();
    for r in recoveries
        .iter()
        .filter(|r| r.spec.cluster_ref.name == cluster)
    {
        let st = r.status.clone().unwrap_or_default();
        if st.phase.is_some_and(|p| p.is_terminal()) {
            continue;
        }
        let step = st
            .step
            .map(|s| format!(", step {}", s.as_str()))
            .unwrap_or_default();
        out.push(Activity {
            kind: "EtcdRecovery",
            name: r.name_any(),
            state: format!(
                "{:?}{step}{}",
                st.phase.unwrap_or_default(),
                ready_reason(&st.conditions)
            ),
        });
    }
    for d in defrags
        .iter()
        .filter(|d| d.spec.cluster_ref.name == cluster)
    {
        let st = d.status.clone().unwrap_or_default();
        if st.phase.is_some_and(|p| p.is_terminal()) {
            continue;
        }
        out.push(Activity {
            kind: "EtcdDefrag",
            name: d.name_any(),
            state: format!(
                "{:?}{}",
                st.phase.unwrap_or_default(),
                ready_reason(&st.conditions)
            ),
        });
    }
    for s in snapshots
        .iter()
        .filter(|s| s.spec.cluster_ref.name == cluster)
    {
        let st = s.status.clone().unwrap_or_default();
        let state = match st.phase {
            Some(p) if p.is_terminal() && st.verifying() => "Complete, being verified".to_string(),
            Some(p) if p.is_terminal() => continue,
            p => format!("{:?}", p.unwrap_or_default()),
        };
        out.push(Activity {
            kind: "EtcdSnapshot",
            name: s.name_any(),
            state,
        });
    }
    out
}

fn member_rows(members: &[ClusterMemberStatus], reported: bool) -> Vec<Vec<String>> {
    let mut rows = vec![[
        "MEMBER",
        "ID",
        "ROLE",
        "READY",
        "VERSION",
        "DB IN USE / ALLOCATED",
        "RAFT INDEX",
        "ALARMS",
    ]
    .map(String::from)
    .to_vec()];
    for m in members {
        let db = match (m.db_size_in_use, m.db_size) {
            (Some(used), Some(alloc)) => format!("{} / {}", bytes(used), bytes(alloc)),
            (None, Some(alloc)) => format!("- / {}", bytes(alloc)),
            _ => "-".into(),
        };
        let role = match &m.role {
            Some(r) => r.clone(),
            None if reported => "-".into(),
            None => "Voter".into(),
        };
        rows.push(vec![
            m.name.clone(),
            dash(m.member_id.clone()),
            role,
            if m.ready { "yes" } else { "no" }.into(),
            dash(m.version.clone()),
            db,
            dash(m.raft_index.map(|i| i.to_string())),
            if m.alarms.is_empty() {
                "-".into()
            } else {
                m.alarms.join(",")
            },
        ]);
    }
    rows
}

fn snapshot_line(s: &EtcdSnapshot, now: Timestamp) -> String {
    let st = s.status.clone().unwrap_or_default();
    let reason = condition(&st.conditions, stype::VERIFIED)
        .map(|c| c.reason.clone())
        .unwrap_or_default();
    let completed = st
        .completion_time
        .map(|t| format!("completed {} ({} ago)", t.0, age(t.0, now)))
        .unwrap_or_else(|| "completion time unknown".into());
    let uri = st
        .artifact
        .map(|a| format!(", {}", a.uri))
        .unwrap_or_default();
    let revision = st
        .verification
        .map(|v| format!(", revision {}", v.revision))
        .unwrap_or_default();
    format!(
        "{} (Verified, {reason}), {completed}{uri}{revision}",
        s.name_any()
    )
}

/// What the operator does with the cluster now: its Progressing condition, then every
/// unfinished recovery, defrag and snapshot.
fn operator_lines(conditions: &[Condition], activity: &[Activity]) -> Vec<String> {
    let mut lines = Vec::new();
    match condition(conditions, ctype::PROGRESSING) {
        Some(c) if c.status == "True" => lines.push(format!(
            "working: Progressing=True {}: {}",
            c.reason, c.message
        )),
        Some(c) if c.status == "False" && c.reason != api::conditions::reason::RECONCILED => lines
            .push(format!(
                "holding: Progressing=False {}: {}",
                c.reason, c.message
            )),
        Some(c) => lines.push(format!("idle: Progressing={} {}", c.status, c.reason)),
        None => lines.push("no Progressing condition yet (not reconciled)".into()),
    }
    for a in activity {
        lines.push(format!("{} {}: {}", a.kind, a.name, a.state));
    }
    lines
}

pub fn render(v: &StatusView) -> String {
    let c = v.cluster;
    let status = c.status.clone().unwrap_or_default();
    // The operator's count (status.readyMembers: member Pods Ready) against spec.replicas.
    let mut out = format!(
        "EtcdCluster {}/{}: etcd {}, {} of {} members ready, cluster ID {}\n",
        c.namespace().unwrap_or_default(),
        c.name_any(),
        c.spec.version,
        status.ready_members,
        c.spec.replicas,
        dash(status.cluster_id.clone()),
    );
    match (v.leader, v.reported) {
        (Some(l), _) => out.push_str(&format!("Leader: {l}\n")),
        (None, true) => out.push_str("Leader: none (no member reports a leader)\n"),
        (None, false) => out.push_str(
            "Leader: unknown (this operator does not report status.members; roles, sizes and raft \
             indexes below are missing)\n",
        ),
    }
    out.push('\n');
    out.push_str(&table(&member_rows(v.members, v.reported)));
    out.push('\n');
    let mut rows = vec![["CONDITION", "STATUS", "REASON", "AGE", "MESSAGE"]
        .map(String::from)
        .to_vec()];
    for cond in &status.conditions {
        rows.push(vec![
            cond.type_.clone(),
            cond.status.clone(),
            cond.reason.clone(),
            age(cond.last_transition_time.0, v.now),
            cond.message.clone(),
        ]);
    }
    out.push_str(&table(&rows));
    out.push('\n');
    match v.newest_verified {
        Some(s) => out.push_str(&format!(
            "Newest verified snapshot: {}\n",
            snapshot_line(s, v.now)
        )),
        None => out.push_str("Newest verified snapshot: none of this cluster\n"),
    }
    out.push_str("Operator:\n");
    for line in operator_lines(&status.conditions, v.activity) {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

#[cfg(test)]
mod tests;
