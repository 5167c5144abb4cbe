//! `kubectl etcd recover <cluster> --from-survivor | --from-snapshot <name>`: what the recovery
//! keeps and loses, a confirmation, then an EtcdRecovery with a unique name followed to Complete.
//!
//! The plan printed before anything is created says only what the operator's recovery does
//! (controller/src/recovery/plan.rs, docs/disaster-recovery.md): the survivor is the operator's
//! choice unless named, and the operator writes its exact plan in the EtcdRecovery's
//! `status.plan` before it changes anything; that plan is printed as soon as it is written.

mod plan;

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use api::v1alpha2::{
    EtcdCluster, EtcdRecovery, EtcdRecoverySpec, EtcdSnapshot, LocalReference,
    RecoverySnapshotSource, RecoverySource, SurvivorSource,
};
use kube::ResourceExt;

use crate::error::{Error, Result};
use crate::follow::{follow, parse_timeout};
use crate::objects::Objects;

pub use plan::{check_snapshot, judge, plan_text, recorded_plan, refuse_healthy, Source};

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// The EtcdCluster.
    pub cluster: String,
    /// Rebuild from the member holding the most committed data (or --member).
    #[arg(long, conflicts_with = "from_snapshot")]
    pub from_survivor: bool,
    /// With --from-survivor: rebuild from this EtcdMember instead of the operator's choice.
    #[arg(long, requires = "from_survivor", value_name = "ETCDMEMBER")]
    pub member: Option<String>,
    /// Rebuild from this EtcdSnapshot (Complete and Verified) of the cluster.
    #[arg(long, value_name = "ETCDSNAPSHOT")]
    pub from_snapshot: Option<String>,
    /// Restore a snapshot that is not Verified=True (spec.allowUnverifiedSnapshot).
    #[arg(long, requires = "from_snapshot")]
    pub allow_unverified: bool,
    /// Recover a cluster that still has a working quorum: every write after the snapshot, or
    /// every member but one, is discarded (spec.confirmHealthyClusterRollback).
    #[arg(long)]
    pub confirm_healthy_rollback: bool,
    /// Do not ask for confirmation (needed without a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// How long to follow the recovery.
    #[arg(long, default_value = "30m", value_parser = parse_timeout)]
    pub timeout: Duration,
}

/// Ask on the terminal; refuse without one (a pipe or a script must say --yes).
fn confirm(cluster: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(Error::Refused(
            "stdin is not a terminal, so the recovery cannot be confirmed: read the plan above and \
             run the command again with --yes"
                .into(),
        ));
    }
    print!("Recover EtcdCluster {cluster} as above? Type yes to go on: ");
    std::io::stdout().flush().ok();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Error::Refused(format!("reading the answer: {e}")))?;
    if answer.trim() != "yes" {
        return Err(Error::Refused(format!(
            "the answer was {:?}, not yes",
            answer.trim()
        )));
    }
    Ok(())
}

impl Args {
    /// The arguments alone, before anything is read: exactly one source.
    pub fn check(&self) -> Result<()> {
        if !self.from_survivor && self.from_snapshot.is_none() {
            return Err(Error::Usage(
                "say what to rebuild from: --from-survivor (the member holding the most data) or \
                 --from-snapshot <etcdsnapshot>"
                    .into(),
            ));
        }
        Ok(())
    }
}

pub async fn run(o: &Objects, args: &Args) -> Result<()> {
    let (cluster, raw): (EtcdCluster, _) = o.get_with_json(&args.cluster).await?;
    let members = crate::members::of_cluster(o, &args.cluster, &raw)
        .await?
        .0
        .members;
    let snapshot = match &args.from_snapshot {
        Some(name) => Some(o.get::<EtcdSnapshot>(name).await?),
        None => None,
    };
    let source = match &snapshot {
        Some(s) => {
            check_snapshot(&cluster, s, args.allow_unverified)?;
            Source::Snapshot(s)
        }
        None => Source::Survivor(args.member.as_deref()),
    };
    if let Some(member) = &args.member {
        if !members.iter().any(|m| &m.name == member) {
            return Err(Error::NotFound {
                kind: "EtcdMember",
                name: member.clone(),
                namespace: o.namespace.clone(),
                hint: format!(
                    ": --member names one of the cluster's EtcdMembers: {}",
                    members
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    refuse_healthy(&cluster, args.confirm_healthy_rollback)?;
    print!(
        "{}",
        plan_text(
            &cluster,
            &members,
            &source,
            k8s_openapi::jiff::Timestamp::now()
        )
    );
    if !args.yes {
        confirm(&args.cluster)?;
    }
    let recovery_source = match &args.from_snapshot {
        Some(name) => RecoverySource {
            snapshot: Some(RecoverySnapshotSource::named(name.clone())),
            ..Default::default()
        },
        None => RecoverySource {
            survivor: Some(SurvivorSource {
                member: args.member.clone(),
            }),
            ..Default::default()
        },
    };
    let mut recovery = EtcdRecovery::new(
        "",
        EtcdRecoverySpec {
            cluster_ref: LocalReference {
                name: cluster.name_any(),
            },
            source: recovery_source,
            confirm_healthy_cluster_rollback: args.confirm_healthy_rollback.then_some(true),
            allow_unverified_snapshot: args.allow_unverified.then_some(true),
        },
    );
    recovery.metadata.name = None;
    recovery.metadata.generate_name = Some(format!("{}-recovery-", args.cluster));
    let created = o.create(&recovery).await?;
    let name = created.name_any();
    println!(
        "EtcdRecovery {name} created; following it (Ctrl-C stops following, not the recovery)"
    );
    let mut plan_shown = false;
    follow(o, &name, args.timeout, |r: &EtcdRecovery| {
        if !plan_shown {
            if let Some(plan) = recorded_plan(r) {
                print!("{plan}");
                plan_shown = true;
            }
        }
        judge(r)
    })
    .await
    .map(|_| ())
}
