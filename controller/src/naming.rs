//! DNS names and URLs of members, as etcd advertises them and peers dial them.

/// Per-member DNS name through the headless Service, without the cluster-domain suffix:
/// `<member>.<cluster>.<ns>.svc`.
pub fn member_host(member: &str, cluster: &str, namespace: &str) -> String {
    format!("{member}.{cluster}.{namespace}.svc")
}

fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

/// The headless Service `member` resolves under: the legacy one of a member adopted from the
/// aenix operator (see [`api::labels::HEADLESS_SERVICE_ANNOTATION`]), else the cluster's own.
pub fn member_service(member: &api::v1alpha2::EtcdMember) -> String {
    api::labels::member_service_name(
        kube::ResourceExt::annotations(member),
        &member.spec.cluster_name,
    )
}

pub const CLIENT_PORT: i32 = 2379;
pub const PEER_PORT: i32 = 2380;
pub const METRICS_PORT: i32 = 2381;

pub fn peer_url(member: &str, cluster: &str, namespace: &str, tls: bool) -> String {
    format!(
        "{}://{}:{PEER_PORT}",
        scheme(tls),
        member_host(member, cluster, namespace)
    )
}

pub fn client_url(member: &str, cluster: &str, namespace: &str, tls: bool) -> String {
    format!(
        "{}://{}:{CLIENT_PORT}",
        scheme(tls),
        member_host(member, cluster, namespace)
    )
}

/// One `--initial-cluster` entry: `<name>=<peer url>`.
pub fn initial_cluster_entry(member: &str, cluster: &str, namespace: &str, tls: bool) -> String {
    format!("{member}={}", peer_url(member, cluster, namespace, tls))
}

/// The field manager of every server-side apply and status write the controller makes.
pub const FIELD_MANAGER: &str = "etcd-operator";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_use_per_member_dns_without_cluster_domain() {
        assert_eq!(
            peer_url("my-etcd-abcde", "my-etcd", "ns1", false),
            "http://my-etcd-abcde.my-etcd.ns1.svc:2380"
        );
        assert_eq!(client_url("m", "c", "n", true), "https://m.c.n.svc:2379");
        assert_eq!(
            initial_cluster_entry("m", "c", "n", true),
            "m=https://m.c.n.svc:2380"
        );
    }
}
