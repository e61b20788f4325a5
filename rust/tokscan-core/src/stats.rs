//! Length statistics: exact quantiles (numpy's default linear interpolation) and a log2 histogram.

use serde::{Deserialize, Serialize};

/// Quantiles reported for every length series, in percent.
pub const QUANTILES: [(&str, f64); 7] = [
    ("p1", 1.0),
    ("p5", 5.0),
    ("p25", 25.0),
    ("median", 50.0),
    ("p75", 75.0),
    ("p95", 95.0),
    ("p99", 99.0),
];

/// A log-scale histogram: bin 0 holds zeros, bin k >= 1 holds lengths in `[2^(k-1), 2^k)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Lower edge of each bin (0, 1, 2, 4, 8, ...).
    pub edges: Vec<u64>,
    pub counts: Vec<u64>,
}

impl Histogram {
    pub fn bin(v: u32) -> usize {
        if v == 0 {
            0
        } else {
            32 - v.leading_zeros() as usize
        }
    }

    pub fn of(values: &[u32]) -> Histogram {
        let nbins = values
            .iter()
            .map(|&v| Histogram::bin(v))
            .max()
            .map_or(0, |b| b + 1);
        let mut counts = vec![0u64; nbins];
        for &v in values {
            counts[Histogram::bin(v)] += 1;
        }
        let edges = (0..nbins)
            .map(|b| if b == 0 { 0 } else { 1u64 << (b - 1) })
            .collect();
        Histogram { edges, counts }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthStats {
    pub min: u64,
    pub p1: f64,
    pub p5: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: u64,
    pub mean: f64,
    pub histogram: Histogram,
}

/// The q-th percentile of `n` sorted values read through `at`, interpolated linearly like `numpy.percentile`.
fn interpolate(n: usize, q: f64, at: impl Fn(usize) -> f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let pos = q / 100.0 * (n - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    at(lo) + (at(hi) - at(lo)) * (pos - lo as f64)
}

/// The q-th percentile of sorted lengths.
pub fn percentile(sorted: &[u32], q: f64) -> f64 {
    interpolate(sorted.len(), q, |i| f64::from(sorted[i]))
}

/// The q-th percentile of sorted floats (log-lengths).
pub fn percentile_f64(sorted: &[f64], q: f64) -> f64 {
    interpolate(sorted.len(), q, |i| sorted[i])
}

impl LengthStats {
    /// Statistics of `values` (sorted in place).
    pub fn of(values: &mut [u32]) -> LengthStats {
        values.sort_unstable();
        let q: Vec<f64> = QUANTILES
            .iter()
            .map(|(_, q)| percentile(values, *q))
            .collect();
        let sum: u64 = values.iter().map(|&v| u64::from(v)).sum();
        LengthStats {
            min: values.first().map_or(0, |&v| u64::from(v)),
            p1: q[0],
            p5: q[1],
            p25: q[2],
            median: q[3],
            p75: q[4],
            p95: q[5],
            p99: q[6],
            max: values.last().map_or(0, |&v| u64::from(v)),
            mean: if values.is_empty() {
                0.0
            } else {
                sum as f64 / values.len() as f64
            },
            histogram: Histogram::of(values),
        }
    }
}

/// Bins of the coverage histogram: bin k holds fractions in `[k/10, (k+1)/10)`, the last one also 1.
pub const FRACTION_BINS: usize = 10;

/// A linear histogram of fractions in [0, 1].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FractionHistogram {
    /// Lower edge of each bin (0.0, 0.1, ..., 0.9).
    pub edges: Vec<f64>,
    pub counts: Vec<u64>,
}

/// Distribution over samples of a per-sample fraction `part / whole` (0 when `whole` is 0): the repeated
/// n-gram coverage of completions. Quantiles interpolate like [`LengthStats`]; everything is computed from the
/// integer pairs, so it is the same for any grouping of the samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CoverageStats {
    /// The n of the n-grams.
    pub n: u32,
    pub min: f64,
    pub p1: f64,
    pub p5: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    pub histogram: FractionHistogram,
}

impl CoverageStats {
    /// Statistics of `(part, whole)` pairs.
    pub fn of(n: u32, pairs: impl Iterator<Item = (u32, u32)>) -> CoverageStats {
        let mut counts = vec![0u64; FRACTION_BINS];
        let mut v: Vec<f64> = pairs
            .map(|(part, whole)| {
                let bins = FRACTION_BINS as u64;
                let bin = if whole == 0 {
                    0
                } else {
                    (u64::from(part) * bins / u64::from(whole)).min(bins - 1)
                };
                counts[bin as usize] += 1;
                if whole == 0 {
                    0.0
                } else {
                    f64::from(part) / f64::from(whole)
                }
            })
            .collect();
        v.sort_by(f64::total_cmp);
        let q: Vec<f64> = QUANTILES
            .iter()
            .map(|(_, q)| percentile_f64(&v, *q))
            .collect();
        CoverageStats {
            n,
            min: v.first().copied().unwrap_or(0.0),
            p1: q[0],
            p5: q[1],
            p25: q[2],
            median: q[3],
            p75: q[4],
            p95: q[5],
            p99: q[6],
            max: v.last().copied().unwrap_or(0.0),
            mean: if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            },
            histogram: FractionHistogram {
                edges: (0..FRACTION_BINS)
                    .map(|k| k as f64 / FRACTION_BINS as f64)
                    .collect(),
                counts,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_numpy_linear() {
        let v = [1u32, 2, 3, 4, 10];
        assert_eq!(percentile(&v, 50.0), 3.0);
        assert_eq!(percentile(&v, 25.0), 2.0);
        assert!((percentile(&v, 99.0) - 9.76).abs() < 1e-9);
        assert_eq!(percentile(&[7], 5.0), 7.0);
    }

    #[test]
    fn coverage_stats_bin_by_exact_fractions() {
        let c = CoverageStats::of(
            10,
            [(0, 0), (0, 50), (1, 10), (3, 10), (10, 10), (7, 9)].into_iter(),
        );
        assert_eq!(c.histogram.counts, [2, 1, 0, 1, 0, 0, 0, 1, 0, 1]);
        assert_eq!((c.min, c.max), (0.0, 1.0));
        assert_eq!(c.median, 0.2);
        assert!((c.mean - (0.1 + 0.3 + 1.0 + 7.0 / 9.0) / 6.0).abs() < 1e-12);
        assert_eq!(c.histogram.edges[3], 0.3);
    }

    #[test]
    fn histogram_bins_are_powers_of_two() {
        let h = Histogram::of(&[0, 1, 2, 3, 4, 1000]);
        assert_eq!(h.edges[..4], [0, 1, 2, 4]);
        assert_eq!(h.counts[..4], [1, 1, 2, 1]);
        assert_eq!(h.counts.iter().sum::<u64>(), 6);
        assert_eq!(*h.edges.last().unwrap(), 512);
    }
}
