//! End to end: certificate rotation on a running mTLS cluster from the user's own Secrets, with
//! a writer running throughout. A one-step CA change (the peer Secret's `ca.crt` and leaf both
//! moved to a new CA in one edit) is refused with `Progressing=False/UnsafeCAChange` and no
//! member restarted; the two-step path then rolls with no failed write. A new CA added to the trust bundles (`ca.crt`) restarts the
//! members one at a time, followers first and the leader last after MoveLeader, never dropping
//! below a majority of Ready members; leaves renewed from the new CA reach etcd with no restart;
//! the old CA removed rolls them again. And the checks that catch a certificate that would be
//! refused (wrong SANs, a CA that does not match) before a handshake fails, naming the Secret;
//! a TLS cluster paused and resumed keeps every key. Members that never recorded their bundle
//! (as after a takeover) and whose etcd started before the CA changed are rolled.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::v1alpha2::EtcdMember;
use certs::mint::TestCa;
use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tests::e2e::{condition, env};
use tests::harness::eventually_every;
use tests::rollout::{endpoints, event_messages, restarts_in_order, uids, wait_rolled, Writer};
use tests::tls::{
    create_operator_secret, create_peer_secret, create_secret, create_server_secret, dial, leaves,
    mint, pair, patch_secret, tls_spec, Material,
};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
const ROLL: Duration = Duration::from_secs(300);
/// The longest a writer may go without a successful write during a rollout: restarts of
/// followers cost nothing, the leader's one election after MoveLeader (a few seconds at most
/// on a loaded test machine).
const LONGEST_GAP: Duration = Duration::from_secs(15);

/// Pod name → restarts of its containers.
fn restart_counts(pods: &[k8s_openapi::api::core::v1::Pod]) -> BTreeMap<String, i32> {
    pods.iter()
        .map(|p| {
            let restarts = p
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .map(|c| c.restart_count)
                .sum();
            (p.name_any(), restarts)
        })
        .collect()
}

fn bundle(a: &TestCa, b: &TestCa) -> String {
    format!("{}{}", a.cert_pem(), b.cert_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_step_ca_change_is_refused_then_the_two_step_rotation_rolls_without_a_failed_write() {
    let env = env().await;
    let ns = env.namespace("rot").await;
    let name = "rot";
    let m: Material = mint(name, &ns);
    create_server_secret(env, &ns, "rot-server", &m).await;
    create_operator_secret(env, &ns, "rot-operator", &m).await;
    create_peer_secret(env, &ns, "rot-peer", &m).await;
    env.create_cluster(
        &ns,
        name,
        tls_spec(
            3,
            Some("rot-server"),
            Some("rot-operator"),
            Some("rot-peer"),
        ),
    )
    .await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let old_ca = m.client_ca.cert_pem().to_string();
    let mut etcd = dial(env, &ns, name, Some((&old_ca, Some(pair(&m.operator))))).await;
    let keys = tests::e2e::put_keys(&mut etcd, "rot/", 100).await;
    let pods = env.ready_pods(&ns, name).await;
    let endpoints = endpoints(&ns, name, &pods);
    let first = uids(&pods);
    // A member joining at bootstrap may have restarted once (its first try found no peer yet).
    let first_restarts = restart_counts(&pods);
    let new_client_ca = TestCa::new("rot client CA 2").or_panic();
    let new_peer_ca = TestCa::new("rot peer CA 2").or_panic();

    // 0. One edit moves the peer Secret's ca.crt and certificate to a new CA (what cert-manager
    // does when a CA Issuer's CA changes). The members loaded only the old CA: a member
    // restarted with the new bundle would be refused by them, and the rollout would never end.
    // Refused instead, naming the Secret and the steps; no member restarted; etcd still serves.
    let (_, _, one_step_peer) = leaves(name, &ns, &new_client_ca, &new_peer_ca);
    patch_secret(
        env,
        &ns,
        "rot-peer",
        &[
            ("ca.crt", new_peer_ca.cert_pem()),
            ("tls.crt", &one_step_peer.cert_pem),
            ("tls.key", &one_step_peer.key_pem),
        ],
    )
    .await;
    let message = eventually_every(
        "a one-step CA change refused (Progressing=False/UnsafeCAChange)",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let c = env.cluster(&ns, name).await;
            if let Some((status, reason, message)) = condition(&c, "Progressing") {
                if reason == "UnsafeCAChange" {
                    assert_eq!(status, "False", "{message}");
                    return Ok(message);
                }
            }
            Err(format!(
                "pods {:?} (before {first:?}), conditions {:?}",
                uids(&env.pods(&ns, name).await),
                c.status.map(|s| s.conditions)
            ))
        },
    )
    .await;
    assert!(
        message.contains(&format!("Secret {ns}/rot-peer (spec.tls.peer.secretRef)"))
            && message.contains("both the old and the new CA")
            && message.contains("remove the old CA"),
        "{message}"
    );
    // Long enough for a rollout step (the first restart comes within a reconcile or two) and
    // for the refreshed Secret volume to reach the Pods.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let pods = env.pods(&ns, name).await;
    assert_eq!(
        uids(&pods),
        first,
        "a member was restarted for a refused CA change"
    );
    assert_eq!(
        restart_counts(&pods),
        first_restarts,
        "etcd restarted in a member for a refused CA change"
    );
    let warnings = event_messages(env, &ns, name, "UnsafeCAChange").await;
    assert_eq!(warnings.len(), 1, "one Warning Event: {warnings:?}");
    let c = env.cluster(&ns, name).await;
    assert_eq!(
        condition(&c, "Progressing").map(|(_, r, _)| r).as_deref(),
        Some("UnsafeCAChange")
    );
    etcd.put("rot/refused", "still-serving", None)
        .await
        .or_panic();
    let got = etcd.get("rot/refused", None).await.or_panic();
    assert_eq!(
        got.kvs().first().map(|kv| kv.value()),
        Some(&b"still-serving"[..]),
        "the cluster serves while the change is refused"
    );
    etcd.delete("rot/refused", None).await.or_panic();

    // 1. The safe way: the previous certificate back, and a new CA joins both trust bundles:
    // every member restarts once, one at a time.
    let client_bundle = bundle(&m.client_ca, &new_client_ca);
    let writer = Writer::start(
        endpoints.clone(),
        Some((
            client_bundle.clone(),
            m.operator.cert_pem.clone(),
            m.operator.key_pem.clone(),
        )),
        "w1/",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    patch_secret(env, &ns, "rot-server", &[("ca.crt", &client_bundle)]).await;
    patch_secret(
        env,
        &ns,
        "rot-peer",
        &[
            ("ca.crt", &bundle(&m.peer_ca, &new_peer_ca)),
            ("tls.crt", &m.peer.cert_pem),
            ("tls.key", &m.peer.key_pem),
        ],
    )
    .await;
    let (fewest_ready, reasons) = wait_rolled(env, &ns, name, 3, &first, ROLL).await;
    let reported = reasons.contains("RollingRestart");
    assert!(
        fewest_ready >= 2,
        "quorum lost: only {fewest_ready} of 3 members Ready at one point"
    );
    assert!(
        reported,
        "Progressing=True/RollingRestart was never reported"
    );
    // One restart per member, the member that was leader last: right after leadership moved
    // away from it. (The cluster's own RollingRestart Events are aggregated into one series by
    // the event recorder; the members' PodRestarted Events are one per member.)
    assert!(
        !event_messages(env, &ns, name, "RollingRestart")
            .await
            .is_empty(),
        "no RollingRestart Event on the cluster"
    );
    let restarted = restarts_in_order(env, &ns, name).await;
    assert_eq!(restarted.len(), 3, "one restart per member: {restarted:?}");
    let moved = event_messages(env, &ns, name, "LeaderMoved").await;
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert!(
        moved[0].contains(&format!("from {} ", restarted[2])),
        "the leader restarted last: {moved:?} / {restarted:?}"
    );

    let first_writer = writer.finish().await;

    // 2. Leaves renewed from the new CAs (the bundles keep both): etcd serves them with no
    // restart and no failed request, and the operator's new client certificate is accepted.
    let second = uids(&env.pods(&ns, name).await);
    let writer = Writer::start(
        endpoints.clone(),
        Some((
            client_bundle.clone(),
            m.operator.cert_pem.clone(),
            m.operator.key_pem.clone(),
        )),
        "wr/",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (server, operator, peer) = leaves(name, &ns, &new_client_ca, &new_peer_ca);
    for (secret, leaf) in [
        ("rot-server", &server),
        ("rot-peer", &peer),
        ("rot-operator", &operator),
    ] {
        patch_secret(
            env,
            &ns,
            secret,
            &[("tls.crt", &leaf.cert_pem), ("tls.key", &leaf.key_pem)],
        )
        .await;
    }
    // A client trusting only the new CA reaches every member once the kubelet-style refresh
    // has put the new files in place: the new leaf is served.
    let new_ca = new_client_ca.cert_pem().to_string();
    let deadline = Instant::now() + Duration::from_secs(90);
    for endpoint in &endpoints {
        eventually_every(
            &format!("{endpoint} to serve the renewed certificate"),
            deadline.saturating_duration_since(Instant::now()),
            Duration::from_secs(1),
            || async {
                let options = ConnectOptions::new()
                    .with_connect_timeout(Duration::from_secs(2))
                    .with_timeout(Duration::from_secs(2))
                    .with_tls(
                        TlsOptions::new()
                            .ca_certificate(Certificate::from_pem(&new_ca))
                            .identity(Identity::from_pem(&operator.cert_pem, &operator.key_pem)),
                    );
                let ok = match etcd_client::Client::connect([endpoint.clone()], Some(options)).await
                {
                    Ok(mut c) => c.get("rot/0000", None).await.is_ok(),
                    Err(_) => false,
                };
                if ok {
                    Ok(())
                } else {
                    Err("no answer with the new CA".to_string())
                }
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(15)).await;
    let pods = env.pods(&ns, name).await;
    assert_eq!(uids(&pods), second, "renewed leaves restarted a member");
    for p in &pods {
        let restarts: i32 = p
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .map(|c| c.restart_count)
            .sum();
        assert_eq!(
            restarts,
            0,
            "{}: etcd restarted for renewed leaves",
            p.name_any()
        );
    }
    let renewal_writer = writer.finish().await;
    assert_eq!(
        renewal_writer.failed, 0,
        "requests failed while the leaves were renewed: {renewal_writer:?}"
    );

    // 3. The old CA leaves the bundles: one more roll, and only new-CA certificates work.
    let writer = Writer::start(
        endpoints.clone(),
        Some((
            new_ca.clone(),
            operator.cert_pem.clone(),
            operator.key_pem.clone(),
        )),
        "w2/",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    patch_secret(env, &ns, "rot-server", &[("ca.crt", &new_ca)]).await;
    patch_secret(env, &ns, "rot-peer", &[("ca.crt", new_peer_ca.cert_pem())]).await;
    let (fewest_ready, _) = wait_rolled(env, &ns, name, 3, &second, ROLL).await;
    assert!(
        fewest_ready >= 2,
        "quorum lost: only {fewest_ready} of 3 members Ready at one point"
    );
    let second_writer = writer.finish().await;
    let mut etcd = dial(env, &ns, name, Some((&new_ca, Some(pair(&operator))))).await;
    assert_eq!(
        tests::e2e::read_keys(&mut etcd, "rot/").await,
        keys,
        "every key kept"
    );
    for (prefix, report, restarts) in [
        ("w1/", &first_writer, 3),
        ("wr/", &renewal_writer, 0),
        ("w2/", &second_writer, 3),
    ] {
        eprintln!(
            "writer {prefix}: {} writes, {} failed ({} not processed: connection or stream \
             refused by a restarting member, retried; {} cut off in transport by a restarting \
             member, retried; {} timed out; {} refused), longest gap between writes {:?}",
            report.written.len(),
            report.failed,
            report.unsent,
            report.cut_off,
            report.timed_out,
            report.refused,
            report.longest_gap
        );
        assert!(!report.written.is_empty(), "writer {prefix} wrote nothing");
        // A client that dials the member being restarted sees its connection refused, or its
        // stream refused (no member processed the request), or a request in flight cut off as
        // the member goes away (outcome unknown), and retries the same key with the same value;
        // a write etcd or a TLS peer refused is a failed write, a timeout beyond one per
        // restart a member that hung or a cluster left without a leader, and the read-back
        // below finds any acknowledged write that was lost.
        report.assert_failures_explained(&format!("writer {prefix}"), restarts);
        report.assert_kept(
            &format!("writer {prefix}"),
            &tests::e2e::read_keys(&mut etcd, prefix).await,
        );
        assert!(
            report.longest_gap < LONGEST_GAP,
            "writer {prefix} was blocked for {:?}",
            report.longest_gap
        );
    }
    // A client certificate of the old CA is refused now.
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(2))
        .with_tls(
            TlsOptions::new()
                .ca_certificate(Certificate::from_pem(&new_ca))
                .identity(Identity::from_pem(
                    &m.operator.cert_pem,
                    &m.operator.key_pem,
                )),
        );
    let accepted = match etcd_client::Client::connect(endpoints.clone(), Some(options)).await {
        Ok(mut c) => c.get("rot/0000", None).await.is_ok(),
        Err(_) => false,
    };
    assert!(!accepted, "old-CA client certificate accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_with_wrong_sans_or_a_foreign_ca_is_named_then_a_fixed_cluster_pauses_and_resumes(
) {
    let env = env().await;
    let ns = env.namespace("san").await;
    let name = "san";
    let m = mint(name, &ns);
    // The peer certificate is signed by another CA than the one in its ca.crt: refused before
    // anything is created.
    let stranger = TestCa::new("stranger").or_panic();
    create_server_secret(env, &ns, "san-server", &m).await;
    create_operator_secret(env, &ns, "san-operator", &m).await;
    create_secret(
        env,
        &ns,
        "san-peer",
        &[
            ("tls.crt", &m.peer.cert_pem),
            ("tls.key", &m.peer.key_pem),
            ("ca.crt", stranger.cert_pem()),
        ],
    )
    .await;
    env.create_cluster(
        &ns,
        name,
        tls_spec(
            3,
            Some("san-server"),
            Some("san-operator"),
            Some("san-peer"),
        ),
    )
    .await;
    let msg = env
        .wait_unavailable(&ns, name, "TLSSecretNotReady", "san-peer", BOOT)
        .await;
    assert!(
        msg.contains("not signed by a CA in the trust bundle") && msg.contains("ca.crt"),
        "{msg}"
    );
    assert!(
        env.members(&ns, name).await.is_empty(),
        "a member was created"
    );

    // The peer Secret fixed, but the server certificate names another cluster: the seed is
    // created (its name is not known before), and the cluster then says which name the
    // certificate does not cover instead of forming with a certificate clients refuse.
    let other = m
        .client_ca
        .server_cert(&[&format!("*.other.{ns}.svc")])
        .or_panic();
    patch_secret(
        env,
        &ns,
        "san-server",
        &[("tls.crt", &other.cert_pem), ("tls.key", &other.key_pem)],
    )
    .await;
    patch_secret(env, &ns, "san-peer", &[("ca.crt", m.peer_ca.cert_pem())]).await;
    let c = env
        .wait_for(
            &ns,
            name,
            "TLSSecretNotReady naming the server Secret's SANs",
            BOOT,
            |c| {
                condition(c, "Available").is_some_and(|(st, r, msg)| {
                    st == "False"
                        && r == "TLSSecretNotReady"
                        && msg.contains("san-server")
                        && msg.contains("not valid for")
                })
            },
        )
        .await;
    let (_, _, msg) = condition(&c, "Available").expect("Available condition");
    assert!(
        msg.contains(&format!("*.san.{ns}.svc")),
        "the fix names the SAN: {msg}"
    );
    assert!(
        env.members(&ns, name).await.len() <= 1,
        "scaled up past a refused certificate"
    );

    // Fixed: the cluster forms; then a pause and a resume keep every key.
    patch_secret(
        env,
        &ns,
        "san-server",
        &[
            ("tls.crt", &m.server.cert_pem),
            ("tls.key", &m.server.key_pem),
        ],
    )
    .await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let ca = m.client_ca.cert_pem().to_string();
    let mut etcd = dial(env, &ns, name, Some((&ca, Some(pair(&m.operator))))).await;
    let keys = tests::e2e::put_keys(&mut etcd, "san/", 50).await;
    env.scale(&ns, name, 0).await;
    env.wait_for(&ns, name, "paused", BOOT, |c| {
        condition(c, "Available").is_some_and(|(st, r, _)| st == "False" && r == "Paused")
            && condition(c, "Progressing").is_some_and(|(st, r, _)| st == "False" && r == "Paused")
    })
    .await;
    assert!(
        env.ready_pods(&ns, name).await.is_empty(),
        "a Pod runs while paused"
    );
    env.scale(&ns, name, 3).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let mut etcd = dial(env, &ns, name, Some((&ca, Some(pair(&m.operator))))).await;
    assert_eq!(
        tests::e2e::read_keys(&mut etcd, "san/").await,
        keys,
        "every key kept"
    );
}

/// Members that never recorded their bundle (what a takeover of the reference operator's cluster
/// finds) whose etcd started before the Secret's `ca.crt` last changed: the user added a CA under
/// the reference operator and never bounced the Pods (its runbook asks for that by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_that_never_recorded_a_bundle_and_started_before_the_ca_changed_are_rolled() {
    let env = env().await;
    let ns = env.namespace("adopt").await;
    let name = "adopt";
    let m: Material = mint(name, &ns);
    create_server_secret(env, &ns, "adopt-server", &m).await;
    create_operator_secret(env, &ns, "adopt-operator", &m).await;
    create_peer_secret(env, &ns, "adopt-peer", &m).await;
    env.create_cluster(
        &ns,
        name,
        tls_spec(
            3,
            Some("adopt-server"),
            Some("adopt-operator"),
            Some("adopt-peer"),
        ),
    )
    .await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let ca = m.client_ca.cert_pem().to_string();
    let mut etcd = dial(env, &ns, name, Some((&ca, Some(pair(&m.operator))))).await;
    let keys = tests::e2e::put_keys(&mut etcd, "adopt/", 50).await;
    let new_peer_ca = TestCa::new("adopt peer CA 2").or_panic();
    // With rollouts paused (so that the change itself is not rolled), the peer bundle gains a
    // CA, then the members' records are removed. The operator must not take them to run the
    // current bundle: it records them as unknown and, once the pause is lifted, rolls them; the
    // cluster stays Ready (never fewer than 2 of 3) with every key.
    let paused = |on: bool| {
        serde_json::json!({"metadata": {"annotations": {
            "etcd-operator.cozystack.io/rollout-paused": if on { Some("true") } else { None }
        }}})
    };
    let clusters = env.clusters(&ns);
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&paused(true)))
        .await
        .or_panic();
    let before = uids(&env.pods(&ns, name).await);
    patch_secret(
        env,
        &ns,
        "adopt-peer",
        &[("ca.crt", &bundle(&m.peer_ca, &new_peer_ca))],
    )
    .await;
    let members: Api<EtcdMember> = Api::namespaced(env.client(), &ns);
    let unrecorded = serde_json::json!({"metadata": {"annotations": {
        "etcd-operator.cozystack.io/trust-bundle": null,
        "etcd-operator.cozystack.io/trusted-cas": null,
    }}});
    for member in env.member_names(&ns, name).await {
        members
            .patch(&member, &PatchParams::default(), &Patch::Merge(&unrecorded))
            .await
            .or_panic();
    }
    eventually_every(
        "the members' trust records written",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let recorded: Vec<Option<String>> = env
                .members(&ns, name)
                .await
                .iter()
                .map(|m| {
                    m.annotations()
                        .get("etcd-operator.cozystack.io/trust-bundle")
                        .cloned()
                })
                .collect();
            if recorded.iter().all(Option::is_some) {
                assert!(
                recorded.iter().all(|r| r.as_deref() == Some("unknown")),
                "members that started before the CA change recorded as running it: {recorded:?}"
            );
                return Ok(());
            }
            Err(format!("{recorded:?}"))
        },
    )
    .await;
    assert_eq!(
        uids(&env.pods(&ns, name).await),
        before,
        "restarted while paused"
    );
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&paused(false)))
        .await
        .or_panic();
    let (fewest_ready, _) = wait_rolled(env, &ns, name, 3, &before, ROLL).await;
    assert!(
        fewest_ready >= 2,
        "quorum lost: only {fewest_ready} of 3 members Ready at one point"
    );
    let mut etcd = dial(env, &ns, name, Some((&ca, Some(pair(&m.operator))))).await;
    assert_eq!(
        tests::e2e::read_keys(&mut etcd, "adopt/").await,
        keys,
        "every key kept"
    );
}
