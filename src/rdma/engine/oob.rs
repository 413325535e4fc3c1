//! Two-node write-bw's out-of-band channel: one TCP connection carrying framed JSON messages,
//! like perftest's exchange of QP numbers, GIDs, addresses and rkeys before the RDMA traffic.
//!
//! Frame: b"GDWB", protocol version (u16 BE), body length (u32 BE, at most MAX_BODY), JSON body.
//!
//! Handshake (challenge-response; the token never crosses the wire):
//!
//! 1. client -> server `Hello { nonce }`: 32 fresh random bytes.
//! 2. server -> client `Challenge { nonce }`: 32 fresh random bytes, new for every connection.
//! 3. client -> server `Offer { params, proof }`: `params` is the JSON text of what the server
//!    will rely on (QP count, largest message, the client's endpoint and port facts); `proof`
//!    is HMAC-SHA256 keyed by the token over the transcript: a domain label, VERSION, the role
//!    "client", both nonces and the params text exactly as sent.
//! 4. The server verifies the proof in constant time (hmac's `verify_slice`). A wrong proof is
//!    answered with `Refused` and the connection closed: one attempt per connection. Only then
//!    does it register its buffer and answer `Welcome { params, proof }` with its own
//!    endpoint/facts and a proof with role "server" over both nonces, the client's params and
//!    its own, which the client verifies before writing anything.
//!
//! A recorded exchange cannot be replayed (the server's nonce is new), a client's proof cannot
//! be reflected as the server's (the role label differs), and altered parameters fail the
//! proof. Traffic after the handshake is not encrypted or authenticated per message: a party
//! that can rewrite the TCP stream on the path can still disturb a run (not read the token).
//! The whole handshake has one deadline, so a client that connects and sends nothing, or
//! dribbles bytes, is dropped when it passes. Every read and write has a deadline.
//! Nothing here touches verbs.

use super::side::Endpoint;
use crate::report::rdma::write_bw::PortFacts;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

pub const MAGIC: &[u8; 4] = b"GDWB";
/// 2: challenge-response handshake (1 sent the token in clear).
pub const VERSION: u16 = 2;
pub const MAX_BODY: u32 = 64 * 1024;
/// perftest's default port is 18515; ours is next to it so both can run side by side.
pub const DEFAULT_PORT: u16 = 18516;
/// Bytes of each side's nonce.
pub const NONCE_BYTES: usize = crate::handshake::NONCE_BYTES;
/// Domain label at the head of every transcript.
const DOMAIN: &[u8] = b"gpudoctor write-bw handshake";
/// This channel's frame and transcript constants (`crate::handshake`).
const PROTOCOL: handshake::Protocol = handshake::Protocol {
    magic: MAGIC,
    version: VERSION,
    domain: DOMAIN,
    max_body: MAX_BODY,
};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "kebab-case")]
pub enum Msg {
    /// Client, first: its nonce (hex).
    Hello {
        nonce: String,
    },
    /// Server: its nonce (hex), fresh for this connection.
    Challenge {
        nonce: String,
    },
    /// Client: `params` is the JSON text of `ClientParams`; `proof` HMAC-SHA256 (hex).
    Offer {
        params: String,
        proof: String,
    },
    /// Server: `params` is the JSON text of `ServerParams`; `proof` HMAC-SHA256 (hex).
    Welcome {
        params: String,
        proof: String,
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

/// What the server relies on from the client (covered by the client's proof).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientParams {
    pub qps: u32,
    pub max_size: u64,
    pub endpoint: Endpoint,
    pub facts: PortFacts,
}

/// What the client relies on from the server (covered by the server's proof).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerParams {
    pub endpoint: Endpoint,
    pub facts: PortFacts,
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
    /// The peer's HMAC does not match the transcript: it holds another token, or it replays
    /// or reflects a recorded exchange, or the parameters were altered on the way.
    #[error(
        "the {0}'s proof does not match: a wrong token, or a replayed, reflected or altered exchange"
    )]
    BadProof(&'static str),
    #[error("cannot draw a random nonce: {0}")]
    Random(String),
}

/// A byte stream whose reads and writes can be bounded in time: a TCP socket, or an in-memory
/// script (tests, fuzzing).
pub trait Wire: Read + Write {
    /// Bound the next read or write to `left` (never zero).
    fn limit(&mut self, left: Duration) -> std::io::Result<()>;
}

impl Wire for TcpStream {
    fn limit(&mut self, left: Duration) -> std::io::Result<()> {
        let left = left.max(Duration::from_millis(1));
        self.set_read_timeout(Some(left))?;
        self.set_write_timeout(Some(left))
    }
}

/// An in-memory peer: reads come from `input`, writes collect in `output`. For tests and the
/// fuzz target of the serving side; time bounds do not apply to it.
#[doc(hidden)]
pub struct Script {
    pub input: std::io::Cursor<Vec<u8>>,
    pub output: Vec<u8>,
}

impl Script {
    pub fn new(input: Vec<u8>) -> Script {
        Script {
            input: std::io::Cursor::new(input),
            output: Vec::new(),
        }
    }
}

impl Read for Script {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Script {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.output.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Wire for Script {
    fn limit(&mut self, _left: Duration) -> std::io::Result<()> {
        Ok(())
    }
}

pub struct Channel<S: Wire = TcpStream> {
    stream: S,
    pub peer: String,
    /// Bound on each send.
    timeout: Duration,
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

impl Channel<TcpStream> {
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
                    Ok(s) => return Channel::tcp(s, with_port, timeout),
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

    pub fn tcp(stream: TcpStream, peer: String, timeout: Duration) -> Result<Channel, OobError> {
        stream
            .set_nodelay(true)
            .map_err(|e| io_err("socket setup", e))?;
        Ok(Channel::new(stream, peer, timeout))
    }
}

impl<S: Wire> Channel<S> {
    pub fn new(stream: S, peer: String, timeout: Duration) -> Channel<S> {
        Channel {
            stream,
            peer,
            timeout,
        }
    }

    pub fn into_inner(self) -> S {
        self.stream
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
            .limit(self.timeout)
            .map_err(|e| io_err("socket setup", e))?;
        self.stream
            .write_all(&frame)
            .map_err(|e| io_err("sending", e))
    }

    /// Read one message within `timeout`; `what` names what we are waiting for, for the error.
    pub fn recv(&mut self, what: &'static str, timeout: Duration) -> Result<Msg, OobError> {
        self.recv_by(what, Instant::now() + timeout, timeout)
    }

    /// Read one message, all of it before `deadline` however the bytes trickle in; `budget`
    /// is what the error reports as the time allowed.
    pub fn recv_by(
        &mut self,
        what: &'static str,
        deadline: Instant,
        budget: Duration,
    ) -> Result<Msg, OobError> {
        let mut head = [0u8; 10];
        self.read_by(&mut head, what, deadline, budget)?;
        let body = decode_head(&head)?;
        let mut buf = vec![0u8; body as usize];
        self.read_by(&mut buf, what, deadline, budget)?;
        decode_body(&buf)
    }

    fn read_by(
        &mut self,
        mut buf: &mut [u8],
        what: &'static str,
        deadline: Instant,
        budget: Duration,
    ) -> Result<(), OobError> {
        let late = || OobError::Timeout {
            what,
            timeout: budget,
        };
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late());
            }
            self.stream
                .limit(left)
                .map_err(|e| io_err("socket setup", e))?;
            match self.stream.read(buf) {
                Ok(0) => return Err(OobError::Closed(what)),
                Ok(n) => buf = &mut buf[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(match io_err(what, e) {
                        OobError::Timeout { .. } => late(),
                        other => other,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Parse one frame's body.
pub fn decode_body(buf: &[u8]) -> Result<Msg, OobError> {
    serde_json::from_slice(buf).map_err(|e| OobError::Malformed(e.to_string()))
}

/// "host" -> "host:18516"; "host:port", "1.2.3.4:port", `"[v6]:port"` stay; a bare IPv6 gets brackets.
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
    PROTOCOL.decode_head(head).map_err(|e| match e {
        HeadError::BadMagic => OobError::BadMagic,
        HeadError::Version(v) => OobError::Version { theirs: v },
        HeadError::TooLarge(n) => OobError::TooLarge(n),
    })
}

/// Listen on `addr` and accept one client within `timeout`. The listener is closed on return:
/// nobody else can connect while (or after) this client is served.
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
                return Channel::tcp(s, peer.to_string(), timeout);
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

use crate::handshake::{self, HeadError, Nonce, hex};

fn fresh_nonce() -> Result<Nonce, OobError> {
    handshake::fresh_nonce().map_err(OobError::Random)
}

fn nonce_from(s: &str) -> Result<Nonce, OobError> {
    handshake::nonce_from(s).map_err(OobError::Malformed)
}

fn transcript_mac(
    token: &str,
    role: &str,
    client: &Nonce,
    server: &Nonce,
    params: &[&str],
) -> Hmac<Sha256> {
    PROTOCOL.transcript_mac(token, role, client, server, params)
}

fn check_proof(
    token: &str,
    role: &'static str,
    client: &Nonce,
    server: &Nonce,
    params: &[&str],
    proof: &str,
) -> Result<(), OobError> {
    match PROTOCOL.proof_matches(token, role, client, server, params, proof) {
        Ok(true) => Ok(()),
        Ok(false) => Err(OobError::BadProof(role)),
        Err(e) => Err(OobError::Malformed(e)),
    }
}

fn unexpected(want: &'static str, m: Msg) -> OobError {
    match m {
        Msg::Refused { reason } => OobError::Refused(reason),
        other => OobError::Unexpected {
            want,
            got: format!("{other:?}"),
        },
    }
}

/// A client whose proof the server has checked, and what it asked for.
#[derive(Debug)]
pub struct Verified {
    pub client: ClientParams,
    client_text: String,
    client_nonce: Nonce,
    server_nonce: Nonce,
}

/// Serving side, steps 1 to 4: everything must arrive before `deadline`. On a wrong proof the
/// client is told `Refused` and the caller must drop the connection (one attempt each).
pub fn server_handshake<S: Wire>(
    chan: &mut Channel<S>,
    token: &str,
    deadline: Instant,
    budget: Duration,
) -> Result<Verified, OobError> {
    let client_nonce = match chan.recv_by("hello", deadline, budget)? {
        Msg::Hello { nonce } => nonce_from(&nonce)?,
        other => return Err(unexpected("hello", other)),
    };
    let server_nonce = fresh_nonce()?;
    chan.send(&Msg::Challenge {
        nonce: hex(&server_nonce),
    })?;
    let (params, proof) = match chan.recv_by("offer", deadline, budget)? {
        Msg::Offer { params, proof } => (params, proof),
        other => return Err(unexpected("offer", other)),
    };
    if let Err(e) = check_proof(
        token,
        "client",
        &client_nonce,
        &server_nonce,
        &[&params],
        &proof,
    ) {
        let _ = chan.send(&Msg::Refused {
            reason: "wrong token or replayed exchange".into(),
        });
        return Err(e);
    }
    let client: ClientParams =
        serde_json::from_str(&params).map_err(|e| OobError::Malformed(e.to_string()))?;
    Ok(Verified {
        client,
        client_text: params,
        client_nonce,
        server_nonce,
    })
}

/// Serving side, the last step: our endpoint and facts with our proof.
pub fn server_welcome<S: Wire>(
    chan: &mut Channel<S>,
    token: &str,
    v: &Verified,
    ours: &ServerParams,
) -> Result<(), OobError> {
    let params = serde_json::to_string(ours).map_err(|e| OobError::Malformed(e.to_string()))?;
    let proof = transcript_mac(
        token,
        "server",
        &v.client_nonce,
        &v.server_nonce,
        &[&v.client_text, &params],
    )
    .finalize()
    .into_bytes();
    chan.send(&Msg::Welcome {
        params,
        proof: hex(&proof),
    })
}

/// Client side of the whole handshake, before `deadline`: the server's endpoint and facts once
/// its proof checks out.
pub fn client_handshake<S: Wire>(
    chan: &mut Channel<S>,
    token: &str,
    ours: &ClientParams,
    deadline: Instant,
    budget: Duration,
) -> Result<ServerParams, OobError> {
    let client_nonce = fresh_nonce()?;
    chan.send(&Msg::Hello {
        nonce: hex(&client_nonce),
    })?;
    let server_nonce = match chan.recv_by("the peer's challenge", deadline, budget)? {
        Msg::Challenge { nonce } => nonce_from(&nonce)?,
        other => return Err(unexpected("challenge", other)),
    };
    let params = serde_json::to_string(ours).map_err(|e| OobError::Malformed(e.to_string()))?;
    let proof = transcript_mac(token, "client", &client_nonce, &server_nonce, &[&params])
        .finalize()
        .into_bytes();
    chan.send(&Msg::Offer {
        params: params.clone(),
        proof: hex(&proof),
    })?;
    let (theirs, proof) = match chan.recv_by("the peer's endpoint", deadline, budget)? {
        Msg::Welcome { params, proof } => (params, proof),
        other => return Err(unexpected("welcome", other)),
    };
    check_proof(
        token,
        "server",
        &client_nonce,
        &server_nonce,
        &[&params, &theirs],
        &proof,
    )?;
    serde_json::from_str(&theirs).map_err(|e| OobError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::rdma::write_bw::Addressing;
    use std::sync::{Arc, Mutex};

    const T: Duration = Duration::from_secs(5);

    fn client_params() -> ClientParams {
        ClientParams {
            qps: 2,
            max_size: 65536,
            endpoint: Endpoint {
                qpns: vec![17, 18],
                psn: 0x1000,
                lid: 0,
                gid: Some("fe80:0000:0000:0000:0000:0000:0000:0001".into()),
                mtu: 1024,
                addr: 0x7f00_0000,
                rkey: 0x1234,
                len: 65536,
            },
            facts: facts("rxe_a"),
        }
    }

    fn facts(device: &str) -> PortFacts {
        PortFacts {
            device: device.into(),
            port: 1,
            state: "ACTIVE".into(),
            link_layer: "Ethernet".into(),
            mtu_bytes: 1024,
            addressing: Addressing::Lid { lid: 3 },
            software_device: Some("rxe".into()),
            line_rate: None,
            line_rate_unknown: None,
        }
    }

    fn server_params() -> ServerParams {
        ServerParams {
            endpoint: Endpoint {
                rkey: 0x9999,
                ..client_params().endpoint
            },
            facts: facts("rxe_b"),
        }
    }

    /// A TCP stream that keeps a copy of everything written through it.
    struct Recording(TcpStream, Arc<Mutex<Vec<u8>>>);
    impl Read for Recording {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(b)
        }
    }
    impl Write for Recording {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = self.0.write(b)?;
            self.1.lock().unwrap().extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.0.flush()
        }
    }
    impl Wire for Recording {
        fn limit(&mut self, left: Duration) -> std::io::Result<()> {
            self.0.limit(left)
        }
    }

    /// A server on a fresh port running the handshake (and the welcome if it succeeds) with
    /// `token` and a handshake deadline of `budget`; joined: what it concluded, and whether
    /// the client's socket saw the server close it.
    fn server(
        token: &'static str,
        budget: Duration,
    ) -> (String, std::thread::JoinHandle<Result<Verified, OobError>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (s, p) = l.accept().unwrap();
            let mut c = Channel::tcp(s, p.to_string(), T).unwrap();
            let v = server_handshake(&mut c, token, Instant::now() + budget, budget)?;
            server_welcome(&mut c, token, &v, &server_params())?;
            Ok(v)
        });
        (addr, t)
    }

    fn client(addr: &str, token: &str) -> Result<ServerParams, OobError> {
        let mut c = Channel::connect(addr, T).unwrap();
        client_handshake(&mut c, token, &client_params(), Instant::now() + T, T)
    }

    #[test]
    fn head_checks() {
        let mut h = *b"GDWB\x00\x02\x00\x00\x00\x10";
        assert_eq!(decode_head(&h).unwrap(), 16);
        h[5] = 1;
        assert!(matches!(
            decode_head(&h),
            Err(OobError::Version { theirs: 1 })
        ));
        let h = *b"GDWB\x00\x02\xff\xff\xff\xff";
        assert!(matches!(decode_head(&h), Err(OobError::TooLarge(_))));
        let h = *b"HTTP\x00\x02\x00\x00\x00\x10";
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
    fn handshake_agrees_and_never_sends_the_token() {
        let (addr, t) = server("s3cret-token", T);
        let rec = Arc::new(Mutex::new(Vec::new()));
        let s = TcpStream::connect(&addr).unwrap();
        let mut c = Channel::new(Recording(s, rec.clone()), addr.clone(), T);
        let got = client_handshake(
            &mut c,
            "s3cret-token",
            &client_params(),
            Instant::now() + T,
            T,
        )
        .unwrap();
        assert_eq!(got.endpoint.rkey, 0x9999);
        assert_eq!(got.facts.device, "rxe_b");
        let v = t.join().unwrap().unwrap();
        assert_eq!(v.client.qps, 2);
        assert_eq!(v.client.endpoint, client_params().endpoint);
        let sent = rec.lock().unwrap().clone();
        assert!(!sent.is_empty());
        assert!(
            !sent.windows(6).any(|w| w == b"s3cret"),
            "token on the wire"
        );
    }

    #[test]
    fn wrong_token_is_refused_on_both_sides() {
        let (addr, t) = server("right", T);
        let e = client(&addr, "wrong").unwrap_err().to_string();
        assert_eq!(e, "refused: wrong token or replayed exchange");
        let e = t.join().unwrap().unwrap_err().to_string();
        assert!(e.starts_with("the client's proof does not match"), "{e}");
    }

    #[test]
    fn a_recorded_exchange_cannot_be_replayed() {
        // Record an honest client's bytes against one server ...
        let (addr, t) = server("tok", T);
        let rec = Arc::new(Mutex::new(Vec::new()));
        let s = TcpStream::connect(&addr).unwrap();
        let mut c = Channel::new(Recording(s, rec.clone()), addr, T);
        client_handshake(&mut c, "tok", &client_params(), Instant::now() + T, T).unwrap();
        t.join().unwrap().unwrap();
        let recorded = rec.lock().unwrap().clone();
        // ... and play them to a new one with the same token: its nonce is new.
        let (addr, t) = server("tok", T);
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(&recorded).unwrap();
        let e = t.join().unwrap().unwrap_err();
        assert!(matches!(e, OobError::BadProof("client")), "{e}");
        let mut back = Vec::new();
        s.read_to_end(&mut back).unwrap();
        let mut peer = Channel::new(Script::new(back), "s".into(), T);
        assert!(matches!(peer.recv("c", T).unwrap(), Msg::Challenge { .. }));
        assert!(matches!(peer.recv("r", T).unwrap(), Msg::Refused { .. }));
    }

    #[test]
    fn a_reflected_client_proof_is_not_a_server_proof() {
        // A fake server that knows no token echoes the client's own offer back as its welcome.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (s, p) = l.accept().unwrap();
            let mut c = Channel::tcp(s, p.to_string(), T).unwrap();
            let Msg::Hello { nonce } = c.recv("hello", T).unwrap() else {
                panic!("no hello")
            };
            // Its challenge is the client's nonce, so both transcripts share the nonces.
            c.send(&Msg::Challenge { nonce }).unwrap();
            let Msg::Offer { params, proof } = c.recv("offer", T).unwrap() else {
                panic!("no offer")
            };
            c.send(&Msg::Welcome { params, proof }).unwrap();
        });
        let e = client(&addr, "tok").unwrap_err();
        assert!(matches!(e, OobError::BadProof("server")), "{e}");
        t.join().unwrap();
        // And the labels alone make the two MACs differ.
        let n = [7u8; NONCE_BYTES];
        assert_ne!(
            transcript_mac("k", "client", &n, &n, &["p"])
                .finalize()
                .into_bytes(),
            transcript_mac("k", "server", &n, &n, &["p"])
                .finalize()
                .into_bytes()
        );
    }

    #[test]
    fn altered_parameters_fail_the_proof() {
        // Server side over a script: a valid proof for other params than those sent.
        let mut chan = Channel::new(Script::new(Vec::new()), "x".into(), T);
        let cn = [1u8; NONCE_BYTES];
        let sn = [2u8; NONCE_BYTES];
        let honest = serde_json::to_string(&client_params()).unwrap();
        let proof = hex(&transcript_mac("k", "client", &cn, &sn, &[&honest])
            .finalize()
            .into_bytes());
        let altered = honest.replace("\"qps\":2", "\"qps\":64");
        assert_ne!(altered, honest);
        assert!(check_proof("k", "client", &cn, &sn, &[&honest], &proof).is_ok());
        assert!(matches!(
            check_proof("k", "client", &cn, &sn, &[&altered], &proof),
            Err(OobError::BadProof("client"))
        ));
        assert!(matches!(
            check_proof("k", "client", &cn, &sn, &[&honest], "zz"),
            Err(OobError::Malformed(_))
        ));
        chan.send(&Msg::Bye).unwrap();
    }

    fn frame(body: &[u8], len: u32) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&VERSION.to_be_bytes());
        f.extend_from_slice(&len.to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    fn serve_script(input: Vec<u8>) -> OobError {
        let mut c = Channel::new(Script::new(input), "script".into(), T);
        server_handshake(&mut c, "tok", Instant::now() + T, T).unwrap_err()
    }

    #[test]
    fn hostile_frames_are_clear_errors() {
        let hello = br#"{"msg":"hello","nonce":"00"}"#;
        // Truncated: the header promises more than arrives.
        let e = serve_script(frame(&hello[..10], hello.len() as u32));
        assert!(matches!(e, OobError::Closed("hello")), "{e}");
        let e = serve_script(b"GDWB\x00".to_vec());
        assert!(matches!(e, OobError::Closed("hello")), "{e}");
        // Oversized: refused from the header, before any allocation.
        let e = serve_script(frame(b"", u32::MAX));
        assert_eq!(
            e.to_string(),
            format!("message of {} bytes exceeds the 65536-byte limit", u32::MAX)
        );
        // Garbage magic.
        let e = serve_script(b"GET / HTTP/1.1\r\n\r\n".to_vec());
        assert!(matches!(e, OobError::BadMagic), "{e}");
        // The old protocol (token in clear) is told apart.
        let mut old = frame(br#"{"msg":"hello","token":"x"}"#, 27);
        old[5] = 1;
        assert!(matches!(serve_script(old), OobError::Version { theirs: 1 }));
        // A nonce of the wrong size, or not hex, or a message out of turn.
        let e = serve_script(frame(hello, hello.len() as u32));
        assert_eq!(e.to_string(), "malformed message: nonce is not 32 bytes");
        let b = br#"{"msg":"hello","nonce":"xyz!"}"#;
        assert!(matches!(
            serve_script(frame(b, b.len() as u32)),
            OobError::Malformed(_)
        ));
        let b = br#"{"msg":"bye"}"#;
        assert!(matches!(
            serve_script(frame(b, b.len() as u32)),
            OobError::Unexpected { want: "hello", .. }
        ));
        assert!(matches!(
            serve_script(frame(b"{", 1)),
            OobError::Malformed(_)
        ));
    }

    #[test]
    fn a_silent_or_dribbling_client_is_dropped_at_the_deadline() {
        let budget = Duration::from_millis(400);
        // Silent: connects and sends nothing.
        let (addr, t) = server("tok", budget);
        let mut s = TcpStream::connect(&addr).unwrap();
        let start = Instant::now();
        let e = t.join().unwrap().unwrap_err();
        assert_eq!(
            e.to_string(),
            "no answer within 400ms while waiting for hello"
        );
        assert!(start.elapsed() < budget * 4, "{:?}", start.elapsed());
        // The server freed the socket: the client reads end-of-stream.
        s.set_read_timeout(Some(T)).unwrap();
        assert_eq!(s.read(&mut [0u8; 8]).unwrap(), 0);
        // Dribbling: one byte of a valid header every 100 ms never completes in time, though
        // each single read would be well inside a per-read timeout.
        let (addr, t) = server("tok", budget);
        let mut s = TcpStream::connect(&addr).unwrap();
        let start = Instant::now();
        let dribble = std::thread::spawn(move || {
            for b in frame(&[b' '; 64], 64) {
                if s.write_all(&[b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let e = t.join().unwrap().unwrap_err();
        assert!(matches!(e, OobError::Timeout { what: "hello", .. }), "{e}");
        assert!(start.elapsed() < budget * 4, "{:?}", start.elapsed());
        dribble.join().unwrap();
    }

    #[test]
    fn round_trip_over_tcp() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (s, p) = l.accept().unwrap();
            let mut c = Channel::tcp(s, p.to_string(), T).unwrap();
            let m = c.recv("prepare", T).unwrap();
            assert!(matches!(m, Msg::Prepare { size: 64, .. }));
            c.send(&Msg::Prepared).unwrap();
        });
        let mut c = Channel::connect(&addr, T).unwrap();
        c.send(&Msg::Prepare {
            size: 64,
            iterations: 1,
        })
        .unwrap();
        assert!(matches!(c.recv("prepared", T).unwrap(), Msg::Prepared));
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
