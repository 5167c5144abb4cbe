//! Creating an EtcdMember: from the locked target, never the live spec, with the TLS view of the
//! cluster and the annotations of what it runs; then its `--initial-cluster`.

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember, EtcdMemberSpec, MemberTls, ObservedSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::cluster::{plan, status};
use crate::context::Context;
use crate::Error;

/// An EtcdMember created again under its old name on the data PVC it left, complete already
/// (it is in etcd): see [`super::plan::Action::ReattachMember`].
pub(super) struct Reattach<'a> {
    pub member: &'a str,
    pub claim_uid: &'a str,
    pub initial_cluster: &'a str,
}

/// Create the next EtcdMember from the locked target (`status.observed`), never from the live
/// spec: an edit made while this target is in flight waits for the next target. With
/// `reattach`, the member of that name, complete, marked to adopt its kept PVC.
pub(super) async fn create_member(
    cluster: &EtcdCluster,
    ctx: &Context,
    target: &ObservedSpec,
    seed: bool,
    trust_bundle: Option<&str>,
    trusted_cas: Option<&str>,
    reattach: Option<Reattach<'_>>,
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
    let mut member = member;
    if let Some(r) = reattach {
        member.metadata.generate_name = None;
        member.metadata.name = Some(r.member.to_string());
        member
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                labels::REATTACH_ANNOTATION.to_string(),
                r.claim_uid.to_string(),
            );
        member.spec.initial_cluster = r.initial_cluster.to_string();
    }
    let api: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    let created = api.create(&PostParams::default(), &member).await?;
    // The component label needs the generated name.
    let member_name = created.name_any();
    let patch = json!({"metadata": {"labels": {labels::APP_COMPONENT: member_name}}});
    api.patch(&member_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(created)
}

/// The member view of the cluster's TLS; on a peer auto-TLS cluster (adopted from the aenix
/// operator) every new member runs `--peer-auto-tls` too, as etcd cannot mix TLS and plaintext
/// peers.
pub(in crate::cluster) fn member_tls(cluster: &EtcdCluster) -> Option<MemberTls> {
    let tls = MemberTls::from_cluster(&cluster.name_any(), cluster.spec.tls.as_ref());
    if !cluster.peer_auto_tls() {
        return tls;
    }
    Some(MemberTls {
        peer_auto_tls: true,
        ..tls.unwrap_or_default()
    })
}

/// Set a member's `spec.initialCluster`: from then on it is no longer pending.
pub(super) async fn set_initial_cluster(
    api: &Api<EtcdMember>,
    member: &str,
    initial_cluster: &str,
) -> Result<(), Error> {
    let patch = json!({"spec": {"initialCluster": initial_cluster}});
    api.patch(member, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
