//! The EtcdCluster reconciler's I/O shell: observe (fresh lists of members and Pods, etcd's member
//! list through voters), call the planner, perform its one action, keep the Services and PDB in
//! shape, and write status only when it changed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::conditions::{cluster as ctype, reason};
use api::labels;
use api::v1alpha2::{
    EtcdCluster, EtcdClusterStatus, EtcdMember, EtcdMemberSpec, EtcdMemberStatus, MemberTls,
    ObservedSpec, RestoreSource, TlsSecrets,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::plan::{
    self, Action, AuthProblem, DataHome, DeleteReason, EtcdView, MemberView, Observed, Phase, Plan,
};
use super::{alarms, status, volumes};
use crate::auth::{self, Credentials};
use crate::builders::{pdb, pod::INITIAL_CLUSTER_STATE_ANNOTATION, pod::STATE_EXISTING, service};
use crate::context::{Context, FIELD_MANAGER};
use crate::etcd::{format_id, AuthRefusal, Etcd, EtcdError};
use crate::naming;
use crate::pods::pod_view;
use crate::tls::ClientTls;
use crate::Error;

/// How often a formed cluster's membership and health are re-checked: etcd can change without a
/// Kubernetes event (a member falls out of quorum, a learner catches up).
pub const HEALTH_RECHECK: Duration = Duration::from_secs(30);

pub async fn reconcile(cluster: Arc<EtcdCluster>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let started = Instant::now();
    let result = match fresh_cluster(&cluster, &ctx).await {
        Ok(Some(fresh)) => reconcile_inner(&fresh, &ctx).await,
        Ok(None) => {
            if let (Some(ns), Some(uid)) = (cluster.namespace(), cluster.uid()) {
                ctx.forget_etcd(&format!("{ns}/{}/{uid}", cluster.name_any()));
                ctx.metrics.forget_cluster(&ns, &cluster.name_any());
            }
            Ok(Requeue::await_change())
        }
        Err(e) => Err(e),
    };
    ctx.metrics
        .observe_reconcile("etcdcluster", started.elapsed());
    if let Err(e) = &result {
        ctx.metrics.count_error("etcdcluster", e.metric_label());
        if let Error::Conflict(why) = e {
            // Only a person can resolve it (an object in the way); say so where they look.
            ctx.event(
                cluster.as_ref(),
                true,
                "OwnershipConflict",
                "Reconcile",
                why.clone(),
            )
            .await;
        }
    }
    result
}

/// The cluster as the API has it now, not as the watch cache last saw it: the cache can lag
/// behind this operator's own status writes, and planning from a stale `status.observed` acts on
/// an old target (it removed the member the previous reconcile had just added for the new one).
async fn fresh_cluster(cluster: &EtcdCluster, ctx: &Context) -> Result<Option<EtcdCluster>, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    Ok(api.get_opt(&cluster.name_any()).await?)
}

pub fn error_policy(_cluster: Arc<EtcdCluster>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    if error.is_stale_write() {
        // Someone wrote the EtcdCluster since this reconcile read it: plan again from a fresh
        // read rather than overwrite their change.
        tracing::debug!(%error, "EtcdCluster changed during the reconcile; retrying");
        return Requeue::requeue(Duration::from_millis(200));
    }
    tracing::warn!(%error, "EtcdCluster reconcile failed");
    Requeue::requeue(Duration::from_secs(5))
}

/// Members that belong to this incarnation of the cluster (a recreated cluster of the same name
/// must not adopt members of the previous one that are still being garbage-collected).
fn owned_by(obj: &impl Resource, owner_uid: &str) -> bool {
    crate::controller_uid(obj).as_deref() == Some(owner_uid)
}

/// The planner's view of a member: its CR, its own Pod (by name and owner, not by label: a
/// relabelled Pod is still the member's), and whether the PVC it had is gone.
fn member_view(
    m: &EtcdMember,
    pods: &BTreeMap<String, Pod>,
    pvcs: &BTreeMap<String, PersistentVolumeClaim>,
) -> MemberView {
    let name = m.name_any();
    let status = m.status.clone().unwrap_or_default();
    let uid = m.uid().unwrap_or_default();
    let pod = pods.get(&name).filter(|p| owned_by(*p, &uid));
    let pvc_gone = status
        .pvc_name
        .as_ref()
        .is_some_and(|claim| !pvcs.get(claim).is_some_and(|c| owned_by(c, &uid)));
    MemberView {
        created: m
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
        deleting: m.metadata.deletion_timestamp.is_some(),
        bootstrap: m.spec.bootstrap,
        dormant: m.spec.dormant,
        pending: m.spec.initial_cluster.is_empty(),
        memory: m.spec.storage.is_memory(),
        voter: status.is_voter,
        version: m.spec.version.clone(),
        recorded_pod_uid: status.pod_uid.clone(),
        service: m
            .annotations()
            .contains_key(api::labels::HEADLESS_SERVICE_ANNOTATION)
            .then(|| naming::member_service(m)),
        pod: pod.map(pod_view),
        data_lost: !m.spec.storage.is_memory() && pvc_gone,
        trust_bundle: m
            .annotations()
            .get(api::labels::TRUST_BUNDLE_ANNOTATION)
            .cloned(),
        trusted_cas: m
            .annotations()
            .get(api::labels::TRUSTED_CAS_ANNOTATION)
            .cloned(),
        template_hash: crate::template::hash(&m.spec),
        data_home: DataHome::Unknown,
        image_repository: m
            .annotations()
            .get(api::labels::IMAGE_REPOSITORY_ANNOTATION)
            .cloned(),
        name,
    }
}

/// Where the data of each member whose Pod cannot run lives (see [`DataHome`]): only those,
/// so a healthy cluster costs no Node or PV read. A member that serves, waits to be added, is
/// dormant or being deleted keeps [`DataHome::Unknown`].
async fn look_up_data_homes(
    client: &kube::Client,
    members: &[EtcdMember],
    views: &mut [MemberView],
    pods: &BTreeMap<String, Pod>,
    pvcs: &BTreeMap<String, PersistentVolumeClaim>,
) {
    for (m, v) in members.iter().zip(views.iter_mut()) {
        let cannot_run = v
            .pod
            .as_ref()
            .is_some_and(|p| !p.ready && (p.unschedulable.is_some() || p.terminating));
        if !cannot_run || v.deleting || v.pending || v.dormant {
            continue;
        }
        let uid = m.uid().unwrap_or_default();
        let pod = pods.get(&v.name).filter(|p| owned_by(*p, &uid));
        let pvc = m
            .status
            .as_ref()
            .and_then(|s| s.pvc_name.as_ref())
            .and_then(|claim| pvcs.get(claim))
            .filter(|c| owned_by(*c, &uid));
        v.data_home = super::data_home::look_up(client, m, pod, pvc).await;
    }
}

/// Client URLs of members that can answer membership calls: voters (never learners) whose Pod is
/// Ready; before the cluster has formed, the seed.
fn voter_endpoints(
    cluster: &EtcdCluster,
    members: &[EtcdMember],
    views: &[MemberView],
    formed: bool,
) -> Vec<String> {
    let ns = cluster.namespace().unwrap_or_default();
    let client_tls = cluster.spec.client_tls();
    members
        .iter()
        .zip(views)
        .filter(|(m, v)| {
            let ready = v.pod.as_ref().is_some_and(|p| p.ready) && !v.deleting;
            let voter = m.status.as_ref().is_some_and(|s| s.is_voter);
            ready && (voter || (!formed && m.spec.bootstrap))
        })
        .map(|(m, _)| {
            naming::client_url(&m.name_any(), &naming::member_service(m), &ns, client_tls)
        })
        .collect()
}

/// How long a reconcile tries to read the alarms from voters whose Pods are not Ready.
const UNREADY_ALARM_READ: Duration = Duration::from_secs(2);

/// Client URLs of voters whose Pod runs but is not Ready (etcd fails its /health while an
/// alarm is raised): where the alarms can still be read.
fn unready_voter_endpoints(
    cluster: &EtcdCluster,
    members: &[EtcdMember],
    views: &[MemberView],
) -> Vec<String> {
    let ns = cluster.namespace().unwrap_or_default();
    members
        .iter()
        .zip(views)
        .filter(|(m, v)| {
            v.pod.as_ref().is_some_and(|p| !p.ready)
                && !v.deleting
                && m.status.as_ref().is_some_and(|s| s.is_voter)
        })
        .map(|(m, _)| {
            naming::client_url(
                &m.name_any(),
                &naming::member_service(m),
                &ns,
                cluster.spec.client_tls(),
            )
        })
        .collect()
}

async fn reconcile_inner(cluster: &EtcdCluster, ctx: &Context) -> Result<Requeue, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        // Owner references garbage-collect everything; member finalizers see the deletion.
        return Ok(Requeue::await_change());
    }
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    let uid = cluster.uid().ok_or(Error::NoUid)?;
    let client = ctx.client.clone();
    let members_api: Api<EtcdMember> = Api::namespaced(client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = ListParams::default().labels(&labels::cluster_selector(&name));

    // Fresh lists, not caches: a member created by the previous reconcile must be seen, or a
    // lagging cache would make this one create a second.
    let members: Vec<EtcdMember> = members_api
        .list(&selector)
        .await?
        .items
        .into_iter()
        .filter(|m| owned_by(m, &uid))
        .collect();
    if needs_peer_auto_tls_restored(cluster, &members) {
        return restore_peer_auto_tls(cluster, ctx).await;
    }
    // Members that should have a Pod: added to etcd and not dormant.
    let running = members
        .iter()
        .filter(|m| !m.spec.dormant && !m.spec.initial_cluster.is_empty())
        .map(|m| m.name_any());
    let pods = by_name(&pods_api, &selector, running).await?;
    let pvcs_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let claims = members
        .iter()
        .filter_map(|m| m.status.as_ref().and_then(|s| s.pvc_name.clone()));
    let pvcs = by_name(&pvcs_api, &selector, claims).await?;
    let mut views: Vec<MemberView> = members
        .iter()
        .map(|m| member_view(m, &pods, &pvcs))
        .collect();
    look_up_data_homes(&client, &members, &mut views, &pods, &pvcs).await;

    ensure_services(cluster, ctx).await?;

    let formed = cluster
        .status
        .as_ref()
        .is_some_and(|s| s.cluster_id.is_some());
    let mut endpoints = voter_endpoints(cluster, &members, &views, formed);
    if endpoints.is_empty() && formed {
        // No voter's Pod is Ready (a readiness probe can fail while etcd serves): dial the
        // voters whose Pods run, which may well answer.
        endpoints = unready_voter_endpoints(cluster, &members, &views);
    }
    let key = format!("{ns}/{name}/{uid}");
    // cert-manager TLS: without cert-manager's API nothing is created (no Certificate, no
    // seed); with it, the Certificates are kept in shape before their Secrets are read.
    let wants_cert_manager = TlsSecrets::of(&name, cluster.spec.tls.as_ref())
        .cert_manager()
        .next()
        .is_some();
    let cert_manager_missing = wants_cert_manager && !ctx.cert_manager.installed(&client).await?;
    if wants_cert_manager && !cert_manager_missing {
        crate::cert_manager::ensure_certificates(&client, cluster, &ctx.config.cluster_domain)
            .await?;
    }
    // The Secrets are read on every reconcile: a renewed one (new resourceVersion) rebuilds the
    // cached client, a missing or broken one holds the cluster with a condition naming it.
    // Each certificate is checked against the names members are dialed by, so a wrong SAN or a
    // CA that does not match is a condition naming the Secret, not a failing handshake.
    let hosts: Vec<String> = members
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .map(|m| naming::member_host(&m.name_any(), &naming::member_service(m), &ns))
        .collect();
    let (loaded_tls, tls_secret_problem, waiting_for_certificate) = if cert_manager_missing {
        (Default::default(), None, false)
    } else {
        match crate::tls::load_checked(&client, &ns, &name, cluster.spec.tls.as_ref(), &hosts).await
        {
            Ok(loaded) => (loaded, None, false),
            Err(e) if e.is_user_fixable() => (
                Default::default(),
                Some(e.to_string()),
                e.is_waiting_for_certificate(),
            ),
            Err(e) => return Err(e.into()),
        }
    };
    let crate::tls::Loaded {
        client: client_tls,
        trust_bundle,
        ca_trust,
    } = loaded_tls;
    // What a member started now trusts: recorded next to the fingerprint, so that a later CA
    // change is judged against the CAs each member loaded (see cluster::ca_set).
    let trusted_cas = ca_trust.as_ref().map(|t| t.bundles.render());
    // Root auth: the user's password is read on every reconcile too, and used to log in once
    // status.authEnabled says etcd has auth on.
    let auth_wanted = auth::wanted(cluster.spec.auth.as_ref());
    let auth_on = auth::latched(cluster);
    let mut auth_problem = None;
    let creds = if auth_wanted {
        match auth::load(&client, &ns, cluster.spec.auth.as_ref()).await {
            Ok(creds) => creds,
            Err(e) if e.is_user_fixable() => {
                auth_problem = Some(AuthProblem {
                    reason: reason::AUTH_REQUIRED_NOT_CONFIGURED,
                    message: e.to_string(),
                });
                None
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    let dial_creds = creds.as_ref().filter(|_| auth_on);
    let mut etcd = None;
    let etcd_view = if endpoints.is_empty()
        || tls_secret_problem.is_some()
        || (auth_on && auth_wanted && creds.is_none())
    {
        EtcdView::NotAsked
    } else {
        match list_members(ctx, &key, &endpoints, client_tls.as_ref(), dial_creds).await {
            Ok((client, view)) => {
                if let Some(creds) = dial_creds {
                    record_working_password(cluster, ctx, &key, creds).await?;
                }
                etcd = Some(client);
                view
            }
            Err(e) => {
                match (e.auth_refusal(), dial_creds) {
                    (Some(AuthRefusal::Rejected), Some(creds)) => {
                        if rotate_root_password(
                            cluster,
                            ctx,
                            &endpoints,
                            client_tls.as_ref(),
                            creds,
                        )
                        .await?
                        {
                            return Ok(Requeue::requeue(Duration::from_millis(200)));
                        }
                        auth_problem =
                            Some(credentials_rejected(cluster, &ns, &ctx.config.auth_record));
                    }
                    // etcd 3.6 guards MemberList too: the same answers as the probe below.
                    (Some(AuthRefusal::Required), None) if !auth_wanted => {
                        auth_problem = Some(auth_required_not_configured());
                    }
                    (Some(AuthRefusal::Required), None) if creds.is_some() => {
                        return latch_auth(cluster, ctx, &key, true).await;
                    }
                    (Some(AuthRefusal::NotEnabled), Some(_)) => {
                        // Auth was turned off behind the operator's back: dial without a user
                        // again, and turn it back on once the cluster has converged.
                        tracing::warn!(cluster = %name, "etcd has authentication off although status.authEnabled is true; enabling it again");
                        return latch_auth(cluster, ctx, &key, false).await;
                    }
                    _ => {}
                }
                EtcdView::Unreachable(e.stable_message())
            }
        }
    };
    // Without a login: does etcd demand one? Yes without spec.auth is a cluster the operator
    // cannot change (restored from an auth-enabled snapshot, or auth turned on by hand); yes
    // with spec.auth means auth is on already (the same restore, or a crash right after
    // AuthEnable): log in from now on.
    if let (Some(client), None, true) = (etcd.as_mut(), dial_creds, formed) {
        match client.anonymous_reads_refused().await {
            Ok(true) if !auth_wanted => auth_problem = Some(auth_required_not_configured()),
            Ok(true) if creds.is_some() => return latch_auth(cluster, ctx, &key, true).await,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(cluster = %name, error = %e, "could not check whether etcd requires authentication")
            }
        }
    }

    // The leader is asked only when members may be restarted (the leader goes last, after
    // MoveLeader): a new CA bundle, or members whose template differs from the spec's or the
    // latched target's.
    let spec_template = crate::template::target_hash(&plan::target_of(cluster));
    let latched_template = cluster
        .status
        .as_ref()
        .and_then(|s| s.observed.as_ref())
        .map(crate::template::target_hash);
    let repository = &ctx.config.etcd_image_repository;
    let may_roll = views.iter().any(|v| {
        trust_bundle
            .as_ref()
            .is_some_and(|want| v.trust_bundle.as_ref().is_some_and(|t| t != want))
            || v.image_repository.as_ref().is_some_and(|r| r != repository)
            || v.template_hash != spec_template
            || latched_template
                .as_ref()
                .is_some_and(|t| &v.template_hash != t)
    });
    let leader = match etcd.as_mut() {
        Some(client) if may_roll => match client.leader().await {
            Ok(id) => id,
            Err(e) => {
                tracing::info!(cluster = %name, error = %e, "could not ask etcd for its leader");
                None
            }
        },
        _ => None,
    };

    // A seed whose restore init container runs now: the bootstrap's deadline waits for it.
    let restoring = (!formed)
        .then(|| {
            members
                .iter()
                .filter(|m| m.spec.bootstrap && m.spec.restore.is_some())
                .find(|m| {
                    pods.get(&m.name_any())
                        .is_some_and(crate::pods::restore_running)
                })
        })
        .flatten()
        .map(|_| restore_source(cluster));
    let now = Timestamp::now();
    let mut plan = plan::plan(&Observed {
        cluster,
        members: views.clone(),
        etcd: etcd_view.clone(),
        now,
        cert_manager_missing,
        tls_secret_problem,
        waiting_for_certificate,
        auth_problem,
        trust_bundle: trust_bundle.clone(),
        ca_trust: ca_trust.clone(),
        leader,
        image_repository: Some(repository.clone()),
        replace_broken_after: replace_broken_after(cluster, ctx),
        restoring,
    });
    if !formed {
        // A seed restoring a snapshot whose restore init container failed: its message goes on
        // the cluster's conditions (the init container is retried by the kubelet meanwhile).
        plan.facts.restore_failure = members
            .iter()
            .filter(|m| m.spec.bootstrap && m.spec.restore.is_some())
            .find_map(|m| {
                pods.get(&m.name_any())
                    .and_then(crate::pods::restore_failure)
            });
        if plan.facts.restore_failure.is_none() {
            plan.facts.restore_failure = missing_restore_claim(cluster, ctx, &ns).await?;
        }
    }
    tracing::debug!(cluster = %name, namespace = %ns, action = ?plan.action, phase = ?plan.phase, "planned");

    let mut requeue = next_check(&plan, now);
    let mut latched = None;

    // Persist a newly locked target before acting on it: if this action fails or the operator
    // dies half-way, the next reconcile must resume the step towards the same target, not keep
    // the old one and undo the step (a member created for 5 replicas removed again as surplus).
    let status_api: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    let mut stored = cluster.clone();
    if plan.locked_because.is_some() && !matches!(plan.action, Action::None | Action::Wait(_)) {
        let locked = status::render(cluster, &plan, None, now);
        stored = write_status(&status_api, &stored, &locked).await?;
    }

    match &plan.action {
        Action::CreateSeed => {
            tracing::info!(cluster = %name, "bootstrapping single-node cluster");
            let seed = create_member(
                cluster,
                ctx,
                &plan.observed,
                true,
                trust_bundle.as_deref(),
                trusted_cas.as_deref(),
            )
            .await?;
            let seed_name = seed.name_any();
            let url = naming::peer_url(&seed_name, &name, &ns, cluster.peer_https());
            set_initial_cluster(&members_api, &seed_name, &format!("{seed_name}={url}")).await?;
            ctx.event(
                cluster,
                false,
                "Bootstrapping",
                "CreateSeed",
                format!("created seed member {seed_name}"),
            )
            .await;
        }
        Action::CreateMember => {
            let member = create_member(
                cluster,
                ctx,
                &plan.observed,
                false,
                trust_bundle.as_deref(),
                trusted_cas.as_deref(),
            )
            .await?;
            let member_name = member.name_any();
            let url = naming::peer_url(&member_name, &name, &ns, cluster.peer_https());
            // Continue the same step at once; each part is recoverable if we crash in between.
            if let (
                Some(etcd),
                EtcdView::Members {
                    members: etcd_members,
                    ..
                },
            ) = (etcd.as_mut(), &etcd_view)
            {
                if let Err(e) = etcd.member_add_as_learner(&url).await {
                    if !e.is_reconfig_too_soon() {
                        return Err(e.into());
                    }
                    // The member stays pending; the next reconcile completes the step.
                    tracing::info!(cluster = %name, member = %member_name, "etcd accepts the next member once every voter has been connected for 5 s; retrying in 1 s");
                    return Ok(Requeue::requeue(Duration::from_secs(1)));
                }
                tracing::info!(cluster = %name, member = %member_name, "added member as learner");
                let initial = plan::initial_cluster(etcd_members, &member_name, &url);
                set_initial_cluster(&members_api, &member_name, &initial).await?;
                ctx.event(
                    cluster,
                    false,
                    "MemberAdded",
                    "MemberAddAsLearner",
                    format!("added {member_name} as a learner"),
                )
                .await;
            }
        }
        Action::CompletePending {
            member,
            peer_url,
            already_added,
            initial_cluster_after_add,
        } => {
            tracing::info!(cluster = %name, member = %member, "completing pending scale-up member before further action");
            if !already_added {
                let Some(etcd) = etcd.as_mut() else {
                    return Err(Error::EtcdUnavailable);
                };
                if let Err(e) = etcd.member_add_as_learner(peer_url).await {
                    if !e.is_reconfig_too_soon() {
                        return Err(e.into());
                    }
                    tracing::info!(cluster = %name, member = %member, "etcd accepts the next member once every voter has been connected for 5 s; retrying in 1 s");
                    return Ok(Requeue::requeue(Duration::from_secs(1)));
                }
                tracing::info!(cluster = %name, member = %member, "added member as learner");
                ctx.event(
                    cluster,
                    false,
                    "MemberAdded",
                    "MemberAddAsLearner",
                    format!("added {member} as a learner"),
                )
                .await;
            }
            set_initial_cluster(&members_api, member, initial_cluster_after_add).await?;
        }
        Action::LatchClusterId {
            cluster_id,
            seed,
            member_id,
        } => {
            latched = Some(format_id(*cluster_id));
            patch_member_status(
                &members_api,
                seed,
                json!({"memberID": format_id(*member_id), "isVoter": true}),
            )
            .await?;
            // From now on no Pod may bootstrap a new cluster, even the seed after a data loss.
            let patch = json!({"metadata": {"annotations": {INITIAL_CLUSTER_STATE_ANNOTATION: STATE_EXISTING}}});
            if let Err(e) = pods_api
                .patch(seed, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(error = %e, "could not mark the seed Pod as existing; the member controller will retry");
            }
            ctx.event(
                cluster,
                false,
                "ClusterDiscovered",
                "LatchClusterID",
                format!("cluster formed with ID {}", format_id(*cluster_id)),
            )
            .await;
            requeue = Requeue::requeue(Duration::from_millis(200));
        }
        Action::Promote { member, member_id } => {
            let Some(etcd) = etcd.as_mut() else {
                return Err(Error::EtcdUnavailable);
            };
            match etcd.member_promote(*member_id).await {
                Ok(()) => {
                    tracing::info!(cluster = %name, member = %member, "promoted learner");
                    ctx.event(
                        cluster,
                        false,
                        "MemberPromoted",
                        "MemberPromote",
                        format!("promoted {member} to voter"),
                    )
                    .await;
                    requeue = Requeue::requeue(Duration::from_millis(200));
                }
                Err(e) if e.is_learner_not_ready() => {
                    tracing::info!(cluster = %name, member = %member, "learner not yet promotable; will retry");
                    requeue = Requeue::requeue(Duration::from_secs(1));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Action::DeleteMember { member, why } => {
            let (reason, note) = match why {
                DeleteReason::ScaleDown => ("ScalingDown", format!("removing member {member} (newest first)")),
                DeleteReason::Pause => ("Pausing", format!("removing member {member} on the way to a pause")),
                DeleteReason::MemoryPodLost => ("ReplacingMember", format!("member {member} lost its Pod and its tmpfs data; replacing it")),
                DeleteReason::CrashLooping => ("ReplacingMember", format!("member {member} is crash-looping; replacing it while the others keep quorum")),
                DeleteReason::DataLost => ("ReplacingMember", format!("member {member} lost its PVC and its data; removing it from etcd and replacing it, never restarting it on an empty volume under its old member ID")),
                DeleteReason::ReplaceAdopted => ("ReplacingAdoptedMember", format!("replacing member {member}, adopted from the aenix operator, by a native one as {} asks", labels::REPLACE_ADOPTED_ANNOTATION)),
                DeleteReason::Rollout => ("RollingRestart", format!("replacing Memory member {member} so that its successor runs the new CA bundle or spec (a Memory member cannot restart without losing its data)")),
                DeleteReason::Unschedulable | DeleteReason::NodeNotReady => ("MemberReplaced", replaced_note(member, &views, ctx)),
            };
            tracing::info!(cluster = %name, member = %member, reason, "deleting member");
            members_api.delete(member, &DeleteParams::default()).await?;
            if matches!(
                why,
                DeleteReason::Unschedulable | DeleteReason::NodeNotReady
            ) {
                // On the member too: the cluster's Events of one reason fold into one series,
                // and each replacement is to be found by the member it replaced.
                if let Some(m) = members.iter().find(|m| m.name_any() == *member) {
                    ctx.event(m, true, reason, "DeleteMember", note.clone())
                        .await;
                }
            }
            ctx.event(
                cluster,
                matches!(
                    why,
                    DeleteReason::MemoryPodLost
                        | DeleteReason::CrashLooping
                        | DeleteReason::DataLost
                        | DeleteReason::Unschedulable
                        | DeleteReason::NodeNotReady
                ),
                reason,
                "DeleteMember",
                note,
            )
            .await;
        }
        Action::SetDormant { member, dormant } => {
            let patch = json!({"spec": {"dormant": dormant}});
            members_api
                .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            if *dormant {
                tracing::info!(cluster = %name, member = %member, "pausing: member is now dormant");
                ctx.event(
                    cluster,
                    false,
                    "Paused",
                    "SetDormant",
                    format!("member {member} is dormant; its PVC keeps the data"),
                )
                .await;
            } else {
                tracing::info!(cluster = %name, member = %member, "waking dormant member");
                ctx.event(
                    cluster,
                    false,
                    "Resumed",
                    "WakeDormant",
                    format!("waking dormant member {member}"),
                )
                .await;
            }
        }
        Action::RemoveGhost(ghost) => {
            let Some(etcd) = etcd.as_mut() else {
                return Err(Error::EtcdUnavailable);
            };
            let id = format_id(ghost.id);
            match etcd.member_remove(ghost.id).await {
                Ok(()) => {}
                Err(e) if e.is_member_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            tracing::info!(cluster = %name, member_id = %id, peer_url = %ghost.peer_url, "removed a ghost member from etcd");
            ctx.event(
                cluster,
                true,
                "GhostMemberRemoved",
                "MemberRemove",
                format!(
                    "removed etcd member {id} ({}) that no EtcdMember describes",
                    ghost.peer_url
                ),
            )
            .await;
            requeue = Requeue::requeue(Duration::from_millis(200));
        }
        Action::RecordTrustBundle {
            member,
            trust_bundle,
        } => {
            // The CA set goes with the fingerprint; a fingerprint recorded as unknown (a Pod
            // that may run an older bundle) has an unknown set too.
            let cas = if trust_bundle == crate::cluster::ca_set::UNKNOWN {
                Some(crate::cluster::ca_set::UNKNOWN)
            } else {
                trusted_cas.as_deref()
            };
            let mut annotations = vec![(labels::TRUST_BUNDLE_ANNOTATION, trust_bundle.as_str())];
            annotations.extend(cas.map(|c| (labels::TRUSTED_CAS_ANNOTATION, c)));
            record_on_pod_then_member(
                &pods_api,
                &members_api,
                pods.contains_key(member),
                member,
                &annotations,
            )
            .await?;
            tracing::info!(cluster = %name, member = %member, trust_bundle = %trust_bundle, "recorded the CA bundle a member runs with");
            requeue = Requeue::requeue(Duration::from_millis(200));
        }
        Action::RecordImageRepository { member, repository } => {
            let annotation = (labels::IMAGE_REPOSITORY_ANNOTATION, repository.as_str());
            record_on_pod_then_member(
                &pods_api,
                &members_api,
                pods.contains_key(member),
                member,
                &[annotation],
            )
            .await?;
            tracing::info!(cluster = %name, member = %member, repository = %repository, "recorded the etcd image repository a member runs");
            requeue = Requeue::requeue(Duration::from_millis(200));
        }
        Action::RecordTemplateHash {
            member,
            template_hash,
        } => {
            let patch = json!({"metadata": {"annotations": {labels::TEMPLATE_HASH_ANNOTATION: template_hash}}});
            pods_api
                .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            tracing::info!(cluster = %name, member = %member, template_hash = %template_hash, "recorded the template a member's Pod runs");
            requeue = Requeue::requeue(Duration::from_millis(200));
        }
        Action::RollMember {
            member,
            trust_bundle,
            template,
            image_repository,
            last,
        } => {
            // One patch: the member controller sees the new bundle and template together and
            // restarts the Pod once.
            let mut patch = if *template {
                crate::template::member_patch(&plan.observed)
            } else {
                json!({})
            };
            let mut annotations = serde_json::Map::new();
            if let Some(trust) = trust_bundle {
                annotations.insert(labels::TRUST_BUNDLE_ANNOTATION.into(), json!(trust));
                if let Some(cas) = &trusted_cas {
                    annotations.insert(labels::TRUSTED_CAS_ANNOTATION.into(), json!(cas));
                }
            }
            if let Some(repository) = image_repository {
                annotations.insert(
                    labels::IMAGE_REPOSITORY_ANNOTATION.into(),
                    json!(repository),
                );
            }
            if !annotations.is_empty() {
                patch["metadata"] = json!({ "annotations": annotations });
            }
            members_api
                .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let role = if *last {
                "the last; a leader hands leadership over first"
            } else {
                "a follower"
            };
            let mut parts = Vec::new();
            if trust_bundle.is_some() {
                parts.push("the new CA bundle".to_string());
            }
            if *template {
                parts.push(format!("the new spec (version {})", plan.observed.version));
            }
            if let Some(repository) = image_repository {
                parts.push(format!("the etcd image repository {repository}"));
            }
            let what = parts.join(" and ");
            let (done, total) = if *template {
                plan.facts.template_rollout
            } else if trust_bundle.is_some() {
                plan.facts.trust_rollout
            } else {
                plan.facts.image_rollout
            }
            .unwrap_or_default();
            tracing::info!(cluster = %name, member = %member, done, total, "restarting member for {what}");
            ctx.event(
                cluster,
                false,
                "RollingRestart",
                "RestartMember",
                format!(
                    "restarting member {member} ({role}) for {what}; {done} of {total} members \
                     are updated"
                ),
            )
            .await;
        }
        Action::MoveLeader { from, to, to_id } => {
            // MoveLeader is served by the leader only: dial it alone.
            let leader_member = members.iter().find(|m| &m.name_any() == from);
            let Some(leader_member) = leader_member else {
                return Err(Error::EtcdUnavailable);
            };
            let url = naming::client_url(
                from,
                &naming::member_service(leader_member),
                &ns,
                cluster.spec.client_tls(),
            );
            let mut direct = Etcd::connect(
                std::slice::from_ref(&url),
                client_tls.as_ref(),
                dial_creds,
                ctx.metrics.clone(),
            )
            .await?;
            direct.move_leader(*to_id).await?;
            tracing::info!(cluster = %name, from = %from, to = %to, "moved leadership before restarting the leader");
            ctx.event(
                cluster,
                false,
                "LeaderMoved",
                "MoveLeader",
                format!("moved leadership from {from} to {to} before restarting {from}"),
            )
            .await;
            requeue = Requeue::requeue(Duration::from_millis(500));
        }
        Action::Wait(why) => {
            // The runbook's "key signals" are these messages, so they are logged at info.
            tracing::info!(cluster = %name, namespace = %ns, "{why}");
        }
        Action::None => {}
    }

    if let EtcdView::Members {
        members: etcd_members,
        ..
    } = &etcd_view
    {
        sync_member_status(&members_api, cluster, &members, etcd_members).await?;
    }
    let target_size = plan.observed.storage.as_ref().map(|s| s.size.clone());
    if let Some(size) = &target_size {
        grow_member_volumes(cluster, ctx, &members_api, &members, size).await?;
    }
    let voters = match &etcd_view {
        EtcdView::Members { members, .. } => {
            members.iter().filter(|m| !m.is_learner).count() as i32
        }
        _ => members
            .iter()
            .filter(|m| m.status.as_ref().is_some_and(|s| s.is_voter) && !m.spec.dormant)
            .count() as i32,
    };
    if let Some(conflict) = ensure_pdb(cluster, ctx, voters, plan.observed.replicas).await? {
        // Not the operator's to touch; everything else goes on, and the PDB is retried.
        ctx.event(cluster, true, "OwnershipConflict", "Reconcile", conflict)
            .await;
        requeue = Requeue::requeue(Duration::from_secs(5));
    }

    let etcd_counts = etcd_view.members().map(|m| {
        let learners = m.iter().filter(|e| e.is_learner).count() as i64;
        (m.len() as i64 - learners, learners)
    });
    ctx.metrics
        .record_cluster(&ns, &name, i64::from(plan.facts.ready_members), etcd_counts);
    let mut new_status = status::render(cluster, &plan, latched, Timestamp::now());
    if let Some(size) = &target_size {
        volumes::set_volumes_condition(
            &mut new_status.conditions,
            &members,
            size,
            cluster.metadata.generation,
            Timestamp::now(),
        );
    }
    // A raised alarm fails every member's /health, so no Pod is Ready and `etcd` is None:
    // the alarms are then read from the voters' Pods directly.
    // Bounded: Pods that are not Ready because they are down must not slow the reconcile.
    if let Some(client) = etcd.as_mut() {
        show_alarms(cluster, ctx, client, &members, &mut new_status).await;
    } else if formed && !(auth_on && auth_wanted && creds.is_none()) {
        let urls = unready_voter_endpoints(cluster, &members, &views);
        if !urls.is_empty() {
            let read = async {
                let metrics = ctx.metrics.clone();
                if let Ok(mut client) =
                    Etcd::connect(&urls, client_tls.as_ref(), dial_creds, metrics).await
                {
                    show_alarms(cluster, ctx, &mut client, &members, &mut new_status).await;
                }
            };
            if tokio::time::timeout(UNREADY_ALARM_READ, read)
                .await
                .is_err()
            {
                tracing::debug!(cluster = %name, "no unready voter answered the alarm list");
            }
        }
    }
    if auth_wanted && !auth_on && ready_to_enable_auth(&plan) {
        if let (Some(client), Some(creds)) = (etcd.as_mut(), creds.as_ref()) {
            enable_auth(cluster, ctx, client, creds).await?;
            ctx.forget_etcd(&key);
            new_status.auth_enabled = Some(true);
            requeue = Requeue::requeue(Duration::from_millis(200));
        }
    }
    if stored.status.as_ref() != Some(&new_status) {
        write_status(&status_api, &stored, &new_status).await?;
        announce_parking(cluster, ctx, stored.status.as_ref(), &new_status).await;
    }
    Ok(requeue)
}

/// How long a member's Pod may stay unschedulable before it is replaced: the operator's
/// setting, unless the cluster opts out ([`labels::REPLACE_BROKEN_MEMBERS_ANNOTATION`]).
fn replace_broken_after(cluster: &EtcdCluster, ctx: &Context) -> Option<SignedDuration> {
    let opted_out = cluster
        .annotations()
        .get(labels::REPLACE_BROKEN_MEMBERS_ANNOTATION)
        .is_some_and(|v| v == "false");
    let after = ctx
        .config
        .replace_broken_members_after
        .filter(|_| !opted_out)?;
    SignedDuration::try_from(after).ok()
}

/// The `MemberReplaced` Event's message: where the member's data was, why it is out of reach
/// for good, and for how long.
fn replaced_note(member: &str, views: &[MemberView], ctx: &Context) -> String {
    let view = views.iter().find(|v| v.name == member);
    let scheduler = view
        .and_then(|v| v.pod.as_ref())
        .and_then(|p| p.unschedulable.as_ref())
        .map(|(_, m)| m.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "no reason given".to_string());
    let after = ctx
        .config
        .replace_broken_members_after
        .map(|d| humantime::format_duration(d).to_string())
        .unwrap_or_default();
    let why = match view.map(|v| &v.data_home) {
        Some(DataHome::NodeGone { node }) => format!(
            "its Pod could not be scheduled for {after} or more ({scheduler}): its volume is \
             pinned to Node {node}, which no longer exists"
        ),
        Some(DataHome::VolumeGone { volume }) => format!(
            "its Pod could not be scheduled for {after} or more ({scheduler}): its \
             PersistentVolume {volume} no longer exists"
        ),
        Some(DataHome::NodeNotReady { node, since }) => format!(
            "its Pod is stuck Terminating on Node {node}, NotReady since {since} ({after} or \
             more): the machine is gone although its Node object stays"
        ),
        _ => format!("its Pod could not be scheduled for {after} or more ({scheduler})"),
    };
    format!(
        "member {member}'s data is out of reach for good: {why}; removing it from etcd and \
         replacing it with a new member while the others keep quorum (its PVC goes with it). \
         Turn this off with the annotation {}=\"false\" or --replace-broken-members-after=0",
        labels::REPLACE_BROKEN_MEMBERS_ANNOTATION
    )
}

/// Give every PVC member whose `spec.storage.size` is below the latched target the target size;
/// the member controller then expands its PVC online (no restart, so all at once).
async fn grow_member_volumes(
    cluster: &EtcdCluster,
    ctx: &Context,
    members_api: &Api<EtcdMember>,
    members: &[EtcdMember],
    size: &Quantity,
) -> Result<(), Error> {
    let grow = volumes::members_to_grow(members, size);
    if grow.is_empty() {
        return Ok(());
    }
    let patch = json!({"spec": {"storage": {"size": size}}});
    for m in &grow {
        members_api
            .patch(
                &m.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    let names: Vec<String> = grow.iter().map(|m| m.name_any()).collect();
    tracing::info!(cluster = %cluster.name_any(), size = %size.0, members = ?names, "growing member volumes");
    ctx.event(
        cluster,
        false,
        "VolumeExpansion",
        "ExpandVolume",
        format!(
            "spec.storage.size is {}: the PVCs of {} grow online, without restarts",
            size.0,
            names.join(", ")
        ),
    )
    .await;
    Ok(())
}

/// When to look again without a watch event: a formed cluster every [`HEALTH_RECHECK`]; a
/// seed that cannot be reached yet every [`SEED_RECHECK`]; and, whatever else, at the progress
/// deadline, so that it expires on time even when nothing else changes (a seed Pod stuck
/// Pending sends no event).
/// Record what a member's running Pod already runs with (an annotation) on the Pod, then on the
/// member. The Pod first: a crash in between leaves a member without a record, which records
/// again; the other order would leave a Pod the member controller restarts.
async fn record_on_pod_then_member(
    pods_api: &Api<Pod>,
    members_api: &Api<EtcdMember>,
    has_pod: bool,
    member: &str,
    annotations: &[(&str, &str)],
) -> Result<(), Error> {
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let patch = json!({"metadata": {"annotations": annotations}});
    if has_pod {
        pods_api
            .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    members_api
        .patch(member, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn next_check(plan: &Plan, now: Timestamp) -> Requeue {
    let formed = plan.facts.formed;
    let mut after = match plan.phase {
        Phase::Reconciled if formed && plan.observed.replicas > 0 => Some(HEALTH_RECHECK),
        Phase::Progressing if formed => Some(HEALTH_RECHECK),
        Phase::Progressing if plan.observed.replicas > 0 && plan.facts.unsupported.is_empty() => {
            Some(SEED_RECHECK)
        }
        _ => None,
    };
    if plan.facts.tls_secret_problem.is_some() || plan.facts.auth_problem.is_some() {
        // Referenced TLS Secrets are watched (this is the fallback for a missed event); the
        // auth Secret is read, not watched: look again soon for the one being waited on.
        after = Some(TLS_SECRET_RECHECK);
    }
    if plan.facts.cert_manager_missing {
        // Nothing cert-manager does wakes this cluster: ask discovery again now and then, so
        // installing cert-manager is picked up without restarting the operator.
        after = Some(CERT_MANAGER_RECHECK);
    }
    if plan.phase == Phase::Progressing {
        if let Some(deadline) = plan.progress_deadline {
            let left = Duration::try_from(deadline.duration_since(now))
                .unwrap_or_default()
                .saturating_add(Duration::from_millis(100));
            after = Some(after.map_or(left, |a| a.min(left)));
        }
    }
    match after {
        Some(d) => Requeue::requeue(d),
        None => Requeue::await_change(),
    }
}

/// How often a seed that is not reachable yet is dialed again (its Pod's readiness changes wake
/// the reconcile sooner).
pub const SEED_RECHECK: Duration = Duration::from_secs(5);

/// How often a missing or unusable TLS Secret is read again.
pub const TLS_SECRET_RECHECK: Duration = Duration::from_secs(10);

/// How often a cluster held for a missing cert-manager looks for it again.
pub const CERT_MANAGER_RECHECK: Duration = Duration::from_secs(15);

/// The cluster's (cached) etcd client and etcd's member list through it; a client whose call
/// failed is dropped from the cache.
async fn list_members(
    ctx: &Context,
    key: &str,
    endpoints: &[String],
    tls: Option<&ClientTls>,
    creds: Option<&Credentials>,
) -> Result<(Etcd, EtcdView), EtcdError> {
    let mut client = ctx.etcd(key, endpoints, tls, creds).await?;
    match client.member_list().await {
        Ok((cluster_id, members)) => Ok((
            client,
            EtcdView::Members {
                cluster_id,
                members,
            },
        )),
        Err(e) => {
            ctx.forget_etcd(key);
            Err(e)
        }
    }
}

/// etcd's NOSPACE and CORRUPT alarms as the `Alarm` condition, with an Event when one is
/// raised. A failed alarm read leaves the condition as it was.
async fn show_alarms(
    cluster: &EtcdCluster,
    ctx: &Context,
    client: &mut Etcd,
    members: &[EtcdMember],
    new_status: &mut api::v1alpha2::EtcdClusterStatus,
) {
    let alarms = match client.alarms().await {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(cluster = %cluster.name_any(), error = %e, "could not list etcd alarms");
            return;
        }
    };
    let names = members
        .iter()
        .filter_map(|m| {
            let id = m.status.as_ref()?.member_id.as_deref()?;
            Some((crate::etcd::parse_id(id)?, m.name_any()))
        })
        .collect();
    let was = new_status
        .conditions
        .iter()
        .find(|c| c.type_ == alarms::ALARM)
        .map(|c| c.reason.clone());
    alarms::set_alarm_condition(
        &mut new_status.conditions,
        &alarms,
        &names,
        cluster.metadata.generation,
        Timestamp::now(),
    );
    if let Some(c) = new_status
        .conditions
        .iter()
        .find(|c| c.type_ == alarms::ALARM && c.status == "True")
    {
        if was.as_deref() != Some(c.reason.as_str()) {
            ctx.event(cluster, true, "EtcdAlarm", "AlarmList", c.message.clone())
                .await;
        }
    }
}

/// Root auth is turned on once the cluster has reached its target with every member Ready, so
/// membership changes of the bootstrap never need a login and a half-formed cluster is never
/// locked.
fn ready_to_enable_auth(plan: &Plan) -> bool {
    plan.phase == Phase::Reconciled
        && plan.action == Action::None
        && plan.facts.formed
        && plan.observed.replicas > 0
        && plan.facts.ready_members == plan.observed.replicas
        && plan.facts.auth_problem.is_none()
}

/// Provision `root` and turn auth on. The password is recorded before etcd has it, so a crash
/// in between leaves a login the operator knows.
async fn enable_auth(
    cluster: &EtcdCluster,
    ctx: &Context,
    etcd: &mut Etcd,
    creds: &Credentials,
) -> Result<(), Error> {
    auth::write_applied(&ctx.client, &ctx.config.auth_record, cluster, creds, None).await?;
    let enabled = etcd.enable_root_auth(creds).await?;
    let name = cluster.name_any();
    tracing::info!(cluster = %name, already_on = !enabled, "etcd authentication enabled");
    ctx.event(
        cluster,
        false,
        "AuthEnabled",
        "AuthEnable",
        format!(
            "etcd authentication is on: user root with the role root, password from Secret {}",
            auth_secret_name(cluster)
        ),
    )
    .await;
    Ok(())
}

/// Record what etcd's auth state turned out to be (`status.authEnabled`) and plan again with it.
async fn latch_auth(
    cluster: &EtcdCluster,
    ctx: &Context,
    key: &str,
    on: bool,
) -> Result<Requeue, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch_status(
        &cluster.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"authEnabled": on}})),
    )
    .await?;
    ctx.forget_etcd(key);
    Ok(Requeue::requeue(Duration::from_millis(200)))
}

/// The password that just logged in is in the cluster's auth record, so a later rotation can log
/// in with it. Clusters taken over from another operator (auth enabled there) get their record
/// here; a rotation interrupted after etcd changed gets its record completed.
async fn record_working_password(
    cluster: &EtcdCluster,
    ctx: &Context,
    key: &str,
    creds: &Credentials,
) -> Result<(), Error> {
    let fingerprint = creds.fingerprint();
    if ctx.auth_recorded(key, &fingerprint) {
        return Ok(());
    }
    let applied = auth::read_applied(&ctx.client, &ctx.config.auth_record, cluster).await?;
    if applied.current.as_ref() != Some(creds) || applied.previous.is_some() {
        auth::write_applied(&ctx.client, &ctx.config.auth_record, cluster, creds, None).await?;
    }
    ctx.mark_auth_recorded(key, &fingerprint);
    Ok(())
}

/// etcd refused the user's root password: if a password the operator recorded still logs in,
/// move etcd to the user's one (the user rotated it in their Secret). `false` when none does.
async fn rotate_root_password(
    cluster: &EtcdCluster,
    ctx: &Context,
    endpoints: &[String],
    tls: Option<&ClientTls>,
    creds: &Credentials,
) -> Result<bool, Error> {
    let applied = auth::read_applied(&ctx.client, &ctx.config.auth_record, cluster).await?;
    for old in applied.candidates(creds) {
        let mut etcd = match Etcd::connect(endpoints, tls, Some(&old), ctx.metrics.clone()).await {
            Ok(etcd) => etcd,
            Err(e) if e.auth_refusal().is_some() => continue,
            Err(e) => return Err(e.into()),
        };
        // Recorded first: if the change is interrupted, `previous` still logs in next time.
        auth::write_applied(
            &ctx.client,
            &ctx.config.auth_record,
            cluster,
            creds,
            Some(&old),
        )
        .await?;
        etcd.change_root_password(creds).await?;
        auth::write_applied(&ctx.client, &ctx.config.auth_record, cluster, creds, None).await?;
        let name = cluster.name_any();
        tracing::info!(cluster = %name, "rotated the etcd root password to the one in the Secret");
        ctx.event(
            cluster,
            false,
            "RootPasswordRotated",
            "UserChangePassword",
            format!(
                "the root password in Secret {} changed; etcd's root password now matches it",
                auth_secret_name(cluster)
            ),
        )
        .await;
        return Ok(true);
    }
    Ok(false)
}

fn auth_secret_name(cluster: &EtcdCluster) -> String {
    cluster
        .spec
        .auth
        .as_ref()
        .and_then(|a| a.root_credentials_secret_ref.as_ref())
        .map(|r| r.name.clone())
        .unwrap_or_default()
}

fn credentials_rejected(cluster: &EtcdCluster, ns: &str, record: &auth::RecordRef) -> AuthProblem {
    AuthProblem {
        reason: reason::AUTH_CREDENTIALS_REJECTED,
        message: format!(
            "etcd rejected the root password in Secret {ns}/{} (spec.auth.rootCredentialsSecretRef), \
             and no password the operator set before logs in either (it keeps them in Secret {record}, \
             keys {ns}.{}.*); \
             put the root password etcd has into the Secret's password key (for a cluster restored \
             from an auth-enabled snapshot: the root password in effect when the snapshot was taken)",
            auth_secret_name(cluster),
            cluster.name_any(),
        ),
    }
}

fn auth_required_not_configured() -> AuthProblem {
    AuthProblem {
        reason: reason::AUTH_REQUIRED_NOT_CONFIGURED,
        message: "etcd requires authentication but spec.auth is not configured, so the operator \
                  cannot change this cluster's membership. This usually means a snapshot of an \
                  auth-enabled cluster was restored without spec.auth. spec.auth is immutable: \
                  delete and recreate the cluster with spec.auth.enabled and a \
                  rootCredentialsSecretRef holding the snapshot's root password"
            .to_string(),
    }
}

/// A Warning Event the moment a cluster parks at its deadline or refuses a rollout, where
/// `kubectl describe` shows it.
async fn announce_parking(
    cluster: &EtcdCluster,
    ctx: &Context,
    old: Option<&EtcdClusterStatus>,
    new: &EtcdClusterStatus,
) {
    let available = |s: Option<&EtcdClusterStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == ctype::AVAILABLE))
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let Some((why, message)) = available(Some(new)) else {
        return;
    };
    let parked = why == reason::BOOTSTRAP_FAILED || why == reason::DEADLINE_EXCEEDED;
    if parked && available(old).map(|(r, _)| r) != Some(why.clone()) {
        ctx.event(cluster, true, &why, "ProgressDeadline", message)
            .await;
    }
    // A refused rollout: once, when the cluster starts reporting it.
    let progressing = |s: Option<&EtcdClusterStatus>| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == ctype::PROGRESSING))
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    if let Some((why, message)) = progressing(Some(new)) {
        if (why == reason::MEMORY_ROLLOUT_UNSAFE || why == reason::UNSAFE_CA_CHANGE)
            && progressing(old).map(|(r, _)| r) != Some(why.clone())
        {
            ctx.event(cluster, true, &why, "Rollout", message).await;
        }
    }
}

/// Write the cluster's status with optimistic concurrency: the patch carries the
/// `resourceVersion` this reconcile read, so a concurrent write (the runbook's forced deadline,
/// another status edit) makes it fail with a conflict instead of being silently reverted; the
/// reconcile is then retried from a fresh read. Returns the written object.
pub async fn write_status(
    api: &Api<EtcdCluster>,
    read: &EtcdCluster,
    new: &EtcdClusterStatus,
) -> Result<EtcdCluster, Error> {
    let patch = json!({
        "metadata": {"resourceVersion": read.resource_version()},
        "status": status_merge_patch(read.status.as_ref(), new)?,
    });
    Ok(api
        .patch_status(
            &read.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?)
}

/// Objects of the cluster by name: one list by the cluster label, then a GET for each wanted
/// name the list missed (someone removed the label: it is still the member's object).
async fn by_name<K>(
    api: &Api<K>,
    selector: &ListParams,
    wanted: impl Iterator<Item = String>,
) -> Result<BTreeMap<String, K>, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut found: BTreeMap<String, K> = api
        .list(selector)
        .await?
        .items
        .into_iter()
        .map(|o| (o.name_any(), o))
        .collect();
    for name in wanted {
        if let std::collections::btree_map::Entry::Vacant(slot) = found.entry(name) {
            if let Some(o) = api.get_opt(slot.key()).await? {
                slot.insert(o);
            }
        }
    }
    Ok(found)
}

/// A JSON merge patch from `old` to `new`: fields `new` no longer has are sent as `null`, or a
/// merge patch would leave them in place (and the status would never converge).
pub fn status_merge_patch<T: serde::Serialize>(
    old: Option<&T>,
    new: &T,
) -> Result<serde_json::Value, Error> {
    let mut patch = serde_json::to_value(new)?;
    if let Some(old) = old {
        clear_dropped(&serde_json::to_value(old)?, &mut patch);
    }
    Ok(patch)
}

/// Add a `null` to `patch` for every key of `old` it lacks, at every depth where both are
/// objects (RFC 7386 merges nested objects key by key, so a key dropped inside one would stay).
fn clear_dropped(old: &serde_json::Value, patch: &mut serde_json::Value) {
    let (serde_json::Value::Object(old), serde_json::Value::Object(fields)) = (old, patch) else {
        return;
    };
    for (key, old_value) in old {
        match fields.get_mut(key) {
            Some(new_value) => clear_dropped(old_value, new_value),
            None => {
                fields.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
}

/// Create the next EtcdMember from the locked target (`status.observed`), never from the live
/// spec: an edit made while this target is in flight waits for the next target.
async fn create_member(
    cluster: &EtcdCluster,
    ctx: &Context,
    target: &ObservedSpec,
    seed: bool,
    trust_bundle: Option<&str>,
    trusted_cas: Option<&str>,
) -> Result<EtcdMember, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    let owner = cluster.controller_owner_ref(&()).ok_or(Error::NoUid)?;
    let token = cluster
        .status
        .as_ref()
        .and_then(|s| s.cluster_token.clone())
        .unwrap_or_else(|| status::cluster_token(cluster));
    let member = EtcdMember {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: Some(ns.clone()),
            labels: Some(labels::merge_user_metadata(
                labels::cluster_labels(&name),
                target.additional_metadata.as_ref().map(|m| &m.labels),
            )),
            annotations: Some(labels::merge_user_metadata(
                trust_bundle
                    .map(|t| (labels::TRUST_BUNDLE_ANNOTATION.to_string(), t.to_string()))
                    .into_iter()
                    .chain(
                        trusted_cas
                            .map(|c| (labels::TRUSTED_CAS_ANNOTATION.to_string(), c.to_string())),
                    )
                    .chain([(
                        labels::IMAGE_REPOSITORY_ANNOTATION.to_string(),
                        ctx.config.etcd_image_repository.clone(),
                    )])
                    .collect(),
                target.additional_metadata.as_ref().map(|m| &m.annotations),
            ))
            .filter(|a| !a.is_empty()),
            owner_references: Some(vec![owner]),
            finalizers: Some(vec![labels::MEMBER_CLEANUP_FINALIZER.to_string()]),
            ..Default::default()
        },
        spec: EtcdMemberSpec {
            // Only the seed of a cluster that has never bootstrapped restores (seeds are
            // created only then); later members join the live cluster.
            restore: seed
                .then(|| cluster.spec.bootstrap.as_ref()?.restore.clone())
                .flatten(),
            ..plan::member_spec(&name, target, token, seed, member_tls(cluster))
        },
        status: None,
    };
    let api: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    let created = api.create(&PostParams::default(), &member).await?;
    // The component label needs the generated name.
    let member_name = created.name_any();
    let patch = json!({"metadata": {"labels": {labels::APP_COMPONENT: member_name}}});
    api.patch(&member_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(created)
}

/// A member runs peer auto-TLS but the cluster's [`labels::PEER_AUTO_TLS_ANNOTATION`] is gone
/// (removed by hand): without it every peer URL would be computed as `http://`, which etcd does
/// not list, and new members could not join.
/// A restore from a PVC that does not exist leaves the seed Pod unschedulable with nothing on the
/// cluster to say why: name the claim, so the message reads like any other restore failure.
async fn missing_restore_claim(
    cluster: &EtcdCluster,
    ctx: &Context,
    ns: &str,
) -> Result<Option<String>, Error> {
    let Some(pvc) = cluster
        .spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.restore.as_ref())
        .and_then(|r| r.source.pvc.as_ref())
    else {
        return Ok(None);
    };
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    Ok(claims.get_opt(&pvc.claim_name).await?.is_none().then(|| {
        missing_claim_message(
            &pvc.claim_name,
            ns,
            pvc.sub_path.as_deref().unwrap_or_default(),
        )
    }))
}

/// `spec.bootstrap.restore.source` as a location: `s3://bucket/key` or `pvc://claim/path`.
fn restore_source(cluster: &EtcdCluster) -> String {
    let source = cluster
        .spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.restore.as_ref())
        .map(|r| &r.source);
    match source {
        Some(RestoreSource { s3: Some(s3), .. }) => format!(
            "s3://{}/{}",
            s3.bucket,
            s3.key.as_deref().unwrap_or_default()
        ),
        Some(RestoreSource { pvc: Some(pvc), .. }) => format!(
            "pvc://{}/{}",
            pvc.claim_name,
            pvc.sub_path.as_deref().unwrap_or_default()
        ),
        _ => "spec.bootstrap.restore.source".to_string(),
    }
}

fn missing_claim_message(claim: &str, ns: &str, sub_path: &str) -> String {
    format!(
        "spec.bootstrap.restore.source.pvc.claimName: PersistentVolumeClaim {claim:?} does not \
         exist in namespace {ns:?}; create it holding the snapshot at subPath {sub_path:?} (the \
         seed waits for it), or recreate the cluster naming a claim that exists"
    )
}

fn needs_peer_auto_tls_restored(cluster: &EtcdCluster, members: &[EtcdMember]) -> bool {
    !cluster.peer_https()
        && members
            .iter()
            .any(|m| m.spec.tls.as_ref().is_some_and(|t| t.peer_auto_tls))
}

async fn restore_peer_auto_tls(cluster: &EtcdCluster, ctx: &Context) -> Result<Requeue, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({"metadata": {"annotations": {labels::PEER_AUTO_TLS_ANNOTATION: "true"}}});
    api.patch(
        &cluster.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    ctx.event(
        cluster,
        true,
        "PeerAutoTLSRestored",
        "Annotate",
        format!(
            "members run etcd's --peer-auto-tls: the annotation {}=true was set back (etcd cannot \
             mix TLS and plaintext peers; see docs/migration.md)",
            labels::PEER_AUTO_TLS_ANNOTATION
        ),
    )
    .await;
    Ok(Requeue::requeue(Duration::from_millis(200)))
}

/// The member view of the cluster's TLS; on a peer auto-TLS cluster (adopted from the aenix
/// operator) every new member runs `--peer-auto-tls` too, as etcd cannot mix TLS and plaintext
/// peers.
fn member_tls(cluster: &EtcdCluster) -> Option<MemberTls> {
    let tls = MemberTls::from_cluster(&cluster.name_any(), cluster.spec.tls.as_ref());
    if !cluster.peer_auto_tls() {
        return tls;
    }
    Some(MemberTls {
        peer_auto_tls: true,
        ..tls.unwrap_or_default()
    })
}

async fn set_initial_cluster(
    api: &Api<EtcdMember>,
    member: &str,
    initial_cluster: &str,
) -> Result<(), Error> {
    let patch = json!({"spec": {"initialCluster": initial_cluster}});
    api.patch(member, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn patch_member_status(
    api: &Api<EtcdMember>,
    member: &str,
    fields: serde_json::Value,
) -> Result<(), Error> {
    api.patch_status(
        member,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": fields})),
    )
    .await?;
    Ok(())
}

/// Record each member's etcd ID and voter flag (matched by peer URL) when they changed.
async fn sync_member_status(
    api: &Api<EtcdMember>,
    cluster: &EtcdCluster,
    members: &[EtcdMember],
    etcd_members: &[plan::EtcdMemberInfo],
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    for m in members
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
    {
        let name = m.name_any();
        let url = naming::peer_url(&name, &naming::member_service(m), &ns, cluster.peer_https());
        let Some(entry) = etcd_members
            .iter()
            .find(|e| e.peer_urls.iter().any(|u| u == &url))
        else {
            continue;
        };
        let current = m.status.clone().unwrap_or_default();
        let want = EtcdMemberStatus {
            member_id: Some(format_id(entry.id)),
            is_voter: !entry.is_learner,
            ..current.clone()
        };
        if want != current {
            patch_member_status(
                api,
                &name,
                json!({"memberID": want.member_id, "isVoter": want.is_voter}),
            )
            .await?;
        }
    }
    Ok(())
}

async fn ensure_services(cluster: &EtcdCluster, ctx: &Context) -> Result<(), Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    for svc in [
        service::headless_service(cluster)?,
        service::client_service(cluster)?,
    ] {
        let name = svc.name_any();
        match api.get_opt(&name).await? {
            None => {
                api.create(
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..Default::default()
                    },
                    &svc,
                )
                .await?;
            }
            Some(have) if crate::controller_uid(&have) != cluster.uid() => {
                return Err(Error::Conflict(format!(
                    "Service {name} exists but is not owned by EtcdCluster {}; it is never adopted \
                     (it could route to other Pods): delete or rename it",
                    cluster.name_any()
                )));
            }
            Some(have) if service::drifted(&have, &svc) => {
                // Someone edited what members and clients depend on (selector, ports,
                // publishNotReadyAddresses): put it back.
                let mut body = serde_json::to_value(&svc)?;
                body["apiVersion"] = json!("v1");
                body["kind"] = json!("Service");
                api.patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await?;
                tracing::info!(cluster = %cluster.name_any(), service = %name, "restored a drifted Service");
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Keep the voter PDB in shape. A PDB of the same name that the EtcdCluster does not own is
/// never changed or deleted (it may protect someone else's Pods): the conflict is returned.
async fn ensure_pdb(
    cluster: &EtcdCluster,
    ctx: &Context,
    voters: i32,
    target: i32,
) -> Result<Option<String>, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = api.get_opt(&name).await?;
    if let Some(have) = &existing {
        if crate::controller_uid(have) != cluster.uid() {
            return Ok(Some(format!(
                "PodDisruptionBudget {name} exists but is not owned by EtcdCluster {name}; it is \
                 never adopted, changed or deleted (it may guard other Pods): delete or rename it \
                 so the operator can create the voter PDB"
            )));
        }
    }
    match pdb::voter_pdb(cluster, voters, target)? {
        None => {
            if existing.is_some() {
                api.delete(&name, &DeleteParams::default()).await?;
            }
        }
        Some(want) => {
            let same = existing.as_ref().is_some_and(|have| {
                have.spec.as_ref().map(|s| (&s.min_available, &s.selector))
                    == want.spec.as_ref().map(|s| (&s.min_available, &s.selector))
                    && want
                        .labels()
                        .iter()
                        .all(|(k, v)| have.labels().get(k) == Some(v))
            });
            if !same {
                let pp = PatchParams::apply(FIELD_MANAGER).force();
                let mut want = want;
                want.metadata.managed_fields = None;
                let body = serde_json::to_value(&want)?;
                let mut body = body;
                body["apiVersion"] = json!("policy/v1");
                body["kind"] = json!("PodDisruptionBudget");
                api.patch(&name, &pp, &Patch::Apply(&body)).await?;
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha2::{EtcdClusterStatus, ObservedSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn plan_at(phase: Phase, formed: bool, deadline: Option<Timestamp>) -> Plan {
        Plan {
            observed: ObservedSpec {
                replicas: 3,
                ..Default::default()
            },
            progress_deadline: deadline,
            locked_because: None,
            phase,
            action: Action::None,
            facts: plan::Facts {
                formed,
                ..Default::default()
            },
        }
    }

    #[test]
    fn a_running_deadline_wakes_the_reconcile_when_it_expires() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let at = |secs| Some(now + k8s_openapi::jiff::SignedDuration::from_secs(secs));
        // Before formation, nothing sends an event when a seed Pod stays Pending: the deadline
        // itself (or the seed re-dial) must wake the reconcile.
        let r = next_check(&plan_at(Phase::Progressing, false, at(3)), now);
        assert_eq!(r, Requeue::requeue(Duration::from_millis(3100)));
        let r = next_check(&plan_at(Phase::Progressing, false, at(600)), now);
        assert_eq!(r, Requeue::requeue(SEED_RECHECK));
        let r = next_check(&plan_at(Phase::Progressing, true, at(10)), now);
        assert_eq!(r, Requeue::requeue(Duration::from_millis(10_100)));
        // Parked: only a spec edit (a watch event) resumes it.
        let r = next_check(&plan_at(Phase::BootstrapFailed, false, at(-5)), now);
        assert_eq!(r, Requeue::await_change());
        let r = next_check(&plan_at(Phase::Reconciled, true, None), now);
        assert_eq!(r, Requeue::requeue(HEALTH_RECHECK));
    }

    #[test]
    fn status_patch_clears_fields_the_new_status_dropped() {
        let old = EtcdClusterStatus {
            progress_deadline: Some(Time(Timestamp::from_second(1_800_000_000).unwrap())),
            observed: Some(ObservedSpec {
                replicas: 3,
                ..Default::default()
            }),
            ..Default::default()
        };
        let new = EtcdClusterStatus {
            observed: old.observed.clone(),
            ..Default::default()
        };
        let patch = status_merge_patch(Some(&old), &new).unwrap();
        assert_eq!(patch["progressDeadline"], serde_json::Value::Null);
        assert!(patch.as_object().unwrap().contains_key("progressDeadline"));
        assert_eq!(patch["observed"]["replicas"], 3);
    }

    /// A field dropped inside a nested object (the latched target losing `resources` when the
    /// spec no longer sets them) must be cleared too: applied to the old status, the patch gives
    /// exactly the new one.
    #[test]
    fn status_patch_clears_nested_fields_the_new_status_dropped() {
        let old: EtcdClusterStatus = serde_json::from_value(serde_json::json!({
            "observed": {
                "replicas": 3,
                "version": "3.6.16",
                "resources": {"requests": {"cpu": "100m"}},
                "options": {"quota-backend-bytes": "1"}
            },
            "conditions": [{"type": "Available", "status": "True", "reason": "QuorumHealthy",
                            "message": "", "lastTransitionTime": "2026-11-23T00:00:00Z"}]
        }))
        .unwrap();
        let new: EtcdClusterStatus = serde_json::from_value(serde_json::json!({
            "observed": {"replicas": 5, "version": "3.6.16"},
        }))
        .unwrap();
        let patch = status_merge_patch(Some(&old), &new).unwrap();
        let mut applied = serde_json::to_value(&old).unwrap();
        json_patch::merge(&mut applied, &patch);
        assert_eq!(
            applied,
            serde_json::to_value(&new).unwrap(),
            "patch {patch}"
        );
    }

    #[test]
    fn a_lost_peer_auto_tls_annotation_is_restored_only_for_auto_tls_members() {
        let mut cluster = EtcdCluster::new("c", Default::default());
        let member = |auto: bool| {
            let mut m = EtcdMember::new("c-a", Default::default());
            m.spec.tls = auto.then(|| MemberTls {
                peer_auto_tls: true,
                ..MemberTls::default()
            });
            m
        };
        assert!(needs_peer_auto_tls_restored(
            &cluster,
            &[member(false), member(true)]
        ));
        assert!(!needs_peer_auto_tls_restored(&cluster, &[member(false)]));
        cluster.metadata.annotations = Some(
            [(
                labels::PEER_AUTO_TLS_ANNOTATION.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        assert!(!needs_peer_auto_tls_restored(&cluster, &[member(true)]));
        assert_eq!(member_tls(&cluster).map(|t| t.peer_auto_tls), Some(true));
    }
}
