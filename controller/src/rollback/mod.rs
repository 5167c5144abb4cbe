//! `etcd-operator prepare-rollback`: prepares clusters this operator ran for the reference
//! operator (docs/migration.md, "Rolling back to the reference operator"). It reads each cluster
//! and what belongs to it, [`plan::build`] decides (pure), a dry run prints the plan, and
//! [`apply`] writes it as merge patches guarded by the resourceVersion read. Run with the user's
//! own credentials while our controller is stopped; a second run changes nothing.

pub mod plan;

use anyhow::{bail, Context as _};
use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use plan::{Facts, Kind, LeaseFacts, Plan};

const FIELD_MANAGER: &str = "etcd-operator-prepare-rollback";

/// The chart's Lease with the release `etcd-operator` in `etcd-operator-system`
/// (docs/installation.md).
pub const DEFAULT_LEASE: &str = "etcd-operator-system/etcd-operator-leader";

/// What the command was asked.
#[derive(Clone, Debug)]
pub struct Options {
    /// One cluster, or every cluster of the scope.
    pub cluster: Option<String>,
    /// `None`: every namespace.
    pub namespace: Option<String>,
    pub dry_run: bool,
    /// Our controller's leader Lease, `<namespace>/<name>`.
    pub lease: String,
    /// Whether `lease` was given (a Lease named by the user must exist).
    pub lease_given: bool,
}

/// Run the command: print each cluster's plan; unless `dry_run`, apply it.
pub async fn run(client: Client, opts: &Options) -> anyhow::Result<()> {
    let mut refused = false;
    match read_lease(&client, opts).await? {
        Some(lease) => {
            if let Some(r) = plan::controller_running(&lease) {
                println!("refused: {r}");
                refused = true;
            }
        }
        None => println!(
            "note: Lease {} not found, so whether our controller still runs is not checked: make \
             sure it is stopped (name its Lease with --operator-lease <namespace>/<name>; kubectl \
             get lease -A)",
            opts.lease
        ),
    }
    let clusters = list_clusters(&client, opts).await?;
    if clusters.is_empty() {
        println!("No EtcdCluster found: nothing to prepare.");
    }
    let mut plans = Vec::new();
    for cluster in clusters {
        let ns = cluster.namespace().unwrap_or_default();
        let name = cluster.name_any();
        let facts = inspect(&client, cluster).await?;
        let plan = plan::build(&facts);
        print!("{}", plan::render(&format!("{ns}/{name}"), &plan));
        refused |= !plan.refusals.is_empty();
        plans.push((ns, plan));
    }
    if refused {
        bail!("refused (see above): nothing was changed");
    }
    let total: usize = plans.iter().map(|(_, p)| p.changes.len()).sum();
    if opts.dry_run {
        println!("\nDry run: nothing was changed ({total} object(s) would be).");
        return Ok(());
    }
    for (ns, plan) in &plans {
        apply(&client, ns, plan).await?;
    }
    println!(
        "\nPrepared: {total} object(s) changed. Next: install the reference operator (its CRDs \
         first) and scale it up; run this again to check, it changes nothing now."
    );
    Ok(())
}

async fn read_lease(client: &Client, opts: &Options) -> anyhow::Result<Option<LeaseFacts>> {
    let Some((ns, name)) = opts.lease.split_once('/') else {
        bail!(
            "--operator-lease {}: expected <namespace>/<name>, e.g. {DEFAULT_LEASE}",
            opts.lease
        );
    };
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| {
            format!(
                "reading our controller's leader Lease {ns}/{name} (your credentials need get on \
                 leases.coordination.k8s.io there)"
            )
        })?;
    let Some(lease) = lease else {
        if opts.lease_given {
            bail!(
                "Lease {ns}/{name} not found: name our controller's leader Lease (kubectl get \
                 lease -A; the chart's is <release>-leader in the release's namespace)"
            );
        }
        return Ok(None);
    };
    let spec = lease.spec.unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    Ok(Some(LeaseFacts {
        name: opts.lease.clone(),
        holder: spec.holder_identity,
        renewed_ago: spec.renew_time.map(|t| now.as_second() - t.0.as_second()),
        duration_seconds: spec.lease_duration_seconds,
    }))
}

async fn list_clusters(client: &Client, opts: &Options) -> anyhow::Result<Vec<EtcdCluster>> {
    let api: Api<EtcdCluster> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let scope = opts
        .namespace
        .as_deref()
        .map_or("every namespace".to_string(), |ns| {
            format!("namespace {ns}")
        });
    if let (Some(name), Some(ns)) = (&opts.cluster, &opts.namespace) {
        let cluster = api
            .get_opt(name)
            .await
            .with_context(|| format!("reading EtcdCluster {ns}/{name}"))?
            .with_context(|| {
                format!("no EtcdCluster {ns}/{name}: name an existing one (kubectl get etcdclusters -n {ns})")
            })?;
        return Ok(vec![cluster]);
    }
    let mut clusters = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing the EtcdClusters of {scope}"))?
        .items;
    clusters.sort_by_key(|c| (c.namespace(), c.name_any()));
    Ok(clusters)
}

/// Read what belongs to `cluster`: its members, PVCs and Pods by the cluster label.
pub async fn inspect(client: &Client, cluster: EtcdCluster) -> anyhow::Result<Facts> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let lp = ListParams::default().labels(&labels::cluster_selector(&name));
    let members = Api::<EtcdMember>::namespaced(client.clone(), &ns)
        .list(&lp)
        .await
        .with_context(|| format!("listing the EtcdMembers of {ns}/{name}"))?
        .items;
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
        .list(&lp)
        .await
        .with_context(|| format!("listing the PVCs of {ns}/{name}"))?
        .items;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&lp)
        .await
        .with_context(|| format!("listing the Pods of {ns}/{name}"))?
        .items;
    Ok(Facts {
        cluster,
        members,
        claims,
        pods,
    })
}

/// Write `plan`'s changes in `ns`, in the plan's order (a cluster's status after its object).
pub async fn apply(client: &Client, ns: &str, plan: &Plan) -> anyhow::Result<()> {
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    for change in &plan.changes {
        let patch = Patch::Merge(&change.patch);
        let name = change.name.as_str();
        let result = match change.kind {
            Kind::EtcdCluster => Api::<EtcdCluster>::namespaced(client.clone(), ns)
                .patch(name, &pp, &patch)
                .await
                .map(drop),
            Kind::EtcdClusterStatus => Api::<EtcdCluster>::namespaced(client.clone(), ns)
                .patch_status(name, &pp, &patch)
                .await
                .map(drop),
            Kind::EtcdMember => Api::<EtcdMember>::namespaced(client.clone(), ns)
                .patch(name, &pp, &patch)
                .await
                .map(drop),
            Kind::PersistentVolumeClaim => {
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
                    .patch(name, &pp, &patch)
                    .await
                    .map(drop)
            }
            Kind::Pod => Api::<Pod>::namespaced(client.clone(), ns)
                .patch(name, &pp, &patch)
                .await
                .map(drop),
        };
        if let Err(e) = result {
            let object = format!("{} {ns}/{name}", change.kind.as_str());
            return Err(match &e {
                kube::Error::Api(s) if s.code == 409 => anyhow::Error::new(e).context(format!(
                    "{object} changed while it was being prepared (is our controller, or \
                     another writer, still running?): run the command again"
                )),
                kube::Error::Api(s) if s.code == 403 || s.message.contains("admission") => {
                    anyhow::Error::new(e).context(format!(
                        "writing {object} was refused: your credentials need patch on it; an \
                         admission refusal names our webhook or member deletion protection, \
                         still installed (uninstall our chart first: helm uninstall keeps the \
                         CRDs)"
                    ))
                }
                _ => anyhow::Error::new(e).context(format!("writing {object}")),
            });
        }
        for what in &change.what {
            println!("changed {} {ns}/{name}: {what}", change.kind.as_str());
        }
    }
    Ok(())
}
