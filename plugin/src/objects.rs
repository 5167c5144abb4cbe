//! The apiserver calls the commands make, each turned into the error a user reads (a 403 names
//! the verb and resource, a 404 the object and how to list the right names).

use std::fmt::Debug;

use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Call, Error, Result};

pub const CLUSTERS: &str = "etcdclusters.etcd-operator.cozystack.io";
pub const MEMBERS: &str = "etcdmembers.etcd-operator.cozystack.io";
pub const SNAPSHOTS: &str = "etcdsnapshots.etcd-operator.cozystack.io";
pub const SCHEDULES: &str = "etcdsnapshotschedules.etcd-operator.cozystack.io";
pub const RECOVERIES: &str = "etcdrecoveries.etcd-operator.cozystack.io";
pub const DEFRAGS: &str = "etcddefrags.etcd-operator.cozystack.io";
pub const PODS: &str = "pods";
pub const PODS_EXEC: &str = "pods/exec";
pub const SECRETS: &str = "secrets";

/// A kind of the API the commands read or create: its RBAC resource and its kind's name.
pub trait Kind:
    Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
{
    const RESOURCE: &'static str;
    /// The kind's name, as kubectl prints it.
    const KIND: &'static str;
    /// `kubectl get <short>`: how to list the names.
    const LIST: &'static str;
}

macro_rules! kind {
    ($t:ty, $kind:expr, $resource:expr, $list:expr) => {
        impl Kind for $t {
            const RESOURCE: &'static str = $resource;
            const KIND: &'static str = $kind;
            const LIST: &'static str = $list;
        }
    };
}

kind!(
    api::v1alpha2::EtcdCluster,
    "EtcdCluster",
    CLUSTERS,
    "etcdclusters"
);
kind!(
    api::v1alpha2::EtcdMember,
    "EtcdMember",
    MEMBERS,
    "etcdmembers"
);
kind!(
    api::v1alpha2::EtcdSnapshot,
    "EtcdSnapshot",
    SNAPSHOTS,
    "etcdsnapshots"
);
kind!(
    api::v1alpha2::EtcdSnapshotSchedule,
    "EtcdSnapshotSchedule",
    SCHEDULES,
    "etcdsnapshotschedules"
);
kind!(
    api::v1alpha2::EtcdRecovery,
    "EtcdRecovery",
    RECOVERIES,
    "etcdrecoveries"
);
kind!(
    api::v1alpha2::EtcdDefrag,
    "EtcdDefrag",
    DEFRAGS,
    "etcddefrags"
);
kind!(k8s_openapi::api::core::v1::Pod, "Pod", PODS, "pods");
kind!(
    k8s_openapi::api::core::v1::Secret,
    "Secret",
    SECRETS,
    "secrets"
);

/// The namespace the commands work in, and the client.
#[derive(Clone)]
pub struct Objects {
    pub client: Client,
    pub namespace: String,
}

impl Objects {
    fn api<K: Kind>(&self) -> Api<K> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// `get` one object; a missing one says how to list the names.
    pub async fn get<K: Kind>(&self, name: &str) -> Result<K> {
        let call = Call::new("get", K::RESOURCE, &self.namespace).named(name);
        self.api::<K>().get(name).await.map_err(|e| {
            Error::from_kube(call, K::KIND, e).hint(format!(
                "`kubectl get {} -n {}` lists them",
                K::LIST,
                self.namespace
            ))
        })
    }

    /// [`Objects::get`], with the object's JSON as stored (fields this build's types drop
    /// included).
    pub async fn get_with_json<K: Kind>(&self, name: &str) -> Result<(K, serde_json::Value)> {
        let call = Call::new("get", K::RESOURCE, &self.namespace).named(name);
        let resource = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.namespace, &resource);
        let object = api.get(name).await.map_err(|e| {
            Error::from_kube(call.clone(), K::KIND, e).hint(format!(
                "`kubectl get {} -n {}` lists them",
                K::LIST,
                self.namespace
            ))
        })?;
        let json =
            serde_json::to_value(&object).map_err(|e| Error::Failed(format!("{call}: {e}")))?;
        let typed = serde_json::from_value(json.clone())
            .map_err(|e| Error::Failed(format!("{call}: the object does not decode: {e}")))?;
        Ok((typed, json))
    }

    /// `list` the namespace's objects, with a label selector when given.
    pub async fn list<K: Kind>(&self, selector: Option<&str>) -> Result<Vec<K>> {
        let call = Call::new("list", K::RESOURCE, &self.namespace);
        let mut params = ListParams::default();
        if let Some(s) = selector {
            params = params.labels(s);
        }
        self.api::<K>()
            .list(&params)
            .await
            .map(|l| l.items)
            .map_err(|e| Error::from_kube(call, K::KIND, e))
    }

    /// `create` the object (its name, or its `generateName` filled in by the apiserver).
    pub async fn create<K: Kind>(&self, object: &K) -> Result<K> {
        let call = Call::new("create", K::RESOURCE, &self.namespace);
        self.api::<K>()
            .create(&PostParams::default(), object)
            .await
            .map_err(|e| Error::from_kube(call, K::KIND, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_kubectl_names_them() {
        assert_eq!(<api::v1alpha2::EtcdSnapshot as Kind>::KIND, "EtcdSnapshot");
        assert_eq!(<k8s_openapi::api::core::v1::Pod as Kind>::KIND, "Pod");
        assert_eq!(<api::v1alpha2::EtcdRecovery as Kind>::RESOURCE, RECOVERIES);
    }
}
