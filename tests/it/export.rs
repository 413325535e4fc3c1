//! `--format prometheus` checked by Prometheus' own tools: `promtool check metrics` lints every
//! fixture's output, and a real `prometheus-node-exporter` serves a written file through its
//! textfile collector, scraped over loopback. `--format junit` parses as XML with the right
//! counts. Fails (rather than skips) when GPUDOCTOR_REQUIRE_PROMETHEUS=1 and the tools are
//! missing; scripts/test installs them (Debian: prometheus, prometheus-node-exporter).

use crate::{all_sources, gpudoctor, repo};
use std::io::{Read, Write};
use std::process::{Command, Stdio};

fn have(tool: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            std::env::var("GPUDOCTOR_REQUIRE_PROMETHEUS").as_deref() != Ok("1"),
            "{tool} missing (apt-get install prometheus prometheus-node-exporter)"
        );
        eprintln!("{tool} not installed: skipped");
    }
    found
}

/// `promtool check metrics` on `text`: (success, its complaints).
fn promtool(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn check_prom(src: &[String]) -> String {
    let o = gpudoctor()
        .args(src)
        .args(["check", "--format", "prometheus"])
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{src:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn check_prom_all(src: &[String]) -> String {
    let o = gpudoctor()
        .args(src)
        .args(["check", "--format", "prometheus", "--all-series"])
        .output()
        .unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{src:?}");
    String::from_utf8(o.stdout).unwrap()
}

/// The default series stay small on a DGX-class node (the goal: at most 300 lines on
/// the 8-GPU HGX fixture; the full state sets are over a thousand), and a failing GPU finding
/// carries DCGM exporter's labels for that GPU.
#[test]
fn default_series_are_few_and_join_dcgm() {
    let src = vec!["--root".to_string(), "fixtures/hgx-h100-8gpu".to_string()];
    let text = check_prom(&src);
    let n = text.lines().count();
    assert!(n <= 300, "{n} lines:\n{text}");
    assert!(check_prom_all(&src).lines().count() > 1000);
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("gpudoctor_finding{check=\"pcie.link-speed\",subject=\"0000:c3:00.0\"")
        })
        .expect("the 8-GPU fixture's Gen4 GPU is a finding");
    for want in [
        "status=\"warn\"",
        "gpu=\"5\"",
        "UUID=\"GPU-",
        "pci_bus_id=\"00000000:C3:00.0\"",
    ] {
        assert!(line.contains(want), "{want} in {line}");
    }
}

/// The shipped alert and recording rules load (`promtool check rules`) and fire on the series
/// gpudoctor writes (`promtool test rules`: a failing node, a node it cannot check, a stopped
/// timer; quiet on a healthy node).
#[test]
fn shipped_rules_check_and_fire() {
    if !have("promtool") {
        return;
    }
    let dir = repo().join("deploy/prometheus");
    for args in [
        vec!["check", "rules", "gpudoctor.rules.yml"],
        vec!["test", "rules", "gpudoctor.rules.test.yml"],
    ] {
        let o = Command::new("promtool")
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn promtool_accepts_every_fixture() {
    if !have("promtool") {
        return;
    }
    for (n, src) in all_sources() {
        let text = check_prom(&src);
        let (ok, why) = promtool(&text);
        assert!(ok && why.trim().is_empty(), "{n}: promtool: {why}\n{text}");
        // By default no per-finding state sets; every finding that is not a pass (nor a
        // not-applicable skip) is one series.
        assert!(!text.contains("gpudoctor_check_status"), "{n}");
        let report: serde_json::Value = serde_json::from_slice(
            &gpudoctor()
                .args(&src)
                .args(["check", "--json"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let notable = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| {
                f["status"] == "warn"
                    || f["status"] == "fail"
                    || (f["status"] == "skip"
                        && (f["skip"] == "unknown" || f["skip"] == "not-root"))
            })
            .count();
        let series = text
            .lines()
            .filter(|l| l.starts_with("gpudoctor_finding{"))
            .count();
        assert_eq!(
            series, notable,
            "{n}: one gpudoctor_finding per notable finding"
        );
        let text = check_prom_all(&src);
        let (ok, why) = promtool(&text);
        assert!(ok && why.trim().is_empty(), "{n}: promtool: {why}\n{text}");
        // The state set is complete: exactly one status is 1 per (check, subject).
        let ones = text
            .lines()
            .filter(|l| l.starts_with("gpudoctor_check_status{") && l.ends_with(" 1"))
            .count();
        let all = text
            .lines()
            .filter(|l| l.starts_with("gpudoctor_check_status{"))
            .count();
        assert_eq!(all, ones * 4, "{n}");
        assert!(text.contains("gpudoctor_info{version=\""), "{n}");
    }
    // Probe reports: the recorded ones (rendered by the library) and a live run here (no
    // CUDA on this machine gives a clean skip report).
    for f in ["h2d", "d2h", "p2p", "dmabuf-export"] {
        let path = repo().join(format!("fixtures/h200x2-live/probes/{f}.json"));
        let r: gpudoctor::probes::ProbeReport =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let text = gpudoctor::export::prometheus::probe(&r);
        let (ok, why) = promtool(&text);
        assert!(ok && why.trim().is_empty(), "{f}: {why}\n{text}");
    }
    let o = gpudoctor()
        .args(["probe", "h2d", "--format", "prometheus"])
        .output()
        .unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("gpudoctor_probe_status{probe=\"h2d\""),
        "{text}"
    );
    let (ok, why) = promtool(&text);
    assert!(ok, "{why}");
}

/// Known values come through as numbers: the recorded H200 pair's p2p median, in bytes/s.
#[test]
fn probe_bandwidth_is_in_bytes_per_second() {
    let path = repo().join("fixtures/h200x2-live/probes/p2p.json");
    let r: gpudoctor::probes::ProbeReport =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let want = r.measurements[0]
        .evaluation
        .stats
        .as_ref()
        .unwrap()
        .median_gbps
        * 1e9;
    let text = gpudoctor::export::prometheus::probe(&r);
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("gpudoctor_probe_bandwidth_bytes_per_second{probe=\"p2p\",method=\"copy-engine\",src=\"GPU0\",dst=\"GPU1\"}")
        })
        .unwrap();
    let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((v - want).abs() < 1.0, "{v} vs {want}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn node_exporter_serves_the_textfile() {
    if !have("prometheus-node-exporter") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The README's recipe: `check --textfile DIR` replaces DIR/gpudoctor.prom whatever the
    // verdict (here exit 1: a failing node must reach Prometheus).
    let o = gpudoctor()
        .args([
            "--bundle",
            "fixtures/variants/pcie-2socket-roce--gpu-x8/bundle.tar.gz",
            "check",
            "--quiet",
            "--textfile",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("FAIL"),
        "stdout keeps the text report"
    );
    let body = scrape(dir.path());
    // node_exporter sorts the labels; the GPU's DCGM labels come with it.
    assert!(
        body.lines().any(|l| l.starts_with("gpudoctor_finding{")
            && l.contains("check=\"pcie.link-width\"")
            && l.contains("status=\"fail\"")
            && l.contains("subject=\"0000:21:00.0\"")
            && l.ends_with(" 1")),
        "{body}"
    );
    assert!(
        body.contains("gpudoctor_status{status=\"fail\"} 1"),
        "{body}"
    );
    assert!(body.contains("gpudoctor_up 1"), "{body}");
    assert!(body.contains("gpudoctor_exit_code 1"), "{body}");
    assert!(body.contains("gpudoctor_info{"), "{body}");
    let ts: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("gpudoctor_last_run_timestamp_seconds "))
        .expect("timestamp")
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - ts).abs() < 600.0, "{ts} vs {now}");
    // gpudoctor cannot run (no sysfs there): exit 2, and the file says so instead of serving
    // the last verdict.
    let o = gpudoctor()
        .args(["--root", "/nonexistent-tree", "check", "--textfile"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let body = scrape(dir.path());
    assert!(body.contains("gpudoctor_up 0"), "{body}");
    assert!(body.contains("gpudoctor_exit_code 2"), "{body}");
    assert!(body.contains("gpudoctor_error_info{reason=\""), "{body}");
    assert!(!body.contains("gpudoctor_status{"), "{body}");
    // Only gpudoctor.prom is left in the directory (no temporary files), readable by others.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["gpudoctor.prom"]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("gpudoctor.prom"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
}

/// What a real node_exporter serves from `dir` through its textfile collector, scraped over
/// loopback; it must have read the file without error.
fn scrape(dir: &std::path::Path) -> String {
    let port = free_port();
    let exporter = Killed(
        Command::new("prometheus-node-exporter")
            .arg("--collector.disable-defaults")
            .arg("--collector.textfile")
            .arg(format!("--collector.textfile.directory={}", dir.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut body = None;
    for _ in 0..100 {
        if let Some(b) = http_get(port, "/metrics") {
            body = Some(b);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(exporter);
    let body = body.expect("node exporter answered on loopback");
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    // The textfile collector read the file without error.
    assert!(body.contains("node_textfile_scrape_error 0"), "{body}");
    body
}

#[test]
fn junit_parses_and_counts() {
    for (n, src) in all_sources().into_iter().take(8) {
        let jv = |extra: &[&str]| {
            let o = gpudoctor()
                .args(&src)
                .args(["check", "--format", "junit"])
                .args(extra)
                .output()
                .unwrap();
            String::from_utf8(o.stdout).unwrap()
        };
        let xml = jv(&[]);
        let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{n}: {e}\n{xml}"));
        let o = gpudoctor()
            .args(&src)
            .args(["check", "--json"])
            .output()
            .unwrap();
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let cases = doc
            .descendants()
            .filter(|d| d.has_tag_name("testcase"))
            .count();
        assert_eq!(cases, r["checks"].as_array().unwrap().len(), "{n}");
        let failures = doc
            .descendants()
            .filter(|d| d.has_tag_name("failure"))
            .count();
        assert_eq!(
            failures as u64,
            r["summary"]["fail"].as_u64().unwrap(),
            "{n}"
        );
        let skipped = doc
            .descendants()
            .filter(|d| d.has_tag_name("skipped"))
            .count();
        assert_eq!(
            skipped as u64,
            r["summary"]["skip"].as_u64().unwrap(),
            "{n}"
        );
        // --strict turns warnings into failures, as it does for the exit code.
        let strict = roxmltree::Document::parse(&jv(&["--strict"]))
            .unwrap()
            .descendants()
            .filter(|d| d.has_tag_name("failure"))
            .count();
        assert_eq!(
            strict as u64,
            r["summary"]["fail"].as_u64().unwrap() + r["summary"]["warn"].as_u64().unwrap(),
            "{n}"
        );
    }
}

#[test]
fn junit_is_refused_for_probes() {
    let o = gpudoctor()
        .args(["probe", "h2d", "--format", "junit"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--format junit is for `check`"));
}

/// NCCL's parent chain of a device (src/graph/xml.cc, ncclTopoGetXmlFromSys): the bridge two
/// levels up its upstream chain, then that bridge's, and so on; the CPU where fewer than two
/// bridges are left. Returns the kept bridges nearest first, and the device whose parent is
/// the CPU (its NUMA node is the `<cpu>`'s).
fn nccl_chain(upstream: &[String], bdf: &str) -> (Vec<String>, String) {
    let mut kept = Vec::new();
    let mut k = upstream.len();
    let mut top = bdf.to_string();
    while k >= 2 {
        k -= 2;
        kept.push(upstream[k].clone());
        top = upstream[k].clone();
    }
    (kept, top)
}

/// `export nccl-topo` on every fixture: the tree NCCL builds (each GPU and NIC under its
/// switch's upstream port, or the CPU of its NUMA node; no root ports, no downstream ports),
/// in the narrow lexical form NCCL's hand-written parser reads (src/graph/xml.cc: no
/// declaration, one element per line, double-quoted attributes separated by single spaces).
#[test]
fn nccl_topo_export_matches_the_topology() {
    for (n, src) in all_sources() {
        let o = gpudoctor()
            .args(&src)
            .args(["export", "nccl-topo"])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{n}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let xml = String::from_utf8(o.stdout).unwrap();
        for line in xml.lines() {
            let t = line.trim_start();
            let ok =
                (t.starts_with("<!--") && t.ends_with("-->") && !t[4..t.len() - 3].contains("--"))
                    || lexically_nccl(t);
            assert!(ok, "{n}: NCCL's parser would not read: {line}");
        }
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let system = doc.root_element();
        assert_eq!(system.tag_name().name(), "system");
        assert_eq!(system.attribute("version"), Some("1"));
        let t = gpudoctor()
            .args(&src)
            .args(["topo", "--json"])
            .output()
            .unwrap();
        let topo: serde_json::Value = serde_json::from_slice(&t.stdout).unwrap();
        let topo = &topo["topology"];
        let device = |bdf: &str| {
            topo["devices"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["bdf"] == bdf)
                .unwrap()
                .clone()
        };
        let check_pci = |pci: roxmltree::Node, bdf: &str| {
            let d = device(bdf);
            let up: Vec<String> = d["upstream"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_str().unwrap().to_string())
                .collect();
            let (want, top) = nccl_chain(&up, bdf);
            let got: Vec<String> = pci
                .ancestors()
                .skip(1)
                .filter(|a| a.has_tag_name("pci"))
                .map(|a| a.attribute("busid").unwrap().to_string())
                .collect();
            assert_eq!(got, want, "{n}: NCCL's parents of {bdf}");
            let cpu = pci.ancestors().find(|a| a.has_tag_name("cpu")).unwrap();
            let numa = device(&top)["numa"]["node"]
                .as_u64()
                .map_or("-1".to_string(), |v| v.to_string());
            assert_eq!(cpu.attribute("numaid"), Some(numa.as_str()), "{n}: {bdf}");
        };
        let pci_of = |bdf: &str| {
            doc.descendants()
                .find(|e| e.has_tag_name("pci") && e.attribute("busid") == Some(bdf))
                .unwrap_or_else(|| panic!("{n}: {bdf} not exported"))
        };
        for g in topo["gpus"].as_array().unwrap() {
            let bdf = g["bdf"].as_str().unwrap();
            let pci = pci_of(bdf);
            assert!(pci.children().any(|c| c.has_tag_name("gpu")), "{n}: {bdf}");
            check_pci(pci, bdf);
            let links: u64 = pci
                .descendants()
                .filter(|e| e.has_tag_name("nvlink"))
                .map(|e| e.attribute("count").unwrap().parse::<u64>().unwrap())
                .sum();
            assert_eq!(
                links,
                g["nvlinks_active"].as_u64().unwrap_or(0),
                "{n}: NVLinks of {bdf}"
            );
        }
        for nic in topo["nics"].as_array().unwrap() {
            // Under its `<pci>`: the NIC's own function, or function 0 where NCCL merges the
            // ports of a multi-port NIC (and an SR-IOV VF's physical function).
            let net = doc
                .descendants()
                .find(|e| {
                    e.has_tag_name("net") && e.attribute("name") == nic["rdma_device"].as_str()
                })
                .unwrap_or_else(|| panic!("{n}: net {} not exported", nic["rdma_device"]));
            let pci = net.ancestors().find(|a| a.has_tag_name("pci")).unwrap();
            let busid = pci.attribute("busid").unwrap();
            let bdf = nic["bdf"].as_str().unwrap();
            assert_eq!(
                busid[..busid.len() - 1],
                bdf[..bdf.len() - 1],
                "{n}: {bdf} under {busid}"
            );
            check_pci(pci, busid);
        }
        let (compared, differ) = nccl_paths_agree(&doc, topo);
        assert!(
            differ.is_empty(),
            "{n}: NCCL's path classes on the export differ from gpudoctor's matrix ({} of {compared} pairs):\n{}",
            differ.len(),
            differ.join("\n")
        );
        if n == "hgx-h100-8gpu" {
            assert_eq!(compared, 8 * 12, "{n}: every GPU-NIC pair is PCIe");
        }
        if n == "hgx-h100-8gpu--nic-numa-wrong" {
            assert_eq!(compared, 8 * 11, "{n}: all but mlx5_0's pairs");
        }
        if n == "pcie-2socket-roce" || n == "h200x2-live" || n == "hgx-h100-8gpu" {
            insta::assert_snapshot!(
                format!("nccl_topo_{n}"),
                xml.replace(env!("CARGO_PKG_VERSION"), "[version]")
            );
        }
    }
}

/// NCCL's node types for the path rules.
#[derive(Clone, Copy, PartialEq, Debug)]
enum NcclNode {
    Cpu,
    Pci,
    Gpu,
    Nic,
}

/// NCCL's path class between every two GPUs/NICs of the exported tree, by the rules of
/// src/graph/paths.cc (ncclTopoSetPaths), written here independently of the exporter: a hop
/// between two PCI switch nodes is PXB, a PCIe hop from or to a CPU is PHB, a hop between two
/// CPUs SYS, any other PCIe hop PIX; a path is as bad as its worst hop (NCCL's BFS keeps the
/// best path; in a tree under a clique of CPUs there is one). Compared with gpudoctor's matrix
/// for every pair of a GPU and a NIC and of two GPUs without NVLink: NCCL has no NODE (one
/// CPU node per NUMA node holds all its host bridges), so NODE is PHB to it. Pairs of NICs are
/// left out (NCCL makes the ports of one NIC one device). A pair where a device's own
/// numa_node differs from its `<cpu>`'s is not compared: NCCL takes the NUMA node of the node
/// it hangs under the CPU (the switch), gpudoctor the device's own (the nic-numa-wrong variant
/// plants exactly that). Returns (pairs compared, differences).
fn nccl_paths_agree(doc: &roxmltree::Document, topo: &serde_json::Value) -> (usize, Vec<String>) {
    const PIX: u8 = 4;
    const PXB: u8 = 5;
    const PHB: u8 = 8;
    const SYS: u8 = 9;
    let kind = |e: roxmltree::Node| -> Option<NcclNode> {
        if e.has_tag_name("cpu") {
            return Some(NcclNode::Cpu);
        }
        if !e.has_tag_name("pci") {
            return None;
        }
        if e.children().any(|c| c.has_tag_name("gpu")) {
            Some(NcclNode::Gpu)
        } else if e.children().any(|c| c.has_tag_name("nic")) {
            Some(NcclNode::Nic)
        } else {
            Some(NcclNode::Pci)
        }
    };
    // Each device's chain of NCCL nodes up to its CPU.
    let chain = |leaf: roxmltree::Node| -> Vec<(roxmltree::NodeId, NcclNode)> {
        leaf.ancestors()
            .filter_map(|a| kind(a).map(|k| (a.id(), k)))
            .collect()
    };
    let class = |a: &[(roxmltree::NodeId, NcclNode)], b: &[(roxmltree::NodeId, NcclNode)]| -> u8 {
        let hop = |x: NcclNode, y: NcclNode| match (x, y) {
            (NcclNode::Cpu, NcclNode::Cpu) => SYS,
            (NcclNode::Cpu, _) | (_, NcclNode::Cpu) => PHB,
            (NcclNode::Pci, NcclNode::Pci) => PXB,
            _ => PIX,
        };
        // Up from a to the lowest common node, then down to b; two CPUs are joined directly.
        let common = a.iter().position(|x| b.iter().any(|y| y.0 == x.0));
        let mut hops: Vec<(NcclNode, NcclNode)> = Vec::new();
        let (up_a, up_b) = match common {
            Some(i) => {
                let j = b.iter().position(|y| y.0 == a[i].0).unwrap();
                (&a[..=i], &b[..=j])
            }
            None => {
                hops.push((NcclNode::Cpu, NcclNode::Cpu));
                (a, b)
            }
        };
        for w in up_a.windows(2).chain(up_b.windows(2)) {
            hops.push((w[0].1, w[1].1));
        }
        hops.into_iter().map(|(x, y)| hop(x, y)).max().unwrap_or(0)
    };
    let name = |c: u8| match c {
        PIX => "PIX",
        PXB => "PXB",
        PHB => "PHB",
        SYS => "SYS",
        _ => "?",
    };
    let labels: Vec<&str> = topo["matrix"]["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    let cells = topo["matrix"]["cells"].as_array().unwrap();
    // Label -> the device's NCCL chain, and whether its own NUMA node is its <cpu>'s.
    let mut chains: Vec<Option<Vec<(roxmltree::NodeId, NcclNode)>>> = Vec::new();
    let mut numa_agrees: Vec<bool> = Vec::new();
    for l in &labels {
        let bdf = topo["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .chain(topo["nics"].as_array().unwrap())
            .find(|d| d["label"] == *l)
            .and_then(|d| d["bdf"].as_str());
        let own = topo["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["bdf"].as_str() == bdf)
            .map_or("-1".to_string(), |d| {
                d["numa"]["node"]
                    .as_u64()
                    .map_or("-1".to_string(), |v| v.to_string())
            });
        let found = if l.starts_with("GPU") {
            topo["gpus"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["label"] == *l)
                .and_then(|g| {
                    doc.descendants().find(|e| {
                        e.has_tag_name("pci") && e.attribute("busid") == g["bdf"].as_str()
                    })
                })
        } else {
            topo["nics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["label"] == *l)
                .and_then(|x| {
                    doc.descendants()
                        .find(|e| {
                            e.has_tag_name("net")
                                && e.attribute("name") == x["rdma_device"].as_str()
                        })
                        .and_then(|net| net.ancestors().find(|a| a.has_tag_name("pci")))
                })
        };
        let cpu = found
            .and_then(|f| f.ancestors().find(|a| a.has_tag_name("cpu")))
            .and_then(|c| c.attribute("numaid"));
        numa_agrees.push(cpu == Some(own.as_str()));
        chains.push(found.map(chain));
    }
    let (mut compared, mut differ) = (0, Vec::new());
    for i in 0..labels.len() {
        for j in 0..labels.len() {
            let (li, lj) = (labels[i], labels[j]);
            if !li.starts_with("GPU") || i == j {
                continue;
            }
            let ours = cells[i][j].as_str().unwrap();
            if ours.starts_with("NV") || (lj.starts_with("GPU") && j < i) {
                continue;
            }
            let want = match ours {
                "PIX" => PIX,
                "PXB" => PXB,
                "PHB" | "NODE" => PHB,
                "SYS" => SYS,
                _ => continue,
            };
            if !numa_agrees[i] || !numa_agrees[j] {
                continue;
            }
            let (Some(a), Some(b)) = (&chains[i], &chains[j]) else {
                differ.push(format!("{li}-{lj}: not in the export"));
                continue;
            };
            compared += 1;
            let got = class(a, b);
            if got != want {
                differ.push(format!("{li}-{lj}: gpudoctor {ours}, NCCL {}", name(got)));
            }
        }
    }
    (compared, differ)
}

/// The structure of the export against a topology NCCL itself dumped on an 8-GPU H100 HGX with
/// Broadcom PEX switches (tests/reference/nccl-dump-hgx-h100.xml, an extract of a public dump,
/// source in its first line): there every GPU and NIC hangs under a `<pci>` of class 0x060400
/// (the switch's upstream port) directly under a `<cpu>`; the export of the fixture of the same
/// design must have that shape: the same ancestor classes above every GPU and NIC, the same
/// vendor/device on the switch, and GPUs sharing a switch with a NIC.
#[test]
fn nccl_topo_export_has_the_shape_of_a_real_nccl_dump() {
    let reference =
        std::fs::read_to_string(repo().join("tests/reference/nccl-dump-hgx-h100.xml")).unwrap();
    let o = gpudoctor()
        .args(["--root", "fixtures/hgx-h100-8gpu", "export", "nccl-topo"])
        .output()
        .unwrap();
    let ours = String::from_utf8(o.stdout).unwrap();
    // For each GPU/NIC: the path of (tag, class, vendor, device) from the system down.
    fn shapes(xml: &str) -> std::collections::BTreeSet<String> {
        let doc = roxmltree::Document::parse(xml).unwrap();
        doc.descendants()
            .filter(|e| e.has_tag_name("gpu") || e.has_tag_name("nic"))
            .map(|leaf| {
                let mut v: Vec<String> = leaf
                    .ancestors()
                    .filter(|a| a.is_element() && !a.has_tag_name("system"))
                    .map(|a| {
                        if a.has_tag_name("pci") {
                            let class = a.attribute("class").unwrap_or("?");
                            if class == "0x060400" {
                                format!(
                                    "pci bridge {}:{}",
                                    a.attribute("vendor").unwrap_or("?"),
                                    a.attribute("device").unwrap_or("?")
                                )
                            } else {
                                format!("pci {class}")
                            }
                        } else {
                            a.tag_name().name().to_string()
                        }
                    })
                    .collect();
                v.reverse();
                v.join(" > ")
            })
            .collect()
    }
    let want = shapes(&reference);
    let got = shapes(&ours);
    assert_eq!(
        want,
        std::collections::BTreeSet::from([
            "cpu > pci bridge 0x1000:0xc030 > pci 0x030200 > gpu".to_string(),
            "cpu > pci bridge 0x1000:0xc030 > pci 0x020700 > nic".to_string(),
        ]),
        "the reference dump"
    );
    // The fixture also has a dual-port Ethernet NIC on a root port (no switch): NCCL puts it
    // under the CPU directly; the switched devices must have exactly the reference's shape.
    let switched: std::collections::BTreeSet<String> = got
        .iter()
        .filter(|s| s.contains("bridge"))
        .cloned()
        .collect();
    assert_eq!(switched, want, "export of hgx-h100-8gpu:\n{ours}");
    assert!(
        got.iter().all(|s| s.matches("pci").count() <= 2),
        "no bridge under a bridge: {got:#?}"
    );
}

/// One line as NCCL's parser reads it: `<name a="v" b="v">`, `<name .../>` or `</name>`.
fn lexically_nccl(t: &str) -> bool {
    let Some(body) = t.strip_prefix('<').and_then(|r| r.strip_suffix('>')) else {
        return false;
    };
    if let Some(close) = body.strip_prefix('/') {
        return !close.is_empty() && close.chars().all(|c| c.is_ascii_lowercase());
    }
    let body = body.strip_suffix('/').unwrap_or(body);
    let (name, mut rest) = body.split_once(' ').unwrap_or((body, ""));
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase()) {
        return false;
    }
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once("=\"") else {
            return false;
        };
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            return false;
        }
        let Some((value, after)) = after.split_once('"') else {
            return false;
        };
        if value.contains(['<', '>', '&']) {
            return false;
        }
        rest = match after.strip_prefix(' ') {
            Some(r) if !r.is_empty() => r,
            Some(_) => return false,
            None if after.is_empty() => "",
            None => return false,
        };
    }
    true
}

/// A silenced finding in every format: shown as silenced with its real status, never as a
/// pass, and out of the verdict, the exit code and `gpudoctor_finding`.
#[test]
fn silenced_findings_in_every_format() {
    let bundle = "fixtures/variants/pcie-2socket-roce--port-down/bundle.tar.gz";
    let out = |format: &str| {
        let o = gpudoctor()
            .args(["check", "--bundle", bundle, "--format", format])
            .args(["--skip", "rdma.port-state:mlx5_2/1"])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{format}: the only failure is silenced"
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let table = out("table");
    assert!(
        table.contains("SILENCED FAIL rdma.port-state  mlx5_2/1"),
        "{table}"
    );
    assert!(
        table.contains("  silenced by --skip (not in the verdict)"),
        "{table}"
    );
    assert!(
        table.contains("SILENCED  rdma.port-state on mlx5_2/1 (fail)"),
        "{table}"
    );
    assert!(!table.contains("FAIL  rdma.port-state on"), "{table}");
    let result = table.lines().last().unwrap();
    assert!(
        result.starts_with("Result: WARN: ")
            && result.contains(" 0 fail, ")
            && result.contains(", 1 silenced ("),
        "{result}"
    );

    let json: serde_json::Value = serde_json::from_str(&out("json")).unwrap();
    let port = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "rdma.port-state" && f["subject"] == "mlx5_2/1")
        .unwrap();
    assert_eq!(port["status"], "fail");
    assert_eq!(
        port["silenced"],
        serde_json::json!({"by": "command-line", "reason": null, "expires": null})
    );
    assert_eq!(json["summary"]["silenced"], 1);
    assert_eq!(json["status"], "warn");

    let prom = out("prometheus");
    assert!(
        prom.contains(
            "gpudoctor_finding_silenced{check=\"rdma.port-state\",subject=\"mlx5_2/1\",status=\"fail\",by=\"command-line\",expires=\"\"} 1"
        ),
        "{prom}"
    );
    assert!(prom.contains("\ngpudoctor_checks_silenced 1\n"), "{prom}");
    assert!(
        prom.contains("\ngpudoctor_status{status=\"fail\"} 0\n"),
        "{prom}"
    );
    assert!(
        !prom.contains("gpudoctor_finding{check=\"rdma.port-state\""),
        "{prom}"
    );
    if have("promtool") {
        let (ok, complaints) = promtool(&prom);
        assert!(ok, "{complaints}");
    }

    let junit = out("junit");
    assert!(junit.contains("failures=\"0\""), "{junit}");
    assert!(
        junit.contains(
            "<testcase classname=\"rdma.port-state\" name=\"mlx5_2/1\">\n      <skipped message=\"silenced by --skip (status fail)\"/>"
        ),
        "{junit}"
    );

    let reason = out("reason");
    assert!(
        reason.starts_with("gpudoctor: warn (")
            && reason
                .trim_end()
                .ends_with("; silenced: rdma.port-state mlx5_2/1 fail"),
        "{reason}"
    );
    assert!(reason.contains(", 1 silenced)"), "{reason}");

    let html = out("html");
    assert!(html.contains("Silenced (1): not in the verdict"), "{html}");
    assert!(
        html.contains("SILENCED (command-line): silenced by --skip"),
        "{html}"
    );
}

/// `--fail-on-skip` leaves silenced unjudged skips out: a recording that predates some facts
/// (its unknown skips read from its own report) fails the gate until every one is silenced.
#[test]
fn silenced_skips_do_not_fail_the_gate() {
    let root = ["--root", "fixtures/h100x1-live"];
    let o = gpudoctor()
        .args(["check", "--json"])
        .args(root)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let unjudged: Vec<String> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["skip"] == "unknown" || f["skip"] == "not-root")
        .map(|f| {
            format!(
                "{}:{}",
                f["id"].as_str().unwrap(),
                f["subject"].as_str().unwrap()
            )
        })
        .collect();
    assert!(unjudged.len() >= 2, "{unjudged:?}");
    let run = |silenced: &[String]| {
        let mut c = gpudoctor();
        c.args(["check", "--fail-on-skip", "--format", "reason"])
            .args(root);
        for s in silenced {
            c.args(["--skip", s]);
        }
        let o = c.output().unwrap();
        (
            o.status.code().unwrap(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (code, reason) = run(&unjudged[1..]);
    assert_eq!(code, 1, "{reason}");
    assert!(
        reason.contains("gate: 1 could not be judged (--fail-on-skip)"),
        "{reason}"
    );
    let (code, reason) = run(&unjudged);
    assert_eq!(code, 0, "{reason}");
    assert!(
        reason.contains(&format!(", {} silenced)", unjudged.len())),
        "{reason}"
    );
}
