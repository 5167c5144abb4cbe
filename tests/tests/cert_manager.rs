//! Real cert-manager (controller and cainjector from the testbins cache) against a real control
//! plane: a CA Issuer bootstrapped from a self-signed one signs a serving certificate that chains
//! to it, the cainjector copies that CA into a webhook configuration, and the re-issue trigger
//! `cmctl renew` uses lands a new certificate in the Secret.
//!
//! Needs `ETCD_OPERATOR_TESTBINS` with the `cert-manager` and `cert-manager-crds` parts (see
//! docs/testing.md). One control plane and one cert-manager are shared by the tests of this
//! binary; each test works in its own namespace.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tests::env::cert_manager::{api_resource, condition_true};
use tests::env::{CertManager, ControlPlane};
use tests::harness;
use tests::OrPanic;
use tokio::sync::OnceCell;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::{parse_x509_pem, Pem};

/// Issuing a certificate takes cert-manager a few seconds; this is for a loaded CI machine.
const TIMEOUT: Duration = Duration::from_secs(90);

struct Env {
    cp: &'static ControlPlane,
    cm: &'static CertManager,
}

impl Env {
    fn client(&self) -> Client {
        self.cp.client().or_panic()
    }

    fn api(&self, ns: &str, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), ns, &api_resource(kind))
    }

    async fn create(&self, ns: &str, kind: &str, name: &str, spec: Value) {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }))
        .or_panic();
        self.api(ns, kind)
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating {kind} {ns}/{name}: {e}"));
    }

    /// Poll `probe` until it yields a value; on timeout, panic with `what`, the probe's last
    /// answer and whether cert-manager is still running (the log tails follow from the hook).
    async fn eventually<T, F, Fut>(&self, what: &str, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let described = format!(
            "{what} (cert-manager logs: {} and {})",
            self.cm.controller().log().display(),
            self.cm.cainjector().log().display()
        );
        harness::eventually(&described, TIMEOUT, || {
            let answer = probe();
            async move {
                let answer = answer.await;
                if answer.is_err() {
                    if let Err(e) = self.cm.check_running().and(self.cp.check_running()) {
                        panic!("waiting for {what}: {e}");
                    }
                }
                answer
            }
        })
        .await
    }

    /// Wait until `kind` `ns/name` has `Ready=True` and, for a Certificate, its issuance is
    /// over: readiness follows the Secret, and the issuing controller drops `Issuing` and counts
    /// the revision in a status write of its own just after. Returns the object.
    async fn ready(&self, ns: &str, kind: &str, name: &str) -> DynamicObject {
        let api = self.api(ns, kind);
        self.eventually(&format!("{kind} {ns}/{name} to be Ready"), || {
            let api = api.clone();
            async move {
                let object = api.get(name).await.map_err(|e| e.to_string())?;
                let settled = kind != "Certificate"
                    || (!condition_true(&object, "Issuing") && revision(&object).is_some());
                if condition_true(&object, "Ready") && settled {
                    Ok(object)
                } else {
                    Err(format!("status {}", object.data["status"]))
                }
            }
        })
        .await
    }

    async fn secret_key(&self, ns: &str, name: &str, key: &str) -> Vec<u8> {
        let secret = Api::<Secret>::namespaced(self.client(), ns)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("reading Secret {ns}/{name}: {e}"));
        secret
            .data
            .and_then(|mut data| data.remove(key))
            .map(|bytes| bytes.0)
            .unwrap_or_else(|| panic!("Secret {ns}/{name} has no {key}"))
    }

    /// A self-signed Issuer, a CA Certificate `ca` it signs (Secret `ca`), and a CA Issuer `ca`
    /// backed by that Secret, Ready. Returns the CA certificate (the Secret's `ca.crt`).
    async fn ca_issuer(&self, ns: &str) -> Vec<u8> {
        self.create(ns, "Issuer", "selfsigned", json!({"selfSigned": {}}))
            .await;
        self.create(
            ns,
            "Certificate",
            "ca",
            json!({
                "isCA": true,
                "commonName": format!("test CA {ns}"),
                "secretName": "ca",
                "privateKey": {"algorithm": "ECDSA", "size": 256},
                "issuerRef": {"name": "selfsigned", "kind": "Issuer"},
            }),
        )
        .await;
        self.ready(ns, "Certificate", "ca").await;
        self.create(ns, "Issuer", "ca", json!({"ca": {"secretName": "ca"}}))
            .await;
        self.ready(ns, "Issuer", "ca").await;
        self.secret_key(ns, "ca", "ca.crt").await
    }

    /// A Certificate `name` for `dns` from the CA Issuer, Ready (Secret `name`).
    async fn serving_certificate(&self, ns: &str, name: &str, dns: &str) {
        self.create(
            ns,
            "Certificate",
            name,
            json!({
                "secretName": name,
                "dnsNames": [dns],
                "privateKey": {"algorithm": "ECDSA", "size": 256},
                "issuerRef": {"name": "ca", "kind": "Issuer"},
            }),
        )
        .await;
        self.ready(ns, "Certificate", name).await;
    }
}

async fn env() -> Env {
    static CERT_MANAGER: OnceCell<Result<CertManager, String>> = OnceCell::const_new();
    let cp = ControlPlane::builder()
        .with_controller_manager()
        .shared()
        .await
        .or_panic();
    let cm = CERT_MANAGER
        .get_or_init(|| async { CertManager::start(cp).await.map_err(|e| e.to_string()) })
        .await
        .as_ref()
        .unwrap_or_else(|e| panic!("cert-manager did not start: {e}"));
    Env { cp, cm }
}

/// A Certificate's `status.revision`: how many times it has been issued.
fn revision(certificate: &DynamicObject) -> Option<u64> {
    certificate.data["status"]["revision"].as_u64()
}

fn pem(bytes: &[u8], what: &str) -> Pem {
    let (_, pem) = parse_x509_pem(bytes).unwrap_or_else(|e| panic!("{what} is not PEM: {e}"));
    assert_eq!(pem.label, "CERTIFICATE", "{what}");
    pem
}

fn x509<'a>(pem: &'a Pem, what: &str) -> X509Certificate<'a> {
    pem.parse_x509()
        .unwrap_or_else(|e| panic!("{what} is not an X.509 certificate: {e}"))
}

fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    cert.subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some(dns.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_ca(cert: &X509Certificate<'_>) -> bool {
    cert.basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|bc| bc.value.ca)
}

/// The leaf in `tls_crt` names `dns` and is signed by `ca_crt`'s key; returns the leaf's serial.
fn assert_issued_by(tls_crt: &[u8], ca_crt: &[u8], dns: &str) -> String {
    let leaf_pem = pem(tls_crt, "tls.crt");
    let leaf = x509(&leaf_pem, "tls.crt");
    let ca_pem = pem(ca_crt, "the CA's ca.crt");
    let ca = x509(&ca_pem, "the CA's ca.crt");
    assert!(
        is_ca(&ca),
        "the CA certificate is not a CA: {}",
        ca.subject()
    );
    assert!(!is_ca(&leaf), "the serving certificate is a CA");
    assert_eq!(
        dns_names(&leaf),
        vec![dns.to_string()],
        "the serving certificate's DNS SANs"
    );
    assert_eq!(
        leaf.issuer(),
        ca.subject(),
        "the serving certificate's issuer is not the CA"
    );
    leaf.verify_signature(Some(ca.public_key()))
        .unwrap_or_else(|e| panic!("the serving certificate is not signed by the CA: {e}"));
    leaf.tbs_certificate.raw_serial_as_string()
}

#[tokio::test]
async fn ca_issuer_signs_a_serving_certificate_that_chains_to_the_ca() {
    let env = env().await;
    let ns = env.cp.namespace("cm-issue").await.or_panic();
    let ca_crt = env.ca_issuer(&ns).await;

    // The CA is the self-signed Issuer's work: a CA certificate signed by its own key.
    let ca_pem = pem(&ca_crt, "ca/ca.crt");
    let ca = x509(&ca_pem, "ca/ca.crt");
    assert!(is_ca(&ca), "ca/ca.crt is not a CA certificate");
    ca.verify_signature(None)
        .unwrap_or_else(|e| panic!("ca/ca.crt is not self-signed: {e}"));

    let dns = format!("svc.{ns}.svc");
    env.serving_certificate(&ns, "serving", &dns).await;
    let tls_crt = env.secret_key(&ns, "serving", "tls.crt").await;
    assert_issued_by(&tls_crt, &ca_crt, &dns);
    // The serving Secret carries the CA that signed it, as clients need it.
    assert_eq!(
        env.secret_key(&ns, "serving", "ca.crt").await,
        ca_crt,
        "serving/ca.crt is not the CA"
    );
    // And its key is the one the certificate is for.
    assert!(
        !env.secret_key(&ns, "serving", "tls.key").await.is_empty(),
        "serving/tls.key is empty"
    );
}

#[tokio::test]
async fn cainjector_fills_the_webhook_ca_bundle_from_the_certificate() {
    let env = env().await;
    let ns = env.cp.namespace("cm-inject").await.or_panic();
    let ca_crt = env.ca_issuer(&ns).await;
    env.serving_certificate(&ns, "webhook", &format!("webhook.{ns}.svc"))
        .await;

    // A webhook that never matches anything (and is ignored if it did), so it cannot disturb the
    // other tests; only its caBundle matters.
    let name = format!("{ns}-inject");
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": {"cert-manager.io/inject-ca-from": format!("{ns}/webhook")},
        },
        "webhooks": [{
            "name": "validate.cert-manager-test.example.com",
            "clientConfig": {"service": {"namespace": ns, "name": "webhook", "path": "/validate"}},
            "rules": [{
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["configmaps"],
            }],
            "objectSelector": {"matchLabels": {"cert-manager-test.example.com/never": "matched"}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    }))
    .or_panic();
    let api = Api::<ValidatingWebhookConfiguration>::all(env.client());
    let created = api.create(&PostParams::default(), &config).await.or_panic();
    assert!(
        created.webhooks.unwrap_or_default()[0]
            .client_config
            .ca_bundle
            .as_ref()
            .is_none_or(|b| b.0.is_empty()),
        "the caBundle was set before the cainjector ran"
    );

    let bundle = env
        .eventually(
            &format!("the cainjector to fill ValidatingWebhookConfiguration {name}'s caBundle"),
            || {
                let api = api.clone();
                let name = name.clone();
                async move {
                    let config = api.get(&name).await.map_err(|e| e.to_string())?;
                    config
                        .webhooks
                        .unwrap_or_default()
                        .first()
                        .and_then(|w| w.client_config.ca_bundle.clone())
                        .map(|b| b.0)
                        .filter(|b| !b.is_empty())
                        .ok_or_else(|| "no caBundle yet".to_string())
                }
            },
        )
        .await;
    assert_eq!(
        String::from_utf8_lossy(&bundle),
        String::from_utf8_lossy(&ca_crt),
        "the injected caBundle is not the CA that signed {ns}/webhook"
    );

    api.delete(&name, &DeleteParams::default()).await.or_panic();
}

#[tokio::test]
async fn issuing_condition_reissues_the_certificate_with_a_new_serial() {
    let env = env().await;
    let ns = env.cp.namespace("cm-renew").await.or_panic();
    let ca_crt = env.ca_issuer(&ns).await;
    let dns = format!("svc.{ns}.svc");
    env.serving_certificate(&ns, "serving", &dns).await;
    let first = assert_issued_by(
        &env.secret_key(&ns, "serving", "tls.crt").await,
        &ca_crt,
        &dns,
    );

    // What `cmctl renew` does: set Issuing=True through the status subresource; the certificates
    // trigger controller then issues anew although the certificate is far from expiry.
    // cert-manager may still be writing the status it just issued (a new resourceVersion): on a
    // conflict, read it again and retry, as `cmctl renew` does.
    let api = env.api(&ns, "Certificate");
    let mut attempt = 0;
    let revision_before = loop {
        attempt += 1;
        let mut certificate = api.get("serving").await.or_panic();
        let revision_before = revision(&certificate).expect("an issued certificate has a revision");
        let generation = certificate.metadata.generation;
        let conditions = certificate.data["status"]["conditions"]
            .as_array_mut()
            .expect("a Ready certificate has conditions");
        conditions.retain(|c| c["type"] != "Issuing");
        conditions.push(json!({
            "type": "Issuing",
            "status": "True",
            "reason": "ManuallyTriggered",
            "message": "Certificate re-issuance manually triggered",
            "lastTransitionTime": Timestamp::now().to_string(),
            "observedGeneration": generation,
        }));
        match api
            .replace_status("serving", &PostParams::default(), &certificate)
            .await
        {
            Ok(_) => break revision_before,
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 10 => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("setting Issuing=True on Certificate serving: {e}"),
        }
    };

    let secrets = Api::<Secret>::namespaced(env.client(), &ns);
    let second = env
        .eventually("a new certificate in Secret serving", || {
            let secrets = secrets.clone();
            let first = first.clone();
            let ca_crt = ca_crt.clone();
            let dns = dns.clone();
            async move {
                let secret = secrets.get("serving").await.map_err(|e| e.to_string())?;
                let tls_crt = secret
                    .data
                    .and_then(|mut d| d.remove("tls.crt"))
                    .ok_or("no tls.crt")?;
                let serial = assert_issued_by(&tls_crt.0, &ca_crt, &dns);
                if serial == first {
                    Err(format!("still serial {serial}"))
                } else {
                    Ok(serial)
                }
            }
        })
        .await;
    assert_ne!(first, second);
    let certificate = env.ready(&ns, "Certificate", "serving").await;
    assert_eq!(
        revision(&certificate),
        Some(revision_before + 1),
        "the re-issue is not counted as one more revision: {}",
        certificate.data["status"]
    );
}
