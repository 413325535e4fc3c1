//! The `probe nccl` report as text: &NcclReport -> String, nothing else.

use crate::probes::Status;
use crate::reading::Reading;
use crate::report::nccl::{ClusterView, ConfigRun, NcclReport};
use std::fmt::Write;

fn word(s: Status) -> String {
    format!("{s:?}").to_uppercase()
}

fn size_text(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{b} B")
    }
}

pub fn table(r: &NcclReport) -> String {
    let mut s = String::new();
    let lib = match &r.library {
        Some(l) => format!("NCCL {} ({})", l.version, l.path),
        None => "NCCL not loaded".to_string(),
    };
    let _ = writeln!(s, "gpudoctor probe nccl: {lib}");
    if let Some(c) = &r.cluster {
        cluster(&mut s, c);
    }
    if let Some(why) = &r.skipped {
        let _ = writeln!(s, "skipped: {why}");
        let _ = writeln!(s, "status: {}", word(r.status));
        return s;
    }
    for g in &r.gpus {
        let _ = writeln!(
            s,
            "  rank {} = {} {} ({}, {}, CUDA device {})",
            g.rank, g.label, g.name, g.bdf, g.arch, g.cuda_ordinal
        );
    }
    if !r.environment.is_empty() {
        let vars: Vec<String> = r
            .environment
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(s, "  environment: {}", vars.join(" "));
    }
    for run in &r.runs {
        config(&mut s, run);
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    if let Some(e) = &r.error {
        let _ = writeln!(s, "error: {e}");
    }
    let _ = writeln!(s, "status: {}   ({})", word(r.status), r.units);
    s
}

fn cluster(s: &mut String, c: &ClusterView) {
    let _ = writeln!(
        s,
        "  across nodes ({}): {} process(es), {} NCCL rank(s), {} node(s)",
        c.launcher,
        c.world_size,
        c.nranks,
        c.nodes.len()
    );
    for p in &c.processes {
        let gpus: Vec<String> = p
            .gpus
            .iter()
            .map(|g| format!("rank {} = {} {} ({})", g.rank, g.label, g.name, g.bdf))
            .collect();
        let _ = writeln!(
            s,
            "  process {} on {} (node {}): {}{}",
            p.rank,
            p.host,
            p.node,
            if gpus.is_empty() {
                "no GPU".to_string()
            } else {
                gpus.join(", ")
            },
            p.library
                .as_ref()
                .map(|l| format!("; NCCL {}", l.version))
                .unwrap_or_default()
        );
    }
    for n in &c.nodes {
        let net = match &n.network {
            Reading::Value(r) => r.basis.clone(),
            Reading::Absent(e) => format!("none ({e})"),
            Reading::Unknown(e) => format!("unknown ({e})"),
        };
        let bw: Vec<String> = n
            .busbw_gbps
            .iter()
            .map(|(k, v)| format!("{k} {v:.2} GB/s"))
            .collect();
        let _ = writeln!(
            s,
            "  node {}: network {net}{}",
            n.node,
            if bw.is_empty() {
                String::new()
            } else {
                format!("; own timing: {}", bw.join(", "))
            }
        );
    }
    for r in &c.rails {
        let _ = writeln!(
            s,
            "  NIC {}: {} channel(s) on {}; {}",
            r.nic,
            r.channels,
            r.nodes.join(", "),
            match &r.rate {
                Reading::Value(x) => x.basis.clone(),
                Reading::Absent(e) => format!("no rate ({e})"),
                Reading::Unknown(e) => format!("rate unknown ({e})"),
            }
        );
    }
    if let Some(n) = &c.slowest_node {
        let _ = writeln!(s, "  slowest node: {n}");
    }
    if let Some(r) = &c.slowest_rail {
        let _ = writeln!(s, "  slowest rail: {r}");
    }
}

fn config(s: &mut String, run: &ConfigRun) {
    let env: Vec<String> = run
        .nccl_env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(
        s,
        "\n{}{}: {}",
        run.name,
        if env.is_empty() {
            String::new()
        } else {
            format!(" ({})", env.join(" "))
        },
        word(run.status)
    );
    if let Some(why) = &run.skipped {
        let _ = writeln!(s, "  skipped: {why}");
    }
    match &run.expected {
        Reading::Value(e) => {
            let _ = writeln!(s, "  link: {}", e.basis);
        }
        Reading::Absent(why) | Reading::Unknown(why) => {
            let _ = writeln!(s, "  link rate unknown: {why}");
        }
    }
    for c in &run.collectives {
        let _ = writeln!(
            s,
            "  {} ({} ranks, {} warm-up, {} iterations per sample; busbw median [min-max] of n samples)",
            c.collective.as_str(),
            c.ranks,
            c.warmup,
            c.iters
        );
        let _ = writeln!(
            s,
            "    {:>9} {:>10} {:>9} {:>9}  busbw range",
            "size", "time us", "algbw", "busbw"
        );
        for z in &c.sizes {
            let med = |v: &[f64]| crate::probes::median(v).unwrap_or(f64::NAN);
            let st = crate::probes::stats(&z.busbw_gbps);
            let _ = writeln!(
                s,
                "    {:>9} {:>10.1} {:>9.1} {:>9.1}  [{}] n={}{}",
                size_text(z.size_bytes),
                med(&z.time_us),
                med(&z.algbw_gbps),
                med(&z.busbw_gbps),
                st.as_ref()
                    .map(|x| format!("{:.1}-{:.1}", x.min_gbps, x.max_gbps))
                    .unwrap_or_default(),
                st.as_ref().map_or(0, |x| x.n),
                if z.remeasured_busbw_gbps.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; again: {:.1} (n={})",
                        med(&z.remeasured_busbw_gbps),
                        z.remeasured_busbw_gbps.len()
                    )
                }
            );
        }
        if let Some(e) = &c.error {
            let _ = writeln!(s, "    error: {e}");
        }
        let bar = c
            .evaluation
            .threshold_basis
            .as_ref()
            .map(|b| format!(" (bar: {b})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "    {}: {}{bar}",
            word(c.evaluation.status),
            c.evaluation.reason
        );
    }
    if !run.transports.is_empty() {
        let _ = writeln!(s, "  transports (NCCL's channels per GPU pair):");
        for t in &run.transports {
            let via: Vec<String> = t.via.iter().map(|(v, n)| format!("{v} x{n}")).collect();
            let _ = writeln!(
                s,
                "    {}->{} [{}] {}",
                t.from,
                t.to,
                t.path.as_deref().unwrap_or("?"),
                via.join(", ")
            );
        }
    }
    if !run.networks.is_empty() {
        let _ = writeln!(
            s,
            "  network: {}{}",
            run.networks.join(", "),
            if run.socket_interfaces.is_empty() {
                String::new()
            } else {
                format!(" (socket interfaces {})", run.socket_interfaces.join(", "))
            }
        );
    }
    if let Some(why) = run.debug_log.why() {
        let _ = writeln!(s, "  NCCL debug output: {why}");
    }
    for w in &run.nccl_warnings {
        let _ = writeln!(s, "  NCCL WARN {w}");
    }
    for f in &run.findings {
        let _ = writeln!(s, "  {} {}: {}", word(f.status), f.subject, f.reason);
    }
    if let Some(e) = &run.error {
        let _ = writeln!(s, "  error: {e}");
    }
}
