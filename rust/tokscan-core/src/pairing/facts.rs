//! What the scan learns about one sample's pairing with its prompt record ([`PairFact`]): kept by the pairing
//! pass's per-sample side, resolved when the pass finishes ([`super::resolve`]).

use serde::{Deserialize, Serialize};

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
