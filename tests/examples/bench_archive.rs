//! `make bench` (archive part): measures, does not pass or fail.
//!
//! A real etcd 3.6 (testbins) and a real MinIO on loopback; `etcd-operator snapshot-agent
//! archive` (the release build with `ARCHIVE_BENCH_RELEASE=1`, else the debug build the suites
//! use) archives while writers put 1 KiB values at each rate of `ARCHIVE_BENCH_RATES` (puts per
//! second, default `200,2000`) for `ARCHIVE_BENCH_SECONDS` (default 20) each, with the
//! default `--flush-interval` of 2 s and with 1 s.
//!
//! Reported per run: the rate reached; the archive's lag, the time from a put's acknowledgement
//! to the moment a listing of the bucket (every 100 ms) first shows a segment holding its
//! revision (p50, p99, max over every revision); the revisions behind at the end of writing; and
//! the archiver's peak RSS (`VmHWM` of its process) and CPU time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use controller::archive::{SegmentName, Window};
use tests::env::control_plane::temp_root;
use tests::env::etcd::{Etcd, EtcdConfig};
use tests::env::minio::Minio;
use tests::env::Testbins;
use tests::operator::bin_dir;
use tests::OrPanic;

const WRITERS: usize = 16;
const VALUE: usize = 1024;

#[tokio::main]
async fn main() {
    let rates: Vec<u64> = std::env::var("ARCHIVE_BENCH_RATES")
        .unwrap_or_else(|_| "200,2000".into())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect();
    let seconds: u64 = std::env::var("ARCHIVE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let bin = if std::env::var("ARCHIVE_BENCH_RELEASE").as_deref() == Ok("1") {
        tests::env::logs::target_dir().join("release/etcd-operator")
    } else {
        bin_dir().join("etcd-operator")
    };
    println!("archiver: {}", bin.display());
    println!(
        "| flush | rate asked (puts/s) | rate reached | lag p50 | lag p99 | lag max | behind at the end | archiver peak RSS | archiver CPU |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for flush in ["2s", "1s"] {
        for rate in &rates {
            run(&bin, flush, *rate, Duration::from_secs(seconds)).await;
        }
    }
}

async fn run(bin: &std::path::Path, flush: &str, rate: u64, duration: Duration) {
    let bins = Testbins::from_env().or_panic();
    let tmp = temp_root().or_panic();
    let root = tmp.path();
    let minio = Minio::start(&bins, root, false).await.or_panic();
    let config = EtcdConfig::new("bench", "bench-token").or_panic();
    let etcd = Etcd::start_with(
        &bins.binary("etcd-3.6", "etcd").or_panic(),
        &config,
        &root.join("etcd"),
        &root.join("logs"),
        &["--quota-backend-bytes=8589934592".into()],
    )
    .await
    .or_panic();
    let prefix = format!("bench-{rate}-{flush}/");
    let log = std::fs::File::create(root.join("archiver.log")).or_panic();
    let mut archiver = tokio::process::Command::new(bin)
        .args([
            "snapshot-agent",
            "archive",
            &format!("--endpoints={}", config.client_url),
            &format!("--flush-interval={flush}"),
            "--hash-interval=30s",
            &format!("--s3-endpoint={}", minio.endpoint),
            &format!("--s3-bucket={}", minio.bucket),
            "--s3-force-path-style",
            &format!("--s3-key={prefix}"),
            &format!("--termination-log={}", root.join("term.json").display()),
        ])
        .env("AWS_ACCESS_KEY_ID", &minio.writer.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &minio.writer.secret_key)
        .env("RUST_LOG", "warn")
        .stdout(log.try_clone().or_panic())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .or_panic();
    let Some(pid) = archiver.id() else {
        panic!(
            "the archiver exited at once: see {}",
            root.join("archiver.log").display()
        )
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Writers: each put's revision and the moment it was acknowledged.
    let acks: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let started = Instant::now();
    let mut writers = Vec::new();
    let per_writer = (rate as f64 / WRITERS as f64).max(0.1);
    for w in 0..WRITERS {
        let mut client = etcd.client().await.or_panic();
        let acks = acks.clone();
        writers.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_writer));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let value = vec![b'x'; VALUE];
            let mut i = 0u64;
            while started.elapsed() < duration {
                tick.tick().await;
                if let Ok(r) = client
                    .put(format!("w{w}/{}", i % 1000), value.clone(), None)
                    .await
                {
                    if let Some(h) = r.header() {
                        acks.lock().or_panic().push((h.revision(), Instant::now()));
                    }
                }
                i += 1;
            }
        }));
    }
    // The bucket listed every 100 ms: when each revision first showed up archived.
    let mut archived_at: Vec<(i64, Instant)> = Vec::new();
    let mut behind_at_end = None;
    let deadline = started + duration + Duration::from_secs(15);
    loop {
        let last = Window::of(&segments(&minio, &prefix).await)
            .last
            .unwrap_or(0);
        if archived_at.last().is_none_or(|(r, _)| last > *r) {
            archived_at.push((last, Instant::now()));
        }
        let newest_ack = acks
            .lock()
            .or_panic()
            .iter()
            .map(|a| a.0)
            .max()
            .unwrap_or(0);
        if behind_at_end.is_none() && started.elapsed() >= duration {
            behind_at_end = Some(newest_ack - last);
        }
        if (started.elapsed() >= duration && last >= newest_ack) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for w in writers {
        let _ = w.await;
    }
    let acks = acks.lock().or_panic().clone();
    let mut lags: Vec<Duration> = acks
        .iter()
        .filter_map(|(rev, acked)| {
            archived_at
                .iter()
                .find(|(r, _)| r >= rev)
                .map(|(_, at)| at.saturating_duration_since(*acked))
        })
        .collect();
    lags.sort();
    let pct = |p: f64| {
        lags.get(((lags.len() as f64 * p) as usize).min(lags.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let peak = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .map(|l| l.trim_start_matches("VmHWM:").trim().to_string())
        .unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let cpu_s = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect::<Vec<_>>())
        .and_then(|f| Some(f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?))
        .map(|ticks| ticks / 100.0)
        .unwrap_or(-1.0);
    let _ = archiver.start_kill();
    let _ = archiver.wait().await;
    println!(
        "| {flush} | {rate} | {:.0} | {:.2} s | {:.2} s | {:.2} s | {} | {peak} | {cpu_s:.1} s |",
        acks.len() as f64 / duration.as_secs_f64(),
        pct(0.50).as_secs_f64(),
        pct(0.99).as_secs_f64(),
        lags.last().copied().unwrap_or_default().as_secs_f64(),
        behind_at_end.unwrap_or(-1),
    );
    if lags.len() < acks.len() {
        println!(
            "  ({} acknowledged puts never showed up archived within 15 s)",
            acks.len() - lags.len()
        );
    }
    etcd.stop();
}

async fn segments(minio: &Minio, prefix: &str) -> Vec<SegmentName> {
    let mut names = Vec::new();
    let mut token = None;
    loop {
        let page = minio
            .root_client()
            .list_objects_v2()
            .bucket(&minio.bucket)
            .prefix(SegmentName::listing(prefix))
            .set_continuation_token(token)
            .send()
            .await
            .or_panic();
        names.extend(
            page.contents()
                .iter()
                .filter_map(|o| SegmentName::parse(prefix, o.key()?)),
        );
        match page.next_continuation_token() {
            Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_string()),
            _ => return names,
        }
    }
}
