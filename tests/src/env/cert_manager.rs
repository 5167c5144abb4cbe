//! Real cert-manager (its controller and cainjector, built by `tools/testbins/build.sh` from the
//! release the `cert-manager` part names) running as host processes against a test control plane.
//!
//! What is installed: the same release's CRDs (the `cert-manager-crds` part), then the two
//! binaries with the control plane's admin kubeconfig. What is not: cert-manager's own webhook
//! (its defaulting and validation of cert-manager objects; the apiserver's CRD schemas still
//! apply), RBAC (the admin identity is `system:masters`), and the issuers that reach outside the
//! machine (ACME, Vault, Venafi controllers are disabled), so nothing here needs the network or
//! root.
//!
//! Owns the two processes; the control plane, its CRDs and anything the tests create stay the
//! caller's.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use super::control_plane::{wait_until, ControlPlane};
use super::process::Process;
use super::testbins::{Testbins, CERT_MANAGER, CERT_MANAGER_CRDS};
use super::Error;

/// Where cert-manager keeps what cluster-scoped issuers refer to (`--cluster-resource-namespace`)
/// and where the readiness Issuer lives. Exists in every cluster (the apiserver creates it).
pub const CLUSTER_RESOURCE_NAMESPACE: &str = "kube-system";

/// The self-signed Issuer [`CertManager::start`] waits on, in [`CLUSTER_RESOURCE_NAMESPACE`].
pub const READINESS_ISSUER: &str = "cert-manager-readiness";

/// The controllers the controller runs: its defaults without the ones that talk to servers
/// outside the cluster (ACME orders and challenges, the ACME, Vault and Venafi signers).
pub const CONTROLLERS: &str = "*,-orders,-challenges,-certificaterequests-issuer-acme,\
                               -certificaterequests-issuer-vault,-certificaterequests-issuer-venafi";

/// How long the controller gets to mark the readiness Issuer Ready (it starts its informers and
/// caches first; a few seconds on an idle machine).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// cert-manager.io/v1, the only version the release's CRDs serve.
pub fn api_resource(kind: &str) -> ApiResource {
    let plural = format!("{}s", kind.to_ascii_lowercase());
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", kind),
        &plural,
    )
}

/// Start `cmd` as `name`, logging to `<name>.log` beside the control plane's logs.
fn spawn(cp: &ControlPlane, name: &str, cmd: Command) -> Result<Process, Error> {
    Process::spawn(name, cmd, &cp.log_dir().join(format!("{name}.log")))
}

/// A running cert-manager. Dropping it stops both processes.
pub struct CertManager {
    controller: Process,
    cainjector: Process,
    version: Option<String>,
}

crate::debug_fields!(CertManager, |c| {
    "version": c.version,
    "controller": c.controller,
    "cainjector": c.cainjector,
});

impl Drop for CertManager {
    fn drop(&mut self) {
        self.cainjector.kill();
        self.controller.kill();
    }
}

impl CertManager {
    /// Install the cert-manager CRDs into `cp` (waiting until they are Established), start the
    /// controller and the cainjector, and return once the controller has made a self-signed
    /// Issuer Ready.
    pub async fn start(cp: &ControlPlane) -> Result<CertManager, Error> {
        let began = Instant::now();
        let testbins = cp.testbins();
        let controller_bin = testbins.binary(CERT_MANAGER, "controller")?;
        let cainjector_bin = testbins.binary(CERT_MANAGER, "cainjector")?;
        let crds = crds(testbins)?;
        cp.install_crds(crds).await?;
        ensure_namespace(cp, CLUSTER_RESOURCE_NAMESPACE).await?;

        let kubeconfig = cp.kubeconfig().display().to_string();
        let mut cmd = Command::new(&controller_bin);
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--leader-elect=false")
            .arg(format!(
                "--cluster-resource-namespace={CLUSTER_RESOURCE_NAMESPACE}"
            ))
            .arg(format!("--controllers={CONTROLLERS}"))
            // Its only listener; port 0 lets the kernel pick, so there is no race for a port.
            .arg("--metrics-listen-address=127.0.0.1:0")
            .arg("--enable-profiling=false");
        let controller = spawn(cp, "cert-manager-controller", cmd)?;

        // The cainjector opens no listener: metrics are off in its code ("0") and so is pprof.
        let mut cmd = Command::new(&cainjector_bin);
        cmd.arg(format!("--kubeconfig={kubeconfig}"))
            .arg("--leader-elect=false")
            .arg("--enable-profiling=false");
        let cainjector = spawn(cp, "cert-manager-cainjector", cmd)?;

        let cm = CertManager {
            controller,
            cainjector,
            version: testbins.version(CERT_MANAGER),
        };
        cm.wait_ready(cp).await?;
        // Straight to stderr, past the test harness's capture, as the control plane does.
        let _ = writeln!(
            std::io::stderr(),
            "cert-manager {} started in {:.1?}; logs {} and {}",
            cm.version().unwrap_or("(unknown version)"),
            began.elapsed(),
            cm.controller.log().display(),
            cm.cainjector.log().display()
        );
        Ok(cm)
    }

    /// A self-signed Issuer needs nothing but the issuers controller and its caches, so its Ready
    /// condition shows the controller is connected and working.
    async fn wait_ready(&self, cp: &ControlPlane) -> Result<(), Error> {
        let api = Api::<DynamicObject>::namespaced_with(
            cp.client()?,
            CLUSTER_RESOURCE_NAMESPACE,
            &api_resource("Issuer"),
        );
        let mut issuer = DynamicObject::new(READINESS_ISSUER, &api_resource("Issuer"))
            .within(CLUSTER_RESOURCE_NAMESPACE);
        issuer.data = json!({"spec": {"selfSigned": {}}});
        match api.create(&PostParams::default(), &issuer).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => {
                return Err(Error::kube(format!(
                    "creating Issuer {CLUSTER_RESOURCE_NAMESPACE}/{READINESS_ISSUER}"
                ))(e))
            }
        }
        let mut watched: Vec<&Process> = cp.processes().iter().collect();
        watched.extend([&self.controller, &self.cainjector]);
        wait_until(
            &format!(
                "cert-manager's controller to mark the self-signed Issuer \
                 {CLUSTER_RESOURCE_NAMESPACE}/{READINESS_ISSUER} Ready"
            ),
            READY_TIMEOUT,
            &watched,
            cp.log_dir(),
            || {
                let api = api.clone();
                async move {
                    let issuer = api.get(READINESS_ISSUER).await.map_err(|e| e.to_string())?;
                    Ok(condition_true(&issuer, "Ready").then_some(()))
                }
            },
        )
        .await
    }

    /// Stop the controller and the cainjector (SIGTERM, SIGKILL after 10 s), as an outage of
    /// cert-manager's Deployments: nothing is issued or renewed, the Secrets it issued stay.
    pub async fn stop(&self) {
        let grace = Duration::from_secs(10);
        self.cainjector.stop(grace).await;
        self.controller.stop(grace).await;
    }

    /// Start both again with the same flags and wait until the controller has the readiness
    /// Issuer Ready again (it has resynced its caches and acts).
    pub async fn start_again(&self, cp: &ControlPlane) -> Result<(), Error> {
        // The Issuer kept its Ready condition from before the stop: made anew, it proves the new
        // controller is working.
        let api = Api::<DynamicObject>::namespaced_with(
            cp.client()?,
            CLUSTER_RESOURCE_NAMESPACE,
            &api_resource("Issuer"),
        );
        match api.delete(READINESS_ISSUER, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(Error::kube(format!(
                    "deleting Issuer {CLUSTER_RESOURCE_NAMESPACE}/{READINESS_ISSUER}"
                ))(e))
            }
        }
        self.controller.start_again()?;
        self.cainjector.start_again()?;
        self.wait_ready(cp).await
    }

    /// The release running (`v1.11.5`), as recorded by the build.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    pub fn controller(&self) -> &Process {
        &self.controller
    }

    pub fn cainjector(&self) -> &Process {
        &self.cainjector
    }

    /// An error naming whichever of the two has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        self.controller
            .check_running("while the tests were running")?;
        self.cainjector
            .check_running("while the tests were running")
    }
}

/// Whether a cert-manager object's `status.conditions` has `type` with status `True`.
pub fn condition_true(object: &DynamicObject, type_: &str) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// The release's CRDs, read from the `cert-manager-crds` part, ready to install: a conversion
/// webhook (which would point at cert-manager's webhook Service, not run here) is replaced by
/// `None`. The release serves only `v1`, so nothing needs converting; v1.11.5's files declare no
/// conversion at all, and this keeps it so should a bumped release add one.
pub fn crds(testbins: &Testbins) -> Result<Vec<CustomResourceDefinition>, Error> {
    let dir = testbins.part_dir(CERT_MANAGER_CRDS)?;
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .map_err(Error::io(format!("listing {}", dir.display())))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::Unsupported(format!(
            "no CRD files in {}: run `make testbins`",
            dir.display()
        )));
    }
    files.iter().map(|path| read_crd(path)).collect()
}

fn read_crd(path: &Path) -> Result<CustomResourceDefinition, Error> {
    let text =
        fs::read_to_string(path).map_err(Error::io(format!("reading {}", path.display())))?;
    let mut crd: CustomResourceDefinition = yaml_serde::from_str(&text).map_err(|e| {
        Error::Unsupported(format!(
            "{} is not a CustomResourceDefinition: {e}",
            path.display()
        ))
    })?;
    if crd
        .spec
        .conversion
        .as_ref()
        .is_some_and(|c| c.strategy == "Webhook")
    {
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: "None".into(),
            webhook: None,
        });
    }
    Ok(crd)
}

async fn ensure_namespace(cp: &ControlPlane, name: &str) -> Result<(), Error> {
    let api = Api::<Namespace>::all(cp.client()?);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(Error::kube(format!("creating namespace {name}"))(e)),
    }
}
