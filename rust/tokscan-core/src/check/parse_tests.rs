//! The parser's segments, per built-in profile, against layouts whose every token range is known; and, for
//! any token sequence, segments that tile the sample exactly.

use super::*;
use crate::profile::Profile;
use proptest::prelude::*;
use SegmentKind as K;

fn text(n: u32, seed: u32) -> Vec<u32> {
    (0..n)
        .map(|i| 1000 + (i * 7919 + seed * 104729) % 90000)
        .collect()
}

/// A sample built piece by piece, with the segments each piece must come out as.
#[derive(Default)]
struct Layout {
    ids: Vec<u32>,
    want: Vec<(SegmentKind, usize, usize)>,
}

impl Layout {
    fn push(&mut self, kind: SegmentKind, ids: &[u32]) -> &mut Self {
        let (a, b) = (self.ids.len(), self.ids.len() + ids.len());
        self.ids.extend_from_slice(ids);
        match self.want.last_mut() {
            Some(last) if last.0 == kind => last.2 = b,
            _ => self.want.push((kind, a, b)),
        }
        self
    }
}

fn segs(
    profile: &str,
    ids: &[u32],
    prompt_len: Option<usize>,
) -> (Vec<(SegmentKind, usize, usize)>, SampleFacts) {
    let p = Profile::load(profile, None).unwrap();
    let mut scratch = Scratch::default();
    let mut counts = vec![0u64; p.specials.len()];
    let f = check_sample(&p, ids, prompt_len, None, &mut scratch, &mut counts);
    let s = segments(&p, ids, &scratch)
        .iter()
        .map(|s| (s.kind, s.start, s.end))
        .collect();
    (s, f)
}

fn assert_layout(profile: &str, l: &Layout, prompt_len: Option<usize>) -> SampleFacts {
    let (got, f) = segs(profile, &l.ids, prompt_len);
    assert_eq!(got, l.want, "{profile}: {:?}", l.ids);
    f
}

mod kimi {
    pub const SYS: u32 = 163594;
    pub const USER: u32 = 163587;
    pub const ASST: u32 = 163588;
    pub const MID: u32 = 163601;
    pub const END: u32 = 163586;
    pub const THINK: u32 = 163606;
    pub const UNTHINK: u32 = 163607;
    pub const SEC: u32 = 163595;
    pub const SEC_END: u32 = 163596;
    pub const CALL: u32 = 163597;
    pub const ARG: u32 = 163598;
    pub const CALL_END: u32 = 163599;
    pub const PAD: u32 = 163839;
    pub const EOS: u32 = 163585;
    pub const SYSTEM: u32 = 14062;
    pub const USER_NAME: u32 = 2482;
    pub const ASSISTANT_NAME: u32 = 69702;
    pub const TOOL_DECLARE: u32 = 5001;
    pub const TOOL_NAME: u32 = 5002;
}

#[test]
fn kimi_system_user_prefilled_thinking_response() {
    use kimi::*;
    let mut l = Layout::default();
    l.push(K::Header, &[SYS, SYSTEM, MID])
        .push(K::System, &text(12, 1))
        .push(K::EndOfTurn, &[END])
        .push(K::Header, &[USER, USER_NAME, MID])
        .push(K::User, &text(20, 2))
        .push(K::EndOfTurn, &[END])
        .push(K::Header, &[ASST, ASSISTANT_NAME, MID])
        .push(K::Prefill, &[THINK])
        .push(K::Thinking, &text(10, 3))
        .push(K::Response, &[UNTHINK])
        .push(K::Response, &text(8, 4))
        .push(K::EndOfTurn, &[END]);
    let f = assert_layout("kimi-k2", &l, None);
    assert_eq!(f.flags, 0);
    assert_eq!(f.thinking, (44, 54));
    // The same sample stored as prompt + output: the prompt ends after the pre-fill.
    assert_layout("kimi-k2", &l, Some(44));
}

#[test]
fn kimi_tool_declaration_multi_turn_tool_call_trailing_and_padding() {
    use kimi::*;
    let mut l = Layout::default();
    l.push(K::Header, &[SYS, TOOL_DECLARE, MID])
        .push(K::ToolDeclaration, &text(9, 1))
        .push(K::EndOfTurn, &[END])
        .push(K::Header, &[USER, USER_NAME, MID])
        .push(K::User, &text(7, 2))
        .push(K::EndOfTurn, &[END])
        .push(K::Header, &[ASST, ASSISTANT_NAME, MID])
        .push(K::Assistant, &[THINK, UNTHINK])
        .push(K::Assistant, &text(5, 3))
        .push(K::EndOfTurn, &[END])
        .push(K::Header, &[SYS, TOOL_NAME, MID])
        .push(K::ToolResult, &text(6, 4))
        .push(K::EndOfTurn, &[END])
        .push(K::Header, &[ASST, ASSISTANT_NAME, MID])
        .push(K::Prefill, &[THINK])
        // Reasoning runs straight into the tool-call section.
        .push(K::Thinking, &text(6, 5))
        .push(K::ToolCall, &[SEC, CALL])
        .push(K::ToolCall, &text(2, 6))
        .push(K::ToolCall, &[ARG])
        .push(K::Arguments, &text(4, 7))
        .push(K::ToolCall, &[CALL_END, CALL])
        .push(K::ToolCall, &text(2, 8))
        .push(K::ToolCall, &[ARG])
        .push(K::Arguments, &text(3, 9))
        .push(K::ToolCall, &[CALL_END, SEC_END])
        .push(K::EndOfTurn, &[END])
        .push(K::Trailing, &[EOS])
        .push(K::Trailing, &text(2, 10))
        .push(K::Padding, &[PAD, PAD, PAD]);
    let f = assert_layout("kimi-k2", &l, None);
    assert_eq!(
        codes_of(&f),
        ["missing_system", "trailing_tokens"],
        "the structure's codes"
    );
}

#[test]
fn kimi_truncated_completion_with_an_open_section_stays_response() {
    use kimi::*;
    let mut l = Layout::default();
    l.push(K::Header, &[SYS, SYSTEM, MID])
        .push(K::System, &text(3, 1))
        .push(K::EndOfTurn, &[END])
        .push(K::Header, &[USER, USER_NAME, MID])
        .push(K::User, &text(4, 2))
        .push(K::EndOfTurn, &[END])
        .push(K::Header, &[ASST, ASSISTANT_NAME, MID])
        .push(K::Response, &text(5, 3))
        .push(K::Response, &[SEC, CALL])
        .push(K::Response, &text(3, 4));
    let f = assert_layout("kimi-k2", &l, None);
    assert_eq!(codes_of(&f), ["truncated"]);
}

mod deepseek {
    pub const BOS: u32 = 0;
    pub const EOS: u32 = 1;
    pub const PAD: u32 = 2;
    pub const U: u32 = 128803;
    pub const A: u32 = 128804;
    pub const SEC: u32 = 128806;
    pub const SEC_END: u32 = 128807;
    pub const CALL: u32 = 128808;
    pub const CALL_END: u32 = 128809;
    pub const SEP: u32 = 128814;
    pub const OUTPUTS: u32 = 128810;
    pub const OUTPUT: u32 = 128812;
    pub const OUTPUT_END: u32 = 128813;
    pub const OUTPUTS_END: u32 = 128811;
    pub const T: u32 = 128821;
    pub const TE: u32 = 128822;
    pub const NL: u32 = 201;
}

#[test]
fn deepseek_implicit_system_thinking_response() {
    use deepseek::*;
    let mut l = Layout::default();
    l.push(K::Header, &[BOS])
        .push(K::System, &text(12, 1))
        .push(K::Header, &[U])
        .push(K::User, &text(15, 2))
        .push(K::Header, &[A])
        .push(K::Prefill, &[T, NL])
        .push(K::Thinking, &text(10, 3))
        .push(K::Response, &[TE])
        .push(K::Response, &text(8, 4))
        .push(K::EndOfTurn, &[EOS]);
    let f = assert_layout("deepseek", &l, None);
    assert_eq!(f.flags, 0);
}

#[test]
fn deepseek_without_system_multi_turn_tool_call_and_padding() {
    use deepseek::*;
    let mut l = Layout::default();
    l.push(K::Header, &[BOS, U])
        .push(K::User, &text(7, 1))
        .push(K::Header, &[A])
        .push(K::Assistant, &[TE])
        .push(K::Assistant, &text(5, 2))
        .push(K::EndOfTurn, &[EOS])
        // Tool outputs have no role token: between turns.
        .push(K::Other, &[OUTPUTS, OUTPUT])
        .push(K::Other, &text(4, 3))
        .push(K::Other, &[OUTPUT_END, OUTPUTS_END])
        .push(K::Header, &[U])
        .push(K::User, &text(6, 4))
        .push(K::Header, &[A])
        .push(K::Prefill, &[T])
        .push(K::Thinking, &text(5, 5))
        .push(K::Response, &[TE])
        .push(K::Response, &text(3, 6))
        .push(K::ToolCall, &[SEC, CALL])
        .push(K::ToolCall, &text(2, 7))
        .push(K::ToolCall, &[SEP])
        .push(K::Arguments, &text(4, 8))
        .push(K::ToolCall, &[CALL_END, SEC_END])
        .push(K::EndOfTurn, &[EOS])
        .push(K::Padding, &[PAD, PAD]);
    let f = assert_layout("deepseek", &l, None);
    assert_eq!(f.flags, 0);
}

mod qwen3 {
    pub const START: u32 = 151644;
    pub const END: u32 = 151645;
    pub const PAD: u32 = 151643;
    pub const CALL: u32 = 151657;
    pub const CALL_END: u32 = 151658;
    pub const RESP: u32 = 151665;
    pub const RESP_END: u32 = 151666;
    pub const T: u32 = 151667;
    pub const TE: u32 = 151668;
    pub const SYSTEM: u32 = 8948;
    pub const USER: u32 = 872;
    pub const ASSISTANT: u32 = 77091;
    pub const NL: u32 = 198;
    pub const NL2: u32 = 271;
}

#[test]
fn qwen3_system_thinking_in_the_completion_and_the_allowed_newline() {
    use qwen3::*;
    let mut l = Layout::default();
    l.push(K::Header, &[START, SYSTEM, NL])
        .push(K::System, &text(12, 1))
        .push(K::EndOfTurn, &[END])
        .push(K::Other, &[NL])
        .push(K::Header, &[START, USER, NL])
        .push(K::User, &text(15, 2))
        .push(K::EndOfTurn, &[END])
        .push(K::Other, &[NL])
        .push(K::Header, &[START, ASSISTANT, NL])
        .push(K::Response, &[T])
        .push(K::Thinking, &[NL])
        .push(K::Thinking, &text(10, 3))
        .push(K::Thinking, &[NL])
        .push(K::Response, &[TE, NL2])
        .push(K::Response, &text(8, 4))
        .push(K::EndOfTurn, &[END])
        .push(K::Trailing, &[NL]);
    // Without a pre-fill the completion opens the reasoning itself.
    let (got, f) = segs("qwen3", &l.ids, Some(40));
    assert_eq!(got, l.want);
    assert_eq!(f.flags, 0);
}

#[test]
fn qwen3_without_system_multi_turn_non_thinking_prefill_tool_call_and_padding() {
    use qwen3::*;
    let mut l = Layout::default();
    l.push(K::Header, &[START, USER, NL])
        .push(K::User, &text(15, 2))
        .push(K::EndOfTurn, &[END])
        .push(K::Other, &[NL])
        .push(K::Header, &[START, ASSISTANT, NL])
        .push(K::Assistant, &text(6, 3))
        .push(K::EndOfTurn, &[END])
        .push(K::Other, &[NL])
        // The tool result is a user turn.
        .push(K::Header, &[START, USER, NL])
        .push(K::User, &[RESP, NL])
        .push(K::User, &text(9, 4))
        .push(K::User, &[RESP_END])
        .push(K::EndOfTurn, &[END])
        .push(K::Other, &[NL])
        .push(K::Header, &[START, ASSISTANT, NL])
        .push(K::Prefill, &[T, NL2, TE, NL2])
        .push(K::Response, &text(4, 5))
        .push(K::ToolCall, &[CALL])
        .push(K::ToolCall, &text(6, 6))
        .push(K::ToolCall, &[CALL_END])
        .push(K::EndOfTurn, &[END])
        .push(K::Padding, &[PAD, PAD, PAD]);
    let f = assert_layout("qwen3", &l, None);
    assert_eq!(f.flags, 0);
}

#[test]
fn an_empty_sample_has_no_segments() {
    for name in ["kimi-k2", "deepseek", "qwen3"] {
        assert_eq!(segs(name, &[], None).0, []);
    }
}

fn codes_of(f: &SampleFacts) -> Vec<&'static str> {
    crate::anomaly::codes_in(f.flags)
        .map(|c| c.as_str())
        .collect()
}

/// Special tokens and a few plain ids of a profile, to draw arbitrary samples from.
fn alphabet(p: &Profile) -> Vec<u32> {
    let mut ids: Vec<u32> = p.specials.iter().map(|s| s.id).collect();
    ids.extend(
        p.roles
            .iter()
            .flat_map(|r| r.names.iter().flat_map(|(_, v)| v.clone())),
    );
    ids.extend(p.header_suffix.iter().copied());
    ids.extend(p.prefills.iter().flatten().copied());
    ids.extend([1000, 2000, 3000, 4000, p.vocab_size + 5]);
    ids
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// For any token sequence, prompt length and mask, the segments are contiguous, non-overlapping, non-empty
    /// and cover `0..len` exactly.
    #[test]
    fn segments_tile_the_sample(
        profile in 0usize..3,
        picks in prop::collection::vec(0usize..1000, 0..120),
        prompt_len in prop::option::of(0usize..130),
        mask_seed in prop::option::of(prop::collection::vec(0u8..2, 0..130)),
    ) {
        let p = Profile::load(["kimi-k2", "deepseek", "qwen3"][profile], None).unwrap();
        let abc = alphabet(&p);
        let ids: Vec<u32> = picks.iter().map(|&i| abc[i % abc.len()]).collect();
        let mut scratch = Scratch::default();
        let mut counts = vec![0u64; p.specials.len()];
        let m = mask_seed.as_deref().map(MaskSlice::U8);
        check_sample(&p, &ids, prompt_len, m, &mut scratch, &mut counts);
        let s = segments(&p, &ids, &scratch);
        let mut at = 0;
        for seg in &s {
            prop_assert_eq!(seg.start, at);
            prop_assert!(seg.end > seg.start);
            at = seg.end;
        }
        prop_assert_eq!(at, ids.len());
        for w in s.windows(2) {
            prop_assert_ne!(w[0].kind, w[1].kind, "neighbours of the same kind are one segment");
        }
    }
}

/// `special_in_prompt` at `want` (or nowhere), and no other finding but the tool-call grammar's.
fn assert_special_in_prompt(profile: &str, ids: &[u32], want: Option<usize>) {
    let (_, f) = segs(profile, ids, None);
    match want {
        Some(pos) => {
            // A lone tool-call token also breaks the tool-call grammar.
            let codes: Vec<&str> = codes_of(&f)
                .into_iter()
                .filter(|&c| c != "unbalanced_tool_call")
                .collect();
            assert_eq!(codes, ["special_in_prompt"], "{profile}: {ids:?}");
            assert_eq!(f.position(Code::SpecialInPrompt), Some(pos as u32));
        }
        None => assert_eq!(codes_of(&f), Vec::<&str>::new(), "{profile}: {ids:?}"),
    }
}

#[test]
fn special_tokens_where_prompt_text_should_be() {
    use qwen3::*;
    let answer = |ids: &mut Vec<u32>| {
        ids.extend([START, ASSISTANT, NL, T, NL]);
        ids.extend(text(5, 9));
        ids.extend([TE, NL2]);
        ids.extend(text(4, 8));
        ids.push(END);
    };
    // Qwen3's tool instructions: <tool_call></tool_call> in the system turn are the template's.
    let mut ok = vec![START, SYSTEM, NL];
    ok.extend(text(6, 1));
    ok.extend([CALL, CALL_END]);
    ok.extend(text(3, 2));
    ok.extend([END, NL, START, USER, NL]);
    ok.extend(text(5, 3));
    ok.extend([END, NL]);
    answer(&mut ok);
    assert_special_in_prompt("qwen3", &ok, None);

    // A user turn that holds a tool-call token, a think-end, or an <|im_start|> (a tool output that held the
    // string, encoded as the real token), each found where it is.
    for (bad, at) in [(CALL, 0usize), (TE, 0), (START, 0)] {
        let mut ids = vec![START, USER, NL];
        ids.extend(text(4, 3));
        let pos = ids.len() + at;
        ids.push(bad);
        ids.extend(text(4, 4));
        ids.extend([END, NL]);
        answer(&mut ids);
        assert_special_in_prompt("qwen3", &ids, Some(pos));
    }
}

#[test]
fn special_tokens_where_prompt_text_should_be_deepseek_and_kimi() {
    // DeepSeek: a doubled BOS, and an end of sentence inside the user's text.
    use deepseek::{A, BOS, EOS, T as DT, TE as DTE, U};
    let ds_answer = |ids: &mut Vec<u32>| {
        ids.extend([A, DT]);
        ids.extend(text(5, 9));
        ids.push(DTE);
        ids.extend(text(3, 8));
        ids.push(EOS);
    };
    let mut ids = vec![BOS];
    ids.extend(text(5, 1));
    ids.push(U);
    ids.extend(text(5, 2));
    ds_answer(&mut ids);
    assert_special_in_prompt("deepseek", &ids, None);
    let mut doubled = vec![BOS];
    doubled.extend(&ids);
    assert_special_in_prompt("deepseek", &doubled, Some(1));
    let mut cut = vec![BOS, U];
    cut.extend(text(3, 2));
    cut.push(EOS);
    cut.extend(text(3, 3));
    ds_answer(&mut cut);
    assert_special_in_prompt("deepseek", &cut, Some(5));

    // Kimi: a tool-call token in the user's text.
    use kimi::{
        ASSISTANT_NAME, ASST, CALL, END, MID, SYS, SYSTEM, THINK, UNTHINK, USER, USER_NAME,
    };
    let mut k = vec![SYS, SYSTEM, MID];
    k.extend(text(4, 1));
    k.extend([END, USER, USER_NAME, MID]);
    k.extend(text(3, 2));
    let pos = k.len();
    k.push(CALL);
    k.extend(text(3, 3));
    k.extend([END, ASST, ASSISTANT_NAME, MID, THINK]);
    k.extend(text(4, 4));
    k.extend([UNTHINK]);
    k.extend(text(4, 5));
    k.push(END);
    assert_special_in_prompt("kimi-k2", &k, Some(pos));
}

#[test]
fn special_in_prompt_edges_found_in_review() {
    use deepseek::{A, BOS, CALL, CALL_END, EOS, SEC, SEC_END, SEP, T as DT, TE as DTE, U};
    let ds_answer = |ids: &mut Vec<u32>| {
        ids.extend([A, DT]);
        ids.extend(text(5, 9));
        ids.push(DTE);
        ids.extend(text(3, 8));
        ids.push(EOS);
    };
    // DeepSeek-V3.1's tool instructions spell the tool-call format out in the system text: the template's.
    let mut v31 = vec![BOS];
    v31.extend(text(4, 1));
    v31.extend([SEC, CALL]);
    v31.extend(text(2, 2));
    v31.push(SEP);
    v31.extend(text(3, 3));
    v31.extend([CALL_END, SEC_END]);
    v31.extend(text(2, 4));
    v31.push(U);
    v31.extend(text(4, 5));
    ds_answer(&mut v31);
    assert_special_in_prompt("deepseek", &v31, None);
    // An end of sentence closing the system text right before the user's turn is no text cut short.
    let mut closed = vec![BOS];
    closed.extend(text(3, 1));
    closed.extend([EOS, U]);
    closed.extend(text(3, 2));
    ds_answer(&mut closed);
    assert_special_in_prompt("deepseek", &closed, None);

    // Qwen3: a role token right at the start of a user turn's content (a pasted fake system turn).
    use qwen3::*;
    let mut q = vec![START, USER, NL, START, SYSTEM, NL];
    q.extend(text(4, 1));
    q.extend([END, NL, START, ASSISTANT, NL, T, NL]);
    q.extend(text(4, 2));
    q.extend([TE, NL2]);
    q.extend(text(3, 3));
    q.push(END);
    assert_special_in_prompt("qwen3", &q, Some(3));
}

#[test]
fn segment_kind_all_lists_every_kind_once_in_order() {
    // `Other` is the last variant: a kind added anywhere before it shifts the discriminants and fails this.
    assert_eq!(SegmentKind::ALL.len(), SegmentKind::Other as usize + 1);
    for (i, k) in SegmentKind::ALL.iter().enumerate() {
        assert_eq!(*k as usize, i, "{}", k.as_str());
    }
}
