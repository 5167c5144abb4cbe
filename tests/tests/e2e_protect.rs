//! Protection against stray deletes, end to end, with the chart installed by helm (controller and
//! webhook as the chart's Pods, their ServiceAccounts and RBAC) on the test control plane's
//! Kubernetes (1.30+: the chart's ValidatingAdmissionPolicy is served):
//! - `kubectl delete etcdmember` by a user is refused, by the ValidatingAdmissionPolicy and, with
//!   the policy's binding gone, by the webhook, each naming the break-glass annotation; with the
//!   annotation (which a user may set through the webhook's EtcdMember guard) the member is
//!   removed from etcd, its PVC deleted and a new member added, every key kept; deleting the
//!   EtcdCluster still deletes its members and their PVCs.
//! - With `memberDeletionProtection.enabled=false`, deleting an EtcdMember keeps its PVC (the
//!   same object throughout) and its place in etcd: the operator re-creates the member on that
//!   data under its etcd member ID, and the member's own data holds every key.
//!
//! - On a control plane whose kube-controller-manager acts under an identity the chart does not
//!   name (a distribution other than kubeadm's), deleting a protected EtcdCluster, with the
//!   webhook on, still deletes every member and PVC: the cluster's cleanup finalizer deletes its
//!   members as the operator, whatever the garbage collector's identity.
//!
//! The test control plane runs kube-controller-manager as kubeadm does (its own user, each
//! controller under its own ServiceAccount), so its garbage collector deletes as
//! `system:serviceaccount:kube-system:generic-garbage-collector`. The user refused is `alice` of
//! `system:masters` (impersonated): a cluster admin is refused like anyone.

use std::collections::BTreeMap;
use std::time::Duration;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::e2e::{member_view, read_member_keys};
use tests::env::{ControlPlane, ControllerIdentity};
use tests::harness::eventually_every;
use tests::install::{installed, Installed, RELEASE, WEBHOOK};
use tests::OrPanic;
use tokio::sync::OnceCell;

/// The etcd release the testbins build (the pod runner maps its image).
const VERSION: &str = "3.6.16";
const POLICY: &str = "etcd-operator-member-deletion-protection";
const SETTLE: Duration = Duration::from_secs(240);

fn selector(cluster: &str) -> ListParams {
    ListParams::default().labels(&labels::cluster_selector(cluster))
}

async fn members(env: &Installed, ns: &str, cluster: &str) -> Vec<EtcdMember> {
    Api::<EtcdMember>::namespaced(env.client(), ns)
        .list(&selector(cluster))
        .await
        .or_panic()
        .items
}

async fn claims(env: &Installed, ns: &str, cluster: &str) -> Vec<PersistentVolumeClaim> {
    Api::<PersistentVolumeClaim>::namespaced(env.client(), ns)
        .list(&selector(cluster))
        .await
        .or_panic()
        .items
}

/// A 3-member cluster, Ready, with keys written.
async fn cluster_with_keys(env: &Installed, ns: &str, name: &str) -> BTreeMap<String, String> {
    env.create_cluster(ns, name, json!({"version": VERSION, "replicas": 3}))
        .await;
    env.wait_healthy(ns, name, 3).await;
    env.write_keys(ns, name, 60).await
}

/// A cluster admin who is neither the operator nor a Kubernetes controller.
const USER: [&str; 2] = ["--as=alice", "--as-group=system:masters"];

/// `kubectl delete etcdmember <member>` as [`USER`]: (success, output).
async fn kubectl_delete_member(env: &Installed, ns: &str, member: &str) -> (bool, String) {
    let mut args = vec!["delete", "etcdmember", member, "-n", ns, "--wait=false"];
    args.extend(USER);
    let out = env.cp.kubectl(&args).await.or_panic();
    (out.success, format!("{}{}", out.stdout, out.stderr))
}

fn assert_names_break_glass(what: &str, output: &str, ns: &str, member: &str) {
    let command = format!(
        "kubectl annotate etcdmember {member} -n {ns} {}=true",
        labels::ALLOW_DELETION_ANNOTATION
    );
    assert!(
        output.contains(&command),
        "{what}: the refusal does not name the break-glass command {command:?}:\n{output}"
    );
}

/// The chart with the webhook (helm-issued certificate) and the default protection, no user
/// added; the policy rendered.
async fn install_protected(env: &Installed) {
    env.install(&["webhook.enabled=true", "webhook.certificate.mode=helm"])
        .await
        .or_panic();
    env.wait_rolled_out(WEBHOOK, 2).await;
    Api::<ValidatingAdmissionPolicy>::all(env.client())
        .get(POLICY)
        .await
        .unwrap_or_else(|e| {
            panic!("the chart rendered no ValidatingAdmissionPolicy {POLICY}: {e}")
        });
}

/// Data PVCs carry no owner reference and their member's UID; the cluster its cleanup finalizer.
async fn assert_claims_owned_by_nothing(env: &Installed, ns: &str, cluster: &str) {
    let members = members(env, ns, cluster).await;
    let claims = claims(env, ns, cluster).await;
    assert_eq!(
        claims.len(),
        members.len(),
        "one PVC per member: {claims:?}"
    );
    for m in &members {
        let pvc = claims
            .iter()
            .find(|c| c.name_any() == labels::pvc_name(&m.name_any()))
            .unwrap_or_else(|| panic!("no PVC for member {}", m.name_any()));
        assert!(
            pvc.owner_references().is_empty(),
            "PVC {} has owners {:?}: deleting its EtcdMember would take the data",
            pvc.name_any(),
            pvc.owner_references()
        );
        assert_eq!(
            pvc.annotations().get(labels::MEMBER_UID_ANNOTATION),
            m.uid().as_ref(),
            "PVC {} is not marked with its member's UID",
            pvc.name_any()
        );
    }
    let c = Api::<EtcdCluster>::namespaced(env.client(), ns)
        .get(cluster)
        .await
        .or_panic();
    assert!(
        c.finalizers()
            .iter()
            .any(|f| f == labels::CLUSTER_CLEANUP_FINALIZER),
        "the cluster lacks its cleanup finalizer: {:?}",
        c.finalizers()
    );
}

/// Delete the cluster with the operator running and wait until it, its members and every PVC
/// labelled with it are gone.
async fn delete_cluster_and_its_data(env: &Installed, ns: &str, cluster: &str) {
    env.cp
        .kubectl_ok(&["delete", "etcdcluster", cluster, "-n", ns, "--wait=false"])
        .await
        .or_panic();
    eventually_every(
        &format!("{ns}/{cluster}, its members and its PVCs deleted"),
        SETTLE,
        Duration::from_secs(1),
        || async {
            let left_cluster = Api::<EtcdCluster>::namespaced(env.client(), ns)
                .get_opt(cluster)
                .await
                .or_panic()
                .map(|c| c.finalizers().to_vec());
            let left_members: Vec<String> = members(env, ns, cluster)
                .await
                .iter()
                .map(|m| m.name_any())
                .collect();
            let left_claims: Vec<String> = claims(env, ns, cluster)
                .await
                .iter()
                .map(|c| c.name_any())
                .collect();
            if left_cluster.is_none() && left_members.is_empty() && left_claims.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "cluster (finalizers) {left_cluster:?}, members {left_members:?}, PVCs \
                     {left_claims:?}"
                ))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_cannot_delete_a_member_without_the_break_glass_and_the_cluster_still_cleans_up() {
    let env = installed().await;
    let _turn = env.turn().await;
    let client = env.client();
    install_protected(env).await;

    let ns = env.namespace("protect").await;
    let keys = cluster_with_keys(env, &ns, "guarded").await;
    assert_claims_owned_by_nothing(env, &ns, "guarded").await;
    let victim = members(env, &ns, "guarded").await[0].name_any();
    let victim_uid = members(env, &ns, "guarded").await[0].uid();

    // Refused by the ValidatingAdmissionPolicy (it runs before the webhooks).
    let (deleted, output) = kubectl_delete_member(env, &ns, &victim).await;
    assert!(!deleted, "a user deleted EtcdMember {victim}:\n{output}");
    assert!(
        output.contains(POLICY),
        "the refusal is not the ValidatingAdmissionPolicy's:\n{output}"
    );
    assert_names_break_glass("the policy", &output, &ns, &victim);

    let still = Api::<EtcdMember>::namespaced(client.clone(), &ns)
        .get(&victim)
        .await
        .or_panic();
    assert!(
        still.metadata.deletion_timestamp.is_none() && still.uid() == victim_uid,
        "the refused deletion went through"
    );

    // The break-glass: a user may set it (the webhook's EtcdMember guard lets that one change
    // through), and then delete the member past the policy and the webhook: it is removed from
    // etcd and replaced, its PVC deleted, no key lost.
    let annotation = format!("{}=true", labels::ALLOW_DELETION_ANNOTATION);
    let mut annotate = vec![
        "annotate",
        "etcdmember",
        victim.as_str(),
        "-n",
        ns.as_str(),
        annotation.as_str(),
    ];
    annotate.extend(USER);
    env.cp.kubectl_ok(&annotate).await.or_panic();
    let (deleted, output) = kubectl_delete_member(env, &ns, &victim).await;
    assert!(
        deleted,
        "the annotated member's deletion was refused:\n{output}"
    );
    eventually_every(
        &format!("{victim} replaced and its PVC deleted"),
        SETTLE,
        Duration::from_secs(1),
        || async {
            let names: Vec<String> = members(env, &ns, "guarded")
                .await
                .iter()
                .map(|m| m.name_any())
                .collect();
            let pvcs: Vec<String> = claims(env, &ns, "guarded")
                .await
                .iter()
                .map(|c| c.name_any())
                .collect();
            let replaced = names.len() == 3 && !names.contains(&victim);
            if replaced && !pvcs.contains(&labels::pvc_name(&victim)) {
                Ok(())
            } else {
                Err(format!("members {names:?}, PVCs {pvcs:?}"))
            }
        },
    )
    .await;
    env.wait_healthy(&ns, "guarded", 3).await;
    env.check_keys(&ns, "guarded", &keys).await;
    assert_claims_owned_by_nothing(env, &ns, "guarded").await;

    // Without the policy's binding (as below Kubernetes 1.30), the webhook refuses the same.
    let other = members(env, &ns, "guarded").await[0].name_any();
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .delete(POLICY, &Default::default())
        .await
        .or_panic();
    let (deleted, output) = eventually_every(
        "the webhook to refuse the deletion once the policy's binding is gone",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let (deleted, output) = kubectl_delete_member(env, &ns, &other).await;
            if deleted || output.contains("validate.etcd-operator.cozystack.io") {
                Ok((deleted, output))
            } else {
                Err(output)
            }
        },
    )
    .await;
    assert!(!deleted, "a user deleted EtcdMember {other}:\n{output}");
    assert_names_break_glass("the webhook", &output, &ns, &other);

    // Deleting the cluster still deletes everything, its data included.
    delete_cluster_and_its_data(env, &ns, "guarded").await;
    env.uninstall().await.or_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_protection_off_a_deleted_member_keeps_its_pvc_and_comes_back_on_its_data() {
    let env = installed().await;
    let _turn = env.turn().await;
    let client = env.client();
    env.install(&["memberDeletionProtection.enabled=false"])
        .await
        .or_panic();
    assert!(
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .get_opt(POLICY)
            .await
            .or_panic()
            .is_none(),
        "memberDeletionProtection.enabled=false still rendered the policy (release {RELEASE})"
    );

    let ns = env.namespace("unguarded").await;
    let keys = cluster_with_keys(env, &ns, "open").await;
    let victim = members(env, &ns, "open").await[0].clone();
    let name = victim.name_any();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pods.get(&name).await.or_panic();
    // etcd's own word for the member's ID, not the operator's status.
    let member_id = member_view(&pod).await.or_panic().member_id;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc_uid = pvcs.get(&labels::pvc_name(&name)).await.or_panic().uid();

    let (deleted, output) = kubectl_delete_member(env, &ns, &name).await;
    assert!(
        deleted,
        "with protection off the deletion was refused:\n{output}"
    );
    // (The webhook is off in this install: the delete reaches the API as it would on a
    // cluster without any protection.)
    // The object goes (its finalizer does not remove the member from etcd), the PVC stays, and
    // the operator re-creates the member under the same name on that PVC.
    let members_api: Api<EtcdMember> = Api::namespaced(client.clone(), &ns);
    let again = eventually_every(
        &format!("{name} re-created on its PVC"),
        SETTLE,
        Duration::from_secs(1),
        || async {
            let claim = pvcs.get_opt(&labels::pvc_name(&name)).await.or_panic();
            match &claim {
                Some(c) if c.uid() == pvc_uid && c.metadata.deletion_timestamp.is_none() => {}
                other => panic!(
                    "the PVC of {name} was not kept: {:?}",
                    other
                        .as_ref()
                        .map(|c| (c.uid(), c.metadata.deletion_timestamp.clone()))
                ),
            }
            match members_api.get_opt(&name).await.or_panic() {
                Some(m) if m.uid() != victim.uid() => Ok(m),
                Some(_) => Err("the old object is still there".to_string()),
                None => Err("no member object".to_string()),
            }
        },
    )
    .await;
    assert_eq!(
        again.annotations().get(labels::REATTACH_ANNOTATION),
        victim.uid().as_ref(),
        "the re-created member does not name the PVC it re-attaches to"
    );
    env.wait_healthy(&ns, "open", 3).await;
    let names: Vec<String> = members(env, &ns, "open")
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    assert!(
        names.contains(&name) && names.len() == 3,
        "members after the re-attach: {names:?}"
    );
    let pvc = pvcs.get(&labels::pvc_name(&name)).await.or_panic();
    assert_eq!(pvc.uid(), pvc_uid, "the PVC was replaced");
    assert_eq!(
        pvc.annotations().get(labels::MEMBER_UID_ANNOTATION),
        again.uid().as_ref(),
        "the re-created member did not adopt the PVC"
    );
    // The same etcd member, restarted on its own data: its ID as etcd reports it, and every
    // key read from its own endpoint.
    let pod = pods.get(&name).await.or_panic();
    let view = member_view(&pod).await.or_panic();
    assert_eq!(
        view.member_id, member_id,
        "{name} came back as another etcd member"
    );
    let own = read_member_keys(&pod, "e2e/").await;
    for (k, v) in &keys {
        assert_eq!(own.get(k), Some(v), "{name}'s own data lacks {k}");
    }
    env.check_keys(&ns, "open", &keys).await;

    delete_cluster_and_its_data(env, &ns, "open").await;
    env.uninstall().await.or_panic();
}

/// A distribution's kube-controller-manager acting as one user the chart's protection does not
/// name (not kubeadm's `system:kube-controller-manager` nor its per-controller ServiceAccounts).
const OTHER_CONTROLLERS: &str = "distribution:kube-controller-manager";

/// The chart installed on a control plane whose controllers act as [`OTHER_CONTROLLERS`]: its
/// own environment, apart from [`installed`].
async fn installed_elsewhere() -> &'static Installed {
    static ENV: OnceCell<Installed> = OnceCell::const_new();
    ENV.get_or_init(|| async {
        Installed::start_with(
            ControlPlane::builder()
                .controller_identity(ControllerIdentity::User(OTHER_CONTROLLERS)),
        )
        .await
        .or_panic()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_protected_cluster_deletes_its_members_whatever_identity_the_garbage_collector_has(
) {
    let env = installed_elsewhere().await;
    let _turn = env.turn().await;
    // Protection on (the default) and no user added: the garbage collector, acting as
    // OTHER_CONTROLLERS, is refused every EtcdMember deletion.
    install_protected(env).await;
    let client = env.client();

    let ns = env.namespace("collected").await;
    cluster_with_keys(env, &ns, "elsewhere").await;
    assert_eq!(members(env, &ns, "elsewhere").await.len(), 3);
    assert_eq!(claims(env, &ns, "elsewhere").await.len(), 3);

    // The garbage collector's own attempt is refused (the policy names the user): the cluster
    // still goes with its members, their Pods and their PVCs.
    let (deleted, output) = {
        let victim = members(env, &ns, "elsewhere").await[0].name_any();
        let args = [
            "delete",
            "etcdmember",
            victim.as_str(),
            "-n",
            ns.as_str(),
            "--wait=false",
            "--dry-run=server",
            "--as",
            OTHER_CONTROLLERS,
            "--as-group=system:masters",
        ];
        let out = env.cp.kubectl(&args).await.or_panic();
        (out.success, format!("{}{}", out.stdout, out.stderr))
    };
    assert!(
        !deleted && output.contains(OTHER_CONTROLLERS),
        "the protection let {OTHER_CONTROLLERS} delete a member, so this test shows nothing:\n{output}"
    );
    delete_cluster_and_its_data(env, &ns, "elsewhere").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&selector("elsewhere"))
        .await
        .or_panic()
        .items;
    assert!(
        pods.is_empty(),
        "member Pods left after the cluster went: {:?}",
        pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    env.uninstall().await.or_panic();
}
