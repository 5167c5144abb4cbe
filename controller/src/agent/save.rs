//! `snapshot-agent save`: dial etcd, check the destination's overwrite guard, stream the
//! snapshot (maintenance `Snapshot`) to S3 or a PVC and report the artifact.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use futures::Stream;

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
    /// CA bundle (PEM) of etcd's client certificates.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for mTLS, with --key-file.
    #[arg(long, requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    #[arg(long, requires = "cert_file")]
    pub key_file: Option<PathBuf>,
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
    let etcd = connect(&args).await?;
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

async fn connect(args: &SaveArgs) -> Result<Client, Failure> {
    // No request timeout: it would also bound the snapshot stream (grpc-timeout). Keep-alives
    // notice a member that went away mid-stream.
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(10))
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(10));
    if let Some(ca) = &args.ca_file {
        let ca = read(ca, "--ca-file")?;
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        if let (Some(cert), Some(key)) = (&args.cert_file, &args.key_file) {
            tls = tls.identity(Identity::from_pem(
                read(cert, "--cert-file")?,
                read(key, "--key-file")?,
            ));
        }
        options = options.with_tls(tls);
    } else if args.endpoints.iter().any(|e| e.starts_with("https://")) {
        return Err(Failure::permanent(
            "https:// endpoints need --ca-file (the CA of etcd's client certificates)",
        ));
    }
    if let Ok(user) = std::env::var("ETCD_USERNAME") {
        if !user.is_empty() {
            let password = std::env::var("ETCD_PASSWORD").unwrap_or_default();
            options = options.with_user(user, password);
        }
    }
    let connect = Client::connect(&args.endpoints, Some(options));
    let client = tokio::time::timeout(Duration::from_secs(30), connect)
        .await
        .map_err(|_| {
            Failure::transient(format!(
                "etcd at {} did not answer within 30s; check the cluster is up and reachable",
                args.endpoints.join(",")
            ))
        })?
        .map_err(|e| {
            let text = e.to_string();
            let msg = format!("connecting to etcd at {}: {text}", args.endpoints.join(","));
            if text.contains("authentication failed") || text.contains("invalid auth token") {
                Failure::permanent(format!(
                    "{msg}; check ETCD_USERNAME/ETCD_PASSWORD (the cluster's root credentials)"
                ))
            } else {
                Failure::transient(msg)
            }
        })?;
    Ok(client)
}

fn read(path: &PathBuf, flag: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::permanent(format!("{flag} {}: {e}", path.display())))
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
