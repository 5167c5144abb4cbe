//! The kubelet API the apiserver needs from us, over HTTPS with a self-signed certificate (the
//! apiserver verifies kubelet certificates only with `--kubelet-certificate-authority`, which
//! the test control plane does not set): `GET /containerLogs/{ns}/{pod}/{container}` (with
//! `previous`, `tailLines`, `limitBytes`, `follow`) for `kubectl logs`, and the streaming
//! endpoints `/exec`, `/attach` and `/portForward` ([`super::streaming`]). The other kubelet
//! endpoints answer 404.

use std::convert::Infallible;
use std::io::SeekFrom;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::net::TcpListener;

use super::registry::Registry;
use super::streaming;
use super::Error;

pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A TLS configuration with a fresh self-signed certificate for 127.0.0.1.
pub fn tls_config() -> Result<Arc<rustls::ServerConfig>, Error> {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .map_err(|e| Error::Unsupported(format!("minting the kubelet certificate: {e}")))?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_no_client_auth()
                .with_single_cert(vec![certified.cert.der().clone()], key)
        })
        .map_err(|e| Error::Unsupported(format!("building the kubelet TLS config: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serve until the task is aborted.
pub async fn serve(listener: TcpListener, tls: Arc<rustls::ServerConfig>, registry: Arc<Registry>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let acceptor = acceptor.clone();
        let registry = registry.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(stream).await else {
                return;
            };
            let service = service_fn(move |req| {
                let registry = registry.clone();
                async move { Ok::<_, Infallible>(handle(req, &registry).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades()
                .await;
        });
    }
}

pub(crate) fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The query parameters of a log request.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LogQuery {
    pub previous: bool,
    pub follow: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
}

pub fn parse_query(query: &str) -> LogQuery {
    let mut q = LogQuery::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
        let truthy = matches!(v, "true" | "1" | "True" | "");
        match k {
            "previous" => q.previous = truthy,
            "follow" => q.follow = truthy,
            "tailLines" => q.tail_lines = v.parse().ok(),
            "limitBytes" => q.limit_bytes = v.parse().ok(),
            _ => {}
        }
    }
    q
}

/// The last `n` lines of `text`.
pub fn tail_lines(text: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &text[text.len()..];
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &text[i + 1..];
            }
        }
    }
    text
}

async fn handle(req: Request<Incoming>, registry: &Registry) -> Response<Body> {
    let path = req.uri().path().to_string();
    if path == "/healthz" {
        return text(StatusCode::OK, "ok".into());
    }
    if let Some((endpoint, rest)) = streaming::Endpoint::of(&path) {
        return streaming::handle(req, endpoint, rest, registry).await;
    }
    let Some(rest) = path.strip_prefix("/containerLogs/") else {
        return text(
            StatusCode::NOT_FOUND,
            format!("{path}: the pod runner's kubelet serves only /containerLogs, /exec, /attach, /portForward and /healthz"),
        );
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let [ns, pod, container] = parts[..] else {
        return text(StatusCode::BAD_REQUEST, format!("bad log path {path}"));
    };
    let query = parse_query(req.uri().query().unwrap_or(""));
    let Some(entry) = registry.container(ns, pod, container) else {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "container \"{container}\" in pod \"{ns}/{pod}\" is not known to the pod runner"
            ),
        );
    };
    let Some(current) = entry.current else {
        return text(
            StatusCode::BAD_REQUEST,
            format!(
                "container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating"
            ),
        );
    };
    let instance = if query.previous {
        match current.checked_sub(1) {
            Some(p) if entry.log(p).exists() => p,
            _ => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "previous terminated container \"{container}\" in pod \"{pod}\" not found"
                    ),
                )
            }
        }
    } else {
        current
    };
    let log = entry.log(instance);
    let content = tokio::fs::read(&log).await.unwrap_or_default();
    let mut body: &[u8] = &content;
    if let Some(n) = query.tail_lines {
        body = tail_lines(body, n);
    }
    if let Some(limit) = query.limit_bytes {
        body = &body[..body.len().min(limit)];
    }
    let initial = Bytes::copy_from_slice(body);
    let mut response = if query.follow && !query.previous && query.limit_bytes.is_none() {
        let stream = follow(
            initial,
            log,
            content.len() as u64,
            registry_probe(registry, ns, pod, container, instance),
        );
        Response::new(StreamBody::new(stream).boxed_unsync())
    } else {
        Response::new(Full::new(initial).boxed_unsync())
    };
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Whether the instance is still the running one (follow stops when it is not).
fn registry_probe(
    registry: &Registry,
    ns: &str,
    pod: &str,
    container: &str,
    instance: u32,
) -> Arc<dyn Fn() -> bool + Send + Sync> {
    let entry = registry.find(ns, pod);
    let container = container.to_string();
    Arc::new(move || {
        entry.as_ref().is_some_and(|e| {
            e.state.lock().is_ok_and(|s| {
                s.containers
                    .get(&container)
                    .is_some_and(|c| c.current == Some(instance) && c.running.is_some())
            })
        })
    })
}

/// `initial`, then what is appended to the log at `path` from `offset` on, until `running`
/// says the instance stopped and everything it wrote was sent.
pub(crate) fn follow(
    initial: Bytes,
    path: PathBuf,
    offset: u64,
    running: Arc<dyn Fn() -> bool + Send + Sync>,
) -> impl futures::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send {
    futures::stream::unfold((Some(initial), offset), move |(initial, mut offset)| {
        let path = path.clone();
        let running = running.clone();
        async move {
            if let Some(first) = initial {
                return Some((Ok(Frame::data(first)), (None, offset)));
            }
            loop {
                // Liveness first, then read: bytes written just before the exit are not lost.
                let live = running();
                let mut chunk = vec![0u8; 64 * 1024];
                let read = async {
                    let mut f = tokio::fs::File::open(&path).await?;
                    f.seek(SeekFrom::Start(offset)).await?;
                    f.read(&mut chunk).await
                }
                .await
                .unwrap_or(0);
                if read > 0 {
                    chunk.truncate(read);
                    offset += read as u64;
                    return Some((Ok(Frame::data(Bytes::from(chunk))), (None, offset)));
                }
                if !live {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters() {
        assert_eq!(
            parse_query("previous=true&tailLines=2&follow=false&limitBytes=10"),
            LogQuery {
                previous: true,
                follow: false,
                tail_lines: Some(2),
                limit_bytes: Some(10)
            }
        );
        assert_eq!(parse_query(""), LogQuery::default());
    }

    #[test]
    fn tails() {
        assert_eq!(tail_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(tail_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(tail_lines(b"a\nb\n", 0), b"");
    }
}
