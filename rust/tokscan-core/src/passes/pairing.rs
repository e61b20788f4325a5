//! The prompt-pairing pass: samples paired with the prompt records they were generated from (the prompts files
//! found beside the shards, or `--prompts`). In the scan each sample is matched with its record and its
//! neighbours' ([`crate::pairing::pair_sample`]), and flagged `prompt_missing` when it has none; when it
//! finishes, each prompts file's facts are resolved into shifted runs, mismatches and records without a sample
//! ([`crate::pairing::resolve`]), the report's `pairing` section.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use super::{Findings, Finishing, Pass};
use crate::anomaly::Code;
use crate::corpus::Corpus;
use crate::error::Result;
use crate::pairing::{
    load_encoder, pair_sample, resolve, PairFact, Pairing, PromptShape, RecordEncoder,
};
use crate::pass_partial::{Acc, Mergeable, SampleOut, SamplePass, SampleView, Sampler};
use crate::profile::Profile;
use crate::source::with_tokens;

/// The report section's key.
pub const NAME: &str = "pairing";

/// What pairing is given.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// One prompts file for the whole corpus (`--prompts`); by default the prompts files found beside the
    /// shards pair with them.
    pub prompts: Vec<PathBuf>,
    /// Renders and tokenizes prompt records, so that pairing compares tokens, not only shapes and sizes.
    pub encoder: Option<Arc<dyn RecordEncoder>>,
    /// A tokenizer directory (and a chat template overriding its own) to load the encoder from, only when the
    /// corpus has prompts to pair.
    pub tokenizer: Option<(PathBuf, Option<String>)>,
}

/// The pass; what it pairs is known once it has seen the corpus ([`Pass::check`]).
pub struct PromptPairing<'a> {
    pub options: &'a Options,
    pairing: OnceLock<Option<Pairing>>,
}

impl<'a> PromptPairing<'a> {
    pub fn new(options: &'a Options) -> Self {
        PromptPairing {
            options,
            pairing: OnceLock::new(),
        }
    }

    /// The corpus's pairing (`None` before [`Pass::check`], on a cluster, or with no prompts file).
    fn pairing(&self) -> Option<&Pairing> {
        self.pairing.get().and_then(Option::as_ref)
    }
}

/// Every paired sample's fact, in row order.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Facts(Vec<PairFact>);

impl Mergeable for Facts {
    fn merge(&mut self, other: Facts) {
        self.0.extend(other.0);
        self.0.sort_unstable_by_key(|f| f.row);
    }
}

impl Pass for PromptPairing<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Reads the prompts files beside the shards (or `--prompts`); with a tokenizer, loads the encoder that
    /// renders the records, before they are read (rendering keeps each record's line). An encoder that cannot
    /// load leaves the records compared by shape, with a note.
    fn check(&self, corpus: &Corpus, _profile: &Profile) -> Result<()> {
        if self.pairing.get().is_some() {
            return Ok(());
        }
        let opts = self.options;
        let has_prompts = !corpus.prompts.is_empty() || !opts.prompts.is_empty();
        let (mut encoder, mut note) = (opts.encoder.clone(), None);
        if let (true, None, Some((dir, template))) = (has_prompts, &encoder, &opts.tokenizer) {
            match load_encoder(dir, template.as_deref()) {
                Ok(e) => encoder = Some(e),
                Err(why) => note = Some(format!("tokens not compared: {why}")),
            }
        }
        let mut pairing = Pairing::of(corpus, &opts.prompts, encoder)?;
        if let Some(p) = pairing.as_mut() {
            p.note = note;
        }
        let _ = self.pairing.set(pairing);
        Ok(())
    }

    /// Pairing looks at every record together: none is spilled.
    fn needs_records(&self) -> bool {
        self.pairing().is_some()
    }

    fn sampler<'s>(&'s self, profile: &'s Profile) -> Result<Option<Box<dyn Sampler + 's>>> {
        Ok(self.pairing().map(|pairing| {
            Box::new(Matching {
                pairing,
                profile,
                done: Mutex::default(),
            }) as Box<dyn Sampler + 's>
        }))
    }

    fn decode(&self, bytes: &[u8]) -> Result<Box<dyn Acc>> {
        crate::pass_partial::decode::<Facts>(bytes)
    }

    fn finish(&self, at: &Finishing<'_>) -> Result<Findings> {
        let Some(pairing) = self.pairing() else {
            return Ok(Findings::new(NAME, None::<&()>));
        };
        let facts = at
            .partial
            .passes
            .get::<Facts>(NAME)?
            .ok_or_else(|| super::missing(NAME))?;
        let (flagged, reports) = resolve(pairing, &facts.0, at.records);
        let mut found = Findings::new(NAME, (!reports.is_empty()).then_some(&reports));
        found.flagged = flagged;
        Ok(found)
    }
}

/// The per-sample side: each unit's facts (with the shape of its last prompt, which the next one reuses).
struct Matching<'a> {
    pairing: &'a Pairing,
    profile: &'a Profile,
    /// The facts of the units scanned so far.
    done: Mutex<Vec<PairFact>>,
}

impl SamplePass for Matching<'_> {
    type Unit = (Vec<PairFact>, PromptShape);
    type Partial = Facts;

    fn begin(&self, _first_row: u64) -> Self::Unit {
        (Vec::new(), PromptShape::default())
    }

    fn sample(&self, unit: &mut Self::Unit, s: &SampleView<'_>, out: &mut SampleOut<'_>) {
        // A line its input could not read as a sample is neither paired nor missing its prompt.
        if s.unread {
            return;
        }
        let (facts, shape) = unit;
        let fact = with_tokens!(s.tokens, t => pair_sample(
            self.pairing,
            self.profile,
            s.source as usize,
            s.row,
            s.sample_id,
            t,
            s.prompt_len,
            s.parse,
            shape,
        ));
        if let Some(fact) = fact {
            if fact.record.is_none() {
                out.flag(Code::PromptMissing, None);
            }
            facts.push(fact);
        }
    }

    fn end(&self, unit: Self::Unit) {
        self.done
            .lock()
            .expect("no panic while held")
            .extend(unit.0);
    }

    fn gathered(&self) -> Facts {
        let mut facts = std::mem::take(&mut *self.done.lock().expect("no panic while held"));
        facts.sort_unstable_by_key(|f| f.row);
        Facts(facts)
    }
}
