use clap::Parser;
use gpudoctor::cli::{Args, Config};
use gpudoctor::run::{self, EXIT_ERROR};
use std::io::Write;

fn main() {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            // --help and --version are not errors.
            let code = if e.use_stderr() { EXIT_ERROR } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let cfg = Config::from_args(args);
    let code = match run::run(&cfg) {
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
    std::process::exit(code);
}
