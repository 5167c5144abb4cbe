//! The kubelet's streaming endpoints — `/exec`, `/attach` and `/portForward` — as the
//! kube-apiserver reaches them for `kubectl exec`, `kubectl cp` (tar over exec), `kubectl attach`
//! and `kubectl port-forward`.
//!
//! What arrives depends on the apiserver and on what the Node declares (KEP-4006):
//! - SPDY/3.1 (`X-Stream-Protocol-Version: v4.channel.k8s.io` / `portforward.k8s.io`): from
//!   kubectl with `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`, from kubectl 1.29 and older, and from
//!   an apiserver ≥ 1.30 that translates kubectl's WebSocket into SPDY because the Node does not
//!   declare `ExtendWebSocketsToKubelet`.
//! - WebSocket `v5.channel.k8s.io` (exec/attach) and `SPDY/3.1+portforward.k8s.io` (SPDY frames
//!   tunnelled in binary messages): passed through unchanged by an apiserver ≥ 1.36 when the Node
//!   declares `ExtendWebSocketsToKubelet` (the runner's Nodes do on such apiservers), and by a
//!   1.29 apiserver, which proxies every upgrade as it is.
//!
//! Commands run inside the container ([`super::exec`]: its namespaces, user, environment, working
//! directory and image `PATH`); port-forward connects to `localhost:<port>` inside the Pod's
//! network namespace, as the container runtime does.

mod portforward;
pub mod remotecommand;
pub mod spdy;
mod spdy_dictionary;
mod websocket;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

use super::exec::ExecTarget;
use super::kubelet::{text, Body};
use super::registry::{PodEntry, Registry, StreamSession};
use remotecommand::{Outcome, Streams};

/// The remote-command protocol spoken over SPDY.
pub const SPDY_REMOTE_COMMAND: &str = "v4.channel.k8s.io";
/// The remote-command protocol spoken over WebSocket.
pub const WEBSOCKET_REMOTE_COMMAND: &str = "v5.channel.k8s.io";
pub const PORT_FORWARD: &str = "portforward.k8s.io";
/// A port-forward SPDY session tunnelled through a WebSocket.
pub const WEBSOCKET_PORT_FORWARD: &str = "SPDY/3.1+portforward.k8s.io";
/// How long the client has to open the streams it asked for (kubelet's default).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Every value of a header that may be repeated and comma-separated.
fn header_values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// The transport a request asks to upgrade to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Spdy,
    WebSocket,
}

/// Which upgrade, and which of the client's protocols this side speaks for `endpoint`.
pub fn negotiate(headers: &HeaderMap, endpoint: Endpoint) -> Result<(Wire, &'static str), String> {
    let upgrade = header_values(headers, "upgrade");
    let (wire, offered, ours) = if upgrade.iter().any(|u| u.eq_ignore_ascii_case("websocket")) {
        let ours = match endpoint {
            Endpoint::PortForward => WEBSOCKET_PORT_FORWARD,
            Endpoint::Exec | Endpoint::Attach => WEBSOCKET_REMOTE_COMMAND,
        };
        (
            Wire::WebSocket,
            header_values(headers, "sec-websocket-protocol"),
            ours,
        )
    } else if upgrade.iter().any(|u| u.eq_ignore_ascii_case("SPDY/3.1")) {
        let ours = match endpoint {
            Endpoint::PortForward => PORT_FORWARD,
            Endpoint::Exec | Endpoint::Attach => SPDY_REMOTE_COMMAND,
        };
        (
            Wire::Spdy,
            header_values(headers, "x-stream-protocol-version"),
            ours,
        )
    } else {
        return Err("Upgrade request required (SPDY/3.1 or websocket)".into());
    };
    if offered.iter().any(|p| p == ours) {
        Ok((wire, ours))
    } else {
        Err(format!(
            "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports [{ours:?}]"
        ))
    }
}

/// The three streaming endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Exec,
    Attach,
    PortForward,
}

impl Endpoint {
    /// The endpoint a kubelet path names, and the rest of the path.
    pub fn of(path: &str) -> Option<(Endpoint, &str)> {
        if let Some(rest) = path.strip_prefix("/exec/") {
            Some((Endpoint::Exec, rest))
        } else if let Some(rest) = path.strip_prefix("/attach/") {
            Some((Endpoint::Attach, rest))
        } else {
            path.strip_prefix("/portForward/")
                .map(|rest| (Endpoint::PortForward, rest))
        }
    }
}

fn find_pod(registry: &Registry, ns: &str, pod: &str, uid: Option<&str>) -> Option<Arc<PodEntry>> {
    registry
        .find(ns, pod)
        .filter(|e| uid.is_none_or(|u| u == e.uid))
}

fn pod_not_found(ns: &str, pod: &str) -> Response<Body> {
    text(
        StatusCode::NOT_FOUND,
        format!("pod {ns}/{pod} does not exist on the pod runner"),
    )
}

/// What a session runs once upgraded.
enum Session {
    Exec {
        entry: Arc<PodEntry>,
        target: Box<ExecTarget>,
        request: remotecommand::Request,
    },
    Attach {
        entry: Arc<PodEntry>,
        request: remotecommand::Request,
    },
    PortForward {
        entry: Arc<PodEntry>,
    },
}

/// Check the request, answer `101 Switching Protocols` and run the session on the upgraded
/// connection.
pub async fn handle(
    mut req: Request<Incoming>,
    endpoint: Endpoint,
    rest: &str,
    registry: &Registry,
) -> Response<Body> {
    let query = req.uri().query().unwrap_or("").to_string();
    let session = match endpoint {
        Endpoint::Exec | Endpoint::Attach => {
            let request = match remotecommand::Request::parse(rest, &query) {
                Ok(r) => r,
                Err(message) => return text(StatusCode::BAD_REQUEST, message),
            };
            let Some(entry) = find_pod(
                registry,
                &request.namespace,
                &request.pod,
                request.uid.as_deref(),
            ) else {
                return pod_not_found(&request.namespace, &request.pod);
            };
            let target = entry
                .state
                .lock()
                .ok()
                .and_then(|s| s.containers.get(&request.container).cloned())
                .and_then(|c| c.running);
            let Some(target) = target else {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "container {:?} in pod {}/{} is not running",
                        request.container, request.namespace, request.pod
                    ),
                );
            };
            if endpoint == Endpoint::Exec {
                if request.command.is_empty() {
                    return text(
                        StatusCode::BAD_REQUEST,
                        "you must specify at least one command for the container".into(),
                    );
                }
                Session::Exec {
                    entry,
                    target: Box::new(target),
                    request,
                }
            } else {
                Session::Attach { entry, request }
            }
        }
        Endpoint::PortForward => {
            let parts: Vec<&str> = rest.split('/').collect();
            let (ns, pod, uid) = match parts[..] {
                [ns, pod] => (ns, pod, None),
                [ns, pod, uid] => (ns, pod, Some(uid)),
                _ => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "expected /portForward/{{namespace}}/{{pod}}[/{{uid}}], got {rest:?}"
                        ),
                    )
                }
            };
            match find_pod(registry, ns, pod, uid) {
                Some(entry) => Session::PortForward { entry },
                None => return pod_not_found(ns, pod),
            }
        }
    };
    let (wire, protocol) = match negotiate(req.headers(), endpoint) {
        Ok(x) => x,
        Err(message) => {
            let status = if message.starts_with("Upgrade request required") {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::FORBIDDEN
            };
            return text(status, message);
        }
    };
    let (namespace, pod) = match &session {
        Session::Exec { entry, .. }
        | Session::Attach { entry, .. }
        | Session::PortForward { entry } => (entry.namespace.clone(), entry.name.clone()),
    };
    let mut response = Response::new(Full::new(Bytes::new()).boxed_unsync());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("Upgrade"),
    );
    match wire {
        Wire::Spdy => {
            headers.insert(
                http::header::UPGRADE,
                http::HeaderValue::from_static("SPDY/3.1"),
            );
            headers.insert(
                "X-Stream-Protocol-Version",
                http::HeaderValue::from_static(protocol),
            );
        }
        Wire::WebSocket => {
            let Some(key) = req.headers().get("sec-websocket-key") else {
                return text(
                    StatusCode::BAD_REQUEST,
                    "websocket upgrade without Sec-WebSocket-Key".into(),
                );
            };
            let accept =
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
            let Ok(accept) = http::HeaderValue::from_str(&accept) else {
                return text(StatusCode::BAD_REQUEST, "bad Sec-WebSocket-Key".into());
            };
            headers.insert(
                http::header::UPGRADE,
                http::HeaderValue::from_static("websocket"),
            );
            headers.insert("Sec-WebSocket-Accept", accept);
            headers.insert(
                "Sec-WebSocket-Protocol",
                http::HeaderValue::from_static(protocol),
            );
        }
    }
    registry.record_session(StreamSession {
        endpoint: match endpoint {
            Endpoint::Exec => "exec",
            Endpoint::Attach => "attach",
            Endpoint::PortForward => "portforward",
        }
        .to_string(),
        namespace,
        pod,
        protocol: protocol.to_string(),
    });
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let io = TokioIo::new(upgraded);
        match (wire, session) {
            (Wire::Spdy, Session::PortForward { entry }) => {
                portforward::serve(spdy::serve(io), entry).await
            }
            (Wire::WebSocket, Session::PortForward { entry }) => {
                let ws = websocket::server(io).await;
                portforward::serve(spdy::serve(websocket::tunnel(ws)), entry).await
            }
            (Wire::Spdy, session) => remote_command_over_spdy(spdy::serve(io), session).await,
            (Wire::WebSocket, session) => {
                websocket::remote_command(websocket::server(io).await, session).await
            }
        }
    });
    response
}

impl Session {
    fn request(&self) -> Option<&remotecommand::Request> {
        match self {
            Session::Exec { request, .. } | Session::Attach { request, .. } => Some(request),
            Session::PortForward { .. } => None,
        }
    }

    /// Run an exec or attach session with `streams`.
    async fn run(self, streams: Streams) -> Outcome {
        match self {
            Session::Exec {
                entry,
                target,
                request,
            } => {
                remotecommand::run_exec(
                    entry,
                    &request.container,
                    &target,
                    &request.command,
                    request.tty,
                    streams,
                )
                .await
            }
            Session::Attach { entry, request } => {
                remotecommand::run_attach(entry, &request, streams).await
            }
            Session::PortForward { .. } => Outcome::Failed("not a remote command".into()),
        }
    }
}

/// A sink whose data goes out on one SPDY stream, half-closed when the sink is dropped.
fn spdy_sink(writer: spdy::StreamWriter) -> (mpsc::Sender<Bytes>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    let task = tokio::spawn(async move {
        while let Some(data) = rx.recv().await {
            if !writer.send(&data).await {
                break;
            }
        }
        writer.close().await;
    });
    (tx, task)
}

/// `v4.channel.k8s.io` over SPDY: the client opens an `error` stream and one stream per
/// requested standard stream (and `resize` with a TTY); the status goes out on `error`.
async fn remote_command_over_spdy(mut incoming: mpsc::Receiver<spdy::Stream>, session: Session) {
    let Some(request) = session.request().cloned() else {
        return;
    };
    let mut expected = vec!["error"];
    for (wanted, name) in [
        (request.stdin, "stdin"),
        (request.stdout, "stdout"),
        (request.stderr, "stderr"),
        (request.tty, "resize"),
    ] {
        if wanted {
            expected.push(name);
        }
    }
    let mut got: Vec<(String, spdy::Stream)> = Vec::new();
    let deadline = tokio::time::Instant::now() + STREAM_CREATION_TIMEOUT;
    while got.len() < expected.len() {
        match tokio::time::timeout_at(deadline, incoming.recv()).await {
            Ok(Some(stream)) => {
                let kind = stream
                    .headers
                    .get("streamtype")
                    .unwrap_or_default()
                    .to_string();
                if expected.contains(&kind.as_str()) && !got.iter().any(|(k, _)| *k == kind) {
                    got.push((kind, stream));
                } else {
                    stream.writer.reset().await;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    let complete = got.len() == expected.len();
    let mut take = |kind: &str| {
        got.iter()
            .position(|(k, _)| k == kind)
            .map(|i| got.swap_remove(i).1)
    };
    let Some(error) = take("error") else {
        return;
    };
    let stdin = take("stdin");
    let mut sinks = Vec::new();
    let mut sink_for = |stream: Option<spdy::Stream>| {
        stream.map(|s| {
            let (tx, task) = spdy_sink(s.writer);
            sinks.push(task);
            tx
        })
    };
    let stdout = sink_for(take("stdout"));
    let stderr = sink_for(take("stderr"));
    let resize = take("resize");
    let outcome = if complete {
        session
            .run(Streams {
                stdin: stdin.map(|s| s.rx),
                stdout,
                stderr,
                resize: resize.map(|s| s.rx),
            })
            .await
    } else {
        Outcome::Failed(format!(
            "timed out waiting for the client to open the streams {expected:?}"
        ))
    };
    for task in sinks {
        let _ = task.await;
    }
    error
        .writer
        .send(outcome.status().to_string().as_bytes())
        .await;
    error.writer.close().await;
}
