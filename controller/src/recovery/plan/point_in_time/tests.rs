//! The point-in-time branch: nothing is planned or changed before the state is built.

use super::super::tests::*;
use super::*;
use crate::recovery::plan::{next, Source};

/// All three members lost, going back to a point in time whose build stands at `build`.
fn lost_all(build: Build) -> Facts {
    let mut f = facts(vec![lost("a"), lost("b"), lost("c")]);
    f.source = Source::PointInTime(build);
    f
}

#[test]
fn a_point_in_time_that_cannot_be_built_fails_before_changing_anything() {
    match next(&lost_all(Build::Unusable(
        "EtcdSnapshotSchedule hourly has archived nothing yet".into(),
    ))) {
        Next::Fail { reason, message } => {
            assert_eq!(reason, reason::POINT_IN_TIME_NOT_USABLE);
            assert!(
                message.contains("archived nothing yet") && message.contains("nothing was changed"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_build_starts_then_the_recovery_waits_for_it_touching_nothing() {
    assert_eq!(
        next(&lost_all(Build::Start)),
        Next::Act(Work::BuildPointInTime)
    );
    match next(&lost_all(Build::Building("rec-pitr-1".into()))) {
        Next::Wait { reason, message } => {
            assert_eq!(reason, reason::BUILDING_POINT_IN_TIME);
            assert!(message.contains("rec-pitr-1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn what_was_built_is_recorded_and_a_failed_build_fails_the_recovery() {
    let built = PointInTimeStatus {
        base: "hourly-1".into(),
        base_revision: 100,
        revision: Some(150),
        ..Default::default()
    };
    assert_eq!(
        next(&lost_all(Build::Built(Box::new(built.clone())))),
        Next::Act(Work::RecordPointInTime(Box::new(built)))
    );
    match next(&lost_all(Build::Failed(
        "revision 400 is not in the archive".into(),
    ))) {
        Next::Fail { reason, message } => {
            assert_eq!(reason, reason::POINT_IN_TIME_NOT_USABLE);
            assert!(
                message.contains("revision 400 is not in the archive"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_healthy_cluster_is_not_rolled_back_to_a_point_in_time_unless_confirmed() {
    let mut f = facts(vec![
        running("a", etcd(1, 2, 10, 1, 3)),
        running("b", etcd(2, 2, 10, 1, 3)),
        running("c", etcd(3, 2, 10, 1, 3)),
    ]);
    f.source = Source::PointInTime(Build::Start);
    match next(&f) {
        Next::Fail { reason, message } => {
            assert_eq!(reason, reason::HEALTHY_CLUSTER_NOT_CONFIRMED);
            assert!(
                message.contains("confirmHealthyClusterRollback"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    f.confirmed = true;
    assert_eq!(next(&f), Next::Act(Work::BuildPointInTime));
}
