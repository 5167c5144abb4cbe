//! `etcd-operator migrate --from-aenix <cluster>`: in-place adoption of a running
//! `etcd.aenix.io/v1alpha1` cluster. [`inspect`] reads, [`plan::build`] decides (pure), the dry
//! run prints the plan, and [`apply`] writes it: our EtcdCluster (status latched from etcd),
//! an EtcdMember per Pod owning the existing Pod and PVC, the Services; no Pod restarts, no data
//! moves, no etcd membership writes. Every apply step first looks at what is there, so a re-run
//! after a partial apply finishes it.

pub mod plan;

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, PropagationPolicy,
};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::builders::service::{client_service, headless_service};
use crate::etcd::access::Access;
use crate::metrics::Metrics;
use crate::naming::CLIENT_PORT;
use plan::{EtcdMemberFacts, Facts, PodFacts, StatefulSetFacts};

const FIELD_MANAGER: &str = "etcd-operator-migrate";
const ORPHAN_WAIT: Duration = Duration::from_secs(120);

/// What the command was asked.
#[derive(Clone, Debug)]
pub struct Options {
    pub cluster: String,
    pub namespace: String,
    pub apply: bool,
    /// etcd client URLs to ask for the member list; default: each Pod's DNS name under the
    /// legacy headless Service (resolvable in the cluster).
    pub etcd_endpoints: Vec<String>,
}

fn aenix_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(plan::AENIX_GROUP, plan::AENIX_VERSION, "EtcdCluster");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// Run the command: print the plan; with `apply`, act on it.
pub async fn run(client: Client, opts: &Options) -> anyhow::Result<()> {
    let facts = inspect(&client, opts).await?;
    let plan = plan::build(&facts);
    print!("{}", plan::render(&plan, &facts));
    if !plan.passed() {
        bail!(
            "pre-flight checks failed for aenix EtcdCluster {}/{}; nothing was changed",
            opts.namespace,
            opts.cluster
        );
    }
    if !opts.apply {
        println!("\nDry run: nothing was changed. Run again with --apply to adopt the cluster.");
        return Ok(());
    }
    apply(&client, &facts, &plan).await?;
    println!(
        "\nAdopted: start (or scale up) etcd-operator; it keeps the cluster running as it is. \
         Clients should use Service {}/{}.",
        opts.namespace,
        labels::client_service_name(&opts.cluster)
    );
    Ok(())
}

/// Read everything the plan needs.
pub async fn inspect(client: &Client, opts: &Options) -> anyhow::Result<Facts> {
    let (name, ns) = (&opts.cluster, &opts.namespace);
    let legacy = aenix_api(client, ns)
        .get_opt(name)
        .await
        .with_context(|| {
            format!(
                "reading {}/{} EtcdCluster {ns}/{name} (is the aenix CRD installed?)",
                plan::AENIX_GROUP,
                plan::AENIX_VERSION
            )
        })?
        .with_context(|| {
            format!(
                "no {} EtcdCluster {ns}/{name}: name an existing aenix cluster (kubectl get etcdclusters.{} -n {ns})",
                plan::AENIX_GROUP,
                plan::AENIX_GROUP
            )
        })?;
    let legacy_uid = legacy.uid().unwrap_or_default();
    let legacy_json = serde_json::to_value(&legacy).context("encoding the aenix EtcdCluster")?;

    let statefulset = Api::<StatefulSet>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| format!("reading StatefulSet {ns}/{name}"))?
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|s| StatefulSetFacts {
            replicas: s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ready_replicas: s
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0),
        });

    let selector = format!("{}={name}", labels::APP_INSTANCE);
    let pods: std::collections::BTreeMap<String, PodFacts> =
        Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels(&selector))
            .await
            .with_context(|| format!("listing the Pods of {ns}/{name}"))?
            .items
            .into_iter()
            .map(|p| {
                let ready = crate::pods::pod_view(&p).ready;
                let peer_auto_tls = runs_peer_auto_tls(&p);
                (
                    p.name_any(),
                    PodFacts {
                        uid: p.uid().unwrap_or_default(),
                        ready,
                        peer_auto_tls,
                    },
                )
            })
            .collect();
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing the PVCs of namespace {ns}"))?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect();

    let target = Api::<EtcdCluster>::namespaced(client.clone(), ns)
        .get_metadata_opt(name)
        .await
        .with_context(|| format!("reading EtcdCluster {ns}/{name} (are our CRDs installed?)"))?
        .map(|c| c.annotations().get(plan::ADOPTED_FROM_ANNOTATION).cloned());

    let endpoints = if opts.etcd_endpoints.is_empty() {
        let headless = plan::legacy_headless_service(name);
        pods.iter()
            .filter(|(_, p)| p.ready)
            .map(|(p, _)| format!("http://{p}.{headless}.{ns}.svc:{CLIENT_PORT}"))
            .collect()
    } else {
        opts.etcd_endpoints.clone()
    };
    let etcd = member_list(&endpoints).await;

    Ok(Facts {
        name: name.clone(),
        namespace: ns.clone(),
        legacy: legacy_json,
        legacy_uid,
        statefulset,
        pods,
        pvcs,
        etcd,
        aenix_operator_running: aenix_operator_running(client).await,
        target,
    })
}

async fn member_list(endpoints: &[String]) -> Result<(u64, Vec<EtcdMemberFacts>), String> {
    if endpoints.is_empty() {
        return Err("no Ready Pod to ask (pass --etcd-endpoints)".into());
    }
    // No client TLS material and no user, as the migration has always dialed.
    let mut etcd = Access::new(None, None, Metrics::new())
        .dial(endpoints)
        .await
        .map_err(|e| format!("connecting to {}: {e}", endpoints.join(",")))?;
    let (cluster_id, members) = etcd
        .member_list()
        .await
        .map_err(|e| format!("MemberList through {}: {e}", endpoints.join(",")))?;
    Ok((
        cluster_id,
        members
            .into_iter()
            .map(|m| EtcdMemberFacts {
                id: m.id,
                name: m.name,
                peer_urls: m.peer_urls,
                is_learner: m.is_learner,
            })
            .collect(),
    ))
}

/// Deployments of the aenix operator that run Pods: named `etcd-operator-controller-manager`
/// (its release manifest) or running an `aenix-io/etcd-operator` image. A listing the caller may
/// not do is reported, not fatal: the plan then shows the check as unverified.
async fn aenix_operator_running(client: &Client) -> Vec<String> {
    let deployments: Api<Deployment> = Api::all(client.clone());
    let list = match deployments.list(&ListParams::default()).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "warning: could not list Deployments to check that the aenix operator is stopped ({e}); make sure it is"
            );
            return Vec::new();
        }
    };
    list.items
        .iter()
        .filter(|d| {
            let image_is_aenix = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|s| {
                    s.containers.iter().any(|c| {
                        c.image
                            .as_deref()
                            .is_some_and(|i| i.contains("aenix-io/etcd-operator"))
                    })
                });
            image_is_aenix || d.name_any() == "etcd-operator-controller-manager"
        })
        .filter(|d| {
            let spec = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let running = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            spec > 0 || running > 0
        })
        .map(|d| format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any()))
        .collect()
}

fn owner(
    obj: &impl Resource<DynamicType = ()>,
    controller: bool,
) -> anyhow::Result<OwnerReference> {
    let mut r = obj
        .controller_owner_ref(&())
        .context("an object read back from the API has no uid")?;
    if !controller {
        r.controller = None;
        r.block_owner_deletion = None;
    }
    Ok(r)
}

/// Write the plan. Each step skips what an earlier run already did.
pub async fn apply(client: &Client, f: &Facts, p: &plan::Plan) -> anyhow::Result<()> {
    let (name, ns) = (&f.name, &f.namespace);
    let pp = PatchParams::default();
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let (Some(want), Some(status)) = (&p.cluster, &p.status) else {
        bail!("the plan has no EtcdCluster to create");
    };

    // 1. Our EtcdCluster, its status latched as for a running cluster (cluster ID from etcd,
    // observed = spec), so the operator never bootstraps it.
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let cluster = match clusters.get_opt(name).await? {
        Some(c) => c,
        None => {
            let c = clusters
                .create(&post, want)
                .await
                .with_context(|| format!("creating EtcdCluster {ns}/{name}"))?;
            println!("created EtcdCluster {ns}/{name}");
            c
        }
    };
    if cluster
        .status
        .as_ref()
        .and_then(|s| s.cluster_id.as_ref())
        .is_none()
    {
        clusters
            .patch_status(name, &pp, &Patch::Merge(&json!({ "status": status })))
            .await
            .with_context(|| format!("writing the status of EtcdCluster {ns}/{name}"))?;
        println!(
            "latched status of EtcdCluster {ns}/{name}: clusterID {}",
            status.cluster_id.as_deref().unwrap_or_default()
        );
    }

    // 2. An EtcdMember per Pod, with the member ID etcd reported.
    let members_api: Api<EtcdMember> = Api::namespaced(client.clone(), ns);
    let mut members = Vec::new();
    for a in &p.members {
        let member_name = a.member.name_any();
        let m = match members_api.get_opt(&member_name).await? {
            Some(m) => m,
            None => {
                let mut m = a.member.clone();
                m.metadata.owner_references = Some(vec![owner(&cluster, true)?]);
                let created = members_api
                    .create(&post, &m)
                    .await
                    .with_context(|| format!("creating EtcdMember {ns}/{member_name}"))?;
                println!("created EtcdMember {ns}/{member_name}");
                created
            }
        };
        if m.status
            .as_ref()
            .and_then(|s| s.member_id.as_ref())
            .is_none()
        {
            members_api
                .patch_status(
                    &member_name,
                    &pp,
                    &Patch::Merge(&json!({ "status": a.status })),
                )
                .await
                .with_context(|| format!("writing the status of EtcdMember {ns}/{member_name}"))?;
        }
        members.push(m);
    }

    // 3. The StatefulSet goes, its Pods and PVCs stay (the garbage collector orphans them).
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    if statefulsets.get_opt(name).await?.is_some() {
        let orphan = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            ..DeleteParams::default()
        };
        statefulsets
            .delete(name, &orphan)
            .await
            .with_context(|| format!("deleting StatefulSet {ns}/{name} (orphaning its Pods)"))?;
        let deadline = Instant::now() + ORPHAN_WAIT;
        while statefulsets.get_opt(name).await?.is_some() {
            if Instant::now() > deadline {
                bail!(
                    "StatefulSet {ns}/{name} is still there {}s after its orphaning delete: is \
                     kube-controller-manager's garbage collector running? Run the command again \
                     once it is gone",
                    ORPHAN_WAIT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        println!("deleted StatefulSet {ns}/{name}; its Pods and PVCs were kept");
    }

    // 4. Each Pod and PVC owned by its EtcdMember and labelled as ours; nothing the container
    // reads changes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for m in &members {
        let member_name = m.name_any();
        let patch = json!({"metadata": {
            "ownerReferences": [owner(m, true)?],
            "labels": labels::member_labels(name, &member_name),
        }});
        let pod = pods.get(&member_name).await?;
        if pod.uid().as_deref()
            != p.members
                .iter()
                .find(|a| a.member.name_any() == member_name)
                .map(|a| a.pod_uid.as_str())
        {
            bail!("Pod {ns}/{member_name} is not the Pod inspected (it was recreated); run the command again");
        }
        pods.patch(&member_name, &pp, &Patch::Merge(&patch))
            .await
            .with_context(|| format!("re-owning Pod {ns}/{member_name}"))?;
        let pvc = labels::pvc_name(&member_name);
        pvcs.patch(&pvc, &pp, &Patch::Merge(&patch))
            .await
            .with_context(|| format!("re-owning PVC {ns}/{pvc}"))?;
        println!("Pod {member_name} and PVC {pvc} now belong to EtcdMember {member_name}");
    }

    // 5. Services. The legacy headless one stays while adopted members use it, owned by them;
    // the aenix ClusterIP `<cluster>` makes way for our headless `<cluster>`.
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let owners: Vec<OwnerReference> = members
        .iter()
        .map(|m| owner(m, false))
        .collect::<anyhow::Result<_>>()?;
    if services
        .get_opt(&p.legacy_headless_service)
        .await?
        .is_some()
    {
        services
            .patch(
                &p.legacy_headless_service,
                &pp,
                &Patch::Merge(&json!({"metadata": {"ownerReferences": owners}})),
            )
            .await
            .with_context(|| format!("re-owning Service {ns}/{}", p.legacy_headless_service))?;
    }
    let ours = headless_service(&cluster)?;
    match services.get_opt(&p.legacy_client_service).await? {
        Some(s) if crate::controller_uid(&s) == cluster.uid() => {}
        Some(_) => {
            services
                .delete(&p.legacy_client_service, &DeleteParams::default())
                .await
                .with_context(|| {
                    format!(
                        "deleting the aenix Service {ns}/{}",
                        p.legacy_client_service
                    )
                })?;
            let deadline = Instant::now() + ORPHAN_WAIT;
            while services.get_opt(&p.legacy_client_service).await?.is_some() {
                if Instant::now() > deadline {
                    bail!(
                        "Service {ns}/{} is still there after its deletion",
                        p.legacy_client_service
                    );
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            services.create(&post, &ours).await?;
            println!("replaced the aenix ClusterIP Service {ns}/{name} by a headless Service");
        }
        None => {
            services.create(&post, &ours).await?;
        }
    }
    let client_svc = client_service(&cluster)?;
    if services.get_opt(&client_svc.name_any()).await?.is_none() {
        services.create(&post, &client_svc).await?;
        println!("created Service {ns}/{}", client_svc.name_any());
    }

    // 6. The aenix EtcdCluster goes; what it still owns (its cluster-state ConfigMap, its PDB)
    // goes with it. Nothing it owned is needed any more: the StatefulSet is gone, the Services
    // were re-owned or replaced.
    let aenix = aenix_api(client, ns);
    if aenix.get_opt(name).await?.is_some() {
        aenix
            .delete(name, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting the aenix EtcdCluster {ns}/{name}"))?;
        println!("deleted the aenix EtcdCluster {ns}/{name}");
    }
    Ok(())
}

/// The Pod's etcd container runs with `--peer-auto-tls` (the aenix operator's default when
/// `spec.security.tls.peerSecret` is unset).
fn runs_peer_auto_tls(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter(|c| c.name == "etcd")
        .flat_map(|c| c.command.iter().flatten().chain(c.args.iter().flatten()))
        .any(|a| a == "--peer-auto-tls" || a == "--peer-auto-tls=true")
}
