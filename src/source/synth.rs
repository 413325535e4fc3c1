//! A `MachineRecord` (what an nvidia-bug-report log, lspci text, hwloc XML or NCCL topology
//! file says) built as the recorded tree a bundle replays, held in memory: `sys/` with each PCI function
//! at its place under its root complex, `proc/` with the kernel files the record carries, and
//! the NVML snapshot and kernel log the record carries (handed to the source as they are, as a
//! bundle's nvml.json and kmsg.json would be). The reader is then rooted at the tree in memory
//! (`SysRoot::in_memory`) and reads it like any other, so inventory, topology, checks and
//! exports need nothing of their own, and nothing is written to disk.
//!
//! What the record does not carry is never left as a plain missing file (which the reader
//! would report as "not present", and some checks read as "absent"): each such kernel path is
//! given a recorded error "not in {format}", replayed by the reader as a bundle replays the
//! errors of the machine it came from. Only a fact the format carries may read as absent
//! (a function lspci shows without a driver has none).
//!
//! This module writes nothing to any filesystem; it must not judge and must not read anything
//! but the record.

use super::record::{Format, FunctionRecord, MachineRecord};
use crate::kmsg::KernelLog;
use crate::nvml::{NvmlGpu, NvmlLink, NvmlPcie, NvmlReading, NvmlSnapshot};
use crate::pci::Bdf;
use crate::sysroot::{DirHandle, MemTree};
use std::collections::{BTreeMap, BTreeSet};
use std::io;

/// Deepest PCI chain followed (a real one is under ten bridges; a record with a parent loop or
/// absurd depth is cut here, with a note).
const MAX_DEPTH: usize = 32;

/// Host paths the checks read that only some formats carry: each is a recorded error "not in
/// FORMAT" unless the record gives it. Directories are listed, files read.
const HOST_FILES: &[&str] = &[
    "/proc/modules",
    "/proc/cmdline",
    "/proc/version",
    "/proc/uptime",
    "/proc/sys/kernel/osrelease",
    "/proc/driver/nvidia/version",
    "/proc/driver/nvidia/params",
    "/sys/module/pcie_aspm/parameters/policy",
];
const HOST_DIRS: &[&str] = &[
    "/proc/driver/nvidia/gpus",
    "/sys/kernel/iommu_groups",
    "/sys/kernel/mm/memory_peers",
    "/sys/module",
    "/dev",
];

/// The per-function attribute names of the bundle capture list (`bundle::capture::CAPTURE`'s
/// `/sys/bus/pci/devices/*/{...}` lines): every attribute a check may read. One not written
/// for a function is a recorded error, so the list stays in step with the checks by itself.
fn pci_attributes() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for p in crate::bundle::capture::CAPTURE {
        let Some(rest) = p.strip_prefix("/sys/bus/pci/devices/*/") else {
            continue;
        };
        if rest.contains('/') {
            continue;
        }
        match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            Some(alts) => names.extend(alts.split(',').map(str::to_string)),
            None => {
                names.insert(rest.to_string());
            }
        }
    }
    names
}

/// A built tree (with what the reader must replay as unreadable) and what goes with it.
pub struct Written {
    /// The kernel's layout of what the record carries, and an "io" error naming the format
    /// at each path the checks read that it does not carry: for `SysRoot::in_memory`.
    pub tree: MemTree,
    /// What could not be placed (a function whose parent is missing, a loop), said once each.
    pub notes: Vec<String>,
    /// NVML's view as far as the record carries it.
    pub nvml: NvmlSnapshot,
    /// The kernel log's records the checks look at, or unknown naming the format.
    pub kernel_log: KernelLog,
}

struct Tree {
    mem: MemTree,
    reason: String,
}

impl Tree {
    fn file(&mut self, kpath: &str, text: &[u8]) -> io::Result<()> {
        self.mem.file(kpath, text)
    }

    fn dir(&mut self, kpath: &str) -> io::Result<()> {
        self.mem.dir(kpath)
    }

    /// An absolute link (the reader takes absolute targets relative to the root); the first
    /// link made under a name is kept.
    fn link(&mut self, kpath: &str, target: &str) -> io::Result<()> {
        match self.mem.link(kpath, target) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            r => r,
        }
    }

    /// A path the record does not carry: the error the reader replays for it. The reader
    /// consults recorded errors once the path's directory resolves, so only the directory is
    /// made, never a placeholder file.
    fn not_carried(&mut self, kpath: &str) -> io::Result<()> {
        self.mem.unreadable(kpath, "io", Some(&self.reason))
    }

    /// `not_carried` of `dir/name` for each of `names` (a function's or device's attributes).
    fn not_carried_in<'n>(
        &mut self,
        dir: &DirHandle,
        names: impl IntoIterator<Item = &'n str>,
    ) -> io::Result<()> {
        self.mem.unreadable_at(dir, names, "io", Some(&self.reason))
    }
}

fn hex_attr(v: u32, digits: usize) -> String {
    format!("0x{v:0digits$x}\n")
}

/// Each function's canonical sysfs directory: `/sys/devices/pciDDDD:BB/<chain>/<bdf>`, the
/// chain being its bridges from the root bus down. A parent the record does not list, or a
/// loop, puts the function on its own bus's root complex with a note.
fn placements(functions: &[FunctionRecord], notes: &mut Vec<String>) -> BTreeMap<Bdf, String> {
    let by_bdf: BTreeMap<Bdf, &FunctionRecord> = functions.iter().map(|f| (f.bdf, f)).collect();
    let mut out = BTreeMap::new();
    let mut orphans = 0usize;
    let mut loops = 0usize;
    for f in functions {
        let mut chain = vec![f.bdf];
        let mut at = f;
        let mut cut = false;
        while let Some(p) = at.parent {
            if chain.contains(&p) || chain.len() > MAX_DEPTH {
                loops += 1;
                cut = true;
                break;
            }
            match by_bdf.get(&p) {
                Some(pf) => {
                    chain.push(p);
                    at = pf;
                }
                None => {
                    orphans += 1;
                    break;
                }
            }
        }
        if cut {
            chain.truncate(1);
        }
        chain.reverse();
        let top = chain[0];
        let rc = by_bdf
            .get(&top)
            .and_then(|t| t.root_complex.clone())
            .filter(|r| r.starts_with("pci") && r.contains(':') && safe_name(r))
            .unwrap_or_else(|| format!("pci{:04x}:{:02x}", top.domain, top.bus));
        let mut path = format!("/sys/devices/{rc}");
        for b in &chain {
            path.push('/');
            path.push_str(&b.to_string());
        }
        out.insert(f.bdf, path);
    }
    if orphans > 0 {
        notes.push(format!(
            "{orphans} PCI function(s) name a parent bridge the record does not list: placed under the parent's bus as far as it is known"
        ));
    }
    if loops > 0 {
        notes.push(format!(
            "{loops} PCI function(s) sit in a parent loop or a chain deeper than {MAX_DEPTH}: placed on their own bus's root complex"
        ));
    }
    out
}

/// The record's functions, each address once: the first listing wins (a record listing one
/// function twice), with a note when any was dropped.
fn unique_functions(rec: &MachineRecord, notes: &mut Vec<String>) -> Vec<FunctionRecord> {
    let mut seen = BTreeSet::new();
    let functions: Vec<FunctionRecord> = rec
        .functions
        .iter()
        .filter(|f| seen.insert(f.bdf))
        .cloned()
        .collect();
    if functions.len() < rec.functions.len() {
        notes.push(format!(
            "{} PCI function(s) listed twice: the first listing kept",
            rec.functions.len() - functions.len()
        ));
    }
    functions
}

impl Tree {
    /// The bus and class directories: made where the record carries them, else recorded as
    /// not carried (`/sys/class/infiniband` is made for the NICs shown by address).
    fn class_dirs(&mut self, rec: &MachineRecord, named_by_address: usize) -> io::Result<()> {
        self.dir("/sys/bus/pci/devices")?;
        self.dir("/sys/bus/pci/drivers")?;
        if rec.carried.os_devices {
            self.dir("/sys/class/net")?;
            self.dir("/sys/class/infiniband")?;
        } else {
            self.not_carried("/sys/class/net")?;
            // The NICs shown by address stand in for the RDMA devices the record does not name.
            if named_by_address > 0 {
                self.dir("/sys/class/infiniband")?;
            } else {
                self.not_carried("/sys/class/infiniband")?;
            }
        }
        self.not_carried("/sys/class/infiniband_verbs")
    }

    /// One function at its place `d`: its attributes, driver and physfn links, every other
    /// attribute of `attrs` as not carried, then its network and RDMA devices.
    fn function(
        &mut self,
        rec: &MachineRecord,
        f: &FunctionRecord,
        d: &str,
        attrs: &BTreeSet<String>,
    ) -> io::Result<()> {
        let dh = self.mem.dir_handle(d)?;
        self.link(&format!("/sys/bus/pci/devices/{}", f.bdf), d)?;
        let mut written = self.attributes(rec, f, &dh)?;
        match (&f.driver, rec.carried.driver) {
            (Some(name), _) if !name.is_empty() && !name.contains('/') && name != ".." => {
                written.insert("driver");
                self.dir(&format!("/sys/bus/pci/drivers/{name}"))?;
                self.link(
                    &format!("{d}/driver"),
                    &format!("/sys/bus/pci/drivers/{name}"),
                )?;
            }
            // Carried and not shown: no driver bound, read as such.
            (_, true) => {
                written.insert("driver");
            }
            _ => {}
        }
        if let Some(pf) = f.physfn {
            written.insert("physfn");
            self.link(
                &format!("{d}/physfn"),
                &format!("/sys/bus/pci/devices/{pf}"),
            )?;
        }
        let missing = attrs
            .iter()
            .map(String::as_str)
            .filter(|name| !written.contains(name));
        self.not_carried_in(&dh, missing)?;
        self.os_devices(rec, f, d)
    }

    /// The attribute files of function `f` that the record gives (in its directory `dh`);
    /// the names written.
    fn attributes(
        &mut self,
        rec: &MachineRecord,
        f: &FunctionRecord,
        dh: &DirHandle,
    ) -> io::Result<BTreeSet<&'static str>> {
        let mut written: BTreeSet<&'static str> = BTreeSet::new();
        let mut put = |t: &mut Tree, name: &'static str, text: &[u8]| -> io::Result<()> {
            written.insert(name);
            t.mem.file_at(dh, name, text)
        };
        if let Some(v) = f.class {
            put(self, "class", hex_attr(v, 6).as_bytes())?;
        }
        if let Some(v) = f.vendor {
            put(self, "vendor", hex_attr(v.into(), 4).as_bytes())?;
        }
        if let Some(v) = f.device {
            put(self, "device", hex_attr(v.into(), 4).as_bytes())?;
        }
        if let Some(v) = f.subsystem_vendor {
            put(self, "subsystem_vendor", hex_attr(v.into(), 4).as_bytes())?;
        }
        if let Some(v) = f.subsystem_device {
            put(self, "subsystem_device", hex_attr(v.into(), 4).as_bytes())?;
        }
        if let Some(v) = f.revision {
            put(self, "revision", hex_attr(v.into(), 2).as_bytes())?;
        }
        if let Some(c) = &f.config {
            put(self, "config", c)?;
        }
        for (name, v) in [
            ("current_link_speed", &f.cur_link_speed),
            ("current_link_width", &f.cur_link_width),
            ("max_link_speed", &f.max_link_speed),
            ("max_link_width", &f.max_link_width),
            ("local_cpulist", &f.local_cpulist),
        ] {
            if let Some(s) = v {
                put(self, name, format!("{s}\n").as_bytes())?;
            }
        }
        // The kernel's local_cpulist of a function is its NUMA node's CPUs.
        if f.local_cpulist.is_none()
            && let Some(n) = f.numa_node
            && let Some(c) = rec
                .numa
                .iter()
                .flatten()
                .find(|x| i64::from(x.id) == i64::from(n))
                .and_then(|x| x.cpulist.as_ref())
        {
            put(self, "local_cpulist", format!("{c}\n").as_bytes())?;
        }
        match (f.numa_node, rec.carried.numa_node) {
            (Some(n), _) => put(self, "numa_node", format!("{n}\n").as_bytes())?,
            // The format shows a node wherever the kernel knew one: none shown is -1.
            (None, true) => put(self, "numa_node", b"-1\n")?,
            (None, false) => {}
        }
        if let Some(b) = f.secondary_bus {
            put(self, "secondary_bus_number", format!("{b}\n").as_bytes())?;
        }
        if let Some(b) = f.subordinate_bus {
            put(self, "subordinate_bus_number", format!("{b}\n").as_bytes())?;
        }
        Ok(written)
    }

    /// Function `f`'s network interfaces and RDMA devices (its own, or its stand-in name)
    /// under its directory `d`, linked from their classes, their attributes not carried.
    fn os_devices(&mut self, rec: &MachineRecord, f: &FunctionRecord, d: &str) -> io::Result<()> {
        for n in f.netdevs.iter().filter(|n| safe_name(n)) {
            let nd = format!("{d}/net/{n}");
            let ndh = self.mem.dir_handle(&nd)?;
            self.link(&format!("/sys/class/net/{n}"), &nd)?;
            self.link(&format!("{nd}/device"), d)?;
            self.not_carried_in(
                &ndh,
                ["mtu", "operstate", "type", "address", "speed", "carrier"],
            )?;
        }
        let stand_in = stand_in_rdma_name(rec, f).into_iter();
        for n in f
            .rdma_devices
            .iter()
            .cloned()
            .chain(stand_in)
            .filter(|n| safe_name(n))
        {
            let n = &n;
            let rd = format!("{d}/infiniband/{n}");
            let rdh = self.mem.dir_handle(&rd)?;
            self.link(&format!("/sys/class/infiniband/{n}"), &rd)?;
            self.link(&format!("{rd}/device"), d)?;
            self.not_carried_in(
                &rdh,
                [
                    "ports",
                    "node_type",
                    "fw_ver",
                    "hca_type",
                    "node_guid",
                    "board_id",
                ],
            )?;
        }
        Ok(())
    }

    /// The NUMA nodes' directories with their cpulist and distance, each not carried where
    /// the record does not give it.
    fn numa(&mut self, rec: &MachineRecord) -> io::Result<()> {
        let Some(nodes) = &rec.numa else {
            return self.not_carried("/sys/devices/system/node");
        };
        self.dir("/sys/devices/system/node")?;
        for n in nodes {
            let nd = format!("/sys/devices/system/node/node{}", n.id);
            self.dir(&nd)?;
            match &n.cpulist {
                Some(c) => self.file(&format!("{nd}/cpulist"), format!("{c}\n").as_bytes())?,
                None => self.not_carried(&format!("{nd}/cpulist"))?,
            }
            match &n.distance {
                Some(c) => self.file(&format!("{nd}/distance"), format!("{c}\n").as_bytes())?,
                None => self.not_carried(&format!("{nd}/distance"))?,
            }
        }
        Ok(())
    }

    /// The host's kernel files the record carries, every other host path the checks read as
    /// not carried, and the hostname where the record names it.
    fn host(&mut self, rec: &MachineRecord) -> io::Result<()> {
        for p in HOST_FILES {
            match rec.kernel_files.get(*p) {
                Some(text) => self.file(p, text.as_bytes())?,
                None => self.not_carried(p)?,
            }
        }
        for p in HOST_DIRS {
            self.not_carried(p)?;
        }
        // Process names: no record carries them.
        self.not_carried("/proc")?;
        if let Some(h) = &rec.hostname {
            self.file("/proc/sys/kernel/hostname", format!("{h}\n").as_bytes())?;
        }
        Ok(())
    }
}

/// Build `rec` as a recorded tree in memory. Fails only where a filesystem would refuse the
/// tree (a name with a NUL byte or longer than NAME_MAX, one entry over another).
pub fn build(rec: &MachineRecord) -> io::Result<Written> {
    let format = rec.format;
    let mut t = Tree {
        mem: MemTree::new(),
        reason: format.not_carried(),
    };
    let mut notes = Vec::new();
    let functions = unique_functions(rec, &mut notes);
    let places = placements(&functions, &mut notes);
    let named_by_address = functions
        .iter()
        .filter(|f| stand_in_rdma_name(rec, f).is_some())
        .count();
    if named_by_address > 0 {
        notes.push(format!(
            "RDMA device names are {}: {named_by_address} NIC(s) of InfiniBand class or an RDMA NIC family are shown by PCI address (rdma@BDF); their ports are unknown",
            format.not_carried()
        ));
    }
    let attrs = pci_attributes();
    t.class_dirs(rec, named_by_address)?;
    for f in &functions {
        t.function(rec, f, &places[&f.bdf], &attrs)?;
    }
    t.numa(rec)?;
    t.host(rec)?;
    Ok(Written {
        tree: t.mem,
        notes,
        nvml: nvml_snapshot(rec),
        kernel_log: kernel_log(rec),
    })
}

/// Where a record lists NICs but not their RDMA devices (lspci, bug reports, cloud NCCL files
/// that let NCCL find the devices itself), a NIC that has one wherever its driver runs (an
/// InfiniBand-class function; a ConnectX or EFA) is shown under its PCI address, so the matrix
/// and each GPU's closest NIC can still be judged. Its name says it is not the kernel's; its
/// ports are unknown.
fn stand_in_rdma_name(rec: &MachineRecord, f: &FunctionRecord) -> Option<String> {
    if rec.carried.os_devices || !f.rdma_devices.is_empty() || f.physfn.is_some() {
        return None;
    }
    let class = f.class?;
    let infiniband = class >> 8 == 0x0207;
    let rdma_family = class >> 8 == 0x0200 && matches!(f.vendor, Some(0x15b3) | Some(0x1d0f));
    (infiniband || rdma_family).then(|| format!("rdma@{}", f.bdf))
}

/// A name that can be a directory entry of the tree (no separators, not `.`/`..`).
fn safe_name(n: &str) -> bool {
    !n.is_empty() && n.len() < 256 && !n.contains(['/', '\0']) && n != "." && n != ".."
}

/// NVML's view as far as the record carries it; a record without GPU facts leaves NVML
/// unknown, naming the format.
fn nvml_snapshot(rec: &MachineRecord) -> NvmlSnapshot {
    let why = rec.format.not_carried();
    if rec.gpus.is_empty() {
        return NvmlSnapshot::unavailable(why, &source_name(rec.format));
    }
    // What the record carries is a value; what it does not, unknown for the format's reason.
    fn fact<T>(why: &str, v: Option<T>) -> NvmlReading<T> {
        match v {
            Some(v) => NvmlReading::of(v),
            None => NvmlReading::unknown(why, None),
        }
    }
    let w = why.as_str();
    let mut s = NvmlSnapshot {
        schema: crate::nvml::SCHEMA.to_string(),
        source: source_name(rec.format),
        driver_version: fact(w, rec.driver_version.clone()),
        nvml_version: fact(w, None),
        cuda_driver_version: fact(w, None),
        unavailable: None,
        unavailable_kind: None,
        listed_by_nvml: match rec.format.nvml_not_asked() {
            Some(not_asked) => NvmlReading::unknown(not_asked, None),
            None => NvmlReading::of(()),
        },
        device_count: NvmlReading::of(rec.gpus.len() as u32),
        gpus: Vec::new(),
        p2p: fact(w, None),
    };
    let link_state_hidden = rec.format.nvlink_state_hidden();
    let mut gpus: Vec<_> = rec.gpus.iter().collect();
    gpus.sort_by_key(|g| g.bdf);
    for (i, g) in gpus.into_iter().enumerate() {
        let (nvlinks, nvlinks_listed) = match &g.nvlinks {
            Some(links) => (
                links
                    .iter()
                    .map(|l| NvmlLink {
                        link: l.link,
                        active: l.active,
                        remote_bus_id: fact(w, l.remote_bus_id.map(|b| b.nvml())),
                        remote_device_type: fact(
                            w,
                            l.remote_kind.as_deref().map(|k| match k {
                                "gpu" => crate::facts::NvLinkRemote::Gpu,
                                "switch" => crate::facts::NvLinkRemote::Switch,
                                "ibmnpu" | "cpu" => crate::facts::NvLinkRemote::Ibmnpu,
                                _ => crate::facts::NvLinkRemote::Unknown,
                            }),
                        ),
                    })
                    .collect(),
                NvmlReading::of(()),
            ),
            None => (
                Vec::new(),
                NvmlReading::unknown(format!("nvlinks: {why}"), None),
            ),
        };
        s.gpus.push(NvmlGpu {
            index: i as u32,
            bus_id: NvmlReading::of(g.bdf.nvml()),
            uuid: fact(w, g.uuid.clone()),
            name: fact(w, g.name.clone()),
            serial: fact(w, g.serial.clone()),
            memory_total_bytes: fact(w, g.memory_total_bytes),
            bar1_total_bytes: fact(w, g.bar1_total_bytes),
            pcie: NvmlPcie {
                gen_current: fact(w, None),
                gen_max: fact(w, None),
                width_current: fact(w, None),
                width_max: fact(w, None),
            },
            nvlinks,
            nvlinks_listed,
            nvlink_state: match &link_state_hidden {
                Some(hidden) => NvmlReading::unknown(hidden.clone(), None),
                None => NvmlReading::of(()),
            },
            persistence_mode: fact(w, g.persistence_mode),
            ecc_enabled: fact(w, g.ecc_enabled),
            ecc_volatile_uncorrected: fact(w, None),
            retired_pending: fact(w, None),
            remapped_rows_pending: fact(w, None),
            numa_node_id: fact(w, g.numa_node_id),
            clock_event_reasons: fact(w, None),
            nvlink_errors: BTreeMap::new(),
            fabric: fact(w, None),
        });
    }
    s
}

fn source_name(f: Format) -> String {
    format!("from {}", f.article_name())
}

/// The kernel log records the record carries, in `/dev/kmsg` form; unknown when it carries none.
fn kernel_log(rec: &MachineRecord) -> KernelLog {
    let Some(lines) = &rec.kernel_messages else {
        return KernelLog::not_recorded(&rec.format.not_carried());
    };
    let mut k = KernelLog::not_recorded("");
    k.unavailable = None;
    k.source = format!(
        "{}{}",
        crate::kmsg::RECORD_ORIGIN,
        rec.format.article_name()
    );
    k.records_read = lines.len() as u64;
    k.lines = lines
        .iter()
        .enumerate()
        .map(|(i, l)| kmsg_line(i, l))
        .filter(|l| crate::kmsg::xid(l).is_some() || crate::kmsg::link_down(l).is_some())
        .collect();
    k
}

/// A kernel message as a `/dev/kmsg` record (`kmsg::from_log_line`).
fn kmsg_line(seq: usize, line: &str) -> String {
    crate::kmsg::from_log_line(seq, line)
}
