//! How the agent's subcommands that talk to a live etcd dial it: the TLS flags they share and
//! the connection, with the cluster's root credentials from `ETCD_USERNAME`/`ETCD_PASSWORD`.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::objectstore::Failure;

/// `--ca-file`, `--cert-file`, `--key-file`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EtcdTls {
    /// CA bundle (PEM) of etcd's client certificates.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS, with --key-file.
    #[arg(long, requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    #[arg(long, requires = "cert_file")]
    pub key_file: Option<PathBuf>,
}

/// Dial `endpoints`. No request timeout: it would also bound a stream (a snapshot's, a watch's:
/// grpc-timeout); keep-alives notice a member that went away mid-stream.
pub async fn connect(endpoints: &[String], tls: &EtcdTls) -> Result<Client, Failure> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(10))
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(10));
    if let Some(ca) = &tls.ca_file {
        let ca = read(ca, "--ca-file")?;
        let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            config = config.identity(Identity::from_pem(
                read(cert, "--cert-file")?,
                read(key, "--key-file")?,
            ));
        }
        options = options.with_tls(config);
    } else if endpoints.iter().any(|e| e.starts_with("https://")) {
        return Err(Failure::permanent(
            "https:// endpoints need --ca-file (the CA of etcd's client certificates)",
        ));
    }
    if let Ok(user) = std::env::var("ETCD_USERNAME") {
        if !user.is_empty() {
            let password = std::env::var("ETCD_PASSWORD").unwrap_or_default();
            options = options.with_user(user, password);
        }
    }
    let connect = Client::connect(endpoints, Some(options));
    let client = tokio::time::timeout(Duration::from_secs(30), connect)
        .await
        .map_err(|_| {
            Failure::transient(format!(
                "etcd at {} did not answer within 30s; check the cluster is up and reachable",
                endpoints.join(",")
            ))
        })?
        .map_err(|e| {
            let text = e.to_string();
            let msg = format!("connecting to etcd at {}: {text}", endpoints.join(","));
            if text.contains("authentication failed") || text.contains("invalid auth token") {
                Failure::permanent(format!(
                    "{msg}; check ETCD_USERNAME/ETCD_PASSWORD (the cluster's root credentials)"
                ))
            } else {
                Failure::transient(msg)
            }
        })?;
    Ok(client)
}

fn read(path: &PathBuf, flag: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::permanent(format!("{flag} {}: {e}", path.display())))
}
