//! Command-line flags (each with an environment fallback) and the admission [`Policy`] derived
//! from them. Parsing only; nothing here opens files or sockets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser, ValueEnum};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The ServiceAccount the chart runs the controller as.
pub const DEFAULT_CONTROLLER_USERNAME: &str =
    "system:serviceaccount:etcd-operator-system:etcd-operator";
/// Where controller-runtime style deployments mount the serving certificate.
pub const DEFAULT_TLS_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
/// Where the chart mounts the secure admin address's certificate.
pub const DEFAULT_METRICS_CERT_DIR: &str = "/tmp/k8s-metrics-server/serving-certs";
pub const DEFAULT_MEMORY_HEADROOM: &str = "256Mi";
/// The groups whose members may write an aenix migration's EtcdMembers (see
/// [`Policy::migration_groups`]): the built-in superuser group, and the group kubeadm (1.29+)
/// binds to `cluster-admin` for its `admin.conf`. Both can already delete the webhook's
/// configuration, so the allowance grants them nothing new.
pub const DEFAULT_MIGRATION_GROUPS: &str = "system:masters,kubeadm:cluster-admins";
/// An UPDATE review carries the object and its old version, each up to etcd's default request
/// limit of 1.5 MiB, plus the review around them.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Which pod anti-affinity the mutating webhook adds to an EtcdCluster that sets none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum AntiAffinity {
    /// `preferredDuringSchedulingIgnoredDuringExecution`, weight 100: spread members over
    /// nodes when possible, still schedule when there are fewer nodes than members.
    #[default]
    Preferred,
    /// `requiredDuringSchedulingIgnoredDuringExecution`: never two members on one node.
    Required,
    /// Add nothing (and warn when a cluster has no anti-affinity).
    Off,
}

/// Flags of `etcd-operator-webhook`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "etcd-operator-webhook",
    version,
    about = "Admission webhook for etcd-operator.cozystack.io: validation, defaults and warnings"
)]
pub struct Config {
    /// Directory of the mounted serving-certificate Secret (`tls.crt`, `tls.key`); re-read when
    /// it changes.
    #[arg(long, env = "WEBHOOK_TLS_CERT_DIR", default_value = DEFAULT_TLS_CERT_DIR)]
    pub tls_cert_dir: PathBuf,

    /// Certificate file name inside --tls-cert-dir.
    #[arg(long, env = "WEBHOOK_TLS_CERT_FILE", default_value = "tls.crt")]
    pub tls_cert_file: String,

    /// Private key file name inside --tls-cert-dir.
    #[arg(long, env = "WEBHOOK_TLS_KEY_FILE", default_value = "tls.key")]
    pub tls_key_file: String,

    /// Seconds between re-reads of the certificate files (a backup for missed file events).
    #[arg(long, env = "WEBHOOK_TLS_RESYNC_SECONDS", default_value_t = 30)]
    pub tls_resync_seconds: u64,

    /// HTTPS address for `/validate` and `/mutate`.
    #[arg(long, env = "WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// Plain-HTTP address for `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "WEBHOOK_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    pub admin_listen: SocketAddr,

    /// Serve the admin address over TLS (the certificate of --metrics-cert-dir) and `/metrics`
    /// only to a bearer token the apiserver authenticates and allows `get` on `/metrics`. The
    /// only time the webhook calls the API (TokenReviews and SubjectAccessReviews, with its
    /// ServiceAccount's token).
    #[arg(long, env = "WEBHOOK_METRICS_SECURE", default_value_t = false, action = ArgAction::Set)]
    pub metrics_secure: bool,

    /// Directory of the mounted `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`) of the
    /// secure admin address; re-read as it rotates.
    #[arg(long, env = "WEBHOOK_METRICS_CERT_DIR", default_value = DEFAULT_METRICS_CERT_DIR)]
    pub metrics_cert_dir: PathBuf,

    /// Pod anti-affinity added to EtcdClusters created without one.
    #[arg(long, env = "WEBHOOK_ANTI_AFFINITY", value_enum, default_value_t = AntiAffinity::Preferred)]
    pub anti_affinity: AntiAffinity,

    /// Added to `storage.size` for the memory limit of `medium: Memory` members.
    #[arg(long, env = "WEBHOOK_MEMORY_HEADROOM", default_value = DEFAULT_MEMORY_HEADROOM, value_parser = parse_headroom)]
    pub memory_headroom: Quantity,

    /// Default memory limit and request of `medium: Memory` clusters (`--memory-defaults=false`
    /// to turn off).
    #[arg(long, env = "WEBHOOK_MEMORY_DEFAULTS", default_value_t = true, action = ArgAction::Set)]
    pub memory_defaults: bool,

    /// The user the controller authenticates as; only it may update EtcdMembers.
    #[arg(long, env = "WEBHOOK_CONTROLLER_USERNAME", default_value = DEFAULT_CONTROLLER_USERNAME)]
    pub controller_username: String,

    /// Groups (comma-separated) whose members may run `etcd-operator migrate --from-aenix
    /// --apply`: create EtcdMembers carrying the `etcd-operator.cozystack.io/adopted-from`
    /// annotation and write their first status. Give only groups bound to `cluster-admin`;
    /// empty turns the allowance off.
    #[arg(long, env = "WEBHOOK_MIGRATION_GROUPS", default_value = DEFAULT_MIGRATION_GROUPS, value_delimiter = ',')]
    pub migration_groups: Vec<String>,

    /// Users (comma-separated) allowed to delete EtcdMembers besides the controller, the
    /// garbage collector and the namespace controller (the chart's
    /// `memberDeletionProtection.additionalAllowedUsers`). Anyone else needs the member to
    /// carry `etcd-operator.cozystack.io/allow-deletion: "true"`.
    #[arg(
        long,
        env = "WEBHOOK_MEMBER_DELETION_ALLOWED_USERS",
        default_value = "",
        value_delimiter = ','
    )]
    pub member_deletion_allowed_users: Vec<String>,

    /// Largest AdmissionReview body accepted, in bytes (larger gets 413).
    #[arg(long, env = "WEBHOOK_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,

    /// Seconds to let in-flight requests finish after SIGTERM/SIGINT.
    #[arg(long, env = "WEBHOOK_SHUTDOWN_GRACE_SECONDS", default_value_t = 10)]
    pub shutdown_grace_seconds: u64,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "WEBHOOK_LOG_JSON", default_value_t = false, action = ArgAction::Set)]
    pub log_json: bool,
}

fn parse_headroom(s: &str) -> Result<Quantity, String> {
    let q = Quantity(s.to_string());
    api::quantity::parse(&q)?;
    match api::quantity::to_bytes(&q) {
        Some(bytes) if bytes >= 0 => Ok(q),
        _ => Err(format!(
            "{s:?} must be a non-negative number of bytes such as 256Mi"
        )),
    }
}

impl Config {
    /// Settings for tests and embedding: listen on ephemeral loopback ports, every other value
    /// at its flag default.
    pub fn for_tests(tls_cert_dir: impl Into<PathBuf>) -> Self {
        let mut config = Self::parse_from(["etcd-operator-webhook"]);
        config.tls_cert_dir = tls_cert_dir.into();
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.admin_listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.tls_resync_seconds = 1;
        config
    }

    pub fn policy(&self) -> Policy {
        Policy {
            anti_affinity: self.anti_affinity,
            memory_headroom: self.memory_headroom.clone(),
            memory_defaults: self.memory_defaults,
            controller_username: self.controller_username.clone(),
            migration_groups: self
                .migration_groups
                .iter()
                .map(|g| g.trim().to_string())
                .filter(|g| !g.is_empty())
                .collect(),
            deletion_allowed_users: self
                .member_deletion_allowed_users
                .iter()
                .map(|u| u.trim().to_string())
                .filter(|u| !u.is_empty())
                .collect(),
        }
    }

    pub fn tls_resync(&self) -> Duration {
        Duration::from_secs(self.tls_resync_seconds.max(1))
    }
}

/// What the admission decisions depend on besides the request.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub anti_affinity: AntiAffinity,
    pub memory_headroom: Quantity,
    pub memory_defaults: bool,
    pub controller_username: String,
    /// Groups allowed the aenix migration's EtcdMember writes besides the controller (see
    /// `admission::migration_adoption`).
    pub migration_groups: Vec<String>,
    /// Users allowed to delete EtcdMembers besides the controller and kube-controller-manager's
    /// garbage collector and namespace controller (see `admission::deletion`).
    pub deletion_allowed_users: Vec<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            anti_affinity: AntiAffinity::Preferred,
            memory_headroom: Quantity(DEFAULT_MEMORY_HEADROOM.to_string()),
            memory_defaults: true,
            controller_username: DEFAULT_CONTROLLER_USERNAME.to_string(),
            migration_groups: DEFAULT_MIGRATION_GROUPS
                .split(',')
                .map(str::to_string)
                .collect(),
            deletion_allowed_users: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_flags() {
        let c = Config::parse_from(["etcd-operator-webhook"]);
        assert_eq!(c.listen.port(), 8443);
        assert_eq!(c.admin_listen.port(), 8080);
        assert_eq!(c.policy(), Policy::default());
        assert_eq!(c.max_body_bytes, 4 << 20);
        assert_eq!(c.tls_cert_dir, PathBuf::from(DEFAULT_TLS_CERT_DIR));
    }

    #[test]
    fn flags_override_defaults() {
        let c = Config::parse_from([
            "etcd-operator-webhook",
            "--anti-affinity=required",
            "--memory-defaults=false",
            "--memory-headroom=512Mi",
            "--controller-username=system:serviceaccount:ops:etcd",
            "--migration-groups=platform:admins, ops:root",
            "--member-deletion-allowed-users=system:serviceaccount:argocd:argocd-application-controller, ",
        ]);
        assert_eq!(c.anti_affinity, AntiAffinity::Required);
        assert!(!c.memory_defaults);
        assert_eq!(c.memory_headroom, Quantity("512Mi".into()));
        assert_eq!(c.controller_username, "system:serviceaccount:ops:etcd");
        assert_eq!(
            c.policy().migration_groups,
            ["platform:admins", "ops:root"].map(String::from)
        );
        assert_eq!(
            c.policy().deletion_allowed_users,
            ["system:serviceaccount:argocd:argocd-application-controller"].map(String::from)
        );
    }

    #[test]
    fn empty_migration_groups_turn_the_allowance_off() {
        let c = Config::parse_from(["etcd-operator-webhook", "--migration-groups="]);
        assert!(c.policy().migration_groups.is_empty());
    }

    #[test]
    fn headroom_must_be_a_quantity() {
        assert!(
            Config::try_parse_from(["etcd-operator-webhook", "--memory-headroom=lots"]).is_err()
        );
        assert!(
            Config::try_parse_from(["etcd-operator-webhook", "--anti-affinity=maybe"]).is_err()
        );
    }
}
