//! The EtcdRecovery rules: a cluster and exactly one source on create (a point in time: a
//! schedule, and a revision of 1 or more when given; a snapshot source:
//! exactly one of an EtcdSnapshot's name, an S3 object or a PVC file, the latter two with a
//! checksum or the user's word); the spec never changes after.

use super::fields::{bounded_length, non_empty};
use super::location::restore_location;
use super::transition::spec_unchanged;
use super::Violation;
use crate::v1alpha2::{
    EtcdRecoverySpec, RecoverySnapshotSource, CEL_RECOVERY_INLINE_NEEDS_CHECKSUM,
    CEL_RECOVERY_ONE_SOURCE, CEL_RECOVERY_SHA256_INLINE_ONLY, CEL_RECOVERY_SNAPSHOT_ONE_OF,
    CEL_RECOVERY_UNVERIFIED_NEEDS_SNAPSHOT,
};

/// The schema's bound on `spec.source.survivor.member` (an object name).
const MEMBER_NAME_MAX: usize = 253;

const SNAPSHOT: &str = "spec.source.snapshot";

/// Every violation of an EtcdRecovery spec on create.
pub fn recovery_create(spec: &EtcdRecoverySpec) -> Vec<Violation> {
    let mut out = Vec::new();
    out.extend(non_empty("spec.clusterRef.name", &spec.cluster_ref.name));
    let source = &spec.source;
    let set: Vec<&str> = [
        ("survivor", source.survivor.is_some()),
        ("snapshot", source.snapshot.is_some()),
        ("pointInTime", source.point_in_time.is_some()),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect();
    match set.len() {
        1 => {}
        0 => out.push(Violation::of_rule(
            "spec.source",
            CEL_RECOVERY_ONE_SOURCE,
            "none is set",
            "write source: {survivor: {}} to rebuild from the member with the most data",
        )),
        _ => out.push(Violation::of_rule(
            "spec.source",
            CEL_RECOVERY_ONE_SOURCE,
            format!("{} are set", set.join(" and ")),
            "keep one: survivor to rebuild from the member with the most data, snapshot to roll \
             back to a stored snapshot, or pointInTime to go back to a revision of the archive",
        )),
    }
    if let Some(member) = source.survivor.as_ref().and_then(|s| s.member.as_deref()) {
        out.extend(bounded_length(
            "spec.source.survivor.member",
            member,
            MEMBER_NAME_MAX,
        ));
    }
    if let Some(point) = &source.point_in_time {
        out.extend(bounded_length(
            "spec.source.pointInTime.schedule",
            &point.schedule,
            MEMBER_NAME_MAX,
        ));
        if let Some(revision) = point.revision.filter(|r| *r < 1) {
            out.push(
                Violation::new(
                    "spec.source.pointInTime.revision",
                    "must be 1 or more (an etcd revision)",
                    "take it from the schedule's status.archive (windowStartRevision to \
                     newestRevision), or remove it to go back to the newest archived revision",
                )
                .value(revision.to_string()),
            );
        }
    }
    if let Some(snapshot) = &source.snapshot {
        out.extend(snapshot_source(snapshot));
        if snapshot.name.is_none()
            && snapshot.sha256.is_none()
            && !spec.unverified_snapshot_allowed()
        {
            out.push(Violation::of_rule(
                "spec.source.snapshot.sha256",
                CEL_RECOVERY_INLINE_NEEDS_CHECKSUM,
                "neither it nor spec.allowUnverifiedSnapshot: true is set",
                "copy the checksum of the stored object into spec.source.snapshot.sha256, or \
                 set spec.allowUnverifiedSnapshot: true to restore it unchecked",
            ));
        }
    }
    if spec.allow_unverified_snapshot.is_some() && source.snapshot.is_none() {
        out.push(Violation::of_rule(
            "spec.allowUnverifiedSnapshot",
            CEL_RECOVERY_UNVERIFIED_NEEDS_SNAPSHOT,
            "set without spec.source.snapshot",
            "remove spec.allowUnverifiedSnapshot, or recover from a snapshot",
        ));
    }
    out
}

/// `spec.source.snapshot`: exactly one of name, s3 and pvc; the exact key or path; a
/// well-formed sha256, and only beside s3 or pvc.
fn snapshot_source(snapshot: &RecoverySnapshotSource) -> Vec<Violation> {
    let mut out = Vec::new();
    let set: Vec<&str> = [
        ("name", snapshot.name.is_some()),
        ("s3", snapshot.s3.is_some()),
        ("pvc", snapshot.pvc.is_some()),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect();
    if set.len() != 1 {
        let problem = if set.is_empty() {
            "none is set".to_string()
        } else {
            format!("{} are set", set.join(" and "))
        };
        out.push(Violation::of_rule(
            SNAPSHOT,
            CEL_RECOVERY_SNAPSHOT_ONE_OF,
            problem,
            "keep one: {name: <EtcdSnapshot>}, {s3: {bucket, key, ...}} or {pvc: {claimName, \
             subPath}}",
        ));
    }
    if let Some(name) = &snapshot.name {
        out.extend(non_empty("spec.source.snapshot.name", name));
    }
    if let Some(location) = snapshot.location() {
        out.extend(restore_location(SNAPSHOT, &location));
    }
    if let Some(sha) = &snapshot.sha256 {
        if !is_sha256(sha) {
            out.push(
                Violation::new(
                    "spec.source.snapshot.sha256",
                    "must be 64 hex digits, optionally prefixed sha256:",
                    "copy it from the EtcdSnapshot's status.artifact.checksum, or run sha256sum \
                     on the .db file",
                )
                .value(format!("{sha:?}")),
            );
        }
        if snapshot.name.is_some() {
            out.push(Violation::of_rule(
                "spec.source.snapshot.sha256",
                CEL_RECOVERY_SHA256_INLINE_ONLY,
                "set with spec.source.snapshot.name",
                "remove sha256: the EtcdSnapshot's recorded checksum is checked",
            ));
        }
    }
    out
}

/// The schema's pattern `^(sha256:)?[0-9a-fA-F]{64}$`.
fn is_sha256(text: &str) -> bool {
    let hex = text.strip_prefix("sha256:").unwrap_or(text);
    hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit())
}

/// Every violation of an EtcdRecovery update: the spec never changes.
pub fn recovery_update(old: &EtcdRecoverySpec, new: &EtcdRecoverySpec) -> Vec<Violation> {
    let mut out = recovery_create(new);
    out.extend(spec_unchanged(
        old,
        new,
        "cannot be changed: a recovery's spec is immutable, it runs once",
        "EtcdRecovery",
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1alpha2::{LocalReference, PvcLocation, RecoverySource, S3Location};

    fn spec(snapshot: RecoverySnapshotSource, unverified: bool) -> EtcdRecoverySpec {
        EtcdRecoverySpec {
            cluster_ref: LocalReference {
                name: "my-etcd".into(),
            },
            source: RecoverySource {
                survivor: None,
                snapshot: Some(snapshot),
                point_in_time: None,
            },
            confirm_healthy_cluster_rollback: None,
            allow_unverified_snapshot: unverified.then_some(true),
        }
    }

    fn s3(key: &str) -> RecoverySnapshotSource {
        RecoverySnapshotSource {
            s3: Some(S3Location {
                bucket: "backups".into(),
                key: Some(key.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn fields(v: &[Violation]) -> Vec<&str> {
        v.iter().map(|v| v.field.as_str()).collect()
    }

    #[test]
    fn a_snapshot_by_name_reads_as_before() {
        let named: RecoverySnapshotSource =
            serde_json::from_value(serde_json::json!({"name": "nightly"})).unwrap();
        assert_eq!(named, RecoverySnapshotSource::named("nightly"));
        assert_eq!(
            serde_json::to_string(&named).unwrap(),
            r#"{"name":"nightly"}"#
        );
        assert!(recovery_create(&spec(named, false)).is_empty());
    }

    #[test]
    fn a_stored_object_with_its_checksum_or_the_users_word_is_accepted() {
        let mut with_sha = s3("rs/rs-nightly.db");
        with_sha.sha256 = Some(format!("sha256:{}", "aB".repeat(32)));
        assert_eq!(recovery_create(&spec(with_sha, false)), vec![]);
        assert_eq!(recovery_create(&spec(s3("rs/rs-nightly.db"), true)), vec![]);
        let pvc = RecoverySnapshotSource {
            pvc: Some(PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("etcd/nightly.db".into()),
            }),
            ..Default::default()
        };
        assert_eq!(recovery_create(&spec(pvc, true)), vec![]);
    }

    #[test]
    fn a_stored_object_without_a_checksum_needs_the_users_word() {
        let v = recovery_create(&spec(s3("rs/rs-nightly.db"), false));
        assert_eq!(fields(&v), ["spec.source.snapshot.sha256"]);
        let text = v[0].to_string();
        assert!(text.contains(CEL_RECOVERY_INLINE_NEEDS_CHECKSUM), "{text}");
        assert!(text.contains("allowUnverifiedSnapshot"), "{text}");
    }

    #[test]
    fn a_snapshot_source_is_exactly_one_of_name_s3_and_pvc() {
        let mut both = s3("k.db");
        both.name = Some("nightly".into());
        let v = recovery_create(&spec(both, true));
        assert_eq!(fields(&v), ["spec.source.snapshot"]);
        assert!(v[0].to_string().contains("name and s3 are set"), "{}", v[0]);
        let v = recovery_create(&spec(RecoverySnapshotSource::default(), true));
        assert_eq!(fields(&v), ["spec.source.snapshot"]);
        assert!(v[0].to_string().contains(CEL_RECOVERY_SNAPSHOT_ONE_OF));
    }

    #[test]
    fn a_stored_object_is_named_exactly_and_its_checksum_is_well_formed() {
        let v = recovery_create(&spec(s3("rs/"), true));
        assert_eq!(fields(&v), ["spec.source.snapshot.s3.key"]);
        let mut bad = s3("rs/x.db");
        bad.sha256 = Some("abc".into());
        let v = recovery_create(&spec(bad, false));
        assert_eq!(fields(&v), ["spec.source.snapshot.sha256"]);
        // A checksum beside an EtcdSnapshot's name is refused: its own is read.
        let mut named = RecoverySnapshotSource::named("nightly");
        named.sha256 = Some("0".repeat(64));
        let v = recovery_create(&spec(named, false));
        assert_eq!(fields(&v), ["spec.source.snapshot.sha256"]);
        assert!(v[0].to_string().contains(CEL_RECOVERY_SHA256_INLINE_ONLY));
    }
}
