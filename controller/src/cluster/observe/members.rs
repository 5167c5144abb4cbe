//! The cluster's EtcdMembers and what belongs to them, read fresh (not from caches): their Pods
//! and PVCs by name and owner, the planner's view of each member, and where the data of a member
//! that cannot run lives. Reads only.

use std::collections::BTreeMap;

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};

use crate::builders::pod as pod_builder;
use crate::cluster::plan::{DataHome, MemberView};
use crate::context::Context;
use crate::naming;
use crate::pods::{pod_view, ETCD_CONTAINER};
use crate::Error;

/// The cluster's members and what belongs to them: their Pods and PVCs, and the planner's view
/// of each member.
pub(in crate::cluster) struct Members {
    pub items: Vec<EtcdMember>,
    pub pods: BTreeMap<String, Pod>,
    pub views: Vec<MemberView>,
    /// Data PVCs of the cluster no member has (see [`kept_claims`]).
    pub kept_claims: BTreeMap<String, String>,
}

/// The cluster's EtcdMembers: a fresh list, not a cache (a member created by the previous
/// reconcile must be seen, or a lagging cache would make this one create a second).
pub(in crate::cluster) async fn members(
    cluster: &EtcdCluster,
    ctx: &Context,
) -> Result<Vec<EtcdMember>, Error> {
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let uid = cluster.uid().ok_or(Error::NoUid)?;
    let api: Api<EtcdMember> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = ListParams::default().labels(&labels::cluster_selector(&cluster.name_any()));
    Ok(api
        .list(&selector)
        .await?
        .items
        .into_iter()
        .filter(|m| owned_by(m, &uid))
        .collect())
}

/// The members' Pods and PVCs, and the planner's view of each member (with where the data of a
/// member that cannot run lives).
pub(in crate::cluster) async fn member_children(
    cluster: &EtcdCluster,
    ctx: &Context,
    members: Vec<EtcdMember>,
) -> Result<Members, Error> {
    let client = ctx.client.clone();
    if members.is_empty() {
        // Every Pod and PVC below is looked up by a member's name: without members (a new or
        // paused cluster) there is nothing to read.
        return Ok(Members {
            items: members,
            pods: BTreeMap::new(),
            views: Vec::new(),
            kept_claims: BTreeMap::new(),
        });
    }
    let ns = cluster.namespace().ok_or(Error::NoNamespace)?;
    let selector = ListParams::default().labels(&labels::cluster_selector(&cluster.name_any()));
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
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
    let kept_claims = kept_claims(&members, &pvcs);
    Ok(Members {
        items: members,
        pods,
        views,
        kept_claims,
    })
}

/// Data PVCs of the cluster whose member has no EtcdMember (deleted without the break-glass
/// annotation, which leaves its PVC and its place in etcd): member name → the PVC's
/// [`labels::MEMBER_UID_ANNOTATION`]. Only claims as this operator writes them (the UID mark,
/// no owner reference: one under an EtcdMember's is the garbage collector's), not being
/// deleted.
fn kept_claims(
    members: &[EtcdMember],
    pvcs: &BTreeMap<String, PersistentVolumeClaim>,
) -> BTreeMap<String, String> {
    pvcs.iter()
        .filter(|(_, c)| c.metadata.deletion_timestamp.is_none())
        .filter(|(_, c)| c.owner_references().is_empty())
        .filter_map(|(name, c)| {
            let member = name.strip_prefix("data-")?;
            let uid = c.annotations().get(labels::MEMBER_UID_ANNOTATION)?;
            (!members.iter().any(|m| m.name_any() == member))
                .then(|| (member.to_string(), uid.clone()))
        })
        .collect()
}

/// Members that belong to this incarnation of the cluster (a recreated cluster of the same name
/// must not adopt members of the previous one that are still being garbage-collected).
fn owned_by(obj: &impl Resource, owner_uid: &str) -> bool {
    crate::controller_uid(obj).as_deref() == Some(owner_uid)
}

/// Whether an EtcdRecovery marked `m` for an in-place restore (the mark and `spec.restore`).
fn restoring_in_place(m: &EtcdMember) -> bool {
    m.spec.restore.is_some()
        && m.annotations()
            .contains_key(api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION)
}

/// Whether `claim` holds `m`'s data: marked with its UID, or still under its owner reference
/// (until the member controller swaps the one for the other), or being re-attached to it.
fn members_claim(claim: &PersistentVolumeClaim, m: &EtcdMember) -> bool {
    crate::builders::pvc::claim_of(claim, m) != crate::builders::pvc::ClaimOwner::Foreign
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
        .is_some_and(|claim| !pvcs.get(claim).is_some_and(|c| members_claim(c, m)));
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
        max_learners: match pod {
            Some(p) => pod_max_learners(p),
            None => pod_builder::max_learners_of_version(&m.spec.version),
        },
        pod: pod.map(pod_view),
        // A member an EtcdRecovery is restoring in place gets its claim back from the member
        // controller, with the snapshot's data: until the recovery removes the mark, a claim
        // the cluster's view does not show yet is not lost data, and replacing the member would
        // discard the restored cluster's only member. (The recovery holds the cluster while the
        // mark is on; this covers a reconcile that read the cluster before the hold and the
        // member after the mark. A plan made before either is acted on only while the member is
        // still as read: `deletion::delete_member_as_observed`.)
        data_lost: !m.spec.storage.is_memory() && pvc_gone && !restoring_in_place(m),
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

/// How many learners the etcd of a member Pod accepts at once, from its etcd container's
/// command line, command and args (the reference operator puts etcd's flags in the command;
/// see [`pod_builder::max_learners_of_args`]).
fn pod_max_learners(pod: &Pod) -> u32 {
    let etcd = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == ETCD_CONTAINER));
    let command = etcd.and_then(|c| c.command.as_ref()).into_iter().flatten();
    let args = etcd.and_then(|c| c.args.as_ref()).into_iter().flatten();
    pod_builder::max_learners_of_args(command.chain(args))
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
            .filter(|c| members_claim(c, m));
        v.data_home = crate::cluster::data_home::look_up(client, m, pod, pvc).await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn member_whose_claim_is_gone() -> EtcdMember {
        let mut m: EtcdMember = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd-operator.cozystack.io/v1alpha2",
            "kind": "EtcdMember",
            "metadata": {"name": "m1", "uid": "u1"},
            "spec": {"clusterName": "c", "version": "3.6.16"},
            "status": {"pvcName": "data-m1"}
        }))
        .expect("a member");
        m.status.get_or_insert_with(Default::default).pvc_name = Some("data-m1".into());
        m
    }

    #[test]
    fn a_member_restored_in_place_is_not_data_lost_while_its_claim_is_not_yet_seen() {
        let (pods, pvcs) = (BTreeMap::new(), BTreeMap::new());
        let m = member_whose_claim_is_gone();
        assert!(member_view(&m, &pods, &pvcs).data_lost);
        let mut marked = m.clone();
        marked.spec.restore = serde_json::from_value(serde_json::json!({
            "source": {"s3": {"bucket": "b", "key": "k.db"}}
        }))
        .expect("a restore");
        marked
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                api::v1alpha2::RESTORE_IN_PLACE_ANNOTATION.into(),
                "r".into(),
            );
        assert!(!member_view(&marked, &pods, &pvcs).data_lost);
    }
}
