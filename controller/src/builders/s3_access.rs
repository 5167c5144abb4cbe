//! How a Pod reaches an S3 location, for every Pod that runs the agent against one (the
//! snapshot and verify Jobs, the restore init container of a member): the agent's endpoint,
//! region and addressing flags, and its credentials — a static key from `credentialsSecretRef`,
//! or else the standard AWS credential chain of the Pod (docs/cloud-identity.md): the
//! ServiceAccount it runs under (`serviceAccountName`), and for `webIdentity` a projected token
//! of that ServiceAccount with the environment `AssumeRoleWithWebIdentity` reads. Pure.

use api::v1alpha2::{S3Location, WEB_IDENTITY_TOKEN_SECONDS};
use k8s_openapi::api::core::v1::{
    EnvVar, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};

use super::{mount, secret_env};

/// The projected token's volume and where it is mounted.
pub const WEB_IDENTITY_VOLUME: &str = "aws-web-identity";
pub const WEB_IDENTITY_DIR: &str = "/var/run/secrets/etcd-operator/aws-web-identity";
/// The token's file name in [`WEB_IDENTITY_DIR`].
pub const WEB_IDENTITY_TOKEN: &str = "token";

/// What a Pod needs to reach one S3 location.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct S3Access {
    /// `--s3-endpoint`, `--s3-region`, `--s3-force-path-style` (the bucket and key are the
    /// caller's: a destination names a prefix, a source an exact key).
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    /// The projected token's volume (the Pod's) and its mount (the agent container's).
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
    /// The Pod's `serviceAccountName`, when the location names one.
    pub service_account: Option<String>,
}

impl S3Access {
    /// Add the flags, environment, volumes and mounts to an agent Pod's; its ServiceAccount is
    /// returned for the Pod spec.
    pub fn add_to(
        self,
        args: &mut Vec<String>,
        env: &mut Vec<EnvVar>,
        volumes: &mut Vec<Volume>,
        mounts: &mut Vec<VolumeMount>,
    ) -> Option<String> {
        args.extend(self.args);
        env.extend(self.env);
        volumes.extend(self.volumes);
        mounts.extend(self.mounts);
        self.service_account
    }
}

/// How a Pod reaches `s3`.
pub fn s3_access(s3: &S3Location) -> S3Access {
    let mut access = S3Access::default();
    if let Some(endpoint) = s3.endpoint.as_deref().filter(|e| !e.is_empty()) {
        access.args.push(format!("--s3-endpoint={endpoint}"));
    }
    access.args.push(format!(
        "--s3-region={}",
        s3.region
            .as_deref()
            .filter(|r| !r.is_empty())
            .unwrap_or("us-east-1")
    ));
    if s3.force_path_style == Some(true) {
        access.args.push("--s3-force-path-style".into());
    }
    access.service_account = s3
        .service_account_name
        .clone()
        .filter(|name| !name.is_empty());
    if let Some(creds) = &s3.credentials_secret_ref {
        for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
            access.env.push(secret_env(key, &creds.name, key));
        }
        return access;
    }
    if let Some(identity) = &s3.web_identity {
        access.volumes.push(Volume {
            name: WEB_IDENTITY_VOLUME.into(),
            projected: Some(ProjectedVolumeSource {
                // Readable by the agent's user (the Pod's fsGroup), by nobody else.
                default_mode: Some(0o440),
                sources: Some(vec![VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some(identity.audience().to_string()),
                        expiration_seconds: Some(WEB_IDENTITY_TOKEN_SECONDS),
                        path: WEB_IDENTITY_TOKEN.into(),
                    }),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        access
            .mounts
            .push(mount(WEB_IDENTITY_VOLUME, WEB_IDENTITY_DIR, true));
        access
            .env
            .push(plain_env("AWS_ROLE_ARN", &identity.role_arn));
        access.env.push(plain_env(
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            &format!("{WEB_IDENTITY_DIR}/{WEB_IDENTITY_TOKEN}"),
        ));
        if let Some(sts) = identity.sts_endpoint.as_deref().filter(|e| !e.is_empty()) {
            access.env.push(plain_env("AWS_ENDPOINT_URL_STS", sts));
        }
    }
    access
}

fn plain_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        value_from: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{S3WebIdentity, SecretReference};

    fn location() -> S3Location {
        S3Location {
            endpoint: Some("http://minio.ns.svc:9000".into()),
            bucket: "b".into(),
            force_path_style: Some(true),
            ..Default::default()
        }
    }

    fn env_names(access: &S3Access) -> Vec<&str> {
        access.env.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn a_static_key_comes_from_the_secret_and_nothing_is_projected() {
        let mut s3 = location();
        s3.credentials_secret_ref = Some(SecretReference::new("s3-creds"));
        let access = s3_access(&s3);
        assert_eq!(
            access.args,
            [
                "--s3-endpoint=http://minio.ns.svc:9000",
                "--s3-region=us-east-1",
                "--s3-force-path-style"
            ]
        );
        assert_eq!(
            env_names(&access),
            ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
        );
        assert!(access.volumes.is_empty() && access.mounts.is_empty());
        assert_eq!(access.service_account, None);
    }

    #[test]
    fn without_a_key_the_pod_runs_under_the_named_service_account_with_no_secret() {
        let mut s3 = location();
        s3.service_account_name = Some("etcd-backup".into());
        let access = s3_access(&s3);
        assert_eq!(access.service_account.as_deref(), Some("etcd-backup"));
        assert!(access.env.is_empty(), "{:?}", access.env);
        assert!(access.volumes.is_empty());
    }

    #[test]
    fn web_identity_projects_a_token_for_the_audience_and_sets_the_role_and_sts() {
        let mut s3 = location();
        s3.service_account_name = Some("etcd-backup".into());
        s3.web_identity = Some(S3WebIdentity {
            role_arn: "arn:minio:iam:::role/abc".into(),
            audience: Some("minio-sts".into()),
            sts_endpoint: Some("http://minio.ns.svc:9000".into()),
        });
        let access = s3_access(&s3);
        let token = access.volumes[0]
            .projected
            .as_ref()
            .and_then(|p| p.sources.as_ref())
            .and_then(|s| s[0].service_account_token.clone());
        assert_eq!(
            token,
            Some(ServiceAccountTokenProjection {
                audience: Some("minio-sts".into()),
                expiration_seconds: Some(3600),
                path: "token".into(),
            })
        );
        assert_eq!(access.mounts[0].mount_path, WEB_IDENTITY_DIR);
        assert_eq!(access.mounts[0].read_only, Some(true));
        let env: Vec<(&str, Option<&str>)> = access
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect();
        assert_eq!(
            env,
            [
                ("AWS_ROLE_ARN", Some("arn:minio:iam:::role/abc")),
                (
                    "AWS_WEB_IDENTITY_TOKEN_FILE",
                    Some("/var/run/secrets/etcd-operator/aws-web-identity/token")
                ),
                ("AWS_ENDPOINT_URL_STS", Some("http://minio.ns.svc:9000")),
            ]
        );
    }

    #[test]
    fn web_identity_defaults_to_the_aws_sts_audience() {
        let mut s3 = location();
        s3.web_identity = Some(S3WebIdentity {
            role_arn: "arn:aws:iam::1:role/r".into(),
            ..Default::default()
        });
        let access = s3_access(&s3);
        let audience = access.volumes[0]
            .projected
            .as_ref()
            .and_then(|p| p.sources.as_ref())
            .and_then(|s| s[0].service_account_token.as_ref())
            .and_then(|t| t.audience.clone());
        assert_eq!(audience.as_deref(), Some("sts.amazonaws.com"));
        assert_eq!(
            env_names(&access),
            ["AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"]
        );
    }
}
