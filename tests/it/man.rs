//! man/ is generated from the clap definition; this fails when it is stale.
//! Regenerate with: cargo run -- man man/

use crate::repo;

#[test]
fn man_pages_are_current() {
    let pages = gpudoctor::cli::man_pages().unwrap();
    assert!(pages.iter().any(|(n, _)| n == "gpudoctor.1"));
    for (name, bytes) in pages {
        let path = repo().join("man").join(&name);
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert!(
            on_disk == bytes,
            "man/{name} is stale or missing: run `cargo run -- man man/`"
        );
    }
}

/// Every page a SUBCOMMANDS section names (`gpudoctor-probe-h2d(1)`) is shipped, and man/
/// holds no page the binary no longer generates.
#[test]
fn man_pages_name_only_shipped_pages() {
    let pages = gpudoctor::cli::man_pages().unwrap();
    let names: Vec<String> = pages.iter().map(|(n, _)| n.clone()).collect();
    for (name, bytes) in &pages {
        let text = String::from_utf8_lossy(bytes).replace("\\-", "-");
        for line in text.lines() {
            if let Some(page) = line
                .strip_suffix("(1)")
                .filter(|p| p.starts_with("gpudoctor"))
            {
                assert!(
                    names.contains(&format!("{page}.1")),
                    "{name} names {page}(1), which is not shipped"
                );
            }
        }
    }
    for e in std::fs::read_dir(repo().join("man")).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().to_string();
        assert!(
            names.contains(&n),
            "man/{n} is not generated any more: remove it"
        );
    }
}
