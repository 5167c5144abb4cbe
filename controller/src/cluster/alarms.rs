//! The `Alarm` condition of an EtcdCluster: the NOSPACE and CORRUPT alarms etcd has raised, by
//! member, with what to do about them. Pure. The condition appears with the first alarm and then
//! stays, `False`/`NoAlarm` once etcd lists none.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use api::conditions::cluster::ALARM;
use api::conditions::reason::{CORRUPT, NO_ALARM, NO_SPACE};
use api::labels::ALLOW_DELETION_ANNOTATION;

use crate::conditions::set_condition;
use crate::etcd::{format_id, Alarm};

/// Set the `Alarm` condition from etcd's alarm list; `names` maps member IDs to EtcdMember
/// names. CORRUPT wins over NOSPACE (it is the one that needs a member replaced).
pub fn set_alarm_condition(
    conditions: &mut Vec<Condition>,
    alarms: &[(u64, Alarm)],
    names: &BTreeMap<u64, String>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let who = |kind: Alarm| {
        alarms
            .iter()
            .filter(|(_, a)| *a == kind)
            .map(|(id, _)| {
                names
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| format!("member {}", format_id(*id)))
            })
            .collect::<Vec<_>>()
    };
    let (corrupt, nospace) = (who(Alarm::Corrupt), who(Alarm::NoSpace));
    let (status, reason, message) = if !corrupt.is_empty() {
        (
            true,
            CORRUPT,
            // Member deletion protection refuses a plain delete, and while the alarm is raised
            // no member is Ready, so the finalizer's MemberRemove waits for the disarm.
            format!(
                "etcd raised a CORRUPT alarm for {}: that member's data diverged from the others. \
                 Replace it: annotate its EtcdMember {ALLOW_DELETION_ANNOTATION}=true and delete \
                 it, then disarm the alarm (etcdctl alarm disarm) so the members turn Ready and \
                 the operator removes it and adds a fresh copy; do not defragment or snapshot it \
                 (docs/observability.md, EtcdCorruptAlarm)",
                corrupt.join(", ")
            ),
        )
    } else if !nospace.is_empty() {
        (
            true,
            NO_SPACE,
            format!(
                "etcd raised a NOSPACE alarm for {}: the backend reached its quota \
                 (spec.options.quotaBackendBytes, default 2GiB) and etcd refuses writes. Delete \
                 data you do not need and compact, or raise quotaBackendBytes and let the members \
                 roll; then create an EtcdDefrag (it disarms the alarm once every member is below \
                 the quota it runs with)",
                nospace.join(", ")
            ),
        )
    } else if conditions.iter().any(|c| c.type_ == ALARM) {
        (false, NO_ALARM, "etcd lists no alarm".to_string())
    } else {
        return;
    };
    set_condition(conditions, ALARM, status, reason, message, generation, now);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> BTreeMap<u64, String> {
        BTreeMap::from([(1, "c-0".to_string()), (2, "c-1".to_string())])
    }

    fn alarm(conditions: &[Condition]) -> Option<(String, String, String)> {
        conditions
            .iter()
            .find(|c| c.type_ == ALARM)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    #[test]
    fn no_alarm_adds_no_condition_to_a_cluster_that_never_had_one() {
        let mut c = Vec::new();
        set_alarm_condition(&mut c, &[], &names(), None, Timestamp::now());
        assert!(c.is_empty());
    }

    #[test]
    fn nospace_names_the_members_and_the_remedy_then_clears() {
        let mut c = Vec::new();
        let alarms = [(1, Alarm::NoSpace), (2, Alarm::NoSpace)];
        set_alarm_condition(&mut c, &alarms, &names(), Some(1), Timestamp::now());
        let (status, reason, message) = alarm(&c).unwrap();
        assert_eq!((status.as_str(), reason.as_str()), ("True", NO_SPACE));
        assert!(message.contains("c-0, c-1"), "{message}");
        assert!(message.contains("EtcdDefrag"), "{message}");
        set_alarm_condition(&mut c, &[], &names(), Some(1), Timestamp::now());
        let (status, reason, _) = alarm(&c).unwrap();
        assert_eq!((status.as_str(), reason.as_str()), ("False", NO_ALARM));
    }

    #[test]
    fn corrupt_wins_and_an_unknown_member_is_named_by_id() {
        let mut c = Vec::new();
        let alarms = [(1, Alarm::NoSpace), (0xab, Alarm::Corrupt)];
        set_alarm_condition(&mut c, &alarms, &names(), None, Timestamp::now());
        let (_, reason, message) = alarm(&c).unwrap();
        assert_eq!(reason, CORRUPT);
        assert!(message.contains("member 00000000000000ab"), "{message}");
        // The way past member deletion protection, and the disarm the removal waits for.
        assert!(
            message.contains("etcd-operator.cozystack.io/allow-deletion=true"),
            "{message}"
        );
        assert!(message.contains("etcdctl alarm disarm"), "{message}");
    }
}
