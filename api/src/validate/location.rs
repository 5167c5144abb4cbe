//! Where a snapshot is stored (an EtcdSnapshot's or a schedule's destination) or read from (an
//! EtcdCluster's restore source): exactly one of S3 or a PVC, and for a restore the exact object
//! key or file path.

use super::fields::non_empty;
use super::Violation;
use crate::v1alpha2::{PvcLocation, RestoreSource, S3Location, SnapshotDestination};

fn s3_location(prefix: &str, s3: &S3Location, out: &mut Vec<Violation>) {
    out.extend(non_empty(&format!("{prefix}.bucket"), &s3.bucket));
    if let Some(r) = &s3.credentials_secret_ref {
        out.extend(non_empty(
            &format!("{prefix}.credentialsSecretRef.name"),
            &r.name,
        ));
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
        "read from",
        &mut out,
    );
    if let Some(s3) = &source.s3 {
        let field = format!("{prefix}.s3.key");
        s3_location(&format!("{prefix}.s3"), s3, &mut out);
        match s3.key.as_deref() {
            None | Some("") => out.push(Violation::new(
                field,
                "is required for a restore source: it is the exact object key of the snapshot",
                "copy it from the snapshot's status.artifact.uri without the s3://<bucket>/ prefix, e.g. my-etcd/my-etcd-2026-06-02.db",
            )),
            Some(k) if k.ends_with('/') => out.push(
                Violation::new(
                    field,
                    "is a prefix, but a restore source needs the exact object key",
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
            None | Some("") => out.push(Violation::new(
                field,
                "is required for a restore source: it is the exact path of the snapshot .db file within the volume",
                "set it to e.g. snapshots/my-etcd-2026-06-02.db",
            )),
            Some(p) if p.ends_with('/') => out.push(
                Violation::new(
                    field,
                    "is a directory, but a restore source needs the exact .db file path",
                    format!("append the snapshot's file name, e.g. {p}<snapshot-name>.db"),
                )
                .value(format!("{p:?}")),
            ),
            _ => {}
        }
    }
    out
}

fn exactly_one_location(prefix: &str, s3: bool, pvc: bool, verb: &str, out: &mut Vec<Violation>) {
    let problem = match (s3, pvc) {
        (true, true) => "sets both s3 and pvc",
        (false, false) => "sets neither s3 nor pvc",
        _ => return,
    };
    out.push(Violation::new(
        prefix,
        problem,
        format!("set exactly one of s3 or pvc to say where the snapshot is {verb}"),
    ));
}

pub(super) fn destination(prefix: &str, d: &SnapshotDestination) -> Vec<Violation> {
    let mut out = Vec::new();
    exactly_one_location(prefix, d.s3.is_some(), d.pvc.is_some(), "stored", &mut out);
    if let Some(s3) = &d.s3 {
        s3_location(&format!("{prefix}.s3"), s3, &mut out);
    }
    if let Some(pvc) = &d.pvc {
        pvc_location(&format!("{prefix}.pvc"), pvc, &mut out);
    }
    out
}
