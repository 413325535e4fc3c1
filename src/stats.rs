//! The statistics gpudoctor reports and judges by, in one place: the median of a sample,
//! its (n, median, min, max) summary, and the robust z-score fleet finds outliers with.
//!
//! Pure functions of their input: no I/O, no units (callers name them), and nothing invented:
//! an empty or all-NaN sample has no median (None), never 0. As hyperfine's statistics do,
//! every summary says its n.

/// The median of the finite values of a sample (the mean of the middle two for even n). None
/// when no value is finite.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    median_of_sorted(&v)
}

/// The median of an already sorted slice; None when empty.
fn median_of_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    Some(if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    })
}

/// n, median, min and max of the finite values of a sample; None when no value is finite.
pub fn summary(samples: &[f64]) -> Option<(usize, f64, f64, f64)> {
    let finite: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    let med = median(&finite)?;
    Some((
        finite.len(),
        med,
        finite.iter().copied().fold(f64::INFINITY, f64::min),
        finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    ))
}

/// Modified z-scores of `values` (same order; Iglewicz and Hoaglin: z = 0.6745 (x - median) /
/// MAD), the median, the spread used and its kind. Where MAD is 0 (more than half the values
/// equal), the mean absolute deviation scaled by 1.2533 stands in for it, as in IBM's SPSS
/// and Minitab; where that is 0 too, every value is equal and every z is 0. An empty input has
/// a NaN median and no scores.
pub fn robust_z(values: &[f64]) -> (Vec<f64>, f64, f64, &'static str) {
    let mut s: Vec<f64> = values.to_vec();
    s.sort_by(f64::total_cmp);
    let med = median_of_sorted(&s).unwrap_or(f64::NAN);
    let mut dev: Vec<f64> = values.iter().map(|v| (v - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let mad = median_of_sorted(&dev).unwrap_or(f64::NAN);
    if mad > 0.0 {
        let z = values.iter().map(|v| 0.6745 * (v - med) / mad).collect();
        return (z, med, mad, "mad");
    }
    let mean_ad = dev.iter().sum::<f64>() / dev.len().max(1) as f64;
    if mean_ad > 0.0 {
        let d = 1.253314 * mean_ad;
        let z = values.iter().map(|v| (v - med) / d).collect();
        return (z, med, d, "mean-absolute-deviation");
    }
    (vec![0.0; values.len()], med, 0.0, "none (all equal)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_empty_and_nan() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[f64::NAN, 5.0, f64::INFINITY]), Some(5.0));
    }

    #[test]
    fn summary_says_n_of_the_finite_values() {
        assert_eq!(
            summary(&[2.0, f64::NAN, 4.0, 3.0]),
            Some((3, 3.0, 2.0, 4.0))
        );
        assert_eq!(summary(&[f64::NAN]), None);
    }

    #[test]
    fn robust_z_finds_the_slow_one_and_falls_back_when_mad_is_zero() {
        let (z, med, _, kind) = robust_z(&[100.0, 101.0, 99.0, 100.5, 99.5, 60.0]);
        assert_eq!((med, kind), (99.75, "mad"));
        assert!(z[5] < -3.5 && z[..5].iter().all(|z| z.abs() < 3.5), "{z:?}");
        let (z, _, _, kind) = robust_z(&[100.0, 100.0, 100.0, 100.0, 50.0]);
        assert_eq!(kind, "mean-absolute-deviation");
        assert!(z[4] < -1.0, "{z:?}");
        let (z, _, _, kind) = robust_z(&[7.0, 7.0]);
        assert_eq!((z, kind), (vec![0.0, 0.0], "none (all equal)"));
        let (z, med, _, _) = robust_z(&[]);
        assert!(z.is_empty() && med.is_nan());
    }
}
