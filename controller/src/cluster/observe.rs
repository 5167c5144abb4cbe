//! What the cluster controller observes before it plans: the cluster's EtcdMembers, their Pods
//! and PVCs (fresh lists, not caches), where the data of a member that cannot run lives, the TLS
//! Secrets and the root password, and etcd's own member list (and leader) through the voters.
//! It changes nothing in etcd or in the members; the only writes are root auth's bookkeeping
//! that a dial calls for (see [`super::auth`]), after which the reconcile starts over.

use std::ops::ControlFlow;
use std::time::Duration;

use api::conditions::reason;
use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember, RestoreSource};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};

use super::auth::{self, AuthStep};
use super::plan::{self, AuthProblem, EtcdView, MemberView, Observed};
use crate::auth::Credentials;
use crate::context::Context;
use crate::etcd::access::{Access, ClusterKey};
use crate::etcd::{Etcd, EtcdError};
use crate::tls::{CaTrust, ClientTls};
use crate::Error;
use crate::{naming, topology};

mod answers;
mod members;

pub(in crate::cluster) use answers::Answers;
pub(in crate::cluster) use members::{member_children, members, Members};

/// The TLS Secrets as read this reconcile.
#[derive(Default)]
pub(super) struct TlsSeen {
    pub client: Option<ClientTls>,
    /// The fingerprint of the CA bundles ([`crate::tls::trust_bundle`]).
    pub trust_bundle: Option<String>,
    pub ca_trust: Option<CaTrust>,
    /// What a member started now trusts, recorded next to the fingerprint, so that a later CA
    /// change is judged against the CAs each member loaded (see [`super::ca_set`]).
    pub trusted_cas: Option<String>,
    /// A Secret is missing or unusable (the message names it).
    pub problem: Option<String>,
    /// That Secret is a cert-manager one not issued yet.
    pub waiting_for_certificate: bool,
    /// When each readable TLS Secret's certificate expires (for the metrics).
    pub expiries: crate::tls::Expiries,
}

/// Root auth as read this reconcile.
pub(super) struct AuthSeen {
    /// `spec.auth` asks for auth.
    pub wanted: bool,
    /// `status.authEnabled`: etcd has auth on, so every dial logs in.
    pub on: bool,
    /// The root password from the user's Secret.
    pub creds: Option<Credentials>,
    pub problem: Option<AuthProblem>,
}

impl AuthSeen {
    /// The login every dial presents: the user's, once etcd has auth on.
    pub fn dial_creds(&self) -> Option<&Credentials> {
        self.creds.as_ref().filter(|_| self.on)
    }

    /// etcd has auth on and no password is at hand: etcd is not dialed.
    pub fn cannot_log_in(&self) -> bool {
        auth::cannot_log_in(self.on, self.wanted, self.creds.is_some())
    }
}

/// Everything observed this reconcile: the planner's input is built from it
/// ([`Seen::observed`]), and the act and publish steps use its clients and lists.
pub(super) struct Seen {
    pub ns: String,
    pub name: String,
    /// The key of the cluster's cached etcd client: namespace, name and UID.
    pub key: ClusterKey,
    pub formed: bool,
    pub members: Members,
    pub cert_manager_missing: bool,
    pub tls: TlsSeen,
    pub auth: AuthSeen,
    /// How this reconcile reaches the cluster's etcd: the client TLS it read and root's
    /// credentials once auth is on.
    pub access: Access,
    /// The cluster's etcd client, when etcd answered.
    pub etcd: Option<Etcd>,
    pub etcd_view: EtcdView,
    pub leader: Option<u64>,
    /// Each member's own status answer, for `status.members[]` (see [`answers`]).
    pub answers: Answers,
    pub restoring: Option<String>,
    pub restore_failure: Option<String>,
    pub replace_broken_after: Option<SignedDuration>,
}

impl Seen {
    /// The planner's input.
    pub fn observed<'a>(
        &self,
        cluster: &'a EtcdCluster,
        ctx: &Context,
        now: Timestamp,
    ) -> Observed<'a> {
        Observed {
            cluster,
            members: self.members.views.clone(),
            etcd: self.etcd_view.clone(),
            now,
            cert_manager_missing: self.cert_manager_missing,
            tls_secret_problem: self.tls.problem.clone(),
            waiting_for_certificate: self.tls.waiting_for_certificate,
            auth_problem: self.auth.problem.clone(),
            trust_bundle: self.tls.trust_bundle.clone(),
            ca_trust: self.tls.ca_trust.clone(),
            leader: self.leader,
            image_repository: Some(ctx.config.etcd_image_repository.clone()),
            replace_broken_after: self.replace_broken_after,
            restoring: self.restoring.clone(),
            restore_failure: self.restore_failure.clone(),
            kept_claims: self.members.kept_claims.clone(),
        }
    }
}

/// The TLS Secrets, root auth and etcd's view of the cluster. `Break` carries the requeue of a
/// reconcile that ends here: root auth's state was recorded or etcd's root password rotated,
/// and the next reconcile dials again.
pub(super) async fn etcd(
    cluster: &EtcdCluster,
    ctx: &Context,
    members: Members,
    cert_manager_missing: bool,
) -> Result<ControlFlow<Requeue, Seen>, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    // The cached client is keyed by the cluster's incarnation.
    cluster.uid().ok_or(Error::NoUid)?;
    let formed = cluster
        .status
        .as_ref()
        .is_some_and(|s| s.cluster_id.is_some());
    let mut endpoints = voter_endpoints(cluster, &members.items, &members.views, formed);
    if endpoints.is_empty() && formed {
        // No voter's Pod is Ready (a readiness probe can fail while etcd serves): dial the
        // voters whose Pods run, which may well answer.
        endpoints = unready_voter_endpoints(cluster, &members.items, &members.views);
    }
    let key = ClusterKey::of(cluster);
    let tls = if cert_manager_missing {
        TlsSeen::default()
    } else {
        read_tls(cluster, ctx, &members.items).await?
    };
    let mut auth = read_auth(cluster, ctx).await?;
    let access = Access::new(
        tls.client.clone(),
        auth.dial_creds().cloned(),
        ctx.metrics.clone(),
    );
    let mut etcd = None;
    let etcd_view = if endpoints.is_empty() || tls.problem.is_some() || auth.cannot_log_in() {
        EtcdView::NotAsked
    } else {
        let dial_creds = auth.dial_creds();
        match list_members(ctx, &key, &endpoints, &access).await {
            Ok((client, view)) => {
                if let Some(creds) = dial_creds {
                    auth::record_working_password(cluster, ctx, &key, creds).await?;
                }
                etcd = Some(client);
                view
            }
            Err(e) => {
                let step = auth::after_refusal(
                    e.auth_refusal(),
                    dial_creds.is_some(),
                    auth.wanted,
                    auth.creds.is_some(),
                );
                match (step, dial_creds) {
                    (AuthStep::RotatePassword, Some(creds)) => {
                        if auth::rotate_root_password(cluster, ctx, &endpoints, &access, creds)
                            .await?
                        {
                            return Ok(ControlFlow::Break(Requeue::requeue(
                                Duration::from_millis(200),
                            )));
                        }
                        auth.problem = Some(auth::credentials_rejected(
                            cluster,
                            &ns,
                            &ctx.config.auth_record,
                        ));
                    }
                    (AuthStep::RequiredNotConfigured, _) => {
                        auth.problem = Some(auth::auth_required_not_configured());
                    }
                    (AuthStep::Latch(on), _) => {
                        if !on {
                            tracing::warn!(cluster = %name, "etcd has authentication off although status.authEnabled is true; enabling it again");
                        }
                        return Ok(ControlFlow::Break(
                            auth::latch_auth(cluster, ctx, &key, on).await?,
                        ));
                    }
                    _ => {}
                }
                EtcdView::Unreachable(e.stable_message())
            }
        }
    };
    // Without a login: does etcd demand one?
    if let (Some(client), None, true) = (etcd.as_mut(), auth.dial_creds(), formed) {
        match client.anonymous_reads_refused().await {
            Ok(refused) => {
                match auth::after_anonymous_probe(refused, auth.wanted, auth.creds.is_some()) {
                    AuthStep::RequiredNotConfigured => {
                        auth.problem = Some(auth::auth_required_not_configured())
                    }
                    AuthStep::Latch(on) => {
                        return Ok(ControlFlow::Break(
                            auth::latch_auth(cluster, ctx, &key, on).await?,
                        ))
                    }
                    AuthStep::RotatePassword | AuthStep::Nothing => {}
                }
            }
            Err(e) => {
                tracing::debug!(cluster = %name, error = %e, "could not check whether etcd requires authentication")
            }
        }
    }
    let answers = if tls.problem.is_some() || auth.cannot_log_in() {
        Answers::new()
    } else {
        answers::ask_members(cluster, ctx, &key, &access, &members).await
    };
    let leader = if may_roll(cluster, ctx, &members.views, tls.trust_bundle.as_deref()) {
        ask_leader(&name, etcd.as_mut()).await
    } else {
        None
    };
    let (restoring, restore_failure) = if formed {
        (None, None)
    } else {
        restore_state(cluster, ctx, &ns, &members).await?
    };
    Ok(ControlFlow::Continue(Seen {
        replace_broken_after: replace_broken_after(cluster, ctx),
        ns,
        name,
        key,
        formed,
        members,
        cert_manager_missing,
        tls,
        auth,
        access,
        etcd,
        etcd_view,
        leader,
        answers,
        restoring,
        restore_failure,
    }))
}

/// The TLS Secrets, read on every reconcile: a renewed one (new resourceVersion) rebuilds the
/// cached client, a missing or broken one holds the cluster with a condition naming it. Each
/// certificate is checked against the names members are dialed by, so a wrong SAN or a CA that
/// does not match is a condition naming the Secret, not a failing handshake.
async fn read_tls(
    cluster: &EtcdCluster,
    ctx: &Context,
    members: &[EtcdMember],
) -> Result<TlsSeen, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let hosts: Vec<String> = members
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .map(|m| naming::member_host(&m.name_any(), &naming::member_service(m), &ns))
        .collect();
    let (expiries, loaded) = crate::tls::load_checked(
        &ctx.client,
        &ns,
        &cluster.name_any(),
        cluster.spec.tls.as_ref(),
        &hosts,
    )
    .await;
    match loaded {
        Ok(crate::tls::Loaded {
            client,
            trust_bundle,
            ca_trust,
        }) => Ok(TlsSeen {
            client,
            trust_bundle,
            trusted_cas: ca_trust.as_ref().map(|t| t.bundles.render()),
            ca_trust,
            problem: None,
            waiting_for_certificate: false,
            expiries,
        }),
        Err(e) if e.is_user_fixable() => Ok(TlsSeen {
            problem: Some(e.to_string()),
            waiting_for_certificate: e.is_waiting_for_certificate(),
            expiries,
            ..TlsSeen::default()
        }),
        Err(e) => Err(e.into()),
    }
}

/// Root auth: the user's password is read on every reconcile too, and used to log in once
/// `status.authEnabled` says etcd has auth on.
async fn read_auth(cluster: &EtcdCluster, ctx: &Context) -> Result<AuthSeen, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let wanted = crate::auth::wanted(cluster.spec.auth.as_ref());
    let on = crate::auth::latched(cluster);
    let mut problem = None;
    let creds = if wanted {
        match crate::auth::load(&ctx.client, &ns, cluster.spec.auth.as_ref()).await {
            Ok(creds) => creds,
            Err(e) if e.is_user_fixable() => {
                problem = Some(AuthProblem {
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
    Ok(AuthSeen {
        wanted,
        on,
        creds,
        problem,
    })
}

/// Whether members may be restarted (a new CA bundle or etcd image repository, or members whose
/// template differs from the spec's or the latched target's): only then is the leader asked
/// (the leader goes last, after MoveLeader).
fn may_roll(
    cluster: &EtcdCluster,
    ctx: &Context,
    views: &[MemberView],
    trust_bundle: Option<&str>,
) -> bool {
    let spec_template = crate::template::target_hash(&plan::target_of(cluster));
    let latched_template = cluster
        .status
        .as_ref()
        .and_then(|s| s.observed.as_ref())
        .map(crate::template::target_hash);
    let repository = &ctx.config.etcd_image_repository;
    views.iter().any(|v| {
        trust_bundle.is_some_and(|want| v.trust_bundle.as_deref().is_some_and(|t| t != want))
            || v.image_repository.as_ref().is_some_and(|r| r != repository)
            || v.template_hash != spec_template
            || latched_template
                .as_ref()
                .is_some_and(|t| &v.template_hash != t)
    })
}

/// etcd's leader, through the cluster's client; `None` when etcd was not reached or did not say.
async fn ask_leader(name: &str, etcd: Option<&mut Etcd>) -> Option<u64> {
    match etcd?.leader().await {
        Ok(id) => id,
        Err(e) => {
            tracing::info!(cluster = %name, error = %e, "could not ask etcd for its leader");
            None
        }
    }
}

/// Before the cluster has formed: the source a seed's restore init container restores from
/// while it runs (the bootstrap's deadline waits for it), and a failed restore's message (the
/// agent's own, or a claim that does not exist), which goes on the cluster's conditions while
/// the kubelet retries the init container.
async fn restore_state(
    cluster: &EtcdCluster,
    ctx: &Context,
    ns: &str,
    members: &Members,
) -> Result<(Option<String>, Option<String>), Error> {
    let restoring_seeds = || {
        members
            .items
            .iter()
            .filter(|m| m.spec.bootstrap && m.spec.restore.is_some())
    };
    let restoring = restoring_seeds()
        .find(|m| {
            members
                .pods
                .get(&m.name_any())
                .is_some_and(crate::pods::restore_running)
        })
        .map(|_| restore_source(cluster));
    let mut failure = restoring_seeds().find_map(|m| {
        members
            .pods
            .get(&m.name_any())
            .and_then(crate::pods::restore_failure)
    });
    if failure.is_none() {
        failure = missing_restore_claim(cluster, ctx, ns).await?;
    }
    Ok((restoring, failure))
}

/// Client URLs of members that can answer membership calls: voters (never learners) whose Pod is
/// Ready; before the cluster has formed, the seed.
fn voter_endpoints(
    cluster: &EtcdCluster,
    members: &[EtcdMember],
    views: &[MemberView],
    formed: bool,
) -> Vec<String> {
    members
        .iter()
        .zip(views)
        .filter(|(m, v)| {
            let ready = v.pod.as_ref().is_some_and(|p| p.ready) && !v.deleting;
            let voter = m.status.as_ref().is_some_and(|s| s.is_voter);
            ready && (voter || (!formed && m.spec.bootstrap))
        })
        .map(|(m, _)| topology::client_url(m, cluster))
        .collect()
}

/// Client URLs of voters whose Pod runs but is not Ready (etcd fails its /health while an
/// alarm is raised): where the alarms can still be read.
pub(super) fn unready_voter_endpoints(
    cluster: &EtcdCluster,
    members: &[EtcdMember],
    views: &[MemberView],
) -> Vec<String> {
    members
        .iter()
        .zip(views)
        .filter(|(m, v)| {
            v.pod.as_ref().is_some_and(|p| !p.ready)
                && !v.deleting
                && m.status.as_ref().is_some_and(|s| s.is_voter)
        })
        .map(|(m, _)| topology::client_url(m, cluster))
        .collect()
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

/// The cluster's (cached) etcd client and etcd's member list through it; a client whose call
/// failed is dropped from the cache.
async fn list_members(
    ctx: &Context,
    key: &ClusterKey,
    endpoints: &[String],
    access: &Access,
) -> Result<(Etcd, EtcdView), EtcdError> {
    let mut client = ctx.etcd.get(key, endpoints, access).await?;
    match client.member_list().await {
        Ok((cluster_id, members)) => Ok((
            client,
            EtcdView::Members {
                cluster_id,
                members,
            },
        )),
        Err(e) => {
            ctx.etcd.forget(key);
            Err(e)
        }
    }
}

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

/// The message of a restore whose PersistentVolumeClaim does not exist: the claim, and the fix.
fn missing_claim_message(claim: &str, ns: &str, sub_path: &str) -> String {
    format!(
        "spec.bootstrap.restore.source.pvc.claimName: PersistentVolumeClaim {claim:?} does not \
         exist in namespace {ns:?}; create it holding the snapshot at subPath {sub_path:?} (the \
         seed waits for it), or recreate the cluster naming a claim that exists"
    )
}
