use super::*;
use api::v1alpha2::{
    EtcdMemberSpec, EtcdRecoverySpec, LocalReference, RecoverySource, SurvivorSource,
};

fn recovery() -> EtcdRecovery {
    let mut r = EtcdRecovery::new(
        "rescue",
        EtcdRecoverySpec {
            cluster_ref: LocalReference {
                name: "demo".into(),
            },
            source: RecoverySource {
                survivor: Some(SurvivorSource::default()),
                snapshot: None,
                point_in_time: None,
            },
            confirm_healthy_cluster_rollback: None,
            allow_unverified_snapshot: None,
        },
    );
    r.metadata.namespace = Some("ns".into());
    r.metadata.uid = Some("0a1b2c3d-4e5f-6789".into());
    r
}

fn member(name: &str) -> EtcdMember {
    let mut m = EtcdMember::new(
        name,
        EtcdMemberSpec {
            cluster_name: "demo".into(),
            ..Default::default()
        },
    );
    m.metadata.namespace = Some("ns".into());
    m
}

fn pod_spec(job: &Job) -> PodSpec {
    job.spec
        .clone()
        .and_then(|s| s.template.spec)
        .expect("a pod template")
}

#[test]
fn the_position_job_reads_the_members_claim_read_only_for_the_recovery() {
    let job = position_job(&recovery(), &member("demo-1"), None, "op:1");
    assert_eq!(job.metadata.name.as_deref(), Some("demo-1-wal-0a1b2c3d"));
    let owner = &job.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("EtcdRecovery", "rescue", Some(true))
    );
    let job_labels = job.metadata.labels.clone().unwrap();
    assert_eq!(
        job_labels.get(labels::APP_COMPONENT).map(String::as_str),
        Some(COMPONENT)
    );
    assert_eq!(
        job_labels.get(labels::JOB_CLUSTER).map(String::as_str),
        Some("demo")
    );
    let pod = pod_spec(&job);
    let claim = pod.volumes.clone().unwrap()[0]
        .persistent_volume_claim
        .clone()
        .unwrap();
    assert_eq!(claim.claim_name, labels::pvc_name("demo-1"));
    assert_eq!(claim.read_only, Some(true), "never writes a member's data");
    let c = &pod.containers[0];
    assert_eq!(c.volume_mounts.clone().unwrap()[0].read_only, Some(true));
    assert_eq!(c.image.as_deref(), Some("op:1"));
    assert_eq!(
        c.args.clone().unwrap(),
        [
            "snapshot-agent",
            "position",
            "--data-dir=/var/lib/etcd",
            "--member=demo-1",
            "--termination-log=/dev/termination-log",
        ]
    );
    assert_eq!(
        pod.node_name, None,
        "no Pod: the scheduler follows the volume"
    );
}

#[test]
fn the_position_job_runs_on_the_node_of_the_members_pod_and_finds_its_data_dir() {
    let mut m = member("demo-2");
    m.metadata.annotations = Some(
        [(
            labels::DATA_DIR_SUBPATH_ANNOTATION.to_string(),
            "default.etcd".to_string(),
        )]
        .into(),
    );
    let job = position_job(&recovery(), &m, Some("node-b"), "op:1");
    let pod = pod_spec(&job);
    assert_eq!(pod.node_name.as_deref(), Some("node-b"));
    let args = pod.containers[0].args.clone().unwrap();
    assert!(
        args.contains(&"--data-dir=/var/lib/etcd/default.etcd".to_string()),
        "{args:?}"
    );
}

#[test]
fn the_position_job_runs_on_the_members_dedicated_nodes() {
    let mut m = member("demo-3");
    let plain = pod_spec(&position_job(&recovery(), &m, None, "op:1"));
    assert_eq!((plain.tolerations, plain.node_selector), (None, None));
    let toleration = crate::builders::tests::dedicated_toleration();
    m.spec.tolerations = vec![toleration.clone()];
    m.spec.node_selector = [("dedicated".to_string(), "etcd".to_string())].into();
    m.spec.priority_class_name = Some("etcd-critical".into());
    let pod = pod_spec(&position_job(&recovery(), &m, None, "op:1"));
    assert_eq!(pod.tolerations, Some(vec![toleration]));
    assert_eq!(pod.node_selector, Some(m.spec.node_selector.clone()));
    // A one-off reader is no member: it does not take the members' priority.
    assert_eq!(pod.priority_class_name, None);
}

#[test]
fn position_job_names_stay_label_sized() {
    let long = "m".repeat(80);
    let name = position_job_name(&long, "abcdef12-3456");
    assert_eq!(name.len(), 63);
    assert!(name.ends_with("-wal-abcdef12"), "{name}");
    assert_eq!(position_job_name("a-", "u"), "a-wal-u");
}

fn view(report: Option<&str>, succeeded: bool, failed: Option<&str>) -> JobView {
    JobView {
        active: !succeeded && failed.is_none(),
        succeeded,
        failed: failed.map(str::to_string),
        report: report.map(str::to_string),
    }
}

#[test]
fn the_jobs_report_is_the_members_position_or_why_not() {
    let p = DiskPosition {
        member_id: 1,
        cluster_id: 2,
        term: 3,
        commit: 40,
        last_term: 3,
        last_index: 41,
        files: vec!["0000000000000000-0000000000000000.wal".into()],
        torn_tail: None,
    };
    let json = serde_json::to_string(&serde_json::json!({ "position": p })).unwrap();
    assert_eq!(
        position_read(&view(Some(&json), true, None)),
        PositionRead::Read(p)
    );
    assert_eq!(
        position_read(&view(None, false, None)),
        PositionRead::Reading
    );
    // A failed try that the Job retries is still reading.
    let failed = r#"{"error":"no WAL file under /var/lib/etcd/member/wal"}"#;
    assert_eq!(
        position_read(&view(Some(failed), false, None)),
        PositionRead::Reading
    );
    let PositionRead::Failed(why) =
        position_read(&view(Some(failed), false, Some("PodFailurePolicy")))
    else {
        panic!("a failed Job is a failed read");
    };
    assert!(
        why.contains("no WAL file") && why.contains("PodFailurePolicy"),
        "{why}"
    );
    assert!(matches!(
        position_read(&view(None, true, None)),
        PositionRead::Failed(_)
    ));
}
