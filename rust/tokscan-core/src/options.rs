//! What a scan is asked to do: the options of the scan and of each corpus-wide pass, and the registry of the
//! passes ([`ScanOptions::passes`]).

use crate::passes::contamination::Contamination;
use crate::passes::draft_vocab::DraftVocab;
use crate::passes::hidden_states::HiddenStates;
use crate::passes::near_dup::NearDup;
use crate::passes::ngram_coverage::NgramCoverage;
use crate::passes::pairing::PromptPairing;
use crate::passes::Pass;
use crate::policy::Policy;
use crate::source::ColumnNames;

#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    pub columns: ColumnNames,
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Severity overrides, ignores, tolerances and `fail_on`: the report's statuses and verdict.
    pub policy: Policy,
    /// Compute each completion's repeated 10-gram coverage ([`crate::passes::ngram_coverage`]). Off by
    /// default: it costs ~20 % of a single-thread Parquet scan (benches/README.md).
    pub ngram_coverage: bool,
    /// Prompt pairing: the prompts files and the tokenizer to render their records with.
    pub pairing: crate::passes::pairing::Options,
    /// Benchmark files to look for (`--contamination`); the index is built by each process that scans.
    pub contamination: Option<crate::passes::contamination::Spec>,
    /// Near-duplicate completions (`--near-dup`): signatures in the scan, then candidates, confirmation and
    /// clusters ([`crate::passes::near_dup`]).
    pub near_dup: Option<crate::passes::near_dup::Params>,
    /// Count the loss-bearing tokens for the draft-vocabulary section of the report (coverage, mapping,
    /// check); `None`: no counting.
    pub vocab: Option<crate::vocab::VocabOptions>,
    /// A hidden-state dump made from the corpus, checked against it (`--hidden-states`, [`crate::hidden`]).
    pub hidden: Option<crate::hidden::check::Options>,
    /// Full detail (positions, boundaries, lengths, ids) for the first this many flagged samples of each code;
    /// the others are kept as (row, codes, category) and listed compactly (`flagged_summarized`). 0: no limit.
    /// The tools' default is [`FLAGGED_DETAIL`].
    pub flagged_detail: u64,
    /// What the caller knows of the run (command line, profile source, tokenizer); the scan adds its start,
    /// duration, engine and threads into the report's `run`.
    pub run: crate::report::RunInfo,
}

/// The default of [`ScanOptions::flagged_detail`] in the CLI, the Python API and on Ray (the one place it is
/// written: the binding exports it as `_core.FLAGGED_DETAIL`).
pub const FLAGGED_DETAIL: u64 = 1000;

impl ScanOptions {
    /// The registry: the corpus-wide passes these options ask for, one line each, in the order of the
    /// report's sections (a flagged sample's evidence follows it: each pass's `RANK`).
    pub fn passes(&self) -> Vec<Box<dyn Pass + '_>> {
        let mut passes: Vec<Box<dyn Pass + '_>> = vec![Box::new(PromptPairing::new(&self.pairing))];
        if let Some(spec) = &self.contamination {
            passes.push(Box::new(Contamination { spec }));
        }
        if let Some(params) = self.near_dup {
            passes.push(Box::new(NearDup { params }));
        }
        if let Some(options) = &self.vocab {
            passes.push(Box::new(DraftVocab { options }));
        }
        if let Some(options) = &self.hidden {
            passes.push(Box::new(HiddenStates { options }));
        }
        if self.ngram_coverage {
            passes.push(Box::new(NgramCoverage));
        }
        passes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::{hidden_states, near_dup};

    /// A flagged sample's evidence is ordered by rank: a pass's rank is its place in the registry.
    #[test]
    fn ranks_follow_the_registry() {
        let opts = ScanOptions {
            contamination: Some(Default::default()),
            near_dup: Some(Default::default()),
            vocab: Some(Default::default()),
            hidden: Some(crate::hidden::check::Options {
                dir: std::path::PathBuf::from("dump"),
                layout: None,
                target: None,
                agreement_positions: 0,
                agreement_min: 0.0,
            }),
            ngram_coverage: true,
            ..ScanOptions::default()
        };
        let names: Vec<&str> = opts.passes().iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            [
                "pairing",
                "contamination",
                "near_duplicates",
                "draft_vocab",
                "hidden_states",
                "ngram_coverage"
            ]
        );
        // A pass's rank is its place in the registry.
        let place = |name: &str| names.iter().position(|n| *n == name).unwrap() as u16;
        assert_eq!(near_dup::RANK, place(near_dup::NAME));
        assert_eq!(
            crate::passes::contamination::RANK,
            place(crate::passes::contamination::NAME)
        );
        assert_eq!(hidden_states::RANK, place(hidden_states::NAME));
    }
}
