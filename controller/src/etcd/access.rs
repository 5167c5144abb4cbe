//! The one way to reach a cluster's etcd: with which TLS material and as which user, and the
//! clients kept across reconciles. Every etcd client the controller builds is built here
//! (`controller/tests/layering.rs` checks that nothing else calls `Etcd::connect`); which
//! endpoints to dial is the caller's choice, written with [`crate::topology`].
//!
//! The rules, once:
//! - TLS: `https://` endpoints are dialed with the cluster's CA as the only trust anchor and the
//!   operator-client identity when the cluster uses mTLS ([`crate::tls::load`]).
//! - User: root once the cluster wants auth (`spec.auth.enabled`) and its status says auth is on
//!   in etcd ([`crate::auth::latched`]); no user before that, and none for the calls etcd answers
//!   without one (`Status`, `Version`).
//! - Cache: one client per cluster incarnation (`namespace/name/uid`), reused while the
//!   endpoints, the TLS Secrets' revision and the root password stay the same.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use api::v1alpha2::EtcdCluster;
use kube::ResourceExt;

use super::{Etcd, EtcdError};
use crate::auth::{self, AuthSecretError, Credentials};
use crate::metrics::Metrics;
use crate::tls::{ClientTls, TlsSecretError};

/// Which user the calls need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum User {
    /// No user: `Status` and `Version` answer without one even with auth on.
    Anonymous,
    /// root, once auth is on (see the module's rules); no user before.
    Root,
}

/// Why a cluster's access could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Tls(#[from] TlsSecretError),
    #[error(transparent)]
    Auth(#[from] AuthSecretError),
}

impl LoadError {
    /// A Secret the user must create or fix (the message says which and how), as opposed to a
    /// failed API call that is retried.
    pub fn is_user_fixable(&self) -> bool {
        match self {
            LoadError::Tls(e) => e.is_user_fixable(),
            LoadError::Auth(e) => e.is_user_fixable(),
        }
    }
}

/// How to reach one cluster's etcd: its client TLS material (`None`: plaintext) and root's
/// credentials (`None`: no user).
#[derive(Clone)]
pub struct Access {
    tls: Option<ClientTls>,
    creds: Option<Credentials>,
    metrics: Metrics,
}

impl Access {
    /// Access with material the caller has already read and checked (the cluster reconcile reads
    /// the TLS Secrets with their chains checked, and tries root passwords during a rotation).
    pub fn new(tls: Option<ClientTls>, creds: Option<Credentials>, metrics: Metrics) -> Self {
        Self {
            tls,
            creds,
            metrics,
        }
    }

    /// Reads `cluster`'s TLS Secrets and, for [`User::Root`] once auth is on, root's password.
    pub async fn load(
        client: &kube::Client,
        metrics: &Metrics,
        cluster: &EtcdCluster,
        user: User,
    ) -> Result<Self, LoadError> {
        let ns = cluster.namespace().unwrap_or_default();
        let tls =
            crate::tls::load(client, &ns, &cluster.name_any(), cluster.spec.tls.as_ref()).await?;
        let creds = match user {
            User::Root if auth::wanted(cluster.spec.auth.as_ref()) && auth::latched(cluster) => {
                auth::load(client, &ns, cluster.spec.auth.as_ref()).await?
            }
            _ => None,
        };
        Ok(Self::new(tls, creds, metrics.clone()))
    }

    /// [`Access::load`], with a Secret the user must create or fix as `Ok(Err(message))` (for a
    /// condition that waits on it) instead of an error to retry.
    pub async fn load_or_why(
        client: &kube::Client,
        metrics: &Metrics,
        cluster: &EtcdCluster,
        user: User,
    ) -> Result<Result<Self, String>, LoadError> {
        match Self::load(client, metrics, cluster, user).await {
            Ok(access) => Ok(Ok(access)),
            Err(e) if e.is_user_fixable() => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_ref()
    }

    pub fn creds(&self) -> Option<&Credentials> {
        self.creds.as_ref()
    }

    /// The same access as another user: `creds` instead of this one's.
    pub fn with_creds(&self, creds: Option<Credentials>) -> Self {
        Self {
            creds,
            ..self.clone()
        }
    }

    /// Dials `endpoints`; each call is bounded by the default call timeout.
    pub async fn dial(&self, endpoints: &[String]) -> Result<Etcd, EtcdError> {
        Etcd::connect(
            endpoints,
            self.tls.as_ref(),
            self.creds.as_ref(),
            self.metrics.clone(),
        )
        .await
    }

    /// Dials `endpoints` with another bound on each call (a defragmentation takes longer than a
    /// membership call; a status probe should give up sooner).
    pub async fn dial_with_timeout(
        &self,
        endpoints: &[String],
        call_timeout: Duration,
    ) -> Result<Etcd, EtcdError> {
        Etcd::connect_with_timeout(
            endpoints,
            self.tls.as_ref(),
            self.creds.as_ref(),
            self.metrics.clone(),
            call_timeout,
        )
        .await
    }

    /// What a cached client was built with: the TLS Secrets' revision and the password's
    /// fingerprint (`None` for plaintext without auth).
    fn revision(&self) -> Option<String> {
        match (&self.tls, &self.creds) {
            (None, None) => None,
            (tls, creds) => Some(format!(
                "{}/{}",
                tls.as_ref()
                    .map(|t| t.revision.as_str())
                    .unwrap_or_default(),
                creds
                    .as_ref()
                    .map(Credentials::fingerprint)
                    .unwrap_or_default()
            )),
        }
    }
}

/// One cluster incarnation: `namespace/name/uid` (a recreated cluster of the same name gets
/// its own clients).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClusterKey(String);

impl ClusterKey {
    pub fn of(cluster: &EtcdCluster) -> Self {
        Self(format!(
            "{}/{}/{}",
            cluster.namespace().unwrap_or_default(),
            cluster.name_any(),
            cluster.uid().unwrap_or_default()
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of a client that addresses member `name` of this cluster alone (a call etcd
    /// answers for the member it reaches, as `Status`). Forgotten with the cluster's.
    pub fn member(&self, name: &str) -> Self {
        Self(format!("{}/{name}", self.0))
    }
}

/// A cached client with what it was built for: the endpoints and [`Access::revision`].
type Cached = (Vec<String>, Option<String>, Etcd);

/// The clients kept across reconciles, one per cluster incarnation: a reconcile then costs the
/// membership call, not a new TCP, TLS and HTTP/2 handshake, and a renewed Secret or a new
/// password is picked up on the next reconcile.
#[derive(Default)]
pub struct Pool {
    clients: Mutex<HashMap<ClusterKey, Cached>>,
}

impl Pool {
    /// The cluster's client for these endpoints, reused while the endpoints, the TLS material's
    /// revision and the root password are unchanged.
    pub async fn get(
        &self,
        key: &ClusterKey,
        endpoints: &[String],
        access: &Access,
    ) -> Result<Etcd, EtcdError> {
        let revision = access.revision();
        let cached = self.clients.lock().ok().and_then(|c| {
            c.get(key)
                .filter(|(e, r, _)| e.as_slice() == endpoints && *r == revision)
                .map(|(_, _, client)| client.clone())
        });
        if let Some(client) = cached {
            return Ok(client);
        }
        let client = access.dial(endpoints).await?;
        if let Ok(mut c) = self.clients.lock() {
            c.insert(key.clone(), (endpoints.to_vec(), revision, client.clone()));
        }
        Ok(client)
    }

    /// Drops a cached client (a call through it failed, or the cluster is gone); a cluster's
    /// key drops its members' clients too ([`ClusterKey::member`]).
    pub fn forget(&self, key: &ClusterKey) {
        let members = format!("{}/", key.0);
        if let Ok(mut c) = self.clients.lock() {
            c.retain(|k, _| k != key && !k.0.starts_with(&members));
        }
    }
}
