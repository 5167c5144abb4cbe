//! Which member a survivor recovery rebuilds from, and the plan that says so. Pure.
//!
//! A member's raft position comes from its running etcd (`Status`) or, when its etcd does not
//! run, from its data dir: a position Job reads its write-ahead log ([`PositionRead`]). The
//! survivor is chosen only once every member that holds data has a position (or is known not
//! to have one): never the best of a partial set, and never a guess.

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
    index: u64,
    /// Known only from a running etcd.
    revision: Option<i64>,
    /// From the running etcd (else from the data dir).
    live: bool,
}

impl Position {
    fn live(e: &EtcdFacts) -> Self {
        Position {
            member_id: e.member_id,
            cluster_id: e.cluster_id,
            term: e.raft_term,
            index: e.raft_index,
            revision: Some(e.revision),
            live: true,
        }
    }

    fn on_disk(p: &DiskPosition) -> Self {
        Position {
            member_id: p.member_id,
            cluster_id: p.cluster_id,
            term: p.term,
            index: p.commit,
            revision: None,
            live: false,
        }
    }

    /// The order of candidates: (term, index), then a live member before one read from disk
    /// (its figures are current), then revision.
    fn key(&self) -> (u64, u64, bool, i64) {
        (
            self.term,
            self.index,
            self.live,
            self.revision.unwrap_or(-1),
        )
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

/// The member to rebuild from: the named one, or the one with the highest (term, index) from
/// its running etcd or its data dir ([`Position::key`]), then name (for a stable choice). Only
/// positions of the cluster's own ID count.
pub(super) fn choose<'a>(
    members: &'a [MemberFacts],
    named: Option<&str>,
    cluster_id: Option<u64>,
) -> Result<&'a MemberFacts, Box<Next>> {
    let same_cluster = |p: &Position| cluster_id.is_none_or(|id| id == p.cluster_id);
    if let Some(named) = named {
        return choose_named(members, named, &same_cluster);
    }
    let (start, reading) = pending_reads(members.iter());
    if !start.is_empty() {
        return Err(Box::new(Next::Act(Work::ReadPositions(start))));
    }
    if !reading.is_empty() {
        return Err(Box::new(waiting_for_reads(&reading)));
    }
    members
        .iter()
        .filter_map(|m| Some((m, position_of(m).filter(same_cluster)?)))
        .max_by(|(a, pa), (b, pb)| pa.key().cmp(&pb.key()).then_with(|| b.name.cmp(&a.name)))
        .map(|(m, _)| m)
        .ok_or_else(|| {
            Box::new(wait(
                reason::WAITING_FOR_SURVIVOR,
                format!(
                    "no member of the cluster has a raft position ({}); a survivor's term and \
                     index are read from its running etcd or, when its etcd does not run, from \
                     the write-ahead log on its data PVC, so at least one member must still \
                     hold its data",
                    members
                        .iter()
                        .map(|m| format!("{}: {}", m.name, why_not(m)))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ))
        })
}

fn choose_named<'a>(
    members: &'a [MemberFacts],
    named: &str,
    same_cluster: &dyn Fn(&Position) -> bool,
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
    if let Some(p) = position_of(m) {
        return if same_cluster(&p) {
            Ok(m)
        } else {
            Err(Box::new(fail(
                reason::RECOVERY_NOT_POSSIBLE,
                format!(
                    "member {named} {} cluster ID {}, not this cluster's; it cannot be the \
                     survivor",
                    if p.live {
                        "answers with"
                    } else {
                        "holds a write-ahead log of"
                    },
                    format_id(p.cluster_id)
                ),
            )))
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
            "member {named} (spec.source.survivor.member) does not answer: {}; its raft term \
             and index are read from its running etcd, or from its data dir once no etcd runs \
             for it, before anything is changed",
            why_not(m)
        ),
    )))
}

/// Why a member has no position.
fn why_not(m: &MemberFacts) -> String {
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

/// Where a candidate's figures came from (or why it has none), for its `note`.
fn note_of(m: &MemberFacts) -> Option<String> {
    match (&m.etcd, &m.on_disk) {
        (Some(_), _) => Some("from its running etcd (Status)".into()),
        (None, Some(PositionRead::Read(p))) => Some(format!(
            "from its data dir (write-ahead log {}; its etcd does not run): last entry term {} \
             index {}; revision unknown{}",
            p.files.last().map(String::as_str).unwrap_or("?"),
            p.last_term,
            p.last_index,
            p.torn_tail
                .as_deref()
                .map(|t| format!("; torn tail: {t}"))
                .unwrap_or_default()
        )),
        _ => Some(why_not(m)),
    }
}

/// The plan of a recovery from `survivor`: what it holds, and what the others lose.
pub(super) fn plan_of(survivor: &MemberFacts, members: &[MemberFacts]) -> RecoveryPlan {
    let e = position_of(survivor).unwrap_or(Position {
        member_id: 0,
        cluster_id: 0,
        term: 0,
        index: 0,
        revision: None,
        live: false,
    });
    let candidates = members
        .iter()
        .map(|m| {
            let p = position_of(m);
            RecoveryCandidate {
                name: m.name.clone(),
                raft_term: p.as_ref().map(|p| as_i64(p.term)),
                raft_index: p.as_ref().map(|p| as_i64(p.index)),
                revision: p.as_ref().and_then(|p| p.revision),
                note: note_of(m),
            }
        })
        .collect();
    let discarded: Vec<String> = members
        .iter()
        .filter(|m| m.name != survivor.name)
        .map(|m| m.name.clone())
        .collect();
    let revision = |r: Option<i64>| r.map_or_else(|| "unknown".to_string(), |r| r.to_string());
    let ahead: Vec<String> = members
        .iter()
        .filter(|m| m.name != survivor.name)
        .filter_map(|m| {
            let o = position_of(m)?;
            ((o.term, o.index) > (e.term, e.index)).then(|| {
                format!(
                    "{} is at term {} index {} (revision {}), ahead of the survivor",
                    m.name,
                    o.term,
                    o.index,
                    revision(o.revision)
                )
            })
        })
        .collect();
    let source = if e.live {
        format!("revision {}", revision(e.revision))
    } else {
        "read from its data dir; revision unknown until it runs".to_string()
    };
    let mut lost = format!(
        "the cluster is rebuilt from {} at raft term {} index {} ({source}): every write it \
         holds is kept. The data of {} is discarded: those members are deleted with their PVCs \
         and replaced by new, empty members that copy the survivor's data. A write that no \
         member but a discarded one had stored is lost.",
        survivor.name,
        e.term,
        e.index,
        if discarded.is_empty() {
            "no other member".to_string()
        } else {
            discarded.join(", ")
        }
    );
    if !ahead.is_empty() {
        lost.push_str(&format!(
            " The named survivor is behind: {}; what they hold beyond it is lost.",
            ahead.join("; ")
        ));
    }
    RecoveryPlan {
        member: Some(survivor.name.clone()),
        member_id: Some(format_id(e.member_id)),
        raft_term: Some(as_i64(e.term)),
        raft_index: Some(as_i64(e.index)),
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
