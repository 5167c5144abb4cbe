//! The member Pod: one etcd process per EtcdMember, named after the member.

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::{EtcdMember, EtcdOptions};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec,
    Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext,
    TCPSocketAction, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use super::{member_metadata, mount, restore, BuildError};
use crate::naming::{self, CLIENT_PORT, METRICS_PORT, PEER_PORT};

pub const ETCD_CONTAINER: &str = "etcd";
pub use super::{DATA_DIR, DATA_VOLUME};
pub const CLIENT_TLS_DIR: &str = "/etc/etcd/tls/client";
pub const PEER_TLS_DIR: &str = "/etc/etcd/tls/peer";
pub const NONROOT_ID: i64 = 65532;

/// Annotation on the Pod holding `new` or `existing`. etcd reads it through the
/// `INITIAL_CLUSTER_STATE` environment variable (a downward-API field reference) on every
/// container start, so once the cluster has formed the operator flips it to `existing` and a seed
/// whose data directory is wiped afterwards can never form a new, empty cluster.
pub const INITIAL_CLUSTER_STATE_ANNOTATION: &str =
    "etcd-operator.cozystack.io/initial-cluster-state";
pub const STATE_NEW: &str = "new";
pub const STATE_EXISTING: &str = "existing";

/// What the Pod needs beyond the member itself.
#[derive(Clone, Debug)]
pub struct PodParams<'a> {
    /// Image repository of etcd, e.g. `quay.io/coreos/etcd`.
    pub etcd_image_repository: &'a str,
    /// Whether the member is a voter (gets the role label).
    pub voter: bool,
    /// Whether this Pod may bootstrap a new cluster (`--initial-cluster-state=new`): only the
    /// seed, and only while the cluster has not formed.
    pub bootstrap_new_cluster: bool,
    /// The operator's own image (`--operator-image`): the restore init containers of a seed
    /// with `spec.restore` copy the snapshot agent out of it.
    pub operator_image: Option<&'a str>,
}

/// The etcd image repository `member` runs: the one recorded on it by the cluster controller
/// ([`labels::IMAGE_REPOSITORY_ANNOTATION`]), else the operator's `--etcd-image-repository`.
pub fn image_repository<'a>(member: &'a EtcdMember, flag: &'a str) -> &'a str {
    member
        .annotations()
        .get(labels::IMAGE_REPOSITORY_ANNOTATION)
        .map(String::as_str)
        .filter(|r| !r.is_empty())
        .unwrap_or(flag)
}

/// The etcd container's readiness probe path, on the metrics listener.
pub const READINESS_PATH: &str = "/health?exclude=NOSPACE";

pub fn etcd_image(repository: &str, version: &str) -> String {
    format!("{repository}:v{version}")
}

/// The etcd container's resources: `spec.resources` when it sets anything, else
/// [`default_resources`]. An empty `resources: {}` counts as unset: the reference operator writes
/// exactly that into every EtcdMember and `status.observed` when the user set none (a Go struct
/// is never omitted), and its Pods then get the default requests, so ours must too.
pub fn container_resources(resources: Option<&ResourceRequirements>) -> ResourceRequirements {
    match resources {
        Some(r) if *r != ResourceRequirements::default() => r.clone(),
        _ => default_resources(),
    }
}

/// The default requests when `spec.resources` is unset.
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("100m".to_string())),
            ("memory".to_string(), Quantity("128Mi".to_string())),
        ])),
        ..Default::default()
    }
}

fn option_flags(options: Option<&EtcdOptions>) -> Vec<String> {
    let Some(o) = options else {
        return Vec::new();
    };
    let mut flags = Vec::new();
    if let Some(q) = o.quota_backend_bytes {
        flags.push(format!("--quota-backend-bytes={q}"));
    }
    if let Some(mode) = o.auto_compaction_mode {
        flags.push(format!("--auto-compaction-mode={}", mode.as_str()));
    }
    if let Some(r) = &o.auto_compaction_retention {
        let value = match r {
            IntOrString::Int(i) => i.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        flags.push(format!("--auto-compaction-retention={value}"));
    }
    if let Some(n) = o.snapshot_count {
        flags.push(format!("--snapshot-count={n}"));
    }
    flags
}

/// etcd's data directory: the volume root, or the adopted member's legacy subdirectory of it
/// (see [`labels::DATA_DIR_SUBPATH_ANNOTATION`]) so a recreated Pod finds the existing data.
pub fn data_dir(member: &EtcdMember) -> String {
    match labels::data_dir_subpath(member.annotations()) {
        Some(sub) => format!("{DATA_DIR}/{sub}"),
        None => DATA_DIR.to_string(),
    }
}

/// etcd's command line for a member. `--initial-cluster-state` is expanded from the environment
/// (see [`INITIAL_CLUSTER_STATE_ANNOTATION`]).
pub fn etcd_args(member: &EtcdMember) -> Result<Vec<String>, BuildError> {
    let name = member.name_any();
    let namespace = member.namespace().ok_or(BuildError::NoNamespace)?;
    let spec = &member.spec;
    if spec.initial_cluster.is_empty() {
        return Err(BuildError::PendingMember(name));
    }
    let tls = spec.tls.clone().unwrap_or_default();
    let client_tls = tls.client_server_secret_ref.is_some();
    let peer_secret = tls.peer_secret_ref.is_some();
    // Peer auto-TLS (an adopted aenix cluster): etcd generates self-signed peer certificates
    // under its data dir; the peer URLs are https all the same.
    let peer_auto_tls = tls.peer_auto_tls && !peer_secret;
    let peer_tls = peer_tls(member);
    let service = naming::member_service(member);
    let cluster = &service;

    let mut args = vec![
        format!("--name={name}"),
        format!("--data-dir={}", data_dir(member)),
        format!(
            "--listen-client-urls={}://0.0.0.0:{CLIENT_PORT}",
            if client_tls { "https" } else { "http" }
        ),
        format!(
            "--advertise-client-urls={}",
            naming::client_url(&name, cluster, &namespace, client_tls)
        ),
        format!(
            "--listen-peer-urls={}://0.0.0.0:{PEER_PORT}",
            if peer_tls { "https" } else { "http" }
        ),
        format!(
            "--initial-advertise-peer-urls={}",
            naming::peer_url(&name, cluster, &namespace, peer_tls)
        ),
        format!("--initial-cluster={}", spec.initial_cluster),
        format!("--initial-cluster-token={}", spec.cluster_token),
        "--initial-cluster-state=$(INITIAL_CLUSTER_STATE)".to_string(),
        format!("--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}"),
    ];
    args.extend(option_flags(spec.options.as_ref()));
    if client_tls {
        args.extend([
            format!("--cert-file={CLIENT_TLS_DIR}/tls.crt"),
            format!("--key-file={CLIENT_TLS_DIR}/tls.key"),
        ]);
        // etcd requires a client certificate whenever `--trusted-ca-file` is set, with or
        // without `--client-cert-auth` (pkg/transport TLSInfo.ServerConfig): a server-TLS-only
        // cluster must not get it, or clients without a certificate are refused.
        if tls.client_mtls {
            args.extend([
                format!("--trusted-ca-file={CLIENT_TLS_DIR}/ca.crt"),
                "--client-cert-auth".to_string(),
            ]);
        }
    }
    if peer_auto_tls {
        args.push("--peer-auto-tls".to_string());
    }
    if peer_secret {
        args.extend([
            format!("--peer-cert-file={PEER_TLS_DIR}/tls.crt"),
            format!("--peer-key-file={PEER_TLS_DIR}/tls.key"),
            format!("--peer-trusted-ca-file={PEER_TLS_DIR}/ca.crt"),
            "--peer-client-cert-auth".to_string(),
        ]);
    }
    Ok(args)
}

/// Whether the member's peer listener is https (its own Secret or peer auto-TLS).
fn peer_tls(member: &EtcdMember) -> bool {
    let tls = member.spec.tls.clone().unwrap_or_default();
    tls.peer_secret_ref.is_some() || tls.peer_auto_tls
}

fn secret_volume(name: &str, secret: &str) -> Volume {
    Volume {
        name: name.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn port(name: &str, number: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: number,
        protocol: Some("TCP".to_string()),
        ..Default::default()
    }
}

/// The member Pod, owned by its EtcdMember.
pub fn member_pod(member: &EtcdMember, params: &PodParams<'_>) -> Result<Pod, BuildError> {
    let name = member.name_any();
    let spec = &member.spec;
    let args = etcd_args(member)?;
    let owner = member
        .controller_owner_ref(&())
        .ok_or_else(|| BuildError::NoUid(name.clone()))?;

    let mut meta: ObjectMeta = member_metadata(member, owner);
    if params.voter {
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(labels::ROLE.to_string(), labels::ROLE_VOTER.to_string());
    }
    let state = if params.bootstrap_new_cluster {
        STATE_NEW
    } else {
        STATE_EXISTING
    };
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        INITIAL_CLUSTER_STATE_ANNOTATION.to_string(),
        state.to_string(),
    );
    // The CA bundles the Pod starts with: the member controller restarts it when its member
    // asks for another.
    if let Some(trust) = member.annotations().get(labels::TRUST_BUNDLE_ANNOTATION) {
        annotations.insert(labels::TRUST_BUNDLE_ANNOTATION.to_string(), trust.clone());
    }
    if let Some(cas) = member.annotations().get(labels::TRUSTED_CAS_ANNOTATION) {
        annotations.insert(labels::TRUSTED_CAS_ANNOTATION.to_string(), cas.clone());
    }
    annotations.insert(
        labels::TEMPLATE_HASH_ANNOTATION.to_string(),
        crate::template::hash(spec),
    );
    let repository = image_repository(member, params.etcd_image_repository);
    annotations.insert(
        labels::IMAGE_REPOSITORY_ANNOTATION.to_string(),
        repository.to_string(),
    );

    let data_volume = if spec.storage.is_memory() {
        Volume {
            name: DATA_VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_string()),
                size_limit: Some(spec.storage.size.clone()),
            }),
            ..Default::default()
        }
    } else {
        Volume {
            name: DATA_VOLUME.to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: labels::pvc_name(&name),
                read_only: None,
            }),
            ..Default::default()
        }
    };
    let mut volumes = vec![data_volume];
    let mut mounts = vec![mount(DATA_VOLUME, DATA_DIR, false)];
    let tls = spec.tls.clone().unwrap_or_default();
    if let Some(secret) = &tls.client_server_secret_ref {
        volumes.push(secret_volume("client-tls", &secret.name));
        mounts.push(mount("client-tls", CLIENT_TLS_DIR, true));
    }
    if let Some(secret) = &tls.peer_secret_ref {
        volumes.push(secret_volume("peer-tls", &secret.name));
        mounts.push(mount("peer-tls", PEER_TLS_DIR, true));
    }

    let image = etcd_image(repository, &spec.version);
    let security_context = SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            add: None,
        }),
        run_as_non_root: Some(true),
        ..Default::default()
    };
    let resources = container_resources(spec.resources.as_ref());
    // Only a seed that bootstraps a new cluster restores; the agent itself skips a data dir
    // that is already initialised.
    let mut init_containers = Vec::new();
    if let (true, Some(restore)) = (params.bootstrap_new_cluster, &spec.restore) {
        let operator_image = params
            .operator_image
            .ok_or_else(|| BuildError::NoOperatorImage(name.clone()))?;
        let namespace = member.namespace().ok_or(BuildError::NoNamespace)?;
        let peer_url = naming::peer_url(
            &name,
            &naming::member_service(member),
            &namespace,
            peer_tls(member),
        );
        let (containers, extra) = restore::init_containers(
            member,
            restore,
            &restore::Identity {
                name: &name,
                peer_url: &peer_url,
            },
            &data_dir(member),
            &restore::Shared {
                operator_image,
                etcd_image: &image,
                security_context: &security_context,
                resources: &resources,
            },
        )?;
        init_containers = containers;
        volumes.extend(extra);
    }

    let container = Container {
        name: ETCD_CONTAINER.to_string(),
        image: Some(image),
        command: Some(vec!["etcd".to_string()]),
        args: Some(args),
        env: Some(vec![EnvVar {
            name: "INITIAL_CLUSTER_STATE".to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!(
                        "metadata.annotations['{INITIAL_CLUSTER_STATE_ANNOTATION}']"
                    ),
                    api_version: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ports: Some(vec![
            port("client", CLIENT_PORT),
            port("peer", PEER_PORT),
            port("metrics", METRICS_PORT),
        ]),
        // Liveness only asks "is the process serving its peer port": never quorum-aware, so a
        // partitioned minority is not restarted into a crash loop.
        liveness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(PEER_PORT),
                host: None,
            }),
            initial_delay_seconds: Some(10),
            period_seconds: Some(10),
            timeout_seconds: Some(5),
            failure_threshold: Some(6),
            ..Default::default()
        }),
        // Readiness is etcd's own health (a leader, a quorum read answered) except for a raised
        // NOSPACE alarm: under it etcd still serves reads, deletes and compactions, the very
        // remedies, and the Pods must stay behind the client Service and count for rollouts.
        // etcd 3.5 and 3.6 both honour `exclude` on the metrics listener.
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(READINESS_PATH.to_string()),
                port: IntOrString::Int(METRICS_PORT),
                scheme: Some("HTTP".to_string()),
                ..Default::default()
            }),
            period_seconds: Some(2),
            timeout_seconds: Some(5),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        resources: Some(resources),
        volume_mounts: Some(mounts),
        security_context: Some(security_context),
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Default::default()
    };

    Ok(Pod {
        metadata: meta,
        spec: Some(PodSpec {
            hostname: Some(name.clone()),
            subdomain: Some(naming::member_service(member)),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(NONROOT_ID),
                run_as_group: Some(NONROOT_ID),
                fs_group: Some(NONROOT_ID),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_string(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            affinity: spec.affinity.clone(),
            topology_spread_constraints: (!spec.topology_spread_constraints.is_empty())
                .then(|| spec.topology_spread_constraints.clone()),
            image_pull_secrets: (!spec.image_pull_secrets.is_empty())
                .then(|| spec.image_pull_secrets.clone()),
            init_containers: (!init_containers.is_empty()).then_some(init_containers),
            containers: vec![container],
            volumes: Some(volumes),
            ..Default::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::tests::member;

    fn params() -> PodParams<'static> {
        PodParams {
            etcd_image_repository: "quay.io/coreos/etcd",
            voter: true,
            bootstrap_new_cluster: false,
            operator_image: Some("op:1"),
        }
    }

    fn args_of(pod: &Pod) -> Vec<String> {
        pod.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap()
    }

    #[test]
    fn member_pod_runs_etcd_with_per_member_dns_and_restricted_security() {
        let m = member("my-etcd-abcde", "my-etcd", "ns1");
        let pod = member_pod(&m, &params()).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("my-etcd-abcde"));
        assert_eq!(spec.hostname.as_deref(), Some("my-etcd-abcde"));
        assert_eq!(spec.subdomain.as_deref(), Some("my-etcd"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let sc = spec.security_context.as_ref().unwrap();
        assert_eq!(
            (sc.run_as_user, sc.run_as_group, sc.fs_group),
            (Some(65532), Some(65532), Some(65532))
        );
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        let c = &spec.containers[0];
        assert_eq!(c.name, "etcd");
        assert_eq!(c.image.as_deref(), Some("quay.io/coreos/etcd:v3.6.11"));
        let csc = c.security_context.as_ref().unwrap();
        assert_eq!(csc.allow_privilege_escalation, Some(false));
        assert_eq!(
            csc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        let args = args_of(&pod);
        for expected in [
            "--name=my-etcd-abcde",
            "--data-dir=/var/lib/etcd",
            "--listen-client-urls=http://0.0.0.0:2379",
            "--advertise-client-urls=http://my-etcd-abcde.my-etcd.ns1.svc:2379",
            "--initial-advertise-peer-urls=http://my-etcd-abcde.my-etcd.ns1.svc:2380",
            "--initial-cluster=my-etcd-abcde=http://my-etcd-abcde.my-etcd.ns1.svc:2380",
            "--initial-cluster-token=ns1-my-etcd-uid",
            "--initial-cluster-state=$(INITIAL_CLUSTER_STATE)",
            "--listen-metrics-urls=http://0.0.0.0:2381",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "missing {expected} in {args:?}"
            );
        }
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[labels::ROLE], "voter");
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[INITIAL_CLUSTER_STATE_ANNOTATION],
            "existing"
        );
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("EtcdMember", Some(true))
        );
    }

    #[test]
    fn adopted_member_pod_keeps_its_legacy_service_and_data_subdirectory() {
        let mut m = member("legacy-0", "legacy", "ns1");
        m.spec.initial_cluster = "legacy-0=http://legacy-0.legacy-headless.ns1.svc:2380".into();
        m.metadata.annotations = Some(BTreeMap::from([
            (
                labels::HEADLESS_SERVICE_ANNOTATION.to_string(),
                "legacy-headless".to_string(),
            ),
            (
                labels::DATA_DIR_SUBPATH_ANNOTATION.to_string(),
                "default.etcd".to_string(),
            ),
        ]));
        let pod = member_pod(&m, &params()).unwrap();
        assert_eq!(
            pod.spec.as_ref().unwrap().subdomain.as_deref(),
            Some("legacy-headless")
        );
        let args = args_of(&pod);
        for expected in [
            "--data-dir=/var/lib/etcd/default.etcd",
            "--initial-advertise-peer-urls=http://legacy-0.legacy-headless.ns1.svc:2380",
            "--advertise-client-urls=http://legacy-0.legacy-headless.ns1.svc:2379",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "missing {expected} in {args:?}"
            );
        }
        // The annotations are the member's, not the Pod's: user metadata cannot forge them.
        let ann = pod.metadata.annotations.clone().unwrap_or_default();
        assert!(!ann.contains_key(labels::HEADLESS_SERVICE_ANNOTATION));
    }

    #[test]
    fn seed_of_unformed_cluster_bootstraps_new_and_learners_carry_no_voter_label() {
        let m = member("c-seed1", "c", "n");
        let pod = member_pod(
            &m,
            &PodParams {
                voter: false,
                bootstrap_new_cluster: true,
                ..params()
            },
        )
        .unwrap();
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[INITIAL_CLUSTER_STATE_ANNOTATION],
            "new"
        );
        assert!(!pod
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .contains_key(labels::ROLE));
    }

    fn restoring(source: api::v1alpha2::RestoreSource) -> EtcdMember {
        let mut m = member("c-seed1", "c", "n");
        m.spec.restore = Some(api::v1alpha2::RestoreSpec { source });
        m
    }

    fn s3_source() -> api::v1alpha2::RestoreSource {
        api::v1alpha2::RestoreSource {
            s3: Some(api::v1alpha2::S3Location {
                endpoint: Some("http://minio.n.svc:9000".into()),
                bucket: "backups".into(),
                key: Some("c/snap.db".into()),
                region: None,
                force_path_style: Some(true),
                credentials_secret_ref: Some(api::v1alpha2::SecretReference::new("s3")),
            }),
            pvc: None,
        }
    }

    fn seed_params() -> PodParams<'static> {
        PodParams {
            bootstrap_new_cluster: true,
            ..params()
        }
    }

    #[test]
    fn restoring_seed_copies_the_agent_then_restores_with_its_own_etcdutl_and_identity() {
        let pod = member_pod(&restoring(s3_source()), &seed_params()).unwrap();
        let spec = pod.spec.unwrap();
        let init = spec.init_containers.unwrap();
        let names: Vec<_> = init.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["install-tools", "restore"]);
        assert_eq!(init[0].image.as_deref(), Some("op:1"));
        assert_eq!(
            init[0].args.clone().unwrap(),
            ["install-tools", "--to=/tools"]
        );
        // The member's own etcd image, so its etcdutl version matches the cluster's.
        assert_eq!(
            init[1].image.as_deref(),
            Some("quay.io/coreos/etcd:v3.6.11")
        );
        assert_eq!(init[1].command.clone().unwrap(), ["/tools/etcd-operator"]);
        let args = init[1].args.clone().unwrap();
        for want in [
            "snapshot-agent",
            "restore",
            "--data-dir=/var/lib/etcd",
            "--name=c-seed1",
            "--initial-cluster=c-seed1=http://c-seed1.c.n.svc:2380",
            "--initial-cluster-token=n-c-uid",
            "--initial-advertise-peer-urls=http://c-seed1.c.n.svc:2380",
            "--etcdutl=/usr/local/bin/etcdutl",
            "--s3-bucket=backups",
            "--s3-key=c/snap.db",
            "--s3-endpoint=http://minio.n.svc:9000",
            "--s3-region=us-east-1",
            "--s3-force-path-style",
        ] {
            assert!(args.iter().any(|a| a == want), "missing {want} in {args:?}");
        }
        let env: Vec<_> = init[1]
            .env
            .iter()
            .flatten()
            .map(|e| {
                let r = e
                    .value_from
                    .as_ref()
                    .unwrap()
                    .secret_key_ref
                    .as_ref()
                    .unwrap();
                (e.name.clone(), r.name.clone(), r.key.clone())
            })
            .collect();
        assert_eq!(
            env,
            [
                (
                    "AWS_ACCESS_KEY_ID".into(),
                    "s3".into(),
                    "AWS_ACCESS_KEY_ID".into()
                ),
                (
                    "AWS_SECRET_ACCESS_KEY".into(),
                    "s3".into(),
                    "AWS_SECRET_ACCESS_KEY".into()
                ),
            ]
        );
        let mounts: Vec<_> = init[1]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
            .collect();
        assert_eq!(
            mounts,
            [
                ("tools", "/tools", Some(true)),
                ("data", "/var/lib/etcd", None)
            ]
        );
        assert!(spec
            .volumes
            .unwrap()
            .iter()
            .any(|v| v.name == "tools" && v.empty_dir.is_some()));
    }

    #[test]
    fn pvc_source_is_mounted_read_only_and_named_by_its_exact_path() {
        let source = api::v1alpha2::RestoreSource {
            s3: None,
            pvc: Some(api::v1alpha2::PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("etcd/snap.db".into()),
            }),
        };
        let pod = member_pod(&restoring(source), &seed_params()).unwrap();
        let spec = pod.spec.unwrap();
        let restore = &spec.init_containers.unwrap()[1];
        assert!(restore
            .args
            .iter()
            .flatten()
            .any(|a| a == "--pvc-file=/restore-source/etcd/snap.db"));
        let volume = spec
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "restore-source")
            .unwrap();
        let claim = volume.persistent_volume_claim.unwrap();
        assert_eq!(
            (claim.claim_name.as_str(), claim.read_only),
            ("backups", Some(true))
        );
        let escaping = api::v1alpha2::RestoreSource {
            s3: None,
            pvc: Some(api::v1alpha2::PvcLocation {
                claim_name: "backups".into(),
                sub_path: Some("../x.db".into()),
            }),
        };
        let err = member_pod(&restoring(escaping), &seed_params()).unwrap_err();
        assert!(err.to_string().contains("subPath"), "{err}");
    }

    #[test]
    fn only_a_bootstrapping_seed_restores_and_it_needs_the_operator_image() {
        // A seed recreated after the cluster formed, or any later member: no restore.
        let pod = member_pod(&restoring(s3_source()), &params()).unwrap();
        assert!(pod.spec.unwrap().init_containers.is_none());
        let err = member_pod(
            &restoring(s3_source()),
            &PodParams {
                operator_image: None,
                ..seed_params()
            },
        )
        .unwrap_err();
        assert_eq!(err, BuildError::NoOperatorImage("c-seed1".into()));
        assert!(err.to_string().contains("--operator-image"));
    }

    #[test]
    fn pending_member_has_no_pod() {
        let mut m = member("c-x", "c", "n");
        m.spec.initial_cluster.clear();
        assert!(matches!(
            member_pod(&m, &params()),
            Err(BuildError::PendingMember(_))
        ));
    }

    #[test]
    fn tls_and_options_become_flags_and_mounts() {
        let mut m = member("c-x", "c", "n");
        m.spec.tls = Some(api::v1alpha2::MemberTls {
            client_server_secret_ref: Some(api::v1alpha2::SecretReference::new("c-server-tls")),
            client_mtls: true,
            peer_secret_ref: Some(api::v1alpha2::SecretReference::new("c-peer-tls")),
            peer_auto_tls: false,
        });
        m.spec.options = Some(EtcdOptions {
            quota_backend_bytes: Some(8_589_934_592),
            auto_compaction_mode: Some(api::v1alpha2::AutoCompactionMode::Periodic),
            auto_compaction_retention: Some(IntOrString::String("1h".into())),
            snapshot_count: Some(5000),
        });
        let pod = member_pod(&m, &params()).unwrap();
        let args = args_of(&pod);
        for expected in [
            "--listen-client-urls=https://0.0.0.0:2379",
            "--advertise-client-urls=https://c-x.c.n.svc:2379",
            "--initial-advertise-peer-urls=https://c-x.c.n.svc:2380",
            "--cert-file=/etc/etcd/tls/client/tls.crt",
            "--trusted-ca-file=/etc/etcd/tls/client/ca.crt",
            "--client-cert-auth",
            "--peer-cert-file=/etc/etcd/tls/peer/tls.crt",
            "--peer-client-cert-auth",
            "--quota-backend-bytes=8589934592",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=1h",
            "--snapshot-count=5000",
            "--listen-metrics-urls=http://0.0.0.0:2381",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "missing {expected} in {args:?}"
            );
        }
        let mounts: Vec<_> = pod.spec.as_ref().unwrap().containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.clone())
            .collect();
        assert_eq!(
            mounts,
            [
                "/var/lib/etcd",
                "/etc/etcd/tls/client",
                "/etc/etcd/tls/peer"
            ]
        );
    }

    fn tls_member(client: Option<&str>, mtls: bool, peer: Option<&str>) -> EtcdMember {
        let mut m = member("c-x", "c", "n");
        m.spec.initial_cluster = naming::initial_cluster_entry("c-x", "c", "n", peer.is_some());
        m.spec.tls = Some(api::v1alpha2::MemberTls {
            client_server_secret_ref: client.map(api::v1alpha2::SecretReference::new),
            client_mtls: mtls,
            peer_secret_ref: peer.map(api::v1alpha2::SecretReference::new),
            peer_auto_tls: false,
        });
        m
    }

    fn secret_volumes(pod: &Pod) -> Vec<(String, String)> {
        pod.spec
            .as_ref()
            .unwrap()
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| {
                let s = v.secret.as_ref()?;
                Some((v.name.clone(), s.secret_name.clone()?))
            })
            .collect()
    }

    #[test]
    fn server_tls_only_serves_https_without_requiring_client_certificates() {
        let pod = member_pod(&tls_member(Some("c-server-tls"), false, None), &params()).unwrap();
        let args = args_of(&pod);
        for expected in [
            "--listen-client-urls=https://0.0.0.0:2379",
            "--advertise-client-urls=https://c-x.c.n.svc:2379",
            "--cert-file=/etc/etcd/tls/client/tls.crt",
            "--key-file=/etc/etcd/tls/client/tls.key",
            "--listen-peer-urls=http://0.0.0.0:2380",
            "--initial-advertise-peer-urls=http://c-x.c.n.svc:2380",
            "--initial-cluster=c-x=http://c-x.c.n.svc:2380",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "missing {expected} in {args:?}"
            );
        }
        // etcd demands a client certificate as soon as it has a trusted CA.
        for absent in ["--trusted-ca-file", "--client-cert-auth", "--peer-"] {
            assert!(
                !args.iter().any(|a| a.starts_with(absent)),
                "{absent} in {args:?}"
            );
        }
        assert_eq!(
            secret_volumes(&pod),
            [("client-tls".to_string(), "c-server-tls".to_string())]
        );
    }

    #[test]
    fn peer_auto_tls_runs_https_peers_without_secrets() {
        let mut m = tls_member(None, false, None);
        m.spec.initial_cluster = naming::initial_cluster_entry("c-x", "c", "n", true);
        if let Some(tls) = m.spec.tls.as_mut() {
            tls.peer_auto_tls = true;
        }
        let pod = member_pod(&m, &params()).unwrap();
        let args = args_of(&pod);
        for expected in [
            "--listen-client-urls=http://0.0.0.0:2379",
            "--listen-peer-urls=https://0.0.0.0:2380",
            "--initial-advertise-peer-urls=https://c-x.c.n.svc:2380",
            "--initial-cluster=c-x=https://c-x.c.n.svc:2380",
            "--peer-auto-tls",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "missing {expected} in {args:?}"
            );
        }
        for absent in [
            "--peer-cert-file",
            "--peer-trusted-ca-file",
            "--peer-client-cert-auth",
        ] {
            assert!(
                !args.iter().any(|a| a.starts_with(absent)),
                "{absent} in {args:?}"
            );
        }
        assert_eq!(secret_volumes(&pod), []);
    }

    #[test]
    fn peer_only_tls_keeps_the_client_listener_plaintext_and_peers_mutual() {
        let pod = member_pod(&tls_member(None, false, Some("c-peer-tls")), &params()).unwrap();
        let args = args_of(&pod);
        for expected in [
            "--listen-client-urls=http://0.0.0.0:2379",
            "--advertise-client-urls=http://c-x.c.n.svc:2379",
            "--listen-peer-urls=https://0.0.0.0:2380",
            "--initial-advertise-peer-urls=https://c-x.c.n.svc:2380",
            "--initial-cluster=c-x=https://c-x.c.n.svc:2380",
            "--peer-cert-file=/etc/etcd/tls/peer/tls.crt",
            "--peer-key-file=/etc/etcd/tls/peer/tls.key",
            "--peer-trusted-ca-file=/etc/etcd/tls/peer/ca.crt",
            "--peer-client-cert-auth",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "missing {expected} in {args:?}"
            );
        }
        assert!(
            !args.iter().any(|a| a.starts_with("--cert-file")),
            "{args:?}"
        );
        assert_eq!(
            secret_volumes(&pod),
            [("peer-tls".to_string(), "c-peer-tls".to_string())]
        );
    }

    #[test]
    fn tls_secrets_are_whole_volume_mounts_and_probes_stay_on_plaintext_ports() {
        let pod = member_pod(
            &tls_member(Some("c-server-tls"), true, Some("c-peer-tls")),
            &params(),
        )
        .unwrap();
        let c = &pod.spec.as_ref().unwrap().containers[0];
        // No subPath and no items: the kubelet then refreshes renewed Secrets in place, and
        // etcd re-reads its certificate and key on every handshake.
        for m in c.volume_mounts.iter().flatten() {
            assert_eq!(m.sub_path, None, "{m:?}");
        }
        for v in pod.spec.as_ref().unwrap().volumes.iter().flatten() {
            if let Some(s) = &v.secret {
                assert_eq!(s.items, None, "{v:?}");
            }
        }
        assert_eq!(
            secret_volumes(&pod),
            [
                ("client-tls".to_string(), "c-server-tls".to_string()),
                ("peer-tls".to_string(), "c-peer-tls".to_string())
            ]
        );
        // Probes need no certificate: readiness on the plaintext metrics listener, liveness a
        // TCP connect to the peer port.
        let readiness = c
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(
            (readiness.port.clone(), readiness.scheme.as_deref()),
            (IntOrString::Int(METRICS_PORT), Some("HTTP"))
        );
        // A raised NOSPACE alarm does not take a member out of readiness.
        assert_eq!(readiness.path.as_deref(), Some("/health?exclude=NOSPACE"));
        assert!(args_of(&pod).contains(&"--listen-metrics-urls=http://0.0.0.0:2381".to_string()));
        let liveness = c.liveness_probe.as_ref().unwrap();
        assert_eq!(
            liveness.tcp_socket.as_ref().unwrap().port,
            IntOrString::Int(PEER_PORT)
        );
    }

    #[test]
    fn memory_medium_uses_tmpfs_sized_by_storage_and_default_resources_apply() {
        let mut m = member("c-x", "c", "n");
        m.spec.storage.medium = Some(api::v1alpha2::StorageMedium::Memory);
        m.spec.storage.size = Quantity("256Mi".into());
        let pod = member_pod(&m, &params()).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        let data = &spec.volumes.as_ref().unwrap()[0];
        let ed = data.empty_dir.as_ref().unwrap();
        assert_eq!(ed.medium.as_deref(), Some("Memory"));
        assert_eq!(ed.size_limit, Some(Quantity("256Mi".into())));
        let req = spec.containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap();
        assert_eq!(req["cpu"], Quantity("100m".into()));
        assert_eq!(req["memory"], Quantity("128Mi".into()));
    }

    #[test]
    fn empty_resources_written_by_the_reference_get_the_default_requests() {
        let mut m = member("c-x", "c", "n");
        m.spec.resources = Some(ResourceRequirements::default());
        let pod = member_pod(&m, &params()).unwrap();
        let resources = pod.spec.unwrap().containers[0].resources.clone().unwrap();
        assert_eq!(resources, default_resources());
        // Anything set is the user's choice and used as it is.
        let limits_only = ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("1Gi".into()),
            )])),
            ..Default::default()
        };
        m.spec.resources = Some(limits_only.clone());
        let pod = member_pod(&m, &params()).unwrap();
        assert_eq!(pod.spec.unwrap().containers[0].resources, Some(limits_only));
    }
}
