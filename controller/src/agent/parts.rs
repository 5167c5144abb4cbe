//! The parts of a snapshot's multipart upload: etcd's stream cut, in order, into [`PART_SIZE`]
//! parts and hashed (sha256) as it is read, while earlier parts upload concurrently.
//!
//! Memory is bounded by the number of parts held, not by the snapshot: at most
//! [`PARTS_IN_MEMORY`] parts exist at once — the one being filled and the others uploading.
//! When every slot is taken the stream is not read: etcd's stream is pulled only as fast as
//! parts go out (gRPC flow control holds the rest on etcd's side).
//!
//! Each part's upload is a task of the caller's [`InFlight`] set, so it runs on any worker
//! thread (the request signing hashes the part) while this task reads and hashes the stream.
//! The caller owns the set so that, whatever ends the upload (a failed part, a broken stream,
//! SIGTERM), it can stop every part still being sent before it aborts the multipart upload.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::CompletedPart;
use futures::{Stream, StreamExt};
use tokio::task::JoinSet;

use crate::objectstore::{hex, Failure, Location, S3};

/// Fixed part size of the multipart upload, the AWS CLI's default (10,000 parts allowed, so
/// snapshots up to ~78 GiB; etcd's backend is at most 8 GiB).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts held at once: one being filled from etcd's stream, the rest (two) uploading
/// concurrently. The agent's buffers are at most `PARTS_IN_MEMORY × PART_SIZE` (24 MiB)
/// whatever the snapshot's size; docs/performance.md has the measurements behind the numbers.
pub const PARTS_IN_MEMORY: usize = 3;
const _: () = assert!(
    PARTS_IN_MEMORY >= 2,
    "one part filling and at least one uploading"
);

/// The part uploads in flight, each ending in the part to list at completion.
pub type InFlight = JoinSet<Result<CompletedPart, Failure>>;

/// Every part of the stream, uploaded.
#[derive(Debug)]
pub struct Sent {
    /// By part number, as CompleteMultipartUpload takes them.
    pub parts: Vec<CompletedPart>,
    pub size: u64,
    /// Of the whole stream, in order.
    pub sha256: String,
}

/// Upload `chunks` as the parts of the multipart upload `upload_id` at `at`. Returns once every
/// part is stored; on an error, parts may still be uploading in `in_flight`.
pub async fn send<S>(
    s3: &S3,
    at: &Location,
    upload_id: &str,
    mut chunks: S,
    in_flight: &mut InFlight,
) -> Result<Sent, Failure>
where
    S: Stream<Item = Result<Vec<u8>, Failure>> + Unpin,
{
    let mut hasher = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let mut size = 0u64;
    let mut stored = Vec::new();
    let mut next_part = 1i32;
    // The part being filled, and the chunk being copied into it (`copied` bytes of it so far).
    let mut part: Vec<u8> = Vec::new();
    let mut chunk: Vec<u8> = Vec::new();
    let mut copied = 0;
    let mut ended = false;
    loop {
        if copied < chunk.len() && part.len() < PART_SIZE {
            if part.capacity() == 0 {
                part.reserve_exact(PART_SIZE);
            }
            let n = (PART_SIZE - part.len()).min(chunk.len() - copied);
            part.extend_from_slice(&chunk[copied..copied + n]);
            copied += n;
            continue;
        }
        let pending = copied < chunk.len();
        let full = part.len() == PART_SIZE || (ended && !part.is_empty());
        // The part being filled counts: at most PARTS_IN_MEMORY - 1 upload beside it.
        if full && in_flight.len() < PARTS_IN_MEMORY - 1 {
            spawn_part(
                s3,
                at,
                upload_id,
                next_part,
                std::mem::take(&mut part),
                in_flight,
            );
            next_part = next_part.checked_add(1).ok_or_else(|| {
                Failure::permanent("the snapshot needs more parts than a multipart upload allows")
            })?;
            continue;
        }
        if ended && part.is_empty() && in_flight.is_empty() {
            break;
        }
        let read = !ended && !pending && !full;
        tokio::select! {
            Some(joined) = in_flight.join_next(), if !in_flight.is_empty() => {
                let done = joined.map_err(|e| {
                    Failure::transient(format!("a part's upload stopped: {e}"))
                })??;
                stored.push(done);
            }
            next = chunks.next(), if read => match next {
                Some(next) => {
                    chunk = next?;
                    copied = 0;
                    hasher.update(&chunk);
                    size += chunk.len() as u64;
                }
                None => ended = true,
            },
            else => {
                return Err(Failure::transient(
                    "the snapshot's upload stalled with no part in flight and none to send; retry",
                ))
            }
        }
    }
    stored.sort_by_key(|p| p.part_number());
    Ok(Sent {
        parts: stored,
        size,
        sha256: hex(hasher.finish().as_ref()),
    })
}

/// Start the upload of part `number` in `in_flight`.
fn spawn_part(
    s3: &S3,
    at: &Location,
    upload_id: &str,
    number: i32,
    body: Vec<u8>,
    in_flight: &mut InFlight,
) {
    let (s3, at, upload_id) = (s3.clone(), at.clone(), upload_id.to_string());
    in_flight.spawn(async move {
        let bytes = body.len();
        let uploaded = s3
            .client
            .upload_part()
            .bucket(&at.bucket)
            .key(&at.key)
            .upload_id(upload_id)
            .part_number(number)
            .content_length(bytes as i64)
            .body(ByteStream::from(body));
        // Over TLS the body is protected by the connection; the part is not hashed a second
        // time for the signature (see `S3::sign_payload`).
        let uploaded = if s3.sign_payload {
            uploaded.send().await
        } else {
            uploaded.customize().disable_payload_signing().send().await
        };
        let uploaded =
            uploaded.map_err(|e| s3.request_failure(&format!("UploadPart {number}"), &at, &e))?;
        tracing::info!(part = number, bytes, "part uploaded");
        Ok(CompletedPart::builder()
            .part_number(number)
            .set_e_tag(uploaded.e_tag().map(str::to_string))
            .build())
    });
}
