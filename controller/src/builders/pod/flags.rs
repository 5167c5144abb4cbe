//! etcd's command line for a member: names, URLs, the initial cluster, the options of the spec
//! and the TLS files. The state (`new` or `existing`) is not decided here: it comes from the
//! Pod's annotation through the environment.

use api::labels;
use api::v1alpha2::{EtcdMember, EtcdOptions};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{CLIENT_TLS_DIR, DATA_DIR, PEER_TLS_DIR};
use crate::builders::BuildError;
use crate::naming::{self, CLIENT_PORT, METRICS_PORT, PEER_PORT};

/// The flags of `spec.options`, each only when set (etcd's defaults otherwise).
fn option_flags(options: Option<&EtcdOptions>) -> Vec<String> {
    let Some(o) = options else {
        return Vec::new();
    };
    let mut flags = Vec::new();
    if let Some(q) = o.quota_backend_bytes {
        flags.push(format!("--quota-backend-bytes={q}"));
    }
    if let Some(mode) = o.auto_compaction_mode {
        flags.push(format!("--auto-compaction-mode={}", mode.as_str()));
    }
    if let Some(r) = &o.auto_compaction_retention {
        let value = match r {
            IntOrString::Int(i) => i.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        flags.push(format!("--auto-compaction-retention={value}"));
    }
    if let Some(n) = o.snapshot_count {
        flags.push(format!("--snapshot-count={n}"));
    }
    flags
}

/// The learners every member of etcd 3.6 or later accepts at once (`--max-learners`): one fewer
/// than the most replicas a cluster may have ([`api::v1alpha2::MAX_REPLICAS`]), so every missing
/// member of a new cluster or of a scale-up can join as a learner in one step. etcd checks the
/// limit when it applies an added learner, on every member (`ValidateConfigurationChange`), and
/// again when a member starts (`ValidateMaxLearnerConfig`), so every member runs the same value.
pub const MAX_LEARNERS: u32 = (api::v1alpha2::MAX_REPLICAS - 1) as u32;

/// etcd's own limit when `--max-learners` is not given, and etcd 3.5's fixed limit
/// (`membership.maxLearners`, a constant: 3.5 has no flag for it).
pub const ETCD_DEFAULT_MAX_LEARNERS: u32 = 1;

/// `--max-learners` first appeared in etcd 3.6.0 (the pre-releases' `--experimental-max-learners`
/// was renamed before the release, and 3.6 refuses that spelling); 3.5 has neither flag.
fn has_max_learners_flag(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (3, 6),
        _ => false,
    }
}

/// The `--max-learners` flag a member of `version` runs with, if its etcd has it.
fn max_learners_flag(version: &str) -> Option<String> {
    has_max_learners_flag(version).then(|| format!("--max-learners={MAX_LEARNERS}"))
}

/// How many learners a member Pod built now for etcd `version` accepts at once.
pub fn max_learners_of_version(version: &str) -> u32 {
    if has_max_learners_flag(version) {
        MAX_LEARNERS
    } else {
        ETCD_DEFAULT_MAX_LEARNERS
    }
}

/// How many learners the etcd of a running member Pod accepts at once, read from the etcd
/// container's command line: a Pod built before the operator set `--max-learners` (or one of
/// the reference operator's, taken over) runs with etcd's default of one.
pub fn max_learners_of_args<'a>(args: impl IntoIterator<Item = &'a String>) -> u32 {
    args.into_iter()
        .filter_map(|a| a.strip_prefix("--max-learners="))
        .filter_map(|v| v.parse::<u32>().ok())
        .last()
        .unwrap_or(ETCD_DEFAULT_MAX_LEARNERS)
}

/// etcd's data directory: the volume root, or the adopted member's legacy subdirectory of it
/// (see [`labels::DATA_DIR_SUBPATH_ANNOTATION`]) so a recreated Pod finds the existing data.
pub fn data_dir(member: &EtcdMember) -> String {
    match labels::data_dir_subpath(member.annotations()) {
        Some(sub) => format!("{DATA_DIR}/{sub}"),
        None => DATA_DIR.to_string(),
    }
}

/// etcd's command line for a member. `--initial-cluster-state` is expanded from the environment
/// (see [`INITIAL_CLUSTER_STATE_ANNOTATION`](super::INITIAL_CLUSTER_STATE_ANNOTATION)).
pub fn etcd_args(member: &EtcdMember) -> Result<Vec<String>, BuildError> {
    let name = member.name_any();
    let namespace = member.namespace().ok_or(BuildError::NoNamespace)?;
    let spec = &member.spec;
    if spec.initial_cluster.is_empty() {
        return Err(BuildError::PendingMember(name));
    }
    let tls = spec.tls.clone().unwrap_or_default();
    let client_tls = tls.client_server_secret_ref.is_some();
    let peer_secret = tls.peer_secret_ref.is_some();
    // Peer auto-TLS (an adopted aenix cluster): etcd generates self-signed peer certificates
    // under its data dir; the peer URLs are https all the same.
    let peer_auto_tls = tls.peer_auto_tls && !peer_secret;
    let peer_tls = peer_tls(member);
    let service = naming::member_service(member);
    let cluster = &service;

    let mut args = vec![
        format!("--name={name}"),
        format!("--data-dir={}", data_dir(member)),
        format!(
            "--listen-client-urls={}://0.0.0.0:{CLIENT_PORT}",
            if client_tls { "https" } else { "http" }
        ),
        format!(
            "--advertise-client-urls={}",
            naming::client_url(&name, cluster, &namespace, client_tls)
        ),
        format!(
            "--listen-peer-urls={}://0.0.0.0:{PEER_PORT}",
            if peer_tls { "https" } else { "http" }
        ),
        format!(
            "--initial-advertise-peer-urls={}",
            naming::peer_url(&name, cluster, &namespace, peer_tls)
        ),
        format!("--initial-cluster={}", spec.initial_cluster),
        format!("--initial-cluster-token={}", spec.cluster_token),
        "--initial-cluster-state=$(INITIAL_CLUSTER_STATE)".to_string(),
        format!("--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}"),
    ];
    args.extend(max_learners_flag(&spec.version));
    args.extend(option_flags(spec.options.as_ref()));
    if client_tls {
        args.extend([
            format!("--cert-file={CLIENT_TLS_DIR}/tls.crt"),
            format!("--key-file={CLIENT_TLS_DIR}/tls.key"),
        ]);
        // etcd requires a client certificate whenever `--trusted-ca-file` is set, with or
        // without `--client-cert-auth` (pkg/transport TLSInfo.ServerConfig): a server-TLS-only
        // cluster must not get it, or clients without a certificate are refused.
        if tls.client_mtls {
            args.extend([
                format!("--trusted-ca-file={CLIENT_TLS_DIR}/ca.crt"),
                "--client-cert-auth".to_string(),
            ]);
        }
    }
    if peer_auto_tls {
        args.push("--peer-auto-tls".to_string());
    }
    // An EtcdRecovery's survivor starts once as a one-member cluster of its own data (etcd
    // keeps the cluster ID); the recovery removes the annotation and restarts the Pod without
    // it, since a second start with the flag would drop every member added since.
    if member
        .annotations()
        .contains_key(api::v1alpha2::FORCE_NEW_CLUSTER_ANNOTATION)
    {
        args.push("--force-new-cluster".to_string());
    }
    if peer_secret {
        args.extend([
            format!("--peer-cert-file={PEER_TLS_DIR}/tls.crt"),
            format!("--peer-key-file={PEER_TLS_DIR}/tls.key"),
            format!("--peer-trusted-ca-file={PEER_TLS_DIR}/ca.crt"),
            "--peer-client-cert-auth".to_string(),
        ]);
    }
    Ok(args)
}

/// Whether the member's peer listener is https (its own Secret or peer auto-TLS).
pub(super) fn peer_tls(member: &EtcdMember) -> bool {
    let tls = member.spec.tls.clone().unwrap_or_default();
    tls.peer_secret_ref.is_some() || tls.peer_auto_tls
}
