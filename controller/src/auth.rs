//! Root authentication of a cluster (`spec.auth`): the `root` user's password from the user's
//! basic-auth Secret, and the operator-owned record of the password etcd holds now.
//!
//! etcd keeps only a hash of the root password, so to rotate it the operator must still be able
//! to log in with the old one after the user has replaced it in their Secret. The password the
//! operator last set in etcd is therefore recorded, before every change in etcd, in one Secret in
//! the operator's own namespace ([`RecordRef`], `<fullname>-auth-records` in the chart): one
//! entry per cluster (`<namespace>.<cluster>.password`, `.previous` while a change is in flight,
//! `.uid` naming the cluster incarnation). When the user's Secret no longer authenticates, a
//! recorded password logs in and `UserChangePassword` moves etcd to the new one. The record is
//! kept there, not beside the clusters, so that the operator needs no write access to the
//! Secrets of the namespaces it watches (docs/installation.md).

use std::collections::BTreeMap;
use std::fmt;

use api::labels;
use api::v1alpha2::{AuthSpec, EtcdCluster};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};

use crate::naming::FIELD_MANAGER;

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

/// Where the operator keeps its record of the root passwords it set in etcd: one Secret in its
/// own namespace (`--operator-namespace`, the Pod's namespace), named by `--auth-record-secret`.
/// It never lives beside the clusters: writing there would need write access to every Secret of
/// every namespace the operator watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRef {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for RecordRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `--auth-record-secret`'s default (the chart passes `<fullname>-auth-records`).
pub const DEFAULT_RECORD_SECRET: &str = "etcd-operator-auth-records";

/// Name of the record a previous version kept beside the cluster, owned by it. Read once to
/// move it into the operator's record, never written.
pub fn legacy_secret_name(cluster: &str) -> String {
    format!("{cluster}-auth-applied")
}

/// Key of the record holding the password etcd had before the latest change (kept until the
/// change is known to have happened, so an interrupted rotation can still log in).
pub const PREVIOUS_KEY: &str = "previous";
/// Field of a cluster's entry naming the cluster incarnation (its UID) the entry is for.
pub const UID_FIELD: &str = "uid";

/// Key of one field of a cluster's entry: `<namespace>.<cluster>.<field>`. A namespace has no
/// dot and the field ends the key, so the entries of two clusters never share a key.
pub fn record_key(namespace: &str, cluster: &str, field: &str) -> String {
    format!("{namespace}.{cluster}.{field}")
}

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

    fn from_keys(data: &BTreeMap<String, ByteString>, password: &str, previous: &str) -> Self {
        let get = |key: &str| {
            data.get(key)
                .and_then(|p| String::from_utf8(p.0.clone()).ok())
                .filter(|p| !p.is_empty())
                .map(|password| Credentials { password })
        };
        Applied {
            current: get(password),
            previous: get(previous),
        }
    }
}

/// The cluster's entry in the record's data, when there is one for this incarnation of the
/// cluster (`uid`): an entry left by a deleted cluster of the same name is not its record.
pub fn entry_from(
    data: &BTreeMap<String, ByteString>,
    namespace: &str,
    cluster: &str,
    uid: &str,
) -> Option<Applied> {
    let recorded_uid = data.get(&record_key(namespace, cluster, UID_FIELD))?;
    if recorded_uid.0 != uid.as_bytes() {
        return None;
    }
    let applied = Applied::from_keys(
        data,
        &record_key(namespace, cluster, PASSWORD_KEY),
        &record_key(namespace, cluster, PREVIOUS_KEY),
    );
    (applied != Applied::default()).then_some(applied)
}

/// A previous version's `<cluster>-auth-applied` Secret, when this incarnation of the cluster
/// (`uid`) owns it.
pub fn legacy_entry(secret: &Secret, uid: &str) -> Option<Applied> {
    let owned = secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.kind == EtcdCluster::kind(&()));
    if !owned {
        return None;
    }
    let applied = Applied::from_keys(secret.data.as_ref()?, PASSWORD_KEY, PREVIOUS_KEY);
    applied.current.is_some().then_some(applied)
}

/// The clusters with an entry in the record: `(namespace, cluster, uid)`.
pub fn entries(data: &BTreeMap<String, ByteString>) -> Vec<(String, String, String)> {
    let suffix = format!(".{UID_FIELD}");
    data.iter()
        .filter_map(|(key, uid)| {
            let (namespace, cluster) = key.strip_suffix(&suffix)?.split_once('.')?;
            let uid = String::from_utf8(uid.0.clone()).ok()?;
            Some((namespace.to_string(), cluster.to_string(), uid))
        })
        .collect()
}

fn encoded(value: &str) -> serde_json::Value {
    serde_json::to_value(ByteString(value.as_bytes().to_vec())).unwrap_or_default()
}

/// One cluster's entry as `data` keys of the record (`null`: remove the key).
fn entry_data(
    namespace: &str,
    cluster: &str,
    uid: &str,
    current: &Credentials,
    previous: Option<&Credentials>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut data = serde_json::Map::new();
    data.insert(record_key(namespace, cluster, UID_FIELD), encoded(uid));
    data.insert(
        record_key(namespace, cluster, PASSWORD_KEY),
        encoded(&current.password),
    );
    data.insert(
        record_key(namespace, cluster, PREVIOUS_KEY),
        previous
            .map(|p| encoded(&p.password))
            .unwrap_or(serde_json::Value::Null),
    );
    data
}

/// The JSON merge patch that sets the cluster's entry in the record and removes the entries of
/// `gone` (clusters deleted since). It carries the resourceVersion the entries were read at, so
/// the apiserver refuses it (409) when another write came in between instead of losing one.
pub fn entry_patch(
    resource_version: &str,
    (namespace, cluster, uid): (&str, &str, &str),
    current: &Credentials,
    previous: Option<&Credentials>,
    gone: &[(String, String)],
) -> serde_json::Value {
    let mut data = entry_data(namespace, cluster, uid, current, previous);
    for (ns, name) in gone {
        for field in [UID_FIELD, PASSWORD_KEY, PREVIOUS_KEY] {
            data.insert(record_key(ns, name, field), serde_json::Value::Null);
        }
    }
    serde_json::json!({
        "metadata": {"resourceVersion": resource_version},
        "data": data,
    })
}

/// The record Secret as first created, with one cluster's entry. It has no owner: it holds the
/// entries of every cluster, in another namespace than theirs.
pub fn record_secret(
    record: &RecordRef,
    (namespace, cluster, uid): (&str, &str, &str),
    current: &Credentials,
    previous: Option<&Credentials>,
) -> Secret {
    let data = [
        Some((UID_FIELD, uid)),
        Some((PASSWORD_KEY, current.password.as_str())),
        previous.map(|p| (PREVIOUS_KEY, p.password.as_str())),
    ]
    .into_iter()
    .flatten()
    .map(|(field, v)| {
        (
            record_key(namespace, cluster, field),
            ByteString(v.as_bytes().to_vec()),
        )
    })
    .collect();
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(record.name.clone()),
            namespace: Some(record.namespace.clone()),
            labels: Some(
                [(
                    labels::APP_MANAGED_BY.to_string(),
                    labels::MANAGED_BY_VALUE.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        type_: Some("Opaque".to_string()),
        data: Some(data),
        ..Default::default()
    }
}

fn identity(cluster: &EtcdCluster) -> (String, String, String) {
    (
        cluster.namespace().unwrap_or_default(),
        cluster.name_any(),
        cluster.uid().unwrap_or_default(),
    )
}

/// The passwords the operator recorded for the cluster (empty when it never enabled auth). A
/// record a previous version kept beside the cluster (`<cluster>-auth-applied`) is moved into
/// the operator's record the first time it is read; the old Secret is left in place (the
/// operator may not delete Secrets) and goes with its cluster.
pub async fn read_applied(
    client: &Client,
    record: &RecordRef,
    cluster: &EtcdCluster,
) -> Result<Applied, kube::Error> {
    let (ns, name, uid) = identity(cluster);
    let data = Api::<Secret>::namespaced(client.clone(), &record.namespace)
        .get_opt(&record.name)
        .await?
        .and_then(|s| s.data)
        .unwrap_or_default();
    if let Some(applied) = entry_from(&data, &ns, &name, &uid) {
        return Ok(applied);
    }
    let legacy = Api::<Secret>::namespaced(client.clone(), &ns)
        .get_opt(&legacy_secret_name(&name))
        .await?;
    let Some(applied) = legacy.as_ref().and_then(|s| legacy_entry(s, &uid)) else {
        return Ok(Applied::default());
    };
    if let Some(current) = &applied.current {
        write_applied(client, record, cluster, current, applied.previous.as_ref()).await?;
        tracing::info!(
            cluster = %name, namespace = %ns, record = %record,
            "moved the root-password record of a previous version ({}) into the operator's record",
            legacy_secret_name(&name)
        );
    }
    Ok(applied)
}

/// The entries of clusters that no longer exist (or exist as a new incarnation), other than
/// `this`. A cluster the operator cannot look up (not watched, API error) keeps its entry.
async fn gone_entries(
    client: &Client,
    data: &BTreeMap<String, ByteString>,
    this: (&str, &str),
) -> Vec<(String, String)> {
    let mut gone = Vec::new();
    for (ns, name, uid) in entries(data) {
        if (ns.as_str(), name.as_str()) == this {
            continue;
        }
        let found = Api::<EtcdCluster>::namespaced(client.clone(), &ns)
            .get_metadata_opt(&name)
            .await;
        match found {
            Ok(None) => gone.push((ns, name)),
            Ok(Some(c)) if c.metadata.uid.as_deref() != Some(uid.as_str()) => gone.push((ns, name)),
            _ => {}
        }
    }
    gone
}

/// Record `current` as the password in etcd, and `previous` as the one that may still be
/// there if the change about to be made is interrupted (`None` removes it). Returns once the
/// apiserver has stored it: every change in etcd is made after this. Concurrent writes for
/// other clusters are serialized by the resourceVersion precondition and retried.
pub async fn write_applied(
    client: &Client,
    record: &RecordRef,
    cluster: &EtcdCluster,
    current: &Credentials,
    previous: Option<&Credentials>,
) -> Result<(), kube::Error> {
    let (ns, name, uid) = identity(cluster);
    let api = Api::<Secret>::namespaced(client.clone(), &record.namespace);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let written = match api.get_opt(&record.name).await? {
            None => {
                let secret = record_secret(record, (&ns, &name, &uid), current, previous);
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..Default::default()
                };
                api.create(&params, &secret).await.map(|_| ())
            }
            Some(have) => {
                let data = have.data.unwrap_or_default();
                let gone = gone_entries(client, &data, (&ns, &name)).await;
                let patch = entry_patch(
                    have.metadata
                        .resource_version
                        .as_deref()
                        .unwrap_or_default(),
                    (&ns, &name, &uid),
                    current,
                    previous,
                    &gone,
                );
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..Default::default()
                };
                api.patch(&record.name, &params, &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
        };
        match written {
            // Created or changed meanwhile (another cluster's entry): read again.
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 8 => continue,
            other => return other,
        }
    }
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

    fn c(p: &str) -> Credentials {
        Credentials { password: p.into() }
    }

    fn record() -> RecordRef {
        RecordRef {
            namespace: "operator".into(),
            name: DEFAULT_RECORD_SECRET.into(),
        }
    }

    #[test]
    fn the_record_lives_in_the_operator_namespace_without_an_owner() {
        let s = record_secret(&record(), ("ns", "demo", "u-1"), &c("pw"), Some(&c("old")));
        assert_eq!(s.metadata.namespace.as_deref(), Some("operator"));
        assert_eq!(s.metadata.name.as_deref(), Some(DEFAULT_RECORD_SECRET));
        assert!(s.metadata.owner_references.is_none());
        let data = s.data.unwrap_or_default();
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["ns.demo.password", "ns.demo.previous", "ns.demo.uid"]
        );
        assert_eq!(
            entry_from(&data, "ns", "demo", "u-1"),
            Some(Applied {
                current: Some(c("pw")),
                previous: Some(c("old")),
            })
        );
        assert_eq!(
            entries(&data),
            vec![("ns".to_string(), "demo".to_string(), "u-1".to_string())]
        );
    }

    #[test]
    fn entries_of_different_clusters_never_collide_and_an_old_incarnation_is_not_the_record() {
        let mut data = BTreeMap::new();
        // Cluster `a` in ns `x`, and a cluster whose name ends like one of `a`'s keys.
        for (cluster, uid, pw) in [("a", "u-a", "pw-a"), ("a.password", "u-b", "pw-b")] {
            let s = record_secret(&record(), ("x", cluster, uid), &c(pw), None);
            data.extend(s.data.unwrap_or_default());
        }
        assert_eq!(
            entry_from(&data, "x", "a", "u-a").and_then(|a| a.current),
            Some(c("pw-a"))
        );
        assert_eq!(
            entry_from(&data, "x", "a.password", "u-b").and_then(|a| a.current),
            Some(c("pw-b"))
        );
        // Same name, new UID (deleted and created again): not its record.
        assert_eq!(entry_from(&data, "x", "a", "u-new"), None);
        assert_eq!(entry_from(&data, "y", "a", "u-a"), None);
        let mut found = entries(&data);
        found.sort();
        assert_eq!(
            found,
            vec![
                ("x".to_string(), "a".to_string(), "u-a".to_string()),
                ("x".to_string(), "a.password".to_string(), "u-b".to_string()),
            ]
        );
    }

    #[test]
    fn the_entry_patch_sets_this_cluster_drops_previous_and_gone_clusters_under_a_precondition() {
        let patch = entry_patch(
            "42",
            ("ns", "demo", "u-1"),
            &c("pw"),
            None,
            &[("old-ns".to_string(), "gone".to_string())],
        );
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let data = &patch["data"];
        // base64 of "pw" and "u-1", as a Secret's data carries them.
        assert_eq!(data["ns.demo.password"], "cHc=");
        assert_eq!(data["ns.demo.uid"], "dS0x");
        // A key set to null is removed by a merge patch.
        assert!(data["ns.demo.previous"].is_null());
        assert!(data
            .as_object()
            .is_some_and(|d| d.contains_key("ns.demo.previous")));
        for field in ["uid", "password", "previous"] {
            let key = format!("old-ns.gone.{field}");
            assert!(data.as_object().is_some_and(|d| d.contains_key(&key)) && data[&key].is_null());
        }
        let with_previous =
            entry_patch("1", ("ns", "demo", "u-1"), &c("new"), Some(&c("old")), &[]);
        assert_eq!(with_previous["data"]["ns.demo.previous"], "b2xk");
    }

    #[test]
    fn a_previous_versions_record_is_honoured_only_for_the_cluster_that_owns_it() {
        let legacy = |owner_uid: &str, keys: &[(&str, &str)]| Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(legacy_secret_name("demo")),
                owner_references: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: "etcd-operator.cozystack.io/v1alpha2".into(),
                        kind: "EtcdCluster".into(),
                        name: "demo".into(),
                        uid: owner_uid.into(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    },
                ]),
                ..Default::default()
            },
            data: Some(data(keys)),
            ..Default::default()
        };
        assert_eq!(legacy_secret_name("demo"), "demo-auth-applied");
        let mid_rotation = legacy(
            "u-1",
            &[
                ("username", "root"),
                ("password", "new"),
                ("previous", "old"),
            ],
        );
        assert_eq!(
            legacy_entry(&mid_rotation, "u-1"),
            Some(Applied {
                current: Some(c("new")),
                previous: Some(c("old")),
            })
        );
        // Left behind by a deleted cluster of the same name: not this cluster's.
        assert_eq!(legacy_entry(&mid_rotation, "u-2"), None);
        // Without a password there is nothing to move.
        assert_eq!(
            legacy_entry(&legacy("u-1", &[("username", "root")]), "u-1"),
            None
        );
        let mut unowned = legacy("u-1", &[("password", "pw")]);
        unowned.metadata.owner_references = None;
        assert_eq!(legacy_entry(&unowned, "u-1"), None);
    }

    #[test]
    fn candidates_are_the_recorded_passwords_other_than_the_one_that_failed() {
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
