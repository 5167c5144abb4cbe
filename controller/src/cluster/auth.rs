//! Root auth's I/O for the cluster controller: turn auth on, record what etcd's auth state
//! turned out to be, keep the auth record of the password that logs in, rotate etcd's root
//! password to the user's. What to do is decided in [`decide`] (pure); this file only performs
//! it. It does not dial etcd for anything but auth, and never changes membership.

use std::time::Duration;

use api::v1alpha2::EtcdCluster;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::auth::{self as record, Credentials};
use crate::context::Context;
use crate::etcd::access::{Access, ClusterKey};
use crate::etcd::Etcd;
use crate::events::{Action, Reason};
use crate::Error;

pub mod decide;

use decide::auth_secret_name;
pub use decide::{
    after_anonymous_probe, after_refusal, auth_required_not_configured, cannot_log_in,
    credentials_rejected, ready_to_enable_auth, AuthStep,
};

/// Provision `root` and turn auth on. The password is recorded before etcd has it, so a crash
/// in between leaves a login the operator knows.
pub(super) async fn enable_auth(
    cluster: &EtcdCluster,
    ctx: &Context,
    etcd: &mut Etcd,
    creds: &Credentials,
) -> Result<(), Error> {
    record::write_applied(&ctx.client, &ctx.config.auth_record, cluster, creds, None).await?;
    let enabled = etcd.enable_root_auth(creds).await?;
    let name = cluster.name_any();
    tracing::info!(cluster = %name, already_on = !enabled, "etcd authentication enabled");
    ctx.event(
        cluster,
        false,
        Reason::AuthEnabled,
        Action::AuthEnable,
        format!(
            "etcd authentication is on: user root with the role root, password from Secret {}",
            auth_secret_name(cluster)
        ),
    )
    .await;
    Ok(())
}

/// Record what etcd's auth state turned out to be (`status.authEnabled`) and plan again with it.
pub(super) async fn latch_auth(
    cluster: &EtcdCluster,
    ctx: &Context,
    key: &ClusterKey,
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
    ctx.etcd.forget(key);
    Ok(Requeue::requeue(Duration::from_millis(200)))
}

/// The password that just logged in is in the cluster's auth record, so a later rotation can log
/// in with it. Clusters taken over from another operator (auth enabled there) get their record
/// here; a rotation interrupted after etcd changed gets its record completed.
pub(super) async fn record_working_password(
    cluster: &EtcdCluster,
    ctx: &Context,
    key: &ClusterKey,
    creds: &Credentials,
) -> Result<(), Error> {
    let fingerprint = creds.fingerprint();
    if ctx.auth_recorded(key.as_str(), &fingerprint) {
        return Ok(());
    }
    let applied = record::read_applied(&ctx.client, &ctx.config.auth_record, cluster).await?;
    if applied.current.as_ref() != Some(creds) || applied.previous.is_some() {
        record::write_applied(&ctx.client, &ctx.config.auth_record, cluster, creds, None).await?;
    }
    ctx.mark_auth_recorded(key.as_str(), &fingerprint);
    Ok(())
}

/// etcd refused the user's root password: if a password the operator recorded still logs in,
/// move etcd to the user's one (the user rotated it in their Secret). `false` when none does.
pub(super) async fn rotate_root_password(
    cluster: &EtcdCluster,
    ctx: &Context,
    endpoints: &[String],
    access: &Access,
    creds: &Credentials,
) -> Result<bool, Error> {
    let applied = record::read_applied(&ctx.client, &ctx.config.auth_record, cluster).await?;
    for old in applied.candidates(creds) {
        let mut etcd = match access.with_creds(Some(old.clone())).dial(endpoints).await {
            Ok(etcd) => etcd,
            Err(e) if e.auth_refusal().is_some() => continue,
            Err(e) => return Err(e.into()),
        };
        // Recorded first: if the change is interrupted, `previous` still logs in next time.
        record::write_applied(
            &ctx.client,
            &ctx.config.auth_record,
            cluster,
            creds,
            Some(&old),
        )
        .await?;
        etcd.change_root_password(creds).await?;
        record::write_applied(&ctx.client, &ctx.config.auth_record, cluster, creds, None).await?;
        let name = cluster.name_any();
        tracing::info!(cluster = %name, "rotated the etcd root password to the one in the Secret");
        ctx.event(
            cluster,
            false,
            Reason::RootPasswordRotated,
            Action::UserChangePassword,
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
