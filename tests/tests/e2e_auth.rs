//! End to end: root authentication (`spec.auth`) on real etcd members with TLS client listeners.
//! The operator enables auth once the cluster has converged, logs in as root for every
//! membership change after that, rotates the root password when the Secret changes, and names
//! the Secret when etcd refuses it; a cluster whose etcd demands a login that the spec does not
//! configure is reported, not retried blindly.

use std::collections::BTreeMap;
use std::time::Duration;

use api::v1alpha2::{AuthSpec, ClientTlsSpec, EtcdClusterSpec, SecretReference, TlsSpec};
use certs::mint::TestCa;
use etcd_client::{Certificate, ConnectOptions, TlsOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::e2e::{condition, env, spec, Env};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
/// Secrets are read on each reconcile; a formed cluster is reconciled at least every 30 s.
const SECRET_PICKUP: Duration = Duration::from_secs(90);

/// A client CA and a server certificate with the runbook's SANs: the `<cluster>-server-tls`
/// Secret's content, as `(ca.crt, tls.crt, tls.key)`.
fn server_material(cluster: &str, ns: &str) -> (String, String, String) {
    let ca = TestCa::new(&format!("{cluster} client CA")).or_panic();
    let server = ca
        .server_cert(&[
            &format!("*.{cluster}.{ns}.svc"),
            &format!("*.{cluster}.{ns}.svc.cluster.local"),
            &format!("{cluster}-client.{ns}.svc"),
            "localhost",
            "127.0.0.1",
        ])
        .or_panic();
    (ca.cert_pem().to_string(), server.cert_pem, server.key_pem)
}

async fn put_secret(env: &Env, ns: &str, name: &str, type_: &str, keys: &[(&str, &str)]) {
    let data: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let _: Secret = tests::harness::create(
        &env.client(),
        ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": type_, "stringData": data}),
    )
    .await;
}

/// `etcdctl` over the member's TLS client listener, trusting the mounted client CA.
async fn etcdctl(
    env: &Env,
    ns: &str,
    cluster: &str,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let mut argv = vec![
        "--endpoints=https://localhost:2379",
        "--cacert=/etc/etcd/tls/client/ca.crt",
    ];
    argv.extend_from_slice(args);
    env.etcdctl(ns, cluster, &argv).await
}

async fn set_password(env: &Env, ns: &str, name: &str, password: &str) {
    Api::<Secret>::namespaced(env.client(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": password}})),
        )
        .await
        .or_panic();
}

fn auth_spec(replicas: i32, server_secret: &str, root_secret: &str) -> EtcdClusterSpec {
    EtcdClusterSpec {
        tls: Some(TlsSpec {
            client: Some(ClientTlsSpec {
                server_secret_ref: Some(SecretReference::new(server_secret)),
                operator_client_secret_ref: None,
                cert_manager: None,
            }),
            peer: None,
        }),
        auth: Some(AuthSpec {
            enabled: true,
            root_credentials_secret_ref: Some(SecretReference::new(root_secret)),
        }),
        ..spec(replicas)
    }
}

/// An etcd client over TLS to the Ready members, logged in as root with `password` (or as
/// nobody); the login happens while dialing, so a refused password is an `Err`.
async fn dial(
    env: &Env,
    ns: &str,
    cluster: &str,
    ca: &str,
    password: Option<&str>,
) -> Result<etcd_client::Client, etcd_client::Error> {
    let endpoints: Vec<String> = env
        .ready_pods(ns, cluster)
        .await
        .iter()
        .map(|p| format!("https://{}.{cluster}.{ns}.svc:2379", p.name_any()))
        .collect();
    assert!(!endpoints.is_empty(), "{ns}/{cluster}: no ready member");
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(10))
        .with_tls(TlsOptions::new().ca_certificate(Certificate::from_pem(ca)));
    if let Some(password) = password {
        options = options.with_user("root", password);
    }
    etcd_client::Client::connect(endpoints, Some(options)).await
}

async fn read_as_root(
    env: &Env,
    ns: &str,
    cluster: &str,
    ca: &str,
    password: &str,
) -> BTreeMap<String, String> {
    let mut etcd = dial(env, ns, cluster, ca, Some(password)).await.or_panic();
    tests::e2e::read_keys(&mut etcd, "auth/").await
}

/// The cluster's entry in the operator's record: `(uid, password, previous)`.
async fn recorded(env: &Env, ns: &str, cluster: &str) -> (String, String, Option<String>) {
    // The operator's record of the root passwords it set (controller/src/auth.rs): one Secret in
    // its own namespace (`<release>-auth-records`), never one beside the cluster.
    let secret = Api::<Secret>::namespaced(env.client(), env.operator.namespace())
        .get(env.operator.auth_record_secret())
        .await
        .or_panic();
    let data = secret.data.unwrap_or_default();
    let field = |f: &str| {
        data.get(&format!("{ns}.{cluster}.{f}"))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    (
        field("uid").unwrap_or_default(),
        field("password").unwrap_or_default(),
        field("previous"),
    )
}

/// Set (or with `None` remove) the cluster's entry in the operator's record, as the operator
/// writes it: `(password, previous)`.
async fn set_recorded(env: &Env, ns: &str, cluster: &str, entry: Option<(&str, Option<&str>)>) {
    let uid = env.cluster(ns, cluster).await.uid().expect("a cluster UID");
    let key = |f: &str| format!("{ns}.{cluster}.{f}");
    let data = match entry {
        Some((password, previous)) => json!({
            key("uid"): uid,
            key("password"): password,
            key("previous"): previous,
        }),
        None => json!({key("uid"): null, key("password"): null, key("previous"): null}),
    };
    // stringData cannot remove a key: nulls go to data, values to stringData.
    let (remove, set): (Vec<_>, Vec<_>) = data
        .as_object()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .partition(|(_, v)| v.is_null());
    let remove: serde_json::Map<_, _> = remove.into_iter().collect();
    let set: serde_json::Map<_, _> = set.into_iter().collect();
    Api::<Secret>::namespaced(env.client(), env.operator.namespace())
        .patch(
            env.operator.auth_record_secret(),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": remove, "stringData": set})),
        )
        .await
        .or_panic();
}

async fn event_reasons(env: &Env, ns: &str, cluster: &str) -> Vec<String> {
    let events = env.events(ns, cluster).await;
    events.into_iter().filter_map(|e| e.reason).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_cluster_refuses_anonymous_clients_scales_as_root_and_rotates_its_password() {
    let env = env().await;
    let ns = env.namespace("auth").await;
    let name = "au";
    let (ca, crt, key) = server_material(name, &ns);
    put_secret(
        env,
        &ns,
        "au-server-tls",
        "kubernetes.io/tls",
        &[("tls.crt", &crt), ("tls.key", &key), ("ca.crt", &ca)],
    )
    .await;

    // The credentials Secret is not there yet: nothing is created, and the condition says which
    // Secret to create with which key.
    env.create_cluster(&ns, name, auth_spec(3, "au-server-tls", "au-root"))
        .await;
    let msg = env
        .wait_unavailable(&ns, name, "AuthRequiredNotConfigured", "au-root", BOOT)
        .await;
    assert!(msg.contains("key password"), "{msg}");
    assert!(
        env.members(&ns, name).await.is_empty(),
        "no member before the Secret"
    );

    put_secret(
        env,
        &ns,
        "au-root",
        "kubernetes.io/basic-auth",
        &[("username", "root"), ("password", "first-pw")],
    )
    .await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let c = env
        .wait_for(&ns, name, "status.authEnabled", BOOT, |c| {
            c.status.as_ref().and_then(|s| s.auth_enabled) == Some(true)
        })
        .await;
    assert!(tests::e2e::healthy(&c, 3), "{:?}", c.status);
    assert!(event_reasons(env, &ns, name)
        .await
        .contains(&"AuthEnabled".to_string()));
    // The password is recorded in the operator's own namespace, for this cluster incarnation;
    // nothing is written beside the cluster (the operator may not write Secrets there).
    let uid = c.uid().expect("a cluster UID");
    assert_eq!(
        recorded(env, &ns, name).await,
        (uid.clone(), "first-pw".to_string(), None)
    );
    assert!(
        Api::<Secret>::namespaced(env.client(), &ns)
            .get_opt("au-auth-applied")
            .await
            .or_panic()
            .is_none(),
        "a record was written in the cluster's namespace"
    );

    // Root writes; a client without a user is refused, over the API and with etcdctl.
    let mut root = dial(env, &ns, name, &ca, Some("first-pw")).await.or_panic();
    let keys = tests::e2e::put_keys(&mut root, "auth/", 50).await;
    let mut anonymous = dial(env, &ns, name, &ca, None).await.or_panic();
    let refused = anonymous
        .get("auth/0000", None)
        .await
        .err()
        .map(|e| e.to_string());
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("user name is empty")),
        "an anonymous read was not refused for want of a user: {refused:?}"
    );
    let (code, _, stderr) = etcdctl(env, &ns, name, &["get", "auth/0000"]).await;
    assert_ne!(code, Some(0), "etcdctl without a user was served");
    assert!(stderr.contains("user name is empty"), "{stderr}");
    let (code, stdout, stderr) = etcdctl(
        env,
        &ns,
        name,
        &["--user=root:first-pw", "get", "auth/0000"],
    )
    .await;
    assert_eq!(code, Some(0), "etcdctl as root failed: {stderr}");
    assert!(stdout.contains(&keys["auth/0000"]), "{stdout}");
    let (code, _, _) = etcdctl(env, &ns, name, &["--user=root:wrong", "get", "auth/0000"]).await;
    assert_ne!(code, Some(0), "etcdctl with a wrong password was served");

    // Membership changes now need root: 3 → 4 → 3, every key kept.
    env.scale(&ns, name, 4).await;
    env.wait_healthy(&ns, name, 4, BOOT).await;
    env.scale(&ns, name, 3).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let (code, list, stderr) =
        etcdctl(env, &ns, name, &["--user=root:first-pw", "member", "list"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(list.lines().count(), 3, "{list}");
    assert_eq!(read_as_root(env, &ns, name, &ca, "first-pw").await, keys);

    // Rotation: a new password in the Secret becomes etcd's root password; the old one stops
    // working; the cluster stays healthy and every key is there.
    set_password(env, &ns, "au-root", "second-pw").await;
    tests::harness::eventually("the new root password to log in", SECRET_PICKUP, || async {
        dial(env, &ns, name, &ca, Some("second-pw"))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    assert!(
        dial(env, &ns, name, &ca, Some("first-pw")).await.is_err(),
        "the old root password still logs in"
    );
    assert!(event_reasons(env, &ns, name)
        .await
        .contains(&"RootPasswordRotated".to_string()));
    assert_eq!(read_as_root(env, &ns, name, &ca, "second-pw").await, keys);
    assert!(tests::e2e::healthy(&env.cluster(&ns, name).await, 3));
    assert_eq!(
        recorded(env, &ns, name).await,
        (uid.clone(), "second-pw".to_string(), None)
    );

    // Upgrade from a version that kept the record beside the cluster (`<cluster>-auth-applied`,
    // owned by the cluster): with no entry in the operator's record, that one is honoured and
    // moved, so the rotation that follows still logs in with the password it holds.
    let cluster = env.cluster(&ns, name).await;
    let _: Secret = tests::harness::create(
        &env.client(),
        &ns,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "au-auth-applied", "ownerReferences": [{
                "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
                "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true,
            }]},
            "type": "kubernetes.io/basic-auth",
            "stringData": {"username": "root", "password": "second-pw"},
        }),
    )
    .await;
    set_recorded(env, &ns, name, None).await;
    set_password(env, &ns, "au-root", "third-pw").await;
    tests::harness::eventually(
        "the root password to rotate through the old record",
        SECRET_PICKUP,
        || async {
            dial(env, &ns, name, &ca, Some("third-pw"))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    assert_eq!(
        recorded(env, &ns, name).await,
        (uid.clone(), "third-pw".to_string(), None)
    );
    assert_eq!(cluster.uid(), env.cluster(&ns, name).await.uid());
    Api::<Secret>::namespaced(env.client(), &ns)
        .delete("au-auth-applied", &DeleteParams::default())
        .await
        .or_panic();

    // The crash window of a rotation: the record says the new password with the old one as
    // `previous`, and etcd still has the old one (the operator stopped after writing the record,
    // before UserChangePassword). Built by hand while nothing the operator knows logs in (etcd's
    // password changed behind its back, then the Secret's), so it cannot act in between: then
    // `previous` logs in and the rotation completes.
    let mut root = dial(env, &ns, name, &ca, Some("third-pw")).await.or_panic();
    root.user_change_password("root", "third-b")
        .await
        .or_panic();
    set_password(env, &ns, "au-root", "fourth-pw").await;
    env.wait_for(&ns, name, "AuthCredentialsRejected", SECRET_PICKUP, |c| {
        condition(c, "Available")
            .is_some_and(|(st, r, _)| st == "False" && r == "AuthCredentialsRejected")
    })
    .await;
    set_recorded(env, &ns, name, Some(("fourth-pw", Some("third-b")))).await;
    tests::harness::eventually(
        "the interrupted rotation to complete through `previous`",
        SECRET_PICKUP,
        || async {
            dial(env, &ns, name, &ca, Some("fourth-pw"))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    env.wait_healthy(&ns, name, 3, SECRET_PICKUP).await;
    assert_eq!(
        recorded(env, &ns, name).await,
        (uid.clone(), "fourth-pw".to_string(), None)
    );
    assert_eq!(read_as_root(env, &ns, name, &ca, "fourth-pw").await, keys);

    // A password etcd does not have, with no recorded password that logs in: the condition
    // names the Secret; putting the right one back recovers. etcd's password is changed behind
    // the operator's back, after the record is gone: the Secret's password and any record the
    // operator writes meanwhile (it records a password that works) are both refused then.
    set_recorded(env, &ns, name, None).await;
    let mut root = dial(env, &ns, name, &ca, Some("fourth-pw"))
        .await
        .or_panic();
    root.user_change_password("root", "etcds-own")
        .await
        .or_panic();
    let c = env
        .wait_for(&ns, name, "AuthCredentialsRejected", SECRET_PICKUP, |c| {
            condition(c, "Available")
                .is_some_and(|(st, r, _)| st == "False" && r == "AuthCredentialsRejected")
        })
        .await;
    let (_, _, msg) = condition(&c, "Available").expect("Available");
    assert!(msg.contains(&format!("{ns}/au-root")), "{msg}");
    let (st, reason, _) = condition(&c, "Degraded").expect("Degraded");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "AuthCredentialsRejected")
    );
    set_password(env, &ns, "au-root", "etcds-own").await;
    env.wait_healthy(&ns, name, 3, SECRET_PICKUP).await;
    assert_eq!(read_as_root(env, &ns, name, &ca, "etcds-own").await, keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_demanding_a_login_the_spec_does_not_configure_reads_auth_required_not_configured() {
    let env = env().await;
    let ns = env.namespace("noauth").await;
    let name = "na";
    env.create_cluster(&ns, name, spec(1)).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;

    // Auth turned on behind the operator's back (as a restored auth-enabled snapshot would be).
    let pod = env.ready_pods(&ns, name).await.remove(0).name_any();
    for args in [
        &["user", "add", "root:pw", "--interactive=false"][..],
        &["user", "grant-role", "root", "root"][..],
        &["auth", "enable"][..],
    ] {
        let mut argv = vec![
            "etcdctl",
            "--command-timeout=5s",
            "--endpoints=http://localhost:2379",
        ];
        argv.extend_from_slice(args);
        let out = env.runner.exec(&ns, &pod, "etcd", &argv).await.or_panic();
        assert_eq!(out.code, Some(0), "{argv:?}: {}", out.stderr);
    }
    let c = env
        .wait_for(&ns, name, "AuthRequiredNotConfigured", SECRET_PICKUP, |c| {
            condition(c, "Degraded")
                .is_some_and(|(st, r, _)| st == "True" && r == "AuthRequiredNotConfigured")
        })
        .await;
    let (st, reason, msg) = condition(&c, "Available").expect("Available");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "AuthRequiredNotConfigured")
    );
    assert!(msg.contains("spec.auth"), "{msg}");

    // No membership change is attempted while etcd refuses the operator's calls.
    env.scale(&ns, name, 3).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(env.members(&ns, name).await.len(), 1, "a member was added");
    let argv = [
        "etcdctl",
        "--command-timeout=5s",
        "--endpoints=http://localhost:2379",
        "--user=root:pw",
        "member",
        "list",
    ];
    let out = env.runner.exec(&ns, &pod, "etcd", &argv).await.or_panic();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout.lines().count(),
        1,
        "etcd gained a member: {}",
        out.stdout
    );
}
