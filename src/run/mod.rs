//! The edge: turns a resolved `Config` into a report, its text and an exit code. With `main`,
//! the only place that uses anyhow.
//!
//! This module must not parse arguments (`config` did), read recorded documents (`source`
//! does), format text (`render` does) or end the process (`main` does, from `Outcome`).

mod baseline;
mod budget;
mod bundle;
mod check;
pub mod exit;
mod export;
pub(crate) mod fleet;
mod nccl;
mod probe;

pub use check::{CheckError, check_report, check_report_from, topo_report, topo_report_from};
pub use exit::{EXIT_ERROR, EXIT_FAILED_CHECK, EXIT_OK};

use crate::config::{Action, CheckOptions, Config, TopoOutput, json_or_table};
use crate::export::{ExportOptions, Format, export};
use crate::inventory::{Inventory, Scope};
use crate::render;
use crate::source::Source;
use crate::sysroot::ReadError;
use anyhow::{Context, Result};

/// What a command produced.
#[derive(Debug)]
pub struct Outcome {
    pub stdout: String,
    pub code: i32,
    /// CUDA work is stuck on a worker thread that cannot be joined: `main` must leave without
    /// running exit handlers (they could wait on the hung context); the driver frees the
    /// device and pinned memory when the process goes.
    pub hung: bool,
}

impl Outcome {
    fn new(stdout: String, code: i32) -> Outcome {
        Outcome {
            stdout,
            code,
            hung: false,
        }
    }
}

/// How long discovery may take before gpudoctor gives up on a device or file system that does
/// not answer (a hung PCI device can block a read of its config space indefinitely). Real
/// machines take well under a second; a recorded tree is faster still.
pub const DISCOVERY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Discovery of `source` under the deadline.
fn inventory(source: &Source, scope: Scope) -> Result<Inventory> {
    match inventory_within(source, scope, DISCOVERY_DEADLINE)? {
        Waited::Done(inv) => Ok(inv),
        Waited::Cut(stall) => Err(stall.error("discovery", DISCOVERY_DEADLINE)),
    }
}

/// Discovery of `source`, waiting at most `deadline` (`Cut`: where it stood then).
fn inventory_within(
    source: &Source,
    scope: Scope,
    deadline: std::time::Duration,
) -> Result<Waited<Inventory>> {
    let sr = source.sysroot.clone();
    let facts = source.nvml_facts();
    let watched = source.sysroot.clone();
    // NVML's snapshot as discovery asks for it: a recorded nvml.json may still be parsing. One
    // that does not parse is the error given below, whatever discovery was handed for it.
    let nvml = move || {
        facts.get().unwrap_or_else(|e| {
            std::sync::Arc::new(crate::nvml::NvmlSnapshot::unavailable(
                e.to_string(),
                "recorded",
            ))
        })
    };
    // A record in memory is read on this thread, as it was parsed: no read can wait on a
    // device, and its size was bounded when it was opened.
    let r = if source.sysroot.is_in_memory() {
        Inventory::collect_with(&sr, &nvml, scope)
    } else {
        match wait_at_most(
            deadline,
            move || Inventory::collect_with(&sr, &nvml, scope),
            move || Stall::of(&watched),
        )? {
            Waited::Done(r) => r,
            Waited::Cut(stall) => return Ok(Waited::Cut(stall)),
        }
    };
    source.nvml()?;
    let r = r.map(|mut inv| {
        if scope == Scope::Checks {
            inv.kernel_log = source.kernel_log();
        }
        inv.foreign_gdr = source.foreign_gdr.clone();
        if let crate::source::SourceInfo::From { format, .. } = &source.info {
            inv.bridges_hidden = format.bridges_hidden();
        }
        inv
    });
    r.map(Waited::Done).map_err(|e| match e {
        crate::inventory::InventoryError::NoPciBus(ReadError::NotFound(p)) => {
            anyhow::anyhow!("{p} does not exist: not a sysfs tree (no PCI bus)")
        }
        other => anyhow::anyhow!(other),
    })
}

/// Where discovery stood when its deadline passed: the last path handed to the reader, and
/// whether a read of it was still in progress (a device not answering) or had returned (the
/// time went into what was read: an oversized or hostile tree).
#[derive(Debug, Clone)]
pub struct Stall {
    pub path: String,
    pub in_read: bool,
}

impl From<String> for Stall {
    fn from(path: String) -> Stall {
        Stall {
            path,
            in_read: true,
        }
    }
}

impl Stall {
    /// The reader's state now.
    pub fn of(sr: &crate::sysroot::SysRoot) -> Stall {
        Stall {
            path: sr.last_path(),
            in_read: sr.reading_now(),
        }
    }
}

impl Stall {
    /// The error of a discovery that did not finish within `deadline`.
    fn error(&self, what: &str, deadline: std::time::Duration) -> anyhow::Error {
        if self.in_read {
            return anyhow::anyhow!(
                "reading {} did not finish within {} s ({what} waited on it): a device or file system is not answering (hung PCI device?)",
                self.path,
                deadline.as_secs_f64()
            );
        }
        anyhow::anyhow!(
            "{what} did not finish within {} s, and not for want of an answer: no read was in progress (the last path read, {}, had returned); the time went into processing what was read (an oversized or hostile recorded tree?)",
            deadline.as_secs_f64(),
            self.path
        )
    }

    /// What was going on, for a time budget's skip reasons.
    pub fn doing(&self) -> String {
        // Discovery reads on several threads: the last path asked for is where it stood, not
        // necessarily the read that does not answer.
        if self.in_read {
            format!("a read not answering; last path asked for: {}", self.path)
        } else {
            format!(
                "processing what was read; last path asked for: {}",
                self.path
            )
        }
    }
}

/// Work that finished, or where it stood when its time ran out.
pub enum Waited<T> {
    Done(T),
    Cut(Stall),
}

/// Run `work` on its own thread and wait at most `deadline`. A read that never returns cannot
/// be cancelled, so on timeout the worker is abandoned (the process exits right after
/// reporting) and `stuck_on` says what it was doing.
pub fn wait_at_most<T: Send + 'static, S: Into<Stall>>(
    deadline: std::time::Duration,
    work: impl FnOnce() -> T + Send + 'static,
    stuck_on: impl FnOnce() -> S,
) -> Result<Waited<T>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("gpudoctor-discovery".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .context("starting the discovery thread")?;
    match rx.recv_timeout(deadline) {
        Ok(v) => Ok(Waited::Done(v)),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Ok(Waited::Cut(stuck_on().into())),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            anyhow::bail!("discovery stopped unexpectedly (bug: the worker thread panicked)")
        }
    }
}

/// `wait_at_most`, a cut being an error that names what the worker was doing (discovery).
pub fn with_deadline<T: Send + 'static, S: Into<Stall>>(
    deadline: std::time::Duration,
    work: impl FnOnce() -> T + Send + 'static,
    stuck_on: impl FnOnce() -> S,
) -> Result<T> {
    with_deadline_of("discovery", deadline, work, stuck_on)
}

/// `with_deadline` for work other than discovery (`what`: "the bundle capture"), which the
/// message names.
pub fn with_deadline_of<T: Send + 'static, S: Into<Stall>>(
    what: &str,
    deadline: std::time::Duration,
    work: impl FnOnce() -> T + Send + 'static,
    stuck_on: impl FnOnce() -> S,
) -> Result<T> {
    match wait_at_most(deadline, work, stuck_on)? {
        Waited::Done(v) => Ok(v),
        Waited::Cut(stall) => Err(stall.error(what, deadline)),
    }
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `--textfile DIR` (DIR/gpudoctor.prom) and `--report FILE`: the file replaced atomically (a
/// hidden temporary file beside it, which the textfile collector ignores, renamed over it),
/// readable by other users (node_exporter's, a Slurm script's). Only a regular file is
/// replaced: a directory, device node, FIFO or symlink at the path is refused.
pub fn write_atomically(option: &str, target: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    crate::bundle::write::check_output_of(option, target)?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .tempfile_in(dir)
        .with_context(|| format!("{}: cannot create a file there", dir.display()))?;
    tmp.write_all(text.as_bytes())
        .and_then(|()| tmp.as_file().sync_all())
        .and_then(|()| {
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644))
        })
        .with_context(|| format!("writing {}", tmp.path().display()))?;
    tmp.persist(target)
        .map_err(|e| e.error)
        .with_context(|| format!("replacing {}", target.display()))?;
    Ok(())
}

/// `--textfile DIR` for a run that produced no report: `gpudoctor_up 0` and why, so that a
/// node gpudoctor cannot check alerts instead of serving its last verdict for ever.
pub fn record_failure(dir: &std::path::Path, reason: &str, exit_code: i32) -> Result<()> {
    let run = crate::export::prometheus::RunRecord {
        timestamp_seconds: now_seconds(),
        exit_code,
        error: Some(reason),
    };
    write_atomically(
        "--textfile",
        &dir.join("gpudoctor.prom"),
        &crate::export::prometheus::textfile_without_report(&run),
    )
}

/// Text for a person whose renderer lays out at the pipe width: fitted again to a narrower
/// terminal (COLUMNS) here. Machine formats (JSON, Prometheus, JUnit, Markdown) never are.
fn fits_terminal(action: &Action) -> bool {
    match action {
        Action::Fleet { format, .. } => *format == crate::config::FleetOutput::Table,
        Action::Diff { format, .. } => *format == crate::export::Format::Table,
        Action::Bundle { .. }
        | Action::Baseline {
            output: Some(_), ..
        } => true,
        _ => false,
    }
}

pub fn dispatch(cfg: &Config) -> Result<Outcome> {
    let mut outcome = run_action(cfg)?;
    if let Some(w) = cfg.width
        && fits_terminal(&cfg.action)
    {
        outcome.stdout = render::layout::fit(&outcome.stdout, render::layout::width(Some(w)));
    }
    Ok(outcome)
}

/// `topo`: the topology in the chosen view.
fn run_topo(cfg: &Config, out: &TopoOutput, text: ExportOptions) -> Result<Outcome> {
    let r = check::topo_report_for_exit(&cfg.source)?;
    let outcome = Outcome::new(
        match out {
            TopoOutput::Tree => export(Format::Table, text, "the topology", |e| e.topo(&r))?,
            // The matrix is a view of the topology, not a format of every report.
            TopoOutput::Matrix => render::topo_matrix(&r, render::layout::width(cfg.width)),
            TopoOutput::MatrixTsv => render::topo_matrix_tsv(&r),
            TopoOutput::Json => export(Format::Json, text, "the topology", |e| e.topo(&r))?,
            TopoOutput::Html => export(Format::Html, text, "the topology", |e| e.topo(&r))?,
        },
        EXIT_OK,
    );
    // Memory only, and the process ends next: not freed piece by piece.
    std::mem::forget(r);
    Ok(outcome)
}

/// `check`: the report in its format, the textfile and report file where asked, and the
/// verdict's exit code (a hung probe: its line, and leave without joining it).
fn run_check(cfg: &Config, opts: &CheckOptions, text: ExportOptions) -> Result<Outcome> {
    match check_report(&cfg.source, opts) {
        Ok(mut r) => {
            let mut code = exit::check(&r);
            // --report-only: every output as always, the verdict's code kept in it.
            if opts.report_only {
                (code, r.would_exit) = exit::report_only(code);
            }
            if let Some(dir) = &opts.textfile {
                let run = crate::export::prometheus::RunRecord {
                    timestamp_seconds: now_seconds(),
                    exit_code: code,
                    error: None,
                };
                write_atomically(
                    "--textfile",
                    &dir.join("gpudoctor.prom"),
                    &crate::export::prometheus::textfile(&r, opts.all_series, &run),
                )?;
            }
            if let Some(path) = &opts.report {
                let json = export(Format::Json, text, "a check report", |e| e.check(&r))?;
                write_atomically("--report", path, &json)?;
            }
            let text = ExportOptions {
                quiet: opts.quiet,
                color: opts.color,
                all_series: opts.all_series,
                ..text
            };
            let mut out = Outcome::new(
                export(opts.format.into(), text, "a check report", |e| e.check(&r))?,
                code,
            );
            // Budget-cut CUDA work still running: leave as after a hung probe.
            out.hung = r.abandoned_work;
            // Memory only, and the process ends next: not freed piece by piece.
            std::mem::forget(r);
            Ok(out)
        }
        Err(e) => match e {
            CheckError::Hung(h) => {
                if let Some(dir) = &opts.textfile {
                    // Best effort: the process leaves without joining the hung work.
                    let _ = record_failure(dir, &h, EXIT_FAILED_CHECK);
                }
                Ok(Outcome {
                    stdout: format!("gpudoctor: {h}\n"),
                    code: EXIT_FAILED_CHECK,
                    hung: true,
                })
            }
            CheckError::Failed(e) => Err(e),
        },
    }
}

/// `explain ID`: the check's document (as Markdown where asked), or the nearest id.
fn run_explain(cfg: &Config, id: &str, markdown: bool) -> Result<Outcome> {
    match crate::checks::info(id) {
        Some(c) if markdown => Ok(Outcome::new(render::explain_markdown(c), EXIT_OK)),
        Some(c) => Ok(Outcome::new(
            render::explain(c, render::layout::width(cfg.width)),
            EXIT_OK,
        )),
        None => match crate::checks::suggest(id) {
            Some(near) => anyhow::bail!("no check '{id}' (did you mean {near}?)"),
            None => anyhow::bail!("no check '{id}': `gpudoctor list` shows them all"),
        },
    }
}

/// `man DIR`: write every man page into `dir` and say which.
fn run_man(cfg: &Config, dir: &std::path::Path) -> Result<Outcome> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut names = Vec::new();
    for (name, bytes) in crate::cli::man_pages().context("rendering man pages")? {
        let p = dir.join(&name);
        // Replaces only a regular file (never through a symlink, never into a FIFO).
        let text = String::from_utf8(bytes).context("rendering man pages")?;
        write_atomically("man DIR", &p, &text)?;
        names.push(name);
    }
    Ok(Outcome::new(
        crate::render::layout::fit(
            &format!(
                "wrote {} into {}: {}\n",
                crate::render::layout::count(names.len(), "man page", "man pages"),
                dir.display(),
                names.join(" ")
            ),
            cfg.width.map_or(crate::render::PIPE_WIDTH, usize::from),
        ),
        EXIT_OK,
    ))
}

/// `list`: every check of the catalog, in report order.
fn catalog_report() -> crate::report::CatalogReport {
    crate::report::CatalogReport::new(crate::checks::CATALOG.iter().map(|c| {
        crate::report::CatalogEntry {
            id: c.id,
            level: c.level,
            severity: c.severity,
            title: c.title,
        }
    }))
}

/// Run the command `cfg` resolved: its output and exit code.
fn run_action(cfg: &Config) -> Result<Outcome> {
    // What the text formats need; each command's exporter is chosen by `export` alone.
    let text = ExportOptions {
        width: cfg.width,
        all_rows: matches!(&cfg.action, Action::Check(o) if o.all_rows),
        ..ExportOptions::default()
    };
    match &cfg.action {
        Action::Topo(out) => run_topo(cfg, out, text),
        Action::Check(opts) => run_check(cfg, opts, text),
        Action::List { json } => Ok(Outcome::new(
            export(json_or_table(*json), text, "the catalog", |e| {
                e.catalog(&catalog_report())
            })?,
            EXIT_OK,
        )),
        Action::Explain(id, markdown) => run_explain(cfg, id, *markdown),
        Action::Snapshot(what) => {
            let o = Source::open(&cfg.source)?;
            Ok(Outcome::new(
                match what.as_str() {
                    "nvml" => render::json(&*o.nvml()?),
                    "kmsg" => render::json(&*o.kernel_log()),
                    _ => render::json(&o.libs),
                },
                EXIT_OK,
            ))
        }
        Action::Probe {
            options,
            format,
            fail_on_skip,
            ..
        } => probe::cuda(&cfg.source, options, (*format).into(), *fail_on_skip, text),
        Action::WriteBw(w) => probe::write_bw(w, text),
        Action::GpuWriteBw(w) => probe::gpu_write_bw(w, text),
        Action::Nccl(n) => nccl::probe(n),
        Action::NcclWorker => Ok(Outcome::new(
            String::new(),
            crate::nccl::worker::main_of_worker(),
        )),
        Action::Completions(script) => Ok(Outcome::new(
            String::from_utf8(script.clone()).context("completion script is not UTF-8")?,
            EXIT_OK,
        )),
        Action::Bundle {
            output,
            redact,
            progress,
        } => bundle::make(&cfg.source, output, *redact, *progress),
        Action::Baseline {
            output,
            level,
            probe,
        } => baseline::write(&cfg.source, output.as_deref(), *level, probe),
        Action::Fleet {
            inputs,
            format,
            min_deviation,
            expect,
        } => fleet::fleet(inputs, (*format).into(), *min_deviation, expect),
        Action::Diff { a, b, format, all } => fleet::diff(a, b, *format, *all),
        Action::ExportNcclTopo { output } => export::nccl_topo(&cfg.source, output.as_deref()),
        Action::Man(dir) => run_man(cfg, dir),
    }
}
