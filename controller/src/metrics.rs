//! Prometheus metrics of the controller: reconciles (count, duration, errors by reason) and etcd
//! call latencies. Served on the admin port's `/metrics`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabel {
    controller: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EtcdLabel {
    op: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabel {
    namespace: String,
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    reconciles: Family<ControllerLabel, Counter>,
    reconcile_seconds: Family<ControllerLabel, Histogram>,
    errors: Family<ErrorLabel, Counter>,
    etcd_seconds: Family<EtcdLabel, Histogram>,
    ready_members: Family<ClusterLabel, Gauge>,
    voters: Family<ClusterLabel, Gauge>,
    learners: Family<ClusterLabel, Gauge>,
    defrag_runs: Family<OutcomeLabel, Counter>,
    defrag_run_seconds: Histogram,
    defrag_members: Family<OutcomeLabel, Counter>,
    defrag_member_seconds: Histogram,
    defrag_reclaimed_bytes: Counter,
    newest_verified_snapshot_age: Family<ClusterLabel, Gauge>,
    /// Completion time (unix seconds) of each cluster's newest verified snapshot; the age is
    /// computed from it when the metrics are rendered.
    newest_verified_snapshot: Mutex<HashMap<ClusterLabel, i64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("etcd_operator");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let reconcile_seconds = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        let errors = Family::<ErrorLabel, Counter>::default();
        let etcd_seconds = Family::<EtcdLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 14))
        });
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            reconcile_seconds.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by reason",
            errors.clone(),
        );
        registry.register(
            "etcd_call_duration_seconds",
            "Latency of etcd calls made by the operator",
            etcd_seconds.clone(),
        );
        let ready_members = Family::<ClusterLabel, Gauge>::default();
        let voters = Family::<ClusterLabel, Gauge>::default();
        let learners = Family::<ClusterLabel, Gauge>::default();
        registry.register(
            "cluster_ready_members",
            "Members of an EtcdCluster whose Pod is Ready",
            ready_members.clone(),
        );
        registry.register(
            "cluster_voters",
            "Voting members etcd lists for an EtcdCluster",
            voters.clone(),
        );
        registry.register(
            "cluster_learners",
            "Learners etcd lists for an EtcdCluster",
            learners.clone(),
        );
        let defrag_runs = Family::<OutcomeLabel, Counter>::default();
        let defrag_run_seconds = Histogram::new(exponential_buckets(0.5, 2.0, 14));
        let defrag_members = Family::<OutcomeLabel, Counter>::default();
        let defrag_member_seconds = Histogram::new(exponential_buckets(0.05, 2.0, 14));
        let defrag_reclaimed_bytes = Counter::default();
        registry.register(
            "defrag_runs",
            "EtcdDefrag runs finished, by outcome (Complete, Failed)",
            defrag_runs.clone(),
        );
        registry.register(
            "defrag_run_duration_seconds",
            "Time from an EtcdDefrag run's start to its end",
            defrag_run_seconds.clone(),
        );
        registry.register(
            "defrag_members",
            "Members processed by EtcdDefrag runs, by outcome (Defragmented, Skipped, Failed)",
            defrag_members.clone(),
        );
        registry.register(
            "defrag_member_duration_seconds",
            "Time one member's defragmentation took",
            defrag_member_seconds.clone(),
        );
        registry.register(
            "defrag_reclaimed_bytes",
            "Backend bytes reclaimed by defragmentation",
            defrag_reclaimed_bytes.clone(),
        );
        let newest_verified_snapshot_age = Family::<ClusterLabel, Gauge>::default();
        registry.register(
            "newest_verified_snapshot_age_seconds",
            "Seconds since the newest EtcdSnapshot of the cluster that reads Verified=True was taken (its completion)",
            newest_verified_snapshot_age.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                newest_verified_snapshot_age,
                newest_verified_snapshot: Mutex::default(),
                defrag_runs,
                defrag_run_seconds,
                defrag_members,
                defrag_member_seconds,
                defrag_reclaimed_bytes,
                registry,
                reconciles,
                reconcile_seconds,
                errors,
                etcd_seconds,
                ready_members,
                voters,
                learners,
            }),
        }
    }

    pub fn observe_reconcile(&self, controller: &str, took: Duration) {
        let label = ControllerLabel {
            controller: controller.to_string(),
        };
        self.inner.reconciles.get_or_create(&label).inc();
        self.inner
            .reconcile_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }

    pub fn count_error(&self, controller: &str, reason: &str) {
        self.inner
            .errors
            .get_or_create(&ErrorLabel {
                controller: controller.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    pub fn observe_etcd(&self, op: &str, took: Duration, ok: bool) {
        self.inner
            .etcd_seconds
            .get_or_create(&EtcdLabel {
                op: op.to_string(),
                result: if ok { "ok" } else { "error" }.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// A cluster's member counts as the last reconcile saw them; `None` for what etcd was not
    /// asked (the gauge keeps its last value).
    pub fn record_cluster(
        &self,
        namespace: &str,
        cluster: &str,
        ready: i64,
        etcd: Option<(i64, i64)>,
    ) {
        let label = ClusterLabel {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
        };
        self.inner.ready_members.get_or_create(&label).set(ready);
        if let Some((voters, learners)) = etcd {
            self.inner.voters.get_or_create(&label).set(voters);
            self.inner.learners.get_or_create(&label).set(learners);
        }
    }

    /// One member of a defrag run processed: its outcome, the bytes it gave back and how long
    /// the defragmentation took (`None`: it was skipped).
    pub fn count_defrag_member(&self, outcome: &str, reclaimed: i64, took: Option<Duration>) {
        self.inner
            .defrag_members
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
        self.inner
            .defrag_reclaimed_bytes
            .inc_by(u64::try_from(reclaimed).unwrap_or(0));
        if let Some(took) = took {
            self.inner.defrag_member_seconds.observe(took.as_secs_f64());
        }
    }

    /// A defrag run finished.
    pub fn count_defrag_run(&self, outcome: &str, took: Option<Duration>) {
        self.inner
            .defrag_runs
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
        if let Some(took) = took {
            self.inner.defrag_run_seconds.observe(took.as_secs_f64());
        }
    }

    /// A verified snapshot of the cluster, taken (completed) at `completed` (unix seconds): the
    /// newest one's age is exported.
    pub fn record_verified_snapshot(&self, namespace: &str, cluster: &str, completed: i64) {
        let label = ClusterLabel {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
        };
        if let Ok(mut newest) = self.inner.newest_verified_snapshot.lock() {
            let at = newest.entry(label).or_insert(completed);
            *at = (*at).max(completed);
        }
    }

    /// Drop a deleted cluster's gauges.
    pub fn forget_cluster(&self, namespace: &str, cluster: &str) {
        let label = ClusterLabel {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
        };
        self.inner.ready_members.remove(&label);
        self.inner.voters.remove(&label);
        self.inner.learners.remove(&label);
        self.inner.newest_verified_snapshot_age.remove(&label);
        if let Ok(mut newest) = self.inner.newest_verified_snapshot.lock() {
            newest.remove(&label);
        }
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        self.render_at(chrono::Utc::now().timestamp())
    }

    /// [`Metrics::render`] at `now` (unix seconds): ages are computed when scraped.
    fn render_at(&self, now: i64) -> String {
        if let Ok(newest) = self.inner.newest_verified_snapshot.lock() {
            for (label, at) in newest.iter() {
                self.inner
                    .newest_verified_snapshot_age
                    .get_or_create(label)
                    .set((now - at).max(0));
            }
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.inner.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_metrics_carry_reconciles_errors_and_etcd_latency() {
        let m = Metrics::new();
        m.observe_reconcile("etcdcluster", Duration::from_millis(3));
        m.count_error("etcdcluster", "EtcdUnreachable");
        m.observe_etcd("member_list", Duration::from_millis(1), true);
        let text = m.render();
        assert!(
            text.contains("etcd_operator_reconciles_total{controller=\"etcdcluster\"} 1"),
            "{text}"
        );
        assert!(text.contains("etcd_operator_reconcile_errors_total{controller=\"etcdcluster\",reason=\"EtcdUnreachable\"} 1"), "{text}");
        assert!(text.contains("etcd_operator_etcd_call_duration_seconds_count{op=\"member_list\",result=\"ok\"} 1"), "{text}");
        m.record_cluster("ns", "c", 2, Some((3, 1)));
        let text = m.render();
        assert!(
            text.contains("etcd_operator_cluster_voters{namespace=\"ns\",cluster=\"c\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("etcd_operator_cluster_learners{namespace=\"ns\",cluster=\"c\"} 1"),
            "{text}"
        );
        m.forget_cluster("ns", "c");
        assert!(!m.render().contains("cluster=\"c\""));
        m.record_verified_snapshot("ns", "c", 1_000);
        m.record_verified_snapshot("ns", "c", 900);
        let text = m.render_at(1_060);
        assert!(
            text.contains(
                "etcd_operator_newest_verified_snapshot_age_seconds{namespace=\"ns\",cluster=\"c\"} 60"
            ),
            "{text}"
        );
        m.forget_cluster("ns", "c");
        assert!(!m.render_at(1_060).contains("cluster=\"c\""));
        m.count_defrag_member("Defragmented", 4096, Some(Duration::from_millis(20)));
        m.count_defrag_member("Skipped", 0, None);
        m.count_defrag_run("Complete", Some(Duration::from_secs(3)));
        let text = m.render();
        assert!(
            text.contains("etcd_operator_defrag_reclaimed_bytes_total 4096"),
            "{text}"
        );
        assert!(
            text.contains("etcd_operator_defrag_members_total{outcome=\"Skipped\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("etcd_operator_defrag_runs_total{outcome=\"Complete\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("etcd_operator_defrag_member_duration_seconds_count 1"),
            "{text}"
        );
    }
}
