//! Prometheus metrics of the controller: reconciles (count, duration, errors by reason), etcd
//! call latencies, and per cluster what the alert rules of the chart read (members, conditions,
//! certificate expiry, snapshots). Served on the admin port's `/metrics`; every name is listed
//! in docs/observability.md.

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

/// One condition of a cluster: its type and its current reason (one series per type: the
/// series of the previous reason is removed when the reason changes).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabel {
    namespace: String,
    cluster: String,
    r#type: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabel {
    namespace: String,
    cluster: String,
    secret: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SnapshotLabel {
    namespace: String,
    cluster: String,
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScheduleLabel {
    namespace: String,
    schedule: String,
    cluster: String,
}

/// A condition of a cluster as the metrics show it: 1 while its status is `True`, else 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionSample<'a> {
    pub type_: &'a str,
    pub reason: &'a str,
    pub status_true: bool,
}

/// The fire time of a schedule's newest snapshot and the completion time of its newest Complete
/// one, in seconds since 1970 (`None`: not yet), and how far its continuous archive is behind
/// the cluster (`status.archive.lagSeconds`/`lagRevisions`; `None`: no archive, or unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScheduleTimes {
    pub last_schedule: Option<i64>,
    pub last_success: Option<i64>,
    pub archive_lag_seconds: Option<i64>,
    pub archive_lag_revisions: Option<i64>,
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
    desired_members: Family<ClusterLabel, Gauge>,
    conditions: Family<ConditionLabel, Gauge>,
    certificate_expiry: Family<CertificateLabel, Gauge>,
    snapshots: Family<SnapshotLabel, Counter>,
    schedule_last_schedule: Family<ScheduleLabel, Gauge>,
    schedule_last_success: Family<ScheduleLabel, Gauge>,
    archive_lag_seconds: Family<ScheduleLabel, Gauge>,
    archive_lag_revisions: Family<ScheduleLabel, Gauge>,
    /// The label sets last written per cluster (conditions, certificates) or schedule, so a
    /// series that no longer applies (a reason that changed, a Secret no longer used) is
    /// removed instead of kept at its last value.
    written: Mutex<Written>,
}

#[derive(Default)]
struct Written {
    conditions: HashMap<(String, String), Vec<ConditionLabel>>,
    certificates: HashMap<(String, String), Vec<CertificateLabel>>,
    schedules: HashMap<(String, String), ScheduleLabel>,
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
        let desired_members = Family::<ClusterLabel, Gauge>::default();
        let conditions = Family::<ConditionLabel, Gauge>::default();
        let certificate_expiry = Family::<CertificateLabel, Gauge>::default();
        let snapshots = Family::<SnapshotLabel, Counter>::default();
        let schedule_last_schedule = Family::<ScheduleLabel, Gauge>::default();
        let schedule_last_success = Family::<ScheduleLabel, Gauge>::default();
        let archive_lag_seconds = Family::<ScheduleLabel, Gauge>::default();
        let archive_lag_revisions = Family::<ScheduleLabel, Gauge>::default();
        registry.register(
            "cluster_desired_members",
            "Members an EtcdCluster's spec.replicas asks for (0 while paused)",
            desired_members.clone(),
        );
        registry.register(
            "cluster_condition",
            "A condition of an EtcdCluster (Available, Progressing, Degraded, Alarm, ...) with its \
             current reason: 1 while True, 0 while False",
            conditions.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the certificate (tls.crt) of a TLS Secret an EtcdCluster uses expires, in \
             seconds since 1970",
            certificate_expiry.clone(),
        );
        registry.register(
            "snapshots",
            "EtcdSnapshots that reached a terminal phase (Complete, Failed), by cluster",
            snapshots.clone(),
        );
        registry.register(
            "snapshot_schedule_last_schedule_timestamp_seconds",
            "Fire time of an EtcdSnapshotSchedule's newest snapshot (status.lastScheduleTime)",
            schedule_last_schedule.clone(),
        );
        registry.register(
            "snapshot_schedule_last_success_timestamp_seconds",
            "When an EtcdSnapshotSchedule's newest Complete snapshot completed \
             (status.lastSuccessfulTime)",
            schedule_last_success.clone(),
        );
        registry.register(
            "snapshot_schedule_archive_lag_seconds",
            "How far an EtcdSnapshotSchedule's continuous archive is behind its cluster, in \
             seconds (status.archive.lagSeconds: 0 when caught up)",
            archive_lag_seconds.clone(),
        );
        registry.register(
            "snapshot_schedule_archive_lag_revisions",
            "How many revisions an EtcdSnapshotSchedule's cluster is ahead of its continuous \
             archive (status.archive.lagRevisions)",
            archive_lag_revisions.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                desired_members,
                conditions,
                certificate_expiry,
                snapshots,
                schedule_last_schedule,
                schedule_last_success,
                archive_lag_seconds,
                archive_lag_revisions,
                written: Mutex::new(Written::default()),
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

    /// The members a cluster's spec asks for.
    pub fn record_desired_members(&self, namespace: &str, cluster: &str, replicas: i64) {
        self.inner
            .desired_members
            .get_or_create(&ClusterLabel {
                namespace: namespace.to_string(),
                cluster: cluster.to_string(),
            })
            .set(replicas);
    }

    fn written(&self) -> std::sync::MutexGuard<'_, Written> {
        // A panic while holding the lock leaves the maps consistent (each update is one
        // insert), so a poisoned lock is still usable.
        self.inner
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A cluster's conditions as its status now has them: one series per condition type,
    /// labelled with the current reason; the series of conditions or reasons no longer there
    /// are removed.
    pub fn record_conditions(&self, namespace: &str, cluster: &str, now: &[ConditionSample<'_>]) {
        let key = (namespace.to_string(), cluster.to_string());
        let labels: Vec<ConditionLabel> = now
            .iter()
            .map(|c| ConditionLabel {
                namespace: namespace.to_string(),
                cluster: cluster.to_string(),
                r#type: c.type_.to_string(),
                reason: c.reason.to_string(),
            })
            .collect();
        let mut written = self.written();
        for old in written.conditions.get(&key).into_iter().flatten() {
            if !labels.contains(old) {
                self.inner.conditions.remove(old);
            }
        }
        for (label, c) in labels.iter().zip(now) {
            self.inner
                .conditions
                .get_or_create(label)
                .set(i64::from(c.status_true));
        }
        written.conditions.insert(key, labels);
    }

    /// The expiry (`notAfter`, seconds since 1970) of the certificate in each TLS Secret a
    /// cluster uses, by Secret name; Secrets no longer listed lose their series.
    pub fn record_certificates(&self, namespace: &str, cluster: &str, expiries: &[(String, i64)]) {
        let key = (namespace.to_string(), cluster.to_string());
        let labels: Vec<CertificateLabel> = expiries
            .iter()
            .map(|(secret, _)| CertificateLabel {
                namespace: namespace.to_string(),
                cluster: cluster.to_string(),
                secret: secret.clone(),
            })
            .collect();
        let mut written = self.written();
        for old in written.certificates.get(&key).into_iter().flatten() {
            if !labels.contains(old) {
                self.inner.certificate_expiry.remove(old);
            }
        }
        for (label, (_, not_after)) in labels.iter().zip(expiries) {
            self.inner
                .certificate_expiry
                .get_or_create(label)
                .set(*not_after);
        }
        written.certificates.insert(key, labels);
    }

    /// An EtcdSnapshot of `cluster` reached its terminal `phase` (counted once: by the
    /// reconcile that wrote it).
    pub fn count_snapshot(&self, namespace: &str, cluster: &str, phase: &str) {
        self.inner
            .snapshots
            .get_or_create(&SnapshotLabel {
                namespace: namespace.to_string(),
                cluster: cluster.to_string(),
                phase: phase.to_string(),
            })
            .inc();
    }

    /// A schedule's last fire and last success times, from its status.
    pub fn record_schedule(
        &self,
        namespace: &str,
        schedule: &str,
        cluster: &str,
        times: ScheduleTimes,
    ) {
        let label = ScheduleLabel {
            namespace: namespace.to_string(),
            schedule: schedule.to_string(),
            cluster: cluster.to_string(),
        };
        let key = (namespace.to_string(), schedule.to_string());
        let mut written = self.written();
        if let Some(old) = written.schedules.get(&key).filter(|old| **old != label) {
            // The schedule now snapshots another cluster.
            for family in self.schedule_families() {
                family.remove(old);
            }
        }
        for (family, value) in self.schedule_families().into_iter().zip([
            times.last_schedule,
            times.last_success,
            times.archive_lag_seconds,
            times.archive_lag_revisions,
        ]) {
            match value {
                Some(v) => {
                    family.get_or_create(&label).set(v);
                }
                None => {
                    family.remove(&label);
                }
            }
        }
        written.schedules.insert(key, label);
    }

    /// A schedule's gauges, in the order of [`ScheduleTimes`]' fields.
    fn schedule_families(&self) -> [&Family<ScheduleLabel, Gauge>; 4] {
        [
            &self.inner.schedule_last_schedule,
            &self.inner.schedule_last_success,
            &self.inner.archive_lag_seconds,
            &self.inner.archive_lag_revisions,
        ]
    }

    /// Drop a deleted schedule's gauges.
    pub fn forget_schedule(&self, namespace: &str, schedule: &str) {
        let key = (namespace.to_string(), schedule.to_string());
        if let Some(old) = self.written().schedules.remove(&key) {
            for family in self.schedule_families() {
                family.remove(&old);
            }
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
        self.inner.desired_members.remove(&label);
        let key = (namespace.to_string(), cluster.to_string());
        let mut written = self.written();
        for old in written.conditions.remove(&key).into_iter().flatten() {
            self.inner.conditions.remove(&old);
        }
        for old in written.certificates.remove(&key).into_iter().flatten() {
            self.inner.certificate_expiry.remove(&old);
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

    #[test]
    fn a_condition_keeps_one_series_labelled_with_its_current_reason() {
        let m = Metrics::new();
        let available = |reason, status_true| ConditionSample {
            type_: "Available",
            reason,
            status_true,
        };
        m.record_conditions("ns", "c", &[available("QuorumHealthy", true)]);
        m.record_conditions("ns", "c", &[available("QuorumLost", false)]);
        let text = m.render();
        assert!(
            text.contains("etcd_operator_cluster_condition{namespace=\"ns\",cluster=\"c\",type=\"Available\",reason=\"QuorumLost\"} 0"),
            "{text}"
        );
        assert!(!text.contains("QuorumHealthy"), "{text}");
        m.record_desired_members("ns", "c", 3);
        assert!(m
            .render()
            .contains("etcd_operator_cluster_desired_members{namespace=\"ns\",cluster=\"c\"} 3"));
        m.forget_cluster("ns", "c");
        assert!(!m.render().contains("cluster=\"c\""));
    }

    #[test]
    fn certificates_no_longer_used_lose_their_series() {
        let m = Metrics::new();
        m.record_certificates(
            "ns",
            "c",
            &[
                ("c-peer".into(), 1_900_000_000),
                ("c-server".into(), 1_800_000_000),
            ],
        );
        m.record_certificates("ns", "c", &[("c-server".into(), 1_850_000_000)]);
        let text = m.render();
        assert!(
            text.contains("etcd_operator_certificate_expiry_timestamp_seconds{namespace=\"ns\",cluster=\"c\",secret=\"c-server\"} 1850000000"),
            "{text}"
        );
        assert!(!text.contains("c-peer"), "{text}");
    }

    #[test]
    fn snapshots_and_schedules_carry_their_cluster() {
        let m = Metrics::new();
        m.count_snapshot("ns", "c", "Failed");
        m.record_schedule(
            "ns",
            "nightly",
            "c",
            ScheduleTimes {
                last_schedule: Some(1_700_000_000),
                archive_lag_seconds: Some(3),
                ..ScheduleTimes::default()
            },
        );
        let text = m.render();
        assert!(
            text.contains(
                "etcd_operator_snapshots_total{namespace=\"ns\",cluster=\"c\",phase=\"Failed\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("etcd_operator_snapshot_schedule_last_schedule_timestamp_seconds{namespace=\"ns\",schedule=\"nightly\",cluster=\"c\"} 1700000000"),
            "{text}"
        );
        assert!(
            !text.contains("etcd_operator_snapshot_schedule_last_success_timestamp_seconds{"),
            "no success yet: {text}"
        );
        assert!(
            text.contains("etcd_operator_snapshot_schedule_archive_lag_seconds{namespace=\"ns\",schedule=\"nightly\",cluster=\"c\"} 3"),
            "{text}"
        );
        assert!(
            !text.contains("etcd_operator_snapshot_schedule_archive_lag_revisions{"),
            "no lag known in revisions: {text}"
        );
        m.record_schedule(
            "ns",
            "nightly",
            "other",
            ScheduleTimes {
                last_schedule: Some(1_700_000_100),
                last_success: Some(1_700_000_200),
                ..ScheduleTimes::default()
            },
        );
        let text = m.render();
        assert!(
            !text.contains("schedule=\"nightly\",cluster=\"c\""),
            "the series of the cluster it no longer snapshots is gone: {text}"
        );
        assert!(
            text.contains("etcd_operator_snapshot_schedule_last_success_timestamp_seconds{namespace=\"ns\",schedule=\"nightly\",cluster=\"other\"} 1700000200"),
            "{text}"
        );
        m.forget_schedule("ns", "nightly");
        assert!(!m.render().contains("nightly"));
    }
}
