//! Label keys, finalizers and object names. Scripts select on these; they are wire contract.

use std::collections::BTreeMap;

pub const PREFIX: &str = "etcd-operator.cozystack.io/";
/// On a cluster's members (EtcdMember, Pod, PVC) and the other objects the operator creates for
/// it, but never on a Job's Pods: `-l etcd-operator.cozystack.io/cluster=<cluster>` lists member
/// Pods only, so the runbook's `.items[0]` is always an etcd member to `kubectl exec` into.
pub const CLUSTER: &str = "etcd-operator.cozystack.io/cluster";
/// On the Jobs the operator runs for a cluster (a snapshot's save Job, a schedule's prune Job)
/// and on their Pods: the cluster's name, in place of [`CLUSTER`].
pub const JOB_CLUSTER: &str = "etcd-operator.cozystack.io/job-cluster";
pub const ROLE: &str = "etcd-operator.cozystack.io/role";
pub const ROLE_VOTER: &str = "voter";
pub const MEMBER_CLEANUP_FINALIZER: &str = "etcd-operator.cozystack.io/member-cleanup";
/// On an EtcdCluster: the operator deletes the cluster's data PVCs (which carry no owner
/// reference, see [`MEMBER_UID_ANNOTATION`]) before the cluster goes. Skipped, PVCs kept, when
/// the cluster is deleted with `--cascade=orphan`.
pub const CLUSTER_CLEANUP_FINALIZER: &str = "etcd-operator.cozystack.io/cluster-cleanup";
/// On a data PVC: the UID of the EtcdMember whose data it holds. Data PVCs carry no owner
/// reference, so deleting the EtcdMember object never takes the data with it; the operator
/// deletes a PVC itself, once its member is out of etcd (scale-down, replacement) or when the
/// cluster is deleted.
pub const MEMBER_UID_ANNOTATION: &str = "etcd-operator.cozystack.io/member-uid";
/// On an EtcdMember, `"true"`: its deletion is meant. The break-glass that lets a user delete
/// a member past the member-deletion protection (the chart's ValidatingAdmissionPolicy and the
/// webhook); the operator puts it on the members it removes itself. A member deleted with it is
/// removed from etcd by its finalizer and its PVC deleted; one deleted without it (protection
/// off) keeps its place in etcd and its PVC, and the operator re-creates it on its data.
pub const ALLOW_DELETION_ANNOTATION: &str = "etcd-operator.cozystack.io/allow-deletion";
/// On an EtcdMember the operator re-created under the name of a member deleted without
/// [`ALLOW_DELETION_ANNOTATION`] (still in etcd, its PVC kept): the [`MEMBER_UID_ANNOTATION`]
/// of that PVC, which the new member adopts (and no other).
pub const REATTACH_ANNOTATION: &str = "etcd-operator.cozystack.io/reattach-claim-of";
/// On a data PVC, next to [`MEMBER_UID_ANNOTATION`]: the UID of the EtcdCluster its member
/// belonged to when the claim was created (or adopted). A cluster deleted with `--cascade=orphan`
/// leaves its PVCs labelled with its name; a later cluster of the same name deletes, with
/// itself, only the claims marked with its own UID (see the cluster's cleanup finalizer).
pub const CLUSTER_UID_ANNOTATION: &str = "etcd-operator.cozystack.io/cluster-uid";

/// On an EtcdMember, next to [`ALLOW_DELETION_ANNOTATION`]: the operator's own mark of a
/// deletion it planned, `<member UID>/<reason>` (`<uid>/ScaleDown`, `<uid>/Recovery`). It tells
/// the operator's mark from a user's break-glass (which carries `allow-deletion` alone): the
/// cluster controller removes both annotations from a member that carries this one while no
/// current plan deletes it (the deletion was refused, or the operator died between the mark and
/// the delete), so a later stray delete meets the protection again; and a member's finalizer
/// does not take `allow-deletion` as meant when this names another UID than the member's own
/// (the annotations copied onto a re-created member).
pub const DELETION_PLANNED_ANNOTATION: &str = "etcd-operator.cozystack.io/deletion-planned";

/// Whether an object's annotations say [`ALLOW_DELETION_ANNOTATION`]`: "true"`.
pub fn deletion_allowed(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(ALLOW_DELETION_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// The value of [`DELETION_PLANNED_ANNOTATION`] for the member `uid` deleted for `reason`.
pub fn deletion_planned(uid: &str, reason: &str) -> String {
    format!("{uid}/{reason}")
}

/// The member UID [`DELETION_PLANNED_ANNOTATION`] names, when the operator's mark is there (an
/// empty string for a value without one).
pub fn deletion_planned_uid(annotations: &BTreeMap<String, String>) -> Option<&str> {
    annotations
        .get(DELETION_PLANNED_ANNOTATION)
        .map(|v| v.split_once('/').map_or(v.as_str(), |(uid, _)| uid))
}

/// Whether the deletion of the member `uid` with these annotations is meant: it carries
/// [`ALLOW_DELETION_ANNOTATION`]`: "true"` (a user's break-glass, or the operator's mark), and
/// no operator mark ([`DELETION_PLANNED_ANNOTATION`]) for another member: annotations copied
/// onto a re-created member (a GitOps tool or a backup restoring the old object) say nothing
/// about the new one.
pub fn deletion_meant(annotations: &BTreeMap<String, String>, uid: &str) -> bool {
    deletion_allowed(annotations)
        && deletion_planned_uid(annotations).is_none_or(|planned| planned == uid)
}

/// On the EtcdSnapshots an EtcdSnapshotSchedule creates: the schedule's name.
pub const SCHEDULE: &str = "etcd-operator.cozystack.io/schedule";
/// On the EtcdDefrags an EtcdDefragPolicy creates: the policy's name.
pub const DEFRAG_POLICY: &str = "etcd-operator.cozystack.io/defrag-policy";

pub const APP_NAME: &str = "app.kubernetes.io/name";
pub const APP_INSTANCE: &str = "app.kubernetes.io/instance";
pub const APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const APP_COMPONENT: &str = "app.kubernetes.io/component";
pub const APP_NAME_VALUE: &str = "etcd";
pub const MANAGED_BY_VALUE: &str = "etcd-operator";

/// Labels on everything the operator creates for `cluster`.
pub fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CLUSTER.to_string(), cluster.to_string()),
        (APP_NAME.to_string(), APP_NAME_VALUE.to_string()),
        (APP_INSTANCE.to_string(), cluster.to_string()),
        (APP_MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
    ])
}

/// Labels on a Job the operator runs for `cluster` and on its Pods: the cluster under
/// [`JOB_CLUSTER`] and the recommended `app.kubernetes.io` labels, not [`CLUSTER`] (which
/// selects the members).
pub fn job_labels(cluster: &str) -> BTreeMap<String, String> {
    let mut labels = cluster_labels(cluster);
    labels.remove(CLUSTER);
    labels.insert(JOB_CLUSTER.to_string(), cluster.to_string());
    labels
}

/// Labels on a member's own objects (EtcdMember, Pod, PVC).
pub fn member_labels(cluster: &str, member: &str) -> BTreeMap<String, String> {
    let mut labels = cluster_labels(cluster);
    labels.insert(APP_COMPONENT.to_string(), member.to_string());
    labels
}

/// `status.selector` of an EtcdCluster and the selector of its Services.
pub fn cluster_selector(cluster: &str) -> String {
    format!("{CLUSTER}={cluster}")
}

/// Merge user metadata under operator-owned keys: operator keys win, and user keys under the
/// operator's prefix are dropped so a user cannot forge the cluster or role labels.
pub fn merge_user_metadata(
    operator: BTreeMap<String, String>,
    user: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut merged: BTreeMap<String, String> = user
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with(PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    merged.extend(operator);
    merged
}

/// On an EtcdCluster and each EtcdMember written by `etcd-operator migrate --from-aenix
/// --apply`: the UID of the aenix EtcdCluster adopted. It names the migration that wrote the
/// object (a re-run finishes only its own adoption), and it is what the webhook's migration
/// allowance looks for: a cluster admin may create an EtcdMember carrying it, and latch its first
/// status, although EtcdMembers are otherwise the controller's alone.
pub const ADOPTED_FROM_ANNOTATION: &str = "etcd-operator.cozystack.io/adopted-from";

/// On an EtcdMember adopted in place from the aenix operator (`etcd-operator migrate
/// --from-aenix`): the legacy headless Service its Pod resolves under (`<cluster>-headless`). The
/// adopted Pod's `spec.subdomain` and the peer URL etcd persisted both use it, so every URL the
/// operator builds for that member does too. Members the operator creates never carry it.
pub const HEADLESS_SERVICE_ANNOTATION: &str = "etcd-operator.cozystack.io/headless-service-name";
/// On an adopted EtcdMember: the subdirectory of the data volume etcd keeps its data in
/// (`default.etcd` for the aenix operator). Members the operator creates never carry it.
pub const DATA_DIR_SUBPATH_ANNOTATION: &str = "etcd-operator.cozystack.io/data-dir-subpath";

/// On an EtcdCluster, `"true"` asks the operator to replace the members adopted from the aenix
/// operator by native ones: one at a time, each only while every member is a Ready voter.
pub const REPLACE_ADOPTED_ANNOTATION: &str = "etcd-operator.cozystack.io/replace-adopted-members";

/// On an EtcdCluster, `"false"` turns off the automatic replacement of members whose Pod cannot
/// be scheduled (the operator's `--replace-broken-members-after`) for that cluster.
pub const REPLACE_BROKEN_MEMBERS_ANNOTATION: &str =
    "etcd-operator.cozystack.io/replace-broken-members";

/// On an EtcdCluster adopted from the aenix operator with peer auto-TLS (etcd's
/// `--peer-auto-tls`, https peer URLs, no peer Secret): `"true"`. Written by `etcd-operator
/// migrate --from-aenix`; while it is set every member, adopted or created later, runs with
/// `--peer-auto-tls` and https peer URLs, since etcd cannot mix plaintext and TLS peers.
pub const PEER_AUTO_TLS_ANNOTATION: &str = "etcd-operator.cozystack.io/peer-auto-tls";

/// On an EtcdMember and its Pod: the fingerprint of the CA bundles (`ca.crt` of the peer
/// Secret, and of the server Secret with client mTLS) the member runs with. etcd loads them once
/// at start-up; the cluster controller sets a new value on one member at a time when the Secrets
/// change, and the member controller restarts a Pod whose value differs from its member's.
/// `unknown` on a member that recorded none (adopted, or from an older operator) and whose etcd
/// started before the Secrets' `ca.crt` last changed: it may run an older bundle and is rolled.
pub const TRUST_BUNDLE_ANNOTATION: &str = "etcd-operator.cozystack.io/trust-bundle";

/// On an EtcdMember and its Pod, next to [`TRUST_BUNDLE_ANNOTATION`]: the CA certificates of those
/// bundles, each a short sha256 fingerprint of its DER, per bundle:
/// `peer=<fp>,<fp>;client=<fp>` (`client` with client mTLS only). The CA set the Pod's etcd
/// loaded at start-up: a CA change whose new certificates these members would refuse is not
/// rolled out (`Progressing=False/UnsafeCAChange`). The value `unknown` (written on takeover for
/// a Pod that started before its Secrets last changed) says the set is not known.
pub const TRUSTED_CAS_ANNOTATION: &str = "etcd-operator.cozystack.io/trusted-cas";

/// On an EtcdMember and its Pod: the image repository of the member's etcd container (the
/// operator's `--etcd-image-repository` when the member was created or last rolled). The cluster
/// controller sets a new value on one member at a time when the flag changes, and the member
/// controller restarts a Pod whose value differs from its member's. Members from before the
/// operator recorded it are given the current flag without a restart.
pub const IMAGE_REPOSITORY_ANNOTATION: &str = "etcd-operator.cozystack.io/etcd-image-repository";

/// On a member Pod: the hash of the member template it was built from (version, resources,
/// options, affinity, topology spread, pull secrets, additional metadata). The member controller
/// restarts a Pod whose hash differs from its member's; a Pod without one (created by an older
/// operator, or adopted) is given its member's hash without a restart.
pub const TEMPLATE_HASH_ANNOTATION: &str = "etcd-operator.cozystack.io/template-hash";

/// On an EtcdCluster, `"true"` holds rolling restarts (a version, template or CA-bundle rollout)
/// after the member in progress: no further member is restarted until it is removed.
/// Membership changes and self-heal go on.
pub const ROLLOUT_PAUSED_ANNOTATION: &str = "etcd-operator.cozystack.io/rollout-paused";

/// Whether [`PEER_AUTO_TLS_ANNOTATION`] is `"true"`.
pub fn peer_auto_tls(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(PEER_AUTO_TLS_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// The headless Service a member's DNS name lives under: the adopted member's legacy Service
/// when [`HEADLESS_SERVICE_ANNOTATION`] holds a valid DNS label, else the cluster's own.
pub fn member_service_name(annotations: &BTreeMap<String, String>, cluster: &str) -> String {
    annotations
        .get(HEADLESS_SERVICE_ANNOTATION)
        .filter(|v| is_dns_label(v))
        .cloned()
        .unwrap_or_else(|| headless_service_name(cluster))
}

/// The data-dir subdirectory of an adopted member, when [`DATA_DIR_SUBPATH_ANNOTATION`] holds one
/// safe path component (no `/`, no `..`); anything else is ignored (fail closed: an annotation
/// has no schema, and its value becomes part of etcd's `--data-dir`).
pub fn data_dir_subpath(annotations: &BTreeMap<String, String>) -> Option<&str> {
    annotations
        .get(DATA_DIR_SUBPATH_ANNOTATION)
        .map(String::as_str)
        .filter(|v| {
            !v.is_empty()
                && !v.contains("..")
                && v.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
}

/// An RFC 1035 label, as a Service name must be.
fn is_dns_label(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 63
        && v.starts_with(|c: char| c.is_ascii_lowercase())
        && !v.ends_with('-')
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

pub fn pvc_name(member: &str) -> String {
    format!("data-{member}")
}

pub fn headless_service_name(cluster: &str) -> String {
    cluster.to_string()
}

pub fn client_service_name(cluster: &str) -> String {
    format!("{cluster}-client")
}

pub fn snapshot_job_name(snapshot: &str) -> String {
    format!("{snapshot}-snapshot")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopted_members_resolve_under_their_legacy_service_and_data_subdirectory() {
        let native = BTreeMap::new();
        assert_eq!(member_service_name(&native, "c"), "c");
        assert_eq!(data_dir_subpath(&native), None);
        let adopted = BTreeMap::from([
            (
                HEADLESS_SERVICE_ANNOTATION.to_string(),
                "c-headless".to_string(),
            ),
            (
                DATA_DIR_SUBPATH_ANNOTATION.to_string(),
                "default.etcd".to_string(),
            ),
        ]);
        assert_eq!(member_service_name(&adopted, "c"), "c-headless");
        assert_eq!(data_dir_subpath(&adopted), Some("default.etcd"));
        for bad in ["../x", "a/b", "", ".hidden", ".."] {
            let m = BTreeMap::from([(DATA_DIR_SUBPATH_ANNOTATION.to_string(), bad.to_string())]);
            assert_eq!(data_dir_subpath(&m), None, "{bad:?}");
        }
        for bad in ["Upper", "a.b", "-x", "x-", ""] {
            let m = BTreeMap::from([(HEADLESS_SERVICE_ANNOTATION.to_string(), bad.to_string())]);
            assert_eq!(member_service_name(&m, "c"), "c", "{bad:?}");
        }
    }

    #[test]
    fn only_the_operators_mark_for_this_very_member_or_a_break_glass_means_a_deletion() {
        let of = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let planned = deletion_planned("u1", "ScaleDown");
        assert_eq!(planned, "u1/ScaleDown");
        // The user's break-glass alone.
        assert!(deletion_meant(
            &of(&[(ALLOW_DELETION_ANNOTATION, "true")]),
            "u1"
        ));
        // The operator's mark for this member.
        let mark = of(&[
            (ALLOW_DELETION_ANNOTATION, "true"),
            (DELETION_PLANNED_ANNOTATION, &planned),
        ]);
        assert_eq!(deletion_planned_uid(&mark), Some("u1"));
        assert!(deletion_meant(&mark, "u1"));
        // The same annotations copied onto a member re-created under the name: not meant.
        assert!(!deletion_meant(&mark, "u2"));
        // No allow-deletion, or not "true": never meant.
        assert!(!deletion_meant(
            &of(&[(DELETION_PLANNED_ANNOTATION, &planned)]),
            "u1"
        ));
        assert!(!deletion_meant(
            &of(&[(ALLOW_DELETION_ANNOTATION, "yes")]),
            "u1"
        ));
        assert!(!deletion_meant(&BTreeMap::new(), "u1"));
        // A mark without a reason still names its member.
        assert_eq!(
            deletion_planned_uid(&of(&[(DELETION_PLANNED_ANNOTATION, "u1")])),
            Some("u1")
        );
    }

    #[test]
    fn job_labels_name_the_cluster_under_their_own_key_so_member_selectors_miss_them() {
        let job = job_labels("c1");
        assert_eq!(job.get(JOB_CLUSTER).map(String::as_str), Some("c1"));
        assert!(!job.contains_key(CLUSTER), "{job:?}");
        assert_eq!(job[APP_INSTANCE], "c1");
        assert_eq!(job[APP_MANAGED_BY], MANAGED_BY_VALUE);
        assert!(member_labels("c1", "c1-abcde").contains_key(CLUSTER));
    }

    #[test]
    fn user_metadata_cannot_override_operator_keys_or_forge_prefixed_ones() {
        let user = BTreeMap::from([
            (CLUSTER.to_string(), "other".to_string()),
            (ROLE.to_string(), ROLE_VOTER.to_string()),
            (APP_NAME.to_string(), "not-etcd".to_string()),
            ("team".to_string(), "storage".to_string()),
        ]);
        let merged = merge_user_metadata(cluster_labels("c1"), Some(&user));
        assert_eq!(merged[CLUSTER], "c1");
        assert_eq!(merged[APP_NAME], "etcd");
        assert_eq!(merged["team"], "storage");
        assert!(!merged.contains_key(ROLE));
    }
}
