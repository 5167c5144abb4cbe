//! The cluster planner: from what was observed (the EtcdCluster, its members and their Pods, and
//! etcd's own member list) to the single next step and the status to write. Pure; every crash
//! window of bootstrap, scale-up and scale-down is a state this function recognises and resumes.
//!
//! The locking pattern: the first reconcile that sees a new spec copies it into
//! `status.observed` with a deadline; until that target is reached (or the deadline passes) only
//! `observed` is acted on. `observed` holds every field members are built from (replicas,
//! version, storage, resources, options, affinity, topology spread, pull secrets, additional
//! metadata, tolerations, node selector, priority class), so an edit of any of them made mid-flight waits like a replicas edit does. A deadline that passes before the cluster ID is latched is terminal
//! (`BootstrapFailed`); after it, the cluster parks (`DeadlineExceeded`) until the spec is edited.

use std::collections::BTreeMap;

use api::conditions::reason;
use api::v1alpha2::{EtcdCluster, EtcdMemberSpec, MemberTls, ObservedSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::naming;

pub use super::view::{DataHome, MemberView};
pub use crate::pods::PodView;

pub use crate::etcd::{EtcdMemberInfo, EtcdView};

mod action;
mod bootstrap;
mod formed;
mod hold;
mod revision;
mod rollout;

pub use action::{Action, DeleteReason, Ghost};
use bootstrap::plan_bootstrap;
use formed::plan_formed;
pub use formed::{scale_down_victim, CRASH_LOOP_RECENT, CRASH_LOOP_RESTARTS};
pub use hold::Hold;
pub use revision::{Revision, Wanted};
pub use rollout::memory_rollout_unsafe;
use rollout::plan_rollout;

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
    /// The seed's `restore` init container failed (the agent's message, or the claim to restore
    /// from does not exist); gathered only before the cluster has formed.
    pub restore_failure: Option<String>,
    /// Data PVCs of the cluster whose member has no EtcdMember (deleted without the break-glass
    /// annotation, its PVC kept): member name → the PVC's `member-uid` mark.
    pub kept_claims: BTreeMap<String, String>,
}

/// Why the operator cannot act on a cluster for root-auth reasons; no membership change is made
/// until it is resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthProblem {
    /// `AuthRequiredNotConfigured` or `AuthCredentialsRejected`.
    pub reason: &'static str,
    pub message: String,
}

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
    /// What holds every membership change, if anything does ([`Hold::first`]): `action` then
    /// waits, and the status says why.
    pub hold: Option<Hold>,
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
    /// A member given its initial cluster whose etcd has not started yet (etcd lists it without
    /// a name): no member is added or completed until it has, and it is looked at again soon
    /// (its start is no Kubernetes event).
    pub joining: Option<String>,
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
    /// The seed's `restore` init container failed ([`Observed::restore_failure`], before the
    /// cluster has formed).
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
    /// The cluster formed and runs (replicas > 0), yet no member has a Pod and etcd did not
    /// answer: every member is gone (the status says `AllMembersLost` once it lasts).
    pub all_members_lost: bool,
    /// The EtcdRecovery that holds the cluster ([`api::v1alpha2::RECOVERY_ANNOTATION`]).
    pub recovery: Option<String>,
}

impl Facts {
    /// How far the rollout of `revision` is: `(done, total)` while members run another one.
    pub fn rollout(&self, revision: Revision) -> Option<(i32, i32)> {
        match revision {
            Revision::TrustBundle => self.trust_rollout,
            Revision::ImageRepository => self.image_rollout,
            Revision::Template => self.template_rollout,
        }
    }
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
        tolerations: target.tolerations.clone(),
        node_selector: target.node_selector.clone(),
        priority_class_name: target.priority_class_name.clone(),
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
            name: e.name.clone(),
            peer_url: e.peer_urls.first().cloned().unwrap_or_default(),
            is_learner: e.is_learner,
        })
        .collect()
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
        && live.iter().all(|m| Revision::Template.runs(m, &template))
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
            facts.joining = live_members
                .iter()
                .filter(|m| !m.pending)
                .find(|m| {
                    etcd_entry(&o.etcd, &peer_url_of(&m.name)).is_some_and(|e| e.name.is_empty())
                })
                .map(|m| m.name.clone());
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
    facts.recovery = cluster
        .annotations()
        .get(api::v1alpha2::RECOVERY_ANNOTATION)
        .filter(|v| !v.is_empty())
        .cloned();
    facts.all_members_lost = formed
        && observed.replicas > 0
        && o.etcd.members().is_none()
        && live_members.iter().all(|m| m.pod.is_none());
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
    let target_template = crate::template::target_hash(&observed);
    facts.trust_rollout = Revision::TrustBundle.progress(o.trust_bundle.as_deref(), &live_members);
    facts.template_rollout = (observed.replicas > 0)
        .then(|| Revision::Template.progress(Some(&target_template), &live_members))
        .flatten();
    facts.image_rollout =
        Revision::ImageRepository.progress(o.image_repository.as_deref(), &live_members);
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
    if !formed {
        facts.restore_failure = o.restore_failure.clone();
    }
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

    if !formed {
        facts.unsupported = unsupported_fields(&cluster.spec);
    }
    // An unsupported spec is held before the deadline is looked at: it never runs out.
    let phase = match (is_reached, expired && facts.unsupported.is_empty(), formed) {
        (true, _, _) => Phase::Reconciled,
        (false, true, true) => Phase::DeadlineExceeded,
        (false, true, false) => Phase::BootstrapFailed,
        (false, false, _) => Phase::Progressing,
    };
    let hold = Hold::first(&facts, phase);
    let mut out = Plan {
        observed: observed.clone(),
        progress_deadline: deadline,
        locked_because,
        phase,
        action: Action::None,
        hold,
        facts,
    };
    if let Some(hold) = &out.hold {
        out.action = Action::Wait(hold.wait_message());
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

#[cfg(test)]
pub(crate) mod tests;
