//! Online volume growth, the cluster's part: members are given the latched target's
//! `storage.size` when it grew (their controller expands the PVC, see
//! `crate::volume`), and the `VolumesExpanded` condition sums up their
//! `VolumeExpanded` conditions. Memory members are not grown: their size is the tmpfs limit of a
//! running Pod, which only a new Pod changes. Pure.

use api::conditions::{cluster as ctype, member as mtype, reason};
use api::quantity::to_bytes;
use api::v1alpha2::EtcdMember;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::conditions::set_condition;

fn grows(member: &EtcdMember) -> bool {
    !member.spec.storage.is_memory() && member.metadata.deletion_timestamp.is_none()
}

/// The members whose `spec.storage.size` is below `target`.
pub fn members_to_grow<'a>(members: &'a [EtcdMember], target: &Quantity) -> Vec<&'a EtcdMember> {
    let Some(want) = to_bytes(target) else {
        return Vec::new();
    };
    members
        .iter()
        .filter(|m| grows(m))
        .filter(|m| to_bytes(&m.spec.storage.size).is_some_and(|have| have < want))
        .collect()
}

/// Set `VolumesExpanded` from the members' `VolumeExpanded` conditions. A member not yet given
/// the target size, or whose controller has not yet observed its current generation, counts as
/// expanding. The condition appears with the first growth, then stays.
pub fn set_volumes_condition(
    conditions: &mut Vec<Condition>,
    members: &[EtcdMember],
    target: &Quantity,
    generation: Option<i64>,
    now: Timestamp,
) {
    let want = to_bytes(target);
    let growing: Vec<&EtcdMember> = members.iter().filter(|m| grows(m)).collect();
    let member_condition = |m: &EtcdMember| {
        m.status
            .as_ref()
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == mtype::VOLUME_EXPANDED)
            })
            .cloned()
    };
    // A growth has begun once a member was given a size it reports on, or the cluster reported
    // one: only then does a member whose controller lags say anything about it.
    let growth_seen = growing.iter().any(|m| member_condition(m).is_some())
        || conditions
            .iter()
            .any(|c| c.type_ == ctype::VOLUMES_EXPANDED);
    let mut refused = Vec::new();
    let mut expanding = Vec::new();
    let mut reported = false;
    for m in &growing {
        let behind = to_bytes(&m.spec.storage.size)
            .zip(want)
            .is_some_and(|(have, want)| have < want);
        // Its controller has not yet acted on its current spec (the size just given to it): its
        // condition, or its lack of one, says nothing about that size yet.
        let unobserved = growth_seen
            && m.status.as_ref().and_then(|s| s.observed_generation) < m.metadata.generation;
        match member_condition(m) {
            _ if behind || unobserved => expanding.push(m.name_any()),
            Some(c) if c.status == "True" => reported = true,
            Some(c) if c.reason == reason::VOLUME_EXPANDING => expanding.push(m.name_any()),
            Some(c) => refused.push((m.name_any(), c)),
            None => {}
        }
    }
    let done = growing.len() - refused.len() - expanding.len();
    let (status, why, message) = if let Some((first, c)) = refused.first() {
        let others = refused
            .iter()
            .skip(1)
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>();
        let also = if others.is_empty() {
            String::new()
        } else {
            format!(" (also {})", others.join(", "))
        };
        (
            false,
            if refused
                .iter()
                .any(|(_, c)| c.reason == reason::VOLUME_EXPANSION_FAILED)
            {
                reason::VOLUME_EXPANSION_FAILED
            } else {
                reason::VOLUME_EXPANSION_NOT_SUPPORTED
            },
            format!("member {first}{also}: {}", c.message),
        )
    } else if !expanding.is_empty() {
        (
            false,
            reason::VOLUME_EXPANDING,
            format!(
                "expanding the PVCs of {} to {} (spec.storage.size) online, without restarts; \
                 {done} of {} members done",
                expanding.join(", "),
                target.0,
                growing.len()
            ),
        )
    } else if reported
        || conditions
            .iter()
            .any(|c| c.type_ == ctype::VOLUMES_EXPANDED)
    {
        (
            true,
            reason::VOLUME_EXPANDED,
            format!("every member's PVC holds {} (spec.storage.size)", target.0),
        )
    } else {
        return;
    };
    set_condition(
        conditions,
        ctype::VOLUMES_EXPANDED,
        status,
        why,
        message,
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::tests::member;

    fn with(name: &str, size: &str, condition: Option<(&str, &str)>) -> EtcdMember {
        let mut m = member(name, "c", "ns");
        m.spec.storage.size = Quantity(size.into());
        if let Some((status, why)) = condition {
            m.status.get_or_insert_with(Default::default).conditions = vec![Condition {
                type_: mtype::VOLUME_EXPANDED.into(),
                status: status.into(),
                reason: why.into(),
                message: format!("{why} message"),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    Timestamp::now(),
                ),
                observed_generation: None,
            }];
        }
        m
    }

    fn volumes(conditions: &[Condition]) -> Option<(String, String, String)> {
        conditions
            .iter()
            .find(|c| c.type_ == ctype::VOLUMES_EXPANDED)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    #[test]
    fn only_smaller_pvc_members_grow() {
        let mut memory = with("c-m", "1Gi", None);
        memory.spec.storage.medium = Some(api::v1alpha2::StorageMedium::Memory);
        let members = [
            with("c-a", "1Gi", None),
            with("c-b", "2147483648", None),
            memory,
        ];
        let grow: Vec<String> = members_to_grow(&members, &Quantity("2Gi".into()))
            .iter()
            .map(|m| m.name_any())
            .collect();
        assert_eq!(grow, ["c-a"]);
    }

    #[test]
    fn no_growth_adds_no_condition() {
        let mut c = Vec::new();
        let members = [with("c-a", "1Gi", None)];
        set_volumes_condition(
            &mut c,
            &members,
            &Quantity("1Gi".into()),
            None,
            Timestamp::now(),
        );
        assert!(c.is_empty());
    }

    #[test]
    fn new_members_not_yet_observed_add_no_condition() {
        let mut fresh = with("c-a", "1Gi", None);
        fresh.metadata.generation = Some(1);
        let mut c = Vec::new();
        set_volumes_condition(
            &mut c,
            &[fresh],
            &Quantity("1Gi".into()),
            None,
            Timestamp::now(),
        );
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn expanding_then_done() {
        let mut c = Vec::new();
        let two = Quantity("2Gi".into());
        let members = [
            with("c-a", "1Gi", None),
            with("c-b", "2Gi", Some(("False", reason::VOLUME_EXPANDING))),
            with("c-c", "2Gi", Some(("True", reason::VOLUME_EXPANDED))),
        ];
        set_volumes_condition(&mut c, &members, &two, None, Timestamp::now());
        let (status, why, message) = volumes(&c).unwrap();
        assert_eq!(
            (status.as_str(), why.as_str()),
            ("False", reason::VOLUME_EXPANDING)
        );
        assert!(
            message.contains("c-a, c-b") && message.contains("1 of 3"),
            "{message}"
        );
        let members = [
            with("c-a", "2Gi", Some(("True", reason::VOLUME_EXPANDED))),
            with("c-b", "2Gi", Some(("True", reason::VOLUME_EXPANDED))),
        ];
        set_volumes_condition(&mut c, &members, &two, None, Timestamp::now());
        let (status, why, _) = volumes(&c).unwrap();
        assert_eq!(
            (status.as_str(), why.as_str()),
            ("True", reason::VOLUME_EXPANDED)
        );
    }

    #[test]
    fn a_refusal_wins_and_carries_the_members_message() {
        let mut c = Vec::new();
        let members = [
            with(
                "c-a",
                "2Gi",
                Some(("False", reason::VOLUME_EXPANSION_NOT_SUPPORTED)),
            ),
            with(
                "c-b",
                "2Gi",
                Some(("False", reason::VOLUME_EXPANSION_NOT_SUPPORTED)),
            ),
            with("c-c", "2Gi", Some(("False", reason::VOLUME_EXPANDING))),
        ];
        set_volumes_condition(
            &mut c,
            &members,
            &Quantity("2Gi".into()),
            None,
            Timestamp::now(),
        );
        let (status, why, message) = volumes(&c).unwrap();
        assert_eq!(
            (status.as_str(), why.as_str()),
            ("False", reason::VOLUME_EXPANSION_NOT_SUPPORTED)
        );
        assert!(
            message.starts_with("member c-a (also c-b): VolumeExpansionNotSupported message"),
            "{message}"
        );
    }

    /// The race CI caught: two members report the new size held, the third was given it (its
    /// generation moved) but its controller has not acted yet (no condition, or the True of an
    /// earlier growth). The cluster must not say every PVC holds it.
    #[test]
    fn a_member_whose_controller_has_not_seen_the_new_size_is_still_expanding() {
        let two = Quantity("2Gi".into());
        let seen = |mut m: EtcdMember, generation: i64| {
            m.metadata.generation = Some(2);
            m.status
                .get_or_insert_with(Default::default)
                .observed_generation = Some(generation);
            m
        };
        for lagging in [
            seen(with("c-c", "2Gi", None), 1),
            seen(
                with("c-c", "2Gi", Some(("True", reason::VOLUME_EXPANDED))),
                1,
            ),
        ] {
            let members = [
                seen(
                    with("c-a", "2Gi", Some(("True", reason::VOLUME_EXPANDED))),
                    2,
                ),
                seen(
                    with("c-b", "2Gi", Some(("True", reason::VOLUME_EXPANDED))),
                    2,
                ),
                lagging,
            ];
            let mut c = Vec::new();
            set_volumes_condition(&mut c, &members, &two, None, Timestamp::now());
            let (status, why, message) = volumes(&c).unwrap();
            assert_eq!(
                (status.as_str(), why.as_str()),
                ("False", reason::VOLUME_EXPANDING),
                "{message}"
            );
            assert!(
                message.contains("c-c") && message.contains("2 of 3"),
                "{message}"
            );
        }
    }
}
