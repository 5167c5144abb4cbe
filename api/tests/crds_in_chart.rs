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
            .map(|c| c.name.clone())
            .collect()
    };
    assert_eq!(
        columns("EtcdCluster"),
        ["Version", "Replicas", "Ready", "Age"]
    );
    assert_eq!(
        columns("EtcdMember"),
        ["Cluster", "Version", "Running", "Ready", "Age"]
    );
    assert_eq!(columns("EtcdSnapshot"), ["Cluster", "Phase", "Age"]);
    assert_eq!(
        columns("EtcdDefrag"),
        ["Cluster", "Phase", "Defragmented", "Age"]
    );
    assert_eq!(
        columns("EtcdRecovery"),
        ["Cluster", "Phase", "Step", "Member", "Snapshot", "Age"]
    );
}
