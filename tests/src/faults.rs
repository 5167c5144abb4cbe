//! Member-level faults for the fault suite (`tests/tests/e2e_faults.rs`): which member etcd
//! names leader, a member's etcd process killed or frozen (SIGSTOP) and thawed, a member's network
//! cut and restored, a member's volume filled to the last byte and freed, and the observable
//! steps an operator can be SIGKILLed at. Each fault is undone by the value it returns, so a test
//! says where the fault ends. Environment-level faults (apiserver, control-plane etcd, Nodes,
//! webhook, MinIO, cert-manager) live in `faults_env`.
//!
//! Everything goes through the pod runner's own hooks (its container pids, its Pod network
//! namespaces and veths, its volume directories); nothing here edits Kubernetes objects.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::e2e::Env;
use crate::workload::Access;
use crate::OrPanic;

/// The etcd container of a member Pod.
pub const ETCD_CONTAINER: &str = "etcd";

/// etcd's election timeout as the operator configures members (etcd's default, 1000 ms): a
/// member silent for longer is taken for gone by its peers.
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(1000);

/// The member Pod etcd names leader: every current member is asked on its own endpoint and the
/// leader most of them name is taken (a partitioned member may still believe in an old one).
/// Panics when no majority of the members that answered names the same leader. Plain members
/// only: see [`leader_with`] for TLS and auth.
pub async fn leader(env: &Env, ns: &str, cluster: &str) -> String {
    let views: BTreeMap<String, Result<(u64, u64), String>> = env
        .member_views(ns, cluster)
        .await
        .into_iter()
        .map(|(pod, v)| (pod, v.map(|v| (v.member_id, v.leader))))
        .collect();
    named_leader(ns, cluster, &views)
}

/// [`leader`] for a cluster whose members serve TLS (and auth): each Ready member asked through
/// `access` (e.g. [`crate::workload::Access::of_cluster`]) on its own DNS name.
pub async fn leader_with(env: &Env, ns: &str, cluster: &str, access: &Access) -> String {
    let mut views = BTreeMap::new();
    for pod in env.ready_pods(ns, cluster).await {
        let name = pod.name_any();
        let endpoint = access.member_endpoint(ns, cluster, &name);
        let view = async {
            let mut etcd = access.connect(&[endpoint]).await?;
            let status = etcd
                .status()
                .await
                .map_err(|e| format!("{name}: Status: {e}"))?;
            let member = status.header().map(|h| h.member_id()).unwrap_or(0);
            Ok::<_, String>((member, status.leader()))
        }
        .await;
        views.insert(name, view);
    }
    named_leader(ns, cluster, &views)
}

/// The Pod of the leader most answering members name: `views` is Pod → (its member ID, the
/// leader it names) or why it did not answer.
fn named_leader(
    ns: &str,
    cluster: &str,
    views: &BTreeMap<String, Result<(u64, u64), String>>,
) -> String {
    let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
    for (_, leader) in views.values().flatten() {
        if *leader != 0 {
            *votes.entry(*leader).or_insert(0) += 1;
        }
    }
    let answered = views.values().filter(|v| v.is_ok()).count();
    let (leader_id, count) = votes
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(id, n)| (*id, *n))
        .unwrap_or_else(|| panic!("{ns}/{cluster}: no member names a leader: {views:?}"));
    assert!(
        count * 2 > answered,
        "{ns}/{cluster}: no majority names the same leader: {views:?}"
    );
    views
        .iter()
        .find(|(_, v)| v.as_ref().is_ok_and(|(member, _)| *member == leader_id))
        .map(|(pod, _)| pod.clone())
        .unwrap_or_else(|| {
            panic!("{ns}/{cluster}: leader {leader_id:x} is none of the member Pods: {views:?}")
        })
}

/// Wait until the members other than `old` (its etcd member ID `old_id`) agree on a leader that
/// is not it, each asked on its own endpoint: the evidence that a fault on the old leader took
/// effect. Returns the new leader's member ID; panics after `within`.
pub async fn new_leader_among_the_others(
    env: &Env,
    ns: &str,
    cluster: &str,
    old: &str,
    old_id: u64,
    within: Duration,
) -> u64 {
    let others: Vec<Pod> = env
        .pods(ns, cluster)
        .await
        .into_iter()
        .filter(|p| p.name_any() != old)
        .collect();
    crate::harness::eventually_every(
        &format!("{ns}/{cluster}: the members other than {old} to elect a new leader"),
        within,
        Duration::from_millis(250),
        || async {
            let mut leaders = Vec::new();
            for p in &others {
                leaders.push(crate::e2e::member_view(p).await.map(|v| v.leader));
            }
            match leaders.first() {
                Some(Ok(first))
                    if *first != 0
                        && *first != old_id
                        && leaders.iter().all(|l| l.as_ref() == Ok(first)) =>
                {
                    Ok(*first)
                }
                _ => Err(format!("leaders seen: {leaders:?}")),
            }
        },
    )
    .await
}

/// How long a member cut off from its peers gets to answer a probe of [`refuses_alone`].
const ALONE_PROBE: Duration = Duration::from_secs(3);

/// A member cut off from its peers (but not its clients) must serve nothing alone: on its own
/// client endpoint, a linearizable read and a put with etcd's require-leader metadata (what
/// `etcdctl` and Kubernetes send) each get an error or no answer within [`ALONE_PROBE`]. `Err`
/// names what it served.
pub async fn refuses_alone(pod: &Pod) -> Result<(), String> {
    let name = pod.name_any();
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .ok_or_else(|| format!("Pod {name} has no IP"))?;
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(ALONE_PROBE)
        .with_timeout(ALONE_PROBE)
        .with_require_leader(true);
    let mut etcd = etcd_client::Client::connect([format!("http://{ip}:2379")], Some(options))
        .await
        .map_err(|e| {
            format!("{name}: its client endpoint is unreachable, so the probe shows nothing: {e}")
        })?;
    let read = tokio::time::timeout(ALONE_PROBE, etcd.get("faults/alone-probe", None)).await;
    if let Ok(Ok(r)) = read {
        return Err(format!(
            "{name} served a linearizable read alone (revision {:?})",
            r.header().map(|h| h.revision())
        ));
    }
    let put = tokio::time::timeout(ALONE_PROBE, etcd.put("faults/alone-probe", "x", None)).await;
    if let Ok(Ok(r)) = put {
        return Err(format!(
            "{name} acknowledged a put alone (revision {:?})",
            r.header().map(|h| h.revision())
        ));
    }
    Ok(())
}

/// The current members that are not the leader, by name.
pub async fn followers(env: &Env, ns: &str, cluster: &str) -> Vec<String> {
    let leader = leader(env, ns, cluster).await;
    let mut names = env.member_names(ns, cluster).await;
    names.retain(|n| *n != leader);
    names.sort();
    names
}

/// SIGKILL the member's etcd (a crash): the pod runner restarts it per the Pod's restartPolicy.
pub fn kill_member(env: &Env, ns: &str, pod: &str) {
    env.runner
        .kill_container(ns, pod, ETCD_CONTAINER)
        .or_panic();
}

/// SIGSTOP the member's etcd: sockets stay open, nothing answers. SIGCONT with
/// [`Frozen::thaw`] (or when the value is dropped, so a failing test leaves nothing frozen).
pub fn freeze_member<'a>(env: &'a Env, ns: &str, pod: &str) -> Frozen<'a> {
    env.runner
        .stop_container(ns, pod, ETCD_CONTAINER)
        .or_panic();
    Frozen {
        env,
        ns: ns.to_string(),
        pod: pod.to_string(),
        thawed: false,
    }
}

/// A member frozen by [`freeze_member`].
pub struct Frozen<'a> {
    env: &'a Env,
    ns: String,
    pod: String,
    thawed: bool,
}

impl std::fmt::Debug for Frozen<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Frozen({}/{}, thawed: {})",
            self.ns, self.pod, self.thawed
        )
    }
}

impl Frozen<'_> {
    /// SIGCONT: the member runs again.
    pub fn thaw(mut self) {
        self.thawed = true;
        self.env
            .runner
            .resume_container(&self.ns, &self.pod, ETCD_CONTAINER)
            .or_panic();
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        if !self.thawed {
            let _ = self
                .env
                .runner
                .resume_container(&self.ns, &self.pod, ETCD_CONTAINER);
        }
    }
}

/// Take the member Pod's link down: it keeps its IP and its processes, but no packet gets in
/// or out (peers and clients alike). Restore it with [`Cut::restore`].
pub async fn cut_member<'a>(env: &'a Env, ns: &str, pod: &str) -> Cut<'a> {
    env.runner.cut_network(ns, pod).await.or_panic();
    Cut {
        env,
        ns: ns.to_string(),
        pod: pod.to_string(),
    }
}

/// A member cut off by [`cut_member`].
pub struct Cut<'a> {
    env: &'a Env,
    ns: String,
    pod: String,
}

impl std::fmt::Debug for Cut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cut({}/{})", self.ns, self.pod)
    }
}

impl Cut<'_> {
    /// The link up again.
    pub async fn restore(self) {
        self.env
            .runner
            .restore_network(&self.ns, &self.pod)
            .await
            .or_panic();
    }
}

/// The name of a member's data claim (the operator's `data-<member>`).
pub fn data_claim(member: &str) -> String {
    api::labels::pvc_name(member)
}

/// Fill the filesystem of the member's data claim to the last byte with one file beside etcd's
/// data (not in it), so the member's next write to its WAL or backend fails with ENOSPC. Only a
/// size-limited volume can be filled: the cluster must use the pod runner's sized StorageClass
/// ([`crate::podrunner::PodRunner::sized_storage_class`]); a claim on the host's disk is refused.
pub async fn fill_volume(env: &Env, ns: &str, member: &str) -> Filled {
    let claim = data_claim(member);
    let dir = env.runner.claim_dir(ns, &claim).await.or_panic();
    let volume = nix::sys::statvfs::statvfs(&dir).or_panic();
    let root = nix::sys::statvfs::statvfs(Path::new("/")).or_panic();
    assert!(
        volume.filesystem_id() != root.filesystem_id(),
        "{ns}/{claim}: {} is on the host's root filesystem, which cannot be filled; create the \
         cluster with storageClassName set to the pod runner's sized class",
        dir.display()
    );
    let path = dir.join("fault-filler");
    let mut file = std::fs::File::create(&path).or_panic();
    let chunk = vec![0u8; 1 << 20];
    let mut written: u64 = 0;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    // The last partial chunk: byte by byte down to 4 KiB pieces.
    let small = vec![0u8; 4096];
    while file.write(&small).is_ok_and(|n| n > 0) {
        written += small.len() as u64;
    }
    let _ = file.sync_all();
    Filled {
        path,
        bytes: written,
    }
}

/// A volume filled by [`fill_volume`].
#[derive(Debug)]
pub struct Filled {
    path: PathBuf,
    /// How much the filler took.
    pub bytes: u64,
}

impl Filled {
    /// Delete the filler: the space is back.
    pub fn free(self) {
        std::fs::remove_file(&self.path)
            .unwrap_or_else(|e| panic!("removing {}: {e}", self.path.display()));
    }
}

/// The member Pods' UIDs, by name (Pods being deleted included).
pub async fn pod_uids(env: &Env, ns: &str, cluster: &str) -> BTreeMap<String, String> {
    env.pods(ns, cluster)
        .await
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect()
}

/// The restart count of each member Pod's etcd container, by Pod name.
pub async fn restart_counts(env: &Env, ns: &str, cluster: &str) -> BTreeMap<String, i32> {
    env.pods(ns, cluster)
        .await
        .iter()
        .map(|p| (p.name_any(), etcd_restarts(p)))
        .collect()
}

fn etcd_restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == ETCD_CONTAINER))
        .map_or(0, |c| c.restart_count)
}

/// etcd's member list as one member answers it: `(name, is_learner)` each, with a short
/// timeout (for the probes an operator is killed at; `Err` while no member answers).
pub async fn etcd_member_list(
    env: &Env,
    ns: &str,
    cluster: &str,
) -> Result<Vec<(String, bool)>, String> {
    let pods = env.ready_pods(ns, cluster).await;
    let mut last = format!("{ns}/{cluster}: no Ready member Pod");
    for pod in pods {
        let mut etcd = match crate::e2e::member_client(&pod).await {
            Ok(c) => c,
            Err(e) => {
                last = e;
                continue;
            }
        };
        match tokio::time::timeout(Duration::from_secs(2), etcd.member_list()).await {
            Ok(Ok(list)) => {
                return Ok(list
                    .members()
                    .iter()
                    .map(|m| (m.name().to_string(), m.is_learner()))
                    .collect())
            }
            Ok(Err(e)) => last = format!("{}: member list: {e}", pod.name_any()),
            Err(_) => last = format!("{}: member list timed out", pod.name_any()),
        }
    }
    Err(last)
}

/// Probe for [`crate::harness::eventually`]: etcd lists a learner (a scale-up's member added,
/// not promoted yet).
pub async fn learner_listed(env: &Env, ns: &str, cluster: &str) -> Result<String, String> {
    let members = etcd_member_list(env, ns, cluster).await?;
    members
        .iter()
        .find(|(_, learner)| *learner)
        .map(|(name, _)| name.clone())
        .ok_or_else(|| format!("no learner yet: {members:?}"))
}

/// Probe: etcd lists fewer than `than` members (a scale-down's member removed).
pub async fn members_fewer(
    env: &Env,
    ns: &str,
    cluster: &str,
    than: usize,
) -> Result<usize, String> {
    let members = etcd_member_list(env, ns, cluster).await?;
    if members.len() < than {
        Ok(members.len())
    } else {
        Err(format!("still {} members: {members:?}", members.len()))
    }
}

/// Probe: a member Pod of `before` is being deleted or was replaced (a rollout's step).
pub async fn pod_replaced(
    env: &Env,
    ns: &str,
    cluster: &str,
    before: &BTreeMap<String, String>,
) -> Result<String, String> {
    let pods = env.pods(ns, cluster).await;
    pods.iter()
        .find(|p| {
            p.metadata.deletion_timestamp.is_some()
                || before
                    .get(&p.name_any())
                    .is_some_and(|uid| p.uid().as_ref() != Some(uid))
        })
        .map(|p| p.name_any())
        .ok_or_else(|| format!("no member Pod replaced yet: {:?}", before.keys()))
}

/// Whether `pod`'s member holds `key` in its own data: a serializable read on its own endpoint,
/// answered from its local store without asking the leader (`Err` while it does not answer).
pub async fn member_holds(pod: &Pod, key: &str) -> Result<bool, String> {
    let mut etcd = crate::e2e::member_client(pod).await?;
    let options = etcd_client::GetOptions::new().with_serializable();
    match tokio::time::timeout(Duration::from_secs(2), etcd.get(key, Some(options))).await {
        Ok(Ok(got)) => Ok(!got.kvs().is_empty()),
        Ok(Err(e)) => Err(format!("{}: read of {key}: {e}", pod.name_any())),
        Err(_) => Err(format!("{}: read of {key} timed out", pod.name_any())),
    }
}

/// Partition the member from its peers while clients still reach it: blackhole routes in its
/// Pod's network namespace to every other member Pod's IP (the member's packets to its peers
/// are dropped, so no connection between them lives; the host's bridge address, which clients
/// come from, keeps its route). Heal with [`Partition::heal`].
pub async fn isolate_from_peers(env: &Env, ns: &str, cluster: &str, pod: &str) -> Partition {
    let netns = env
        .runner
        .netns(ns, pod)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| panic!("{ns}/{pod} has no network namespace"));
    let peers: Vec<String> = env
        .pods(ns, cluster)
        .await
        .iter()
        .filter(|p| p.name_any() != pod)
        .filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()))
        .collect();
    assert!(
        !peers.is_empty(),
        "{ns}/{cluster}: {pod} has no peer with an IP"
    );
    let partition = Partition { netns, peers };
    partition.routes("add").await;
    partition
}

/// A member cut off from its peers by [`isolate_from_peers`].
#[derive(Debug)]
pub struct Partition {
    netns: String,
    peers: Vec<String>,
}

impl Partition {
    /// The routes to the peers back.
    pub async fn heal(self) {
        self.routes("del").await;
    }

    async fn routes(&self, verb: &str) {
        for peer in &self.peers {
            let args = [
                "-n",
                &self.netns,
                "route",
                verb,
                "blackhole",
                &format!("{peer}/32"),
            ];
            crate::podrunner::network::ip_async(args.iter().map(|a| a.to_string()).collect())
                .await
                .unwrap_or_else(|e| panic!("ip {}: {e}", args.join(" ")));
        }
    }
}
