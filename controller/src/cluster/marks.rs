//! The operator's deletion marks that no plan stands behind. Before it deletes a member the
//! operator marks it ([`api::labels::ALLOW_DELETION_ANNOTATION`] with its own
//! [`api::labels::DELETION_PLANNED_ANNOTATION`], see `crate::deletion`); a mark whose delete was
//! refused, or that an operator dying before its delete left behind, would otherwise stay for
//! good and let a later stray `kubectl delete` or GitOps prune through the member deletion
//! protection, and the member's finalizer would take it out of etcd with its PVC. Which marks
//! are stale is decided here, from the members as read and the plan; the cluster controller's
//! `children` removes them. Pure.

use api::labels;
use api::v1alpha2::EtcdMember;
use kube::ResourceExt;

use super::plan::{Action, Hold};

/// The members whose operator mark no current plan stands behind, to have both annotations
/// removed: of `members` as read, given the plan's `action` and `hold`.
pub fn stale_marks<'a>(
    members: &'a [EtcdMember],
    action: &Action,
    hold: Option<&Hold>,
) -> Vec<&'a EtcdMember> {
    if matches!(hold, Some(Hold::Recovering(_))) {
        // An EtcdRecovery deletes the members it discards through the same mark, by a plan
        // of its own that this controller does not see: while it holds the cluster, its marks
        // are its own.
        return Vec::new();
    }
    let victim = match action {
        Action::DeleteMember { member, .. } => Some(member.as_str()),
        _ => None,
    };
    members
        .iter()
        // Only the operator's own mark: a user's break-glass (`allow-deletion` alone) is
        // theirs, never touched.
        .filter(|m| {
            m.annotations()
                .contains_key(labels::DELETION_PLANNED_ANNOTATION)
        })
        // Being deleted: the deletion the mark meant is under way, and the finalizer reads it.
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        // The member this plan deletes now: the mark is the plan's own.
        .filter(|m| victim != Some(m.name_any().as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::plan::DeleteReason;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    fn member(name: &str, annotations: &[(&str, &str)]) -> EtcdMember {
        let mut m: EtcdMember = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
            "kind": "EtcdMember",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"clusterName": "c", "version": "3.6.16"},
        }))
        .expect("a member");
        m.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        m
    }

    fn marked(name: &str) -> EtcdMember {
        member(
            name,
            &[
                (labels::ALLOW_DELETION_ANNOTATION, "true"),
                (
                    labels::DELETION_PLANNED_ANNOTATION,
                    &labels::deletion_planned(&format!("uid-{name}"), "ScaleDown"),
                ),
            ],
        )
    }

    fn names(stale: Vec<&EtcdMember>) -> Vec<String> {
        stale.iter().map(|m| m.name_any()).collect()
    }

    fn delete(member: &str) -> Action {
        Action::DeleteMember {
            member: member.into(),
            why: DeleteReason::ScaleDown,
        }
    }

    #[test]
    fn an_operator_mark_no_plan_deletes_is_stale() {
        let members = [marked("c-a"), member("c-b", &[])];
        assert_eq!(names(stale_marks(&members, &Action::None, None)), ["c-a"]);
        let wait = Action::Wait("waiting".into());
        assert_eq!(names(stale_marks(&members, &wait, None)), ["c-a"]);
        // Another member is the plan's victim now: the old mark is still stale.
        assert_eq!(names(stale_marks(&members, &delete("c-b"), None)), ["c-a"]);
    }

    #[test]
    fn the_mark_of_the_member_the_plan_deletes_now_stays() {
        let members = [marked("c-a")];
        assert!(stale_marks(&members, &delete("c-a"), None).is_empty());
    }

    #[test]
    fn a_member_being_deleted_keeps_its_mark_for_its_finalizer() {
        let mut going = marked("c-a");
        going.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(stale_marks(&[going], &Action::None, None).is_empty());
    }

    #[test]
    fn a_users_break_glass_is_never_touched() {
        let members = [member(
            "c-a",
            &[(labels::ALLOW_DELETION_ANNOTATION, "true")],
        )];
        assert!(stale_marks(&members, &Action::None, None).is_empty());
    }

    #[test]
    fn no_mark_is_stale_while_an_etcd_recovery_holds_the_cluster() {
        let members = [marked("c-a")];
        let hold = Hold::Recovering("c-restore".into());
        assert!(stale_marks(&members, &Action::Wait("held".into()), Some(&hold)).is_empty());
        // Another hold is no plan of deletion: the mark is stale.
        let other = Hold::CertManagerMissing;
        assert_eq!(
            names(stale_marks(&members, &Action::None, Some(&other))),
            ["c-a"]
        );
    }

    #[test]
    fn an_operator_mark_copied_from_another_member_is_stale() {
        // A member re-created with the old object's annotations (a GitOps tool, a restored
        // backup): the mark names the old UID; no plan deletes the new member.
        let copied = member(
            "c-a",
            &[
                (labels::ALLOW_DELETION_ANNOTATION, "true"),
                (labels::DELETION_PLANNED_ANNOTATION, "uid-old/ScaleDown"),
            ],
        );
        assert_eq!(names(stale_marks(&[copied], &Action::None, None)), ["c-a"]);
    }
}
