//! Draft vocabulary: the frequencies of loss-bearing tokens, the share of them the corpus's top-K ids cover,
//! and the EAGLE-3 `d2t` / `t2d` mapping of a draft vocabulary, built and checked.
//!
//! A token is loss-bearing when its mask is on; with no mask, when it is in the completion. Ids outside the
//! profile's vocabulary are not counted (they are flagged `out_of_vocab`). A category's counts are sparse (id →
//! count) while it has counted few distinct ids and dense (one slot per id of the vocabulary) past that, so that
//! thousands of small categories cost what they counted, not a vocabulary each; counts merge by addition, so any
//! grouping of the units gives the same.
//!
//! The ranking follows SpecForge's `process_token_dict_to_mappings` (and the counting loop that feeds it):
//! ids by count, descending; ties in the order the ids first entered SpecForge's `Counter`, that is the first
//! sample (in corpus order) where the id is loss-bearing, and within one sample ascending ids (the counting
//! loop adds each sample's `unique()` ids, which are sorted); `Counter.most_common` is a stable sort. When
//! fewer distinct ids than K were seen, SpecForge pads with the lowest ids of `0..K` not seen (count 0),
//! after every seen id. The draft ids are the chosen target ids in ascending order: `d2t[i]` is the chosen
//! target id minus `i`, `t2d[t]` is true for a chosen target id.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;

use serde::{Deserialize, Serialize};

use crate::token::{MaskSlice, TokenId};

/// What a scan does with the draft vocabulary (`--draft-vocab`, `tokscan vocab`, `--check-vocab`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VocabOptions {
    /// Draft-vocabulary sizes K whose coverage the report gives.
    #[serde(default)]
    pub sizes: Vec<u32>,
    /// Build the mapping of this size into the report.
    #[serde(default)]
    pub mapping: Option<u32>,
    /// A mapping to check against this corpus.
    #[serde(default)]
    pub check: Option<Mapping>,
    /// The check fails when the mapping's coverage is below the best top-K's by more than this share.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
}

/// Default `tolerance` of the mapping check: one percentage point of coverage.
pub const DEFAULT_TOLERANCE: f64 = 0.01;

/// Largest target vocabulary whose loss-bearing tokens are counted: 4,194,304 ids, 16 times the largest
/// tokenizers in use. An accumulator holds about five bytes per id, and one byte more per id and category, so a
/// profile that names no vocabulary (`plain`'s 2^32 - 1) would ask for tens of GB before reading a token.
pub const MAX_COUNTED_VOCAB: u32 = 1 << 22;

/// Refuses draft-vocabulary counting for a profile without a real vocabulary size (see [`MAX_COUNTED_VOCAB`]).
pub fn check_counted_vocab(profile: &str, vocab_size: u32) -> crate::error::Result<()> {
    if vocab_size > MAX_COUNTED_VOCAB {
        return Err(crate::error::Error::Usage(format!(
            "the draft vocabulary counts every id of the target vocabulary, and profile {profile} has vocab_size \
             {vocab_size} (at most {MAX_COUNTED_VOCAB} can be counted): use a profile with the tokenizer's \
             vocab_size (a profile file with `base = \"{profile}\"` and `vocab_size = N`)"
        )));
    }
    Ok(())
}

fn default_tolerance() -> f64 {
    DEFAULT_TOLERANCE
}

/// An EAGLE-3 mapping as stored: `d2t[i]` = target id of draft id `i` minus `i`; `t2d` a mask over the target
/// vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub d2t: Vec<i64>,
    pub t2d: Vec<bool>,
}

/// Counts the loss-bearing tokens of one sample into `counts` (one slot per vocabulary id) and records in
/// `first` the first row where each id is loss-bearing, as a first-seen key: `u64::MAX - row`, so that the
/// earliest row is the largest key and 0 means never (keys combine by `max`, in any order of rows).
#[inline]
pub fn count_sample<T: TokenId>(
    counts: &mut [u64],
    first: &mut [u64],
    row: u64,
    seq: &[T],
    mask: Option<MaskSlice<'_>>,
    completion: (usize, usize),
) {
    let v = counts.len().min(first.len());
    let (counts, first) = (&mut counts[..v], &mut first[..v]);
    let key = u64::MAX - row;
    each_loss_run(seq.len(), mask, completion, |s, e| {
        for t in &seq[s..e] {
            let id = t.id() as usize;
            if id < v {
                counts[id] += 1;
                first[id] = first[id].max(key);
            }
        }
    });
}

/// Calls `f(start, end)` with each run of loss-bearing positions of a sample of `len` tokens: the runs where the
/// mask is on ([`MaskSlice::each_on_run`]), or with no mask, the completion (when not empty).
#[inline]
fn each_loss_run(
    len: usize,
    mask: Option<MaskSlice<'_>>,
    completion: (usize, usize),
    mut f: impl FnMut(usize, usize),
) {
    match mask {
        Some(m) => m.each_on_run(len, f),
        None => {
            let (s, e) = (completion.0.min(len), completion.1.min(len));
            if e > s {
                f(s, e);
            }
        }
    }
}

/// Loss-bearing token counts being gathered: per category, and the first-seen keys. A scan keeps one per
/// worker thread, not one per unit (a vocabulary-sized array per unit would hold hundreds of megabytes until
/// the units merge); sums and maximums do not depend on which units a worker took.
///
/// The same sums and keys as [`count_sample`] into `u64` arrays, in a fraction of the cache: every loss-bearing
/// token is a random access into a category's counters, and the cost of a token is moving its counter's cache
/// line between L2 and L1 (`benches/README.md`). Counts are `u8` (160 KB for Kimi's vocabulary; `u16` counters
/// cost 1.6 times as much per token) with a `u32` count of the wraps taken at every 256th token of an id: only
/// frequent ids ever touch that array, which otherwise stays untouched, unmapped zero pages. (A count is exact
/// up to 2^40 tokens of one id in one category and accumulator, over a thousand times a 228M-token corpus.)
/// First-seen keys are `u32` (`u32::MAX - row`), exact below row 4,294,967,294 (later first rows share one key,
/// and those ids then tie by id).
///
/// While the rows it is given only increase (within a unit they do; the pool hands a unit an accumulator whose
/// rows all came before the unit's, see [`CountsPool::take`]), an id's first-seen key is written only when its
/// count in the category goes from 0 to 1: that row is the id's first in the category, and the largest key over
/// the categories is its first row; and only the first time in any category (the bit of `seen`), since a later
/// category's first row is a later row. A row before one already counted switches the accumulator to writing the
/// key of every counted token (the keys combine by `max`, so both phases together still give the first row).
/// (Writing an id's key once per category, not once, cost a cache miss into the 640 KB of keys for every rare
/// id eight times over: a third of the counting loop's time on Zipf-distributed ids.)
#[derive(Debug, Default)]
pub struct Counts {
    vocab_size: usize,
    pub categories: BTreeMap<String, CategoryCounts>,
    pub first: Vec<u32>,
    /// One bit per id: its first-seen key is written (while rows come in order; 20 KB for Kimi's vocabulary).
    seen: Vec<u64>,
    /// Every row counted so far is below this.
    rows_below: u64,
    /// Rows have come in increasing order (see above).
    unordered: bool,
}

/// One category's counts: `sparse` (id → count) until it has counted [`DENSE_AT`] of the vocabulary's ids, then
/// dense: `low` wraps at 2^8, counted in `wraps`. (Dense from the first token, 3,000 one-sample categories held a
/// vocabulary-sized array each: 3.3 GB for a scan that needs 134 MB.)
#[derive(Debug)]
pub struct CategoryCounts {
    vocab_size: usize,
    /// Empty while sparse.
    low: Vec<u8>,
    wraps: Vec<u32>,
    /// Empty once dense.
    sparse: IdMap,
}

/// A category's counts turn dense once it has counted this share of the vocabulary's ids (1 in 16): a sparse
/// entry costs about 16 bytes, a dense slot 1 (and 4 more for the ids counted past 255).
const DENSE_AT: usize = 16;

/// A hash of ids for [`IdMap`]: a multiply and a fold (ids are small integers; no adversary picks them to collide
/// in a table that turns dense at a few thousand entries).
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHash(u64);

impl std::hash::Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(u32::from(b) ^ (self.0 as u32));
        }
    }

    fn write_u32(&mut self, n: u32) {
        let h = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

type IdMap = HashMap<u32, u64, BuildHasherDefault<IdHash>>;

impl CategoryCounts {
    fn new(vocab_size: usize) -> CategoryCounts {
        CategoryCounts {
            vocab_size,
            low: Vec::new(),
            wraps: Vec::new(),
            sparse: IdMap::default(),
        }
    }

    fn is_dense(&self) -> bool {
        !self.low.is_empty()
    }

    /// Turns dense once the sparse table holds [`DENSE_AT`] of the vocabulary's ids.
    fn maybe_densify(&mut self) {
        if self.is_dense() || self.sparse.len() * DENSE_AT < self.vocab_size {
            return;
        }
        self.low = vec![0; self.vocab_size];
        self.wraps = vec![0; self.vocab_size];
        for (&id, &c) in &self.sparse {
            self.low[id as usize] = c as u8;
            self.wraps[id as usize] = (c >> 8) as u32;
        }
        self.sparse = IdMap::default();
    }

    /// Adds the counts to `out`.
    pub fn add_to(&self, out: &mut IdCounts) {
        if self.is_dense() {
            out.add_dense(
                self.low
                    .iter()
                    .zip(&self.wraps)
                    .map(|(&l, &w)| (u64::from(w) << 8) + u64::from(l)),
            );
        } else {
            let mut pairs: Vec<(u32, u64)> = self.sparse.iter().map(|(&i, &c)| (i, c)).collect();
            pairs.sort_unstable();
            out.add(&IdCounts {
                dense: Vec::new(),
                sparse: pairs,
            });
        }
    }
}

/// Loss-bearing tokens per vocabulary id of one category, as a partial summary carries them: `(id, count)` pairs
/// sorted by id while few ids were counted, one count per id once the pairs would take more room than that.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdCounts {
    /// One count per id from 0 (empty while sparse).
    #[serde(default)]
    dense: Vec<u64>,
    /// `(id, count)`, ascending ids, counts > 0 (empty once dense).
    #[serde(default)]
    sparse: Vec<(u32, u64)>,
}

impl From<Vec<u64>> for IdCounts {
    fn from(dense: Vec<u64>) -> IdCounts {
        IdCounts {
            dense,
            sparse: Vec::new(),
        }
    }
}

impl IdCounts {
    /// Each id counted and its count (> 0), ascending ids.
    pub fn each(&self) -> Box<dyn Iterator<Item = (usize, u64)> + '_> {
        if self.dense.is_empty() {
            Box::new(self.sparse.iter().map(|&(i, c)| (i as usize, c)))
        } else {
            Box::new(
                self.dense
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c > 0)
                    .map(|(i, &c)| (i, c)),
            )
        }
    }

    /// The counts of ids `0..len`, one per id.
    pub fn to_dense(&self, len: usize) -> Vec<u64> {
        let mut out = vec![0u64; len];
        for (i, c) in self.each() {
            if let Some(o) = out.get_mut(i) {
                *o += c;
            }
        }
        out
    }

    /// Adds one count per id from 0.
    fn add_dense(&mut self, counts: impl ExactSizeIterator<Item = u64>) {
        self.make_dense(counts.len());
        for (o, c) in self.dense.iter_mut().zip(counts) {
            *o += c;
        }
    }

    /// Turns dense, at least `len` long.
    fn make_dense(&mut self, len: usize) {
        if self.dense.is_empty() {
            let end = self.sparse.last().map_or(0, |&(i, _)| i as usize + 1);
            self.dense = vec![0; len.max(end)];
            for &(i, c) in &self.sparse {
                self.dense[i as usize] += c;
            }
            self.sparse = Vec::new();
        } else if self.dense.len() < len {
            self.dense.resize(len, 0);
        }
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &IdCounts) {
        if !other.dense.is_empty() {
            self.make_dense(other.dense.len());
            for (o, c) in self.dense.iter_mut().zip(&other.dense) {
                *o += c;
            }
            return;
        }
        if !self.dense.is_empty() {
            let end = other.sparse.last().map_or(0, |&(i, _)| i as usize + 1);
            self.make_dense(end);
            for &(i, c) in &other.sparse {
                self.dense[i as usize] += c;
            }
            return;
        }
        let (a, b) = (std::mem::take(&mut self.sparse), &other.sparse);
        let mut merged = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x.0 == y.0 => {
                    merged.push((x.0, x.1 + y.1));
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.0 < y.0 => {
                    merged.push(*x);
                    i += 1;
                }
                (Some(x), None) => {
                    merged.push(*x);
                    i += 1;
                }
                (_, Some(y)) => {
                    merged.push(*y);
                    j += 1;
                }
                (None, None) => unreachable!("the loop runs while either has one"),
            }
        }
        self.sparse = merged;
        // Dense once the pairs (16 bytes each) would take more than the counts (8 bytes per id up to the last).
        let end = self.sparse.last().map_or(0, |&(i, _)| i as usize + 1);
        if self.sparse.len() * 2 > end {
            self.make_dense(end);
        }
    }
}

/// The `u32` first-seen key of `row` (see [`Counts`]); 0 is never.
#[inline]
fn key32(row: u64) -> u32 {
    u32::MAX - row.min(u64::from(u32::MAX - 1)) as u32
}

/// A `u32` first-seen key as the `u64` key [`count_sample`] would have written (0 stays never).
fn widen_key(k: u32) -> u64 {
    if k == 0 {
        0
    } else {
        u64::MAX - u64::from(u32::MAX - k)
    }
}

/// The counting loop of [`Counts::add`]: `EVERY_KEY` writes the first-seen key at every counted token, else only
/// at the id's first count in any category of the accumulator (rows in increasing order; see [`Counts`]). The
/// loss-bearing positions come a run at a time ([`each_loss_run`]): the loop over a run tests no mask per token
/// and keeps its few values in registers.
#[inline]
fn count_into<const EVERY_KEY: bool, T: TokenId>(
    cat: &mut CategoryCounts,
    first: &mut [u32],
    seen: &mut [u64],
    key: u32,
    seq: &[T],
    mask: Option<MaskSlice<'_>>,
    completion: (usize, usize),
) {
    if !cat.is_dense() {
        let v = cat.vocab_size.min(first.len()).min(seen.len() * 64);
        let map = &mut cat.sparse;
        each_loss_run(seq.len(), mask, completion, |s, e| {
            count_run_sparse::<EVERY_KEY, T>(map, v, first, seen, key, &seq[s..e]);
        });
        cat.maybe_densify();
        return;
    }
    let v = cat
        .low
        .len()
        .min(cat.wraps.len())
        .min(first.len())
        .min(seen.len() * 64);
    let (low, wraps, first) = (&mut cat.low[..v], &mut cat.wraps[..v], &mut first[..v]);
    each_loss_run(seq.len(), mask, completion, |s, e| {
        count_run::<EVERY_KEY, T>(low, wraps, first, seen, key, &seq[s..e]);
    });
}

/// Counts the run `ids` (see [`count_into`]); `low`, `wraps` and `first` have the same length, `seen` a bit
/// for each of their slots.
#[inline(always)]
fn count_run<const EVERY_KEY: bool, T: TokenId>(
    low: &mut [u8],
    wraps: &mut [u32],
    first: &mut [u32],
    seen: &mut [u64],
    key: u32,
    ids: &[T],
) {
    let v = low.len();
    for t in ids {
        // Below 2^31 `index` is the id; past it nothing is counted (a vocabulary is far smaller).
        let id = t.index();
        if id < v {
            let c = low[id].wrapping_add(1);
            low[id] = c;
            // One rarely taken branch for the two rare cases (a wrap, a first count).
            if EVERY_KEY || c < 2 {
                if c == 0 {
                    wraps[id] += 1;
                }
                if EVERY_KEY {
                    first[id] = first[id].max(key);
                } else {
                    // The id's first row in the category (or, after a wrap, a later row): the first row of all
                    // when the id was not seen in another category before.
                    let (word, bit) = (id / 64, 1u64 << (id % 64));
                    if seen[word] & bit == 0 {
                        seen[word] |= bit;
                        first[id] = key;
                    }
                }
            }
        }
    }
}

/// [`count_run`] into a sparse category: the same counts and first-seen keys, by id in a table.
#[inline]
fn count_run_sparse<const EVERY_KEY: bool, T: TokenId>(
    map: &mut IdMap,
    v: usize,
    first: &mut [u32],
    seen: &mut [u64],
    key: u32,
    ids: &[T],
) {
    for t in ids {
        let id = t.index();
        if id < v {
            let c = map.entry(id as u32).or_insert(0);
            *c += 1;
            if EVERY_KEY {
                first[id] = first[id].max(key);
            } else if *c == 1 {
                let (word, bit) = (id / 64, 1u64 << (id % 64));
                if seen[word] & bit == 0 {
                    seen[word] |= bit;
                    first[id] = key;
                }
            }
        }
    }
}

impl Counts {
    pub fn new(vocab_size: u32) -> Counts {
        Counts {
            vocab_size: vocab_size as usize,
            categories: BTreeMap::new(),
            first: vec![0; vocab_size as usize],
            seen: vec![0; (vocab_size as usize).div_ceil(64)],
            rows_below: 0,
            unordered: false,
        }
    }

    /// Counts one sample of `category`: what [`count_sample`] counts.
    #[inline]
    pub fn add<T: TokenId>(
        &mut self,
        category: &str,
        row: u64,
        seq: &[T],
        mask: Option<MaskSlice<'_>>,
        completion: (usize, usize),
    ) {
        if !self.categories.contains_key(category) {
            self.categories
                .insert(category.to_string(), CategoryCounts::new(self.vocab_size));
        }
        self.unordered |= row < self.rows_below;
        self.rows_below = self.rows_below.max(row + 1);
        let cat = self.categories.get_mut(category).expect("inserted above");
        let (first, seen) = (&mut self.first, &mut self.seen);
        let key = key32(row);
        if self.unordered {
            count_into::<true, T>(cat, first, seen, key, seq, mask, completion);
        } else {
            count_into::<false, T>(cat, first, seen, key, seq, mask, completion);
        }
    }

    /// Whether rows before `row` may still be given to this accumulator without it leaving its ordered mode.
    fn takes_in_order(&self, row: u64) -> bool {
        !self.unordered && self.rows_below <= row
    }

    /// Merges the first-seen keys into `first` (as [`merge_first`] does). With [`CategoryCounts::add_to`], a
    /// partial summary takes what an accumulator counted in place: the scan's sums are vocabulary-sized arrays
    /// per category, and new ones per accumulator would be that many more fresh pages to fault in and zero.
    pub fn merge_first_into(&self, first: &mut Vec<u64>) {
        if first.len() < self.first.len() {
            first.resize(self.first.len(), 0);
        }
        for (a, &k) in first.iter_mut().zip(&self.first) {
            *a = (*a).max(widen_key(k));
        }
    }
}

/// The accumulators of a scan's workers: a unit takes one (or makes one) and gives it back.
#[derive(Debug, Default)]
pub struct CountsPool(std::sync::Mutex<PoolState>);

#[derive(Debug, Default)]
pub struct PoolState {
    idle: Vec<Counts>,
    made: usize,
}

impl CountsPool {
    /// An accumulator for a unit whose rows start at `first_row`: one whose rows all came before, so that it
    /// stays in its ordered mode (the latest such one); else a new one, up to two per worker thread and two
    /// more (work stealing hands a worker units out of order now and then); past that any idle one.
    pub fn take(&self, vocab_size: u32, first_row: u64) -> Counts {
        let mut st = self.0.lock().expect("no panic while held");
        let fits = st
            .idle
            .iter()
            .enumerate()
            .filter(|(_, c)| c.takes_in_order(first_row))
            .max_by_key(|(_, c)| c.rows_below)
            .map(|(i, _)| i);
        if let Some(i) = fits {
            return st.idle.swap_remove(i);
        }
        if st.made < 2 * rayon::current_num_threads() + 2 || st.idle.is_empty() {
            st.made += 1;
            return Counts::new(vocab_size);
        }
        st.idle.pop().expect("not empty")
    }

    pub fn give(&self, c: Counts) {
        self.0.lock().expect("no panic while held").idle.push(c);
    }

    /// Every accumulator given back, emptying the pool.
    pub fn drain(&self) -> Vec<Counts> {
        std::mem::take(&mut self.0.lock().expect("no panic while held").idle)
    }
}

/// What a scan counted, mergeable between processes: the loss-bearing tokens per category and id, and per id
/// the key of the first row where it is loss-bearing (`u64::MAX - row`, 0: never), the ranking's tie-break.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LossCounts {
    pub categories: BTreeMap<String, IdCounts>,
    pub first_seen: Vec<u64>,
}

impl LossCounts {
    /// Adds what one accumulator of the scan counted.
    pub fn add(&mut self, counts: &Counts) {
        for (name, c) in &counts.categories {
            c.add_to(self.categories.entry(name.clone()).or_default());
        }
        counts.merge_first_into(&mut self.first_seen);
    }
}

impl crate::pass_partial::Mergeable for LossCounts {
    fn merge(&mut self, other: LossCounts) {
        for (name, c) in other.categories {
            self.categories.entry(name).or_default().add(&c);
        }
        merge_first(&mut self.first_seen, &other.first_seen);
    }
}

/// Merges first-seen keys (0 = never): the larger key (the earlier row) wins.
pub fn merge_first(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, &y) in a.iter_mut().zip(b) {
        *x = (*x).max(y);
    }
}

/// The seen ids (count > 0) in SpecForge's order: count descending, then first-seen row (key descending),
/// then id.
pub fn ranked(counts: &[u64], first: &[u64]) -> Vec<u32> {
    // Sorted on keys laid out beside their ids: a comparison that looked both counts and keys up by id was a
    // random access per compare, most of a report's fixed cost at a vocabulary of 160k ids.
    let mut keyed: Vec<(std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, u32)> = counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| {
            let f = first.get(i).copied().unwrap_or(0);
            (std::cmp::Reverse(c), std::cmp::Reverse(f), i as u32)
        })
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, _, id)| id).collect()
}

/// The target ids of a draft vocabulary of `size`, ascending: the `size` first ranked ids, padded (when fewer
/// ids were seen) with the lowest ids of `0..size` not seen, as SpecForge does.
pub fn chosen_ids(ranked: &[u32], size: u32) -> Vec<u32> {
    let size = size as usize;
    let mut ids: Vec<u32> = ranked.iter().take(size).copied().collect();
    if ids.len() < size {
        let seen: std::collections::HashSet<u32> = ids.iter().copied().collect();
        let need = size - ids.len();
        ids.extend((0..size as u32).filter(|i| !seen.contains(i)).take(need));
    }
    ids.sort_unstable();
    ids
}

/// The mapping of the chosen target ids over a target vocabulary of `vocab_size`.
pub fn mapping_of(chosen: &[u32], vocab_size: u32) -> Mapping {
    let mut t2d = vec![false; vocab_size as usize];
    for &t in chosen {
        if let Some(b) = t2d.get_mut(t as usize) {
            *b = true;
        }
    }
    Mapping {
        d2t: chosen
            .iter()
            .enumerate()
            .map(|(i, &t)| i64::from(t) - i as i64)
            .collect(),
        t2d,
    }
}

/// One category's (or the whole corpus's) loss-bearing tokens and their coverage by the global top-K.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VocabCoverage {
    /// Loss-bearing tokens counted (in-vocabulary ones).
    pub loss_tokens: u64,
    /// Distinct ids among them.
    pub distinct: u64,
    /// Share of `loss_tokens` whose id is among the corpus's top K, for each requested K.
    pub coverage: BTreeMap<u32, f64>,
    /// The same share at each K of the report's `curve_sizes`.
    pub curve: Vec<f64>,
}

/// The report's `draft_vocab` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DraftVocabReport {
    /// The requested sizes K.
    pub sizes: Vec<u32>,
    /// The target vocabulary (the profile's).
    pub vocab_size: u32,
    /// The K of each point of the coverage curves: powers of two up to the vocabulary, and the sizes.
    pub curve_sizes: Vec<u32>,
    pub overall: VocabCoverage,
    pub categories: BTreeMap<String, VocabCoverage>,
    /// The most frequent loss-bearing ids of the corpus, with their counts (up to [`TOP_IDS`]).
    pub top_ids: Vec<(u32, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<VocabCheck>,
    /// The mapping asked for (`tokscan vocab`); the CLI writes it to its file and drops it from the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapping: Option<MappingOut>,
}

/// A built mapping as the report carries it: `d2t` and the target ids whose `t2d` is true.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingOut {
    pub size: u32,
    /// Distinct ids seen; below `size`, the mapping was padded.
    pub distinct: u64,
    pub d2t: Vec<i64>,
    pub target_ids: Vec<u32>,
}

/// What `--check-vocab` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VocabCheck {
    /// Entries of `d2t` (the draft vocabulary size).
    pub draft_size: u64,
    /// Entries of `t2d` (the target vocabulary the mapping was built for).
    pub target_size: u64,
    /// `t2d` is as long as the profile's vocabulary.
    pub size_ok: bool,
    /// `d2t` gives strictly increasing in-range target ids, exactly those `t2d` marks.
    pub agree: bool,
    /// Share of the corpus's loss-bearing tokens the mapping's target ids cover.
    pub coverage: f64,
    /// The best share of a draft vocabulary of the same size: the corpus's own top-K.
    pub best_coverage: f64,
    pub tolerance: f64,
    /// The most frequent loss-bearing ids the mapping misses, with their counts.
    pub missed: Vec<(u32, u64)>,
    /// Why it fails (empty when it passes).
    pub problems: Vec<String>,
}

impl VocabCheck {
    pub fn stale(&self) -> bool {
        !self.problems.is_empty()
    }
}

/// Ids listed in `top_ids` and `missed`.
pub const TOP_IDS: usize = 20;

/// The K of the coverage curves: 1, 2, 4, ... below the vocabulary, the vocabulary, and the requested sizes.
pub fn curve_sizes(sizes: &[u32], vocab_size: u32) -> Vec<u32> {
    let mut k: Vec<u32> = (0..32)
        .map(|b| 1u32 << b)
        .take_while(|&k| k < vocab_size)
        .collect();
    k.push(vocab_size);
    k.extend(sizes.iter().copied());
    k.sort_unstable();
    k.dedup();
    k
}

/// For each id, the index of the first K of `ks` (ascending) whose top K holds it: `ks.len()` for an id
/// outside every top K (or unseen). `order` is the ranking.
fn first_k_holding(order: &[u32], ks: &[u32], vocab_size: usize) -> Vec<u32> {
    let mut of = vec![ks.len() as u32; vocab_size];
    let mut j = 0;
    for (r, &id) in order.iter().enumerate() {
        while j < ks.len() && ks[j] as usize <= r {
            j += 1;
        }
        if j == ks.len() {
            break;
        }
        if let Some(x) = of.get_mut(id as usize) {
            *x = j as u32;
        }
    }
    of
}

/// Coverage of `counts` by the first K ranked ids, for each K of `ks` (ascending); `holding` is
/// [`first_k_holding`] of the ranking.
fn coverage_at(
    counts: impl Iterator<Item = (usize, u64)>,
    holding: &[u32],
    ks: &[u32],
) -> (u64, u64, Vec<f64>) {
    let mut bucket = vec![0u64; ks.len() + 1];
    let (mut total, mut distinct) = (0u64, 0u64);
    for (id, c) in counts {
        let Some(&h) = holding.get(id) else { continue };
        total += c;
        distinct += u64::from(c > 0);
        bucket[h as usize] += c;
    }
    let mut acc = 0u64;
    let shares = ks
        .iter()
        .enumerate()
        .map(|(i, _)| {
            acc += bucket[i];
            share(acc, total)
        })
        .collect();
    (total, distinct, shares)
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Builds the `draft_vocab` section from the merged counts per category and first-seen keys.
pub fn build(
    categories: &BTreeMap<String, impl std::borrow::Borrow<IdCounts>>,
    first: &[u64],
    vocab_size: u32,
    opts: &VocabOptions,
) -> DraftVocabReport {
    let v = vocab_size as usize;
    let mut all = vec![0u64; v];
    for c in categories.values() {
        for (i, n) in c.borrow().each() {
            if let Some(a) = all.get_mut(i) {
                *a += n;
            }
        }
    }
    let order = ranked(&all, first);
    let mut sizes = opts.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let ks = curve_sizes(&sizes, vocab_size);
    let holding = first_k_holding(&order, &ks, v);
    let cov = |counts: &mut dyn Iterator<Item = (usize, u64)>| {
        let (loss_tokens, distinct, curve) = coverage_at(counts, &holding, &ks);
        VocabCoverage {
            loss_tokens,
            distinct,
            coverage: sizes
                .iter()
                .map(|k| {
                    (
                        *k,
                        curve[ks.binary_search(k).expect("sizes are in the curve")],
                    )
                })
                .collect(),
            curve,
        }
    };
    let overall = cov(&mut all.iter().copied().enumerate());
    let check = opts.check.as_ref().map(|m| {
        check_mapping(
            m,
            &all,
            &order,
            vocab_size,
            overall.loss_tokens,
            opts.tolerance,
        )
    });
    let mapping = opts.mapping.map(|k| {
        let chosen = chosen_ids(&order, k);
        let m = mapping_of(&chosen, vocab_size);
        MappingOut {
            size: k,
            distinct: order.len() as u64,
            d2t: m.d2t,
            target_ids: chosen,
        }
    });
    DraftVocabReport {
        categories: categories
            .iter()
            .map(|(name, c)| (name.clone(), cov(&mut c.borrow().each())))
            .collect(),
        overall,
        top_ids: order
            .iter()
            .take(TOP_IDS)
            .map(|&id| (id, all[id as usize]))
            .collect(),
        sizes,
        vocab_size,
        curve_sizes: ks,
        check,
        mapping,
    }
}

/// Checks a mapping against the corpus's counts (`order`: the seen ids ranked).
fn check_mapping(
    m: &Mapping,
    all: &[u64],
    order: &[u32],
    vocab_size: u32,
    total: u64,
    tolerance: f64,
) -> VocabCheck {
    let mut problems = Vec::new();
    let size_ok = m.t2d.len() == vocab_size as usize;
    if !size_ok {
        problems.push(format!(
            "t2d has {} entries, the profile's vocabulary {vocab_size}",
            m.t2d.len()
        ));
    }
    // Target ids of d2t; they must rise strictly, lie in t2d's range and be exactly t2d's true entries.
    let targets: Vec<i64> = m
        .d2t
        .iter()
        .enumerate()
        .map(|(i, &d)| d + i as i64)
        .collect();
    let rising = targets.windows(2).all(|w| w[0] < w[1]);
    let in_range = targets
        .iter()
        .all(|&t| t >= 0 && (t as usize) < m.t2d.len());
    let marked = m.t2d.iter().filter(|&&b| b).count();
    let agree =
        rising && in_range && marked == targets.len() && targets.iter().all(|&t| m.t2d[t as usize]);
    if !agree {
        problems.push(format!(
            "d2t and t2d disagree ({} draft ids, {marked} target ids marked in t2d{})",
            targets.len(),
            if !in_range {
                ", d2t points outside t2d"
            } else if !rising {
                ", d2t's target ids do not rise"
            } else {
                ""
            }
        ));
    }
    let mut inside = vec![false; all.len()];
    for &t in &targets {
        if t >= 0 && (t as usize) < inside.len() {
            inside[t as usize] = true;
        }
    }
    let covered: u64 = all
        .iter()
        .zip(&inside)
        .filter(|(_, &i)| i)
        .map(|(c, _)| c)
        .sum();
    let k = targets.len();
    let best: u64 = order.iter().take(k).map(|&id| all[id as usize]).sum();
    let (coverage, best_coverage) = (share(covered, total), share(best, total));
    if best_coverage - coverage > tolerance {
        problems.push(format!(
            "covers {:.2} % of the loss-bearing tokens, the corpus's own top {k} {:.2} % (more than {:.2} points apart): built from another corpus?",
            coverage * 100.0,
            best_coverage * 100.0,
            tolerance * 100.0
        ));
    }
    VocabCheck {
        draft_size: k as u64,
        target_size: m.t2d.len() as u64,
        size_ok,
        agree,
        coverage,
        best_coverage,
        tolerance,
        missed: order
            .iter()
            .filter(|&&id| !inside[id as usize])
            .take(TOP_IDS)
            .map(|&id| (id, all[id as usize]))
            .collect(),
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// SpecForge's rules re-stated the slow, literal way: an insertion-ordered counter fed one sample at a
    /// time with the sample's sorted unique ids, padded with the lowest unseen ids of 0..K, a stable sort by
    /// count, the first K sorted ascending.
    fn reference(samples: &[Vec<u32>], k: usize) -> Vec<u32> {
        let mut order: Vec<u32> = Vec::new();
        let mut count: std::collections::HashMap<u32, u64> = Default::default();
        for s in samples {
            let mut u = s.clone();
            u.sort_unstable();
            u.dedup();
            for id in u {
                let n = s.iter().filter(|&&x| x == id).count() as u64;
                if !count.contains_key(&id) {
                    order.push(id);
                }
                *count.entry(id).or_insert(0) += n;
            }
        }
        if order.len() < k {
            for id in 0..k as u32 {
                if order.len() >= k {
                    break;
                }
                if let std::collections::hash_map::Entry::Vacant(e) = count.entry(id) {
                    e.insert(0);
                    order.push(id);
                }
            }
        }
        let mut items: Vec<(u32, u64)> = order.iter().map(|&i| (i, count[&i])).collect();
        items.sort_by_key(|x| std::cmp::Reverse(x.1)); // stable
        let mut top: Vec<u32> = items.iter().take(k).map(|x| x.0).collect();
        top.sort_unstable();
        top
    }

    fn counted(samples: &[Vec<u32>], v: usize) -> (Vec<u64>, Vec<u64>) {
        let (mut c, mut f) = (vec![0u64; v], vec![0u64; v]);
        for (row, s) in samples.iter().enumerate() {
            count_sample(&mut c, &mut f, row as u64, s, None, (0, s.len()));
        }
        (c, f)
    }

    proptest! {
        #[test]
        fn chosen_ids_follow_specforge(
            samples in proptest::collection::vec(proptest::collection::vec(0u32..40, 0..12), 0..12),
            k in 1usize..48,
        ) {
            let (c, f) = counted(&samples, 64);
            prop_assert_eq!(chosen_ids(&ranked(&c, &f), k as u32), reference(&samples, k));
        }

        #[test]
        fn rows_in_any_order_give_the_same_ranking(
            samples in proptest::collection::vec(proptest::collection::vec(0u32..30, 0..10), 1..10),
            k in 1usize..40,
        ) {
            let (_, f) = counted(&samples, 32);
            let (mut c2, mut f2) = (vec![0u64; 32], vec![0u64; 32]);
            for (row, s) in samples.iter().enumerate().rev() {
                count_sample(&mut c2, &mut f2, row as u64, s, None, (0, s.len()));
            }
            prop_assert_eq!(&f2, &f);
            prop_assert_eq!(chosen_ids(&ranked(&c2, &f2), k as u32), reference(&samples, k));
        }

        #[test]
        fn first_seen_merges_like_one_pass(
            samples in proptest::collection::vec(proptest::collection::vec(0u32..30, 0..10), 1..10),
            cut in 0usize..10,
        ) {
            let cut = cut.min(samples.len());
            let (c, f) = counted(&samples, 32);
            let (mut c1, mut f1) = counted(&samples[..cut], 32);
            let (mut c2, mut f2) = (vec![0u64; 32], vec![0u64; 32]);
            for (row, s) in samples.iter().enumerate().skip(cut) {
                count_sample(&mut c2, &mut f2, row as u64, s, None, (0, s.len()));
            }
            merge_first(&mut f2, &f1);
            for (a, b) in c1.iter_mut().zip(&c2) { *a += b; }
            f1 = f2;
            prop_assert_eq!(c1, c);
            prop_assert_eq!(f1, f);
        }
    }

    #[test]
    fn padding_takes_the_lowest_unseen_ids() {
        // Seen: 7 (x2), 3, 9; K = 6 pads with 0, 1, 2 (3 is seen).
        let samples = vec![vec![7, 7, 9], vec![3]];
        let (c, f) = counted(&samples, 16);
        let ids = chosen_ids(&ranked(&c, &f), 6);
        assert_eq!(ids, vec![0, 1, 2, 3, 7, 9]);
        let m = mapping_of(&ids, 16);
        assert_eq!(m.d2t, vec![0, 0, 0, 0, 3, 4]);
        assert_eq!(m.t2d.iter().filter(|&&b| b).count(), 6);
    }

    #[test]
    fn a_mask_selects_the_counted_positions() {
        let (mut c, mut f) = (vec![0u64; 8], vec![0u64; 8]);
        let mask = [0u8, 1, 1, 0, 1];
        // 9 is out of vocabulary: not counted.
        count_sample(
            &mut c,
            &mut f,
            4,
            &[1u32, 2, 9, 3, 2],
            Some(MaskSlice::U8(&mask)),
            (0, 0),
        );
        assert_eq!(c, vec![0, 0, 2, 0, 0, 0, 0, 0]);
        assert_eq!(f[2], u64::MAX - 4);
        // An earlier row seen later (another unit of the same worker) still wins.
        count_sample(&mut c, &mut f, 1, &[2u32], None, (0, 1));
        assert_eq!(f[2], u64::MAX - 1);
    }

    #[test]
    fn check_flags_wrong_size_disagreement_and_low_coverage() {
        let samples = vec![vec![1, 1, 1, 2, 2, 3]];
        let (c, f) = counted(&samples, 8);
        let fresh = mapping_of(&chosen_ids(&ranked(&c, &f), 2), 8);
        let mut cats = BTreeMap::new();
        cats.insert("a".to_string(), IdCounts::from(c));
        let opts = |m: Mapping| VocabOptions {
            sizes: vec![2],
            check: Some(m),
            ..VocabOptions::default()
        };
        let r = build(&cats, &f, 8, &opts(fresh.clone()));
        let ch = r.check.unwrap();
        assert!(!ch.stale(), "{:?}", ch.problems);
        assert_eq!(r.overall.coverage[&2], 5.0 / 6.0);
        let other = mapping_of(&[3, 5], 8);
        let ch = build(&cats, &f, 8, &opts(other)).check.unwrap();
        assert!(ch.stale());
        assert_eq!(ch.missed, vec![(1, 3), (2, 2)]);
        let small = mapping_of(&[1, 2], 4);
        assert!(!build(&cats, &f, 8, &opts(small)).check.unwrap().size_ok);
        let mut broken = fresh;
        broken.t2d[7] = true;
        assert!(!build(&cats, &f, 8, &opts(broken)).check.unwrap().agree);
    }

    /// The scan's accumulator gives [`count_sample`]'s sums and keys: counts past 2^16 (the `u8` wraps many
    /// times), several categories, loss masks of runs and completions, first rows past the `u32` keys' exact
    /// range, and rows in increasing order (keys written at a count's 0 -> 1), then one earlier row (every key
    /// from then on), or in any order.
    #[test]
    fn the_compact_accumulator_counts_as_count_sample() {
        let v = 64usize;
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let samples: Vec<(&str, Vec<u32>)> = (0..40u64)
            .map(|i| {
                let len = if i == 3 {
                    150_000
                } else {
                    (next() % 900) as usize
                };
                // Hot ids (many wraps of the u8 counter), ids of the whole range, and some out of the vocabulary.
                let ids = (0..len)
                    .map(|_| match next() % 10 {
                        0..=5 => 5,
                        6..=8 => (next() % v as u64) as u32,
                        _ => 70 + (next() % 5) as u32,
                    })
                    .collect();
                (["a", "b", "c"][i as usize % 3], ids)
            })
            .collect();
        // Loss masks of runs (on and off stretches of 0..60 tokens, some values other than 1) for two samples
        // in three; the others count their completion.
        let masks: Vec<Option<Vec<i8>>> = (0..40)
            .map(|i| {
                (i % 3 != 0).then(|| {
                    let mut m = Vec::new();
                    let mut on = next() % 2 == 0;
                    while m.len() < samples[i].1.len() + 5 {
                        let value = if on { 1 + (next() % 3) as i8 } else { 0 };
                        m.extend(std::iter::repeat_n(value, (next() % 60) as usize));
                        on = !on;
                    }
                    m
                })
            })
            .collect();
        let completion = |ids: &[u32], i: usize| (i % 5, ids.len().saturating_sub(i % 4));
        let far = u64::from(u32::MAX);
        let ascending: Vec<u64> = (0..40)
            .map(|i| if i >= 36 { far + i } else { 3 * i })
            .collect();
        let mut one_back = ascending.clone();
        one_back[30] = 1; // an earlier row once the accumulator has counted rows up to 87
        let any_order: Vec<u64> = (0..40)
            .map(|i| if i % 7 == 6 { far + i } else { (i * 37) % 41 })
            .collect();
        for rows in [ascending, one_back, any_order] {
            let mut fast = Counts::new(v as u32);
            let mut want: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
            let mut want_first = vec![0u64; v];
            for (i, (row, (cat, ids))) in rows.iter().zip(&samples).enumerate() {
                let mask = masks[i].as_deref().map(MaskSlice::I8);
                fast.add(cat, *row, ids, mask, completion(ids, i));
                let c = want.entry(cat).or_insert_with(|| vec![0; v]);
                count_sample(c, &mut want_first, *row, ids, mask, completion(ids, i));
            }
            assert!(want["a"][5] > 1 << 16);
            let mut partial = LossCounts::default();
            partial.add(&fast);
            for (cat, c) in &want {
                assert_eq!(&partial.categories[*cat].to_dense(v), c, "{cat} {rows:?}");
            }
            // Exact keys for rows below u32::MAX - 1; the later ones clamp to that row's key.
            let clamp = |k: u64| k.max(u64::MAX - u64::from(u32::MAX - 1));
            let want_first: Vec<u64> = want_first
                .iter()
                .map(|&k| if k == 0 { 0 } else { clamp(k) })
                .collect();
            assert_eq!(partial.first_seen, want_first, "{rows:?}");
        }
    }

    /// Small categories count sparsely (an id table, not a vocabulary-sized array each) and give the same counts
    /// and first-seen keys as [`count_sample`]; a category that counts many ids turns dense on the way; the
    /// summary's counts stay sparse for the small ones, and merge to the same sums in any grouping.
    #[test]
    fn small_categories_are_counted_sparsely() {
        let v = 1 << 17;
        let mut fast = Counts::new(v as u32);
        let mut want: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut want_first = vec![0u64; v];
        for i in 0..300u64 {
            // 297 one-sample categories of 40 ids, and one of three samples of 5,000 distinct ids.
            let cat = if i % 100 == 7 {
                "big".to_string()
            } else {
                format!("c{i}")
            };
            let n = if cat == "big" { 5_000 } else { 40 };
            let ids: Vec<u32> = (0..n)
                .map(|k| ((i * 7_919 + k * 104_729) % v as u64) as u32)
                .collect();
            fast.add(&cat, i, &ids, None, (0, ids.len()));
            let c = want.entry(cat).or_insert_with(|| vec![0; v]);
            count_sample(c, &mut want_first, i, &ids, None, (0, ids.len()));
        }
        assert!(fast.categories["big"].is_dense() && !fast.categories["c0"].is_dense());
        let mut partial = LossCounts::default();
        partial.add(&fast);
        for (cat, c) in &want {
            let got = &partial.categories[cat];
            assert_eq!(&got.to_dense(v), c, "{cat}");
            assert_eq!(got.dense.is_empty(), cat != "big", "{cat}");
        }
        let mut first = Vec::new();
        fast.merge_first_into(&mut first);
        assert_eq!(first, want_first);
        // Sparse + sparse, sparse + dense, dense + sparse give the sums.
        let a = IdCounts {
            dense: Vec::new(),
            sparse: vec![(3, 1), (90, 2)],
        };
        let b = IdCounts {
            dense: Vec::new(),
            sparse: vec![(1, 5), (90, 1), (200, 1)],
        };
        let mut ab = a.clone();
        ab.add(&b);
        assert_eq!(ab.sparse, vec![(1, 5), (3, 1), (90, 3), (200, 1)]);
        let mut d = IdCounts::from(vec![1u64; 4]);
        d.add(&ab);
        let mut e = ab.clone();
        e.add(&IdCounts::from(vec![1u64; 4]));
        assert_eq!(d.to_dense(256), e.to_dense(256));
        assert_eq!(d.to_dense(256)[90], 3);
        assert_eq!(d.to_dense(256)[1], 6);
    }

    /// The pool hands a unit an accumulator that has only counted earlier rows, or a new one.
    #[test]
    fn the_pool_keeps_accumulators_in_row_order() {
        let pool = CountsPool::default();
        let mut a = pool.take(8, 100);
        a.add("x", 150, &[1u32], None, (0, 1));
        pool.give(a);
        let b = pool.take(8, 50); // rows before a's: a new one
        assert_eq!(b.rows_below, 0);
        let c = pool.take(8, 200); // after a's: a
        assert_eq!(c.rows_below, 151);
        pool.give(b);
        pool.give(c);
    }
}
