//! One real node of [`super::RealNodes`]: containerd and the kubelet (and the node's kube-proxy)
//! in a network namespace of their own, as kind runs each node in a container of its own. The
//! namespace has one interface on the host's node network (its address is the node's InternalIP,
//! where its kubelet serves exec, logs and port-forward to the apiserver), the Pods' bridge the
//! CNI bridge plugin makes (`10.216.<index>.0/24`, the node's Pod range, no masquerade), and routes
//! to the Pod and Service ranges through the host only; its Pods route the Pod and Service ranges
//! and the node network (where the host answers and calls them) through it. No default route
//! anywhere, so nothing in the node (a Pod, or containerd pulling an image) reaches beyond the
//! machine.
//!
//! Its kubelet's Pod cgroups live under a cgroup root of the node's own
//! (`/<namespace>/kubepods`): two kubelets under one root would each remove the other's Pods'
//! cgroups as orphans.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use rcgen::ExtendedKeyUsagePurpose;

use super::{run, service_network, write, IMAGE_ARCHIVES, PAUSE_IMAGE};
use crate::env::control_plane::SERVICE_CLUSTER_IP_RANGE;
use crate::env::pki::Leaf;
use crate::env::process::Process;
use crate::env::{ControlPlane, Error};

const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// What a node needs from the host side of [`super::RealNodes`].
pub(super) struct Wiring<'a> {
    pub cp: &'a ControlPlane,
    pub kubelet: &'a Path,
    pub images: &'a Path,
    /// The host's bridge of the node network and its address, the nodes' gateway.
    pub bridge: &'a str,
    pub gateway: &'a str,
    /// The apiserver as the nodes reach it (the host's relay on the gateway).
    pub server_url: &'a str,
    /// The cluster DNS Service's ClusterIP (the kubelet's `clusterDNS`).
    pub cluster_dns: &'a str,
    pub root: &'a Path,
    pub logs: &'a Path,
    /// The prefix of the node's network namespace and interface names (`rn<slot>`).
    pub prefix: &'a str,
}

/// A running real node. [`RealNode::stop`] (or dropping it) stops it and removes its namespace,
/// its mounts and its cgroups.
pub struct RealNode {
    name: String,
    address: String,
    netns: String,
    /// The host's end of the node's veth pair.
    leg: String,
    root: PathBuf,
    socket: PathBuf,
    cgroup_root: String,
    kubelet: Option<Process>,
    containerd: Option<Process>,
    kube_proxy: Option<Process>,
    made_netns: bool,
}

crate::debug_fields!(RealNode, |n| {
    "name": n.name,
    "address": n.address,
    "netns": n.netns,
});

/// `program` run inside network namespace `netns` (nsenter execs it: the pid is the program's).
fn in_netns(netns: &str, program: &Path) -> Command {
    let mut command = Command::new("nsenter");
    command
        .arg(format!("--net=/run/netns/{netns}"))
        .arg("--")
        .arg(program);
    command
}

/// The cgroup v1 hierarchies of the host (and the unified one of a hybrid host).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("cgroup.procs").is_file())
        .collect()
}

/// Create cgroup `/<name>` in every hierarchy; a new cpuset cgroup gets its parent's CPUs and
/// memory nodes (an empty cpuset takes no process).
fn make_cgroup_root(name: &str) -> Result<(), Error> {
    for hierarchy in cgroup_hierarchies() {
        let dir = hierarchy.join(name);
        fs::create_dir_all(&dir)
            .map_err(Error::io(format!("creating cgroup {}", dir.display())))?;
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = fs::read_to_string(hierarchy.join(file)) {
                write(&dir.join(file), value.trim())?;
            }
        }
    }
    Ok(())
}

/// Remove cgroup `/<name>` and everything under it from every hierarchy.
pub(super) fn remove_cgroup_root(name: &str) {
    for hierarchy in cgroup_hierarchies() {
        super::remove_cgroup_tree(&hierarchy.join(name));
    }
}

impl RealNode {
    /// Start node `name` (the `index`th, from 1): its namespace on the node network, containerd
    /// with the images imported, the kubelet registered as `system:node:<name>`; returns once
    /// the Node is Ready.
    pub(super) async fn start(w: &Wiring<'_>, index: u8, name: &str) -> Result<Self, Error> {
        let netns = format!("{}-{index}", w.prefix);
        let address = format!(
            "{}.{}",
            w.gateway.rsplit_once('.').map_or("", |p| p.0),
            10 + index
        );
        let pod_cidr = format!("10.216.{index}.0/24");
        let pod_gateway = format!("10.216.{index}.1");
        let root = w.root.join(format!("node-{name}"));
        let logs = w.logs.join(format!("node-{name}"));
        let socket = root.join("containerd/containerd.sock");
        let leg = format!("{}v{index}", w.prefix);
        let mut node = RealNode {
            name: name.to_string(),
            address: address.clone(),
            netns: netns.clone(),
            leg: leg.clone(),
            root: root.clone(),
            socket: socket.clone(),
            cgroup_root: netns.clone(),
            kubelet: None,
            containerd: None,
            kube_proxy: None,
            made_netns: false,
        };

        // The namespace, its leg on the node network, and routes to the Pod and Service ranges
        // through the host (which routes each node's Pod range to that node).
        // A namespace outlives its name while a process of it lingers: its pair goes explicitly.
        let _ = run("ip", &["link", "del", &leg]);
        let _ = run("ip", &["netns", "del", &netns]);
        run("ip", &["netns", "add", &netns])?;
        node.made_netns = true;
        run(
            "ip",
            &[
                "link", "add", &leg, "type", "veth", "peer", "name", "eth0", "netns", &netns,
            ],
        )?;
        run("ip", &["link", "set", &leg, "master", w.bridge, "up"])?;
        let ns = |args: &[&str]| {
            let mut all = vec!["-n", netns.as_str()];
            all.extend_from_slice(args);
            run("ip", &all).map(|_| ())
        };
        ns(&["link", "set", "lo", "up"])?;
        ns(&["addr", "add", &format!("{address}/24"), "dev", "eth0"])?;
        ns(&["link", "set", "eth0", "up"])?;
        for range in [super::POD_RANGE, SERVICE_CLUSTER_IP_RANGE] {
            ns(&["route", "add", range, "via", w.gateway])?;
        }
        // The node routes what its Pods send (to Pods of other nodes, to Services kube-proxy
        // rewrote); with no default route nothing else goes anywhere.
        run(
            "ip",
            &[
                "netns",
                "exec",
                &netns,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
            ],
        )?;
        run(
            "ip",
            &[
                "route", "replace", &pod_cidr, "via", &address, "dev", w.bridge,
            ],
        )?;

        let cni_conf = root.join("cni/net.d");
        write(
            &cni_conf.join("10-node.conflist"),
            &serde_json::json!({
                "cniVersion": "1.0.0",
                "name": "real-node",
                "plugins": [
                    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
                     "hairpinMode": true,
                     "ipam": {"type": "host-local", "dataDir": root.join("cni/networks"),
                              "ranges": [[{"subnet": pod_cidr, "gateway": pod_gateway}]],
                              "routes": [{"dst": super::POD_RANGE, "gw": pod_gateway},
                                         {"dst": super::NODE_NETWORK, "gw": pod_gateway},
                                         {"dst": SERVICE_CLUSTER_IP_RANGE, "gw": pod_gateway}]}},
                    {"type": "portmap", "capabilities": {"portMappings": true}},
                ],
            })
            .to_string(),
        )?;

        // containerd, its own root, state and socket, in the node's namespace.
        let config = root.join("containerd.toml");
        write(
            &config,
            &format!(
                r#"version = 2
root = "{root}/containerd/root"
state = "{root}/containerd/state"
oom_score = 0
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_IMAGE}"
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          Root = "{root}/containerd/runc"
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{cni}"
      max_conf_num = 1
  [plugins."io.containerd.internal.v1.opt"]
    path = "{root}/containerd/opt"
"#,
                root = root.display(),
                socket = socket.display(),
                cni = cni_conf.display(),
            ),
        )?;
        let mut containerd = in_netns(&netns, Path::new("/usr/bin/containerd"));
        containerd.arg(format!("--config={}", config.display()));
        node.containerd = Some(Process::spawn(
            &format!("containerd-{name}"),
            containerd,
            &logs.join("containerd.log"),
        )?);
        let address_arg = node.address_arg();
        let containerd_log = logs.join("containerd.log");
        crate::harness::poll(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async { run("ctr", &[&address_arg, "version"]).map(|_| ()) },
        )
        .await
        .map_err(|e| {
            Error::Unsupported(format!(
                "containerd of node {name} never answered on {} ({e}); log {}",
                socket.display(),
                containerd_log.display()
            ))
        })?;
        for archive in IMAGE_ARCHIVES {
            run(
                "ctr",
                &[
                    &address_arg,
                    "-n",
                    "k8s.io",
                    "images",
                    "import",
                    &w.images.join(archive).to_string_lossy(),
                ],
            )?;
        }

        // The kubelet, registered as system:node:<name>, its Pods' cgroups under its own root.
        make_cgroup_root(&node.cgroup_root)?;
        let (cert, key) = w.cp.pki().client_ca.sign(Leaf {
            common_name: &format!("system:node:{name}"),
            organizations: &["system:nodes"],
            sans: &[],
            usages: &[ExtendedKeyUsagePurpose::ClientAuth],
        })?;
        let pki = root.join("pki");
        write(&pki.join("node.crt"), &cert)?;
        write(&pki.join("node.key"), &key)?;
        let kubeconfig = root.join("kubelet.kubeconfig");
        crate::env::control_plane::write_kubeconfig_for(
            &kubeconfig,
            w.server_url,
            w.cp.pki(),
            (
                &format!("system:node:{name}"),
                serde_json::json!({
                    "client-certificate": pki.join("node.crt"),
                    "client-key": pki.join("node.key"),
                }),
            ),
            None,
        )?;
        let kubelet_config = root.join("kubelet.yaml");
        let manifests = root.join("manifests");
        fs::create_dir_all(&manifests).map_err(Error::io("creating the static Pod directory"))?;
        let kubelet_yaml = serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "staticPodPath": manifests,
            "containerRuntimeEndpoint": format!("unix://{}", socket.display()),
            "imageServiceEndpoint": format!("unix://{}", socket.display()),
            "failCgroupV1": false,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": format!("/{}", node.cgroup_root),
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "imageMinimumGCAge": "24h",
            "failSwapOn": false,
            "address": address,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": false},
                "webhook": {"enabled": true},
                "x509": {"clientCAFile": w.cp.pki().client_ca_file},
            },
            "authorization": {"mode": "Webhook"},
            // Kept with the test's other logs (the root goes with the control plane).
            "podLogsDir": logs.join("pod-logs"),
            "volumePluginDir": root.join("volume-plugins"),
            "resolvConf": "",
            "makeIPTablesUtilChains": false,
            "clusterDomain": "cluster.local",
            "clusterDNS": [w.cluster_dns],
            "serializeImagePulls": false,
            "registerNode": true,
        });
        write(&kubelet_config, &kubelet_yaml.to_string())?;
        let mut kubelet = in_netns(&netns, w.kubelet);
        kubelet
            .arg(format!("--config={}", kubelet_config.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--root-dir={}", root.join("kubelet").display()))
            .arg(format!("--cert-dir={}", pki.join("kubelet").display()))
            .arg(format!("--hostname-override={name}"))
            .arg(format!("--node-ip={address}"))
            .arg("--v=2");
        node.kubelet = Some(Process::spawn(
            &format!("kubelet-{name}"),
            kubelet,
            &logs.join("kubelet.log"),
        )?);

        let nodes: Api<Node> = Api::all(w.cp.client()?);
        let ready = crate::harness::poll(READY_TIMEOUT, Duration::from_millis(500), || {
            let nodes = nodes.clone();
            async move {
                let ready = nodes.get_opt(name).await.ok().flatten().is_some_and(|n| {
                    n.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                });
                if ready {
                    Ok(())
                } else {
                    Err(())
                }
            }
        })
        .await;
        if ready.is_err() {
            return Err(Error::Unsupported(format!(
                "Node {name} not Ready after {READY_TIMEOUT:?}; kubelet log {}",
                logs.join("kubelet.log").display()
            )));
        }

        let mut kube_proxy = in_netns(&netns, &super::nodebin("kube-proxy")?);
        kube_proxy.arg("--v=2");
        node.kube_proxy = Some(
            service_network::start_kube_proxy(
                w.cp,
                kube_proxy,
                service_network::KubeProxyNode {
                    name,
                    address: &address,
                    server_url: w.server_url,
                },
                &root.join("kube-proxy"),
                &logs.join("kube-proxy.log"),
            )
            .await?,
        );
        Ok(node)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's address (its InternalIP, on the node network).
    pub fn address(&self) -> &str {
        &self.address
    }

    fn address_arg(&self) -> String {
        format!("--address={}", self.socket.display())
    }

    /// The pid of the main process of container `id` in this node's containerd, if it has it.
    pub(super) fn task_pid(&self, id: &str) -> Result<Option<i32>, Error> {
        let tasks = run("ctr", &[&self.address_arg(), "-n", "k8s.io", "tasks", "ls"])?;
        let Some(pid) = tasks.lines().find_map(|l| {
            let mut fields = l.split_whitespace();
            (fields.next() == Some(id)).then(|| fields.next())?
        }) else {
            return Ok(None);
        };
        pid.parse()
            .map(Some)
            .map_err(|e| Error::Unsupported(format!("task {id}'s pid {pid:?}: {e}")))
    }

    /// Import the OCI image archive `archive` into the node's containerd (namespace `k8s.io`)
    /// under `reference`.
    pub(super) fn import_image(&self, archive: &Path, reference: &str) -> Result<(), Error> {
        let address = self.address_arg();
        let listed = |what: &str| {
            run("ctr", &[&address, "-n", "k8s.io", "images", "ls", "-q"]).map_err(|e| {
                Error::Unsupported(format!("listing the node's images {what} an import: {e}"))
            })
        };
        let before = listed("before")?;
        let repository = reference.rsplit_once(':').map_or(reference, |(r, _)| r);
        run(
            "ctr",
            &[
                &address,
                "-n",
                "k8s.io",
                "images",
                "import",
                "--base-name",
                repository,
                &archive.to_string_lossy(),
            ],
        )?;
        let after = listed("after")?;
        let imported: Vec<&str> = after
            .lines()
            .filter(|l| {
                !l.is_empty() && !l.starts_with("sha256:") && !before.lines().any(|b| b == *l)
            })
            .collect();
        if after.lines().any(|l| l == reference) {
            return Ok(());
        }
        let [source] = imported[..] else {
            return Err(Error::Unsupported(format!(
                "importing {} named {imported:?}, not one image to tag {reference}",
                archive.display()
            )));
        };
        run(
            "ctr",
            &[&address, "-n", "k8s.io", "images", "tag", source, reference],
        )
        .map(|_| ())
    }

    /// Stop kube-proxy, the kubelet, every container and containerd; unmount what they left
    /// under the node's root, remove its cgroups and its namespace.
    pub fn stop(&mut self) {
        if let Some(kube_proxy) = self.kube_proxy.take() {
            kube_proxy.kill();
        }
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.kill();
        }
        let address_arg = self.address_arg();
        if self.containerd.is_some() {
            let listed = run("ctr", &[&address_arg, "-n", "k8s.io", "tasks", "ls", "-q"])
                .unwrap_or_default();
            for task in listed.lines().filter(|t| !t.is_empty()) {
                let _ = run(
                    "ctr",
                    &[
                        &address_arg,
                        "-n",
                        "k8s.io",
                        "tasks",
                        "kill",
                        "-s",
                        "KILL",
                        task,
                    ],
                );
                std::thread::sleep(Duration::from_millis(200));
                let _ = run(
                    "ctr",
                    &[&address_arg, "-n", "k8s.io", "tasks", "rm", "-f", task],
                );
            }
        }
        if let Some(containerd) = self.containerd.take() {
            containerd.kill();
        }
        // Shims of this containerd outlive it: they carry its socket in their arguments.
        super::kill_processes_naming(&self.socket.to_string_lossy());
        // Mounts under the node's root, deepest first.
        let root = format!("{}/", self.root.display());
        let mut mounts: Vec<String> = fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(1).map(str::to_string))
            .filter(|m| m.starts_with(&root))
            .collect();
        mounts.sort();
        for m in mounts.iter().rev() {
            if run("umount", &[m]).is_err() {
                let _ = run("umount", &["-l", m]);
            }
        }
        remove_cgroup_root(&self.cgroup_root);
        if std::mem::take(&mut self.made_netns) {
            let _ = run("ip", &["link", "del", &self.leg]);
            let _ = run("ip", &["netns", "del", &self.netns]);
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}
