//! The defrag planner: health, member order, the rule's gates and run turns.

use super::*;
use api::conditions::defrag::DEFRAG_CHECKED;
use api::v1alpha2::{EtcdDefragSpec, EtcdDefragStatus, LocalReference};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const MI: i64 = 1024 * 1024;

fn member(name: &str, id: u64, leader: u64) -> MemberObservation {
    MemberObservation {
        name: name.into(),
        ready: true,
        quota: DEFAULT_QUOTA_BYTES,
        status: Ok(MemberStatus {
            member_id: id,
            leader,
            db_size: 300 * MI,
            db_size_in_use: 10 * MI,
            raft_index: 100,
            raft_applied_index: 100,
            ..Default::default()
        }),
    }
}

fn three() -> Vec<MemberObservation> {
    vec![
        member("c-0", 1, 2),
        member("c-1", 2, 2),
        member("c-2", 3, 2),
    ]
}

#[test]
fn a_healthy_cluster_is_healthy_even_with_a_nospace_alarm() {
    assert_eq!(unhealthy(3, &three(), &[]), None);
    // etcd fails /health under NOSPACE: its Pods are not Ready, yet it answers Status.
    let mut m = three();
    m.iter_mut().for_each(|m| m.ready = false);
    assert_eq!(unhealthy(3, &m, &[(1, Alarm::NoSpace)]), None);
}

#[test]
fn every_kind_of_unhealthy_member_holds_the_run_with_its_name() {
    let why = |members: Vec<MemberObservation>, alarms: &[(u64, Alarm)]| {
        unhealthy(3, &members, alarms).unwrap_or_default()
    };
    let mut m = three();
    m[1].ready = false;
    assert!(why(m, &[]).contains("member c-1 is not Ready"));
    let mut m = three();
    m[2].status = Err("deadline exceeded".into());
    assert!(why(m, &[]).contains("member c-2 does not answer status: deadline exceeded"));
    let mut m = three();
    m.pop();
    assert!(why(m, &[]).contains("2 of its 3 members"));
    let mut m = three();
    if let Ok(s) = m[0].status.as_mut() {
        s.leader = 1;
    }
    assert!(why(m, &[]).contains("do not agree on a leader"));
    let mut m = three();
    if let Ok(s) = m[0].status.as_mut() {
        s.raft_applied_index = 1;
    }
    if let Ok(s) = m[1].status.as_mut() {
        s.raft_index = 100 + MAX_RAFT_LAG + 5;
        s.raft_applied_index = 100 + MAX_RAFT_LAG + 5;
    }
    assert!(why(m, &[]).contains("member c-0 lags"));
    let m = three();
    assert!(why(m, &[(3, Alarm::Corrupt)]).contains("CORRUPT"));
    let mut m = three();
    if let Ok(s) = m[2].status.as_mut() {
        s.is_learner = true;
    }
    assert!(why(m, &[]).contains("c-2 is a learner"));
    assert!(unhealthy(0, &[], &[])
        .unwrap_or_default()
        .contains("paused"));
    let mut m = three();
    for x in &mut m {
        if let Ok(s) = x.status.as_mut() {
            s.leader = 9;
        }
    }
    assert!(why(m, &[]).contains("not one of the cluster's members"));
}

#[test]
fn followers_go_first_by_name_and_the_leader_last() {
    let members = vec![
        member("c-2", 3, 1),
        member("c-0", 1, 1),
        member("c-1", 2, 1),
    ];
    let mut done = BTreeSet::new();
    let mut order = Vec::new();
    while let Some((m, role)) = next_member(&members, &done) {
        order.push((m.name.clone(), role));
        done.insert(m.name.clone());
    }
    assert_eq!(
        order,
        [
            ("c-1".to_string(), FOLLOWER),
            ("c-2".to_string(), FOLLOWER),
            ("c-0".to_string(), LEADER)
        ]
    );
}

#[test]
fn the_leader_is_whoever_leads_when_the_next_member_is_picked() {
    // c-1 led when the run began and c-0 was done; now c-2 leads, so c-1 is a follower.
    let members = vec![
        member("c-0", 1, 3),
        member("c-1", 2, 3),
        member("c-2", 3, 3),
    ];
    let done = BTreeSet::from(["c-0".to_string()]);
    let (m, role) = next_member(&members, &done).unwrap();
    assert_eq!((m.name.as_str(), role), ("c-1", FOLLOWER));
}

#[test]
fn leadership_moves_to_a_processed_member_before_the_leaders_turn() {
    let members = vec![
        member("c-2", 3, 1),
        member("c-0", 1, 1),
        member("c-1", 2, 1),
    ];
    let mut done = BTreeSet::new();
    let name = |n: &Next| match n {
        Next::Member(m, role) => format!("{} {role}", m.name),
        Next::MoveLeader { from, to, to_id } => {
            format!("move {} -> {} ({to_id})", from.name, to.name)
        }
    };
    let mut order = Vec::new();
    while let Some(n) = next_step(&members, &done) {
        order.push(name(&n));
        match n {
            Next::Member(m, _) => {
                done.insert(m.name.clone());
            }
            // Leadership moved: the next look sees c-1 lead and c-0 follow.
            Next::MoveLeader { .. } => break,
        }
    }
    assert_eq!(
        order,
        ["c-1 follower", "c-2 follower", "move c-0 -> c-1 (2)"]
    );
    let moved = vec![
        member("c-2", 3, 2),
        member("c-0", 1, 2),
        member("c-1", 2, 2),
    ];
    let n = next_step(&moved, &done).unwrap();
    assert_eq!(name(&n), "c-0 follower");
    // A one-member cluster's leader is defragmented in place: there is nobody to lead instead.
    let one = vec![member("c-0", 1, 1)];
    assert_eq!(
        name(&next_step(&one, &BTreeSet::new()).unwrap()),
        "c-0 leader"
    );
}

#[test]
fn a_defragment_call_without_an_answer_is_judged_from_the_dbsize_once_the_member_answers() {
    let after = |size: i64, in_use: i64| MemberStatus {
        db_size: size * MI,
        db_size_in_use: in_use * MI,
        ..Default::default()
    };
    // It shrank: etcd finished the defragmentation after the caller gave up.
    let ok = judge_unanswered(300 * MI, &after(12, 12)).unwrap();
    assert!(ok.contains("300Mi -> 12Mi"), "{ok}");
    // Nothing to reclaim, and the file holds no free pages: compact, as a defrag leaves it.
    assert!(judge_unanswered(64 * MI, &after(64, 64)).is_ok());
    // Same size, still full of free pages: it was not defragmented.
    let failed = judge_unanswered(300 * MI, &after(300, 10)).unwrap_err();
    assert!(failed.contains("not compacted"), "{failed}");
}

#[test]
fn only_an_entry_written_before_its_call_counts_as_in_flight() {
    let sent = api::v1alpha2::DefragMemberStatus {
        name: "c-0".into(),
        db_size_before: Some(300 * MI),
        ..Default::default()
    };
    assert!(in_flight(&sent));
    let done = api::v1alpha2::DefragMemberStatus {
        outcome: Some(api::v1alpha2::DefragOutcome::Defragmented),
        ..sent.clone()
    };
    assert!(!in_flight(&done));
    // The leader whose leadership was moved: remembered, nothing sent yet.
    let moved = api::v1alpha2::DefragMemberStatus {
        name: "c-1".into(),
        role: Some(LEADER.into()),
        ..Default::default()
    };
    assert!(!in_flight(&moved));
}

#[test]
fn nospace_is_disarmed_only_below_the_quota_each_member_runs_with() {
    // The spec was raised to 64Mi, but c-1 still runs with 16Mi and holds 17Mi.
    let mut m = three();
    for x in &mut m {
        x.quota = 64 * MI;
        if let Ok(s) = x.status.as_mut() {
            s.db_size = 17 * MI;
        }
    }
    assert_eq!(nospace_stays(&m), None);
    m[1].quota = 16 * MI;
    let why = nospace_stays(&m).unwrap_or_default();
    assert!(
        why.contains("c-1") && why.contains("16Mi quota it runs with"),
        "{why}"
    );
    m[1].quota = 64 * MI;
    m[2].status = Err("deadline exceeded".into());
    assert!(nospace_stays(&m).unwrap_or_default().contains("c-2"));
}

#[test]
fn the_running_quota_is_the_pods_last_quota_flag_or_etcds_default() {
    let pod = |args: &[&str]| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c-0"},
            "spec": {"containers": [
                {"name": "etcd", "command": ["etcd"], "args": args},
            ]},
        }))
        .unwrap()
    };
    assert_eq!(running_quota(&pod(&["--name=c-0"])), DEFAULT_QUOTA_BYTES);
    assert_eq!(
        running_quota(&pod(&["--quota-backend-bytes=16777216", "--name=c-0"])),
        16 * MI
    );
    assert_eq!(
        running_quota(&pod(&[
            "--quota-backend-bytes=16777216",
            "--quota-backend-bytes=67108864"
        ])),
        64 * MI
    );
    assert_eq!(
        running_quota(&pod(&["--quota-backend-bytes=0"])),
        DEFAULT_QUOTA_BYTES
    );
}

fn rule(free: Option<&str>, quota: Option<&str>, min: Option<&str>) -> DefragRule {
    DefragRule {
        all: None,
        free_space_above: free.map(|q| Quantity(q.into())),
        quota_usage_above: quota.map(Into::into),
        min_reclaim: min.map(|q| Quantity(q.into())),
    }
}

fn defragments(g: Gate) -> bool {
    matches!(g, Gate::Defragment(_))
}

#[test]
fn the_default_gate_is_200mi_of_reclaimable_space() {
    let r = DefragRule::default();
    let quota = DEFAULT_QUOTA_BYTES;
    assert!(defragments(gate(&r, 300 * MI, 50 * MI, quota)));
    let skip = gate(&r, 300 * MI, 100 * MI, quota);
    assert_eq!(
        skip,
        Gate::Skip("200Mi reclaimable is not above freeSpaceAbove 200Mi".into())
    );
}

#[test]
fn all_takes_every_member_even_without_free_space() {
    let r = DefragRule {
        all: Some(true),
        ..Default::default()
    };
    assert!(defragments(gate(&r, 10 * MI, 10 * MI, DEFAULT_QUOTA_BYTES)));
}

#[test]
fn above_the_quota_share_the_floor_drops_to_min_reclaim() {
    let r = rule(Some("1Gi"), Some("80%"), Some("8Mi"));
    let quota = 100 * MI;
    // 90% of the quota used, 9Mi reclaimable: above minReclaim.
    assert!(defragments(gate(&r, 90 * MI, 81 * MI, quota)));
    // 90% used but only 4Mi reclaimable: a no-op defrag is never run.
    match gate(&r, 90 * MI, 86 * MI, quota) {
        Gate::Skip(why) => assert!(why.contains("minReclaim 8Mi"), "{why}"),
        other => panic!("{other:?}"),
    }
    // 50% used: the freeSpaceAbove floor applies.
    assert!(!defragments(gate(&r, 50 * MI, 10 * MI, quota)));
    // Without quotaUsageAbove, minReclaim alone never lowers the floor.
    let r = rule(Some("1Gi"), None, Some("8Mi"));
    assert!(!defragments(gate(&r, 90 * MI, 10 * MI, quota)));
}

#[test]
fn the_quota_is_the_clusters_option_or_etcds_2gib() {
    assert_eq!(quota(None), 2 * 1024 * MI);
    assert_eq!(quota(Some(0)), 2 * 1024 * MI);
    assert_eq!(quota(Some(16 * MI)), 16 * MI);
}

fn run(name: &str, cluster: &str, created: i64, phase: Option<DefragPhase>) -> EtcdDefrag {
    let mut d = EtcdDefrag::new(
        name,
        EtcdDefragSpec {
            cluster_ref: LocalReference {
                name: cluster.into(),
            },
            ..Default::default()
        },
    );
    d.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
    d.status = Some(EtcdDefragStatus {
        phase,
        ..Default::default()
    });
    d
}

#[test]
fn one_run_per_cluster_at_a_time_running_first_then_oldest() {
    let a = run("a", "c", 10, None);
    let b = run("b", "c", 20, Some(DefragPhase::Running));
    let other = run("x", "other", 1, Some(DefragPhase::Running));
    let done = run("old", "c", 1, Some(DefragPhase::Complete));
    let runs = vec![a.clone(), b.clone(), other, done];
    assert_eq!(blocking_run(&a, &runs), Some("b".into()));
    assert_eq!(blocking_run(&b, &runs), None);
    // Two pending runs: the older goes first.
    let c = run("c", "c", 30, None);
    let runs = vec![a.clone(), c.clone()];
    assert_eq!(blocking_run(&c, &runs), Some("a".into()));
    assert_eq!(blocking_run(&a, &runs), None);
}

fn rendered(d: &EtcdDefrag, phase: DefragPhase, why: &'static str) -> EtcdDefragStatus {
    let mut status = d.status.clone().unwrap_or_default();
    let o = Outcome {
        phase,
        reason: why,
        message: format!("because {why}"),
    };
    render(d, &mut status, &o, Timestamp::from_second(100).unwrap());
    status
}

fn defrag_checked(s: &EtcdDefragStatus) -> Option<(String, String)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == DEFRAG_CHECKED)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[test]
fn defrag_checked_says_queued_cluster_not_healthy_or_running_and_stays_after_the_end() {
    let d = run("a", "c", 10, None);
    let pair = |s: &str, r: &str| Some((s.to_string(), r.to_string()));
    let s = rendered(&d, DefragPhase::Pending, reason::WAITING_FOR_RUN);
    assert_eq!(defrag_checked(&s), pair("False", "Queued"));
    for why in [
        reason::CLUSTER_UNHEALTHY,
        reason::CLUSTER_NOT_FOUND,
        reason::CREDENTIALS_NOT_READY,
    ] {
        let s = rendered(&d, DefragPhase::Pending, why);
        assert_eq!(
            defrag_checked(&s),
            pair("False", "ClusterNotHealthy"),
            "{why}"
        );
    }
    let mut d = run("a", "c", 10, None);
    d.status = Some(rendered(&d, DefragPhase::Running, reason::RUNNING));
    assert_eq!(
        defrag_checked(d.status.as_ref().unwrap()),
        pair("True", "Running")
    );
    // The run ends: DefragChecked keeps what it last saw, Ready says how it ended.
    let s = rendered(&d, DefragPhase::Complete, reason::COMPLETE);
    assert_eq!(defrag_checked(&s), pair("True", "Running"));
    assert_eq!(s.phase, Some(DefragPhase::Complete));
}

#[test]
fn only_a_new_wait_is_announced_as_deferred() {
    let d = run("a", "c", 10, None);
    let fresh = EtcdDefragStatus::default();
    assert!(newly_deferred(&fresh, reason::WAITING_FOR_RUN));
    assert!(!newly_deferred(&fresh, reason::RUNNING));
    let queued = rendered(&d, DefragPhase::Pending, reason::WAITING_FOR_RUN);
    assert!(!newly_deferred(&queued, reason::WAITING_FOR_RUN));
    assert!(newly_deferred(&queued, reason::CLUSTER_UNHEALTHY));
}

#[test]
fn a_member_whose_size_is_unreadable_after_its_defrag_says_after_size_unavailable() {
    let why = after_size_unavailable("spec.rule.all is true", "connection reset");
    assert!(why.starts_with("AfterSizeUnavailable: "), "{why}");
    assert!(why.contains("connection reset"), "{why}");
}
