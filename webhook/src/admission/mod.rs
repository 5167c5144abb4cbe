//! Admission decisions: reading an `admission.k8s.io/v1` AdmissionReview, and answering it for
//! the validating (`/validate`) and mutating (`/mutate`) webhooks. Pure — no I/O, no clock —
//! so every verdict is unit-testable; the HTTP edge is in [`crate::routes`].
//!
//! What gets judged:
//! - `EtcdCluster` / `EtcdSnapshot` / `EtcdDefrag` / `EtcdRecovery` / `EtcdSnapshotSchedule` / `EtcdDefragPolicy`
//!   CREATE and UPDATE: every rule of [`api::validate`] (for the schedules, also the cron
//!   expression and time zone parsed as the controller parses them), denied
//!   with the rendered list of violations (HTTP 200 review, `allowed: false`, status 422
//!   `Invalid`). An UPDATE that leaves `spec` as it was (metadata, finalizers) is allowed, as
//!   the apiserver's validation ratcheting does, so an object stored under older rules can
//!   still be labelled or finalized. Status subresource writes are not judged (no spec change).
//! - `EtcdMember` CREATE, UPDATE and status UPDATE: only the controller's user. A member's
//!   status is as much the operator's as its spec: `status.isVoter=false` makes its finalizer
//!   skip the etcd MemberRemove. Anyone else may only remove finalizers from a member that
//!   already has `metadata.deletionTimestamp`, and nothing else: the escape hatch of an admin
//!   clearing a deletion stuck on a finalizer. On a live member the same removal would let a
//!   later delete skip etcd MemberRemove, so it is denied. One more exception, the aenix
//!   migration ([`migration_adoption`]): a member of `--migration-groups` (cluster admins) may
//!   create an EtcdMember that carries `etcd-operator.cozystack.io/adopted-from`, and write the
//!   first status of such a member (while it has no `status.memberID`), and nothing else.
//! - `EtcdCluster` CREATE with `etcd-operator.cozystack.io/adopted-from` (the migration's): no
//!   defaults are added; its spec describes Pods that already run.
//! - `EtcdMember` DELETE ([`deletion`]): only the controller, kube-controller-manager's garbage
//!   collector and namespace controller, the users of `--member-deletion-allowed-users`, or a
//!   member carrying `etcd-operator.cozystack.io/allow-deletion: "true"` (the break-glass, which
//!   anyone may set or remove on a member: the one EtcdMember update open to all).
//! - Other DELETEs, CONNECT and kinds of other groups: allowed untouched.
//!
//! This file holds the two entry points, [`validate`] and [`mutate`], and what both use; reading
//! the review is in `review.rs`, judging the specs in `spec.rs`, the EtcdMember guard in
//! `member.rs`, the EtcdMember deletion protection in `deletion.rs`.

pub mod deletion;
mod member;
mod review;
mod spec;

use api::labels::ADOPTED_FROM_ANNOTATION;
use api::v1alpha2::GROUP;
use kube::core::admission::{AdmissionResponse, Operation};
use kube::core::{DynamicObject, Status};

use crate::config::Policy;
use crate::defaulting;

pub use review::{
    operation_name, parse_review, unreadable_denial, Request, ReviewError, REVIEW_API_VERSION,
    REVIEW_KIND,
};

use deletion::guard_member_deletion;
use member::guard_member;
use spec::validate_spec;

fn ours(req: &Request) -> bool {
    req.kind.group == GROUP
}

/// The name to show in messages: the object's, or its generateName while it has none.
fn display_name(req: &Request, object: &DynamicObject) -> String {
    if !req.name.is_empty() {
        return req.name.clone();
    }
    match (&object.metadata.name, &object.metadata.generate_name) {
        (Some(name), _) if !name.is_empty() => name.clone(),
        (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}<generated>"),
        _ => String::new(),
    }
}

fn deny(mut response: AdmissionResponse, status: Status) -> AdmissionResponse {
    response.allowed = false;
    response.result = status;
    response
}

/// A request the webhook cannot judge (a malformed review): denied, so nothing slips through.
fn deny_malformed(response: AdmissionResponse, message: String) -> AdmissionResponse {
    deny(
        response,
        Status::failure(&message, "BadRequest").with_code(400),
    )
}

/// The kinds whose spec is judged by `api::validate` (the EtcdMember guard is separate).
pub const SPEC_KINDS: &[&str] = &[
    "EtcdCluster",
    "EtcdSnapshot",
    "EtcdDefrag",
    "EtcdRecovery",
    "EtcdSnapshotSchedule",
    "EtcdDefragPolicy",
];

/// The validating webhook.
pub fn validate(req: &Request, policy: &Policy) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    if !ours(req) || req.operation == Operation::Connect {
        return response;
    }
    match (req.kind.kind.as_str(), &req.operation) {
        ("EtcdMember", Operation::Delete) => guard_member_deletion(req, response, policy),
        (kind, Operation::Create | Operation::Update) if SPEC_KINDS.contains(&kind) => {
            validate_spec(req, response, policy)
        }
        ("EtcdMember", Operation::Create | Operation::Update) => {
            guard_member(req, response, policy)
        }
        _ => response,
    }
}

/// The migration's marker: a non-empty [`ADOPTED_FROM_ANNOTATION`].
fn adopted(object: &DynamicObject) -> bool {
    object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ADOPTED_FROM_ANNOTATION))
        .is_some_and(|uid| !uid.is_empty())
}

/// The mutating webhook: rejects invalid writes of the [`SPEC_KINDS`] with the full violation list, then defaults EtcdCluster CREATE; everything else passes unchanged.
///
/// The rejection lives here as well as in [`validate`] because the apiserver runs mutating
/// webhooks, then the CRD's schema and CEL rules, and only then validating webhooks: an object
/// CEL rejects never reaches `/validate`, so only `/mutate` can give its author the rich message.
pub fn mutate(req: &Request, policy: &Policy) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    if !ours(req) || req.sub_resource.is_some() {
        return response;
    }
    if SPEC_KINDS.contains(&req.kind.kind.as_str())
        && matches!(req.operation, Operation::Create | Operation::Update)
    {
        let verdict = validate_spec(req, response.clone(), policy);
        if !verdict.allowed {
            return verdict;
        }
    }
    if req.kind.kind != "EtcdCluster" || req.operation != Operation::Create {
        return response;
    }
    let Some(object) = &req.object else {
        return response;
    };
    if adopted(object) {
        // The migration's EtcdCluster describes Pods that already run, and its status.observed
        // is this very spec: a default added here would be a spec change the adopted members
        // were never built with.
        return response;
    }
    let Some(spec) = object.data.get("spec") else {
        return response;
    };
    let name = if req.name.is_empty() {
        object.metadata.name.clone().unwrap_or_default()
    } else {
        req.name.clone()
    };
    let defaults = defaulting::cluster_defaults(&name, spec, policy);
    let mut response = response;
    if !defaults.warnings.is_empty() {
        response.warnings = Some(defaults.warnings);
    }
    if defaults.patch.0.is_empty() {
        return response;
    }
    match response.clone().with_patch(defaults.patch) {
        Ok(patched) => patched,
        Err(err) => {
            tracing::error!(error = %err, "cannot serialize the defaulting patch; admitting without defaults");
            response
        }
    }
}

#[cfg(test)]
mod tests;
