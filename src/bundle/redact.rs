//! Redaction of identifiers in a bundle: MAC addresses, GUIDs (node, system image, port GUIDs
//! inside GIDs), GPU UUIDs, serial numbers (NVML, PCIe Device Serial Number) and the hostname.
//!
//! Each value becomes a keyed hash in the same format (a MAC stays a MAC, a GID a GID), so every
//! parser and every join in gpudoctor works on the bundle and the bundle stays self-consistent:
//! the same value gives the same token everywhere in one bundle (the port GUID inside a GID
//! matches the node GUID token, the MAC inside a RoCE GID matches the netdev's address token).
//! The key is random per bundle and never written, so tokens cannot be reversed by trying the
//! small space of MACs of a known vendor. A site may instead give its own key
//! (`--redact-key-file`), so its bundles redact one value to one token and compare GPU by
//! GPU; the manifest then names a fingerprint of that key, never the key.
//!
//! Not redacted: IPv4/IPv6 network prefixes inside RoCE GIDs (the interface part is), PCI
//! addresses, driver and firmware versions. This module must not read files: it transforms bytes
//! the capture already holds.

use crate::nvml::NvmlSnapshot;
use serde::Serialize;
use siphasher::sip128::{Hasher128, SipHasher24};
use std::collections::BTreeMap;
use std::hash::Hasher;

/// The classes of identifier, as the manifest counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Mac,
    Guid,
    Uuid,
    Serial,
    Hostname,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Mac => "mac-address",
            Class::Guid => "guid",
            Class::Uuid => "gpu-uuid",
            Class::Serial => "serial-number",
            Class::Hostname => "hostname",
        }
    }
}

/// What was redacted, for the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RedactionRecord {
    pub enabled: bool,
    pub method: String,
    /// Distinct values replaced, per class.
    pub distinct_values: BTreeMap<String, usize>,
    /// Files (kernel paths, or bundle files such as nvml.json) that had something replaced.
    pub files: Vec<String>,
    /// What was deliberately left alone.
    pub not_redacted: Vec<String>,
}

pub struct Redactor {
    enabled: bool,
    key: (u64, u64),
    /// Set when the key is a site's own (`--redact-key-file`): its fingerprint.
    site_key: Option<String>,
    /// (class, normalized original) -> token.
    seen: BTreeMap<(Class, String), String>,
    /// Literal strings replaced wherever they appear (hostname, serials).
    literals: Vec<(String, String)>,
    files: Vec<String>,
}

/// A site's redaction key: 128 bits, written as 32 hex digits in a file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SiteKey((u64, u64));

impl std::fmt::Debug for SiteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key itself.
        write!(f, "SiteKey({})", self.fingerprint())
    }
}

impl SiteKey {
    /// Parse a key file's text: 32 hex digits (whitespace, a trailing newline and `:`/`-`
    /// separators allowed), nothing else.
    pub fn parse(text: &str) -> Result<SiteKey, String> {
        let hex: String = text
            .chars()
            .filter(|c| !c.is_whitespace() && *c != ':' && *c != '-')
            .collect();
        if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!(
                "a redaction key is 32 hex digits (128 bits); this file holds {} characters{}",
                hex.len(),
                if hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    ""
                } else {
                    " that are not all hex digits"
                }
            ));
        }
        let a = u64::from_str_radix(&hex[..16], 16).map_err(|e| e.to_string())?;
        let b = u64::from_str_radix(&hex[16..], 16).map_err(|e| e.to_string())?;
        if a == 0 && b == 0 {
            return Err("a redaction key of all zeros is not a secret".into());
        }
        Ok(SiteKey((a, b)))
    }

    /// 8 hex digits that name the key in a manifest (a keyed hash of a fixed string: it
    /// tells two keys apart and reveals nothing usable about the key).
    pub fn fingerprint(&self) -> String {
        let mut h = SipHasher24::new_with_keys(self.0.0, self.0.1);
        h.write(b"gpudoctor redaction key fingerprint");
        format!("{:08x}", h.finish() >> 32)
    }
}

impl Redactor {
    /// A redactor with a fresh random key (from std's per-process random hasher seed).
    pub fn new(enabled: bool) -> Self {
        use std::hash::{BuildHasher, RandomState};
        let a = RandomState::new().hash_one(0x9e37_79b9_7f4a_7c15_u64);
        let b = RandomState::new().hash_one(std::time::SystemTime::now());
        Self::with_key(enabled, (a, b))
    }

    /// A site's own key (`--redact-key-file`): the same value redacts to the same token in
    /// every bundle made with it.
    pub fn with_site_key(key: SiteKey) -> Self {
        let mut r = Self::with_key(true, key.0);
        r.site_key = Some(key.fingerprint());
        r
    }

    /// A fixed key, for tests.
    pub fn with_key(enabled: bool, key: (u64, u64)) -> Self {
        Redactor {
            enabled,
            key,
            site_key: None,
            seen: BTreeMap::new(),
            literals: Vec::new(),
            files: Vec::new(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn hash(&self, class: Class, value: &str) -> [u8; 16] {
        let mut h = SipHasher24::new_with_keys(self.key.0, self.key.1);
        h.write(class.name().as_bytes());
        h.write_u8(0);
        h.write(value.as_bytes());
        h.finish128().as_bytes()
    }

    fn remember(&mut self, class: Class, original: &str, token: &str) {
        self.seen
            .entry((class, original.to_string()))
            .or_insert_with(|| token.to_string());
    }

    fn mac_bytes(&mut self, mac: [u8; 6]) -> [u8; 6] {
        if mac.iter().all(|&b| b == 0) || mac.iter().all(|&b| b == 0xff) || mac[0] & 1 == 1 {
            return mac; // null, broadcast and multicast addresses identify nothing
        }
        let orig = hex_join(&mac, 1, ":");
        let h = self.hash(Class::Mac, &orig);
        let mut out = [0u8; 6];
        out.copy_from_slice(&h[..6]);
        out[0] = (out[0] & 0xfc) | 0x02; // locally administered unicast
        self.remember(Class::Mac, &orig, &hex_join(&out, 1, ":"));
        out
    }

    fn guid_bytes(&mut self, g: [u8; 8]) -> [u8; 8] {
        if g.iter().all(|&b| b == 0) || g.iter().all(|&b| b == 0xff) {
            return g;
        }
        let orig = hex_join(&g, 2, ":");
        let h = self.hash(Class::Guid, &orig);
        let mut out = [0u8; 8];
        out.copy_from_slice(&h[..8]);
        self.remember(Class::Guid, &orig, &hex_join(&out, 2, ":"));
        out
    }

    /// The interface half of a GID: an EUI-64 made from a MAC follows the MAC's token, an
    /// IPv4-mapped GID (RoCE v2) is an address and left alone, anything else is a port GUID.
    fn gid_bytes(&mut self, g: [u8; 16]) -> [u8; 16] {
        if g[0] == 0xff || g.iter().all(|&b| b == 0) {
            return g; // multicast (IPoIB broadcast) or empty
        }
        if g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff {
            return g;
        }
        let mut out = g;
        if g[11] == 0xff && g[12] == 0xfe {
            let mac = [g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]];
            let m = self.mac_bytes(mac);
            out[8..].copy_from_slice(&[m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
        } else {
            let mut iid = [0u8; 8];
            iid.copy_from_slice(&g[8..]);
            out[8..].copy_from_slice(&self.guid_bytes(iid));
        }
        out
    }

    fn uuid(&mut self, prefix: &str, hex32: &str) -> String {
        let h = self.hash(Class::Uuid, &hex32.to_ascii_lowercase());
        let x = hex_join(&h, 16, "");
        let token = format!(
            "{prefix}{}-{}-{}-{}-{}",
            &x[0..8],
            &x[8..12],
            &x[12..16],
            &x[16..20],
            &x[20..32]
        );
        self.remember(Class::Uuid, &hex32.to_ascii_lowercase(), &token);
        token
    }

    fn literal(&mut self, class: Class, value: &str) -> String {
        let h = self.hash(class, value);
        let token = match class {
            Class::Hostname => format!("host-{}", hex_join(&h[..5], 5, "")),
            _ => format!("redacted-{}", hex_join(&h[..6], 6, "")),
        };
        self.remember(class, value, &token);
        if !self.literals.iter().any(|(o, _)| o == value) {
            self.literals.push((value.to_string(), token.clone()));
            // Longest first so a serial inside another serial is replaced whole.
            self.literals.sort_by_key(|b| std::cmp::Reverse(b.0.len()));
        }
        token
    }

    /// Register the hostname and return its token (None with redaction off). A name long and
    /// specific enough is then replaced wherever it appears; a short or generic one ("vm",
    /// "localhost") would match inside unrelated text, so only the manifest's field is hidden.
    pub fn hostname(&mut self, name: &str) -> Option<String> {
        let name = name.trim();
        if !self.enabled || name.is_empty() {
            return None;
        }
        if name.len() < 3 || name == "localhost" {
            let token = format!(
                "host-{}",
                hex_join(&self.hash(Class::Hostname, name)[..5], 5, "")
            );
            self.remember(Class::Hostname, name, &token);
            return Some(token);
        }
        Some(self.literal(Class::Hostname, name))
    }

    /// Redact the NVML snapshot's identifiers (UUIDs, serials) in place.
    pub fn nvml(&mut self, snap: &mut NvmlSnapshot) {
        if !self.enabled {
            return;
        }
        let mut changed = false;
        for g in &mut snap.gpus {
            if let Some(s) = g.serial.as_deref().filter(|s| !s.trim().is_empty()) {
                let t = if s.len() >= 4 {
                    self.literal(Class::Serial, s)
                } else {
                    "redacted".to_string()
                };
                g.serial = Some(t);
                changed = true;
            }
            if let Some(u) = g.uuid.clone() {
                let r = self.text(&u);
                if r != u {
                    g.uuid = Some(r);
                } else {
                    // Not in the GPU-8-4-4-4-12 form: hash the whole string.
                    g.uuid = Some(self.literal(Class::Uuid, &u));
                }
                changed = true;
            }
        }
        if changed {
            self.files.push("nvml.json".to_string());
        }
    }

    /// Redact one captured file (kernel path, contents). Text is scanned for identifiers; PCI
    /// config space has its Device Serial Number capability replaced.
    pub fn file(&mut self, kpath: &str, bytes: &mut Vec<u8>) {
        if !self.enabled {
            return;
        }
        let before = bytes.clone();
        if kpath.ends_with("/config") && kpath.starts_with("/sys/devices/") {
            self.config_space(bytes);
        } else if let Ok(s) = std::str::from_utf8(bytes) {
            let r = self.text(s);
            *bytes = r.into_bytes();
        }
        if *bytes != before {
            self.files.push(kpath.to_string());
        }
    }

    /// PCIe extended capability 0x0003 (Device Serial Number, PCIe Base Spec 6.0 section 7.9.3):
    /// 64-bit serial at offset +4 (lower dword) and +8 (upper dword).
    fn config_space(&mut self, b: &mut [u8]) {
        let mut off = 0x100usize;
        for _ in 0..64 {
            if off < 0x100 || off + 12 > b.len() {
                return;
            }
            let hdr = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
            if hdr == 0 || hdr == 0xffff_ffff {
                return;
            }
            if hdr & 0xffff == 0x0003 {
                let lo = u32::from_le_bytes([b[off + 4], b[off + 5], b[off + 6], b[off + 7]]);
                let hi = u32::from_le_bytes([b[off + 8], b[off + 9], b[off + 10], b[off + 11]]);
                let v = ((hi as u64) << 32) | lo as u64;
                let t = u64::from_be_bytes(self.guid_bytes(v.to_be_bytes()));
                b[off + 4..off + 8].copy_from_slice(&(t as u32).to_le_bytes());
                b[off + 8..off + 12].copy_from_slice(&((t >> 32) as u32).to_le_bytes());
                return;
            }
            off = (hdr >> 20) as usize & 0xffc;
        }
    }

    /// Replace identifiers in text: colon-separated hex runs by shape (6x2 MAC, 20x2 IPoIB
    /// hardware address, 4x4 GUID, 8x4 GID), `GPU-`/`MIG-` UUIDs, and registered literals.
    pub fn text(&mut self, s: &str) -> String {
        if !self.enabled {
            return s.to_string();
        }
        let mut s = s.to_string();
        for (orig, token) in self.literals.clone() {
            if s.contains(&orig) {
                s = s.replace(&orig, &token);
            }
        }
        let b = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':' || c == b'-';
        while i < b.len() {
            let at_start = i == 0 || !word(b[i - 1]);
            if at_start && (s[i..].starts_with("GPU-") || s[i..].starts_with("MIG-")) {
                let cand = &s[i + 4..];
                if let Some(hex) = uuid_hex(cand)
                    && cand.as_bytes().get(36).is_none_or(|&c| !word(c))
                {
                    let t = self.uuid(&s[i..i + 4], &hex);
                    out.push_str(&t);
                    i += 40;
                    continue;
                }
            }
            if at_start && b[i].is_ascii_hexdigit() {
                let mut j = i;
                while j < b.len() && (b[j].is_ascii_hexdigit() || b[j] == b':') {
                    j += 1;
                }
                let ends_clean = j == b.len() || !word(b[j]);
                if ends_clean && let Some(r) = self.hex_run(&s[i..j]) {
                    out.push_str(&r);
                    i = j;
                    continue;
                }
                // MACs written with dashes (PXE's BOOTIF=01-xx-xx-xx-xx-xx-xx on the command line).
                let mut k = i;
                while k < b.len() && (b[k].is_ascii_hexdigit() || b[k] == b'-') {
                    k += 1;
                }
                if (k == b.len() || !word(b[k]))
                    && let Some(r) = self.dashed_mac(&s[i..k])
                {
                    out.push_str(&r);
                    i = k;
                    continue;
                }
                out.push_str(&s[i..j]);
                i = j;
                continue;
            }
            let ch = s[i..].chars().next().unwrap_or('\u{fffd}');
            out.push(ch);
            i += ch.len_utf8().max(1);
        }
        out
    }

    fn dashed_mac(&mut self, run: &str) -> Option<String> {
        let groups: Vec<&str> = run.split('-').collect();
        if groups.iter().any(|g| g.len() != 2) {
            return None;
        }
        let (prefix, mac) = match groups.len() {
            6 => ("", &groups[..]),
            7 if groups[0] == "01" => ("01-", &groups[1..]),
            _ => return None,
        };
        let mut m = [0u8; 6];
        for (d, g) in m.iter_mut().zip(mac) {
            *d = u8::from_str_radix(g, 16).ok()?;
        }
        let t = hex_join(&self.mac_bytes(m), 1, "-");
        let t = if run.chars().any(|c| c.is_ascii_uppercase()) {
            t.to_ascii_uppercase()
        } else {
            t
        };
        Some(format!("{prefix}{t}"))
    }

    fn hex_run(&mut self, run: &str) -> Option<String> {
        let groups: Vec<&str> = run.split(':').collect();
        let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        let bytes = |groups: &[&str]| -> Option<Vec<u8>> {
            let joined: String = groups.concat();
            (0..joined.len())
                .step_by(2)
                .map(|k| u8::from_str_radix(joined.get(k..k + 2)?, 16).ok())
                .collect()
        };
        let upper = run.chars().any(|c| c.is_ascii_uppercase());
        let fix = |s: String| if upper { s.to_ascii_uppercase() } else { s };
        if groups.len() == 6 && lens.iter().all(|&l| l == 2) {
            let v = bytes(&groups)?;
            let mut m = [0u8; 6];
            m.copy_from_slice(&v);
            return Some(fix(hex_join(&self.mac_bytes(m), 1, ":")));
        }
        if groups.len() == 20 && lens.iter().all(|&l| l == 2) {
            let v = bytes(&groups)?;
            let mut g = [0u8; 16];
            g.copy_from_slice(&v[4..]);
            let mut out = v[..4].to_vec();
            out.extend_from_slice(&self.gid_bytes(g));
            return Some(fix(hex_join(&out, 1, ":")));
        }
        if groups.len() == 4 && lens.iter().all(|&l| l == 4) {
            let v = bytes(&groups)?;
            let mut g = [0u8; 8];
            g.copy_from_slice(&v);
            return Some(fix(hex_join(&self.guid_bytes(g), 2, ":")));
        }
        if groups.len() == 8 && lens.iter().all(|&l| l == 4) {
            let v = bytes(&groups)?;
            let mut g = [0u8; 16];
            g.copy_from_slice(&v);
            return Some(fix(hex_join(&self.gid_bytes(g), 2, ":")));
        }
        None
    }

    /// Redact every string in a JSON value (a report), in place.
    pub fn json(&mut self, v: &mut serde_json::Value) {
        if !self.enabled {
            return;
        }
        match v {
            serde_json::Value::String(s) => {
                let r = self.text(s);
                if r != *s {
                    *s = r;
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| self.json(x)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| self.json(x)),
            _ => {}
        }
    }

    /// What was done, for the manifest.
    pub fn record(&self) -> RedactionRecord {
        let mut distinct = BTreeMap::new();
        for (class, _) in self.seen.keys() {
            *distinct.entry(class.name().to_string()).or_insert(0) += 1;
        }
        let mut files = self.files.clone();
        files.sort();
        files.dedup();
        RedactionRecord {
            enabled: self.enabled,
            method: if let (true, Some(fp)) = (self.enabled, &self.site_key) {
                format!(
                    "SipHash-2-4 keyed with the site key of fingerprint {fp} (--redact-key-file); the same value gives the same token in every bundle made with that key; values keep their format (MAC, GUID, GID, UUID)"
                )
            } else if self.enabled {
                "SipHash-2-4 keyed with a random per-bundle key that is not kept; values keep their format (MAC, GUID, GID, UUID)".into()
            } else {
                "none (--no-redact)".into()
            },
            distinct_values: distinct,
            files,
            not_redacted: if self.enabled {
                vec![
                    "IP addresses and network prefixes inside RoCE GIDs".into(),
                    "PCI addresses, driver, firmware and kernel versions".into(),
                ]
            } else {
                vec!["everything (--no-redact)".into()]
            },
        }
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` at the start of `s` -> its 32 hex digits.
fn uuid_hex(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if b.len() < 36 {
        return None;
    }
    let mut hex = String::with_capacity(32);
    for (k, &c) in b[..36].iter().enumerate() {
        if matches!(k, 8 | 13 | 18 | 23) {
            if c != b'-' {
                return None;
            }
        } else if c.is_ascii_hexdigit() {
            hex.push(c as char);
        } else {
            return None;
        }
    }
    Some(hex)
}

/// Hex digits of `b`, `per` bytes to a group, groups joined by `sep`.
fn hex_join(b: &[u8], per: usize, sep: &str) -> String {
    b.chunks(per.max(1))
        .map(|c| c.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .collect::<Vec<_>>()
        .join(sep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Redactor {
        Redactor::with_key(true, (1, 2))
    }

    #[test]
    fn mac_keeps_format_and_is_stable() {
        let mut r = r();
        let a = r.text("0c:42:a1:b3:4c:5e\n");
        assert_ne!(a, "0c:42:a1:b3:4c:5e\n");
        assert_eq!(a.len(), "0c:42:a1:b3:4c:5e\n".len());
        assert_eq!(a, r.text("0c:42:a1:b3:4c:5e\n"));
        assert_eq!(r.text("00:00:00:00:00:00"), "00:00:00:00:00:00");
        assert_eq!(r.text("ff:ff:ff:ff:ff:ff"), "ff:ff:ff:ff:ff:ff");
        // The same MAC with dashes (PXE BOOTIF) gets the same token.
        let boot = r.text("BOOTIF=01-0c-42-a1-b3-4c-5e quiet");
        assert_eq!(
            boot,
            format!("BOOTIF=01-{} quiet", a.trim().replace(':', "-"))
        );
        // A different key gives different tokens.
        let mut other = Redactor::with_key(true, (3, 4));
        assert_ne!(other.text("0c:42:a1:b3:4c:5e\n"), a);
    }

    #[test]
    fn gid_interface_follows_guid_and_mac() {
        let mut r = r();
        let guid = r.text("0c42:a103:00b3:4c5e");
        let gid = r.text("fe80:0000:0000:0000:0c42:a103:00b3:4c5e");
        assert!(gid.starts_with("fe80:0000:0000:0000:"), "{gid}");
        assert_eq!(&gid[20..], guid);
        // RoCE v1 link-local GID from MAC 0c:42:a1:b3:4c:5e.
        let mac = r.text("0c:42:a1:b3:4c:5e");
        let gid = r.text("fe80:0000:0000:0000:0e42:a1ff:feb3:4c5e");
        let m: Vec<u8> = mac
            .split(':')
            .map(|x| u8::from_str_radix(x, 16).unwrap())
            .collect();
        let expect = format!(
            "fe80:0000:0000:0000:{:02x}{:02x}:{:02x}ff:fe{:02x}:{:02x}{:02x}",
            m[0] ^ 2,
            m[1],
            m[2],
            m[3],
            m[4],
            m[5]
        );
        assert_eq!(gid, expect);
        // IPv4-mapped RoCE v2 GIDs are addresses, not identifiers of the hardware.
        let v4 = "0000:0000:0000:0000:0000:ffff:0a00:0001";
        assert_eq!(r.text(v4), v4);
    }

    #[test]
    fn uuids_and_literals() {
        let mut r = r();
        let t = r.text("GPU UUID: \t GPU-1b2c3d4e-0000-1111-2222-333344445555\n");
        assert!(t.starts_with("GPU UUID: \t GPU-"), "{t}");
        assert!(!t.contains("1b2c3d4e"), "{t}");
        assert_eq!(t.len(), 53);
        r.hostname("gpu-node-17");
        assert_eq!(
            r.text("mlx5_0 gpu-node-17"),
            format!("mlx5_0 {}", r.text("gpu-node-17"))
        );
        assert!(!r.text("gpu-node-17").contains("node-17"));
        let t = r.hostname("vm").unwrap();
        assert!(t.starts_with("host-"), "{t}");
        assert_eq!(r.text("vm kvm"), "vm kvm");
    }

    #[test]
    fn leaves_other_text_alone() {
        let mut r = r();
        for s in [
            "0000:00:06.0",
            "12:34:56",
            "PCI_SLOT_NAME=0000:17:00.0",
            "abc:def0:1234:5678",
            "nvidia 1234 0 - Live 0x0000000000000000",
            "GPU-REDACTED-UUID",
            "16.0 GT/s PCIe",
            "café 0c:42",
            "6.18.44-fc-v657-gpu",
            "2026-11-21",
        ] {
            assert_eq!(r.text(s), s);
        }
        let mut off = Redactor::with_key(false, (1, 2));
        assert_eq!(off.text("0c:42:a1:b3:4c:5e"), "0c:42:a1:b3:4c:5e");
    }

    #[test]
    fn device_serial_number_in_config_space() {
        let mut r = r();
        let mut b = vec![0u8; 4096];
        // DSN capability at 0x100, next = 0.
        b[0x100..0x104].copy_from_slice(&0x0001_0003u32.to_le_bytes());
        b[0x104..0x10c].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut c = b.clone();
        r.file("/sys/devices/pci0000:00/0000:00:01.0/config", &mut c);
        assert_ne!(c[0x104..0x10c], b[0x104..0x10c]);
        assert_eq!(c[..0x104], b[..0x104]);
        assert_eq!(c[0x10c..], b[0x10c..]);
        assert!(r.record().files.len() == 1);
    }

    #[test]
    fn site_keys_parse_strictly_and_redact_alike_across_bundles() {
        let k = SiteKey::parse("00112233445566778899aabbccddeeff\n").unwrap();
        assert_eq!(
            k,
            SiteKey::parse("00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF").unwrap()
        );
        assert!(
            SiteKey::parse("0011")
                .unwrap_err()
                .contains("32 hex digits")
        );
        assert!(
            SiteKey::parse(&"zz".repeat(16))
                .unwrap_err()
                .contains("not all hex")
        );
        assert!(
            SiteKey::parse(&"0".repeat(32))
                .unwrap_err()
                .contains("all zeros")
        );
        // Two bundles with the site key: the same token; with random keys: different ones.
        let mac = "b8:3f:d2:00:11:22";
        let one = Redactor::with_site_key(k).text(mac);
        let two = Redactor::with_site_key(k).text(mac);
        assert_eq!(one, two);
        assert_ne!(one, mac);
        assert_ne!(Redactor::new(true).text(mac), Redactor::new(true).text(mac));
        // The manifest names the fingerprint, never the key.
        let rec = Redactor::with_site_key(k).record();
        assert!(rec.method.contains(&k.fingerprint()));
        assert!(!rec.method.to_lowercase().contains("00112233"));
        assert!(!format!("{k:?}").contains("00112233"));
    }
}
