//! The snapshot agent (`etcd-operator snapshot-agent save|restore`) run as a process, as a
//! snapshot Job and a restore init container run it, against real etcd members and a real MinIO
//! (plain and TLS with a private CA): the artifact it reports is the stored object (size, sha256,
//! UID metadata), a restore brings every key back under a new cluster ID (etcdutl 3.6 and 3.5),
//! PVC destinations and sources, and every refusal (foreign object, 403 without ListBucket, bad
//! credentials, unreachable endpoint, server killed mid-upload, too-small filesystem), a
//! SIGTERM mid-upload aborting the multipart upload, a multipart snapshot (parts uploaded
//! concurrently) stored byte for byte as etcd sent it, etcd lost with parts in flight leaving
//! nothing behind, and two agents of one snapshot uploading
//! the same key at once (each reports the stored object, which is never replaced); and
//! `position`, a stopped member's raft position read from its WAL (etcd 3.6 and 3.5); and the
//! continuous archive with its replay (`archive`, in `snapshot_agent/archive.rs`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use controller::agent::parts::{PARTS_IN_MEMORY, PART_SIZE};
use serde_json::Value;
use tests::e2e::{put_keys, read_keys};
use tests::env::control_plane::temp_root;
use tests::env::etcd::{Etcd, EtcdConfig};
use tests::env::minio::{Minio, S3User};
use tests::env::Testbins;
use tests::operator::bin_dir;
use tests::OrPanic;

#[path = "snapshot_agent/archive.rs"]
mod archive;

const AGENT_TIMEOUT: Duration = Duration::from_secs(300);

fn agent_bin() -> PathBuf {
    let bin = bin_dir().join("etcd-operator");
    assert!(
        bin.is_file(),
        "{} is missing: make build (builds every binary)",
        bin.display()
    );
    bin
}

/// What one agent run left: exit status, termination log JSON, combined output.
struct Run {
    status: ExitStatus,
    result: Value,
    output: String,
    took: Duration,
}

impl Run {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }
    fn error(&self) -> String {
        self.result["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
    /// The run exited with `code`; else the failure names `what` and shows the output.
    #[track_caller]
    fn assert_code(&self, code: i32, what: &str) {
        assert_eq!(self.code(), Some(code), "{what}:\n{}", self.output);
    }
    /// A transient failure (exit 1) whose error names `cause`, after the agent aborted its
    /// multipart upload.
    #[track_caller]
    fn assert_aborted_upload(&self, cause: &str) {
        self.assert_code(1, cause);
        assert!(self.error().contains(cause), "{}", self.error());
        assert!(
            self.output.contains("multipart upload aborted"),
            "{}",
            self.output
        );
    }
    /// A field of the reported artifact.
    fn artifact(&self, field: &str) -> &Value {
        &self.result["artifact"][field]
    }
}

/// An agent invocation: arguments, S3 credentials, where its termination log and output go.
struct Agent {
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: PathBuf,
}

impl Agent {
    fn new(dir: &Path, args: &[&str]) -> Self {
        let mut all = vec!["snapshot-agent".to_string()];
        all.extend(args.iter().map(|s| s.to_string()));
        Self {
            args: all,
            env: Vec::new(),
            dir: dir.to_path_buf(),
        }
    }

    fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    fn s3(mut self, minio: &Minio, user: &S3User) -> Self {
        self = self
            .arg(format!("--s3-endpoint={}", minio.endpoint))
            .arg(format!("--s3-bucket={}", minio.bucket))
            .arg("--s3-force-path-style");
        if let Some(ca) = &minio.ca_file {
            self = self.arg(format!("--s3-ca-file={}", ca.display()));
        }
        self.creds(user)
    }

    fn creds(mut self, user: &S3User) -> Self {
        self.env.retain(|(k, _)| !k.starts_with("AWS_"));
        self.env.extend([
            ("AWS_ACCESS_KEY_ID".into(), user.access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY".into(), user.secret_key.clone()),
        ]);
        self
    }

    /// One more environment variable of the agent's.
    fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Start it; output goes to `<dir>/<tag>.log`, the termination log to `<dir>/<tag>.json`.
    fn spawn(&self, tag: &str) -> (tokio::process::Child, PathBuf, PathBuf) {
        let log = self.dir.join(format!("{tag}.log"));
        let term = self.dir.join(format!("{tag}.json"));
        let _ = std::fs::remove_file(&term);
        let out = std::fs::File::create(&log).or_panic();
        let mut cmd = tokio::process::Command::new(agent_bin());
        cmd.args(&self.args)
            .arg(format!("--termination-log={}", term.display()))
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_PROFILE")
            .env_remove("ETCD_USERNAME")
            .env("RUST_LOG", "info")
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(out.try_clone().or_panic())
            .stderr(out)
            .kill_on_drop(true);
        (cmd.spawn().or_panic(), log, term)
    }

    async fn run(&self, tag: &str) -> Run {
        self.start(tag)
            .finish(AGENT_TIMEOUT, &format!("the agent ({tag})"))
            .await
    }

    /// Start it without waiting (see [`Agent::spawn`]).
    fn start(&self, tag: &str) -> Running {
        let started = Instant::now();
        let (child, log, term) = self.spawn(tag);
        Running {
            child,
            log,
            term,
            started,
        }
    }
}

/// Stop a running agent as the kubelet does a Pod's container: SIGTERM.
fn sigterm(running: &Running) {
    let pid = running.child.id().or_panic_none("the agent's pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).or_panic()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .or_panic();
}

/// An agent started and not yet waited for.
struct Running {
    child: tokio::process::Child,
    log: PathBuf,
    term: PathBuf,
    started: Instant,
}

impl Running {
    /// Wait for it to exit (`what` names it if it runs longer than `timeout`) and read its run.
    async fn finish(mut self, timeout: Duration, what: &str) -> Run {
        let status = wait_exit(&mut self.child, timeout, what).await;
        finish(status, &self.log, &self.term, self.started.elapsed())
    }
}

/// Wait for `child` to exit; `what` names it when it runs longer than `timeout`.
async fn wait_exit(child: &mut tokio::process::Child, timeout: Duration, what: &str) -> ExitStatus {
    tokio::time::timeout(timeout, child.wait())
        .await
        .unwrap_or_else(|_| panic!("{what} ran longer than {timeout:?}"))
        .or_panic()
}

fn finish(status: ExitStatus, log: &Path, term: &Path, took: Duration) -> Run {
    let output = std::fs::read_to_string(log).unwrap_or_default();
    let text = std::fs::read_to_string(term).unwrap_or_else(|e| {
        panic!(
            "no termination log {} ({e}); output:\n{output}",
            term.display()
        )
    });
    let result: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!("termination log {text:?} is not JSON ({e}); output:\n{output}")
    });
    Run {
        status,
        result,
        output,
        took,
    }
}

/// A test's binaries, its temp root and a MinIO in it (serving HTTPS with `tls`).
async fn with_minio(tls: bool) -> (Testbins, tempfile::TempDir, Minio) {
    let bins = Testbins::from_env().or_panic();
    let tmp = temp_root().or_panic();
    let minio = Minio::start(&bins, tmp.path(), tls).await.or_panic();
    (bins, tmp, minio)
}

/// A single-member etcd of `part` (`etcd-3.6` / `etcd-3.5`) with `count` keys `snap/<i>`.
async fn etcd_with_keys(
    bins: &Testbins,
    part: &str,
    root: &Path,
    count: usize,
) -> (Etcd, BTreeMap<String, String>, u64) {
    let config = EtcdConfig::new("source", "source-token").or_panic();
    let etcd = Etcd::start(
        &bins.binary(part, "etcd").or_panic(),
        &config,
        &root.join("source"),
        &root.join("logs"),
    )
    .await
    .or_panic();
    let mut client = etcd.client().await.or_panic();
    let keys = put_keys(&mut client, "snap/", count).await;
    let id = cluster_id(&mut client).await;
    (etcd, keys, id)
}

async fn cluster_id(client: &mut etcd_client::Client) -> u64 {
    client
        .member_list()
        .await
        .or_panic()
        .header()
        .map(|h| h.cluster_id())
        .unwrap_or_default()
}

fn sha256_hex(data: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data);
    digest.as_ref().iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Restore with `etcdutl` of `part` into `data_dir`, start that etcd on it and return its keys
/// and cluster ID.
async fn restore_and_read(
    bins: &Testbins,
    part: &str,
    root: &Path,
    source: &[String],
    env_user: Option<&S3User>,
    name: &str,
) -> (Run, BTreeMap<String, String>, u64) {
    let restored = restore_and_probe(bins, part, root, source, env_user, name, None).await;
    (restored.run, restored.keys, restored.cluster_id)
}

/// What a restored member answers: its keys, cluster ID and revision, and what a watch that
/// resumes from `watch_from` gets first.
struct Restored {
    run: Run,
    keys: BTreeMap<String, String>,
    cluster_id: u64,
    revision: i64,
    /// `(compact_revision, canceled)` of the watch's first answer past its creation.
    watch: Option<(i64, bool)>,
}

/// [`restore_and_read`], also reading the restored revision and opening a watch from
/// `watch_from` (a revision a client of the source saw after the snapshot).
async fn restore_and_probe(
    bins: &Testbins,
    part: &str,
    root: &Path,
    source: &[String],
    env_user: Option<&S3User>,
    name: &str,
    watch_from: Option<i64>,
) -> Restored {
    let config = EtcdConfig::new(name, &format!("{name}-token")).or_panic();
    let data_dir = root.join(name).join("data");
    let mut agent = restore_agent(bins, part, root, &data_dir, &config, source);
    if let Some(user) = env_user {
        agent = agent.creds(user);
    }
    let run = agent.run(&format!("restore-{name}")).await;
    run.assert_code(0, "restore failed");
    assert!(
        !data_dir.join(".restore").exists(),
        "the work directory is left behind"
    );
    let etcd = Etcd::start(
        &bins.binary(part, "etcd").or_panic(),
        &config,
        &data_dir,
        &root.join("logs"),
    )
    .await
    .or_panic();
    let mut client = etcd.client().await.or_panic();
    let keys = read_keys(&mut client, "snap/").await;
    let id = cluster_id(&mut client).await;
    let revision = current_revision(&mut client).await;
    let watch = match watch_from {
        Some(from) => {
            let options = etcd_client::WatchOptions::new()
                .with_prefix()
                .with_start_revision(from);
            let mut stream = client.watch("snap/", Some(options)).await.or_panic();
            // The first answer may only confirm the watch was created; the verdict on its start
            // revision (events, or a cancel for compaction) follows it.
            let verdict = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    let response = stream
                        .message()
                        .await
                        .or_panic()
                        .expect("the watch stream stays open until it answers");
                    if !response.created() || response.canceled() {
                        return response;
                    }
                }
            })
            .await
            .expect("a watch from an old revision answers at once");
            Some((verdict.compact_revision(), verdict.canceled()))
        }
        None => None,
    };
    etcd.stop();
    Restored {
        run,
        keys,
        cluster_id: id,
        revision,
        watch,
    }
}

async fn current_revision(client: &mut etcd_client::Client) -> i64 {
    client
        .get("snap/", None)
        .await
        .or_panic()
        .header()
        .map(|h| h.revision())
        .unwrap_or_default()
}

fn save_args(etcd: &Etcd, name: &str, uid: &str) -> Vec<String> {
    vec![
        "save".into(),
        format!("--endpoints={}", etcd.config.client_url),
        format!("--snapshot-name={name}"),
        format!("--snapshot-uid={uid}"),
    ]
}

fn agent_with(root: &Path, args: &[String]) -> Agent {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Agent::new(root, &refs)
}

/// A save of snapshot `name` (UID `uid`) to MinIO's bucket with `user`'s keys.
fn s3_save(root: &Path, etcd: &Etcd, name: &str, uid: &str, minio: &Minio, user: &S3User) -> Agent {
    agent_with(root, &save_args(etcd, name, uid)).s3(minio, user)
}

/// A save of snapshot `name` (UID `uid`) to the claim `claim` mounted at `mount`.
fn pvc_save(
    root: &Path,
    etcd: &Etcd,
    (name, uid): (&str, &str),
    (claim, mount): (&str, &Path),
    sub_path: Option<&str>,
) -> Agent {
    let mut args = save_args(etcd, name, uid);
    args.push(format!("--pvc-claim={claim}"));
    args.push(format!("--pvc-mount={}", mount.display()));
    if let Some(sub_path) = sub_path {
        args.push(format!("--pvc-sub-path={sub_path}"));
    }
    agent_with(root, &args)
}

/// The restore source arguments of the object at `key` in MinIO (its CA when it serves TLS).
fn s3_source(minio: &Minio, key: &str) -> Vec<String> {
    let mut source = vec![
        format!("--s3-endpoint={}", minio.endpoint),
        format!("--s3-bucket={}", minio.bucket),
        format!("--s3-key={key}"),
        "--s3-force-path-style".to_string(),
    ];
    if let Some(ca) = &minio.ca_file {
        source.push(format!("--s3-ca-file={}", ca.display()));
    }
    source
}

/// A restore of `source` into `data_dir` as the member `config`, with `etcdutl` of `part`.
fn restore_agent(
    bins: &Testbins,
    part: &str,
    root: &Path,
    data_dir: &Path,
    config: &EtcdConfig,
    source: &[String],
) -> Agent {
    let mut agent = Agent::new(
        root,
        &[
            "restore",
            &format!("--data-dir={}", data_dir.display()),
            &format!("--name={}", config.name),
            &format!("--initial-cluster={}", config.initial_cluster()),
            &format!("--initial-cluster-token={}", config.token),
            &format!("--initial-advertise-peer-urls={}", config.peer_url),
            &format!(
                "--etcdutl={}",
                bins.binary(part, "etcdutl").or_panic().display()
            ),
        ],
    );
    for s in source {
        agent = agent.arg(s.clone());
    }
    agent
}

/// Put the keys `big/<i>` for `i` in `range`, each a 1 MiB value of `byte`.
async fn put_mib_values(client: &mut etcd_client::Client, range: std::ops::Range<usize>, byte: u8) {
    let value = vec![byte; 1024 * 1024];
    for i in range {
        client
            .put(format!("big/{i}"), value.clone(), None)
            .await
            .or_panic();
    }
}

/// A single-member etcd 3.6 with ~`mib` MiB of values (8 MiB make one upload part), and a
/// client of it.
async fn etcd_with_mib(bins: &Testbins, root: &Path, mib: usize) -> (Etcd, etcd_client::Client) {
    let (etcd, _, _) = etcd_with_keys(bins, "etcd-3.6", root, 1).await;
    let mut client = etcd.client().await.or_panic();
    put_mib_values(&mut client, 0..mib, b'x').await;
    (etcd, client)
}

/// The object stored at `key` (read as the root user): its body and metadata.
async fn stored_object(minio: &Minio, key: &str) -> (Vec<u8>, HashMap<String, String>) {
    let obj = minio
        .root_client()
        .get_object()
        .bucket(&minio.bucket)
        .key(key)
        .send()
        .await
        .or_panic_debug();
    let meta = obj.metadata().cloned().unwrap_or_default();
    let body = obj.body.collect().await.or_panic().into_bytes().to_vec();
    (body, meta)
}

/// Nothing is left of an interrupted upload at `key`: no object, no multipart upload.
async fn assert_nothing_stored(minio: &Minio, key: &str, output: &str) {
    assert_eq!(
        minio.uploads(key).await,
        Vec::<String>::new(),
        "a multipart upload was left behind; output:\n{output}"
    );
    assert_eq!(
        minio.objects().await,
        Vec::<(String, i64)>::new(),
        "no object: the snapshot was interrupted before it was stored; output:\n{output}"
    );
}

#[tokio::test]
async fn s3_snapshot_over_tls_is_the_stored_object_and_restores_with_a_new_cluster_id() {
    let (bins, tmp, minio) = with_minio(true).await;
    let root = tmp.path();
    let (etcd, keys, source_id) = etcd_with_keys(&bins, "etcd-3.6", root, 200).await;
    let save =
        s3_save(root, &etcd, "snap-1", "uid-1", &minio, &minio.writer).arg("--s3-key=backups/");

    let run = save.run("save").await;
    run.assert_code(0, "save failed");
    assert_eq!(
        run.artifact("uri"),
        "s3://snapshots/backups/snap-1.db",
        "{}",
        run.result
    );
    let size = run
        .artifact("sizeBytes")
        .as_u64()
        .or_panic_none("sizeBytes");
    let checksum = run
        .artifact("checksum")
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        run.output.contains("streaming the snapshot"),
        "the agent logs what it does:\n{}",
        run.output
    );

    // The object is what the artifact says.
    let (body, meta) = stored_object(&minio, "backups/snap-1.db").await;
    assert_eq!(body.len() as u64, size);
    assert!(size > 20_000, "a snapshot of 200 keys is not {size} bytes");
    assert_eq!(checksum, format!("sha256:{}", sha256_hex(&body)));
    assert_eq!(
        meta.get("snapshot-uid").map(String::as_str),
        Some("uid-1"),
        "{meta:?}"
    );
    assert_eq!(
        minio.recorded_sha256("backups/snap-1.db").await,
        Some(sha256_hex(&body)),
        "the checksum object backups/snap-1.db.sha256 records the object's sha256"
    );
    assert_eq!(meta.get("sha256"), None, "no CopyObject stamp: {meta:?}");
    assert_eq!(
        minio.uploads("backups/snap-1.db").await,
        Vec::<String>::new()
    );

    // The same snapshot again (a retried Job) is not refused: it reports its own stored object.
    let again = save.run("save-again").await;
    again.assert_code(0, "a retry of the same snapshot failed");
    let checksum = again
        .artifact("checksum")
        .as_str()
        .unwrap_or_default()
        .to_string();

    // Restore with etcdutl 3.6: every key, a new cluster ID; the sha256 comes from the checksum
    // object.
    let source = s3_source(&minio, "backups/snap-1.db");
    assert!(minio.ca_file.is_some(), "the TLS MinIO has a CA file");
    let (restore, got, id) = restore_and_read(
        &bins,
        "etcd-3.6",
        root,
        &source,
        Some(&minio.writer),
        "restored",
    )
    .await;
    assert_eq!(got, keys, "every key is back");
    assert_ne!(id, source_id, "a restored cluster has a new cluster ID");
    assert!(
        restore.output.contains("checksum verified"),
        "{}",
        restore.output
    );
    assert_eq!(restore.result["restored"]["checksum"], checksum.as_str());

    // A second run on the initialised data dir touches nothing.
    let data_dir = root.join("restored").join("data");
    let before = dir_listing(&data_dir);
    let config = EtcdConfig::new("restored", "restored-token").or_panic();
    let skip = restore_agent(&bins, "etcd-3.6", root, &data_dir, &config, &source)
        .creds(&minio.writer)
        .run("restore-again")
        .await;
    skip.assert_code(0, "a restore onto an initialised data dir failed");
    assert!(
        skip.output.contains("already initialised"),
        "{}",
        skip.output
    );
    assert_eq!(
        dir_listing(&data_dir),
        before,
        "an initialised data dir is never touched"
    );

    // A wrong expected checksum is refused (exit 2) and leaves no member behind.
    let mut bad = source.clone();
    bad.push(format!("--expected-sha256={}", "0".repeat(64)));
    let config = EtcdConfig::new("corrupt", "t").or_panic();
    let corrupt_dir = root.join("corrupt");
    let refused = restore_agent(&bins, "etcd-3.6", root, &corrupt_dir, &config, &bad)
        .creds(&minio.writer)
        .run("restore-corrupt")
        .await;
    refused.assert_code(2, "a wrong expected checksum is refused");
    assert!(refused.error().contains("sha256"), "{}", refused.error());
    assert!(!corrupt_dir.join("member").exists());
    etcd.stop();
}

#[tokio::test]
async fn etcd_3_5_snapshot_restores_with_its_own_etcdutl() {
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    let (etcd, keys, source_id) = etcd_with_keys(&bins, "etcd-3.5", root, 100).await;
    let run = s3_save(root, &etcd, "snap-35", "uid-35", &minio, &minio.writer)
        .run("save")
        .await;
    run.assert_code(0, "save failed");
    assert_eq!(run.artifact("uri"), "s3://snapshots/snap-35.db");
    let source = s3_source(&minio, "snap-35.db");
    let (_, got, id) = restore_and_read(
        &bins,
        "etcd-3.5",
        root,
        &source,
        Some(&minio.writer),
        "restored35",
    )
    .await;
    assert_eq!(got, keys);
    assert_ne!(id, source_id);
    etcd.stop();
}

/// A restore rewinds the store to the snapshot's revision R. Clients of the source (a tenant
/// kube-apiserver's informers) hold later revisions, up to R+N: were the restored cluster to
/// count again from R, a watch resumed from R+N would silently skip every event until the
/// revisions caught up. The restore bumps the revision past them and marks the range compacted,
/// so such a watch is told to relist.
async fn restore_bumps_the_revision_and_marks_the_gap_compacted(part: &str) {
    let bins = Testbins::from_env().or_panic();
    let tmp = temp_root().or_panic();
    let root = tmp.path();
    let (etcd, mut keys, _) = etcd_with_keys(&bins, part, root, 20).await;
    let mut client = etcd.client().await.or_panic();
    let at_snapshot = current_revision(&mut client).await;
    let mount = root.join("pvc");
    let run = pvc_save(
        root,
        &etcd,
        ("snap-rev", "uid-rev"),
        ("backups", &mount),
        None,
    )
    .run("save")
    .await;
    run.assert_code(0, "save failed");
    // N more writes after the snapshot: revisions a watcher of the source has seen.
    let _ = put_keys(&mut client, "after/", 50).await;
    let seen = current_revision(&mut client).await;
    assert_eq!(seen, at_snapshot + 50);
    etcd.stop();

    let source = vec![format!(
        "--pvc-file={}",
        mount.join("snap-rev.db").display()
    )];
    let restored = restore_and_probe(
        &bins,
        part,
        root,
        &source,
        None,
        &format!("bumped-{}", part.replace('.', "")),
        Some(seen),
    )
    .await;
    keys.retain(|k, _| k.starts_with("snap/"));
    assert_eq!(restored.keys, keys, "every key of the snapshot is restored");
    assert!(
        restored.revision > seen,
        "the restored revision {} must be past every revision the source's clients saw ({seen}; \
         the snapshot was at {at_snapshot})",
        restored.revision
    );
    let (compacted_at, canceled) = restored.watch.expect("the watch was opened");
    assert!(
        canceled && compacted_at > seen,
        "a watch resumed from revision {seen} must be cancelled as compacted (got compact \
         revision {compacted_at}, canceled {canceled}); silence would hide the rewind"
    );
}

#[tokio::test]
async fn etcd_3_6_restore_bumps_the_revision_and_marks_the_gap_compacted() {
    restore_bumps_the_revision_and_marks_the_gap_compacted("etcd-3.6").await;
}

#[tokio::test]
async fn etcd_3_5_restore_bumps_the_revision_and_marks_the_gap_compacted() {
    restore_bumps_the_revision_and_marks_the_gap_compacted("etcd-3.5").await;
}

#[tokio::test]
async fn pvc_snapshot_is_written_durably_guarded_and_restores() {
    let bins = Testbins::from_env().or_panic();
    let tmp = temp_root().or_panic();
    let root = tmp.path();
    let (etcd, keys, source_id) = etcd_with_keys(&bins, "etcd-3.6", root, 150).await;
    let mount = root.join("pvc");
    let pvc = |name: &str, uid: &str| {
        pvc_save(
            root,
            &etcd,
            (name, uid),
            ("backups", &mount),
            Some("etcd/daily"),
        )
    };
    let run = pvc("snap-p", "uid-p").run("save").await;
    run.assert_code(0, "save failed");
    assert_eq!(run.artifact("uri"), "pvc://backups/etcd/daily/snap-p.db");
    let file = mount.join("etcd/daily/snap-p.db");
    let data = std::fs::read(&file).or_panic();
    assert_eq!(run.artifact("sizeBytes").as_u64(), Some(data.len() as u64));
    assert_eq!(
        run.artifact("checksum"),
        format!("sha256:{}", sha256_hex(&data)).as_str()
    );
    assert_eq!(
        std::fs::read_to_string(mount.join("etcd/daily/snap-p.db.uid")).or_panic(),
        "uid-p\n"
    );
    let mut names: Vec<String> = std::fs::read_dir(mount.join("etcd/daily"))
        .or_panic()
        .map(|e| e.or_panic().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["snap-p.db", "snap-p.db.sha256", "snap-p.db.uid"],
        "no temp file is left"
    );

    // Another snapshot's file at the path is refused; the same snapshot may overwrite it.
    let foreign = pvc("snap-p", "uid-other").run("save-foreign").await;
    foreign.assert_code(2, "another snapshot's file is refused");
    assert!(
        foreign.error().contains("uid-p") && foreign.error().contains("refusing"),
        "{}",
        foreign.error()
    );
    assert_eq!(
        std::fs::read(&file).or_panic(),
        data,
        "the refused run left the file alone"
    );
    pvc("snap-p", "uid-p")
        .run("save-retry")
        .await
        .assert_code(0, "the same snapshot may overwrite its file");
    // A file without a sidecar was not written by the operator: refused.
    std::fs::write(mount.join("etcd/daily/other.db"), b"not ours").or_panic();
    pvc("other", "uid-o")
        .run("save-unmarked")
        .await
        .assert_code(2, "a file without a sidecar is refused");
    assert_eq!(
        std::fs::read(mount.join("etcd/daily/other.db")).or_panic(),
        b"not ours"
    );

    let source = vec![format!("--pvc-file={}", file.display())];
    let (restore, got, id) =
        restore_and_read(&bins, "etcd-3.6", root, &source, None, "fromPvc").await;
    assert_eq!(got, keys);
    assert_ne!(id, source_id);
    assert!(
        restore.output.contains("checksum verified"),
        "the sidecar's sha256 is checked:\n{}",
        restore.output
    );
    etcd.stop();
}

/// The agent in an image without CA certificates (no `/etc/ssl/certs`; an etcd image built
/// `FROM scratch`, or a distroless one without its CA bundle; here the system roots pointed at an
/// empty file and directory): a plain-http endpoint needs none and works; an https one without
/// `--s3-ca-file` fails at once, naming what is missing and the fix, never a panic or a TLS
/// error later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_system_ca_certificates_plain_http_works_and_https_names_the_missing_roots() {
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    let (etcd, _, _) = etcd_with_keys(&bins, "etcd-3.6", root, 10).await;
    let no_roots = root.join("no-roots");
    std::fs::create_dir_all(&no_roots).or_panic();
    std::fs::write(no_roots.join("empty.pem"), "").or_panic();
    let without_roots = |agent: Agent| {
        agent
            .env(
                "SSL_CERT_FILE",
                &no_roots.join("empty.pem").to_string_lossy(),
            )
            .env("SSL_CERT_DIR", &no_roots.to_string_lossy())
    };

    let plain = without_roots(s3_save(
        root,
        &etcd,
        "plain",
        "uid-p",
        &minio,
        &minio.writer,
    ))
    .run("save-plain-no-roots")
    .await;
    plain.assert_code(0, "a plain-http save without system CA certificates");

    let mut https = save_args(&etcd, "tls", "uid-t");
    https.push("--s3-endpoint=https://127.0.0.1:1".into());
    https.push(format!("--s3-bucket={}", minio.bucket));
    let refused = without_roots(agent_with(root, &https).creds(&minio.writer))
        .run("save-https-no-roots")
        .await;
    refused.assert_code(2, "an https save without system CA certificates");
    for needle in ["no CA certificates", "--s3-ca-file"] {
        assert!(refused.error().contains(needle), "{}", refused.error());
    }
}

#[tokio::test]
async fn s3_refusals_fail_closed_with_the_cause_and_the_fix() {
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    let (etcd, _, _) = etcd_with_keys(&bins, "etcd-3.6", root, 10).await;

    // Another snapshot's object at the key.
    s3_save(root, &etcd, "taken", "uid-a", &minio, &minio.writer)
        .run("save-a")
        .await
        .assert_code(0, "the first snapshot at the key");

    let wrong = S3User {
        access_key: minio.writer.access_key.clone(),
        secret_key: "not-the-secret".into(),
    };
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").or_panic();
        l.local_addr().or_panic().port()
    };
    let mut unreachable = save_args(&etcd, "new-one", "uid-c");
    unreachable.push(format!("--s3-endpoint=http://127.0.0.1:{closed}"));
    unreachable.push(format!("--s3-bucket={}", minio.bucket));
    unreachable.push("--s3-force-path-style".into());
    let closed_endpoint = format!("127.0.0.1:{closed}");
    // (run tag, agent, exit code, what its error must name)
    let cases: [(&str, Agent, i32, &[&str]); 4] = [
        // Another snapshot's object at the key: refused, named.
        (
            "save-b",
            s3_save(root, &etcd, "taken", "uid-b", &minio, &minio.writer),
            2,
            &["uid-a", "refusing to overwrite"],
        ),
        // HeadObject answers 403 (on AWS: a missing key without ListBucket; here a user that
        // may write but not read): the agent cannot know what it would overwrite, so it fails
        // closed.
        (
            "save-nolist",
            s3_save(root, &etcd, "new-one", "uid-c", &minio, &minio.nolist),
            2,
            &["403", "s3:ListBucket"],
        ),
        // Wrong credentials.
        (
            "save-wrong-creds",
            s3_save(root, &etcd, "new-one", "uid-c", &minio, &wrong),
            2,
            &["AWS_SECRET_ACCESS_KEY"],
        ),
        // An endpoint nobody listens on: bounded, transient (exit 1), names the endpoint.
        (
            "save-unreachable",
            agent_with(root, &unreachable).creds(&minio.writer),
            1,
            &[&closed_endpoint],
        ),
    ];
    for (tag, agent, code, needles) in cases {
        let run = agent.run(tag).await;
        run.assert_code(code, tag);
        for needle in needles {
            assert!(
                run.error().contains(needle),
                "{tag}: the error does not name {needle:?}: {}",
                run.error()
            );
        }
        if tag == "save-unreachable" {
            assert!(
                run.took < Duration::from_secs(60),
                "{tag} took {:?}",
                run.took
            );
        }
    }
    let head = minio
        .root_client()
        .head_object()
        .bucket(&minio.bucket)
        .key("taken.db")
        .send()
        .await
        .or_panic_debug();
    assert_eq!(
        head.metadata()
            .and_then(|m| m.get("snapshot-uid"))
            .map(String::as_str),
        Some("uid-a"),
        "the first snapshot's object is untouched"
    );

    let keys: Vec<String> = minio.objects().await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["taken.db", "taken.db.sha256"]);
    assert!(
        minio.recorded_sha256("taken.db").await.is_some(),
        "the refused attempt left the first snapshot's checksum object bound to it"
    );
    for key in ["taken.db", "new-one.db"] {
        assert_eq!(minio.uploads(key).await, Vec::<String>::new(), "{key}");
    }
    etcd.stop();
}

#[tokio::test]
async fn s3_killed_mid_upload_leaves_no_object_and_no_upload() {
    let (bins, tmp, mut minio) = with_minio(false).await;
    let root = tmp.path();
    // The listing used below sees an in-progress upload.
    let s3 = minio.root_client();
    let probe = s3
        .create_multipart_upload()
        .bucket(&minio.bucket)
        .key("probe.db")
        .send()
        .await
        .or_panic_debug();
    assert_eq!(minio.uploads("probe.db").await, ["probe.db"]);
    s3.abort_multipart_upload()
        .bucket(&minio.bucket)
        .key("probe.db")
        .upload_id(probe.upload_id().unwrap_or_default())
        .send()
        .await
        .or_panic_debug();
    // ~48 MiB of values: six parts of 8 MiB.
    let (etcd, _client) = etcd_with_mib(&bins, root, 48).await;

    let agent = s3_save(root, &etcd, "big", "uid-big", &minio, &minio.writer);
    let running = agent.start("save-killed");
    wait_for_log(&running.log, "part=2", Duration::from_secs(120)).await;
    minio.kill();
    wait_for_log(
        &running.log,
        "aborting the multipart upload",
        Duration::from_secs(120),
    )
    .await;
    minio.restart().await.or_panic();
    let run = running
        .finish(AGENT_TIMEOUT, "the agent whose MinIO was killed")
        .await;
    run.assert_aborted_upload("UploadPart");
    assert_nothing_stored(&minio, "big.db", &run.output).await;
    etcd.stop();
}

/// `count` keys `big/<i>`, each a distinct 512 KiB value (no two parts of the snapshot alike).
async fn put_distinct_values(client: &mut etcd_client::Client, count: usize) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..count {
        let value: Vec<u8> = (0..512 * 1024)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 56) as u8
            })
            .collect();
        client
            .put(format!("big/{i:04}"), value, None)
            .await
            .or_panic();
    }
}

#[tokio::test]
async fn s3_multipart_snapshot_is_byte_identical_and_restores() {
    // Parts upload concurrently: the stored object must still be etcd's stream byte for byte,
    // in order, whatever order the parts finished in.
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    let (etcd, keys, source_id) = etcd_with_keys(&bins, "etcd-3.6", root, 200).await;
    let mut client = etcd.client().await.or_panic();
    // ~48 MiB: six parts of 8 MiB, twice what the agent holds at once.
    put_distinct_values(&mut client, 96).await;

    let run = s3_save(root, &etcd, "multi", "uid-multi", &minio, &minio.writer)
        .run("save-multi")
        .await;
    run.assert_code(0, "save failed");
    let uploaded = run.output.matches("part uploaded").count();
    assert!(uploaded >= 6, "{uploaded} parts:\n{}", run.output);
    let (body, meta) = stored_object(&minio, "multi.db").await;
    assert_eq!(Some(body.len() as u64), run.artifact("sizeBytes").as_u64());
    assert_eq!(
        run.artifact("checksum").as_str(),
        Some(format!("sha256:{}", sha256_hex(&body)).as_str())
    );
    assert_eq!(
        minio.recorded_sha256("multi.db").await,
        Some(sha256_hex(&body)),
        "{meta:?}"
    );
    // etcd ends its snapshot stream with the sha256 of everything before it: the object is
    // exactly what etcd sent.
    let (db, trailer) = body.split_at(body.len() - 32);
    let trailer: String = trailer.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        sha256_hex(db),
        trailer,
        "the stored object is not the stream etcd sent (parts out of order or lost)"
    );
    assert_eq!(minio.uploads("multi.db").await, Vec::<String>::new());

    let (restore, got, id) = restore_and_read(
        &bins,
        "etcd-3.6",
        root,
        &s3_source(&minio, "multi.db"),
        Some(&minio.writer),
        "restored-multi",
    )
    .await;
    // etcdutl checks etcd's trailing hash too before it restores.
    restore.assert_code(0, "restore failed");
    assert_eq!(got, keys, "every key is back with its value");
    assert_ne!(id, source_id);
    etcd.stop();
}

#[tokio::test]
async fn s3_snapshot_stream_broken_with_parts_in_flight_leaves_no_object_and_no_upload() {
    // etcd goes away while parts are uploading: the agent stops the parts in flight and aborts
    // the multipart upload; nothing of the snapshot stays in the bucket.
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    // ~128 MiB of values: 26 parts, far more than the agent holds (and has read) when the
    // first part is stored.
    let (etcd, _client) = etcd_with_mib(&bins, root, 128).await;

    let agent = s3_save(root, &etcd, "big", "uid-big", &minio, &minio.writer);
    let running = agent.start("save-etcd-killed");
    wait_for_log(&running.log, "part=1 ", Duration::from_secs(120)).await;
    etcd.stop();
    let run = running
        .finish(AGENT_TIMEOUT, "the agent whose etcd was killed")
        .await;
    run.assert_aborted_upload("the snapshot stream from etcd broke");
    assert_nothing_stored(&minio, "big.db", &run.output).await;
}

#[tokio::test]
async fn s3_sigterm_mid_upload_aborts_the_multipart_upload() {
    // A snapshot Job's Pod is stopped with SIGTERM when the Job passes its deadline, when
    // concurrencyPolicy Replace or a deleted EtcdSnapshot removes the Job: the agent must abort
    // its multipart upload before it exits, not leave the parts stored in the bucket.
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    // ~96 MiB of values: twelve parts of 8 MiB, so the upload is still running when the signal
    // comes right after it started.
    let (etcd, _client) = etcd_with_mib(&bins, root, 96).await;

    let agent = s3_save(root, &etcd, "big", "uid-big", &minio, &minio.writer);
    let running = agent.start("save-sigterm");
    wait_for_log(
        &running.log,
        "multipart upload started",
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        minio.uploads("big.db").await,
        ["big.db"],
        "the upload is in progress"
    );
    sigterm(&running);
    let run = running
        .finish(Duration::from_secs(60), "the agent after SIGTERM")
        .await;
    assert_nothing_stored(
        &minio,
        "big.db",
        &format!("after SIGTERM ({}): {}", run.status, run.output),
    )
    .await;
    run.assert_aborted_upload("SIGTERM");
    etcd.stop();
}

#[tokio::test]
async fn two_pods_of_one_job_report_the_checksum_of_the_object_stored() {
    // Two Pods of one snapshot Job can upload the same key at once: a Job retry while the first
    // Pod still runs, or a Pod on a lost Node that keeps running. Whatever each reports must
    // describe the object that stays stored; a later retry must not replace it either.
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    // ~24 MiB: three parts, so the first upload still runs when the second starts.
    let (etcd, mut client) = etcd_with_mib(&bins, root, 24).await;
    let agent = s3_save(root, &etcd, "twice", "uid-twice", &minio, &minio.writer);
    let first = agent.start("save-first");
    wait_for_log(
        &first.log,
        "multipart upload started",
        Duration::from_secs(120),
    )
    .await;
    // The second Pod snapshots a later revision: the two uploads differ.
    client.put("between", "the two Pods", None).await.or_panic();
    let second = agent.run("save-second").await;
    let first = first.finish(AGENT_TIMEOUT, "the first agent").await;

    let stored = || async {
        let (body, meta) = stored_object(&minio, "twice.db").await;
        (
            format!("sha256:{}", sha256_hex(&body)),
            body.len() as u64,
            meta,
        )
    };
    let (checksum, size, meta) = stored().await;
    eprintln!(
        "first agent:\n{}\nsecond agent:\n{}",
        first.output, second.output
    );
    let mut reported = 0;
    for (which, run) in [("first", &first), ("second", &second)] {
        if run.code() != Some(0) {
            // Refusing is allowed; reporting another upload's checksum is not.
            eprintln!("the {which} agent failed: {}", run.error());
            continue;
        }
        reported += 1;
        assert_eq!(
            run.artifact("checksum").as_str(),
            Some(checksum.as_str()),
            "the {which} agent reported a checksum that is not the stored object's; output:\n{}",
            run.output
        );
        assert_eq!(run.artifact("sizeBytes").as_u64(), Some(size), "{which}");
    }
    assert!(
        reported > 0,
        "neither agent stored the snapshot:\n{}\n{}",
        first.output,
        second.output
    );
    assert_eq!(
        minio
            .recorded_sha256("twice.db")
            .await
            .map(|h| format!("sha256:{h}")),
        Some(checksum.clone()),
        "the recorded sha256 is not the stored object's content's"
    );
    assert_eq!(
        meta.get("snapshot-uid").map(String::as_str),
        Some("uid-twice")
    );
    assert_eq!(
        minio.uploads("twice.db").await,
        Vec::<String>::new(),
        "an upload was left behind"
    );

    // A later Pod of the same Job (its predecessor's report was lost) reports the stored
    // object and leaves it as it is.
    client.put("after", "the two Pods", None).await.or_panic();
    let third = agent.run("save-third").await;
    eprintln!("third agent:\n{}", third.output);
    third.assert_code(0, "a later Pod of the same Job");
    assert_eq!(
        third.artifact("checksum").as_str(),
        Some(checksum.as_str()),
        "a retry replaced or misreported the stored snapshot; output:\n{}",
        third.output
    );
    assert_eq!(
        stored().await.0,
        checksum,
        "the stored snapshot was replaced"
    );
    assert_eq!(minio.uploads("twice.db").await, Vec::<String>::new());
    etcd.stop();
}

/// The client retention uses (the schedule controller's), with the writer's keys.
fn retention_client(minio: &Minio) -> controller::objectstore::S3 {
    let args = controller::objectstore::S3Args {
        s3_bucket: Some(minio.bucket.clone()),
        s3_key: None,
        s3_endpoint: Some(minio.endpoint.clone()),
        s3_region: "us-east-1".into(),
        s3_force_path_style: true,
        s3_ca_file: None,
    };
    controller::objectstore::S3::with_credentials(
        &args,
        minio.writer.access_key.clone(),
        minio.writer.secret_key.clone(),
    )
    .or_panic_debug()
}

/// Put `key` as the root user with the snapshot UID metadata `uid` (none: a foreign object).
async fn put_object(minio: &Minio, key: &str, uid: Option<&str>) {
    let mut put = minio
        .root_client()
        .put_object()
        .bucket(&minio.bucket)
        .key(key)
        .body(b"snapshot bytes".to_vec().into());
    if let Some(uid) = uid {
        put = put.metadata("snapshot-uid", uid);
    }
    put.send().await.or_panic_debug();
}

#[tokio::test]
async fn retention_aborts_stale_uploads_at_the_snapshots_key_only() {
    // An agent killed without running its SIGTERM handler (SIGKILL, a lost Node) leaves its
    // multipart upload; pruning the snapshot aborts the uploads at exactly its key.
    let (_bins, _tmp, minio) = with_minio(false).await;
    let root = minio.root_client();
    for key in ["sched/s-1.db", "sched/s-1.db", "sched/s-10.db"] {
        root.create_multipart_upload()
            .bucket(&minio.bucket)
            .key(key)
            .send()
            .await
            .or_panic_debug();
    }
    assert_eq!(minio.uploads("sched/s-1.db").await.len(), 2);
    let at = controller::objectstore::Location {
        bucket: minio.bucket.clone(),
        key: "sched/s-1.db".into(),
    };
    let aborted = retention_client(&minio)
        .abort_uploads(&at)
        .await
        .or_panic_debug();
    assert_eq!(aborted, 2);
    assert_eq!(minio.uploads("sched/s-1.db").await, Vec::<String>::new());
    assert_eq!(
        minio.uploads("sched/s-10.db").await,
        ["sched/s-10.db"],
        "another snapshot's upload is not touched"
    );
}

#[tokio::test]
async fn a_failed_snapshots_own_object_is_deleted_and_no_other() {
    // A Failed snapshot records no artifact, yet its agent may have stored the object (a crash
    // after CompleteMultipartUpload, a lost Job): pruning it deletes the object at its key when
    // the UID metadata names it, and leaves another snapshot's or a foreign object alone.
    let (_bins, _tmp, minio) = with_minio(false).await;
    let s3 = retention_client(&minio);
    let at = |key: &str| controller::objectstore::Location {
        bucket: minio.bucket.clone(),
        key: key.into(),
    };
    put_object(&minio, "mine.db", Some("uid-mine")).await;
    // Its checksum object goes with it.
    put_object(&minio, "mine.db.sha256", Some("uid-mine")).await;
    put_object(&minio, "theirs.db", Some("uid-theirs")).await;
    put_object(&minio, "foreign.db", None).await;
    // (key, whether uid-mine's prune deletes it)
    for (key, deleted) in [
        ("mine.db", true),
        ("theirs.db", false),
        ("foreign.db", false),
        ("absent.db", false),
    ] {
        assert_eq!(
            s3.delete_if_owned(&at(key), "uid-mine")
                .await
                .or_panic_debug(),
            deleted,
            "{key}"
        );
    }
    let left: Vec<String> = minio.objects().await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(left, ["foreign.db", "theirs.db"]);
}

#[tokio::test]
async fn restore_into_a_too_small_filesystem_fails_early_with_both_sizes() {
    let bins = Testbins::from_env().or_panic();
    let tmp = temp_root().or_panic();
    let root = tmp.path();
    let (etcd, _, _) = etcd_with_keys(&bins, "etcd-3.6", root, 500).await;
    let mount = root.join("pvc");
    let run = pvc_save(root, &etcd, ("s", "uid-s"), ("c", &mount), None)
        .run("save")
        .await;
    run.assert_code(0, "save failed");
    let size = run.artifact("sizeBytes").as_u64().or_panic_none("size");
    etcd.stop();

    // A data volume of 1.5x the snapshot: the file would fit, the restore would not.
    let small = root.join("small");
    std::fs::create_dir_all(&small).or_panic();
    let bytes = (size * 3 / 2).div_ceil(4096) * 4096;
    nix::mount::mount(
        Some("tmpfs"),
        &small,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some(format!("size={bytes}").as_str()),
    )
    .unwrap_or_else(|e| panic!("mounting a {bytes}-byte tmpfs (the tests run as root): {e}"));
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let _unmount = Unmount(small.clone());
    let config = EtcdConfig::new("small", "t").or_panic();
    let data_dir = small.join("data");
    let source = [format!("--pvc-file={}", mount.join("s.db").display())];
    let refused = restore_agent(&bins, "etcd-3.6", root, &data_dir, &config, &source)
        .run("restore-small")
        .await;
    refused.assert_code(2, "a restore into a too-small filesystem is refused");
    let e = refused.error();
    assert!(
        e.contains(&format!("({size} bytes)")),
        "names the snapshot size: {e}"
    );
    assert!(
        e.contains(&format!("({} bytes)", size * 2)),
        "names the needed size: {e}"
    );
    assert!(e.contains("storage.size"), "names the fix: {e}");
    assert!(
        !refused.output.contains("running etcdutl"),
        "fails before restoring:\n{}",
        refused.output
    );
    assert_eq!(
        dir_listing(&data_dir),
        Vec::<String>::new(),
        "nothing is written"
    );
}

#[tokio::test]
async fn s3_save_peak_memory_does_not_grow_with_the_database() {
    let (bins, tmp, minio) = with_minio(false).await;
    let root = tmp.path();
    let (etcd, _, _) = etcd_with_keys(&bins, "etcd-3.6", root, 10).await;
    let mut client = etcd.client().await.or_panic();
    let mut sizes = Vec::new();
    // ~40 MiB (five parts, more than the three the agent holds), then ~120 MiB (15 parts).
    for (name, puts) in [("medium", 0..40), ("big", 40..120)] {
        put_mib_values(&mut client, puts, b'y').await;
        let (rss, run) = peak_rss_and_run(root, &minio, &etcd, name).await;
        let size = run.artifact("sizeBytes").as_u64().unwrap_or(0);
        eprintln!("agent peak RSS {rss} bytes saving a {size}-byte snapshot");
        sizes.push((size, rss));
    }
    let [(medium_size, medium), (big_size, big)] = sizes[..] else {
        unreachable!()
    };
    assert!(
        big_size > 3 * medium_size / 2 && big_size > 100 << 20,
        "{sizes:?}"
    );
    // The 64 MiB target is the release build's, measured exactly by bench_snapshot
    // (docs/performance.md: 57–59 MiB). This debug build needs ~49 MiB before its first part
    // (measured: ~57 MiB peak with one 8 MiB part), so its bound is that plus the parts it holds
    // and allocator slack of three more parts (freed parts the allocator keeps per thread;
    // measured 78–85 MiB with three parts of 8 MiB held, under load).
    let bound = (49 << 20) + (PARTS_IN_MEMORY + 3) * PART_SIZE;
    assert!(
        big < bound as u64,
        "peak RSS {big} bytes saving {big_size} bytes (debug-build bound: under {} MiB)",
        bound >> 20
    );
    // Three times the data (100 MiB more), at most allocator noise more memory (about two
    // parts' worth); buffering the snapshot would add the 100 MiB.
    assert!(
        big < medium + (16 << 20),
        "peak RSS grew from {medium} bytes ({medium_size}-byte snapshot) to {big} bytes ({big_size}-byte snapshot)"
    );
    etcd.stop();
}

/// Run a save and sample its VmHWM (peak resident set) until it exits.
async fn peak_rss_and_run(root: &Path, minio: &Minio, etcd: &Etcd, name: &str) -> (u64, Run) {
    let agent = s3_save(
        root,
        etcd,
        name,
        &format!("uid-{name}"),
        minio,
        &minio.writer,
    );
    let mut running = agent.start(&format!("save-{name}"));
    let pid = running.child.id().unwrap_or(0);
    let mut peak = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak = peak.max(kb * 1024);
            }
        }
        if let Some(status) = running.child.try_wait().or_panic() {
            break status;
        }
        assert!(
            running.started.elapsed() < AGENT_TIMEOUT,
            "the save ran too long"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let run = finish(
        status,
        &running.log,
        &running.term,
        running.started.elapsed(),
    );
    run.assert_code(0, "save failed");
    assert!(peak > 0, "no VmHWM sampled");
    (peak, run)
}

async fn wait_for_log(log: &Path, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in {} after {timeout:?}:\n{text}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every path under `dir`, relative, sorted (empty when `dir` does not exist).
fn dir_listing(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap_or(&p).display().to_string());
            if p.is_dir() {
                walk(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A member's raft term, commit index and member ID as its running etcd reports them (`Status`),
/// once two reads a moment apart agree (etcd settles its cluster version after it starts).
async fn settled_position(client: &mut etcd_client::Client) -> (u64, u64, u64) {
    let mut last = None;
    for _ in 0..40 {
        let s = client.status().await.or_panic();
        let now = (
            s.raft_term(),
            s.raft_index(),
            s.header().map(|h| h.member_id()).unwrap_or_default(),
        );
        if last == Some(now) {
            return now;
        }
        last = Some(now);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("etcd's raft position did not settle: last {last:?}");
}

/// `snapshot-agent position` (and the reader behind it) on a real member's data dir after the
/// member stopped: the term, commit index, member ID and cluster ID its running etcd reported.
async fn position_is_what_the_running_member_reported(part: &str) {
    let bins = Testbins::from_env().or_panic();
    let tmp = temp_root().or_panic();
    let root = tmp.path();
    let (etcd, _keys, cluster) = etcd_with_keys(&bins, part, root, 300).await;
    let mut client = etcd.client().await.or_panic();
    let (term, index, member) = settled_position(&mut client).await;
    assert!(index > 300, "{part}: {index} is not past the 300 writes");
    etcd.terminate(Duration::from_secs(30)).await;

    let p = controller::agent::position::read_data_dir(&etcd.data_dir)
        .unwrap_or_else(|f| panic!("{part}: {}", f.message));
    assert_eq!(
        (p.term, p.commit, p.member_id, p.cluster_id),
        (term, index, member, cluster),
        "{part}: the WAL's position is not what the member reported: {p:?}"
    );
    assert!(
        p.last_index >= p.commit && p.torn_tail.is_none(),
        "{part}: {p:?}"
    );

    let data_dir = format!("--data-dir={}", etcd.data_dir.display());
    let run = Agent::new(root, &["position", &data_dir, "--member=source"])
        .run("position")
        .await;
    run.assert_code(0, "position of a stopped member");
    let reported = &run.result["position"];
    assert_eq!(reported["term"].as_u64(), Some(term), "{}", run.output);
    assert_eq!(reported["commit"].as_u64(), Some(index), "{}", run.output);
    assert_eq!(
        reported["memberId"].as_u64(),
        Some(member),
        "{}",
        run.output
    );
    assert_eq!(
        reported["clusterId"].as_u64(),
        Some(cluster),
        "{}",
        run.output
    );
    // What the operator reads from the termination message is the same position.
    let text = std::fs::read_to_string(root.join("position.json")).or_panic();
    let report = controller::agent_job::AgentReport::parse(&text).or_panic_none("the report");
    assert_eq!(report.position, Some(p));

    // Not a data dir: a permanent failure naming where it looked and what to check.
    let nowhere = format!("--data-dir={}", root.join("nothing").display());
    let run = Agent::new(root, &["position", &nowhere])
        .run("position-nowhere")
        .await;
    run.assert_code(2, "position of no data dir");
    assert!(
        run.error().contains("member/wal") && run.error().contains("--data-dir"),
        "{}",
        run.error()
    );
}

#[tokio::test]
async fn etcd_3_6_position_is_read_from_a_stopped_members_wal() {
    position_is_what_the_running_member_reported("etcd-3.6").await;
}

#[tokio::test]
async fn etcd_3_5_position_is_read_from_a_stopped_members_wal() {
    position_is_what_the_running_member_reported("etcd-3.5").await;
}

trait OrPanicExt<T> {
    fn or_panic_none(self, what: &str) -> T;
}

impl<T> OrPanicExt<T> for Option<T> {
    #[track_caller]
    fn or_panic_none(self, what: &str) -> T {
        self.unwrap_or_else(|| panic!("{what} is missing"))
    }
}

trait OrPanicDebug<T> {
    fn or_panic_debug(self) -> T;
}

impl<T, E: std::fmt::Debug> OrPanicDebug<T> for Result<T, E> {
    #[track_caller]
    fn or_panic_debug(self) -> T {
        self.unwrap_or_else(|e| panic!("{e:?}"))
    }
}
