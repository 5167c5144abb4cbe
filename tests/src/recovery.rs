//! What the `EtcdRecovery` suites share: creating a recovery in a test's [`Scope`] and waiting
//! on its status.

use std::time::Duration;

use api::v1alpha2::{
    EtcdRecovery, EtcdRecoverySpec, LocalReference, RecoveryPhase, RecoverySource,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

use crate::e2e::Env;
use crate::harness::eventually_every;
use crate::operator::Scope;
use crate::OrPanic;
use serde_json::json;

/// How often [`wait_recovery`] asks.
const POLL: Duration = Duration::from_millis(200);

/// The EtcdRecoveries of the scope's namespace.
pub fn recoveries(s: &Scope) -> Api<EtcdRecovery> {
    Api::namespaced(s.env.client(), &s.ns)
}

/// Create EtcdRecovery `name` of `cluster` from `source`; `confirm` sets
/// `confirmHealthyClusterRollback`.
pub async fn create_recovery(
    s: &Scope,
    name: &str,
    cluster: &str,
    source: RecoverySource,
    confirm: bool,
) {
    let mut r = EtcdRecovery::new(
        name,
        EtcdRecoverySpec {
            cluster_ref: LocalReference {
                name: cluster.into(),
            },
            source,
            confirm_healthy_cluster_rollback: confirm.then_some(true),
            allow_unverified_snapshot: None,
        },
    );
    r.metadata.namespace = Some(s.ns.clone());
    recoveries(s)
        .create(&PostParams::default(), &r)
        .await
        .or_panic();
}

/// Wait until the recovery's status satisfies `check`; returns it. The timeout names the
/// test's operator logs and the last status.
pub async fn wait_recovery(
    s: &Scope,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&EtcdRecovery) -> bool,
) -> EtcdRecovery {
    let what = format!("{}/{name}: {what} (operator logs: {})", s.ns, s.logs());
    eventually_every(&what, timeout, POLL, || async {
        let r = recoveries(s).get(name).await.or_panic();
        if check(&r) {
            Ok(r)
        } else {
            Err(format!(
                "status: {}",
                serde_json::to_string_pretty(&r.status).unwrap_or_default()
            ))
        }
    })
    .await
}

/// The recovery's `Ready` condition (a finished recovery always has one).
pub fn ready_condition(r: &EtcdRecovery) -> Condition {
    r.status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == "Ready")
        .cloned()
        .unwrap_or_else(|| panic!("{}: no Ready condition: {:?}", r.name_any(), r.status))
}

/// The recovery's phase, if it has a status.
pub fn phase(r: &EtcdRecovery) -> Option<RecoveryPhase> {
    r.status.as_ref().and_then(|s| s.phase)
}

/// The highest revision the cluster answers with now.
pub async fn revision(env: &Env, ns: &str, cluster: &str) -> i64 {
    let mut etcd = env.etcd_client(ns, cluster).await;
    etcd.get("e2e/", None)
        .await
        .or_panic()
        .header()
        .map(|h| h.revision())
        .expect("a response header")
}

/// Every member lost with its data: PVCs force-deleted (the protection finalizer removed, as a
/// storage admin would) and Pods deleted at once.
pub async fn lose_all(env: &Env, ns: &str, cluster: &str) {
    let members = env.member_names(ns, cluster).await;
    lose_members(env, ns, &members).await;
}

/// The members `victims` lost with their data, as [`lose_all`] loses every member.
pub async fn lose_members(env: &Env, ns: &str, victims: &[String]) {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client(), ns);
    let pods: Api<Pod> = Api::namespaced(env.client(), ns);
    for victim in victims {
        let pvc = format!("data-{victim}");
        pvcs.delete(&pvc, &DeleteParams::default()).await.or_panic();
        pvcs.patch(
            &pvc,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .or_panic();
        pods.delete(victim, &DeleteParams::default().grace_period(0))
            .await
            .or_panic();
    }
}
