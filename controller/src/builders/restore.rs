//! The restore init containers of a seed member with `spec.restore` (docs/snapshots.md): first
//! `install-tools` (the operator image) copies the operator binary into an emptyDir, then
//! `restore` runs it as `snapshot-agent restore` in the member's own etcd image, so the
//! cluster's own `etcdutl` rebuilds the data dir. Pure.

use api::v1alpha2::{EtcdMember, RestoreSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PersistentVolumeClaimVolumeSource, SecurityContext,
    Volume, VolumeMount,
};
use kube::ResourceExt;

use super::{mount, BuildError, DATA_DIR, DATA_VOLUME};

pub const INSTALL_TOOLS_CONTAINER: &str = "install-tools";
pub const RESTORE_CONTAINER: &str = "restore";
pub const TOOLS_VOLUME: &str = "tools";
/// Where the operator binary is copied to (an emptyDir shared by the two init containers).
pub const TOOLS_DIR: &str = "/tools";
pub const SOURCE_VOLUME: &str = "restore-source";
/// Where a PVC restore source is mounted (read-only).
pub const SOURCE_DIR: &str = "/restore-source";
/// `etcdutl` in the published etcd images.
pub const ETCDUTL: &str = "/usr/local/bin/etcdutl";
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// The operator binary's name in [`TOOLS_DIR`].
pub const BINARY: &str = "etcd-operator";

/// The member's identity as etcd is started with it; `etcdutl snapshot restore` bakes it into
/// the restored data dir.
pub struct Identity<'a> {
    pub name: &'a str,
    pub peer_url: &'a str,
}

/// An in-place restore into an existing member (an EtcdRecovery from a snapshot, read from the
/// member's [`api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION`]): the member restarts as a new
/// one-member cluster (`--initial-cluster` is itself alone, whatever it joined with), its
/// previous data is moved into `set_aside`, and the revision jumps by `bump_revision`.
pub struct InPlace {
    pub set_aside: String,
    pub bump_revision: Option<u64>,
    /// The sha256 the stored snapshot must have ([`api::v1alpha2::RESTORE_SHA256_ANNOTATION`]).
    pub expected_sha256: Option<String>,
}

/// The in-place restore `member` asks for, if any.
pub fn in_place_of(member: &EtcdMember) -> Option<InPlace> {
    let recovery = member
        .annotations()
        .get(api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION)
        .filter(|r| !r.is_empty())?;
    // Keyed by the recovery's UID; a mark from before the UID was recorded keeps its name's.
    let key = member
        .annotations()
        .get(api::v1alpha2::RESTORE_ID_ANNOTATION)
        .filter(|u| !u.is_empty())
        .unwrap_or(recovery);
    let bump_revision = member
        .annotations()
        .get(api::v1alpha2::RESTORE_BUMP_REVISION_ANNOTATION)
        .and_then(|b| b.parse::<u64>().ok());
    let expected_sha256 = member
        .annotations()
        .get(api::v1alpha2::RESTORE_SHA256_ANNOTATION)
        .filter(|s| !s.is_empty())
        .cloned();
    Some(InPlace {
        set_aside: api::v1alpha2::set_aside_dir(key),
        bump_revision,
        expected_sha256,
    })
}

/// The ServiceAccount a member's Pod runs under while it restores `restore`: an S3 source's
/// `serviceAccountName` (its cloud identity, docs/cloud-identity.md), else the namespace's
/// default.
pub fn service_account(restore: &RestoreSpec) -> Option<String> {
    restore
        .source
        .s3
        .as_ref()
        .and_then(|s3| s3.service_account_name.clone())
        .filter(|name| !name.is_empty())
}

/// What the init containers share with the etcd container.
pub struct Shared<'a> {
    pub operator_image: &'a str,
    pub etcd_image: &'a str,
    pub security_context: &'a SecurityContext,
    pub resources: &'a k8s_openapi::api::core::v1::ResourceRequirements,
}

/// What a restore source adds to the `restore` container.
struct SourceParts {
    /// The agent's source flags.
    args: Vec<String>,
    /// The S3 credentials.
    env: Vec<EnvVar>,
    /// A PVC source's volume, or an S3 source's projected web identity token, and its mount.
    volumes: Vec<(Volume, VolumeMount)>,
}

/// The agent's source flags, the credentials and the extra volume of a restore source.
fn source_of(restore: &RestoreSpec, member: &str) -> Result<SourceParts, BuildError> {
    let source = &restore.source;
    if let Some(s3) = &source.s3 {
        let key = s3.key.as_deref().filter(|k| !k.is_empty()).ok_or_else(|| {
            BuildError::InvalidRestore(
                member.to_string(),
                "spec.restore.source.s3.key is empty; set it to the snapshot's exact object key"
                    .into(),
            )
        })?;
        let access = super::s3_access::s3_access(s3);
        let mut args = vec![
            format!("--s3-bucket={}", s3.bucket),
            format!("--s3-key={key}"),
        ];
        args.extend(access.args);
        return Ok(SourceParts {
            args,
            env: access.env,
            volumes: access.volumes.into_iter().zip(access.mounts).collect(),
        });
    }
    if let Some(pvc) = &source.pvc {
        let path = pvc
            .sub_path
            .as_deref()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                BuildError::InvalidRestore(
                    member.to_string(),
                    "spec.restore.source.pvc.subPath is empty; set it to the path of the snapshot's .db file in the claim".into(),
                )
            })?;
        if path.split('/').any(|seg| seg == "..") {
            return Err(BuildError::InvalidRestore(
                member.to_string(),
                format!("spec.restore.source.pvc.subPath {path:?} leaves the volume (..); give the path of the .db file inside the claim"),
            ));
        }
        let volume = Volume {
            name: SOURCE_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: pvc.claim_name.clone(),
                read_only: Some(true),
            }),
            ..Default::default()
        };
        let file = format!("{SOURCE_DIR}/{}", path.trim_start_matches('/'));
        return Ok(SourceParts {
            args: vec![format!("--pvc-file={file}")],
            env: Vec::new(),
            volumes: vec![(volume, mount(SOURCE_VOLUME, SOURCE_DIR, true))],
        });
    }
    Err(BuildError::InvalidRestore(
        member.to_string(),
        "spec.restore.source sets neither s3 nor pvc; set exactly one".into(),
    ))
}

/// The init containers and their extra volumes for a seed restoring `restore`, or for a member
/// restored `in_place`.
pub fn init_containers(
    member: &EtcdMember,
    restore: &RestoreSpec,
    id: &Identity<'_>,
    data_dir: &str,
    shared: &Shared<'_>,
    in_place: Option<&InPlace>,
) -> Result<(Vec<Container>, Vec<Volume>), BuildError> {
    let name = member.name_any();
    let SourceParts {
        args: source_args,
        env,
        volumes: source_volumes,
    } = source_of(restore, &name)?;
    let tools = Volume {
        name: TOOLS_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    };
    let install = Container {
        name: INSTALL_TOOLS_CONTAINER.into(),
        image: Some(shared.operator_image.to_string()),
        args: Some(vec!["install-tools".into(), format!("--to={TOOLS_DIR}")]),
        volume_mounts: Some(vec![mount(TOOLS_VOLUME, TOOLS_DIR, false)]),
        resources: Some(shared.resources.clone()),
        security_context: Some(shared.security_context.clone()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let initial_cluster = match in_place {
        Some(_) => format!("{}={}", id.name, id.peer_url),
        None => member.spec.initial_cluster.clone(),
    };
    let mut args = vec![
        "snapshot-agent".to_string(),
        "restore".to_string(),
        format!("--data-dir={data_dir}"),
        format!("--name={}", id.name),
        format!("--initial-cluster={initial_cluster}"),
        format!("--initial-cluster-token={}", member.spec.cluster_token),
        format!("--initial-advertise-peer-urls={}", id.peer_url),
        format!("--etcdutl={ETCDUTL}"),
        format!("--termination-log={TERMINATION_LOG}"),
    ];
    if let Some(in_place) = in_place {
        args.push(format!("--set-aside={}", in_place.set_aside));
        if let Some(bump) = in_place.bump_revision {
            args.push(format!("--bump-revision={bump}"));
        }
        if let Some(sha) = &in_place.expected_sha256 {
            args.push(format!("--expected-sha256={sha}"));
        }
    }
    args.extend(source_args);
    let mut mounts = vec![
        mount(TOOLS_VOLUME, TOOLS_DIR, true),
        mount(DATA_VOLUME, DATA_DIR, false),
    ];
    let mut volumes = vec![tools];
    for (volume, m) in source_volumes {
        volumes.push(volume);
        mounts.push(m);
    }
    let restore = Container {
        name: RESTORE_CONTAINER.into(),
        image: Some(shared.etcd_image.to_string()),
        command: Some(vec![format!("{TOOLS_DIR}/{BINARY}")]),
        args: Some(args),
        env: (!env.is_empty()).then_some(env),
        volume_mounts: Some(mounts),
        resources: Some(shared.resources.clone()),
        security_context: Some(shared.security_context.clone()),
        termination_message_path: Some(TERMINATION_LOG.into()),
        // The agent writes `{"restored":..}` / `{"error":..}`; a crash without it leaves the
        // log's tail, which still says why.
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    Ok((vec![install, restore], volumes))
}
