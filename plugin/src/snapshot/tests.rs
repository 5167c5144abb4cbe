use api::v1alpha2::{
    EtcdSnapshotScheduleSpec, EtcdSnapshotStatus, SnapshotArtifact, SnapshotTemplate,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::*;

fn to(uri: &str) -> Args {
    Args {
        to: Some(uri.into()),
        ..Default::default()
    }
}

fn pvc(claim: &str, sub: Option<&str>) -> SnapshotDestination {
    SnapshotDestination {
        s3: None,
        pvc: Some(PvcLocation {
            claim_name: claim.into(),
            sub_path: sub.map(String::from),
        }),
    }
}

#[test]
fn a_pvc_uri_names_the_claim_and_the_directory() {
    assert_eq!(
        destination(&to("pvc://backups/etcd")).ok().flatten(),
        Some(pvc("backups", Some("etcd")))
    );
    assert_eq!(
        destination(&to("pvc://backups")).ok().flatten(),
        Some(pvc("backups", None))
    );
    assert_eq!(
        destination(&to("pvc://backups/")).ok().flatten(),
        Some(pvc("backups", None))
    );
}

#[test]
fn an_s3_uri_takes_the_s3_flags() {
    let mut args = to("s3://snaps/prod/etcd/");
    args.s3_endpoint = Some("http://minio:9000".into());
    args.s3_force_path_style = true;
    args.s3_credentials_secret = Some("s3-creds".into());
    let d = destination(&args)
        .ok()
        .flatten()
        .and_then(|d| d.s3)
        .expect("s3");
    assert_eq!(d.bucket, "snaps");
    assert_eq!(d.key.as_deref(), Some("prod/etcd/"));
    assert_eq!(d.endpoint.as_deref(), Some("http://minio:9000"));
    assert_eq!(d.force_path_style, Some(true));
    assert_eq!(
        d.credentials_secret_ref.map(|s| s.name).as_deref(),
        Some("s3-creds")
    );
    assert_eq!(d.region, None);
}

#[test]
fn bad_destinations_are_refused_naming_the_flag_and_the_form() {
    let cases = [
        (
            to("gs://x"),
            "--to gs://x: give s3://<bucket>[/<key prefix>] or pvc://<claim>[/<directory>]",
        ),
        (to("s3://"), "--to s3://: no bucket"),
        (to("pvc:///etcd"), "--to pvc:///etcd: no claim"),
    ];
    for (args, want) in cases {
        let e = destination(&args).expect_err(want);
        assert!(e.to_string().starts_with(want), "{e}");
        assert_eq!(e.exit_code(), 2);
    }
    let mut s3_on_pvc = to("pvc://backups");
    s3_on_pvc.s3_region = Some("eu".into());
    assert!(destination(&s3_on_pvc)
        .expect_err("s3 on pvc")
        .to_string()
        .contains("apply only to --to s3://"));
    let s3_alone = Args {
        s3_endpoint: Some("http://x".into()),
        ..Default::default()
    };
    assert!(destination(&s3_alone)
        .expect_err("alone")
        .to_string()
        .contains("need --to s3://"));
}

fn schedule(name: &str, cluster: &str, dest: SnapshotDestination) -> EtcdSnapshotSchedule {
    EtcdSnapshotSchedule::new(
        name,
        EtcdSnapshotScheduleSpec {
            cluster_ref: LocalReference {
                name: cluster.into(),
            },
            snapshot_template: SnapshotTemplate {
                destination: dest,
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

fn snap(name: &str, cluster: &str, dest: SnapshotDestination, created: i64) -> EtcdSnapshot {
    let mut s = EtcdSnapshot::new(
        name,
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: cluster.into(),
            },
            destination: dest,
            verify: None,
        },
    );
    s.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + created).expect("time"),
    ));
    s
}

#[test]
fn without_to_the_clusters_schedule_then_its_newest_snapshot_says_where() {
    let schedules = [
        schedule("nightly", "demo", pvc("nightly", None)),
        schedule("x", "other", pvc("x", None)),
    ];
    let snapshots = [
        snap("a", "demo", pvc("old", None), 1),
        snap("b", "demo", pvc("new", None), 2),
    ];
    let (d, from) = default_destination("demo", &schedules, &snapshots).expect("schedule");
    assert_eq!(
        (d, from.as_str()),
        (pvc("nightly", None), "EtcdSnapshotSchedule nightly")
    );
    let (d, from) = default_destination("demo", &schedules[1..], &snapshots).expect("snapshot");
    assert_eq!(
        (d, from.as_str()),
        (pvc("new", None), "the newest EtcdSnapshot b")
    );
    let e = default_destination("demo", &[], &[]).expect_err("nothing");
    assert!(e.to_string().contains("say where with --to"), "{e}");
    let two = [
        schedule("a", "demo", pvc("a", None)),
        schedule("b", "demo", pvc("b", None)),
    ];
    let e = default_destination("demo", &two, &[]).expect_err("two");
    assert!(
        e.to_string().contains("has 2 EtcdSnapshotSchedules (a, b)"),
        "{e}"
    );
}

fn with(
    phase: SnapshotPhase,
    conditions: &[(&str, &str, &str, &str)],
    verify: Option<bool>,
) -> EtcdSnapshot {
    let mut s = snap("s", "demo", pvc("b", None), 0);
    s.spec.verify = verify;
    s.status = Some(EtcdSnapshotStatus {
        phase: Some(phase),
        artifact: Some(SnapshotArtifact {
            uri: "pvc://b/s.db".into(),
            size_bytes: 1,
            checksum: "sha256:0".into(),
        }),
        conditions: conditions
            .iter()
            .map(|(t, st, r, m)| Condition {
                type_: t.to_string(),
                status: st.to_string(),
                reason: r.to_string(),
                message: m.to_string(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            })
            .collect(),
        ..Default::default()
    });
    s
}

#[test]
fn a_snapshot_is_done_when_verified_and_failed_with_the_conditions_message() {
    let verified = with(
        SnapshotPhase::Complete,
        &[("Verified", "True", "SnapshotVerified", "ok")],
        None,
    );
    assert_eq!(
        judge(&verified),
        Progress::Done("Verified (SnapshotVerified: ok), pvc://b/s.db".into())
    );
    let verifying = with(
        SnapshotPhase::Complete,
        &[("Verified", "Unknown", "Verifying", "")],
        None,
    );
    assert_eq!(
        judge(&verifying),
        Progress::Going("Complete, being verified".into())
    );
    let bad = with(
        SnapshotPhase::Complete,
        &[("Verified", "False", "ChecksumMismatch", "sums differ")],
        None,
    );
    assert_eq!(
        judge(&bad),
        Progress::Failed(
            "stored at pvc://b/s.db but not verified: ChecksumMismatch: sums differ".into()
        )
    );
    let failed = with(
        SnapshotPhase::Failed,
        &[("Ready", "False", "JobFailed", "no claim backups")],
        None,
    );
    assert_eq!(
        judge(&failed),
        Progress::Failed("JobFailed: no claim backups".into())
    );
    let unverified = with(SnapshotPhase::Complete, &[], Some(false));
    assert!(
        matches!(judge(&unverified), Progress::Done(l) if l.starts_with("Complete (not verified"))
    );
    let started = with(
        SnapshotPhase::Started,
        &[("Ready", "False", "JobRunning", "saving")],
        None,
    );
    assert_eq!(
        judge(&started),
        Progress::Going("Started (JobRunning: saving)".into())
    );
}
