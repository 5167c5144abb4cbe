//! `kubectl etcd etcdctl <cluster> -- <args>`: etcdctl run inside a Ready member Pod's etcd
//! container (the etcd image ships it) through the exec subresource, with the endpoint, the TLS
//! files that Pod mounts and, when the cluster has root auth on, root's credentials: the user
//! copies no certificate anywhere.

use api::v1alpha2::EtcdCluster;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::AttachParams;
use kube::{Api, ResourceExt};

use crate::error::{Call, Error, Result};
use crate::objects::{Objects, PODS_EXEC};

/// The etcd container of a member Pod (controller/src/builders/pod).
const ETCD_CONTAINER: &str = "etcd";
/// Where a member Pod mounts its client TLS Secret (`ca.crt`, `tls.crt`, `tls.key`); the server
/// certificate has clientAuth and names localhost.
const CLIENT_TLS_DIR: &str = "/etc/etcd/tls/client";
const CLIENT_PORT: u16 = 2379;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// The EtcdCluster.
    pub cluster: String,
    /// Run it in this member's Pod (default: the first Ready one by name).
    #[arg(long, value_name = "ETCDMEMBER")]
    pub member: Option<String>,
    /// etcdctl's arguments, after `--`: `kubectl etcd etcdctl demo -- member list -w table`.
    #[arg(last = true, required = true, value_name = "ETCDCTL ARGS")]
    pub args: Vec<String>,
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Pod to run etcdctl in: the member's, else the first Ready one by name.
pub fn pick_pod<'p>(cluster: &str, pods: &'p [Pod], member: Option<&str>) -> Result<&'p Pod> {
    let mut sorted: Vec<&Pod> = pods.iter().collect();
    sorted.sort_by_key(|p| p.name_any());
    if let Some(m) = member {
        return sorted
            .into_iter()
            .find(|p| p.name_any() == m)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "--member {m}: cluster {cluster} has no member Pod of that name; its Pods: {}",
                    pods.iter()
                        .map(|p| p.name_any())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            });
    }
    sorted.into_iter().find(|p| ready(p)).ok_or_else(|| {
        Error::Exec(format!(
            "cluster {cluster} has no Ready member Pod to run etcdctl in ({} Pods); \
             `kubectl etcd status {cluster}` shows why",
            pods.len()
        ))
    })
}

/// Whether the Pod's etcd container mounts the client TLS Secret (the cluster serves clients
/// over TLS).
fn client_tls(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == ETCD_CONTAINER))
        .and_then(|c| c.volume_mounts.as_ref())
        .is_some_and(|ms| ms.iter().any(|m| m.mount_path == CLIENT_TLS_DIR))
}

/// The command run in the Pod: etcdctl with the local endpoint, the Pod's client TLS files when
/// it serves TLS, root's credentials when given, then the user's arguments.
pub fn command(pod: &Pod, root_password: Option<&str>, args: &[String]) -> Vec<String> {
    let tls = client_tls(pod);
    let scheme = if tls { "https" } else { "http" };
    let mut cmd = vec![
        "etcdctl".to_string(),
        format!("--endpoints={scheme}://localhost:{CLIENT_PORT}"),
    ];
    if tls {
        cmd.push(format!("--cacert={CLIENT_TLS_DIR}/ca.crt"));
        cmd.push(format!("--cert={CLIENT_TLS_DIR}/tls.crt"));
        cmd.push(format!("--key={CLIENT_TLS_DIR}/tls.key"));
    }
    if let Some(password) = root_password {
        cmd.push("--user=root".to_string());
        cmd.push(format!("--password={password}"));
    }
    cmd.extend(args.iter().cloned());
    cmd
}

/// etcdctl's exit status from the exec stream's final Status (`NonZeroExitCode` carries it
/// as the cause `ExitCode`).
pub fn exit_code(status: Option<&Status>) -> i32 {
    let Some(status) = status else { return 1 };
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.parse().ok())
        .unwrap_or(1)
}

/// Root's password when the cluster has auth on (spec.auth.enabled and status.authEnabled).
async fn root_password(o: &Objects, cluster: &EtcdCluster) -> Result<Option<String>> {
    let auth = cluster.spec.auth.clone().unwrap_or_default();
    let on = auth.enabled && cluster.status.as_ref().and_then(|s| s.auth_enabled) == Some(true);
    if !on {
        return Ok(None);
    }
    let Some(secret_ref) = auth.root_credentials_secret_ref else {
        return Ok(None);
    };
    let secret: Secret = o.get(&secret_ref.name).await?;
    let password = secret
        .data
        .as_ref()
        .and_then(|d| d.get("password"))
        .and_then(|p| String::from_utf8(p.0.clone()).ok())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            Error::Exec(format!(
                "Secret {} (spec.auth.rootCredentialsSecretRef of {}) has no UTF-8 key password",
                secret_ref.name,
                cluster.name_any()
            ))
        })?;
    Ok(Some(password))
}

pub async fn run(o: &Objects, args: &Args) -> Result<i32> {
    let cluster: EtcdCluster = o.get(&args.cluster).await?;
    let selector = format!("{}={}", api::labels::CLUSTER, args.cluster);
    let pods: Vec<Pod> = o.list(Some(&selector)).await?;
    let pod = pick_pod(&args.cluster, &pods, args.member.as_deref())?;
    let password = root_password(o, &cluster).await?;
    let cmd = command(pod, password.as_deref(), &args.args);
    let params = AttachParams::default()
        .container(ETCD_CONTAINER)
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let pods_api: Api<Pod> = Api::namespaced(o.client.clone(), &o.namespace);
    let call = Call::new("create", PODS_EXEC, &o.namespace).named(&pod.name_any());
    let mut attached = pods_api
        .exec(&pod.name_any(), cmd, &params)
        .await
        .map_err(|e| Error::from_kube(call, "Pod", e))?;
    let status = attached.take_status();
    let stdout = attached.stdout();
    let stderr = attached.stderr();
    let out = async {
        if let Some(mut r) = stdout {
            let _ = tokio::io::copy(&mut r, &mut tokio::io::stdout()).await;
        }
    };
    let err = async {
        if let Some(mut r) = stderr {
            let _ = tokio::io::copy(&mut r, &mut tokio::io::stderr()).await;
        }
    };
    tokio::join!(out, err);
    let status = match status {
        Some(s) => s.await,
        None => None,
    };
    attached
        .join()
        .await
        .map_err(|e| Error::Exec(format!("etcdctl in Pod {}: {e}", pod.name_any())))?;
    Ok(exit_code(status.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus, VolumeMount};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    fn pod(name: &str, ready: bool, tls: bool) -> Pod {
        let mounts = tls.then(|| {
            vec![VolumeMount {
                name: "client-tls".into(),
                mount_path: CLIENT_TLS_DIR.into(),
                ..Default::default()
            }]
        });
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: ETCD_CONTAINER.into(),
                    volume_mounts: mounts,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_plain_cluster_is_reached_on_localhost_over_http() {
        let cmd = command(
            &pod("demo-a", true, false),
            None,
            &args(&["member", "list"]),
        );
        assert_eq!(
            cmd,
            [
                "etcdctl",
                "--endpoints=http://localhost:2379",
                "member",
                "list"
            ]
        );
    }

    #[test]
    fn a_tls_cluster_uses_the_files_its_pod_mounts_and_root_when_auth_is_on() {
        let cmd = command(
            &pod("demo-a", true, true),
            Some("s3cr:et"),
            &args(&["get", "k"]),
        );
        assert_eq!(
            cmd,
            [
                "etcdctl",
                "--endpoints=https://localhost:2379",
                "--cacert=/etc/etcd/tls/client/ca.crt",
                "--cert=/etc/etcd/tls/client/tls.crt",
                "--key=/etc/etcd/tls/client/tls.key",
                "--user=root",
                "--password=s3cr:et",
                "get",
                "k"
            ]
        );
    }

    #[test]
    fn the_first_ready_pod_by_name_or_the_member_asked_for() {
        let pods = [
            pod("demo-c", true, false),
            pod("demo-a", false, false),
            pod("demo-b", true, false),
        ];
        assert_eq!(
            pick_pod("demo", &pods, None)
                .map(|p| p.name_any())
                .ok()
                .as_deref(),
            Some("demo-b")
        );
        assert_eq!(
            pick_pod("demo", &pods, Some("demo-a"))
                .map(|p| p.name_any())
                .ok()
                .as_deref(),
            Some("demo-a")
        );
        let e = pick_pod("demo", &pods, Some("demo-x")).expect_err("no such member");
        assert!(
            e.to_string()
                .contains("--member demo-x: cluster demo has no member Pod of that name"),
            "{e}"
        );
        let e = pick_pod("demo", &[pod("demo-a", false, false)], None).expect_err("none ready");
        assert!(e.to_string().contains("has no Ready member Pod"), "{e}");
    }

    #[test]
    fn etcdctls_exit_status_comes_from_the_stream_status() {
        let ok = Status {
            status: Some("Success".into()),
            ..Default::default()
        };
        assert_eq!(exit_code(Some(&ok)), 0);
        let failed = Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some("5".into()),
                    field: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(exit_code(Some(&failed)), 5);
        assert_eq!(exit_code(None), 1);
    }
}
