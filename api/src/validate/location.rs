//! Where a snapshot is stored (an EtcdSnapshot's or a schedule's destination) or read from (an
//! EtcdCluster's restore source): exactly one of S3 or a PVC, and for a restore the exact object
//! key or file path.

use super::fields::non_empty;
use super::placement::DNS1123_SUBDOMAIN_RE;
use super::Violation;
use crate::v1alpha2::{
    PvcLocation, RestoreSource, S3Location, SnapshotDestination, CEL_DESTINATION_ONE_OF,
    CEL_RESTORE_ONE_OF, CEL_RESTORE_PVC_SUBPATH, CEL_RESTORE_S3_KEY, CEL_S3_ONE_CREDENTIAL,
    CEL_S3_SERVICE_ACCOUNT_NAME, CEL_WEB_IDENTITY_STS_ENDPOINT, DNS1123_SUBDOMAIN_MAX_LEN,
};

fn s3_location(prefix: &str, s3: &S3Location, out: &mut Vec<Violation>) {
    out.extend(non_empty(&format!("{prefix}.bucket"), &s3.bucket));
    if let Some(r) = &s3.credentials_secret_ref {
        out.extend(non_empty(
            &format!("{prefix}.credentialsSecretRef.name"),
            &r.name,
        ));
    }
    if let Some(name) = s3.service_account_name.as_deref().filter(|n| !n.is_empty()) {
        if name.chars().count() > DNS1123_SUBDOMAIN_MAX_LEN || !DNS1123_SUBDOMAIN_RE.is_match(name)
        {
            out.push(
                Violation::of_rule(
                    format!("{prefix}.serviceAccountName"),
                    CEL_S3_SERVICE_ACCOUNT_NAME,
                    "",
                    "`kubectl get serviceaccounts` lists the names; remove the field for the namespace's default",
                )
                .value(format!("{name:?}")),
            );
        }
    }
    if let Some(identity) = &s3.web_identity {
        if s3.credentials_secret_ref.is_some() {
            out.push(Violation::of_rule(prefix, CEL_S3_ONE_CREDENTIAL, "", ""));
        }
        out.extend(non_empty(
            &format!("{prefix}.webIdentity.roleArn"),
            &identity.role_arn,
        ));
        if let Some(endpoint) = identity.sts_endpoint.as_deref().filter(|e| !e.is_empty()) {
            if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
                out.push(
                    Violation::of_rule(
                        format!("{prefix}.webIdentity.stsEndpoint"),
                        CEL_WEB_IDENTITY_STS_ENDPOINT,
                        "",
                        "",
                    )
                    .value(format!("{endpoint:?}")),
                );
            }
        }
    }
}

fn pvc_location(prefix: &str, pvc: &PvcLocation, out: &mut Vec<Violation>) {
    out.extend(non_empty(&format!("{prefix}.claimName"), &pvc.claim_name));
}

pub(super) fn restore_source(prefix: &str, source: &RestoreSource) -> Vec<Violation> {
    let mut out = Vec::new();
    exactly_one_location(
        prefix,
        source.s3.is_some(),
        source.pvc.is_some(),
        CEL_RESTORE_ONE_OF,
        &mut out,
    );
    out.extend(restore_location(prefix, source));
    out
}

/// The rules of a restore location's parts (the exact S3 key, the exact PVC path), whichever
/// are set; how many are set is the caller's rule.
pub(super) fn restore_location(prefix: &str, source: &RestoreSource) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Some(s3) = &source.s3 {
        let field = format!("{prefix}.s3.key");
        s3_location(&format!("{prefix}.s3"), s3, &mut out);
        match s3.key.as_deref() {
            None | Some("") => out.push(Violation::of_rule(
                field,
                CEL_RESTORE_S3_KEY,
                "it is not set",
                "copy it from the snapshot's status.artifact.uri without the s3://<bucket>/ prefix",
            )),
            Some(k) if k.ends_with('/') => out.push(
                Violation::of_rule(
                    field,
                    CEL_RESTORE_S3_KEY,
                    "this one is a prefix",
                    format!("append the snapshot's file name, e.g. {k}<snapshot-name>.db"),
                )
                .value(format!("{k:?}")),
            ),
            _ => {}
        }
    }
    if let Some(pvc) = &source.pvc {
        let field = format!("{prefix}.pvc.subPath");
        pvc_location(&format!("{prefix}.pvc"), pvc, &mut out);
        match pvc.sub_path.as_deref() {
            None | Some("") => out.push(Violation::of_rule(
                field,
                CEL_RESTORE_PVC_SUBPATH,
                "it is not set",
                "set it to e.g. snapshots/my-etcd-2026-06-02.db",
            )),
            Some(p) if p.ends_with('/') => out.push(
                Violation::of_rule(
                    field,
                    CEL_RESTORE_PVC_SUBPATH,
                    "this one is a directory",
                    format!("append the snapshot's file name, e.g. {p}<snapshot-name>.db"),
                )
                .value(format!("{p:?}")),
            ),
            _ => {}
        }
    }
    out
}

/// Exactly one of s3 or pvc; `rule` is the message of the location type's CEL rule.
fn exactly_one_location(
    prefix: &str,
    s3: bool,
    pvc: bool,
    rule: &'static str,
    out: &mut Vec<Violation>,
) {
    let problem = match (s3, pvc) {
        (true, true) => "this one sets both",
        (false, false) => "this one sets neither",
        _ => return,
    };
    out.push(Violation::of_rule(prefix, rule, problem, ""));
}

pub(super) fn destination(prefix: &str, d: &SnapshotDestination) -> Vec<Violation> {
    let mut out = Vec::new();
    exactly_one_location(
        prefix,
        d.s3.is_some(),
        d.pvc.is_some(),
        CEL_DESTINATION_ONE_OF,
        &mut out,
    );
    if let Some(s3) = &d.s3 {
        s3_location(&format!("{prefix}.s3"), s3, &mut out);
    }
    if let Some(pvc) = &d.pvc {
        pvc_location(&format!("{prefix}.pvc"), pvc, &mut out);
    }
    out
}
