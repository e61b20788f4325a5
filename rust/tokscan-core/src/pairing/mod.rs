//! Pairing every sample with the prompt record it was generated from, as part of the scan.
//!
//! A prompts file pairs with the inputs under its folder ([`crate::source::paired_prompts_for`]), or with the whole
//! corpus when named with `--prompts`. A sample finds its record by id (the record's `id` / `sample_id` field
//! against the sample's id) or, when either side has none, by position: sample N of the folder is record N.
//!
//! Without a tokenizer, a sample and its record are compared by what survives tokenization: the shape of the
//! conversation (a system prompt or not, the number of user and assistant turns) and its sizes. One model's
//! tokenizer keeps a steady ratio of UTF-8 bytes to tokens, so the ratio of a record's message bytes to the
//! sample's turn tokens is calibrated on the corpus itself (per prompts file) and a pair far off it is
//! suspect. Every sample is also compared with the records next to its own ([`SHIFT_WINDOW`] either side),
//! so that a run of samples that each fit the record at the same offset is reported as a shifted prompts
//! file. With a tokenizer ([`RecordEncoder`]), each record is rendered through the chat template and
//! tokenized, and must be the sample's prompt token for token.
//!
//! The per-sample part runs in the scan's workers ([`pair_sample`]); the corpus-wide part (calibration, runs,
//! records without a sample) runs once at the end ([`resolve`]).

pub mod facts;
pub mod records;

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::anomaly::Code;
use crate::check::{Scratch, Turn};
use crate::corpus::Corpus;
use crate::error::Result;
use crate::flagged::FlaggedSample;
use crate::profile::id_text::{decodes_to, IdText};
use crate::profile::{kind, Profile, Role};
use crate::records::Records;
use crate::sample_id::SampleId;
use crate::source::paired_prompts_for;
use crate::token::TokenId;
pub use facts::{Fit, PairFact, NOT_RENDERED, NO_RATIO, RENDER_FAILED, SHIFT_WINDOW, TOKENS_MATCH};

pub use records::{PromptRecord, PromptSet};

/// Consecutive samples that must fit the record at the same offset before it is called a shift (one sample
/// fitting a neighbour is more likely two similar prompts).
pub const MIN_SHIFT_RUN: usize = 3;
/// Turns shorter than this many tokens say little about the bytes-per-token ratio and are not compared.
const MIN_TURN_TOKENS: u32 = 16;
/// Band around the calibrated ratio (natural log): never narrower than ×3, never wider than ×4. Text of one
/// kind tokenizes at a steady ratio, but kinds differ (a prompt of digits and symbols takes twice the tokens of
/// prose per byte), so only a gross departure says the record is another prompt; a small edit needs tokens.
const MIN_TOLERANCE: f64 = 1.10;
const MAX_TOLERANCE: f64 = 1.39;
/// Undecided samples a shifted run may hold between two votes for its offset.
const MAX_RUN_GAP: usize = 3;
/// Samples per prompts file needed to calibrate the ratio; with fewer, sizes are not judged.
const MIN_CALIBRATION: usize = 20;
/// Lines listed per finding kind in the report (the counts are always complete).
const LIST_LIMIT: usize = 20;

/// Renders a prompt record (its raw JSON line) through the model's chat template and tokenizes it.
pub trait RecordEncoder: Send + Sync + std::fmt::Debug {
    /// The record's rendered generation prompt.
    fn render(&self, record: &str) -> Result<String>;
    /// The ids of rendered text.
    fn encode_text(&self, text: &str) -> Result<Vec<u32>>;
    /// Renders and tokenizes a record.
    fn encode(&self, record: &str) -> Result<Vec<u32>> {
        self.encode_text(&self.render(record)?)
    }
    /// The text each id decodes to, when the tokenizer's vocabulary gives it: a sample whose prompt ids decode
    /// to exactly the rendered text needs no tokenizing ([`decodes_to`]).
    fn id_text(&self) -> Option<&IdText> {
        None
    }
    /// Where the tokenizer came from, for the report.
    fn describe(&self) -> String;
    /// Why records are no longer rendered (the chat template ran out of its budget too often), if they are not:
    /// the records left are compared by shape, and the report's note says why.
    fn runaway(&self) -> Option<String> {
        None
    }
}

#[cfg(feature = "prompt")]
impl RecordEncoder for crate::prompt::PromptEncoder {
    fn render(&self, record: &str) -> Result<String> {
        crate::prompt::PromptEncoder::render(self, &crate::prompt::PromptRecord::parse(record, 0)?)
    }

    fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
        crate::prompt::PromptEncoder::encode_text(self, text)
    }

    fn id_text(&self) -> Option<&IdText> {
        self.id_text()
    }

    fn describe(&self) -> String {
        self.path().display().to_string()
    }

    fn runaway(&self) -> Option<String> {
        crate::prompt::PromptEncoder::runaway(self).map(str::to_string)
    }
}

/// Loads the encoder of a tokenizer directory for pairing: `Err` with the reason when records cannot be
/// rendered with it (no chat template, a build without the encoder), and pairing compares shapes instead.
pub fn load_encoder(
    dir: &std::path::Path,
    template: Option<&str>,
) -> std::result::Result<Arc<dyn RecordEncoder>, String> {
    #[cfg(feature = "prompt")]
    {
        crate::prompt::PromptEncoder::load(dir, template)
            .map(|e| Arc::new(e) as Arc<dyn RecordEncoder>)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "prompt"))]
    {
        let _ = (dir, template);
        Err("this build of tokscan has no prompt encoder (the core's `prompt` feature)".into())
    }
}

/// The prompts files of a scan and which inputs pair with which.
#[derive(Debug)]
pub struct Pairing {
    pub sets: Vec<PromptSet>,
    /// Per input of the corpus: the index of its prompts file.
    pub source_set: Vec<Option<u32>>,
    /// Per prompts file: the global row of its first sample, and its number of samples.
    pub first_row: Vec<u64>,
    pub samples: Vec<u64>,
    pub encoder: Option<Arc<dyn RecordEncoder>>,
    /// Why records are compared by shape although a tokenizer was given (it could not render them).
    pub note: Option<String>,
}

impl Pairing {
    /// The pairing of an opened corpus: the prompts files discovery found beside its shards, or `explicit`
    /// (one file for the whole corpus). `None` when there are none.
    pub fn of(
        corpus: &Corpus,
        explicit: &[PathBuf],
        encoder: Option<Arc<dyn RecordEncoder>>,
    ) -> Result<Option<Pairing>> {
        let keep_raw = encoder.is_some();
        let sets: Vec<PromptSet> = if explicit.is_empty() {
            corpus
                .prompts
                .iter()
                .map(|p| {
                    let category = p
                        .names_category
                        .then(|| p.dir.file_name())
                        .flatten()
                        .map(|n| n.to_string_lossy().into_owned());
                    PromptSet::read(&p.path, Some(p.dir.clone()), category, keep_raw)
                })
                .collect::<Result<_>>()?
        } else {
            if explicit.len() > 1 {
                return Err(crate::error::Error::Usage(
                    "--prompts names one file for the whole corpus; put one prompts.jsonl in each category folder to pair several".into(),
                ));
            }
            vec![PromptSet::read(&explicit[0], None, None, keep_raw)?]
        };
        if sets.is_empty() {
            return Ok(None);
        }
        let source_set: Vec<Option<u32>> = corpus
            .inputs
            .iter()
            .map(|i| {
                if !explicit.is_empty() {
                    return Some(0);
                }
                paired_prompts_for(&corpus.prompts, &corpus.unpaired_prompt_dirs, &i.path)
                    .and_then(|p| sets.iter().position(|s| s.path == p.path).map(|k| k as u32))
            })
            .collect();
        let mut first_row = vec![u64::MAX; sets.len()];
        let mut samples = vec![0u64; sets.len()];
        for (k, s) in source_set.iter().enumerate() {
            if let Some(s) = s {
                first_row[*s as usize] = first_row[*s as usize].min(corpus.starts[k]);
                samples[*s as usize] += corpus.starts[k + 1] - corpus.starts[k];
            }
        }
        Ok(Some(Pairing {
            sets,
            source_set,
            first_row,
            samples,
            encoder,
            note: None,
        }))
    }
}

/// The sample's prompt as the parser saw it: the turns before the final assistant turn.
#[derive(Debug, Default)]
pub struct PromptShape {
    pub system: bool,
    pub users: u16,
    pub assistants: u16,
    pub system_tokens: u32,
    pub user_tokens: Vec<u32>,
}

fn content_tokens<T: TokenId>(profile: &Profile, tokens: &[T], t: &Turn) -> u32 {
    let mut end = t.end.min(tokens.len());
    if end > t.content_start {
        let last = tokens[end - 1].id();
        if profile
            .special_slot(last)
            .is_some_and(|s| profile.specials[s as usize].kind & kind::TERMINATOR != 0)
        {
            end -= 1;
        }
    }
    end.saturating_sub(t.content_start) as u32
}

/// The prompt's shape from the structure `check_sample` left in `scratch`.
pub fn prompt_shape<T: TokenId>(
    profile: &Profile,
    tokens: &[T],
    scratch: &Scratch,
    out: &mut PromptShape,
) {
    let p = &scratch.parsed;
    out.system = false;
    out.users = 0;
    out.assistants = 0;
    out.system_tokens = 0;
    out.user_tokens.clear();
    if let Some((a, b)) = p.implicit_system {
        out.system = b > a;
        out.system_tokens = (b - a) as u32;
    }
    for t in scratch.prompt_turns() {
        match t.role {
            Role::System => {
                let n = content_tokens(profile, tokens, t);
                out.system |= n > 0;
                out.system_tokens += n;
            }
            Role::User => {
                out.users += 1;
                out.user_tokens.push(content_tokens(profile, tokens, t));
            }
            Role::Assistant => out.assistants += 1,
            Role::Tool => {}
        }
    }
}

fn milli(x: f64) -> i16 {
    (x * 1000.0).round().clamp(-32000.0, 32000.0) as i16
}

/// How `shape` fits `rec` without a tokenizer.
fn shape_fit(rec: &PromptRecord, shape: &PromptShape) -> Fit {
    // Tools declared are rendered into the system prompt by some templates; tool results become user turns in
    // others: only what every family renders the same way is compared.
    let mut ok = rec.assistants == shape.assistants;
    if !rec.tools_declared {
        ok &= rec.system == shape.system;
    }
    let users_comparable = rec.tool_results == 0 && !rec.tools_declared;
    if users_comparable {
        ok &= rec.users == shape.users;
    }
    let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(shape.user_tokens.len() + 1);
    if !rec.tools_declared && rec.system && shape.system {
        pairs.push((rec.system_bytes, shape.system_tokens));
    }
    if users_comparable && rec.users == shape.users {
        pairs.extend(
            rec.user_bytes
                .iter()
                .copied()
                .zip(shape.user_tokens.iter().copied()),
        );
    }
    let (b, t): (u64, u64) = pairs.iter().fold((0, 0), |(b, t), &(x, y)| {
        (b + u64::from(x), t + u64::from(y))
    });
    let (log_ratio, spread) = if t >= u64::from(MIN_TURN_TOKENS) && b > 0 {
        let lr = (b as f64 / t as f64).ln();
        let spread = pairs
            .iter()
            .filter(|&&(x, y)| y >= MIN_TURN_TOKENS && x > 0)
            .map(|&(x, y)| ((f64::from(x) / f64::from(y)).ln() - lr).abs())
            .fold(0.0f64, f64::max);
        (milli(lr), milli(spread))
    } else {
        (NO_RATIO, 0)
    };
    Fit {
        absent: false,
        shape: ok,
        log_ratio,
        spread,
        first_diff: NOT_RENDERED,
    }
}

/// Where the rendering and the sample's prompt first differ ([`TOKENS_MATCH`] when the rendering is the
/// sample's prompt: a prefix of the sample, and the whole stored prompt when prompt and completion are stored
/// apart).
fn first_difference<T: TokenId>(tokens: &[T], prompt_len: Option<usize>, rendered: &[u32]) -> u32 {
    let head = match prompt_len {
        Some(pl) => &tokens[..pl.min(tokens.len())],
        None => tokens,
    };
    let n = rendered.len().min(head.len());
    if let Some(i) = (0..n).find(|&i| head[i].id() != rendered[i]) {
        return i as u32;
    }
    let whole = prompt_len.map_or(head.len() >= rendered.len(), |pl| pl == rendered.len());
    if whole {
        TOKENS_MATCH
    } else {
        n as u32
    }
}

/// The xxh3 hash of token ids (as little-endian `u32`s), to compare a sample's prompt with a record's rendering
/// without keeping the rendering's ids.
fn ids_hash<T: TokenId>(ids: &[T]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = [0u8; 4 * 256];
    for chunk in ids.chunks(256) {
        for (dst, t) in buf.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&t.id().to_le_bytes());
        }
        h.update(&buf[..chunk.len() * 4]);
    }
    h.digest()
}

/// Whether a rendering of `len` ids hashing to `hash` is the sample's prompt, as [`first_difference`] says
/// [`TOKENS_MATCH`]: the whole stored prompt, or a prefix of the sequence.
fn prompt_matches<T: TokenId>(
    tokens: &[T],
    prompt_len: Option<usize>,
    hash: u64,
    len: u32,
) -> bool {
    let len = len as usize;
    prompt_len.is_none_or(|pl| pl == len) && tokens.len() >= len && ids_hash(&tokens[..len]) == hash
}

/// Text a normalizing tokenizer (NFC) leaves as it is: ids that do not decode to it are not its tokens.
fn normalized(text: &str) -> bool {
    #[cfg(feature = "prompt")]
    {
        text.is_ascii() || unicode_normalization::is_nfc(text)
    }
    #[cfg(not(feature = "prompt"))]
    {
        text.is_ascii()
    }
}

/// Pairs one sample, in a scan worker: finds its record and measures its fit with it and its neighbours.
#[allow(clippy::too_many_arguments)]
pub fn pair_sample<T: TokenId>(
    pairing: &Pairing,
    profile: &Profile,
    source: usize,
    row: u64,
    sample_id: Option<&SampleId>,
    tokens: &[T],
    prompt_len: Option<usize>,
    scratch: &Scratch,
    shape: &mut PromptShape,
) -> Option<PairFact> {
    let set_index = pairing.source_set.get(source).copied().flatten()?;
    let set = &pairing.sets[set_index as usize];
    let ordinal = row - pairing.first_row[set_index as usize];
    let (record, by_id) = match (set.id_field, sample_id) {
        (Some(_), Some(id)) => (set.by_id.get(&*id.key()).copied(), true),
        _ => (
            (ordinal < set.records.len() as u64).then_some(ordinal as u32),
            false,
        ),
    };
    let mut fact = PairFact {
        row,
        set: set_index,
        record,
        by_id,
        fits: [Fit::ABSENT; 2 * SHIFT_WINDOW + 1],
    };
    let Some(own) = record else {
        return Some(fact);
    };
    if profile.rules.plain {
        // Plain text has no turns to compare: the record only has to exist.
        fact.fits[SHIFT_WINDOW] = Fit {
            absent: false,
            shape: true,
            log_ratio: NO_RATIO,
            spread: 0,
            first_diff: NOT_RENDERED,
        };
        return Some(fact);
    }
    prompt_shape(profile, tokens, scratch, shape);
    // Neighbours are compared in the file's order, which is the samples' order only when pairing by line; a
    // sample paired by id is compared with the records around its own too (a shifted id column).
    let encoded = |j: usize, neighbour: bool| -> u32 {
        let Some(enc) = &pairing.encoder else {
            return NOT_RENDERED;
        };
        let rec = &set.records[j];
        if rec.too_large {
            // Over TOKSCAN_MAX_RECORD_BYTES: never rendered, compared by shape; the report names its line.
            return NOT_RENDERED;
        }
        let text = match rec.raw.as_deref().map(|r| enc.render(r)) {
            Some(Ok(text)) => text,
            // The template raised (`raise_exception`, a record it does not support) or ran out of its budget:
            // its own finding, with the template's message, not a mismatch at token 0. A template given up as a
            // runaway compares the rest by shape (one note for the scan, not an error per sample).
            Some(Err(_)) if enc.runaway().is_some() => return NOT_RENDERED,
            Some(Err(_)) => return RENDER_FAILED,
            None => return 0,
        };
        // Most samples are their record's rendering: comparing bytes costs a table look-up per token, where
        // tokenizing the text costs a byte-pair merge. Only a sample that differs is tokenized, to give the
        // first differing token.
        if let Some(ids) = enc.id_text() {
            if decodes_to(ids, tokens, prompt_len, text.as_bytes()) {
                return TOKENS_MATCH;
            }
            // A neighbour only has to match or not, and ids that do not decode to normalized text are not its
            // tokens (each sample of a shifted run tokenized six neighbours: 65 s for 100 KB records).
            if neighbour && normalized(&text) {
                return 0;
            }
        }
        if neighbour {
            // Without the byte table: the record's ids, tokenized once for every sample that compares with it.
            let key = rec.encoded.get_or_init(|| {
                enc.encode_text(&text)
                    .ok()
                    .map(|ids| (ids_hash(&ids), ids.len() as u32))
            });
            return match *key {
                Some((hash, len)) if prompt_matches(tokens, prompt_len, hash, len) => TOKENS_MATCH,
                Some(_) => 0,
                None => NOT_RENDERED,
            };
        }
        match enc.encode_text(&text) {
            Ok(ids) => {
                let _ = rec.encoded.set(Some((ids_hash(&ids), ids.len() as u32)));
                first_difference(tokens, prompt_len, &ids)
            }
            // The tokenizer could not be loaded: the sample is judged by its shape, not called different.
            Err(_) => NOT_RENDERED,
        }
    };
    for (slot, fit) in fact.fits.iter_mut().enumerate() {
        let j = own as i64 + slot as i64 - SHIFT_WINDOW as i64;
        if j < 0 || j >= set.records.len() as i64 {
            continue;
        }
        *fit = shape_fit(&set.records[j as usize], shape);
    }
    if pairing.encoder.is_some() {
        let own_diff = encoded(own as usize, false);
        fact.fits[SHIFT_WINDOW].first_diff = own_diff;
        // Neighbours are rendered only for a sample whose own record rendered and differs (a record the template
        // failed on is not a shift).
        if own_diff < RENDER_FAILED {
            for slot in (0..fact.fits.len()).filter(|&s| s != SHIFT_WINDOW) {
                if !fact.fits[slot].absent {
                    let j = own as usize + slot - SHIFT_WINDOW;
                    fact.fits[slot].first_diff = encoded(j, true);
                }
            }
        }
    }
    Some(fact)
}

/// One prompts file in the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairingReport {
    pub path: String,
    /// The category its folder names (`null` for a file that pairs with the whole corpus).
    pub category: Option<String>,
    pub records: u64,
    pub samples: u64,
    /// `id` (the record field named in `id_field` against the sample id) or `line` (sample N is record N).
    pub matched_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_field: Option<String>,
    /// Samples paired with a record whose prompt agrees.
    pub paired: u64,
    pub samples_without_record: u64,
    pub records_without_sample: u64,
    /// Line numbers of the first records without a sample.
    pub records_without_sample_lines: Vec<u32>,
    pub duplicate_ids: u64,
    /// `{id, first_line, line}` of the first repeated ids.
    pub duplicate_id_lines: Vec<DuplicateId>,
    pub mismatched: u64,
    pub shifted: u64,
    pub shifts: Vec<Shift>,
    /// How records were compared: `tokens` (rendered and tokenized) or `shape` (turns and sizes).
    pub compared: String,
    /// The calibrated UTF-8 bytes per token of the paired prompts (`null` when too few to calibrate).
    pub bytes_per_token: Option<f64>,
    /// Why tokens were not compared although a tokenizer was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Samples whose record the chat template failed to render (`prompt_unrenderable`), and the first
    /// failure: the record's line and the template's message.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unrenderable: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render_error: Option<String>,
    /// With a tokenizer: records whose line is longer than the per-record limit (`TOKSCAN_MAX_RECORD_BYTES`),
    /// not rendered or tokenized (their samples are compared by shape), the limit, and the first lines.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_too_large: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_record_bytes: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records_too_large_lines: Vec<u32>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DuplicateId {
    pub id: String,
    pub first_line: u32,
    pub line: u32,
}

/// A run of samples that each fit the record `offset` lines from their own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shift {
    pub offset: i32,
    pub from_row: u64,
    pub to_row: u64,
    /// The line of the record the first sample of the run paired with.
    pub from_line: u32,
    pub samples: u64,
}

/// Calibration of one prompts file: the median log ratio and the tolerance around it (× 1000).
fn calibrate(facts: &[&PairFact]) -> Option<(f64, f64)> {
    let mut v: Vec<f64> = facts
        .iter()
        .map(|f| f.fits[SHIFT_WINDOW])
        .filter(|f| f.shape && f.log_ratio != NO_RATIO)
        .map(|f| f64::from(f.log_ratio) / 1000.0)
        .collect();
    if v.len() < MIN_CALIBRATION {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v[v.len() / 2];
    let mut dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let mad = dev[dev.len() / 2] * 1.4826;
    Some((m, (5.0 * mad).clamp(MIN_TOLERANCE, MAX_TOLERANCE)))
}

/// Margin (natural log) by which one record must fit better than the others to get a sample's vote.
const VOTE_MARGIN: f64 = 0.15;

/// How far a fit is from the calibrated ratio (`None`: not comparable, or a different shape).
fn distance(f: &Fit, cal: Option<(f64, f64)>) -> Option<f64> {
    if f.absent || !f.shape {
        return None;
    }
    match cal {
        Some((m, _)) if f.log_ratio != NO_RATIO => {
            Some((f64::from(f.log_ratio) / 1000.0 - m).abs() + (f64::from(f.spread) / 1000.0) / 2.0)
        }
        _ => None,
    }
}

/// The offset of the record that fits a sample best by a clear margin (0: its own), or `None`.
fn vote(f: &PairFact, cal: Option<(f64, f64)>, tokens: bool) -> Option<i32> {
    f.record?;
    let offsets = -(SHIFT_WINDOW as i32)..=SHIFT_WINDOW as i32;
    let at = |d: i32| &f.fits[(SHIFT_WINDOW as i32 + d) as usize];
    if tokens {
        let matching: Vec<i32> = offsets
            .filter(|&d| at(d).first_diff == TOKENS_MATCH)
            .collect();
        return match matching.as_slice() {
            [d] => Some(*d),
            ds if ds.contains(&0) => Some(0),
            _ => None,
        };
    }
    let mut scored: Vec<(f64, i32)> = offsets
        .filter_map(|d| distance(at(d), cal).map(|x| (x, d)))
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (best, d) = *scored.first()?;
    let (_, tol) = cal?;
    // A sample whose own record fits keeps it: a neighbour fitting better is a coincidence of sizes, not a
    // shift. Only a sample its own record does not fit votes for another.
    if fits(at(0), cal, false) {
        return Some(0);
    }
    let clear = scored
        .get(1)
        .is_none_or(|&(next, _)| next - best >= VOTE_MARGIN);
    (clear && best <= tol && d != 0).then_some(d)
}

/// Samples in the window over which sizes are compared at each offset.
const WINDOW: usize = 16;
/// Mean distance a window's best offset must beat its own records' by, and stay under, to call it shifted.
const WINDOW_MARGIN: f64 = 0.3;
const WINDOW_FIT: f64 = 0.35;
/// Distance counted for a record of another shape (or none).
const SHAPE_PENALTY: f64 = 2.0;

/// One sample's size fit is noisy (a prompt of digits tokenizes unlike prose), but a prompts file shifted by a
/// line breaks the fit for a whole run of samples, even when every prompt has the same shape: over a window of
/// consecutive samples, the mean distance at each offset tells a shift from noise. A sample inside a window whose
/// best offset `d` beats its own records by a clear margin votes for `d`.
fn window_votes(plain: &[&PairFact], cal: Option<(f64, f64)>, votes: &mut [Option<i32>]) {
    if cal.is_none() || plain.len() < WINDOW {
        return;
    }
    let n_off = 2 * SHIFT_WINDOW + 1;
    let dist = |f: &PairFact, k: usize| -> Option<f64> {
        let fit = &f.fits[k];
        if fit.absent || !fit.shape {
            return Some(SHAPE_PENALTY);
        }
        distance(fit, cal)
    };
    let mut best_for: Vec<Option<(f64, i32)>> = vec![None; plain.len()];
    for start in 0..=plain.len() - WINDOW {
        let w = &plain[start..start + WINDOW];
        if w.last().expect("non-empty").row - w[0].row != (WINDOW - 1) as u64 {
            continue; // not consecutive samples
        }
        let mut means = vec![0.0f64; n_off];
        let mut counted = vec![0usize; n_off];
        for f in w {
            for (k, m) in means.iter_mut().enumerate() {
                if let Some(x) = dist(f, k) {
                    *m += x;
                    counted[k] += 1;
                }
            }
        }
        let mean = |k: usize| (counted[k] >= WINDOW / 2).then(|| means[k] / counted[k] as f64);
        let Some(own) = mean(SHIFT_WINDOW) else {
            continue;
        };
        let best = (0..n_off)
            .filter(|&k| k != SHIFT_WINDOW)
            .filter_map(|k| mean(k).map(|m| (m, k as i32 - SHIFT_WINDOW as i32)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((m, d)) = best {
            if own - m >= WINDOW_MARGIN && m <= WINDOW_FIT {
                for slot in &mut best_for[start..start + WINDOW] {
                    if slot.is_none_or(|(x, _)| m < x) {
                        *slot = Some((m, d));
                    }
                }
            }
        }
    }
    for (i, b) in best_for.into_iter().enumerate() {
        if let Some((_, d)) = b {
            // At the window's edge the sample's own record may be its prompt: a sample whose own record fits
            // it clearly better keeps it; one that cannot tell (similar sizes) goes with its window.
            let own = dist(plain[i], SHIFT_WINDOW).unwrap_or(SHAPE_PENALTY);
            let there = dist(plain[i], (SHIFT_WINDOW as i32 + d) as usize).unwrap_or(SHAPE_PENALTY);
            if there < own + VOTE_MARGIN {
                votes[i] = Some(d);
            }
        }
    }
}

fn fits(f: &Fit, cal: Option<(f64, f64)>, tokens: bool) -> bool {
    if f.absent {
        return false;
    }
    // A record that was not rendered (over the per-record limit, a tokenizer that did not load) is judged by its
    // shape, not called different.
    if tokens && f.first_diff != NOT_RENDERED {
        return f.first_diff == TOKENS_MATCH;
    }
    if !f.shape {
        return false;
    }
    match cal {
        Some((m, tol)) if f.log_ratio != NO_RATIO => {
            (f64::from(f.log_ratio) / 1000.0 - m).abs() <= tol
                && f64::from(f.spread) / 1000.0 <= MAX_TOLERANCE
        }
        _ => true,
    }
}

/// The corpus-wide part of pairing: calibrates each prompts file's ratio, finds shifted runs and
/// mismatches, and counts records without a sample. `facts` and `records` are in row order (each unit's
/// records after the previous unit's). Returns the flagged samples (row-sorted) and the report's `pairing`
/// section.
pub fn resolve(
    pairing: &Pairing,
    facts: &[PairFact],
    records: &[Records],
) -> (Vec<FlaggedSample>, Vec<PairingReport>) {
    let tokens = pairing.encoder.is_some();
    let mut by_set: Vec<Vec<(&PairFact, &Records, usize)>> = vec![Vec::new(); pairing.sets.len()];
    // Each fact with its sample's record, both walked in row order.
    let mut rows = records
        .iter()
        .flat_map(|r| r.rows.iter().enumerate().map(move |(i, s)| (r, i, s.row)));
    let mut at = rows.next();
    for f in facts {
        while at.is_some_and(|(_, _, row)| row < f.row) {
            at = rows.next();
        }
        if let Some((r, i, _)) = at.filter(|&(_, _, row)| row == f.row) {
            by_set[f.set as usize].push((f, r, i));
        }
    }
    let mut flagged = Vec::new();
    let mut reports = Vec::new();
    for (k, set) in pairing.sets.iter().enumerate() {
        let mut facts = std::mem::take(&mut by_set[k]);
        facts.sort_by_key(|(f, _, _)| f.row);
        let plain: Vec<&PairFact> = facts.iter().map(|(f, _, _)| *f).collect();
        let cal = if tokens { None } else { calibrate(&plain) };
        let own_ok: Vec<bool> = plain
            .iter()
            .map(|f| fits(&f.fits[SHIFT_WINDOW], cal, tokens))
            .collect();
        // Each sample votes for the offset whose record fits it best, by a clear margin: 0 for its own, `d`
        // for the record `d` lines away, nothing when it cannot tell (similar neighbours).
        let mut votes: Vec<Option<i32>> = plain.iter().map(|f| vote(f, cal, tokens)).collect();
        if !tokens {
            window_votes(&plain, cal, &mut votes);
        }
        let mut codes = vec![0u64; plain.len()];
        let mut shifts = Vec::new();
        let mut i = 0;
        while i < plain.len() {
            let d = match votes[i] {
                Some(d) if d != 0 => d,
                _ => {
                    i += 1;
                    continue;
                }
            };
            // A run: consecutive samples voting for `d` or undecided (at most MAX_RUN_GAP in a row), ending on a
            // vote for `d`.
            let (mut j, mut end, mut n_votes) = (i, i, 1usize);
            while j + 1 < plain.len()
                && j - end <= MAX_RUN_GAP
                && plain[j + 1].row == plain[j].row + 1
                && plain[j + 1].record.is_some()
                && votes[j + 1].is_none_or(|v| v == d)
            {
                j += 1;
                if votes[j] == Some(d) {
                    end = j;
                    n_votes += 1;
                }
            }
            if n_votes >= MIN_SHIFT_RUN {
                for c in &mut codes[i..=end] {
                    *c |= Code::PromptsShifted.bit();
                }
                let rec = plain[i].record.map_or(0, |r| set.records[r as usize].line);
                shifts.push(Shift {
                    offset: d,
                    from_row: plain[i].row,
                    to_row: plain[end].row,
                    from_line: rec,
                    samples: (end + 1 - i) as u64,
                });
            }
            i = end + 1;
        }
        let mut used = vec![false; set.records.len()];
        let mut missing = 0u64;
        let mut render_error = None;
        for (n, f) in plain.iter().enumerate() {
            match f.record {
                None => missing += 1,
                Some(r) => {
                    used[r as usize] = true;
                    if f.fits[SHIFT_WINDOW].first_diff == RENDER_FAILED && codes[n] == 0 {
                        codes[n] |= Code::PromptUnrenderable.bit();
                        if render_error.is_none() {
                            // The message, from rendering the first such record again (the facts keep none).
                            let rec = &set.records[r as usize];
                            let why = match (&pairing.encoder, rec.raw.as_deref()) {
                                (Some(enc), Some(raw)) => {
                                    enc.render(raw).err().map(|e| e.to_string())
                                }
                                _ => None,
                            };
                            render_error = Some(format!(
                                "line {}: {}",
                                rec.line,
                                why.unwrap_or_else(|| "the chat template failed".into())
                            ));
                        }
                    } else if !own_ok[n] && codes[n] == 0 {
                        codes[n] |= Code::PromptMismatch.bit();
                    }
                }
            }
        }
        let mut report = PairingReport {
            path: set.path.display().to_string(),
            category: set.category.clone(),
            records: set.records.len() as u64,
            samples: pairing.samples[k],
            matched_by: if plain.iter().any(|f| f.by_id) {
                "id"
            } else {
                "line"
            }
            .into(),
            id_field: set.id_field.map(str::to_string),
            paired: 0,
            samples_without_record: missing,
            records_without_sample: 0,
            records_without_sample_lines: Vec::new(),
            duplicate_ids: set.duplicate_ids.len() as u64,
            duplicate_id_lines: set
                .duplicate_ids
                .iter()
                .take(LIST_LIMIT)
                .map(|(id, a, b)| DuplicateId {
                    id: id.clone(),
                    first_line: *a,
                    line: *b,
                })
                .collect(),
            mismatched: 0,
            shifted: 0,
            shifts,
            compared: if tokens { "tokens" } else { "shape" }.into(),
            bytes_per_token: cal.map(|(m, _)| (m.exp() * 1000.0).round() / 1000.0),
            note: pairing.note.clone().or_else(|| {
                pairing
                    .encoder
                    .as_ref()
                    .and_then(|e| e.runaway())
                    .map(|why| format!("tokens not compared for the records left: {why}"))
            }),
            unrenderable: 0,
            render_error,
            records_too_large: 0,
            max_record_bytes: 0,
            records_too_large_lines: Vec::new(),
        };
        if tokens {
            for rec in set.records.iter().filter(|r| r.too_large) {
                report.records_too_large += 1;
                if report.records_too_large_lines.len() < LIST_LIMIT {
                    report.records_too_large_lines.push(rec.line);
                }
            }
            if report.records_too_large > 0 {
                // Read (and checked) when the prompts file was.
                report.max_record_bytes =
                    records::max_record_bytes().unwrap_or(records::MAX_RECORD_BYTES);
            }
        }
        for (j, u) in used.iter().enumerate() {
            if !u {
                report.records_without_sample += 1;
                if report.records_without_sample_lines.len() < LIST_LIMIT {
                    report
                        .records_without_sample_lines
                        .push(set.records[j].line);
                }
            }
        }
        for (n, (f, recs, i)) in facts.iter().enumerate() {
            let c = codes[n];
            if c & Code::PromptsShifted.bit() != 0 {
                report.shifted += 1;
            } else if c & Code::PromptMismatch.bit() != 0 {
                report.mismatched += 1;
            } else if c & Code::PromptUnrenderable.bit() != 0 {
                report.unrenderable += 1;
            } else if f.record.is_some() {
                report.paired += 1;
            }
            if c != 0 {
                let r = &recs.rows[*i];
                let own = f.fits[SHIFT_WINDOW];
                let pos = if own.first_diff < RENDER_FAILED {
                    own.first_diff
                } else {
                    crate::check::NO_POS
                };
                flagged.push(FlaggedSample {
                    row: r.row,
                    source: r.source,
                    category: recs.categories[r.category as usize].clone(),
                    lengths: r.lengths,
                    flags: c,
                    content: r.content,
                    sample_id: r.sample_id.clone(),
                    detail: (pos != crate::check::NO_POS).then(|| {
                        let mut positions = vec![crate::check::NO_POS; crate::anomaly::N_CODES];
                        positions[Code::PromptMismatch.index()] = pos;
                        crate::flagged::FlagDetail {
                            positions,
                            completion: (r.lengths.prompt, r.lengths.total),
                            boundaries: Vec::new(),
                            repetition: None,
                            cut: None,
                        }
                    }),
                    ..FlaggedSample::default()
                });
            }
        }
        reports.push(report);
    }
    flagged.sort_by_key(|f| f.row);
    (flagged, reports)
}

#[cfg(test)]
mod cost_tests;
#[cfg(test)]
mod tests;

/// The prompt record a sample pairs with, as `show` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct PairedRecord {
    pub path: String,
    pub line: u32,
    /// `id` or `line`.
    pub matched_by: String,
    /// The record's JSON line.
    pub record: String,
    /// The record's conversation shape (system prompt, user and assistant turns) agrees with the sample's.
    pub shape_agrees: bool,
    /// With an encoder: `match` (the record renders to exactly the sample's prompt), `differ`, or
    /// `not compared` (see `note`); without one, `not compared`.
    pub tokens: String,
    /// With `differ`: the first token where the rendering and the sample differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_difference: Option<u32>,
    /// The record's rendered and tokenized prompt, when it was compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rendered: Option<Vec<u32>>,
    /// Why the tokens were not compared, when they were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The record of the prompts file that pairs with global row `row` of `corpus` (found beside its shards, or
/// `explicit`), with whether its shape agrees and, given `encoder` (or the reason it could not be loaded),
/// whether it renders to exactly the sample's prompt, as `scan` decides it. `None` when no prompts file pairs
/// with the sample's input; `Some` with an empty `record` when the file has no record for it.
pub fn paired_record(
    corpus: &Corpus,
    profile: &Profile,
    explicit: &[PathBuf],
    row: u64,
    encoder: std::result::Result<Option<Arc<dyn RecordEncoder>>, String>,
) -> Result<Option<PairedRecord>> {
    let (encoder, mut note) = match encoder {
        Ok(e) => (e, None),
        Err(why) => (None, Some(why)),
    };
    let Some(mut pairing) = Pairing::of(corpus, explicit, encoder.clone())? else {
        return Ok(None);
    };
    let (k, _) = corpus.locate(row)?;
    let Some(set_index) = pairing.source_set[k] else {
        return Ok(None);
    };
    // Re-read the one file that pairs, keeping its lines.
    let set = &pairing.sets[set_index as usize];
    let full = PromptSet::read(&set.path, set.dir.clone(), set.category.clone(), true)?;
    pairing.sets[set_index as usize] = full;
    let sample = corpus
        .samples(row, row + 1)?
        .pop()
        .ok_or_else(|| crate::error::Error::Usage(format!("row {row} is out of range")))?;
    let mut scratch = Scratch::default();
    let mut counts = vec![0u64; profile.specials.len()];
    let mask = sample.mask.as_deref().map(crate::token::MaskSlice::U8);
    crate::check::check_sample(
        profile,
        &sample.ids,
        sample.prompt_len,
        mask,
        &mut scratch,
        &mut counts,
    );
    let mut shape = PromptShape::default();
    let fact = pair_sample(
        &pairing,
        profile,
        k,
        row,
        sample.sample_id.as_ref(),
        &sample.ids,
        sample.prompt_len,
        &scratch,
        &mut shape,
    );
    let set = &pairing.sets[set_index as usize];
    Ok(fact.map(|f| {
        let rec = f.record.map(|r| &set.records[r as usize]);
        let raw = rec.and_then(|r| r.raw.as_deref());
        let diff = f.fits[SHIFT_WINDOW].first_diff;
        let rendered = match (&encoder, raw) {
            (Some(enc), Some(raw)) if diff != NOT_RENDERED => match enc.encode(raw) {
                Ok(ids) => Some(ids),
                Err(e) => {
                    note = Some(e.to_string());
                    None
                }
            },
            _ => None,
        };
        if let (Some(_), Some(r), None) = (&encoder, rec.filter(|r| r.too_large), &note) {
            note = Some(format!(
                "the record (line {}) is larger than {} bytes: not rendered ({}=BYTES raises the limit)",
                r.line,
                records::max_record_bytes().unwrap_or(records::MAX_RECORD_BYTES),
                records::MAX_RECORD_BYTES_VAR
            ));
        }
        if encoder.is_some() && rec.is_some() && diff == NOT_RENDERED && note.is_none() {
            note =
                Some("the record could not be rendered with the tokenizer's chat template".into());
        }
        if encoder.is_none() && note.is_none() {
            note = Some("no tokenizer with a chat template was given".into());
        }
        let tokens = match (&rendered, diff) {
            (Some(_), TOKENS_MATCH) => "match",
            (Some(_), _) => "differ",
            _ => "not compared",
        };
        PairedRecord {
            path: set.path.display().to_string(),
            line: rec.map_or(0, |r| r.line),
            matched_by: if f.by_id { "id" } else { "line" }.into(),
            record: raw.unwrap_or("").to_string(),
            shape_agrees: f.fits[SHIFT_WINDOW].shape,
            tokens: tokens.into(),
            first_difference: (tokens == "differ").then_some(diff),
            note: rendered.is_none().then_some(note).flatten(),
            rendered,
        }
    }))
}
