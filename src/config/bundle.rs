//! `gpudoctor bundle`, resolved: how identifiers are redacted (the site key read and checked).

use super::{Action, Env};
use crate::bundle::redact::SiteKey;
use crate::cli::{BundleArgs, SourceArgs};
use anyhow::{Context, Result};

/// How a bundle redacts identifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redaction {
    /// `--no-redact`.
    Off,
    /// A fresh random key per bundle (the default).
    RandomKey,
    /// A site's own key (`--redact-key-file`).
    SiteKey(SiteKey),
}

pub(super) fn resolve(b: BundleArgs, env: &Env) -> Result<(Option<SourceArgs>, Action)> {
    let redact = match (b.no_redact, &b.redact_key_file) {
        (true, _) => Redaction::Off,
        (false, None) => Redaction::RandomKey,
        (false, Some(f)) => {
            // A regular file only, capped (a key is a line): never a FIFO or /dev/zero.
            let bytes = crate::bundle::read::read_regular(f, 64 << 10).with_context(|| {
                format!("--redact-key-file {}: cannot read the key", f.display())
            })?;
            let text = String::from_utf8(bytes).with_context(|| {
                format!(
                    "--redact-key-file {}: cannot read the key: not UTF-8",
                    f.display()
                )
            })?;
            Redaction::SiteKey(
                SiteKey::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--redact-key-file {}: {e}", f.display()))?,
            )
        }
    };
    Ok((
        Some(b.source),
        Action::Bundle {
            output: b.output,
            redact,
            progress: env.stderr_is_terminal,
        },
    ))
}
