//! Level 4's DevX commands (`gpudoctor::rdma::mlx5::prm`) against rdma-core's own PRM
//! definitions: tests/py/mlx5_prm_reference.py builds every case with rdma-core's
//! tests/mlx5_prm_structs.py (Debian's python3-pyverbs, scapy from python3-scapy), setting the
//! fields as rdma-core's DevX RC test resources do, and the bytes must match the Rust builders'
//! exactly. Skips (with a message) where the reference cannot load, unless
//! GPUDOCTOR_REQUIRE_PRM_REFERENCE=1 (scripts/test installs both packages).

use crate::mlx5::{Rng, hex};
use crate::repo;
use gpudoctor::rdma::mlx5::prm::{self as prm, Cmd, Connect, CqParams, QpParams, Route};
use std::io::Write;
use std::process::{Command, Stdio};

/// Debian's interpreter (python3-scapy installs for it), else whatever python3 is first.
fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// The reference's hex for each case; None (skipped) where it cannot load here.
fn reference(cases: &[serde_json::Value]) -> Option<Vec<String>> {
    let require = std::env::var("GPUDOCTOR_REQUIRE_PRM_REFERENCE").as_deref() == Ok("1");
    let input: String = cases.iter().map(|c| format!("{c}\n")).collect();
    let mut child = Command::new(python())
        .arg(repo().join("tests/py/mlx5_prm_reference.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let o = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    if o.status.code() == Some(3) {
        assert!(
            !require,
            "GPUDOCTOR_REQUIRE_PRM_REFERENCE=1 but the reference cannot load (apt-get install \
             python3-pyverbs python3-scapy): {stderr}"
        );
        eprintln!("rdma-core's PRM reference not available ({stderr}): skipped");
        return None;
    }
    assert!(o.status.success(), "reference failed: {stderr}");
    let lines: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), cases.len(), "one line per case: {stderr}");
    Some(lines)
}

fn cq_cases(rng: &mut Rng) -> Vec<CqParams> {
    let mut v = vec![CqParams {
        log_size: 31,
        uar_page: 0xff_ffff,
        eqn: 0xff,
        umem_id: u32::MAX,
        umem_offset: 0xffff_ffff_ffff_f000,
        dbr_umem_id: u32::MAX,
        dbr_offset: 0xffff_ffff_ffff_fff8,
    }];
    for _ in 0..200 {
        v.push(CqParams {
            log_size: rng.bits(5),
            uar_page: rng.bits(24),
            eqn: rng.bits(8),
            umem_id: rng.bits(32),
            umem_offset: rng.next() & !0xfff,
            dbr_umem_id: rng.bits(32),
            dbr_offset: rng.next() & !7,
        });
    }
    v
}

fn qp_cases(rng: &mut Rng) -> Vec<QpParams> {
    let mut v = vec![QpParams {
        pdn: 0xff_ffff,
        cqn: 0xff_ffff,
        uar_page: 0xff_ffff,
        log_sq_size: 15,
        umem_id: u32::MAX,
        umem_offset: !0xfff,
        dbr_umem_id: u32::MAX,
        dbr_offset: !7,
    }];
    for _ in 0..200 {
        v.push(QpParams {
            pdn: rng.bits(24),
            cqn: rng.bits(24),
            uar_page: rng.bits(24),
            log_sq_size: rng.bits(4),
            umem_id: rng.bits(32),
            umem_offset: rng.next() & !0xfff,
            dbr_umem_id: rng.bits(32),
            dbr_offset: rng.next() & !7,
        });
    }
    v
}

fn connect_cases(rng: &mut Rng) -> Vec<Connect> {
    let mut v = Vec::new();
    for i in 0..300 {
        let route = match i % 3 {
            0 => Route::Lid {
                rlid: rng.bits(16) as u16,
            },
            r => {
                let mut rgid = [0u8; 16];
                rgid.iter_mut().for_each(|b| *b = rng.bits(8) as u8);
                let mut rmac = [0u8; 6];
                rmac.iter_mut().for_each(|b| *b = rng.bits(8) as u8);
                Route::Gid {
                    rgid,
                    sgid_index: rng.bits(8) as u8,
                    rmac,
                    hop_limit: rng.bits(8) as u8,
                    udp_sport: (r == 1).then(|| rng.bits(16) as u16),
                }
            }
        };
        v.push(Connect {
            qpn: rng.bits(24),
            port: rng.bits(8) as u8,
            mtu: rng.bits(3),
            remote_qpn: rng.bits(24),
            rq_psn: rng.bits(24),
            sq_psn: rng.bits(24),
            route,
            min_rnr_nak: rng.bits(5),
            ack_timeout: rng.bits(5),
            retry_count: rng.bits(3),
            rnr_retry: rng.bits(3),
            log_msg_max: rng.bits(5),
        });
    }
    v
}

fn case(cmd: &str, p: impl serde::Serialize) -> serde_json::Value {
    serde_json::json!({ "cmd": cmd, "p": p })
}

/// Every command the DevX path sends, over random and extreme field values, byte for byte.
#[test]
fn devx_commands_match_rdma_core_prm_definitions() {
    let mut rng = Rng(0x51ed_270b_9a4f_3c11);
    let mut cases = Vec::new();
    let mut ours: Vec<(String, Cmd)> = Vec::new();
    for p in cq_cases(&mut rng) {
        cases.push(case("create_cq", p));
        ours.push((format!("CREATE_CQ {p:?}"), prm::create_cq_in(&p)));
    }
    for p in qp_cases(&mut rng) {
        cases.push(case("create_qp", p));
        ours.push((format!("CREATE_QP {p:?}"), prm::create_qp_in(&p)));
    }
    for k in connect_cases(&mut rng) {
        for (name, cmd) in [
            ("rst2init", prm::rst2init_in(&k)),
            ("init2rtr", prm::init2rtr_in(&k)),
            ("rtr2rts", prm::rtr2rts_in(&k)),
        ] {
            cases.push(case(name, k));
            ours.push((format!("{name} {k:?}"), cmd));
        }
    }
    let Some(want) = reference(&cases) else {
        return;
    };
    for ((what, cmd), want) in ours.iter().zip(&want) {
        assert_eq!(cmd.bytes().len(), prm::CMD_IN_BYTES, "{what}");
        assert_eq!(&hex(cmd.bytes()), want, "{what}");
    }
    eprintln!("{} commands identical to rdma-core's", ours.len());
}

/// The comparison sees a single bit: a command with one field off by one differs.
#[test]
fn the_reference_comparison_notices_one_wrong_bit() {
    let p = QpParams {
        pdn: 0x12,
        cqn: 0x34,
        uar_page: 0x56,
        log_sq_size: 9,
        umem_id: 7,
        umem_offset: 0x1000,
        dbr_umem_id: 8,
        dbr_offset: 64,
    };
    let Some(want) = reference(&[case("create_qp", p)]) else {
        return;
    };
    assert_eq!(hex(prm::create_qp_in(&p).bytes()), want[0]);
    let mut wrong = prm::create_qp_in(&p);
    wrong.set(prm::qp::LOG_SQ_SIZE, 8);
    assert_ne!(hex(wrong.bytes()), want[0]);
    let mut moved = prm::create_qp_in(&p);
    moved.set(prm::qp::DBR_UMEM_VALID, 0);
    moved.set(
        prm::Field {
            name: "one bit off",
            off: prm::qp::DBR_UMEM_VALID.off + 1,
            bits: 1,
        },
        1,
    );
    assert_ne!(hex(moved.bytes()), want[0]);
}
