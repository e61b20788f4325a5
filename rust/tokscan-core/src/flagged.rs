//! A flagged sample as the report lists it: which codes, where, and what it repeats; the one type the
//! per-sample rules, the corpus-wide passes (duplicates, pairing, near duplicates, contamination) and the
//! report share, so that none of them depends on another to name it.

use serde::{Deserialize, Serialize};

use crate::check::{Event, Lengths};
use crate::sample_id::SampleId;

/// Positions kept for a sample a per-sample rule flagged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagDetail {
    pub positions: Vec<u32>,
    pub completion: (u32, u32),
    /// Boundary tokens (turn starts/ends, think start/end, tool-call tokens), capped per sample.
    pub boundaries: Vec<(u32, u16)>,
    /// `(period, span)` of the `repetition` loop, when flagged.
    pub repetition: Option<(u32, u32)>,
    /// Where a `truncated` sample was cut ([`crate::check::CutIn`] index).
    #[serde(default)]
    pub cut: Option<u8>,
}

impl FlagDetail {
    pub fn boundary_events(&self) -> impl Iterator<Item = Event> + '_ {
        self.boundaries
            .iter()
            .map(|&(pos, slot)| Event { pos, slot })
    }
}

/// Cap on boundary events kept per flagged sample.
pub const MAX_BOUNDARIES: usize = 512;

/// An earlier sample a flagged one repeats (`duplicate_of`, `near_duplicate_of`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstSeen {
    pub row: u64,
    pub sample_id: Option<SampleId>,
}

/// The kept first sample of a prompt group (`prompt_of`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptFirst {
    pub row: u64,
    pub sample_id: Option<SampleId>,
    pub category: String,
}

/// A flagged sample, in full: what the report lists. Its default is no sample and no evidence: a check sets the
/// sample's fields and the evidence it has (`..FlaggedSample::default()` for the rest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlaggedSample {
    /// Global row in scan order (inputs sorted by path, rows in file order).
    pub row: u64,
    /// Index of the input the sample came from.
    pub source: u32,
    pub category: String,
    pub lengths: Lengths,
    pub flags: u64,
    /// [`crate::token::content_key`] of its ids (`clean` checks the row still holds this sample).
    #[serde(default)]
    pub content: u64,
    pub sample_id: Option<SampleId>,
    /// From the per-sample rules; `None` for a sample only the corpus-wide checks flagged.
    pub detail: Option<FlagDetail>,
    /// For `duplicate` / `sample_id_duplicate`: the first sample with the same completion / id.
    pub duplicate_of: Option<FirstSeen>,
    /// For `departs_from_category`: the features (bits) on which it departs from its category's majority,
    /// that majority's packed values and its own.
    #[serde(default)]
    pub departs: (u32, u32, u32),
    /// For a later member of a prompt group (`prompt_duplicate`, `prompt_cross_category`): the group's
    /// kept first sample.
    #[serde(default)]
    pub prompt_of: Option<Box<PromptFirst>>,
    /// What corpus-wide passes ([`crate::passes`]) say about it, each under its key in the report's entry,
    /// in the passes' order.
    #[serde(default)]
    pub attached: Vec<Attached>,
}

/// A corpus-wide pass's evidence about a flagged sample: JSON under `key` in the report's entry (e.g.
/// `near_duplicate_of`), so that neither this module nor the report needs the pass's types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attached {
    /// The pass's place in the registry: a sample's entries are kept in this order.
    pub rank: u16,
    pub key: String,
    pub json: String,
    /// Found while the sample was scanned ([`crate::pass_partial::SampleOut::attach`]): the sample keeps its
    /// detail past the flagged-detail limit, as the pass's section counts every such sample.
    pub keep: bool,
}

impl Attached {
    /// `evidence` as JSON under `key` (plain data: it cannot fail).
    pub fn of(rank: u16, key: &str, evidence: &impl Serialize, keep: bool) -> Attached {
        Attached {
            rank,
            key: key.to_string(),
            json: serde_json::to_string(evidence).expect("plain data"),
            keep,
        }
    }

    /// Adds the evidence to a sample's, in rank order, unless it has evidence under that key already.
    pub fn add_to(self, attached: &mut Vec<Attached>) {
        if attached.iter().all(|b| b.key != self.key) {
            let at = attached.partition_point(|b| b.rank <= self.rank);
            attached.insert(at, self);
        }
    }
}

impl FlaggedSample {
    /// Adds what the corpus-wide checks found about the same row.
    pub fn absorb(&mut self, other: FlaggedSample) {
        match (&mut self.detail, other.detail) {
            (Some(mine), Some(theirs)) => {
                for c in crate::anomaly::codes_in(other.flags & !self.flags) {
                    mine.positions[c.index()] = theirs.positions[c.index()];
                }
            }
            (None, Some(theirs)) => self.detail = Some(theirs),
            _ => {}
        }
        self.flags |= other.flags;
        if self.duplicate_of.is_none() {
            self.duplicate_of = other.duplicate_of;
        }
        if other.departs.0 != 0 {
            self.departs = other.departs;
        }
        if self.prompt_of.is_none() {
            self.prompt_of = other.prompt_of;
        }
        for a in other.attached {
            self.attach(a);
        }
    }

    /// Whether a pass's evidence keeps the sample's detail past the limit ([`Attached::keep`]).
    pub fn keeps_detail(&self) -> bool {
        self.attached.iter().any(|a| a.keep)
    }

    /// Adds a pass's evidence ([`Attached::add_to`]).
    pub fn attach(&mut self, a: Attached) {
        a.add_to(&mut self.attached);
    }
}

/// Two row-sorted lists as one; a row in both (never the case for disjoint units) keeps one entry.
pub fn merge_by_row(a: Vec<FlaggedSample>, b: Vec<FlaggedSample>) -> Vec<FlaggedSample> {
    merge_sorted(a, b, |x| x.row, FlaggedSample::absorb)
}

/// Two lists sorted by `key` as one; an entry of `b` whose key is also in `a` goes into `a`'s by `absorb`.
pub fn merge_sorted<T, K: Ord>(
    a: Vec<T>,
    b: Vec<T>,
    key: impl Fn(&T) -> K,
    mut absorb: impl FnMut(&mut T, T),
) -> Vec<T> {
    if b.is_empty() {
        return a;
    }
    // An empty `a` without room for `b` takes `b` as it is (no copy of a list that may be long).
    if a.is_empty() && a.capacity() < b.len() {
        return b;
    }
    if a.last().map(&key) < b.first().map(&key) {
        // Units merged in row order (the local scan): an append, not a merge.
        let mut a = a;
        a.extend(b);
        return a;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if key(x) < key(y) => out.push(a.next().expect("peeked")),
            (Some(x), Some(y)) if key(x) > key(y) => out.push(b.next().expect("peeked")),
            (Some(_), Some(_)) => {
                let mut x = a.next().expect("peeked");
                absorb(&mut x, b.next().expect("peeked"));
                out.push(x);
            }
            (Some(_), None) => out.extend(a.by_ref()),
            (None, Some(_)) => out.extend(b.by_ref()),
            (None, None) => return out,
        }
    }
}

/// How a hidden-state file was paired with its sample (`--hidden-states`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The number in its name is the corpus row.
    Index,
    /// Its `conversation_id` (or its name) is the sample's id.
    SampleId,
    /// Its token ids are the sample's.
    Content,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Index => "index",
            Rule::SampleId => "sample_id",
            Rule::Content => "content",
        }
    }
}

/// A flagged sample's evidence about its hidden-state file (the report's `hidden_states` of a flagged entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
// Every field is written (no `skip_serializing_if`): the evidence also travels in postcard, which is not
// self-describing (a cluster task's findings).
pub struct Evidence {
    /// The sample's file, under the dump directory (none for `hidden_missing`).
    pub file: Option<String>,
    pub paired_by: Option<Rule>,
    /// For `hidden_duplicate`: the sample's other files.
    pub other_files: Vec<String>,
    /// One line per code: what was found.
    pub findings: std::collections::BTreeMap<String, String>,
    /// Sampled completion positions and how many of them the stored state predicts.
    pub agreement: Option<Agreement>,
}

/// Next-token agreement of one sample.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreement {
    pub positions: u32,
    pub agreed: u32,
    /// The first disagreeing positions: `[position t, token t + 1, predicted]`.
    pub disagreements: Vec<[i64; 3]>,
}
