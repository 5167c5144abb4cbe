//! Rolling restarts: members that run another trust bundle, template or etcd image repository
//! than they are to run are restarted one at a time, followers first and the leader last (a
//! Memory member is replaced). Pure; also what a rollout's progress counts.

use super::*;

/// `m`'s Pod started with another trust bundle than `want`. A member without a Pod (a new one, or
/// one whose Pod is being created again) starts with the bundle its member records.
pub(super) fn pod_stale(m: &MemberView, want: &str) -> bool {
    m.pod
        .as_ref()
        .is_some_and(|p| p.trust_bundle.as_deref() != Some(want))
}

/// Whether `m` runs (or will start with) the trust bundle `want`.
pub(super) fn runs_trust_bundle(m: &MemberView, want: &str) -> bool {
    m.trust_bundle.as_deref() == Some(want) && !pod_stale(m, want)
}

/// `m`'s Pod records another template than its member's (a Pod without a record runs its
/// member's: see [`Action::RecordTemplateHash`]).
pub(super) fn pod_behind_template(m: &MemberView) -> bool {
    m.pod
        .as_ref()
        .and_then(|p| p.template_hash.as_ref())
        .is_some_and(|h| *h != m.template_hash)
}

/// Whether `m` runs (or will start with) the template whose hash is `want`.
pub(super) fn runs_template(m: &MemberView, want: &str) -> bool {
    m.template_hash == want && !pod_behind_template(m)
}

/// `m` has a Pod and etcd does not run in it: the Pod cannot be scheduled, or the etcd container
/// waits in `CrashLoopBackOff`.
pub(super) fn pod_not_running(m: &MemberView) -> bool {
    m.pod
        .as_ref()
        .is_some_and(|p| !p.ready && (p.unschedulable.is_some() || p.crash_loop_backoff))
}

/// `(members running the current trust bundle, members)` while some do not; members that never
/// recorded one are taken to run it (see [`Action::RecordTrustBundle`]).
pub(super) fn trust_rollout(want: Option<&str>, live: &[&MemberView]) -> Option<(i32, i32)> {
    let want = want?;
    let done = live
        .iter()
        .filter(|m| m.trust_bundle.is_none() || runs_trust_bundle(m, want))
        .count() as i32;
    let total = live.len() as i32;
    (done < total).then_some((done, total))
}

/// `m`'s Pod records another image repository than its member's (a Pod without a record runs
/// its member's).
pub(super) fn pod_behind_repository(m: &MemberView) -> bool {
    m.pod
        .as_ref()
        .and_then(|p| p.image_repository.as_ref())
        .is_some_and(|r| Some(r) != m.image_repository.as_ref())
}

/// `(members running the image repository `want`, members)` while some do not; members that
/// never recorded one are taken to run it (see [`Action::RecordImageRepository`]).
pub(super) fn image_rollout(want: Option<&str>, live: &[&MemberView]) -> Option<(i32, i32)> {
    let want = want?;
    let done = live
        .iter()
        .filter(|m| {
            m.image_repository.is_none()
                || (m.image_repository.as_deref() == Some(want) && !pod_behind_repository(m))
        })
        .count() as i32;
    let total = live.len() as i32;
    (done < total).then_some((done, total))
}

/// `(members running the target's template, members)` while some do not.
pub(super) fn template_rollout(target: &ObservedSpec, live: &[&MemberView]) -> Option<(i32, i32)> {
    if target.replicas == 0 {
        return None;
    }
    let want = crate::template::target_hash(target);
    let done = live.iter().filter(|m| runs_template(m, &want)).count() as i32;
    let total = live.len() as i32;
    (done < total).then_some((done, total))
}

/// Whether `m` is told to run the target's template, the trust bundle `trust` and the image
/// repository `repository` (its Pod may still run the old ones).
pub(super) fn told(
    m: &MemberView,
    template: &str,
    trust: Option<&str>,
    repository: Option<&str>,
) -> bool {
    m.template_hash == template
        && trust.is_none_or(|t| m.trust_bundle.as_deref() == Some(t))
        && repository.is_none_or(|r| m.image_repository.as_deref() == Some(r))
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
    let trust = o.trust_bundle.as_deref();
    let repository = o.image_repository.as_deref();
    let stale = |m: &MemberView| {
        let trust = trust.filter(|_| m.trust_bundle.is_some());
        let repository = repository.filter(|_| m.image_repository.is_some());
        !told(m, &template, trust, repository)
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
            return Some(Action::RecordTrustBundle {
                member: m.name.clone(),
                trust_bundle: trust_bundle.to_string(),
            });
        }
    }
    let repository = o.image_repository.as_deref();
    if let Some(want) = repository {
        if let Some(m) = live.iter().find(|m| m.image_repository.is_none()) {
            return Some(Action::RecordImageRepository {
                member: m.name.clone(),
                repository: want.to_string(),
            });
        }
    }
    if let Some(m) = live
        .iter()
        .find(|m| m.pod.as_ref().is_some_and(|p| p.template_hash.is_none()))
    {
        return Some(Action::RecordTemplateHash {
            member: m.name.clone(),
            template_hash: m.template_hash.clone(),
        });
    }
    let told = |m: &MemberView| told(m, &template, trust, repository);
    let pod_behind = |m: &MemberView| {
        pod_behind_template(m) || trust.is_some_and(|t| pod_stale(m, t)) || pod_behind_repository(m)
    };
    if let Some(m) = live.iter().find(|m| told(m) && pod_behind(m) && !m.memory) {
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
