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
