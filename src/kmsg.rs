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
    /// The syslog facility (`PRI >> 3`): 0 is the kernel's own; a record a process wrote to
    /// `/dev/kmsg` carries another (the kernel turns facility 0 into LOG_USER for them, see
    /// `devkmsg_write` in kernel/printk/printk.c), so it can never pass as the kernel's.
    pub facility: u32,
    pub seq: Option<u64>,
    pub usec: Option<u64>,
    pub text: &'a str,
}

impl Record<'_> {
    /// Printed by the kernel (a driver), not written to /dev/kmsg by a process.
    pub fn from_kernel(&self) -> bool {
        self.facility == 0
    }
}

/// Split a `/dev/kmsg` record (`6,1234,5678901,-;text`); None for continuation lines
/// (dictionary entries start with a space) or anything else.
pub fn record(line: &str) -> Option<Record<'_>> {
    let (head, text) = line.split_once(';')?;
    let mut f = head.split(',');
    let pri: u32 = f.next()?.trim().parse().ok()?;
    let seq = f.next().and_then(|s| s.parse().ok());
    let usec = f.next().and_then(|s| s.parse().ok());
    Some(Record {
        facility: pri >> 3,
        seq,
        usec,
        text,
    })
}

/// A record of the kernel's own, by its text: the `/dev/kmsg` records whose facility is not
/// the kernel's are dropped here, whatever their text.
fn kernel_text(line: &str) -> Option<Record<'_>> {
    record(line).filter(Record::from_kernel)
}

/// A PCI address as NVRM prints it in an Xid (`%04x:%02x:%02x`: domain, bus, device; some
/// drivers add `.function`): hex digits only, so that nothing else (a segfault record's
/// `comm[pid]: ...` continuing into a file name) passes as one.
fn nvrm_pci(s: &str) -> bool {
    let mut parts = s.split(':');
    let ok = |p: Option<&str>, min: usize, max: usize| {
        p.is_some_and(|p| {
            (min..=max).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit())
        })
    };
    let (dom, bus, dev) = (parts.next(), parts.next(), parts.next());
    if parts.next().is_some() {
        return false;
    }
    let (dev, func) = match dev.and_then(|d| d.split_once('.')) {
        Some((d, f)) => (Some(d), Some(f)),
        None => (dev, None),
    };
    ok(dom, 4, 8) && ok(bus, 2, 2) && ok(dev, 2, 2) && func.is_none_or(|f| ok(Some(f), 1, 1))
}

/// An NVRM Xid line: `NVRM: Xid (PCI:0000:65:00): 79, pid='<unknown>', name=<unknown>, GPU
/// has fallen off the bus.` (the form of NVIDIA's Xid documentation and driver 450-570 logs).
/// The nvidia module prints it at the start of the message, as the kernel's own record; text
/// that merely contains it (a user's segfault record names the file of the mapping, which the
/// user picks) is not one.
pub fn xid(line: &str) -> Option<Xid> {
    let r = kernel_text(line)?;
    let text = r.text.strip_prefix("NVRM: ")?;
    let rest = text.strip_prefix("Xid (")?;
    let (inside, after) = rest.split_once("): ")?;
    let pci = inside.strip_prefix("PCI:").unwrap_or(inside);
    if !nvrm_pci(pci) {
        return None;
    }
    let digits = after.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || !matches!(after.as_bytes().get(digits), None | Some(b',')) {
        return None;
    }
    let code = after[..digits].parse().ok()?;
    Some(Xid {
        pci: pci.to_ascii_lowercase(),
        code,
        usec: r.usec,
        text: text.to_string(),
    })
}

/// A network interface name as the kernel allows it (at most 15 bytes, no `/`, `:` or
/// whitespace); brackets are refused too, so a process's `comm[pid]` is never one.
fn netdev_name(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'@'))
}

/// A PCI function as `dev_name()` prints it (`0000:c2:00.1`).
fn pci_function(s: &str) -> bool {
    s.contains('.') && nvrm_pci(s)
}

/// A network link-down message, as drivers print them at the start of the kernel's record:
/// `netdev_info()`'s `<driver> <PCI function> <netdev>: Link down` (mlx5e_update_carrier in
/// drivers/net/ethernet/mellanox/mlx5/core/en_main.c), `<netdev>: Link down` where the netdev
/// has no parent device, `<netdev>: Lost carrier`, and `... NIC Link is Down` (Intel drivers)
/// / IPoIB's `link is down`. The message must end there: a user's segfault record (`comm[pid]:
/// segfault at ... in <file name>[addr+len]`) ends with the mapping's address, whatever file
/// name it names, and a record a process wrote to /dev/kmsg is not the kernel's. Returns the
/// text.
pub fn link_down(line: &str) -> Option<&str> {
    let r = kernel_text(line)?;
    let (prefix, message) = r.text.split_once(": ")?;
    let words: Vec<&str> = prefix.split(' ').collect();
    let prefix_ok = match words.as_slice() {
        [netdev] => netdev_name(netdev),
        [driver, function] => netdev_name(driver) && pci_function(function),
        [driver, function, netdev] => {
            netdev_name(driver) && pci_function(function) && netdev_name(netdev)
        }
        _ => false,
    };
    let m = message.trim_end().to_ascii_lowercase();
    let down = ["link down", "lost carrier", "link is down"]
        .iter()
        .any(|p| m == *p || m.ends_with(&format!(" {p}")));
    (prefix_ok && down && !m.contains(": ")).then_some(r.text)
}

/// A kernel message of a log in another format as a `/dev/kmsg` record. dmesg's
/// `[  12.345678] text` keeps its time (dmesg prints user-space records too, without their
/// facility: only the message's form tells them apart there); a syslog or journal line
/// (`May 21 17:31:40 host kernel: text`, or ISO time first) is the kernel's only when its tag
/// is `kernel`, and any other tag (`someprog[42]: text`) is a user record (facility LOG_USER).
pub fn from_log_line(seq: usize, line: &str) -> String {
    const USER_INFO: u32 = (1 << 3) | 6;
    if record(line).is_some() {
        return line.to_string();
    }
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('[')
        && let Some((ts, text)) = rest.split_once(']')
    {
        let usec = ts
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map_or(0, |s| (s * 1e6) as u64);
        return format!("6,{seq},{usec},-;{}", text.trim_start());
    }
    if let Some((tag, text)) = syslog_tag(t) {
        let pri = if tag == "kernel" { 6 } else { USER_INFO };
        return format!("{pri},{seq},0,-;{text}");
    }
    format!("6,{seq},0,-;{t}")
}

/// A syslog or `journalctl` line's tag and message: `Mon DD HH:MM:SS host tag: message` or
/// `2024-05-21T17:31:40+0000 host tag: message`.
fn syslog_tag(t: &str) -> Option<(&str, &str)> {
    let mut rest = t;
    let mut word = || -> Option<&str> {
        let s = rest.trim_start();
        let end = s.find(' ').unwrap_or(s.len());
        let (w, r) = s.split_at(end);
        rest = r;
        (!w.is_empty()).then_some(w)
    };
    let first = word()?;
    let timed = if first.len() == 3 && first.bytes().all(|b| b.is_ascii_alphabetic()) {
        let day = word()?;
        let time = word()?;
        day.bytes().all(|b| b.is_ascii_digit()) && time.bytes().filter(|b| *b == b':').count() == 2
    } else {
        first.len() >= 19 && first.as_bytes()[4] == b'-' && first.as_bytes()[10] == b'T'
    };
    if !timed {
        return None;
    }
    let _host = word()?;
    let tag = word()?.strip_suffix(':')?;
    let tag = tag.split('[').next().unwrap_or(tag);
    Some((tag, rest.strip_prefix(' ').unwrap_or(rest)))
}

/// A reader of the kernel log buffer through syslog(2), as `dmesg --syslog --raw` prints it.
type SyslogReader = fn() -> Result<String, String>;

/// The whole kernel log buffer through syslog(2) (`klogctl(SYSLOG_ACTION_READ_ALL)`: reads
/// without consuming, as `dmesg` does): one `<PRI>[SEC.USEC] text` line per record. Not a file,
/// so not through the re-rootable reader: only ever called for the live root.
fn read_syslog() -> Result<String, String> {
    const SYSLOG_ACTION_READ_ALL: libc::c_int = 3;
    const SYSLOG_ACTION_SIZE_BUFFER: libc::c_int = 10;
    // SAFETY: SIZE_BUFFER takes no buffer (a null pointer and length 0 are what the kernel
    // expects) and returns the ring buffer's size or -1.
    let size = unsafe { libc::klogctl(SYSLOG_ACTION_SIZE_BUFFER, std::ptr::null_mut(), 0) };
    if size < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // The buffer is at most 2^25 bytes (CONFIG_LOG_BUF_SHIFT <= 25); never more than 64 MiB.
    let mut buf = vec![0u8; (size as usize).clamp(4096, 64 << 20)];
    // SAFETY: `buf` is a live, writable allocation of `buf.len()` bytes for the whole call;
    // READ_ALL writes at most that many bytes and returns how many it wrote, or -1.
    let n = unsafe {
        libc::klogctl(
            SYSLOG_ACTION_READ_ALL,
            buf.as_mut_ptr().cast(),
            buf.len() as libc::c_int,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    buf.truncate(n as usize);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// A syslog(2) line (`<PRI>[SEC.USEC] text`, or `<PRI>text` without printk times) as a
/// `/dev/kmsg` record with an empty sequence number (syslog(2) gives none). The PRI keeps the
/// facility, so a record a process wrote is still not the kernel's. None for anything else.
pub fn from_syslog_line(line: &str) -> Option<String> {
    let rest = line.strip_prefix('<')?;
    let (pri, rest) = rest.split_once('>')?;
    let pri: u32 = pri.parse().ok()?;
    let (usec, text) = match rest.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((ts, text)) => {
            let (sec, frac) = ts.trim().split_once('.')?;
            let sec: u64 = sec.parse().ok()?;
            let frac = format!("{frac:0<6}");
            let micros: u64 = frac.get(..6)?.parse().ok()?;
            (
                sec.checked_mul(1_000_000)?.checked_add(micros)?.to_string(),
                text.strip_prefix(' ').unwrap_or(text),
            )
        }
        None => (String::new(), rest),
    };
    Some(format!("{pri},,{usec},-;{text}"))
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

    /// Read the live kernel log (through `sr`, which is the live root). Where /dev/kmsg cannot
    /// be opened (a container the runtime passes no such device, or a device cgroup that
    /// refuses it) and `sr` is the live root, the same buffer is read with syslog(2) instead,
    /// which needs CAP_SYSLOG only (`syslog_fallback`); both failing leaves the log unknown with
    /// both reasons.
    pub fn collect(sr: &SysRoot) -> Self {
        Self::collect_with(sr, sr.is_live().then_some(read_syslog as SyslogReader))
    }

    /// `collect`, with the syslog(2) reader to fall back on (None: no fallback; tests pass
    /// their own).
    fn collect_with(sr: &SysRoot, syslog: Option<SyslogReader>) -> Self {
        let mut k = KernelLog {
            schema: SCHEMA.into(),
            source: format!("live {KMSG}"),
            ..Default::default()
        };
        match sr.read_records(KMSG, MAX_RECORDS) {
            Ok((records, truncated)) => {
                k.truncated = truncated;
                k.take(&records);
            }
            Err(e) => {
                let denied = matches!(e, ReadError::PermissionDenied(_));
                match syslog.map(|read| read()) {
                    Some(Ok(text)) => {
                        k.source = format!("live syslog(2) ({KMSG}: {e})");
                        let records: Vec<String> = text
                            .lines()
                            .take(MAX_RECORDS)
                            .filter_map(from_syslog_line)
                            .collect();
                        k.truncated = text.lines().nth(MAX_RECORDS).is_some();
                        k.take(&records);
                        // syslog(2) gives no sequence numbers: the buffer reaches back to boot
                        // when its first record is at time 0.
                        k.first_seq = records
                            .first()
                            .and_then(|l| record(l))
                            .and_then(|r| (r.usec == Some(0)).then_some(0));
                    }
                    Some(Err(why)) => {
                        k.needs_root = denied || why.contains("not permitted");
                        k.unavailable = Some(format!(
                            "{e}; syslog(2): {why}: reading the kernel log needs root (or CAP_SYSLOG) where kernel.dmesg_restrict=1"
                        ));
                    }
                    None => {
                        k.needs_root = denied;
                        k.unavailable = Some(if denied {
                            format!(
                                "{e}: reading the kernel log needs root (or CAP_SYSLOG) where kernel.dmesg_restrict=1"
                            )
                        } else {
                            e.to_string()
                        });
                    }
                }
            }
        }
        k
    }

    /// Count the records, note the first one's sequence number and keep the ones the checks
    /// look at.
    fn take(&mut self, records: &[String]) {
        let mut read = 0u64;
        for line in records {
            let Some(r) = record(line) else { continue };
            read += 1;
            if self.first_seq.is_none() {
                self.first_seq = r.seq;
            }
            if kept(line) {
                self.lines.push(line.clone());
            }
        }
        self.records_read = read;
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

    /// What a user controls never passes as the kernel's: the file name and command name of a
    /// segfault record, and records a process wrote to /dev/kmsg (facility not 0).
    #[test]
    fn kmsg_forged_records_are_not_the_drivers() {
        let segv =
            "6,1,1,-;a.out[42]: segfault at 0 ip 0000000000401000 sp 00007ffc00000000 error 4 in";
        assert!(
            xid(&format!(
                "{segv} NVRM: Xid (PCI:0000:65:00): 79, x[401000+1000]"
            ))
            .is_none()
        );
        assert!(xid("6,1,1,-;NVRM: Xid (PCI:[42]: segfault at 0 ip 0 sp 0 error 4 in 0000:65:00): 79, x[1+2]").is_none());
        assert!(
            xid("14,1,1,-;NVRM: Xid (PCI:0000:65:00): 79, GPU has fallen off the bus.").is_none()
        );
        assert!(xid("3,1,1,-;NVRM: Xid (PCI:0000:65:00): 79x").is_none());
        assert!(link_down(&format!("{segv} x ibp24s0 link down[401000+1000]")).is_none());
        assert!(
            link_down(&format!(
                "{segv} mlx5_core 0000:c2:00.0 ib0: Link down[1+2]"
            ))
            .is_none()
        );
        assert!(link_down("6,1,1,-;ib0: Link down[42]: segfault at 0 ip 0 sp 0 error 4").is_none());
        assert!(link_down("14,1,1,-;mlx5_core 0000:c2:00.0 enp194s0f0np0: Link down").is_none());
        assert!(link_down("6,1,1,-;x ibp24s0 link down").is_none());
        assert!(link_down("6,1,1,-;mlx5_core 0000:c2:00.0: Link down").is_some());
        assert!(link_down("6,1,1,-;i40e 0000:3b:00.0 eth0: NIC Link is Down").is_some());
    }

    #[test]
    fn kmsg_log_lines_of_other_formats() {
        let k = from_log_line(
            3,
            "May 21 17:31:40 laptop kernel: NVRM: Xid (PCI:0000:02:00): 79, off the bus",
        );
        assert_eq!(xid(&k).map(|x| x.code), Some(79));
        let u = from_log_line(
            4,
            "May 21 17:31:40 laptop evil[42]: NVRM: Xid (PCI:0000:02:00): 79, off the bus",
        );
        assert!(xid(&u).is_none(), "{u}");
        let iso = from_log_line(
            5,
            "2024-05-21T17:31:40+0000 laptop kernel: NVRM: Xid (PCI:0000:02:00): 13, x",
        );
        assert_eq!(xid(&iso).map(|x| x.code), Some(13));
        let d = from_log_line(
            6,
            "[ 1772.511204] NVRM: Xid (PCI:0000:02:00): 79, off the bus",
        );
        assert_eq!(xid(&d).and_then(|x| x.usec), Some(1_772_511_204));
        assert!(xid(&from_log_line(7, "[ 1.0] a.out[1]: segfault at 0 ip 0 sp 0 error 4 in NVRM: Xid (PCI:0000:02:00): 79, x[1+2]")).is_none());
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
        fn parsers_never_panic(line in ".{0,200}", code in 0u32..1000, pci in "[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}") {
            let _ = record(&line);
            let _ = link_down(&line);
            let _ = xid(&line);
            let _ = from_log_line(0, &line);
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
        // No /dev/kmsg (a container's): the same buffer through syslog(2), the facility kept.
        let syslog = || -> Result<String, String> {
            Ok("<6>[    0.000000] Linux version 6.8\n\
                <4>[  912.345678] NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.\n\
                <14>[  913.000001] NVRM: Xid (PCI:0000:01:00): 79, written by a process\n"
                .replace("                ", ""))
        };
        let k = KernelLog::collect_with(&sr, Some(syslog));
        assert!(k.unavailable.is_none(), "{k:?}");
        assert!(k.source.starts_with("live syslog(2)"), "{}", k.source);
        assert_eq!((k.records_read, k.first_seq), (3, Some(0)));
        let xids = k.xids();
        assert_eq!(
            xids.len(),
            1,
            "the process's record is not the kernel's: {xids:?}"
        );
        assert_eq!((xids[0].code, xids[0].usec), (79, Some(912_345_678)));
        // syslog(2) refused too: unknown with both reasons, needing root.
        let refused = || -> Result<String, String> { Err("Operation not permitted".into()) };
        let k = KernelLog::collect_with(&sr, Some(refused));
        assert!(k.needs_root && k.lines.is_empty(), "{k:?}");
        assert!(
            k.unavailable
                .unwrap()
                .contains("syslog(2): Operation not permitted")
        );
    }

    #[test]
    fn syslog_lines_as_kmsg_records() {
        assert_eq!(
            from_syslog_line("<3>[   12.5] NVRM: Xid 79").as_deref(),
            Some("3,,12500000,-;NVRM: Xid 79")
        );
        assert_eq!(
            from_syslog_line("<6>no time").as_deref(),
            Some("6,,,-;no time")
        );
        for bad in ["", "no pri", "<x>[1.0] t", "<6>[abc] t", "<6>[1.0x] t"] {
            assert_eq!(from_syslog_line(bad), None, "{bad:?}");
        }
    }
}
