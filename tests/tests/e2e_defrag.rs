//! End to end: EtcdDefrag runs on real etcd clusters. Space freed by deletes and a compaction is
//! reclaimed member by member, followers before the leader; a run waits Pending while a member
//! is stopped and while another run of the same cluster goes first; the default gate skips
//! members with little to reclaim; a NOSPACE alarm shows on the cluster and a defrag that
//! brings the members below the quota disarms it, after which writes are accepted again.
//! EtcdDefragPolicies create runs: at once when a check finds a member the rule selects (none
//! when it finds nothing), and on a cron schedule, keeping only the newest runs.
//! A large backend whose defragmentation outlasts the (shortened) call timeout gets exactly one
//! Defragment call per member, as etcd's own log counts them, and leadership is moved off the
//! leader before its turn. A full quota keeps the members Ready; raising it is rolled out, after
//! which a defrag disarms NOSPACE (not before: the members still ran the old quota).
//!
//! The operator of this binary bounds a Defragment call by 200ms + 1s per GiB of dbSize, so the
//! calls of every test here may end without an answer and are judged from etcd's dbSize.

use std::time::Duration;

use api::labels::DEFRAG_POLICY as POLICY_LABEL;
use api::v1alpha2::{
    DefragOutcome, DefragPhase, DefragRule, EtcdDefrag, EtcdDefragPolicy, EtcdDefragSpec,
    EtcdOptions, LocalReference,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use tests::e2e::{churn, condition, free, healthy, pod_ready, spec, Env};
use tests::harness::throughout;
use tests::OrPanic;
use tokio::sync::OnceCell;

/// This binary's environment: the operator with a short Defragment timeout.
async fn env() -> &'static Env {
    static ENV: OnceCell<Env> = OnceCell::const_new();
    ENV.get_or_init(|| {
        tests::e2e::start(
            tests::podrunner::PodRunner::builder(),
            &["--defrag-timeout-base=200ms", "--defrag-timeout-per-gib=1s"],
        )
    })
    .await
}

const BOOT: Duration = Duration::from_secs(180);
const RUN: Duration = Duration::from_secs(120);
const KIB: usize = 1024;

async fn create_defrag(
    env: &Env,
    ns: &str,
    name: &str,
    cluster: &str,
    rule: Option<DefragRule>,
    ttl: Option<i32>,
) {
    let d = EtcdDefrag::new(
        name,
        EtcdDefragSpec {
            cluster_ref: LocalReference {
                name: cluster.to_string(),
            },
            rule,
            ttl_seconds_after_finished: ttl,
        },
    );
    Api::<EtcdDefrag>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &d)
        .await
        .or_panic();
}

/// `(phase, Ready reason, Ready message)` of a run.
fn ready(d: &EtcdDefrag) -> (Option<DefragPhase>, String, String) {
    let s = d.status.clone().unwrap_or_default();
    let (reason, message) = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_default();
    (s.phase, reason, message)
}

async fn wait_defrag(
    env: &Env,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&EtcdDefrag) -> bool,
) -> EtcdDefrag {
    let api = Api::<EtcdDefrag>::namespaced(env.client(), ns);
    tests::harness::eventually(what, timeout, || async {
        let d = api.get(name).await.map_err(|e| e.to_string())?;
        if done(&d) {
            Ok(d)
        } else {
            Err(format!(
                "{:?}; members {:?}",
                ready(&d),
                d.status.map(|s| s.members)
            ))
        }
    })
    .await
}

fn terminal(d: &EtcdDefrag) -> bool {
    d.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(DefragPhase::is_terminal)
}

async fn events(env: &Env, ns: &str, object: &str) -> Vec<(String, String)> {
    let events = env.events(ns, object).await;
    events
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// The member Pod etcd's members agree is the leader (each asked on its own endpoint).
async fn agreed_leader(env: &Env, ns: &str, cluster: &str) -> String {
    let views = env.member_views(ns, cluster).await;
    let mut leaders = std::collections::BTreeSet::new();
    let mut ids = std::collections::BTreeMap::new();
    for (pod, view) in &views {
        let v = view
            .as_ref()
            .unwrap_or_else(|e| panic!("{ns}/{cluster}: member {pod} did not answer: {e}"));
        leaders.insert(v.leader);
        ids.insert(v.member_id, pod.clone());
    }
    assert_eq!(
        leaders.len(),
        1,
        "{ns}/{cluster}: the members disagree on the leader: {views:?}"
    );
    let leader = leaders.into_iter().next().unwrap_or_default();
    ids.get(&leader).cloned().unwrap_or_else(|| {
        panic!("{ns}/{cluster}: the leader {leader:x} is none of the member Pods: {views:?}")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defrag_waits_for_health_and_its_turn_then_reclaims_space_followers_first() {
    let env = env().await;
    let ns = env.namespace("defrag").await;
    let name = "df";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let mut etcd = env.etcd_client(&ns, name).await;
    // ~12MiB written, deleted and compacted away.
    churn(&mut etcd, "churn/", 192, 64 * KIB).await;

    // Who leads, as etcd itself says (every member asked on its own endpoint), not as the
    // operator reports it.
    let leader = agreed_leader(env, &ns, name).await;
    // A stopped member (sockets open, nothing answers) holds the run Pending: a follower, so
    // that the leadership stays where it is.
    let pods = env.pods(&ns, name).await;
    let stopped = pods
        .iter()
        .map(|p| p.name_any())
        .find(|p| *p != leader)
        .expect("a follower");
    env.runner.stop_container(&ns, &stopped, "etcd").or_panic();
    // `all`: right after a compaction, etcd's leader can still report most freed pages as in
    // use (dbSizeInUse), so a size gate may skip it; a defrag shrinks it all the same.
    let rule = DefragRule {
        all: Some(true),
        ..Default::default()
    };
    create_defrag(env, &ns, "first", name, Some(rule), None).await;
    // The second, with the default gate (200Mi), waits for the first.
    create_defrag(env, &ns, "second", name, None, Some(5)).await;
    let waiting = wait_defrag(
        env,
        &ns,
        "first",
        "Pending on the stopped member",
        RUN,
        |d| {
            let (phase, reason, message) = ready(d);
            phase == Some(DefragPhase::Pending)
                && reason == "ClusterUnhealthy"
                && message.contains(&stopped)
        },
    )
    .await;
    assert!(waiting.status.unwrap_or_default().members.is_empty());
    wait_defrag(env, &ns, "second", "second waits for first", RUN, |d| {
        let (phase, reason, message) = ready(d);
        phase == Some(DefragPhase::Pending)
            && reason == "WaitingForRun"
            && message.contains("first")
    })
    .await;
    env.runner
        .resume_container(&ns, &stopped, "etcd")
        .or_panic();

    let done = wait_defrag(env, &ns, "first", "first finishes", RUN, terminal).await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(DefragPhase::Complete),
        "{:?}",
        ready(&done)
    );
    assert_eq!(status.defragmented, Some(3), "{:?}", status.members);
    assert!(status.started_at.is_some() && status.completed_at.is_some());
    assert_eq!(status.members.len(), 3);
    for m in &status.members {
        assert_eq!(m.outcome, Some(DefragOutcome::Defragmented), "{m:?}");
        let (before, after) = (m.db_size_before.unwrap_or(0), m.db_size_after.unwrap_or(0));
        assert!(
            after + 4 * 1024 * 1024 < before,
            "{}: dbSize {before} -> {after}",
            m.name
        );
        assert_eq!(m.reclaimed_bytes, Some(before - after));
    }
    // Followers first, in etcd's own words: each member's log (microsecond timestamps, where
    // the status has whole seconds and the three often share one) has the leader's
    // defragmentation start only after every follower's has finished.
    let mut logged = Vec::new();
    for name in pods.iter().map(|p| p.name_any()) {
        let log = etcd_log(env, &ns, &name).await;
        let at = |msg: &str| {
            logged_at(&log, msg).unwrap_or_else(|| panic!("{name}: etcd logged no {msg:?}"))
        };
        let (started, finished) = (at("starting defragment"), at("finished defragment"));
        logged.push((name, started, finished));
    }
    let leader_started = logged
        .iter()
        .find(|(n, ..)| *n == leader)
        .map(|(_, started, _)| *started)
        .expect("the leader's log");
    for (name, _, finished) in logged.iter().filter(|(n, ..)| *n != leader) {
        assert!(
            *finished < leader_started,
            "etcd's logs: follower {name} finished its defragmentation at {finished}, after the \
             leader {leader} started its own at {leader_started}: {logged:?}"
        );
    }
    // And as the run reports it: by finish time, the leader is last and the only one.
    let mut order = status.members.clone();
    order.sort_by_key(|m| m.finished_at.clone().map(|t| t.0));
    let roles: Vec<&str> = order
        .iter()
        .map(|m| m.role.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["follower", "follower", "leader"], "{order:?}");
    assert_eq!(
        order.last().map(|m| m.name.as_str()),
        Some(leader.as_str()),
        "the member etcd named leader before the run was not defragmented last: {order:?}"
    );
    let defragmented: Vec<(String, String)> = events(env, &ns, "first")
        .await
        .into_iter()
        .filter(|(r, _)| r == "MemberDefragmented")
        .collect();
    assert_eq!(defragmented.len(), 3, "{defragmented:?}");
    assert!(defragmented.iter().all(|(_, m)| m.contains("reclaimed")));

    // The second run: nothing is above 200Mi reclaimable, every member is skipped. Then its
    // ttlSecondsAfterFinished deletes it.
    let second = wait_defrag(env, &ns, "second", "second finishes", RUN, terminal).await;
    let status = second.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(DefragPhase::Complete),
        "{:?}",
        ready(&second)
    );
    assert_eq!(status.defragmented, Some(0));
    assert_eq!(status.members.len(), 3);
    for m in &status.members {
        assert_eq!(m.outcome, Some(DefragOutcome::Skipped), "{m:?}");
        assert!(
            m.reason
                .as_deref()
                .unwrap_or("")
                .contains("freeSpaceAbove 200Mi"),
            "{m:?}"
        );
    }
    let api = Api::<EtcdDefrag>::namespaced(env.client(), &ns);
    tests::harness::eventually("second deleted by its TTL", RUN, || async {
        match api.get_opt("second").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    // A finished run is never re-run: the first keeps its result.
    let again = api.get("first").await.or_panic();
    assert_eq!(
        again.status.map(|s| s.completed_at),
        Some(status_completed(&done))
    );
}

fn status_completed(
    d: &EtcdDefrag,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    d.status.as_ref().and_then(|s| s.completed_at.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nospace_alarm_shows_on_the_cluster_and_a_defrag_below_the_quota_disarms_it() {
    let env = env().await;
    let ns = env.namespace("nospace").await;
    let name = "ns";
    let quota: i64 = 8 * 1024 * 1024;
    let mut cluster = spec(1);
    cluster.options = Some(EtcdOptions {
        quota_backend_bytes: Some(quota),
        ..Default::default()
    });
    env.create_cluster(&ns, name, cluster).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;
    let mut etcd = env.etcd_client(&ns, name).await;

    // Fill the backend until etcd refuses writes.
    let value = vec![b'x'; 64 * KIB];
    let mut refused = None;
    for i in 0..1000 {
        if let Err(e) = etcd.put(format!("fill/{i:05}"), value.clone(), None).await {
            refused = Some(e.to_string());
            break;
        }
    }
    let refused = refused.expect("etcd accepted 64MiB under an 8MiB quota");
    assert!(refused.contains("database space exceeded"), "{refused}");
    let c = env
        .wait_for(&ns, name, "Alarm NoSpace", RUN, |c| {
            condition(c, "Alarm").is_some_and(|(s, r, _)| s == "True" && r == "NoSpace")
        })
        .await;
    let (_, _, message) = condition(&c, "Alarm").unwrap_or_default();
    assert!(
        message.contains(&format!("{name}-")) && message.contains("EtcdDefrag"),
        "{message}"
    );

    // Deletes and compaction are allowed under NOSPACE; the file keeps its size until a defrag.
    free(&mut etcd, "fill/").await;
    assert!(
        etcd.put("after", "x", None).await.is_err(),
        "NOSPACE still refuses writes"
    );
    let rule = DefragRule {
        free_space_above: Some(Quantity("1Gi".into())),
        quota_usage_above: Some("50%".into()),
        min_reclaim: Some(Quantity("1Mi".into())),
        ..Default::default()
    };
    create_defrag(env, &ns, "recover", name, Some(rule), None).await;
    let done = wait_defrag(env, &ns, "recover", "recover finishes", RUN, terminal).await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(DefragPhase::Complete),
        "{:?}",
        ready(&done)
    );
    let member = &status.members[0];
    assert_eq!(
        member.outcome,
        Some(DefragOutcome::Defragmented),
        "{member:?}"
    );
    assert!(
        member.reason.as_deref().unwrap_or("").contains("50%"),
        "{member:?}"
    );
    assert!(
        member.db_size_after.unwrap_or(i64::MAX) < quota,
        "{member:?}"
    );
    assert!(
        ready(&done).2.contains("disarmed the NOSPACE alarm"),
        "{:?}",
        ready(&done)
    );
    assert!(events(env, &ns, name)
        .await
        .iter()
        .any(|(r, _)| r == "AlarmDisarmed"));

    // Writes resume, and the cluster says the alarm is gone.
    tests::harness::eventually("a write is accepted", RUN, || {
        let mut etcd = etcd.clone();
        async move {
            etcd.put("after", "x", None)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    assert!(etcd
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None
        )
        .await
        .or_panic()
        .alarms()
        .is_empty());
    env.wait_for(&ns, name, "Alarm NoAlarm", RUN, |c| {
        condition(c, "Alarm").is_some_and(|(s, r, _)| s == "False" && r == "NoAlarm")
    })
    .await;
}

/// The member etcd names as its leader, asked of etcd itself.
async fn etcd_leader(etcd: &mut etcd_client::Client) -> String {
    let leader = etcd.status().await.or_panic().leader();
    let members = etcd.member_list().await.or_panic();
    members
        .members()
        .iter()
        .find(|m| m.id() == leader)
        .map(|m| m.name().to_string())
        .unwrap_or_else(|| panic!("etcd names leader {leader:x}, which it does not list"))
}

/// When a member's etcd log (JSON lines) first has the message `msg`.
fn logged_at(log: &str, msg: &str) -> Option<Timestamp> {
    let needle = format!(r#""msg":"{msg}""#);
    let line = log.lines().find(|l| l.contains(&needle))?;
    let ts = line.split(r#""ts":""#).nth(1)?.split('"').next()?;
    ts.parse().ok()
}

/// The etcd container's log of a member Pod (through the apiserver and the runner's kubelet).
async fn etcd_log(env: &Env, ns: &str, pod: &str) -> String {
    Api::<Pod>::namespaced(env.client(), ns)
        .logs(
            pod,
            &LogParams {
                container: Some("etcd".into()),
                ..Default::default()
            },
        )
        .await
        .or_panic()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_backend_gets_one_defragment_call_per_member_and_the_leader_hands_over_first() {
    let env = env().await;
    let ns = env.namespace("defrag-big").await;
    let name = "big";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let mut etcd = env.etcd_client(&ns, name).await;
    // 96 MiB live (etcd copies every live key into a new file) beside 12 MiB freed: each
    // defragmentation outlasts this operator's 200ms + 1s/GiB bound on the call.
    let value = vec![b'v'; 64 * KIB];
    for i in 0..1536 {
        etcd.put(format!("big/{i:05}"), value.clone(), None)
            .await
            .or_panic();
    }
    churn(&mut etcd, "churn/", 192, 64 * KIB).await;
    let leader = etcd_leader(&mut etcd).await;

    let rule = DefragRule {
        all: Some(true),
        ..Default::default()
    };
    create_defrag(env, &ns, "big", name, Some(rule), None).await;
    let done = wait_defrag(env, &ns, "big", "the run finishes", 2 * RUN, terminal).await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(DefragPhase::Complete),
        "{:?}; {:?}",
        ready(&done),
        status.members
    );
    assert_eq!(status.defragmented, Some(3), "{:?}", status.members);
    // The calls ended without an answer (the timeout), were not repeated, and were judged from
    // the dbSize once the members answered again.
    assert!(
        status
            .members
            .iter()
            .any(|m| m.reason.as_deref().unwrap_or("").contains("did not answer")),
        "no call outlasted its timeout: {:?}",
        status.members
    );

    // etcd's own count: one defragmentation started and finished on each member.
    for pod in env.pods(&ns, name).await {
        let log = etcd_log(env, &ns, &pod.name_any()).await;
        let started = log.matches(r#""msg":"starting defragment""#).count();
        let finished = log.matches(r#""msg":"finished defragment""#).count();
        assert_eq!(
            (started, finished),
            (1, 1),
            "{}: Defragment calls as etcd logged them",
            pod.name_any()
        );
    }
    // Leadership moved off the leader before it was defragmented: etcd names another leader,
    // and the former leader's log has the transfer before its defragmentation.
    let now = etcd_leader(&mut etcd).await;
    assert_ne!(now, leader, "{leader} still leads");
    let log = etcd_log(env, &ns, &leader).await;
    let moved = log.find("leadership transfer");
    let defragmented = log.find("starting defragment");
    assert!(
        moved.is_some() && moved < defragmented,
        "{leader}: transfer at {moved:?}, defragment at {defragmented:?}"
    );
    // It was processed last, reported as the leader it was.
    let mut order = status.members.clone();
    order.sort_by_key(|m| m.finished_at.clone().map(|t| t.0));
    let last = order.last().expect("three members processed");
    assert_eq!(
        (last.name.as_str(), last.role.as_deref()),
        (leader.as_str(), Some("leader")),
        "{order:?}"
    );
    assert!(events(env, &ns, "big")
        .await
        .iter()
        .any(|(r, m)| r == "LeaderMoved" && m.contains(&format!("from {leader} "))));
}

/// `spec.options.quotaBackendBytes` of the cluster set to `quota`.
async fn set_quota(env: &Env, ns: &str, name: &str, quota: i64) {
    env.clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"options": {"quotaBackendBytes": quota}}})),
        )
        .await
        .or_panic();
}

/// Every member Pod of `name` Ready and running with `--quota-backend-bytes=<quota>`.
async fn wait_runs_quota(env: &Env, ns: &str, name: &str, quota: i64) {
    let flag = format!("--quota-backend-bytes={quota}");
    tests::harness::eventually("the members run the quota", 2 * RUN, || async {
        let pods = env.pods(ns, name).await;
        let rolled = pods.iter().all(|p| {
            pod_ready(p)
                && p.spec.as_ref().is_some_and(|s| {
                    s.containers
                        .iter()
                        .any(|c| c.args.iter().flatten().any(|a| *a == flag))
                })
        });
        if rolled && !pods.is_empty() {
            Ok(())
        } else {
            Err(format!("{} pod(s), not all Ready with {flag}", pods.len()))
        }
    })
    .await;
}

async fn pause_rollout(env: &Env, ns: &str, name: &str, paused: bool) {
    let value = paused.then_some("true");
    env.clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"annotations": {
                api::labels::ROLLOUT_PAUSED_ANNOTATION: value,
            }}})),
        )
        .await
        .or_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_quota_keeps_members_ready_and_a_raised_quota_rolls_out_then_nospace_is_disarmed() {
    let env = env().await;
    let ns = env.namespace("quota").await;
    let name = "qt";
    let small: i64 = 16 * 1024 * 1024;
    let medium: i64 = 32 * 1024 * 1024;
    let large: i64 = 64 * 1024 * 1024;
    let mut cluster = spec(1);
    cluster.options = Some(EtcdOptions {
        quota_backend_bytes: Some(medium),
        ..Default::default()
    });
    env.create_cluster(&ns, name, cluster).await;
    env.wait_healthy(&ns, name, 1, BOOT).await;
    // 20 MiB of live data under a 32 MiB quota, then the quota lowered to 16 MiB: the data a
    // defrag keeps is then above the quota the member runs with whatever bbolt's file growth and
    // fragmentation (filling a 16 MiB quota to the brim leaves live data that a defrag may shrink
    // just under it, and then disarming is right).
    let mut etcd = env.etcd_client(&ns, name).await;
    let value = vec![b'x'; 64 * KIB];
    let live = 320;
    for i in 0..live {
        etcd.put(format!("fill/{i:05}"), value.clone(), None)
            .await
            .or_panic();
    }
    let mut accepted: i64 = live;
    set_quota(env, &ns, name, small).await;
    wait_runs_quota(env, &ns, name, small).await;
    env.wait_healthy(&ns, name, 1, RUN).await;
    let mut etcd = env.etcd_client(&ns, name).await;
    let mut refused = None;
    for i in live..1000 {
        if let Err(e) = etcd.put(format!("fill/{i:05}"), value.clone(), None).await {
            refused = Some(e.to_string());
            break;
        }
        accepted += 1;
    }
    let refused = refused.expect("etcd accepted 64MiB under a 16MiB quota");
    assert!(refused.contains("database space exceeded"), "{refused}");

    // NOSPACE raised, and the member stays Ready: the cluster is Available with quorum.
    env.wait_for(&ns, name, "NOSPACE shown, still healthy", RUN, |c| {
        condition(c, "Alarm").is_some_and(|(s, r, _)| s == "True" && r == "NoSpace")
            && healthy(c, 1)
    })
    .await;
    throughout(Duration::from_secs(8), Duration::from_secs(1), || async {
        let pods = env.pods(&ns, name).await;
        assert!(
            pods.iter().all(pod_ready),
            "a member turned not Ready under NOSPACE: {:?}",
            pods.iter()
                .map(|p| (p.name_any(), pod_ready(p)))
                .collect::<Vec<_>>()
        );
    })
    .await;

    // The quota raised while the rollout is paused: the member still runs 16MiB, so a defrag
    // must not disarm NOSPACE (it is at the quota it runs with).
    pause_rollout(env, &ns, name, true).await;
    set_quota(env, &ns, name, large).await;
    let all = DefragRule {
        all: Some(true),
        ..Default::default()
    };
    create_defrag(env, &ns, "early", name, Some(all.clone()), None).await;
    let early = wait_defrag(env, &ns, "early", "early finishes", RUN, terminal).await;
    assert!(
        ready(&early).2.contains("NOSPACE alarm stays raised"),
        "{:?}",
        ready(&early)
    );
    assert!(
        etcd.put("early", "x", None).await.is_err(),
        "NOSPACE still refuses writes"
    );

    // Rolled out: the member restarts with the new quota (Ready again under NOSPACE).
    pause_rollout(env, &ns, name, false).await;
    wait_runs_quota(env, &ns, name, large).await;
    env.wait_healthy(&ns, name, 1, RUN).await;

    // A defrag now disarms it: every member is below the quota it runs with.
    create_defrag(env, &ns, "after", name, Some(all), None).await;
    let after = wait_defrag(env, &ns, "after", "after finishes", RUN, terminal).await;
    assert_eq!(
        after.status.as_ref().and_then(|s| s.phase),
        Some(DefragPhase::Complete),
        "{:?}",
        ready(&after)
    );
    assert!(
        ready(&after).2.contains("disarmed the NOSPACE alarm"),
        "{:?}",
        ready(&after)
    );
    let etcd = env.etcd_client(&ns, name).await;
    tests::harness::eventually("a write is accepted", RUN, || {
        let mut etcd = etcd.clone();
        async move {
            etcd.put("after", "x", None)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    env.wait_for(&ns, name, "Alarm NoAlarm", RUN, |c| {
        condition(c, "Alarm").is_some_and(|(s, r, _)| s == "False" && r == "NoAlarm")
    })
    .await;
    // Every key written before the alarm is still there.
    let kept = etcd
        .clone()
        .get(
            "fill/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .or_panic()
        .count();
    assert_eq!(kept, accepted);
}

/// The runs `policy` created: labelled with its name.
async fn policy_runs(env: &Env, ns: &str, policy: &str) -> Vec<EtcdDefrag> {
    Api::<EtcdDefrag>::namespaced(env.client(), ns)
        .list(&ListParams::default().labels(&format!("{POLICY_LABEL}={policy}")))
        .await
        .or_panic()
        .items
}

async fn create_policy(env: &Env, ns: &str, name: &str, spec: serde_json::Value) {
    let policy: EtcdDefragPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdDefragPolicy",
        "metadata": {"name": name}, "spec": spec,
    }))
    .or_panic();
    Api::<EtcdDefragPolicy>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &policy)
        .await
        .or_panic();
}

async fn wait_policy(
    env: &Env,
    ns: &str,
    name: &str,
    what: &str,
    done: impl Fn(&EtcdDefragPolicy) -> bool,
) -> EtcdDefragPolicy {
    let api = Api::<EtcdDefragPolicy>::namespaced(env.client(), ns);
    tests::harness::eventually(what, Duration::from_secs(180), || async {
        let p = api.get(name).await.map_err(|e| e.to_string())?;
        if done(&p) {
            Ok(p)
        } else {
            Err(format!("{:?}", p.status))
        }
    })
    .await
}

fn ready_message(p: &EtcdDefragPolicy) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defrag_policies_create_runs_on_their_schedule_and_when_a_check_finds_space() {
    let env = env().await;
    let ns = env.namespace("defrag-policy").await;
    let name = "dp";
    env.create_cluster(&ns, name, spec(3)).await;
    env.wait_healthy(&ns, name, 3, BOOT).await;
    let mut etcd = env.etcd_client(&ns, name).await;

    // Every minute, unconditionally, keeping one Complete run: the first fire comes within a
    // minute; the rest of the test runs meanwhile.
    create_policy(
        env,
        &ns,
        "every-minute",
        serde_json::json!({
            "clusterRef": {"name": name}, "schedule": "* * * * *",
            "rule": {"all": true}, "successfulRunsHistoryLimit": 1,
        }),
    )
    .await;

    // A check with a threshold no member reaches: checked at once, no run.
    create_policy(
        env,
        &ns,
        "quiet",
        serde_json::json!({
            "clusterRef": {"name": name}, "checkInterval": "1h",
            "rule": {"freeSpaceAbove": "1Gi"},
        }),
    )
    .await;
    let quiet = wait_policy(env, &ns, "quiet", "the quiet policy checked", |p| {
        ready_message(p).contains("found no member")
    })
    .await;
    assert!(quiet.status.and_then(|s| s.last_check_time).is_some());
    assert!(policy_runs(env, &ns, "quiet").await.is_empty());

    // ~12 MiB freed; a check whose rule takes 4 MiB reclaimable creates a run at once, which
    // reclaims it.
    churn(&mut etcd, "churn/", 192, 64 * KIB).await;
    create_policy(
        env,
        &ns,
        "on-check",
        serde_json::json!({
            "clusterRef": {"name": name}, "checkInterval": "1h",
            "rule": {"freeSpaceAbove": "4Mi", "minReclaim": "1Mi"},
        }),
    )
    .await;
    let checked = wait_policy(env, &ns, "on-check", "the check found a member", |p| {
        ready_message(p).contains("worth a defrag")
    })
    .await;
    let runs = policy_runs(env, &ns, "on-check").await;
    assert_eq!(runs.len(), 1, "one run per finding: {runs:?}");
    let run = runs[0].name_any();
    assert_eq!(
        runs[0]
            .spec
            .rule
            .as_ref()
            .and_then(|r| r.free_space_above.clone()),
        Some(Quantity("4Mi".into())),
        "the run carries the policy's rule"
    );
    let done = wait_defrag(env, &ns, &run, "the policy's run finishes", RUN, terminal).await;
    let status = done.status.unwrap_or_default();
    assert_eq!(status.phase, Some(DefragPhase::Complete));
    assert!(
        status
            .members
            .iter()
            .any(|m| m.outcome == Some(DefragOutcome::Defragmented)
                && m.db_size_after.unwrap_or(0) + 4 * 1024 * 1024 < m.db_size_before.unwrap_or(0)),
        "{:?}",
        status.members
    );
    assert!(events(env, &ns, "on-check")
        .await
        .iter()
        .any(|(r, m)| r == "DefragCreated" && m.contains(&run)));
    assert!(checked.status.and_then(|s| s.last_run_time).is_some());

    // The schedule: runs created a minute apart, each older one deleted once a newer one is
    // Complete (history limit 1). Events of one reason are aggregated, so the runs are counted
    // by the names seen.
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    tests::harness::eventually(
        "two scheduled runs, one kept",
        Duration::from_secs(200),
        || async {
            let runs = policy_runs(env, &ns, "every-minute").await;
            let phases: Vec<(String, Option<DefragPhase>)> = runs
                .iter()
                .map(|d| (d.name_any(), d.status.as_ref().and_then(|s| s.phase)))
                .collect();
            let n = {
                let mut seen = seen.lock().or_panic();
                seen.extend(phases.iter().map(|(n, _)| n.clone()));
                seen.len()
            };
            let complete = phases
                .iter()
                .filter(|(_, p)| *p == Some(DefragPhase::Complete))
                .count();
            if n >= 2 && runs.len() == 1 && complete == 1 {
                Ok(())
            } else {
                Err(format!("{n} seen, runs now {phases:?}"))
            }
        },
    )
    .await;
    let p = wait_policy(env, &ns, "every-minute", "status of the schedule", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.last_schedule_time.is_some() && s.last_successful_time.is_some())
    })
    .await;
    assert!(
        ready_message(&p).contains("next scheduled run at"),
        "{}",
        ready_message(&p)
    );
}

/// The reference's released (v0.5.5) `EtcdDefragPolicy`, every spec field set, as its users
/// write it (the threshold rule: `all` is exclusive with the other rule fields).
fn reference_policy(name: &str, cluster: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdDefragPolicy",
        "metadata": {"name": name},
        "spec": {
            "clusterRef": {"name": cluster},
            "schedule": "* * * * *",
            "suspend": false,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 50,
            "historyLimit": 1,
            "ttlSecondsAfterFinished": 3600,
            "rule": {"freeSpaceAbove": "1Mi", "quotaUsageAbove": "50%", "minReclaim": "512Ki"},
        },
    })
}

/// The policy's condition of `type_`: (status, reason, message).
fn policy_condition(p: &EtcdDefragPolicy, type_: &str) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The unix second a run's name carries (`<policy>-<unix seconds of the tick>`).
fn tick_of(run: &str, policy: &str) -> i64 {
    run.strip_prefix(&format!("{policy}-"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("run {run} is not named <{policy}>-<unix seconds>"))
}

fn last_schedule(p: &EtcdDefragPolicy) -> Option<i64> {
    p.status
        .as_ref()?
        .last_schedule_time
        .as_ref()
        .map(|t| t.0.as_second())
}

/// Rewind `status.lastScheduleTime`, as a policy the operator last acted on at `at` (the
/// operator was down since): the next reconcile walks the ticks missed since.
async fn rewind(env: &Env, ns: &str, policy: &str, at: &str) {
    Api::<EtcdDefragPolicy>::namespaced(env.client(), ns)
        .patch_status(
            policy,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"lastScheduleTime": at}})),
        )
        .await
        .or_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_defrag_policy_keeps_every_field_and_stamps_runs_as_released() {
    let env = env().await;
    let ns = env.namespace("defrag-refpolicy").await;
    let name = "rp";
    env.create_cluster(&ns, name, spec(1)).await;
    let policies = Api::<EtcdDefragPolicy>::namespaced(env.client(), &ns);
    let apply = |m: serde_json::Value| {
        let policies = policies.clone();
        async move {
            let name = m["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            policies
                .patch(
                    &name,
                    &PatchParams::apply("reference-user"),
                    &Patch::Apply(m),
                )
                .await
                .or_panic()
        }
    };

    // Applied server-side, the reference's manifest reads back identical: nothing pruned, no
    // default injected.
    let manifest = reference_policy("reference", name);
    apply(manifest.clone()).await;
    let raw = Api::<kube::api::DynamicObject>::namespaced_with(
        env.client(),
        &ns,
        &kube::api::ApiResource::erase::<EtcdDefragPolicy>(&()),
    );
    let stored = raw.get("reference").await.or_panic();
    assert_eq!(stored.data["spec"], manifest["spec"], "the spec as stored");

    // Forbid and Allow against a cluster that does not exist: their runs never finish.
    let no_deadline = |mut m: serde_json::Value| {
        if let Some(spec) = m["spec"].as_object_mut() {
            spec.remove("startingDeadlineSeconds");
        }
        m
    };
    apply(no_deadline(reference_policy("forbid", "nowhere"))).await;
    let mut allow = no_deadline(reference_policy("allow", "nowhere"));
    allow["spec"]["concurrencyPolicy"] = "Allow".into();
    apply(allow).await;

    // A yearly schedule last acted on long ago, with a deadline: the newest tick (this year's
    // January 1st) is far past it, so it is skipped, consumed and reported, and no run starts.
    let mut late = reference_policy("late", name);
    late["spec"]["schedule"] = "0 0 1 1 *".into();
    late["spec"]["startingDeadlineSeconds"] = 60.into();
    apply(late).await;
    // A yearly schedule missed for over two centuries, no deadline: the backlog is not walked
    // to its end but collapses into one run of the newest tick.
    let mut backlog = no_deadline(reference_policy("backlog", "nowhere"));
    backlog["spec"]["schedule"] = "0 0 1 1 *".into();
    apply(backlog).await;
    for p in ["late", "backlog"] {
        wait_policy(env, &ns, p, "the policy's first reconcile", |p| {
            policy_condition(p, "Active").is_some()
        })
        .await;
    }
    rewind(env, &ns, "late", "2000-01-01T00:00:00Z").await;
    rewind(env, &ns, "backlog", "1800-01-01T00:00:00Z").await;
    let late = wait_policy(env, &ns, "late", "the late tick consumed", |p| {
        last_schedule(p).is_some_and(|t| t > 946_684_800)
    })
    .await;
    let consumed = late
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.clone());
    let consumed = consumed.map(|t| t.0.to_string()).unwrap_or_default();
    assert!(consumed.ends_with("-01-01T00:00:00Z"), "{consumed}");
    assert!(policy_runs(env, &ns, "late").await.is_empty());
    tests::harness::eventually("MissedSchedule on the late policy", RUN, || async {
        let ev = events(env, &ns, "late").await;
        ev.iter()
            .find(|(r, m)| r == "MissedSchedule" && m.contains("startingDeadlineSeconds"))
            .map(|_| ())
            .ok_or(format!("{ev:?}"))
    })
    .await;
    let collapsed = tests::harness::eventually("the backlog's one run", RUN, || async {
        let runs = policy_runs(env, &ns, "backlog").await;
        match runs.as_slice() {
            [one] => Ok(one.name_any()),
            _ => Err(format!("{runs:?}")),
        }
    })
    .await;
    let ev = events(env, &ns, "backlog").await;
    assert!(
        ev.iter()
            .any(|(r, m)| r == "StampedRun" && m.contains(&collapsed) && m.contains("collapsed")),
        "{ev:?}"
    );

    // The reference policy's first run: named for its tick, owned by and labelled with the
    // policy and the cluster, carrying the rule and the TTL.
    env.wait_healthy(&ns, name, 1, BOOT).await;
    let uid = policies.get("reference").await.or_panic().uid();
    let first = tests::harness::eventually("the first stamped run", RUN, || async {
        let runs = policy_runs(env, &ns, "reference").await;
        runs.first().cloned().ok_or("no run yet".to_string())
    })
    .await;
    let run = first.name_any();
    let tick = tick_of(&run, "reference");
    assert_eq!(tick % 60, 0, "{run}: a per-minute tick");
    assert_eq!(
        first.labels().get(POLICY_LABEL).map(String::as_str),
        Some("reference")
    );
    assert_eq!(
        first.labels().get(api::labels::CLUSTER).map(String::as_str),
        Some(name)
    );
    let owner = first
        .owner_references()
        .first()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            Some(owner.uid),
            owner.controller
        ),
        ("EtcdDefragPolicy", "reference", uid, Some(true))
    );
    assert_eq!(
        serde_json::to_value(&first.spec.rule).or_panic(),
        manifest["spec"]["rule"]
    );
    assert_eq!(first.spec.ttl_seconds_after_finished, Some(3600));
    let p = wait_policy(
        env,
        &ns,
        "reference",
        "lastScheduleTime of the first tick",
        |p| last_schedule(p).is_some_and(|t| t >= tick),
    )
    .await;
    let active = policy_condition(&p, "Active").unwrap_or_default();
    assert_eq!(
        (active.0.as_str(), active.1.as_str()),
        ("True", "Scheduled")
    );
    let done = wait_defrag(env, &ns, &run, "the first run finishes", RUN, terminal).await;
    assert_eq!(
        done.status.and_then(|s| s.phase),
        Some(DefragPhase::Complete)
    );

    // historyLimit 1: once the next tick's run finished, the first is deleted (oldest first).
    let kept =
        tests::harness::eventually("the next run kept, the first deleted", RUN * 2, || async {
            let runs = policy_runs(env, &ns, "reference").await;
            let names: Vec<String> = runs.iter().map(|d| d.name_any()).collect();
            match runs.as_slice() {
                [one] if one.name_any() != run && terminal(one) => Ok(one.name_any()),
                _ => Err(format!("{names:?}")),
            }
        })
        .await;
    assert!(tick_of(&kept, "reference") > tick);
    let ev = events(env, &ns, "reference").await;
    assert!(
        ev.iter()
            .any(|(r, m)| r == "StampedRun" && m.contains(&run)),
        "{ev:?}"
    );

    // Forbid: while its first run waits (its cluster does not exist), the next ticks are
    // skipped, consumed (lastScheduleTime moves on) and reported; Allow stamps them anyway.
    let forbidden = tests::harness::eventually("a forbidden tick", RUN * 2, || async {
        let ev = events(env, &ns, "forbid").await;
        ev.iter()
            .find(|(r, _)| r == "ConcurrencyForbidden")
            .map(|(_, m)| m.clone())
            .ok_or(format!("{ev:?}"))
    })
    .await;
    let runs = policy_runs(env, &ns, "forbid").await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let waiting = runs[0].name_any();
    assert!(forbidden.contains(&waiting), "{forbidden}");
    let p = policies.get("forbid").await.or_panic();
    assert!(last_schedule(&p).unwrap_or_default() > tick_of(&waiting, "forbid"));
    assert_eq!(
        p.status
            .as_ref()
            .map(|s| s.active.iter().map(|a| a.name.clone()).collect()),
        Some(vec![waiting.clone()])
    );
    let checked = runs[0]
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "DefragChecked"))
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(
        checked,
        Some(("False".to_string(), "ClusterNotHealthy".to_string()))
    );
    assert!(events(env, &ns, &waiting)
        .await
        .iter()
        .any(|(r, _)| r == "DefragDeferred"));
    tests::harness::eventually("Allow stamps a run at each tick", RUN, || async {
        let runs = policy_runs(env, &ns, "allow").await;
        (runs.len() >= 2 && runs.iter().all(|d| !terminal(d)))
            .then_some(())
            .ok_or(format!("{} runs", runs.len()))
    })
    .await;
}
