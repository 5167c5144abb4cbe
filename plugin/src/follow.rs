//! Following an object the command created until it finishes: one line each time what it says
//! changes, its end judged by the command ([`Progress`]).

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::objects::{Kind, Objects};

/// `head`, with `(reason)` after it when there is one.
pub fn with_reason(head: String, reason: &str) -> String {
    if reason.is_empty() {
        head
    } else {
        format!("{head} ({reason})")
    }
}

/// How often the object is read again.
const EVERY: Duration = Duration::from_secs(2);

/// Where an object stands, as its command judges it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Not finished: what it is doing now.
    Going(String),
    /// Finished as asked.
    Done(String),
    /// Finished otherwise: why.
    Failed(String),
}

/// Read `name` every [`EVERY`] until `judge` says it finished, printing each new state; a
/// `Failed` end is an error, and so is `timeout` (the object carries on).
pub async fn follow<K: Kind>(
    o: &Objects,
    name: &str,
    timeout: Duration,
    mut judge: impl FnMut(&K) -> Progress,
) -> Result<K> {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let object: K = o.get(name).await?;
        match judge(&object) {
            Progress::Done(line) => {
                println!("{} {name}: {line}", K::KIND);
                return Ok(object);
            }
            Progress::Failed(why) => {
                return Err(Error::Failed(format!("{} {name} failed: {why}", K::KIND)))
            }
            Progress::Going(line) => {
                if line != last {
                    println!("{} {name}: {line}", K::KIND);
                    last = line;
                }
            }
        }
        if start.elapsed() >= timeout {
            return Err(Error::TimedOut(format!(
                "{} {name} has not finished after {}s (--timeout): it carries on; `kubectl get {} -n {} {name}` shows where it is",
                K::KIND,
                timeout.as_secs(),
                K::LIST,
                o.namespace
            )));
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// `--timeout 10m`, `90s`, `1h`: a number with a unit (s, m, h).
pub fn parse_timeout(text: &str) -> std::result::Result<Duration, String> {
    let bad =
        || format!("{text:?} is not a duration: give a number with a unit, e.g. 90s, 10m, 1h");
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let n: u64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(bad()),
    };
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_take_seconds_minutes_and_hours() {
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_timeout("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn a_timeout_without_a_unit_or_a_number_is_refused_with_an_example() {
        for bad in ["10", "m", "10d", "", "1.5m"] {
            let e = parse_timeout(bad).expect_err(bad);
            assert!(e.contains("e.g. 90s, 10m, 1h"), "{e}");
        }
    }
}
