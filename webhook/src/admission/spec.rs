//! Judging the spec of the kinds `api::validate` covers ([`super::SPEC_KINDS`]): the
//! violations as a 422 `Invalid` with one cause per field, and the advice on an EtcdCluster as
//! warnings. Used by both webhooks; the rules themselves live in `api::validate`.

use api::v1alpha2::{EtcdClusterSpec, GROUP};
use kube::core::admission::{AdmissionResponse, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Status};

use super::{deny, deny_malformed, display_name, Request};
use crate::config::Policy;
use crate::warnings;

pub(super) fn validate_spec(
    req: &Request,
    response: AdmissionResponse,
    policy: &Policy,
) -> AdmissionResponse {
    let kind = req.kind.kind.as_str();
    let Some(new) = &req.object else {
        return deny_malformed(
            response,
            format!("the {kind} review carries no object to validate"),
        );
    };
    let old = match (&req.operation, &req.old_object) {
        (Operation::Update, Some(old)) => Some(old),
        (Operation::Update, None) => {
            return deny_malformed(
                response,
                format!("the {kind} UPDATE review carries no oldObject, so the transition rules cannot be checked"),
            )
        }
        _ => None,
    };
    if req.sub_resource.is_some() {
        return response; // status (or another subresource): the spec cannot change through it
    }
    if let Some(old) = old {
        if new.data.get("spec") == old.data.get("spec") {
            return response;
        }
    }

    // The whole objects, not only `data`: the name rule reads `metadata.name`.
    let whole = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_else(|_| o.data.clone());
    let old_whole = old.map(whole);
    let violations = api::validate::object(kind, &whole(new), old_whole.as_ref());
    let mut response = if violations.is_empty() {
        response
    } else {
        let name = display_name(req, new);
        let message = api::validate::render(kind, &name, &violations);
        let details = StatusDetails {
            name,
            group: GROUP.to_string(),
            kind: kind.to_string(),
            causes: violations
                .iter()
                .map(|v| {
                    // kubectl prints a cause as `<field>: <message>`: keep the field out of the
                    // message so it is not said twice.
                    let full = v.to_string();
                    let message = full
                        .strip_prefix(&format!("{}: ", v.field))
                        .map(str::to_string)
                        .unwrap_or(full);
                    StatusCause {
                        reason: "FieldValueInvalid".to_string(),
                        message,
                        field: v.field.clone(),
                    }
                })
                .collect(),
            uid: String::new(),
            retry_after_seconds: 0,
        };
        deny(
            response,
            Status::failure(&message, "Invalid")
                .with_code(422)
                .with_details(details),
        )
    };
    if kind == "EtcdCluster" {
        if let Some(Ok(spec)) = new
            .data
            .get("spec")
            .map(|s| api::validate::parse::<EtcdClusterSpec>("spec", s))
        {
            let mut advice = warnings::cluster_advice(&spec, policy);
            advice.extend(warnings::plaintext_advice(&spec));
            if !advice.is_empty() {
                response.warnings = Some(advice);
            }
        }
    }
    response
}
