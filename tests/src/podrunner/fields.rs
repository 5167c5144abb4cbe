//! Downward API values (`fieldRef`, `resourceFieldRef`) as kubelet computes them, shared by env
//! vars and downwardAPI volume files, and the quantity arithmetic they need.

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// What the Node offers when a container sets no limit (kubelet uses node allocatable).
#[derive(Clone, Copy, Debug)]
pub struct Allocatable {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub ephemeral_bytes: u64,
}

/// A quantity as a number of base units (`100m` → 0.1, `1Gi` → 1073741824).
pub fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0f64.powi(2),
        "Gi" => 1024.0f64.powi(3),
        "Ti" => 1024.0f64.powi(4),
        "Pi" => 1024.0f64.powi(5),
        "Ei" => 1024.0f64.powi(6),
        s if s.starts_with('e') || s.starts_with('E') => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor)
}

/// Go's `%q` for the label and annotation files.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn format_map(map: Option<&std::collections::BTreeMap<String, String>>) -> String {
    map.map(|m| {
        m.iter()
            .map(|(k, v)| format!("{k}={}", go_quote(v)))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .unwrap_or_default()
}

/// The value of `fieldRef.fieldPath` for `pod`.
pub fn field_ref(
    pod: &Pod,
    path: &str,
    host_ip: &str,
    pod_ip: Option<&str>,
) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let subscript = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_prefix("['")?;
        Some(rest.strip_suffix("']")?.to_string())
    };
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        "status.podIP" | "status.podIPs" => pod_ip.unwrap_or_default().to_string(),
        _ => {
            if let Some(key) = subscript("metadata.labels") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(&key).cloned())
                    .unwrap_or_default()
            } else if let Some(key) = subscript("metadata.annotations") {
                meta.annotations
                    .as_ref()
                    .and_then(|l| l.get(&key).cloned())
                    .unwrap_or_default()
            } else {
                return Err(format!("unsupported fieldRef fieldPath {path:?}"));
            }
        }
    };
    Ok(value)
}

/// The value of a `resourceFieldRef` (`limits.cpu`, `requests.memory`, ...) of `container`,
/// divided by `divisor` and rounded up, as kubelet does; a missing limit is the Node's allocatable.
pub fn resource_field_ref(
    container: &Container,
    resource: &str,
    divisor: Option<&Quantity>,
    allocatable: Allocatable,
) -> Result<String, String> {
    let resources = container.resources.as_ref();
    let lookup = |limits: bool, name: &str| -> Option<f64> {
        let map = if limits {
            resources.and_then(|r| r.limits.as_ref())
        } else {
            resources.and_then(|r| r.requests.as_ref())
        };
        map.and_then(|m| m.get(name))
            .and_then(|q| parse_quantity(&q.0))
    };
    let fallback = |name: &str| -> f64 {
        match name {
            "cpu" => allocatable.cpu_millis as f64 / 1000.0,
            "memory" => allocatable.memory_bytes as f64,
            _ => allocatable.ephemeral_bytes as f64,
        }
    };
    let (limits, name) = match resource.split_once('.') {
        Some(("limits", name)) => (true, name),
        Some(("requests", name)) => (false, name),
        _ => {
            return Err(format!(
                "unsupported resourceFieldRef resource {resource:?}"
            ))
        }
    };
    if !matches!(name, "cpu" | "memory" | "ephemeral-storage") {
        return Err(format!(
            "unsupported resourceFieldRef resource {resource:?}"
        ));
    }
    let value = if limits {
        lookup(true, name).unwrap_or_else(|| fallback(name))
    } else {
        // A request defaults to the limit when only the limit is set.
        lookup(false, name)
            .or_else(|| lookup(true, name))
            .unwrap_or(0.0)
    };
    let divisor = divisor
        .and_then(|d| parse_quantity(&d.0))
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    let units = (value / divisor).ceil();
    Ok(format!("{}", units as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("100m"), Some(0.1));
        assert_eq!(parse_quantity("1Gi"), Some(1073741824.0));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("64Mi"), Some(67108864.0));
        assert_eq!(parse_quantity("x"), None);
    }

    #[test]
    fn field_refs() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "etcd-0", "namespace": "ns", "uid": "u1",
                         "labels": {"b": "2", "a": "x\"y"}},
            "spec": {"nodeName": "worker-1", "containers": []},
        }))
        .unwrap();
        assert_eq!(
            field_ref(&pod, "metadata.name", "127.0.0.1", None).unwrap(),
            "etcd-0"
        );
        assert_eq!(
            field_ref(&pod, "metadata.labels['b']", "", None).unwrap(),
            "2"
        );
        assert_eq!(
            field_ref(&pod, "metadata.labels", "", None).unwrap(),
            "a=\"x\\\"y\"\nb=\"2\""
        );
        assert_eq!(
            field_ref(&pod, "status.podIP", "", Some("10.213.0.2")).unwrap(),
            "10.213.0.2"
        );
        assert_eq!(
            field_ref(&pod, "spec.nodeName", "", None).unwrap(),
            "worker-1"
        );
        assert!(field_ref(&pod, "spec.bogus", "", None).is_err());
    }

    #[test]
    fn resource_refs_round_up_and_fall_back_to_allocatable() {
        let c: Container = serde_json::from_value(json!({
            "name": "c",
            "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "250m"}},
        }))
        .unwrap();
        let alloc = Allocatable {
            cpu_millis: 8000,
            memory_bytes: 1 << 30,
            ephemeral_bytes: 1 << 30,
        };
        assert_eq!(
            resource_field_ref(&c, "limits.memory", None, alloc).unwrap(),
            "134217728"
        );
        let mi = Quantity("1Mi".into());
        assert_eq!(
            resource_field_ref(&c, "limits.memory", Some(&mi), alloc).unwrap(),
            "128"
        );
        assert_eq!(
            resource_field_ref(&c, "limits.cpu", None, alloc).unwrap(),
            "8"
        );
        assert_eq!(
            resource_field_ref(&c, "requests.cpu", None, alloc).unwrap(),
            "1"
        );
        let m = Quantity("1m".into());
        assert_eq!(
            resource_field_ref(&c, "requests.cpu", Some(&m), alloc).unwrap(),
            "250"
        );
    }
}
