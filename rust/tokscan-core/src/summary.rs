//! Mergeable scan results.
//!
//! A [`Partial`] is what a scan of any subset of the corpus's units knows that the report needs: per
//! category, the count of every distinct length (so quantiles stay exact), special-token and anomaly counts,
//! and the flagged samples in full. Its size grows with the categories, the distinct lengths and the flagged
//! samples, not with the number of samples, and partials merge associatively and commutatively.
//!
//! The corpus-wide checks (duplicates, duplicate sample ids, length outliers) need one small key per sample:
//! [`crate::records::Records`] stay with whoever scanned them (in memory for a local scan, in a worker's
//! object store on a cluster) and are routed and resolved by [`crate::corpus_checks`]. The flagged samples
//! themselves are [`crate::flagged::FlaggedSample`]s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::anomaly::N_CODES;
use crate::check::Lengths;
use crate::error::Result;
use crate::flagged::{merge_by_row, merge_sorted, FlaggedSample};
use crate::records::category_index;
use crate::stats::Dist;
use crate::wire::{decode, encode};

/// One category's share of a partial summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryPartial {
    pub samples: u64,
    pub tokens: u64,
    pub prompt: Dist,
    pub thinking: Dist,
    pub response: Dist,
    pub total: Dist,
    /// Per special-token slot of the profile.
    pub special_counts: Vec<u64>,
    /// Samples flagged with each code (per-sample codes only; the corpus-wide ones are added when the report
    /// is built).
    pub codes: Vec<u64>,
    /// Samples per structural feature value (`feature << 4 | value`, see [`crate::check::features`]).
    #[serde(default)]
    pub features: BTreeMap<u16, u64>,
    /// `truncated` samples by where they were cut, per [`crate::check::CutIn`].
    #[serde(default)]
    pub cut_in: [u64; 3],
}

impl CategoryPartial {
    /// Counts one sample's packed features.
    pub fn add_features(&mut self, packed: u32) {
        for f in 0..crate::check::features::FEATURES.len() {
            let v = crate::check::features::get(packed, f);
            if v != crate::check::features::NA {
                *self
                    .features
                    .entry(((f as u16) << 4) | u16::from(v))
                    .or_insert(0) += 1;
            }
        }
    }

    pub fn new(n_slots: usize) -> Self {
        CategoryPartial {
            special_counts: vec![0; n_slots],
            codes: vec![0; N_CODES],
            ..Default::default()
        }
    }

    pub fn add_lengths(&mut self, l: &Lengths) {
        self.samples += 1;
        self.tokens += u64::from(l.total);
        self.prompt.add(l.prompt);
        self.thinking.add(l.thinking);
        self.response.add(l.response);
        self.total.add(l.total);
    }

    pub fn add_codes(&mut self, flags: u64) {
        for (i, c) in self.codes.iter_mut().enumerate() {
            *c += (flags >> i) & 1;
        }
    }

    pub fn merge(&mut self, other: &CategoryPartial) {
        self.samples += other.samples;
        self.tokens += other.tokens;
        self.prompt.merge(&other.prompt);
        self.thinking.merge(&other.thinking);
        self.response.merge(&other.response);
        self.total.merge(&other.total);
        add_into(&mut self.special_counts, &other.special_counts);
        add_into(&mut self.codes, &other.codes);
        crate::stats::merge_counts(&mut self.features, &other.features);
        for (a, b) in self.cut_in.iter_mut().zip(other.cut_in) {
            *a += b;
        }
    }
}

fn add_into(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// The per-category statistics of a scan's workers, gathered one set per worker rather than one per work unit:
/// a unit takes a set (or makes one) and gives it back. The statistics are sums, so which units a set counted
/// does not matter; and the serial merge at the end of a scan then merges a few sets, not one per unit (the
/// per-length maps of a hundred units were a tenth of a two-thread NumPy scan's time, on one thread).
/// ([`crate::pass_partial::Pool`], the pool the passes' per-sample sides keep their sums in.)
pub type CategoriesPool = crate::pass_partial::Pool<BTreeMap<String, CategoryPartial>>;

/// Samples and tokens read from one input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputCounts {
    pub samples: u64,
    pub tokens: u64,
}

/// The mergeable summary of any subset of the corpus (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    pub n_slots: usize,
    pub categories: BTreeMap<String, CategoryPartial>,
    /// By input index.
    pub inputs: BTreeMap<u32, InputCounts>,
    /// Sorted by row.
    pub flagged: Vec<FlaggedSample>,
    /// The profile's consistency thresholds `(majority in basis points, minimum samples)`, carried so that
    /// any process that resolves the corpus-wide checks applies the same ones.
    #[serde(default)]
    pub consistency: (u32, u64),
    /// Full detail is kept for the first `detail_limit` flagged samples of each code (in row order); a sample
    /// past it for every one of its codes is kept as a [`Summarized`] entry (0: no limit).
    #[serde(default)]
    pub detail_limit: u64,
    /// The flagged samples past the detail limit, sorted by row.
    #[serde(default)]
    pub summarized: Vec<Summarized>,
    /// The category names [`Summarized::category`] indexes.
    #[serde(default)]
    pub summarized_categories: Vec<String>,
    /// Per code, the flagged samples of this partial, detailed and summarized (when `detail_limit` > 0).
    #[serde(default)]
    pub flag_counts: Vec<u64>,
    /// What the corpus-wide passes kept of the samples, by pass ([`crate::pass_partial`]).
    #[serde(default)]
    pub passes: crate::pass_partial::Accs,
}

/// A flagged sample past the detail limit: its row, its codes and its category, what `--exclude`, `clean`
/// and the per-category counts need, and its content key, what `clean` checks (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summarized {
    pub row: u64,
    pub flags: u64,
    /// [`crate::token::content_key`] of its ids.
    #[serde(default)]
    pub content: u64,
    /// Index into [`Partial::summarized_categories`].
    pub category: u32,
}

/// What the corpus-wide checks flagged in a whole corpus, as the report will hold it: in full, the samples
/// the report can list in full; the others as their row, codes and category (32 bytes each, where a full
/// entry takes ~300), so that a corpus made of copies of itself does not hold every duplicate in full.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Found {
    pub full: Vec<FlaggedSample>,
    pub summarized: Vec<Summarized>,
    /// The category names `summarized` indexes.
    pub categories: Vec<String>,
}

impl Found {
    /// Adds what another part of the corpus found (a cluster task's rows; any order).
    pub fn merge(&mut self, other: Found) {
        let Found {
            full,
            summarized,
            categories,
        } = other;
        let mine = std::mem::take(&mut self.full);
        self.full = merge_by_row(mine, full);
        if summarized.is_empty() {
            return;
        }
        let moved = renumbered(&mut self.categories, summarized, &categories);
        let mine = std::mem::take(&mut self.summarized);
        self.summarized = merge_summarized(mine, moved);
    }

    /// Serialized for another process (a cluster task's result).
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Found> {
        let found: Found = decode(b, "flagged samples")?;
        if found
            .summarized
            .iter()
            .any(|s| s.category as usize >= found.categories.len())
        {
            return Err(crate::error::Error::Usage(
                "corrupt flagged samples (a category index past the list): was it written by this version of \
                 tokscan?"
                    .to_string(),
            ));
        }
        Ok(found)
    }
}

impl From<Vec<FlaggedSample>> for Found {
    fn from(full: Vec<FlaggedSample>) -> Found {
        Found {
            full,
            ..Found::default()
        }
    }
}

impl Partial {
    pub fn new(n_slots: usize) -> Self {
        Partial {
            n_slots,
            ..Default::default()
        }
    }

    pub fn category(&mut self, name: &str) -> &mut CategoryPartial {
        if !self.categories.contains_key(name) {
            self.categories
                .insert(name.to_string(), CategoryPartial::new(self.n_slots));
        }
        self.categories.get_mut(name).expect("inserted above")
    }

    pub fn n_samples(&self) -> u64 {
        self.categories.values().map(|c| c.samples).sum()
    }

    /// Adds `other` into `self`. The result is the same for any grouping and order of merges.
    pub fn merge(&mut self, other: Partial) {
        self.n_slots = self.n_slots.max(other.n_slots);
        self.consistency = self.consistency.max(other.consistency);
        for (name, c) in &other.categories {
            self.category(name).merge(c);
        }
        for (k, c) in other.inputs {
            let mine = self.inputs.entry(k).or_default();
            mine.samples += c.samples;
            mine.tokens += c.tokens;
        }
        self.passes.merge(other.passes);
        self.detail_limit = self.detail_limit.max(other.detail_limit);
        let mut other_flagged = other.flagged;
        let other_summarized = renumbered(
            &mut self.summarized_categories,
            other.summarized,
            &other.summarized_categories,
        );
        let last = self
            .flagged
            .last()
            .map(|f| f.row)
            .max(self.summarized.last().map(|s| s.row));
        let first = match (other_flagged.first(), other_summarized.first()) {
            (Some(f), Some(s)) => Some(f.row.min(s.row)),
            (f, s) => f.map(|f| f.row).or(s.map(|s| s.row)),
        };
        if self.detail_limit > 0 && last.is_some() && first.is_some() && last < first {
            // Units merged in row order (the local scan): only the later part is walked, from the counts of
            // the earlier one, so merging the units of a corpus one by one stays linear.
            let mut later = Partial {
                detail_limit: self.detail_limit,
                flagged: other_flagged,
                summarized: other_summarized,
                summarized_categories: std::mem::take(&mut self.summarized_categories),
                ..Partial::default()
            };
            later.cap_from(std::mem::take(&mut self.flag_counts));
            self.summarized_categories = later.summarized_categories;
            self.flag_counts = later.flag_counts;
            self.flagged.append(&mut later.flagged);
            self.summarized.append(&mut later.summarized);
            return;
        }
        let mine = std::mem::take(&mut self.flagged);
        self.flagged = merge_by_row(mine, std::mem::take(&mut other_flagged));
        let mine = std::mem::take(&mut self.summarized);
        self.summarized = merge_summarized(mine, other_summarized);
        self.cap();
    }

    fn summary_category(&mut self, name: &str) -> u32 {
        category_index(&mut self.summarized_categories, name)
    }

    /// Adds a sample a per-sample rule flagged, in row order within one unit: in full while one of its codes
    /// has fewer than `detail_limit` samples so far, else summarized.
    pub fn push_flagged(&mut self, f: FlaggedSample) {
        if self.detail_limit > 0 && self.flag_counts.len() < N_CODES {
            self.flag_counts.resize(N_CODES, 0);
        }
        let keep = within_limit(&mut self.flag_counts, f.flags, self.detail_limit);
        if keep || f.keeps_detail() {
            self.flagged.push(f);
        } else {
            let category = self.summary_category(&f.category);
            self.summarized.push(Summarized {
                row: f.row,
                flags: f.flags,
                content: f.content,
                category,
            });
        }
    }

    /// Applies the detail limit to the merged lists: walking every flagged sample in row order, one whose
    /// codes each already have `detail_limit` samples before it is moved to the summarized list. The result
    /// depends only on the set of flagged samples, never on how units were grouped or merged (a unit keeps
    /// at least the samples the whole corpus keeps of it). Samples with evidence a pass found while they were
    /// scanned keep their detail ([`FlaggedSample::keeps_detail`]: the pass's section counts every one).
    pub fn cap(&mut self) {
        self.cap_from(Vec::new());
    }

    /// [`Partial::cap`] for samples that follow, in row order, others whose per-code counts are `seen`.
    fn cap_from(&mut self, mut seen: Vec<u64>) {
        if self.detail_limit == 0 {
            return;
        }
        seen.resize(N_CODES, 0);
        let limit = self.detail_limit;
        // The samples past the limit become 32-byte entries as they are met, so a long detailed list (the
        // corpus-wide checks' duplicates) is never held twice.
        let (mut kept, mut moved) = (Vec::new(), Vec::new());
        let mut s = 0;
        for f in std::mem::take(&mut self.flagged) {
            while let Some(x) = self.summarized.get(s).filter(|x| x.row < f.row) {
                within_limit(&mut seen, x.flags, limit);
                s += 1;
            }
            if within_limit(&mut seen, f.flags, limit) || f.keeps_detail() {
                kept.push(f);
            } else {
                moved.push(Summarized {
                    row: f.row,
                    flags: f.flags,
                    content: f.content,
                    category: self.summary_category(&f.category),
                });
            }
        }
        for x in &self.summarized[s.min(self.summarized.len())..] {
            within_limit(&mut seen, x.flags, limit);
        }
        self.flag_counts = seen;
        self.flagged = kept;
        if !moved.is_empty() {
            let mine = std::mem::take(&mut self.summarized);
            self.summarized = merge_summarized(mine, moved);
        }
    }

    /// Adds what the corpus-wide checks flagged: a row already summarized takes the new codes (and stays
    /// summarized), any other joins the detailed list (or, summarized already, the summarized list); then the
    /// limit is applied again.
    pub fn absorb_corpus(&mut self, found: Found) {
        let Found {
            full: mut corpus,
            summarized,
            categories,
        } = found;
        if !summarized.is_empty() {
            let moved = renumbered(&mut self.summarized_categories, summarized, &categories);
            let mine = std::mem::take(&mut self.summarized);
            self.summarized = merge_summarized(mine, moved);
        }
        // Filtered in place: the corpus-wide list may be long (every duplicate).
        corpus.retain(
            |f| match self.summarized.binary_search_by_key(&f.row, |s| s.row) {
                Ok(i) => {
                    self.summarized[i].flags |= f.flags;
                    false
                }
                Err(_) => true,
            },
        );
        let mine = std::mem::take(&mut self.flagged);
        self.flagged = merge_by_row(mine, corpus);
        self.cap();
    }

    /// Serialized for another process (a cluster task's result).
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Partial> {
        decode(b, "partial summary")
    }
}

/// Counts `flags`' codes in `seen`; whether one of them had fewer than `limit` samples before (0: no limit,
/// nothing counted).
pub(crate) fn within_limit(seen: &mut [u64], flags: u64, limit: u64) -> bool {
    if limit == 0 {
        return true;
    }
    let mut keep = false;
    for c in crate::anomaly::codes_in(flags) {
        let n = &mut seen[c.index()];
        keep |= *n < limit;
        *n += 1;
    }
    keep
}

/// `from`, whose categories index `from_names`, with its categories renumbered into `names` (new ones added).
fn renumbered(
    names: &mut Vec<String>,
    mut from: Vec<Summarized>,
    from_names: &[String],
) -> Vec<Summarized> {
    let remap: Vec<u32> = from_names
        .iter()
        .map(|c| category_index(names, c))
        .collect();
    for s in &mut from {
        s.category = remap[s.category as usize];
    }
    from
}

/// Two row-sorted summarized lists as one (a row in both keeps one entry with both entries' codes).
fn merge_summarized(a: Vec<Summarized>, b: Vec<Summarized>) -> Vec<Summarized> {
    merge_sorted(a, b, |x| x.row, |x, y| x.flags |= y.flags)
}

/// Default share of a category a feature value must hold to be its majority (the samples without it are
/// flagged), and samples needed to judge. A category where no value of a feature holds that share is split on
/// it (`category_split`): a warning for the category, no sample flagged.
pub const CONSISTENCY_MAJORITY: f64 = 0.95;
pub const CONSISTENCY_MIN_SAMPLES: u64 = 100;

/// How one category's samples divide on one structural feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agreement {
    /// Fewer samples than the minimum carry the feature, or all agree: nothing to say.
    Unjudged,
    /// This value holds at least the majority share; the samples with another value depart from it.
    Majority(u8),
    /// No value holds the majority share.
    Split,
}

/// How `c`'s samples divide on feature `f`, with the thresholds `(majority in basis points, minimum samples)`
/// of [`Partial::consistency`] (0: the defaults).
pub fn agreement(c: &CategoryPartial, f: usize, (bp, min): (u32, u64)) -> Agreement {
    let share = if bp == 0 {
        CONSISTENCY_MAJORITY
    } else {
        f64::from(bp) / 10_000.0
    };
    let min = if min == 0 {
        CONSISTENCY_MIN_SAMPLES
    } else {
        min
    };
    let counts: Vec<(u8, u64)> = c
        .features
        .range(((f as u16) << 4)..((f as u16 + 1) << 4))
        .map(|(k, n)| ((k & 0xF) as u8, *n))
        .filter(|&(v, _)| v != crate::check::features::NA)
        .collect();
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let best = counts
        .iter()
        .max_by_key(|(v, n)| (*n, std::cmp::Reverse(*v)));
    match best {
        Some(&(v, n)) if total >= min && n < total => {
            if (n as f64) >= share * total as f64 {
                Agreement::Majority(v)
            } else {
                Agreement::Split
            }
        }
        _ => Agreement::Unjudged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::FractionDist;
    use proptest::prelude::*;

    #[test]
    fn found_from_another_process_is_checked_before_it_is_merged() {
        let found = Found {
            summarized: vec![Summarized {
                row: 3,
                flags: 1,
                content: 0,
                category: 1,
            }],
            categories: vec!["a".to_string()],
            ..Found::default()
        };
        let err = Found::from_bytes(&found.to_bytes()).unwrap_err();
        assert!(err.to_string().contains("corrupt flagged samples"), "{err}");
        let fine = Found {
            categories: vec!["a".to_string(), "b".to_string()],
            ..found
        };
        // Merged into a part that knows only "b": the row keeps its category by name.
        let mut merged = Found {
            categories: vec!["b".to_string()],
            ..Found::default()
        };
        merged.merge(Found::from_bytes(&fine.to_bytes()).unwrap());
        assert_eq!(merged.categories, ["b", "a"]);
        assert_eq!(merged.summarized[0].category, 0);
    }

    /// A pass's partial for the merge tests: tokens per category.
    #[derive(Debug, Default, Serialize, Deserialize)]
    struct Tokens(BTreeMap<String, u64>);

    impl crate::pass_partial::Mergeable for Tokens {
        fn merge(&mut self, other: Tokens) {
            for (k, n) in other.0 {
                *self.0.entry(k).or_default() += n;
            }
        }
    }

    fn part(samples: &[(u8, u32, bool)], base: u64) -> Partial {
        let mut p = Partial::new(2);
        let mut tokens = Tokens::default();
        for (i, &(c, total, flagged)) in samples.iter().enumerate() {
            let name = format!("c{c}");
            *tokens.0.entry(name.clone()).or_default() += u64::from(total);
            let l = Lengths {
                prompt: total / 3,
                thinking: total / 5,
                response: total / 7,
                total,
            };
            let cat = p.category(&name);
            cat.add_lengths(&l);
            cat.special_counts[0] += u64::from(total % 4);
            if flagged {
                cat.add_codes(1 << (total % 5));
                p.flagged.push(FlaggedSample {
                    row: base + i as u64,
                    source: 0,
                    category: name,
                    lengths: l,
                    flags: 1 << (total % 5),
                    content: 0,
                    sample_id: None,
                    ..FlaggedSample::default()
                });
            }
            let e = p.inputs.entry(c as u32 % 2).or_default();
            e.samples += 1;
            e.tokens += u64::from(total);
        }
        p.passes.insert("tokens", Box::new(tokens));
        p
    }

    proptest! {
        #[test]
        fn merge_in_any_grouping_and_order_equals_one_summary(
            samples in proptest::collection::vec((0u8..4, 1u32..1000, any::<bool>()), 1..60),
            cuts in proptest::collection::vec(0usize..60, 0..6),
            order in proptest::collection::vec(any::<u8>(), 8),
            tree in any::<bool>(),
        ) {
            let whole = part(&samples, 0);
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c % (samples.len() + 1)).collect();
            bounds.push(0);
            bounds.push(samples.len());
            bounds.sort_unstable();
            let mut parts: Vec<Partial> =
                bounds.windows(2).map(|w| part(&samples[w[0]..w[1]], w[0] as u64)).collect();
            // Any order: sort by a random key.
            let mut keyed: Vec<(u8, Partial)> =
                parts.drain(..).enumerate().map(|(i, p)| (order[i % order.len()], p)).collect();
            keyed.sort_by_key(|(k, _)| *k);
            let mut parts: Vec<Partial> = keyed.into_iter().map(|(_, p)| p).collect();
            let merged = if tree {
                while parts.len() > 1 {
                    let mut next = Vec::new();
                    let mut it = parts.into_iter();
                    while let Some(mut a) = it.next() {
                        if let Some(b) = it.next() {
                            a.merge(b);
                        }
                        next.push(a);
                    }
                    parts = next;
                }
                parts.pop().unwrap()
            } else {
                let mut m = Partial::new(2);
                for p in parts {
                    m.merge(p);
                }
                m
            };
            prop_assert_eq!(&merged, &whole);
            prop_assert_eq!(Partial::from_bytes(&merged.to_bytes()).unwrap(), whole);
        }

        #[test]
        fn fractions_are_kept_in_lowest_terms(part in 0u32..500, whole in 1u32..500, k in 1u32..50) {
            let mut a = FractionDist::default();
            a.add(part.min(whole), whole);
            let mut b = FractionDist::default();
            b.add(part.min(whole) * k, whole * k);
            prop_assert_eq!(a, b);
        }
    }

    fn flagged(row: u64, flags: u64, category: &str) -> FlaggedSample {
        FlaggedSample {
            row,
            source: 0,
            category: category.to_string(),
            lengths: Lengths::default(),
            flags,
            content: row,
            sample_id: None,
            ..FlaggedSample::default()
        }
    }

    /// A unit of the flagged samples `rows` (row, flags) pushed in row order under `limit`.
    fn unit(rows: &[(u64, u64)], limit: u64) -> Partial {
        let mut p = Partial {
            detail_limit: limit,
            ..Partial::new(1)
        };
        for &(row, flags) in rows {
            p.push_flagged(flagged(row, flags, &format!("c{}", row % 3)));
        }
        p
    }

    /// What the limit keeps, by the rule itself: a sample is detailed when, for one of its codes, fewer than
    /// `limit` earlier samples have that code.
    fn oracle(rows: &[(u64, u64)], limit: u64) -> (Vec<u64>, Vec<(u64, u64, String)>) {
        let (mut kept, mut rest) = (Vec::new(), Vec::new());
        for (i, &(row, flags)) in rows.iter().enumerate() {
            let keep = (0..64).any(|b| {
                flags & (1 << b) != 0
                    && (rows[..i].iter().filter(|(_, f)| f & (1 << b) != 0).count() as u64) < limit
            });
            if keep {
                kept.push(row);
            } else {
                rest.push((row, flags, format!("c{}", row % 3)));
            }
        }
        (kept, rest)
    }

    fn summarized_of(p: &Partial) -> Vec<(u64, u64, String)> {
        p.summarized
            .iter()
            .map(|s| {
                (
                    s.row,
                    s.flags,
                    p.summarized_categories[s.category as usize].clone(),
                )
            })
            .collect()
    }

    proptest! {
        #[test]
        fn the_detail_limit_keeps_the_first_samples_of_each_code_in_any_grouping(
            flags in proptest::collection::vec(1u64..16, 1..80),
            gaps in proptest::collection::vec(1u64..4, 80),
            cuts in proptest::collection::vec(0usize..80, 0..6),
            order in proptest::collection::vec(any::<u8>(), 8),
            tree in any::<bool>(),
            limit in 1u64..5,
        ) {
            let mut row = 0;
            let rows: Vec<(u64, u64)> = flags.iter().zip(&gaps).map(|(&f, &g)| { row += g; (row, f) }).collect();
            let (kept, rest) = oracle(&rows, limit);
            let whole = unit(&rows, limit);
            prop_assert_eq!(whole.flagged.iter().map(|f| f.row).collect::<Vec<_>>(), kept.clone());
            prop_assert_eq!(summarized_of(&whole), rest.clone());
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c % (rows.len() + 1)).collect();
            bounds.extend([0, rows.len()]);
            bounds.sort_unstable();
            let mut keyed: Vec<(u8, Partial)> = bounds
                .windows(2)
                .enumerate()
                .map(|(i, w)| (order[i % order.len()], unit(&rows[w[0]..w[1]], limit)))
                .collect();
            keyed.sort_by_key(|(k, _)| *k);
            let mut parts: Vec<Partial> = keyed.into_iter().map(|(_, p)| p).collect();
            let merged = if tree {
                while parts.len() > 1 {
                    let mut next = Vec::new();
                    let mut it = parts.into_iter();
                    while let Some(mut a) = it.next() {
                        if let Some(b) = it.next() {
                            a.merge(b);
                        }
                        next.push(a);
                    }
                    parts = next;
                }
                parts.pop().unwrap()
            } else {
                let mut m = Partial::new(1);
                for p in parts {
                    m.merge(p);
                }
                m
            };
            prop_assert_eq!(merged.flagged.iter().map(|f| f.row).collect::<Vec<_>>(), kept);
            prop_assert_eq!(summarized_of(&merged), rest);
            let back = Partial::from_bytes(&merged.to_bytes()).unwrap();
            prop_assert_eq!(summarized_of(&back), summarized_of(&merged));
            // Every flagged sample is in one list or the other, and the per-code counts cover both.
            let mut counts = vec![0u64; N_CODES];
            for &(_, f) in &rows {
                for (b, n) in counts.iter_mut().enumerate().take(4) {
                    *n += u64::from(f & (1 << b) != 0);
                }
            }
            prop_assert_eq!(&merged.flag_counts, &counts);
        }
    }

    #[test]
    fn without_a_limit_every_sample_keeps_its_detail() {
        let rows: Vec<(u64, u64)> = (0..50).map(|r| (r, 1)).collect();
        let p = unit(&rows, 0);
        assert_eq!(p.flagged.len(), 50);
        assert!(p.summarized.is_empty() && p.flag_counts.is_empty());
    }

    #[test]
    fn corpus_wide_findings_join_a_summarized_row_or_the_detailed_list() {
        let rows: Vec<(u64, u64)> = (0..10).map(|r| (r * 2, 1)).collect();
        let mut p = unit(&rows, 2);
        assert_eq!(p.flagged.len(), 2);
        assert_eq!(p.summarized.len(), 8);
        // Row 8 is summarized: it takes the new code. Row 9 was not flagged: a new code, within the limit.
        p.absorb_corpus(vec![flagged(8, 2, "c2"), flagged(9, 2, "c0")].into());
        assert_eq!(p.summarized.iter().find(|s| s.row == 8).unwrap().flags, 3);
        assert_eq!(
            p.flagged.iter().map(|f| f.row).collect::<Vec<_>>(),
            [0, 2, 9]
        );
        assert_eq!(p.flag_counts[0..2], [10, 2]);
        // Evidence a pass found in the scan keeps the detail past the limit; evidence found after it does not.
        let mut c = flagged(100, 1, "c1");
        c.attach(crate::flagged::Attached {
            rank: 0,
            key: "hit".into(),
            json: "1".into(),
            keep: true,
        });
        p.push_flagged(c);
        let mut d = flagged(101, 1, "c1");
        d.attach(crate::flagged::Attached {
            rank: 0,
            key: "later".into(),
            json: "1".into(),
            keep: false,
        });
        p.push_flagged(d);
        assert!(!p.flagged.iter().any(|f| f.row == 101));
        assert!(p.flagged.iter().any(|f| f.row == 100));
    }

    #[test]
    fn the_summarized_rows_and_codes_pack_and_unpack() {
        let rows: Vec<(u64, u64)> = (0..5000u64)
            .map(|r| (r * 8 + r % 7, 1 << (r % 3)))
            .collect();
        let p = unit(&rows, 10);
        let s = crate::report::FlaggedSummarized::of(&p).unwrap();
        assert_eq!(s.samples, 5000 - 30);
        assert_eq!(s.by_code.values().sum::<u64>(), 5000 - 30);
        assert_eq!(s.by_category.values().sum::<u64>(), 5000 - 30);
        let (r, m) = s.unpack().unwrap();
        assert_eq!(r, p.summarized.iter().map(|x| x.row).collect::<Vec<_>>());
        for (mask, x) in m.iter().zip(&p.summarized) {
            let names: Vec<&str> = crate::anomaly::codes_in(x.flags)
                .map(|c| c.as_str())
                .collect();
            let unpacked: Vec<&str> = (0..s.codes.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| s.codes[i].as_str())
                .collect();
            assert_eq!(names, unpacked);
        }
        assert!(crate::report::FlaggedSummarized::of(&unit(&rows[..20], 10)).is_none());
    }

    #[test]
    fn a_corrupt_partial_is_an_error_not_a_panic() {
        let bytes = part(&[(1, 10, true)], 0).to_bytes();
        assert!(Partial::from_bytes(&bytes[..bytes.len() / 2]).is_err());
        assert!(Partial::from_bytes(b"").is_err());
    }
}
