//! Admission latency and throughput of the real `etcd-operator-webhook` binary over TLS:
//! 16 concurrent keep-alive HTTPS clients on loopback for a bounded time (default 10 s; set
//! `WEBHOOK_BENCH_SECONDS`, `WEBHOOK_BENCH_CLIENTS`), cycling through a valid create, an
//! invalid update (denied with a rendered message) and a defaulting mutate. Prints p50/p90/
//! p99/p99.9 latency, requests per second, and the webhook process's RSS (idle and after
//! load, from /proc/<pid>/status). Measures and prints; never fails on the numbers.
//!
//! Run: `cargo bench -p webhook --bench admission` (what `make bench` runs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use certs::mint::{SecretMount, TestCa};
use hyper::StatusCode;
use serde_json::{json, Value};
use support::{cluster, review, Connection};

struct Webhook(Child);

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn spawn(cert_dir: &std::path::Path) -> (Webhook, SocketAddr, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_etcd-operator-webhook"))
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .arg("--tls-cert-dir")
        .arg(cert_dir)
        .args(["--log-json", "true"])
        .env("RUST_LOG", "warn,webhook::server=info")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn etcd-operator-webhook");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let webhook = Webhook(child);
    loop {
        let line = lines.next().expect("webhook exited").unwrap();
        let Ok(entry) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let fields = &entry["fields"];
        if fields["message"] == "webhook listening" {
            let addr = |k: &str| fields[k].as_str().unwrap().parse().unwrap();
            std::thread::spawn(move || lines.for_each(drop));
            return (webhook, addr("tls_addr"), addr("admin_addr"));
        }
    }
}

/// CPU time (user + system) a process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}

/// `VmRSS` and `VmHWM` (peak) of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn bodies() -> Vec<(&'static str, Bytes)> {
    let valid = cluster(
        "bench",
        json!({"version": "3.6.11", "replicas": 3, "storage": {"size": "10Gi"}}),
    );
    let shrunk = cluster(
        "bench",
        json!({"version": "3.6.11", "replicas": 3, "storage": {"size": "5Gi"}}),
    );
    let memory = cluster(
        "bench",
        json!({"version": "3.6.11", "replicas": 3, "storage": {"size": "1Gi", "medium": "Memory"}}),
    );
    let encode = |v: &Value| Bytes::from(serde_json::to_vec(v).unwrap());
    vec![
        (
            "/validate",
            encode(&review(
                "CREATE",
                "EtcdCluster",
                Some(valid.clone()),
                None,
                "alice",
            )),
        ),
        (
            "/validate",
            encode(&review(
                "UPDATE",
                "EtcdCluster",
                Some(shrunk),
                Some(valid),
                "alice",
            )),
        ),
        (
            "/mutate",
            encode(&review(
                "CREATE",
                "EtcdCluster",
                Some(memory),
                None,
                "alice",
            )),
        ),
    ]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// `clients` keep-alive connections, each sending the next body as soon as the previous
/// answer arrives, for 1 s of warm-up and then `measure`; prints what it saw.
async fn run_phase(
    pid: u32,
    tls_addr: SocketAddr,
    ca_pem: &str,
    bodies: &[(&'static str, Bytes)],
    clients: usize,
    measure: Duration,
) {
    let warmup = Duration::from_secs(1);
    let cpu_before = cpu_time(pid);
    let mut tasks = Vec::new();
    for client in 0..clients {
        let bodies = bodies.to_vec();
        let ca_pem = ca_pem.to_string();
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::https(tls_addr, &ca_pem).await.unwrap();
            let started = Instant::now();
            let mut latencies = Vec::with_capacity(64 * 1024);
            let mut errors = 0u64;
            let mut i = client;
            loop {
                let now = Instant::now();
                if now - started >= warmup + measure {
                    break;
                }
                let (path, body) = &bodies[i % bodies.len()];
                i += 1;
                let ok = matches!(conn.post(path, body.clone()).await, Ok((StatusCode::OK, _)));
                let elapsed = now.elapsed();
                if now - started < warmup {
                    continue;
                }
                if ok {
                    latencies.push(elapsed);
                } else {
                    errors += 1;
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (l, e) = task.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    let cpu_used = cpu_time(pid).saturating_sub(cpu_before);
    latencies.sort_unstable();
    let total = latencies.len();
    let measured_share = measure.as_secs_f64() / (warmup + measure).as_secs_f64();
    println!("{clients} client(s), {} s:", measure.as_secs());
    println!("  requests        {total} ({errors} errors)");
    println!(
        "  throughput      {:.0} req/s",
        total as f64 / measure.as_secs_f64()
    );
    println!("  latency p50     {}", ms(percentile(&latencies, 50.0)));
    println!("  latency p90     {}", ms(percentile(&latencies, 90.0)));
    println!("  latency p99     {}", ms(percentile(&latencies, 99.0)));
    println!("  latency p99.9   {}", ms(percentile(&latencies, 99.9)));
    println!(
        "  latency max     {}",
        ms(latencies.last().copied().unwrap_or_default())
    );
    println!(
        "  webhook CPU     {:.2} cores busy, ~{:.0} µs CPU per request",
        cpu_used.as_secs_f64() / (warmup + measure).as_secs_f64(),
        cpu_used.as_secs_f64() * 1e6 * measured_share / total.max(1) as f64
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    certs::install_default_provider();
    // `cargo bench` passes `--bench`; there is nothing to filter.
    let seconds: u64 = env_or("WEBHOOK_BENCH_SECONDS", 10);
    let clients: usize = env_or("WEBHOOK_BENCH_CLIENTS", 16);

    let tmp = tempfile::tempdir().unwrap();
    let mount = SecretMount::new(tmp.path().join("tls")).unwrap();
    let ca = TestCa::new("bench-ca").unwrap();
    mount
        .write_tls(&ca.server_cert(&["localhost"]).unwrap(), Some(&ca))
        .unwrap();
    let (webhook, tls_addr, admin_addr) = spawn(mount.dir());
    let pid = webhook.0.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    while support::http_get(admin_addr, "/readyz")
        .await
        .map(|r| r.0)
        .ok()
        != Some(StatusCode::OK)
    {
        assert!(Instant::now() < deadline, "webhook not ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (idle_rss, _) = memory_kib(pid);

    let bodies = bodies();
    let ca_pem = ca.cert_pem().to_string();
    println!(
        "webhook admission bench: keep-alive HTTPS clients on loopback, 1 s warm-up per phase"
    );
    // Baseline: one client, so latency is the webhook's service time without queueing.
    let baseline = Duration::from_secs(seconds.div_ceil(3).max(1));
    run_phase(pid, tls_addr, &ca_pem, &bodies, 1, baseline).await;
    run_phase(
        pid,
        tls_addr,
        &ca_pem,
        &bodies,
        clients,
        Duration::from_secs(seconds),
    )
    .await;
    let (rss, peak) = memory_kib(pid);
    println!(
        "webhook RSS: idle {:.1} MiB, after load {:.1} MiB, peak {:.1} MiB",
        idle_rss as f64 / 1024.0,
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );

    // Graceful exit on SIGTERM, as in a rollout.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let mut webhook = webhook;
    let exit = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if let Ok(Some(status)) = webhook.0.try_wait() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    match exit {
        Ok(status) => println!("  SIGTERM         exited with {status}"),
        Err(_) => println!("  SIGTERM         still running after 15 s"),
    }
}
