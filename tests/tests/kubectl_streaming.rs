//! `kubectl exec` and `kubectl port-forward` against etcd member Pods run by the pod runner,
//! through a real kube-apiserver, with the real kubectl: the runbook's commands as written
//! (`kubectl exec -n <ns> "$POD" -- etcdctl --endpoints=http://localhost:2379 ...`, the leader
//! recipe through jq ending in `kubectl logs`, a Memory member's medium read from its Pod), exit
//! codes, stdin, port-forward for the host's etcdctl, and exec'd processes ending with their Pod
//! or runner. A member holds what the official etcd image holds (`etcd`, `etcdctl`, `etcdutl`):
//! a shell, `mount`, `cat`, `ls` or `tar` (so `kubectl cp`) inside it fails as on a real node;
//! shell-level checks (exit codes, a terminal) run in a tools Pod.
//!
//! Each path the streams can take to the kubelet is exercised and checked in the runner's record
//! of what arrived: kubectl's WebSocket passed through by a 1.37 apiserver to a Node declaring
//! `ExtendWebSocketsToKubelet` (`v5.channel.k8s.io`, `SPDY/3.1+portforward.k8s.io`), kubectl
//! forced to SPDY (`v4.channel.k8s.io`, `portforward.k8s.io`), the 1.37 apiserver translating
//! WebSocket to SPDY for a Node that declares nothing, and a 1.29 apiserver proxying both as they
//! are.
//!
//! Needs root and `ETCD_OPERATOR_TESTBINS`; `jq` on the host (`.ci/run` installs it).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tests::env::{ControlPlane, Kubernetes, Testbins};
use tests::harness::{create, eventually};
use tests::podrunner::PodRunner;
use tests::OrPanic;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::OnceCell;

/// kubectl's switch back to SPDY for exec/attach/cp.
const SPDY_EXEC: (&str, &str) = ("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
/// kubectl's switch back to SPDY for port-forward.
const SPDY_PORT_FORWARD: (&str, &str) = ("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false");
const MEMBERS: [&str; 3] = ["etcd-0", "etcd-1", "etcd-2"];

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// A host shell with the built `kubectl` and `etcdctl` first on `PATH` and `KUBECONFIG` set, so
/// the runbook's lines run as written.
struct Shell {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

#[derive(Debug)]
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Shell {
    fn new(cp: &ControlPlane, name: &str) -> Shell {
        let bin = cp.user_tools(name).or_panic();
        Shell {
            bin,
            kubeconfig: cp.kubeconfig().to_path_buf(),
            home: cp.root().to_path_buf(),
        }
    }

    fn command(&self, script: &str, env: &[(&str, &str)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", self.bin.display()),
            )
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .envs(env.iter().copied())
            .current_dir(&self.home)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, script: &str, env: &[(&str, &str)]) -> Ran {
        let out = tokio::time::timeout(Duration::from_secs(90), self.command(script, env).output())
            .await
            .unwrap_or_else(|_| panic!("timed out running {script}"))
            .or_panic();
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Run `script`, failing with its output unless it exits 0; returns stdout.
    async fn ok(&self, script: &str, env: &[(&str, &str)]) -> String {
        let ran = self.run(script, env).await;
        assert_eq!(ran.code, Some(0), "{script} (env {env:?}): {ran:?}");
        ran.stdout
    }
}

fn etcd_image(cp: &ControlPlane) -> String {
    let version = cp
        .testbins()
        .version("etcd-3.6")
        .unwrap_or_else(|| "v3.6.0".to_string());
    format!("quay.io/coreos/etcd:{version}")
}

/// An etcd member Pod as the operator builds one, pinned to `node`, its data directory a
/// Memory emptyDir; `peers` is the initial cluster (`None`: a single member on localhost).
fn member(ns: &str, name: &str, node: &str, image: &str, peers: Option<&[&str]>) -> Value {
    let (advertise_client, advertise_peer, initial) = match peers {
        Some(peers) => (
            "http://$(POD_NAME).etcd.$(POD_NAMESPACE).svc:2379".to_string(),
            "http://$(POD_NAME).etcd.$(POD_NAMESPACE).svc:2380".to_string(),
            peers
                .iter()
                .map(|p| format!("{p}=http://{p}.etcd.{ns}.svc:2380"))
                .collect::<Vec<_>>()
                .join(","),
        ),
        None => (
            "http://127.0.0.1:2379".to_string(),
            "http://127.0.0.1:2380".to_string(),
            format!("{name}=http://127.0.0.1:2380"),
        ),
    };
    json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"etcd-operator.cozystack.io/cluster": "demo"}},
        "spec": {
            "nodeName": node,
            "hostname": name,
            "subdomain": "etcd",
            "automountServiceAccountToken": false,
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532, "runAsNonRoot": true},
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "etcd",
                "image": image,
                "command": ["etcd"],
                "args": [
                    "--name=$(POD_NAME)",
                    "--data-dir=/var/lib/etcd",
                    "--listen-peer-urls=http://0.0.0.0:2380",
                    "--listen-client-urls=http://0.0.0.0:2379",
                    "--listen-metrics-urls=http://0.0.0.0:2381",
                    format!("--advertise-client-urls={advertise_client}"),
                    format!("--initial-advertise-peer-urls={advertise_peer}"),
                    format!("--initial-cluster={initial}"),
                    "--initial-cluster-state=new",
                ],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "ETCDCTL_DIAL_TIMEOUT", "value": "3s"},
                ],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 2381}, "periodSeconds": 1, "failureThreshold": 2},
            }],
            "volumes": [{"name": "data", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}],
        },
    })
}

async fn wait_ready(client: &Client, ns: &str, names: &[&str]) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    for name in names {
        eventually(
            &format!("pod {ns}/{name} Ready"),
            Duration::from_secs(60),
            || async {
                let pod = pods.get(name).await.map_err(|e| e.to_string())?;
                let ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                ready
                    .then_some(())
                    .ok_or_else(|| format!("{:?}", pod.status))
            },
        )
        .await;
    }
}

/// A fresh namespace (with its `default` ServiceAccount, which only kube-controller-manager
/// would make) holding the single member `solo` on `node`, Ready.
async fn solo(cp: &ControlPlane, prefix: &str, node: &str) -> (Client, String) {
    let client = cp.client().or_panic();
    let ns = cp.namespace(prefix).await.or_panic();
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), &ns);
    if accounts.get_opt("default").await.or_panic().is_none() {
        let account = json!({"metadata": {"name": "default", "namespace": ns}});
        if let Err(e) = accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(account).or_panic(),
            )
            .await
        {
            // kube-controller-manager may have made it in the meantime.
            assert!(matches!(&e, kube::Error::Api(s) if s.code == 409), "{e}");
        }
    }
    create::<Pod>(
        &client,
        &ns,
        member(&ns, "solo", node, &etcd_image(cp), None),
    )
    .await;
    wait_ready(&client, &ns, &["solo"]).await;
    (client, ns)
}

/// A fresh namespace holding the Pod `name` of the host-tools image on `worker-1`, running
/// `sh -c script`, Ready.
async fn tools_pod(cp: &ControlPlane, prefix: &str, name: &str, script: &str) -> String {
    let client = cp.client().or_panic();
    let ns = cp.namespace(prefix).await.or_panic();
    let pod = json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": "worker-1", "automountServiceAccountToken": false,
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}]},
    });
    create::<Pod>(&client, &ns, pod).await;
    wait_ready(&client, &ns, &[name]).await;
    ns
}

/// The protocols the runner's kubelet saw for `endpoint` sessions in `ns`.
fn protocols(runner: &PodRunner, ns: &str, endpoint: &str) -> Vec<String> {
    runner
        .stream_sessions()
        .into_iter()
        .filter(|s| s.namespace == ns && s.endpoint == endpoint)
        .map(|s| s.protocol)
        .collect()
}

/// Pids of host processes whose argv is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .or_panic()
}

/// `kubectl port-forward pod/<pod> <local>:2379` until dropped; returns once it listens.
async fn port_forward(
    shell: &Shell,
    ns: &str,
    pod: &str,
    local: u16,
    env: &[(&str, &str)],
) -> tokio::process::Child {
    let script = format!("exec kubectl port-forward -n {ns} pod/{pod} {local}:2379");
    let mut child = shell
        .command(&script, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .or_panic();
    let Some(stdout) = child.stdout.take() else {
        panic!("kubectl port-forward without a stdout pipe");
    };
    let mut lines = BufReader::new(stdout).lines();
    let wanted = format!("Forwarding from 127.0.0.1:{local} -> 2379");
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(&wanted) {
                return true;
            }
        }
        false
    })
    .await;
    if seen != Ok(true) {
        let _ = child.start_kill();
        let out = child.wait_with_output().await.or_panic();
        panic!(
            "kubectl port-forward did not print {wanted:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Keep reading so kubectl never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

/// The member ID (hex) etcd reports for the endpoint, and its name per `member list`.
async fn member_behind(shell: &Shell, endpoint: &str) -> String {
    let status = shell
        .ok(
            &format!("etcdctl --endpoints={endpoint} endpoint status -w json"),
            &[],
        )
        .await;
    let status: Value = serde_json::from_str(&status).or_panic();
    let Some(id) = status[0]["Status"]["header"]["member_id"].as_u64() else {
        panic!("no member_id in {status}");
    };
    let members = shell
        .ok(
            &format!("etcdctl --endpoints={endpoint} member list -w json"),
            &[],
        )
        .await;
    let members: Value = serde_json::from_str(&members).or_panic();
    members["members"]
        .as_array()
        .and_then(|all| all.iter().find(|m| m["ID"].as_u64() == Some(id)))
        .and_then(|m| m["name"].as_str())
        .unwrap_or_else(|| panic!("member {id} not in {members}"))
        .to_string()
}

struct Suite {
    cp: &'static ControlPlane,
    /// Nodes `worker-1..3`, declaring `ExtendWebSocketsToKubelet` like a 1.37 kubelet.
    runner: PodRunner,
    /// Node `plain-1`, declaring nothing: the apiserver translates WebSocket to SPDY for it.
    plain: PodRunner,
    shell: Shell,
    /// The namespace of the 3-member cluster `etcd-0..2` on the worker Nodes.
    ns: String,
}

async fn suite() -> &'static Suite {
    static SUITE: OnceCell<Result<Suite, String>> = OnceCell::const_new();
    let suite = SUITE
        .get_or_init(|| async {
            let began = Instant::now();
            let (cp, runner) = PodRunner::start_shared().await?;
            let plain = PodRunner::builder()
                .nodes(1)
                .node_prefix("plain")
                .websocket_streaming(false)
                .start(cp)
                .await
                .map_err(|e| e.to_string())?;
            let client = cp.client().map_err(|e| e.to_string())?;
            let ns = cp.namespace("streaming").await.map_err(|e| e.to_string())?;
            create::<Service>(&client, &ns, json!({
                "metadata": {"name": "etcd", "namespace": ns},
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
                         "selector": {"etcd-operator.cozystack.io/cluster": "demo"},
                         "ports": [{"name": "client", "port": 2379}, {"name": "peer", "port": 2380}]},
            }))
            .await;
            let image = etcd_image(cp);
            for (i, name) in MEMBERS.iter().enumerate() {
                let node = format!("worker-{}", i + 1);
                create::<Pod>(&client, &ns, member(&ns, name, &node, &image, Some(&MEMBERS))).await;
            }
            wait_ready(&client, &ns, &MEMBERS).await;
            report(&format!(
                "control plane, two pod runners and a 3-member cluster in {ns} ready in {:.1?}; journal {}",
                began.elapsed(),
                runner.journal().display(),
            ));
            let shell = Shell::new(cp, "streaming");
            Ok(Suite { cp, runner, plain, shell, ns })
        })
        .await;
    match suite {
        Ok(s) => s,
        Err(e) => panic!("starting the control plane, pod runners and etcd members: {e}"),
    }
}

/// The runbook's "talk to etcd directly", "member list" and "tail logs from the etcd leader"
/// blocks, verbatim but for `<ns>` and `<cluster>`.
async fn runbook_blocks(shell: &Shell, ns: &str, env: &[(&str, &str)]) {
    let pod = "POD=$(kubectl get pod -l etcd-operator.cozystack.io/cluster=demo -n NS \\\n  -o jsonpath='{.items[0].metadata.name}')\n"
        .replace("NS", ns);
    let health = shell
        .ok(
            &format!(
                "{pod}kubectl exec -n {ns} \"$POD\" -- etcdctl --endpoints=http://localhost:2379 \\\n  endpoint health --cluster"
            ),
            env,
        )
        .await;
    assert_eq!(
        health
            .matches("is healthy: successfully committed proposal")
            .count(),
        3,
        "{health}"
    );
    for m in MEMBERS {
        assert!(
            health.contains(&format!("http://{m}.etcd.{ns}.svc:2379")),
            "{health}"
        );
    }

    let table = shell
        .ok(
            &format!(
                "{pod}kubectl exec -n {ns} \"$POD\" -- etcdctl --endpoints=http://localhost:2379 member list -w table"
            ),
            env,
        )
        .await;
    assert!(table.starts_with("+--"), "{table}");
    for m in MEMBERS {
        assert!(table.contains(&format!("| {m} |")), "{table}");
    }

    let leader_recipe = format!(
        r#"{pod}LEADER=$(kubectl exec -n {ns} "$POD" -- etcdctl \
  --endpoints=http://localhost:2379 endpoint status --cluster -w json \
  | jq -r '.[] | select(.Status.leader == .Status.header.member_id) | .Endpoint' \
  | sed 's|http://||;s|:.*||;s|\..*||')
echo "leader=$LEADER"
kubectl logs -n {ns} "$LEADER" --tail=200"#
    );
    let out = shell.ok(&leader_recipe, env).await;
    let leader = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("leader="))
        .unwrap_or_default()
        .to_string();
    assert!(MEMBERS.contains(&leader.as_str()), "no leader found: {out}");
    assert!(
        out.contains("became leader at term"),
        "the leader's own log says it became leader: {out}"
    );
}

#[tokio::test]
async fn runbook_etcdctl_commands_run_inside_a_member_over_websocket_and_spdy() {
    let s = suite().await;
    runbook_blocks(&s.shell, &s.ns, &[]).await;
    assert!(
        protocols(&s.runner, &s.ns, "exec").contains(&"v5.channel.k8s.io".to_string()),
        "{:?}",
        s.runner.stream_sessions()
    );
    let before = protocols(&s.runner, &s.ns, "exec").len();
    runbook_blocks(&s.shell, &s.ns, &[SPDY_EXEC]).await;
    let spdy = &protocols(&s.runner, &s.ns, "exec")[before..];
    assert!(
        !spdy.is_empty() && spdy.iter().all(|p| p == "v4.channel.k8s.io"),
        "kubectl told to use SPDY reaches the kubelet over SPDY: {spdy:?}"
    );
}

/// What a member Pod holds: only `etcd`, `etcdctl` and `etcdutl`, as the official images. The
/// commands the runbooks of other operators run inside a member fail with the runtime's message,
/// and `kubectl cp` (which runs `tar` in the container) fails too.
#[tokio::test]
async fn a_member_holds_only_the_etcd_binaries_as_the_official_image() {
    let s = suite().await;
    let ns = &s.ns;
    for env in [&[][..], &[SPDY_EXEC][..]] {
        for command in [
            "sh -c true",
            "mount",
            "cat /etc/hostname",
            "ls /",
            "tar --version",
        ] {
            let ran = s
                .shell
                .run(&format!("kubectl exec -n {ns} etcd-0 -- {command}"), env)
                .await;
            let program = command.split(' ').next().unwrap_or_default();
            assert!(
                ran.code != Some(0)
                    && ran
                        .stderr
                        .contains(&format!("\"{program}\": executable file not found")),
                "{env:?}: `{command}` ran inside a member: {ran:?}"
            );
        }
        let version = s
            .shell
            .ok(
                &format!("kubectl exec -n {ns} etcd-0 -- etcdutl version"),
                env,
            )
            .await;
        assert!(version.contains("etcdutl version:"), "{version}");
    }
    let source = s.cp.root().join("cp-refused");
    std::fs::create_dir_all(source.join("client-cert-dir")).or_panic();
    let copied = s
        .shell
        .run(
            &format!(
                "cd {} && kubectl cp ./client-cert-dir \"{ns}/etcd-0:/tmp/cli\"",
                source.display()
            ),
            &[],
        )
        .await;
    assert_ne!(copied.code, Some(0), "kubectl cp into a member: {copied:?}");
}

/// Whether a member keeps its data in memory: its Pod says so (`medium: Memory` on the `data`
/// volume), the way that works with the official image (no `mount` inside it).
#[tokio::test]
async fn a_memory_members_medium_shows_in_its_pod() {
    let s = suite().await;
    let ns = &s.ns;
    let medium = s
        .shell
        .ok(
            &format!(
                "kubectl get pod etcd-1 -n {ns} -o jsonpath='{{.spec.volumes[?(@.name==\"data\")].emptyDir.medium}}'"
            ),
            &[],
        )
        .await;
    assert_eq!(medium, "Memory");
}

#[tokio::test]
async fn exit_codes_stderr_and_stdin_reach_kubectl() {
    let s = suite().await;
    let ns = &s.ns;
    let tools = tools_pod(s.cp, "exit", "shell", "sleep 3600").await;
    for env in [&[][..], &[SPDY_EXEC][..]] {
        let ran = s
            .shell
            .run(
                &format!("kubectl exec -n {tools} shell -- sh -c 'echo out; echo err >&2; exit 3'"),
                env,
            )
            .await;
        assert_eq!(ran.code, Some(3), "{env:?}: {ran:?}");
        assert_eq!(ran.stdout, "out\n");
        assert!(
            ran.stderr.starts_with("err\n")
                && ran.stderr.contains("command terminated with exit code 3"),
            "{ran:?}"
        );

        // stdin into a member: `etcdctl put <key>` without a value reads it from stdin.
        put_through_stdin(&s.shell, ns, "etcd-0", env).await;

        // etcdctl's own failure: its exit code and message come through.
        let refused = s
            .shell
            .run(
                &format!("kubectl exec -n {ns} etcd-0 -- {UNREACHABLE}"),
                env,
            )
            .await;
        assert_eq!(refused.code, Some(1), "{refused:?}");
        assert!(
            refused
                .stderr
                .contains("command terminated with exit code 1"),
            "{refused:?}"
        );

        let missing = s
            .shell
            .run(
                &format!("kubectl exec -n {ns} etcd-0 -- curl http://localhost:2379"),
                env,
            )
            .await;
        assert_eq!(missing.code, Some(1), "{missing:?}");
        assert!(
            missing
                .stderr
                .contains("\"curl\": executable file not found"),
            "{missing:?}"
        );
    }
}

/// An etcdctl call that fails (nothing listens on port 1): exit code 1.
const UNREACHABLE: &str =
    "etcdctl --endpoints=http://localhost:1 --dial-timeout=1s --command-timeout=2s get x";

/// `printf ... | kubectl exec -i <pod> -- etcdctl put <key>` (the value from stdin) and read back.
async fn put_through_stdin(shell: &Shell, ns: &str, pod: &str, env: &[(&str, &str)]) {
    let key = format!("stdin-{}", env.len());
    shell
        .ok(
            &format!(
                "printf 'line one\\nline two\\n' | kubectl exec -i -n {ns} {pod} -- etcdctl --endpoints=http://localhost:2379 put {key}"
            ),
            env,
        )
        .await;
    let back = shell
        .ok(
            &format!(
                "kubectl exec -n {ns} {pod} -- etcdctl --endpoints=http://localhost:2379 get {key} --print-value-only"
            ),
            env,
        )
        .await;
    assert_eq!(back, "line one\nline two\n\n");
}

#[tokio::test]
async fn exec_with_a_tty_gets_a_terminal_of_the_clients_size() {
    let s = suite().await;
    let ns = tools_pod(s.cp, "tty", "shell", "sleep 3600").await;
    for env in [&[][..], &[SPDY_EXEC][..]] {
        // `script` gives kubectl a terminal of 91x37; kubectl -t hands its size to the Pod's.
        // script's own stdin stays open (held here): at EOF it would type ^D into the session.
        let inner = format!(
            "stty cols 91 rows 37; kubectl exec -it -n {ns} shell -- sh -c 'tty; stty size; echo TERM=\\$TERM; exit 5'"
        );
        let mut script = s
            .shell
            .command(&format!("script -qec \"{inner}\" /dev/null"), env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .or_panic();
        let _stdin = script.stdin.take();
        let out = tokio::time::timeout(Duration::from_secs(60), script.wait_with_output())
            .await
            .or_panic()
            .or_panic();
        let ran = Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        assert_eq!(ran.code, Some(5), "{env:?}: {ran:?}");
        let lines: Vec<&str> = ran
            .stdout
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .collect();
        assert!(
            lines.first().is_some_and(|l| l.starts_with("/dev/pts/")),
            "{env:?}: {ran:?}"
        );
        assert_eq!(
            lines.get(1..3),
            Some(&["37 91", "TERM=xterm"][..]),
            "{ran:?}"
        );
    }
    let exec = protocols(&s.runner, &ns, "exec");
    assert_eq!(exec, ["v5.channel.k8s.io", "v4.channel.k8s.io"]);
}

#[tokio::test]
async fn kubectl_attach_streams_what_the_container_prints() {
    let s = suite().await;
    let ns = tools_pod(
        s.cp,
        "attach",
        "ticker",
        "i=0; while true; i=$((i+1)); do echo tick $i; sleep 0.2; done",
    )
    .await;
    let mut attach = s
        .shell
        .command(&format!("exec kubectl attach -n {ns} ticker"), &[])
        .stdout(Stdio::piped())
        .spawn()
        .or_panic();
    let Some(stdout) = attach.stdout.take() else {
        panic!("kubectl attach without a stdout pipe");
    };
    let mut lines = BufReader::new(stdout).lines();
    let ticks: Vec<u64> = tokio::time::timeout(Duration::from_secs(30), async {
        let mut ticks = Vec::new();
        while ticks.len() < 3 {
            match lines.next_line().await {
                Ok(Some(line)) => {
                    if let Some(n) = line.strip_prefix("tick ").and_then(|n| n.parse().ok()) {
                        ticks.push(n);
                    }
                }
                _ => break,
            }
        }
        ticks
    })
    .await
    .or_panic();
    let _ = attach.start_kill();
    let _ = attach.wait().await;
    assert!(
        ticks.len() == 3 && ticks.windows(2).all(|w| w[1] == w[0] + 1),
        "attach streams the container's output as it comes: {ticks:?}"
    );
    let with_stdin = s
        .shell
        .run(&format!("kubectl attach -i -n {ns} ticker"), &[])
        .await;
    assert_ne!(with_stdin.code, Some(0), "{with_stdin:?}");
    assert!(
        with_stdin.stderr.contains("has no stdin to attach to"),
        "{with_stdin:?}"
    );
    assert_eq!(protocols(&s.runner, &ns, "attach")[0], "v5.channel.k8s.io");
}

#[tokio::test]
async fn port_forward_lets_the_hosts_etcdctl_talk_to_that_member() {
    let s = suite().await;
    let ns = &s.ns;
    // The runbook's port first (WebSocket tunnel), then SPDY on a free one.
    for (env, local, key) in [
        (&[][..], 12379, "forwarded-websocket"),
        (&[SPDY_PORT_FORWARD][..], free_port(), "forwarded-spdy"),
    ] {
        let mut forward = port_forward(&s.shell, ns, "etcd-2", local, env).await;
        let endpoint = format!("http://127.0.0.1:{local}");
        assert_eq!(member_behind(&s.shell, &endpoint).await, "etcd-2");
        s.shell
            .ok(
                &format!("etcdctl --endpoints={endpoint} put {key} through-{local}"),
                &[],
            )
            .await;
        let read = s
            .shell
            .ok(
                &format!("kubectl exec -n {ns} etcd-0 -- etcdctl --endpoints=http://localhost:2379 get {key} --print-value-only"),
                &[],
            )
            .await;
        assert_eq!(read, format!("through-{local}\n"));
        let _ = forward.start_kill();
        let _ = forward.wait().await;
    }
    let seen = protocols(&s.runner, ns, "portforward");
    for wire in ["SPDY/3.1+portforward.k8s.io", "portforward.k8s.io"] {
        assert!(seen.iter().any(|p| p == wire), "{wire} not in {seen:?}");
    }
}

#[tokio::test]
async fn apiserver_translates_websocket_to_spdy_for_a_node_without_websocket_streaming() {
    let s = suite().await;
    let (_, ns) = solo(s.cp, "translated", "plain-1").await;
    let health = s
        .shell
        .ok(
            &format!("kubectl exec -n {ns} solo -- etcdctl --endpoints=http://localhost:2379 endpoint health --cluster"),
            &[],
        )
        .await;
    assert!(
        health.contains("http://127.0.0.1:2379 is healthy"),
        "{health}"
    );
    let mut forward = port_forward(&s.shell, &ns, "solo", free_port(), &[]).await;
    let _ = forward.start_kill();
    let _ = forward.wait().await;
    assert_eq!(protocols(&s.plain, &ns, "exec"), ["v4.channel.k8s.io"]);
    assert_eq!(
        protocols(&s.plain, &ns, "portforward"),
        ["portforward.k8s.io"]
    );
}

/// `kubectl exec <pod> -- etcdctl ... watch <marker>`: a command that runs until stopped (a
/// member has no shell), started and seen running; returns kubectl and the command's argv.
async fn waiting_exec(shell: &Shell, ns: &str, pod: &str) -> (tokio::process::Child, Vec<String>) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let marker = format!(
        "waiting-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    let argv: Vec<String> = [
        "etcdctl",
        "--endpoints=http://localhost:2379",
        "watch",
        &marker,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let kubectl = shell
        .command(
            &format!("exec kubectl exec -n {ns} {pod} -- {}", argv.join(" ")),
            &[],
        )
        .stdin(Stdio::piped())
        .spawn()
        .or_panic();
    eventually(
        "the exec'd command running",
        Duration::from_secs(30),
        || async {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            (!processes_running(&argv).is_empty())
                .then_some(())
                .ok_or("not yet".to_string())
        },
    )
    .await;
    (kubectl, argv)
}

#[tokio::test]
async fn exec_processes_end_with_their_pod() {
    let s = suite().await;
    let (client, ns) = solo(s.cp, "exec-ends", "worker-3").await;
    let (mut kubectl, argv) = waiting_exec(&s.shell, &ns, "solo").await;
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete("solo", &DeleteParams::default())
        .await
        .or_panic();
    eventually(
        "the exec'd command gone with its Pod",
        Duration::from_secs(30),
        || async {
            let left = processes_running(&argv);
            left.is_empty().then_some(()).ok_or(format!("{left:?}"))
        },
    )
    .await;
    let status = tokio::time::timeout(Duration::from_secs(30), kubectl.wait())
        .await
        .or_panic()
        .or_panic();
    assert!(
        !status.success(),
        "kubectl exec of a killed command: {status}"
    );
}

/// Kubernetes 1.29 proxies kubectl's upgrade to the kubelet as it is. Only its apiserver is
/// built, so this runs without kube-controller-manager and kube-scheduler: one member pinned to
/// the runner's Node, on localhost, the `default` ServiceAccount made by hand.
#[tokio::test]
async fn kubectl_exec_and_port_forward_against_kubernetes_1_29() {
    // The 1.29 apiserver must be built: missing or recorded as unbuildable fails with the reason.
    let bins = Testbins::from_env().or_panic();
    bins.part_dir(Kubernetes::V1_29.part()).or_panic();
    let cp = ControlPlane::builder()
        .kubernetes(Kubernetes::V1_29)
        .start()
        .await
        .or_panic();
    let runner = PodRunner::builder()
        .nodes(1)
        .node_prefix("old")
        .start(&cp)
        .await
        .or_panic();
    let (_, ns) = solo(&cp, "old", "old-1").await;
    let shell = Shell::new(&cp, "old");

    for env in [&[][..], &[SPDY_EXEC][..]] {
        let health = shell
            .ok(
                &format!("kubectl exec -n {ns} solo -- etcdctl --endpoints=http://localhost:2379 endpoint health --cluster"),
                env,
            )
            .await;
        assert!(
            health.contains("http://127.0.0.1:2379 is healthy"),
            "{health}"
        );
        let ran = shell
            .run(&format!("kubectl exec -n {ns} solo -- {UNREACHABLE}"), env)
            .await;
        assert_eq!(ran.code, Some(1), "{ran:?}");
        put_through_stdin(&shell, &ns, "solo", env).await;
    }
    for env in [&[][..], &[SPDY_PORT_FORWARD][..]] {
        let local = free_port();
        let mut forward = port_forward(&shell, &ns, "solo", local, env).await;
        assert_eq!(
            member_behind(&shell, &format!("http://127.0.0.1:{local}")).await,
            "solo"
        );
        let _ = forward.start_kill();
        let _ = forward.wait().await;
    }
    let mut exec: Vec<String> = protocols(&runner, &ns, "exec");
    exec.sort();
    exec.dedup();
    assert_eq!(exec, ["v4.channel.k8s.io", "v5.channel.k8s.io"]);
    let mut forwarded = protocols(&runner, &ns, "portforward");
    forwarded.sort();
    assert_eq!(
        forwarded,
        ["SPDY/3.1+portforward.k8s.io", "portforward.k8s.io"]
    );

    // An exec'd command still running when the runner stops ends with it.
    let (mut kubectl, argv) = waiting_exec(&shell, &ns, "solo").await;
    runner.shutdown().await.or_panic();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let left = processes_running(&argv);
    assert!(
        left.is_empty(),
        "exec'd processes left after the runner stopped: {left:?}"
    );
    let _ = tokio::time::timeout(Duration::from_secs(30), kubectl.wait()).await;
}
