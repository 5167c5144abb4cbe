//! Self-healing end to end: a member whose data directory is lost must neither form a new empty
//! cluster (the seed) nor rejoin with empty data; it crash-loops, and the operator replaces it
//! while the others keep quorum — with every key intact. And a cluster whose every member Pod is
//! gone says `AllMembersLost` until they come back, deleting nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;
use tests::e2e::{condition, env, spec};
use tests::harness::eventually_every;
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_with_wiped_data_never_forms_a_new_cluster_and_is_replaced_while_quorum_holds() {
    let env = env().await;
    let ns = env.namespace("wipe").await;
    env.create_cluster(&ns, "wp", spec(3)).await;
    let c = env.wait_healthy(&ns, "wp", 3, BOOT).await;
    let cluster_id = c.status.unwrap().cluster_id;
    // etcd's own cluster ID, as every member reports it on its own endpoint.
    let etcd_id = env.etcd_cluster_id(&ns, "wp", 3).await;
    let keys = env.write_keys(&ns, "wp", 50).await;

    let members = env.members(&ns, "wp").await;
    let seed = members
        .iter()
        .find(|m| m.spec.bootstrap)
        .expect("a seed member")
        .name_any();
    let survivors: Vec<String> = members
        .iter()
        .map(|m| m.name_any())
        .filter(|m| m != &seed)
        .collect();
    let pvc = format!("data-{seed}");
    // Lose the seed's data, then make etcd start again on the empty directory.
    env.runner.wipe_claim(&ns, &pvc).await.or_panic();
    env.runner.kill_container(&ns, &seed, "etcd").or_panic();

    // The seed must never come back as a cluster of its own: while it is being replaced, every
    // member Pod that answers on its own endpoint names the original etcd cluster, and the
    // survivors always answer (the wiped seed and a joining replacement may not).
    eventually_every(
        &format!(
            "the wiped seed {seed} replaced; operator log: {}",
            env.operator.log().display()
        ),
        Duration::from_secs(300),
        Duration::from_secs(1),
        || async {
            let names: Vec<String> = env.member_names(&ns, "wp").await;
            if !names.contains(&seed) && names.len() == 3 {
                return Ok(());
            }
            for (pod, view) in env.member_views(&ns, "wp").await {
                match view {
                    Ok(v) => assert_eq!(
                        v.cluster_id,
                        etcd_id,
                        "member {pod} answers for etcd cluster {:016x}, not {etcd_id:016x}: a new \
                     cluster was formed; operator log: {}",
                        v.cluster_id,
                        env.operator.log().display()
                    ),
                    Err(e) => assert!(
                        !survivors.contains(&pod),
                        "the surviving member {pod} did not answer: {e}"
                    ),
                }
            }
            Err(format!("members: {names:?}"))
        },
    )
    .await;
    let c = env.wait_healthy(&ns, "wp", 3, BOOT).await;
    assert_eq!(
        c.status.unwrap().cluster_id,
        cluster_id,
        "same cluster after the replacement"
    );
    assert_eq!(
        env.etcd_cluster_id(&ns, "wp", 3).await,
        etcd_id,
        "every member, the replacement too, is in the original etcd cluster"
    );
    let etcd = env.etcd_members(&ns, "wp").await;
    assert_eq!(etcd.len(), 3, "{etcd:?}");
    assert!(
        !etcd.iter().any(|(n, _)| n == &seed),
        "the wiped seed left etcd: {etcd:?}"
    );
    assert!(etcd.iter().all(|(_, learner)| !learner), "{etcd:?}");
    env.check_keys(&ns, "wp", &keys).await;
}

/// Every member Pod of a formed PVC cluster gone and none can come back (a ResourceQuota of zero
/// Pods, enforced by the apiserver's quota admission): the cluster says `AllMembersLost` on all
/// three conditions with readyMembers 0 and the way back, deletes nothing, and recovers with
/// every key once Pods may be created again (the condition clears).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_pod_gone_is_all_members_lost_until_the_pods_come_back() {
    let env = env().await;
    let ns = env.namespace("lost").await;
    let name = "al";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 50).await;
    let members = env.member_names(&ns, name).await;
    let claims: Vec<String> = env
        .pvcs(&ns, name)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(claims.len(), 3, "{claims:?}");

    // No Pod may be created in the namespace. No quota controller runs here, so the quota's
    // status is written by hand: the admission plugin refuses a Pod that would exceed it.
    let quotas = Api::<ResourceQuota>::namespaced(env.client(), &ns);
    let _: ResourceQuota = tests::harness::create(
        &env.client(),
        &ns,
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
               "spec": {"hard": {"pods": "0"}}}),
    )
    .await;
    quotas
        .patch_status(
            "no-pods",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}})),
        )
        .await
        .or_panic();
    let pods = Api::<Pod>::namespaced(env.client(), &ns);
    for pod in env.pods(&ns, name).await {
        pods.delete(&pod.name_any(), &DeleteParams::default())
            .await
            .or_panic();
    }

    let lost = env
        .wait_for(
            &ns,
            name,
            "AllMembersLost on Available, Progressing and Degraded",
            Duration::from_secs(240),
            |c| {
                [
                    ("Available", "False"),
                    ("Progressing", "False"),
                    ("Degraded", "True"),
                ]
                .iter()
                .all(|(t, st)| {
                    condition(c, t).is_some_and(|(s, r, _)| s == *st && r == "AllMembersLost")
                })
            },
        )
        .await;
    let status = lost.status.clone().unwrap_or_default();
    assert_eq!(status.ready_members, 0);
    let (_, _, message) = condition(&lost, "Available").expect("an Available condition");
    for part in [
        "every member is gone",
        "EtcdSnapshot",
        r#""survivor":{}"#,
        r#""snapshot":{"name":"<snapshot>"}"#,
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
    assert!(env.pods(&ns, name).await.is_empty(), "a member Pod exists");
    // Nothing of the data was touched: the members and their claims are all still there.
    assert_eq!(env.member_names(&ns, name).await, members);
    let now: Vec<String> = env
        .pvcs(&ns, name)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(now, claims);

    // Pods may be created again: the member controller brings them back on their claims.
    quotas
        .delete("no-pods", &DeleteParams::default())
        .await
        .or_panic();
    let back = env.wait_healthy(&ns, name, 3, BOOT).await;
    for t in ["Available", "Progressing", "Degraded"] {
        let (_, reason, _) = condition(&back, t).expect("the condition");
        assert_ne!(reason, "AllMembersLost", "{t}");
    }
    assert_eq!(env.member_names(&ns, name).await, members);
    env.check_keys(&ns, name, &keys).await;
}
