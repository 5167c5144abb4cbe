//! The `etcd-operator-webhook` binary as the chart runs it: configured through environment
//! variables, ready once its certificate is mounted, and exiting cleanly on SIGTERM after
//! reporting not ready for the drain period.

// Test helpers outside `#[test]` functions: a failed set-up step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use certs::mint::{SecretMount, TestCa};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use support::{cluster, review, Connection};

/// Kills the child if a test fails before it exits.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the binary on ephemeral loopback ports and read the addresses it logs.
fn spawn_webhook(cert_dir: &std::path::Path) -> (Process, SocketAddr, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_etcd-operator-webhook"))
        .env("WEBHOOK_TLS_CERT_DIR", cert_dir)
        .env("WEBHOOK_LISTEN", "127.0.0.1:0")
        .env("WEBHOOK_ADMIN_LISTEN", "127.0.0.1:0")
        .env("WEBHOOK_LOG_JSON", "true")
        .env("WEBHOOK_ANTI_AFFINITY", "required")
        .env("WEBHOOK_SHUTDOWN_DRAIN", "3s")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let process = Process(child);
    let mut lines = BufReader::new(stdout).lines();
    let addrs = loop {
        let line = lines
            .next()
            .expect("the webhook exited before listening")
            .unwrap();
        let Ok(entry) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let fields = &entry["fields"];
        if fields["message"] == "webhook listening" {
            let addr = |k: &str| fields[k].as_str().unwrap().parse::<SocketAddr>().unwrap();
            break (addr("tls_addr"), addr("admin_addr"));
        }
    };
    // Keep draining the log so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (process, addrs.0, addrs.1)
}

#[tokio::test]
async fn binary_reads_env_serves_after_the_cert_appears_and_exits_zero_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let mount = SecretMount::new(tmp.path().join("tls")).unwrap();
    let (mut process, tls_addr, admin_addr) = spawn_webhook(mount.dir());

    let (status, _) = support::http_get(admin_addr, "/readyz").await.unwrap();
    assert_eq!(status, 503);

    let ca = TestCa::new("process-test-ca").unwrap();
    mount
        .write_tls(&ca.server_cert(&["localhost"]).unwrap(), Some(&ca))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while support::http_get(admin_addr, "/readyz").await.unwrap().0 != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready after the certificate appeared"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let mut conn = Connection::https(tls_addr, ca.cert_pem()).await.unwrap();
    let object = cluster("main", json!({"version": "3.6.11"}));
    let response = conn
        .review(
            "/mutate",
            &review("CREATE", "EtcdCluster", Some(object.clone()), None, "alice"),
        )
        .await;
    let patched = support::apply_patch(&object, &response);
    assert!(
        patched["spec"]["affinity"]["podAntiAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_array(),
        "WEBHOOK_ANTI_AFFINITY=required was not honoured: {patched}"
    );

    let pid = Pid::from_raw(i32::try_from(process.0.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    // WEBHOOK_SHUTDOWN_DRAIN: not ready at once, still serving for the drain.
    let deadline = Instant::now() + Duration::from_secs(2);
    while support::http_get(admin_addr, "/readyz").await.unwrap().0 != 503 {
        assert!(Instant::now() < deadline, "still ready after SIGTERM");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        conn.review(
            "/validate",
            &review("CREATE", "EtcdCluster", Some(object), None, "alice")
        )
        .await["allowed"],
        true
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 15 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert!(status.success(), "exit status {status}");
}
