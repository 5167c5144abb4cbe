//! The WebSocket side of KEP-4006 (tokio-tungstenite for the framing):
//! - `v5.channel.k8s.io`: every binary message starts with a channel byte — 0 stdin, 1 stdout,
//!   2 stderr, 3 error (the `metav1.Status` at the end), 4 resize; `[255, n]` from the client
//!   closes channel `n` (stdin's EOF).
//! - `SPDY/3.1+portforward.k8s.io`: binary messages carry the bytes of an SPDY session, served by
//!   [`super::spdy`] through an in-memory pipe.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::remotecommand::Streams;
use super::Session;

type Ws = WebSocketStream<TokioIo<Upgraded>>;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// The server end of an upgraded WebSocket connection (the handshake was the 101 response).
pub async fn server(io: TokioIo<Upgraded>) -> Ws {
    WebSocketStream::from_raw_socket(io, Role::Server, None).await
}

/// `v5.channel.k8s.io`: run `session` with the channels the request asked for.
pub async fn remote_command(ws: Ws, session: Session) {
    let Some(request) = session.request().cloned() else {
        return;
    };
    let (mut sink, mut source) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(16);
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            let closing = matches!(message, Message::Close(_));
            if sink.send(message).await.is_err() || closing {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(16);
    let (resize_tx, resize_rx) = mpsc::channel::<Bytes>(4);
    let reader = tokio::spawn(async move {
        let mut stdin = Some(stdin_tx);
        while let Some(Ok(message)) = source.next().await {
            let data = match message {
                Message::Binary(data) => data,
                Message::Close(_) => break,
                _ => continue,
            };
            match data.first() {
                Some(&STDIN) => {
                    if let Some(tx) = &stdin {
                        if tx.send(data.slice(1..)).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                Some(&CLOSE) if data.get(1) == Some(&STDIN) => stdin = None,
                Some(&RESIZE) => {
                    let _ = resize_tx.try_send(data.slice(1..));
                }
                _ => {}
            }
        }
    });
    let mut sinks = Vec::new();
    let mut channel = |wanted: bool, id: u8| {
        wanted.then(|| {
            let (tx, mut rx) = mpsc::channel::<Bytes>(16);
            let out = out_tx.clone();
            sinks.push(tokio::spawn(async move {
                while let Some(data) = rx.recv().await {
                    let mut framed = Vec::with_capacity(data.len() + 1);
                    framed.push(id);
                    framed.extend_from_slice(&data);
                    if out.send(Message::Binary(framed.into())).await.is_err() {
                        break;
                    }
                }
            }));
            tx
        })
    };
    let stdout = channel(request.stdout, STDOUT);
    let stderr = channel(request.stderr, STDERR);
    let outcome = session
        .run(Streams {
            stdin: request.stdin.then_some(stdin_rx),
            stdout,
            stderr,
            resize: request.tty.then_some(resize_rx),
        })
        .await;
    for task in sinks {
        let _ = task.await;
    }
    let mut status = vec![ERROR];
    status.extend_from_slice(outcome.status().to_string().as_bytes());
    let _ = out_tx.send(Message::Binary(status.into())).await;
    let _ = out_tx
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await;
    drop(out_tx);
    let _ = writer.await;
    // Read on until the client's Close (or a short while): dropping the socket with its data
    // unread makes the kernel answer with a reset, which can discard the status just sent
    // before the client has read it (`kubectl attach -i` then loses its error message).
    let abort = reader.abort_handle();
    if tokio::time::timeout(CLOSE_GRACE, reader).await.is_err() {
        abort.abort();
    }
}

/// How long a finished session waits for the client's Close before dropping the connection.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The byte stream a `SPDY/3.1+...` tunnel carries, as one end of an in-memory pipe.
pub fn tunnel(ws: Ws) -> DuplexStream {
    let (ours, theirs) = tokio::io::duplex(256 * 1024);
    let (mut from_pipe, mut to_pipe) = tokio::io::split(ours);
    let (mut sink, mut source) = ws.split();
    tokio::spawn(async move {
        while let Some(Ok(message)) = source.next().await {
            let data = match message {
                Message::Binary(data) => data,
                Message::Close(_) => break,
                _ => continue,
            };
            if to_pipe.write_all(&data).await.is_err() {
                break;
            }
        }
        let _ = to_pipe.shutdown().await;
    });
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let message = Message::Binary(Bytes::copy_from_slice(&buf[..n]));
                    if sink.send(message).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = sink.close().await;
    });
    theirs
}
