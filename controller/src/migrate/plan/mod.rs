//! The adoption plan of an aenix (`etcd.aenix.io/v1alpha1`) cluster: pure, from what
//! [`super::inspect`] read (the v1alpha1 EtcdCluster, its StatefulSet, Pods and PVCs, etcd's member
//! list) to the checks and the objects `--apply` writes. The dry run prints exactly this plan
//! (`render.rs`); the spec's translation is `translate.rs`'s. No I/O here (layering checks it).

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::{
    EtcdCluster, EtcdClusterStatus, EtcdMember, EtcdMemberSpec, EtcdMemberStatus, MemberTls,
    ObservedSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::naming::PEER_PORT;

mod render;
mod translate;
pub use render::render;
pub use translate::{translate_spec, version_of_image};

pub const AENIX_GROUP: &str = "etcd.aenix.io";
pub const AENIX_VERSION: &str = "v1alpha1";
/// The image the aenix operator runs when the pod template names none.
pub const AENIX_DEFAULT_IMAGE: &str = "quay.io/coreos/etcd:v3.5.12";
/// The aenix operator mounted the data volume at `/var/run/etcd` and ran etcd with
/// `--data-dir=/var/run/etcd/default.etcd`: etcd's data is this subdirectory of the PVC.
pub const LEGACY_DATA_DIR_SUBPATH: &str = "default.etcd";
/// On the EtcdCluster the migration creates: the UID of the v1alpha1 EtcdCluster it was adopted
/// from. A re-run finds its own partial apply by it; any other EtcdCluster of that name is refused.
pub use api::labels::ADOPTED_FROM_ANNOTATION;

/// The aenix operator's headless Service (its Pods' subdomain; peer URLs use it).
pub fn legacy_headless_service(cluster: &str) -> String {
    format!("{cluster}-headless")
}

/// The aenix client Service (ClusterIP), whose name our headless Service takes.
pub fn legacy_client_service(cluster: &str) -> String {
    cluster.to_string()
}

/// The aenix operator's `--initial-cluster-token`.
pub fn legacy_cluster_token(cluster: &str, namespace: &str) -> String {
    format!("{cluster}-{namespace}")
}

/// The StatefulSet as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatefulSetFacts {
    pub replicas: i32,
    pub ready_replicas: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    pub ready: bool,
    /// Its etcd container runs with `--peer-auto-tls`.
    pub peer_auto_tls: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdMemberFacts {
    pub id: u64,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
}

/// Everything read from the cluster.
#[derive(Clone, Debug)]
pub struct Facts {
    pub name: String,
    pub namespace: String,
    /// The v1alpha1 EtcdCluster as stored.
    pub legacy: Value,
    pub legacy_uid: String,
    pub statefulset: Option<StatefulSetFacts>,
    /// Pods by name.
    pub pods: BTreeMap<String, PodFacts>,
    /// PVC name → UID.
    pub pvcs: BTreeMap<String, String>,
    /// `(cluster ID, members)`, or why etcd could not be asked.
    pub etcd: Result<(u64, Vec<EtcdMemberFacts>), String>,
    /// Deployments of the aenix operator that still run Pods (`namespace/name`).
    pub aenix_operator_running: Vec<String>,
    /// An EtcdCluster of ours with the same name: the value of its
    /// [`ADOPTED_FROM_ANNOTATION`] (`None` when it has none).
    pub target: Option<Option<String>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    pub what: String,
}

/// One Pod and PVC becoming an EtcdMember.
#[derive(Clone, Debug)]
pub struct Adoption {
    pub member: EtcdMember,
    pub status: EtcdMemberStatus,
    pub pod_uid: String,
    pub pvc: String,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub checks: Vec<Check>,
    pub cluster: Option<EtcdCluster>,
    pub status: Option<EtcdClusterStatus>,
    pub members: Vec<Adoption>,
    /// The StatefulSet to delete with `propagationPolicy=Orphan` (`None`: already gone).
    pub statefulset: Option<String>,
    pub legacy_headless_service: String,
    pub legacy_client_service: String,
    /// The partial apply of an earlier run is continued.
    pub resuming: bool,
}

impl Plan {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

fn check(checks: &mut Vec<Check>, ok: bool, what: String) {
    checks.push(Check { ok, what });
}

/// A peer URL `http[s]://<member>.<service>.<namespace>.svc[.<domain>]:2380`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerUrl {
    pub member: String,
    pub service: String,
    /// `https://`: the aenix operator's peer auto-TLS (or a peer Secret).
    pub tls: bool,
}

/// Parse a peer URL of an aenix member (see [`PeerUrl`]).
pub fn parse_peer_url(url: &str, namespace: &str) -> Result<PeerUrl, String> {
    let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (rest, false),
        (_, Some(rest)) => (rest, true),
        _ => {
            return Err(format!(
                "peer URL {url} is not http[s]://<pod>.<service>.<namespace>.svc:2380"
            ))
        }
    };
    let (host, port) = rest
        .trim_end_matches('/')
        .rsplit_once(':')
        .ok_or_else(|| format!("peer URL {url} has no port"))?;
    if port != PEER_PORT.to_string() {
        return Err(format!("peer URL {url} does not use port {PEER_PORT}"));
    }
    let labels: Vec<&str> = host.split('.').collect();
    match labels.as_slice() {
        [member, service, ns, "svc", ..] if *ns == namespace => Ok(PeerUrl {
            member: member.to_string(),
            service: service.to_string(),
            tls,
        }),
        _ => Err(format!(
            "peer URL {url} is not http[s]://<pod>.<service>.{namespace}.svc:2380"
        )),
    }
}

/// The checks and, when they pass, the objects to write.
pub fn build(f: &Facts) -> Plan {
    let name = &f.name;
    let ns = &f.namespace;
    let mut checks = Vec::new();
    let headless = legacy_headless_service(name);
    let resuming = matches!(&f.target, Some(Some(uid)) if *uid == f.legacy_uid);
    let mut plan = Plan {
        checks: Vec::new(),
        cluster: None,
        status: None,
        members: Vec::new(),
        statefulset: f.statefulset.as_ref().map(|_| name.clone()),
        legacy_headless_service: headless.clone(),
        legacy_client_service: legacy_client_service(name),
        resuming,
    };

    check(
        &mut checks,
        f.aenix_operator_running.is_empty(),
        match f.aenix_operator_running.is_empty() {
            true => "the aenix operator is stopped (no Deployment of it runs Pods)".into(),
            false => format!(
                "the aenix operator still runs ({}): scale it to 0 first (kubectl -n <namespace> \
                 scale deployment <name> --replicas=0), or it recreates the StatefulSet",
                f.aenix_operator_running.join(", ")
            ),
        },
    );
    match &f.target {
        None => check(
            &mut checks,
            true,
            format!("no etcd-operator.cozystack.io EtcdCluster {ns}/{name} exists yet"),
        ),
        Some(_) if resuming => check(
            &mut checks,
            true,
            format!(
                "EtcdCluster {ns}/{name} was created by an earlier run; the apply is continued"
            ),
        ),
        Some(_) => check(
            &mut checks,
            false,
            format!(
                "an etcd-operator.cozystack.io EtcdCluster {ns}/{name} already exists and was not \
                 adopted from this aenix cluster: delete or rename it first"
            ),
        ),
    }
    let spec = match translate_spec(&f.legacy) {
        Ok(spec) => {
            check(
                &mut checks,
                true,
                format!(
                    "spec translated: replicas {}, version {}, storage {}{}",
                    spec.replicas,
                    spec.version,
                    spec.storage.size.0,
                    spec.storage
                        .storage_class_name
                        .as_ref()
                        .map(|c| format!(" (class {c})"))
                        .unwrap_or_default()
                ),
            );
            Some(spec)
        }
        Err(errors) => {
            for e in errors {
                check(&mut checks, false, e);
            }
            None
        }
    };
    match &f.statefulset {
        Some(s) => {
            let ok = spec
                .as_ref()
                .is_some_and(|sp| s.replicas == sp.replicas && s.ready_replicas == s.replicas);
            check(
                &mut checks,
                ok,
                match ok {
                    true => format!("StatefulSet {ns}/{name} has {} of {} replicas Ready", s.ready_replicas, s.replicas),
                    false => format!(
                        "StatefulSet {ns}/{name} has {} of {} replicas Ready (spec.replicas of the \
                         EtcdCluster: {}): wait until every replica is Ready and matches spec.replicas",
                        s.ready_replicas,
                        s.replicas,
                        spec.as_ref().map(|s| s.replicas.to_string()).unwrap_or("?".into())
                    ),
                },
            );
        }
        None if resuming => check(
            &mut checks,
            true,
            format!("StatefulSet {ns}/{name} was already deleted (orphaning its Pods) by an earlier run"),
        ),
        None => check(
            &mut checks,
            false,
            format!("StatefulSet {ns}/{name} not found: is {name} a running aenix cluster?"),
        ),
    }
    let (cluster_id, mut members) = match &f.etcd {
        Ok((id, members)) => (*id, members.clone()),
        Err(e) => {
            check(
                &mut checks,
                false,
                format!("etcd could not be asked for its members: {e}"),
            );
            plan.checks = checks;
            return plan;
        }
    };
    members.sort_by(|a, b| a.name.cmp(&b.name));
    let voters = members.iter().filter(|m| !m.is_learner).count();
    let want = spec.as_ref().map(|s| s.replicas as usize).unwrap_or(0);
    check(
        &mut checks,
        voters == want && voters == members.len(),
        format!(
            "etcd (cluster ID {cluster_id:016x}) lists {} members, {voters} voters (want {want} voters, no learners)",
            members.len()
        ),
    );
    let mut adopted = Vec::new();
    // Whether each member's peer URL is https (with the Pod running `--peer-auto-tls`).
    let mut schemes = Vec::new();
    for m in &members {
        let url = m.peer_urls.first().cloned().unwrap_or_default();
        match parse_peer_url(&url, ns) {
            Ok(PeerUrl {
                member: pod,
                service,
                tls,
            }) if pod == m.name && service == headless => {
                let Some(p) = f.pods.get(&pod) else {
                    check(
                        &mut checks,
                        false,
                        format!("etcd member {} has no Pod {ns}/{pod}", m.name),
                    );
                    continue;
                };
                schemes.push(tls);
                if tls && !p.peer_auto_tls {
                    check(
                        &mut checks,
                        false,
                        format!(
                            "member {pod} has the TLS peer URL {url} but its Pod's etcd container \
                             does not run --peer-auto-tls: peer TLS from Secrets is not adopted in \
                             place by this version; migrate through a snapshot and restore instead"
                        ),
                    );
                }
                let pvc = labels::pvc_name(&pod);
                let pvc_ok = f.pvcs.contains_key(&pvc);
                check(
                    &mut checks,
                    p.ready && pvc_ok,
                    format!(
                        "member {pod} (ID {:016x}, peer URL {url}): Pod {}, PVC {pvc} {}",
                        m.id,
                        if p.ready {
                            "Ready"
                        } else {
                            "NOT Ready: wait for it"
                        },
                        if pvc_ok { "found" } else { "NOT found" }
                    ),
                );
                adopted.push((m.clone(), p.uid.clone(), pvc, url));
            }
            Ok(PeerUrl {
                member: pod,
                service,
                ..
            }) => check(
                &mut checks,
                false,
                format!(
                    "etcd member {:?} has peer URL {url} (host {pod}.{service}): expected \
                     <pod>.{headless}, with the member named after its Pod",
                    m.name
                ),
            ),
            Err(e) => check(&mut checks, false, format!("etcd member {:?}: {e}", m.name)),
        }
    }
    let peer_auto_tls = schemes.first().copied().unwrap_or(false);
    if schemes.iter().any(|&t| t != peer_auto_tls) {
        check(
            &mut checks,
            false,
            "the members' peer URLs mix http:// and https://: finish or roll back the aenix \
             cluster's peer TLS change first, so every member uses the same scheme"
                .into(),
        );
    } else if peer_auto_tls {
        check(
            &mut checks,
            true,
            "peers use etcd's --peer-auto-tls (https peer URLs, self-signed certificates): every \
             member, adopted or created later, keeps running with it"
                .into(),
        );
    }
    plan.checks = checks;
    let Some(spec) = spec else {
        return plan;
    };
    if !plan.passed() {
        return plan;
    }

    let token = legacy_cluster_token(name, ns);
    let initial_cluster = adopted
        .iter()
        .map(|(m, _, _, url)| format!("{}={url}", m.name))
        .collect::<Vec<_>>()
        .join(",");
    let observed = ObservedSpec::of(&spec, Some(1));
    for (m, pod_uid, pvc, _) in adopted {
        let mut member = EtcdMember::new(
            &m.name,
            EtcdMemberSpec {
                cluster_name: name.clone(),
                version: spec.version.clone(),
                storage: spec.storage.clone(),
                resources: spec.resources.clone(),
                affinity: spec.affinity.clone(),
                topology_spread_constraints: spec.topology_spread_constraints.clone(),
                options: spec.options.clone(),
                image_pull_secrets: spec.image_pull_secrets.clone(),
                initial_cluster: initial_cluster.clone(),
                cluster_token: token.clone(),
                tls: peer_auto_tls.then(|| MemberTls {
                    peer_auto_tls: true,
                    ..MemberTls::default()
                }),
                ..EtcdMemberSpec::default()
            },
        );
        member.metadata.namespace = Some(ns.clone());
        member.metadata.labels = Some(labels::member_labels(name, &m.name));
        member.metadata.annotations = Some(BTreeMap::from([
            (ADOPTED_FROM_ANNOTATION.to_string(), f.legacy_uid.clone()),
            (
                labels::HEADLESS_SERVICE_ANNOTATION.to_string(),
                headless.clone(),
            ),
            (
                labels::DATA_DIR_SUBPATH_ANNOTATION.to_string(),
                LEGACY_DATA_DIR_SUBPATH.to_string(),
            ),
        ]));
        member.metadata.finalizers = Some(vec![labels::MEMBER_CLEANUP_FINALIZER.to_string()]);
        plan.members.push(Adoption {
            status: EtcdMemberStatus {
                member_id: Some(format!("{:016x}", m.id)),
                pod_name: Some(m.name.clone()),
                pod_uid: Some(pod_uid.clone()),
                is_voter: true,
                pvc_name: Some(pvc.clone()),
                version: Some(spec.version.clone()),
                ..EtcdMemberStatus::default()
            },
            member,
            pod_uid,
            pvc,
        });
    }
    plan.status = Some(EtcdClusterStatus {
        selector: Some(labels::cluster_selector(name)),
        cluster_id: Some(format!("{cluster_id:016x}")),
        cluster_token: Some(token),
        observed: Some(observed),
        ..EtcdClusterStatus::default()
    });
    plan.cluster = Some(EtcdCluster {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            annotations: Some(
                [(ADOPTED_FROM_ANNOTATION.to_string(), f.legacy_uid.clone())]
                    .into_iter()
                    .chain(peer_auto_tls.then(|| {
                        (
                            labels::PEER_AUTO_TLS_ANNOTATION.to_string(),
                            "true".to_string(),
                        )
                    }))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    });
    plan
}

#[cfg(test)]
mod tests;
