//! The verification Job `<snapshot>-verify` of a Complete snapshot (docs/snapshots.md,
//! "Verification"): the cluster's own etcd image running the operator binary (copied in by an
//! `install-tools` init container, as for a restore) as `snapshot-agent verify`, so the
//! snapshot is restored and hashed by the etcdutl/etcd of the cluster's version. It reads the
//! object at `status.artifact.uri` (S3 with the destination's settings and credentials, or the
//! PVC file mounted read-only) into an emptyDir sized for the download and the restored copy.
//! It never dials the cluster. Pure.

use super::*;
use crate::builders::restore::ETCDUTL;

/// `etcd` in the published etcd images (beside [`ETCDUTL`]).
pub const ETCD: &str = "/usr/local/bin/etcd";
const SCRATCH_VOLUME: &str = "scratch";
const SCRATCH_DIR: &str = "/scratch";
/// Room in the scratch space beyond the download and the restored copy (WAL, etcd's own files).
const SCRATCH_HEADROOM: i64 = 256 << 20;

pub fn verify_job_name(snapshot: &str) -> String {
    format!("{snapshot}-verify")
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyJobError {
    #[error(
        "status.artifact is missing: only a Complete snapshot with a stored object can be verified"
    )]
    NoArtifact,
    #[error(
        "status.artifact.uri {0:?} does not name an object of spec.destination \
         (s3://<bucket>/<key> or pvc://<claim>/<path>)"
    )]
    ForeignUri(String),
}

/// Where the stored object is, from `status.artifact.uri` checked against `spec.destination`.
#[derive(Debug, PartialEq, Eq)]
enum Stored<'a> {
    S3 {
        s3: &'a api::v1alpha2::S3Location,
        key: &'a str,
    },
    Pvc {
        claim: &'a str,
        path: &'a str,
    },
}

fn stored<'a>(snapshot: &'a EtcdSnapshot, uri: &'a str) -> Result<Stored<'a>, VerifyJobError> {
    let foreign = || VerifyJobError::ForeignUri(uri.to_string());
    let dest = &snapshot.spec.destination;
    if let Some(s3) = &dest.s3 {
        let rest = uri.strip_prefix("s3://").ok_or_else(foreign)?;
        let key = rest
            .strip_prefix(s3.bucket.as_str())
            .and_then(|r| r.strip_prefix('/'))
            .filter(|k| !k.is_empty())
            .ok_or_else(foreign)?;
        return Ok(Stored::S3 { s3, key });
    }
    if let Some(pvc) = &dest.pvc {
        let rest = uri.strip_prefix("pvc://").ok_or_else(foreign)?;
        let path = rest
            .strip_prefix(pvc.claim_name.as_str())
            .and_then(|r| r.strip_prefix('/'))
            .filter(|p| !p.is_empty() && !p.split('/').any(|seg| seg == ".."))
            .ok_or_else(foreign)?;
        return Ok(Stored::Pvc {
            claim: &pvc.claim_name,
            path,
        });
    }
    Err(foreign())
}

/// The verification Job of `snapshot` (Complete, with `status.artifact`), owned by it, run in
/// `etcd_image` (the cluster's).
pub fn verify_job(
    snapshot: &EtcdSnapshot,
    operator_image: &str,
    etcd_image: &str,
) -> Result<Job, VerifyJobError> {
    let status = snapshot.status.as_ref();
    let artifact = status
        .and_then(|s| s.artifact.as_ref())
        .ok_or(VerifyJobError::NoArtifact)?;
    let mut args = vec![
        "snapshot-agent".to_string(),
        "verify".to_string(),
        format!("--expected-sha256={}", artifact.checksum),
        format!("--expected-size={}", artifact.size_bytes.max(0)),
        format!("--etcdutl={ETCDUTL}"),
        format!("--etcd={ETCD}"),
        format!("--work-dir={SCRATCH_DIR}"),
        format!("--termination-log={TERMINATION_LOG}"),
    ];
    if let Some(h) = status.and_then(|s| s.hash_kv.as_ref()) {
        args.push(format!("--hashkv-revision={}", h.revision));
        args.push(format!("--hashkv={}", h.hash));
        args.push(format!("--hashkv-compact-revision={}", h.compact_revision));
    }
    let (tools, tools_mount, image) = in_etcd_image(operator_image, etcd_image);
    // The download and the restored copy, each about the snapshot's size: bounded, so a
    // verification that outgrows it is evicted instead of filling the node's disk.
    let scratch = scratch_volume(SCRATCH_VOLUME, artifact.size_bytes, SCRATCH_HEADROOM);
    let mut env = Vec::new();
    let mut volumes = vec![tools, scratch];
    let mut mounts = vec![tools_mount, mount(SCRATCH_VOLUME, SCRATCH_DIR, false)];
    let mut service_account = None;
    match stored(snapshot, &artifact.uri)? {
        Stored::S3 { s3, key } => {
            args.push(format!("--s3-bucket={}", s3.bucket));
            args.push(format!("--s3-key={key}"));
            service_account = s3_access(s3).add_to(&mut args, &mut env, &mut volumes, &mut mounts);
        }
        Stored::Pvc { claim, path } => {
            volumes.push(pvc_volume(claim));
            // Read only: a verification never changes what it checks.
            mounts.push(mount("snapshot", PVC_MOUNT, true));
            args.push(format!("--pvc-file={PVC_MOUNT}/{path}"));
        }
    }
    Ok(agent_job(
        snapshot,
        &verify_job_name(&snapshot.name_any()),
        "verify",
        operator_image,
        AgentPod {
            args,
            env,
            volumes,
            mounts,
            service_account,
            image: Some(image),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{
        EtcdSnapshotSpec, EtcdSnapshotStatus, LocalReference, PvcLocation, S3Location,
        SecretReference, SnapshotDestination, SnapshotPhase,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn complete(
        dest: SnapshotDestination,
        uri: &str,
        hash_kv: Option<RecordedHashKv>,
    ) -> EtcdSnapshot {
        let mut s = EtcdSnapshot::new(
            "nightly",
            EtcdSnapshotSpec {
                cluster_ref: LocalReference {
                    name: "demo".into(),
                },
                destination: dest,
                verify: None,
            },
        );
        s.metadata.namespace = Some("ns".into());
        s.metadata.uid = Some("snap-uid".into());
        s.status = Some(EtcdSnapshotStatus {
            phase: Some(SnapshotPhase::Complete),
            artifact: Some(SnapshotArtifact {
                uri: uri.into(),
                size_bytes: 1 << 20,
                checksum: format!("sha256:{}", "ab".repeat(32)),
            }),
            hash_kv,
            ..Default::default()
        });
        s
    }

    fn s3() -> SnapshotDestination {
        SnapshotDestination {
            s3: Some(S3Location {
                endpoint: Some("http://minio.ns.svc:9000".into()),
                bucket: "backups".into(),
                key: Some("demo/".into()),
                region: None,
                force_path_style: Some(true),
                credentials_secret_ref: Some(SecretReference::new("s3-creds")),
                ..Default::default()
            }),
            pvc: None,
        }
    }

    fn container(job: &Job) -> Container {
        job.spec.clone().unwrap().template.spec.unwrap().containers[0].clone()
    }

    #[test]
    fn an_s3_snapshot_is_verified_in_the_clusters_etcd_image_with_the_recorded_values() {
        let s = complete(
            s3(),
            "s3://backups/demo/nightly.db",
            Some(RecordedHashKv {
                revision: 42,
                hash: 7,
                compact_revision: 3,
            }),
        );
        let job = verify_job(&s, "operator:1", "quay.io/coreos/etcd:v3.5.35").unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-verify"));
        let owner = &job.metadata.owner_references.clone().unwrap()[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller),
            ("snap-uid", Some(true))
        );
        let c = container(&job);
        assert_eq!(c.image.as_deref(), Some("quay.io/coreos/etcd:v3.5.35"));
        assert_eq!(c.command, Some(vec!["/tools/etcd-operator".to_string()]));
        let args = c.args.unwrap();
        for want in [
            "verify",
            "--s3-bucket=backups",
            "--s3-key=demo/nightly.db",
            "--s3-endpoint=http://minio.ns.svc:9000",
            "--s3-force-path-style",
            "--expected-size=1048576",
            "--hashkv-revision=42",
            "--hashkv=7",
            "--hashkv-compact-revision=3",
            "--etcdutl=/usr/local/bin/etcdutl",
            "--etcd=/usr/local/bin/etcd",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        let env: Vec<_> = c.env.unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(env, ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]);
        let pod = job.spec.unwrap().template.spec.unwrap();
        let init = pod.init_containers.unwrap();
        assert_eq!(init[0].image.as_deref(), Some("operator:1"));
        let scratch = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "scratch")
            .and_then(|v| v.empty_dir)
            .and_then(|e| e.size_limit);
        // Twice the snapshot plus the headroom.
        assert_eq!(
            scratch,
            Some(Quantity(((2 << 20) + (256 << 20)).to_string()))
        );
    }

    #[test]
    fn without_a_recorded_hash_only_the_checksum_and_restore_are_asked_for() {
        let s = complete(s3(), "s3://backups/demo/nightly.db", None);
        let args = container(&verify_job(&s, "op", "etcd:v3.6.16").unwrap())
            .args
            .unwrap();
        assert!(!args.iter().any(|a| a.starts_with("--hashkv")), "{args:?}");
    }

    #[test]
    fn a_pvc_snapshot_is_read_where_it_is_through_a_read_only_mount() {
        let dest = SnapshotDestination {
            s3: None,
            pvc: Some(PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("etcd".into()),
            }),
        };
        let s = complete(dest, "pvc://backups/etcd/nightly.db", None);
        let c = container(&verify_job(&s, "op", "etcd:v3.6.16").unwrap());
        assert!(c
            .args
            .unwrap()
            .contains(&"--pvc-file=/snapshot/etcd/nightly.db".to_string()));
        let m = c
            .volume_mounts
            .unwrap()
            .into_iter()
            .find(|m| m.name == "snapshot")
            .unwrap();
        assert_eq!(m.read_only, Some(true));
    }

    #[test]
    fn an_artifact_uri_outside_the_destination_is_refused() {
        for uri in [
            "s3://other/demo/nightly.db",
            "pvc://backups/x.db",
            "s3://backups/",
            "s3://backupsX/k.db",
        ] {
            let s = complete(s3(), uri, None);
            assert_eq!(
                verify_job(&s, "op", "etcd:v3.6.16").unwrap_err(),
                VerifyJobError::ForeignUri(uri.into()),
                "{uri}"
            );
        }
        let mut s = complete(s3(), "s3://backups/k.db", None);
        s.status = None;
        assert_eq!(
            verify_job(&s, "op", "etcd:v3.6.16").unwrap_err(),
            VerifyJobError::NoArtifact
        );
    }
}
