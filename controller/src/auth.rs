//! Root authentication of a cluster (`spec.auth`): the `root` user's password from the user's
//! basic-auth Secret, and the operator-owned record of the password etcd holds now.
//!
//! etcd keeps only a hash of the root password, so to rotate it the operator must still be able
//! to log in with the old one after the user has replaced it in their Secret. The password the
//! operator last set in etcd is therefore recorded in a Secret of its own,
//! `<cluster>-auth-applied` (key `password`, owned by the EtcdCluster, removed with it), written
//! before every change in etcd: when the user's Secret no longer authenticates, the recorded
//! password logs in and `UserChangePassword` moves etcd to the new one.

use std::collections::BTreeMap;
use std::fmt;

use api::labels;
use api::v1alpha2::{AuthSpec, EtcdCluster};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::ByteString;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::context::FIELD_MANAGER;

/// The only etcd user the operator manages: etcd enables auth only when a `root` user with the
/// `root` role exists.
pub const ROOT: &str = "root";
/// The built-in etcd role with every permission.
pub const ROOT_ROLE: &str = "root";
/// Keys of a `kubernetes.io/basic-auth` Secret.
pub const PASSWORD_KEY: &str = "password";
pub const USERNAME_KEY: &str = "username";

/// The root password to dial with. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials { password: <redacted> }")
    }
}

impl Credentials {
    /// A stable digest naming this password in caches and logs without revealing it.
    pub fn fingerprint(&self) -> String {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: the same password gives the same value in every process.
        let mut h = std::hash::DefaultHasher::new();
        self.password.hash(&mut h);
        format!("{:016x}", h.finish())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthSecretError {
    #[error(
        "Secret {namespace}/{name} (spec.auth.rootCredentialsSecretRef) does not exist; create it \
         (type kubernetes.io/basic-auth) with username=root and the root password under the key password"
    )]
    Missing { namespace: String, name: String },
    #[error(
        "Secret {namespace}/{name} (spec.auth.rootCredentialsSecretRef) has no non-empty key password; \
         add the root password under the key password"
    )]
    NoPassword { namespace: String, name: String },
    #[error(
        "Secret {namespace}/{name} (spec.auth.rootCredentialsSecretRef) has username {username:?}, but the \
         etcd user the operator manages is always root; set username to root (or remove the key)"
    )]
    NotRoot {
        namespace: String,
        name: String,
        username: String,
    },
    #[error(
        "Secret {namespace}/{name} (spec.auth.rootCredentialsSecretRef): the password is not valid UTF-8; \
         etcd passwords are strings"
    )]
    NotUtf8 { namespace: String, name: String },
    #[error("cannot read Secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl AuthSecretError {
    /// The user must fix the Secret; a failed read is transient.
    pub fn is_user_fixable(&self) -> bool {
        !matches!(self, AuthSecretError::Api { .. })
    }
}

/// Whether the cluster asks for root auth.
pub fn wanted(auth: Option<&AuthSpec>) -> bool {
    auth.is_some_and(|a| a.enabled)
}

/// The root credentials from `data` of the user's Secret (`None` when the Secret is absent).
pub fn credentials_from(
    namespace: &str,
    name: &str,
    data: Option<&BTreeMap<String, ByteString>>,
) -> Result<Credentials, AuthSecretError> {
    let Some(data) = data else {
        return Err(AuthSecretError::Missing {
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    };
    if let Some(user) = data.get(USERNAME_KEY) {
        let user = String::from_utf8_lossy(&user.0);
        if user.trim() != ROOT {
            return Err(AuthSecretError::NotRoot {
                namespace: namespace.to_string(),
                name: name.to_string(),
                username: user.into_owned(),
            });
        }
    }
    let password = data
        .get(PASSWORD_KEY)
        .filter(|p| !p.0.is_empty())
        .ok_or_else(|| AuthSecretError::NoPassword {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    let password = String::from_utf8(password.0.clone()).map_err(|_| AuthSecretError::NotUtf8 {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })?;
    Ok(Credentials { password })
}

/// The root credentials from the user's Secret, or `None` when the cluster does not ask for auth.
pub async fn load(
    client: &Client,
    namespace: &str,
    auth: Option<&AuthSpec>,
) -> Result<Option<Credentials>, AuthSecretError> {
    let Some(auth) = auth.filter(|a| a.enabled) else {
        return Ok(None);
    };
    // CEL requires the reference with `enabled`; an object stored before that rule is named too.
    let name = auth
        .root_credentials_secret_ref
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    if name.is_empty() {
        return Err(AuthSecretError::Missing {
            namespace: namespace.to_string(),
            name: "<spec.auth.rootCredentialsSecretRef not set>".to_string(),
        });
    }
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(&name)
        .await
        .map_err(|source| AuthSecretError::Api {
            namespace: namespace.to_string(),
            name: name.clone(),
            source,
        })?;
    credentials_from(
        namespace,
        &name,
        secret
            .as_ref()
            .map(|s| s.data.clone().unwrap_or_default())
            .as_ref(),
    )
    .map(Some)
}

/// Whether etcd has auth on as far as the operator knows (`status.authEnabled`, latched after
/// `AuthEnable`): from then on every call logs in as root.
pub fn latched(cluster: &EtcdCluster) -> bool {
    cluster.status.as_ref().and_then(|s| s.auth_enabled) == Some(true)
}

/// The credentials to dial the cluster with: the user's root password once auth is on (and
/// the cluster still asks for it), else none.
pub async fn dial_credentials(
    client: &Client,
    cluster: &EtcdCluster,
) -> Result<Option<Credentials>, AuthSecretError> {
    if !wanted(cluster.spec.auth.as_ref()) || !latched(cluster) {
        return Ok(None);
    }
    load(
        client,
        &cluster.namespace().unwrap_or_default(),
        cluster.spec.auth.as_ref(),
    )
    .await
}

/// Name of the operator's record of the password set in etcd.
pub fn applied_secret_name(cluster: &str) -> String {
    format!("{cluster}-auth-applied")
}

/// Key of the record holding the password etcd had before the latest change (kept until the
/// change is known to have happened, so an interrupted rotation can still log in).
pub const PREVIOUS_KEY: &str = "previous";

/// What the record says: the password set in etcd, and the one before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub current: Option<Credentials>,
    pub previous: Option<Credentials>,
}

impl Applied {
    /// Recorded passwords other than `creds`, newest first: what may still log in when `creds`
    /// does not.
    pub fn candidates(&self, creds: &Credentials) -> Vec<Credentials> {
        let mut out: Vec<Credentials> = Vec::new();
        for c in [&self.current, &self.previous].into_iter().flatten() {
            if c != creds && !out.contains(c) {
                out.push(c.clone());
            }
        }
        out
    }
}

/// The passwords the operator recorded for the cluster (empty when it never enabled auth).
pub async fn read_applied(client: &Client, cluster: &EtcdCluster) -> Result<Applied, kube::Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let data = Api::<Secret>::namespaced(client.clone(), &ns)
        .get_opt(&applied_secret_name(&cluster.name_any()))
        .await?
        .and_then(|s| s.data)
        .unwrap_or_default();
    let get = |key: &str| {
        data.get(key)
            .and_then(|p| String::from_utf8(p.0.clone()).ok())
            .filter(|p| !p.is_empty())
            .map(|password| Credentials { password })
    };
    Ok(Applied {
        current: get(PASSWORD_KEY),
        previous: get(PREVIOUS_KEY),
    })
}

/// The record Secret as the operator writes it: owned by the cluster, with its labels.
pub fn applied_secret(
    cluster: &EtcdCluster,
    current: &Credentials,
    previous: Option<&Credentials>,
) -> Secret {
    let name = cluster.name_any();
    let owner = OwnerReference {
        api_version: EtcdCluster::api_version(&()).to_string(),
        kind: EtcdCluster::kind(&()).to_string(),
        name: name.clone(),
        uid: cluster.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(applied_secret_name(&name)),
            namespace: cluster.namespace(),
            labels: Some(labels::cluster_labels(&name)),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        type_: Some("kubernetes.io/basic-auth".to_string()),
        string_data: None,
        data: Some(
            [
                Some((USERNAME_KEY, ROOT)),
                Some((PASSWORD_KEY, current.password.as_str())),
                previous.map(|p| (PREVIOUS_KEY, p.password.as_str())),
            ]
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect(),
        ),
        ..Default::default()
    }
}

/// Record `current` as the password in etcd, and `previous` as the one that may still be
/// there if the change about to be made is interrupted (server-side apply, idempotent; a key
/// left out is removed).
pub async fn write_applied(
    client: &Client,
    cluster: &EtcdCluster,
    current: &Credentials,
    previous: Option<&Credentials>,
) -> Result<(), kube::Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let secret = applied_secret(cluster, current, previous);
    let mut secret = serde_json::to_value(&secret).map_err(kube::Error::SerdeError)?;
    secret["apiVersion"] = "v1".into();
    secret["kind"] = "Secret".into();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .patch(
            &applied_secret_name(&cluster.name_any()),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn the_password_key_is_read_and_the_user_must_be_root() {
        let ok = credentials_from(
            "ns",
            "s",
            Some(&data(&[("username", "root"), ("password", "pw")])),
        );
        assert_eq!(ok.map(|c| c.password).ok().as_deref(), Some("pw"));
        // username is optional (it is for other consumers of the Secret).
        assert!(credentials_from("ns", "s", Some(&data(&[("password", "pw")]))).is_ok());

        let missing = credentials_from("ns", "s", None)
            .err()
            .map(|e| e.to_string());
        assert!(missing.is_some_and(|m| m.contains("ns/s") && m.contains("does not exist")));
        let no_pw = credentials_from(
            "ns",
            "s",
            Some(&data(&[("username", "root"), ("password", "")])),
        )
        .err()
        .map(|e| e.to_string());
        assert!(no_pw.is_some_and(|m| m.contains("key password")));
        let admin = credentials_from(
            "ns",
            "s",
            Some(&data(&[("username", "admin"), ("password", "x")])),
        )
        .err()
        .map(|e| e.to_string());
        assert!(
            admin.is_some_and(|m| m.contains("\"admin\"") && m.contains("set username to root"))
        );
    }

    #[test]
    fn credentials_never_print_the_password() {
        let c = Credentials {
            password: "s3cret".into(),
        };
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(!c.fingerprint().contains("s3cret"));
        assert_eq!(c.fingerprint(), c.clone().fingerprint());
        assert_ne!(
            c.fingerprint(),
            Credentials {
                password: "other".into()
            }
            .fingerprint()
        );
    }

    #[test]
    fn the_record_is_owned_by_the_cluster_and_labelled() {
        let mut c = EtcdCluster::new("demo", Default::default());
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("u-1".into());
        let old = Credentials {
            password: "old".into(),
        };
        let s = applied_secret(
            &c,
            &Credentials {
                password: "pw".into(),
            },
            Some(&old),
        );
        assert_eq!(s.metadata.name.as_deref(), Some("demo-auth-applied"));
        let owner = &s.metadata.owner_references.unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("EtcdCluster", "u-1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(
            s.metadata
                .labels
                .unwrap_or_default()
                .get(labels::CLUSTER)
                .map(String::as_str),
            Some("demo")
        );
        let data = s.data.unwrap_or_default();
        assert_eq!(
            data.get("password").map(|b| b.0.clone()),
            Some(b"pw".to_vec())
        );
        assert_eq!(
            data.get("previous").map(|b| b.0.clone()),
            Some(b"old".to_vec())
        );
    }

    #[test]
    fn candidates_are_the_recorded_passwords_other_than_the_one_that_failed() {
        let c = |p: &str| Credentials { password: p.into() };
        let applied = Applied {
            current: Some(c("new")),
            previous: Some(c("old")),
        };
        // An interrupted rotation: the record already says "new" but etcd still has "old".
        assert_eq!(applied.candidates(&c("new")), vec![c("old")]);
        assert_eq!(applied.candidates(&c("other")), vec![c("new"), c("old")]);
        assert!(Applied::default().candidates(&c("x")).is_empty());
    }
}
