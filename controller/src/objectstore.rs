//! The object store, shared by the snapshot agent and the schedule's retention: the S3 client
//! (rustls with an optional private CA, checksum headers only when an operation requires them),
//! its settings ([`S3Args`]), the key layout, the overwrite guard, HeadObject, deletion (plain,
//! owned, and of stale multipart uploads), and the failure type every call returns.
//!
//! It must not hold what only the agent does (the streaming upload and the download live in
//! `agent/s3.rs` as more methods of [`S3`]) nor know any controller.

use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    SharedCredentialsProvider, SharedHttpClient,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::head_object::{HeadObjectError, HeadObjectOutput};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};

use crate::web_identity::{env_value, WebIdentity};

mod list;
pub use list::Listed;

/// Object metadata key of the snapshot's UID (`x-amz-meta-snapshot-uid`).
pub const META_UID: &str = "snapshot-uid";
/// Object metadata key of the snapshot's sha256 (hex), as agents before the checksum object
/// recorded it (a same-key copy of the object); still read, never written.
pub const META_SHA256: &str = "sha256";
/// Metadata key, on a snapshot's checksum object, of the ETag of the snapshot object whose
/// sha256 it records: a checksum object binds to exactly one stored upload.
pub const META_OBJECT_ETAG: &str = "object-etag";
/// The checksum object stored next to every snapshot object: `<key>.sha256`, in `sha256sum`
/// format, like the `<file>.sha256` sidecar of a PVC snapshot.
pub const CHECKSUM_SUFFIX: &str = ".sha256";
/// A checksum object is one line; anything longer at its key is not one (and is not read).
const MAX_CHECKSUM_OBJECT: i64 = 4096;

/// Where an S3 object lives and how to reach it (`--s3-*`); credentials come from the
/// environment: a static key (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), else the standard
/// AWS credential chain ([`S3::new`]).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct S3Args {
    /// Bucket; selects the S3 backend.
    #[arg(long)]
    pub s3_bucket: Option<String>,
    /// Save: key prefix (the agent appends `<snapshot-name>.db`). Restore: the exact object key.
    #[arg(long)]
    pub s3_key: Option<String>,
    /// Endpoint URL (`https://minio.example:9000`); AWS S3 when absent.
    #[arg(long)]
    pub s3_endpoint: Option<String>,
    #[arg(long, default_value = "us-east-1")]
    pub s3_region: String,
    /// Path-style addressing (`<endpoint>/<bucket>/<key>`), as MinIO and Ceph usually need.
    #[arg(long)]
    pub s3_force_path_style: bool,
    /// PEM CA bundle trusted for the endpoint instead of the system roots.
    #[arg(long)]
    pub s3_ca_file: Option<PathBuf>,
}

/// A failure, with the message the termination log carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// A retry with the same input cannot succeed (exit 2).
    pub permanent: bool,
}

impl Failure {
    /// Bad input, refused overwrite, denied access: exit 2.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: true,
        }
    }

    /// Network, server or disk trouble a retry may get past: exit 1.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: false,
        }
    }

    pub fn exit_code(&self) -> u8 {
        if self.permanent {
            2
        } else {
            1
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Lower-case hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The object or file name of a snapshot: `<name>.db`.
pub fn file_name(snapshot_name: &str) -> String {
    format!("{snapshot_name}.db")
}

/// Where the object lives, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub bucket: String,
    pub key: String,
}

impl Location {
    pub fn uri(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }

    /// Where the snapshot object's checksum object lives: `<key>.sha256` in the same bucket.
    pub fn checksum(&self) -> Location {
        Location {
            bucket: self.bucket.clone(),
            key: format!("{}{CHECKSUM_SUFFIX}", self.key),
        }
    }
}

/// The key a snapshot named `name` is stored at: `<name>.db` when `prefix` is empty,
/// `<prefix><name>.db` when it ends in `/`, else `<prefix>/<name>.db`.
pub fn snapshot_key(prefix: Option<&str>, name: &str) -> String {
    let file = file_name(name);
    match prefix.unwrap_or("") {
        "" => file,
        p if p.ends_with('/') => format!("{p}{file}"),
        p => format!("{p}/{file}"),
    }
}

/// Where a client's credentials come from, for the messages that say what to fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialSource {
    /// A static access key (`credentialsSecretRef`, or the operator's read of that Secret).
    Secret,
    /// The standard AWS credential chain of the process: environment, web identity token file,
    /// container and instance metadata (cloud identity, docs/cloud-identity.md).
    Chain,
}

/// A connected S3 client and the settings it was built from (for messages). A clone shares
/// the client (its connection pool).
#[derive(Clone)]
pub struct S3 {
    pub(crate) client: aws_sdk_s3::Client,
    pub(crate) endpoint: String,
    /// Whether a part's body is hashed into its SigV4 signature: only over plain HTTP
    /// ([`signs_payload`]).
    pub(crate) sign_payload: bool,
    pub(crate) credentials: CredentialSource,
}

impl S3 {
    /// Build the client from the flags and the environment: the static key in
    /// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (a `credentialsSecretRef`) when they are
    /// set, else the standard AWS credential chain ([`CredentialSource::Chain`]) through the same
    /// HTTP client (its TLS settings and private CA serve STS and the metadata endpoints too).
    pub async fn new(args: &S3Args) -> Result<Self, Failure> {
        match (
            env_value("AWS_ACCESS_KEY_ID"),
            env_value("AWS_SECRET_ACCESS_KEY"),
        ) {
            (Some(access), Some(secret)) => Self::with_credentials(args, access, secret),
            (None, None) => Self::from_chain(args).await,
            (access, _) => {
                let missing = if access.is_none() {
                    "AWS_ACCESS_KEY_ID"
                } else {
                    "AWS_SECRET_ACCESS_KEY"
                };
                Err(Failure::permanent(format!(
                    "{missing} is not set but the other half of the key is: put both \
                     AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the credentials Secret \
                     (credentialsSecretRef), or remove credentialsSecretRef to use the Pod's \
                     cloud identity"
                )))
            }
        }
    }

    /// Build the client from the flags and the given credentials (the schedule controller
    /// reads them from the destination's Secret).
    pub fn with_credentials(
        args: &S3Args,
        access: String,
        secret: String,
    ) -> Result<Self, Failure> {
        let http = http_client(args)?;
        let credentials = Credentials::new(access, secret, None, None, "environment");
        Ok(Self::build(
            args,
            http,
            SharedCredentialsProvider::new(credentials),
            CredentialSource::Secret,
        ))
    }

    /// Build the client from the flags and the standard AWS credential chain of this process
    /// (a destination without `credentialsSecretRef`). A web identity the environment names is
    /// that chain's pick once there is no static key; it is traded at STS by
    /// [`crate::web_identity`] (which, unlike `aws-config`'s provider, takes MinIO's answer).
    pub async fn from_chain(args: &S3Args) -> Result<Self, Failure> {
        let http = http_client(args)?;
        let region = Region::new(args.s3_region.clone());
        if let Some(web) = WebIdentity::from_env(http.clone(), region.clone()) {
            return Ok(Self::build(
                args,
                http,
                SharedCredentialsProvider::new(web),
                CredentialSource::Chain,
            ));
        }
        let provider = aws_config::provider_config::ProviderConfig::default()
            .with_http_client(http.clone())
            .with_region(Some(region.clone()));
        let chain = aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
            .region(region)
            .configure(provider)
            .build()
            .await;
        Ok(Self::build(
            args,
            http,
            SharedCredentialsProvider::new(chain),
            CredentialSource::Chain,
        ))
    }

    fn build(
        args: &S3Args,
        http: SharedHttpClient,
        credentials: SharedCredentialsProvider,
        source: CredentialSource,
    ) -> Self {
        let mut config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(args.s3_region.clone()))
            .credentials_provider(credentials)
            .force_path_style(args.s3_force_path_style)
            .http_client(http)
            // aws-sdk-s3 >= 1.69 adds CRC checksums to every upload by default; some MinIO and
            // Ceph versions reject them. The sha256 is computed and recorded by the agent.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .retry_config(RetryConfig::standard().with_max_attempts(3))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .read_timeout(Duration::from_secs(60))
                    .operation_attempt_timeout(Duration::from_secs(300))
                    .build(),
            );
        if let Some(ep) = &args.s3_endpoint {
            config = config.endpoint_url(ep);
        }
        Self {
            client: aws_sdk_s3::Client::from_conf(config.build()),
            sign_payload: signs_payload(args.s3_endpoint.as_deref()),
            endpoint: args
                .s3_endpoint
                .clone()
                .unwrap_or_else(|| format!("AWS S3 ({})", args.s3_region)),
            credentials: source,
        }
    }

    /// What to check when the store rejects the credentials, by where they came from.
    pub(crate) fn credentials_hint(&self) -> &'static str {
        match self.credentials {
            CredentialSource::Secret => {
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the credentials Secret \
                 (credentialsSecretRef)"
            }
            CredentialSource::Chain => {
                "the location has no credentialsSecretRef, so the credentials come from the Pod's \
                 cloud identity: check serviceAccountName and webIdentity (the role and the STS \
                 that trusts the cluster's service-account issuer), or set credentialsSecretRef \
                 (docs/cloud-identity.md)"
            }
        }
    }

    /// Delete the object (retention) and then its checksum object; a missing one is not an
    /// error.
    pub async fn delete(&self, at: &Location) -> Result<(), Failure> {
        for target in [at.clone(), at.checksum()] {
            self.client
                .delete_object()
                .bucket(&target.bucket)
                .key(&target.key)
                .send()
                .await
                .map_err(|e| {
                    Failure::transient(format!(
                        "deleting {} at {}: {}",
                        target.uri(),
                        self.endpoint,
                        e.message().unwrap_or("request failed")
                    ))
                })?;
        }
        Ok(())
    }

    /// Abort every multipart upload in progress at exactly `at.key`: what a snapshot's agent
    /// left when it was killed without its SIGTERM handler running (SIGKILL, a lost Node).
    /// Retention calls this when it prunes the snapshot. Returns how many were aborted.
    pub async fn abort_uploads(&self, at: &Location) -> Result<usize, Failure> {
        let mut aborted = 0;
        let mut key_marker: Option<String> = None;
        let mut id_marker: Option<String> = None;
        loop {
            let listed = self
                .client
                .list_multipart_uploads()
                .bucket(&at.bucket)
                .prefix(&at.key)
                .set_key_marker(key_marker.take())
                .set_upload_id_marker(id_marker.take())
                .send()
                .await
                .map_err(|e| self.request_failure("ListMultipartUploads", at, &e))?;
            for upload in listed.uploads() {
                let (Some(key), Some(id)) = (upload.key(), upload.upload_id()) else {
                    continue;
                };
                if key != at.key {
                    continue;
                }
                match self
                    .client
                    .abort_multipart_upload()
                    .bucket(&at.bucket)
                    .key(&at.key)
                    .upload_id(id)
                    .send()
                    .await
                {
                    Ok(_) => aborted += 1,
                    Err(e) if status_of(&e) == Some(404) => {}
                    Err(e) => return Err(self.request_failure("AbortMultipartUpload", at, &e)),
                }
                tracing::info!(uri = %at.uri(), upload_id = id, "aborted a stale multipart upload");
            }
            if listed.is_truncated() != Some(true) {
                return Ok(aborted);
            }
            key_marker = listed.next_key_marker().map(str::to_string);
            id_marker = listed.next_upload_id_marker().map(str::to_string);
            if key_marker.is_none() && id_marker.is_none() {
                return Ok(aborted);
            }
        }
    }

    /// Delete the object at `at` if its UID metadata names `uid` (the snapshot wrote it), for
    /// a Failed snapshot whose object may have been stored anyway (the agent crashed after
    /// CompleteMultipartUpload, the Job was lost). `Ok(true)`: deleted; `Ok(false)`: no
    /// object, or another snapshot's (or a foreign one), which stays.
    pub async fn delete_if_owned(&self, at: &Location, uid: &str) -> Result<bool, Failure> {
        match self.head_object(at).await {
            Ok(Some(obj)) if owner_of(&obj) == Some(uid) => {
                self.delete(at).await?;
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) => Err(self.request_failure("HeadObject", at, &e)),
        }
    }

    /// The overwrite guard: a missing object may be written, an object stamped with `uid` lets
    /// the upload go on (a retried Job: [`S3::save`] then reports that object); anything else, including an answer the agent cannot read
    /// (403 without ListBucket), refuses.
    pub async fn check_overwrite(&self, at: &Location, uid: &str) -> Result<(), Failure> {
        match self.head_object(at).await {
            Ok(None) => Ok(()),
            Ok(Some(obj)) => {
                match owner_of(&obj) {
                    Some(o) if o == uid => {
                        tracing::info!(uri = %at.uri(), "the object exists from an earlier attempt of this snapshot; it stays (the completion is conditional) and is what gets reported");
                        Ok(())
                    }
                    Some(o) => Err(Failure::permanent(format!(
                        "{} already holds the snapshot with UID {o}, not this one ({uid}); refusing to overwrite it: \
                         choose another key (spec.destination.s3.key) or snapshot name, or delete the object",
                        at.uri()
                    ))),
                    None => Err(Failure::permanent(format!(
                        "{} already exists and has no {META_UID} metadata (it was not written by this operator); \
                         refusing to overwrite it: choose another key (spec.destination.s3.key) or snapshot name",
                        at.uri()
                    ))),
                }
            }
            Err(e) if status_of(&e) == Some(403) => Err(self.diagnose_forbidden(at).await),
            Err(e) => Err(self.request_failure("HeadObject", at, &e)),
        }
    }

    /// HeadObject carries no error body, so a 403 can be missing ListBucket (a missing key then
    /// reads as 403) or rejected credentials. A one-key listing tells them apart.
    async fn diagnose_forbidden(&self, at: &Location) -> Failure {
        let listing = self
            .client
            .list_objects_v2()
            .bucket(&at.bucket)
            .prefix(&at.key)
            .max_keys(1)
            .send()
            .await;
        match listing {
            Err(e) if is_credentials_error(&e) => Failure::permanent(format!(
                "{} rejected the credentials ({}): {}",
                self.endpoint,
                error_text(&e),
                self.credentials_hint()
            )),
            _ => Failure::permanent(format!(
                "HeadObject of {} was denied (403), so the agent cannot tell whether an object would be \
                 overwritten, and refuses to write (fail closed). Without s3:ListBucket S3 answers 403 even \
                 for a missing key: grant s3:ListBucket on the bucket and s3:GetObject on the key prefix to \
                 the credentials' user",
                at.uri()
            )),
        }
    }

    pub(crate) fn request_failure<E: ProvideErrorMetadata + std::error::Error + 'static>(
        &self,
        what: &str,
        at: &Location,
        e: &SdkError<E, HttpResponse>,
    ) -> Failure {
        let detail = error_text(e);
        if is_credentials_error(e) {
            return Failure::permanent(format!(
                "{what} {}: {} rejected the credentials ({detail}): {}",
                at.uri(),
                self.endpoint,
                self.credentials_hint()
            ));
        }
        match status_of(e) {
            Some(403) => Failure::permanent(format!(
                "{what} {} was denied (403: {detail}): grant the credentials' user s3:PutObject, s3:GetObject, \
                 s3:AbortMultipartUpload and s3:ListBucket on the bucket",
                at.uri()
            )),
            Some(404) if e.code() == Some("NoSuchBucket") => Failure::permanent(format!(
                "{what} {}: the bucket {} does not exist on {}: create it or fix spec.destination.s3.bucket",
                at.uri(),
                at.bucket,
                self.endpoint
            )),
            // No answer: the endpoint, or (cloud identity) the credential chain found nothing.
            None if self.credentials == CredentialSource::Chain => Failure::transient(format!(
                "{what} {} on {} failed: {detail}; check that the endpoint is reachable from the \
                 cluster (spec.destination.s3.endpoint) and that the Pod has credentials: {}",
                at.uri(),
                self.endpoint,
                self.credentials_hint()
            )),
            _ => Failure::transient(format!(
                "{what} {} on {} failed: {detail}; check that the endpoint is reachable from the cluster \
                 (spec.destination.s3.endpoint) and the server is up",
                at.uri(),
                self.endpoint
            )),
        }
    }

    /// Size and recorded sha256 (if any) of the object to restore.
    pub async fn head(&self, at: &Location) -> Result<(u64, Option<String>), Failure> {
        let obj = self
            .head_object(at)
            .await
            .map_err(|e| self.request_failure("HeadObject", at, &e))?
            .ok_or_else(|| {
                Failure::permanent(format!(
                    "the snapshot {} does not exist: fix spec.bootstrap.restore's S3 bucket and key (the exact object key)",
                    at.uri()
                ))
            })?;
        Ok((size_of(&obj, at)?, self.recorded_sha256(at, &obj).await))
    }

    /// The sha256 recorded for the object `obj` (its HeadObject) at `at`: the checksum object
    /// `<key>.sha256` when it is bound to this very object (its `object-etag` metadata is the
    /// object's ETag), else the `sha256` metadata older agents stamped onto the object itself.
    /// `None` when neither exists or the checksum object describes another upload (the object
    /// was replaced or edited since): nothing is guessed.
    pub async fn recorded_sha256(&self, at: &Location, obj: &HeadObjectOutput) -> Option<String> {
        if let Some(sha) = sha256_of(obj) {
            return Some(sha);
        }
        let etag = obj.e_tag()?;
        let sidecar = at.checksum();
        let got = match self
            .client
            .get_object()
            .bucket(&sidecar.bucket)
            .key(&sidecar.key)
            .send()
            .await
        {
            Ok(got) => got,
            Err(e) => {
                if status_of(&e) != Some(404) {
                    tracing::info!(uri = %sidecar.uri(), error = %error_text(&e), "the checksum object cannot be read; no sha256 recorded");
                }
                return None;
            }
        };
        if got.content_length().is_none_or(|n| n > MAX_CHECKSUM_OBJECT) {
            tracing::info!(uri = %sidecar.uri(), "the checksum object is not one line; ignored");
            return None;
        }
        let bound = got
            .metadata()
            .and_then(|m| m.get(META_OBJECT_ETAG))
            .cloned();
        let body = got.body.collect().await.ok()?.into_bytes();
        let sha = parse_checksum(&body)?;
        if bound.as_deref().map(unquote) != Some(unquote(etag)) {
            tracing::info!(uri = %sidecar.uri(), "the checksum object describes another upload of the key; ignored");
            return None;
        }
        Some(sha)
    }

    /// HeadObject of `at`; `Ok(None)` when there is no object there (404).
    pub(crate) async fn head_object(
        &self,
        at: &Location,
    ) -> Result<Option<HeadObjectOutput>, SdkError<HeadObjectError, HttpResponse>> {
        match self
            .client
            .head_object()
            .bucket(&at.bucket)
            .key(&at.key)
            .send()
            .await
        {
            Ok(obj) => Ok(Some(obj)),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Size and sha256 (hex) of what was stored or fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    pub size: u64,
    pub sha256: String,
}

/// The HTTP client of every request of one S3 client (and of its credential chain's STS and
/// metadata calls): rustls on aws-lc, trusting `--s3-ca-file` instead of the system roots when
/// given.
fn http_client(args: &S3Args) -> Result<SharedHttpClient, Failure> {
    if let Some(ep) = &args.s3_endpoint {
        if !(ep.starts_with("http://") || ep.starts_with("https://")) {
            return Err(Failure::permanent(format!(
                "--s3-endpoint {ep:?} is not an http:// or https:// URL; set the S3 endpoint to e.g. https://s3.example.com"
            )));
        }
    }
    let trust = match &args.s3_ca_file {
        Some(path) => {
            let pem = read_ca(path)?;
            TrustStore::empty()
                .with_native_roots(false)
                .with_pem_certificate(pem)
        }
        // Plain HTTP verifies nothing: no roots needed, and none asked of the image.
        None if args
            .s3_endpoint
            .as_deref()
            .is_some_and(|ep| ep.starts_with("http://")) =>
        {
            TrustStore::empty().with_native_roots(false)
        }
        None => {
            system_roots_present(args.s3_endpoint.as_deref())?;
            TrustStore::default()
        }
    };
    let tls_context = TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .map_err(|e| Failure::permanent(format!("building the S3 TLS settings: {e}")))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(tls_context)
        .build_https())
}

/// The system CA store (`/etc/ssl/certs`, or `SSL_CERT_FILE`/`SSL_CERT_DIR`) holds a certificate
/// to verify the https `endpoint` (AWS's when `None`) with. The agent runs in the cluster's own
/// etcd image for a restore: an image without a CA bundle would otherwise fail every TLS
/// handshake with an unknown-issuer error (or, in a debug build, abort).
fn system_roots_present(endpoint: Option<&str>) -> Result<(), Failure> {
    let found = rustls_native_certs::load_native_certs();
    if !found.certs.is_empty() {
        return Ok(());
    }
    let endpoint = endpoint.unwrap_or("the AWS S3 endpoint");
    Err(Failure::permanent(format!(
        "no CA certificates in this container's system store (/etc/ssl/certs; \
         SSL_CERT_FILE/SSL_CERT_DIR) to verify {endpoint} with; run it from an image that has \
         them (the official etcd images do), or give the endpoint's CA with --s3-ca-file"
    )))
}

fn read_ca(path: &Path) -> Result<Vec<u8>, Failure> {
    let pem = std::fs::read(path).map_err(|e| {
        Failure::permanent(format!(
            "--s3-ca-file {}: {e}; point it at a PEM CA bundle",
            path.display()
        ))
    })?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(Failure::permanent(format!(
            "--s3-ca-file {} holds no PEM certificate; point it at the CA bundle of the S3 endpoint",
            path.display()
        )));
    }
    Ok(pem)
}

/// The HTTP status of a service answer (None when no answer came: connect, timeout, ...).
pub(crate) fn status_of<E>(e: &SdkError<E, HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

pub(crate) fn is_credentials_error<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    matches!(
        e.code(),
        Some("InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken" | "ExpiredToken")
    )
}

/// The error's code and message, or its source chain when no answer came.
pub(crate) fn error_text<E: ProvideErrorMetadata + std::error::Error + 'static>(
    e: &SdkError<E, HttpResponse>,
) -> String {
    if let (Some(code), msg) = (e.code(), e.message()) {
        return match msg {
            Some(m) => format!("{code}: {m}"),
            None => code.to_string(),
        };
    }
    if let Some(status) = status_of(e) {
        return format!("HTTP {status}");
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The snapshot UID an object's metadata names (the agent stamps it on every upload).
pub(crate) fn owner_of(obj: &HeadObjectOutput) -> Option<&str> {
    obj.metadata()
        .and_then(|m| m.get(META_UID))
        .map(String::as_str)
}

/// The sha256 an object's metadata records, lower-case.
pub(crate) fn sha256_of(obj: &HeadObjectOutput) -> Option<String> {
    obj.metadata()
        .and_then(|m| m.get(META_SHA256))
        .map(|s| s.to_ascii_lowercase())
}

/// Whether an upload to `endpoint` (None: AWS S3, always HTTPS) signs each part's payload.
/// Over TLS the connection already protects the body's integrity and origin, so a part is sent
/// as `UNSIGNED-PAYLOAD`, as the AWS CLI does, sparing the agent and the store a sha256 of every
/// byte; over plain HTTP the signature is the body's only protection and is kept. Either way
/// the snapshot's own sha256 is recorded and checked before any restore.
pub(crate) fn signs_payload(endpoint: Option<&str>) -> bool {
    endpoint.is_some_and(|ep| !ep.starts_with("https://"))
}

/// The sha256 a checksum object (`sha256sum` format: `<hex>  <name>`) holds, lower-case.
pub(crate) fn parse_checksum(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let hex = text.split_whitespace().next()?;
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

/// An ETag without the quotes some stores put around it.
pub(crate) fn unquote(etag: &str) -> &str {
    etag.trim_matches('"')
}

pub(crate) fn size_of(obj: &HeadObjectOutput, at: &Location) -> Result<u64, Failure> {
    obj.content_length()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| Failure::transient(format!("HeadObject {} gave no size", at.uri())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_signed_only_when_the_endpoint_is_plain_http() {
        assert!(signs_payload(Some("http://minio.backup:9000")));
        assert!(!signs_payload(Some("https://minio.backup:9000")));
        assert!(!signs_payload(None), "AWS S3 is reached over HTTPS");
    }

    #[test]
    fn a_checksum_object_is_read_only_when_it_holds_one_sha256() {
        let sha = "AB".repeat(32);
        assert_eq!(
            parse_checksum(format!("{sha}  s1.db\n").as_bytes()),
            Some(sha.to_ascii_lowercase())
        );
        assert_eq!(parse_checksum(b""), None);
        assert_eq!(parse_checksum(b"abc  s1.db"), None);
        assert_eq!(
            parse_checksum(format!("{}  s1.db", "g".repeat(64)).as_bytes()),
            None
        );
        assert_eq!(parse_checksum(&[0xff, 0xfe]), None);
        assert_eq!(unquote("\"abc-3\""), "abc-3");
        let at = Location {
            bucket: "b".into(),
            key: "backups/s1.db".into(),
        };
        assert_eq!(at.checksum().uri(), "s3://b/backups/s1.db.sha256");
    }

    #[test]
    fn key_layout_follows_the_prefix() {
        assert_eq!(snapshot_key(None, "s1"), "s1.db");
        assert_eq!(snapshot_key(Some(""), "s1"), "s1.db");
        assert_eq!(snapshot_key(Some("backups/"), "s1"), "backups/s1.db");
        assert_eq!(snapshot_key(Some("backups"), "s1"), "backups/s1.db");
        assert_eq!(snapshot_key(Some("a/b"), "s1"), "a/b/s1.db");
        let at = Location {
            bucket: "b".into(),
            key: snapshot_key(Some("p/"), "x"),
        };
        assert_eq!(at.uri(), "s3://b/p/x.db");
    }

    #[test]
    fn hex_is_lower_case() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }
}
