//! The kube client a kubectl plugin uses: the user's kubeconfig, context and namespace, read as
//! kubectl reads them (`--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`; in a Pod with
//! none of them, its ServiceAccount), and kubectl's impersonation flags.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::{Error, Result};

/// The flags every command takes, where kubectl takes them.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KubeFlags {
    /// The namespace of the cluster (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Act as this user (impersonation, as `kubectl --as`).
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Act as this group (repeatable; with --as, as `kubectl --as-group`).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
}

/// A connected client and the namespace the command works in.
pub struct Session {
    pub client: Client,
    pub namespace: String,
}

impl KubeFlags {
    pub async fn connect(&self) -> Result<Session> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let mut config = match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| Error::Config(format!("--kubeconfig {}: {e}", path.display())))?;
                Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| Error::Config(format!("--kubeconfig {}: {e}", path.display())))?
            }
            (None, Some(context)) => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| Error::Config(format!("--context {context}: {e}")))?,
            (None, None) => Config::infer().await.map_err(|e| {
                Error::Config(format!(
                    "no kubeconfig to use ({e}); give --kubeconfig, set KUBECONFIG, or run in a Pod"
                ))
            })?,
        };
        if self.as_user.is_none() && !self.as_group.is_empty() {
            return Err(Error::Usage(
                "--as-group needs --as (the user to impersonate), as kubectl's".into(),
            ));
        }
        if let Some(user) = &self.as_user {
            config.auth_info.impersonate = Some(user.clone());
            if !self.as_group.is_empty() {
                config.auth_info.impersonate_groups = Some(self.as_group.clone());
            }
        }
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config)
            .map_err(|e| Error::Config(format!("building the Kubernetes client: {e}")))?;
        Ok(Session { client, namespace })
    }
}
