//! The only place that ends the process: parse, resolve, run, print, exit with the outcome's
//! code (0 healthy, 1 the machine failed a check, 2 gpudoctor could not run).

use clap::Parser;
use gpudoctor::cli::Args;
use gpudoctor::config::Config;
use gpudoctor::run::{self, EXIT_ERROR};
use std::io::Write;

fn main() {
    // Before any thread starts: a signal removes temporaries and exits 2 (see signals).
    gpudoctor::signals::guard();
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            // --help and --version are not errors.
            let code = if e.use_stderr() { EXIT_ERROR } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let outcome = Config::from_args(args).and_then(|cfg| run::run(&cfg));
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
            let msg = format!("{e:#}").replace('\n', " ");
            let _ = writeln!(std::io::stderr(), "gpudoctor: error: {msg}");
            EXIT_ERROR
        }
    };
    // A worker abandoned at a deadline may still hold an extracted bundle: remove it.
    gpudoctor::signals::remove_temporaries();
    std::process::exit(code);
}
