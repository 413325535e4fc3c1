//! `lspci` text as a machine record: `-v`..`-vvv`, with or without `-D` (no domain: 0000), `-nn`
//! (`[10de:2330]`, `[0302]`), `-k`, and `-x`..`-xxxx` hex dumps (also the header-plus-dump form
//! nvidia-bug-report.sh writes from sysfs when lspci is missing: `0000:17:00.0 030200: Vendor 10de
//! Device 2330 (rev a1)`).
//!
//! A hex dump is config space as read and is kept byte for byte. Without one, the decoded text of
//! a root `lspci -vv` or more is turned into a synthetic 4096-byte config space holding only what
//! the text shows, at fixed offsets: the header, the PCI Express capability at 0x40 (the only
//! standard capability), and AER then ACS as extended capabilities from 0x100. The checks read
//! it through `pci::config` like any dump.
//!
//! This module must not judge anything and must not invent: a field the text does not show stays
//! None (a synthetic header holds vendor/device 0 when the listing names none: the record's own
//! `vendor`/`device` fields say whether they are known). Never panics on any input.

use super::record::{Carried, Format, FunctionRecord, MachineRecord, RecordError};
use crate::pci::config::{CAP_ID_PCIE, ConfigSpace, EXT_CAP_ID_ACS, EXT_CAP_ID_AER};
use crate::pci::{Bdf, ClassCode};
use std::collections::{BTreeMap, HashMap};

pub use super::record::MAX_FUNCTIONS;
/// Longer lines are skipped (with a note): no lspci line comes near this.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Size of a synthetic config space (PCI Express extended configuration space).
const CONFIG_BYTES: usize = 4096;
/// Where the synthetic config space puts the PCI Express capability.
const PCIE_CAP_OFFSET: usize = 0x40;
/// Where the synthetic extended capabilities start (PCIe Base 6.0, 7.6.3).
const EXT_CAP_START: usize = 0x100;
/// Bytes reserved for a synthetic AER capability (0x48: the root-port layout).
const AER_CAP_BYTES: usize = 0x48;

/// Whether `text` looks like lspci output: one of its first non-blank lines is a function header
/// (`0000:17:00.0 3D controller: ...` or `17:00.0 ...`).
pub fn looks_like(text: &str) -> bool {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .take(20)
        .any(|l| l.len() <= MAX_LINE_BYTES && parse_header(l).is_some())
}

/// Parse one lspci listing.
pub fn parse(text: &str) -> Result<MachineRecord, RecordError> {
    parse_sections(&[text])
}

/// Parse several lspci listings of one machine (an nvidia-bug-report log holds one per command)
/// into one record: a function listed twice has its missing fields filled from the later listing.
pub fn parse_sections(texts: &[&str]) -> Result<MachineRecord, RecordError> {
    let mut rec = MachineRecord::new(Format::Lspci);
    let mut scan = Scan::default();
    let mut order: Vec<Bdf> = Vec::new();
    let mut by_bdf: HashMap<Bdf, Parsed> = HashMap::new();
    for text in texts {
        for p in scan.listing(text) {
            match by_bdf.get_mut(&p.rec.bdf) {
                Some(existing) => {
                    scan.merged += 1;
                    existing.fill_from(p);
                }
                None if order.len() >= MAX_FUNCTIONS => scan.over_limit += 1,
                None => {
                    order.push(p.rec.bdf);
                    by_bdf.insert(p.rec.bdf, p);
                }
            }
        }
    }
    if order.is_empty() {
        return Err(RecordError::NotThisFormat(
            Format::Lspci.article_name(),
            "no PCI function line (\"0000:17:00.0 3D controller: ...\") found".into(),
        ));
    }
    order.sort();
    let mut functions = Vec::with_capacity(order.len());
    let mut any_numa = false;
    let mut names_only = 0usize;
    let mut lnkcap2_derived = 0usize;
    for bdf in order {
        let Some(p) = by_bdf.remove(&bdf) else {
            continue;
        };
        any_numa |= p.rec.numa_node.is_some();
        if p.caps_names_only {
            names_only += 1;
        }
        let (f, derived) = p.finish();
        lnkcap2_derived += usize::from(derived);
        functions.push(f);
    }
    let cycles = link_parents(&mut functions);
    rec.functions = functions;
    rec.carried = Carried {
        driver: scan.verbose,
        numa_node: any_numa,
        os_devices: false,
    };
    scan.notes(&mut rec.notes);
    if names_only > 0 {
        rec.notes.push(format!(
            "{names_only} functions show capability names only (lspci -v): no config space built for them"
        ));
    }
    if lnkcap2_derived > 0 {
        rec.notes.push(format!(
            "{lnkcap2_derived} functions show no LnkCap2 (older lspci): their supported-speeds vector is taken from LnkCap's maximum speed"
        ));
    }
    if cycles > 0 {
        rec.notes.push(format!(
            "{cycles} functions' bridge chains loop back on themselves: their parent dropped"
        ));
    }
    if scan.denied {
        rec.cannot_tell.push(
            "config space (ACS, AER, PCIe capability): lspci was run without root".to_string(),
        );
    }
    Ok(rec)
}

/// What one listing pass has seen, for notes.
#[derive(Default)]
struct Scan {
    long_lines: usize,
    stray_lines: usize,
    bad_dumps: usize,
    merged: usize,
    over_limit: usize,
    denied: bool,
    verbose: bool,
}

impl Scan {
    fn notes(&self, notes: &mut Vec<String>) {
        if self.denied {
            notes.push("lspci was run without root: capabilities not shown".to_string());
        }
        if self.long_lines > 0 {
            notes.push(format!(
                "{} lines longer than {} KiB skipped",
                self.long_lines,
                MAX_LINE_BYTES / 1024
            ));
        }
        if self.stray_lines > 0 {
            notes.push(format!(
                "{} lines outside any PCI function skipped",
                self.stray_lines
            ));
        }
        if self.bad_dumps > 0 {
            notes.push(format!(
                "{} hex dumps with missing or out-of-order rows ignored",
                self.bad_dumps
            ));
        }
        if self.merged > 0 {
            notes.push(format!(
                "{} functions listed more than once: listings merged",
                self.merged
            ));
        }
        if self.over_limit > 0 {
            notes.push(format!(
                "{} functions past the limit of {MAX_FUNCTIONS} skipped",
                self.over_limit
            ));
        }
    }

    /// Split a listing into functions and parse each.
    fn listing(&mut self, text: &str) -> Vec<Parsed> {
        let mut out: Vec<Parsed> = Vec::new();
        let mut cur: Option<Parsed> = None;
        for raw in text.lines() {
            if raw.len() > MAX_LINE_BYTES {
                self.long_lines += 1;
                continue;
            }
            let line = raw.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let starts_indented = line.starts_with([' ', '\t']);
            if !starts_indented {
                if let Some((off, bytes)) = hex_row(line) {
                    match cur.as_mut() {
                        Some(p) => p.dump_row(off, &bytes),
                        None => self.stray_lines += 1,
                    }
                    continue;
                }
                if let Some(h) = parse_header(line) {
                    if let Some(p) = cur.take() {
                        out.push(p);
                    }
                    // Bounded here too: a hostile listing of a million headers stops growing.
                    if out.len() > MAX_FUNCTIONS {
                        self.over_limit += 1;
                        continue;
                    }
                    cur = Some(Parsed::new(h));
                    continue;
                }
                // A line such as "lspci: Unable to load libkmod resources": not a function.
                self.stray_lines += 1;
                continue;
            }
            match cur.as_mut() {
                Some(p) => p.body_line(line.trim(), self),
                None => self.stray_lines += 1,
            }
        }
        if let Some(p) = cur.take() {
            out.push(p);
        }
        for p in &mut out {
            if p.dump_bad {
                self.bad_dumps += 1;
            }
        }
        out
    }
}

/// A function header, split.
struct Header {
    bdf: Bdf,
    class: Option<u32>,
    vendor: Option<u16>,
    device: Option<u16>,
    revision: Option<u8>,
    description: Option<String>,
}

/// `[0000:]17:00.0 CLASS: REST`, `17:00.0 0302: 10de:2330 (rev a1)` (-n) or the sysfs-fallback
/// `0000:17:00.0 030200: Vendor 10de Device 2330 (rev a1)`.
fn parse_header(line: &str) -> Option<Header> {
    let (addr, rest) = line.split_once(' ')?;
    if !addr.contains('.') || addr.starts_with('-') {
        return None;
    }
    let bdf: Bdf = addr.parse().ok()?;
    let (class_text, after) = rest.split_once(": ").or_else(|| {
        rest.strip_suffix(':')
            .map(|c| (c, ""))
            .filter(|(c, _)| !c.is_empty())
    })?;
    let class_text = class_text.trim();
    let mut h = Header {
        bdf,
        class: None,
        vendor: None,
        device: None,
        revision: None,
        description: None,
    };
    let mut base_sub: Option<u32> = None;
    if is_hex(class_text, 6) {
        h.class = u32::from_str_radix(class_text, 16).ok();
    } else if is_hex(class_text, 4) {
        base_sub = u32::from_str_radix(class_text, 16).ok();
    } else if let Some((_, b)) = trailing_bracket(class_text)
        && is_hex(b, 4)
    {
        base_sub = u32::from_str_radix(b, 16).ok();
    }
    // Trailing "(rev a1)" and "(prog-if 00 [Normal decode])", in either order.
    let mut rest = after.trim();
    let mut prog_if: Option<u32> = None;
    while let Some(open) = rest.rfind(" (") {
        let tail = &rest[open + 2..];
        if !tail.ends_with(')') {
            break;
        }
        let inner = &tail[..tail.len() - 1];
        if let Some(r) = inner.strip_prefix("rev ") {
            h.revision = u8::from_str_radix(r.trim(), 16).ok();
        } else if let Some(p) = inner.strip_prefix("prog-if ") {
            let code = p.split_whitespace().next().unwrap_or("");
            prog_if = u32::from_str_radix(code, 16).ok().filter(|v| *v <= 0xff);
        } else {
            break;
        }
        rest = rest[..open].trim_end();
    }
    if let Some(bs) = base_sub {
        h.class = Some((bs << 8) | prog_if.unwrap_or(0));
    }
    // Ids: "... [10de:2330]" (-nn), "10de:2330" (-n), "Vendor 10de Device 2330" (sysfs dump).
    if let Some((before, ids)) = trailing_bracket(rest).filter(|(_, b)| vendor_device(b).is_some())
    {
        (h.vendor, h.device) = vendor_device(ids).unzip();
        rest = before.trim_end();
    } else if let Some((v, d)) = vendor_device(rest) {
        (h.vendor, h.device) = (Some(v), Some(d));
        rest = "";
    } else if let Some(t) = rest.strip_prefix("Vendor ") {
        let mut w = t.split_whitespace();
        if let (Some(v), Some("Device"), Some(d)) = (w.next(), w.next(), w.next())
            && is_hex(v, 4)
            && is_hex(d, 4)
        {
            h.vendor = u16::from_str_radix(v, 16).ok();
            h.device = u16::from_str_radix(d, 16).ok();
            rest = "";
        }
    }
    if !rest.is_empty() {
        h.description = Some(rest.to_string());
    }
    Some(h)
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `text [inner]` -> (text, inner) when the text ends with a bracket.
fn trailing_bracket(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_end();
    let body = s.strip_suffix(']')?;
    let open = body.rfind('[')?;
    Some((&s[..open], &body[open + 1..]))
}

/// `10de:2330`.
fn vendor_device(s: &str) -> Option<(u16, u16)> {
    let (v, d) = s.trim().split_once(':')?;
    if !is_hex(v, 4) || !is_hex(d, 4) {
        return None;
    }
    Some((
        u16::from_str_radix(v, 16).ok()?,
        u16::from_str_radix(d, 16).ok()?,
    ))
}

/// A hex dump row: `00: 86 80 05 34 ...` (offset of 2 or 3 hex digits, 1..=16 bytes).
fn hex_row(line: &str) -> Option<(usize, Vec<u8>)> {
    let (off, rest) = line.split_once(": ")?;
    if off.is_empty() || off.len() > 3 || !off.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let off = usize::from_str_radix(off, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for tok in rest.split_whitespace() {
        if bytes.len() == 16 || !is_hex(tok, 2) {
            return None;
        }
        bytes.push(u8::from_str_radix(tok, 16).ok()?);
    }
    (!bytes.is_empty()).then_some((off, bytes))
}

/// One capability as the decoded text shows it: its name line and its `Key: text` entries
/// (continuation lines joined to their key).
#[derive(Default)]
struct Cap {
    header: String,
    /// The version lspci prints for extended capabilities: `[148 v1]`.
    version: Option<u8>,
    entries: Vec<(String, String)>,
}

impl Cap {
    fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A function being parsed.
struct Parsed {
    rec: FunctionRecord,
    dump: Vec<u8>,
    dump_bad: bool,
    caps: Vec<Cap>,
    /// The text is inside a capability (its entries are collected).
    in_cap: bool,
    primary_bus: Option<u8>,
    command: Option<u16>,
    /// "Capabilities: [..] Express ..." without entries: -v shows names only.
    caps_names_only: bool,
    denied: bool,
}

impl Parsed {
    fn new(h: Header) -> Self {
        Parsed {
            rec: FunctionRecord {
                bdf: h.bdf,
                vendor: h.vendor,
                device: h.device,
                class: h.class,
                revision: h.revision,
                description: h.description,
                ..Default::default()
            },
            dump: Vec::new(),
            dump_bad: false,
            caps: Vec::new(),
            in_cap: false,
            primary_bus: None,
            command: None,
            caps_names_only: false,
            denied: false,
        }
    }

    fn dump_row(&mut self, off: usize, bytes: &[u8]) {
        if self.dump_bad {
            return;
        }
        if off != self.dump.len() || off + bytes.len() > CONFIG_BYTES {
            self.dump_bad = true;
            return;
        }
        self.dump.extend_from_slice(bytes);
    }

    fn body_line(&mut self, t: &str, scan: &mut Scan) {
        scan.verbose = true;
        if let Some(c) = t.strip_prefix("Capabilities:") {
            let c = c.trim();
            if c.starts_with("<access denied>") {
                self.denied = true;
                scan.denied = true;
                self.in_cap = false;
                return;
            }
            let (version, header) = match c.strip_prefix('[').and_then(|x| x.split_once(']')) {
                Some((inside, h)) => (
                    inside
                        .split_whitespace()
                        .nth(1)
                        .and_then(|v| v.strip_prefix('v'))
                        .and_then(|v| v.parse().ok()),
                    h.trim(),
                ),
                None => (None, c),
            };
            self.caps.push(Cap {
                header: header.to_string(),
                version,
                entries: Vec::new(),
            });
            self.in_cap = true;
            return;
        }
        if let Some(d) = t.strip_prefix("Kernel driver in use:") {
            self.rec.driver = Some(d.trim().to_string()).filter(|d| !d.is_empty());
            self.in_cap = false;
            return;
        }
        if t.starts_with("Kernel modules:") {
            self.in_cap = false;
            return;
        }
        if let Some(n) = t.strip_prefix("NUMA node:") {
            self.rec.numa_node = n.trim().parse().ok();
            return;
        }
        if let Some(flags) = t.strip_prefix("Flags:") {
            // lspci -v: "Flags: bus master, fast devsel, latency 0, IRQ 24, NUMA node 0"
            for part in flags.split(',') {
                if let Some(n) = part.trim().strip_prefix("NUMA node ") {
                    self.rec.numa_node = n.trim().parse().ok();
                }
            }
            if !self.in_cap {
                return;
            }
        }
        if !self.in_cap {
            if let Some(s) = t.strip_prefix("Subsystem:") {
                if let Some((v, d)) = trailing_bracket(s).and_then(|(_, b)| vendor_device(b)) {
                    self.rec.subsystem_vendor = Some(v);
                    self.rec.subsystem_device = Some(d);
                }
                return;
            }
            if let Some(b) = t.strip_prefix("Bus:") {
                for part in b.split(',') {
                    let Some((k, v)) = part.trim().split_once('=') else {
                        continue;
                    };
                    let v = u8::from_str_radix(v.trim(), 16).ok();
                    match k.trim() {
                        "primary" => self.primary_bus = v,
                        "secondary" => self.rec.secondary_bus = v,
                        "subordinate" => self.rec.subordinate_bus = v,
                        _ => {}
                    }
                }
                return;
            }
            if let Some(c) = t.strip_prefix("Control:") {
                let bits = [("I/O", 0), ("Mem", 1), ("BusMaster", 2), ("DisINTx", 10)];
                let mut cmd = 0u16;
                for (name, bit) in bits {
                    if flag(c, name) == Some(true) {
                        cmd |= 1 << bit;
                    }
                }
                self.command = Some(cmd);
            }
            return;
        }
        // Inside a capability: "Key: text" starts an entry, anything else continues the last.
        let Some(cap) = self.caps.last_mut() else {
            return;
        };
        match entry_key(t) {
            Some((k, v)) => cap.entries.push((k.to_string(), v.trim().to_string())),
            None => match cap.entries.last_mut() {
                Some((_, v)) => {
                    if v.len() < MAX_LINE_BYTES {
                        v.push(' ');
                        v.push_str(t);
                    }
                }
                None => cap.entries.push((String::new(), t.to_string())),
            },
        }
    }

    /// Fill what this function lacks from another listing of it.
    fn fill_from(&mut self, o: Parsed) {
        let r = &mut self.rec;
        let f = o.rec;
        macro_rules! fill {
            ($($x:ident),*) => { $( if r.$x.is_none() { r.$x = f.$x; } )* };
        }
        fill!(
            vendor,
            device,
            class,
            subsystem_vendor,
            subsystem_device,
            revision,
            numa_node,
            driver,
            secondary_bus,
            subordinate_bus,
            description
        );
        if self.primary_bus.is_none() {
            self.primary_bus = o.primary_bus;
        }
        if self.command.is_none() {
            self.command = o.command;
        }
        if (self.dump.is_empty() || self.dump_bad) && !o.dump.is_empty() && !o.dump_bad
            || (!o.dump_bad && o.dump.len() > self.dump.len() && !self.dump_bad)
        {
            self.dump = o.dump;
            self.dump_bad = false;
        }
        if self.caps.is_empty() && !o.caps.is_empty() {
            self.caps = o.caps;
            self.caps_names_only = o.caps_names_only;
        }
        self.denied &= o.denied;
    }

    /// The function record, with its config space (dumped or synthetic); true when LnkCap2's
    /// vector had to be taken from LnkCap.
    fn finish(mut self) -> (FunctionRecord, bool) {
        let mut derived = false;
        if !self.dump.is_empty() && !self.dump_bad {
            self.fill_from_dump();
            self.rec.config = Some(std::mem::take(&mut self.dump));
            self.rec.config_synthetic = false;
        }
        self.links_from_text();
        let detailed = self.caps.iter().any(|c| !c.entries.is_empty());
        self.caps_names_only = !self.caps.is_empty() && !detailed;
        if self.rec.config.is_none() && detailed && !self.denied {
            let (cfg, d) = self.synthesize();
            derived = d;
            self.rec.config = Some(cfg);
            self.rec.config_synthetic = true;
        }
        if self.rec.max_link_speed.is_none() && self.rec.cur_link_speed.is_none() {
            self.links_from_config();
        }
        (self.rec, derived)
    }

    /// Ids, class, revision, subsystem and bus numbers from the dump where the text lacks them.
    fn fill_from_dump(&mut self) {
        let b = &self.dump;
        let r = &mut self.rec;
        let rd16 = |o: usize| Some(u16::from_le_bytes([*b.get(o)?, *b.get(o + 1)?]));
        if r.vendor.is_none() {
            r.vendor = rd16(0);
        }
        if r.device.is_none() {
            r.device = rd16(2);
        }
        if r.revision.is_none() {
            r.revision = b.get(8).copied();
        }
        if r.class.is_none()
            && let (Some(p), Some(s), Some(c)) = (b.get(9), b.get(10), b.get(11))
        {
            r.class = Some((u32::from(*c) << 16) | (u32::from(*s) << 8) | u32::from(*p));
        }
        match b.get(0x0e).map(|h| h & 0x7f) {
            Some(0) if r.subsystem_vendor.is_none() => {
                r.subsystem_vendor = rd16(0x2c);
                r.subsystem_device = rd16(0x2e);
            }
            Some(1) if r.secondary_bus.is_none() => {
                r.secondary_bus = b.get(0x19).copied();
                r.subordinate_bus = b.get(0x1a).copied();
            }
            _ => {}
        }
    }

    fn express(&self) -> Option<&Cap> {
        self.caps.iter().find(|c| c.header.starts_with("Express"))
    }

    fn ext_cap(&self, name: &str) -> Option<&Cap> {
        self.caps
            .iter()
            .find(|c| c.header.starts_with(name) && !c.entries.is_empty())
    }

    fn links_from_text(&mut self) {
        let Some(e) = self.express() else { return };
        let (max_s, max_w) = e.get("LnkCap").map(speed_width).unwrap_or_default();
        let (cur_s, cur_w) = e.get("LnkSta").map(speed_width).unwrap_or_default();
        self.rec.max_link_speed = max_s.map(|s| kernel_speed(&s));
        self.rec.max_link_width = max_w;
        self.rec.cur_link_speed = cur_s.map(|s| kernel_speed(&s));
        self.rec.cur_link_width = cur_w;
    }

    /// Link attributes as the kernel derives them from a dumped config space.
    fn links_from_config(&mut self) {
        let Some(cfg) = self
            .rec
            .config
            .as_ref()
            .filter(|_| !self.rec.config_synthetic)
        else {
            return;
        };
        let Some(p) = ConfigSpace::parse(cfg).pcie else {
            return;
        };
        let speed = |g: Option<u8>| {
            g.and_then(crate::pci::speed_of_gen)
                .map(|s| format!("{s:.1} GT/s PCIe"))
        };
        self.rec.max_link_speed = speed(p.link_max_gen);
        self.rec.cur_link_speed = speed(p.link_cur_gen);
        self.rec.max_link_width = p.link_max_width.map(|w| w.to_string());
        self.rec.cur_link_width = p.link_cur_width.map(|w| w.to_string());
    }

    /// A 4096-byte config space holding what the decoded text shows.
    fn synthesize(&self) -> (Vec<u8>, bool) {
        let mut b = vec![0u8; CONFIG_BYTES];
        let r = &self.rec;
        let put16 =
            |b: &mut Vec<u8>, o: usize, v: u16| b[o..o + 2].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |b: &mut Vec<u8>, o: usize, v: u32| b[o..o + 4].copy_from_slice(&v.to_le_bytes());
        put16(&mut b, 0, r.vendor.unwrap_or(0));
        put16(&mut b, 2, r.device.unwrap_or(0));
        put16(&mut b, 4, self.command.unwrap_or(0));
        b[8] = r.revision.unwrap_or(0);
        let class = r.class.unwrap_or(0);
        b[9] = class as u8;
        b[10] = (class >> 8) as u8;
        b[11] = (class >> 16) as u8;
        let bridge = r.secondary_bus.is_some() || ClassCode(class).is_bridge_pci();
        if bridge {
            b[0x0e] = 0x01;
            b[0x18] = self.primary_bus.unwrap_or(0);
            b[0x19] = r.secondary_bus.unwrap_or(0);
            b[0x1a] = r.subordinate_bus.unwrap_or(0);
        } else {
            put16(&mut b, 0x2c, r.subsystem_vendor.unwrap_or(0));
            put16(&mut b, 0x2e, r.subsystem_device.unwrap_or(0));
        }
        let mut derived = false;
        if let Some(e) = self.express() {
            b[6] |= 0x10; // Status: Capabilities List
            b[0x34] = PCIE_CAP_OFFSET as u8;
            derived = write_pcie(&mut b, e);
        }
        // Extended capabilities, chained from 0x100 in a fixed order.
        let mut ext: Vec<(u16, &Cap, usize)> = Vec::new();
        if let Some(c) = self.ext_cap("Advanced Error Reporting") {
            ext.push((EXT_CAP_ID_AER, c, AER_CAP_BYTES));
        }
        if let Some(c) = self.ext_cap("Access Control Services") {
            ext.push((EXT_CAP_ID_ACS, c, 8));
        }
        let mut off = EXT_CAP_START;
        for (i, (id, cap, len)) in ext.iter().enumerate() {
            let next = if i + 1 < ext.len() { off + len } else { 0 };
            let ver = u32::from(cap.version.unwrap_or(1) & 0xf);
            put32(
                &mut b,
                off,
                u32::from(*id) | (ver << 16) | ((next as u32) << 20),
            );
            if *id == EXT_CAP_ID_ACS {
                put16(&mut b, off + 4, flags16(cap.get("ACSCap"), &ACS_BITS));
                put16(&mut b, off + 6, flags16(cap.get("ACSCtl"), &ACS_BITS));
            } else {
                put32(&mut b, off + 4, flags32(cap.get("UESta"), &UE_BITS));
                put32(&mut b, off + 8, flags32(cap.get("UEMsk"), &UE_BITS));
                put32(&mut b, off + 0xc, flags32(cap.get("UESvrt"), &UE_BITS));
                put32(&mut b, off + 0x10, flags32(cap.get("CESta"), &CE_BITS));
                put32(&mut b, off + 0x14, flags32(cap.get("CEMsk"), &CE_BITS));
            }
            off += len;
        }
        (b, derived)
    }
}

/// `DevCtl:\tReport ...` -> ("DevCtl", "Report ..."): one word, then a colon.
fn entry_key(t: &str) -> Option<(&str, &str)> {
    let (k, v) = t.split_once(':')?;
    let ok = !k.is_empty()
        && k.bytes().next().is_some_and(|c| c.is_ascii_alphabetic())
        && k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    ok.then_some((k, v))
}

/// A `Name+` / `Name-` flag in decoded text.
fn flag(text: &str, name: &str) -> Option<bool> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .find_map(|tok| match tok.strip_prefix(name) {
            Some("+") => Some(true),
            Some("-") => Some(false),
            _ => None,
        })
}

fn flags32(text: Option<&str>, bits: &[(&str, u32)]) -> u32 {
    let Some(t) = text else { return 0 };
    bits.iter()
        .filter(|(name, _)| flag(t, name) == Some(true))
        .fold(0, |acc, (_, bit)| acc | (1 << bit))
}

fn flags16(text: Option<&str>, bits: &[(&str, u32)]) -> u16 {
    flags32(text, bits) as u16
}

/// ACS Capability/Control bits (PCIe Base 6.0, 7.7.8.2-3), named as lspci prints them.
const ACS_BITS: [(&str, u32); 7] = [
    ("SrcValid", 0),
    ("TransBlk", 1),
    ("ReqRedir", 2),
    ("CmpltRedir", 3),
    ("UpstreamFwd", 4),
    ("EgressCtrl", 5),
    ("DirectTrans", 6),
];

/// AER Uncorrectable Error Status/Mask/Severity bits (PCIe Base 6.0, 7.8.4.2), lspci's names.
const UE_BITS: [(&str, u32); 17] = [
    ("DLP", 4),
    ("SDES", 5),
    ("TLP", 12),
    ("FCP", 13),
    ("CmpltTO", 14),
    ("CmpltAbrt", 15),
    ("UnxCmplt", 16),
    ("RxOF", 17),
    ("MalfTLP", 18),
    ("ECRC", 19),
    ("UnsupReq", 20),
    ("ACSViol", 21),
    ("UncorrIntErr", 22),
    ("BlockedTLP", 23),
    ("AtomicOpBlocked", 24),
    ("TLPBlockedErr", 25),
    ("PoisonTLPBlocked", 26),
];

/// AER Correctable Error Status/Mask bits (7.8.4.5); older lspci says NonFatalErr for bit 13.
const CE_BITS: [(&str, u32); 9] = [
    ("RxErr", 0),
    ("BadTLP", 6),
    ("BadDLLP", 7),
    ("Rollover", 8),
    ("Timeout", 12),
    ("AdvNonFatalErr", 13),
    ("NonFatalErr", 13),
    ("CorrIntErr", 14),
    ("HeaderOF", 15),
];

/// Device/Port Type (PCI Express Capabilities register bits 7:4) from lspci's name for it.
fn port_type(header: &str) -> Option<u16> {
    let t = header
        .split_once(')')
        .map(|(_, r)| r)
        .unwrap_or(header.strip_prefix("Express").unwrap_or(header))
        .trim();
    const TYPES: [(&str, u16); 9] = [
        ("Root Complex Integrated Endpoint", 9),
        ("Root Complex Event Collector", 10),
        ("Legacy Endpoint", 1),
        ("Endpoint", 0),
        ("Root Port", 4),
        ("Upstream Port", 5),
        ("Downstream Port", 6),
        ("PCI-Express to PCI/PCI-X Bridge", 7),
        ("PCI/PCI-X to PCI-Express Bridge", 8),
    ];
    TYPES
        .iter()
        .find(|(name, _)| t.starts_with(name))
        .map(|(_, v)| *v)
}

/// Write the PCI Express capability at PCIE_CAP_OFFSET; true when the LnkCap2 vector was taken
/// from LnkCap (the text shows no LnkCap2).
fn write_pcie(b: &mut [u8], e: &Cap) -> bool {
    let o = PCIE_CAP_OFFSET;
    let version: u16 = e
        .header
        .split_once("(v")
        .and_then(|(_, r)| r.split_once(')'))
        .and_then(|(v, _)| v.parse().ok())
        .unwrap_or(1)
        & 0xf;
    let ptype = port_type(&e.header).unwrap_or(0);
    let slot = u16::from(e.header.contains("(Slot+)"));
    let caps = version | (ptype << 4) | (slot << 8);
    b[o] = CAP_ID_PCIE;
    b[o + 1] = 0;
    b[o + 2..o + 4].copy_from_slice(&caps.to_le_bytes());
    if let Some(dc) = e.get("DevCtl") {
        let mut v: u16 = 0;
        for (names, bit) in [
            (&["CorrErr", "Correctable"][..], 0),
            (&["NonFatalErr", "Non-Fatal"][..], 1),
            (&["FatalErr", "Fatal"][..], 2),
            (&["UnsupReq", "Unsupported"][..], 3),
            (&["RlxdOrd"][..], 4),
            (&["ExtTag"][..], 8),
            (&["PhantFunc"][..], 9),
            (&["AuxPwr"][..], 10),
            (&["NoSnoop"][..], 11),
        ] {
            if names.iter().any(|n| flag(dc, n) == Some(true)) {
                v |= 1 << bit;
            }
        }
        if let Some(code) = size_after(dc, "MaxPayload") {
            v |= code << 5;
        }
        if let Some(code) = size_after(dc, "MaxReadReq") {
            v |= code << 12;
        }
        b[o + 8..o + 10].copy_from_slice(&v.to_le_bytes());
    }
    let mut max_code = 0u32;
    if let Some(lc) = e.get("LnkCap") {
        let (s, w) = speed_width(lc);
        max_code = s.as_deref().and_then(speed_code).unwrap_or(0);
        let width: u32 = w.and_then(|w| w.parse().ok()).unwrap_or(0) & 0x3f;
        let port: u32 = lc
            .split(',')
            .find_map(|p| p.trim().strip_prefix("Port #"))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0)
            & 0xff;
        let v = max_code | (width << 4) | (port << 24);
        b[o + 0xc..o + 0x10].copy_from_slice(&v.to_le_bytes());
    }
    if let Some(ls) = e.get("LnkSta") {
        let (s, w) = speed_width(ls);
        let code = s.as_deref().and_then(speed_code).unwrap_or(0) as u16;
        let width: u16 = w.and_then(|w| w.parse().ok()).unwrap_or(0) & 0x3f;
        let mut v = code | (width << 4);
        if flag(ls, "DLActive") == Some(true) {
            v |= 1 << 13;
        }
        b[o + 0x12..o + 0x14].copy_from_slice(&v.to_le_bytes());
    }
    if version < 2 {
        return false;
    }
    // Link Capabilities 2, Supported Link Speeds Vector (bits 7:1; bit N = generation N).
    let (vector, derived) = match e.get("LnkCap2").and_then(supported_speeds) {
        Some(v) => (v, false),
        None if max_code > 0 => (((2u32 << max_code) - 2) & 0xfe, true),
        None => (0, false),
    };
    b[o + 0x2c..o + 0x30].copy_from_slice(&vector.to_le_bytes());
    derived
}

/// `MaxPayload 256 bytes` -> the 3-bit size code (128 << code).
fn size_after(text: &str, key: &str) -> Option<u16> {
    let at = text.find(&format!("{key} "))?;
    let n: u32 = text[at + key.len() + 1..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    (0..=5u16).find(|c| 128u32 << c == n)
}

/// `Supported Link Speeds: 2.5-16GT/s, Crosslink-` -> the vector (generations 1..=max).
fn supported_speeds(text: &str) -> Option<u32> {
    let s = text.split_once("Supported Link Speeds:")?.1.trim();
    let s = s.split([',', ' ']).next()?;
    let top = s.rsplit('-').next()?;
    let top = if top.ends_with("GT/s") {
        top.to_string()
    } else {
        format!("{top}GT/s")
    };
    let code = speed_code(&top)?;
    Some(((2u32 << code) - 2) & 0xfe)
}

/// `Speed 16GT/s (downgraded), Width x16 (ok)` -> ("16GT/s", "16").
fn speed_width(text: &str) -> (Option<String>, Option<String>) {
    let mut speed = None;
    let mut width = None;
    for part in text.split(',') {
        let p = part.trim();
        if let Some(s) = p.strip_prefix("Speed ") {
            speed = s.split_whitespace().next().map(str::to_string);
        } else if let Some(w) = p.strip_prefix("Width ") {
            width = w
                .split_whitespace()
                .next()
                .map(|w| w.strip_prefix('x').unwrap_or(w).to_string());
        }
    }
    (speed, width)
}

const SPEEDS: [(&str, u32, &str); 6] = [
    ("2.5GT/s", 1, "2.5 GT/s PCIe"),
    ("5GT/s", 2, "5.0 GT/s PCIe"),
    ("8GT/s", 3, "8.0 GT/s PCIe"),
    ("16GT/s", 4, "16.0 GT/s PCIe"),
    ("32GT/s", 5, "32.0 GT/s PCIe"),
    ("64GT/s", 6, "64.0 GT/s PCIe"),
];

/// lspci's `16GT/s` -> the Link Speed encoding (4); None for anything else.
fn speed_code(s: &str) -> Option<u32> {
    SPEEDS.iter().find(|(l, _, _)| *l == s).map(|(_, c, _)| *c)
}

/// lspci's `16GT/s` -> the kernel's `16.0 GT/s PCIe`; an unknown speed is kept as lspci wrote it.
fn kernel_speed(s: &str) -> String {
    SPEEDS
        .iter()
        .find(|(l, _, _)| *l == s)
        .map_or_else(|| s.to_string(), |(_, _, k)| k.to_string())
}

/// Each function's parent: the bridge (same domain) whose secondary bus is the function's bus.
/// A chain that loops (hostile input) loses the parent where the loop closes. Returns how many
/// parents were dropped.
fn link_parents(functions: &mut [FunctionRecord]) -> usize {
    let mut by_secondary: BTreeMap<(u32, u8), Bdf> = BTreeMap::new();
    for f in functions.iter() {
        if let Some(s) = f.secondary_bus {
            by_secondary.entry((f.bdf.domain, s)).or_insert(f.bdf);
        }
    }
    for f in functions.iter_mut() {
        f.parent = by_secondary
            .get(&(f.bdf.domain, f.bdf.bus))
            .copied()
            .filter(|p| *p != f.bdf);
    }
    let parent_of: HashMap<Bdf, Option<Bdf>> =
        functions.iter().map(|f| (f.bdf, f.parent)).collect();
    let mut dropped = 0;
    for f in functions.iter_mut() {
        // A chain visits each bus at most once unless it loops: 257 hops is past any tree.
        let mut at = f.parent;
        let mut hops = 0;
        while let Some(p) = at {
            if p == f.bdf || hops > 257 {
                f.parent = None;
                dropped += 1;
                break;
            }
            hops += 1;
            at = parent_of.get(&p).copied().flatten();
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const AER_ROOT: &str =
        include_str!("../../fixtures/records/pciutils-haswell-cx3/lspci-vvvxxxx.txt");
    const ASUS: &str = include_str!("../../fixtures/records/pciutils-asus-p6t6/lspci-xxxx.txt");
    const LNKCAP2: &str = include_str!("../../fixtures/records/pciutils-gp108m/lspci-vvvxxxx.txt");

    fn bdf(s: &str) -> Bdf {
        s.parse().unwrap()
    }

    fn func<'a>(r: &'a MachineRecord, s: &str) -> &'a FunctionRecord {
        r.functions
            .iter()
            .find(|f| f.bdf == bdf(s))
            .unwrap_or_else(|| panic!("{s} not in record"))
    }

    /// The listing with its hex dump rows removed: what `lspci -vvv` as root prints.
    fn decoded_only(text: &str) -> String {
        text.lines()
            .filter(|l| hex_row(l).is_none())
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn sniffs() {
        assert!(looks_like(AER_ROOT));
        assert!(looks_like(ASUS));
        assert!(looks_like(
            "0000:17:00.0 3D controller [0302]: NVIDIA Corporation X [10de:2330] (rev a1)\n"
        ));
        assert!(!looks_like("<?xml version=\"1.0\"?>\n<topology>\n"));
        assert!(!looks_like("hello\nworld\n"));
        assert!(parse("").is_err());
    }

    /// A real root-port + ConnectX-3 Pro listing with decoded text and 4096-byte dumps.
    #[test]
    fn haswell_root_port_and_connectx3_with_dumps() {
        let r = parse(AER_ROOT).unwrap();
        assert_eq!(r.format, Format::Lspci);
        assert_eq!(r.functions.len(), 2);
        let rp = func(&r, "0000:00:02.0");
        assert_eq!((rp.vendor, rp.device), (Some(0x8086), Some(0x2f04)));
        assert_eq!(rp.class, Some(0x060400));
        assert_eq!(rp.revision, Some(0x02));
        assert_eq!((rp.secondary_bus, rp.subordinate_bus), (Some(3), Some(3)));
        assert_eq!(rp.parent, None);
        assert!(!rp.config_synthetic);
        assert_eq!(rp.config.as_ref().map(Vec::len), Some(4096));
        assert_eq!(rp.max_link_speed.as_deref(), Some("8.0 GT/s PCIe"));
        assert_eq!(rp.cur_link_width.as_deref(), Some("8"));
        let cs = ConfigSpace::parse(rp.config.as_ref().unwrap());
        assert_eq!(cs.acs.unwrap().control, 0x1f);
        let nic = func(&r, "0000:03:00.0");
        assert_eq!(nic.parent, Some(bdf("0000:00:02.0")));
        assert_eq!(nic.vendor, Some(0x15b3));
        assert_eq!(nic.class, Some(0x020000));
        assert_eq!(
            nic.description.as_deref(),
            Some("Mellanox Technologies MT27520 Family [ConnectX-3 Pro]")
        );
        assert_eq!(nic.cur_link_speed.as_deref(), Some("8.0 GT/s PCIe"));
        assert_eq!(nic.max_link_width.as_deref(), Some("8"));
        assert!(r.carried.driver);
        assert!(!r.carried.numa_node);
    }

    /// Cross-check on real data: the config space built from the decoded text alone says what the
    /// real dump says, for every fact the checks read.
    #[test]
    fn synthetic_config_agrees_with_the_real_dump() {
        for text in [AER_ROOT, LNKCAP2] {
            let real = parse(text).unwrap();
            let synth = parse(&decoded_only(text)).unwrap();
            assert_eq!(real.functions.len(), synth.functions.len());
            for (a, b) in real.functions.iter().zip(&synth.functions) {
                assert_eq!(a.bdf, b.bdf);
                assert!(!a.config_synthetic && b.config_synthetic, "{}", a.bdf);
                let (ca, cb) = (
                    ConfigSpace::parse(a.config.as_ref().unwrap()),
                    ConfigSpace::parse(b.config.as_ref().unwrap()),
                );
                let (pa, pb) = (ca.pcie.clone().unwrap(), cb.pcie.clone().unwrap());
                assert_eq!(pa.port_type, pb.port_type, "{}", a.bdf);
                assert_eq!(pa.max_payload_bytes, pb.max_payload_bytes, "{}", a.bdf);
                assert_eq!(
                    pa.max_read_request_bytes, pb.max_read_request_bytes,
                    "{}",
                    a.bdf
                );
                assert_eq!(pa.relaxed_ordering, pb.relaxed_ordering, "{}", a.bdf);
                assert_eq!(pa.link_max_gen, pb.link_max_gen, "{}", a.bdf);
                assert_eq!(pa.link_max_width, pb.link_max_width, "{}", a.bdf);
                assert_eq!(pa.link_cur_gen, pb.link_cur_gen, "{}", a.bdf);
                assert_eq!(pa.link_cur_width, pb.link_cur_width, "{}", a.bdf);
                assert_eq!(
                    ca.acs.map(|x| (x.capability, x.control)),
                    cb.acs.map(|x| (x.capability, x.control)),
                    "{}",
                    a.bdf
                );
                assert_eq!(
                    ca.aer_offset.is_some(),
                    cb.aer_offset.is_some(),
                    "{}",
                    a.bdf
                );
                assert_eq!(cb.header_type, ca.header_type, "{}", a.bdf);
                // No -nn and no dump: the decoded text names no ids or class (never invented).
                assert_eq!((b.vendor, b.device, b.class), (None, None, None));
                assert!(a.vendor.is_some() && a.class.is_some());
                assert_eq!(a.max_link_speed, b.max_link_speed, "{}", a.bdf);
                assert_eq!(a.cur_link_width, b.cur_link_width, "{}", a.bdf);
                assert_eq!(a.secondary_bus, b.secondary_bus);
                assert_eq!(a.parent, b.parent);
                assert!(cb.problems.is_empty(), "{:?}", cb.problems);
                // AER registers as decoded, compared with the dump's in the bits lspci names
                // (bit 0 of UESvrt, "Undefined" since PCIe 1.1, and UncorrIntErr before lspci 3.7 are
                // set on real hardware but not printed, so a synthetic space cannot hold them).
                if let (Some(oa), Some(ob)) = (ca.aer_offset, cb.aer_offset) {
                    let rd = |c: &[u8], o: u16, d: usize| {
                        u32::from_le_bytes(
                            c[o as usize + d..o as usize + d + 4].try_into().unwrap(),
                        )
                    };
                    let (ba, bb) = (a.config.as_ref().unwrap(), b.config.as_ref().unwrap());
                    // Only the bits this lspci version names (older ones stop at ACSViol).
                    let shown = |bits: &[(&str, u32)]| {
                        bits.iter()
                            .filter(|(n, _)| flag(text, n).is_some())
                            .fold(0u32, |m, (_, b)| m | 1 << b)
                    };
                    let (ue, ce) = (shown(&UE_BITS), shown(&CE_BITS));
                    for (d, mask) in [(4, ue), (8, ue), (0xc, ue), (0x10, ce), (0x14, ce)] {
                        assert_eq!(rd(ba, oa, d) & mask, rd(bb, ob, d), "{} AER +{d:#x}", a.bdf);
                    }
                }
            }
        }
    }

    /// The GP108M listing: a GPU behind a root port, LnkCap2 shown, a downgraded link.
    #[test]
    fn gpu_behind_root_port_with_lnkcap2() {
        let r = parse(&decoded_only(LNKCAP2)).unwrap();
        assert_eq!(r.functions.len(), 4);
        let gpu = func(&r, "0000:02:00.0");
        assert_eq!(gpu.parent, Some(bdf("0000:00:1c.0")));
        assert_eq!(gpu.class, None, "no -nn and no dump: class unknown");
        assert_eq!(gpu.driver, None, "the listing shows no Kernel driver line");
        assert_eq!(gpu.max_link_speed.as_deref(), Some("8.0 GT/s PCIe"));
        assert_eq!(gpu.cur_link_speed.as_deref(), Some("8.0 GT/s PCIe"));
        assert_eq!(gpu.max_link_width.as_deref(), Some("4"));
        let tb = func(&r, "0000:08:00.0");
        assert_eq!((tb.secondary_bus, tb.subordinate_bus), (Some(9), Some(9)));
        assert_eq!(func(&r, "0000:09:00.0").parent, Some(bdf("0000:08:00.0")));
    }

    /// A real X58 machine as `lspci -xxxx` (no decoded text): everything from the dumps, the
    /// NF200 switch's bus ranges and the GPU's chain up to its root port.
    #[test]
    fn asus_p6t6_tree_from_dumps_only() {
        let r = parse(ASUS).unwrap();
        assert_eq!(r.functions.len(), 53);
        assert!(!r.carried.driver);
        let up = func(&r, "0000:02:00.0");
        assert_eq!(up.vendor, Some(0x10de));
        assert_eq!(up.class, Some(0x060400));
        assert_eq!((up.secondary_bus, up.subordinate_bus), (Some(3), Some(5)));
        assert_eq!(up.parent, Some(bdf("0000:00:03.0")));
        // The SAS controller behind the switch: 04:00.0 -> 03:00.0 -> 02:00.0 -> 00:03.0.
        let sas = func(&r, "0000:04:00.0");
        assert_eq!(sas.parent, Some(bdf("0000:03:00.0")));
        assert_eq!(func(&r, "0000:00:03.0").parent, None);
        assert_eq!(func(&r, "0000:07:00.0").parent, Some(bdf("0000:00:1c.2")));
        let down = func(&r, "0000:03:00.0");
        assert_eq!(down.parent, Some(bdf("0000:02:00.0")));
        let gpu = func(&r, "0000:06:00.0");
        assert_eq!(gpu.class, Some(0x030000));
        assert_eq!((gpu.vendor, gpu.device), (Some(0x10de), Some(0x0a65)));
        assert_eq!(gpu.config.as_ref().map(Vec::len), Some(4096));
        let mut chain = vec![gpu.bdf];
        let mut at = gpu.parent;
        while let Some(p) = at {
            chain.push(p);
            at = func(&r, &p.to_string()).parent;
        }
        assert_eq!(chain, vec![bdf("0000:06:00.0"), bdf("0000:00:07.0")]);
        assert!(gpu.max_link_speed.is_some());
    }

    #[test]
    fn headers_in_every_form() {
        let h = parse_header("0000:17:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)").unwrap();
        assert_eq!(h.bdf, bdf("0000:17:00.0"));
        assert_eq!(h.class, Some(0x030200));
        assert_eq!(
            (h.vendor, h.device, h.revision),
            (Some(0x10de), Some(0x2330), Some(0xa1))
        );
        assert_eq!(
            h.description.as_deref(),
            Some("NVIDIA Corporation GH100 [H100 SXM5 80GB]")
        );
        let h = parse_header("00:01.0 PCI bridge [0604]: Intel Corporation Device [8086:4c01] (rev 01) (prog-if 00 [Normal decode])").unwrap();
        assert_eq!(h.class, Some(0x060400));
        assert_eq!(h.bdf.domain, 0);
        let h = parse_header("00:1d.7 USB Controller: Intel Corporation 82801G (ICH7 Family) USB2 EHCI Controller (rev 02) (prog-if 20 [EHCI])").unwrap();
        assert_eq!(h.class, None);
        assert_eq!(h.revision, Some(2));
        let h = parse_header("0000:17:00.0 030200: Vendor 10de Device 2330 (rev a1)").unwrap();
        assert_eq!(
            (h.class, h.vendor, h.device),
            (Some(0x030200), Some(0x10de), Some(0x2330))
        );
        let h = parse_header("00:00.0 0600: 8086:0d57 (rev 01)").unwrap();
        assert_eq!((h.class, h.vendor), (Some(0x060000), Some(0x8086)));
        assert!(parse_header("00: 86 80 05 34").is_none());
        assert!(parse_header("lspci: Unable to load libkmod resources: error -2").is_none());
    }

    #[test]
    fn decoded_fields_and_synthetic_config() {
        let text = "\
0000:40:01.1 PCI bridge [0604]: Broadcom / LSI PEX890xx PCIe Gen 5 Switch [1000:c030] (rev b0) (prog-if 00 [Normal decode])
\tBus: primary=40, secondary=41, subordinate=45, sec-latency=0
\tCapabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00
\t\tDevCtl:\tCorrErr+ NonFatalErr+ FatalErr+ UnsupReq+
\t\t\tRlxdOrd+ ExtTag+ PhantFunc- AuxPwr- NoSnoop+
\t\t\tMaxPayload 512 bytes, MaxReadReq 4096 bytes
\t\tLnkCap:\tPort #8, Speed 32GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed 16GT/s (downgraded), Width x16
\t\tLnkCap2: Supported Link Speeds: 2.5-32GT/s, Crosslink- Retimer+ 2Retimers+ DRS-
\tCapabilities: [200 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\tKernel driver in use: pcieport

0000:41:00.0 3D controller [0302]: NVIDIA Corporation GH100 [10de:2330] (rev a1)
\tSubsystem: NVIDIA Corporation Device [10de:16c1]
\tNUMA node: 1
\tCapabilities: [60] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16
\t\tLnkSta:\tSpeed 32GT/s, Width x0
";
        let r = parse(text).unwrap();
        assert!(r.carried.numa_node && r.carried.driver);
        let sw = func(&r, "0000:40:01.1");
        assert_eq!(sw.driver.as_deref(), Some("pcieport"));
        assert_eq!(sw.cur_link_speed.as_deref(), Some("16.0 GT/s PCIe"));
        assert_eq!(sw.max_link_speed.as_deref(), Some("32.0 GT/s PCIe"));
        let cs = ConfigSpace::parse(sw.config.as_ref().unwrap());
        assert!(sw.config_synthetic);
        let p = cs.pcie.unwrap();
        assert_eq!(p.port_type, crate::pci::config::PortType::SwitchDownstream);
        assert_eq!((p.max_payload_bytes, p.max_read_request_bytes), (512, 4096));
        assert!(p.relaxed_ordering);
        assert_eq!((p.link_max_gen, p.link_cur_gen), (Some(5), Some(4)));
        let acs = cs.acs.unwrap();
        assert_eq!(acs.control, 0x1d);
        assert_eq!(acs.capability, 0x7d);
        assert_eq!(cs.header_type, Some(1));
        let gpu = func(&r, "0000:41:00.0");
        assert_eq!(gpu.parent, Some(sw.bdf));
        assert_eq!(gpu.numa_node, Some(1));
        assert_eq!(
            (gpu.subsystem_vendor, gpu.subsystem_device),
            (Some(0x10de), Some(0x16c1))
        );
        assert_eq!(
            gpu.cur_link_width.as_deref(),
            Some("0"),
            "x0 kept for the checks"
        );
        assert_eq!(gpu.driver, None);
    }

    #[test]
    fn non_root_listing_builds_no_config() {
        let text = "\
41:00.0 3D controller: NVIDIA Corporation GH100 (rev a1)
\tSubsystem: NVIDIA Corporation Device 16c1
\tFlags: bus master, fast devsel, latency 0, IRQ 24, NUMA node 1
\tCapabilities: <access denied>
\tKernel driver in use: nvidia
\tKernel modules: nvidia
";
        let r = parse(text).unwrap();
        let f = &r.functions[0];
        assert_eq!(f.config, None);
        assert_eq!(f.numa_node, Some(1));
        assert_eq!(f.driver.as_deref(), Some("nvidia"));
        assert!(
            r.notes
                .iter()
                .any(|n| n == "lspci was run without root: capabilities not shown")
        );
    }

    #[test]
    fn hostile_trees_do_not_loop() {
        let text = "\
00:01.0 PCI bridge [0604]: A [1111:2222]
\tBus: primary=00, secondary=02, subordinate=02, sec-latency=0
02:00.0 PCI bridge [0604]: B [1111:2222]
\tBus: primary=02, secondary=00, subordinate=02, sec-latency=0
00:02.0 PCI bridge [0604]: C [1111:2222]
\tBus: primary=00, secondary=00, subordinate=00, sec-latency=0
";
        let r = parse(text).unwrap();
        for f in &r.functions {
            let mut at = f.parent;
            let mut n = 0;
            while let Some(p) = at {
                n += 1;
                assert!(n < 10, "{} loops", f.bdf);
                at = r
                    .functions
                    .iter()
                    .find(|g| g.bdf == p)
                    .and_then(|g| g.parent);
            }
        }
        let long = format!(
            "00:00.0 Host bridge: X\n\t{}\n",
            "a".repeat(MAX_LINE_BYTES + 1)
        );
        let r = parse(&long).unwrap();
        assert!(
            r.notes.iter().any(|n| n.contains("longer than")),
            "{:?}",
            r.notes
        );
    }

    proptest! {
        #[test]
        fn never_panics(s in "(?s).{0,400}") {
            let _ = looks_like(&s);
            let _ = parse(&s);
        }

        #[test]
        fn never_panics_on_lspci_shaped_noise(
            lines in proptest::collection::vec(
                prop_oneof![
                    "[0-9a-f]{2}:[0-9a-f]{2}\\.[0-9] [A-Za-z ]{0,12}(\\[[0-9a-f]{4}\\])?: [ -~]{0,30}",
                    "\t(Bus|LnkCap|LnkSta|DevCtl|ACSCtl|Capabilities|NUMA node): [ -~]{0,40}",
                    "\t\t(LnkCap2|ACSCap|UESta|DevCtl): [ -~]{0,40}",
                    "[0-9a-f]{2,3}:( [0-9a-f]{2}){0,16}",
                    "\tCapabilities: \\[[0-9a-f]{2,3}( v[0-9])?\\] (Express \\(v[0-9]\\) [A-Za-z ]{0,20}|Access Control Services|Advanced Error Reporting)",
                ],
                0..40,
            )
        ) {
            let text = lines.join("\n");
            let _ = parse(&text);
        }
    }
}
