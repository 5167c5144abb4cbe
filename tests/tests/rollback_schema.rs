//! Rolling back to the reference operator: what our operator wrote must stay valid under the
//! reference's CRDs. Two rules:
//!
//! - Every property our CRDs have beyond the reference's is listed in [`PRUNED_ON_ROLLBACK`]
//!   (and in docs/migration.md): the apiserver prunes those on the next write once the
//!   reference's CRDs are back, so each must be a field the reference can do without. A new
//!   field fails this test until it is listed and documented.
//! - Every field the reference's schema requires (`api/testdata/reference-required.txt`, taken from
//!   its CRDs) is always serialized by our types, even when empty, or the reference could not
//!   update an object we wrote (a pending member's `initialCluster` is `""`, not absent).

use std::collections::BTreeSet;
use std::path::PathBuf;

use api::v1alpha2::{EtcdClusterSpec, EtcdClusterStatus, EtcdMemberSpec, ObservedSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

/// Our additions to the reference's four kinds, by kind and path (the subtree under a path is
/// included). Each is lost on rollback; the comment says why the reference does not miss it.
const PRUNED_ON_ROLLBACK: &[(&str, &str)] = &[
    // Which spec generation the latched target was taken from; the reference compares the
    // latched fields with the spec instead.
    ("EtcdCluster", "status.observed.generation"),
    // Standard observedGeneration; the reference keeps it per condition only.
    ("EtcdCluster", "status.observedGeneration"),
    ("EtcdMember", "status.observedGeneration"),
    ("EtcdSnapshot", "status.observedGeneration"),
    ("EtcdDefrag", "status.observedGeneration"),
    // When the current outage began (docs/disaster-recovery.md, automatic recovery); the
    // reference has no automatic recovery, and back on this operator a missing one is set at
    // the next reconcile of a cluster still without quorum (its grace starts again).
    ("EtcdCluster", "status.quorumLostSince"),
    // Each member as etcd reports it and the leader's name (docs/observability.md, member
    // status): informational, nothing is decided from them; back on this operator the next
    // reconcile writes them again.
    ("EtcdCluster", "status.members"),
    ("EtcdCluster", "status.leader"),
    // The issuer's API group; the reference always emits `cert-manager.io`, which is also our
    // default, so only an issuer of another group (an external issuer) is affected.
    (
        "EtcdCluster",
        "spec.tls.client.certManager.serverIssuerRef.group",
    ),
    (
        "EtcdCluster",
        "spec.tls.client.certManager.operatorClientIssuerRef.group",
    ),
    ("EtcdCluster", "spec.tls.peer.certManager.issuerRef.group"),
    // When the snapshot Job started and finished; informational, the reference reads the
    // phase and the Ready condition.
    ("EtcdSnapshot", "status.startTime"),
    ("EtcdSnapshot", "status.completionTime"),
    // Verification (docs/snapshots.md): whether to verify, the hashkv recorded at save time and
    // the result. The reference neither verifies nor reads them; phase, artifact and conditions
    // (a Verified condition among them) are kept.
    ("EtcdSnapshot", "spec.verify"),
    ("EtcdSnapshot", "status.hashKV"),
    ("EtcdSnapshot", "status.verification"),
    // Which incarnation of the cluster a snapshot was taken of (docs/snapshots.md). The
    // reference does not read them; back on this operator a snapshot without them is matched
    // to its cluster by its creationTimestamp, which is never pruned.
    ("EtcdSnapshot", "status.clusterUID"),
    ("EtcdSnapshot", "status.clusterID"),
    // Placement of the members (docs/scheduling.md). The reference never rebuilds a running
    // Pod, so the members keep theirs; a Pod it builds later (a replacement, a scale-up) has no
    // tolerations, node selector or priority class, and stays Pending if only tainted nodes
    // are left for it.
    ("EtcdCluster", "spec.tolerations"),
    ("EtcdCluster", "spec.nodeSelector"),
    ("EtcdCluster", "spec.priorityClassName"),
    ("EtcdCluster", "status.observed.tolerations"),
    ("EtcdCluster", "status.observed.nodeSelector"),
    ("EtcdCluster", "status.observed.priorityClassName"),
    ("EtcdMember", "spec.tolerations"),
    ("EtcdMember", "spec.nodeSelector"),
    ("EtcdMember", "spec.priorityClassName"),
    // Cloud identity of an S3 location without credentialsSecretRef (docs/cloud-identity.md):
    // the reference's Jobs and restores run without it and have no credentials, so a snapshot
    // or restore it starts from such a location fails (docs/migration.md: give the location a
    // credentialsSecretRef before rolling back); nothing else reads it.
    (
        "EtcdCluster",
        "spec.bootstrap.restore.source.s3.serviceAccountName",
    ),
    (
        "EtcdCluster",
        "spec.bootstrap.restore.source.s3.webIdentity",
    ),
    ("EtcdMember", "spec.restore.source.s3.serviceAccountName"),
    ("EtcdMember", "spec.restore.source.s3.webIdentity"),
    ("EtcdSnapshot", "spec.destination.s3.serviceAccountName"),
    ("EtcdSnapshot", "spec.destination.s3.webIdentity"),
    // EtcdDefragPolicy (the reference's v0.5.5 kind): our extensions. Without them the
    // reference reads the schedule in UTC, runs no condition-driven checks and falls back to its
    // historyLimit (or the runs' TTL); the status fields are informational.
    ("EtcdDefragPolicy", "spec.timeZone"),
    ("EtcdDefragPolicy", "spec.checkInterval"),
    ("EtcdDefragPolicy", "spec.successfulRunsHistoryLimit"),
    ("EtcdDefragPolicy", "spec.failedRunsHistoryLimit"),
    ("EtcdDefragPolicy", "status.lastRunTime"),
    ("EtcdDefragPolicy", "status.lastCheckTime"),
    ("EtcdDefragPolicy", "status.observedGeneration"),
];

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../api/testdata")
        .join(name)
}

/// Every property path of a schema, in the `.paths` syntax (`[]` items, `{}` map values).
fn paths(schema: &JSONSchemaProps, at: &str, out: &mut Vec<String>) {
    for (name, child) in schema.properties.iter().flatten() {
        let p = if at.is_empty() {
            name.clone()
        } else {
            format!("{at}.{name}")
        };
        out.push(p.clone());
        paths(child, &p, out);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(items)) = &schema.items {
        let p = format!("{at}[]");
        out.push(p.clone());
        paths(items, &p, out);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = &schema.additional_properties {
        let p = format!("{at}{{}}");
        out.push(p.clone());
        paths(values, &p, out);
    }
}

fn under(path: &str, prefix: &str) -> bool {
    path.len() > prefix.len()
        && path.starts_with(prefix)
        && matches!(&path[prefix.len()..prefix.len() + 1], "." | "[" | "{")
}

/// The reference's list for a kind.
fn reference_paths(file: &str) -> BTreeSet<String> {
    std::fs::read_to_string(dir("reference-schema").join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .lines()
        .filter_map(|l| l.trim().rsplit_once(" :").map(|(p, _)| p.to_string()))
        .collect()
}

/// Whether the reference's schema keeps `path`: it lists it, or it lists an ancestor whose body
/// it leaves out (a core Kubernetes type such as affinity or resources, kept whole).
fn kept(path: &str, reference: &BTreeSet<String>) -> bool {
    if reference.contains(path) {
        return true;
    }
    reference
        .iter()
        .filter(|q| under(path, q))
        .any(|q| !reference.iter().any(|r| under(r, q)))
}

#[test]
fn every_field_the_reference_schema_lacks_is_listed_as_pruned_on_rollback() {
    let mut unlisted = Vec::new();
    let mut listed_but_kept = Vec::new();
    for (file, kind) in [
        ("etcdclusters.paths", "EtcdCluster"),
        ("etcdmembers.paths", "EtcdMember"),
        ("etcdsnapshots.paths", "EtcdSnapshot"),
        ("etcddefrags.paths", "EtcdDefrag"),
        ("etcddefragpolicies.paths", "EtcdDefragPolicy"),
    ] {
        let reference = reference_paths(file);
        let crd = api::crd::all()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .unwrap_or_else(|| panic!("no {kind} CRD"));
        let root = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap_or_else(|| panic!("{kind}: no schema"));
        let mut ours = Vec::new();
        paths(root, "", &mut ours);
        let pruned: Vec<&str> = PRUNED_ON_ROLLBACK
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, p)| *p)
            .collect();
        for p in ours
            .iter()
            .filter(|p| p.starts_with("spec") || p.starts_with("status"))
        {
            let listed = pruned.iter().any(|q| p == q || under(p, q));
            if !kept(p, &reference) && !listed {
                unlisted.push(format!("{kind} {p}"));
            }
        }
        for q in pruned {
            if kept(q, &reference) {
                listed_but_kept.push(format!("{kind} {q}"));
            }
            assert!(
                ours.iter().any(|p| p == q),
                "{kind} {q} is listed as pruned on rollback but is not in our CRD"
            );
        }
    }
    assert!(
        unlisted.is_empty(),
        "fields the reference's schema lacks (pruned if a user rolls back): list them in \
         PRUNED_ON_ROLLBACK and docs/migration.md, with why the reference can do without \
         them:\n  {}",
        unlisted.join("\n  ")
    );
    assert!(
        listed_but_kept.is_empty(),
        "listed as pruned but the reference keeps them: {listed_but_kept:?}"
    );
}

/// `api/testdata/reference-required.txt`: `Kind path` of every field the reference's CRDs require
/// (inside its parent object, when that is present).
fn required() -> Vec<(String, String)> {
    std::fs::read_to_string(dir("reference-required.txt"))
        .unwrap_or_else(|e| panic!("reference-required.txt: {e}"))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect()
}

/// Every required field whose parent object is present in `value` is present too.
fn missing_required(kind: &str, value: &serde_json::Value) -> Vec<String> {
    fn at<'v>(v: &'v serde_json::Value, path: &str) -> Vec<&'v serde_json::Value> {
        let mut found = vec![v];
        for step in path.split('.') {
            let (name, items) = match step.strip_suffix("[]") {
                Some(n) => (n, true),
                None => (step, false),
            };
            found = found
                .into_iter()
                .filter_map(|v| v.get(name))
                .flat_map(|v| match (items, v.as_array()) {
                    (true, Some(a)) => a.iter().collect(),
                    (true, None) => Vec::new(),
                    (false, _) => vec![v],
                })
                .collect();
        }
        found
    }
    required()
        .into_iter()
        .filter(|(k, _)| k == kind)
        .filter_map(|(_, path)| {
            let (parent, field) = path.rsplit_once('.')?;
            let lacking = at(value, parent)
                .into_iter()
                .any(|p| p.is_object() && p.get(field).is_none());
            lacking.then_some(path)
        })
        .collect()
}

#[test]
fn fields_the_reference_requires_are_written_even_when_empty() {
    // A pending member as the controller creates it: no initialCluster yet.
    let member = serde_json::json!({
        "spec": serde_json::to_value(EtcdMemberSpec {
            cluster_name: "c".into(),
            version: "3.6.16".into(),
            cluster_token: "ns-c-uid".into(),
            ..Default::default()
        }).unwrap_or_default(),
    });
    let missing = missing_required("EtcdMember", &member);
    assert!(
        missing.is_empty(),
        "a pending EtcdMember lacks {missing:?}: {member}"
    );

    // The cluster status as the controller writes it: the whole spec latched, a condition with
    // an empty message (Degraded=False).
    let spec = EtcdClusterSpec {
        replicas: 3,
        version: "3.6.16".into(),
        ..Default::default()
    };
    let status = EtcdClusterStatus {
        observed: Some(ObservedSpec::of(&spec, Some(1))),
        conditions: vec![Condition {
            type_: "Degraded".into(),
            status: "False".into(),
            reason: "QuorumHealthy".into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::UNIX_EPOCH,
            ),
            observed_generation: Some(1),
        }],
        ..Default::default()
    };
    let cluster = serde_json::json!({
        "spec": serde_json::to_value(&spec).unwrap_or_default(),
        "status": serde_json::to_value(&status).unwrap_or_default(),
    });
    let missing = missing_required("EtcdCluster", &cluster);
    assert!(
        missing.is_empty(),
        "an EtcdCluster lacks {missing:?}: {cluster}"
    );
}
