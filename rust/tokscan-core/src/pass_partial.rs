//! The per-sample side of a pass, on the model of DataFusion's `Accumulator`: while the scan reads the corpus,
//! a pass sees each sample (its tokens, its completion, its loss mask, its category) after the per-sample rules
//! ran, may flag it or attach evidence to it, and keeps a state per unit of work; the states of a process are
//! gathered into one mergeable partial ([`Acc`]), which travels between processes as bytes and is merged in any
//! grouping and order. The pass's `finish` reads the merged one ([`Accs::get`]). (A module of its own, below
//! both the passes and the summary that holds the partials.)
//!
//! The per-token loops stay inside each pass's generic code: a pass is called once per sample, never per token.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::anomaly::Code;
use crate::check::{SampleFacts, Scratch};
use crate::error::{Error, Result};
use crate::flagged::Attached;
use crate::sample_id::SampleId;
use crate::source::Tokens;
use crate::token::MaskSlice;

/// One sample as a pass sees it.
pub struct SampleView<'a> {
    /// Its global row.
    pub row: u64,
    /// The index of the input it came from.
    pub source: u32,
    pub sample_id: Option<&'a SampleId>,
    pub category: &'a str,
    /// The whole sequence (prompt and completion).
    pub tokens: Tokens<'a>,
    /// The completion's `[start, end)` in `tokens`.
    pub completion: (usize, usize),
    /// The length of its prompt when the input holds prompts in a column of their own.
    pub prompt_len: Option<usize>,
    pub mask: Option<MaskSlice<'a>>,
    /// A line its input could not read as a sample (counted, not measured): `tokens` is empty.
    pub unread: bool,
    /// Its parse: special-token events, turns and structure ([`crate::check::Scratch`]); the per-sample rules'
    /// findings are [`SampleOut::facts`].
    pub parse: &'a Scratch,
}

/// What a pass may say about a sample while it is scanned.
pub struct SampleOut<'a> {
    pub(crate) facts: &'a mut SampleFacts,
    pub(crate) attached: &'a mut Vec<Attached>,
    pub(crate) sketch: &'a mut Option<Box<[u32]>>,
}

impl SampleOut<'_> {
    /// What the per-sample rules (and the passes before this one) found: codes, positions, lengths, ranges.
    pub fn facts(&self) -> &SampleFacts {
        self.facts
    }

    /// Flags the sample with `code` (first position `pos`).
    pub fn flag(&mut self, code: Code, pos: Option<usize>) {
        self.facts.flag(code, pos);
    }

    /// The pass's evidence about the sample, under `key` in its flagged entry (ordered by `rank`, the pass's
    /// place in the registry). A sample with evidence found in the scan keeps its detail past the flagged-detail
    /// limit: the pass's section counts every such sample.
    pub fn attach(&mut self, rank: u16, key: &str, evidence: &impl Serialize) {
        Attached::of(rank, key, evidence, true).add_to(self.attached);
    }

    /// The sample's sketch, kept in its record for the pass's keyed search after the scan (routed by the
    /// corpus checks, [`crate::corpus_checks`]). A record has one sketch slot (near duplicates' signature
    /// today): a second pass that needs one would need a slot of its own.
    pub fn set_sketch(&mut self, sketch: Option<Box<[u32]>>) {
        *self.sketch = sketch;
    }
}

/// The per-sample side of a pass, typed: made once per scanning process ([`crate::passes::Pass::sampler`]) and shared
/// by its workers, each unit of work with its own `Unit` state.
pub trait SamplePass: Sync + Send {
    /// A unit's working state.
    type Unit: Send + 'static;
    /// What the process gathered, mergeable with other processes'.
    type Partial: Mergeable;
    /// The state for a unit whose rows start at `first_row` (the pass may hand out one a unit gave back).
    fn begin(&self, first_row: u64) -> Self::Unit;
    /// Looks at one sample of the unit.
    fn sample(&self, unit: &mut Self::Unit, s: &SampleView<'_>, out: &mut SampleOut<'_>);
    /// Takes back a unit's state once the unit is scanned.
    fn end(&self, unit: Self::Unit);
    /// Everything the units gave back, as one partial.
    fn gathered(&self) -> Self::Partial;
}

/// A pass's partial: merged in any grouping and order with another of the same pass, and sent between
/// processes in the compact binary form ([`crate::wire`]).
pub trait Mergeable: Serialize + DeserializeOwned + fmt::Debug + Send + Sync + 'static {
    fn merge(&mut self, other: Self);
}

/// A pass that keeps nothing but what it says about each sample (a sketch, a flag).
impl Mergeable for () {
    fn merge(&mut self, _other: ()) {}
}

/// [`SamplePass`] with its types erased, as the scan holds the passes' per-sample sides.
pub trait Sampler: Sync + Send {
    fn begin(&self, first_row: u64) -> Box<dyn Any + Send>;
    fn sample(&self, unit: &mut (dyn Any + Send), s: &SampleView<'_>, out: &mut SampleOut<'_>);
    fn end(&self, unit: Box<dyn Any + Send>);
    fn gathered(&self) -> Box<dyn Acc>;
}

impl<P: SamplePass> Sampler for P {
    fn begin(&self, first_row: u64) -> Box<dyn Any + Send> {
        Box::new(SamplePass::begin(self, first_row))
    }

    fn sample(&self, unit: &mut (dyn Any + Send), s: &SampleView<'_>, out: &mut SampleOut<'_>) {
        let unit = unit
            .downcast_mut::<P::Unit>()
            .expect("a unit's state is its sampler's");
        SamplePass::sample(self, unit, s, out);
    }

    fn end(&self, unit: Box<dyn Any + Send>) {
        let unit = unit
            .downcast::<P::Unit>()
            .expect("a unit's state is its sampler's");
        SamplePass::end(self, *unit);
    }

    fn gathered(&self) -> Box<dyn Acc> {
        Box::new(SamplePass::gathered(self))
    }
}

/// A [`Mergeable`] with its type erased, as a [`crate::summary::Partial`] holds it.
pub trait Acc: fmt::Debug + Send + Sync + Any {
    /// Merges another partial of the same pass.
    fn merge_boxed(&mut self, other: Box<dyn Acc>);
    fn encode(&self) -> Vec<u8>;
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<M: Mergeable> Acc for M {
    fn merge_boxed(&mut self, other: Box<dyn Acc>) {
        let other = other
            .into_any()
            .downcast::<M>()
            .expect("partials merged by pass name are of the same pass");
        self.merge(*other);
    }

    fn encode(&self) -> Vec<u8> {
        crate::wire::encode(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// A pass's partial sent by another process, decoded ([`crate::passes::Pass::decode`]).
pub fn decode<M: Mergeable>(b: &[u8]) -> Result<Box<dyn Acc>> {
    Ok(Box::new(crate::wire::decode::<M>(b, "pass partial")?))
}

/// Decodes a pass's partial by the pass's name ([`crate::passes::decoders`]).
pub type Decoders<'a> = dyn Fn(&str, &[u8]) -> Option<Result<Box<dyn Acc>>> + 'a;

/// The passes' partials of a [`crate::summary::Partial`], by pass name. A partial that came from another
/// process stays bytes until [`Accs::decode_with`] is given the passes (which decode and merge it), so that
/// merging never fails.
#[derive(Default)]
pub struct Accs(BTreeMap<String, Slot>);

#[derive(Default)]
struct Slot {
    live: Option<Box<dyn Acc>>,
    /// Partials from other processes, not yet decoded.
    bytes: Vec<Vec<u8>>,
}

impl Slot {
    fn encoded(&self) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = self.live.iter().map(|a| a.encode()).collect();
        out.extend(self.bytes.iter().cloned());
        out
    }
}

impl Accs {
    /// Adds pass `name`'s partial.
    pub fn insert(&mut self, name: &str, acc: Box<dyn Acc>) {
        self.merge_slot(
            name.to_string(),
            Slot {
                live: Some(acc),
                bytes: Vec::new(),
            },
        );
    }

    /// Merges another partial's.
    pub fn merge(&mut self, other: Accs) {
        for (name, slot) in other.0 {
            self.merge_slot(name, slot);
        }
    }

    fn merge_slot(&mut self, name: String, slot: Slot) {
        let mine = self.0.entry(name).or_default();
        match (&mut mine.live, slot.live) {
            (Some(a), Some(b)) => a.merge_boxed(b),
            (a, b) => *a = a.take().or(b),
        }
        mine.bytes.extend(slot.bytes);
    }

    /// Decodes and merges the partials still in bytes, each with `decode` (by pass name: `None` for a pass the
    /// scan does not run, refused, as its partial would vanish from the report).
    pub fn decode_with(&mut self, decode: &Decoders<'_>) -> Result<()> {
        for (name, slot) in &mut self.0 {
            if slot.bytes.is_empty() {
                continue;
            }
            for b in std::mem::take(&mut slot.bytes) {
                let d = decode(name, &b).ok_or_else(|| {
                    Error::Usage(format!(
                        "internal: a partial of the {name} pass, which these options do not run"
                    ))
                })??;
                match slot.live.as_mut() {
                    Some(a) => a.merge_boxed(d),
                    None => slot.live = Some(d),
                }
            }
        }
        Ok(())
    }

    /// Pass `name`'s merged partial (`None` when the pass kept none). One still in bytes (not given to
    /// [`Accs::decode_with`]) or of another type is an internal error, never read as none.
    pub fn get<M: Mergeable>(&self, name: &str) -> Result<Option<&M>> {
        let Some(slot) = self.0.get(name) else {
            return Ok(None);
        };
        let internal =
            |why: &str| Error::Usage(format!("internal: the {name} pass's partial {why}"));
        if !slot.bytes.is_empty() {
            return Err(internal("was not decoded"));
        }
        match &slot.live {
            None => Ok(None),
            Some(a) => a
                .as_any()
                .downcast_ref::<M>()
                .map(Some)
                .ok_or_else(|| internal("is of another type")),
        }
    }
}

impl fmt::Debug for Accs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (name, slot) in &self.0 {
            m.entry(name, &(&slot.live, format!("{} encoded", slot.bytes.len())));
        }
        m.finish()
    }
}

/// A copy holds the partials in bytes (decoded again when merged or read).
impl Clone for Accs {
    fn clone(&self) -> Self {
        Accs(
            self.0
                .iter()
                .map(|(k, s)| {
                    let slot = Slot {
                        live: None,
                        bytes: s.encoded(),
                    };
                    (k.clone(), slot)
                })
                .collect(),
        )
    }
}

/// Equal when their encoded forms are (for tests of merge order: partials merged in any order encode alike).
impl PartialEq for Accs {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((a, x), (b, y))| a == b && x.encoded() == y.encoded())
    }
}

impl Eq for Accs {}

impl Serialize for Accs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let v: Vec<(&String, Vec<Vec<u8>>)> =
            self.0.iter().map(|(k, slot)| (k, slot.encoded())).collect();
        v.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Accs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Vec::<(String, Vec<Vec<u8>>)>::deserialize(d)?;
        Ok(Accs(
            v.into_iter()
                .map(|(k, bytes)| (k, Slot { live: None, bytes }))
                .collect(),
        ))
    }
}

/// The states of a pass's workers, for a pass whose states are sums (any unit may add to any state): a unit
/// takes one (or a new one) and gives it back; at the end they are merged. One per worker rather than one per
/// unit, so the merge at the end merges a few.
#[derive(Debug, Default)]
pub struct Pool<U>(std::sync::Mutex<Vec<U>>);

impl<U: Default> Pool<U> {
    pub fn take(&self) -> U {
        self.0
            .lock()
            .expect("no panic while held")
            .pop()
            .unwrap_or_default()
    }

    pub fn give(&self, u: U) {
        self.0.lock().expect("no panic while held").push(u);
    }

    /// Every state given back so far, emptying the pool.
    pub fn drain(&self) -> Vec<U> {
        std::mem::take(&mut *self.0.lock().expect("no panic while held"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Sum(u64);

    impl Mergeable for Sum {
        fn merge(&mut self, other: Sum) {
            self.0 += other.0;
        }
    }

    fn sent(name: &str, n: u64) -> Accs {
        let mut a = Accs::default();
        a.insert(name, Box::new(Sum(n)));
        crate::wire::decode(&crate::wire::encode(&a), "test").unwrap()
    }

    #[test]
    fn partials_from_other_processes_merge_once_decoded_and_an_unknown_or_corrupt_one_is_an_error()
    {
        let decode_sum = |name: &str, b: &[u8]| (name == "sum").then(|| decode::<Sum>(b));
        let mut a = Accs::default();
        a.insert("sum", Box::new(Sum(1)));
        let b = sent("sum", 2);
        a.merge(b.clone());
        a.merge(b);
        // Bytes not decoded yet: an error to read, never none.
        assert!(a.get::<Sum>("sum").is_err());
        a.decode_with(&decode_sum).unwrap();
        assert_eq!(a.get::<Sum>("sum").unwrap(), Some(&Sum(5)));
        assert!(a.get::<()>("sum").is_err());
        assert_eq!(a.get::<Sum>("none").unwrap(), None);
        // Live and sent partials compare by their encoded forms.
        let mut whole = Accs::default();
        whole.insert("sum", Box::new(Sum(5)));
        assert_eq!(a, whole);

        let mut unknown = sent("other", 1);
        let err = unknown.decode_with(&decode_sum).unwrap_err();
        assert!(err.to_string().contains("other"), "{err}");
        let mut corrupt = Accs::default();
        corrupt.merge_slot(
            "sum".into(),
            Slot {
                live: None,
                bytes: vec![vec![0xff; 11]],
            },
        );
        assert!(corrupt.decode_with(&decode_sum).is_err());
    }
}
