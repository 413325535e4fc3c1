//! The one integration-test binary (ripgrep's habit): fixtures, CLI, man page.

mod cli;
mod fixtures;
mod man;
mod vm;

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every fixture directory (each holds a recorded `sys/` tree).
pub fn fixture_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("fixtures"))
        .expect("fixtures/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("sys").is_dir())
        .collect();
    v.sort();
    v
}

pub fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

pub fn gpudoctor() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("gpudoctor").unwrap();
    c.current_dir(repo());
    c
}
