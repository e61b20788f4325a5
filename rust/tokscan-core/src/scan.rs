//! The parallel scan: open the corpus (validating headers and schemas up front), plan its units (Parquet
//! row groups, NumPy sample ranges, whatever each source chooses), check every unit on a rayon pool, merge
//! the partial summaries in unit order and build the report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rayon::prelude::*;

use crate::anomaly::Code;
use crate::check::{check_sample, Scratch};
use crate::corpus::{Corpus, Unit};
use crate::error::{Error, Result};
use crate::policy::Policy;
use crate::profile::Profile;
use crate::repetition::ngram_coverage;
use crate::report::{build_report, InputInfo, Report};
use crate::source::{with_tokens, Batch, ColumnNames, Finding, Finish, FromTokens};
use crate::summary::{FlagDetail, SampleRecord, Summary, MAX_BOUNDARIES};
use crate::token::{hash_ids, TokenId};

#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    pub columns: ColumnNames,
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Severity overrides, ignores, tolerances and `fail_on`: the report's statuses and verdict.
    pub policy: Policy,
    /// Compute each completion's repeated 10-gram coverage (`ngram_coverage` in the report). Off by
    /// default: it costs ~20 % of a single-thread Parquet scan (benches/README.md).
    pub ngram_coverage: bool,
}

/// Live counters a caller can poll from another thread, and the cancel switch.
#[derive(Debug, Default)]
pub struct Progress {
    pub units_total: AtomicU64,
    pub units_done: AtomicU64,
    pub samples: AtomicU64,
    pub tokens: AtomicU64,
    pub tokens_total: AtomicU64,
    cancel: AtomicBool,
}

impl Progress {
    /// Asks a running scan to stop; it returns `Error::Interrupted` soon after.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// True once cancelled. Very cheap: checked once per batch of rows.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// Scans `paths` and returns the report.
pub fn scan(
    paths: &[String],
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
) -> Result<Report> {
    let (summary, inputs) = scan_summary(paths, profile, opts, progress)?;
    if summary.records.is_empty() {
        let list = inputs
            .iter()
            .map(|i| i.path.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Error::Usage(format!(
            "no samples found in {list}: nothing to check"
        )));
    }
    Ok(build_report(
        summary,
        profile,
        inputs,
        &opts.policy,
        opts.ngram_coverage,
    ))
}

/// Scans `paths` into a merged (not yet finalized) summary plus the input descriptions.
pub fn scan_summary(
    paths: &[String],
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
) -> Result<(Summary, Vec<InputInfo>)> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .thread_name(|i| format!("tokscan-{i}"))
        .build()
        .map_err(|e| Error::Usage(format!("cannot start worker threads: {e}")))?;
    pool.install(|| {
        let corpus = Corpus::open(paths, &opts.columns)?;
        let units = corpus.units();
        progress
            .units_total
            .store(units.len() as u64, Ordering::Relaxed);
        let total_tokens: u64 = corpus.sources.iter().filter_map(|s| s.tokens_hint()).sum();
        progress.tokens_total.store(total_tokens, Ordering::Relaxed);
        // A failing unit stops the others (through the cancel flag); the error reported is the first real one
        // in unit order, not an "interrupted" of a unit that was merely stopped.
        let parts: Vec<Result<Summary>> = units
            .par_iter()
            .map(|u| {
                let r = scan_unit(&corpus, u, profile, progress, opts.ngram_coverage);
                if matches!(r, Err(ref e) if !matches!(e, Error::Interrupted)) {
                    progress.cancel();
                }
                r
            })
            .collect();
        if let Some(e) = parts
            .iter()
            .position(|r| matches!(r, Err(e) if !matches!(e, Error::Interrupted)))
        {
            return Err(parts
                .into_iter()
                .nth(e)
                .expect("index in range")
                .expect_err("an error"));
        }
        let parts: Vec<Summary> = parts.into_iter().collect::<Result<_>>()?;
        let mut summary = Summary::new(profile.specials.len());
        for p in parts {
            summary.merge(p);
        }
        let mut infos: Vec<InputInfo> = corpus
            .sources
            .iter()
            .map(|s| InputInfo {
                path: s.path().display().to_string(),
                format: s.format().name().into(),
                layout: s.layout(),
                samples: 0,
                tokens: 0,
            })
            .collect();
        for r in &summary.records {
            let info = &mut infos[r.source as usize];
            info.samples += 1;
            info.tokens += u64::from(r.lengths.total);
        }
        Ok((summary, infos))
    })
}

struct UnitCtx<'a> {
    profile: &'a Profile,
    source: u32,
    default_category: &'a str,
    summary: Summary,
    scratch: Scratch,
    next_row: u64,
    coverage: bool,
}

/// Test-only switch: with this variable set, every work unit panics, so tests can prove that a panic on a
/// worker thread reaches Python as an exception and the CLI as a one-line error.
pub const PANIC_SWITCH: &str = "TOKSCAN_TEST_PANIC";

fn scan_unit(
    corpus: &Corpus,
    unit: &Unit,
    profile: &Profile,
    progress: &Progress,
    coverage: bool,
) -> Result<Summary> {
    if std::env::var_os(PANIC_SWITCH).is_some() {
        panic!("{PANIC_SWITCH} is set: deliberate panic in a scan worker");
    }
    let mut ctx = UnitCtx {
        profile,
        source: unit.source as u32,
        default_category: corpus.default_category(unit.source),
        summary: Summary::new(profile.specials.len()),
        scratch: Scratch::default(),
        next_row: unit.base_row,
        coverage,
    };
    let mut on_batch = |b: &Batch<'_>| -> Result<()> {
        if progress.cancelled() {
            return Err(Error::Interrupted);
        }
        let tokens = check_batch(&mut ctx, b);
        progress
            .samples
            .fetch_add(b.rows() as u64, Ordering::Relaxed);
        progress.tokens.fetch_add(tokens, Ordering::Relaxed);
        Ok(())
    };
    corpus.sources[unit.source].scan_unit(unit.index, &mut on_batch)?;
    progress.units_done.fetch_add(1, Ordering::Relaxed);
    Ok(ctx.summary)
}

/// Adds what the source found about a row: a malformed line is only that (its empty sequence says nothing
/// else); a finish reason is checked against whether the completion ended.
fn apply_finding(facts: &mut crate::check::SampleFacts, found: Finding) {
    if let Some(line) = found.malformed_line {
        facts.flags = Code::MalformedLine.bit();
        facts.positions = [crate::check::NO_POS; crate::anomaly::N_CODES];
        facts.positions[Code::MalformedLine.index()] = line;
        return;
    }
    let truncated = facts.flags & Code::Truncated.bit() != 0;
    let empty = facts.flags & Code::EmptyCompletion.bit() != 0;
    let mismatch = match found.finish {
        Finish::Length => !truncated && !empty,
        Finish::Stop => truncated,
        Finish::Unknown => false,
    };
    if mismatch {
        facts.flags |= Code::FinishReasonMismatch.bit();
    }
    if found.count_mismatch {
        facts.flags |= Code::TokenCountMismatch.bit();
    }
}

/// Checks every row of a batch; returns the number of tokens seen.
fn check_batch(ctx: &mut UnitCtx<'_>, b: &Batch<'_>) -> u64 {
    with_tokens!(b.ids.values, v => check_rows(ctx, b, v))
}

fn check_rows<T: TokenId + PartialEq + FromTokens>(
    ctx: &mut UnitCtx<'_>,
    b: &Batch<'_>,
    values: &[T],
) -> u64 {
    let prompt = b.prompt.map(|p| {
        (
            T::pick(p.values).expect("prompt and output share a type"),
            p.offsets,
        )
    });
    let mut concat: Vec<T> = Vec::new();
    let mut tokens = 0u64;
    for i in 0..b.rows() {
        let null = b.null_rows.is_some_and(|n| n[i]);
        let out = if null {
            &values[..0]
        } else {
            &values[b.ids.offsets.range(i)]
        };
        let (seq, prompt_len) = match prompt {
            Some(_) if null => (out, Some(0)),
            Some((pv, po)) => {
                let pr = po.range(i);
                concat.clear();
                concat.extend_from_slice(&pv[pr.clone()]);
                concat.extend_from_slice(out);
                (&concat[..], Some(pr.len()))
            }
            None => (out, None),
        };
        let mask = b.mask.map(|m| m.values.row(m.offsets.range(i)));
        let cat_name = b
            .categories
            .and_then(|c| c[i].as_deref())
            .unwrap_or(ctx.default_category);
        let category = ctx.summary.category_index(cat_name);
        let counts = &mut ctx.summary.special_counts[category as usize];
        let mut facts = check_sample(ctx.profile, seq, prompt_len, mask, &mut ctx.scratch, counts);
        if let Some(found) = b.findings.map(|f| f[i]) {
            apply_finding(&mut facts, found);
        }
        let (cs, ce) = (facts.completion.0 as usize, facts.completion.1 as usize);
        let row = ctx.next_row;
        ctx.next_row += 1;
        tokens += seq.len() as u64;
        ctx.summary.records.push(SampleRecord {
            row,
            source: ctx.source,
            category,
            lengths: facts.lengths,
            flags: facts.flags,
            completion_hash: if ce > cs { hash_ids(&seq[cs..ce]) } else { 0 },
            completion_len: (ce.saturating_sub(cs)) as u32,
            ngram_covered: if ctx.coverage && ce > cs {
                ngram_coverage(&seq[cs..ce])
            } else {
                0
            },
            sample_id: b.sample_ids.and_then(|s| s[i].as_deref()).map(Box::from),
        });
        if facts.flags != 0 {
            let boundaries = ctx
                .scratch
                .events
                .iter()
                .take(MAX_BOUNDARIES)
                .copied()
                .collect();
            ctx.summary.details.push(FlagDetail {
                row,
                positions: facts.positions,
                completion: facts.completion,
                boundaries,
                repetition: facts.repetition.map(|l| (l.period as u32, l.span as u32)),
            });
        }
    }
    tokens
}
