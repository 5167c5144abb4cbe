//! The EtcdCluster rules: its name, its spec on create, and what an update may change (storage
//! only grows, the version upgrades one minor at a time, TLS, auth and bootstrap stay). The
//! snapshot location of a restore is judged in [`super::location`].

use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::fields::non_empty;
use super::location::restore_source;
use super::transition::immutable;
use super::Violation;
use crate::quantity;
use crate::v1alpha2::{
    EtcdClusterSpec, StorageMedium, CEL_AUTH_IMMUTABLE, CEL_AUTH_NEEDS_CLIENT_TLS,
    CEL_AUTH_NEEDS_SECRET, CEL_BOOTSTRAP_IMMUTABLE, CEL_CLIENT_TLS_SOURCE, CEL_CLUSTER_NAME,
    CEL_COMPACTION_RETENTION, CEL_MEMORY_PAUSE, CEL_MEMORY_RESTORE, CEL_MEMORY_SIZE_POSITIVE,
    CEL_OPERATOR_CLIENT_WITH_CERT_MANAGER, CEL_PEER_TLS_SOURCE, CEL_STORAGE_CLASS_IMMUTABLE,
    CEL_STORAGE_MEDIUM_IMMUTABLE, CEL_STORAGE_SHRINK, CEL_STORAGE_SIZE_QUANTITY, CEL_TLS_IMMUTABLE,
    CEL_VERSION_UPGRADE, CLUSTER_NAME_MAX_LEN, MAX_PROGRESS_DEADLINE_SECONDS,
    MAX_QUOTA_BACKEND_BYTES, MAX_REPLICAS, MAX_SNAPSHOT_COUNT, RETENTION_PATTERN, VERSION_PATTERN,
};

static VERSION_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(VERSION_PATTERN).expect("VERSION_PATTERN is a valid regex"));
static RETENTION_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(RETENTION_PATTERN).expect("RETENTION_PATTERN is a valid regex")
});

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
        Violation::of_rule(
            "metadata.name",
            CEL_CLUSTER_NAME,
            format!("this name {}", problems.join(", ")),
            "",
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
        out.push(Violation::of_rule("spec.replicas", CEL_MEMORY_PAUSE, "", "").value(0));
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
    out.extend(super::placement::placement(spec));

    if let Some(bootstrap) = &spec.bootstrap {
        if let Some(restore) = &bootstrap.restore {
            if memory {
                out.push(Violation::of_rule(
                    "spec.bootstrap.restore",
                    CEL_MEMORY_RESTORE,
                    "",
                    "remove storage.medium for PVC storage",
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
                Violation::of_rule(
                    "spec.auth.enabled",
                    CEL_AUTH_NEEDS_CLIENT_TLS,
                    "",
                    "spec.tls.client takes serverSecretRef or certManager",
                )
                .value(true),
            );
        }
        if auth.root_credentials_secret_ref.is_none() {
            out.push(Violation::of_rule(
                "spec.auth.rootCredentialsSecretRef",
                CEL_AUTH_NEEDS_SECRET,
                "",
                "",
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
                (Some(_), Some(_)) => out.push(Violation::of_rule(
                    p,
                    CEL_CLIENT_TLS_SOURCE,
                    "this one sets both",
                    "",
                )),
                (None, None) => out.push(Violation::of_rule(
                    p,
                    CEL_CLIENT_TLS_SOURCE,
                    "this one sets neither",
                    "",
                )),
                _ => {}
            }
            if client.operator_client_secret_ref.is_some() && client.cert_manager.is_some() {
                out.push(Violation::of_rule(
                    "spec.tls.client.operatorClientSecretRef",
                    CEL_OPERATOR_CLIENT_WITH_CERT_MANAGER,
                    "",
                    "remove operatorClientSecretRef",
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
                (Some(_), Some(_)) => out.push(Violation::of_rule(
                    p,
                    CEL_PEER_TLS_SOURCE,
                    "this one sets both",
                    "",
                )),
                (None, None) => out.push(Violation::of_rule(
                    p,
                    CEL_PEER_TLS_SOURCE,
                    "this one sets neither",
                    "",
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
                Violation::of_rule(
                    "spec.options.autoCompactionRetention",
                    CEL_COMPACTION_RETENTION,
                    "this one is negative",
                    "",
                )
                .value(n),
            ),
            Some(IntOrString::String(s)) if !RETENTION_RE.is_match(s) => out.push(
                Violation::of_rule(
                    "spec.options.autoCompactionRetention",
                    CEL_COMPACTION_RETENTION,
                    "",
                    "an integer is hours in periodic mode and revisions in revision mode",
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
                Violation::of_rule("spec.storage.size", CEL_STORAGE_SHRINK, "", "")
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
            Violation::of_rule("spec.storage.medium", CEL_STORAGE_MEDIUM_IMMUTABLE, "", "")
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
            Violation::of_rule(
                "spec.storage.storageClassName",
                CEL_STORAGE_CLASS_IMMUTABLE,
                "",
                "",
            )
            .old_value(show(&old.storage.storage_class_name))
            .value(show(&new.storage.storage_class_name)),
        );
    }
    immutable(&mut out, "spec.tls", &old.tls, &new.tls, CEL_TLS_IMMUTABLE);
    immutable(
        &mut out,
        "spec.auth",
        &old.auth,
        &new.auth,
        CEL_AUTH_IMMUTABLE,
    );
    immutable(
        &mut out,
        "spec.bootstrap",
        &old.bootstrap,
        &new.bootstrap,
        CEL_BOOTSTRAP_IMMUTABLE,
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
    Violation::of_rule(
        "spec.version",
        CEL_VERSION_UPGRADE,
        format!("the new version {problem}"),
        format!(
            "keep {old}, or set a later {o_major}.{o_minor}.x patch or {next_minor} (upgrade one minor at a time: https://etcd.io/docs/v3.6/upgrades/upgrading-etcd/); \
             to go back, restore a snapshot into a new cluster at the older version"
        ),
    )
    .old_value(old)
    .value(new)
    .into()
}

/// `spec.storage.size`: a quantity, and positive with Memory storage. A size that is no quantity
/// breaks both rules with Memory, as on the apiserver (its Memory rule cannot read the size).
fn storage_size(size: &Quantity, memory: bool) -> Vec<Violation> {
    let field = "spec.storage.size";
    match quantity::parse(size) {
        Err(e) => {
            let mut out = vec![Violation::of_rule(
                field,
                CEL_STORAGE_SIZE_QUANTITY,
                e.to_string(),
                "",
            )];
            if memory {
                out.push(Violation::of_rule(
                    field,
                    CEL_MEMORY_SIZE_POSITIVE,
                    "it cannot be read as a quantity",
                    "",
                ));
            }
            out
        }
        Ok(q) if memory && !q.is_positive() => {
            vec![Violation::of_rule(field, CEL_MEMORY_SIZE_POSITIVE, "", "").value(&size.0)]
        }
        Ok(_) => Vec::new(),
    }
}
