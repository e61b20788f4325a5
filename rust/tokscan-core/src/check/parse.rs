//! The sample's structure, read from its special-token events and the profile: the turns, where the
//! completion starts (after a generation-prompt pre-fill), its reasoning, its end of turn and what follows.
//!
//! `parse` is the hot path: it allocates nothing (the turns go into a reused buffer) and records the few
//! positions the rules need. `segments` labels every token of the sample on demand (for `tokscan show`,
//! `check_one` and the report's excerpts): it runs only when asked.

use crate::profile::{kind, Profile, Role};
use crate::token::{MaskSlice, TokenId};

use super::{Event, Turn};

/// What the rules read: the parsed structure of one sample. Positions are sequence positions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The whole stored sequence.
    pub n: usize,
    /// End of the sample: `n` minus the trailing padding.
    pub n_eff: usize,
    /// The first PAD token before the trailing padding.
    pub pad_inside: Option<usize>,
    /// Start of the final assistant turn's content: a generation-prompt pre-fill is `[prefill_start, cs)`.
    pub prefill_start: usize,
    /// Where the completion starts.
    pub cs: usize,
    /// End of the generated content: the completion's end of turn, or `n_eff` when it has none.
    pub end: usize,
    /// The completion's end of turn (none when the completion is empty or truncated).
    pub eot: Option<usize>,
    /// A non-empty completion with no end of turn.
    pub truncated: bool,
    /// Text before the first role token (after a BOS) in a profile whose system prompt needs no role token:
    /// the implicit system prompt `[start, end)`.
    pub implicit_system: Option<(usize, usize)>,
    /// The first token after the end of turn that the profile does not allow there.
    pub trailing: Option<usize>,
    /// Reasoning content `[start, end)`; `(0, 0)` when there is none.
    pub thinking: (usize, usize),
    /// Where the response starts (after the reasoning).
    pub response_from: usize,
    /// The reasoning was closed by a think-end token (not by a tool-call section or the end).
    pub closed_by_think_end: bool,
    /// Start of reasoning content still open at the end of the generated content.
    pub open_thinking: Option<usize>,
    /// The second think-end token of the completion.
    pub second_think_end: Option<usize>,
    /// The first role, separator or BOS token inside the completion.
    pub stray: Option<usize>,
    /// The first special token inside the text of a system, user or tool turn of the prompt.
    pub special_in_prompt: Option<usize>,
}

impl Parsed {
    /// The completion holds at least one token.
    pub fn has_completion(&self) -> bool {
        self.cs < self.n_eff
    }
}

fn kind_of(profile: &Profile, e: &Event) -> u16 {
    profile.specials[e.slot as usize].kind
}

fn is_terminator(profile: &Profile, id: u32) -> bool {
    profile
        .special_slot(id)
        .is_some_and(|s| profile.specials[s as usize].kind & kind::TERMINATOR != 0)
}

fn starts_with<T: TokenId>(tokens: &[T], at: usize, ids: &[u32]) -> bool {
    tokens.len() >= at + ids.len()
        && tokens[at..at + ids.len()]
            .iter()
            .zip(ids)
            .all(|(t, &id)| t.id() == id)
}

/// Parses one sample from its special-token `events` (in position order); the turns go into `turns`.
pub fn parse<T: TokenId>(
    profile: &Profile,
    tokens: &[T],
    prompt_len: Option<usize>,
    mask: Option<MaskSlice<'_>>,
    events: &[Event],
    turns: &mut Vec<Turn>,
) -> Parsed {
    let n = tokens.len();
    let mut p = Parsed {
        n,
        ..Parsed::default()
    };

    // Trailing padding is not part of the sample; a PAD anywhere else is.
    let mut n_eff = n;
    if let Some(pad) = profile.pad {
        while n_eff > 0 && tokens[n_eff - 1].id() == pad {
            n_eff -= 1;
        }
        p.pad_inside = events
            .iter()
            .find(|e| kind_of(profile, e) & kind::PAD != 0 && (e.pos as usize) < n_eff)
            .map(|e| e.pos as usize);
    }
    p.n_eff = n_eff;

    parse_turns(profile, tokens, events, n_eff, turns);

    // Where the completion starts.
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
    p.cs = cs;
    p.prefill_start = a;
    p.end = n_eff;
    p.response_from = cs;

    if profile.rules.system_implicit {
        let first_role = turns.first().map_or(cs, |t| t.start).min(cs);
        let bos_len =
            usize::from(n_eff > 0 && profile.bos.is_some() && Some(tokens[0].id()) == profile.bos);
        if first_role > bos_len {
            p.implicit_system = Some((bos_len, first_role));
        }
    }

    if cs < n_eff {
        parse_completion(profile, tokens, events, &mut p);
    }
    p.special_in_prompt = special_in_prompt(profile, tokens, events, turns, a);
    p
}

/// The first special token of the prompt `[0, a)` that sits where text should be:
/// - a BOS anywhere but the first position (a doubled BOS);
/// - a reasoning or tool-call token in a system, user or tool turn (or in the text before the first role
///   token), unless the profile's `content_allowed` says the chat template writes it there;
/// - an end of turn that closes a system, user or tool turn with more text after it before the next turn
///   (text that held the end-of-turn string cut the turn short);
/// - with `every_turn_closed`, a role token that opens a turn while a prompt turn is still open.
fn special_in_prompt<T: TokenId>(
    profile: &Profile,
    tokens: &[T],
    events: &[Event],
    turns: &[Turn],
    a: usize,
) -> Option<usize> {
    const IN_TEXT: u16 = kind::THINK_START | kind::THINK_END | kind::TOOL;
    let mut ti = 0usize; // turns[ti] is the last turn starting at or before the event
    for e in events {
        let pos = e.pos as usize;
        if pos >= a {
            break;
        }
        while ti + 1 < turns.len() && turns[ti + 1].start <= pos {
            ti += 1;
        }
        let turn = turns.get(ti).filter(|t| t.start <= pos);
        let k = kind_of(profile, e);
        let in_prompt_text = match turn {
            Some(t) => t.role != Role::Assistant && pos >= t.content_start && pos < t.end,
            None => true, // text before the first role token
        };
        if k & kind::BOS != 0 && k & kind::TERMINATOR == 0 {
            // A BOS inside a prompt turn's text, or right after another (a doubled BOS); templates that open
            // every turn with one (Llama-2's `</s><s>[INST]`) put it between turns, and plain text packs
            // documents with one each.
            let doubled = pos > 0 && tokens[pos - 1].id() == tokens[pos].id();
            if pos > 0 && !profile.rules.plain && (in_prompt_text || doubled) {
                return Some(pos);
            }
        } else if k & kind::ROLE != 0 {
            let interrupted = turn
                .zip(ti.checked_sub(1).and_then(|j| turns.get(j)))
                .filter(|(t, _)| t.start == pos)
                .is_some_and(|(_, prev)| {
                    prev.role != Role::Assistant
                        && prev.end == pos
                        && pos >= prev.content_start
                        && !is_terminator(profile, tokens[pos - 1].id())
                });
            if profile.rules.every_turn_closed && interrupted {
                return Some(pos);
            }
        } else {
            let role = match turn {
                Some(t) if pos >= t.content_start && pos < t.end => Some(t.role),
                Some(_) => None,            // a header, or between turns
                None => Some(Role::System), // text before the first role token
            };
            let Some(role) = role.filter(|&r| r != Role::Assistant) else {
                continue;
            };
            let id = profile.specials[e.slot as usize].id;
            if k & IN_TEXT != 0 && !profile.content_allowed.contains(&(role, id)) {
                return Some(pos);
            }
            // An end of turn with text after it before the next role token.
            if k & kind::TERMINATOR != 0 {
                let next = if turn.is_some() { ti + 1 } else { 0 };
                let next_role = turns.get(next).map_or(a, |t| t.start).min(a);
                let text_after = (pos + 1..next_role).any(|i| {
                    !profile.mask_boundary.contains(&tokens[i].id())
                        && !profile.trailing_allowed.contains(&tokens[i].id())
                });
                if text_after {
                    return Some(pos);
                }
            }
        }
    }
    None
}

/// Each role token opens a turn; an end of turn or the next role token closes it.
fn parse_turns<T: TokenId>(
    profile: &Profile,
    tokens: &[T],
    events: &[Event],
    n_eff: usize,
    turns: &mut Vec<Turn>,
) {
    turns.clear();
    let mut open: Option<usize> = None;
    for (ei, e) in events.iter().enumerate() {
        let pos = e.pos as usize;
        if pos >= n_eff {
            break;
        }
        let k = kind_of(profile, e);
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
                        tokens.len() > pos + ids.len() && starts_with(tokens, pos + 1, ids)
                    })
                    .map_or((rt.other, pos + 1), |(r, ids)| (*r, pos + 1 + ids.len())),
            };
            let content_start = match events.get(ei + 1) {
                Some(next) if kind_of(profile, next) & kind::SEPARATOR != 0 => {
                    next.pos as usize + 1
                }
                _ => {
                    let hs = &profile.header_suffix;
                    let has_suffix = !hs.is_empty() && starts_with(tokens, name_end, hs);
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
}

/// The completion `[cs, n_eff)`: its end of turn, what trails it, its reasoning and stray tokens.
fn parse_completion<T: TokenId>(profile: &Profile, tokens: &[T], events: &[Event], p: &mut Parsed) {
    let (a, cs, n_eff) = (p.prefill_start, p.cs, p.n_eff);
    let eot = events
        .iter()
        .find(|e| {
            (e.pos as usize) >= cs
                && (e.pos as usize) < n_eff
                && kind_of(profile, e) & kind::TERMINATOR != 0
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
        None => p.truncated = true,
        Some(e) => {
            p.end = e;
            p.eot = Some(e);
            p.trailing =
                (e + 1..n_eff).find(|&i| !profile.trailing_allowed.contains(&tokens[i].id()));
        }
    }
    let end = p.end;

    let mut think_open: Option<usize> = None; // content start of open reasoning
    let mut thinking_seen = false;
    let mut think_ends = 0u32;
    // The generation prompt may open (K2.5, R1) or open and close (Qwen3 without thinking) the reasoning:
    // replay the final assistant turn's prompt part; reasoning counts from the completion start.
    for e in events
        .iter()
        .filter(|e| (e.pos as usize) >= a && (e.pos as usize) < cs)
    {
        let k = kind_of(profile, e);
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
        let k = kind_of(profile, e);
        if k & kind::THINK_START != 0 {
            if think_open.is_none() && !thinking_seen {
                think_open = Some(pos + 1);
                thinking_seen = true;
            }
        } else if k & kind::THINK_END != 0 {
            think_ends += 1;
            if think_ends == 2 {
                p.second_think_end = Some(pos);
            }
            if let Some(s) = think_open.take() {
                p.thinking = (s, pos);
                p.response_from = pos + 1;
                p.closed_by_think_end = true;
            } else if !thinking_seen {
                // Reasoning opened by a pre-fill the profile did not declare.
                p.thinking = (cs, pos);
                p.response_from = pos + 1;
                p.closed_by_think_end = true;
                thinking_seen = true;
            }
        } else if k & kind::SECTION_BEGIN != 0 && profile.rules.think_may_end_at_tool_call {
            if let Some(s) = think_open.take() {
                p.thinking = (s, pos);
                p.response_from = pos;
            }
        }
        if k & kind::STRAY != 0 && p.stray.is_none() {
            p.stray = Some(pos);
        }
    }
    if let Some(s) = think_open {
        p.thinking = (s, end);
        p.response_from = end;
        p.open_thinking = Some(s);
    }
}

/// What a segment of the sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// A role token with its role name and separator, and a BOS at the start.
    Header,
    /// System prompt content (explicit, or the text before the first role in `system_implicit` profiles).
    System,
    User,
    /// A tool-role turn before the first user turn: the tools the model may call.
    ToolDeclaration,
    /// Any other tool-role turn: a tool's result.
    ToolResult,
    /// An earlier assistant turn's content (before the completion).
    Assistant,
    /// Template tokens between the final assistant header and the completion (e.g. a pre-filled `<think>`).
    Prefill,
    /// Reasoning content of the completion.
    Thinking,
    /// The completion's answer (after the reasoning), including think-start/think-end markers.
    Response,
    /// Tool-call section and call markers with the tool's name.
    ToolCall,
    /// A tool call's arguments (after the argument marker, before the call end).
    Arguments,
    /// The token that ends a turn.
    EndOfTurn,
    /// Tokens after the completion's end of turn.
    Trailing,
    /// Trailing padding.
    Padding,
    /// Anything else: a turn opened inside a completion, text between turns.
    Other,
}

impl SegmentKind {
    /// Every kind, in the order of the enum.
    pub const ALL: [SegmentKind; 15] = [
        SegmentKind::Header,
        SegmentKind::System,
        SegmentKind::User,
        SegmentKind::ToolDeclaration,
        SegmentKind::ToolResult,
        SegmentKind::Assistant,
        SegmentKind::Prefill,
        SegmentKind::Thinking,
        SegmentKind::Response,
        SegmentKind::ToolCall,
        SegmentKind::Arguments,
        SegmentKind::EndOfTurn,
        SegmentKind::Trailing,
        SegmentKind::Padding,
        SegmentKind::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SegmentKind::Header => "header",
            SegmentKind::System => "system",
            SegmentKind::User => "user",
            SegmentKind::ToolDeclaration => "tool_declaration",
            SegmentKind::ToolResult => "tool",
            SegmentKind::Assistant => "assistant",
            SegmentKind::Prefill => "prefill",
            SegmentKind::Thinking => "thinking",
            SegmentKind::Response => "response",
            SegmentKind::ToolCall => "tool_call",
            SegmentKind::Arguments => "arguments",
            SegmentKind::EndOfTurn => "end_of_turn",
            SegmentKind::Trailing => "trailing",
            SegmentKind::Padding => "padding",
            SegmentKind::Other => "other",
        }
    }
}

/// A labelled token range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub kind: SegmentKind,
    pub start: usize,
    pub end: usize,
}

/// Every token of the sample labelled, as consecutive segments that tile `0..n` (empty for an empty sample).
/// Later labels win: turns, then the completion's parts, then tool calls, ends of turn, trailing tokens and
/// padding.
pub fn segments<T: TokenId>(
    profile: &Profile,
    tokens: &[T],
    p: &Parsed,
    events: &[Event],
    turns: &[Turn],
) -> Vec<Segment> {
    use SegmentKind as K;
    let n = tokens.len();
    let mut label = vec![K::Other; n];
    let paint = |label: &mut [K], a: usize, b: usize, k: K| {
        let (a, b) = (a.min(n), b.min(n));
        if a < b {
            label[a..b].fill(k);
        }
    };
    let first_user = turns
        .iter()
        .find(|t| t.role == Role::User && t.clean)
        .map_or(usize::MAX, |t| t.start);
    for t in turns {
        paint(&mut label, t.start, t.content_start, K::Header);
        if t.clean {
            let k = match t.role {
                Role::System => K::System,
                Role::User => K::User,
                Role::Assistant => K::Assistant,
                Role::Tool if t.start < first_user => K::ToolDeclaration,
                Role::Tool => K::ToolResult,
            };
            paint(&mut label, t.content_start, t.end, k);
        }
    }
    if n > 0 && profile.bos.is_some() && Some(tokens[0].id()) == profile.bos {
        paint(&mut label, 0, 1, K::Header);
    }
    if let Some((s, e)) = p.implicit_system {
        paint(&mut label, s, e, K::System);
    }
    paint(&mut label, p.prefill_start, p.cs, K::Prefill);
    paint(&mut label, p.cs, p.n_eff, K::Response);
    paint(&mut label, p.thinking.0, p.thinking.1, K::Thinking);

    // Tool calls: from the section (or bare call) start through its end, arguments inside; a section still
    // open at the end of the sample stays part of the response.
    let mut depth = 0usize;
    let mut begin = 0usize;
    let mut arg_start: Option<usize> = None;
    let mut args: Vec<(usize, usize)> = Vec::new();
    let (open_k, close_k) = if profile.has_tool_section {
        (kind::SECTION_BEGIN, kind::SECTION_END)
    } else {
        (kind::CALL_BEGIN, kind::CALL_END)
    };
    for e in events.iter().take_while(|e| (e.pos as usize) < p.n_eff) {
        let k = kind_of(profile, e);
        let pos = e.pos as usize;
        if k & open_k != 0 {
            if depth == 0 {
                begin = pos;
                args.clear();
            }
            depth += 1;
        }
        if depth == 0 {
            continue;
        }
        if k & kind::CALL_ARGUMENT != 0 {
            arg_start = Some(pos + 1);
        }
        if k & kind::CALL_END != 0 {
            if let Some(s) = arg_start.take() {
                args.push((s, pos));
            }
        }
        if k & close_k != 0 {
            depth -= 1;
            if depth == 0 {
                paint(&mut label, begin, pos + 1, K::ToolCall);
                for &(s, e) in &args {
                    paint(&mut label, s, e, K::Arguments);
                }
            }
        }
    }
    // Ends of turn: the closing token of each turn, and the completion's.
    for t in turns {
        if t.end > t.content_start && t.end <= p.n_eff {
            let last = t.end - 1;
            if let Some(slot) = profile.special_slot(tokens[last].id()) {
                if profile.specials[slot as usize].kind & kind::TERMINATOR != 0 {
                    paint(&mut label, last, last + 1, K::EndOfTurn);
                }
            }
        }
    }
    if let Some(e) = p.eot {
        paint(&mut label, e, e + 1, K::EndOfTurn);
        paint(&mut label, e + 1, p.n_eff, K::Trailing);
    }
    paint(&mut label, p.n_eff, n, K::Padding);

    let mut out: Vec<Segment> = Vec::new();
    for (i, &k) in label.iter().enumerate() {
        match out.last_mut() {
            Some(s) if s.kind == k => s.end = i + 1,
            _ => out.push(Segment {
                kind: k,
                start: i,
                end: i + 1,
            }),
        }
    }
    out
}
