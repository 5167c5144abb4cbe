//! The server side of SPDY/3.1 as the Kubernetes streaming protocols use it (moby/spdystream on
//! the other end): the client opens every stream (SYN_STREAM, headers naming what the stream is
//! for), the server replies to each at once (SYN_REPLY, no headers) and both sides exchange DATA
//! frames until each half-closes (FIN) or resets (RST_STREAM). Header blocks are zlib-compressed
//! with the protocol's dictionary, one compression context per direction for the whole session.
//!
//! Written here rather than taken from a crate: the one SPDY/3.1 crate on crates.io, `spdy-mux`,
//! is GPL-3.0-only (this workspace is Apache-2.0) and is a client only — it rejects streams the
//! peer opens, which is all a kubelet ever receives. Flow control is not implemented, as
//! spdystream implements none (it never sends WINDOW_UPDATE and ignores those it receives);
//! SETTINGS and WINDOW_UPDATE frames are read and ignored, PINGs are answered.

use std::collections::HashMap;

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::spdy_dictionary::HEADER_DICTIONARY;

const VERSION: u16 = 3;
const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;
const FLAG_FIN: u8 = 0x01;
/// RST_STREAM status CANCEL.
pub const STATUS_CANCEL: u32 = 5;
/// RST_STREAM status REFUSED_STREAM.
pub const STATUS_REFUSED: u32 = 3;
/// The largest DATA frame this side sends (the protocol allows 2^24 - 1 bytes).
const MAX_DATA_CHUNK: usize = 32 * 1024;
/// The largest frame this side accepts.
const MAX_FRAME: usize = (1 << 24) - 1;

/// A malformed or undecodable frame.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("SPDY frame: {0}")]
    Malformed(String),
    #[error("SPDY header compression: {0}")]
    Zlib(String),
    #[error("SPDY connection: {0}")]
    Io(#[from] std::io::Error),
}

/// A header block: names lower-case as on the wire, a value with several entries NUL-separated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// The first value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.split('\0').next())
    }
}

/// One SPDY/3 frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream: u32,
        fin: bool,
        data: Bytes,
    },
    SynStream {
        stream: u32,
        associated: u32,
        priority: u8,
        fin: bool,
        headers: Headers,
    },
    SynReply {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream: u32,
        status: u32,
    },
    Settings,
    Ping(u32),
    GoAway {
        last_good: u32,
        status: u32,
    },
    Headers {
        stream: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        stream: u32,
        delta: u32,
    },
}

/// The receiving half of header compression.
pub struct Inflater(Decompress);

impl Default for Inflater {
    fn default() -> Self {
        Self(Decompress::new(true))
    }
}

impl Inflater {
    fn inflate(&mut self, input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(input.len() * 4 + 256);
        let mut pos = 0usize;
        loop {
            if out.capacity() - out.len() < 1024 {
                out.reserve(out.capacity().max(4096));
            }
            let (in_before, out_before) = (self.0.total_in(), out.len());
            let result = self
                .0
                .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync);
            let consumed = usize::try_from(self.0.total_in() - in_before).unwrap_or(usize::MAX);
            pos = pos.saturating_add(consumed).min(input.len());
            match result {
                Ok(Status::StreamEnd) => break,
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.0
                        .set_dictionary(HEADER_DICTIONARY)
                        .map_err(|e| SpdyError::Zlib(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(SpdyError::Zlib(e.to_string())),
            }
            let progressed = consumed > 0 || out.len() > out_before;
            if (pos == input.len() && out.len() < out.capacity()) || !progressed {
                break;
            }
        }
        Ok(out)
    }
}

/// The sending half of header compression.
pub struct Deflater(Compress);

impl Default for Deflater {
    fn default() -> Self {
        let mut z = Compress::new(Compression::best(), true);
        // A fresh stream always accepts a dictionary.
        let _ = z.set_dictionary(HEADER_DICTIONARY);
        Self(z)
    }
}

impl Deflater {
    fn deflate(&mut self, input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        let mut out = Vec::with_capacity(input.len() + 64);
        let mut pos = 0usize;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(256));
            }
            let in_before = self.0.total_in();
            self.0
                .compress_vec(&input[pos..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Zlib(e.to_string()))?;
            let consumed = usize::try_from(self.0.total_in() - in_before).unwrap_or(usize::MAX);
            pos = pos.saturating_add(consumed).min(input.len());
            // A sync flush is complete once the output buffer was not filled up.
            if pos == input.len() && out.len() < out.capacity() {
                break;
            }
        }
        Ok(out)
    }
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, SpdyError> {
    b.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| SpdyError::Malformed(format!("frame too short for a field at {at}")))
}

fn decode_headers(block: &[u8]) -> Result<Headers, SpdyError> {
    let count = u32_at(block, 0)? as usize;
    let mut at = 4;
    let mut headers = Vec::with_capacity(count.min(64));
    let field = |at: &mut usize| -> Result<String, SpdyError> {
        let len = u32_at(block, *at)? as usize;
        let bytes = block
            .get(*at + 4..*at + 4 + len)
            .ok_or_else(|| SpdyError::Malformed("header block cut short".into()))?;
        *at += 4 + len;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| SpdyError::Malformed("a header is not UTF-8".into()))
    };
    for _ in 0..count {
        let name = field(&mut at)?.to_ascii_lowercase();
        let value = field(&mut at)?;
        headers.push((name, value));
    }
    Ok(Headers(headers))
}

fn encode_headers(headers: &Headers) -> Vec<u8> {
    let mut block = Vec::new();
    let count = u32::try_from(headers.0.len()).unwrap_or(u32::MAX);
    block.extend_from_slice(&count.to_be_bytes());
    for (name, value) in &headers.0 {
        for s in [name.to_ascii_lowercase().as_str(), value.as_str()] {
            let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
            block.extend_from_slice(&len.to_be_bytes());
            block.extend_from_slice(s.as_bytes());
        }
    }
    block
}

/// Parse one frame from its 8-byte header and payload.
pub fn decode(head: [u8; 8], payload: &[u8], inflater: &mut Inflater) -> Result<Frame, SpdyError> {
    let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let flags = head[4];
    let fin = flags & FLAG_FIN != 0;
    if first & 0x8000_0000 == 0 {
        return Ok(Frame::Data {
            stream: first & 0x7fff_ffff,
            fin,
            data: Bytes::copy_from_slice(payload),
        });
    }
    let version = ((first >> 16) & 0x7fff) as u16;
    if version != VERSION {
        return Err(SpdyError::Malformed(format!(
            "SPDY version {version}, only 3 is spoken"
        )));
    }
    let stream = || u32_at(payload, 0).map(|s| s & 0x7fff_ffff);
    Ok(match (first & 0xffff) as u16 {
        TYPE_SYN_STREAM => {
            let block = payload
                .get(10..)
                .ok_or_else(|| SpdyError::Malformed("SYN_STREAM too short".into()))?;
            Frame::SynStream {
                stream: stream()?,
                associated: u32_at(payload, 4)? & 0x7fff_ffff,
                priority: payload[8] >> 5,
                fin,
                headers: decode_headers(&inflater.inflate(block)?)?,
            }
        }
        TYPE_SYN_REPLY => Frame::SynReply {
            stream: stream()?,
            fin,
            headers: decode_headers(&inflater.inflate(payload.get(4..).unwrap_or_default())?)?,
        },
        TYPE_HEADERS => Frame::Headers {
            stream: stream()?,
            fin,
            headers: decode_headers(&inflater.inflate(payload.get(4..).unwrap_or_default())?)?,
        },
        TYPE_RST_STREAM => Frame::RstStream {
            stream: stream()?,
            status: u32_at(payload, 4)?,
        },
        TYPE_SETTINGS => Frame::Settings,
        TYPE_PING => Frame::Ping(u32_at(payload, 0)?),
        TYPE_GOAWAY => Frame::GoAway {
            last_good: stream()?,
            status: u32_at(payload, 4).unwrap_or(0),
        },
        TYPE_WINDOW_UPDATE => Frame::WindowUpdate {
            stream: stream()?,
            delta: u32_at(payload, 4)? & 0x7fff_ffff,
        },
        other => {
            return Err(SpdyError::Malformed(format!(
                "unknown control frame {other}"
            )))
        }
    })
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    let len = u32::try_from(payload.len()).unwrap_or(0) & 0x00ff_ffff;
    out.extend_from_slice(&(u32::from(flags) << 24 | len).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Serialize one frame.
pub fn encode(frame: &Frame, deflater: &mut Deflater) -> Result<Vec<u8>, SpdyError> {
    let fin_flag = |fin: bool| if fin { FLAG_FIN } else { 0 };
    Ok(match frame {
        Frame::Data { stream, fin, data } => {
            if data.len() > MAX_FRAME {
                return Err(SpdyError::Malformed("DATA frame too large".into()));
            }
            let mut out = Vec::with_capacity(8 + data.len());
            out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
            let len = u32::try_from(data.len()).unwrap_or(0);
            out.extend_from_slice(&(u32::from(fin_flag(*fin)) << 24 | len).to_be_bytes());
            out.extend_from_slice(data);
            out
        }
        Frame::SynStream {
            stream,
            associated,
            priority,
            fin,
            headers,
        } => {
            let mut payload = Vec::new();
            payload.extend_from_slice(&stream.to_be_bytes());
            payload.extend_from_slice(&associated.to_be_bytes());
            payload.push((priority & 0x7) << 5);
            payload.push(0);
            payload.extend(deflater.deflate(&encode_headers(headers))?);
            control(TYPE_SYN_STREAM, fin_flag(*fin), &payload)
        }
        Frame::SynReply {
            stream,
            fin,
            headers,
        }
        | Frame::Headers {
            stream,
            fin,
            headers,
        } => {
            let kind = if matches!(frame, Frame::SynReply { .. }) {
                TYPE_SYN_REPLY
            } else {
                TYPE_HEADERS
            };
            let mut payload = stream.to_be_bytes().to_vec();
            payload.extend(deflater.deflate(&encode_headers(headers))?);
            control(kind, fin_flag(*fin), &payload)
        }
        Frame::RstStream { stream, status } => {
            let mut payload = stream.to_be_bytes().to_vec();
            payload.extend_from_slice(&status.to_be_bytes());
            control(TYPE_RST_STREAM, 0, &payload)
        }
        Frame::Settings => control(TYPE_SETTINGS, 0, &0u32.to_be_bytes()),
        Frame::Ping(id) => control(TYPE_PING, 0, &id.to_be_bytes()),
        Frame::GoAway { last_good, status } => {
            let mut payload = last_good.to_be_bytes().to_vec();
            payload.extend_from_slice(&status.to_be_bytes());
            control(TYPE_GOAWAY, 0, &payload)
        }
        Frame::WindowUpdate { stream, delta } => {
            let mut payload = stream.to_be_bytes().to_vec();
            payload.extend_from_slice(&delta.to_be_bytes());
            control(TYPE_WINDOW_UPDATE, 0, &payload)
        }
    })
}

/// Read the next frame; `None` at a clean end of the connection.
pub async fn read_frame<R: AsyncRead + Unpin>(
    io: &mut R,
    inflater: &mut Inflater,
) -> Result<Option<Frame>, SpdyError> {
    let mut head = [0u8; 8];
    match io.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = (u32::from_be_bytes([0, head[5], head[6], head[7]])) as usize;
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await?;
    decode(head, &payload, inflater).map(Some)
}

/// What a stream's writer asks the session to send.
#[derive(Debug)]
enum Out {
    Frame(Frame),
}

/// The sending side of one stream.
#[derive(Clone, Debug)]
pub struct StreamWriter {
    id: u32,
    tx: mpsc::Sender<Out>,
}

impl StreamWriter {
    /// Send `data` (in frames of at most 32 KiB); false once the connection is gone.
    pub async fn send(&self, data: &[u8]) -> bool {
        for chunk in data.chunks(MAX_DATA_CHUNK) {
            let frame = Frame::Data {
                stream: self.id,
                fin: false,
                data: Bytes::copy_from_slice(chunk),
            };
            if self.tx.send(Out::Frame(frame)).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Half-close: this side sends nothing more on the stream.
    pub async fn close(&self) {
        let frame = Frame::Data {
            stream: self.id,
            fin: true,
            data: Bytes::new(),
        };
        let _ = self.tx.send(Out::Frame(frame)).await;
    }

    /// Reset the stream (both directions end).
    pub async fn reset(&self) {
        let frame = Frame::RstStream {
            stream: self.id,
            status: STATUS_CANCEL,
        };
        let _ = self.tx.send(Out::Frame(frame)).await;
    }
}

/// A stream the client opened.
#[derive(Debug)]
pub struct Stream {
    pub id: u32,
    pub headers: Headers,
    /// The client's data; ends when it half-closes or resets the stream, or the connection ends.
    pub rx: mpsc::Receiver<Bytes>,
    pub writer: StreamWriter,
}

/// Serve one upgraded connection: reply to every stream the client opens and hand it to the
/// caller through the returned receiver, which ends with the connection. The session's tasks end
/// when the connection ends and every [`Stream`] and [`StreamWriter`] is dropped.
pub fn serve<IO>(io: IO) -> mpsc::Receiver<Stream>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut read, mut write) = tokio::io::split(io);
    let (out_tx, mut out_rx) = mpsc::channel::<Out>(64);
    let (streams_tx, streams_rx) = mpsc::channel::<Stream>(16);
    tokio::spawn(async move {
        let mut deflater = Deflater::default();
        while let Some(Out::Frame(frame)) = out_rx.recv().await {
            let Ok(bytes) = encode(&frame, &mut deflater) else {
                break;
            };
            if write.write_all(&bytes).await.is_err() || write.flush().await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    });
    tokio::spawn(async move {
        let mut inflater = Inflater::default();
        let mut open: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
        loop {
            let frame = match read_frame(&mut read, &mut inflater).await {
                Ok(Some(frame)) => frame,
                Ok(None) | Err(_) => break,
            };
            match frame {
                Frame::SynStream {
                    stream,
                    fin,
                    headers,
                    ..
                } => {
                    let reply = Frame::SynReply {
                        stream,
                        fin: false,
                        headers: Headers::default(),
                    };
                    if out_tx.send(Out::Frame(reply)).await.is_err() {
                        break;
                    }
                    let (data_tx, data_rx) = mpsc::channel(16);
                    if !fin {
                        open.insert(stream, data_tx);
                    }
                    let new = Stream {
                        id: stream,
                        headers,
                        rx: data_rx,
                        writer: StreamWriter {
                            id: stream,
                            tx: out_tx.clone(),
                        },
                    };
                    if let Err(refused) = streams_tx.send(new).await {
                        let frame = Frame::RstStream {
                            stream: refused.0.id,
                            status: STATUS_REFUSED,
                        };
                        let _ = out_tx.send(Out::Frame(frame)).await;
                    }
                }
                Frame::Data { stream, fin, data } => {
                    if let Some(tx) = open.get(&stream) {
                        // A reader that went away just loses the data.
                        if !data.is_empty() && tx.send(data).await.is_err() {
                            open.remove(&stream);
                        }
                    }
                    if fin {
                        open.remove(&stream);
                    }
                }
                Frame::Headers { stream, fin, .. } => {
                    if fin {
                        open.remove(&stream);
                    }
                }
                Frame::RstStream { stream, .. } => {
                    open.remove(&stream);
                }
                Frame::Ping(id) => {
                    if out_tx.send(Out::Frame(Frame::Ping(id))).await.is_err() {
                        break;
                    }
                }
                Frame::GoAway { .. } => break,
                Frame::SynReply { .. } | Frame::Settings | Frame::WindowUpdate { .. } => {}
            }
        }
    });
    streams_rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        Headers(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn roundtrip(frames: &[Frame]) -> Vec<Frame> {
        let (mut deflater, mut inflater) = (Deflater::default(), Inflater::default());
        frames
            .iter()
            .map(|f| {
                let bytes = encode(f, &mut deflater).unwrap();
                let head: [u8; 8] = bytes[..8].try_into().unwrap();
                decode(head, &bytes[8..], &mut inflater).unwrap()
            })
            .collect()
    }

    #[test]
    fn frames_survive_encoding_with_one_compression_context_per_direction() {
        let frames = vec![
            Frame::SynStream {
                stream: 1,
                associated: 0,
                priority: 0,
                fin: false,
                headers: headers(&[("streamtype", "error")]),
            },
            Frame::SynStream {
                stream: 3,
                associated: 0,
                priority: 0,
                fin: true,
                headers: headers(&[("streamtype", "data"), ("port", "2379"), ("requestid", "0")]),
            },
            Frame::SynReply {
                stream: 3,
                fin: false,
                headers: Headers::default(),
            },
            Frame::Data {
                stream: 3,
                fin: true,
                data: Bytes::from_static(b"hello"),
            },
            Frame::RstStream {
                stream: 5,
                status: STATUS_CANCEL,
            },
            Frame::Ping(7),
            Frame::GoAway {
                last_good: 3,
                status: 0,
            },
            Frame::WindowUpdate {
                stream: 1,
                delta: 65536,
            },
        ];
        assert_eq!(roundtrip(&frames), frames);
    }

    #[test]
    fn header_names_are_matched_case_insensitively_and_multi_values_split() {
        let h = headers(&[("streamtype", "stdout"), ("x-multi", "a\0b")]);
        assert_eq!(h.get("streamType"), Some("stdout"));
        assert_eq!(h.get("X-Multi"), Some("a"));
        assert_eq!(h.get("port"), None);
    }

    #[test]
    fn syn_streams_written_by_go_spdystream_decode() {
        // Two SYN_STREAMs as moby/spdystream v0.5.1's framer writes them (generated with Go:
        // `WriteFrame(&spdy.SynStreamFrame{...})`): the second one's header block continues the
        // first one's zlib stream.
        let wire: &[u8] = &[
            0x80, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x29, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2, 0x62, 0x60, 0x60, 0x60,
            0x04, 0xa7, 0xb3, 0x92, 0xa2, 0xd4, 0xc4, 0x5c, 0x68, 0x51, 0xc2, 0x9a, 0x0a, 0x0a,
            0x68, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x80, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00,
            0x2f, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xa5, 0x47,
            0x0c, 0x29, 0x50, 0x29, 0x93, 0x08, 0x29, 0xb0, 0x8b, 0xc0, 0x79, 0xc3, 0xc8, 0xd8,
            0xdc, 0x92, 0x81, 0x81, 0x81, 0xb3, 0x08, 0x12, 0xc1, 0x99, 0xa0, 0x84, 0xcf, 0x68,
            0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
        ];
        let mut inflater = Inflater::default();
        let mut rest = wire;
        let mut frames = Vec::new();
        while !rest.is_empty() {
            let head: [u8; 8] = rest[..8].try_into().unwrap();
            let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
            frames.push(decode(head, &rest[8..8 + len], &mut inflater).unwrap());
            rest = &rest[8 + len..];
        }
        let [Frame::SynStream {
            stream: 1,
            headers: first,
            ..
        }, Frame::SynStream {
            stream: 3,
            headers: second,
            ..
        }] = &frames[..]
        else {
            panic!("not two SYN_STREAMs 1 and 3: {frames:?}");
        };
        assert_eq!(first.get("streamType"), Some("error"));
        assert_eq!(second.get("streamType"), Some("data"));
        assert_eq!(second.get("port"), Some("2379"));
        assert_eq!(second.get("requestID"), Some("0"));
    }

    #[tokio::test]
    async fn session_replies_to_streams_and_delivers_data_until_fin() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let mut streams = serve(server);
        let (mut cr, mut cw) = tokio::io::split(client);
        let mut deflater = Deflater::default();
        let open = Frame::SynStream {
            stream: 1,
            associated: 0,
            priority: 0,
            fin: false,
            headers: headers(&[("streamtype", "stdin")]),
        };
        for f in [
            open,
            Frame::Data {
                stream: 1,
                fin: true,
                data: Bytes::from_static(b"input"),
            },
        ] {
            cw.write_all(&encode(&f, &mut deflater).unwrap())
                .await
                .unwrap();
        }
        let mut stream = streams.recv().await.unwrap();
        assert_eq!(stream.headers.get("streamtype"), Some("stdin"));
        assert_eq!(
            stream.rx.recv().await.unwrap(),
            Bytes::from_static(b"input")
        );
        assert!(stream.rx.recv().await.is_none(), "FIN ends the stream");
        stream.writer.send(b"output").await;
        stream.writer.close().await;
        let mut inflater = Inflater::default();
        let reply = read_frame(&mut cr, &mut inflater).await.unwrap().unwrap();
        assert!(
            matches!(reply, Frame::SynReply { stream: 1, .. }),
            "{reply:?}"
        );
        let data = read_frame(&mut cr, &mut inflater).await.unwrap().unwrap();
        assert_eq!(
            data,
            Frame::Data {
                stream: 1,
                fin: false,
                data: Bytes::from_static(b"output")
            }
        );
        let fin = read_frame(&mut cr, &mut inflater).await.unwrap().unwrap();
        assert!(matches!(fin, Frame::Data { fin: true, .. }), "{fin:?}");
    }
}
