//! Silences: a finding of one check on one subject that an operator knows about and has put
//! aside (`--skip ID:SUBJECT`, or an entry of the `--expect` baseline's `silences` with a reason
//! and an expiry date). A silenced finding keeps its status, message and evidence and is shown
//! as silenced in every output; it counts toward neither the verdict, the exit code nor
//! `--fail-on-skip` (`crate::findings::overall`, `crate::report::Summary`).
//!
//! Matching is exact: the check id, and the subject as the report prints it (`0000:17:00.0`,
//! `mlx5_3/1`, `GPU3`, `host`). No globbing: a pattern that silences one dead port today
//! silences the port that dies next month too, unseen; a silence names what someone looked at.
//!
//! A silence that expired, or that matched no finding, silences nothing and is itself reported
//! (`silence.stale`, a warning), so a forgotten or misspelt silence is seen.
//!
//! This module must not read the clock or files: today's date comes from `config`.

use crate::checks::{CheckId, Finding, Status, ev};
use crate::findings::{SilenceOrigin, Silenced};

pub const ID_STALE: CheckId = CheckId::SilenceStale;

/// One silence, resolved: the check id is known to the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Silence {
    pub id: CheckId,
    pub subject: String,
    pub origin: SilenceOrigin,
    /// Required in a baseline; none on the command line.
    pub reason: Option<String>,
    /// The last day it holds (UTC, YYYY-MM-DD); required in a baseline.
    pub expires: Option<String>,
    /// Where it was written, for the report: `--skip ID:SUBJECT` or `silences[N]`.
    pub written: String,
}

impl Silence {
    /// This silence's `silence.stale` finding: on its subject, with where it was written as
    /// evidence.
    fn finding(&self, status: Status, message: String, fix: Option<String>) -> Finding {
        let f = Finding::new(ID_STALE, self.subject.clone(), status, message)
            .with(ev(&self.written, self.evidence()));
        match fix {
            Some(x) => f.fix(x),
            None => f,
        }
    }

    /// `--skip ID:SUBJECT`: no reason, no expiry (it lasts one run).
    pub fn command_line(id: CheckId, subject: &str) -> Silence {
        Silence {
            id,
            subject: subject.to_string(),
            origin: SilenceOrigin::CommandLine,
            reason: None,
            expires: None,
            written: format!("--skip {id}:{subject}"),
        }
    }

    fn marker(&self) -> Silenced {
        Silenced {
            by: self.origin,
            reason: self.reason.clone(),
            expires: self.expires.clone(),
        }
    }

    fn evidence(&self) -> String {
        let mut s = format!("check {}, subject {}", self.id, self.subject);
        if let Some(e) = &self.expires {
            s.push_str(&format!(", expires {e}"));
        }
        if let Some(r) = &self.reason {
            s.push_str(&format!(", reason: {r}"));
        }
        s
    }
}

/// A date as the baseline writes it: `YYYY-MM-DD`, a real day of the Gregorian calendar.
pub fn valid_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = &s[r];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// The UTC date of `unix_seconds` as YYYY-MM-DD (the date part of `bundle::rfc3339`).
pub fn utc_date(unix_seconds: u64) -> String {
    let mut t = crate::bundle::rfc3339(unix_seconds);
    t.truncate("YYYY-MM-DD".len());
    t
}

/// Mark the findings each silence matches, and add one `silence.stale` finding per silence: a
/// pass where it is in date and matched (the report lists every silence in force), a warning
/// where it expired (or its expiry cannot be judged: today unknown) or matched nothing.
pub fn apply(silences: &[Silence], today: Option<&str>, findings: &mut Vec<Finding>) {
    let mut stale = Vec::new();
    for s in silences {
        let expired = match (&s.expires, today) {
            (None, _) => None,
            (Some(e), Some(t)) if t <= e.as_str() => None,
            (Some(e), Some(_)) => Some(format!("expired on {e}")),
            (Some(e), None) => Some(format!(
                "expires {e}, and today's date is unknown, so it cannot be held to be in date"
            )),
        };
        if let Some(why) = expired {
            stale.push(s.finding(
                Status::Warn,
                format!(
                    "silence of {} on {} {why}: it silences nothing, and {} on {} counts again",
                    s.id, s.subject, s.id, s.subject
                ),
                Some(format!(
                    "Fix {} and delete the silence, or, if the fault is known and still tracked, set a later `expires` in the baseline",
                    s.subject
                )),
            ));
            continue;
        }
        let mut matched = 0;
        for f in findings
            .iter_mut()
            .filter(|f| f.id == s.id && f.subject == s.subject)
        {
            matched += 1;
            // The first silence that matches is the one shown.
            if f.silenced.is_none() {
                f.silenced = Some(s.marker());
            }
        }
        if matched > 0 {
            stale.push(s.finding(
                Status::Pass,
                format!(
                    "silence of {} on {} in force{}: {matched} finding{} silenced",
                    s.id,
                    s.subject,
                    s.expires
                        .as_deref()
                        .map(|e| format!(" until {e}"))
                        .unwrap_or_default(),
                    if matched == 1 { "" } else { "s" }
                ),
                None,
            ));
        } else {
            stale.push(s.finding(
                Status::Warn,
                format!(
                    "silence of {} on {} matched no finding: no finding of {} names the subject {} on this node (subjects match exactly, as the report prints them)",
                    s.id, s.subject, s.id, s.subject
                ),
                Some(format!(
                    "Write the subject as the report prints it (`gpudoctor check --json`: checks[].subject where id is {}), or delete the silence if the subject is gone",
                    s.id
                )),
            ));
        }
    }
    findings.extend(stale);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(id: CheckId, subject: &str, status: Status) -> Finding {
        Finding::new(id, subject, status, "m")
    }

    fn baseline_silence(id: CheckId, subject: &str, expires: &str) -> Silence {
        Silence {
            id,
            subject: subject.into(),
            origin: SilenceOrigin::Baseline,
            reason: Some("RMA open".into()),
            expires: Some(expires.into()),
            written: "silences[0]".into(),
        }
    }

    #[test]
    fn dates() {
        for ok in ["2026-12-31", "2024-02-29", "2000-02-29", "1999-01-01"] {
            assert!(valid_date(ok), "{ok}");
        }
        for bad in [
            "2026-13-01",
            "2026-02-29",
            "1900-02-29",
            "2026-04-31",
            "2026-1-01",
            "26-01-01",
            "2026/01/01",
            "2026-01-00",
            "+026-01-01",
            "",
        ] {
            assert!(!valid_date(bad), "{bad}");
        }
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_798_761_599), "2026-12-31");
        assert_eq!(utc_date(1_798_761_600), "2027-01-01");
    }

    #[test]
    fn a_silence_marks_only_its_subject_and_keeps_the_status() {
        let mut v = vec![
            f(CheckId::RdmaPortState, "mlx5_3/1", Status::Fail),
            f(CheckId::RdmaPortState, "mlx5_2/1", Status::Fail),
            f(CheckId::RdmaMtu, "mlx5_3/1", Status::Warn),
        ];
        let s = Silence::command_line(CheckId::RdmaPortState, "mlx5_3/1");
        apply(&[s], Some("2026-01-01"), &mut v);
        assert_eq!(v.len(), 4, "one silence in force");
        assert_eq!((v[3].id, v[3].status), (ID_STALE, Status::Pass));
        v.pop();
        assert_eq!(v[0].status, Status::Fail);
        assert_eq!(
            v[0].silenced.as_ref().unwrap().by,
            SilenceOrigin::CommandLine
        );
        assert!(v[1].silenced.is_none() && v[2].silenced.is_none());
        // The verdict leaves the silenced failure out, and only it.
        assert_eq!(crate::findings::overall(&v), Status::Fail);
        v.remove(1);
        assert_eq!(crate::findings::overall(&v), Status::Warn);
    }

    #[test]
    fn expiry_is_inclusive_and_an_unknown_today_never_silences() {
        for (today, silenced) in [
            (Some("2026-06-30"), true),
            (Some("2026-07-01"), true),
            (Some("2026-07-02"), false),
            (None, false),
        ] {
            let mut v = vec![f(CheckId::PcieAer, "0000:17:00.0", Status::Fail)];
            apply(
                &[baseline_silence(
                    CheckId::PcieAer,
                    "0000:17:00.0",
                    "2026-07-01",
                )],
                today,
                &mut v,
            );
            assert_eq!(v[0].silenced.is_some(), silenced, "{today:?}");
            assert_eq!(v.len(), 2, "{today:?}: one finding on the silence");
            assert_eq!(v[1].id, ID_STALE);
            let want = if silenced { Status::Pass } else { Status::Warn };
            assert_eq!(v[1].status, want, "{today:?}");
            if !silenced {
                assert_eq!(v[1].id, ID_STALE);
                assert_eq!(v[1].status, Status::Warn);
                assert_eq!(v[1].subject, "0000:17:00.0");
                assert!(v[1].remediation.is_some());
                assert_eq!(crate::findings::overall(&v), Status::Fail);
            }
        }
    }

    #[test]
    fn an_unmatched_silence_is_reported_and_matching_is_exact() {
        let mut v = vec![f(CheckId::PcieAer, "0000:5d:00.0", Status::Fail)];
        // Upper case, the NVML form and a prefix are other subjects.
        let ss: Vec<Silence> = ["0000:5D:00.0", "00000000:5D:00.0", "0000:5d"]
            .iter()
            .map(|s| Silence::command_line(CheckId::PcieAer, s))
            .collect();
        apply(&ss, Some("2026-01-01"), &mut v);
        assert!(v[0].silenced.is_none());
        assert_eq!(v.len(), 4);
        assert!(v[1..].iter().all(|s| s.id == ID_STALE
            && s.status == Status::Warn
            && s.message.contains("matched no finding")));
    }
}
