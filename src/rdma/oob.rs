//! Two-node write-bw's out-of-band channel: one TCP connection carrying framed JSON messages,
//! like perftest's exchange of QP numbers, GIDs, addresses and rkeys before the RDMA traffic.
//!
//! Frame: b"GDWB", protocol version (u16 BE), body length (u32 BE, at most MAX_BODY), JSON body.
//! The client's first message carries the token given to both sides; the server compares it in
//! constant time and refuses anything else. The token keeps two unrelated runs (or a stray
//! client) from writing into each other's buffers; it is sent in clear text, so it is not a
//! defence against someone on the path. Every read and write has a deadline.
//! Nothing here touches verbs.

use super::engine::Endpoint;
use super::write_bw::PortFacts;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

pub const MAGIC: &[u8; 4] = b"GDWB";
pub const VERSION: u16 = 1;
pub const MAX_BODY: u32 = 64 * 1024;
/// perftest's default port is 18515; ours is next to it so both can run side by side.
pub const DEFAULT_PORT: u16 = 18516;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "kebab-case")]
pub enum Msg {
    Hello {
        token: String,
        qps: u32,
        max_size: u64,
        endpoint: Endpoint,
        facts: PortFacts,
    },
    Welcome {
        endpoint: Endpoint,
        facts: PortFacts,
    },
    Refused {
        reason: String,
    },
    /// Client: "zero the first `size` B of your buffer; I am about to write them
    /// `iterations` times" (the server's deadline for the next message follows from it).
    Prepare {
        size: u64,
        iterations: u64,
    },
    Prepared,
    /// Client: "check `size` B of your buffer against pattern `seed`".
    Check {
        size: u64,
        seed: u64,
    },
    Checked {
        first_mismatch: Option<u64>,
    },
    Bye,
}

#[derive(Debug, thiserror::Error)]
pub enum OobError {
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot resolve {addr}: {reason}")]
    Resolve { addr: String, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no client connected within {0:?}")]
    AcceptTimeout(Duration),
    #[error("no answer within {timeout:?} while waiting for {what}")]
    Timeout {
        what: &'static str,
        timeout: Duration,
    },
    #[error("connection closed while waiting for {0}")]
    Closed(&'static str),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("not a gpudoctor write-bw peer (bad magic)")]
    BadMagic,
    #[error("protocol version {theirs}, this side speaks {VERSION}")]
    Version { theirs: u16 },
    #[error("message of {0} bytes exceeds the {MAX_BODY}-byte limit")]
    TooLarge(u32),
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("unexpected message while waiting for {want}: {got}")]
    Unexpected { want: &'static str, got: String },
    #[error("refused: {0}")]
    Refused(String),
}

pub struct Channel {
    stream: TcpStream,
    pub peer: String,
}

fn io_err(what: &'static str, e: std::io::Error) -> OobError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => OobError::Timeout {
            what,
            timeout: Duration::ZERO,
        },
        std::io::ErrorKind::UnexpectedEof => OobError::Closed(what),
        _ => OobError::Io { what, source: e },
    }
}

impl Channel {
    pub fn connect(addr: &str, timeout: Duration) -> Result<Channel, OobError> {
        let with_port = with_default_port(addr);
        let addrs: Vec<SocketAddr> = with_port
            .to_socket_addrs()
            .map_err(|e| OobError::Resolve {
                addr: with_port.clone(),
                reason: e.to_string(),
            })?
            .collect();
        // A server that is still starting refuses connections: retry those until the deadline.
        let deadline = Instant::now() + timeout;
        loop {
            let mut last = None;
            for a in &addrs {
                let left = deadline.saturating_duration_since(Instant::now());
                match TcpStream::connect_timeout(a, left.max(Duration::from_millis(10))) {
                    Ok(s) => return Channel::new(s, with_port, timeout),
                    Err(e) => last = Some(e),
                }
            }
            let e = last.unwrap_or_else(|| std::io::Error::other("no address"));
            if e.kind() != std::io::ErrorKind::ConnectionRefused || Instant::now() >= deadline {
                return Err(OobError::Connect {
                    addr: with_port,
                    source: e,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn new(stream: TcpStream, peer: String, timeout: Duration) -> Result<Channel, OobError> {
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| io_err("socket setup", e))?;
        Ok(Channel { stream, peer })
    }

    pub fn send(&mut self, m: &Msg) -> Result<(), OobError> {
        let body = serde_json::to_vec(m).map_err(|e| OobError::Malformed(e.to_string()))?;
        let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
        if len > MAX_BODY {
            return Err(OobError::TooLarge(len));
        }
        let mut frame = Vec::with_capacity(10 + body.len());
        frame.extend_from_slice(MAGIC);
        frame.extend_from_slice(&VERSION.to_be_bytes());
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(&body);
        self.stream
            .write_all(&frame)
            .map_err(|e| io_err("sending", e))
    }

    /// Read one message; `what` names what we are waiting for, for the error.
    pub fn recv(&mut self, what: &'static str, timeout: Duration) -> Result<Msg, OobError> {
        let fix = |e: OobError| match e {
            OobError::Timeout { what, .. } => OobError::Timeout { what, timeout },
            other => other,
        };
        let mut head = [0u8; 10];
        self.stream
            .read_exact(&mut head)
            .map_err(|e| fix(io_err(what, e)))?;
        let body = decode_head(&head)?;
        let mut buf = vec![0u8; body as usize];
        self.stream
            .read_exact(&mut buf)
            .map_err(|e| fix(io_err(what, e)))?;
        serde_json::from_slice(&buf).map_err(|e| OobError::Malformed(e.to_string()))
    }
}

/// "host" -> "host:18516"; "host:port", "1.2.3.4:port", "[v6]:port" stay; a bare IPv6 gets brackets.
pub fn with_default_port(addr: &str) -> String {
    if addr.parse::<SocketAddr>().is_ok() {
        return addr.to_string();
    }
    if addr.parse::<std::net::Ipv6Addr>().is_ok() {
        return format!("[{addr}]:{DEFAULT_PORT}");
    }
    match addr.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !h.contains(':') && p.parse::<u16>().is_ok() => {
            addr.to_string()
        }
        _ => format!("{addr}:{DEFAULT_PORT}"),
    }
}

/// Check a frame header; the body length it announces.
pub fn decode_head(head: &[u8; 10]) -> Result<u32, OobError> {
    if &head[..4] != MAGIC {
        return Err(OobError::BadMagic);
    }
    let v = u16::from_be_bytes([head[4], head[5]]);
    if v != VERSION {
        return Err(OobError::Version { theirs: v });
    }
    let len = u32::from_be_bytes([head[6], head[7], head[8], head[9]]);
    if len > MAX_BODY {
        return Err(OobError::TooLarge(len));
    }
    Ok(len)
}

/// Listen on `addr` and accept one client within `timeout`.
pub fn accept_one(addr: &str, timeout: Duration) -> Result<Channel, OobError> {
    let listener = TcpListener::bind(addr).map_err(|e| OobError::Listen {
        addr: addr.to_string(),
        source: e,
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| io_err("listen", e))?;
    let deadline = Instant::now() + timeout;
    loop {
        match listener.accept() {
            Ok((s, peer)) => {
                s.set_nonblocking(false).map_err(|e| io_err("accept", e))?;
                return Channel::new(s, peer.to_string(), timeout);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(OobError::AcceptTimeout(timeout));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(io_err("accept", e)),
        }
    }
}

/// Constant-time comparison, so the time to refuse says nothing about how much matched.
pub fn token_matches(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_checks() {
        let mut h = *b"GDWB\x00\x01\x00\x00\x00\x10";
        assert_eq!(decode_head(&h).unwrap(), 16);
        h[5] = 2;
        assert!(matches!(
            decode_head(&h),
            Err(OobError::Version { theirs: 2 })
        ));
        let h = *b"GDWB\x00\x01\xff\xff\xff\xff";
        assert!(matches!(decode_head(&h), Err(OobError::TooLarge(_))));
        let h = *b"HTTP\x00\x01\x00\x00\x00\x10";
        assert!(matches!(decode_head(&h), Err(OobError::BadMagic)));
    }

    #[test]
    fn ports() {
        assert_eq!(with_default_port("node2"), "node2:18516");
        assert_eq!(with_default_port("node2:7000"), "node2:7000");
        assert_eq!(with_default_port("10.0.0.2"), "10.0.0.2:18516");
        assert_eq!(with_default_port("fe80::1"), "[fe80::1]:18516");
        assert_eq!(with_default_port("[fe80::1]:9"), "[fe80::1]:9");
    }

    #[test]
    fn tokens() {
        assert!(token_matches("s3cret", "s3cret"));
        assert!(!token_matches("s3cre", "s3cret"));
        assert!(!token_matches("s3cret!", "s3cret"));
        assert!(!token_matches("", "x"));
        assert!(token_matches("", ""));
    }

    #[test]
    fn round_trip_over_tcp() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (s, p) = l.accept().unwrap();
            let mut c = Channel::new(s, p.to_string(), Duration::from_secs(5)).unwrap();
            let m = c.recv("prepare", Duration::from_secs(5)).unwrap();
            assert!(matches!(m, Msg::Prepare { size: 64, .. }));
            c.send(&Msg::Prepared).unwrap();
        });
        let mut c = Channel::connect(&addr, Duration::from_secs(5)).unwrap();
        c.send(&Msg::Prepare {
            size: 64,
            iterations: 1,
        })
        .unwrap();
        assert!(matches!(
            c.recv("prepared", Duration::from_secs(5)).unwrap(),
            Msg::Prepared
        ));
        t.join().unwrap();
        // Nobody listening: a connect error naming the address.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let gone = l.local_addr().unwrap().to_string();
        drop(l);
        let e = Channel::connect(&gone, Duration::from_millis(300))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with(&format!("cannot connect to {gone}")), "{e}");
    }
}
