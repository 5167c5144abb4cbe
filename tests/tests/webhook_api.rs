//! The admission webhook behind a real kube-apiserver (current Kubernetes, the CRDs installed):
//! the `etcd-operator-webhook` binary runs as a child on loopback with a minted serving
//! certificate, registered through a ValidatingWebhookConfiguration and a
//! MutatingWebhookConfiguration (`clientConfig.url` + `caBundle`), and the tests go through
//! kubectl and the API as a user would.
//!
//! Needs `ETCD_OPERATOR_TESTBINS` and the webhook binary (`make build` builds it); see
//! docs/testing.md. Webhook configurations are cluster-scoped, so the tests of this binary take
//! turns ([`SERIAL`]) and each registers its own webhook under the same configuration names.

use std::io::Write as _;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tests::corpus::{self, Verdict};
use tests::env::{ControlPlane, KubectlOutput};
use tests::webhook::{self, FailurePolicy, Webhook};
use tests::OrPanic;

/// The name of both webhook configurations.
const CONFIG: &str = "etcd-operator-webhook-api-test";
/// How long the apiserver may take to act on a configuration change.
const EFFECTIVE_TIMEOUT: Duration = Duration::from_secs(30);
/// Corpus requests in flight at once.
const CONCURRENCY: usize = 8;

/// The tests of this binary take turns: every one of them registers cluster-wide webhooks.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn control_plane() -> &'static ControlPlane {
    ControlPlane::builder()
        .with_crds()
        .shared()
        .await
        .or_panic()
}

/// How the apiserver words a denial by the validating webhook.
const DENIED: &str = "admission webhook \"validate.etcd-operator.cozystack.io\" denied the request";

/// Write to the terminal past the harness's capture.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn object(kind: &str, name: &str, ns: &str, spec: Value) -> Value {
    json!({
        "apiVersion": api::v1alpha2::API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

fn dynamic(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("not an object: {e}"))
}

fn api_of(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let resource = corpus::resource(kind).unwrap_or_else(|| panic!("no CRD for {kind}"));
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// `object` in a JSON file under the control plane's root, for `kubectl -f`; gone on drop.
fn object_file(cp: &ControlPlane, object: &Value) -> (tempfile::NamedTempFile, String) {
    let file = tempfile::Builder::new()
        .prefix("object-")
        .suffix(".json")
        .tempfile_in(cp.root())
        .or_panic();
    std::fs::write(file.path(), serde_json::to_vec_pretty(object).or_panic()).or_panic();
    let path = file.path().to_string_lossy().into_owned();
    (file, path)
}

/// `kubectl apply -f <file>` of `object`, as a user would.
async fn kubectl_apply(cp: &ControlPlane, object: &Value) -> KubectlOutput {
    let (_file, path) = object_file(cp, object);
    cp.kubectl(&["apply", "-f", &path]).await.or_panic()
}

/// `kubectl patch <kind> <name> -n <ns> <flags> --type=merge -p <patch>`, as a user would.
async fn kubectl_patch(
    cp: &ControlPlane,
    (kind, name, ns): (&str, &str, &str),
    flags: &[&str],
    patch: &Value,
) -> KubectlOutput {
    let patch = patch.to_string();
    let mut args = vec!["patch", kind, name, "-n", ns];
    args.extend_from_slice(flags);
    args.extend(["--type=merge", "-p", &patch]);
    cp.kubectl(&args).await.or_panic()
}

/// kubectl's stderr holds every one of `parts`.
#[track_caller]
fn assert_stderr_names(out: &KubectlOutput, parts: &[&str]) {
    for part in parts {
        assert!(
            out.stderr.contains(part),
            "missing {part:?} in kubectl's stderr:\n{}",
            out.stderr
        );
    }
}

/// Create the `kind` object `ns/name` with `spec` through the API, as the admin.
async fn create(
    client: &Client,
    ns: &str,
    (kind, name): (&str, &str),
    spec: Value,
) -> DynamicObject {
    api_message(
        api_of(client, ns, kind)
            .create(
                &PostParams::default(),
                &dynamic(object(kind, name, ns, spec)),
            )
            .await,
    )
    .unwrap_or_else(|e| panic!("creating {kind} {ns}/{name}: {e}"))
}

/// The stored spec of the EtcdCluster `name`.
async fn stored_spec(clusters: &Api<DynamicObject>, name: &str) -> Value {
    clusters.get(name).await.or_panic().data["spec"].clone()
}

/// Poll `probe` until it succeeds (a write is admitted); past [`EFFECTIVE_TIMEOUT`] fail naming
/// `what` and the last answer.
async fn wait_admitted<T, F, Fut>(what: &str, probe: F)
where
    T: std::fmt::Debug,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let last = std::sync::Mutex::new(String::new());
    let waited = webhook::wait_until(what, EFFECTIVE_TIMEOUT, || {
        let (probe, last) = (&probe, &last);
        async move {
            let result = probe().await;
            if let Ok(mut last) = last.lock() {
                *last = format!("{result:?}");
            }
            Ok(result.ok().map(|_| ()))
        }
    })
    .await;
    if let Err(e) = waited {
        panic!(
            "{e}; last probe: {}",
            last.lock().map(|l| l.clone()).unwrap_or_default()
        );
    }
}

/// One test's turn ([`SERIAL`]), the shared control plane, an admin client and a namespace of
/// its own holding the probe member.
struct Turn {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    began: Instant,
    cp: &'static ControlPlane,
    client: Client,
    ns: String,
}

impl Turn {
    async fn take(ns: &str) -> Self {
        let serial = SERIAL.lock().await;
        let began = Instant::now();
        let cp = control_plane().await;
        let client = cp.client().or_panic();
        let ns = cp.namespace(ns).await.or_panic();
        create_member(&client, &ns).await;
        Self {
            _serial: serial,
            began,
            cp,
            client,
            ns,
        }
    }

    /// The webhook with no extra flags, registered with failurePolicy Fail.
    async fn register(&self) -> Webhook {
        self.register_with(&[]).await
    }

    async fn register_with(&self, args: &[&str]) -> Webhook {
        start_and_register(self.cp, &self.client, &self.ns, args, FailurePolicy::Fail).await
    }

    fn api(&self, kind: &str) -> Api<DynamicObject> {
        api_of(&self.client, &self.ns, kind)
    }

    /// Unregister the webhook, check the control plane still runs, report the time taken.
    async fn done(self, what: &str) {
        webhook::unregister(&self.client, CONFIG).await.or_panic();
        self.cp.check_running().or_panic();
        report(&format!("{what}: passed in {:.1?}", self.began.elapsed()));
    }
}

fn api_message(result: Result<DynamicObject, kube::Error>) -> Result<DynamicObject, String> {
    result.map_err(|e| match e {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    })
}

/// A valid EtcdCluster on a 1Gi tmpfs.
fn memory_spec() -> Value {
    json!({"version": "3.6.11", "storage": {"size": "1Gi", "medium": "Memory"}})
}

/// An invalid EtcdCluster with three independent problems.
fn invalid_cluster_spec() -> Value {
    json!({"version": "v3.6", "replicas": -1, "progressDeadlineSeconds": 0})
}

/// The EtcdMember the ownership checks update (created before the webhook is registered: once
/// it is, only the controller may create members).
const MEMBER: &str = "main-abcde";

async fn create_member(client: &Client, ns: &str) {
    create(client, ns, ("EtcdMember", MEMBER), member_spec()).await;
}

/// The spec of an EtcdMember of the cluster `main`.
fn member_spec() -> Value {
    json!({"clusterName": "main", "version": "3.6.11"})
}

/// Update the member's spec as the admin, for real or as a dry run.
async fn update_member(client: &Client, ns: &str, dry_run: bool) -> Result<DynamicObject, String> {
    let pp = PatchParams {
        dry_run,
        ..Default::default()
    };
    api_message(
        api_of(client, ns, "EtcdMember")
            .patch(
                MEMBER,
                &pp,
                &Patch::Merge(json!({"spec": {"dormant": true}})),
            )
            .await,
    )
}

/// Dry-run create of a valid EtcdCluster (reaches both webhooks, stores nothing).
async fn dry_run_cluster(client: &Client, ns: &str) -> Result<DynamicObject, String> {
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api_message(
        api_of(client, ns, "EtcdCluster")
            .create(
                &pp,
                &dynamic(object(
                    "EtcdCluster",
                    "probe",
                    ns,
                    json!({"version": "3.6.11"}),
                )),
            )
            .await,
    )
}

/// Start a webhook with `args`, register it (both configurations, `policy`), and wait until the
/// apiserver calls *this* webhook for both: its own request counters move on dry-run probes.
/// Needs the probe member in `ns`.
async fn start_and_register(
    cp: &ControlPlane,
    client: &Client,
    ns: &str,
    args: &[&str],
    policy: FailurePolicy,
) -> Webhook {
    let started = Instant::now();
    let hook = Webhook::start(cp, args).await.or_panic();
    webhook::register(client, CONFIG, &hook, policy)
        .await
        .or_panic();
    let last = std::sync::Mutex::new(String::new());
    let waited = webhook::wait_until(
        "the apiserver to call the new webhook (validating and mutating)",
        EFFECTIVE_TIMEOUT,
        || {
            let (hook, last) = (&hook, &last);
            async move {
                let cluster = dry_run_cluster(client, ns).await;
                let member = update_member(client, ns, true).await;
                hook.process()
                    .check_running("while waiting for its registration")
                    .map_err(|e| e.to_string())?;
                let mutated = hook
                    .admissions(&[("webhook", "mutate"), ("kind", "EtcdCluster")])
                    .await
                    .map_err(|e| e.to_string())?;
                let validated = hook
                    .admissions(&[("webhook", "validate"), ("kind", "EtcdMember")])
                    .await
                    .map_err(|e| e.to_string())?;
                if let Ok(mut last) = last.lock() {
                    *last = format!("cluster probe {cluster:?}; member probe {member:?}");
                }
                Ok((mutated > 0.0 && validated > 0.0).then_some(()))
            }
        },
    )
    .await;
    if let Err(e) = waited {
        panic!(
            "{e}; last probes: {}",
            last.lock().map(|l| l.clone()).unwrap_or_default()
        );
    }
    report(&format!(
        "webhook {} registered ({policy:?}) and called within {:.1?}",
        hook.url(""),
        started.elapsed()
    ));
    hook
}

fn bytes_of(value: &Value) -> Option<i64> {
    api::quantity::to_bytes(&Quantity(value.as_str()?.to_string()))
}

/// The admin kubeconfig's user (the CN of its client certificate), as the apiserver sees it.
async fn admin_username(cp: &ControlPlane) -> String {
    let user = cp
        .kubectl_ok(&[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .await
        .or_panic();
    let user = user.trim().to_string();
    assert!(!user.is_empty(), "kubectl auth whoami printed no username");
    user
}

/// `kubectl patch --type=json` of the first webhook's failurePolicy in both configurations.
async fn set_failure_policy(cp: &ControlPlane, policy: FailurePolicy) {
    let patch =
        json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": policy.as_str()}])
            .to_string();
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        cp.kubectl_ok(&["patch", kind, CONFIG, "--type=json", "-p", &patch])
            .await
            .or_panic();
    }
}

/// 1-5: registered with failurePolicy Fail, the webhook's defaults, warnings and EtcdMember
/// ownership reach kubectl and the API; an invalid object is rejected with every problem named.
#[tokio::test(flavor = "multi_thread")]
async fn webhook_up_defaults_warns_guards_members_and_rejects_with_every_field() {
    let turn = Turn::take("webhook-up").await;
    let (cp, client, ns) = (turn.cp, &turn.client, turn.ns.as_str());
    let mut held = object("EtcdMember", "main-held0", ns, member_spec());
    held["metadata"]["finalizers"] = json!(["etcd-operator.cozystack.io/member-cleanup"]);
    turn.api("EtcdMember")
        .create(&PostParams::default(), &dynamic(held))
        .await
        .or_panic();
    let hook = turn.register().await;
    let clusters = turn.api("EtcdCluster");

    // 2. An invalid cluster is rejected naming every problem with its field path, in the
    // webhook's own rendering. The apiserver runs the CRD's schema and CEL validation *before*
    // validating admission webhooks (and after mutating ones), so the rich message comes from
    // /mutate, which runs first.
    let out = kubectl_apply(
        cp,
        &object("EtcdCluster", "broken", ns, invalid_cluster_spec()),
    )
    .await;
    assert!(!out.success, "an invalid cluster was accepted: {out:?}");
    // kubectl renders a 422 denial from its causes: one line per violation, each the webhook's
    // own text (value and fix), not the schema's terser wording.
    assert_stderr_names(
        &out,
        &[
            "spec.replicas: must be 0 or more (got -1); set the number of members",
            "spec.version: must be an etcd release as X.Y.Z",
            "spec.progressDeadlineSeconds: must be at least 1 (got 0)",
        ],
    );

    // 3. Defaults, applied by the apiserver from the webhook's JSONPatch (kube sends the patch
    // bytes as a JSON array of numbers; the apiserver must accept that encoding).
    create(client, ns, ("EtcdCluster", "tmpfs"), memory_spec()).await;
    let stored = stored_spec(&clusters, "tmpfs").await;
    let anti = &stored["affinity"]["podAntiAffinity"];
    assert_eq!(
        anti,
        &json!({"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {
                "labelSelector": {"matchLabels": {(api::labels::CLUSTER): "tmpfs"}},
                "topologyKey": "kubernetes.io/hostname",
            },
        }]}),
        "stored spec: {stored}"
    );
    let expected = 1024 * 1024 * 1024 + 256 * 1024 * 1024;
    let resources = &stored["resources"];
    assert_eq!(
        bytes_of(&resources["limits"]["memory"]),
        Some(expected),
        "limits.memory must be storage.size + 256Mi: {stored}"
    );
    assert_eq!(
        bytes_of(&resources["requests"]["memory"]),
        Some(expected),
        "requests.memory must match the limit: {stored}"
    );

    // What the user set is kept as written: their anti-affinity and limit, no request added.
    let own_affinity = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"team": "db"}},
        "topologyKey": "topology.kubernetes.io/zone",
    }]}});
    let own_resources = json!({"limits": {"memory": "3Gi"}});
    let spec = json!({
        "version": "3.6.11",
        "storage": {"size": "1Gi", "medium": "Memory"},
        "affinity": own_affinity,
        "resources": own_resources,
    });
    create(client, ns, ("EtcdCluster", "own"), spec).await;
    let stored = stored_spec(&clusters, "own").await;
    assert_eq!(stored["affinity"], own_affinity, "{stored}");
    assert_eq!(stored["resources"], own_resources, "{stored}");

    // A user-set affinity without podAntiAffinity is extended, not replaced.
    let node_affinity = json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
        "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}],
    }]}});
    let spec = json!({"version": "3.6.11", "affinity": {"nodeAffinity": node_affinity}});
    create(client, ns, ("EtcdCluster", "nodes"), spec).await;
    let stored = stored_spec(&clusters, "nodes").await;
    assert_eq!(
        stored["affinity"]["nodeAffinity"], node_affinity,
        "{stored}"
    );
    assert!(
        stored["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .is_array(),
        "{stored}"
    );
    assert!(
        stored.get("resources").is_none(),
        "PVC clusters get no memory default: {stored}"
    );

    // 4. A valid but risky choice is admitted with a warning kubectl prints.
    let out = kubectl_apply(
        cp,
        &object(
            "EtcdCluster",
            "even",
            ns,
            json!({"version": "3.6.11", "replicas": 4}),
        ),
    )
    .await;
    assert!(out.success, "{out:?}");
    assert!(
        out.stderr.contains("Warning: spec.replicas=4 is even"),
        "no even-replica warning on kubectl's stderr: {out:?}"
    );
    // ... and a cluster without TLS, with the link to the TLS docs.
    assert!(
        out.stderr
            .contains("Warning: spec.tls.client and spec.tls.peer are unset")
            && out.stderr.contains(::webhook::warnings::TLS_DOCS_URL),
        "no plain-text warning on kubectl's stderr: {out:?}"
    );

    // 5. EtcdMembers are operator-owned: the admin is not the controller...
    let admin = admin_username(cp).await;
    let member_patch = json!({"spec": {"dormant": true}});
    let out = kubectl_patch(cp, ("etcdmember", MEMBER, ns), &[], &member_patch).await;
    assert!(!out.success, "the admin updated an EtcdMember: {out:?}");
    assert_stderr_names(
        &out,
        &[
            DENIED,
            &format!("EtcdMember \"{MEMBER}\" is operator-owned"),
            &format!("{admin:?} is not it"),
        ],
    );
    // A live member's finalizers are the operator's too: dropping member-cleanup would let a
    // later delete skip the etcd MemberRemove.
    let members = turn.api("EtcdMember");
    let err = api_message(
        members
            .patch(
                MEMBER,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
            )
            .await,
    )
    .expect_err("the admin changed a live member's finalizers");
    assert!(err.contains("deletionTimestamp"), "{err}");
    // ...but a member already being deleted can be released by anyone: delete the one holding
    // a finalizer (created before the webhook was registered: creation is the controller's
    // alone) and clear the finalizer as the admin.
    members
        .delete("main-held0", &Default::default())
        .await
        .or_panic();
    api_message(
        members
            .patch(
                "main-held0",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await,
    )
    .unwrap_or_else(|e| panic!("releasing a terminating member was refused: {e}"));
    assert!(
        members.get_opt("main-held0").await.or_panic().is_none(),
        "the released member is gone"
    );

    // ...and with --controller-username set to the admin's user, the same update is allowed.
    drop(hook);
    let controller_flag = format!("--controller-username={admin}");
    let hook = turn.register_with(&[&controller_flag]).await;
    let out = kubectl_patch(cp, ("etcdmember", MEMBER, ns), &[], &member_patch).await;
    assert!(out.success, "the controller's update was refused: {out:?}");
    let stored = members.get(MEMBER).await.or_panic();
    assert_eq!(
        stored.data["spec"]["dormant"],
        json!(true),
        "{:?}",
        stored.data
    );
    assert!(
        hook.admissions(&[
            ("webhook", "validate"),
            ("kind", "EtcdMember"),
            ("allowed", "true")
        ])
        .await
        .or_panic()
            > 0.0
    );

    turn.done("webhook up").await;
}

/// A user with RBAC on `etcdmembers` and `etcdmembers/status` (as an admin's aggregated
/// `edit`-like role may grant) is still not the operator: creating an EtcdMember and writing
/// its status (`isVoter: false` would make the member's deletion skip the etcd MemberRemove) are
/// refused by the webhook, through kubectl as that user; the controller's identity may do both.
#[tokio::test(flavor = "multi_thread")]
async fn etcd_member_create_and_status_writes_are_the_controllers_alone() {
    let turn = Turn::take("member-guard").await;
    let (cp, ns) = (turn.cp, turn.ns.as_str());
    let members = turn.api("EtcdMember");
    members
        .patch_status(
            MEMBER,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"memberID": "8e9e05c52164694d", "isVoter": true}})),
        )
        .await
        .or_panic();
    // alice may write members and their status as far as RBAC goes.
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "etcdmember-writer", "namespace": ns},
        "rules": [{"apiGroups": [api::v1alpha2::GROUP],
                   "resources": ["etcdmembers", "etcdmembers/status"],
                   "verbs": ["get", "list", "create", "update", "patch"]}],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-etcdmember-writer", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "etcdmember-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    });
    for rbac in [role, binding] {
        let out = kubectl_apply(cp, &rbac).await;
        assert!(out.success, "{out:?}");
    }
    let _hook = turn.register().await;

    let forged = object("EtcdMember", "main-forged", ns, member_spec());
    let (_file, path) = object_file(cp, &forged);
    let out = cp
        .kubectl(&["create", "--as=alice", "-f", &path])
        .await
        .or_panic();
    assert!(!out.success, "alice created an EtcdMember: {out:?}");
    assert_stderr_names(
        &out,
        &[DENIED, "may create EtcdMembers", "\"alice\" is not it"],
    );
    assert!(members.get_opt("main-forged").await.or_panic().is_none());

    let demote = json!({"status": {"isVoter": false}});
    let status = ("etcdmember", MEMBER, ns);
    let out = kubectl_patch(cp, status, &["--as=alice", "--subresource=status"], &demote).await;
    assert!(
        !out.success,
        "alice demoted a voter through /status: {out:?}"
    );
    assert!(
        out.stderr.contains("may write EtcdMember status") && out.stderr.contains("isVoter=false"),
        "{}",
        out.stderr
    );
    let stored = members.get(MEMBER).await.or_panic();
    assert_eq!(
        stored.data["status"]["isVoter"],
        json!(true),
        "{:?}",
        stored.data
    );

    // The controller's identity (impersonated, with the admin's groups for RBAC) may do both.
    let as_controller = format!("--as={CONTROLLER_USER}");
    let out = cp
        .kubectl(&[
            "create",
            &as_controller,
            "--as-group=system:masters",
            "-f",
            &path,
        ])
        .await
        .or_panic();
    assert!(
        out.success,
        "the controller could not create a member: {out:?}"
    );
    let flags = [
        as_controller.as_str(),
        "--as-group=system:masters",
        "--subresource=status",
    ];
    let out = kubectl_patch(cp, status, &flags, &demote).await;
    assert!(
        out.success,
        "the controller could not write status: {out:?}"
    );

    turn.done("member guard").await;
}

/// The controller's ServiceAccount user the webhook honours by default (`--controller-username`).
const CONTROLLER_USER: &str = "system:serviceaccount:etcd-operator-system:etcd-operator";

/// The memory default is applied on create; a later `storage.size` growth of a Memory cluster
/// is admitted with a warning, printed by kubectl, naming the limit, the new size and the fix.
#[tokio::test(flavor = "multi_thread")]
async fn memory_cluster_growth_past_its_memory_limit_warns_through_kubectl() {
    let turn = Turn::take("memory-growth").await;
    let (cp, client, ns) = (turn.cp, &turn.client, turn.ns.as_str());
    let _hook = turn.register().await;
    create(client, ns, ("EtcdCluster", "tmpfs"), memory_spec()).await;
    let stored = stored_spec(&turn.api("EtcdCluster"), "tmpfs").await;
    let limit = stored["resources"]["limits"]["memory"].clone();
    assert_eq!(bytes_of(&limit), Some(1280 * 1024 * 1024), "{stored}");

    let grow = json!({"spec": {"storage": {"size": "2Gi"}}});
    let out = kubectl_patch(cp, ("etcdcluster", "tmpfs", ns), &[], &grow).await;
    assert!(out.success, "{out:?}");
    let warning = out
        .stderr
        .lines()
        .find(|l| l.contains("spec.resources.limits.memory="))
        .unwrap_or_else(|| panic!("no memory-limit warning on kubectl's stderr: {out:?}"));
    for part in [
        "Warning:",
        "1280Mi",
        "spec.storage.size=2Gi",
        "2304Mi or more",
    ] {
        assert!(warning.contains(part), "missing {part:?} in {warning}");
    }
    turn.done("memory growth").await;
}

/// 6. The webhook down: with failurePolicy Fail writes stop; switched to Ignore, the CRD's CEL
/// rules alone still reject what they rejected, with the apiserver's own messages.
#[tokio::test(flavor = "multi_thread")]
async fn webhook_down_with_failure_policy_ignore_leaves_cel_in_charge() {
    let turn = Turn::take("webhook-down").await;
    let (cp, client, ns) = (turn.cp, &turn.client, turn.ns.as_str());
    let hook = turn.register().await;
    // An object for the update rule, created while the webhook is up.
    let old = json!({"version": "3.6.11", "storage": {"size": "10Gi"}});
    create(client, ns, ("EtcdCluster", "shrink"), old).await;

    hook.kill();
    let refused = dry_run_cluster(client, ns)
        .await
        .expect_err("a write went through a dead webhook with failurePolicy Fail");
    assert!(refused.contains("failed calling webhook"), "{refused}");

    let switched = Instant::now();
    set_failure_policy(cp, FailurePolicy::Ignore).await;
    wait_admitted("failurePolicy Ignore to take effect", || {
        dry_run_cluster(client, ns)
    })
    .await;
    report(&format!(
        "failurePolicy Ignore in effect {:.1?} after the patch",
        switched.elapsed()
    ));

    // The multi-problem cluster (rejected by schema and CEL, every field named), a CEL rule
    // (replicas 0 with Memory) and a CEL transition rule (storage shrinks): the apiserver's own
    // messages, with nothing about the webhook.
    let paused = json!({"version": "3.6.11", "replicas": 0, "storage": {"size": "256Mi", "medium": "Memory"}});
    let shrunk = json!({"version": "3.6.11", "storage": {"size": "5Gi"}});
    let rejected: [(&str, Value, &[&str]); 3] = [
        (
            "broken",
            invalid_cluster_spec(),
            &[
                "spec.version",
                "spec.replicas",
                "spec.progressDeadlineSeconds",
            ],
        ),
        ("paused", paused, &["spec.replicas"]),
        ("shrink", shrunk, &["spec.storage.size"]),
    ];
    for (name, spec, fields) in rejected {
        let out = kubectl_apply(cp, &object("EtcdCluster", name, ns, spec)).await;
        assert!(
            !out.success,
            "{name} was accepted without the webhook: {out:?}"
        );
        assert_stderr_names(&out, &[&format!("The EtcdCluster \"{name}\" is invalid")]);
        assert_stderr_names(&out, fields);
        assert!(!out.stderr.contains("webhook"), "{}", out.stderr);
        assert!(!out.stderr.contains("problems)"), "{}", out.stderr);
    }
    // Valid writes go through without defaults...
    let created = create(
        client,
        ns,
        ("EtcdCluster", "plain"),
        json!({"version": "3.6.11"}),
    )
    .await;
    assert!(
        created.data["spec"].get("affinity").is_none(),
        "{:?}",
        created.data
    );
    // ...and EtcdMember ownership, which only the webhook enforces, is gone (the documented price
    // of Ignore).
    update_member(client, ns, false)
        .await
        .unwrap_or_else(|e| panic!("with the webhook ignored, the member update failed: {e}"));

    turn.done("webhook down").await;
}

/// A snapshot schedule and a defrag policy whose cron expression or time zone the controller
/// could not run.
/// A kind, an object name and the object.
type Named = (&'static str, &'static str, Value);

fn unrunnable_schedules(ns: &str) -> [Named; 2] {
    [
        (
            "EtcdSnapshotSchedule",
            "minute-61",
            object(
                "EtcdSnapshotSchedule",
                "minute-61",
                ns,
                json!({
                    "clusterRef": {"name": "my-etcd"},
                    "schedule": "61 * * * *",
                    "snapshotTemplate": {"destination": {"pvc": {"claimName": "backups"}}},
                }),
            ),
        ),
        (
            "EtcdDefragPolicy",
            "on-mars",
            object(
                "EtcdDefragPolicy",
                "on-mars",
                ns,
                json!({
                    "clusterRef": {"name": "my-etcd"},
                    "schedule": "0 3 * * *",
                    "timeZone": "Mars/Olympus",
                }),
            ),
        ),
    ]
}

/// 8. The cron expression and time zone of EtcdSnapshotSchedule and EtcdDefragPolicy: CEL can
/// check only their shape, so the webhook parses them as the controller does and refuses, through
/// kubectl, what would never run, naming the field and the value; a good one passes. Without the
/// webhook the apiserver accepts them (the documented limit of a CEL-only install).
#[tokio::test(flavor = "multi_thread")]
async fn unrunnable_cron_schedules_and_time_zones_are_refused_by_the_webhook_alone() {
    let turn = Turn::take("webhook-cron").await;
    let (cp, client, ns) = (turn.cp, &turn.client, turn.ns.as_str());
    let hook = turn.register().await;

    let [schedule, policy] = unrunnable_schedules(ns);
    let expected: [(&Named, &[&str]); 2] = [
        (
            &schedule,
            &[
                "spec.schedule",
                "\"61 * * * *\"",
                "is not a valid cron expression",
                "minute hour day-of-month month day-of-week",
            ],
        ),
        (
            &policy,
            &[
                "spec.timeZone",
                "\"Mars/Olympus\"",
                "is not a known IANA time zone",
                "Europe/Berlin",
            ],
        ),
    ];
    for ((kind, name, obj), parts) in expected {
        let out = kubectl_apply(cp, obj).await;
        assert!(!out.success, "{kind} {name} was accepted: {out:?}");
        assert_stderr_names(&out, &[&format!("{kind} \"{name}\" is invalid")]);
        assert_stderr_names(&out, parts);
        let found = turn.api(kind).get_opt(name).await.or_panic();
        assert!(found.is_none(), "{kind} {name} was stored");
    }
    // The same kinds with a schedule the controller can run are created.
    let runnable = [
        (
            &schedule.2,
            "every-5-minutes",
            json!({"schedule": "*/5 * * * *", "timeZone": "Europe/Berlin"}),
        ),
        (
            &policy.2,
            "in-new-york",
            json!({"timeZone": "America/New_York"}),
        ),
    ];
    for (base, name, fields) in runnable {
        let mut good = base.clone();
        for (field, value) in fields.as_object().into_iter().flatten() {
            good["spec"][field] = value.clone();
        }
        good["metadata"]["name"] = json!(name);
        let out = kubectl_apply(cp, &good).await;
        assert!(out.success, "{name}: {out:?}");
    }
    let admitted = hook
        .admissions(&[("webhook", "validate"), ("kind", "EtcdSnapshotSchedule")])
        .await
        .or_panic();
    assert!(admitted > 0.0, "the schedule never reached /validate");

    // Without the webhook, CEL alone accepts both shapes (dry run: nothing is stored).
    webhook::unregister(client, CONFIG).await.or_panic();
    hook.kill();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    for (kind, name, obj) in unrunnable_schedules(ns) {
        let api = turn.api(kind);
        let what = format!(
            "the apiserver to stop calling the unregistered webhook ({kind} {name} accepted without it)"
        );
        wait_admitted(&what, || async {
            api_message(api.create(&dry, &dynamic(obj.clone())).await)
        })
        .await;
    }
    turn.done("webhook cron").await;
}

/// Judge every corpus case in `ns`, in corpus order.
async fn judge_corpus(
    client: &Client,
    ns: &str,
    cases: &[api::corpus::Case],
) -> Vec<Result<Verdict, String>> {
    let mut judged: Vec<(usize, Result<Verdict, String>)> = stream::iter(cases.iter().enumerate())
        .map(|(index, case)| async move {
            let name = corpus::object_name(index, case);
            (
                index,
                corpus::apiserver_verdict(client, ns, case, &name).await,
            )
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    judged.sort_by_key(|(index, _)| *index);
    judged.into_iter().map(|(_, verdict)| verdict).collect()
}

fn show(verdict: &Result<Verdict, String>) -> String {
    match verdict {
        Ok(Verdict::Allowed) => "allowed".to_string(),
        Ok(Verdict::Denied(message)) => format!("denied ({message})"),
        Err(e) => format!("not judged ({e})"),
    }
}

/// The CEL rules' messages in `cel_only` (a denial without the webhook) that `with_webhook`
/// (the same case's denial with it) lacks: the runbook quotes the apiserver's CEL messages, so
/// the webhook's answer must carry each verbatim. `None` when the case was not denied both ways.
fn reworded<'a>(
    messages: &'a [String],
    with_webhook: &Result<Verdict, String>,
    cel_only: &Result<Verdict, String>,
) -> Option<(usize, Vec<&'a str>)> {
    let (Ok(Verdict::Denied(on)), Ok(Verdict::Denied(off))) = (with_webhook, cel_only) else {
        return None;
    };
    let fired: Vec<&str> = messages
        .iter()
        .map(String::as_str)
        .filter(|m| off.contains(m))
        .collect();
    let missing = fired.iter().copied().filter(|m| !on.contains(m)).collect();
    Some((fired.len(), missing))
}

/// 7. The whole shared corpus gets the same verdict with the webhook registered (failurePolicy
/// Fail, defaults added by the mutating webhook) as from the CRD's CEL rules alone, and the
/// recorded one; and every CEL rule's message in a denial without the webhook is, verbatim, in
/// the webhook's denial of the same case.
#[tokio::test(flavor = "multi_thread")]
async fn corpus_verdicts_are_the_same_with_and_without_the_webhook() {
    let turn = Turn::take("corpus-webhook").await;
    let (began, cp, client, on_ns) = (turn.began, turn.cp, &turn.client, turn.ns.as_str());
    let cases = api::corpus::cases();

    let hook = turn.register().await;
    let calls = || hook.admissions(&[]);
    let before = calls().await.or_panic();
    let started = Instant::now();
    let with_webhook = judge_corpus(client, on_ns, &cases).await;
    let on_time = started.elapsed();
    let consulted = calls().await.or_panic() - before;
    assert!(
        consulted > 0.0,
        "the webhook was never called while judging the corpus"
    );

    // Unregistered: wait until the apiserver stops calling the (still running) webhook.
    webhook::unregister(client, CONFIG).await.or_panic();
    webhook::wait_until(
        "the apiserver to stop calling the unregistered webhook",
        EFFECTIVE_TIMEOUT,
        || async {
            let before = calls().await.map_err(|e| e.to_string())?;
            let _ = dry_run_cluster(client, on_ns).await;
            let _ = update_member(client, on_ns, true).await;
            let after = calls().await.map_err(|e| e.to_string())?;
            Ok((after == before).then_some(()))
        },
    )
    .await
    .or_panic();
    let off_ns = cp.namespace("corpus-cel").await.or_panic();
    let before = calls().await.or_panic();
    let started = Instant::now();
    let cel_only = judge_corpus(client, &off_ns, &cases).await;
    let off_time = started.elapsed();
    assert_eq!(
        calls().await.or_panic(),
        before,
        "the webhook was called after it was unregistered"
    );

    // A case mismatches when either run could not judge it, the runs disagree, or a run differs
    // from the corpus (wrong verdict, or a rejection that does not name the case's field).
    let mismatches: Vec<String> = cases
        .iter()
        .zip(with_webhook.iter().zip(&cel_only))
        .filter(|(case, (on, off))| match (on, off) {
            (Ok(on), Ok(off)) => {
                on.allowed() != off.allowed()
                    || corpus::disagreement(case, "", on).is_some()
                    || corpus::disagreement(case, "", off).is_some()
            }
            _ => true,
        })
        .map(|(case, (on, off))| {
            format!(
                "{}: corpus says {}{}; webhook on: {}; CEL only: {}",
                case.name,
                if case.allowed { "allowed" } else { "denied" },
                case.field
                    .as_deref()
                    .map(|f| format!(" naming {f}"))
                    .unwrap_or_default(),
                show(on),
                show(off)
            )
        })
        .collect();
    let messages = api::crd::cel_messages();
    let mut compared = 0;
    let mut missing_messages = Vec::new();
    for (case, (on, off)) in cases.iter().zip(with_webhook.iter().zip(&cel_only)) {
        if let Some((fired, missing)) = reworded(&messages, on, off) {
            compared += fired;
            missing_messages.extend(missing.into_iter().map(|m| {
                format!(
                    "{}: without the webhook the apiserver says {m:?}; with it: {}",
                    case.name,
                    show(on)
                )
            }));
        }
    }
    report(&format!(
        "corpus: {} cases with the webhook in {on_time:.1?} ({consulted} webhook calls), CEL only \
         in {off_time:.1?}; {} mismatches; {compared} CEL messages compared, {} missing with the \
         webhook; test took {:.1?}",
        cases.len(),
        mismatches.len(),
        missing_messages.len(),
        began.elapsed()
    ));
    cp.check_running().or_panic();
    assert!(
        mismatches.is_empty(),
        "{} corpus case(s) judged differently with the webhook (namespace {on_ns}) and CEL only \
         (namespace {off_ns}), or unlike api/testdata/validation-corpus.yaml:\n  {}",
        mismatches.len(),
        mismatches.join("\n  ")
    );
    assert!(compared > 20, "only {compared} CEL messages were compared");
    assert!(
        missing_messages.is_empty(),
        "{} CEL rule message(s) are not verbatim in the webhook's denial of the same case:\n  {}",
        missing_messages.len(),
        missing_messages.join("\n  ")
    );
}
