//! Admission decisions: reading an `admission.k8s.io/v1` AdmissionReview, and answering it for
//! the validating (`/validate`) and mutating (`/mutate`) webhooks. Pure — no I/O, no clock —
//! so every verdict is unit-testable; the HTTP edge is in [`crate::routes`].
//!
//! What gets judged:
//! - `EtcdCluster` / `EtcdSnapshot` / `EtcdDefrag` / `EtcdSnapshotSchedule` / `EtcdDefragPolicy`
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
//! - DELETE / CONNECT and kinds of other groups: allowed untouched.

use api::labels::ADOPTED_FROM_ANNOTATION;
use api::v1alpha2::{EtcdClusterSpec, GROUP};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use crate::config::Policy;
use crate::{defaulting, warnings};

pub type Request = AdmissionRequest<DynamicObject>;

pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";
pub const REVIEW_KIND: &str = "AdmissionReview";

/// Why a body is not an answerable AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the request body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error(
        "expected apiVersion {REVIEW_API_VERSION:?} and kind {REVIEW_KIND:?}, got apiVersion {api_version:?} and kind {kind:?}; register the webhook with admissionReviewVersions [v1]"
    )]
    WrongType { api_version: String, kind: String },
    #[error("the AdmissionReview has no request")]
    MissingRequest,
    #[error("the AdmissionReview request cannot be read at {path}: {message}")]
    Unreadable {
        uid: Option<String>,
        path: String,
        message: String,
    },
}

impl ReviewError {
    /// The request's uid when it could be read: then the answer is a denial in a review rather
    /// than an HTTP error.
    pub fn uid(&self) -> Option<&str> {
        match self {
            ReviewError::Unreadable { uid, .. } => uid.as_deref().filter(|u| !u.is_empty()),
            _ => None,
        }
    }

    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            ReviewError::NotJson(_) => "not_json",
            ReviewError::WrongType { .. } => "wrong_type",
            ReviewError::MissingRequest => "missing_request",
            ReviewError::Unreadable { .. } => "unreadable_request",
        }
    }
}

/// Read an AdmissionReview body. Never panics on any input.
pub fn parse_review(body: &[u8]) -> Result<Request, ReviewError> {
    // Fast path: what the apiserver sends parses straight into the typed review. Anything else
    // takes the slow path below, which exists to say precisely what is wrong.
    if let Ok(review) = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        if review.types.api_version == REVIEW_API_VERSION && review.types.kind == REVIEW_KIND {
            if let Ok(request) = review.try_into() {
                return Ok(request);
            }
        }
    }
    let value: Value = serde_json::from_slice(body).map_err(ReviewError::NotJson)?;
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default();
    if text("apiVersion") != REVIEW_API_VERSION || text("kind") != REVIEW_KIND {
        return Err(ReviewError::WrongType {
            api_version: text("apiVersion").to_string(),
            kind: text("kind").to_string(),
        });
    }
    let request = match value.get("request") {
        None | Some(Value::Null) => return Err(ReviewError::MissingRequest),
        Some(request) => request,
    };
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    let review: AdmissionReview<DynamicObject> =
        serde_path_to_error::deserialize(value).map_err(|err| ReviewError::Unreadable {
            uid,
            path: err.path().to_string(),
            message: err.inner().to_string(),
        })?;
    review.try_into().map_err(|_| ReviewError::MissingRequest)
}

/// The answer to a review that could be read only far enough to find its uid.
pub fn unreadable_denial(uid: &str, err: &ReviewError) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid(err.to_string());
    response.uid = uid.to_string();
    response.result.code = 400;
    response
}

/// `Operation` as the apiserver spells it (metrics, logs).
pub fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

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
    "EtcdSnapshotSchedule",
    "EtcdDefragPolicy",
];

/// The validating webhook.
pub fn validate(req: &Request, policy: &Policy) -> AdmissionResponse {
    let response = AdmissionResponse::from(req);
    if !ours(req) || matches!(req.operation, Operation::Delete | Operation::Connect) {
        return response;
    }
    match (req.kind.kind.as_str(), &req.operation) {
        (kind, Operation::Create | Operation::Update) if SPEC_KINDS.contains(&kind) => {
            validate_spec(req, response, policy)
        }
        ("EtcdMember", Operation::Create | Operation::Update) => {
            guard_member(req, response, policy)
        }
        _ => response,
    }
}

fn validate_spec(req: &Request, response: AdmissionResponse, policy: &Policy) -> AdmissionResponse {
    let kind = req.kind.kind.as_str();
    let Some(new) = &req.object else {
        return deny_malformed(
            response,
            format!("the {kind} review carries no object to validate"),
        );
    };
    let old = match (&req.operation, &req.old_object) {
        (Operation::Update, Some(old)) => Some(old),
        (Operation::Update, None) => {
            return deny_malformed(
                response,
                format!("the {kind} UPDATE review carries no oldObject, so the transition rules cannot be checked"),
            )
        }
        _ => None,
    };
    if req.sub_resource.is_some() {
        return response; // status (or another subresource): the spec cannot change through it
    }
    if let Some(old) = old {
        if new.data.get("spec") == old.data.get("spec") {
            return response;
        }
    }

    // The whole objects, not only `data`: the name rule reads `metadata.name`.
    let whole = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_else(|_| o.data.clone());
    let old_whole = old.map(whole);
    let violations = api::validate::object(kind, &whole(new), old_whole.as_ref());
    let mut response = if violations.is_empty() {
        response
    } else {
        let name = display_name(req, new);
        let message = api::validate::render(kind, &name, &violations);
        let details = StatusDetails {
            name,
            group: GROUP.to_string(),
            kind: kind.to_string(),
            causes: violations
                .iter()
                .map(|v| {
                    // kubectl prints a cause as `<field>: <message>`: keep the field out of the
                    // message so it is not said twice.
                    let full = v.to_string();
                    let message = full
                        .strip_prefix(&format!("{}: ", v.field))
                        .map(str::to_string)
                        .unwrap_or(full);
                    StatusCause {
                        reason: "FieldValueInvalid".to_string(),
                        message,
                        field: v.field.clone(),
                    }
                })
                .collect(),
            uid: String::new(),
            retry_after_seconds: 0,
        };
        deny(
            response,
            Status::failure(&message, "Invalid")
                .with_code(422)
                .with_details(details),
        )
    };
    if kind == "EtcdCluster" {
        if let Some(Ok(spec)) = new
            .data
            .get("spec")
            .map(|s| api::validate::parse::<EtcdClusterSpec>("spec", s))
        {
            let advice = warnings::cluster_advice(&spec, policy);
            if !advice.is_empty() {
                response.warnings = Some(advice);
            }
        }
    }
    response
}

/// The object without `list` (a metadata key) and the fields the apiserver maintains itself.
fn apart_from(object: &DynamicObject, list: &str) -> Option<Value> {
    let mut value = serde_json::to_value(object).ok()?;
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [list, "managedFields", "resourceVersion", "generation"] {
            metadata.remove(key);
        }
    }
    Some(value)
}

/// Whether the update does nothing but take entries out of one metadata list (nothing added,
/// nothing reordered, nothing else changed).
fn only_removes_from<T: PartialEq>(
    req: &Request,
    list: &str,
    of: fn(&DynamicObject) -> &[T],
) -> bool {
    let (Some(new), Some(old)) = (&req.object, &req.old_object) else {
        return false;
    };
    if req.sub_resource.is_some() {
        return false;
    }
    let (old_list, new_list) = (of(old), of(new));
    let mut remaining = old_list.iter();
    new_list.len() < old_list.len()
        && new_list.iter().all(|kept| remaining.any(|f| f == kept))
        && matches!(
            (apart_from(new, list), apart_from(old, list)),
            (Some(new), Some(old)) if new == old
        )
}

/// Whether the update does nothing but remove finalizers from a member that is being deleted
/// already. Only then is a finalizer's work moot enough to let anyone skip it.
fn only_releases_a_deleting_member(req: &Request) -> bool {
    req.old_object
        .as_ref()
        .is_some_and(|old| old.metadata.deletion_timestamp.is_some())
        && only_removes_from(req, "finalizers", |o| {
            o.metadata.finalizers.as_deref().unwrap_or_default()
        })
}

/// The identities kube-controller-manager's garbage collector writes as: with
/// `--use-service-account-credentials` (kubeadm's default) and without.
const GARBAGE_COLLECTORS: [&str; 2] = [
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
];

/// The garbage collector orphaning a member (`kubectl delete etcdcluster --cascade=orphan`)
/// removes its owner reference and nothing else; denying it would hang that deletion.
fn garbage_collector_orphans(req: &Request, user: &str) -> bool {
    GARBAGE_COLLECTORS.contains(&user)
        && only_removes_from(req, "ownerReferences", |o| {
            o.metadata.owner_references.as_deref().unwrap_or_default()
        })
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

/// `etcd-operator migrate --from-aenix --apply` run by a cluster admin: it creates an EtcdMember
/// per adopted Pod and latches its status (member ID and `isVoter` from etcd's own member list)
/// before the operator runs. Allowed only
/// - to a user in one of `policy.migration_groups` (by default the groups bound to
///   `cluster-admin`, who may delete this webhook's configuration anyway: the allowance gives
///   them nothing they could not take, and a namespace admin or editor stays refused);
/// - for a CREATE of a member carrying [`ADOPTED_FROM_ANNOTATION`] (explicit and auditable: the
///   audit log shows the user and the annotation naming the aenix cluster's UID);
/// - for a status write on such a member that has no `status.memberID` yet, keeping the
///   annotation: the first latch only. Once a status is recorded it is the operator's; the
///   migration never rewrites one, so a later `isVoter: false` cannot come through here.
///
/// Spec updates and every other write stay the controller's.
fn migration_adoption(req: &Request, policy: &Policy) -> bool {
    let admin = req
        .user_info
        .groups
        .iter()
        .flatten()
        .any(|g| policy.migration_groups.contains(g));
    if !admin {
        return false;
    }
    match (&req.operation, req.sub_resource.as_deref()) {
        (Operation::Create, None) => req.object.as_ref().is_some_and(adopted),
        (Operation::Update, Some("status")) => {
            let (Some(new), Some(old)) = (&req.object, &req.old_object) else {
                return false;
            };
            let unlatched = old
                .data
                .get("status")
                .and_then(|s| s.get("memberID"))
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            adopted(old) && adopted(new) && unlatched
        }
        _ => false,
    }
}

fn guard_member(req: &Request, response: AdmissionResponse, policy: &Policy) -> AdmissionResponse {
    let user = req.user_info.username.as_deref().unwrap_or_default();
    if user == policy.controller_username
        || only_releases_a_deleting_member(req)
        || garbage_collector_orphans(req, user)
        || migration_adoption(req, policy)
    {
        return response;
    }
    let controller = &policy.controller_username;
    let message = match (&req.operation, req.sub_resource.as_deref()) {
        (Operation::Create, _) => {
            let name = req
                .object
                .as_ref()
                .map(|o| display_name(req, o))
                .unwrap_or_default();
            format!(
                "EtcdMember {name:?} is operator-owned: only etcd-operator ({controller}) may create EtcdMembers, and {user:?} is not it. \
                 A member the operator did not create would be counted in its cluster's membership and its finalizer would act on etcd. \
                 Change the EtcdCluster's spec.replicas to add members. (`etcd-operator migrate --from-aenix --apply` creates members \
                 with the {ADOPTED_FROM_ANNOTATION} annotation, allowed to members of the groups {groups:?}.)",
                groups = policy.migration_groups
            )
        }
        (_, Some("status")) => format!(
            "EtcdMember {:?} is operator-owned: only etcd-operator ({controller}) may write EtcdMember status, and {user:?} is not it. \
             The status records what etcd reports (memberID, isVoter): with isVoter=false the member's deletion would skip the etcd MemberRemove \
             and leave a dead voter in the cluster. The operator rewrites it from etcd; nothing else should \
             (the aenix migration, run by a member of the groups {:?}, only writes the first status of a member it created).",
            req.name, policy.migration_groups
        ),
        _ => format!(
            "EtcdMember {:?} is operator-owned: only etcd-operator ({controller}) may update EtcdMembers, and {user:?} is not it. \
             Members are derived from their EtcdCluster; change the EtcdCluster (e.g. spec.replicas, spec.version) instead. \
             The operator's own updates, including status subresource updates, are allowed. \
             The one exception: to release a deletion stuck on a finalizer, anyone may remove finalizers (and change nothing else) \
             once the member has metadata.deletionTimestamp; on a live member that would let its later deletion skip the etcd MemberRemove.",
            req.name
        ),
    };
    deny(
        response,
        Status::failure(&message, "Forbidden").with_code(403),
    )
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
mod tests {
    use super::*;
    use serde_json::json;

    fn review(op: &str, kind: &str, object: Value, old: Option<Value>, user: &str) -> Request {
        let resource = format!("{}s", kind.to_lowercase());
        let body = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "7f0a1c7e-0000-4000-8000-000000000001",
                "kind": {"group": GROUP, "version": "v1alpha2", "kind": kind},
                "resource": {"group": GROUP, "version": "v1alpha2", "resource": resource},
                "name": object["metadata"]["name"].as_str().unwrap_or_default(),
                "namespace": "default",
                "operation": op,
                "userInfo": {"username": user},
                "object": object,
                "oldObject": old,
                "dryRun": false,
            }
        });
        parse_review(body.to_string().as_bytes()).unwrap()
    }

    fn cluster(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    }

    fn member(spec: Value, finalizers: &[&str]) -> Value {
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdMember",
               "metadata": {"name": "main-abcde", "namespace": "default", "finalizers": finalizers},
               "spec": spec})
    }

    const CONTROLLER: &str = crate::config::DEFAULT_CONTROLLER_USERNAME;

    #[test]
    fn webhook_rejects_storage_shrink_with_both_sizes_in_message() {
        let req = review(
            "UPDATE",
            "EtcdCluster",
            cluster(
                "main",
                json!({"version": "3.6.11", "storage": {"size": "5Gi"}}),
            ),
            Some(cluster(
                "main",
                json!({"version": "3.6.11", "storage": {"size": "10Gi"}}),
            )),
            "alice",
        );
        let resp = validate(&req, &Policy::default());
        assert!(!resp.allowed);
        assert_eq!(resp.result.code, 422);
        assert_eq!(resp.result.reason, "Invalid");
        let msg = &resp.result.message;
        assert!(
            msg.contains("spec.storage.size") && msg.contains("10Gi") && msg.contains("5Gi"),
            "{msg}"
        );
        assert_eq!(resp.uid, "7f0a1c7e-0000-4000-8000-000000000001");
    }

    #[test]
    fn every_violation_is_listed_with_its_field() {
        let req = review(
            "CREATE",
            "EtcdCluster",
            cluster(
                "main",
                json!({"version": "v3", "replicas": -1, "progressDeadlineSeconds": 0}),
            ),
            None,
            "alice",
        );
        let resp = validate(&req, &Policy::default());
        assert!(!resp.allowed);
        for field in [
            "spec.version",
            "spec.replicas",
            "spec.progressDeadlineSeconds",
        ] {
            assert!(
                resp.result.message.contains(field),
                "{field}: {}",
                resp.result.message
            );
        }
        let causes = resp.result.details.unwrap().causes;
        assert_eq!(causes.len(), 3, "{causes:?}");
        // kubectl renders `<field>: <message>`; the field is not repeated inside the message.
        for cause in &causes {
            assert!(
                !cause.message.starts_with(&cause.field) && !cause.message.is_empty(),
                "{cause:?}"
            );
        }
    }

    #[test]
    fn unchanged_spec_update_is_allowed_even_if_the_stored_spec_breaks_a_rule() {
        let old = cluster("main", json!({"version": "latest"}));
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"team": "db"});
        let resp = validate(
            &review("UPDATE", "EtcdCluster", new, Some(old), "alice"),
            &Policy::default(),
        );
        assert!(resp.allowed);
    }

    #[test]
    fn update_without_old_object_is_denied_not_guessed() {
        let req = review(
            "UPDATE",
            "EtcdCluster",
            cluster("main", json!({"version": "3.6.11"})),
            None,
            "alice",
        );
        let resp = validate(&req, &Policy::default());
        assert!(!resp.allowed);
        assert!(
            resp.result.message.contains("oldObject"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn delete_is_allowed() {
        let req = review(
            "DELETE",
            "EtcdCluster",
            cluster("main", json!({"version": "bad"})),
            None,
            "alice",
        );
        assert!(validate(&req, &Policy::default()).allowed);
    }

    #[test]
    fn even_replicas_are_allowed_with_a_warning() {
        let req = review(
            "CREATE",
            "EtcdCluster",
            cluster("main", json!({"version": "3.6.11", "replicas": 4})),
            None,
            "alice",
        );
        let resp = validate(&req, &Policy::default());
        assert!(resp.allowed);
        assert_eq!(resp.warnings.unwrap().len(), 1);
    }

    #[test]
    fn member_update_by_the_controller_is_allowed() {
        let req = review(
            "UPDATE",
            "EtcdMember",
            member(json!({"clusterName": "main", "dormant": true}), &[]),
            Some(member(json!({"clusterName": "main"}), &[])),
            CONTROLLER,
        );
        assert!(validate(&req, &Policy::default()).allowed);
    }

    #[test]
    fn member_update_by_anyone_else_is_denied_as_operator_owned() {
        let req = review(
            "UPDATE",
            "EtcdMember",
            member(json!({"clusterName": "main", "dormant": true}), &[]),
            Some(member(json!({"clusterName": "main"}), &[])),
            "alice",
        );
        let resp = validate(&req, &Policy::default());
        assert!(!resp.allowed);
        assert_eq!(resp.result.code, 403);
        assert!(
            resp.result.message.contains("operator-owned"),
            "{}",
            resp.result.message
        );
        assert!(
            resp.result.message.contains("status"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn member_create_and_status_write_by_anyone_else_are_denied() {
        let spec = json!({"clusterName": "main"});
        let create = |user| {
            review(
                "CREATE",
                "EtcdMember",
                member(spec.clone(), &[]),
                None,
                user,
            )
        };
        let denied = validate(&create("alice"), &Policy::default());
        assert!(!denied.allowed);
        assert_eq!(denied.result.code, 403);
        assert!(
            denied.result.message.contains("may create EtcdMembers"),
            "{}",
            denied.result.message
        );
        assert!(validate(&create(CONTROLLER), &Policy::default()).allowed);

        let mut voter = member(spec.clone(), &[CLEANUP]);
        voter["status"] = json!({"isVoter": true});
        let mut demoted = voter.clone();
        demoted["status"]["isVoter"] = json!(false);
        let status_write = |user| {
            let mut req = review(
                "UPDATE",
                "EtcdMember",
                demoted.clone(),
                Some(voter.clone()),
                user,
            );
            req.sub_resource = Some("status".to_string());
            req
        };
        let denied = validate(&status_write("alice"), &Policy::default());
        assert!(!denied.allowed);
        assert!(
            denied.result.message.contains("isVoter=false"),
            "{}",
            denied.result.message
        );
        assert!(validate(&status_write(CONTROLLER), &Policy::default()).allowed);
    }

    /// A review as `user` in `groups` (the apiserver sends the authenticated user's groups).
    fn as_member_of(mut req: Request, groups: &[&str]) -> Request {
        req.user_info.groups = Some(groups.iter().map(|g| g.to_string()).collect());
        req
    }

    /// An EtcdMember as `etcd-operator migrate --from-aenix --apply` creates it.
    fn adopted_member() -> Value {
        let mut m = member(json!({"clusterName": "main"}), &[CLEANUP]);
        m["metadata"]["annotations"] = json!({ADOPTED_FROM_ANNOTATION: "0b1c-aenix-uid"});
        m
    }

    fn status_write(new: Value, old: Value, user: &str, groups: &[&str]) -> Request {
        let mut req = as_member_of(review("UPDATE", "EtcdMember", new, Some(old), user), groups);
        req.sub_resource = Some("status".to_string());
        req
    }

    #[test]
    fn cluster_admin_may_create_a_member_marked_as_the_migrations() {
        let create = |object: Value, groups: &[&str]| {
            validate(
                &as_member_of(review("CREATE", "EtcdMember", object, None, "ops"), groups),
                &Policy::default(),
            )
        };
        for group in ["system:masters", "kubeadm:cluster-admins"] {
            assert!(
                create(adopted_member(), &[group, "system:authenticated"]).allowed,
                "{group}"
            );
        }
        // An ordinary user (a namespace admin, say), marker or not: refused.
        let denied = create(adopted_member(), &["system:authenticated", "tenant-admins"]);
        assert!(!denied.allowed);
        assert!(
            denied.result.message.contains(ADOPTED_FROM_ANNOTATION),
            "the refusal names the migration's way: {}",
            denied.result.message
        );
        // A cluster admin without the marker: refused (only the migration's writes are let in).
        let unmarked = member(json!({"clusterName": "main"}), &[CLEANUP]);
        assert!(!create(unmarked, &["system:masters"]).allowed);
        let mut empty = adopted_member();
        empty["metadata"]["annotations"][ADOPTED_FROM_ANNOTATION] = json!("");
        assert!(!create(empty, &["system:masters"]).allowed);
        // With the allowance turned off, a cluster admin is refused like anyone.
        let off = Policy {
            migration_groups: Vec::new(),
            ..Policy::default()
        };
        let req = as_member_of(
            review("CREATE", "EtcdMember", adopted_member(), None, "ops"),
            &["system:masters"],
        );
        assert!(!validate(&req, &off).allowed);
    }

    #[test]
    fn cluster_admin_may_latch_only_the_first_status_of_a_migrated_member() {
        let unlatched = adopted_member();
        let mut latched = adopted_member();
        latched["status"] = json!({"memberID": "8e9e05c52164694d", "isVoter": true});
        let admin = ["system:masters"];
        assert!(
            validate(
                &status_write(latched.clone(), unlatched.clone(), "ops", &admin),
                &Policy::default()
            )
            .allowed,
            "the migration's first status write"
        );
        // Once recorded, the status is the operator's: isVoter=false would let the member's
        // deletion skip MemberRemove.
        let mut demoted = latched.clone();
        demoted["status"]["isVoter"] = json!(false);
        let denied = validate(
            &status_write(demoted, latched.clone(), "ops", &admin),
            &Policy::default(),
        );
        assert!(!denied.allowed);
        assert!(
            denied.result.message.contains("isVoter=false"),
            "{}",
            denied.result.message
        );
        // A member the migration did not create, or a write dropping the marker: refused.
        let plain = member(json!({"clusterName": "main"}), &[CLEANUP]);
        let mut plain_latched = plain.clone();
        plain_latched["status"] = latched["status"].clone();
        assert!(
            !validate(
                &status_write(plain_latched, plain, "ops", &admin),
                &Policy::default()
            )
            .allowed
        );
        let mut unmarked = latched.clone();
        unmarked["metadata"]["annotations"] = json!({});
        assert!(
            !validate(
                &status_write(unmarked, unlatched.clone(), "ops", &admin),
                &Policy::default()
            )
            .allowed
        );
        // Not a cluster admin: refused.
        assert!(
            !validate(
                &status_write(
                    latched.clone(),
                    unlatched.clone(),
                    "alice",
                    &["system:authenticated"]
                ),
                &Policy::default()
            )
            .allowed
        );
        // A spec update of a migrated member stays the controller's, admin or not.
        let mut edited = unlatched.clone();
        edited["spec"]["dormant"] = json!(true);
        let req = as_member_of(
            review("UPDATE", "EtcdMember", edited, Some(unlatched), "ops"),
            &admin,
        );
        assert!(!validate(&req, &Policy::default()).allowed);
    }

    #[test]
    fn migrated_cluster_is_created_without_defaults() {
        let mut adopted = cluster("main", json!({"version": "3.6.16", "replicas": 3}));
        adopted["metadata"]["annotations"] = json!({ADOPTED_FROM_ANNOTATION: "0b1c-aenix-uid"});
        let resp = mutate(
            &review("CREATE", "EtcdCluster", adopted, None, "ops"),
            &Policy::default(),
        );
        assert!(resp.allowed && resp.patch.is_none(), "{resp:?}");
        let native = cluster("main", json!({"version": "3.6.16", "replicas": 3}));
        let resp = mutate(
            &review("CREATE", "EtcdCluster", native, None, "ops"),
            &Policy::default(),
        );
        assert!(
            resp.patch.is_some(),
            "a native cluster still gets its anti-affinity"
        );
    }

    const CLEANUP: &str = "etcd-operator.cozystack.io/member-cleanup";

    fn terminating(mut member: Value) -> Value {
        member["metadata"]["deletionTimestamp"] = json!("2026-01-02T03:04:05Z");
        member
    }

    fn member_update_by(user: &str, new: Value, old: Value) -> AdmissionResponse {
        validate(
            &review("UPDATE", "EtcdMember", new, Some(old), user),
            &Policy::default(),
        )
    }

    #[test]
    fn live_member_finalizer_removal_by_anyone_else_is_denied() {
        let spec = json!({"clusterName": "main"});
        let resp = member_update_by("alice", member(spec.clone(), &[]), member(spec, &[CLEANUP]));
        assert!(!resp.allowed);
        assert_eq!(resp.result.code, 403);
        assert!(
            resp.result.message.contains("deletionTimestamp"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn terminating_member_finalizer_removal_by_anyone_is_allowed() {
        let spec = json!({"clusterName": "main"});
        let old = terminating(member(
            spec.clone(),
            &["example.com/a", CLEANUP, "example.com/b"],
        ));
        for kept in [
            &[][..],
            &["example.com/a", "example.com/b"],
            &["example.com/b"],
        ] {
            let new = terminating(member(spec.clone(), kept));
            assert!(
                member_update_by("alice", new, old.clone()).allowed,
                "keeping {kept:?}"
            );
        }
    }

    #[test]
    fn terminating_member_takes_nothing_but_finalizer_removal_from_anyone_else() {
        let spec = json!({"clusterName": "main"});
        let old = terminating(member(spec.clone(), &[CLEANUP]));
        let mut relabelled = terminating(member(spec.clone(), &[]));
        relabelled["metadata"]["labels"] = json!({"team": "db"});
        let mut disowned = terminating(member(spec.clone(), &[]));
        disowned["metadata"]["ownerReferences"] = json!([]);
        let mut owned = old.clone();
        owned["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]);
        for (what, new, old) in [
            (
                "finalizer added",
                terminating(member(spec.clone(), &[CLEANUP, "example.com/hold"])),
                old.clone(),
            ),
            (
                "finalizers reordered",
                terminating(member(spec.clone(), &["b", "a"])),
                terminating(member(spec.clone(), &["a", "b"])),
            ),
            ("nothing removed", old.clone(), old.clone()),
            ("removal and a label", relabelled, old.clone()),
            ("removal and the owner", disowned, owned),
            (
                "removal and the spec",
                terminating(member(json!({"clusterName": "main", "dormant": true}), &[])),
                old.clone(),
            ),
        ] {
            assert!(!member_update_by("alice", new, old).allowed, "{what}");
        }
    }

    #[test]
    fn garbage_collector_may_orphan_a_member_and_nobody_else_may() {
        let spec = json!({"clusterName": "main"});
        let mut owned = member(spec.clone(), &[CLEANUP]);
        owned["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
            "name": "main", "uid": "u", "controller": true
        }]);
        let mut orphaned = owned.clone();
        orphaned["metadata"]["ownerReferences"] = json!([]);
        for gc in GARBAGE_COLLECTORS {
            assert!(
                member_update_by(gc, orphaned.clone(), owned.clone()).allowed,
                "{gc}"
            );
        }
        assert!(!member_update_by("alice", orphaned.clone(), owned.clone()).allowed);
        let mut orphaned_and_relabelled = orphaned;
        orphaned_and_relabelled["metadata"]["labels"] = json!({"team": "db"});
        assert!(
            !member_update_by(GARBAGE_COLLECTORS[0], orphaned_and_relabelled, owned).allowed,
            "the garbage collector gets nothing beyond removing owner references"
        );
    }

    #[test]
    fn configured_controller_username_is_the_one_honoured() {
        let policy = Policy {
            controller_username: "system:serviceaccount:ops:etcd".into(),
            ..Policy::default()
        };
        let new = member(json!({"clusterName": "main", "dormant": true}), &[]);
        let old = member(json!({"clusterName": "main"}), &[]);
        let by = |user| review("UPDATE", "EtcdMember", new.clone(), Some(old.clone()), user);
        assert!(validate(&by("system:serviceaccount:ops:etcd"), &policy).allowed);
        assert!(!validate(&by(CONTROLLER), &policy).allowed);
    }

    #[test]
    fn mutate_patches_only_etcd_cluster_create() {
        let spec = json!({"version": "3.6.11"});
        let create = review(
            "CREATE",
            "EtcdCluster",
            cluster("main", spec.clone()),
            None,
            "alice",
        );
        assert!(mutate(&create, &Policy::default()).patch.is_some());
        let update = review(
            "UPDATE",
            "EtcdCluster",
            cluster("main", spec.clone()),
            Some(cluster("main", spec.clone())),
            "alice",
        );
        assert!(mutate(&update, &Policy::default()).patch.is_none());
        let snapshot = review(
            "CREATE",
            "EtcdSnapshot",
            json!({"metadata": {"name": "s"}, "spec": {"clusterRef": {"name": "main"},
                   "destination": {"pvc": {"claimName": "backups"}}}}),
            None,
            "alice",
        );
        let resp = mutate(&snapshot, &Policy::default());
        assert!(resp.allowed && resp.patch.is_none());
    }

    #[test]
    fn mutate_denies_invalid_objects_with_every_violation_before_cel_runs() {
        let bad = review(
            "CREATE",
            "EtcdCluster",
            cluster("main", json!({"version": "3.6", "replicas": -1})),
            None,
            "alice",
        );
        let resp = mutate(&bad, &Policy::default());
        assert!(!resp.allowed);
        assert!(resp.patch.is_none());
        let message = resp.result.message;
        assert!(message.contains("(2 problems)"), "{message}");
        assert!(
            message.contains("spec.version") && message.contains("spec.replicas"),
            "{message}"
        );
        let snapshot = review(
            "CREATE",
            "EtcdSnapshot",
            json!({"metadata": {"name": "s"}, "spec": {"clusterRef": {"name": "main"}, "destination": {}}}),
            None,
            "alice",
        );
        assert!(!mutate(&snapshot, &Policy::default()).allowed);
    }

    #[test]
    fn malformed_reviews_are_errors_not_panics() {
        assert!(matches!(parse_review(b"{"), Err(ReviewError::NotJson(_))));
        assert!(matches!(
            parse_review(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#),
            Err(ReviewError::WrongType { .. })
        ));
        assert!(matches!(
            parse_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#),
            Err(ReviewError::MissingRequest)
        ));
        let err = parse_review(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","operation":"CREATE"}}"#,
        )
        .unwrap_err();
        assert_eq!(err.uid(), Some("u1"));
        let denial = unreadable_denial("u1", &err);
        assert!(!denial.allowed && denial.uid == "u1");
    }
}
