//! Renders the EtcdCluster status from a plan: the counters, the locked target and the three
//! conditions with the reference reasons. Pure; `lastTransitionTime` is kept while a condition's
//! status does not change, so a steady cluster renders an identical status (and nothing is written).

use api::conditions::{cluster as ctype, reason};
use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::plan::{Action, Facts, Hold, Phase, Plan};
use crate::conditions::set_condition;

pub fn cluster_token(cluster: &EtcdCluster) -> String {
    format!(
        "{}-{}-{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any(),
        cluster.uid().unwrap_or_default()
    )
}

/// The message of `CertManagerNotInstalled` (Available and Progressing).
const CERT_MANAGER_MISSING: &str = "spec.tls asks for cert-manager Certificates but the \
    cert-manager.io/v1 API (kind Certificate) is not installed, so nothing is created; install \
    cert-manager (https://cert-manager.io/docs/installation/): the operator looks for it again \
    every few seconds, no restart is needed";

/// The cluster's message for a failed seed restore: the agent's own, with what happens next.
fn restore_failed(facts: &Facts) -> String {
    format!(
        "restoring the seed's data from spec.bootstrap.restore failed: {}; the restore init \
         container is retried with back-off (kubectl logs <seed pod> -c restore); \
         spec.bootstrap is immutable, so to change the source or the storage size delete the \
         EtcdCluster and its PVCs and recreate it",
        facts.restore_failure.as_deref().unwrap_or_default()
    )
}

/// The cluster's message while the seed restores.
fn restoring(facts: &Facts) -> String {
    format!(
        "the seed is restoring its data from {} (its restore init container is running: kubectl \
         logs <seed pod> -c restore); the progress deadline is held until the restore ends",
        facts.restoring.as_deref().unwrap_or_default()
    )
}

/// The message of `MemoryRolloutUnsafe`: which member, why, and the two ways out.
fn memory_rollout_unsafe(cluster: &EtcdCluster, facts: &Facts, member: &str) -> String {
    let mut what = Vec::new();
    if facts.template_rollout.is_some() {
        what.push("the spec (version, resources, options, affinity, placement or metadata)");
    }
    if facts.trust_rollout.is_some() {
        what.push("the CA bundle of the TLS Secrets");
    }
    if facts.image_rollout.is_some() {
        what.push("the operator's --etcd-image-repository");
    }
    if what.is_empty() {
        what.push("what the member runs");
    }
    format!(
        "the rollout is refused: {} changed, and a Memory member (storage.medium: Memory) can \
         take it only by being replaced with a new, empty member that copies the data from the \
         other voters; member {member} is the only voter and holds the only copy of the data, so \
         replacing it would lose every key. Scale to 3 replicas first (kubectl scale \
         etcdcluster/{} --replicas=3): the new members join with the new spec and copy the data, \
         then {member} is replaced; or revert the change. Nothing is restarted meanwhile",
        what.join(" and "),
        cluster.name_any()
    )
}

/// The message of `SpecNotSupported`: the fields, and the way out.
fn unsupported_message(fields: &[&str]) -> String {
    format!(
        "this operator version does not implement {} yet, so the cluster is not bootstrapped; \
         these fields cannot change after create: delete the EtcdCluster and recreate it without them",
        fields.join(", ")
    )
}

/// The message of `ClusterIDMismatch` (Available and Degraded).
fn id_mismatch_message(latched: &str, answered: &str) -> String {
    format!(
        "etcd answers with cluster ID {answered}, but this EtcdCluster formed cluster {latched}: \
         its members reach another cluster; the operator changes nothing until the members \
         serve cluster {latched} again (check the member Pods' data volumes and DNS)"
    )
}

/// How long the cluster must have been without quorum (since `status.quorumLostSince`, the
/// outage's own start) before it says `AllMembersLost`: a Pod being recreated (the one member of
/// a cluster restarting, a resume from pause) leaves none for a moment, which is not a loss.
const ALL_MEMBERS_LOST_AFTER_SECONDS: i64 = 30;

/// Every member gone, for long enough to say so (see [`ALL_MEMBERS_LOST_AFTER_SECONDS`]), or
/// already said. Counted from the outage's own start, never from `Available`'s
/// `lastTransitionTime`: that one does not move when only the reason changes (a cluster paused
/// for an hour and resumed has been `Available=False` for an hour, and lost nothing).
fn all_members_lost(cluster: &EtcdCluster, facts: &Facts, now: Timestamp) -> bool {
    if !facts.all_members_lost {
        return false;
    }
    let Some(status) = cluster.status.as_ref() else {
        return false;
    };
    let said = status
        .conditions
        .iter()
        .any(|c| c.type_ == ctype::AVAILABLE && c.reason == reason::ALL_MEMBERS_LOST);
    said || status.quorum_lost_since.as_ref().is_some_and(|since| {
        now.as_second() - since.0.as_second() >= ALL_MEMBERS_LOST_AFTER_SECONDS
    })
}

/// `status.quorumLostSince` after this render: the outage's start, kept while it lasts (and while
/// an EtcdRecovery holds the cluster, so a recovery that failed and let go names the same outage
/// and the automatic one is not created again), set when the loss is first rendered, and cleared
/// by anything else (a majority ready, a pause, another reason to be unavailable).
fn quorum_lost_since(
    old: Option<&Time>,
    available: Option<&Condition>,
    now: Timestamp,
) -> Option<Time> {
    let available = available?;
    let lost = available.status == "False"
        && (available.reason == reason::QUORUM_LOST
            || available.reason == reason::ALL_MEMBERS_LOST);
    if lost {
        Some(old.cloned().unwrap_or(Time(now)))
    } else if available.reason == reason::RECOVERING {
        old.cloned()
    } else {
        None
    }
}

/// The message of `AllMembersLost`: what is gone, and the two ways back.
fn all_members_lost_message(cluster: &EtcdCluster, members: i32) -> String {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    format!(
        "every member is gone: none of the {members} members has a Pod and no etcd member \
         answers, so the cluster serves nothing (readyMembers 0). While the members' PVCs remain, \
         the operator recreates their Pods and the cluster recovers by itself once they run: find \
         what stops them (kubectl get events -n {ns}; kubectl get pod,pvc -n {ns} -l \
         {}={name}). If one member comes back with its data and the others do not, apply the \
         first EtcdRecovery below; if the data is gone too, apply the second, naming the newest \
         Complete and Verified EtcdSnapshot of the cluster (kubectl get etcdsnapshot -n {ns}). \
         First, {}. Second, {}.",
        labels::CLUSTER,
        recovery_hint(cluster),
        snapshot_recovery_hint(cluster)
    )
}

/// The EtcdRecovery that rebuilds a cluster whose data is gone from one of its snapshots, as a
/// command to paste with the snapshot's name to fill in.
fn snapshot_recovery_hint(cluster: &EtcdCluster) -> String {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let recovery = serde_json::json!({
        "apiVersion": api::v1alpha2::API_VERSION,
        "kind": "EtcdRecovery",
        "metadata": {"name": format!("{name}-restore"), "namespace": ns},
        "spec": {"clusterRef": {"name": name}, "source": {"snapshot": {"name": "<snapshot>"}}},
    });
    format!(
        "to rebuild it in place from a snapshot (every write after it is lost), apply: echo \
         '{recovery}' | kubectl create -f - with <snapshot> replaced"
    )
}

/// The EtcdRecovery to apply to a cluster that lost its quorum, as a command to paste
/// (docs/disaster-recovery.md is the runbook).
fn recovery_hint(cluster: &EtcdCluster) -> String {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let recovery = serde_json::json!({
        "apiVersion": api::v1alpha2::API_VERSION,
        "kind": "EtcdRecovery",
        "metadata": {"name": format!("{name}-recovery"), "namespace": ns},
        "spec": {"clusterRef": {"name": name}, "source": {"survivor": {}}},
    });
    format!(
        "to rebuild it in place from the member with the most data, apply an EtcdRecovery: \
         echo '{recovery}' | kubectl create -f - (see docs/disaster-recovery.md)"
    )
}

/// The cluster's messages while an EtcdRecovery holds it.
fn recovering_message(recovery: &str) -> String {
    format!(
        "EtcdRecovery {recovery} is rebuilding the cluster (kubectl get etcdrecovery {recovery} \
         -o yaml shows its plan and step); the operator changes no membership until it lets go"
    )
}

/// A TLS Secret cert-manager has not issued yet is a wait; any other problem is not ready.
fn tls_reason(waiting_for_certificate: bool) -> &'static str {
    if waiting_for_certificate {
        reason::WAITING_FOR_CERTIFICATE
    } else {
        reason::TLS_SECRET_NOT_READY
    }
}

/// The status to write after `plan` (and its action, when it latched the cluster ID).
pub fn render(
    cluster: &EtcdCluster,
    plan: &Plan,
    latched_cluster_id: Option<String>,
    now: Timestamp,
) -> EtcdClusterStatus {
    let old = cluster.status.clone().unwrap_or_default();
    let generation = cluster.metadata.generation;
    let facts = &plan.facts;
    let mut conditions = old.conditions.clone();
    let mut set = |t: &str, s: bool, r: &str, m: String| {
        set_condition(&mut conditions, t, s, r, m, generation, now)
    };

    let cluster_id = latched_cluster_id.or(old.cluster_id.clone());
    let formed = cluster_id.is_some();
    let target = plan.observed.replicas;
    let paused = target == 0 && plan.phase == Phase::Reconciled;
    let paused_message = match &facts.dormant_pvc {
        Some(pvc) => format!("cluster is paused (spec.replicas=0); data is preserved on PVC {pvc}"),
        None => "cluster is paused (spec.replicas=0); no data has been written (cluster never bootstrapped)".to_string(),
    };
    let ready = facts.ready_members;
    // Quorum is etcd's: a majority of the voters it lists, among the voters whose Pod is Ready.
    // A joining learner neither helps nor hurts it. Before etcd has been asked (no voter known),
    // fall back to the target size.
    let (members, ready_quorum) = if facts.voters > 0 {
        (facts.voters, facts.ready_voters)
    } else {
        (target.max(facts.live_members), ready)
    };
    let majority = members / 2 + 1;
    let joining = (facts.live_members - members).max(0);
    let joining_note = if joining > 0 {
        format!(" ({joining} joining)")
    } else {
        String::new()
    };
    let ghost_note = (!facts.ghosts.is_empty()).then(|| {
        format!(
            "etcd lists {} member(s) that no EtcdMember describes: {}; they are removed while quorum allows",
            facts.ghosts.len(),
            facts
                .ghosts
                .iter()
                .map(|g| format!("{} ({})", crate::etcd::format_id(g.id), g.peer_url))
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    let lost = all_members_lost(cluster, facts, now);
    let id_mismatch = facts
        .cluster_id_mismatch
        .as_ref()
        .map(|(latched, answered)| id_mismatch_message(latched, answered));

    // A member whose Pod cannot be scheduled is not replaced unless its data is gone for good
    // (self-healing in concepts.md): the scheduler's own words say what to fix.
    let unschedulable_note = facts
        .unschedulable
        .as_ref()
        .map(|(member, message)| {
            format!(
                "; member {member}'s Pod cannot be scheduled: {message} (the member is \
                 replaced only once its data is gone for good, its Node or volume deleted; \
                 otherwise fix the spec or the Nodes)"
            )
        })
        .unwrap_or_default();

    // Available: a hold first, in its one precedence (see Hold::first).
    match &plan.hold {
        Some(Hold::Recovering(recovery)) => set(
            ctype::AVAILABLE,
            false,
            reason::RECOVERING,
            recovering_message(recovery),
        ),
        Some(Hold::Unsupported(fields)) => set(
            ctype::AVAILABLE,
            false,
            reason::SPEC_NOT_SUPPORTED,
            unsupported_message(fields),
        ),
        Some(Hold::BootstrapFailed) => set(
            ctype::AVAILABLE,
            false,
            reason::BOOTSTRAP_FAILED,
            "the cluster did not form before the progress deadline; delete the EtcdCluster, wait until its EtcdMembers and PVCs are gone, then recreate it".into(),
        ),
        Some(Hold::DeadlineExceeded) => set(
            ctype::AVAILABLE,
            false,
            reason::DEADLINE_EXCEEDED,
            format!(
                "could not reach {} replicas (version {}) before the progress deadline; edit the spec (for example revert spec.replicas) to retry",
                plan.observed.replicas, plan.observed.version
            ),
        ),
        Some(Hold::CertManagerMissing) => set(
            ctype::AVAILABLE,
            false,
            reason::CERT_MANAGER_NOT_INSTALLED,
            CERT_MANAGER_MISSING.into(),
        ),
        Some(Hold::TlsSecret {
            problem,
            waiting_for_certificate,
        }) => set(
            ctype::AVAILABLE,
            false,
            tls_reason(*waiting_for_certificate),
            problem.clone(),
        ),
        Some(Hold::Auth(p)) => set(ctype::AVAILABLE, false, p.reason, p.message.clone()),
        Some(Hold::ClusterIdMismatch { latched, answered }) => set(
            ctype::AVAILABLE,
            false,
            reason::CLUSTER_ID_MISMATCH,
            id_mismatch_message(latched, answered),
        ),
        _ if paused => set(ctype::AVAILABLE, false, reason::PAUSED, paused_message.clone()),
        _ if lost => set(
            ctype::AVAILABLE,
            false,
            reason::ALL_MEMBERS_LOST,
            all_members_lost_message(cluster, members),
        ),
        _ if matches!(plan.action, Action::LatchClusterId { .. }) => set(
            ctype::AVAILABLE,
            true,
            reason::CLUSTER_DISCOVERED,
            format!("the seed formed cluster {}", cluster_id.clone().unwrap_or_default()),
        ),
        _ if !formed && facts.restore_failure.is_some() => set(
            ctype::AVAILABLE,
            false,
            reason::RESTORE_FAILED,
            restore_failed(facts),
        ),
        _ if !formed && facts.restoring.is_some() => set(
            ctype::AVAILABLE,
            false,
            reason::RESTORING,
            restoring(facts),
        ),
        _ if !formed => set(
            ctype::AVAILABLE,
            false,
            reason::CLUSTER_UNREACHABLE,
            match &facts.etcd_error {
                Some(e) => format!("cannot reach the seed member: {e}"),
                None => "waiting for the seed member to start and form the cluster".into(),
            },
        ),
        _ if ready_quorum >= members && ready_quorum > 0 => set(
            ctype::AVAILABLE,
            true,
            reason::QUORUM_HEALTHY,
            format!("all {members} members are ready{joining_note}"),
        ),
        _ if ready_quorum >= majority => set(
            ctype::AVAILABLE,
            true,
            reason::QUORUM_AVAILABLE,
            format!("{ready_quorum} of {members} members are ready; a majority ({majority}) serves writes"),
        ),
        _ => set(
            ctype::AVAILABLE,
            false,
            reason::QUORUM_LOST,
            match &facts.etcd_error {
                Some(e) => format!("{ready_quorum} of {members} members are ready, fewer than a majority ({majority}); {e}; {}; if no member kept its data, {}", recovery_hint(cluster), snapshot_recovery_hint(cluster)),
                None => format!("{ready_quorum} of {members} members are ready, fewer than a majority ({majority}); {}; if no member kept its data, {}", recovery_hint(cluster), snapshot_recovery_hint(cluster)),
            },
        ),
    }

    // Progressing: the holds that stop progress; root auth and a cluster ID mismatch show in
    // Available and Degraded, and progress reads as it would without them.
    match (&plan.hold, plan.phase) {
        (Some(Hold::Recovering(recovery)), _) => set(
            ctype::PROGRESSING,
            true,
            reason::RECOVERING,
            recovering_message(recovery),
        ),
        (Some(Hold::Unsupported(fields)), _) => set(
            ctype::PROGRESSING,
            false,
            reason::SPEC_NOT_SUPPORTED,
            unsupported_message(fields),
        ),
        (Some(Hold::BootstrapFailed), _) => set(
            ctype::PROGRESSING,
            false,
            reason::BOOTSTRAP_FAILED,
            "bootstrap gave up at the progress deadline".into(),
        ),
        (Some(Hold::DeadlineExceeded), _) => set(
            ctype::PROGRESSING,
            false,
            reason::DEADLINE_EXCEEDED,
            "gave up at the progress deadline; waiting for a spec edit".into(),
        ),
        (Some(Hold::CertManagerMissing), _) => set(
            ctype::PROGRESSING,
            false,
            reason::CERT_MANAGER_NOT_INSTALLED,
            CERT_MANAGER_MISSING.into(),
        ),
        (
            Some(Hold::TlsSecret {
                problem,
                waiting_for_certificate,
            }),
            _,
        ) => set(
            ctype::PROGRESSING,
            true,
            tls_reason(*waiting_for_certificate),
            problem.clone(),
        ),
        _ if lost => set(
            ctype::PROGRESSING,
            false,
            reason::ALL_MEMBERS_LOST,
            all_members_lost_message(cluster, members),
        ),
        _ if facts.memory_rollout_unsafe.is_some() => set(
            ctype::PROGRESSING,
            false,
            reason::MEMORY_ROLLOUT_UNSAFE,
            memory_rollout_unsafe(
                cluster,
                facts,
                facts.memory_rollout_unsafe.as_deref().unwrap_or_default(),
            ),
        ),
        _ if facts.unsafe_ca_change.is_some() => set(
            ctype::PROGRESSING,
            false,
            reason::UNSAFE_CA_CHANGE,
            facts.unsafe_ca_change.clone().unwrap_or_default(),
        ),
        (_, Phase::Reconciled | Phase::Progressing)
            if target > 0 && plan.progress_deadline.is_none() && facts.trust_rollout.is_some() =>
        {
            let (done, total) = facts.trust_rollout.unwrap_or_default();
            set(
                ctype::PROGRESSING,
                true,
                reason::ROLLING_RESTART,
                format!(
                    "the CA bundle (ca.crt) of the TLS Secrets changed and etcd loads it only at \
                     start-up: restarting the members one at a time, followers first and the \
                     leader last after moving leadership; {done} of {total} members run the new \
                     bundle{}",
                    if facts.rollout_paused {
                        format!(
                            "; paused by {}=true",
                            api::labels::ROLLOUT_PAUSED_ANNOTATION
                        )
                    } else {
                        String::new()
                    }
                ),
            )
        }
        (_, Phase::Reconciled | Phase::Progressing)
            if target > 0 && plan.progress_deadline.is_none() && facts.image_rollout.is_some() =>
        {
            let (done, total) = facts.image_rollout.unwrap_or_default();
            set(
                ctype::PROGRESSING,
                true,
                reason::ROLLING_RESTART,
                format!(
                    "the operator's --etcd-image-repository changed: restarting the members one \
                     at a time on the same version, followers first and the leader last after \
                     moving leadership; {done} of {total} members run the new image{}",
                    if facts.rollout_paused {
                        format!(
                            "; paused by {}=true",
                            api::labels::ROLLOUT_PAUSED_ANNOTATION
                        )
                    } else {
                        String::new()
                    }
                ),
            )
        }
        (_, Phase::Reconciled) if target == 0 => set(
            ctype::PROGRESSING,
            false,
            reason::PAUSED,
            paused_message.clone(),
        ),
        (_, Phase::Reconciled) => set(
            ctype::PROGRESSING,
            false,
            reason::RECONCILED,
            format!(
                "{} members of version {} are ready",
                target, plan.observed.version
            ),
        ),
        (_, Phase::Progressing) if !formed && facts.restore_failure.is_some() => set(
            ctype::PROGRESSING,
            true,
            reason::RESTORE_FAILED,
            restore_failed(facts),
        ),
        (_, Phase::Progressing) if !formed && facts.restoring.is_some() => set(
            ctype::PROGRESSING,
            true,
            reason::RESTORING,
            restoring(facts),
        ),
        (_, Phase::Progressing) if facts.seed_without_pod => set(
            ctype::PROGRESSING,
            true,
            reason::WAITING_FOR_SEED,
            "the seed EtcdMember exists; waiting for its Pod".into(),
        ),
        (_, Phase::Progressing) => {
            // Keep the reason the target was locked with. WaitingForSeed only ever interrupts
            // a bootstrap, which works towards the initial snapshot: it is not a spec change.
            let previous = old
                .conditions
                .iter()
                .find(|c| c.type_ == ctype::PROGRESSING && c.status == "True")
                .map(|c| match c.reason.as_str() {
                    reason::WAITING_FOR_SEED => reason::INITIAL_SNAPSHOT.to_string(),
                    other => other.to_string(),
                });
            let why = plan
                .locked_because
                .map(str::to_string)
                .or(previous)
                .unwrap_or_else(|| reason::SPEC_CHANGED.to_string());
            let message = match facts.template_rollout {
                Some((done, total))
                    if facts.formed
                        && plan.observed.replicas as usize == facts.live_members as usize =>
                {
                    let paused = if facts.rollout_paused {
                        format!(
                            "; paused by {}=true: no further member is restarted until it is \
                             removed",
                            api::labels::ROLLOUT_PAUSED_ANNOTATION
                        )
                    } else {
                        String::new()
                    };
                    format!(
                        "rolling the members to the new spec (version {}) one at a time, \
                         followers first and the leader last after moving leadership: {done} of \
                         {total} members updated{paused}",
                        plan.observed.version
                    )
                }
                _ => format!(
                    "reconciling towards {} members of version {} ({} ready)",
                    target, plan.observed.version, ready
                ),
            };
            set(
                ctype::PROGRESSING,
                true,
                &why,
                format!("{message}{unschedulable_note}"),
            )
        }
        // A deadline phase always comes with its hold, handled above.
        (_, Phase::BootstrapFailed | Phase::DeadlineExceeded) => {}
    }

    // Degraded (meaningful once the cluster has formed, or when paused)
    if let Some(p) = &facts.auth_problem {
        set(ctype::DEGRADED, true, p.reason, p.message.clone());
    } else if paused {
        set(ctype::DEGRADED, false, reason::PAUSED, paused_message);
    } else if let Some(m) = id_mismatch {
        set(ctype::DEGRADED, true, reason::CLUSTER_ID_MISMATCH, m);
    } else if lost {
        set(
            ctype::DEGRADED,
            true,
            reason::ALL_MEMBERS_LOST,
            all_members_lost_message(cluster, members),
        );
    } else if formed {
        if ready_quorum < majority {
            set(
                ctype::DEGRADED,
                true,
                reason::QUORUM_LOST,
                format!(
                    "{ready_quorum} of {members} members are ready, fewer than a majority \
                     ({majority}); {}",
                    recovery_hint(cluster)
                ),
            );
        } else if ready_quorum < members {
            set(
                ctype::DEGRADED,
                true,
                reason::MEMBERS_UNHEALTHY,
                format!(
                    "{} of {members} members are not ready{unschedulable_note}",
                    members - ready_quorum
                ),
            );
        } else if let Some(note) = ghost_note {
            set(ctype::DEGRADED, true, reason::MEMBERS_UNHEALTHY, note);
        } else {
            set(
                ctype::DEGRADED,
                false,
                reason::QUORUM_HEALTHY,
                format!("all {members} members are ready{joining_note}"),
            );
        }
    }

    EtcdClusterStatus {
        ready_members: ready,
        selector: Some(labels::cluster_selector(&cluster.name_any())),
        cluster_id,
        cluster_token: Some(
            old.cluster_token
                .clone()
                .unwrap_or_else(|| cluster_token(cluster)),
        ),
        auth_enabled: old.auth_enabled,
        observed: Some(plan.observed.clone()),
        progress_deadline: plan.progress_deadline.map(Time),
        broken_members: facts.broken_members,
        quorum_lost_since: quorum_lost_since(
            old.quorum_lost_since.as_ref(),
            conditions.iter().find(|c| c.type_ == ctype::AVAILABLE),
            now,
        ),
        observed_generation: generation,
        conditions,
        // Etcd's own view of each member, replaced by `publish` from the members' answers.
        members: old.members.clone(),
        leader: old.leader.clone(),
    }
}

#[cfg(test)]
mod tests;
