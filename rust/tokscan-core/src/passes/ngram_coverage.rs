//! The n-gram coverage pass (`--ngram-coverage`): per sample, how many tokens of the completion lie inside
//! an n-gram ([`COVERAGE_N`] tokens) that occurs at least twice in it, every occurrence counted (the Gopher
//! "fraction of characters in duplicated n-grams", over tokens); in the report, the distribution of that share
//! per category and over the corpus (`ngram_coverage` in each category's statistics).

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{json, Findings, Finishing, Pass};
use crate::error::Result;
use crate::pass_partial::{Mergeable, Pool, SampleOut, SamplePass, SampleView};
use crate::profile::Profile;
use crate::source::with_tokens;
use crate::stats::{CoverageStats, FractionDist};
use crate::token::TokenId;

/// The key of its statistics in each category's.
pub const NAME: &str = "ngram_coverage";

/// n of the repeated n-gram coverage statistic: 10 tokens (about 7-8 words of English; Gopher's
/// duplicate-n-gram rules use 5- to 10-word n-grams).
pub const COVERAGE_N: usize = 10;

#[derive(Default)]
struct CoverageScratch {
    mixed: Vec<u64>,
    hashes: Vec<u64>,
    seen: Vec<u64>,
    hot: Vec<u64>,
    hot_pos: Vec<u32>,
    table: Vec<u32>,
    dup: Vec<bool>,
}

thread_local! {
    static COVERAGE_SCRATCH: RefCell<CoverageScratch> = RefCell::new(CoverageScratch::default());
}

/// Tokens of `t` covered by an n-gram ([`COVERAGE_N`] tokens) that occurs at least twice in `t`, every
/// occurrence counted, overlapping occurrences counted once. 0 when `t` has fewer than `COVERAGE_N + 1` tokens.
///
/// Two passes. First every n-gram's 64-bit hash sets one bit of an L1-sized bitset (16 bits per n-gram); a bit
/// found already set is marked *hot*. Equal n-grams set the same bit, so every occurrence of a repeated n-gram
/// has a hot bit; in clean text no bit, or a few percent of them (collisions), are hot. Then only the n-grams on
/// hot bits go through an exact table (full hash, tokens compared), which marks every occurrence of each
/// repeated one. The count is exact; hashing only decides where to look.
pub fn ngram_coverage<T: TokenId + PartialEq>(t: &[T]) -> u32 {
    const N: usize = COVERAGE_N;
    let l = t.len();
    if l <= N {
        return 0;
    }
    let g = l - N + 1; // n-gram starts
    COVERAGE_SCRATCH.with(|s| {
        let s = &mut *s.borrow_mut();
        // Cyclic-polynomial (buzhash) rolling hash: one multiply per token, then rotations and xors; fused
        // with the bitset pass.
        let mix =
            |x: &T| u64::from(x.id()).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5851_F42D_4C95_7F2D;
        let bits = (g.next_power_of_two().trailing_zeros() + 4).max(10);
        let words = 1usize << (bits - 6);
        let CoverageScratch {
            mixed,
            hashes: h,
            seen,
            hot,
            hot_pos,
            table,
            dup,
        } = s;
        seen.clear();
        seen.resize(words, 0);
        hot.clear();
        hot.resize(words, 0);
        let v = &mut *mixed;
        v.clear();
        v.extend(t.iter().map(mix));
        h.clear();
        h.resize(g, 0);
        let mut any = false;
        let mut x = v[..N].iter().fold(0u64, |h, &m| h.rotate_left(1) ^ m);
        let (outs, ins) = (&v[..g], &v[N - 1..]);
        for i in 0..g {
            if i > 0 {
                x = x.rotate_left(1) ^ outs[i - 1].rotate_left(N as u32) ^ ins[i];
            }
            h[i] = x;
            let b = (x >> (64 - bits)) as usize;
            let (w, m) = (b >> 6, 1u64 << (b & 63));
            let s = seen[w];
            if s & m != 0 {
                hot[w] |= m;
                any = true;
            }
            seen[w] = s | m;
        }
        if !any {
            return 0;
        }
        hot_pos.clear();
        hot_pos.extend(h.iter().enumerate().filter_map(|(i, &x)| {
            let b = (x >> (64 - bits)) as usize;
            (hot[b >> 6] & (1u64 << (b & 63)) != 0).then_some(i as u32)
        }));
        let tbits = (2 * hot_pos.len())
            .next_power_of_two()
            .trailing_zeros()
            .max(4);
        let mask = (1usize << tbits) - 1;
        table.clear();
        table.resize(1 << tbits, 0);
        dup.clear();
        dup.resize(hot_pos.len(), false);
        for (k, &i) in hot_pos.iter().enumerate() {
            let i = i as usize;
            let x = h[i];
            let mut slot = (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - tbits)) as usize;
            loop {
                let e = table[slot];
                if e == 0 {
                    table[slot] = k as u32 + 1;
                    break;
                }
                let kf = (e - 1) as usize;
                let f = hot_pos[kf] as usize;
                if h[f] == x && t[f..f + N] == t[i..i + N] {
                    dup[kf] = true;
                    dup[k] = true;
                    break;
                }
                slot = (slot + 1) & mask;
            }
        }
        let mut covered = 0usize;
        let mut reach = 0usize;
        for (&i, &d) in hot_pos.iter().zip(dup.iter()) {
            if d {
                let i = i as usize;
                covered += i + N - i.max(reach);
                reach = i + N;
            }
        }
        covered as u32
    })
}

/// The plain definition of [`ngram_coverage`], kept as the oracle for tests.
pub fn ngram_coverage_naive<T: PartialEq>(t: &[T]) -> u32 {
    const N: usize = COVERAGE_N;
    if t.len() <= N {
        return 0;
    }
    let g = t.len() - N + 1;
    let mut covered = vec![false; t.len()];
    for i in 0..g {
        if (0..g).any(|j| j != i && t[j..j + N] == t[i..i + N]) {
            covered[i..i + N].iter_mut().for_each(|c| *c = true);
        }
    }
    covered.iter().filter(|&&c| c).count() as u32
}

/// The covered share of each sample's completion, per category.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Coverage(BTreeMap<String, FractionDist>);

impl Mergeable for Coverage {
    fn merge(&mut self, other: Coverage) {
        for (name, d) in other.0 {
            self.0.entry(name).or_default().merge(&d);
        }
    }
}

pub struct NgramCoverage;

impl Pass for NgramCoverage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn sampler<'s>(
        &'s self,
        _profile: &'s Profile,
    ) -> Result<Option<Box<dyn crate::pass_partial::Sampler + 's>>> {
        Ok(Some(Box::new(Counting::default())))
    }

    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn crate::pass_partial::Acc>> {
        crate::pass_partial::decode::<Coverage>(bytes)
    }

    fn finish(&self, at: &Finishing<'_>) -> Result<Findings> {
        let coverage = at
            .partial
            .passes
            .get::<Coverage>(NAME)?
            .ok_or_else(|| super::missing(NAME))?;
        let none = FractionDist::default();
        let mut all = FractionDist::default();
        let mut found = Findings::new(NAME, None::<&()>);
        // Every category of the report has the statistic, one whose samples were all unread too.
        for name in at.partial.categories.keys() {
            let d = coverage.0.get(name).unwrap_or(&none);
            all.merge(d);
            found.by_category.push((name.clone(), json(&stats(d))));
        }
        found.by_category.push((String::new(), json(&stats(&all))));
        Ok(found)
    }
}

fn stats(d: &FractionDist) -> CoverageStats {
    CoverageStats::from_fractions(COVERAGE_N as u32, d)
}

/// The per-sample side: one [`Coverage`] per worker.
#[derive(Default)]
struct Counting(Pool<Coverage>);

impl SamplePass for Counting {
    type Unit = Coverage;
    type Partial = Coverage;

    fn begin(&self, _first_row: u64) -> Coverage {
        self.0.take()
    }

    fn sample(&self, unit: &mut Coverage, s: &SampleView<'_>, _out: &mut SampleOut<'_>) {
        if s.unread {
            return;
        }
        let (cs, ce) = s.completion;
        let covered = if ce > cs {
            with_tokens!(s.tokens, t => ngram_coverage(&t[cs..ce]))
        } else {
            0
        };
        // Looked up by reference: a category's name is copied once per worker, not once per sample.
        let d = match unit.0.get_mut(s.category) {
            Some(d) => d,
            None => unit.0.entry(s.category.to_string()).or_default(),
        };
        d.add(covered, ce.saturating_sub(cs) as u32);
    }

    fn end(&self, unit: Coverage) {
        self.0.give(unit);
    }

    fn gathered(&self) -> Coverage {
        let mut all = Coverage::default();
        for c in self.0.drain() {
            all.merge(c);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Text-like ids: distinct enough that only planted repeats repeat.
    fn text(seed: u32, n: usize) -> Vec<u32> {
        (0..n as u32)
            .map(|i| 1000 + (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) % 150_000)
            .collect()
    }

    #[test]
    fn coverage_counts_every_occurrence_once() {
        let a = text(8, 12);
        let mut t = text(9, 30);
        t.extend_from_slice(&a);
        t.extend(text(10, 5));
        t.extend_from_slice(&a);
        // Two occurrences of a 12-token block: 3 ten-grams each, 12 tokens each.
        assert_eq!(ngram_coverage(&t), 24);
        assert_eq!(ngram_coverage_naive(&t), 24);
        assert_eq!(ngram_coverage(&text(11, 500)), 0);
        assert_eq!(ngram_coverage::<u32>(&[]), 0);
        let all_same = vec![3u32; 40];
        assert_eq!(ngram_coverage(&all_same), 40);
    }

    proptest! {
        #[test]
        fn coverage_equals_the_plain_definition(
            t in proptest::collection::vec(0u32..4, 0..300),
        ) {
            prop_assert_eq!(ngram_coverage(&t), ngram_coverage_naive(&t));
        }

        #[test]
        fn coverage_with_planted_repeats_equals_the_plain_definition(
            parts in proptest::collection::vec(
                (proptest::collection::vec(0u32..100_000, 0..60), proptest::collection::vec(0u32..100_000, 1..40), 0usize..4),
                1..5,
            ),
        ) {
            let mut t = Vec::new();
            for (text, unit, reps) in parts {
                t.extend(text);
                for _ in 0..reps { t.extend_from_slice(&unit); }
            }
            prop_assert_eq!(ngram_coverage(&t), ngram_coverage_naive(&t));
        }
    }
}
