//! The Rust mirror of every validation rule the CRDs carry (OpenAPI bounds, patterns and enums,
//! and the CEL rules), returning *all* violations of an object or transition at once, each with
//! its field path, offending value, previous value and how to fix it.
//!
//! The CRD's CEL rules are the source of truth for accept/reject; the tests in this crate and the
//! API-layer suite run one shared corpus through both and require the same verdict. Messages here
//! are richer than CEL can produce, but must never accept what CEL rejects or reject what it accepts,
//! with one deliberate exception: a cron expression or time zone (EtcdSnapshotSchedule,
//! EtcdDefragPolicy) is parsed here as the controller parses it, where CEL can check only its
//! shape; a CEL-only install accepts `61 * * * *` and reports it in the object's status instead.

use std::fmt;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::cron::{Schedule, ScheduleError};
use crate::quantity;
use crate::v1alpha2::{
    DefragRule, EtcdClusterSpec, EtcdDefragPolicySpec, EtcdDefragSpec, EtcdSnapshotScheduleSpec,
    EtcdSnapshotSpec, PvcLocation, RestoreSource, S3Location, SnapshotDestination, StorageMedium,
    CHECK_INTERVAL_PATTERN, CLUSTER_NAME_MAX_LEN, MAX_AGE_PATTERN, MAX_HISTORY_LIMIT,
    MAX_KEEP_LAST, MAX_POLICY_NAME, MAX_PROGRESS_DEADLINE_SECONDS, MAX_QUOTA_BACKEND_BYTES,
    MAX_REPLICAS, MAX_SCHEDULE_NAME, MAX_SNAPSHOT_COUNT, QUOTA_USAGE_PATTERN, RETENTION_PATTERN,
    VERSION_PATTERN,
};

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// JSON path of the offending field, e.g. `spec.storage.size`.
    pub field: String,
    /// The offending value, rendered for a human.
    pub value: Option<String>,
    /// The previous value, for update rules.
    pub old_value: Option<String>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: String,
}

impl Violation {
    fn new(field: impl Into<String>, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: None,
            old_value: None,
            message: message.into(),
            hint: hint.into(),
        }
    }

    fn value(mut self, value: impl fmt::Display) -> Self {
        self.value = Some(value.to_string());
        self
    }

    fn old_value(mut self, value: impl fmt::Display) -> Self {
        self.old_value = Some(value.to_string());
        self
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)?;
        match (&self.old_value, &self.value) {
            (Some(old), Some(new)) => write!(f, " (was {old}, now {new})")?,
            (None, Some(new)) => write!(f, " (got {new})")?,
            _ => {}
        }
        if !self.hint.is_empty() {
            write!(f, "; {}", self.hint)?;
        }
        Ok(())
    }
}

/// Render a list of violations the way the webhook reports them: a count, then one per line.
pub fn render(kind: &str, name: &str, violations: &[Violation]) -> String {
    let mut out = format!(
        "{kind} {name:?} is invalid ({} problem{}):",
        violations.len(),
        if violations.len() == 1 { "" } else { "s" }
    );
    for v in violations {
        out.push_str("\n- ");
        out.push_str(&v.to_string());
    }
    out
}

static VERSION_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(VERSION_PATTERN).expect("VERSION_PATTERN is a valid regex"));
static RETENTION_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(RETENTION_PATTERN).expect("RETENTION_PATTERN is a valid regex")
});
static QUOTA_USAGE_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(QUOTA_USAGE_PATTERN).expect("QUOTA_USAGE_PATTERN is a valid regex")
});
static DNS_LABEL_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("a valid regex"));
static MAX_AGE_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(MAX_AGE_PATTERN).expect("MAX_AGE_PATTERN is a valid regex"));
static CHECK_INTERVAL_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(CHECK_INTERVAL_PATTERN).expect("CHECK_INTERVAL_PATTERN is a valid regex")
});

/// Deserialize a `spec` (or any typed part of an object; `prefix` is its path, empty for a whole
/// object) from JSON, turning a type error into a violation that names the field where it
/// happened (`spec.tls.client.certManager.serverIssuerRef.kind`).
pub fn parse<T: DeserializeOwned>(prefix: &str, value: &serde_json::Value) -> Result<T, Violation> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.path().to_string();
        let mut field = if inner == "." || inner.is_empty() {
            prefix.to_string()
        } else if prefix.is_empty() {
            inner
        } else {
            format!("{prefix}.{inner}")
        };
        let detail = err.inner().to_string();
        // serde reports a missing field at its parent; name the field itself, as the apiserver does.
        if let Some(missing) = detail
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            field = format!("{field}.{missing}");
            return Violation::new(
                field,
                "is required",
                "set it (see `kubectl explain` for the field)",
            );
        }
        if let Some(out_of_range) = integer_out_of_range(&field, &detail) {
            return out_of_range;
        }
        Violation::new(
            field,
            format!("cannot be read: {detail}"),
            "fix the value's type or spelling (see `kubectl explain` for the field)",
        )
    })
}

/// The bounds and the fix of the integer fields with bounds of their own (the CRD schema carries
/// the same as `minimum`/`maximum`).
fn integer_bounds(field: &str) -> Option<(i64, i64, &'static str)> {
    Some(match field {
        "spec.replicas" => (
            0,
            MAX_REPLICAS.into(),
            "set the number of members (3 or 5 for production, 0 to pause)",
        ),
        "spec.progressDeadlineSeconds" => (
            1,
            MAX_PROGRESS_DEADLINE_SECONDS.into(),
            "leave it unset for the default of 600 seconds",
        ),
        "spec.options.quotaBackendBytes" => (
            0,
            MAX_QUOTA_BACKEND_BYTES,
            "etcd suggests at most 8589934592 (8Gi); leave it unset (or 0) for etcd's default of 2GiB",
        ),
        "spec.options.snapshotCount" => (
            1,
            MAX_SNAPSHOT_COUNT,
            "leave it unset for etcd's default of 10000",
        ),
        _ => return None,
    })
}

/// A number that does not fit the field's integer type (serde's ``invalid value: integer `N`,
/// expected i32``), said as the schema's bound says it.
fn integer_out_of_range(field: &str, detail: &str) -> Option<Violation> {
    let rest = detail.strip_prefix("invalid value: integer `")?;
    let (number, expected) = rest.split_once("`, expected ")?;
    let (min, max, hint) = match (integer_bounds(field), expected) {
        (Some(bounds), _) => bounds,
        (None, "i32" | "a 32-bit integer") => (
            i32::MIN.into(),
            i32::MAX.into(),
            "use a value that fits a 32-bit integer (see `kubectl explain` for the field)",
        ),
        (None, _) => return None,
    };
    Some(Violation::new(field, format!("must be between {min} and {max}"), hint).value(number))
}

/// Validate a whole object as it arrives from the API (create when `old` is `None`, else update),
/// by kind. Unreadable specs are reported as violations naming the field that failed to parse.
pub fn object(
    kind: &str,
    new: &serde_json::Value,
    old: Option<&serde_json::Value>,
) -> Vec<Violation> {
    fn spec_of<T: DeserializeOwned>(obj: &serde_json::Value) -> Result<T, Violation> {
        match obj.get("spec") {
            Some(spec) => parse("spec", spec),
            None => Err(Violation::new(
                "spec",
                "is required",
                "add a spec to the object",
            )),
        }
    }
    fn judge<T: DeserializeOwned>(
        new: &serde_json::Value,
        old: Option<&serde_json::Value>,
        create: fn(&T) -> Vec<Violation>,
        update: fn(&T, &T) -> Vec<Violation>,
    ) -> Vec<Violation> {
        let new = match spec_of::<T>(new) {
            Ok(spec) => spec,
            Err(v) => return vec![v],
        };
        match old.map(spec_of::<T>) {
            None => create(&new),
            Some(Ok(old)) => update(&old, &new),
            // Judging the new spec alone would skip every transition rule (shrink, immutable
            // subtrees), so an update whose stored object cannot be read is denied.
            Some(Err(unreadable)) => vec![stored_spec_unreadable(&unreadable)],
        }
    }
    match kind {
        // The name rule is a plain (non-transition) CEL rule on the CRD root, so the apiserver
        // evaluates it on update too; so does this mirror.
        "EtcdCluster" => {
            let mut out: Vec<Violation> = named(new).and_then(cluster_name).into_iter().collect();
            out.extend(judge::<EtcdClusterSpec>(
                new,
                old,
                cluster_create,
                cluster_update,
            ));
            out
        }
        "EtcdSnapshot" => judge::<EtcdSnapshotSpec>(new, old, snapshot_create, snapshot_update),
        "EtcdDefrag" => judge::<EtcdDefragSpec>(new, old, defrag_create, defrag_update),
        // Plain rules, judged on create and update alike (the specs are mutable).
        "EtcdSnapshotSchedule" => {
            let mut out: Vec<Violation> = named(new)
                .and_then(|n| runs_owner_name(n, MAX_SCHEDULE_NAME, SCHEDULE_NAMES))
                .into_iter()
                .collect();
            out.extend(judge::<EtcdSnapshotScheduleSpec>(
                new,
                old,
                schedule_spec,
                |_, new| schedule_spec(new),
            ));
            out
        }
        "EtcdDefragPolicy" => {
            let mut out: Vec<Violation> = named(new)
                .and_then(|n| runs_owner_name(n, MAX_POLICY_NAME, POLICY_NAMES))
                .into_iter()
                .collect();
            out.extend(judge::<EtcdDefragPolicySpec>(
                new,
                old,
                policy_spec,
                |_, new| policy_spec(new),
            ));
            out
        }
        other => vec![Violation::new(
            "kind",
            format!("{other:?} is not validated here"),
            "send only EtcdCluster, EtcdSnapshot, EtcdDefrag, EtcdSnapshotSchedule and EtcdDefragPolicy objects to this validator",
        )],
    }
}

/// The object's `metadata.name`, when it has one (`generateName` is resolved before admission).
fn named(object: &serde_json::Value) -> Option<&str> {
    object.pointer("/metadata/name").and_then(|n| n.as_str())
}

/// The violation for an update whose stored (old) object does not parse.
fn stored_spec_unreadable(why: &Violation) -> Violation {
    Violation::new(
        "spec",
        format!(
            "cannot be checked: the stored object could not be read ({}: {}), so this update cannot be compared with it",
            why.field, why.message
        ),
        "the stored object was written under other rules (an older operator, or while this webhook was not called); \
         labels, annotations and finalizers can still be changed, but to change the spec delete and recreate the object",
    )
}

// ---------------------------------------------------------------------------------------------
// EtcdCluster

/// An EtcdCluster's `metadata.name`, judged as the CRD's root CEL rule judges it: a DNS-1035
/// label of at most [`CLUSTER_NAME_MAX_LEN`] characters. Kubernetes itself only requires a
/// DNS-1123 subdomain, but the operator names Services `<name>` and `<name>-client` and Pods
/// `<name>-xxxxx` after the cluster, and a name those cannot carry would fail only at reconcile.
/// An absent name passes, as in the CEL rule (`generateName` is resolved before validation).
pub fn cluster_name(name: &str) -> Option<Violation> {
    let mut problems = Vec::new();
    let length = name.chars().count();
    if length > CLUSTER_NAME_MAX_LEN {
        problems.push(format!("is {length} characters long"));
    }
    match name.chars().next() {
        None => problems.push("is empty".to_string()),
        Some(c) if !c.is_ascii_lowercase() => {
            problems.push(format!("starts with {c:?}, not a lowercase letter"))
        }
        Some(_) => {}
    }
    let mut others: Vec<char> = Vec::new();
    for c in name.chars() {
        if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || others.contains(&c)) {
            others.push(c);
        }
    }
    if !others.is_empty() {
        let shown: Vec<String> = others.iter().map(|c| format!("{c:?}")).collect();
        problems.push(format!("contains {}", shown.join(", ")));
    }
    if name.ends_with('-') {
        problems.push("ends with '-'".to_string());
    }
    if problems.is_empty() {
        return None;
    }
    Some(
        Violation::new(
            "metadata.name",
            format!(
                "must be a DNS-1035 label of at most {CLUSTER_NAME_MAX_LEN} characters, because the operator names \
                 Services <name> and <name>-client and Pods <name>-xxxxx after the cluster; this name {}",
                problems.join(", ")
            ),
            "choose a name of lowercase letters, digits and '-' that starts with a letter and ends with a letter or digit, e.g. my-etcd",
        )
        .value(format!("{name:?}")),
    )
}

/// Every violation of an EtcdCluster spec on create (and of the new spec on update).
pub fn cluster_create(spec: &EtcdClusterSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    let memory = spec.storage.medium == Some(StorageMedium::Memory);

    if spec.replicas < 0 {
        out.push(
            Violation::new(
                "spec.replicas",
                "must be 0 or more",
                "set the number of members (3 or 5 for production, 0 to pause)",
            )
            .value(spec.replicas),
        );
    }
    if spec.replicas > MAX_REPLICAS {
        out.push(
            Violation::new(
                "spec.replicas",
                format!(
                    "must be at most {MAX_REPLICAS}: every write waits for a majority of the members, and etcd advises 3, 5 or 7"
                ),
                "set 3, 5 or 7 (0 to pause)",
            )
            .value(spec.replicas),
        );
    }
    if spec.replicas == 0 && memory {
        out.push(
            Violation::new(
                "spec.replicas",
                "0 (pause) is unsupported with spec.storage.medium=Memory: a paused member's tmpfs data is lost, so the cluster could not resume",
                "keep replicas >= 1; to tear the cluster down, delete the EtcdCluster",
            )
            .value(0),
        );
    }
    if !VERSION_RE.is_match(&spec.version) {
        out.push(
            Violation::new(
                "spec.version",
                "must be an etcd release as X.Y.Z (the image tag is vX.Y.Z)",
                "write e.g. 3.6.11, without a leading v",
            )
            .value(format!("{:?}", spec.version)),
        );
    }
    if spec.progress_deadline_seconds < 1 {
        out.push(
            Violation::new(
                "spec.progressDeadlineSeconds",
                "must be at least 1",
                "leave it unset for the default of 600 seconds",
            )
            .value(spec.progress_deadline_seconds),
        );
    }
    if spec.progress_deadline_seconds > MAX_PROGRESS_DEADLINE_SECONDS {
        out.push(
            Violation::new(
                "spec.progressDeadlineSeconds",
                format!("must be at most {MAX_PROGRESS_DEADLINE_SECONDS} (30 days)"),
                "leave it unset for the default of 600 seconds",
            )
            .value(spec.progress_deadline_seconds),
        );
    }

    out.extend(storage_size(&spec.storage.size, memory));

    if let Some(bootstrap) = &spec.bootstrap {
        if let Some(restore) = &bootstrap.restore {
            if memory {
                out.push(Violation::new(
                    "spec.bootstrap.restore",
                    "is unsupported with spec.storage.medium=Memory: a restored tmpfs seed would lose the data on its first restart",
                    "use PVC storage (remove storage.medium) for a restored cluster",
                ));
            }
            out.extend(restore_source(
                "spec.bootstrap.restore.source",
                &restore.source,
            ));
        }
    }

    if let Some(auth) = spec.auth.as_ref().filter(|a| a.enabled) {
        let has_client_tls = spec.tls.as_ref().is_some_and(|t| t.client.is_some());
        if !has_client_tls {
            out.push(
                Violation::new(
                    "spec.auth.enabled",
                    "requires spec.tls.client: root credentials must not cross the network in plaintext",
                    "configure spec.tls.client (serverSecretRef or certManager), or set auth.enabled=false",
                )
                .value(true),
            );
        }
        if auth.root_credentials_secret_ref.is_none() {
            out.push(Violation::new(
                "spec.auth.rootCredentialsSecretRef",
                "is required when spec.auth.enabled is true",
                "name a kubernetes.io/basic-auth Secret with the root username and password",
            ));
        }
    }
    if let Some(name) = spec
        .auth
        .as_ref()
        .and_then(|a| a.root_credentials_secret_ref.as_ref())
        .map(|r| &r.name)
    {
        out.extend(non_empty("spec.auth.rootCredentialsSecretRef.name", name));
    }

    if let Some(tls) = &spec.tls {
        if let Some(client) = &tls.client {
            let p = "spec.tls.client";
            match (&client.server_secret_ref, &client.cert_manager) {
                (Some(_), Some(_)) => out.push(Violation::new(
                    p,
                    "sets both serverSecretRef and certManager",
                    "keep exactly one: serverSecretRef for your own Secret, or certManager for operator-emitted Certificates",
                )),
                (None, None) => out.push(Violation::new(
                    p,
                    "sets neither serverSecretRef nor certManager",
                    "set exactly one: serverSecretRef for your own Secret, or certManager for operator-emitted Certificates",
                )),
                _ => {}
            }
            if client.operator_client_secret_ref.is_some() && client.cert_manager.is_some() {
                out.push(Violation::new(
                    "spec.tls.client.operatorClientSecretRef",
                    "cannot be combined with certManager",
                    "remove operatorClientSecretRef and set certManager.operatorClientIssuerRef to have the operator's client certificate issued",
                ));
            }
            if let Some(r) = &client.server_secret_ref {
                out.extend(non_empty("spec.tls.client.serverSecretRef.name", &r.name));
            }
            if let Some(r) = &client.operator_client_secret_ref {
                out.extend(non_empty(
                    "spec.tls.client.operatorClientSecretRef.name",
                    &r.name,
                ));
            }
            if let Some(cm) = &client.cert_manager {
                out.extend(non_empty(
                    "spec.tls.client.certManager.serverIssuerRef.name",
                    &cm.server_issuer_ref.name,
                ));
                if let Some(r) = &cm.operator_client_issuer_ref {
                    out.extend(non_empty(
                        "spec.tls.client.certManager.operatorClientIssuerRef.name",
                        &r.name,
                    ));
                }
            }
        }
        if let Some(peer) = &tls.peer {
            let p = "spec.tls.peer";
            match (&peer.secret_ref, &peer.cert_manager) {
                (Some(_), Some(_)) => out.push(Violation::new(
                    p,
                    "sets both secretRef and certManager",
                    "keep exactly one: secretRef for your own Secret, or certManager for an operator-emitted Certificate",
                )),
                (None, None) => out.push(Violation::new(
                    p,
                    "sets neither secretRef nor certManager",
                    "set exactly one: secretRef for your own Secret, or certManager for an operator-emitted Certificate",
                )),
                _ => {}
            }
            if let Some(r) = &peer.secret_ref {
                out.extend(non_empty("spec.tls.peer.secretRef.name", &r.name));
            }
            if let Some(cm) = &peer.cert_manager {
                out.extend(non_empty(
                    "spec.tls.peer.certManager.issuerRef.name",
                    &cm.issuer_ref.name,
                ));
            }
        }
    }

    if let Some(options) = &spec.options {
        if let Some(q) = options.quota_backend_bytes.filter(|q| *q < 0) {
            out.push(
                Violation::new(
                    "spec.options.quotaBackendBytes",
                    "must be 0 or more",
                    "leave it unset (or 0) for etcd's default of 2GiB",
                )
                .value(q),
            );
        }
        if let Some(q) = options
            .quota_backend_bytes
            .filter(|q| *q > MAX_QUOTA_BACKEND_BYTES)
        {
            out.push(
                Violation::new(
                    "spec.options.quotaBackendBytes",
                    format!("must be at most {MAX_QUOTA_BACKEND_BYTES} (1Ti)"),
                    "etcd suggests at most 8589934592 (8Gi); leave it unset (or 0) for etcd's default of 2GiB",
                )
                .value(q),
            );
        }
        if let Some(n) = options.snapshot_count.filter(|n| *n > MAX_SNAPSHOT_COUNT) {
            out.push(
                Violation::new(
                    "spec.options.snapshotCount",
                    format!(
                        "must be at most {MAX_SNAPSHOT_COUNT}: etcd keeps that many raft entries in memory between snapshots"
                    ),
                    "leave it unset for etcd's default of 10000",
                )
                .value(n),
            );
        }
        if let Some(n) = options.snapshot_count.filter(|n| *n < 1) {
            out.push(
                Violation::new(
                    "spec.options.snapshotCount",
                    "must be at least 1",
                    "leave it unset for etcd's default of 10000",
                )
                .value(n),
            );
        }
        match &options.auto_compaction_retention {
            Some(IntOrString::Int(n)) if *n < 0 => out.push(
                Violation::new(
                    "spec.options.autoCompactionRetention",
                    "must not be negative",
                    "use a duration such as 1h or a non-negative integer",
                )
                .value(n),
            ),
            Some(IntOrString::String(s)) if !RETENTION_RE.is_match(s) => out.push(
                Violation::new(
                    "spec.options.autoCompactionRetention",
                    "must be a duration or an integer",
                    "use a duration such as 1h, 30m or 1h30m, or an integer (hours in periodic mode, revisions in revision mode)",
                )
                .value(format!("{s:?}")),
            ),
            _ => {}
        }
    }
    out
}

/// Every violation of an EtcdCluster update: the create rules on the new spec, then the
/// transition rules (what may not change after create).
pub fn cluster_update(old: &EtcdClusterSpec, new: &EtcdClusterSpec) -> Vec<Violation> {
    let mut out = cluster_create(new);
    out.extend(version_upgrade(&old.version, &new.version));

    if let (Ok(o), Ok(n)) = (
        quantity::parse(&old.storage.size),
        quantity::parse(&new.storage.size),
    ) {
        if n < o {
            out.push(
                Violation::new(
                    "spec.storage.size",
                    "cannot shrink; PVCs only grow",
                    format!(
                        "set {} or more, or delete and recreate the cluster",
                        old.storage.size.0
                    ),
                )
                .old_value(&old.storage.size.0)
                .value(&new.storage.size.0),
            );
        }
    }
    let medium = |s: &EtcdClusterSpec| match s.storage.medium {
        Some(StorageMedium::Memory) => "Memory",
        _ => "\"\"",
    };
    if medium(old) != medium(new) {
        out.push(
            Violation::new(
                "spec.storage.medium",
                "cannot change after the cluster is created",
                "delete and recreate the cluster to switch between PVC and Memory storage",
            )
            .old_value(medium(old))
            .value(medium(new)),
        );
    }
    if old.storage.storage_class_name != new.storage.storage_class_name {
        let show = |v: &Option<String>| match v {
            Some(s) => format!("{s:?}"),
            None => "unset".to_string(),
        };
        out.push(
            Violation::new(
                "spec.storage.storageClassName",
                "cannot be added, removed or changed after the cluster is created: a PVC's StorageClass is fixed",
                format!(
                    "restore the previous value ({}), or delete and recreate the cluster",
                    show(&old.storage.storage_class_name)
                ),
            )
            .old_value(show(&old.storage.storage_class_name))
            .value(show(&new.storage.storage_class_name)),
        );
    }
    immutable(&mut out, "spec.tls", &old.tls, &new.tls, "TLS");
    immutable(
        &mut out,
        "spec.auth",
        &old.auth,
        &new.auth,
        "authentication",
    );
    immutable(
        &mut out,
        "spec.bootstrap",
        &old.bootstrap,
        &new.bootstrap,
        "the bootstrap source (restore happens only at first bootstrap)",
    );
    out
}

/// `X.Y.Z` as numbers, when `version` matches [`VERSION_PATTERN`] (parts of at most 9 digits).
fn version_parts(version: &str) -> Option<(u32, u32, u32)> {
    if !VERSION_RE.is_match(version) {
        return None;
    }
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// The upgrade-path rule for `spec.version` on update, as the CRD's CEL rule
/// ([`crate::v1alpha2::VERSION_UPGRADE_RULE`]) judges it: etcd supports a patch upgrade within a
/// minor version and an upgrade to the next minor version, nothing else
/// (<https://etcd.io/docs/v3.6/upgrades/upgrading-etcd/>). A downgrade, even of the patch,
/// needs etcd's downgrade API (3.6+), which the operator does not drive. A version that does not
/// match the pattern (an old stored object, or a new one the pattern rule rejects) is not
/// judged here.
pub fn version_upgrade(old: &str, new: &str) -> Option<Violation> {
    let ((o_major, o_minor, o_patch), (n_major, n_minor, n_patch)) =
        (version_parts(old)?, version_parts(new)?);
    let problem = if n_major != o_major {
        format!(
            "changes the major version: etcd documents no upgrade path from {o_major}.x to {n_major}.x"
        )
    } else if (n_minor == o_minor && n_patch >= o_patch)
        || u64::from(n_minor) == u64::from(o_minor) + 1
    {
        return None;
    } else if n_minor > o_minor {
        format!(
            "skips minor version {o_major}.{}: etcd upgrades one minor version at a time, and an upgrade that skips one is unsupported and likely fails",
            o_minor + 1
        )
    } else {
        "is a downgrade: etcd supports downgrades only through its downgrade API (3.6 and later, one minor at a time), which the operator does not drive".to_string()
    };
    let next_minor = format!("{o_major}.{}.x", u64::from(o_minor) + 1);
    Violation::new(
        "spec.version",
        problem,
        format!(
            "keep {old}, or set a later {o_major}.{o_minor}.x patch or {next_minor} (upgrade one minor at a time: https://etcd.io/docs/v3.6/upgrades/upgrading-etcd/); \
             to go back, restore a snapshot into a new cluster at the older version"
        ),
    )
    .old_value(old)
    .value(new)
    .into()
}

fn immutable<T: PartialEq + Serialize>(
    out: &mut Vec<Violation>,
    field: &str,
    old: &Option<T>,
    new: &Option<T>,
    what: &str,
) {
    let change = match (old, new) {
        (None, Some(_)) => "cannot be added to an existing cluster",
        (Some(_), None) => "cannot be removed from an existing cluster",
        (Some(o), Some(n)) if o != n => "cannot be changed on an existing cluster",
        _ => return,
    };
    out.push(changed(
        field,
        old,
        new,
        change,
        format!("restore the previous value; to change {what}, delete and recreate the cluster"),
    ));
}

/// A change to the immutable `field`, reported at the first sub-field that differs, with its
/// old and new value, so the user sees what changed and not only where.
fn changed<T: Serialize>(field: &str, old: &T, new: &T, message: &str, hint: String) -> Violation {
    let as_json = |v: &T| serde_json::to_value(v).ok();
    let Some(diff) = first_difference(field, as_json(old).as_ref(), as_json(new).as_ref()) else {
        return Violation::new(field, message, hint);
    };
    let message = if diff.field == field {
        message.to_string()
    } else {
        format!("{message}: {field} is immutable")
    };
    Violation::new(diff.field, message, hint)
        .old_value(shown_json(diff.old.as_ref()))
        .value(shown_json(diff.new.as_ref()))
}

/// Where two JSON values first differ (object keys in sorted order); absent and `null` are both
/// unset.
struct Difference {
    field: String,
    old: Option<serde_json::Value>,
    new: Option<serde_json::Value>,
}

fn first_difference(
    path: &str,
    old: Option<&serde_json::Value>,
    new: Option<&serde_json::Value>,
) -> Option<Difference> {
    use serde_json::Value;
    let old = old.filter(|v| !v.is_null());
    let new = new.filter(|v| !v.is_null());
    match (old, new) {
        (Some(Value::Object(o)), Some(Value::Object(n))) => {
            let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
            keys.into_iter()
                .find_map(|k| first_difference(&format!("{path}.{k}"), o.get(k), n.get(k)))
        }
        (Some(Value::Array(o)), Some(Value::Array(n))) if o.len() == n.len() => o
            .iter()
            .zip(n)
            .enumerate()
            .find_map(|(i, (o, n))| first_difference(&format!("{path}[{i}]"), Some(o), Some(n))),
        (o, n) if o == n => None,
        (o, n) => Some(Difference {
            field: path.to_string(),
            old: o.cloned(),
            new: n.cloned(),
        }),
    }
}

/// Compact JSON for a message, `unset` for nothing, cut short past a couple of hundred bytes.
fn shown_json(value: Option<&serde_json::Value>) -> String {
    const MAX_CHARS: usize = 200;
    let Some(value) = value else {
        return "unset".to_string();
    };
    let text = value.to_string();
    if text.chars().count() <= MAX_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_CHARS).collect();
    cut.push('…');
    cut
}

fn storage_size(size: &Quantity, memory: bool) -> Option<Violation> {
    let field = "spec.storage.size";
    match quantity::parse(size) {
        Err(e) => Some(Violation::new(
            field,
            format!("must be a quantity: {e}"),
            "write a size such as 1Gi or 512Mi",
        )),
        Ok(q) if memory && !q.is_positive() => Some(
            Violation::new(
                field,
                "must be greater than 0 with spec.storage.medium=Memory (it is each member's tmpfs size limit)",
                "set e.g. 256Mi",
            )
            .value(&size.0),
        ),
        Ok(_) => None,
    }
}

fn non_empty(field: &str, value: &str) -> Option<Violation> {
    value
        .is_empty()
        .then(|| Violation::new(field, "must not be empty", "name an existing object"))
}

fn s3_location(prefix: &str, s3: &S3Location, out: &mut Vec<Violation>) {
    out.extend(non_empty(&format!("{prefix}.bucket"), &s3.bucket));
    if let Some(r) = &s3.credentials_secret_ref {
        out.extend(non_empty(
            &format!("{prefix}.credentialsSecretRef.name"),
            &r.name,
        ));
    }
}

fn pvc_location(prefix: &str, pvc: &PvcLocation, out: &mut Vec<Violation>) {
    out.extend(non_empty(&format!("{prefix}.claimName"), &pvc.claim_name));
}

fn restore_source(prefix: &str, source: &RestoreSource) -> Vec<Violation> {
    let mut out = Vec::new();
    exactly_one_location(
        prefix,
        source.s3.is_some(),
        source.pvc.is_some(),
        "read from",
        &mut out,
    );
    if let Some(s3) = &source.s3 {
        let field = format!("{prefix}.s3.key");
        s3_location(&format!("{prefix}.s3"), s3, &mut out);
        match s3.key.as_deref() {
            None | Some("") => out.push(Violation::new(
                field,
                "is required for a restore source: it is the exact object key of the snapshot",
                "copy it from the snapshot's status.artifact.uri without the s3://<bucket>/ prefix, e.g. my-etcd/my-etcd-2026-06-02.db",
            )),
            Some(k) if k.ends_with('/') => out.push(
                Violation::new(
                    field,
                    "is a prefix, but a restore source needs the exact object key",
                    format!("append the snapshot's file name, e.g. {k}<snapshot-name>.db"),
                )
                .value(format!("{k:?}")),
            ),
            _ => {}
        }
    }
    if let Some(pvc) = &source.pvc {
        let field = format!("{prefix}.pvc.subPath");
        pvc_location(&format!("{prefix}.pvc"), pvc, &mut out);
        match pvc.sub_path.as_deref() {
            None | Some("") => out.push(Violation::new(
                field,
                "is required for a restore source: it is the exact path of the snapshot .db file within the volume",
                "set it to e.g. snapshots/my-etcd-2026-06-02.db",
            )),
            Some(p) if p.ends_with('/') => out.push(
                Violation::new(
                    field,
                    "is a directory, but a restore source needs the exact .db file path",
                    format!("append the snapshot's file name, e.g. {p}<snapshot-name>.db"),
                )
                .value(format!("{p:?}")),
            ),
            _ => {}
        }
    }
    out
}

fn exactly_one_location(prefix: &str, s3: bool, pvc: bool, verb: &str, out: &mut Vec<Violation>) {
    let problem = match (s3, pvc) {
        (true, true) => "sets both s3 and pvc",
        (false, false) => "sets neither s3 nor pvc",
        _ => return,
    };
    out.push(Violation::new(
        prefix,
        problem,
        format!("set exactly one of s3 or pvc to say where the snapshot is {verb}"),
    ));
}

// ---------------------------------------------------------------------------------------------
// EtcdSnapshot

fn destination(prefix: &str, d: &SnapshotDestination) -> Vec<Violation> {
    let mut out = Vec::new();
    exactly_one_location(prefix, d.s3.is_some(), d.pvc.is_some(), "stored", &mut out);
    if let Some(s3) = &d.s3 {
        s3_location(&format!("{prefix}.s3"), s3, &mut out);
    }
    if let Some(pvc) = &d.pvc {
        pvc_location(&format!("{prefix}.pvc"), pvc, &mut out);
    }
    out
}

/// Every violation of an EtcdSnapshot spec on create.
pub fn snapshot_create(spec: &EtcdSnapshotSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    out.extend(destination("spec.destination", &spec.destination));
    out
}

/// Every violation of an EtcdSnapshot update: the spec never changes.
pub fn snapshot_update(old: &EtcdSnapshotSpec, new: &EtcdSnapshotSpec) -> Vec<Violation> {
    let mut out = snapshot_create(new);
    out.extend(spec_unchanged(
        old,
        new,
        "cannot be changed: a snapshot's spec is immutable, it is taken once",
        "EtcdSnapshot",
    ));
    out
}

/// The violation of a one-shot kind's update that changes its spec (which is immutable).
fn spec_unchanged<T: PartialEq + Serialize>(
    old: &T,
    new: &T,
    message: &str,
    kind: &str,
) -> Option<Violation> {
    (old != new).then(|| {
        changed(
            "spec",
            old,
            new,
            message,
            format!("create a new {kind} with another name instead of editing this one"),
        )
    })
}

// ---------------------------------------------------------------------------------------------
// EtcdDefrag

/// A positive quantity (`freeSpaceAbove`, `minReclaim`), parsed; `None` after reporting why not.
fn positive_quantity(
    field: &str,
    q: &Quantity,
    example: &str,
    out: &mut Vec<Violation>,
) -> Option<quantity::ParsedQuantity> {
    match quantity::parse(q) {
        Err(e) => {
            out.push(Violation::new(
                field,
                format!("must be a quantity: {e}"),
                format!("write a size such as {example}"),
            ));
            None
        }
        Ok(parsed) if !parsed.is_positive() => {
            out.push(
                Violation::new(
                    field,
                    "must be greater than 0",
                    format!("write a size such as {example}, or leave it unset for the default"),
                )
                .value(&q.0),
            );
            None
        }
        Ok(parsed) => Some(parsed),
    }
}

fn defrag_rule(rule: &DefragRule) -> Vec<Violation> {
    let mut out = Vec::new();
    let prefix = "spec.rule";
    if rule.is_all() {
        let others: Vec<&str> = [
            ("freeSpaceAbove", rule.free_space_above.is_some()),
            ("quotaUsageAbove", rule.quota_usage_above.is_some()),
            ("minReclaim", rule.min_reclaim.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if !others.is_empty() {
            out.push(Violation::new(
                prefix,
                format!(
                    "all=true defragments every member unconditionally and cannot be combined with {}",
                    others.join(", ")
                ),
                "remove those fields, or set all=false to defragment by the size gate",
            ));
        }
    }
    if let Some(p) = &rule.quota_usage_above {
        if !QUOTA_USAGE_RE.is_match(p) {
            out.push(
                Violation::new(
                    format!("{prefix}.quotaUsageAbove"),
                    "must be a whole percentage from 1% to 100%",
                    "write e.g. 80%",
                )
                .value(p),
            );
        }
    }
    let free = positive_quantity(
        &format!("{prefix}.freeSpaceAbove"),
        &rule.free_space_above(),
        "200Mi",
        &mut out,
    );
    let min = positive_quantity(
        &format!("{prefix}.minReclaim"),
        &rule.min_reclaim(),
        "32Mi",
        &mut out,
    );
    if let (Some(free), Some(min)) = (free, min) {
        if min > free {
            out.push(
                Violation::new(
                    format!("{prefix}.minReclaim"),
                    format!(
                        "must not be above freeSpaceAbove ({}; defaults: minReclaim 32Mi, \
                         freeSpaceAbove 200Mi): a member with that much reclaimable space is \
                         defragmented anyway",
                        rule.free_space_above().0
                    ),
                    "lower minReclaim or raise freeSpaceAbove",
                )
                .value(&rule.min_reclaim().0),
            );
        }
    }
    out
}

/// Every violation of an EtcdDefrag spec on create.
pub fn defrag_create(spec: &EtcdDefragSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    if let Some(rule) = &spec.rule {
        out.extend(defrag_rule(rule));
    }
    if let Some(ttl) = spec.ttl_seconds_after_finished.filter(|t| *t < 0) {
        out.push(
            Violation::new(
                "spec.ttlSecondsAfterFinished",
                "must be 0 or more",
                "leave it unset to keep the object after it finishes",
            )
            .value(ttl),
        );
    }
    out
}

/// Every violation of an EtcdDefrag update: the spec never changes.
pub fn defrag_update(old: &EtcdDefragSpec, new: &EtcdDefragSpec) -> Vec<Violation> {
    let mut out = defrag_create(new);
    out.extend(spec_unchanged(
        old,
        new,
        "cannot be changed: a defrag's spec is immutable, it runs once",
        "EtcdDefrag",
    ));
    out
}

// ---------------------------------------------------------------------------------------------
// EtcdSnapshotSchedule and EtcdDefragPolicy: objects that create runs named after themselves

const SCHEDULE_NAMES: &str =
    "the schedule names its snapshots <name>-<unix minutes> and their Jobs <snapshot>-snapshot";
const POLICY_NAMES: &str = "the policy names its runs <name>-<unix minutes>";

/// The name of an object whose runs are named `<name>-<unix minutes>`: a DNS label short enough
/// for the runs' names (the CRD's root CEL rule).
fn runs_owner_name(name: &str, max: usize, why: &str) -> Option<Violation> {
    let label = DNS_LABEL_RE.is_match(name);
    let length = name.chars().count();
    let problem = match (length > max, label) {
        (true, _) => format!("is {length} characters long"),
        (false, false) => "is not a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit)".to_string(),
        (false, true) => return None,
    };
    Some(
        Violation::new(
            "metadata.name",
            format!(
                "must be a DNS label of at most {max} characters, because {why}, which must stay within 63 characters; this name {problem}"
            ),
            "choose a shorter name of lowercase letters, digits and '-', e.g. my-etcd-nightly",
        )
        .value(format!("{name:?}")),
    )
}

/// The cron expression and time zone, parsed as the controller parses them: CEL checks only
/// their shape, so `61 * * * *` or `Mars/Olympus` pass the CRD and are refused here.
fn cron_schedule(expression: &str, time_zone: Option<&str>, out: &mut Vec<Violation>) {
    if let Some(tz) = time_zone {
        out.extend(bounded_length("spec.timeZone", tz, 64));
    }
    if expression.is_empty() || expression.chars().count() > 256 {
        out.extend(bounded_length("spec.schedule", expression, 256));
        return;
    }
    match Schedule::parse(expression, time_zone.unwrap_or("UTC")) {
        Ok(_) => {}
        Err(ScheduleError::Cron { value, reason }) => out.push(
            Violation::new(
                "spec.schedule",
                format!("is not a valid cron expression: {reason}"),
                "use 5 fields, minute hour day-of-month month day-of-week (e.g. '0 */6 * * *'), or @hourly, @daily, @weekly, @monthly, @yearly",
            )
            .value(format!("{value:?}")),
        ),
        Err(ScheduleError::TimeZone { value }) => out.push(
            Violation::new(
                "spec.timeZone",
                "is not a known IANA time zone",
                "use a name from the tz database such as UTC, Europe/Berlin or America/New_York (see `timedatectl list-timezones`)",
            )
            .value(format!("{value:?}")),
        ),
    }
}

/// A string with the schema's `minLength: 1` and `maxLength`.
fn bounded_length(field: &str, value: &str, max: usize) -> Option<Violation> {
    let length = value.chars().count();
    (length == 0 || length > max).then(|| {
        Violation::new(
            field,
            format!("must be 1 to {max} characters long, not {length}"),
            "shorten it, or remove the field to use the default",
        )
        .value(format!("{value:?}"))
    })
}

/// An integer field with the schema's `minimum`/`maximum`.
fn in_range(field: &str, value: Option<i64>, min: i64, max: i64, hint: &str) -> Option<Violation> {
    let v = value?;
    (v < min || v > max)
        .then(|| Violation::new(field, format!("must be between {min} and {max}"), hint).value(v))
}

/// Every violation of an EtcdSnapshotSchedule spec (create and update alike).
pub fn schedule_spec(spec: &EtcdSnapshotScheduleSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    cron_schedule(&spec.schedule, spec.time_zone.as_deref(), &mut out);
    out.extend(destination(
        "spec.snapshotTemplate.destination",
        &spec.snapshot_template.destination,
    ));
    out.extend(in_range(
        "spec.startingDeadlineSeconds",
        spec.starting_deadline_seconds,
        1,
        31_622_400,
        "leave it unset to take the most recent missed run however late, or give up to a year in seconds",
    ));
    if let Some(r) = &spec.retention {
        if r.keep_last.is_none() && r.max_age.is_none() {
            out.push(Violation::new(
                "spec.retention",
                "sets neither keepLast nor maxAge",
                "set keepLast, maxAge or both; remove spec.retention to keep every snapshot",
            ));
        }
        out.extend(in_range(
            "spec.retention.keepLast",
            r.keep_last.map(i64::from),
            1,
            MAX_KEEP_LAST.into(),
            "keep at least the newest snapshot; remove keepLast to prune by maxAge only",
        ));
        if let Some(age) = r.max_age.as_deref().filter(|a| !MAX_AGE_RE.is_match(a)) {
            out.push(
                Violation::new(
                    "spec.retention.maxAge",
                    "must be a whole number of minutes, hours or days",
                    "write e.g. 30m, 12h or 7d",
                )
                .value(format!("{age:?}")),
            );
        }
    }
    out
}

/// Every violation of an EtcdDefragPolicy spec (create and update alike).
pub fn policy_spec(spec: &EtcdDefragPolicySpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    if spec.schedule.is_none() && spec.check_interval.is_none() {
        out.push(Violation::new(
            "spec",
            "sets neither schedule nor checkInterval, so the policy would never create a run",
            "set schedule (runs on a cron schedule), checkInterval (a run when a check finds a member worth defragmenting) or both",
        ));
    }
    if let Some(expression) = &spec.schedule {
        cron_schedule(expression, spec.time_zone.as_deref(), &mut out);
    } else if let Some(tz) = spec.time_zone.as_deref() {
        // No schedule to read in it, but the field is still judged as the controller reads it.
        cron_schedule("* * * * *", Some(tz), &mut out);
    }
    if let Some(interval) = spec.check_interval.as_deref() {
        if !CHECK_INTERVAL_RE.is_match(interval) {
            out.push(
                Violation::new(
                    "spec.checkInterval",
                    "must be a whole number of minutes or hours",
                    "write e.g. 10m or 1h",
                )
                .value(format!("{interval:?}")),
            );
        }
    }
    if let Some(rule) = &spec.rule {
        out.extend(defrag_rule(rule));
        if rule.is_all() && spec.check_interval.is_some() {
            out.push(Violation::new(
                "spec.rule.all",
                "true with spec.checkInterval would defragment every member at every check",
                "remove checkInterval and use schedule for unconditional runs, or set a rule such as freeSpaceAbove instead of all",
            ));
        }
    }
    for (field, limit) in [
        (
            "spec.successfulRunsHistoryLimit",
            spec.successful_runs_history_limit,
        ),
        (
            "spec.failedRunsHistoryLimit",
            spec.failed_runs_history_limit,
        ),
    ] {
        out.extend(in_range(
            field,
            limit.map(i64::from),
            0,
            MAX_HISTORY_LIMIT.into(),
            "leave it unset for the default (3 Complete, 1 Failed)",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(spec: serde_json::Value) -> EtcdClusterSpec {
        parse("spec", &spec).expect("spec parses")
    }

    #[test]
    fn shrink_message_names_both_sizes_and_the_fix() {
        let old = cluster(json!({"version": "3.6.11", "storage": {"size": "10Gi"}}));
        let new = cluster(json!({"version": "3.6.11", "storage": {"size": "5Gi"}}));
        let v = cluster_update(&old, &new);
        assert_eq!(v.len(), 1, "{v:?}");
        let text = v[0].to_string();
        assert_eq!(v[0].field, "spec.storage.size");
        assert_eq!(v[0].old_value.as_deref(), Some("10Gi"));
        assert_eq!(v[0].value.as_deref(), Some("5Gi"));
        assert!(
            text.contains("cannot shrink") && text.contains("set 10Gi or more"),
            "{text}"
        );
    }

    #[test]
    fn immutable_subtree_change_names_the_sub_field_and_both_values() {
        let old = cluster(
            json!({"version": "3.6.11", "tls": {"client": {"serverSecretRef": {"name": "a"}}}}),
        );
        let new = cluster(
            json!({"version": "3.6.11", "tls": {"client": {"serverSecretRef": {"name": "b"}}}}),
        );
        let v = cluster_update(&old, &new);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "spec.tls.client.serverSecretRef.name");
        assert_eq!(v[0].old_value.as_deref(), Some("\"a\""));
        assert_eq!(v[0].value.as_deref(), Some("\"b\""));
        let text = v[0].to_string();
        assert!(
            text.contains("spec.tls is immutable") && text.contains("(was \"a\", now \"b\")"),
            "{text}"
        );
    }

    #[test]
    fn immutable_subtree_added_shows_it_as_compact_json() {
        let old = cluster(json!({"version": "3.6.11"}));
        let new =
            cluster(json!({"version": "3.6.11", "tls": {"peer": {"secretRef": {"name": "p"}}}}));
        let v = cluster_update(&old, &new);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "spec.tls");
        assert_eq!(v[0].old_value.as_deref(), Some("unset"));
        assert_eq!(
            v[0].value.as_deref(),
            Some(r#"{"peer":{"secretRef":{"name":"p"}}}"#)
        );
        assert!(v[0].message.contains("cannot be added"), "{}", v[0]);
    }

    #[test]
    fn snapshot_spec_change_names_what_changed() {
        let spec = |bucket: &str| {
            parse::<EtcdSnapshotSpec>(
                "spec",
                &json!({"clusterRef": {"name": "main"}, "destination": {"s3": {"bucket": bucket}}}),
            )
            .expect("spec parses")
        };
        let v = snapshot_update(&spec("a"), &spec("b"));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "spec.destination.s3.bucket");
        assert_eq!(v[0].old_value.as_deref(), Some("\"a\""));
        assert_eq!(v[0].value.as_deref(), Some("\"b\""));
    }

    #[test]
    fn update_of_an_unreadable_stored_object_is_denied_not_judged_as_create() {
        let old = json!({"spec": {"version": "3.6.11", "storage": {"size": "10Gi"}, "replicas": "three"}});
        // A shrink: judged as a create it would pass.
        let new = json!({"spec": {"version": "3.6.11", "storage": {"size": "5Gi"}}});
        let v = object("EtcdCluster", &new, Some(&old));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "spec");
        let text = v[0].to_string();
        assert!(
            text.contains("stored object could not be read")
                && text.contains("spec.replicas")
                && text.contains("delete and recreate"),
            "{text}"
        );
    }

    #[test]
    fn memory_size_beyond_int64_is_accepted_without_panic() {
        let spec = cluster(
            json!({"version": "3.6.11", "storage": {"size": "100000000000000P", "medium": "Memory"}}),
        );
        assert_eq!(cluster_create(&spec), vec![]);
        let bigger = cluster(
            json!({"version": "3.6.11", "storage": {"size": "200000000000000P", "medium": "Memory"}}),
        );
        assert_eq!(cluster_update(&bigger, &spec).len(), 1);
    }

    #[test]
    fn every_violation_is_reported_at_once() {
        let spec = cluster(json!({
            "version": "3.6",
            "replicas": 0,
            "storage": {"size": "0", "medium": "Memory"},
            "auth": {"enabled": true},
            "tls": {"peer": {}},
        }));
        let fields: Vec<_> = cluster_create(&spec).into_iter().map(|v| v.field).collect();
        for f in [
            "spec.replicas",
            "spec.version",
            "spec.storage.size",
            "spec.auth.enabled",
            "spec.auth.rootCredentialsSecretRef",
            "spec.tls.peer",
        ] {
            assert!(fields.iter().any(|x| x == f), "{f} missing from {fields:?}");
        }
    }

    #[test]
    fn unreadable_values_name_the_field_path() {
        let err = parse::<EtcdClusterSpec>(
            "spec",
            &json!({"version": "3.6.11", "tls": {"client": {"certManager": {"serverIssuerRef": {"name": "ca", "kind": "Vault"}}}}}),
        )
        .unwrap_err();
        assert_eq!(
            err.field,
            "spec.tls.client.certManager.serverIssuerRef.kind"
        );
        assert!(err.message.contains("Vault"), "{err}");
        let err = parse::<EtcdClusterSpec>("spec", &json!({"replicas": "three"})).unwrap_err();
        assert_eq!(err.field, "spec.replicas");
    }

    #[test]
    fn cluster_name_verdict_is_the_cel_rule_verdict() {
        let pattern = regex::Regex::new(crate::v1alpha2::CLUSTER_NAME_PATTERN).expect("regex");
        let long = "a".repeat(CLUSTER_NAME_MAX_LEN);
        let too_long = "a".repeat(CLUSTER_NAME_MAX_LEN + 1);
        for name in [
            "a",
            "a1",
            "a-b",
            "my-etcd",
            &long,
            &too_long,
            "",
            "-",
            "a-",
            "9lives",
            "my.cluster",
            "Upper",
            "uPPer",
            "a_b",
            "a--b",
            "é",
            "aé",
            "a b",
        ] {
            let cel = pattern.is_match(name) && name.chars().count() <= CLUSTER_NAME_MAX_LEN;
            assert_eq!(cluster_name(name).is_none(), cel, "{name:?}");
        }
    }

    #[test]
    fn cluster_name_violation_says_what_is_wrong_and_why() {
        let v = cluster_name("9my.etcd-").expect("a violation");
        assert_eq!(v.field, "metadata.name");
        assert_eq!(v.value.as_deref(), Some("\"9my.etcd-\""));
        for part in [
            "starts with '9'",
            "contains '.'",
            "ends with '-'",
            "<name>-client",
        ] {
            assert!(v.message.contains(part), "{part} missing from {v}");
        }
        let v = cluster_name(&"a".repeat(57)).expect("a violation");
        assert!(v.message.contains("is 57 characters long"), "{v}");
    }

    #[test]
    fn cluster_name_is_judged_on_create_and_update_and_absent_passes() {
        let spec = json!({"version": "3.6.11"});
        let named = |name: &str| json!({"metadata": {"name": name}, "spec": spec});
        let create = object("EtcdCluster", &named("9lives"), None);
        assert_eq!(create.len(), 1, "{create:?}");
        assert_eq!(create[0].field, "metadata.name");
        let update = object("EtcdCluster", &named("9lives"), Some(&named("9lives")));
        assert_eq!(update.len(), 1, "{update:?}");
        let generated = json!({"metadata": {"generateName": "my-etcd-"}, "spec": spec});
        assert_eq!(object("EtcdCluster", &generated, None), vec![]);
    }

    #[test]
    fn unknown_kind_is_denied_not_ignored() {
        let v = object("Pod", &json!({"spec": {}}), None);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "kind");
    }

    #[test]
    fn render_lists_every_problem() {
        let spec = cluster(json!({"version": "x", "replicas": -2}));
        let text = render("EtcdCluster", "demo", &cluster_create(&spec));
        assert!(
            text.starts_with("EtcdCluster \"demo\" is invalid (2 problems):"),
            "{text}"
        );
        assert!(
            text.contains("\n- spec.replicas: must be 0 or more (got -2)"),
            "{text}"
        );
    }

    fn with_spec(kind: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": kind,
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn cron_expressions_and_time_zones_cel_cannot_parse_are_refused_with_field_and_value() {
        let schedule = |cron: &str, tz: Option<&str>| {
            let mut spec = json!({"clusterRef": {"name": "e"}, "schedule": cron,
                "snapshotTemplate": {"destination": {"pvc": {"claimName": "b"}}}});
            if let Some(tz) = tz {
                spec["timeZone"] = json!(tz);
            }
            object("EtcdSnapshotSchedule", &with_spec("", "s", spec), None)
        };
        assert_eq!(schedule("*/5 * * * *", Some("Europe/Berlin")), vec![]);
        assert_eq!(schedule("@hourly", None), vec![]);
        for bad in [
            "61 * * * *",
            "* 24 * * *",
            "* * 32 * *",
            "* * * 13 *",
            "*/0 * * * *",
        ] {
            let v = schedule(bad, None);
            assert_eq!(v.len(), 1, "{bad}: {v:?}");
            assert_eq!(v[0].field, "spec.schedule");
            assert_eq!(v[0].value.as_deref(), Some(format!("{bad:?}").as_str()));
            assert!(
                v[0].message.contains("not a valid cron expression"),
                "{v:?}"
            );
        }
        let v = schedule("0 * * * *", Some("Mars/Olympus"));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "spec.timeZone");
        assert_eq!(v[0].value.as_deref(), Some("\"Mars/Olympus\""));
        assert!(v[0].hint.contains("Europe/Berlin"), "{v:?}");

        // A policy's time zone is judged with or without a schedule.
        let policy =
            |spec: serde_json::Value| object("EtcdDefragPolicy", &with_spec("", "p", spec), None);
        let v = policy(
            json!({"clusterRef": {"name": "e"}, "checkInterval": "1h", "timeZone": "Mars/Olympus"}),
        );
        assert_eq!(
            v.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
            ["spec.timeZone"]
        );
        let v = policy(json!({"clusterRef": {"name": "e"}, "schedule": "0 3 31 2 *"}));
        assert_eq!(
            v,
            vec![],
            "a valid expression that never fires is for the controller to report"
        );
    }

    #[test]
    fn schedule_and_policy_report_every_problem_at_once() {
        let spec = json!({"clusterRef": {"name": ""}, "schedule": "0 * * *",
            "startingDeadlineSeconds": 0,
            "retention": {"keepLast": 0, "maxAge": "1w"},
            "snapshotTemplate": {"destination": {}}});
        let name = "x".repeat(45);
        let fields: Vec<String> = object("EtcdSnapshotSchedule", &with_spec("", &name, spec), None)
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.clusterRef.name",
                "spec.schedule",
                "spec.snapshotTemplate.destination",
                "spec.startingDeadlineSeconds",
                "spec.retention.keepLast",
                "spec.retention.maxAge",
            ]
        );
        let spec = json!({"clusterRef": {"name": "e"}, "checkInterval": "30s",
            "rule": {"all": true}, "failedRunsHistoryLimit": -1});
        let fields: Vec<String> = object("EtcdDefragPolicy", &with_spec("", "p", spec), None)
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.checkInterval",
                "spec.rule.all",
                "spec.failedRunsHistoryLimit"
            ]
        );
        // Updates are judged as creates: both specs are mutable.
        let old = with_spec(
            "",
            "p",
            json!({"clusterRef": {"name": "e"}, "schedule": "@daily"}),
        );
        let new = with_spec(
            "",
            "p",
            json!({"clusterRef": {"name": "e"}, "schedule": "@weekly"}),
        );
        assert_eq!(object("EtcdDefragPolicy", &new, Some(&old)), vec![]);
    }
}
