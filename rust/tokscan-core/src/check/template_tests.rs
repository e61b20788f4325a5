//! Samples laid out as each family's real chat template renders them (pre-fills, earlier turns, tool results,
//! the newline after ChatML's `<|im_end|>`), under the loss masks common trainers write, and under the
//! mutations `loss_mask_misaligned` exists to catch.

use super::*;
use crate::profile::Profile;

/// What a token is to a trainer's loss mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// System, user, tool-result turns and every header: never trained.
    Prompt,
    /// An earlier assistant turn's content.
    Earlier,
    EarlierEot,
    /// The boundary token after an earlier assistant turn's end of turn (ChatML `\n`).
    EarlierBoundary,
    /// The generation-prompt pre-fill of the final turn.
    Prefill,
    /// The final completion up to its end of turn.
    Content,
    Eot,
    /// The boundary token after the final end of turn.
    Boundary,
}

#[derive(Default)]
struct Rendered {
    ids: Vec<u32>,
    parts: Vec<Part>,
}

impl Rendered {
    fn push(&mut self, part: Part, ids: &[u32]) {
        self.ids.extend_from_slice(ids);
        self.parts.extend(std::iter::repeat_n(part, ids.len()));
    }
}

fn text(n: u32, seed: u32) -> Vec<u32> {
    (0..n)
        .map(|i| 1000 + (i * 7919 + seed * 104729) % 90000)
        .collect()
}

/// One family: its profile, its pre-fills, and how it renders a conversation.
struct Family {
    profile: &'static str,
    prefills: Vec<Vec<u32>>,
    render: fn(prefill: &[u32], multi_turn: bool) -> Rendered,
}

mod kimi {
    use super::*;
    pub const SYS: u32 = 163594;
    const USER: u32 = 163587;
    const ASST: u32 = 163588;
    const MID: u32 = 163601;
    const END: u32 = 163586;
    pub const THINK: u32 = 163606;
    const UNTHINK: u32 = 163607;

    pub fn render(prefill: &[u32], multi_turn: bool) -> Rendered {
        let mut r = Rendered::default();
        r.push(Part::Prompt, &[SYS, 14062, MID]);
        r.push(Part::Prompt, &text(12, 1));
        r.push(Part::Prompt, &[END, USER, 2482, MID]);
        r.push(Part::Prompt, &text(15, 2));
        r.push(Part::Prompt, &[END]);
        if multi_turn {
            // History turns carry an empty <think></think>, then a tool call; the tool result follows.
            r.push(Part::Prompt, &[ASST, 69702, MID]);
            r.push(Part::Earlier, &[THINK, UNTHINK]);
            r.push(Part::Earlier, &text(6, 3));
            r.push(Part::EarlierEot, &[END]);
            r.push(Part::Prompt, &[SYS, 5001, MID]);
            r.push(Part::Prompt, &text(9, 4));
            r.push(Part::Prompt, &[END, USER, 2482, MID]);
            r.push(Part::Prompt, &text(7, 5));
            r.push(Part::Prompt, &[END]);
        }
        r.push(Part::Prompt, &[ASST, 69702, MID]);
        r.push(Part::Prefill, prefill);
        if !prefill.is_empty() {
            // K2.5: the completion starts inside the reasoning (K2-Instruct: no reasoning at all).
            r.push(Part::Content, &text(10, 6));
            r.push(Part::Content, &[UNTHINK]);
        }
        r.push(Part::Content, &text(8, 7));
        r.push(Part::Eot, &[END]);
        r
    }
}

mod deepseek {
    use super::*;
    const BOS: u32 = 0;
    const EOS: u32 = 1;
    const U: u32 = 128803;
    const A: u32 = 128804;
    pub const T: u32 = 128821;
    pub const TE: u32 = 128822;
    pub const NL: u32 = 201;

    pub fn render(prefill: &[u32], multi_turn: bool) -> Rendered {
        let mut r = Rendered::default();
        r.push(Part::Prompt, &[BOS]);
        r.push(Part::Prompt, &text(12, 1));
        r.push(Part::Prompt, &[U]);
        r.push(Part::Prompt, &text(15, 2));
        if multi_turn {
            // V3.1 history: <｜Assistant｜></think>{content}<｜end▁of▁sentence｜>, then tool outputs.
            r.push(Part::Prompt, &[A]);
            r.push(Part::Earlier, &[TE]);
            r.push(Part::Earlier, &text(6, 3));
            r.push(Part::EarlierEot, &[EOS]);
            r.push(Part::Prompt, &[128810, 128812]);
            r.push(Part::Prompt, &text(9, 4));
            r.push(Part::Prompt, &[128813, 128811, U]);
            r.push(Part::Prompt, &text(7, 5));
        }
        r.push(Part::Prompt, &[A]);
        r.push(Part::Prefill, prefill);
        // No pre-fill: V3 without reasoning; </think>: V3.1 non-thinking mode.
        if prefill.first() == Some(&T) {
            r.push(Part::Content, &text(10, 6));
            r.push(Part::Content, &[TE]);
        }
        r.push(Part::Content, &text(8, 7));
        r.push(Part::Eot, &[EOS]);
        r
    }
}

mod qwen3 {
    use super::*;
    const START: u32 = 151644;
    const END: u32 = 151645;
    pub const T: u32 = 151667;
    pub const TE: u32 = 151668;
    pub const NL: u32 = 198;
    pub const NL2: u32 = 271;

    pub fn render(prefill: &[u32], multi_turn: bool) -> Rendered {
        let mut r = Rendered::default();
        r.push(Part::Prompt, &[START, 8948, NL]);
        r.push(Part::Prompt, &text(12, 1));
        r.push(Part::Prompt, &[END, NL, START, 872, NL]);
        r.push(Part::Prompt, &text(15, 2));
        r.push(Part::Prompt, &[END, NL]);
        if multi_turn {
            // History turns have their reasoning stripped; the tool result is a user turn.
            r.push(Part::Prompt, &[START, 77091, NL]);
            r.push(Part::Earlier, &text(6, 3));
            r.push(Part::EarlierEot, &[END]);
            r.push(Part::EarlierBoundary, &[NL]);
            r.push(Part::Prompt, &[START, 872, NL, 151665, NL]);
            r.push(Part::Prompt, &text(9, 4));
            r.push(Part::Prompt, &[151666, END, NL, START, 872, NL]);
            r.push(Part::Prompt, &text(7, 5));
            r.push(Part::Prompt, &[END, NL]);
        }
        r.push(Part::Prompt, &[START, 77091, NL]);
        r.push(Part::Prefill, prefill);
        if prefill.is_empty() {
            r.push(Part::Content, &[T, NL]);
        }
        if !prefill.contains(&TE) {
            r.push(Part::Content, &text(10, 6));
            r.push(Part::Content, &[NL, TE, NL2]);
        }
        r.push(Part::Content, &text(8, 7));
        r.push(Part::Eot, &[END]);
        r.push(Part::Boundary, &[NL]);
        r
    }
}

fn families() -> Vec<Family> {
    use qwen3::{NL, NL2};
    vec![
        Family {
            profile: "kimi-k2",
            prefills: vec![vec![], vec![kimi::THINK]],
            render: kimi::render,
        },
        Family {
            profile: "deepseek",
            prefills: vec![
                vec![],
                vec![deepseek::T],
                vec![deepseek::T, deepseek::NL],
                vec![deepseek::TE],
            ],
            render: deepseek::render,
        },
        Family {
            profile: "qwen3",
            prefills: vec![
                vec![],
                vec![qwen3::T],
                vec![qwen3::T, NL],
                vec![qwen3::T, NL2],
                vec![qwen3::T, NL2, qwen3::TE, NL2],
            ],
            render: qwen3::render,
        },
    ]
}

/// A trainer's masking convention.
#[derive(Debug, Clone, Copy)]
struct Convention {
    earlier_turns: bool,
    prefill: PrefillMask,
    eot: bool,
    boundary: bool,
    /// Earlier turns masked over their message content only (a leading `<think></think>` left out).
    content_only: bool,
}

/// How a trainer masks the generation prompt's pre-fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrefillMask {
    Off,
    Whole,
    /// From the pre-fill's `</think>` on (an assistant-span pattern anchored on it).
    FromThinkEnd,
    /// From the token after the pre-fill's `</think>` (a pattern that matches the answer after reasoning).
    AfterThinkEnd,
}

/// The conventions common trainers use.
fn conventions() -> Vec<Convention> {
    let mut v = Vec::new();
    for earlier_turns in [false, true] {
        for prefill in [
            PrefillMask::Off,
            PrefillMask::Whole,
            PrefillMask::FromThinkEnd,
            PrefillMask::AfterThinkEnd,
        ] {
            for eot in [false, true] {
                for boundary in [false, true] {
                    for content_only in [false, true] {
                        if (boundary && !eot) || (content_only && !earlier_turns) {
                            continue;
                        }
                        v.push(Convention {
                            earlier_turns,
                            prefill,
                            eot,
                            boundary,
                            content_only,
                        });
                    }
                }
            }
        }
    }
    v
}

fn mask_of(
    r: &Rendered,
    c: Convention,
    think_start: Option<u32>,
    think_end: Option<u32>,
) -> Vec<u8> {
    let te = r
        .parts
        .iter()
        .zip(&r.ids)
        .position(|(&p, &id)| p == Part::Prefill && Some(id) == think_end);
    let mut m: Vec<u8> = r
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            u8::from(match p {
                Part::Prompt => false,
                Part::Earlier => c.earlier_turns,
                Part::EarlierEot => c.earlier_turns && c.eot,
                Part::EarlierBoundary => c.earlier_turns && c.eot && c.boundary,
                Part::Prefill => match (c.prefill, te) {
                    (PrefillMask::Off, _) => false,
                    (PrefillMask::Whole, _) => true,
                    (PrefillMask::FromThinkEnd, Some(te)) => i >= te,
                    (PrefillMask::AfterThinkEnd, Some(te)) => i > te,
                    (_, None) => unreachable!("filtered: no </think> in the pre-fill"),
                },
                Part::Content => true,
                Part::Eot => c.eot,
                Part::Boundary => c.eot && c.boundary,
            })
        })
        .collect();
    if c.content_only {
        // Leave out an earlier turn's leading <think></think> (Kimi history turns carry one).
        for i in 0..m.len().saturating_sub(1) {
            let first_of_turn =
                r.parts[i] == Part::Earlier && (i == 0 || r.parts[i - 1] != Part::Earlier);
            if first_of_turn && Some(r.ids[i]) == think_start && r.parts[i + 1] == Part::Earlier {
                m[i] = 0;
                m[i + 1] = 0;
            }
        }
    }
    m
}

fn check(p: &Profile, ids: &[u32], mask: &[u8]) -> SampleFacts {
    let mut counts = vec![0u64; p.specials.len()];
    check_sample(
        p,
        ids,
        None,
        Some(MaskSlice::U8(mask)),
        &mut Scratch::default(),
        &mut counts,
    )
}

fn misaligned(f: &SampleFacts) -> bool {
    f.flags & Code::LossMaskMisaligned.bit() != 0
}

fn shifted(m: &[u8], k: isize) -> Vec<u8> {
    let n = m.len() as isize;
    (0..n)
        .map(|i| {
            let j = i - k;
            if (0..n).contains(&j) {
                m[j as usize]
            } else {
                0
            }
        })
        .collect()
}

/// Every (family, pre-fill, single / multi-turn) sample with every convention's mask.
fn each_case(
    mut f: impl FnMut(&str, &Profile, &Rendered, &[u32], bool, &[Vec<u8>], &[(Convention, Vec<u8>)]),
) {
    for fam in families() {
        let p = Profile::load(fam.profile, None).unwrap();
        for prefill in &fam.prefills {
            for multi in [false, true] {
                let mut r = (fam.render)(prefill, multi);
                // A completion that opens with what a pre-fill holds (Qwen3 hybrid writing <think>\n) is
                // indistinguishable from the pre-filled rendering: a trainer may mask it either way too.
                let first = r.parts.iter().position(|&x| x == Part::Content).unwrap();
                if !r.parts.contains(&Part::Prefill) {
                    let k = p.prefill_len(&r.ids[first..]);
                    r.parts[first..first + k].fill(Part::Prefill);
                }
                let n_prefill = r.parts.iter().filter(|&&x| x == Part::Prefill).count();
                let masks: Vec<(Convention, Vec<u8>)> = conventions()
                    .into_iter()
                    // Training a pre-fill is a choice only where there is one, and a one-token pre-fill
                    // trained without the end of turn is a mask shifted early (see mask_violation).
                    .filter(|c| match c.prefill {
                        PrefillMask::Off => true,
                        PrefillMask::Whole => n_prefill >= 2 || (n_prefill == 1 && c.eot),
                        // Only where they differ from Off and Whole: a `</think>` inside a longer pre-fill.
                        PrefillMask::FromThinkEnd | PrefillMask::AfterThinkEnd => {
                            let ids = r.ids.iter().zip(&r.parts);
                            let mut pre =
                                ids.filter(|(_, &x)| x == Part::Prefill).map(|(&id, _)| id);
                            let te = pre.position(|id| Some(id) == p.think_end);
                            te.is_some_and(|te| te > 0 && te + 1 < n_prefill)
                        }
                    })
                    .map(|c| (c, mask_of(&r, c, p.think_start, p.think_end)))
                    .collect();
                let valid: Vec<Vec<u8>> = masks.iter().map(|(_, m)| m.clone()).collect();
                f(fam.profile, &p, &r, prefill, multi, &valid, &masks);
            }
        }
    }
}

#[test]
fn template_renderings_are_clean_and_parse_the_prefill_as_prompt() {
    each_case(|name, p, r, prefill, multi, _, _| {
        let f = check(p, &r.ids, &vec![0; r.ids.len()]);
        assert_eq!(
            f.flags & !Code::LossMaskMisaligned.bit(),
            0,
            "{name} {prefill:?} {multi}: {:?}",
            codes(&f)
        );
        // The prompt ends after the pre-fill; a completion that opens with what a pre-fill would hold (Qwen3
        // hybrid writing <think>\n itself) reads the same.
        let content = r
            .parts
            .iter()
            .position(|&x| x == Part::Prefill || x == Part::Content)
            .unwrap();
        let prompt = content + p.prefill_len(&r.ids[content..]);
        assert_eq!(
            f.lengths.prompt as usize, prompt,
            "{name} {prefill:?} {multi}"
        );
        assert!(prefill.is_empty() || prompt == content + prefill.len());
    });
}

#[test]
fn masks_as_trainers_write_them_pass() {
    let mut n = 0;
    each_case(|name, p, r, prefill, multi, _, masks| {
        for (c, m) in masks {
            let f = check(p, &r.ids, m);
            assert_eq!(
                codes(&f),
                Vec::<&str>::new(),
                "{name} prefill {prefill:?} multi {multi} {c:?}"
            );
            n += 1;
        }
    });
    assert!(n > 100, "{n}");
}

#[test]
fn shifted_masks_are_misaligned_unless_they_equal_another_convention() {
    let (mut flagged, mut same_as_valid) = (0, 0);
    each_case(|name, p, r, prefill, multi, valid, masks| {
        for (c, m) in masks {
            for k in [-3isize, -2, -1, 1, 2, 3] {
                let s = shifted(m, k);
                let f = check(p, &r.ids, &s);
                if valid.contains(&s) {
                    // e.g. a SpecForge mask (pre-fill <think> trained) shifted one right is exactly the
                    // completion-only mask: no checker can tell them apart.
                    assert!(!misaligned(&f));
                    assert!(!(multi && c.earlier_turns), "{name} {prefill:?} {c:?} {k}: a shift of a multi-turn mask is never another convention");
                    same_as_valid += 1;
                } else {
                    assert!(
                        misaligned(&f),
                        "{name} prefill {prefill:?} multi {multi} {c:?} shift {k}: {s:?}"
                    );
                    flagged += 1;
                }
            }
        }
    });
    assert!(
        flagged > 10 * same_as_valid,
        "{flagged} flagged, {same_as_valid} equal to a convention"
    );
}

#[test]
fn the_completion_only_and_specforge_masks_are_caught_shifted_by_any_amount() {
    // The two conventions nearly every corpus uses: the completion through its end of turn (pre-fill 0), and
    // the whole assistant span after the header (pre-fill 1, end of turn 1, ChatML newline 1).
    // The one exception: under Qwen3's non-thinking pre-fill `<think>\n\n</think>\n\n`, the completion-only
    // mask one token early is the mask that starts after `</think>` and leaves the end of turn out.
    let mut exceptions = 0;
    each_case(|name, p, r, prefill, multi, valid, masks| {
        for (c, m) in masks {
            let completion_only = c.prefill == PrefillMask::Off && c.eot && !c.boundary;
            let specforge =
                c.prefill == PrefillMask::Whole && c.eot && c.boundary && !c.content_only;
            for k in 1..=3isize {
                if completion_only || (specforge && c.earlier_turns && multi) {
                    for s in [shifted(m, k), shifted(m, -k)] {
                        if valid.contains(&s) {
                            assert_eq!((name, prefill.len(), k), ("qwen3", 4, 1));
                            exceptions += 1;
                            continue;
                        }
                        assert!(
                            misaligned(&check(p, &r.ids, &s)),
                            "{name} {prefill:?} {multi} {c:?} {k}"
                        );
                    }
                }
                if specforge {
                    // Shifted early, the header is trained on.
                    assert!(
                        misaligned(&check(p, &r.ids, &shifted(m, -k))),
                        "{name} {prefill:?} {c:?} -{k}"
                    );
                }
            }
        }
    });
    assert!(exceptions > 0);
}

#[test]
fn ones_over_system_user_and_tool_result_tokens_are_misaligned() {
    each_case(|name, p, r, prefill, multi, _, masks| {
        for (c, m) in masks {
            for (i, part) in r.parts.iter().enumerate() {
                if *part != Part::Prompt || m[i] == 1 {
                    continue;
                }
                let mut bad = m.clone();
                bad[i] = 1;
                let f = check(p, &r.ids, &bad);
                assert!(
                    misaligned(&f),
                    "{name} {prefill:?} {multi} {c:?} one at {i}"
                );
                assert_eq!(f.position(Code::LossMaskMisaligned), Some(i as u32));
            }
        }
    });
}

#[test]
fn all_zero_masks_and_holes_in_the_completion_are_misaligned() {
    each_case(|name, p, r, prefill, multi, _, masks| {
        let f = check(p, &r.ids, &vec![0; r.ids.len()]);
        assert!(misaligned(&f), "{name} {prefill:?} {multi}: all zero");
        for (c, m) in masks {
            let hole = r.parts.iter().position(|&x| x == Part::Content).unwrap() + 3;
            let mut bad = m.clone();
            bad[hole] = 0;
            let f = check(p, &r.ids, &bad);
            assert_eq!(
                f.position(Code::LossMaskMisaligned),
                Some(hole as u32),
                "{name} {c:?}"
            );
            // A hole in a trained earlier turn, or a pre-fill trained in part, is misaligned too.
            if let Some(e) = r
                .parts
                .iter()
                .rposition(|&x| x == Part::Earlier)
                .filter(|_| c.earlier_turns)
            {
                let mut bad = m.clone();
                bad[e - 1] = 0;
                assert!(
                    misaligned(&check(p, &r.ids, &bad)),
                    "{name} {c:?} earlier hole"
                );
            }
            let pre: Vec<usize> = (0..r.parts.len())
                .filter(|&i| r.parts[i] == Part::Prefill)
                .collect();
            if pre.len() >= 2 {
                let mut bad = m.clone();
                bad[pre[0]] ^= 1;
                assert!(
                    misaligned(&check(p, &r.ids, &bad)),
                    "{name} {prefill:?} {c:?} partial pre-fill"
                );
            }
        }
    });
}

#[test]
fn split_prompt_and_completion_treats_the_prompt_end_as_the_prefill_end() {
    // output_ids stored apart: the prompt (header + pre-fill) is what the renderer produced.
    each_case(|name, p, r, prefill, multi, _, masks| {
        let pl = r
            .parts
            .iter()
            .rposition(|&x| x != Part::Content && x != Part::Eot && x != Part::Boundary)
            .unwrap()
            + 1;
        for (c, m) in masks {
            let mut counts = vec![0u64; p.specials.len()];
            let f = check_sample(
                p,
                &r.ids,
                Some(pl),
                Some(MaskSlice::U8(m)),
                &mut Scratch::default(),
                &mut counts,
            );
            assert_eq!(
                codes(&f),
                Vec::<&str>::new(),
                "{name} {prefill:?} {multi} {c:?}"
            );
        }
    });
}

#[test]
fn think_prefilled_is_shorthand_for_a_think_start_prefill() {
    // Old-style profile: the rule switch instead of `prefills`.
    let old = include_str!("../../profiles/kimi-k2.toml")
        .replace("prefills = [[\"<think>\"]]", "")
        .replace("[rules]\n", "[rules]\nthink_prefilled = true\n");
    let spec = Profile::parse_spec(&old, "old.toml").unwrap();
    assert!(spec.prefills.is_empty() && spec.rules.think_prefilled);
    let p = Profile::from_spec(&spec, None).unwrap();
    assert_eq!(p.prefills, vec![vec![kimi::THINK]]);
    let r = kimi::render(&[kimi::THINK], false);
    let f = check(
        &p,
        &r.ids,
        &mask_of(&r, conventions()[0], p.think_start, p.think_end),
    );
    assert_eq!(codes(&f), Vec::<&str>::new());
    assert_eq!(
        f.lengths.prompt as usize,
        r.parts
            .iter()
            .filter(|&&x| x != Part::Content && x != Part::Eot)
            .count()
    );
}

fn codes(f: &SampleFacts) -> Vec<&'static str> {
    crate::anomaly::codes_in(f.flags)
        .map(|c| c.as_str())
        .collect()
}
