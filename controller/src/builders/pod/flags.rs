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
