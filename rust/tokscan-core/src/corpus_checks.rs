//! The corpus-wide checks, split so that no process needs every sample:
//!
//! 1. [`route`]: each scan's [`Records`] become keys (completion hash and length; sample id; prompt hash and
//!    length) sent to one of `n` buckets by hash, so equal keys always meet in the same bucket;
//!    [`Bucket::fold`] keeps one key a group of a scan's rows.
//! 2. [`find_repeats`]: one bucket's keys from every scan → the completions, ids and (not plainly repeated)
//!    prompts seen on more than one row, each with its first row ([`Repeated`]: one entry a group, however
//!    many rows repeat it), from which each later row's codes follow (`duplicate`, `sample_id_duplicate`, `prompt_duplicate`, `prompt_cross_category`).
//! 3. [`Fences`]: the length-outlier fences of each category, from the merged [`Partial`]'s exact length
//!    distributions.
//! 4. [`resolve`]: each scan's records with every bucket's repeat groups and the fences → the samples the corpus-wide codes
//!    flag, in full, ready to merge into the report's flagged list; [`resolve_units`] for a whole corpus in
//!    one process, past the report's detail limit summarized.
//!
//! A local scan runs the same steps in one process, with one bucket per worker thread ([`local`]).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::anomaly::Code;
use crate::error::Result;
use crate::flagged::{FirstSeen, FlaggedSample, PromptFirst};
use crate::records::{Records, SampleRecord};
use crate::sample_id::SampleId;
use crate::stats::log_quartiles;
pub use crate::summary::Found;
use crate::summary::{agreement, Agreement};
use crate::summary::{Partial, Summarized};
use crate::wire::{decode, encode};

/// Categories with fewer samples are not judged for length outliers.
pub const OUTLIER_MIN_SAMPLES: u64 = 20;
/// Tukey "far out" fence multiplier on log2 lengths.
pub const OUTLIER_FENCE: f64 = 3.0;

/// A completion's key: equal completions have equal keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionKey {
    pub hash: u64,
    pub len: u32,
    pub row: u64,
    pub sample_id: Option<SampleId>,
    /// Later rows with the same completion were folded into this key ([`Bucket::fold`]).
    pub more: bool,
}

/// A prompt's key: equal prompts have equal `(hash, len)`; the completion's and the category tell a prompt
/// generated twice or filed twice from a plain repeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptKey {
    pub hash: u64,
    pub len: u32,
    pub row: u64,
    pub completion: (u64, u32),
    pub category: Box<str>,
    pub sample_id: Option<SampleId>,
}

/// The keys of one bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub completions: Vec<CompletionKey>,
    /// `(sample id, row, later rows with the id were folded in)`.
    pub ids: Vec<(SampleId, u64, bool)>,
    pub prompts: Vec<PromptKey>,
    /// By pass name, the `(key, row)`s of the passes' keyed form ([`crate::passes::Pass::keys`]).
    pub keyed: BTreeMap<String, Vec<(u64, u64)>>,
}

impl Bucket {
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Bucket> {
        decode(b, "key bucket")
    }

    /// Pass `name`'s `(key, row)`s, taken out of the bucket.
    pub fn take_keyed(&mut self, name: &str) -> Vec<(u64, u64)> {
        self.keyed.remove(name).unwrap_or_default()
    }

    /// Keeps one key a completion, a sample id and a distinct prompt (prompt, completion and category): the
    /// first row's, a completion's and an id's marked when later rows share it. [`find_repeats`] finds the same
    /// groups (a prompt group's head and whether it is a plain repeat depend only on its lowest row and its
    /// distinct completions and categories, so prompt keys need no mark), and a scan of copies routes one key a
    /// unit instead of one a row (all of a group's keys meet in one bucket).
    pub fn fold(&mut self) {
        self.completions
            .sort_unstable_by_key(|k| (k.hash, k.len, k.row));
        self.completions.dedup_by(|later, kept| {
            let same = (later.hash, later.len) == (kept.hash, kept.len);
            kept.more |= same;
            same
        });
        self.ids.sort_unstable();
        self.ids.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            kept.2 |= same;
            same
        });
        let distinct = |k: &PromptKey| (k.hash, k.len, k.completion);
        self.prompts.sort_unstable_by(|a, b| {
            (distinct(a), &a.category, a.row).cmp(&(distinct(b), &b.category, b.row))
        });
        self.prompts.dedup_by(|later, kept| {
            (distinct(later), &later.category) == (distinct(kept), &kept.category)
        });
    }
}

/// Splits the keys of `records` into `n` buckets (`n` ≥ 1) by hash, the keys `passes` make of each record
/// too (their keyed form, [`crate::passes::Pass::keys`]).
pub fn route(
    records: &Records,
    n: usize,
    passes: &[Box<dyn crate::passes::Pass + '_>],
) -> Vec<Bucket> {
    let n = n.max(1);
    let mut out = vec![Bucket::default(); n];
    let mut keys = Vec::new();
    for r in &records.rows {
        if r.completion_len > 0 {
            out[(r.completion_hash % n as u64) as usize]
                .completions
                .push(CompletionKey {
                    hash: r.completion_hash,
                    len: r.completion_len,
                    row: r.row,
                    sample_id: r.sample_id.clone(),
                    more: false,
                });
        }
        if let Some(id) = &r.sample_id {
            out[(id.hash64() % n as u64) as usize]
                .ids
                .push((id.clone(), r.row, false));
        }
        if r.prompt_len > 0 {
            out[(r.prompt_hash % n as u64) as usize]
                .prompts
                .push(PromptKey {
                    hash: r.prompt_hash,
                    len: r.prompt_len,
                    row: r.row,
                    completion: (r.completion_hash, r.completion_len),
                    category: records.categories[r.category as usize].as_str().into(),
                    sample_id: r.sample_id.clone(),
                });
        }
        for p in passes {
            keys.clear();
            p.keys(r, &mut keys);
            for &key in &keys {
                let bucket = &mut out[(key % n as u64) as usize].keyed;
                match bucket.get_mut(p.name()) {
                    Some(v) => v.push((key, r.row)),
                    None => {
                        bucket.insert(p.name().to_string(), vec![(key, r.row)]);
                    }
                }
            }
        }
    }
    out
}

/// The completions and sample ids seen on more than one row and the prompts seen on more than one row that are
/// not plain repeats, each with its first row: what every later row with the key repeats. Its size is the
/// number of such groups, not of their rows (a corpus of copies is a few entries). Each bucket's groups are
/// disjoint from every other's (every scan routes to the same number of buckets, and each bucket's keys from
/// every scan are searched together), so [`Repeated::merge`] of every bucket's is the corpus's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeated {
    /// `(hash, length)` of a completion → its first row (`duplicate`).
    pub completions: HashMap<(u64, u32), FirstSeen>,
    /// A sample id → its first row (`sample_id_duplicate`).
    pub ids: HashMap<SampleId, FirstSeen>,
    /// `(hash, length)` of a prompt whose rows do not all share the first's completion and category (a plain
    /// repeat is `duplicate` alone) → the first's completion `(hash, length)` and the first
    /// (`prompt_duplicate`, `prompt_cross_category`, the prompt group).
    pub prompts: HashMap<(u64, u32), ((u64, u32), PromptFirst)>,
}

/// What one row repeats, borrowed from [`Repeated`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Repeat<'a> {
    flags: u64,
    /// The first sample with the same completion (`duplicate`) or else the same id (`sample_id_duplicate`);
    /// for a row flagged by neither, its prompt group's first.
    first: (u64, Option<&'a SampleId>),
    /// The kept first of the row's prompt group, when it is a later member of one.
    prompt_of: Option<&'a PromptFirst>,
}

impl Repeated {
    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Repeated> {
        decode(b, "repeats")
    }

    /// Adds another bucket's groups (disjoint from these).
    pub fn merge(&mut self, other: Repeated) {
        fn join<K: std::hash::Hash + Eq, V>(into: &mut HashMap<K, V>, from: HashMap<K, V>) {
            into.reserve(from.len());
            for (k, v) in from {
                let was = into.insert(k, v);
                debug_assert!(was.is_none(), "a key's group found in two buckets");
            }
        }
        join(&mut self.completions, other.completions);
        join(&mut self.ids, other.ids);
        join(&mut self.prompts, other.prompts);
    }

    /// What row `r` (of category `category`) repeats, if anything: the completion's first sample is the one
    /// named, else the id's, else the prompt group's.
    /// (A map with no groups is not looked up: most corpora repeat little.)
    fn of(&self, r: &SampleRecord, category: &str) -> Option<Repeat<'_>> {
        fn first_of(f: &FirstSeen) -> (u64, Option<&SampleId>) {
            (f.row, f.sample_id.as_ref())
        }
        let mut out: Option<Repeat> = None;
        if r.completion_len > 0 && !self.completions.is_empty() {
            if let Some(first) = self
                .completions
                .get(&(r.completion_hash, r.completion_len))
                .filter(|f| f.row != r.row)
            {
                out = Some(Repeat {
                    flags: Code::Duplicate.bit(),
                    first: first_of(first),
                    prompt_of: None,
                });
            }
        }
        if let Some(id) = r.sample_id.as_ref().filter(|_| !self.ids.is_empty()) {
            if let Some(first) = self.ids.get(id).filter(|f| f.row != r.row) {
                let m = out.get_or_insert(Repeat {
                    flags: 0,
                    first: first_of(first),
                    prompt_of: None,
                });
                m.flags |= Code::SampleIdDuplicate.bit();
            }
        }
        if r.prompt_len > 0 && !self.prompts.is_empty() {
            if let Some((completion, head)) = self
                .prompts
                .get(&(r.prompt_hash, r.prompt_len))
                .filter(|(_, h)| h.row != r.row)
            {
                let m = out.get_or_insert(Repeat {
                    flags: 0,
                    first: (head.row, head.sample_id.as_ref()),
                    prompt_of: None,
                });
                if *completion != (r.completion_hash, r.completion_len) {
                    m.flags |= Code::PromptDuplicate.bit();
                }
                if head.category != category {
                    m.flags |= Code::PromptCrossCategory.bit();
                }
                m.prompt_of = Some(head);
            }
        }
        out
    }
}

/// The groups of [`Repeated`] in one bucket's keys from every scan (any order, folded or not).
pub fn find_repeats(buckets: impl IntoIterator<Item = Bucket>) -> Repeated {
    let mut completions = Vec::new();
    let mut ids = Vec::new();
    let mut prompts = Vec::new();
    for b in buckets {
        completions.extend(b.completions);
        ids.extend(b.ids);
        prompts.extend(b.prompts);
    }
    let mut out = Repeated::default();
    // The same completion (hash and length) on more than one row.
    completions.sort_unstable_by_key(|k| (k.hash, k.len, k.row));
    for group in completions.chunk_by(|a, b| (a.hash, a.len) == (b.hash, b.len)) {
        if group.len() > 1 || group[0].more {
            let first = FirstSeen {
                row: group[0].row,
                sample_id: group[0].sample_id.clone(),
            };
            out.completions.insert((group[0].hash, group[0].len), first);
        }
    }
    // The same sample id on more than one row.
    ids.sort_unstable();
    for group in ids.chunk_by(|a, b| a.0 == b.0) {
        if group.len() > 1 || group[0].2 {
            let first = FirstSeen {
                row: group[0].1,
                sample_id: Some(group[0].0.clone()),
            };
            out.ids.insert(group[0].0.clone(), first);
        }
    }
    // The same prompt on more than one row. A group whose samples all share the first's completion and
    // category is a plain repeat (`duplicate`) and no prompt group; in any other, every later sample names
    // the first, and is flagged when its completion or its category differs from the first's.
    prompts.sort_unstable_by_key(|k| (k.hash, k.len, k.row));
    for group in prompts.chunk_by(|a, b| (a.hash, a.len) == (b.hash, b.len)) {
        let head = &group[0];
        if group[1..]
            .iter()
            .all(|k| k.completion == head.completion && k.category == head.category)
        {
            continue;
        }
        let first = PromptFirst {
            row: head.row,
            sample_id: head.sample_id.clone(),
            category: head.category.to_string(),
        };
        out.prompts
            .insert((head.hash, head.len), (head.completion, first));
    }
    out
}

/// What a sample of each category is measured against: its length fences and its features' majorities.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fences {
    /// Per category, the log2-length fence `(lo, hi)` outside which a sample's total length is an outlier:
    /// Tukey's far-out fence (Q1 − 3·IQR, Q3 + 3·IQR) on `log2(length + 1)`, IQR floored at 0.5, for
    /// categories with at least [`OUTLIER_MIN_SAMPLES`] samples.
    pub lengths: BTreeMap<String, (f64, f64)>,
    /// Per category with enough samples, the packed majority value of each structural feature
    /// ([`crate::check::features`]; `NA` where no value holds the majority).
    #[serde(default)]
    pub majorities: BTreeMap<String, u32>,
}

/// Per category, the packed value of each feature that at least the majority share of its samples share (the
/// samples the feature applies to, if at least the minimum of them); `NA` elsewhere.
fn majorities(partial: &Partial) -> BTreeMap<String, u32> {
    use crate::check::features::FEATURES;
    let mut out = BTreeMap::new();
    for (name, c) in &partial.categories {
        let mut packed = u32::MAX;
        let mut any = false;
        for f in 0..FEATURES.len() {
            if let Agreement::Majority(v) = agreement(c, f, partial.consistency) {
                packed = (packed & !(0xF << (4 * f))) | (u32::from(v) << (4 * f));
                any = true;
            }
        }
        if any {
            out.insert(name.clone(), packed);
        }
    }
    out
}

impl Fences {
    pub fn of(partial: &Partial) -> Fences {
        Fences {
            lengths: partial
                .categories
                .iter()
                .filter(|(_, c)| c.samples >= OUTLIER_MIN_SAMPLES)
                .map(|(name, c)| {
                    let (q1, q3) = log_quartiles(&c.total);
                    let iqr = (q3 - q1).max(0.5);
                    (
                        name.clone(),
                        (q1 - OUTLIER_FENCE * iqr, q3 + OUTLIER_FENCE * iqr),
                    )
                })
                .collect(),
            majorities: majorities(partial),
        }
    }

    pub fn is_outlier(&self, category: &str, total: u32) -> bool {
        self.lengths.get(category).is_some_and(|&(lo, hi)| {
            let l = (f64::from(total) + 1.0).log2();
            l < lo || l > hi
        })
    }
}

const REPEAT_BITS: u64 = Code::Duplicate.bit() | Code::SampleIdDuplicate.bit();

/// The codes the corpus-wide checks give one row (0: none), and for `departs_from_category` the features it
/// departs on, its category's majority and its own (see [`FlaggedSample::departs`]).
fn row_flags(
    r: &SampleRecord,
    category: &str,
    repeat: Option<&Repeat>,
    fences: &Fences,
) -> (u64, (u32, u32, u32)) {
    if r.flags & Code::MalformedLine.bit() != 0 {
        return (0, (0, 0, 0)); // a line that is not a sample has no length, structure or copies to compare
    }
    let mut flags = repeat.map_or(0, |x| x.flags);
    if fences.is_outlier(category, r.lengths.total) {
        flags |= Code::LengthOutlier.bit();
    }
    let mut departs = (0u32, 0u32, 0u32);
    if let Some(&maj) = fences.majorities.get(category) {
        use crate::check::features::{explained_by, get, FEATURES, NA};
        for f in 0..FEATURES.len() {
            let (m, v) = (get(maj, f), get(r.features, f));
            if m != NA && v != NA && v != m && r.flags & explained_by(f) == 0 {
                departs.0 |= 1 << f;
            }
        }
        if departs.0 != 0 {
            departs.1 = maj;
            departs.2 = r.features;
            flags |= Code::DepartsFromCategory.bit();
        }
    }
    (flags, departs)
}

/// One flagged row in full.
fn full_entry(
    r: &SampleRecord,
    category: &str,
    flags: u64,
    repeat: Option<&Repeat>,
    departs: (u32, u32, u32),
) -> FlaggedSample {
    FlaggedSample {
        row: r.row,
        source: r.source,
        category: category.to_string(),
        lengths: r.lengths,
        flags,
        content: r.content,
        sample_id: r.sample_id.clone(),
        detail: None,
        duplicate_of: repeat
            .filter(|x| x.flags & REPEAT_BITS != 0)
            .map(|x| FirstSeen {
                row: x.first.0,
                sample_id: x.first.1.cloned(),
            }),
        departs,
        prompt_of: repeat.and_then(|x| x.prompt_of.cloned().map(Box::new)),
        ..FlaggedSample::default()
    }
}

/// The samples of `records` that the corpus-wide checks flag, row-sorted.
pub fn resolve(records: &Records, repeated: &Repeated, fences: &Fences) -> Vec<FlaggedSample> {
    let mut out = Vec::new();
    for r in &records.rows {
        let category = &records.categories[r.category as usize];
        let repeat = repeated.of(r, category);
        let (flags, departs) = row_flags(r, category, repeat.as_ref(), fences);
        if flags != 0 {
            out.push(full_entry(r, category, flags, repeat.as_ref(), departs));
        }
    }
    out
}

/// What resolving records needs of the merged partial summary: the fences, and for the report's detail limit
/// the rows the per-sample rules list in full and the limit (one cluster task's share of it travels to every
/// resolve task).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resolution {
    pub fences: Fences,
    /// The rows `partial` lists in full, sorted.
    pub listed: Vec<u64>,
    /// Rows past it for each of their codes are summarized; 0: every row in full.
    pub detail_limit: u64,
}

impl Resolution {
    /// For `partial`; with `summarize` false (findings added to the same rows later: near duplicates, prompt
    /// pairing), every row in full.
    pub fn of(partial: &Partial, summarize: bool) -> Resolution {
        Resolution {
            fences: Fences::of(partial),
            listed: partial.flagged.iter().map(|f| f.row).collect(),
            detail_limit: if summarize { partial.detail_limit } else { 0 },
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Resolution> {
        decode(b, "resolution")
    }
}

/// [`resolve`] for units in row order (`unit(i)` gives the i-th unit's records, which may be read from disk),
/// with the report's detail limit applied ahead: a row is written in full only when the report can list it in
/// full — [`Partial::absorb_corpus`] and [`Partial::cap`] then find exactly what they would find in the full
/// list. That is a row the partial lists in full (the corpus-wide codes join its entry), a later member of a
/// prompt group (the report's `prompt_groups` counts them from the full entries), and a row one of whose codes
/// has fewer than `detail_limit` rows before it among these units. The corpus-wide codes are set by these
/// checks alone, so for a whole corpus that count is exact; for a part of one (a cluster task's records) it
/// counts from the part's first row, so the rows in full are a superset of the whole corpus's, and the
/// report's cap summarizes the rest as it would (a row past the limit for each of its codes changes no count
/// under the limit). With no limit, every row is in full.
pub fn resolve_units<R: std::ops::Deref<Target = Records> + Send>(
    resolution: &Resolution,
    n_units: usize,
    unit: impl Fn(usize) -> Result<R> + Sync,
    repeated: &Repeated,
) -> Result<Found> {
    use rayon::prelude::*;
    let Resolution {
        fences,
        listed,
        detail_limit,
    } = resolution;
    if *detail_limit == 0 {
        let resolved: Vec<Vec<FlaggedSample>> = (0..n_units)
            .into_par_iter()
            .map(|i| {
                let records = unit(i)?;
                Ok(resolve(&records, repeated, fences))
            })
            .collect::<Result<_>>()?;
        // Units hold disjoint row ranges in order: one list sized once, not regrown by doubling.
        let mut full = Vec::with_capacity(resolved.iter().map(Vec::len).sum());
        for r in resolved {
            full.extend(r);
        }
        return Ok(full.into());
    }
    // 1. Each flagged row's codes and category (an index into its unit's categories), and the rows that are
    //    later members of a prompt group, found in parallel a batch of units at a time;
    // 2. walked in row order as the report's limit walks them: the rows the report can list in full, per unit,
    //    and every other row summarized as it is. Batches keep one batch's codes beside the summaries (a corpus
    //    of copies flags every row).
    type Unit = (Vec<Summarized>, Vec<u64>, Vec<String>);
    let mut seen = vec![0u64; crate::anomaly::N_CODES];
    let mut found = Found::default();
    let mut in_full: Vec<Vec<u64>> = Vec::with_capacity(n_units);
    let batch = 4 * rayon::current_num_threads().max(1);
    for start in (0..n_units).step_by(batch) {
        let flagged: Vec<Unit> = (start..n_units.min(start + batch))
            .into_par_iter()
            .map(|i| {
                let records = unit(i)?;
                let (mut rows, mut grouped) = (Vec::new(), Vec::new());
                for r in &records.rows {
                    let category = &records.categories[r.category as usize];
                    let repeat = repeated.of(r, category);
                    let (flags, _) = row_flags(r, category, repeat.as_ref(), fences);
                    if flags != 0 {
                        rows.push(Summarized {
                            row: r.row,
                            flags,
                            content: r.content,
                            category: r.category,
                        });
                        if repeat.is_some_and(|x| x.prompt_of.is_some()) {
                            grouped.push(r.row);
                        }
                    }
                }
                Ok((rows, grouped, records.categories.clone()))
            })
            .collect::<Result<_>>()?;
        for (rows, grouped, categories) in flagged {
            let remap: Vec<u32> = categories
                .iter()
                .map(|c| crate::records::category_index(&mut found.categories, c))
                .collect();
            let mut full = Vec::new();
            for s in rows {
                let counted = crate::summary::within_limit(&mut seen, s.flags, *detail_limit);
                if counted
                    || grouped.binary_search(&s.row).is_ok()
                    || listed.binary_search(&s.row).is_ok()
                {
                    full.push(s.row);
                } else {
                    found.summarized.push(Summarized {
                        category: remap[s.category as usize],
                        ..s
                    });
                }
            }
            in_full.push(full);
        }
    }
    // 3. Those rows in full: only the units that have some are read again.
    let full: Vec<Vec<FlaggedSample>> = (0..n_units)
        .into_par_iter()
        .filter(|&i| !in_full[i].is_empty())
        .map(|i| {
            let records = unit(i)?;
            Ok(records
                .rows
                .iter()
                .filter(|r| in_full[i].binary_search(&r.row).is_ok())
                .map(|r| {
                    let category = &records.categories[r.category as usize];
                    let repeat = repeated.of(r, category);
                    let (flags, departs) = row_flags(r, category, repeat.as_ref(), fences);
                    full_entry(r, category, flags, repeat.as_ref(), departs)
                })
                .collect())
        })
        .collect::<Result<_>>()?;
    found.full = full.concat();
    Ok(found)
}

/// All four steps in one process: the corpus-wide findings for the records of a whole corpus
/// ([`resolve_units`]: past the detail limit, summarized when `summarize`). The keys go to one bucket per
/// worker thread and the buckets are searched in parallel, as are the records resolved (a row's completion,
/// id and prompt may repeat in different buckets; [`Repeated::merge`] joins their disjoint groups, and any
/// number of buckets flags the same samples): run after the scan, on one thread, the sorts of the keys were a tenth of a two-thread NumPy
/// scan's time.
pub fn local(partial: &Partial, records: &[Records], summarize: bool) -> Result<Found> {
    use rayon::prelude::*;
    let n = rayon::current_num_threads().max(1);
    // Folded per unit: a corpus of copies sorts one key a group and unit, not one a row.
    let routed: Vec<Vec<Bucket>> = records
        .par_iter()
        .map(|r| {
            let mut buckets = route(r, n, &[]);
            buckets.iter_mut().for_each(Bucket::fold);
            buckets
        })
        .collect();
    let mut per_bucket: Vec<Vec<Bucket>> = (0..n).map(|_| Vec::new()).collect();
    for buckets in routed {
        for (b, bucket) in buckets.into_iter().enumerate() {
            per_bucket[b].push(bucket);
        }
    }
    let found: Vec<Repeated> = per_bucket.into_par_iter().map(find_repeats).collect();
    let mut repeated = Repeated::default();
    for f in found {
        repeated.merge(f);
    }
    resolve_units(
        &Resolution::of(partial, summarize),
        records.len(),
        |i| Ok(&records[i]),
        &repeated,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Lengths;
    use crate::records::SampleRecord;
    use proptest::prelude::*;

    fn records(rows: &[(u64, &str, u32, u64, Option<&str>)]) -> Records {
        let mut r = Records::default();
        for &(row, cat, total, hash, id) in rows {
            let category = r.category_index(cat);
            r.rows.push(SampleRecord {
                row,
                source: 0,
                category,
                lengths: Lengths {
                    total,
                    ..Default::default()
                },
                completion_hash: hash,
                completion_len: if hash == 0 { 0 } else { 10 },
                content: row,
                sample_id: id.map(SampleId::from),
                flags: 0,
                features: u32::MAX,
                prompt_hash: 0,
                prompt_len: 0,
                sketch: None,
            });
        }
        r
    }

    /// `records` with the prompt key of row `i` set to `prompts[i]` (0: no prompt turns).
    fn with_prompts(mut r: Records, prompts: &[u64]) -> Records {
        for (row, &p) in r.rows.iter_mut().zip(prompts) {
            row.prompt_hash = p;
            row.prompt_len = if p == 0 { 0 } else { 7 };
        }
        r
    }

    #[test]
    fn later_samples_of_a_prompt_are_flagged_when_their_completion_or_category_differs() {
        // (row, category, completion, prompt)
        let rows = [
            (0, "a", 11, 1), // first of prompt 1
            (1, "a", 12, 1), // a different completion
            (2, "a", 11, 1), // the first's completion: a duplicate, in the group
            (3, "b", 11, 1), // filed under another category
            (4, "b", 13, 1), // both
            (5, "a", 21, 2), // prompt 2: all the same completion and category, a plain repeat
            (6, "a", 21, 2),
            (7, "a", 31, 0), // no prompt turns
            (8, "a", 32, 0),
        ];
        let plain: Vec<_> = rows
            .iter()
            .map(|&(r, c, h, _)| (r, c, 10, h, None))
            .collect();
        let prompts: Vec<u64> = rows.iter().map(|r| r.3).collect();
        let recs = with_prompts(records(&plain), &prompts);
        let found = local(&partial_of(&recs), std::slice::from_ref(&recs), true)
            .unwrap()
            .full;
        let with = |c: Code| {
            found
                .iter()
                .filter(|f| f.flags & c.bit() != 0)
                .map(|f| f.row)
                .collect::<Vec<_>>()
        };
        assert_eq!(with(Code::PromptDuplicate), vec![1, 4]);
        assert_eq!(with(Code::PromptCrossCategory), vec![3, 4]);
        assert_eq!(with(Code::Duplicate), vec![2, 3, 6]);
        let named: Vec<(u64, u64)> = found
            .iter()
            .filter_map(|f| f.prompt_of.as_ref().map(|p| (f.row, p.row)))
            .collect();
        assert_eq!(named, vec![(1, 0), (2, 0), (3, 0), (4, 0)]);
        // A duplicate names the completion's first, not the prompt's.
        let d = found.iter().find(|f| f.row == 6).unwrap();
        assert_eq!(d.duplicate_of.as_ref().unwrap().row, 5);
        assert!(d.prompt_of.is_none());
        assert!(found
            .iter()
            .find(|f| f.row == 1)
            .unwrap()
            .duplicate_of
            .is_none());
        let groups = crate::report::PromptGroups::of(&found);
        assert_eq!(
            (groups.groups, groups.cross_category, groups.samples),
            (1, 1, 5)
        );
        let g = &groups.largest[0];
        assert_eq!(
            (g.size, g.differing, g.rows.clone()),
            (5, 2, vec![1, 2, 3, 4])
        );
        assert_eq!(g.categories.get("b"), Some(&2));
    }

    fn partial_of(recs: &Records) -> Partial {
        let mut p = Partial::new(0);
        for r in &recs.rows {
            p.category(&recs.categories[r.category as usize])
                .add_lengths(&r.lengths);
        }
        p
    }

    #[test]
    fn later_duplicates_ids_and_outliers_are_flagged() {
        let mut rows: Vec<(u64, &str, u32, u64, Option<String>)> = (0..30u64)
            .map(|row| {
                (
                    row,
                    "a",
                    100 + (row as u32 % 7) * 10,
                    1000 + row,
                    Some(format!("id{row}")),
                )
            })
            .collect();
        rows.push((30, "a", 100_000, 5000, Some("big".into()))); // far outlier
        rows.push((31, "a", 120, 1005, Some("id3".into()))); // completion of row 5, id of row 3
        rows.push((32, "b", 5, 0, None)); // empty completions are never duplicates
        rows.push((33, "b", 5, 0, None));
        let borrowed: Vec<_> = rows
            .iter()
            .map(|(r, c, t, h, i)| (*r, *c, *t, *h, i.as_deref()))
            .collect();
        let recs = records(&borrowed);
        let found = local(&partial_of(&recs), std::slice::from_ref(&recs), true)
            .unwrap()
            .full;
        let with = |c: Code| {
            found
                .iter()
                .filter(|f| f.flags & c.bit() != 0)
                .map(|f| f.row)
                .collect::<Vec<_>>()
        };
        assert_eq!(with(Code::Duplicate), vec![31]);
        assert_eq!(with(Code::SampleIdDuplicate), vec![31]);
        assert_eq!(with(Code::LengthOutlier), vec![30]); // category b has too few samples to judge
        let dup = found.iter().find(|f| f.row == 31).unwrap();
        assert_eq!(dup.duplicate_of.as_ref().unwrap().row, 5);
    }

    /// A partial whose samples `sample_flags[i]` (row `i`, 0: not flagged by a per-sample rule) were pushed
    /// under the detail limit `limit`, as the scan pushes them.
    fn flagged_partial(recs: &Records, sample_flags: &[u64], limit: u64) -> Partial {
        let mut p = partial_of(recs);
        p.detail_limit = limit;
        for (r, &flags) in recs.rows.iter().zip(sample_flags) {
            if flags != 0 {
                let category = &recs.categories[r.category as usize];
                p.push_flagged(full_entry(r, category, flags, None, (0, 0, 0)));
            }
        }
        p
    }

    /// The flagged samples of a partial: in full, and `(row, codes, category)` summarized.
    fn listed(p: &Partial) -> (Vec<FlaggedSample>, Vec<(u64, u64, String)>) {
        let summarized = p
            .summarized
            .iter()
            .map(|s| {
                (
                    s.row,
                    s.flags,
                    p.summarized_categories[s.category as usize].clone(),
                )
            })
            .collect();
        (p.flagged.clone(), summarized)
    }

    #[test]
    fn copies_past_the_detail_limit_are_summarized_before_the_report_sees_them() {
        // Ten copies of three samples: rows 3.. are duplicates.
        let rows: Vec<(u64, &str, u32, u64, Option<&str>)> =
            (0..30u64).map(|r| (r, "a", 100, 1 + r % 3, None)).collect();
        let recs = records(&rows);
        let partial = flagged_partial(&recs, &[0; 30], 4);
        let found = local(&partial, std::slice::from_ref(&recs), true).unwrap();
        let full: Vec<u64> = found.full.iter().map(|f| f.row).collect();
        assert_eq!(full, vec![3, 4, 5, 6]);
        assert_eq!(found.summarized.len(), 23);
        assert_eq!(found.categories, vec!["a".to_string()]);
        // Every flagged row, with its codes, in row order: the same as in full.
        let rows = |f: &Found| {
            let mut v: Vec<(u64, u64)> = f
                .full
                .iter()
                .map(|x| (x.row, x.flags))
                .chain(f.summarized.iter().map(|s| (s.row, s.flags)))
                .collect();
            v.sort_unstable();
            v
        };
        let all = local(&partial, std::slice::from_ref(&recs), false).unwrap();
        assert_eq!(rows(&found), rows(&all));
    }

    proptest! {
        /// Summarizing the corpus-wide findings past the detail limit before the report absorbs them changes
        /// nothing in what it lists, in full or summarized: whatever per-sample flags, prompt groups, limit
        /// and number of units.
        #[test]
        fn summarized_findings_list_what_full_ones_list(
            keys in proptest::collection::vec((0u64..5, 0u8..3, 0u64..4, 0u8..4), 1..120),
            cuts in proptest::collection::vec(0usize..120, 0..4),
            limit in 1u64..5,
        ) {
            let rows: Vec<(u64, &str, u32, u64, Option<&str>)> = keys
                .iter()
                .enumerate()
                .map(|(i, &(h, c, _, _))| (i as u64, ["x", "y", "z"][c as usize], 50 + (h as u32) * 7, h, None))
                .collect();
            let prompts: Vec<u64> = keys.iter().map(|k| k.2).collect();
            // Per-sample flags: none, or one of two codes, or both.
            let sample_flags: Vec<u64> = keys
                .iter()
                .map(|k| match k.3 {
                    1 => Code::Truncated.bit(),
                    2 => Code::Repetition.bit(),
                    3 => Code::Truncated.bit() | Code::Repetition.bit(),
                    _ => 0,
                })
                .collect();
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c % (rows.len() + 1)).collect();
            bounds.extend([0, rows.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let parts: Vec<Records> = bounds
                .windows(2)
                .map(|w| with_prompts(records(&rows[w[0]..w[1]]), &prompts[w[0]..w[1]]))
                .collect();
            let whole = with_prompts(records(&rows), &prompts);
            let partial = flagged_partial(&whole, &sample_flags, limit);
            let mut want = partial.clone();
            let all = local(&partial, &parts, false).unwrap();
            let groups = serde_json::to_string(&crate::report::PromptGroups::of(&all.full)).unwrap();
            want.absorb_corpus(all);
            let mut got = partial.clone();
            let found = local(&partial, &parts, true).unwrap();
            // The report counts prompt groups from the full entries.
            prop_assert_eq!(serde_json::to_string(&crate::report::PromptGroups::of(&found.full)).unwrap(), groups);
            got.absorb_corpus(found);
            prop_assert_eq!(listed(&got), listed(&want));
            prop_assert_eq!(&got.flag_counts, &want.flag_counts);
        }

        /// Records split over any number of scans and routed to any number of buckets find what one process
        /// with one bucket finds.
        #[test]
        fn routing_over_buckets_and_scans_changes_nothing(
            keys in proptest::collection::vec((0u64..6, 0u8..5, 1u32..3000, 0u64..4), 1..80),
            cuts in proptest::collection::vec(0usize..80, 0..5),
            n_buckets in 1usize..7,
            folded in any::<u8>(),
        ) {
            let ids: Vec<String> = keys.iter().map(|k| format!("s{}", k.1)).collect();
            let rows: Vec<(u64, &str, u32, u64, Option<&str>)> = keys
                .iter()
                .enumerate()
                .map(|(i, &(h, _, t, _))| (i as u64, if (h + t as u64).is_multiple_of(3) { "x" } else { "y" }, t, h, Some(ids[i].as_str())))
                .collect();
            let prompts: Vec<u64> = keys.iter().map(|k| k.3).collect();
            let whole = with_prompts(records(&rows), &prompts);
            let partial = partial_of(&whole);
            let fences = Fences::of(&partial);
            let want = resolve(&whole, &find_repeats(route(&whole, 1, &[])), &fences);
            prop_assert_eq!(&local(&partial, std::slice::from_ref(&whole), true).unwrap().full, &want);
            // What each row repeats, by the definitions, pair by pair.
            let repeat_bits = REPEAT_BITS | Code::PromptDuplicate.bit() | Code::PromptCrossCategory.bit();
            for (i, r) in whole.rows.iter().enumerate() {
                let before = &whole.rows[..i];
                let category = |x: &SampleRecord| whole.categories[x.category as usize].clone();
                let dup = before.iter().find(|x| r.completion_len > 0 && (x.completion_hash, x.completion_len) == (r.completion_hash, r.completion_len));
                let id = before.iter().find(|x| x.sample_id == r.sample_id);
                let group: Vec<&SampleRecord> = whole.rows.iter().filter(|x| r.prompt_len > 0 && x.prompt_hash == r.prompt_hash).collect();
                let plain = group.is_empty() || group.iter().all(|x| (x.completion_hash, category(x)) == (group[0].completion_hash, category(group[0])));
                let head = group.first().copied().filter(|h| !plain && h.row != r.row);
                let mut flags = dup.map_or(0, |_| Code::Duplicate.bit()) | id.map_or(0, |_| Code::SampleIdDuplicate.bit());
                if let Some(h) = head {
                    if h.completion_hash != r.completion_hash {
                        flags |= Code::PromptDuplicate.bit();
                    }
                    if category(h) != category(r) {
                        flags |= Code::PromptCrossCategory.bit();
                    }
                }
                let got = want.iter().find(|f| f.row == r.row);
                prop_assert_eq!(got.map_or(0, |f| f.flags & repeat_bits), flags, "row {}", i);
                prop_assert_eq!(
                    got.and_then(|f| f.duplicate_of.as_ref()).map(|f| f.row),
                    dup.or(id).map(|x| x.row),
                    "row {}", i
                );
                // (A later member of a prompt group that nothing flags is not listed.)
                prop_assert_eq!(got.and_then(|f| f.prompt_of.as_ref()).map(|f| f.row), got.and(head).map(|x| x.row), "row {}", i);
            }
            let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c % (rows.len() + 1)).collect();
            bounds.extend([0, rows.len()]);
            bounds.sort_unstable();
            let parts: Vec<Records> = bounds
                .windows(2)
                .map(|w| with_prompts(records(&rows[w[0]..w[1]]), &prompts[w[0]..w[1]]))
                .collect();
            // Some scans' buckets folded (as Ray tasks and spilled units fold theirs), some not.
            let routed: Vec<Vec<Bucket>> = parts
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let mut buckets = route(p, n_buckets, &[]);
                    if folded & (1 << (i % 8)) != 0 {
                        buckets.iter_mut().for_each(Bucket::fold);
                    }
                    buckets
                })
                .collect();
            let mut repeats = Repeated::default();
            for b in 0..n_buckets {
                // Buckets arrive in reverse scan order: order must not matter.
                repeats.merge(find_repeats(routed.iter().rev().map(|r| r[b].clone())));
            }
            // The fences as a resolve task receives them.
            let fences = Resolution::from_bytes(&Resolution::of(&partial, true).to_bytes()).unwrap().fences;
            let mut got = Vec::new();
            for p in parts.iter().rev() {
                got = crate::flagged::merge_by_row(got, resolve(p, &repeats, &fences));
            }
            prop_assert_eq!(got, want);
        }
    }
}
