//! `etcd-operator`: the controller binary.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use clap::Parser;
use controller::admin::{self, Admin, Transport};
use controller::context::{Config, Context};
use controller::metrics::Metrics;
use kube::Client;

/// The placeholder image of hand-crafted manifests; snapshot Jobs and restore init containers
/// would sit in ImagePullBackOff with it, so the operator refuses to start instead.
const PLACEHOLDER_IMAGE: &str = "controller:latest";

#[derive(Parser, Debug)]
#[command(
    name = "etcd-operator",
    version,
    about = "Kubernetes operator for etcd clusters"
)]
struct Args {
    /// Repository of the etcd image; members run `<repository>:v<spec.version>`.
    #[arg(
        long,
        env = "ETCD_IMAGE_REPOSITORY",
        default_value = "quay.io/coreos/etcd"
    )]
    etcd_image_repository: String,
    /// Only watch this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    watch_namespace: Option<String>,
    /// The operator's own image, used for snapshot Jobs and restore init containers.
    #[arg(long, env = "OPERATOR_IMAGE")]
    operator_image: Option<String>,
    /// Replace a member whose Pod could not be scheduled for this long (its Node gone with its
    /// local volume, its PVC lost), while the others keep quorum: `5m`, `90s`, `0` turns it off.
    /// An EtcdCluster opts out with the annotation
    /// `etcd-operator.cozystack.io/replace-broken-members: "false"`.
    #[arg(long, env = "REPLACE_BROKEN_MEMBERS_AFTER", default_value = "5m", value_parser = parse_off_or_duration)]
    replace_broken_members_after: std::time::Duration,
    /// The bound on one member's `Defragment` call is this plus `--defrag-timeout-per-gib` for
    /// each GiB of its dbSize, at most 10m. etcd runs a defragmentation to its end even when the
    /// caller gives up, so the call is never repeated: after a timeout the operator waits for
    /// the member to answer again and judges the outcome from its dbSize.
    #[arg(long, env = "DEFRAG_TIMEOUT_BASE", default_value = "60s", value_parser = parse_duration)]
    defrag_timeout_base: std::time::Duration,
    /// See `--defrag-timeout-base`.
    #[arg(long, env = "DEFRAG_TIMEOUT_PER_GIB", default_value = "60s", value_parser = parse_duration)]
    defrag_timeout_per_gib: std::time::Duration,
    /// Cluster DNS suffix for certificate SANs (default: from /etc/resolv.conf, else cluster.local).
    #[arg(long, env = "CLUSTER_DOMAIN")]
    cluster_domain: Option<String>,
    /// Admin listener: /healthz, /readyz, /metrics.
    #[arg(long, env = "ADMIN_LISTEN", default_value = "0.0.0.0:8081")]
    admin_listen: SocketAddr,
    /// Serve the admin listener over TLS (the certificate of --metrics-cert-dir) and /metrics
    /// only to a bearer token the apiserver authenticates (TokenReview) and allows `get` on
    /// `/metrics` (SubjectAccessReview). Needs RBAC `create` on tokenreviews and
    /// subjectaccessreviews (the chart's metrics.secure).
    #[arg(long, env = "METRICS_SECURE", default_value_t = false, action = clap::ArgAction::Set)]
    metrics_secure: bool,
    /// Directory of the mounted `kubernetes.io/tls` Secret (tls.crt, tls.key) of the secure
    /// admin listener; re-read as it rotates.
    #[arg(
        long,
        env = "METRICS_CERT_DIR",
        default_value = "/tmp/k8s-metrics-server/serving-certs"
    )]
    metrics_cert_dir: std::path::PathBuf,
    /// Elect a leader through a Lease so only one replica writes.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease (default: POD_NAMESPACE, else `default`).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    #[arg(long, default_value = "etcd-operator-leader")]
    leader_election_lease: String,
    /// The operator's own namespace, where it keeps its auth record (default: POD_NAMESPACE,
    /// else the kubeconfig context's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    operator_namespace: Option<String>,
    /// The Secret in the operator's namespace recording the root passwords it set in etcd
    /// (docs/auth.md); the only Secret the operator writes.
    #[arg(long, env = "AUTH_RECORD_SECRET", default_value = controller::auth::DEFAULT_RECORD_SECRET)]
    auth_record_secret: String,
    /// Log lines as `text` or `json` (one JSON object per line, for log collectors).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Without a subcommand the binary runs the controller.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug, Clone)]
enum Command {
    /// Adopt a running cluster of another operator in place (dry run unless --apply).
    Migrate(MigrateArgs),
    /// Prepare clusters for the reference operator (docs/migration.md, rolling back).
    PrepareRollback(PrepareRollbackArgs),
    /// The program of snapshot Jobs and restore init containers (docs/snapshots.md).
    #[command(subcommand)]
    SnapshotAgent(Box<controller::agent::AgentCommand>),
    /// Copy this executable into a directory (the restore init containers' shared emptyDir).
    InstallTools {
        /// The directory; the copy is `<DIR>/etcd-operator`.
        #[arg(long, value_name = "DIR")]
        to: std::path::PathBuf,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct MigrateArgs {
    /// Name of the `etcd.aenix.io/v1alpha1` EtcdCluster to adopt.
    #[arg(long, value_name = "CLUSTER")]
    from_aenix: String,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Act; without it the plan is printed and nothing is changed.
    #[arg(long)]
    apply: bool,
    /// etcd client URLs to read the member list from (default: each Pod's DNS name under the
    /// legacy headless Service, resolvable inside the cluster).
    #[arg(long, value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
}

#[derive(clap::Args, Debug, Clone)]
struct PrepareRollbackArgs {
    /// The EtcdCluster to prepare (default: every one in the namespace).
    cluster: Option<String>,
    /// Its namespace (default: the kubeconfig context's namespace).
    #[arg(short, long, conflicts_with = "all_namespaces")]
    namespace: Option<String>,
    /// Every EtcdCluster in every namespace.
    #[arg(short = 'A', long, conflicts_with = "cluster")]
    all_namespaces: bool,
    /// Print what would change and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Our controller's leader Lease, `<namespace>/<name>`: the command refuses while it is held.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    operator_lease: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// `svc.<domain>` from the resolv.conf search line, as kubelet writes it for cluster Pods.
fn cluster_domain_from_resolv_conf(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("search"))
        .flat_map(str::split_whitespace)
        .find_map(|d| d.strip_prefix("svc.").map(str::to_string))
}

/// SIGTERM or SIGINT, as a flag that turns true once: the SIGTERM listener is registered when
/// this is called (not when first polled) and lives as long as the process. Called once, before
/// anything that should stop gracefully: tokio keeps its signal handler installed once any
/// listener existed, so a SIGTERM arriving while no listener is polled (say, between winning the
/// leader election and the controllers' first poll) would be swallowed, and the operator would
/// run on until SIGKILL with its leader Lease held.
fn shutdown_signal() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        if let Some(mut term) = term {
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
            let _ = tx.send(true);
            return;
        }
        let _ = ctrl_c.await;
        let _ = tx.send(true);
    });
    rx
}

/// How long the controllers get after SIGTERM before the leader Lease is released anyway.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Resolves once [`shutdown_signal`]'s flag is true.
async fn stopping(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// A duration such as `5m` or `90s`, or `0` (off).
fn parse_off_or_duration(text: &str) -> Result<std::time::Duration, String> {
    match text.trim() {
        "0" => Ok(std::time::Duration::ZERO),
        t => humantime::parse_duration(t)
            .map_err(|e| format!("{text:?} is not a duration such as 5m, 90s or 0 (off): {e}")),
    }
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    match text.trim() {
        "0" => Ok(std::time::Duration::ZERO),
        t => humantime::parse_duration(t)
            .map_err(|e| format!("{text:?} is not a duration such as 60s, 500ms or 2m: {e}")),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args = Args::parse();
    if let Some(Command::Migrate(m)) = &args.command {
        let client = Client::try_default()
            .await
            .context("connecting to the Kubernetes API")?;
        let opts = controller::migrate::Options {
            namespace: m
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string()),
            cluster: m.from_aenix.clone(),
            apply: m.apply,
            etcd_endpoints: m.etcd_endpoints.clone(),
        };
        return controller::migrate::run(client, &opts).await;
    }
    if let Some(Command::PrepareRollback(r)) = &args.command {
        let client = Client::try_default()
            .await
            .context("connecting to the Kubernetes API")?;
        let namespace = (!r.all_namespaces).then(|| {
            r.namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string())
        });
        let opts = controller::rollback::Options {
            cluster: r.cluster.clone(),
            namespace,
            dry_run: r.dry_run,
            lease: r
                .operator_lease
                .clone()
                .unwrap_or_else(|| controller::rollback::DEFAULT_LEASE.to_string()),
            lease_given: r.operator_lease.is_some(),
        };
        return controller::rollback::run(client, &opts).await;
    }
    // Colours only on a terminal: `kubectl logs` of the Pod shows plain text.
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn")),
        );
    match args.log_format {
        LogFormat::Text => subscriber.init(),
        LogFormat::Json => subscriber.json().init(),
    }
    if let Some(Command::InstallTools { to }) = &args.command {
        let target = controller::install_tools::install(to)?;
        tracing::info!(target = %target.display(), "installed the operator binary");
        return Ok(());
    }
    if let Some(Command::SnapshotAgent(command)) = args.command.clone() {
        std::process::exit(controller::agent::run(*command).await);
    }
    if args.operator_image.as_deref() == Some(PLACEHOLDER_IMAGE) {
        bail!(
            "OPERATOR_IMAGE is the placeholder {PLACEHOLDER_IMAGE}: set it (or --operator-image) to this operator's own image, \
             as the Helm chart does from image.repository/image.tag"
        );
    }
    let cluster_domain = args
        .cluster_domain
        .clone()
        .or_else(|| {
            std::fs::read_to_string("/etc/resolv.conf")
                .ok()
                .and_then(|t| cluster_domain_from_resolv_conf(&t))
        })
        .unwrap_or_else(|| "cluster.local".to_string());

    let stop = shutdown_signal();
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let metrics = Metrics::new();
    let ready = Arc::new(AtomicBool::new(false));
    let admin = Admin {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let admin_addr = args.admin_listen;
    let transport = if args.metrics_secure {
        Transport::Secure {
            cert_dir: args.metrics_cert_dir.clone(),
            client: client.clone(),
        }
    } else {
        Transport::Plain
    };
    tokio::spawn(async move {
        if let Err(e) = admin::serve(admin_addr, admin, transport).await {
            tracing::error!(error = %e, "admin server failed");
        }
    });

    let config = Config {
        etcd_image_repository: args.etcd_image_repository.clone(),
        cluster_domain,
        operator_image: args.operator_image.clone(),
        replace_broken_members_after: Some(args.replace_broken_members_after)
            .filter(|d| !d.is_zero()),
        auth_record: controller::auth::RecordRef {
            namespace: args
                .operator_namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string()),
            name: args.auth_record_secret.clone(),
        },
        defrag_timeout: controller::config::DefragTimeout {
            base: args.defrag_timeout_base,
            per_gib: args.defrag_timeout_per_gib,
        },
    };
    let ctx = Arc::new(Context::new(client.clone(), config, metrics));

    // Ready once the API answers for our kinds (CRDs installed, RBAC in place). Metadata only:
    // a stored EtcdCluster the operator cannot decode must not keep it from starting (it is
    // reported by the watch, see `lenient`).
    let probe: kube::Api<api::v1alpha2::EtcdCluster> = match &args.watch_namespace {
        Some(ns) => kube::Api::namespaced(client.clone(), ns),
        None => kube::Api::all(client.clone()),
    };
    probe
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
        .context("listing EtcdClusters (are the CRDs installed and is RBAC granted?)")?;
    // cert-manager's API, for clusters that ask for cert-manager TLS. A failed probe is not
    // fatal: the clusters that need it ask again.
    match controller::cert_manager::installed(&client).await {
        Ok(present) => {
            tracing::info!(
                installed = present,
                "cert-manager.io/v1 Certificate discovery"
            );
            ctx.cert_manager.set(present);
        }
        Err(e) => tracing::warn!(error = %e, "could not ask discovery for cert-manager.io/v1"),
    }
    ready.store(true, Ordering::Relaxed);

    let shutdown = stopping(stop.clone());
    if args.leader_elect {
        let namespace = args
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".to_string());
        let manager = kube_lease_manager::LeaseManagerBuilder::new(
            client.clone(),
            &args.leader_election_lease,
        )
        .with_namespace(namespace)
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .context("creating the leader-election lease manager")?;
        let (mut leader, lease_task) = manager.watch().await;
        tracing::info!("waiting for leadership");
        let acquired = tokio::select! {
            _ = leader.wait_for(|l| *l) => true,
            _ = stopping(stop.clone()) => false,
        };
        if acquired {
            tracing::info!("acquired leadership; starting controllers");
            let lost = async move {
                let _ = leader.wait_for(|l| !*l).await;
                tracing::warn!("lost leadership; stopping");
            };
            // After the signal the controllers get SHUTDOWN_GRACE to finish their reconciles;
            // one still waiting then (say, on watch caches that a stopping process will never
            // fill) is dropped, as a crash would drop it (every step is safe to lose half-way),
            // so that the Lease is released within the Pod's termination grace period.
            let bounded = async {
                stopping(stop.clone()).await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
                tracing::warn!("the controllers did not stop within {SHUTDOWN_GRACE:?} of the signal; stopping them");
            };
            tokio::select! {
                _ = controller::run::run(ctx, args.watch_namespace.clone(), shutdown) => {}
                _ = lost => {}
                _ = bounded => {}
            }
        } else {
            // Signalled while waiting. The lease task may have taken the Lease a moment ago
            // (written to the API before this task saw the news, or both ready at once), so
            // the Lease is released as after leading, never left to expire.
            tracing::info!("signalled before leading; releasing the Lease if it was just taken");
            drop(leader);
        }
        // `lost` (or the branch above) held the last receiver: with it dropped, the lease task
        // releases the Lease, so a successor (the next Pod of a rollout) takes over at once,
        // not after the Lease's 15 s.
        match tokio::time::timeout(std::time::Duration::from_secs(5), lease_task).await {
            Ok(Ok(Ok(_))) => tracing::info!("released the leader Lease"),
            Ok(Ok(Err(e))) => {
                tracing::warn!(error = %e, "could not release the leader Lease; it expires on its own")
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the leader Lease task failed; the Lease expires on its own")
            }
            Err(_) => {
                tracing::warn!("releasing the leader Lease took over 5s; it expires on its own")
            }
        }
    } else {
        controller::run::run(ctx, args.watch_namespace.clone(), shutdown).await;
    }
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_format_is_text_unless_json_is_asked_for() {
        let args = Args::parse_from(["etcd-operator"]);
        assert_eq!(args.log_format, LogFormat::Text);
        let args = Args::parse_from(["etcd-operator", "--log-format=json"]);
        assert_eq!(args.log_format, LogFormat::Json);
        assert!(Args::try_parse_from(["etcd-operator", "--log-format=yaml"]).is_err());
    }

    #[test]
    fn migrate_is_a_subcommand_and_the_controller_runs_without_one() {
        assert!(Args::parse_from(["etcd-operator"]).command.is_none());
        let args = Args::parse_from([
            "etcd-operator",
            "migrate",
            "--from-aenix",
            "etcd",
            "-n",
            "prod",
        ]);
        let Some(Command::Migrate(m)) = args.command else {
            panic!("migrate subcommand not parsed");
        };
        assert_eq!(
            (m.from_aenix.as_str(), m.namespace.as_deref(), m.apply),
            ("etcd", Some("prod"), false)
        );
        assert!(Args::try_parse_from(["etcd-operator", "migrate"]).is_err());
    }

    #[test]
    fn prepare_rollback_takes_one_cluster_or_a_namespace_or_all_of_them() {
        let args = Args::parse_from(["etcd-operator", "prepare-rollback", "c", "-n", "prod"]);
        let Some(Command::PrepareRollback(r)) = args.command else {
            panic!("prepare-rollback subcommand not parsed");
        };
        assert_eq!(
            (r.cluster.as_deref(), r.namespace.as_deref(), r.dry_run),
            (Some("c"), Some("prod"), false)
        );
        let args = Args::parse_from(["etcd-operator", "prepare-rollback", "-A", "--dry-run"]);
        let Some(Command::PrepareRollback(r)) = args.command else {
            panic!("prepare-rollback subcommand not parsed");
        };
        assert!(r.all_namespaces && r.dry_run);
        assert!(Args::try_parse_from(["etcd-operator", "prepare-rollback", "c", "-A"]).is_err());
    }

    #[test]
    fn without_a_subcommand_the_controller_runs_and_the_agent_parses_its_contract() {
        let args = Args::parse_from(["etcd-operator", "--leader-elect=false"]);
        assert!(args.command.is_none());
        assert_eq!(
            args.replace_broken_members_after,
            std::time::Duration::from_secs(300)
        );
        for (flag, want) in [("0", 0), ("90s", 90), ("10m", 600)] {
            let a = Args::parse_from([
                "etcd-operator",
                &format!("--replace-broken-members-after={flag}"),
            ]);
            assert_eq!(
                a.replace_broken_members_after,
                std::time::Duration::from_secs(want)
            );
        }
        assert!(
            Args::try_parse_from(["etcd-operator", "--replace-broken-members-after=soon"]).is_err()
        );
        let args = Args::parse_from([
            "etcd-operator",
            "snapshot-agent",
            "save",
            "--endpoints=https://a:2379,https://b:2379",
            "--snapshot-name=s",
            "--snapshot-uid=u",
            "--ca-file=/ca",
            "--cert-file=/c",
            "--key-file=/k",
            "--s3-bucket=b",
            "--s3-key=p/",
            "--s3-endpoint=https://minio:9000",
            "--s3-force-path-style",
            "--s3-ca-file=/s3ca",
            "--termination-log=/tmp/t",
        ]);
        let Some(Command::SnapshotAgent(agent)) = args.command else {
            panic!("not the agent: {args:?}");
        };
        let controller::agent::AgentCommand::Save(save) = *agent else {
            panic!("not a save: {agent:?}");
        };
        assert_eq!(save.endpoints, ["https://a:2379", "https://b:2379"]);
        assert_eq!(save.s3.s3_region, "us-east-1");
        assert!(save.s3.s3_force_path_style);
        let args = Args::parse_from([
            "etcd-operator",
            "snapshot-agent",
            "restore",
            "--data-dir=/var/lib/etcd",
            "--name=m0",
            "--initial-cluster=m0=https://m0:2380",
            "--initial-cluster-token=t",
            "--initial-advertise-peer-urls=https://m0:2380",
            "--etcdutl=/usr/local/bin/etcdutl",
            "--pvc-file=/backup/s.db",
            "--expected-sha256=sha256:00",
        ]);
        assert!(matches!(
            args.command,
            Some(Command::SnapshotAgent(ref a)) if matches!(**a, controller::agent::AgentCommand::Restore(_))
        ));
        // --cert-file without --key-file is refused by the parser.
        assert!(Args::try_parse_from([
            "etcd-operator",
            "snapshot-agent",
            "save",
            "--endpoints=http://a:2379",
            "--snapshot-name=s",
            "--snapshot-uid=u",
            "--cert-file=/c",
        ])
        .is_err());
    }

    #[test]
    fn cluster_domain_comes_from_the_svc_search_entry() {
        let resolv = "nameserver 10.96.0.10\nsearch ns1.svc.cozy.local svc.cozy.local cozy.local\noptions ndots:5\n";
        assert_eq!(
            cluster_domain_from_resolv_conf(resolv).as_deref(),
            Some("cozy.local")
        );
        assert_eq!(
            cluster_domain_from_resolv_conf("nameserver 1.1.1.1\n"),
            None
        );
    }
}
