//! End to end: clusters with TLS from the user's own Secrets (BYO), minted in the test the way
//! docs/tls.md describes, and from the Certificates the operator emits for real cert-manager (a
//! CA Issuer made in the test). Real etcd members with TLS listeners, the operator dialing them
//! with its client certificate, keys written first and checked after every membership change;
//! and a control plane without cert-manager, where such a cluster is held.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::v1alpha2::{
    ClientCertManagerSpec, ClientTlsSpec, EtcdCluster, EtcdClusterSpec, EtcdMember, IssuerKind,
    IssuerReference, PeerCertManagerSpec, PeerTlsSpec, TlsSpec,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::e2e::{check_keys, condition, env, spec, stage_with, Env, Keys, Start};
use tests::env::{cert_manager, CertManager};
use tests::harness::eventually_every;
use tests::rollout::{endpoints, uids, Writer};
use tests::tls::{cm_api, cm_create, der_of, renew, served_certificate};
use tests::tls::{
    create_operator_secret, create_peer_secret, create_secret, create_server_secret, dial, mint,
    pair, tls_spec,
};
use tests::OrPanic;
use tokio::sync::OnceCell;

const BOOT: Duration = Duration::from_secs(180);

async fn write_keys(etcd: &mut etcd_client::Client, count: usize) -> BTreeMap<String, String> {
    tests::e2e::put_keys(etcd, "tls/", count).await
}

/// A read through `etcd` fails (the listener refuses this client).
async fn refused(mut etcd: etcd_client::Client) -> bool {
    etcd.get("tls/0000", None).await.is_err()
}

/// `etcdctl member list` over mTLS with the member's own client-listener certificate (it carries
/// the clientAuth usage): the runbook's command.
async fn member_list_over_mtls(env: &Env, ns: &str, cluster: &str) -> Vec<String> {
    let (code, stdout, stderr) = env
        .etcdctl(
            ns,
            cluster,
            &[
                "--endpoints=https://localhost:2379",
                "--cacert=/etc/etcd/tls/client/ca.crt",
                "--cert=/etc/etcd/tls/client/tls.crt",
                "--key=/etc/etcd/tls/client/tls.key",
                "member",
                "list",
            ],
        )
        .await;
    assert_eq!(code, Some(0), "etcdctl over mTLS failed: {stderr}");
    stdout.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byo_mtls_cluster_waits_for_its_secret_then_serves_only_tls_clients_and_scales_keeping_keys(
) {
    let env = env().await;
    let ns = env.namespace("tls").await;
    let name = "sec";
    let m = mint(name, &ns);
    create_server_secret(env, &ns, "sec-server-tls", &m).await;
    create_operator_secret(env, &ns, "sec-operator-client-tls", &m).await;

    // The peer Secret is not there yet: the cluster says which Secret it waits for, and creates
    // nothing a Pod could not start with.
    env.create_cluster(
        &ns,
        name,
        tls_spec(
            3,
            Some("sec-server-tls"),
            Some("sec-operator-client-tls"),
            Some("sec-peer-tls"),
        ),
    )
    .await;
    let msg = env
        .wait_unavailable(&ns, name, "TLSSecretNotReady", "sec-peer-tls", BOOT)
        .await;
    assert!(msg.contains("spec.tls.peer.secretRef"), "{msg}");
    assert!(
        env.members(&ns, name).await.is_empty(),
        "no member before the Secret"
    );

    create_peer_secret(env, &ns, "sec-peer-tls", &m).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;

    // Every member Pod runs etcd with client mTLS and peer mTLS from whole-Secret volumes.
    for pod in env.ready_pods(&ns, name).await {
        let spec = pod.spec.clone().expect("Pod spec");
        let args = spec.containers[0].args.clone().unwrap_or_default();
        for want in [
            "--listen-client-urls=https://0.0.0.0:2379",
            "--client-cert-auth",
            "--trusted-ca-file=/etc/etcd/tls/client/ca.crt",
            "--listen-peer-urls=https://0.0.0.0:2380",
            "--peer-client-cert-auth",
        ] {
            assert!(
                args.iter().any(|a| a == want),
                "{}: no {want}",
                pod.name_any()
            );
        }
        let secrets: Vec<String> = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert_eq!(secrets, ["sec-server-tls", "sec-peer-tls"]);
    }
    let list = member_list_over_mtls(env, &ns, name).await;
    assert_eq!(list.len(), 3, "{list:?}");
    assert!(
        list.iter()
            .all(|l| l.contains(", started, ") && l.contains("https://")),
        "every member started with https peer and client URLs: {list:?}"
    );

    // Keys over TLS with the operator's client certificate.
    let ca = m.client_ca.cert_pem().to_string();
    let mut etcd = dial(env, &ns, name, Some((&ca, Some(pair(&m.operator))))).await;
    let keys = write_keys(&mut etcd, 100).await;
    check_keys(&mut etcd, "tls", "tls/", &keys, Keys::Exactly).await;

    // Plaintext is refused, and so is TLS without a client certificate.
    assert!(
        refused(dial(env, &ns, name, None).await).await,
        "plaintext client served"
    );
    assert!(
        refused(dial(env, &ns, name, Some((&ca, None))).await).await,
        "TLS client without a certificate served"
    );
    let (code, _, _) = env
        .etcdctl(
            &ns,
            name,
            &["--endpoints=http://localhost:2379", "get", "tls/0000"],
        )
        .await;
    assert_ne!(code, Some(0), "plaintext etcdctl served");
    let (code, _, _) = env
        .etcdctl(
            &ns,
            name,
            &[
                "--endpoints=https://localhost:2379",
                "--cacert=/etc/etcd/tls/client/ca.crt",
                "get",
                "tls/0000",
            ],
        )
        .await;
    assert_ne!(code, Some(0), "etcdctl without a client certificate served");

    // 3 → 5 → 3 through the operator's TLS client, every key kept.
    env.scale(&ns, name, 5).await;
    env.wait_healthy(&ns, name, 5, BOOT).await;
    assert_eq!(member_list_over_mtls(env, &ns, name).await.len(), 5);
    check_keys(
        &mut dial(env, &ns, name, Some((&ca, Some(pair(&m.operator))))).await,
        "tls",
        "tls/",
        &keys,
        Keys::Exactly,
    )
    .await;
    env.scale(&ns, name, 3).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    assert_eq!(member_list_over_mtls(env, &ns, name).await.len(), 3);
    check_keys(
        &mut dial(env, &ns, name, Some((&ca, Some(pair(&m.operator))))).await,
        "tls",
        "tls/",
        &keys,
        Keys::Exactly,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_only_and_peer_only_clusters_form_and_serve() {
    let env = env().await;
    let ns = env.namespace("tls-variants").await;

    // Server TLS only: clients need the CA, no certificate; peers plaintext.
    let srv = mint("srv", &ns);
    create_server_secret(env, &ns, "srv-server-tls", &srv).await;
    env.create_cluster(&ns, "srv", tls_spec(3, Some("srv-server-tls"), None, None))
        .await;
    // Peer TLS only: clients plaintext.
    let peer = mint("peer", &ns);
    create_peer_secret(env, &ns, "peer-peer-tls", &peer).await;
    env.create_cluster(&ns, "peer", tls_spec(3, None, None, Some("peer-peer-tls")))
        .await;

    env.wait_healthy(&ns, "srv", 3, BOOT).await;
    let ca = srv.client_ca.cert_pem().to_string();
    let mut etcd = dial(env, &ns, "srv", Some((&ca, None))).await;
    let keys = write_keys(&mut etcd, 20).await;
    check_keys(&mut etcd, "tls", "tls/", &keys, Keys::Exactly).await;
    assert!(
        refused(dial(env, &ns, "srv", None).await).await,
        "plaintext client served"
    );
    let (code, stdout, stderr) = env
        .etcdctl(
            &ns,
            "srv",
            &[
                "--endpoints=https://localhost:2379",
                "--cacert=/etc/etcd/tls/client/ca.crt",
                "member",
                "list",
            ],
        )
        .await;
    assert_eq!(
        code,
        Some(0),
        "server-TLS-only etcdctl without a certificate: {stderr}"
    );
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(
        stdout.contains("http://srv-"),
        "peers stay plaintext: {stdout}"
    );

    env.wait_healthy(&ns, "peer", 3, BOOT).await;
    let mut etcd = dial(env, &ns, "peer", None).await;
    let keys = write_keys(&mut etcd, 20).await;
    check_keys(&mut etcd, "tls", "tls/", &keys, Keys::Exactly).await;
    let (code, stdout, stderr) = env
        .etcdctl(
            &ns,
            "peer",
            &["--endpoints=http://localhost:2379", "member", "list"],
        )
        .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(
        stdout.lines().all(|l| l.contains(":2380, http://")),
        "peer URLs https, client URLs http: {stdout}"
    );
    assert!(stdout.contains("https://peer-"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_without_a_key_or_with_broken_pem_is_named_and_nothing_is_created() {
    let env = env().await;
    let ns = env.namespace("tls-bad").await;
    let m = mint("nokey", &ns);
    // The server Secret lacks ca.crt (a `kubernetes.io/tls` Secret made without the CA).
    create_secret(
        env,
        &ns,
        "nokey-server-tls",
        &[
            ("tls.crt", &m.server.cert_pem),
            ("tls.key", &m.server.key_pem),
        ],
    )
    .await;
    env.create_cluster(
        &ns,
        "nokey",
        tls_spec(1, Some("nokey-server-tls"), None, None),
    )
    .await;
    // The operator-client Secret holds something that is not PEM.
    create_server_secret(env, &ns, "garbage-server-tls", &m).await;
    create_secret(
        env,
        &ns,
        "garbage-op-tls",
        &[("tls.crt", "not a certificate"), ("tls.key", "not a key")],
    )
    .await;
    env.create_cluster(
        &ns,
        "garbage",
        tls_spec(1, Some("garbage-server-tls"), Some("garbage-op-tls"), None),
    )
    .await;

    for (name, secret, field, detail) in [
        (
            "nokey",
            "nokey-server-tls",
            "spec.tls.client.serverSecretRef",
            "no key ca.crt",
        ),
        (
            "garbage",
            "garbage-op-tls",
            "spec.tls.client.operatorClientSecretRef",
            "tls.crt",
        ),
    ] {
        let c = env
            .wait_for(&ns, name, "TLSSecretNotReady", BOOT, |c| {
                condition(c, "Available")
                    .is_some_and(|(st, r, _)| st == "False" && r == "TLSSecretNotReady")
            })
            .await;
        let (_, _, msg) = condition(&c, "Available").expect("Available condition");
        assert!(
            msg.contains(&format!("{ns}/{secret}")) && msg.contains(field) && msg.contains(detail),
            "{name}: {msg}"
        );
        let (st, reason, _) = condition(&c, "Progressing").expect("Progressing condition");
        assert_eq!(
            (st.as_str(), reason.as_str()),
            ("True", "TLSSecretNotReady")
        );
        assert!(env.members(&ns, name).await.is_empty(), "{name}: no member");
    }
}

// ---------------------------------------------------------------------------------------------
// cert-manager
// ---------------------------------------------------------------------------------------------

/// Real cert-manager on the suite's control plane, started by the first test that needs it
/// (after the operator: the operator finds it by asking discovery again, no restart).
async fn cert_manager(env: &'static Env) -> &'static CertManager {
    static CM: OnceCell<CertManager> = OnceCell::const_new();
    CM.get_or_init(|| async { CertManager::start(env.cp).await.or_panic() })
        .await
}

/// A CA Issuer named `issuer` in `ns`: a self-signed Issuer signs a CA Certificate, whose Secret
/// backs the CA Issuer (cert-manager's documented bootstrap).
async fn ca_issuer(env: &Env, ns: &str, issuer: &str) {
    cm_create(
        env,
        ns,
        "Issuer",
        json!({"metadata": {"name": "selfsigned"}, "spec": {"selfSigned": {}}}),
    )
    .await;
    cm_create(
        env,
        ns,
        "Certificate",
        json!({"metadata": {"name": "etcd-ca"}, "spec": {
            "isCA": true, "commonName": "etcd-ca", "secretName": "etcd-ca",
            "privateKey": {"algorithm": "ECDSA", "size": 256},
            "issuerRef": {"name": "selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
        }}),
    )
    .await;
    cm_create(
        env,
        ns,
        "Issuer",
        json!({"metadata": {"name": issuer}, "spec": {"ca": {"secretName": "etcd-ca"}}}),
    )
    .await;
}

fn cert_manager_spec(replicas: i32, issuer: &str, operator_client: bool) -> EtcdClusterSpec {
    let issuer_ref = |name: &str| IssuerReference::new(name, IssuerKind::Issuer);
    EtcdClusterSpec {
        tls: Some(TlsSpec {
            client: Some(ClientTlsSpec {
                cert_manager: Some(ClientCertManagerSpec {
                    server_issuer_ref: issuer_ref(issuer),
                    operator_client_issuer_ref: operator_client.then(|| issuer_ref(issuer)),
                }),
                ..Default::default()
            }),
            peer: Some(PeerTlsSpec {
                secret_ref: None,
                cert_manager: Some(PeerCertManagerSpec {
                    issuer_ref: issuer_ref(issuer),
                }),
            }),
        }),
        ..spec(replicas)
    }
}

/// The cluster's Certificates as `kubectl get certificate -l app.kubernetes.io/instance=<c>`
/// lists them, by name.
async fn certificates(env: &Env, ns: &str, cluster: &str) -> BTreeMap<String, DynamicObject> {
    cm_api(env, ns, "Certificate")
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={cluster}")))
        .await
        .or_panic()
        .items
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect()
}

async fn secret_key(env: &Env, ns: &str, secret: &str, key: &str) -> String {
    let s = Api::<Secret>::namespaced(env.client(), ns)
        .get(secret)
        .await
        .or_panic();
    let bytes = s
        .data
        .and_then(|d| d.get(key).cloned())
        .unwrap_or_else(|| panic!("Secret {ns}/{secret} has no {key}"));
    String::from_utf8(bytes.0).or_panic()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_manager_mtls_cluster_gets_its_certificates_serves_only_tls_clients_and_scales_keeping_keys(
) {
    let env = env().await;
    cert_manager(env).await;
    let ns = env.namespace("tls-cm").await;
    let name = "cm";
    ca_issuer(env, &ns, "etcd-ca").await;
    let created = env
        .create_cluster(&ns, name, cert_manager_spec(3, "etcd-ca", true))
        .await;

    // The three Certificates, exactly per the table, found by the instance label.
    let certs = tests::harness::eventually("the cluster's three Certificates", BOOT, || async {
        let certs = certificates(env, &ns, name).await;
        (certs.len() == 3)
            .then_some(certs.clone())
            .ok_or_else(|| format!("{:?}", certs.keys().collect::<Vec<_>>()))
    })
    .await;
    let both = |host: String| [host.clone(), format!("{host}.cluster.local")];
    let mut server_dns: Vec<String> = [
        format!("*.{name}.{ns}.svc"),
        format!("{name}.{ns}.svc"),
        format!("{name}-client.{ns}.svc"),
    ]
    .into_iter()
    .flat_map(both)
    .collect();
    server_dns.push("localhost".into());
    let serving = json!([
        "server auth",
        "client auth",
        "digital signature",
        "key encipherment"
    ]);
    for (cert, secret, dns, ips, usages) in [
        (
            "cm-server",
            "cm-server-tls",
            json!(server_dns),
            json!(["127.0.0.1"]),
            serving.clone(),
        ),
        (
            "cm-operator-client",
            "cm-operator-client-tls",
            serde_json::Value::Null,
            serde_json::Value::Null,
            json!(["client auth", "digital signature", "key encipherment"]),
        ),
        (
            "cm-peer",
            "cm-peer-tls",
            json!(both(format!("*.{name}.{ns}.svc"))),
            serde_json::Value::Null,
            serving.clone(),
        ),
    ] {
        let c = certs
            .get(cert)
            .unwrap_or_else(|| panic!("no Certificate {cert}"));
        let spec = &c.data["spec"];
        assert_eq!(spec["secretName"], secret, "{cert}");
        assert_eq!(spec["dnsNames"], dns, "{cert}");
        assert_eq!(spec["ipAddresses"], ips, "{cert}");
        assert_eq!(spec["usages"], usages, "{cert}");
        assert_eq!(
            spec["issuerRef"],
            json!({"name": "etcd-ca", "kind": "Issuer", "group": "cert-manager.io"}),
            "{cert}"
        );
        let owner = c
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .unwrap_or_else(|| panic!("{cert} has no owner"));
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("EtcdCluster", name, Some(true)),
            "{cert}"
        );
        assert_eq!(Some(&owner.uid), created.metadata.uid.as_ref(), "{cert}");
        assert_eq!(
            c.labels()
                .get("etcd-operator.cozystack.io/cluster")
                .map(String::as_str),
            Some(name),
            "{cert}"
        );
    }

    env.wait_healthy(&ns, name, 3, Duration::from_secs(300))
        .await;
    // The members mount cert-manager's Secrets, with client and peer mTLS, as BYO Secrets are.
    for pod in env.ready_pods(&ns, name).await {
        let spec = pod.spec.clone().expect("Pod spec");
        let args = spec.containers[0].args.clone().unwrap_or_default();
        for want in [
            "--client-cert-auth",
            "--trusted-ca-file=/etc/etcd/tls/client/ca.crt",
            "--peer-client-cert-auth",
        ] {
            assert!(
                args.iter().any(|a| a == want),
                "{}: no {want}",
                pod.name_any()
            );
        }
        let secrets: Vec<String> = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert_eq!(secrets, ["cm-server-tls", "cm-peer-tls"]);
    }
    assert_eq!(member_list_over_mtls(env, &ns, name).await.len(), 3);

    // Keys through the operator-client certificate cert-manager issued.
    let ca = secret_key(env, &ns, "cm-server-tls", "ca.crt").await;
    let op_crt = secret_key(env, &ns, "cm-operator-client-tls", "tls.crt").await;
    let op_key = secret_key(env, &ns, "cm-operator-client-tls", "tls.key").await;
    let op = Some((op_crt.as_str(), op_key.as_str()));
    let mut etcd = dial(env, &ns, name, Some((&ca, op))).await;
    let keys = write_keys(&mut etcd, 100).await;
    check_keys(&mut etcd, "tls", "tls/", &keys, Keys::Exactly).await;
    assert!(
        refused(dial(env, &ns, name, None).await).await,
        "plaintext client served"
    );
    assert!(
        refused(dial(env, &ns, name, Some((&ca, None))).await).await,
        "TLS client without a certificate served"
    );
    let (code, _, _) = env
        .etcdctl(
            &ns,
            name,
            &["--endpoints=http://localhost:2379", "get", "tls/0000"],
        )
        .await;
    assert_ne!(code, Some(0), "plaintext etcdctl served");

    // 3 → 5 → 3 through the operator's TLS client, every key kept.
    env.scale(&ns, name, 5).await;
    env.wait_healthy(&ns, name, 5, BOOT).await;
    check_keys(
        &mut dial(env, &ns, name, Some((&ca, op))).await,
        "tls",
        "tls/",
        &keys,
        Keys::Exactly,
    )
    .await;
    env.scale(&ns, name, 3).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    assert_eq!(member_list_over_mtls(env, &ns, name).await.len(), 3);
    check_keys(
        &mut dial(env, &ns, name, Some((&ca, op))).await,
        "tls",
        "tls/",
        &keys,
        Keys::Exactly,
    )
    .await;

    // cert-manager renews the server and peer leaves (a manual trigger, as `cmctl renew` does):
    // every member serves the new server certificate with no restart and no failed request.
    let pods = env.ready_pods(&ns, name).await;
    let before = uids(&pods);
    let old_server = secret_key(env, &ns, "cm-server-tls", "tls.crt").await;
    let writer = Writer::start(
        endpoints(&ns, name, &pods),
        Some((ca.clone(), op_crt.clone(), op_key.clone())),
        "renew/",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let renewal_started = Instant::now();
    for certificate in ["cm-server", "cm-peer"] {
        renew(env, &ns, certificate).await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let new_server = eventually_every(
        "cert-manager to renew cm-server",
        Duration::from_secs(120),
        Duration::from_secs(1),
        || async {
            let now = secret_key(env, &ns, "cm-server-tls", "tls.crt").await;
            if now != old_server {
                Ok(now)
            } else {
                Err("the old certificate".to_string())
            }
        },
    )
    .await;
    for p in &pods {
        let host = format!("{}.{name}.{ns}.svc", p.name_any());
        eventually_every(
            &format!("{host} to serve the renewed certificate"),
            deadline.saturating_duration_since(Instant::now()),
            Duration::from_secs(1),
            || async {
                let served = served_certificate(&host, 2379, &ca, (&op_crt, &op_key)).await;
                if served.as_ref().is_ok_and(|der| *der == der_of(&new_server)) {
                    return Ok(());
                }
                Err(format!("{served:?}"))
            },
        )
        .await;
    }
    let renewed = Instant::now();
    let report = writer.finish().await;
    assert_eq!(
        uids(&env.pods(&ns, name).await),
        before,
        "a member restarted"
    );
    assert_eq!(
        report.failed, 0,
        "requests failed during the renewal: {report:?}"
    );
    let during = report.acknowledged_between(renewal_started, renewed);
    assert!(
        during > 0,
        "no write acknowledged while the leaves were renewed ({:?}, {} writes in all)",
        renewed - renewal_started,
        report.written.len()
    );
    let mut etcd = dial(env, &ns, name, Some((&ca, op))).await;
    report.assert_kept(
        "the writer during the renewal",
        &tests::e2e::read_keys(&mut etcd, "renew/").await,
    );
    eprintln!(
        "writer during the renewal: {} writes, {during} of them while the leaves were renewed",
        report.written.len()
    );
    check_keys(&mut etcd, "tls", "tls/", &keys, Keys::Exactly).await;
}

/// A control plane without cert-manager: the cluster is held with `CertManagerNotInstalled` and
/// nothing is created. Installing cert-manager's API later is found without an operator restart:
/// the Certificates appear, and while nothing issues them (no cert-manager controller here) the
/// cluster says which Certificate and Secret it waits for, still without a member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cert_manager_a_cert_manager_cluster_is_held_and_nothing_is_created() {
    // Apart from the binary's other tests: none of them installs cert-manager's API here.
    let staged = stage_with(
        Start::default()
            .without_pods()
            .apart("without cert-manager"),
    )
    .await;
    let cp = staged.cp;
    let operator = staged.operator_only(None, &[]).await;
    let client = cp.client().or_panic();
    let ns = cp.namespace("tls-nocm").await.or_panic();
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new("nocm", cert_manager_spec(3, "etcd-ca", false)),
        )
        .await
        .or_panic();
    let wait = |what: &'static str, check: fn(&EtcdCluster) -> bool| {
        let clusters = clusters.clone();
        let log = operator.log();
        async move {
            tests::harness::eventually(what, BOOT, || async {
                let c = clusters.get("nocm").await.map_err(|e| e.to_string())?;
                check(&c).then_some(c.clone()).ok_or_else(|| {
                    format!(
                        "{}; operator log {}",
                        serde_json::to_string(&c.status).unwrap_or_default(),
                        log.display()
                    )
                })
            })
            .await
        }
    };
    let c = wait("Available=False/CertManagerNotInstalled", |c| {
        condition(c, "Available")
            .is_some_and(|(st, r, _)| st == "False" && r == "CertManagerNotInstalled")
    })
    .await;
    let (_, _, msg) = condition(&c, "Available").expect("Available condition");
    assert!(msg.contains("install cert-manager"), "{msg}");
    // Held long enough for a seed to have been created, were it going to be.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let members: Api<EtcdMember> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    assert!(
        members
            .list(&ListParams::default())
            .await
            .or_panic()
            .items
            .is_empty(),
        "no EtcdMember"
    );
    assert!(
        pods.list(&ListParams::default())
            .await
            .or_panic()
            .items
            .is_empty(),
        "no Pod"
    );

    // cert-manager's API appears (its CRDs; no controller to issue anything).
    cp.install_crds(cert_manager::crds(cp.testbins()).or_panic())
        .await
        .or_panic();
    let c = wait("Available=False/WaitingForCertificate", |c| {
        condition(c, "Available")
            .is_some_and(|(st, r, _)| st == "False" && r == "WaitingForCertificate")
    })
    .await;
    let (st, reason, msg) = condition(&c, "Progressing").expect("Progressing condition");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "WaitingForCertificate")
    );
    assert!(
        msg.contains(&format!("{ns}/nocm-"))
            && msg.contains("-tls")
            && msg.contains("Certificate nocm-"),
        "the message names the Secret and its Certificate: {msg}"
    );
    let certs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &cert_manager::api_resource("Certificate"),
    );
    let mut names: Vec<String> = certs
        .list(&ListParams::default().labels("app.kubernetes.io/instance=nocm"))
        .await
        .or_panic()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["nocm-peer", "nocm-server"],
        "no operator-client issuer, no Certificate"
    );
    assert!(
        members
            .list(&ListParams::default())
            .await
            .or_panic()
            .items
            .is_empty(),
        "no EtcdMember"
    );
    assert!(
        pods.list(&ListParams::default())
            .await
            .or_panic()
            .items
            .is_empty(),
        "no Pod"
    );
}
