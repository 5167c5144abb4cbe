//! End to end: cloud identity for object storage, with no static key anywhere. MinIO trusts the
//! test apiserver's service-account issuer as an OpenID provider (its discovery document and
//! JWKS, read anonymously as a cloud's IAM reads a cluster's), with a role policy; the snapshot,
//! verify and restore Pods run under a ServiceAccount with a projected token for MinIO's client
//! ID and trade it at MinIO's STS (`AssumeRoleWithWebIdentity`, through the standard AWS
//! credential chain of the agent) for temporary credentials. A snapshot is stored and verified,
//! a new cluster is restored from it with every key, and no Secret of the namespace holds a key.
//! A location whose role MinIO does not know fails with a message that says where the
//! credentials were to come from; one naming a ServiceAccount that does not exist fails at once,
//! naming it, before any Job.

use std::net::IpAddr;
use std::time::Duration;

use api::v1alpha2::{
    BootstrapSpec, EtcdClusterSpec, EtcdSnapshot, RestoreSource, RestoreSpec, S3Location,
    S3WebIdentity, SnapshotDestination, SnapshotPhase,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tests::backup::create_snapshot;
use tests::e2e::{env, spec, Env};
use tests::env::minio::{Minio, OpenId};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(240);
const RUN: Duration = Duration::from_secs(240);
/// The audience of the projected tokens: the client ID MinIO's provider is configured with.
const CLIENT_ID: &str = "etcd-operator-e2e";
const SERVICE_ACCOUNT: &str = "etcd-backup";

/// MinIO with the test apiserver as its OpenID provider, exposed in `ns` as the Service `minio`.
async fn minio_trusting_the_apiserver(
    env: &Env,
    ns: &str,
    root: &std::path::Path,
) -> (Minio, OpenId, String) {
    // The issuer's discovery document and keys are public on a cloud's clusters (EKS publishes
    // them; self-managed IRSA serves them from a bucket): here, readable without credentials.
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "e2e-service-account-issuer-discovery"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:service-account-issuer-discovery"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "system:unauthenticated"}]}))
    .or_panic();
    // Both tests of the binary ask; the first creates it.
    match Api::<ClusterRoleBinding>::all(env.client())
        .create(&PostParams::default(), &binding)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating the discovery binding: {e}"),
    }
    let openid = OpenId {
        config_url: format!("{}/.well-known/openid-configuration", env.cp.server_url()),
        client_id: CLIENT_ID.into(),
        role_policy: "readwrite".into(),
        ca_file: env.cp.pki().serving_ca_file.clone(),
    };
    let minio = Minio::start_with_openid(
        env.cp.testbins(),
        root,
        IpAddr::V4(env.runner.host_address()),
        &openid,
    )
    .await
    .or_panic();
    let endpoint = minio.expose(&env.client(), ns, "minio").await;
    (minio, openid, endpoint)
}

/// A location reached as [`SERVICE_ACCOUNT`] with the role `role_arn`, STS on MinIO itself.
fn assumed(endpoint: &str, bucket: &str, key: &str, role_arn: &str) -> S3Location {
    S3Location {
        endpoint: Some(endpoint.to_string()),
        bucket: bucket.to_string(),
        key: Some(key.to_string()),
        force_path_style: Some(true),
        service_account_name: Some(SERVICE_ACCOUNT.into()),
        web_identity: Some(S3WebIdentity {
            role_arn: role_arn.to_string(),
            audience: Some(CLIENT_ID.into()),
            sts_endpoint: Some(endpoint.to_string()),
        }),
        ..Default::default()
    }
}

/// The snapshot once it is terminal.
async fn terminal(env: &Env, ns: &str, name: &str) -> EtcdSnapshot {
    let api = Api::<EtcdSnapshot>::namespaced(env.client(), ns);
    tests::harness::eventually(&format!("snapshot {name} terminal"), RUN, || async {
        let s = api.get(name).await.map_err(|e| e.to_string())?;
        match s.status.as_ref().and_then(|st| st.phase) {
            Some(p) if p.is_terminal() => Ok(s),
            _ => Err(format!("{:?}", s.status)),
        }
    })
    .await
}

/// EtcdSnapshot `name` of `cluster` to `s3`, once terminal; its phase must be `phase`.
async fn snapshot_to(
    env: &Env,
    ns: &str,
    name: &str,
    cluster: &str,
    s3: S3Location,
    phase: SnapshotPhase,
) -> api::v1alpha2::EtcdSnapshotStatus {
    create_snapshot(
        env,
        ns,
        name,
        cluster,
        SnapshotDestination {
            s3: Some(s3),
            pvc: None,
        },
    )
    .await;
    let status = terminal(env, ns, name).await.status.unwrap_or_default();
    assert_eq!(status.phase, Some(phase), "{name}: {:?}", status.conditions);
    status
}

/// The pod spec of Job `job`'s template.
async fn job_pod(env: &Env, ns: &str, job: &str) -> k8s_openapi::api::core::v1::PodSpec {
    Api::<Job>::namespaced(env.client(), ns)
        .get(job)
        .await
        .or_panic()
        .spec
        .and_then(|s| s.template.spec)
        .expect("the Job has a pod template")
}

/// No Secret of `ns` carries an S3 key.
async fn no_static_key(env: &Env, ns: &str) {
    let secrets = Api::<Secret>::namespaced(env.client(), ns)
        .list(&ListParams::default())
        .await
        .or_panic();
    for secret in secrets {
        let data = secret.data.clone().unwrap_or_default();
        assert!(
            !data.contains_key("AWS_ACCESS_KEY_ID") && !data.contains_key("AWS_SECRET_ACCESS_KEY"),
            "Secret {} holds an S3 key",
            secret.name_any()
        );
    }
}

/// What each test starts from.
struct Setup {
    env: &'static Env,
    ns: String,
    /// MinIO's data; kept for as long as the server.
    _root: tempfile::TempDir,
    minio: Minio,
    openid: OpenId,
    endpoint: String,
}

/// A namespace `<prefix>-…` with MinIO trusting the apiserver, the ServiceAccount
/// [`SERVICE_ACCOUNT`] and a healthy one-member cluster `cluster`.
async fn setup(prefix: &str, cluster: &str) -> Setup {
    let env = env().await;
    let ns = env.namespace(prefix).await;
    let root = tempfile::tempdir().or_panic();
    let (minio, openid, endpoint) = minio_trusting_the_apiserver(env, &ns, root.path()).await;
    let _: ServiceAccount = tests::harness::create(
        &env.client(),
        &ns,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": SERVICE_ACCOUNT}}),
    )
    .await;
    env.create_cluster(&ns, cluster, spec(1)).await;
    env.wait_healthy(&ns, cluster, 1, BOOT).await;
    Setup {
        env,
        ns,
        _root: root,
        minio,
        openid,
        endpoint,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_and_a_restore_through_an_assumed_role_with_no_static_key() {
    let Setup {
        env,
        ns,
        _root,
        minio,
        openid,
        endpoint,
    } = setup("cloudid", "ci").await;
    let name = "ci";
    let keys = env.write_keys(&ns, name, 50).await;
    let role = openid.role_arn();
    let status = snapshot_to(
        env,
        &ns,
        "ci-role",
        name,
        assumed(&endpoint, &minio.bucket, "ci/", &role),
        SnapshotPhase::Complete,
    )
    .await;
    let artifact = status.artifact.clone().expect("status.artifact");
    assert_eq!(artifact.uri, format!("s3://{}/ci/ci-role.db", minio.bucket));
    let (size, _, _) = minio.object("ci/ci-role.db").await;
    assert_eq!(size, artifact.size_bytes);

    // The Job's Pod ran as the ServiceAccount with its projected token and the role, no key.
    let pod = job_pod(env, &ns, "ci-role-snapshot").await;
    assert_eq!(pod.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));
    let container = &pod.containers[0];
    let env_names: Vec<&str> = container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    assert!(
        env_names.contains(&"AWS_ROLE_ARN")
            && env_names.contains(&"AWS_WEB_IDENTITY_TOKEN_FILE")
            && !env_names.contains(&"AWS_ACCESS_KEY_ID"),
        "{env_names:?}"
    );

    // Verified: the verify Job read the object back through the same role.
    let api = Api::<EtcdSnapshot>::namespaced(env.client(), &ns);
    let verified = tests::harness::eventually("ci-role verified", RUN, || async {
        let s = api.get("ci-role").await.map_err(|e| e.to_string())?;
        let st = s.status.clone().unwrap_or_default();
        match st.verified() {
            Some(v) => Ok(v),
            None => Err(format!("{:?}", st.conditions)),
        }
    })
    .await;
    let conditions = api
        .get("ci-role")
        .await
        .or_panic()
        .status
        .unwrap_or_default()
        .conditions;
    assert!(verified, "{conditions:?}");

    // A new cluster restored from it, the seed's restore reading the object as the same role.
    let source = RestoreSource {
        s3: Some(assumed(&endpoint, &minio.bucket, "ci/ci-role.db", &role)),
        pvc: None,
    };
    env.create_cluster(
        &ns,
        "cr",
        EtcdClusterSpec {
            bootstrap: Some(BootstrapSpec {
                restore: Some(RestoreSpec { source }),
            }),
            ..spec(1)
        },
    )
    .await;
    env.wait_healthy(&ns, "cr", 1, BOOT).await;
    env.check_keys(&ns, "cr", &keys).await;
    let seed = Api::<Pod>::namespaced(env.client(), &ns)
        .list(&ListParams::default().labels(&api::labels::cluster_selector("cr")))
        .await
        .or_panic()
        .items
        .into_iter()
        .find(|p| {
            p.labels()
                .get(api::labels::APP_COMPONENT)
                .map(String::as_str)
                != Some("snapshot")
        })
        .expect("a member Pod of cr");
    assert_eq!(
        seed.spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref()),
        Some(SERVICE_ACCOUNT)
    );

    no_static_key(env, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_the_store_does_not_know_fails_the_snapshot_naming_the_cloud_identity() {
    let Setup {
        env,
        ns,
        _root,
        minio,
        openid,
        endpoint,
    } = setup("cloudid-bad", "cb").await;
    let name = "cb";
    let status = snapshot_to(
        env,
        &ns,
        "cb-unknown-role",
        name,
        assumed(
            &endpoint,
            &minio.bucket,
            "cb/",
            "arn:minio:iam:::role/not-a-role",
        ),
        SnapshotPhase::Failed,
    )
    .await;
    let said = format!("{:?}", status.conditions);
    assert!(
        said.contains("cloud identity") && said.contains("webIdentity"),
        "the failure must say the credentials were the Pod's cloud identity: {said}"
    );
    assert!(
        minio.objects().await.is_empty(),
        "{:?}",
        minio.objects().await
    );

    // A ServiceAccount that does not exist: the snapshot fails at once, naming it and the field,
    // and no Job is created (Kubernetes would refuse its Pods, saying so only in Events).
    let mut location = assumed(&endpoint, &minio.bucket, "cb/", &openid.role_arn());
    location.service_account_name = Some("nobody-here".into());
    let status = snapshot_to(
        env,
        &ns,
        "cb-no-account",
        name,
        location,
        SnapshotPhase::Failed,
    )
    .await;
    let said = format!("{:?}", status.conditions);
    assert!(
        said.contains(
            "ServiceAccount nobody-here (spec.destination.s3.serviceAccountName) does not exist"
        ),
        "{said}"
    );
    assert!(
        Api::<Job>::namespaced(env.client(), &ns)
            .get_opt("cb-no-account-snapshot")
            .await
            .or_panic()
            .is_none(),
        "no Job for a snapshot whose ServiceAccount is missing"
    );
}
