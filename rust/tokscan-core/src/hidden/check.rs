//! Checks a hidden-state dump against the corpus it was made from (`--hidden-states DIR`), cheapest first:
//!
//! 1. **Inventory** (every file, in parallel): the header of each file ([`super::read_header`]: no state
//!    byte read) and its token ids, hashed.
//! 2. **Pairing**: each file with its corpus sample — by the index in its name, by its conversation id /
//!    name as a sample id, or by its ids (content) — the rule that fits most files is the dump's, and a file
//!    it does not fit falls back to its content. Corpus samples with no file, files with no sample and two
//!    files for one sample come out of it.
//! 3. **The samples against their files** (the corpus's units in parallel, each sample's file memory-mapped):
//!    shapes and widths against the dump's, lengths, ids and loss mask against the sample's, then every state
//!    row (NaN / Inf, all-zero rows, the root mean square of the last state).
//! 4. **The norm convention**, from the rows' RMS: with the target's final norm weight `w`, a state stored
//!    after the norm has `rms(h / w) = 1`; without it, a file whose scale departs from the dump's is named.
//! 5. **Next-token agreement** (`--target-model`): on a bounded sample of completion positions,
//!    `argmax(lm_head(norm(h_t)))` against token `t + 1`, the head read once for all positions.
//!
//! Findings on a sample are flagged samples with [`Evidence`]; findings with no sample (a file no sample
//! owns, the dump's convention against its trainer's) are corpus-wide counts; the rest is the report's
//! `hidden_states` section ([`HiddenReport`]).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::dump::{self, integers, row_f32, DumpFile, Layout, Norm, Roles, States};
use super::target::Target;
use super::{read_header, DType, DumpHeader};
use crate::anomaly::Code;
use crate::corpus::{Corpus, SampleData};
use crate::error::{Error, Result};
use crate::flagged::{Agreement, Evidence, FlaggedSample, Rule};
use crate::profile::Profile;
use crate::progress::Progress;

/// What `--hidden-states` and its options ask for.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub dir: PathBuf,
    /// The layout, when detection from names and keys is not wanted (`--hidden-layout`).
    pub layout: Option<Layout>,
    /// The target model's checkpoint directory (`--target-model`): agreement and the norm convention.
    pub target: Option<PathBuf>,
    /// Completion positions checked for agreement, over the whole dump (0: every completion position).
    pub agreement_positions: u64,
    /// A sample whose sampled positions agree less than this is `hidden_disagree`.
    pub agreement_min: f64,
}

/// Default of [`Options::agreement_positions`]: on CPU, a 163,840 × 7,168 bf16 head takes ~0.1 s of one
/// core per position (benches/README.md).
pub const AGREEMENT_POSITIONS: u64 = 1024;
/// Bytes of sampled states held for agreement (`f32`, `D` each): 1 GiB, 37,449 positions of a 7,168-wide
/// model.
const PROBE_MEMORY: u64 = 1 << 30;
/// Positions per sample checked for agreement, evenly spread over its completion.
pub const POSITIONS_PER_SAMPLE: usize = 16;
/// Default of [`Options::agreement_min`]: a target's own completions agree on most positions (all of them
/// when greedy), another sample's states on almost none.
pub const AGREEMENT_MIN: f64 = 0.25;
/// A file whose median row RMS is this many times the dump's (or its inverse) departs from its scale.
const SCALE_DEPARTS: f32 = 4.0;
/// Listed in full in the report (files no sample owns, skipped files); the rest are counted.
const LISTED: usize = 20;
/// First disagreeing positions kept per flagged sample.
const DISAGREEMENTS_KEPT: usize = 8;

impl Options {
    pub fn new(dir: PathBuf) -> Options {
        Options {
            dir,
            layout: None,
            target: None,
            agreement_positions: AGREEMENT_POSITIONS,
            agreement_min: AGREEMENT_MIN,
        }
    }
}

/// The `hidden_states` section of the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HiddenReport {
    pub dir: String,
    pub layout: Option<Layout>,
    /// `names and keys`, or `--hidden-layout`.
    pub layout_from: String,
    pub files: u64,
    /// Bytes on disk of the sample files.
    pub bytes: u64,
    /// Files per container (`torch_zip`, `torch_zip_gz`, `safetensors`).
    pub containers: BTreeMap<String, u64>,
    /// Files under the directory that are not sample files, with why (the first 20).
    pub skipped: Vec<(String, String)>,
    pub skipped_count: u64,
    pub pairing: PairingSummary,
    /// The dump's element type of the last state, its width `D`, the aux width (`k·D`), the layer count
    /// (a `[N, layers, D]` or list dump).
    pub dtype: Option<DType>,
    pub hidden_size: Option<u64>,
    pub aux_width: Option<u64>,
    pub layers: Option<u64>,
    /// Positions stored over the sample files, and bytes per stored position.
    pub positions: u64,
    pub bytes_per_token: f64,
    /// The length the capture was cut at, when samples longer than it were cut there (`hidden_truncated`).
    pub max_length: Option<u64>,
    pub norm: NormSummary,
    pub agreement: Option<AgreementSummary>,
    /// Bytes of state rows read (mapped) by the value checks.
    pub bytes_checked: u64,
}

/// How the dump's files were paired with samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PairingSummary {
    /// The dump's rule.
    pub rule: Option<Rule>,
    /// Files paired by each rule (a file the dump's rule does not fit may pair by content).
    pub by_rule: BTreeMap<String, u64>,
    pub note: Option<String>,
    /// Files paired with no sample (the first 20), and how many.
    pub unpaired: Vec<String>,
    pub unpaired_count: u64,
    /// Corpus samples with no file.
    pub samples_without_file: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NormSummary {
    /// Where the dump's last state was taken (`None`: not decided, no `--target-model`).
    pub convention: Option<Norm>,
    pub decided_by: String,
    /// What the layout's trainer expects.
    pub trainer_expects: Option<Norm>,
    /// Quantiles (10, 50, 90 %) of the files' median row RMS of the last state.
    pub row_rms: [f32; 3],
    /// With the target: quantiles of the files' median `rms(h / w)` (1 after the norm).
    pub unweighted_rms: Option<[f32; 3]>,
    pub files_departing: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgreementSummary {
    pub target: String,
    /// The head's tensors read.
    pub read: Vec<String>,
    /// Whether the norm was applied to the stored state before the head (the dump's convention).
    pub norm_applied: bool,
    pub samples: u64,
    pub positions: u64,
    pub agreed: u64,
    pub min: f64,
    pub categories: BTreeMap<String, CategoryAgreement>,
}

/// One category's agreement: sampled positions, and quantiles of its samples' agreement rates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryAgreement {
    pub samples: u64,
    pub positions: u64,
    pub agreed: u64,
    pub rate: f64,
    /// 10 %, 50 % and 90 % quantiles of the per-sample rates.
    pub quantiles: [f64; 3],
}

/// What the checks found: flagged samples (sorted by row) with the evidence about each one's file, counts of
/// findings no sample carries, and the report section.
#[derive(Debug, Default)]
pub struct Outcome {
    pub flagged: Vec<(FlaggedSample, Evidence)>,
    pub corpus_counts: Vec<(Code, u64)>,
    pub report: HiddenReport,
}

/// One file after the inventory.
struct Head {
    file: DumpFile,
    header: std::result::Result<DumpHeader, String>,
    /// xxh3 of its ids (trailing batch padding left out), their count, its conversation id.
    key: Option<(u64, usize)>,
    conversation: Option<String>,
}

fn unpadded(ids: &[i64], mask: Option<&[i64]>) -> usize {
    // SpecForge pads a batch's rows: ids 0 with mask 0 past the sample.
    let mut n = ids.len();
    while n > 0 && ids[n - 1] == 0 && mask.is_some_and(|m| m.get(n - 1) == Some(&0)) {
        n -= 1;
    }
    n
}

fn hash(ids: &[i64]) -> u64 {
    crate::token::hash_ids(ids)
}

/// An error's message without the file's path in front (the report names the file beside it).
fn message(e: Error, path: &std::path::Path) -> String {
    let text = e.to_string();
    let prefix = format!("{}: ", path.display());
    text.strip_prefix(&prefix)
        .map_or(text.clone(), str::to_string)
}

fn inventory(layout: Option<Layout>, file: DumpFile, gz_ids: bool) -> Head {
    let header = read_header(&file.path).map_err(|e| message(e, &file.path));
    let (mut key, mut conversation) = (None, None);
    if let (Ok(h), Some(layout)) = (&header, layout) {
        conversation = h.values.get("conversation_id").cloned();
        let roles = dump::roles(layout, h);
        if let Some((ids_t, _)) = &roles.ids {
            if h.container != super::Container::TorchZipGz || gz_ids {
                if let Ok(bytes) = dump::open_bytes(h) {
                    if let Ok(ids) = integers(&bytes, ids_t) {
                        let mask = roles
                            .mask
                            .as_ref()
                            .and_then(|(t, _)| integers(&bytes, t).ok());
                        let n = unpadded(&ids, mask.as_deref());
                        key = Some((hash(&ids[..n]), n));
                    }
                }
            }
        }
    }
    Head {
        file,
        header,
        key,
        conversation,
    }
}

/// A corpus sample as pairing needs it.
struct RowKey {
    /// Its category, as an index into the names [`row_keys`] returns.
    category: u32,
    full: u64,
    len: usize,
    /// xxh3 of its first `max_length` ids, when longer.
    prefix: Option<u64>,
}

fn row_keys(
    corpus: &Corpus,
    max_length: usize,
    progress: &Progress,
) -> Result<(Vec<RowKey>, Vec<String>)> {
    let ranges = unit_ranges(corpus);
    progress
        .units_total
        .fetch_add(ranges.len() as u64, Ordering::Relaxed);
    let parts: Vec<Result<Vec<(String, RowKey)>>> = ranges
        .par_iter()
        .map(|&(start, end)| {
            if progress.cancelled() {
                return Err(Error::Interrupted);
            }
            let keys = corpus
                .samples(start, end)?
                .into_iter()
                .map(|s| {
                    let key = RowKey {
                        category: 0,
                        full: hash(&s.ids),
                        len: s.ids.len(),
                        prefix: (max_length > 0 && s.ids.len() > max_length)
                            .then(|| hash(&s.ids[..max_length])),
                    };
                    (s.category, key)
                })
                .collect();
            progress.units_done.fetch_add(1, Ordering::Relaxed);
            Ok(keys)
        })
        .collect();
    let mut out = Vec::with_capacity(corpus.len() as usize);
    let mut names: Vec<String> = Vec::new();
    let mut index: HashMap<String, u32> = HashMap::new();
    for p in parts {
        for (category, mut key) in p? {
            key.category = *index.entry(category).or_insert_with_key(|c| {
                names.push(c.clone());
                names.len() as u32 - 1
            });
            out.push(key);
        }
    }
    Ok((out, names))
}

/// The paired samples whose positions are checked for agreement: all of them when `budget` (positions)
/// covers `per_sample` of each, else an even spread within each category (so that no category is left out,
/// and a corpus whose rows alternate categories is not sampled in one).
fn probed_rows(
    files_of: &BTreeMap<u64, Vec<usize>>,
    keys: &[RowKey],
    budget: u64,
    per_sample: u64,
) -> std::collections::HashSet<u64> {
    let want = files_of.len() as u64 * per_sample;
    if want <= budget {
        return files_of.keys().copied().collect();
    }
    // Grouped by category, then an even spread over the whole list: each category in proportion to its
    // samples, and never more than the budget.
    let mut rows: Vec<(u32, u64)> = files_of
        .keys()
        .map(|&row| (keys[row as usize].category, row))
        .collect();
    rows.sort_unstable();
    let m = (budget / per_sample.max(1)).clamp(1, rows.len() as u64) as usize;
    (0..m).map(|i| rows[i * rows.len() / m].1).collect()
}

fn unit_ranges(corpus: &Corpus) -> Vec<(u64, u64)> {
    let spans: Vec<&[crate::source::UnitSpan]> = corpus.sources.iter().map(|s| s.units()).collect();
    corpus
        .units()
        .into_iter()
        .map(|u| (u.base_row, u.base_row + spans[u.source][u.index].rows))
        .collect()
}

/// The pairing of files with rows.
struct Paired {
    rule: Option<Rule>,
    /// Per file: its row and the rule that paired it.
    of_file: Vec<Option<(u64, Rule)>>,
    /// Per file: the row whose ids its ids are (when any).
    content_row: Vec<Option<u64>>,
    note: Option<String>,
}

fn pair(
    layout: Layout,
    heads: &[Head],
    keys: &[RowKey],
    ids: &HashMap<String, u64>,
    max_length: usize,
) -> Paired {
    let mut by_full: HashMap<(u64, usize), Vec<u64>> = HashMap::new();
    let mut by_prefix: HashMap<u64, Vec<u64>> = HashMap::new();
    for (row, k) in keys.iter().enumerate() {
        by_full.entry((k.full, k.len)).or_default().push(row as u64);
        if let Some(p) = k.prefix {
            by_prefix.entry(p).or_default().push(row as u64);
        }
    }
    let content_rows = |h: &Head| -> Option<&Vec<u64>> {
        let (key, n) = h.key?;
        by_full
            .get(&(key, n))
            .or_else(|| (n == max_length).then(|| by_prefix.get(&key)).flatten())
    };
    let content_row: Vec<Option<u64>> = heads
        .iter()
        .map(|h| content_rows(h).and_then(|r| r.first().copied()))
        .collect();
    let fits = |h: &Head, row: u64| content_rows(h).is_some_and(|r| r.contains(&row));
    let id_row = |h: &Head| -> Option<u64> {
        h.conversation
            .as_ref()
            .and_then(|c| ids.get(c))
            .or_else(|| ids.get(&h.file.stem))
            .copied()
    };
    let readable = heads.iter().filter(|h| h.key.is_some()).count().max(1);
    let by_index = heads
        .iter()
        .filter(|h| h.file.index.is_some_and(|i| fits(h, i)))
        .count();
    let by_id = heads
        .iter()
        .filter(|h| id_row(h).is_some_and(|r| fits(h, r)))
        .count();
    let mut note = None;
    let rule = if !ids.is_empty() && by_id * 2 >= readable && by_id >= by_index {
        Rule::SampleId
    } else if layout.index_is_row() && by_index * 2 >= readable {
        Rule::Index
    } else {
        if layout.index_is_row() && heads.iter().any(|h| h.file.index.is_some()) {
            note = Some(format!(
                "the numbers in the file names are not corpus rows ({by_index} of {readable} files hold their row's ids): \
                 paired by content (SpecForge numbers files per rank when it runs data-parallel)"
            ));
        }
        Rule::Content
    };
    let n_rows = keys.len() as u64;
    let mut taken: HashMap<u64, usize> = HashMap::new();
    let mut of_file = Vec::with_capacity(heads.len());
    for h in heads {
        let direct = match rule {
            Rule::Index => h.file.index.filter(|&i| i < n_rows),
            Rule::SampleId => id_row(h),
            Rule::Content => None,
        };
        let paired = match direct {
            Some(row) => Some((row, rule)),
            None => content_rows(h).map(|rows| {
                // Copies of one sample take one file each, in order; a file past them is a second file.
                let row = rows
                    .iter()
                    .copied()
                    .find(|r| !taken.contains_key(r))
                    .unwrap_or(rows[0]);
                (row, Rule::Content)
            }),
        };
        if let Some((row, _)) = paired {
            *taken.entry(row).or_default() += 1;
        }
        of_file.push(paired);
    }
    Paired {
        rule: Some(rule),
        of_file,
        content_row,
        note,
    }
}

/// What the dump holds in most files: the reference its files are held to.
#[derive(Debug, Clone, Default)]
struct Shape {
    dtype: Option<DType>,
    width: Option<u64>,
    aux: Option<u64>,
    layers: Option<u64>,
}

fn majority<T: Clone + Eq + std::hash::Hash>(it: impl Iterator<Item = T>) -> Option<T> {
    let mut counts: HashMap<T, usize> = HashMap::new();
    let mut order = Vec::new();
    for v in it {
        let c = counts.entry(v.clone()).or_default();
        if *c == 0 {
            order.push(v);
        }
        *c += 1;
    }
    // `max_by_key` keeps the last of equal maxima: over the reversed order, the first seen.
    order.into_iter().rev().max_by_key(|v| counts[v])
}

/// One sample's file, checked.
#[derive(Default)]
struct Checked {
    findings: BTreeMap<Code, String>,
    /// Median row RMS of the last state, and of `h / w` with the target.
    rms: Option<f32>,
    unweighted: Option<f32>,
    positions: u64,
    bytes_read: u64,
    /// Sampled positions: `(t, token t + 1, the state at t)`.
    probes: Vec<(u32, i64, Vec<f32>)>,
    truncated_at: Option<u64>,
}

fn median(v: &mut [f32]) -> Option<f32> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

fn first_difference(a: &[i64], b: &[i64]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// The positions `t` whose next token is a completion token, `k` of them evenly spread.
fn probe_positions(mask: Option<&[i64]>, prompt_len: usize, n: usize, k: usize) -> Vec<usize> {
    let all: Vec<usize> = (0..n.saturating_sub(1))
        .filter(|&t| match mask {
            Some(m) => m.get(t + 1).is_some_and(|&v| v != 0),
            None => t + 1 >= prompt_len,
        })
        .collect();
    if k == 0 || all.len() <= k {
        return all;
    }
    (0..k).map(|i| all[i * all.len() / k]).collect()
}

struct Ctx<'a> {
    layout: Layout,
    shape: &'a Shape,
    target: Option<&'a Target>,
    max_length: Option<u64>,
}

/// Checks `s`'s file; `probes` completion positions are kept for agreement (`Some(0)`: every one).
fn check_file(
    ctx: &Ctx<'_>,
    h: &DumpHeader,
    s: &SampleData,
    prompt_len: usize,
    probes: Option<usize>,
) -> Checked {
    let mut c = Checked::default();
    let roles: Roles = dump::roles(ctx.layout, h);
    if !roles.problems.is_empty() {
        c.findings.insert(
            Code::HiddenShape,
            format!(
                "not as {} writes it: {}",
                ctx.layout.as_str(),
                roles.problems.join("; ")
            ),
        );
    }
    let mut shape = Vec::new();
    if let (Some(l), Some(d)) = (&roles.last, ctx.shape.width) {
        if l.width != d {
            shape.push(format!(
                "a state width of {} where the dump's is {d}",
                l.width
            ));
        }
        if ctx.shape.dtype.is_some_and(|t| t != l.tensor.dtype) {
            shape.push(format!(
                "{:?} states where the dump's are {:?}",
                l.tensor.dtype,
                ctx.shape.dtype.expect("some")
            ));
        }
    }
    let aux_width: u64 = roles.aux.iter().map(|a| a.width).sum();
    if ctx.shape.aux.is_some_and(|a| a != aux_width) {
        shape.push(format!(
            "an aux width of {aux_width} where the dump's is {}",
            ctx.shape.aux.expect("some")
        ));
    }
    if let Some(want) = ctx.shape.layers.filter(|&w| roles.layers != Some(w)) {
        shape.push(format!(
            "{} layers where the dump's files have {want}",
            roles.layers.unwrap_or(0)
        ));
    }
    let lens: Vec<(String, u64)> = roles
        .ids
        .iter()
        .map(|(t, n)| (t.name.clone(), *n))
        .chain(roles.mask.iter().map(|(t, n)| (t.name.clone(), *n)))
        .chain(roles.last.iter().map(|s| (s.tensor.name.clone(), s.n)))
        .chain(roles.aux.iter().map(|s| (s.tensor.name.clone(), s.n)))
        .collect();
    if lens.windows(2).any(|w| w[0].1 != w[1].1) {
        let mut list: Vec<String> = lens.iter().map(|(k, n)| format!("{k} {n}")).collect();
        list.dedup();
        shape.push(format!(
            "tensors of different lengths ({})",
            list.join(", ")
        ));
    }
    if !shape.is_empty() {
        let e = c.findings.entry(Code::HiddenShape).or_default();
        if !e.is_empty() {
            e.push_str("; ");
        }
        e.push_str(&shape.join("; "));
    }
    let bytes = match dump::open_bytes(h) {
        Ok(b) => b,
        Err(e) => {
            c.findings
                .insert(Code::HiddenUnreadable, message(e, &h.path));
            return c;
        }
    };
    let read_ints = |t: &super::TensorHeader| integers(&bytes, t);
    let ids = match roles.ids.as_ref().map(|(t, _)| read_ints(t)).transpose() {
        Ok(v) => v,
        Err(e) => {
            c.findings.insert(Code::HiddenUnreadable, e);
            return c;
        }
    };
    let mask = roles.mask.as_ref().and_then(|(t, _)| read_ints(t).ok());
    let n_file = roles
        .last
        .as_ref()
        .map_or_else(|| ids.as_ref().map_or(0, |v| v.len() as u64), |l| l.n);
    c.positions = n_file;
    let len = s.ids.len() as u64;
    // Batch padding is what lies past the sample: a sample that itself ends with id 0 keeps it.
    let n_ids = ids.as_ref().map_or(n_file as usize, |v| {
        unpadded(v, mask.as_deref()).max(v.len().min(len as usize))
    });
    // Positions that are the sample's (padding rows past it are not defects).
    let n = (n_ids as u64).min(n_file).min(len) as usize;
    if (n_ids as u64) < len {
        if ctx.max_length == Some(n_ids as u64) {
            c.truncated_at = Some(n_ids as u64);
            c.findings.insert(
                Code::HiddenTruncated,
                format!(
                    "{n_ids} of the sample's {len} positions: cut at the dump's max length {n_ids}"
                ),
            );
        } else {
            c.findings.insert(
                Code::HiddenLength,
                format!("{n_ids} positions for a sample of {len} tokens: a short capture"),
            );
        }
    } else if (n_ids as u64) > len {
        c.findings.insert(
            Code::HiddenLength,
            format!("{n_ids} positions for a sample of {len} tokens"),
        );
    }
    if let Some(ids) = &ids {
        if let Some(p) = first_difference(&ids[..n], &s.ids[..n]) {
            c.findings.insert(
                Code::HiddenIdsMismatch,
                format!(
                    "its ids differ from the sample's at position {p} (file {}, sample {})",
                    ids[p], s.ids[p]
                ),
            );
        }
    }
    if let (Some(m), Some(sm)) = (&mask, &s.mask) {
        let m: Vec<u8> = m[..n.min(m.len())]
            .iter()
            .map(|&v| u8::from(v != 0))
            .collect();
        let sm = &sm[..n.min(sm.len())];
        if let Some(p) = m.iter().zip(sm).position(|(a, b)| a != b) {
            let shift = if m.len() > 1 && m[1..] == sm[..sm.len() - 1] {
                " (shifted one position later than the corpus's)".to_string()
            } else if m.len() > 1 && m[..m.len() - 1] == sm[1..] {
                " (shifted one position earlier than the corpus's)".to_string()
            } else {
                String::new()
            };
            c.findings.insert(
                Code::HiddenMaskMismatch,
                format!("its loss mask differs from the corpus's at position {p}{shift}"),
            );
        }
    }
    // Every state row the sample owns: non-finite values, all-zero rows, the last state's RMS.
    let mut views: Vec<&States> = roles.last.iter().collect();
    let has_last = !views.is_empty();
    views.extend(roles.aux.iter());
    let (mut nonfinite, mut zero) = (None::<(u64, u64, String)>, None::<(u64, u64, String)>);
    let mut rms = Vec::new();
    let mut unweighted = Vec::new();
    let want = match probes {
        Some(k) => probe_positions(mask.as_deref(), prompt_len, n, k),
        None => Vec::new(),
    };
    let mut want = want.into_iter().peekable();
    let sample_every = (n / 64).max(1);
    for (k, v) in views.iter().enumerate() {
        let rows = (n as u64).min(v.n);
        // A row is allocated only when the rows read are bytes of the file (a header may claim a width of
        // any size for a tensor of no row).
        let needed = rows
            .checked_mul(v.width)
            .and_then(|e| e.checked_mul(v.tensor.dtype.size()));
        if rows == 0 || needed.is_none_or(|b| b > v.tensor.bytes) {
            continue;
        }
        let mut row = vec![0f32; v.width as usize];
        for i in 0..rows {
            if let Err(e) = row_f32(&bytes, v, i, &mut row) {
                c.findings.insert(Code::HiddenUnreadable, e);
                return c;
            }
            c.bytes_read += v.width * v.tensor.dtype.size();
            let bad = row.iter().filter(|x| !x.is_finite()).count() as u64;
            if bad > 0 {
                let e = nonfinite.get_or_insert((0, i, v.tensor.name.clone()));
                e.0 += bad;
            }
            if row.iter().all(|&x| x == 0.0) {
                let e = zero.get_or_insert((0, i, v.tensor.name.clone()));
                e.0 += 1;
            }
            if k == 0 && has_last {
                let ms = row
                    .iter()
                    .map(|x| f64::from(*x) * f64::from(*x))
                    .sum::<f64>()
                    / row.len().max(1) as f64;
                if ms.is_finite() {
                    rms.push(ms.sqrt() as f32);
                }
                if let Some(t) = ctx.target.filter(|t| t.hidden == row.len()) {
                    if (i as usize).is_multiple_of(sample_every) {
                        let u = t.unweighted_rms(&row);
                        if u.is_finite() {
                            unweighted.push(u);
                        }
                    }
                }
                if want.peek() == Some(&(i as usize)) {
                    want.next();
                    let next = ids
                        .as_ref()
                        .map_or(s.ids[i as usize + 1], |v| v[i as usize + 1]);
                    c.probes.push((i as u32, next, row.clone()));
                }
            }
        }
    }
    if let Some((count, at, name)) = nonfinite {
        c.findings.insert(
            Code::HiddenNonfinite,
            format!("{count} NaN / Inf values, the first at position {at} of `{name}`"),
        );
    }
    if let Some((count, at, name)) = zero {
        c.findings.insert(
            Code::HiddenZeroRows,
            format!(
                "{count} all-zero rows inside the sample, the first at position {at} of `{name}`"
            ),
        );
    }
    c.rms = median(&mut rms);
    c.unweighted = median(&mut unweighted);
    c
}

/// A dump inventoried and paired: what both the whole check and one sample's ([`inspect`]) start from.
struct Prepared {
    report: HiddenReport,
    layout: Layout,
    heads: Vec<Head>,
    shape: Shape,
    target: Option<Target>,
    max_length: Option<u64>,
    paired: Paired,
    files_of: BTreeMap<u64, Vec<usize>>,
    unpaired: Vec<usize>,
    keys: Vec<RowKey>,
}

/// Inventories the dump at `opts.dir` and pairs its files with `corpus`'s samples (stages 1 and 2).
fn prepare(corpus: &Corpus, opts: &Options, progress: &Progress) -> Result<Prepared> {
    let listing = dump::discover(&opts.dir)?;
    let target = opts.target.as_deref().map(Target::open).transpose()?;
    let kind = dump::main_kind(&listing);
    let first_header = listing
        .files
        .iter()
        .filter(|f| Some(f.1) == kind)
        .find_map(|(f, _)| read_header(&f.path).ok());
    let (layout, layout_from) = match opts.layout {
        Some(l) => (Some(l), "--hidden-layout".to_string()),
        None => (
            dump::detect(&listing, first_header.as_ref()),
            "names and keys".to_string(),
        ),
    };
    let mut report = HiddenReport {
        dir: opts.dir.display().to_string(),
        layout,
        layout_from,
        ..Default::default()
    };
    let mut skipped = listing.skipped;
    let mut files = Vec::new();
    for f in listing.files {
        match layout {
            Some(l) if !dump::belongs(l, &f) => {
                skipped.push((f.0.rel, format!("not a {} file", l.as_str())))
            }
            _ => files.push(f.0),
        }
    }
    report.skipped_count = skipped.len() as u64;
    report.skipped = skipped.into_iter().take(LISTED).collect();
    report.files = files.len() as u64;
    let Some(layout) = layout else {
        return Err(Error::invalid(
            &opts.dir,
            "--hidden-states: no hidden-state file in the directory (.ckpt, .ckpt.gz, .pt, .safetensors)",
        ));
    };
    // 1. Inventory.
    progress
        .units_total
        .fetch_add(files.len() as u64, Ordering::Relaxed);
    let heads: Vec<Head> = files
        .into_par_iter()
        .map(|f| {
            let h = inventory(Some(layout), f, true);
            progress.units_done.fetch_add(1, Ordering::Relaxed);
            h
        })
        .collect();
    if progress.cancelled() {
        return Err(Error::Interrupted);
    }
    for h in &heads {
        if let Ok(hd) = &h.header {
            report.bytes += hd.size;
            let c = serde_json::to_value(hd.container)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            *report.containers.entry(c).or_default() += 1;
        }
    }
    let roles: Vec<Option<Roles>> = heads
        .iter()
        .map(|h| h.header.as_ref().ok().map(|hd| dump::roles(layout, hd)))
        .collect();
    let shape = Shape {
        dtype: majority(
            roles
                .iter()
                .flatten()
                .filter_map(|r| r.last.as_ref().map(|l| l.tensor.dtype)),
        ),
        width: majority(
            roles
                .iter()
                .flatten()
                .filter_map(|r| r.last.as_ref().map(|l| l.width)),
        ),
        aux: majority(
            roles
                .iter()
                .flatten()
                .map(|r| r.aux.iter().map(|a| a.width).sum::<u64>()),
        ),
        layers: majority(roles.iter().flatten().map(|r| r.layers)).flatten(),
    };
    report.dtype = shape.dtype;
    report.hidden_size = shape.width;
    report.aux_width = shape.aux.filter(|&a| a > 0);
    report.layers = shape.layers;
    if let (Some(t), Some(d)) = (&target, shape.width) {
        if t.hidden as u64 != d {
            return Err(Error::invalid(
                &t.dir,
                format!("--target-model: its hidden_size is {} but the dump's states are {d} wide: not the model the dump came from", t.hidden),
            ));
        }
    }
    // The capture's max length: the longest file, when some samples are longer.
    let longest = heads
        .iter()
        .filter_map(|h| h.key.map(|k| k.1))
        .max()
        .unwrap_or(0);
    // 2. Pairing.
    let (keys, _categories) = row_keys(corpus, longest, progress)?;
    let truncating = keys.iter().any(|k| k.len > longest) && longest > 0;
    let mut ids: HashMap<String, u64> = HashMap::new();
    for (row, id) in corpus.sample_ids()?.into_iter().enumerate() {
        if let Some(id) = id {
            ids.entry(id.to_string()).or_insert(row as u64);
        }
    }
    let paired = pair(
        layout,
        &heads,
        &keys,
        &ids,
        if truncating { longest } else { usize::MAX },
    );
    report.pairing.rule = paired.rule;
    report.pairing.note = paired.note.clone();
    let mut files_of: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let mut unpaired = Vec::new();
    for (i, p) in paired.of_file.iter().enumerate() {
        match p {
            Some((row, rule)) => {
                files_of.entry(*row).or_default().push(i);
                *report
                    .pairing
                    .by_rule
                    .entry(rule.as_str().to_string())
                    .or_default() += 1;
            }
            None => unpaired.push(i),
        }
    }
    report.pairing.unpaired_count = unpaired.len() as u64;
    report.pairing.unpaired = unpaired
        .iter()
        .take(LISTED)
        .map(|&i| match &heads[i].header {
            Ok(_) => heads[i].file.rel.clone(),
            Err(e) => format!("{} ({e})", heads[i].file.rel),
        })
        .collect();
    report.pairing.samples_without_file = corpus.len() - files_of.len() as u64;
    // The capture's max length is the longest file's when at least two samples longer than it were cut there:
    // one file shorter than its sample is a short capture like any other.
    let cut_there = paired
        .of_file
        .iter()
        .zip(&heads)
        .filter(|(p, h)| {
            h.key.is_some_and(|k| k.1 == longest)
                && p.is_some_and(|(row, _)| keys[row as usize].len > longest)
        })
        .count();
    let max_length = (truncating && cut_there >= 2).then_some(longest as u64);
    Ok(Prepared {
        report,
        layout,
        heads,
        shape,
        target,
        max_length,
        paired,
        files_of,
        unpaired,
        keys,
    })
}

/// Where a file's last state was taken, from the median `rms(h / w)` of its rows (1 after an RMSNorm of weight
/// `w`); `None` for no measure (NaN).
fn norm_of(unweighted: f32) -> Option<Norm> {
    if unweighted.is_nan() {
        None
    } else if (0.8..=1.25).contains(&unweighted) {
        Some(Norm::After)
    } else {
        Some(Norm::Before)
    }
}

/// The next token the head predicts at each sampled position `(t, token t + 1, state)`, the norm applied
/// first when the states were stored before it (`apply`): `(t, token t + 1, predicted)`, the head read once.
fn predict(t: &Target, probes: Vec<(u32, i64, Vec<f32>)>, apply: bool) -> Vec<(u32, i64, u32)> {
    let (mut at, mut xs) = (
        Vec::with_capacity(probes.len()),
        Vec::with_capacity(probes.len()),
    );
    for (pos, next, mut x) in probes {
        if apply {
            t.apply_norm(&mut x);
        }
        at.push((pos, next));
        xs.push(x);
    }
    at.into_iter()
        .zip(t.argmax(&xs))
        .map(|((pos, next), p)| (pos, next, p))
        .collect()
}

/// Counts one predicted position into `a`, keeping the first `keep` disagreements.
fn tally(a: &mut Agreement, (pos, next, p): (u32, i64, u32), keep: usize) {
    a.positions += 1;
    if i64::from(p) == next {
        a.agreed += 1;
    } else if a.disagreements.len() < keep {
        a.disagreements.push([i64::from(pos), next, i64::from(p)]);
    }
}

/// A sample's entry as the report lists it (its codes and evidence are added by the caller).
fn flagged_sample(s: &SampleData, facts: &crate::check::SampleFacts) -> FlaggedSample {
    FlaggedSample {
        row: s.row,
        source: s.source as u32,
        category: s.category.clone(),
        lengths: facts.lengths,
        flags: 0,
        content: crate::token::content_key(&s.ids),
        sample_id: s.sample_id.clone(),
        ..FlaggedSample::default()
    }
}

/// What pairing says of row `row`: its file, the rule, its other files (`hidden_duplicate`), or none
/// (`hidden_missing`).
fn evidence_of(
    files_of: &BTreeMap<u64, Vec<usize>>,
    heads: &[Head],
    paired: &Paired,
    row: u64,
) -> Evidence {
    let mut ev = Evidence::default();
    let Some(list) = files_of.get(&row) else {
        ev.findings.insert(
            Code::HiddenMissing.as_str().to_string(),
            "no file of the dump pairs with this sample".into(),
        );
        return ev;
    };
    let first = list[0];
    ev.file = Some(heads[first].file.rel.clone());
    ev.paired_by = paired.of_file[first].map(|p| p.1);
    if list.len() > 1 {
        ev.other_files = list[1..]
            .iter()
            .map(|&i| heads[i].file.rel.clone())
            .collect();
        ev.findings.insert(
            Code::HiddenDuplicate.as_str().to_string(),
            format!("{} files for this sample", list.len()),
        );
    }
    ev
}

/// The samples at `rows`, read from the units that hold them (in parallel), in row order.
fn samples_at(corpus: &Corpus, rows: &std::collections::BTreeSet<u64>) -> Result<Vec<SampleData>> {
    let parts: Vec<Result<Vec<SampleData>>> = unit_ranges(corpus)
        .into_iter()
        .filter_map(|(start, end)| {
            let mut inside = rows.range(start..end);
            let first = *inside.next()?;
            let last = inside.next_back().copied().unwrap_or(first);
            Some((first, last + 1))
        })
        .collect::<Vec<_>>()
        .par_iter()
        .map(|&(start, end)| {
            Ok(corpus
                .samples(start, end)?
                .into_iter()
                .filter(|s| rows.contains(&s.row))
                .collect())
        })
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

/// Runs the checks of the dump at `opts.dir` against `corpus`.
pub fn run(
    corpus: &Corpus,
    profile: &Profile,
    opts: &Options,
    progress: &Progress,
) -> Result<Outcome> {
    let Prepared {
        mut report,
        layout,
        heads,
        shape,
        target,
        max_length,
        paired,
        files_of,
        unpaired,
        keys,
    } = prepare(corpus, opts, progress)?;
    // Which samples are probed for agreement: an even spread within each category, 16 positions each.
    // The states of the sampled positions are held until the head is read for all of them: at most
    // PROBE_MEMORY bytes of them, whatever --agreement-positions asks (0: as many as that allows, spread over
    // every sample).
    let cap = (PROBE_MEMORY / shape.width.unwrap_or(1).max(1).saturating_mul(4))
        .max(POSITIONS_PER_SAMPLE as u64);
    let (budget, per_sample) = match opts.agreement_positions {
        0 => (
            cap,
            (cap / (files_of.len() as u64).max(1)).max(POSITIONS_PER_SAMPLE as u64),
        ),
        n => (n.min(cap), POSITIONS_PER_SAMPLE as u64),
    };
    let probed = match &target {
        Some(_) => probed_rows(&files_of, &keys, budget, per_sample),
        None => Default::default(),
    };
    let per_sample = per_sample as usize;
    drop(keys);
    // 3. Every sample against its file.
    let ctx = Ctx {
        layout,
        shape: &shape,
        target: target.as_ref(),
        max_length,
    };
    // Kept in full: the samples with a finding or with positions to check for agreement. Every other checked
    // sample leaves its row RMS (16 bytes), what the dump's norm convention is decided from.
    struct Row {
        sample: FlaggedSample,
        evidence: Evidence,
        probes: Vec<(u32, i64, Vec<f32>)>,
    }
    #[derive(Default)]
    struct Part {
        rows: Vec<Row>,
        norms: Vec<(u64, f32, f32)>,
        positions: u64,
        bytes_read: u64,
        truncated: bool,
    }
    let ranges = unit_ranges(corpus);
    progress
        .units_total
        .fetch_add(ranges.len() as u64, Ordering::Relaxed);
    let parts: Vec<Result<Part>> = ranges
        .par_iter()
        .map(|&(start, end)| {
            let mut out = Part::default();
            if progress.cancelled() {
                return Err(Error::Interrupted);
            }
            let mut scratch = crate::check::Scratch::default();
            for s in corpus.samples(start, end)? {
                let facts = crate::check::check_data(profile, &s, &mut scratch);
                let mut ev = evidence_of(&files_of, &heads, &paired, s.row);
                let mut probes = Vec::new();
                if let Some(first) = files_of.get(&s.row).map(|l| l[0]) {
                    match &heads[first].header {
                        Err(e) => {
                            ev.findings
                                .insert(Code::HiddenUnreadable.as_str().to_string(), e.clone());
                        }
                        Ok(h) => {
                            let want = probed.contains(&s.row).then_some(per_sample);
                            let mut c = check_file(&ctx, h, &s, facts.completion.0 as usize, want);
                            if let Some(other) = paired.content_row[first].filter(|&r| r != s.row) {
                                if let Some(f) = c.findings.get_mut(&Code::HiddenIdsMismatch) {
                                    f.push_str(&format!("; they are row {other}'s"));
                                }
                            }
                            for (code, text) in std::mem::take(&mut c.findings) {
                                ev.findings.insert(code.as_str().to_string(), text);
                            }
                            out.norms.push((
                                s.row,
                                c.rms.unwrap_or(f32::NAN),
                                c.unweighted.unwrap_or(f32::NAN),
                            ));
                            out.positions += c.positions;
                            out.bytes_read += c.bytes_read;
                            out.truncated |= c.truncated_at.is_some();
                            probes = c.probes;
                        }
                    }
                }
                if !ev.findings.is_empty() || !probes.is_empty() {
                    out.rows.push(Row {
                        sample: flagged_sample(&s, &facts),
                        evidence: ev,
                        probes,
                    });
                }
            }
            progress.units_done.fetch_add(1, Ordering::Relaxed);
            Ok(out)
        })
        .collect();
    let (mut rows, mut norms) = (Vec::new(), Vec::new());
    for p in parts {
        let p = p?;
        rows.extend(p.rows);
        norms.extend(p.norms);
        report.positions += p.positions;
        report.bytes_checked += p.bytes_read;
        if p.truncated {
            report.max_length = max_length;
        }
    }
    // 4. The norm convention.
    let mut file_rms: Vec<f32> = norms.iter().map(|n| n.1).filter(|v| !v.is_nan()).collect();
    file_rms.sort_by(|a, b| a.total_cmp(b));
    let q = |v: &[f32], p: f64| {
        v.get(((v.len().saturating_sub(1)) as f64 * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let dump_rms = (!file_rms.is_empty()).then(|| file_rms[file_rms.len() / 2]);
    report.norm.row_rms = [q(&file_rms, 0.1), q(&file_rms, 0.5), q(&file_rms, 0.9)];
    report.norm.trainer_expects = layout.trainer_expects();
    let convention = if target.is_some() {
        let mut u: Vec<f32> = norms.iter().map(|n| n.2).filter(|v| !v.is_nan()).collect();
        u.sort_by(|a, b| a.total_cmp(b));
        report.norm.unweighted_rms = Some([q(&u, 0.1), q(&u, 0.5), q(&u, 0.9)]);
        report.norm.decided_by =
            "rms(h / w) of the target's final norm weight w: 1 after the norm".into();
        majority(norms.iter().filter_map(|n| norm_of(n.2)))
    } else {
        report.norm.decided_by =
            "not decided: give --target-model (files are compared with the dump's scale)".into();
        None
    };
    report.norm.convention = convention;
    let mut corpus_counts = Vec::new();
    if let (Some(c), Some(e)) = (convention, layout.trainer_expects()) {
        if c != e {
            corpus_counts.push((Code::HiddenConvention, 1));
        }
    }
    let mut departing: BTreeMap<u64, String> = BTreeMap::new();
    for &(row, own, unweighted) in &norms {
        let departs = match (convention, norm_of(unweighted), dump_rms) {
            (Some(conv), Some(mine), _) if mine != conv => Some(format!(
                "its last state is stored {} where the dump's are {} (rms(h / w) {unweighted:.2})",
                mine.as_str(),
                conv.as_str(),
            )),
            (None, _, Some(dump))
                if dump > 0.0
                    && !own.is_nan()
                    && (own / dump > SCALE_DEPARTS
                        || dump / own.max(f32::MIN_POSITIVE) > SCALE_DEPARTS) =>
            {
                Some(format!(
                    "its last state's median row RMS is {own:.3} where the dump's is {dump:.3}: stored on the other side of the final norm, or from another layer?"
                ))
            }
            _ => None,
        };
        if let Some(d) = departs {
            departing.insert(row, d);
        }
    }
    drop(norms);
    report.norm.files_departing = departing.len() as u64;
    // A departing sample kept in full takes the finding; the others are read again (a few, unless the dump
    // is split on its scale).
    for r in rows.iter_mut() {
        if let Some(d) = departing.remove(&r.sample.row) {
            r.evidence
                .findings
                .insert(Code::HiddenNorm.as_str().to_string(), d);
        }
    }
    if !departing.is_empty() {
        let wanted: std::collections::BTreeSet<u64> = departing.keys().copied().collect();
        let mut scratch = crate::check::Scratch::default();
        for s in samples_at(corpus, &wanted)? {
            let facts = crate::check::check_data(profile, &s, &mut scratch);
            let mut ev = evidence_of(&files_of, &heads, &paired, s.row);
            ev.findings.insert(
                Code::HiddenNorm.as_str().to_string(),
                departing.remove(&s.row).expect("asked for"),
            );
            rows.push(Row {
                sample: flagged_sample(&s, &facts),
                evidence: ev,
                probes: Vec::new(),
            });
        }
        rows.sort_by_key(|r| r.sample.row);
    }
    // 5. Agreement.
    if let Some(t) = &target {
        let apply = convention != Some(Norm::After);
        let mut probes = Vec::new();
        let mut owner = Vec::new();
        for (k, r) in rows.iter_mut().enumerate() {
            owner.extend(std::iter::repeat_n(k, r.probes.len()));
            probes.append(&mut r.probes);
        }
        for (k, p) in owner.into_iter().zip(predict(t, probes, apply)) {
            let a = rows[k]
                .evidence
                .agreement
                .get_or_insert_with(Agreement::default);
            tally(a, p, DISAGREEMENTS_KEPT);
        }
        let mut summary = AgreementSummary {
            target: t.dir.display().to_string(),
            read: t.read.clone(),
            norm_applied: apply,
            min: opts.agreement_min,
            ..Default::default()
        };
        let mut rates: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for r in rows.iter_mut() {
            let Some(a) = &r.evidence.agreement else {
                continue;
            };
            if a.positions == 0 {
                continue;
            }
            let rate = f64::from(a.agreed) / f64::from(a.positions);
            summary.samples += 1;
            summary.positions += u64::from(a.positions);
            summary.agreed += u64::from(a.agreed);
            let c = summary
                .categories
                .entry(r.sample.category.clone())
                .or_default();
            c.samples += 1;
            c.positions += u64::from(a.positions);
            c.agreed += u64::from(a.agreed);
            rates
                .entry(r.sample.category.clone())
                .or_default()
                .push(rate);
            if rate < opts.agreement_min {
                let first = a.disagreements.first().map_or(String::new(), |d| {
                    format!(
                        "; first at position {} (token {}, predicted {})",
                        d[0], d[1], d[2]
                    )
                });
                r.evidence.findings.insert(
                    Code::HiddenDisagree.as_str().to_string(),
                    format!(
                        "its states predict {} of {} sampled next tokens ({:.0} %){first}",
                        a.agreed,
                        a.positions,
                        rate * 100.0
                    ),
                );
            }
        }
        for (name, mut v) in rates {
            v.sort_by(|a, b| a.total_cmp(b));
            let qq = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
            let c = summary.categories.get_mut(&name).expect("counted above");
            c.rate = c.agreed as f64 / c.positions.max(1) as f64;
            c.quantiles = [qq(0.1), qq(0.5), qq(0.9)];
        }
        report.agreement = Some(summary);
    }
    // The section's totals and the flagged samples.
    report.bytes_per_token = if report.positions > 0 {
        report.bytes as f64 / report.positions as f64
    } else {
        0.0
    };
    let unreadable_unpaired = unpaired
        .iter()
        .filter(|&&i| heads[i].header.is_err())
        .count() as u64;
    let orphans = unpaired.len() as u64 - unreadable_unpaired;
    if orphans > 0 {
        corpus_counts.push((Code::HiddenOrphan, orphans));
    }
    if unreadable_unpaired > 0 {
        corpus_counts.push((Code::HiddenUnreadable, unreadable_unpaired));
    }
    let mut flagged = Vec::new();
    for mut r in rows {
        if r.evidence.findings.is_empty() {
            continue;
        }
        r.sample.flags = r
            .evidence
            .findings
            .keys()
            .filter_map(|k| Code::parse(k))
            .fold(0, |m, c| m | c.bit());
        flagged.push((r.sample, r.evidence));
    }
    Ok(Outcome {
        flagged,
        corpus_counts,
        report,
    })
}

/// Completion positions `show` checks for agreement on one sample.
const SHOW_POSITIONS: usize = 512;
/// Disagreeing positions `show` lists.
const SHOW_DISAGREEMENTS: usize = 20;

/// One sample's dump file, as `tokscan show --hidden-states` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct SampleDump {
    pub row: u64,
    pub layout: Layout,
    /// Its file under the dump directory (none: no file pairs with the sample).
    pub file: Option<String>,
    pub paired_by: Option<Rule>,
    pub other_files: Vec<String>,
    pub container: Option<super::Container>,
    pub tensors: Vec<super::TensorHeader>,
    /// code → what was found (the dump-wide norm comparison aside, which needs every file).
    pub findings: BTreeMap<String, String>,
    /// Median row RMS of the last state, and of `h / w` with the target.
    pub row_rms: Option<f32>,
    pub unweighted_rms: Option<f32>,
    /// With the target: where this file's last state was taken.
    pub convention: Option<Norm>,
    /// With the target: agreement on up to 512 completion positions, the first 20 disagreements.
    pub agreement: Option<Agreement>,
}

/// The dump file of corpus row `row` and what the checks find in it: the inventory and pairing of the whole
/// dump (headers and ids only), then this one file read in full.
pub fn inspect(corpus: &Corpus, profile: &Profile, opts: &Options, row: u64) -> Result<SampleDump> {
    let s = corpus.sample(row)?;
    let prep = prepare(corpus, opts, &Progress::default())?;
    let mut out = SampleDump {
        row,
        layout: prep.layout,
        file: None,
        paired_by: None,
        other_files: Vec::new(),
        container: None,
        tensors: Vec::new(),
        findings: BTreeMap::new(),
        row_rms: None,
        unweighted_rms: None,
        convention: None,
        agreement: None,
    };
    let Some(list) = prep.files_of.get(&row) else {
        out.findings.insert(
            Code::HiddenMissing.as_str().to_string(),
            "no file of the dump pairs with this sample".into(),
        );
        return Ok(out);
    };
    let first = list[0];
    let head = &prep.heads[first];
    out.file = Some(head.file.rel.clone());
    out.paired_by = prep.paired.of_file[first].map(|p| p.1);
    out.other_files = list[1..]
        .iter()
        .map(|&i| prep.heads[i].file.rel.clone())
        .collect();
    if list.len() > 1 {
        out.findings.insert(
            Code::HiddenDuplicate.as_str().to_string(),
            format!("{} files for this sample", list.len()),
        );
    }
    let h = match &head.header {
        Ok(h) => h,
        Err(e) => {
            out.findings
                .insert(Code::HiddenUnreadable.as_str().to_string(), e.clone());
            return Ok(out);
        }
    };
    out.container = Some(h.container);
    out.tensors = h.tensors.clone();
    let ctx = Ctx {
        layout: prep.layout,
        shape: &prep.shape,
        target: prep.target.as_ref(),
        max_length: prep.max_length,
    };
    let facts = crate::check::check_data(profile, &s, &mut crate::check::Scratch::default());
    let probes = prep.target.as_ref().map(|_| SHOW_POSITIONS);
    let mut c = check_file(&ctx, h, &s, facts.completion.0 as usize, probes);
    for (code, text) in std::mem::take(&mut c.findings) {
        out.findings.insert(code.as_str().to_string(), text);
    }
    out.row_rms = c.rms;
    out.unweighted_rms = c.unweighted;
    if let Some(t) = &prep.target {
        let own = c.unweighted.and_then(norm_of);
        out.convention = own;
        let apply = own.or(prep.layout.trainer_expects()) != Some(Norm::After);
        let mut a = Agreement::default();
        for p in predict(t, std::mem::take(&mut c.probes), apply) {
            tally(&mut a, p, SHOW_DISAGREEMENTS);
        }
        let rate = f64::from(a.agreed) / f64::from(a.positions.max(1));
        if a.positions > 0 && rate < opts.agreement_min {
            out.findings.insert(
                Code::HiddenDisagree.as_str().to_string(),
                format!(
                    "its states predict {} of {} completion positions' next tokens ({:.0} %)",
                    a.agreed,
                    a.positions,
                    rate * 100.0
                ),
            );
        }
        out.agreement = Some(a);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_padding_is_left_out_of_a_files_ids() {
        assert_eq!(unpadded(&[5, 6, 7, 0, 0], Some(&[0, 1, 1, 0, 0])), 3);
        // A 0 the mask trains is the sample's; without a mask nothing is padding.
        assert_eq!(unpadded(&[5, 6, 0], Some(&[0, 1, 1])), 3);
        assert_eq!(unpadded(&[5, 6, 0], None), 3);
    }

    #[test]
    fn probes_are_spread_over_the_completion() {
        let mask = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1];
        assert_eq!(
            probe_positions(Some(&mask), 0, 10, 0),
            vec![2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(probe_positions(Some(&mask), 0, 10, 3), vec![2, 4, 6]);
        assert_eq!(probe_positions(None, 8, 10, 0), vec![7, 8]);
        assert_eq!(probe_positions(None, 8, 8, 0), Vec::<usize>::new());
    }

    #[test]
    fn agreement_samples_every_category_when_rows_alternate() {
        let keys: Vec<RowKey> = (0..100)
            .map(|i| RowKey {
                category: i % 2,
                full: 0,
                len: 0,
                prefix: None,
            })
            .collect();
        let files_of: BTreeMap<u64, Vec<usize>> = (0..100).map(|r| (r, vec![r as usize])).collect();
        // 100 samples × 16 positions against a budget of 400: one sample in four, from both categories.
        let rows = probed_rows(&files_of, &keys, 400, 16);
        assert_eq!(rows.len(), 25);
        assert_eq!(rows.iter().filter(|r| *r % 2 == 0).count(), 13);
        // Forty categories of one sample each, and a budget of one sample: one sample.
        let one: Vec<RowKey> = (0..40)
            .map(|i| RowKey {
                category: i,
                full: 0,
                len: 0,
                prefix: None,
            })
            .collect();
        let files: BTreeMap<u64, Vec<usize>> = (0..40).map(|r| (r, vec![r as usize])).collect();
        assert_eq!(probed_rows(&files, &one, 16, 16).len(), 1);
        assert_eq!(probed_rows(&files_of, &keys, 1600, 16).len(), 100);
        assert_eq!(probed_rows(&files_of, &keys, 1600, 32).len(), 50);
    }

    #[test]
    fn the_majority_is_the_most_common_value_first_seen_on_ties() {
        assert_eq!(majority([3, 1, 3, 2].into_iter()), Some(3));
        assert_eq!(majority([1, 2].into_iter()), Some(1));
        assert_eq!(majority(std::iter::empty::<u8>()), None);
    }
}
