//! Rolling restarts: members that run another trust bundle, template or etcd image repository
//! than they are to run are restarted one at a time, followers first and the leader last (a
//! Memory member is replaced). Pure; also what a rollout's progress counts.

use super::*;

/// `m` has a Pod and etcd does not run in it: the Pod cannot be scheduled, or the etcd container
/// waits in `CrashLoopBackOff`.
pub(super) fn pod_not_running(m: &MemberView) -> bool {
    m.pod
        .as_ref()
        .is_some_and(|p| !p.ready && (p.unschedulable.is_some() || p.crash_loop_backoff))
}

/// The Memory member a rollout would replace (a Memory member cannot restart with its data, so
/// a rollout deletes it and adds a successor that copies the data from the other voters) while
/// no other voter holds the data: replacing it would delete the only copy and leave the cluster
/// formed with no member. Only once the cluster has its target size: a scale-up (the way out,
/// scale to 3) goes first, and afterwards other voters hold the data. Members that never
/// recorded a CA bundle or repository are taken to run the current one, as the rollout does.
pub fn memory_rollout_unsafe(
    o: &Observed<'_>,
    target: &ObservedSpec,
    live: &[&MemberView],
    peer_url: &dyn Fn(&str) -> String,
) -> Option<String> {
    if target.replicas == 0 || live.len() != target.replicas as usize {
        return None;
    }
    let template = crate::template::target_hash(target);
    let stale = |m: &MemberView| {
        let wanted = Wanted {
            template: &template,
            trust_bundle: o
                .trust_bundle
                .as_deref()
                .filter(|_| m.trust_bundle.is_some()),
            image_repository: o
                .image_repository
                .as_deref()
                .filter(|_| m.image_repository.is_some()),
        };
        !wanted.told(m)
    };
    let other_voter = |m: &MemberView| match o.etcd.members() {
        Some(members) => {
            let own = peer_url(&m.name);
            members
                .iter()
                .any(|e| !e.is_learner && !e.peer_urls.contains(&own))
        }
        None => live
            .iter()
            .any(|v| v.name != m.name && v.voter && !v.dormant),
    };
    live.iter()
        .find(|m| m.memory && !m.pending && !m.dormant && stale(m) && !other_voter(m))
        .map(|m| m.name.clone())
}

/// Rolling restarts. etcd loads its CA bundles once at start-up, and a new version, resources or
/// options reach a member only through a new Pod: after the Secrets' `ca.crt` changed, or the
/// locked target's template did, every member whose Pod runs something else is restarted (a
/// Memory member replaced), one at a time, each step only while the cluster is whole (every
/// member a Ready voter, no learner, etcd listing exactly these members), followers first and
/// the leader last, after leadership was moved to a member already updated.
pub(super) fn plan_rollout(
    o: &Observed<'_>,
    target: &ObservedSpec,
    live: &[&MemberView],
    etcd_members: &[EtcdMemberInfo],
    peer_url: &dyn Fn(&str) -> String,
    want_replicas: usize,
    facts: &Facts,
) -> Option<Action> {
    let trust = o.trust_bundle.as_deref();
    let template = crate::template::target_hash(target);
    // Records first: members from before the operator recorded bundles (or adopted ones), and
    // Pods from before it recorded templates, are taken to run what their member says; they
    // are not rolled only because nothing was recorded.
    if let Some(want) = trust {
        if let Some(m) = live.iter().find(|m| {
            m.trust_bundle.is_none()
                || (o.ca_trust.is_some() && crate::cluster::ca_set::set_unrecorded(m, want))
        }) {
            // A member that never recorded one (adopted, or from an older operator) whose etcd
            // started before the Secrets' CA last changed may run an older bundle: recorded as
            // unknown, it is rolled like a member behind.
            let trust_bundle = if m.trust_bundle.is_none()
                && crate::cluster::ca_set::started_before_ca_change(m, o.ca_trust.as_ref())
            {
                crate::cluster::ca_set::UNKNOWN
            } else {
                want
            };
            return Some(Action::Record {
                member: m.name.clone(),
                revision: Revision::TrustBundle,
                value: trust_bundle.to_string(),
            });
        }
    }
    let repository = o.image_repository.as_deref();
    if let Some(want) = repository {
        if let Some(m) = live.iter().find(|m| m.image_repository.is_none()) {
            return Some(Action::Record {
                member: m.name.clone(),
                revision: Revision::ImageRepository,
                value: want.to_string(),
            });
        }
    }
    if let Some(m) = live
        .iter()
        .find(|m| m.pod.as_ref().is_some_and(|p| p.template_hash.is_none()))
    {
        return Some(Action::Record {
            member: m.name.clone(),
            revision: Revision::Template,
            value: m.template_hash.clone(),
        });
    }
    let wanted = Wanted {
        template: &template,
        trust_bundle: trust,
        image_repository: repository,
    };
    let told = |m: &MemberView| wanted.told(m);
    if let Some(m) = live
        .iter()
        .find(|m| told(m) && wanted.pod_behind(m) && !m.memory)
    {
        return Some(Action::Wait(format!(
            "restarting member {} to run the new CA bundle, spec or etcd image",
            m.name
        )));
    }
    let stale: Vec<&&MemberView> = live.iter().filter(|m| !told(m)).collect();
    if stale.is_empty() {
        return None;
    }
    // Give `m` what it is not told yet: the target's template, the trust bundle, the repository.
    let roll = |m: &MemberView| Action::RollMember {
        member: m.name.clone(),
        trust_bundle: trust
            .filter(|t| m.trust_bundle.as_deref() != Some(*t))
            .map(str::to_string),
        template: m.template_hash != template,
        image_repository: repository
            .filter(|r| m.image_repository.as_deref() != Some(*r))
            .map(str::to_string),
        last: stale.len() == 1,
    };
    if facts.unsafe_ca_change.is_some() {
        return Some(Action::Wait(
            "the rollout is refused: the TLS Secrets hold a certificate from a CA that running \
             members do not trust (see the Progressing condition)"
                .into(),
        ));
    }
    if let Some(member) = &facts.memory_rollout_unsafe {
        return Some(Action::Wait(format!(
            "the rollout is refused: Memory member {member} is the only voter and holds the only \
             copy of the data, which a new Pod would not have; scale to 3 replicas first, or \
             revert the change"
        )));
    }
    if o.cluster
        .annotations()
        .get(api::labels::ROLLOUT_PAUSED_ANNOTATION)
        .is_some_and(|v| v == "true")
    {
        return Some(Action::Wait(format!(
            "the rollout is paused ({}=true): {} member(s) still run the old CA bundle, spec or \
             etcd image; remove the annotation to go on",
            api::labels::ROLLOUT_PAUSED_ANNOTATION,
            stale.len()
        )));
    }
    // A member whose Pod does not run (the scheduler cannot place it, or etcd crash-loops in it)
    // serves nothing: restarting it on the current target costs no availability, and when the
    // target it was told is the cause (an edit asking for more cpu than any Node has, then
    // reverted) waiting for it to be a Ready voter would wait forever. Its data stays on its
    // volume; a Memory member has none left to keep and is for the replacement rules.
    if let Some(down) = stale.iter().find(|m| !m.memory && pod_not_running(m)) {
        return Some(roll(down));
    }
    let whole = live.len() == want_replicas
        && live.iter().all(|m| is_ready(m))
        && etcd_members.len() == live.len()
        && etcd_members.iter().all(|e| !e.is_learner);
    if !whole {
        return Some(Action::Wait(format!(
            "{} member(s) still run the old CA bundle, spec or etcd image; the next restart \
             waits until every member is a Ready voter",
            stale.len()
        )));
    }
    let id_of = |m: &MemberView| etcd_entry(&o.etcd, &peer_url(&m.name)).map(|e| e.id);
    let Some(leader) = o.leader else {
        return Some(Action::Wait(
            "the rolling restart waits for etcd to name its leader".into(),
        ));
    };
    let is_leader = |m: &MemberView| id_of(m) == Some(leader);
    let next = stale
        .iter()
        .filter(|m| !is_leader(m))
        .min_by_key(|m| &m.name)
        .or_else(|| stale.first())
        .copied()?;
    if is_leader(next) && live.len() > 1 {
        // Hand leadership to a member that is already updated (any other while none is), so
        // the leader's restart costs one quick hand-over instead of an election timeout.
        let successor = live
            .iter()
            .filter(|m| m.name != next.name)
            .min_by_key(|m| (!told(m), &m.name))
            .and_then(|m| id_of(m).map(|id| (m, id)));
        if let Some((to, to_id)) = successor {
            return Some(Action::MoveLeader {
                from: next.name.clone(),
                to: to.name.clone(),
                to_id,
            });
        }
    }
    if next.memory {
        return Some(Action::DeleteMember {
            member: next.name.clone(),
            why: DeleteReason::Rollout,
        });
    }
    Some(roll(next))
}
