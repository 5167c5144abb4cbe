//! EtcdMember deletion protection: a DELETE of an EtcdMember is refused unless it comes from the
//! controller, kube-controller-manager's garbage collector or namespace controller, a user the
//! chart allows (`memberDeletionProtection.additionalAllowedUsers`), or the member carries the
//! break-glass annotation `etcd-operator.cozystack.io/allow-deletion: "true"`. The chart's
//! ValidatingAdmissionPolicy says the same in CEL on Kubernetes 1.30+; this is the webhook's
//! copy (and the only guard below 1.30). Also the one EtcdMember update anyone may make: setting
//! or removing that annotation, and nothing else. Decides by the request alone.

use std::collections::BTreeMap;

use api::labels::{deletion_allowed, ALLOW_DELETION_ANNOTATION};
use kube::core::admission::AdmissionResponse;
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use super::{deny, Request};
use crate::config::Policy;

/// The identities kube-controller-manager deletes as: the garbage collector (a member whose
/// EtcdCluster is gone) and the namespace controller (a namespace being deleted), with
/// `--use-service-account-credentials` (kubeadm's default) and without (then every controller
/// acts as `system:kube-controller-manager`).
pub const KUBE_CONTROLLERS: [&str; 3] = [
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:serviceaccount:kube-system:namespace-controller",
    "system:kube-controller-manager",
];

/// Whether `user` may delete a member whose annotations say `allowed` (the break-glass).
pub fn may_delete_member(user: &str, allowed: bool, policy: &Policy) -> bool {
    allowed
        || user == policy.controller_username
        || KUBE_CONTROLLERS.contains(&user)
        || policy.deletion_allowed_users.iter().any(|u| u == user)
}

/// The refusal, naming the break-glass annotation and what deleting does with it.
pub fn refusal(name: &str, namespace: &str, user: &str, policy: &Policy) -> String {
    format!(
        "EtcdMember {name:?} is protected against deletion: only etcd-operator ({controller}), the \
         garbage collector (deleting the EtcdCluster deletes its members) and the namespace \
         controller delete EtcdMembers, and {user:?} is none of them. A member deleted by hand \
         (kubectl delete, a GitOps prune, a CRD replacement) would take a voter out of the \
         cluster. To remove members, lower the EtcdCluster's spec.replicas. To replace this \
         member on purpose (it is removed from etcd, its PVC deleted, a new member added), set \
         the break-glass annotation first: kubectl annotate etcdmember {name} -n {namespace} \
         {ALLOW_DELETION_ANNOTATION}=true. If {user:?} is your distribution's garbage collector \
         or namespace controller, add it to the chart's \
         memberDeletionProtection.additionalAllowedUsers",
        controller = policy.controller_username,
    )
}

fn annotations(object: &DynamicObject) -> BTreeMap<String, String> {
    object.metadata.annotations.clone().unwrap_or_default()
}

/// The DELETE of an EtcdMember.
pub(super) fn guard_member_deletion(
    req: &Request,
    response: AdmissionResponse,
    policy: &Policy,
) -> AdmissionResponse {
    let user = req.user_info.username.as_deref().unwrap_or_default();
    // The object being deleted comes as oldObject; without it the annotation is unknown.
    let allowed = req
        .old_object
        .as_ref()
        .is_some_and(|o| deletion_allowed(&annotations(o)));
    if may_delete_member(user, allowed, policy) {
        return response;
    }
    let namespace = req.namespace.clone().unwrap_or_default();
    let name = match req
        .old_object
        .as_ref()
        .and_then(|o| o.metadata.name.clone())
    {
        Some(n) if req.name.is_empty() => n,
        _ => req.name.clone(),
    };
    let message = refusal(&name, &namespace, user, policy);
    deny(
        response,
        Status::failure(&message, "Forbidden").with_code(403),
    )
}

/// The object as JSON without the break-glass annotation and the fields the apiserver
/// maintains itself.
fn apart_from_break_glass(object: &DynamicObject) -> Option<Value> {
    let mut value = serde_json::to_value(object).ok()?;
    let metadata = value.get_mut("metadata").and_then(Value::as_object_mut)?;
    for key in ["managedFields", "resourceVersion", "generation"] {
        metadata.remove(key);
    }
    let empty = match metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        Some(a) => {
            a.remove(ALLOW_DELETION_ANNOTATION);
            a.is_empty()
        }
        None => false,
    };
    if empty {
        metadata.remove("annotations");
    }
    Some(value)
}

/// Whether the update sets, changes or removes the break-glass annotation and does nothing else
/// (no subresource; a no-op update is not one). Anyone may: it only opens the member to a deletion that the same user could
/// make on a cluster without this webhook, and every such deletion is audited.
pub(super) fn only_touches_break_glass(req: &Request) -> bool {
    let (Some(new), Some(old)) = (&req.object, &req.old_object) else {
        return false;
    };
    req.sub_resource.is_none()
        && annotations(new).get(ALLOW_DELETION_ANNOTATION)
            != annotations(old).get(ALLOW_DELETION_ANNOTATION)
        && matches!(
            (apart_from_break_glass(new), apart_from_break_glass(old)),
            (Some(n), Some(o)) if n == o
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_operator_kube_controllers_listed_users_or_the_break_glass_delete_members() {
        let policy = Policy::default();
        let controller = policy.controller_username.clone();
        assert!(may_delete_member(&controller, false, &policy));
        for kcm in KUBE_CONTROLLERS {
            assert!(may_delete_member(kcm, false, &policy), "{kcm}");
        }
        assert!(!may_delete_member("alice", false, &policy));
        assert!(!may_delete_member("system:admin", false, &policy));
        // A cluster admin needs the annotation too.
        assert!(!may_delete_member("kubernetes-admin", false, &policy));
        assert!(may_delete_member("alice", true, &policy));
        let argo = "system:serviceaccount:argocd:argocd-application-controller";
        assert!(!may_delete_member(argo, false, &policy));
        let listed = Policy {
            deletion_allowed_users: vec![argo.into()],
            ..Policy::default()
        };
        assert!(may_delete_member(argo, false, &listed));
        // Another ServiceAccount named like the controller's in another namespace is not it.
        assert!(!may_delete_member(
            "system:serviceaccount:default:etcd-operator",
            false,
            &policy
        ));
    }

    #[test]
    fn the_refusal_names_the_break_glass_annotation_and_the_command() {
        let m = refusal("main-abcde", "prod", "alice", &Policy::default());
        assert!(m.contains("\"alice\""), "{m}");
        assert!(
            m.contains("kubectl annotate etcdmember main-abcde -n prod etcd-operator.cozystack.io/allow-deletion=true"),
            "{m}"
        );
        assert!(m.contains("spec.replicas"), "{m}");
    }
}
