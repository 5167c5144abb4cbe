//! The cluster planner: from what was observed (the EtcdCluster, its members and their Pods, and
//! etcd's own member list) to the single next step and the status to write. Pure; every crash
//! window of bootstrap, scale-up and scale-down is a state this function recognises and resumes.
//!
//! The locking pattern: the first reconcile that sees a new spec copies it into
//! `status.observed` with a deadline; until that target is reached (or the deadline passes) only
//! `observed` is acted on. `observed` holds every field members are built from (replicas,
//! version, storage, resources, options, affinity, topology spread, pull secrets, additional
//! metadata), so an edit of any of them made mid-flight waits like a replicas edit does. A deadline that passes before the cluster ID is latched is terminal
//! (`BootstrapFailed`); after it, the cluster parks (`DeadlineExceeded`) until the spec is edited.

use api::conditions::reason;
use api::v1alpha2::{EtcdCluster, EtcdMemberSpec, MemberTls, ObservedSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::naming;

pub use super::view::{DataHome, MemberView, PodView};

pub use crate::etcd::{EtcdMemberInfo, EtcdView};

#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub cluster: &'a EtcdCluster,
    pub members: Vec<MemberView>,
    pub etcd: EtcdView,
    pub now: Timestamp,
    /// The cluster asks for cert-manager Certificates but cert-manager is not installed.
    pub cert_manager_missing: bool,
    /// A Secret of `spec.tls` is missing or unusable (the message names it).
    pub tls_secret_problem: Option<String>,
    /// That Secret belongs to an operator-emitted Certificate cert-manager has not issued yet.
    pub waiting_for_certificate: bool,
    /// Root auth stands in the way: etcd demands a login the spec does not configure, or
    /// refuses the configured one (see [`AuthProblem`]).
    pub auth_problem: Option<AuthProblem>,
    /// The fingerprint of the CA bundles the TLS Secrets hold now ([`crate::tls::trust_bundle`]);
    /// `None` when etcd verifies against no Secret's CA.
    pub trust_bundle: Option<String>,
    /// The CAs of those bundles and the certificates the members are presented now
    /// ([`crate::tls::CaTrust`]), to judge a CA change by ([`super::ca_set`]).
    pub ca_trust: Option<crate::tls::CaTrust>,
    /// etcd's leader (member ID), when asked: only while members are to be restarted.
    pub leader: Option<u64>,
    /// The operator's `--etcd-image-repository`: what every member is to run. `None` leaves
    /// the repositories as they are (tests of other behaviour).
    pub image_repository: Option<String>,
    /// How long a member's Pod may stay unschedulable before the member is replaced
    /// (`--replace-broken-members-after`); `None`: never (off, or the cluster opted out).
    pub replace_broken_after: Option<SignedDuration>,
    /// The seed's `restore` init container is running now (downloading and restoring the
    /// snapshot): the source it restores from (`s3://bucket/key`, `pvc://claim/path`).
    pub restoring: Option<String>,
}

/// Why the operator cannot act on a cluster for root-auth reasons; no membership change is made
/// until it is resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthProblem {
    /// `AuthRequiredNotConfigured` or `AuthCredentialsRejected`.
    pub reason: &'static str,
    pub message: String,
}

/// An etcd member that no EtcdMember of this cluster describes (matched by peer URL): left
/// behind by a finalizer removed by hand, or added to etcd by someone else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ghost {
    pub id: u64,
    pub peer_url: String,
    pub is_learner: bool,
}

/// The one thing to do this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the seed EtcdMember (bootstrap=true, initialCluster set after its name is known).
    CreateSeed,
    /// Create an EtcdMember for the next scale-up step (pending until added to etcd).
    CreateMember,
    /// Set a created member's `spec.initialCluster`; for a non-seed member, first
    /// `MemberAddAsLearner(peer_url)` unless etcd already lists that peer URL (crash recovery).
    CompletePending {
        member: String,
        peer_url: String,
        already_added: bool,
        /// The `--initial-cluster` value once the member is in etcd's list (for a seed: itself).
        initial_cluster_after_add: String,
    },
    /// The seed is alone in etcd: record the cluster ID and the seed's member ID.
    LatchClusterId {
        cluster_id: u64,
        seed: String,
        member_id: u64,
    },
    Promote {
        member: String,
        member_id: u64,
    },
    /// Delete an EtcdMember; its finalizer runs MemberRemove.
    DeleteMember {
        member: String,
        why: DeleteReason,
    },
    SetDormant {
        member: String,
        dormant: bool,
    },
    /// `MemberRemove` of an etcd member no EtcdMember describes.
    RemoveGhost(Ghost),
    /// Record the current trust bundle on a member (and its Pod) that never recorded one: it
    /// was created before the operator tracked them, and is taken to run the current one.
    RecordTrustBundle {
        member: String,
        trust_bundle: String,
    },
    /// Record the operator's etcd image repository on a member (and its Pod) that never recorded
    /// one: it was created before the operator tracked it (or adopted), and is taken to run it.
    RecordImageRepository {
        member: String,
        repository: String,
    },
    /// Record on a member's Pod the template hash of its member (a Pod created by an older
    /// operator version, or adopted): it runs that template, and is not restarted for lack of a
    /// record.
    RecordTemplateHash {
        member: String,
        template_hash: String,
    },
    /// Give the member the current trust bundle and the locked target's template: the member
    /// controller restarts its Pod, which then runs them (a PVC member keeps its data and member
    /// ID).
    RollMember {
        member: String,
        /// The trust bundle to record, when it changes.
        trust_bundle: Option<String>,
        /// The member's template differs from the target's: patch it.
        template: bool,
        /// The etcd image repository to record, when it changes.
        image_repository: Option<String>,
        /// The last member to restart: the leader, after leadership was moved away from it.
        last: bool,
    },
    /// Hand leadership from `from` to `to` (etcd member ID `to_id`) before `from` is restarted.
    MoveLeader {
        from: String,
        to: String,
        to_id: u64,
    },
    /// Nothing to do now; a watch event or the periodic health check brings the next step.
    Wait(String),
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    ScaleDown,
    Pause,
    MemoryPodLost,
    CrashLooping,
    /// The member's PVC is gone.
    DataLost,
    /// A member adopted from the aenix operator, replaced by a native one on request
    /// ([`api::labels::REPLACE_ADOPTED_ANNOTATION`]).
    ReplaceAdopted,
    /// A Memory member runs an old trust bundle or template: it cannot restart without losing
    /// its data, so it is replaced by a new member.
    Rollout,
    /// The member's Pod could not be scheduled for longer than `--replace-broken-members-after`
    /// (its Node is gone with its local volume, its PVC is lost, ...).
    Unschedulable,
    /// The member's Node has been NotReady for longer than `--replace-broken-members-after` and
    /// its Pod is stuck Terminating there.
    NodeNotReady,
}

/// Crash-loop threshold for self-heal.
pub const CRASH_LOOP_RESTARTS: i32 = 5;
/// A crash loop counts only while its last crash is this recent: a lifetime restart count from
/// long ago says nothing about the member now.
pub const CRASH_LOOP_RECENT: SignedDuration = SignedDuration::from_mins(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Working towards `observed`.
    Progressing,
    /// `observed` is reached.
    Reconciled,
    BootstrapFailed,
    DeadlineExceeded,
}

/// The planner's verdict: the locked target, the deadline, what to do, and the facts the status
/// writer needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub observed: ObservedSpec,
    pub progress_deadline: Option<Timestamp>,
    /// Why `observed` was (re)locked this reconcile, if it was.
    pub locked_because: Option<&'static str>,
    pub phase: Phase,
    pub action: Action,
    pub facts: Facts,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    pub formed: bool,
    pub ready_members: i32,
    /// Voters as etcd lists them (or, when etcd cannot be asked, as the members' status says).
    pub voters: i32,
    /// Voters whose Pod is Ready: quorum is a majority of `voters` among these.
    pub ready_voters: i32,
    pub live_members: i32,
    /// Members that cannot serve: Pod missing, not Ready, crash-looping, or data lost.
    pub broken_members: i32,
    /// etcd members no EtcdMember describes.
    pub ghosts: Vec<Ghost>,
    /// `(latched, answered)`: etcd answers with another cluster ID than `status.clusterID`.
    pub cluster_id_mismatch: Option<(String, String)>,
    /// Members whose version differs from the locked target: `(count, target)`. Rolling
    /// upgrades are not implemented yet, so the change waits.
    pub version_pending: Option<(i32, String)>,
    pub cert_manager_missing: bool,
    /// A Secret of `spec.tls` is missing or unusable: nothing is created (a Pod could not
    /// mount it, or etcd could not start with it) and etcd cannot be dialed.
    pub tls_secret_problem: Option<String>,
    /// The problem is a cert-manager Secret not issued yet (a wait, not a fault).
    pub waiting_for_certificate: bool,
    pub auth_problem: Option<AuthProblem>,
    pub paused: bool,
    pub dormant_pvc: Option<String>,
    pub seed_without_pod: bool,
    pub etcd_error: Option<String>,
    /// Fields of the spec this operator version cannot act on yet (see [`unsupported_fields`]).
    pub unsupported: Vec<&'static str>,
    /// The seed's `restore` init container failed (the agent's message); set by the reconciler
    /// before the cluster has formed.
    pub restore_failure: Option<String>,
    /// The seed is restoring from this source now ([`Observed::restoring`], before the cluster
    /// has formed).
    pub restoring: Option<String>,
    /// Members run another trust bundle than the Secrets hold: `(done, total)`.
    pub trust_rollout: Option<(i32, i32)>,
    /// Members run another template than the locked target (a version upgrade, new resources,
    /// options, ...): `(done, total)`.
    pub template_rollout: Option<(i32, i32)>,
    /// Members run another etcd image repository than the operator's flag: `(done, total)`.
    pub image_rollout: Option<(i32, i32)>,
    /// A rollout is held by [`api::labels::ROLLOUT_PAUSED_ANNOTATION`].
    pub rollout_paused: bool,
    /// `(member, the scheduler's message)`: the first member whose Pod cannot be scheduled.
    pub unschedulable: Option<(String, String)>,
    /// A Memory member that a rollout would replace although no other voter holds the data
    /// (a 1-replica Memory cluster): replacing it would delete the only copy, so the rollout is
    /// refused (see [`memory_rollout_unsafe`]).
    pub memory_rollout_unsafe: Option<String>,
    /// The Secrets hold a certificate that running members would refuse (its CA is not among
    /// those they loaded): no member is restarted for the new CA bundles. The message names the
    /// Secret and the safe procedure ([`super::ca_set::unsafe_change`]).
    pub unsafe_ca_change: Option<String>,
}

/// Parts of the v1alpha2 API that this operator version accepts (they are valid, and
/// immutable after create) but does not implement yet. Bootstrapping such a cluster without them
/// would silently give the user less than asked, so the cluster is held before its seed is
/// created. Everything in v1alpha2 is implemented today (restore, TLS from the user's own
/// Secrets and from cert-manager, root auth); the hold stays for fields a later API adds.
pub fn unsupported_fields(_spec: &api::v1alpha2::EtcdClusterSpec) -> Vec<&'static str> {
    Vec::new()
}

/// The spec was edited after the cluster parked at its deadline: the `Progressing` condition
/// that says `DeadlineExceeded` was written for an older generation.
fn edited_since_parked(cluster: &EtcdCluster) -> bool {
    let parked_at = cluster.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| {
                c.type_ == api::conditions::cluster::PROGRESSING
                    && c.reason == reason::DEADLINE_EXCEEDED
            })
            .map(|c| c.observed_generation)
    });
    match (parked_at, cluster.metadata.generation) {
        (Some(Some(parked)), Some(now)) => now > parked,
        _ => false,
    }
}

/// The target the spec asks for now: a snapshot of every field members are built from.
pub fn target_of(cluster: &EtcdCluster) -> ObservedSpec {
    ObservedSpec::of(&cluster.spec, cluster.metadata.generation)
}

/// Any latched field that differs makes a new target (not only replicas or version).
fn same_target(a: &ObservedSpec, b: &ObservedSpec) -> bool {
    a.same_target(b)
}

/// The spec of the next EtcdMember, built from the locked target (`status.observed`), not from
/// the live spec: a member created while an edit waits gets the target being worked on. `tls` is
/// the member view of `spec.tls`, which cannot change after create (so the live spec is the
/// latched one).
pub fn member_spec(
    cluster_name: &str,
    target: &ObservedSpec,
    cluster_token: String,
    seed: bool,
    tls: Option<MemberTls>,
) -> EtcdMemberSpec {
    EtcdMemberSpec {
        cluster_name: cluster_name.to_string(),
        version: target.version.clone(),
        storage: target.storage(),
        resources: target.resources.clone(),
        affinity: target.affinity.clone(),
        topology_spread_constraints: target.topology_spread_constraints.clone(),
        additional_metadata: target.additional_metadata.clone(),
        options: target.options.clone(),
        image_pull_secrets: target.image_pull_secrets.clone(),
        bootstrap: seed,
        initial_cluster: String::new(),
        cluster_token,
        dormant: false,
        tls,
        restore: None,
        replicas: None,
    }
}

/// The latched target as this operator reads it. A snapshot written by an older operator
/// version holds only replicas and version; that version built members from the live spec for
/// everything else, so the rest is read from the spec as it is now (the next status write
/// records the whole snapshot).
fn latched_target(
    status_observed: Option<&ObservedSpec>,
    spec_target: &ObservedSpec,
) -> Option<ObservedSpec> {
    status_observed.map(|current| {
        if current.is_legacy() {
            ObservedSpec {
                replicas: current.replicas,
                version: current.version.clone(),
                generation: current.generation,
                ..spec_target.clone()
            }
        } else {
            current.clone()
        }
    })
}

fn live(members: &[MemberView]) -> impl Iterator<Item = &MemberView> {
    members.iter().filter(|m| !m.deleting)
}

fn is_ready(m: &MemberView) -> bool {
    m.pod.as_ref().is_some_and(|p| p.ready)
}

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

/// etcd members that no EtcdMember (live or being deleted) describes, by peer URL or name.
fn ghosts(
    etcd_members: &[EtcdMemberInfo],
    members: &[MemberView],
    peer_url: &dyn Fn(&str) -> String,
) -> Vec<Ghost> {
    let urls: Vec<String> = members.iter().map(|m| peer_url(&m.name)).collect();
    etcd_members
        .iter()
        .filter(|e| {
            !e.peer_urls.iter().any(|u| urls.contains(u))
                && (e.name.is_empty() || !members.iter().any(|m| m.name == e.name))
        })
        .map(|e| Ghost {
            id: e.id,
            peer_url: e.peer_urls.first().cloned().unwrap_or_default(),
            is_learner: e.is_learner,
        })
        .collect()
}

/// Whether a voter that is not serving can be removed from etcd now: the voters that do serve
/// must stay a majority of the current voters (etcd refuses a removal that leaves too few
/// started members, and a stricter rule costs only a wait).
fn can_remove_down_voter(ready_voters: i32, voters: i32) -> bool {
    voters > 1 && ready_voters > voters / 2
}

/// A member crash-looping now: waiting in CrashLoopBackOff, restarted often, lately, and not
/// for lack of memory (a replacement would be OOM-killed the same way).
fn crash_looping(p: &PodView, now: Timestamp) -> bool {
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
fn data_out_of_reach(
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

/// Whether the locked target is reached.
fn reached(target: &ObservedSpec, members: &[MemberView], etcd: &EtcdView, formed: bool) -> bool {
    let live: Vec<_> = live(members).collect();
    if members.iter().any(|m| m.deleting) {
        return false;
    }
    if target.replicas == 0 {
        return live.is_empty() && !formed
            || live.len() == 1 && live[0].dormant && live[0].pod.is_none();
    }
    let any_learner = match etcd {
        EtcdView::Members { members, .. } => {
            members.iter().any(|m| m.is_learner) || members.len() != live.len()
        }
        _ => true,
    };
    let template = crate::template::target_hash(target);
    formed
        && !any_learner
        && live.len() == target.replicas as usize
        && live
            .iter()
            .all(|m| !m.dormant && !m.pending && m.pod.as_ref().is_some_and(|p| p.ready))
        && live.iter().all(|m| runs_template(m, &template))
}

/// Which etcd member (if any) is this CR, matched by peer URL (a learner has no name yet).
fn etcd_entry<'a>(etcd: &'a EtcdView, peer_url: &str) -> Option<&'a EtcdMemberInfo> {
    match etcd {
        EtcdView::Members { members, .. } => members
            .iter()
            .find(|m| m.peer_urls.iter().any(|u| u == peer_url)),
        _ => None,
    }
}

/// `--initial-cluster` for a member joining now: every member etcd lists (named by our CR
/// naming, since a just-added learner has no etcd name yet) plus the joiner.
pub fn initial_cluster(
    etcd_members: &[EtcdMemberInfo],
    joiner: &str,
    joiner_peer_url: &str,
) -> String {
    let mut entries: Vec<String> = etcd_members
        .iter()
        .filter(|m| !m.peer_urls.iter().any(|u| u == joiner_peer_url))
        .filter_map(|m| {
            let url = m.peer_urls.first()?;
            let name = if m.name.is_empty() {
                member_name_from_peer_url(url)?
            } else {
                m.name.clone()
            };
            Some(format!("{name}={url}"))
        })
        .collect();
    entries.push(format!("{joiner}={joiner_peer_url}"));
    entries.sort();
    entries.join(",")
}

/// `http(s)://<member>.<cluster>.<ns>.svc:2380` → `<member>`.
fn member_name_from_peer_url(url: &str) -> Option<String> {
    let host = url.split("://").nth(1)?.split(':').next()?;
    host.split('.').next().map(str::to_string)
}

pub fn plan(o: &Observed<'_>) -> Plan {
    let cluster = o.cluster;
    let status = cluster.status.clone().unwrap_or_default();
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let peer_tls = cluster.peer_https();
    let formed = status.cluster_id.is_some();
    let spec_target = target_of(cluster);
    let deadline_in =
        SignedDuration::from_secs(i64::from(cluster.spec.progress_deadline_seconds.max(1)));

    // --- locking ---
    let mut locked_because = None;
    let mut deadline = status.progress_deadline.as_ref().map(|t| t.0);
    let latched = latched_target(status.observed.as_ref(), &spec_target);
    let observed = match &latched {
        None => {
            locked_because = Some(reason::INITIAL_SNAPSHOT);
            deadline = Some(o.now + deadline_in);
            spec_target.clone()
        }
        Some(current) if !same_target(current, &spec_target) => {
            let was_reached = reached(current, &o.members, &o.etcd, formed);
            let expired = deadline.is_some_and(|d| d <= o.now);
            // No deadline running means the current target was reached earlier and the cluster
            // is being repaired, not driven towards a user's edit: a repair must not hold the
            // user's next edit (it may be the scale-down that drops the broken member).
            let repairing = formed && deadline.is_none();
            if was_reached || repairing {
                locked_because = Some(reason::SPEC_CHANGED);
                deadline = Some(o.now + deadline_in);
                spec_target.clone()
            } else if expired && formed {
                locked_because = Some(reason::RETRY_AFTER_DEADLINE);
                deadline = Some(o.now + deadline_in);
                spec_target.clone()
            } else {
                // Mid-flight edits are noticed, not acted on, until the target is reached.
                current.clone()
            }
        }
        Some(current)
            if formed
                && deadline.is_some_and(|d| d <= o.now)
                && edited_since_parked(cluster)
                && !reached(current, &o.members, &o.etcd, formed) =>
        {
            // Any spec edit is the intervention signal (the runbook: "edit spec to something
            // sane"), not only one that changes the target: fixing resources or the deadline
            // itself must also resume a parked cluster.
            locked_because = Some(reason::RETRY_AFTER_DEADLINE);
            deadline = Some(o.now + deadline_in);
            spec_target.clone()
        }
        Some(current) => current.clone(),
    };

    let mut facts = Facts {
        formed,
        ..Default::default()
    };
    let live_members: Vec<&MemberView> = live(&o.members).collect();
    facts.live_members = live_members.len() as i32;
    facts.ready_members = live_members
        .iter()
        .filter(|m| !m.dormant && is_ready(m))
        .count() as i32;
    let peer_url_of = |member: &str| {
        let service = o
            .members
            .iter()
            .find(|m| m.name == member)
            .and_then(|m| m.service.as_deref())
            .unwrap_or(&name);
        naming::peer_url(member, service, &namespace, peer_tls)
    };
    match o.etcd.members() {
        Some(members) => {
            facts.voters = members.iter().filter(|m| !m.is_learner).count() as i32;
            facts.ready_voters = live_members
                .iter()
                .filter(|m| is_ready(m))
                .filter(|m| {
                    etcd_entry(&o.etcd, &peer_url_of(&m.name)).is_some_and(|e| !e.is_learner)
                })
                .count() as i32;
            facts.ghosts = ghosts(members, &o.members, &peer_url_of);
        }
        None => {
            facts.voters = live_members.iter().filter(|m| m.voter).count() as i32;
            facts.ready_voters = live_members
                .iter()
                .filter(|m| m.voter && is_ready(m))
                .count() as i32;
        }
    }
    facts.unschedulable = live_members.iter().find_map(|m| {
        let (_, message) = m.pod.as_ref()?.unschedulable.as_ref()?;
        Some((m.name.clone(), message.clone()))
    });
    facts.broken_members = live_members
        .iter()
        .filter(|m| !m.dormant && !m.pending && (m.data_lost || !is_ready(m)))
        .count() as i32;
    if let (EtcdView::Members { cluster_id, .. }, Some(latched)) = (&o.etcd, &status.cluster_id) {
        let answered = crate::etcd::format_id(*cluster_id);
        if &answered != latched {
            facts.cluster_id_mismatch = Some((latched.clone(), answered));
        }
    }
    facts.cert_manager_missing = o.cert_manager_missing;
    facts.tls_secret_problem = o.tls_secret_problem.clone();
    facts.waiting_for_certificate = o.tls_secret_problem.is_some() && o.waiting_for_certificate;
    facts.auth_problem = o.auth_problem.clone();
    if let EtcdView::Unreachable(e) = &o.etcd {
        facts.etcd_error = Some(e.clone());
    }
    facts.paused = observed.replicas == 0;
    let behind = live_members
        .iter()
        .filter(|m| m.version != observed.version)
        .count() as i32;
    if behind > 0 && observed.replicas > 0 {
        facts.version_pending = Some((behind, observed.version.clone()));
    }
    facts.dormant_pvc = live_members
        .iter()
        .find(|m| m.dormant && !m.memory)
        .map(|m| api::labels::pvc_name(&m.name));
    facts.trust_rollout = trust_rollout(o.trust_bundle.as_deref(), &live_members);
    facts.template_rollout = template_rollout(&observed, &live_members);
    facts.image_rollout = image_rollout(o.image_repository.as_deref(), &live_members);
    facts.rollout_paused = (facts.trust_rollout.is_some()
        || facts.template_rollout.is_some()
        || facts.image_rollout.is_some())
        && cluster
            .annotations()
            .get(api::labels::ROLLOUT_PAUSED_ANNOTATION)
            .is_some_and(|v| v == "true");

    facts.memory_rollout_unsafe = formed
        .then(|| memory_rollout_unsafe(o, &observed, &live_members, &peer_url_of))
        .flatten();
    facts.unsafe_ca_change = formed
        .then(|| {
            super::ca_set::unsafe_change(
                o.trust_bundle.as_deref(),
                o.ca_trust.as_ref(),
                &live_members,
            )
        })
        .flatten();

    // While cert-manager is missing or has not issued the Secrets yet, nothing is attempted:
    // the deadline must not run out before the first member could be created (cert-manager
    // may be installed, or an issuer fixed, long after the cluster). It is kept at least half
    // its length ahead, so the status is rewritten only now and then.
    let held_for_cert_manager = !formed
        && o.members.is_empty()
        && (o.cert_manager_missing
            || (o.tls_secret_problem.is_some() && o.waiting_for_certificate));
    // Likewise while the seed's restore init container runs: downloading and restoring a large
    // snapshot legitimately takes longer than the deadline, and giving up on it would leave a
    // terminal BootstrapFailed for a restore that was about to finish. A restore that fails is
    // reported (RestoreFailed); while it waits to be retried (back-off) the deadline runs.
    let restoring = if formed { None } else { o.restoring.clone() };
    let held = held_for_cert_manager || restoring.is_some();
    if held && deadline.is_some_and(|d| d.duration_since(o.now) < deadline_in / 2) {
        deadline = Some(o.now + deadline_in);
    }
    facts.restoring = restoring;
    let is_reached = reached(&observed, &o.members, &o.etcd, formed);
    // The deadline bounds an attempt to reach a target the user asked for; once reached it is
    // cleared. A later divergence (a member lost or hung) is repaired without a deadline and
    // shows in Available/Degraded: parking a serving cluster as DeadlineExceeded would stop
    // self-heal and report it unavailable while a majority serves. The runbook's forced
    // deadline (a past `status.progressDeadline`) still parks it.
    if is_reached {
        deadline = None;
    }
    // A refused rollout is not an attempt that runs out: it waits for the user (scale up, or
    // revert). No deadline runs, so the next edit (the scale to 3) is taken at once, like an
    // edit of a cluster under repair, instead of waiting behind a target that cannot be reached.
    if facts.memory_rollout_unsafe.is_some() || facts.unsafe_ca_change.is_some() {
        deadline = None;
    }
    let expired = !is_reached && deadline.is_some_and(|d| d <= o.now);

    let mut out = Plan {
        observed: observed.clone(),
        progress_deadline: deadline,
        locked_because,
        phase: if is_reached {
            Phase::Reconciled
        } else {
            Phase::Progressing
        },
        action: Action::None,
        facts,
    };
    if !formed {
        out.facts.unsupported = unsupported_fields(&cluster.spec);
        if !out.facts.unsupported.is_empty() {
            out.action = Action::Wait(format!(
                "not bootstrapping: this operator version does not implement {} yet",
                out.facts.unsupported.join(", ")
            ));
            return out;
        }
    }
    if expired {
        out.phase = if formed {
            Phase::DeadlineExceeded
        } else {
            Phase::BootstrapFailed
        };
        out.action = Action::Wait("the progress deadline passed; edit the spec to retry".into());
        return out;
    }
    if o.cert_manager_missing {
        out.action = Action::Wait("cert-manager is not installed".into());
        return out;
    }
    if let Some(problem) = &o.tls_secret_problem {
        out.action = Action::Wait(format!("waiting for a usable TLS Secret: {problem}"));
        return out;
    }
    if let Some(problem) = &o.auth_problem {
        out.action = Action::Wait(format!("{}: {}", problem.reason, problem.message));
        return out;
    }
    if let Some((latched, answered)) = &out.facts.cluster_id_mismatch {
        // Whatever answers is not the cluster this EtcdCluster formed: changing its membership
        // could only do harm.
        out.action = Action::Wait(format!(
            "etcd answers with cluster ID {answered}, not the latched {latched}; no membership change is made"
        ));
        return out;
    }

    let peer_url = peer_url_of;

    // One membership change at a time: a member being removed blocks everything else.
    if let Some(m) = o.members.iter().find(|m| m.deleting) {
        out.action = Action::Wait(format!("waiting for member {} to be removed", m.name));
        return out;
    }

    if !formed {
        out.action = plan_bootstrap(o, &observed, &live_members, &peer_url, &mut out.facts);
        return out;
    }

    out.action = plan_formed(o, &observed, &live_members, &peer_url, &out.facts);
    out
}

fn plan_bootstrap(
    o: &Observed<'_>,
    target: &ObservedSpec,
    live: &[&MemberView],
    peer_url: &dyn Fn(&str) -> String,
    facts: &mut Facts,
) -> Action {
    if target.replicas == 0 {
        return Action::Wait("cluster declared paused from the start; not bootstrapping".into());
    }
    let Some(seed) = live.iter().find(|m| m.bootstrap) else {
        if live.is_empty() {
            return Action::CreateSeed;
        }
        return Action::Wait(
            "members exist but none is the seed; waiting for them to be removed".into(),
        );
    };
    if seed.pending {
        let url = peer_url(&seed.name);
        return Action::CompletePending {
            member: seed.name.clone(),
            peer_url: url.clone(),
            already_added: true,
            initial_cluster_after_add: format!("{}={url}", seed.name),
        };
    }
    if seed.pod.is_none() {
        facts.seed_without_pod = true;
        return Action::Wait(format!(
            "waiting for bootstrap member to form cluster: the seed {} has no Pod yet",
            seed.name
        ));
    }
    match &o.etcd {
        EtcdView::Members {
            cluster_id,
            members,
        } => {
            let url = peer_url(&seed.name);
            match members.as_slice() {
                [only] if only.name == seed.name || only.peer_urls.contains(&url) => {
                    Action::LatchClusterId {
                        cluster_id: *cluster_id,
                        seed: seed.name.clone(),
                        member_id: only.id,
                    }
                }
                _ => Action::Wait(format!(
                    "the seed {} reports {} members; the cluster ID is latched only when the seed is alone",
                    seed.name,
                    members.len()
                )),
            }
        }
        _ => Action::Wait(format!(
            "waiting for bootstrap member to form cluster: the seed {} is not reachable yet",
            seed.name
        )),
    }
}

fn plan_formed(
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

    // 1. Finish a half-done scale-up step (crash between create / MemberAddAsLearner / patch).
    if let Some(m) = live.iter().find(|m| m.pending) {
        let url = peer_url(&m.name);
        let already_added = etcd_entry(&o.etcd, &url).is_some();
        return Action::CompletePending {
            member: m.name.clone(),
            initial_cluster_after_add: initial_cluster(etcd_members, &m.name, &url),
            peer_url: url,
            already_added,
        };
    }

    // 2. Promote a learner whose Pod is Ready.
    for m in live {
        if let Some(entry) = etcd_entry(&o.etcd, &peer_url(&m.name)) {
            if entry.is_learner && m.pod.as_ref().is_some_and(|p| p.ready) {
                return Action::Promote {
                    member: m.name.clone(),
                    member_id: entry.id,
                };
            }
        }
    }

    // 3. Ghosts: etcd members nothing describes. A learner never counts towards quorum; a voter
    // is removed only while the serving voters keep a majority without it. The counts are the
    // facts already gathered from etcd's list (this branch runs only when etcd answered).
    let (voters, ready_voters) = (facts.voters, facts.ready_voters);
    if let Some(g) = facts
        .ghosts
        .iter()
        .find(|g| g.is_learner || can_remove_down_voter(ready_voters, voters))
    {
        return Action::RemoveGhost(g.clone());
    }

    // 4. Self-heal.
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

    // 5. Pause / resume.
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

    // 6. Scale, one member at a time, each step gated on every member being a Ready voter.
    let want = target.replicas as usize;
    if live.len() < want {
        let all_ready_voters = live.iter().all(|m| m.pod.as_ref().is_some_and(|p| p.ready))
            && etcd_members.iter().all(|e| !e.is_learner);
        if !all_ready_voters {
            return Action::Wait(
                "waiting for existing members to become Ready before next scale-up step".into(),
            );
        }
        return Action::CreateMember;
    }
    if live.len() > want {
        if let Some(v) = scale_down_victim(&o.members) {
            return Action::DeleteMember {
                member: v.name.clone(),
                why: DeleteReason::ScaleDown,
            };
        }
    }

    // 7. A new trust bundle or template: restart the members one at a time.
    if let Some(action) = plan_rollout(o, target, live, etcd_members, peer_url, want, facts) {
        return action;
    }

    // 8. On request, replace adopted members by native ones: one at a time, and only while the
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

/// `m`'s Pod started with another trust bundle than `want`. A member without a Pod (a new one, or
/// one whose Pod is being created again) starts with the bundle its member records.
fn pod_stale(m: &MemberView, want: &str) -> bool {
    m.pod
        .as_ref()
        .is_some_and(|p| p.trust_bundle.as_deref() != Some(want))
}

/// Whether `m` runs (or will start with) the trust bundle `want`.
fn runs_trust_bundle(m: &MemberView, want: &str) -> bool {
    m.trust_bundle.as_deref() == Some(want) && !pod_stale(m, want)
}

/// `m`'s Pod records another template than its member's (a Pod without a record runs its
/// member's: see [`Action::RecordTemplateHash`]).
fn pod_behind_template(m: &MemberView) -> bool {
    m.pod
        .as_ref()
        .and_then(|p| p.template_hash.as_ref())
        .is_some_and(|h| *h != m.template_hash)
}

/// Whether `m` runs (or will start with) the template whose hash is `want`.
fn runs_template(m: &MemberView, want: &str) -> bool {
    m.template_hash == want && !pod_behind_template(m)
}

/// `m` has a Pod and etcd does not run in it: the Pod cannot be scheduled, or the etcd container
/// waits in `CrashLoopBackOff`.
fn pod_not_running(m: &MemberView) -> bool {
    m.pod
        .as_ref()
        .is_some_and(|p| !p.ready && (p.unschedulable.is_some() || p.crash_loop_backoff))
}

/// `(members running the current trust bundle, members)` while some do not; members that never
/// recorded one are taken to run it (see [`Action::RecordTrustBundle`]).
fn trust_rollout(want: Option<&str>, live: &[&MemberView]) -> Option<(i32, i32)> {
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
fn pod_behind_repository(m: &MemberView) -> bool {
    m.pod
        .as_ref()
        .and_then(|p| p.image_repository.as_ref())
        .is_some_and(|r| Some(r) != m.image_repository.as_ref())
}

/// `(members running the image repository `want`, members)` while some do not; members that
/// never recorded one are taken to run it (see [`Action::RecordImageRepository`]).
fn image_rollout(want: Option<&str>, live: &[&MemberView]) -> Option<(i32, i32)> {
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
fn template_rollout(target: &ObservedSpec, live: &[&MemberView]) -> Option<(i32, i32)> {
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
fn told(m: &MemberView, template: &str, trust: Option<&str>, repository: Option<&str>) -> bool {
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
fn plan_rollout(
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
                || (o.ca_trust.is_some() && super::ca_set::set_unrecorded(m, want))
        }) {
            // A member that never recorded one (adopted, or from an older operator) whose etcd
            // started before the Secrets' CA last changed may run an older bundle: recorded as
            // unknown, it is rolled like a member behind.
            let trust_bundle = if m.trust_bundle.is_none()
                && super::ca_set::started_before_ca_change(m, o.ca_trust.as_ref())
            {
                super::ca_set::UNKNOWN
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

#[cfg(test)]
mod tests;
