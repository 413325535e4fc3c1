//! A check report as JUnit XML, for CI systems that read test reports (GitLab, Jenkins,
//! GitHub test reporters): one testsuite, one testcase per finding (classname = check id,
//! name = subject). fail is a `<failure>`, skip a `<skipped>`; warn passes with the message in
//! `<system-out>`, unless --strict, where it is a `<failure>` as it is for the exit code.
//!
//! Every recorded string goes through `terminal::xml_text`: the file parses as XML 1.0
//! whatever the node recorded.
//!
//! Pure: `&CheckReport -> String`, deterministic (no timestamps, no hostnames).

use crate::findings::Status;
use crate::render::terminal::xml_text as xml_escape;
use crate::report::CheckReport;
use std::fmt::Write;

/// The report as JUnit XML. The gate (`CheckReport::gate`) is the one source of what fails:
/// under `--strict` a warning is a `<failure>`, and when the gate itself decided the verdict
/// (`--fail-on-skip` with findings that could not be judged) a `gpudoctor.gate` test case
/// fails with its reasons, so a CI reading the XML sees the exit code's verdict.
pub fn check(r: &CheckReport) -> String {
    let strict = r.gate.strict;
    // A silenced finding is a skipped test case whatever its status, its message saying so
    // and its status kept (the exit code leaves it out; CI must not read it as passed).
    let failing = |f: &crate::findings::Finding| {
        f.silenced.is_none() && (f.status == Status::Fail || (strict && f.status == Status::Warn))
    };
    let skipped_case =
        |f: &crate::findings::Finding| f.silenced.is_some() || f.status == Status::Skip;
    let gate_fails = r.gate.decided() && !r.checks.iter().any(failing);
    let failures = r.checks.iter().filter(|f| failing(f)).count() + usize::from(gate_fails);
    let skipped = r.checks.iter().filter(|f| skipped_case(f)).count();
    let tests = r.checks.len() + usize::from(gate_fails);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"gpudoctor\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\">",
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"gpudoctor check ({})\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\">",
        xml_escape(&r.source.describe()),
    );
    if gate_fails {
        let _ = writeln!(
            out,
            "    <testcase classname=\"gpudoctor.gate\" name=\"host\">\n      <failure type=\"gate\" message=\"{}\"/>\n    </testcase>",
            xml_escape(&r.gate.reasons.join("; "))
        );
    }
    for f in &r.checks {
        let _ = write!(
            out,
            "    <testcase classname=\"{}\" name=\"{}\"",
            xml_escape(f.id.as_str()),
            xml_escape(&f.subject)
        );
        let evidence: String = f
            .evidence
            .iter()
            .map(|e| format!("{}: {}\n", e.source, e.value))
            .collect();
        let fix = f
            .remediation
            .as_deref()
            .map(|x| format!("fix: {x}\n"))
            .unwrap_or_default();
        if let Some(s) = &f.silenced {
            let _ = writeln!(
                out,
                ">\n      <skipped message=\"{}\"/>\n      <system-out>{}: {}\n{}</system-out>\n    </testcase>",
                xml_escape(&format!("{} (status {})", s.describe(), f.status.as_str())),
                f.status.as_str(),
                xml_escape(&f.message),
                xml_escape(&format!("{evidence}{fix}"))
            );
        } else if failing(f) {
            let _ = writeln!(
                out,
                ">\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>",
                f.status.as_str(),
                xml_escape(&f.message),
                xml_escape(&format!("{evidence}{fix}"))
            );
        } else if f.status == Status::Skip {
            let _ = writeln!(
                out,
                ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                xml_escape(&f.message)
            );
        } else if f.status == Status::Warn {
            let _ = writeln!(
                out,
                ">\n      <system-out>warn: {}\n{}</system-out>\n    </testcase>",
                xml_escape(&f.message),
                xml_escape(&format!("{evidence}{fix}"))
            );
        } else {
            out.push_str("/>\n");
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// JUnit XML: the check report only.
pub struct Junit;

impl super::exporter::Exporter for Junit {
    fn check(&self, r: &CheckReport) -> Option<String> {
        Some(check(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(xml_escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(xml_escape("\u{1}\u{ffff}"), "\\x01\\u{ffff}");
    }
}
