//! The clap definition as other tools want it: the man pages (and, through `command`, shell
//! completions).

use super::Args;

/// The clap command, for man page generation: the release alone (no revision, so the
/// committed pages stay current from one commit to the next).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command().long_version(None)
}

/// The shell completion script for `shell` (`gpudoctor completions SHELL`), generated from the
/// clap definition: clap's types stay in `cli`.
pub fn completion_script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut visible(&command()), "gpudoctor", &mut buf);
    buf
}

/// `cmd` without its hidden subcommands (`snapshot`), at every depth: clap_complete offers
/// every subcommand it is given, and a completion must offer only what `--help` shows. Kept for
/// completion: the name, version, about text and arguments (hidden arguments clap_complete
/// leaves out itself).
fn visible(cmd: &clap::Command) -> clap::Command {
    // clap names are &'static str without its `string` feature: a few bytes per command, once.
    let leak = |s: &str| -> &'static str { s.to_string().leak() };
    let mut out = clap::Command::new(leak(cmd.get_name())).disable_help_subcommand(true);
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(v) = cmd.get_version() {
        out = out.version(leak(v));
    }
    for a in cmd.get_arguments() {
        out = out.arg(a.clone());
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out = out.subcommand(visible(sub));
    }
    out
}

/// Render the man pages: `gpudoctor.1` and one `gpudoctor-<sub>[-<subsub>].1` per visible
/// subcommand at every depth, so every page a SUBCOMMANDS section names is shipped.
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>, std::io::Error> {
    let mut pages = Vec::new();
    man_page_tree(command(), "gpudoctor", &mut pages)?;
    Ok(pages)
}

fn man_page_tree(
    cmd: clap::Command,
    name: &str,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), std::io::Error> {
    // clap names are &'static str without its `string` feature: a few bytes per page, once.
    let cmd = cmd.name(clap::builder::Str::from(
        name.to_string().leak() as &'static str
    ));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    pages.push((format!("{name}.1"), buf));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_page_tree(sub.clone(), &format!("{name}-{}", sub.get_name()), pages)?;
    }
    Ok(())
}
