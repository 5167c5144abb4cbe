//! What a snapshot recovery reads and writes beyond the survivor path: the EtcdSnapshot's facts,
//! the highest revision the cluster's snapshots recorded, the restore source of a stored
//! snapshot (an EtcdSnapshot's, or the one the spec gives by its S3 object or PVC file), and the
//! restore mark on the member it is restored into.

use api::v1alpha2::{
    EtcdRecovery, EtcdSnapshot, PvcLocation, RecoveryPlan, RecoverySnapshotSource, RestoreSource,
    RestoreSpec, S3Location, RESTORE_BUMP_REVISION_ANNOTATION, RESTORE_ID_ANNOTATION,
    RESTORE_IN_PLACE_ANNOTATION, RESTORE_SHA256_ANNOTATION,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::plan::{SnapshotFacts, StoredFacts};
use crate::context::Context;
use crate::Error;

/// The revision a snapshot holds: the one its verification matched, else its recorded hashKV's.
fn revision_of(s: &EtcdSnapshot) -> Option<i64> {
    let status = s.status.as_ref()?;
    status
        .verification
        .as_ref()
        .map(|v| v.revision)
        .or(status.hash_kv.as_ref().map(|h| h.revision))
}

/// The restore source of a stored snapshot: its destination's bucket, endpoint and credentials
/// (or claim) with the exact key (or path) its artifact records. Pure.
pub fn restore_spec(s: &EtcdSnapshot) -> Result<RestoreSpec, String> {
    let uri = s
        .status
        .as_ref()
        .and_then(|st| st.artifact.as_ref())
        .map(|a| a.uri.clone())
        .ok_or_else(|| "status.artifact.uri is unset".to_string())?;
    let dest = &s.spec.destination;
    if let (Some(rest), Some(s3)) = (uri.strip_prefix("s3://"), &dest.s3) {
        let (bucket, key) = rest
            .split_once('/')
            .filter(|(b, k)| !b.is_empty() && !k.is_empty())
            .ok_or_else(|| format!("status.artifact.uri {uri:?} is not s3://<bucket>/<key>"))?;
        return Ok(RestoreSpec {
            source: RestoreSource {
                s3: Some(S3Location {
                    bucket: bucket.to_string(),
                    key: Some(key.to_string()),
                    ..s3.clone()
                }),
                pvc: None,
            },
        });
    }
    if let (Some(rest), Some(pvc)) = (uri.strip_prefix("pvc://"), &dest.pvc) {
        let path = rest
            .strip_prefix(&format!("{}/", pvc.claim_name))
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                format!(
                    "status.artifact.uri {uri:?} is not pvc://{}/<path>",
                    pvc.claim_name
                )
            })?;
        return Ok(RestoreSpec {
            source: RestoreSource {
                s3: None,
                pvc: Some(PvcLocation {
                    claim_name: pvc.claim_name.clone(),
                    sub_path: Some(path.to_string()),
                }),
            },
        });
    }
    Err(format!(
        "status.artifact.uri {uri:?} does not match spec.destination (s3 or pvc)"
    ))
}

/// A snapshot given by its location, as the planner sees it (`missing` is observed apart).
/// Pure.
pub fn stored_facts(source: &RecoverySnapshotSource) -> Option<StoredFacts> {
    let uri = match (&source.s3, &source.pvc) {
        (Some(s3), _) => format!(
            "s3://{}/{}",
            s3.bucket,
            s3.key.as_deref().unwrap_or_default()
        ),
        (None, Some(pvc)) => format!(
            "pvc://{}/{}",
            pvc.claim_name,
            pvc.sub_path
                .as_deref()
                .unwrap_or_default()
                .trim_start_matches('/')
        ),
        (None, None) => return None,
    };
    Some(StoredFacts {
        uri,
        sha256: source.sha256.clone(),
        missing: None,
    })
}

/// Why a snapshot given by its location cannot be read, if a Kubernetes object it needs is
/// missing: the PVC of a `pvc` source, the credentials Secret of an `s3` one. (Whether the
/// object itself is there is found by the restore: only a Pod reaches the store.)
pub async fn missing(
    ctx: &Context,
    ns: &str,
    source: &RecoverySnapshotSource,
) -> Result<Option<String>, Error> {
    if let Some(pvc) = &source.pvc {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
        if api.get_opt(&pvc.claim_name).await?.is_none() {
            return Ok(Some(format!(
                "PersistentVolumeClaim {} (spec.source.snapshot.pvc.claimName) does not exist \
                 in namespace {ns}; name the claim that holds the .db file in a new EtcdRecovery",
                pvc.claim_name
            )));
        }
    }
    if let Some(secret) = source
        .s3
        .as_ref()
        .and_then(|s| s.credentials_secret_ref.as_ref())
    {
        let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
        if api.get_metadata_opt(&secret.name).await?.is_none() {
            return Ok(Some(format!(
                "Secret {} (spec.source.snapshot.s3.credentialsSecretRef) does not exist in \
                 namespace {ns}; create it with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                 then a new EtcdRecovery",
                secret.name
            )));
        }
    }
    crate::service_account::missing(
        &ctx.client,
        ns,
        source.s3.as_ref(),
        "spec.source.snapshot.s3.serviceAccountName",
        "a new EtcdRecovery",
    )
    .await
    .map_err(Error::from)
}

/// The facts of EtcdSnapshot `name` (None: it does not exist, or no name is given) and the
/// highest revision any EtcdSnapshot of `cluster` recorded.
pub async fn observe(
    ctx: &Context,
    ns: &str,
    name: Option<&str>,
    cluster: &str,
) -> Result<(Option<SnapshotFacts>, Option<i64>), Error> {
    let api: Api<EtcdSnapshot> = Api::namespaced(ctx.client.clone(), ns);
    let all = api.list(&ListParams::default()).await?.items;
    let highest = all
        .iter()
        .filter(|s| s.spec.cluster_ref.name == cluster)
        .filter_map(revision_of)
        .max();
    let Some(name) = name else {
        return Ok((None, highest));
    };
    let facts = all.iter().find(|s| s.name_any() == name).map(|s| {
        let status = s.status.clone().unwrap_or_default();
        SnapshotFacts {
            name: name.to_string(),
            cluster: s.spec.cluster_ref.name.clone(),
            phase: status.phase.unwrap_or_default(),
            verified: status.verified(),
            verifying: status.verifying(),
            revision: revision_of(s),
            uri: status.artifact.as_ref().map(|a| a.uri.clone()),
            unrestorable: restore_spec(s).err(),
            origin: s.origin(),
        }
    });
    Ok((facts, highest))
}

/// The patch that marks `recovery`'s restore on its member and wakes it: the restore source
/// is the one the spec gives by its location (or a point-in-time build stored), else the
/// planned EtcdSnapshot's artifact.
pub async fn mark_patch(
    ctx: &Context,
    ns: &str,
    recovery: &EtcdRecovery,
    plan: &RecoveryPlan,
) -> Result<serde_json::Value, String> {
    let bump = plan
        .bump_revision
        .unwrap_or(super::plan::BUMP_MARGIN)
        .to_string();
    let name = recovery.name_any();
    let uid = recovery.uid().unwrap_or_default();
    if let Some(source) = recovery.snapshot_source() {
        if let Some(location) = source.location() {
            return Ok(stored_mark(
                &name,
                &uid,
                &bump,
                location,
                source.sha256.as_deref(),
            ));
        }
    }
    let recovery = name.as_str();
    let name = plan
        .snapshot
        .clone()
        .ok_or("status.plan.snapshot is unset")?;
    let api: Api<EtcdSnapshot> = Api::namespaced(ctx.client.clone(), ns);
    let snapshot = api
        .get_opt(&name)
        .await
        .map_err(|e| format!("reading EtcdSnapshot {name}: {e}"))?
        .ok_or_else(|| {
            format!(
                "EtcdSnapshot {name} was deleted after the plan was recorded; the members are \
                 stopped and keep their data: recreate it (same name, same artifact) or see \
                 docs/disaster-recovery.md, 'A recovery that failed half-way'"
            )
        })?;
    snapshot_mark(recovery, &uid, &bump, &snapshot)
}

/// The mark of a restore from EtcdSnapshot `snapshot`: its stored artifact, checked against the
/// sha256 the snapshot recorded when it was taken (`status.artifact.checksum`), so bytes changed
/// in the store since then are refused by the restore, whatever the store says of them. Pure.
pub fn snapshot_mark(
    recovery: &str,
    uid: &str,
    bump: &str,
    snapshot: &EtcdSnapshot,
) -> Result<serde_json::Value, String> {
    let restore = restore_spec(snapshot)?;
    let checksum = snapshot
        .status
        .as_ref()
        .and_then(|st| st.artifact.as_ref())
        .map(|a| a.checksum.clone())
        .filter(|c| !c.is_empty());
    Ok(json!({
        "metadata": {"annotations": {
            RESTORE_IN_PLACE_ANNOTATION: recovery,
            RESTORE_ID_ANNOTATION: uid,
            RESTORE_BUMP_REVISION_ANNOTATION: bump,
            RESTORE_SHA256_ANNOTATION: checksum,
        }},
        "spec": {"dormant": false, "restore": restore},
    }))
}

/// The mark of a restore from a snapshot given by its location, with the sha256 the restore
/// checks it against (when the user gave one). Pure.
pub fn stored_mark(
    recovery: &str,
    uid: &str,
    bump: &str,
    location: RestoreSource,
    sha256: Option<&str>,
) -> serde_json::Value {
    json!({
        "metadata": {"annotations": {
            RESTORE_IN_PLACE_ANNOTATION: recovery,
            RESTORE_ID_ANNOTATION: uid,
            RESTORE_BUMP_REVISION_ANNOTATION: bump,
            RESTORE_SHA256_ANNOTATION: sha256,
        }},
        // Both kinds named, the other as null: a merge patch over the mark of an earlier
        // recovery of the other kind must not leave both.
        "spec": {"dormant": false, "restore": {"source": {"s3": location.s3, "pvc": location.pvc}}},
    })
}

/// The patch that removes the mark (the restored member runs).
pub fn unmark_patch() -> serde_json::Value {
    json!({
        "metadata": {"annotations": {
            RESTORE_IN_PLACE_ANNOTATION: null,
            RESTORE_ID_ANNOTATION: null,
            RESTORE_BUMP_REVISION_ANNOTATION: null,
            RESTORE_SHA256_ANNOTATION: null,
        }},
        "spec": {"restore": null},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{
        EtcdSnapshotSpec, EtcdSnapshotStatus, LocalReference, SnapshotArtifact, SnapshotDestination,
    };

    fn stored(destination: SnapshotDestination, uri: &str) -> EtcdSnapshot {
        let mut s = EtcdSnapshot::new(
            "nightly",
            EtcdSnapshotSpec {
                cluster_ref: LocalReference { name: "c".into() },
                destination,
                verify: None,
            },
        );
        s.status = Some(EtcdSnapshotStatus {
            artifact: Some(SnapshotArtifact {
                uri: uri.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        s
    }

    #[test]
    fn an_s3_snapshot_is_restored_from_its_exact_key_with_its_destinations_credentials() {
        let s3 = S3Location {
            endpoint: Some("http://minio:9000".into()),
            bucket: "b".into(),
            key: Some("prefix/".into()),
            force_path_style: Some(true),
            ..Default::default()
        };
        let s = stored(
            SnapshotDestination {
                s3: Some(s3),
                pvc: None,
            },
            "s3://b/prefix/nightly.db",
        );
        let got = restore_spec(&s).unwrap().source.s3.unwrap();
        assert_eq!(got.key.as_deref(), Some("prefix/nightly.db"));
        assert_eq!(got.endpoint.as_deref(), Some("http://minio:9000"));
        assert_eq!(got.force_path_style, Some(true));
    }

    #[test]
    fn a_named_snapshot_is_restored_against_the_checksum_it_recorded_when_taken() {
        let mut s = stored(
            SnapshotDestination {
                s3: Some(S3Location {
                    bucket: "b".into(),
                    ..Default::default()
                }),
                pvc: None,
            },
            "s3://b/nightly.db",
        );
        if let Some(a) = s.status.as_mut().and_then(|st| st.artifact.as_mut()) {
            a.checksum = format!("sha256:{}", "ab".repeat(32));
        }
        let patch = snapshot_mark("rec", "u1", "1000", &s).unwrap();
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(annotations[RESTORE_IN_PLACE_ANNOTATION], "rec");
        assert_eq!(
            annotations[RESTORE_SHA256_ANNOTATION],
            format!("sha256:{}", "ab".repeat(32))
        );
        assert_eq!(
            patch["spec"]["restore"]["source"]["s3"]["key"],
            "nightly.db"
        );
        // A snapshot without a recorded checksum clears the annotation of an earlier mark.
        if let Some(a) = s.status.as_mut().and_then(|st| st.artifact.as_mut()) {
            a.checksum.clear();
        }
        let patch = snapshot_mark("rec", "u1", "1000", &s).unwrap();
        assert!(patch["metadata"]["annotations"][RESTORE_SHA256_ANNOTATION].is_null());
    }

    #[test]
    fn a_snapshot_given_by_its_location_is_marked_with_it_and_its_checksum() {
        let source = RecoverySnapshotSource {
            s3: Some(S3Location {
                endpoint: Some("http://minio:9000".into()),
                bucket: "b".into(),
                key: Some("other/nightly.db".into()),
                credentials_secret_ref: Some(api::v1alpha2::SecretReference::new("creds")),
                ..Default::default()
            }),
            sha256: Some("sha256:ab".into()),
            ..Default::default()
        };
        let facts = stored_facts(&source).unwrap();
        assert_eq!(facts.uri, "s3://b/other/nightly.db");
        assert_eq!(facts.sha256.as_deref(), Some("sha256:ab"));
        let patch = stored_mark(
            "rec",
            "u1",
            "1000",
            source.location().unwrap(),
            source.sha256.as_deref(),
        );
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(annotations[RESTORE_IN_PLACE_ANNOTATION], "rec");
        assert_eq!(annotations[RESTORE_ID_ANNOTATION], "u1");
        assert_eq!(annotations[RESTORE_BUMP_REVISION_ANNOTATION], "1000");
        assert_eq!(annotations[RESTORE_SHA256_ANNOTATION], "sha256:ab");
        let s3 = &patch["spec"]["restore"]["source"]["s3"];
        assert_eq!(s3["key"], "other/nightly.db");
        assert_eq!(s3["credentialsSecretRef"]["name"], "creds");
        assert_eq!(patch["spec"]["dormant"], false);
        assert!(patch["spec"]["restore"]["source"]["pvc"].is_null());
        assert!(patch["spec"]["restore"]["source"]
            .as_object()
            .unwrap()
            .contains_key("pvc"));
        // Without a checksum the annotation is removed (null), not left from an earlier mark.
        let patch = stored_mark("rec", "u1", "1", source.location().unwrap(), None);
        assert!(patch["metadata"]["annotations"][RESTORE_SHA256_ANNOTATION].is_null());
        let pvc = RecoverySnapshotSource {
            pvc: Some(PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("/etcd/nightly.db".into()),
            }),
            ..Default::default()
        };
        assert_eq!(
            stored_facts(&pvc).unwrap().uri,
            "pvc://backups/etcd/nightly.db"
        );
        assert_eq!(stored_facts(&RecoverySnapshotSource::named("x")), None);
    }

    #[test]
    fn a_pvc_snapshot_is_restored_from_its_path_in_the_claim() {
        let pvc = PvcLocation {
            claim_name: "backups".into(),
            sub_path: Some("etcd".into()),
        };
        let s = stored(
            SnapshotDestination {
                s3: None,
                pvc: Some(pvc),
            },
            "pvc://backups/etcd/nightly.db",
        );
        let got = restore_spec(&s).unwrap().source.pvc.unwrap();
        assert_eq!(got.sub_path.as_deref(), Some("etcd/nightly.db"));
        // An artifact that does not match its destination is refused, naming the field.
        let s = stored(
            SnapshotDestination {
                s3: None,
                pvc: Some(PvcLocation {
                    claim_name: "backups".into(),
                    sub_path: None,
                }),
            },
            "s3://b/k.db",
        );
        assert!(restore_spec(&s)
            .unwrap_err()
            .contains("status.artifact.uri"));
    }
}
