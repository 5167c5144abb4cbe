//! The cluster's two Services: headless `<cluster>` for per-member DNS (peers must resolve each
//! other before they are Ready, hence publishNotReadyAddresses) and `<cluster>-client`.

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::EtcdCluster;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{cluster_metadata, BuildError};
use crate::naming::{CLIENT_PORT, PEER_PORT};

fn service_port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".to_string()),
        ..Default::default()
    }
}

fn selector(cluster: &EtcdCluster) -> BTreeMap<String, String> {
    BTreeMap::from([(labels::CLUSTER.to_string(), cluster.name_any())])
}

pub fn headless_service(cluster: &EtcdCluster) -> Result<Service, BuildError> {
    Ok(Service {
        metadata: cluster_metadata(cluster, labels::headless_service_name(&cluster.name_any()))?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector(cluster)),
            ports: Some(vec![
                service_port("client", CLIENT_PORT),
                service_port("peer", PEER_PORT),
            ]),
            ..Default::default()
        }),
        status: None,
    })
}

pub fn client_service(cluster: &EtcdCluster) -> Result<Service, BuildError> {
    Ok(Service {
        metadata: cluster_metadata(cluster, labels::client_service_name(&cluster.name_any()))?,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            selector: Some(selector(cluster)),
            ports: Some(vec![service_port("client", CLIENT_PORT)]),
            ..Default::default()
        }),
        status: None,
    })
}

/// Whether an existing Service has drifted from `want` in anything the operator sets: selector,
/// ports, `publishNotReadyAddresses`, type, or one of its labels and annotations. Fields the
/// apiserver or others fill in (clusterIP, ipFamilies, extra labels) are not drift.
pub fn drifted(have: &Service, want: &Service) -> bool {
    /// name, port, targetPort, protocol
    type PortKey<'a> = (
        Option<&'a str>,
        i32,
        Option<&'a IntOrString>,
        Option<&'a str>,
    );
    fn ports(s: &ServiceSpec) -> Vec<PortKey<'_>> {
        s.ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.name.as_deref(),
                    p.port,
                    p.target_port.as_ref(),
                    p.protocol.as_deref(),
                )
            })
            .collect()
    }
    fn contains(
        have: Option<&BTreeMap<String, String>>,
        want: Option<&BTreeMap<String, String>>,
    ) -> bool {
        want.into_iter()
            .flatten()
            .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
    }
    let (Some(h), Some(w)) = (&have.spec, &want.spec) else {
        return true;
    };
    h.selector != w.selector
        || ports(h) != ports(w)
        || (w.publish_not_ready_addresses.is_some()
            && h.publish_not_ready_addresses != w.publish_not_ready_addresses)
        || (w.type_.is_some() && h.type_ != w.type_)
        || !contains(have.metadata.labels.as_ref(), want.metadata.labels.as_ref())
        || !contains(
            have.metadata.annotations.as_ref(),
            want.metadata.annotations.as_ref(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::tests::cluster;

    #[test]
    fn headless_service_publishes_not_ready_members_on_client_and_peer_ports() {
        let svc = headless_service(&cluster("my-etcd", "n")).unwrap();
        assert_eq!(svc.metadata.name.as_deref(), Some("my-etcd"));
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let ports: Vec<_> = spec.ports.unwrap().iter().map(|p| p.port).collect();
        assert_eq!(ports, [2379, 2380]);
        assert_eq!(spec.selector.unwrap()[labels::CLUSTER], "my-etcd");
        assert_eq!(
            svc.metadata.owner_references.unwrap()[0].kind,
            "EtcdCluster"
        );
    }

    #[test]
    fn client_service_exposes_only_the_client_port() {
        let svc = client_service(&cluster("my-etcd", "n")).unwrap();
        assert_eq!(svc.metadata.name.as_deref(), Some("my-etcd-client"));
        let spec = svc.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(
            spec.ports
                .unwrap()
                .iter()
                .map(|p| p.port)
                .collect::<Vec<_>>(),
            [2379]
        );
    }

    #[test]
    fn drift_is_what_the_operator_sets_and_nothing_the_apiserver_adds() {
        let want = client_service(&cluster("my-etcd", "n")).unwrap();
        let mut have = want.clone();
        // What the apiserver fills in, plus a label someone else added: no drift.
        let spec = have.spec.as_mut().unwrap();
        spec.cluster_ip = Some("10.0.0.7".into());
        spec.ip_families = Some(vec!["IPv4".into()]);
        spec.session_affinity = Some("None".into());
        have.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("team".into(), "db".into());
        assert!(!drifted(&have, &want));

        let mut selector = have.clone();
        selector.spec.as_mut().unwrap().selector =
            Some(BTreeMap::from([("app".to_string(), "other".to_string())]));
        assert!(drifted(&selector, &want));
        let mut port = have.clone();
        port.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 2399;
        assert!(drifted(&port, &want));
        let mut label = have.clone();
        label
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(labels::CLUSTER);
        assert!(drifted(&label, &want));

        let headless = headless_service(&cluster("my-etcd", "n")).unwrap();
        let mut unpublished = headless.clone();
        unpublished
            .spec
            .as_mut()
            .unwrap()
            .publish_not_ready_addresses = Some(false);
        assert!(drifted(&unpublished, &headless));
        assert!(!drifted(&headless, &headless));
    }
}
