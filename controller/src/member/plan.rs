//! The member planner: from what the member controller observed — the EtcdMember, its Pod and
//! its data claim — to the one step of this reconcile and the `Ready` condition to show. Pure;
//! the reconciler around it only reads, performs the step and writes status.

use api::conditions::reason;
use api::labels;

/// The member's data claim, as far as the next step cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A Memory member: its data lives in the Pod's tmpfs.
    NotUsed,
    Missing,
    /// Exists but not Bound; `immediate` when its StorageClass binds at once (a Pod created now
    /// would be unschedulable until it binds).
    Pending {
        immediate: bool,
    },
    Bound,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberFacts {
    pub name: String,
    /// `spec.initialCluster` is empty: not added to etcd yet.
    pub pending: bool,
    pub dormant: bool,
    /// `status.podUID`: the member had a Pod (for a Memory member, its data lived there).
    pub had_pod: bool,
    /// `status.pvcName`: this controller created the member's claim before.
    pub claim_recorded: bool,
    pub claim: Option<Claim>,
    /// The member's own Pod (by name, owned by the member).
    pub pod: Option<PodFacts>,
    pub member_id_known: bool,
    /// An EtcdRecovery restores a snapshot into this member in place
    /// ([`api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION`] with `spec.restore`): its data comes
    /// from the snapshot, not from its old volume.
    pub restoring_in_place: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    pub ready: bool,
    pub deleting: bool,
    /// Why the Pod must start again, if it must: its member asks for another CA bundle
    /// ([`labels::TRUST_BUNDLE_ANNOTATION`], loaded by etcd only at start-up) or was given another
    /// template ([`labels::TEMPLATE_HASH_ANNOTATION`]: a new version, resources, options, ...).
    pub restart_for: Option<&'static str>,
}

/// What to do this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to create or delete.
    None,
    /// A dormant member's Pod goes; its PVC stays.
    DeletePod,
    CreateClaim,
    CreatePod,
    /// Keep the running Pod's labels and annotations in step; read etcd's version when Ready.
    SyncPod,
    /// Delete the Pod so that it starts again (with the member's data) under a new spec; the
    /// next reconcile creates it.
    RestartPod,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberPlan {
    pub step: Step,
    /// `Ready`: status, reason, message.
    pub ready: (bool, &'static str, String),
}

fn not_ready(step: Step, why: String) -> MemberPlan {
    MemberPlan {
        step,
        ready: (false, reason::POD_NOT_READY, why),
    }
}

impl MemberFacts {
    fn memory(&self) -> bool {
        self.claim == Some(Claim::NotUsed)
    }
}

pub fn plan(f: &MemberFacts) -> MemberPlan {
    let pvc = labels::pvc_name(&f.name);
    if f.pending {
        return not_ready(
            Step::None,
            "the member is being added to etcd; its Pod is created once it has an initial cluster"
                .into(),
        );
    }
    if f.dormant {
        let alive = f.pod.is_some_and(|p| !p.deleting);
        return MemberPlan {
            step: if alive { Step::DeletePod } else { Step::None },
            ready: (
                false,
                reason::PAUSED,
                format!(
                    "the cluster is paused; the member is dormant and its data is kept on PVC {pvc}"
                ),
            ),
        };
    }
    // A member restored in place gets its data from the snapshot, as a new one-member cluster:
    // a fresh volume is what the restore fills.
    if f.claim == Some(Claim::Missing) && f.claim_recorded && !f.restoring_in_place {
        // Its data went with the claim. Started again on a new, empty volume it would come back
        // under its old etcd member ID with an empty Raft log, and could acknowledge entries it
        // never stored: the cluster controller removes it from etcd and adds a new member.
        return not_ready(
            Step::None,
            format!(
                "PVC {pvc} is gone with the member's data; the member is not restarted on an \
                 empty volume, it is removed from etcd and replaced"
            ),
        );
    }
    match (f.pod, f.claim) {
        (None, Some(Claim::Missing)) => not_ready(
            Step::CreateClaim,
            format!("creating PVC {pvc} for the member's data"),
        ),
        (None, Some(Claim::Pending { immediate: true })) => {
            // A Pod created before its Immediate-binding claim is bound is unschedulable and
            // lands in the scheduler's back-off; the claim's binding wakes this reconcile.
            not_ready(
                Step::None,
                format!("waiting for PVC {pvc} to be bound before creating the Pod"),
            )
        }
        (None, Some(Claim::NotUsed)) if f.had_pod => not_ready(
            Step::None,
            "the Pod and its in-memory data are gone; the member is being replaced".into(),
        ),
        (None, _) => not_ready(
            Step::CreatePod,
            "the Pod was created and is starting".into(),
        ),
        (Some(p), _) if p.restart_for.is_some() && !p.deleting && !f.memory() => not_ready(
            Step::RestartPod,
            format!(
                "restarting Pod {} for {}; the member keeps its data and member ID",
                f.name,
                p.restart_for.unwrap_or_default()
            ),
        ),
        (Some(p), _) if !p.ready => {
            not_ready(Step::SyncPod, format!("Pod {} is not ready", f.name))
        }
        (Some(_), _) if !f.member_id_known => MemberPlan {
            step: Step::SyncPod,
            ready: (
                false,
                reason::DISCOVERING_MEMBER_ID,
                "the Pod is ready; waiting for etcd to report the member ID".into(),
            ),
        },
        (Some(_), _) => MemberPlan {
            step: Step::SyncPod,
            ready: (true, reason::POD_READY, format!("Pod {} is ready", f.name)),
        },
    }
}

/// What the cleanup finalizer does for a member being deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Farewell {
    /// The whole cluster is going: there is nothing to remove the member from, and waiting for
    /// a voter would deadlock the deletion. Its PVC is the cluster's cleanup finalizer's.
    ClusterGoing,
    /// The deletion is meant (the operator's own, or the break-glass annotation): MemberRemove
    /// against the remaining voters, then the PVC, whose data can never serve again.
    RemoveFromEtcd,
    /// Deleted without the annotation (member-deletion protection off, a GitOps prune, a CRD
    /// replacement): the member keeps its place in etcd and its PVC, and the cluster
    /// controller re-creates it on its data. Never a MemberRemove the operator did not decide:
    /// a prune of every member would otherwise remove them one after another.
    Keep,
}

/// The finalizer's decision from who asked: `cluster_going` (the EtcdCluster is gone or being
/// deleted), `allowed` (the member carries `allow-deletion: "true"` and no operator mark for
/// another UID: [`api::labels::deletion_meant`]), `memory` (its data lives
/// in the Pod's tmpfs and goes with it whatever is decided: keeping its place in etcd keeps
/// nothing).
pub fn farewell(cluster_going: bool, allowed: bool, memory: bool) -> Farewell {
    match (cluster_going, allowed || memory) {
        (true, _) => Farewell::ClusterGoing,
        (false, true) => Farewell::RemoveFromEtcd,
        (false, false) => Farewell::Keep,
    }
}

/// Where the MemberRemove of a meant deletion goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remover {
    /// No other voter (the last member, or a cluster that never formed): nothing to remove it
    /// from, and nothing says its data is a copy: its PVC stays.
    NoOtherVoter,
    /// Through these other voters, whose Pods are Ready.
    Voters(Vec<String>),
    /// No other voter is Ready and this EtcdRecovery holds the cluster: it stopped them and
    /// rebuilds the membership from one member, which then takes the MemberRemove (its etcd no
    /// longer lists this member). The finalizer waits for it, without an error.
    AwaitRecovery(String),
    /// No other voter is Ready: the finalizer waits (an error: the cluster is unavailable).
    /// Dropping it now would leave a ghost member in etcd that still counts towards quorum.
    Unavailable,
}

/// From the other voters (name, whether its Pod is Ready) and the EtcdRecovery that holds the
/// cluster, if one does ([`api::v1alpha2::RECOVERY_ANNOTATION`]).
pub fn remover(others: &[(String, bool)], held_by: Option<&str>) -> Remover {
    if others.is_empty() {
        return Remover::NoOtherVoter;
    }
    let ready: Vec<String> = others
        .iter()
        .filter(|(_, ready)| *ready)
        .map(|(name, _)| name.clone())
        .collect();
    match (ready.is_empty(), held_by) {
        (false, _) => Remover::Voters(ready),
        // The recovery stopped the voters on purpose; it starts the one it rebuilds from, whose
        // etcd no longer lists this member. Never a MemberRemove without a voter's list, and
        // never the finalizer dropped while etcd may still list the member: it waits.
        (true, Some(recovery)) => Remover::AwaitRecovery(recovery.to_string()),
        (true, None) => Remover::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_deleted_during_a_recovery_waits_for_the_rebuilt_member_not_on_an_error() {
        let stopped = [("c-b".to_string(), false), ("c-c".to_string(), false)];
        // The recovery stopped every voter: the finalizer waits for the member it rebuilds the
        // cluster from, without an error.
        assert_eq!(
            remover(&stopped, Some("c-recovery")),
            Remover::AwaitRecovery("c-recovery".into())
        );
        // Once that member runs and is Ready, it takes the MemberRemove (its etcd no longer
        // lists this member: nothing is removed, the PVC goes as for any meant deletion).
        let rebuilt = [("c-b".to_string(), true), ("c-c".to_string(), false)];
        assert_eq!(
            remover(&rebuilt, Some("c-recovery")),
            Remover::Voters(vec!["c-b".into()])
        );
        // Without a recovery, no Ready voter is an unavailable cluster: wait, as an error.
        assert_eq!(remover(&stopped, None), Remover::Unavailable);
        // No other voter at all: nothing to remove it from, its PVC stays.
        assert_eq!(remover(&[], Some("c-recovery")), Remover::NoOtherVoter);
        assert_eq!(remover(&[], None), Remover::NoOtherVoter);
    }

    #[test]
    fn only_a_meant_deletion_removes_the_member_from_etcd() {
        assert_eq!(farewell(true, true, false), Farewell::ClusterGoing);
        assert_eq!(farewell(true, false, true), Farewell::ClusterGoing);
        assert_eq!(farewell(false, true, false), Farewell::RemoveFromEtcd);
        // A stray delete keeps the member's place in etcd and its data.
        assert_eq!(farewell(false, false, false), Farewell::Keep);
        // A Memory member's data went with its Pod: keeping its place would keep nothing.
        assert_eq!(farewell(false, false, true), Farewell::RemoveFromEtcd);
    }

    fn running(claim: Claim) -> MemberFacts {
        MemberFacts {
            name: "c-a".into(),
            had_pod: true,
            claim_recorded: claim != Claim::NotUsed,
            claim: Some(claim),
            pod: Some(PodFacts {
                ready: true,
                deleting: false,
                restart_for: None,
            }),
            member_id_known: true,
            ..Default::default()
        }
    }

    #[test]
    fn a_lost_claim_is_recreated_only_for_a_member_restored_in_place() {
        let mut f = running(Claim::Missing);
        f.pod = None;
        assert_eq!(
            plan(&f).step,
            Step::None,
            "never restarted on an empty volume"
        );
        f.restoring_in_place = true;
        assert_eq!(plan(&f).step, Step::CreateClaim, "the restore fills it");
    }

    #[test]
    fn a_new_member_gets_its_claim_then_waits_for_binding_then_its_pod() {
        let mut f = running(Claim::Missing);
        f.pod = None;
        f.had_pod = false;
        f.claim_recorded = false;
        assert_eq!(plan(&f).step, Step::CreateClaim);
        f.claim = Some(Claim::Pending { immediate: true });
        let p = plan(&f);
        assert_eq!(p.step, Step::None);
        assert!(p.ready.2.contains("bound"), "{}", p.ready.2);
        // WaitForFirstConsumer binds only once a Pod uses the claim: the Pod comes first.
        f.claim = Some(Claim::Pending { immediate: false });
        assert_eq!(plan(&f).step, Step::CreatePod);
        f.claim = Some(Claim::Bound);
        assert_eq!(plan(&f).step, Step::CreatePod);
    }

    #[test]
    fn a_member_whose_claim_is_gone_gets_neither_claim_nor_pod() {
        let mut f = running(Claim::Missing);
        f.pod = None;
        let p = plan(&f);
        assert_eq!(p.step, Step::None);
        assert!(!p.ready.0);
        assert!(p.ready.2.contains("data-c-a is gone"), "{}", p.ready.2);
    }

    #[test]
    fn a_memory_member_that_lost_its_pod_is_not_restarted() {
        let mut f = running(Claim::NotUsed);
        f.pod = None;
        assert_eq!(plan(&f).step, Step::None);
        f.had_pod = false;
        assert_eq!(plan(&f).step, Step::CreatePod);
    }

    #[test]
    fn pending_and_dormant_members_run_no_pod() {
        let mut f = running(Claim::Bound);
        f.pending = true;
        f.pod = None;
        assert_eq!(plan(&f).step, Step::None);
        let mut f = running(Claim::Bound);
        f.dormant = true;
        let p = plan(&f);
        assert_eq!(p.step, Step::DeletePod);
        assert_eq!(p.ready.1, reason::PAUSED);
        assert!(p.ready.2.contains("data-c-a"), "{}", p.ready.2);
        f.pod = Some(PodFacts {
            ready: false,
            deleting: true,
            restart_for: None,
        });
        assert_eq!(plan(&f).step, Step::None);
    }

    #[test]
    fn ready_needs_the_pod_ready_and_the_member_id_known() {
        let mut f = running(Claim::Bound);
        assert_eq!(plan(&f).ready.1, reason::POD_READY);
        f.member_id_known = false;
        assert_eq!(plan(&f).ready.1, reason::DISCOVERING_MEMBER_ID);
        f.pod = Some(PodFacts::default());
        assert_eq!(
            plan(&f).ready,
            (false, reason::POD_NOT_READY, "Pod c-a is not ready".into())
        );
    }

    #[test]
    fn a_pod_started_with_another_ca_bundle_is_restarted_once_then_recreated() {
        let mut f = running(Claim::Bound);
        f.pod = Some(PodFacts {
            ready: true,
            deleting: false,
            restart_for: Some("the new CA bundle"),
        });
        let p = plan(&f);
        assert_eq!(p.step, Step::RestartPod);
        assert!(
            !p.ready.0 && p.ready.2.contains("CA bundle"),
            "{:?}",
            p.ready
        );
        // Being deleted: not deleted again; once it is gone, a new Pod.
        f.pod = Some(PodFacts {
            ready: false,
            deleting: true,
            restart_for: Some("the new CA bundle"),
        });
        assert_ne!(plan(&f).step, Step::RestartPod);
        f.pod = None;
        assert_eq!(plan(&f).step, Step::CreatePod);
        // A Memory member is never restarted in place: it would come back empty.
        let mut f = running(Claim::NotUsed);
        f.pod = Some(PodFacts {
            ready: true,
            deleting: false,
            restart_for: Some("the new CA bundle"),
        });
        assert_eq!(plan(&f).step, Step::SyncPod);
    }
}
