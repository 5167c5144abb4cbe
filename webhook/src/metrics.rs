//! What `/metrics` shows (Prometheus text format, prefix `etcd_operator_webhook_`):
//!
//! | metric | labels |
//! |---|---|
//! | `admission_requests_total` | `webhook` (validate/mutate), `operation`, `kind` (ours or `other`), `allowed` |
//! | `admission_duration_seconds` (histogram) | `webhook` |
//! | `admission_malformed_requests_total` | `webhook`, `reason` (body_too_large, not_json, …) |
//! | `tls_handshake_failures_total` | — |
//! | `certificate_reloads_total`, `certificate_reload_failures_total` | — |
//! | `certificate_loaded` (gauge 0/1), `certificate_last_reload_timestamp_seconds` | — |
//! | `certificate_expiry_timestamp_seconds` (absent while no certificate is loaded) | — |
//!
//! Every label value comes from a fixed set: the admission port has no client authentication,
//! so a value copied from a request body would let anyone who reaches it create series without
//! bound.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use certs::{CertResolver, ReloadStats};
use kube::core::GroupVersionKind;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Which of the two admission endpoints served a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Validate,
    Mutate,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Validate => "validate",
            Endpoint::Mutate => "mutate",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    webhook: &'static str,
    operation: &'static str,
    kind: &'static str,
    allowed: bool,
}

/// The kinds the webhook judges; any other kind (or group) is counted as `other`.
const KINDS: [&str; 7] = [
    "EtcdCluster",
    "EtcdMember",
    "EtcdSnapshot",
    "EtcdDefrag",
    "EtcdRecovery",
    "EtcdSnapshotSchedule",
    "EtcdDefragPolicy",
];

/// The `kind` label of a reviewed object's group and kind.
pub fn kind_label(group: &str, kind: &str) -> &'static str {
    if group != api::v1alpha2::GROUP {
        return "other";
    }
    KINDS
        .into_iter()
        .find(|known| *known == kind)
        .unwrap_or("other")
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MalformedLabels {
    webhook: &'static str,
    reason: &'static str,
}

fn latency_histogram() -> Histogram {
    // 50 µs … ~1.6 s: admission is CPU-only, so the interesting range is sub-millisecond.
    Histogram::new(exponential_buckets(0.00005, 2.0, 16))
}

/// The webhook's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<EndpointLabels, Histogram, fn() -> Histogram>,
    malformed: Family<MalformedLabels, Counter>,
    handshake_failures: Counter,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Reads the certificate reloader's counters at scrape time.
#[derive(Debug)]
struct CertificateCollector {
    stats: Arc<ReloadStats>,
    resolver: Arc<CertResolver>,
}

impl Collector for CertificateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let reloads = ConstCounter::new(self.stats.reloads());
        reloads.encode(encoder.encode_descriptor(
            "certificate_reloads",
            "Serving certificates loaded from the mounted Secret (the first one included)",
            None,
            reloads.metric_type(),
        )?)?;
        let failures = ConstCounter::new(self.stats.failures());
        failures.encode(encoder.encode_descriptor(
            "certificate_reload_failures",
            "New certificate/key contents refused (unreadable, unparsable, mismatched, expired or not valid yet); the previous certificate kept serving",
            None,
            failures.metric_type(),
        )?)?;
        let loaded = ConstGauge::new(i64::from(self.resolver.is_loaded()));
        loaded.encode(encoder.encode_descriptor(
            "certificate_loaded",
            "1 when a serving certificate is loaded",
            None,
            loaded.metric_type(),
        )?)?;
        let last = ConstGauge::new(
            i64::try_from(self.stats.last_reload_unix_seconds()).unwrap_or(i64::MAX),
        );
        last.encode(encoder.encode_descriptor(
            "certificate_last_reload_timestamp_seconds",
            "Unix time the current serving certificate was loaded (0 = never)",
            None,
            last.metric_type(),
        )?)?;
        // The certificate handshakes get now, not the file on disk: a renewal the reloader
        // refused leaves the old notAfter here, which is what the expiry alert must see.
        if let Some(not_after) = self.resolver.not_after() {
            let expiry = ConstGauge::new(not_after);
            expiry.encode(encoder.encode_descriptor(
                "certificate_expiry_timestamp_seconds",
                "Unix time the serving certificate handshakes get now stops being valid (its notAfter)",
                None,
                expiry.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

impl Metrics {
    pub fn new(stats: Arc<ReloadStats>, resolver: Arc<CertResolver>) -> Self {
        let mut registry = Registry::with_prefix("etcd_operator_webhook");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission reviews answered, by webhook, operation, kind and verdict",
            requests.clone(),
        );
        let duration = Family::<EndpointLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        registry.register(
            "admission_duration_seconds",
            "Time to read, judge and answer an admission review",
            duration.clone(),
        );
        let malformed = Family::<MalformedLabels, Counter>::default();
        registry.register(
            "admission_malformed_requests",
            "Requests that were not a readable admission.k8s.io/v1 AdmissionReview",
            malformed.clone(),
        );
        let handshake_failures = Counter::default();
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed or timed out",
            handshake_failures.clone(),
        );
        registry.register_collector(Box::new(CertificateCollector { stats, resolver }));
        Self {
            registry,
            requests,
            duration,
            malformed,
            handshake_failures,
        }
    }

    /// Count an answered review of an object of `kind` (see [`kind_label`]).
    pub fn answered(
        &self,
        endpoint: Endpoint,
        operation: &'static str,
        kind: &GroupVersionKind,
        allowed: bool,
        elapsed: Duration,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                webhook: endpoint.as_str(),
                operation,
                kind: kind_label(&kind.group, &kind.kind),
                allowed,
            })
            .inc();
        self.observe_duration(endpoint, elapsed);
    }

    /// Count a request that was not a readable review.
    pub fn malformed(&self, endpoint: Endpoint, reason: &'static str, elapsed: Duration) {
        self.malformed
            .get_or_create(&MalformedLabels {
                webhook: endpoint.as_str(),
                reason,
            })
            .inc();
        self.observe_duration(endpoint, elapsed);
    }

    fn observe_duration(&self, endpoint: Endpoint, elapsed: Duration) {
        self.duration
            .get_or_create(&EndpointLabels {
                webhook: endpoint.as_str(),
            })
            .observe(elapsed.as_secs_f64());
    }

    pub fn handshake_failed(&self) {
        self.handshake_failures.inc();
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(kind: &str) -> GroupVersionKind {
        GroupVersionKind::gvk(api::v1alpha2::GROUP, "v1alpha2", kind)
    }

    #[test]
    fn exposition_names_every_family() {
        let m = Metrics::new(Arc::default(), Arc::default());
        m.answered(
            Endpoint::Validate,
            "CREATE",
            &ours("EtcdCluster"),
            false,
            Duration::from_micros(300),
        );
        m.malformed(Endpoint::Mutate, "not_json", Duration::from_micros(10));
        m.handshake_failed();
        let text = m.encode().unwrap();
        for needle in [
            r#"etcd_operator_webhook_admission_requests_total{webhook="validate",operation="CREATE",kind="EtcdCluster",allowed="false"} 1"#,
            "etcd_operator_webhook_admission_duration_seconds_bucket",
            r#"etcd_operator_webhook_admission_malformed_requests_total{webhook="mutate",reason="not_json"} 1"#,
            "etcd_operator_webhook_tls_handshake_failures_total 1",
            "etcd_operator_webhook_certificate_reloads_total 0",
            "etcd_operator_webhook_certificate_reload_failures_total 0",
            "etcd_operator_webhook_certificate_loaded 0",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }

    #[test]
    fn certificate_expiry_is_the_served_certificates_not_after_and_absent_without_one() {
        let resolver = Arc::new(CertResolver::new());
        let m = Metrics::new(Arc::default(), resolver.clone());
        let name = "etcd_operator_webhook_certificate_expiry_timestamp_seconds";
        assert!(!m.encode().unwrap().contains(name));
        let ca = certs::mint::TestCa::new("webhook-metrics").unwrap();
        let leaf = ca.server_cert(&["localhost"]).unwrap();
        let key = certs::server::certified_key_from_pem(
            leaf.cert_pem.as_bytes(),
            leaf.key_pem.as_bytes(),
            std::path::Path::new("tls.crt"),
            std::path::Path::new("tls.key"),
        )
        .unwrap();
        resolver.store(Arc::new(key));
        let not_after = certs::verify::not_after(leaf.cert_pem.as_bytes()).unwrap();
        let text = m.encode().unwrap();
        assert!(text.contains(&format!("{name} {not_after}")), "{text}");
    }

    #[test]
    fn kind_label_is_one_of_ours_or_other_whatever_the_request_says() {
        let m = Metrics::new(Arc::default(), Arc::default());
        let mut kinds: Vec<GroupVersionKind> =
            (0..100).map(|i| ours(&format!("Made-Up-{i}"))).collect();
        kinds.push(GroupVersionKind::gvk("evil.example", "v1", "EtcdCluster"));
        kinds.extend(KINDS.map(ours));
        for kind in &kinds {
            m.answered(Endpoint::Validate, "UPDATE", kind, true, Duration::ZERO);
        }
        let text = m.encode().unwrap();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("etcd_operator_webhook_admission_requests_total{"))
            .collect();
        assert_eq!(series.len(), KINDS.len() + 1, "{series:#?}");
        assert!(
            text.contains(r#"operation="UPDATE",kind="other",allowed="true"} 101"#),
            "{text}"
        );
        for known in KINDS {
            assert!(
                text.contains(&format!(r#"kind="{known}",allowed="true"}} 1"#)),
                "{text}"
            );
        }
    }
}
