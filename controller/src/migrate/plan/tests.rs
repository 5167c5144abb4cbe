use super::*;
use api::v1alpha2::AutoCompactionMode;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn legacy() -> Value {
    serde_json::json!({
        "apiVersion": "etcd.aenix.io/v1alpha1", "kind": "EtcdCluster",
        "metadata": {"name": "etcd", "namespace": "prod", "uid": "aenix-uid"},
        "spec": {
            "replicas": 3,
            "options": {"quota-backend-bytes": "4294967296", "auto-compaction-mode": "periodic", "auto-compaction-retention": "1h"},
            "podTemplate": {"spec": {"containers": [{
                "name": "etcd", "image": "quay.io/coreos/etcd:v3.5.17",
                "resources": {"requests": {"cpu": "200m"}},
            }]}},
            "storage": {"volumeClaimTemplate": {"spec": {
                "storageClassName": "fast",
                "resources": {"requests": {"storage": "10Gi"}},
            }}},
        },
    })
}

#[test]
fn spec_translates_replicas_version_storage_options_and_resources() {
    let spec = translate_spec(&legacy()).unwrap();
    assert_eq!(spec.replicas, 3);
    assert_eq!(spec.version, "3.5.17");
    assert_eq!(spec.storage.size.0, "10Gi");
    assert_eq!(spec.storage.storage_class_name.as_deref(), Some("fast"));
    let o = spec.options.unwrap();
    assert_eq!(o.quota_backend_bytes, Some(4294967296));
    assert_eq!(o.auto_compaction_mode, Some(AutoCompactionMode::Periodic));
    assert_eq!(
        o.auto_compaction_retention,
        Some(IntOrString::String("1h".into()))
    );
    let requests = spec.resources.unwrap().requests.unwrap();
    assert_eq!(requests["cpu"].0, "200m");
}

#[test]
fn spec_defaults_follow_the_aenix_operator() {
    let v = serde_json::json!({"spec": {"storage": {"volumeClaimTemplate": {"spec": {
        "resources": {"requests": {"storage": "1Gi"}}}}}}});
    let spec = translate_spec(&v).unwrap();
    assert_eq!((spec.replicas, spec.version.as_str()), (3, "3.5.12"));
    assert_eq!(spec.options, None);
}

#[test]
fn untranslatable_specs_are_refused_naming_the_field_and_the_fix() {
    let mut v = legacy();
    v["spec"]["options"]["experimental-foo"] = "1".into();
    v["spec"]["options"]["snapshot-count"] = "many".into();
    v["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = "etcd:latest".into();
    v["spec"]["security"] = serde_json::json!({"enableAuth": true, "tls": {"peerSecret": "p"}});
    let errors = translate_spec(&v).unwrap_err().join("\n");
    for expected in [
        "spec.options.experimental-foo has no equivalent",
        "spec.options.snapshot-count is \"many\"",
        "containers[etcd].image is \"etcd:latest\"",
        "spec.security.enableAuth",
        "spec.security.tls",
    ] {
        assert!(errors.contains(expected), "{expected:?} not in {errors}");
    }
    let mut v = legacy();
    v["spec"]["storage"] = serde_json::json!({"emptyDir": {}});
    assert!(translate_spec(&v).unwrap_err()[0].contains("spec.storage.emptyDir"));
}

#[test]
fn image_versions() {
    assert_eq!(
        version_of_image("quay.io/coreos/etcd:v3.5.12").as_deref(),
        Some("3.5.12")
    );
    assert_eq!(
        version_of_image("registry:5000/etcd:3.6.1@sha256:ab").as_deref(),
        Some("3.6.1")
    );
    assert_eq!(version_of_image("registry:5000/etcd"), None);
    assert_eq!(version_of_image("etcd:v3.5"), None);
}

#[test]
fn peer_urls_parse_into_pod_service_and_scheme() {
    let parsed = |member: &str, tls| PeerUrl {
        member: member.into(),
        service: "etcd-headless".into(),
        tls,
    };
    assert_eq!(
        parse_peer_url("http://etcd-0.etcd-headless.prod.svc:2380", "prod"),
        Ok(parsed("etcd-0", false))
    );
    assert_eq!(
        parse_peer_url("https://etcd-1.etcd-headless.prod.svc:2380", "prod"),
        Ok(parsed("etcd-1", true))
    );
    assert!(parse_peer_url("http://10.0.0.1:2380", "prod").is_err());
    assert!(parse_peer_url("unix://etcd-0.etcd-headless.prod.svc:2380", "prod").is_err());
    assert!(parse_peer_url("http://etcd-0.etcd-headless.other.svc:2380", "prod").is_err());
}

/// The aenix default: `--peer-auto-tls` and https peer URLs.
fn auto_tls_facts() -> Facts {
    let mut f = facts();
    if let Ok((_, members)) = &mut f.etcd {
        for m in members.iter_mut() {
            m.peer_urls = vec![format!("https://{}.etcd-headless.prod.svc:2380", m.name)];
        }
    }
    for p in f.pods.values_mut() {
        p.peer_auto_tls = true;
    }
    f
}

#[test]
fn peer_auto_tls_clusters_are_adopted_with_auto_tls_members() {
    let f = auto_tls_facts();
    let p = build(&f);
    assert!(p.passed(), "{:?}", p.checks);
    for a in &p.members {
        let tls = a.member.spec.tls.clone().unwrap();
        assert!(tls.peer_auto_tls, "{tls:?}");
        assert_eq!(tls.peer_secret_ref, None);
        assert_eq!(tls.client_server_secret_ref, None);
    }
    assert_eq!(
        p.members[0].member.spec.initial_cluster,
        "etcd-0=https://etcd-0.etcd-headless.prod.svc:2380,etcd-1=https://etcd-1.etcd-headless.prod.svc:2380,etcd-2=https://etcd-2.etcd-headless.prod.svc:2380"
    );
    let cluster = p.cluster.clone().unwrap();
    assert!(cluster.peer_auto_tls() && cluster.peer_https());
    assert!(render(&p, &f).contains(labels::PEER_AUTO_TLS_ANNOTATION));
    // A plaintext cluster gets neither.
    let p = build(&facts());
    assert!(p.members.iter().all(|a| a.member.spec.tls.is_none()));
    assert!(!p.cluster.unwrap().peer_https());
}

fn facts() -> Facts {
    let members = (0..3)
        .map(|i| EtcdMemberFacts {
            id: 0x10 + i,
            name: format!("etcd-{i}"),
            peer_urls: vec![format!("http://etcd-{i}.etcd-headless.prod.svc:2380")],
            is_learner: false,
        })
        .collect();
    Facts {
        name: "etcd".into(),
        namespace: "prod".into(),
        legacy: legacy(),
        legacy_uid: "aenix-uid".into(),
        statefulset: Some(StatefulSetFacts {
            replicas: 3,
            ready_replicas: 3,
        }),
        pods: (0..3)
            .map(|i| {
                (
                    format!("etcd-{i}"),
                    PodFacts {
                        uid: format!("pod-{i}"),
                        ready: true,
                        peer_auto_tls: false,
                    },
                )
            })
            .collect(),
        pvcs: (0..3)
            .map(|i| (format!("data-etcd-{i}"), format!("pvc-{i}")))
            .collect(),
        etcd: Ok((0xabc, members)),
        aenix_operator_running: Vec::new(),
        target: None,
    }
}

#[test]
fn plan_adopts_every_member_with_reserved_annotations_and_latched_status() {
    let f = facts();
    let p = build(&f);
    assert!(p.passed(), "{:?}", p.checks);
    let status = p.status.clone().unwrap();
    assert_eq!(status.cluster_id.as_deref(), Some("0000000000000abc"));
    assert_eq!(status.cluster_token.as_deref(), Some("etcd-prod"));
    let observed = status.observed.unwrap();
    assert_eq!(
        (observed.replicas, observed.version.as_str()),
        (3, "3.5.17")
    );
    assert_eq!(p.members.len(), 3);
    let a = &p.members[1];
    let ann = a.member.metadata.annotations.clone().unwrap();
    assert_eq!(ann[labels::HEADLESS_SERVICE_ANNOTATION], "etcd-headless");
    assert_eq!(ann[labels::DATA_DIR_SUBPATH_ANNOTATION], "default.etcd");
    // The webhook lets a cluster admin create a member only with the migration's marker.
    assert_eq!(ann[ADOPTED_FROM_ANNOTATION], "aenix-uid");
    assert_eq!(a.status.member_id.as_deref(), Some("0000000000000011"));
    assert!(a.status.is_voter);
    assert_eq!(
        (a.pod_uid.as_str(), a.pvc.as_str()),
        ("pod-1", "data-etcd-1")
    );
    assert_eq!(
        a.member.spec.initial_cluster,
        "etcd-0=http://etcd-0.etcd-headless.prod.svc:2380,etcd-1=http://etcd-1.etcd-headless.prod.svc:2380,etcd-2=http://etcd-2.etcd-headless.prod.svc:2380"
    );
    assert_eq!(p.statefulset.as_deref(), Some("etcd"));
    let cluster = p.cluster.clone().unwrap();
    assert_eq!(
        cluster.metadata.annotations.unwrap()[ADOPTED_FROM_ANNOTATION],
        "aenix-uid"
    );
    let text = render(&p, &f);
    assert!(text.contains("propagationPolicy=Orphan"), "{text}");
    assert!(text.contains("prod/etcd-client"), "{text}");
}

type Mutation = Box<dyn Fn(&mut Facts)>;

#[test]
fn plan_refuses_unsafe_states_naming_the_object_and_the_fix() {
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "the aenix operator still runs (etcd-operator-system/etcd-operator-controller-manager)",
            Box::new(|f| {
                f.aenix_operator_running =
                    vec!["etcd-operator-system/etcd-operator-controller-manager".into()]
            }),
        ),
        (
            "has 2 of 3 replicas Ready",
            Box::new(|f| {
                f.statefulset = Some(StatefulSetFacts {
                    replicas: 3,
                    ready_replicas: 2,
                })
            }),
        ),
        (
            "no learners",
            Box::new(|f| {
                if let Ok((_, m)) = &mut f.etcd {
                    m[2].is_learner = true
                }
            }),
        ),
        (
            "already exists and was not adopted from this aenix cluster",
            Box::new(|f| f.target = Some(None)),
        ),
        (
            "StatefulSet prod/etcd not found",
            Box::new(|f| f.statefulset = None),
        ),
        (
            "NOT Ready",
            Box::new(|f| {
                if let Some(p) = f.pods.get_mut("etcd-2") {
                    p.ready = false
                }
            }),
        ),
        (
            "does not run --peer-auto-tls: peer TLS from Secrets is not adopted",
            Box::new(|f| {
                *f = auto_tls_facts();
                if let Some(p) = f.pods.get_mut("etcd-1") {
                    p.peer_auto_tls = false
                }
            }),
        ),
        (
            "peer URLs mix http:// and https://",
            Box::new(|f| {
                if let Ok((_, m)) = &mut f.etcd {
                    m[0].peer_urls = vec!["https://etcd-0.etcd-headless.prod.svc:2380".into()]
                }
                if let Some(p) = f.pods.get_mut("etcd-0") {
                    p.peer_auto_tls = true
                }
            }),
        ),
        (
            "etcd could not be asked",
            Box::new(|f| f.etcd = Err("connection refused".into())),
        ),
    ];
    for (expected, mutate) in cases {
        let mut f = facts();
        mutate(&mut f);
        let p = build(&f);
        assert!(!p.passed(), "{expected}: passed");
        assert!(
            p.cluster.is_none() && p.members.is_empty(),
            "{expected}: objects planned"
        );
        let failed: Vec<&str> = p
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.what.as_str())
            .collect();
        assert!(
            failed.iter().any(|w| w.contains(expected)),
            "{expected:?} not in {failed:?}"
        );
        assert!(render(&p, &f).contains("Nothing is changed"));
    }
}

#[test]
fn a_rerun_continues_its_own_partial_apply() {
    let mut f = facts();
    f.target = Some(Some("aenix-uid".into()));
    f.statefulset = None;
    let p = build(&f);
    assert!(p.passed(), "{:?}", p.checks);
    assert!(p.resuming);
    assert_eq!(p.statefulset, None);
    f.target = Some(Some("another-uid".into()));
    assert!(!build(&f).passed());
}
