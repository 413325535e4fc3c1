//! The edge: turns a `Config` into output text and an exit code. The only place (with
//! `main`) that uses anyhow.

use crate::bundle;
use crate::cli::{Action, CheckOptions, Config, SourceSpec, TopoOutput};
use crate::inventory::{Inventory, Scope};
use crate::libs::LibFacts;
use crate::nvml::NvmlSnapshot;
use crate::render::{self, Style};
use crate::report::{CheckReport, SourceInfo, TopoReport};
use crate::sysroot::{ReadError, SysRoot};
use anyhow::{Context, Result};

/// Exit codes (ripgrep's convention).
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED_CHECK: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

/// What a command produced.
pub struct Outcome {
    pub stdout: String,
    pub code: i32,
}

/// An opened source: the reader and the snapshots that go with it.
pub struct Opened {
    /// Shared with the discovery worker thread (see `inventory`).
    pub sysroot: std::sync::Arc<SysRoot>,
    pub nvml: NvmlSnapshot,
    pub libs: LibFacts,
    pub info: SourceInfo,
}

/// Open the source: the reader and the NVML/library snapshots that go with it.
pub fn open_source(spec: &SourceSpec) -> Result<Opened> {
    match spec {
        SourceSpec::Live => Ok(Opened {
            sysroot: std::sync::Arc::new(SysRoot::live()),
            nvml: NvmlSnapshot::collect_live(),
            libs: LibFacts::probe_live(),
            info: SourceInfo::Live,
        }),
        SourceSpec::Root(dir) => {
            let label = format!("--root {}", dir.display());
            let (sysroot, nvml, libs) = open_tree(dir, &label)?;
            let path = dir.display().to_string();
            Ok(Opened {
                sysroot: std::sync::Arc::new(sysroot),
                nvml,
                libs,
                info: SourceInfo::Root { path },
            })
        }
        SourceSpec::Bundle(file) => {
            let label = format!("--bundle {}", file.display());
            let x = bundle::read::extract(file).with_context(|| label.clone())?;
            let (sysroot, nvml, libs) = open_tree(x.dir.path(), &label)?;
            let path = file.display().to_string();
            Ok(Opened {
                sysroot: std::sync::Arc::new(sysroot.holding(x.dir)),
                nvml,
                libs,
                info: SourceInfo::Bundle { path },
            })
        }
    }
}

/// Read a recorded top-level JSON document of a tree; absent means "not recorded".
fn recorded<T>(
    dir: &std::path::Path,
    name: &str,
    label: &str,
    parse: impl FnOnce(&[u8]) -> Result<T>,
    absent: impl FnOnce() -> T,
) -> Result<T> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(bytes) => parse(&bytes).with_context(|| label.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(absent()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// A recorded tree (fixture, unpacked bundle): its sys/ and proc/, its nvml.json and
/// libs.json, and the errors its manifest.json says the recorded machine gave (replayed as
/// the same errors).
fn open_tree(dir: &std::path::Path, label: &str) -> Result<(SysRoot, NvmlSnapshot, LibFacts)> {
    let sr = SysRoot::at(dir).with_context(|| label.to_string())?;
    let root = sr.root_dir().to_path_buf();
    let sr = match recorded(
        &root,
        "manifest.json",
        label,
        |b| Ok(Some(bundle::Manifest::from_json(b)?)),
        || None,
    )? {
        Some(m) => sr.with_recorded_errors(m.recorded_errors()),
        None => sr,
    };
    let nvml = recorded(
        &root,
        "nvml.json",
        label,
        |b| Ok(NvmlSnapshot::from_json(b)?),
        || NvmlSnapshot::unavailable("not recorded (no nvml.json in the tree)", "recorded"),
    )?;
    let libs = recorded(
        &root,
        "libs.json",
        label,
        |b| LibFacts::from_json(b).map_err(anyhow::Error::msg),
        || LibFacts::unavailable("not recorded (no libs.json in the tree)"),
    )?;
    Ok((sr, nvml, libs))
}

/// How long discovery may take before gpudoctor gives up on a device or file system that does
/// not answer (a hung PCI device can block a read of its config space indefinitely). Real
/// machines take well under a second; a recorded tree is faster still.
pub const DISCOVERY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

fn inventory(o: &Opened, scope: Scope) -> Result<Inventory> {
    let sr = o.sysroot.clone();
    let nvml = o.nvml.clone();
    let watched = o.sysroot.clone();
    let r = with_deadline(
        DISCOVERY_DEADLINE,
        move || Inventory::collect_scoped(&sr, nvml, scope),
        move || watched.last_path(),
    )?;
    r.map_err(|e| match e {
        crate::inventory::InventoryError::NoPciBus(ReadError::NotFound(p)) => {
            anyhow::anyhow!("{p} does not exist: not a sysfs tree (no PCI bus)")
        }
        other => anyhow::anyhow!(other),
    })
}

/// Run `work` on its own thread and wait at most `deadline`. A read that never returns cannot
/// be cancelled, so on timeout the worker is abandoned (the process exits with code 2 right
/// after reporting) and the error names what it was reading (`stuck_on`).
pub fn with_deadline<T: Send + 'static>(
    deadline: std::time::Duration,
    work: impl FnOnce() -> T + Send + 'static,
    stuck_on: impl FnOnce() -> String,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("gpudoctor-discovery".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .context("starting the discovery thread")?;
    match rx.recv_timeout(deadline) {
        Ok(v) => Ok(v),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => anyhow::bail!(
            "reading {} did not finish within {} s: a device or file system is not answering (hung PCI device?)",
            stuck_on(),
            deadline.as_secs_f64()
        ),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            anyhow::bail!("discovery stopped unexpectedly (bug: the worker thread panicked)")
        }
    }
}

pub fn topo_report(spec: &SourceSpec) -> Result<TopoReport> {
    topo_report_from(&open_source(spec)?)
}

fn topo_report_from(o: &Opened) -> Result<TopoReport> {
    let inv = inventory(o, Scope::Topology)?;
    let topo = crate::topo::build(&inv);
    Ok(TopoReport::new(o.info.clone(), &inv, topo))
}

pub fn check_report(spec: &SourceSpec, opts: &CheckOptions) -> Result<CheckReport> {
    let unknown = opts.overrides.unknown_ids();
    if !unknown.is_empty() {
        anyhow::bail!(
            "unknown check id(s) {}: `gpudoctor list` shows them all",
            unknown.join(", ")
        );
    }
    check_report_from(spec, &open_source(spec)?, opts)
}

fn check_report_from(spec: &SourceSpec, o: &Opened, opts: &CheckOptions) -> Result<CheckReport> {
    let inv = inventory(o, Scope::Checks)?;
    let topo = crate::topo::build(&inv);
    let ctx = crate::checks::Ctx {
        inv: &inv,
        topo: &topo,
        libs: &o.libs,
    };
    let mut findings = crate::checks::run_level0(&ctx);
    if opts.level >= 1 {
        let reports = level1_reports(spec, o, &topo, opts)?;
        crate::checks::level1::settle_link_speed(&reports, &mut findings, &topo);
        for r in &reports {
            crate::checks::level1::findings(r, &mut findings);
        }
    }
    if opts.level >= 2 {
        level2(spec, o, &inv, &mut findings);
    }
    crate::checks::debug_assert_sound(&findings);
    opts.overrides.apply(&mut findings);
    Ok(CheckReport::new(o.info.clone(), opts.level, &inv, findings))
}

/// Level 2: a short, validated RDMA-write loopback on every ACTIVE port of every RDMA device.
fn level2(
    spec: &SourceSpec,
    o: &Opened,
    inv: &Inventory,
    findings: &mut Vec<crate::checks::Finding>,
) {
    use crate::checks::{Finding, Status, level2};
    use crate::rdma::{self, Role, WriteBwRequest, write_bw::Plan};
    if !matches!(spec, SourceSpec::Live) {
        findings.push(Finding::new(
            level2::ID,
            "host",
            Status::Skip,
            "RDMA-write probes run on the live machine; a recorded tree does not replay them",
        ));
        return;
    }
    let before = findings.len();
    for d in &inv.rdma {
        for p in &d.ports {
            let subject = format!("{}/{}", d.name, p.port);
            if !p.state.as_deref().is_some_and(|s| s.ends_with("ACTIVE")) {
                findings.push(Finding::new(
                    level2::ID,
                    subject,
                    Status::Skip,
                    format!(
                        "port not ACTIVE ({}): see rdma.port-state",
                        p.state.as_deref().unwrap_or("state unknown")
                    ),
                ));
                continue;
            }
            // Short on purpose: 64 KiB and 1 MiB writes, 500 each, validated (about 0.5 GB
            // per port: milliseconds at line rate). A software device (rxe, no PCI function)
            // moves ~50 MB/s under emulation and has no line rate to judge: 32 each.
            let iters = if d.bdf.is_some() { 500 } else { 32 };
            let plan = match Plan::new(vec![65536, 1 << 20], iters, 128, 16, None, 1, true) {
                Ok(p) => p,
                Err(e) => {
                    findings.push(Finding::new(
                        level2::ID,
                        subject,
                        Status::Skip,
                        e.to_string(),
                    ));
                    continue;
                }
            };
            let req = WriteBwRequest {
                device: d.name.clone(),
                port: u8::try_from(p.port).unwrap_or(1),
                gid_index: None,
                plan,
                role: Role::Loopback,
                timeout: std::time::Duration::from_secs(30),
            };
            let (report, _) = rdma::write_bw(&o.sysroot, &req);
            level2::findings(&subject, &report, findings);
        }
    }
    if findings.len() == before {
        findings.push(Finding::new(
            level2::ID,
            "host",
            Status::Skip,
            "no RDMA devices: nothing to probe",
        ));
    }
}

/// Level-1 probe reports: measured on a live machine, or read from a recorded tree's
/// `probes/<name>.json` and re-evaluated (so thresholds and verdicts replay offline).
fn level1_reports(
    spec: &SourceSpec,
    o: &Opened,
    topo: &crate::topo::Topology,
    opts: &CheckOptions,
) -> Result<Vec<crate::probes::ProbeReport>> {
    use crate::probes::{ProbeKind, ProbeReport};
    let kinds = [
        ProbeKind::H2d,
        ProbeKind::D2h,
        ProbeKind::P2p,
        ProbeKind::DmabufExport,
    ];
    match spec {
        SourceSpec::Live => {
            let runs = crate::probes::live::run_level1(&opts.probe, topo);
            if let Some(r) = runs.iter().find(|r| r.hung) {
                // CUDA work is stuck: report what we have and leave without joining it.
                let msg = format!(
                    "gpudoctor: level-1 probe {} hung: {}\n",
                    crate::checks::level1::id_of(r.report.probe),
                    r.report.error.clone().unwrap_or_default()
                );
                crate::probes::live::exit_now(&msg, EXIT_FAILED_CHECK);
            }
            if runs.iter().any(|r| r.interrupted) {
                anyhow::bail!("interrupted (Ctrl-C); device and pinned memory freed");
            }
            Ok(runs.into_iter().map(|r| r.report).collect())
        }
        SourceSpec::Root(_) | SourceSpec::Bundle(_) => {
            let mut out = Vec::new();
            for k in kinds {
                let name = crate::checks::level1::id_of(k).trim_start_matches("probe.");
                let path = o
                    .sysroot
                    .root_dir()
                    .join("probes")
                    .join(format!("{name}.json"));
                match std::fs::read(&path) {
                    Ok(bytes) => {
                        let mut r: ProbeReport = serde_json::from_slice(&bytes)
                            .with_context(|| format!("{}: not a probe report", path.display()))?;
                        r.evaluate();
                        out.push(r);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        let mut r = ProbeReport::new(k, opts.probe.policy.clone());
                        r.skipped =
                            Some(format!("not recorded (no probes/{name}.json in the tree)"));
                        r.status = crate::probes::Status::Skip;
                        out.push(r);
                    }
                    Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
                }
            }
            Ok(out)
        }
    }
}

/// Exit code for a check report: 1 when a check failed (or warned, with --strict).
pub fn check_exit_code(r: &CheckReport, strict: bool) -> i32 {
    use crate::checks::Status;
    match r.status {
        Status::Fail => EXIT_FAILED_CHECK,
        Status::Warn if strict => EXIT_FAILED_CHECK,
        _ => EXIT_OK,
    }
}

/// The reports a bundle stores (and its self-replay compares): topo and a level-0 check.
fn bundle_reports(
    spec: &SourceSpec,
    o: &Opened,
) -> Result<std::collections::BTreeMap<String, serde_json::Value>> {
    let mut reports = std::collections::BTreeMap::new();
    let topo = topo_report_from(o)?;
    reports.insert(
        "topo".to_string(),
        serde_json::to_value(&topo).context("serializing the topo report")?,
    );
    let opts = CheckOptions::level0();
    let check = check_report_from(spec, o, &opts)?;
    reports.insert(
        "check".to_string(),
        serde_json::to_value(&check).context("serializing the check report")?,
    );
    Ok(reports)
}

/// `gpudoctor bundle`: discovery, capture, write, then replay the bundle just written and warn
/// where it reads differently from what was seen live.
fn make_bundle(
    source: &SourceSpec,
    output: &std::path::Path,
    redact: bool,
    progress: bool,
) -> Result<Outcome> {
    let t0 = std::time::Instant::now();
    let o = open_source(source)?;
    let reports = bundle_reports(source, &o)?;
    let sr = &o.sysroot;
    // What discovery read, before the capture reads more through the same reader.
    let touched = sr.touched();
    let listed = sr.listed();
    let opts = bundle::write::Options {
        redact,
        progress,
        source: if sr.is_live() {
            "live"
        } else {
            "recorded tree"
        }
        .to_string(),
        notes: Vec::new(),
    };
    let mut extra = std::collections::BTreeMap::new();
    extra.insert(
        "libs.json".to_string(),
        serde_json::to_value(&o.libs).context("serializing libs.json")?,
    );
    // The capture reads more than discovery did (full config space, GID tables...): the same
    // deadline guards it against a device that stops answering.
    let (reader, nvml, out) = (o.sysroot.clone(), o.nvml.clone(), output.to_path_buf());
    let watched = o.sysroot.clone();
    let written = with_deadline(
        DISCOVERY_DEADLINE,
        move || {
            let discovery = bundle::write::Discovery {
                touched: &touched,
                listed: &listed,
            };
            bundle::write::write_bundle(&reader, &nvml, extra, reports, discovery, &out, &opts)
        },
        move || watched.last_path(),
    );
    let w = match written {
        Ok(r) => r.with_context(|| format!("writing {}", output.display()))?,
        Err(e) => {
            // Leave no partial bundle behind.
            let _ = std::fs::remove_file(output);
            return Err(e);
        }
    };
    let elapsed = t0.elapsed();
    let mut warnings = Vec::new();
    if !w.manifest.uncovered.is_empty() {
        let msg = format!(
            "discovery read {} path(s) the capture list does not cover (add a pattern to CAPTURE in src/bundle/capture.rs): {}",
            w.manifest.uncovered.len(),
            w.manifest.uncovered.join(", ")
        );
        if cfg!(debug_assertions) {
            let _ = std::fs::remove_file(output);
            anyhow::bail!("{msg}");
        }
        warnings.push(msg);
    }
    // Replay what was just written; only where the data came from may differ.
    let again = SourceSpec::Bundle(output.to_path_buf());
    let replayed = open_source(&again).and_then(|o| bundle_reports(&again, &o));
    match replayed {
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
        Err(e) => warnings.push(format!("the bundle just written does not replay: {e:#}")),
    }
    for w in &warnings {
        eprintln!("gpudoctor: warning: {}", w.replace('\n', " "));
    }
    let m = &w.manifest;
    let mut stdout = format!(
        "wrote {}: {} KiB, {} files, {} links, {} directories ({} KiB uncompressed) in {} ms\n",
        output.display(),
        w.archive_bytes.div_ceil(1024),
        m.contents.files,
        m.contents.links,
        m.contents.dirs,
        m.contents.file_bytes.div_ceil(1024),
        elapsed.as_millis()
    );
    if m.redaction.enabled {
        let classes: Vec<String> = m
            .redaction
            .distinct_values
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        stdout.push_str(&format!(
            "redacted: {} (in {} files; --no-redact keeps them)\n",
            if classes.is_empty() {
                "nothing found".to_string()
            } else {
                classes.join(", ")
            },
            m.redaction.files.len()
        ));
    } else {
        stdout.push_str("not redacted (--no-redact): serials, UUIDs, GUIDs, MACs and the hostname are in the bundle\n");
    }
    if !m.unreadable.is_empty() {
        stdout.push_str(&format!(
            "{} path(s) could not be read (listed in manifest.json, replayed as the same errors)\n",
            m.unreadable.len()
        ));
    }
    Ok(Outcome {
        stdout,
        code: EXIT_OK,
    })
}

pub fn run(cfg: &Config) -> Result<Outcome> {
    let style = Style {
        width: cfg.width,
        all_rows: matches!(&cfg.action, Action::Check(o) if o.all_rows),
    };
    match &cfg.action {
        Action::Topo(out) => {
            let r = topo_report(&cfg.source)?;
            let stdout = match out {
                TopoOutput::Tree => render::topo_tree(&r, style),
                TopoOutput::Matrix => render::topo_matrix(&r),
                TopoOutput::Json => render::json(&r),
            };
            Ok(Outcome {
                stdout,
                code: EXIT_OK,
            })
        }
        Action::Check(opts) => {
            let r = check_report(&cfg.source, opts)?;
            let stdout = if opts.json {
                render::json(&r)
            } else {
                render::check_table(&r, style)
            };
            Ok(Outcome {
                code: check_exit_code(&r, opts.strict),
                stdout,
            })
        }
        Action::List { json } => Ok(Outcome {
            stdout: if *json {
                render::json(&crate::checks::CATALOG)
            } else {
                render::catalog_table(style)
            },
            code: EXIT_OK,
        }),
        Action::Explain(id) => match crate::checks::info(id) {
            Some(c) => Ok(Outcome {
                stdout: render::explain(c),
                code: EXIT_OK,
            }),
            None => anyhow::bail!("no check '{id}': `gpudoctor list` shows them all"),
        },
        Action::Snapshot(what) => {
            let o = open_source(&cfg.source)?;
            Ok(Outcome {
                stdout: if what == "nvml" {
                    render::json(&o.nvml)
                } else {
                    render::json(&o.libs)
                },
                code: EXIT_OK,
            })
        }
        Action::Probe { options, json } => probe(&cfg.source, options, *json, style),
        Action::WriteBw(w) => write_bw(&cfg.source, w),
        Action::Bundle {
            output,
            redact,
            progress,
        } => make_bundle(&cfg.source, output, *redact, *progress),
        Action::Man(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let mut names = Vec::new();
            for (name, bytes) in crate::cli::man_pages().context("rendering man pages")? {
                let p = dir.join(&name);
                std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
                names.push(p.display().to_string());
            }
            Ok(Outcome {
                stdout: format!("wrote {}\n", names.join(", ")),
                code: EXIT_OK,
            })
        }
    }
}

/// `gpudoctor probe NAME`: exit 0 on pass or skip (no CUDA is not a failure of the machine),
/// 1 when a measurement failed or a copy hung, 2 when gpudoctor could not finish
/// (bad arguments, Ctrl-C).
fn probe(
    source: &SourceSpec,
    options: &crate::probes::live::ProbeOptions,
    json: bool,
    style: Style,
) -> Result<Outcome> {
    use crate::probes::{Status, live};
    if !matches!(source, SourceSpec::Live) {
        anyhow::bail!(
            "probes measure the live machine; --root and --bundle replay recorded facts (use `check --level 1` to re-evaluate recorded probe samples)"
        );
    }
    if options.size_bytes < (1 << 20) || !options.size_bytes.is_multiple_of(16) {
        anyhow::bail!(
            "--size {}: must be a multiple of 16 bytes and at least 1 MiB (1048576)",
            options.size_bytes
        );
    }
    let topo = topo_report(source)?.topology;
    if let Some(n) = options.gpu {
        let want = format!("GPU{n}");
        if !topo.gpus.is_empty() && !topo.gpus.iter().any(|g| g.label == want) {
            let have: Vec<&str> = topo.gpus.iter().map(|g| g.label.as_str()).collect();
            anyhow::bail!("--gpu {n}: no {want} here (GPUs: {})", have.join(", "));
        }
    }
    let run = live::run(options, &topo);
    let stdout = if json {
        render::json(&run.report)
    } else {
        crate::probes::render::table(&run.report, style)
    };
    let code = if run.interrupted {
        EXIT_ERROR
    } else if run.report.status == Status::Fail {
        EXIT_FAILED_CHECK
    } else {
        EXIT_OK
    };
    if run.hung {
        // CUDA work is stuck on the probe thread: leave without joining it.
        live::exit_now(&stdout, code);
    }
    Ok(Outcome { stdout, code })
}

/// `probe write-bw`: exit 0 when it ran and passed, or could not run here at all (no
/// libibverbs, no RDMA device or kernel support: a skip, as for the CUDA probes); 1 when the
/// machine failed it (port down, completion error, peer unreachable); 2 for bad arguments.
fn write_bw(spec: &SourceSpec, w: &crate::cli::WriteBwArgs) -> Result<Outcome> {
    use crate::rdma::engine::ErrorClass;
    use crate::rdma::{self, Role, WriteBwRequest, write_bw::Plan};
    let sr = match spec {
        SourceSpec::Live => SysRoot::live(),
        SourceSpec::Root(_) | SourceSpec::Bundle(_) => {
            anyhow::bail!("probe write-bw measures live hardware; --root/--bundle do not apply")
        }
    };
    let sizes = if w.all {
        rdma::write_bw::all_sizes()
    } else {
        w.sizes
            .clone()
            .unwrap_or_else(|| rdma::write_bw::DEFAULT_SIZES.to_vec())
    };
    let plan = Plan::new(
        sizes,
        w.iters,
        w.tx_depth,
        w.cq_mod,
        w.post_list,
        w.qps,
        w.validate,
    )?;
    let token = || {
        w.token
            .clone()
            .context("two-node mode needs a shared --token (or GPUDOCTOR_TOKEN) on both sides")
    };
    let role = if w.serve {
        Role::Serve {
            listen: w.listen.clone(),
            token: token()?,
        }
    } else if let Some(peer) = &w.peer {
        Role::Client {
            peer: peer.clone(),
            token: token()?,
        }
    } else {
        Role::Loopback
    };
    let req = WriteBwRequest {
        device: w.device.clone(),
        port: w.port,
        gid_index: w.gid_index,
        plan,
        role,
        timeout: std::time::Duration::from_secs(w.timeout.max(1)),
    };
    let (report, class) = rdma::write_bw(&sr, &req);
    if class == Some(ErrorClass::Usage) {
        let why = match &report.status {
            rdma::write_bw::Status::Error { reason } => reason.clone(),
            other => format!("{other:?}"),
        };
        anyhow::bail!("probe write-bw: {why}");
    }
    let stdout = if w.json {
        render::json(&report)
    } else {
        rdma::render::write_bw_table(&report)
    };
    Ok(Outcome {
        stdout,
        code: match class {
            None | Some(ErrorClass::Skip) => EXIT_OK,
            Some(_) => EXIT_FAILED_CHECK,
        },
    })
}
