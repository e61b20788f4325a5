//! Length statistics: exact quantiles (numpy's default linear interpolation) and a log2 histogram.

use std::collections::BTreeMap;

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
        Histogram {
            edges: Histogram::edges(nbins),
            counts,
        }
    }

    /// Lower edges of the first `nbins` bins.
    pub fn edges(nbins: usize) -> Vec<u64> {
        (0..nbins)
            .map(|b| if b == 0 { 0 } else { 1u64 << (b - 1) })
            .collect()
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

/// The `i`-th smallest value (0-based) of a distribution given as ascending `(value, count)` pairs.
fn nth<V: Copy>(pairs: &[(V, u64)], cum: &[u64], i: u64) -> V {
    let k = cum.partition_point(|&c| c <= i);
    pairs[k.min(pairs.len() - 1)].0
}

/// The quantiles of a distribution given as ascending `(value, count)` pairs, interpolated like
/// `numpy.percentile` over the expanded values.
fn quantiles<V: Copy>(pairs: &[(V, u64)], to_f64: impl Fn(V) -> f64) -> [f64; QUANTILES.len()] {
    let mut cum = Vec::with_capacity(pairs.len());
    let mut n = 0u64;
    for &(_, c) in pairs {
        n += c;
        cum.push(n);
    }
    let mut out = [0.0; QUANTILES.len()];
    for (o, (_, q)) in out.iter_mut().zip(QUANTILES) {
        *o = interpolate(n as usize, q, |i| to_f64(nth(pairs, &cum, i as u64)));
    }
    out
}

impl LengthStats {
    /// Statistics of `values`.
    pub fn of(values: &[u32]) -> LengthStats {
        let mut d = Dist::default();
        for &v in values {
            d.add(v);
        }
        LengthStats::from_dist(&d)
    }

    /// Statistics of a distribution of lengths (counts per distinct length): exact, whatever the grouping
    /// the counts were merged in.
    pub fn from_dist(d: &Dist) -> LengthStats {
        let pairs: Vec<(u32, u64)> = d.iter().collect();
        let n = d.n();
        let q = quantiles(&pairs, f64::from);
        let sum: u64 = pairs.iter().map(|&(v, c)| u64::from(v) * c).sum();
        let nbins = pairs.last().map_or(0, |&(v, _)| Histogram::bin(v) + 1);
        let mut counts = vec![0u64; nbins];
        for &(v, c) in &pairs {
            counts[Histogram::bin(v)] += c;
        }
        LengthStats {
            min: pairs.first().map_or(0, |&(v, _)| u64::from(v)),
            p1: q[0],
            p5: q[1],
            p25: q[2],
            median: q[3],
            p75: q[4],
            p95: q[5],
            p99: q[6],
            max: pairs.last().map_or(0, |&(v, _)| u64::from(v)),
            mean: if n == 0 { 0.0 } else { sum as f64 / n as f64 },
            histogram: Histogram {
                edges: Histogram::edges(nbins),
                counts,
            },
        }
    }
}

/// The log2-length quantiles `(q1, q3)` the length-outlier fence is built on: `log2(length + 1)` of the
/// distribution's values, interpolated like `numpy.percentile`.
pub fn log_quartiles(d: &Dist) -> (f64, f64) {
    let pairs: Vec<(u32, u64)> = d.iter().collect();
    let q = quantiles(&pairs, |v| (f64::from(v) + 1.0).log2());
    (q[2], q[4])
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
        let mut d = FractionDist::default();
        for (part, whole) in pairs {
            d.add(part, whole);
        }
        CoverageStats::from_fractions(n, &d)
    }

    /// Statistics of a distribution of fractions (counts per fraction in lowest terms). Everything is computed
    /// from the integer pairs in ascending order of value, so it is the same for any grouping of the samples.
    pub fn from_fractions(n: u32, d: &FractionDist) -> CoverageStats {
        let bins = FRACTION_BINS as u64;
        let mut counts = vec![0u64; FRACTION_BINS];
        let mut pairs: Vec<((u32, u32), u64)> = d.0.iter().map(|(&k, &c)| (k, c)).collect();
        // a/b < c/d  <=>  a*d < c*b (denominators are positive).
        pairs.sort_by(|((a, b), _), ((c, d), _)| {
            (u64::from(*a) * u64::from(*d)).cmp(&(u64::from(*c) * u64::from(*b)))
        });
        let value = |(p, w): (u32, u32)| f64::from(p) / f64::from(w);
        let mut total = 0u64;
        let mut sum = 0.0;
        for &((p, w), c) in &pairs {
            counts[(u64::from(p) * bins / u64::from(w)).min(bins - 1) as usize] += c;
            total += c;
            sum += value((p, w)) * c as f64;
        }
        let q = quantiles(&pairs, value);
        CoverageStats {
            n,
            min: pairs.first().map_or(0.0, |&(f, _)| value(f)),
            p1: q[0],
            p5: q[1],
            p25: q[2],
            median: q[3],
            p75: q[4],
            p95: q[5],
            p99: q[6],
            max: pairs.last().map_or(0.0, |&(f, _)| value(f)),
            mean: if total == 0 { 0.0 } else { sum / total as f64 },
            histogram: FractionHistogram {
                edges: (0..FRACTION_BINS)
                    .map(|k| k as f64 / FRACTION_BINS as f64)
                    .collect(),
                counts,
            },
        }
    }
}

/// Values below this are counted in a dense array (indexed by value; up to 512 KiB a series), the rest in a
/// map. A `BTreeMap` insert per sample and series was ~5 % of a NumPy scan (a node search among thousands of
/// distinct lengths); an array increment is one add.
const DENSE: usize = 1 << 16;

/// Counts per distinct value: an exact, mergeable distribution of integer lengths. Serialized as the map
/// `value -> count` of the values seen, whatever the layout in memory.
#[derive(Debug, Clone, Default)]
pub struct Dist {
    /// `dense[v]`: the count of `v`, for `v < DENSE`; grown to the largest such value seen.
    dense: Vec<u64>,
    sparse: BTreeMap<u32, u64>,
}

impl Dist {
    #[inline]
    pub fn add(&mut self, v: u32) {
        *self.count_of(v) += 1;
    }

    /// The counter of `v`: in the array (grown as needed) below [`DENSE`], else in the map.
    #[inline]
    fn count_of(&mut self, v: u32) -> &mut u64 {
        let i = v as usize;
        if i < DENSE {
            if i >= self.dense.len() {
                self.dense.resize((i + 1).next_power_of_two().min(DENSE), 0);
            }
            &mut self.dense[i]
        } else {
            self.sparse.entry(v).or_insert(0)
        }
    }

    pub fn merge(&mut self, other: &Dist) {
        if self.dense.len() < other.dense.len() {
            self.dense.resize(other.dense.len(), 0);
        }
        for (a, b) in self.dense.iter_mut().zip(&other.dense) {
            *a += b;
        }
        merge_counts(&mut self.sparse, &other.sparse);
    }

    pub fn n(&self) -> u64 {
        self.dense.iter().sum::<u64>() + self.sparse.values().sum::<u64>()
    }

    /// The values in ascending order with their counts (values never seen are left out).
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.dense
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(v, &c)| (v as u32, c))
            .chain(self.sparse.iter().map(|(&v, &c)| (v, c)))
    }
}

impl PartialEq for Dist {
    fn eq(&self, other: &Dist) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Dist {}

impl Serialize for Dist {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // The length up front: the wire format needs it.
        let mut m = s.serialize_map(Some(self.iter().count()))?;
        for (v, c) in self.iter() {
            m.serialize_entry(&v, &c)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dist, D::Error> {
        let mut out = Dist::default();
        for (v, c) in BTreeMap::<u32, u64>::deserialize(d)? {
            *out.count_of(v) += c;
        }
        Ok(out)
    }
}

/// Repeated n-gram coverage of completions: counts per distinct fraction `covered / length`, kept reduced to
/// lowest terms (0 as `0/1`), so equal fractions share an entry whatever the lengths.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FractionDist(pub BTreeMap<(u32, u32), u64>);

impl FractionDist {
    pub fn add(&mut self, part: u32, whole: u32) {
        let key = if part == 0 || whole == 0 {
            (0, 1)
        } else {
            let g = gcd(part, whole);
            (part / g, whole / g)
        };
        *self.0.entry(key).or_insert(0) += 1;
    }

    pub fn merge(&mut self, other: &FractionDist) {
        merge_counts(&mut self.0, &other.0);
    }
}

/// Adds the counts of `b` to `a`. Two maps of similar size are merged as the sorted sequences they are and
/// the result built in one go (linear; a lookup per key of `b` was most of the merge of a scan's per-worker
/// statistics, thousands of distinct lengths per category); a small `b` is added key by key.
pub fn merge_counts<K: Ord + Copy>(a: &mut BTreeMap<K, u64>, b: &BTreeMap<K, u64>) {
    if b.len() < 64 || b.len() < a.len() / 16 {
        for (&k, &c) in b {
            *a.entry(k).or_insert(0) += c;
        }
        return;
    }
    let merged = crate::flagged::merge_sorted(
        std::mem::take(a).into_iter().collect(),
        b.iter().map(|(&k, &c)| (k, c)).collect(),
        |&(k, _)| k,
        |x, y| x.1 += y.1,
    );
    *a = merged.into_iter().collect();
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Merged counts equal the counts of both value lists together, for maps of any relative sizes
        /// (the key-by-key and the linear merge).
        #[test]
        fn merged_counts_equal_counts_of_all_values(
            a in proptest::collection::vec(0u32..400, 0..600),
            b in proptest::collection::vec(0u32..400, 0..600),
        ) {
            let count = |v: &[u32]| {
                let mut m = BTreeMap::new();
                for &x in v {
                    *m.entry(x).or_insert(0u64) += 1;
                }
                m
            };
            let mut got = count(&a);
            merge_counts(&mut got, &count(&b));
            proptest::prop_assert_eq!(got, count(&[a, b].concat()));
        }

        /// A distribution counts what a map of every value counts, on both sides of the dense range, merged in
        /// any split, and survives the wire (as a map, whatever the array's length).
        #[test]
        fn dist_counts_equal_a_map_of_the_values(
            a in proptest::collection::vec(proptest::prop_oneof![0u32..300, 65_530u32..65_540, 0u32..200_000], 0..300),
            b in proptest::collection::vec(proptest::prop_oneof![0u32..300, 0u32..200_000], 0..300),
        ) {
            let of = |v: &[u32]| {
                let mut d = Dist::default();
                for &x in v {
                    d.add(x);
                }
                d
            };
            let mut want = BTreeMap::new();
            for &x in a.iter().chain(&b) {
                *want.entry(x).or_insert(0u64) += 1;
            }
            let mut got = of(&a);
            got.merge(&of(&b));
            proptest::prop_assert_eq!(got.iter().collect::<BTreeMap<_, _>>(), want.clone());
            proptest::prop_assert_eq!(got.n(), (a.len() + b.len()) as u64);
            proptest::prop_assert_eq!(&got, &of(&[b.clone(), a.clone()].concat()));
            let wire: Dist = crate::wire::decode(&crate::wire::encode(&got), "dist").unwrap();
            proptest::prop_assert_eq!(&wire, &got);
            let json = serde_json::to_value(&got).unwrap();
            proptest::prop_assert_eq!(json, serde_json::to_value(&want).unwrap());
        }

        /// Quantiles from counts per distinct length equal those of the sorted values (the oracle).
        #[test]
        fn counted_quantiles_equal_sorted_ones(mut v in proptest::collection::vec(0u32..5000, 1..300)) {
            let s = LengthStats::of(&v);
            v.sort_unstable();
            let want: Vec<f64> = QUANTILES.iter().map(|(_, q)| percentile(&v, *q)).collect();
            proptest::prop_assert_eq!(vec![s.p1, s.p5, s.p25, s.median, s.p75, s.p95, s.p99], want);
            proptest::prop_assert_eq!((s.min, s.max), (u64::from(v[0]), u64::from(*v.last().unwrap())));
            proptest::prop_assert_eq!(s.histogram, Histogram::of(&v));
        }
    }

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
