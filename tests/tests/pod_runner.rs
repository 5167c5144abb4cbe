//! The pod runner (a kubelet stand-in, `tests/src/podrunner`) on a real control plane with
//! kube-controller-manager and kube-scheduler, driven by hand-written manifests and no operator:
//! an etcd 3.6 cluster of three Pods forms behind a headless Service, data on PVCs survives Pod
//! recreation while a Memory emptyDir does not, Job Pods run to completion with logs served to
//! `kubectl logs`, readiness drives the hosts-file DNS, bad images and commands fail loudly, and
//! shutting the runner down leaves nothing behind.
//!
//! Needs root and `ETCD_OPERATOR_TESTBINS`. One control plane and one runner serve every test of
//! this binary; `zz_shutdown_leaves_no_namespace_mount_hosts_entry_or_process` runs last, waits
//! for the others, stops the runner and checks the machine is clean.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::ToSocketAddrs;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, ContainerState, ContainerStateTerminated, ContainerStatus, PersistentVolume,
    PersistentVolumeClaim, Pod, Secret, Service,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use tests::env::ControlPlane;
use tests::harness::{create, eventually};
use tests::podrunner::PodRunner;
use tests::OrPanic;
use tokio::sync::OnceCell;

const TOOLS: &str = "busybox:1.36";

struct Suite {
    cp: &'static ControlPlane,
    runner: PodRunner,
}

/// Tests using the suite right now; the final test waits for zero before it stops the runner.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

struct Active;

impl Active {
    fn enter() -> Self {
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        Active
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn suite() -> &'static Suite {
    static SUITE: OnceCell<Result<Suite, String>> = OnceCell::const_new();
    let suite = SUITE
        .get_or_init(|| async {
            let began = Instant::now();
            let (cp, runner) = PodRunner::start_shared().await?;
            report(&format!(
                "pod runner up in {:.1?} (control plane {:.1?}): slot {}, nodes {:?}, kubelet port {}, journal {}",
                began.elapsed(),
                cp.started_in(),
                runner.slot(),
                runner.nodes(),
                runner.kubelet_port(),
                runner.journal().display()
            ));
            Ok(Suite { cp, runner })
        })
        .await;
    match suite {
        Ok(s) => s,
        Err(e) => panic!("starting the control plane and pod runner: {e}"),
    }
}

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// One test's hold on the shared suite: the suite, its place among the running tests, a client
/// and a fresh namespace named after `prefix`.
async fn enter(prefix: &str) -> (&'static Suite, Active, Client, String) {
    let s = suite().await;
    let active = Active::enter();
    let client = s.cp.client().or_panic();
    let ns = s.cp.namespace(prefix).await.or_panic();
    (s, active, client, ns)
}

/// Waits until Pod `name` passes `done`; a timeout shows its last status.
async fn wait_pod(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Pod) -> bool,
) -> Pod {
    eventually(what, timeout, || async {
        let pod = pods.get(name).await.map_err(|e| e.to_string())?;
        if done(&pod) {
            Ok(pod)
        } else {
            Err(format!(
                "status: {}",
                serde_json::to_string(&pod.status).unwrap_or_default()
            ))
        }
    })
    .await
}

async fn wait_ready(pods: &Api<Pod>, name: &str, timeout: Duration) -> Pod {
    wait_pod(pods, name, &format!("pod {name} Ready"), timeout, |pod| {
        condition(pod, "Ready").as_deref() == Some("True")
    })
    .await
}

async fn wait_phase(pods: &Api<Pod>, name: &str, phase: &str, timeout: Duration) -> Pod {
    wait_pod(pods, name, &format!("pod {name} {phase}"), timeout, |pod| {
        pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase)
    })
    .await
}

/// Waits until the first container of Pod `name` passes `done`.
async fn wait_container(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&ContainerStatus) -> bool,
) -> Pod {
    wait_pod(pods, name, what, timeout, |pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .is_some_and(&done)
    })
    .await
}

/// Waits (`what`, up to `secs`) until the first container of Pod `name` has restarted once and
/// is ready again; returns how its first run ended.
async fn wait_restarted(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    secs: u64,
) -> ContainerStateTerminated {
    let timeout = Duration::from_secs(secs);
    let pod = wait_container(pods, name, what, timeout, |c| {
        c.restart_count == 1 && c.ready
    })
    .await;
    terminated(first_container(pod).last_state, "lastState.terminated")
}

/// The status of the Pod's first container.
fn first_container(pod: Pod) -> ContainerStatus {
    pod.status
        .unwrap_or_default()
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .next()
        .expect("a container status")
}

/// The terminated state in `state`, which must be there (`what` names it).
fn terminated(state: Option<ContainerState>, what: &str) -> ContainerStateTerminated {
    state.and_then(|s| s.terminated).expect(what)
}

async fn wait_gone(pods: &Api<Pod>, name: &str, timeout: Duration) {
    eventually(&format!("pod {name} gone"), timeout, || async {
        match pods.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(p) => Err(format!("still there: {:?}", p.status.and_then(|s| s.phase))),
        }
    })
    .await
}

/// A ReadWriteOnce claim for `storage`, of `class` or the default class.
fn claim(ns: &str, name: &str, storage: &str, class: Option<&str>) -> Value {
    let mut claim = json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    });
    if let Some(class) = class {
        claim["spec"]["storageClassName"] = json!(class);
    }
    claim
}

/// The PV bound to claim `name`.
async fn bound_pv(client: &Client, ns: &str, name: &str) -> String {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .or_panic()
        .spec
        .and_then(|s| s.volume_name)
        .expect("bound PV")
}

/// Deletes Pod `pod`, then its claim `name`, and waits (`what`) until the released PV is deleted.
async fn release_claim(client: &Client, ns: &str, pod: &str, name: &str, what: &str) {
    let pv = bound_pv(client, ns, name).await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    pods.delete(pod, &DeleteParams::default()).await.or_panic();
    wait_gone(&pods, pod, Duration::from_secs(30)).await;
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .or_panic();
    let pvs = Api::<PersistentVolume>::all(client.clone());
    eventually(what, Duration::from_secs(30), || async {
        match pvs.get_opt(&pv).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(v) => Err(format!("{:?}", v.status.and_then(|s| s.phase))),
        }
    })
    .await;
}

/// `kubectl logs -n <ns> <args>`, which must succeed.
async fn logs(cp: &ControlPlane, ns: &str, args: &[&str]) -> String {
    let mut argv = vec!["logs", "-n", ns];
    argv.extend_from_slice(args);
    cp.kubectl_ok(&argv).await.or_panic()
}

fn etcd_image(cp: &ControlPlane) -> String {
    let version = cp
        .testbins()
        .version("etcd-3.6")
        .unwrap_or_else(|| "v3.6.0".to_string());
    format!("quay.io/coreos/etcd:{version}")
}

fn etcd_member(ns: &str, i: usize, image: &str) -> Value {
    let name = format!("etcd-{i}");
    let initial: Vec<String> = (0..3)
        .map(|j| format!("etcd-{j}=http://etcd-{j}.etcd.{ns}.svc:2380"))
        .collect();
    json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "etcd"}},
        "spec": {
            "hostname": name,
            "subdomain": "etcd",
            "automountServiceAccountToken": false,
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532, "runAsNonRoot": true},
            "terminationGracePeriodSeconds": 10,
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
                    "--advertise-client-urls=http://$(POD_NAME).etcd.$(POD_NAMESPACE).svc:2379",
                    "--initial-advertise-peer-urls=http://$(POD_NAME).etcd.$(POD_NAMESPACE).svc:2380",
                    format!("--initial-cluster={}", initial.join(",")),
                    "--initial-cluster-state=new",
                    format!("--initial-cluster-token={ns}"),
                ],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "ETCDCTL_DIAL_TIMEOUT", "value": "2s"},
                ],
                "ports": [
                    {"name": "client", "containerPort": 2379},
                    {"name": "peer", "containerPort": 2380},
                    {"name": "metrics", "containerPort": 2381},
                ],
                "readinessProbe": {"httpGet": {"path": "/health", "port": "metrics"}, "periodSeconds": 1, "failureThreshold": 2},
                "livenessProbe": {"tcpSocket": {"port": 2380}, "periodSeconds": 2, "failureThreshold": 10},
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{name}")}}],
        },
    })
}

fn healthy_count(out: &tests::podrunner::ExecOutput) -> usize {
    format!("{}\n{}", out.stdout, out.stderr)
        .lines()
        .filter(|l| l.contains("is healthy"))
        .count()
}

#[tokio::test]
async fn etcd_36_members_form_a_cluster_replicate_and_survive_faults() {
    let (s, _active, client, ns) = enter("podrunner-etcd").await;
    let began = Instant::now();
    let image = etcd_image(s.cp);

    create::<Service>(
        &client,
        &ns,
        json!({
            "metadata": {"name": "etcd", "namespace": ns},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": true,
                "selector": {"app": "etcd"},
                "ports": [{"name": "client", "port": 2379}, {"name": "peer", "port": 2380}],
            },
        }),
    )
    .await;
    for i in 0..3 {
        let name = format!("data-etcd-{i}");
        create::<PersistentVolumeClaim>(&client, &ns, claim(&ns, &name, "1Gi", None)).await;
        create::<Pod>(&client, &ns, etcd_member(&ns, i, &image)).await;
    }
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut nodes = BTreeMap::new();
    for i in 0..3 {
        let pod = wait_ready(&pods, &format!("etcd-{i}"), Duration::from_secs(90)).await;
        let spec = pod.spec.unwrap_or_default();
        nodes.insert(format!("etcd-{i}"), spec.node_name.unwrap_or_default());
        let status = pod.status.unwrap_or_default();
        assert!(
            status
                .pod_ip
                .as_deref()
                .is_some_and(|ip| ip.starts_with("10.213.")),
            "{status:?}"
        );
        assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
        for c in [
            "PodScheduled",
            "Initialized",
            "ContainersReady",
            "Ready",
            "PodReadyToStartContainers",
        ] {
            assert!(
                status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|x| x.type_ == c && x.status == "True"),
                "condition {c} not True: {:?}",
                status.conditions
            );
        }
        let cs = &status.container_statuses.unwrap_or_default()[0];
        assert!(
            cs.ready
                && cs.started == Some(true)
                && cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some(),
            "{cs:?}"
        );
    }
    report(&format!(
        "etcd members ready after {:.1?} on {nodes:?}",
        began.elapsed()
    ));

    // The member runs as 65532 and its data dir, a PVC, belongs to fsGroup 65532.
    let pid = s
        .runner
        .container_pid(&ns, "etcd-0", "etcd")
        .expect("etcd-0 pid");
    let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status")).or_panic();
    assert!(
        proc_status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("65532")),
        "{proc_status}"
    );
    assert!(
        proc_status
            .lines()
            .any(|l| l.starts_with("Groups:") && l.contains("65532")),
        "{proc_status}"
    );
    let data = s.runner.claim_dir(&ns, "data-etcd-0").await.or_panic();
    assert_eq!(std::fs::metadata(&data).or_panic().gid(), 65532);
    assert!(
        data.join("member").is_dir(),
        "etcd wrote no member dir in {}",
        data.display()
    );

    let etcdctl = |pod: &'static str, args: &[&str]| {
        let ns = ns.clone();
        let mut argv = vec![
            "etcdctl".to_string(),
            "--endpoints=http://127.0.0.1:2379".to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        async move {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            s.runner.exec(&ns, pod, "etcd", &argv).await.or_panic()
        }
    };
    // Waits (`what`) until etcd-0 counts `healthy` healthy members.
    let wait_healthy = |healthy: usize, what: &'static str, secs: u64| {
        eventually(what, Duration::from_secs(secs), move || async move {
            let out = etcdctl("etcd-0", &["endpoint", "health", "--cluster"]).await;
            if healthy_count(&out) == healthy {
                Ok(out)
            } else {
                Err(format!("{out:?}"))
            }
        })
    };
    let out = wait_healthy(3, "3 healthy members", 30).await;
    assert!(
        out.stdout.contains(&format!("etcd-1.etcd.{ns}.svc:2379")),
        "{out:?}"
    );

    let put = etcdctl("etcd-0", &["put", "greeting", "hello from etcd-0"]).await;
    assert!(put.success() && put.stdout.contains("OK"), "{put:?}");
    let get = etcdctl(
        "etcd-2",
        &["get", "greeting", "--print-value-only", "--consistency=s"],
    )
    .await;
    assert_eq!(get.stdout.trim(), "hello from etcd-0", "{get:?}");

    // The host resolves member names through its /etc/hosts block and reaches the pod network.
    let addr = format!("etcd-1.etcd.{ns}.svc:2379")
        .to_socket_addrs()
        .or_panic()
        .next()
        .expect("an address for etcd-1");
    assert_eq!(Some(addr.ip()), s.runner.pod_ip(&ns, "etcd-1"));
    tokio::net::TcpStream::connect(addr).await.or_panic();

    // Fault: a killed member restarts (restartCount 1, lastState exit 137) and catches up.
    s.runner.kill_container(&ns, "etcd-2", "etcd").or_panic();
    let last = wait_restarted(&pods, "etcd-2", "etcd-2 restarted and Ready", 60).await;
    assert_eq!(last.exit_code, 137, "{last:?}");
    let get = etcdctl("etcd-2", &["get", "greeting", "--print-value-only"]).await;
    assert_eq!(get.stdout.trim(), "hello from etcd-0", "{get:?}");

    // Fault: a member cut off the network is unhealthy to its peers until the link is back.
    s.runner.cut_network(&ns, "etcd-1").await.or_panic();
    wait_healthy(2, "etcd-1 unreachable", 20).await;
    s.runner.restore_network(&ns, "etcd-1").await.or_panic();
    wait_healthy(3, "etcd-1 back", 30).await;
    report(&format!("etcd scenario done in {:.1?}", began.elapsed()));
}

fn tools_pod(ns: &str, name: &str, script: &str, extra: Value) -> Value {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": TOOLS,
                "command": ["sh", "-c", script],
            }],
        },
    });
    merge(&mut pod, extra);
    pod
}

/// Merge `b` into `a`: objects by key, arrays by index.
fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, v) in b.into_iter().enumerate() {
                match a.get_mut(i) {
                    Some(slot) => merge(slot, v),
                    None => a.push(v),
                }
            }
        }
        (a, b) => *a = b,
    }
}

#[tokio::test]
async fn pvc_data_survives_pod_recreation_and_memory_empty_dir_does_not() {
    let (s, _active, client, ns) = enter("podrunner-pvc").await;
    create::<PersistentVolumeClaim>(&client, &ns, claim(&ns, "data", "1Gi", None)).await;
    create::<Secret>(
        &client,
        &ns,
        json!({
            "metadata": {"name": "creds", "namespace": ns},
            "stringData": {"password": "s3cret", "other": "x"},
        }),
    )
    .await;
    create::<ConfigMap>(
        &client,
        &ns,
        json!({
            "metadata": {"name": "conf", "namespace": ns},
            "data": {"setting": "on"},
        }),
    )
    .await;
    let volumes = json!({
        "metadata": {"labels": {"tier": "test"}},
        "spec": {
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
            "containers": [{
                "name": "main",
                "image": TOOLS,
                "env": [
                    {"name": "MARKER", "value": "first-$(POD)"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                ],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "cache", "mountPath": "/cache"},
                    {"name": "creds", "mountPath": "/etc/creds"},
                    {"name": "conf", "mountPath": "/etc/conf"},
                    {"name": "info", "mountPath": "/etc/podinfo"},
                ],
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                {"name": "creds", "secret": {"secretName": "creds", "items": [{"key": "password", "path": "pw"}]}},
                {"name": "conf", "configMap": {"name": "conf"}},
                {"name": "info", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                ]}},
            ],
        },
    });
    // POD is defined after MARKER, so `$(POD)` stays literal in MARKER (Kubernetes' rule), while
    // the command sees every variable.
    let writer = tools_pod(
        &ns,
        "store",
        "echo \"$MARKER $(POD)\" > /data/marker && echo kept-in-memory > /cache/marker && exec sleep 3600",
        volumes.clone(),
    );
    create::<Pod>(&client, &ns, writer).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    wait_ready(&pods, "store", Duration::from_secs(60)).await;
    let sh = |script: &str| {
        let ns = ns.clone();
        let script = script.to_string();
        async move {
            s.runner
                .exec(&ns, "store", "main", &["sh", "-c", &script])
                .await
                .or_panic()
        }
    };
    let marker = eventually("the marker file", Duration::from_secs(10), || async {
        let out = sh("cat /data/marker").await;
        if out.success() {
            Ok(out.stdout)
        } else {
            Err(format!("{out:?}"))
        }
    })
    .await;
    assert_eq!(marker.trim(), "first-$(POD) store");
    let out = sh("id -u; id -G; cat /etc/creds/pw; echo; cat /etc/conf/setting; echo; cat /etc/podinfo/name; echo; cat /etc/podinfo/labels; echo; echo $PASSWORD; grep ' /cache ' /proc/mounts; hostname; ls /var/run/secrets/kubernetes.io/serviceaccount").await;
    assert!(out.success(), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "1000", "{out:?}");
    assert!(lines[1].split_whitespace().any(|g| g == "2000"), "{out:?}");
    assert_eq!(lines[2], "s3cret");
    assert_eq!(lines[3], "on");
    assert_eq!(lines[4], "store");
    assert!(out.stdout.contains("tier=\"test\""), "{out:?}");
    assert!(out.stdout.contains("\ns3cret\n"), "{out:?}");
    assert!(
        out.stdout.contains("tmpfs /cache tmpfs") && out.stdout.contains("size=16384k"),
        "{out:?}"
    );
    assert!(out.stdout.contains("\nstore\n"), "hostname: {out:?}");
    assert!(
        out.stdout.contains("token") && out.stdout.contains("ca.crt"),
        "{out:?}"
    );
    let data = s.runner.claim_dir(&ns, "data").await.or_panic();
    assert_eq!(
        std::fs::metadata(data.join("marker")).or_panic().gid(),
        2000
    );
    // In-cluster config works: the apiserver is at KUBERNETES_SERVICE_HOST:PORT inside the Pod
    // (a proxy on the Pod's loopback), trusted through the projected ca.crt and token.
    let version = sh("d=/var/run/secrets/kubernetes.io/serviceaccount; curl -sS --cacert $d/ca.crt -H \"Authorization: Bearer $(cat $d/token)\" https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/version").await;
    assert!(version.stdout.contains("\"gitVersion\""), "{version:?}");

    pods.delete("store", &DeleteParams::default())
        .await
        .or_panic();
    wait_gone(&pods, "store", Duration::from_secs(30)).await;
    let reader = tools_pod(&ns, "store", "exec sleep 3600", volumes);
    create::<Pod>(&client, &ns, reader).await;
    wait_ready(&pods, "store", Duration::from_secs(60)).await;
    let out = sh("cat /data/marker; ls -A /cache | wc -l").await;
    assert_eq!(out.stdout, "first-$(POD) store\n0\n", "{out:?}");

    // Fault hook: the claim's disk is wiped under the running Pod.
    s.runner.wipe_claim(&ns, "data").await.or_panic();
    let out = sh("ls -A /data | wc -l").await;
    assert_eq!(out.stdout.trim(), "0", "{out:?}");

    // A released volume is deleted with its directory.
    release_claim(&client, &ns, "store", "data", "the released PV deleted").await;
    assert!(!data.exists(), "{} outlived its PV", data.display());
}

#[tokio::test]
async fn sized_class_volumes_have_exactly_the_requested_capacity() {
    let (s, _active, client, ns) = enter("podrunner-sized").await;
    let class = s.runner.sized_storage_class();
    create::<PersistentVolumeClaim>(&client, &ns, claim(&ns, "small", "2Mi", Some(&class))).await;
    let pod = tools_pod(
        &ns,
        "fill",
        "df -k /data | tail -1; dd if=/dev/zero of=/data/f bs=1024 count=4096 2>&1; echo rc=$?",
        json!({"spec": {
            "restartPolicy": "Never",
            "containers": [{"volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "small"}}],
        }}),
    );
    create::<Pod>(&client, &ns, pod).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    wait_phase(&pods, "fill", "Succeeded", Duration::from_secs(60)).await;
    let out = logs(s.cp, &ns, &["fill"]).await;
    // df: 1K-blocks is the request; dd runs out of space at it.
    let total: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(total.get(1), Some(&"2048"), "{out}");
    assert!(
        out.contains("No space left on device") && out.contains("rc=1"),
        "{out}"
    );
    let dir = s.runner.claim_dir(&ns, "small").await.or_panic();
    release_claim(
        &client,
        &ns,
        "fill",
        "small",
        "the released sized PV deleted",
    )
    .await;
    let mounts = std::fs::read_to_string("/proc/self/mounts").or_panic();
    assert!(
        !dir.exists() && !mounts.contains(&dir.display().to_string()),
        "{} outlived its PV",
        dir.display()
    );
}

#[tokio::test]
async fn a_grown_claim_is_expanded_under_its_running_pod() {
    let (s, _active, client, ns) = enter("podrunner-expand").await;
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let class = s.runner.sized_storage_class();
    create::<PersistentVolumeClaim>(&client, &ns, claim(&ns, "grow", "2Mi", Some(&class))).await;
    let pod = tools_pod(
        &ns,
        "watch",
        "echo kept > /data/kept; while true; do df -k /data | tail -1; sleep 0.5; done",
        json!({"spec": {
            "containers": [{"volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "grow"}}],
        }}),
    );
    create::<Pod>(&client, &ns, pod).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let running = wait_phase(&pods, "watch", "Running", Duration::from_secs(60)).await;
    let patch = json!({"spec": {"resources": {"requests": {"storage": "4Mi"}}}});
    claims
        .patch("grow", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .or_panic();
    eventually(
        "the claim's capacity is 4Mi",
        Duration::from_secs(30),
        || async {
            let c = claims.get("grow").await.map_err(|e| e.to_string())?;
            let cap = c
                .status
                .and_then(|s| s.capacity)
                .and_then(|c| c.get("storage").cloned());
            match cap {
                Some(q) if q.0 == "4Mi" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // The running container sees the new size (no restart), and the data is still there.
    eventually(
        "df in the Pod shows 4096 KiB",
        Duration::from_secs(30),
        || async {
            let out =
                s.cp.kubectl_ok(&["logs", "-n", &ns, "watch", "--tail", "1"])
                    .await
                    .map_err(|e| e.to_string())?;
            match out.split_whitespace().nth(1) {
                Some("4096") => Ok(()),
                _ => Err(out),
            }
        },
    )
    .await;
    let dir = s.runner.claim_dir(&ns, "grow").await.or_panic();
    assert_eq!(
        std::fs::read_to_string(dir.join("kept")).or_panic(),
        "kept\n"
    );
    let now = pods.get("watch").await.or_panic();
    assert_eq!(now.metadata.uid, running.metadata.uid);
    let restarts: i32 = now
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .iter()
        .map(|c| c.restart_count)
        .sum();
    assert_eq!(restarts, 0);
    let pv = bound_pv(&client, &ns, "grow").await;
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&pv)
        .await
        .or_panic();
    assert_eq!(
        pv.spec
            .and_then(|s| s.capacity)
            .and_then(|c| c.get("storage").cloned())
            .map(|q| q.0),
        Some("4Mi".to_string())
    );
}

#[tokio::test]
async fn job_pod_succeeds_and_kubectl_logs_reads_current_and_previous() {
    let (s, _active, client, ns) = enter("podrunner-job").await;
    create::<Job>(&client, &ns, json!({
        "metadata": {"name": "hello", "namespace": ns},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "hello",
                    "image": TOOLS,
                    "command": ["sh", "-c", "echo hello from the job; echo second line; printf done > /dev/termination-log"],
                }],
            }},
        },
    }))
    .await;
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    eventually("job hello Complete", Duration::from_secs(60), || async {
        let job = jobs.get("hello").await.map_err(|e| e.to_string())?;
        let done = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            });
        if done {
            Ok(())
        } else {
            Err(format!("{:?}", job.status))
        }
    })
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pod = pods
        .list(&ListParams::default().labels("job-name=hello"))
        .await
        .or_panic()
        .items
        .pop()
        .expect("the job's pod");
    let name = pod.metadata.name.clone().unwrap_or_default();
    let pod = wait_phase(&pods, &name, "Succeeded", Duration::from_secs(30)).await;
    let term = terminated(first_container(pod).state, "terminated state");
    assert_eq!(
        (
            term.exit_code,
            term.reason.as_deref(),
            term.message.as_deref()
        ),
        (0, Some("Completed"), Some("done"))
    );
    let job_logs = logs(s.cp, &ns, &["job/hello"]).await;
    assert_eq!(job_logs, "hello from the job\nsecond line\n");
    let followed = logs(s.cp, &ns, &["job/hello", "--follow"]).await;
    assert_eq!(followed, job_logs);
    let tail = logs(s.cp, &ns, &[&name, "--tail=1"]).await;
    assert_eq!(tail, "second line\n");

    // OnFailure: the first run fails, the restart succeeds; `--previous` shows the failed run.
    create::<Pod>(&client, &ns, json!({
        "metadata": {"name": "retry", "namespace": ns},
        "spec": {
            "restartPolicy": "OnFailure",
            "containers": [{
                "name": "main",
                "image": TOOLS,
                "command": ["sh", "-c", "if [ -e /work/again ]; then echo second run; exit 0; fi; touch /work/again; echo first run; exit 3"],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}],
            }],
            "volumes": [{"name": "work", "emptyDir": {}}],
        },
    }))
    .await;
    let pod = wait_phase(&pods, "retry", "Succeeded", Duration::from_secs(60)).await;
    let cs = first_container(pod);
    assert_eq!(cs.restart_count, 1, "{cs:?}");
    assert_eq!(
        cs.last_state
            .and_then(|s| s.terminated)
            .map(|t| t.exit_code),
        Some(3)
    );
    // Init containers run one after the other, before the container.
    create::<Pod>(&client, &ns, json!({
        "metadata": {"name": "ordered", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [
                {"name": "first", "image": TOOLS, "command": ["sh", "-c", "sleep 1; echo one >> /work/order"],
                 "volumeMounts": [{"name": "work", "mountPath": "/work"}]},
                {"name": "second", "image": TOOLS, "command": ["sh", "-c", "echo two >> /work/order"],
                 "volumeMounts": [{"name": "work", "mountPath": "/work"}]},
            ],
            "containers": [{"name": "main", "image": TOOLS, "command": ["cat", "/work/order"],
                            "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
            "volumes": [{"name": "work", "emptyDir": {}}],
        },
    }))
    .await;
    let pod = wait_phase(&pods, "ordered", "Succeeded", Duration::from_secs(60)).await;
    let init: Vec<_> = pod
        .status
        .unwrap_or_default()
        .init_container_statuses
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            c.state
                .and_then(|s| s.terminated)
                .map(|t| (c.name, t.exit_code, t.reason))
        })
        .collect();
    assert_eq!(
        init,
        vec![
            Some(("first".into(), 0, Some("Completed".into()))),
            Some(("second".into(), 0, Some("Completed".into())))
        ]
    );
    let order = logs(s.cp, &ns, &["ordered"]).await;
    assert_eq!(order, "one\ntwo\n");

    // A binary an init container put into an emptyDir runs from there in another image (the
    // restore init containers run the operator binary inside the etcd image this way).
    create::<Pod>(&client, &ns, json!({
        "metadata": {"name": "from-volume", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [
                {"name": "install", "image": TOOLS, "command": ["sh", "-c", "cp /bin/echo /tools/echo"],
                 "volumeMounts": [{"name": "tools", "mountPath": "/tools"}]},
            ],
            "containers": [{"name": "main", "image": etcd_image(s.cp), "command": ["/tools/echo", "ran from the volume"],
                            "volumeMounts": [{"name": "tools", "mountPath": "/tools", "readOnly": true}]}],
            "volumes": [{"name": "tools", "emptyDir": {}}],
        },
    }))
    .await;
    wait_phase(&pods, "from-volume", "Succeeded", Duration::from_secs(60)).await;
    let out = logs(s.cp, &ns, &["from-volume"]).await;
    assert_eq!(out, "ran from the volume\n");

    let current = logs(s.cp, &ns, &["retry"]).await;
    let previous = logs(s.cp, &ns, &["retry", "--previous"]).await;
    assert_eq!(
        (current.as_str(), previous.as_str()),
        ("second run\n", "first run\n")
    );
}

fn hosts_has(text: &str, name: &str) -> bool {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .any(|l| l.split_whitespace().skip(1).any(|n| n == name))
}

#[tokio::test]
async fn failing_readiness_probe_removes_the_pod_from_service_dns() {
    let (s, _active, client, ns) = enter("podrunner-dns").await;
    create::<Service>(&client, &ns, json!({
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]},
    }))
    .await;
    create::<Pod>(&client, &ns, tools_pod(&ns, "web-0", "touch /state/ready && exec sleep 3600", json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "hostname": "web-0",
            "subdomain": "web",
            "containers": [{
                "name": "main",
                "image": TOOLS,
                "readinessProbe": {"exec": {"command": ["cat", "/state/ready"]}, "periodSeconds": 1, "failureThreshold": 1},
                "volumeMounts": [{"name": "state", "mountPath": "/state"}],
            }],
            "volumes": [{"name": "state", "emptyDir": {}}],
        },
    })))
    .await;
    create::<Pod>(
        &client,
        &ns,
        tools_pod(&ns, "client", "exec sleep 3600", json!({})),
    )
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    wait_ready(&pods, "web-0", Duration::from_secs(60)).await;
    wait_ready(&pods, "client", Duration::from_secs(60)).await;
    let fqdn = format!("web-0.web.{ns}.svc");
    let svc = format!("web.{ns}.svc.cluster.local");
    let client_hosts = s
        .runner
        .hosts_file(&ns, "client")
        .expect("client's hosts file");
    let visible = |want: bool| {
        let fqdn = fqdn.clone();
        let svc = svc.clone();
        let client_hosts = client_hosts.clone();
        async move {
            let host = std::fs::read_to_string("/etc/hosts").map_err(|e| e.to_string())?;
            let pod = std::fs::read_to_string(&client_hosts).map_err(|e| e.to_string())?;
            let seen = [
                hosts_has(&host, &fqdn),
                hosts_has(&host, &svc),
                hosts_has(&pod, &fqdn),
                hosts_has(&pod, "web-0.web"),
                hosts_has(&pod, "web"),
            ];
            if seen.iter().all(|s| *s == want) {
                Ok(())
            } else {
                Err(format!("{seen:?}\n{host}\n{pod}"))
            }
        }
    };
    eventually("web-0 in the hosts files", Duration::from_secs(30), || {
        visible(true)
    })
    .await;
    // Inside the Pod, /etc/hosts is that file.
    let inside = s
        .runner
        .exec(&ns, "client", "main", &["cat", "/etc/hosts"])
        .await
        .or_panic();
    assert!(hosts_has(&inside.stdout, &fqdn), "{inside:?}");

    s.runner
        .exec(&ns, "web-0", "main", &["rm", "/state/ready"])
        .await
        .or_panic();
    wait_pod(
        &pods,
        "web-0",
        "web-0 NotReady",
        Duration::from_secs(20),
        |pod| condition(pod, "Ready").as_deref() == Some("False"),
    )
    .await;
    eventually(
        "web-0 out of the hosts files",
        Duration::from_secs(30),
        || visible(false),
    )
    .await;

    s.runner
        .exec(&ns, "web-0", "main", &["touch", "/state/ready"])
        .await
        .or_panic();
    eventually(
        "web-0 back in the hosts files",
        Duration::from_secs(30),
        || visible(true),
    )
    .await;
}

fn proc_state(pid: u32) -> char {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.trim_start().chars().next())
        })
        .unwrap_or('?')
}

#[tokio::test]
async fn failing_liveness_probe_restarts_and_a_stopped_container_is_frozen_until_resumed() {
    let (s, _active, client, ns) = enter("podrunner-live").await;
    create::<Pod>(&client, &ns, tools_pod(&ns, "live", "touch /state/alive && exec sleep 3600", json!({
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "main",
                "image": TOOLS,
                "startupProbe": {"exec": {"command": ["test", "-f", "/state/alive"]}, "periodSeconds": 1, "failureThreshold": 30},
                "livenessProbe": {"exec": {"command": ["test", "-f", "/state/alive"]}, "periodSeconds": 1, "failureThreshold": 2},
                "volumeMounts": [{"name": "state", "mountPath": "/state"}],
            }],
            "volumes": [{"name": "state", "emptyDir": {}}],
        },
    })))
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    wait_ready(&pods, "live", Duration::from_secs(60)).await;

    // Fault hook: SIGSTOP freezes the processes (state T) until SIGCONT.
    let pid = s.runner.container_pid(&ns, "live", "main").expect("pid");
    s.runner.stop_container(&ns, "live", "main").or_panic();
    eventually("the container stopped", Duration::from_secs(5), || async {
        match proc_state(pid) {
            'T' => Ok(()),
            other => Err(format!("state {other}")),
        }
    })
    .await;
    s.runner.resume_container(&ns, "live", "main").or_panic();
    eventually(
        "the container running again",
        Duration::from_secs(5),
        || async {
            match proc_state(pid) {
                'S' | 'R' => Ok(()),
                other => Err(format!("state {other}")),
            }
        },
    )
    .await;

    // The liveness probe fails twice: the container is killed and started again.
    s.runner
        .exec(&ns, "live", "main", &["rm", "/state/alive"])
        .await
        .or_panic();
    let last = wait_restarted(&pods, "live", "a liveness restart", 30).await;
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (143, Some("Error")),
        "{last:?}"
    );
    assert_ne!(s.runner.container_pid(&ns, "live", "main"), Some(pid));

    // A new image in the spec restarts the container, as kubelet does on a spec change.
    pods.patch(
        "live",
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}),
        ),
    )
    .await
    .or_panic();
    wait_container(
        &pods,
        "live",
        "a restart for the new image",
        Duration::from_secs(30),
        |c| c.restart_count == 2 && c.ready && c.image == "busybox:1.37",
    )
    .await;
}

#[tokio::test]
async fn unknown_image_and_unknown_command_fail_the_pod_with_a_clear_status() {
    let (s, _active, client, ns) = enter("podrunner-bad").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    create::<Pod>(
        &client,
        &ns,
        json!({
            "metadata": {"name": "nginx", "namespace": ns},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        }),
    )
    .await;
    create::<Pod>(&client, &ns, json!({
        "metadata": {"name": "shell", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "etcd", "image": etcd_image(s.cp), "command": ["curl", "http://localhost:2379/health"]}],
        },
    }))
    .await;
    let waiting = eventually(
        "nginx ImagePullBackOff",
        Duration::from_secs(30),
        || async {
            let pod = pods.get("nginx").await.map_err(|e| e.to_string())?;
            let state = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.state.clone())
                .and_then(|s| s.waiting);
            match state {
                Some(w) if w.reason.as_deref() == Some("ImagePullBackOff") => {
                    Ok((w, pod.status.and_then(|s| s.phase)))
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let message = waiting.0.message.unwrap_or_default();
    assert!(
        message.contains("\"nginx:1.27\"") && message.contains("quay.io/coreos/etcd"),
        "{message}"
    );
    assert_eq!(waiting.1.as_deref(), Some("Pending"));

    let pod = wait_phase(&pods, "shell", "Failed", Duration::from_secs(30)).await;
    let term = terminated(first_container(pod).state, "terminated");
    assert_eq!(
        (term.exit_code, term.reason.as_deref()),
        (128, Some("StartError"))
    );
    let message = term.message.unwrap_or_default();
    assert!(
        message.contains("\"curl\"") && message.contains("etcd-3.6"),
        "{message}"
    );
}

/// What a runner that died without cleaning up leaves (a namespace with a process in it, a
/// bridge, a tmpfs under its state directory, an `/etc/hosts` block) is removed by the sweep every
/// runner does at start-up, once nobody holds that slot's lock.
#[test]
fn startup_sweep_removes_a_crashed_runners_leftovers() {
    use tests::podrunner::{dns, network};
    let slot = network::MAX_SLOTS - 1;
    let netns = format!("eop-{slot}-deadbeef");
    let bridge = format!("eopbr{slot}");
    network::ip(&["netns", "add", &netns]).or_panic();
    network::ip(&["link", "add", &bridge, "type", "bridge"]).or_panic();
    let mut squatter = std::process::Command::new("ip")
        .args(["netns", "exec", &netns, "sleep", "300"])
        .spawn()
        .or_panic();
    let tmpfs = network::state_dir(slot).join("pods/x/volumes/m");
    std::fs::create_dir_all(&tmpfs).or_panic();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&tmpfs)
        .status()
        .or_panic();
    assert!(mounted.success());
    dns::write_host_block(slot, Some("10.213.63.2\tleft.over.svc\n")).or_panic();
    assert!(std::fs::read_to_string("/etc/hosts")
        .or_panic()
        .contains("left.over.svc"));
    std::thread::sleep(Duration::from_millis(200));

    // Every runner sweeps at start-up, so a suite starting beside this one may take the slot's
    // lock and sweep it first: this sweep then finds nothing it may take. Either way the
    // leftovers must go; sweep again until they have (or the deadline), then check each one.
    let leftovers = || {
        std::path::Path::new("/run/netns").join(&netns).exists()
            || std::path::Path::new("/sys/class/net")
                .join(&bridge)
                .exists()
            || network::state_dir(slot).exists()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut swept = network::sweep_abandoned().or_panic();
    while !swept.contains(&slot) && leftovers() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        swept = network::sweep_abandoned().or_panic();
    }
    assert!(!std::path::Path::new("/run/netns").join(&netns).exists());
    assert!(!std::path::Path::new("/sys/class/net")
        .join(&bridge)
        .exists());
    assert!(!std::fs::read_to_string("/proc/mounts")
        .or_panic()
        .contains(&tmpfs.display().to_string()));
    assert!(!network::state_dir(slot).exists());
    assert!(!std::fs::read_to_string("/etc/hosts")
        .or_panic()
        .contains("left.over.svc"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while squatter.try_wait().or_panic().is_none() {
        assert!(
            Instant::now() < deadline,
            "the process in the swept namespace survived"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Last in name order, so libtest starts it after the others: waits until no other test uses the
/// runner, stops it, and checks that no namespace, link, mount, hosts entry or process is left.
#[tokio::test]
async fn zz_shutdown_leaves_no_namespace_mount_hosts_entry_or_process() {
    let s = suite().await;
    // Whatever else runs has entered by now; wait for it to finish.
    tokio::time::sleep(Duration::from_secs(2)).await;
    eventually(
        "the other tests to finish",
        Duration::from_secs(240),
        || async {
            match ACTIVE.load(Ordering::SeqCst) {
                0 => Ok(()),
                n => Err(format!("{n} still running")),
            }
        },
    )
    .await;
    // Something to clean up even when this test runs alone: a Pod with a tmpfs and a netns.
    let client = s.cp.client().or_panic();
    let ns = s.cp.namespace("podrunner-end").await.or_panic();
    create::<Pod>(
        &client,
        &ns,
        tools_pod(
            &ns,
            "last",
            "exec sleep 3600",
            json!({
                "spec": {"containers": [{"name": "main", "image": TOOLS,
                                         "volumeMounts": [{"name": "m", "mountPath": "/m"}]}],
                         "volumes": [{"name": "m", "emptyDir": {"medium": "Memory"}}]},
            }),
        ),
    )
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    wait_ready(&pods, "last", Duration::from_secs(60)).await;
    let slot = s.runner.slot();
    let netns_prefix = format!("eop-{slot}-");
    let state_dir = std::env::temp_dir()
        .join("eop-podrunner")
        .join(format!("slot-{slot}"));
    let netns_left = || -> Vec<String> {
        std::fs::read_dir("/run/netns")
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&netns_prefix))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mounts_left = || -> Vec<String> {
        std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.contains(&state_dir.display().to_string())
                    || l.contains(&format!("/run/netns/{netns_prefix}"))
            })
            .map(str::to_string)
            .collect()
    };
    let testbins = s.cp.testbins().dir().to_path_buf();
    let control_plane: Vec<u32> = s.cp.processes().iter().map(|p| p.pid()).collect();
    let strays = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| {
                        let pid: u32 = e.file_name().to_string_lossy().parse().ok()?;
                        let exe = std::fs::read_link(e.path().join("exe")).ok()?;
                        let ours = exe.starts_with(&testbins) || exe.ends_with("sleep");
                        let parent_is_us = std::fs::read_to_string(e.path().join("stat"))
                            .ok()
                            .and_then(|s| {
                                s.rsplit(')')
                                    .next()
                                    .and_then(|r| r.split_whitespace().nth(1))
                                    .map(str::to_string)
                            })
                            .is_some_and(|ppid| ppid == std::process::id().to_string());
                        (ours && parent_is_us && !control_plane.contains(&pid))
                            .then(|| format!("{pid} {}", exe.display()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        !netns_left().is_empty(),
        "the runner should have a netns before shutdown"
    );
    assert!(
        !mounts_left().is_empty(),
        "the runner should have a tmpfs before shutdown"
    );
    assert!(
        !strays().is_empty(),
        "the runner should have a container process before shutdown"
    );
    let hosts_block = format!("# BEGIN etcd-operator pod runner slot {slot} ");

    let began = Instant::now();
    s.runner.shutdown().await.or_panic();
    report(&format!("pod runner shut down in {:.1?}", began.elapsed()));

    assert_eq!(
        netns_left(),
        Vec::<String>::new(),
        "network namespaces left"
    );
    assert_eq!(mounts_left(), Vec::<String>::new(), "mounts left");
    assert_eq!(strays(), Vec::<String>::new(), "container processes left");
    let hosts = std::fs::read_to_string("/etc/hosts").or_panic();
    assert!(!hosts.contains(&hosts_block), "hosts block left:\n{hosts}");
    let links: Vec<String> = std::fs::read_dir("/sys/class/net")
        .or_panic()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n == &format!("eopbr{slot}") || n.starts_with(&format!("eop{slot}v")))
        .collect();
    assert_eq!(links, Vec::<String>::new(), "links left");
    assert!(!state_dir.exists(), "{} left", state_dir.display());
    // Idempotent.
    s.runner.shutdown().await.or_panic();
}
