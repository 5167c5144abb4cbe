//! Standalone etcd members from the testbins' etcd, for component tests that need a real etcd
//! but no Kubernetes (the snapshot agent). Ports are chosen before the member starts, so a
//! restore can be given the peer URL the member will then run with.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::control_plane::{etcd_healthy, free_port, wait_until};
use super::process::Process;
use super::Error;

/// A single-member cluster's name and URLs, fixed before it starts.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub token: String,
}

impl EtcdConfig {
    /// Loopback URLs on ports free right now.
    pub fn new(name: &str, token: &str) -> Result<Self, Error> {
        Ok(Self {
            name: name.to_string(),
            client_url: format!("http://127.0.0.1:{}", free_port()?),
            peer_url: format!("http://127.0.0.1:{}", free_port()?),
            token: token.to_string(),
        })
    }

    /// `--initial-cluster` of the one-member cluster.
    pub fn initial_cluster(&self) -> String {
        format!("{}={}", self.name, self.peer_url)
    }
}

/// A running member; killed on drop.
pub struct Etcd {
    pub config: EtcdConfig,
    pub data_dir: PathBuf,
    process: Process,
}

impl Etcd {
    /// Start `bin` on `data_dir` (new or already initialised, e.g. by a restore) and wait for
    /// `/health`.
    pub async fn start(
        bin: &Path,
        config: &EtcdConfig,
        data_dir: &Path,
        log_dir: &Path,
    ) -> Result<Self, Error> {
        Self::start_with(bin, config, data_dir, log_dir, &[]).await
    }

    /// [`Etcd::start`] with further flags (e.g. `--quota-backend-bytes`).
    pub async fn start_with(
        bin: &Path,
        config: &EtcdConfig,
        data_dir: &Path,
        log_dir: &Path,
        extra: &[String],
    ) -> Result<Self, Error> {
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--name={}", config.name))
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={}", config.client_url))
            .arg(format!("--advertise-client-urls={}", config.client_url))
            .arg(format!("--listen-peer-urls={}", config.peer_url))
            .arg(format!("--initial-advertise-peer-urls={}", config.peer_url))
            .arg(format!("--initial-cluster={}", config.initial_cluster()))
            .arg(format!("--initial-cluster-token={}", config.token))
            .arg("--initial-cluster-state=new")
            .arg("--unsafe-no-fsync")
            .args(extra);
        let log = log_dir.join(format!("etcd-{}.log", config.name));
        let process = Process::spawn(&format!("etcd-{}", config.name), cmd, &log)?;
        let port = config
            .client_url
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "client_url {} has no port: EtcdConfig::new makes http://127.0.0.1:<port>",
                    config.client_url
                ))
            })?;
        wait_until(
            &format!("etcd /health on {}", config.client_url),
            Duration::from_secs(60),
            &[&process],
            log_dir,
            || etcd_healthy(process.pid(), port),
        )
        .await?;
        Ok(Self {
            config: config.clone(),
            data_dir: data_dir.to_path_buf(),
            process,
        })
    }

    /// A client of this member.
    pub async fn client(&self) -> Result<etcd_client::Client, Error> {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(30));
        etcd_client::Client::connect([self.config.client_url.as_str()], Some(options))
            .await
            .map_err(|e| {
                Error::Unsupported(format!("connecting to {}: {e}", self.config.client_url))
            })
    }

    pub fn stop(&self) {
        self.process.kill();
    }

    /// Stop it as a Pod's deletion does: `SIGTERM` (etcd stops its raft node and flushes its
    /// WAL), killed only if it has not exited after `grace`.
    pub async fn terminate(&self, grace: Duration) {
        self.process.stop(grace).await;
    }
}
