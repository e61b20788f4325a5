//! What each sample leaves for the corpus-wide checks and passes: its record (hashes, lengths, features, a
//! pass's sketch).

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
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn from_bytes(b: &[u8]) -> Result<Records> {
        decode(b, "sample records")
    }
}
