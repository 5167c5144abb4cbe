//! cert-manager-managed TLS: whether cert-manager's API is installed (discovery of
//! `cert-manager.io/v1`, kind `Certificate`), and the `Certificate`s the operator emits for a
//! cluster whose `spec.tls` asks for them (`<c>-server`, `<c>-operator-client` when its issuer is
//! set, `<c>-peer`). cert-manager writes the Secrets; [`crate::tls`] reads them like the user's own.
//! Owns the Certificates (created, patched back when they drift); never touches the Secrets.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use api::labels;
use api::v1alpha2::{
    EtcdCluster, TlsRole, TlsSecret, TlsSecretSource, TlsSecrets, CERT_MANAGER_GROUP,
};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{json, Value};

use crate::naming::FIELD_MANAGER;
use crate::Error;

pub const VERSION: &str = "v1";
pub const CERTIFICATE_KIND: &str = "Certificate";
/// The annotation cert-manager puts on the Secrets it issues.
pub const CERTIFICATE_NAME_ANNOTATION: &str = "cert-manager.io/certificate-name";

/// How long an "absent" answer is trusted before discovery is asked again (only while a cluster
/// asks for cert-manager): installing cert-manager later is picked up without a restart.
const ABSENT_RECHECK: Duration = Duration::from_secs(10);

/// `cert-manager.io/v1` `Certificate`.
pub fn certificate_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CERT_MANAGER_GROUP, VERSION, CERTIFICATE_KIND),
        "certificates",
    )
}

/// Asks API discovery whether `cert-manager.io/v1` serves `Certificate`. A group version the
/// apiserver does not know (404) is "absent"; any other failure is an error.
pub async fn installed(client: &Client) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources(&format!("{CERT_MANAGER_GROUP}/{VERSION}"))
        .await
    {
        Ok(list) => Ok(list.resources.iter().any(|r| r.kind == CERTIFICATE_KIND)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// What the operator knows about cert-manager: probed at start-up, asked again (at most every
/// [`ABSENT_RECHECK`]) while it is absent and a cluster needs it. Once present it stays so.
#[derive(Debug, Default)]
pub struct Detection {
    state: Mutex<Option<(bool, Instant)>>,
}

impl Detection {
    /// Record a start-up probe.
    pub fn set(&self, present: bool) {
        if let Ok(mut s) = self.state.lock() {
            *s = Some((present, Instant::now()));
        }
    }

    /// Whether the last answer was "installed" (no API call).
    pub fn known_installed(&self) -> bool {
        self.state
            .lock()
            .ok()
            .and_then(|s| *s)
            .is_some_and(|(present, _)| present)
    }

    /// Whether cert-manager is installed, asking discovery when the last "absent" is stale.
    pub async fn installed(&self, client: &Client) -> Result<bool, kube::Error> {
        let known = self.state.lock().ok().and_then(|s| *s);
        match known {
            Some((true, _)) => return Ok(true),
            Some((false, at)) if at.elapsed() < ABSENT_RECHECK => return Ok(false),
            _ => {}
        }
        let present = installed(client).await?;
        if present {
            tracing::info!(
                "cert-manager.io/v1 Certificate is served; cert-manager TLS is available"
            );
        }
        self.set(present);
        Ok(present)
    }
}

/// The cert-manager usages of each Certificate (BEHAVIOUR.md's table).
fn usages(role: TlsRole) -> &'static [&'static str] {
    match role {
        TlsRole::OperatorClient => &["client auth", "digital signature", "key encipherment"],
        TlsRole::Server | TlsRole::Peer => &[
            "server auth",
            "client auth",
            "digital signature",
            "key encipherment",
        ],
    }
}

/// DNS SANs, each with and without the cluster domain (a resolver may answer either).
fn dns_names(role: TlsRole, cluster: &str, ns: &str, domain: &str) -> Vec<String> {
    let with_domain = |host: String| {
        let full = format!("{host}.{domain}");
        [host, full]
    };
    match role {
        TlsRole::Server => {
            let mut names: Vec<String> = [
                format!("*.{cluster}.{ns}.svc"),
                format!("{cluster}.{ns}.svc"),
                format!("{cluster}-client.{ns}.svc"),
            ]
            .into_iter()
            .flat_map(with_domain)
            .collect();
            names.push("localhost".to_string());
            names
        }
        TlsRole::Peer => with_domain(format!("*.{cluster}.{ns}.svc")).to_vec(),
        TlsRole::OperatorClient => Vec::new(),
    }
}

/// The `spec` of one Certificate.
pub fn certificate_spec(
    secret: &TlsSecret,
    cluster: &str,
    ns: &str,
    domain: &str,
) -> Option<Value> {
    let TlsSecretSource::CertManager { issuer, .. } = &secret.source else {
        return None;
    };
    let mut spec = json!({
        "secretName": secret.name,
        "usages": usages(secret.role),
        "issuerRef": {"name": issuer.name, "kind": issuer.kind.as_str(), "group": issuer.group},
    });
    let dns = dns_names(secret.role, cluster, ns, domain);
    if !dns.is_empty() {
        spec["dnsNames"] = json!(dns);
    }
    match secret.role {
        TlsRole::Server => spec["ipAddresses"] = json!(["127.0.0.1"]),
        // A client certificate has no SAN; cert-manager needs a subject (its webhook rejects a
        // Certificate with neither SANs nor a common name). Not a user etcd knows, so the
        // certificate grants nothing by its name if auth is enabled.
        TlsRole::OperatorClient => spec["commonName"] = json!("etcd-operator"),
        TlsRole::Peer => {}
    }
    Some(spec)
}

/// The Certificates `cluster` needs, as server-side-apply bodies: owned by the cluster
/// (controller), labelled with the cluster labels. Empty when no TLS comes from cert-manager.
pub fn certificates(cluster: &EtcdCluster, domain: &str) -> Result<Vec<Value>, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    let secrets = TlsSecrets::of(&name, cluster.spec.tls.as_ref());
    let owner = cluster.controller_owner_ref(&()).ok_or(Error::NoUid)?;
    let mut out = Vec::new();
    for secret in secrets.cert_manager() {
        let (Some(certificate), Some(spec)) = (
            secret.certificate(),
            certificate_spec(secret, &name, &ns, domain),
        ) else {
            continue;
        };
        out.push(json!({
            "apiVersion": format!("{CERT_MANAGER_GROUP}/{VERSION}"),
            "kind": CERTIFICATE_KIND,
            "metadata": {
                "name": certificate,
                "namespace": ns,
                "labels": labels::cluster_labels(&name),
                "ownerReferences": [owner],
            },
            "spec": spec,
        }));
    }
    Ok(out)
}

/// Whether `have` already matches the body `want` (spec, labels, controller owner).
fn up_to_date(have: &DynamicObject, want: &Value, owner_uid: &str) -> bool {
    let want_labels: BTreeMap<String, String> =
        serde_json::from_value(want["metadata"]["labels"].clone()).unwrap_or_default();
    let spec_same = match (have.data.get("spec"), want.get("spec")) {
        (Some(h), Some(w)) => w
            .as_object()
            .is_some_and(|w| w.iter().all(|(k, v)| h.get(k) == Some(v))),
        _ => false,
    };
    spec_same
        && crate::controller_uid(have).as_deref() == Some(owner_uid)
        && want_labels
            .iter()
            .all(|(k, v)| have.labels().get(k) == Some(v))
}

/// Create or patch (server-side apply) the cluster's Certificates. A Certificate of the same name
/// that another object controls is never taken over: that is a conflict for the user to resolve.
pub async fn ensure_certificates(
    client: &Client,
    cluster: &EtcdCluster,
    domain: &str,
) -> Result<(), Error> {
    let wanted = certificates(cluster, domain)?;
    if wanted.is_empty() {
        return Ok(());
    }
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let uid = cluster.uid().ok_or(Error::NoUid)?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &certificate_resource());
    for want in wanted {
        let name = want["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(have) = api.get_opt(&name).await? {
            if crate::controller_uid(&have).as_deref() != Some(uid.as_str()) {
                return Err(Error::Conflict(format!(
                    "Certificate {ns}/{name} exists but is not owned by EtcdCluster {}; it is never \
                     adopted (its Secret would be shared): delete or rename it",
                    cluster.name_any()
                )));
            }
            if up_to_date(&have, &want, &uid) {
                continue;
            }
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&want),
        )
        .await?;
        tracing::info!(cluster = %cluster.name_any(), namespace = %ns, certificate = %name, "applied Certificate");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{
        ClientCertManagerSpec, ClientTlsSpec, EtcdClusterSpec, IssuerKind, IssuerReference,
        PeerCertManagerSpec, PeerTlsSpec, TlsSpec,
    };

    fn cluster(operator_issuer: Option<IssuerReference>) -> EtcdCluster {
        let mut c = EtcdCluster::new(
            "db",
            EtcdClusterSpec {
                tls: Some(TlsSpec {
                    client: Some(ClientTlsSpec {
                        cert_manager: Some(ClientCertManagerSpec {
                            server_issuer_ref: IssuerReference::new("ca", IssuerKind::Issuer),
                            operator_client_issuer_ref: operator_issuer,
                        }),
                        ..Default::default()
                    }),
                    peer: Some(PeerTlsSpec {
                        secret_ref: None,
                        cert_manager: Some(PeerCertManagerSpec {
                            issuer_ref: IssuerReference::new("peer-ca", IssuerKind::ClusterIssuer),
                        }),
                    }),
                }),
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("u-1".into());
        c
    }

    fn by_name(certs: &[Value]) -> BTreeMap<String, Value> {
        certs
            .iter()
            .map(|c| {
                (
                    c["metadata"]["name"].as_str().unwrap().to_string(),
                    c.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn server_and_peer_certificates_follow_the_table() {
        let certs = by_name(&certificates(&cluster(None), "cozy.local").unwrap());
        assert_eq!(
            certs.keys().collect::<Vec<_>>(),
            ["db-peer", "db-server"],
            "no operator-client Certificate without its issuer"
        );
        let server = &certs["db-server"];
        assert_eq!(server["apiVersion"], "cert-manager.io/v1");
        assert_eq!(server["kind"], "Certificate");
        assert_eq!(server["spec"]["secretName"], "db-server-tls");
        assert_eq!(
            server["spec"]["dnsNames"],
            json!([
                "*.db.ns.svc",
                "*.db.ns.svc.cozy.local",
                "db.ns.svc",
                "db.ns.svc.cozy.local",
                "db-client.ns.svc",
                "db-client.ns.svc.cozy.local",
                "localhost"
            ])
        );
        assert_eq!(server["spec"]["ipAddresses"], json!(["127.0.0.1"]));
        assert_eq!(
            server["spec"]["usages"],
            json!([
                "server auth",
                "client auth",
                "digital signature",
                "key encipherment"
            ])
        );
        assert_eq!(
            server["spec"]["issuerRef"],
            json!({"name": "ca", "kind": "Issuer", "group": "cert-manager.io"})
        );
        assert_eq!(server["metadata"]["namespace"], "ns");
        assert_eq!(
            server["metadata"]["labels"]["app.kubernetes.io/instance"],
            "db"
        );
        assert_eq!(
            server["metadata"]["labels"]["etcd-operator.cozystack.io/cluster"],
            "db"
        );
        let owner = &server["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                &owner["kind"],
                &owner["name"],
                &owner["uid"],
                &owner["controller"]
            ),
            (
                &json!("EtcdCluster"),
                &json!("db"),
                &json!("u-1"),
                &json!(true)
            )
        );

        let peer = &certs["db-peer"];
        assert_eq!(peer["spec"]["secretName"], "db-peer-tls");
        assert_eq!(
            peer["spec"]["dnsNames"],
            json!(["*.db.ns.svc", "*.db.ns.svc.cozy.local"])
        );
        assert!(peer["spec"].get("ipAddresses").is_none());
        assert_eq!(
            peer["spec"]["usages"],
            json!([
                "server auth",
                "client auth",
                "digital signature",
                "key encipherment"
            ])
        );
        assert_eq!(
            peer["spec"]["issuerRef"],
            json!({"name": "peer-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
        );
    }

    #[test]
    fn operator_client_certificate_only_with_its_issuer_and_issuer_defaults_apply() {
        // The issuer kind and group defaults come from the API's serde defaults, as a user
        // writing only the name gets them.
        let issuer: IssuerReference = serde_json::from_value(json!({"name": "op-ca"})).unwrap();
        let certs = by_name(&certificates(&cluster(Some(issuer)), "cluster.local").unwrap());
        let op = &certs["db-operator-client"];
        assert_eq!(op["spec"]["secretName"], "db-operator-client-tls");
        assert_eq!(
            op["spec"]["usages"],
            json!(["client auth", "digital signature", "key encipherment"])
        );
        assert!(op["spec"].get("dnsNames").is_none() && op["spec"].get("ipAddresses").is_none());
        assert_eq!(op["spec"]["commonName"], "etcd-operator");
        assert_eq!(
            op["spec"]["issuerRef"],
            json!({"name": "op-ca", "kind": "Issuer", "group": "cert-manager.io"})
        );
        assert_eq!(
            certs["db-server"]["spec"]["dnsNames"][1],
            "*.db.ns.svc.cluster.local"
        );
    }

    #[test]
    fn byo_or_plaintext_clusters_get_no_certificate() {
        let mut c = cluster(None);
        c.spec.tls = None;
        assert!(certificates(&c, "cluster.local").unwrap().is_empty());
        c.spec.tls = Some(TlsSpec {
            client: Some(ClientTlsSpec {
                server_secret_ref: Some(api::v1alpha2::SecretReference::new("mine")),
                ..Default::default()
            }),
            peer: None,
        });
        assert!(certificates(&c, "cluster.local").unwrap().is_empty());
    }

    #[test]
    fn a_certificate_is_patched_only_when_it_drifted() {
        let c = cluster(None);
        let want = certificates(&c, "cluster.local").unwrap().remove(0);
        let mut have: DynamicObject = serde_json::from_value(want.clone()).unwrap();
        // cert-manager and the apiserver add fields of their own: still up to date.
        have.data["spec"]["privateKey"] = json!({"rotationPolicy": "Never"});
        have.data["status"] = json!({"conditions": []});
        assert!(up_to_date(&have, &want, "u-1"));
        have.data["spec"]["dnsNames"] = json!(["x"]);
        assert!(!up_to_date(&have, &want, "u-1"));
        let have: DynamicObject = serde_json::from_value(want.clone()).unwrap();
        assert!(!up_to_date(&have, &want, "another-uid"));
    }
}
