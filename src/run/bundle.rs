//! `gpudoctor bundle`: discovery, capture, write, then replay the bundle just written and warn
//! where it reads differently from what was seen live.

use super::check::{check_report_from, topo_report_from};
use super::{DISCOVERY_DEADLINE, EXIT_OK, Outcome, with_deadline_of};
use crate::bundle;
use crate::config::{CheckOptions, Redaction};
use crate::source::{Source, SourceSpec};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// The reports a bundle stores (and its self-replay compares): topo and a level-0 check.
fn stored_reports(source: &Source) -> Result<BTreeMap<String, serde_json::Value>> {
    let mut reports = BTreeMap::new();
    let topo = topo_report_from(source)?;
    reports.insert(
        "topo".to_string(),
        serde_json::to_value(&topo).context("serializing the topo report")?,
    );
    let check = check_report_from(source, &CheckOptions::level0())?;
    reports.insert(
        "check".to_string(),
        serde_json::to_value(&check).context("serializing the check report")?,
    );
    Ok(reports)
}

pub(super) fn make(
    spec: &SourceSpec,
    output: &Path,
    redaction: Redaction,
    progress: bool,
) -> Result<Outcome> {
    let t0 = std::time::Instant::now();
    // Refused before any work: a device node, FIFO, directory or symlink at the output.
    bundle::write::check_output(output)?;
    let source = Source::open(spec)?;
    let reports = stored_reports(&source)?;
    let sr = &source.sysroot;
    // What discovery read, before the capture reads more through the same reader.
    let touched = sr.touched();
    let listed = sr.listed();
    let opts = bundle::write::Options {
        redact: redaction != Redaction::Off,
        redact_key: match redaction {
            Redaction::SiteKey(k) => Some(k),
            Redaction::Off | Redaction::RandomKey => None,
        },
        progress,
        source: if sr.is_live() {
            "live"
        } else {
            "recorded tree"
        }
        .to_string(),
        notes: Vec::new(),
    };
    let mut extra = BTreeMap::new();
    extra.insert(
        "libs.json".to_string(),
        serde_json::to_value(&source.libs).context("serializing libs.json")?,
    );
    extra.insert(
        "kmsg.json".to_string(),
        serde_json::to_value(&*source.kernel_log()).context("serializing kmsg.json")?,
    );
    // The capture reads more than discovery did (full config space, GID tables...): the same
    // deadline guards it against a device that stops answering.
    let (reader, nvml, out) = (source.sysroot.clone(), source.nvml()?, output.to_path_buf());
    let watched = source.sysroot.clone();
    let written = with_deadline_of(
        "the bundle capture",
        DISCOVERY_DEADLINE,
        move || {
            let discovery = bundle::write::Discovery {
                touched: &touched,
                listed: &listed,
            };
            bundle::write::write_bundle(&reader, &nvml, extra, reports, discovery, &out, &opts)
        },
        move || super::Stall::of(&watched),
    );
    // On a deadline the worker is abandoned with its partial file registered: main removes it
    // before exiting (the output itself was never touched).
    let w = written?.with_context(|| format!("writing {}", output.display()))?;
    let elapsed = t0.elapsed();
    let mut warnings = Vec::new();
    if !w.manifest.uncovered.is_empty() {
        let msg = format!(
            "discovery read {} the capture list does not cover (add a pattern to CAPTURE in src/bundle/capture.rs): {}",
            crate::render::layout::count(w.manifest.uncovered.len(), "path", "paths"),
            w.manifest.uncovered.join(", ")
        );
        if cfg!(debug_assertions) {
            let _ = std::fs::remove_file(output);
            anyhow::bail!("{msg}");
        }
        warnings.push(msg);
    }
    if let Some((p, t)) = w.clamped_links.first() {
        // A damaged or hostile tree, not a gpudoctor bug: the bundle says so in its notes.
        warnings.push(format!(
            "{} symlink(s) of the recorded tree climb above its root (first: {p} -> {}): the bundle records them leading where gpudoctor read them, inside the tree",
            w.clamped_links.len(),
            t.chars().take(120).collect::<String>()
        ));
    }
    // Replay what was just written; only where the data came from may differ.
    // From our own file: another run may have renamed its bundle over the path since.
    let mine = w
        .file
        .try_clone()
        .with_context(|| format!("reading {}", output.display()))?;
    match Source::open_bundle_file(mine, output).and_then(|s| stored_reports(&s)) {
        Ok(replayed) => {
            for (command, stored) in &w.reports {
                let mut stored = stored.clone();
                let mut again = replayed.get(command).cloned().unwrap_or_default();
                if let Some(diff) = bundle::first_difference(&mut stored, &mut again) {
                    warnings.push(format!(
                        "the bundle's {command} report replays differently from the live run at {diff}: please report this"
                    ));
                }
            }
        }
        // A bundle that does not replay is no bundle: removed (while the path still holds
        // the file written here), and the run fails.
        Err(e) => {
            use std::os::unix::fs::MetadataExt;
            let ours = |m: &std::fs::Metadata| (m.dev(), m.ino());
            if let (Ok(a), Ok(b)) = (w.file.metadata(), std::fs::symlink_metadata(output))
                && ours(&a) == ours(&b)
            {
                let _ = std::fs::remove_file(output);
            }
            anyhow::bail!(
                "the bundle just written to {} does not replay, removed: {e:#}",
                output.display()
            );
        }
    }
    // Warnings go to stderr as they are found in other commands too; the summary is stdout.
    for w in &warnings {
        // Never a panic: stderr may be a closed pipe.
        let _ = writeln!(
            std::io::stderr(),
            "gpudoctor: warning: {}",
            w.replace('\n', " ")
        );
    }
    Ok(Outcome::new(
        crate::render::bundle_summary(output, &w, elapsed),
        EXIT_OK,
    ))
}
