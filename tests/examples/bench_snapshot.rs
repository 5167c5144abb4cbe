//! `make bench` (snapshot part): measures, does not pass or fail.
//!
//! A real etcd 3.6 (testbins) is loaded with 64 KiB values, first to an eighth of
//! `SNAPSHOT_BENCH_BYTES` (default 1 GiB), then to all of it. At each size the same snapshot is
//! taken twice, one after the other:
//!
//! - `etcdctl snapshot save` to a local file (the baseline);
//! - the ceiling: that file's bytes uploaded to the same MinIO by a plain S3 client, aws-sdk-s3
//!   with its default configuration driven as the AWS CLI and the transfer managers drive a
//!   multipart upload by default (8 MiB parts, 10 in flight; each worker reads its part from the
//!   file, which is in the page cache);
//! - `etcd-operator snapshot-agent save` to a real MinIO on loopback (what a snapshot Job runs:
//!   multipart upload at constant memory, sha256 while streaming).
//!
//! For each: wall time, throughput, and peak RSS. Peak RSS is exact, not sampled: the measured
//! program runs as the only child of a fresh copy of this binary (`--measure-peak-rss`), which
//! reads `getrusage(RUSAGE_CHILDREN).ru_maxrss` after reaping it, the kernel's high-water mark of
//! that one process. The ceiling runs the same way, as a fresh copy of this binary
//! (`--s3-ceiling`).
//!
//! Where the CPU goes: the same `getrusage` gives the program's CPU time (user + system), and
//! etcd's and MinIO's CPU time over the run is read from `/proc/<pid>/stat` before and after.
//! Their sum over the wall time is how many of the machine's cores the run kept busy: a run that
//! keeps every core busy is bound by CPU, not by the network or the number of uploads in flight.
//!
//! `SNAPSHOT_BENCH_PERF=<dir>` records a system-wide profile (`perf record -a -g`) around each
//! agent run into `<dir>/agent-<stage>.data` (`perf report -i ... --sort comm,dso,sym`); the
//! agent's peak RSS is then perf's, not the agent's.
//!
//! `SNAPSHOT_BENCH_TLS=1` serves MinIO over HTTPS (a private CA both clients trust), the way a
//! production S3 endpoint is reached; the agent then sends its parts as `UNSIGNED-PAYLOAD`.
//!
//! The agent is the release build (`<target>/release/etcd-operator`, which `make bench` builds
//! first) when `SNAPSHOT_BENCH_RELEASE=1`, else the binary the e2e suites use
//! (`ETCD_OPERATOR_BIN_DIR`, default the debug build).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use futures::{StreamExt, TryStreamExt};
use nix::sys::resource::{getrusage, UsageWho};
use tests::env::control_plane::temp_root;
use tests::env::etcd::{Etcd, EtcdConfig};
use tests::env::logs::target_dir;
use tests::env::minio::Minio;
use tests::env::Testbins;
use tests::operator::bin_dir;
use tests::OrPanic;

const MEASURE: &str = "--measure-peak-rss";
const CEILING: &str = "--s3-ceiling";
/// The AWS CLI's defaults (`multipart_chunksize` 8 MiB, `max_concurrent_requests` 10).
const CEILING_PART: u64 = 8 * 1024 * 1024;
const CEILING_IN_FLIGHT: usize = 10;
/// The CA bundle the ceiling trusts when MinIO serves TLS (`SNAPSHOT_BENCH_TLS=1`).
const CEILING_CA: &str = "SNAPSHOT_BENCH_CA";
const VALUE_BYTES: usize = 64 * 1024;
const WRITERS: usize = 8;
const MIB: f64 = 1024.0 * 1024.0;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(MEASURE) {
        return measure(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some(CEILING) {
        return ceiling(&args[2..]);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .or_panic();
    runtime.block_on(bench());
    ExitCode::SUCCESS
}

/// `--measure-peak-rss <out-file> <program> <args>...`: run the program as this process's only
/// child and write its peak RSS in KiB and its CPU time (user + system) in milliseconds to
/// `<out-file>`; exit with its exit code.
fn measure(args: &[String]) -> ExitCode {
    let [out, program, rest @ ..] = args else {
        eprintln!("usage: {MEASURE} <out-file> <program> [args...]");
        return ExitCode::from(2);
    };
    let status = match Command::new(program).args(rest).status() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("starting {program}: {e}");
            return ExitCode::from(2);
        }
    };
    let (peak_kib, cpu_ms) = getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|u| {
            let ms = |t: nix::sys::time::TimeVal| t.tv_sec() * 1000 + t.tv_usec() / 1000;
            (u.max_rss(), ms(u.user_time()) + ms(u.system_time()))
        })
        .unwrap_or((-1, -1));
    if let Err(e) = std::fs::write(out, format!("{peak_kib} {cpu_ms}")) {
        eprintln!("writing {out}: {e}");
        return ExitCode::from(2);
    }
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// `--s3-ceiling <file> <endpoint> <bucket> <key>` (keys in `AWS_ACCESS_KEY_ID` /
/// `AWS_SECRET_ACCESS_KEY`): upload the file as a plain S3 client does, see [`upload_file`].
fn ceiling(args: &[String]) -> ExitCode {
    let [file, endpoint, bucket, key] = args else {
        eprintln!("usage: {CEILING} <file> <endpoint> <bucket> <key>");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .or_panic();
    match runtime.block_on(upload_file(Path::new(file), endpoint, bucket, key)) {
        Ok(size) => {
            println!("uploaded {size} bytes to {bucket}/{key}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The ceiling: aws-sdk-s3 with its defaults (behavior version latest: payload signing, the
/// default CRC checksum), the file in [`CEILING_PART`] parts, [`CEILING_IN_FLIGHT`] at a time,
/// each read (`pread`) by the worker that uploads it, as the AWS CLI's transfer does.
async fn upload_file(file: &Path, endpoint: &str, bucket: &str, key: &str) -> Result<u64, String> {
    let env = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let trust = match std::env::var_os(CEILING_CA) {
        Some(ca) => TrustStore::empty()
            .with_native_roots(false)
            .with_pem_certificate(std::fs::read(&ca).map_err(|e| format!("{ca:?}: {e}"))?),
        None => TrustStore::default(),
    };
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(
            TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .map_err(|e| format!("TLS context: {e}"))?,
        )
        .build_https();
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            env("AWS_ACCESS_KEY_ID")?,
            env("AWS_SECRET_ACCESS_KEY")?,
            None,
            None,
            "environment",
        ))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .http_client(http)
        .build();
    let client = aws_sdk_s3::Client::from_conf(config);
    let file = Arc::new(std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?);
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let created = client
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(|e| format!("CreateMultipartUpload: {e:?}"))?;
    let upload_id = created.upload_id().unwrap_or_default().to_string();
    let parts = size.div_ceil(CEILING_PART);
    let mut completed: Vec<CompletedPart> = futures::stream::iter(0..parts)
        .map(|i| {
            let (client, file, upload_id) = (client.clone(), file.clone(), upload_id.clone());
            async move {
                let offset = i * CEILING_PART;
                let len = CEILING_PART.min(size - offset) as usize;
                let body = tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; len];
                    file.read_exact_at(&mut buf, offset).map(|()| buf)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("reading part {}: {e}", i + 1))?;
                let number = i32::try_from(i + 1).map_err(|e| e.to_string())?;
                let out = client
                    .upload_part()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .part_number(number)
                    .body(ByteStream::from(body))
                    .send()
                    .await
                    .map_err(|e| format!("UploadPart {number}: {e:?}"))?;
                Ok::<_, String>(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(out.e_tag().map(str::to_string))
                        .set_checksum_crc32(out.checksum_crc32().map(str::to_string))
                        .build(),
                )
            }
        })
        .buffer_unordered(CEILING_IN_FLIGHT)
        .try_collect()
        .await?;
    completed.sort_by_key(|p| p.part_number());
    client
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(&upload_id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(completed))
                .build(),
        )
        .send()
        .await
        .map_err(|e| format!("CompleteMultipartUpload: {e:?}"))?;
    Ok(size)
}

/// One measured run.
struct Run {
    took: Duration,
    peak_rss_kib: i64,
    bytes: u64,
    /// The program's CPU time, and etcd's and MinIO's during the run.
    cpu: Cpu,
}

/// CPU seconds spent during one run.
#[derive(Clone, Copy, Default)]
struct Cpu {
    program: f64,
    etcd: f64,
    minio: f64,
}

impl Run {
    fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / MIB / self.took.as_secs_f64()
    }

    /// `program + etcd + MinIO CPU s = cores busy`, 30 columns.
    fn cpu_cell(&self) -> String {
        let Cpu {
            program,
            etcd,
            minio,
        } = self.cpu;
        format!(
            "{program:>4.1} + {etcd:>4.1} + {minio:>4.1} s = {:>4.2} cores",
            (program + etcd + minio) / self.took.as_secs_f64()
        )
    }

    /// `wall s, MiB/s, peak RSS MiB`, 24 columns.
    fn cell(&self) -> String {
        format!(
            "{:>6.1} s {:>5.0} MiB/s {:>4} MiB",
            self.took.as_secs_f64(),
            self.mib_per_s(),
            self.peak_rss_kib / 1024
        )
    }
}

/// CPU seconds (user + system) so far of the running processes named `etcd` and `minio` whose
/// command line mentions `root` (this bench's own servers).
fn server_cpu(root: &Path) -> (f64, f64) {
    let root = root.to_string_lossy();
    let (mut etcd, mut minio) = (0.0, 0.0);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let dir = entry.path();
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(root.as_ref()) {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        // `pid (comm) state ...`: comm may hold spaces; the fields after it are fixed.
        let Some((head, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let comm = head.split_once(" (").map(|(_, c)| c).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat, 12 and 13 after `state`; in USER_HZ
        // (100 per second on Linux).
        let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
        let (Some(user), Some(system)) = (ticks(11), ticks(12)) else {
            continue;
        };
        let secs = (user + system) / 100.0;
        match comm {
            "etcd" => etcd += secs,
            "minio" => minio += secs,
            _ => {}
        }
    }
    (etcd, minio)
}

/// Wait (up to 20 s) until etcd and MinIO are idle: MinIO goes on working for a while after
/// a large upload completes, and that work would otherwise be charged to (and slow down)
/// whichever run comes next.
fn settle(servers: &Path, tag: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let busy = |(e0, m0): (f64, f64), (e1, m1): (f64, f64)| (e1 - e0) + (m1 - m0);
    let mut before = server_cpu(servers);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = server_cpu(servers);
        if busy(before, now) < 0.03 {
            return;
        }
        before = now;
    }
    eprintln!("{tag}: etcd and MinIO were still busy after 20 s; measuring anyway");
}

/// Run `program args` under [`measure`], its output into `<dir>/<tag>.log`, and panic with that
/// log when it fails.
fn measured(dir: &Path, tag: &str, program: &Path, args: &[String], env: &[(&str, &str)]) -> Run {
    let rss_file = dir.join(format!("{tag}.rss"));
    let log = dir.join(format!("{tag}.log"));
    let out = std::fs::File::create(&log).or_panic();
    let servers = dir.parent().unwrap_or(dir);
    settle(servers, tag);
    let (etcd_before, minio_before) = server_cpu(servers);
    let started = Instant::now();
    let status = Command::new(std::env::current_exe().or_panic())
        .arg(MEASURE)
        .arg(&rss_file)
        .arg(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out.try_clone().or_panic())
        .stderr(out)
        .status()
        .or_panic();
    let took = started.elapsed();
    let (etcd_after, minio_after) = server_cpu(servers);
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{tag} failed ({status}):\n{output}");
    let measured = std::fs::read_to_string(&rss_file).or_panic();
    let numbers: Vec<i64> = measured
        .split_whitespace()
        .map(|n| n.parse::<i64>().or_panic())
        .collect();
    let [peak_rss_kib, cpu_ms] = numbers[..] else {
        panic!(
            "{}: expected `<peak KiB> <CPU ms>`, read {measured:?}",
            rss_file.display()
        );
    };
    Run {
        took,
        peak_rss_kib,
        bytes: 0,
        cpu: Cpu {
            program: cpu_ms as f64 / 1000.0,
            etcd: etcd_after - etcd_before,
            minio: minio_after - minio_before,
        },
    }
}

/// Put 64 KiB values under `bench/` from key `from` up to `to` (exclusive), `WRITERS` at a time.
async fn load(client: &etcd_client::Client, from: usize, to: usize) {
    let value: Vec<u8> = (0..VALUE_BYTES).map(|i| (i * 31 % 251) as u8).collect();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut client = client.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            for i in (from + w..to).step_by(WRITERS) {
                client
                    .put(format!("bench/{i:08}"), value.clone(), None)
                    .await
                    .or_panic();
            }
        }));
    }
    for t in tasks {
        t.await.or_panic();
    }
}

async fn db_size(client: &mut etcd_client::Client) -> u64 {
    client.status().await.or_panic().db_size() as u64
}

async fn bench() {
    let target: u64 = std::env::var("SNAPSHOT_BENCH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 30);
    let bins = Testbins::from_env().or_panic();
    let tmp = temp_root().or_panic();
    let root = tmp.path();
    let logs = root.join("logs");
    std::fs::create_dir_all(&logs).or_panic();
    let agent = if std::env::var("SNAPSHOT_BENCH_RELEASE").is_ok_and(|v| v == "1") {
        target_dir().join("release")
    } else {
        bin_dir()
    }
    .join("etcd-operator");
    assert!(
        agent.is_file(),
        "{} is missing: cargo build [--release] -p controller --bins",
        agent.display()
    );
    let etcdctl = bins.binary("etcd-3.6", "etcdctl").or_panic();
    let config = EtcdConfig::new("bench", "bench-token").or_panic();
    let quota = format!("--quota-backend-bytes={}", 8u64 << 30);
    let etcd = Etcd::start_with(
        &bins.binary("etcd-3.6", "etcd").or_panic(),
        &config,
        &root.join("etcd"),
        &logs,
        &[quota],
    )
    .await
    .or_panic();
    let tls = std::env::var("SNAPSHOT_BENCH_TLS").is_ok_and(|v| v == "1");
    let minio = Minio::start(&bins, root, tls).await.or_panic();
    let mut client = etcd.client().await.or_panic();

    println!(
        "snapshot bench: MinIO on loopback over {}, agent {} ({}), etcd 3.6 from testbins",
        if tls { "HTTPS" } else { "HTTP" },
        agent.display(),
        if agent.to_string_lossy().contains("/release/") {
            "release build"
        } else {
            "debug build"
        }
    );
    println!(
        "{:>9}  {:>24}  {:>24}  {:>24}  {:>13}  {:>13}",
        "db",
        "etcdctl → local file",
        "ceiling: file → S3",
        "agent → S3 (MinIO)",
        "agent/ceiling",
        "agent/etcdctl"
    );
    let keys_for = |bytes: u64| (bytes / VALUE_BYTES as u64) as usize;
    let mut loaded = 0;
    for (stage, bytes) in [("small", target / 8), ("full", target)] {
        let started = Instant::now();
        load(&client, loaded, keys_for(bytes)).await;
        loaded = keys_for(bytes);
        let size = db_size(&mut client).await;
        eprintln!(
            "loaded {} keys, db {:.0} MiB in {:.1?}",
            loaded,
            size as f64 / MIB,
            started.elapsed()
        );

        let file = root.join(format!("etcdctl-{stage}.db"));
        let mut baseline = measured(
            &logs,
            &format!("etcdctl-{stage}"),
            &etcdctl,
            &[
                format!("--endpoints={}", config.client_url),
                "snapshot".into(),
                "save".into(),
                file.display().to_string(),
            ],
            &[],
        );
        baseline.bytes = std::fs::metadata(&file).or_panic().len();
        let mut ceiling = measured(
            &logs,
            &format!("ceiling-{stage}"),
            &std::env::current_exe().or_panic(),
            &[
                CEILING.into(),
                file.display().to_string(),
                minio.endpoint.clone(),
                minio.bucket.clone(),
                format!("ceiling/{stage}.db"),
            ],
            &writer_env(&minio),
        );
        ceiling.bytes = baseline.bytes;
        let _ = std::fs::remove_file(&file);

        for (n, variant) in variants().iter().enumerate() {
            let tag = if n == 0 {
                stage.to_string()
            } else {
                format!("{stage}-{n}")
            };
            let term = logs.join(format!("agent-{tag}.json"));
            let mut program = agent.clone();
            let mut args = agent_args(&config, &minio, &tag, &term);
            if let Some(dir) = std::env::var_os("SNAPSHOT_BENCH_PERF") {
                let data = Path::new(&dir).join(format!("agent-{tag}.data"));
                let perf = ["record", "-a", "-g", "-F", "499", "-o"].map(String::from);
                let mut wrapped = perf.to_vec();
                wrapped.extend([
                    data.display().to_string(),
                    "--".into(),
                    agent.display().to_string(),
                ]);
                wrapped.append(&mut args);
                (program, args) = ("perf".into(), wrapped);
                eprintln!("profiling the agent into {}", data.display());
            }
            let env: Vec<(&str, &str)> = variant
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let mut ours = measured(
                &logs,
                &format!("agent-{tag}"),
                &program,
                &args,
                &[writer_env(&minio).as_slice(), &[("RUST_LOG", "info")], &env].concat(),
            );
            ours.bytes = artifact_size(&term);
            if let Some(keep) = std::env::var_os("SNAPSHOT_BENCH_LOGS") {
                let _ = std::fs::create_dir_all(&keep);
                let _ = std::fs::copy(
                    logs.join(format!("agent-{tag}.log")),
                    Path::new(&keep).join(format!("agent-{tag}.log")),
                );
            }
            if !variant.is_empty() {
                println!("{:>9}  variant {n}: {variant:?}", "");
            }
            println!(
                "{:>5.0} MiB  {}  {}  {}  {:>13.2}  {:>13.2}",
                size as f64 / MIB,
                baseline.cell(),
                ceiling.cell(),
                ours.cell(),
                ours.mib_per_s() / ceiling.mib_per_s(),
                ours.mib_per_s() / baseline.mib_per_s(),
            );
            println!(
                "{:>9}  {}  {}  {}",
                "CPU",
                baseline.cpu_cell(),
                ceiling.cpu_cell(),
                ours.cpu_cell()
            );
        }
    }
    println!(
        "(each cell: wall time of the process, snapshot bytes / that time, the process's peak RSS; \
         CPU: seconds of the program + etcd + MinIO during the run, and their sum over the wall \
         time; load average now: {})",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
    etcd.stop();
}

/// `SNAPSHOT_BENCH_VARIANTS`: agent runs per size, `;`-separated, each a space-separated list of
/// `NAME=value` settings of the agent's environment (one run with none when unset).
fn variants() -> Vec<Vec<(String, String)>> {
    let Ok(text) = std::env::var("SNAPSHOT_BENCH_VARIANTS") else {
        return vec![Vec::new()];
    };
    text.split(';')
        .map(|v| {
            v.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// The writer's keys, as the agent and the ceiling read them.
fn writer_env(minio: &Minio) -> Vec<(&str, &str)> {
    let mut env = vec![
        ("AWS_ACCESS_KEY_ID", minio.writer.access_key.as_str()),
        ("AWS_SECRET_ACCESS_KEY", minio.writer.secret_key.as_str()),
    ];
    if let Some(ca) = minio.ca_file.as_deref().and_then(Path::to_str) {
        env.push((CEILING_CA, ca));
    }
    env
}

fn agent_args(config: &EtcdConfig, minio: &Minio, stage: &str, term: &Path) -> Vec<String> {
    let mut args = vec![
        "snapshot-agent".into(),
        "save".into(),
        format!("--endpoints={}", config.client_url),
        format!("--snapshot-name=bench-{stage}"),
        format!("--snapshot-uid=uid-{stage}"),
        format!("--s3-endpoint={}", minio.endpoint),
        format!("--s3-bucket={}", minio.bucket),
        "--s3-force-path-style".into(),
        "--s3-key=bench/".into(),
        format!("--termination-log={}", term.display()),
    ];
    if let Some(ca) = &minio.ca_file {
        args.push(format!("--s3-ca-file={}", ca.display()));
    }
    args
}

/// `artifact.sizeBytes` of the agent's termination message.
fn artifact_size(term: &Path) -> u64 {
    let text = std::fs::read_to_string(term).or_panic();
    let result: serde_json::Value = serde_json::from_str(&text).or_panic();
    result["artifact"]["sizeBytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no artifact.sizeBytes in {text}"))
}
