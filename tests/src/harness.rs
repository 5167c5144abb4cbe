//! Small helpers the suites share: waiting for a condition with a deadline (the one wait
//! primitive, [`eventually`]: no suite writes its own poll loop), and creating
//! namespaced objects from JSON manifests. Both panic with what they were doing: they are for
//! test bodies, not for the support code.

use std::future::Future;
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::Value;

/// How often [`eventually`] asks.
pub const POLL: Duration = Duration::from_millis(250);

/// The suites' one way to wait: poll `probe` every [`POLL`] until it returns `Ok`, panicking
/// after `timeout` with `what` and the probe's last answer (its `Err`: say there what was seen).
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    eventually_every(what, timeout, POLL, probe).await
}

/// [`eventually`] asking every `every` (for probes too costly to repeat every [`POLL`]).
pub async fn eventually_every<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    poll(timeout, every, probe).await.unwrap_or_else(|last| {
        panic!("timed out after {timeout:?} waiting for {what}; last: {last}")
    })
}

/// The poll under [`eventually`], for support code that reports instead of panicking (or adds
/// to the panic what only a timeout is worth fetching): `probe` every `every` until it returns
/// `Ok`, else, once `timeout` has passed, `Err` with its last answer.
pub async fn poll<T, E, F, Fut>(timeout: Duration, every: Duration, mut probe: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if Instant::now() > deadline {
            return Err(last);
        }
        tokio::time::sleep(every).await;
    }
}

/// `Ok(value)` when `value` passes `check`, else `Err` showing it: the probe of an
/// [`eventually`] that waits for a value to look right.
pub fn seen<T: std::fmt::Debug>(value: T, check: impl FnOnce(&T) -> bool) -> Result<T, String> {
    if check(&value) {
        Ok(value)
    } else {
        Err(format!("{value:?}"))
    }
}

/// Run `check` (which panics on what it must not see) every `every` for `period`: the way to
/// say that something holds for a while, where [`eventually`] says that it comes.
pub async fn throughout<F, Fut>(period: Duration, every: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let until = Instant::now() + period;
    while Instant::now() < until {
        check().await;
        tokio::time::sleep(every).await;
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

/// Say so (once per binary, on stderr) when a source a binary is built from (`sources`, paths
/// relative to the workspace root) is newer than the binary: `cargo test --test …` does not
/// rebuild the operator or the webhook, and a stale binary makes confusing failures. `rebuild`
/// is the command that brings it up to date.
pub fn warn_if_stale(binary: &std::path::Path, sources: &[&str], rebuild: &str) {
    use std::io::Write;
    use std::path::Path;
    static WARNED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    fn newest(path: &Path) -> Option<std::time::SystemTime> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_dir() {
            return meta.modified().ok();
        }
        std::fs::read_dir(path)
            .ok()?
            .flatten()
            .filter_map(|entry| newest(&entry.path()))
            .max()
    }
    let Some(built) = std::fs::metadata(binary).and_then(|m| m.modified()).ok() else {
        return;
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."));
    let stale = sources
        .iter()
        .filter_map(|p| newest(&workspace.join(p)))
        .any(|modified| modified > built);
    if !stale {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.iter().any(|b| b == binary) {
        return;
    }
    warned.push(binary.to_path_buf());
    let _ = writeln!(
        std::io::stderr(),
        "warning: {} is older than its sources; run `{rebuild}`",
        binary.display()
    );
}
