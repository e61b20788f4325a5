//! The per-sample checker: classify → parse → rules. One pass classifies tokens (plain text ids take a
//! two-compare fast path) into special-token events; `parse` reads the sample's structure from those events
//! and the profile; the functions of `rules`, one per anomaly code, read that structure.

use crate::anomaly::{Code, N_CODES};
use crate::profile::{Profile, Role};
use crate::repetition::{find_loop, Loop};
use crate::token::{MaskSlice, TokenId};

pub mod features;
pub mod parse;
pub mod payload;
pub mod rules;

pub use parse::{Parsed, Segment, SegmentKind};

/// Tokens tested at once by the classify pass's fast path.
const CLASSIFY_CHUNK: usize = 32;

/// Sentinel for "no position".
pub const NO_POS: u32 = u32::MAX;

/// The sample-scope codes found outside [`rules::rules`]: while classifying (`out_of_vocab`), by the loop
/// search (`repetition`) and by the tool-call payload check ([`payload::CODES`]).
pub const OTHER_PASSES: [Code; 5] = [
    Code::OutOfVocab,
    Code::Repetition,
    payload::CODES[0],
    payload::CODES[1],
    payload::CODES[2],
];

/// A special token at a position of the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub pos: u32,
    pub slot: u16,
}

/// A turn of the conversation as parsed from the role tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    pub role: Role,
    /// Position of the role token.
    pub start: usize,
    /// First content token (after the role name and separator).
    pub content_start: usize,
    /// Exclusive end: one past the closing end-of-turn, or the next role token.
    pub end: usize,
    /// False when it opened while an assistant turn was still open: the model began a new turn inside
    /// its completion, so this is not a real turn of the conversation.
    pub clean: bool,
}

/// Buffers reused from sample to sample, so the hot loop does not allocate.
#[derive(Debug, Default)]
pub struct Scratch {
    pub events: Vec<Event>,
    /// The turns of the last checked sample.
    pub turns: Vec<Turn>,
    /// The parsed structure of the last checked sample.
    pub parsed: Parsed,
    pub payload: payload::PayloadScratch,
}

impl Scratch {
    /// The turns of the last checked sample's prompt: those before the completion, without the final
    /// assistant turn the completion belongs to.
    pub fn prompt_turns(&self) -> impl Iterator<Item = &Turn> + '_ {
        let p = &self.parsed;
        self.turns.iter().filter(move |t| {
            t.start < p.cs && !(t.role == Role::Assistant && t.content_start == p.prefill_start)
        })
    }

    /// The last checked sample's prompt as a key `(xxh3, tokens)`: the implicit system prompt and every
    /// [`Self::prompt_turns`] turn, role tokens included, not the pre-fill. Equal prompts have equal keys;
    /// `(0, 0)` when the sample has no prompt turns.
    pub fn prompt_key<T: TokenId>(&self, tokens: &[T]) -> (u64, u32) {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        let mut len = 0usize;
        let mut add = |a: usize, b: usize| {
            let b = b.min(tokens.len());
            if a < b {
                h.update(&((b - a) as u32).to_le_bytes());
                let ids = &tokens[a..b];
                if let Some(bytes) = T::as_le_u32_bytes(ids) {
                    h.update(bytes);
                } else {
                    let mut buf = [0u8; 1024];
                    for chunk in ids.chunks(buf.len() / 4) {
                        for (dst, t) in buf.chunks_exact_mut(4).zip(chunk) {
                            dst.copy_from_slice(&t.id().to_le_bytes());
                        }
                        h.update(&buf[..chunk.len() * 4]);
                    }
                }
                len += b - a;
            }
        };
        if let Some((a, b)) = self.parsed.implicit_system {
            add(a, b);
        }
        for t in self.prompt_turns() {
            add(t.start, t.end.min(self.parsed.cs));
        }
        if len == 0 {
            (0, 0)
        } else {
            (h.digest(), len as u32)
        }
    }
}

/// Lengths of one sample's parts, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lengths {
    /// Tokens before the completion (including a pre-filled think-start).
    pub prompt: u32,
    /// Reasoning tokens between think-start and think-end (or the tool-call section that ended it).
    pub thinking: u32,
    /// Completion tokens after the reasoning, up to and excluding the end of turn.
    pub response: u32,
    /// The whole stored sequence, prompt + completion.
    pub total: u32,
}

/// What the checker found in one sample.
#[derive(Debug, Clone)]
pub struct SampleFacts {
    pub flags: u64,
    pub positions: [u32; N_CODES],
    pub lengths: Lengths,
    /// Completion range `[start, end)` (end excludes trailing padding).
    pub completion: (u32, u32),
    /// Reasoning content `[start, end)` inside the completion; empty when there is none.
    pub thinking: (u32, u32),
    /// The `repetition` loop (start as a sequence position), when flagged.
    pub repetition: Option<Loop>,
    /// Where a `truncated` sample was cut: [`CutIn`] as its index, when flagged.
    pub cut: Option<u8>,
}

/// Where a completion cut at the length limit stops: inside its reasoning, inside a tool call (its name or
/// arguments) or inside the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutIn {
    Reasoning = 0,
    ToolCall = 1,
    Response = 2,
}

impl CutIn {
    pub const ALL: [CutIn; 3] = [CutIn::Reasoning, CutIn::ToolCall, CutIn::Response];

    pub fn as_str(self) -> &'static str {
        match self {
            CutIn::Reasoning => "reasoning",
            CutIn::ToolCall => "tool_call",
            CutIn::Response => "response",
        }
    }

    pub fn from_index(i: u8) -> Option<CutIn> {
        CutIn::ALL.get(usize::from(i)).copied()
    }

    /// Where the generated content of `p` stops: inside a tool call (or tool-call section) the completion
    /// opened and never closed, else inside reasoning still open, else in the response.
    fn of(profile: &Profile, p: &Parsed, events: &[Event]) -> CutIn {
        use crate::profile::kind;
        let (open_k, close_k) = if profile.has_tool_section {
            (kind::SECTION_BEGIN, kind::SECTION_END)
        } else {
            (kind::CALL_BEGIN, kind::CALL_END)
        };
        let mut depth = 0u32;
        for e in events
            .iter()
            .filter(|e| (p.cs..p.n_eff).contains(&(e.pos as usize)))
        {
            let k = profile.specials[e.slot as usize].kind;
            if k & open_k != 0 {
                depth += 1;
            } else if k & close_k != 0 {
                depth = depth.saturating_sub(1);
            }
        }
        if depth > 0 {
            CutIn::ToolCall
        } else if p.open_thinking.is_some() {
            CutIn::Reasoning
        } else {
            CutIn::Response
        }
    }
}

impl SampleFacts {
    pub fn flag(&mut self, code: Code, pos: Option<usize>) {
        if self.flags & code.bit() == 0 {
            self.flags |= code.bit();
            self.positions[code.index()] = pos.map_or(NO_POS, |p| p as u32);
        }
    }

    pub fn position(&self, code: Code) -> Option<u32> {
        Some(self.positions[code.index()]).filter(|&p| p != NO_POS)
    }
}

/// Checks one sample.
///
/// * `tokens` — the whole sequence (prompt + completion).
/// * `prompt_len` — where the completion starts, when the source stores prompt and output apart.
/// * `mask` — the loss mask row, when the source has one.
/// * `counts` — per-special-token counters (indexed by profile slot), incremented in place.
pub fn check_sample<T: TokenId + PartialEq>(
    profile: &Profile,
    tokens: &[T],
    prompt_len: Option<usize>,
    mask: Option<MaskSlice<'_>>,
    scratch: &mut Scratch,
    counts: &mut [u64],
) -> SampleFacts {
    let n = tokens.len();
    let mut facts = SampleFacts {
        flags: 0,
        positions: [NO_POS; N_CODES],
        lengths: Lengths {
            total: n as u32,
            ..Lengths::default()
        },
        completion: (0, 0),
        thinking: (0, 0),
        repetition: None,
        cut: None,
    };

    // 1. Classify: collect special-token events, count them, find the first out-of-vocabulary id.
    let events = &mut scratch.events;
    events.clear();
    let mut first_oov = None;
    // Plain text ids are the vast majority: test a whole chunk with a branch-free (vectorised) fold and only
    // walk the chunks that hold a candidate.
    let (low_end, high_start) = profile.lookup_bounds();
    for (c, chunk) in tokens.chunks(CLASSIFY_CHUNK).enumerate() {
        let any = chunk.iter().fold(false, |acc, t| {
            let id = t.id();
            acc | (id < low_end) | (id >= high_start)
        });
        if !any {
            continue;
        }
        for (j, t) in chunk.iter().enumerate() {
            let id = t.id();
            if id < low_end || id >= high_start {
                let i = c * CLASSIFY_CHUNK + j;
                if id >= profile.vocab_size {
                    first_oov.get_or_insert(i);
                } else if let Some(slot) = profile.special_slot(id) {
                    events.push(Event {
                        pos: i as u32,
                        slot,
                    });
                    counts[slot as usize] += 1;
                }
            }
        }
    }
    if first_oov.is_some() {
        facts.flag(Code::OutOfVocab, first_oov);
    }

    // 2. Parse: turns, completion, reasoning, end of turn.
    let p = parse::parse(
        profile,
        tokens,
        prompt_len,
        mask,
        events,
        &mut scratch.turns,
    );
    scratch.parsed = p;
    let turns = &scratch.turns;
    let (cs, end) = (p.cs, p.end);
    facts.completion = (cs as u32, p.n_eff as u32);
    facts.lengths.prompt = cs as u32;
    if p.has_completion() {
        facts.lengths.thinking = (p.thinking.1 - p.thinking.0) as u32;
        facts.thinking = (p.thinking.0 as u32, p.thinking.1 as u32);
        facts.lengths.response = end.saturating_sub(p.response_from) as u32;
    }

    // 3. Rules.
    let ctx = rules::Ctx {
        profile,
        tokens,
        mask,
        events,
        p: &p,
        turns,
    };
    for (code, rule) in rules::rules::<T>() {
        if let Some(pos) = rule(&ctx) {
            facts.flag(code, pos);
        }
    }
    if p.truncated {
        facts.cut = Some(CutIn::of(profile, &p, events) as u8);
    }
    if profile.token_bytes.is_some() && profile.payload.is_some() {
        let found = payload::check_calls(profile, tokens, events, &p, turns, &mut scratch.payload);
        for (code, pos) in payload::CODES.into_iter().zip(found) {
            if pos.is_some() {
                facts.flag(code, pos);
            }
        }
    }
    if p.has_completion() {
        if let Some(l) = find_loop(&tokens[cs..end], &profile.repetition) {
            facts.flag(Code::Repetition, Some(cs + l.start));
            facts.repetition = Some(Loop {
                start: cs + l.start,
                ..l
            });
        }
    }
    facts
}

/// The labelled segments of the sample last checked with `scratch` (see `parse::segments`).
pub fn segments<T: TokenId>(profile: &Profile, tokens: &[T], scratch: &Scratch) -> Vec<Segment> {
    parse::segments(
        profile,
        tokens,
        &scratch.parsed,
        &scratch.events,
        &scratch.turns,
    )
}

#[cfg(test)]
mod parse_tests;
#[cfg(test)]
mod template_tests;
#[cfg(test)]
mod tests;

/// Checks one sample read through [`crate::corpus::Corpus::samples`] as the scan checks it: its tokens, then what its source
/// found about it (a malformed line, a finish reason or token counts that disagree with the ids). What `show`
/// says of a row is then what the scan said of it, corpus-wide codes aside.
pub fn check_data(
    profile: &Profile,
    s: &crate::corpus::SampleData,
    scratch: &mut Scratch,
) -> SampleFacts {
    let mut counts = vec![0u64; profile.specials.len()];
    let mask = s.mask.as_deref().map(crate::token::MaskSlice::U8);
    let mut facts = check_sample(profile, &s.ids, s.prompt_len, mask, scratch, &mut counts);
    apply_finding(&mut facts, s.finding);
    facts
}

/// Adds what the source found about a row: a malformed line is only that (its empty sequence says nothing
/// else); a finish reason is checked against whether the completion ended.
pub(crate) fn apply_finding(facts: &mut SampleFacts, found: crate::source::Finding) {
    if let Some(line) = found.malformed_line {
        facts.flags = Code::MalformedLine.bit();
        facts.positions = [NO_POS; N_CODES];
        facts.positions[Code::MalformedLine.index()] = line;
        return;
    }
    let truncated = facts.flags & Code::Truncated.bit() != 0;
    let empty = facts.flags & Code::EmptyCompletion.bit() != 0;
    let mismatch = match found.finish {
        crate::source::Finish::Length => !truncated && !empty,
        crate::source::Finish::Stop => truncated,
        crate::source::Finish::Unknown => false,
    };
    if mismatch {
        facts.flags |= Code::FinishReasonMismatch.bit();
    }
    if found.count_mismatch {
        facts.flags |= Code::TokenCountMismatch.bit();
    }
}
