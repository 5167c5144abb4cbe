//! Dynamic provisioning for the runner's StorageClasses, the way an external provisioner does it:
//! a pending PVC of a class gets a PV (a `hostPath` directory, or a `local` one for a local class)
//! pre-bound to it through `claimRef`; kube-controller-manager's PV binder completes the binding.
//! [`serve`] runs the classes' provisioners (the pod runner's and the real node's). A Released PV is
//! deleted with its directory (reclaim policy Delete). A bound claim whose request grows past its
//! capacity is expanded online, as external-resizer and the kubelet do it together: a sized
//! volume's tmpfs is remounted with the new size (the running Pod's bind mount sees it at once),
//! then the PV's `spec.capacity` and the claim's `status.capacity` record it.
//!
//! Two classes: the default one, whose directories live under the control plane's root (so they
//! outlive runner restarts) and share the host's free space; and the *sized* one, whose volumes
//! are tmpfs mounts of exactly the requested size, so a Pod sees the capacity it asked for
//! (`df`, ENOSPC, a restore's free-space pre-flight). Sized volumes live under the runner's slot
//! directory and last as long as the runner (the slot sweep unmounts them).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use kube_runtime::reflector::Store;
use serde_json::json;

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::Error;

pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// The class and where its volumes live.
#[derive(Clone, Debug)]
pub struct Provisioner {
    pub class: String,
    pub provisioner: String,
    pub root: PathBuf,
    /// Volumes are tmpfs mounts of the claim's requested size (the sized class).
    pub sized: bool,
    /// The default class of the cluster.
    pub default: bool,
    /// Volumes belong to one Node (`WaitForFirstConsumer`; the PV's node affinity names the
    /// Node the scheduler chose, from the claim's `volume.kubernetes.io/selected-node`).
    pub local: bool,
}

impl Provisioner {
    pub fn pv_dir(&self, pv_name: &str) -> PathBuf {
        self.root.join(pv_name)
    }

    /// Create the default StorageClass (or replace one left by an earlier runner).
    pub async fn install_class(&self, client: &Client) -> Result<(), Error> {
        let api = Api::<StorageClass>::all(client.clone());
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {
                "name": self.class,
                "annotations": {DEFAULT_CLASS_ANNOTATION: if self.default { "true" } else { "false" }},
            },
            "provisioner": self.provisioner,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": if self.local { "WaitForFirstConsumer" } else { "Immediate" },
            "allowVolumeExpansion": true,
        }))
        .map_err(|e| Error::Unsupported(format!("building StorageClass: {e}")))?;
        match api.create(&PostParams::default(), &class).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(Error::kube(format!("creating StorageClass {}", self.class))(e)),
        }
    }

    /// One pass: provision every pending claim of the class, delete every released volume of
    /// ours. Errors are left for the next pass.
    pub async fn reconcile(
        &self,
        client: &Client,
        claims: &Store<PersistentVolumeClaim>,
        volumes: &Store<PersistentVolume>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let pv_api = Api::<PersistentVolume>::all(client.clone());
        let existing: Vec<Arc<PersistentVolume>> = volumes.state();
        for pvc in claims.state() {
            if !self.wants(&pvc) {
                continue;
            }
            let Some(uid) = pvc.metadata.uid.clone() else {
                continue;
            };
            let name = format!("pvc-{uid}");
            if existing
                .iter()
                .any(|pv| pv.metadata.name.as_deref() == Some(name.as_str()))
            {
                continue;
            }
            if let Err(e) = self.provision(&pv_api, &pvc, &name).await {
                problems.push(e.to_string());
            }
        }
        for pvc in claims.state() {
            if let Err(e) = self.expand(client, &pvc, &existing).await {
                problems.push(e.to_string());
            }
        }
        for pv in existing {
            let ours = self.provisioned(&pv);
            let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
            if !ours || !released || pv.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(name) = pv.metadata.name.clone() else {
                continue;
            };
            if let Some(path) = pv.spec.as_ref().and_then(|s| {
                s.host_path
                    .as_ref()
                    .map(|h| PathBuf::from(&h.path))
                    .or_else(|| s.local.as_ref().map(|l| PathBuf::from(&l.path)))
            }) {
                if path.starts_with(&self.root) {
                    if self.sized {
                        let _ = umount2(&path, MntFlags::MNT_DETACH);
                    }
                    let _ = fs::remove_dir_all(&path);
                }
            }
            match pv_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => problems.push(format!("deleting released PV {name}: {e}")),
            }
        }
        problems
    }

    fn wants(&self, pvc: &PersistentVolumeClaim) -> bool {
        let Some(spec) = &pvc.spec else { return false };
        let pending = pvc
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_none_or(|p| p == "Pending");
        let placed = !self.local || selected_node(pvc).is_some();
        pending
            && placed
            && pvc.metadata.deletion_timestamp.is_none()
            && spec.volume_name.as_deref().unwrap_or("").is_empty()
            && spec.storage_class_name.as_deref() == Some(self.class.as_str())
    }

    /// Whether this class's provisioner made `pv`.
    fn provisioned(&self, pv: &PersistentVolume) -> bool {
        pv.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROVISIONED_BY))
            .is_some_and(|p| *p == self.provisioner)
    }

    /// Grow the volume of a bound claim of the class whose request exceeds its capacity.
    async fn expand(
        &self,
        client: &Client,
        pvc: &PersistentVolumeClaim,
        volumes: &[Arc<PersistentVolume>],
    ) -> Result<(), Error> {
        let Some(spec) = &pvc.spec else { return Ok(()) };
        let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        if !bound || spec.storage_class_name.as_deref() != Some(self.class.as_str()) {
            return Ok(());
        }
        let Some(requested) = storage(spec.resources.as_ref().and_then(|r| r.requests.as_ref()))
        else {
            return Ok(());
        };
        let capacity = storage(pvc.status.as_ref().and_then(|s| s.capacity.as_ref()));
        let bytes = |q: &str| super::fields::parse_quantity(q).unwrap_or(0.0);
        if capacity
            .as_deref()
            .is_some_and(|c| bytes(c) >= bytes(&requested))
        {
            return Ok(());
        }
        let Some(pv) = spec.volume_name.as_deref().and_then(|name| {
            volumes
                .iter()
                .find(|pv| pv.metadata.name.as_deref() == Some(name))
        }) else {
            return Ok(());
        };
        let Some(pv_name) = pv.metadata.name.clone().filter(|_| self.provisioned(pv)) else {
            return Ok(());
        };
        let pv_capacity = storage(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()));
        if pv_capacity
            .as_deref()
            .is_none_or(|c| bytes(c) < bytes(&requested))
        {
            if self.sized {
                resize_sized(&self.pv_dir(&pv_name), &requested)?;
            }
            let patch = json!({"spec": {"capacity": {"storage": requested}}});
            Api::<PersistentVolume>::all(client.clone())
                .patch(&pv_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::kube(format!(
                    "recording PV {pv_name}'s new capacity"
                )))?;
        }
        let (Some(ns), Some(name)) = (&pvc.metadata.namespace, &pvc.metadata.name) else {
            return Ok(());
        };
        let patch = json!({"status": {"capacity": {"storage": requested}}});
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube(format!(
                "recording PVC {ns}/{name}'s new capacity"
            )))?;
        Ok(())
    }

    async fn provision(
        &self,
        api: &Api<PersistentVolume>,
        pvc: &PersistentVolumeClaim,
        name: &str,
    ) -> Result<(), Error> {
        let spec = pvc.spec.clone().unwrap_or_default();
        let storage = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "1Gi".to_string());
        let dir = self.pv_dir(name);
        // Like a freshly formatted filesystem: root-owned 0755, so non-root Pods need fsGroup.
        fs::create_dir_all(&dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        if self.sized {
            mount_sized(&dir, &storage)?;
        }
        let node_affinity = selected_node(pvc).filter(|_| self.local).map(|node| {
            json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
            ]}]}})
        });
        let mut pv: serde_json::Value = json!({
            "metadata": {
                "name": name,
                "annotations": {PROVISIONED_BY: self.provisioner},
            },
            "spec": {
                "capacity": {"storage": storage},
                "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": self.class,
                "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": pvc.metadata.namespace,
                    "name": pvc.metadata.name,
                    "uid": pvc.metadata.uid,
                },
            },
        });
        // A local class makes `local` volumes, whose Pods a kubelet gives their fsGroup, as a
        // local-PV provisioner does; the others `hostPath` ones.
        if self.local {
            pv["spec"]["local"] = json!({"path": dir});
        } else {
            pv["spec"]["hostPath"] = json!({"path": dir, "type": "DirectoryOrCreate"});
        }
        if let Some(affinity) = node_affinity {
            pv["spec"]["nodeAffinity"] = affinity;
        }
        let pv: PersistentVolume = serde_json::from_value(pv)
            .map_err(|e| Error::Unsupported(format!("building PV {name}: {e}")))?;
        match api.create(&PostParams::default(), &pv).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(Error::kube(format!("creating PV {name}"))(e)),
        }
    }
}

/// Provision for `provisioners` until dropped: every change of a claim or a volume, and every 5 s,
/// runs each one's [`Provisioner::reconcile`]; what goes wrong goes to `report` and is retried.
pub async fn serve(client: Client, provisioners: Vec<Provisioner>, report: impl Fn(&str)) {
    let (claims, claims_writer) = kube_runtime::reflector::store::<PersistentVolumeClaim>();
    let (volumes, volumes_writer) = kube_runtime::reflector::store::<PersistentVolume>();
    let events = futures::stream::select(
        super::reflected(&client, claims_writer),
        super::reflected(&client, volumes_writer),
    );
    futures::pin_mut!(events);
    let mut dirty = false;
    loop {
        tokio::select! {
            event = events.next() => {
                match event {
                    None => return,
                    Some(Ok(())) => dirty = true,
                    Some(Err(e)) => report(&format!("pv/pvc watch: {e}")),
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(100)), if dirty => {
                dirty = false;
                for provisioner in &provisioners {
                    for problem in provisioner.reconcile(&client, &claims, &volumes).await {
                        report(&problem);
                    }
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(5)) => dirty = true,
        }
    }
}

/// The `storage` entry of a requests or capacity map.
fn storage(m: Option<&BTreeMap<String, Quantity>>) -> Option<String> {
    m.and_then(|m| m.get("storage")).map(|q| q.0.clone())
}

/// The Node the scheduler chose for a `WaitForFirstConsumer` claim.
fn selected_node(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.metadata
        .annotations
        .as_ref()?
        .get("volume.kubernetes.io/selected-node")
        .cloned()
}

/// Mount a tmpfs of `size` (a quantity) on `dir`, unless one is there already (a provision
/// retried after a failed PV create).
fn mount_sized(dir: &Path, size: &str) -> Result<(), Error> {
    if super::network::mount_points().iter().any(|p| p == dir) {
        return Ok(());
    }
    let bytes = sized_bytes(size)?;
    let options = format!("mode=0755,size={bytes}");
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(|e| Error::Unsupported(format!("mounting a tmpfs at {}: {e}", dir.display())))
}

/// A sized volume's size in bytes, from the claim's request.
fn sized_bytes(size: &str) -> Result<u64, Error> {
    super::fields::parse_quantity(size)
        .filter(|b| *b > 0.0)
        .map(|b| b.ceil() as u64)
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "the sized StorageClass needs a positive storage request, not {size:?}"
            ))
        })
}

/// Grow the tmpfs on `dir` to `size` in place (what a filesystem resize does to a mounted volume:
/// the data stays, every bind mount of it sees the new size).
fn resize_sized(dir: &Path, size: &str) -> Result<(), Error> {
    let bytes = sized_bytes(size)?;
    let options = format!("size={bytes}");
    mount(
        None::<&str>,
        dir,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(|e| Error::Unsupported(format!("resizing the tmpfs at {}: {e}", dir.display())))
}

/// Remove everything inside `dir`, keeping the directory itself (a wiped disk).
pub fn wipe_dir(dir: &Path) -> Result<(), Error> {
    let entries = fs::read_dir(dir).map_err(Error::io(format!("reading {}", dir.display())))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(Error::io(format!("removing {}", path.display())))?;
    }
    Ok(())
}
