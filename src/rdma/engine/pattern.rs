//! The validation pattern both sides of a write-bw run compute: a byte per offset from the
//! size and a seed. Pure; no I/O.

/// The validation pattern for one size: position- and size-dependent so that a write landing at
/// the wrong offset, a short write or a stale buffer from the previous size all show.
pub fn fill_pattern(buf: &mut [u8], size: u64, seed: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(i as u64, size, seed);
    }
}

fn pattern_byte(i: u64, size: u64, seed: u64) -> u8 {
    let x = i
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(size.rotate_left(17))
        .wrapping_add(seed);
    (x ^ (x >> 29)) as u8
}

/// First offset in buf[..size] that does not hold the pattern.
pub fn check_pattern(buf: &[u8], size: u64, seed: u64) -> Option<u64> {
    buf.iter()
        .take(size as usize)
        .enumerate()
        .find(|(i, b)| **b != pattern_byte(*i as u64, size, seed))
        .map(|(i, _)| i as u64)
        .or(if (buf.len() as u64) < size {
            Some(buf.len() as u64)
        } else {
            None
        })
}

/// Seed of the validation pattern for one size (both sides compute it).
pub fn seed_for(size: u64) -> u64 {
    size.wrapping_mul(31).wrapping_add(0x5eed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_catches_errors() {
        let mut b = vec![0u8; 4096];
        fill_pattern(&mut b, 4096, 7);
        assert_eq!(check_pattern(&b, 4096, 7), None);
        assert_eq!(check_pattern(&b, 4096, 8), Some(0));
        b[100] ^= 1;
        assert_eq!(check_pattern(&b, 4096, 7), Some(100));
        let z = vec![0u8; 64];
        assert!(check_pattern(&z, 64, 1).is_some());
        assert_eq!(check_pattern(&z, 128, 1), Some(0));
    }
}
