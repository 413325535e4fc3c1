//! The kernel log since boot, as far as the checks need it: NVRM Xid events (`gpu.xid`) and
//! network link-down messages (`rdma.link-flaps`). Recorded as `kmsg.json` in a tree or bundle.
//!
//! Live, the records are read from `/dev/kmsg` through the one re-rootable reader, without
//! blocking (`SysRoot::read_records`: until EAGAIN). Only the records the checks look at are
//! kept (a whole kernel log is megabytes and full of host details), with the count of all
//! records read and the first sequence number (above 0: the ring buffer wrapped, older records
//! are gone). A log that could not be read (not root with `kernel.dmesg_restrict=1`) is recorded
//! with the reason, never as an empty log; a tree without kmsg.json is "not recorded".
//!
//! This module parses; it must not judge (that is `checks`) and must not read anything but
//! through `SysRoot`.

use crate::sysroot::{ReadError, SysRoot};
use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "gpudoctor.kmsg/1";

/// The kernel log device.
pub const KMSG: &str = "/dev/kmsg";

/// How a record in another format's kernel messages name their origin (`source`).
pub const RECORD_ORIGIN: &str = "kernel messages of ";

/// At most this many records are read (a kernel log buffer of 16 MiB holds ~150,000).
const MAX_RECORDS: usize = 500_000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelLog {
    pub schema: String,
    /// "live /dev/kmsg", "synthetic", ...
    pub source: String,
    /// Set when the log could not be read (or was not recorded): why.
    pub unavailable: Option<String>,
    /// The read was refused for lack of privilege (CAP_SYSLOG with `kernel.dmesg_restrict=1`).
    pub needs_root: bool,
    /// How many records were read in all.
    pub records_read: u64,
    /// Sequence number of the first record read: above 0 means the ring buffer wrapped and the
    /// oldest records since boot are gone.
    pub first_seq: Option<u64>,
    /// The reader stopped at its limit.
    pub truncated: bool,
    /// The records the checks look at, in `/dev/kmsg` form (`PRI,SEQ,USEC,FLAGS;TEXT`).
    pub lines: Vec<String>,
}

/// One NVRM Xid event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    /// The PCI address NVRM names, lowercase (`0000:65:00`: domain, bus, device; no function).
    pub pci: String,
    pub code: u32,
    /// Microseconds since boot.
    pub usec: Option<u64>,
    /// The message text after `NVRM: `.
    pub text: String,
}

/// A record split into its header and text.
pub struct Record<'a> {
    pub seq: Option<u64>,
    pub usec: Option<u64>,
    pub text: &'a str,
}

/// Split a `/dev/kmsg` record (`6,1234,5678901,-;text`); None for continuation lines
/// (dictionary entries start with a space) or anything else.
pub fn record(line: &str) -> Option<Record<'_>> {
    let (head, text) = line.split_once(';')?;
    let mut f = head.split(',');
    let _pri: u32 = f.next()?.trim().parse().ok()?;
    let seq = f.next().and_then(|s| s.parse().ok());
    let usec = f.next().and_then(|s| s.parse().ok());
    Some(Record { seq, usec, text })
}

/// An NVRM Xid line: `NVRM: Xid (PCI:0000:65:00): 79, pid='<unknown>', name=<unknown>, GPU
/// has fallen off the bus.` (the form of NVIDIA's Xid documentation and driver 450-570 logs).
pub fn xid(line: &str) -> Option<Xid> {
    let r = record(line)?;
    let at = r.text.find("NVRM: Xid (")?;
    let text = &r.text[at + "NVRM: ".len()..];
    let rest = &text["Xid (".len()..];
    let (inside, after) = rest.split_once("):")?;
    let pci = inside.strip_prefix("PCI:").unwrap_or(inside).trim();
    let code_str: String = after
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let code = code_str.parse().ok()?;
    Some(Xid {
        pci: pci.to_ascii_lowercase(),
        code,
        usec: r.usec,
        text: text.to_string(),
    })
}

/// A network link-down message, as drivers print them: mlx5_core's `<netdev>: Link down`,
/// the generic `<netdev>: Lost carrier` of systemd-networkd (AzNHC greps `ib.*lost carrier`)
/// and IPoIB's `<netdev>: ... link is down`. Returns the text.
pub fn link_down(line: &str) -> Option<&str> {
    let r = record(line)?;
    let t = r.text.to_ascii_lowercase();
    (t.contains("link down") || t.contains("lost carrier") || t.contains("link is down"))
        .then_some(r.text)
}

/// Whether a record is one the checks look at (what `kmsg.json` keeps).
fn kept(line: &str) -> bool {
    xid(line).is_some() || link_down(line).is_some()
}

impl KernelLog {
    /// Where the records were read, as evidence names it: `/dev/kmsg` (live, or a tree or
    /// bundle recorded from it), or the kernel messages a record in another format carries
    /// (`source` "kernel messages of an nvidia-bug-report log").
    pub fn origin(&self) -> &str {
        if self.source.starts_with(RECORD_ORIGIN) {
            &self.source
        } else {
            KMSG
        }
    }

    /// A tree or bundle that has no kmsg.json.
    pub fn not_recorded(why: &str) -> Self {
        KernelLog {
            schema: SCHEMA.into(),
            source: "recorded".into(),
            unavailable: Some(why.into()),
            ..Default::default()
        }
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let k: KernelLog = serde_json::from_slice(bytes).map_err(|e| format!("kmsg.json: {e}"))?;
        if k.schema != SCHEMA {
            return Err(format!("kmsg.json: schema '{}' is not {SCHEMA}", k.schema));
        }
        Ok(k)
    }

    /// Read the live kernel log (through `sr`, which is the live root).
    pub fn collect(sr: &SysRoot) -> Self {
        let mut k = KernelLog {
            schema: SCHEMA.into(),
            source: format!("live {KMSG}"),
            ..Default::default()
        };
        match sr.read_records(KMSG, MAX_RECORDS) {
            Ok((records, truncated)) => {
                k.truncated = truncated;
                let mut read = 0u64;
                for line in &records {
                    let Some(r) = record(line) else { continue };
                    read += 1;
                    if k.first_seq.is_none() {
                        k.first_seq = r.seq;
                    }
                    if kept(line) {
                        k.lines.push(line.clone());
                    }
                }
                k.records_read = read;
            }
            Err(e) => {
                k.needs_root = matches!(e, ReadError::PermissionDenied(_));
                k.unavailable = Some(if k.needs_root {
                    format!(
                        "{e}: reading the kernel log needs root (or CAP_SYSLOG) where kernel.dmesg_restrict=1"
                    )
                } else {
                    e.to_string()
                });
            }
        }
        k
    }

    /// The Xid events, in log order.
    pub fn xids(&self) -> Vec<Xid> {
        self.lines.iter().filter_map(|l| xid(l)).collect()
    }

    /// What the log covers, for evidence: records read and whether it reaches back to boot.
    pub fn coverage(&self) -> String {
        let mut s = format!(
            "{} read",
            crate::words::count(self.records_read as usize, "record", "records")
        );
        match self.first_seq {
            Some(0) => s.push_str(" (from boot)"),
            Some(n) => s.push_str(&format!(
                " (first sequence number {n}: the ring buffer wrapped, older records are gone)"
            )),
            None => {}
        }
        if self.truncated {
            s.push_str("; stopped at the reader's limit");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_lines_parse() {
        let x = xid("3,1234,98765432,-;NVRM: Xid (PCI:0000:65:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.").unwrap();
        assert_eq!(
            (x.pci.as_str(), x.code, x.usec),
            ("0000:65:00", 79, Some(98765432))
        );
        let x = xid(
            "4,9,1,-;NVRM: Xid (PCI:0000:1B:00): 13, pid=1234, name=python, Graphics Exception",
        )
        .unwrap();
        assert_eq!((x.pci.as_str(), x.code), ("0000:1b:00", 13));
        assert!(xid("6,1,1,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module").is_none());
        assert!(xid(" DEVICE=+pci:0000:65:00.0").is_none());
        assert!(xid("garbage;NVRM: Xid (").is_none());
        assert!(xid("3,1,1,-;NVRM: Xid (PCI:0000:65:00): abc").is_none());
    }

    #[test]
    fn link_down_lines() {
        assert!(link_down("6,5,1,-;mlx5_core 0000:c2:00.0 enp194s0f0np0: Link down").is_some());
        assert!(link_down("6,5,1,-;ib0: Lost carrier").is_some());
        assert!(link_down("6,5,1,-;mlx5_core 0000:c2:00.0 enp194s0f0np0: Link up").is_none());
    }

    #[test]
    fn old_or_foreign_documents() {
        assert!(KernelLog::from_json(br#"{"schema":"gpudoctor.kmsg/9"}"#).is_err());
        assert!(KernelLog::from_json(b"[").is_err());
        let k = KernelLog::from_json(br#"{"schema":"gpudoctor.kmsg/1","lines":["3,1,1,-;NVRM: Xid (PCI:0000:01:00): 48, DBE"]}"#).unwrap();
        assert_eq!(k.xids()[0].code, 48);
    }

    proptest::proptest! {
        /// Hostile log lines never panic the parsers; what parses as an Xid names a code that
        /// was in the line.
        #[test]
        fn parsers_never_panic(line in ".{0,200}", code in 0u32..1000, pci in "[0-9A-Fa-f:]{0,16}") {
            let _ = record(&line);
            let _ = link_down(&line);
            let _ = xid(&line);
            let l = format!("3,7,9,-;NVRM: Xid (PCI:{pci}): {code}, {line}");
            let x = xid(&l).unwrap();
            proptest::prop_assert_eq!(x.code, code);
            proptest::prop_assert_eq!(x.pci, pci.to_ascii_lowercase());
        }
    }

    #[test]
    fn records_read_from_a_file_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("sys")).unwrap();
        std::fs::create_dir_all(d.path().join("dev")).unwrap();
        let long = "x".repeat(10_000);
        std::fs::write(
            d.path().join("dev/kmsg"),
            format!("6,0,1,-;first\n6,1,2,-;{long}\n3,2,3,-;NVRM: Xid (PCI:0000:01:00): 79, off the bus\n"),
        )
        .unwrap();
        let sr = SysRoot::at(d.path()).unwrap();
        let k = KernelLog::collect(&sr);
        assert_eq!(k.records_read, 3);
        assert_eq!(k.first_seq, Some(0));
        assert_eq!(k.xids().len(), 1);
        assert!(k.unavailable.is_none());
        std::fs::remove_file(d.path().join("dev/kmsg")).unwrap();
        let k = KernelLog::collect(&sr);
        assert!(k.unavailable.is_some() && !k.needs_root);
    }
}
