//! Cluster DNS through hosts files, from the EndpointSlices kube-controller-manager maintains:
//! `<svc>.<ns>.svc[.cluster.local]` names every ready endpoint of a Service and
//! `<hostname>.<svc>.<ns>.svc[.cluster.local]` every ready endpoint with a hostname (a Pod with
//! `hostname` and `subdomain` behind a headless Service). The endpointslice controller marks
//! endpoints of `publishNotReadyAddresses` Services ready whatever the Pod's readiness, so that
//! rule comes for free. A ClusterIP never appears.
//!
//! Host processes read one marked block of the host's `/etc/hosts` (rewritten under a lock, by
//! rename); each Pod reads its own file, bind-mounted over `/etc/hosts` and therefore rewritten in
//! place (a rename would leave the mount on the old file).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use nix::fcntl::{Flock, FlockArg};

use super::network::LOCK_DIR;

pub const CLUSTER_DOMAIN: &str = "cluster.local";
pub const HOSTS_FILE: &str = "/etc/hosts";
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// One ready endpoint address of a Service.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    pub namespace: String,
    pub service: String,
    pub hostname: Option<String>,
    pub ip: IpAddr,
}

/// The ready endpoints of every Service, sorted and without duplicates.
pub fn records<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> Vec<Record> {
    let mut out = BTreeSet::new();
    for slice in slices {
        let Some(service) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
        else {
            continue;
        };
        let namespace = slice.metadata.namespace.clone().unwrap_or_default();
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            for address in &endpoint.addresses {
                let Ok(ip) = address.parse::<IpAddr>() else {
                    continue;
                };
                out.insert(Record {
                    namespace: namespace.clone(),
                    service: service.clone(),
                    hostname: endpoint.hostname.clone(),
                    ip,
                });
            }
        }
    }
    out.into_iter().collect()
}

/// The fully qualified names of a record: the Service name, and the endpoint's own when it has a
/// hostname.
fn qualified_names(r: &Record) -> Vec<String> {
    let svc = format!("{}.{}.svc", r.service, r.namespace);
    let mut names = vec![svc.clone(), format!("{svc}.{CLUSTER_DOMAIN}")];
    if let Some(h) = &r.hostname {
        names.push(format!("{h}.{svc}"));
        names.push(format!("{h}.{svc}.{CLUSTER_DOMAIN}"));
    }
    names
}

/// `ip<TAB>names` lines, one per address, names merged.
fn render(lines: BTreeMap<IpAddr, BTreeSet<String>>) -> String {
    let mut out = String::new();
    for (ip, names) in lines {
        out.push_str(&ip.to_string());
        for n in names {
            out.push('\t');
            out.push_str(&n);
        }
        out.push('\n');
    }
    out
}

/// The body of the host's block: fully qualified names only.
pub fn host_block(records: &[Record]) -> String {
    let mut lines: BTreeMap<IpAddr, BTreeSet<String>> = BTreeMap::new();
    for r in records {
        lines.entry(r.ip).or_default().extend(qualified_names(r));
    }
    render(lines)
}

/// What a Pod's own hosts file needs besides the records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodHosts {
    pub namespace: String,
    pub ip: Option<IpAddr>,
    pub hostname: String,
    pub subdomain: Option<String>,
    /// `hostAliases`: (ip, hostnames).
    pub aliases: Vec<(String, Vec<String>)>,
}

/// A Pod's `/etc/hosts`: what kubelet writes (localhost, the Pod's own names, hostAliases), the
/// in-pod apiserver proxy as `kubernetes.default.svc`, and every record, with the short forms the
/// cluster DNS search path would give (`<svc>`, `<h>.<svc>` in the Pod's namespace, `<svc>.<ns>`).
pub fn pod_file(records: &[Record], pod: &PodHosts) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file (etcd-operator test pod runner).\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n",
    );
    if let Some(ip) = pod.ip {
        match &pod.subdomain {
            Some(sub) => out.push_str(&format!(
                "{ip}\t{h}.{sub}.{ns}.svc.{CLUSTER_DOMAIN}\t{h}.{sub}.{ns}.svc\t{h}\n",
                h = pod.hostname,
                ns = pod.namespace
            )),
            None => out.push_str(&format!("{ip}\t{}\n", pod.hostname)),
        }
    }
    out.push_str(
        "127.0.0.1\tkubernetes kubernetes.default kubernetes.default.svc \
         kubernetes.default.svc.cluster.local\n",
    );
    let mut lines: BTreeMap<IpAddr, BTreeSet<String>> = BTreeMap::new();
    for r in records {
        let names = lines.entry(r.ip).or_default();
        names.extend(qualified_names(r));
        names.insert(format!("{}.{}", r.service, r.namespace));
        if let Some(h) = &r.hostname {
            names.insert(format!("{h}.{}.{}", r.service, r.namespace));
        }
        if r.namespace == pod.namespace {
            names.insert(r.service.clone());
            if let Some(h) = &r.hostname {
                names.insert(format!("{h}.{}", r.service));
            }
        }
    }
    out.push_str("# Cluster DNS (ready endpoints of Services).\n");
    out.push_str(&render(lines));
    if !pod.aliases.is_empty() {
        out.push_str("# Entries added by HostAliases.\n");
        for (ip, names) in &pod.aliases {
            out.push_str(&format!("{ip}\t{}\n", names.join("\t")));
        }
    }
    out
}

fn begin_marker(n: u8) -> String {
    format!("# BEGIN etcd-operator pod runner slot {n}")
}

fn end_marker(n: u8) -> String {
    format!("# END etcd-operator pod runner slot {n}")
}

/// `hosts` without slot `n`'s block, plus `block` (when given) as the new one at the end.
pub fn replace_block(hosts: &str, n: u8, block: Option<&str>) -> String {
    let begin = begin_marker(n);
    let end = end_marker(n);
    let mut out = String::with_capacity(hosts.len());
    let mut inside = false;
    for line in hosts.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if !inside && (trimmed == begin || trimmed.starts_with(&format!("{begin} "))) {
            inside = true;
            continue;
        }
        if inside {
            if trimmed == end {
                inside = false;
            }
            continue;
        }
        out.push_str(line);
    }
    if let Some(block) = block {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "{begin} (pid {}; generated, removed when the runner stops)\n",
            std::process::id()
        ));
        out.push_str(block);
        if !block.is_empty() && !block.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&end);
        out.push('\n');
    }
    out
}

/// Keep `hosts` (the host's block and every Pod's file) up to date with the cluster's
/// EndpointSlices until dropped; what goes wrong goes to `report` and is retried.
pub async fn serve(client: kube::Client, hosts: std::sync::Arc<HostsFiles>, report: impl Fn(&str)) {
    use futures::StreamExt;
    use kube_runtime::WatchStreamExt;
    let (reader, writer) = kube_runtime::reflector::store::<EndpointSlice>();
    let api = kube::Api::<EndpointSlice>::all(client);
    let stream = kube_runtime::reflector(
        writer,
        kube_runtime::watcher(api, kube_runtime::watcher::Config::default()),
    )
    .default_backoff();
    futures::pin_mut!(stream);
    let mut dirty = false;
    loop {
        tokio::select! {
            event = stream.next() => {
                match event {
                    None => return,
                    Some(Ok(_)) => dirty = true,
                    Some(Err(e)) => report(&format!("endpointslice watch: {e}")),
                }
            }
            _ = tokio::time::sleep(std::time::Duration::from_millis(50)), if dirty => {
                dirty = false;
                let slices = reader.state();
                let records = records(slices.iter().map(|s| s.as_ref()));
                let hosts = hosts.clone();
                let written = tokio::task::spawn_blocking(move || hosts.set_records(records)).await;
                if let Ok(Err(e)) = written {
                    report(&format!("writing hosts files: {e}"));
                }
            }
        }
    }
}

/// Slots that have a block in `hosts`.
pub fn block_slots(hosts: &str) -> Vec<u8> {
    hosts
        .lines()
        .filter_map(|l| l.strip_prefix("# BEGIN etcd-operator pod runner slot "))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect()
}

/// Slots with a block in the host's `/etc/hosts`.
pub fn host_block_slots() -> Vec<u8> {
    block_slots(&fs::read_to_string(HOSTS_FILE).unwrap_or_default())
}

/// Replace (or with `None` remove) slot `n`'s block in `/etc/hosts`, holding the runners' hosts
/// lock. The file is replaced by rename so readers see the old or the new file, never half; if
/// `/etc/hosts` cannot be renamed over (a bind mount), it is rewritten in place.
pub fn write_host_block(n: u8, block: Option<&str>) -> std::io::Result<()> {
    fs::create_dir_all(LOCK_DIR)?;
    let lock_file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(Path::new(LOCK_DIR).join("hosts.lock"))?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
    let current = fs::read_to_string(HOSTS_FILE)?;
    let wanted = replace_block(&current, n, block);
    if wanted == current {
        return Ok(());
    }
    let meta = fs::metadata(HOSTS_FILE)?;
    let tmp = Path::new("/etc").join(format!(".hosts.eop-podrunner-{n}"));
    let replaced = (|| -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(wanted.as_bytes())?;
        f.set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()))?;
        f.sync_all()?;
        fs::rename(&tmp, HOSTS_FILE)
    })();
    if replaced.is_err() {
        let _ = fs::remove_file(&tmp);
        fs::write(HOSTS_FILE, wanted.as_bytes())?;
    }
    Ok(())
}

/// Rewrite a Pod's hosts file in place when its content changed.
pub fn write_pod_file(path: &Path, content: &str) -> std::io::Result<()> {
    if fs::read_to_string(path).is_ok_and(|c| c == content) {
        return Ok(());
    }
    let mut f = File::options()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(content.as_bytes())?;
    f.set_permissions(fs::Permissions::from_mode(0o644))
}

/// The live hosts files of one runner: the records, the host's block, every Pod's file.
#[derive(Debug)]
pub struct HostsFiles {
    slot: u8,
    state: std::sync::Mutex<HostsState>,
}

#[derive(Debug, Default)]
struct HostsState {
    records: Vec<Record>,
    pods: std::collections::HashMap<String, (std::path::PathBuf, PodHosts)>,
    host_block: Option<String>,
}

impl HostsFiles {
    pub fn new(slot: u8) -> Self {
        Self {
            slot,
            state: std::sync::Mutex::new(HostsState::default()),
        }
    }

    pub fn records(&self) -> Vec<Record> {
        self.state
            .lock()
            .map(|s| s.records.clone())
            .unwrap_or_default()
    }

    /// New records: rewrite the host block and every Pod file that changed.
    pub fn set_records(&self, records: Vec<Record>) -> std::io::Result<()> {
        let Ok(mut state) = self.state.lock() else {
            return Ok(());
        };
        if state.records == records && state.host_block.is_some() {
            return Ok(());
        }
        state.records = records;
        let block = host_block(&state.records);
        if state.host_block.as_deref() != Some(block.as_str()) {
            write_host_block(self.slot, Some(&block))?;
            state.host_block = Some(block);
        }
        for (path, pod) in state.pods.values() {
            write_pod_file(path, &pod_file(&state.records, pod))?;
        }
        Ok(())
    }

    pub fn add_pod(&self, uid: &str, path: &Path, pod: PodHosts) {
        if let Ok(mut state) = self.state.lock() {
            let _ = write_pod_file(path, &pod_file(&state.records, &pod));
            state
                .pods
                .insert(uid.to_string(), (path.to_path_buf(), pod));
        }
    }

    pub fn remove_pod(&self, uid: &str) {
        if let Ok(mut state) = self.state.lock() {
            state.pods.remove(uid);
        }
    }

    /// Remove the host block (teardown).
    pub fn remove_host_block(&self) -> std::io::Result<()> {
        if let Ok(mut state) = self.state.lock() {
            state.host_block = None;
        }
        write_host_block(self.slot, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(ns: &str, svc: &str, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{svc}-abc"), "namespace": ns,
                         "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "endpoints": endpoints,
        }))
        .unwrap()
    }

    #[test]
    fn only_ready_endpoints_become_records() {
        let s = slice(
            "ns1",
            "etcd",
            json!([
                {"addresses": ["10.213.0.2"], "hostname": "etcd-0", "conditions": {"ready": true}},
                {"addresses": ["10.213.0.3"], "hostname": "etcd-1", "conditions": {"ready": false}},
                {"addresses": ["10.213.0.4"]},
            ]),
        );
        let r = records([&s]);
        assert_eq!(r.len(), 2);
        let block = host_block(&r);
        assert!(block.contains(
            "10.213.0.2\tetcd-0.etcd.ns1.svc\tetcd-0.etcd.ns1.svc.cluster.local\tetcd.ns1.svc"
        ));
        assert!(!block.contains("10.213.0.3"), "{block}");
        assert!(block.contains("10.213.0.4\tetcd.ns1.svc\tetcd.ns1.svc.cluster.local\n"));
    }

    #[test]
    fn pod_file_has_own_names_short_forms_and_aliases() {
        let s = slice(
            "ns1",
            "etcd",
            json!([{"addresses": ["10.213.0.2"], "hostname": "etcd-0"}]),
        );
        let other = slice("ns2", "web", json!([{"addresses": ["10.213.0.9"]}]));
        let pod = PodHosts {
            namespace: "ns1".into(),
            ip: Some("10.213.0.2".parse().unwrap()),
            hostname: "etcd-0".into(),
            subdomain: Some("etcd".into()),
            aliases: vec![("127.0.0.2".into(), vec!["foo".into(), "bar".into()])],
        };
        let text = pod_file(&records([&s, &other]), &pod);
        assert!(text.contains(
            "10.213.0.2\tetcd-0.etcd.ns1.svc.cluster.local\tetcd-0.etcd.ns1.svc\tetcd-0\n"
        ));
        assert!(text.contains("\tetcd-0.etcd\t"), "{text}");
        assert!(text.contains("\tetcd\t"), "{text}");
        assert!(text.contains("10.213.0.9\tweb.ns2\t"), "{text}");
        assert!(
            !text.contains("\tweb\t") && !text.contains("\tweb\n"),
            "{text}"
        );
        assert!(text.contains("127.0.0.2\tfoo\tbar\n"));
    }

    #[test]
    fn blocks_are_replaced_and_removed_without_touching_the_rest() {
        let base = "127.0.0.1 localhost\n10.0.0.1 other";
        let with = replace_block(base, 3, Some("10.213.3.2\ta.b.svc\n"));
        assert!(with.starts_with(
            "127.0.0.1 localhost\n10.0.0.1 other\n# BEGIN etcd-operator pod runner slot 3 (pid "
        ));
        assert!(with.ends_with("10.213.3.2\ta.b.svc\n# END etcd-operator pod runner slot 3\n"));
        assert_eq!(block_slots(&with), vec![3]);
        let both = replace_block(&with, 4, Some(""));
        assert_eq!(block_slots(&both), vec![3, 4]);
        let again = replace_block(&both, 3, Some("10.213.3.5\tc.d.svc\n"));
        assert_eq!(
            again
                .matches("BEGIN etcd-operator pod runner slot 3")
                .count(),
            1
        );
        assert!(!again.contains("a.b.svc"));
        let removed = replace_block(&replace_block(&again, 3, None), 4, None);
        assert_eq!(removed, "127.0.0.1 localhost\n10.0.0.1 other\n");
    }
}
