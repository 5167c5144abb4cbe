//! The real `etcd-operator-webhook` binary behind a real kube-apiserver: started as a child
//! process on loopback with a freshly minted serving certificate (in a directory laid out like a
//! mounted Secret), and registered with a ValidatingWebhookConfiguration and a
//! MutatingWebhookConfiguration whose `clientConfig.url` points at it and whose `caBundle` is the
//! minted CA.
//!
//! The binary is not built by `cargo test --test …`: build it first with
//! `make build` (`make test` does). It is looked up next to the test binary
//! (`<target>/<profile>/etcd-operator-webhook`), or at `$ETCD_OPERATOR_WEBHOOK_BIN`.
//!
//! Webhook configurations are cluster-scoped and the apiserver picks changes to them up
//! asynchronously (an informer), so a caller registers, then polls a probe until the change is
//! in effect ([`wait_until`]).

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use certs::mint::{SecretMount, TestCa};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::Client;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::env::{self, logs, process::Process, ControlPlane};

/// Overrides where the webhook binary is taken from.
pub const WEBHOOK_BIN_ENV: &str = "ETCD_OPERATOR_WEBHOOK_BIN";
pub const BINARY_NAME: &str = "etcd-operator-webhook";
/// Name of the single webhook in each registered configuration.
pub const VALIDATING_WEBHOOK_NAME: &str = "validate.etcd-operator.cozystack.io";
pub const MUTATING_WEBHOOK_NAME: &str = "mutate.etcd-operator.cozystack.io";
/// What the apiserver waits for one webhook call.
pub const TIMEOUT_SECONDS: i32 = 5;

const START_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// Why the webhook could not be started, registered, or waited for.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Env(#[from] env::Error),
    #[error(
        "the webhook binary {path} does not exist: build it with `make build` \
         (or point {WEBHOOK_BIN_ENV} at it)"
    )]
    BinaryMissing { path: PathBuf },
    #[error("minting the webhook's serving certificate: {0}")]
    Mint(#[from] certs::mint::MintError),
    #[error("{what}: {detail}")]
    Failed { what: String, detail: String },
}

fn failed(what: impl Into<String>, detail: impl ToString) -> Error {
    Error::Failed {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// The webhook binary to run: `$ETCD_OPERATOR_WEBHOOK_BIN`, else the one Cargo built next to this
/// test binary (same target directory and profile), else `<target>/debug/`.
pub fn binary() -> Result<PathBuf, Error> {
    let path = match std::env::var_os(WEBHOOK_BIN_ENV).filter(|p| !p.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => {
            let profile_dir = std::env::current_exe()
                .ok()
                .and_then(|exe| {
                    let deps = exe.parent()?;
                    (deps.file_name()? == "deps").then(|| deps.parent().map(Path::to_path_buf))?
                })
                .unwrap_or_else(|| logs::target_dir().join("debug"));
            profile_dir.join(BINARY_NAME)
        }
    };
    if !path.is_file() {
        return Err(Error::BinaryMissing { path });
    }
    crate::harness::warn_if_stale(
        &path,
        &[
            "webhook/src",
            "webhook/Cargo.toml",
            "api/src",
            "api/testdata",
            "certs/src",
        ],
        "make build",
    );
    Ok(path)
}

/// A running `etcd-operator-webhook` child on ephemeral loopback ports, serving a certificate for
/// `127.0.0.1` and `localhost` signed by its own CA. Killed (its process group) on drop.
pub struct Webhook {
    process: Process,
    tls_addr: SocketAddr,
    admin_addr: SocketAddr,
    ca: TestCa,
    bin: PathBuf,
    args: Vec<String>,
    mount: SecretMount,
    _dir: tempfile::TempDir,
}

crate::debug_fields!(Webhook, |w| {
    "process": w.process,
    "tls_addr": w.tls_addr,
    "admin_addr": w.admin_addr,
});

impl Webhook {
    /// Start the binary with `args` added to the test defaults (ephemeral ports on 127.0.0.1,
    /// JSON logs), its certificate in place before it starts, as the kubelet mounts it; returns
    /// once `/readyz` answers 200. The log goes to the control plane's log directory.
    pub async fn start(cp: &ControlPlane, args: &[&str]) -> Result<Self, Error> {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let n = STARTED.fetch_add(1, Ordering::SeqCst) + 1;
        let bin = binary()?;
        let dir = tempfile::Builder::new()
            .prefix("webhook-")
            .tempdir_in(cp.root())
            .map_err(|e| failed("creating the webhook's directory", e))?;
        let mount = SecretMount::new(dir.path().join("serving-certs"))?;
        let ca = TestCa::new("etcd-operator-webhook-test-ca")?;
        let cert = ca.server_cert(&["127.0.0.1", "localhost"])?;
        mount.write_tls(&cert, Some(&ca))?;

        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let cmd = command(&bin, mount.dir(), ("127.0.0.1:0", "127.0.0.1:0"), &args);
        let log = cp.log_dir().join(format!("{BINARY_NAME}-{n}.log"));
        let process = Process::spawn(BINARY_NAME, cmd, &log)?;

        let (tls_addr, admin_addr) = wait_until(
            &format!("{BINARY_NAME} to log its addresses in {}", log.display()),
            START_TIMEOUT,
            || async {
                process
                    .check_running("while starting")
                    .map_err(|e| e.to_string())?;
                Ok(listening_addresses(&log))
            },
        )
        .await?;
        let webhook = Self {
            process,
            tls_addr,
            admin_addr,
            ca,
            bin,
            args,
            mount,
            _dir: dir,
        };
        webhook.wait_ready().await?;
        Ok(webhook)
    }

    async fn wait_ready(&self) -> Result<(), Error> {
        let admin_addr = self.admin_addr;
        wait_until(
            &format!("{BINARY_NAME} /readyz on {admin_addr}"),
            START_TIMEOUT,
            || async {
                self.process
                    .check_running("while starting")
                    .map_err(|e| e.to_string())?;
                Ok(match http_get(admin_addr, "/readyz").await {
                    Ok((200, _)) => Some(()),
                    _ => None,
                })
            },
        )
        .await
    }

    /// Stop the webhook as its Pods going away would (SIGTERM: `/readyz` turns 503, in-flight
    /// requests finish; SIGKILL after 10 s). The registrations stay: the apiserver's calls fail
    /// until [`Webhook::start_again`] and each object's failure policy decides.
    pub async fn stop(&self) {
        self.process.stop(Duration::from_secs(10)).await;
    }

    /// Start the webhook again on the addresses it had (the registrations' URLs), with the same
    /// certificate and arguments, and wait until `/readyz` answers 200. A port taken by someone
    /// else meanwhile fails here with the webhook's own message.
    pub async fn start_again(&self) -> Result<(), Error> {
        let tls = self.tls_addr.to_string();
        let admin = self.admin_addr.to_string();
        let cmd = command(&self.bin, self.mount.dir(), (&tls, &admin), &self.args);
        self.process.start_again_with(cmd)?;
        self.wait_ready().await
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.tls_addr)
    }

    pub fn tls_addr(&self) -> SocketAddr {
        self.tls_addr
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The CA the serving certificate chains to, PEM (the configurations' caBundle).
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    pub fn process(&self) -> &Process {
        &self.process
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> Result<String, Error> {
        match http_get(self.admin_addr, "/metrics").await {
            Ok((200, body)) => Ok(body),
            Ok((status, body)) => Err(failed(
                "reading the webhook's /metrics",
                format!("HTTP {status}: {body}"),
            )),
            Err(e) => Err(failed("reading the webhook's /metrics", e)),
        }
    }

    /// The sum of `admission_requests_total` samples whose labels include every `label="value"`
    /// pair in `labels` (e.g. `&[("webhook", "validate"), ("allowed", "false")]`).
    pub async fn admissions(&self, labels: &[(&str, &str)]) -> Result<f64, Error> {
        Ok(sum_samples(
            &self.metrics().await?,
            "etcd_operator_webhook_admission_requests_total",
            labels,
        ))
    }

    /// Kill the process group now (as a crash or an outage would).
    pub fn kill(&self) {
        self.process.kill();
    }
}

/// The webhook's command line: the test defaults (`listen` = (TLS, admin) addresses, JSON logs,
/// a short shutdown grace), then `args`.
fn command(bin: &Path, cert_dir: &Path, listen: (&str, &str), args: &[String]) -> Command {
    let mut cmd = Command::new(bin);
    // Flags win over the environment, but an inherited WEBHOOK_* could still set what the
    // flags below leave at its default.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("WEBHOOK_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUST_LOG", "info")
        .arg(format!("--tls-cert-dir={}", cert_dir.display()))
        .arg(format!("--listen={}", listen.0))
        .arg(format!("--admin-listen={}", listen.1))
        .arg("--log-json=true")
        .arg("--shutdown-grace-seconds=1")
        .args(args);
    cmd
}

/// The sum of the samples of `metric` (an OpenMetrics counter) carrying every label of `labels`.
pub fn sum_samples(text: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?;
            // `metric{...} value`, or the bare `metric value`; never a longer metric name.
            let (label_text, value) = match rest.strip_prefix('{') {
                Some(rest) => rest.split_once('}')?,
                None if rest.starts_with(' ') => ("", rest),
                None => return None,
            };
            let all = labels
                .iter()
                .all(|(k, v)| label_text.contains(&format!("{k}=\"{v}\"")));
            all.then(|| value.split_whitespace().next()?.parse::<f64>().ok())?
        })
        .sum()
}

/// The TLS and admin addresses from the webhook's JSON "webhook listening" log line, if logged.
fn listening_addresses(log: &Path) -> Option<(SocketAddr, SocketAddr)> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|line| {
        let entry: Value = serde_json::from_str(line).ok()?;
        let fields = &entry["fields"];
        if fields["message"] != "webhook listening" {
            return None;
        }
        let addr = |key: &str| fields[key].as_str()?.parse::<SocketAddr>().ok();
        Some((addr("tls_addr")?, addr("admin_addr")?))
    })
}

/// A plain HTTP/1.1 GET with `Connection: close`: the status code and the body.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or_default();
        Ok((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| std::io::Error::other(format!("GET {path} on {addr} timed out")))?
}

/// `Fail` or `Ignore`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

fn rule(resources: &[&str], operations: &[&str]) -> RuleWithOperations {
    let strings = |items: &[&str]| Some(items.iter().map(|s| s.to_string()).collect());
    RuleWithOperations {
        api_groups: strings(&[api::v1alpha2::GROUP]),
        api_versions: strings(&[api::v1alpha2::VERSION]),
        resources: strings(resources),
        operations: strings(operations),
        scope: Some("Namespaced".to_string()),
    }
}

fn client_config(url: String, ca_pem: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        url: Some(url),
        ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
        service: None,
    }
}

/// The validating registration: EtcdCluster, EtcdSnapshot and EtcdDefrag CREATE and UPDATE; EtcdMember
/// CREATE and UPDATE, the status subresource included (a rule for `etcdmembers` alone does not
/// cover `etcdmembers/status`, and a status write of `isVoter: false` would make the member's
/// deletion skip the etcd MemberRemove); at `<url>/validate`.
pub fn validating_configuration(
    name: &str,
    webhook: &Webhook,
    policy: FailurePolicy,
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: VALIDATING_WEBHOOK_NAME.to_string(),
            admission_review_versions: vec!["v1".to_string()],
            client_config: client_config(webhook.url("/validate"), webhook.ca_pem()),
            failure_policy: Some(policy.as_str().to_string()),
            match_policy: Some("Equivalent".to_string()),
            side_effects: "None".to_string(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            rules: Some(validating_rules()),
            ..Default::default()
        }]),
    }
}

/// The chart's extra validating rule with `memberDeletionProtection.enabled` (its default):
/// EtcdMember DELETE, judged by the webhook's deletion protection. Not part of
/// [`validating_rules`], under which the webhook API suite deletes members as the admin; the
/// chart's install suites (e2e_protect) run it through the apiserver.
pub fn member_deletion_rule() -> RuleWithOperations {
    rule(&["etcdmembers"], &["DELETE"])
}

/// The rules of the validating registration (see [`validating_configuration`]).
pub fn validating_rules() -> Vec<RuleWithOperations> {
    vec![
        rule(
            &[
                "etcdclusters",
                "etcdsnapshots",
                "etcddefrags",
                "etcdrecoveries",
                "etcdsnapshotschedules",
                "etcddefragpolicies",
            ],
            &["CREATE", "UPDATE"],
        ),
        rule(
            &["etcdmembers", "etcdmembers/status"],
            &["CREATE", "UPDATE"],
        ),
    ]
}

/// The mutating registration at `<url>/mutate`: CREATE and UPDATE of every kind but EtcdMember
/// (rejections with the full violation list happen here, before the CRD's CEL rules run;
/// defaults only on EtcdCluster CREATE).
pub fn mutating_configuration(
    name: &str,
    webhook: &Webhook,
    policy: FailurePolicy,
) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: MUTATING_WEBHOOK_NAME.to_string(),
            admission_review_versions: vec!["v1".to_string()],
            client_config: client_config(webhook.url("/mutate"), webhook.ca_pem()),
            failure_policy: Some(policy.as_str().to_string()),
            match_policy: Some("Equivalent".to_string()),
            side_effects: "None".to_string(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            reinvocation_policy: Some("Never".to_string()),
            rules: Some(vec![rule(
                &[
                    "etcdclusters",
                    "etcdsnapshots",
                    "etcddefrags",
                    "etcdrecoveries",
                    "etcdsnapshotschedules",
                    "etcddefragpolicies",
                ],
                &["CREATE", "UPDATE"],
            )]),
            ..Default::default()
        }]),
    }
}

/// Create or overwrite (server-side apply, forced) both configurations named `name` for
/// `webhook`. Takes effect asynchronously: follow with a probe through [`wait_until`].
pub async fn register(
    client: &Client,
    name: &str,
    webhook: &Webhook,
    policy: FailurePolicy,
) -> Result<(), Error> {
    let pp = PatchParams::apply("etcd-operator-webhook-tests").force();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            name,
            &pp,
            &Patch::Apply(validating_configuration(name, webhook, policy)),
        )
        .await
        .map_err(env::Error::kube(format!(
            "applying ValidatingWebhookConfiguration {name}"
        )))?;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            name,
            &pp,
            &Patch::Apply(mutating_configuration(name, webhook, policy)),
        )
        .await
        .map_err(env::Error::kube(format!(
            "applying MutatingWebhookConfiguration {name}"
        )))?;
    Ok(())
}

/// Delete both configurations named `name` (absent ones are fine).
pub async fn unregister(client: &Client, name: &str) -> Result<(), Error> {
    let dp = DeleteParams::default();
    fn gone<T>(result: Result<T, kube::Error>, what: &str, name: &str) -> Result<(), Error> {
        match result {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(env::Error::kube(format!("deleting {what} {name}"))(e).into()),
        }
    }
    gone(
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .delete(name, &dp)
            .await,
        "ValidatingWebhookConfiguration",
        name,
    )?;
    gone(
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .delete(name, &dp)
            .await,
        "MutatingWebhookConfiguration",
        name,
    )
}

/// Poll `probe` every 50 ms until it returns `Ok(Some(_))`; an `Err` stops at once. A probe that
/// wants its last observation in the timeout error keeps it itself (it is `FnMut`).
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, String>>,
{
    // `poll` retries on `Err`: a `Some` or a failure of the probe ends it (`Ok`), `None` does not.
    let answer = crate::harness::poll(timeout, POLL, || {
        let answer = probe();
        async move {
            match answer.await {
                Ok(Some(value)) => Ok(Ok(value)),
                Ok(None) => Err(()),
                Err(e) => Ok(Err(e)),
            }
        }
    })
    .await;
    match answer {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(failed(format!("waiting for {what}"), e)),
        Err(()) => Err(failed(
            format!("waiting for {what}"),
            format!("not reached within {timeout:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_samples_are_summed_by_label() {
        let text = "# TYPE etcd_operator_webhook_admission_requests counter\n\
            etcd_operator_webhook_admission_requests_total{webhook=\"validate\",operation=\"CREATE\",kind=\"EtcdCluster\",allowed=\"false\"} 2\n\
            etcd_operator_webhook_admission_requests_total{webhook=\"validate\",operation=\"UPDATE\",kind=\"EtcdMember\",allowed=\"false\"} 1\n\
            etcd_operator_webhook_admission_requests_total{webhook=\"mutate\",operation=\"CREATE\",kind=\"EtcdCluster\",allowed=\"true\"} 5\n\
            etcd_operator_webhook_admission_requests_created{webhook=\"mutate\"} 1700000000.0\n";
        let metric = "etcd_operator_webhook_admission_requests_total";
        assert_eq!(sum_samples(text, metric, &[]), 8.0);
        assert_eq!(
            sum_samples(
                text,
                metric,
                &[("webhook", "validate"), ("allowed", "false")]
            ),
            3.0
        );
        assert_eq!(sum_samples(text, metric, &[("kind", "EtcdMember")]), 1.0);
        assert_eq!(sum_samples(text, metric, &[("webhook", "nope")]), 0.0);
    }

    #[test]
    fn the_listening_line_gives_both_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("webhook.log");
        std::fs::write(
            &log,
            "not json\n{\"fields\":{\"message\":\"loaded\"}}\n\
             {\"level\":\"INFO\",\"fields\":{\"message\":\"webhook listening\",\"tls_addr\":\"127.0.0.1:4443\",\"admin_addr\":\"127.0.0.1:4080\"}}\n",
        )
        .unwrap();
        let (tls, admin) = listening_addresses(&log).unwrap();
        assert_eq!(tls.port(), 4443);
        assert_eq!(admin.port(), 4080);
        assert!(listening_addresses(&dir.path().join("absent")).is_none());
    }

    #[test]
    fn registrations_cover_the_documented_rules() {
        let rules = |c: &ValidatingWebhookConfiguration| {
            serde_json::to_value(c).unwrap()["webhooks"][0]["rules"].clone()
        };
        // Serialisation only; no webhook needed.
        let v = ValidatingWebhookConfiguration {
            webhooks: Some(vec![ValidatingWebhook {
                rules: Some(validating_rules()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let r = rules(&v);
        assert_eq!(r[0]["apiGroups"][0], api::v1alpha2::GROUP);
        assert_eq!(
            r[1]["resources"],
            serde_json::json!(["etcdmembers", "etcdmembers/status"])
        );
        assert_eq!(r[1]["operations"], serde_json::json!(["CREATE", "UPDATE"]));
        // caBundle is base64 of the PEM on the wire.
        let config = client_config("https://127.0.0.1:1/validate".into(), "PEM");
        assert_eq!(serde_json::to_value(config).unwrap()["caBundle"], "UEVN");
    }
}
