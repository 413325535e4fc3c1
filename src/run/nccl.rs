//! `probe nccl`: the live topology, GPUDirect readiness (level 0's gdr.* checks, for --net),
//! the workers, and the exit code: 0 pass or skip (1 with --fail-on-skip), 1 a failure, 2
//! when a worker hung past its deadline or was interrupted (`gpudoctor: error:`).

use super::{EXIT_FAILED_CHECK, EXIT_OK, Outcome};
use crate::config::NcclConfig;
use crate::nccl::report::Mode;
use crate::probes::Status;
use anyhow::Result;

pub(super) fn probe(c: &NcclConfig) -> Result<Outcome> {
    let source = crate::source::Source::open(&crate::source::SourceSpec::Live)?;
    let scope = if c.options.mode == Mode::Net {
        crate::inventory::Scope::Checks
    } else {
        crate::inventory::Scope::Topology
    };
    let inv = super::inventory(&source, scope)?;
    let topo = crate::topo::build(&inv);
    let gdr_ready = (c.options.mode == Mode::Net).then(|| {
        let level0 = crate::checks::run_level0(&crate::checks::Ctx {
            inv: &inv,
            topo: &topo,
            libs: &source.libs,
        });
        let gdr: Vec<_> = level0
            .iter()
            .filter(|f| f.id.as_str().starts_with("gdr."))
            .collect();
        let failing: Vec<String> = gdr
            .iter()
            .filter(|f| f.status == crate::findings::Status::Fail)
            .map(|f| format!("{} {}", f.id, f.subject))
            .collect();
        let passing = gdr
            .iter()
            .filter(|f| f.status == crate::findings::Status::Pass)
            .count();
        if failing.is_empty() && passing > 0 {
            (true, format!("{passing} gdr.* findings pass, none fails"))
        } else {
            (
                false,
                if failing.is_empty() {
                    "no gdr.* finding passes".to_string()
                } else {
                    format!("failing: {}", failing.join(", "))
                },
            )
        }
    });
    let report = crate::nccl::live::run(&c.options, &topo, gdr_ready)?;
    let stdout = if c.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else {
        crate::nccl::render::table(&report)
    };
    let code = if report.status == Status::Fail || (c.fail_on_skip && report.status == Status::Skip)
    {
        EXIT_FAILED_CHECK
    } else {
        EXIT_OK
    };
    Ok(Outcome::new(stdout, code))
}
