//! The Rust mlx5 WQE/CQE layer (`gpudoctor::rdma::mlx5::wqe`) against libmlx5's own inline helpers:
//! tests/c/mlx5_reference.c is compiled with `cc` against `infiniband/mlx5dv.h` (libibverbs-dev)
//! and fed the same cases; every WQE, doorbell, doorbell record and CQE must match byte for
//! byte, and both sides must read the same CQE bytes the same way. Skips (with a message) where
//! cc or the header is missing, unless GPUDOCTOR_REQUIRE_MLX5DV=1 (scripts/test installs them).

use crate::repo;
use gpudoctor::rdma::mlx5::wqe::{self as mlx5, CqeFields, CqePoll, RdmaWrite};
use std::io::Write;
use std::process::{Command, Stdio};

/// xorshift64*: deterministic cases, no dependency (mlx5_prm.rs's cases too).
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize]
    }
    /// The top `n` bits (1..=32) of the next value.
    pub(crate) fn bits(&mut self, n: u32) -> u32 {
        (self.next() >> (64 - n)) as u32
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Compile the reference program (one binary per test: nextest runs tests in parallel
/// processes); None (skipped) when cc or the header is missing here.
fn reference(test: &str) -> Option<std::path::PathBuf> {
    let require = std::env::var("GPUDOCTOR_REQUIRE_MLX5DV").as_deref() == Ok("1");
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mlx5_reference-{test}"));
    let src = repo().join("tests/c/mlx5_reference.c");
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .output();
    let o = match cc {
        Ok(o) => o,
        Err(e) => {
            assert!(
                !require,
                "GPUDOCTOR_REQUIRE_MLX5DV=1 but cc cannot run: {e}"
            );
            eprintln!("cc not found ({e}): skipped");
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        let no_header = stderr.contains("mlx5dv.h") && stderr.contains("No such file");
        assert!(
            no_header && !require,
            "compiling {} failed (GPUDOCTOR_REQUIRE_MLX5DV={}; the header comes with \
             libibverbs-dev):\n{stderr}",
            src.display(),
            std::env::var("GPUDOCTOR_REQUIRE_MLX5DV").unwrap_or_default()
        );
        eprintln!("infiniband/mlx5dv.h missing (apt-get install libibverbs-dev): skipped");
        return None;
    }
    Some(out)
}

fn run_reference(bin: &std::path::Path, input: &str) -> Vec<String> {
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let o = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(
        o.status.success(),
        "reference failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_cases() -> Vec<(RdmaWrite, u32)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let sizes = [1u32, 2, 64, 128, 256, 1024, 4096, 32768];
    let flags = [
        0u8,
        mlx5::CTRL_CQ_UPDATE,
        mlx5::CTRL_CQ_UPDATE | mlx5::CTRL_SOLICITED,
        mlx5::CTRL_FENCE,
        mlx5::CTRL_FENCE | mlx5::CTRL_CQ_UPDATE,
    ];
    let mut v = Vec::new();
    // Edges: the 16-bit index wrapping, slots at both ends of the ring, extreme fields.
    let edges = [0u16, 1, 255, 256, 511, 512, 0x7fff, 0x8000, 0xfffe, 0xffff];
    for &index in &edges {
        for &sq in &[1u32, 64, 256, 32768] {
            v.push((
                RdmaWrite {
                    index,
                    qpn: 0x00ff_ffff,
                    laddr: u64::MAX,
                    lkey: u32::MAX,
                    length: 0x7fff_ffff,
                    raddr: 0,
                    rkey: 0,
                    flags: mlx5::CTRL_CQ_UPDATE,
                    imm: None,
                    signature: 0xff,
                },
                sq,
            ));
        }
    }
    // A poster's run: 512 consecutive writes wrapping a 256-entry ring, every 512th signaled.
    for i in 0..1024u32 {
        v.push((
            RdmaWrite {
                index: (0xff00 + i) as u16,
                qpn: 0x1c3,
                laddr: 0x7f12_3400_0000 + u64::from(i) * 4096,
                lkey: 0x0001_2345,
                length: 4096,
                raddr: 0x7f99_0000_0000 + u64::from(i) * 4096,
                rkey: 0x0006_789a,
                flags: if i % 512 == 511 {
                    mlx5::CTRL_CQ_UPDATE
                } else {
                    0
                },
                imm: None,
                signature: 0,
            },
            256,
        ));
    }
    for _ in 0..2000 {
        let sq = 1u32 << (rng.next() % 16);
        let imm = (rng.next().is_multiple_of(3)).then(|| rng.next() as u32);
        v.push((
            RdmaWrite {
                index: rng.next() as u16,
                qpn: rng.next() as u32,
                laddr: rng.next(),
                lkey: rng.next() as u32,
                length: if rng.next().is_multiple_of(2) {
                    rng.pick(&sizes)
                } else {
                    rng.next() as u32 & 0x7fff_ffff
                },
                raddr: rng.next(),
                rkey: rng.next() as u32,
                flags: if rng.next().is_multiple_of(4) {
                    rng.next() as u8
                } else {
                    rng.pick(&flags)
                },
                imm,
                signature: rng.next() as u8,
            },
            sq,
        ));
    }
    v
}

#[test]
fn wqes_match_libmlx5_helpers() {
    let Some(bin) = reference("wqes") else { return };
    let cases = write_cases();
    let input: String = cases
        .iter()
        .map(|(w, sq)| {
            format!(
                "W {:#x} {sq:#x} {:#x} {:#x} {:#x} 3 {:#x} {:#x} {:#x} {:#x} {:#x} {:#x} {:#x}\n",
                w.index,
                w.qpn,
                w.opcode(),
                w.flags,
                w.signature,
                w.imm.unwrap_or(0),
                w.raddr,
                w.rkey,
                w.length,
                w.lkey,
                w.laddr
            )
        })
        .collect();
    let lines = run_reference(&bin, &input);
    assert_eq!(lines.len(), cases.len());
    for ((w, sq), line) in cases.iter().zip(&lines) {
        let want = format!(
            "W {} {} {} {}",
            mlx5::wqe_offset(w.index, *sq),
            hex(&w.wqe()),
            hex(&w.doorbell().to_ne_bytes()),
            hex(&mlx5::sq_dbr(u32::from(w.index) + 1)),
        );
        assert_eq!(&want, line, "case {w:?} in a ring of {sq}\n(rust, then C)");
        // The emulator side reads back what libmlx5 would have written.
        let c_wqe: Vec<u8> = (0..64)
            .map(|i| {
                u8::from_str_radix(&line.split(' ').nth(2).unwrap()[2 * i..2 * i + 2], 16).unwrap()
            })
            .collect();
        let parsed = mlx5::parse_write_wqe(c_wqe.as_slice().try_into().unwrap()).unwrap();
        assert_eq!(
            parsed,
            RdmaWrite {
                qpn: w.qpn & 0x00ff_ffff,
                ..*w
            }
        );
    }
}

#[test]
fn cqes_match_libmlx5_structs_and_macros() {
    let Some(bin) = reference("cqes") else { return };
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    // Built: the device side's CQE bytes (emulator) against the C structs.
    let mut built = Vec::new();
    for op in [0u8, 1, 2, 13, 14] {
        for owner in [0u8, 1] {
            for _ in 0..40 {
                let err = op == 13 || op == 14;
                built.push(CqeFields {
                    raw_opcode: op,
                    owner,
                    wqe_counter: rng.next() as u16,
                    qpn: rng.next() as u32 & 0x00ff_ffff,
                    byte_cnt: if err { 0 } else { rng.next() as u32 },
                    error: err.then(|| {
                        (
                            rng.pick(&[
                                0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
                                0x16, 0x22, 0x99,
                            ]),
                            rng.next() as u8,
                            rng.pick(&[mlx5::OPCODE_RDMA_WRITE, mlx5::OPCODE_RDMA_WRITE_IMM]),
                        )
                    }),
                });
            }
        }
    }
    let input: String = built
        .iter()
        .map(|c| {
            let (s, v, o) = c.error.unwrap_or((0, 0, 0));
            format!(
                "C {:#x} {:#x} {:#x} {:#x} {:#x} {s:#x} {v:#x} {o:#x}\n",
                c.raw_opcode, c.owner, c.wqe_counter, c.qpn, c.byte_cnt
            )
        })
        .collect();
    let lines = run_reference(&bin, &input);
    assert_eq!(lines.len(), built.len());
    for (c, line) in built.iter().zip(&lines) {
        assert_eq!(&format!("C {}", hex(&c.bytes())), line, "{c:?}");
    }

    // Parsed: arbitrary bytes (and well-formed ones) read by both sides, at many consumer
    // indices and CQ sizes, wrap-around included.
    let mut raw: Vec<([u8; 64], u32, u32)> = Vec::new();
    for c in &built {
        for ci in [0u32, 7, 64, 65, 128, 1000, 0xff_ffff] {
            raw.push((c.bytes(), ci, 64));
        }
    }
    for _ in 0..2000 {
        let mut b = [0u8; 64];
        for x in b.iter_mut() {
            *x = rng.next() as u8;
        }
        raw.push((b, rng.next() as u32 & 0x00ff_ffff, 1 << (rng.next() % 17)));
    }
    let input: String = raw
        .iter()
        .map(|(b, ci, n)| format!("P {ci:#x} {n:#x} {}\n", hex(b)))
        .collect();
    let lines = run_reference(&bin, &input);
    assert_eq!(lines.len(), raw.len());
    let mut ready = 0;
    for ((b, ci, n), line) in raw.iter().zip(&lines) {
        let c = mlx5::parse_cqe(b);
        let is_ready = matches!(mlx5::poll_cqe(b, *ci, *n), CqePoll::Ready(_));
        ready += usize::from(is_ready);
        let (s, v, o) = c
            .error
            .map(|e| (e.syndrome.as_u8(), e.vendor_syndrome, e.wqe_opcode))
            .unwrap_or((0, 0, 0));
        let want = format!(
            "P {} {} {} {} {} {} {s} {v} {o}",
            u8::from(is_ready),
            c.raw_opcode,
            c.owner,
            c.wqe_counter,
            c.qpn,
            c.byte_cnt
        );
        assert_eq!(&want, line, "ci {ci}, cq size {n}, bytes {}", hex(b));
    }
    // Both outcomes were exercised.
    assert!(
        ready > 100 && ready < raw.len() - 100,
        "{ready} of {}",
        raw.len()
    );
}
