//! PCI configuration space parsing (PCI Express Base Specification, chapter 7).
//!
//! The kernel shows unprivileged readers only the first 64 bytes of `config` (256 on some
//! drivers); root sees 4096. A capability that lies beyond what was read is "not readable",
//! which is different from "absent": callers must keep that distinction.

use serde::Serialize;

pub const CAP_ID_PCIE: u8 = 0x10;
pub const EXT_CAP_ID_AER: u16 = 0x0001;
pub const EXT_CAP_ID_ACS: u16 = 0x000d;

/// How much of config space we have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Coverage {
    /// Fewer than 64 bytes: not even the header (truncated or garbage).
    Truncated,
    /// Header only (the kernel's unprivileged view).
    Header,
    /// Standard space (256 bytes), no extended capabilities.
    Standard,
    /// All 4096 bytes: extended capabilities readable.
    Extended,
}

impl Coverage {
    pub fn of(len: usize) -> Self {
        match len {
            0..=63 => Coverage::Truncated,
            64..=255 => Coverage::Header,
            256..=4095 => Coverage::Standard,
            _ => Coverage::Extended,
        }
    }
}

/// PCIe Device/Port Type (PCIe Capabilities register bits 7:4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PortType {
    Endpoint,
    LegacyEndpoint,
    RootPort,
    SwitchUpstream,
    SwitchDownstream,
    PcieToPciBridge,
    PciToPcieBridge,
    RootComplexIntegrated,
    RootComplexEventCollector,
    Other(u8),
}

impl PortType {
    fn from_bits(v: u8) -> Self {
        match v {
            0 => PortType::Endpoint,
            1 => PortType::LegacyEndpoint,
            4 => PortType::RootPort,
            5 => PortType::SwitchUpstream,
            6 => PortType::SwitchDownstream,
            7 => PortType::PcieToPciBridge,
            8 => PortType::PciToPcieBridge,
            9 => PortType::RootComplexIntegrated,
            10 => PortType::RootComplexEventCollector,
            o => PortType::Other(o),
        }
    }
}

/// What the PCI Express capability says. A link field outside what a link can report (a width
/// not in `pci::LINK_WIDTHS`, a speed outside Gen1..=`pci::MAX_GEN`: a dead or absent device
/// reads all ones, Link Status 0xffff would be "x63 Gen15") is None; the raw registers stay
/// here so the reader can say what was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PcieCap {
    pub offset: u16,
    pub port_type: PortType,
    /// Max Read Request Size in bytes (Device Control bits 14:12).
    pub max_read_request_bytes: u32,
    /// Max Payload Size in bytes (Device Control bits 7:5).
    pub max_payload_bytes: u32,
    /// Enable Relaxed Ordering (Device Control bit 4).
    pub relaxed_ordering: bool,
    /// Link Capabilities: Max Link Speed (as a generation) and Max Link Width.
    pub link_max_gen: Option<u8>,
    pub link_max_width: Option<u8>,
    /// Link Status: current speed and negotiated width.
    pub link_cur_gen: Option<u8>,
    pub link_cur_width: Option<u8>,
    /// The Link Capabilities and Link Status registers as read.
    pub link_caps: u32,
    pub link_status: u16,
}

/// Access Control Services extended capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Acs {
    pub offset: u16,
    pub capability: u16,
    pub control: u16,
}

impl Acs {
    pub const SOURCE_VALIDATION: u16 = 0x01;
    pub const TRANSLATION_BLOCKING: u16 = 0x02;
    pub const P2P_REQUEST_REDIRECT: u16 = 0x04;
    pub const P2P_COMPLETION_REDIRECT: u16 = 0x08;
    pub const UPSTREAM_FORWARDING: u16 = 0x10;

    /// Control bits that send peer-to-peer traffic up through the root complex.
    pub fn redirect_bits(&self) -> u16 {
        self.control
            & (Self::P2P_REQUEST_REDIRECT
                | Self::P2P_COMPLETION_REDIRECT
                | Self::UPSTREAM_FORWARDING)
    }
}

/// The AER capability's status and mask registers (PCIe Base 6.0, 7.8.4.2-7.8.4.6). A status
/// bit is set when the function detects that error, masked or not (the mask only stops the
/// report), and stays set until software writes 1 to it: where the kernel handles AER natively
/// it clears them after logging, so clear bits there say nothing; where it does not (a guest
/// without native AER control keeps no `aer_dev_*` counters), they are the only record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AerRegs {
    pub offset: u16,
    pub uncorrectable_status: u32,
    pub uncorrectable_mask: u32,
    pub uncorrectable_severity: u32,
    pub correctable_status: u32,
    pub correctable_mask: u32,
}

/// Uncorrectable error status bits by name, as lspci prints them (PCIe Base 6.0, 7.8.4.2).
const UNCORRECTABLE_BITS: [(u32, &str); 17] = [
    (4, "DLP"),
    (5, "SDES"),
    (12, "TLP"),
    (13, "FCP"),
    (14, "CmpltTO"),
    (15, "CmpltAbrt"),
    (16, "UnxCmplt"),
    (17, "RxOF"),
    (18, "MalfTLP"),
    (19, "ECRC"),
    (20, "UnsupReq"),
    (21, "ACSViol"),
    (22, "UncorrIntErr"),
    (23, "BlockedTLP"),
    (24, "AtomicOpBlocked"),
    (25, "TLPBlockedErr"),
    (26, "PoisonTLPBlocked"),
];

/// Correctable error status bits by name, as lspci prints them (PCIe Base 6.0, 7.8.4.5).
const CORRECTABLE_BITS: [(u32, &str); 8] = [
    (0, "RxErr"),
    (6, "BadTLP"),
    (7, "BadDLLP"),
    (8, "Rollover"),
    (12, "Timeout"),
    (13, "AdvNonFatalErr"),
    (14, "CorrIntErr"),
    (15, "HeaderOF"),
];

impl AerRegs {
    /// Parsed from the capability at `off`; None when the registers lie beyond what was read.
    fn read(b: &[u8], off: usize) -> Option<Self> {
        Some(AerRegs {
            offset: off as u16,
            uncorrectable_status: rd32(b, off + 0x04)?,
            uncorrectable_mask: rd32(b, off + 0x08)?,
            uncorrectable_severity: rd32(b, off + 0x0c)?,
            correctable_status: rd32(b, off + 0x10)?,
            correctable_mask: rd32(b, off + 0x14)?,
        })
    }

    /// Errors latched and not masked (the ones the function reports, as the kernel's counters
    /// count them): uncorrectable names with `(fatal)` where the severity register says so,
    /// then correctable names. Bits the specification leaves reserved are shown by number.
    pub fn unmasked_errors(&self) -> Vec<String> {
        let mut out = Vec::new();
        let ue = self.uncorrectable_status & !self.uncorrectable_mask;
        let ce = self.correctable_status & !self.correctable_mask;
        let name = |table: &[(u32, &str)], bit: u32| {
            table
                .iter()
                .find(|(b, _)| *b == bit)
                .map(|(_, n)| n.to_string())
                .unwrap_or_else(|| format!("bit {bit}"))
        };
        for bit in (0..32).filter(|b| ue & (1 << b) != 0) {
            let fatal = self.uncorrectable_severity & (1 << bit) != 0;
            let kind = if fatal { "fatal" } else { "non-fatal" };
            out.push(format!("{} ({kind})", name(&UNCORRECTABLE_BITS, bit)));
        }
        for bit in (0..32).filter(|b| ce & (1 << b) != 0) {
            out.push(format!("{} (correctable)", name(&CORRECTABLE_BITS, bit)));
        }
        out
    }

    /// Errors latched but masked (not reported; platforms mask ones a device raises in normal
    /// operation, such as Unsupported Request during enumeration), by name.
    pub fn masked_errors(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (status, mask, table) in [
            (
                self.uncorrectable_status,
                self.uncorrectable_mask,
                &UNCORRECTABLE_BITS[..],
            ),
            (
                self.correctable_status,
                self.correctable_mask,
                &CORRECTABLE_BITS[..],
            ),
        ] {
            for bit in (0..32).filter(|b| status & mask & (1 << b) != 0) {
                out.push(
                    table
                        .iter()
                        .find(|(b, _)| *b == bit)
                        .map(|(_, n)| n.to_string())
                        .unwrap_or_else(|| format!("bit {bit}")),
                );
            }
        }
        out
    }
}

/// A parsed view of one function's config space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigSpace {
    pub length: usize,
    pub coverage: Coverage,
    pub vendor_id: Option<u16>,
    pub device_id: Option<u16>,
    pub header_type: Option<u8>,
    /// None when the PCIe capability lies beyond what was read, or the list is malformed.
    pub pcie: Option<PcieCap>,
    /// Whether the standard capability list could be walked completely.
    pub caps_readable: bool,
    /// None when extended space was not read (or device has no extended space).
    pub acs: Option<Acs>,
    pub aer_offset: Option<u16>,
    /// The AER capability's status and mask registers (where `aer_offset` is).
    pub aer: Option<AerRegs>,
    /// Whether the extended capability list could be walked (4096 bytes read and well-formed).
    pub ext_caps_readable: bool,
    /// Problems met while walking (loops, pointers out of range).
    pub problems: Vec<String>,
}

fn rd8(b: &[u8], off: usize) -> Option<u8> {
    b.get(off).copied()
}
fn rd16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(off)?, *b.get(off + 1)?]))
}
fn rd32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes([
        *b.get(off)?,
        *b.get(off + 1)?,
        *b.get(off + 2)?,
        *b.get(off + 3)?,
    ]))
}

/// A speed field (Link Status Current Link Speed: an index into the Supported Link Speeds
/// vector), only where it names a generation a link can run at.
fn link_gen(bits: u32) -> Option<u8> {
    Some((bits & 0xf) as u8).filter(|g| crate::pci::valid_gen(*g))
}

/// A width field (6 bits), only where it is a width a link can have.
fn link_width(bits: u32) -> Option<u8> {
    Some((bits & 0x3f) as u8).filter(|w| crate::pci::valid_width(*w))
}

/// Vendor-specific capabilities, the only ones a function may carry more than once: standard
/// 0x09 (PCI Local Bus 3.0, 6.8.1), extended 0x000b (VSEC) and 0x0023 (DVSEC), and the
/// extended null capability 0x0000 (PCIe Base 6.0, 7.9.28 / 7.9.6 / 7.6.3).
const STD_REPEATABLE: [u8; 1] = [0x09];
const EXT_REPEATABLE: [u16; 3] = [0x0000, 0x000b, 0x0023];

impl ConfigSpace {
    pub fn parse(b: &[u8]) -> Self {
        let mut cs = ConfigSpace {
            length: b.len(),
            coverage: Coverage::of(b.len()),
            vendor_id: rd16(b, 0),
            device_id: rd16(b, 2),
            header_type: rd8(b, 0x0e).map(|h| h & 0x7f),
            pcie: None,
            caps_readable: false,
            acs: None,
            aer_offset: None,
            aer: None,
            ext_caps_readable: false,
            problems: Vec::new(),
        };
        if cs.coverage == Coverage::Truncated {
            cs.problems
                .push(format!("config space is {} bytes (truncated)", b.len()));
            return cs;
        }
        cs.walk_standard(b);
        if cs.coverage == Coverage::Extended {
            cs.walk_extended(b);
        }
        cs
    }

    /// The standard capability list. A list that loops, points below 0x40 or names one
    /// capability twice is malformed: nothing read from it is a fact (a second PCI Express
    /// capability would say which link registers to believe; neither is believed).
    fn walk_standard(&mut self, b: &[u8]) {
        let status = rd16(b, 0x06).unwrap_or(0);
        if status & 0x10 == 0 {
            // No capability list: legal for conventional PCI; nothing more to learn.
            self.caps_readable = true;
            return;
        }
        let mut ptr = rd8(b, 0x34).unwrap_or(0) & 0xfc;
        let mut offsets = Vec::new();
        let mut ids = Vec::new();
        let mut pcie = None;
        while ptr != 0 {
            let malformed = if ptr < 0x40 {
                Some(format!(
                    "capability pointer 0x{ptr:02x} points into the header"
                ))
            } else if offsets.contains(&ptr) {
                Some(format!("capability list loops back to 0x{ptr:02x}"))
            } else {
                None
            };
            if let Some(m) = malformed {
                self.problems.push(m);
                return;
            }
            offsets.push(ptr);
            let off = ptr as usize;
            let (Some(id), Some(next)) = (rd8(b, off), rd8(b, off + 1)) else {
                // Beyond what the kernel let us read: unknown, not absent.
                return;
            };
            if ids.contains(&id) && !STD_REPEATABLE.contains(&id) {
                self.problems.push(format!(
                    "capability 0x{id:02x} appears twice (again at 0x{ptr:02x})"
                ));
                return;
            }
            ids.push(id);
            if id == CAP_ID_PCIE {
                if b.len() < off + 0x30 {
                    return;
                }
                pcie = Self::parse_pcie(b, off);
            }
            ptr = next & 0xfc;
        }
        self.pcie = pcie;
        self.caps_readable = true;
    }

    fn parse_pcie(b: &[u8], off: usize) -> Option<PcieCap> {
        let caps = rd16(b, off + 2)?;
        let devctl = rd16(b, off + 0x8)?;
        let lnkcap = rd32(b, off + 0xc)?;
        let lnksta = rd16(b, off + 0x12)? as u32;
        // Max Link Speed as the kernel (6.13+) derives `max_link_speed`: the Supported Link
        // Speeds vector of Link Capabilities 2 (capability version 2; bit N = generation N)
        // limited to Link Capabilities' Max Link Speed, its highest generation; without a
        // vector, Max Link Speed itself when it is 2.5 or 5 GT/s (as the kernel synthesises).
        let sls = lnkcap & 0xf;
        let vector = if caps & 0xf >= 2 {
            rd32(b, off + 0x2c).map_or(0, |v| v & 0xfe)
        } else {
            0
        };
        let speeds = vector & ((2u32 << sls) - 1);
        let max_gen = match (speeds, sls) {
            (0, 1 | 2) => Some(sls as u8),
            (0, _) => None,
            (v, _) => Some((31 - v.leading_zeros()) as u8),
        }
        .filter(|g| crate::pci::valid_gen(*g));
        let mrrs = 128u32 << ((devctl >> 12) & 0x7).min(5);
        let mps = 128u32 << ((devctl >> 5) & 0x7).min(5);
        Some(PcieCap {
            offset: off as u16,
            port_type: PortType::from_bits(((caps >> 4) & 0xf) as u8),
            max_read_request_bytes: mrrs,
            max_payload_bytes: mps,
            relaxed_ordering: devctl & 0x10 != 0,
            link_max_gen: max_gen,
            link_max_width: link_width(lnkcap >> 4),
            link_cur_gen: link_gen(lnksta),
            link_cur_width: link_width(lnksta >> 4),
            link_caps: lnkcap,
            link_status: lnksta as u16,
        })
    }

    /// The extended capability list (from 0x100). As for the standard list: a loop, a pointer
    /// below 0x100 or a capability named twice makes the list malformed and nothing read from
    /// it a fact (a second ACS capability would hide the redirect bits of the first).
    fn walk_extended(&mut self, b: &[u8]) {
        let mut off = 0x100usize;
        let mut offsets = Vec::new();
        let mut ids = Vec::new();
        let (mut acs, mut aer) = (None, None);
        loop {
            let Some(hdr) = rd32(b, off) else { return };
            if off == 0x100 && (hdr == 0 || hdr == 0xffff_ffff) {
                // No extended capabilities at all (conventional PCI or none implemented).
                self.ext_caps_readable = true;
                return;
            }
            if hdr == 0xffff_ffff {
                // All ones past the first header: the device stopped answering mid-read.
                self.problems.push(format!(
                    "extended capability header at 0x{off:03x} reads 0xffffffff"
                ));
                return;
            }
            offsets.push(off);
            let id = (hdr & 0xffff) as u16;
            let next = ((hdr >> 20) & 0xffc) as usize;
            if ids.contains(&id) && !EXT_REPEATABLE.contains(&id) {
                self.problems.push(format!(
                    "extended capability 0x{id:04x} appears twice (again at 0x{off:03x})"
                ));
                return;
            }
            ids.push(id);
            match id {
                EXT_CAP_ID_ACS => {
                    let (Some(cap), Some(ctl)) = (rd16(b, off + 4), rd16(b, off + 6)) else {
                        return;
                    };
                    acs = Some(Acs {
                        offset: off as u16,
                        capability: cap,
                        control: ctl,
                    });
                }
                EXT_CAP_ID_AER => aer = Some(off as u16),
                _ => {}
            }
            if next == 0 {
                self.acs = acs;
                self.aer_offset = aer;
                self.aer = aer.and_then(|o| AerRegs::read(b, o as usize));
                self.ext_caps_readable = true;
                return;
            }
            let malformed = if next < 0x100 {
                Some(format!("extended capability pointer 0x{next:03x} invalid"))
            } else if offsets.contains(&next) {
                Some(format!(
                    "extended capability list loops back to 0x{next:03x}"
                ))
            } else {
                None
            };
            if let Some(m) = malformed {
                self.problems.push(m);
                return;
            }
            off = next;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Build a 4096-byte config space with a PCIe capability and optional ACS.
    pub fn build(port_type: u8, max: (u8, u8), cur: (u8, u8), acs_ctl: Option<u16>) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[0..2].copy_from_slice(&0x10deu16.to_le_bytes());
        b[2..4].copy_from_slice(&0x2330u16.to_le_bytes());
        b[6] = 0x10; // capabilities list
        b[0x34] = 0x40;
        // PM cap at 0x40 -> PCIe at 0x60
        b[0x40] = 0x01;
        b[0x41] = 0x60;
        b[0x60] = CAP_ID_PCIE;
        b[0x61] = 0;
        b[0x62..0x64].copy_from_slice(&(((port_type as u16) << 4) | 2).to_le_bytes());
        let devctl: u16 = (2 << 12) | (1 << 5) | 0x10;
        b[0x68..0x6a].copy_from_slice(&devctl.to_le_bytes());
        let lnkcap: u32 = (max.0 as u32) | ((max.1 as u32) << 4);
        b[0x6c..0x70].copy_from_slice(&lnkcap.to_le_bytes());
        let lnksta: u16 = (cur.0 as u16) | ((cur.1 as u16) << 4);
        b[0x72..0x74].copy_from_slice(&lnksta.to_le_bytes());
        // Link Capabilities 2: every generation up to the maximum supported.
        let lnkcap2: u32 = ((1u32 << (max.0 as u32 + 1)) - 2) & 0xfe;
        b[0x8c..0x90].copy_from_slice(&lnkcap2.to_le_bytes());
        // AER at 0x100 -> ACS at 0x148
        let next = if acs_ctl.is_some() { 0x148u32 } else { 0 };
        let aer: u32 = 0x0001 | (2 << 16) | (next << 20);
        b[0x100..0x104].copy_from_slice(&aer.to_le_bytes());
        if let Some(ctl) = acs_ctl {
            let acs: u32 = 0x000d | (1 << 16);
            b[0x148..0x14c].copy_from_slice(&acs.to_le_bytes());
            b[0x14c..0x14e].copy_from_slice(&0x005fu16.to_le_bytes());
            b[0x14e..0x150].copy_from_slice(&ctl.to_le_bytes());
        }
        b
    }

    /// `max_link_speed` as the kernel derives it: the Supported Link Speeds vector, limited to
    /// Link Capabilities' Max Link Speed; without a vector only 2.5 and 5 GT/s are known.
    #[test]
    fn max_link_speed_from_the_supported_speeds_vector() {
        let max_of = |sls: u32, vector: u32| {
            let mut b = build(0, (5, 16), (4, 16), None);
            b[0x6c..0x70].copy_from_slice(&(sls | (16 << 4)).to_le_bytes());
            b[0x8c..0x90].copy_from_slice(&vector.to_le_bytes());
            ConfigSpace::parse(&b).pcie.unwrap().link_max_gen
        };
        assert_eq!(max_of(5, 0b11_1110), Some(5));
        // A vector claiming Gen5 under a Max Link Speed of Gen4: Gen4.
        assert_eq!(max_of(4, 0b11_1110), Some(4));
        assert_eq!(max_of(3, 0b00_1110), Some(3));
        assert_eq!(max_of(2, 0), Some(2));
        assert_eq!(max_of(1, 0), Some(1));
        assert_eq!(max_of(5, 0), None);
        assert_eq!(max_of(0, 0b11_1110), None);
    }

    /// The AER status registers: only unmasked bits are errors the function reported; the
    /// severity register names an uncorrectable one fatal or not.
    #[test]
    fn aer_status_registers() {
        let mut b = build(0, (5, 16), (5, 16), None);
        let clean = ConfigSpace::parse(&b).aer.unwrap();
        assert_eq!(clean.offset, 0x100);
        assert!(clean.unmasked_errors().is_empty());
        let put = |b: &mut Vec<u8>, off: usize, v: u32| {
            b[off..off + 4].copy_from_slice(&v.to_le_bytes());
        };
        // UESta: poisoned TLP (12), unsupported request (20, masked), completion timeout (14,
        // fatal); CESta: receiver error (0), bad TLP (6, masked), a reserved bit (30).
        put(&mut b, 0x104, (1 << 12) | (1 << 20) | (1 << 14));
        put(&mut b, 0x108, 1 << 20);
        put(&mut b, 0x10c, 1 << 14);
        put(&mut b, 0x110, (1 << 0) | (1 << 6) | (1 << 30));
        put(&mut b, 0x114, 1 << 6);
        let aer = ConfigSpace::parse(&b).aer.unwrap();
        assert_eq!(
            aer.unmasked_errors(),
            [
                "TLP (non-fatal)",
                "CmpltTO (fatal)",
                "RxErr (correctable)",
                "bit 30 (correctable)"
            ]
        );
        assert_eq!(aer.masked_errors(), ["UnsupReq", "BadTLP"]);
        // Fewer than 4096 bytes (what a reader without CAP_SYS_ADMIN gets): no AER reading.
        let cut = ConfigSpace::parse(&b[..0x10c]);
        assert!(cut.aer.is_none());
    }

    #[test]
    fn walks_pcie_and_acs() {
        let b = build(6, (5, 16), (4, 8), Some(0x001d));
        let cs = ConfigSpace::parse(&b);
        let p = cs.pcie.unwrap();
        assert_eq!(p.port_type, PortType::SwitchDownstream);
        assert_eq!(p.link_max_gen, Some(5));
        assert_eq!(p.link_max_width, Some(16));
        assert_eq!(p.link_cur_gen, Some(4));
        assert_eq!(p.link_cur_width, Some(8));
        assert_eq!(p.max_read_request_bytes, 512);
        assert_eq!(p.max_payload_bytes, 256);
        assert!(p.relaxed_ordering);
        let acs = cs.acs.unwrap();
        assert_eq!(acs.offset, 0x148);
        assert_eq!(acs.redirect_bits(), 0x1c);
        assert_eq!(cs.aer_offset, Some(0x100));
        assert!(cs.ext_caps_readable);
    }

    #[test]
    fn header_only_is_unknown_not_absent() {
        let b = build(0, (5, 16), (5, 16), Some(0));
        let cs = ConfigSpace::parse(&b[..64]);
        assert_eq!(cs.coverage, Coverage::Header);
        assert!(cs.pcie.is_none());
        assert!(!cs.caps_readable);
        assert!(cs.acs.is_none());
        assert!(!cs.ext_caps_readable);
        let cs = ConfigSpace::parse(&b[..256]);
        assert!(cs.pcie.is_some());
        assert!(!cs.ext_caps_readable);
    }

    #[test]
    fn looped_capabilities_stop() {
        let mut b = build(0, (5, 16), (5, 16), None);
        b[0x61] = 0x40; // PCIe -> PM -> PCIe ...
        let cs = ConfigSpace::parse(&b);
        assert!(!cs.caps_readable);
        assert!(cs.pcie.is_none());
        assert!(!cs.problems.is_empty());
    }

    /// Link Status 0xffff (a dead device reads all ones): "x63 Gen15" is no link.
    #[test]
    fn all_ones_link_status_is_no_value() {
        let mut b = build(0, (5, 16), (5, 16), None);
        b[0x72..0x74].copy_from_slice(&[0xff, 0xff]);
        let p = ConfigSpace::parse(&b).pcie.unwrap();
        assert_eq!((p.link_cur_gen, p.link_cur_width), (None, None));
        assert_eq!(p.link_status, 0xffff);
        for (w, ok) in [(1, true), (12, true), (32, true), (3, false), (63, false)] {
            let b = build(0, (5, 16), (5, w), None);
            assert_eq!(
                ConfigSpace::parse(&b)
                    .pcie
                    .unwrap()
                    .link_cur_width
                    .is_some(),
                ok,
                "x{w}"
            );
        }
        let b = build(0, (5, 16), (7, 16), None);
        assert_eq!(ConfigSpace::parse(&b).pcie.unwrap().link_cur_gen, None);
    }

    /// A capability named twice (a second ACS with no redirect bits after one with them), a
    /// loop or a pointer out of range: the list is malformed and nothing from it is a fact.
    #[test]
    fn malformed_lists_give_no_facts() {
        let mut b = build(4, (5, 16), (5, 16), Some(0x001d));
        // ACS at 0x148 -> a second ACS at 0x200, control 0.
        b[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16) | (0x200 << 20)).to_le_bytes());
        b[0x200..0x204].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
        let cs = ConfigSpace::parse(&b);
        assert!(cs.acs.is_none() && cs.aer_offset.is_none() && !cs.ext_caps_readable);
        assert!(
            cs.problems[0].contains("appears twice"),
            "{:?}",
            cs.problems
        );
        // An extended list that loops back to its start.
        let mut b = build(4, (5, 16), (5, 16), Some(0x001d));
        b[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16) | (0x100 << 20)).to_le_bytes());
        let cs = ConfigSpace::parse(&b);
        assert!(cs.acs.is_none() && !cs.ext_caps_readable, "{cs:?}");
        // Two PCI Express capabilities: neither is believed.
        let mut b = build(0, (5, 16), (5, 16), None);
        b[0x61] = 0x80;
        b[0x80] = CAP_ID_PCIE;
        let cs = ConfigSpace::parse(&b);
        assert!(cs.pcie.is_none() && !cs.caps_readable, "{cs:?}");
        // A standard pointer into the header.
        let mut b = build(0, (5, 16), (5, 16), None);
        b[0x61] = 0x10;
        let cs = ConfigSpace::parse(&b);
        assert!(cs.pcie.is_none() && !cs.caps_readable, "{cs:?}");
        // Vendor-specific capabilities may repeat.
        let mut b = build(0, (5, 16), (5, 16), None);
        b[0x40] = 0x09;
        b[0x61] = 0x80;
        b[0x80] = 0x09;
        assert!(ConfigSpace::parse(&b).pcie.is_some());
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let _ = ConfigSpace::parse(&bytes);
        }
    }
}
