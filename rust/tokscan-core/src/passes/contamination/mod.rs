//! The contamination pass (`--contamination FILE...`): every sample's prompt and completion looked up, while the
//! corpus is scanned, in an index of the benchmark files' token n-grams ([`index`]); a sample that shares
//! enough of an item is flagged `contaminated`, with the item as its evidence, and the report's section counts
//! the samples per benchmark item.

pub mod index;

use crate::report_schema::Field;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Findings, Finishing, Pass};
use crate::anomaly::Code;
use crate::error::Result;
use crate::pass_partial::{Mergeable, Pool, SampleOut, SamplePass, SampleView};
use crate::profile::Profile;
use crate::source::with_tokens;
pub use index::{Benchmarks, ContaminationReport, Hit, Spec};

/// The report section's key, and the evidence's in a flagged entry.
pub const NAME: &str = "contamination";

/// Its row of the report's field table ([`crate::report_schema`]).
pub const SECTION: Field = Field {
    names: &[NAME],
    shown: r#"`contamination`"#,
    always: false,
    content: r#"with `--contamination` (absent otherwise): `n`, `min_share`, `files` [{`path`, `items`, `ngrams` (distinct n-grams)}], `samples` (flagged `contaminated`), `items` {file → {item → samples}}"#,
};
/// Its place in the registry ([`crate::options::ScanOptions::passes`]).
pub const RANK: u16 = 1;

pub struct Contamination<'a> {
    pub spec: &'a Spec,
}

/// What the scan found: the benchmarks looked for, and the samples that matched each item.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Tally {
    benchmarks: Option<Benchmarks>,
    samples: u64,
    /// file → item → samples.
    items: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Mergeable for Tally {
    fn merge(&mut self, other: Tally) {
        if self.benchmarks.is_none() {
            self.benchmarks = other.benchmarks;
        }
        self.samples += other.samples;
        for (file, items) in other.items {
            let mine = self.items.entry(file).or_default();
            for (item, n) in items {
                *mine.entry(item).or_default() += n;
            }
        }
    }
}

impl Pass for Contamination<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The index, built once per process that scans (on Ray, once per task); none without a benchmark file.
    fn sampler<'s>(
        &'s self,
        _profile: &'s Profile,
    ) -> Result<Option<Box<dyn crate::pass_partial::Sampler + 's>>> {
        if self.spec.files.is_empty() {
            return Ok(None);
        }
        let index = self.spec.build()?;
        Ok(Some(Box::new(Looking {
            benchmarks: index.describe(),
            index,
            pool: Pool::default(),
        })))
    }

    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn crate::pass_partial::Acc>> {
        crate::pass_partial::decode::<Tally>(bytes)
    }

    fn finish(&self, at: &Finishing<'_>) -> Result<Findings> {
        let section = at.partial.passes.get::<Tally>(NAME)?.and_then(|t| {
            let b = t.benchmarks.clone()?;
            Some(ContaminationReport {
                n: b.n,
                min_share: b.min_share,
                files: b.files,
                samples: t.samples,
                items: t.items.clone(),
            })
        });
        Ok(Findings::new(NAME, section.as_ref()))
    }
}

/// The per-sample side: the index, and per worker a tally and a buffer of the sample's ids.
struct Looking {
    index: index::Index,
    benchmarks: Benchmarks,
    pool: Pool<(Tally, Vec<u32>)>,
}

impl SamplePass for Looking {
    type Unit = (Tally, Vec<u32>);
    type Partial = Tally;

    fn begin(&self, _first_row: u64) -> Self::Unit {
        self.pool.take()
    }

    fn sample(&self, unit: &mut Self::Unit, s: &SampleView<'_>, out: &mut SampleOut<'_>) {
        let (tally, ids) = unit;
        let (cs, ce) = s.completion;
        let hit = with_tokens!(s.tokens, t => self.index.check(t, cs, ce, ids));
        if let Some((pos, hit)) = hit {
            out.flag(Code::Contaminated, Some(pos));
            tally.samples += 1;
            *tally
                .items
                .entry(hit.file.clone())
                .or_default()
                .entry(hit.item.clone())
                .or_default() += 1;
            out.attach(RANK, NAME, &hit);
        }
    }

    fn end(&self, unit: Self::Unit) {
        self.pool.give(unit);
    }

    fn gathered(&self) -> Tally {
        let mut all = Tally {
            benchmarks: Some(self.benchmarks.clone()),
            ..Tally::default()
        };
        for (t, _) in self.pool.drain() {
            all.merge(t);
        }
        all
    }
}
