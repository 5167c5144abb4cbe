//! A Pod's volumes as host directories, later bind-mounted into each container's mount namespace:
//! PVCs (the bound PV's directory), `emptyDir` (a directory, or a tmpfs mounted on the host for
//! `medium: Memory`, sized by `sizeLimit`), `hostPath`, and the payload kinds (Secret, ConfigMap,
//! downward API, projected with service-account tokens) written the way kubelet's atomic writer
//! does (`..data` symlink swap) and refreshed while the Pod runs. `fsGroup` is applied as kubelet
//! applies it: group ownership, group permission bits and setgid directories.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod,
    Secret, Volume,
};
use kube::api::Api;
use kube::Client;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use serde_json::json;

use super::fields::{self, Allocatable};

/// Default file mode of Secret, ConfigMap, downward API and projected volumes (0644).
const DEFAULT_MODE: u32 = 0o644;
/// Re-mint projected tokens after this share of their lifetime.
const TOKEN_REFRESH_FRACTION: f64 = 0.8;

/// A file of a payload volume: content and mode.
type Payload = BTreeMap<String, (Vec<u8>, u32)>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    EmptyDir,
    Memory,
    Claim,
    HostPath,
    Payload,
}

/// One prepared volume.
#[derive(Clone, Debug)]
pub struct VolumeDir {
    pub path: PathBuf,
    pub kind: Kind,
    /// Mounted read-only whatever the volumeMount says (payload volumes, `readOnly` PVCs).
    pub readonly: bool,
}

/// Everything the Pod's volumes need to be computed.
pub struct Place<'a> {
    pub client: &'a Client,
    pub pod: &'a Pod,
    pub host_ip: &'a str,
    pub pod_ip: Option<&'a str>,
    pub allocatable: Allocatable,
}

/// The volumes of one Pod, under `<pod dir>/volumes/`.
#[derive(Debug)]
pub struct Volumes {
    root: PathBuf,
    pub dirs: BTreeMap<String, VolumeDir>,
    tokens: HashMap<String, (Vec<u8>, Instant, Duration)>,
}

fn fs_group(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok())
}

/// Apply `fsGroup` to `path` and below as kubelet does: group `gid`, `g+rw` (or `g+r` read-only),
/// directories also `g+x` and setgid. Symlinks are left alone.
pub fn apply_fs_group(path: &Path, gid: u32, readonly: bool) -> std::io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, None, Some(gid))?;
    let mask = if readonly { 0o440 } else { 0o660 };
    let mode = meta.mode() & 0o7777;
    let wanted = if meta.is_dir() {
        mode | mask | 0o110 | 0o2000
    } else {
        mode | mask
    };
    if wanted != mode {
        fs::set_permissions(path, fs::Permissions::from_mode(wanted))?;
    }
    if meta.is_dir() {
        for entry in fs::read_dir(path)?.flatten() {
            apply_fs_group(&entry.path(), gid, readonly)?;
        }
    }
    Ok(())
}

/// Relative, without `..`: a payload path or subPath must stay inside its volume.
pub fn safe_relative(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if path.is_empty()
        || p.components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "path {path:?} must be relative and may not contain '..'"
        ));
    }
    Ok(p.to_path_buf())
}

fn project<V: AsRef<[u8]>>(
    kind: &str,
    name: &str,
    data: &BTreeMap<String, V>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: u32,
    optional: bool,
    out: &mut Payload,
) -> Result<(), String> {
    match items {
        None => {
            for (k, v) in data {
                out.insert(k.clone(), (v.as_ref().to_vec(), default_mode));
            }
        }
        Some(items) => {
            for item in items {
                safe_relative(&item.path)?;
                match data.get(&item.key) {
                    Some(v) => {
                        let mode = item
                            .mode
                            .and_then(|m| u32::try_from(m).ok())
                            .unwrap_or(default_mode);
                        out.insert(item.path.clone(), (v.as_ref().to_vec(), mode));
                    }
                    None if optional => {}
                    None => {
                        return Err(format!(
                            "{kind} {name:?} has no key {:?} (named in a volume's items)",
                            item.key
                        ))
                    }
                }
            }
        }
    }
    Ok(())
}

fn mode_of(m: Option<i32>) -> u32 {
    m.and_then(|m| u32::try_from(m).ok())
        .unwrap_or(DEFAULT_MODE)
}

impl Volumes {
    pub fn new(pod_dir: &Path) -> Self {
        Self {
            root: pod_dir.join("volumes"),
            dirs: BTreeMap::new(),
            tokens: HashMap::new(),
        }
    }

    /// Prepare every volume not prepared yet. An error names the volume and what is missing
    /// (an unbound claim, a missing Secret); the caller retries.
    pub async fn set_up(&mut self, place: &Place<'_>) -> Result<(), String> {
        let volumes = place
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        for volume in &volumes {
            if self.dirs.contains_key(&volume.name) {
                continue;
            }
            let dir = self
                .set_up_one(place, volume)
                .await
                .map_err(|e| format!("volume {:?}: {e}", volume.name))?;
            self.dirs.insert(volume.name.clone(), dir);
        }
        Ok(())
    }

    async fn set_up_one(
        &mut self,
        place: &Place<'_>,
        volume: &Volume,
    ) -> Result<VolumeDir, String> {
        let ns = place.pod.metadata.namespace.as_deref().unwrap_or("default");
        let gid = fs_group(place.pod);
        let local = self.root.join(&volume.name);
        let io = |what: &str, path: &Path| {
            let what = format!("{what} {}", path.display());
            move |e: std::io::Error| format!("{what}: {e}")
        };
        if let Some(empty) = &volume.empty_dir {
            fs::create_dir_all(&local).map_err(io("creating", &local))?;
            let memory = empty.medium.as_deref() == Some("Memory");
            if memory && !super::network::mount_points().contains(&local) {
                let mut options = "mode=0777".to_string();
                if let Some(bytes) = empty
                    .size_limit
                    .as_ref()
                    .and_then(|q| fields::parse_quantity(&q.0))
                {
                    options.push_str(&format!(",size={}", bytes.ceil() as u64));
                }
                mount(
                    Some("tmpfs"),
                    &local,
                    Some("tmpfs"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                    Some(options.as_str()),
                )
                .map_err(|e| format!("mounting a tmpfs at {}: {e}", local.display()))?;
            }
            fs::set_permissions(&local, fs::Permissions::from_mode(0o777))
                .map_err(io("chmod", &local))?;
            if let Some(gid) = gid {
                apply_fs_group(&local, gid, false).map_err(io("applying fsGroup to", &local))?;
            }
            return Ok(VolumeDir {
                path: local,
                kind: if memory { Kind::Memory } else { Kind::EmptyDir },
                readonly: false,
            });
        }
        if let Some(claim) = &volume.persistent_volume_claim {
            let pvc = Api::<PersistentVolumeClaim>::namespaced(place.client.clone(), ns)
                .get_opt(&claim.claim_name)
                .await
                .map_err(|e| format!("reading persistentvolumeclaim {:?}: {e}", claim.claim_name))?
                .ok_or_else(|| format!("persistentvolumeclaim {:?} not found", claim.claim_name))?;
            let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            let pv_name = pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|n| bound && !n.is_empty())
                .ok_or_else(|| {
                    format!("persistentvolumeclaim {:?} is not bound", claim.claim_name)
                })?;
            let pv = Api::<PersistentVolume>::all(place.client.clone())
                .get(&pv_name)
                .await
                .map_err(|e| format!("reading persistentvolume {pv_name:?}: {e}"))?;
            let spec = pv.spec.unwrap_or_default();
            let path = spec
                .host_path
                .map(|h| h.path)
                .or_else(|| spec.local.map(|l| l.path))
                .ok_or_else(|| {
                    format!("persistentvolume {pv_name:?} is neither hostPath nor local; the pod runner cannot mount it")
                })?;
            let path = PathBuf::from(path);
            fs::create_dir_all(&path).map_err(io("creating", &path))?;
            let readonly = claim.read_only == Some(true);
            if let Some(gid) = gid {
                apply_fs_group(&path, gid, readonly).map_err(io("applying fsGroup to", &path))?;
            }
            return Ok(VolumeDir {
                path,
                kind: Kind::Claim,
                readonly,
            });
        }
        if let Some(host) = &volume.host_path {
            let path = PathBuf::from(&host.path);
            match host.type_.as_deref().unwrap_or("") {
                "" | "DirectoryOrCreate" => {
                    fs::create_dir_all(&path).map_err(io("creating", &path))?
                }
                "FileOrCreate" => {
                    if !path.exists() {
                        fs::write(&path, b"").map_err(io("creating", &path))?;
                    }
                }
                "Directory" if path.is_dir() => {}
                "File" if path.is_file() => {}
                "Socket" | "CharDevice" | "BlockDevice" if path.exists() => {}
                other => {
                    return Err(format!(
                        "hostPath {} does not exist as type {other:?}",
                        path.display()
                    ))
                }
            }
            return Ok(VolumeDir {
                path,
                kind: Kind::HostPath,
                readonly: false,
            });
        }
        if volume.secret.is_some()
            || volume.config_map.is_some()
            || volume.downward_api.is_some()
            || volume.projected.is_some()
        {
            let payload = self.payload(place, volume).await?;
            write_payload(&local, &payload, gid).map_err(io("writing", &local))?;
            return Ok(VolumeDir {
                path: local,
                kind: Kind::Payload,
                readonly: true,
            });
        }
        Err("this volume type is not supported by the pod runner (supported: persistentVolumeClaim, \
             emptyDir, hostPath, secret, configMap, downwardAPI, projected)"
            .to_string())
    }

    /// Rewrite payload volumes whose source changed (a renewed certificate Secret, a relabelled
    /// Pod). Returns the volumes rewritten; errors are left for the next refresh.
    pub async fn refresh(&mut self, place: &Place<'_>) -> Vec<String> {
        let volumes = place
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let gid = fs_group(place.pod);
        let mut changed = Vec::new();
        for volume in &volumes {
            let Some(dir) = self.dirs.get(&volume.name).cloned() else {
                continue;
            };
            if dir.kind != Kind::Payload {
                continue;
            }
            if let Ok(payload) = self.payload(place, volume).await {
                if write_payload(&dir.path, &payload, gid).unwrap_or(false) {
                    changed.push(volume.name.clone());
                }
            }
        }
        changed
    }

    async fn payload(&mut self, place: &Place<'_>, volume: &Volume) -> Result<Payload, String> {
        let ns = place.pod.metadata.namespace.as_deref().unwrap_or("default");
        let client = place.client;
        let mut out = Payload::new();
        if let Some(s) = &volume.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            self.secret_into(
                client,
                ns,
                &name,
                s.items.as_ref(),
                mode_of(s.default_mode),
                s.optional == Some(true),
                &mut out,
            )
            .await?;
        } else if let Some(c) = &volume.config_map {
            self.config_map_into(
                client,
                ns,
                &c.name,
                c.items.as_ref(),
                mode_of(c.default_mode),
                c.optional == Some(true),
                &mut out,
            )
            .await?;
        } else if let Some(d) = &volume.downward_api {
            downward_into(
                place,
                d.items.iter().flatten(),
                mode_of(d.default_mode),
                &mut out,
            )?;
        } else if let Some(p) = &volume.projected {
            let default_mode = mode_of(p.default_mode);
            for source in p.sources.iter().flatten() {
                if let Some(s) = &source.secret {
                    self.secret_into(
                        client,
                        ns,
                        &s.name,
                        s.items.as_ref(),
                        default_mode,
                        s.optional == Some(true),
                        &mut out,
                    )
                    .await?;
                }
                if let Some(c) = &source.config_map {
                    self.config_map_into(
                        client,
                        ns,
                        &c.name,
                        c.items.as_ref(),
                        default_mode,
                        c.optional == Some(true),
                        &mut out,
                    )
                    .await?;
                }
                if let Some(d) = &source.downward_api {
                    downward_into(place, d.items.iter().flatten(), default_mode, &mut out)?;
                }
                if let Some(t) = &source.service_account_token {
                    safe_relative(&t.path)?;
                    let token = self
                        .token(place, t.audience.as_deref(), t.expiration_seconds)
                        .await?;
                    out.insert(t.path.clone(), (token, default_mode));
                }
                if source.cluster_trust_bundle.is_some() {
                    return Err(
                        "projected clusterTrustBundle sources are not supported by the pod runner"
                            .into(),
                    );
                }
            }
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    async fn secret_into(
        &self,
        client: &Client,
        ns: &str,
        name: &str,
        items: Option<&Vec<KeyToPath>>,
        mode: u32,
        optional: bool,
        out: &mut Payload,
    ) -> Result<(), String> {
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(|e| format!("reading secret {name:?}: {e}"))?;
        match secret {
            Some(secret) => {
                let data: BTreeMap<String, Vec<u8>> = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                project("secret", name, &data, items, mode, optional, out)
            }
            None if optional => Ok(()),
            None => Err(format!("secret {name:?} not found")),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn config_map_into(
        &self,
        client: &Client,
        ns: &str,
        name: &str,
        items: Option<&Vec<KeyToPath>>,
        mode: u32,
        optional: bool,
        out: &mut Payload,
    ) -> Result<(), String> {
        let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(|e| format!("reading configmap {name:?}: {e}"))?;
        match cm {
            Some(cm) => {
                let mut data: BTreeMap<String, Vec<u8>> = cm
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                for (k, v) in cm.binary_data.unwrap_or_default() {
                    data.insert(k, v.0);
                }
                project("configmap", name, &data, items, mode, optional, out)
            }
            None if optional => Ok(()),
            None => Err(format!("configmap {name:?} not found")),
        }
    }

    /// A bound service-account token for the Pod (TokenRequest), reused until most of its
    /// lifetime has passed.
    async fn token(
        &mut self,
        place: &Place<'_>,
        audience: Option<&str>,
        expiration: Option<i64>,
    ) -> Result<Vec<u8>, String> {
        let key = format!("{}|{:?}", audience.unwrap_or(""), expiration);
        if let Some((token, minted, lifetime)) = self.tokens.get(&key) {
            if minted.elapsed().as_secs_f64() < lifetime.as_secs_f64() * TOKEN_REFRESH_FRACTION {
                return Ok(token.clone());
            }
        }
        let pod = place.pod;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".to_string());
        let seconds = expiration.unwrap_or(3607).max(600);
        let mut spec = json!({
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "apiVersion": "v1", "kind": "Pod",
                "name": pod.metadata.name, "uid": pod.metadata.uid,
            },
        });
        if let Some(a) = audience.filter(|a| !a.is_empty()) {
            spec["audiences"] = json!([a]);
        }
        let body = serde_json::to_vec(&json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": spec,
        }))
        .map_err(|e| e.to_string())?;
        let request = http::Request::post(format!(
            "/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"
        ))
        .header("content-type", "application/json")
        .body(body)
        .map_err(|e| e.to_string())?;
        let answer: TokenRequest = place
            .client
            .request(request)
            .await
            .map_err(|e| format!("requesting a token for serviceaccount {ns}/{sa}: {e}"))?;
        let token = answer.status.map(|s| s.token.into_bytes()).ok_or_else(|| {
            format!("the token request for serviceaccount {ns}/{sa} returned no token")
        })?;
        let lifetime = Duration::from_secs(u64::try_from(seconds).unwrap_or(3600));
        self.tokens
            .insert(key, (token.clone(), Instant::now(), lifetime));
        Ok(token)
    }

    /// Unmount tmpfs volumes (the rest is removed with the Pod directory).
    pub fn tear_down(&mut self) {
        for dir in self.dirs.values() {
            if dir.kind == Kind::Memory {
                let _ = umount2(&dir.path, MntFlags::MNT_DETACH);
            }
        }
        super::network::unmount_under(&self.root);
        self.dirs.clear();
    }
}

fn downward_into<'a>(
    place: &Place<'_>,
    items: impl Iterator<Item = &'a DownwardAPIVolumeFile>,
    default_mode: u32,
    out: &mut Payload,
) -> Result<(), String> {
    for item in items {
        safe_relative(&item.path)?;
        let value = if let Some(f) = &item.field_ref {
            fields::field_ref(place.pod, &f.field_path, place.host_ip, place.pod_ip)?
        } else if let Some(r) = &item.resource_field_ref {
            let containers = place
                .pod
                .spec
                .as_ref()
                .map(|s| s.containers.clone())
                .unwrap_or_default();
            let name = r.container_name.clone().unwrap_or_default();
            let container = containers
                .iter()
                .find(|c| c.name == name)
                .ok_or_else(|| format!("resourceFieldRef names unknown container {name:?}"))?;
            fields::resource_field_ref(
                container,
                &r.resource,
                r.divisor.as_ref(),
                place.allocatable,
            )?
        } else {
            return Err(format!(
                "downward API item {:?} has neither fieldRef nor resourceFieldRef",
                item.path
            ));
        };
        let mode = item
            .mode
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(default_mode);
        out.insert(item.path.clone(), (value.into_bytes(), mode));
    }
    Ok(())
}

fn payload_matches(dir: &Path, payload: &Payload) -> bool {
    fn count_files(dir: &Path) -> usize {
        fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| {
                        if e.file_type().is_ok_and(|t| t.is_dir()) {
                            count_files(&e.path())
                        } else {
                            1
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    payload.iter().all(|(rel, (bytes, mode))| {
        let path = dir.join(rel);
        fs::read(&path).is_ok_and(|b| b == *bytes)
            && fs::metadata(&path).is_ok_and(|m| m.mode() & 0o777 & mode == *mode & 0o777)
    }) && count_files(dir) == payload.len()
}

/// Kubelet's atomic writer: the files go into a fresh timestamped directory, `..data` is swapped
/// to it by rename, and each top-level name is a symlink through `..data`. Returns whether
/// anything changed.
pub fn write_payload(dir: &Path, payload: &Payload, gid: Option<u32>) -> std::io::Result<bool> {
    fs::create_dir_all(dir)?;
    let data_link = dir.join("..data");
    let current = fs::read_link(&data_link).ok().map(|t| dir.join(t));
    if let Some(current) = &current {
        if payload_matches(current, payload) {
            return Ok(false);
        }
    }
    let stamp = k8s_openapi::jiff::Timestamp::now();
    let ts_name = format!(
        "..{}.{:09}",
        stamp.strftime("%Y_%m_%d_%H_%M_%S"),
        stamp.subsec_nanosecond()
    );
    let ts_dir = dir.join(&ts_name);
    fs::create_dir_all(&ts_dir)?;
    fs::set_permissions(&ts_dir, fs::Permissions::from_mode(0o755))?;
    for (rel, (bytes, mode)) in payload {
        let path = ts_dir.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, bytes)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o7777))?;
    }
    if let Some(gid) = gid {
        apply_fs_group(&ts_dir, gid, true)?;
    }
    let tmp_link = dir.join("..data_tmp");
    let _ = fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&ts_name, &tmp_link)?;
    fs::rename(&tmp_link, &data_link)?;
    let tops: std::collections::BTreeSet<String> = payload
        .keys()
        .filter_map(|rel| rel.split('/').next().map(str::to_string))
        .collect();
    for top in &tops {
        let link = dir.join(top);
        if fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(top), &link)?;
        }
    }
    for entry in fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") {
            if name != "..data" && name != ts_name {
                let _ = fs::remove_dir_all(entry.path());
            }
        } else if !tops.contains(&name) {
            let _ = fs::remove_file(entry.path());
        }
    }
    if let Some(gid) = gid {
        std::os::unix::fs::lchown(dir, None, Some(gid))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(items: &[(&str, &str)]) -> Payload {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), (v.as_bytes().to_vec(), 0o644)))
            .collect()
    }

    #[test]
    fn atomic_writer_swaps_data_and_prunes_old_keys() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("v");
        assert!(write_payload(&vol, &payload(&[("tls.crt", "a"), ("sub/x", "1")]), None).unwrap());
        assert_eq!(fs::read_to_string(vol.join("tls.crt")).unwrap(), "a");
        assert_eq!(fs::read_to_string(vol.join("sub/x")).unwrap(), "1");
        assert!(!write_payload(&vol, &payload(&[("tls.crt", "a"), ("sub/x", "1")]), None).unwrap());
        assert!(write_payload(&vol, &payload(&[("tls.crt", "b")]), None).unwrap());
        assert_eq!(fs::read_to_string(vol.join("tls.crt")).unwrap(), "b");
        assert!(!vol.join("sub").exists());
        let dotted: Vec<_> = fs::read_dir(&vol)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".."))
            .collect();
        assert_eq!(dotted.len(), 2, "{dotted:?}");
    }

    #[test]
    fn fs_group_sets_group_bits_and_setgid_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        fs::create_dir(&data).unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(data.join("f"), "x").unwrap();
        fs::set_permissions(data.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
        apply_fs_group(&data, 4242, false).unwrap();
        let d = fs::metadata(&data).unwrap();
        assert_eq!(d.gid(), 4242);
        assert_eq!(d.mode() & 0o7777, 0o2775);
        let f = fs::metadata(data.join("f")).unwrap();
        assert_eq!(f.mode() & 0o777, 0o660);
    }

    #[test]
    fn relative_paths_stay_inside() {
        assert!(safe_relative("a/b").is_ok());
        assert!(safe_relative("../a").is_err());
        assert!(safe_relative("/etc/passwd").is_err());
        assert!(safe_relative("").is_err());
    }
}
