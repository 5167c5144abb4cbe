//! `portforward.k8s.io`: for every connection it forwards, the client opens an `error` and a
//! `data` stream with the same `requestID` and the Pod `port`; the kubelet connects to
//! `localhost:<port>` inside the Pod's network namespace and copies bytes both ways until each
//! side is done, reporting a failure to connect on the error stream.

use std::collections::HashMap;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream as StdTcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::sched::{setns, CloneFlags};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::super::registry::PodEntry;
use super::spdy::Stream;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connect to `127.0.0.1:port` inside the network namespace at `netns` (the host's own network
/// for a hostNetwork Pod). `setns` changes the calling thread's namespace for good, so it runs
/// on a thread of its own that ends right after; the socket stays in the namespace it was
/// made in.
async fn connect_in_pod(netns: Option<PathBuf>, port: u16) -> std::io::Result<TcpStream> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("pod-runner-portforward".into())
        .spawn(move || {
            let result = (|| {
                if let Some(path) = &netns {
                    let ns = File::open(path)?;
                    setns(&ns, CloneFlags::CLONE_NEWNET)?;
                }
                let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
                let stream = StdTcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
                stream.set_nonblocking(true)?;
                Ok::<_, std::io::Error>(stream)
            })();
            let _ = tx.send(result);
        })?;
    let stream = rx
        .await
        .map_err(|_| std::io::Error::other("the connecting thread ended"))??;
    TcpStream::from_std(stream)
}

/// Forward one connection: `data` carries the bytes, `error` the reason it failed.
async fn forward(entry: Arc<PodEntry>, port: u16, error: Stream, data: Stream) {
    let netns = entry
        .state
        .lock()
        .ok()
        .and_then(|s| s.network.as_ref().map(|n| n.netns_path()));
    let socket = match connect_in_pod(netns, port).await {
        Ok(s) => s,
        Err(e) => {
            let message = format!(
                "error forwarding port {port} to pod {}, uid : failed to connect to localhost:{port} inside namespace of pod {}/{}: {e}",
                entry.uid, entry.namespace, entry.name
            );
            error.writer.send(message.as_bytes()).await;
            error.writer.close().await;
            data.writer.close().await;
            return;
        }
    };
    let (mut read, mut write) = socket.into_split();
    let Stream {
        rx: mut from_client,
        writer,
        ..
    } = data;
    let upstream = tokio::spawn(async move {
        while let Some(bytes) = from_client.recv().await {
            if write.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = write.shutdown().await;
    });
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if !writer.send(&buf[..n]).await {
                    break;
                }
            }
        }
    }
    writer.close().await;
    let _ = upstream.await;
    error.writer.close().await;
}

/// Pair the streams the client opens and forward each pair; when the connection ends, so does
/// every forward still open (a Pod-side socket that never closes must not outlive kubectl).
pub async fn serve(mut incoming: mpsc::Receiver<Stream>, entry: Arc<PodEntry>) {
    let mut pending: HashMap<String, (Option<Stream>, Option<Stream>)> = HashMap::new();
    let mut forwards: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    while let Some(stream) = incoming.recv().await {
        let kind = stream.headers.get("streamtype").unwrap_or_default();
        let request = stream
            .headers
            .get("requestid")
            .unwrap_or_default()
            .to_string();
        let port = stream
            .headers
            .get("port")
            .and_then(|p| p.parse::<u16>().ok());
        let Some(port) = port.filter(|p| *p > 0) else {
            let message = format!(
                "invalid port {:?} in the port-forward request",
                stream.headers.get("port")
            );
            stream.writer.send(message.as_bytes()).await;
            stream.writer.reset().await;
            continue;
        };
        let slot = pending.entry(request.clone()).or_default();
        match kind {
            "error" => slot.0 = Some(stream),
            "data" => slot.1 = Some(stream),
            _ => {
                stream.writer.reset().await;
                continue;
            }
        }
        if let Some((Some(_), Some(_))) = pending.get(&request) {
            if let Some((Some(error), Some(data))) = pending.remove(&request) {
                forwards.retain(|f| !f.is_finished());
                forwards.push(tokio::spawn(forward(entry.clone(), port, error, data)));
            }
        }
    }
    for f in forwards {
        f.abort();
    }
}
