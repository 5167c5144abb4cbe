//! The snapshot branch of the recovery planner: rebuild a cluster in place from one of its
//! Complete (and, unless the user says otherwise, Verified) EtcdSnapshots, or from a snapshot
//! given by its S3 object or PVC file (checked against the sha256 the user gave, or restored
//! unchecked on the user's word). Pure.
//!
//! The steps: hold the cluster, stop every member (Pods go, PVCs stay), restore the snapshot into
//! one member — its previous data set aside on its own PVC, never deleted — which starts as a new
//! one-member cluster with its revision bumped past anything a client saw and the skipped range
//! marked compacted; the cluster's latched ID follows it; only then are the other members (and
//! their PVCs) deleted, and the cluster controller adds new ones back as learners.

use api::conditions::reason;
use api::v1alpha2::{RecoveryCandidate, RecoveryPlan, RecoveryStep, SnapshotOrigin, SnapshotPhase};

use super::{
    as_i64, fail, refuse_healthy, runs_alone, wait, ClusterFacts, Facts, MemberFacts, Next, Work,
};
use crate::etcd::format_id;

/// The margin `--bump-revision` adds above the highest revision known before the recovery: the
/// writes nobody recorded (after the last member answered or the last snapshot was taken).
/// A billion is more than any cluster writes between two observations and leaves etcd's int64
/// revision space practically untouched (the same figure a restore into a new cluster uses).
pub const BUMP_MARGIN: i64 = 1_000_000_000;

/// What the recovery knows of its EtcdSnapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotFacts {
    pub name: String,
    /// `spec.clusterRef.name`.
    pub cluster: String,
    pub phase: SnapshotPhase,
    /// The `Verified` condition: `Some(true)` verified, `Some(false)` shown bad or not
    /// verifiable, `None` not decided.
    pub verified: Option<bool>,
    /// A verification is under way (`Verified=Unknown`).
    pub verifying: bool,
    /// The revision the snapshot holds (its verification's, else its recorded hashKV's).
    pub revision: Option<i64>,
    /// `status.artifact.uri`.
    pub uri: Option<String>,
    /// Why the stored location cannot be turned into a restore source, if it cannot.
    pub unrestorable: Option<String>,
    /// The cluster incarnation it records it was taken of.
    pub origin: SnapshotOrigin,
}

/// What the recovery knows of a snapshot given by its location (`spec.source.snapshot.s3` or
/// `.pvc`): there is no EtcdSnapshot, so no Verified condition and no recorded revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredFacts {
    /// `s3://<bucket>/<key>` or `pvc://<claim>/<path>`.
    pub uri: String,
    /// `spec.source.snapshot.sha256`: what the restore checks the object against.
    pub sha256: Option<String>,
    /// Why the location cannot be read (its PVC or credentials Secret does not exist), found
    /// before anything is changed.
    pub missing: Option<String>,
}

/// `--bump-revision`: far enough that the first revision of the restored cluster is above the
/// highest one known before it (`highest`) by [`BUMP_MARGIN`]. Restored revisions start at
/// `snapshot + bump`, so `snapshot + bump = max(highest, snapshot) + BUMP_MARGIN`.
pub fn bump_revision(snapshot: Option<i64>, highest: Option<i64>) -> i64 {
    let snapshot = snapshot.unwrap_or(0).max(0);
    let highest = highest.unwrap_or(0).max(0);
    (highest - snapshot).max(0).saturating_add(BUMP_MARGIN)
}

/// The member the snapshot is restored into: the seed if it is still there (restored with the
/// seed's own peer URL and token, etcd gives the cluster the ID it was bootstrapped with), else
/// the first by name. Members being deleted are never chosen.
fn target(members: &[MemberFacts]) -> Option<&MemberFacts> {
    let live = || members.iter().filter(|m| !m.deleting);
    live()
        .find(|m| m.bootstrap)
        .or_else(|| live().min_by(|a, b| a.name.cmp(&b.name)))
}

/// Whether the snapshot may be restored, and if not the verdict.
fn usable(f: &Facts, s: Option<&SnapshotFacts>, name: &str) -> Result<(), Next> {
    let Some(s) = s else {
        return Err(fail(
            reason::SNAPSHOT_NOT_USABLE,
            format!(
                "EtcdSnapshot {name} (spec.source.snapshot.name) does not exist in this namespace; \
                 nothing was changed. List the cluster's snapshots with kubectl get etcdsnapshots \
                 and create a new EtcdRecovery naming one"
            ),
        ));
    };
    if s.cluster != f.cluster_name {
        return Err(fail(
            reason::SNAPSHOT_NOT_USABLE,
            format!(
                "EtcdSnapshot {name} is a snapshot of cluster {}, not of {}; nothing was changed. \
                 An in-place recovery restores only the cluster's own snapshots; restore another \
                 cluster's into a new EtcdCluster (spec.bootstrap.restore)",
                s.cluster, f.cluster_name
            ),
        ));
    }
    match s.phase {
        SnapshotPhase::Complete => {}
        SnapshotPhase::Failed => {
            return Err(fail(
                reason::SNAPSHOT_NOT_USABLE,
                format!(
                    "EtcdSnapshot {name} failed (phase Failed): there is nothing stored to \
                     restore; nothing was changed. Name a Complete snapshot"
                ),
            ))
        }
        SnapshotPhase::Pending | SnapshotPhase::Started => {
            return Err(wait(
                reason::WAITING_FOR_SNAPSHOT,
                format!("EtcdSnapshot {name} is not Complete yet; nothing is changed before it is"),
            ))
        }
    }
    incarnation(f, s, name)?;
    if s.uri.is_none() {
        return Err(fail(
            reason::SNAPSHOT_NOT_USABLE,
            format!(
                "EtcdSnapshot {name} is Complete but records no stored artifact \
                 (status.artifact); nothing was changed. Name another snapshot"
            ),
        ));
    }
    if let Some(why) = &s.unrestorable {
        return Err(fail(
            reason::SNAPSHOT_NOT_USABLE,
            format!("EtcdSnapshot {name} cannot be restored: {why}; nothing was changed"),
        ));
    }
    // A snapshot nobody checked is not restored over a cluster unless the user says so: a
    // corrupt one would replace whatever data is left with garbage.
    match (s.verified, s.verifying, f.allow_unverified) {
        (Some(true), _, _) | (_, _, true) => Ok(()),
        (None, true, false) => Err(wait(
            reason::WAITING_FOR_SNAPSHOT,
            format!("EtcdSnapshot {name} is being verified; nothing is changed before it is"),
        )),
        (Some(false), _, false) => Err(fail(
            reason::SNAPSHOT_NOT_USABLE,
            format!(
                "EtcdSnapshot {name} is Verified=False (its Verified condition says why); nothing \
                 was changed. Name a verified snapshot, or set spec.allowUnverifiedSnapshot: true \
                 in a new EtcdRecovery to restore it anyway"
            ),
        )),
        (None, _, false) => Err(fail(
            reason::SNAPSHOT_NOT_USABLE,
            format!(
                "EtcdSnapshot {name} was never verified (spec.verify: false, or taken before \
                 verification existed); nothing was changed. Name a verified snapshot, or set \
                 spec.allowUnverifiedSnapshot: true in a new EtcdRecovery to restore it anyway"
            ),
        )),
    }
}

/// Whether the snapshot was taken of this incarnation of the cluster: one of a deleted
/// EtcdCluster of the same name would roll the new cluster back to its predecessor's data. By
/// its location (`spec.source.snapshot.s3`/`.pvc`) it stays restorable on the user's word.
fn incarnation(f: &Facts, s: &SnapshotFacts, name: &str) -> Result<(), Next> {
    let Some(cluster) = &f.cluster else {
        return Ok(());
    };
    if s.origin.is_of(&cluster.uid, cluster.created.as_ref()) {
        return Ok(());
    }
    let c = &f.cluster_name;
    let this = format!(
        "EtcdCluster {c} (UID {}, etcd cluster ID {})",
        cluster.uid,
        cluster.cluster_id.as_deref().unwrap_or("not latched")
    );
    let why = match &s.origin.cluster_uid {
        Some(uid) => format!(
            "was taken of another EtcdCluster named {c}: it records cluster UID {uid} (etcd \
             cluster ID {}), not that of {this}: a cluster of that name was deleted and created \
             again since",
            s.origin.cluster_id.as_deref().unwrap_or("not recorded")
        ),
        None => format!(
            "records no cluster UID (taken before the operator recorded one) and was created \
             at {}, not after {this} was created at {}: it may be of a previous cluster of that \
             name",
            s.origin
                .created
                .as_ref()
                .map_or("an unrecorded time".to_string(), |t| t.0.to_string()),
            cluster
                .created
                .as_ref()
                .map_or("an unrecorded time".to_string(), |t| t.0.to_string())
        ),
    };
    Err(fail(
        reason::SNAPSHOT_NOT_USABLE,
        format!(
            "EtcdSnapshot {name} {why}; nothing was changed. Restoring it by name would roll {c} \
             back to data that may not be its own. Name a snapshot taken since {c} was created \
             (status.clusterUID {}); if restoring that data is what you mean, create a new \
             EtcdRecovery that gives the snapshot by its location, {}: spec.source.snapshot.s3 \
             (bucket and key) or spec.source.snapshot.pvc (claim and path), with sha256 set to \
             its status.artifact.checksum",
            cluster.uid,
            s.uri.as_deref().unwrap_or("its status.artifact.uri")
        ),
    ))
}

/// Before the plan: whether and into which member the EtcdSnapshot may be restored.
pub(super) fn plan_first(f: &Facts, name: &str) -> Next {
    if let Err(next) = usable(f, f.snapshot.as_ref(), name) {
        return next;
    }
    let snapshot = f.snapshot.clone().unwrap_or_default();
    plan_restore(
        f,
        Restored {
            what: format!("EtcdSnapshot {name}"),
            name: Some(name.to_string()),
            uri: snapshot.uri,
            revision: snapshot.revision,
        },
    )
}

/// Before the plan: whether and into which member a snapshot given by its location may be
/// restored. It has no Verified condition and no recorded revision: the user's checksum (or
/// word) stands for the first, and the revision counts as 0 in the bump (see
/// [`bump_revision`]), which lifts the restored revisions above every one known all the same.
pub(super) fn plan_stored(f: &Facts, stored: &StoredFacts) -> Next {
    let uri = &stored.uri;
    if let Some(why) = &stored.missing {
        return fail(
            reason::SNAPSHOT_NOT_USABLE,
            format!("the snapshot at {uri} cannot be read: {why}; nothing was changed"),
        );
    }
    // The API requires one of the two; a snapshot nobody can check is never restored over a
    // cluster without the user's word.
    if stored.sha256.is_none() && !f.allow_unverified {
        return fail(
            reason::SNAPSHOT_NOT_USABLE,
            format!(
                "the snapshot at {uri} has no Verified condition and spec.source.snapshot.sha256 \
                 is unset; nothing was changed. Create a new EtcdRecovery with the object's \
                 sha256, or with spec.allowUnverifiedSnapshot: true to restore it unchecked"
            ),
        );
    }
    plan_restore(
        f,
        Restored {
            what: format!("the snapshot at {uri}"),
            name: None,
            uri: Some(uri.clone()),
            revision: None,
        },
    )
}

/// The snapshot a plan restores.
struct Restored {
    /// How messages name it.
    what: String,
    /// The EtcdSnapshot's name (None: given by its location).
    name: Option<String>,
    uri: Option<String>,
    /// The revision it holds, if recorded.
    revision: Option<i64>,
}

/// The plan of restoring `snapshot` in place, once it is found usable.
fn plan_restore(f: &Facts, snapshot: Restored) -> Next {
    let name = &snapshot.what;
    // A healthy cluster is rolled back only when the user confirmed it: every write after the
    // snapshot is lost.
    if let Some(refused) = refuse_healthy(f, |m, leader| {
        format!(
            "the cluster has a working quorum (member {} follows leader {leader}): restoring \
             {name} would discard every write made after it. Nothing was changed. If that is \
             what you want, create a new EtcdRecovery with \
             spec.confirmHealthyClusterRollback: true",
            m.name
        )
    }) {
        return refused;
    }
    let Some(target) = target(&f.members) else {
        return fail(
            reason::RECOVERY_NOT_POSSIBLE,
            format!(
                "cluster {} has no EtcdMember to restore the snapshot into; nothing was changed. \
                 Restore {name} into a new EtcdCluster (spec.bootstrap.restore)",
                f.cluster_name
            ),
        );
    };
    let highest = f
        .members
        .iter()
        .filter_map(|m| m.etcd.as_ref().map(|e| e.revision))
        .chain(f.highest_snapshot_revision)
        .chain(snapshot.revision)
        .max();
    let bump = bump_revision(snapshot.revision, highest);
    let others: Vec<String> = f
        .members
        .iter()
        .filter(|m| m.name != target.name)
        .map(|m| m.name.clone())
        .collect();
    let candidates = f
        .members
        .iter()
        .map(|m| RecoveryCandidate {
            name: m.name.clone(),
            raft_term: m.etcd.as_ref().map(|e| as_i64(e.raft_term)),
            raft_index: m.etcd.as_ref().map(|e| as_i64(e.raft_index)),
            revision: m.etcd.as_ref().map(|e| e.revision),
            note: m.note.clone(),
        })
        .collect();
    let at = snapshot.revision.map_or_else(
        || "a revision recorded nowhere: the bump counts it as 0".to_string(),
        |r| format!("revision {r}"),
    );
    let lost = format!(
        "the cluster is rolled back to {name} ({at}): every write after it is lost{}. \
         The snapshot is restored into {} as a new one-member cluster with revisions bumped by \
         {bump} (the skipped range is compacted: a watch from an older revision is told to \
         resync); {}'s previous data is kept on its PVC in {}. The other members{} are deleted \
         with their PVCs once the restored member runs, and replaced by new members that copy \
         its data. {} keeps its name, Services, Secrets and client URLs.",
        highest
            .filter(|h| Some(*h) > snapshot.revision)
            .map(|h| format!(" (the cluster had reached at least revision {h})"))
            .unwrap_or_default(),
        target.name,
        target.name,
        api::v1alpha2::set_aside_dir(&f.uid),
        if others.is_empty() {
            String::new()
        } else {
            format!(" ({})", others.join(", "))
        },
        f.cluster_name,
    );
    Next::RecordPlan(Box::new(RecoveryPlan {
        member: Some(target.name.clone()),
        snapshot: snapshot.name,
        snapshot_uri: snapshot.uri,
        highest_known_revision: highest,
        bump_revision: Some(bump),
        revision: snapshot.revision,
        candidates,
        discarded_members: others,
        lost: Some(lost),
        ..Default::default()
    }))
}

/// How messages name the snapshot a plan restores: its EtcdSnapshot, else its location.
pub fn restored_of(plan: &RecoveryPlan) -> String {
    match (&plan.snapshot, &plan.snapshot_uri) {
        (Some(name), _) => format!("EtcdSnapshot {name}"),
        (None, Some(uri)) => format!("the snapshot at {uri}"),
        (None, None) => "the snapshot".to_string(),
    }
}

/// `RestoreSnapshot`: wake the target with the restore, wait until it runs alone, make the
/// cluster's latched ID follow it.
pub(super) fn restore_step(f: &Facts, cluster: &ClusterFacts, target: &MemberFacts) -> Next {
    let name = target.name.clone();
    if !target.restore_marked || target.dormant {
        // The other members stay dormant with their PVCs: until the restored member runs they
        // hold the last copies of the cluster's data.
        return Next::Act(Work::RestoreInto(name));
    }
    match &target.pod {
        Some(p) if p.ready && !p.deleting && runs_alone(target) => {
            let restored = target
                .etcd
                .as_ref()
                .map(|e| format_id(e.cluster_id))
                .unwrap_or_default();
            if cluster.cluster_id.as_deref() != Some(restored.as_str()) {
                Next::Act(Work::LatchClusterId(restored))
            } else {
                Next::Advance(RecoveryStep::RemoveOthers)
            }
        }
        _ => match &target.restore_failure {
            Some(why) => wait(
                reason::RECOVERING,
                format!(
                    "the restore into {name} failed: {why} (kubectl logs {name} -c restore); it \
                     is retried with the Pod's restarts, and the other members keep their data \
                     meanwhile"
                ),
            ),
            None => wait(
                reason::RECOVERING,
                format!(
                    "waiting for {name} to restore {} and run as a one-member cluster{}",
                    f.plan.as_ref().map(restored_of).unwrap_or_default(),
                    target
                        .note
                        .as_deref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                ),
            ),
        },
    }
}

#[cfg(test)]
mod tests;
