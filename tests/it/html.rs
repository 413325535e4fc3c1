//! `--format html` in a real browser: each kind of machine's page rendered by headless
//! chromium, whose DOM must show every GPU and NIC, every subject of a warn or fail, and the
//! verdict; the page names no http(s) address, and chromium's network log shows no request of
//! the page's (only chromium's own background services, which the host rules make fail).
//!
//! Skips (with a message) where chromium is not installed, unless GPUDOCTOR_REQUIRE_CHROMIUM=1
//! (scripts/test installs Debian's chromium and sets it).

use crate::{gpudoctor, repo};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|c| {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(c))
                .find(|f| f.is_file())
        })
    });
    if found.is_none() {
        assert!(
            std::env::var("GPUDOCTOR_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "GPUDOCTOR_REQUIRE_CHROMIUM=1 but chromium is not installed (apt-get install chromium)"
        );
        eprintln!("chromium not installed: the page was checked as text only, not rendered");
    }
    found
}

fn stdout(args: &[&str]) -> String {
    let out = gpudoctor().args(args).output().unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "gpudoctor {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What the DOM serializer writes for text.
fn dom_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\u{a0}', "&nbsp;")
}

/// Chromium's own background services (updates, time, accounts, dictionaries): requested
/// whatever page is open, and failed by the host rules. Anything else came from the page.
const BROWSER_SERVICES: [&str; 3] = ["google.com", "googleapis.com", "gvt1.com"];

/// Render `page` with chromium: the DOM, and the hosts of every URL in its network log.
fn render(chrome: &Path, page: &Path, dir: &Path) -> (String, Vec<String>) {
    let profile = dir.join("profile");
    let netlog = dir.join("net.json");
    let shot = dir.join("page.png");
    let url = format!("file://{}", page.display());
    let common = [
        "--headless".to_string(),
        "--disable-gpu".into(),
        "--no-sandbox".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--host-resolver-rules=MAP * ~NOTFOUND".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let dom = Command::new(chrome)
        .args(&common)
        .arg(format!("--log-net-log={}", netlog.display()))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(dom.status.success(), "chromium --dump-dom {url}");
    let shot_run = Command::new(chrome)
        .args(&common)
        .args(["--hide-scrollbars", "--window-size=1400,1000"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(shot_run.status.success(), "chromium --screenshot {url}");
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "screenshot of {url}"
    );
    let log = std::fs::read_to_string(&netlog).unwrap_or_default();
    let hosts = log
        .match_indices("\"url\":\"")
        .map(|(i, m)| {
            let u = &log[i + m.len()..];
            let u = &u[..u.find('"').unwrap_or(u.len())];
            u.split("://")
                .nth(1)
                .unwrap_or(u)
                .split(['/', ':', '?'])
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    (String::from_utf8(dom.stdout).unwrap(), hosts)
}

/// One machine's page: `args` print it, `topo` names the machine's topology source.
fn check_page(name: &str, args: &[&str], topo: &[&str], report: Option<&[&str]>) {
    let html = stdout(args);
    // Self-contained: no address at all, nothing that loads or runs.
    let lower = html.to_ascii_lowercase();
    for bad in [
        "http://", "https://", "<script", " src=", " href=", "@import", "url(",
    ] {
        assert!(!lower.contains(bad), "{name}: {bad} in the page");
    }
    assert!(html.len() < 4 << 20, "{name}: {} bytes", html.len());

    let t: Value = serde_json::from_str(&stdout(topo)).unwrap();
    let mut want: Vec<String> = Vec::new();
    for g in t["topology"]["gpus"].as_array().unwrap() {
        want.push(g["label"].as_str().unwrap().to_string());
    }
    for n in t["topology"]["nics"].as_array().unwrap() {
        want.push(n["label"].as_str().unwrap().to_string());
        want.push(n["rdma_device"].as_str().unwrap().to_string());
    }
    if let Some(r) = report {
        let r: Value = serde_json::from_str(&stdout(r)).unwrap();
        for f in r["checks"].as_array().unwrap() {
            if matches!(f["status"].as_str(), Some("warn" | "fail")) {
                want.push(f["subject"].as_str().unwrap().to_string());
            }
        }
        let text_args: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| !["--format", "html"].contains(a))
            .collect();
        let verdict = stdout(&text_args);
        let last = verdict.lines().last().unwrap().to_string();
        assert!(last.starts_with("Result: "), "{name}: {last}");
        want.push(last);
    }
    // As text in the page first (works without a browser).
    for w in &want {
        let shown = w
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#39;");
        assert!(html.contains(&shown), "{name}: {w} not in the page");
    }
    let Some(chrome) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join(format!("{name}.html"));
    std::fs::write(&page, &html).unwrap();
    let (dom, hosts) = render(&chrome, &page, dir.path());
    assert!(dom.contains("id=\"topology\""), "{name}: rendered");
    for w in &want {
        assert!(dom.contains(&dom_text(w)), "{name}: {w} not in the DOM");
    }
    let dom_lower = dom.to_ascii_lowercase();
    assert!(
        !dom_lower.contains("<script"),
        "{name}: a script in the DOM"
    );
    for h in hosts.iter().filter(|h| !h.is_empty()) {
        assert!(
            BROWSER_SERVICES
                .iter()
                .any(|s| h == s || h.ends_with(&format!(".{s}"))),
            "{name}: the page requested {h}"
        );
    }
}

#[test]
fn html_hgx_8gpu() {
    let root = ["--root", "fixtures/hgx-h100-8gpu"];
    check_page(
        "hgx",
        &["check", root[0], root[1], "--format", "html"],
        &["topo", root[0], root[1], "--json"],
        Some(&["check", root[0], root[1], "--json"]),
    );
}

#[test]
fn html_vm_flat_topo_and_check() {
    let root = ["--root", "fixtures/vm-flat-4gpu"];
    check_page(
        "vm-topo",
        &["topo", root[0], root[1], "--format", "html"],
        &["topo", root[0], root[1], "--json"],
        None,
    );
    check_page(
        "vm",
        &["check", root[0], root[1], "--format", "html"],
        &["topo", root[0], root[1], "--json"],
        Some(&["check", root[0], root[1], "--json"]),
    );
}

#[test]
fn html_two_socket_pcie_failing() {
    // A variant that fails: its failing subjects are on the drawing and in the DOM.
    let b = [
        "--bundle",
        "fixtures/variants/pcie-2socket-roce--gpu-x8/bundle.tar.gz",
    ];
    check_page(
        "pcie-gpu-x8",
        &["check", b[0], b[1], "--format", "html"],
        &["topo", b[0], b[1], "--json"],
        Some(&["check", b[0], b[1], "--json"]),
    );
    let page = stdout(&["check", b[0], b[1], "--format", "html"]);
    assert!(page.contains("<g class=\"box fail\">"), "a failing box");
}

#[test]
fn html_level1_bandwidth() {
    let root = ["--root", "fixtures/h200x2-live"];
    let args = [
        "check", root[0], root[1], "--level", "1", "--format", "html",
    ];
    check_page(
        "h200-level1",
        &args,
        &["topo", root[0], root[1], "--json"],
        Some(&["check", root[0], root[1], "--level", "1", "--json"]),
    );
    let page = stdout(&args);
    for id in ["probe.h2d", "probe.d2h", "probe.p2p"] {
        assert!(
            page.contains(&format!("aria-label=\"{id} bandwidth\"")),
            "{id} chart"
        );
    }
}

#[test]
fn html_record_from() {
    let f = "fixtures/records/aws-p5/p5.48xl-topo.xml";
    check_page(
        "aws-p5",
        &["check", "--from", f, "--format", "html"],
        &["topo", "--from", f, "--json"],
        Some(&["check", "--from", f, "--json"]),
    );
}

#[test]
fn html_sriov_folds_virtual_functions() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .arg(repo().join("scripts/synth-fixtures.py"))
        .args(["--scale", "1", "--sriov", "16", "--out"])
        .arg(dir.path())
        .output()
        .expect("python3 runs the fixture generator");
    assert!(out.status.success());
    let root = dir.path().to_str().unwrap();
    let page = stdout(&["topo", "--root", root, "--format", "html"]);
    // 128 VFs: eight boxes of 16, not 128 boxes.
    assert_eq!(page.matches(">16 virtual functions<").count(), 8);
    assert!(page.len() < 4 << 20, "{} bytes", page.len());
    check_page(
        "sriov",
        &["check", "--root", root, "--format", "html"],
        &["topo", "--root", root, "--json"],
        Some(&["check", "--root", root, "--json"]),
    );
}

/// A page without a topology (fleet, diff): self-contained, then rendered by chromium, which
/// requests nothing of the page's. The DOM, or None without chromium.
fn rendered(name: &str, html: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    for bad in [
        "http://", "https://", "<script", " src=", " href=", "@import", "url(",
    ] {
        assert!(!lower.contains(bad), "{name}: {bad} in the page");
    }
    let chrome = chromium()?;
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join(format!("{name}.html"));
    std::fs::write(&page, html).unwrap();
    let (dom, hosts) = render(&chrome, &page, dir.path());
    assert!(dom.contains("id=\"verdict\""), "{name}: rendered");
    assert!(
        !dom.to_ascii_lowercase().contains("<script"),
        "{name}: a script in the DOM"
    );
    for h in hosts.iter().filter(|h| !h.is_empty()) {
        assert!(
            BROWSER_SERVICES
                .iter()
                .any(|s| h == s || h.ends_with(&format!(".{s}"))),
            "{name}: the page requested {h}"
        );
    }
    Some(dom)
}

/// The row of `node` in the fleet table, from its opening tag to its end.
fn fleet_row<'a>(page: &'a str, node: &str) -> (usize, &'a str) {
    let cell = format!("{node}</td>");
    let at = page.find(&cell).unwrap_or_else(|| panic!("{node}'s row"));
    let start = page[..at].rfind("<tr").unwrap();
    let end = at + page[at..].find("</tr>").unwrap();
    (start, &page[start..end])
}

#[test]
fn html_fleet_marks_the_slow_node() {
    let dir = tempfile::tempdir().unwrap();
    let h2d = repo().join("fixtures/h200x2-live/probes/h2d.json");
    // Six nodes within 1% of one another, one 30% slower, one failing a check.
    for i in 0..6 {
        let jitter = 1.0 + ((i * 7 % 11) as f64 - 5.0) / 500.0;
        crate::fleet::scaled_probe(
            &h2d,
            jitter,
            &dir.path().join(format!("node{i:02}.h2d.json")),
        );
    }
    crate::fleet::scaled_probe(&h2d, 0.7, &dir.path().join("slow01.h2d.json"));
    let o = gpudoctor()
        .args([
            "--bundle",
            "fixtures/variants/pcie-2socket-roce--gpu-x8/bundle.tar.gz",
            "check",
            "--json",
        ])
        .output()
        .unwrap();
    std::fs::write(dir.path().join("x8node.check.json"), o.stdout).unwrap();
    let d = dir.path().to_str().unwrap();
    let page = stdout(&["fleet", d, "--format", "html"]);
    // Drained nodes first, with their reasons and failed checks.
    let (slow_at, slow) = fleet_row(&page, "slow01");
    let (x8_at, x8) = fleet_row(&page, "x8node");
    let (ok_at, ok) = fleet_row(&page, "node00");
    assert!(slow_at < ok_at && x8_at < ok_at, "drained first");
    assert!(slow.starts_with("<tr class=\"drained\">"), "{slow}");
    assert!(x8.contains("pcie.link-width"), "{x8}");
    assert!(ok.starts_with("<tr class=\"kept\">"), "{ok}");
    // Every cell of the slow node is red and outlined; the others' are not.
    let cells = slow.matches("<td class=\"gb ").count();
    assert!(cells >= 2, "{slow}");
    assert_eq!(slow.matches("<td class=\"gb red drain\"").count(), cells);
    assert!(slow.contains("<span class=\"dev\">-29.7%</span>"), "{slow}");
    assert_eq!(ok.matches("<td class=\"gb ok\"").count(), cells, "{ok}");
    assert!(!x8.contains("gb red"), "x8node measured nothing: {x8}");
    let Some(dom) = rendered("fleet", &page) else {
        return;
    };
    let at = |n: &str| dom.find(&format!("{n}</td>")).unwrap();
    assert!(at("slow01") < at("node00") && at("x8node") < at("node00"));
    assert!(dom.contains("class=\"gb red drain\""), "marked in the DOM");
    assert!(dom.contains("pcie.link-width"));
}

#[test]
fn html_diff_of_two_variants() {
    let a = "fixtures/variants/pcie-2socket-roce--mtu1500/bundle.tar.gz";
    let b = "fixtures/variants/pcie-2socket-roce--gpu-x8/bundle.tar.gz";
    let out = gpudoctor()
        .args(["diff", a, b, "--format", "html"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "they differ");
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(a) && page.contains(b), "A and B named");
    // The check that got worse, first and marked; the ones that got better after it.
    let worse = page
        .find("<tr class=\"worse\"><td>worse</td><td class=\"mono\">pcie.link-width</td>")
        .expect("the worse verdict");
    let better = page
        .find("<tr class=\"better\"><td>better</td><td class=\"mono\">rdma.mtu</td>")
        .expect("a better verdict");
    assert!(worse < better, "worse first");
    // B's shape against A's.
    assert!(page.contains("baseline.pcie"), "the shape difference");
    // --json and --format together are refused, as for fleet.
    let both = gpudoctor()
        .args(["diff", a, b, "--json", "--format", "html"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
    let Some(dom) = rendered("diff", &page) else {
        return;
    };
    assert!(dom.contains("pcie.link-width") && dom.contains("baseline.pcie"));
    assert!(dom.find("pcie.link-width") < dom.find("rdma.mtu"));
}

#[test]
fn html_is_refused_by_probes() {
    let out = gpudoctor()
        .args(["probe", "h2d", "--format", "html"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--format html is for `check`"));
}
