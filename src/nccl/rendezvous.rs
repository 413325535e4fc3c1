//! The rendezvous of `probe nccl --ranks`: rank 0 listens, every other process connects and
//! proves it holds the shared token, then rank 0 hands out the plan and NCCL's unique id and
//! gathers each process's results. A sibling of write-bw's `rdma::engine::oob` with the same
//! properties (that module stays as it is: its protocol is write-bw's):
//!
//! - Frame: b"GDNR", protocol version (u16 BE), body length (u32 BE, at most MAX_BODY), JSON.
//! - Handshake (challenge-response; the token never crosses the wire): client `Hello { nonce }`,
//!   server `Challenge { nonce }` (fresh per connection), client `Join { params, proof }` with
//!   HMAC-SHA256 keyed by the token over a domain label, VERSION, the role "client", both nonces
//!   and the params text; the server checks it in constant time (`verify_slice`) and refuses a
//!   wrong one (`Refused`, connection closed: one attempt each). Its `Welcome { params, proof }`
//!   carries the plan with a proof of role "server" over both nonces, the client's params and the
//!   plan, which the client checks before it runs anything. A recorded exchange cannot be
//!   replayed (fresh nonce), a client's proof cannot be reflected (role label), altered
//!   parameters fail the proof.
//! - Every read has a deadline, the whole handshake one deadline, so a peer that connects and
//!   says nothing (or dribbles bytes) is dropped when it passes; each connection is served on
//!   its own thread, so one silent peer delays nobody else.
//!
//! Messages after the handshake (the unique id, results, the verdict) are not authenticated
//! one by one: a party that can rewrite the TCP stream can still disturb a run, as with
//! write-bw. This module moves bytes and checks proofs; it must not run NCCL or judge.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const MAGIC: &[u8; 4] = b"GDNR";
pub const VERSION: u16 = 1;
/// A process's results (every raw sample of every configuration) fit well inside this.
pub const MAX_BODY: u32 = 4 << 20;
pub const NONCE_BYTES: usize = crate::handshake::NONCE_BYTES;
const DOMAIN: &[u8] = b"gpudoctor nccl rendezvous";
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
    Hello {
        nonce: String,
    },
    Challenge {
        nonce: String,
    },
    /// Client: `params` is the JSON text of what it brings (its rank, host, GPUs, NCCL).
    Join {
        params: String,
        proof: String,
    },
    /// Server: `params` is the JSON text of the plan.
    Welcome {
        params: String,
        proof: String,
    },
    Refused {
        reason: String,
    },
    /// Server: run configuration `config` with this NCCL unique id (hex).
    Go {
        config: u32,
        unique_id: String,
    },
    /// Client: its part of configuration `config` (JSON text).
    Done {
        config: u32,
        part: String,
    },
    /// Server: the run is over with `status` (pass, fail, skip, unknown, error); `line` says so.
    Finish {
        status: String,
        line: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("cannot reach rank 0 at {addr} within {secs} s: {why}")]
    Connect {
        addr: String,
        secs: u64,
        why: String,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
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
    #[error("not a gpudoctor NCCL rendezvous peer (bad magic)")]
    BadMagic,
    #[error("rendezvous protocol version {theirs}, this side speaks {VERSION}")]
    Version { theirs: u16 },
    #[error("message of {0} bytes exceeds the {MAX_BODY}-byte limit")]
    TooLarge(u64),
    #[error("malformed message: {0}")]
    Malformed(String),
    #[error("unexpected message while waiting for {want}: {got}")]
    Unexpected { want: &'static str, got: String },
    #[error("refused by rank 0: {0}")]
    Refused(String),
    #[error(
        "the {0}'s proof does not match: a wrong token, or a replayed, reflected or altered exchange"
    )]
    BadProof(&'static str),
    #[error("cannot draw a random nonce: {0}")]
    Random(String),
}

use crate::handshake::{self, HeadError, Nonce, hex};

pub struct Channel {
    stream: TcpStream,
    pub peer: String,
    timeout: Duration,
}

fn io_err(what: &'static str, e: std::io::Error) -> RendezvousError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => RendezvousError::Timeout {
            what,
            timeout: Duration::ZERO,
        },
        std::io::ErrorKind::UnexpectedEof => RendezvousError::Closed(what),
        _ => RendezvousError::Io { what, source: e },
    }
}

impl Channel {
    pub fn new(
        stream: TcpStream,
        peer: String,
        timeout: Duration,
    ) -> Result<Channel, RendezvousError> {
        stream
            .set_nodelay(true)
            .map_err(|e| io_err("socket setup", e))?;
        Ok(Channel {
            stream,
            peer,
            timeout,
        })
    }

    /// Connect to `host:port`, retrying refusals (rank 0 may not listen yet) and unresolvable
    /// names (a headless Service's record appears when its pod is ready) until `wait` passes.
    pub fn connect(host: &str, port: u16, wait: Duration) -> Result<Channel, RendezvousError> {
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let deadline = Instant::now() + wait;
        let mut why;
        loop {
            match addr.to_socket_addrs() {
                Ok(addrs) => {
                    let addrs: Vec<SocketAddr> = addrs.collect();
                    why = "no address".to_string();
                    for a in &addrs {
                        let left = deadline.saturating_duration_since(Instant::now());
                        match TcpStream::connect_timeout(
                            a,
                            left.clamp(Duration::from_millis(10), Duration::from_secs(5)),
                        ) {
                            Ok(s) => return Channel::new(s, addr, wait),
                            Err(e) => why = e.to_string(),
                        }
                    }
                }
                Err(e) => why = format!("cannot resolve: {e}"),
            }
            if Instant::now() >= deadline || crate::signals::interrupted() {
                return Err(RendezvousError::Connect {
                    addr,
                    secs: wait.as_secs(),
                    why,
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn send(&mut self, m: &Msg) -> Result<(), RendezvousError> {
        let body = serde_json::to_vec(m).map_err(|e| RendezvousError::Malformed(e.to_string()))?;
        if body.len() as u64 > u64::from(MAX_BODY) {
            return Err(RendezvousError::TooLarge(body.len() as u64));
        }
        let mut frame = Vec::with_capacity(10 + body.len());
        frame.extend_from_slice(MAGIC);
        frame.extend_from_slice(&VERSION.to_be_bytes());
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        let t = self.timeout.max(Duration::from_millis(1));
        self.stream
            .set_write_timeout(Some(t))
            .map_err(|e| io_err("socket setup", e))?;
        self.stream
            .write_all(&frame)
            .map_err(|e| io_err("sending", e))
    }

    /// One message, all of it before `deadline` however the bytes trickle in.
    pub fn recv_by(
        &mut self,
        what: &'static str,
        deadline: Instant,
    ) -> Result<Msg, RendezvousError> {
        let budget = deadline.saturating_duration_since(Instant::now());
        let mut head = [0u8; 10];
        self.read_by(&mut head, what, deadline, budget)?;
        let len = decode_head(&head)?;
        let mut buf = vec![0u8; len as usize];
        self.read_by(&mut buf, what, deadline, budget)?;
        serde_json::from_slice(&buf).map_err(|e| RendezvousError::Malformed(e.to_string()))
    }

    fn read_by(
        &mut self,
        mut buf: &mut [u8],
        what: &'static str,
        deadline: Instant,
        budget: Duration,
    ) -> Result<(), RendezvousError> {
        let late = || RendezvousError::Timeout {
            what,
            timeout: budget,
        };
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late());
            }
            // Short slices, so an interrupt (SIGINT/SIGTERM) is noticed while waiting.
            self.stream
                .set_read_timeout(Some(
                    left.min(Duration::from_millis(250))
                        .max(Duration::from_millis(1)),
                ))
                .map_err(|e| io_err("socket setup", e))?;
            match self.stream.read(buf) {
                Ok(0) => return Err(RendezvousError::Closed(what)),
                Ok(n) => buf = &mut buf[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if crate::signals::interrupted() {
                        return Err(RendezvousError::Closed(what));
                    }
                }
                Err(e) => return Err(io_err(what, e)),
            }
        }
        Ok(())
    }
}

pub fn decode_head(head: &[u8; 10]) -> Result<u32, RendezvousError> {
    PROTOCOL.decode_head(head).map_err(|e| match e {
        HeadError::BadMagic => RendezvousError::BadMagic,
        HeadError::Version(v) => RendezvousError::Version { theirs: v },
        HeadError::TooLarge(n) => RendezvousError::TooLarge(u64::from(n)),
    })
}

fn fresh_nonce() -> Result<Nonce, RendezvousError> {
    handshake::fresh_nonce().map_err(RendezvousError::Random)
}

fn nonce_from(s: &str) -> Result<Nonce, RendezvousError> {
    handshake::nonce_from(s).map_err(RendezvousError::Malformed)
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
) -> Result<(), RendezvousError> {
    match PROTOCOL.proof_matches(token, role, client, server, params, proof) {
        Ok(true) => Ok(()),
        Ok(false) => Err(RendezvousError::BadProof(role)),
        Err(e) => Err(RendezvousError::Malformed(e)),
    }
}

fn unexpected(want: &'static str, m: Msg) -> RendezvousError {
    match m {
        Msg::Refused { reason } => RendezvousError::Refused(reason),
        other => RendezvousError::Unexpected {
            want,
            got: format!("{other:?}").chars().take(200).collect(),
        },
    }
}

/// A client whose proof checked out, parked until the plan is sent.
pub struct Joined {
    pub chan: Channel,
    /// The client's params, parsed by the caller from this text.
    pub params: String,
    client_nonce: Nonce,
    server_nonce: Nonce,
}

impl Joined {
    /// The plan, with rank 0's proof over the whole transcript.
    pub fn welcome(&mut self, token: &str, plan: &str) -> Result<(), RendezvousError> {
        let proof = transcript_mac(
            token,
            "server",
            &self.client_nonce,
            &self.server_nonce,
            &[&self.params, plan],
        )
        .finalize()
        .into_bytes();
        self.chan.send(&Msg::Welcome {
            params: plan.to_string(),
            proof: hex(&proof),
        })
    }
}

/// Serving side of one connection's handshake, all before `deadline`.
pub fn serve_handshake(
    mut chan: Channel,
    token: &str,
    deadline: Instant,
) -> Result<Joined, RendezvousError> {
    let client_nonce = match chan.recv_by("hello", deadline)? {
        Msg::Hello { nonce } => nonce_from(&nonce)?,
        other => return Err(unexpected("hello", other)),
    };
    let server_nonce = fresh_nonce()?;
    chan.send(&Msg::Challenge {
        nonce: hex(&server_nonce),
    })?;
    let (params, proof) = match chan.recv_by("join", deadline)? {
        Msg::Join { params, proof } => (params, proof),
        other => return Err(unexpected("join", other)),
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
    Ok(Joined {
        chan,
        params,
        client_nonce,
        server_nonce,
    })
}

/// Client side: join with `params`, wait (until `deadline`) for rank 0's plan and check its proof.
pub fn join(
    chan: &mut Channel,
    token: &str,
    params: &str,
    handshake: Instant,
    deadline: Instant,
) -> Result<String, RendezvousError> {
    let client_nonce = fresh_nonce()?;
    chan.send(&Msg::Hello {
        nonce: hex(&client_nonce),
    })?;
    let server_nonce = match chan.recv_by("rank 0's challenge", handshake)? {
        Msg::Challenge { nonce } => nonce_from(&nonce)?,
        other => return Err(unexpected("challenge", other)),
    };
    let proof = transcript_mac(token, "client", &client_nonce, &server_nonce, &[params])
        .finalize()
        .into_bytes();
    chan.send(&Msg::Join {
        params: params.to_string(),
        proof: hex(&proof),
    })?;
    let (plan, proof) = match chan.recv_by("rank 0's plan (every rank to arrive)", deadline)? {
        Msg::Welcome { params, proof } => (params, proof),
        other => return Err(unexpected("welcome", other)),
    };
    check_proof(
        token,
        "server",
        &client_nonce,
        &server_nonce,
        &[params, &plan],
        &proof,
    )?;
    Ok(plan)
}

/// What `gather` saw besides the ranks that joined.
#[derive(Debug, Default)]
pub struct Turnaways {
    /// "PEER: why", for each connection that did not join (wrong token, silence, garbage).
    pub refused: Vec<String>,
}

/// Rank 0: accept connections until `want(params)` has accepted every rank it needs or
/// `deadline` passes. Each connection's handshake runs on its own thread with `handshake`
/// as its bound. `admit` parses a client's params and says which rank it is (Err: refuse it
/// with that reason); `done` says whether everyone is in. Returns the joined, keyed by rank.
pub fn gather(
    listener: TcpListener,
    token: &str,
    deadline: Instant,
    handshake: Duration,
    admit: &mut dyn FnMut(&str) -> Result<u32, String>,
    done: &dyn Fn(usize) -> bool,
) -> (std::collections::BTreeMap<u32, Joined>, Turnaways) {
    let mut joined = std::collections::BTreeMap::new();
    let mut turned = Turnaways::default();
    if listener.set_nonblocking(true).is_err() {
        turned.refused.push("listener: cannot poll".into());
        return (joined, turned);
    }
    let (tx, rx) = mpsc::channel::<(String, Result<Joined, RendezvousError>)>();
    let mut threads = Vec::new();
    while !done(joined.len()) && Instant::now() < deadline && !crate::signals::interrupted() {
        match listener.accept() {
            Ok((s, peer)) => {
                let tx = tx.clone();
                let token = token.to_string();
                let hs_deadline = (Instant::now() + handshake).min(deadline);
                let _ = s.set_nonblocking(false);
                threads.push(std::thread::spawn(move || {
                    let r = Channel::new(s, peer.to_string(), handshake)
                        .and_then(|c| serve_handshake(c, &token, hs_deadline));
                    let _ = tx.send((peer.to_string(), r));
                }));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => turned.refused.push(format!("accept: {e}")),
        }
        while let Ok((peer, r)) = rx.try_recv() {
            match r {
                Ok(mut j) => match admit(&j.params) {
                    Ok(rank) if !joined.contains_key(&rank) => {
                        joined.insert(rank, j);
                    }
                    Ok(rank) => {
                        let why = format!("rank {rank} joined twice");
                        let _ = j.chan.send(&Msg::Refused {
                            reason: why.clone(),
                        });
                        turned.refused.push(format!("{peer}: {why}"));
                    }
                    Err(why) => {
                        let _ = j.chan.send(&Msg::Refused {
                            reason: why.clone(),
                        });
                        turned.refused.push(format!("{peer}: {why}"));
                    }
                },
                Err(e) => turned.refused.push(format!("{peer}: {e}")),
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Handshakes still running end by their own deadline (at most `handshake`); those that
    // finish now are dropped (the listener is gone).
    drop(listener);
    drop(tx);
    for t in threads {
        let _ = t.join();
    }
    while let Ok((peer, r)) = rx.try_recv() {
        match r {
            Ok(mut j) => {
                let why = "joined after the rendezvous closed".to_string();
                let _ = j.chan.send(&Msg::Refused {
                    reason: why.clone(),
                });
                turned.refused.push(format!("{peer}: {why}"));
            }
            Err(e) => turned.refused.push(format!("{peer}: {e}")),
        }
    }
    (joined, turned)
}

/// Listen for the rendezvous on every address at `port` (IPv6 and IPv4 where the host allows).
pub fn listen(port: u16) -> Result<TcpListener, RendezvousError> {
    let addr = format!("0.0.0.0:{port}");
    TcpListener::bind(&addr).map_err(|e| RendezvousError::Listen { addr, source: e })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    fn server(
        token: &'static str,
        ranks: u32,
        wait: Duration,
        handshake: Duration,
    ) -> (u16, std::thread::JoinHandle<(Vec<u32>, Turnaways)>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let mut admit = |p: &str| -> Result<u32, String> {
                let r: u32 = p.parse().map_err(|_| "not a rank".to_string())?;
                if r == 0 || r >= ranks {
                    return Err(format!("rank {r} is not in 1..{ranks}"));
                }
                Ok(r)
            };
            let want = ranks as usize - 1;
            let (mut j, turned) = gather(
                l,
                token,
                Instant::now() + wait,
                handshake,
                &mut admit,
                &|n| n == want,
            );
            for (r, x) in j.iter_mut() {
                x.welcome(token, &format!("plan for {r}")).unwrap();
            }
            (j.keys().copied().collect(), turned)
        });
        (port, t)
    }

    fn client(port: u16, token: &str, rank: &str) -> Result<String, RendezvousError> {
        let mut c = Channel::connect("127.0.0.1", port, T)?;
        join(&mut c, token, rank, Instant::now() + T, Instant::now() + T)
    }

    #[test]
    fn every_rank_arrives_and_gets_its_plan() {
        let (port, t) = server("tok", 4, T, T);
        let cs: Vec<_> = (1..4)
            .map(|r| std::thread::spawn(move || client(port, "tok", &r.to_string())))
            .collect();
        for (i, c) in cs.into_iter().enumerate() {
            assert_eq!(c.join().unwrap().unwrap(), format!("plan for {}", i + 1));
        }
        let (ranks, turned) = t.join().unwrap();
        assert_eq!(ranks, [1, 2, 3]);
        assert!(turned.refused.is_empty(), "{:?}", turned.refused);
    }

    #[test]
    fn a_rank_that_never_arrives_is_named_within_the_bound() {
        let wait = Duration::from_millis(800);
        let (port, t) = server("tok", 3, wait, T);
        let start = Instant::now();
        let c = std::thread::spawn(move || {
            let mut c = Channel::connect("127.0.0.1", port, T).unwrap();
            // Its plan never comes: the server gives up on rank 2 and drops everyone.
            join(&mut c, "tok", "1", Instant::now() + T, Instant::now() + T)
        });
        let (ranks, _) = t.join().unwrap();
        assert!(start.elapsed() < wait * 3, "{:?}", start.elapsed());
        // Only rank 1 joined: the caller names rank 2 as missing (see `cluster`).
        assert_eq!(ranks, [1]);
        assert!(c.join().unwrap().is_ok());
    }

    #[test]
    fn wrong_token_and_bad_ranks_are_refused() {
        let (port, t) = server("right", 2, Duration::from_millis(1500), T);
        let e = client(port, "wrong", "1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "refused by rank 0: wrong token or replayed exchange"
        );
        let e = client(port, "right", "7").unwrap_err();
        assert_eq!(e.to_string(), "refused by rank 0: rank 7 is not in 1..2");
        assert_eq!(client(port, "right", "1").unwrap(), "plan for 1");
        let (ranks, turned) = t.join().unwrap();
        assert_eq!(ranks, [1]);
        assert_eq!(turned.refused.len(), 2, "{:?}", turned.refused);
        assert!(
            turned.refused[0].contains("proof does not match"),
            "{:?}",
            turned.refused
        );
    }

    #[test]
    fn a_silent_peer_is_dropped_and_delays_nobody() {
        let hs = Duration::from_millis(300);
        let (port, t) = server("tok", 2, T, hs);
        let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let start = Instant::now();
        assert_eq!(client(port, "tok", "1").unwrap(), "plan for 1");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        let (_, turned) = t.join().unwrap();
        assert!(
            turned
                .refused
                .iter()
                .any(|r| r.contains("no answer within") && r.contains("hello")),
            "{:?}",
            turned.refused
        );
        // Its socket was closed by the server.
        silent.set_read_timeout(Some(T)).unwrap();
        assert_eq!(silent.read(&mut [0u8; 8]).unwrap(), 0);
    }

    #[test]
    fn a_reflected_or_forged_welcome_is_refused_by_the_client() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (s, p) = l.accept().unwrap();
            let mut c = Channel::new(s, p.to_string(), T).unwrap();
            let Msg::Hello { nonce } = c.recv_by("hello", Instant::now() + T).unwrap() else {
                panic!("no hello")
            };
            c.send(&Msg::Challenge { nonce }).unwrap();
            let Msg::Join { params, proof } = c.recv_by("join", Instant::now() + T).unwrap() else {
                panic!("no join")
            };
            c.send(&Msg::Welcome { params, proof }).unwrap();
        });
        let e = client(port, "tok", "1").unwrap_err();
        assert!(matches!(e, RendezvousError::BadProof("server")), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn hostile_heads() {
        assert!(matches!(
            decode_head(b"HTTP/1.1 2"),
            Err(RendezvousError::BadMagic)
        ));
        assert!(matches!(
            decode_head(b"GDNR\x00\x09\x00\x00\x00\x01"),
            Err(RendezvousError::Version { theirs: 9 })
        ));
        assert!(matches!(
            decode_head(b"GDNR\x00\x01\xff\xff\xff\xff"),
            Err(RendezvousError::TooLarge(_))
        ));
        assert_eq!(decode_head(b"GDNR\x00\x01\x00\x00\x00\x10").unwrap(), 16);
        // Nobody listening: a bounded connect error naming the address.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let start = Instant::now();
        let e = Channel::connect("127.0.0.1", port, Duration::from_millis(500))
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with(&format!("cannot reach rank 0 at 127.0.0.1:{port}")),
            "{e}"
        );
        assert!(start.elapsed() < Duration::from_secs(3));
    }
}
