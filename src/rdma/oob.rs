//! Two-node write-bw's out-of-band channel: one TCP connection carrying framed JSON messages,
//! like perftest's exchange of QP numbers, GIDs, addresses and rkeys before the RDMA traffic.
//!
//! Frame: b"GDWB", protocol version (u16 BE), body length (u32 BE, at most MAX_BODY), JSON body.
//!
//! The handshake is a challenge-response over the token given to both sides; the token never
//! crosses the wire:
//!
//! 1. client -> server `hello {nonce}`: 32 fresh random bytes;
//! 2. server -> client `challenge {nonce}`: 32 fresh random bytes of its own;
//! 3. client -> server `params {qps, max_size, endpoint, facts}`, then `proof {mac}`:
//!    HMAC-SHA256 keyed with the token over the role ("client"), the protocol version and the
//!    transcript (every frame body of 1-3, length-prefixed, as sent);
//! 4. the server checks the proof (in constant time); on a mismatch it answers `refused` and
//!    closes: one attempt per connection. Only then does it register its buffer and answer
//!    `welcome {endpoint, facts}` and its own `proof` (role "server", transcript 1-4), which the
//!    client checks before it writes anything.
//!
//! A recorded exchange cannot be replayed (the other side's nonce is new each time), a proof
//! cannot be reflected (the role is inside the MAC), and the parameters each side acts on are
//! covered by the MAC. The whole handshake must finish within HANDSHAKE_TIMEOUT (or the
//! caller's timeout, if shorter), however slowly the peer sends: every read has a deadline for
//! the whole message, not per byte. Nothing here touches verbs.

use super::engine::Endpoint;
use super::write_bw::PortFacts;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

pub const MAGIC: &[u8; 4] = b"GDWB";
/// 2: challenge-response handshake (1 sent the token in clear).
pub const VERSION: u16 = 2;
/// The whole handshake, from accept to the server's proof.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const NONCE_BYTES: usize = 32;
pub const MAX_BODY: u32 = 64 * 1024;
/// perftest's default port is 18515; ours is next to it so both can run side by side.
pub const DEFAULT_PORT: u16 = 18516;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "kebab-case")]
pub enum Msg {
    /// Client: its nonce (hex).
    Hello {
        nonce: String,
    },
    /// Server: its nonce (hex).
    Challenge {
        nonce: String,
    },
    /// Client: what it asks of the server and how to reach its QPs.
    Params {
        qps: u32,
        max_size: u64,
        endpoint: Endpoint,
        facts: PortFacts,
    },
    /// Either side: HMAC-SHA256 (hex) over the transcript so far, keyed with the token.
    Proof {
        mac: String,
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
    /// The peer's proof did not match: it does not hold the token, or it replayed or
    /// reflected another exchange.
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("cannot make a nonce: {0}")]
    Random(String),
}

pub struct Channel {
    stream: TcpStream,
    pub peer: String,
    /// Length-prefixed frame bodies of the handshake so far (None once it is over).
    transcript: Option<Vec<u8>>,
}

/// What the client asks of the server, once it proved it holds the token.
#[derive(Debug, Clone)]
pub struct ClientParams {
    pub qps: u32,
    pub max_size: u64,
    pub endpoint: Endpoint,
    pub facts: PortFacts,
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
        Ok(Channel {
            stream,
            peer,
            transcript: None,
        })
    }

    /// Add a frame body to the transcript (proofs are not part of what they prove).
    fn record(&mut self, m: &Msg, body: &[u8]) {
        if let Some(t) = self.transcript.as_mut()
            && !matches!(m, Msg::Proof { .. })
        {
            t.extend_from_slice(&(body.len() as u32).to_be_bytes());
            t.extend_from_slice(body);
        }
    }

    /// HMAC-SHA256 over role, version and transcript, keyed with the token.
    fn mac(&self, token: &str, role: &str) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes())
            .expect("HMAC takes a key of any length");
        m.update(b"gpudoctor write-bw handshake\0");
        m.update(role.as_bytes());
        m.update(b"\0");
        m.update(&VERSION.to_be_bytes());
        m.update(self.transcript.as_deref().unwrap_or_default());
        m
    }

    pub fn send(&mut self, m: &Msg) -> Result<(), OobError> {
        let body = serde_json::to_vec(m).map_err(|e| OobError::Malformed(e.to_string()))?;
        self.record(m, &body);
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

    /// Read one message within `timeout` (for the whole message, however it trickles in);
    /// `what` names what we are waiting for, for the error.
    pub fn recv(&mut self, what: &'static str, timeout: Duration) -> Result<Msg, OobError> {
        let deadline = Instant::now() + timeout;
        let mut head = [0u8; 10];
        self.read_by(&mut head, what, deadline, timeout)?;
        let body = decode_head(&head)?;
        let mut buf = vec![0u8; body as usize];
        self.read_by(&mut buf, what, deadline, timeout)?;
        let m: Msg =
            serde_json::from_slice(&buf).map_err(|e| OobError::Malformed(e.to_string()))?;
        self.record(&m, &buf);
        Ok(m)
    }

    /// Fill `buf` before `deadline`: each read waits only for the time left.
    fn read_by(
        &mut self,
        buf: &mut [u8],
        what: &'static str,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<(), OobError> {
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(OobError::Timeout { what, timeout });
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| io_err(what, e))?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(OobError::Closed(what)),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(match io_err(what, e) {
                        OobError::Timeout { what, .. } => OobError::Timeout { what, timeout },
                        other => other,
                    });
                }
            }
        }
        Ok(())
    }

    /// Client side of the handshake: prove the token, send `params`, and return the server's
    /// endpoint and facts once the server proved the token too.
    pub fn client_handshake(
        &mut self,
        token: &str,
        params: &ClientParams,
        timeout: Duration,
    ) -> Result<(Endpoint, PortFacts), OobError> {
        let deadline = Instant::now() + timeout.min(HANDSHAKE_TIMEOUT);
        let left = || deadline.saturating_duration_since(Instant::now());
        self.transcript = Some(Vec::new());
        self.send(&Msg::Hello { nonce: nonce()? })?;
        match self.recv("the server's challenge", left())? {
            Msg::Challenge { nonce } if is_nonce(&nonce) => {}
            Msg::Refused { reason } => return Err(OobError::Refused(reason)),
            other => return Err(unexpected("challenge", &other)),
        }
        self.send(&Msg::Params {
            qps: params.qps,
            max_size: params.max_size,
            endpoint: params.endpoint.clone(),
            facts: params.facts.clone(),
        })?;
        let mac = hex(&self.mac(token, "client").finalize().into_bytes());
        self.send(&Msg::Proof { mac })?;
        let (endpoint, facts) = match self.recv("the server's endpoint", left())? {
            Msg::Welcome { endpoint, facts } => (endpoint, facts),
            Msg::Refused { reason } => return Err(OobError::Refused(reason)),
            other => return Err(unexpected("welcome", &other)),
        };
        let expected = self.mac(token, "server");
        match self.recv("the server's proof", left())? {
            Msg::Proof { mac } => verify(expected, &mac).map_err(|()| {
                OobError::Auth("the server did not prove it holds the token".into())
            })?,
            other => return Err(unexpected("proof", &other)),
        }
        self.transcript = None;
        Ok((endpoint, facts))
    }

    /// Server side, first half: challenge the client and check its proof; one attempt (a
    /// wrong proof is answered `refused` and ends the handshake). The caller registers its
    /// buffer only after this, then answers with `server_welcome`.
    pub fn server_handshake(
        &mut self,
        token: &str,
        timeout: Duration,
    ) -> Result<(ClientParams, Instant), OobError> {
        let deadline = Instant::now() + timeout.min(HANDSHAKE_TIMEOUT);
        let left = || deadline.saturating_duration_since(Instant::now());
        self.transcript = Some(Vec::new());
        match self.recv("hello", left())? {
            Msg::Hello { nonce } if is_nonce(&nonce) => {}
            other => return Err(self.refuse(unexpected("hello", &other))),
        }
        self.send(&Msg::Challenge { nonce: nonce()? })?;
        let params = match self.recv("the client's parameters", left())? {
            Msg::Params {
                qps,
                max_size,
                endpoint,
                facts,
            } => ClientParams {
                qps,
                max_size,
                endpoint,
                facts,
            },
            other => return Err(self.refuse(unexpected("params", &other))),
        };
        let expected = self.mac(token, "client");
        match self.recv("the client's proof", left())? {
            Msg::Proof { mac } => {
                if verify(expected, &mac).is_err() {
                    return Err(self.refuse(OobError::Auth(
                        "the client did not prove it holds the token (a wrong token, or a replayed or reflected exchange)".into(),
                    )));
                }
            }
            other => return Err(self.refuse(unexpected("proof", &other))),
        }
        Ok((params, deadline))
    }

    /// Server side, second half: its endpoint and facts, and its own proof.
    pub fn server_welcome(
        &mut self,
        token: &str,
        endpoint: Endpoint,
        facts: PortFacts,
    ) -> Result<(), OobError> {
        self.send(&Msg::Welcome { endpoint, facts })?;
        let mac = hex(&self.mac(token, "server").finalize().into_bytes());
        self.send(&Msg::Proof { mac })?;
        self.transcript = None;
        Ok(())
    }

    /// Tell the peer why (best effort) and hand the error back.
    fn refuse(&mut self, e: OobError) -> OobError {
        let reason = match &e {
            OobError::Auth(_) => "authentication failed".to_string(),
            other => other.to_string(),
        };
        let _ = self.send(&Msg::Refused { reason });
        e
    }
}

fn unexpected(want: &'static str, got: &Msg) -> OobError {
    // Name the message, not its contents.
    let got = serde_json::to_value(got)
        .ok()
        .and_then(|v| v["msg"].as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    OobError::Unexpected { want, got }
}

/// A fresh nonce, hex.
fn nonce() -> Result<String, OobError> {
    let mut b = [0u8; NONCE_BYTES];
    getrandom::fill(&mut b).map_err(|e| OobError::Random(e.to_string()))?;
    Ok(hex(&b))
}

fn is_nonce(s: &str) -> bool {
    s.len() == 2 * NONCE_BYTES && s.bytes().all(|c| c.is_ascii_hexdigit())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The MAC's own constant-time comparison.
fn verify(expected: Hmac<Sha256>, given_hex: &str) -> Result<(), ()> {
    let given = unhex(given_hex).ok_or(())?;
    expected.verify_slice(&given).map_err(|_| ())
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

#[cfg(test)]
mod tests {
    use super::*;

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

    fn params(qps: u32) -> ClientParams {
        ClientParams {
            qps,
            max_size: 4096,
            endpoint: endpoint(7),
            facts: facts("rxe_a"),
        }
    }
    fn endpoint(q: u32) -> Endpoint {
        Endpoint {
            qpns: vec![q],
            psn: 0x1000,
            lid: 0,
            gid: Some("fe80:0000:0000:0000:0000:0000:0000:0001".into()),
            mtu: 1024,
            addr: 0x7f00_0000_0000,
            rkey: 0x1234,
            len: 4096,
        }
    }
    fn facts(dev: &str) -> PortFacts {
        serde_json::from_value(serde_json::json!({
            "device": dev, "port": 1, "state": "4: ACTIVE", "link_layer": "Ethernet",
            "mtu_bytes": 1024, "addressing": {"kind": "lid", "lid": 0},
            "software_device": "rxe", "line_rate": null
        }))
        .unwrap()
    }

    /// A server on a fresh port running the first half of the handshake (and the welcome
    /// when it succeeds); its result comes back through the handle.
    fn server(
        token: &'static str,
        timeout: Duration,
    ) -> (
        String,
        std::thread::JoinHandle<Result<ClientParams, OobError>>,
    ) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (s, p) = l.accept().unwrap();
            let mut c = Channel::new(s, p.to_string(), timeout).unwrap();
            let (params, _) = c.server_handshake(token, timeout)?;
            c.server_welcome(token, endpoint(9), facts("rxe_b"))?;
            Ok(params)
        });
        (addr, t)
    }

    #[test]
    fn handshake_proves_the_token_both_ways_without_sending_it() {
        // The bytes on the wire, client to server and back, through a recording proxy.
        let (saddr, srv) = server("s3cret-token", Duration::from_secs(5));
        let pl = TcpListener::bind("127.0.0.1:0").unwrap();
        let paddr = pl.local_addr().unwrap().to_string();
        let proxy = std::thread::spawn(move || {
            let (mut c, _) = pl.accept().unwrap();
            let mut s = TcpStream::connect(&saddr).unwrap();
            let (mut c2, mut s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
            let up = std::thread::spawn(move || {
                let mut rec = Vec::new();
                let mut b = [0u8; 4096];
                while let Ok(n) = c2.read(&mut b) {
                    if n == 0 || s2.write_all(&b[..n]).is_err() {
                        break;
                    }
                    rec.extend_from_slice(&b[..n]);
                }
                rec
            });
            let mut down = Vec::new();
            let mut b = [0u8; 4096];
            while let Ok(n) = s.read(&mut b) {
                if n == 0 || c.write_all(&b[..n]).is_err() {
                    break;
                }
                down.extend_from_slice(&b[..n]);
            }
            let _ = c.shutdown(std::net::Shutdown::Both);
            (up.join().unwrap(), down)
        });
        let mut c = Channel::connect(&paddr, Duration::from_secs(5)).unwrap();
        let (ep, f) = c
            .client_handshake("s3cret-token", &params(2), Duration::from_secs(5))
            .unwrap();
        assert_eq!((ep.qpns, f.device.as_str()), (vec![9], "rxe_b"));
        let got = srv.join().unwrap().unwrap();
        assert_eq!((got.qps, got.endpoint.qpns), (2, vec![7]));
        drop(c);
        let (up, down) = proxy.join().unwrap();
        let wire = [up.clone(), down].concat();
        assert!(
            !wire.windows(12).any(|w| w == b"s3cret-token"),
            "the token crossed the wire"
        );

        // Replay: the recorded client bytes against a new server (same token) are refused.
        let (addr, srv) = server("s3cret-token", Duration::from_secs(5));
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(&up).unwrap();
        let e = srv.join().unwrap().unwrap_err();
        assert!(matches!(e, OobError::Auth(_)), "replay: {e}");
    }

    #[test]
    fn wrong_token_is_refused_on_both_sides() {
        let (addr, srv) = server("right", Duration::from_secs(5));
        let mut c = Channel::connect(&addr, Duration::from_secs(5)).unwrap();
        let e = c
            .client_handshake("wrong", &params(1), Duration::from_secs(5))
            .unwrap_err();
        assert_eq!(e.to_string(), "refused: authentication failed");
        let e = srv.join().unwrap().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("authentication failed: the client did not prove"),
            "{e}"
        );
    }

    #[test]
    fn a_reflected_server_proof_is_not_a_client_proof() {
        let (addr, srv) = server("tok", Duration::from_secs(5));
        let mut c = Channel::connect(&addr, Duration::from_secs(5)).unwrap();
        c.transcript = Some(Vec::new());
        c.send(&Msg::Hello {
            nonce: nonce().unwrap(),
        })
        .unwrap();
        assert!(matches!(
            c.recv("challenge", Duration::from_secs(5)).unwrap(),
            Msg::Challenge { .. }
        ));
        let p = params(1);
        c.send(&Msg::Params {
            qps: p.qps,
            max_size: p.max_size,
            endpoint: p.endpoint,
            facts: p.facts,
        })
        .unwrap();
        // Right token, right transcript, wrong role.
        let mac = hex(&c.mac("tok", "server").finalize().into_bytes());
        c.send(&Msg::Proof { mac }).unwrap();
        assert!(matches!(srv.join().unwrap(), Err(OobError::Auth(_))));
    }

    #[test]
    fn a_server_without_the_token_is_caught_by_the_client() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = std::thread::spawn(move || {
            let (s, p) = l.accept().unwrap();
            let mut c = Channel::new(s, p.to_string(), Duration::from_secs(5)).unwrap();
            // A server that skips the client's proof and answers with a made-up one.
            c.transcript = Some(Vec::new());
            let _ = c.recv("hello", Duration::from_secs(5));
            c.send(&Msg::Challenge {
                nonce: nonce().unwrap(),
            })
            .unwrap();
            let _ = c.recv("params", Duration::from_secs(5));
            let _ = c.recv("proof", Duration::from_secs(5));
            c.send(&Msg::Welcome {
                endpoint: endpoint(9),
                facts: facts("x"),
            })
            .unwrap();
            let mac = hex(&c.mac("guess", "server").finalize().into_bytes());
            c.send(&Msg::Proof { mac }).unwrap();
        });
        let mut c = Channel::connect(&addr, Duration::from_secs(5)).unwrap();
        let e = c
            .client_handshake("real", &params(1), Duration::from_secs(5))
            .unwrap_err();
        assert!(matches!(e, OobError::Auth(_)), "{e}");
        t.join().unwrap();
    }

    /// Raw bytes at a server; its error.
    fn server_gets(bytes: &[u8], then_wait: Duration, timeout: Duration) -> (OobError, Duration) {
        let (addr, srv) = server("tok", timeout);
        let mut s = TcpStream::connect(&addr).unwrap();
        let t0 = Instant::now();
        s.write_all(bytes).unwrap();
        std::thread::sleep(then_wait);
        drop(s);
        (srv.join().unwrap().unwrap_err(), t0.elapsed())
    }

    #[test]
    fn hostile_frames_get_clear_errors() {
        let long = Duration::from_secs(5);
        let (e, _) = server_gets(b"GET / HTTP/1.1\r\n\r\n", Duration::ZERO, long);
        assert!(matches!(e, OobError::BadMagic), "{e}");
        let (e, _) = server_gets(b"GDWB\x00\x02\x7f\xff\xff\xff", Duration::ZERO, long);
        assert!(matches!(e, OobError::TooLarge(_)), "{e}");
        let (e, _) = server_gets(b"GDWB\x00\x01\x00\x00\x00\x02{}", Duration::ZERO, long);
        assert!(matches!(e, OobError::Version { theirs: 1 }), "{e}");
        // Truncated: a header announcing 100 bytes, 10 of them, then the connection closes.
        let (e, _) = server_gets(
            b"GDWB\x00\x02\x00\x00\x00\x640123456789",
            Duration::ZERO,
            long,
        );
        assert!(matches!(e, OobError::Closed(_)), "{e}");
        let (e, _) = server_gets(b"GDWB\x00\x02\x00\x00\x00\x05{\"a\":", Duration::ZERO, long);
        assert!(matches!(e, OobError::Malformed(_)), "{e}");
        // A well-formed message out of turn.
        let body = br#"{"msg":"bye"}"#;
        let mut f = b"GDWB\x00\x02\x00\x00\x00".to_vec();
        f.push(body.len() as u8);
        f.extend_from_slice(body);
        let (e, _) = server_gets(&f, Duration::ZERO, long);
        assert_eq!(
            e.to_string(),
            "unexpected message while waiting for hello: bye"
        );
    }

    #[test]
    fn a_slow_client_is_dropped_at_the_deadline() {
        let timeout = Duration::from_millis(400);
        // Connects and says nothing (and keeps the connection open).
        let (addr, srv) = server("tok", timeout);
        let s = TcpStream::connect(&addr).unwrap();
        let t0 = Instant::now();
        let e = srv.join().unwrap().unwrap_err();
        let took = t0.elapsed();
        drop(s);
        assert!(matches!(e, OobError::Timeout { .. }), "{e}");
        assert!(
            took < Duration::from_secs(5),
            "silent client held the server {took:?}"
        );
        // Dribbles a byte every 100 ms: the deadline is for the whole message, not per read.
        let (addr, srv) = server("tok", timeout);
        let mut s = TcpStream::connect(&addr).unwrap();
        let t0 = Instant::now();
        let w = std::thread::spawn(move || {
            for b in b"GDWB\x00\x02\x00\x00\x00\x40" {
                if s.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let e = srv.join().unwrap().unwrap_err();
        assert!(matches!(e, OobError::Timeout { .. }), "{e}");
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "dribbling held the server {:?}",
            t0.elapsed()
        );
        w.join().unwrap();
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
