//! Self-healing end to end: a member whose data directory is lost must neither form a new empty
//! cluster (the seed) nor rejoin with empty data; it crash-loops, and the operator replaces it
//! while the others keep quorum — with every key intact.

use std::time::Duration;

use kube::ResourceExt;
use tests::e2e::{env, spec};
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
