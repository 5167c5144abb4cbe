//! End to end: certificate rotation on a running mTLS cluster from the user's own Secrets, with
//! a writer running throughout. A new CA added to the trust bundles (`ca.crt`) restarts the
//! members one at a time, followers first and the leader last after MoveLeader, never dropping
//! below a majority of Ready members; leaves renewed from the new CA reach etcd with no restart;
//! the old CA removed rolls them again. And the checks that catch a certificate that would be
//! refused (wrong SANs, a CA that does not match) before a handshake fails, naming the Secret;
//! a TLS cluster paused and resumed keeps every key.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use certs::mint::TestCa;
use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::e2e::{condition, env, Env};
use tests::tls::{
    create_operator_secret, create_peer_secret, create_secret, create_server_secret, dial, leaves,
    mint, pair, tls_spec, Material,
};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
const ROLL: Duration = Duration::from_secs(300);
/// The longest a writer may go without a successful write during a rollout: restarts of
/// followers cost nothing, the leader's one election after MoveLeader (a few seconds at most
/// on a loaded test machine).
const LONGEST_GAP: Duration = Duration::from_secs(15);

const TRUST_ANNOTATION: &str = "etcd-operator.cozystack.io/trust-bundle";

/// Writes one key every 100 ms until stopped; reports what it saw.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<WriterReport>,
}

#[derive(Debug)]
struct WriterReport {
    written: BTreeMap<String, String>,
    failed: u64,
    longest_gap: Duration,
}

impl Writer {
    fn start(endpoints: Vec<String>, ca: String, identity: (String, String), prefix: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let prefix = prefix.to_string();
        let task = tokio::spawn(async move {
            let options = ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(2))
                .with_timeout(Duration::from_secs(2))
                .with_tls(
                    TlsOptions::new()
                        .ca_certificate(Certificate::from_pem(&ca))
                        .identity(Identity::from_pem(&identity.0, &identity.1)),
                );
            let mut client = etcd_client::Client::connect(endpoints, Some(options))
                .await
                .or_panic();
            let mut report = WriterReport {
                written: BTreeMap::new(),
                failed: 0,
                longest_gap: Duration::ZERO,
            };
            let mut last_ok = Instant::now();
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let key = format!("{prefix}{i:06}");
                let value = format!("v{i}");
                match client.put(key.clone(), value.clone(), None).await {
                    Ok(_) => {
                        report.longest_gap = report.longest_gap.max(last_ok.elapsed());
                        last_ok = Instant::now();
                        report.written.insert(key, value);
                        i += 1;
                    }
                    Err(_) => report.failed += 1,
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            report.longest_gap = report.longest_gap.max(last_ok.elapsed());
            report
        });
        Self { stop, task }
    }

    async fn finish(self) -> WriterReport {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.or_panic()
    }
}

fn endpoints(ns: &str, cluster: &str, pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| format!("https://{}.{cluster}.{ns}.svc:2379", p.name_any()))
        .collect()
}

fn uids(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect()
}

async fn patch_secret(env: &Env, ns: &str, name: &str, keys: &[(&str, &str)]) {
    let data: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    Api::<Secret>::namespaced(env.client(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "stringData": data })),
        )
        .await
        .or_panic();
}

/// Cluster Events with `reason`, oldest first, as their messages.
async fn event_messages(env: &Env, ns: &str, cluster: &str, reason: &str) -> Vec<String> {
    let mut events: Vec<Event> = Api::<Event>::namespaced(env.client(), ns)
        .list(&ListParams::default())
        .await
        .or_panic()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(cluster))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect();
    events.sort_by_key(|e| {
        e.event_time
            .as_ref()
            .map(|t| t.0)
            .or(e.first_timestamp.as_ref().map(|t| t.0))
    });
    events.into_iter().filter_map(|e| e.message).collect()
}

/// The members whose Pods were restarted for a new CA bundle, by time of their `PodRestarted`
/// Event.
async fn restarts_in_order(env: &Env, ns: &str, cluster: &str) -> Vec<String> {
    let members: Vec<String> = env
        .members(ns, cluster)
        .await
        .iter()
        .map(|m| m.name_any())
        .collect();
    let mut events: Vec<(k8s_openapi::jiff::Timestamp, String)> =
        Api::<Event>::namespaced(env.client(), ns)
            .list(&ListParams::default())
            .await
            .or_panic()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("PodRestarted"))
            .filter_map(|e| {
                let member = e.involved_object.name.clone()?;
                let at = e
                    .event_time
                    .as_ref()
                    .map(|t| t.0)
                    .or(e.first_timestamp.as_ref().map(|t| t.0))?;
                members.contains(&member).then_some((at, member))
            })
            .collect();
    events.sort();
    events.into_iter().map(|(_, m)| m).collect()
}

/// Waits until every member Pod was replaced (none of `before`'s UIDs left), the cluster is
/// healthy, no rollout is reported and every Pod runs its member's trust bundle. Samples the
/// Ready Pods meanwhile: returns the fewest seen and whether `RollingRestart` was reported.
async fn wait_rolled(
    env: &Env,
    ns: &str,
    cluster: &str,
    before: &BTreeMap<String, String>,
) -> (usize, bool) {
    let started = Instant::now();
    let mut fewest_ready = usize::MAX;
    let mut reported = false;
    loop {
        let pods = env.pods(ns, cluster).await;
        let ready = pods.iter().filter(|p| tests::e2e::pod_ready(p)).count();
        fewest_ready = fewest_ready.min(ready);
        let c = env.cluster(ns, cluster).await;
        let rolling = condition(&c, "Progressing")
            .is_some_and(|(st, r, _)| st == "True" && r == "RollingRestart");
        reported |= rolling;
        let replaced = pods.len() == before.len()
            && pods
                .iter()
                .all(|p| before.get(&p.name_any()) != p.uid().as_ref());
        let members = env.members(ns, cluster).await;
        let matching = members.iter().all(|m| {
            let want = m.annotations().get(TRUST_ANNOTATION);
            want.is_some()
                && pods
                    .iter()
                    .find(|p| p.name_any() == m.name_any())
                    .is_some_and(|p| p.annotations().get(TRUST_ANNOTATION) == want)
        });
        if replaced && matching && !rolling && tests::e2e::healthy(&c, 3) {
            return (fewest_ready, reported);
        }
        assert!(
            started.elapsed() < ROLL,
            "{ns}/{cluster}: members not rolled within {ROLL:?}: pods {:?}, conditions {:?}",
            uids(&pods),
            c.status.map(|s| s.conditions)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn bundle(a: &TestCa, b: &TestCa) -> String {
    format!("{}{}", a.cert_pem(), b.cert_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ca_rolls_the_members_one_at_a_time_and_renewed_leaves_need_no_restart() {
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

    // 1. A new CA joins both trust bundles: every member restarts once, one at a time.
    let new_client_ca = TestCa::new("rot client CA 2").or_panic();
    let new_peer_ca = TestCa::new("rot peer CA 2").or_panic();
    let client_bundle = bundle(&m.client_ca, &new_client_ca);
    let writer = Writer::start(
        endpoints.clone(),
        client_bundle.clone(),
        (m.operator.cert_pem.clone(), m.operator.key_pem.clone()),
        "w1/",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    patch_secret(env, &ns, "rot-server", &[("ca.crt", &client_bundle)]).await;
    patch_secret(
        env,
        &ns,
        "rot-peer",
        &[("ca.crt", &bundle(&m.peer_ca, &new_peer_ca))],
    )
    .await;
    let (fewest_ready, reported) = wait_rolled(env, &ns, name, &first).await;
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

    // 2. Leaves renewed from the new CAs (the bundles keep both): etcd serves them with no
    // restart, and the operator's new client certificate is accepted.
    let second = uids(&env.pods(&ns, name).await);
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
        loop {
            let options = ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(2))
                .with_timeout(Duration::from_secs(2))
                .with_tls(
                    TlsOptions::new()
                        .ca_certificate(Certificate::from_pem(&new_ca))
                        .identity(Identity::from_pem(&operator.cert_pem, &operator.key_pem)),
                );
            let ok = match etcd_client::Client::connect([endpoint.clone()], Some(options)).await {
                Ok(mut c) => c.get("rot/0000", None).await.is_ok(),
                Err(_) => false,
            };
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{endpoint} does not serve the renewed certificate"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
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
    let first_writer = writer.finish().await;

    // 3. The old CA leaves the bundles: one more roll, and only new-CA certificates work.
    let writer = Writer::start(
        endpoints.clone(),
        new_ca.clone(),
        (operator.cert_pem.clone(), operator.key_pem.clone()),
        "w2/",
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    patch_secret(env, &ns, "rot-server", &[("ca.crt", &new_ca)]).await;
    patch_secret(env, &ns, "rot-peer", &[("ca.crt", new_peer_ca.cert_pem())]).await;
    let (fewest_ready, _) = wait_rolled(env, &ns, name, &second).await;
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
    for (prefix, report) in [("w1/", &first_writer), ("w2/", &second_writer)] {
        eprintln!(
            "writer {prefix}: {} writes, {} failed, longest gap between writes {:?}",
            report.written.len(),
            report.failed,
            report.longest_gap
        );
        assert!(!report.written.is_empty(), "writer {prefix} wrote nothing");
        assert_eq!(
            tests::e2e::read_keys(&mut etcd, prefix).await,
            report.written,
            "every acknowledged write of {prefix} kept"
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
    let c = env
        .wait_for(
            &ns,
            name,
            "TLSSecretNotReady naming the peer Secret",
            BOOT,
            |c| {
                condition(c, "Available").is_some_and(|(st, r, msg)| {
                    st == "False" && r == "TLSSecretNotReady" && msg.contains("san-peer")
                })
            },
        )
        .await;
    let (_, _, msg) = condition(&c, "Available").expect("Available condition");
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
