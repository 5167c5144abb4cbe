//! The etcd-operator controller. Reconcile decisions are pure functions (`builders`,
//! `cluster::plan`, `cluster::status`) of observed state; the reconcilers around them only read,
//! call one planner, perform one step and write status.

pub mod admin;
pub mod agent;
pub mod agent_job;
pub mod archive;
pub mod auth;
pub mod builders;
pub mod cert_manager;
pub mod cluster;
pub mod conditions;
pub mod config;
pub mod context;
pub mod cron;
pub mod defrag;
pub mod deletion;
pub mod etcd;
pub mod events;
pub mod install_tools;
pub mod lenient;
pub mod member;
pub mod merge_patch;
pub mod metrics;
pub mod migrate;
pub mod naming;
pub mod objectstore;
pub mod pods;
pub mod recovery;
pub mod rollback;
pub mod run;
pub mod schedule;
pub mod service_account;
pub mod shell;
pub mod snapshot;
pub mod template;
pub mod tls;
pub mod topology;
pub mod volume;
pub mod watches;
pub mod web_identity;

/// UID of the object's controlling owner (the EtcdCluster of a member, the member of a Pod or PVC).
pub fn controller_uid(obj: &impl kube::Resource) -> Option<String> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// Errors of a reconcile. Each maps to a metric label; all are transient (retried with backoff)
/// except where the planner turns a condition into a status reason instead of an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Etcd(#[from] etcd::EtcdError),
    #[error(transparent)]
    Build(#[from] builders::BuildError),
    #[error("serialising an object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object has no namespace")]
    NoNamespace,
    #[error("object has no uid")]
    NoUid,
    #[error("etcd is needed for this step but no voter is reachable")]
    EtcdUnavailable,
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    TlsSecret(#[from] tls::TlsSecretError),
    #[error(transparent)]
    AuthSecret(#[from] auth::AuthSecretError),
}

impl From<etcd::access::LoadError> for Error {
    fn from(e: etcd::access::LoadError) -> Self {
        match e {
            etcd::access::LoadError::Tls(e) => Error::TlsSecret(e),
            etcd::access::LoadError::Auth(e) => Error::AuthSecret(e),
        }
    }
}

impl Error {
    /// The object changed since it was read (HTTP 409 Conflict on an update or patch carrying
    /// the read `resourceVersion`): retry from a fresh read, soon.
    pub fn is_stale_write(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(s)) if s.is_conflict() && !s.is_already_exists())
    }

    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubeApi",
            Error::Etcd(_) | Error::EtcdUnavailable => "Etcd",
            Error::Build(_) => "Build",
            Error::Json(_) => "Serialization",
            Error::NoNamespace | Error::NoUid => "InvalidObject",
            Error::Conflict(_) => "OwnershipConflict",
            Error::TlsSecret(_) => "TLSSecret",
            Error::AuthSecret(_) => "AuthSecret",
        }
    }
}
