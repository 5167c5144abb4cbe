//! The S3 backend: the client (rustls with an optional private CA, checksum headers only when
//! an operation requires them), the key layout, the overwrite guard, the streaming multipart
//! upload and the download for a restore.

use std::path::Path;
use std::time::Duration;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::head_object::{HeadObjectError, HeadObjectOutput};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, MetadataDirective};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};

use super::{hex, Failure, S3Args};

/// Object metadata key of the snapshot's UID (`x-amz-meta-snapshot-uid`).
pub const META_UID: &str = "snapshot-uid";
/// Object metadata key of the snapshot's sha256 (hex).
pub const META_SHA256: &str = "sha256";
/// Fixed part size of the multipart upload: the agent's buffer (S3 allows 10,000 parts, so
/// snapshots up to ~78 GiB; etcd's backend is at most 8 GiB).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// CopyObject's limit: larger objects keep the UID but not the sha256 in their metadata.
const MAX_COPY_SIZE: u64 = 5 * 1024 * 1024 * 1024;
/// How long a failed upload keeps trying to abort its multipart upload (the server may be
/// restarting); after that the upload is left for the bucket's lifecycle rule.
const ABORT_DEADLINE: Duration = Duration::from_secs(120);
/// The same after SIGTERM: within the Pod's termination grace period (30s by default), after
/// which the kubelet kills the agent.
const ABORT_AFTER_SIGTERM: Duration = Duration::from_secs(20);

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
}

/// The key a snapshot named `name` is stored at: `<name>.db` when `prefix` is empty,
/// `<prefix><name>.db` when it ends in `/`, else `<prefix>/<name>.db`.
pub fn snapshot_key(prefix: Option<&str>, name: &str) -> String {
    let file = super::file_name(name);
    match prefix.unwrap_or("") {
        "" => file,
        p if p.ends_with('/') => format!("{p}{file}"),
        p => format!("{p}/{file}"),
    }
}

/// A connected S3 client and the settings it was built from (for messages).
pub struct S3 {
    client: aws_sdk_s3::Client,
    endpoint: String,
}

impl S3 {
    /// Build the client from the flags and `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
    pub fn new(args: &S3Args) -> Result<Self, Failure> {
        let access = env_nonempty("AWS_ACCESS_KEY_ID")?;
        let secret = env_nonempty("AWS_SECRET_ACCESS_KEY")?;
        Self::with_credentials(args, access, secret)
    }

    /// Build the client from the flags and the given credentials (the schedule controller
    /// reads them from the destination's Secret).
    pub fn with_credentials(
        args: &S3Args,
        access: String,
        secret: String,
    ) -> Result<Self, Failure> {
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
            None => TrustStore::default(),
        };
        let tls_context = TlsContext::builder()
            .with_trust_store(trust)
            .build()
            .map_err(|e| Failure::permanent(format!("building the S3 TLS settings: {e}")))?;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
            .tls_context(tls_context)
            .build_https();
        let mut config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(args.s3_region.clone()))
            .credentials_provider(Credentials::new(access, secret, None, None, "environment"))
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
        Ok(Self {
            client: aws_sdk_s3::Client::from_conf(config.build()),
            endpoint: args
                .s3_endpoint
                .clone()
                .unwrap_or_else(|| format!("AWS S3 ({})", args.s3_region)),
        })
    }

    /// Delete the object (retention); a missing object is not an error.
    pub async fn delete(&self, at: &Location) -> Result<(), Failure> {
        self.client
            .delete_object()
            .bucket(&at.bucket)
            .key(&at.key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| {
                Failure::transient(format!(
                    "deleting {} at {}: {}",
                    at.uri(),
                    self.endpoint,
                    e.message().unwrap_or("request failed")
                ))
            })
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
                "{} rejected the credentials ({}): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the \
                 credentials Secret (spec.destination.s3.credentialsSecretRef)",
                self.endpoint,
                error_text(&e)
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

    fn request_failure<E: ProvideErrorMetadata + std::error::Error + 'static>(
        &self,
        what: &str,
        at: &Location,
        e: &SdkError<E, HttpResponse>,
    ) -> Failure {
        let detail = error_text(e);
        if is_credentials_error(e) {
            return Failure::permanent(format!(
                "{what} {}: {} rejected the credentials ({detail}): check AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY in the credentials Secret",
                at.uri(),
                self.endpoint
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
            _ => Failure::transient(format!(
                "{what} {} on {} failed: {detail}; check that the endpoint is reachable from the cluster \
                 (spec.destination.s3.endpoint) and the server is up",
                at.uri(),
                self.endpoint
            )),
        }
    }

    /// Store a snapshot at `at`, stamped with `uid`, and return what is stored there: this
    /// upload, or — when another Pod of the same Job stored the key first — that Pod's object.
    ///
    /// Two Pods of one Job can upload at once (a Job retry while the first Pod still runs, a
    /// Pod on a lost Node): whichever completes first wins the key, since the completion is
    /// conditional (`If-None-Match: *`) and the later one gets 412 and aborts its parts. The
    /// sha256 metadata is stamped only onto the object this upload completed (a copy
    /// conditional on its ETag), and the object is read back (HeadObject) before anything is
    /// reported, so the reported size and sha256 always describe the stored object.
    pub async fn save<S>(&self, at: &Location, uid: &str, chunks: S) -> Result<Uploaded, Failure>
    where
        S: Stream<Item = Result<Vec<u8>, Failure>> + Unpin,
    {
        match self.upload(at, uid, chunks).await? {
            Completion::Stored { done, etag } => {
                self.stamp_sha256(at, uid, &done, etag.as_deref()).await;
                self.verify_stored(at, uid, done, etag.as_deref()).await
            }
            Completion::KeyTaken => {
                tracing::info!(uri = %at.uri(), "another attempt of this snapshot stored the object first; reporting that object");
                self.stored_snapshot(at, uid).await
            }
        }
    }

    /// After our completion: the object at `at` must be the one we completed. It is, unless
    /// the store ignores `If-None-Match` on CompleteMultipartUpload and a later upload of this
    /// snapshot replaced it; then the stored object is reported instead of ours.
    async fn verify_stored(
        &self,
        at: &Location,
        uid: &str,
        done: Uploaded,
        etag: Option<&str>,
    ) -> Result<Uploaded, Failure> {
        let head = self.head_stored(at, uid).await?;
        let ours = match &head.sha256 {
            Some(sha) => *sha == done.sha256,
            None => etag.is_some() && head.etag.as_deref() == etag,
        };
        if ours && head.size == done.size {
            return Ok(done);
        }
        tracing::warn!(uri = %at.uri(), ours = %done.sha256, "the stored object is another upload of this snapshot (the store did not honour If-None-Match); reporting the stored object");
        self.stored_snapshot(at, uid).await
    }

    /// The object another attempt of this snapshot stored at `at`: its size and sha256 — from
    /// its sha256 metadata (stamped only onto the object the stamping agent had hashed), else
    /// by reading it back and hashing it (the other agent had not stamped it yet, or it is
    /// larger than CopyObject allows).
    async fn stored_snapshot(&self, at: &Location, uid: &str) -> Result<Uploaded, Failure> {
        for _ in 0..3 {
            let head = self.head_stored(at, uid).await?;
            if let Some(sha256) = head.sha256 {
                return Ok(Uploaded {
                    size: head.size,
                    sha256,
                });
            }
            let Some(etag) = head.etag else {
                return Err(Failure::transient(format!(
                    "HeadObject {} gave no ETag; cannot tell which upload is stored",
                    at.uri()
                )));
            };
            // Bound to this ETag: if the other agent stamps meanwhile, look again.
            if let Some(done) = self.hash_object(at, &etag).await? {
                self.stamp_sha256(at, uid, &done, Some(&etag)).await;
                return Ok(done);
            }
        }
        Err(Failure::transient(format!(
            "the object at {} kept changing while the agent read it back; retry",
            at.uri()
        )))
    }

    /// HeadObject of a snapshot's object that must be this snapshot's (UID metadata `uid`).
    async fn head_stored(&self, at: &Location, uid: &str) -> Result<StoredObject, Failure> {
        let obj = self
            .head_object(at)
            .await
            .map_err(|e| self.request_failure("HeadObject", at, &e))?
            .ok_or_else(|| {
                Failure::transient(format!(
                    "{} is gone right after it was stored (deleted meanwhile?); retry",
                    at.uri()
                ))
            })?;
        let owner = owner_of(&obj);
        if owner != Some(uid) {
            let holder = owner.map_or_else(
                || format!("an object without {META_UID} metadata"),
                |o| format!("the snapshot with UID {o}"),
            );
            return Err(Failure::permanent(format!(
                "{} now holds {holder} instead of this snapshot ({uid}): something else wrote the \
                 key during the upload; choose another key (spec.destination.s3.key) or snapshot name",
                at.uri()
            )));
        }
        Ok(StoredObject {
            size: size_of(&obj, at)?,
            sha256: sha256_of(&obj),
            etag: obj.e_tag().map(str::to_string),
        })
    }

    /// Read the object back (only while its ETag is `etag`) and hash it. `None`: it changed.
    async fn hash_object(&self, at: &Location, etag: &str) -> Result<Option<Uploaded>, Failure> {
        let obj = match self
            .client
            .get_object()
            .bucket(&at.bucket)
            .key(&at.key)
            .if_match(etag)
            .send()
            .await
        {
            Ok(obj) => obj,
            Err(e) if status_of(&e) == Some(412) => return Ok(None),
            Err(e) => return Err(self.request_failure("GetObject", at, &e)),
        };
        let mut hasher = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        let mut body = obj.body;
        let mut size = 0u64;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| Failure::transient(format!("reading back {}: {e}", at.uri())))?
        {
            hasher.update(&chunk);
            size += chunk.len() as u64;
        }
        Ok(Some(Uploaded {
            size,
            sha256: hex(hasher.finish().as_ref()),
        }))
    }

    /// Stream `chunks` into a multipart upload at `at`, stamped with `uid`, in fixed
    /// [`PART_SIZE`] parts; the sha256 is computed on the way. A failure aborts the upload, and
    /// so does SIGTERM (the Job passed its deadline, or concurrencyPolicy Replace or the
    /// EtcdSnapshot's deletion removed it): the parts never stay behind in the bucket. So does
    /// finding the key taken at completion ([`Completion::KeyTaken`]).
    async fn upload<S>(&self, at: &Location, uid: &str, chunks: S) -> Result<Completion, Failure>
    where
        S: Stream<Item = Result<Vec<u8>, Failure>> + Unpin,
    {
        // Listening before the upload exists: a SIGTERM from here on is seen (at the latest
        // once CreateMultipartUpload returns) instead of killing the process.
        let mut term = signal(SignalKind::terminate())
            .map_err(|e| Failure::transient(format!("installing the SIGTERM handler: {e}")))?;
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&at.bucket)
            .key(&at.key)
            .metadata(META_UID, uid)
            .content_type("application/octet-stream")
            .send()
            .await
            .map_err(|e| self.request_failure("CreateMultipartUpload", at, &e))?;
        let upload_id = created.upload_id().unwrap_or_default().to_string();
        if upload_id.is_empty() {
            return Err(Failure::transient(format!(
                "CreateMultipartUpload {} returned no upload id",
                at.uri()
            )));
        }
        tracing::info!(uri = %at.uri(), upload_id, "multipart upload started");
        let (result, abort_within) = tokio::select! {
            r = self.upload_parts(at, &upload_id, chunks) => (r, ABORT_DEADLINE),
            _ = term.recv() => (
                Err(Failure::transient(format!(
                    "SIGTERM during the upload of {} (the Job reached its deadline, or was deleted \
                     by concurrencyPolicy Replace or with its EtcdSnapshot); the snapshot is not \
                     stored",
                    at.uri()
                ))),
                ABORT_AFTER_SIGTERM,
            ),
        };
        match result {
            Ok(Completion::KeyTaken) => {
                tracing::info!(uri = %at.uri(), upload_id, "the key was stored by another upload first (412 on the conditional completion); aborting ours");
                self.abort(at, &upload_id, ABORT_DEADLINE)
                    .await
                    .map_err(Failure::transient)?;
                Ok(Completion::KeyTaken)
            }
            Ok(done) => Ok(done),
            Err(failure) => {
                tracing::warn!(uri = %at.uri(), upload_id, error = %failure, "upload failed; aborting the multipart upload");
                match self.abort(at, &upload_id, abort_within).await {
                    Ok(()) => Err(failure),
                    Err(abort) => Err(Failure {
                        message: format!("{}; {abort}", failure.message),
                        permanent: failure.permanent,
                    }),
                }
            }
        }
    }

    async fn upload_parts<S>(
        &self,
        at: &Location,
        upload_id: &str,
        mut chunks: S,
    ) -> Result<Completion, Failure>
    where
        S: Stream<Item = Result<Vec<u8>, Failure>> + Unpin,
    {
        let mut hasher = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        let mut parts = Vec::new();
        let mut size = 0u64;
        // The tail of a chunk that did not fit in the previous part.
        let mut carry: Vec<u8> = Vec::new();
        let mut ended = false;
        loop {
            // Fill one part (the last one may be short). etcd's stream is pulled only as fast as
            // parts go out, so memory stays at one part (plus one chunk) whatever the snapshot's
            // size.
            let mut part = Vec::with_capacity(PART_SIZE);
            part.append(&mut carry);
            while !ended && part.len() < PART_SIZE {
                match chunks.next().await {
                    Some(chunk) => {
                        let chunk = chunk?;
                        hasher.update(&chunk);
                        size += chunk.len() as u64;
                        let room = PART_SIZE - part.len();
                        if chunk.len() > room {
                            part.extend_from_slice(&chunk[..room]);
                            carry.extend_from_slice(&chunk[room..]);
                        } else {
                            part.extend_from_slice(&chunk);
                        }
                    }
                    None => ended = true,
                }
            }
            if part.is_empty() {
                break;
            }
            let n = part.len();
            let number = i32::try_from(parts.len() + 1).unwrap_or(i32::MAX);
            let uploaded = self
                .client
                .upload_part()
                .bucket(&at.bucket)
                .key(&at.key)
                .upload_id(upload_id)
                .part_number(number)
                .content_length(n as i64)
                .body(ByteStream::from(part))
                .send()
                .await
                .map_err(|e| self.request_failure(&format!("UploadPart {number}"), at, &e))?;
            tracing::info!(part = number, bytes = n, total = size, "part uploaded");
            parts.push(
                CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(uploaded.e_tag().map(str::to_string))
                    .build(),
            );
            if ended && carry.is_empty() {
                break;
            }
        }
        if size == 0 {
            return Err(Failure::transient(
                "etcd sent an empty snapshot; retry (is the member healthy?)",
            ));
        }
        // Conditional: only while no object is at the key. The overwrite guard checked that
        // before the upload, but another Pod of this Job may have stored the key since.
        let completed = self
            .client
            .complete_multipart_upload()
            .bucket(&at.bucket)
            .key(&at.key)
            .upload_id(upload_id)
            .if_none_match("*")
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await;
        let completed = match completed {
            Ok(c) => c,
            Err(e) if status_of(&e) == Some(412) => return Ok(Completion::KeyTaken),
            Err(e) => return Err(self.request_failure("CompleteMultipartUpload", at, &e)),
        };
        Ok(Completion::Stored {
            done: Uploaded {
                size,
                sha256: hex(hasher.finish().as_ref()),
            },
            etag: completed.e_tag().map(str::to_string),
        })
    }

    /// Abort the multipart upload, retrying while the server is unreachable (up to `within`),
    /// so no upload is left dangling after a server restart.
    async fn abort(&self, at: &Location, upload_id: &str, within: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut wait = Duration::from_secs(1);
        loop {
            let res = self
                .client
                .abort_multipart_upload()
                .bucket(&at.bucket)
                .key(&at.key)
                .upload_id(upload_id)
                .send()
                .await;
            match res {
                Ok(_) => {
                    tracing::info!(upload_id, "multipart upload aborted");
                    return Ok(());
                }
                Err(e) if status_of(&e) == Some(404) => return Ok(()),
                Err(e) if status_of(&e).is_some_and(|s| s < 500) => {
                    return Err(format!(
                        "aborting the multipart upload {upload_id} failed ({}); delete it with \
                         `mc rm --incomplete` or a bucket lifecycle rule",
                        error_text(&e)
                    ))
                }
                Err(e) => {
                    if tokio::time::Instant::now() + wait > deadline {
                        return Err(format!(
                            "aborting the multipart upload {upload_id} failed for {within:?} ({}); \
                             delete it with `mc rm --incomplete` or a bucket lifecycle rule",
                            error_text(&e)
                        ));
                    }
                    tracing::warn!(upload_id, error = %error_text(&e), "abort failed; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Record the sha256 in the object's metadata (a same-key copy replacing the metadata; the
    /// UID stays), only onto the object whose ETag is `etag` (the one `done` describes): a copy
    /// of another upload's content must never carry this sha256. Best effort: the checksum is
    /// also in the termination log and the status.
    async fn stamp_sha256(&self, at: &Location, uid: &str, done: &Uploaded, etag: Option<&str>) {
        let Some(etag) = etag else {
            tracing::info!("the completed upload has no ETag; its sha256 is not in its metadata");
            return;
        };
        if done.size > MAX_COPY_SIZE {
            tracing::info!(
                "the object is larger than CopyObject allows; its sha256 is not in its metadata"
            );
            return;
        }
        let res = self
            .client
            .copy_object()
            .bucket(&at.bucket)
            .key(&at.key)
            .copy_source(format!("{}/{}", at.bucket, urlencode_key(&at.key)))
            .copy_source_if_match(etag)
            .metadata_directive(MetadataDirective::Replace)
            .metadata(META_UID, uid)
            .metadata(META_SHA256, &done.sha256)
            .content_type("application/octet-stream")
            .send()
            .await;
        if let Err(e) = res {
            tracing::warn!(error = %error_text(&e), "could not record the sha256 in the object metadata");
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
        Ok((size_of(&obj, at)?, sha256_of(&obj)))
    }

    /// HeadObject of `at`; `Ok(None)` when there is no object there (404).
    async fn head_object(
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

    /// Download the object into `file` (created), returning its size and sha256.
    pub async fn download(&self, at: &Location, file: &Path) -> Result<Uploaded, Failure> {
        let obj = self
            .client
            .get_object()
            .bucket(&at.bucket)
            .key(&at.key)
            .send()
            .await
            .map_err(|e| self.request_failure("GetObject", at, &e))?;
        let mut out = tokio::fs::File::create(file)
            .await
            .map_err(|e| Failure::transient(format!("creating {}: {e}", file.display())))?;
        let mut hasher = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        let mut body = obj.body;
        let mut size = 0u64;
        loop {
            let chunk = body
                .try_next()
                .await
                .map_err(|e| Failure::transient(format!("downloading {}: {e}", at.uri())))?;
            let Some(chunk) = chunk else { break };
            hasher.update(&chunk);
            size += chunk.len() as u64;
            out.write_all(&chunk)
                .await
                .map_err(|e| Failure::transient(format!("writing {}: {e}", file.display())))?;
        }
        out.sync_all()
            .await
            .map_err(|e| Failure::transient(format!("syncing {}: {e}", file.display())))?;
        Ok(Uploaded {
            size,
            sha256: hex(hasher.finish().as_ref()),
        })
    }
}

/// How a multipart upload ended.
#[derive(Debug)]
enum Completion {
    /// This upload is the object at the key (its ETag, when the store gave one).
    Stored {
        done: Uploaded,
        etag: Option<String>,
    },
    /// An object was at the key when this upload completed (412 on `If-None-Match: *`): our
    /// parts were aborted.
    KeyTaken,
}

/// What HeadObject says of a snapshot's object.
struct StoredObject {
    size: u64,
    sha256: Option<String>,
    etag: Option<String>,
}

/// Size and sha256 (hex) of what was stored or fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    pub size: u64,
    pub sha256: String,
}

fn env_nonempty(name: &str) -> Result<String, Failure> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(Failure::permanent(format!(
            "{name} is not set: the S3 credentials come from the environment; put {name} in the \
             credentials Secret (credentialsSecretRef)"
        ))),
    }
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
fn status_of<E>(e: &SdkError<E, HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

fn is_credentials_error<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    matches!(
        e.code(),
        Some("InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken" | "ExpiredToken")
    )
}

/// The error's code and message, or its source chain when no answer came.
fn error_text<E: ProvideErrorMetadata + std::error::Error + 'static>(
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

/// Percent-encode a key for `x-amz-copy-source` (keeps `/`).
fn urlencode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The snapshot UID an object's metadata names (the agent stamps it on every upload).
fn owner_of(obj: &HeadObjectOutput) -> Option<&str> {
    obj.metadata()
        .and_then(|m| m.get(META_UID))
        .map(String::as_str)
}

/// The sha256 an object's metadata records, lower-case.
fn sha256_of(obj: &HeadObjectOutput) -> Option<String> {
    obj.metadata()
        .and_then(|m| m.get(META_SHA256))
        .map(|s| s.to_ascii_lowercase())
}

fn size_of(obj: &HeadObjectOutput, at: &Location) -> Result<u64, Failure> {
    obj.content_length()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| Failure::transient(format!("HeadObject {} gave no size", at.uri())))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn copy_source_keys_are_percent_encoded() {
        assert_eq!(urlencode_key("a/b c+d.db"), "a/b%20c%2Bd.db");
    }
}
