//! The hidden-state pass (`--hidden-states`): the EAGLE-3 hidden-state dump made from the corpus, checked
//! against it ([`crate::hidden`]).

use super::{Findings, Finishing, Pass};
use crate::anomaly::Code;
use crate::corpus::Corpus;
use crate::error::Result;
use crate::hidden::check::{run, Options, Outcome};
use crate::profile::Profile;
use crate::progress::Progress;

/// The report section's key.
pub const NAME: &str = "hidden_states";
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
