//! `kubectl etcd snapshot <cluster>`: an EtcdSnapshot with a unique name, and with `--wait`
//! followed until it is Verified (or Complete, when it is not verified) or Failed.

use std::time::Duration;

use api::v1alpha2::{
    EtcdCluster, EtcdSnapshot, EtcdSnapshotSchedule, EtcdSnapshotSpec, LocalReference, PvcLocation,
    S3Location, S3WebIdentity, SecretReference, SnapshotDestination, SnapshotPhase,
};
use kube::ResourceExt;

use crate::error::{Error, Result};
use crate::follow::{follow, parse_timeout, with_reason, Progress};
use crate::objects::Objects;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// The EtcdCluster.
    pub cluster: String,
    /// Where to store it: `s3://<bucket>[/<key prefix>]` or `pvc://<claim>[/<directory>]`
    /// (spec.destination). Default: the destination of the cluster's EtcdSnapshotSchedule, else
    /// of its newest EtcdSnapshot.
    #[arg(long, value_name = "URI")]
    pub to: Option<String>,
    /// S3 endpoint URL (spec.destination.s3.endpoint; empty for AWS S3).
    #[arg(long)]
    pub s3_endpoint: Option<String>,
    /// S3 region (spec.destination.s3.region).
    #[arg(long)]
    pub s3_region: Option<String>,
    /// Path-style S3 addressing, as MinIO and Ceph need (spec.destination.s3.forcePathStyle).
    #[arg(long)]
    pub s3_force_path_style: bool,
    /// The Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
    /// (spec.destination.s3.credentialsSecretRef).
    #[arg(long, value_name = "SECRET")]
    pub s3_credentials_secret: Option<String>,
    /// Without a credentials Secret: the ServiceAccount the snapshot's Pods run under, for cloud
    /// identity such as EKS IRSA (spec.destination.s3.serviceAccountName).
    #[arg(long, value_name = "NAME")]
    pub s3_service_account: Option<String>,
    /// Without a credentials Secret: the role to assume with the ServiceAccount's projected
    /// token (spec.destination.s3.webIdentity.roleArn; audience sts.amazonaws.com).
    #[arg(long, value_name = "ARN")]
    pub s3_role_arn: Option<String>,
    /// Do not verify the snapshot once stored (spec.verify: false).
    #[arg(long)]
    pub no_verify: bool,
    /// Follow it until Verified (Complete with --no-verify) or Failed.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait follows it.
    #[arg(long, default_value = "10m", value_parser = parse_timeout)]
    pub timeout: Duration,
}

impl Args {
    fn has_s3_flags(&self) -> bool {
        self.s3_endpoint.is_some()
            || self.s3_region.is_some()
            || self.s3_force_path_style
            || self.s3_credentials_secret.is_some()
            || self.s3_service_account.is_some()
            || self.s3_role_arn.is_some()
    }
}

/// The destination `--to` and the `--s3-*` flags say.
pub fn destination(args: &Args) -> Result<Option<SnapshotDestination>> {
    let Some(to) = &args.to else {
        if args.has_s3_flags() {
            return Err(Error::Usage(
                "--s3-endpoint, --s3-region, --s3-force-path-style and --s3-credentials-secret \
                 need --to s3://<bucket>[/<prefix>]"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let split = |rest: &str| -> (String, Option<String>) {
        match rest.split_once('/') {
            Some((head, tail)) if !tail.trim_matches('/').is_empty() => {
                (head.to_string(), Some(tail.to_string()))
            }
            Some((head, _)) => (head.to_string(), None),
            None => (rest.to_string(), None),
        }
    };
    if let Some(rest) = to.strip_prefix("s3://") {
        let (bucket, key) = split(rest);
        if bucket.is_empty() {
            return Err(Error::Usage(format!(
                "--to {to}: no bucket; give s3://<bucket>[/<key prefix>]"
            )));
        }
        return Ok(Some(SnapshotDestination {
            s3: Some(S3Location {
                endpoint: args.s3_endpoint.clone(),
                bucket,
                key,
                region: args.s3_region.clone(),
                force_path_style: args.s3_force_path_style.then_some(true),
                credentials_secret_ref: args
                    .s3_credentials_secret
                    .clone()
                    .map(|name| SecretReference { name }),
                service_account_name: args.s3_service_account.clone(),
                web_identity: args.s3_role_arn.clone().map(|role_arn| S3WebIdentity {
                    role_arn,
                    ..Default::default()
                }),
            }),
            pvc: None,
        }));
    }
    if let Some(rest) = to.strip_prefix("pvc://") {
        if args.has_s3_flags() {
            return Err(Error::Usage(format!(
                "--to {to} is a PVC: the --s3-* flags apply only to --to s3://..."
            )));
        }
        let (claim_name, sub_path) = split(rest);
        if claim_name.is_empty() {
            return Err(Error::Usage(format!(
                "--to {to}: no claim; give pvc://<claim>[/<directory>]"
            )));
        }
        return Ok(Some(SnapshotDestination {
            s3: None,
            pvc: Some(PvcLocation {
                claim_name,
                sub_path,
            }),
        }));
    }
    Err(Error::Usage(format!(
        "--to {to}: give s3://<bucket>[/<key prefix>] or pvc://<claim>[/<directory>]"
    )))
}

/// Without --to: the cluster's one EtcdSnapshotSchedule's destination, else its newest
/// snapshot's; with where it came from.
pub fn default_destination(
    cluster: &str,
    schedules: &[EtcdSnapshotSchedule],
    snapshots: &[EtcdSnapshot],
) -> Result<(SnapshotDestination, String)> {
    let mine: Vec<_> = schedules
        .iter()
        .filter(|s| s.spec.cluster_ref.name == cluster)
        .collect();
    match mine.as_slice() {
        [one] => {
            return Ok((
                one.spec.snapshot_template.destination.clone(),
                format!("EtcdSnapshotSchedule {}", one.name_any()),
            ))
        }
        [] => {}
        many => {
            let names: Vec<String> = many.iter().map(|s| s.name_any()).collect();
            return Err(Error::Usage(format!(
                "cluster {cluster} has {} EtcdSnapshotSchedules ({}): say where with --to",
                names.len(),
                names.join(", ")
            )));
        }
    }
    snapshots
        .iter()
        .filter(|s| s.spec.cluster_ref.name == cluster)
        .max_by_key(|s| s.metadata.creation_timestamp.clone())
        .map(|s| {
            (
                s.spec.destination.clone(),
                format!("the newest EtcdSnapshot {}", s.name_any()),
            )
        })
        .ok_or_else(|| {
            Error::Usage(format!(
                "cluster {cluster} has no EtcdSnapshotSchedule and no EtcdSnapshot to take the \
                 destination from: say where with --to s3://<bucket>[/<prefix>] or \
                 --to pvc://<claim>[/<directory>]"
            ))
        })
}

/// Where a snapshot stands: Verified (or Complete when not verified) is done; Failed, or
/// Verified=False, failed with the condition's message.
pub fn judge(s: &EtcdSnapshot) -> Progress {
    let st = s.status.clone().unwrap_or_default();
    let message = |type_: &str| {
        st.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_default()
    };
    let uri = st
        .artifact
        .as_ref()
        .map(|a| a.uri.clone())
        .unwrap_or_default();
    match st.phase {
        Some(SnapshotPhase::Failed) => Progress::Failed(message("Ready")),
        Some(SnapshotPhase::Complete) if !s.spec.verify() => Progress::Done(format!(
            "Complete (not verified: spec.verify is false), {uri}"
        )),
        Some(SnapshotPhase::Complete) => match st.verified() {
            Some(true) => Progress::Done(format!("Verified ({}), {uri}", message("Verified"))),
            Some(false) => Progress::Failed(format!(
                "stored at {uri} but not verified: {}",
                message("Verified")
            )),
            None => Progress::Going("Complete, being verified".into()),
        },
        phase => Progress::Going(with_reason(
            format!("{:?}", phase.unwrap_or_default()),
            &message("Ready"),
        )),
    }
}

pub async fn run(o: &Objects, args: &Args) -> Result<()> {
    let cluster: EtcdCluster = o.get(&args.cluster).await?;
    let (destination, from) = match destination(args)? {
        Some(d) => (d, "--to".to_string()),
        None => default_destination(
            &args.cluster,
            &o.list::<EtcdSnapshotSchedule>(None).await?,
            &o.list::<EtcdSnapshot>(None).await?,
        )?,
    };
    let mut snapshot = EtcdSnapshot::new(
        "",
        EtcdSnapshotSpec {
            cluster_ref: LocalReference {
                name: cluster.name_any(),
            },
            destination,
            verify: args.no_verify.then_some(false),
        },
    );
    snapshot.metadata.name = None;
    snapshot.metadata.generate_name = Some(format!("{}-snapshot-", args.cluster));
    let created = o.create(&snapshot).await?;
    let name = created.name_any();
    println!(
        "EtcdSnapshot {name} created (cluster {}, destination from {from})",
        args.cluster
    );
    if !args.wait {
        return Ok(());
    }
    follow(o, &name, args.timeout, judge).await.map(|_| ())
}

#[cfg(test)]
mod tests;
