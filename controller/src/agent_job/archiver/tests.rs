use super::*;
use api::v1alpha2::{
    ArchiveSpec, AuthSpec, ClientTlsSpec, EtcdClusterSpec, EtcdSnapshotScheduleSpec,
    LocalReference, PvcLocation, S3Location, SecretReference, SnapshotDestination,
    SnapshotTemplate, TlsSpec,
};

fn schedule(destination: SnapshotDestination, archive: ArchiveSpec) -> EtcdSnapshotSchedule {
    let mut s = EtcdSnapshotSchedule::new(
        "hourly",
        EtcdSnapshotScheduleSpec {
            cluster_ref: LocalReference {
                name: "demo".into(),
            },
            schedule: "@hourly".into(),
            snapshot_template: SnapshotTemplate {
                destination,
                ..Default::default()
            },
            archive: Some(archive),
            ..Default::default()
        },
    );
    s.metadata.namespace = Some("ns".into());
    s.metadata.uid = Some("sched-uid".into());
    s
}

fn s3(key: Option<&str>) -> SnapshotDestination {
    SnapshotDestination {
        s3: Some(S3Location {
            endpoint: Some("http://minio:9000".into()),
            bucket: "backups".into(),
            key: key.map(str::to_string),
            force_path_style: Some(true),
            credentials_secret_ref: Some(SecretReference::new("s3-creds")),
            ..Default::default()
        }),
        pvc: None,
    }
}

fn cluster(secure: bool) -> EtcdCluster {
    let mut c = EtcdCluster::new("demo", EtcdClusterSpec::default());
    c.metadata.namespace = Some("ns".into());
    if secure {
        c.spec.tls = Some(TlsSpec {
            client: Some(ClientTlsSpec {
                server_secret_ref: Some(SecretReference::new("demo-server-tls")),
                operator_client_secret_ref: Some(SecretReference::new("demo-op-tls")),
                cert_manager: None,
            }),
            peer: None,
        });
        c.spec.auth = Some(AuthSpec {
            enabled: true,
            root_credentials_secret_ref: Some(SecretReference::new("demo-root")),
        });
    }
    c
}

fn args(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().unwrap().containers[0]
        .args
        .clone()
        .unwrap_or_default()
}

#[test]
fn the_archiver_watches_the_client_service_and_writes_under_the_schedules_prefix() {
    let pod = archiver_pod(
        &schedule(s3(Some("etcd/")), ArchiveSpec::default()),
        &cluster(false),
        "op:1",
    )
    .unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("hourly-archive"));
    let args = args(&pod);
    for want in [
        "archive",
        "--endpoints=http://demo-client.ns.svc:2379",
        "--s3-bucket=backups",
        "--s3-key=etcd/archive/hourly/",
        "--s3-endpoint=http://minio:9000",
        "--s3-force-path-style",
        "--flush-interval=2s",
        "--hash-interval=30s",
        "--on-compaction=continue",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
    }
    let spec = pod.spec.as_ref().unwrap();
    // Restarted in place by the kubelet; the archiver resumes after its newest segment.
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.containers[0].image.as_deref(), Some("op:1"));
    let labels = pod.metadata.labels.as_ref().unwrap();
    assert_eq!(
        labels.get(labels::APP_COMPONENT).map(String::as_str),
        Some("archive")
    );
    assert_eq!(
        labels.get(labels::SCHEDULE).map(String::as_str),
        Some("hourly")
    );
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("EtcdSnapshotSchedule", "sched-uid")
    );
}

#[test]
fn the_archiver_uses_the_clusters_tls_and_root_login_and_the_s3_key() {
    let pod = archiver_pod(
        &schedule(
            s3(None),
            ArchiveSpec {
                flush_interval: Some("500ms".into()),
                hash_interval: Some("5m".into()),
            },
        ),
        &cluster(true),
        "op:1",
    )
    .unwrap();
    let args = args(&pod);
    for want in [
        "--endpoints=https://demo-client.ns.svc:2379",
        "--s3-key=archive/hourly/",
        "--flush-interval=500ms",
        "--hash-interval=5m",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
    }
    assert!(args.iter().any(|a| a.starts_with("--ca-file=")));
    assert!(args.iter().any(|a| a.starts_with("--cert-file=")));
    let env = pod.spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
    for want in [
        "ETCD_USERNAME",
        "ETCD_PASSWORD",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
}

#[test]
fn a_pvc_destination_has_no_archiver() {
    let pvc = SnapshotDestination {
        s3: None,
        pvc: Some(PvcLocation {
            claim_name: "backups".into(),
            sub_path: None,
        }),
    };
    assert_eq!(
        archiver_pod(
            &schedule(pvc, ArchiveSpec::default()),
            &cluster(false),
            "op:1"
        ),
        Err(ArchiverError::NotS3)
    );
}

#[test]
fn a_changed_archive_spec_makes_the_running_archiver_out_of_date() {
    let make = |flush: &str, image: &str| {
        archiver_pod(
            &schedule(
                s3(Some("etcd/")),
                ArchiveSpec {
                    flush_interval: Some(flush.into()),
                    hash_interval: None,
                },
            ),
            &cluster(false),
            image,
        )
        .unwrap()
    };
    let running = make("2s", "op:1");
    assert!(is_current(&running, &make("2s", "op:1")));
    assert!(!is_current(&running, &make("1s", "op:1")));
    // An operator upgrade moves the archiver to the new image.
    assert!(!is_current(&running, &make("2s", "op:2")));
    // A Pod without the annotation (made by hand) is never taken for current.
    let mut bare = running.clone();
    bare.metadata.annotations = None;
    assert!(!is_current(&bare, &running));
}
