//! Bus bandwidth exactly as NVIDIA's nccl-tests computes it (src/all_reduce.cu,
//! src/all_gather.cu, src/common.cu), so that `probe nccl` and `all_reduce_perf` print the
//! same number for the same run:
//!
//! - a sweep point is a `size` in bytes (`-b 8M -e 1G -f 2`) of float32 elements;
//! - all-reduce: count = size / 4 elements in and out of each rank; algbw = size / time;
//!   busbw = algbw * 2(n-1)/n;
//! - all-gather: each rank sends base = (size/4/n) rounded down to 16 bytes' worth of elements
//!   and receives base*n; the size shown is base*4*n; algbw = base*4*n / time;
//!   busbw = algbw * (n-1)/n;
//! - time is the average of `iters` back-to-back collectives after warm-up.
//!
//! Pure arithmetic; decimal GB/s (10^9 B/s), as nccl-tests prints.

use crate::report::nccl::Collective;
use serde::{Deserialize, Serialize};

/// Bytes of one float32, the type the probe (and nccl-tests' default `-d float`) moves.
pub const ELEMENT_BYTES: u64 = 4;

/// What one sweep point moves, in nccl-tests' terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// The `size` column nccl-tests prints (bytes).
    pub size_bytes: u64,
    /// The element count passed to NCCL (all-gather: per rank).
    pub count: u64,
    /// Bytes each rank's send buffer holds.
    pub send_bytes: u64,
    /// Bytes each rank's receive buffer holds.
    pub recv_bytes: u64,
}

/// nccl-tests' shape of sweep point `size` for `ranks` ranks.
pub fn shape(c: Collective, size: u64, ranks: u32) -> Shape {
    let n = u64::from(ranks.max(1));
    let count = size / ELEMENT_BYTES;
    match c {
        Collective::AllReduce => Shape {
            size_bytes: count * ELEMENT_BYTES,
            count,
            send_bytes: count * ELEMENT_BYTES,
            recv_bytes: count * ELEMENT_BYTES,
        },
        Collective::AllGather => {
            // (count/nranks) & ~(16/eltSize - 1): whole 16-byte groups per rank.
            let base = (count / n) & !(16 / ELEMENT_BYTES - 1);
            Shape {
                size_bytes: base * ELEMENT_BYTES * n,
                count: base,
                send_bytes: base * ELEMENT_BYTES,
                recv_bytes: base * ELEMENT_BYTES * n,
            }
        }
    }
}

/// Algorithm bandwidth, GB/s, of one collective of `shape` taking `seconds`.
pub fn algbw_gbps(c: Collective, s: &Shape, ranks: u32, seconds: f64) -> f64 {
    let bytes = match c {
        Collective::AllReduce => s.count * ELEMENT_BYTES,
        Collective::AllGather => s.count * ELEMENT_BYTES * u64::from(ranks),
    };
    bytes as f64 / 1e9 / seconds
}

/// nccl-tests' bus-bandwidth factor: 2(n-1)/n for all-reduce, (n-1)/n for all-gather.
pub fn bus_factor(c: Collective, ranks: u32) -> f64 {
    let n = f64::from(ranks.max(1));
    match c {
        Collective::AllReduce => 2.0 * (n - 1.0) / n,
        Collective::AllGather => (n - 1.0) / n,
    }
}

pub fn busbw_gbps(c: Collective, s: &Shape, ranks: u32, seconds: f64) -> f64 {
    algbw_gbps(c, s, ranks, seconds) * bus_factor(c, ranks)
}

/// The sweep: `min`, doubling, up to and including `max` (nccl-tests' `-f 2`).
pub fn sweep(min: u64, max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        match s.checked_mul(2) {
            Some(n) => s = n,
            None => break,
        }
    }
    v
}

/// `8M`, `1G`, `65536`, `64K`: bytes, binary multiples (as nccl-tests' -b/-e read them).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("'{s}': expected bytes, e.g. 8M, 1G or 65536"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nccl-tests' own output rows (size, count, time us, algbw, busbw), out-of-place columns.
    fn rows(file: &str) -> Vec<(u64, u64, f64, f64, f64)> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/nccl-2.28.9/h200x2")
            .join(file);
        let text = std::fs::read_to_string(&p).expect("the recorded nccl-tests output");
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (
                    w[0].parse().unwrap(),
                    w[1].parse().unwrap(),
                    w[5].parse().unwrap(),
                    w[6].parse().unwrap(),
                    w[7].parse().unwrap(),
                )
            })
            .collect()
    }

    /// Our arithmetic on nccl-tests' recorded times gives nccl-tests' recorded bandwidths
    /// (to the 2 decimals it prints, time itself being rounded to 0.01 us).
    #[test]
    fn matches_recorded_nccl_tests_on_two_h200s() {
        for (file, c) in [
            ("p2p-allreduce.txt", Collective::AllReduce),
            ("p2p-allgather.txt", Collective::AllGather),
            ("net-allreduce.txt", Collective::AllReduce),
        ] {
            let r = rows(file);
            assert!(r.len() >= 6, "{file}");
            for (size, count, us, alg, bus) in r {
                let s = shape(c, size, 2);
                assert_eq!(s.size_bytes, size, "{file} {size}");
                assert_eq!(s.count, count, "{file} {size}");
                let a = algbw_gbps(c, &s, 2, us * 1e-6);
                let b = busbw_gbps(c, &s, 2, us * 1e-6);
                // Printed to 2 decimals, from a time printed to 4-6 significant digits.
                let close = |x: f64, y: f64| (x - y).abs() <= (2e-4 * y).max(0.006);
                assert!(close(a, alg), "{file} {size}: algbw {a} vs {alg}");
                assert!(close(b, bus), "{file} {size}: busbw {b} vs {bus}");
            }
        }
    }

    #[test]
    fn factors_and_uneven_all_gather() {
        assert_eq!(bus_factor(Collective::AllReduce, 8), 1.75);
        assert_eq!(bus_factor(Collective::AllGather, 4), 0.75);
        // 3 ranks: 8 MiB / 4 B = 2097152 elements; /3 = 699050, down to a multiple of 4.
        let s = shape(Collective::AllGather, 8 << 20, 3);
        assert_eq!(s.count, 699048);
        assert_eq!(s.size_bytes, 699048 * 4 * 3);
    }

    #[test]
    fn sweep_and_sizes() {
        assert_eq!(sweep(8 << 20, 1 << 30).len(), 8);
        assert_eq!(sweep(8 << 20, 8 << 20), vec![8 << 20]);
        assert!(sweep(2, 1).is_empty());
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("65536"), Ok(65536));
        assert!(parse_size("1X").is_err() && parse_size("0").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
