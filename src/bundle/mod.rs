//! Support bundles: one `.tar.gz` holding every /sys and /proc file gpudoctor reads (the
//! capture list in `capture`), the NVML snapshot (`nvml.json`), the reports gpudoctor produced
//! (`report.json`) and `manifest.json`. Unpacked, a bundle is a recorded tree: `--root DIR`
//! reads it and every fixture under fixtures/ is one.
//!
//! This module must not collect anything outside the capture list (no environment, no files
//! named by the user other than the output) and must not write outside the output file and
//! its private temporary directory.

pub mod capture;
pub mod read;
pub mod redact;
pub mod write;

use crate::sysroot::ReadError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `format` string every manifest carries.
pub const FORMAT: &str = "gpudoctor.bundle";
/// Bumped when a change to the layout would make an older gpudoctor misread a bundle.
pub const FORMAT_VERSION: u32 = 1;
/// Schema of `report.json`.
pub const REPORTS_SCHEMA: &str = "gpudoctor.bundle-reports/1";

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{0}")]
    Io(String),
    #[error("not a gzip-compressed tar archive (a bundle is a .tar.gz made by `gpudoctor bundle`)")]
    NotGzip,
    #[error("corrupt or truncated archive: {0}")]
    Corrupt(String),
    #[error("more than {0} entries: refused (not a bundle, or a hostile one)")]
    TooManyEntries(usize),
    #[error("uncompressed contents exceed {0} MiB: refused (gzip bomb?)")]
    TooBig(u64),
    #[error("entry {0}: {1}")]
    Entry(String, String),
    #[error("no manifest.json: not a gpudoctor bundle")]
    MissingManifest,
    #[error("manifest.json: {0}")]
    BadManifest(String),
    #[error(
        "bundle format version {found} is newer than this gpudoctor reads ({FORMAT_VERSION}); it was written by gpudoctor {writer}: upgrade gpudoctor to replay it"
    )]
    Newer { found: u32, writer: String },
}

/// The kernel this was recorded on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Kernel {
    pub osrelease: Option<String>,
    pub version: Option<String>,
}

/// A path that could not be read on the recorded machine; replayed as the same error.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Unreadable {
    pub path: String,
    /// `ReadError::kind()`: permission-denied, io, too-large, link-loop...
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Contents {
    pub files: usize,
    pub links: usize,
    pub dirs: usize,
    pub file_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub gpudoctor_version: String,
    /// The source revision of the gpudoctor that wrote the bundle (empty in older bundles).
    pub gpudoctor_revision: String,
    /// UTC, RFC 3339.
    pub created: Option<String>,
    /// "gpudoctor bundle", or how a hand-made fixture was recorded.
    pub recorded_by: String,
    /// "live", or "recorded tree" when bundled from `--root`.
    pub source: String,
    pub kernel: Kernel,
    /// The hostname's token (or the name itself with --no-redact).
    pub host: Option<String>,
    /// Commands whose reports are in report.json.
    pub reports: Vec<String>,
    pub redaction: redact::RedactionRecord,
    pub unreadable: Vec<Unreadable>,
    /// Paths discovery read that the capture list does not cover (should be empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uncovered: Vec<String>,
    pub contents: Contents,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Manifest {
    pub fn from_json(bytes: &[u8]) -> Result<Manifest, BundleError> {
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| BundleError::BadManifest(e.to_string().replace('\n', " ")))?;
        m.check()?;
        Ok(m)
    }

    /// Refuse what this gpudoctor cannot read faithfully.
    pub fn check(&self) -> Result<(), BundleError> {
        if self.format != FORMAT {
            return Err(BundleError::BadManifest(format!(
                "format is '{}', expected '{FORMAT}'",
                self.format.escape_debug()
            )));
        }
        if self.format_version == 0 {
            return Err(BundleError::BadManifest(
                "format_version missing or 0".into(),
            ));
        }
        if self.format_version > FORMAT_VERSION {
            return Err(BundleError::Newer {
                found: self.format_version,
                writer: self.gpudoctor_version.escape_debug().to_string(),
            });
        }
        Ok(())
    }

    /// Recorded errors in the form `SysRoot::with_recorded_errors` takes.
    pub fn recorded_errors(&self) -> BTreeMap<String, (String, Option<String>)> {
        self.unreadable
            .iter()
            .map(|u| (u.path.clone(), (u.kind.clone(), u.detail.clone())))
            .collect()
    }
}

impl Unreadable {
    pub fn from_error(path: &str, e: &ReadError) -> Self {
        Unreadable {
            path: path.to_string(),
            kind: e.kind().to_string(),
            detail: e.detail().map(str::to_string),
        }
    }
}

/// Where two reports differ, ignoring `source` (where the data came from), as a JSON pointer;
/// None when they agree. Both values have their top-level `source` removed.
pub fn first_difference(a: &mut serde_json::Value, b: &mut serde_json::Value) -> Option<String> {
    for v in [&mut *a, &mut *b] {
        if let Some(o) = v.as_object_mut() {
            // Where and when the facts were read may differ; what was read may not.
            for k in ["source", "time", "hostname"] {
                o.remove(k);
            }
        }
    }
    diff_at(a, b, String::new())
}

fn diff_at(a: &serde_json::Value, b: &serde_json::Value, at: String) -> Option<String> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let here = format!("{at}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = diff_at(p, q, here) {
                            return Some(d);
                        }
                    }
                    _ => return Some(here),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{at} (length {} vs {})", x.len(), y.len()));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (p, q))| diff_at(p, q, format!("{at}/{i}")))
        }
        _ if a == b => None,
        _ => Some(if at.is_empty() { "/".to_string() } else { at }),
    }
}

/// UTC RFC 3339 for a Unix time (Howard Hinnant's civil-from-days; no date crate needed).
pub fn rfc3339(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_599), "2026-12-31T23:59:59Z");
    }

    #[test]
    fn manifest_versions() {
        let ok = br#"{"format":"gpudoctor.bundle","format_version":1}"#;
        assert!(Manifest::from_json(ok).is_ok());
        let newer =
            br#"{"format":"gpudoctor.bundle","format_version":2,"gpudoctor_version":"9.0.0"}"#;
        let e = Manifest::from_json(newer).unwrap_err().to_string();
        assert!(e.contains("newer") && e.contains("9.0.0"), "{e}");
        assert!(Manifest::from_json(br#"{"format":"x","format_version":1}"#).is_err());
        assert!(Manifest::from_json(br#"{"format":"gpudoctor.bundle"}"#).is_err());
        assert!(Manifest::from_json(b"[").is_err());
    }
}
