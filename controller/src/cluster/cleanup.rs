//! The cluster's cleanup finalizer (`etcd-operator.cozystack.io/cluster-cleanup`): data PVCs
//! carry no owner reference (deleting an EtcdMember object must not take its data), so the
//! garbage collector no longer deletes them with the cluster; this finalizer does, before the
//! cluster goes. Deleting an EtcdCluster deletes its data, as it always has; a deletion with
//! `--cascade=orphan` keeps them, as it keeps every other dependent. Only this incarnation's
//! claims go: those a previous cluster of the same name left (deleted with `--cascade=orphan`)
//! carry its UID, or predate this cluster, and are kept.
//!
//! It also deletes the cluster's EtcdMembers itself, as the operator, instead of leaving them to
//! the garbage collector alone: the member deletion protection lets the operator through on
//! every distribution, while the garbage collector's identity differs from one to the next
//! (kubeadm's is trusted by name; one the chart does not name would be refused, and the members
//! with their Pods would stay forever). It touches PVCs, the cluster's own members and the
//! cluster's finalizers only.

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::context::Context;
use crate::deletion::delete_exactly;
use crate::Error;

/// The finalizer the apiserver adds for `kubectl delete --cascade=orphan`.
const ORPHAN_FINALIZER: &str = "orphan";

/// Put the cleanup finalizer on a live cluster that lacks it (one write, once): the cluster as
/// it is after that write (the rest of the reconcile, its status write included, goes on from
/// it), or `None` when it had the finalizer.
pub(super) async fn ensure_finalizer(
    cluster: &EtcdCluster,
    ctx: &Context,
) -> Result<Option<EtcdCluster>, Error> {
    if cluster
        .finalizers()
        .iter()
        .any(|f| f == labels::CLUSTER_CLEANUP_FINALIZER)
    {
        return Ok(None);
    }
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let mut finalizers = cluster.finalizers().to_vec();
    finalizers.push(labels::CLUSTER_CLEANUP_FINALIZER.to_string());
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": cluster.resource_version(),
    }});
    let updated = Api::<EtcdCluster>::namespaced(ctx.client.clone(), &ns)
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(Some(updated))
}

/// The data claims of this incarnation of the cluster among the PVCs labelled with its name:
/// `data-<member>` marked with a member's UID, or under an EtcdMember owner reference (written
/// before the mark, or by the reference operator); anything else a user labelled so is not the
/// operator's to delete. Of those, only the claims [`of_this_incarnation`]: a cluster of the same
/// name deleted before with `--cascade=orphan` left its claims under the same label, and they
/// are not this cluster's to delete.
pub(super) fn data_claims<'a>(
    pvcs: &'a [PersistentVolumeClaim],
    cluster: &EtcdCluster,
) -> Vec<&'a PersistentVolumeClaim> {
    pvcs.iter()
        .filter(|c| is_data_claim(c) && of_this_incarnation(c, cluster))
        .collect()
}

fn is_data_claim(claim: &PersistentVolumeClaim) -> bool {
    claim.name_any().starts_with("data-")
        && (claim
            .annotations()
            .contains_key(labels::MEMBER_UID_ANNOTATION)
            || claim
                .owner_references()
                .iter()
                .any(|o| o.kind == "EtcdMember"))
}

/// Whether a data claim belongs to this incarnation of the cluster: marked with its UID
/// ([`labels::CLUSTER_UID_ANNOTATION`], which every claim the operator creates or adopts
/// carries); a claim without the mark (created by an operator before it) when it was created
/// with or after the cluster (the claims of an earlier cluster of the same name were all created
/// before this one was; an unknown time keeps the claim).
fn of_this_incarnation(claim: &PersistentVolumeClaim, cluster: &EtcdCluster) -> bool {
    match claim.annotations().get(labels::CLUSTER_UID_ANNOTATION) {
        Some(uid) => cluster.uid().as_deref() == Some(uid.as_str()),
        None => match (
            &claim.metadata.creation_timestamp,
            &cluster.metadata.creation_timestamp,
        ) {
            (Some(claimed), Some(created)) => claimed.0 >= created.0,
            _ => false,
        },
    }
}

/// The members this incarnation of the cluster controls (its UID in their controller owner
/// reference: whom the garbage collector would delete with it) and not yet being deleted.
pub(super) fn members_to_delete<'a>(
    members: &'a [EtcdMember],
    cluster: &EtcdCluster,
) -> Vec<&'a EtcdMember> {
    members
        .iter()
        .filter(|m| {
            m.metadata.deletion_timestamp.is_none()
                && cluster.uid().is_some()
                && crate::controller_uid(*m) == cluster.uid()
        })
        .collect()
}

/// Whether the cluster's deletion asks to keep its dependents (`--cascade=orphan`).
pub(super) fn orphaning(finalizers: &[String]) -> bool {
    finalizers.iter().any(|f| f == ORPHAN_FINALIZER)
}

/// [`delete_exactly`] of an object as read.
async fn delete_this_one<K>(api: &Api<K>, object: &K) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    delete_exactly(api, &object.name_any(), &object.uid().unwrap_or_default()).await
}

/// The cluster is being deleted: delete its members and its data PVCs (unless orphaning), then
/// let it go. Its members' finalizers skip MemberRemove meanwhile (nothing is left to remove
/// them from), and the member controller creates no claim for a cluster being deleted.
pub(super) async fn finalize(cluster: &EtcdCluster, ctx: &Context) -> Result<Requeue, Error> {
    if !cluster
        .finalizers()
        .iter()
        .any(|f| f == labels::CLUSTER_CLEANUP_FINALIZER)
    {
        return Ok(Requeue::await_change());
    }
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let name = cluster.name_any();
    if !orphaning(cluster.finalizers()) {
        let members: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
        let listed = members.list(&ListParams::default()).await?.items;
        for member in members_to_delete(&listed, cluster) {
            if delete_this_one(&members, member).await? {
                tracing::info!(cluster = %name, member = %member.name_any(), "deleted a member with its cluster");
            }
        }
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
        let listed = pvcs
            .list(&ListParams::default().labels(&labels::cluster_selector(&name)))
            .await?
            .items;
        for claim in listed
            .iter()
            .filter(|c| is_data_claim(c) && !of_this_incarnation(c, cluster))
        {
            tracing::info!(cluster = %name, pvc = %claim.name_any(), "kept a data PVC an earlier EtcdCluster of the same name left (deleted with --cascade=orphan): not this cluster's to delete");
        }
        for claim in data_claims(&listed, cluster) {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if delete_this_one(&pvcs, claim).await? {
                tracing::info!(cluster = %name, pvc = %claim.name_any(), "deleted a data PVC with its cluster");
            }
        }
    }
    let finalizers: Vec<String> = cluster
        .finalizers()
        .iter()
        .filter(|f| *f != labels::CLUSTER_CLEANUP_FINALIZER)
        .cloned()
        .collect();
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": cluster.resource_version(),
    }});
    Api::<EtcdCluster>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(Requeue::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    fn claim(name: &str, mark: bool, owner: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: mark.then(|| {
                    BTreeMap::from([(labels::MEMBER_UID_ANNOTATION.to_string(), "u".to_string())])
                }),
                owner_references: owner.map(|kind| {
                    vec![OwnerReference {
                        kind: kind.into(),
                        name: "x".into(),
                        uid: "u".into(),
                        api_version: "v1".into(),
                        ..Default::default()
                    }]
                }),
                creation_timestamp: Some(Time(ts(0))),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn only_the_members_data_claims_go_with_the_cluster() {
        let pvcs = vec![
            claim("data-c-aaaaa", true, None),
            claim("data-c-bbbbb", false, Some("EtcdMember")),
            // A claim of the user's that carries the cluster label: not the operator's.
            claim("backups", true, None),
            claim("data-c-ccccc", false, None),
            claim("data-c-ddddd", false, Some("StatefulSet")),
        ];
        let names: Vec<String> = data_claims(&pvcs, &cluster("cluster-uid", 0))
            .iter()
            .map(|c| c.name_any())
            .collect();
        assert_eq!(names, ["data-c-aaaaa", "data-c-bbbbb"]);
    }

    fn cluster(uid: &str, created: i64) -> EtcdCluster {
        let mut c = EtcdCluster::new("c", api::v1alpha2::EtcdClusterSpec::default());
        c.metadata.uid = Some(uid.into());
        c.metadata.creation_timestamp = Some(Time(ts(created)));
        c
    }

    fn ts(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).expect("a timestamp")
    }

    fn of_incarnation(
        name: &str,
        cluster_uid: Option<&str>,
        created: i64,
    ) -> PersistentVolumeClaim {
        let mut c = claim(name, true, None);
        if let Some(uid) = cluster_uid {
            c.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(labels::CLUSTER_UID_ANNOTATION.into(), uid.into());
        }
        c.metadata.creation_timestamp = Some(Time(ts(created)));
        c
    }

    #[test]
    fn a_cluster_deletes_only_its_own_incarnations_claims_never_those_a_previous_one_left() {
        // `kubectl delete etcdcluster c --cascade=orphan` left the first incarnation's claims
        // (created at 0..10, marked with its UID, or unmarked from an operator before the
        // mark); the second incarnation, created at 100, is now deleted.
        let now = cluster("second", 100);
        let pvcs = vec![
            of_incarnation("data-c-old01", Some("first"), 5),
            of_incarnation("data-c-old02", None, 10),
            of_incarnation("data-c-new01", Some("second"), 100),
            of_incarnation("data-c-new02", Some("second"), 160),
            // An unmarked claim (an operator before the mark) created with or after this
            // cluster is this incarnation's: the previous one's were all created before it.
            of_incarnation("data-c-new03", None, 100),
            of_incarnation("data-c-new04", None, 130),
            // Marked with another UID although created later: never this cluster's.
            of_incarnation("data-c-other", Some("third"), 140),
        ];
        let names: Vec<String> = data_claims(&pvcs, &now)
            .iter()
            .map(|c| c.name_any())
            .collect();
        assert_eq!(
            names,
            [
                "data-c-new01",
                "data-c-new02",
                "data-c-new03",
                "data-c-new04"
            ]
        );
    }

    fn member(name: &str, owner: Option<&str>, deleting: bool) -> EtcdMember {
        let mut m = EtcdMember::new(name, Default::default());
        m.metadata.owner_references = owner.map(|uid| {
            vec![OwnerReference {
                kind: "EtcdCluster".into(),
                name: "c".into(),
                uid: uid.into(),
                api_version: "etcd-operator.cozystack.io/v1alpha2".into(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        m.metadata.deletion_timestamp = deleting.then(|| Time(ts(200)));
        m
    }

    #[test]
    fn a_cluster_deletes_the_members_it_controls_and_no_other() {
        let listed = vec![
            member("c-aaaaa", Some("second"), false),
            // Being deleted already: its finalizer is at work.
            member("c-bbbbb", Some("second"), true),
            // A member an earlier cluster of the same name left (deleted with --cascade=orphan):
            // its owner reference is gone; or one a cluster of another UID controls.
            member("c-ccccc", None, false),
            member("c-ddddd", Some("first"), false),
        ];
        let names: Vec<String> = members_to_delete(&listed, &cluster("second", 100))
            .iter()
            .map(|m| m.name_any())
            .collect();
        assert_eq!(names, ["c-aaaaa"]);
        let mut no_uid = cluster("second", 100);
        no_uid.metadata.uid = None;
        assert!(members_to_delete(&listed, &no_uid).is_empty());
    }

    #[test]
    fn a_deletion_with_cascade_orphan_keeps_the_data() {
        assert!(orphaning(&[
            "orphan".into(),
            labels::CLUSTER_CLEANUP_FINALIZER.into()
        ]));
        assert!(!orphaning(&[labels::CLUSTER_CLEANUP_FINALIZER.into()]));
    }
}
