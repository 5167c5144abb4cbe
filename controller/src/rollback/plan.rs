//! What `etcd-operator prepare-rollback` changes so that the reference operator can run a cluster
//! this operator ran (pure: objects in, patches out). What the reference reads, from its
//! controllers:
//!
//! - a member's data PVC `data-<member>` must carry an EtcdMember owner reference with the
//!   member's UID, or it refuses the member ("PVC … is owned by a different EtcdMember; awaiting
//!   GC before reuse") and no membership step of the cluster completes. It sets that reference
//!   with `controller: true, blockOwnerDeletion: true`, so deleting the member takes the PVC;
//! - a member's Pod likewise, by an EtcdMember owner reference with the member's UID;
//! - a pending or seed EtcdMember must be controlled by its EtcdCluster (a controller owner
//!   reference with the cluster's UID);
//! - `spec.options.autoCompactionRetention` (cluster, `status.observed`, member) is a string in
//!   its schema: an integer there makes each of its writes to the object fail validation.
//!
//! Ours differs in two places the reference cannot cope with: data PVCs carry the member-UID
//! annotation instead of an owner reference, and EtcdClusters the cleanup finalizer, which only
//! our controller removes. The member finalizer (`member-cleanup`) is the reference's own and
//! stays; our annotations stay (the reference ignores them, and ours needs them back if the user
//! returns).

use std::collections::BTreeSet;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember, EtcdOptions, RECOVERY_ANNOTATION};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};

use crate::builders::pvc::{claim_of, ClaimOwner};

/// One cluster and what belongs to it, as read.
#[derive(Clone, Debug)]
pub struct Facts {
    pub cluster: EtcdCluster,
    /// The EtcdMembers labelled with the cluster's name.
    pub members: Vec<EtcdMember>,
    /// The PVCs labelled with the cluster's name.
    pub claims: Vec<PersistentVolumeClaim>,
    /// The Pods labelled with the cluster's name.
    pub pods: Vec<Pod>,
}

/// Our controller's leader Lease, as read.
#[derive(Clone, Debug)]
pub struct LeaseFacts {
    /// `<namespace>/<name>`.
    pub name: String,
    pub holder: Option<String>,
    /// Seconds since `spec.renewTime`.
    pub renewed_ago: Option<i64>,
    pub duration_seconds: Option<i32>,
}

/// Which API an object is written through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    EtcdCluster,
    /// The EtcdCluster's status subresource.
    EtcdClusterStatus,
    EtcdMember,
    PersistentVolumeClaim,
    Pod,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::EtcdCluster => "EtcdCluster",
            Kind::EtcdClusterStatus => "EtcdCluster status",
            Kind::EtcdMember => "EtcdMember",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::Pod => "Pod",
        }
    }
}

/// One object's change: a merge patch, guarded by the resourceVersion read (a concurrent write
/// fails the patch instead of being reverted; a re-run plans from a fresh read).
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub kind: Kind,
    pub name: String,
    /// What the patch does, one line each, for the dry run and the report.
    pub what: Vec<String>,
    pub patch: Value,
}

/// Why nothing may be changed, with the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub object: String,
    pub field: String,
    pub problem: String,
    pub fix: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}: {}. Fix: {}",
            self.object, self.field, self.problem, self.fix
        )
    }
}

/// The changes of one cluster, what is left as it is (said, not changed), and what stops the
/// command.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub changes: Vec<Change>,
    pub notes: Vec<String>,
    pub refusals: Vec<Refusal>,
}

/// A controller owner reference to `owner`, as the reference's `SetControllerReference` writes
/// it.
fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let mut r = owner.controller_owner_ref(&())?;
    r.block_owner_deletion = Some(true);
    Some(r)
}

/// `owners` with `want` as the controller, or `None` when it already is. `Err` names the other
/// controller when one is there (an object has at most one; we never take it away).
fn with_controller(
    owners: &[OwnerReference],
    want: &OwnerReference,
) -> Result<Option<Vec<OwnerReference>>, String> {
    if owners
        .iter()
        .any(|o| o.uid == want.uid && o.controller == Some(true))
    {
        return Ok(None);
    }
    if let Some(other) = owners
        .iter()
        .find(|o| o.controller == Some(true) && o.uid != want.uid)
    {
        return Err(format!("{} {} (uid {})", other.kind, other.name, other.uid));
    }
    let mut kept: Vec<OwnerReference> = owners
        .iter()
        .filter(|o| o.uid != want.uid)
        .cloned()
        .collect();
    kept.push(want.clone());
    Ok(Some(kept))
}

/// The metadata part of a patch: the object's resourceVersion as the guard.
fn guarded(obj: &impl Resource) -> serde_json::Map<String, Value> {
    let mut meta = serde_json::Map::new();
    if let Some(rv) = obj.meta().resource_version.as_deref() {
        meta.insert("resourceVersion".into(), json!(rv));
    }
    meta
}

/// `autoCompactionRetention` as the reference's schema takes it (a string), when it is an
/// integer.
fn retention_as_string(options: Option<&EtcdOptions>) -> Option<String> {
    match options?.auto_compaction_retention.as_ref()? {
        IntOrString::Int(n) => Some(n.to_string()),
        IntOrString::String(_) => None,
    }
}

fn retention_patch(value: &str) -> Value {
    json!({"options": {"autoCompactionRetention": value}})
}

/// The changes that let the reference operator run `facts`' cluster.
pub fn build(facts: &Facts) -> Plan {
    let mut plan = Plan::default();
    let cluster = &facts.cluster;
    let name = cluster.name_any();
    let object = format!("EtcdCluster {name}");
    if cluster.meta().deletion_timestamp.is_some() {
        // Our cleanup finalizer is what deletes the data PVCs of a deleted cluster (they have no
        // owner); taking it away now would leave them behind.
        plan.refusals.push(Refusal {
            object,
            field: "metadata.deletionTimestamp".into(),
            problem: "the cluster is being deleted".into(),
            fix: "let our operator finish the deletion (start it again), then roll back".into(),
        });
        return plan;
    }
    if let Some(recovery) = cluster.annotations().get(RECOVERY_ANNOTATION) {
        // The reference knows no EtcdRecovery: a cluster held half-way (members dormant, a
        // survivor forced into a new cluster) would stay as it is.
        plan.refusals.push(Refusal {
            object,
            field: format!("metadata.annotations[{RECOVERY_ANNOTATION}]"),
            problem: format!("EtcdRecovery {recovery} holds the cluster"),
            fix: format!(
                "start our operator and let the recovery finish (kubectl get etcdrecovery {recovery}), \
                 or delete it, then roll back"
            ),
        });
        return plan;
    }
    let Some(cluster_ref) = controller_ref(cluster) else {
        plan.refusals.push(Refusal {
            object,
            field: "metadata.uid".into(),
            problem: "the cluster as read has no UID".into(),
            fix: "run the command against the API server (not a file)".into(),
        });
        return plan;
    };

    plan.changes.extend(cluster_changes(cluster));
    let mut claimed = BTreeSet::new();
    let mut members: Vec<&EtcdMember> = facts
        .members
        .iter()
        .filter(|m| m.spec.cluster_name == name)
        .collect();
    members.sort_by_key(|m| m.name_any());
    for member in members {
        let member_name = member.name_any();
        claimed.insert(labels::pvc_name(&member_name));
        member_changes(member, &cluster_ref, &mut plan);
        let Some(member_ref) = controller_ref(member) else {
            continue;
        };
        if !member.spec.storage.is_memory() {
            let claim_name = labels::pvc_name(&member_name);
            if let Some(claim) = facts.claims.iter().find(|c| c.name_any() == claim_name) {
                claim_changes(claim, member, &member_ref, &mut plan);
            }
        }
        if let Some(pod) = facts.pods.iter().find(|p| p.name_any() == member_name) {
            pod_changes(pod, member, &member_ref, &mut plan);
        }
    }
    for claim in &facts.claims {
        let claim_name = claim.name_any();
        if !claimed.contains(&claim_name)
            && claim.owner_references().is_empty()
            && claim.meta().deletion_timestamp.is_none()
        {
            plan.notes.push(format!(
                "PersistentVolumeClaim {claim_name} belongs to no EtcdMember of {name} (left by a \
                 member deleted without its data, or by an earlier cluster of the name): the \
                 reference ignores it. Delete it once its data is not needed: kubectl delete pvc \
                 {claim_name}"
            ));
        }
    }
    plan
}

fn cluster_changes(cluster: &EtcdCluster) -> Vec<Change> {
    let name = cluster.name_any();
    let mut out = Vec::new();
    let mut what = Vec::new();
    let mut patch = json!({"metadata": guarded(cluster)});
    let finalizers = cluster.finalizers();
    if finalizers
        .iter()
        .any(|f| f == labels::CLUSTER_CLEANUP_FINALIZER)
    {
        let kept: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != labels::CLUSTER_CLEANUP_FINALIZER)
            .collect();
        patch["metadata"]["finalizers"] = json!(kept);
        what.push(format!(
            "remove finalizer {} (only our controller removes it: under the reference a deleted \
             cluster would stay Terminating)",
            labels::CLUSTER_CLEANUP_FINALIZER
        ));
    }
    if let Some(value) = retention_as_string(cluster.spec.options.as_ref()) {
        patch["spec"] = retention_patch(&value);
        what.push(format!(
            "spec.options.autoCompactionRetention: {value} → \"{value}\" (a string in the reference's schema)"
        ));
    }
    if !what.is_empty() {
        out.push(Change {
            kind: Kind::EtcdCluster,
            name: name.clone(),
            what,
            patch,
        });
    }
    let observed = cluster.status.as_ref().and_then(|s| s.observed.as_ref());
    if let Some(value) = retention_as_string(observed.and_then(|o| o.options.as_ref())) {
        out.push(Change {
            kind: Kind::EtcdClusterStatus,
            name,
            what: vec![format!(
                "status.observed.options.autoCompactionRetention: {value} → \"{value}\""
            )],
            patch: json!({"status": {"observed": retention_patch(&value)}}),
        });
    }
    out
}

fn member_changes(member: &EtcdMember, cluster_ref: &OwnerReference, plan: &mut Plan) {
    let name = member.name_any();
    let mut what = Vec::new();
    let mut patch = json!({"metadata": guarded(member)});
    match with_controller(member.owner_references(), cluster_ref) {
        Ok(None) => {}
        Ok(Some(owners)) => {
            patch["metadata"]["ownerReferences"] = json!(owners);
            what.push(format!(
                "controller owner reference to EtcdCluster {} (the reference refuses a pending \
                 member its cluster does not control)",
                cluster_ref.name
            ));
        }
        Err(other) => plan.notes.push(format!(
            "EtcdMember {name} is controlled by {other}, not by EtcdCluster {}: left as it is; \
             the reference refuses to use it as a pending or seed member",
            cluster_ref.name
        )),
    }
    if let Some(value) = retention_as_string(member.spec.options.as_ref()) {
        patch["spec"] = retention_patch(&value);
        what.push(format!(
            "spec.options.autoCompactionRetention: {value} → \"{value}\""
        ));
    }
    if !what.is_empty() {
        plan.changes.push(Change {
            kind: Kind::EtcdMember,
            name,
            what,
            patch,
        });
    }
}

fn claim_changes(
    claim: &PersistentVolumeClaim,
    member: &EtcdMember,
    member_ref: &OwnerReference,
    plan: &mut Plan,
) {
    let name = claim.name_any();
    let member_name = member.name_any();
    match claim_of(claim, member) {
        // Already under the member's owner reference, which is all the reference checks.
        ClaimOwner::OwnedByReference => {}
        ClaimOwner::Member | ClaimOwner::Reattach => {
            match with_controller(claim.owner_references(), member_ref) {
                Ok(None) => {}
                Ok(Some(owners)) => {
                    let mut patch = json!({"metadata": guarded(claim)});
                    patch["metadata"]["ownerReferences"] = json!(owners);
                    plan.changes.push(Change {
                        kind: Kind::PersistentVolumeClaim,
                        name,
                        what: vec![format!(
                            "owner reference to EtcdMember {member_name} (controller, \
                             blockOwnerDeletion), as the reference creates it: it refuses a \
                             member whose PVC has none"
                        )],
                        patch,
                    });
                }
                Err(other) => plan.notes.push(format!(
                    "PersistentVolumeClaim {name} is controlled by {other}: left as it is; the \
                     reference refuses EtcdMember {member_name} until it is gone"
                )),
            }
        }
        ClaimOwner::Foreign => plan.notes.push(format!(
            "PersistentVolumeClaim {name} is not EtcdMember {member_name}'s (another member's \
             UID in {}, or another owner): left as it is; the reference, like ours, refuses the \
             member until it is gone",
            labels::MEMBER_UID_ANNOTATION
        )),
    }
}

fn pod_changes(pod: &Pod, member: &EtcdMember, member_ref: &OwnerReference, plan: &mut Plan) {
    let name = pod.name_any();
    let owned = pod
        .owner_references()
        .iter()
        .any(|o| o.kind == "EtcdMember" && Some(&o.uid) == member.meta().uid.as_ref());
    if owned {
        return;
    }
    match with_controller(pod.owner_references(), member_ref) {
        Ok(None) => {}
        Ok(Some(owners)) => {
            let mut patch = json!({"metadata": guarded(pod)});
            patch["metadata"]["ownerReferences"] = json!(owners);
            plan.changes.push(Change {
                kind: Kind::Pod,
                name,
                what: vec![format!(
                    "owner reference to EtcdMember {} (the reference refuses a member whose Pod \
                     has none)",
                    member.name_any()
                )],
                patch,
            });
        }
        Err(other) => plan.notes.push(format!(
            "Pod {name} is controlled by {other}: left as it is; the reference refuses \
             EtcdMember {} until it is gone",
            member.name_any()
        )),
    }
}

/// Slack on the Lease's duration: a clock a few seconds off must not pass a live holder.
const LEASE_SLACK_SECONDS: i64 = 5;

/// Refuses while our controller's leader Lease is held and renewed: a running controller would
/// put back what the command takes away (the finalizer, the UID marks in place of owner
/// references) and keep acting beside the reference.
pub fn controller_running(lease: &LeaseFacts) -> Option<Refusal> {
    let holder = lease.holder.as_deref().filter(|h| !h.is_empty())?;
    let ago = lease.renewed_ago?;
    let duration = i64::from(lease.duration_seconds.unwrap_or(15));
    (ago <= duration + LEASE_SLACK_SECONDS).then(|| Refusal {
        object: format!("Lease {}", lease.name),
        field: "spec.holderIdentity".into(),
        problem: format!(
            "our controller {holder} holds it (renewed {ago}s ago): it is still running and \
             would undo these changes"
        ),
        fix: "stop it first (helm uninstall keeps the CRDs; or kubectl scale deployment \
              etcd-operator --replicas=0 in its namespace), wait until its Pods are gone, run \
              again"
            .into(),
    })
}

/// The plan as a person reads it.
pub fn render(cluster: &str, plan: &Plan) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "EtcdCluster {cluster}:");
    for r in &plan.refusals {
        let _ = writeln!(out, "  refused: {r}");
    }
    for c in &plan.changes {
        for w in &c.what {
            let _ = writeln!(out, "  {} {}: {w}", c.kind.as_str(), c.name);
        }
    }
    for n in &plan.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    if plan.refusals.is_empty() && plan.changes.is_empty() {
        let _ = writeln!(out, "  nothing to change: ready for the reference operator");
    }
    out
}

#[cfg(test)]
mod tests;
