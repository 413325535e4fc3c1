//! An `nvidia-bug-report.log` (already gunzipped) as a machine record.
//!
//! The layout is nvidia-bug-report.sh's: sections separated by a line of underscores, each
//! opened by a header line. A file is `*** /proc/cmdline`, then `*** ls: <ls -l line>`, then
//! its text; a command is its command line (`/usr/bin/lspci -nnDvvvxxxx`, `/usr/bin/numactl -H`,
//! `/usr/bin/nvidia-smi --query`, as `which` found it), then its output; the kernel log is
//! `dmesg:` and `Scanning kernel log files for NVIDIA kernel messages:`. Older scripts (390.xx)
//! list only NVIDIA and PLX functions (`lspci -d "10de:*" -v -xxx`, `-d "10b5:*"`) plus
//! `lspci -nn`; every lspci listing in the log is read and merged. When lspci is missing the
//! script dumps config space from sysfs under `PCI devices configuration space dump using sysfs`.
//!
//! This module must not judge anything. Unknown sections are ignored; each section is read with
//! bounds; a log without any lspci section is refused (nothing to build a tree from).

use super::lspci;
use super::record::{Format, GpuRecord, MachineRecord, NumaRecord, RecordError};
use crate::pci::Bdf;
use std::collections::{BTreeSet, HashMap};

/// Most lines kept from the kernel log sections.
pub const MAX_KERNEL_LINES: usize = 1 << 20;
/// Most GPUs read from `nvidia-smi --query`.
pub const MAX_GPUS: usize = 4096;
/// Most NUMA nodes read from `numactl -H`.
pub const MAX_NODES: usize = 4096;
/// Longer lines are skipped.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The kernel files the record keeps, by the path the log names them with.
const KERNEL_FILES: [&str; 5] = [
    "/proc/driver/nvidia/params",
    "/proc/driver/nvidia/version",
    "/proc/cmdline",
    "/proc/modules",
    "/proc/version",
];

/// Whether `text` looks like an nvidia-bug-report log.
pub fn looks_like(text: &str) -> bool {
    let head = head_of(text, 8192);
    head.contains("Start of NVIDIA bug report log file")
        || head.contains("nvidia-bug-report.sh Version:")
}

fn head_of(text: &str, n: usize) -> &str {
    let mut end = text.len().min(n);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A section: its header line and the lines after it.
struct Section<'a> {
    header: &'a str,
    body: Vec<&'a str>,
}

/// Split at separator lines (underscores only, as the script writes 44 of them).
fn sections<'a>(text: &'a str, long_lines: &mut usize) -> Vec<Section<'a>> {
    fn flush<'a>(cur: &mut Vec<&'a str>, out: &mut Vec<Section<'a>>) {
        let lines = std::mem::take(cur);
        let mut it = lines.into_iter().skip_while(|l| l.trim().is_empty());
        if let Some(header) = it.next() {
            out.push(Section {
                header: header.trim(),
                body: it.collect(),
            });
        }
    }
    let mut out = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    for raw in text.lines() {
        if raw.len() > MAX_LINE_BYTES {
            *long_lines += 1;
            continue;
        }
        let line = raw.trim_end_matches('\r');
        let t = line.trim();
        if t.len() >= 20 && t.bytes().all(|b| b == b'_') {
            flush(&mut cur, &mut out);
            continue;
        }
        cur.push(line);
    }
    flush(&mut cur, &mut out);
    out
}

/// The command a header line runs: (program basename, arguments).
fn command(header: &str) -> Option<(&str, &str)> {
    let (prog, args) = header.split_once(' ').unwrap_or((header, ""));
    let base = prog.rsplit('/').next()?;
    (!base.is_empty()).then_some((base, args.trim()))
}

/// Parse a bug report log.
pub fn parse(text: &str) -> Result<MachineRecord, RecordError> {
    let mut long_lines = 0usize;
    let secs = sections(text, &mut long_lines);
    let mut rec = MachineRecord::new(Format::BugReport);
    let mut lspci_texts: Vec<String> = Vec::new();
    let mut dmesg: Option<Vec<String>> = None;
    let mut scanned: Vec<String> = Vec::new();
    let mut scanned_seen = false;
    let mut smi_driver: Option<String> = None;
    let mut sysfs_numa: Vec<(Bdf, &str, String)> = Vec::new();
    for s in &secs {
        let h = s.header;
        if let Some(path) = h.strip_prefix("*** ") {
            let path = path.trim();
            if path.starts_with("ls:")
                || path.ends_with(" does not exist")
                || path.ends_with(" is not readable")
            {
                continue;
            }
            let content = file_content(&s.body);
            if KERNEL_FILES.contains(&path) {
                rec.kernel_files.insert(path.to_string(), content);
            } else if let Some(rest) = path.strip_prefix("/sys/bus/pci/devices/") {
                // The NUMA section's `numa_node` and `local_cpulist` of each GPU.
                if let Some((addr, file)) = rest.split_once('/')
                    && let (Ok(b), "numa_node" | "local_cpulist") = (addr.parse::<Bdf>(), file)
                {
                    let file = if file == "numa_node" {
                        "numa_node"
                    } else {
                        "local_cpulist"
                    };
                    sysfs_numa.push((b, file, content));
                }
            }
            continue;
        }
        if h == "dmesg:" {
            let lines: Vec<String> = s
                .body
                .iter()
                .filter(|l| !l.trim().is_empty())
                .take(MAX_KERNEL_LINES)
                .map(|l| l.to_string())
                .collect();
            dmesg = Some(lines);
            continue;
        }
        if h.starts_with("Scanning kernel log files for NVIDIA kernel messages") {
            scanned_seen = true;
            for l in &s.body {
                let t = l.trim();
                let sub_header = (l.starts_with("  ") && t.ends_with(':') && !t.contains(' '))
                    || t.starts_with("journalctl -b")
                    || t.starts_with("No NVIDIA kernel messages")
                    || t.starts_with("No suitable log found")
                    || t.ends_with("is not readable");
                if !t.is_empty() && !sub_header && scanned.len() < MAX_KERNEL_LINES {
                    scanned.push(t.to_string());
                }
            }
            continue;
        }
        if h.starts_with("PCI devices configuration space dump using sysfs") {
            lspci_texts.push(s.body.join("\n"));
            continue;
        }
        if h.starts_with("nvidia-bug-report.sh Version:")
            || h.starts_with("Start of NVIDIA bug report")
        {
            for l in s.body.iter().chain(std::iter::once(&h)) {
                if let Some(u) = l.trim().strip_prefix("uname:") {
                    rec.hostname = u.split_whitespace().nth(1).map(str::to_string);
                }
            }
            continue;
        }
        let Some((prog, args)) = command(h) else {
            continue;
        };
        match prog {
            "lspci" => {
                // The tree (`-t`, `-nntv`) says nothing a listing does not.
                let tree = args
                    .split_whitespace()
                    .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('t'));
                if !tree {
                    lspci_texts.push(s.body.join("\n"));
                }
            }
            "numactl" => rec.numa = numactl(&s.body, &mut rec.notes).or(rec.numa.take()),
            "nvidia-smi" if args.starts_with("--query") || args.starts_with("-q") => {
                nvidia_smi(&s.body, &mut rec.gpus, &mut smi_driver);
            }
            _ => {}
        }
    }
    if lspci_texts.is_empty() {
        return Err(RecordError::Malformed(
            "no lspci section in this nvidia-bug-report log".to_string(),
        ));
    }
    let refs: Vec<&str> = lspci_texts.iter().map(String::as_str).collect();
    let pci = lspci::parse_sections(&refs)?;
    rec.functions = pci.functions;
    rec.carried = pci.carried;
    rec.notes.extend(pci.notes);
    rec.cannot_tell.extend(pci.cannot_tell);
    for (b, file, content) in sysfs_numa {
        let Some(f) = rec.functions.iter_mut().find(|f| f.bdf == b) else {
            continue;
        };
        let c = content.trim();
        if file == "numa_node" {
            if let Ok(n) = c.parse::<i32>() {
                f.numa_node = Some(n);
            }
        } else {
            f.local_cpulist = Some(c.to_string());
        }
    }
    rec.kernel_messages = kernel_messages(dmesg, scanned, scanned_seen, &mut rec.notes);
    rec.driver_version = smi_driver.or_else(|| {
        rec.kernel_files
            .get("/proc/driver/nvidia/version")
            .and_then(|v| proc_version_driver(v))
    });
    if long_lines > 0 {
        rec.notes.push(format!(
            "{long_lines} lines longer than {} KiB skipped",
            MAX_LINE_BYTES / 1024
        ));
    }
    Ok(rec)
}

/// A file section's text: after the `*** ls:` line, without the blank line the script appends.
fn file_content(body: &[&str]) -> String {
    let start = usize::from(body.first().is_some_and(|l| l.starts_with("*** ls:")));
    let mut lines = &body[start.min(body.len())..];
    while let Some((last, rest)) = lines.split_last() {
        if last.trim().is_empty() {
            lines = rest;
        } else {
            break;
        }
    }
    let mut s = lines.join("\n");
    if !s.is_empty() {
        s.push('\n');
    }
    s
}

/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...` -> 535.104.05
/// (the open modules say `NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build`).
fn proc_version_driver(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let after = line.split_once("Kernel Module")?.1;
    let after = after.trim_start().strip_prefix("for ").map_or(after, |r| {
        r.split_once(char::is_whitespace).map_or("", |(_, x)| x)
    });
    let v = after.split_whitespace().next()?;
    v.chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit())
        .then(|| v.to_string())
}

/// Kernel messages: the dmesg section, plus each NVRM Xid line of the scanned logs (journal,
/// /var/log/messages, earlier boots) that dmesg does not already hold.
fn kernel_messages(
    dmesg: Option<Vec<String>>,
    scanned: Vec<String>,
    scanned_seen: bool,
    notes: &mut Vec<String>,
) -> Option<Vec<String>> {
    if dmesg.is_none() && !scanned_seen {
        return None;
    }
    let mut out = dmesg.unwrap_or_default();
    // The kernel's own Xid records only (a user's syslog line or segfault record is none).
    let xid_text = |l: &str| crate::kmsg::xid(&crate::kmsg::from_log_line(0, l)).map(|x| x.text);
    let mut in_dmesg: HashMap<String, usize> = HashMap::new();
    for l in &out {
        if let Some(x) = xid_text(l) {
            *in_dmesg.entry(x).or_default() += 1;
        }
    }
    let mut added = 0usize;
    for l in scanned {
        let Some(x) = xid_text(&l) else { continue };
        match in_dmesg.get_mut(&x) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                if out.len() < MAX_KERNEL_LINES {
                    out.push(l);
                    added += 1;
                }
            }
        }
    }
    if added > 0 {
        notes.push(format!(
            "{added} NVRM Xid lines taken from the scanned kernel logs (journal, /var/log, earlier boots) that dmesg does not hold"
        ));
    }
    Some(out)
}

/// `numactl -H`: `node 0 cpus: 0 1 2`, and the `node distances:` table.
fn numactl(body: &[&str], notes: &mut Vec<String>) -> Option<Vec<NumaRecord>> {
    let mut nodes: Vec<NumaRecord> = Vec::new();
    let mut table_ids: Option<Vec<u32>> = None;
    for l in body {
        let t = l.trim();
        if let Some(rest) = t.strip_prefix("node ") {
            let (id, what) = rest.split_once(' ').unwrap_or((rest, ""));
            if let (Ok(id), Some(cpus)) = (id.parse::<u32>(), what.strip_prefix("cpus:")) {
                if nodes.len() >= MAX_NODES {
                    continue;
                }
                let mut set = BTreeSet::new();
                let mut ok = true;
                for c in cpus.split_whitespace() {
                    match c.parse::<u32>() {
                        Ok(c) if set.len() < crate::numa::MAX_CPULIST_CPUS => {
                            set.insert(c);
                        }
                        _ => ok = false,
                    }
                }
                nodes.push(NumaRecord {
                    id,
                    cpulist: ok.then(|| crate::numa::format_cpulist(&set)),
                    distance: None,
                });
                continue;
            }
            if table_ids.is_none() && t.starts_with("node ") && !t.contains(':') {
                // The distance table's heading: "node   0   1".
                let ids: Option<Vec<u32>> =
                    rest.split_whitespace().map(|x| x.parse().ok()).collect();
                table_ids = ids;
            }
            continue;
        }
        if let (Some(_), Some((row, dists))) = (&table_ids, t.split_once(':'))
            && let Ok(row) = row.trim().parse::<u32>()
        {
            let d: Vec<&str> = dists.split_whitespace().collect();
            if d.len() <= crate::numa::MAX_DISTANCES
                && d.iter().all(|x| x.parse::<u32>().is_ok())
                && let Some(n) = nodes.iter_mut().find(|n| n.id == row)
            {
                n.distance = Some(d.join(" "));
            }
        }
    }
    if nodes.is_empty() {
        notes.push("numactl -H section shows no nodes".to_string());
        return None;
    }
    nodes.sort_by_key(|n| n.id);
    nodes.dedup_by_key(|n| n.id);
    Some(nodes)
}

/// `nvidia-smi --query`: the driver version and one GpuRecord per `GPU 00000000:1B:00.0` block.
fn nvidia_smi(body: &[&str], gpus: &mut Vec<GpuRecord>, driver: &mut Option<String>) {
    let mut cur: Option<GpuRecord> = None;
    let mut groups: Vec<(usize, String)> = Vec::new();
    let push = |g: Option<GpuRecord>, gpus: &mut Vec<GpuRecord>| {
        if let Some(g) = g
            && gpus.len() < MAX_GPUS
            && !gpus.iter().any(|x| x.bdf == g.bdf)
        {
            gpus.push(g);
        }
    };
    for l in body {
        if l.trim().is_empty() {
            continue;
        }
        let indent = l.len() - l.trim_start().len();
        let t = l.trim();
        if indent == 0 {
            if let Some(addr) = t.strip_prefix("GPU ")
                && let Ok(bdf) = addr.trim().parse::<Bdf>()
            {
                push(cur.take(), gpus);
                groups.clear();
                cur = Some(GpuRecord {
                    bdf,
                    nvlinks: None,
                    ..Default::default()
                });
                continue;
            }
            if let Some((k, v)) = t.split_once(" : ").or_else(|| t.split_once(':'))
                && k.trim() == "Driver Version"
                && driver.is_none()
            {
                *driver = Some(v.trim().to_string()).filter(|v| !v.is_empty() && v != "N/A");
            }
            // Anything else at the left margin (the next command, "Attached GPUs") ends a block.
            if !t.starts_with("Attached GPUs") {
                push(cur.take(), gpus);
            }
            continue;
        }
        let Some(g) = cur.as_mut() else { continue };
        while groups.last().is_some_and(|(i, _)| *i >= indent) {
            groups.pop();
        }
        let Some((k, v)) = t.split_once(':') else {
            groups.push((indent, t.to_string()));
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if v.is_empty() && !t.contains(" : ") {
            groups.push((indent, k.to_string()));
            continue;
        }
        let known = |v: &str| (!v.is_empty() && v != "N/A").then(|| v.to_string());
        let group = groups.last().map(|(_, g)| g.as_str());
        match (group, k) {
            (None, "Product Name") => g.name = known(v),
            (None, "GPU UUID") => g.uuid = known(v),
            (None, "Serial Number") => g.serial = known(v),
            (None, "Persistence Mode") => g.persistence_mode = enabled(v),
            (Some("FB Memory Usage"), "Total") => g.memory_total_bytes = bytes(v),
            (Some("BAR1 Memory Usage"), "Total") => g.bar1_total_bytes = bytes(v),
            // "Ecc Mode" before driver 450, "ECC Mode" after.
            (Some(grp), "Current") if grp.eq_ignore_ascii_case("ECC Mode") => {
                g.ecc_enabled = enabled(v)
            }
            _ => {}
        }
    }
    push(cur.take(), gpus);
}

fn enabled(v: &str) -> Option<bool> {
    match v {
        "Enabled" => Some(true),
        "Disabled" => Some(false),
        _ => None,
    }
}

/// `81559 MiB` -> bytes.
fn bytes(v: &str) -> Option<u64> {
    let mut w = v.split_whitespace();
    let n: u64 = w.next()?.parse().ok()?;
    let mult: u64 = match w.next()? {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LOG: &str = include_str!("../../fixtures/records/bugreport-gp108m/nvidia-bug-report.log");

    fn bdf(s: &str) -> Bdf {
        s.parse().unwrap()
    }

    #[test]
    fn sniffs() {
        assert!(looks_like(LOG));
        assert!(!looks_like("00:00.0 Host bridge: Intel\n"));
        assert!(!lspci::looks_like(
            LOG.lines().take(3).collect::<Vec<_>>().join("\n").as_str()
        ));
    }

    #[test]
    fn reads_the_sections() {
        let r = parse(LOG).unwrap();
        assert_eq!(r.format, Format::BugReport);
        // lspci: the real GP108M listing (4 functions), parents from the bridges.
        assert_eq!(r.functions.len(), 4);
        let gpu = r
            .functions
            .iter()
            .find(|f| f.bdf == bdf("0000:02:00.0"))
            .unwrap();
        assert_eq!(gpu.parent, Some(bdf("0000:00:1c.0")));
        assert_eq!(gpu.config.as_ref().map(Vec::len), Some(4096));
        assert_eq!(
            gpu.numa_node,
            Some(-1),
            "from the NUMA section's sysfs file"
        );
        assert_eq!(gpu.local_cpulist.as_deref(), Some("0-7"));
        // Kernel files as the kernel shows them.
        assert_eq!(
            r.kernel_files.get("/proc/cmdline").map(String::as_str),
            Some("BOOT_IMAGE=/boot/vmlinuz-5.4.0-31-generic root=UUID=0 ro quiet splash\n")
        );
        assert!(
            r.kernel_files["/proc/driver/nvidia/params"]
                .starts_with("ResmanDebugLevel: 4294967295\n")
        );
        assert!(r.kernel_files["/proc/modules"].contains("nvidia_uvm "));
        assert!(!r.kernel_files.contains_key("/proc/version"));
        assert_eq!(r.driver_version.as_deref(), Some("440.82"));
        assert_eq!(r.hostname.as_deref(), Some("laptop"));
        // numactl -H
        let numa = r.numa.as_ref().unwrap();
        assert_eq!(numa.len(), 1);
        assert_eq!(numa[0].cpulist.as_deref(), Some("0-7"));
        assert_eq!(numa[0].distance.as_deref(), Some("10"));
        // nvidia-smi --query
        assert_eq!(r.gpus.len(), 1);
        let g = &r.gpus[0];
        assert_eq!(g.bdf, bdf("0000:02:00.0"));
        assert_eq!(g.name.as_deref(), Some("GeForce MX150"));
        assert_eq!(
            g.uuid.as_deref(),
            Some("GPU-0e4f6a3c-5f6d-2b1e-7a34-9b8c1d2e3f40")
        );
        assert_eq!(g.serial, None);
        assert_eq!(g.memory_total_bytes, Some(2002 << 20));
        assert_eq!(g.bar1_total_bytes, Some(256 << 20));
        assert_eq!(g.persistence_mode, Some(false));
        assert_eq!(g.ecc_enabled, None);
        assert_eq!(g.nvlinks, None);
        // Kernel log: dmesg plus the earlier boot's Xid the journal scan shows.
        let k = r.kernel_messages.as_ref().unwrap();
        let xids: Vec<&String> = k.iter().filter(|l| l.contains("NVRM: Xid")).collect();
        assert_eq!(xids.len(), 2, "{xids:?}");
        assert!(
            k.iter()
                .any(|l| l.contains("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  440.82"))
        );
    }

    #[test]
    fn without_lspci_is_an_error() {
        let log = "____________________________________________\n\nStart of NVIDIA bug report log file.\n\n____________________________________________\n\n*** /proc/cmdline\n*** ls: -r--r--r-- 1 root root 0 x /proc/cmdline\nquiet\n\n";
        assert_eq!(
            parse(log),
            Err(RecordError::Malformed(
                "no lspci section in this nvidia-bug-report log".into()
            ))
        );
    }

    #[test]
    fn driver_version_from_proc() {
        assert_eq!(
            proc_version_driver("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version: gcc\n").as_deref(),
            Some("535.104.05")
        );
        assert_eq!(
            proc_version_driver("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n").as_deref(),
            Some("570.86.15")
        );
        assert_eq!(bytes("65536 MiB"), Some(65536u64 << 20));
        assert_eq!(bytes("N/A"), None);
    }

    proptest! {
        #[test]
        fn never_panics(s in "(?s).{0,400}") {
            let _ = looks_like(&s);
            let _ = parse(&s);
        }

        #[test]
        fn never_panics_on_section_shaped_noise(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("____________________________________________".to_string()),
                    Just("/usr/bin/lspci -nnDvvvxxxx".to_string()),
                    Just("/usr/bin/numactl -H".to_string()),
                    Just("/usr/bin/nvidia-smi --query".to_string()),
                    Just("dmesg:".to_string()),
                    "\\*\\*\\* /proc/[a-z/]{0,20}",
                    "(node [0-9]{1,3} cpus:( [0-9]{1,4}){0,5}|node( +[0-9]){1,3}|  [0-9]:( +[0-9]{2}){1,3})",
                    "(GPU 0000:[0-9a-f]{2}:00.0|    [A-Za-z ]{1,20} *: [ -~]{0,20}|        Total *: [0-9]{1,12} [KMG]iB)",
                    "[0-9a-f]{2}:[0-9a-f]{2}\\.[0-9] [A-Za-z ]{0,12}: [ -~]{0,30}",
                    "[ -~]{0,40}",
                ],
                0..60,
            )
        ) {
            let _ = parse(&parts.join("\n"));
        }
    }
}
