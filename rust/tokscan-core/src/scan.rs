//! The parallel scan: open the corpus (validating headers and schemas up front), plan its units (Parquet
//! row groups, NumPy sample ranges, whatever each source chooses), check every unit on a rayon pool, merge
//! the partial summaries in unit order and build the report.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use rayon::prelude::*;

use crate::anomaly::Code;
use crate::check::{check_sample, Scratch};
use crate::corpus::Corpus;
use crate::corpus_checks;
use crate::error::{Error, Result};
use crate::flagged::{FlagDetail, FlaggedSample, MAX_BOUNDARIES};
use crate::pass_partial::{SampleOut, SampleView, Sampler};
use crate::passes::{Findings, Finishing, Pass};
use crate::plan::Task;
use crate::profile::Profile;
use crate::records::{Records, SampleRecord};
use crate::report::{build_report, InputInfo, Report, Sections, SkippedInfo};
use crate::source::{self, with_tokens, Batch, FromTokens, Source, DEFAULT_CATEGORY};
use crate::spill::{Held, Spill};
use crate::summary::{CategoriesPool, Partial};
use crate::token::{hash_ids, TokenId};

pub use crate::options::{ScanOptions, FLAGGED_DETAIL};
pub use crate::progress::Progress;

/// Scans `paths` and returns the report.
pub fn scan(
    paths: &[String],
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
) -> Result<Report> {
    scan_keeping(paths, profile, opts, progress).map(|(report, _)| report)
}

/// Scans `paths` and returns the report with the corpus it read, open, so that its samples can be fetched,
/// decoded or probed afterwards without discovering and opening the inputs again.
pub fn scan_keeping(
    paths: &[String],
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
) -> Result<(Report, Corpus)> {
    let (started, t0) = (std::time::SystemTime::now(), std::time::Instant::now());
    with_pool(opts.threads, || {
        let corpus = Corpus::open(paths, &opts.columns)?;
        let report = scan_in_pool(&corpus, profile, opts, progress, started, t0)?;
        Ok((report, corpus))
    })
}

/// Scans a corpus already opened and returns the report (`opts.columns` is not looked at: the corpus is read
/// with the columns it was opened with).
pub fn scan_opened(
    corpus: &Corpus,
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
) -> Result<Report> {
    let since = (std::time::SystemTime::now(), std::time::Instant::now());
    scan_opened_since(corpus, profile, opts, progress, since)
}

/// [`scan_opened`], with the report's `run` started at `since` (when the corpus began to open, for a caller
/// that opened it for the scan: the run is then the opening and the scan, as [`scan_keeping`]'s).
pub fn scan_opened_since(
    corpus: &Corpus,
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
    (started, t0): (std::time::SystemTime, std::time::Instant),
) -> Result<Report> {
    with_pool(opts.threads, || {
        scan_in_pool(corpus, profile, opts, progress, started, t0)
    })
}

/// The local scan of `corpus` on the current rayon pool.
fn scan_in_pool(
    corpus: &Corpus,
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
    started: std::time::SystemTime,
    t0: std::time::Instant,
) -> Result<Report> {
    // The passes see the corpus before the scan: what one could not finish (a memory budget too small for the
    // corpus) is refused, and pairing reads the prompts files.
    let passes = opts.passes();
    for p in &passes {
        p.check(corpus, profile)?;
    }
    // Passes that read the records look at every record together; otherwise records past the budget are
    // spilled to disk (`spill`). The budget is read either way: a bad value is an error in every scan.
    let budget = crate::spill::budget()?;
    let whole = passes.iter().any(|p| p.needs_records());
    let spill = (!whole).then_some(budget).flatten().map(Spill::new);
    let (partial, held) = scan_corpus(corpus, &passes, profile, opts, progress, spill.as_ref())?;
    if partial.n_samples() == 0 {
        return Err(no_samples(&InputInfo::of_corpus(corpus)));
    }
    let (corpus_flagged, records) = match &spill {
        Some(s) if s.spilled() => (s.corpus_checks(&partial, &held)?, Vec::new()),
        _ => {
            let records = Spill::into_memory(held);
            // Passes that read the records add entries for the same rows later, to the full list.
            (corpus_checks::local(&partial, &records, !whole)?, records)
        }
    };
    let mut report = finish(
        partial,
        corpus_flagged,
        &records,
        profile,
        InputInfo::of_corpus(corpus),
        opts,
        &passes,
        Some(corpus),
        Vec::new(),
        progress,
    )?;
    report.skipped = SkippedInfo::of_corpus(corpus, false);
    report.run = Some(crate::report::RunInfo::of(
        &opts.run,
        started,
        t0.elapsed().as_secs_f64(),
        "local",
        rayon::current_num_threads(),
    ));
    Ok(report)
}

/// The report of a scanned corpus, from its merged partial, what the corpus-wide checks flagged
/// ([`corpus_checks::local`] or [`Spill::corpus_checks`]), and what the corpus-wide `passes` (the scan's:
/// [`ScanOptions::passes`]) found: those in `done` (a cluster's tasks ran them) as they are, the others
/// finished here, in parallel, from the partial, the records and the corpus (`None` on a cluster's driver).
#[allow(clippy::too_many_arguments)]
pub fn finish(
    mut partial: Partial,
    mut corpus_flagged: corpus_checks::Found,
    records: &[Records],
    profile: &Profile,
    inputs: Vec<InputInfo>,
    opts: &ScanOptions,
    passes: &[Box<dyn Pass + '_>],
    corpus: Option<&Corpus>,
    done: Vec<Findings>,
    progress: &Progress,
) -> Result<Report> {
    if partial.n_samples() == 0 {
        return Err(no_samples(&inputs));
    }
    // The passes' partials a cluster's tasks sent are still bytes: decoded by their passes.
    partial
        .passes
        .decode_with(&crate::passes::decoders(passes))?;
    let at = Finishing {
        profile,
        partial: &partial,
        corpus,
        records,
        progress,
    };
    let found = crate::passes::finish_all(passes, &at, done)?;
    // Passes flag rows the other checks may have flagged too: those lists are full.
    let full = &mut corpus_flagged.full;
    let (mut corpus_counts, mut not_checked, mut sections) = (Vec::new(), Vec::new(), Vec::new());
    let mut by_category = Vec::new();
    for f in found {
        by_category.extend(
            f.by_category
                .into_iter()
                .map(|(c, j)| (f.pass.clone(), c, j)),
        );
        *full = crate::flagged::merge_by_row(std::mem::take(full), f.flagged);
        corpus_counts.extend(f.corpus_counts);
        not_checked.extend(f.not_checked);
        sections.extend(f.section.map(|s| (f.pass, s)));
    }
    let mut report = build_report(
        partial,
        corpus_flagged,
        profile,
        inputs,
        &opts.policy,
        &corpus_counts,
    );
    for (pass, category, json) in by_category {
        let stats = match category.as_str() {
            "" => Some(&mut report.overall),
            name => report.categories.get_mut(name),
        };
        let stats = stats.ok_or_else(|| {
            Error::Usage(format!(
                "internal: the {pass} pass has statistics of category {category:?}, which the report lacks"
            ))
        })?;
        stats.sections.push(&pass, json)?;
    }
    report.sections = Sections::of(sections)?;
    for (c, why) in not_checked {
        report.not_checked.insert(c.as_str().to_string(), why);
    }
    Ok(report)
}

/// The usage error for a corpus with no sample.
pub fn no_samples(inputs: &[InputInfo]) -> Error {
    let list = inputs
        .iter()
        .map(|i| i.path.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    Error::Usage(format!("no samples found in {list}: nothing to check"))
}

/// Scans every unit of an opened corpus on the current pool: the merged partial summary and the per-unit
/// sample records (in row order), everything [`finish`] needs; `passes` (checked against the corpus,
/// [`Pass::check`]) see every sample.
pub fn scan_corpus(
    corpus: &Corpus,
    passes: &[Box<dyn Pass + '_>],
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
    spill: Option<&Spill>,
) -> Result<(Partial, Vec<Held>)> {
    let units: Vec<UnitRef<'_>> = corpus
        .units()
        .into_iter()
        .map(|u| UnitRef {
            source: corpus.sources[u.source].as_ref(),
            source_index: u.source as u32,
            default_category: corpus.default_category(u.source),
            index: u.index,
            base_row: u.base_row,
        })
        .collect();
    let total_tokens: u64 = corpus.sources.iter().filter_map(|s| s.tokens_hint()).sum();
    scan_units(&units, passes, profile, opts, progress, total_tokens, spill)
}

/// Scans one task of a cluster scan ([`crate::plan`]): opens only the task's inputs and scans its units.
pub fn scan_task(
    task: &Task,
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
) -> Result<(Partial, Records)> {
    // Sources in an object store: staged sparse here, their units' bytes fetched before the scan reads them.
    let staging = match task.sources.iter().any(|s| s.remote.is_some()) {
        true => Some(
            tempfile::Builder::new()
                .prefix("tokscan-task-")
                .tempdir()
                .map_err(|e| Error::io(&std::env::temp_dir(), e))?,
        ),
        false => None,
    };
    let mut task = std::borrow::Cow::Borrowed(task);
    let mut places: Vec<(PathBuf, String)> = Vec::new();
    let mut run = || {
        let mut sparse = Vec::new();
        if let Some(dir) = &staging {
            for (i, s) in task.to_mut().sources.iter_mut().enumerate() {
                if let Some(r) = &s.remote {
                    let here = dir.path().join(i.to_string());
                    places.push((here.clone(), r.url_base.clone()));
                    let (path, staged) = r.stage(&here, true)?;
                    s.path = path;
                    sparse.extend(staged.sparse);
                }
            }
        }
        scan_task_files(&task, profile, opts, progress, &sparse)
    };
    run().map_err(|e| crate::remote::named_by_url(e, &places))
}

/// [`scan_task`] of the local files `task` names, some of them staged sparse (`sparse`).
fn scan_task_files(
    task: &Task,
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
    sparse: &[crate::remote::Sparse],
) -> Result<(Partial, Records)> {
    with_pool(opts.threads, || {
        let opened: Vec<Result<Box<dyn Source>>> = task
            .sources
            .par_iter()
            .map(|s| source::open(&s.input(), &opts.columns))
            .collect();
        let sources: Vec<Box<dyn Source>> = opened.into_iter().collect::<Result<_>>()?;
        let spans: Vec<&[source::UnitSpan]> = sources.iter().map(|s| s.units()).collect();
        let mut units = Vec::with_capacity(task.units.len());
        for u in &task.units {
            let k = u.source as usize;
            let (spec, src) = (&task.sources[k], sources[k].as_ref());
            // The plan was made from the same files: a unit that is no longer there means they changed.
            let span = spans[k].get(u.index as usize).copied();
            if span.map(|s| s.rows) != Some(u.rows) {
                return Err(Error::invalid(
                    src.path(),
                    "changed since the scan was planned (its row groups / units differ)"
                        .to_string(),
                ));
            }
            units.push(UnitRef {
                source: src,
                source_index: spec.index,
                default_category: spec.hive_category.as_deref().unwrap_or(DEFAULT_CATEGORY),
                index: u.index as usize,
                base_row: u.base_row,
            });
        }
        if !sparse.is_empty() {
            let mut wanted = Vec::new();
            for u in &units {
                let span = u.source.units()[u.index];
                let rows = span.first_row..span.first_row + span.rows;
                wanted.extend(crate::remote::needed(sparse, u.source, rows)?);
            }
            crate::remote::fill_files(sparse, &wanted)?;
        }
        let passes = opts.passes();
        let (partial, held) = scan_units(&units, &passes, profile, opts, progress, 0, None)?;
        let mut all = Records::default();
        for r in Spill::into_memory(held) {
            all.append(r);
        }
        Ok((partial, all))
    })
}

/// The most worker threads a scan starts: 4 × the cores (more only adds stacks and contention; an absurd
/// `--threads 99999999999` spawned threads without end). A larger request is capped to this.
pub fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `f` on a rayon pool of `threads` workers (0: one per core, capped at [`max_threads`]).
pub fn with_pool<T: Send>(threads: usize, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.min(max_threads()))
        .thread_name(|i| format!("tokscan-{i}"))
        .build()
        .map_err(|e| Error::Usage(format!("cannot start worker threads: {e}")))?;
    pool.install(f)
}

/// One unit of work, with what its rows need to know about their source.
struct UnitRef<'a> {
    source: &'a dyn Source,
    source_index: u32,
    default_category: &'a str,
    index: usize,
    base_row: u64,
}

/// Scans units on the current rayon pool: their merged partial summary and their records, in unit order
/// (past `spill`'s budget, in its file).
fn scan_units(
    units: &[UnitRef<'_>],
    passes: &[Box<dyn Pass + '_>],
    profile: &Profile,
    opts: &ScanOptions,
    progress: &Progress,
    tokens_total: u64,
    spill: Option<&Spill>,
) -> Result<(Partial, Vec<Held>)> {
    progress
        .units_total
        .store(units.len() as u64, Ordering::Relaxed);
    progress.tokens_total.store(tokens_total, Ordering::Relaxed);
    let mut samplers = Vec::new();
    for p in passes {
        if let Some(s) = p.sampler(profile)? {
            samplers.push((p.name(), s));
        }
    }
    // A failing unit stops the others (through the cancel flag); the error reported is the first real one
    // in unit order, not an "interrupted" of a unit that was merely stopped.
    let categories = CategoriesPool::default();
    let parts: Vec<Result<(Partial, Held)>> = units
        .par_iter()
        .map(|u| {
            let r =
                scan_unit(u, profile, progress, opts, &categories, &samplers).and_then(|(p, r)| {
                    match spill {
                        Some(s) => Ok((p, s.hold(r)?)),
                        None => Ok((p, Held::Memory(r))),
                    }
                });
            progress.stop_on_error(r)
        })
        .collect();
    let parts = crate::progress::first_error(parts)?;
    let mut partial = Partial::new(profile.specials.len());
    // Reserved once: grown by doubling, the merged list of summarized samples (32 bytes each, 10M at worst
    // for a corpus flagged throughout) would peak at three times its size while reallocating.
    partial.summarized.reserve_exact(
        parts
            .iter()
            .map(|(p, _)| p.summarized.len() + p.flagged.len())
            .sum(),
    );
    let mut records = Vec::with_capacity(parts.len());
    for (p, r) in parts {
        partial.merge(p);
        records.push(r);
    }
    for set in categories.drain() {
        if partial.categories.is_empty() {
            partial.categories = set;
            continue;
        }
        for (name, c) in &set {
            partial.category(name).merge(c);
        }
    }
    for (name, s) in &samplers {
        partial.passes.insert(name, s.gathered());
    }
    Ok((partial, records))
}

struct UnitCtx<'a> {
    profile: &'a Profile,
    source: u32,
    default_category: &'a str,
    partial: Partial,
    records: Records,
    scratch: Scratch,
    next_row: u64,
    /// The passes' per-sample sides, each with its state for this unit.
    samplers: &'a [Named<'a>],
    units: Vec<Box<dyn std::any::Any + Send>>,
}

/// A pass's per-sample side, by the pass's name.
type Named<'a> = (&'static str, Box<dyn Sampler + 'a>);

/// Test-only switch: with this variable set, every work unit panics, so tests can prove that a panic on a
/// worker thread reaches Python as an exception and the CLI as a one-line error.
pub const PANIC_SWITCH: &str = "TOKSCAN_TEST_PANIC";

/// Scans one unit: its partial summary and its records. The partial's per-category statistics are not in it:
/// the unit counts them into a set taken from `categories` and gives the set back ([`CategoriesPool`]); the
/// passes' per-sample sides likewise keep their own states ([`Sampler`]).
fn scan_unit(
    unit: &UnitRef<'_>,
    profile: &Profile,
    progress: &Progress,
    opts: &ScanOptions,
    categories: &CategoriesPool,
    samplers: &[Named<'_>],
) -> Result<(Partial, Records)> {
    if std::env::var_os(PANIC_SWITCH).is_some() {
        panic!("{PANIC_SWITCH} is set: deliberate panic in a scan worker");
    }
    let mut ctx = UnitCtx {
        profile,
        source: unit.source_index,
        default_category: unit.default_category,
        partial: Partial {
            consistency: profile.consistency(),
            detail_limit: opts.flagged_detail,
            categories: categories.take(),
            ..Partial::new(profile.specials.len())
        },
        records: Records::default(),
        scratch: Scratch::default(),
        next_row: unit.base_row,
        samplers,
        units: samplers
            .iter()
            .map(|(_, s)| s.begin(unit.base_row))
            .collect(),
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
    unit.source.unchanged()?;
    unit.source.scan_unit(unit.index, &mut on_batch)?;
    unit.source.unchanged()?;
    progress.units_done.fetch_add(1, Ordering::Relaxed);
    categories.give(std::mem::take(&mut ctx.partial.categories));
    for ((_, s), u) in samplers.iter().zip(ctx.units) {
        s.end(u);
    }
    // The records and summarized samples stay until the report is built: drop the growth slack of their
    // vectors (up to half of each), one unit at a time.
    ctx.records.rows.shrink_to_fit();
    ctx.partial.summarized.shrink_to_fit();
    Ok((ctx.partial, ctx.records))
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
        let mut facts = check_sample(
            ctx.profile,
            seq,
            prompt_len,
            mask,
            &mut ctx.scratch,
            &mut ctx.partial.category(cat_name).special_counts,
        );
        if let Some(found) = b.findings.map(|f| f[i]) {
            crate::check::apply_finding(&mut facts, found);
        }
        // A line its input could not read as a sample is only that: it is counted (rows stay numbered) but
        // neither paired nor measured, and no category statistic takes its empty sequence as a sample's.
        let unread = facts.flags & Code::MalformedLine.bit() != 0;
        let sample_id = b.sample_ids.and_then(|s| s[i].as_ref());
        let (mut attached, mut sketch) = (Vec::new(), None);
        if !ctx.samplers.is_empty() {
            let view = SampleView {
                row: ctx.next_row,
                source: ctx.source,
                sample_id,
                category: cat_name,
                tokens: T::wrap(seq),
                completion: (facts.completion.0 as usize, facts.completion.1 as usize),
                prompt_len,
                mask,
                unread,
                parse: &ctx.scratch,
            };
            let mut out = SampleOut {
                facts: &mut facts,
                attached: &mut attached,
                sketch: &mut sketch,
            };
            for ((_, s), u) in ctx.samplers.iter().zip(ctx.units.iter_mut()) {
                s.sample(u.as_mut(), &view, &mut out);
            }
        }
        let features = crate::check::features::features(ctx.profile, seq, mask, &ctx.scratch);
        let cat = ctx.partial.category(cat_name);
        let (cs, ce) = (facts.completion.0 as usize, facts.completion.1 as usize);
        if unread {
            cat.samples += 1;
        } else {
            cat.add_features(features);
            cat.add_lengths(&facts.lengths);
        }
        cat.add_codes(facts.flags);
        if let Some(c) = facts.cut {
            cat.cut_in[usize::from(c)] += 1;
        }
        let input = ctx.partial.inputs.entry(ctx.source).or_default();
        input.samples += 1;
        input.tokens += u64::from(facts.lengths.total);
        let row = ctx.next_row;
        ctx.next_row += 1;
        tokens += seq.len() as u64;
        let category = ctx.records.category_index(cat_name);
        let (prompt_hash, prompt_len) = ctx.scratch.prompt_key(seq);
        let content = crate::token::content_key(seq);
        ctx.records.rows.push(SampleRecord {
            row,
            source: ctx.source,
            category,
            lengths: facts.lengths,
            completion_hash: if ce > cs { hash_ids(&seq[cs..ce]) } else { 0 },
            completion_len: (ce.saturating_sub(cs)) as u32,
            content,
            sample_id: sample_id.cloned(),
            flags: facts.flags,
            features,
            prompt_hash,
            prompt_len,
            sketch,
        });
        if facts.flags != 0 {
            let boundaries = ctx
                .scratch
                .events
                .iter()
                .take(MAX_BOUNDARIES)
                .map(|e| (e.pos, e.slot))
                .collect();
            ctx.partial.push_flagged(FlaggedSample {
                row,
                source: ctx.source,
                category: cat_name.to_string(),
                lengths: facts.lengths,
                flags: facts.flags,
                content,
                sample_id: sample_id.cloned(),
                detail: Some(FlagDetail {
                    positions: facts.positions.to_vec(),
                    completion: facts.completion,
                    boundaries,
                    repetition: facts.repetition.map(|l| (l.period as u32, l.span as u32)),
                    cut: facts.cut,
                }),
                attached,
                ..FlaggedSample::default()
            });
        }
    }
    tokens
}
