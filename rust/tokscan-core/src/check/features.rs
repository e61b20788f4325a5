//! Structural features of one sample that a category is expected to agree on: whether it has a system
//! prompt, whether it reasons (and whether the reasoning is empty), whether its prompt has tool turns and its
//! completion calls tools, the pre-fill its template wrote, where its loss mask starts and whether the end of
//! turn is trained. A profile cannot know which of these a corpus always has; the corpus does: per category
//! the counts of each value are summed, and a sample that departs from a strong majority is flagged
//! (`departs_from_category`, see [`crate::corpus_checks`]).
//!
//! Each feature's value is 4 bits of a `u32`; [`NA`] where the feature does not apply (no completion, no
//! mask, no end of turn).

use crate::anomaly::Code;
use crate::profile::{kind, Profile, Role};
use crate::token::{MaskSlice, TokenId};

use super::Scratch;

/// Feature names, in bit-field order.
pub const FEATURES: [&str; 7] = [
    "system",
    "thinking",
    "tool_turns",
    "tool_calls",
    "prefill",
    "mask_start",
    "end_of_turn_trained",
];

/// The value of a feature that does not apply to a sample.
pub const NA: u8 = 15;

/// The features a sample's own codes already explain: a sample flagged with one of these codes is not also
/// flagged as departing from its category on that feature (one finding per fact).
pub fn explained_by(feature: usize) -> u64 {
    let c = |codes: &[Code]| codes.iter().fold(0u64, |m, c| m | c.bit());
    match feature {
        0 => c(&[Code::MissingSystem]),
        1 => c(&[
            Code::UnterminatedThinking,
            Code::EmptyResponse,
            Code::MultipleThinkEnd,
            Code::Truncated,
            Code::EmptyCompletion,
        ]),
        3 => c(&[
            Code::UnbalancedToolCall,
            Code::Truncated,
            Code::EmptyCompletion,
        ]),
        5 | 6 => c(&[
            Code::LossMaskMisaligned,
            Code::Truncated,
            Code::EmptyCompletion,
        ]),
        _ => 0,
    }
}

/// A value's name in the report.
pub fn value_name(feature: usize, value: u8) -> String {
    if value == NA {
        return "n/a".into();
    }
    let yes_no = |v: u8| if v == 1 { "yes" } else { "no" }.to_string();
    match feature {
        0 => if value == 1 { "present" } else { "absent" }.into(),
        1 => ["absent", "empty", "present"]
            .get(value as usize)
            .copied()
            .unwrap_or("?")
            .into(),
        2 | 3 | 6 => yes_no(value),
        4 => format!("{value} token(s)"),
        5 => [
            "at_completion",
            "in_prefill",
            "after_completion_start",
            "none",
        ]
        .get(value as usize)
        .copied()
        .unwrap_or("?")
        .into(),
        _ => value.to_string(),
    }
}

pub fn get(packed: u32, feature: usize) -> u8 {
    ((packed >> (4 * feature)) & 0xF) as u8
}

fn set(packed: &mut u32, feature: usize, value: u8) {
    *packed = (*packed & !(0xF << (4 * feature))) | (u32::from(value.min(NA)) << (4 * feature));
}

/// The packed features of the sample last checked with `scratch`.
pub fn features<T: TokenId>(
    profile: &Profile,
    tokens: &[T],
    mask: Option<MaskSlice<'_>>,
    scratch: &Scratch,
) -> u32 {
    let p = &scratch.parsed;
    let mut out = u32::MAX; // every feature NA
    if profile.rules.plain {
        return out;
    }

    let mut system = p.implicit_system.is_some_and(|(a, b)| b > a);
    let mut tool_turns = false;
    for t in scratch.prompt_turns() {
        system |= t.role == Role::System && t.end > t.content_start + 1;
        tool_turns |= t.role == Role::Tool;
    }
    set(&mut out, 0, u8::from(system));
    set(&mut out, 2, u8::from(tool_turns));
    set(&mut out, 4, (p.cs - p.prefill_start).min(14) as u8);
    if p.has_completion() {
        let thinking = if p.thinking.1 > p.thinking.0 {
            2
        } else if p.closed_by_think_end || p.thinking != (0, 0) {
            1
        } else {
            0
        };
        set(&mut out, 1, thinking);
        let calls = scratch.events.iter().any(|e| {
            (e.pos as usize) >= p.cs
                && profile.specials[e.slot as usize].kind & (kind::SECTION_BEGIN | kind::CALL_BEGIN)
                    != 0
        });
        set(&mut out, 3, u8::from(calls));
    }
    if let Some(m) = mask {
        if m.len() == tokens.len() {
            let from = p.prefill_start.min(p.n_eff);
            let start = match m.first_on(from..p.n_eff) {
                None => 3,
                Some(s) if s == p.cs => 0,
                Some(s) if s < p.cs => 1,
                Some(_) => 2,
            };
            set(&mut out, 5, start);
            if let Some(e) = p.eot {
                set(&mut out, 6, u8::from(m.first_on(e..e + 1).is_some()));
            }
        }
    }
    out
}
