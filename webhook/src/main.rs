//! `etcd-operator-webhook`: parse flags, install the crypto provider, serve until SIGTERM or
//! SIGINT, then report not ready for `--shutdown-drain`, finish in-flight requests and exit.

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use webhook::Config;

/// The webhook's flags, and how the process leaves.
#[derive(Debug, Parser)]
#[command(
    name = "etcd-operator-webhook",
    version,
    about = "Admission webhook for etcd-operator.cozystack.io: validation, defaults and warnings"
)]
struct Flags {
    #[command(flatten)]
    config: Config,

    /// After SIGTERM/SIGINT, how long `/readyz` answers 503 while requests are still served
    /// (e.g. `5s`, `500ms`, `0`), so that endpoints stop routing here before the port closes.
    #[arg(long, env = "WEBHOOK_SHUTDOWN_DRAIN", default_value = "5s", value_parser = parse_duration)]
    shutdown_drain: Duration,
}

/// `500ms`, `5s`, `1m`, or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a duration such as 5s, 500ms or 0");
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let n: u64 = number.parse().map_err(|_| invalid())?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(invalid),
        _ => Err(invalid()),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    certs::install_default_provider();
    let Flags {
        config,
        shutdown_drain,
    } = Flags::parse();

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: `kubectl logs` of the Pod shows plain text.
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(filter);
    if config.log_json {
        subscriber.json().init();
    } else {
        subscriber.init();
    }

    let running = webhook::start(config)
        .await
        .context("starting etcd-operator-webhook")?;
    wait_for_termination().await?;
    tracing::info!("shutting down: draining in-flight admission requests");
    running.shutdown(shutdown_drain).await;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_termination() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutdown_drain_defaults_to_five_seconds_and_takes_units() {
        let flags = Flags::parse_from(["etcd-operator-webhook"]);
        assert_eq!(flags.shutdown_drain, Duration::from_secs(5));
        let flags = Flags::parse_from(["etcd-operator-webhook", "--shutdown-drain=250ms"]);
        assert_eq!(flags.shutdown_drain, Duration::from_millis(250));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        for bad in ["", "s", "5h", "-1s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
