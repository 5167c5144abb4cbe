//! The archive's objects in S3: list, put and get of whole small objects (a segment is a few
//! MiB at most), with the object store's error messages.

use aws_sdk_s3::primitives::ByteStream;

use crate::archive::{RecordedHash, SegmentName};
use crate::objectstore::{Failure, Location, S3Args, S3};

/// An archive: a key prefix in a bucket.
#[derive(Clone)]
pub struct Store {
    pub s3: S3,
    pub bucket: String,
    /// Empty, or ending in `/`.
    pub prefix: String,
}

impl Store {
    /// `prefix` as given (`--s3-key`): a trailing `/` is added when missing.
    pub fn new(s3: S3, bucket: String, prefix: Option<&str>) -> Store {
        let prefix = match prefix.unwrap_or("").trim() {
            "" => String::new(),
            p if p.ends_with('/') => p.to_string(),
            p => format!("{p}/"),
        };
        Store { s3, bucket, prefix }
    }

    /// The archive `--s3-bucket` and `--s3-key` (its prefix) name, reached as the flags say.
    pub async fn from_args(args: &S3Args) -> Result<Store, Failure> {
        let bucket = match args.s3_bucket.as_deref().map(str::trim) {
            Some(b) if !b.is_empty() => b.to_string(),
            _ => {
                return Err(Failure::permanent(
                    "--s3-bucket is required: the archive's bucket",
                ))
            }
        };
        Ok(Store::new(
            S3::new(args).await?,
            bucket,
            args.s3_key.as_deref(),
        ))
    }

    pub fn at(&self, key: String) -> Location {
        Location {
            bucket: self.bucket.clone(),
            key,
        }
    }

    /// Every key under `listing`, in S3's (lexical) order.
    pub async fn keys(&self, listing: &str) -> Result<Vec<String>, Failure> {
        Ok(self
            .s3
            .list(&self.bucket, listing)
            .await?
            .into_iter()
            .map(|o| o.key)
            .collect())
    }

    pub async fn segments(&self) -> Result<Vec<SegmentName>, Failure> {
        let keys = self.keys(&SegmentName::listing(&self.prefix)).await?;
        Ok(keys
            .iter()
            .filter_map(|k| SegmentName::parse(&self.prefix, k))
            .collect())
    }

    /// The revisions at which the cluster's hash was recorded.
    pub async fn hash_revisions(&self) -> Result<Vec<i64>, Failure> {
        let keys = self.keys(&RecordedHash::listing(&self.prefix)).await?;
        Ok(keys
            .iter()
            .filter_map(|k| RecordedHash::parse(&self.prefix, k))
            .collect())
    }

    pub async fn put(&self, key: String, body: Vec<u8>) -> Result<(), Failure> {
        let at = self.at(key);
        self.s3
            .client
            .put_object()
            .bucket(&at.bucket)
            .key(&at.key)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| self.s3.request_failure("PutObject", &at, &e))?;
        Ok(())
    }

    pub async fn get(&self, key: String) -> Result<Vec<u8>, Failure> {
        let at = self.at(key);
        let obj = self
            .s3
            .client
            .get_object()
            .bucket(&at.bucket)
            .key(&at.key)
            .send()
            .await
            .map_err(|e| self.s3.request_failure("GetObject", &at, &e))?;
        let body = obj
            .body
            .collect()
            .await
            .map_err(|e| Failure::transient(format!("reading {}: {e}", at.uri())))?;
        Ok(body.into_bytes().to_vec())
    }
}
