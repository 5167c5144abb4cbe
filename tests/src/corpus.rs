//! The shared validation corpus (`api::corpus`) judged by a real apiserver, next to the Rust
//! validator's verdict on the same case, so a suite can require one verdict from both (and later
//! from the webhook).
//!
//! An update case creates its `oldSpec` object first (which must be accepted), then replaces it
//! with the case's spec at the fetched resourceVersion.

use std::sync::LazyLock;

use api::corpus::Case;
use futures::stream::{self, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::Client;
use serde_json::Value;

/// Requests in flight at once while judging a corpus.
const CONCURRENCY: usize = 8;

/// How one judge ruled on a case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Rejected, with the message the judge gave (the apiserver's Status message).
    Denied(String),
}

impl Verdict {
    pub fn allowed(&self) -> bool {
        matches!(self, Verdict::Allowed)
    }
}

/// The API resource of a kind of the project's CRDs, from the generated CRDs.
pub fn resource(kind: &str) -> Option<ApiResource> {
    // Generating the CRDs builds every schema; do it once per process.
    static RESOURCES: LazyLock<Vec<ApiResource>> = LazyLock::new(|| {
        api::crd::all()
            .into_iter()
            .filter_map(|crd| {
                let version = crd.spec.versions.first()?.name.clone();
                Some(ApiResource {
                    api_version: format!("{}/{version}", crd.spec.group),
                    group: crd.spec.group.clone(),
                    version,
                    kind: crd.spec.names.kind.clone(),
                    plural: crd.spec.names.plural.clone(),
                })
            })
            .collect()
    });
    RESOURCES.iter().find(|r| r.kind == kind).cloned()
}

/// A DNS-1123 object name for the `index`th case, unique within a namespace.
pub fn object_name(index: usize, case: &Case) -> String {
    let mut name = format!("c{index:03}-{}", case.name.to_ascii_lowercase());
    // 56: the longest EtcdCluster name whose Services and member Pods still fit in a DNS label;
    // the kinds that name their runs after themselves allow less.
    name.truncate(match case.kind.as_str() {
        "EtcdSnapshotSchedule" => api::v1alpha2::MAX_SCHEDULE_NAME,
        "EtcdDefragPolicy" => api::v1alpha2::MAX_POLICY_NAME,
        _ => 56,
    });
    name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// The apiserver's verdict on `case`, judged as object `name` in namespace `ns`. `Err` means the
/// case could not be judged (its old object was refused, or the request failed for a reason other
/// than validation).
pub async fn apiserver_verdict(
    client: &Client,
    ns: &str,
    case: &Case,
    name: &str,
) -> Result<Verdict, String> {
    let resource =
        resource(&case.kind).ok_or_else(|| format!("no CRD for kind {:?}", case.kind))?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let to_object = |value: Value| {
        serde_json::from_value::<DynamicObject>(value).map_err(|e| format!("bad object: {e}"))
    };
    let pp = PostParams::default();
    let result = match case.old_object(name, ns) {
        None => api.create(&pp, &to_object(case.object(name, ns))?).await,
        Some(old) => {
            let created = api.create(&pp, &to_object(old)?).await.map_err(|e| {
                format!(
                    "its oldSpec object was refused, so the update cannot be judged: {}",
                    message(&e)
                )
            })?;
            let mut new = to_object(case.object(name, ns))?;
            new.metadata.resource_version = created.metadata.resource_version;
            api.replace(name, &pp, &new).await
        }
    };
    match result {
        Ok(_) => Ok(Verdict::Allowed),
        // 422 Invalid (schema, CEL) and 400 BadRequest (undecodable values) are the verdicts;
        // anything else is the test environment failing.
        Err(kube::Error::Api(status)) if matches!(status.code, 400 | 422) => {
            Ok(Verdict::Denied(status.message.clone()))
        }
        Err(e) => Err(format!("request failed: {}", message(&e))),
    }
}

/// The Rust validator's verdict (`api::validate::object`) on `case`, every violation in the
/// message.
pub fn rust_verdict(case: &Case) -> Verdict {
    let new = case.object("x", "default");
    let old = case.old_object("x", "default");
    let violations = api::validate::object(&case.kind, &new, old.as_ref());
    if violations.is_empty() {
        Verdict::Allowed
    } else {
        Verdict::Denied(
            violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}

/// What is wrong with `judge`'s `verdict` on `case`, if anything: the wrong verdict, or a
/// rejection whose message does not name the case's field.
pub fn disagreement(case: &Case, judge: &str, verdict: &Verdict) -> Option<String> {
    match (case.allowed, verdict) {
        (true, Verdict::Allowed) => None,
        (true, Verdict::Denied(msg)) => Some(format!(
            "{}: {judge} rejected a case the corpus allows: {msg}",
            case.name
        )),
        (false, Verdict::Allowed) => Some(format!(
            "{}: {judge} accepted a case the corpus rejects (field {})",
            case.name,
            case.field.as_deref().unwrap_or("?")
        )),
        (false, Verdict::Denied(msg)) => match &case.field {
            Some(field) if !msg.contains(field.as_str()) => Some(format!(
                "{}: {judge} rejected it without naming {field}: {msg}",
                case.name
            )),
            _ => None,
        },
    }
}

/// Judge every case on the apiserver (and by the Rust validator) in namespace `ns`; return every
/// disagreement with the corpus, in corpus order.
pub async fn disagreements(client: &Client, ns: &str, cases: &[Case]) -> Vec<String> {
    let mut found: Vec<(usize, String)> = stream::iter(cases.iter().enumerate())
        .map(|(index, case)| async move {
            let mut out = Vec::new();
            let name = object_name(index, case);
            match apiserver_verdict(client, ns, case, &name).await {
                Ok(verdict) => out.extend(disagreement(case, "the apiserver", &verdict)),
                Err(e) => out.push(format!("{}: {e}", case.name)),
            }
            out.extend(disagreement(
                case,
                "the Rust validator",
                &rust_verdict(case),
            ));
            out.into_iter().map(move |d| (index, d))
        })
        .buffer_unordered(CONCURRENCY)
        .flat_map(stream::iter)
        .collect()
        .await;
    found.sort_by_key(|(index, _)| *index);
    found.into_iter().map(|(_, d)| d).collect()
}

fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_dns_labels() {
        for (index, case) in api::corpus::cases().iter().enumerate() {
            let name = object_name(index, case);
            assert!(name.len() <= 56, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
            assert!(
                name.ends_with(|c: char| c.is_ascii_alphanumeric()),
                "{name}"
            );
        }
    }

    #[test]
    fn every_corpus_kind_has_a_resource() {
        for case in api::corpus::cases() {
            let r = resource(&case.kind).unwrap_or_else(|| panic!("{}", case.kind));
            assert_eq!(r.api_version, api::v1alpha2::API_VERSION);
        }
    }

    #[test]
    fn rejection_must_name_the_field() {
        let case = api::corpus::cases()
            .into_iter()
            .find(|c| !c.allowed && c.field.is_some())
            .unwrap();
        let field = case.field.clone().unwrap();
        assert!(disagreement(&case, "j", &Verdict::Denied(format!("{field}: bad"))).is_none());
        assert!(disagreement(&case, "j", &Verdict::Denied("bad".into())).is_some());
        assert!(disagreement(&case, "j", &Verdict::Allowed).is_some());
    }
}
