//! Automatic recovery, when a cluster asks for it with
//! [`api::v1alpha2::AUTO_RECOVERY_ANNOTATION`]: a cluster that has stayed `QuorumLost` or
//! `AllMembersLost` past [`api::v1alpha2::AUTO_RECOVERY_GRACE_SECONDS`] gets the EtcdRecovery
//! its condition message names, created by the operator. Off by default. One recovery per
//! outage: its name carries the time the cluster became unavailable, so a reconcile that runs
//! again creates nothing new, and a recovery that failed is not retried behind the user's back.
//! Only `survivor` is acted on; a `snapshot` request is reported (the in-place snapshot
//! recovery is not built yet).

use api::conditions::{cluster as ctype, reason};
use api::v1alpha2::{
    EtcdCluster, EtcdClusterStatus, EtcdRecovery, EtcdRecoverySpec, LocalReference, RecoverySource,
    SurvivorSource, AUTO_RECOVERY_ANNOTATION, AUTO_RECOVERY_GRACE_SECONDS, RECOVERY_ANNOTATION,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use crate::context::Context;
use crate::events::{Action, Reason};
use crate::Error;

/// What the annotation asks for, once the cluster has been lost long enough.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Create this EtcdRecovery from a survivor.
    Survivor(String),
    /// The annotation asks for something this version does not do (the value, as written).
    NotBuilt(String),
}

/// Whether the operator should start a recovery of `cluster` now that its status is `status`.
pub fn wanted(cluster: &EtcdCluster, status: &EtcdClusterStatus, now: Timestamp) -> Option<Wanted> {
    let mode = cluster.annotations().get(AUTO_RECOVERY_ANNOTATION)?;
    if cluster.annotations().contains_key(RECOVERY_ANNOTATION) || cluster.spec.replicas == 0 {
        return None;
    }
    let lost = status.conditions.iter().find(|c| {
        c.type_ == ctype::AVAILABLE
            && c.status == "False"
            && (c.reason == reason::QUORUM_LOST || c.reason == reason::ALL_MEMBERS_LOST)
    })?;
    let since = lost.last_transition_time.0;
    if now.as_second() - since.as_second() < AUTO_RECOVERY_GRACE_SECONDS {
        return None;
    }
    match mode.as_str() {
        "survivor" => Some(Wanted::Survivor(format!(
            "{}-auto-{}",
            cluster.name_any(),
            since.as_second()
        ))),
        other => Some(Wanted::NotBuilt(other.to_string())),
    }
}

/// Create the EtcdRecovery [`wanted`] asks for (once: an existing one of that name is left as it
/// is) and announce it on the cluster.
pub(super) async fn start(
    cluster: &EtcdCluster,
    ctx: &Context,
    status: &EtcdClusterStatus,
) -> Result<(), Error> {
    let Some(wanted) = wanted(cluster, status, Timestamp::now()) else {
        return Ok(());
    };
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = match wanted {
        Wanted::Survivor(name) => name,
        Wanted::NotBuilt(mode) => {
            tracing::debug!(cluster = %cluster.name_any(), %mode, "auto-recovery mode not built");
            return Ok(());
        }
    };
    let api: Api<EtcdRecovery> = Api::namespaced(ctx.client.clone(), &ns);
    if api.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let mut recovery = EtcdRecovery::new(
        &name,
        EtcdRecoverySpec {
            cluster_ref: LocalReference {
                name: cluster.name_any(),
            },
            source: RecoverySource {
                survivor: Some(SurvivorSource { member: None }),
                snapshot: None,
            },
            confirm_healthy_cluster_rollback: None,
            allow_unverified_snapshot: None,
        },
    );
    recovery.metadata.namespace = Some(ns);
    match api.create(&PostParams::default(), &recovery).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    ctx.event(
        cluster,
        true,
        Reason::RecoveryCreated,
        Action::Create,
        format!(
            "the cluster has been unavailable for over {AUTO_RECOVERY_GRACE_SECONDS}s and asks \
             for it ({AUTO_RECOVERY_ANNOTATION}=survivor): created EtcdRecovery {name}"
        ),
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::EtcdClusterSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn lost_cluster(mode: Option<&str>) -> (EtcdCluster, EtcdClusterStatus) {
        let mut c = EtcdCluster::new(
            "c",
            EtcdClusterSpec {
                replicas: 3,
                version: "3.6.11".into(),
                ..Default::default()
            },
        );
        if let Some(mode) = mode {
            c.metadata.annotations =
                Some([(AUTO_RECOVERY_ANNOTATION.to_string(), mode.to_string())].into());
        }
        let status = EtcdClusterStatus {
            conditions: vec![Condition {
                type_: ctype::AVAILABLE.into(),
                status: "False".into(),
                reason: reason::QUORUM_LOST.into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(at(0)),
            }],
            ..Default::default()
        };
        (c, status)
    }

    #[test]
    fn only_an_annotated_cluster_lost_past_the_grace_period_is_recovered() {
        let (c, s) = lost_cluster(None);
        assert_eq!(wanted(&c, &s, at(3600)), None);
        let (c, s) = lost_cluster(Some("survivor"));
        assert_eq!(wanted(&c, &s, at(AUTO_RECOVERY_GRACE_SECONDS - 1)), None);
        let name = format!("c-auto-{}", at(0).as_second());
        assert_eq!(
            wanted(&c, &s, at(AUTO_RECOVERY_GRACE_SECONDS)),
            Some(Wanted::Survivor(name.clone()))
        );
        // The same outage always names the same recovery: it is created once.
        assert_eq!(
            wanted(&c, &s, at(AUTO_RECOVERY_GRACE_SECONDS + 600)),
            Some(Wanted::Survivor(name))
        );
    }

    #[test]
    fn a_healthy_held_or_paused_cluster_is_left_alone() {
        let (c, mut s) = lost_cluster(Some("survivor"));
        s.conditions[0].status = "True".into();
        s.conditions[0].reason = reason::QUORUM_HEALTHY.into();
        assert_eq!(wanted(&c, &s, at(3600)), None);
        let (mut c, s) = lost_cluster(Some("survivor"));
        c.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(RECOVERY_ANNOTATION.to_string(), "r1".to_string());
        assert_eq!(wanted(&c, &s, at(3600)), None);
        let (mut c, s) = lost_cluster(Some("survivor"));
        c.spec.replicas = 0;
        assert_eq!(wanted(&c, &s, at(3600)), None);
    }

    #[test]
    fn a_snapshot_request_is_not_acted_on() {
        let (c, s) = lost_cluster(Some("snapshot"));
        assert_eq!(
            wanted(&c, &s, at(3600)),
            Some(Wanted::NotBuilt("snapshot".into()))
        );
    }
}
