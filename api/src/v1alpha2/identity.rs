//! Cloud identity for object storage (ours, beyond the reference API): an S3 location with no
//! `credentialsSecretRef` is reached with the standard AWS credential chain of the Pod that
//! reads or writes it (environment, web identity token file, container and instance metadata).
//! `serviceAccountName` names the ServiceAccount that Pod runs under (EKS IRSA and EKS Pod
//! Identity inject their credentials into Pods of an annotated or associated ServiceAccount);
//! `webIdentity` asks for a projected token of that ServiceAccount and the environment
//! `AssumeRoleWithWebIdentity` reads, for any STS that trusts the cluster's service-account
//! issuer (self-managed IRSA, MinIO). docs/cloud-identity.md is the guide.

use kube::KubeSchema;
use schemars::{Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use super::placement::optional_dns1123_subdomain_schema;

pub const CEL_S3_SERVICE_ACCOUNT_NAME: &str = "s3.serviceAccountName must name a ServiceAccount of the namespace: a DNS-1123 subdomain of at most 253 characters (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit), e.g. etcd-backup";
pub const CEL_S3_ONE_CREDENTIAL: &str = "s3 sets both credentialsSecretRef and webIdentity: a static key and an assumed role cannot both be used; keep credentialsSecretRef for an access key, or webIdentity (with serviceAccountName) for a role";
pub const CEL_WEB_IDENTITY_STS_ENDPOINT: &str = "s3.webIdentity.stsEndpoint must be an http:// or https:// URL, e.g. https://sts.eu-west-1.amazonaws.com; leave it unset for AWS STS";
/// The audience a projected token is issued for when `webIdentity.audience` is unset: what AWS
/// STS expects (and what EKS's own IRSA tokens carry).
pub const DEFAULT_WEB_IDENTITY_AUDIENCE: &str = "sts.amazonaws.com";
/// How long a projected token lives before the kubelet renews it (the API's minimum is 600 s).
pub const WEB_IDENTITY_TOKEN_SECONDS: i64 = 3600;

/// An assumed role for an S3 location: the Pod gets a token of its ServiceAccount for
/// `audience`, and the agent exchanges it at STS (`AssumeRoleWithWebIdentity`) for temporary
/// credentials of `roleArn`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3WebIdentity {
    /// The role to assume (`AWS_ROLE_ARN`), e.g. `arn:aws:iam::123456789012:role/etcd-backup`.
    #[schemars(length(min = 1, max = 2048))]
    pub role_arn: String,
    /// The audience of the projected token (default `sts.amazonaws.com`): the client ID the
    /// STS's identity provider is configured with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub audience: Option<String>,
    /// The STS endpoint (`AWS_ENDPOINT_URL_STS`), e.g. the MinIO server itself; unset for AWS
    /// STS in the location's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == '' || self.startsWith('https://') || self.startsWith('http://')")
        .message(CEL_WEB_IDENTITY_STS_ENDPOINT))]
    pub sts_endpoint: Option<String>,
}

impl S3WebIdentity {
    /// The token's audience, the default when unset or empty.
    pub fn audience(&self) -> &str {
        self.audience
            .as_deref()
            .filter(|a| !a.is_empty())
            .unwrap_or(DEFAULT_WEB_IDENTITY_AUDIENCE)
    }
}

/// `s3.serviceAccountName`: empty (the namespace's `default`) or a DNS-1123 subdomain.
pub fn service_account_name_schema(generator: &mut SchemaGenerator) -> Schema {
    optional_dns1123_subdomain_schema(generator, CEL_S3_SERVICE_ACCOUNT_NAME)
}
