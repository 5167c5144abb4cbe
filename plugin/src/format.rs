//! Plain-text output: sizes, ages and aligned tables, as kubectl prints them.

use k8s_openapi::jiff::Timestamp;

/// `1.5 MiB`, `512 B`: binary units, one decimal above a KiB.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n.abs() < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if v.abs() < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// kubectl's age: `45s`, `12m`, `3h4m`, `2d5h`.
pub fn age(since: Timestamp, now: Timestamp) -> String {
    let s = (now.as_second() - since.as_second()).max(0);
    match s {
        0..120 => format!("{s}s"),
        120..3600 => format!("{}m", s / 60),
        3600..86400 if s % 3600 / 60 == 0 => format!("{}h", s / 3600),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ if s % 86400 / 3600 == 0 => format!("{}d", s / 86400),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

/// Rows aligned in columns three spaces apart (the last column is not padded).
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}   ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary_with_one_decimal() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(1536 * 1024), "1.5 MiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let t = |s: i64| Timestamp::from_second(1_000_000 + s).expect("time");
        let at = t(0);
        assert_eq!(age(at, t(45)), "45s");
        assert_eq!(age(at, t(12 * 60 + 5)), "12m");
        assert_eq!(age(at, t(3 * 3600)), "3h");
        assert_eq!(age(at, t(3 * 3600 + 4 * 60)), "3h4m");
        assert_eq!(age(at, t(2 * 86400 + 5 * 3600)), "2d5h");
        // A clock behind the apiserver's reads as 0s, not a negative age.
        assert_eq!(age(t(10), at), "0s");
    }

    #[test]
    fn tables_align_every_column_but_the_last() {
        let rows = vec![
            vec!["A".to_string(), "BB".to_string(), "tail".to_string()],
            vec!["long".to_string(), "x".to_string(), "t".to_string()],
        ];
        assert_eq!(table(&rows), "A      BB   tail\nlong   x    t\n");
    }
}
