//! Build script: the PCI ID database (src/pci/pci.ids, vendor and device lines of the PCI ID
//! Project's list) indexed into tables of plain integers, for `pci::ids`.
//!
//! Why not the `pci-ids` crate: it compiles the database into tables of `&'static str`, each a
//! pointer the dynamic loader must relocate when the binary starts (about 50,000 relocations,
//! 1.4 MB of pages written on every run, whether or not a name is looked up), which was a third
//! of the time of a `topo --from FILE` run; and its build script tries to download a newer
//! database, so two builds of one commit could name devices differently. Here the names are one
//! string and the index holds offsets, which need no relocation; the database is the committed
//! file, so a build is reproducible.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    revision();
    let src = Path::new("src/pci/pci.ids");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(src).expect("src/pci/pci.ids is readable UTF-8");

    let mut names = String::new();
    let mut vendors: Vec<(u16, u32, u16)> = Vec::new();
    let mut devices: Vec<(u32, u32, u16)> = Vec::new();
    let mut vendor: Option<u16> = None;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (device_line, rest) = match line.strip_prefix('\t') {
            Some(r) => (true, r),
            None => (false, line),
        };
        let (id, name) = rest
            .split_once("  ")
            .unwrap_or_else(|| panic!("src/pci/pci.ids line {}: no two-space separator", n + 1));
        let id = u16::from_str_radix(id, 16)
            .unwrap_or_else(|_| panic!("src/pci/pci.ids line {}: bad id {id:?}", n + 1));
        let off = u32::try_from(names.len()).expect("names fit in u32");
        let len = u16::try_from(name.len()).expect("a name fits in u16");
        names.push_str(name);
        if device_line {
            let v = vendor.unwrap_or_else(|| {
                panic!("src/pci/pci.ids line {}: device before any vendor", n + 1)
            });
            devices.push(((u32::from(v) << 16) | u32::from(id), off, len));
        } else {
            vendor = Some(id);
            vendors.push((id, off, len));
        }
    }
    // Sorted for binary search; a repeated id keeps its first entry, as a reader of the list would.
    vendors.sort_by_key(|e| e.0);
    vendors.dedup_by_key(|e| e.0);
    devices.sort_by_key(|e| e.0);
    devices.dedup_by_key(|e| e.0);

    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("pci_names.txt"), &names).expect("write pci_names.txt");
    let mut code = String::new();
    writeln!(
        code,
        "/// Every name, one after another; the tables hold (offset, length) into it."
    )
    .unwrap();
    writeln!(
        code,
        "pub static NAMES: &str = include_str!(concat!(env!(\"OUT_DIR\"), \"/pci_names.txt\"));"
    )
    .unwrap();
    writeln!(
        code,
        "/// (vendor id, name offset, name length), sorted by id."
    )
    .unwrap();
    writeln!(
        code,
        "pub static VENDORS: [(u16, u32, u16); {}] = [",
        vendors.len()
    )
    .unwrap();
    for (id, off, len) in &vendors {
        writeln!(code, "({id:#06x},{off},{len}),").unwrap();
    }
    writeln!(code, "];").unwrap();
    writeln!(
        code,
        "/// (vendor id << 16 | device id, name offset, name length), sorted by key."
    )
    .unwrap();
    writeln!(
        code,
        "pub static DEVICES: [(u32, u32, u16); {}] = [",
        devices.len()
    )
    .unwrap();
    for (key, off, len) in &devices {
        writeln!(code, "({key:#010x},{off},{len}),").unwrap();
    }
    writeln!(code, "];").unwrap();
    std::fs::write(out.join("pci_ids.rs"), code).expect("write pci_ids.rs");
}

/// The source revision `gpudoctor --version` names (`GPUDOCTOR_REVISION` at run time of the
/// compiler): the value of that variable when a packager sets it, else the commit of the git
/// checkout being built, else "unknown" (a source tarball). The build reruns when HEAD moves.
fn revision() {
    println!("cargo:rerun-if-env-changed=GPUDOCTOR_REVISION");
    let rev = std::env::var("GPUDOCTOR_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(git_head)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=GPUDOCTOR_REVISION={rev}");
}

fn git_head() -> Option<String> {
    let git = Path::new(".git");
    if !git.exists() {
        return None;
    }
    // HEAD, the branch it names and the packed refs: what moves when a commit is made. Only
    // files that exist (cargo reruns a build script on every build for a missing one); a
    // worktree's `.git` file gives no hints, and its revision is the one of the first build.
    let mut watch = vec![".git/HEAD".to_string(), ".git/packed-refs".to_string()];
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(r) = head.trim().strip_prefix("ref: ")
    {
        watch.push(format!(".git/{r}"));
    }
    for w in watch.iter().filter(|w| Path::new(w).is_file()) {
        println!("cargo:rerun-if-changed={w}");
    }
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    let rev = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !rev.is_empty() && rev.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(rev)
}
