//! What a record in another format (an nvidia-bug-report log, `lspci` text, hwloc XML, an NCCL
//! topology file) says about a machine, in one shape every format parser fills: PCI functions
//! with their place in the tree, NUMA nodes, host files, kernel messages, GPU facts NVML would
//! give. `synth` turns it into the same recorded tree a bundle replays, so everything downstream
//! (inventory, topology, checks, exports) reads it unchanged.
//!
//! A field left `None` is a fact the record does not carry: it becomes an unknown naming the
//! format ("not in an hwloc XML"), never a default. A format that does carry a fact and shows
//! it absent (lspci lists a function with no "Kernel driver in use") says so through
//! `Carried`, so absence is read as absence only where the format is able to show it.
//!
//! This module holds data only: no parsing, no I/O, no judging.

use crate::pci::Bdf;
use std::collections::BTreeMap;

/// The formats `--from` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `nvidia-bug-report.log(.gz)`.
    BugReport,
    /// `lspci` text (`-v`..`-vvv`, with or without `-D`, `-nn`, `-k`, `-x`..`-xxxx`).
    Lspci,
    /// hwloc's XML (`lstopo --of xml`), v1 or v2.
    Hwloc,
    /// NCCL topology XML: an `NCCL_TOPO_DUMP_FILE` dump or a hand-written `NCCL_TOPO_FILE`.
    Nccl,
}

impl Format {
    pub const ALL: [Format; 4] = [
        Format::BugReport,
        Format::Lspci,
        Format::Hwloc,
        Format::Nccl,
    ];

    /// The name `--from-format` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::BugReport => "bug-report",
            Format::Lspci => "lspci",
            Format::Hwloc => "hwloc",
            Format::Nccl => "nccl",
        }
    }

    /// "hwloc XML": the format named in a report header.
    pub fn noun(self) -> &'static str {
        match self {
            Format::BugReport => "nvidia-bug-report log",
            Format::Lspci => "lspci listing",
            Format::Hwloc => "hwloc XML",
            Format::Nccl => "NCCL topology XML",
        }
    }

    /// "an hwloc XML": for "not in {}" reasons.
    pub fn article_name(self) -> &'static str {
        match self {
            Format::BugReport => "an nvidia-bug-report log",
            Format::Lspci => "an lspci listing",
            Format::Hwloc => "an hwloc XML",
            Format::Nccl => "an NCCL topology XML",
        }
    }

    /// Why a fact this format does not carry is unknown.
    pub fn not_carried(self) -> String {
        format!("not in {}", self.article_name())
    }

    /// Why this format's GPU list says nothing of NVML answering, where it does not: NCCL's
    /// `<gpu>` elements are its PCI devices (a hand-written file was never made by NCCL at
    /// all), so counting them against the PCI listing compares the file with itself. A bug
    /// report's `nvidia-smi -q` and hwloc's NVML/CUDA devices are NVML's own answers.
    pub fn nvml_not_asked(self) -> Option<String> {
        match self {
            Format::Nccl => Some(format!(
                "whether NVML answered is {} (its GPUs are its PCI devices, one list)",
                self.not_carried()
            )),
            Format::BugReport | Format::Lspci | Format::Hwloc => None,
        }
    }

    /// Why a down NVLink would not show in this format, where it would not: NCCL writes only
    /// the links it found active, so every link listed is up whether or not others are down.
    pub fn nvlink_state_hidden(self) -> Option<String> {
        match self {
            Format::Nccl => Some(format!(
                "NVLink state is {}: NCCL writes only the links it found active, so a link that is down is not listed",
                self.not_carried()
            )),
            Format::BugReport | Format::Lspci | Format::Hwloc => None,
        }
    }

    /// Why the bridges between devices are not all shown, where they are not: NCCL's tree
    /// leaves out root ports and switch downstream ports, so two devices that look flat may
    /// have ports (and their ACS) between them.
    pub fn bridges_hidden(self) -> Option<String> {
        match self {
            Format::Nccl => Some(format!(
                "root ports and switch downstream ports are {} (NCCL leaves them out), so the ports between devices and their ACS are unknown",
                self.not_carried()
            )),
            Format::BugReport | Format::Lspci | Format::Hwloc => None,
        }
    }
}

/// Most PCI functions one record places (a PCI segment has at most 65,536): lspci listings and
/// hwloc XML stop there and note the rest (an NCCL file has its own, lower cap).
pub const MAX_FUNCTIONS: usize = 1 << 16;

/// A PCI function as the record shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FunctionRecord {
    pub bdf: Bdf,
    /// The bridge (root port or switch port) whose secondary bus this function sits on; None:
    /// on a root bus (under the root complex `pci{domain}:{bus}`).
    pub parent: Option<Bdf>,
    pub vendor: Option<u16>,
    pub device: Option<u16>,
    /// The 24-bit class code (0x030200: 3D controller).
    pub class: Option<u32>,
    pub subsystem_vendor: Option<u16>,
    pub subsystem_device: Option<u16>,
    pub revision: Option<u8>,
    /// Config space as dumped (64, 256 or 4096 bytes), or built from decoded fields (`synthetic`).
    pub config: Option<Vec<u8>>,
    /// True when `config` was assembled from decoded text rather than dumped.
    pub config_synthetic: bool,
    /// The kernel's attribute strings: "16.0 GT/s PCIe", "16".
    pub cur_link_speed: Option<String>,
    pub cur_link_width: Option<String>,
    pub max_link_speed: Option<String>,
    pub max_link_width: Option<String>,
    /// -1 is the kernel's "no affinity".
    pub numa_node: Option<i32>,
    pub local_cpulist: Option<String>,
    pub driver: Option<String>,
    /// Bridges: secondary and subordinate bus numbers.
    pub secondary_bus: Option<u8>,
    pub subordinate_bus: Option<u8>,
    /// Network interfaces and RDMA devices on this function.
    pub netdevs: Vec<String>,
    pub rdma_devices: Vec<String>,
    /// The record's own name for the device ("NVIDIA Corporation GH100 [H100 SXM5 80GB]").
    pub description: Option<String>,
    /// SR-IOV: the physical function of this virtual function.
    pub physfn: Option<Bdf>,
    /// For a function on a root bus (`parent` None): the root complex it hangs from, where the
    /// record names one other than its own bus (`pci{domain}:{bus}`): an NCCL file's invented
    /// `ffff:ff:..` switches hang from the `<cpu>` they are under.
    pub root_complex: Option<String>,
}

/// Which facts the format carries for every function (so absence there means absent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Carried {
    /// A function without a driver shows none (lspci -k / -v "Kernel driver in use").
    pub driver: bool,
    /// NUMA nodes of functions ("NUMA node:" in lspci -v; hwloc's locality).
    pub numa_node: bool,
    /// Net and RDMA devices per function (hwloc's OS devices; NCCL's `<net>`).
    pub os_devices: bool,
}

/// A NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaRecord {
    pub id: u32,
    /// "0-31,64-95"
    pub cpulist: Option<String>,
    /// The SLIT row, as /sys/devices/system/node/nodeN/distance shows it ("10 21").
    pub distance: Option<String>,
}

/// One NVLink of a GPU as the record shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvLinkRecord {
    pub link: u32,
    pub active: bool,
    /// The peer's PCI address (a GPU, an NVSwitch, a CPU), when the record names it.
    pub remote_bus_id: Option<Bdf>,
    /// "gpu", "switch", "cpu" (NVML's remote device type), when known.
    pub remote_kind: Option<String>,
}

/// What NVML would say of a GPU, as far as the record carries it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuRecord {
    pub bdf: Bdf,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub bar1_total_bytes: Option<u64>,
    /// CUDA compute capability x10 (NCCL's `sm="90"`).
    pub sm: Option<u32>,
    /// None: the record says nothing of NVLinks; Some(empty): it shows none.
    pub nvlinks: Option<Vec<NvLinkRecord>>,
    pub persistence_mode: Option<bool>,
    pub ecc_enabled: Option<bool>,
    pub numa_node_id: Option<u32>,
}

pub use crate::foreign::{ForeignGdr, ForeignVerdicts};

impl ForeignVerdicts {
    /// What a parsed record hands on: NCCL's verdicts for an NCCL topology XML, none for the
    /// formats that have no such attribute.
    pub fn of_record(rec: &MachineRecord) -> Self {
        match rec.format {
            Format::Nccl => ForeignVerdicts::Carried {
                noun: rec.format.noun(),
                verdicts: rec.foreign_gdr.clone(),
            },
            other => ForeignVerdicts::NotCarried(format!(
                "{} carries no NCCL GPUDirect verdict (only an NCCL topology XML has gdr attributes)",
                capitalized(other.article_name())
            )),
        }
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// Everything a record says about one machine.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineRecord {
    pub format: Format,
    pub functions: Vec<FunctionRecord>,
    pub carried: Carried,
    /// None: the format carries no NUMA topology.
    pub numa: Option<Vec<NumaRecord>>,
    /// Kernel files by their absolute path ("/proc/driver/nvidia/params", "/proc/cmdline",
    /// "/proc/modules", "/proc/version", "/proc/driver/nvidia/version"): the text as the kernel
    /// shows it. A path not here is not carried.
    pub kernel_files: BTreeMap<String, String>,
    /// Kernel log records as text (no `PRI,SEQ,USEC,FLAGS;` prefix, or with one); None: not
    /// carried.
    pub kernel_messages: Option<Vec<String>>,
    /// GPUs as NVML would show them; empty when the format carries no such facts.
    pub gpus: Vec<GpuRecord>,
    /// The driver version the record names ("580.65.06").
    pub driver_version: Option<String>,
    pub foreign_gdr: Vec<ForeignGdr>,
    pub hostname: Option<String>,
    /// What the parser skipped or could not read, said once each ("3 lspci entries without an
    /// address skipped").
    pub notes: Vec<String>,
    /// What this record cannot tell, for the report header ("ACS: not in an hwloc XML").
    pub cannot_tell: Vec<String>,
}

impl MachineRecord {
    pub fn new(format: Format) -> Self {
        MachineRecord {
            format,
            functions: Vec::new(),
            carried: Carried::default(),
            numa: None,
            kernel_files: BTreeMap::new(),
            kernel_messages: None,
            gpus: Vec::new(),
            driver_version: None,
            foreign_gdr: Vec::new(),
            hostname: None,
            notes: Vec::new(),
            cannot_tell: Vec::new(),
        }
    }
}

/// Why a record could not be read at all (one `gpudoctor: error:` line, exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("not {0}: {1}")]
    NotThisFormat(&'static str, String),
    #[error("{0}")]
    Malformed(String),
    #[error("refused: {0}")]
    Refused(String),
}
