//! The v1alpha1 EtcdCluster's spec translated to ours (replicas, image and version, storage,
//! etcd options), each refusal naming the field, its value and the fix. Pure: it reads only the
//! JSON it is given and decides nothing about adoption (that is `build`'s).

use api::v1alpha2::{AutoCompactionMode, EtcdClusterSpec, EtcdOptions, StorageSpec};
use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::AENIX_DEFAULT_IMAGE;

/// The spec of the v1alpha1 EtcdCluster translated to ours; each error names the field, its value
/// and the fix.
pub fn translate_spec(legacy: &Value) -> Result<EtcdClusterSpec, Vec<String>> {
    let spec = &legacy["spec"];
    let mut errors = Vec::new();
    let replicas = match &spec["replicas"] {
        Value::Null => 3,
        v => match v.as_i64().and_then(|r| i32::try_from(r).ok()) {
            Some(r) if r >= 1 => r,
            _ => {
                errors.push(format!(
                    "spec.replicas is {v}: a running cluster to adopt has at least 1 replica"
                ));
                0
            }
        },
    };
    let pod_spec = &spec["podTemplate"]["spec"];
    let etcd_container = pod_spec["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "etcd"));
    let image = etcd_container
        .and_then(|c| c["image"].as_str())
        .unwrap_or(AENIX_DEFAULT_IMAGE);
    let version = match version_of_image(image) {
        Some(v) => v,
        None => {
            errors.push(format!(
                "spec.podTemplate.spec.containers[etcd].image is {image:?}: its tag is not an etcd \
                 version (vX.Y.Z); set the image to the etcd release the Pods run, e.g. \
                 quay.io/coreos/etcd:v3.5.12"
            ));
            String::new()
        }
    };
    let storage = translate_storage(&spec["storage"], &mut errors);
    let options = translate_options(&spec["options"], &mut errors);
    if spec["security"]["tls"].as_object().is_some_and(|t| {
        t.values()
            .any(|v| v.as_str().is_some_and(|s| !s.is_empty()))
    }) {
        errors.push(
            "spec.security.tls is set: clusters with TLS Secrets are not adopted in place by this \
             version; migrate through a snapshot and restore instead"
                .into(),
        );
    }
    if spec["security"]["enableAuth"] == Value::Bool(true) {
        errors.push(
            "spec.security.enableAuth is true: etcd auth is not adopted by this version; disable \
             auth (etcdctl auth disable) first, or migrate through a snapshot and restore"
                .into(),
        );
    }
    let resources = etcd_container.and_then(|c| typed::<ResourceRequirements>(&c["resources"]));
    let affinity = typed::<Affinity>(&pod_spec["affinity"]);
    let topology_spread_constraints =
        typed(&pod_spec["topologySpreadConstraints"]).unwrap_or_default();
    let image_pull_secrets = typed(&pod_spec["imagePullSecrets"]).unwrap_or_default();
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(EtcdClusterSpec {
        replicas,
        version,
        storage,
        resources,
        affinity,
        topology_spread_constraints,
        image_pull_secrets,
        options,
        ..EtcdClusterSpec::default()
    })
}

fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    (!v.is_null())
        .then(|| serde_json::from_value(v.clone()).ok())
        .flatten()
}

/// `3.5.12` from `quay.io/coreos/etcd:v3.5.12` (a digest after `@` is ignored).
pub fn version_of_image(image: &str) -> Option<String> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let (repo, tag) = without_digest.rsplit_once(':')?;
    if repo.is_empty() || tag.contains('/') {
        return None;
    }
    let version = tag.strip_prefix('v').unwrap_or(tag);
    let parts: Vec<&str> = version.split('.').collect();
    (parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())))
    .then(|| version.to_string())
}

fn translate_storage(storage: &Value, errors: &mut Vec<String>) -> StorageSpec {
    if !storage["emptyDir"].is_null() {
        errors.push(
            "spec.storage.emptyDir is set: the members keep their data in emptyDir volumes, which \
             no EtcdMember can own; only clusters with spec.storage.volumeClaimTemplate are \
             adopted in place"
                .into(),
        );
        return StorageSpec::default();
    }
    let claim = &storage["volumeClaimTemplate"]["spec"];
    let size = match claim["resources"]["requests"]["storage"].as_str() {
        Some(s) if !s.is_empty() => Quantity(s.to_string()),
        _ => {
            errors.push(
                "spec.storage.volumeClaimTemplate.spec.resources.requests.storage is not set: the \
                 size of the members' PVCs is needed for members created later; set it to the \
                 size of the existing PVCs"
                    .into(),
            );
            Quantity::default()
        }
    };
    StorageSpec {
        size,
        storage_class_name: claim["storageClassName"].as_str().map(str::to_string),
        ..StorageSpec::default()
    }
}

fn translate_options(options: &Value, errors: &mut Vec<String>) -> Option<EtcdOptions> {
    let map = options.as_object()?;
    let mut out = EtcdOptions::default();
    for (key, value) in map {
        let text = value
            .as_str()
            .map(str::to_string)
            .unwrap_or(value.to_string());
        let bad = |errors: &mut Vec<String>| {
            errors.push(format!(
                "spec.options.{key} is {text:?}: not a valid value for etcd's --{key}; fix it in \
                 the aenix EtcdCluster"
            ))
        };
        match key.as_str() {
            "quota-backend-bytes" => match text.parse() {
                Ok(n) => out.quota_backend_bytes = Some(n),
                Err(_) => bad(errors),
            },
            "snapshot-count" => match text.parse() {
                Ok(n) => out.snapshot_count = Some(n),
                Err(_) => bad(errors),
            },
            "auto-compaction-mode" => match text.as_str() {
                "periodic" => out.auto_compaction_mode = Some(AutoCompactionMode::Periodic),
                "revision" => out.auto_compaction_mode = Some(AutoCompactionMode::Revision),
                _ => bad(errors),
            },
            "auto-compaction-retention" => {
                out.auto_compaction_retention = Some(match text.parse::<i32>() {
                    Ok(n) => IntOrString::Int(n),
                    Err(_) => IntOrString::String(text.clone()),
                })
            }
            _ => errors.push(format!(
                "spec.options.{key} has no equivalent in etcd-operator.cozystack.io/v1alpha2 \
                 spec.options (quota-backend-bytes, snapshot-count, auto-compaction-mode, \
                 auto-compaction-retention): remove it from the aenix EtcdCluster before migrating"
            )),
        }
    }
    (out != EtcdOptions::default()).then_some(out)
}
