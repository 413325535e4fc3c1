//! NUMA vocabulary: CPU lists (`0-55,112-167`) and node sets. Pure parsers, no I/O.

use std::collections::BTreeSet;

/// Most CPUs a cpulist may name, duplicates counted (the kernel's NR_CPUS is at most 8192;
/// room for the future). A hostile 64 KiB list of `0-65535` repeated once took 38 s.
pub const MAX_CPULIST_CPUS: usize = 1 << 16;
/// Largest CPU number accepted.
const MAX_CPU_ID: u32 = 1 << 20;

/// Parse a kernel cpulist (`0-3,8,10-11`). Empty text is an empty set. Linear in the input
/// and in MAX_CPULIST_CPUS: a list naming more CPUs than that is refused (None).
pub fn parse_cpulist(s: &str) -> Option<BTreeSet<u32>> {
    let mut cpus: Vec<u32> = Vec::new();
    each_range(s, |a, b, stride| {
        cpus.extend((a..=b).step_by(stride as usize))
    })?;
    cpus.sort_unstable();
    cpus.dedup();
    // From sorted input, BTreeSet builds in linear time.
    Some(cpus.into_iter().collect())
}

/// Whether `parse_cpulist` accepts `s`, without building the set (discovery keeps the text).
pub fn is_cpulist(s: &str) -> bool {
    each_range(s, |_, _, _| {}).is_some()
}

/// Each range of a cpulist as (first, last, stride), checked as `parse_cpulist` checks it:
/// None for a malformed list or one naming more than MAX_CPULIST_CPUS CPUs.
fn each_range(s: &str, mut f: impl FnMut(u32, u32, u32)) -> Option<()> {
    let t = s.trim();
    if t.is_empty() {
        return Some(());
    }
    let mut count = 0usize;
    for part in t.split(',') {
        let part = part.trim();
        // Kernel also writes strides (`0-31:2`) in some files; accept them.
        let (range, stride) = match part.split_once(':') {
            Some((r, st)) => (r, st.parse::<u32>().ok().filter(|v| *v > 0)?),
            None => (part, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let v = range.parse::<u32>().ok()?;
                (v, v)
            }
        };
        if b < a || b > MAX_CPU_ID {
            return None;
        }
        count += ((b - a) / stride) as usize + 1;
        if count > MAX_CPULIST_CPUS {
            return None;
        }
        f(a, b, stride);
    }
    Some(())
}

/// Format a set back into the kernel's compact form.
pub fn format_cpulist(set: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end = it.next().unwrap_or(end);
        }
        if start == end {
            parts.push(start.to_string());
        } else {
            parts.push(format!("{start}-{end}"));
        }
    }
    parts.join(",")
}

/// `numa_node` contents: Some(n) for a node, None for -1 ("unknown", never node 0).
pub fn parse_numa_node(s: &str) -> Result<Option<u32>, String> {
    let t = s.trim();
    match t.parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(v) if (0..4096).contains(&v) => Ok(Some(v as u32)),
        _ => Err(format!("'{t}' is not a NUMA node number")),
    }
}

/// Most entries a node's `distance` line may hold: one per node, and the kernel has at most
/// 1 << NODES_SHIFT (at most 10) nodes. Without the cap every node of a hostile tree could hold
/// a 1 MiB line, and a few thousand nodes gigabytes of distances.
pub const MAX_DISTANCES: usize = 1024;

/// A node's `distance` line: `10 21`. More than MAX_DISTANCES entries is refused (None).
pub fn parse_distances(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for x in s.split_whitespace() {
        if out.len() == MAX_DISTANCES {
            return None;
        }
        out.push(x.parse().ok()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpulists() {
        let s = parse_cpulist("0-3,8,10-11").unwrap();
        assert_eq!(s.len(), 7);
        assert_eq!(format_cpulist(&s), "0-3,8,10-11");
        assert_eq!(parse_cpulist("").unwrap().len(), 0);
        assert_eq!(parse_cpulist("0-7:2").unwrap().len(), 4);
        assert!(parse_cpulist("3-1").is_none());
        assert!(parse_cpulist("a").is_none());
        assert!(parse_cpulist("0-4294967295").is_none());
        assert_eq!(parse_cpulist("0-3,2-5").unwrap().len(), 6);
        // Caps: at most MAX_CPULIST_CPUS named, whatever the text's length.
        assert_eq!(parse_cpulist("0-65535").unwrap().len(), 65536);
        assert!(parse_cpulist("0-65535,0").is_none());
        let hostile = vec!["0-65535"; 8000].join(",");
        let t0 = std::time::Instant::now();
        assert!(parse_cpulist(&hostile).is_none());
        let many: String = (0..60000).map(|i| format!("{i},")).collect();
        assert_eq!(
            parse_cpulist(many.trim_end_matches(',')).unwrap().len(),
            60000
        );
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t0.elapsed()
        );
    }

    /// One entry per node, at most MAX_DISTANCES: a 1 MiB line is refused, not kept.
    #[test]
    fn distances_are_capped() {
        assert_eq!(parse_distances("10 21\n"), Some(vec![10, 21]));
        let full = vec!["10"; MAX_DISTANCES].join(" ");
        assert_eq!(parse_distances(&full).map(|v| v.len()), Some(MAX_DISTANCES));
        assert!(parse_distances(&format!("{full} 10")).is_none());
        assert!(parse_distances(&"10 ".repeat(500_000)).is_none());
        assert!(parse_distances("10 x").is_none());
    }

    #[test]
    fn numa_minus_one_is_unknown() {
        assert_eq!(parse_numa_node("-1\n"), Ok(None));
        assert_eq!(parse_numa_node("1"), Ok(Some(1)));
        assert!(parse_numa_node("").is_err());
        assert!(parse_numa_node("x").is_err());
    }

    proptest! {
        /// The check without the set accepts exactly what the parse accepts.
        #[test]
        fn is_cpulist_is_whether_it_parses(s in "[0-9,:\\- a]{0,14}") {
            prop_assert_eq!(is_cpulist(&s), parse_cpulist(&s).is_some());
        }

        #[test]
        fn never_panics(s in ".{0,40}") {
            let _ = parse_cpulist(&s);
            let _ = parse_numa_node(&s);
            let _ = parse_distances(&s);
        }
        #[test]
        fn roundtrip(v in proptest::collection::btree_set(0u32..512, 0..64)) {
            prop_assert_eq!(parse_cpulist(&format_cpulist(&v)).unwrap(), v);
        }
    }
}
