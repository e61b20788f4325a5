//! The per-sample rules: one function per anomaly code, each reading the parsed structure and returning
//! where the code is flagged (`Some(position)`; `Some(None)` for a code with no position) or `None`.
//! [`rules`] binds each to its code: the one table `check_sample` runs, and the one a test holds against the
//! catalogue, so a sample-scope code without a rule fails the build's tests instead of never firing.
//!
//! The passes that are not rules over the parsed structure, [`super::OTHER_PASSES`]: `out_of_vocab` (found while
//! classifying), `repetition` (a search of the completion's tokens) and the tool-call payload codes
//! (`payload.rs`, with a tokenizer).

use crate::anomaly::Code;
use crate::profile::{kind, Profile, Role};
use crate::token::{MaskSlice, TokenId};

use super::parse::Parsed;
use super::{Event, Turn};

pub type Hit = Option<Option<usize>>;

/// What every rule reads: the profile, the sample's ids and loss mask, its special-token events and its
/// parsed structure.
pub struct Ctx<'a, T> {
    pub profile: &'a Profile,
    pub tokens: &'a [T],
    pub mask: Option<MaskSlice<'a>>,
    pub events: &'a [Event],
    pub p: &'a Parsed,
    pub turns: &'a [Turn],
}

/// A rule: where its code is flagged in the sample, if anywhere.
pub type Rule<T> = fn(&Ctx<'_, T>) -> Hit;

/// Every rule over the parsed structure, bound to the code it emits, in the order `check_sample` runs them.
pub fn rules<T: TokenId + PartialEq>() -> [(Code, Rule<T>); 14] {
    [
        (Code::PadInside, |c| pad_inside(c.p)),
        (Code::MissingSystem, |c| {
            missing_system(c.profile, c.p, c.turns)
        }),
        (Code::MissingUser, |c| missing_user(c.profile, c.p, c.turns)),
        (Code::EmptyCompletion, |c| empty_completion(c.p)),
        (Code::Truncated, |c| truncated(c.p)),
        (Code::TrailingTokens, |c| trailing_tokens(c.p)),
        (Code::MultipleThinkEnd, |c| multiple_think_end(c.p)),
        (Code::StraySpecial, |c| stray_special(c.p)),
        (Code::SpecialInPrompt, |c| special_in_prompt(c.p)),
        (Code::UnterminatedThinking, |c| unterminated_thinking(c.p)),
        (Code::EmptyResponse, |c| empty_response(c.p)),
        (Code::UnbalancedToolCall, |c| {
            unbalanced_tool_call(c.profile, c.events, c.p)
        }),
        (Code::SpelledSpecial, |c| {
            spelled_special(c.profile, c.tokens, c.p)
        }),
        (Code::LossMaskMisaligned, |c| {
            loss_mask_misaligned(c.profile, c.tokens, c.mask, c.p, c.turns)
        }),
    ]
}

/// `pad_inside`: a PAD token before the trailing padding.
pub fn pad_inside(p: &Parsed) -> Hit {
    p.pad_inside.map(Some)
}

/// A clean turn of `role` starts in the prompt.
fn in_prompt(turns: &[Turn], p: &Parsed, role: Role) -> bool {
    turns
        .iter()
        .any(|t| t.role == role && t.clean && t.start < p.cs)
}

/// `missing_system`: the profile requires a system prompt and the prompt has none (explicit or implicit).
pub fn missing_system(profile: &Profile, p: &Parsed, turns: &[Turn]) -> Hit {
    let has = in_prompt(turns, p, Role::System) || p.implicit_system.is_some();
    (profile.rules.system_required && !has && !profile.rules.plain).then_some(None)
}

/// `missing_user`: the prompt has no user turn (a `plain` profile has no turns).
pub fn missing_user(profile: &Profile, p: &Parsed, turns: &[Turn]) -> Hit {
    (!in_prompt(turns, p, Role::User) && !profile.rules.plain).then_some(None)
}

/// `empty_completion`: nothing after the prompt.
pub fn empty_completion(p: &Parsed) -> Hit {
    (!p.has_completion()).then_some(None)
}

/// `truncated`: a completion with no end of turn, at its last token.
pub fn truncated(p: &Parsed) -> Hit {
    p.truncated.then(|| Some(p.n_eff - 1))
}

/// `trailing_tokens`: tokens after the completion's end of turn that the profile does not allow.
pub fn trailing_tokens(p: &Parsed) -> Hit {
    p.trailing.map(Some)
}

/// `multiple_think_end`: a second think-end in the completion.
pub fn multiple_think_end(p: &Parsed) -> Hit {
    p.second_think_end.map(Some)
}

/// `special_in_prompt`: a special token where the text of a system, user or tool turn should be.
pub fn special_in_prompt(p: &Parsed) -> Hit {
    p.special_in_prompt.map(Some)
}

/// `stray_special`: a role, separator or BOS token inside the completion.
pub fn stray_special(p: &Parsed) -> Hit {
    p.stray.map(Some)
}

/// `unterminated_thinking`: reasoning still open at the end of turn (at its think-start).
pub fn unterminated_thinking(p: &Parsed) -> Hit {
    match p.open_thinking {
        Some(s) if !p.truncated => Some(Some(s - 1)),
        _ => None,
    }
}

/// `empty_response`: a think-end followed directly by the end of turn.
pub fn empty_response(p: &Parsed) -> Hit {
    let empty = p.end.saturating_sub(p.response_from) == 0;
    (p.has_completion() && p.closed_by_think_end && !p.truncated && empty)
        .then(|| Some(p.response_from - 1))
}

/// `unbalanced_tool_call`: the first position where tool-call tokens break
/// `section_begin (call_begin [argument] call_end)+ section_end` (or bare calls when the profile has no section
/// tokens). An open section at the end of a truncated completion is the truncation's fault, not the grammar's.
pub fn unbalanced_tool_call(profile: &Profile, events: &[super::Event], p: &Parsed) -> Hit {
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
    for e in events.iter().take_while(|e| (e.pos as usize) < p.n_eff) {
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
            return Some(Some(pos));
        }
        last = pos;
    }
    (s != S::Outside && !p.truncated).then_some(Some(last))
}

/// `spelled_special`: a special token's string written as ordinary text.
pub fn spelled_special<T: TokenId + PartialEq>(profile: &Profile, tokens: &[T], p: &Parsed) -> Hit {
    profile
        .spelled
        .as_ref()
        .and_then(|sp| sp.find(&tokens[..p.n_eff]))
        .map(Some)
}

/// `loss_mask_misaligned`: the loss mask disagrees with the structure (`Some(None)` for a length mismatch).
pub fn loss_mask_misaligned<T: TokenId>(
    profile: &Profile,
    tokens: &[T],
    mask: Option<MaskSlice<'_>>,
    p: &Parsed,
    turns: &[Turn],
) -> Hit {
    let m = mask?;
    let spans = MaskSpans {
        prefill: (p.prefill_start, p.cs),
        content_end: p.end.min(p.n_eff),
        eot: p.eot,
    };
    if let Some(hit) = mask_violation(m, p.n, tokens, profile, turns, spans) {
        return Some(hit);
    }
    // `[rules] end_of_turn_trained`: a model whose mask leaves the final end of turn at 0 never learns to stop.
    match p.eot {
        Some(e)
            if profile.rules.end_of_turn_trained
                && m.len() == p.n
                && m.first_on(e..e + 1).is_none() =>
        {
            Some(Some(e))
        }
        _ => None,
    }
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
/// end of turn and boundary tokens either way. A pre-fill is 0 or 1 as a whole, or 1 from its `</think>` or
/// the token after it (a pattern that matches the answer after the reasoning), and a mask that covers a
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
            // Partly covered. Assistant-span patterns of some trainers start the mask on a non-thinking
            // pre-fill's `</think>` or on the boundary right after it (Qwen3's `<think>\n\n</think>\n\n`): a
            // convention when the ones then run unbroken into the completion; anywhere else the mask starts
            // inside the pre-fill.
            let is_think_end = |j: usize| profile.think_end == Some(tokens[j].id());
            let convention = is_think_end(i) || (i > a && is_think_end(i - 1));
            if !convention || m.first_off(i..cs).is_some() {
                return Some(Some(i));
            }
        }
    }
    if let Some(i) = m.first_off(cs..spans.content_end) {
        return Some(Some(i));
    }
    // A one-token pre-fill trained with the end of turn left out is the completion's mask shifted one
    // token early (a longer pre-fill shifted early is trained in part, caught above).
    match spans.eot {
        Some(e) if prefill_on && cs - a == 1 && m.first_off(e..e + 1).is_some() => Some(Some(e)),
        _ => None,
    }
}
