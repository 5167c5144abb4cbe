//! Which member a survivor recovery rebuilds from, and the plan that says so. Pure.
//!
//! A member's raft position comes from its running etcd (`Status`) or, when its etcd does not
//! run, from its data dir: a position Job reads its write-ahead log ([`PositionRead`]). The
//! survivor is chosen only once every member that holds data has a position: never the best of
//! a partial set, and never a guess. A member whose data dir cannot be read stops the choice
//! until the user names a survivor.
//!
//! The survivor is the member with the highest commit index. etcd's `--force-new-cluster` keeps
//! a member's log up to its commit index and drops what follows, and committed prefixes never
//! diverge (raft's log matching): whatever its term, the member with the highest commit index
//! holds every entry any other member has committed. The term only breaks a tie.

use api::conditions::reason;
use api::v1alpha2::{RecoveryCandidate, RecoveryPlan};

use super::{as_i64, fail, wait, EtcdFacts, MemberFacts, Next, Work};
use crate::agent_job::position::{DiskPosition, PositionRead};
use crate::etcd::format_id;

/// A member's raft position and where it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Position {
    member_id: u64,
    cluster_id: u64,
    term: u64,
    /// Its commit index: `raftIndex` of a running etcd's Status, or the commit of the last
    /// HardState in its write-ahead log.
    commit: u64,
    /// Known only from a running etcd.
    revision: Option<i64>,
    /// From the running etcd (else from the data dir).
    live: bool,
    /// Known only from a running etcd (Status `isLearner`); a data dir does not say.
    learner: bool,
}

impl Position {
    fn live(e: &EtcdFacts) -> Self {
        Position {
            member_id: e.member_id,
            cluster_id: e.cluster_id,
            term: e.raft_term,
            commit: e.raft_index,
            revision: Some(e.revision),
            live: true,
            learner: e.is_learner,
        }
    }

    fn on_disk(p: &DiskPosition) -> Self {
        Position {
            member_id: p.member_id,
            cluster_id: p.cluster_id,
            term: p.term,
            commit: p.commit,
            revision: None,
            live: false,
            learner: false,
        }
    }

    /// The order of candidates: the commit index (the most committed data, see the module
    /// doc), then the term to break a tie, then a live member before one read from disk (its
    /// figures are current), then revision.
    fn key(&self) -> (u64, u64, bool, i64) {
        (
            self.commit,
            self.term,
            self.live,
            self.revision.unwrap_or(-1),
        )
    }
}

/// Why a member with a raft position still cannot be the survivor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unfit {
    /// Its EtcdMember is being deleted: its finalizer removes it from etcd and its PVC goes with
    /// it, so a cluster rebuilt from it would lose its only member.
    Deleting,
    /// etcd's `--force-new-cluster` makes no voter of a learner: it could not lead the rebuilt
    /// one-member cluster.
    Learner,
    /// Its data is another cluster's (this ID).
    OtherCluster(u64),
}

impl Unfit {
    fn of(m: &MemberFacts, p: &Position, cluster_id: Option<u64>) -> Option<Unfit> {
        if m.deleting {
            Some(Unfit::Deleting)
        } else if p.learner {
            Some(Unfit::Learner)
        } else if cluster_id.is_some_and(|id| id != p.cluster_id) {
            Some(Unfit::OtherCluster(p.cluster_id))
        } else {
            None
        }
    }

    fn says(self) -> String {
        match self {
            Unfit::Deleting => "its EtcdMember is being deleted (its finalizer removes it from \
                                etcd and its PVC goes with it)"
                .into(),
            Unfit::Learner => "it is a learner, and etcd's --force-new-cluster makes no voter \
                               of a learner: it could not lead the rebuilt cluster"
                .into(),
            Unfit::OtherCluster(id) => {
                format!(
                    "its data is of cluster ID {}, not this cluster's",
                    format_id(id)
                )
            }
        }
    }
}

/// Its position: from its running etcd, else from its data dir.
fn position_of(m: &MemberFacts) -> Option<Position> {
    match (&m.etcd, &m.on_disk) {
        (Some(e), _) => Some(Position::live(e)),
        (None, Some(PositionRead::Read(p))) => Some(Position::on_disk(p)),
        _ => None,
    }
}

/// A member whose position must be read from its data dir: it holds a data PVC, its etcd did
/// not answer, and no etcd runs for it (no Pod, or a Pod that is not Ready). A Ready Pod whose
/// etcd did not answer is running etcd: its data is in use and is not read from under it.
pub fn needs_disk_read(m: &MemberFacts) -> bool {
    m.claim && m.etcd.is_none() && !m.deleting && m.pod.as_ref().is_none_or(|p| !p.ready)
}

/// The disk reads still to do: the members whose position Job is to be created, and those
/// being read (with why they are not read yet).
fn pending_reads<'a>(members: impl Iterator<Item = &'a MemberFacts>) -> (Vec<String>, Vec<String>) {
    let (mut start, mut reading) = (Vec::new(), Vec::new());
    for m in members.filter(|m| needs_disk_read(m)) {
        match (&m.on_disk, &m.pod) {
            (_, Some(p)) if p.deleting => {
                reading.push(format!("{} (its Pod is being deleted)", m.name));
            }
            (None, _) => start.push(m.name.clone()),
            (Some(PositionRead::Reading), _) => {
                reading.push(format!("{} (its position Job runs)", m.name));
            }
            (Some(PositionRead::Read(_) | PositionRead::Failed(_)), _) => {}
        }
    }
    (start, reading)
}

fn waiting_for_reads(reading: &[String]) -> Next {
    wait(
        reason::WAITING_FOR_SURVIVOR,
        format!(
            "reading the raft position of {} from their data dirs (their etcd does not run); \
             the survivor is chosen once every member that holds data has a position",
            reading.join(", ")
        ),
    )
}

/// The member to rebuild from: the named one, or the one with the highest commit index, then
/// term, from its running etcd or its data dir ([`Position::key`]), then name (for a stable
/// choice). Only a member of the cluster's own ID, not a learner and not being deleted, is
/// chosen ([`Unfit`]).
pub(super) fn choose<'a>(
    members: &'a [MemberFacts],
    named: Option<&str>,
    cluster_id: Option<u64>,
) -> Result<&'a MemberFacts, Box<Next>> {
    if let Some(named) = named {
        return choose_named(members, named, cluster_id);
    }
    let (start, reading) = pending_reads(members.iter());
    if !start.is_empty() {
        return Err(Box::new(Next::Act(Work::ReadPositions(start))));
    }
    if !reading.is_empty() {
        return Err(Box::new(waiting_for_reads(&reading)));
    }
    // A member that holds data but whose position is unknown may hold the most: discarding it
    // could lose acknowledged writes, so only the user may decide to (by naming a survivor).
    let unreadable: Vec<&MemberFacts> = members
        .iter()
        .filter(|m| m.etcd.is_none() && !m.deleting)
        .filter(|m| matches!(m.on_disk, Some(PositionRead::Failed(_))))
        .collect();
    if !unreadable.is_empty() {
        return Err(Box::new(unreadable_members(&unreadable)));
    }
    members
        .iter()
        .filter_map(|m| {
            let p = position_of(m)?;
            Unfit::of(m, &p, cluster_id).is_none().then_some((m, p))
        })
        .max_by(|(a, pa), (b, pb)| pa.key().cmp(&pb.key()).then_with(|| b.name.cmp(&a.name)))
        .map(|(m, _)| m)
        .ok_or_else(|| {
            Box::new(wait(
                reason::WAITING_FOR_SURVIVOR,
                format!(
                    "no member of the cluster can be the survivor ({}); a survivor's commit \
                     index and term are read from its running etcd or, when its etcd does not \
                     run, from the write-ahead log on its data PVC, so at least one voter that \
                     is not being deleted must still hold its data",
                    members
                        .iter()
                        .map(|m| format!("{}: {}", m.name, why_not(m, cluster_id)))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ))
        })
}

/// The wait of an automatic choice while members holding data have no position.
fn unreadable_members(unreadable: &[&MemberFacts]) -> Next {
    let names: Vec<&str> = unreadable.iter().map(|m| m.name.as_str()).collect();
    let names = names.join(", ");
    wait(
        reason::POSITION_READ_FAILED,
        format!(
            "the raft position of {names} is not known ({}), so it is not known which member \
             holds the most data: no survivor is chosen and nothing was changed. Fix what the \
             read reports (a deleted position Job, label \
             app.kubernetes.io/component=position, is run again), or, if that data may be \
             discarded, create a new EtcdRecovery naming the survivor in \
             spec.source.survivor.member: the data of {names} is discarded",
            unreadable
                .iter()
                .map(|m| format!("{}: {}", m.name, why_not(m, None)))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    )
}

fn choose_named<'a>(
    members: &'a [MemberFacts],
    named: &str,
    cluster_id: Option<u64>,
) -> Result<&'a MemberFacts, Box<Next>> {
    let Some(m) = members.iter().find(|m| m.name == named) else {
        return Err(Box::new(fail(
            reason::RECOVERY_NOT_POSSIBLE,
            format!(
                "spec.source.survivor.member names {named}, which is not an EtcdMember of this \
                 cluster (its members: {}); create a new EtcdRecovery naming one of them, or \
                 none to take the one with the most data",
                names(members)
            ),
        )));
    };
    let refused = |why: String| {
        Err(Box::new(fail(
            reason::RECOVERY_NOT_POSSIBLE,
            format!(
                "member {named} (spec.source.survivor.member) cannot be the survivor: {why}; \
                 create a new EtcdRecovery naming another member, or none to take the one with \
                 the most data"
            ),
        )))
    };
    if m.deleting {
        // Whatever its position: a member being deleted is not read, and never rebuilt from.
        return refused(Unfit::Deleting.says());
    }
    if let Some(p) = position_of(m) {
        return match Unfit::of(m, &p, cluster_id) {
            None => Ok(m),
            Some(unfit) => refused(format!(
                "{} ({})",
                unfit.says(),
                if p.live {
                    "its running etcd says so"
                } else {
                    "read from its write-ahead log"
                }
            )),
        };
    }
    let (start, reading) = pending_reads(std::iter::once(m));
    if !start.is_empty() {
        return Err(Box::new(Next::Act(Work::ReadPositions(start))));
    }
    if !reading.is_empty() {
        return Err(Box::new(waiting_for_reads(&reading)));
    }
    if let Some(PositionRead::Failed(why)) = &m.on_disk {
        return Err(Box::new(fail(
            reason::RECOVERY_NOT_POSSIBLE,
            format!(
                "member {named} (spec.source.survivor.member) does not run and its data dir \
                 cannot be read: {why}; create a new EtcdRecovery naming another member, or \
                 none to take the one with the most data"
            ),
        )));
    }
    Err(Box::new(wait(
        reason::WAITING_FOR_SURVIVOR,
        format!(
            "member {named} (spec.source.survivor.member) does not answer: {}; its commit \
             index and term are read from its running etcd, or from its data dir once no etcd \
             runs for it, before anything is changed",
            why_not(m, cluster_id)
        ),
    )))
}

/// Why a member is no candidate: it has no position, or cannot be the survivor.
fn why_not(m: &MemberFacts, cluster_id: Option<u64>) -> String {
    if let Some(unfit) = position_of(m).and_then(|p| Unfit::of(m, &p, cluster_id)) {
        return unfit.says();
    }
    if m.deleting {
        return Unfit::Deleting.says();
    }
    match &m.on_disk {
        Some(PositionRead::Failed(why)) => format!("its data dir cannot be read: {why}"),
        _ => m.note.clone().unwrap_or_else(|| "no answer".into()),
    }
}

fn names(members: &[MemberFacts]) -> String {
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Where a candidate's figures came from (or why it has none), and why it cannot be the
/// survivor if it cannot, for its `note`.
fn note_of(m: &MemberFacts, cluster_id: Option<u64>) -> Option<String> {
    let unfit = position_of(m)
        .and_then(|p| Unfit::of(m, &p, cluster_id))
        .map(|u| format!("; not a candidate: {}", u.says()))
        .unwrap_or_default();
    match (&m.etcd, &m.on_disk) {
        (Some(_), _) => Some(format!("from its running etcd (Status){unfit}")),
        (None, Some(PositionRead::Read(p))) => Some(format!(
            "from its data dir (write-ahead log {}; its etcd does not run): last entry term {} \
             index {}; revision unknown; learner or voter unknown{}{unfit}",
            p.files.last().map(String::as_str).unwrap_or("?"),
            p.last_term,
            p.last_index,
            p.torn_tail
                .as_deref()
                .map(|t| format!("; torn tail: {t}"))
                .unwrap_or_default()
        )),
        _ => Some(why_not(m, cluster_id)),
    }
}

/// The plan of a recovery from `survivor`: what it holds, and what the others lose.
pub(super) fn plan_of(
    survivor: &MemberFacts,
    members: &[MemberFacts],
    cluster_id: Option<u64>,
) -> RecoveryPlan {
    let e = position_of(survivor).unwrap_or(Position {
        member_id: 0,
        cluster_id: 0,
        term: 0,
        commit: 0,
        revision: None,
        live: false,
        learner: false,
    });
    let candidates = members
        .iter()
        .map(|m| {
            let p = position_of(m);
            RecoveryCandidate {
                name: m.name.clone(),
                raft_term: p.as_ref().map(|p| as_i64(p.term)),
                raft_index: p.as_ref().map(|p| as_i64(p.commit)),
                revision: p.as_ref().and_then(|p| p.revision),
                note: note_of(m, cluster_id),
            }
        })
        .collect();
    let discarded: Vec<String> = members
        .iter()
        .filter(|m| m.name != survivor.name)
        .map(|m| m.name.clone())
        .collect();
    let revision = |r: Option<i64>| r.map_or_else(|| "unknown".to_string(), |r| r.to_string());
    // Ahead by the rule the survivor is chosen by: a higher commit index is committed data the
    // survivor lacks (a higher term alone is none). Only a named survivor, or a member that
    // cannot be the survivor, is ever ahead.
    let ahead: Vec<String> = members
        .iter()
        .filter(|m| m.name != survivor.name)
        .filter_map(|m| {
            let o = position_of(m)?;
            let unfit = Unfit::of(m, &o, cluster_id);
            if matches!(unfit, Some(Unfit::OtherCluster(_))) || o.commit <= e.commit {
                return None;
            }
            Some(format!(
                "{} is at commit index {} (term {}, revision {}), ahead of the survivor{}",
                m.name,
                o.commit,
                o.term,
                revision(o.revision),
                unfit
                    .map(|u| format!(" but not a candidate: {}", u.says()))
                    .unwrap_or_default()
            ))
        })
        .collect();
    let source = if e.live {
        format!("revision {}", revision(e.revision))
    } else {
        "read from its data dir; revision unknown until it runs".to_string()
    };
    let mut lost = format!(
        "the cluster is rebuilt from {} at commit index {} (raft term {}; {source}): every \
         write it holds is kept. The data of {} is discarded: those members are deleted with their PVCs \
         and replaced by new, empty members that copy the survivor's data. A write that no \
         member but a discarded one had stored is lost.",
        survivor.name,
        e.commit,
        e.term,
        if discarded.is_empty() {
            "no other member".to_string()
        } else {
            discarded.join(", ")
        }
    );
    if !ahead.is_empty() {
        lost.push_str(&format!(
            " The survivor is behind: {}; what they hold beyond it is lost.",
            ahead.join("; ")
        ));
    }
    RecoveryPlan {
        member: Some(survivor.name.clone()),
        member_id: Some(format_id(e.member_id)),
        raft_term: Some(as_i64(e.term)),
        raft_index: Some(as_i64(e.commit)),
        revision: e.revision,
        cluster_id: Some(format_id(e.cluster_id)),
        candidates,
        discarded_members: discarded,
        lost: Some(lost),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
