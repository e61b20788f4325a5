//! What each sample leaves for the corpus-wide passes: its record (hashes, lengths, features, sketch) and,
//! when its input pairs with a prompts file, its pairing fact ([`crate::pairing`] resolves them).

use serde::{Deserialize, Serialize};

use crate::check::Lengths;
use crate::error::Result;
use crate::sample_id::SampleId;
use crate::wire::{decode, encode};

/// What the corpus-wide checks need of one sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleRecord {
    pub row: u64,
    pub source: u32,
    /// Index into [`Records::categories`].
    pub category: u32,
    pub lengths: Lengths,
    /// xxh3 of the completion ids (0 for an empty completion).
    pub completion_hash: u64,
    pub completion_len: u32,
    /// [`crate::token::content_key`] of its ids.
    #[serde(default)]
    pub content: u64,
    pub sample_id: Option<SampleId>,
    /// The per-sample codes it was flagged with (a corpus-wide check does not repeat what they explain).
    #[serde(default)]
    pub flags: u64,
    /// Its structural features, packed ([`crate::check::features`]).
    #[serde(default)]
    pub features: u32,
    /// xxh3 and length of the prompt's turns ([`crate::check::Scratch::prompt_key`]); 0 and 0 when the
    /// sample has no prompt turns.
    #[serde(default)]
    pub prompt_hash: u64,
    #[serde(default)]
    pub prompt_len: u32,
    /// With near-duplicate detection: the completion's MinHash signature ([`crate::passes::near_dup`]).
    #[serde(default)]
    pub sketch: Option<Box<[u32]>>,
}

/// Per-sample records of the units one scan (or one cluster task) read, in row order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Records {
    pub categories: Vec<String>,
    pub rows: Vec<SampleRecord>,
    /// Pairing facts of the samples whose input pairs with a prompts file, in row order.
    #[serde(default)]
    pub pairs: Vec<PairFact>,
}

/// The index of category `name` in `names`, added when new.
pub(crate) fn category_index(names: &mut Vec<String>, name: &str) -> u32 {
    match names.iter().position(|c| c == name) {
        Some(i) => i as u32,
        None => {
            names.push(name.to_string());
            (names.len() - 1) as u32
        }
    }
}

impl Records {
    /// The index of category `name` in [`Records::categories`], added when new.
    pub fn category_index(&mut self, name: &str) -> u32 {
        category_index(&mut self.categories, name)
    }

    /// Appends `other` (rows after this one's).
    pub fn append(&mut self, other: Records) {
        let remap: Vec<u32> = other
            .categories
            .iter()
            .map(|c| self.category_index(c))
            .collect();
        self.rows.extend(other.rows.into_iter().map(|mut r| {
            r.category = remap[r.category as usize];
            r
        }));
        self.pairs.extend(other.pairs);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Records> {
        decode(b, "sample records")
    }
}

/// How many records either side of its own a sample is compared with, to tell a shift from a mismatch.
pub const SHIFT_WINDOW: usize = 3;
/// How well a sample fits one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fit {
    /// No record at this offset.
    pub absent: bool,
    /// The conversation's shape agrees (system prompt, user and assistant turns).
    pub shape: bool,
    /// ln(record bytes / sample tokens) × 1000 over the compared turns; [`NO_RATIO`] when too short.
    pub log_ratio: i16,
    /// Largest departure of one turn's ratio from the sample's own (× 1000).
    pub spread: i16,
    /// With a tokenizer: the first position where the rendering and the sample differ ([`TOKENS_MATCH`] when
    /// the rendering is the sample's prompt, [`NOT_RENDERED`] when not compared); for a neighbour's record only
    /// whether it matches is kept (0 when it does not).
    pub first_diff: u32,
}

pub const NO_RATIO: i16 = i16::MIN;
pub const TOKENS_MATCH: u32 = u32::MAX;
pub const NOT_RENDERED: u32 = u32::MAX - 1;
/// With a tokenizer: the chat template raised an error on the record (its message is in the report).
pub const RENDER_FAILED: u32 = u32::MAX - 2;

impl Fit {
    pub const ABSENT: Fit = Fit {
        absent: true,
        shape: false,
        log_ratio: NO_RATIO,
        spread: 0,
        first_diff: NOT_RENDERED,
    };
}

/// What the scan learnt about one sample's pairing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairFact {
    pub row: u64,
    pub set: u32,
    /// The record it paired with (index into the set), when one did.
    pub record: Option<u32>,
    pub by_id: bool,
    /// Fits with records at offsets `-SHIFT_WINDOW..=SHIFT_WINDOW` from its own (index `SHIFT_WINDOW` is its
    /// own record).
    pub fits: [Fit; 2 * SHIFT_WINDOW + 1],
}
