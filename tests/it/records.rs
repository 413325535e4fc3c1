//! Every record under fixtures/records/ (real machines' files that someone else published,
//! each with its source and licence in its folder) replays through `topo --from` and
//! `check --from`: the matrix and each finding's status are snapshotted, no pass may rest only
//! on what the format does not carry, and the answers the sources themselves state are checked
//! (in each format's parser tests and below).

use crate::{gpudoctor, repo};
use std::path::PathBuf;

/// Each record input: (fixture folder name, path relative to the repository).
pub fn record_inputs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let dir = repo().join("fixtures/records");
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures/records exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for f in folders {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&f)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let n = crate::name(p);
                !(n == "README.md" || n.starts_with("LICENSE") || n.starts_with("COPYING"))
            })
            .collect();
        files.sort();
        for p in files {
            out.push((
                crate::name(&f),
                p.strip_prefix(repo()).unwrap().display().to_string(),
            ));
        }
    }
    out
}

fn run(args: &[&str]) -> (i32, String) {
    let o = gpudoctor()
        .args(args)
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    let code = o.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "{args:?} exited {code}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (code, String::from_utf8(o.stdout).unwrap())
}

#[test]
fn every_record_has_its_provenance() {
    let dir = repo().join("fixtures/records");
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if !p.is_dir() {
            continue;
        }
        let names: Vec<String> = std::fs::read_dir(&p)
            .unwrap()
            .map(|e| crate::name(&e.unwrap().path()))
            .collect();
        assert!(
            names.iter().any(|n| n == "README.md"),
            "{}: no README.md naming the source",
            p.display()
        );
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("LICENSE") || n.starts_with("COPYING") || n == "README.md"),
            "{}: no licence",
            p.display()
        );
    }
}

#[test]
fn every_record_replays_and_no_pass_rests_on_what_it_lacks() {
    let inputs = record_inputs();
    assert!(inputs.len() >= 8, "{inputs:?}");
    for (folder, path) in &inputs {
        let (_, topo) = run(&["topo", "--from", path, "--json"]);
        let t: serde_json::Value = serde_json::from_str(&topo).unwrap();
        let format = t["source"]["format"].as_str().unwrap().to_string();
        let lacks = match format.as_str() {
            "bug-report" => "not in an nvidia-bug-report log",
            "lspci" => "not in an lspci listing",
            "hwloc" => "not in an hwloc XML",
            "nccl" => "not in an NCCL topology XML",
            f => panic!("{path}: format {f}"),
        };
        let (_, matrix) = run(&["topo", "--from", path, "--matrix", "--tsv"]);
        let (_, check) = run(&["check", "--from", path, "--json"]);
        let c: serde_json::Value = serde_json::from_str(&check).unwrap();
        let mut lines = Vec::new();
        for f in c["checks"].as_array().unwrap() {
            lines.push(format!(
                "{} {} {}",
                f["status"].as_str().unwrap(),
                f["id"].as_str().unwrap(),
                f["subject"].as_str().unwrap()
            ));
            if f["status"] == "pass" {
                let ev = f["evidence"].as_array().cloned().unwrap_or_default();
                assert!(
                    ev.is_empty() || ev.iter().any(|e| !e["value"].to_string().contains(lacks)),
                    "{path}: a pass rests only on facts {format} does not carry: {f}"
                );
                assert!(
                    !f["message"].as_str().unwrap().contains(lacks),
                    "{path}: a pass names a fact {format} does not carry: {f}"
                );
            }
        }
        let name = format!(
            "record__{folder}__{}",
            crate::name(std::path::Path::new(path)).replace('.', "_")
        );
        insta::assert_snapshot!(
            name,
            format!("{matrix}\n--- check --from {path}\n{}\n", lines.join("\n"))
        );
    }
}

#[test]
fn a_record_without_its_format_is_one_error_line_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage.txt", b"hello, this is not a machine\n".to_vec()),
        ("empty.xml", Vec::new()),
        (
            "dtd.xml",
            b"<?xml version=\"1.0\"?><!DOCTYPE t [<!ENTITY a \"aaaa\"><!ENTITY b \"&a;&a;&a;&a;\">]><topology version=\"2.0\">&b;</topology>".to_vec(),
        ),
        ("truncated.xml", b"<topology version=\"2.0\"><object type=\"Machine\"".to_vec()),
        ("bad.gz", vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3]),
        (
            "deep.xml",
            format!(
                "<system version=\"1\">{}{}</system>",
                "<pci busid=\"0000:01:00.0\">".repeat(5000),
                "</pci>".repeat(5000)
            )
            .into_bytes(),
        ),
        (
            "no-lspci.log",
            b"nvidia-bug-report.sh will now collect information\n____________\n\n*** /proc/cmdline\nro quiet\n".to_vec(),
        ),
    ];
    for (name, bytes) in cases {
        let p = d.path().join(name);
        std::fs::write(&p, &bytes).unwrap();
        let started = std::time::Instant::now();
        let o = gpudoctor()
            .args(["topo", "--from", p.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(o.stdout.is_empty(), "{name}");
        assert!(err.starts_with("gpudoctor: error: "), "{name}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(started.elapsed().as_secs() < 10, "{name}: slow");
    }
    // A FIFO is refused, not waited on.
    let fifo = d.path().join("fifo.xml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let o = gpudoctor()
        .args(["topo", "--from", fifo.to_str().unwrap()])
        .timeout(std::time::Duration::from_secs(10))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn gzip_records_are_read_and_bombs_refused() {
    use std::io::Write;
    let d = tempfile::tempdir().unwrap();
    let src = std::fs::read(repo().join("fixtures/records/hwloc-dgx2/nvidiaDGX2.xml")).unwrap();
    let gz = d.path().join("dgx2.xml.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(&src).unwrap();
    std::fs::write(&gz, e.finish().unwrap()).unwrap();
    let (_, plain) = run(&[
        "topo",
        "--from",
        "fixtures/records/hwloc-dgx2/nvidiaDGX2.xml",
        "--matrix",
        "--tsv",
    ]);
    let (_, unzipped) = run(&["topo", "--from", gz.to_str().unwrap(), "--matrix", "--tsv"]);
    assert_eq!(plain, unzipped);
    // 200 MiB of zeros in a ~200 KiB gzip: refused at the record limit, bounded memory.
    let bomb = d.path().join("bomb.log.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![b'0'; 1 << 20];
    for _ in 0..200 {
        e.write_all(&zeros).unwrap();
    }
    std::fs::write(&bomb, e.finish().unwrap()).unwrap();
    let o = gpudoctor()
        .args(["topo", "--from", bomb.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("refused"));
}

/// The GPUs and NICs each invented switch of a cloud provider's NCCL topology file groups, as
/// the file itself states them (classes 0x03xxxx and 0x02xxxx under one bridge `<pci>`).
fn provider_groups(path: &str) -> Vec<(u32, Vec<String>, Vec<String>)> {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let mut out = Vec::new();
    for cpu in doc.descendants().filter(|n| n.has_tag_name("cpu")) {
        let numa: u32 = cpu.attribute("numaid").unwrap().parse().unwrap();
        for sw in cpu.children().filter(|n| n.has_tag_name("pci")) {
            let (mut gpus, mut nics) = (Vec::new(), Vec::new());
            for d in sw.children().filter(|n| n.has_tag_name("pci")) {
                let class = d.attribute("class").unwrap_or("");
                let busid = d.attribute("busid").unwrap().to_string();
                if class.starts_with("0x03") {
                    gpus.push(busid);
                } else if class.starts_with("0x02") {
                    nics.push(busid);
                }
            }
            out.push((numa, gpus, nics));
        }
    }
    out
}

/// Azure (ND A100 v4, ND H100 v5) and AWS (p4d.24xlarge) state which NICs share a PCIe switch
/// with which GPU; gpudoctor's closest NICs from the same file must be exactly those, at PIX,
/// and every GPU-NIC pair across sockets SYS.
#[test]
fn cloud_topology_files_pair_each_gpu_with_the_nics_its_switch_holds() {
    for path in [
        "fixtures/records/azure-ndv4/ndv4-topo.xml",
        "fixtures/records/azure-ndv5/ndv5-topo.xml",
        "fixtures/records/aws-p4d/p4d-24xl-topo.xml",
    ] {
        let groups = provider_groups(path);
        let gpus: usize = groups.iter().map(|g| g.1.len()).sum();
        assert_eq!(gpus, 8, "{path}");
        let (_, out) = run(&["topo", "--from", path, "--json"]);
        let t: serde_json::Value = serde_json::from_str(&out).unwrap();
        let topo = &t["topology"];
        let label_bdf = |list: &str, label: &str| -> String {
            topo[list]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["label"] == label)
                .unwrap()["bdf"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let numa_of_gpu = |bdf: &str| {
            groups
                .iter()
                .find(|g| g.1.iter().any(|b| b == bdf))
                .unwrap()
                .0
        };
        for c in topo["closest_nics"].as_array().unwrap() {
            let gpu = label_bdf("gpus", c["gpu"].as_str().unwrap());
            let mut got: Vec<String> = c["nics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| label_bdf("nics", n.as_str().unwrap()))
                .collect();
            got.sort();
            let mut want = groups
                .iter()
                .find(|g| g.1.contains(&gpu))
                .unwrap()
                .2
                .clone();
            want.sort();
            assert_eq!(got, want, "{path}: closest NICs of {gpu}");
            assert_eq!(c["path"], "PIX", "{path}: {gpu}");
            assert_eq!(c["certain"], true, "{path}: {gpu}");
        }
        // Across sockets: SYS, as the file's <cpu> grouping puts them.
        let (_, tsv) = run(&["topo", "--from", path, "--matrix", "--tsv"]);
        let rows: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
        let header = &rows[0];
        for r in rows
            .iter()
            .skip(1)
            .filter(|r| r[0].trim().starts_with("GPU"))
        {
            let gpu = label_bdf("gpus", r[0].trim());
            for (i, cell) in r.iter().enumerate().skip(1) {
                let Some(col) = header.get(i).map(|h| h.trim()) else {
                    continue;
                };
                if !col.starts_with("NIC") {
                    continue;
                }
                let nic = label_bdf("nics", col);
                let nic_numa = groups.iter().find(|g| g.2.contains(&nic)).unwrap().0;
                if nic_numa != numa_of_gpu(&gpu) {
                    assert_eq!(cell.trim(), "SYS", "{path}: {gpu} - {nic}");
                }
            }
        }
    }
}

/// hwloc's test machine SL390s G7 exported by hwloc 1.11, 2.14 and master: one machine, one
/// answer; the file shows three NVIDIA GPUs and mlx4_0 on 0000:05:00.0.
#[test]
fn one_machine_in_three_hwloc_versions_maps_the_same() {
    let mut seen = Vec::new();
    for v in ["v1", "v2", "v3"] {
        let path = format!("fixtures/records/hwloc-sl390s/24em64t-2n6c2t-pci.{v}.xml");
        let (_, tsv) = run(&["topo", "--from", &path, "--matrix", "--tsv"]);
        let (_, json) = run(&["topo", "--from", &path, "--json"]);
        let t: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(t["topology"]["gpus"].as_array().unwrap().len(), 3, "{path}");
        let nics = t["topology"]["nics"].as_array().unwrap();
        assert!(
            nics.iter()
                .any(|n| n["rdma_device"] == "mlx4_0" && n["bdf"] == "0000:05:00.0"),
            "{path}: {nics:?}"
        );
        seen.push(tsv);
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1], seen[2]);
}

/// The NCCL reader's cpumap decoding is the exact inverse of `export nccl-topo`'s writer.
#[test]
fn nccl_cpumaps_round_trip_with_the_exporter() {
    for l in ["0-15,32-47", "40", "0-95", "1,3,5"] {
        let map = gpudoctor::export::nccl::cpumap(l).unwrap();
        assert_eq!(
            gpudoctor::source::nccl_xml::cpumap_to_cpulist(&map).unwrap(),
            l
        );
    }
}

/// Both XML readers (hwloc, NCCL) refuse entity expansion and nesting 10,000 deep, quickly.
#[test]
fn hostile_xml_refused_by_both_readers() {
    use gpudoctor::source::record::{MachineRecord, RecordError};
    use gpudoctor::source::{hwloc, nccl_xml};
    let mut lol = String::from("<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [<!ENTITY l0 \"lol\">");
    for i in 1..10 {
        lol += &format!("<!ENTITY l{i} \"{}\">", format!("&l{};", i - 1).repeat(10));
    }
    lol += "]>\n";
    let deep = |open: &str, close: &str| format!("{}{}", open.repeat(10_000), close.repeat(10_000));
    type Reader = fn(&str) -> Result<MachineRecord, RecordError>;
    let cases: [(&str, Reader, String); 4] = [
        (
            "hwloc entities",
            hwloc::parse,
            format!("{lol}<topology><object type=\"Machine\" name=\"&l9;\"/></topology>"),
        ),
        (
            "hwloc depth",
            hwloc::parse,
            format!(
                "<topology>{}</topology>",
                deep("<object type=\"Group\">", "</object>")
            ),
        ),
        (
            "nccl entities",
            nccl_xml::parse,
            format!("{lol}<system version=\"1\"><cpu numaid=\"&l9;\"/></system>"),
        ),
        (
            "nccl depth",
            nccl_xml::parse,
            format!(
                "<system version=\"1\"><cpu numaid=\"0\">{}</cpu></system>",
                deep("<pci busid=\"0000:00:00.0\">", "</pci>")
            ),
        ),
    ];
    for (name, read, text) in cases {
        let t = std::time::Instant::now();
        assert!(
            matches!(read(&text), Err(RecordError::Refused(_))),
            "{name}"
        );
        assert!(t.elapsed() < std::time::Duration::from_secs(2), "{name}");
    }
}

/// Each `<gpu gdr>` of an NCCL file, by the busid of the `<pci>` holding it.
fn nccl_gpu_gdr(path: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    // hwloc files start with a DTD; only NCCL's <system> files carry gdr attributes.
    let Ok(doc) = roxmltree::Document::parse(&text) else {
        return Vec::new();
    };
    if !doc.root_element().has_tag_name("system") {
        return Vec::new();
    }
    doc.descendants()
        .filter(|n| n.has_tag_name("gpu"))
        .filter_map(|g| {
            let gdr = g.attribute("gdr")?.to_string();
            let busid = g.parent()?.attribute("busid")?.to_string();
            Some((busid, gdr))
        })
        .collect()
}

/// The gdr.nccl-agrees findings of `check --from path` (exit code, findings).
fn nccl_agrees(args: &[&str]) -> (i32, Vec<serde_json::Value>) {
    let (code, check) = run(args);
    let c: serde_json::Value = serde_json::from_str(&check).unwrap();
    let found = c["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "gdr.nccl-agrees")
        .cloned()
        .collect();
    (code, found)
}

/// Every real NCCL dump with `gdr` attributes: one gdr.nccl-agrees finding per GPU NCCL wrote a
/// verdict for, showing NCCL's value as the file has it; where gpudoctor agrees it passes, where
/// it does not the disagreement warns and the fixture's README explains the difference. The
/// IBM H100 VM file states gdr="1" on every GPU and NIC: all 8 agree.
#[test]
fn nccl_dumps_gdr_verdicts_beside_gpudoctors() {
    let mut checked = 0;
    for (folder, path) in record_inputs() {
        if !path.ends_with(".xml") {
            continue;
        }
        let file_gdr = nccl_gpu_gdr(&path);
        if file_gdr.is_empty() {
            continue;
        }
        checked += 1;
        let (_, topo) = run(&["topo", "--from", &path, "--json"]);
        let t: serde_json::Value = serde_json::from_str(&topo).unwrap();
        let label_of = |bdf: &str| -> String {
            t["topology"]["gpus"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["bdf"] == bdf)
                .map(|g| g["label"].as_str().unwrap().to_string())
                .unwrap_or_else(|| bdf.to_string())
        };
        let (_, found) = nccl_agrees(&["check", "--from", &path, "--json"]);
        assert_eq!(found.len(), file_gdr.len(), "{path}: {found:?}");
        let readme = std::fs::read_to_string(
            repo()
                .join("fixtures/records")
                .join(&folder)
                .join("README.md"),
        )
        .unwrap();
        for (bdf, gdr) in &file_gdr {
            let label = label_of(bdf);
            let f = found
                .iter()
                .find(|f| f["subject"] == label.as_str())
                .unwrap_or_else(|| panic!("{path}: no finding for {bdf} ({label})"));
            let ev = f["evidence"].to_string();
            assert!(
                ev.contains(&format!("NCCL <gpu gdr>\",\"value\":\"{gdr} (")),
                "{path}: {label} does not show NCCL's gdr={gdr}: {f}"
            );
            match f["status"].as_str().unwrap() {
                "pass" => {}
                "warn" => assert!(
                    readme.contains("disagree") && readme.contains(bdf.as_str()),
                    "{path}: {label} disagrees, and the README does not explain it: {f}"
                ),
                s => panic!("{path}: {label} {s}: {f}"),
            }
        }
        if folder == "ibm-vpc-h100" {
            assert!(found.iter().all(|f| f["status"] == "pass"), "{found:?}");
            // The NICs' gdr="1" is shown, never compared: the file carries no memory-path facts.
            for f in &found {
                let ev = f["evidence"].to_string();
                assert!(ev.contains("NCCL <net gdr>=1"), "{f}");
                assert!(
                    ev.contains("NCCL's attributes yes, gpudoctor unknown"),
                    "{f}"
                );
                assert!(
                    f["message"].as_str().unwrap().contains("not compared"),
                    "{f}"
                );
            }
        }
    }
    assert!(
        checked >= 1,
        "no NCCL dump with gdr attributes under fixtures/records"
    );
}

/// Sources that carry no NCCL verdict skip gdr.nccl-agrees with the reason, not applicable:
/// other formats, and a provider's hand-written NCCL_TOPO_FILE without <gpu gdr>.
#[test]
fn nccl_verdict_skips_where_the_source_carries_none() {
    for (path, why) in [
        (
            "fixtures/records/azure-ndv5/ndv5-topo.xml",
            "has no <gpu gdr> attribute",
        ),
        (
            "fixtures/records/hwloc-dgx2/nvidiaDGX2.xml",
            "An hwloc XML carries no NCCL GPUDirect verdict",
        ),
        (
            "fixtures/records/pciutils-gp108m/lspci-vvvxxxx.txt",
            "An lspci listing carries no NCCL GPUDirect verdict",
        ),
    ] {
        let (_, found) = nccl_agrees(&["check", "--from", path, "--json"]);
        assert_eq!(found.len(), 1, "{path}: {found:?}");
        let f = &found[0];
        assert_eq!(
            (f["status"].as_str(), f["subject"].as_str()),
            (Some("skip"), Some("host")),
            "{f}"
        );
        assert_eq!(f["skip"], "not-applicable", "{f}");
        assert!(f["message"].as_str().unwrap().contains(why), "{path}: {f}");
    }
}

/// A dump in NCCL's shape written for this test (no public dump of a GeForce machine with
/// `gdr` attributes was found to keep as a fixture): an RTX 4090 (10de:2684) beside a ConnectX-7.
fn geforce_dump(gdr: &str) -> String {
    format!(
        r#"<system version="1">
  <cpu numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="17">
    <pci busid="0000:40:01.1" class="0x060400" vendor="0x1022" device="0x14ab" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:41:00.0" class="0x030000" vendor="0x10de" device="0x2684" subsystem_vendor="0x10de" subsystem_device="0x165b" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="89" rank="0" gdr="{gdr}"/>
      </pci>
      <pci busid="0000:42:00.0" class="0x020000" vendor="0x15b3" device="0x1021" link_speed="32.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" guid="0x1" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
</system>
"#
    )
}

/// A GeForce GPU: NCCL's gdr="0" agrees with gpudoctor's table (consumer parts never do
/// GPUDirect RDMA); a gdr="1" on it is a disagreement that warns, naming both reasons, and
/// `--deny gdr.nccl-agrees` turns it into a failure a pipeline stops on.
#[test]
fn nccl_verdict_on_a_geforce_agrees_or_warns() {
    let dir = tempfile::tempdir().unwrap();
    for (gdr, status) in [("0", "pass"), ("1", "warn")] {
        let path = dir.path().join(format!("geforce-gdr{gdr}.xml"));
        std::fs::write(&path, geforce_dump(gdr)).unwrap();
        let p = path.to_str().unwrap();
        let (_, found) = nccl_agrees(&["check", "--from", p, "--json"]);
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!(f["status"], status, "{f}");
        assert_eq!(f["subject"], "GPU0", "{f}");
        let msg = f["message"].as_str().unwrap();
        if status == "warn" {
            assert!(
                msg.contains("gdr=1") && msg.contains("GeForce RTX 4090"),
                "{msg}"
            );
            assert!(f["remediation"].is_string(), "{f}");
            let (code, _) =
                nccl_agrees(&["check", "--from", p, "--json", "--deny", "gdr.nccl-agrees"]);
            assert_eq!(code, 1);
        } else {
            assert!(msg.contains("<gpu gdr>=0 agrees"), "{msg}");
        }
    }
}

/// The statuses of `check --from path --json`, by (check id, subject).
fn statuses(path: &str) -> Vec<(String, String, String, String)> {
    let (_, check) = run(&["check", "--from", path, "--json"]);
    let c: serde_json::Value = serde_json::from_str(&check).unwrap();
    c["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_string(),
                f["subject"].as_str().unwrap().to_string(),
                f["status"].as_str().unwrap().to_string(),
                f["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// What an NCCL topology XML cannot show never passes: whether NVML answered (its GPUs are its
/// PCI devices, one list, so no count comparison), whether an NVLink is down (NCCL writes only
/// active links), and a "flat" tree's ACS (NCCL leaves root ports out). On every NCCL record.
#[test]
fn nccl_files_never_pass_on_what_nccl_leaves_out() {
    let mut seen = 0;
    for (_, path) in record_inputs() {
        let (_, topo) = run(&["topo", "--from", &path, "--json"]);
        let t: serde_json::Value = serde_json::from_str(&topo).unwrap();
        if t["source"]["format"] != "nccl" {
            continue;
        }
        seen += 1;
        for (id, subject, status, msg) in statuses(&path) {
            if matches!(
                id.as_str(),
                "driver.nvml" | "driver.gpu-count" | "gpu.nvlink-down"
            ) || (id == "pcie.acs-redirect" && msg.contains("flat"))
            {
                assert_ne!(status, "pass", "{path}: {id} {subject} passed: {msg}");
            }
            if id == "gpu.nvlink-down" && msg.contains("listed") {
                assert!(
                    msg.contains("writes only the links it found active"),
                    "{msg}"
                );
            }
        }
    }
    assert!(seen >= 4, "{seen} NCCL records");
}

/// A real NCCL 2.30.4 dump of two A100 PCIe and one ConnectX-6 Dx whose log says NCCL used no
/// GPUDirect RDMA ("use ring PXN 0 GDR 0", channels via NET/IB without /GDRDMA): gpudoctor
/// does not call either GPU's pairing GPUDirect-ready (GPU0 at NODE, beyond NCCL's default
/// level: warn; GPU1 across sockets: fail), agrees with NCCL's gdr="1" on both GPUs and shows
/// the NICs' gdr="0" beside its own unknown memory path.
#[test]
fn nccl_a100_roce_dump_matches_nccls_no_gdr_decision() {
    let path = "fixtures/records/nccl-a100-roce/ubuntu2-topo.xml";
    let (_, matrix) = run(&["topo", "--from", path, "--matrix", "--tsv"]);
    let row = |name: &str| -> Vec<String> {
        matrix
            .lines()
            .find(|l| l.starts_with(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no {name} row in {matrix}"))
            .split('\t')
            .map(|c| c.trim().to_string())
            .collect()
    };
    // Columns: name, GPU0, GPU1, NIC0, NIC1, ...
    assert_eq!(&row("GPU0")[3..5], ["NODE", "NODE"], "{matrix}");
    assert_eq!(&row("GPU1")[3..5], ["SYS", "SYS"], "{matrix}");
    let found = statuses(path);
    let status = |id: &str, subject: &str| -> String {
        found
            .iter()
            .find(|f| f.0 == id && f.1 == subject)
            .unwrap_or_else(|| panic!("no {id} on {subject}: {found:?}"))
            .2
            .clone()
    };
    assert_eq!(status("topo.gpu-nic-pairing", "GPU0"), "warn");
    assert_eq!(status("topo.gpu-nic-pairing", "GPU1"), "fail");
    assert_eq!(status("numa.gpu-nic", "GPU0"), "pass");
    assert_eq!(status("numa.gpu-nic", "GPU1"), "fail");
    let (_, agrees) = nccl_agrees(&["check", "--from", path, "--json"]);
    assert_eq!(agrees.len(), 2, "{agrees:?}");
    for f in &agrees {
        assert_eq!(f["status"], "pass", "{f}");
        assert!(
            f["evidence"].to_string().contains("NCCL <net gdr>=0"),
            "{f}"
        );
    }
}

/// Azure's NC A100 v4 file: a VM whose GPUs show link width "0" and speed "": unknown, never
/// "trained below capability"; its <nvlink>s name their own GPU, so no NVLink joins two GPUs;
/// NCCL's gdr="1" on the four A100 agrees with gpudoctor; no RDMA NIC to pair with.
#[test]
fn azure_ncv4_vm_widths_unknown_and_self_links_not_counted() {
    let path = "fixtures/records/azure-ncv4/ncv4-topo.xml";
    let (_, topo) = run(&["topo", "--from", path, "--json"]);
    let t: serde_json::Value = serde_json::from_str(&topo).unwrap();
    let notes = t["source"]["notes"].to_string();
    assert!(notes.contains("naming its own GPU"), "{notes}");
    assert!(notes.contains("and 1 more"), "{notes}");
    let (_, matrix) = run(&["topo", "--from", path, "--matrix", "--tsv"]);
    let grid: Vec<&str> = matrix.lines().filter(|l| l.starts_with("GPU")).collect();
    assert_eq!(grid.len(), 4, "{matrix}");
    assert!(grid.iter().all(|l| !l.contains("NV")), "{matrix}");
    let found = statuses(path);
    for (id, subject, status, msg) in &found {
        if id == "pcie.link-width" || id == "pcie.link-speed" {
            assert_eq!(status, "skip", "{id} {subject}: {msg}");
            assert!(msg.contains("unknown"), "{msg}");
        }
        if id == "gdr.nccl-agrees" {
            assert_eq!(status, "pass", "{subject}: {msg}");
        }
    }
    assert_eq!(
        found.iter().filter(|f| f.0 == "gdr.nccl-agrees").count(),
        4,
        "{found:?}"
    );
}
