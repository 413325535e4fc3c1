//! PCI vocabulary: addresses (BDF), class codes, link speeds, and config-space parsing.
//!
//! Pure parsers only: nothing here touches the filesystem. Every parser takes untrusted text or
//! bytes from a tree and returns a typed error instead of panicking.

pub mod config;
pub mod ids;

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A PCI function address: domain, bus, device, function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bdf {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a PCI address (expected DDDD:BB:DD.F)")]
pub struct BdfError(pub String);

impl Bdf {
    /// The NVML form: 8-digit domain, upper-case hex (`00000000:1A:00.0`).
    pub fn nvml(&self) -> String {
        format!(
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }

    /// Same physical device (slot), any function.
    pub fn same_slot(&self, other: &Bdf) -> bool {
        self.domain == other.domain && self.bus == other.bus && self.device == other.device
    }
}

impl fmt::Display for Bdf {
    /// The sysfs form: 4-digit domain (more if needed), lower-case hex (`0000:1a:00.0`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl FromStr for Bdf {
    type Err = BdfError;
    /// Accepts `0000:1a:00.0`, `00000000:1A:00.0` (NVML), and `1a:00.0` (domain 0).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Bdf::parse(s).ok_or_else(|| BdfError(s.to_string()))
    }
}

impl Bdf {
    /// `from_str` without the error's copy of the text: for callers that only ask whether a
    /// name is an address (a report's subjects, thousands on a large host). Surrounding
    /// whitespace is ignored; a domain of up to 8 hex digits is optional.
    pub fn parse(s: &str) -> Option<Bdf> {
        fn hex(x: &[u8], max_len: usize) -> Option<u32> {
            if x.is_empty() || x.len() > max_len {
                return None;
            }
            x.iter()
                .try_fold(0u32, |v, &c| Some(v << 4 | char::from(c).to_digit(16)?))
        }
        let t = s.trim().as_bytes();
        let (dom, rest) = match t.iter().filter(|&&c| c == b':').count() {
            2 => {
                let i = t.iter().position(|&c| c == b':')?;
                (&t[..i], &t[i + 1..])
            }
            1 => (&b"0"[..], t),
            _ => return None,
        };
        let i = rest.iter().position(|&c| c == b':')?;
        let (bus, devfn) = (&rest[..i], &rest[i + 1..]);
        let j = devfn.iter().position(|&c| c == b'.')?;
        let (dev, func) = (&devfn[..j], &devfn[j + 1..]);
        let domain = hex(dom, 8)?;
        let bus = hex(bus, 2)?;
        let device = hex(dev, 2)?;
        let function = hex(func, 1)?;
        if device > 0x1f || function > 7 {
            return None;
        }
        Some(Bdf {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl Serialize for Bdf {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Bdf {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Parse a sysfs hex attribute such as `0x030200` or `0x10de`.
pub fn parse_hex(s: &str) -> Option<u32> {
    let t = s.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if t.is_empty() || t.len() > 8 {
        return None;
    }
    u32::from_str_radix(t, 16).ok()
}

/// The widths a PCIe link can train to or advertise (PCI Express Base 6.0, 7.5.3.6 Link
/// Capabilities Max Link Width; x12 and x32 exist up to 5.0). Anything else read from a register
/// or a file (x63 is what Link Status 0xffff, a dead device, says) is not a fact.
pub const LINK_WIDTHS: [u8; 7] = [1, 2, 4, 8, 12, 16, 32];

/// The newest generation a device can report: Gen6, 64 GT/s (PCI Express Base 6.0). Gen7 and
/// up (Link Status of a dead device says "Gen15") are not facts.
pub const MAX_GEN: u8 = 6;

pub fn valid_width(w: u8) -> bool {
    LINK_WIDTHS.contains(&w)
}

pub fn valid_gen(g: u8) -> bool {
    (1..=MAX_GEN).contains(&g)
}

/// PCIe generation from a sysfs link speed such as `32.0 GT/s PCIe` or `8.0 GT/s`.
/// Returns None for `Unknown` and anything not a known rate (never a default).
pub fn gen_from_speed(s: &str) -> Option<u8> {
    let num = s.split_whitespace().next()?;
    let v: f64 = num.parse().ok()?;
    let g = [
        (2.5, 1u8),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
    ];
    g.iter()
        .find(|(gt, _)| (v - gt).abs() < 0.01)
        .map(|(_, gen_)| *gen_)
}

/// GT/s per lane for a generation.
pub fn speed_of_gen(generation: u8) -> Option<f64> {
    match generation {
        1 => Some(2.5),
        2 => Some(5.0),
        3 => Some(8.0),
        4 => Some(16.0),
        5 => Some(32.0),
        6 => Some(64.0),
        7 => Some(128.0),
        _ => None,
    }
}

/// Usable bandwidth per direction in GB/s (10^9 B/s) after line encoding, before protocol
/// overhead: Gen1/2 use 8b/10b, Gen3-5 128b/130b, Gen6+ FLIT (242/256). PCIe Base Spec 6.0.
pub fn link_gbps_per_direction(generation: u8, width: u8) -> Option<f64> {
    let gts = speed_of_gen(generation)?;
    let eff = match generation {
        1 | 2 => 8.0 / 10.0,
        3..=5 => 128.0 / 130.0,
        _ => 242.0 / 256.0,
    };
    Some(gts * eff * f64::from(width) / 8.0)
}

/// A link width file: `16`, or `0` on some kernels for "unknown"/down.
pub fn parse_width(s: &str) -> Option<u8> {
    let v: u8 = s.trim().parse().ok()?;
    Some(v).filter(|w| valid_width(*w))
}

/// PCI class code, 24 bits: base class, subclass, programming interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassCode(pub u32);

impl ClassCode {
    pub fn base(self) -> u8 {
        (self.0 >> 16) as u8
    }
    pub fn sub(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// Base + subclass, e.g. 0x0302.
    pub fn base_sub(self) -> u16 {
        (self.0 >> 8) as u16
    }
    pub fn is_bridge_pci(self) -> bool {
        self.base_sub() == 0x0604 || self.base_sub() == 0x0609
    }
    pub fn is_host_bridge(self) -> bool {
        self.base_sub() == 0x0600
    }
    pub fn is_display(self) -> bool {
        matches!(self.base_sub(), 0x0300 | 0x0302)
    }
    pub fn is_network(self) -> bool {
        matches!(self.base_sub(), 0x0200 | 0x0207)
    }
}

pub const VENDOR_NVIDIA: u16 = 0x10de;

/// Natural order for names like mlx5_2 < mlx5_10 (digit runs compare numerically): run by
/// run, digit runs by value (leading zeros aside) and other runs as text; then the name with
/// fewer runs first, then plain text order. Allocates nothing (a large host's report sorts
/// tens of thousands of subjects).
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut ca, mut cb) = (Runs(a), Runs(b));
    loop {
        match (ca.next(), cb.next()) {
            (Some(x), Some(y)) => {
                let o = if x.0 && y.0 {
                    let xt = x.1.trim_start_matches('0');
                    let yt = y.1.trim_start_matches('0');
                    xt.len().cmp(&yt.len()).then_with(|| xt.cmp(yt))
                } else {
                    x.1.cmp(y.1)
                };
                if o != std::cmp::Ordering::Equal {
                    return o;
                }
            }
            (x, y) => {
                let rest =
                    |first: Option<(bool, &str)>, more: Runs| first.map_or(0, |_| 1 + more.count());
                return rest(x, ca).cmp(&rest(y, cb)).then_with(|| a.cmp(b));
            }
        }
    }
}

/// The runs of digits and of other characters of a name, each with whether it is digits.
struct Runs<'a>(&'a str);

impl<'a> Iterator for Runs<'a> {
    type Item = (bool, &'a str);
    fn next(&mut self) -> Option<(bool, &'a str)> {
        let first = *self.0.as_bytes().first()?;
        let digits = first.is_ascii_digit();
        let end = self
            .0
            .bytes()
            .position(|c| c.is_ascii_digit() != digits)
            .unwrap_or(self.0.len());
        let (run, rest) = self.0.split_at(end);
        self.0 = rest;
        Some((digits, run))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bdf_both_forms() {
        let a: Bdf = "0000:1a:00.0".parse().unwrap();
        let b: Bdf = "00000000:1A:00.0".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.bus, 0x1a);
        assert_eq!(a.to_string(), "0000:1a:00.0");
        assert_eq!(a.nvml(), "00000000:1A:00.0");
        let c: Bdf = "1b:00.1".parse().unwrap();
        assert_eq!(c.to_string(), "0000:1b:00.1");
        let d: Bdf = "10000:e1:1f.7".parse().unwrap();
        assert_eq!(d.to_string(), "10000:e1:1f.7");
        assert_eq!(d.to_string().parse::<Bdf>().unwrap(), d);
    }

    /// The parser `Bdf::parse` replaced, kept as the reference it is held to.
    fn split_parser(s: &str) -> Option<Bdf> {
        let t = s.trim();
        let (dom, rest) = match t.matches(':').count() {
            2 => t.split_once(':')?,
            1 => ("0", t),
            _ => return None,
        };
        let (bus, devfn) = rest.split_once(':')?;
        let (dev, func) = devfn.split_once('.')?;
        let hex = |x: &str, max_len: usize| {
            if x.is_empty() || x.len() > max_len || !x.chars().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(x, 16).ok()
        };
        let (domain, bus, device, function) =
            (hex(dom, 8)?, hex(bus, 2)?, hex(dev, 2)?, hex(func, 1)?);
        (device <= 0x1f && function <= 7).then_some(Bdf {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }

    /// The order `natural_cmp` replaced (runs collected into vectors), kept as its reference.
    fn natural_by_vectors(a: &str, b: &str) -> std::cmp::Ordering {
        fn chunks(s: &str) -> Vec<(bool, &str)> {
            let mut out = Vec::new();
            let mut start = 0;
            let bytes = s.as_bytes();
            for i in 1..=bytes.len() {
                if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                    out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                    start = i;
                }
            }
            out
        }
        let (ca, cb) = (chunks(a), chunks(b));
        for (x, y) in ca.iter().zip(cb.iter()) {
            let o = if x.0 && y.0 {
                let xt = x.1.trim_start_matches('0');
                let yt = y.1.trim_start_matches('0');
                xt.len().cmp(&yt.len()).then_with(|| xt.cmp(yt))
            } else {
                x.1.cmp(y.1)
            };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        ca.len().cmp(&cb.len()).then_with(|| a.cmp(b))
    }

    #[test]
    fn bdf_rejects() {
        for s in [
            "",
            "0000:1a:00",
            "0000:1g:00.0",
            "0000:1a:20.0",
            "0000:1a:00.8",
            "pci0000:00",
            "0000:1a:00.0.1",
            "000000000:1a:00.0",
            ":::",
        ] {
            assert!(s.parse::<Bdf>().is_err(), "{s}");
        }
    }

    #[test]
    fn speeds() {
        assert_eq!(gen_from_speed("32.0 GT/s PCIe"), Some(5));
        assert_eq!(gen_from_speed("2.5 GT/s PCIe"), Some(1));
        assert_eq!(gen_from_speed("16.0 GT/s"), Some(4));
        assert_eq!(gen_from_speed("Unknown"), None);
        assert_eq!(gen_from_speed("3.0 GT/s"), None);
        // Past what a device can report: not a generation.
        assert_eq!(gen_from_speed("128.0 GT/s PCIe"), None);
        assert_eq!(parse_width("16"), Some(16));
        assert_eq!(parse_width("12"), Some(12));
        for w in ["0", "3", "63", "255", "-1", "x16"] {
            assert_eq!(parse_width(w), None, "{w}");
        }
        let g5 = link_gbps_per_direction(5, 16).unwrap();
        assert!((g5 - 63.015).abs() < 0.01, "{g5}");
    }

    #[test]
    fn natural() {
        let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_1", "mlx5_0", "mlx5_11", "irdma0"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            vec!["irdma0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10", "mlx5_11"]
        );
    }

    proptest! {
        #[test]
        fn bdf_roundtrip(dom in 0u32..0x10000, bus: u8, dev in 0u8..32, func in 0u8..8) {
            let b = Bdf { domain: dom, bus, device: dev, function: func };
            prop_assert_eq!(b.to_string().parse::<Bdf>().unwrap(), b);
            prop_assert_eq!(b.nvml().parse::<Bdf>().unwrap(), b);
        }

        /// Natural order without vectors is the order with them.
        #[test]
        fn natural_cmp_matches_the_vector_order(a in "[a-c0-2_/\u{e9}]{0,8}", b in "[a-c0-2_/\u{e9}]{0,8}") {
            prop_assert_eq!(natural_cmp(&a, &b), natural_by_vectors(&a, &b));
        }

        /// The byte parser accepts exactly what the earlier parser, on `str` splits, accepted.
        #[test]
        fn bdf_parse_matches_the_split_parser(s in "[ 0-9a-fA-Fg:.\u{e9}]{0,16}") {
            prop_assert_eq!(Bdf::parse(&s), split_parser(&s));
        }

        #[test]
        fn parsers_never_panic(s in ".{0,40}") {
            let _ = s.parse::<Bdf>();
            let _ = parse_hex(&s);
            let _ = gen_from_speed(&s);
            let _ = parse_width(&s);
            let _ = natural_cmp(&s, "mlx5_1");
        }
    }
}
