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
}
