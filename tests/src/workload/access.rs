//! How the workload's clients reach a cluster: the Ready members' DNS names, plain or TLS, as
//! root when the cluster has auth; and the client options a production client would set.

use std::time::{Duration, Instant};

use api::v1alpha2::EtcdCluster;
use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};

use super::{run, CATCH_UP};
use crate::OrPanic;

/// How the workload's clients reach a cluster: plain or TLS (the CA that signed the members'
/// serving certificates, and the client certificate when the cluster asks for one), and root's
/// password when the cluster has auth.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// `(CA bundle PEM, optional (certificate PEM, key PEM))`.
    pub tls: Option<(String, Option<(String, String)>)>,
    /// `(user, password)`.
    pub user: Option<(String, String)>,
}

impl Access {
    /// What the cluster's spec asks for: with `spec.tls.client`, the server Secret's `ca.crt`
    /// (the `serverSecretRef`, or `<cluster>-server-tls` under cert-manager) and the
    /// operator-client Secret's `tls.crt`/`tls.key` when client mTLS is on; with `spec.auth`,
    /// root and the `password` of its credentials Secret.
    pub async fn of_cluster(kube: &Client, ns: &str, name: &str) -> Access {
        let cluster: EtcdCluster = Api::namespaced(kube.clone(), ns).get(name).await.or_panic();
        let secrets: Api<Secret> = Api::namespaced(kube.clone(), ns);
        let text = |secret: Secret, key: &str| -> String {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .unwrap_or_else(|| {
                    panic!("{ns}/{name}: Secret {} has no {key:?}", secret.name_any())
                })
        };
        let mut access = Access::default();
        let client = cluster.spec.tls.as_ref().and_then(|t| t.client.as_ref());
        if let Some(client) = client {
            let server = client
                .server_secret_ref
                .as_ref()
                .map(|r| r.name.clone())
                .unwrap_or_else(|| format!("{name}-server-tls"));
            let ca = text(secrets.get(&server).await.or_panic(), "ca.crt");
            let identity_secret = client
                .operator_client_secret_ref
                .as_ref()
                .map(|r| r.name.clone())
                .or_else(|| {
                    client
                        .cert_manager
                        .as_ref()
                        .and_then(|c| c.operator_client_issuer_ref.as_ref())
                        .map(|_| format!("{name}-operator-client-tls"))
                });
            let identity = match identity_secret {
                Some(s) => {
                    let secret = secrets.get(&s).await.or_panic();
                    Some((text(secret.clone(), "tls.crt"), text(secret, "tls.key")))
                }
                None => None,
            };
            access.tls = Some((ca, identity));
        }
        let auth = cluster.spec.auth.as_ref().filter(|a| a.enabled);
        if let Some(reference) = auth.and_then(|a| a.root_credentials_secret_ref.as_ref()) {
            let secret = secrets.get(&reference.name).await.or_panic();
            access.user = Some(("root".into(), text(secret, "password")));
        }
        access
    }

    pub(super) fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// A client on `endpoints`: 2 s to connect, 2 s a request when `bounded` (the watcher's
    /// stream is not bounded), HTTP/2 pings every 6 s while a request is open (etcd answers
    /// pings more often than every 5 s with GOAWAY) to find a member that went silent, and
    /// requests refused by a member without a leader, as Kubernetes' own etcd client does.
    pub(super) async fn dial(&self, endpoints: &[String], bounded: bool) -> etcd_client::Client {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(6), Duration::from_secs(2))
            .with_keep_alive_while_idle(false)
            .with_require_leader(true);
        if bounded {
            options = options.with_timeout(run::REQUEST_TIMEOUT);
        }
        if let Some((ca, identity)) = &self.tls {
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
            if let Some((cert, key)) = identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        if let Some((user, password)) = &self.user {
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        // Logging in (with auth) needs a member that answers: try for a while.
        let deadline = Instant::now() + CATCH_UP;
        loop {
            match etcd_client::Client::connect(endpoints, Some(options.clone())).await {
                Ok(client) => return client,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("workload: connecting to {endpoints:?}: {e}; again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("workload: connecting to {endpoints:?}: {e}"),
            }
        }
    }
}
