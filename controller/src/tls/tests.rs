use certs::mint::TestCa;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::ByteString;

use super::*;

fn secret(name: &str, rv: &str, keys: &[(&str, &str)]) -> ReadSecret {
    ReadSecret {
        name: name.to_string(),
        data: Some(
            keys.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        resource_version: rv.to_string(),
        origin: None,
        certificate: None,
        ca_changed: None,
    }
}

#[test]
fn client_material_takes_trust_from_the_server_secret_and_identity_from_the_operator_secret() {
    let ca = TestCa::new("etcd-ca").unwrap();
    let server = ca.server_cert(&["*.c.ns.svc"]).unwrap();
    let op = ca.client_cert("etcd-operator", &[]).unwrap();
    let server_secret = secret(
        "c-server-tls",
        "7",
        &[
            (TLS_CRT, &server.cert_pem),
            (TLS_KEY, &server.key_pem),
            (CA_CRT, ca.cert_pem()),
        ],
    );
    let op_secret = secret(
        "c-op",
        "9",
        &[(TLS_CRT, &op.cert_pem), (TLS_KEY, &op.key_pem)],
    );
    let tls = client_tls("ns", &server_secret, Some(&op_secret)).unwrap();
    assert_eq!(tls.ca_pem, ca.cert_pem().as_bytes());
    assert_eq!(
        tls.identity,
        Some((
            op.cert_pem.clone().into_bytes(),
            op.key_pem.clone().into_bytes()
        ))
    );
    assert_eq!(tls.revision, "c-server-tls@7/c-op@9");
    // Server TLS only: no identity, and a new resourceVersion is a new revision.
    let mut renewed = server_secret.clone();
    renewed.resource_version = "8".into();
    let tls = client_tls("ns", &renewed, None).unwrap();
    assert_eq!(tls.identity, None);
    assert_eq!(tls.revision, "c-server-tls@8");
}

#[test]
fn missing_or_broken_secrets_are_named_with_the_field_and_the_keys() {
    let err = client_tls("ns", &ReadSecret::absent("c-server-tls"), None).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("ns/c-server-tls")
            && msg.contains("spec.tls.client.serverSecretRef")
            && msg.contains("tls.crt, tls.key, ca.crt"),
        "{msg}"
    );
    assert!(err.is_user_fixable());

    let ca = TestCa::new("etcd-ca").unwrap();
    let no_ca = secret("c-peer", "1", &[(TLS_CRT, ca.cert_pem()), (TLS_KEY, "x")]);
    let msg = check_mounted("ns", &no_ca, Role::Peer)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("no key tls.key") || msg.contains("cannot be used"),
        "{msg}"
    );
    let garbage = secret(
        "c-peer",
        "1",
        &[(TLS_CRT, "not pem"), (TLS_KEY, "x"), (CA_CRT, "y")],
    );
    let msg = check_mounted("ns", &garbage, Role::Peer)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("ns/c-peer")
            && msg.contains("spec.tls.peer.secretRef")
            && msg.contains("tls.crt"),
        "{msg}"
    );
    let op = secret("c-op", "1", &[(TLS_CRT, ca.cert_pem())]);
    let server = ca.server_cert(&["x"]).unwrap();
    let server_secret = secret(
        "s",
        "1",
        &[
            (TLS_CRT, &server.cert_pem),
            (TLS_KEY, &server.key_pem),
            (CA_CRT, ca.cert_pem()),
        ],
    );
    let msg = client_tls("ns", &server_secret, Some(&op))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("ns/c-op") && msg.contains("no key tls.key"),
        "{msg}"
    );
}

#[test]
fn a_cert_manager_secret_not_issued_yet_is_a_wait_naming_the_certificate() {
    use api::v1alpha2::{IssuerKind, IssuerReference, TlsSecretSource};
    let source = TlsSecret {
        role: Role::Server,
        name: "db-server-tls".into(),
        source: TlsSecretSource::CertManager {
            certificate: "db-server".into(),
            issuer: IssuerReference::new("ca", IssuerKind::Issuer),
        },
    };
    let err = client_tls("ns", &ReadSecret::absent("db-server-tls").of(&source), None).unwrap_err();
    assert!(err.is_waiting_for_certificate() && err.is_user_fixable());
    let msg = err.to_string();
    assert!(
        msg.contains("ns/db-server-tls")
            && msg.contains("Certificate db-server")
            && msg.contains("kubectl describe certificate -n ns db-server"),
        "{msg}"
    );
    // Issued but without the CA (an issuer that does not fill ca.crt): named as cert-manager's.
    let ca = TestCa::new("etcd-ca").unwrap();
    let server = ca.server_cert(&["x"]).unwrap();
    let issued = secret(
        "db-server-tls",
        "1",
        &[(TLS_CRT, &server.cert_pem), (TLS_KEY, &server.key_pem)],
    )
    .of(&source);
    let err = client_tls("ns", &issued, None).unwrap_err();
    assert!(!err.is_waiting_for_certificate());
    let msg = err.to_string();
    assert!(
        msg.contains("issued by cert-manager for Certificate db-server")
            && msg.contains("no key ca.crt"),
        "{msg}"
    );
}

fn tls_secret(name: &str, leaf: &certs::mint::MintedCert, ca_pem: &str) -> ReadSecret {
    secret(
        name,
        "1",
        &[
            (TLS_CRT, &leaf.cert_pem),
            (TLS_KEY, &leaf.key_pem),
            (CA_CRT, ca_pem),
        ],
    )
}

#[test]
fn wrong_sans_and_foreign_cas_are_named_with_the_secret_and_the_fix() {
    let ca = TestCa::new("etcd-ca").unwrap();
    let other = TestCa::new("other-ca").unwrap();
    let good = ca
        .server_cert(&["*.c.ns.svc", "*.c.ns.svc.cluster.local"])
        .unwrap();
    let hosts = vec!["c-abcde.c.ns.svc".to_string()];
    let read = |server: ReadSecret, op: Option<ReadSecret>, peer: Option<ReadSecret>| Read {
        server: Some(server),
        operator_client: op,
        peer,
    };
    let server = tls_secret("c-server", &good, ca.cert_pem());
    let peer = tls_secret("c-peer", &good, ca.cert_pem());
    let op_leaf = ca.client_cert("root", &[]).unwrap();
    let op = secret(
        "c-op",
        "1",
        &[(TLS_CRT, &op_leaf.cert_pem), (TLS_KEY, &op_leaf.key_pem)],
    );
    check_chains(
        "ns",
        "c",
        &read(server.clone(), Some(op.clone()), Some(peer.clone())),
        &hosts,
    )
    .unwrap();

    let wrong_names = ca.server_cert(&["*.other.ns.svc"]).unwrap();
    let msg = check_chains(
        "ns",
        "c",
        &read(
            tls_secret("c-server", &wrong_names, ca.cert_pem()),
            None,
            None,
        ),
        &hosts,
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("ns/c-server")
            && msg.contains("spec.tls.client.serverSecretRef")
            && msg.contains("not valid for c-abcde.c.ns.svc")
            && msg.contains("*.c.ns.svc and"),
        "{msg}"
    );

    let msg = check_chains(
        "ns",
        "c",
        &read(
            server.clone(),
            None,
            Some(tls_secret("c-peer", &good, other.cert_pem())),
        ),
        &hosts,
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("ns/c-peer")
            && msg.contains("spec.tls.peer.secretRef")
            && msg.contains("not signed by a CA in the trust bundle")
            && msg.contains("ca.crt"),
        "{msg}"
    );
    assert!(!msg.contains("  "), "a run of spaces in the message: {msg}");

    let foreign_op = other.client_cert("root", &[]).unwrap();
    let op = secret(
        "c-op",
        "1",
        &[
            (TLS_CRT, &foreign_op.cert_pem),
            (TLS_KEY, &foreign_op.key_pem),
        ],
    );
    let msg = check_chains("ns", "c", &read(server, Some(op), None), &hosts)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("ns/c-op") && msg.contains("Secret ns/c-server ca.crt"),
        "{msg}"
    );
    assert!(!msg.contains("  "), "a run of spaces in the message: {msg}");
}

#[test]
fn the_trust_bundle_fingerprint_follows_the_cas_only() {
    let ca = TestCa::new("etcd-ca").unwrap();
    let new_ca = TestCa::new("new-ca").unwrap();
    let leaf = ca.server_cert(&["*.c.ns.svc"]).unwrap();
    let renewed = ca.server_cert(&["*.c.ns.svc"]).unwrap();
    let peer = tls_secret("p", &leaf, ca.cert_pem());
    let before = trust_bundle(None, Some(&peer)).unwrap();
    assert_eq!(before.len(), 16);
    // A renewed leaf from the same CA: no change.
    assert_eq!(
        trust_bundle(None, Some(&tls_secret("p", &renewed, ca.cert_pem()))),
        Some(before.clone())
    );
    // The same CA re-encoded (other line breaks): no change.
    let reencoded = ca.cert_pem().replace('\n', "\r\n");
    assert_eq!(
        trust_bundle(None, Some(&tls_secret("p", &leaf, &reencoded))),
        Some(before.clone())
    );
    // A new CA in the bundle: a change.
    let bundle = format!("{}{}", ca.cert_pem(), new_ca.cert_pem());
    assert_ne!(
        trust_bundle(None, Some(&tls_secret("p", &leaf, &bundle))),
        Some(before.clone())
    );
    // The server CA counts only when given (client mTLS).
    assert_ne!(trust_bundle(Some(&peer), Some(&peer)), Some(before));
    assert_eq!(trust_bundle(None, None), None);
}

#[test]
fn the_ca_trust_lists_the_bundle_cas_and_the_ca_each_presented_certificate_chains_to() {
    let old = TestCa::new("old-ca").unwrap();
    let new = TestCa::new("new-ca").unwrap();
    let fp = |ca: &TestCa| ca_fingerprint(ca.cert_der());
    let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
    let peer_leaf = new.server_cert(&["*.c.ns.svc"]).unwrap();
    let op_leaf = old.client_cert("root", &[]).unwrap();
    let server = tls_secret(
        "c-server",
        &old.server_cert(&["x"]).unwrap(),
        old.cert_pem(),
    );
    let op = secret(
        "c-op",
        "1",
        &[(TLS_CRT, &op_leaf.cert_pem), (TLS_KEY, &op_leaf.key_pem)],
    );
    let peer = tls_secret("c-peer", &peer_leaf, &bundle);
    let t = ca_trust("ns", Some(&server), Some(&op), Some(&peer));
    assert_eq!(t.bundles.peer, [fp(&old), fp(&new)].into_iter().collect());
    assert_eq!(t.bundles.client, [fp(&old)].into_iter().collect());
    assert_eq!(t.presented.len(), 2);
    assert_eq!(t.presented[0].bundle, Bundle::Peer);
    assert_eq!(t.presented[0].secret, "ns/c-peer");
    assert_eq!(t.presented[0].origin, "spec.tls.peer.secretRef");
    assert_eq!(t.presented[0].anchors, [fp(&new)].into_iter().collect());
    assert_eq!(t.presented[1].bundle, Bundle::Client);
    assert_eq!(t.presented[1].secret, "ns/c-op");
    assert_eq!(t.presented[1].anchors, [fp(&old)].into_iter().collect());
    // Server TLS without mTLS: etcd loads no client bundle, the operator presents nothing.
    let t = ca_trust("ns", Some(&server), None, Some(&peer));
    assert!(t.bundles.client.is_empty());
    assert_eq!(t.presented.len(), 1);
}

#[test]
fn the_ca_change_time_is_the_latest_write_of_a_manager_owning_ca_crt() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
    let at = |s: i64| Timestamp::from_second(s).unwrap();
    let entry = |fields: serde_json::Value, s: i64| ManagedFieldsEntry {
        fields_v1: Some(FieldsV1(fields)),
        time: Some(Time(at(s))),
        ..Default::default()
    };
    let mut secret = Secret::default();
    secret.metadata.creation_timestamp = Some(Time(at(10)));
    assert_eq!(ca_changed(&secret), Some(at(10)));
    secret.metadata.managed_fields = Some(vec![
        entry(
            serde_json::json!({"f:data": {".": {}, "f:ca.crt": {}}}),
            100,
        ),
        entry(serde_json::json!({"f:metadata": {"f:labels": {}}}), 500),
    ]);
    assert_eq!(ca_changed(&secret), Some(at(100)));
    // A later write of ca.crt through stringData (kubectl apply of a stringData manifest).
    secret.metadata.managed_fields.as_mut().unwrap().push(entry(
        serde_json::json!({"f:stringData": {"f:ca.crt": {}}}),
        300,
    ));
    assert_eq!(ca_changed(&secret), Some(at(300)));
    // No entry names ca.crt: the latest write of any manager.
    secret.metadata.managed_fields = Some(vec![entry(serde_json::json!({}), 200)]);
    assert_eq!(ca_changed(&secret), Some(at(200)));
}
