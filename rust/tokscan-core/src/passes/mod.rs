//! Corpus-wide passes: checks that judge a sample against the rest of the corpus, or against something made
//! from it (a hidden-state dump), once the scan has read every sample. A pass is one module here and one line
//! of the registry ([`crate::options::ScanOptions::passes`]); it finishes from what the scan gathered (the merged
//! [`Partial`], the per-sample records, the corpus open to read rows again) and returns [`Findings`]: flagged
//! rows with their evidence under the pass's key, counts of findings no sample carries, codes it could not
//! check, and its report section. The report, the summary and the flagged list hold these by name, so none of
//! them imports a pass.
//!
//! Both engines run the same passes: the local scan finishes them all in parallel ([`finish_all`]); a cluster
//! scan runs those that read the corpus in tasks of their own (their [`Findings`] travel as bytes) and the
//! driver finishes the others from the merged partial.

pub mod contamination;
pub mod draft_vocab;
pub mod hidden_states;
pub mod near_dup;
pub mod ngram_coverage;
pub mod pairing;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::anomaly::Code;
use crate::corpus::Corpus;
use crate::error::{Error, Result};
use crate::flagged::{Attached, FlaggedSample};
use crate::pass_partial::{Acc, Sampler};
use crate::profile::Profile;
use crate::progress::Progress;
use crate::records::{Records, SampleRecord};
use crate::summary::Partial;

/// What a pass reads when it finishes.
pub struct Finishing<'a> {
    pub profile: &'a Profile,
    /// The whole corpus's merged partial summary.
    pub partial: &'a Partial,
    /// The corpus, open, when the pass runs where it was scanned (`None` in a cluster's driver).
    pub corpus: Option<&'a Corpus>,
    /// Every unit's sample records, in row order (empty in a cluster's driver).
    pub records: &'a [Records],
    pub progress: &'a Progress,
}

impl Finishing<'_> {
    /// The open corpus, for a pass that reads rows again; an internal error where there is none.
    pub fn corpus(&self, pass: &str) -> Result<&Corpus> {
        self.corpus.ok_or_else(|| {
            Error::Usage(format!(
                "the {pass} pass needs the corpus open: it runs in a task of its own on a cluster"
            ))
        })
    }
}

/// A corpus-wide check.
pub trait Pass: Sync {
    /// Its report section's key (and what its findings are known by between processes).
    fn name(&self) -> &'static str;
    /// Refuses, before the scan starts, what the pass could not finish (e.g. a memory budget too small for
    /// the corpus), and reads what it needs of the corpus besides its samples. Called where the corpus is
    /// opened (a local scan), not in a cluster's tasks: a pass whose per-sample side needs it has none there.
    fn check(&self, _corpus: &Corpus, _profile: &Profile) -> Result<()> {
        Ok(())
    }
    /// Whether the pass reads the scan's sample records: they are then kept in memory, not spilled, and the
    /// corpus checks list their flagged rows in full (the pass adds to the same rows).
    fn needs_records(&self) -> bool {
        false
    }
    /// Whether the pass reads the corpus again (a cluster runs it in a task of its own).
    fn reads_corpus(&self) -> bool {
        false
    }
    /// Its keyed form: the keys of a sample's record that the corpus checks route to buckets by hash, so that
    /// all the rows of a key meet in one bucket ([`crate::corpus_checks::route`]; on a cluster the pass's tasks
    /// read one bucket's keys from every task, [`crate::corpus_checks::Bucket::take_keyed`]). Default: none.
    fn keys(&self, _record: &SampleRecord, _out: &mut Vec<u64>) {}
    /// Its per-sample side, made once per scanning process: `None` when it looks at no sample while the corpus
    /// is scanned ([`crate::pass_partial`]).
    fn sampler<'s>(&'s self, _profile: &'s Profile) -> Result<Option<Box<dyn Sampler + 's>>> {
        Ok(None)
    }
    /// Its per-sample side's partial, sent by another process as bytes ([`crate::pass_partial::decode`]).
    fn decode(&self, _bytes: &[u8]) -> Result<Box<dyn Acc>> {
        Err(Error::Usage(format!(
            "internal: the {} pass keeps no partial",
            self.name()
        )))
    }
    /// What the pass found in the scanned corpus.
    fn finish(&self, at: &Finishing<'_>) -> Result<Findings>;
}

/// What a pass found, as the report takes it.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Findings {
    /// The pass's [`Pass::name`].
    pub pass: String,
    /// Flagged samples, sorted by row, each with the pass's evidence attached ([`attach`]).
    pub flagged: Vec<FlaggedSample>,
    /// Findings of the corpus that no sample carries, by code.
    pub corpus_counts: Vec<(Code, u64)>,
    /// Codes the pass could not check, with why.
    pub not_checked: Vec<(Code, String)>,
    /// The report section (JSON), under [`Findings::pass`]; none when there is nothing to show.
    pub section: Option<String>,
    /// Sections of the report's per-category statistics, under [`Findings::pass`]: `(category, JSON)`, and
    /// the whole corpus's under the empty name.
    #[serde(default)]
    pub by_category: Vec<(String, String)>,
}

impl Findings {
    /// The findings with `section` serialized.
    pub fn new(pass: &str, section: Option<&impl Serialize>) -> Findings {
        Findings {
            pass: pass.to_string(),
            section: section.map(json),
            ..Findings::default()
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        crate::wire::encode(self)
    }

    /// Findings sent by another process; their JSON (section, evidence) is checked, so the report writes it as
    /// it is.
    pub fn from_bytes(b: &[u8]) -> Result<Findings> {
        let found: Findings = crate::wire::decode(b, "pass findings")?;
        let texts = found
            .section
            .iter()
            .chain(found.by_category.iter().map(|(_, j)| j))
            .chain(
                found
                    .flagged
                    .iter()
                    .flat_map(|f| f.attached.iter().map(|a| &a.json)),
            );
        for text in texts {
            serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| {
                Error::Usage(format!(
                    "corrupt pass findings ({e}): was it written by this version of tokscan?"
                ))
            })?;
        }
        Ok(found)
    }
}

/// The internal error of a pass whose per-sample side ran but whose partial is not in the merged summary.
pub fn missing(pass: &str) -> Error {
    Error::Usage(format!(
        "internal: the {pass} pass's partial is missing from the merged summary"
    ))
}

/// `value` as JSON text (plain data: it cannot fail).
pub fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("plain data")
}

/// A pass's evidence about a flagged sample, under `key` in the report's entry; `rank` orders the keys of a
/// sample several passes flagged (a pass's place in the registry).
pub fn attach(sample: &mut FlaggedSample, rank: u16, key: &str, evidence: &impl Serialize) {
    sample.attach(Attached::of(rank, key, evidence, false));
}

/// The report-field rows of the passes' sections, in the registry's order (each pass documents its own).
pub const SECTIONS: [&crate::report_schema::Field; 4] = [
    &contamination::SECTION,
    &near_dup::SECTION,
    &draft_vocab::SECTION,
    &hidden_states::SECTION,
];

/// Every row of the report's field table ([`crate::report_schema`]), the passes' included.
pub fn report_fields() -> Vec<&'static crate::report_schema::Field> {
    crate::report_schema::fields(&SECTIONS)
}

/// Decodes each pass's partial sent by another process, by the pass's name.
pub fn decoders<'a>(
    passes: &'a [Box<dyn Pass + '_>],
) -> impl Fn(&str, &[u8]) -> Option<Result<Box<dyn Acc>>> + 'a {
    move |name, bytes| {
        passes
            .iter()
            .find(|p| p.name() == name)
            .map(|p| p.decode(bytes))
    }
}

/// Finishes `passes` in parallel, taking the findings a cluster's tasks already made (`done`, by pass name)
/// as they are; returns them in the passes' order.
pub fn finish_all(
    passes: &[Box<dyn Pass + '_>],
    at: &Finishing<'_>,
    mut done: Vec<Findings>,
) -> Result<Vec<Findings>> {
    let todo: Vec<&(dyn Pass + '_)> = passes
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| !done.iter().any(|d| d.pass == p.name()))
        .collect();
    // A pass that fails stops the others (through the cancel flag the long ones poll); the error returned is
    // the first real one in the passes' order.
    let made: Vec<Result<Findings>> = todo
        .par_iter()
        .map(|p| at.progress.stop_on_error(p.finish(at)))
        .collect();
    done.extend(crate::progress::first_error(made)?);
    let mut out = Vec::with_capacity(passes.len());
    for p in passes {
        match done.iter().position(|d| d.pass == p.name()) {
            Some(i) => out.push(done.swap_remove(i)),
            None => {
                return Err(Error::Usage(format!(
                    "internal: no findings of the {} pass",
                    p.name()
                )))
            }
        }
    }
    // Findings no pass of these options claims (a cluster task's options disagreeing with the driver's) would
    // vanish from the report: refused.
    if let Some(d) = done.first() {
        return Err(Error::Usage(format!(
            "internal: findings of the {} pass, which these options do not run",
            d.pass
        )));
    }
    Ok(out)
}

/// Runs `f` in a cluster task on the corpus the plan was made from (`sources`: [`crate::plan::Plan::sources`];
/// inputs in an object store staged whole in a temporary directory at the versions the plan listed), never
/// one discovered again, so that its rows are the scan's; an error names an object's URL.
pub fn in_task<T>(
    sources: &[crate::plan::TaskSource],
    columns: &crate::source::ColumnNames,
    f: impl FnOnce(&Corpus) -> Result<T>,
) -> Result<T> {
    let staging = tempfile::Builder::new()
        .prefix("tokscan-pass-")
        .tempdir()
        .map_err(|e| Error::io(&std::env::temp_dir(), e))?;
    let (corpus, places) = crate::plan::open_planned(sources, columns, staging.path())?;
    f(&corpus).map_err(|e| crate::remote::named_by_url(e, &places))
}
