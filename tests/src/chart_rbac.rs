//! The identity an operator run on the host ([`crate::operator::Operator`]) has in the test
//! control plane: the chart's own ServiceAccount, bound to the chart's own ClusterRole, Roles and
//! bindings, so that a grant the chart lacks fails the suite that needs it, exactly as it would
//! fail a `helm install`.
//!
//! For each operator namespace the chart is rendered by the real helm (`helm template`, release
//! `etcd-operator-<n>` in that namespace, `watchNamespace` when the operator watches one), its
//! ServiceAccount, ClusterRoles, ClusterRoleBindings, Roles and RoleBindings are applied
//! server-side with the admin client, a token is requested for the ServiceAccount (TokenRequest,
//! the `serviceaccounts/token` subresource) and written into a kubeconfig that has the admin
//! kubeconfig's server and CA and nothing else. The controller's arguments are taken from the
//! chart's Deployment (the Lease name, the auth record Secret, `--watch-namespace`), so the
//! binary runs with the names its RBAC is written for.
//!
//! A release per operator namespace, as two helm installs would need: the ClusterRole and
//! ClusterRoleBinding are cluster-scoped and named after the release. Everything is applied once
//! per control plane, namespace and watch namespace; operators restarted in the same namespace
//! reuse it (and its Lease).
//!
//! The tests themselves keep the admin kubeconfig.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;
use tokio::sync::OnceCell;

use crate::env::{ControlPlane, Error};
use crate::helm::Helm;

/// The field manager of the harness's server-side applies.
const FIELD_MANAGER: &str = "etcd-operator-tests";
/// Long enough for any test binary; the apiserver is not given a lower maximum.
const TOKEN_SECONDS: i64 = 24 * 3600;
/// How long the RBAC authorizer may take to see new bindings (it reads them from informers).
const GRANTS_EFFECTIVE_TIMEOUT: Duration = Duration::from_secs(30);
/// Flags the harness sets itself (a free loopback port) or leaves to the test (the image the pod
/// runner maps to the built binaries).
const HARNESS_FLAGS: &[&str] = &["--admin-listen", "--operator-image"];
/// The RBAC kinds of the chart that are applied (with the ServiceAccount).
const RBAC_KINDS: &[(&str, &str, bool)] = &[
    // (kind, plural, namespaced)
    ("ServiceAccount", "serviceaccounts", true),
    ("ClusterRole", "clusterroles", false),
    ("ClusterRoleBinding", "clusterrolebindings", false),
    ("Role", "roles", true),
    ("RoleBinding", "rolebindings", true),
];

/// The chart's identity for one operator namespace. See the module docs.
#[derive(Debug)]
pub struct Identity {
    release: String,
    namespace: String,
    service_account: String,
    kubeconfig: PathBuf,
    args: Vec<String>,
}

impl Identity {
    /// The identity for an operator in `namespace` (its release namespace: Lease and auth
    /// record) watching `watch_namespace` (all namespaces when `None`), set up on first use.
    pub async fn for_operator(
        cp: &ControlPlane,
        namespace: &str,
        watch_namespace: Option<&str>,
    ) -> Result<Arc<Identity>, Error> {
        type Cell = OnceCell<Result<Arc<Identity>, String>>;
        type Key = (String, String, Option<String>);
        static SET_UP: Mutex<Vec<(Key, &'static Cell)>> = Mutex::new(Vec::new());
        let key: Key = (
            cp.server_url().to_string(),
            namespace.to_string(),
            watch_namespace.map(str::to_string),
        );
        let cell: &'static Cell = {
            let mut set_up = SET_UP.lock().map_err(|_| {
                Error::Unsupported("a test panicked while setting up the operator's RBAC".into())
            })?;
            match set_up.iter().find(|(k, _)| *k == key) {
                Some((_, cell)) => cell,
                None => {
                    let cell: &'static Cell = Box::leak(Box::new(OnceCell::new()));
                    set_up.push((key, cell));
                    cell
                }
            }
        };
        let release = release_name(cp, namespace)?;
        cell.get_or_init(|| async {
            set_up(cp, &release, namespace, watch_namespace)
                .await
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .await
        .clone()
        .map_err(|message| Error::Chart {
            what: format!(
                "setting up the chart's ServiceAccount and RBAC for an operator in namespace \
                 {namespace}"
            ),
            message,
        })
    }

    /// The helm release name (`etcd-operator-<n>`), also the chart's object name prefix.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// The release namespace: the ServiceAccount's, the Lease's and the auth record's.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The ServiceAccount the operator authenticates as.
    pub fn service_account(&self) -> &str {
        &self.service_account
    }

    /// `system:serviceaccount:<namespace>:<name>`.
    pub fn username(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }

    /// A kubeconfig with the ServiceAccount's token and the admin kubeconfig's server and CA.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The controller arguments of the chart's Deployment, `$(POD_NAMESPACE)` expanded, without
    /// [`HARNESS_FLAGS`].
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The value of `--flag=value` among [`Identity::args`].
    pub fn arg(&self, flag: &str) -> Option<&str> {
        let prefix = format!("{flag}=");
        self.args.iter().find_map(|a| a.strip_prefix(&prefix))
    }
}

/// `--flag` of `--flag=value` (or the whole argument).
pub fn flag_name(arg: &str) -> &str {
    arg.split_once('=').map_or(arg, |(flag, _)| flag)
}

/// One release name per control plane and operator namespace, so that restarted operators and a
/// changed watch namespace (a `helm upgrade`) keep their Lease and auth record.
fn release_name(cp: &ControlPlane, namespace: &str) -> Result<String, Error> {
    static RELEASES: Mutex<BTreeMap<(String, String), String>> = Mutex::new(BTreeMap::new());
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let mut releases = RELEASES.lock().map_err(|_| {
        Error::Unsupported("a test panicked while naming an operator release".into())
    })?;
    let release = releases
        .entry((cp.server_url().to_string(), namespace.to_string()))
        .or_insert_with(|| format!("etcd-operator-{}", NEXT.fetch_add(1, Ordering::SeqCst)));
    Ok(release.clone())
}

fn chart_error(what: impl Into<String>) -> impl FnOnce(String) -> Error {
    let what = what.into();
    move |message| Error::Chart { what, message }
}

async fn set_up(
    cp: &ControlPlane,
    release: &str,
    namespace: &str,
    watch_namespace: Option<&str>,
) -> Result<Identity, Error> {
    let rendered = render(release, namespace, watch_namespace).await?;
    let deployment = controller_deployment(&rendered)?;
    let service_account = deployment
        .pointer("/spec/template/spec/serviceAccountName")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Chart {
            what: format!("the chart's controller Deployment (release {release})"),
            message: "has no spec.template.spec.serviceAccountName".into(),
        })?
        .to_string();
    let args = controller_args(deployment, namespace)?;
    if let Some(watch) = watch_namespace {
        let rendered_watch = args
            .iter()
            .find_map(|a| a.strip_prefix("--watch-namespace="));
        if rendered_watch != Some(watch) {
            return Err(Error::Chart {
                what: format!("the chart's controller arguments with watchNamespace={watch}"),
                message: format!("--watch-namespace is {rendered_watch:?}"),
            });
        }
    }

    let client = cp.client()?;
    let mut bindings = Vec::new();
    for doc in &rendered {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        let Some((_, plural, namespaced)) = RBAC_KINDS.iter().find(|(k, _, _)| *k == kind) else {
            continue;
        };
        apply(&client, doc, kind, plural, *namespaced).await?;
        if kind.ends_with("Binding") {
            bindings.push(doc);
        }
    }

    let token = token(&client, namespace, &service_account).await?;
    let kubeconfig = cp
        .root()
        .join(format!("operator-{release}-{namespace}.kubeconfig"));
    crate::env::control_plane::write_kubeconfig_for(
        &kubeconfig,
        cp.server_url(),
        cp.pki(),
        (&service_account, serde_json::json!({"token": token})),
        None,
    )?;
    let identity = Identity {
        release: release.to_string(),
        namespace: namespace.to_string(),
        service_account,
        kubeconfig,
        args,
    };
    let as_operator = client_for(&identity.kubeconfig).await?;
    check_authenticates(&as_operator, &identity).await?;
    wait_grants_effective(cp, &as_operator, &rendered, &bindings, &identity).await?;
    Ok(identity)
}

/// `helm template` of the chart for this release, as YAML documents.
async fn render(
    release: &str,
    namespace: &str,
    watch_namespace: Option<&str>,
) -> Result<Vec<Value>, Error> {
    let helm = Helm::new(None).map_err(|e| Error::Chart {
        what: "starting helm".into(),
        message: e.to_string(),
    })?;
    let watch = watch_namespace.map(|w| format!("watchNamespace={w}"));
    let mut extra = vec!["--set", "crds.enabled=false"];
    if let Some(watch) = &watch {
        extra.extend(["--set", watch.as_str()]);
    }
    let text = helm
        .template(release, namespace, &extra)
        .await
        .map_err(|e| Error::Chart {
            what: format!("rendering the chart (release {release}, namespace {namespace})"),
            message: e.to_string(),
        })?;
    let mut docs = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(&text) {
        let value = <Value as serde::Deserialize>::deserialize(doc).map_err(|e| Error::Chart {
            what: format!("parsing the rendered chart (release {release})"),
            message: e.to_string(),
        })?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// The controller Deployment: the one labelled `control-plane: controller-manager`.
/// The string at `pointer` in `doc`, empty when there is none.
fn str_at<'a>(doc: &'a Value, pointer: &str) -> &'a str {
    doc.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn controller_deployment(rendered: &[Value]) -> Result<&Value, Error> {
    let found: Vec<&Value> = rendered
        .iter()
        .filter(|d| d.get("kind").and_then(Value::as_str) == Some("Deployment"))
        .filter(|d| {
            d.pointer("/metadata/labels/control-plane")
                .and_then(Value::as_str)
                == Some("controller-manager")
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        other => Err(Error::Chart {
            what: "the chart's controller Deployment".into(),
            message: format!(
                "expected one Deployment labelled control-plane=controller-manager, found {}",
                other.len()
            ),
        }),
    }
}

/// The `manager` container's arguments, `$(POD_NAMESPACE)` expanded as the kubelet would (the
/// chart sets it from the Pod's namespace), without [`HARNESS_FLAGS`].
fn controller_args(deployment: &Value, namespace: &str) -> Result<Vec<String>, Error> {
    let bad = chart_error("the chart's controller container");
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("has no containers".to_string()))?;
    let manager = containers
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some("manager"))
        .ok_or_else(|| Error::Chart {
            what: "the chart's controller Deployment".into(),
            message: "has no container `manager`".into(),
        })?;
    let mut args = Vec::new();
    for arg in manager
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let arg = arg.as_str().ok_or_else(|| Error::Chart {
            what: "the chart's controller arguments".into(),
            message: format!("{arg} is not a string"),
        })?;
        let arg = arg.replace("$(POD_NAMESPACE)", namespace);
        if arg.contains("$(") {
            return Err(Error::Chart {
                what: "the chart's controller arguments".into(),
                message: format!(
                    "{arg} names a variable the harness does not set (only POD_NAMESPACE): \
                     teach tests/src/chart_rbac.rs what the kubelet would put there"
                ),
            });
        }
        if !HARNESS_FLAGS.contains(&flag_name(&arg)) {
            args.push(arg);
        }
    }
    Ok(args)
}

async fn apply(
    client: &Client,
    doc: &Value,
    kind: &str,
    plural: &str,
    namespaced: bool,
) -> Result<(), Error> {
    let name = str_at(doc, "/metadata/name");
    let api_version = str_at(doc, "/apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let api: Api<DynamicObject> = if namespaced {
        let Some(ns) = doc.pointer("/metadata/namespace").and_then(Value::as_str) else {
            return Err(Error::Chart {
                what: format!("the chart's {kind} {name}"),
                message: "has no metadata.namespace".into(),
            });
        };
        Api::namespaced_with(client.clone(), ns, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(doc),
    )
    .await
    .map_err(Error::kube(format!("applying the chart's {kind} {name}")))?;
    Ok(())
}

async fn token(client: &Client, namespace: &str, service_account: &str) -> Result<String, Error> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // Empty: the apiserver's own audience.
            audiences: Vec::new(),
            expiration_seconds: Some(TOKEN_SECONDS),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let issued = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .map_err(Error::kube(format!(
            "requesting a token for ServiceAccount {namespace}/{service_account}"
        )))?;
    issued
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Chart {
            what: format!("the TokenRequest for ServiceAccount {namespace}/{service_account}"),
            message: "answered without a token".into(),
        })
}

async fn client_for(kubeconfig: &Path) -> Result<Client, Error> {
    let bad = |message: String| Error::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        message,
    };
    let parsed = Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    Client::try_from(config).map_err(Error::kube("building the operator's client"))
}

/// The token is the ServiceAccount's (not, say, an anonymous request that passes discovery).
async fn check_authenticates(client: &Client, identity: &Identity) -> Result<(), Error> {
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(Error::kube(format!(
            "asking who the operator's kubeconfig {} authenticates as",
            identity.kubeconfig.display()
        )))?;
    let username = review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default();
    if username != identity.username() {
        return Err(Error::Chart {
            what: format!(
                "the operator's kubeconfig {}",
                identity.kubeconfig.display()
            ),
            message: format!("authenticates as {username:?}, not {}", identity.username()),
        });
    }
    Ok(())
}

/// Wait until the authorizer has seen every rendered binding: the first rule of each bound role
/// is allowed for the ServiceAccount (the operator would otherwise start on a 403 that a real
/// install, whose RBAC is applied before its Pod starts, never sees).
async fn wait_grants_effective(
    cp: &ControlPlane,
    as_operator: &Client,
    rendered: &[Value],
    bindings: &[&Value],
    identity: &Identity,
) -> Result<(), Error> {
    let mut checks = Vec::new();
    for binding in bindings {
        let role_kind = str_at(binding, "/roleRef/kind");
        let role_name = str_at(binding, "/roleRef/name");
        let binding_ns = binding
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        let Some(role) = rendered.iter().find(|d| {
            d.get("kind").and_then(Value::as_str) == Some(role_kind)
                && d.pointer("/metadata/name").and_then(Value::as_str) == Some(role_name)
        }) else {
            return Err(Error::Chart {
                what: format!(
                    "the chart's binding {}",
                    binding
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                ),
                message: format!(
                    "refers to {role_kind} {role_name}, which the chart does not render"
                ),
            });
        };
        let Some(rule) = role.pointer("/rules/0") else {
            continue;
        };
        let first = |field: &str| {
            rule.get(field)
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let resource = first("resources").unwrap_or_default();
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r.to_string(), Some(s.to_string())),
            None => (resource, None),
        };
        checks.push(ResourceAttributes {
            group: first("apiGroups"),
            resource: Some(resource),
            subresource,
            verb: first("verbs"),
            name: first("resourceNames"),
            namespace: binding_ns.map(str::to_string),
            ..Default::default()
        });
    }
    let api = Api::<SelfSubjectAccessReview>::all(as_operator.clone());
    let deadline = tokio::time::Instant::now() + GRANTS_EFFECTIVE_TIMEOUT;
    for attributes in checks {
        loop {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(attributes.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let allowed = api
                .create(&PostParams::default(), &review)
                .await
                .map_err(Error::kube(
                    "asking whether the operator's grants are in effect",
                ))?
                .status
                .is_some_and(|s| s.allowed);
            if allowed {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Chart {
                    what: format!("the chart's RBAC for {}", identity.username()),
                    message: format!(
                        "{attributes:?} is still denied {GRANTS_EFFECTIVE_TIMEOUT:?} after the \
                         bindings were applied; apiserver log in {}",
                        cp.log_dir().display()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}
