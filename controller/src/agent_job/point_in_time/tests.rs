use super::*;
use api::v1alpha2::{
    AuthSpec, EtcdClusterSpec, EtcdRecoverySpec, LocalReference, PointInTimeSource, RecoverySource,
    SecretReference,
};

fn base(name: &str, revision: i64) -> Base {
    Base {
        name: name.into(),
        revision,
        key: format!("etcd/{name}.db"),
        checksum: format!("sha256:{}", "a".repeat(64)),
        size_bytes: 1 << 20,
    }
}

fn archive(first: i64, newest: i64) -> ArchiveStatus {
    ArchiveStatus {
        first_revision: Some(first),
        newest_revision: Some(newest),
        ..Default::default()
    }
}

#[test]
fn the_base_is_the_newest_verified_snapshot_at_or_before_the_target_inside_the_run() {
    let bases = [
        base("a", 90),
        base("b", 120),
        base("c", 200),
        base("d", 260),
    ];
    let run = archive(101, 300);
    // 90 is before the run (its revisions 91..=100 are not archived): never a base.
    let at = |t| choose_base("hourly", Some(&run), &bases, t).map(|b| b.name);
    assert_eq!(at(Some(150)), Ok("b".to_string()));
    assert_eq!(at(Some(200)), Ok("c".to_string()));
    assert_eq!(at(None), Ok("d".to_string()), "latest: the newest base");
    assert!(
        at(Some(110)).is_err_and(
            |e| e.contains("no verified snapshot") && e.contains("at or before revision 110")
        ),
        "before the first base inside the run"
    );
}

#[test]
fn a_base_right_before_the_run_starts_it() {
    let bases = [base("a", 100)];
    assert_eq!(
        choose_base("hourly", Some(&archive(101, 300)), &bases, Some(250)).map(|b| b.revision),
        Ok(100)
    );
}

#[test]
fn a_target_past_the_archive_or_an_empty_archive_is_refused_naming_the_schedule() {
    let bases = [base("a", 100)];
    let past = choose_base("hourly", Some(&archive(101, 300)), &bases, Some(301)).unwrap_err();
    assert!(
        past.contains("revision 301") && past.contains("300"),
        "{past}"
    );
    let empty = choose_base("hourly", None, &bases, None).unwrap_err();
    assert!(
        empty.contains("EtcdSnapshotSchedule hourly has archived nothing yet"),
        "{empty}"
    );
}

#[test]
fn job_names_stay_within_63_characters_and_differ_per_recovery() {
    let long = "r".repeat(80);
    let a = point_in_time_job_name(&long, "0a1b2c3d-4e5f");
    let b = point_in_time_job_name(&long, "ffffffff-0000");
    assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
    assert_ne!(a, b);
    assert_eq!(
        point_in_time_job_name("rescue", "0a1b2c3d-4e5f"),
        "rescue-pitr-0a1b2c3d"
    );
}

#[test]
fn the_result_is_stored_under_the_destination_key() {
    let mut s3 = S3Location {
        bucket: "backups".into(),
        key: Some("etcd/".into()),
        ..Default::default()
    };
    assert_eq!(output_prefix(&s3), "etcd/point-in-time/");
    s3.key = Some("etcd".into());
    assert_eq!(output_prefix(&s3), "etcd/point-in-time/");
    s3.key = None;
    assert_eq!(output_prefix(&s3), "point-in-time/");
}

fn job(revision: Option<i64>, auth: bool) -> Job {
    let mut recovery = EtcdRecovery::new(
        "rescue",
        EtcdRecoverySpec {
            cluster_ref: LocalReference {
                name: "demo".into(),
            },
            source: RecoverySource {
                point_in_time: Some(PointInTimeSource {
                    schedule: "hourly".into(),
                    revision,
                }),
                ..Default::default()
            },
            confirm_healthy_cluster_rollback: None,
            allow_unverified_snapshot: None,
        },
    );
    recovery.metadata.namespace = Some("ns".into());
    recovery.metadata.uid = Some("0a1b2c3d-4e5f".into());
    let mut cluster = EtcdCluster::new("demo", EtcdClusterSpec::default());
    cluster.metadata.namespace = Some("ns".into());
    if auth {
        cluster.spec.auth = Some(AuthSpec {
            enabled: true,
            root_credentials_secret_ref: Some(SecretReference::new("demo-root")),
        });
    }
    let s3 = S3Location {
        endpoint: Some("http://minio:9000".into()),
        bucket: "backups".into(),
        key: Some("etcd/".into()),
        credentials_secret_ref: Some(SecretReference::new("s3-creds")),
        ..Default::default()
    };
    let b = base("hourly-1", 120);
    point_in_time_job(
        &recovery,
        &cluster,
        &Build {
            s3: &s3,
            archive_prefix: "etcd/archive/hourly/".into(),
            base: &b,
            revision,
        },
        "operator:1",
        "quay.io/coreos/etcd:v3.6.16",
    )
}

fn agent(job: &Job) -> &Container {
    &job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
        .containers[0]
}

#[test]
fn the_build_runs_the_agent_in_the_clusters_etcd_image_from_the_base_to_the_target() {
    let j = job(Some(150), false);
    let c = agent(&j);
    assert_eq!(c.image.as_deref(), Some("quay.io/coreos/etcd:v3.6.16"));
    let args = c.args.clone().unwrap_or_default();
    for want in [
        "point-in-time",
        "--s3-bucket=backups",
        "--s3-key=etcd/archive/hourly/",
        "--base-key=etcd/hourly-1.db",
        "--output-prefix=etcd/point-in-time/",
        "--output-name=rescue-pitr-0a1b2c3d",
        "--output-uid=0a1b2c3d-4e5f",
        "--to-revision=150",
        "--s3-endpoint=http://minio:9000",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
    }
    assert_eq!(
        j.metadata
            .owner_references
            .as_ref()
            .map(|o| o[0].kind.as_str()),
        Some("EtcdRecovery")
    );
    let latest = job(None, false);
    assert!(
        !agent(&latest)
            .args
            .iter()
            .flatten()
            .any(|a| a.starts_with("--to-revision")),
        "latest: no target revision"
    );
}

#[test]
fn with_root_auth_the_build_logs_in_as_root() {
    let env: Vec<String> = agent(&job(None, true))
        .env
        .iter()
        .flatten()
        .map(|e| e.name.clone())
        .collect();
    assert!(env.iter().any(|n| n == "ETCD_USERNAME"), "{env:?}");
    assert!(env.iter().any(|n| n == "AWS_ACCESS_KEY_ID"), "{env:?}");
}

#[test]
fn a_reported_build_is_read_and_a_failure_says_why() {
    let view = |report: &str, failed: Option<&str>, succeeded: bool| JobView {
        active: false,
        succeeded,
        failed: failed.map(str::to_string),
        report: Some(report.to_string()),
    };
    let built = build_read(&view(
        r#"{"pointInTime":{"base":"s3://b/k","baseRevision":120,"targetRevision":150,"events":9,"leasesGranted":0,"hashesProven":2,"provenAtRevision":150,"notCompared":0,"artifact":{"uri":"s3://b/etcd/point-in-time/x.db","sizeBytes":10,"checksum":"sha256:ab"}}}"#,
        None,
        true,
    ));
    match built {
        BuildRead::Built(r) => {
            assert_eq!((r.base_revision, r.target_revision), (120, 150));
            assert_eq!(r.artifact.artifact.uri, "s3://b/etcd/point-in-time/x.db");
        }
        other => panic!("{other:?}"),
    }
    let failed = build_read(&view(
        r#"{"error":"revision 400 is not in the archive"}"#,
        Some("PodFailurePolicy"),
        false,
    ));
    assert_eq!(
        failed,
        BuildRead::Failed("revision 400 is not in the archive (Job: PodFailurePolicy)".into())
    );
}
