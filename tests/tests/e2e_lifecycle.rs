//! End to end, the lifecycle around the happy path: the operator SIGKILLed in the crash windows of
//! a scale-up step, every condition reason a user can meet (with its message), the voter
//! PodDisruptionBudget against the real Eviction API, the Events and the metrics.
//!
//! Unlike `e2e_cluster`, every test runs its own operator, limited to the test's namespace (with
//! its leader-election Lease there too): the crash test kills and restarts its operator, and the
//! metrics test reads counters only its own operator incremented. The control plane and the pod
//! runner are shared by the binary, as in `e2e::env()`. Every scenario that promises to keep data
//! writes keys first and checks every key after.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::conditions::{cluster as ctype, member as mtype, reason};
use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{EvictParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use kube_runtime::watcher;
use serde_json::json;
use tokio::sync::OnceCell;

use tests::e2e::{condition, pod_ready, spec, Env};
use tests::harness::eventually_every;
use tests::operator::{shared_env, Scope};
use tests::podrunner::PodRunner;
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
/// A stopped member is noticed after its readiness probe fails three times (period 2 s, timeout
/// 5 s), then one reconcile.
const NOTICE: Duration = Duration::from_secs(90);
/// An etcd image repository other than the default, as an air-gapped install would mirror it.
const MIRROR: &str = "registry.example.test/mirror/etcd";

// ---------------------------------------------------------------------------------------------
// The environment: the shared control plane and pod runner, and one operator per test.

/// The binary's control plane and pod runner; each test brings its own operator (see [`scope`]).
async fn lab() -> &'static Env {
    static LAB: OnceCell<Env> = OnceCell::const_new();
    LAB.get_or_init(|| {
        shared_env(
            PodRunner::builder().etcd_repository(MIRROR),
            "lifecycle-idle",
        )
    })
    .await
}

/// One test's namespace in the lab and the operator that owns it (its Lease lives there too),
/// run with `flags`.
async fn scope(prefix: &str, flags: &[&str]) -> Scope {
    Scope::new(lab().await, prefix, flags)
        .await
        .polling(Duration::from_millis(200))
}

/// Wait until a condition has this status and reason; returns its message.
async fn wait_condition(
    s: &Scope,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
    timeout: Duration,
) -> String {
    let c = s
        .wait_for(name, &format!("{type_}={status}/{reason}"), timeout, |c| {
            has(c, type_, status, reason)
        })
        .await;
    condition(&c, type_).map(|(_, _, m)| m).unwrap_or_default()
}

/// [`Scope::wait_healthy`] and reconciled: `replicas` ready members, QuorumHealthy, and
/// `Progressing=False/Reconciled` (not paused or past a deadline).
async fn wait_reconciled(s: &Scope, name: &str, replicas: i32, timeout: Duration) -> EtcdCluster {
    s.wait_for(
        name,
        &format!("{replicas} ready members, QuorumHealthy and Reconciled"),
        timeout,
        |c| {
            let st = c.status.clone().unwrap_or_default();
            st.ready_members == replicas
                && st.observed.as_ref().is_some_and(|o| o.replicas == replicas)
                && has(c, ctype::AVAILABLE, "True", reason::QUORUM_HEALTHY)
                && has(c, ctype::PROGRESSING, "False", reason::RECONCILED)
        },
    )
    .await
}

fn has(c: &EtcdCluster, type_: &str, status: &str, reason: &str) -> bool {
    condition(c, type_).is_some_and(|(s, r, _)| s == status && r == reason)
}

fn member_condition(m: &EtcdMember, type_: &str) -> Option<(String, String, String)> {
    m.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn names<K: ResourceExt>(items: &[K]) -> BTreeSet<String> {
    items.iter().map(|i| i.name_any()).collect()
}

// ---------------------------------------------------------------------------------------------
// Observers: every condition a cluster went through, etcd's own member list.

type Seen = (String, String, String, String);

/// Every distinct `(type, status, reason, message)` a cluster's conditions took, in order, from
/// a watch opened before the cluster exists (the operator writes each change once, so polling
/// could miss a state that lasts one reconcile). A watch error (after which the watcher lists
/// again, and states between are lost) or the watch ending is recorded as a gap: "never seen"
/// cannot be claimed across a gap.
#[derive(Clone)]
struct History(Arc<Mutex<Vec<Seen>>>, Arc<Mutex<Vec<String>>>);

impl History {
    async fn record(env: &Env, ns: &str, name: &str) -> Self {
        let api: Api<EtcdCluster> = Api::namespaced(env.client(), ns);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = watcher(api, config).boxed();
        // The initial (empty) list is done: from here on every write is seen.
        wait_init_done(&mut stream).await;
        let history = History(Arc::default(), Arc::default());
        let sink = history.clone();
        tokio::spawn(async move {
            let gap = |what: String| {
                if let Ok(mut gaps) = sink.1.lock() {
                    gaps.push(what);
                }
            };
            while let Some(event) = stream.next().await {
                let c = match event {
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => c,
                    Ok(_) => continue,
                    Err(e) => {
                        gap(format!("watch error: {e}"));
                        continue;
                    }
                };
                let Some(status) = c.status else { continue };
                let Ok(mut seen) = sink.0.lock() else {
                    gap("the history's lock was poisoned".into());
                    return;
                };
                for x in status.conditions {
                    let entry = (x.type_, x.status, x.reason, x.message);
                    let last = seen.iter().rev().find(|s| s.0 == entry.0);
                    if last != Some(&entry) {
                        seen.push(entry);
                    }
                }
            }
            gap("the watch ended".into());
        });
        history
    }

    /// Fails if the watch missed anything (an error or its end): what follows claims that a
    /// state never happened.
    #[track_caller]
    fn assert_complete(&self) {
        let gaps = self
            .1
            .lock()
            .map(|g| g.clone())
            .unwrap_or_else(|_| vec!["the gap record's lock was poisoned".to_string()]);
        assert!(
            gaps.is_empty(),
            "the condition history has gaps, so it cannot show a state never happened: {gaps:?}"
        );
    }

    /// The state was never set after `mark`, and the watch saw everything.
    #[track_caller]
    fn assert_never_after(&self, mark: usize, type_: &str, status: &str, reason: &str, why: &str) {
        self.assert_complete();
        assert!(
            self.seen_after(mark, type_, status, reason).is_none(),
            "{type_}={status}/{reason} {why}; conditions seen:\n{}",
            self.dump()
        );
    }

    /// A position in the history, to ask about what came after it.
    fn mark(&self) -> usize {
        self.0.lock().map(|seen| seen.len()).unwrap_or_default()
    }

    /// The first message seen with this type, status and reason.
    fn seen(&self, type_: &str, status: &str, reason: &str) -> Option<String> {
        self.seen_after(0, type_, status, reason)
    }

    fn seen_after(&self, mark: usize, type_: &str, status: &str, reason: &str) -> Option<String> {
        self.0.lock().ok().and_then(|seen| {
            seen.iter()
                .skip(mark)
                .find(|s| s.0 == type_ && s.1 == status && s.2 == reason)
                .map(|s| s.3.clone())
        })
    }

    fn dump(&self) -> String {
        self.0
            .lock()
            .map(|seen| {
                seen.iter()
                    .map(|s| format!("  {}={} {}: {}", s.0, s.1, s.2, s.3))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    #[track_caller]
    fn expect(&self, type_: &str, status: &str, reason: &str) -> String {
        self.expect_after(0, type_, status, reason)
    }

    #[track_caller]
    fn expect_after(&self, mark: usize, type_: &str, status: &str, reason: &str) -> String {
        self.seen_after(mark, type_, status, reason)
            .unwrap_or_else(|| {
                panic!(
                    "{type_}={status}/{reason} was never set (after entry {mark}); conditions seen:\n{}",
                    self.dump()
                )
            })
    }

    /// Every reason a condition type took, in order (from a watch that saw everything).
    #[track_caller]
    fn reasons(&self, type_: &str) -> Vec<String> {
        self.assert_complete();
        self.0
            .lock()
            .map(|seen| {
                seen.iter()
                    .filter(|s| s.0 == type_)
                    .map(|s| format!("{}/{}", s.1, s.2))
                    .collect()
            })
            .unwrap_or_default()
    }
}

async fn wait_init_done<K>(
    stream: &mut (impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Unpin),
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok(watcher::Event::InitDone))) => return,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("the watch did not finish its initial list"),
        }
    }
}

/// A member of the etcd cluster as `etcdctl member list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Peer {
    /// Empty for a learner that has not started yet.
    name: String,
    peer_url: String,
    learner: bool,
}

/// etcd's member list, asked through a Ready voter Pod (a learner refuses `MemberList`); `None`
/// when no voter answers.
async fn etcd_peers(env: &Env, ns: &str, cluster: &str) -> Option<Vec<Peer>> {
    let pods = env.pods(ns, cluster).await;
    let voters = pods.iter().filter(|p| {
        pod_ready(p)
            && p.metadata.deletion_timestamp.is_none()
            && p.labels().get(labels::ROLE).map(String::as_str) == Some(labels::ROLE_VOTER)
    });
    for pod in voters {
        let argv = [
            "etcdctl",
            "--endpoints=http://localhost:2379",
            "--command-timeout=3s",
            "member",
            "list",
            "-w",
            "json",
        ];
        let Ok(out) = env.runner.exec(ns, &pod.name_any(), "etcd", &argv).await else {
            continue;
        };
        if out.code != Some(0) {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&out.stdout) else {
            continue;
        };
        let peers = v["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| Peer {
                name: m["name"].as_str().unwrap_or_default().to_string(),
                peer_url: m["peerURLs"][0].as_str().unwrap_or_default().to_string(),
                learner: m["isLearner"].as_bool().unwrap_or(false),
            })
            .collect();
        return Some(peers);
    }
    None
}

/// `etcdctl` against the local member of a Ready voter Pod.
async fn etcdctl(
    env: &Env,
    ns: &str,
    cluster: &str,
    args: &[&str],
) -> tests::podrunner::ExecOutput {
    let pod = env
        .pods(ns, cluster)
        .await
        .into_iter()
        .find(|p| {
            pod_ready(p)
                && p.labels().get(labels::ROLE).map(String::as_str) == Some(labels::ROLE_VOTER)
        })
        .expect("a Ready voter Pod");
    let mut argv = vec!["etcdctl", "--endpoints=http://localhost:2379"];
    argv.extend_from_slice(args);
    env.runner
        .exec(ns, &pod.name_any(), "etcd", &argv)
        .await
        .or_panic()
}

fn peer_url(member: &str, cluster: &str, ns: &str) -> String {
    format!("http://{member}.{cluster}.{ns}.svc:2380")
}

/// Push `status.progressDeadline` into the past through the status subresource, once, as the
/// runbook does to force escalation, and wait until the cluster shows `want`. The operator
/// writes status with optimistic concurrency, so a reconcile that read the cluster before this
/// patch cannot write the old deadline back.
async fn force_deadline(s: &Scope, name: &str, want: &str) -> EtcdCluster {
    let api = s.env.clusters(&s.ns);
    let past = Time(Timestamp::now() - SignedDuration::from_secs(1));
    let patch = json!({"status": {"progressDeadline": past}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .or_panic();
    s.wait_for(
        name,
        &format!("Available=False/{want} after forcing the deadline"),
        Duration::from_secs(30),
        |c| has(c, ctype::AVAILABLE, "False", want),
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// 1. Crash windows of a scale-up step.

/// What a crash left behind: the joiner's CR, its etcd entry, its Pod.
struct CrashState {
    /// The joiner's EtcdMember exists.
    cr: bool,
    /// etcd's entry for the joiner's peer URL; `None` when no voter answered.
    in_etcd: Option<Option<Peer>>,
    /// The joiner's Pod is Ready.
    pod_ready: bool,
    /// All of it, for the messages.
    text: String,
}

impl CrashState {
    /// A step the kill interrupted before its member could serve: the CR exists, etcd (which
    /// answers) lists the joiner as a learner at most, and its Pod is not Ready.
    #[track_caller]
    fn assert_joining(&self, window: &str) {
        assert!(
            self.cr,
            "{window}: the joiner's EtcdMember is gone: {}",
            self.text
        );
        let entry = self
            .in_etcd
            .as_ref()
            .unwrap_or_else(|| panic!("{window}: no voter answered: {}", self.text));
        assert!(
            entry.as_ref().is_none_or(|p| p.learner),
            "{window}: the joiner is already a voter, the kill did not land in the window: {}",
            self.text
        );
        assert!(
            !self.pod_ready,
            "{window}: the joiner's Pod is already Ready: {}",
            self.text
        );
    }
}

async fn crash_state(s: &Scope, cluster: &str, joiner: &str) -> CrashState {
    let api: Api<EtcdMember> = Api::namespaced(s.env.client(), &s.ns);
    let m = api.get_opt(joiner).await.or_panic();
    let pending = m.as_ref().map(|m| m.spec.initial_cluster.is_empty());
    let labelled = m
        .as_ref()
        .map(|m| m.labels().contains_key(labels::APP_COMPONENT));
    let url = peer_url(joiner, cluster, &s.ns);
    let in_etcd = etcd_peers(s.env, &s.ns, cluster)
        .await
        .map(|peers| peers.iter().find(|p| p.peer_url == url).cloned());
    let pod = s
        .env
        .pods(&s.ns, cluster)
        .await
        .into_iter()
        .find(|p| p.name_any() == joiner);
    let observed = s
        .env
        .cluster(&s.ns, cluster)
        .await
        .status
        .and_then(|st| st.observed)
        .map(|o| o.replicas);
    let pod_ready = pod.as_ref().is_some_and(pod_ready);
    let text = format!(
        "member {joiner}: CR pending={pending:?} component-label={labelled:?}, etcd entry={in_etcd:?}, Pod={:?} (ready={pod_ready}), status.observed.replicas={observed:?}",
        pod.as_ref().map(|p| p.name_any()),
    );
    CrashState {
        cr: m.is_some(),
        in_etcd,
        pod_ready,
        text,
    }
}

/// Consume member events until one not in `known` appears; returns its name.
async fn next_new_member(
    stream: &mut (impl Stream<Item = Result<watcher::Event<EtcdMember>, watcher::Error>> + Unpin),
    known: &BTreeSet<String>,
    timeout: Duration,
) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m))))
                if !known.contains(&m.name_any()) =>
            {
                return m.name_any()
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("no new EtcdMember appeared within {timeout:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_up_converges_after_operator_crashes_in_each_window() {
    let started = Instant::now();
    let mut s = scope("crash", &[]).await;
    let (env, ns, name) = (s.env, s.ns.clone(), "cr");
    env.create_cluster(&ns, name, spec(3)).await;
    wait_reconciled(&s, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 100).await;
    let original = names(&env.members(&ns, name).await);

    // Every member name that ever exists from here on.
    let members_api: Api<EtcdMember> = Api::namespaced(env.client(), &ns);
    let selector = labels::cluster_selector(name);
    let ever = Arc::new(Mutex::new(original.clone()));
    {
        let mut stream = watcher(
            members_api.clone(),
            watcher::Config::default().labels(&selector),
        )
        .boxed();
        wait_init_done(&mut stream).await;
        let ever = ever.clone();
        tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) = event {
                    if let Ok(mut e) = ever.lock() {
                        e.insert(m.name_any());
                    }
                }
            }
        });
    }
    let mut trigger = watcher(
        members_api.clone(),
        watcher::Config::default().labels(&selector),
    )
    .boxed();
    wait_init_done(&mut trigger).await;

    // Window 1: the first new EtcdMember has just been created — pending (no spec.initialCluster),
    // and at most just added to etcd. SIGKILL the operator the moment the CR appears.
    env.scale(&ns, name, 5).await;
    let fourth = next_new_member(&mut trigger, &original, Duration::from_secs(60)).await;
    s.operator.kill();
    let new_now: Vec<String> = names(&env.members(&ns, name).await)
        .difference(&original)
        .cloned()
        .collect();
    for joiner in &new_now {
        let window1 = crash_state(&s, name, joiner).await;
        eprintln!(
            "crash 1 (CR created) at {:?}: {}",
            started.elapsed(),
            window1.text
        );
        window1.assert_joining("crash 1 (CR created)");
    }
    // The add-before-patch window: the member is in etcd but its CR is still pending. A kill
    // rarely lands between the two calls; when it landed before the add, make the add the dead
    // operator was about to make.
    let listed_now = etcd_peers(env, &ns, name).await.expect("a voter answers");
    let mut pending_unlisted = Vec::new();
    for joiner in &new_now {
        let url = peer_url(joiner, name, &ns);
        let pending = members_api
            .get(joiner)
            .await
            .or_panic()
            .spec
            .initial_cluster
            .is_empty();
        if pending && !listed_now.iter().any(|p| p.peer_url == url) {
            pending_unlisted.push((joiner.clone(), url));
        }
    }
    for (joiner, url) in &pending_unlisted {
        let peer_urls = format!("--peer-urls={url}");
        // Like the operator, wait out etcd's 5-second connection rule (the cluster's last
        // member was promoted a moment ago); any other refusal fails the test.
        eventually_every(
            "the add the dead operator was about to make",
            Duration::from_secs(30),
            Duration::from_millis(500),
            || async {
                let out = etcdctl(
                    env,
                    &ns,
                    name,
                    &["member", "add", joiner, &peer_urls, "--learner"],
                )
                .await;
                match out.code {
                    Some(0) => Ok(()),
                    _ if out.stderr.contains("unhealthy cluster") => {
                        Err(format!("member add: {}", out.stderr))
                    }
                    _ => panic!("member add: {}", out.stderr),
                }
            },
        )
        .await;
        eprintln!("crash 1: added {joiner} as a learner for the dead operator (add-before-patch)");
    }
    s.restart().await;

    // Window 2: two pending learners — the members of this cluster run with --max-learners, so
    // the fifth member joins as soon as the fourth has started, before either is promoted: etcd
    // lists both as learners. SIGKILL the operator then.
    let learners = eventually_every(
        "two learners in etcd after the first restart",
        Duration::from_secs(120),
        Duration::from_millis(50),
        || async {
            if let Some(peers) = etcd_peers(env, &ns, name).await {
                let learners: Vec<Peer> = peers.into_iter().filter(|p| p.learner).collect();
                if learners.len() == 2 {
                    return Ok(learners);
                }
            }
            Err(format!(
                "etcd never listed two learners at once after the first restart; operator logs: {}",
                s.logs()
            ))
        },
    )
    .await;
    s.operator.kill();
    for learner in &learners {
        let member = learner
            .peer_url
            .trim_start_matches("http://")
            .split('.')
            .next()
            .unwrap_or_default()
            .to_string();
        let window2 = crash_state(&s, name, &member).await;
        eprintln!(
            "crash 2 (two learners listed) at {:?}: {}",
            started.elapsed(),
            window2.text
        );
        assert!(
            window2.cr,
            "crash 2: the learner's EtcdMember is gone: {}",
            window2.text
        );
        assert!(
            window2.in_etcd.as_ref().is_some_and(|e| e.is_some()),
            "crash 2: etcd no longer lists the learner {member}: {}",
            window2.text
        );
    }
    drop(trigger);
    s.restart().await;

    let c = wait_reconciled(&s, name, 5, BOOT).await;
    eprintln!("converged to 5 at {:?}", started.elapsed());
    assert_eq!(c.status.unwrap().observed.map(|o| o.replicas), Some(5));

    // Exactly five EtcdMembers, five etcd voters, the same names; Pods and PVCs match.
    let members = env.members(&ns, name).await;
    let member_names = names(&members);
    assert_eq!(members.len(), 5, "{member_names:?}");
    assert!(members
        .iter()
        .all(|m| m.metadata.deletion_timestamp.is_none()));
    let peers = etcd_peers(env, &ns, name).await.expect("a voter answers");
    assert_eq!(peers.len(), 5, "{peers:?}");
    assert!(peers.iter().all(|p| !p.learner), "{peers:?}");
    let etcd_names: BTreeSet<String> = peers.iter().map(|p| p.name.clone()).collect();
    assert_eq!(etcd_names, member_names, "etcd and the EtcdMembers agree");
    for p in &peers {
        assert_eq!(p.peer_url, peer_url(&p.name, name, &ns));
    }
    assert_eq!(names(&env.pods(&ns, name).await), member_names);
    let pvcs: BTreeSet<String> = member_names.iter().map(|m| labels::pvc_name(m)).collect();
    assert_eq!(names(&env.pvcs(&ns, name).await), pvcs);
    assert!(original.is_subset(&member_names));
    for m in &members {
        assert_eq!(
            m.labels().get(labels::APP_COMPONENT),
            Some(&m.name_any()),
            "member {} carries its component label",
            m.name_any()
        );
        assert!(
            !m.spec.initial_cluster.is_empty(),
            "{} is complete",
            m.name_any()
        );
    }

    // The interrupted members were finished, not thrown away and replaced: no member ever existed
    // besides the five.
    assert!(
        member_names.contains(&fourth) && new_now.iter().all(|m| member_names.contains(m)),
        "the members the crashes interrupted ({new_now:?}) were completed: {member_names:?}"
    );
    let ever = ever.lock().map(|e| e.clone()).unwrap_or_default();
    assert_eq!(
        ever, member_names,
        "no member was created and removed again (churn) during the crashes"
    );
    env.check_keys(&ns, name, &keys).await;
    s.finish(name).await;
    eprintln!("crash test took {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// 2. Conditions.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_follow_bootstrap_scale_member_loss_quorum_loss_and_deadline() {
    let started = Instant::now();
    let s = scope("cond", &[]).await;
    let (env, ns, name) = (s.env, s.ns.clone(), "cd");
    let history = History::record(env, &ns, name).await;

    // Bootstrap: InitialSnapshot, the seed not reachable yet, then discovered and healthy.
    env.create_cluster(&ns, name, spec(1)).await;
    let c = wait_reconciled(&s, name, 1, BOOT).await;
    let m = history.expect(ctype::PROGRESSING, "True", reason::INITIAL_SNAPSHOT);
    assert!(m.contains("1 members"), "{m}");
    let m = history.expect(ctype::AVAILABLE, "False", reason::CLUSTER_UNREACHABLE);
    assert!(m.contains("seed"), "{m}");
    eprintln!(
        "bootstrap: WaitingForSeed {} observed",
        if history
            .seen(ctype::PROGRESSING, "True", reason::WAITING_FOR_SEED)
            .is_some()
        {
            "was"
        } else {
            "was not"
        }
    );
    let id = c
        .status
        .as_ref()
        .and_then(|s| s.cluster_id.clone())
        .unwrap();
    let m = history.expect(ctype::AVAILABLE, "True", reason::CLUSTER_DISCOVERED);
    assert!(m.contains(&id), "{m}");
    let (_, _, m) = condition(&c, ctype::AVAILABLE).unwrap();
    assert!(m.contains("all 1 members"), "{m}");
    assert!(has(&c, ctype::DEGRADED, "False", reason::QUORUM_HEALTHY));
    let (_, _, m) = condition(&c, ctype::PROGRESSING).unwrap();
    assert!(m.contains("1 members of version 3.6.16"), "{m}");
    let keys = env.write_keys(&ns, name, 30).await;

    // The whole bootstrap worked towards the initial snapshot (WaitingForSeed aside): no
    // SpecChanged before any spec was changed.
    let progressing = history.reasons(ctype::PROGRESSING);
    assert!(
        !progressing
            .iter()
            .any(|r| r.ends_with(reason::SPEC_CHANGED)),
        "{progressing:?}"
    );

    // Scale-up: SpecChanged while working, then healthy at 3.
    let mark = history.mark();
    env.scale(&ns, name, 3).await;
    let c = wait_reconciled(&s, name, 3, BOOT).await;
    let m = history.expect_after(mark, ctype::PROGRESSING, "True", reason::SPEC_CHANGED);
    assert!(m.contains("towards 3 members"), "{m}");
    assert!(has(&c, ctype::DEGRADED, "False", reason::QUORUM_HEALTHY));
    // Quorum is etcd's voters: the serving seed keeps it while learners join one at a time.
    for (t, st, r) in [
        (ctype::AVAILABLE, "False", reason::QUORUM_LOST),
        (ctype::DEGRADED, "True", reason::QUORUM_LOST),
        (ctype::DEGRADED, "True", reason::MEMBERS_UNHEALTHY),
    ] {
        history.assert_never_after(mark, t, st, r, "during a scale-up from a healthy voter");
    }
    env.check_keys(&ns, name, &keys).await;

    // Member conditions: Ready=True/PodReady, VersionDrifted=False/VersionMatched.
    eventually_every(
        "member conditions Ready=True/PodReady and VersionDrifted=False/VersionMatched",
        Duration::from_secs(60),
        Duration::from_millis(300),
        || async {
            let members = env.members(&ns, name).await;
            let ok = members.len() == 3
                && members.iter().all(|m| {
                    member_condition(m, mtype::READY)
                        .is_some_and(|(s, r, _)| s == "True" && r == reason::POD_READY)
                        && member_condition(m, mtype::VERSION_DRIFTED)
                            .is_some_and(|(s, r, _)| s == "False" && r == reason::VERSION_MATCHED)
                        && m.status.as_ref().and_then(|s| s.version.as_deref()) == Some("3.6.16")
                });
            if ok {
                return Ok(());
            }
            Err(format!(
                "member conditions never settled: {:#?}",
                members
                    .iter()
                    .map(|m| (m.name_any(), m.status.clone()))
                    .collect::<Vec<_>>()
            ))
        },
    )
    .await;

    // Events of the scale-up, as `kubectl get events` shows them.
    eventually_every(
        "the scale-up Events on the EtcdCluster",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let out = env
                .kubectl_events(&ns, "involvedObject.kind=EtcdCluster", "json")
                .await;
            let v: serde_json::Value = serde_json::from_str(&out).or_panic();
            let reasons: BTreeSet<String> = v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["involvedObject"]["name"] == name)
                .filter_map(|e| e["reason"].as_str().map(str::to_string))
                .collect();
            let want = [
                "Bootstrapping",
                "ClusterDiscovered",
                "MemberAdded",
                "MemberPromoted",
            ];
            if want.iter().all(|w| reasons.contains(*w)) {
                return Ok(());
            }
            Err(format!(
                "events on the EtcdCluster: {reasons:?}, want {want:?}"
            ))
        },
    )
    .await;

    // Metrics of this test's operator (no other operator touched it).
    let metrics = s.operator.get("/metrics").await.or_panic();
    let value = |prefix: &str, labels: &[&str]| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(prefix) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(
        value(
            "etcd_operator_reconciles_total{",
            &["controller=\"etcdcluster\""]
        ) >= 1.0,
        "{metrics}"
    );
    assert!(
        value(
            "etcd_operator_etcd_call_duration_seconds_count{",
            &["op=\"member_promote\"", "result=\"ok\""]
        ) >= 2.0,
        "two promotions were timed: {metrics}"
    );

    // One of three members hangs: quorum available, degraded.
    let mut pods: Vec<String> = names(&env.pods(&ns, name).await).into_iter().collect();
    pods.sort();
    let (first, second) = (pods[0].clone(), pods[1].clone());
    env.runner.stop_container(&ns, &first, "etcd").or_panic();
    let c = s
        .wait_for(name, "QuorumAvailable and MembersUnhealthy", NOTICE, |c| {
            has(c, ctype::AVAILABLE, "True", reason::QUORUM_AVAILABLE)
                && has(c, ctype::DEGRADED, "True", reason::MEMBERS_UNHEALTHY)
        })
        .await;
    let (_, _, m) = condition(&c, ctype::AVAILABLE).unwrap();
    assert!(m.contains("2 of 3"), "{m}");
    let (_, _, m) = condition(&c, ctype::DEGRADED).unwrap();
    assert!(m.contains("1 of 3") && m.contains("not ready"), "{m}");
    env.check_keys(&ns, name, &keys).await;

    // A second one hangs: quorum lost.
    env.runner.stop_container(&ns, &second, "etcd").or_panic();
    let c = s
        .wait_for(name, "QuorumLost", NOTICE, |c| {
            has(c, ctype::AVAILABLE, "False", reason::QUORUM_LOST)
                && has(c, ctype::DEGRADED, "True", reason::QUORUM_LOST)
        })
        .await;
    let (_, _, m) = condition(&c, ctype::AVAILABLE).unwrap();
    assert!(m.contains("majority (2)"), "{m}");

    // Both come back: healthy again, every key still there.
    env.runner.resume_container(&ns, &first, "etcd").or_panic();
    env.runner.resume_container(&ns, &second, "etcd").or_panic();
    wait_reconciled(&s, name, 3, NOTICE).await;
    env.check_keys(&ns, name, &keys).await;

    // The deadline: a member hangs, so the target (3 ready) cannot be reached; forcing the
    // deadline parks the cluster with DeadlineExceeded until the spec is edited.
    env.runner.stop_container(&ns, &first, "etcd").or_panic();
    wait_condition(
        &s,
        name,
        ctype::DEGRADED,
        "True",
        reason::MEMBERS_UNHEALTHY,
        NOTICE,
    )
    .await;
    let c = force_deadline(&s, name, reason::DEADLINE_EXCEEDED).await;
    let (_, _, m) = condition(&c, ctype::AVAILABLE).unwrap();
    assert!(
        m.contains("3 replicas") && m.contains("edit the spec"),
        "{m}"
    );
    let c = s
        .wait_for(name, "Progressing=False/DeadlineExceeded", NOTICE, |c| {
            has(c, ctype::PROGRESSING, "False", reason::DEADLINE_EXCEEDED)
        })
        .await;
    assert_eq!(c.status.unwrap().observed.map(|o| o.replicas), Some(3));

    // The edit is the intervention: relocked with a fresh deadline.
    env.scale(&ns, name, 4).await;
    let c = s
        .wait_for(name, "Progressing=True/RetryAfterDeadline", NOTICE, |c| {
            has(c, ctype::PROGRESSING, "True", reason::RETRY_AFTER_DEADLINE)
        })
        .await;
    let status = c.status.clone().unwrap();
    assert_eq!(status.observed.map(|o| o.replicas), Some(4));
    let fresh = status.progress_deadline.expect("a fresh deadline").0;
    assert!(
        fresh > Timestamp::now(),
        "the new deadline is in the future: {fresh}"
    );
    assert!(!has(
        &c,
        ctype::AVAILABLE,
        "False",
        reason::DEADLINE_EXCEEDED
    ));

    env.runner.resume_container(&ns, &first, "etcd").or_panic();
    wait_reconciled(&s, name, 4, BOOT).await;
    env.check_keys(&ns, name, &keys).await;
    s.finish(name).await;
    eprintln!(
        "conditions test took {:?}; conditions seen:\n{}",
        started.elapsed(),
        history.dump()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_created_paused_never_bootstraps_until_scaled_up() {
    let s = scope("paused", &[]).await;
    let (env, ns, name) = (s.env, s.ns.clone(), "zero");
    env.create_cluster(&ns, name, spec(0)).await;
    let m = wait_condition(&s, name, ctype::AVAILABLE, "False", reason::PAUSED, BOOT).await;
    assert!(m.contains("never bootstrapped"), "{m}");
    let c = s
        .wait_for(name, "Progressing=False/Paused", BOOT, |c| {
            has(c, ctype::PROGRESSING, "False", reason::PAUSED)
                && has(c, ctype::DEGRADED, "False", reason::PAUSED)
        })
        .await;
    let status = c.status.clone().unwrap();
    assert!(status.cluster_id.is_none());
    assert_eq!(status.ready_members, 0);
    assert!(env.members(&ns, name).await.is_empty());
    assert!(env.pods(&ns, name).await.is_empty());
    assert!(env.pvcs(&ns, name).await.is_empty());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(env.client(), &ns);
    assert!(
        pdbs.get_opt(name).await.or_panic().is_none(),
        "no PDB without voters"
    );

    // Scaling up bootstraps a fresh cluster.
    env.scale(&ns, name, 1).await;
    let c = wait_reconciled(&s, name, 1, BOOT).await;
    assert!(c.status.unwrap().cluster_id.is_some());
    let keys = env.write_keys(&ns, name, 10).await;
    env.check_keys(&ns, name, &keys).await;
    s.finish(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_that_never_runs_fails_bootstrap_at_the_deadline_and_recreating_recovers() {
    let s = scope("bootfail", &[]).await;
    let (env, ns, name) = (s.env, s.ns.clone(), "bf");
    let history = History::record(env, &ns, name).await;
    // No image for 3.4.x: the seed's Pod is created but its container never starts.
    let mut broken = spec(1);
    broken.version = "3.4.0".into();
    env.create_cluster(&ns, name, broken).await;
    let waiting = eventually_every(
        "the seed Pod reporting an image problem",
        BOOT,
        Duration::from_millis(300),
        || async {
            let pods = env.pods(&ns, name).await;
            let waiting = pods.first().and_then(|p| {
                p.status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .iter()
                    .find(|c| c.name == "etcd")?
                    .state
                    .as_ref()?
                    .waiting
                    .as_ref()?
                    .reason
                    .clone()
            });
            if let Some(w) = waiting.filter(|w| w.contains("Image")) {
                return Ok(w);
            }
            Err(format!(
                "the seed Pod never reported an image problem: {pods:#?}"
            ))
        },
    )
    .await;
    let c = env.cluster(&ns, name).await;
    assert!(
        has(&c, ctype::AVAILABLE, "False", reason::CLUSTER_UNREACHABLE),
        "{:?}",
        c.status
    );
    assert!(
        condition(&c, ctype::PROGRESSING).is_some_and(|(s, _, _)| s == "True"),
        "{:?}",
        c.status
    );
    history.expect(ctype::PROGRESSING, "True", reason::INITIAL_SNAPSHOT);

    let c = force_deadline(&s, name, reason::BOOTSTRAP_FAILED).await;
    let (_, _, m) = condition(&c, ctype::AVAILABLE).unwrap();
    assert!(m.contains("delete") && m.contains("recreate"), "{m}");
    wait_condition(
        &s,
        name,
        ctype::PROGRESSING,
        "False",
        reason::BOOTSTRAP_FAILED,
        NOTICE,
    )
    .await;
    assert!(c.status.unwrap().cluster_id.is_none());
    eprintln!(
        "seed container waiting: {waiting}; conditions:\n{}",
        history.dump()
    );

    // Terminal: recover as the runbook says — delete, wait for members and PVCs, recreate.
    env.cp
        .kubectl_ok(&["delete", "etcdcluster", name, "-n", &ns, "--wait=false"])
        .await
        .or_panic();
    let deadline = Instant::now() + BOOT;
    eventually_every(
        &format!(
            "the failed cluster's members and PVCs collected; operator logs: {}",
            s.logs()
        ),
        BOOT,
        Duration::from_millis(500),
        || async {
            let (members, pvcs) = (env.members(&ns, name).await, env.pvcs(&ns, name).await);
            if members.is_empty() && pvcs.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} members, {} PVCs left",
                    members.len(),
                    pvcs.len()
                ))
            }
        },
    )
    .await;
    eventually_every(
        "the EtcdCluster deleted",
        deadline.saturating_duration_since(Instant::now()),
        Duration::from_millis(300),
        || async {
            match env.clusters(&ns).get_opt(name).await.or_panic() {
                Some(c) => Err(format!("still there: {:?}", c.metadata.deletion_timestamp)),
                None => Ok(()),
            }
        },
    )
    .await;
    env.create_cluster(&ns, name, spec(1)).await;
    wait_reconciled(&s, name, 1, BOOT).await;
    let keys = env.write_keys(&ns, name, 10).await;
    env.check_keys(&ns, name, &keys).await;
    s.finish(name).await;
}

// ---------------------------------------------------------------------------------------------
// 3. The voter PodDisruptionBudget against the Eviction API.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdb_allows_one_voter_eviction_and_refuses_a_second_while_it_is_down() {
    let s = scope("pdb", &[]).await;
    let (env, ns, name) = (s.env, s.ns.clone(), "pd");
    env.create_cluster(&ns, name, spec(3)).await;
    wait_reconciled(&s, name, 3, BOOT).await;
    let keys = env.write_keys(&ns, name, 50).await;
    let members_before = names(&env.members(&ns, name).await);

    // The disruption controller has counted the three voters.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(env.client(), &ns);
    let pdb = eventually_every(
        "the voter PDB status settled",
        Duration::from_secs(90),
        Duration::from_millis(300),
        || async {
            let pdb = pdbs.get(name).await.or_panic();
            let settled = pdb.status.as_ref().is_some_and(|st| {
                st.observed_generation == pdb.metadata.generation
                    && st.expected_pods == 3
                    && st.current_healthy == 3
                    && st.desired_healthy == 2
                    && st.disruptions_allowed == 1
            });
            if settled {
                return Ok(pdb);
            }
            Err(format!(
                "the PDB status never settled: spec {:?}, status {:?}",
                pdb.spec, pdb.status
            ))
        },
    )
    .await;
    let pdb_spec = pdb.spec.unwrap();
    assert_eq!(pdb_spec.min_available, Some(IntOrString::Int(2)));
    let selector = pdb_spec
        .selector
        .and_then(|s| s.match_labels)
        .unwrap_or_default();
    assert_eq!(
        selector.get(labels::ROLE).map(String::as_str),
        Some(labels::ROLE_VOTER)
    );

    // kube's client retries 429 by default, which would turn a refused eviction into one that
    // succeeds once the budget allows it: ask exactly once.
    let mut config = env.cp.config().clone();
    config.default_retry = false;
    let once = kube::Client::try_from(config).or_panic();
    let pods_api: Api<Pod> = Api::namespaced(once, &ns);
    let voters: Vec<String> = pods_api
        .list(&ListParams::default().labels(&format!(
            "{},{}={}",
            labels::cluster_selector(name),
            labels::ROLE,
            labels::ROLE_VOTER
        )))
        .await
        .or_panic()
        .items
        .iter()
        .filter(|p| pod_ready(p))
        .map(|p| p.name_any())
        .collect();
    assert_eq!(voters.len(), 3, "{voters:?}");

    // The first voter may go.
    pods_api
        .evict(&voters[0], &EvictParams::default())
        .await
        .or_panic();
    let first_down = pods_api
        .get_opt(&voters[0])
        .await
        .or_panic()
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some() || !pod_ready(&p));
    assert!(first_down, "the evicted voter is down");
    // While it is down, the second is refused: 2 = minAvailable voters are left.
    let refused = pods_api.evict(&voters[1], &EvictParams::default()).await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 429, "{status:?}");
            assert!(
                status.message.contains("disruption budget"),
                "{}",
                status.message
            );
        }
        other => panic!("the second eviction must be refused with 429, got {other:?}"),
    }
    assert!(
        pods_api
            .get(&voters[1])
            .await
            .or_panic()
            .metadata
            .deletion_timestamp
            .is_none(),
        "the refused Pod keeps running"
    );
    let pdb = pdbs.get(name).await.or_panic();
    assert_eq!(pdb.status.map(|s| s.disruptions_allowed), Some(0));

    // The evicted member comes back on its PVC: same members, every key.
    wait_reconciled(&s, name, 3, BOOT).await;
    assert_eq!(names(&env.members(&ns, name).await), members_before);
    env.check_keys(&ns, name, &keys).await;
    s.finish(name).await;
}

// ---------------------------------------------------------------------------------------------
// Everything the spec passes through to the members.

/// `GET /metrics` on a member's plaintext metrics port, from the host (the pod runner publishes
/// member names in /etc/hosts).
async fn member_metrics(host: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect((host, 2381))
        .await
        .or_panic();
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.or_panic();
    let mut body = String::new();
    stream.read_to_string(&mut body).await.or_panic();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_repository_options_metadata_and_scheduling_reach_every_member() {
    let s = scope(
        "passthrough",
        &[&format!("--etcd-image-repository={MIRROR}")],
    )
    .await;
    let (env, ns, name) = (s.env, s.ns.clone(), "pt");
    let mut spec = spec(3);
    let extra: api::v1alpha2::EtcdClusterSpec = serde_json::from_value(json!({
        "version": spec.version,
        "additionalMetadata": {
            "labels": {"team": "db", "etcd-operator.cozystack.io/cluster": "hijack"},
            "annotations": {"example.com/owner": "platform"}
        },
        "imagePullSecrets": [{"name": "mirror-credentials"}],
        "topologySpreadConstraints": [{
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"etcd-operator.cozystack.io/cluster": name}}
        }],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"etcd-operator.cozystack.io/cluster": name}}
            }
        }]}},
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "512Mi"}},
        "options": {
            "quotaBackendBytes": 3221225472_i64,
            "autoCompactionMode": "periodic",
            "autoCompactionRetention": "1h",
            "snapshotCount": 5000
        }
    }))
    .or_panic();
    spec.additional_metadata = extra.additional_metadata;
    spec.image_pull_secrets = extra.image_pull_secrets;
    spec.topology_spread_constraints = extra.topology_spread_constraints;
    spec.affinity = extra.affinity;
    spec.resources = extra.resources;
    spec.options = extra.options;
    env.create_cluster(&ns, name, spec).await;
    wait_reconciled(&s, name, 3, BOOT).await;

    let pods = env.pods(&ns, name).await;
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let p = serde_json::to_value(pod).or_panic();
        let who = pod.name_any();
        let etcd = &p["spec"]["containers"][0];
        assert_eq!(etcd["image"], format!("{MIRROR}:v3.6.16"), "{who}");
        assert_eq!(p["metadata"]["labels"]["team"], "db", "{who}");
        assert_eq!(
            p["metadata"]["labels"][labels::CLUSTER],
            name,
            "{who}: operator labels win over additionalMetadata"
        );
        assert_eq!(
            p["metadata"]["annotations"]["example.com/owner"], "platform",
            "{who}"
        );
        assert_eq!(
            p["spec"]["imagePullSecrets"],
            json!([{"name": "mirror-credentials"}]),
            "{who}"
        );
        assert_eq!(
            p["spec"]["topologySpreadConstraints"][0]["topologyKey"], "topology.kubernetes.io/zone",
            "{who}"
        );
        assert_eq!(
            p["spec"]["affinity"]["podAntiAffinity"]
                ["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"],
            100,
            "{who}"
        );
        assert_eq!(
            etcd["resources"],
            json!({"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "512Mi"}}),
            "{who}"
        );
        let args: Vec<&str> = etcd["args"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(etcd["command"].as_array().into_iter().flatten())
            .filter_map(|a| a.as_str())
            .collect();
        for flag in [
            "--quota-backend-bytes=3221225472",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=1h",
            "--snapshot-count=5000",
        ] {
            assert!(args.contains(&flag), "{who}: {flag} missing from {args:?}");
        }
        // The flag reached the running etcd, not only the Pod spec.
        let metrics = member_metrics(&format!("{who}.{name}.{ns}.svc")).await;
        let quota = metrics
            .lines()
            .find(|l| l.starts_with("etcd_server_quota_backend_bytes "))
            .unwrap_or_default()
            .to_string();
        assert!(
            quota.ends_with(" 3.221225472e+09"),
            "{who}: etcd reports {quota:?}"
        );
    }
    for pvc in env.pvcs(&ns, name).await {
        assert_eq!(pvc.labels().get("team").map(String::as_str), Some("db"));
    }
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(env.client(), &ns);
    for svc in [name.to_string(), format!("{name}-client")] {
        let svc = services.get(&svc).await.or_panic();
        assert_eq!(svc.labels().get("team").map(String::as_str), Some("db"));
        assert_eq!(
            svc.annotations()
                .get("example.com/owner")
                .map(String::as_str),
            Some("platform")
        );
    }

    // A registry move: the operator restarted with another --etcd-image-repository rolls the
    // members onto it one at a time on the same version (followers first, the leader last),
    // with a writer running and every key kept.
    let keys = env.write_keys(&ns, name, 50).await;
    let endpoints: Vec<String> = pods
        .iter()
        .map(|p| format!("http://{}.{name}.{ns}.svc:2379", p.name_any()))
        .collect();
    let before = tests::rollout::uids(&pods);
    let mut s = s;
    s.operator.kill();
    let writer = tests::rollout::Writer::start(endpoints, None, "registry/");
    let moving = std::time::Instant::now();
    s.restart_with(&[]).await;
    let (fewest_ready, reasons) =
        tests::rollout::wait_rolled(env, &ns, name, 3, &before, Duration::from_secs(300)).await;
    let moved_at = std::time::Instant::now();
    let report = writer.finish().await;
    assert!(
        fewest_ready >= 2,
        "quorum lost: only {fewest_ready} of 3 Ready"
    );
    assert!(reasons.contains("RollingRestart"), "{reasons:?}");
    for pod in env.pods(&ns, name).await {
        let p = serde_json::to_value(&pod).or_panic();
        assert_eq!(
            p["spec"]["containers"][0]["image"],
            "quay.io/coreos/etcd:v3.6.16",
            "{}",
            pod.name_any()
        );
    }
    let restarted = tests::rollout::restarts_in_order(env, &ns, name).await;
    assert_eq!(restarted.len(), 3, "one restart per member: {restarted:?}");
    let moved = tests::rollout::event_messages(env, &ns, name, "LeaderMoved").await;
    let last = restarted.last().expect("a member was restarted");
    assert!(
        moved.iter().any(|m| m.contains(&format!("from {last} "))),
        "the member restarted last, {last}, had leadership moved off it first: {moved:?}"
    );
    env.check_keys(&ns, name, &keys).await;
    let mut etcd = tests::e2e::etcd_client(&env.client(), &ns, name).await;
    // Writes went on while the members moved: acknowledged ones during the roll, every one
    // of them kept with its value, and nothing stored the writer did not send.
    let during = report.acknowledged_between(moving, moved_at);
    assert!(
        during > 0,
        "no write acknowledged while the members moved ({:?}; {} writes in all, errors {:?})",
        moved_at - moving,
        report.written.len(),
        report.errors
    );
    report.assert_kept(
        "the writer during the registry move",
        &tests::e2e::read_keys(&mut etcd, "registry/").await,
    );
    eprintln!(
        "registry move: {} writes ({during} during the roll), {} failed ({} unsent, {} cut \
         off, {} timed out, {} refused), longest gap {:?}",
        report.written.len(),
        report.failed,
        report.unsent,
        report.cut_off,
        report.timed_out,
        report.refused,
        report.longest_gap
    );
    s.finish(name).await;
}
