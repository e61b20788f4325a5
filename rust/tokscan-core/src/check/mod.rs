//! The per-sample parser and checker: one pass classifies tokens (plain text ids take a two-compare fast
//! path), then the turn structure is read from the few special-token events and every rule runs on it.

use crate::anomaly::{Code, N_CODES};
use crate::profile::{kind, Profile, Role};
use crate::repetition::{find_loop, Loop};
use crate::token::{MaskSlice, TokenId};

/// Tokens tested at once by the classify pass's fast path.
const CLASSIFY_CHUNK: usize = 32;

/// Sentinel for "no position".
pub const NO_POS: u32 = u32::MAX;

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
}

/// Lengths of one sample's parts, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
}

impl SampleFacts {
    fn flag(&mut self, code: Code, pos: Option<usize>) {
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
    let kind_of = |e: &Event| profile.specials[e.slot as usize].kind;

    // 2. Trailing padding is not part of the sample; a PAD anywhere else is.
    let mut n_eff = n;
    if let Some(pad) = profile.pad {
        while n_eff > 0 && tokens[n_eff - 1].id() == pad {
            n_eff -= 1;
        }
        if let Some(e) = events
            .iter()
            .find(|e| kind_of(e) & kind::PAD != 0 && (e.pos as usize) < n_eff)
        {
            facts.flag(Code::PadInside, Some(e.pos as usize));
        }
    }

    // 3. Turns: each role token opens one; an end of turn or the next role token closes it.
    let turns = &mut scratch.turns;
    turns.clear();
    let mut open: Option<usize> = None;
    for (ei, e) in events.iter().enumerate() {
        let pos = e.pos as usize;
        if pos >= n_eff {
            break;
        }
        let k = kind_of(e);
        if k & kind::ROLE != 0 {
            let clean = open.is_none_or(|t| turns[t].role != Role::Assistant);
            if let Some(t) = open.take() {
                turns[t].end = pos;
            }
            let rt = &profile.roles[profile.specials[e.slot as usize].role_index as usize];
            let (role, name_end) = match rt.fixed {
                Some(r) => (r, pos + 1),
                None => rt
                    .names
                    .iter()
                    .find(|(_, ids)| {
                        tokens.len() > pos + ids.len()
                            && tokens[pos + 1..pos + 1 + ids.len()]
                                .iter()
                                .zip(ids)
                                .all(|(t, &id)| t.id() == id)
                    })
                    .map_or((rt.other, pos + 1), |(r, ids)| (*r, pos + 1 + ids.len())),
            };
            let content_start = match events.get(ei + 1) {
                Some(next) if kind_of(next) & kind::SEPARATOR != 0 => next.pos as usize + 1,
                _ => {
                    let hs = &profile.header_suffix;
                    let has_suffix = !hs.is_empty()
                        && tokens.len() >= name_end + hs.len()
                        && tokens[name_end..name_end + hs.len()]
                            .iter()
                            .zip(hs)
                            .all(|(t, &id)| t.id() == id);
                    name_end + if has_suffix { hs.len() } else { 0 }
                }
            };
            turns.push(Turn {
                role,
                start: pos,
                content_start: content_start.min(n_eff),
                end: n_eff,
                clean,
            });
            open = Some(turns.len() - 1);
        } else if k & kind::TERMINATOR != 0 {
            if let Some(t) = open.take() {
                turns[t].end = pos + 1;
            }
        }
    }

    // 4. Where the completion starts.
    let limit = prompt_len.unwrap_or(n_eff).min(n_eff);
    let last_assistant = turns
        .iter()
        .rev()
        .find(|t| t.role == Role::Assistant && t.clean && t.start < limit)
        .copied();
    let cs = match (prompt_len, last_assistant) {
        (Some(pl), _) => pl.min(n_eff),
        (None, _) if profile.rules.plain => 0,
        (None, Some(t)) => {
            let a = t.content_start;
            a + profile.prefill_len(&tokens[a.min(n_eff)..n_eff])
        }
        (None, None) => mask
            .and_then(|m| m.last_run_start())
            .unwrap_or(n_eff)
            .min(n_eff),
    };
    // Start of the final assistant turn's content (a generation-prompt pre-fill sits between it and `cs`).
    let a = last_assistant.map_or(cs, |t| t.content_start.min(cs));
    facts.completion = (cs as u32, n_eff as u32);
    facts.lengths.prompt = cs as u32;

    // 5. Prompt rules.
    let in_prompt = |r: Role| turns.iter().any(|t| t.role == r && t.clean && t.start < cs);
    let has_system = in_prompt(Role::System)
        || (profile.rules.system_implicit && {
            let first_role = turns.first().map_or(cs, |t| t.start).min(cs);
            let bos_len = usize::from(
                n_eff > 0 && profile.bos.is_some() && Some(tokens[0].id()) == profile.bos,
            );
            first_role > bos_len
        });
    if profile.rules.system_required && !has_system && !profile.rules.plain {
        facts.flag(Code::MissingSystem, None);
    }
    if !in_prompt(Role::User) && !profile.rules.plain {
        facts.flag(Code::MissingUser, None);
    }

    // 6. Completion rules.
    let mut truncated = false;
    let mut end = n_eff;
    if cs >= n_eff {
        facts.flag(Code::EmptyCompletion, None);
    } else {
        let eot = events
            .iter()
            .find(|e| {
                (e.pos as usize) >= cs
                    && (e.pos as usize) < n_eff
                    && kind_of(e) & kind::TERMINATOR != 0
            })
            .map(|e| e.pos as usize);
        let has_terminator = || {
            profile
                .specials
                .iter()
                .any(|s| s.kind & kind::TERMINATOR != 0)
        };
        match eot {
            // Plain text with no end marker in the profile: nothing says where a document should end.
            None if profile.rules.plain && !has_terminator() => {}
            None => {
                truncated = true;
                facts.flag(Code::Truncated, Some(n_eff - 1));
            }
            Some(e) => {
                end = e;
                if let Some(i) =
                    (e + 1..n_eff).find(|&i| !profile.trailing_allowed.contains(&tokens[i].id()))
                {
                    facts.flag(Code::TrailingTokens, Some(i));
                }
            }
        }

        let mut think_open: Option<usize> = None; // content start of open reasoning
        let mut thinking_seen = false;
        let mut response_from = cs;
        let mut think_ends = 0u32;
        let mut closed_by_think_end = false;
        // The generation prompt may open (K2.5, R1) or open and close (Qwen3 without thinking) the reasoning:
        // replay the final assistant turn's prompt part; reasoning counts from the completion start.
        for e in events
            .iter()
            .filter(|e| (e.pos as usize) >= a && (e.pos as usize) < cs)
        {
            let k = kind_of(e);
            if k & kind::THINK_START != 0 {
                think_open = Some(cs);
                thinking_seen = true;
            } else if k & kind::THINK_END != 0 {
                think_open = None;
                thinking_seen = true;
            }
        }
        for e in events
            .iter()
            .filter(|e| (e.pos as usize) >= cs && (e.pos as usize) < end)
        {
            let pos = e.pos as usize;
            let k = kind_of(e);
            if k & kind::THINK_START != 0 {
                if think_open.is_none() && !thinking_seen {
                    think_open = Some(pos + 1);
                    thinking_seen = true;
                }
            } else if k & kind::THINK_END != 0 {
                think_ends += 1;
                if think_ends == 2 {
                    facts.flag(Code::MultipleThinkEnd, Some(pos));
                }
                if let Some(s) = think_open.take() {
                    facts.lengths.thinking = (pos - s) as u32;
                    facts.thinking = (s as u32, pos as u32);
                    response_from = pos + 1;
                    closed_by_think_end = true;
                } else if !thinking_seen {
                    // Reasoning opened by a pre-fill the profile did not declare.
                    facts.lengths.thinking = (pos - cs) as u32;
                    facts.thinking = (cs as u32, pos as u32);
                    response_from = pos + 1;
                    closed_by_think_end = true;
                    thinking_seen = true;
                }
            } else if k & kind::SECTION_BEGIN != 0 && profile.rules.think_may_end_at_tool_call {
                if let Some(s) = think_open.take() {
                    facts.lengths.thinking = (pos - s) as u32;
                    facts.thinking = (s as u32, pos as u32);
                    response_from = pos;
                }
            }
            if k & kind::STRAY != 0 {
                facts.flag(Code::StraySpecial, Some(pos));
            }
        }
        if let Some(s) = think_open {
            facts.lengths.thinking = (end - s) as u32;
            facts.thinking = (s as u32, end as u32);
            response_from = end;
            if !truncated {
                facts.flag(Code::UnterminatedThinking, Some(s - 1));
            }
        }
        facts.lengths.response = end.saturating_sub(response_from) as u32;
        if closed_by_think_end && !truncated && facts.lengths.response == 0 {
            facts.flag(Code::EmptyResponse, Some(response_from - 1));
        }
        if let Some(l) = find_loop(&tokens[cs..end], &profile.repetition) {
            facts.flag(Code::Repetition, Some(cs + l.start));
            facts.repetition = Some(Loop {
                start: cs + l.start,
                ..l
            });
        }
    }

    // 7. Tool-call grammar over the whole sequence.
    if let Some(pos) = tool_call_violation(profile, events, n_eff, truncated) {
        facts.flag(Code::UnbalancedToolCall, Some(pos));
    }

    // 8. Special-token strings written as ordinary text.
    if let Some(sp) = &profile.spelled {
        if let Some(pos) = sp.find(&tokens[..n_eff]) {
            facts.flag(Code::SpelledSpecial, Some(pos));
        }
    }

    // 9. Loss mask against the structure.
    if let Some(m) = mask {
        let eot = (cs < n_eff && !truncated).then_some(end);
        let spans = MaskSpans {
            prefill: (a, cs),
            content_end: end.min(n_eff),
            eot,
        };
        if let Some(pos) = mask_violation(m, n, tokens, profile, turns, spans) {
            facts.flag(Code::LossMaskMisaligned, pos);
        }
    }
    facts
}

/// First position where tool-call tokens break `section_begin (call_begin [argument] call_end)+ section_end`
/// (or bare calls when the profile has no section tokens). An open section at the end of a truncated
/// completion is the truncation's fault, not the grammar's.
fn tool_call_violation(
    profile: &Profile,
    events: &[Event],
    n_eff: usize,
    truncated: bool,
) -> Option<usize> {
    #[derive(PartialEq)]
    enum S {
        Outside,
        Section,
        Call,
        Argument,
    }
    let base = if profile.has_tool_section {
        S::Section
    } else {
        S::Outside
    };
    let mut s = S::Outside;
    let mut last = 0usize;
    for e in events.iter().take_while(|e| (e.pos as usize) < n_eff) {
        let k = profile.specials[e.slot as usize].kind;
        let pos = e.pos as usize;
        let ok = if k & kind::SECTION_BEGIN != 0 {
            std::mem::replace(&mut s, S::Section) == S::Outside
        } else if k & kind::CALL_BEGIN != 0 {
            std::mem::replace(&mut s, S::Call) == base
        } else if k & kind::CALL_ARGUMENT != 0 {
            std::mem::replace(&mut s, S::Argument) == S::Call
        } else if k & kind::CALL_END != 0 {
            let prev = std::mem::replace(
                &mut s,
                if profile.has_tool_section {
                    S::Section
                } else {
                    S::Outside
                },
            );
            prev == S::Call || prev == S::Argument
        } else if k & kind::SECTION_END != 0 {
            std::mem::replace(&mut s, S::Outside) == S::Section
        } else if k & (kind::TERMINATOR | kind::ROLE) != 0 {
            std::mem::replace(&mut s, S::Outside) == S::Outside
        } else {
            true
        };
        if !ok {
            return Some(pos);
        }
        last = pos;
    }
    (s != S::Outside && !truncated).then_some(last)
}

/// An earlier assistant turn's content `[c, e)` is trained on or not: all 0, or 1 from its start through its
/// end. The ones may start after a leading pre-fill or an empty `<think></think>` (a trainer that masks message
/// content only leaves those template tokens out). Anything else is a shifted or broken mask.
fn earlier_turn_violation<T: TokenId>(
    m: MaskSlice<'_>,
    tokens: &[T],
    profile: &Profile,
    c: usize,
    e: usize,
) -> Option<usize> {
    let s = m.first_on(c..e)?;
    let content = &tokens[c..e];
    let empty_think = match (profile.think_start, profile.think_end, content) {
        (Some(ts), Some(te), [x, y, ..]) => x.id() == ts && y.id() == te,
        _ => false,
    };
    let starts = [
        c,
        c + profile.prefill_len(content),
        c + 2 * usize::from(empty_think),
    ];
    if !starts.contains(&s) {
        return Some(s);
    }
    m.first_off(s..e)
}

/// The final assistant turn as the loss mask sees it.
#[derive(Debug, Clone, Copy)]
struct MaskSpans {
    /// The generation-prompt pre-fill `[a, cs)` (empty when there is none).
    prefill: (usize, usize),
    /// End of the generated content: the end of turn's position, or the end of a truncated completion.
    content_end: usize,
    /// Position of the completion's end of turn, when it has one.
    eot: Option<usize>,
}

/// First position where the loss mask disagrees with the structure: `Some(None)` for a length mismatch.
///
/// What common trainers write passes: the final completion is 1 from its first generated token through
/// its last; its end of turn and the boundary tokens after it (`mask_boundary`) may be either. Earlier
/// assistant turns may be trained or not (all turns or only the last; see `earlier_turn_violation`), their
/// end of turn and boundary tokens either way. A pre-fill is 0 or 1 as a whole, and a mask that covers a
/// one-token pre-fill covers the end of turn too: a mask from that token that stops before the end of turn
/// is the completion's mask shifted one token early. Everything else (system, user, tool-result turns,
/// headers) must be 0, and a non-empty completion under a mask with no 1 at all is not trained on.
fn mask_violation<T: TokenId>(
    m: MaskSlice<'_>,
    n: usize,
    tokens: &[T],
    profile: &Profile,
    turns: &[Turn],
    spans: MaskSpans,
) -> Option<Option<usize>> {
    if m.len() != n {
        return Some(None);
    }
    let (a, cs) = spans.prefill;
    // A completion (even one holding only its end of turn) with nothing trained: an all-zero mask.
    if (cs < spans.content_end || spans.eot.is_some()) && m.first_on(0..n).is_none() {
        return Some(Some(cs));
    }
    let mut pos = 0usize;
    for t in turns
        .iter()
        .filter(|t| t.role == Role::Assistant && t.content_start < a)
    {
        let c = t.content_start.max(pos);
        if let Some(i) = m.first_on(pos..c) {
            return Some(Some(i));
        }
        let end = t.end.max(c);
        let closed = end > c && {
            let id = tokens[end - 1].id();
            profile
                .special_slot(id)
                .is_some_and(|s| profile.specials[s as usize].kind & kind::TERMINATOR != 0)
        };
        let content_end = end - usize::from(closed);
        if let Some(i) = earlier_turn_violation(m, tokens, profile, c, content_end) {
            return Some(Some(i));
        }
        pos = end;
        while pos < a && profile.mask_boundary.contains(&tokens[pos].id()) {
            pos += 1;
        }
    }
    if let Some(i) = m.first_on(pos.min(a)..a) {
        return Some(Some(i));
    }
    let prefill_on = a < cs && m.first_off(a..cs).is_none();
    if a < cs && !prefill_on {
        if let Some(i) = m.first_on(a..cs) {
            return Some(Some(i)); // partly covered: the mask starts inside the pre-fill
        }
    }
    if let Some(i) = m.first_off(cs..spans.content_end) {
        return Some(Some(i));
    }
    // A one-token pre-fill trained with the end of turn left out is the completion-only mask shifted one
    // token early (a longer pre-fill shifted early is trained in part, caught above).
    match spans.eot {
        Some(e) if prefill_on && cs - a == 1 && m.first_off(e..e + 1).is_some() => Some(Some(e)),
        _ => None,
    }
}

#[cfg(test)]
mod template_tests;
#[cfg(test)]
mod tests;
