//! Text for the RDMA probes' reports: &Report -> String, nothing else.

use crate::report::rdma::write_bw::{SizeResult, SizeStats, WriteBwReport};
/// write-bw in perftest's layout (`#bytes #iterations BW peak BW average MsgRate`), with the
/// units said once (decimal MB/s; perftest's own "MB" is 2^20 bytes) and a Gb/s column.
/// Columns of the sweep that a narrow terminal drops, first to last (`--json` keeps them all).
const DROPPABLE: [&str; 5] = ["BW min", "BW max", "BW peak", "MsgRate", "#iters"];

/// The sweep's columns (perftest's, units on a second header line), laid out within `width`:
/// where a size does not fit on one line, the columns of DROPPABLE are left out, in that order,
/// and a line says which.
fn sweep(
    results: &[SizeResult],
    verdict: Option<&dyn Fn(&SizeResult) -> String>,
    width: usize,
) -> String {
    fn stat(s: &SizeResult, f: impl Fn(&SizeStats) -> String) -> String {
        s.stats.as_ref().map_or_else(|| "-".to_string(), f)
    }
    // (name, header cell, one cell per size)
    type Column = (&'static str, &'static str, Vec<String>);
    let col = |name, head, f: &dyn Fn(&SizeResult) -> String| -> Column {
        (name, head, results.iter().map(f).collect())
    };
    let mut cols = vec![
        col("#bytes", "#bytes", &|s| s.bytes.to_string()),
        col("#iters", "#iters", &|s| s.iterations.to_string()),
        col("n", "n", &|s| {
            s.stats.as_ref().map_or(0, |st| st.n).to_string()
        }),
        col("BW peak", "BW peak\n[MB/sec]", &|s| match s.stats {
            Some(_) => format!("{:.2}", s.peak_mb_per_s),
            None => "no samples".into(),
        }),
        col("BW median", "BW median\n[MB/sec]", &|s| {
            stat(s, |st| format!("{:.2}", st.median_mb_per_s))
        }),
        col("BW min", "BW min\n[MB/sec]", &|s| {
            stat(s, |st| format!("{:.2}", st.min_mb_per_s))
        }),
        col("BW max", "BW max\n[MB/sec]", &|s| {
            stat(s, |st| format!("{:.2}", st.max_mb_per_s))
        }),
        col("MsgRate", "MsgRate\n[Mpps]", &|s| {
            stat(s, |st| format!("{:.6}", st.median_msg_rate_mpps))
        }),
    ];
    if let Some(v) = verdict {
        cols.push(col("Gb/sec", "BW median\n[Gb/sec]", &|s| {
            stat(s, |st| format!("{:.3}", st.median_gbps))
        }));
        cols.push(col("verdict", "verdict", v));
    }
    fn table(cols: &[Column], n: usize) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = cols.iter().map(|c| c.1).collect();
        let rows = (0..n)
            .map(|i| cols.iter().map(|c| c.2[i].clone()).collect())
            .collect();
        (header, rows)
    }
    let mut dropped = Vec::new();
    for name in DROPPABLE {
        let (header, rows) = table(&cols, results.len());
        if super::layout::columns_one_line_width(&header, &rows, 1, 2) <= width {
            break;
        }
        cols.retain(|c| c.0 != name);
        dropped.push(name);
    }
    let (header, rows) = table(&cols, results.len());
    let mut out = super::layout::columns(&header, &rows, width, 1, 2);
    if !dropped.is_empty() {
        out.push(' ');
        super::layout::wrap(
            &mut out,
            &format!(
                "Left out at this width: {} (--json has every column)",
                dropped.join(", ")
            ),
            1,
            3,
            width,
        );
    }
    out
}

pub fn write_bw_table(r: &WriteBwReport, width: usize) -> String {
    use crate::report::rdma::write_bw::Addressing;
    use crate::report::rdma::write_bw::{Status, Threshold, Verdict};
    use std::fmt::Write as _;
    let mut o = String::new();
    let rule = "-".repeat(width);
    let _ = writeln!(o, "{rule}");
    let _ = writeln!(o, " RDMA write bandwidth ({:?}, RC)", r.mode);
    if let Some(f) = &r.local {
        let addr = match &f.addressing {
            Addressing::Lid { lid } => format!("LID {lid:#06x}"),
            Addressing::Gid {
                index,
                gid,
                gid_type,
                why,
            } => format!(
                "GID index {index} {gid} ({}; {why})",
                gid_type.as_deref().unwrap_or("type unknown")
            ),
        };
        let _ = writeln!(
            o,
            " Device {} port {} ({}, {}), MTU {} B, {addr}",
            f.device, f.port, f.state, f.link_layer, f.mtu_bytes
        );
    }
    if let Some(f) = &r.remote {
        let _ = writeln!(o, " Peer device {} port {}", f.device, f.port);
    }
    if let Some(g) = &r.gdr {
        gdr_header(g, r.memory.as_ref(), &mut o);
    }
    let p = &r.plan;
    let _ = writeln!(
        o,
        " QPs {}, TX depth {}, CQ moderation {}, post list {}{}",
        p.qps,
        p.tx_depth,
        p.cq_moderation,
        match p.post_list {
            Some(l) => l.to_string(),
            None => "auto (<= 16 writes, <= 64 KiB per post)".into(),
        },
        if p.validate { ", validating data" } else { "" }
    );
    let _ = writeln!(o, " Units: {}", crate::report::rdma::write_bw::UNITS);
    match &r.threshold {
        Some(Threshold::LineRate {
            source, min_bytes, ..
        }) => {
            let _ = writeln!(o, " Threshold: messages >= {min_bytes} B at {source}");
        }
        Some(
            Threshold::NotApplicable { reason }
            | Threshold::Unknown { reason }
            | Threshold::Delivery { reason },
        ) => {
            let _ = writeln!(o, " Threshold: none ({reason})");
        }
        None => {}
    }
    let _ = writeln!(o, "{rule}");
    if !r.results.is_empty() {
        let verdict = |s: &SizeResult| -> String {
            match (s.verdict, s.validated) {
                (Verdict::Fail, Some(false)) => "FAIL (data mismatch)",
                (Verdict::Fail, _) => "FAIL",
                (Verdict::Pass, _) => "pass",
                (Verdict::Warn, _) => "warn",
                (Verdict::Unknown | Verdict::Skip, Some(true)) => "- (data ok)",
                (Verdict::Unknown | Verdict::Skip, _) => "-",
            }
            .to_string()
        };
        o.push_str(&sweep(&r.results, Some(&verdict), width));
        let _ = writeln!(
            o,
            " n timed repetitions per size; the median is what a size is judged on"
        );
        let _ = writeln!(o, "{rule}");
    }
    for n in &r.notes {
        let _ = writeln!(o, " {n}");
    }
    if let Some(c) = r.gdr.as_ref().and_then(|g| g.cause.as_ref()) {
        let _ = writeln!(o, " Cause: {}", c.summary);
        for e in &c.evidence {
            let _ = writeln!(o, "   - {}: {}", e.source, e.value);
        }
        let _ = writeln!(o, "   Fix: {}", c.remediation);
    }
    let _ = match &r.status {
        Status::Ok => match &r.judgement {
            Some(j) => writeln!(o, " write-bw: ok ({}: {})", j.status.as_str(), j.reason),
            None => writeln!(o, " write-bw: ok"),
        },
        Status::Failed { reason } => writeln!(o, " write-bw: FAILED: {reason}"),
        Status::Skipped { reason } => writeln!(o, " write-bw: skipped: {reason}"),
        Status::Error { reason } => writeln!(o, " write-bw: ERROR: {reason}"),
    };
    super::layout::fit(&o, width)
}

fn memory_text(m: &crate::report::rdma::memory::MemoryFacts) -> String {
    let what = match (&m.gpu, &m.bdf) {
        (Some(g), Some(b)) => format!("{g} {b} via {}", m.registration),
        _ => "host memory (ibv_reg_mr)".to_string(),
    };
    let align = if m.address_alignment_bytes >= 1 << 20 {
        format!("{} MiB", m.address_alignment_bytes >> 20)
    } else {
        format!("{} KiB", m.address_alignment_bytes >> 10)
    };
    format!(
        "{what} ({} B at {}, {align}-aligned{})",
        m.bytes,
        m.address,
        match m.sync_memops {
            Some(true) => ", SYNC_MEMOPS 1",
            Some(false) => ", SYNC_MEMOPS 0",
            None => "",
        }
    )
}

/// Level 3's lines above the table: GPU, NIC and path, memory, registration, expectation.
fn gdr_header(
    g: &crate::report::rdma::gdr::GdrFacts,
    mem: Option<&crate::report::rdma::write_bw::MemorySides>,
    o: &mut String,
) {
    use std::fmt::Write as _;
    match &g.gpu {
        Some(gpu) => {
            let _ = writeln!(
                o,
                " GPU: {} {} ({}), GPU memory on side: {}",
                gpu.label, gpu.bdf, gpu.name, g.gpu_side
            );
        }
        None => {
            let _ = writeln!(
                o,
                " GPU: none: host memory through the level-3 path (--gdr without --gpu)"
            );
        }
    }
    if !g.nic.device.is_empty() {
        let _ = writeln!(
            o,
            " NIC: {} port {} ({})",
            g.nic.device, g.nic.port, g.nic.why
        );
    }
    if let Some(m) = mem {
        if let Some(s) = &m.source {
            let _ = writeln!(o, " Memory, source: {}", memory_text(s));
        }
        if let Some(t) = &m.target {
            let _ = writeln!(o, " Memory, target: {}", memory_text(t));
        }
    }
    if let Some(d) = &g.registration {
        let _ = writeln!(
            o,
            " Registration ({:?} requested): {}",
            d.requested, d.summary
        );
    }
    if let Some(b) = &g.gpu_buffer {
        let _ = writeln!(
            o,
            " GPU buffer (cuMemAlloc): {} B at {}, {} KiB-aligned, SYNC_MEMOPS {}; dma-buf export: {}",
            b.bytes,
            b.address,
            b.address_alignment_bytes >> 10,
            u8::from(b.sync_memops),
            b.dmabuf_export
        );
    }
    let _ = writeln!(o, " Expectation: {}", g.expectation.text);
    if let Some(m) = &g.gpu_memory {
        let _ = writeln!(
            o,
            " GPU memory (cuMemGetInfo): free {} B before, {} B after {}: {}",
            m.free_before_bytes,
            m.free_after_bytes,
            super::layout::count(m.runs as usize, "run", "runs"),
            if m.leaked() {
                format!("{} MiB NOT given back", m.left_behind_bytes >> 20)
            } else {
                "nothing left behind".to_string()
            }
        );
    }
}

/// `probe gpu-write-bw` (level 4): level 2's columns plus the posting time per iteration and
/// the handler that rang the doorbell.
pub fn gpu_write_bw_table(
    r: &crate::report::rdma::gpu_write_bw::GpuWriteBwReport,
    width: usize,
) -> String {
    use crate::report::rdma::write_bw::Status;
    use std::fmt::Write as _;
    let mut o = String::new();
    let rule = "-".repeat(width);
    let _ = writeln!(o, "{rule}");
    let _ = writeln!(
        o,
        " GPU-initiated RDMA write bandwidth (loopback, RC, mlx5 direct verbs)"
    );
    if let Some(g) = &r.gpu {
        let _ = writeln!(o, " GPU {} ({}, {})", g.label, g.bdf, g.name);
    }
    if let Some(n) = &r.nic {
        let _ = writeln!(
            o,
            " Device {} port {}: {}{}",
            n.device,
            n.port,
            n.why,
            r.path
                .as_deref()
                .map(|p| format!(", path {p}"))
                .unwrap_or_default()
        );
    }
    if let Some(p) = &r.provider {
        let _ = writeln!(o, " Provider {p}");
    }
    let p = &r.plan;
    let _ = writeln!(
        o,
        " {} per iteration (one kernel launch), {} per size{}",
        super::layout::count(p.writes_per_iter as usize, "write", "writes"),
        super::layout::count(p.iters as usize, "iteration", "iterations"),
        if p.validate { ", validating data" } else { "" }
    );
    let _ = writeln!(o, " Doorbell: {}", r.poster.why);
    if !r.poster.queues_why.is_empty() {
        let _ = writeln!(
            o,
            " Queues: {} ({})",
            r.poster.queues.map(|q| q.as_str()).unwrap_or("none"),
            r.poster.queues_why
        );
    }
    for n in &r.notes {
        let _ = writeln!(o, " Note: {n}");
    }
    let _ = writeln!(o, " Units: {}", r.units);
    if !r.results.is_empty() {
        let _ = writeln!(o, "{rule}");
        o.push_str(&sweep(&r.results, None, width));
    }
    if let Some(t) = &r.poster.posting_ns {
        let _ = writeln!(
            o,
            " Posting per iteration ({} handler, queues in {} memory): median {} ns, min {}, max {} (n {})",
            r.poster.handler.map(|h| h.as_str()).unwrap_or("?"),
            r.poster.queues.map(|q| q.as_str()).unwrap_or("?"),
            t.median,
            t.min,
            t.max,
            t.n
        );
    }
    let _ = writeln!(o, "{rule}");
    let _ = match &r.status {
        Status::Ok => writeln!(o, " gpu-write-bw: ok"),
        Status::Failed { reason } => writeln!(o, " gpu-write-bw: FAILED: {reason}"),
        Status::Skipped { reason } => writeln!(o, " gpu-write-bw: skipped: {reason}"),
        Status::Error { reason } => writeln!(o, " gpu-write-bw: ERROR: {reason}"),
    };
    super::layout::fit(&o, width)
}

#[cfg(test)]
mod tests {
    use crate::report::rdma::plan::{Plan, PlanSpec};
    use crate::report::rdma::write_bw::{Mode, Repetition, SizeResult, WriteBwReport};

    /// A full perftest-style sweep (2 B .. 8 MiB at 400 Gb/s, five repetitions) renders within
    /// the width, every size on one line at 100 and 80 columns (it was 142 columns,
    /// and a narrower terminal re-wrapped the rows), its columns wrapping their headers, never
    /// a number, below that.
    #[test]
    fn sweep_fits_the_width() {
        let sizes: Vec<u64> = (1..=23).map(|p| 1u64 << p).collect();
        let plan = Plan::new(PlanSpec {
            sizes: sizes.clone(),
            iterations: 100_000,
            cq_moderation: 100,
            qps: 16,
            ..PlanSpec::check()
        })
        .unwrap();
        let mut r = WriteBwReport::new(Mode::Loopback, plan);
        for b in sizes {
            let rep = Repetition {
                elapsed_ns: 1,
                mb_per_s: 49_321.123,
                peak_mb_per_s: 49_999.999,
                peak_window: 1,
            };
            r.results
                .push(SizeResult::new(b, 100_000, vec![rep; 5], Some(true)));
        }
        for width in [100, 80, 72, 60] {
            let text = super::write_bw_table(&r, width);
            let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
            assert!(widest <= width, "{widest} > {width}:\n{text}");
            let row = text
                .lines()
                .find(|l| l.starts_with(" 8388608 "))
                .unwrap_or_else(|| panic!("{width}:\n{text}"));
            // Every number whole, in order: the full row at 100, a subsequence of it narrower.
            let full = [
                "8388608", "100000", "5", "50000.00", "49321.12", "49321.12", "49321.12",
                "0.005880", "394.569", "-",
            ];
            let cells: Vec<&str> = row.split_whitespace().collect();
            let mut at = full.iter();
            for c in cells.iter().take_while(|c| **c != "-") {
                assert!(at.any(|f| f == c), "{c} out of place at {width}:\n{text}");
            }
            if width == 100 {
                assert_eq!(cells[..full.len()], full, "{text}");
                assert!(!text.contains("Left out"), "{text}");
            } else {
                let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
                assert!(
                    words.contains("Left out at this width: BW min"),
                    "{width}:\n{text}"
                );
            }
            if width >= 80 {
                assert!(
                    row.ends_with("- (data ok)"),
                    "one line per size at {width}:\n{text}"
                );
            }
        }
    }
}
