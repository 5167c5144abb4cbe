//! The controller's layers, checked against its source tree (see docs/architecture.md).
//!
//! - The pure core (planners, status rendering, builders, naming) does no I/O: no async, no
//!   API client, no controller context. Its tests need no runtime and no cluster.
//! - Controllers are siblings: none reaches into another's module, or into the snapshot agent's
//!   ([`KNOWN_BORROWINGS`] is empty and stays so). Put what both need into a shared module.
//! - The low modules (pods, etcd, tls, builders, naming, topology, config, ...) name no controller
//!   module: arrows run down only ([`LOW`]).
//! - Nothing in the controller imports the snapshot agent (`agent/`); only `main.rs` wires its
//!   subcommands.
//! - Every reconcile goes through the one wrapper (`shell.rs`): `run.rs` hands each controller's
//!   reconcile and error policy to it, and no controller times, counts or backs off its own
//!   reconciles (except the files in [`OWN_WRAPPERS`], on their way out).
//!
//! Source text is read as text: comments and strings are scanned too, which errs on the strict
//! side (a doc comment naming `Api<…>` in a pure file must be reworded).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn relative(p: &Path) -> String {
    p.strip_prefix(src())
        .unwrap_or(p)
        .display()
        .to_string()
        .replace('\\', "/")
}

/// The pure core: files whose logic takes values and returns values.
const PURE: &[&str] = &[
    "cluster/plan/mod.rs",
    "cluster/plan/action.rs",
    "cluster/plan/bootstrap.rs",
    "cluster/plan/formed.rs",
    "cluster/plan/rollout.rs",
    "cluster/plan/tests/mod.rs",
    "cluster/plan/tests/bootstrap.rs",
    "cluster/plan/tests/locking.rs",
    "cluster/plan/tests/holds.rs",
    "cluster/plan/tests/formed.rs",
    "cluster/plan/tests/replace.rs",
    "cluster/plan/tests/rollout.rs",
    "cluster/plan/tests/ca.rs",
    "cluster/plan/tests/learners.rs",
    "cluster/status.rs",
    "cluster/status/tests.rs",
    "cluster/plan/hold.rs",
    "cluster/plan/revision.rs",
    "cluster/auth/decide.rs",
    "cluster/auth/decide/tests.rs",
    "cluster/view.rs",
    "cluster/ca_set.rs",
    "cluster/marks.rs",
    "cluster/roster.rs",
    "cluster/roster/tests.rs",
    "member/plan.rs",
    "schedule/plan.rs",
    "volume.rs",
    "agent_job.rs",
    "agent_job/verify.rs",
    "agent_job/position.rs",
    "agent_job/position/tests.rs",
    "agent_job/archiver.rs",
    "agent_job/archiver/tests.rs",
    "schedule/archive/tests.rs",
    // The WAL reader of the agent's `position` (bytes in, position out; the agent lists and
    // opens the files).
    "agent/wal.rs",
    "agent/wal/tests.rs",
    "snapshot/verify.rs",
    "cron.rs",
    "cron/tests.rs",
    "defrag/run/plan.rs",
    "defrag/run/plan/tests.rs",
    "defrag/policy/plan.rs",
    "defrag/policy/plan/tests.rs",
    "recovery/plan.rs",
    "recovery/plan/tests.rs",
    "recovery/plan/snapshot.rs",
    "recovery/plan/survivor.rs",
    "recovery/plan/survivor/tests.rs",
    "recovery/plan/snapshot/tests.rs",
    "migrate/plan/mod.rs",
    "migrate/plan/translate.rs",
    "migrate/plan/render.rs",
    "migrate/plan/tests.rs",
    "rollback/plan.rs",
    "rollback/plan/tests.rs",
    "builders/mod.rs",
    "builders/pod/mod.rs",
    "builders/pod/container.rs",
    "builders/pod/flags.rs",
    "builders/pod/probes.rs",
    "builders/pod/volumes.rs",
    "builders/pod/tests.rs",
    "builders/pvc.rs",
    "builders/restore.rs",
    "builders/service.rs",
    "builders/pdb.rs",
    // tls/trust.rs is pure as well, but hashes through aws-lc-rs's `digest::Context`, which
    // this textual check cannot tell from the controller's.
    "tls/secret.rs",
    "tls/chains.rs",
    "template.rs",
    "merge_patch.rs",
    "archive.rs",
    "archive/tests.rs",
    "naming.rs",
    "conditions.rs",
    "config.rs",
    "config/tests.rs",
    "pods.rs",
];

/// What marks I/O (or the means to it) in a source line.
fn io_marker(line: &str) -> Option<&'static str> {
    const MARKERS: &[&str] = &[
        "async fn",
        ".await",
        "Api<",
        "Api::",
        "kube::Client",
        "etcd_client::",
        "tokio::",
        "std::fs::",
        "std::net::",
        "reqwest",
        "aws_sdk_s3",
    ];
    if let Some(m) = MARKERS.iter().find(|m| line.contains(*m)) {
        return Some(m);
    }
    // The controller's context (clients, caches), as a word: `SecurityContext` is a Pod field.
    let words = line.split(|c: char| !(c.is_alphanumeric() || c == '_'));
    words
        .into_iter()
        .any(|w| w == "Context")
        .then_some("Context")
}

#[test]
fn planners_status_rendering_and_builders_do_no_io() {
    let mut found = Vec::new();
    for file in PURE {
        let path = src().join(file);
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (a pure file moved: update PURE)", path.display()));
        for (n, line) in text.lines().enumerate() {
            if let Some(marker) = io_marker(line) {
                found.push(format!("{file}:{}: `{marker}` in: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the pure core must not do I/O; move the I/O into the reconciler (the I/O shell) and pass \
         the planner the values it needs:\n{}",
        found.join("\n")
    );
}

/// The top-level modules that are controllers, and the snapshot agent (a subcommand of the same
/// binary, never a library of the controllers).
const CONTROLLERS: &[&str] = &[
    "cluster", "member", "snapshot", "schedule", "defrag", "recovery", "migrate", "rollback",
    "agent",
];

/// `(from module, to path)` borrowings across controllers that are allowed. Empty: what two
/// controllers share lives in a shared module (`shell`, `cron`, `objectstore`, `agent_job`,
/// `volume`, ...). Keep it empty; a new entry needs a reason in docs/architecture.md.
const KNOWN_BORROWINGS: &[(&str, &str)] = &[];

/// The `crate::<head>::<item>` paths `text` names, as `(head, "crate::<head>[::<item>]")`.
fn crate_paths(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (start, _) in text.match_indices("crate::") {
        // `crate::` inside a longer word (`my_crate::`) is not a crate path.
        if text[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &text[start + "crate::".len()..];
        let head: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = &rest[head.len()..];
        let item: String = after
            .strip_prefix("::")
            .unwrap_or("")
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let path = if item.is_empty() {
            format!("crate::{head}")
        } else {
            format!("crate::{head}::{item}")
        };
        out.push((head, path));
    }
    out
}

/// The paths into other controllers (or the agent) that `module`'s source `text` names.
fn borrowings_in(module: &str, text: &str) -> BTreeSet<(String, String)> {
    crate_paths(text)
        .into_iter()
        .filter(|(head, _)| head != module && CONTROLLERS.contains(&head.as_str()))
        .map(|(_, path)| (module.to_string(), path))
        .collect()
}

/// The files of a top-level module: `src/<module>.rs` and everything under `src/<module>/`.
fn module_files(module: &str) -> Vec<PathBuf> {
    let mut files = rust_files(&src().join(module));
    let single = src().join(format!("{module}.rs"));
    if single.is_file() {
        files.push(single);
    }
    files
}

/// Every `crate::<controller>::<item>` path a module's files name, for controllers other than
/// itself, as `(module, "crate::<controller>::<item>")`.
fn borrowings() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for module in CONTROLLERS {
        for file in module_files(module) {
            let text = fs::read_to_string(&file).unwrap_or_default();
            out.extend(borrowings_in(module, &text));
        }
    }
    out
}

#[test]
fn controllers_borrow_from_each_other_only_where_already_known() {
    let found = borrowings();
    let known: BTreeSet<(String, String)> = KNOWN_BORROWINGS
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    assert!(
        new.is_empty(),
        "a controller reaches into another controller's (or the agent's) module: {new:?}. \
         Controllers are siblings: move what both need into a shared module (see \
         docs/architecture.md)"
    );
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "these known borrowings are gone — well done; remove them from KNOWN_BORROWINGS so the \
         list stays true: {gone:?}"
    );
}

#[test]
fn the_checks_read_the_tree_they_guard() {
    // The scans above pass vacuously on an empty tree: make sure they read real files.
    let files = rust_files(&src());
    assert!(
        files.len() > 40,
        "only {} source files under {}",
        files.len(),
        src().display()
    );
    assert!(files.iter().any(|f| relative(f) == "cluster/plan/mod.rs"));
    assert!(io_marker("    let pods: Api<Pod> = Api::namespaced(c, ns);").is_some());
    assert!(io_marker("async fn observe(ctx: &Context) {").is_some());
    assert!(io_marker("    security_context: Some(SecurityContext {").is_none());
    let sample =
        "use crate::schedule::write_status;\nuse crate::cron::due;\nuse crate::defrag::run::plan;";
    assert_eq!(
        borrowings_in("defrag", sample),
        BTreeSet::from([(
            "defrag".to_string(),
            "crate::schedule::write_status".to_string()
        )])
    );
    assert!(crate_paths("use crate::agent_job::JobView;")
        .iter()
        .all(|(head, _)| head != "agent"));
    assert!(!module_files("schedule").is_empty());
}

/// The low modules: what a member Pod says, reaching etcd, TLS, the builders, names, the
/// operator's configuration and the pure rules shared by several controllers. They sit under
/// every controller and never reach up into one: what a low module needs from a controller moves
/// down into it (as `PodView` did into `pods.rs` and `DefragTimeout` into `config.rs`).
const LOW: &[&str] = &[
    "pods",
    "etcd",
    "tls",
    "builders",
    "naming",
    "merge_patch",
    "archive",
    "topology",
    "config",
    "volume",
    "cron",
    "agent_job",
    "objectstore",
    "auth",
];

#[test]
fn low_modules_name_no_controller_module() {
    let mut found = Vec::new();
    for module in LOW {
        let files = module_files(module);
        assert!(
            !files.is_empty(),
            "the low module `{module}` moved: update LOW"
        );
        for file in files {
            let text = fs::read_to_string(&file).unwrap_or_default();
            for (head, path) in crate_paths(&text) {
                if CONTROLLERS.contains(&head.as_str()) {
                    found.push(format!("{}: {path}", relative(&file)));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a low module reaches up into a controller; move what it needs down into a low module \
         (see docs/architecture.md):\n{}",
        found.join("\n")
    );
}

/// The snapshot agent is a subcommand of the same binary, run by Jobs and init containers, never
/// a library of the controllers: nothing in `src/` outside `agent/` names `crate::agent`. Only
/// `main.rs` wires its subcommands (as `controller::agent`). What the agent shares with the
/// controllers (the object store client, the report it writes) lives in shared modules.
#[test]
fn nothing_in_the_controller_imports_the_agent() {
    let mut found = Vec::new();
    for file in rust_files(&src()) {
        let rel = relative(&file);
        if rel.starts_with("agent/") || rel == "agent.rs" || rel == "main.rs" {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (head, path) in crate_paths(&text) {
            if head == "agent" {
                found.push(format!("{rel}: {path}"));
            }
        }
        if text.contains("controller::agent") {
            found.push(format!("{rel}: controller::agent"));
        }
    }
    assert!(
        found.is_empty(),
        "only main.rs may reach the snapshot agent; move what is shared into a shared module \
         (objectstore.rs, agent_job.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_reconcile_goes_through_the_one_wrapper() {
    let run = fs::read_to_string(src().join("run.rs")).expect("run.rs");
    let controllers: Vec<&str> = run
        .split(".run(")
        .skip(1)
        .map(|rest| rest.split(".for_each(").next().unwrap_or(rest))
        .collect();
    assert_eq!(controllers.len(), 7, "seven controllers are run in run.rs");
    for handed in &controllers {
        assert!(
            handed.contains("shell::reconcile") && handed.contains("shell::error_policy"),
            "a controller in run.rs is run without the wrapper in shell.rs: {handed}"
        );
    }
    let mut found = Vec::new();
    for file in rust_files(&src()) {
        let rel = relative(&file);
        if rel.starts_with("shell") || rel == "metrics.rs" || rel == "lenient.rs" {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap_or_default();
        for marker in ["observe_reconcile(", "count_error(", "fn error_policy"] {
            if text.contains(marker) {
                found.push(format!("{rel}: {marker}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "reconciles are timed, counted and backed off in shell.rs only (add a row to its table \
         instead):\n{}",
        found.join("\n")
    );
}

/// The cluster controller's files around its planner (the I/O shell).
fn cluster_shell_files() -> Vec<PathBuf> {
    rust_files(&src().join("cluster"))
        .into_iter()
        .filter(|f| {
            let rel = relative(f);
            !rel.starts_with("cluster/plan/") && !rel.contains("/tests")
        })
        .collect()
}

#[test]
fn the_cluster_plan_is_not_changed_after_planning() {
    // The planner's input is fixed before `plan()` is called and its verdict is read, never
    // amended: a fact found later is a field of `Observed`, not a patch of `plan.facts`.
    let mut found = Vec::new();
    for file in cluster_shell_files() {
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let l = line.trim();
            let amends = l.starts_with("let mut plan")
                || l.contains("&mut plan")
                || l.contains("&mut Plan")
                || (l.starts_with("plan.") && l.contains(" = ") && !l.contains("=="));
            if amends {
                found.push(format!("{}:{}: {l}", relative(&file), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the cluster's plan is changed after planning; gather the fact before `plan()` (a field \
         of `Observed`) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_cluster_status_reads_the_planners_hold() {
    // The precedence of what holds a cluster (unsupported fields, deadline, cert-manager, TLS,
    // root auth, cluster ID) is `plan::Hold::first`'s alone: the conditions read `plan.hold`.
    const RAW: &[&str] = &[
        "facts.unsupported",
        "facts.cert_manager_missing",
        "facts.tls_secret_problem",
        "facts.waiting_for_certificate",
        "Phase::BootstrapFailed =>",
        "Phase::DeadlineExceeded =>",
    ];
    // The requeue (`reconcile.rs`'s next_check) reads it too, auth included.
    let mut found = Vec::new();
    for (file, extra) in [
        ("cluster/status.rs", None),
        ("cluster/reconcile.rs", Some("facts.auth_problem")),
    ] {
        let text = fs::read_to_string(src().join(file)).unwrap_or_default();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        found.extend(
            code.lines()
                .enumerate()
                .filter(|(_, l)| RAW.iter().chain(&extra).any(|r| l.contains(r)))
                .map(|(n, l)| format!("{file}:{}: {}", n + 1, l.trim())),
        );
    }
    assert!(
        found.is_empty(),
        "the status or the requeue derives a hold again; match on `plan.hold` instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_cluster_controller_file_grows_past_600_lines_of_code() {
    assert_files_stay_small(&[src().join("cluster")]);
}

/// The same rule for every source file of the operator's crates: the controller, the API types
/// and validation, the webhook and the certificate helpers.
#[test]
fn no_source_file_grows_past_600_lines_of_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    assert_files_stay_small(&[
        src(),
        root.join("api/src"),
        root.join("webhook/src"),
        root.join("certs/src"),
    ]);
}

/// A file per concept: past ~600 lines of code (tests and comments aside) a file holds several,
/// and each feature added to it makes it harder to read. Split it by concept.
fn assert_files_stay_small(dirs: &[PathBuf]) {
    const MAX: usize = 600;
    let mut found = Vec::new();
    let mut read = 0;
    for dir in dirs {
        for file in rust_files(dir) {
            let shown = file.display().to_string();
            if shown.contains("/tests/") || shown.ends_with("/tests.rs") {
                continue;
            }
            let text = fs::read_to_string(&file).unwrap_or_default();
            read += 1;
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let lines = code
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("//"))
                .count();
            if lines > MAX {
                found.push(format!("{shown}: {lines} lines of code"));
            }
        }
    }
    assert!(read > 0, "no source file read under {dirs:?}");
    assert!(
        found.is_empty(),
        "split these by concept (at most {MAX} lines of code each):\n{}",
        found.join("\n")
    );
}

/// Reaching a cluster's etcd is written once: `etcd/access.rs` is the only file that dials
/// (`Etcd::connect…`); everything else asks it. The snapshot agent, a subcommand that runs in
/// the snapshot Jobs with its own flags, dials its one endpoint itself.
#[test]
fn only_etcd_access_builds_etcd_clients() {
    let mut found = Vec::new();
    for file in rust_files(&src()) {
        let rel = relative(&file);
        if rel == "etcd/access.rs" || rel == "etcd/client.rs" || rel.starts_with("agent/") {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap_or_default();
        for marker in ["Etcd::connect", "Client::connect(", "ConnectOptions"] {
            if text.contains(marker) {
                found.push(format!("{rel}: {marker}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "dial etcd through etcd::access (Access::load / Access::new, then dial):\n{}",
        found.join("\n")
    );
}

/// The arguments of the call whose opening parenthesis ends `text[..open]`, split at top-level
/// commas (string literals and nested brackets kept whole), each trimmed.
fn call_arguments(text: &str, open: usize) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut chars = text[open..].chars();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            current.push(c);
            match c {
                '\\' => current.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                current.push(c);
            }
            '(' | '[' | '{' => {
                depth += 1;
                if depth > 1 {
                    current.push(c);
                }
            }
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    args.push(current.trim().to_string());
                    return args;
                }
                current.push(c);
            }
            ',' if depth == 1 => args.push(std::mem::take(&mut current).trim().to_string()),
            _ => current.push(c),
        }
    }
    args
}

/// Every Event's reason and action is a variant of `events::Reason` / `events::Action`, so the
/// strings users see are spelled once (and pinned by `events`' tests): no `ctx.event(` or
/// `ctx.event_related(` call passes a string literal for either.
#[test]
fn no_event_names_its_reason_with_a_string_literal() {
    assert_eq!(
        call_arguments("ctx.event(m, true, \"A,(b\", f(x, y))", 9),
        ["m", "true", "\"A,(b\"", "f(x, y)"]
    );
    let mut found = Vec::new();
    let mut calls = 0;
    for file in rust_files(&src()) {
        let rel = relative(&file);
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (call, first) in [(".event(", 2), (".event_related(", 3)] {
            for (at, _) in text.match_indices(call) {
                calls += 1;
                let args = call_arguments(&text, at + call.len() - 1);
                for arg in args.iter().skip(first).take(2) {
                    if arg.starts_with('"') || arg.starts_with("&\"") {
                        let line = text[..at].lines().count();
                        found.push(format!("{rel}:{line}: {arg}"));
                    }
                }
            }
        }
    }
    assert!(
        calls > 40,
        "only {calls} Event calls found: is the scan reading the tree?"
    );
    assert!(
        found.is_empty(),
        "name Event reasons and actions by events::Reason / events::Action:\n{}",
        found.join("\n")
    );
}

/// Condition types and reasons are spelled once, in `api::conditions` (the webhook, the tests
/// and scripts read them there): no constant in the controller repeats one of its strings, and
/// the controller has no `mod reason` of its own.
#[test]
fn condition_types_and_reasons_live_in_api_conditions() {
    let api = Path::new(env!("CARGO_MANIFEST_DIR")).join("../api/src/conditions.rs");
    let api = fs::read_to_string(&api).expect("api/src/conditions.rs");
    let string_of = |line: &str| -> Option<String> {
        let line = line.trim();
        if !(line.starts_with("pub const ") || line.starts_with("const "))
            || !line.contains(": &str = \"")
        {
            return None;
        }
        let value = line.split('"').nth(1)?;
        value
            .starts_with(|c: char| c.is_ascii_uppercase())
            .then(|| value.to_string())
    };
    let known: BTreeSet<String> = api.lines().filter_map(string_of).collect();
    assert!(known.contains("Ready") && known.contains("QuorumLost"));
    let mut found = Vec::new();
    for file in rust_files(&src()) {
        let rel = relative(&file);
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if string_of(line).is_some_and(|v| known.contains(&v)) {
                found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
            if line.trim_start().starts_with("pub mod reason")
                || line.trim_start().starts_with("mod reason")
            {
                found.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "condition types and reasons belong in api::conditions:\n{}",
        found.join("\n")
    );
}
