//! The agent's side of the object store: the streaming multipart upload of a snapshot and the
//! download for a restore, as more methods of [`S3`] (the client itself, the overwrite guard
//! and deletion are in [`crate::objectstore`], shared with the schedule's retention).

use std::path::Path;
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::CompletedMultipartUpload;
use futures::Stream;
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};

use super::parts::{self, InFlight};
use crate::objectstore::{
    error_text, hex, owner_of, size_of, status_of, Failure, Location, Uploaded, META_OBJECT_ETAG,
    META_UID, S3,
};
/// How long a failed upload keeps trying to abort its multipart upload (the server may be
/// restarting); after that the upload is left for the bucket's lifecycle rule.
const ABORT_DEADLINE: Duration = Duration::from_secs(120);
/// The same after SIGTERM: within the Pod's termination grace period (30s by default), after
/// which the kubelet kills the agent.
const ABORT_AFTER_SIGTERM: Duration = Duration::from_secs(20);

impl S3 {
    /// Store a snapshot at `at`, stamped with `uid`, and return what is stored there: this
    /// upload, or — when another Pod of the same Job stored the key first — that Pod's object.
    ///
    /// Two Pods of one Job can upload at once (a Job retry while the first Pod still runs, a
    /// Pod on a lost Node): whichever completes first wins the key, since the completion is
    /// conditional (`If-None-Match: *`) and the later one gets 412 and aborts its parts. The
    /// sha256 goes into the checksum object `<key>.sha256`, bound to the ETag of the object this
    /// upload completed, and the object is read back (HeadObject) before anything is reported,
    /// so the reported size and sha256 always describe the stored object.
    pub async fn save<S>(&self, at: &Location, uid: &str, chunks: S) -> Result<Uploaded, Failure>
    where
        S: Stream<Item = Result<Vec<u8>, Failure>> + Unpin,
    {
        let stored = match self.upload(at, uid, chunks).await? {
            Completion::Stored { done, etag } => {
                self.record_sha256(at, uid, &done, etag.as_deref()).await;
                self.verify_stored(at, uid, done, etag.as_deref()).await?
            }
            Completion::KeyTaken => {
                tracing::info!(uri = %at.uri(), "another attempt of this snapshot stored the object first; reporting that object");
                self.stored_snapshot(at, uid).await?
            }
        };
        self.abort_leftovers(at).await;
        Ok(stored)
    }

    /// Once the key is stored, abort every other multipart upload of it. An earlier attempt
    /// whose CreateMultipartUpload reached the server but whose answer did not (the server died
    /// in between: the e2e fault suite's S3 outage) left an upload no agent knows the ID of, so
    /// none could abort it; and every other upload of the key is doomed anyway (completions are
    /// conditional on the key being free). Best effort: without `s3:ListBucketMultipartUploads`
    /// the leftovers stay for the bucket's lifecycle rule.
    async fn abort_leftovers(&self, at: &Location) {
        match self.abort_uploads(at).await {
            Ok(0) => {}
            Ok(aborted) => {
                tracing::info!(uri = %at.uri(), aborted, "aborted the multipart uploads earlier attempts left")
            }
            Err(e) => tracing::warn!(
                uri = %at.uri(),
                error = %e,
                "could not abort the multipart uploads earlier attempts may have left; a bucket \
                 lifecycle rule for incomplete uploads removes them"
            ),
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
    /// its checksum object (bound to that object's ETag by the agent that had hashed it), else
    /// by reading it back and hashing it (the other agent had not recorded it yet).
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
            // Bound to this ETag: if the object changes meanwhile, look again.
            if let Some(done) = self.hash_object(at, &etag).await? {
                self.record_sha256(at, uid, &done, Some(&etag)).await;
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
            sha256: self.recorded_sha256(at, &obj).await,
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
    /// [`parts::PART_SIZE`] parts, several uploading at once ([`parts`]); the sha256 is computed
    /// on the way. A failure aborts the upload (after stopping every part still being sent), and
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
        let mut in_flight = InFlight::new();
        let (result, abort_within) = tokio::select! {
            r = self.upload_parts(at, &upload_id, chunks, &mut in_flight) => (r, ABORT_DEADLINE),
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
        // No part is still being sent when the upload is aborted: a part stored after the
        // abort would stay behind in the bucket. (Empty after a completion.)
        in_flight.shutdown().await;
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
        chunks: S,
        in_flight: &mut InFlight,
    ) -> Result<Completion, Failure>
    where
        S: Stream<Item = Result<Vec<u8>, Failure>> + Unpin,
    {
        let parts::Sent {
            parts,
            size,
            sha256,
        } = parts::send(self, at, upload_id, chunks, in_flight).await?;
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
            Ok(c) => {
                tracing::info!(uri = %at.uri(), size, "multipart upload completed");
                c
            }
            Err(e) if status_of(&e) == Some(412) => return Ok(Completion::KeyTaken),
            Err(e) => return Err(self.request_failure("CompleteMultipartUpload", at, &e)),
        };
        Ok(Completion::Stored {
            done: Uploaded { size, sha256 },
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

    /// Record the sha256 in the checksum object `<key>.sha256` (`sha256sum` format), bound to
    /// the object whose ETag is `etag` (the one `done` describes) by its `object-etag` metadata:
    /// readers ignore it for any other content of the key, so another upload's object never
    /// gets this sha256. A small PutObject, where stamping the object's own metadata would need
    /// a CopyObject that rewrites the whole object (seconds per GiB). Best effort: the checksum
    /// is also in the termination log and the status.
    async fn record_sha256(&self, at: &Location, uid: &str, done: &Uploaded, etag: Option<&str>) {
        let Some(etag) = etag else {
            tracing::info!(
                "the completed upload has no ETag; its sha256 is not recorded in the bucket"
            );
            return;
        };
        let sidecar = at.checksum();
        let name = at.key.rsplit('/').next().unwrap_or(&at.key);
        let res = self
            .client
            .put_object()
            .bucket(&sidecar.bucket)
            .key(&sidecar.key)
            .metadata(META_UID, uid)
            .metadata(META_OBJECT_ETAG, etag)
            .content_type("text/plain")
            .body(ByteStream::from(
                format!("{}  {name}\n", done.sha256).into_bytes(),
            ))
            .send()
            .await;
        match res {
            Ok(_) => tracing::info!(uri = %sidecar.uri(), "sha256 recorded in the checksum object"),
            Err(e) => tracing::warn!(
                uri = %sidecar.uri(),
                error = %error_text(&e),
                "could not record the sha256 in the checksum object"
            ),
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
