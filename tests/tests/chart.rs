//! The Helm chart `charts/etcd-operator`, rendered by the real helm (testbins) and applied to a real
//! kube-apiserver. No golden files: each test parses what helm renders and checks a behaviour that
//! matters to an install — one image reference everywhere, the restricted security context, the
//! webhook certificate in each mode actually verifying for the Service name, the values schema, and
//! RBAC that covers every API call of the controller and nothing more (checked with the
//! apiserver's own authorizer).
//!
//! Needs `ETCD_OPERATOR_TESTBINS` (helm, kubectl, kube-apiserver, the cert-manager CRDs).

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use clap::Parser as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Container, PodSpec, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{ServerName, UnixTime};
use serde::Deserialize;
use serde_json::Value;
use tests::env::{ControlPlane, Kubernetes, Testbins};
use tests::helm::{self, Helm};
use tests::install::IMAGE_REPOSITORY;
use tests::OrPanic;
use tokio::sync::OnceCell;

/// The monitoring objects: PodMonitor, alert rules (with promtool), dashboard.
#[path = "chart/monitoring.rs"]
mod monitoring;

/// Chart hygiene: Kubernetes versions, `global`, security contexts, extra args and env, the
/// controller's PodDisruptionBudget.
#[path = "chart/hygiene.rs"]
mod hygiene;

/// `networkPolicy.enabled`: the controller's and the webhook's NetworkPolicies.
#[path = "chart/network.rs"]
mod network;

/// `metrics.secure`: TLS and the metrics-reader gate on both admin ports, the ServiceMonitors.
#[path = "chart/secure_metrics.rs"]
mod secure_metrics;

/// The documentation next to the chart, kept complete: the chart README's values table,
/// README.md's docs index, docs/troubleshooting.md's reasons.
#[path = "chart/docs.rs"]
mod docs;

const RELEASE: &str = "etcd-operator";
const NAMESPACE: &str = "etcd-operator-system";
/// The chart's name for release `etcd-operator`.
const FULLNAME: &str = "etcd-operator";
/// Where the webhook reads its serving certificate when no flag says otherwise.
const WEBHOOK_CERT_DIR: &str = webhook::config::DEFAULT_TLS_CERT_DIR;
const WEBHOOK_SERVICE_DNS: &str = "etcd-operator-webhook.etcd-operator-system.svc";

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

// ---------------------------------------------------------------------------------------------
// What the controller calls (the RBAC contract)
// ---------------------------------------------------------------------------------------------

/// Where a permission must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// Namespaced objects in the watched namespaces (all, or `watchNamespace`).
    Watched,
    /// Cluster-scoped objects: stays in a ClusterRole even with `watchNamespace`.
    Cluster,
    /// The leader-election Lease `<fullname>-leader` in the release namespace.
    Lease,
    /// The operator's record of the root passwords it set in etcd, the Secret
    /// `<fullname>-auth-records` in the release namespace (controller/src/auth.rs).
    AuthRecord,
}

/// The one Secret the controller may write.
const AUTH_RECORD: &str = "etcd-operator-auth-records";

/// Verbs that change or remove an object.
const WRITE_VERBS: &[&str] = &[
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "*",
];

/// (API group, resource[/subresource], verb, scope) for every API call the controller makes.
/// A change in controller/src that calls something new must add a row here, and the chart's rule.
const CONTROLLER_CALLS: &[(&str, &str, &str, Scope)] = {
    use Scope::*;
    /// The operator's own API group.
    const OP: &str = api::v1alpha2::GROUP;
    &[
        // run.rs: Controller::new(EtcdCluster) and the member controller's watches(EtcdCluster)
        // (list+watch); main.rs readiness probe list_metadata; cluster/ and
        // member/ get_opt.
        (OP, "etcdclusters", "get", Watched),
        (OP, "etcdclusters", "list", Watched),
        (OP, "etcdclusters", "watch", Watched),
        // cluster/ restore_peer_auto_tls: the peer auto-TLS annotation set back on
        // a cluster adopted from the aenix operator (a metadata merge patch; never update);
        // cluster/cleanup.rs: the cluster-cleanup finalizer added and removed.
        (OP, "etcdclusters", "patch", Watched),
        // cluster/: patch_status (conditions, members, phase).
        (OP, "etcdclusters/status", "patch", Watched),
        // run.rs: owns(EtcdMember) and Controller::new(EtcdMember); cluster/ create
        // (create_member), patch (labels, dormant), delete (scale-down), list/get (by_name);
        // member/ patch (finalizer add/remove), list.
        (OP, "etcdmembers", "get", Watched),
        (OP, "etcdmembers", "list", Watched),
        (OP, "etcdmembers", "watch", Watched),
        (OP, "etcdmembers", "create", Watched),
        (OP, "etcdmembers", "patch", Watched),
        (OP, "etcdmembers", "delete", Watched),
        // cluster/ patch_member_status, member/ patch_status.
        (OP, "etcdmembers/status", "patch", Watched),
        // builders/: controller owner references with blockOwnerDeletion on EtcdMembers,
        // Services, PDBs (owner EtcdCluster) and Pods, PVCs (owner EtcdMember); the
        // OwnerReferencesPermissionEnforcement admission plugin checks update on the owner's
        // finalizers subresource.
        (OP, "etcdclusters/finalizers", "update", Watched),
        (OP, "etcdmembers/finalizers", "update", Watched),
        // run.rs: watches(Pod) and owns(Pod); member/ get_opt, create, delete, patch
        // (role labels, initial-cluster-state); cluster/ list, get, patch (seed).
        ("", "pods", "get", Watched),
        ("", "pods", "list", Watched),
        ("", "pods", "watch", Watched),
        ("", "pods", "create", Watched),
        ("", "pods", "patch", Watched),
        ("", "pods", "delete", Watched),
        // run.rs owns(PVC); member/ create_pvc, adopt_claim (patch: the member-uid mark in
        // place of an owner reference), delete_claim (once the member is out of etcd);
        // cluster/ by_name list/get, cleanup (delete with the cluster).
        ("", "persistentvolumeclaims", "get", Watched),
        ("", "persistentvolumeclaims", "list", Watched),
        ("", "persistentvolumeclaims", "watch", Watched),
        ("", "persistentvolumeclaims", "create", Watched),
        ("", "persistentvolumeclaims", "patch", Watched),
        ("", "persistentvolumeclaims", "delete", Watched),
        // run.rs owns(Service); cluster/ ensure_services get_opt, create, apply.
        ("", "services", "get", Watched),
        ("", "services", "list", Watched),
        ("", "services", "watch", Watched),
        ("", "services", "create", Watched),
        ("", "services", "patch", Watched),
        // run.rs owns(PDB); cluster/ ensure_pdb get_opt, apply (a create through
        // patch is authorized as create too), delete.
        ("policy", "poddisruptionbudgets", "get", Watched),
        ("policy", "poddisruptionbudgets", "list", Watched),
        ("policy", "poddisruptionbudgets", "watch", Watched),
        ("policy", "poddisruptionbudgets", "create", Watched),
        ("policy", "poddisruptionbudgets", "patch", Watched),
        ("policy", "poddisruptionbudgets", "delete", Watched),
        // run.rs watches EtcdSnapshots; snapshot/mod.rs get_opt, patch_status; the Job's owner
        // reference needs update on the finalizers subresource.
        (OP, "etcdsnapshots", "get", Watched),
        (OP, "etcdsnapshots", "list", Watched),
        (OP, "etcdsnapshots", "watch", Watched),
        (OP, "etcdsnapshots/status", "patch", Watched),
        (OP, "etcdsnapshots/finalizers", "update", Watched),
        // run.rs watches EtcdDefrags; defrag/run/ get_opt, list, patch_status and the
        // delete after ttlSecondsAfterFinished.
        // run.rs watches EtcdRecoveries; recovery/ get_opt, list (one recovery per cluster at
        // a time), patch_status.
        (OP, "etcdrecoveries", "get", Watched),
        (OP, "etcdrecoveries", "list", Watched),
        (OP, "etcdrecoveries", "watch", Watched),
        (OP, "etcdrecoveries/status", "patch", Watched),
        // cluster/auto_recovery.rs: the EtcdRecovery of a cluster annotated for it.
        (OP, "etcdrecoveries", "create", Watched),
        // recovery/disk.rs: the position Jobs of a survivor recovery, owned by the
        // EtcdRecovery (owner reference: update on finalizers).
        (OP, "etcdrecoveries/finalizers", "update", Watched),
        (OP, "etcddefrags", "get", Watched),
        (OP, "etcddefrags", "list", Watched),
        (OP, "etcddefrags", "watch", Watched),
        (OP, "etcddefrags", "delete", Watched),
        (OP, "etcddefrags/status", "patch", Watched),
        // run.rs watches EtcdDefragPolicies; defrag/policy/ get_opt, patch_status, creates
        // their EtcdDefrags (owner reference: update on finalizers) and deletes old ones.
        (OP, "etcddefragpolicies", "get", Watched),
        (OP, "etcddefragpolicies", "list", Watched),
        (OP, "etcddefragpolicies", "watch", Watched),
        (OP, "etcddefragpolicies/status", "patch", Watched),
        (OP, "etcddefragpolicies/finalizers", "update", Watched),
        (OP, "etcddefrags", "create", Watched),
        // run.rs watches EtcdSnapshotSchedules; schedule/mod.rs get_opt, patch_status, creates
        // and deletes their EtcdSnapshots (owner reference: update on finalizers).
        (OP, "etcdsnapshotschedules", "get", Watched),
        (OP, "etcdsnapshotschedules", "list", Watched),
        (OP, "etcdsnapshotschedules", "watch", Watched),
        (OP, "etcdsnapshotschedules/status", "patch", Watched),
        (OP, "etcdsnapshotschedules/finalizers", "update", Watched),
        (OP, "etcdsnapshots", "create", Watched),
        (OP, "etcdsnapshots", "delete", Watched),
        // run.rs owns(Job); snapshot/mod.rs get_opt and create of `<snapshot>-snapshot`;
        // recovery/disk.rs get_opt and create of a survivor recovery's position Jobs.
        ("batch", "jobs", "get", Watched),
        ("batch", "jobs", "list", Watched),
        ("batch", "jobs", "watch", Watched),
        ("batch", "jobs", "create", Watched),
        // tls/ load (through etcd::access and cluster/observe.rs): get_opt of the TLS Secrets
        // a cluster uses; run.rs watches them (metadata only) to wake the clusters naming them;
        // auth.rs load of the spec.auth Secret and read of a previous version's
        // `<cluster>-auth-applied` record (migration); schedule/mod.rs: the S3 credentials.
        // Never written there.
        ("", "secrets", "get", Watched),
        ("", "secrets", "list", Watched),
        ("", "secrets", "watch", Watched),
        // auth.rs read_applied/write_applied: the record Secret `<fullname>-auth-records` in
        // the release namespace, created once (create cannot be limited to a name), then read
        // and merge-patched by name.
        ("", "secrets", "create", AuthRecord),
        ("", "secrets", "get", AuthRecord),
        ("", "secrets", "patch", AuthRecord),
        // service_account.rs missing: get_metadata_opt of the ServiceAccount an S3 location
        // names (snapshot/mod.rs before the snapshot Job, recovery/snapshot.rs before a recovery).
        ("", "serviceaccounts", "get", Watched),
        // cert_manager.rs ensure_certificates: get_opt, server-side apply (create through
        // patch); run.rs owns(Certificate). Garbage collection deletes them with the cluster.
        ("cert-manager.io", "certificates", "get", Watched),
        ("cert-manager.io", "certificates", "list", Watched),
        ("cert-manager.io", "certificates", "watch", Watched),
        ("cert-manager.io", "certificates", "create", Watched),
        ("cert-manager.io", "certificates", "patch", Watched),
        // context.rs: kube-runtime's Recorder creates events.k8s.io/v1 Events, patches a series.
        ("events.k8s.io", "events", "create", Watched),
        ("events.k8s.io", "events", "patch", Watched),
        // member/ binds_immediately: get the claim's StorageClass.
        ("storage.k8s.io", "storageclasses", "get", Cluster),
        // cluster/data_home.rs look_up, only for a member whose Pod cannot run: get the PV of
        // its claim, get the Node its Pod is on or list the Nodes with the PV's hostname label.
        ("", "persistentvolumes", "get", Cluster),
        ("", "nodes", "get", Cluster),
        ("", "nodes", "list", Cluster),
        // main.rs: kube-lease-manager reads, creates and patches its Lease.
        ("coordination.k8s.io", "leases", "get", Lease),
        ("coordination.k8s.io", "leases", "create", Lease),
        ("coordination.k8s.io", "leases", "patch", Lease),
    ]
};

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// Every document `helm template` renders for release `etcd-operator` in `etcd-operator-system`.
struct Rendered {
    docs: Vec<Value>,
}

impl Rendered {
    fn find(&self, kind: &str, name: &str) -> &Value {
        self.try_find(kind, name).unwrap_or_else(|| {
            panic!(
                "no {kind} {name} rendered; rendered: {}",
                self.names().join(", ")
            )
        })
    }

    fn try_find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| d["kind"] == kind).collect()
    }

    fn names(&self) -> Vec<String> {
        self.docs
            .iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap_or("?"),
                    d["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    fn deployment(&self, name: &str) -> Deployment {
        serde_json::from_value(self.find("Deployment", name).clone())
            .unwrap_or_else(|e| panic!("Deployment {name} does not decode: {e}"))
    }

    /// The controller Deployment's `manager` container.
    fn manager(&self) -> Container {
        container(pod_spec(&self.deployment(FULLNAME)), "manager").clone()
    }

    /// The webhook Deployment's container.
    fn webhook_container(&self) -> Container {
        pod_spec(&self.deployment(WEBHOOK)).containers[0].clone()
    }

    /// The webhook's configuration, parsed by its own flag parser from the args the chart passes.
    fn webhook_config(&self) -> webhook::Config {
        webhook::Config::try_parse_from(
            std::iter::once("etcd-operator-webhook".to_string())
                .chain(args(&self.webhook_container())),
        )
        .unwrap_or_else(|e| panic!("the chart's webhook args do not parse: {e}"))
    }
}

/// The name of the webhook's Deployment, Service and both configurations.
const WEBHOOK: &str = "etcd-operator-webhook";
/// The kinds of the two webhook registrations.
const WEBHOOK_CONFIGURATIONS: [&str; 2] = [
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
];

fn parse_documents(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("rendered YAML: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

async fn render(extra: &[&str]) -> Rendered {
    let helm = Helm::new(None).or_panic();
    let text = helm.template(RELEASE, NAMESPACE, extra).await.or_panic();
    Rendered {
        docs: parse_documents(&text),
    }
}

/// [`render`] with `--set` of each of `values` (`key=value`).
async fn render_values<S: AsRef<str>>(values: &[S]) -> Rendered {
    let extra: Vec<&str> = values.iter().flat_map(|v| ["--set", v.as_ref()]).collect();
    render(&extra).await
}

async fn render_error(extra: &[&str]) -> String {
    let helm = Helm::new(None).or_panic();
    match helm.template(RELEASE, NAMESPACE, extra).await {
        Ok(_) => panic!("helm template {extra:?} rendered; expected an error"),
        Err(e) => e
            .stderr()
            .unwrap_or_else(|| panic!("helm did not run: {e}"))
            .to_string(),
    }
}

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod template spec")
}

/// The labels of `d`'s Pod template.
fn template_labels(d: &Deployment) -> std::collections::BTreeMap<String, String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

fn container<'a>(spec: &'a PodSpec, name: &str) -> &'a Container {
    spec.containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn env_value(c: &Container, name: &str) -> Option<String> {
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

fn args(c: &Container) -> Vec<String> {
    c.args.clone().unwrap_or_default()
}

fn arg_value(c: &Container, flag: &str) -> Option<String> {
    args(c)
        .iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")).map(str::to_string))
}

/// Restricted Pod Security, container and Pod level.
fn assert_restricted(d: &Deployment) {
    let name = d.metadata.name.as_deref().unwrap_or("?");
    let spec = pod_spec(d);
    let pod = spec
        .security_context
        .as_ref()
        .expect("a pod securityContext");
    assert_eq!(pod.run_as_non_root, Some(true), "{name}");
    assert_eq!(
        pod.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault"),
        "{name}"
    );
    for c in &spec.containers {
        let sc = c
            .security_context
            .as_ref()
            .expect("a container securityContext");
        assert_eq!(sc.run_as_non_root, Some(true), "{name}/{}", c.name);
        assert_eq!(sc.run_as_user, Some(65532), "{name}/{}", c.name);
        assert_eq!(sc.run_as_group, Some(65532), "{name}/{}", c.name);
        assert_eq!(
            sc.read_only_root_filesystem,
            Some(true),
            "{name}/{}",
            c.name
        );
        assert_eq!(
            sc.allow_privilege_escalation,
            Some(false),
            "{name}/{}",
            c.name
        );
        assert_eq!(
            sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_string()]),
            "{name}/{}",
            c.name
        );
        assert_eq!(
            sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault"),
            "{name}/{}",
            c.name
        );
    }
}

/// The value sets of each certificate mode that render.
fn mode_values(mode: &str) -> Vec<String> {
    let mut v = vec![format!("webhook.certificate.mode={mode}")];
    if mode == "secret" {
        v.push("webhook.certificate.secret.name=my-webhook-tls".into());
        v.push("webhook.certificate.secret.caBundle=Q0E=".into());
    }
    v
}

fn set_args(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| ["--set".to_string(), v.clone()])
        .collect()
}

#[tokio::test]
async fn every_variant_runs_one_image_as_manager_and_operator_image_under_restricted_security() {
    for mode in ["helm", "certManager", "secret"] {
        for webhook in [false, true] {
            for watch in [None, Some("team-a")] {
                let mut values = mode_values(mode);
                values.push(format!("webhook.enabled={webhook}"));
                values.push("image.tag=v9.8.7".into());
                if let Some(ns) = watch {
                    values.push(format!("watchNamespace={ns}"));
                }
                let r = render_values(&values).await;
                let what = format!("{values:?}");

                let controller = r.deployment(FULLNAME);
                assert_eq!(
                    controller.metadata.labels.as_ref().unwrap()["control-plane"],
                    "controller-manager"
                );
                assert_eq!(
                    template_labels(&controller)["control-plane"],
                    "controller-manager"
                );
                let spec = pod_spec(&controller);
                let manager = container(spec, "manager");
                let image = format!("{IMAGE_REPOSITORY}:v9.8.7");
                let image = image.as_str();
                assert_eq!(manager.image.as_deref(), Some(image), "{what}");
                assert_eq!(env_value(manager, "OPERATOR_IMAGE").as_deref(), Some(image));
                assert_eq!(
                    arg_value(manager, "--operator-image").as_deref(),
                    Some(image)
                );
                assert_eq!(
                    arg_value(manager, "--watch-namespace").as_deref(),
                    watch,
                    "{what}"
                );
                assert_eq!(
                    arg_value(manager, "--leader-election-namespace").as_deref(),
                    Some("$(POD_NAMESPACE)")
                );
                assert!(args(manager).contains(&"--leader-elect=true".to_string()));
                // The auth record: the Secret its Role names, in the Pod's own namespace.
                assert_eq!(
                    arg_value(manager, "--auth-record-secret").as_deref(),
                    Some(AUTH_RECORD)
                );
                let pod_namespace = manager
                    .env
                    .iter()
                    .flatten()
                    .find(|e| e.name == "POD_NAMESPACE")
                    .and_then(|e| e.value_from.as_ref())
                    .and_then(|v| v.field_ref.as_ref())
                    .map(|f| f.field_path.clone());
                assert_eq!(pod_namespace.as_deref(), Some("metadata.namespace"));
                assert_eq!(
                    arg_value(manager, "--admin-listen").as_deref(),
                    Some("0.0.0.0:8081")
                );
                let probe_path = |p: Option<&k8s_openapi::api::core::v1::Probe>| {
                    p.and_then(|p| p.http_get.as_ref())
                        .and_then(|h| h.path.clone())
                };
                assert_eq!(
                    probe_path(manager.liveness_probe.as_ref()).as_deref(),
                    Some("/healthz")
                );
                assert_eq!(
                    probe_path(manager.readiness_probe.as_ref()).as_deref(),
                    Some("/readyz")
                );
                assert_restricted(&controller);

                let hook = r.try_find("Deployment", "etcd-operator-webhook");
                assert_eq!(hook.is_some(), webhook, "{what}");
                if webhook {
                    let hook = r.deployment("etcd-operator-webhook");
                    let spec = pod_spec(&hook);
                    let c = &spec.containers[0];
                    assert_eq!(c.image.as_deref(), Some(image));
                    assert_eq!(
                        c.command,
                        Some(vec!["/usr/local/bin/etcd-operator-webhook".to_string()])
                    );
                    // Only the controller's ServiceAccount may update EtcdMembers.
                    let sa = spec_service_account(&controller);
                    assert_eq!(
                        env_value(c, "WEBHOOK_CONTROLLER_USERNAME"),
                        Some(format!("system:serviceaccount:{NAMESPACE}:{sa}"))
                    );
                    assert_restricted(&hook);
                    assert_eq!(hook.spec.as_ref().and_then(|s| s.replicas), Some(2));
                    // The serving certificate: a whole-Secret mount (no subPath), so renewals
                    // reach the files the webhook re-reads.
                    let mount = c
                        .volume_mounts
                        .as_ref()
                        .and_then(|m| m.iter().find(|m| m.mount_path == WEBHOOK_CERT_DIR))
                        .unwrap_or_else(|| panic!("no mount at {WEBHOOK_CERT_DIR} ({what})"));
                    assert!(mount.sub_path.is_none() && mount.sub_path_expr.is_none());
                    let secret = spec
                        .volumes
                        .as_ref()
                        .and_then(|v| v.iter().find(|v| v.name == mount.name))
                        .and_then(|v| v.secret.as_ref())
                        .and_then(|s| s.secret_name.clone())
                        .expect("the mount is a Secret volume");
                    let expected = match mode {
                        "secret" => "my-webhook-tls",
                        "certManager" => "etcd-operator-webhook-cert-manager-tls",
                        _ => "etcd-operator-webhook-tls",
                    };
                    assert_eq!(secret, expected, "{what}");
                    r.find("PodDisruptionBudget", "etcd-operator-webhook");
                    let svc = r.find("Service", "etcd-operator-webhook");
                    assert_eq!(svc["spec"]["ports"][0]["port"], 443);
                    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "https");
                    assert_eq!(
                        c.ports
                            .as_ref()
                            .unwrap()
                            .iter()
                            .find(|p| p.name.as_deref() == Some("https"))
                            .map(|p| p.container_port),
                        Some(8443)
                    );
                    assert_registrations_match_the_tested_ones(&r);
                }
                let metrics = r.find("Service", "etcd-operator-metrics");
                assert_eq!(metrics["spec"]["ports"][0]["name"], "metrics");
                assert_eq!(metrics["spec"]["ports"][0]["port"], 8081);
            }
        }
    }
}

fn spec_service_account(d: &Deployment) -> String {
    pod_spec(d)
        .service_account_name
        .clone()
        .expect("a serviceAccountName")
}

/// The chart's rules, paths, policies and service reference equal the registrations the webhook
/// API suite runs the real webhook under (tests/src/webhook.rs).
fn assert_registrations_match_the_tested_ones(r: &Rendered) {
    let validating = r.find("ValidatingWebhookConfiguration", "etcd-operator-webhook");
    let mutating = r.find("MutatingWebhookConfiguration", "etcd-operator-webhook");
    let v = &validating["webhooks"][0];
    let m = &mutating["webhooks"][0];
    // memberDeletionProtection.enabled (the default) adds the EtcdMember DELETE rule.
    let mut rules = tests::webhook::validating_rules();
    rules.push(tests::webhook::member_deletion_rule());
    assert_eq!(
        v["rules"],
        serde_json::to_value(rules).expect("rules serialize")
    );
    assert_eq!(v["failurePolicy"], "Fail");
    assert_eq!(m["failurePolicy"], "Ignore");
    assert_eq!(m["reinvocationPolicy"], "Never");
    assert_eq!(
        m["rules"][0]["resources"],
        serde_json::json!([
            "etcdclusters",
            "etcdsnapshots",
            "etcddefrags",
            "etcdrecoveries",
            "etcdsnapshotschedules",
            "etcddefragpolicies"
        ])
    );
    for (hook, path) in [(v, "/validate"), (m, "/mutate")] {
        assert_eq!(hook["matchPolicy"], "Equivalent");
        assert_eq!(hook["sideEffects"], "None");
        assert_eq!(hook["admissionReviewVersions"], serde_json::json!(["v1"]));
        let service = &hook["clientConfig"]["service"];
        assert_eq!(service["name"], "etcd-operator-webhook");
        assert_eq!(service["namespace"], NAMESPACE);
        assert_eq!(service["path"], path);
        assert_eq!(service["port"], 443);
    }
}

/// The image of the reference Go operator: another program, never this chart's default.
const REFERENCE_IMAGE_REPOSITORY: &str = "ghcr.io/cozystack/etcd-operator";

/// This repository's root.
fn repo_root() -> std::path::PathBuf {
    helm::chart_dir().join("../..")
}

/// `key = "value"` of the root Cargo.toml's `[workspace.package]`.
fn workspace_package(key: &str) -> String {
    let path = repo_root().join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| panic!("no {key} in [workspace.package] of {}", path.display()))
}

fn chart_yaml() -> Value {
    let path = helm::chart_dir().join("Chart.yaml");
    yaml_serde::from_str(&std::fs::read_to_string(&path).or_panic()).or_panic()
}

#[tokio::test]
async fn default_image_is_this_projects_own_tagged_with_the_crates_version() {
    let version = workspace_package("version");
    let repository = workspace_package("repository");
    let chart = chart_yaml();
    let app_version = chart["appVersion"].as_str().unwrap_or_default();
    assert_eq!(
        app_version,
        format!("v{version}"),
        "Chart.yaml's appVersion (the image tag `make image` gives) follows the crates' version"
    );
    assert_eq!(env!("CARGO_PKG_VERSION"), version);
    assert_eq!(chart["home"], repository.as_str());
    assert_eq!(chart["sources"][0], repository.as_str());

    // GitHub's container registry names a repository's image ghcr.io/<owner>/<repository>.
    let path = repository
        .strip_prefix("https://github.com/")
        .unwrap_or_else(|| panic!("the workspace repository {repository} is not on GitHub"));
    let ours = format!("ghcr.io/{}", path.to_lowercase());
    assert_eq!(
        IMAGE_REPOSITORY, ours,
        "the pod runner maps the chart's image"
    );
    assert_ne!(ours, REFERENCE_IMAGE_REPOSITORY);

    let r = render(&["--set", "webhook.enabled=true"]).await;
    assert_runs_one_image(&r, &format!("{ours}:{app_version}"));
}

/// Both Deployments run `image`, and the controller names it as the image of its Jobs.
fn assert_runs_one_image(r: &Rendered, image: &str) {
    let manager = r.manager();
    assert_eq!(manager.image.as_deref(), Some(image));
    assert_eq!(
        env_value(&manager, "OPERATOR_IMAGE").as_deref(),
        Some(image)
    );
    assert_eq!(
        arg_value(&manager, "--operator-image").as_deref(),
        Some(image)
    );
    assert_eq!(r.webhook_container().image.as_deref(), Some(image));
}

#[tokio::test]
async fn image_digest_replaces_the_tag_everywhere() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let set = format!("image.digest={digest}");
    let r = render_values(&[set.as_str(), "webhook.enabled=true"]).await;
    assert_runs_one_image(&r, &format!("{IMAGE_REPOSITORY}@{digest}"));
}

#[tokio::test]
async fn webhook_values_map_to_its_flags_and_log_values_to_both_binaries() {
    let r = render_values(&[
        "webhook.enabled=true",
        "webhook.defaults.antiAffinity=required",
        "webhook.defaults.memoryDefaults=false",
        "webhook.defaults.memoryHeadroom=512Mi",
        "logFormat=json",
        "logLevel=debug",
        "webhook.validation.failurePolicy=Ignore",
        "webhook.timeoutSeconds=7",
    ])
    .await;
    let c = r.webhook_container();
    for (flag, value) in [
        ("--anti-affinity", "required"),
        ("--memory-defaults", "false"),
        ("--memory-headroom", "512Mi"),
        ("--log-json", "true"),
    ] {
        assert_eq!(
            arg_value(&c, flag).as_deref(),
            Some(value),
            "webhook {flag}"
        );
    }
    assert_eq!(env_value(&c, "RUST_LOG").as_deref(), Some("debug"));
    // The webhook's own flag parser accepts what the chart passes, with the same meaning.
    let config = r.webhook_config();
    assert_eq!(config.anti_affinity, webhook::AntiAffinity::Required);
    assert!(!config.memory_defaults);
    assert_eq!(config.memory_headroom.0, "512Mi");
    assert!(config.log_json);
    assert_eq!(config.listen.port(), 8443);
    assert_eq!(config.admin_listen.port(), 8080);
    let manager = r.manager();
    assert_eq!(arg_value(&manager, "--log-format").as_deref(), Some("json"));
    assert_eq!(env_value(&manager, "RUST_LOG").as_deref(), Some("debug"));
    let v = r.find("ValidatingWebhookConfiguration", WEBHOOK);
    assert_eq!(v["webhooks"][0]["failurePolicy"], "Ignore");
    assert_eq!(v["webhooks"][0]["timeoutSeconds"], 7);
}

#[tokio::test]
async fn defrag_timeouts_and_migration_groups_map_to_their_flags() {
    // (values, --defrag-timeout-base, --defrag-timeout-per-gib, the webhook's migration groups)
    let cases: [(&[&str], &str, &str, &[&str]); 2] = [
        // Defaults: the controller's own flag defaults, the webhook's cluster-admin groups.
        (
            &["--set", "webhook.enabled=true"],
            "60s",
            "60s",
            &["system:masters", "kubeadm:cluster-admins"],
        ),
        // webhook.migrationGroups=[] turns the migration allowance off.
        (
            &[
                "--set",
                "webhook.enabled=true",
                "--set",
                "defragTimeout.base=90s",
                "--set",
                "defragTimeout.perGiB=2m",
                "--set-json",
                "webhook.migrationGroups=[]",
            ],
            "90s",
            "2m",
            &[],
        ),
    ];
    for (extra, base, per_gib, groups) in cases {
        let r = render(extra).await;
        let manager = r.manager();
        assert_eq!(
            arg_value(&manager, "--defrag-timeout-base").as_deref(),
            Some(base),
            "{extra:?}"
        );
        assert_eq!(
            arg_value(&manager, "--defrag-timeout-per-gib").as_deref(),
            Some(per_gib),
            "{extra:?}"
        );
        assert_eq!(
            r.webhook_config().policy().migration_groups,
            groups,
            "{extra:?}: the webhook's migration groups"
        );
    }
    let err = render_error(&["--set", "defragTimeout.base=soon"]).await;
    assert!(err.contains("defragTimeout"), "{err}");
}

/// The ValidatingAdmissionPolicy is rendered where the apiserver serves it (`helm install`
/// against 1.30+; `helm template` told so with `--api-versions`), with the operator, the garbage
/// collector, the namespace controller and the listed users allowed; off, neither the policy nor
/// the webhook's DELETE rule is rendered.
#[tokio::test]
async fn member_deletion_protection_renders_the_policy_and_the_webhook_rule() {
    const VAP: &str = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy";
    const NAME: &str = "etcd-operator-member-deletion-protection";
    let argo = "system:serviceaccount:argocd:argocd-application-controller";
    let r = render(&[
        "--api-versions",
        VAP,
        "--set",
        "webhook.enabled=true",
        "--set",
        &format!("memberDeletionProtection.additionalAllowedUsers={{{argo}}}"),
    ])
    .await;
    let policy = r.find("ValidatingAdmissionPolicy", NAME);
    let binding = r.find("ValidatingAdmissionPolicyBinding", NAME);
    assert_eq!(binding["spec"]["policyName"], NAME);
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
    let rules = &policy["spec"]["matchConstraints"]["resourceRules"];
    assert_eq!(rules[0]["resources"], serde_json::json!(["etcdmembers"]));
    assert_eq!(rules[0]["operations"], serde_json::json!(["DELETE"]));
    let allowed = policy["spec"]["variables"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "allowedUsers"))
        .and_then(|v| v["expression"].as_str())
        .unwrap_or_else(|| panic!("no allowedUsers variable: {policy}"));
    let allowed: Vec<String> = serde_json::from_str(allowed)
        .unwrap_or_else(|e| panic!("allowedUsers is not a list literal: {allowed}: {e}"));
    let controller = format!("system:serviceaccount:{NAMESPACE}:{FULLNAME}");
    assert_eq!(
        allowed,
        [
            controller.as_str(),
            "system:serviceaccount:kube-system:generic-garbage-collector",
            "system:serviceaccount:kube-system:namespace-controller",
            "system:kube-controller-manager",
            argo,
        ]
    );
    let message = policy["spec"]["validations"][0]["messageExpression"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("etcd-operator.cozystack.io/allow-deletion=true"),
        "{message}"
    );
    assert_eq!(
        r.webhook_config().policy().deletion_allowed_users,
        [argo.to_string()],
        "the webhook's copy of the allowed users"
    );
    assert_registrations_match_the_tested_ones(&r);

    // Where the apiserver does not serve the kind (below 1.30): the webhook alone.
    let r = render(&["--set", "webhook.enabled=true"]).await;
    assert!(r.try_find("ValidatingAdmissionPolicy", NAME).is_none());
    assert_registrations_match_the_tested_ones(&r);

    // Off: neither.
    let r = render(&[
        "--api-versions",
        VAP,
        "--set",
        "webhook.enabled=true",
        "--set",
        "memberDeletionProtection.enabled=false",
    ])
    .await;
    assert!(r.try_find("ValidatingAdmissionPolicy", NAME).is_none());
    assert!(r
        .try_find("ValidatingAdmissionPolicyBinding", NAME)
        .is_none());
    let v = r.find("ValidatingWebhookConfiguration", WEBHOOK);
    assert_eq!(
        v["webhooks"][0]["rules"],
        serde_json::to_value(tests::webhook::validating_rules()).expect("rules serialize")
    );
}

// ---------------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------------

fn base64_decode(b64: &str) -> Vec<u8> {
    serde_json::from_value::<ByteString>(Value::String(b64.to_string()))
        .unwrap_or_else(|e| panic!("not base64: {e}"))
        .0
}

/// Whether `ca_pem` verifies `chain_pem` as a TLS server certificate for `dns_name` (what the
/// apiserver checks when it calls the webhook through its Service).
fn verifies(ca_pem: &[u8], chain_pem: &[u8], dns_name: &str) -> Result<(), String> {
    let cas =
        certs::pem::parse_certificates(ca_pem, Path::new("caBundle")).map_err(|e| e.to_string())?;
    let chain = certs::pem::parse_certificates(chain_pem, Path::new("tls.crt"))
        .map_err(|e| e.to_string())?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add(ca).map_err(|e| e.to_string())?;
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), certs::provider())
        .build()
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(dns_name.to_string()).map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn helm_mode_ca_bundle_verifies_the_serving_certificate_for_the_service_name() {
    let r = render(&["--set", "webhook.enabled=true"]).await;
    let secret: Secret =
        serde_json::from_value(r.find("Secret", "etcd-operator-webhook-tls").clone()).unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.expect("Secret data");
    let cert = &data["tls.crt"].0;
    certs::pem::parse_private_key(&data["tls.key"].0, Path::new("tls.key")).or_panic();
    for kind in WEBHOOK_CONFIGURATIONS {
        let hook = &r.find(kind, "etcd-operator-webhook")["webhooks"][0];
        let ca = base64_decode(
            hook["clientConfig"]["caBundle"]
                .as_str()
                .expect("a caBundle"),
        );
        assert_eq!(
            ca, data["ca.crt"].0,
            "{kind} caBundle is the Secret's ca.crt"
        );
        for name in [
            WEBHOOK_SERVICE_DNS.to_string(),
            format!("{WEBHOOK_SERVICE_DNS}.cluster.local"),
        ] {
            verifies(&ca, cert, &name).unwrap_or_else(|e| panic!("{kind} for {name}: {e}"));
        }
        assert!(
            verifies(&ca, cert, "etcd-operator-webhook.other-namespace.svc").is_err(),
            "the certificate must not be valid for another namespace's Service"
        );
    }
    // Each render without a cluster to look up mints a new CA: nothing is baked into the chart.
    let again = render(&["--set", "webhook.enabled=true"]).await;
    assert_ne!(
        again.find("Secret", "etcd-operator-webhook-tls")["data"]["ca.crt"],
        r.find("Secret", "etcd-operator-webhook-tls")["data"]["ca.crt"]
    );
}

#[tokio::test]
async fn cert_manager_mode_injects_the_ca_of_a_certificate_for_the_service_name() {
    let r = render_values(&[
        "webhook.enabled=true",
        "webhook.certificate.mode=certManager",
    ])
    .await;
    assert!(r.try_find("Secret", "etcd-operator-webhook-tls").is_none());
    for kind in WEBHOOK_CONFIGURATIONS {
        let config = r.find(kind, "etcd-operator-webhook");
        let inject = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            .as_str()
            .unwrap_or_else(|| panic!("{kind} has no inject-ca-from"));
        let (ns, name) = inject.split_once('/').expect("<namespace>/<certificate>");
        assert_eq!(ns, NAMESPACE);
        let certificate = r.find("Certificate", name);
        let dns: Vec<&str> = certificate["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(dns.contains(&WEBHOOK_SERVICE_DNS), "{dns:?}");
        assert_eq!(
            certificate["spec"]["secretName"],
            "etcd-operator-webhook-cert-manager-tls"
        );
        assert!(
            config["webhooks"][0]["clientConfig"]
                .get("caBundle")
                .is_none(),
            "cainjector fills {kind}'s caBundle"
        );
        // The chain: serving Certificate ← CA Issuer ← CA Certificate (isCA) ← self-signed Issuer.
        let issuer_name = certificate["spec"]["issuerRef"]["name"].as_str().unwrap();
        let issuer = r.find("Issuer", issuer_name);
        let ca_secret = issuer["spec"]["ca"]["secretName"]
            .as_str()
            .expect("a CA issuer");
        let ca_cert = r
            .all("Certificate")
            .into_iter()
            .find(|c| c["spec"]["secretName"] == ca_secret)
            .expect("the CA Certificate");
        assert_eq!(ca_cert["spec"]["isCA"], true);
        let root = r.find(
            "Issuer",
            ca_cert["spec"]["issuerRef"]["name"].as_str().unwrap(),
        );
        assert!(root["spec"]["selfSigned"].is_object());
    }

    // An existing issuer replaces the self-signed chain.
    let r = render_values(&[
        "webhook.enabled=true",
        "webhook.certificate.mode=certManager",
        "webhook.certificate.certManager.issuerRef.name=corp-ca",
        "webhook.certificate.certManager.issuerRef.kind=ClusterIssuer",
    ])
    .await;
    assert!(r.all("Issuer").is_empty(), "{:?}", r.names());
    let certificates = r.all("Certificate");
    assert_eq!(certificates.len(), 1);
    assert_eq!(certificates[0]["spec"]["issuerRef"]["name"], "corp-ca");
    assert_eq!(
        certificates[0]["spec"]["issuerRef"]["kind"],
        "ClusterIssuer"
    );
}

#[tokio::test]
async fn secret_mode_uses_the_given_secret_and_names_each_missing_value() {
    let base = [
        "--set",
        "webhook.enabled=true",
        "--set",
        "webhook.certificate.mode=secret",
    ];
    let err = render_error(&base).await;
    assert!(
        err.contains("webhook.certificate.secret.name is required"),
        "{err}"
    );
    let mut with_name = base.to_vec();
    with_name.extend(["--set", "webhook.certificate.secret.name=mine"]);
    let err = render_error(&with_name).await;
    assert!(
        err.contains("webhook.certificate.secret.caBundle is required"),
        "{err}"
    );
    let mut full = with_name.clone();
    full.extend(["--set", "webhook.certificate.secret.caBundle=Q0E="]);
    let r = render(&full).await;
    assert!(r.all("Secret").is_empty() && r.all("Certificate").is_empty());
    for kind in WEBHOOK_CONFIGURATIONS {
        let hook = &r.find(kind, "etcd-operator-webhook")["webhooks"][0];
        assert_eq!(hook["clientConfig"]["caBundle"], "Q0E=");
    }
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn values_schema_rejects_typos_wrong_types_and_unknown_modes() {
    let cases = [
        ("imagee.tag=x", "imagee"),
        ("image.tagg=x", "tagg"),
        ("webhook.certificate.certmanager.duration=1h", "certmanager"),
        ("replicaCount=many", "replicaCount"),
        ("webhook.enabled=yes-please", "enabled"),
        ("webhook.certificate.mode=vault", "mode"),
        (
            "webhook.validation.failurePolicy=Sometimes",
            "failurePolicy",
        ),
        ("logFormat=xml", "logFormat"),
        ("webhook.defaults.antiAffinity=maybe", "antiAffinity"),
    ];
    assert_refused("--set", &cases).await;
}

/// Each `(value, what)` of `cases`, given with `flag` (`--set`, `--set-json`), fails the render
/// with an error naming `what`.
async fn assert_refused(flag: &str, cases: &[(&str, &str)]) {
    for (value, expect) in cases {
        let err = render_error(&[flag, value]).await;
        assert!(err.contains(expect), "{flag} {value}: {err}");
    }
}

#[tokio::test]
async fn kube_rbac_proxy_is_rejected_pointing_to_metrics_secure() {
    let err = render_error(&["--set", "kubeRbacProxy.enabled=true"]).await;
    assert!(
        err.contains("metrics.secure=true") && err.contains("<fullname>-metrics-reader"),
        "{err}"
    );
    // The reference chart's value, set to false, keeps working.
    render(&["--set", "kubeRbacProxy.enabled=false"]).await;
}

#[tokio::test]
async fn service_monitor_and_namespace_are_rendered_on_request() {
    let r = render(&[]).await;
    assert!(r.all("ServiceMonitor").is_empty() && r.all("Namespace").is_empty());
    assert_eq!(r.all("CustomResourceDefinition").len(), 7);
    let r = render_values(&[
        "metrics.serviceMonitor.enabled=true",
        "namespace.create=true",
        "crds.enabled=false",
    ])
    .await;
    let sm = r.find("ServiceMonitor", FULLNAME);
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    let svc = r.find("Service", "etcd-operator-metrics");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
    r.find("Namespace", NAMESPACE);
    assert!(r.all("CustomResourceDefinition").is_empty());
}

#[tokio::test]
async fn lint_strict_is_clean_in_every_mode() {
    let helm = Helm::new(None).or_panic();
    let chart = helm::chart_dir();
    let chart = chart.to_string_lossy();
    let variants: Vec<Vec<String>> = vec![
        vec![],
        vec!["webhook.enabled=true".into()],
        [
            mode_values("certManager"),
            vec!["webhook.enabled=true".into()],
        ]
        .concat(),
        [mode_values("secret"), vec!["webhook.enabled=true".into()]].concat(),
        vec![
            "watchNamespace=team-a".into(),
            "metrics.serviceMonitor.enabled=true".into(),
        ],
    ];
    for values in variants {
        let mut args = vec!["lint".to_string(), "--strict".into(), chart.to_string()];
        args.extend(set_args(&values));
        let out = helm
            .run(&args)
            .await
            .unwrap_or_else(|e| panic!("{values:?}: {e}"));
        assert!(out.contains("0 chart(s) failed"), "{values:?}: {out}");
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "{values:?}: {out}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// RBAC, as rendered
// ---------------------------------------------------------------------------------------------

type Grant = (String, String, String, Option<String>);

/// `have == want`, or a failure listing what is missing and what is granted beyond the calls.
fn assert_same_grants(have: &BTreeSet<Grant>, want: &BTreeSet<Grant>, what: &str) {
    let missing: Vec<_> = want.difference(have).collect();
    let extra: Vec<_> = have.difference(want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: missing (a controller call would be denied) {missing:?}; granted beyond the \
         controller's calls {extra:?}"
    );
}

/// (group, resource, verb, resourceName) granted by `role`'s rules; no wildcard allowed.
fn grants(role: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for rule in role["rules"].as_array().into_iter().flatten() {
        let (groups, resources, verbs) = (
            strings(&rule["apiGroups"]),
            strings(&rule["resources"]),
            strings(&rule["verbs"]),
        );
        let names = strings(&rule["resourceNames"]);
        for item in groups.iter().chain(&resources).chain(&verbs) {
            assert!(!item.contains('*'), "wildcard in {rule}");
        }
        assert!(rule.get("nonResourceURLs").is_none(), "{rule}");
        for g in &groups {
            for r in &resources {
                for v in &verbs {
                    if names.is_empty() {
                        out.insert((g.clone(), r.clone(), v.clone(), None));
                    }
                    for n in &names {
                        out.insert((g.clone(), r.clone(), v.clone(), Some(n.clone())));
                    }
                }
            }
        }
    }
    out
}

fn expected(scope: Scope) -> BTreeSet<Grant> {
    CONTROLLER_CALLS
        .iter()
        .filter(|c| c.3 == scope)
        .map(|(g, r, v, s)| {
            let name = match s {
                Scope::Lease if *v != "create" => Some(format!("{FULLNAME}-leader")),
                Scope::AuthRecord if *v != "create" => Some(AUTH_RECORD.to_string()),
                _ => None,
            };
            (g.to_string(), r.to_string(), v.to_string(), name)
        })
        .collect()
}

/// The roles bound to `sa` by the rendered bindings: (kind, namespace, role document).
fn bound_roles<'a>(r: &'a Rendered, sa: &str) -> Vec<(&'a str, Option<&'a str>, &'a Value)> {
    let mut out = Vec::new();
    for binding in r
        .all("ClusterRoleBinding")
        .into_iter()
        .chain(r.all("RoleBinding"))
    {
        let subjects = binding["subjects"].as_array().cloned().unwrap_or_default();
        if !subjects.iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == NAMESPACE
        }) {
            continue;
        }
        let kind = binding["roleRef"]["kind"].as_str().expect("roleRef.kind");
        let name = binding["roleRef"]["name"].as_str().expect("roleRef.name");
        let ns = binding["metadata"]["namespace"].as_str();
        let role = r
            .docs
            .iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"] == name
                    && d["metadata"]["namespace"].as_str() == ns.filter(|_| kind == "Role")
            })
            .unwrap_or_else(|| panic!("{kind} {name} is bound but not rendered"));
        out.push((kind, ns, role));
    }
    out
}

#[tokio::test]
async fn rbac_grants_exactly_the_controller_calls_and_the_webhook_nothing() {
    for watch in [None, Some("team-a")] {
        let mut values = vec!["webhook.enabled=true".to_string()];
        values.extend(watch.map(|ns| format!("watchNamespace={ns}")));
        let r = render_values(&values).await;
        let roles = bound_roles(&r, FULLNAME);
        let mut cluster = BTreeSet::new();
        let mut lease = BTreeSet::new();
        let mut record = BTreeSet::new();
        let mut watched = BTreeSet::new();
        let lease_role = format!("{FULLNAME}-leader-election");
        for (kind, ns, role) in roles {
            let g = grants(role);
            let name = role["metadata"]["name"].as_str().unwrap_or_default();
            match (kind, ns) {
                ("ClusterRole", _) => cluster.extend(g),
                ("Role", Some(NAMESPACE)) if name == lease_role => lease.extend(g),
                ("Role", Some(NAMESPACE)) if name == AUTH_RECORD => record.extend(g),
                ("Role", Some(ns)) if Some(ns) == watch => watched.extend(g),
                other => panic!("unexpected binding to {other:?} {name}"),
            }
        }
        assert_same_grants(&lease, &expected(Scope::Lease), "the leader-election Role");
        assert_same_grants(
            &record,
            &expected(Scope::AuthRecord),
            "the auth-record Role in the release namespace",
        );
        match watch {
            None => {
                let mut want = expected(Scope::Cluster);
                want.extend(expected(Scope::Watched));
                assert_same_grants(&cluster, &want, "the ClusterRole");
                assert!(watched.is_empty());
            }
            Some(ns) => {
                assert_same_grants(
                    &cluster,
                    &expected(Scope::Cluster),
                    "the ClusterRole (only cluster-scoped reads stay cluster-wide)",
                );
                assert_same_grants(
                    &watched,
                    &expected(Scope::Watched),
                    &format!("the Role in {ns}"),
                );
            }
        }
        // The webhook never calls the API.
        assert!(bound_roles(&r, "etcd-operator-webhook").is_empty());
        let hook = r.deployment("etcd-operator-webhook");
        assert_eq!(pod_spec(&hook).automount_service_account_token, Some(false));
        assert_eq!(spec_service_account(&hook), "etcd-operator-webhook");
    }
}

/// Every rule of `role` that lets its subject change Secrets: (verbs, resourceNames).
fn secret_write_rules(role: &Value) -> Vec<(Vec<String>, Vec<String>)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|rule| {
            let groups = strings(&rule["apiGroups"]);
            let resources = strings(&rule["resources"]);
            groups.iter().any(|g| g.is_empty() || g == "*")
                && resources.iter().any(|r| r == "secrets" || r == "*")
        })
        .map(|rule| {
            let writes: Vec<String> = strings(&rule["verbs"])
                .into_iter()
                .filter(|v| WRITE_VERBS.contains(&v.as_str()))
                .collect();
            (writes, strings(&rule["resourceNames"]))
        })
        .filter(|(writes, _)| !writes.is_empty())
        .collect()
}

/// The operator must not be able to rewrite Secrets it does not own (ServiceAccount tokens,
/// other tenants' credentials): no ClusterRole (bound or not) grants a write verb on Secrets, no
/// Role in a watched namespace does, and the only Secret it may change is its auth record in the
/// release namespace (create cannot be limited to a name; get and patch are).
#[tokio::test]
async fn no_cluster_role_grants_a_write_on_secrets_and_only_the_auth_record_may_be_changed() {
    for watch in [None, Some("team-a")] {
        for webhook in [false, true] {
            let mut values = vec![format!("webhook.enabled={webhook}")];
            if let Some(ns) = watch {
                values.push(format!("watchNamespace={ns}"));
            }
            let r = render_values(&values).await;
            for role in r.all("ClusterRole") {
                let writes = secret_write_rules(role);
                assert!(
                    writes.is_empty(),
                    "{values:?}: ClusterRole {} grants writes on every Secret: {writes:?}",
                    role["metadata"]["name"]
                );
            }
            let mut record_writes = Vec::new();
            for role in r.all("Role") {
                let (name, ns) = (
                    role["metadata"]["name"].as_str().unwrap_or_default(),
                    role["metadata"]["namespace"].as_str().unwrap_or_default(),
                );
                let writes = secret_write_rules(role);
                if name == AUTH_RECORD && ns == NAMESPACE {
                    record_writes = writes;
                } else {
                    assert!(
                        writes.is_empty(),
                        "{values:?}: Role {ns}/{name} grants writes on Secrets: {writes:?}"
                    );
                }
            }
            let mut record_writes: Vec<(String, Vec<String>)> = record_writes
                .into_iter()
                .flat_map(|(verbs, names)| verbs.into_iter().map(move |v| (v, names.clone())))
                .collect();
            record_writes.sort();
            assert_eq!(
                record_writes,
                vec![
                    ("create".to_string(), vec![]),
                    ("patch".to_string(), vec![AUTH_RECORD.to_string()]),
                ],
                "{values:?}: the Role {NAMESPACE}/{AUTH_RECORD} grants create (no name can be \
                 given for a create) and patch of {AUTH_RECORD} only"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// On a real apiserver
// ---------------------------------------------------------------------------------------------

/// The apiserver `helm install` targets (the chart installs the CRDs itself).
async fn install_plane() -> &'static ControlPlane {
    ControlPlane::builder().shared().await.or_panic()
}

/// `helm install etcd-operator` with the webhook (helm mode), once per test binary: the client
/// and what the install printed (the NOTES).
async fn installed() -> &'static (Helm, String) {
    static INSTALLED: OnceCell<(Helm, String)> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let cp = install_plane().await;
            let helm = Helm::new(Some(cp.kubeconfig())).or_panic();
            let out = helm
                .install_chart(RELEASE, NAMESPACE, &["webhook.enabled=true"])
                .await
                .or_panic();
            (helm, out)
        })
        .await
}

#[tokio::test]
async fn install_notes_print_the_runbook_commands() {
    let (_, out) = installed().await;
    for command in [
        "kubectl -n etcd-operator-system get deploy etcd-operator",
        "kubectl logs -n etcd-operator-system deploy/etcd-operator -c manager",
        "kubectl get validatingwebhookconfiguration,mutatingwebhookconfiguration etcd-operator-webhook",
    ] {
        assert!(out.contains(command), "NOTES lack {command:?}:\n{out}");
    }
}

/// What `helm install --dry-run=client` prints after `NOTES:` for `sets`, with `cp` answering
/// helm's discovery (helm renders NOTES only for an install; `helm template` prints none).
async fn install_notes(cp: &ControlPlane, sets: &[&str]) -> String {
    let helm = Helm::new(Some(cp.kubeconfig())).or_panic();
    // The plane has the CRDs already, not installed by helm (the NOTES do not depend on them).
    let sets: Vec<&str> = sets.iter().copied().chain(["crds.enabled=false"]).collect();
    let out = helm
        .install_dry_run(RELEASE, NAMESPACE, &sets)
        .await
        .or_panic();
    match out.split_once("\nNOTES:\n") {
        Some((_, notes)) => notes.to_string(),
        None => panic!("helm install --dry-run printed no NOTES:\n{out}"),
    }
}

/// The lines of `notes` a user pastes to create the sample EtcdCluster, as printed: from the
/// `kubectl apply` that opens the here-document to the line that should close it.
fn sample_cluster_command(notes: &str) -> String {
    let lines: Vec<&str> = notes.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("kubectl apply") && l.contains("<<'YAML'"))
        .unwrap_or_else(|| panic!("the NOTES print no `kubectl apply` of a manifest:\n{notes}"));
    let end = lines[start..]
        .iter()
        .position(|l| l.trim() == "YAML")
        .unwrap_or_else(|| panic!("the NOTES' here-document has no end:\n{notes}"));
    let mut command = lines[start..=start + end].join("\n");
    command.push('\n');
    command
}

/// Run `command` with bash as a user pasting it would, its `kubectl` the plane's made a
/// server-side dry run: `(exit status, stdout, stderr)`.
async fn run_pasted(cp: &ControlPlane, command: &str) -> (bool, String, String) {
    let script = format!(
        "kubectl() {{ \"$KUBECTL\" --kubeconfig \"$KUBECONFIG_FILE\" \"$@\" --server-side --dry-run=server; }}\n{command}"
    );
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .env("KUBECTL", cp.kubectl_bin())
        .env("KUBECONFIG_FILE", cp.kubeconfig())
        .env("HOME", cp.root())
        .stdin(std::process::Stdio::null());
    tests::env::process::contain(&mut cmd);
    let out = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .output()
        .await
        .or_panic();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The NOTES' sample EtcdCluster, pasted as printed, is accepted by `cp`'s CRDs in `namespace`.
async fn assert_notes_sample_is_accepted(cp: &ControlPlane, sets: &[&str], namespace: &str) {
    let notes = install_notes(cp, sets).await;
    let command = sample_cluster_command(&notes);
    let (ok, stdout, stderr) = run_pasted(cp, &command).await;
    let what = format!(
        "the NOTES' sample ({sets:?}) on Kubernetes {:?}:\n{command}\nstdout: {stdout}\nstderr: {stderr}",
        cp.kubernetes_version()
    );
    assert!(ok, "rejected: {what}");
    assert!(
        !stderr.contains("here-document"),
        "the here-document does not end where printed: {what}"
    );
    assert_eq!(
        stdout.trim(),
        "etcdcluster.etcd-operator.cozystack.io/my-etcd serverside-applied (server dry run)",
        "{what}"
    );
    let manifest: Value = yaml_serde::from_str(
        command
            .lines()
            .skip(1)
            .take_while(|l| l.trim() != "YAML")
            .collect::<Vec<_>>()
            .join("\n")
            .as_str(),
    )
    .or_panic();
    assert_eq!(manifest["metadata"]["namespace"], namespace, "{what}");
}

/// A kube-apiserver of `kubernetes` with the project's CRDs and nothing that admits or defaults
/// beyond them (no webhook). A missing build fails with its reason.
async fn crds_only_plane(kubernetes: Kubernetes) -> ControlPlane {
    ControlPlane::builder()
        .kubernetes(kubernetes)
        .with_crds()
        .start()
        .await
        .or_panic()
}

#[tokio::test]
async fn install_notes_sample_cluster_is_accepted_as_pasted() {
    let cp = crds_only_plane(Kubernetes::Current).await;
    assert_notes_sample_is_accepted(&cp, &[], "default").await;
    cp.kubectl_ok(&["create", "namespace", "team-a"])
        .await
        .or_panic();
    assert_notes_sample_is_accepted(&cp, &["watchNamespace=team-a"], "team-a").await;
}

/// Kubernetes 1.29, the oldest the CRDs support, validates with their CEL rules alone: the
/// sample needs no webhook default to be accepted.
#[tokio::test]
async fn install_notes_sample_cluster_is_accepted_on_kubernetes_1_29() {
    let cp = crds_only_plane(Kubernetes::V1_29).await;
    assert_notes_sample_is_accepted(&cp, &[], "default").await;
}

/// Whether ServiceAccount `account` (namespace, name) may `verb` the resource, per the apiserver's
/// authorizer (a SubjectAccessReview, as `kubectl auth can-i --as` does).
async fn can(
    client: &kube::Client,
    (user_ns, sa): (&str, &str),
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{user_ns}:{sa}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{user_ns}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .or_panic();
    answer.status.map(|s| s.allowed).unwrap_or(false)
}

/// A ServiceAccount (namespace, name), asked about through `client`.
struct Account<'a> {
    client: &'a kube::Client,
    id: (&'a str, &'a str),
}

impl Account<'_> {
    /// [`can`] for this account: may it `verb` `group`/`resource` (in `namespace`, named `name`)?
    async fn can(
        &self,
        (verb, group, resource): (&str, &str, &str),
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> bool {
        can(self.client, self.id, verb, group, resource, namespace, name).await
    }
}

/// Things neither the cluster-wide nor the scoped controller may do.
const MUST_NOT: &[(&str, &str, &str)] = &[
    ("delete", "", "nodes"),
    ("patch", "", "nodes"),
    ("watch", "", "nodes"),
    ("delete", "", "persistentvolumes"),
    ("list", "", "persistentvolumes"),
    ("delete", "", "secrets"),
    ("create", "", "secrets"),
    ("patch", "", "secrets"),
    ("update", "", "secrets"),
    ("deletecollection", "", "secrets"),
    ("update", "cert-manager.io", "certificates"),
    ("delete", "cert-manager.io", "certificates"),
    ("create", "cert-manager.io", "issuers"),
    ("create", "cert-manager.io", "certificaterequests"),
    ("delete", "batch", "jobs"),
    ("update", "etcd-operator.cozystack.io", "etcdsnapshots"),
    ("update", "etcd-operator.cozystack.io", "etcddefrags"),
    ("delete", "etcd-operator.cozystack.io", "etcdrecoveries"),
    ("delete", "etcd-operator.cozystack.io", "etcddefragpolicies"),
    ("create", "rbac.authorization.k8s.io", "clusterroles"),
    ("create", "rbac.authorization.k8s.io", "rolebindings"),
    ("update", "etcd-operator.cozystack.io", "etcdclusters"),
    ("delete", "etcd-operator.cozystack.io", "etcdclusters"),
    // PVCs are deleted one by one, by name (member/ and cluster/ cleanup), never by collection.
    ("deletecollection", "", "persistentvolumeclaims"),
    ("patch", "apps", "deployments"),
    ("create", "", "pods/exec"),
    ("update", "coordination.k8s.io", "leases"),
];

#[tokio::test]
async fn installed_controller_account_is_allowed_each_call_and_denied_the_rest() {
    let cp = install_plane().await;
    installed().await;
    let client = cp.client().or_panic();
    let controller = Account {
        client: &client,
        id: (NAMESPACE, FULLNAME),
    };
    let webhook = Account {
        client: &client,
        id: (NAMESPACE, WEBHOOK),
    };
    let mut checked = 0;
    for (group, resource, verb, scope) in CONTROLLER_CALLS {
        let (ns, name) = match scope {
            Scope::Watched => (Some("some-team"), None),
            Scope::Cluster => (None, None),
            Scope::Lease if *verb == "create" => (Some(NAMESPACE), None),
            Scope::Lease => (Some(NAMESPACE), Some("etcd-operator-leader")),
            Scope::AuthRecord if *verb == "create" => (Some(NAMESPACE), None),
            Scope::AuthRecord => (Some(NAMESPACE), Some(AUTH_RECORD)),
        };
        assert!(
            controller.can((verb, group, resource), ns, name).await,
            "the controller may not {verb} {group}/{resource} in {ns:?}"
        );
        checked += 1;
    }
    for (verb, group, resource) in MUST_NOT {
        assert!(
            !controller
                .can((verb, group, resource), Some("some-team"), None)
                .await,
            "the controller may {verb} {group}/{resource}"
        );
    }
    // Another Lease than its own is not the controller's to take over.
    let lease = ("patch", "coordination.k8s.io", "leases");
    assert!(
        !controller
            .can(lease, Some(NAMESPACE), Some("kube-scheduler"))
            .await,
        "the controller may patch the Lease kube-scheduler"
    );
    // In its own namespace too, the only Secret it may change is its auth record: not the
    // webhook's serving certificate, not helm's release records, not a ServiceAccount token.
    let mut secret_denials = 0;
    for name in [
        "etcd-operator-webhook-tls",
        "sh.helm.release.v1.etcd-operator.v1",
        "etcd-operator-token",
    ] {
        for verb in ["patch", "update", "delete"] {
            assert!(
                !controller
                    .can((verb, "", "secrets"), Some(NAMESPACE), Some(name))
                    .await,
                "the controller may {verb} Secret {NAMESPACE}/{name}"
            );
            secret_denials += 1;
        }
    }
    // The webhook account may do nothing at all.
    for (group, resource, verb, _) in CONTROLLER_CALLS {
        assert!(
            !webhook
                .can((verb, group, resource), Some("some-team"), None)
                .await,
            "the webhook may {verb} {group}/{resource}"
        );
    }
    report(&format!(
        "RBAC on the real authorizer: {checked} controller calls allowed, {} denials held",
        MUST_NOT.len() + 1 + secret_denials + CONTROLLER_CALLS.len()
    ));
}

#[tokio::test]
async fn watch_namespace_install_is_allowed_only_in_that_namespace() {
    let cp = install_plane().await;
    let client = cp.client().or_panic();
    let helm = Helm::new(Some(cp.kubeconfig())).or_panic();
    let (release, ns, sa) = ("scoped", "scoped-system", "scoped-etcd-operator");
    // The watched namespace must exist: the chart puts its Role there.
    cp.kubectl_ok(&["create", "namespace", "team-a"])
        .await
        .or_panic();
    // The CRDs belong to the cluster-wide release of this apiserver.
    helm.install_chart(
        release,
        ns,
        &["crds.enabled=false", "watchNamespace=team-a"],
    )
    .await
    .or_panic();
    let account = Account {
        client: &client,
        id: (ns, sa),
    };
    for (group, resource, verb, scope) in CONTROLLER_CALLS {
        let call = (*verb, *group, *resource);
        match scope {
            Scope::Watched => {
                // (namespace, whether it may)
                for (at, allowed) in [
                    (Some("team-a"), true),
                    (Some("team-b"), false),
                    (None, false),
                ] {
                    assert_eq!(
                        account.can(call, at, None).await,
                        allowed,
                        "{verb} {resource} in {}",
                        at.unwrap_or("the cluster (cluster-wide)")
                    );
                }
            }
            Scope::Cluster => {
                assert!(
                    account.can(call, None, None).await,
                    "{verb} {resource} cluster-wide"
                )
            }
            Scope::Lease => {
                let name = (*verb != "create").then_some("scoped-etcd-operator-leader");
                assert!(account.can(call, Some(ns), name).await, "{verb} its Lease");
            }
            Scope::AuthRecord => {
                let name = (*verb != "create").then_some("scoped-etcd-operator-auth-records");
                assert!(
                    account.can(call, Some(ns), name).await,
                    "{verb} its auth record"
                );
                if *verb != "get" {
                    assert!(
                        !account.can(call, Some("team-a"), None).await,
                        "{verb} {resource} in the watched namespace"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn helm_upgrade_keeps_the_webhook_certificate_and_ca_bundle() {
    let cp = install_plane().await;
    let (helm, _) = installed().await;
    let client = cp.client().or_panic();
    async fn snapshot(client: &kube::Client) -> (Value, Value, Value, String) {
        let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
            .get("etcd-operator-webhook-tls")
            .await
            .or_panic();
        let validating = Api::<
            k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
        >::all(client.clone())
        .get("etcd-operator-webhook")
        .await
        .or_panic();
        let mutating = Api::<
            k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
        >::all(client.clone())
        .get("etcd-operator-webhook")
        .await
        .or_panic();
        let image = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
            .get(FULLNAME)
            .await
            .or_panic();
        let image = pod_spec(&image).containers[0]
            .image
            .clone()
            .unwrap_or_default();
        (
            serde_json::to_value(&secret.data).unwrap(),
            serde_json::to_value(&validating.webhooks.unwrap()[0].client_config.ca_bundle).unwrap(),
            serde_json::to_value(&mutating.webhooks.unwrap()[0].client_config.ca_bundle).unwrap(),
            image,
        )
    }
    let before = snapshot(&client).await;
    assert_eq!(
        before.1, before.0["ca.crt"],
        "the caBundle is the Secret's CA"
    );
    let chart = helm::chart_dir();
    helm.run([
        "upgrade",
        RELEASE,
        &chart.to_string_lossy(),
        "--namespace",
        NAMESPACE,
        "--reset-then-reuse-values",
        "--set",
        "image.tag=v0.0.2-upgrade",
    ])
    .await
    .or_panic();
    let after = snapshot(&client).await;
    assert_eq!(
        after.3,
        format!("{IMAGE_REPOSITORY}:v0.0.2-upgrade"),
        "the upgrade applied"
    );
    assert_eq!(
        after.0, before.0,
        "the webhook Secret changed across helm upgrade"
    );
    assert_eq!(
        after.1, before.1,
        "the validating caBundle changed across helm upgrade"
    );
    assert_eq!(
        after.2, before.2,
        "the mutating caBundle changed across helm upgrade"
    );
}

#[tokio::test]
async fn rendered_chart_applies_server_side_on_a_clean_apiserver() {
    let cp = ControlPlane::builder().start().await.or_panic();
    let dir = tempfile::tempdir().or_panic();
    let helm = Helm::new(None).or_panic();

    // The plain-kubectl path of the runbook: helm mode, the Namespace in the output.
    let text = helm
        .template(
            RELEASE,
            NAMESPACE,
            &[
                "--set",
                "namespace.create=true",
                "--set",
                "webhook.enabled=true",
            ],
        )
        .await
        .or_panic();
    let applied = apply(&cp, dir.path(), "helm-mode.yaml", &text).await;
    for doc in parse_documents(&text) {
        let (kind, name) = (
            doc["kind"].as_str().unwrap(),
            doc["metadata"]["name"].as_str().unwrap(),
        );
        let kind_lower = kind.to_lowercase();
        let suffix = format!("/{name} serverside-applied");
        let is_it = |l: &str| {
            l.ends_with(&suffix) && l.split(['/', '.']).next() == Some(kind_lower.as_str())
        };
        assert!(
            applied.lines().any(is_it),
            "{kind} {name} not applied:\n{applied}"
        );
    }
    let ca = cp
        .kubectl_ok(&[
            "get",
            "validatingwebhookconfiguration",
            "etcd-operator-webhook",
            "-o",
            "jsonpath={.webhooks[0].clientConfig.caBundle}",
        ])
        .await
        .or_panic();
    assert!(
        !ca.is_empty(),
        "the stored configuration keeps its caBundle"
    );

    // cert-manager mode, with the real cert-manager CRDs: Issuers and Certificates are accepted.
    let crds = Testbins::from_env()
        .or_panic()
        .dir()
        .join("cert-manager-crds");
    cp.kubectl_ok(&["apply", "--server-side", "-f", &crds.to_string_lossy()])
        .await
        .or_panic();
    cp.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd",
        "--all",
        "--timeout=60s",
    ])
    .await
    .or_panic();
    let helm = Helm::new(None).or_panic();
    let text = helm
        .template(
            "cm",
            "cm-system",
            &[
                "--set",
                "namespace.create=true",
                "--set",
                "crds.enabled=false",
                "--set",
                "webhook.enabled=true",
                "--set",
                "webhook.certificate.mode=certManager",
            ],
        )
        .await
        .or_panic();
    let applied = apply(&cp, dir.path(), "cert-manager-mode.yaml", &text).await;
    assert!(
        applied.contains("certificate.cert-manager.io/cm-etcd-operator-webhook serverside-applied"),
        "{applied}"
    );
    assert_eq!(
        applied.lines().count(),
        parse_documents(&text).len(),
        "{applied}"
    );

    // What a user overrides, as the apiserver takes it: IDs left to the platform (OpenShift's
    // restricted SCC), extra arguments and environment, two controller replicas and their
    // PodDisruptionBudget, in a namespace that enforces the restricted Pod Security Standard.
    let ns = "custom-system";
    cp.kubectl_ok(&["create", "namespace", ns]).await.or_panic();
    cp.kubectl_ok(&[
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    ])
    .await
    .or_panic();
    let overrides: Vec<String> = hygiene::PLATFORM_IDS
        .iter()
        .copied()
        .chain([
            "crds.enabled=false",
            "webhook.enabled=true",
            "replicaCount=2",
            "extraEnv[0].name=HTTPS_PROXY",
            "extraEnv[0].value=http://proxy:3128",
            "extraArgs[0]=--cluster-domain=cluster.example",
            "webhook.extraEnv[0].name=TZ",
            "webhook.extraEnv[0].value=UTC",
        ])
        .map(String::from)
        .collect();
    let apply_overrides = |sets: Vec<String>, file: &'static str, dry_run: bool| {
        let (cp, dir) = (&cp, dir.path());
        async move {
            let extra = set_args(&sets);
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let text = Helm::new(None)
                .or_panic()
                .template("custom", ns, &extra)
                .await
                .or_panic();
            let path = dir.join(file);
            std::fs::write(&path, text).or_panic();
            let path = path.to_string_lossy();
            let mut args = vec!["apply", "--server-side", "-f", &path];
            if dry_run {
                args.push("--dry-run=server");
            }
            let out = cp.kubectl(&args).await.or_panic();
            assert!(out.success, "{sets:?}: {}", out.stderr);
            out
        }
    };
    let out = apply_overrides(overrides.clone(), "overrides.yaml", false).await;
    assert!(
        !out.stderr.contains("PodSecurity"),
        "restricted without the IDs: {}",
        out.stderr
    );
    assert!(
        out.stdout
            .contains("poddisruptionbudget.policy/custom-etcd-operator serverside-applied"),
        "{}",
        out.stdout
    );
    for deployment in ["custom-etcd-operator", "custom-etcd-operator-webhook"] {
        let stored: Deployment = serde_json::from_str(
            &cp.kubectl_ok(&["get", "deployment", "-n", ns, deployment, "-o", "json"])
                .await
                .or_panic(),
        )
        .or_panic();
        let spec = pod_spec(&stored);
        let pod = spec.security_context.clone().unwrap_or_default();
        let c = &spec.containers[0];
        let sc = c.security_context.clone().unwrap_or_default();
        assert_eq!(
            (pod.run_as_user, pod.run_as_group, pod.fs_group),
            (None, None, None),
            "{deployment}: no IDs stored"
        );
        assert_eq!((sc.run_as_user, sc.run_as_group), (None, None));
        assert_eq!(
            (pod.run_as_non_root, sc.run_as_non_root),
            (Some(true), Some(true))
        );
        assert!(c
            .env
            .iter()
            .flatten()
            .any(|e| e.name == "HTTPS_PROXY" || e.name == "TZ"));
    }
    // The namespace's check is live: without runAsNonRoot as well, the apiserver warns.
    let mut unrestricted = overrides;
    unrestricted.extend([
        "podSecurityContext.runAsNonRoot=null".to_string(),
        "securityContext.runAsNonRoot=null".to_string(),
    ]);
    let out = apply_overrides(unrestricted, "unrestricted.yaml", true).await;
    assert!(
        out.stderr.contains("would violate PodSecurity") && out.stderr.contains("runAsNonRoot"),
        "{}",
        out.stderr
    );
}

async fn apply(cp: &ControlPlane, dir: &Path, file: &str, text: &str) -> String {
    let path = dir.join(file);
    std::fs::write(&path, text).or_panic();
    cp.kubectl_ok(&["apply", "--server-side", "-f", &path.to_string_lossy()])
        .await
        .or_panic()
}
