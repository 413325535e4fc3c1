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

/// The default series stay small on a DGX-class node (issue 23's goal: at most 300 lines on
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

/// `export nccl-topo` on every fixture: the tree NCCL would build (GPUs and NICs under their
/// own chain of bridges, under the NUMA node of the top bridge), in the narrow lexical form
/// NCCL's hand-written parser reads (src/graph/xml.cc: no declaration, one element per line,
/// double-quoted attributes separated by single spaces).
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
        let check_leaf = |bdf: &str, child: &str| -> roxmltree::Node {
            let pci = doc
                .descendants()
                .find(|e| e.has_tag_name("pci") && e.attribute("busid") == Some(bdf))
                .unwrap_or_else(|| panic!("{n}: {bdf} not exported"));
            assert!(
                pci.children().any(|c| c.has_tag_name(child)),
                "{n}: {bdf} has no <{child}>"
            );
            // Ancestors: the device's upstream bridges, then a cpu.
            let d = device(bdf);
            let want: Vec<String> = d["upstream"]
                .as_array()
                .unwrap()
                .iter()
                .rev()
                .map(|b| b.as_str().unwrap().to_string())
                .collect();
            let got: Vec<String> = pci
                .ancestors()
                .skip(1)
                .filter(|a| a.has_tag_name("pci"))
                .map(|a| a.attribute("busid").unwrap().to_string())
                .collect();
            assert_eq!(got, want, "{n}: bridges above {bdf}");
            let cpu = pci.ancestors().find(|a| a.has_tag_name("cpu")).unwrap();
            let top = want.last().map_or(d.clone(), |b| device(b));
            let numa = top["numa"]["node"]
                .as_u64()
                .map_or("-1".to_string(), |v| v.to_string());
            assert_eq!(cpu.attribute("numaid"), Some(numa.as_str()), "{n}: {bdf}");
            pci
        };
        for g in topo["gpus"].as_array().unwrap() {
            let pci = check_leaf(g["bdf"].as_str().unwrap(), "gpu");
            let links: u64 = pci
                .descendants()
                .filter(|e| e.has_tag_name("nvlink"))
                .map(|e| e.attribute("count").unwrap().parse::<u64>().unwrap())
                .sum();
            assert_eq!(
                links,
                g["nvlinks_active"].as_u64().unwrap_or(0),
                "{n}: NVLinks of {}",
                g["bdf"]
            );
        }
        for nic in topo["nics"].as_array().unwrap() {
            let pci = check_leaf(nic["bdf"].as_str().unwrap(), "nic");
            assert!(
                pci.descendants()
                    .any(|e| e.has_tag_name("net")
                        && e.attribute("name") == nic["rdma_device"].as_str()),
                "{n}: net name"
            );
        }
        if n == "pcie-2socket-roce" || n == "h200x2-live" {
            insta::assert_snapshot!(
                format!("nccl_topo_{n}"),
                xml.replace(env!("CARGO_PKG_VERSION"), "[version]")
            );
        }
    }
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
