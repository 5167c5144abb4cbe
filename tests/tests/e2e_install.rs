//! The install paths, end to end: `helm install` of `charts/etcd-operator` into a real
//! kube-apiserver, the controller and webhook running as the chart's own Pods (the pod runner maps
//! the chart's image to the cargo-built binaries and hands the Pods ServiceAccount tokens), the
//! real cert-manager issuing and renewing the webhook's serving certificate, the apiserver calling
//! the webhook through its Service, etcd clusters managed by the in-cluster controller.
//!
//! docs/installation.md shows the same commands; what a user types is what runs here.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use api::v1alpha2::EtcdCluster;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use tests::e2e::Start;
use tests::env::{ControlPlane, Kubernetes};
use tests::harness::eventually;
use tests::install::{
    installed, manager_logs_args, Installed, CONTROLLER, IMAGE_REPOSITORY, NAMESPACE, RELEASE,
    WEBHOOK,
};
use tests::OrPanic;

/// The etcd release the testbins build (the pod runner maps its image).
const VERSION: &str = "3.6.16";

/// An EtcdCluster manifest, as a user writes it; `spec` is the YAML under `spec:`, indented.
fn cluster_manifest(ns: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: etcd-operator.cozystack.io/v1alpha2\nkind: EtcdCluster\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{spec}"
    )
}

/// An EtcdCluster with three problems at once: the webhook names every one.
fn invalid_cluster(ns: &str, name: &str) -> String {
    cluster_manifest(
        ns,
        name,
        "  version: v3.6\n  replicas: -1\n  progressDeadlineSeconds: 0\n",
    )
}

/// A Memory cluster of 0 replicas: the CRD's CEL rule refuses it, naming `spec.replicas`.
fn paused_memory_cluster(ns: &str, name: &str, version: &str) -> String {
    cluster_manifest(
        ns,
        name,
        &format!("  version: \"{version}\"\n  replicas: 0\n  storage:\n    size: 256Mi\n    medium: Memory\n"),
    )
}

/// What the webhook says of [`invalid_cluster`], one line per violation (value and fix).
const WEBHOOK_VIOLATIONS: &[&str] = &[
    "spec.replicas: must be 0 or more (got -1); set the number of members",
    "spec.version: must be an etcd release as X.Y.Z",
    "spec.progressDeadlineSeconds: must be at least 1 (got 0)",
];

/// `kubectl apply -f <file>` of `manifest`; returns (success, stdout + stderr).
async fn kubectl_apply(cp: &ControlPlane, manifest: &str) -> (bool, String) {
    let file = tempfile::NamedTempFile::new_in(cp.root()).or_panic();
    std::fs::write(file.path(), manifest).or_panic();
    let out = cp
        .kubectl(&["apply", "-f", &file.path().to_string_lossy()])
        .await
        .or_panic();
    (out.success, format!("{}{}", out.stdout, out.stderr))
}

fn assert_webhook_denial(what: &str, output: &str) {
    for line in WEBHOOK_VIOLATIONS {
        assert!(
            output.contains(line),
            "{what}: the webhook's violation {line:?} is not in kubectl's output:\n{output}"
        );
    }
}

/// The serving certificate the webhook Pod at `ip` presents on 8443, verified against `ca_pem`
/// for the Service's DNS name (what the apiserver checks).
async fn served_certificate(ip: IpAddr, ca_pem: &[u8]) -> Result<CertificateDer<'static>, String> {
    let config = certs::client::client_config_from_pem(ca_pem, None, "the webhook CA")
        .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from(format!("{WEBHOOK}.{NAMESPACE}.svc")).or_panic();
    let tcp = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(SocketAddr::new(ip, 8443)),
    )
    .await
    .map_err(|_| format!("connecting to {ip}:8443 timed out"))?
    .map_err(|e| format!("connecting to {ip}:8443: {e}"))?;
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {ip}:8443: {e}"))?;
    let (_, session) = tls.get_ref();
    session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.clone().into_owned())
        .ok_or_else(|| "no peer certificate".to_string())
}

/// Wait until every Pod serves `want` (verified against `ca_pem`).
async fn wait_serving(pods: &[Pod], ca_pem: &[u8], want: &CertificateDer<'static>, what: &str) {
    for p in pods {
        let ip = pod_ip(p);
        eventually(
            &format!("webhook Pod {} to serve {what}", p.name_any()),
            Duration::from_secs(90),
            || async move {
                let served = served_certificate(ip, ca_pem).await?;
                if &served == want {
                    Ok(())
                } else {
                    Err("another certificate".into())
                }
            },
        )
        .await;
    }
}

/// `name → uid` of every Pod in `ns`: the same objects, not merely the same names.
async fn pod_uids(client: &Client, ns: &str) -> BTreeMap<String, String> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await;
    tests::rollout::uids(&pods.or_panic().items)
}

fn pod_ip(p: &Pod) -> IpAddr {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok())
        .unwrap_or_else(|| panic!("Pod {} has no IP", p.name_any()))
}

fn secret_key(secret: &Secret, key: &str) -> Vec<u8> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_else(|| panic!("Secret {} has no {key}", secret.name_any()))
}

fn first_cert_der(pem: &[u8]) -> CertificateDer<'static> {
    certs::pem::parse_certificates(pem, std::path::Path::new("tls.crt"))
        .or_panic()
        .into_iter()
        .next()
        .or_panic_none("no certificate in tls.crt")
}

trait OrPanicNone<T> {
    fn or_panic_none(self, what: &str) -> T;
}

impl<T> OrPanicNone<T> for Option<T> {
    #[track_caller]
    fn or_panic_none(self, what: &str) -> T {
        self.unwrap_or_else(|| panic!("{what}"))
    }
}

/// The caBundle of the release's validating and mutating configurations (both webhooks).
async fn ca_bundles(client: &Client) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&Default::default())
        .await
        .or_panic();
    for c in v.items {
        for w in c.webhooks.unwrap_or_default() {
            out.push(w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default());
        }
    }
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&Default::default())
        .await
        .or_panic();
    for c in m.items {
        for w in c.webhooks.unwrap_or_default() {
            out.push(w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default());
        }
    }
    out
}

fn certificate_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// Server-side dry-run creates of a valid and an invalid cluster, every 200 ms, until `stop`:
/// each must get the webhook's own answer. Returns the number of rounds and every wrong answer.
fn probe_admission(
    client: Client,
    ns: String,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    tokio::spawn(async move {
        let api: Api<EtcdCluster> = Api::namespaced(client, &ns);
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let good: EtcdCluster = serde_json::from_value(json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
            "metadata": {"name": "probe-good", "namespace": ns},
            "spec": {"version": VERSION, "replicas": 3}
        }))
        .or_panic();
        let bad: EtcdCluster = serde_json::from_value(json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
            "metadata": {"name": "probe-bad", "namespace": ns},
            "spec": {"version": VERSION, "replicas": 3, "progressDeadlineSeconds": 0}
        }))
        .or_panic();
        let mut rounds = 0;
        let mut wrong = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            rounds += 1;
            match api.create(&dry, &good).await {
                Ok(c) if c.spec.affinity.is_some() => {}
                Ok(_) => wrong.push(format!(
                    "round {rounds}: admitted without the webhook's defaults"
                )),
                Err(e) => wrong.push(format!("round {rounds}: a valid cluster was refused: {e}")),
            }
            match api.create(&dry, &bad).await {
                Err(kube::Error::Api(s))
                    if s.message
                        .contains("spec.progressDeadlineSeconds: must be at least 1 (got 0)") => {}
                other => wrong.push(format!(
                    "round {rounds}: an invalid cluster got {:?}",
                    other.map(|_| "admitted")
                )),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (rounds, wrong)
    })
}

/// The path a user takes with `webhook.enabled=true` and cert-manager: install, rich denials,
/// defaults, a cluster run by the in-cluster controller, a forced certificate renewal picked up
/// with no failed admission, an image upgrade that rolls both Deployments while the cluster keeps
/// serving, the webhook down with CEL still guarding, and an uninstall that keeps the data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_manager_install_serves_renews_upgrades_and_uninstalls() {
    let env = installed().await;
    let _turn = env.turn().await;
    let client = env.client();
    let cp = &env.cp;

    // 1. helm install with the webhook and cert-manager-issued certificates. --wait returns when
    // every Deployment is ready; the webhook Pods can only be Ready once cert-manager has issued
    // their Secret.
    let notes = env
        .install(&[
            "webhook.enabled=true",
            "webhook.certificate.mode=certManager",
        ])
        .await
        .or_panic();
    assert!(
        notes.contains(&format!("deploy/{CONTROLLER}")),
        "NOTES do not print the next commands:\n{notes}"
    );
    let webhook_pods = env.wait_rolled_out(WEBHOOK, 2).await;
    env.wait_rolled_out(CONTROLLER, 1).await;
    let nodes: std::collections::BTreeSet<_> = webhook_pods
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    assert_eq!(
        nodes.len(),
        2,
        "the webhook Pods share a Node despite anti-affinity"
    );

    // cainjector filled every caBundle with the CA that signed the serving certificate.
    let vwc = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&Default::default())
        .await
        .or_panic();
    let inject = vwc
        .items
        .iter()
        .find_map(|c| {
            c.annotations()
                .get("cert-manager.io/inject-ca-from")
                .cloned()
        })
        .or_panic_none("no ValidatingWebhookConfiguration carries cert-manager.io/inject-ca-from");
    let (cert_ns, cert_name) = inject
        .split_once('/')
        .or_panic_none("inject-ca-from is not ns/name");
    let certificate = certificate_api(&client, cert_ns)
        .get(cert_name)
        .await
        .or_panic();
    let secret_name = certificate.data["spec"]["secretName"]
        .as_str()
        .or_panic_none("Certificate without secretName")
        .to_string();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), cert_ns);
    let issued = secrets.get(&secret_name).await.or_panic();
    let ca = secret_key(&issued, "ca.crt");
    let bundles = eventually(
        "cainjector to fill both caBundles",
        Duration::from_secs(60),
        || {
            let client = client.clone();
            async move {
                let b = ca_bundles(&client).await;
                if b.len() >= 2 && b.iter().all(|x| !x.is_empty()) {
                    Ok(b)
                } else {
                    Err(format!("{} webhooks, some without caBundle", b.len()))
                }
            }
        },
    )
    .await;
    for b in &bundles {
        assert_eq!(
            first_cert_der(b),
            first_cert_der(&ca),
            "a caBundle is not the CA cert-manager issued from"
        );
    }

    // 2. A bad object through kubectl: the webhook's rich message, every violation at once.
    let ns = env.namespace("install").await;
    let (ok, out) = kubectl_apply(cp, &invalid_cluster(&ns, "broken")).await;
    assert!(!ok, "an invalid cluster was accepted:\n{out}");
    assert_webhook_denial("kubectl apply of an invalid cluster", &out);

    // 3. Defaults on a Memory cluster (server-side dry run: the stored object as it would be).
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    let memory: EtcdCluster = serde_json::from_value(json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
        "metadata": {"name": "tmpfs", "namespace": ns},
        "spec": {"version": VERSION, "replicas": 3, "storage": {"size": "1Gi", "medium": "Memory"}}
    }))
    .or_panic();
    let defaulted = clusters
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &memory,
        )
        .await
        .or_panic();
    let spec = serde_json::to_value(&defaulted.spec).or_panic();
    assert!(
        spec["affinity"]["podAntiAffinity"].is_object(),
        "no anti-affinity default: {spec}"
    );
    assert_eq!(
        spec["resources"]["limits"]["memory"],
        json!("1280Mi"),
        "the memory limit default is not storage + 256Mi: {spec}"
    );

    // 4. A sample cluster, run by the controller Pod (its own ServiceAccount, the chart's RBAC).
    env.create_cluster(&ns, "sample", json!({"version": VERSION, "replicas": 3}))
        .await;
    env.wait_healthy(&ns, "sample", 3).await;
    let keys = env.write_keys(&ns, "sample", 50).await;
    let args = manager_logs_args(&[]);
    let logs = cp
        .kubectl_ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await
        .or_panic();
    assert!(
        logs.contains("sample"),
        "`kubectl logs deploy/{CONTROLLER} -c manager` does not show the cluster:\n{logs}"
    );

    // 5. Renewal forced the way `cmctl renew` does it (Issuing=True on the status): a new serving
    // certificate lands in the Secret and both webhook Pods serve it, without a restart and
    // without one failed admission meanwhile.
    let before = first_cert_der(&secret_key(&issued, "tls.crt"));
    for p in &webhook_pods {
        assert_eq!(served_certificate(pod_ip(p), &ca).await.or_panic(), before);
    }
    let restarts = env.restarts(WEBHOOK).await;
    let stop = Arc::new(AtomicBool::new(false));
    let probe = probe_admission(client.clone(), ns.clone(), stop.clone());
    let generation = certificate.metadata.generation.unwrap_or(1);
    let issuing = json!({"status": {"conditions": [{
        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "observedGeneration": generation,
    }]}});
    certificate_api(&client, cert_ns)
        .patch_status(cert_name, &PatchParams::default(), &Patch::Merge(&issuing))
        .await
        .or_panic();
    let renewed = eventually(
        "cert-manager to re-issue the serving certificate",
        Duration::from_secs(90),
        || {
            let secrets = secrets.clone();
            let secret_name = secret_name.clone();
            let before = before.clone();
            async move {
                let s = secrets.get(&secret_name).await.map_err(|e| e.to_string())?;
                let now = first_cert_der(&secret_key(&s, "tls.crt"));
                if now != before {
                    Ok(now)
                } else {
                    Err("still the first certificate".into())
                }
            }
        },
    )
    .await;
    wait_serving(&webhook_pods, &ca, &renewed, "the renewed certificate").await;
    // A few more rounds through the renewed certificate.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (rounds, wrong) = probe.await.or_panic();
    assert!(
        rounds >= 5,
        "only {rounds} admission rounds ran during the renewal"
    );
    assert!(
        wrong.is_empty(),
        "admission failed during the renewal:\n{}",
        wrong.join("\n")
    );
    assert_eq!(
        env.restarts(WEBHOOK).await,
        restarts,
        "a webhook container restarted"
    );

    // 6. helm upgrade to another image tag: both Deployments roll to it, the cluster keeps
    // serving and keeps every key; no member Pod is replaced.
    let members_before = pod_uids(&client, &ns).await;
    let serving = Arc::new(AtomicUsize::new(0));
    let reads_stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (client, ns, stop, serving) = (
            client.clone(),
            ns.clone(),
            reads_stop.clone(),
            serving.clone(),
        );
        tokio::spawn(async move {
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let mut etcd = tests::e2e::etcd_client(&client, &ns, "sample").await;
                match etcd.get("e2e/0000", None).await {
                    Ok(r) if r.kvs().len() == 1 => {
                        serving.fetch_add(1, Ordering::Relaxed);
                    }
                    other => failures.push(format!("{:?}", other.map(|r| r.kvs().len()))),
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            failures
        })
    };
    env.upgrade(&["image.tag=v0.1.1-rc.1"]).await.or_panic();
    for (deployment, replicas) in [(CONTROLLER, 1), (WEBHOOK, 2)] {
        let pods = env.wait_rolled_out(deployment, replicas).await;
        for p in &pods {
            let image = p
                .spec
                .as_ref()
                .map(|s| s.containers[0].image.clone())
                .unwrap_or_default();
            assert_eq!(
                image.as_deref(),
                Some(format!("{IMAGE_REPOSITORY}:v0.1.1-rc.1").as_str()),
                "{deployment} Pod {} runs {image:?} after the upgrade",
                p.name_any()
            );
        }
    }
    let controller = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(CONTROLLER)
        .await
        .or_panic();
    let container = &controller
        .spec
        .and_then(|s| s.template.spec)
        .or_panic_none("no pod spec")
        .containers[0];
    let operator_image = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "OPERATOR_IMAGE")
        .and_then(|e| e.value.clone());
    assert_eq!(
        operator_image, container.image,
        "OPERATOR_IMAGE and the manager's image differ"
    );
    env.wait_healthy(&ns, "sample", 3).await;
    reads_stop.store(true, Ordering::Relaxed);
    let failures = reader.await.or_panic();
    assert!(
        failures.is_empty(),
        "reads failed during the upgrade: {failures:?}"
    );
    assert!(serving.load(Ordering::Relaxed) > 0);
    env.check_keys(&ns, "sample", &keys).await;
    let members_after = pod_uids(&client, &ns).await;
    assert_eq!(
        members_before, members_after,
        "the upgrade replaced member Pods"
    );
    // The new controller took over: with the old Pods gone, a scale 3 → 4 can only be made by
    // the upgraded controller, and the new member serves beside the three it kept.
    let new_controller: Vec<String> = env
        .deployment_pods(CONTROLLER)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    // No older controller process is left, not even a terminating Pod.
    let controller_pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
    eventually(
        "the old controller Pods to be gone",
        Duration::from_secs(120),
        || {
            let (controller_pods, new_controller) =
                (controller_pods.clone(), new_controller.clone());
            async move {
                let managers: Vec<String> = controller_pods
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .iter()
                    .filter(|p| {
                        p.spec
                            .as_ref()
                            .is_some_and(|s| s.containers.iter().any(|c| c.name == "manager"))
                    })
                    .map(|p| p.name_any())
                    .collect();
                if managers == new_controller {
                    Ok(())
                } else {
                    Err(format!(
                        "controller Pods {managers:?}, want {new_controller:?}"
                    ))
                }
            }
        },
    )
    .await;
    clusters
        .patch(
            "sample",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 4}})),
        )
        .await
        .or_panic();
    env.wait_healthy(&ns, "sample", 4).await;
    let members_scaled = pod_uids(&client, &ns).await;
    let added: Vec<&String> = members_scaled
        .keys()
        .filter(|p| !members_after.contains_key(*p))
        .collect();
    assert_eq!(
        added.len(),
        1,
        "the scale to 4 added {added:?}: {members_scaled:?}"
    );
    for (pod, uid) in &members_after {
        assert_eq!(
            members_scaled.get(pod),
            Some(uid),
            "the scale replaced member Pod {pod}"
        );
    }
    let added_pod = Api::<Pod>::namespaced(client.clone(), &ns)
        .get(added[0])
        .await
        .or_panic();
    assert!(
        tests::e2e::pod_ready(&added_pod),
        "the new member {} is not Ready",
        added[0]
    );
    assert_eq!(
        env.deployment_pods(CONTROLLER)
            .await
            .iter()
            .map(|p| p.name_any())
            .collect::<Vec<_>>(),
        new_controller,
        "the controller Pod changed during the scale"
    );
    env.check_keys(&ns, "sample", &keys).await;

    // 7. The webhook down (validation set to Ignore, scaled to 0): the CRD's CEL rules still
    // reject a bad object, naming the field; a good one is admitted.
    env.upgrade(&["webhook.validation.failurePolicy=Ignore"])
        .await
        .or_panic();
    cp.kubectl_ok(&[
        "scale",
        "-n",
        NAMESPACE,
        &format!("deploy/{WEBHOOK}"),
        "--replicas=0",
    ])
    .await
    .or_panic();
    env.wait_rolled_out(WEBHOOK, 0).await;
    let (ok, out) = kubectl_apply(cp, &paused_memory_cluster(&ns, "cel", VERSION)).await;
    assert!(
        !ok,
        "with the webhook down, a Memory cluster of 0 replicas was accepted:\n{out}"
    );
    assert!(
        out.contains("spec.replicas") && !out.contains("admission webhook"),
        "CEL's rejection does not name spec.replicas (or the webhook answered):\n{out}"
    );
    let (ok, out) = kubectl_apply(
        cp,
        &cluster_manifest(
            &ns,
            "fine",
            &format!(
                "  version: \"{VERSION}\"
  replicas: 1
"
            ),
        ),
    )
    .await;
    assert!(
        ok,
        "with the webhook down, a valid cluster was refused:\n{out}"
    );
    clusters
        .delete("fine", &Default::default())
        .await
        .or_panic();

    // 8. Switching certificate modes on a live release: cert-manager's Secret outlives its
    // Certificate (cert-manager does not delete it), so the chart's own must not collide with it.
    env.upgrade(&[
        "webhook.certificate.mode=helm",
        "webhook.validation.failurePolicy=Fail",
    ])
    .await
    .or_panic();
    let pods = env.wait_rolled_out(WEBHOOK, 2).await;
    let bundles = ca_bundles(&client).await;
    for p in &pods {
        let ca = bundles
            .first()
            .or_panic_none("no caBundle after switching to helm mode");
        served_certificate(pod_ip(p), ca)
            .await
            .unwrap_or_else(|e| panic!("after switching to helm mode: {e}"));
    }
    let (ok, out) = kubectl_apply(cp, &invalid_cluster(&ns, "broken")).await;
    assert!(
        !ok,
        "after switching to helm mode an invalid cluster was accepted:\n{out}"
    );
    assert_webhook_denial("after switching to helm mode", &out);

    // 9. helm uninstall: the CRDs, the EtcdCluster and every key stay.
    env.uninstall().await.or_panic();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in ["etcdclusters", "etcdmembers", "etcdsnapshots"] {
        crds.get(&format!("{crd}.etcd-operator.cozystack.io"))
            .await
            .unwrap_or_else(|e| panic!("helm uninstall removed the {crd} CRD: {e}"));
    }
    assert!(
        Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
            .get_opt(CONTROLLER)
            .await
            .or_panic()
            .is_none(),
        "the controller Deployment outlived helm uninstall"
    );
    clusters.get("sample").await.or_panic();
    env.check_keys(&ns, "sample", &keys).await;
    // Leave no cluster behind for the next scenario's controller (the CRDs stay).
    remove_clusters(env, &ns).await;
}

/// Delete the scenario's clusters with no operator running: drop the finalizers it would remove.
async fn remove_clusters(env: &Installed, ns: &str) {
    for kind in ["etcdmembers", "etcdclusters"] {
        let out = env
            .cp
            .kubectl(&["get", kind, "-n", ns, "-o", "name"])
            .await
            .or_panic();
        for name in out.stdout.lines().filter(|l| !l.is_empty()) {
            let _ = env
                .cp
                .kubectl(&[
                    "patch",
                    name,
                    "-n",
                    ns,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ])
                .await;
            let _ = env
                .cp
                .kubectl(&["delete", name, "-n", ns, "--wait=false"])
                .await;
        }
    }
}

/// `helm` mode (the chart mints the CA and serving certificate, stable across upgrades) and
/// `secret` mode (a Secret and caBundle the user brings) each admit a good object and deny a bad
/// one through the apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_and_secret_certificate_modes_admit_and_deny() {
    let env = installed().await;
    let _turn = env.turn().await;
    let client = env.client();
    let ns = env.namespace("modes").await;

    env.install(&["webhook.enabled=true", "webhook.certificate.mode=helm"])
        .await
        .or_panic();
    let pods = env.wait_rolled_out(WEBHOOK, 2).await;
    let bundles = ca_bundles(&client).await;
    assert!(
        bundles.len() >= 2 && bundles.iter().all(|b| !b.is_empty()),
        "helm mode left a caBundle empty"
    );
    for p in &pods {
        served_certificate(pod_ip(p), &bundles[0])
            .await
            .unwrap_or_else(|e| {
                panic!("helm mode: the caBundle does not verify the served certificate: {e}")
            });
    }
    admits_and_denies(env, &ns, "helm").await;

    // secret mode: a CA and serving certificate minted here, as a user's own PKI would.
    let ca = certs::mint::TestCa::new("etcd-operator webhook CA (BYO)").or_panic();
    let dns = [
        format!("{WEBHOOK}.{NAMESPACE}.svc"),
        format!("{WEBHOOK}.{NAMESPACE}.svc.cluster.local"),
    ];
    let serving = ca
        .server_cert(&dns.iter().map(String::as_str).collect::<Vec<_>>())
        .or_panic();
    let byo = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("webhook-byo-tls".into()),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        string_data: Some(BTreeMap::from([
            ("tls.crt".to_string(), serving.cert_pem.clone()),
            ("tls.key".to_string(), serving.key_pem.clone()),
        ])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &byo)
        .await
        .or_panic();
    // base64 of the CA's PEM, as `--set …caBundle=` takes it (ByteString serializes to base64).
    let ca_bundle =
        serde_json::to_value(k8s_openapi::ByteString(ca.cert_pem().as_bytes().to_vec()))
            .or_panic()
            .as_str()
            .or_panic_none("ByteString did not serialize to a string")
            .to_string();
    env.upgrade(&[
        "webhook.certificate.mode=secret",
        "webhook.certificate.secret.name=webhook-byo-tls",
        &format!("webhook.certificate.secret.caBundle={ca_bundle}"),
    ])
    .await
    .or_panic();
    let pods = env.wait_rolled_out(WEBHOOK, 2).await;
    for b in ca_bundles(&client).await {
        assert_eq!(
            first_cert_der(&b),
            first_cert_der(ca.cert_pem().as_bytes()),
            "secret mode: caBundle is not the BYO CA"
        );
    }
    wait_serving(
        &pods,
        ca.cert_pem().as_bytes(),
        &serving.cert_der,
        "the BYO certificate",
    )
    .await;
    admits_and_denies(env, &ns, "secret").await;

    env.uninstall().await.or_panic();
}

/// Through kubectl: a bad cluster gets the webhook's denial, a good one is admitted (server-side
/// dry run, so no controller work follows).
async fn admits_and_denies(env: &Installed, ns: &str, mode: &str) {
    let cp = &env.cp;
    let (ok, out) = kubectl_apply(cp, &invalid_cluster(ns, "broken")).await;
    assert!(!ok, "{mode} mode: an invalid cluster was accepted:\n{out}");
    assert_webhook_denial(&format!("{mode} mode"), &out);
    let file = tempfile::NamedTempFile::new_in(cp.root()).or_panic();
    std::fs::write(
        file.path(),
        cluster_manifest(
            ns,
            "good",
            &format!("  version: \"{VERSION}\"\n  replicas: 3\n"),
        ),
    )
    .or_panic();
    let out = cp
        .kubectl(&[
            "apply",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            &file.path().to_string_lossy(),
        ])
        .await
        .or_panic();
    assert!(
        out.success,
        "{mode} mode: a valid cluster was refused: {}",
        out.stderr
    );
    let v: Value = serde_json::from_str(&out.stdout).or_panic();
    assert!(
        v["spec"]["affinity"]["podAntiAffinity"].is_object(),
        "{mode} mode: the webhook's anti-affinity default is missing: {}",
        v["spec"]
    );
}

/// CEL only: `helm install` with the webhook off on Kubernetes 1.29; the CRDs' rules reject a
/// bad object naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_only_install_on_kubernetes_1_29_rejects_with_the_field() {
    // No CRDs (the chart brings them), no pod runner (nothing here runs a Pod).
    let cp = tests::e2e::stage_with(
        Start::default()
            .kubernetes(Kubernetes::V1_29)
            .without_crds()
            .without_pods(),
    )
    .await
    .cp;
    let helm = tests::helm::Helm::new(Some(cp.kubeconfig())).or_panic();
    helm.install_chart(RELEASE, NAMESPACE, &["webhook.enabled=false"])
        .await
        .or_panic();
    let client = cp.client().or_panic();
    assert!(
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .list(&Default::default())
            .await
            .or_panic()
            .items
            .is_empty(),
        "webhook.enabled=false registered a webhook"
    );
    let ns = cp.namespace("cel-only").await.or_panic();
    // helm returns before the CRDs are served (no --wait without Pods to wait for): retry
    // until the kind is known.
    let (ok, out) = eventually(
        "the EtcdCluster kind served",
        Duration::from_secs(10),
        || async {
            let (ok, out) = kubectl_apply(cp, &paused_memory_cluster(&ns, "bad", VERSION)).await;
            if out.contains("no matches for kind") || out.contains("the server could not find") {
                Err(out)
            } else {
                Ok((ok, out))
            }
        },
    )
    .await;
    assert!(
        !ok,
        "Kubernetes 1.29 without the webhook accepted a Memory cluster of 0 replicas:\n{out}"
    );
    assert!(
        out.contains("spec.replicas"),
        "the CEL rejection does not name spec.replicas:\n{out}"
    );
}
