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
    /// Reasons of the Events about the cluster and its members during the run, with counts.
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
