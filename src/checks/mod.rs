//! Level-0 checks: pure functions over the inventory and topology, one module per area
//! (cargo-deny's habit). Each check id is permanent API with a document in `checks/<id>.md`.
//!
//! Checks must not do I/O: what a check needs is added to the inventory (and so to the bundle
//! capture list) first. Unknown is never pass: a fact that could not be read gives `skip` with
//! the reason.

mod driver;
mod gdr;
mod gpu;
mod host;
pub mod level1;
pub mod level2;
mod pcie;
mod placement;
mod rdma;

use crate::inventory::Inventory;
use crate::libs::LibFacts;
use crate::topo::Topology;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Pass,
    Skip,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skip => "skip",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// What was read to reach a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// The file, register or NVML call read.
    pub source: String,
    /// The value seen (or why it could not be read).
    pub value: String,
}

pub fn ev(source: impl Into<String>, value: impl Into<String>) -> Evidence {
    Evidence {
        source: source.into(),
        value: value.into(),
    }
}

/// One check's verdict on one subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub id: &'static str,
    /// A BDF, an RDMA device (`mlx5_2`, `mlx5_2/1` for a port), a GPU label, or `host`.
    pub subject: String,
    pub status: Status,
    pub message: String,
    pub evidence: Vec<Evidence>,
    /// How to fix it; present on every warn and fail.
    pub remediation: Option<String>,
    /// Set when `--warn/--deny/--skip` changed the status: the status the check gave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_status: Option<Status>,
}

impl Finding {
    pub fn new(
        id: &'static str,
        subject: impl Into<String>,
        status: Status,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            id,
            subject: subject.into(),
            status,
            message: message.into(),
            evidence: Vec::new(),
            remediation: None,
            original_status: None,
        }
    }
    pub fn with(mut self, e: Evidence) -> Self {
        self.evidence.push(e);
        self
    }
    pub fn evidence(mut self, e: Vec<Evidence>) -> Self {
        self.evidence.extend(e);
        self
    }
    pub fn fix(mut self, f: impl Into<String>) -> Self {
        self.remediation = Some(f.into());
        self
    }
}

/// Catalog entry.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CheckInfo {
    pub id: &'static str,
    pub level: u8,
    /// The worst status the check gives by default.
    pub severity: Status,
    pub title: &'static str,
    #[serde(skip)]
    pub doc: &'static str,
}

macro_rules! catalog {
    ($( ($id:literal, $level:literal, $sev:ident, $title:literal) ),* $(,)?) => {
        pub const CATALOG: &[CheckInfo] = &[
            $( CheckInfo {
                id: $id,
                level: $level,
                severity: Status::$sev,
                title: $title,
                doc: include_str!(concat!("../../checks/", $id, ".md")),
            } ),*
        ];
    };
}

catalog![
    (
        "driver.nvidia-loaded",
        0,
        Fail,
        "NVIDIA kernel driver loaded (open or proprietary module)"
    ),
    ("driver.nvml", 0, Fail, "NVML loadable and answering"),
    (
        "driver.version-match",
        0,
        Fail,
        "NVML library and kernel module versions agree"
    ),
    (
        "driver.gpu-count",
        0,
        Fail,
        "GPU count agrees across sysfs, NVML, the driver and /dev"
    ),
    (
        "gdr.peermem",
        0,
        Fail,
        "nvidia-peermem registered with the RDMA core"
    ),
    (
        "gdr.dmabuf",
        0,
        Warn,
        "dma-buf GPUDirect RDMA possible (open module, kernel >= 5.12, ibv_reg_dmabuf_mr)"
    ),
    (
        "gdr.path",
        0,
        Fail,
        "GPUDirect RDMA memory path for each GPU and its NIC"
    ),
    (
        "pcie.acs-redirect",
        0,
        Fail,
        "No ACS P2P redirect on bridges between GPUs and NICs"
    ),
    (
        "iommu.mode",
        0,
        Fail,
        "IOMMU off or passthrough for GPUs and NICs"
    ),
    ("gpu.bar1", 0, Fail, "BAR1 large enough to map GPU memory"),
    (
        "pcie.link-width",
        0,
        Fail,
        "PCIe link trained at full width"
    ),
    (
        "pcie.link-speed",
        0,
        Fail,
        "PCIe link trained at full speed"
    ),
    (
        "pcie.slot-mismatch",
        0,
        Fail,
        "Device not capped by a slower slot or port above it"
    ),
    (
        "numa.gpu-nic",
        0,
        Fail,
        "GPU and its closest NIC on the same NUMA node"
    ),
    (
        "topo.gpu-nic-pairing",
        0,
        Fail,
        "Each GPU has a NIC at PIX/PXB"
    ),
    ("rdma.port-state", 0, Fail, "RDMA port ACTIVE and LinkUp"),
    ("rdma.roce-gid", 0, Fail, "RoCE port has a RoCE v2 GID"),
    (
        "rdma.mtu",
        0,
        Warn,
        "Netdev MTU allows a 4096-byte RoCE MTU"
    ),
    (
        "rdma.fw-consistency",
        0,
        Warn,
        "Same firmware on NICs of the same model"
    ),
    (
        "pcie.devctl",
        0,
        Warn,
        "MaxReadReq and relaxed ordering on GPUs and NICs"
    ),
    ("pcie.aer", 0, Warn, "No PCIe AER errors counted"),
    ("gpu.persistence", 0, Warn, "Persistence mode on"),
    (
        "gpu.ecc",
        0,
        Fail,
        "ECC enabled and no volatile uncorrectable errors"
    ),
    (
        "gpu.row-remap",
        0,
        Fail,
        "No pending row remaps or page retirements"
    ),
    (
        "gpu.p2p",
        0,
        Fail,
        "NVML reports P2P read/write OK between GPU pairs"
    ),
    ("gpu.nvlink-down", 0, Fail, "No NVLink down"),
    (
        "probe.h2d",
        1,
        Fail,
        "Host-to-GPU copies reach 80% of the PCIe link rate"
    ),
    (
        "probe.d2h",
        1,
        Fail,
        "GPU-to-host copies reach 80% of the PCIe link rate"
    ),
    (
        "probe.p2p",
        1,
        Fail,
        "GPU-to-GPU copies reach the NVLink/PCIe rate; peer access works"
    ),
    (
        "probe.dmabuf-export",
        1,
        Fail,
        "GPU memory exports as a dma-buf (GPU half of dma-buf GPUDirect RDMA)"
    ),
    (
        "probe.write-bw",
        2,
        Fail,
        "RDMA-write loopback on every active port moves and validates data at line rate"
    ),
    (
        "baseline.gpus",
        0,
        Fail,
        "GPUs at the baseline's PCI positions, of the baseline's model (--expect)"
    ),
    (
        "baseline.nics",
        0,
        Fail,
        "NICs at the baseline's PCI positions, model and port link layer/rate (--expect)"
    ),
    (
        "baseline.paths",
        0,
        Fail,
        "GPU-GPU and GPU-NIC path types as in the baseline (--expect)"
    ),
    (
        "baseline.pcie",
        0,
        Fail,
        "PCIe link capability and width as in the baseline (--expect)"
    ),
    (
        "baseline.nvlink",
        0,
        Fail,
        "Active NVLinks per GPU as in the baseline (--expect)"
    ),
    (
        "baseline.bar1",
        0,
        Fail,
        "BAR1 size as in the baseline (--expect)"
    ),
    (
        "baseline.versions",
        0,
        Fail,
        "Driver, kernel and NIC firmware versions as in the baseline (--expect)"
    ),
    (
        "baseline.bandwidth",
        1,
        Fail,
        "Probe bandwidth at or above the baseline's floors (--expect, --level 1)"
    ),
];

/// The check list for `gpudoctor check --help` and the man page.
pub fn catalog_help() -> String {
    let mut s = String::from("Checks (`gpudoctor explain ID` for details):\n");
    for c in CATALOG {
        s.push_str(&format!(
            "  {:<22} level {}, {}: {}\n",
            c.id,
            c.level,
            c.severity.as_str(),
            c.title
        ));
    }
    s.push_str("\nExit status: 0 nothing failed, 1 a check failed (or warned, with --strict), 2 gpudoctor could not run.");
    s
}

pub fn info(id: &str) -> Option<&'static CheckInfo> {
    CATALOG.iter().find(|c| c.id == id)
}

/// Everything checks may look at.
pub struct Ctx<'a> {
    pub inv: &'a Inventory,
    pub topo: &'a Topology,
    pub libs: &'a LibFacts,
}

/// Run every level-0 check.
pub fn run_level0(ctx: &Ctx) -> Vec<Finding> {
    let mut out = Vec::new();
    driver::run(ctx, &mut out);
    gdr::run(ctx, &mut out);
    pcie::run(ctx, &mut out);
    host::run(ctx, &mut out);
    gpu::run(ctx, &mut out);
    placement::run(ctx, &mut out);
    rdma::run(ctx, &mut out);
    debug_assert!(
        out.iter().all(|f| info(f.id).is_some()),
        "finding with an id outside the catalog"
    );
    debug_assert!(
        out.iter()
            .all(|f| !matches!(f.status, Status::Warn | Status::Fail) || f.remediation.is_some()),
        "every warn/fail carries a fix"
    );
    let order = |id: &str| {
        CATALOG
            .iter()
            .position(|c| c.id == id)
            .unwrap_or(usize::MAX)
    };
    out.sort_by(|a, b| {
        order(a.id)
            .cmp(&order(b.id))
            .then_with(|| subject_cmp(&a.subject, &b.subject))
    });
    out
}

/// BDF subjects in bus order, everything else (GPU3, mlx5_10/1) in natural order.
fn subject_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<crate::pci::Bdf>(), b.parse::<crate::pci::Bdf>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => crate::pci::natural_cmp(a, b),
    }
}

/// Every finding's id is in the catalog and every warn/fail carries a fix (debug builds and
/// tests; a release build never panics on its own findings).
pub fn debug_assert_sound(findings: &[Finding]) {
    debug_assert!(
        findings.iter().all(|f| info(f.id).is_some()),
        "finding with an id outside the catalog"
    );
    debug_assert!(
        findings
            .iter()
            .all(|f| !matches!(f.status, Status::Warn | Status::Fail) || f.remediation.is_some()),
        "every warn/fail carries a fix"
    );
}

/// Per-check severity overrides (`--warn ID`, `--deny ID`, `--skip ID`).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub warn: Vec<String>,
    pub deny: Vec<String>,
    pub skip: Vec<String>,
}

impl Overrides {
    /// Ids given to more than one of --warn, --deny, --skip ("--deny X --skip X"): which one
    /// wins would be a guess, so the config refuses them.
    pub fn contradictions(&self) -> Vec<String> {
        let lists = [
            ("--warn", &self.warn),
            ("--deny", &self.deny),
            ("--skip", &self.skip),
        ];
        let mut out = Vec::new();
        for (i, (a, la)) in lists.iter().enumerate() {
            for (b, lb) in &lists[i + 1..] {
                for id in la.iter().filter(|id| lb.contains(id)) {
                    let c = format!("{a} {id} and {b} {id}");
                    if !out.contains(&c) {
                        out.push(c);
                    }
                }
            }
        }
        out
    }

    /// Ids that are not in the catalog.
    pub fn unknown_ids(&self) -> Vec<String> {
        self.warn
            .iter()
            .chain(&self.deny)
            .chain(&self.skip)
            .filter(|id| info(id).is_none())
            .cloned()
            .collect()
    }

    pub fn apply(&self, findings: &mut [Finding]) {
        for f in findings {
            let before = f.status;
            if self.skip.iter().any(|i| i == f.id) {
                f.status = Status::Skip;
                f.message = format!("skipped by --skip {}: {}", f.id, f.message);
            } else if self.warn.iter().any(|i| i == f.id) && f.status == Status::Fail {
                f.status = Status::Warn;
            } else if self.deny.iter().any(|i| i == f.id) && f.status == Status::Warn {
                f.status = Status::Fail;
            }
            if f.status != before {
                f.original_status = Some(before);
            }
        }
    }
}

/// Overall status: the worst of pass/warn/fail (skips do not count); `skip` when nothing at
/// all could be judged, because unknown is never pass.
pub fn overall(findings: &[Finding]) -> Status {
    findings
        .iter()
        .map(|f| f.status)
        .filter(|s| *s != Status::Skip)
        .max()
        .unwrap_or(Status::Skip)
}
