//! The upgrade a user makes: the chart and operator of an earlier commit (`tools/upgrade-from`,
//! the last commit before the install path's changes) installed with helm, a 3-member cluster
//! running under it, then `helm upgrade --reset-then-reuse-values` to this repository's chart as
//! docs/installation.md says. The new controller takes the cluster over without restarting or
//! replacing a member: the same Pods (UIDs, restart counts), EtcdMembers and data PVCs, every
//! key kept, and the cluster still managed (a write after the upgrade).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tests::env::ControlPlane;
use tests::harness::eventually;
use tests::install::{chart_image, restart_count, upgrade_from, Installed, CONTROLLER, WEBHOOK};
use tests::OrPanic;

/// The etcd release the testbins build (the pod runner maps its image).
const VERSION: &str = "3.6.16";
const CLUSTER: &str = "kept";
/// The controller's admin port (the chart's `--admin-listen`).
const ADMIN_PORT: u16 = 8081;

/// What a member restart or replacement would change: each member Pod's UID and restart count,
/// each EtcdMember's UID, each data PVC's UID.
#[derive(Debug, PartialEq, Eq)]
struct Members {
    pods: BTreeMap<String, (String, i32)>,
    members: BTreeMap<String, String>,
    claims: BTreeMap<String, String>,
}

async fn members(client: &Client, ns: &str) -> Members {
    let selector = format!("{}={CLUSTER}", api::labels::CLUSTER);
    let lp = ListParams::default().labels(&selector);
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .or_panic();
    let pods = pods
        .items
        .iter()
        .map(|p| {
            (
                p.name_any(),
                (p.uid().unwrap_or_default(), restart_count(p)),
            )
        })
        .collect();
    let uids = |names: Vec<(String, Option<String>)>| -> BTreeMap<String, String> {
        names
            .into_iter()
            .map(|(n, u)| (n, u.unwrap_or_default()))
            .collect()
    };
    let members = Api::<EtcdMember>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .or_panic();
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .or_panic();
    Members {
        pods,
        members: uids(
            members
                .items
                .iter()
                .map(|m| (m.name_any(), m.uid()))
                .collect(),
        ),
        claims: uids(
            claims
                .items
                .iter()
                .map(|c| (c.name_any(), c.uid()))
                .collect(),
        ),
    }
}

fn image_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// `etcd_operator_reconciles_total` of `controller`, summed over results, from a controller Pod.
async fn reconciles(pod: &Pod, controller: &str) -> Result<f64, String> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .ok_or("the controller Pod has no IP yet")?;
    let addr = SocketAddr::new(ip.parse().map_err(|e| format!("{ip}: {e}"))?, ADMIN_PORT);
    let (code, body) = tests::webhook::http_get(addr, "/metrics")
        .await
        .map_err(|e| format!("GET {addr}/metrics: {e}"))?;
    if code != 200 {
        return Err(format!("GET {addr}/metrics: {code}"));
    }
    let label = format!("controller=\"{controller}\"");
    Ok(body
        .lines()
        .filter(|l| l.starts_with("etcd_operator_reconciles_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_from_the_previous_chart_restarts_no_member() {
    let from = upgrade_from().or_panic();
    let env = Installed::start_with_images(
        ControlPlane::builder(),
        &[(from.image.as_str(), from.layout.clone())],
    )
    .await
    .or_panic();
    let client = env.client();
    let commit = &from.commit[..12.min(from.commit.len())];

    // 1. The earlier chart, with its webhook on cert-manager's certificates.
    env.install_chart(
        &from.chart,
        &[
            "webhook.enabled=true",
            "webhook.certificate.mode=certManager",
        ],
    )
    .await
    .or_panic();
    let old = env.wait_rolled_out(CONTROLLER, 1).await;
    assert_eq!(
        image_of(&old[0]),
        from.image,
        "the chart of {commit} runs its own image"
    );

    // 2. A cluster it made, with keys.
    let ns = env.namespace("upgrade").await;
    env.create_cluster(&ns, CLUSTER, json!({"replicas": 3, "version": VERSION}))
        .await;
    env.wait_healthy(&ns, CLUSTER, 3).await;
    let keys = env.write_keys(&ns, CLUSTER, 30).await;
    let before = members(&client, &ns).await;
    assert_eq!(before.pods.len(), 3, "{before:?}");
    assert_eq!(before.members.len(), 3, "{before:?}");
    assert_eq!(before.claims.len(), 3, "{before:?}");

    // 3. helm upgrade to this chart, as docs/installation.md says.
    env.upgrade_to_this_chart(&[]).await.or_panic();
    let new = env.wait_rolled_out(CONTROLLER, 1).await;
    let want = chart_image().or_panic();
    assert_eq!(
        image_of(&new[0]),
        want,
        "the upgraded chart runs this image"
    );
    let webhooks = env.wait_rolled_out(WEBHOOK, 2).await;
    assert!(
        webhooks.iter().all(|p| image_of(p) == want),
        "the webhook runs this image after the upgrade"
    );

    // 4. The new controller has looked at the cluster and every member (the first reconciles
    // after its start), and once more after a change of the cluster's metadata.
    let pod = &new[0];
    let first = eventually(
        "the upgraded controller to reconcile the cluster and its three members",
        Duration::from_secs(120),
        || async {
            let cluster = reconciles(pod, "etcdcluster").await?;
            let member = reconciles(pod, "etcdmember").await?;
            if cluster >= 1.0 && member >= 3.0 {
                Ok(cluster)
            } else {
                Err(format!(
                    "reconciles: etcdcluster {cluster}, etcdmember {member}"
                ))
            }
        },
    )
    .await;
    Api::<EtcdCluster>::namespaced(client.clone(), &ns)
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"example.com/upgraded": "yes"}}})),
        )
        .await
        .or_panic();
    eventually(
        "the upgraded controller to reconcile the annotated cluster",
        Duration::from_secs(60),
        || async {
            let n = reconciles(pod, "etcdcluster").await?;
            if n > first {
                Ok(())
            } else {
                Err(format!("etcdcluster reconciles still {n}"))
            }
        },
    )
    .await;

    // 5. No member restarted or replaced, now and for a while (a rollout would start within a
    // reconcile or two); the keys are there and the cluster still takes writes.
    for _ in 0..15 {
        let now = members(&client, &ns).await;
        assert_eq!(
            now, before,
            "a member Pod, EtcdMember or PVC changed after the upgrade from {commit}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    env.wait_healthy(&ns, CLUSTER, 3).await;
    env.check_keys(&ns, CLUSTER, &keys).await;
    let more = env.write_keys(&ns, CLUSTER, 5).await;
    env.check_keys(&ns, CLUSTER, &more).await;
}
