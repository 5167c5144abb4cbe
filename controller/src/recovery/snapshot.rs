//! What a snapshot recovery reads and writes beyond the survivor path: the EtcdSnapshot's facts,
//! the highest revision the cluster's snapshots recorded, the restore source of a stored
//! snapshot, and the restore mark on the member it is restored into.

use api::v1alpha2::{
    EtcdSnapshot, PvcLocation, RecoveryPlan, RestoreSource, RestoreSpec, S3Location,
    RESTORE_BUMP_REVISION_ANNOTATION, RESTORE_IN_PLACE_ANNOTATION,
};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::plan::SnapshotFacts;
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

/// The facts of EtcdSnapshot `name` (None: it does not exist) and the highest revision any
/// EtcdSnapshot of `cluster` recorded.
pub async fn observe(
    ctx: &Context,
    ns: &str,
    name: &str,
    cluster: &str,
) -> Result<(Option<SnapshotFacts>, Option<i64>), Error> {
    let api: Api<EtcdSnapshot> = Api::namespaced(ctx.client.clone(), ns);
    let all = api.list(&ListParams::default()).await?.items;
    let highest = all
        .iter()
        .filter(|s| s.spec.cluster_ref.name == cluster)
        .filter_map(revision_of)
        .max();
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
        }
    });
    Ok((facts, highest))
}

/// The patch that marks `recovery`'s restore on its member and wakes it.
pub async fn mark_patch(
    ctx: &Context,
    ns: &str,
    recovery: &str,
    plan: &RecoveryPlan,
) -> Result<serde_json::Value, String> {
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
    let restore = restore_spec(&snapshot)?;
    Ok(json!({
        "metadata": {"annotations": {
            RESTORE_IN_PLACE_ANNOTATION: recovery,
            RESTORE_BUMP_REVISION_ANNOTATION: plan.bump_revision.unwrap_or(super::plan::BUMP_MARGIN).to_string(),
        }},
        "spec": {"dormant": false, "restore": restore},
    }))
}

/// The patch that removes the mark (the restored member runs).
pub fn unmark_patch() -> serde_json::Value {
    json!({
        "metadata": {"annotations": {
            RESTORE_IN_PLACE_ANNOTATION: null,
            RESTORE_BUMP_REVISION_ANNOTATION: null,
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
