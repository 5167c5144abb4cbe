//! The CRDs committed into the chart are exactly what the types generate, and they read back as
//! `apiextensions.k8s.io/v1` CustomResourceDefinitions with the contract's names and subresources.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn chart_crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/etcd-operator/files/crds")
}

fn committed(file: &str) -> String {
    let path = chart_crd_dir().join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make crds` to generate it", path.display()))
}

#[test]
fn committed_crds_match_the_types() {
    for crd in api::crd::all() {
        let file = api::crd::file_name(&crd);
        let generated = api::crd::to_yaml(&crd).expect("renders");
        assert!(
            committed(&file) == generated,
            "charts/etcd-operator/files/crds/{file} is stale: run `make crds` and commit the result"
        );
    }
    let files = std::fs::read_dir(chart_crd_dir()).expect("crd dir").count();
    assert_eq!(
        files,
        api::crd::all().len(),
        "unexpected extra files in the CRD directory"
    );
}

#[test]
fn committed_crds_parse_as_apiextensions_v1() {
    let expected = [
        (
            "etcdclusters.etcd-operator.cozystack.io",
            "EtcdCluster",
            true,
        ),
        (
            "etcdmembers.etcd-operator.cozystack.io",
            "EtcdMember",
            false,
        ),
        (
            "etcdsnapshots.etcd-operator.cozystack.io",
            "EtcdSnapshot",
            false,
        ),
        (
            "etcddefrags.etcd-operator.cozystack.io",
            "EtcdDefrag",
            false,
        ),
        (
            "etcdrecoveries.etcd-operator.cozystack.io",
            "EtcdRecovery",
            false,
        ),
    ];
    for (name, kind, scale) in expected {
        let text = committed(&format!("{name}.yaml"));
        let raw: yaml_serde::Value = yaml_serde::from_str(&text).expect("yaml");
        assert_eq!(raw["apiVersion"].as_str(), Some("apiextensions.k8s.io/v1"));
        assert_eq!(raw["kind"].as_str(), Some("CustomResourceDefinition"));
        let crd: CustomResourceDefinition = yaml_serde::from_str(&text).expect("typed CRD");
        assert_eq!(crd.metadata.name.as_deref(), Some(name));
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha2");
        assert!(version.served && version.storage);
        let sub = version.subresources.as_ref().expect("subresources");
        assert!(sub.status.is_some(), "{kind} has a status subresource");
        assert_eq!(sub.scale.is_some(), scale, "{kind} scale subresource");
        if let Some(scale) = &sub.scale {
            assert_eq!(scale.spec_replicas_path, ".spec.replicas");
            assert_eq!(scale.status_replicas_path, ".status.readyMembers");
            assert_eq!(
                scale.label_selector_path.as_deref(),
                Some(".status.selector")
            );
        }
    }
}

/// The reference operator's columns stay, in its order (scripts read them by position); ours
/// are added after them or only under `-o wide` (priority 1, shown here as `name (wide)`).
#[test]
fn printer_columns_match_the_contract() {
    let columns = |kind: &str| -> Vec<String> {
        let crd = api::crd::all()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .expect("crd");
        crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| match c.priority {
                Some(p) if p > 0 => format!("{} (wide)", c.name),
                _ => c.name.clone(),
            })
            .collect()
    };
    assert_eq!(
        columns("EtcdCluster"),
        [
            "Version",
            "Replicas",
            "Ready",
            "Available",
            "Reason",
            "Age",
            "Cluster ID (wide)",
            "Leader (wide)"
        ]
    );
    assert_eq!(
        columns("EtcdMember"),
        ["Cluster", "Version", "Running", "Ready", "Age"]
    );
    assert_eq!(
        columns("EtcdSnapshot"),
        ["Cluster", "Phase", "Verified", "Size", "Completed", "Age"]
    );
    assert_eq!(
        columns("EtcdDefrag"),
        ["Cluster", "Phase", "Defragmented", "Age"]
    );
    assert_eq!(
        columns("EtcdRecovery"),
        [
            "Cluster",
            "Phase",
            "Step",
            "Source",
            "Age",
            "Member (wide)",
            "Snapshot (wide)"
        ]
    );
}

/// One short name per kind, none shared with another kind or equal to a plural, singular or
/// category (a category wins over a name in kubectl). docs/api.md lists the projects checked
/// for collisions; tests/tests/api_crds.rs checks the built-in resources of a real apiserver.
#[test]
fn short_names_are_ours_alone() {
    let crds = api::crd::all();
    let short = |kind: &str| -> Vec<String> {
        crds.iter()
            .find(|c| c.spec.names.kind == kind)
            .and_then(|c| c.spec.names.short_names.clone())
            .unwrap_or_default()
    };
    for (kind, names) in [
        ("EtcdCluster", ["ec"]),
        ("EtcdMember", ["em"]),
        ("EtcdSnapshot", ["esnap"]),
        ("EtcdSnapshotSchedule", ["esched"]),
        ("EtcdRecovery", ["erec"]),
        ("EtcdDefrag", ["edefrag"]),
        ("EtcdDefragPolicy", ["edpol"]),
    ] {
        assert_eq!(short(kind), names, "{kind}");
    }
    let mut taken: Vec<String> = Vec::new();
    for crd in &crds {
        let names = &crd.spec.names;
        taken.push(names.plural.clone());
        taken.extend(names.singular.clone());
        taken.extend(names.categories.clone().unwrap_or_default());
    }
    taken.sort();
    taken.dedup();
    let mut all_short: Vec<String> = crds
        .iter()
        .flat_map(|c| c.spec.names.short_names.clone().unwrap_or_default())
        .collect();
    for name in &all_short {
        assert!(
            !taken.contains(name),
            "short name {name} is also a resource name or category"
        );
    }
    let count = all_short.len();
    all_short.sort();
    all_short.dedup();
    assert_eq!(all_short.len(), count, "a short name is used twice");
}
