//! The findings model: what a check or a probe concluded, in one vocabulary.
//!
//! `Status` is a finding's status; `SkipKind` says why a skip was not judged; `Evidence` is what
//! was read; `Finding` is one check's verdict on one subject; `CheckId` names the check
//! (permanent API). `Verdict` is what a probe concludes (pass, warn, fail, skip, unknown) and
//! `Verdict::finding` is the one mapping from it to a finding's status: unknown is a skip that
//! could not be judged, never a pass.
//!
//! This module is a leaf: it depends on nothing else of the crate, so checks, probes, the
//! report and the renderers all speak it without importing one another. It must not read
//! anything or know any check's logic (the catalog with documents and check functions is
//! `crate::checks::CATALOG`).

use serde::{Deserialize, Serialize};

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

/// One check's verdict on one subject. Serialized with its fault class (`category`, `action`:
/// see `FindingJson`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub id: CheckId,
    /// A BDF, an RDMA device (`mlx5_2`, `mlx5_2/1` for a port), a GPU label, or `host`.
    pub subject: String,
    pub status: Status,
    pub message: String,
    pub evidence: Vec<Evidence>,
    /// How to fix it; present on every warn and fail.
    pub remediation: Option<String>,
    /// Set when `--warn/--deny/--skip` changed the status: the status the check gave.
    pub original_status: Option<Status>,
    /// On a skip: why nothing was judged. Only `not-root` and `unknown` mean something that
    /// should have been judged was not (what `--fail-on-skip` fails on).
    pub skip: Option<SkipKind>,
    /// Set when a silence (`--skip ID:SUBJECT`, a baseline's `silences`) matched this finding:
    /// its status and evidence stay as judged, but it counts toward neither the verdict, the
    /// exit code nor `--fail-on-skip`.
    pub silenced: Option<Silenced>,
}

/// Where a silence was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SilenceOrigin {
    /// `--skip ID:SUBJECT`.
    CommandLine,
    /// An entry of the `--expect` baseline's `silences`.
    Baseline,
}

impl SilenceOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            SilenceOrigin::CommandLine => "command-line",
            SilenceOrigin::Baseline => "baseline",
        }
    }
}

/// How a finding was silenced: by what, why and until when (a baseline's silence always has
/// both; `--skip ID:SUBJECT` has neither).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Silenced {
    pub by: SilenceOrigin,
    pub reason: Option<String>,
    /// The last day (UTC, YYYY-MM-DD) the silence holds.
    pub expires: Option<String>,
}

impl Silenced {
    /// "silenced by --skip" / "silenced until 2026-12-31: RMA ticket open".
    pub fn describe(&self) -> String {
        match (&self.expires, &self.reason) {
            (Some(e), Some(r)) => format!("silenced until {e}: {r}"),
            (Some(e), None) => format!("silenced until {e}"),
            (None, Some(r)) => format!("silenced: {r}"),
            (None, None) => match self.by {
                SilenceOrigin::CommandLine => "silenced by --skip".to_string(),
                SilenceOrigin::Baseline => "silenced by the baseline".to_string(),
            },
        }
    }
}

/// A finding as JSON: its fields, then its fault class, derived from the check and the status
/// at the time it is written (so no later change of status can leave a stale action).
#[derive(Serialize)]
struct FindingJson<'a> {
    id: CheckId,
    subject: &'a str,
    status: Status,
    message: &'a str,
    evidence: &'a [Evidence],
    remediation: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    original_status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    skip: Option<SkipKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    silenced: Option<&'a Silenced>,
    category: Category,
    action: Action,
}

impl Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        FindingJson {
            id: self.id,
            subject: &self.subject,
            status: self.status,
            message: &self.message,
            evidence: &self.evidence,
            remediation: &self.remediation,
            original_status: self.original_status,
            skip: self.skip,
            silenced: self.silenced.as_ref(),
            category: self.id.category(),
            action: self.action(),
        }
        .serialize(s)
    }
}

/// How a version difference counts: a baseline's pin (`crate::checks::baseline`) and a fleet
/// report's shape difference (`crate::report::fleet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforce {
    /// The fleet pins it: a different value fails.
    Policy,
    /// Recorded for reference: a different value warns.
    Fact,
}

/// Which part of the machine a finding is about (machine-readable fault class, as DCGM's error
/// catalogue classes its errors): Slurm reasons, Prometheus labels and fleet group by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    Pcie,
    Rdma,
    Gpu,
    Driver,
    Host,
    Topology,
}

/// What an operator does about a warn or fail: change a setting (BIOS, kernel, driver, firmware:
/// `config`), reseat a card or cable (`reseat`), reset the GPU or reboot (`reset`), replace the
/// part (`replace`); `none` for a pass or a skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    None,
    Config,
    Reseat,
    Reset,
    Replace,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Pcie => "pcie",
            Category::Rdma => "rdma",
            Category::Gpu => "gpu",
            Category::Driver => "driver",
            Category::Host => "host",
            Category::Topology => "topology",
        }
    }
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Config => "config",
            Action::Reseat => "reseat",
            Action::Reset => "reset",
            Action::Replace => "replace",
        }
    }
}

impl CheckId {
    /// The fault class of this check's findings: what part of the machine, and the first thing
    /// an operator does when it warns or fails (the remediation text says the rest).
    pub fn fault_class(self) -> (Category, Action) {
        use Action::*;
        use Category::*;
        match self {
            CheckId::DriverNvidiaLoaded | CheckId::DriverNvml | CheckId::DriverVersionMatch => {
                (Driver, Config)
            }
            // A GPU missing from NVML or the driver's list fell off the bus or failed to
            // initialise: reset first.
            CheckId::DriverGpuCount => (Gpu, Reset),
            CheckId::GdrPeermem
            | CheckId::GdrDmabuf
            | CheckId::GdrPath
            | CheckId::GdrNcclAgrees
            | CheckId::GdrPeerMapping
            | CheckId::RdmaMlx5dv
            | CheckId::RdmaDriver
            | CheckId::ProbeDmabufExport => (Driver, Config),
            CheckId::PcieAcsRedirect | CheckId::PcieDevctl | CheckId::GpuP2p => (Pcie, Config),
            CheckId::IommuMode => (Host, Config),
            CheckId::GpuBar1 | CheckId::GpuPersistence | CheckId::BaselineBar1 => (Gpu, Config),
            CheckId::PcieLinkWidth
            | CheckId::PcieLinkSpeed
            | CheckId::PcieAer
            | CheckId::ProbeH2d
            | CheckId::ProbeD2h
            | CheckId::BaselinePcie
            | CheckId::BaselineBandwidth => (Pcie, Reseat),
            CheckId::PcieSlotMismatch => (Topology, Reseat),
            CheckId::NumaGpuNic | CheckId::TopoGpuNicPairing | CheckId::BaselinePaths => {
                (Topology, Config)
            }
            CheckId::RdmaPortState | CheckId::ProbeWriteBw | CheckId::BaselineNics => {
                (Rdma, Reseat)
            }
            CheckId::RdmaRoceGid
            | CheckId::RdmaMtu
            | CheckId::RdmaFwConsistency
            | CheckId::ProbeGdrWriteBw
            | CheckId::ProbeGpuWriteBw => (Rdma, Config),
            // Uncorrectable errors and pending remaps clear with a GPU reset; when they come
            // back, the remediation says to replace the GPU.
            CheckId::GpuEcc
            | CheckId::GpuRowRemap
            | CheckId::GpuNvlinkDown
            | CheckId::ProbeP2p
            | CheckId::BaselineNvlink => (Gpu, Reset),
            CheckId::BaselineGpus => (Gpu, Reseat),
            // Counted link errors and flaps: a cable, transceiver or port first.
            CheckId::RdmaPortErrors | CheckId::RdmaLinkFlaps => (Rdma, Reseat),
            // Xids that need action and NVLink errors: reset first (the document names the
            // Xids that mean reseat or RMA).
            CheckId::GpuXid | CheckId::GpuNvlinkErrors => (Gpu, Reset),
            // Thermal/power slowdown (cooling, power capping) and a fabric manager that is
            // not running or did not finish: settings and services.
            CheckId::GpuThrottle | CheckId::GpuFabric => (Gpu, Config),
            CheckId::BaselineVersions => (Driver, Config),
            // A silence that expired or matched nothing: the operator's own list to update.
            CheckId::SilenceStale => (Host, Config),
            // NCCL's transport choice and collective bandwidth: the NCCL_* settings first
            // (the links themselves have probe.p2p and the NVLink checks).
            CheckId::ProbeNccl => (Gpu, Config),
        }
    }

    pub fn category(self) -> Category {
        self.fault_class().0
    }
}

impl Finding {
    /// What to do about this finding: the check's action on a warn or fail, none otherwise.
    pub fn action(&self) -> Action {
        match self.status {
            Status::Warn | Status::Fail => self.id.fault_class().1,
            Status::Pass | Status::Skip => Action::None,
        }
    }
}

/// Why a finding is a skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkipKind {
    /// Nothing to judge here: no GPUs, no RDMA devices, no port above a GPU on flat virtual
    /// PCI, a probe that only runs live. Not a gap in what gpudoctor knows.
    NotApplicable,
    /// The fact needs root (unprivileged readers see 64 bytes of config space).
    NotRoot,
    /// The fact could not be read or was not recorded; the reason is in the message.
    Unknown,
    /// `--skip ID`: not judged, as asked.
    ByRequest,
}

impl SkipKind {
    /// The kebab-case word the JSON uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipKind::NotApplicable => "not-applicable",
            SkipKind::NotRoot => "not-root",
            SkipKind::Unknown => "unknown",
            SkipKind::ByRequest => "by-request",
        }
    }

    /// Something that should have been judged was not.
    pub fn unjudged(self) -> bool {
        matches!(self, SkipKind::NotRoot | SkipKind::Unknown)
    }
}

impl Finding {
    pub fn new(
        id: CheckId,
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
            // Unknown unless the check says otherwise: forgetting to mark a skip as not
            // applicable fails a gate, never passes one.
            skip: (status == Status::Skip).then_some(SkipKind::Unknown),
            silenced: None,
        }
    }
    /// A skip because there is nothing to judge here.
    pub fn not_applicable(mut self) -> Self {
        if self.status == Status::Skip {
            self.skip = Some(SkipKind::NotApplicable);
        }
        self
    }
    /// A skip because the fact needs root.
    pub fn not_root(mut self) -> Self {
        if self.status == Status::Skip {
            self.skip = Some(SkipKind::NotRoot);
        }
        self
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

/// Defines `CheckId` (a misspelled id does not compile), `CheckId::as_str` (the permanent
/// kebab-case id) and `CheckId::ALL`, in report order.
macro_rules! check_ids {
    ($( $variant:ident = $id:literal; )*) => {
        /// A check id: permanent API, serialized as its kebab-case string.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum CheckId { $( $variant ),* }

        impl CheckId {
            /// Every check id, in report order (the order of `crate::checks::CATALOG`).
            pub const ALL: &[CheckId] = &[ $( CheckId::$variant ),* ];

            pub const fn as_str(self) -> &'static str {
                match self { $( CheckId::$variant => $id ),* }
            }
        }
    };
}

check_ids! {
    DriverNvidiaLoaded = "driver.nvidia-loaded";
    DriverNvml = "driver.nvml";
    DriverVersionMatch = "driver.version-match";
    DriverGpuCount = "driver.gpu-count";
    GdrPeermem = "gdr.peermem";
    GdrDmabuf = "gdr.dmabuf";
    GdrPath = "gdr.path";
    GdrNcclAgrees = "gdr.nccl-agrees";
    GdrPeerMapping = "gdr.peer-mapping";
    PcieAcsRedirect = "pcie.acs-redirect";
    IommuMode = "iommu.mode";
    GpuBar1 = "gpu.bar1";
    PcieLinkWidth = "pcie.link-width";
    PcieLinkSpeed = "pcie.link-speed";
    PcieSlotMismatch = "pcie.slot-mismatch";
    NumaGpuNic = "numa.gpu-nic";
    TopoGpuNicPairing = "topo.gpu-nic-pairing";
    RdmaDriver = "rdma.driver";
    RdmaPortState = "rdma.port-state";
    RdmaRoceGid = "rdma.roce-gid";
    RdmaMtu = "rdma.mtu";
    RdmaFwConsistency = "rdma.fw-consistency";
    RdmaMlx5dv = "rdma.mlx5dv";
    PcieDevctl = "pcie.devctl";
    PcieAer = "pcie.aer";
    GpuPersistence = "gpu.persistence";
    GpuEcc = "gpu.ecc";
    GpuRowRemap = "gpu.row-remap";
    GpuP2p = "gpu.p2p";
    GpuNvlinkDown = "gpu.nvlink-down";
    RdmaPortErrors = "rdma.port-errors";
    RdmaLinkFlaps = "rdma.link-flaps";
    GpuXid = "gpu.xid";
    GpuThrottle = "gpu.throttle";
    GpuNvlinkErrors = "gpu.nvlink-errors";
    GpuFabric = "gpu.fabric";
    ProbeH2d = "probe.h2d";
    ProbeD2h = "probe.d2h";
    ProbeP2p = "probe.p2p";
    ProbeDmabufExport = "probe.dmabuf-export";
    ProbeNccl = "probe.nccl";
    ProbeWriteBw = "probe.write-bw";
    ProbeGdrWriteBw = "probe.gdr-write-bw";
    ProbeGpuWriteBw = "probe.gpu-write-bw";
    BaselineGpus = "baseline.gpus";
    BaselineNics = "baseline.nics";
    BaselinePaths = "baseline.paths";
    BaselinePcie = "baseline.pcie";
    BaselineNvlink = "baseline.nvlink";
    BaselineBar1 = "baseline.bar1";
    BaselineVersions = "baseline.versions";
    BaselineBandwidth = "baseline.bandwidth";
    SilenceStale = "silence.stale";
}

impl std::fmt::Display for CheckId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CheckId {
    type Err = String;
    fn from_str(s: &str) -> Result<CheckId, String> {
        CheckId::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("no check '{s}'"))
    }
}

impl Serialize for CheckId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for CheckId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// `a == b` in a const context (the catalog's compile-time agreement with `CheckId`).
pub const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Overall status: the worst of pass/warn/fail (skips and silenced findings do not count);
/// `skip` when nothing at all could be judged, because unknown is never pass.
pub fn overall(findings: &[Finding]) -> Status {
    findings
        .iter()
        .filter(|f| f.silenced.is_none())
        .map(|f| f.status)
        .filter(|s| *s != Status::Skip)
        .max()
        .unwrap_or(Status::Skip)
}

// One vocabulary for what a measurement or a check concluded.
//
// `Verdict` is what a probe (the CUDA copies, each write-bw message size, a whole write-bw run)
// concludes: pass, warn, fail, skip (on purpose, with a reason) or unknown (measured or tried,
// but nothing to judge it against: never a pass). A check finding uses the same words; its
// `unknown` is a skip whose `SkipKind` says why (`checks::SkipKind::Unknown`), because a finding
// always carries the reason it could not be judged. `Verdict::finding` is the one mapping from
// the first to the second; the severity order (pass < skip < warn < unknown < fail) is the
// order in which a worse verdict wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Pass,
    /// Skipped on purpose (no CUDA, nothing to measure), with the reason.
    Skip,
    /// Below the bar where the bar is advisory (SM-kernel variants).
    Warn,
    /// Could not be judged (no expected rate, no samples, a small message or a software
    /// device): never a pass.
    Unknown,
    Fail,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Skip => "skip",
            Verdict::Warn => "warn",
            Verdict::Unknown => "unknown",
            Verdict::Fail => "fail",
        }
    }

    /// Every verdict, in severity order (metrics export a state set over them).
    pub const ALL: [Verdict; 5] = [
        Verdict::Pass,
        Verdict::Skip,
        Verdict::Warn,
        Verdict::Unknown,
        Verdict::Fail,
    ];

    /// The status of a check finding that reports this verdict, and the skip kind where it is
    /// not judged (`Unknown` is a skip that could not be judged; `Skip` is one by the probe's
    /// own account, which the caller may narrow, e.g. to not-applicable).
    pub fn finding(self) -> (Status, Option<SkipKind>) {
        match self {
            Verdict::Pass => (Status::Pass, None),
            Verdict::Warn => (Status::Warn, None),
            Verdict::Fail => (Status::Fail, None),
            Verdict::Skip => (Status::Skip, Some(SkipKind::Unknown)),
            Verdict::Unknown => (Status::Skip, Some(SkipKind::Unknown)),
        }
    }
}

// The one judge: any probe run, levels 1 to 4, becomes a judgement here.

/// What a judged run concluded: a verdict, or "not judged on purpose" (a software RDMA
/// device, a path NCCL would not use), which no verdict word covers. The output of `judge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Judgement {
    Pass,
    /// Measured on purpose without a verdict (software RDMA, beyond NCCL's GPUDirect level).
    NotApplicable,
    Warn,
    /// Could not be judged: never a pass.
    Unknown,
    Fail,
}

impl Judgement {
    pub fn as_str(self) -> &'static str {
        match self {
            Judgement::Pass => "pass",
            Judgement::NotApplicable => "not-applicable",
            Judgement::Warn => "warn",
            Judgement::Unknown => "unknown",
            Judgement::Fail => "fail",
        }
    }

    /// The verdict word (not-applicable is a skip on purpose).
    pub fn verdict(self) -> Verdict {
        match self {
            Judgement::Pass => Verdict::Pass,
            Judgement::NotApplicable => Verdict::Skip,
            Judgement::Warn => Verdict::Warn,
            Judgement::Unknown => Verdict::Unknown,
            Judgement::Fail => Verdict::Fail,
        }
    }

    /// The status of a check finding that reports this judgement.
    pub fn finding(self) -> (Status, Option<SkipKind>) {
        match self {
            Judgement::NotApplicable => (Status::Skip, Some(SkipKind::NotApplicable)),
            other => other.verdict().finding(),
        }
    }
}

/// How a run's data was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// Every size's written bytes were read back and matched.
    Validated,
    /// Some size's bytes did not match: a failure whatever else holds.
    Mismatch,
    /// Some size was not checked (or nothing was measured): a pass cannot rest on it.
    NotChecked,
    /// The method carries no data check (level 1's copies are judged on bandwidth alone).
    NotPart,
}

/// How the run measured up to its bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bar {
    /// A threshold applied and every judged reading reached it.
    Met,
    /// A threshold applied and a judged reading fell short.
    Below,
    /// No threshold could be set (rate unknown, rates disagree, no samples): never a pass.
    Unknown,
    /// No threshold on purpose (a path NCCL would not use): measured, not judged.
    NotApplicable,
}

/// What a verdict rests on: facts of one run, no verdict in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFacts {
    /// The run finished every planned step (no error, deadline or interruption).
    pub completed: bool,
    pub data: Data,
    pub bar: Bar,
    /// A software RDMA device (rxe, siw): the CPU sets its rate, so it is measured, not judged.
    pub software: bool,
}

/// A shortfall's weight for the method at hand; it cannot say pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    Warn,
    Unknown,
    Fail,
}

impl From<Shortfall> for Judgement {
    fn from(s: Shortfall) -> Judgement {
        match s {
            Shortfall::Warn => Judgement::Warn,
            Shortfall::Unknown => Judgement::Unknown,
            Shortfall::Fail => Judgement::Fail,
        }
    }
}

/// What a run that broke off, or fell below its bar, weighs for one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    pub broken: Shortfall,
    pub below: Shortfall,
}

impl Weights {
    /// Write-bw (levels 2-4) and level 1's copy engine: either is a failure.
    pub const STRICT: Weights = Weights {
        broken: Shortfall::Fail,
        below: Shortfall::Fail,
    };
}

/// The one judge of a measured run (levels 1-4): pass only when the run completed, its data
/// was validated (or the method has no data check), a threshold applied and was met. Anything
/// else is a failure, a warning, unknown, or not applicable, never a pass:
///
/// 1. broke off: `w.broken`;
/// 2. data mismatch: fail (even where nothing else is judged);
/// 3. software RDMA device: not applicable (measured, not judged);
/// 4. no threshold on purpose: not applicable; no threshold known: unknown;
/// 5. below the threshold: `w.below`;
/// 6. data not checked: unknown;
/// 7. otherwise pass.
pub fn judge(f: &RunFacts, w: Weights) -> Judgement {
    if !f.completed {
        return w.broken.into();
    }
    if f.data == Data::Mismatch {
        return Judgement::Fail;
    }
    if f.software {
        return Judgement::NotApplicable;
    }
    match f.bar {
        Bar::NotApplicable => Judgement::NotApplicable,
        Bar::Unknown => Judgement::Unknown,
        Bar::Below => w.below.into(),
        Bar::Met if f.data == Data::NotChecked => Judgement::Unknown,
        Bar::Met => Judgement::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_is_never_a_pass_and_worse_wins() {
        for v in Verdict::ALL {
            let (s, k) = v.finding();
            assert_eq!(s == Status::Pass, v == Verdict::Pass, "{v:?}");
            assert_eq!(k.is_some(), s == Status::Skip, "{v:?}");
        }
        assert!(Verdict::Unknown > Verdict::Warn && Verdict::Fail > Verdict::Unknown);
        assert_eq!(
            serde_json::to_string(&Verdict::ALL).unwrap(),
            r#"["pass","skip","warn","unknown","fail"]"#
        );
    }

    #[test]
    fn every_finding_carries_its_fault_class() {
        for id in CheckId::ALL {
            let (_, action) = id.fault_class();
            assert_ne!(
                action,
                Action::None,
                "{id}: a warn or fail always says what to do"
            );
            for (status, want) in [
                (Status::Pass, Action::None),
                (Status::Skip, Action::None),
                (Status::Warn, action),
                (Status::Fail, action),
            ] {
                let f = Finding::new(*id, "GPU0", status, "m");
                assert_eq!(f.action(), want);
                let v = serde_json::to_value(&f).unwrap();
                assert_eq!(v["action"], want.as_str(), "{id} {status:?}");
                assert_eq!(v["category"], id.category().as_str());
            }
        }
    }

    #[test]
    fn check_ids_round_trip_and_are_kebab_case() {
        for id in CheckId::ALL {
            assert_eq!(id.as_str().parse::<CheckId>(), Ok(*id));
            assert!(
                id.as_str()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-'),
                "{id}"
            );
        }
        assert!("no.such-check".parse::<CheckId>().is_err());
        assert!(
            const_str_eq("abc", "abc") && !const_str_eq("abc", "abd") && !const_str_eq("ab", "abc")
        );
    }

    /// The judge, table-driven: every combination of completed / data / bar / software device
    /// (2 x 4 x 4 x 2), each against the rule written out once more here. Unknown is never a
    /// pass: the only pass is completed + validated (or no data check) + met + hardware.
    #[test]
    fn judge_table() {
        use Bar as B;
        use Data as D;
        use Judgement as J;
        let w = Weights::STRICT;
        let soft = Weights {
            broken: Shortfall::Unknown,
            below: Shortfall::Warn,
        };
        // (completed, data, bar, software) -> under STRICT, and under the soft weights.
        let rows: &[(bool, D, B, bool, J, J)] = &[
            (true, D::Validated, B::Met, false, J::Pass, J::Pass),
            (true, D::NotPart, B::Met, false, J::Pass, J::Pass),
            (true, D::NotChecked, B::Met, false, J::Unknown, J::Unknown),
            (true, D::Mismatch, B::Met, false, J::Fail, J::Fail),
            (true, D::Validated, B::Below, false, J::Fail, J::Warn),
            (true, D::NotChecked, B::Below, false, J::Fail, J::Warn),
            (
                true,
                D::Validated,
                B::Unknown,
                false,
                J::Unknown,
                J::Unknown,
            ),
            (true, D::NotPart, B::Unknown, false, J::Unknown, J::Unknown),
            (
                true,
                D::Validated,
                B::NotApplicable,
                false,
                J::NotApplicable,
                J::NotApplicable,
            ),
            (true, D::Mismatch, B::NotApplicable, false, J::Fail, J::Fail),
            (
                true,
                D::Validated,
                B::Met,
                true,
                J::NotApplicable,
                J::NotApplicable,
            ),
            (
                true,
                D::Validated,
                B::Unknown,
                true,
                J::NotApplicable,
                J::NotApplicable,
            ),
            (
                true,
                D::NotChecked,
                B::Unknown,
                true,
                J::NotApplicable,
                J::NotApplicable,
            ),
            (true, D::Mismatch, B::Unknown, true, J::Fail, J::Fail),
            (false, D::Validated, B::Met, false, J::Fail, J::Unknown),
            (false, D::Validated, B::Met, true, J::Fail, J::Unknown),
            (false, D::NotChecked, B::Unknown, false, J::Fail, J::Unknown),
        ];
        for &(completed, data, bar, software, strict, weak) in rows {
            let f = RunFacts {
                completed,
                data,
                bar,
                software,
            };
            assert_eq!(judge(&f, w), strict, "{f:?}");
            assert_eq!(judge(&f, soft), weak, "{f:?} (soft weights)");
        }
        // Every combination: a pass exactly where the rule allows one, whatever the weights.
        let datas = [D::Validated, D::Mismatch, D::NotChecked, D::NotPart];
        let bars = [B::Met, B::Below, B::Unknown, B::NotApplicable];
        let weights = [w, soft];
        let mut n = 0;
        for completed in [true, false] {
            for data in datas {
                for bar in bars {
                    for software in [true, false] {
                        let f = RunFacts {
                            completed,
                            data,
                            bar,
                            software,
                        };
                        let may_pass = completed
                            && matches!(data, D::Validated | D::NotPart)
                            && bar == B::Met
                            && !software;
                        for w in weights {
                            let j = judge(&f, w);
                            assert_eq!(j == J::Pass, may_pass, "{f:?} {w:?} -> {j:?}");
                            if data == D::Mismatch {
                                assert!(!completed || j == J::Fail, "{f:?}");
                            }
                            if completed && software && data != D::Mismatch {
                                assert_eq!(j, J::NotApplicable, "{f:?}");
                            }
                            // A finding reporting it is a pass only when the judge passed.
                            assert_eq!(j.finding().0 == Status::Pass, j == J::Pass);
                        }
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(n, 64);
        assert_eq!(
            J::NotApplicable.finding(),
            (Status::Skip, Some(SkipKind::NotApplicable))
        );
        assert_eq!(
            J::Unknown.finding(),
            (Status::Skip, Some(SkipKind::Unknown))
        );
    }
}
