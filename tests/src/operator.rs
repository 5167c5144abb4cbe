//! The operator under test, run as its real binary (`etcd-operator`) on the host against the test
//! control plane: it reaches the API as the chart's ServiceAccount under the chart's RBAC (a
//! token kubeconfig, see [`crate::chart_rbac`]) with the arguments the chart's Deployment gives
//! it, and etcd members through their per-member DNS names, which the pod runner publishes in the
//! host's hosts file.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::v1alpha2::EtcdCluster;

use crate::chart_rbac::{flag_name, Identity};
use crate::e2e::Env;
use crate::env::{logs, process::Process, ControlPlane, Error};
use crate::harness::{poll, POLL};
use crate::podrunner::PodRunnerBuilder;
use crate::OrPanic;

/// The operator binaries: `$ETCD_OPERATOR_BIN_DIR`, else the cargo target dir's debug profile.
pub fn bin_dir() -> PathBuf {
    std::env::var_os("ETCD_OPERATOR_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| logs::target_dir().join("debug"))
}

/// Run the operator binary's subcommand `args` (`migrate …`, `prepare-rollback …`) as an admin
/// with `kubeconfig` does; its status and output are echoed to stderr for the test's log.
pub fn run_subcommand(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new(bin_dir().join("etcd-operator"))
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running etcd-operator {args:?}: {e}"));
    eprintln!(
        "etcd-operator {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(Error::io("picking a free port"))?;
    let port = listener
        .local_addr()
        .map_err(Error::io("reading a bound port"))?
        .port();
    Ok(port)
}

/// `GET path` (HTTP/1.0) on an admin port at `addr`, over TLS when `tls` is given (the
/// certificate must name `localhost`), with an optional bearer token: the status code and body.
pub async fn admin_request(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    path: &str,
    bearer: Option<&str>,
) -> Result<(u16, String), Error> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(Error::io(format!("connecting to the admin port {}", addr)))?;
    let authorization = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: {}\r\n{authorization}\r\n",
        addr
    );
    async fn exchange<S>(mut s: S, request: &str) -> std::io::Result<Vec<u8>>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        s.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        match s.read_to_end(&mut response).await {
            // A TLS server may close without close_notify once it has answered.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {}
            other => {
                other?;
            }
        }
        Ok(response)
    }
    let response = match tls {
        None => exchange(stream, &request).await,
        Some(config) => {
            let connector = tokio_rustls::TlsConnector::from(config.clone());
            let name = rustls::pki_types::ServerName::try_from("localhost")
                .map_err(|e| Error::Unsupported(e.to_string()))?;
            let tls = connector
                .connect(name, stream)
                .await
                .map_err(Error::io("the TLS handshake with the admin port"))?;
            exchange(tls, &request).await
        }
    }
    .map_err(Error::io("talking to the admin port"))?;
    let response = String::from_utf8_lossy(&response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    Ok((status, body))
}

/// With `--metrics-secure=true` among `args`, a TLS client for the admin port trusting
/// `<--metrics-cert-dir>/ca.crt` (its certificate must name `localhost`).
fn secure_admin_client(args: &[&str]) -> Result<Option<Arc<rustls::ClientConfig>>, Error> {
    if !args.contains(&"--metrics-secure=true") {
        return Ok(None);
    }
    let dir = args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-cert-dir="))
        .ok_or_else(|| {
            Error::Unsupported("--metrics-secure=true without --metrics-cert-dir=".into())
        })?;
    let ca_path = std::path::Path::new(dir).join("ca.crt");
    let ca =
        std::fs::read(&ca_path).map_err(Error::io(format!("reading {}", ca_path.display())))?;
    let config = certs::client::client_config_from_pem(&ca, None, "the admin port's CA")
        .map_err(|e| Error::Unsupported(e.to_string()))?;
    Ok(Some(Arc::new(config)))
}

/// The binary's default `--auth-record-secret` (controller/src/auth.rs), when the chart passes none.
const DEFAULT_AUTH_RECORD_SECRET: &str = "etcd-operator-auth-records";

pub struct Operator {
    process: Process,
    admin: String,
    /// With `--metrics-secure=true`: a client trusting the `ca.crt` next to the admin port's
    /// certificate in `--metrics-cert-dir`.
    admin_tls: Option<Arc<rustls::ClientConfig>>,
    started: Instant,
    identity: Arc<Identity>,
    auth_record_secret: String,
    watch_namespace: Option<String>,
}

impl Operator {
    /// Start `etcd-operator`, optionally limited to one namespace, as the chart would run it
    /// released into `lease_namespace`: authenticated as the chart's ServiceAccount there, under
    /// the chart's RBAC (`watchNamespace` = `watch_namespace`), with the Deployment's arguments.
    /// Leader election is on, with its Lease in `lease_namespace`; that is also its own namespace
    /// (`POD_NAMESPACE`), where it keeps its auth record.
    pub async fn start(
        cp: &ControlPlane,
        lease_namespace: &str,
        watch_namespace: Option<&str>,
    ) -> Result<Self, Error> {
        Self::start_with(cp, lease_namespace, watch_namespace, &[]).await
    }

    /// [`Operator::start`] with more command-line flags (e.g. `--etcd-image-repository=…`); a
    /// flag given here replaces the chart's.
    pub async fn start_with(
        cp: &ControlPlane,
        lease_namespace: &str,
        watch_namespace: Option<&str>,
        extra_args: &[&str],
    ) -> Result<Self, Error> {
        let binary = bin_dir().join("etcd-operator");
        crate::harness::warn_if_stale(
            &binary,
            &[
                "controller/src",
                "controller/Cargo.toml",
                "api/src",
                "certs/src",
                "secure-admin/src",
            ],
            "make build",
        );
        if !binary.is_file() {
            return Err(Error::Io {
                what: format!(
                    "{} is missing: build it with `make build` (every binary, as make test builds them)",
                    binary.display()
                ),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        let identity = Identity::for_operator(cp, lease_namespace, watch_namespace).await?;
        let port = free_port()?;
        let admin = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(&binary);
        cmd.env("KUBECONFIG", identity.kubeconfig())
            .env("RUST_LOG", "info,kube=warn,controller=debug")
            .env("POD_NAMESPACE", lease_namespace)
            .arg(format!("--admin-listen={admin}"));
        let overridden: Vec<&str> = extra_args.iter().map(|a| flag_name(a)).collect();
        cmd.args(
            identity
                .args()
                .iter()
                .filter(|a| !overridden.contains(&flag_name(a))),
        );
        cmd.args(extra_args);
        let auth_record_secret = extra_args
            .iter()
            .copied()
            .chain(identity.args().iter().map(String::as_str))
            .find_map(|a| a.strip_prefix("--auth-record-secret="))
            .unwrap_or(DEFAULT_AUTH_RECORD_SECRET)
            .to_string();
        let admin_tls = secure_admin_client(extra_args)?;
        let log = logs::run_dir().join(format!("etcd-operator-{port}.log"));
        let process = Process::spawn("etcd-operator", cmd, &log)?;
        let op = Self {
            process,
            admin,
            admin_tls,
            started: Instant::now(),
            identity,
            auth_record_secret,
            watch_namespace: watch_namespace.map(str::to_string),
        };
        op.wait_ready(Duration::from_secs(60)).await?;
        Ok(op)
    }

    async fn wait_ready(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            self.process
                .check_running("waiting for the operator's /readyz")?;
            if let Ok(body) = self.get("/readyz").await {
                if body.starts_with("ready") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(Error::Io {
                    what: format!(
                        "the operator did not become ready within {timeout:?}; log: {}",
                        self.process.log().display()
                    ),
                    source: std::io::Error::from(std::io::ErrorKind::TimedOut),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// GET a path of the admin port (HTTP/1.0, loopback; over TLS with `--metrics-secure`): the
    /// body, whatever the status.
    pub async fn get(&self, path: &str) -> Result<String, Error> {
        Ok(self.request(path, None).await?.1)
    }

    /// The admin port's address (`127.0.0.1:<port>`).
    pub fn admin_addr(&self) -> &str {
        &self.admin
    }

    /// GET a path of the admin port with an optional bearer token: the status code and body.
    pub async fn request(&self, path: &str, bearer: Option<&str>) -> Result<(u16, String), Error> {
        admin_request(&self.admin, self.admin_tls.as_ref(), path, bearer).await
    }

    /// The operator's own namespace (`POD_NAMESPACE`): its Lease and its auth record.
    pub fn namespace(&self) -> &str {
        self.identity.namespace()
    }

    /// Its identity: the chart's release, ServiceAccount and RBAC it runs under.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The Secret in [`Operator::namespace`] where it records the root passwords it set in etcd
    /// (`--auth-record-secret`, `<release>-auth-records` from the chart).
    pub fn auth_record_secret(&self) -> &str {
        &self.auth_record_secret
    }

    /// Stop the operator as a Deployment rollout stops its Pod: SIGTERM (its controllers stop;
    /// its leader Lease is left to expire), SIGKILL after `grace`.
    pub async fn stop(&self, grace: Duration) {
        self.process.stop(grace).await;
    }

    /// Stop this operator ([`Operator::stop`], 10 s grace) and start its successor in the same
    /// namespace, identity and watch with `extra_args` instead (a `helm upgrade` that changed a
    /// flag, e.g. `--etcd-image-repository`). The successor acts once the old Lease expires.
    pub async fn replace_with(
        self,
        cp: &ControlPlane,
        extra_args: &[&str],
    ) -> Result<Operator, Error> {
        self.stop(Duration::from_secs(10)).await;
        Operator::start_with(
            cp,
            self.namespace(),
            self.watch_namespace.as_deref(),
            extra_args,
        )
        .await
    }

    /// SIGKILL the operator (a crash, not a graceful stop).
    pub fn kill(&self) {
        self.process.kill();
    }

    pub fn log(&self) -> PathBuf {
        self.process.log().to_path_buf()
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Resident set size of the operator process, from /proc.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A suite's shared environment for per-test operators: the binary's control plane and a pod
/// runner from `runner`, whose own operator watches `<idle>-…`, a namespace no test uses, so it
/// never acts. Each test brings its own operator with a [`Scope`].
pub async fn shared_env(runner: PodRunnerBuilder, idle: &str) -> Env {
    let staged = crate::e2e::stage(runner).await;
    let idle = staged.cp.namespace(idle).await.or_panic();
    staged.operator(Some(&idle), &[]).await
}

/// One test's namespace in a [`shared_env`] and the operator that owns it: limited to the
/// namespace, its Lease and auth record there too, so tests of one binary run side by side without
/// one operator acting on another test's clusters (or one test's operator kill hitting another).
pub struct Scope {
    pub env: &'static Env,
    pub ns: String,
    pub operator: Operator,
    /// The flags every operator of this scope is started with (a restart keeps them).
    flags: Vec<String>,
    /// Logs of every operator this test ran (a restart starts a new log).
    logs: Vec<PathBuf>,
    /// How often [`Scope::wait_for`] asks.
    every: Duration,
}

impl Scope {
    /// A new namespace `<prefix>-…` in `env` and its operator, started with `flags`.
    pub async fn new(env: &'static Env, prefix: &str, flags: &[&str]) -> Self {
        let ns = env.namespace(prefix).await;
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let operator = Self::start(env, &ns, &flags).await;
        let logs = vec![operator.log()];
        Self {
            env,
            ns,
            operator,
            flags,
            logs,
            every: POLL,
        }
    }

    /// [`Scope::wait_for`] asking every `every` instead of [`POLL`].
    pub fn polling(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    async fn start(env: &Env, ns: &str, flags: &[String]) -> Operator {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        Operator::start_with(env.cp, ns, Some(ns), &flags)
            .await
            .or_panic()
    }

    /// Start a replacement operator with the same flags (after [`Operator::kill`] or
    /// [`Operator::stop`]). It is ready at once but acts only once the old leader's Lease has
    /// expired, as a real replacement Pod would.
    pub async fn restart(&mut self) {
        self.operator = Self::start(self.env, &self.ns, &self.flags).await;
        self.logs.push(self.operator.log());
    }

    /// [`Scope::restart`] with `flags` instead (a `helm upgrade` that changed one); later
    /// restarts keep them.
    pub async fn restart_with(&mut self, flags: &[&str]) {
        self.flags = flags.iter().map(|f| f.to_string()).collect();
        self.restart().await;
    }

    /// SIGKILL the operator (a crash), then [`Scope::restart`].
    pub async fn crash_and_restart(&mut self) {
        self.operator.kill();
        self.restart().await;
    }

    /// Every operator log of this test, for a failure message.
    pub fn logs(&self) -> String {
        self.logs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Wait until `check` holds for a cluster of this namespace ([`Env::wait_for_every`]),
    /// naming the test's operator logs on timeout.
    pub async fn wait_for(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&EtcdCluster) -> bool,
    ) -> EtcdCluster {
        let what = format!(
            "{}/{name}: {what} (operator logs: {})",
            self.ns,
            self.logs()
        );
        self.env
            .wait_for_every(&self.ns, name, &what, timeout, self.every, check)
            .await
    }

    /// `replicas` Ready members, `Available=True/QuorumHealthy`, nothing in progress
    /// ([`crate::e2e::healthy`]).
    pub async fn wait_healthy(&self, name: &str, replicas: i32, timeout: Duration) -> EtcdCluster {
        self.wait_for(
            name,
            &format!("{replicas} ready members and QuorumHealthy"),
            timeout,
            |c| crate::e2e::healthy(c, replicas),
        )
        .await
    }

    /// Delete the cluster while the operator still runs (its members' finalizers need it) and
    /// give the Pods a moment to go, so finished tests stop competing for the CPU. Best effort:
    /// a cleanup, not a check.
    pub async fn finish(&self, name: &str) {
        let _ = self
            .env
            .cp
            .kubectl(&[
                "delete",
                "etcdcluster",
                name,
                "-n",
                &self.ns,
                "--wait=false",
            ])
            .await;
        let _ = poll(
            Duration::from_secs(30),
            Duration::from_millis(500),
            || async {
                if self.env.pods(&self.ns, name).await.is_empty() {
                    Ok(())
                } else {
                    Err(())
                }
            },
        )
        .await;
    }
}
