//! `probe nccl`: the live topology, GPUDirect readiness (level 0's gdr.* checks, for --net),
//! the workers, and the exit code: 0 pass or skip (1 with --fail-on-skip), 1 a failure, 2
//! when a worker hung past its deadline or was interrupted (`gpudoctor: error:`).
//!
//! With --ranks, across nodes: rank 0 prints the merged report, the other ranks one line saying
//! they reported to it; every rank exits with the same code where rank 0 could tell it. A run
//! that could not complete (a rank that never joined, mismatched NCCL versions, a hung or
//! failed worker on any rank) is one `gpudoctor: error:` line and exit 2 (rank 0 still prints
//! what it has).

use super::{EXIT_ERROR, Outcome};
use crate::config::NcclConfig;
use crate::nccl::cluster::ClusterOutcome;
use crate::report::nccl::Mode;
use anyhow::Result;
use std::io::Write;

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
    let report = match &c.cluster {
        None => crate::nccl::live::run_in_node(&c.options, &topo, gdr_ready)?,
        Some(cl) => match crate::nccl::cluster::run_across_nodes(&c.options, &topo, cl)? {
            ClusterOutcome::Reported { status, line } => {
                return Ok(reported(c, cl.ranks.rank, &status, &line));
            }
            ClusterOutcome::Report { report, error } => {
                if let Some(e) = error {
                    // The report so far on stdout (rank 0's), then the one error line.
                    let stdout = if c.json {
                        serde_json::to_string_pretty(&report)? + "\n"
                    } else {
                        crate::nccl::render::table(&report)
                    };
                    let mut o = std::io::stdout().lock();
                    let _ = std::io::Write::write_all(&mut o, stdout.as_bytes());
                    let _ = std::io::Write::flush(&mut o);
                    anyhow::bail!("probe nccl --ranks: {e}");
                }
                *report
            }
        },
    };
    let stdout = if c.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else {
        crate::nccl::render::table(&report)
    };
    let code = super::exit::probe(report.status, false, c.fail_on_skip);
    Ok(Outcome::new(stdout, code))
}

/// A rank other than 0: one line (stdout; stderr for an error, exit 2), the exit code from
/// rank 0's verdict and this process's --fail-on-skip.
fn reported(c: &NcclConfig, rank: u32, status: &str, line: &str) -> Outcome {
    let code = super::exit::nccl_rank(status, c.fail_on_skip);
    if code == EXIT_ERROR {
        let _ = writeln!(
            std::io::stderr(),
            "gpudoctor: error: probe nccl --ranks: rank {rank}: {line}"
        );
        return Outcome::new(String::new(), EXIT_ERROR);
    }
    Outcome::new(
        format!("gpudoctor probe nccl: rank {rank} reported to rank 0: {line}\n"),
        code,
    )
}
