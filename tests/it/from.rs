//! `--from`: records in other formats replay through the whole pipeline. A hand-built record
//! (a GPU and a ConnectX under one PCIe switch, as an hwloc XML or NCCL file would show them)
//! checks the tree the record becomes; the format parsers' own tests and the real records in
//! fixtures/records check each format.

use gpudoctor::config::CheckOptions;
use gpudoctor::pci::Bdf;
use gpudoctor::source::record::{Carried, Format, FunctionRecord, GpuRecord, MachineRecord};
use gpudoctor::source::{Source, SourceSpec};

fn bdf(s: &str) -> Bdf {
    s.parse().unwrap()
}

fn bridge(b: &str, parent: Option<&str>, sec: u8, sub: u8) -> FunctionRecord {
    FunctionRecord {
        bdf: bdf(b),
        parent: parent.map(bdf),
        vendor: Some(0x1000),
        device: Some(0xc030),
        class: Some(0x060400),
        secondary_bus: Some(sec),
        subordinate_bus: Some(sub),
        ..Default::default()
    }
}

/// Root port 00:01.0 -> switch 01:00.0 -> ports 02:00.0 (GPU 03:00.0) and 02:01.0 (NIC 04:00.0).
pub fn switch_record(format: Format) -> MachineRecord {
    let mut r = MachineRecord::new(format);
    r.carried = Carried {
        driver: false,
        numa_node: true,
        os_devices: true,
    };
    r.functions = vec![
        bridge("0000:00:01.0", None, 1, 4),
        bridge("0000:01:00.0", Some("0000:00:01.0"), 2, 4),
        bridge("0000:02:00.0", Some("0000:01:00.0"), 3, 3),
        bridge("0000:02:01.0", Some("0000:01:00.0"), 4, 4),
        FunctionRecord {
            bdf: bdf("0000:03:00.0"),
            parent: Some(bdf("0000:02:00.0")),
            vendor: Some(0x10de),
            device: Some(0x2330),
            class: Some(0x030200),
            numa_node: Some(0),
            ..Default::default()
        },
        FunctionRecord {
            bdf: bdf("0000:04:00.0"),
            parent: Some(bdf("0000:02:01.0")),
            vendor: Some(0x15b3),
            device: Some(0x1021),
            class: Some(0x020700),
            numa_node: Some(0),
            rdma_devices: vec!["mlx5_0".into()],
            netdevs: vec!["ibp4s0".into()],
            ..Default::default()
        },
    ];
    r.numa = Some(vec![gpudoctor::source::record::NumaRecord {
        id: 0,
        cpulist: Some("0-15".into()),
        distance: Some("10".into()),
    }]);
    r.gpus = vec![GpuRecord {
        bdf: bdf("0000:03:00.0"),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        ..Default::default()
    }];
    r.cannot_tell = vec!["ACS control bits".into()];
    r
}

fn open(r: MachineRecord) -> Source {
    Source::from_record(
        &SourceSpec::From {
            path: "test.xml".into(),
            format: Some(r.format),
        },
        std::path::Path::new("test.xml"),
        r,
    )
    .unwrap()
}

#[test]
fn a_record_becomes_a_tree_with_its_switch_and_pairing() {
    let s = open(switch_record(Format::Hwloc));
    let t = gpudoctor::run::topo_report_from(&s).unwrap();
    let v = serde_json::to_value(&t).unwrap();
    let text = v.to_string();
    assert!(text.contains("\"kind\":\"from\""), "{text}");
    assert!(text.contains("\"format\":\"hwloc\""), "{text}");
    // The GPU's closest NIC is the ConnectX under the same switch: PIX... or PXB through the
    // switch's two downstream ports (one switch between them: PIX in NCCL's and nvidia-smi's
    // terms when both hang off one switch).
    let m = gpudoctor::render::topo_matrix_tsv(&t);
    assert!(m.contains("PIX") || m.contains("PXB"), "{m}");
}

#[test]
fn what_the_format_does_not_carry_is_unknown_naming_it() {
    let s = open(switch_record(Format::Hwloc));
    let opts = CheckOptions::level0();
    let r = gpudoctor::run::check_report_from(&s, &opts).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    let checks = v["checks"].as_array().unwrap();
    let acs: Vec<_> = checks
        .iter()
        .filter(|c| c["id"] == "pcie.acs-redirect")
        .collect();
    assert!(!acs.is_empty());
    for c in &acs {
        assert_ne!(c["status"], "pass", "{c}");
    }
    let text = v.to_string();
    assert!(text.contains("not in an hwloc XML"), "{text}");
    // A pass must rest on something the record carries: at least one piece of its evidence
    // is not "not in an hwloc XML".
    for c in checks {
        if c["status"] == "pass" {
            let ev = c["evidence"].as_array().cloned().unwrap_or_default();
            assert!(
                ev.iter()
                    .any(|e| !e["value"].to_string().contains("not in an hwloc XML")),
                "a pass rests only on facts the format lacks: {c}"
            );
        }
    }
}
