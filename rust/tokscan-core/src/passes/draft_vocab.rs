//! The draft-vocabulary pass (`--draft-vocab`, `--vocab-size`, `--check-vocab`): the loss-bearing tokens of every
//! sample, counted per category while the corpus is scanned ([`crate::vocab`]), as coverage by draft
//! vocabularies, the mapping built, and the mapping checked.

use crate::report_schema::Field;
use std::collections::BTreeMap;

use super::{Findings, Finishing, Pass};
use crate::anomaly::Code;
use crate::error::Result;
use crate::pass_partial::{Acc, SampleOut, SamplePass, SampleView, Sampler};
use crate::profile::Profile;
use crate::source::with_tokens;
use crate::vocab::{
    build, check_counted_vocab, Counts, CountsPool, IdCounts, LossCounts, VocabOptions,
};

/// The report section's key.
pub const NAME: &str = "draft_vocab";

/// Its row of the report's field table ([`crate::report_schema`]).
pub const SECTION: Field = Field {
    names: &[NAME],
    shown: r#"`draft_vocab`"#,
    always: false,
    content: r#"with `--draft-vocab`, `--check-vocab` or `tokscan vocab` (see *Draft vocabulary*): `sizes`, `vocab_size`, `curve_sizes` (the K of every curve point: powers of two below the vocabulary, the vocabulary, the sizes), `overall` and `categories` {name → {`loss_tokens`, `distinct`, `coverage` {K → share}, `curve` [share per `curve_sizes`]}}, `top_ids` [[id, count]] (the 20 most frequent), `check` {`draft_size`, `target_size`, `size_ok`, `agree`, `coverage`, `best_coverage`, `tolerance`, `missed` [[id, count]], `problems` [..]} with `--check-vocab`"#,
};

pub struct DraftVocab<'a> {
    pub options: &'a VocabOptions,
}

impl Pass for DraftVocab<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Refuses, before the scan, a profile whose vocabulary is too large to count ([`check_counted_vocab`]).
    fn check(&self, _corpus: &crate::corpus::Corpus, profile: &Profile) -> Result<()> {
        check_counted_vocab(&profile.name, profile.vocab_size)
    }

    /// The same refusal where no corpus is checked first (a cluster's task).
    fn sampler<'s>(&'s self, profile: &'s Profile) -> Result<Option<Box<dyn Sampler + 's>>> {
        check_counted_vocab(&profile.name, profile.vocab_size)?;
        Ok(Some(Box::new(Counting {
            vocab_size: profile.vocab_size,
            pool: CountsPool::default(),
        })))
    }

    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Acc>> {
        crate::pass_partial::decode::<LossCounts>(bytes)
    }

    fn finish(&self, at: &Finishing<'_>) -> Result<Findings> {
        let empty = IdCounts::default();
        let counted = at
            .partial
            .passes
            .get::<LossCounts>(NAME)?
            .ok_or_else(|| super::missing(NAME))?;
        // Every category of the corpus, one with no loss-bearing token too.
        let counts: BTreeMap<String, &IdCounts> = at
            .partial
            .categories
            .keys()
            .map(|name| (name.clone(), counted.categories.get(name).unwrap_or(&empty)))
            .collect();
        let report = build(
            &counts,
            &counted.first_seen,
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

/// The per-sample side: the workers' accumulators ([`CountsPool`]: one that keeps rows in order when it can).
struct Counting {
    vocab_size: u32,
    pool: CountsPool,
}

impl SamplePass for Counting {
    type Unit = Counts;
    type Partial = LossCounts;

    fn begin(&self, first_row: u64) -> Counts {
        self.pool.take(self.vocab_size, first_row)
    }

    fn sample(&self, unit: &mut Counts, s: &SampleView<'_>, _out: &mut SampleOut<'_>) {
        with_tokens!(s.tokens, t => unit.add(s.category, s.row, t, s.mask, s.completion));
    }

    fn end(&self, unit: Counts) {
        self.pool.give(unit);
    }

    fn gathered(&self) -> LossCounts {
        let mut all = LossCounts::default();
        for counts in self.pool.drain() {
            all.add(&counts);
        }
        all
    }
}
