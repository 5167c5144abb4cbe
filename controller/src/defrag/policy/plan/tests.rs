use super::*;
use api::quantity::to_bytes;

mod ticks;
use api::v1alpha2::{DefragRule, LocalReference};
use chrono::TimeZone;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn at(m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 10, 10, m, 0).unwrap()
}

fn r(name: &str, m: u32, phase: Option<DefragPhase>) -> Run {
    Run {
        name: name.into(),
        created: at(m),
        phase,
    }
}

fn limits(total: Option<usize>, complete: Option<usize>, failed: Option<usize>) -> HistoryLimits {
    HistoryLimits {
        total,
        complete,
        failed,
    }
}

fn history() -> [Run; 7] {
    [
        r("a", 1, Some(DefragPhase::Complete)),
        r("b", 2, Some(DefragPhase::Failed)),
        r("c", 3, Some(DefragPhase::Complete)),
        r("d", 4, Some(DefragPhase::Failed)),
        r("e", 5, Some(DefragPhase::Complete)),
        r("f", 6, Some(DefragPhase::Running)),
        r("g", 7, None),
    ]
}

#[test]
fn history_keeps_the_newest_complete_and_failed_runs_and_never_an_unfinished_one() {
    let runs = history();
    let per_phase = |c, f| limits(None, Some(c), Some(f));
    assert_eq!(history_to_delete(&runs, per_phase(2, 1)), ["a", "b"]);
    assert_eq!(
        history_to_delete(&runs, per_phase(0, 0)),
        ["a", "b", "c", "d", "e"]
    );
    assert!(history_to_delete(&runs, per_phase(3, 2)).is_empty());
    // No limit at all (a reference policy leaving cleanup to the runs' TTL): nothing deleted.
    assert!(history_to_delete(&runs, limits(None, None, None)).is_empty());
}

#[test]
fn history_limit_caps_the_finished_runs_oldest_first_and_ours_refine_it() {
    let runs = history();
    // The reference's historyLimit: the newest two finished runs stay, whatever their phase.
    assert_eq!(
        history_to_delete(&runs, limits(Some(2), None, None)),
        ["a", "b", "c"]
    );
    assert_eq!(
        history_to_delete(&runs, limits(Some(0), None, None)),
        ["a", "b", "c", "d", "e"]
    );
    // Ours refine it: at most one Failed among the newest three finished.
    assert_eq!(
        history_to_delete(&runs, limits(Some(3), None, Some(1))),
        ["a", "b"]
    );
    // A per-phase limit below the total wins for its phase; the total still holds.
    assert_eq!(
        history_to_delete(&runs, limits(Some(1), Some(3), Some(3))),
        ["a", "b", "c", "d"]
    );
}

#[test]
fn a_check_is_due_first_and_then_every_interval() {
    assert!(check_due(None, 600, at(0)));
    assert!(!check_due(Some(at(0)), 600, at(9)));
    assert!(check_due(Some(at(0)), 600, at(10)));
}

#[test]
fn the_check_selects_the_member_the_run_would_defragment() {
    let mib = |n: i64| n * 1024 * 1024;
    let rule = DefragRule {
        free_space_above: Some(Quantity("8Mi".into())),
        ..Default::default()
    };
    let quota = mib(2048);
    let members = [
        ("m-a".to_string(), mib(20), mib(15), quota),
        ("m-b".to_string(), mib(30), mib(10), quota),
    ];
    let (member, why) = first_selected(&rule, &members).expect("m-b qualifies");
    assert_eq!(member, "m-b");
    assert!(why.contains("freeSpaceAbove"), "{why}");
    assert_eq!(first_selected(&rule, &members[..1]), None);
    // The default rule (200Mi) selects neither.
    assert_eq!(first_selected(&DefragRule::default(), &members), None);
    // Quota usage: 20Mi is above 80% of a 24Mi quota, so 5Mi reclaimable (over minReclaim 1Mi) qualifies.
    let rule = DefragRule {
        quota_usage_above: Some("80%".into()),
        min_reclaim: Some(Quantity("1Mi".into())),
        ..Default::default()
    };
    let small_quota = to_bytes(&Quantity("24Mi".into())).unwrap_or_default();
    let small = [("m-a".to_string(), mib(20), mib(15), small_quota)];
    let (member, why) = first_selected(&rule, &small).expect("m-a is over 80%");
    assert_eq!(member, "m-a");
    assert!(why.contains("80%"), "{why}");
}

#[test]
fn quota_usage_is_measured_against_the_quota_each_member_runs_with() {
    // The spec's quota was raised to 2Gi and is being rolled out: m-a still runs with 24Mi
    // (and is over 80% of it), m-b already runs with 2Gi (and is far below).
    let mib = |n: i64| n * 1024 * 1024;
    let rule = DefragRule {
        quota_usage_above: Some("80%".into()),
        min_reclaim: Some(Quantity("1Mi".into())),
        ..Default::default()
    };
    let members = [
        ("m-b".to_string(), mib(20), mib(15), mib(2048)),
        ("m-a".to_string(), mib(20), mib(15), mib(24)),
    ];
    let (member, _) = first_selected(&rule, &members).expect("m-a is over 80% of its quota");
    assert_eq!(member, "m-a");
}

#[test]
fn runs_are_named_with_the_tick_second_owned_by_the_policy_and_carry_its_rule_and_ttl() {
    let mut p = EtcdDefragPolicy::new(
        "nightly",
        api::v1alpha2::EtcdDefragPolicySpec {
            cluster_ref: LocalReference { name: "c".into() },
            schedule: Some("0 3 * * *".into()),
            rule: Some(DefragRule {
                all: Some(true),
                ..Default::default()
            }),
            ttl_seconds_after_finished: Some(600),
            ..Default::default()
        },
    );
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some("uid-1".into());
    let run = new_run(&p, Utc.timestamp_opt(1_800_000_000, 0).unwrap()).unwrap();
    assert_eq!(run.name_any(), "nightly-1800000000");
    assert_eq!(
        run.labels().get(POLICY_LABEL).map(String::as_str),
        Some("nightly")
    );
    assert_eq!(
        run.labels().get(labels::CLUSTER).map(String::as_str),
        Some("c")
    );
    assert_eq!(crate::controller_uid(&run).as_deref(), Some("uid-1"));
    assert_eq!(run.spec.rule, p.spec.rule);
    assert_eq!(run.spec.ttl_seconds_after_finished, Some(600));
    assert_eq!(run.spec.cluster_ref.name, "c");
}
