//! What `kubectl etcd recover` checks and says before it creates anything, and how it reads the
//! EtcdRecovery it follows. No I/O.

use api::conditions::cluster as ctype;
use api::v1alpha2::{EtcdCluster, EtcdRecovery, EtcdSnapshot, RecoveryPhase, SnapshotPhase};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::error::{Error, Result};
use crate::follow::{with_reason, Progress};
use crate::format::age;
use crate::members::ClusterMemberStatus;

/// What the cluster is rebuilt from.
pub enum Source<'a> {
    /// The operator's choice of survivor, or the member named.
    Survivor(Option<&'a str>),
    Snapshot(&'a EtcdSnapshot),
}

/// A snapshot the recovery would refuse, refused before anything is created: another cluster's
/// (or another incarnation's), not Complete, or not Verified=True without --allow-unverified.
pub fn check_snapshot(
    cluster: &EtcdCluster,
    s: &EtcdSnapshot,
    allow_unverified: bool,
) -> Result<()> {
    let name = s.name_any();
    let status = s.status.clone().unwrap_or_default();
    if s.spec.cluster_ref.name != cluster.name_any() {
        return Err(Error::Refused(format!(
            "EtcdSnapshot {name} is a snapshot of cluster {}, not of {}: pick one of {}'s \
             (`kubectl etcd status {}` shows the newest verified one)",
            s.spec.cluster_ref.name,
            cluster.name_any(),
            cluster.name_any(),
            cluster.name_any()
        )));
    }
    if let (Some(taken_of), Some(uid)) = (
        status.cluster_uid.as_deref(),
        cluster.metadata.uid.as_deref(),
    ) {
        if taken_of != uid {
            return Err(Error::Refused(format!(
                "EtcdSnapshot {name} was taken of an earlier cluster named {} (UID {taken_of}, \
                 this one is {uid}); the operator restores by name only a snapshot of the cluster \
                 itself: give its stored object instead (docs/disaster-recovery.md, \"From a \
                 snapshot given by its S3 object or PVC file\")",
                cluster.name_any()
            )));
        }
    }
    if status.phase != Some(SnapshotPhase::Complete) {
        return Err(Error::Refused(format!(
            "EtcdSnapshot {name} is {:?}, not Complete: only a stored snapshot can be restored",
            status.phase.unwrap_or_default()
        )));
    }
    match status.verified() {
        Some(true) => Ok(()),
        _ if allow_unverified => Ok(()),
        verified => {
            let why = status
                .conditions
                .iter()
                .find(|c| c.type_ == api::conditions::snapshot::VERIFIED)
                .map(|c| format!("Verified={} {}: {}", c.status, c.reason, c.message))
                .unwrap_or_else(|| "it has no Verified condition".into());
            Err(Error::Refused(format!(
                "EtcdSnapshot {name} is not Verified=True ({why}){}: restore a verified one, or \
                 add --allow-unverified if you know it is good",
                if verified == Some(false) {
                    "; do not restore it unless you checked it by hand"
                } else {
                    ""
                }
            )))
        }
    }
}

/// A recovery of a cluster that still has its quorum discards data the user did not ask to lose:
/// the operator refuses it without spec.confirmHealthyClusterRollback, and so does this command,
/// before creating anything.
pub fn refuse_healthy(cluster: &EtcdCluster, confirmed: bool) -> Result<()> {
    let available = cluster
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == ctype::AVAILABLE))
        .filter(|c| c.status == "True");
    match available {
        Some(c) if !confirmed => Err(Error::Refused(format!(
            "EtcdCluster {} is Available ({}: {}): it has a working quorum and heals itself. A \
             recovery would discard data (every write after a snapshot, or every member but one); \
             add --confirm-healthy-rollback only if that is what you want",
            cluster.name_any(),
            c.reason,
            c.message
        ))),
        _ => Ok(()),
    }
}

fn member_line(m: &ClusterMemberStatus) -> String {
    let mut facts = vec![if m.ready { "ready" } else { "not ready" }.to_string()];
    if let Some(role) = &m.role {
        facts.push(role.to_lowercase());
    }
    if let Some(i) = m.raft_index {
        facts.push(format!("raft index {i}"));
    }
    format!("{} ({})", m.name, facts.join(", "))
}

/// What the recovery keeps and loses, in the operator's terms.
pub fn plan_text(
    cluster: &EtcdCluster,
    members: &[ClusterMemberStatus],
    source: &Source,
    now: Timestamp,
) -> String {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let listed = if members.is_empty() {
        "none".to_string()
    } else {
        members
            .iter()
            .map(member_line)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::new();
    match source {
        Source::Survivor(named) => {
            out.push_str(&format!(
                "Recovery of EtcdCluster {ns}/{name} from a surviving member\n"
            ));
            out.push_str(&format!("  members now: {listed}\n"));
            match named {
                Some(m) => out.push_str(&format!(
                    "  survivor:    {m}, as asked (the operator's plan says what any member ahead of it held)\n"
                )),
                None => out.push_str(
                    "  survivor:    the operator's choice: the member with the highest raft commit \
                     index (the most committed data), never a learner; a member whose etcd does \
                     not run has its position read from its data dir first\n",
                ),
            }
            out.push_str(
                "  kept:        every write the survivor holds; the survivor keeps its member ID, \
                 the cluster its etcd cluster ID, name, Services, Secrets and client URLs\n",
            );
            out.push_str(
                "  lost:        the data of every other member: they are deleted with their PVCs and \
                 replaced by new, empty members that copy the survivor's data. A write that only \
                 a discarded member had stored is lost\n",
            );
        }
        Source::Snapshot(s) => {
            let st = s.status.clone().unwrap_or_default();
            let revision = st
                .verification
                .as_ref()
                .map(|v| v.revision)
                .or(st.hash_kv.as_ref().map(|h| h.revision));
            let at = revision.map_or_else(
                || "a revision it did not record".to_string(),
                |r| format!("revision {r}"),
            );
            let completed = st
                .completion_time
                .map(|t| format!("completed {} ({} ago)", t.0, age(t.0, now)))
                .unwrap_or_else(|| "completion time unknown".into());
            let uri = st.artifact.map(|a| a.uri).unwrap_or_default();
            out.push_str(&format!(
                "Recovery of EtcdCluster {ns}/{name} from EtcdSnapshot {}\n",
                s.name_any()
            ));
            out.push_str(&format!("  snapshot:    {at}, {completed}, {uri}\n"));
            out.push_str(&format!("  members now: {listed}\n"));
            out.push_str(&format!(
                "  kept:        every write up to {at}; the cluster keeps its name, Services, \
                 Secrets and client URLs\n"
            ));
            out.push_str(
                "  lost:        every write after the snapshot. It is restored into one member as \
                 a new one-member cluster with its revisions bumped (a watch from an older \
                 revision is told to resync); that member's previous data is set aside on its \
                 PVC, not deleted. The other members are deleted with their PVCs and replaced by \
                 new members that copy the restored data\n",
            );
        }
    }
    out.push_str(
        "The operator writes its exact plan (survivor, raft position, members discarded) in the \
         EtcdRecovery's status.plan before it changes anything; it is printed below once written.\n",
    );
    out
}

/// The operator's plan, in its words, once written: the member it rebuilds from and what is lost.
pub fn recorded_plan(r: &EtcdRecovery) -> Option<String> {
    let plan = r.status.as_ref()?.plan.as_ref()?;
    let mut text = String::from("The operator's plan (status.plan):\n");
    if let Some(m) = &plan.member {
        text.push_str(&format!("  member:    {m}\n"));
    }
    if !plan.discarded_members.is_empty() {
        text.push_str(&format!(
            "  discarded: {}\n",
            plan.discarded_members.join(", ")
        ));
    }
    if let Some(lost) = &plan.lost {
        text.push_str(&format!("  lost:      {lost}\n"));
    }
    Some(text)
}

/// Where a recovery stands: Complete is done, Failed failed with its Ready message; while it
/// runs, its phase and step.
pub fn judge(r: &EtcdRecovery) -> Progress {
    let st = r.status.clone().unwrap_or_default();
    let ready = st
        .conditions
        .iter()
        .find(|c| c.type_ == api::conditions::recovery::READY)
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_default();
    match st.phase {
        Some(RecoveryPhase::Complete) => {
            let result = st.result.unwrap_or_default();
            Progress::Done(format!(
                "Complete: cluster ID {}, {} keys at revision {}; members added back: {}",
                result.cluster_id.unwrap_or_else(|| "-".into()),
                result.keys.map_or("-".into(), |k| k.to_string()),
                result.revision.map_or("-".into(), |r| r.to_string()),
                if result.members_re_added.is_empty() {
                    "none".to_string()
                } else {
                    result.members_re_added.join(", ")
                }
            ))
        }
        Some(RecoveryPhase::Failed) => Progress::Failed(ready),
        phase => {
            let step = st
                .step
                .map(|s| format!(", step {}", s.as_str()))
                .unwrap_or_default();
            Progress::Going(with_reason(
                format!("{:?}{step}", phase.unwrap_or_default()),
                &ready,
            ))
        }
    }
}

#[cfg(test)]
mod tests;
