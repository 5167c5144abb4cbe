//! End to end, member-level faults with a client workload running through each
//! ([`tests::workload`]: a writer, a reader and a watcher, checked at the end for every
//! acknowledged write kept, revisions in order, the watch complete and no stale read). Each test
//! ends with the workload's check and the cluster Available with the members it asked for, and
//! prints the workload's report row (docs/reliability.md collects them).
//!
//! Every test runs its own operator, limited to the test's namespace (its Lease there too), as in
//! `e2e_lifecycle`: the operator-crash tests kill and restart theirs. The control plane and the
//! pod runner are shared by the binary.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api::v1alpha2::{
    AuthSpec, DefragPhase, DefragRule, EtcdClusterSpec, EtcdDefrag, EtcdDefragSpec, EtcdSnapshot,
    LocalReference, PvcLocation, SecretReference, SnapshotDestination, SnapshotPhase, StorageSpec,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use tests::e2e::{member_view, spec, Env};
use tests::faults;
use tests::harness::{eventually_every, throughout};
use tests::operator::{shared_env, Scope};
use tests::podrunner::PodRunner;
use tests::quorum;
use tests::workload::{Report, Workload};
use tests::OrPanic;

const BOOT: Duration = Duration::from_secs(180);
/// How long a cluster gets to heal after a fault.
const HEAL: Duration = Duration::from_secs(240);
/// The workload's run before a fault, for the "before" latency.
const BASELINE: Duration = Duration::from_secs(3);
/// How long a network cut or a freeze lasts: ten election timeouts.
const HOLD: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The environment: the shared control plane and pod runner, and one operator per test.

/// The binary's control plane and pod runner; each test brings its own operator (see [`scope`]).
async fn lab() -> &'static Env {
    static LAB: OnceCell<Env> = OnceCell::const_new();
    LAB.get_or_init(|| shared_env(PodRunner::builder(), "faults-idle"))
        .await
}

/// One test's namespace in the lab and the operator that owns it.
async fn scope(prefix: &str) -> Scope {
    let image = format!("--operator-image={}", tests::e2e::OPERATOR_IMAGE);
    Scope::new(lab().await, prefix, &[image.as_str()])
        .await
        .polling(Duration::from_millis(500))
}

/// Create the cluster and wait until it is healthy.
async fn create(s: &Scope, name: &str, spec: EtcdClusterSpec) {
    let replicas = spec.replicas;
    s.env.create_cluster(&s.ns, name, spec).await;
    s.wait_healthy(name, replicas, BOOT).await;
}

/// Print the report as a table row (the suite's output is where docs/reliability.md's figures
/// come from) and check what every fault test demands of it.
fn print(report: &Report) {
    println!("{}\n{report}", Report::HEADER);
    assert_eq!(report.lost, 0, "{report:?}");
    assert!(
        report.acknowledged > 0,
        "the writer wrote nothing: {report:?}"
    );
}

/// Wait until the workload has an acknowledged write newer than `after`: the cluster serves
/// writes (again).
async fn writes_flow(workload: &Workload, after: Option<i64>, within: Duration, what: &str) {
    eventually_every(
        &format!("writes acknowledged {what}"),
        within,
        Duration::from_millis(100),
        || async {
            match workload.newest_revision() {
                Some(r) if after.is_none_or(|a| r > a) => Ok(r),
                newest => Err(format!("newest acknowledged revision {newest:?}")),
            }
        },
    )
    .await;
}

/// `pod`'s member holds the workload's newest acknowledged key in its own data (a serializable
/// read on its own endpoint): it caught up after the fault.
async fn caught_up(env: &Env, ns: &str, pod: &str, report: &Report) {
    let Some((key, _)) = report.newest.clone() else {
        panic!("no acknowledged write: {report:?}");
    };
    let pods: Api<Pod> = Api::namespaced(env.client(), ns);
    eventually_every(
        &format!("{ns}/{pod} to hold {key} in its own data"),
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let p = pods.get(pod).await.map_err(|e| e.to_string())?;
            if faults::member_holds(&p, &key).await? {
                Ok(())
            } else {
                Err(format!("{pod} does not hold {key} yet"))
            }
        },
    )
    .await;
}

/// Nothing was removed or replaced: the same EtcdMembers and the same member Pods (by UID), none
/// being deleted.
async fn nothing_removed(
    env: &Env,
    ns: &str,
    name: &str,
    members: &[String],
    uids: &BTreeMap<String, String>,
    when: &str,
) {
    let mut now = env.member_names(ns, name).await;
    now.sort();
    assert_eq!(now, members, "{when}: the EtcdMembers changed");
    let pods = env.pods(ns, name).await;
    for p in &pods {
        assert!(
            p.metadata.deletion_timestamp.is_none(),
            "{when}: Pod {} is being deleted",
            p.name_any()
        );
    }
    assert_eq!(
        &faults::pod_uids(env, ns, name).await,
        uids,
        "{when}: a member Pod was replaced"
    );
}

async fn sorted_members(env: &Env, ns: &str, name: &str) -> Vec<String> {
    let mut m = env.member_names(ns, name).await;
    m.sort();
    m
}

// ---------------------------------------------------------------------------------------------
// 4, 5, 6: a member cut off or frozen past the election timeout.

/// How long the members left get to elect a leader once the old one is cut off or frozen: a few
/// election timeouts on the loaded machine.
const ELECTED: Duration = Duration::from_secs(30);

/// The Pod of member `member` (named like its EtcdMember).
async fn member_pod(env: &Env, ns: &str, cluster: &str, member: &str) -> Pod {
    env.pods(ns, cluster)
        .await
        .into_iter()
        .find(|p| p.name_any() == member)
        .unwrap_or_else(|| panic!("{ns}/{member}: its Pod is gone"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_cut_off_past_the_election_timeout_rejoins_keeping_every_acknowledged_write() {
    let s = scope("cut-follower").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "cf");
    create(&s, name, spec(3)).await;
    let members = sorted_members(env, ns, name).await;
    let uids = faults::pod_uids(env, ns, name).await;
    let workload = Workload::start(env, ns, name)
        .await
        .named("4. follower network cut 10 s");
    tokio::time::sleep(BASELINE).await;

    let victim = faults::followers(env, ns, name).await.remove(0);
    let victim_pod = member_pod(env, ns, name, &victim).await;
    workload.fault_started();
    let cut = faults::cut_member(env, ns, &victim).await;
    // The cut took effect: the follower's own endpoint no longer answers.
    let reached = tokio::time::timeout(Duration::from_secs(6), member_view(&victim_pod)).await;
    assert!(
        !matches!(reached, Ok(Ok(_))),
        "{victim} still answers on its client endpoint after the cut: {reached:?}"
    );
    // Two of three keep the quorum: writes go on while the follower is away.
    let during = workload.newest_revision();
    writes_flow(&workload, during, HOLD, "with a follower cut off").await;
    tokio::time::sleep(HOLD).await;
    nothing_removed(env, ns, name, &members, &uids, "during the cut").await;
    cut.restore().await;
    workload.fault_ended();

    s.wait_healthy(name, 3, HEAL).await;
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    assert!(report.acknowledged_during > 0, "{report:?}");
    caught_up(env, ns, &victim, &report).await;
    nothing_removed(env, ns, name, &members, &uids, "after the cut").await;
    s.finish(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_cut_off_is_replaced_as_leader_and_the_operator_removes_nothing() {
    let s = scope("cut-leader").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "cl");
    create(&s, name, spec(3)).await;
    let members = sorted_members(env, ns, name).await;
    let uids = faults::pod_uids(env, ns, name).await;
    let workload = Workload::start(env, ns, name)
        .await
        .named("5. leader network cut 15 s");
    tokio::time::sleep(BASELINE).await;

    let old = faults::leader(env, ns, name).await;
    let old_pod = member_pod(env, ns, name, &old).await;
    let old_id = member_view(&old_pod).await.or_panic().member_id;
    workload.fault_started();
    let cut = faults::cut_member(env, ns, &old).await;
    // The two others elect a leader among themselves.
    faults::new_leader_among_the_others(env, ns, name, &old, old_id, ELECTED).await;
    let during = workload.newest_revision();
    writes_flow(
        &workload,
        during,
        Duration::from_secs(15),
        "under the new leader",
    )
    .await;
    // Past every probe's failure threshold: the operator sees an unready member and must still
    // remove nothing (its data is intact; the member is only unreachable).
    throughout(Duration::from_secs(15), Duration::from_secs(1), || async {
        nothing_removed(env, ns, name, &members, &uids, "during the leader's cut").await;
    })
    .await;
    cut.restore().await;
    workload.fault_ended();

    s.wait_healthy(name, 3, HEAL).await;
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    assert!(report.acknowledged_during > 0, "{report:?}");
    caught_up(env, ns, &old, &report).await;
    nothing_removed(env, ns, name, &members, &uids, "after the cut").await;
    let listed = faults::etcd_member_list(env, ns, name).await.or_panic();
    assert_eq!(listed.len(), 3, "etcd's member list: {listed:?}");
    s.finish(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_cut_off_from_its_peers_but_not_its_clients_serves_no_stale_read() {
    let s = scope("partition").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "pt");
    create(&s, name, spec(3)).await;
    let members = sorted_members(env, ns, name).await;
    let uids = faults::pod_uids(env, ns, name).await;
    let workload = Workload::start(env, ns, name)
        .await
        .named("5b. leader partitioned from its peers 10 s, clients still reach it");
    tokio::time::sleep(BASELINE).await;

    // The old leader keeps answering clients: without its peers it must step down (check
    // quorum) and refuse, never serve a linearizable read or acknowledge a write alone.
    let old = faults::leader(env, ns, name).await;
    let old_pod = member_pod(env, ns, name, &old).await;
    let old_id = member_view(&old_pod).await.or_panic().member_id;
    workload.fault_started();
    let partition = faults::isolate_from_peers(env, ns, name, &old).await;
    // The partition took effect: the majority elects a leader of its own, and the old one, which
    // its clients still reach, refuses a linearizable read and a require-leader put.
    faults::new_leader_among_the_others(env, ns, name, &old, old_id, ELECTED).await;
    let during = workload.newest_revision();
    writes_flow(
        &workload,
        during,
        Duration::from_secs(20),
        "by the majority side",
    )
    .await;
    faults::refuses_alone(&old_pod)
        .await
        .unwrap_or_else(|e| panic!("{old}, cut off from its peers: {e}"));
    tokio::time::sleep(HOLD).await;
    nothing_removed(env, ns, name, &members, &uids, "during the partition").await;
    partition.heal().await;
    workload.fault_ended();

    s.wait_healthy(name, 3, HEAL).await;
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    assert!(report.acknowledged_during > 0, "{report:?}");
    caught_up(env, ns, &old, &report).await;
    nothing_removed(env, ns, name, &members, &uids, "after the partition").await;
    s.finish(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_frozen_past_the_election_timeout_steps_down_and_catches_up_after_sigcont() {
    let s = scope("freeze").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "fz");
    create(&s, name, spec(3)).await;
    let members = sorted_members(env, ns, name).await;
    let workload = Workload::start(env, ns, name)
        .await
        .named("6. leader SIGSTOP 10 s, SIGCONT");
    tokio::time::sleep(BASELINE).await;

    let victim = faults::leader(env, ns, name).await;
    let victim_id = member_view(&member_pod(env, ns, name, &victim).await)
        .await
        .or_panic()
        .member_id;
    workload.fault_started();
    let frozen = faults::freeze_member(env, ns, &victim);
    // The freeze took effect: the two others elect a leader of their own.
    faults::new_leader_among_the_others(env, ns, name, &victim, victim_id, ELECTED).await;
    let during = workload.newest_revision();
    writes_flow(
        &workload,
        during,
        Duration::from_secs(20),
        "with the leader frozen",
    )
    .await;
    tokio::time::sleep(HOLD).await;
    frozen.thaw();
    workload.fault_ended();

    s.wait_healthy(name, 3, HEAL).await;
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    assert!(report.acknowledged_during > 0, "{report:?}");
    // The thawed member believed itself leader for a moment; it must have stepped down and
    // caught up, not served or kept a diverging history.
    let leader_now = faults::leader(env, ns, name).await;
    eprintln!("leader before the freeze: {victim}; after: {leader_now}");
    caught_up(env, ns, &victim, &report).await;
    assert_eq!(sorted_members(env, ns, name).await, members);
    s.finish(name).await;
}

// ---------------------------------------------------------------------------------------------
// 9: two members of five lost at once.

/// Delete a member's claim for good (its protection finalizer removed, as a storage admin
/// force-deleting it would) and its Pod: the member's disk is gone.
async fn lose_disk(env: &Env, ns: &str, member: &str) {
    let pvc = faults::data_claim(member);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client(), ns);
    pvcs.delete(&pvc, &DeleteParams::default()).await.or_panic();
    pvcs.patch(
        &pvc,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .or_panic();
    let pods: Api<Pod> = Api::namespaced(env.client(), ns);
    pods.delete(member, &DeleteParams::default().grace_period(0))
        .await
        .or_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_members_lost_at_once_are_replaced_while_the_quorum_serves() {
    let s = scope("lose-two").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "l2");
    create(&s, name, spec(5)).await;
    let leader = faults::leader(env, ns, name).await;
    let victims: Vec<String> = env
        .members(ns, name)
        .await
        .into_iter()
        .filter(|m| !m.spec.bootstrap && m.name_any() != leader)
        .map(|m| m.name_any())
        .take(2)
        .collect();
    assert_eq!(victims.len(), 2, "two non-seed followers");
    let survivors: Vec<String> = env
        .member_names(ns, name)
        .await
        .into_iter()
        .filter(|m| !victims.contains(m))
        .collect();
    let workload = Workload::start(env, ns, name)
        .await
        .named("9. two of five members' disks lost at once");
    tokio::time::sleep(BASELINE).await;

    // etcd's member list and the Pods' readiness through the healing, every change recorded.
    let sampler = quorum::watch(env.client(), ns, name);

    workload.fault_started();
    for v in &victims {
        lose_disk(env, ns, v).await;
    }
    eventually_every(
        &format!(
            "{victims:?} replaced by new members (operator logs: {})",
            s.logs()
        ),
        HEAL,
        Duration::from_secs(1),
        || async {
            let names = env.member_names(ns, name).await;
            if names.len() == 5 && victims.iter().all(|v| !names.contains(v)) {
                Ok(names)
            } else {
                Err(format!("members {names:?}"))
            }
        },
    )
    .await;
    s.wait_healthy(name, 5, HEAL).await;
    workload.fault_ended();
    tokio::time::sleep(BASELINE).await;
    let (timeline, unanswered) = sampler.stop();
    let report = workload.finish().await;
    print(&report);
    for (i, sample) in timeline.iter().enumerate() {
        eprintln!("quorum sample {i}: {sample:?}");
    }
    assert!(report.acknowledged_during > 0, "{report:?}");
    assert!(
        !timeline.is_empty(),
        "no member list answered through the fault ({unanswered} samples unanswered)"
    );
    // Only the lost members were removed: the three survivors are voters in every list etcd
    // gave, it never listed more than five voters, and a majority of them was Ready throughout.
    for sample in &timeline {
        assert!(
            survivors.iter().all(|s| sample.voters.contains(s))
                && sample.voters.len() <= 5
                && sample.has_majority_ready(),
            "a survivor lost its vote, too many voters, or no Ready majority: {sample:?} \
             (timeline {timeline:?})"
        );
    }
    let listed = faults::etcd_member_list(env, ns, name).await.or_panic();
    assert_eq!(listed.len(), 5, "{listed:?}");
    assert!(listed.iter().all(|(_, learner)| !learner), "{listed:?}");
    s.finish(name).await;
}

// ---------------------------------------------------------------------------------------------
// 7: one member's volume full.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_members_full_volume_stops_only_that_member_and_it_recovers_once_freed() {
    let s = scope("nospace").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "fv");
    // Size-limited volumes (tmpfs of the claim's size, memory only as far as used): room for
    // etcd's preallocated 64 MB WAL segments and a backend grown by the bulk values below.
    let storage = StorageSpec {
        size: Quantity("512Mi".into()),
        medium: None,
        storage_class_name: Some(env.runner.sized_storage_class()),
    };
    create(&s, name, EtcdClusterSpec { storage, ..spec(3) }).await;
    let workload = Workload::start(env, ns, name)
        .await
        .named("7. a follower's volume filled (ENOSPC)");
    tokio::time::sleep(BASELINE).await;

    let victim = faults::followers(env, ns, name).await.remove(0);
    let restarts = faults::restart_counts(env, ns, name).await;
    // What "kept, not replaced" is checked against afterwards: the members and their claims.
    let members_before = sorted(env.member_names(ns, name).await);
    let claims_before = claim_uids(env, ns, name).await;
    let others: Vec<String> = members_before
        .iter()
        .filter(|m| **m != victim)
        .cloned()
        .collect();
    let sampler = quorum::watch(env.client(), ns, name);
    workload.fault_started();
    let filled = faults::fill_volume(env, ns, &victim).await;
    eprintln!("filled {victim}'s volume with {} bytes", filled.bytes);
    // etcd preallocates its WAL segments and reuses the pages its backend already wrote, so a
    // full filesystem shows at its next new page: 1 MiB values grow every member's backend. The
    // two others have room; the filled one fails on its own disk.
    let bulk = env.etcd_client(ns, name).await;
    let pods: Api<Pod> = Api::namespaced(env.client(), ns);
    let mut n = 0u32;
    let big = vec![b'x'; 1 << 20];
    eventually_every(
        &format!("{victim} to fail on its full volume"),
        Duration::from_secs(90),
        Duration::from_millis(500),
        || {
            n += 1;
            let (mut bulk, big) = (bulk.clone(), big.clone());
            let (pods, victim, restarts) = (&pods, &victim, &restarts);
            async move {
                let _ = bulk.put(format!("bulk/{n:04}"), big, None).await;
                let p = pods.get(victim).await.map_err(|e| e.to_string())?;
                let restarted =
                    faults::restart_counts(env, ns, name).await.get(victim) > restarts.get(victim);
                if restarted || !tests::e2e::pod_ready(&p) {
                    Ok(())
                } else {
                    Err(format!("still Ready, not restarted after {n} MiB more"))
                }
            }
        },
    )
    .await;
    let during = workload.newest_revision();
    writes_flow(
        &workload,
        during,
        Duration::from_secs(20),
        "with one member's disk full",
    )
    .await;
    tokio::time::sleep(HOLD).await;
    filled.free();
    workload.fault_ended();

    s.wait_healthy(name, 3, HEAL).await;
    let (timeline, unanswered) = sampler.stop();
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    assert!(report.acknowledged_during > 0, "{report:?}");
    // Only the full member stopped: the two others were voters and Ready in every sample.
    assert!(
        !timeline.is_empty(),
        "no member list answered through the fault ({unanswered} samples unanswered)"
    );
    for sample in &timeline {
        assert!(
            others
                .iter()
                .all(|o| sample.voters.contains(o) && sample.ready.contains(o)),
            "{others:?} not both Ready voters: {sample:?} (timeline {timeline:?})"
        );
    }
    // A full disk is not lost data: the member is kept with its claim, never replaced.
    assert_eq!(
        sorted(env.member_names(ns, name).await),
        members_before,
        "the members changed after {victim}'s full volume"
    );
    assert_eq!(
        claim_uids(env, ns, name).await,
        claims_before,
        "a claim was replaced after {victim}'s full volume"
    );
    let replaced: Vec<String> = env
        .all_events(ns)
        .await
        .into_iter()
        .filter(|e| {
            matches!(
                e.reason.as_deref(),
                Some("MemberRemoved" | "MemberReplaced")
            )
        })
        .filter_map(|e| e.message)
        .collect();
    assert!(
        replaced.is_empty(),
        "members removed or replaced: {replaced:?}"
    );
    s.finish(name).await;
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// The cluster's data claims, by name, with their UIDs (a claim deleted and created again under
/// the same name has another UID).
async fn claim_uids(env: &Env, ns: &str, name: &str) -> Vec<(String, String)> {
    let mut claims: Vec<(String, String)> = env
        .pvcs(ns, name)
        .await
        .iter()
        .map(|c| (c.name_any(), c.uid().unwrap_or_default()))
        .collect();
    claims.sort();
    claims
}

// ---------------------------------------------------------------------------------------------
// 1: the operator SIGKILLed at an observable step of its work.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_after_a_scale_up_learner_and_after_a_scale_down_removal_converges() {
    let mut s = scope("op-scale").await;
    let (env, ns, name) = (s.env, s.ns.clone(), "os");
    let ns = ns.as_str();
    create(&s, name, spec(3)).await;

    // Scale-up: killed the moment etcd lists the first new member as a learner.
    let workload = Workload::start(env, ns, name)
        .await
        .named("1a. operator SIGKILL once a scale-up's learner is added (3 → 5)");
    tokio::time::sleep(BASELINE).await;
    workload.fault_started();
    env.scale(ns, name, 5).await;
    let learner = eventually_every(
        "a learner added for the scale-up",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || faults::learner_listed(env, ns, name),
    )
    .await;
    s.crash_and_restart().await;
    eprintln!("operator killed with learner {learner:?} listed (no name until it starts)");
    s.wait_healthy(name, 5, HEAL).await;
    workload.fault_ended();
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    let listed = faults::etcd_member_list(env, ns, name).await.or_panic();
    assert_eq!(listed.len(), 5, "{listed:?}");
    assert!(listed.iter().all(|(_, learner)| !learner), "{listed:?}");

    // Scale-down: killed the moment etcd lists fewer than five members.
    let workload = Workload::start(env, ns, name)
        .await
        .named("1b. operator SIGKILL once a scale-down's member left etcd (5 → 3)");
    tokio::time::sleep(BASELINE).await;
    workload.fault_started();
    env.scale(ns, name, 3).await;
    eventually_every(
        "a member removed from etcd for the scale-down",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || faults::members_fewer(env, ns, name, 5),
    )
    .await;
    s.crash_and_restart().await;
    s.wait_healthy(name, 3, HEAL).await;
    workload.fault_ended();
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    let listed = faults::etcd_member_list(env, ns, name).await.or_panic();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(env.member_names(ns, name).await.len(), 3);
    s.finish(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_mid_rollout_finishes_it_one_member_at_a_time() {
    let mut s = scope("op-roll").await;
    let (env, ns, name) = (s.env, s.ns.clone(), "or");
    let ns = ns.as_str();
    create(&s, name, spec(3)).await;
    let before = faults::pod_uids(env, ns, name).await;
    let workload = Workload::start(env, ns, name)
        .await
        .named("1c. operator SIGKILL once a rollout deleted its first Pod");
    tokio::time::sleep(BASELINE).await;
    workload.fault_started();
    env.clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"resources": {"requests": {"memory": "64Mi"}}}})),
        )
        .await
        .or_panic();
    let first = eventually_every(
        "the rollout's first Pod deleted",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || faults::pod_replaced(env, ns, name, &before),
    )
    .await;
    s.crash_and_restart().await;
    eprintln!("operator killed as {first} was rolled");
    let (fewest_ready, reasons) =
        tests::rollout::wait_rolled(env, ns, name, 3, &before, HEAL).await;
    workload.fault_ended();
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    eprintln!("rollout: fewest Ready {fewest_ready}, Progressing reasons {reasons:?}");
    assert!(
        fewest_ready >= 2,
        "fewer than 2 members Ready during the rollout: {fewest_ready}"
    );
    s.finish(name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_mid_defrag_and_mid_snapshot_finishes_both() {
    let mut s = scope("op-maint").await;
    let (env, ns, name) = (s.env, s.ns.clone(), "om");
    let ns = ns.as_str();
    create(&s, name, spec(3)).await;

    // Defrag of every member: killed once the first member's outcome is recorded.
    let workload = Workload::start(env, ns, name)
        .await
        .named("1d. operator SIGKILL once a defrag processed its first member");
    tokio::time::sleep(BASELINE).await;
    workload.fault_started();
    let defrags: Api<EtcdDefrag> = Api::namespaced(env.client(), ns);
    let run = EtcdDefrag::new(
        "all",
        EtcdDefragSpec {
            cluster_ref: LocalReference {
                name: name.to_string(),
            },
            rule: Some(DefragRule {
                all: Some(true),
                ..Default::default()
            }),
            ttl_seconds_after_finished: None,
        },
    );
    defrags
        .create(&PostParams::default(), &run)
        .await
        .or_panic();
    let first = eventually_every(
        "the defrag's first member processed",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || async {
            let d = defrags.get("all").await.map_err(|e| e.to_string())?;
            let status = d.status.unwrap_or_default();
            status
                .members
                .iter()
                .find(|m| m.outcome.is_some())
                .map(|m| m.name.clone())
                .ok_or_else(|| format!("phase {:?}, members {:?}", status.phase, status.members))
        },
    )
    .await;
    s.crash_and_restart().await;
    eprintln!("operator killed after {first} was defragmented");
    let done = eventually_every(
        &format!("the defrag run to finish (operator logs: {})", s.logs()),
        HEAL,
        Duration::from_millis(500),
        || async {
            let d = defrags.get("all").await.map_err(|e| e.to_string())?;
            let status = d.status.clone().unwrap_or_default();
            if status.phase.is_some_and(DefragPhase::is_terminal) {
                Ok(status)
            } else {
                Err(format!(
                    "phase {:?}, members {:?}",
                    status.phase, status.members
                ))
            }
        },
    )
    .await;
    assert_eq!(done.phase, Some(DefragPhase::Complete), "{done:?}");
    assert_eq!(done.members.len(), 3, "{done:?}");
    s.wait_healthy(name, 3, HEAL).await;
    workload.fault_ended();
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);

    // Snapshot to a claim: killed once its Job exists.
    let workload = Workload::start(env, ns, name)
        .await
        .named("1e. operator SIGKILL once a snapshot's Job was created");
    tokio::time::sleep(BASELINE).await;
    tests::backup::create_backups_claim(env, ns).await;
    workload.fault_started();
    tests::backup::create_snapshot(
        env,
        ns,
        "during-crash",
        name,
        SnapshotDestination {
            s3: None,
            pvc: Some(PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("etcd".into()),
            }),
        },
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(env.client(), ns);
    let job = eventually_every(
        "the snapshot's Job",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || async {
            let list = jobs
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .first()
                .map(|j| j.name_any())
                .ok_or_else(|| "no Job yet".to_string())
        },
    )
    .await;
    s.crash_and_restart().await;
    eprintln!("operator killed with Job {job} created");
    let snapshots: Api<EtcdSnapshot> = Api::namespaced(env.client(), ns);
    let done = eventually_every(
        &format!("the snapshot to finish (operator logs: {})", s.logs()),
        HEAL,
        Duration::from_millis(500),
        || async {
            let snap = snapshots
                .get("during-crash")
                .await
                .map_err(|e| e.to_string())?;
            let status = snap.status.clone().unwrap_or_default();
            if status.phase.is_some_and(|p| p.is_terminal()) {
                Ok(status)
            } else {
                Err(format!("phase {:?}: {:?}", status.phase, status.conditions))
            }
        },
    )
    .await;
    assert_eq!(done.phase, Some(SnapshotPhase::Complete), "{done:?}");
    let artifact = done.artifact.clone().expect("status.artifact");
    let dir = env.runner.claim_dir(ns, "backups").await.or_panic();
    let stored = std::fs::metadata(dir.join("etcd/during-crash.db")).or_panic();
    assert_eq!(stored.len() as i64, artifact.size_bytes, "{done:?}");
    workload.fault_ended();
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    s.finish(name).await;
}

// ---------------------------------------------------------------------------------------------
// 13: a minor upgrade with a member killed in the middle.

/// The rollout went one member at a time, from its Events: one `PodRestarted` per member, and
/// each member's new Pod Ready (its Ready condition's transition) before the operator restarted
/// the next (1 s of slack: Event times may be whole seconds).
async fn one_at_a_time(env: &Env, ns: &str, cluster: &str) {
    let restarts = tests::rollout::restart_events(env, ns, cluster).await;
    let members: BTreeSet<String> = env.member_names(ns, cluster).await.into_iter().collect();
    let restarted: Vec<&String> = restarts.iter().map(|(_, m)| m).collect();
    assert_eq!(
        restarted.len(),
        members.len(),
        "not one PodRestarted per member: {restarts:?}"
    );
    assert_eq!(
        restarted.iter().cloned().cloned().collect::<BTreeSet<_>>(),
        members,
        "{restarts:?}"
    );
    let pods = env.pods(ns, cluster).await;
    let ready_at = |member: &str| {
        pods.iter()
            .find(|p| p.name_any() == member)
            .and_then(|p| p.status.as_ref()?.conditions.clone())
            .and_then(|cs| {
                cs.into_iter()
                    .find(|c| c.type_ == "Ready" && c.status == "True")
            })
            .and_then(|c| c.last_transition_time)
            .map(|t| t.0)
            .unwrap_or_else(|| panic!("{member}'s Pod is not Ready"))
    };
    for pair in restarts.windows(2) {
        let ((_, first), (next_at, next)) = (&pair[0], &pair[1]);
        let ready = ready_at(first);
        assert!(
            ready <= *next_at + k8s_openapi::jiff::SignedDuration::from_secs(1),
            "{next} was restarted at {next_at} before {first}'s new Pod was Ready ({ready}): {restarts:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minor_upgrade_with_a_member_killed_midway_completes_keeping_every_write() {
    let s = scope("upgrade-kill").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "uk");
    create(
        &s,
        name,
        EtcdClusterSpec {
            version: "3.5.35".into(),
            ..spec(3)
        },
    )
    .await;
    let before = faults::pod_uids(env, ns, name).await;
    let workload = Workload::start(env, ns, name)
        .await
        .named("13. 3.5 → 3.6 rollout, a not yet rolled member SIGKILLed midway");
    tokio::time::sleep(BASELINE).await;
    workload.fault_started();
    env.clusters(ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"version": "3.6.16"}})),
        )
        .await
        .or_panic();
    // Once one member runs 3.6 again (its Pod replaced and Ready), kill one still on 3.5.
    let victim = eventually_every(
        "one member rolled and Ready, another not rolled yet",
        HEAL,
        Duration::from_millis(250),
        || async {
            let pods = env.pods(ns, name).await;
            let rolled_ready = pods
                .iter()
                .any(|p| before.get(&p.name_any()) != p.uid().as_ref() && tests::e2e::pod_ready(p));
            let old = pods.iter().find(|p| {
                before.get(&p.name_any()) == p.uid().as_ref()
                    && p.metadata.deletion_timestamp.is_none()
                    && tests::e2e::pod_ready(p)
            });
            match old {
                Some(p) if rolled_ready => Ok(p.name_any()),
                _ => Err(format!("pods {:?}", faults::pod_uids(env, ns, name).await)),
            }
        },
    )
    .await;
    let restarts_before = faults::restart_counts(env, ns, name).await;
    let victim_uid = before.get(&victim).cloned();
    let pid = env
        .runner
        .container_pid(ns, &victim, faults::ETCD_CONTAINER)
        .unwrap_or_else(|| panic!("{victim}'s etcd has no process"));
    faults::kill_member(env, ns, &victim);
    eprintln!("killed {victim}'s etcd (pid {pid}) midway through the rollout");
    // The SIGKILL took effect: the process is gone at once (a rollout's graceful stop would
    // take its time).
    eventually_every(
        &format!("{victim}'s etcd (pid {pid}) gone after the SIGKILL"),
        Duration::from_secs(2),
        Duration::from_millis(50),
        || async {
            if tests::env::process::pid_alive(pid) {
                Err("still running".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
    // And it was started again: in place by the kubelet (its restart count up in the same Pod),
    // or in a new Pod when the rollout got to the unready member first.
    let restarted = eventually_every(
        &format!("{victim}'s etcd started again after the SIGKILL"),
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let uid = env
                .pods(ns, name)
                .await
                .into_iter()
                .find(|p| p.name_any() == victim)
                .and_then(|p| p.uid());
            let restarts = faults::restart_counts(env, ns, name).await;
            match (uid == victim_uid, restarts.get(&victim)) {
                (true, Some(n)) if Some(n) > restarts_before.get(&victim) => {
                    Ok("in place by the kubelet")
                }
                (false, _) => Ok("in a new Pod by the rollout"),
                (true, _) => Err(format!(
                    "restart counts {restarts:?}, before {restarts_before:?}"
                )),
            }
        },
    )
    .await;
    eprintln!("{victim}'s etcd was started again {restarted}");
    let (fewest_ready, reasons) =
        tests::rollout::wait_rolled(env, ns, name, 3, &before, HEAL).await;
    workload.fault_ended();
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    eprintln!("upgrade: fewest Ready {fewest_ready}, Progressing reasons {reasons:?}");
    assert!(report.acknowledged_during > 0, "{report:?}");
    // Every member runs 3.6.16, by etcd's own word.
    for pod in env.pods(ns, name).await {
        let mut etcd = tests::e2e::member_client(&pod).await.or_panic();
        let status = etcd.status().await.or_panic();
        assert_eq!(
            status.version(),
            "3.6.16",
            "{} runs etcd {} after the upgrade",
            pod.name_any(),
            status.version()
        );
    }
    one_at_a_time(env, ns, name).await;
    s.finish(name).await;
}

// ---------------------------------------------------------------------------------------------
// A member's etcd SIGKILLed on a cluster a client reaches over mTLS as root (the workload's
// TLS and auth path).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_killed_on_an_mtls_cluster_with_auth_keeps_every_acknowledged_write() {
    let s = scope("tls-auth").await;
    let (env, ns, name) = (s.env, s.ns.as_str(), "ta");
    let material = tests::tls::mint(name, ns);
    tests::tls::create_server_secret(env, ns, "ta-server-tls", &material).await;
    tests::tls::create_operator_secret(env, ns, "ta-operator-tls", &material).await;
    tests::tls::create_peer_secret(env, ns, "ta-peer-tls", &material).await;
    tests::tls::create_secret(env, ns, "ta-root", &[("password", "fault-suite-root")]).await;
    create(
        &s,
        name,
        EtcdClusterSpec {
            auth: Some(AuthSpec {
                enabled: true,
                root_credentials_secret_ref: Some(SecretReference::new("ta-root")),
            }),
            ..tests::tls::tls_spec(
                3,
                Some("ta-server-tls"),
                Some("ta-operator-tls"),
                Some("ta-peer-tls"),
            )
        },
    )
    .await;
    // The workload reads the CA, the client certificate and root's password from the cluster's
    // Secrets; it logs in once the operator has enabled auth.
    let workload = Workload::start(env, ns, name)
        .await
        .named("a follower's etcd SIGKILL, mTLS + auth cluster");
    tokio::time::sleep(BASELINE).await;

    // A follower, as etcd's members name the leader over TLS as root.
    let access = tests::workload::Access::of_cluster(&env.client(), ns, name).await;
    let leader = faults::leader_with(env, ns, name, &access).await;
    let victim = env
        .member_names(ns, name)
        .await
        .into_iter()
        .find(|m| *m != leader)
        .unwrap_or_else(|| panic!("{ns}/{name}: no member but the leader {leader}"));
    let restarts = faults::restart_counts(env, ns, name).await;
    workload.fault_started();
    faults::kill_member(env, ns, &victim);
    eventually_every(
        &format!("{victim}'s etcd restarted"),
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let now = faults::restart_counts(env, ns, name).await;
            if now.get(&victim) > restarts.get(&victim) {
                Ok(())
            } else {
                Err(format!("restarts {now:?}"))
            }
        },
    )
    .await;
    s.wait_healthy(name, 3, HEAL).await;
    workload.fault_ended();
    tokio::time::sleep(BASELINE).await;
    let report = workload.finish().await;
    print(&report);
    assert!(report.acknowledged_during > 0, "{report:?}");
    s.finish(name).await;
}
