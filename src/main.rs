//! The only place that ends the process: parse, resolve, run, print, exit with the outcome's
//! code (0 healthy, 1 the machine failed a check, 2 gpudoctor could not run).

use clap::Parser;
use gpudoctor::cli::Args;
use gpudoctor::config::Config;
use gpudoctor::run::{self, EXIT_ERROR};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `gpudoctor help [COMMAND...]` is `gpudoctor [COMMAND...] --help`.
fn argv() -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "help") {
        argv.remove(1);
        argv.push("--help".into());
    }
    argv
}

/// A usage error as one line (`gpudoctor: error: ...`), with clap's suggestion where it has one:
/// the same shape as every other error, for logs and scripts that read one line.
fn usage_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    // The command the error is about, from clap's usage line ("Usage: gpudoctor probe h2d
    // [OPTIONS]"), so the hint names its help.
    let command: Vec<&str> = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: gpudoctor"))
        .unwrap_or("")
        .split_whitespace()
        .take_while(|w| !w.starts_with(['-', '<', '[']))
        .collect();
    let help = ["gpudoctor help"]
        .into_iter()
        .chain(command.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let path = ["gpudoctor"]
            .into_iter()
            .chain(command.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        return format!("gpudoctor: error: `{path}` needs a command (see `{help}`)");
    }
    // The error's first paragraph, joined: "the following required arguments were not
    // provided:" is followed by the arguments on lines of their own.
    let first = text
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let first = match first.trim_start_matches("error: ") {
        "" => "invalid arguments",
        f => f,
    };
    let tips: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tip: "))
        .collect();
    if tips.is_empty() {
        format!("gpudoctor: error: {first} (see `{help}`)")
    } else {
        format!("gpudoctor: error: {first} ({})", tips.join("; "))
    }
}

/// The paths the command line gives as a fact source or as `diff`'s inputs, with the flag
/// (`--root`, `--bundle`) or command (`diff`) that took them, for `path_hint`.
fn given_paths(
    argv: &[std::ffi::OsString],
    command: &gpudoctor::cli::Command,
) -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    let mut it = argv.iter().skip(1);
    while let Some(a) = it.next() {
        let a = a.to_string_lossy();
        for flag in ["--root", "--bundle"] {
            if a == flag {
                if let Some(v) = it.clone().next() {
                    out.push((flag, PathBuf::from(v)));
                }
            } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                out.push((flag, PathBuf::from(v)));
            }
        }
    }
    if let gpudoctor::cli::Command::Diff { a, b, .. } = command {
        out.push(("diff", a.clone()));
        out.push(("diff", b.clone()));
    }
    out
}

/// What to give instead, when a path is of another kind than the place it was given in: a
/// fixture variant's directory (a bundle.tar.gz, no sys/) to --root, a directory to --bundle
/// or to `diff`. Read only after an error, to explain it.
fn path_hint(took: &str, path: &Path) -> Option<String> {
    if !path.is_dir() {
        return None;
    }
    let shown = path.display().to_string();
    let shown = shown.trim_end_matches('/');
    let has_bundle = path.join("bundle.tar.gz").is_file();
    let has_tree = path.join("sys").is_dir();
    match took {
        "--root" if has_bundle && !has_tree => Some(format!(
            "this directory holds a support bundle: use --bundle {shown}/bundle.tar.gz"
        )),
        "--bundle" if has_bundle => Some(format!(
            "this directory holds a support bundle: use --bundle {shown}/bundle.tar.gz"
        )),
        "--bundle" if has_tree => Some(format!(
            "{shown} is a directory with sys/ (a recorded tree): use --root {shown}"
        )),
        "--bundle" => Some(format!(
            "{shown} is a directory: --bundle takes the .tar.gz file `gpudoctor bundle -o FILE` writes"
        )),
        "diff" if has_bundle => Some(format!(
            "this directory holds a support bundle: use {shown}/bundle.tar.gz"
        )),
        "diff" => Some(format!(
            "{shown} is a directory: diff compares two files (check reports or bundles); for a directory of them use `gpudoctor fleet {shown}`"
        )),
        _ => None,
    }
}

fn main() {
    // Before any thread starts: room for discovery's descriptors (see reserve_descriptors),
    // then a signal removes temporaries and exits 2 (see signals).
    gpudoctor::sysroot::reserve_descriptors();
    gpudoctor::signals::guard();
    let argv = argv();
    let args = match Args::try_parse_from(&argv) {
        Ok(a) => a,
        Err(e) => {
            // --help and --version are not errors.
            if !e.use_stderr() {
                let _ = e.print();
                std::process::exit(0);
            }
            let _ = writeln!(std::io::stderr(), "{}", usage_error(&e));
            std::process::exit(EXIT_ERROR);
        }
    };
    // `check --textfile DIR` records a run that could not judge the node too.
    let textfile = match &args.command {
        gpudoctor::cli::Command::Check(c) => c.textfile.clone(),
        _ => None,
    };
    let paths = given_paths(&argv, &args.command);
    let outcome = Config::from_args(args).and_then(|cfg| run::dispatch(&cfg));
    let code = match outcome {
        Ok(out) if out.hung => {
            // CUDA work is stuck on a thread that cannot be joined: leave without exit handlers.
            gpudoctor::signals::remove_temporaries();
            gpudoctor::probes::live::exit_now(&out.stdout, out.code)
        }
        Ok(out) => {
            let mut so = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth a message.
            let _ = so.write_all(out.stdout.as_bytes());
            let _ = so.flush();
            out.code
        }
        Err(e) => {
            let mut msg = format!("{e:#}").replace('\n', " ");
            if let Some(hint) = paths.iter().find_map(|(took, p)| path_hint(took, p)) {
                msg = format!("{msg} (hint: {hint})");
            }
            let _ = writeln!(std::io::stderr(), "gpudoctor: error: {msg}");
            if let Some(dir) = &textfile
                && let Err(e) = run::record_failure(dir, &msg, EXIT_ERROR)
            {
                let _ = writeln!(std::io::stderr(), "gpudoctor: error: {e:#}");
            }
            EXIT_ERROR
        }
    };
    // A worker abandoned at a deadline may still hold an extracted bundle: remove it.
    gpudoctor::signals::remove_temporaries();
    std::process::exit(code);
}
