//! What the two authenticated out-of-band channels share (`probe write-bw`'s two-node mode in
//! `rdma::engine::oob`, `probe nccl --ranks`'s rendezvous in `nccl::rendezvous`): the frame
//! head, nonces, hex, and the HMAC-SHA256 proof over the handshake's transcript. Each channel
//! is a [`Protocol`] with its own magic, version and domain label, so that no frame or proof of
//! one passes for the other. Nothing here does I/O.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of each side's nonce.
pub const NONCE_BYTES: usize = 32;
pub type Nonce = [u8; NONCE_BYTES];

/// One channel's constants.
pub struct Protocol {
    pub magic: &'static [u8; 4],
    pub version: u16,
    /// At the head of every transcript.
    pub domain: &'static [u8],
    /// The largest body a frame may announce.
    pub max_body: u32,
}

/// Why a frame head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    BadMagic,
    Version(u16),
    TooLarge(u32),
}

impl Protocol {
    /// Check a frame head (magic, version BE u16, body length BE u32); the body length.
    pub fn decode_head(&self, head: &[u8; 10]) -> Result<u32, HeadError> {
        if &head[..4] != self.magic {
            return Err(HeadError::BadMagic);
        }
        let v = u16::from_be_bytes([head[4], head[5]]);
        if v != self.version {
            return Err(HeadError::Version(v));
        }
        let len = u32::from_be_bytes([head[6], head[7], head[8], head[9]]);
        if len > self.max_body {
            return Err(HeadError::TooLarge(len));
        }
        Ok(len)
    }

    /// HMAC-SHA256 keyed by the token over the transcript: domain, version, role, both nonces
    /// and each parameter text, every field length-prefixed so no two transcripts share bytes.
    pub fn transcript_mac(
        &self,
        token: &str,
        role: &str,
        client: &Nonce,
        server: &Nonce,
        params: &[&str],
    ) -> Hmac<Sha256> {
        // HMAC takes keys of any length (RFC 2104 hashes long ones): new_from_slice cannot fail.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes())
            .expect("HMAC accepts any key length");
        let mut field = |b: &[u8]| {
            m.update(&(b.len() as u64).to_be_bytes());
            m.update(b);
        };
        field(self.domain);
        field(&self.version.to_be_bytes());
        field(role.as_bytes());
        field(client);
        field(server);
        for p in params {
            field(p.as_bytes());
        }
        m
    }

    /// The proof a side sends: the transcript's MAC in hex.
    pub fn proof(
        &self,
        token: &str,
        role: &str,
        client: &Nonce,
        server: &Nonce,
        params: &[&str],
    ) -> String {
        hex(&self
            .transcript_mac(token, role, client, server, params)
            .finalize()
            .into_bytes())
    }

    /// Whether `proof` (hex) is the transcript's MAC, compared in constant time. Err: not hex.
    pub fn proof_matches(
        &self,
        token: &str,
        role: &str,
        client: &Nonce,
        server: &Nonce,
        params: &[&str],
        proof: &str,
    ) -> Result<bool, String> {
        let given = unhex(proof, "proof")?;
        Ok(self
            .transcript_mac(token, role, client, server, params)
            .verify_slice(&given)
            .is_ok())
    }
}

pub fn fresh_nonce() -> Result<Nonce, String> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n).map_err(|e| e.to_string())?;
    Ok(n)
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex text as bytes; Err names `what`.
pub fn unhex(s: &str, what: &str) -> Result<Vec<u8>, String> {
    let bad = || format!("{what} is not hex");
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return Err(bad());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| bad()))
        .collect()
}

pub fn nonce_from(s: &str) -> Result<Nonce, String> {
    unhex(s, "nonce")?
        .try_into()
        .map_err(|_| format!("nonce is not {NONCE_BYTES} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Protocol = Protocol {
        magic: b"AAAA",
        version: 1,
        domain: b"a",
        max_body: 16,
    };
    const B: Protocol = Protocol {
        magic: b"BBBB",
        version: 1,
        domain: b"b",
        max_body: 16,
    };

    #[test]
    fn proofs_are_bound_to_protocol_role_and_transcript() {
        let (c, s) = ([1u8; NONCE_BYTES], [2u8; NONCE_BYTES]);
        let p = A.proof("t", "client", &c, &s, &["x"]);
        assert_eq!(A.proof_matches("t", "client", &c, &s, &["x"], &p), Ok(true));
        assert_eq!(
            B.proof_matches("t", "client", &c, &s, &["x"], &p),
            Ok(false)
        );
        assert_eq!(
            A.proof_matches("t", "server", &c, &s, &["x"], &p),
            Ok(false)
        );
        assert_eq!(
            A.proof_matches("u", "client", &c, &s, &["x"], &p),
            Ok(false)
        );
        assert_eq!(
            A.proof_matches("t", "client", &s, &c, &["x"], &p),
            Ok(false)
        );
        assert_eq!(
            A.proof_matches("t", "client", &c, &s, &["x", ""], &p),
            Ok(false)
        );
        assert!(
            A.proof_matches("t", "client", &c, &s, &["x"], "zz")
                .is_err()
        );
        assert_eq!(nonce_from(&hex(&c)), Ok(c));
        assert!(nonce_from("00").is_err());
    }

    #[test]
    fn heads_are_checked() {
        let mut h = [0u8; 10];
        h[..4].copy_from_slice(b"AAAA");
        h[5] = 1;
        h[9] = 16;
        assert_eq!(A.decode_head(&h), Ok(16));
        h[9] = 17;
        assert_eq!(A.decode_head(&h), Err(HeadError::TooLarge(17)));
        h[5] = 2;
        assert_eq!(A.decode_head(&h), Err(HeadError::Version(2)));
        assert_eq!(B.decode_head(&h), Err(HeadError::BadMagic));
    }
}
