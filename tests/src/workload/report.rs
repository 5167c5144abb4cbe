//! A run's figures: [`Report`], printed as one markdown table row under [`Report::HEADER`] (the
//! rows of docs/reliability.md).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::check::Figures;
use super::history::{ErrorClass, History, WatchOutcome};

/// The figures of one run, for the test's output and docs/reliability.md.
#[derive(Clone, Debug)]
pub struct Report {
    /// What ran (the fault's name, see [`super::Workload::named`]).
    pub label: String,
    /// The key prefix of every write, and the newest acknowledged key with its revision (for
    /// a test that checks one member's own copy).
    pub prefix: String,
    pub newest: Option<(String, i64)>,
    pub attempted: u64,
    pub acknowledged: u64,
    /// Of `acknowledged`, the puts sent between `fault_started` and `fault_ended`.
    pub acknowledged_during: u64,
    /// Of `acknowledged`, the puts sent during each fault the test marked, in order.
    pub acknowledged_per_fault: Vec<u64>,
    /// Puts without an answer (present or absent at the end, both allowed), by class.
    pub not_acknowledged: BTreeMap<ErrorClass, u64>,
    /// Acknowledged writes missing or changed at the end (always 0 in a report: `finish`
    /// panics otherwise).
    pub lost: u64,
    pub longest_write_gap: Duration,
    pub p99_before: Duration,
    pub p99_during: Duration,
    pub reads: u64,
    pub failed_reads: u64,
    pub watch: WatchOutcome,
    /// Reasons of the Events about the operator's objects in the namespace during the run, with
    /// counts.
    pub events: BTreeMap<String, u64>,
    /// How long the writer ran.
    pub duration: Duration,
}

impl Report {
    /// The table header [`Report`]'s `Display` rows fit under.
    pub const HEADER: &'static str = "| fault | writes attempted | acknowledged | not acknowledged | lost | longest write gap | p99 before | p99 during | reads (failed) | watch | operator Events |\n|---|---|---|---|---|---|---|---|---|---|---|";

    pub(super) fn new(
        label: String,
        history: &History,
        f: Figures,
        events: BTreeMap<String, u64>,
    ) -> Self {
        let newest = history
            .attempts
            .iter()
            .rev()
            .find_map(|a| a.revision().map(|r| (a.key.clone(), r)));
        Report {
            label,
            prefix: history.prefix.clone(),
            newest,
            attempted: f.attempted,
            acknowledged: f.acknowledged,
            acknowledged_during: f.acknowledged_during,
            acknowledged_per_fault: f.acknowledged_per_fault,
            not_acknowledged: f.failed,
            lost: f.lost,
            longest_write_gap: f.longest_write_gap,
            p99_before: f.p99_before,
            p99_during: f.p99_during,
            reads: f.reads,
            failed_reads: f.failed_reads,
            watch: f.watch,
            events,
            duration: history.ended,
        }
    }
}

/// The longest a writer may go without an acknowledged write through a fault the docs say the
/// cluster stays available through: a few leader elections on the loaded 2-core machine (etcd's
/// 1 s election timeout; gaps of 2.0 to 3.6 s seen at a load average of 40) plus the writer's
/// 2 s request timeout, with room. A cluster that loses its quorum for the fault's length, or
/// a writer that never reaches it, goes far past it.
pub const AVAILABLE_WRITE_GAP: Duration = Duration::from_secs(10);

impl Report {
    /// The cluster stayed available for writes through every fault the test marked: the writer
    /// got acknowledgements, some of them for puts sent during each fault, and never waited
    /// longer than `max_gap` for the next one. A writer that never got an answer loses nothing,
    /// so "0 lost" alone would hold for it.
    pub fn assert_available(&self, max_gap: Duration) {
        let label = &self.label;
        assert!(
            self.acknowledged > 0,
            "{label}: no write was acknowledged at all: {self:?}"
        );
        assert!(
            !self.acknowledged_per_fault.is_empty(),
            "{label}: the test marked no fault (Workload::fault_started): {self:?}"
        );
        for (i, n) in self.acknowledged_per_fault.iter().enumerate() {
            assert!(
                *n > 0,
                "{label}: no write sent during fault {} of {} was acknowledged: {self:?}",
                i + 1,
                self.acknowledged_per_fault.len()
            );
        }
        assert!(
            self.longest_write_gap <= max_gap,
            "{label}: the writer went {:?} without an acknowledged write (at most {max_gap:?} \
             where the cluster stays available): {self:?}",
            self.longest_write_gap
        );
    }
}

/// A duration in milliseconds or seconds, as a table cell.
fn cell(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

impl fmt::Display for Report {
    /// One markdown table row under [`Report::HEADER`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed: u64 = self.not_acknowledged.values().sum();
        let classes: Vec<String> = self
            .not_acknowledged
            .iter()
            .map(|(c, n)| format!("{n} {}", c.label()))
            .collect();
        let failed = if classes.is_empty() {
            "0".to_string()
        } else {
            format!("{failed} ({})", classes.join(", "))
        };
        let events: Vec<String> = self
            .events
            .iter()
            .map(|(r, n)| {
                if *n == 1 {
                    r.clone()
                } else {
                    format!("{r} ×{n}")
                }
            })
            .collect();
        write!(
            f,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} |",
            self.label,
            self.attempted,
            self.acknowledged,
            failed,
            self.lost,
            cell(self.longest_write_gap),
            cell(self.p99_before),
            cell(self.p99_during),
            self.reads,
            self.failed_reads,
            self.watch,
            if events.is_empty() {
                "—".to_string()
            } else {
                events.join(", ")
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(acknowledged: u64, per_fault: &[u64], gap_s: u64) -> Report {
        Report {
            label: "fault".into(),
            prefix: "wl/".into(),
            newest: None,
            attempted: acknowledged,
            acknowledged,
            acknowledged_during: per_fault.iter().sum(),
            acknowledged_per_fault: per_fault.to_vec(),
            not_acknowledged: BTreeMap::new(),
            lost: 0,
            longest_write_gap: Duration::from_secs(gap_s),
            p99_before: Duration::ZERO,
            p99_during: Duration::ZERO,
            reads: 0,
            failed_reads: 0,
            watch: WatchOutcome::Complete {
                events: acknowledged,
                rewatches: 0,
            },
            events: BTreeMap::new(),
            duration: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_cluster_that_answered_through_every_fault_is_available() {
        report(100, &[10, 5], 3).assert_available(AVAILABLE_WRITE_GAP);
    }

    #[test]
    #[should_panic(expected = "no write was acknowledged at all")]
    fn a_writer_that_never_got_an_answer_is_not_available() {
        report(0, &[0], 60).assert_available(AVAILABLE_WRITE_GAP);
    }

    #[test]
    #[should_panic(expected = "no write sent during fault 2 of 2")]
    fn a_fault_without_an_acknowledged_write_is_not_available() {
        report(100, &[10, 0], 3).assert_available(AVAILABLE_WRITE_GAP);
    }

    #[test]
    #[should_panic(expected = "without an acknowledged write")]
    fn a_write_gap_past_the_bound_is_not_available() {
        report(100, &[10], 11).assert_available(AVAILABLE_WRITE_GAP);
    }
}
