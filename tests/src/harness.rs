//! Small helpers the suites share: waiting for a condition with a deadline, and creating
//! namespaced objects from JSON manifests. Both panic with what they were doing: they are for
//! test bodies, not for the support code.

use std::future::Future;
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::Value;

/// Poll `probe` every 250 ms until it returns `Ok`, panicking after `timeout` with its last error.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().await {
            Ok(v) => return v,
            Err(e) => e,
        };
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Create the object `value` describes in `ns`.
pub async fn create<K>(client: &Client, ns: &str, value: Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let object: K =
        serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{e}: {value}"));
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {value}: {e}"))
}
