//! The agent's web identity credentials (docs/cloud-identity.md): the token in
//! `AWS_WEB_IDENTITY_TOKEN_FILE` (a projected ServiceAccount token, read again on every refresh,
//! as the kubelet rotates it) traded at STS (`AWS_ENDPOINT_URL_STS`, else AWS STS of the region)
//! with `AssumeRoleWithWebIdentity` for temporary credentials of `AWS_ROLE_ARN`.
//!
//! What `aws-config`'s provider does, with one difference: it also parses the assumed-role ARN of
//! the answer for the account ID and fails on an empty one, which MinIO's STS sends; nothing
//! here needs the account ID. The rest of the standard chain stays `aws-config`'s
//! ([`crate::objectstore::S3::new`]).

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{self, future, ProvideCredentials};
use aws_credential_types::Credentials;
use aws_sdk_sts::config::{BehaviorVersion, Region, SharedHttpClient};
use aws_sdk_sts::error::DisplayErrorContext;

/// `AssumeRoleWithWebIdentity` with the token file and role the environment names.
#[derive(Debug)]
pub struct WebIdentity {
    sts: aws_sdk_sts::Client,
    role_arn: String,
    token_file: PathBuf,
    session_name: String,
}

impl WebIdentity {
    /// From `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` (`None` unless both are set), on
    /// `http` (the S3 client's: its TLS settings and private CA serve STS too).
    pub fn from_env(http: SharedHttpClient, region: Region) -> Option<Self> {
        let token_file = env_value("AWS_WEB_IDENTITY_TOKEN_FILE")?;
        let role_arn = env_value("AWS_ROLE_ARN")?;
        let session_name = env_value("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| {
            let millis = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            format!("etcd-operator-{millis}")
        });
        let mut config = aws_sdk_sts::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(region)
            .http_client(http);
        if let Some(endpoint) = env_value("AWS_ENDPOINT_URL_STS") {
            config = config.endpoint_url(endpoint);
        }
        Some(Self {
            sts: aws_sdk_sts::Client::from_conf(config.build()),
            role_arn,
            token_file: PathBuf::from(token_file),
            session_name,
        })
    }

    async fn credentials(&self) -> provider::Result {
        let token = tokio::fs::read_to_string(&self.token_file)
            .await
            .map_err(|e| {
                CredentialsError::provider_error(format!(
                    "reading the web identity token {} (AWS_WEB_IDENTITY_TOKEN_FILE): {e}",
                    self.token_file.display()
                ))
            })?;
        let answer = self
            .sts
            .assume_role_with_web_identity()
            .role_arn(&self.role_arn)
            .role_session_name(&self.session_name)
            .web_identity_token(token.trim())
            .send()
            .await
            .map_err(|e| {
                CredentialsError::provider_error(format!(
                    "AssumeRoleWithWebIdentity of {} (AWS_ROLE_ARN): {}",
                    self.role_arn,
                    DisplayErrorContext(&e)
                ))
            })?;
        let granted = answer.credentials.ok_or_else(|| {
            CredentialsError::provider_error(
                "STS answered AssumeRoleWithWebIdentity with no credentials",
            )
        })?;
        let expiry = SystemTime::try_from(granted.expiration).map_err(|_| {
            CredentialsError::provider_error("STS gave credentials whose expiry is out of range")
        })?;
        Ok(Credentials::new(
            granted.access_key_id,
            granted.secret_access_key,
            Some(granted.session_token),
            Some(expiry),
            "WebIdentityToken",
        ))
    }
}

impl ProvideCredentials for WebIdentity {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.credentials())
    }
}

/// A non-empty environment variable (the AWS credential variables, here and in the object store).
pub(crate) fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}
