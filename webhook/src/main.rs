//! `etcd-operator-webhook`: parse flags, install the crypto provider, serve until SIGTERM or
//! SIGINT, then drain in-flight requests and exit.

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use webhook::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    certs::install_default_provider();
    let config = Config::parse();

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter);
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
    running.shutdown().await;
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
