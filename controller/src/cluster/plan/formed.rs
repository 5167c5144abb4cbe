//! Planning once the cluster has formed: finish a half-done scale-up, promote learners, remove
//! ghosts, self-heal (lost, crash-looping, unreachable members), pause and resume, scale one
//! member at a time, then the rollout ([`super::rollout`]) and the replacement of adopted
//! members. Pure; each branch names the quorum rule it keeps.

use super::*;

/// Crash-loop threshold for self-heal.
pub const CRASH_LOOP_RESTARTS: i32 = 5;

/// A crash loop counts only while its last crash is this recent: a lifetime restart count from
/// long ago says nothing about the member now.
pub const CRASH_LOOP_RECENT: SignedDuration = SignedDuration::from_mins(10);

/// The member to remove on scale-down: one that cannot serve first (etcd refuses to remove a
/// healthy voter while another is down, since the rest would lose quorum), then the newest
/// (creation time, then name, descending).
pub fn scale_down_victim(members: &[MemberView]) -> Option<&MemberView> {
    live(members).max_by(|a, b| {
        let broken = |m: &MemberView| m.data_lost || !is_ready(m);
        broken(a)
            .cmp(&broken(b))
            .then_with(|| a.created.cmp(&b.created))
            .then_with(|| a.name.cmp(&b.name))
    })
}

/// Whether a voter that is not serving can be removed from etcd now: the voters that do serve
/// must stay a majority of the current voters (etcd refuses a removal that leaves too few
/// started members, and a stricter rule costs only a wait).
pub(super) fn can_remove_down_voter(ready_voters: i32, voters: i32) -> bool {
    voters > 1 && ready_voters > voters / 2
}

/// A member crash-looping now: waiting in CrashLoopBackOff, restarted often, lately, and not
/// for lack of memory (a replacement would be OOM-killed the same way).
pub(super) fn crash_looping(p: &PodView, now: Timestamp) -> bool {
    !p.ready
        && p.crash_loop_backoff
        && p.restart_count >= CRASH_LOOP_RESTARTS
        && !p.oom_killed
        && p.last_exit
            .is_some_and(|t| now.duration_since(t) <= CRASH_LOOP_RECENT)
}

/// Whether `m`'s data has been gone or out of reach for good for `after`, so that replacing the
/// member (MemberRemove, its PVC deleted with it) loses nothing a Pod could still bring back:
/// the reason to replace it, or `None` to keep it.
pub(super) fn data_out_of_reach(
    m: &MemberView,
    now: Timestamp,
    after: SignedDuration,
) -> Option<DeleteReason> {
    let pod = m.pod.as_ref()?;
    let past = |since: Timestamp| now.duration_since(since) >= after;
    match &m.data_home {
        // The Node the volume is pinned to was deleted, or the PV itself is gone: no Pod can
        // mount that data again. The period, counted from the Pod's PodScheduled transition,
        // lets a Node that re-registers under its name (a reboot) come back first.
        DataHome::NodeGone { .. } | DataHome::VolumeGone { .. } => pod
            .unschedulable
            .as_ref()
            .is_some_and(|(since, _)| past(*since))
            .then_some(DeleteReason::Unschedulable),
        // A dead machine whose Node object stays: its Pod was evicted and no kubelet confirms,
        // so it stays Terminating and the member gets neither a new Pod nor its data back until
        // the machine returns. Only once the Pod is being deleted (a NotReady Node whose Pods
        // are left alone may be a partition that heals, its member back with its data) and the
        // Node has been NotReady for the whole period.
        DataHome::NodeNotReady { since, .. } => {
            (pod.terminating && past(*since)).then_some(DeleteReason::NodeNotReady)
        }
        // The data is there (a cordoned Node, Nodes short of cpu, network storage) or nothing
        // says it is not: an unschedulable Pod is the template's, the Nodes' capacity's or a
        // cordon's doing, and every member built from the same template would be stuck the
        // same way. Never replaced; the stall is reported (Facts::unschedulable).
        DataHome::Reachable | DataHome::Unknown => None,
    }
}

/// Promote a learner whose Pod is Ready (etcd checks that it has caught up with the leader,
/// `isLearnerReady`, and that the started voters keep a quorum; not the 5-second connection
/// rule of an add), one per reconcile.
fn promotion(
    o: &Observed<'_>,
    live: &[&MemberView],
    peer_url: &dyn Fn(&str) -> String,
) -> Option<Action> {
    live.iter().find_map(|m| {
        let entry = etcd_entry(&o.etcd, &peer_url(&m.name))?;
        (entry.is_learner && is_ready(m)).then(|| Action::Promote {
            member: m.name.clone(),
            member_id: entry.id,
        })
    })
}

/// How many learners etcd accepts at once in this cluster: the smallest `--max-learners` among
/// the members. etcd checks the limit on every member as it applies an added learner
/// (`ValidateConfigurationChange`: a member with a lower limit would skip the change the others
/// apply) and when a member starts, so the lowest limit rules. A member that runs without the
/// flag (built before the operator set it, taken over from the reference operator, etcd 3.5)
/// counts as etcd's default of one, which makes the joining one member at a time.
pub(super) fn learner_capacity(live: &[&MemberView]) -> usize {
    live.iter()
        .map(|m| m.max_learners as usize)
        .min()
        .unwrap_or(1)
        .max(1)
}

/// The joining step, one member at a time: finish a pending member (created, not yet given its
/// initial cluster: add it to etcd unless listed, then complete it), or create the next missing
/// one. `None` when nothing can go on now.
///
/// Several members may be learners at once (up to the members' lowest `--max-learners`): the next
/// one is added as soon as the previous one's etcd has *started* (etcd lists it under its name),
/// not once it is promoted. Safety and speed rest on etcd's rules for a joiner's first start
/// (`bootstrapExistingClusterNoWAL`): its `--initial-cluster` must match etcd's member list
/// (`ValidateClusterAndAssignIDs`: so nothing is added while a completed member has not started,
/// [`Facts::joining`]); every listed peer URL must resolve (for up to 30 s it retries: a learner
/// with no Pod yet would cost that); and it asks every listed member for the cluster, its version
/// and the downgrade state (10 s and 7 s timeouts: a member still in its own bootstrap listens but
/// answers none of them, so joiners started together wait each other out). A started member
/// answers at once.
pub(super) fn plan_join(
    o: &Observed<'_>,
    target: &ObservedSpec,
    live: &[&MemberView],
    etcd_members: &[EtcdMemberInfo],
    peer_url: &dyn Fn(&str) -> String,
    facts: &Facts,
) -> Option<Action> {
    if facts.joining.is_some() {
        return None;
    }
    let learners = etcd_members.iter().filter(|e| e.is_learner).count();
    let room = learner_capacity(live) > learners;
    if let Some(m) = live.iter().find(|m| m.pending) {
        let url = peer_url(&m.name);
        let already_added = etcd_entry(&o.etcd, &url).is_some();
        return (already_added || room).then(|| Action::CompletePending {
            member: m.name.clone(),
            initial_cluster_after_add: initial_cluster(etcd_members, &m.name, &url),
            peer_url: url,
            already_added,
        });
    }
    // Every voter serves and every learner has started: the next member's first start finds
    // every listed member answering.
    let settled = live
        .iter()
        .all(|m| match etcd_entry(&o.etcd, &peer_url(&m.name)) {
            Some(e) if e.is_learner => !e.name.is_empty(),
            Some(_) => is_ready(m),
            None => false,
        })
        && etcd_members.len() == live.len();
    (live.len() < target.replicas as usize && room && settled).then_some(Action::CreateMember)
}

pub(super) fn plan_formed(
    o: &Observed<'_>,
    target: &ObservedSpec,
    live: &[&MemberView],
    peer_url: &dyn Fn(&str) -> String,
    facts: &Facts,
) -> Action {
    let etcd_members = match &o.etcd {
        EtcdView::Members { members, .. } => members.as_slice(),
        // Without etcd's view no membership change is safe, except waking a paused member
        // (nothing answers while paused).
        _ => {
            if target.replicas >= 1 {
                if let Some(m) = live.iter().find(|m| m.dormant) {
                    return Action::SetDormant {
                        member: m.name.clone(),
                        dormant: false,
                    };
                }
            }
            return Action::Wait("etcd is not reachable through any voter".into());
        }
    };

    // 1. Finish a half-done joining step (crash between create / MemberAddAsLearner / patch).
    // A pending member that cannot go on yet waits for the learners in the way to start or be
    // promoted.
    if let Some(m) = live.iter().find(|m| m.pending) {
        if let Some(action) = plan_join(o, target, live, etcd_members, peer_url, facts) {
            return action;
        }
        if let Some(action) = promotion(o, live, peer_url) {
            return action;
        }
        return Action::Wait(format!(
            "waiting for the learners etcd lists to start or be promoted before adding {}",
            m.name
        ));
    }

    // 2. While members join as learners (etcd accepts more than one), the next one joins as
    // soon as the previous one has started, before any learner is promoted: a promotion adds a
    // voter, and etcd accepts the next add only once the member serving it has been connected
    // to that voter for 5 s.
    let learners = etcd_members.iter().filter(|e| e.is_learner).count();
    let want = target.replicas as usize;
    let joins_ahead = learners > 0
        && live.len() < want
        && facts.ghosts.is_empty()
        && learner_capacity(live) > learners;
    if joins_ahead {
        if let Some(action) = plan_join(o, target, live, etcd_members, peer_url, facts) {
            return action;
        }
        if let Some(m) = &facts.joining {
            return Action::Wait(format!(
                "waiting for {m} to start before the next member joins"
            ));
        }
    }

    // 3. Promote a learner whose Pod is Ready.
    if let Some(action) = promotion(o, live, peer_url) {
        return action;
    }

    // 4. Ghosts: etcd members nothing describes. A learner never counts towards quorum; a voter
    // is removed only while the serving voters keep a majority without it. The counts are the
    // facts already gathered from etcd's list (this branch runs only when etcd answered).
    // A ghost whose PVC was kept (its EtcdMember deleted without the break-glass annotation)
    // gets its EtcdMember back on that data, under its name and etcd member ID: no membership
    // change, so no quorum is at stake, and no copy of its data is thrown away. Only a member
    // named as this operator names them (its peer URL is the one its name gives).
    if let Some((g, claim_uid)) = facts.ghosts.iter().find_map(|g| {
        let uid = o.kept_claims.get(&g.name)?;
        (!g.name.is_empty() && g.peer_url == peer_url(&g.name)).then_some((g, uid))
    }) {
        return Action::ReattachMember {
            member: g.name.clone(),
            claim_uid: claim_uid.clone(),
            initial_cluster: initial_cluster(etcd_members, &g.name, &g.peer_url),
        };
    }
    let (voters, ready_voters) = (facts.voters, facts.ready_voters);
    if let Some(g) = facts
        .ghosts
        .iter()
        .find(|g| g.is_learner || can_remove_down_voter(ready_voters, voters))
    {
        return Action::RemoveGhost(g.clone());
    }

    // 5. Self-heal.
    for m in live {
        if m.memory && m.recorded_pod_uid.is_some() {
            let lost = match &m.pod {
                None => true,
                Some(p) => Some(&p.uid) != m.recorded_pod_uid.as_ref(),
            };
            if lost {
                return Action::DeleteMember {
                    member: m.name.clone(),
                    why: DeleteReason::MemoryPodLost,
                };
            }
        }
    }
    // A member that does not serve can go only while the serving voters keep a majority.
    let removable = |m: &MemberView| {
        match etcd_entry(&o.etcd, &peer_url(&m.name)) {
            Some(e) if !e.is_learner => can_remove_down_voter(ready_voters, voters),
            // A learner or a member etcd does not list: quorum does not depend on it.
            _ => true,
        }
    };
    for m in live {
        if m.data_lost && !m.dormant && removable(m) {
            return Action::DeleteMember {
                member: m.name.clone(),
                why: DeleteReason::DataLost,
            };
        }
    }
    for m in live {
        if m.pod.as_ref().is_some_and(|p| crash_looping(p, o.now)) && removable(m) {
            return Action::DeleteMember {
                member: m.name.clone(),
                why: DeleteReason::CrashLooping,
            };
        }
    }
    if let Some(after) = o.replace_broken_after {
        // One at a time: the next only once no member is pending (the previous replacement's
        // successor has joined), and only while the serving voters keep a majority without it.
        let replacing = live.iter().any(|m| m.pending);
        for m in live {
            if m.dormant || replacing || !removable(m) {
                continue;
            }
            if let Some(why) = data_out_of_reach(m, o.now, after) {
                return Action::DeleteMember {
                    member: m.name.clone(),
                    why,
                };
            }
        }
    }

    // 6. Pause / resume.
    if target.replicas == 0 {
        if live.len() > 1 {
            if let Some(v) = scale_down_victim(&o.members) {
                return Action::DeleteMember {
                    member: v.name.clone(),
                    why: DeleteReason::Pause,
                };
            }
        }
        if let Some(last) = live.first() {
            if !last.dormant {
                return Action::SetDormant {
                    member: last.name.clone(),
                    dormant: true,
                };
            }
        }
        return Action::None;
    }
    if let Some(m) = live.iter().find(|m| m.dormant) {
        return Action::SetDormant {
            member: m.name.clone(),
            dormant: false,
        };
    }

    // 7. Scale up, one member at a time, each gated on every voter being Ready and every
    // learner having started; several learners at once when the members accept that many.
    if live.len() < want {
        if let Some(action) = plan_join(o, target, live, etcd_members, peer_url, facts) {
            return action;
        }
        return Action::Wait(
            "waiting for existing members to become Ready before next scale-up step".into(),
        );
    }
    if live.len() > want {
        if let Some(v) = scale_down_victim(&o.members) {
            return Action::DeleteMember {
                member: v.name.clone(),
                why: DeleteReason::ScaleDown,
            };
        }
    }

    // 8. A new trust bundle or template: restart the members one at a time.
    if let Some(action) = plan_rollout(o, target, live, etcd_members, peer_url, want, facts) {
        return action;
    }

    // 9. On request, replace adopted members by native ones: one at a time, and only while the
    // cluster is whole (every member a Ready voter, etcd listing exactly these), so removing one
    // leaves a majority; the scale-up step above then adds its native successor.
    let requested = o
        .cluster
        .annotations()
        .get(api::labels::REPLACE_ADOPTED_ANNOTATION)
        .is_some_and(|v| v == "true");
    if requested && o.members.len() == want {
        let whole = live.iter().all(|m| is_ready(m))
            && etcd_members.len() == live.len()
            && etcd_members.iter().all(|e| !e.is_learner);
        if let Some(m) = live
            .iter()
            .filter(|m| m.service.is_some())
            .min_by_key(|m| &m.name)
        {
            if whole {
                return Action::DeleteMember {
                    member: m.name.clone(),
                    why: DeleteReason::ReplaceAdopted,
                };
            }
            return Action::Wait(format!(
                "replacing adopted member {} once every member is a Ready voter",
                m.name
            ));
        }
    }
    Action::None
}
