//! Report models: one serde model per command, with a versioned schema string, all in this
//! one home. Here: `check`, `topo` and `list` (and the envelope of `probe ... --json`); in
//! submodules: the RDMA probe ladder's reports (`rdma`), `probe nccl`'s (`nccl`), and `fleet`'s
//! and `diff`'s (`fleet`). Renderers and exporters take these by reference.
//!
//! Arrows point one way: the code that fills a report in (checks, probes, `crate::rdma`,
//! `crate::nccl`, `crate::fleet`, `crate::run`) imports it, never the reverse; what a model
//! needs of their vocabulary lives here or in a leaf (`crate::findings`). Nothing here does
//! I/O or judges.

pub mod fleet;
pub mod nccl;
pub mod rdma;

use crate::findings::{CheckId, Status};
use crate::inventory::{Inventory, Note};
use crate::topo::Topology;
use serde::Serialize;

pub const TOPO_SCHEMA: &str = "gpudoctor.topo/1";
pub const CHECK_SCHEMA: &str = "gpudoctor.check/1";
pub const CATALOG_SCHEMA: &str = "gpudoctor.catalog/1";
/// The one JSON document every `probe ... --json` prints, whatever its flags: `runs` holds one
/// report per run (one GPU, one device), each with its own schema (`gpudoctor.probe/2`,
/// `gpudoctor.write-bw/3`, `gpudoctor.gpu-write-bw/1`).
pub use crate::probes::PROBE_RUNS_SCHEMA;

/// `probe ... --json`: the runs of one command, so the document's shape never depends on
/// `--gpu` (before schema `gpudoctor.probe-runs/1`, `--gpu auto` printed an array and `--gpu N`
/// an object).
#[derive(Debug, Clone, Serialize)]
pub struct ProbeRuns<'a, T: Serialize> {
    pub schema: &'static str,
    pub runs: Vec<&'a T>,
}

impl<'a, T: Serialize> ProbeRuns<'a, T> {
    pub fn new(runs: impl IntoIterator<Item = &'a T>) -> Self {
        ProbeRuns {
            schema: PROBE_RUNS_SCHEMA,
            runs: runs.into_iter().collect(),
        }
    }
}

/// The reports in a probe document as read back (a recorded `probes/<name>.json`, a fleet
/// input): the runs of a `gpudoctor.probe-runs/1` envelope, or the document itself when it is
/// a bare report (what gpudoctor printed before the envelope; recorded trees keep those).
/// None when the envelope's `runs` is not an array.
pub use crate::probes::probe_runs_in;

/// `gpudoctor list --json`: every check, in report order.
#[derive(Debug, Clone, Serialize)]
pub struct CatalogReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    /// The source revision the binary was built from (`--version`'s; see build.rs).
    pub gpudoctor_revision: &'static str,
    pub checks: Vec<CatalogEntry>,
}

/// One check of the catalog as `list --json` gives it (`crate::checks::CheckInfo`'s public
/// part: its document and function are not in the report).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CatalogEntry {
    pub id: CheckId,
    pub level: u8,
    /// The worst status the check gives by default.
    pub severity: Status,
    pub title: &'static str,
}

impl CatalogReport {
    /// The catalog report of `checks`, in the order given (`crate::checks::CATALOG`'s).
    pub fn new(checks: impl IntoIterator<Item = CatalogEntry>) -> Self {
        CatalogReport {
            schema: CATALOG_SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            gpudoctor_revision: crate::REVISION,
            checks: checks.into_iter().collect(),
        }
    }
}

pub use crate::source::SourceInfo;

#[derive(Debug, Clone, Serialize)]
pub struct NvmlSummary {
    pub source: String,
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    pub cuda_driver_version: Option<i32>,
    pub unavailable: Option<String>,
    pub gpus: usize,
}

impl NvmlSummary {
    pub fn of(n: &crate::nvml::NvmlSnapshot) -> Self {
        NvmlSummary {
            source: n.source.clone(),
            driver_version: n.driver_version.cloned(),
            nvml_version: n.nvml_version.cloned(),
            cuda_driver_version: n.cuda_driver_version.cloned(),
            unavailable: n.unavailable.clone(),
            gpus: n.gpus.len(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TopoReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    /// The source revision the binary was built from (`--version`'s; see build.rs).
    pub gpudoctor_revision: &'static str,
    pub source: SourceInfo,
    pub nvml: NvmlSummary,
    /// Paths that could not be read at all, and why (per-attribute reasons live on devices).
    pub unread: Vec<Note>,
    pub topology: Topology,
}

impl TopoReport {
    pub fn new(source: SourceInfo, inv: &Inventory, topology: Topology) -> Self {
        TopoReport {
            schema: TOPO_SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            gpudoctor_revision: crate::REVISION,
            source,
            nvml: NvmlSummary::of(&inv.nvml),
            unread: inv.notes.clone(),
            topology,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
    /// Skips of something that should have been judged (not root, or a fact unknown): what
    /// `--fail-on-skip` fails on.
    pub unjudged: usize,
    /// Of those, the ones that need root.
    pub not_root: usize,
    /// Findings a silence matched (`--skip ID:SUBJECT`, a baseline's silences), whatever
    /// their status; they are not in the counts above. Absent when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub silenced: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    /// The source revision the binary was built from (`--version`'s; see build.rs).
    pub gpudoctor_revision: &'static str,
    pub source: SourceInfo,
    /// The node's name (a redaction token in a redacted bundle); null where not recorded.
    pub hostname: Option<String>,
    /// When the facts were read, UTC RFC 3339: now for a live run, the recording's time for a
    /// bundle or recorded tree (null where the tree does not say).
    pub time: Option<String>,
    /// The NVIDIA driver version: the kernel module's (/proc/driver/nvidia/version), else
    /// NVML's; null without a driver.
    pub driver_version: Option<String>,
    pub level: u8,
    /// The node's verdict: what the exit code, the text's `Result:` line, JUnit and
    /// Prometheus say. The worst of pass/warn/fail over all checks (skips do not count; `skip`
    /// when nothing could be judged), then the gate (`--strict`, `--fail-on-skip`) applied.
    pub status: crate::findings::Status,
    /// `--report-only`: the exit code the verdict would have given (the process exited 0);
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_exit: Option<i32>,
    /// How the gate decided `status`.
    pub gate: Gate,
    pub summary: Summary,
    pub checks: Vec<crate::findings::Finding>,
    /// What the level-1 probes measured (or replayed), one entry per measurement with a
    /// median: fleet and diff compare nodes on these without running the probes again.
    /// Absent below level 1.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bandwidth: Vec<Bandwidth>,
    /// The node's GPUs by model (NVML's name, else the PCI database's) and how many of each:
    /// what fleet groups nodes by. Absent where no GPU was found.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub gpu_models: std::collections::BTreeMap<String, usize>,
    pub nvml: NvmlSummary,
    /// Paths that could not be read at all, and why.
    pub unread: Vec<Note>,
    /// The GPUs' identities, for exporters that label GPU subjects as DCGM exporter does (the
    /// JSON has them in `topo --json`).
    #[serde(skip)]
    pub gpus: Vec<GpuIdentity>,
    /// The machine the findings are about, for the HTML page's drawing (the JSON has it in
    /// `topo --json`); None where discovery did not finish.
    #[serde(skip)]
    pub topology: Option<std::sync::Arc<TopoReport>>,
    /// `--time-budget`: the budget and, when it ran out, the step that was running (absent
    /// without a budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_budget: Option<TimeBudget>,
    /// Work the time budget cut was left running on a thread (a CUDA copy): the process
    /// must leave without joining it once the report is printed.
    #[serde(skip)]
    pub abandoned_work: bool,
}

/// One bandwidth a level-1 check measured or replayed, as fleet compares it across nodes.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Bandwidth {
    /// What was measured, as fleet names it: `h2d host->GPU0 copy-engine`,
    /// `p2p GPU0->GPU1 copy-engine`, `nccl intra-node (all-reduce) all-reduce`.
    pub id: String,
    /// Median of the samples (decimal GB/s; bus bandwidth for NCCL, as nccl-tests prints it).
    pub median_gbps: f64,
    /// How many samples the median is of.
    pub n: usize,
    /// gpudoctor's bar for it, where the probe had one.
    #[serde(default)]
    pub threshold_gbps: Option<f64>,
    /// The PCIe link a copy's bar is a fraction of (`PCIe Gen5 x16`): fleet groups nodes by it.
    #[serde(default)]
    pub link: Option<String>,
}

impl Bandwidth {
    /// Every measurement of a copy probe's report that has a median.
    pub fn of_probe(r: &crate::probes::ProbeReport) -> Vec<Bandwidth> {
        r.measurements
            .iter()
            .filter_map(|m| {
                let s = m.evaluation.stats.as_ref()?;
                // "PCIe Gen5 x16 = 63.0 GB/s per direction ...": the link, not its rate.
                let link = m
                    .expected
                    .value()
                    .filter(|e| e.link == crate::probes::LinkKind::Pcie)
                    .map(|e| e.basis.split(" = ").next().unwrap_or(&e.basis).to_string());
                Some(Bandwidth {
                    id: format!(
                        "{} {}->{} {}",
                        m.probe.as_str(),
                        m.src,
                        m.dst,
                        m.method.as_str()
                    ),
                    median_gbps: s.median_gbps,
                    n: s.n,
                    threshold_gbps: m.evaluation.threshold_gbps.filter(|t| t.is_finite()),
                    link,
                })
            })
            .collect()
    }

    /// The bus bandwidth of each collective of an NCCL report at the size it was judged at.
    pub fn of_nccl(r: &nccl::NcclReport) -> Vec<Bandwidth> {
        let mut out = Vec::new();
        for run in &r.runs {
            for c in &run.collectives {
                let Some(j) = c.judged() else { continue };
                let Some(median) = crate::probes::median(&j.busbw_gbps) else {
                    continue;
                };
                out.push(Bandwidth {
                    id: format!("nccl {} {}", run.name, c.collective.as_str()),
                    median_gbps: median,
                    n: j.busbw_gbps.len(),
                    threshold_gbps: c.evaluation.threshold_gbps.filter(|t| t.is_finite()),
                    link: None,
                });
            }
        }
        out
    }
}

/// A run's time budget as the report gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeBudget {
    pub seconds: f64,
    /// The step running when the budget ran out; null when the run finished within it. What
    /// it cut is reported as unknown skips ("not judged: time budget of ... spent during ...").
    pub spent_during: Option<String>,
}

/// A GPU as other tools name it: gpudoctor's label and PCI address, NVML's index and UUID,
/// DCGM exporter's `pci_bus_id` (NVML's bus id form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuIdentity {
    pub label: String,
    pub bdf: String,
    pub pci_bus_id: String,
    pub index: Option<u32>,
    pub uuid: Option<String>,
    pub name: String,
}

impl GpuIdentity {
    pub fn of(g: &crate::topo::Gpu) -> GpuIdentity {
        GpuIdentity {
            label: g.label.clone(),
            bdf: g.bdf.to_string(),
            pci_bus_id: g.bdf.nvml(),
            index: g.nvml_index,
            uuid: g.uuid.clone(),
            name: g.name.clone(),
        }
    }
}

/// The one gate: how `--strict` and `--fail-on-skip` turn the findings' worst status into the
/// node's verdict. Computed once (`Gate::decide`); every output reads `CheckReport::status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gate {
    pub strict: bool,
    pub fail_on_skip: bool,
    /// The worst status over the findings, before the gate.
    pub findings_status: crate::findings::Status,
    /// Why the gate made the verdict worse than `findings_status`; empty when it did not.
    pub reasons: Vec<String>,
}

impl Gate {
    /// The verdict for findings whose worst status is `worst`, under these flags.
    pub fn decide(
        worst: crate::findings::Status,
        summary: &Summary,
        strict: bool,
        fail_on_skip: bool,
    ) -> (crate::findings::Status, Gate) {
        use crate::findings::Status;
        let mut reasons = Vec::new();
        if strict && worst == Status::Warn {
            reasons.push(format!(
                "{} warning{} (--strict)",
                summary.warn,
                if summary.warn == 1 { "" } else { "s" }
            ));
        }
        if fail_on_skip {
            if summary.unjudged > 0 {
                reasons.push(format!(
                    "{} could not be judged (--fail-on-skip)",
                    summary.unjudged
                ));
            } else if worst == Status::Skip {
                reasons.push("nothing could be judged (--fail-on-skip)".to_string());
            }
        }
        let status = if reasons.is_empty() || worst == Status::Fail {
            worst
        } else {
            Status::Fail
        };
        if status == worst {
            reasons.clear();
        }
        (
            status,
            Gate {
                strict,
                fail_on_skip,
                findings_status: worst,
                reasons,
            },
        )
    }

    /// True when the gate, not a failing check, made the verdict a failure.
    pub fn decided(&self) -> bool {
        !self.reasons.is_empty()
    }
}

impl CheckReport {
    /// Apply the gate flags: `status` becomes the verdict under them, `gate` says why.
    pub fn gated(mut self, strict: bool, fail_on_skip: bool) -> Self {
        let (status, gate) = Gate::decide(
            self.gate.findings_status,
            &self.summary,
            strict,
            fail_on_skip,
        );
        self.status = status;
        self.gate = gate;
        self
    }

    /// The GPU a finding's subject names: `GPU3`, `GPU3 (copy-engine)` or the GPU's PCI
    /// address; None for pairs (`GPU0-GPU1`) and everything else.
    pub fn gpu_of(&self, subject: &str) -> Option<&GpuIdentity> {
        let head = subject.split(' ').next().unwrap_or(subject);
        self.gpus.iter().find(|g| g.label == head || g.bdf == head)
    }

    /// Who the GPUs are (for exporters' labels).
    pub fn with_gpus(mut self, topo: &crate::topo::Topology) -> Self {
        self.gpus = topo.gpus.iter().map(GpuIdentity::of).collect();
        for g in &self.gpus {
            *self.gpu_models.entry(g.name.clone()).or_default() += 1;
        }
        self
    }

    /// The machine as discovered (for the HTML page).
    pub fn with_topology(mut self, topo: TopoReport) -> Self {
        self.topology = Some(std::sync::Arc::new(topo));
        self
    }

    /// Name the node and the time its facts were read.
    pub fn at(mut self, hostname: Option<String>, time: Option<String>) -> Self {
        self.hostname = hostname;
        self.time = time;
        self
    }

    pub fn new(
        source: SourceInfo,
        level: u8,
        inv: &Inventory,
        checks: Vec<crate::findings::Finding>,
    ) -> Self {
        use crate::findings::Status;
        let mut summary = Summary::default();
        for f in &checks {
            if f.silenced.is_some() {
                summary.silenced += 1;
                continue;
            }
            match f.status {
                Status::Pass => summary.pass += 1,
                Status::Warn => summary.warn += 1,
                Status::Fail => summary.fail += 1,
                Status::Skip => {
                    summary.skip += 1;
                    if f.skip.is_some_and(|k| k.unjudged()) {
                        summary.unjudged += 1;
                    }
                    if f.skip == Some(crate::findings::SkipKind::NotRoot) {
                        summary.not_root += 1;
                    }
                }
            }
        }
        let nvml = NvmlSummary::of(&inv.nvml);
        let worst = crate::findings::overall(&checks);
        let (_, gate) = Gate::decide(worst, &summary, false, false);
        let driver_version = inv
            .host
            .nvidia_version_line
            .value()
            .and_then(|l| crate::facts::parse_nvrm(l).0)
            .or_else(|| inv.nvml.driver_version.cloned());
        CheckReport {
            schema: CHECK_SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            gpudoctor_revision: crate::REVISION,
            source,
            hostname: None,
            time: None,
            driver_version,
            level,
            status: worst,
            gate,
            summary,
            checks,
            bandwidth: Vec::new(),
            gpu_models: Default::default(),
            nvml,
            unread: inv.notes.clone(),
            gpus: Vec::new(),
            topology: None,
            time_budget: None,
            would_exit: None,
            abandoned_work: false,
        }
    }

    /// Record the run's time budget (`--time-budget`).
    pub fn with_time_budget(mut self, seconds: f64, spent_during: Option<String>) -> Self {
        self.time_budget = Some(TimeBudget {
            seconds,
            spent_during,
        });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::Status;

    /// The gate, table-driven: (worst, warn, unjudged, strict, fail_on_skip) -> verdict, and
    /// whether the gate decided it.
    #[test]
    fn gate_table() {
        let cases = [
            (Status::Pass, 0, 0, false, false, Status::Pass, false),
            (Status::Pass, 0, 3, false, true, Status::Fail, true),
            (Status::Pass, 0, 3, false, false, Status::Pass, false),
            (Status::Warn, 2, 0, false, false, Status::Warn, false),
            (Status::Warn, 2, 0, true, false, Status::Fail, true),
            (Status::Warn, 2, 1, true, true, Status::Fail, true),
            (Status::Fail, 0, 5, true, true, Status::Fail, false),
            (Status::Skip, 0, 0, false, true, Status::Fail, true),
            (Status::Skip, 0, 0, false, false, Status::Skip, false),
            (Status::Skip, 0, 0, true, false, Status::Skip, false),
        ];
        for (worst, warn, unjudged, strict, fos, want, decided) in cases {
            let s = Summary {
                warn,
                unjudged,
                ..Summary::default()
            };
            let (got, gate) = Gate::decide(worst, &s, strict, fos);
            let case = (worst, warn, unjudged, strict, fos);
            assert_eq!(got, want, "{case:?}");
            assert_eq!(gate.decided(), decided, "{case:?}: {:?}", gate.reasons);
            assert_eq!(gate.findings_status, worst);
            // The gate only ever makes a verdict worse, and never turns anything into a pass.
            assert!(got >= worst || worst == Status::Skip, "{case:?}");
            assert!(got != Status::Pass || worst == Status::Pass, "{case:?}");
        }
    }
}
