//! Whether the ServiceAccount an S3 location names ([`api::v1alpha2::S3Location`]'s
//! `serviceAccountName`, its cloud identity) exists. Kubernetes refuses every Pod that names a
//! missing one, and a Job says so only in its Events, so the snapshot and recovery controllers
//! look before they create the Pods' owner and say what to create. Metadata only.

use api::v1alpha2::S3Location;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;

/// Why the Pods of `s3` could not run (its ServiceAccount is missing), if so. `field` is where
/// the name was given, `then` what to create once the ServiceAccount exists.
pub async fn missing(
    client: &kube::Client,
    ns: &str,
    s3: Option<&S3Location>,
    field: &str,
    then: &str,
) -> Result<Option<String>, kube::Error> {
    let Some(name) = s3
        .and_then(|s| s.service_account_name.as_deref())
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    if api.get_metadata_opt(name).await?.is_some() {
        return Ok(None);
    }
    Ok(Some(format!(
        "ServiceAccount {name} ({field}) does not exist in namespace {ns}, and Kubernetes refuses \
         every Pod that names a missing one; create it (kubectl -n {ns} create serviceaccount \
         {name}, with the annotations your cloud's identity needs: docs/cloud-identity.md), then {then}"
    )))
}
