//! Root auth, decided: what the reconcile does when etcd refuses a login or an anonymous read,
//! whether the operator can log in at all, when auth is turned on, and the problems a user reads
//! in the conditions. Pure: the Secret reads, the record and the etcd calls are in
//! [`super`] (`cluster/auth.rs`).

use api::conditions::reason;
use api::v1alpha2::EtcdCluster;
use kube::ResourceExt;

use crate::cluster::plan::{Action, AuthProblem, Phase, Plan};
use crate::etcd::AuthRefusal;

/// What a refusal on authentication grounds asks of the reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthStep {
    /// etcd refused the user's root password: try the passwords the operator recorded before
    /// (the user rotated it in their Secret); if none logs in, the credentials are rejected.
    RotatePassword,
    /// etcd demands a login but the spec configures none: the cluster is held.
    RequiredNotConfigured,
    /// Record in `status.authEnabled` what etcd's auth state turned out to be, then plan again.
    Latch(bool),
    /// Nothing to do on auth grounds.
    Nothing,
}

/// After a member list failed with `refusal`: `logged_in` says whether the call presented the
/// root user, `wanted` whether `spec.auth` asks for auth, `have_creds` whether its Secret gave a
/// password.
pub fn after_refusal(
    refusal: Option<AuthRefusal>,
    logged_in: bool,
    wanted: bool,
    have_creds: bool,
) -> AuthStep {
    match (refusal, logged_in) {
        (Some(AuthRefusal::Rejected), true) => AuthStep::RotatePassword,
        // etcd 3.6 guards MemberList too: the same answers as the anonymous probe.
        (Some(AuthRefusal::Required), false) if !wanted => AuthStep::RequiredNotConfigured,
        (Some(AuthRefusal::Required), false) if have_creds => AuthStep::Latch(true),
        // Auth was turned off behind the operator's back: dial without a user again, and turn
        // it back on once the cluster has converged.
        (Some(AuthRefusal::NotEnabled), true) => AuthStep::Latch(false),
        _ => AuthStep::Nothing,
    }
}

/// After asking, without a login, whether etcd demands one (`refused`). Yes without `spec.auth`
/// is a cluster the operator cannot change (restored from an auth-enabled snapshot, or auth
/// turned on by hand); yes with `spec.auth` means auth is on already (the same restore, or a
/// crash right after AuthEnable): log in from now on.
pub fn after_anonymous_probe(refused: bool, wanted: bool, have_creds: bool) -> AuthStep {
    match refused {
        true if !wanted => AuthStep::RequiredNotConfigured,
        true if have_creds => AuthStep::Latch(true),
        _ => AuthStep::Nothing,
    }
}

/// etcd has auth on and the spec wants it, but its Secret gave no password: etcd is not dialed
/// (every call would be refused).
pub fn cannot_log_in(on: bool, wanted: bool, have_creds: bool) -> bool {
    on && wanted && !have_creds
}

/// Root auth is turned on once the cluster has reached its target with every member Ready, so
/// membership changes of the bootstrap never need a login and a half-formed cluster is never
/// locked.
pub fn ready_to_enable_auth(plan: &Plan) -> bool {
    plan.phase == Phase::Reconciled
        && plan.action == Action::None
        && plan.facts.formed
        && plan.observed.replicas > 0
        && plan.facts.ready_members == plan.observed.replicas
        && plan.facts.auth_problem.is_none()
}

/// The name of the Secret `spec.auth` takes the root password from.
pub fn auth_secret_name(cluster: &EtcdCluster) -> String {
    cluster
        .spec
        .auth
        .as_ref()
        .and_then(|a| a.root_credentials_secret_ref.as_ref())
        .map(|r| r.name.clone())
        .unwrap_or_default()
}

/// etcd refused the user's root password and no recorded one logs in: what to put where.
pub fn credentials_rejected(
    cluster: &EtcdCluster,
    ns: &str,
    record: &crate::auth::RecordRef,
) -> AuthProblem {
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

/// etcd demands a login that the spec does not configure: why, and the one way out.
pub fn auth_required_not_configured() -> AuthProblem {
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

#[cfg(test)]
mod tests;
