//! `make demo`: the embedded environment with one EtcdCluster to play with.
//!
//! Starts the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler),
//! the pod runner (Pods run as real processes on this machine: the chart's image maps to the
//! cargo-built binaries, etcd's to the testbins build) and the real cert-manager; installs the
//! operator as users do, `helm install … --set webhook.enabled=true
//! --set webhook.certificate.mode=certManager`, so the controller and the webhook run as the
//! chart's Pods; applies a 3-member EtcdCluster `default/demo`, waits until it is Ready, shows the
//! webhook's answer to a bad edit, prints the kubeconfig and commands to try, and stays up until
//! SIGINT or SIGTERM. Then it shuts the pod runner down (containers, network namespaces, its
//! `/etc/hosts` block), cert-manager and the control plane (its processes and temp root).
//!
//! `DEMO_NODE=real` (`make demo NODE=real`) runs it all on three real nodes instead of the pod
//! runner (`tests::node::RealNodes`: kubelet, containerd and runc, each node in a network namespace
//! of its own; the chart's Pods from the test image imported under the chart's image reference,
//! the members from the distroless etcd image), the webhook's default anti-affinity spreading the
//! members one per node.
//!
//! `DEMO_EXIT_AFTER_READY=1` exits (cleanly) right after printing, for non-interactive checks.
//! Needs root (the pod runner) and `ETCD_OPERATOR_TESTBINS` (the Makefile exports it).

use std::error::Error;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use tests::e2e::{condition, pod_ready};
use tests::env::Kubernetes;
use tests::install::{
    Installed, Nodes, CONTROLLER, NAMESPACE as OPERATOR_NAMESPACE, RELEASE, WEBHOOK,
};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

const NAMESPACE: &str = "default";
const CLUSTER: &str = "demo";
const REPLICAS: i32 = 3;
/// The etcd 3.6 the testbins build (tools/testbins/README.md); the pod runner maps its image to it.
const VERSION: &str = "3.6.16";
/// What `helm install` is given on top of the chart's defaults.
const HELM_VALUES: &[&str] = &[
    "webhook.enabled=true",
    "webhook.certificate.mode=certManager",
];
const READY_TIMEOUT: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(500);
const EXIT_AFTER_READY: &str = "DEMO_EXIT_AFTER_READY";
/// `real`: the demo on real nodes; unset or empty: on the pod runner.
const NODE: &str = "DEMO_NODE";
/// How many real nodes `DEMO_NODE=real` starts: one per member.
const REAL_NODES: u8 = 3;

type BoxError = Box<dyn Error + Send + Sync>;

/// Why the session ended.
enum End {
    /// `DEMO_EXIT_AFTER_READY` was set.
    Done,
    /// SIGINT or SIGTERM.
    Signal(&'static str),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let clock = Clock(Instant::now());
    let mut stop = match watch_signals() {
        Ok(stop) => stop,
        Err(e) => {
            eprintln!("demo: installing signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&clock, &mut stop).await {
        Ok(End::Done) => {
            clock.say("stopped cleanly");
            ExitCode::SUCCESS
        }
        Ok(End::Signal(name)) => {
            clock.say(&format!("stopped cleanly after {name}"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("\ndemo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Seconds since the demo started, in front of every progress line.
struct Clock(Instant);

impl Clock {
    fn say(&self, line: &str) {
        println!("[{:>6.1}s] {line}", self.0.elapsed().as_secs_f64());
    }
}

/// The first SIGINT/SIGTERM asks for a clean shutdown; a second one exits at once (children die
/// with the demo through their parent-death signal; the next pod runner sweeps what is left).
fn watch_signals() -> std::io::Result<watch::Receiver<Option<&'static str>>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        println!("\n{name}: shutting down (send it again to exit without cleaning up)");
        let _ = tx.send(Some(name));
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        eprintln!("second signal: exiting without cleaning up");
        std::process::exit(130);
    });
    Ok(rx)
}

/// Run `step` unless a signal arrives first; the step is dropped then, so only steps whose drop
/// cleans up after them (processes are killed on drop) may go through here.
async fn unless_stopped<T>(
    stop: &mut watch::Receiver<Option<&'static str>>,
    step: impl Future<Output = T>,
) -> Result<T, &'static str> {
    if let Some(name) = *stop.borrow() {
        return Err(name);
    }
    tokio::select! {
        out = step => Ok(out),
        _ = stop.changed() => Err(stop.borrow().unwrap_or("a signal")),
    }
}

async fn run(
    clock: &Clock,
    stop: &mut watch::Receiver<Option<&'static str>>,
) -> Result<End, BoxError> {
    if !nix::unistd::geteuid().is_root() {
        let why = "the demo needs root: the pod runner makes network namespaces, bind mounts \
                   and an /etc/hosts block: run it as root";
        return Err(why.into());
    }
    let real = match std::env::var(NODE).unwrap_or_default().as_str() {
        "" => false,
        "real" => true,
        other => {
            return Err(format!(
                "{NODE}={other:?}: use {NODE}=real (make demo NODE=real) for real nodes, or leave \
                 it unset for the pod runner"
            )
            .into())
        }
    };
    let nodes_text = if real {
        "three real nodes (kubelet, containerd, runc, kube-proxy; CoreDNS on the host)"
    } else {
        "the pod runner (3 Nodes, Pods as real processes)"
    };
    clock.say(&format!(
        "starting the control plane (etcd, kube-apiserver, kube-controller-manager, \
         kube-scheduler), {nodes_text} and cert-manager"
    ));
    // Not interruptible: a runner dropped half-started tears down on its own thread, which the
    // demo would not wait for. It starts in seconds; a signal meanwhile is seen right after.
    let mut env = if real {
        Installed::start_on_real_nodes(REAL_NODES).await?
    } else {
        Installed::start().await?
    };
    let place = match &env.nodes {
        Nodes::Runner(runner) => format!("pod runner slot {}", runner.slot()),
        Nodes::Real(_) => "real nodes, each in a network namespace of its own".to_string(),
    };
    clock.say(&format!(
        "environment up: control plane in {:.1?}, Nodes {} ({place}), cert-manager running",
        env.cp.started_in(),
        env.nodes.names().join(", "),
    ));

    let outcome = session(clock, stop, &env).await;

    match &mut env.nodes {
        Nodes::Runner(runner) => {
            clock.say("stopping the pod runner: the operator's and members' processes, network namespaces, /etc/hosts block");
            if let Err(e) = runner.shutdown().await {
                eprintln!("demo: pod runner shutdown: {e}");
            }
        }
        Nodes::Real(nodes) => {
            clock.say("stopping the real nodes: kubelets, containers, containerd, namespaces, /etc/hosts block");
            nodes.stop();
        }
    }
    clock.say("stopping cert-manager and the control plane");
    let logs = env.cp.log_dir().parent().map(Path::to_path_buf);
    drop(env);
    if let Some(logs) = logs {
        clock.say(&format!("logs kept in {}", logs.display()));
    }
    outcome
}

/// Install, cluster, wait, print, then wait for the end.
async fn session(
    clock: &Clock,
    stop: &mut watch::Receiver<Option<&'static str>>,
    env: &Installed,
) -> Result<End, BoxError> {
    let cp = &env.cp;
    let sets: String = HELM_VALUES.iter().map(|v| format!(" --set {v}")).collect();
    clock.say(&format!(
        "helm install {RELEASE} charts/etcd-operator --namespace {OPERATOR_NAMESPACE} --create-namespace{sets} --wait"
    ));
    match unless_stopped(stop, env.install(HELM_VALUES)).await {
        Err(name) => return Ok(End::Signal(name)),
        Ok(out) => out?,
    };
    for deployment in [CONTROLLER, WEBHOOK] {
        let pods = env.deployment_pods(deployment).await;
        let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
        clock.say(&format!("deploy/{deployment} ready: {}", names.join(", ")));
    }

    let manifest = cp.root().join("demo-etcdcluster.yaml");
    std::fs::write(&manifest, sample_manifest())
        .map_err(|e| format!("writing {}: {e}", manifest.display()))?;
    cp.kubectl_ok(&["apply", "-f", &manifest.to_string_lossy()])
        .await?;
    let applied = Instant::now();
    clock.say(&format!(
        "applied EtcdCluster {NAMESPACE}/{CLUSTER} ({REPLICAS} members, etcd {VERSION}) from {}",
        manifest.display()
    ));

    let pods = match unless_stopped(stop, wait_ready(clock, env)).await {
        Err(name) => return Ok(End::Signal(name)),
        Ok(pods) => pods?,
    };
    let to_ready = applied.elapsed();
    let etcdctl = cp.testbins().binary("etcd-3.6", "etcdctl")?;
    let first = pods.first().map(String::as_str).unwrap_or(CLUSTER);
    // The runbook's own command, run once here so a broken one shows.
    let member_list = cp
        .kubectl_ok(&[
            "exec",
            "-n",
            NAMESPACE,
            first,
            "--",
            "etcdctl",
            "--endpoints=http://localhost:2379",
            "member",
            "list",
            "-w",
            "table",
        ])
        .await
        .map_err(|e| e.to_string());
    // A bad edit, answered by the webhook Pods with every problem at once.
    let denial = cp
        .kubectl(&[
            "patch",
            "etcdcluster",
            CLUSTER,
            "-n",
            NAMESPACE,
            "--type=merge",
            "-p",
            BAD_EDIT,
        ])
        .await
        .map(|o| {
            if o.success {
                format!("(unexpectedly accepted) {}", o.stdout)
            } else {
                o.stderr
            }
        })
        .map_err(|e| e.to_string());
    print_banner(env, &pods, &etcdctl, &member_list, &denial, to_ready);

    if std::env::var(EXIT_AFTER_READY).is_ok_and(|v| !v.is_empty() && v != "0") {
        clock.say(&format!("{EXIT_AFTER_READY} is set: shutting down"));
        return Ok(End::Done);
    }
    clock.say("running until Ctrl-C (SIGINT) or SIGTERM");
    match unless_stopped(stop, watch_components(env)).await {
        Err(name) => Ok(End::Signal(name)),
        Ok(failure) => Err(failure),
    }
}

/// The bad edit the banner shows: a negative size and a downgrade.
const BAD_EDIT: &str = r#"{"spec":{"replicas":-1,"version":"3.5.0"}}"#;

fn sample_manifest() -> String {
    format!(
        "apiVersion: etcd-operator.cozystack.io/v1alpha2\n\
         kind: EtcdCluster\n\
         metadata:\n  name: {CLUSTER}\n  namespace: {NAMESPACE}\n\
         spec:\n  replicas: {REPLICAS}\n  version: \"{VERSION}\"\n"
    )
}

/// Poll until `readyMembers` is 3 and `Available=True/QuorumHealthy`, printing each change;
/// returns the member Pods' names.
async fn wait_ready(clock: &Clock, env: &Installed) -> Result<Vec<String>, BoxError> {
    let cp = &env.cp;
    let client = cp.client()?;
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), NAMESPACE);
    let members: Api<EtcdMember> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let selector = ListParams::default().labels(&api::labels::cluster_selector(CLUSTER));
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut seen_members: Vec<String> = Vec::new();
    let mut seen_pods: Vec<String> = Vec::new();
    let mut last_state = String::new();
    let mut last_error = String::new();
    let mut last_status = String::from("(none yet)");
    loop {
        cp.check_running()?;
        let observed = async {
            let cluster = clusters.get(CLUSTER).await?;
            let members = members.list(&selector).await?.items;
            let pods = pods.list(&selector).await?.items;
            Ok::<_, kube::Error>((cluster, members, pods))
        }
        .await;
        match observed {
            Err(e) => last_error = e.to_string(),
            Ok((cluster, members, pods)) => {
                for m in &members {
                    let name = m.name_any();
                    if !seen_members.contains(&name) {
                        let role = if m.spec.bootstrap {
                            "the seed: bootstraps the etcd cluster"
                        } else {
                            "joins as a learner, then is promoted"
                        };
                        clock.say(&format!("EtcdMember {name} created ({role})"));
                        seen_members.push(name);
                    }
                }
                for p in &pods {
                    let name = p.name_any();
                    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    if let Some(node) = node.filter(|_| !seen_pods.contains(&name)) {
                        clock.say(&format!("Pod {name} scheduled to {node}"));
                        seen_pods.push(name);
                    }
                }
                let status = cluster.status.clone().unwrap_or_default();
                let available = condition(&cluster, "Available");
                let available_text = available
                    .as_ref()
                    .map(|(s, r, _)| format!("Available={s}/{r}"))
                    .unwrap_or_else(|| "Available not set yet".into());
                let ready_pods = pods.iter().filter(|p| pod_ready(p)).count();
                let state = format!(
                    "members ready {}/{REPLICAS} (Pods ready {ready_pods}/{}), {available_text}",
                    status.ready_members,
                    pods.len()
                );
                if state != last_state {
                    clock.say(&state);
                    last_state = state;
                }
                last_status = serde_json::to_string_pretty(&cluster.status).unwrap_or_default();
                let healthy = available
                    .as_ref()
                    .is_some_and(|(s, r, _)| s == "True" && r == "QuorumHealthy");
                if status.ready_members == REPLICAS && healthy {
                    let mut names: Vec<String> = pods
                        .iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
                        .map(|p| p.name_any())
                        .collect();
                    names.sort();
                    return Ok(names);
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{NAMESPACE}/{CLUSTER} was not Ready ({REPLICAS} ready members, \
                 Available=True/QuorumHealthy) within {READY_TIMEOUT:?}\n\
                 last status: {last_status}\n\
                 last API error: {}\n\
                 operator log: kubectl logs -n {OPERATOR_NAMESPACE} deploy/{CONTROLLER} -c manager\n\
                 Pods' logs: {}\n\
                 component logs: {}",
                if last_error.is_empty() {
                    "none"
                } else {
                    &last_error
                },
                env.nodes.logs(cp).display(),
                cp.log_dir().display()
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

fn print_banner(
    env: &Installed,
    pods: &[String],
    etcdctl: &Path,
    member_list: &Result<String, String>,
    denial: &Result<String, String>,
    to_ready: Duration,
) {
    let cp = &env.cp;
    let kubectl = cp
        .testbins()
        .dir()
        .join(Kubernetes::Current.part())
        .join("kubectl");
    let k = format!(
        "{} --kubeconfig {}",
        kubectl.display(),
        cp.kubeconfig().display()
    );
    let first = pods.first().map(String::as_str).unwrap_or("<pod>");
    let run_dir: PathBuf = cp
        .log_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| cp.log_dir().to_path_buf());
    let rule = "=".repeat(100);
    println!("\n{rule}");
    println!(
        "EtcdCluster {NAMESPACE}/{CLUSTER} is Ready: {REPLICAS}/{REPLICAS} members, \
         Available=True/QuorumHealthy, {:.1?} after it was applied.",
        to_ready
    );
    println!("\nkubeconfig: {}", cp.kubeconfig().display());
    println!("logs:       {}", run_dir.display());
    println!("  operator       {k} logs -n {OPERATOR_NAMESPACE} deploy/{CONTROLLER} -c manager");
    println!("  webhook        {k} logs -n {OPERATOR_NAMESPACE} deploy/{WEBHOOK}");
    println!(
        "  control plane  {}/{{etcd,kube-apiserver,kube-controller-manager,kube-scheduler}}.log",
        cp.log_dir().display()
    );
    match &env.nodes {
        Nodes::Runner(runner) => {
            println!("  pod runner     {}", runner.journal().display());
            if let Some(dir) = runner.journal().parent() {
                println!("  member Pods    {}/pods/", dir.display());
            }
        }
        Nodes::Real(_) => println!(
            "  real nodes     {}/node-<name>/{{kubelet,containerd,kube-proxy}}.log, pod-logs/",
            env.nodes.logs(cp).display()
        ),
    }
    println!("\nTry it (from another shell on this machine):\n");
    println!("  {k} get deploy,pods,certificates -n {OPERATOR_NAMESPACE}");
    println!(
        "  {} --kubeconfig {} list -A",
        env.helm.binary().display(),
        cp.kubeconfig().display()
    );
    println!("  {k} get etcdcluster.etcd-operator.cozystack.io -A");
    println!(
        "  {k} get etcdmember -o custom-columns='NAME:.metadata.name,BOOTSTRAP:.spec.bootstrap,\
         DORMANT:.spec.dormant,READY:.status.conditions[?(@.type==\"Ready\")].status,\
         MEMBERID:.status.memberID'"
    );
    println!("  {k} get pod -l etcd-operator.cozystack.io/cluster={CLUSTER} -o wide");
    println!("  {k} logs {first}");
    println!("  {k} scale etcdcluster {CLUSTER} --replicas=5");
    println!("  {k} get etcdcluster {CLUSTER} -w");
    let ns = NAMESPACE;
    println!(
        "\nTalk to etcd as the runbook does (kubectl exec runs etcdctl inside a member Pod):\n"
    );
    println!(
        "  POD=$({k} get pod -l etcd-operator.cozystack.io/cluster={CLUSTER} -n {ns} -o jsonpath='{{.items[0].metadata.name}}')"
    );
    println!(
        "  {k} exec -n {ns} \"$POD\" -- etcdctl --endpoints=http://localhost:2379 endpoint health --cluster"
    );
    println!(
        "  {k} exec -n {ns} \"$POD\" -- etcdctl --endpoints=http://localhost:2379 member list -w table"
    );
    println!(
        "  LEADER=$({k} exec -n {ns} \"$POD\" -- etcdctl --endpoints=http://localhost:2379 endpoint status --cluster -w json \\\n      | jq -r '.[] | select(.Status.leader == .Status.header.member_id) | .Endpoint' | sed 's|http://||;s|:.*||;s|\\..*||')"
    );
    println!("  {k} logs -n {ns} \"$LEADER\" --tail=200");
    println!("  {k} get pod -n {ns} \"$POD\" -o jsonpath='{{.spec.volumes[?(@.name==\"data\")]}}'");
    println!(
        "  {k} exec -n {ns} \"$POD\" -- etcdctl --endpoints=http://localhost:2379 put hello world"
    );
    println!(
        "\nOr from the host, through a port-forward (or the member names the pod runner puts in /etc/hosts):\n"
    );
    println!("  {k} port-forward -n {ns} pod/{first} 12379:2379 &");
    println!(
        "  {} --endpoints=http://127.0.0.1:12379 get hello",
        etcdctl.display()
    );
    match member_list {
        Ok(table) => {
            println!(
                "\n$ kubectl exec -n {ns} {first} -- etcdctl --endpoints=http://localhost:2379 member list -w table"
            );
            for line in table.lines() {
                println!("  {line}");
            }
        }
        Err(e) => println!("\n(warning: `kubectl exec ... etcdctl member list` failed: {e})"),
    }
    println!(
        "\nA bad edit is answered by the webhook with every problem at once:\n\n  {k} patch etcdcluster {CLUSTER} --type=merge -p '{BAD_EDIT}'"
    );
    match denial {
        Ok(text) => {
            for line in text.lines() {
                println!("  {line}");
            }
        }
        Err(e) => println!("  (could not run it: {e})"),
    }
    println!("\nCtrl-C stops everything: the operator's Pods, the member processes, cert-manager, the control plane.");
    println!("{rule}\n");
}

/// Returns (as an error) when a component of the demo dies or the controller has no ready Pod.
async fn watch_components(env: &Installed) -> BoxError {
    let mut misses = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if let Err(e) = env.cp.check_running() {
            return e.into();
        }
        let ready = env.deployment_pods(CONTROLLER).await.iter().any(pod_ready);
        misses = if ready { 0 } else { misses + 1 };
        if misses >= 15 {
            return format!(
                "deploy/{CONTROLLER} has had no ready Pod for 30 s; \
                 kubectl logs -n {OPERATOR_NAMESPACE} deploy/{CONTROLLER} -c manager"
            )
            .into();
        }
    }
}
