//! Our CRDs are a superset of the reference operator's: every property path its CRDs have (the
//! four of its first release and the `EtcdDefragPolicy` of v0.5.5)
//! (`../shared/reference/schema/*.paths`, one `path :type` a line) exists in ours with the same
//! OpenAPI type, so objects the reference wrote keep every field through our schema (the
//! apiserver prunes what a schema lacks) and the reference can read what we write.
//!
//! Path syntax: `.` separates properties, `[]` is an array's items, `{}` a map's values; the type
//! `?` is int-or-string (a quantity). Bodies of core Kubernetes types are not listed. A type is
//! compatible when ours accepts every value the reference's does (see [`compatible`]).

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// The reference's path lists: `../shared/reference/schema` next to the workspace (where the
/// project's specification lives), else the copy in `api/testdata/reference-schema`, so a
/// clone without the shared directory still checks the schema. When both exist they must be
/// identical: the copy is refreshed from the shared lists, never edited.
fn reference_dir() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = here.join("../../shared/reference/schema");
    let copy = here.join("testdata/reference-schema");
    if !shared.is_dir() {
        return copy;
    }
    for entry in std::fs::read_dir(&shared).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let theirs = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let ours = std::fs::read_to_string(copy.join(&name)).unwrap_or_default();
        assert_eq!(
            ours,
            theirs,
            "api/testdata/reference-schema/{} differs from {}: copy the shared list over it",
            name.to_string_lossy(),
            entry.path().display()
        );
    }
    shared
}

/// One step of a path: a property, an array's items, or a map's values.
enum Step<'a> {
    Property(&'a str),
    Items,
    Values,
}

fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for segment in path.split('.') {
        let name_end = segment.find(['[', '{']).unwrap_or(segment.len());
        out.push(Step::Property(&segment[..name_end]));
        let mut rest = &segment[name_end..];
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("[]") {
                out.push(Step::Items);
                rest = r;
            } else if let Some(r) = rest.strip_prefix("{}") {
                out.push(Step::Values);
                rest = r;
            } else {
                panic!("cannot read path segment {segment:?} of {path:?}");
            }
        }
    }
    out
}

fn walk<'s>(root: &'s JSONSchemaProps, path: &str) -> Option<&'s JSONSchemaProps> {
    let mut at = root;
    for step in steps(path) {
        at = match step {
            Step::Property(name) => at.properties.as_ref()?.get(name)?,
            Step::Items => match at.items.as_ref()? {
                JSONSchemaPropsOrArray::Schema(s) => s,
                JSONSchemaPropsOrArray::Schemas(_) => return None,
            },
            Step::Values => match at.additional_properties.as_ref()? {
                JSONSchemaPropsOrBool::Schema(s) => s,
                JSONSchemaPropsOrBool::Bool(_) => return None,
            },
        };
    }
    Some(at)
}

fn type_of(schema: &JSONSchemaProps) -> String {
    if schema.x_kubernetes_int_or_string == Some(true) {
        return "?".to_string();
    }
    schema.type_.clone().unwrap_or_else(|| "<none>".to_string())
}

/// Our type accepts every value the reference's does: the same type, or int-or-string where
/// the reference has a plain string (our `autoCompactionRetention` also takes an integer).
fn compatible(ours: &str, reference: &str) -> bool {
    ours == reference || (ours == "?" && reference == "string")
}

#[test]
fn our_crds_have_every_path_and_type_of_the_reference_crds() {
    let dir = reference_dir();
    assert!(
        dir.is_dir(),
        "the reference schema lists are expected in {} (../shared/reference/schema next to the \
         workspace, or their copy in api/testdata/reference-schema)",
        dir.display()
    );
    let crds = api::crd::all();
    let mut misses = Vec::new();
    let mut checked = 0;
    for (file, kind) in [
        ("etcdclusters.paths", "EtcdCluster"),
        ("etcdmembers.paths", "EtcdMember"),
        ("etcdsnapshots.paths", "EtcdSnapshot"),
        ("etcddefrags.paths", "EtcdDefrag"),
        ("etcddefragpolicies.paths", "EtcdDefragPolicy"),
    ] {
        let list_path = dir.join(file);
        let list = std::fs::read_to_string(&list_path)
            .unwrap_or_else(|e| panic!("{}: {e}", list_path.display()));
        let root = crds
            .iter()
            .find(|c| c.spec.names.kind == kind)
            .and_then(|crd| crd.spec.versions[0].schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref());
        if root.is_none() {
            misses.push(format!(
                "{kind}: no such CRD (with a schema) in api::crd::all()"
            ));
        }
        for line in list.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (path, want) = line
                .rsplit_once(" :")
                .unwrap_or_else(|| panic!("{file}: cannot read line {line:?}"));
            checked += 1;
            match root.and_then(|root| walk(root, path)) {
                None => misses.push(format!("{kind} {path}: missing (want {want})")),
                Some(schema) => {
                    let got = type_of(schema);
                    if !compatible(&got, want) {
                        misses.push(format!("{kind} {path}: type {got}, want {want}"));
                    }
                }
            }
        }
    }
    assert!(checked > 230, "too few reference paths read: {checked}");
    assert!(
        misses.is_empty(),
        "{} reference path(s) missing or mistyped in our CRDs:\n  {}",
        misses.len(),
        misses.join("\n  ")
    );
}
