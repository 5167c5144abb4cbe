//! `snapshot-agent save`: dial etcd, check the destination's overwrite guard, stream the
//! snapshot (maintenance `Snapshot`) to S3 or a PVC and report the artifact.

use std::path::PathBuf;

use futures::Stream;

use super::dial::{self, EtcdTls};
use super::{check_snapshot_name, pvc, Artifact};
use crate::objectstore::{self, Failure, Location, S3Args, S3};

#[derive(clap::Args, Debug, Clone)]
pub struct SaveArgs {
    /// etcd client URLs, comma-separated (https:// with TLS).
    #[arg(long, value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    /// The EtcdSnapshot's name: the stored file is `<name>.db`.
    #[arg(long)]
    pub snapshot_name: String,
    /// The EtcdSnapshot's UID, stamped on the stored object (the overwrite guard).
    #[arg(long)]
    pub snapshot_uid: String,
    #[command(flatten)]
    pub tls: EtcdTls,
    #[command(flatten)]
    pub s3: S3Args,
    /// PVC destination: the claim's name (for the URI).
    #[arg(long, requires = "pvc_mount")]
    pub pvc_claim: Option<String>,
    /// Where the claim is mounted.
    #[arg(long, requires = "pvc_claim")]
    pub pvc_mount: Option<PathBuf>,
    /// Directory inside the volume.
    #[arg(long)]
    pub pvc_sub_path: Option<String>,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
}

/// Where this run stores the snapshot.
enum Destination {
    S3(S3, Location),
    Pvc(pvc::Target, String),
}

pub async fn run(args: SaveArgs) -> Result<Artifact, Failure> {
    check_snapshot_name(&args.snapshot_name)?;
    if args.snapshot_uid.trim().is_empty() {
        return Err(Failure::permanent(
            "--snapshot-uid is empty; pass the EtcdSnapshot's metadata.uid",
        ));
    }
    let uid = args.snapshot_uid.trim().to_string();
    let destination = destination(&args).await?;
    // The guard first: a refused destination never loads etcd.
    let uri = match &destination {
        Destination::S3(s3, at) => {
            s3.check_overwrite(at, &uid).await?;
            at.uri()
        }
        Destination::Pvc(target, claim) => {
            let uri = format!("pvc://{claim}/{}", target.relative);
            pvc::check_overwrite(&target.file, &uid, &uri)?;
            uri
        }
    };
    // No request timeout: it would also bound the snapshot stream (grpc-timeout).
    let etcd = dial::connect(&args.endpoints, &args.tls).await?;
    // What verification compares the stored snapshot with (agent/verify.rs).
    let recorded = super::verify::record(&etcd).await;
    let stream = etcd.maintenance_client().snapshot().await.map_err(|e| {
        Failure::transient(format!(
            "starting the snapshot on {}: {e}",
            args.endpoints.join(",")
        ))
    })?;
    tracing::info!(uri, "streaming the snapshot");
    let chunks = chunks(stream);
    let done = match &destination {
        Destination::S3(s3, at) => s3.save(at, &uid, chunks).await?,
        Destination::Pvc(target, _) => pvc::write(target, &uid, chunks).await?,
    };
    tracing::info!(uri, size = done.size, sha256 = %done.sha256, "snapshot stored");
    Ok(Artifact {
        uri,
        size_bytes: done.size,
        checksum: format!("sha256:{}", done.sha256),
        hash_kv: super::verify::confirm(&etcd, recorded).await,
    })
}

async fn destination(args: &SaveArgs) -> Result<Destination, Failure> {
    match (&args.s3.s3_bucket, &args.pvc_claim, &args.pvc_mount) {
        (Some(_), Some(_), _) => Err(Failure::permanent(
            "both --s3-bucket and --pvc-claim are set; a snapshot goes to exactly one destination",
        )),
        (Some(bucket), None, _) => {
            if bucket.trim().is_empty() {
                return Err(Failure::permanent(
                    "--s3-bucket is empty; set spec.destination.s3.bucket",
                ));
            }
            let at = Location {
                bucket: bucket.clone(),
                key: objectstore::snapshot_key(args.s3.s3_key.as_deref(), &args.snapshot_name),
            };
            Ok(Destination::S3(S3::new(&args.s3).await?, at))
        }
        (None, Some(claim), Some(mount)) => {
            let target = pvc::target(mount, args.pvc_sub_path.as_deref(), &args.snapshot_name)?;
            Ok(Destination::Pvc(target, claim.clone()))
        }
        _ => Err(Failure::permanent(
            "no destination: pass --s3-bucket (S3) or --pvc-claim with --pvc-mount (PVC)",
        )),
    }
}

/// etcd's snapshot stream as chunks; the stream is pulled only as the consumer asks.
fn chunks(
    stream: etcd_client::SnapshotStreaming,
) -> impl Stream<Item = Result<Vec<u8>, Failure>> + Unpin {
    Box::pin(futures::stream::unfold(Some(stream), |state| async move {
        let mut stream = state?;
        match stream.message().await {
            Ok(Some(msg)) => Some((Ok(msg.blob().to_vec()), Some(stream))),
            Ok(None) => None,
            Err(e) => Some((
                Err(Failure::transient(format!(
                    "the snapshot stream from etcd broke: {e}"
                ))),
                None,
            )),
        }
    }))
}
