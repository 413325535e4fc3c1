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

/// One check's verdict on one subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_status: Option<Status>,
    /// On a skip: why nothing was judged. Only `not-root` and `unknown` mean something that
    /// should have been judged was not (what `--fail-on-skip` fails on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip: Option<SkipKind>,
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
    GdrPeerMapping = "gdr.peer-mapping";
    PcieAcsRedirect = "pcie.acs-redirect";
    IommuMode = "iommu.mode";
    GpuBar1 = "gpu.bar1";
    PcieLinkWidth = "pcie.link-width";
    PcieLinkSpeed = "pcie.link-speed";
    PcieSlotMismatch = "pcie.slot-mismatch";
    NumaGpuNic = "numa.gpu-nic";
    TopoGpuNicPairing = "topo.gpu-nic-pairing";
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
}
