use api::v1alpha2::EtcdOptions;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::builders::tests::member;
use crate::naming::{METRICS_PORT, PEER_PORT};

fn params() -> PodParams<'static> {
    PodParams {
        etcd_image_repository: "quay.io/coreos/etcd",
        voter: true,
        bootstrap_new_cluster: false,
        operator_image: Some("op:1"),
    }
}

fn args_of(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().unwrap().containers[0]
        .args
        .clone()
        .unwrap()
}

#[test]
fn member_pod_runs_etcd_with_per_member_dns_and_restricted_security() {
    let m = member("my-etcd-abcde", "my-etcd", "ns1");
    let pod = member_pod(&m, &params()).unwrap();
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("my-etcd-abcde"));
    assert_eq!(spec.hostname.as_deref(), Some("my-etcd-abcde"));
    assert_eq!(spec.subdomain.as_deref(), Some("my-etcd"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let sc = spec.security_context.as_ref().unwrap();
    assert_eq!(
        (sc.run_as_user, sc.run_as_group, sc.fs_group),
        (Some(65532), Some(65532), Some(65532))
    );
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    let c = &spec.containers[0];
    assert_eq!(c.name, "etcd");
    assert_eq!(c.image.as_deref(), Some("quay.io/coreos/etcd:v3.6.11"));
    let csc = c.security_context.as_ref().unwrap();
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    assert_eq!(
        csc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_string()][..])
    );
    let args = args_of(&pod);
    for expected in [
        "--name=my-etcd-abcde",
        "--data-dir=/var/lib/etcd",
        "--listen-client-urls=http://0.0.0.0:2379",
        "--advertise-client-urls=http://my-etcd-abcde.my-etcd.ns1.svc:2379",
        "--initial-advertise-peer-urls=http://my-etcd-abcde.my-etcd.ns1.svc:2380",
        "--initial-cluster=my-etcd-abcde=http://my-etcd-abcde.my-etcd.ns1.svc:2380",
        "--initial-cluster-token=ns1-my-etcd-uid",
        "--initial-cluster-state=$(INITIAL_CLUSTER_STATE)",
        "--listen-metrics-urls=http://0.0.0.0:2381",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "missing {expected} in {args:?}"
        );
    }
    assert_eq!(pod.metadata.labels.as_ref().unwrap()[labels::ROLE], "voter");
    assert_eq!(
        pod.metadata.annotations.as_ref().unwrap()[INITIAL_CLUSTER_STATE_ANNOTATION],
        "existing"
    );
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("EtcdMember", Some(true))
    );
}

#[test]
fn adopted_member_pod_keeps_its_legacy_service_and_data_subdirectory() {
    let mut m = member("legacy-0", "legacy", "ns1");
    m.spec.initial_cluster = "legacy-0=http://legacy-0.legacy-headless.ns1.svc:2380".into();
    m.metadata.annotations = Some(BTreeMap::from([
        (
            labels::HEADLESS_SERVICE_ANNOTATION.to_string(),
            "legacy-headless".to_string(),
        ),
        (
            labels::DATA_DIR_SUBPATH_ANNOTATION.to_string(),
            "default.etcd".to_string(),
        ),
    ]));
    let pod = member_pod(&m, &params()).unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().subdomain.as_deref(),
        Some("legacy-headless")
    );
    let args = args_of(&pod);
    for expected in [
        "--data-dir=/var/lib/etcd/default.etcd",
        "--initial-advertise-peer-urls=http://legacy-0.legacy-headless.ns1.svc:2380",
        "--advertise-client-urls=http://legacy-0.legacy-headless.ns1.svc:2379",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "missing {expected} in {args:?}"
        );
    }
    // The annotations are the member's, not the Pod's: user metadata cannot forge them.
    let ann = pod.metadata.annotations.clone().unwrap_or_default();
    assert!(!ann.contains_key(labels::HEADLESS_SERVICE_ANNOTATION));
}

#[test]
fn seed_of_unformed_cluster_bootstraps_new_and_learners_carry_no_voter_label() {
    let m = member("c-seed1", "c", "n");
    let pod = member_pod(
        &m,
        &PodParams {
            voter: false,
            bootstrap_new_cluster: true,
            ..params()
        },
    )
    .unwrap();
    assert_eq!(
        pod.metadata.annotations.as_ref().unwrap()[INITIAL_CLUSTER_STATE_ANNOTATION],
        "new"
    );
    assert!(!pod
        .metadata
        .labels
        .as_ref()
        .unwrap()
        .contains_key(labels::ROLE));
}

fn restoring(source: api::v1alpha2::RestoreSource) -> EtcdMember {
    let mut m = member("c-seed1", "c", "n");
    m.spec.restore = Some(api::v1alpha2::RestoreSpec { source });
    m
}

fn s3_source() -> api::v1alpha2::RestoreSource {
    api::v1alpha2::RestoreSource {
        s3: Some(api::v1alpha2::S3Location {
            endpoint: Some("http://minio.n.svc:9000".into()),
            bucket: "backups".into(),
            key: Some("c/snap.db".into()),
            region: None,
            force_path_style: Some(true),
            credentials_secret_ref: Some(api::v1alpha2::SecretReference::new("s3")),
            ..Default::default()
        }),
        pvc: None,
    }
}

fn seed_params() -> PodParams<'static> {
    PodParams {
        bootstrap_new_cluster: true,
        ..params()
    }
}

#[test]
fn restoring_seed_copies_the_agent_then_restores_with_its_own_etcdutl_and_identity() {
    let pod = member_pod(&restoring(s3_source()), &seed_params()).unwrap();
    let spec = pod.spec.unwrap();
    let init = spec.init_containers.unwrap();
    let names: Vec<_> = init.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["install-tools", "restore"]);
    assert_eq!(init[0].image.as_deref(), Some("op:1"));
    assert_eq!(
        init[0].args.clone().unwrap(),
        ["install-tools", "--to=/tools"]
    );
    // The member's own etcd image, so its etcdutl version matches the cluster's.
    assert_eq!(
        init[1].image.as_deref(),
        Some("quay.io/coreos/etcd:v3.6.11")
    );
    assert_eq!(init[1].command.clone().unwrap(), ["/tools/etcd-operator"]);
    let args = init[1].args.clone().unwrap();
    for want in [
        "snapshot-agent",
        "restore",
        "--data-dir=/var/lib/etcd",
        "--name=c-seed1",
        "--initial-cluster=c-seed1=http://c-seed1.c.n.svc:2380",
        "--initial-cluster-token=n-c-uid",
        "--initial-advertise-peer-urls=http://c-seed1.c.n.svc:2380",
        "--etcdutl=/usr/local/bin/etcdutl",
        "--s3-bucket=backups",
        "--s3-key=c/snap.db",
        "--s3-endpoint=http://minio.n.svc:9000",
        "--s3-region=us-east-1",
        "--s3-force-path-style",
    ] {
        assert!(args.iter().any(|a| a == want), "missing {want} in {args:?}");
    }
    let env: Vec<_> = init[1]
        .env
        .iter()
        .flatten()
        .map(|e| {
            let r = e
                .value_from
                .as_ref()
                .unwrap()
                .secret_key_ref
                .as_ref()
                .unwrap();
            (e.name.clone(), r.name.clone(), r.key.clone())
        })
        .collect();
    assert_eq!(
        env,
        [
            (
                "AWS_ACCESS_KEY_ID".into(),
                "s3".into(),
                "AWS_ACCESS_KEY_ID".into()
            ),
            (
                "AWS_SECRET_ACCESS_KEY".into(),
                "s3".into(),
                "AWS_SECRET_ACCESS_KEY".into()
            ),
        ]
    );
    let mounts: Vec<_> = init[1]
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
        .collect();
    assert_eq!(
        mounts,
        [
            ("tools", "/tools", Some(true)),
            ("data", "/var/lib/etcd", None)
        ]
    );
    assert!(spec
        .volumes
        .unwrap()
        .iter()
        .any(|v| v.name == "tools" && v.empty_dir.is_some()));
}

#[test]
fn pvc_source_is_mounted_read_only_and_named_by_its_exact_path() {
    let source = api::v1alpha2::RestoreSource {
        s3: None,
        pvc: Some(api::v1alpha2::PvcLocation {
            claim_name: "backups".into(),
            sub_path: Some("etcd/snap.db".into()),
        }),
    };
    let pod = member_pod(&restoring(source), &seed_params()).unwrap();
    let spec = pod.spec.unwrap();
    let restore = &spec.init_containers.unwrap()[1];
    assert!(restore
        .args
        .iter()
        .flatten()
        .any(|a| a == "--pvc-file=/restore-source/etcd/snap.db"));
    let volume = spec
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "restore-source")
        .unwrap();
    let claim = volume.persistent_volume_claim.unwrap();
    assert_eq!(
        (claim.claim_name.as_str(), claim.read_only),
        ("backups", Some(true))
    );
    let escaping = api::v1alpha2::RestoreSource {
        s3: None,
        pvc: Some(api::v1alpha2::PvcLocation {
            claim_name: "backups".into(),
            sub_path: Some("../x.db".into()),
        }),
    };
    let err = member_pod(&restoring(escaping), &seed_params()).unwrap_err();
    assert!(err.to_string().contains("subPath"), "{err}");
}

#[test]
fn only_a_bootstrapping_seed_restores_and_it_needs_the_operator_image() {
    // A seed recreated after the cluster formed, or any later member: no restore.
    let pod = member_pod(&restoring(s3_source()), &params()).unwrap();
    assert!(pod.spec.unwrap().init_containers.is_none());
    let err = member_pod(
        &restoring(s3_source()),
        &PodParams {
            operator_image: None,
            ..seed_params()
        },
    )
    .unwrap_err();
    assert_eq!(err, BuildError::NoOperatorImage("c-seed1".into()));
    assert!(err.to_string().contains("--operator-image"));
}

#[test]
fn a_member_marked_for_an_in_place_restore_restores_alone_and_sets_its_old_data_aside() {
    // A member that joined a formed cluster (not bootstrapping), marked by an EtcdRecovery.
    let mut m = restoring(s3_source());
    m.spec.initial_cluster =
        "c-seed1=http://c-seed1.c.n.svc:2380,c-b=http://c-b.c.n.svc:2380".into();
    let ann = m.metadata.annotations.get_or_insert_with(Default::default);
    ann.insert(
        api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION.into(),
        "rec".into(),
    );
    ann.insert(
        api::v1alpha2::RESTORE_BUMP_REVISION_ANNOTATION.into(),
        "1000000400".into(),
    );
    let pod = member_pod(&m, &params()).unwrap();
    assert_eq!(
        pod.metadata.annotations.as_ref().unwrap()[INITIAL_CLUSTER_STATE_ANNOTATION],
        "existing"
    );
    let init = pod.spec.unwrap().init_containers.unwrap();
    let args = init[1].args.clone().unwrap();
    for want in [
        // Alone: the restored data dir is a one-member cluster, whatever the member joined.
        "--initial-cluster=c-seed1=http://c-seed1.c.n.svc:2380",
        "--set-aside=.pre-restore-rec",
        "--bump-revision=1000000400",
        "--s3-key=c/snap.db",
    ] {
        assert!(args.iter().any(|a| a == want), "missing {want} in {args:?}");
    }
    // Without the mark, the same member restores nothing.
    let pod = member_pod(&restoring(s3_source()), &params()).unwrap();
    assert!(pod.spec.unwrap().init_containers.is_none());
}

/// Two EtcdRecoveries of the same name (the condition messages always suggest
/// `<cluster>-restore`) are two restores: each sets the data aside in, and marks done, a
/// directory of its own, keyed by the recovery's UID. Keyed by name, the second found the first's
/// `restored` marker and restored nothing.
#[test]
fn recoveries_of_the_same_name_restore_into_set_aside_dirs_of_their_own() {
    let set_aside = |uid: Option<&str>| {
        let mut m = restoring(s3_source());
        let ann = m.metadata.annotations.get_or_insert_with(Default::default);
        ann.insert(
            api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION.into(),
            "c-restore".into(),
        );
        if let Some(uid) = uid {
            ann.insert("etcd-operator.cozystack.io/restore-id".into(), uid.into());
        }
        let pod = member_pod(&m, &params()).unwrap();
        pod.spec.unwrap().init_containers.unwrap()[1]
            .args
            .clone()
            .unwrap()
            .into_iter()
            .find(|a| a.starts_with("--set-aside="))
            .unwrap()
    };
    let first = set_aside(Some("0b6e6c2a-1111-4d7e-9d5c-3f7f6d2a0001"));
    let second = set_aside(Some("0b6e6c2a-2222-4d7e-9d5c-3f7f6d2a0002"));
    assert_ne!(first, second);
    assert_eq!(
        second,
        "--set-aside=.pre-restore-0b6e6c2a-2222-4d7e-9d5c-3f7f6d2a0002"
    );
    // A mark written before the UID was recorded (an upgrade in the middle of a restore) keeps
    // the directory it named, so a restore already done is not done again.
    assert_eq!(set_aside(None), "--set-aside=.pre-restore-c-restore");
}

#[test]
fn an_in_place_restore_checks_the_stored_object_against_the_sha256_it_is_given() {
    let mut m = restoring(s3_source());
    let ann = m.metadata.annotations.get_or_insert_with(Default::default);
    ann.insert(
        api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION.into(),
        "rec".into(),
    );
    let sha = format!("sha256:{}", "ab".repeat(32));
    let args = |m: &EtcdMember| {
        let pod = member_pod(m, &params()).unwrap();
        pod.spec.unwrap().init_containers.unwrap()[1]
            .args
            .clone()
            .unwrap()
    };
    // Without the annotation the agent checks the checksum stored beside the object.
    assert!(
        !args(&m).iter().any(|a| a.starts_with("--expected-sha256")),
        "{:?}",
        args(&m)
    );
    m.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(api::v1alpha2::RESTORE_SHA256_ANNOTATION.into(), sha.clone());
    let want = format!("--expected-sha256={sha}");
    assert!(args(&m).contains(&want), "missing {want} in {:?}", args(&m));
}

#[test]
fn pending_member_has_no_pod() {
    let mut m = member("c-x", "c", "n");
    m.spec.initial_cluster.clear();
    assert!(matches!(
        member_pod(&m, &params()),
        Err(BuildError::PendingMember(_))
    ));
}

#[test]
fn tls_and_options_become_flags_and_mounts() {
    let mut m = member("c-x", "c", "n");
    m.spec.tls = Some(api::v1alpha2::MemberTls {
        client_server_secret_ref: Some(api::v1alpha2::SecretReference::new("c-server-tls")),
        client_mtls: true,
        peer_secret_ref: Some(api::v1alpha2::SecretReference::new("c-peer-tls")),
        peer_auto_tls: false,
    });
    m.spec.options = Some(EtcdOptions {
        quota_backend_bytes: Some(8_589_934_592),
        auto_compaction_mode: Some(api::v1alpha2::AutoCompactionMode::Periodic),
        auto_compaction_retention: Some(IntOrString::String("1h".into())),
        snapshot_count: Some(5000),
    });
    let pod = member_pod(&m, &params()).unwrap();
    let args = args_of(&pod);
    for expected in [
        "--listen-client-urls=https://0.0.0.0:2379",
        "--advertise-client-urls=https://c-x.c.n.svc:2379",
        "--initial-advertise-peer-urls=https://c-x.c.n.svc:2380",
        "--cert-file=/etc/etcd/tls/client/tls.crt",
        "--trusted-ca-file=/etc/etcd/tls/client/ca.crt",
        "--client-cert-auth",
        "--peer-cert-file=/etc/etcd/tls/peer/tls.crt",
        "--peer-client-cert-auth",
        "--quota-backend-bytes=8589934592",
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=1h",
        "--snapshot-count=5000",
        "--listen-metrics-urls=http://0.0.0.0:2381",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "missing {expected} in {args:?}"
        );
    }
    let mounts: Vec<_> = pod.spec.as_ref().unwrap().containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.clone())
        .collect();
    assert_eq!(
        mounts,
        [
            "/var/lib/etcd",
            "/etc/etcd/tls/client",
            "/etc/etcd/tls/peer"
        ]
    );
}

fn tls_member(client: Option<&str>, mtls: bool, peer: Option<&str>) -> EtcdMember {
    let mut m = member("c-x", "c", "n");
    m.spec.initial_cluster = naming::initial_cluster_entry("c-x", "c", "n", peer.is_some());
    m.spec.tls = Some(api::v1alpha2::MemberTls {
        client_server_secret_ref: client.map(api::v1alpha2::SecretReference::new),
        client_mtls: mtls,
        peer_secret_ref: peer.map(api::v1alpha2::SecretReference::new),
        peer_auto_tls: false,
    });
    m
}

fn secret_volumes(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .as_ref()
        .unwrap()
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            let s = v.secret.as_ref()?;
            Some((v.name.clone(), s.secret_name.clone()?))
        })
        .collect()
}

#[test]
fn server_tls_only_serves_https_without_requiring_client_certificates() {
    let pod = member_pod(&tls_member(Some("c-server-tls"), false, None), &params()).unwrap();
    let args = args_of(&pod);
    for expected in [
        "--listen-client-urls=https://0.0.0.0:2379",
        "--advertise-client-urls=https://c-x.c.n.svc:2379",
        "--cert-file=/etc/etcd/tls/client/tls.crt",
        "--key-file=/etc/etcd/tls/client/tls.key",
        "--listen-peer-urls=http://0.0.0.0:2380",
        "--initial-advertise-peer-urls=http://c-x.c.n.svc:2380",
        "--initial-cluster=c-x=http://c-x.c.n.svc:2380",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "missing {expected} in {args:?}"
        );
    }
    // etcd demands a client certificate as soon as it has a trusted CA.
    for absent in ["--trusted-ca-file", "--client-cert-auth", "--peer-"] {
        assert!(
            !args.iter().any(|a| a.starts_with(absent)),
            "{absent} in {args:?}"
        );
    }
    assert_eq!(
        secret_volumes(&pod),
        [("client-tls".to_string(), "c-server-tls".to_string())]
    );
}

#[test]
fn peer_auto_tls_runs_https_peers_without_secrets() {
    let mut m = tls_member(None, false, None);
    m.spec.initial_cluster = naming::initial_cluster_entry("c-x", "c", "n", true);
    if let Some(tls) = m.spec.tls.as_mut() {
        tls.peer_auto_tls = true;
    }
    let pod = member_pod(&m, &params()).unwrap();
    let args = args_of(&pod);
    for expected in [
        "--listen-client-urls=http://0.0.0.0:2379",
        "--listen-peer-urls=https://0.0.0.0:2380",
        "--initial-advertise-peer-urls=https://c-x.c.n.svc:2380",
        "--initial-cluster=c-x=https://c-x.c.n.svc:2380",
        "--peer-auto-tls",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "missing {expected} in {args:?}"
        );
    }
    for absent in [
        "--peer-cert-file",
        "--peer-trusted-ca-file",
        "--peer-client-cert-auth",
    ] {
        assert!(
            !args.iter().any(|a| a.starts_with(absent)),
            "{absent} in {args:?}"
        );
    }
    assert_eq!(secret_volumes(&pod), []);
}

#[test]
fn peer_only_tls_keeps_the_client_listener_plaintext_and_peers_mutual() {
    let pod = member_pod(&tls_member(None, false, Some("c-peer-tls")), &params()).unwrap();
    let args = args_of(&pod);
    for expected in [
        "--listen-client-urls=http://0.0.0.0:2379",
        "--advertise-client-urls=http://c-x.c.n.svc:2379",
        "--listen-peer-urls=https://0.0.0.0:2380",
        "--initial-advertise-peer-urls=https://c-x.c.n.svc:2380",
        "--initial-cluster=c-x=https://c-x.c.n.svc:2380",
        "--peer-cert-file=/etc/etcd/tls/peer/tls.crt",
        "--peer-key-file=/etc/etcd/tls/peer/tls.key",
        "--peer-trusted-ca-file=/etc/etcd/tls/peer/ca.crt",
        "--peer-client-cert-auth",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "missing {expected} in {args:?}"
        );
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--cert-file")),
        "{args:?}"
    );
    assert_eq!(
        secret_volumes(&pod),
        [("peer-tls".to_string(), "c-peer-tls".to_string())]
    );
}

#[test]
fn tls_secrets_are_whole_volume_mounts_and_probes_stay_on_plaintext_ports() {
    let pod = member_pod(
        &tls_member(Some("c-server-tls"), true, Some("c-peer-tls")),
        &params(),
    )
    .unwrap();
    let c = &pod.spec.as_ref().unwrap().containers[0];
    // No subPath and no items: the kubelet then refreshes renewed Secrets in place, and
    // etcd re-reads its certificate and key on every handshake.
    for m in c.volume_mounts.iter().flatten() {
        assert_eq!(m.sub_path, None, "{m:?}");
    }
    for v in pod.spec.as_ref().unwrap().volumes.iter().flatten() {
        if let Some(s) = &v.secret {
            assert_eq!(s.items, None, "{v:?}");
        }
    }
    assert_eq!(
        secret_volumes(&pod),
        [
            ("client-tls".to_string(), "c-server-tls".to_string()),
            ("peer-tls".to_string(), "c-peer-tls".to_string())
        ]
    );
    // Probes need no certificate: readiness on the plaintext metrics listener, liveness a
    // TCP connect to the peer port.
    let readiness = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(
        (readiness.port.clone(), readiness.scheme.as_deref()),
        (IntOrString::Int(METRICS_PORT), Some("HTTP"))
    );
    // A raised NOSPACE alarm does not take a member out of readiness.
    assert_eq!(readiness.path.as_deref(), Some("/health?exclude=NOSPACE"));
    assert!(args_of(&pod).contains(&"--listen-metrics-urls=http://0.0.0.0:2381".to_string()));
    let liveness = c.liveness_probe.as_ref().unwrap();
    assert_eq!(
        liveness.tcp_socket.as_ref().unwrap().port,
        IntOrString::Int(PEER_PORT)
    );
}

#[test]
fn memory_medium_uses_tmpfs_sized_by_storage_and_default_resources_apply() {
    let mut m = member("c-x", "c", "n");
    m.spec.storage.medium = Some(api::v1alpha2::StorageMedium::Memory);
    m.spec.storage.size = Quantity("256Mi".into());
    let pod = member_pod(&m, &params()).unwrap();
    let spec = pod.spec.as_ref().unwrap();
    let data = &spec.volumes.as_ref().unwrap()[0];
    let ed = data.empty_dir.as_ref().unwrap();
    assert_eq!(ed.medium.as_deref(), Some("Memory"));
    assert_eq!(ed.size_limit, Some(Quantity("256Mi".into())));
    let req = spec.containers[0]
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap();
    assert_eq!(req["cpu"], Quantity("100m".into()));
    assert_eq!(req["memory"], Quantity("128Mi".into()));
}

#[test]
fn empty_resources_written_by_the_reference_get_the_default_requests() {
    let mut m = member("c-x", "c", "n");
    m.spec.resources = Some(ResourceRequirements::default());
    let pod = member_pod(&m, &params()).unwrap();
    let resources = pod.spec.unwrap().containers[0].resources.clone().unwrap();
    assert_eq!(resources, default_resources());
    // Anything set is the user's choice and used as it is.
    let limits_only = ResourceRequirements {
        limits: Some(BTreeMap::from([(
            "memory".to_string(),
            Quantity("1Gi".into()),
        )])),
        ..Default::default()
    };
    m.spec.resources = Some(limits_only.clone());
    let pod = member_pod(&m, &params()).unwrap();
    assert_eq!(pod.spec.unwrap().containers[0].resources, Some(limits_only));
}

#[test]
fn etcd_3_6_members_accept_a_learner_per_missing_member_and_3_5_members_keep_etcds_one() {
    let mut m = member("c-x", "c", "n");
    m.spec.version = "3.6.16".into();
    let args = args_of(&member_pod(&m, &params()).unwrap());
    assert!(
        args.iter().any(|a| a == "--max-learners=98"),
        "3.6 gets --max-learners: {args:?}"
    );
    assert_eq!(max_learners_of_args(&args), MAX_LEARNERS);
    assert_eq!(max_learners_of_version("3.6.16"), MAX_LEARNERS);
    assert_eq!(max_learners_of_version("3.10.0"), MAX_LEARNERS);

    // etcd 3.5 has no such flag (its limit is a constant) and exits on an unknown one.
    m.spec.version = "3.5.35".into();
    let args = args_of(&member_pod(&m, &params()).unwrap());
    assert!(
        !args.iter().any(|a| a.contains("max-learners")),
        "3.5 gets no learner flag: {args:?}"
    );
    assert_eq!(max_learners_of_args(&args), ETCD_DEFAULT_MAX_LEARNERS);
    assert_eq!(max_learners_of_version("3.5.35"), 1);
    // A Pod built before the flag existed (or the reference operator's) runs with etcd's default.
    assert_eq!(max_learners_of_args(&["--name=c-x".to_string()]), 1);
}

#[test]
fn only_a_member_marked_by_a_recovery_starts_with_force_new_cluster() {
    let mut m = member("my-etcd-abcde", "my-etcd", "ns1");
    let plain = member_pod(&m, &params()).unwrap();
    assert!(!args_of(&plain).iter().any(|a| a == "--force-new-cluster"));
    m.metadata.annotations = Some(
        [(
            api::v1alpha2::FORCE_NEW_CLUSTER_ANNOTATION.to_string(),
            "my-recovery".to_string(),
        )]
        .into(),
    );
    let forced = member_pod(&m, &params()).unwrap();
    assert!(args_of(&forced).iter().any(|a| a == "--force-new-cluster"));
}

#[test]
fn member_pod_carries_the_placement_of_its_member_and_none_when_unset() {
    let mut m = member("c-x", "c", "n");
    let unplaced = member_pod(&m, &params()).unwrap();
    let spec = unplaced.spec.as_ref().unwrap();
    assert_eq!(spec.tolerations, None);
    assert_eq!(spec.node_selector, None);
    assert_eq!(spec.priority_class_name, None);

    let toleration = crate::builders::tests::dedicated_toleration();
    m.spec.tolerations = vec![toleration.clone()];
    m.spec.node_selector = BTreeMap::from([("dedicated".to_string(), "etcd".to_string())]);
    m.spec.priority_class_name = Some("etcd-critical".into());
    let placed = member_pod(&m, &params()).unwrap();
    let spec = placed.spec.as_ref().unwrap();
    assert_eq!(spec.tolerations, Some(vec![toleration]));
    assert_eq!(
        spec.node_selector.as_ref().unwrap()["dedicated"],
        "etcd".to_string()
    );
    assert_eq!(spec.priority_class_name.as_deref(), Some("etcd-critical"));
    // The Pod records the template it was built from: another placement, another hash.
    let hash_of = |p: &Pod| {
        p.metadata.annotations.as_ref().unwrap()[labels::TEMPLATE_HASH_ANNOTATION].clone()
    };
    assert_ne!(hash_of(&unplaced), hash_of(&placed));

    // An empty priority class name is the default priority: not written.
    m.spec.priority_class_name = Some(String::new());
    let pod = member_pod(&m, &params()).unwrap();
    assert_eq!(pod.spec.unwrap().priority_class_name, None);
}
