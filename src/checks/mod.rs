//! Level-0 checks: pure functions over the inventory and topology, one module per area
//! (cargo-deny's habit). Each check id is permanent API with a document in `checks/<id>.md`.
//!
//! Checks must not do I/O: what a check needs is added to the inventory (and so to the bundle
//! capture list) first. Unknown is never pass: a fact that could not be read gives `skip` with
//! the reason.

pub mod baseline;
mod driver;
mod gdr;
mod gpu;
mod iommu;
mod numa;
mod pcie;
pub(crate) use pcie::aer_source;
pub mod probe;
mod rdma;
mod topo;

use crate::inventory::Inventory;
use crate::libs::LibFacts;
use crate::topo::Topology;
use serde::Serialize;

pub use crate::findings::{CheckId, Evidence, Finding, SkipKind, Status, ev, overall};

/// How a check gets its findings.
#[derive(Clone, Copy)]
pub enum Run {
    /// A pure function over the inventory, topology and libraries (level 0).
    Facts(fn(&Ctx, &mut Vec<Finding>)),
    /// Fed by a probe's report (levels 1 and up: `probe::level1` to `probe::level4`).
    Probe,
    /// A comparison with a node's expected shape (`check --expect`, `crate::checks::baseline`).
    Baseline,
    /// Judged from the silences given (`--skip ID:SUBJECT`, a baseline's `silences`):
    /// `crate::checks::baseline::silence`.
    Silence,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Run::Facts(_) => "Facts",
            Run::Probe => "Probe",
            Run::Baseline => "Baseline",
            Run::Silence => "Silence",
        })
    }
}

/// One check: everything about it in one place. `CATALOG` holds them in report order, the
/// same order as `CheckId`'s variants.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CheckInfo {
    pub id: CheckId,
    pub level: u8,
    /// The worst status the check gives by default.
    pub severity: Status,
    pub title: &'static str,
    /// `checks/<id>.md`, shown by `gpudoctor explain`.
    #[serde(skip)]
    pub doc: &'static str,
    #[serde(skip)]
    pub run: Run,
}

/// Defines `CATALOG`, each entry with its document embedded, in `CheckId`'s variant order (the
/// ids themselves live in the leaf module `crate::findings`; a compile-time assertion below
/// keeps the two lists in step).
macro_rules! catalog {
    ($( $variant:ident = $id:literal, level $level:literal, $sev:ident, $run:expr, $title:literal; )*) => {
        pub const CATALOG: &[CheckInfo] = &[
            $( CheckInfo {
                id: CheckId::$variant,
                level: $level,
                severity: Status::$sev,
                title: $title,
                doc: include_str!(concat!("../../checks/", $id, ".md")),
                run: $run,
            } ),*
        ];
        // Each entry's document name is its id, and the entries follow CheckId's order.
        const _: () = {
            let ids: &[&str] = &[$( $id ),*];
            assert!(ids.len() == CheckId::ALL.len(), "CATALOG and CheckId differ in length");
            let mut k = 0;
            while k < ids.len() {
                assert!(CATALOG[k].id as usize == k, "CATALOG is not in CheckId order");
                assert!(
                    crate::findings::const_str_eq(ids[k], CATALOG[k].id.as_str()),
                    "a CATALOG document name differs from its CheckId"
                );
                k += 1;
            }
        };
    };
}

impl CheckId {
    /// Everything about this check.
    pub fn info(self) -> &'static CheckInfo {
        // CATALOG is written in variant order (the macro makes both from one list).
        &CATALOG[self as usize]
    }
}

catalog! {
    DriverNvidiaLoaded = "driver.nvidia-loaded", level 0, Fail, Run::Facts(driver::nvidia_loaded),
        "NVIDIA kernel driver loaded (open or proprietary module)";
    DriverNvml = "driver.nvml", level 0, Fail, Run::Facts(driver::nvml),
        "NVML loadable and answering";
    DriverVersionMatch = "driver.version-match", level 0, Fail, Run::Facts(driver::version_match),
        "NVML library and kernel module versions agree";
    DriverGpuCount = "driver.gpu-count", level 0, Fail, Run::Facts(driver::gpu_count),
        "GPU count agrees across sysfs, NVML, the driver and /dev";
    GdrPeermem = "gdr.peermem", level 0, Fail, Run::Facts(gdr::peermem),
        "nvidia-peermem registered with the RDMA core";
    GdrDmabuf = "gdr.dmabuf", level 0, Warn, Run::Facts(gdr::dmabuf),
        "dma-buf GPUDirect RDMA possible (open module, kernel >= 5.12, ibv_reg_dmabuf_mr)";
    GdrPath = "gdr.path", level 0, Fail, Run::Facts(gdr::path),
        "GPUDirect RDMA memory path for each GPU and its NIC";
    GdrNcclAgrees = "gdr.nccl-agrees", level 0, Warn, Run::Facts(gdr::nccl_agrees),
        "NCCL's own GPUDirect verdict in a topology dump agrees with gdr.path's";
    GdrPeerMapping = "gdr.peer-mapping", level 0, Warn, Run::Facts(gdr::peer_mapping),
        "NVIDIA driver allows mapping the NIC doorbell for the GPU (PeerMappingOverride=1)";
    PcieAcsRedirect = "pcie.acs-redirect", level 0, Fail, Run::Facts(pcie::acs_redirect),
        "No ACS P2P redirect on bridges between GPUs and NICs";
    IommuMode = "iommu.mode", level 0, Fail, Run::Facts(iommu::iommu_mode),
        "IOMMU off or passthrough for GPUs and NICs";
    GpuBar1 = "gpu.bar1", level 0, Fail, Run::Facts(gpu::bar1),
        "BAR1 large enough to map GPU memory";
    PcieLinkWidth = "pcie.link-width", level 0, Fail, Run::Facts(pcie::link_width),
        "PCIe link trained at full width";
    PcieLinkSpeed = "pcie.link-speed", level 0, Fail, Run::Facts(pcie::link_speed),
        "PCIe link trained at full speed";
    PcieSlotMismatch = "pcie.slot-mismatch", level 0, Fail, Run::Facts(pcie::slot_mismatch),
        "Device not capped by a slower slot or port above it";
    NumaGpuNic = "numa.gpu-nic", level 0, Fail, Run::Facts(numa::numa_gpu_nic),
        "GPU and its closest NIC on the same NUMA node";
    TopoGpuNicPairing = "topo.gpu-nic-pairing", level 0, Fail, Run::Facts(topo::gpu_nic_pairing),
        "Each GPU has a NIC at PIX/PXB";
    RdmaDriver = "rdma.driver", level 0, Fail, Run::Facts(rdma::driver),
        "Each RDMA-capable NIC has its RDMA device (its RDMA kernel module loaded)";
    RdmaPortState = "rdma.port-state", level 0, Fail, Run::Facts(rdma::port_state),
        "RDMA port ACTIVE and LinkUp";
    RdmaRoceGid = "rdma.roce-gid", level 0, Fail, Run::Facts(rdma::roce_gid),
        "RoCE port has a RoCE v2 GID";
    RdmaMtu = "rdma.mtu", level 0, Warn, Run::Facts(rdma::mtu),
        "Netdev MTU allows a 4096-byte RoCE MTU";
    RdmaFwConsistency = "rdma.fw-consistency", level 0, Warn, Run::Facts(rdma::fw_consistency),
        "Same firmware on NICs of the same model";
    RdmaMlx5dv = "rdma.mlx5dv", level 0, Warn, Run::Facts(rdma::mlx5dv),
        "ConnectX (mlx5_core) devices have libmlx5 direct verbs";
    PcieDevctl = "pcie.devctl", level 0, Warn, Run::Facts(pcie::devctl),
        "MaxReadReq and relaxed ordering on GPUs and NICs";
    PcieAer = "pcie.aer", level 0, Warn, Run::Facts(pcie::aer),
        "No PCIe AER errors counted";
    GpuPersistence = "gpu.persistence", level 0, Warn, Run::Facts(gpu::persistence),
        "Persistence mode on";
    GpuEcc = "gpu.ecc", level 0, Fail, Run::Facts(gpu::ecc),
        "ECC enabled and no volatile uncorrectable errors";
    GpuRowRemap = "gpu.row-remap", level 0, Fail, Run::Facts(gpu::row_remap),
        "No pending row remaps or page retirements";
    GpuP2p = "gpu.p2p", level 0, Fail, Run::Facts(gpu::p2p),
        "NVML reports P2P read/write OK between GPU pairs";
    GpuNvlinkDown = "gpu.nvlink-down", level 0, Fail, Run::Facts(gpu::nvlink_down),
        "No NVLink down";
    RdmaPortErrors = "rdma.port-errors", level 0, Fail, Run::Facts(rdma::port_errors),
        "No fatal or fast-growing RDMA port error counters";
    RdmaLinkFlaps = "rdma.link-flaps", level 0, Fail, Run::Facts(rdma::link_flaps),
        "No RDMA link-down events (link_downed, kernel log)";
    GpuXid = "gpu.xid", level 0, Fail, Run::Facts(gpu::xid),
        "No NVRM Xid events that need a reset or point at hardware";
    GpuThrottle = "gpu.throttle", level 0, Warn, Run::Facts(gpu::throttle),
        "No hardware, thermal or power-brake clock slowdown";
    GpuNvlinkErrors = "gpu.nvlink-errors", level 0, Warn, Run::Facts(gpu::nvlink_errors),
        "No NVLink replay/recovery errors or high CRC rate";
    GpuFabric = "gpu.fabric", level 0, Fail, Run::Facts(gpu::fabric),
        "GPU registered with the NVSwitch fabric (fabric manager)";
    ProbeH2d = "probe.h2d", level 1, Fail, Run::Probe,
        "Host-to-GPU copies reach 80% of the PCIe link rate";
    ProbeD2h = "probe.d2h", level 1, Fail, Run::Probe,
        "GPU-to-host copies reach 80% of the PCIe link rate";
    ProbeP2p = "probe.p2p", level 1, Fail, Run::Probe,
        "GPU-to-GPU copies reach the NVLink/PCIe rate; peer access works";
    ProbeDmabufExport = "probe.dmabuf-export", level 1, Fail, Run::Probe,
        "GPU memory exports as a dma-buf (GPU half of dma-buf GPUDirect RDMA)";
    ProbeNccl = "probe.nccl", level 1, Fail, Run::Probe,
        "NCCL all-reduce/all-gather reach the NVLink/PCIe rate, over the transports the topology allows";
    ProbeWriteBw = "probe.write-bw", level 2, Fail, Run::Probe,
        "RDMA-write loopback on every active port moves and validates data at line rate";
    ProbeGdrWriteBw = "probe.gdr-write-bw", level 3, Fail, Run::Probe,
        "GPUDirect RDMA writes from and into each GPU's memory through its closest active port";
    ProbeGpuWriteBw = "probe.gpu-write-bw", level 4, Fail, Run::Probe,
        "A CUDA kernel posts RDMA writes itself on its closest mlx5 port (GPU-initiated)";
    BaselineGpus = "baseline.gpus", level 0, Fail, Run::Baseline,
        "GPUs at the baseline's PCI positions, of the baseline's model (--expect)";
    BaselineNics = "baseline.nics", level 0, Fail, Run::Baseline,
        "NICs at the baseline's PCI positions, model and port link layer/rate (--expect)";
    BaselinePaths = "baseline.paths", level 0, Fail, Run::Baseline,
        "GPU-GPU and GPU-NIC path types as in the baseline (--expect)";
    BaselinePcie = "baseline.pcie", level 0, Fail, Run::Baseline,
        "PCIe link capability and width, and where PCIe errors are recorded, as in the baseline (--expect)";
    BaselineNvlink = "baseline.nvlink", level 0, Fail, Run::Baseline,
        "Active NVLinks per GPU as in the baseline (--expect)";
    BaselineBar1 = "baseline.bar1", level 0, Fail, Run::Baseline,
        "BAR1 size as in the baseline (--expect)";
    BaselineVersions = "baseline.versions", level 0, Fail, Run::Baseline,
        "Driver, kernel and NIC firmware versions as in the baseline (--expect)";
    BaselineBandwidth = "baseline.bandwidth", level 1, Fail, Run::Baseline,
        "Probe bandwidth at or above the baseline's floors (--expect, --level 1)";
    SilenceStale = "silence.stale", level 0, Warn, Run::Silence,
        "Every silence (--skip ID:SUBJECT, the baseline's silences) is in date and matched a finding";
}

/// The check list for `gpudoctor check --help` and the man page.
pub fn catalog_help() -> String {
    let mut s = String::from("Checks (`gpudoctor explain ID` for details):\n");
    for c in CATALOG {
        s.push_str(&format!(
            "  {:<22} level {}, {}: {}\n",
            c.id.as_str(),
            c.level,
            c.severity.as_str(),
            c.title
        ));
    }
    s.push_str("\nExit status: 0 nothing failed, 1 a check failed (or warned, with --strict), 2 gpudoctor could not run.");
    s
}

/// The check id nearest to a misspelt or partial `id`: the one that contains it (`acs` ->
/// `pcie.acs-redirect`, when only one does), else the closest by edit distance (at most a
/// third of the id's length).
pub fn suggest(id: &str) -> Option<&'static str> {
    let want = id.trim().to_ascii_lowercase();
    if want.is_empty() {
        return None;
    }
    let ids: Vec<&'static str> = CATALOG.iter().map(|c| c.id.as_str()).collect();
    let containing: Vec<&&str> = ids.iter().filter(|c| c.contains(want.as_str())).collect();
    if containing.len() == 1 {
        return Some(containing[0]);
    }
    let (best, d) = ids
        .iter()
        .map(|c| (*c, edit_distance(&want, c)))
        .min_by_key(|(_, d)| *d)?;
    (d <= (want.len() / 3).max(1)).then_some(best)
}

/// Levenshtein distance over bytes (ids are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The check named `id`, if there is one.
pub fn info(id: &str) -> Option<&'static CheckInfo> {
    id.parse::<CheckId>().ok().map(CheckId::info)
}

/// A cumulative counter as a rate: its average per second since boot (`/proc/uptime`), a lower
/// bound of the rate since the counter was last cleared.
fn per_second(v: u64, uptime: f64) -> f64 {
    v as f64 / uptime.max(1.0)
}

/// Everything checks may look at.
pub struct Ctx<'a> {
    pub inv: &'a Inventory,
    pub topo: &'a Topology,
    pub libs: &'a LibFacts,
}

/// Run every level-0 check, in catalog order; each check's findings sorted by subject.
pub fn run_level0(ctx: &Ctx) -> Vec<Finding> {
    // Each check is a pure function of the context: they run side by side, and their findings
    // are joined in catalog order, as one after the other would give them.
    let facts: Vec<_> = CATALOG
        .iter()
        .filter_map(|c| match c.run {
            Run::Facts(check) => Some((c.id, check)),
            _ => None,
        })
        .collect();
    // Where every PCI function was identified (the rule), no finding joins a check's after it
    // ran: each check's findings are sorted and folded on its own worker, and joined in
    // catalog order (CheckId order) they are what sorting and folding them all gives.
    let unidentified = pcie::unidentified(ctx);
    let identified = unidentified.is_empty();
    let found = crate::workers::map_min(&facts, 1, |(id, check)| {
        let mut out = Vec::new();
        check(ctx, &mut out);
        debug_assert!(
            out.iter().all(|f| f.id == *id),
            "{id} reported a finding under another id"
        );
        // In order here, side by side: the sort of all of them below then merges runs.
        sort_findings(&mut out);
        if identified {
            fold_excess(&mut out);
        }
        out
    });
    let mut out: Vec<Finding> = found.into_iter().flatten().collect();
    if identified {
        debug_assert!(
            out.is_sorted_by_key(|f| f.id),
            "checks joined out of CheckId order"
        );
    } else {
        // A function that may be a GPU or NIC but could not be identified: unknown, never
        // absent.
        let skips = pcie::unidentified_skips(&unidentified, &out);
        out.extend(skips);
        sort_findings(&mut out);
        fold_excess(&mut out);
    }
    debug_assert_sound(&out);
    out
}

/// By id, then BDF subjects in bus order and everything else (GPU3, mlx5_10/1) in natural
/// order. Each subject is parsed once (not once per comparison: thousands of findings on a
/// large host).
fn sort_findings(out: &mut Vec<Finding>) {
    let mut keyed: Vec<(Option<crate::pci::Bdf>, Finding)> = std::mem::take(out)
        .into_iter()
        .map(|f| (crate::pci::Bdf::parse(&f.subject), f))
        .collect();
    keyed.sort_by(|(ka, a), (kb, b)| {
        a.id.cmp(&b.id).then_with(|| match (ka, kb) {
            (Some(x), Some(y)) => x.cmp(y),
            _ => crate::pci::natural_cmp(&a.subject, &b.subject),
        })
    });
    out.extend(keyed.into_iter().map(|(_, f)| f));
}

/// Findings kept per check and kind of subject; past it the rest are folded into one.
pub const MAX_FINDINGS_PER_KIND: usize = 256;

/// The kind of a subject, from a small fixed set (a hostile tree names its devices freely;
/// the kinds must stay few so that the findings stay few).
fn subject_kind(subject: &str) -> &'static str {
    if is_folded(subject) {
        // What an earlier fold left ("1144 more devices"): never folded among the devices
        // it stands for (a second fold would bury one fold's count inside another's).
        "folded findings"
    } else if crate::pci::Bdf::parse(subject).is_some() {
        "PCI functions"
    } else if subject == "host" {
        "host"
    } else if subject.contains('-') {
        "pairs"
    } else if subject.contains('/') {
        "ports"
    } else if subject.starts_with("GPU") {
        "GPUs"
    } else if subject.starts_with("NIC") {
        "NICs"
    } else {
        "devices"
    }
}

/// Whether `subject` is a folded finding's ("N more KIND", see `fold_excess`).
fn is_folded(subject: &str) -> bool {
    subject
        .split_once(" more ")
        .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Bound the findings by the checks, not by the input: past `MAX_FINDINGS_PER_KIND` findings
/// of one check on one kind of subject (20,000 dangling PCI links gave 20,000 skips per check),
/// the rest become one finding that says how many were folded and how they stood. The worst
/// are kept (fail before warn before skip before pass), and the folded finding has the worst
/// status of those it folds, so folding never hides a failure or turns an unknown into a pass.
/// Order is kept.
pub fn fold_excess(findings: &mut Vec<Finding>) {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<(CheckId, &'static str), Vec<usize>> = BTreeMap::new();
    // A silenced finding is never folded: it stays listed as silenced, by its subject.
    for (i, f) in findings
        .iter()
        .enumerate()
        .filter(|(_, f)| f.silenced.is_none())
    {
        groups
            .entry((f.id, subject_kind(&f.subject)))
            .or_default()
            .push(i);
    }
    let mut folded_at: Vec<Option<usize>> = vec![None; findings.len()];
    let mut aggregates: Vec<(usize, Finding)> = Vec::new();
    for ((id, kind), mut idx) in groups {
        if idx.len() <= MAX_FINDINGS_PER_KIND {
            continue;
        }
        // Worst first, then in report order; keep the first MAX.
        idx.sort_by_key(|&i| (std::cmp::Reverse(findings[i].status), i));
        let gone = idx.split_off(MAX_FINDINGS_PER_KIND);
        let worst = gone
            .iter()
            .map(|&i| &findings[i])
            .max_by_key(|f| f.status)
            .expect("more than the cap were found");
        let count = |s: Status| gone.iter().filter(|&&i| findings[i].status == s).count();
        let tally: Vec<String> = [Status::Fail, Status::Warn, Status::Skip, Status::Pass]
            .into_iter()
            .map(|s| (s, count(s)))
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| format!("{n} {}", s.as_str()))
            .collect();
        let mut subjects: Vec<&str> = gone
            .iter()
            .take(8)
            .map(|&i| findings[i].subject.as_str())
            .collect();
        if gone.len() > subjects.len() {
            subjects.push("...");
        }
        let mut agg = Finding::new(
            id,
            format!("{} more {kind}", gone.len()),
            worst.status,
            format!(
                "{} more findings on {kind} folded into this one ({}; at most {MAX_FINDINGS_PER_KIND} per check and kind of subject are listed); the worst: {}: {}",
                gone.len(),
                tally.join(", "),
                worst.subject,
                worst.message
            ),
        )
        .with(ev("folded subjects", subjects.join(", ")));
        agg.remediation = worst.remediation.clone();
        if agg.status == Status::Skip {
            // Unknown if any folded skip was unknown: folding never makes a gap look judged.
            agg.skip = gone
                .iter()
                .filter_map(|&i| findings[i].skip)
                .max_by_key(|k| (k.unjudged(), *k == SkipKind::Unknown));
        }
        let first = *gone.iter().min().expect("non-empty");
        for &i in &gone {
            folded_at[i] = Some(first);
        }
        aggregates.push((first, agg));
    }
    if aggregates.is_empty() {
        return;
    }
    let mut agg_at: BTreeMap<usize, Finding> = aggregates.into_iter().collect();
    let old = std::mem::take(findings);
    for (i, f) in old.into_iter().enumerate() {
        match folded_at[i] {
            None => findings.push(f),
            Some(first) => {
                if let Some(a) = agg_at.remove(&first) {
                    findings.push(a);
                }
            }
        }
    }
}

/// Every warn/fail carries a fix (debug builds and tests; a release build never panics on its
/// own findings). Ids are in the catalog by construction.
pub fn debug_assert_sound(findings: &[Finding]) {
    debug_assert!(
        findings
            .iter()
            .all(|f| !matches!(f.status, Status::Warn | Status::Fail) || f.remediation.is_some()),
        "every warn/fail carries a fix"
    );
}

/// Per-check severity overrides (`--warn ID`, `--deny ID`, `--skip ID`) and silences of one
/// subject (`--skip ID:SUBJECT`, a baseline's `silences`), resolved to check ids once
/// (`Overrides::parse`), so a misspelled id is a usage error, never a silent no-op.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub warn: Vec<CheckId>,
    pub deny: Vec<CheckId>,
    pub skip: Vec<CheckId>,
    /// `--skip ID:SUBJECT` first, then the baseline's silences (`Overrides::with_silences`).
    pub silences: Vec<baseline::silence::Silence>,
    /// Today (UTC, YYYY-MM-DD), against which a silence's expiry is read; None: unknown, and a
    /// silence with an expiry then silences nothing (unknown is never a pass).
    pub today: Option<String>,
}

impl Overrides {
    /// Parse the ids given to --warn, --deny and --skip (`--skip` also takes `ID:SUBJECT`).
    /// Errors: unknown ids (all of them named), an id given to more than one of the three
    /// ("--deny X --skip X": which one wins would be a guess), an empty subject, or a subject
    /// of a check that `--skip ID` already skips whole.
    pub fn parse(warn: &[String], deny: &[String], skip: &[String]) -> Result<Overrides, String> {
        // `--skip ID:SUBJECT`: ids have no colon, subjects may (a BDF), so the first one splits.
        let (whole, subject): (Vec<&String>, Vec<(&str, &str)>) = {
            let mut whole = Vec::new();
            let mut subject = Vec::new();
            for s in skip {
                match s.split_once(':') {
                    Some((id, subj)) => subject.push((id, subj)),
                    None => whole.push(s),
                }
            }
            (whole, subject)
        };
        // Each unknown id with the nearest known one, where there is one.
        let unknown: Vec<String> = warn
            .iter()
            .map(String::as_str)
            .chain(deny.iter().map(String::as_str))
            .chain(whole.iter().map(|s| s.as_str()))
            .chain(subject.iter().map(|(id, _)| *id))
            .filter(|id| id.parse::<CheckId>().is_err())
            .map(|id| match suggest(id) {
                Some(near) => format!("{id} (did you mean {near}?)"),
                None => id.to_string(),
            })
            .collect();
        if !unknown.is_empty() {
            return Err(format!(
                "unknown check {} {}: `gpudoctor list` shows them all",
                if unknown.len() == 1 { "id" } else { "ids" },
                unknown.join(", ")
            ));
        }
        let ids =
            |v: &[&String]| -> Vec<CheckId> { v.iter().filter_map(|i| i.parse().ok()).collect() };
        let o = Overrides {
            warn: ids(&warn.iter().collect::<Vec<_>>()),
            deny: ids(&deny.iter().collect::<Vec<_>>()),
            skip: ids(&whole),
            silences: Vec::new(),
            today: None,
        };
        let lists = [
            ("--warn", &o.warn),
            ("--deny", &o.deny),
            ("--skip", &o.skip),
        ];
        for (i, (a, la)) in lists.iter().enumerate() {
            for (b, lb) in &lists[i + 1..] {
                if let Some(id) = la.iter().find(|id| lb.contains(id)) {
                    return Err(format!(
                        "{a} {id} and {b} {id}: give each check id at most one of --warn, --deny, --skip"
                    ));
                }
            }
        }
        let mut silences = Vec::new();
        for (id, subj) in subject {
            let id: CheckId = id.parse()?;
            if subj.is_empty() {
                return Err(format!(
                    "--skip {id}: names no subject: give --skip {id} (the whole check) or --skip {id}:SUBJECT (a subject as the report prints it, e.g. 0000:17:00.0, mlx5_3/1, host)"
                ));
            }
            if o.skip.contains(&id) {
                return Err(format!(
                    "--skip {id} and --skip {id}:{subj}: --skip {id} already leaves every subject of {id} unjudged"
                ));
            }
            silences.push(baseline::silence::Silence::command_line(id, subj));
        }
        Ok(Overrides { silences, ..o })
    }

    /// Add a baseline's silences, judged against `today` (UTC, YYYY-MM-DD).
    pub fn with_silences(
        mut self,
        more: Vec<baseline::silence::Silence>,
        today: Option<String>,
    ) -> Overrides {
        self.silences.extend(more);
        self.today = today;
        self
    }

    /// Change statuses as --warn/--deny/--skip ask, then mark the findings a silence matches
    /// (their status kept) and add a `silence.stale` warning per silence that expired or
    /// matched nothing.
    pub fn apply(&self, findings: &mut Vec<Finding>) {
        for f in findings.iter_mut() {
            let before = f.status;
            if self.skip.contains(&f.id) {
                f.status = Status::Skip;
                f.skip = Some(SkipKind::ByRequest);
                f.message = format!("skipped by --skip {}: {}", f.id, f.message);
            } else if self.warn.contains(&f.id) && f.status == Status::Fail {
                f.status = Status::Warn;
            } else if self.deny.contains(&f.id) && f.status == Status::Warn {
                f.status = Status::Fail;
            }
            if f.status != before {
                f.original_status = Some(before);
            }
        }
        baseline::silence::apply(&self.silences, self.today.as_deref(), findings);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_override_ids_get_the_nearest_id() {
        let e =
            Overrides::parse(&["pcie.acs-redirct".into()], &[], &["zzzzzzzz".into()]).unwrap_err();
        assert_eq!(
            e,
            "unknown check ids pcie.acs-redirct (did you mean pcie.acs-redirect?), zzzzzzzz: `gpudoctor list` shows them all"
        );
    }

    #[test]
    fn suggestions_for_misspelt_and_partial_ids() {
        assert_eq!(suggest("acs"), Some("pcie.acs-redirect"));
        assert_eq!(suggest("pcie.link-widht"), Some("pcie.link-width"));
        assert_eq!(suggest("gpu.ec"), Some("gpu.ecc"));
        // Several contain it and none is near: no guess.
        assert_eq!(suggest("pcie"), None);
        assert_eq!(suggest("zzzzzzzz"), None);
        assert_eq!(suggest(""), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    /// 600 RDMA devices (subjects of the "devices" kind) and 300 PCI functions under two
    /// checks, each check's findings in order, a few failing.
    fn many() -> Vec<Finding> {
        let mut out = Vec::new();
        for id in [CheckId::RdmaMlx5dv, CheckId::RdmaDriver] {
            let mut mine = Vec::new();
            for i in 0..600 {
                let st = if i % 97 == 5 {
                    Status::Fail
                } else {
                    Status::Pass
                };
                let mut f = Finding::new(id, format!("mlx5_{i}"), st, format!("device {i}"));
                if st == Status::Fail {
                    f = f.fix("replace it");
                }
                mine.push(f);
            }
            for i in 0..300u32 {
                let b = format!("0000:{:02x}:{:02x}.{}", i / 64, (i % 64) / 8, i % 8);
                mine.push(Finding::new(id, b, Status::Pass, "function"));
            }
            sort_findings(&mut mine);
            out.extend(mine);
        }
        out
    }

    #[test]
    fn folding_again_changes_nothing() {
        let mut once = many();
        fold_excess(&mut once);
        let mut twice = once.clone();
        fold_excess(&mut twice);
        let subjects = |v: &[Finding]| -> Vec<String> {
            v.iter()
                .map(|f| format!("{} {}", f.id, f.subject))
                .collect()
        };
        assert_eq!(subjects(&once), subjects(&twice));
        // One fold per check and kind, never a fold of a fold.
        let folded: Vec<&str> = once
            .iter()
            .filter(|f| is_folded(&f.subject))
            .map(|f| f.subject.as_str())
            .collect();
        assert_eq!(
            folded,
            [
                "44 more PCI functions",
                "344 more devices",
                "44 more PCI functions",
                "344 more devices"
            ]
        );
        // Every failure is kept or folded into a failing finding.
        assert!(once.iter().filter(|f| f.status == Status::Fail).count() >= 2 * 6);
    }

    #[test]
    fn folding_each_check_alone_is_folding_them_all() {
        let mut all = many();
        fold_excess(&mut all);
        let mut each: Vec<Finding> = Vec::new();
        for id in [CheckId::RdmaMlx5dv, CheckId::RdmaDriver] {
            let mut mine: Vec<Finding> = many().into_iter().filter(|f| f.id == id).collect();
            fold_excess(&mut mine);
            each.extend(mine);
        }
        let show = |v: &[Finding]| -> Vec<String> {
            v.iter()
                .map(|f| format!("{} {} {:?} {}", f.id, f.subject, f.status, f.message))
                .collect()
        };
        assert_eq!(show(&all), show(&each));
        assert!("mlx5_3 more x".split_once(" more ").is_some() && !is_folded("mlx5_3 more x"));
        assert!(is_folded("12 more ports") && !is_folded(" more ports"));
    }
}
