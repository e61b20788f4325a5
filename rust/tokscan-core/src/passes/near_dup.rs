//! Near-duplicate completions: MinHash over token n-grams, LSH banding for candidate pairs, exact Jaccard of the
//! candidates' n-gram sets to confirm, clusters.
//!
//! The signature is one-permutation MinHash (Li, Owen & Zhang 2012) with rotation densification (Shrivastava &
//! Li 2014): each n-gram is hashed once (a rolling hash of its ids' mixes, [`ngram_hashes`]), the hash picks one of `K = bands ×
//! rows` bins and keeps the bin's minimum; an empty bin borrows the next non-empty one's value. Two completions
//! agree on a bin with probability ≈ their n-gram Jaccard `J`, so a band of `rows` bins matches with probability
//! `J^rows` and a pair becomes a candidate with `1 − (1 − J^rows)^bands`, the S-curve whose midpoint is
//! `(1/bands)^(1/rows)` (0.707 for 16 × 8). Candidates are then confirmed on their exact n-gram sets (64-bit
//! hashes of the n-grams), read again for the candidate rows only.
//!
//! Per sample the scan keeps the signature (`K` × 4 bytes: 512 for the defaults) in its record; the n-gram sets
//! of candidates exist only while they are compared.
//!
//! Memory is bounded by [`MEMORY_VAR`]: the signatures of the corpus's samples (known at open) must fit it, or
//! the scan is refused before it starts ([`Params::check_memory`]); candidates are gathered band by band and kept
//! deduplicated, and more distinct pairs than fit the rest of the budget is an error ([`candidates`]).

use crate::report_schema::Field;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use rayon::prelude::*;

use super::{Findings, Finishing, Pass};
use crate::anomaly::Code;
use crate::check::{check_sample, Scratch};
use crate::corpus::Corpus;
use crate::error::Result;
use crate::flagged::{FirstSeen, FlaggedSample};
use crate::pass_partial::{Acc, SampleOut, SamplePass, SampleView, Sampler};
use crate::profile::Profile;
use crate::records::SampleRecord;
use crate::source::{with_tokens, ColumnNames, UnitSpan};
use crate::summary::Partial;
use crate::token::{fmix, ngram_hashes, TokenId, MIX};

/// Near-duplicate parameters (`--near-dup`, `--near-dup-n`, `--near-dup-bands`, `--near-dup-rows`,
/// `--near-dup-threshold`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// n-gram length in tokens.
    pub n: u32,
    pub bands: u32,
    pub rows: u32,
    /// Exact Jaccard a candidate pair needs.
    pub threshold: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            n: 5,
            bands: 16,
            rows: 8,
            threshold: 0.8,
        }
    }
}

/// The setting that bounds near-duplicate detection's memory (bytes): signatures and candidate pairs.
pub const MEMORY_VAR: &str = "TOKSCAN_NEAR_DUP_MEMORY";
/// Its default: 2 GiB, the signatures of 4M samples at the default 16 × 8 bins.
pub const DEFAULT_MEMORY: u64 = 2 << 30;
/// Bytes a candidate pair takes.
const PAIR_BYTES: u64 = 16;
/// Copies of the kept pairs a merge of new pairs holds at its peak ([`PairSet`]: the kept, the new, the merged).
const MERGE_COPIES: u64 = 3;

/// The memory budget of near-duplicate detection ([`MEMORY_VAR`], else [`DEFAULT_MEMORY`]).
pub fn memory_budget() -> crate::error::Result<u64> {
    Ok(crate::settings::bytes(MEMORY_VAR)?.unwrap_or(DEFAULT_MEMORY))
}

/// `bytes` for a message: bytes below a MiB, MiB below a GiB, else GiB.
fn mib(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{bytes} bytes")
    } else if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

/// Groups larger than this in one band compare each member with the first [`WIDE_GROUP_HEADS`] only.
pub const WIDE_GROUP: usize = 64;
pub const WIDE_GROUP_HEADS: usize = 8;

impl Params {
    pub fn bins(&self) -> usize {
        (self.bands * self.rows) as usize
    }

    /// The Jaccard at which a pair becomes a candidate with probability about ½: `(1/bands)^(1/rows)`.
    pub fn implied_threshold(&self) -> f64 {
        (1.0 / f64::from(self.bands)).powf(1.0 / f64::from(self.rows))
    }

    /// The probability that a pair of Jaccard `j` becomes a candidate.
    pub fn candidate_probability(&self, j: f64) -> f64 {
        1.0 - (1.0 - j.powi(self.rows as i32)).powi(self.bands as i32)
    }

    /// Bytes the signatures of `samples` samples take in their records: 4 per bin, and the 16 of the boxed slice.
    pub fn signature_bytes(&self, samples: u64) -> u64 {
        samples.saturating_mul(self.bins() as u64 * 4 + 16)
    }

    /// Refuses parameters whose signatures for the corpus's `samples` would not fit `budget` bytes (a usage error
    /// naming the options and the budget); else the bytes left for candidate pairs.
    pub fn check_memory(&self, samples: u64, budget: u64) -> crate::error::Result<u64> {
        let need = self.signature_bytes(samples);
        if need > budget {
            return Err(crate::error::Error::Usage(format!(
                "--near-dup-bands {} × --near-dup-rows {}: {} bins of 4 bytes per sample × {samples} samples = {} \
                 of signatures, over the near-duplicate memory budget of {} ({MEMORY_VAR}=BYTES raises it); use \
                 fewer bands × rows",
                self.bands,
                self.rows,
                self.bins(),
                mib(need),
                mib(budget)
            )));
        }
        Ok(budget - need)
    }

    pub fn check(&self) -> crate::error::Result<()> {
        let ok = self.n >= 1
            && self.bands >= 1
            && self.rows >= 1
            && self.bins() <= 4096
            && (0.0..=1.0).contains(&self.threshold);
        if ok {
            Ok(())
        } else {
            Err(crate::error::Error::Usage(format!(
                "near-duplicate parameters: n, bands and rows must be ≥ 1 with bands × rows ≤ 4096, the \
                 threshold within [0, 1] (got n={}, bands={}, rows={}, threshold={})",
                self.n, self.bands, self.rows, self.threshold
            )))
        }
    }
}

/// The signature of a completion, `None` when it has fewer than `n` tokens.
pub fn signature<T: TokenId>(ids: &[T], p: &Params) -> Option<Box<[u32]>> {
    let k = p.bins();
    if ids.len() < p.n as usize {
        return None;
    }
    // A bin never hit keeps `u32::MAX` (a hit of exactly that value, once in 2^32, counts as a miss: the same
    // for every engine, so signatures stay deterministic).
    let mut sig = vec![u32::MAX; k];
    for h in ngram_hashes(ids, p.n as usize) {
        let bin = (((h >> 32) * k as u64) >> 32) as usize;
        sig[bin] = sig[bin].min(h as u32);
    }
    // Rotation densification: an empty bin takes the next filled bin's value (circularly), offset by the
    // distance so that two empty bins borrowing from the same one differ.
    if sig.contains(&u32::MAX) {
        let filled: Vec<bool> = sig.iter().map(|&v| v != u32::MAX).collect();
        let src = sig.clone();
        for (j, s) in sig.iter_mut().enumerate() {
            if filled[j] {
                continue;
            }
            let mut d = 1;
            while !filled[(j + d) % k] {
                d += 1;
            }
            *s = src[(j + d) % k].wrapping_add((d as u32).wrapping_mul(0x9E37_79B9));
        }
    }
    Some(sig.into_boxed_slice())
}

/// One key per band: equal bands give equal keys.
pub fn band_keys<'a>(sig: &'a [u32], p: &Params) -> impl Iterator<Item = u64> + 'a {
    let r = p.rows as usize;
    sig.chunks_exact(r)
        .enumerate()
        .map(|(b, band)| band_key(band, b))
}

/// The key of band `b` holding the signature values `band`.
fn band_key(band: &[u32], b: usize) -> u64 {
    let mut bytes = [0u8; 4 * 64];
    let mut h = b as u64;
    for chunk in band.chunks(64) {
        for (dst, v) in bytes.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        h = xxh3_64_with_seed(&bytes[..chunk.len() * 4], h);
    }
    h
}

/// The sorted distinct n-gram hashes of a completion.
pub fn ngram_set<T: TokenId>(ids: &[T], n: usize) -> Vec<u64> {
    let mut v: Vec<u64> = ngram_hashes(ids, n).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Jaccard of two sorted distinct sets.
pub fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// Candidate pairs `(a, b)`, `a < b`, sorted, from `(row, signature)`s: rows that share a band. Bands are paired
/// one at a time (the keys of one band in memory, not of all) and the pairs kept deduplicated ([`PairSet`]): a
/// corpus of similar samples gives the same pairs in every band, and they were held once per band (16 bytes ×
/// 8 heads × samples × bands). More than `budget` bytes of distinct pairs is a usage error naming the options.
pub fn candidates<'a>(
    sigs: impl IntoIterator<Item = (u64, &'a [u32])>,
    p: &Params,
    budget: u64,
) -> crate::error::Result<Vec<(u64, u64)>> {
    // In row order, so that a sample's index orders as its row (a wide group's heads are its lowest rows).
    let mut sigs: Vec<(u64, &[u32])> = sigs.into_iter().collect();
    sigs.sort_unstable_by_key(|&(row, _)| row);
    let r = p.rows as usize;
    let mut pairs = PairSet::new(budget / PAIR_BYTES / MERGE_COPIES);
    let mut keys: Vec<(u64, u64)> = Vec::with_capacity(sigs.len());
    // Per sample, the heads of the last wide group it was paired with: similar samples meet the same heads in
    // band after band, and the pairs made once need not be made again.
    let mut paired_with = vec![u64::MAX; sigs.len()];
    for b in 0..p.bands as usize {
        keys.clear();
        keys.extend(sigs.iter().enumerate().filter_map(|(i, &(_, sig))| {
            sig.get(b * r..(b + 1) * r)
                .map(|band| (band_key(band, b), i as u64))
        }));
        keys.sort_unstable();
        for group in keys.chunk_by(|a, b| a.0 == b.0) {
            let row = |k: &(u64, u64)| sigs[k.1 as usize].0;
            if group.len() <= WIDE_GROUP {
                for (i, a) in group.iter().enumerate() {
                    for g in &group[i + 1..] {
                        pairs.push((row(a), row(g)));
                    }
                }
                continue;
            }
            let heads = &group[..WIDE_GROUP_HEADS];
            let id = heads.iter().fold(MIX, |h, &(_, i)| fmix(h ^ i));
            for (pos, g) in group.iter().enumerate().skip(1) {
                let seen = &mut paired_with[g.1 as usize];
                if *seen == id {
                    continue;
                }
                *seen = id;
                for h in &heads[..pos.min(WIDE_GROUP_HEADS)] {
                    pairs.push((row(h), row(g)));
                }
            }
        }
        if pairs.over() {
            return Err(too_many_pairs(p, budget));
        }
    }
    pairs.finish().ok_or_else(|| too_many_pairs(p, budget))
}

fn too_many_pairs(p: &Params, budget: u64) -> crate::error::Error {
    crate::error::Error::Usage(format!(
        "--near-dup-bands {} × --near-dup-rows {}: more than {} distinct candidate pairs ({PAIR_BYTES} bytes each), \
         over what the near-duplicate memory budget leaves after the signatures ({}; {MEMORY_VAR}=BYTES raises \
         it); use more rows per band (fewer, likelier candidates)",
        p.bands,
        p.rows,
        budget / PAIR_BYTES / MERGE_COPIES,
        mib(budget)
    ))
}

/// Candidate pairs `(a, b)`, `a < b`, sorted, from `(band key, row)`s: the rows of each key, every one
/// paired with the others (with the first [`WIDE_GROUP_HEADS`] only in a group over [`WIDE_GROUP`]). Every
/// key's rows must be here together: a cluster scan routes each band key to one bucket
/// ([`crate::corpus_checks::route`]), so the union of its buckets' pairs is the corpus's.
pub fn pairs_of_bands(mut keys: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut pairs = PairSet::new(u64::MAX);
    group_pairs(&mut keys, &mut pairs);
    pairs.finish().unwrap_or_default()
}

/// Adds the pairs of each key's rows among `keys` (sorted here) to `pairs`.
fn group_pairs(keys: &mut Vec<(u64, u64)>, pairs: &mut PairSet) {
    keys.sort_unstable();
    keys.dedup();
    for group in keys.chunk_by(|a, b| a.0 == b.0) {
        let heads = if group.len() > WIDE_GROUP {
            WIDE_GROUP_HEADS
        } else {
            group.len()
        };
        for i in 0..heads {
            for g in &group[i + 1..] {
                pairs.push((group[i].1, g.1));
            }
        }
    }
}

/// Pairs kept sorted and deduplicated as they come: new pairs wait in a buffer until they outnumber the kept ones
/// (or a million), then merge, so memory follows the distinct pairs. `over` once more than `max` are kept.
struct PairSet {
    kept: Vec<(u64, u64)>,
    new: Vec<(u64, u64)>,
    max: u64,
}

impl PairSet {
    fn new(max: u64) -> PairSet {
        PairSet {
            kept: Vec::new(),
            new: Vec::new(),
            max,
        }
    }

    #[inline]
    fn push(&mut self, pair: (u64, u64)) {
        self.new.push(pair);
        if self.new.len() >= self.kept.len().max(1 << 20) {
            self.merge();
        }
    }

    fn merge(&mut self) {
        if self.new.is_empty() {
            return;
        }
        self.new.par_sort_unstable();
        self.new.dedup();
        if self.kept.is_empty() {
            std::mem::swap(&mut self.kept, &mut self.new);
            return;
        }
        // Both sorted: one linear merge (re-sorting the kept pairs at every merge cost most of the time).
        let (kept, new) = (
            std::mem::take(&mut self.kept),
            std::mem::take(&mut self.new),
        );
        let mut out = Vec::with_capacity(kept.len() + new.len());
        let (mut i, mut j) = (0, 0);
        while i < kept.len() && j < new.len() {
            match kept[i].cmp(&new[j]) {
                std::cmp::Ordering::Less => {
                    out.push(kept[i]);
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    out.push(new[j]);
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    out.push(kept[i]);
                    i += 1;
                    j += 1;
                }
            }
        }
        out.extend_from_slice(&kept[i..]);
        out.extend_from_slice(&new[j..]);
        self.kept = out;
        self.new = new;
        self.new.clear();
    }

    fn over(&self) -> bool {
        self.kept.len() as u64 > self.max
    }

    /// Every distinct pair, sorted; `None` when more than `max`.
    fn finish(mut self) -> Option<Vec<(u64, u64)>> {
        self.merge();
        (!self.over()).then_some(self.kept)
    }
}

/// Candidate pairs in the compact form that crosses processes.
pub fn pairs_to_bytes(pairs: &[(u64, u64)]) -> Vec<u8> {
    crate::wire::encode(&pairs)
}

pub fn pairs_from_bytes(b: &[u8]) -> crate::error::Result<Vec<(u64, u64)>> {
    crate::wire::decode(b, "near-duplicate candidates")
}

/// One cluster of near-duplicate completions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    /// The first sample (lowest row): kept.
    pub representative: FirstSeen,
    pub category: String,
    pub size: u64,
    /// Rows of the other members, in row order (at most [`CLUSTER_ROWS`]).
    pub members: Vec<u64>,
}

pub const CLUSTER_ROWS: usize = 20;
pub const CLUSTERS_LISTED: usize = 50;

/// Per category: samples, and samples flagged `near_duplicate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryRate {
    pub samples: u64,
    pub near_duplicates: u64,
    pub rate: f64,
}

/// The report's `near_duplicates` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NearDupReport {
    pub n: u32,
    pub bands: u32,
    pub rows: u32,
    pub threshold: f64,
    /// `(1/bands)^(1/rows)`: where the candidate S-curve crosses ½.
    pub implied_threshold: f64,
    /// Probability that a pair at `threshold` becomes a candidate.
    pub recall_at_threshold: f64,
    /// Candidate pairs compared, and those confirmed.
    pub candidates: u64,
    pub confirmed: u64,
    pub clusters: u64,
    /// Samples in clusters, representatives included.
    pub samples: u64,
    pub categories: BTreeMap<String, CategoryRate>,
    /// The largest clusters (by size, then representative row).
    pub largest: Vec<Cluster>,
}

fn find(parent: &mut HashMap<u64, u64>, x: u64) -> u64 {
    let mut r = x;
    while let Some(&p) = parent.get(&r) {
        if p == r {
            break;
        }
        r = p;
    }
    let mut y = x;
    while let Some(&p) = parent.get(&y) {
        if p == r {
            break;
        }
        parent.insert(y, r);
        y = p;
    }
    r
}

/// Clusters of confirmed pairs: `row → representative` (the lowest row of its cluster) for every member but
/// the representatives.
pub fn clusters(pairs: &[(u64, u64)]) -> BTreeMap<u64, u64> {
    let mut parent: HashMap<u64, u64> = HashMap::new();
    for &(a, b) in pairs {
        parent.entry(a).or_insert(a);
        parent.entry(b).or_insert(b);
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        if ra != rb {
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            parent.insert(hi, lo);
        }
    }
    let rows: Vec<u64> = parent.keys().copied().collect();
    let mut out = BTreeMap::new();
    for r in rows {
        let root = find(&mut parent, r);
        if root != r {
            out.insert(r, root);
        }
    }
    out
}

/// The report section's key.
pub const NAME: &str = "near_duplicates";

/// Its row of the report's field table ([`crate::report_schema`]).
pub const SECTION: Field = Field {
    names: &[NAME],
    shown: r#"`near_duplicates`"#,
    always: false,
    content: r#"with `--near-dup` (absent otherwise): `n`, `bands`, `rows`, `threshold`, `implied_threshold` ((1/bands)^(1/rows)), `recall_at_threshold` (the probability a pair at the threshold becomes a candidate), `candidates` (pairs compared), `confirmed`, `clusters`, `samples` (in clusters, representatives included), `categories` {name → {`samples`, `near_duplicates`, `rate`}}, `largest` (at most 50) [{`representative` {`row`, `sample_id`}, `category`, `size`, `members` (the first 20 other rows)}]"#,
};
/// The pass's place in the registry ([`crate::options`]).
pub const RANK: u16 = 2;

/// The near-duplicate pass (`--near-dup`): signatures in the scan ([`signature`], kept in the records),
/// then candidates, confirmation and clusters when it finishes.
pub struct NearDup {
    pub params: Params,
}

impl Pass for NearDup {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Parameters whose signatures would not fit the budget are refused before the scan.
    fn check(&self, corpus: &Corpus, _profile: &Profile) -> Result<()> {
        self.budget(corpus).map(|_| ())
    }

    fn needs_records(&self) -> bool {
        true
    }

    fn reads_corpus(&self) -> bool {
        true
    }

    /// The band keys of the record's signature (on a cluster, rows sharing a band meet in one bucket:
    /// [`pairs_of_bands`]).
    fn keys(&self, record: &SampleRecord, out: &mut Vec<u64>) {
        if let Some(sig) = record.sketch.as_deref() {
            out.extend(band_keys(sig, &self.params));
        }
    }

    /// Each sample's signature, kept in its record ([`crate::records::SampleRecord::sketch`]).
    fn sampler<'s>(&'s self, _profile: &'s Profile) -> Result<Option<Box<dyn Sampler + 's>>> {
        Ok(Some(Box::new(Signing(self.params))))
    }

    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Acc>> {
        crate::pass_partial::decode::<()>(bytes)
    }

    fn finish(&self, at: &Finishing<'_>) -> Result<Findings> {
        let corpus = at.corpus(NAME)?;
        let sketches = at
            .records
            .iter()
            .flat_map(|r| r.rows.iter())
            .filter_map(|r| r.sketch.as_deref().map(|s| (r.row, s)));
        let pairs = candidates(sketches, &self.params, self.budget(corpus)?)?;
        near_duplicates(corpus, at.profile, &pairs, at.partial, &self.params)
    }
}

/// The per-sample side: the completion's signature.
struct Signing(Params);

impl SamplePass for Signing {
    type Unit = ();
    type Partial = ();

    fn begin(&self, _first_row: u64) {}

    fn sample(&self, _unit: &mut (), s: &SampleView<'_>, out: &mut SampleOut<'_>) {
        let (cs, ce) = s.completion;
        out.set_sketch(with_tokens!(s.tokens, t => signature(&t[cs..ce.max(cs)], &self.0)));
    }

    fn end(&self, _unit: ()) {}

    fn gathered(&self) {}
}

impl NearDup {
    /// What is left of the memory budget for candidate pairs once every sample's signature is kept.
    fn budget(&self, corpus: &Corpus) -> Result<u64> {
        let rows = corpus.starts.last().copied().unwrap_or(0);
        self.params.check_memory(rows, memory_budget()?)
    }
}

/// Near-duplicate completions of a scanned corpus, from its candidate pairs (sharing an LSH band: from the
/// records' signatures locally, from the bucketed band keys on a cluster, [`pairs_of_bands`]):
/// the candidate rows are read again and checked as the scan checked them (for their completion, lengths,
/// category and id), their exact n-gram Jaccard confirms each pair, confirmed pairs make clusters. Returns
/// the flagged members (all but each cluster's representative) and the report's section. Both engines call
/// this with the same pairs, so their reports are the same.
pub fn near_duplicates(
    corpus: &Corpus,
    profile: &Profile,
    pairs: &[(u64, u64)],
    partial: &Partial,
    p: &Params,
) -> Result<Findings> {
    use std::collections::BTreeSet;
    let wanted: BTreeSet<u64> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
    let rows = candidate_rows(corpus, profile, &wanted, p.n as usize)?;
    let confirmed: Vec<(u64, u64)> = pairs
        .par_iter()
        .filter(|(a, b)| match (rows.get(a), rows.get(b)) {
            (Some(x), Some(y)) => jaccard(&x.set, &y.set) >= p.threshold,
            _ => false,
        })
        .copied()
        .collect();
    let members = clusters(&confirmed);
    let first_seen = |row: u64| crate::flagged::FirstSeen {
        row,
        sample_id: rows[&row].sample_id.clone(),
    };
    let mut flagged = Vec::with_capacity(members.len());
    let mut groups: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (&row, &rep) in &members {
        groups.entry(rep).or_default().push(row);
        let r = &rows[&row];
        flagged.push(FlaggedSample {
            row,
            source: r.source,
            category: r.category.clone(),
            lengths: r.lengths,
            flags: Code::NearDuplicate.bit(),
            content: r.content,
            sample_id: r.sample_id.clone(),
            ..FlaggedSample::default()
        });
        let f = flagged.last_mut().expect("just pushed");
        crate::passes::attach(f, RANK, "near_duplicate_of", &first_seen(rep));
    }
    let mut categories: BTreeMap<String, CategoryRate> = partial
        .categories
        .iter()
        .map(|(name, c)| {
            let rate = CategoryRate {
                samples: c.samples,
                ..CategoryRate::default()
            };
            (name.clone(), rate)
        })
        .collect();
    for f in &flagged {
        if let Some(c) = categories.get_mut(&f.category) {
            c.near_duplicates += 1;
        }
    }
    for c in categories.values_mut() {
        c.rate = c.near_duplicates as f64 / c.samples.max(1) as f64;
    }
    let mut largest: Vec<Cluster> = groups
        .iter()
        .map(|(&rep, members)| Cluster {
            representative: first_seen(rep),
            category: rows[&rep].category.clone(),
            size: members.len() as u64 + 1,
            members: members.iter().take(CLUSTER_ROWS).copied().collect(),
        })
        .collect();
    largest.sort_by(|a, b| {
        b.size
            .cmp(&a.size)
            .then(a.representative.row.cmp(&b.representative.row))
    });
    largest.truncate(CLUSTERS_LISTED);
    let report = NearDupReport {
        n: p.n,
        bands: p.bands,
        rows: p.rows,
        threshold: p.threshold,
        implied_threshold: p.implied_threshold(),
        recall_at_threshold: p.candidate_probability(p.threshold),
        candidates: pairs.len() as u64,
        confirmed: confirmed.len() as u64,
        clusters: groups.len() as u64,
        samples: (members.len() + groups.len()) as u64,
        categories,
        largest,
    };
    let mut found = Findings::new(NAME, Some(&report));
    found.flagged = flagged;
    Ok(found)
}

/// A candidate row read again: what its flagged entry needs, and the sorted n-gram hash set of its
/// completion.
struct CandidateRow {
    source: u32,
    category: String,
    sample_id: Option<crate::sample_id::SampleId>,
    lengths: crate::check::Lengths,
    content: u64,
    set: Vec<u64>,
}

/// [`near_duplicates`] in a cluster task: the corpus the plan was made from ([`crate::passes::in_task`]), so
/// that the rows are the ones the pairs name.
pub fn task(
    sources: &[crate::plan::TaskSource],
    columns: &ColumnNames,
    profile: &Profile,
    pairs: &[(u64, u64)],
    partial: &Partial,
    p: &Params,
) -> Result<Findings> {
    crate::passes::in_task(sources, columns, |corpus| {
        near_duplicates(corpus, profile, pairs, partial, p)
    })
}

/// The candidate `rows`, read from the units that hold them (each unit's span from its first to its last
/// candidate, in parallel) through the corpus reader, and checked with the profile for the completion.
fn candidate_rows(
    corpus: &Corpus,
    profile: &Profile,
    rows: &std::collections::BTreeSet<u64>,
    n: usize,
) -> Result<std::collections::HashMap<u64, CandidateRow>> {
    let spans: Vec<&[UnitSpan]> = corpus.sources.iter().map(|s| s.units()).collect();
    let ranges: Vec<(u64, u64)> = corpus
        .units()
        .into_iter()
        .filter_map(|u| {
            let end = u.base_row + spans[u.source][u.index].rows;
            let mut inside = rows.range(u.base_row..end);
            let first = *inside.next()?;
            let last = inside.next_back().copied().unwrap_or(first);
            Some((first, last + 1))
        })
        .collect();
    let parts: Vec<Result<Vec<(u64, CandidateRow)>>> = ranges
        .par_iter()
        .map(|&(start, end)| {
            let mut scratch = Scratch::default();
            let mut counts = vec![0u64; profile.specials.len()];
            let mut out = Vec::new();
            for s in corpus.samples(start, end)? {
                if !rows.contains(&s.row) {
                    continue;
                }
                let mask = s.mask.as_deref().map(crate::token::MaskSlice::U8);
                let facts = check_sample(
                    profile,
                    &s.ids,
                    s.prompt_len,
                    mask,
                    &mut scratch,
                    &mut counts,
                );
                let (cs, ce) = (facts.completion.0 as usize, facts.completion.1 as usize);
                let ce = ce.min(s.ids.len());
                let set = ngram_set(&s.ids[cs.min(ce)..ce], n);
                let row = CandidateRow {
                    source: s.source as u32,
                    category: s.category,
                    sample_id: s.sample_id,
                    lengths: facts.lengths,
                    content: crate::token::content_key(&s.ids),
                    set,
                };
                out.push((s.row, row));
            }
            Ok(out)
        })
        .collect();
    let mut all = std::collections::HashMap::with_capacity(rows.len());
    for p in parts {
        all.extend(p?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_default_threshold_implied_and_its_recall() {
        let p = Params::default();
        assert!((p.implied_threshold() - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-3);
        assert!(p.candidate_probability(0.8) > 0.94 && p.candidate_probability(0.9) > 0.999);
        assert!(p.candidate_probability(0.3) < 0.002);
    }

    #[test]
    fn similar_completions_share_bins_in_proportion_to_their_jaccard() {
        let p = Params::default();
        let a: Vec<u32> = (0..2000).map(|i| (i * 7919 % 100_003) as u32).collect();
        let mut b = a.clone();
        for i in (0..2000).step_by(100) {
            b[i] = 5; // 20 edits: ~5 % of the n-grams change
        }
        let (sa, sb) = (signature(&a, &p).unwrap(), signature(&b, &p).unwrap());
        let agree =
            sa.iter().zip(sb.iter()).filter(|(x, y)| x == y).count() as f64 / p.bins() as f64;
        let j = jaccard(&ngram_set(&a, 5), &ngram_set(&b, 5));
        assert!((agree - j).abs() < 0.1, "{agree} vs {j}");
        assert_eq!(
            candidates([(0, &sa[..]), (1, &sb[..])], &p, u64::MAX).unwrap(),
            vec![(0, 1)]
        );
        assert!(signature(&a[..4], &p).is_none());
    }

    /// Similar samples share most bands: their pairs are held once, not once per band, and the budget bounds the
    /// distinct ones; parameters whose signatures do not fit the budget are refused before a scan, naming them.
    #[test]
    fn candidates_are_bounded_by_the_budget() {
        let p = Params {
            bands: 512,
            rows: 1,
            ..Params::default()
        };
        let base: Vec<u32> = (0..300).map(|i| (i * 7919 % 100_003) as u32).collect();
        let sigs: Vec<Box<[u32]>> = (0..2000u32)
            .map(|k| {
                let mut ids = base.clone();
                ids[(k % 300) as usize] = 1_000_000 + k;
                signature(&ids, &p).unwrap()
            })
            .collect();
        let rows = || sigs.iter().enumerate().map(|(i, s)| (i as u64, &s[..]));
        // The reference: every band's keys at once.
        let all: Vec<(u64, u64)> = rows()
            .flat_map(|(row, s)| band_keys(s, &p).map(move |k| (k, row)).collect::<Vec<_>>())
            .collect();
        let want = pairs_of_bands(all);
        assert!(want.len() > 2000, "{}", want.len());
        assert_eq!(candidates(rows(), &p, u64::MAX).unwrap(), want);
        let e = candidates(rows(), &p, 1000 * PAIR_BYTES * MERGE_COPIES)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--near-dup-bands 512") && e.contains(MEMORY_VAR),
            "{e}"
        );
        // 4096 bins of 4 bytes for 100,000 samples: 1.6 GB of signatures, over a 1 GiB budget.
        let wide = Params {
            bands: 4096,
            rows: 1,
            ..Params::default()
        };
        let e = wide.check_memory(100_000, 1 << 30).unwrap_err().to_string();
        assert!(
            e.contains("--near-dup-bands 4096 × --near-dup-rows 1")
                && e.contains("1.0 GiB")
                && e.contains(MEMORY_VAR),
            "{e}"
        );
        assert_eq!(
            Params::default().check_memory(1000, 1 << 30).unwrap(),
            (1 << 30) - 1000 * 528
        );
    }

    proptest! {
        /// The rolling hash of each window equals the hash of that window alone (what contamination looks up
        /// with `ngram_hashes(window, n)`), and equal windows hash equal wherever they are.
        #[test]
        fn rolling_windows_hash_as_the_window_alone(
            ids in proptest::collection::vec(0u32..50, 0..200),
            n in 1usize..80,
        ) {
            let all: Vec<u64> = ngram_hashes(&ids, n).collect();
            prop_assert_eq!(all.len(), (ids.len() + 1).saturating_sub(n));
            for (i, &h) in all.iter().enumerate() {
                let alone: Vec<u64> = ngram_hashes(&ids[i..i + n], n).collect();
                prop_assert_eq!(&alone, &vec![h]);
            }
        }

        #[test]
        fn clusters_do_not_depend_on_pair_order(
            mut pairs in proptest::collection::vec((0u64..40, 0u64..40), 0..60),
            seed in any::<u64>(),
        ) {
            pairs.retain(|(a, b)| a != b);
            let want = clusters(&pairs);
            let mut shuffled = pairs.clone();
            shuffled.sort_by_key(|(a, b)| xxhash_rust::xxh3::xxh3_64_with_seed(&[*a as u8, *b as u8], seed));
            let flipped: Vec<(u64, u64)> = shuffled.iter().map(|&(a, b)| (b, a)).collect();
            prop_assert_eq!(&clusters(&flipped), &want);
            // Every member's representative is the lowest row connected to it.
            for (&m, &r) in &want {
                prop_assert!(r < m);
                prop_assert!(!want.contains_key(&r));
            }
        }
    }
}
