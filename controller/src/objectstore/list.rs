//! Listing a prefix of a bucket (the archive's segments, for the agent's resume and the
//! schedule's status).

use super::{Failure, Location, S3};

/// An object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    /// When it was stored (seconds since the epoch), as the listing says.
    pub stored_at: Option<i64>,
}

impl S3 {
    /// Every object under `prefix` in `bucket`, in S3's (lexical) order, with when each was
    /// stored (seconds since the epoch).
    pub async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<Listed>, Failure> {
        let mut listed = Vec::new();
        let mut token: Option<String> = None;
        let at = Location {
            bucket: bucket.to_string(),
            key: prefix.to_string(),
        };
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| self.request_failure("ListObjectsV2", &at, &e))?;
            listed.extend(page.contents().iter().filter_map(|o| {
                Some(Listed {
                    key: o.key()?.to_string(),
                    stored_at: o.last_modified().map(|t| t.secs()),
                })
            }));
            match page.next_continuation_token() {
                Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_string()),
                _ => return Ok(listed),
            }
        }
    }
}
