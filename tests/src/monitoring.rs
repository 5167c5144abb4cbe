//! What the chart's monitoring (docs/observability.md) reads, checked from both ends: the metric
//! names its alert rules and its Grafana dashboard use, as one explicit list.
//! `tests/tests/chart/monitoring.rs` checks the list against the rendered rules and dashboard
//! (every name they use is listed, every listed name is used); `tests/tests/e2e_metrics.rs`
//! checks it against real scrapes (every listed name is served by a real etcd member or the real
//! operator). A renamed metric on either side fails one of the two.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// Served by every etcd member on its metrics port (2381).
pub const ETCD_METRICS: &[&str] = &[
    "etcd_disk_backend_commit_duration_seconds_bucket",
    "etcd_disk_wal_fsync_duration_seconds_bucket",
    "etcd_mvcc_db_total_size_in_bytes",
    "etcd_mvcc_db_total_size_in_use_in_bytes",
    "etcd_network_peer_round_trip_time_seconds_bucket",
    "etcd_server_apply_duration_seconds_bucket",
    "etcd_server_has_leader",
    "etcd_server_is_leader",
    "etcd_server_is_learner",
    "etcd_server_leader_changes_seen_total",
    "etcd_server_quota_backend_bytes",
    "grpc_server_handled_total",
];

/// Served by the operator on its admin port (8081).
pub const OPERATOR_METRICS: &[&str] = &[
    "etcd_operator_certificate_expiry_timestamp_seconds",
    "etcd_operator_cluster_condition",
    "etcd_operator_cluster_desired_members",
    "etcd_operator_cluster_learners",
    "etcd_operator_cluster_ready_members",
    "etcd_operator_cluster_voters",
    "etcd_operator_defrag_runs_total",
    "etcd_operator_etcd_call_duration_seconds_count",
    "etcd_operator_newest_verified_snapshot_age_seconds",
    "etcd_operator_reconcile_errors_total",
    "etcd_operator_reconciles_total",
    "etcd_operator_snapshot_schedule_archive_lag_seconds",
    "etcd_operator_snapshot_schedule_last_schedule_timestamp_seconds",
    "etcd_operator_snapshot_schedule_last_success_timestamp_seconds",
    "etcd_operator_snapshots_total",
];

/// Served by the admission webhook on its admin port (8080, the webhook Service's `metrics`).
pub const WEBHOOK_METRICS: &[&str] =
    &["etcd_operator_webhook_certificate_expiry_timestamp_seconds"];

/// Series Prometheus makes itself for every target (not in any scrape).
pub const SYNTHETIC: &[&str] = &["up"];

/// The dashboard's JSON in the chart.
pub fn dashboard_path() -> PathBuf {
    crate::helm::chart_dir()
        .join("files")
        .join("dashboards")
        .join("etcd-clusters.json")
}

/// PromQL words that are not metric names (a metric of such a name would be missed).
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
    // Aggregations, which may be followed by `by (…)` before their parenthesis.
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// The metric names an expression reads, crudely: identifiers outside strings, label matchers
/// (`{…}`), ranges (`[…]`) and label lists (`by (…)` and friends) that are not called as a
/// function and are no keyword. Good enough for the queries of this chart; not a PromQL parser.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    // Blank out strings, matchers and ranges.
    let mut plain = String::with_capacity(expr.len());
    let mut depth_brace = 0usize;
    let mut depth_bracket = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for c in expr.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            plain.push(' ');
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                plain.push(' ');
            }
            '{' => {
                depth_brace += 1;
                plain.push(' ');
            }
            '}' => {
                depth_brace = depth_brace.saturating_sub(1);
                plain.push(' ');
            }
            '[' => {
                depth_bracket += 1;
                plain.push(' ');
            }
            ']' => {
                depth_bracket = depth_bracket.saturating_sub(1);
                plain.push(' ');
            }
            _ if depth_brace > 0 || depth_bracket > 0 => plain.push(' '),
            _ => plain.push(c),
        }
    }
    // Tokenise; drop label lists after by/without/on/ignoring/group_left/group_right.
    let chars: Vec<char> = plain.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() {
            // A number or a duration (`1h`, `0.99`, `1e3`): not a name.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let called = j < chars.len() && chars[j] == '(';
            if matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                skip_list = called;
                continue;
            }
            if !called && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                names.insert(word);
            }
            continue;
        }
        if c == '(' && skip_list {
            // Skip the label list.
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            skip_list = false;
        }
        i += 1;
    }
    names
}

/// The label names an expression's matchers and label lists (`by`, `without`, `on`, `ignoring`,
/// `group_left`, `group_right`) name: every one must exist on the series it reads.
pub fn label_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            if c == '\\' {
                i += 1;
            } else if c == '"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if c == '"' {
            in_string = true;
            i += 1;
            continue;
        }
        if c == '{' {
            // Matchers: name op "value", ...
            let end = find_closing(&bytes, i, '{', '}');
            let inner: String = bytes[i + 1..end].iter().collect();
            for part in split_outside_quotes(&inner, ',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
            i = end + 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_') {
                i += 1;
            }
            let word: String = bytes[start..i].iter().collect();
            if matches!(
                word.as_str(),
                "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
            ) {
                let mut j = i;
                while j < bytes.len() && bytes[j].is_whitespace() {
                    j += 1;
                }
                if j < bytes.len() && bytes[j] == '(' {
                    let end = find_closing(&bytes, j, '(', ')');
                    let inner: String = bytes[j + 1..end].iter().collect();
                    out.extend(
                        inner
                            .split(',')
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(str::to_string),
                    );
                    i = end + 1;
                }
            }
            continue;
        }
        i += 1;
    }
    out
}

fn find_closing(chars: &[char], open_at: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut in_string = false;
    let mut i = open_at;
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            if c == '\\' {
                i += 1;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
        i += 1;
    }
    chars.len().saturating_sub(1)
}

fn split_outside_quotes(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut in_string = false;
    let mut escaped = false;
    for c in s.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if c == sep {
            parts.push(String::new());
            continue;
        }
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

/// The metric names a Prometheus text exposition has samples of (comment lines aside).
pub fn sampled_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            l.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_skip_functions_matchers_ranges_and_label_lists() {
        let names = metric_names(
            r#"histogram_quantile(0.99, sum by (namespace, pod, le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket{job="etcd",x=~"a|b"}[5m]))) > 0.5
               and on (namespace) max by (namespace) (foo_total offset 1h) or absent(up{job="x"} == 1) unless bar / baz > bool 1"#,
        );
        assert_eq!(
            names,
            [
                "etcd_disk_wal_fsync_duration_seconds_bucket",
                "foo_total",
                "up",
                "bar",
                "baz"
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        );
    }

    #[test]
    fn label_names_are_those_of_matchers_and_label_lists() {
        let labels = label_names(
            r#"max by (namespace, cluster) (m{job="etcd",type!~"a,b"}) < on (namespace) ignoring(x) n"#,
        );
        assert_eq!(
            labels,
            ["namespace", "cluster", "job", "type", "x"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        );
    }

    #[test]
    fn sampled_names_ignore_comments() {
        let text = "# HELP a_total x\n# TYPE a counter\na_total{x=\"1\"} 1\nb 2\n";
        assert_eq!(
            sampled_names(text),
            ["a_total", "b"].iter().map(|s| s.to_string()).collect()
        );
    }
}
