//! `kubectl etcd`: a kubectl plugin for the operator's EtcdClusters (the binary `kubectl-etcd`
//! on the PATH). Each command reads or creates the operator's objects with the user's own
//! credentials; it never talks to etcd itself except through `kubectl etcd etcdctl`, which runs
//! etcdctl inside a member Pod.

mod connect;
mod defrag;
mod error;
mod etcdctl;
#[cfg(test)]
mod fixtures;
mod follow;
mod format;
mod members;
mod objects;
mod recover;
mod snapshot;
mod status;

use clap::{Parser, Subcommand};

use crate::error::Error;
use crate::objects::Objects;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-etcd",
    bin_name = "kubectl etcd",
    version,
    about = "Status, snapshots, recovery, defragmentation and etcdctl for etcd-operator's EtcdClusters"
)]
struct Cli {
    #[command(flatten)]
    kube: connect::KubeFlags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Members (role, readiness, version, DB size, raft index, alarms), conditions, the newest
    /// verified snapshot and what the operator is doing.
    Status(status::Args),
    /// Take a snapshot now (an EtcdSnapshot with a unique name); with --wait, follow it to
    /// Verified.
    Snapshot(snapshot::Args),
    /// Rebuild a cluster that lost its quorum, from its surviving member or a snapshot: prints
    /// what is kept and lost, asks, creates the EtcdRecovery and follows it to Complete.
    Recover(recover::Args),
    /// Defragment the cluster's members now (an EtcdDefrag with a unique name), followed to
    /// Complete.
    Defrag(defrag::Args),
    /// Run etcdctl in a member Pod with the cluster's endpoint, TLS files and root credentials:
    /// `kubectl etcd etcdctl <cluster> -- <etcdctl args>`. Exits with etcdctl's status.
    Etcdctl(etcdctl::Args),
}

async fn run(cli: Cli) -> Result<i32, Error> {
    // Bad arguments are refused before the kubeconfig is read.
    match &cli.command {
        Command::Recover(args) => args.check()?,
        Command::Snapshot(args) => snapshot::destination(args).map(|_| ())?,
        _ => {}
    }
    let session = cli.kube.connect().await?;
    let objects = Objects {
        client: session.client,
        namespace: session.namespace,
    };
    match &cli.command {
        Command::Status(args) => status::run(&objects, args).await.map(|()| 0),
        Command::Snapshot(args) => snapshot::run(&objects, args).await.map(|()| 0),
        Command::Recover(args) => recover::run(&objects, args).await.map(|()| 0),
        Command::Defrag(args) => defrag::run(&objects, args).await.map(|()| 0),
        Command::Etcdctl(args) => etcdctl::run(&objects, args).await,
    }
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    let code = match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
