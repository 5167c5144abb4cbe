use super::*;
use api::v1alpha2::{EtcdSnapshotSpec, LocalReference, SnapshotDestination};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn snap(phase: Option<SnapshotPhase>) -> EtcdSnapshot {
    let mut s = EtcdSnapshot::new(
        "nightly",
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: "demo".into(),
            },
            destination: SnapshotDestination::default(),
            verify: None,
        },
    );
    s.metadata.creation_timestamp = Some(Time(ts(0)));
    s.status = phase.map(|p| EtcdSnapshotStatus {
        phase: Some(p),
        ..Default::default()
    });
    s
}

const REPORT: &str =
    r#"{"artifact":{"uri":"s3://b/nightly.db","sizeBytes":4096,"checksum":"sha256:ab"}}"#;

#[test]
fn a_completed_snapshot_keeps_the_recorded_hashkv_and_waits_for_its_verification() {
    let s = snap(Some(SnapshotPhase::Started));
    let report = r#"{"artifact":{"uri":"s3://b/nightly.db","sizeBytes":4096,"checksum":"sha256:ab","hashKV":{"revision":42,"hash":7,"compactRevision":3}}}"#;
    let step = decide(
        &s,
        Some(&job(false, true, None, Some(report))),
        Some("op:1"),
        &ClusterState::Ready,
        ts(5),
    );
    let status = render(&s, &step, ts(5));
    let h = status.hash_kv.clone().unwrap();
    assert_eq!((h.revision, h.hash, h.compact_revision), (42, 7, 3));
    let verified = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Verified")
        .unwrap();
    assert_eq!(
        (verified.status.as_str(), verified.reason.as_str()),
        ("Unknown", "Verifying")
    );
    // Asked for none: no Verified condition, nothing waits.
    let mut off = s.clone();
    off.spec.verify = Some(false);
    let status = render(&off, &step, ts(5));
    assert!(status.conditions.iter().all(|c| c.type_ != "Verified"));
}

fn job(active: bool, succeeded: bool, failed: Option<&str>, report: Option<&str>) -> JobView {
    JobView {
        active,
        succeeded,
        failed: failed.map(str::to_string),
        report: report.map(str::to_string),
    }
}

#[test]
fn a_new_snapshot_creates_its_job_only_when_image_and_cluster_are_there() {
    let s = snap(None);
    assert_eq!(
        decide(&s, None, Some("op:1"), &ClusterState::Ready, ts(1)),
        Step::CreateJob
    );
    assert!(matches!(
        decide(&s, None, None, &ClusterState::Ready, ts(1)),
        Step::Wait { reason, .. } if reason == reason::OPERATOR_IMAGE_NOT_CONFIGURED
    ));
    assert!(matches!(
        decide(&s, None, Some("op:1"), &ClusterState::Missing, ts(1)),
        Step::Wait { reason, message } if reason == reason::CLUSTER_NOT_FOUND && message.contains("demo")
    ));
}

#[test]
fn an_auth_cluster_not_yet_latched_is_waited_for_then_fails_with_auth_latch_timeout() {
    let s = snap(None);
    assert!(matches!(
        decide(&s, None, Some("op:1"), &ClusterState::AuthNotLatched, ts(10)),
        Step::Wait { reason, .. } if reason == reason::AUTH_LATCH_TIMEOUT
    ));
    assert!(matches!(
        decide(&s, None, Some("op:1"), &ClusterState::AuthNotLatched, ts(301)),
        Step::Fail { reason, .. } if reason == Failure::AuthLatchTimeout
    ));
}

#[test]
fn the_agents_report_completes_the_snapshot_with_its_artifact() {
    let s = snap(Some(SnapshotPhase::Started));
    let step = decide(
        &s,
        Some(&job(false, true, None, Some(REPORT))),
        Some("op:1"),
        &ClusterState::Ready,
        ts(5),
    );
    let Step::Complete(ReportedArtifact { artifact: a, .. }) = &step else {
        panic!("{step:?}")
    };
    assert_eq!(
        (a.uri.as_str(), a.size_bytes, a.checksum.as_str()),
        ("s3://b/nightly.db", 4096, "sha256:ab")
    );
    let status = render(&s, &step, ts(5));
    assert_eq!(status.phase, Some(SnapshotPhase::Complete));
    assert_eq!(status.artifact.as_ref(), Some(a));
    assert!(status.completion_time.is_some());
    let ready = &status.conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "SnapshotStored")
    );
}

#[test]
fn a_failed_job_fails_with_the_agents_error() {
    let s = snap(Some(SnapshotPhase::Started));
    let step = decide(
        &s,
        Some(&job(
            false,
            false,
            Some("BackoffLimitExceeded"),
            Some(
                r#"{"error":"s3://b/nightly.db belongs to snapshot other-uid; refusing to overwrite it"}"#,
            ),
        )),
        Some("op:1"),
        &ClusterState::Ready,
        ts(5),
    );
    assert!(
        matches!(&step, Step::Fail { reason, message } if *reason == Failure::JobFailed
            && message.contains("refusing to overwrite") && message.contains("BackoffLimitExceeded")),
        "{step:?}"
    );
}

#[test]
fn a_vanished_job_after_start_fails_and_terminal_phases_are_sticky() {
    let started = snap(Some(SnapshotPhase::Started));
    assert!(matches!(
        decide(&started, None, Some("op:1"), &ClusterState::Ready, ts(5)),
        Step::Fail { reason, .. } if reason == Failure::JobLost
    ));
    for phase in [SnapshotPhase::Complete, SnapshotPhase::Failed] {
        let s = snap(Some(phase));
        assert_eq!(
            decide(&s, None, Some("op:1"), &ClusterState::Missing, ts(5)),
            Step::Done
        );
        assert_eq!(
            render(&s, &Step::Done, ts(5)),
            s.status.clone().unwrap_or_default()
        );
    }
}

#[test]
fn a_running_job_reads_job_running_and_records_the_start() {
    let s = snap(Some(SnapshotPhase::Pending));
    let step = decide(
        &s,
        Some(&job(true, false, None, None)),
        Some("op:1"),
        &ClusterState::Ready,
        ts(3),
    );
    assert!(matches!(&step, Step::Running { reason, .. } if *reason == reason::JOB_RUNNING));
    let status = render(&s, &step, ts(3));
    assert_eq!(status.phase, Some(SnapshotPhase::Started));
    assert_eq!(status.start_time, Some(Time(ts(3))));
}

#[test]
fn reports_are_parsed_and_anything_else_is_not_a_report() {
    assert!(AgentReport::parse(REPORT).is_some_and(|r| r.artifact.is_some()));
    assert!(AgentReport::parse(r#"{"error":"x"}"#).is_some_and(|r| r.error.as_deref() == Some("x")));
    assert_eq!(AgentReport::parse("panicked at main.rs"), None);
    assert_eq!(AgentReport::parse("{}"), None);
}

/// EtcdCluster demo, this incarnation's UID, with `status.clusterID` once it formed.
fn demo(uid: &str, cluster_id: Option<&str>) -> EtcdCluster {
    let mut c = EtcdCluster::new("demo", Default::default());
    c.metadata.uid = Some(uid.into());
    c.status = Some(api::v1alpha2::EtcdClusterStatus {
        cluster_id: cluster_id.map(str::to_string),
        ..Default::default()
    });
    c
}

#[test]
fn the_snapshot_records_the_uid_and_etcd_cluster_id_of_the_cluster_its_job_saves() {
    let s = snap(None);
    let step = decide(&s, None, Some("op:1"), &ClusterState::Ready, ts(1));
    assert_eq!(step, Step::CreateJob);
    let mut status = render(&s, &step, ts(1));
    record_origin(
        &mut status,
        &step,
        Some(&demo("uid-1", Some("00000000000000ab"))),
    );
    assert_eq!(status.cluster_uid.as_deref(), Some("uid-1"));
    assert_eq!(status.cluster_id.as_deref(), Some("00000000000000ab"));
    let mut saved = s.clone();
    saved.status = Some(status);
    assert!(saved.origin().is_of("uid-1", None));
    assert!(!saved.origin().is_of("uid-2", None));
}

#[test]
fn a_cluster_not_formed_when_the_job_started_gets_its_id_recorded_at_completion_if_still_the_same()
{
    let mut s = snap(None);
    let step = Step::CreateJob;
    let mut status = render(&s, &step, ts(1));
    record_origin(&mut status, &step, Some(&demo("uid-1", None)));
    assert_eq!(
        (status.cluster_uid.as_deref(), status.cluster_id.as_deref()),
        (Some("uid-1"), None)
    );
    s.status = Some(status);
    let done = decide(
        &s,
        Some(&job(false, true, None, Some(REPORT))),
        Some("op:1"),
        &ClusterState::Ready,
        ts(5),
    );
    // Another incarnation by now: nothing of it is recorded.
    let mut other = render(&s, &done, ts(5));
    record_origin(
        &mut other,
        &done,
        Some(&demo("uid-2", Some("00000000000000cd"))),
    );
    assert_eq!(
        (other.cluster_uid.as_deref(), other.cluster_id.as_deref()),
        (Some("uid-1"), None)
    );
    let mut same = render(&s, &done, ts(5));
    record_origin(
        &mut same,
        &done,
        Some(&demo("uid-1", Some("00000000000000ab"))),
    );
    assert_eq!(same.cluster_id.as_deref(), Some("00000000000000ab"));
    // A terminal snapshot's record never changes.
    s.status = Some(same.clone());
    let mut after = render(&s, &Step::Done, ts(9));
    record_origin(
        &mut after,
        &Step::Done,
        Some(&demo("uid-3", Some("00000000000000ef"))),
    );
    assert_eq!(after, same);
}
