//! The testbins `helm` binary, run against the repository's chart: `helm template`/`lint` with no
//! cluster, `helm install`/`upgrade` against a test control plane (or the pod runner's) through its
//! kubeconfig.
//!
//! Each [`Helm`] has private `HELM_CONFIG_HOME`, `HELM_CACHE_HOME` and `HELM_DATA_HOME`
//! directories (removed on drop), so no repository list, registry login or plugin of the machine
//! leaks in, and parallel tests do not share helm state.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::env::{self, process, Testbins};

/// Why helm could not be run, or what it said when it failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Env(#[from] env::Error),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// helm ran and exited non-zero; `stderr` carries its message (e.g. a schema violation or a
    /// template's `fail`).
    #[error("helm {args} failed ({status}):\n{stderr}")]
    Failed {
        args: String,
        status: String,
        stderr: String,
    },
}

impl Error {
    /// helm's own message when it ran and failed, else `None`.
    pub fn stderr(&self) -> Option<&str> {
        match self {
            Error::Failed { stderr, .. } => Some(stderr),
            _ => None,
        }
    }
}

/// `charts/etcd-operator` of this repository.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(".."))
        .join("charts")
        .join("etcd-operator")
}

/// A helm client with its own state directories, optionally bound to a cluster.
#[derive(Debug)]
pub struct Helm {
    bin: PathBuf,
    kubeconfig: Option<PathBuf>,
    home: tempfile::TempDir,
}

impl Helm {
    /// The testbins helm (`$ETCD_OPERATOR_TESTBINS/helm/helm`); with `kubeconfig`, every command
    /// gets `--kubeconfig`, without one helm is kept from any cluster (`KUBECONFIG` unset).
    pub fn new(kubeconfig: Option<&Path>) -> Result<Self, Error> {
        let bin = Testbins::from_env()?.binary("helm", "helm")?;
        let home = tempfile::Builder::new()
            .prefix("helm-")
            .tempdir()
            .map_err(|source| Error::Io {
                what: "creating helm's state directory".into(),
                source,
            })?;
        Ok(Self {
            bin,
            kubeconfig: kubeconfig.map(Path::to_path_buf),
            home,
        })
    }

    /// The helm binary (for commands printed to a user).
    pub fn binary(&self) -> &Path {
        &self.bin
    }

    /// The chart directory (the same as the free function [`chart_dir`]).
    pub fn chart_dir(&self) -> PathBuf {
        chart_dir()
    }

    /// `helm install <release> <the chart> --namespace <namespace> --create-namespace` with a
    /// `--set` for each of `sets` (no `--wait`); its stdout.
    pub async fn install_chart(
        &self,
        release: &str,
        namespace: &str,
        sets: &[&str],
    ) -> Result<String, Error> {
        self.install_with(release, namespace, sets, "--create-namespace")
            .await
    }

    /// `helm install --dry-run=client` of the chart with a `--set` for each of `sets`: what an
    /// install would print (the rendered objects, then `NOTES:`), nothing created. helm still
    /// asks the cluster for its version and for objects the release would take over.
    pub async fn install_dry_run(
        &self,
        release: &str,
        namespace: &str,
        sets: &[&str],
    ) -> Result<String, Error> {
        self.install_with(release, namespace, sets, "--dry-run=client")
            .await
    }

    async fn install_with(
        &self,
        release: &str,
        namespace: &str,
        sets: &[&str],
        flag: &str,
    ) -> Result<String, Error> {
        let chart = chart_dir();
        let chart = chart.to_string_lossy();
        let mut args = vec!["install", release, &chart, "--namespace", namespace, flag];
        for set in sets {
            args.extend(["--set", set]);
        }
        self.run(args).await
    }

    /// Run `helm <args>`; its stdout on success, else [`Error::Failed`] with its stderr.
    pub async fn run<I, S>(&self, args: I) -> Result<String, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let shown = args
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = Command::new(&self.bin);
        let home = self.home.path();
        cmd.env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("HOME", home)
            .env_remove("KUBECONFIG")
            .env_remove("HELM_NAMESPACE")
            .env_remove("HELM_KUBECONTEXT")
            .stdin(std::process::Stdio::null());
        if let Some(kubeconfig) = &self.kubeconfig {
            cmd.arg("--kubeconfig").arg(kubeconfig);
        }
        cmd.args(&args);
        process::contain(&mut cmd);
        let output = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|source| Error::Io {
                what: format!("running helm {shown}"),
                source,
            })?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(Error::Failed {
                args: shown,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            })
        }
    }

    /// `helm template <release> <chart> --namespace <namespace> <extra>`: the rendered manifest.
    pub async fn template(
        &self,
        release: &str,
        namespace: &str,
        extra: &[&str],
    ) -> Result<String, Error> {
        let chart = chart_dir();
        let mut args: Vec<&OsStr> = vec![
            "template".as_ref(),
            release.as_ref(),
            chart.as_os_str(),
            "--namespace".as_ref(),
            namespace.as_ref(),
        ];
        args.extend(extra.iter().map(|a| OsStr::new(*a)));
        self.run(args).await
    }
}

/// The lines of what `helm install` printed (its NOTES) that a user pastes to create the sample
/// EtcdCluster: from the `kubectl apply` that opens the here-document to the line that closes
/// it, newline-terminated; `None` when the NOTES print no such command.
pub fn notes_sample_command(notes: &str) -> Option<String> {
    let lines: Vec<&str> = notes.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains("kubectl apply") && l.contains("<<'YAML'"))?;
    let end = lines[start..].iter().position(|l| l.trim() == "YAML")?;
    let mut command = lines[start..=start + end].join("\n");
    command.push('\n');
    Some(command)
}
