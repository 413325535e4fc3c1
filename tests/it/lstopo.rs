//! An independent reader agrees: hwloc's lstopo, pointed at the same tree with HWLOC_FSROOT,
//! must put every GPU and RDMA NIC under the same parent bridge and NUMA node(s) as
//! `gpudoctor topo --json`. Fails (rather than skips) when GPUDOCTOR_REQUIRE_LSTOPO=1 and lstopo
//! is missing; scripts/test installs it.

use crate::{fixture_dirs, gpudoctor, name};
use std::collections::{BTreeMap, BTreeSet};

fn lstopo_xml(root: &std::path::Path) -> Option<String> {
    let out = std::process::Command::new("lstopo-no-graphics")
        .args(["--of", "xml", "-"])
        .env("HWLOC_COMPONENTS", "-x86")
        .env("HWLOC_FSROOT", root)
        .output()
        .ok()?;
    assert!(out.status.success(), "lstopo failed on {}", root.display());
    Some(String::from_utf8(out.stdout).unwrap())
}

/// hwloc nodeset bitmap ("0x00000003" or "0x0,0x1") -> node ids.
fn nodes(bitmap: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    let words: Vec<&str> = bitmap.split(',').collect();
    for (i, w) in words.iter().rev().enumerate() {
        let v = u64::from_str_radix(w.trim_start_matches("0x"), 16).unwrap_or(0);
        for b in 0..32 {
            if v & (1 << b) != 0 {
                out.insert(i as u32 * 32 + b);
            }
        }
    }
    out
}

/// busid -> (parent bridge busid or None for a host bridge, NUMA nodes)
fn hwloc_placement(xml: &str) -> BTreeMap<String, (Option<String>, BTreeSet<u32>)> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(xml, opts).unwrap();
    let mut out = BTreeMap::new();
    for n in doc
        .descendants()
        .filter(|n| n.attribute("type") == Some("PCIDev"))
    {
        let Some(bus) = n.attribute("pci_busid") else {
            continue;
        };
        let parent = n
            .ancestors()
            .skip(1)
            .find(|a| a.attribute("type") == Some("Bridge"))
            .and_then(|a| a.attribute("pci_busid"))
            .map(str::to_string);
        let numa = n
            .ancestors()
            .find_map(|a| a.attribute("nodeset"))
            .map(nodes)
            .unwrap_or_default();
        out.insert(bus.to_string(), (parent, numa));
    }
    out
}

#[test]
fn gpudoctor_agrees_with_lstopo() {
    if !have_lstopo() {
        eprintln!("lstopo-no-graphics not installed: skipped");
        return;
    }
    let mut compared = 0;
    for dir in fixture_dirs() {
        compared += compare_with_lstopo(&dir);
    }
    assert!(compared > 20, "compared {compared} devices");
}

/// GPU and NIC placement of `gpudoctor topo --json` against lstopo's on one tree: how many
/// devices were compared (0 when lstopo does not read the tree).
pub fn compare_with_lstopo(dir: &std::path::Path) -> usize {
    let mut compared = 0;
    let Some(xml) = lstopo_xml(dir) else {
        return 0;
    };
    let hw = hwloc_placement(&xml);
    let out = gpudoctor()
        .args(["topo", "--json", "--root"])
        .arg(dir)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devices = v["topology"]["devices"].as_array().unwrap();
    let mut wanted: Vec<String> = v["topology"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["bdf"].as_str().unwrap().to_string())
        .collect();
    wanted.extend(
        v["topology"]["nics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["bdf"].as_str().unwrap().to_string()),
    );
    for bdf in wanted {
        let d = devices.iter().find(|d| d["bdf"] == bdf.as_str()).unwrap();
        let parent = d["upstream"]
            .as_array()
            .unwrap()
            .last()
            .map(|p| p.as_str().unwrap().to_string());
        let ours: BTreeSet<u32> = d["numa"]["affinity"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let (hp, hn) = hw
            .get(&bdf)
            .unwrap_or_else(|| panic!("{}: lstopo lacks {bdf}", name(dir)));
        assert_eq!(&parent, hp, "{}: parent bridge of {bdf}", name(dir));
        // hwloc places a device by its host bridge's locality; a device whose own
        // numa_node contradicts it (a firmware bug a fixture models) is not compared.
        assert_eq!(&ours, hn, "{}: NUMA of {bdf}", name(dir));
        compared += 1;
    }
    compared
}

/// Whether lstopo is here (and must be, under GPUDOCTOR_REQUIRE_LSTOPO=1).
pub fn have_lstopo() -> bool {
    let require = std::env::var("GPUDOCTOR_REQUIRE_LSTOPO").as_deref() == Ok("1");
    let have = std::process::Command::new("lstopo-no-graphics")
        .arg("--version")
        .output()
        .is_ok();
    assert!(
        have || !require,
        "lstopo-no-graphics missing (apt-get install hwloc)"
    );
    have
}
