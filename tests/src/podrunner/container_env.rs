//! A container's environment as kubelet builds it: the `kubernetes` Service variables (pointing at
//! the in-Pod apiserver proxy on 127.0.0.1), then `envFrom`, then `env` in order with `$(VAR)`
//! expansion against what came before; the runtime adds the image's `PATH`, `HOSTNAME` and `HOME`
//! unless the container set them. Service links for other Services are not generated (they would
//! name ClusterIPs, which nothing may dial here).

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::Api;
use kube::Client;

use super::expand::expand;
use super::fields::{self, Allocatable};

/// An ordered environment where a later definition replaces an earlier one in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvList(Vec<(String, String)>);

impl EnvList {
    pub fn set(&mut self, name: &str, value: String) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn vars(&self) -> &[(String, String)] {
        &self.0
    }

    /// `$(VAR)` expansion against this list.
    pub fn expand(&self, input: &str) -> String {
        expand(input, |name| self.get(name).map(str::to_string))
    }
}

/// Where a container runs, for the downward API.
#[derive(Clone, Debug)]
pub struct PodPlace<'a> {
    pub pod: &'a Pod,
    pub host_ip: &'a str,
    pub pod_ip: Option<&'a str>,
    pub allocatable: Allocatable,
    /// The apiserver as seen from inside the Pod.
    pub apiserver_host: &'a str,
    pub apiserver_port: u16,
}

/// Why a container's environment could not be built (`CreateContainerConfigError`).
pub type ConfigError = String;

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

async fn get_secret(client: &Client, ns: &str, name: &str) -> Result<Option<Secret>, ConfigError> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading secret {ns}/{name}: {e}"))
}

async fn get_config_map(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<ConfigMap>, ConfigError> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading configmap {ns}/{name}: {e}"))
}

/// The kubelet part of the environment (what `$(VAR)` in command and args sees).
pub async fn kubelet_env(
    client: &Client,
    place: &PodPlace<'_>,
    container: &Container,
) -> Result<EnvList, ConfigError> {
    let ns = place.pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env = EnvList::default();
    let host = place.apiserver_host;
    let port = place.apiserver_port;
    env.set("KUBERNETES_SERVICE_HOST", host.to_string());
    env.set("KUBERNETES_SERVICE_PORT", port.to_string());
    env.set("KUBERNETES_SERVICE_PORT_HTTPS", port.to_string());
    env.set("KUBERNETES_PORT", format!("tcp://{host}:{port}"));
    env.set("KUBERNETES_PORT_443_TCP", format!("tcp://{host}:{port}"));
    env.set("KUBERNETES_PORT_443_TCP_PROTO", "tcp".into());
    env.set("KUBERNETES_PORT_443_TCP_PORT", port.to_string());
    env.set("KUBERNETES_PORT_443_TCP_ADDR", host.to_string());

    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.clone().unwrap_or_default();
        if let Some(r) = &source.config_map_ref {
            match get_config_map(client, ns, &r.name).await? {
                Some(cm) => {
                    for (k, v) in cm.data.iter().flatten() {
                        let name = format!("{prefix}{k}");
                        if is_env_name(&name) {
                            env.set(&name, v.clone());
                        }
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
        if let Some(r) = &source.secret_ref {
            match get_secret(client, ns, &r.name).await? {
                Some(secret) => {
                    for (k, v) in secret.data.iter().flatten() {
                        let name = format!("{prefix}{k}");
                        if is_env_name(&name) {
                            env.set(&name, String::from_utf8_lossy(&v.0).into_owned());
                        }
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret \"{}\" not found", r.name)),
            }
        }
    }

    for var in container.env.iter().flatten() {
        if let Some(value) = &var.value {
            let expanded = env.expand(value);
            env.set(&var.name, expanded);
            continue;
        }
        let Some(from) = &var.value_from else {
            env.set(&var.name, String::new());
            continue;
        };
        if let Some(f) = &from.field_ref {
            let v = fields::field_ref(place.pod, &f.field_path, place.host_ip, place.pod_ip)?;
            env.set(&var.name, v);
        } else if let Some(r) = &from.resource_field_ref {
            let target = match r.container_name.as_deref() {
                None | Some("") => container,
                Some(name) => place
                    .pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.iter().find(|c| c.name == name))
                    .ok_or_else(|| format!("resourceFieldRef names unknown container {name:?}"))?,
            };
            let v = fields::resource_field_ref(
                target,
                &r.resource,
                r.divisor.as_ref(),
                place.allocatable,
            )?;
            env.set(&var.name, v);
        } else if let Some(r) = &from.secret_key_ref {
            let optional = r.optional == Some(true);
            match get_secret(client, ns, &r.name).await? {
                Some(secret) => match secret.data.as_ref().and_then(|d| d.get(&r.key)) {
                    Some(v) => env.set(&var.name, String::from_utf8_lossy(&v.0).into_owned()),
                    None if optional => {}
                    None => {
                        return Err(format!(
                            "couldn't find key {} in Secret {ns}/{}",
                            r.key, r.name
                        ))
                    }
                },
                None if optional => {}
                None => return Err(format!("secret \"{}\" not found", r.name)),
            }
        } else if let Some(r) = &from.config_map_key_ref {
            let optional = r.optional == Some(true);
            match get_config_map(client, ns, &r.name).await? {
                Some(cm) => {
                    let value = cm
                        .data
                        .as_ref()
                        .and_then(|d| d.get(&r.key))
                        .cloned()
                        .or_else(|| {
                            cm.binary_data
                                .as_ref()
                                .and_then(|d| d.get(&r.key))
                                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                        });
                    match value {
                        Some(v) => env.set(&var.name, v),
                        None if optional => {}
                        None => {
                            return Err(format!(
                                "couldn't find key {} in ConfigMap {ns}/{}",
                                r.key, r.name
                            ))
                        }
                    }
                }
                None if optional => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        } else {
            return Err(format!("env var {} has an unsupported valueFrom", var.name));
        }
    }
    Ok(env)
}

/// What the process finally gets: `PATH` (the image's directories), `HOSTNAME`, `HOME`, then the
/// image's own `Env`, then the kubelet environment.
pub fn process_env(
    kubelet: &EnvList,
    image: &[(String, String)],
    path: &str,
    hostname: &str,
    home: &str,
) -> EnvList {
    let mut env = EnvList::default();
    env.set("PATH", path.to_string());
    env.set("HOSTNAME", hostname.to_string());
    env.set("HOME", home.to_string());
    for (k, v) in image {
        env.set(k, v.clone());
    }
    for (k, v) in kubelet.vars() {
        env.set(k, v.clone());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_definitions_replace_in_place_and_expand_earlier_ones() {
        let mut env = EnvList::default();
        env.set("A", "1".into());
        env.set("B", env.expand("$(A)-x"));
        env.set("A", "2".into());
        assert_eq!(
            env.vars(),
            &[
                ("A".to_string(), "2".to_string()),
                ("B".to_string(), "1-x".to_string())
            ]
        );
        let image = [
            ("PATH".to_string(), "/usr/local/bin".to_string()),
            ("B".to_string(), "image".to_string()),
            ("C".to_string(), "image".to_string()),
        ];
        let proc = process_env(&env, &image, "/bin", "h", "/");
        assert_eq!(proc.get("HOME"), Some("/"));
        assert_eq!(proc.get("PATH"), Some("/usr/local/bin"));
        assert_eq!(proc.get("B"), Some("1-x"));
        assert_eq!(proc.get("C"), Some("image"));
    }
}
