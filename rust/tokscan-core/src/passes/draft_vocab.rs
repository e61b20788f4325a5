//! The draft-vocabulary pass (`--draft-vocab`, `--vocab-size`, `--check-vocab`): the loss-bearing tokens the
//! scan counted per category ([`crate::vocab`]), as coverage by draft vocabularies, the mapping built, and the
//! mapping checked.

use super::{Findings, Finishing, Pass};
use crate::anomaly::Code;
use crate::error::Result;
use crate::vocab::{build, VocabOptions};

/// The report section's key.
pub const NAME: &str = "draft_vocab";

pub struct DraftVocab<'a> {
    pub options: &'a VocabOptions,
}

impl Pass for DraftVocab<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn finish(&self, at: &Finishing<'_>) -> Result<Findings> {
        let partial = at.partial;
        let counts: std::collections::BTreeMap<String, _> = partial
            .categories
            .iter()
            .map(|(name, c)| (name.clone(), &c.loss_counts))
            .collect();
        let report = build(
            &counts,
            &partial.first_seen,
            at.profile.vocab_size,
            self.options,
        );
        let mut found = Findings::new(NAME, Some(&report));
        if let Some(check) = &report.check {
            // One finding for the corpus: the mapping does not fit it.
            found
                .corpus_counts
                .push((Code::DraftVocabStale, u64::from(check.stale())));
        }
        Ok(found)
    }
}
