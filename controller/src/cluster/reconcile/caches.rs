//! What the cluster reconcile reads from watch caches instead of the API, and the rules that say
//! when a cache may be behind and a fresh read is needed. With them a full resync (every cluster
//! reconciled once after a restart) reads no cluster, member, Service or PDB of a quiet cluster
//! (docs/performance.md, "Reads in a full resync").
//!
//! The caches are reflector stores whose watch also wakes the cluster ([`crate::run`]): an
//! event reaches the store before it triggers the reconcile, so a reconcile woken by a change of
//! a member, Service or PDB finds that change in the cache. What a cache cannot know is a write
//! this process made that its watch has not delivered yet; the rules guard exactly that:
//!
//! - **The cluster's own writes** ([`cluster_read`]): a cached `status` can lag behind this
//!   process's own status write, and planning from a stale `status.observed` acts on an old
//!   target (it once removed the member the previous reconcile had just added for the new one).
//!   The cluster is read fresh unless the cached copy is at the resourceVersion of this process's
//!   last write to it (or of the fresh read after that write).
//! - **The members' own writes** ([`members_read`], [`cache_holds`]): a reconcile that may have
//!   created, deleted or patched a member makes the next ones list the members fresh until the
//!   cache is seen to hold what a fresh list returns (a member missed because the cache has not
//!   seen its creation would be created twice).
//! - **A cache only ever says "nothing to do"** (`children::service_in_shape`,
//!   `children::pdb_in_shape`): a Service or PDB is created, restored or deleted only on the
//!   evidence of a fresh read, so a stale copy can never make the operator adopt or change an
//!   object someone else put in its place.
//!
//! A cluster this process has not written since it started is read from the caches: their
//! initial lists were made after every write of an earlier process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use api::labels;
use api::v1alpha2::{EtcdCluster, EtcdMember};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use crate::lenient::Lenient;

/// Where a read comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    Cache,
    Fresh,
}

/// What this process knows of its own writes to one cluster object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnWrites {
    /// Every write this process made is in the object at this resourceVersion (the one the last
    /// write returned, or the one a fresh read after it gave).
    In(String),
    /// A write may have landed whose resourceVersion is not known (a reconcile failed after or
    /// during a write, or wrote outside the status writer): the next read is fresh.
    Unknown,
}

/// Safety rule "the cluster's own writes": read the cluster fresh unless the cache can hold
/// every write this process made to it. `own` is `None` for a cluster this process has not
/// written since it started (the cache's initial list came after every earlier write).
pub fn cluster_read(own: Option<&OwnWrites>, cached_version: Option<&str>) -> Read {
    match own {
        None => Read::Cache,
        Some(OwnWrites::In(written)) if cached_version == Some(written.as_str()) => Read::Cache,
        Some(_) => Read::Fresh,
    }
}

/// Safety rule "the members' own writes": list the members fresh while this process may have
/// written one that the cache has not been seen to hold.
pub fn members_read(members_written: bool) -> Read {
    if members_written {
        Read::Fresh
    } else {
        Read::Cache
    }
}

/// Whether the cache holds exactly what a fresh list returned: the same members at the same
/// resourceVersions. Only then may the next reconcile trust it again.
pub fn cache_holds(fresh: &[EtcdMember], cached: &[EtcdMember]) -> bool {
    let versions = |members: &[EtcdMember]| {
        let mut v: Vec<(Option<String>, Option<String>)> = members
            .iter()
            .map(|m| (m.uid(), m.resource_version()))
            .collect();
        v.sort();
        v
    };
    versions(fresh) == versions(cached)
}

/// What a reconcile leaves for the next one of the same cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Own {
    /// The cluster's own writes (`None`: none by this process).
    pub cluster: Option<OwnWrites>,
    /// This process may have written a member the cache has not been seen to hold.
    pub members_written: bool,
}

impl Own {
    /// After a failed reconcile: any write may have landed.
    pub fn after_failure() -> Self {
        Self {
            cluster: Some(OwnWrites::Unknown),
            members_written: true,
        }
    }
}

/// The cluster controller's caches of members, Services and PDBs, and what this process wrote
/// per cluster (by namespace and name, for the incarnation with the recorded UID).
pub struct Caches {
    members: Store<Lenient<EtcdMember>>,
    services: Store<Service>,
    pdbs: Store<PodDisruptionBudget>,
    ready: tokio::sync::OnceCell<bool>,
    own: Mutex<HashMap<String, (String, Own)>>,
}

impl Caches {
    pub fn new(
        members: Store<Lenient<EtcdMember>>,
        services: Store<Service>,
        pdbs: Store<PodDisruptionBudget>,
    ) -> Self {
        Self {
            members,
            services,
            pdbs,
            ready: tokio::sync::OnceCell::new(),
            own: Mutex::default(),
        }
    }

    /// Whether every cache has had its initial list (waits for it). `false` only once a watch is
    /// gone (the controller is stopping).
    ///
    /// One reconcile waits on the stores and the others on it: a store's readiness wakes only
    /// the last task that polled it (kube-runtime's `DelayedInit` keeps one waker), so after a
    /// restart, with up to 64 reconciles waiting at once (the controller's concurrency), all but
    /// one would sleep for good (seen in bench_scale: 63 of 1002 clusters never reconciled).
    pub async fn ready(&self) -> bool {
        *self
            .ready
            .get_or_init(|| async {
                self.members.wait_until_ready().await.is_ok()
                    && self.services.wait_until_ready().await.is_ok()
                    && self.pdbs.wait_until_ready().await.is_ok()
            })
            .await
    }

    /// What this process wrote to `cluster` (this incarnation) so far.
    pub fn own(&self, cluster: &EtcdCluster) -> Own {
        let (Some(key), Some(uid)) = (key(cluster), cluster.uid()) else {
            return Own::after_failure();
        };
        match self.own.lock() {
            Ok(own) => own
                .get(&key)
                .filter(|(recorded, _)| *recorded == uid)
                .map(|(_, own)| own.clone())
                .unwrap_or_default(),
            Err(_) => Own::after_failure(),
        }
    }

    /// Remember what the reconcile of `cluster` left (nothing is kept for a cluster without
    /// writes of its own, which reads from the caches).
    pub fn record(&self, cluster: &EtcdCluster, own: Own) {
        let (Some(key), Some(uid)) = (key(cluster), cluster.uid()) else {
            return;
        };
        if let Ok(mut map) = self.own.lock() {
            if own == Own::default() {
                map.remove(&key);
            } else {
                map.insert(key, (uid, own));
            }
        }
    }

    /// The cluster is gone: nothing of it is kept.
    pub fn forget(&self, cluster: &EtcdCluster) {
        if let (Some(key), Ok(mut map)) = (key(cluster), self.own.lock()) {
            map.remove(&key);
        }
    }

    /// The cluster's members as the cache has them, selected as the fresh list selects them (the
    /// cluster label, then the owner), in name order as the API lists them. `None` when one of
    /// them does not decode: the fresh list reports it.
    pub fn members(&self, cluster: &EtcdCluster) -> Option<Vec<EtcdMember>> {
        let ns = cluster.namespace();
        let name = cluster.name_any();
        let uid = cluster.uid()?;
        let labelled = self.members.state_filter(|m| {
            m.namespace() == ns && m.labels().get(labels::CLUSTER) == Some(&name)
        });
        let mut members = Vec::with_capacity(labelled.len());
        for m in labelled {
            let m = m.decoded().ok()?;
            if crate::controller_uid(m.as_ref()).as_deref() == Some(uid.as_str()) {
                members.push(m.as_ref().clone());
            }
        }
        members.sort_by_key(|m| m.name_any());
        Some(members)
    }

    /// The cached Service `name` in `ns`.
    pub fn service(&self, ns: &str, name: &str) -> Option<Arc<Service>> {
        self.services.get(&ObjectRef::new(name).within(ns))
    }

    /// The cached PodDisruptionBudget `name` in `ns`.
    pub fn pdb(&self, ns: &str, name: &str) -> Option<Arc<PodDisruptionBudget>> {
        self.pdbs.get(&ObjectRef::new(name).within(ns))
    }
}

fn key(cluster: &EtcdCluster) -> Option<String> {
    Some(format!("{}/{}", cluster.namespace()?, cluster.name_any()))
}

#[cfg(test)]
mod tests;
