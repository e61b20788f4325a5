//! The hidden-state pass (`--hidden-states`): the EAGLE-3 hidden-state dump made from the corpus, checked
//! against it ([`crate::hidden`]).

use super::{Findings, Finishing, Pass};
use crate::anomaly::Code;
use crate::corpus::Corpus;
use crate::error::Result;
use crate::hidden::check::{run, Options, Outcome};
use crate::profile::Profile;
use crate::progress::Progress;
use crate::report_schema::Field;

/// The report section's key.
pub const NAME: &str = "hidden_states";

/// Its row of the report's field table ([`crate::report_schema`]).
pub const SECTION: Field = Field {
    names: &[NAME],
    shown: r#"`hidden_states`"#,
    always: false,
    content: r#"with `--hidden-states DIR` (absent otherwise; see *Hidden-state dumps*): `dir`, `layout` (`specforge`, `angelslim`, `speculators`, `speculators_legacy`, `model_optimizer`), `layout_from` (`names and keys` or `--hidden-layout`), `files`, `bytes`, `containers` {`torch_zip` / `torch_zip_gz` / `safetensors` → files}, `skipped` [[path, reason]] (the first 20) and `skipped_count`, `pairing` {`rule` (`index`, `sample_id` or `content`), `by_rule` {rule → files}, `note`, `unpaired` (the first 20 files no sample owns) and `unpaired_count`, `samples_without_file`}, `dtype`, `hidden_size` (D), `aux_width` (k·D), `layers` (of a `[N, layers, D]` or list dump), `positions` (stored), `bytes_per_token`, `max_length` (when captures were cut there), `norm` {`convention` (`before` / `after`, null without `--target-model`), `decided_by`, `trainer_expects`, `row_rms` and `unweighted_rms` (10/50/90 % quantiles of the files' median), `files_departing`}, `agreement` with `--target-model` {`target`, `read` (the tensors read), `norm_applied`, `samples`, `positions`, `agreed`, `min`, `categories` {name → {`samples`, `positions`, `agreed`, `rate`, `quantiles` (10/50/90 % of the per-sample rates)}}}, `bytes_checked`"#,
};
/// The pass's place in the registry ([`crate::options`]).
pub const RANK: u16 = 4;
/// The key of a flagged sample's evidence.
pub const EVIDENCE: &str = "hidden_states";

pub struct HiddenStates<'a> {
    pub options: &'a Options,
}

impl Pass for HiddenStates<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn reads_corpus(&self) -> bool {
        true
    }

    fn finish(&self, at: &Finishing<'_>) -> Result<Findings> {
        checked(at.corpus(NAME)?, at.profile, self.options, at.progress)
    }
}

/// The dump's checks as the pass's findings.
fn checked(
    corpus: &Corpus,
    profile: &Profile,
    options: &Options,
    progress: &Progress,
) -> Result<Findings> {
    let Outcome {
        flagged,
        corpus_counts,
        report,
    } = run(corpus, profile, options, progress)?;
    let mut found = Findings::new(NAME, Some(&report));
    found.flagged = flagged
        .into_iter()
        .map(|(mut sample, evidence)| {
            super::attach(&mut sample, RANK, EVIDENCE, &evidence);
            sample
        })
        .collect();
    found.corpus_counts = corpus_counts;
    if report.agreement.is_none() {
        for c in [Code::HiddenDisagree, Code::HiddenConvention] {
            found
                .not_checked
                .push((c, "needs --target-model DIR".to_string()));
        }
    }
    Ok(found)
}

/// The dump's checks in one task of a cluster scan ([`super::in_task`]); the dump is read from
/// `options.dir` on the task's node.
pub fn task(
    sources: &[crate::plan::TaskSource],
    columns: &crate::source::ColumnNames,
    profile: &Profile,
    options: &Options,
) -> Result<Findings> {
    super::in_task(sources, columns, |corpus| {
        checked(corpus, profile, options, &Progress::default())
    })
}
