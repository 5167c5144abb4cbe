//! Startup, liveness and readiness probes with kubelet's timing rules (initial delay, period,
//! timeout, success and failure thresholds; liveness and readiness wait for startup), run from the
//! host into the Pod's IP (`httpGet`, `tcpSocket`) or inside the container (`exec`). HTTPS is not
//! verified, as kubelet does not verify it. The same actions serve `preStop` hooks.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerPort, ExecAction, HTTPGetAction, LifecycleHandler, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::exec::{exec, ExecTarget};

/// Where probes of one container instance go.
#[derive(Clone, Debug)]
pub struct ProbeTarget {
    /// The Pod's IP (127.0.0.1 for host-network Pods).
    pub pod_ip: IpAddr,
    pub ports: Vec<ContainerPort>,
    pub exec: ExecTarget,
}

/// What the probes concluded so far about one container instance.
#[derive(Clone, Debug, Default)]
pub struct ProbeState {
    pub started: bool,
    pub ready: bool,
    /// Set when a liveness or startup probe gave up: the container must be restarted.
    pub kill: Option<String>,
    /// The last failure of each probe (for events and debugging).
    pub last_failure: Option<String>,
}

pub type SharedProbeState = Arc<Mutex<ProbeState>>;

/// Probe tasks of one container instance; aborted on drop.
#[derive(Debug, Default)]
pub struct Probes {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Probes {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Startup,
    Liveness,
    Readiness,
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::try_from(v.unwrap_or(default).max(0)).unwrap_or(0))
}

fn threshold(v: Option<i32>, default: i32) -> u32 {
    u32::try_from(v.unwrap_or(default).max(1)).unwrap_or(1)
}

fn update(state: &SharedProbeState, f: impl FnOnce(&mut ProbeState)) {
    if let Ok(mut s) = state.lock() {
        f(&mut s);
    }
}

fn started(state: &SharedProbeState) -> bool {
    state.lock().map(|s| s.started).unwrap_or(false)
}

/// Start the container's probes; with no startup probe it counts as started at once, with no
/// readiness probe it is ready once started.
pub fn spawn(
    startup: Option<Probe>,
    liveness: Option<Probe>,
    readiness: Option<Probe>,
    target: ProbeTarget,
    state: SharedProbeState,
) -> Probes {
    let mut tasks = Vec::new();
    match startup {
        Some(p) => tasks.push(tokio::spawn(run(
            Kind::Startup,
            p,
            target.clone(),
            state.clone(),
        ))),
        None => update(&state, |s| s.started = true),
    }
    if let Some(p) = liveness {
        tasks.push(tokio::spawn(run(
            Kind::Liveness,
            p,
            target.clone(),
            state.clone(),
        )));
    }
    match readiness {
        Some(p) => tasks.push(tokio::spawn(run(Kind::Readiness, p, target, state))),
        None => {
            let state = state.clone();
            tasks.push(tokio::spawn(async move {
                while !started(&state) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                update(&state, |s| s.ready = true);
            }));
        }
    }
    Probes { tasks }
}

async fn run(kind: Kind, probe: Probe, target: ProbeTarget, state: SharedProbeState) {
    let begun = tokio::time::Instant::now();
    let initial_delay = secs(probe.initial_delay_seconds, 0);
    let period = secs(probe.period_seconds, 10).max(Duration::from_secs(1));
    let timeout = secs(probe.timeout_seconds, 1).max(Duration::from_secs(1));
    let success_threshold = threshold(probe.success_threshold, 1);
    let failure_threshold = threshold(probe.failure_threshold, 3);
    if kind != Kind::Startup {
        while !started(&state) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep_until(begun + initial_delay).await;
    let (mut successes, mut failures) = (0u32, 0u32);
    loop {
        let outcome = check(&probe_action(&probe), &target, timeout).await;
        match outcome {
            Ok(()) => {
                successes += 1;
                failures = 0;
                if successes >= success_threshold {
                    match kind {
                        Kind::Startup => {
                            update(&state, |s| s.started = true);
                            return;
                        }
                        Kind::Readiness => update(&state, |s| s.ready = true),
                        Kind::Liveness => {}
                    }
                }
            }
            Err(message) => {
                failures += 1;
                successes = 0;
                let label = match kind {
                    Kind::Startup => "Startup",
                    Kind::Liveness => "Liveness",
                    Kind::Readiness => "Readiness",
                };
                let message = format!("{label} probe failed: {message}");
                update(&state, |s| s.last_failure = Some(message.clone()));
                if failures >= failure_threshold {
                    match kind {
                        Kind::Readiness => update(&state, |s| s.ready = false),
                        Kind::Startup | Kind::Liveness => {
                            update(&state, |s| s.kill = Some(message));
                            return;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(period).await;
    }
}

/// The action of a probe or lifecycle handler.
#[derive(Clone, Debug)]
pub enum Action {
    Http(HTTPGetAction),
    Tcp(TCPSocketAction),
    Exec(ExecAction),
    Sleep(Duration),
    Unsupported(String),
}

fn probe_action(probe: &Probe) -> Action {
    if let Some(h) = &probe.http_get {
        Action::Http(h.clone())
    } else if let Some(t) = &probe.tcp_socket {
        Action::Tcp(t.clone())
    } else if let Some(e) = &probe.exec {
        Action::Exec(e.clone())
    } else if probe.grpc.is_some() {
        Action::Unsupported("grpc probes are not supported by the pod runner".into())
    } else {
        Action::Unsupported("the probe has no action".into())
    }
}

pub fn handler_action(handler: &LifecycleHandler) -> Action {
    if let Some(h) = &handler.http_get {
        Action::Http(h.clone())
    } else if let Some(t) = &handler.tcp_socket {
        Action::Tcp(t.clone())
    } else if let Some(e) = &handler.exec {
        Action::Exec(e.clone())
    } else if let Some(s) = &handler.sleep {
        Action::Sleep(Duration::from_secs(u64::try_from(s.seconds).unwrap_or(0)))
    } else {
        Action::Unsupported("the lifecycle handler has no action".into())
    }
}

fn resolve_port(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("invalid port {p}")),
        IntOrString::String(name) => {
            if let Ok(p) = name.parse::<u16>() {
                return Ok(p);
            }
            ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| format!("no container port named {name:?}"))
        }
    }
}

/// Probe hosts must stay on our networks: loopback or a Pod subnet of the runner.
fn allowed(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || (v4.octets()[0] == 10 && v4.octets()[1] == 213),
        IpAddr::V6(v6) => v6.is_loopback(),
    }
}

/// Run one action against the target.
pub async fn check(action: &Action, target: &ProbeTarget, timeout: Duration) -> Result<(), String> {
    match action {
        Action::Unsupported(m) => Err(m.clone()),
        Action::Sleep(d) => {
            tokio::time::sleep(*d).await;
            Ok(())
        }
        Action::Exec(e) => {
            let argv = e.command.clone().unwrap_or_default();
            let out = exec(&target.exec, &argv, None, timeout)
                .await
                .map_err(|e| e.to_string())?;
            if out.timed_out {
                return Err(format!("command {argv:?} timed out after {timeout:?}"));
            }
            if out.success() {
                Ok(())
            } else {
                let output = format!("{}{}", out.stdout, out.stderr);
                Err(format!(
                    "command {argv:?} exited with {:?}: {}",
                    out.code,
                    output.trim()
                ))
            }
        }
        Action::Tcp(t) => {
            let ip = match &t.host {
                Some(h) if !h.is_empty() => {
                    h.parse().map_err(|_| format!("host {h:?} is not an IP"))?
                }
                _ => target.pod_ip,
            };
            if !allowed(ip) {
                return Err(format!(
                    "the pod runner only probes its own networks, not {ip}"
                ));
            }
            let port = resolve_port(&t.port, &target.ports)?;
            let addr = SocketAddr::new(ip, port);
            match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("dial tcp {addr}: {e}")),
                Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
            }
        }
        Action::Http(h) => tokio::time::timeout(timeout, http_get(h, target))
            .await
            .unwrap_or_else(|_| Err(format!("Get {:?}: context deadline exceeded", h.path))),
    }
}

async fn http_get(h: &HTTPGetAction, target: &ProbeTarget) -> Result<(), String> {
    let ip: IpAddr = match &h.host {
        Some(host) if !host.is_empty() => host
            .parse()
            .map_err(|_| format!("host {host:?} is not an IP"))?,
        _ => target.pod_ip,
    };
    if !allowed(ip) {
        return Err(format!(
            "the pod runner only probes its own networks, not {ip}"
        ));
    }
    let port = resolve_port(&h.port, &target.ports)?;
    let path = h
        .path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/".into());
    let https = h
        .scheme
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
    let url = format!(
        "{}://{ip}:{port}{path}",
        if https { "https" } else { "http" }
    );
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    let headers = h.http_headers.clone().unwrap_or_default();
    if !headers.iter().any(|x| x.name.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {ip}:{port}\r\n"));
    }
    if !headers
        .iter()
        .any(|x| x.name.eq_ignore_ascii_case("user-agent"))
    {
        request.push_str("User-Agent: kube-probe/1.33\r\n");
    }
    if !headers
        .iter()
        .any(|x| x.name.eq_ignore_ascii_case("accept"))
    {
        request.push_str("Accept: */*\r\n");
    }
    for x in &headers {
        request.push_str(&format!("{}: {}\r\n", x.name, x.value));
    }
    request.push_str("Connection: close\r\n\r\n");
    let stream = TcpStream::connect(SocketAddr::new(ip, port))
        .await
        .map_err(|e| format!("Get {url:?}: dial tcp {ip}:{port}: {e}"))?;
    let response = if https {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(insecure_client_config()?));
        let name = rustls::pki_types::ServerName::IpAddress(ip.into());
        let tls = connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("Get {url:?}: tls: {e}"))?;
        exchange(tls, &request).await
    } else {
        exchange(stream, &request).await
    }
    .map_err(|e| format!("Get {url:?}: {e}"))?;
    let status_line = response.lines().next().unwrap_or("");
    let code: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("Get {url:?}: malformed response {status_line:?}"))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        let body = response.split("\r\n\r\n").nth(1).unwrap_or("").trim();
        let body: String = body.chars().take(200).collect();
        Err(format!("HTTP probe failed with statuscode: {code} {body}"))
    }
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    request: &str,
) -> std::io::Result<String> {
    s.write_all(request.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // Status line and a little body are all a probe needs; stop at 10 KiB.
    while buf.len() < 10 * 1024 {
        match s.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if buf.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// A TLS client that accepts any server certificate: kubelet does not verify probe targets.
fn insecure_client_config() -> Result<rustls::ClientConfig, String> {
    #[derive(Debug)]
    struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);
    impl rustls::client::danger::ServerCertVerifier for AcceptAny {
        fn verify_server_cert(
            &self,
            _: &rustls::pki_types::CertificateDer<'_>,
            _: &[rustls::pki_types::CertificateDer<'_>],
            _: &rustls::pki_types::ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
                .with_no_client_auth()
        })
        .map_err(|e| format!("building a TLS client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_ports_resolve_from_the_container() {
        let ports = vec![ContainerPort {
            name: Some("metrics".into()),
            container_port: 2381,
            ..ContainerPort::default()
        }];
        assert_eq!(
            resolve_port(&IntOrString::String("metrics".into()), &ports),
            Ok(2381)
        );
        assert_eq!(resolve_port(&IntOrString::Int(2380), &ports), Ok(2380));
        assert!(resolve_port(&IntOrString::String("client".into()), &ports).is_err());
    }

    #[test]
    fn probes_stay_on_our_networks() {
        assert!(allowed("127.0.0.1".parse().unwrap()));
        assert!(allowed("10.213.4.9".parse().unwrap()));
        assert!(!allowed("10.0.0.1".parse().unwrap()));
        assert!(!allowed("192.0.2.1".parse().unwrap()));
    }
}
