//! The documentation a user reads next to the chart, kept complete by tests: the chart README's
//! table names every value of values.yaml (and nothing else), README.md's Documentation section
//! links every page of docs/, and docs/troubleshooting.md explains every condition reason
//! (api/src/conditions.rs) and every Event reason (controller/src/events.rs); their relative
//! links resolve.

use std::collections::BTreeMap;

use super::monitoring::doc_anchors;
use super::*;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every key path of `value`, maps and leaves alike (`webhook`, `webhook.certificate`,
/// `webhook.certificate.mode`, …); lists are leaves.
fn key_paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(map) = value.as_object() {
        for (key, child) in map {
            let path = format!("{prefix}{key}");
            key_paths(child, &format!("{path}."), out);
            out.insert(path);
        }
    }
}

/// The code spans of the first cell of each row of the Markdown tables in `text`.
fn first_column_code(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix('|'))
        .filter_map(|row| row.split('|').next())
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn chart_readme_documents_every_value_and_only_values() {
    let chart = helm::chart_dir();
    let values = parse_documents(&read(&chart.join("values.yaml")))
        .into_iter()
        .next()
        .unwrap_or_default();
    let mut paths = BTreeSet::new();
    key_paths(&values, "", &mut paths);
    assert!(
        paths.contains("webhook.certificate.secret.caBundle"),
        "{paths:?}"
    );
    let documented = first_column_code(&read(&chart.join("README.md")));

    let missing: Vec<_> = paths.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "charts/etcd-operator/README.md's table lacks {missing:?}"
    );
    // `global` is Helm's, not a value of values.yaml.
    let stale: Vec<_> = documented
        .iter()
        .filter(|d| !paths.contains(*d) && d.as_str() != "global")
        .collect();
    assert!(
        stale.is_empty(),
        "charts/etcd-operator/README.md documents {stale:?}, which values.yaml does not have"
    );
    let broken = broken_links(&chart.join("README.md"));
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The relative links of Markdown page `page` (`other.md`, `../../docs/x.md#anchor`, `#anchor`)
/// that name no file, or no heading of it.
fn broken_links(page: &Path) -> Vec<String> {
    let text = read(page);
    let dir = page.parent().expect("a page in a directory");
    let mut broken = Vec::new();
    for target in text
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
    {
        if target.contains("://") {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target, None),
        };
        let path = if file.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(file)
        };
        if !path.exists() {
            broken.push(format!("{target}: no such file"));
        } else if let Some(anchor) = anchor {
            if !doc_anchors(&path).contains(anchor) {
                broken.push(format!("{target}: no such heading"));
            }
        }
    }
    broken
}

/// README.md's `## Documentation` section, up to the next section.
fn readme_docs_index() -> String {
    let readme = read(&repo_root().join("README.md"));
    let (_, section) = readme
        .split_once("\n## Documentation\n")
        .expect("README.md has a `## Documentation` section");
    section
        .split("\n## ")
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn readme_docs_index_links_every_page_of_docs() {
    let index = readme_docs_index();
    let mut docs: Vec<String> = std::fs::read_dir(repo_root().join("docs"))
        .or_panic()
        .map(|e| e.or_panic().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .collect();
    docs.sort();
    assert!(docs.len() > 10, "{docs:?}");
    let unlinked: Vec<_> = docs
        .iter()
        .filter(|name| !index.contains(&format!("](docs/{name})")))
        .collect();
    assert!(
        unlinked.is_empty(),
        "README.md's Documentation section does not link {unlinked:?}"
    );
    let broken = broken_links(&repo_root().join("README.md"));
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The strings of the `pub const … : &str = "…";` items of `pub mod reason` in
/// api/src/conditions.rs, read from the source so a new constant needs no list kept by hand.
fn condition_reasons() -> BTreeSet<String> {
    let source = read(&repo_root().join("api/src/conditions.rs"));
    let (_, module) = source
        .split_once("pub mod reason {")
        .expect("api/src/conditions.rs has `pub mod reason`");
    let reasons: BTreeSet<String> = module
        .lines()
        .take_while(|l| *l != "}")
        .filter(|l| l.trim_start().starts_with("pub const "))
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .collect();
    assert!(reasons.contains(api::conditions::reason::QUORUM_LOST));
    assert!(reasons.contains(api::conditions::reason::MEMBER_POD_STUCK));
    reasons
}

#[test]
fn troubleshooting_explains_every_condition_and_event_reason() {
    let page = repo_root().join("docs/troubleshooting.md");
    let text = read(&page);
    let conditions = condition_reasons();
    let events: BTreeSet<String> = controller::events::Reason::ALL
        .iter()
        .map(|r| r.reason().to_string())
        .collect();
    let explained = first_column_code(&text);
    let mut missing: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for (what, reasons) in [("condition", &conditions), ("Event", &events)] {
        missing.insert(what, reasons.difference(&explained).collect());
    }
    assert!(
        missing.values().all(Vec::is_empty),
        "docs/troubleshooting.md has no table row for the reasons {missing:?}"
    );

    let broken = broken_links(&page);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
