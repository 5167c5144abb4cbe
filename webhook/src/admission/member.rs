//! The EtcdMember guard: only the controller writes members, with the narrow exceptions of an
//! admin releasing a deletion stuck on a finalizer, the garbage collector orphaning a member,
//! anyone setting or removing the deletion break-glass annotation, and the aenix migration's
//! first writes. Decides by the request alone.

use api::labels::ADOPTED_FROM_ANNOTATION;
use kube::core::admission::{AdmissionResponse, Operation};
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use super::{adopted, deny, display_name, Request};
use crate::config::Policy;

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
pub(super) const GARBAGE_COLLECTORS: [&str; 2] = [
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
];

/// The garbage collector orphaning a member (`kubectl delete etcdcluster --cascade=orphan`)
/// removes its owner reference and nothing else; denying it would hang that deletion. A
/// distribution whose garbage collector acts under another identity lists it in
/// `memberDeletionProtection.additionalAllowedUsers` (`policy.deletion_allowed_users`), the same
/// list that lets it delete members.
fn garbage_collector_orphans(req: &Request, user: &str, policy: &Policy) -> bool {
    (GARBAGE_COLLECTORS.contains(&user) || policy.deletion_allowed_users.iter().any(|u| u == user))
        && only_removes_from(req, "ownerReferences", |o| {
            o.metadata.owner_references.as_deref().unwrap_or_default()
        })
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

pub(super) fn guard_member(
    req: &Request,
    response: AdmissionResponse,
    policy: &Policy,
) -> AdmissionResponse {
    let user = req.user_info.username.as_deref().unwrap_or_default();
    if user == policy.controller_username
        || only_releases_a_deleting_member(req)
        || super::deletion::only_touches_break_glass(req)
        || garbage_collector_orphans(req, user, policy)
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
