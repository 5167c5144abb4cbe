use super::*;
use api::v1alpha2::{
    AuthSpec, ClientTlsSpec, EtcdClusterSpec, EtcdSnapshotSpec, LocalReference, PvcLocation,
    S3Location, SecretReference, SnapshotDestination, TlsSpec,
};

fn snapshot(dest: SnapshotDestination) -> EtcdSnapshot {
    let mut s = EtcdSnapshot::new(
        "nightly",
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: "demo".into(),
            },
            destination: dest,
            verify: None,
        },
    );
    s.metadata.namespace = Some("ns".into());
    s.metadata.uid = Some("snap-uid".into());
    s
}

fn cluster(tls: bool, auth: bool) -> EtcdCluster {
    let mut c = EtcdCluster::new("demo", EtcdClusterSpec::default());
    c.metadata.namespace = Some("ns".into());
    if tls {
        c.spec.tls = Some(TlsSpec {
            client: Some(ClientTlsSpec {
                server_secret_ref: Some(SecretReference::new("demo-server-tls")),
                operator_client_secret_ref: Some(SecretReference::new("demo-op-tls")),
                cert_manager: None,
            }),
            peer: None,
        });
    }
    if auth {
        c.spec.auth = Some(AuthSpec {
            enabled: true,
            root_credentials_secret_ref: Some(SecretReference::new("demo-root")),
        });
    }
    c
}

fn s3() -> SnapshotDestination {
    SnapshotDestination {
        s3: Some(S3Location {
            endpoint: Some("http://minio:9000".into()),
            bucket: "backups".into(),
            key: Some("etcd/".into()),
            region: None,
            force_path_style: Some(true),
            credentials_secret_ref: Some(SecretReference::new("s3-creds")),
            ..Default::default()
        }),
        pvc: None,
    }
}

fn container(job: &Job) -> Container {
    job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .clone()
}

#[test]
fn job_has_behaviours_settings_and_is_owned_by_the_snapshot() {
    let job = snapshot_job(&snapshot(s3()), &cluster(false, false), "op:1").unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("nightly-snapshot"));
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(3));
    assert_eq!(spec.active_deadline_seconds, Some(1800));
    assert_eq!(spec.ttl_seconds_after_finished, Some(600));
    // A permanent failure (exit 2) fails the Job at once; others are retried.
    let rule = &spec.pod_failure_policy.as_ref().unwrap().rules[0];
    assert_eq!(rule.action, "FailJob");
    let codes = rule.on_exit_codes.as_ref().unwrap();
    assert_eq!(
        (codes.operator.as_str(), codes.values.as_slice()),
        ("In", &[2][..])
    );
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("EtcdSnapshot", "snap-uid")
    );
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(
        pod.security_context.as_ref().unwrap().run_as_non_root,
        Some(true)
    );
    let c = container(&job);
    assert_eq!(c.image.as_deref(), Some("op:1"));
    let sc = c.security_context.unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
}

/// The runbook finds a member Pod with `-l etcd-operator.cozystack.io/cluster=<cluster>` and
/// `.items[0]`: the save and prune Jobs' Pods name their cluster under another key.
#[test]
fn job_pods_name_their_cluster_under_the_job_label_not_the_member_label() {
    let dest = SnapshotDestination {
        s3: None,
        pvc: Some(PvcLocation {
            claim_name: "backups".into(),
            sub_path: None,
        }),
    };
    for job in [
        snapshot_job(&snapshot(s3()), &cluster(false, false), "op:1").unwrap(),
        prune_job(&snapshot(dest), "op:1", false).unwrap(),
    ] {
        let template = job.spec.as_ref().unwrap().template.metadata.as_ref();
        for labels in [
            job.metadata.labels.as_ref(),
            template.and_then(|m| m.labels.as_ref()),
        ] {
            let labels = labels.unwrap();
            assert!(!labels.contains_key(labels::CLUSTER), "{labels:?}");
            assert_eq!(labels[labels::JOB_CLUSTER], "demo");
            assert_eq!(labels[labels::APP_INSTANCE], "demo");
        }
    }
}

#[test]
fn s3_destination_becomes_agent_flags_and_credentials_from_the_secret() {
    let job = snapshot_job(&snapshot(s3()), &cluster(false, false), "op:1").unwrap();
    let c = container(&job);
    let args = c.args.unwrap();
    for want in [
        "snapshot-agent",
        "save",
        "--endpoints=http://demo-client.ns.svc:2379",
        "--snapshot-name=nightly",
        "--snapshot-uid=snap-uid",
        "--s3-bucket=backups",
        "--s3-key=etcd/",
        "--s3-endpoint=http://minio:9000",
        "--s3-region=us-east-1",
        "--s3-force-path-style",
    ] {
        assert!(args.iter().any(|a| a == want), "no {want} in {args:?}");
    }
    let env = c.env.unwrap();
    let from = |n: &str| {
        env.iter()
            .find(|e| e.name == n)
            .and_then(|e| e.value_from.clone())
            .and_then(|v| v.secret_key_ref)
            .map(|r| (r.name, r.key))
    };
    assert_eq!(
        from("AWS_ACCESS_KEY_ID"),
        Some(("s3-creds".into(), "AWS_ACCESS_KEY_ID".into()))
    );
    assert_eq!(
        from("AWS_SECRET_ACCESS_KEY"),
        Some(("s3-creds".into(), "AWS_SECRET_ACCESS_KEY".into()))
    );
}

#[test]
fn tls_and_auth_clusters_are_dialed_with_their_material_and_root() {
    let job = snapshot_job(&snapshot(s3()), &cluster(true, true), "op:1").unwrap();
    let c = container(&job);
    let args = c.args.clone().unwrap();
    assert!(args.contains(&"--endpoints=https://demo-client.ns.svc:2379".to_string()));
    assert!(args.contains(&format!("--ca-file={TLS_DIR}/server/ca.crt")));
    assert!(args.contains(&format!("--cert-file={TLS_DIR}/client/tls.crt")));
    let volumes = job.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    let secrets: Vec<_> = volumes
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    assert_eq!(secrets, ["demo-server-tls", "demo-op-tls"]);
    let env = c.env.unwrap();
    assert!(env
        .iter()
        .any(|e| e.name == "ETCD_USERNAME" && e.value.as_deref() == Some("root")));
    let pw = env.iter().find(|e| e.name == "ETCD_PASSWORD").unwrap();
    let r = pw.value_from.clone().unwrap().secret_key_ref.unwrap();
    assert_eq!((r.name.as_str(), r.key.as_str()), ("demo-root", "password"));
}

#[test]
fn pvc_destination_mounts_the_claim() {
    let dest = SnapshotDestination {
        s3: None,
        pvc: Some(PvcLocation {
            claim_name: "backups".into(),
            sub_path: Some("etcd".into()),
        }),
    };
    let job = snapshot_job(&snapshot(dest), &cluster(false, false), "op:1").unwrap();
    let args = container(&job).args.unwrap();
    for want in [
        "--pvc-claim=backups",
        "--pvc-mount=/snapshot",
        "--pvc-sub-path=etcd",
    ] {
        assert!(args.iter().any(|a| a == want), "no {want} in {args:?}");
    }
    let volumes = job.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    assert_eq!(
        volumes[0]
            .persistent_volume_claim
            .as_ref()
            .map(|p| p.claim_name.as_str()),
        Some("backups")
    );
}

#[test]
fn prune_job_deletes_the_snapshots_own_file_on_its_claim() {
    let dest = SnapshotDestination {
        s3: None,
        pvc: Some(PvcLocation {
            claim_name: "backups".into(),
            sub_path: Some("etcd".into()),
        }),
    };
    let job = prune_job(&snapshot(dest.clone()), "op:1", false).unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("nightly-prune"));
    assert_eq!(
        job.metadata.owner_references.as_ref().unwrap()[0].uid,
        "snap-uid"
    );
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()[labels::APP_COMPONENT],
        "prune"
    );
    let args = container(&job).args.unwrap();
    assert_eq!(
        args,
        [
            "snapshot-agent",
            "delete",
            "--snapshot-name=nightly",
            "--snapshot-uid=snap-uid",
            "--pvc-claim=backups",
            "--pvc-mount=/snapshot",
            "--termination-log=/dev/termination-log",
            "--pvc-sub-path=etcd",
        ]
    );
    let spec = job.spec.unwrap();
    assert_eq!(spec.backoff_limit, Some(BACKOFF_LIMIT));
    let volumes = spec.template.spec.unwrap().volumes.unwrap();
    assert_eq!(
        volumes[0]
            .persistent_volume_claim
            .as_ref()
            .map(|p| p.claim_name.as_str()),
        Some("backups")
    );
    // An S3 snapshot has no prune Job (the operator deletes the object itself).
    let s3 = SnapshotDestination {
        s3: Some(S3Location {
            bucket: "b".into(),
            ..Default::default()
        }),
        pvc: None,
    };
    assert!(prune_job(&snapshot(s3), "op:1", true).is_none());
    // A Failed snapshot's Job: the same path, and a file not its own is left, not failed on.
    let job = prune_job(&snapshot(dest), "op:1", true).unwrap();
    let leave = container(&job).args.unwrap();
    assert_eq!(leave[..args.len()], args[..]);
    assert_eq!(leave[args.len()..], ["--leave-unowned"]);
}

#[test]
fn no_destination_is_an_error_not_a_panic() {
    let dest = SnapshotDestination {
        s3: None,
        pvc: None,
    };
    assert_eq!(
        snapshot_job(&snapshot(dest), &cluster(false, false), "op:1").err(),
        Some(JobError::NoDestination)
    );
}
