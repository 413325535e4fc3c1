//! Words in their number, for every message that counts something (checks, the kernel log,
//! the renderers). A leaf: imports nothing of the crate, so any module may use it.

/// "1 function", "2 functions": the count and the noun in its number.
pub fn count(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_is_singular_every_other_count_plural() {
        assert_eq!(super::count(0, "GPU", "GPUs"), "0 GPUs");
        assert_eq!(super::count(1, "GPU", "GPUs"), "1 GPU");
        assert_eq!(super::count(2, "bridge", "bridges"), "2 bridges");
    }
}
