//! The shared corpus of validation cases (`api/testdata/validation-corpus.yaml`): every suite that
//! judges objects (client-side CEL, the Rust validator, a real apiserver, the webhook) runs it and
//! must reach the recorded verdict.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::v1alpha2::API_VERSION;

const CORPUS_YAML: &str = include_str!("../testdata/validation-corpus.yaml");

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Case {
    pub name: String,
    pub rule: String,
    pub kind: String,
    /// The object's own `metadata.name`, for a case about the name; without it each suite picks
    /// one. Create cases only: a suite updates the object under the name it picked.
    #[serde(default)]
    pub metadata_name: Option<String>,
    pub spec: Value,
    #[serde(default)]
    pub old_spec: Option<Value>,
    pub allowed: bool,
    #[serde(default)]
    pub field: Option<String>,
}

impl Case {
    /// The object to create (or to update to), in the given namespace, named `name` unless the
    /// case names it itself.
    pub fn object(&self, name: &str, namespace: &str) -> Value {
        Self::wrap(&self.kind, &self.spec, self.name_or(name), namespace)
    }

    /// The object to create first, for an update case.
    pub fn old_object(&self, name: &str, namespace: &str) -> Option<Value> {
        self.old_spec
            .as_ref()
            .map(|spec| Self::wrap(&self.kind, spec, self.name_or(name), namespace))
    }

    fn name_or<'a>(&'a self, name: &'a str) -> &'a str {
        self.metadata_name.as_deref().unwrap_or(name)
    }

    fn wrap(kind: &str, spec: &Value, name: &str, namespace: &str) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        })
    }
}

/// Every case of the corpus. Panics on a malformed corpus file: it is compiled in, so a broken
/// file is a build-time defect, caught by the first test that loads it.
pub fn cases() -> Vec<Case> {
    let cases: Vec<Case> =
        yaml_serde::from_str(CORPUS_YAML).expect("api/testdata/validation-corpus.yaml parses");
    cases
}
