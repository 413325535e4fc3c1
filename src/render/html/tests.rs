//! The page against hostile recorded strings: names, subjects, messages and evidence that try
//! to close a tag, open a script, add an event handler, drive a terminal or reorder text.

use super::*;
use crate::checks::CheckId;
use crate::findings::ev;
use crate::report::SourceInfo;

pub(super) const HOSTILE: [&str; 6] = [
    "<script>alert(1)</script>",
    "\"><svg onload=alert(2)>",
    "'><img src=x onerror=alert(3)>",
    "evil\u{1b}]0;title\u{7}\u{1b}[2J",
    "abc\u{202e}fdp.exe\u{2066}",
    "a&b</title></svg></style><!--",
];

fn fixture() -> (crate::inventory::Inventory, Topology) {
    let sr = crate::sysroot::SysRoot::at(&crate::fixture_trees::tree("pcie-2socket-roce"))
        .expect("fixture");
    let inv = crate::inventory::Inventory::collect(
        &sr,
        crate::nvml::NvmlSnapshot::unavailable("test", "test"),
    )
    .expect("inventory");
    let t = crate::topo::build(&inv);
    (inv, t)
}

/// Every tag the page writes; anything else in the output came from a recorded string.
const TAGS: &[&str] = &[
    "!DOCTYPE", "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "div",
    "span", "b", "code", "pre", "ul", "ol", "li", "table", "tr", "th", "td", "details", "summary",
    "sup", "br", "svg", "g", "rect", "text", "path", "line", "circle",
];

/// Every attribute the page writes.
const ATTRS: &[&str] = &[
    "lang",
    "charset",
    "http-equiv",
    "content",
    "name",
    "class",
    "id",
    "style",
    "title",
    "value",
    "width",
    "height",
    "viewBox",
    "font-family",
    "font-size",
    "font-weight",
    "role",
    "aria-label",
    "x",
    "y",
    "x1",
    "y1",
    "x2",
    "y2",
    "rx",
    "d",
    "fill",
    "fill-opacity",
    "stroke",
    "stroke-width",
    "stroke-opacity",
    "stroke-dasharray",
    "text-anchor",
    "cx",
    "cy",
    "r",
];

/// Every tag of the page is one of ours with only our attributes, each value quoted: so no
/// recorded string opened a tag, closed a value or added an event handler.
pub(super) fn assert_inert(page: &str) {
    let mut rest = page;
    while let Some(i) = rest.find('<') {
        let tag = &rest[i + 1..];
        let end = tag.find('>').expect("every tag closes");
        let inner = tag[..end].trim_start_matches('/').trim_end_matches('/');
        let (name, mut attrs) = inner.split_once(' ').unwrap_or((inner, ""));
        assert!(TAGS.contains(&name), "unexpected markup <{inner}>");
        loop {
            attrs = attrs.trim_start();
            if attrs.is_empty() || name == "!DOCTYPE" {
                break;
            }
            let (a, after) = attrs.split_once('=').unwrap_or((attrs, ""));
            assert!(ATTRS.contains(&a), "unexpected attribute {a} in <{inner}>");
            let q = after.chars().next().expect("a value");
            assert!(q == '"', "unquoted value in <{inner}>");
            let close = after[1..].find(q).expect("value closes");
            attrs = &after[close + 2..];
        }
        rest = &tag[end + 1..];
    }
    let lower = page.to_ascii_lowercase();
    for bad in ["<script", "<img", "http://", "https://"] {
        assert!(!lower.contains(bad), "{bad} in the page");
    }
    assert!(
        !page.chars().any(|c| matches!(c, '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')),
        "a control character reached the page"
    );
}

#[test]
fn escape_is_total() {
    assert_eq!(
        esc("<a href=\"x\">'&'</a>"),
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
    );
    assert_eq!(esc("a\u{1b}[2Jb"), "a\\x1b[2Jb");
    assert_eq!(esc("x\u{202e}y"), "x\\u{202e}y");
    assert_eq!(
        esc("see https://example.org"),
        "see https&#58;//example.org"
    );
    assert_eq!(esc("GPU-Ω ünïcode"), "GPU-Ω ünïcode");
}

#[test]
fn hostile_strings_stay_text() {
    let (inv, mut t) = fixture();
    assert!(!t.gpus.is_empty() && !t.nics.is_empty());
    for (i, g) in t.gpus.iter_mut().enumerate() {
        g.name = HOSTILE[i % HOSTILE.len()].to_string();
    }
    for (i, n) in t.nics.iter_mut().enumerate() {
        n.rdma_device = format!("mlx5_{i}{}", HOSTILE[(i + 1) % HOSTILE.len()]);
        n.netdevs = vec![HOSTILE[(i + 2) % HOSTILE.len()].to_string()];
        n.name = HOSTILE[(i + 3) % HOSTILE.len()].to_string();
    }
    for (i, d) in t.devices.iter_mut().enumerate() {
        d.name = HOSTILE[i % HOSTILE.len()].to_string();
        d.unknown
            .insert(HOSTILE[0].into(), HOSTILE[(i + 4) % HOSTILE.len()].into());
    }
    t.notes.push(HOSTILE[1].into());
    let gpu0 = t.gpus[0].label.clone();
    let nic0 = t.nics[0].rdma_device.clone();
    let findings: Vec<Finding> = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let subject = match i {
                0 => gpu0.clone(),
                1 => format!("{nic0}/1"),
                _ => h.to_string(),
            };
            Finding::new(
                CheckId::PcieLinkSpeed,
                subject,
                if i % 2 == 0 {
                    Status::Fail
                } else {
                    Status::Warn
                },
                *h,
            )
            .with(ev(*h, *h))
            .with(ev("threshold", format!("50 GB/s {h}")))
            .fix(*h)
        })
        .chain([
            Finding::new(CheckId::ProbeH2d, HOSTILE[2], Status::Fail, HOSTILE[3])
                .with(ev(HOSTILE[4], "median 20.0 GB/s (min 19.0, max 21.0, n=5)"))
                .with(ev("threshold", format!("50.4 GB/s ({})", HOSTILE[5]))),
        ])
        .collect();
    let source = SourceInfo::Root {
        path: HOSTILE[1].into(),
    };
    let r = CheckReport::new(source.clone(), 1, &inv, findings)
        .with_gpus(&t)
        .with_topology(TopoReport::new(source, &inv, t.clone()))
        .at(Some(HOSTILE[0].into()), Some(HOSTILE[3].into()));
    let page = check_page(&r);
    assert_inert(&page);
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("&quot;&gt;&lt;svg onload=alert(2)&gt;"));
    assert!(page.contains("evil\\x1b]0;title\\x07\\x1b[2J"));
    assert!(page.contains("abc\\u{202e}fdp.exe\\u{2066}"));
    // The GPU and the NIC named by findings are marked on the drawing.
    assert!(page.contains("<g class=\"box fail\">"), "GPU marked");
    assert!(page.contains("<g class=\"box warn\">"), "NIC marked");
    assert!(page.contains("class=\"chart\""), "the probe's bar is drawn");
    let topo = topo_page(r.topology.as_deref().expect("topology"));
    assert_inert(&topo);
}

#[test]
fn verdict_line_is_the_text_reports() {
    let (inv, t) = fixture();
    let source = SourceInfo::Root {
        path: "fixtures/pcie-2socket-roce".into(),
    };
    let f = vec![
        Finding::new(CheckId::PcieLinkSpeed, "GPU0", Status::Warn, "slow"),
        Finding::new(CheckId::PcieLinkSpeed, "GPU1", Status::Pass, "ok"),
    ];
    let r = CheckReport::new(source.clone(), 0, &inv, f)
        .with_topology(TopoReport::new(source, &inv, t));
    let text = crate::render::check_text(&r, &crate::render::TextStyle::default());
    let last = text.lines().last().unwrap_or_default();
    assert_eq!(result_line(&r), last);
    assert!(check_page(&r).contains(&esc(last)));
}
