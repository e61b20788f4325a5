use super::*;
use crate::profile::Profile;

const SYS: u32 = 163594;
const USER: u32 = 163587;
const ASST: u32 = 163588;
const MID: u32 = 163601;
const END: u32 = 163586;
const THINK: u32 = 163606;
const UNTHINK: u32 = 163607;
const SEC: u32 = 163595;
const SEC_END: u32 = 163596;
const CALL: u32 = 163597;
const ARG: u32 = 163598;
const CALL_END: u32 = 163599;
const PAD: u32 = 163839;
const SYSTEM_NAME: u32 = 14062;
const USER_NAME: u32 = 2482;
const ASSISTANT_NAME: u32 = 69702;

fn kimi() -> Profile {
    Profile::load("kimi-k2", None).unwrap()
}

fn text(n: u32, seed: u32) -> Vec<u32> {
    (0..n)
        .map(|i| 1000 + (i * 7919 + seed * 104729) % 90000)
        .collect()
}

fn turn(role: u32, name: u32, body: &[u32]) -> Vec<u32> {
    let mut v = vec![role, name, MID];
    v.extend_from_slice(body);
    v.push(END);
    v
}

fn prompt() -> Vec<u32> {
    let mut p = turn(SYS, SYSTEM_NAME, &text(12, 1));
    p.extend(turn(USER, USER_NAME, &text(20, 2)));
    p.extend([ASST, ASSISTANT_NAME, MID, THINK]);
    p
}

fn completion(thinking: u32, response: u32) -> Vec<u32> {
    let mut c = text(thinking, 3);
    c.push(UNTHINK);
    c.extend(text(response, 4));
    c.push(END);
    c
}

fn run(tokens: &[u32], prompt_len: Option<usize>, mask: Option<&[u8]>) -> SampleFacts {
    let p = kimi();
    let mut counts = vec![0u64; p.specials.len()];
    check_sample(
        &p,
        tokens,
        prompt_len,
        mask.map(MaskSlice::U8),
        &mut Scratch::default(),
        &mut counts,
    )
}

fn codes(f: &SampleFacts) -> Vec<&'static str> {
    crate::anomaly::codes_in(f.flags)
        .map(|c| c.as_str())
        .collect()
}

fn joined(p: &[u32], c: &[u32]) -> Vec<u32> {
    [p, c].concat()
}

#[test]
fn clean_sample_has_no_flags_and_exact_lengths() {
    let (p, c) = (prompt(), completion(30, 10));
    let all = joined(&p, &c);
    for f in [run(&all, None, None), run(&all, Some(p.len()), None)] {
        assert_eq!(codes(&f), Vec::<&str>::new());
        assert_eq!(
            f.lengths,
            Lengths {
                prompt: p.len() as u32,
                thinking: 30,
                response: 10,
                total: all.len() as u32
            }
        );
    }
    let mask: Vec<u8> = (0..all.len()).map(|i| u8::from(i >= p.len())).collect();
    assert_eq!(codes(&run(&all, None, Some(&mask))), Vec::<&str>::new());
}

#[test]
fn reasoning_into_tool_call_section_is_legal() {
    let p = prompt();
    let mut c = text(25, 5);
    c.extend([SEC, CALL]);
    c.extend(text(4, 6));
    c.push(ARG);
    c.extend(text(9, 7));
    c.extend([CALL_END, SEC_END, END]);
    let f = run(&joined(&p, &c), None, None);
    assert_eq!(codes(&f), Vec::<&str>::new());
    assert_eq!(f.lengths.thinking, 25);
    assert_eq!(f.lengths.response, 18); // the section through its end, excluding <|im_end|>
}

#[test]
fn multi_turn_history_with_empty_think_and_tool_turns_is_legal() {
    let mut p = turn(SYS, 5000, &text(30, 8)); // tool declaration: <|im_system|> tool_declare <|im_middle|>
    p.extend(turn(SYS, SYSTEM_NAME, &text(10, 9)));
    p.extend(turn(USER, USER_NAME, &text(10, 10)));
    let mut earlier = vec![THINK, UNTHINK];
    earlier.extend([SEC, CALL, 7000, ARG, 7001, CALL_END, SEC_END]);
    p.extend(turn(ASST, ASSISTANT_NAME, &earlier));
    p.extend(turn(SYS, 5001, &text(15, 11))); // tool result
    p.extend([ASST, ASSISTANT_NAME, MID, THINK]);
    let all = joined(&p, &completion(12, 8));
    assert_eq!(codes(&run(&all, None, None)), Vec::<&str>::new());
    // Earlier assistant turns may be masked either way; the prompt elsewhere must be 0.
    let mut mask: Vec<u8> = (0..all.len()).map(|i| u8::from(i >= p.len())).collect();
    let first_asst = all.iter().position(|&t| t == ASST).unwrap();
    for m in &mut mask[first_asst + 3..first_asst + 3 + earlier.len() + 1] {
        *m = 1;
    }
    assert_eq!(codes(&run(&all, None, Some(&mask))), Vec::<&str>::new());
}

#[test]
fn tool_declaration_alone_is_not_a_system_turn() {
    let mut p = turn(SYS, 5000, &text(30, 8));
    p.extend(turn(USER, USER_NAME, &text(10, 10)));
    p.extend([ASST, ASSISTANT_NAME, MID, THINK]);
    assert_eq!(
        codes(&run(&joined(&p, &completion(5, 5)), None, None)),
        vec!["missing_system"]
    );
}

#[test]
fn missing_user() {
    let mut p = turn(SYS, SYSTEM_NAME, &text(12, 1));
    p.extend([ASST, ASSISTANT_NAME, MID, THINK]);
    assert_eq!(
        codes(&run(&joined(&p, &completion(5, 5)), None, None)),
        vec!["missing_user"]
    );
}

#[test]
fn unterminated_thinking_vs_truncated() {
    let p = prompt();
    let mut c = text(40, 3);
    c.push(END);
    let f = run(&joined(&p, &c), None, None);
    assert_eq!(codes(&f), vec!["unterminated_thinking"]);
    assert_eq!(
        f.position(Code::UnterminatedThinking),
        Some(p.len() as u32 - 1)
    );
    assert_eq!(f.lengths.thinking, 40);
    // Cut at the length limit inside the reasoning: truncated, and only that.
    let f = run(&joined(&p, &text(40, 3)), None, None);
    assert_eq!(codes(&f), vec!["truncated"]);
    assert_eq!(f.position(Code::Truncated), Some((p.len() + 39) as u32));
}

#[test]
fn a_truncated_sample_says_where_it_was_cut() {
    let p = prompt();
    let cut = |c: &[u32]| {
        let f = run(&joined(&p, c), None, None);
        assert!(codes(&f).contains(&"truncated"), "{:?}", codes(&f));
        f.cut.and_then(CutIn::from_index)
    };
    assert_eq!(cut(&text(40, 3)), Some(CutIn::Reasoning));
    let mut c = completion(10, 30);
    c.pop(); // the end of turn: cut in the response
    assert_eq!(cut(&c), Some(CutIn::Response));
    let mut c = text(25, 5);
    c.extend([SEC, CALL]);
    c.extend(text(4, 6));
    c.push(ARG);
    c.extend(text(9, 7)); // cut inside the arguments
    assert_eq!(cut(&c), Some(CutIn::ToolCall));
    c.truncate(c.len() - 10); // inside the name
    assert_eq!(cut(&c), Some(CutIn::ToolCall));
    // A complete sample is not cut anywhere.
    assert_eq!(run(&joined(&p, &completion(10, 30)), None, None).cut, None);
}

#[test]
fn empty_response_and_multiple_think_end() {
    let p = prompt();
    let f = run(&joined(&p, &completion(10, 0)), None, None);
    assert_eq!(codes(&f), vec!["empty_response"]);
    let mut c = text(10, 3);
    c.push(UNTHINK);
    c.extend(text(5, 4));
    c.push(UNTHINK);
    c.extend(text(5, 5));
    c.push(END);
    let f = run(&joined(&p, &c), None, None);
    assert_eq!(codes(&f), vec!["multiple_think_end"]);
    assert_eq!(
        f.position(Code::MultipleThinkEnd),
        Some((p.len() + 16) as u32)
    );
}

#[test]
fn trailing_tokens_and_stray_special() {
    let p = prompt();
    let mut c = completion(10, 5);
    c.extend([USER, USER_NAME, MID, 1234]);
    let f = run(&joined(&p, &c), None, None);
    assert_eq!(codes(&f), vec!["trailing_tokens"]);
    assert_eq!(
        f.position(Code::TrailingTokens),
        Some((p.len() + c.len() - 4) as u32)
    );
    let mut c = text(10, 3);
    c.extend([UNTHINK, 1111, ASST, ASSISTANT_NAME, MID, 2222, END]);
    assert_eq!(
        codes(&run(&joined(&p, &c), None, None)),
        vec!["stray_special"]
    );
    // [EOS] after <|im_end|> is allowed by the profile.
    let mut c = completion(10, 5);
    c.push(163585);
    assert_eq!(codes(&run(&joined(&p, &c), None, None)), Vec::<&str>::new());
}

#[test]
fn empty_completion_out_of_vocab_and_pad() {
    let p = prompt();
    assert_eq!(
        codes(&run(&p, Some(p.len()), None)),
        vec!["empty_completion"]
    );
    let mut c = completion(10, 5);
    c[3] = 163840;
    let f = run(&joined(&p, &c), None, None);
    assert_eq!(codes(&f), vec!["out_of_vocab"]);
    assert_eq!(f.position(Code::OutOfVocab), Some(p.len() as u32 + 3));
    let mut c = completion(10, 5);
    c[4] = PAD;
    assert_eq!(codes(&run(&joined(&p, &c), None, None)), vec!["pad_inside"]);
    // Trailing padding is fine and is not counted into the completion.
    let mut c = completion(10, 5);
    c.extend([PAD; 7]);
    let f = run(&joined(&p, &c), None, None);
    assert_eq!(codes(&f), Vec::<&str>::new());
    assert_eq!(f.lengths.response, 5);
    // Negative ids in signed storage are out of vocabulary.
    let signed: Vec<i64> = joined(&p, &completion(3, 3))
        .iter()
        .map(|&t| t as i64)
        .chain([-1])
        .collect();
    let prof = kimi();
    let mut counts = vec![0; prof.specials.len()];
    let f = check_sample(
        &prof,
        &signed,
        None,
        None,
        &mut Scratch::default(),
        &mut counts,
    );
    assert!(f.flags & Code::OutOfVocab.bit() != 0);
}

#[test]
fn unbalanced_tool_calls() {
    let p = prompt();
    for bad in [
        vec![CALL, 7000, ARG, 7001, CALL_END, END], // call outside a section
        vec![SEC, CALL, 7000, ARG, 7001, SEC_END, END], // call not closed
        vec![SEC, CALL, 7000, ARG, 7001, CALL_END, END], // section not closed
        vec![SEC, ARG, 7001, CALL_END, SEC_END, END], // argument outside a call
        vec![SEC_END, END],                         // end without begin
    ] {
        let mut c = text(5, 3);
        c.push(UNTHINK);
        c.extend(bad.iter().copied());
        assert_eq!(
            codes(&run(&joined(&p, &c), None, None)),
            vec!["unbalanced_tool_call"],
            "{bad:?}"
        );
    }
    // Cut inside a section: the truncation is the finding.
    let mut c = text(5, 3);
    c.extend([UNTHINK, SEC, CALL, 7000, ARG, 7001]);
    assert_eq!(codes(&run(&joined(&p, &c), None, None)), vec!["truncated"]);
}

#[test]
fn repetition_loop_is_found_in_the_completion() {
    let p = prompt();
    let mut c = text(10, 3);
    c.push(UNTHINK);
    c.extend(text(8, 4));
    let at = p.len() + c.len();
    for _ in 0..30 {
        c.extend([4242, 4343, 4444]);
    }
    c.push(END);
    let f = run(&joined(&p, &c), None, None);
    assert_eq!(codes(&f), vec!["repetition"]);
    assert_eq!(f.position(Code::Repetition), Some(at as u32));
}

#[test]
fn loss_mask_shifted_or_wrong_length() {
    let (p, c) = (prompt(), completion(20, 10));
    let all = joined(&p, &c);
    let good: Vec<u8> = (0..all.len()).map(|i| u8::from(i >= p.len())).collect();
    // Shifted right by 3: the completion's first tokens are not trained on.
    let mut right = vec![0u8; 3];
    right.extend_from_slice(&good[..good.len() - 3]);
    let f = run(&all, None, Some(&right));
    assert_eq!(codes(&f), vec!["loss_mask_misaligned"]);
    assert_eq!(f.position(Code::LossMaskMisaligned), Some(p.len() as u32));
    // Shifted left by 3: the assistant header is trained on.
    let mut left = good[3..].to_vec();
    left.extend([0u8; 3]);
    let f = run(&all, None, Some(&left));
    assert_eq!(codes(&f), vec!["loss_mask_misaligned"]);
    assert_eq!(
        f.position(Code::LossMaskMisaligned),
        Some(p.len() as u32 - 3)
    );
    let f = run(&all, None, Some(&good[1..]));
    assert_eq!(codes(&f), vec!["loss_mask_misaligned"]);
    assert_eq!(f.position(Code::LossMaskMisaligned), None);
    // Masking the pre-filled <think> is fine too.
    let mut with_think = good.clone();
    with_think[p.len() - 1] = 1;
    assert_eq!(
        codes(&run(&all, None, Some(&with_think))),
        Vec::<&str>::new()
    );
}

#[test]
fn special_tokens_are_counted() {
    let p = kimi();
    let all = joined(&prompt(), &completion(5, 5));
    let mut counts = vec![0u64; p.specials.len()];
    check_sample(&p, &all, None, None, &mut Scratch::default(), &mut counts);
    let count = |id: u32| counts[p.slot_of(id).unwrap()];
    assert_eq!(
        (count(END), count(MID), count(THINK), count(UNTHINK)),
        (3, 3, 1, 1)
    );
}

mod deepseek {
    use super::*;

    const BOS: u32 = 0;
    const EOS: u32 = 1;
    const U: u32 = 128803;
    const A: u32 = 128804;
    const T: u32 = 128821;
    const TE: u32 = 128822;

    fn run_ds(tokens: &[u32]) -> Vec<&'static str> {
        run_with(&Profile::load("deepseek", None).unwrap(), tokens)
    }

    fn run_with(p: &Profile, tokens: &[u32]) -> Vec<&'static str> {
        let mut counts = vec![0u64; p.specials.len()];
        let f = check_sample(p, tokens, None, None, &mut Scratch::default(), &mut counts);
        codes(&f)
    }

    #[test]
    fn implicit_system_prompt() {
        let mut s = vec![BOS];
        s.extend(text(10, 1));
        s.push(U);
        s.extend(text(10, 2));
        s.extend([A, T]);
        s.extend(text(10, 3));
        s.push(TE);
        s.extend(text(10, 4));
        s.push(EOS);
        assert_eq!(run_ds(&s), Vec::<&str>::new());
        let no_system: Vec<u32> = [BOS, U]
            .into_iter()
            .chain(s[12..].iter().copied())
            .collect();
        // DeepSeek V3.2's template renders no system text unless the conversation has one ...
        assert_eq!(run_ds(&no_system), Vec::<&str>::new());
        // ... so only a corpus whose own profile requires one flags it.
        let strict = Profile::from_spec(
            &Profile::parse_spec(
                "base = \"deepseek\"\n[rules]\nsystem_required = true\n",
                "x",
            )
            .unwrap(),
            None,
        )
        .unwrap();
        assert_eq!(run_with(&strict, &s), Vec::<&str>::new());
        assert_eq!(run_with(&strict, &no_system), vec!["missing_system"]);
    }
}

mod qwen3 {
    use super::*;

    const START: u32 = 151644;
    const END: u32 = 151645;
    const T: u32 = 151667;
    const TE: u32 = 151668;
    const NL: u32 = 198;

    fn turn(name: u32, body: &[u32]) -> Vec<u32> {
        [&[START, name, NL][..], body, &[END, NL]].concat()
    }

    #[test]
    fn thinking_disabled_prompt_closes_the_reasoning_before_the_completion() {
        let p = Profile::load("qwen3", None).unwrap();
        let mut prompt = turn(8948, &text(5, 1));
        prompt.extend(turn(872, &text(5, 2)));
        prompt.extend([START, 77091, NL, T, 271, TE, 271]);
        let mut all = prompt.clone();
        all.extend(text(9, 3));
        all.extend([END, NL]);
        let mut counts = vec![0u64; p.specials.len()];
        // The empty think block is the generation prompt's pre-fill, whether or not the prompt end is known.
        for (split, lengths) in [(Some(prompt.len()), (0, 9)), (None, (0, 9))] {
            let f = check_sample(&p, &all, split, None, &mut Scratch::default(), &mut counts);
            assert_eq!(codes(&f), Vec::<&str>::new(), "{split:?}");
            assert_eq!((f.lengths.thinking, f.lengths.response), lengths);
        }
    }
}

#[test]
fn spelled_special_tokens_are_found_at_their_position() {
    use crate::profile::{SpelledPatterns, TokenBytes};
    let mut p = kimi();
    // Text ids spell "w", except three that spell "</", "think" and ">"; special tokens have no bytes.
    let bytes = |id: u32| match id {
        1800 => b"</".to_vec(),
        37947 => b"think".to_vec(),
        32 => b">".to_vec(),
        _ => b"w".to_vec(),
    };
    let table = TokenBytes::new(163840, (0..163584).map(|id| (id, bytes(id))));
    p.spelled =
        SpelledPatterns::new(vec!["</think>".into()], std::sync::Arc::new(table), &[]).unwrap();
    let mut counts = vec![0u64; p.specials.len()];
    let (pr, mut c) = (prompt(), text(20, 3));
    c.extend([1800, 37947, 32]);
    c.extend(text(5, 4));
    c.push(UNTHINK);
    c.extend(text(5, 5));
    c.push(END);
    let all = joined(&pr, &c);
    let f = check_sample(&p, &all, None, None, &mut Scratch::default(), &mut counts);
    assert_eq!(codes(&f), vec!["spelled_special"]);
    assert_eq!(f.position(Code::SpelledSpecial), Some(pr.len() as u32 + 20));
    // The real </think> token is not text; the pieces split by a special token are no spelling.
    let split: Vec<u32> = [&pr[..], &[1800, MID, 37947, 32], &completion(5, 5)[..]].concat();
    let f = check_sample(&p, &split, None, None, &mut Scratch::default(), &mut counts);
    assert!(f.flags & Code::SpelledSpecial.bit() == 0);
    let clean = joined(&pr, &completion(10, 10));
    let f = check_sample(&p, &clean, None, None, &mut Scratch::default(), &mut counts);
    assert_eq!(codes(&f), Vec::<&str>::new());
}

/// The `plain` profile: a document is one completion; only vocabulary, padding, repetition (and, with an EOS
/// in the profile, the end of the document) are checked.
#[test]
fn plain_documents_have_no_chat_rules() {
    let plain = Profile::load("plain", None).unwrap();
    let check = |p: &Profile, t: &[u32]| {
        let mut counts = vec![0u64; p.specials.len()];
        let f = check_sample(p, t, None, None, &mut Scratch::default(), &mut counts);
        (codes(&f), f.completion, f.lengths.response)
    };
    let doc = text(300, 9);
    assert_eq!(check(&plain, &doc), (vec![], (0, 300), 300));
    assert_eq!(check(&plain, &[]).0, vec!["empty_completion"]);
    let mut looped = text(40, 1);
    looped.extend([5, 6, 7].repeat(40));
    assert_eq!(check(&plain, &looped).0, vec!["repetition"]);
    // Chat tokens mean nothing to it.
    let chat = joined(&prompt(), &completion(10, 10));
    assert_eq!(check(&plain, &chat).0, Vec::<&str>::new());
    // With an EOS: documents must end with it, and nothing may follow it.
    let text_spec = include_str!("../../profiles/plain.toml").replace(
        "vocab_size = 4294967295",
        "vocab_size = 50257\neos = 50256\npad = 50255",
    );
    let spec = Profile::parse_spec(&text_spec, "test").unwrap();
    let gpt2 = Profile::from_spec(&spec, None).unwrap();
    let doc: Vec<u32> = doc.iter().map(|t| t % 50000).collect();
    let mut ended = doc.clone();
    ended.push(50256);
    assert_eq!(check(&gpt2, &ended).0, Vec::<&str>::new());
    assert_eq!(check(&gpt2, &doc).0, vec!["truncated"]);
    let mut trailing = ended.clone();
    trailing.push(17);
    assert_eq!(check(&gpt2, &trailing).0, vec!["trailing_tokens"]);
    let mut oov = ended.clone();
    oov[3] = 60000;
    oov[4] = 50255;
    assert_eq!(check(&gpt2, &oov).0, vec!["out_of_vocab", "pad_inside"]);
}

/// Kimi-K2 tool calls from the reference ids, decoded with a byte table whose ids 0..95 are the printable ASCII
/// characters and `\n` (the role names and specials are Kimi's own ids).
#[test]
fn kimi_tool_call_payloads_are_read_with_a_byte_table() {
    use std::sync::Arc;

    use crate::profile::TokenBytes;
    let t = |s: &str| -> Vec<u32> {
        s.bytes()
            .map(|b| if b == b'\n' { 95 } else { u32::from(b) - 32 })
            .collect()
    };
    let mut p = kimi();
    p.token_bytes = Some(Arc::new(TokenBytes::new(
        p.vocab_size,
        (32u8..127)
            .map(|b| (u32::from(b) - 32, vec![b]))
            .chain([(95, vec![b'\n'])]),
    )));
    let decl = r#"[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]"#;
    let sample = |header: &str, args: &str, declare: bool, ended: bool| -> (Vec<u32>, usize) {
        let mut ids = Vec::new();
        if declare {
            let mut d = vec![SYS];
            d.extend(t("tool_declare"));
            d.push(MID);
            d.extend(t(decl));
            d.push(END);
            ids.extend(d);
        }
        ids.extend(turn(SYS, SYSTEM_NAME, &text(5, 1)));
        ids.extend(turn(USER, USER_NAME, &text(5, 2)));
        ids.extend([ASST, ASSISTANT_NAME, MID, THINK]);
        ids.extend(text(4, 3));
        ids.extend([UNTHINK, SEC, CALL]);
        let s = ids.len();
        ids.extend(t(header));
        ids.push(ARG);
        ids.extend(t(args));
        if ended {
            ids.extend([CALL_END, SEC_END, END]);
        }
        (ids, s)
    };
    let run = |p: &Profile, ids: &[u32]| {
        let mut s = Scratch::default();
        let mut counts = vec![0u64; p.specials.len()];
        check_sample(p, ids, None, None, &mut s, &mut counts)
    };
    let payload_codes = |f: &SampleFacts| -> Vec<(&'static str, u32)> {
        [
            Code::ToolCallArguments,
            Code::ToolCallName,
            Code::ToolCallUndeclared,
        ]
        .into_iter()
        .filter(|c| f.flags & c.bit() != 0)
        .map(|c| (c.as_str(), f.position(c).unwrap_or(u32::MAX)))
        .collect()
    };
    let h = "functions.get_weather:0";
    let (good, _) = sample(h, r#"{"city": "Paris"}"#, true, true);
    let f = run(&p, &good);
    assert_eq!(f.flags, 0, "{:?}", codes(&f));
    assert_eq!(run(&kimi(), &good).flags, 0);
    // No declaration: any well-formed name passes.
    let (nodecl, _) = sample("functions.search:0", r#"{"q": 1}"#, false, true);
    assert_eq!(run(&p, &nodecl).flags, 0);
    let (bad, s) = sample(h, r#"{"city": "Paris""#, true, true);
    let arg0 = s + h.len() + 1;
    assert_eq!(
        payload_codes(&run(&p, &bad)),
        vec![("tool_call_arguments", (arg0 + 15) as u32)]
    );
    let (empty, s) = sample("functions.:0", "{}", true, true);
    assert_eq!(
        payload_codes(&run(&p, &empty)),
        vec![("tool_call_name", s as u32)]
    );
    let (und, s) = sample("functions.get_stock:1", "{}", true, true);
    assert_eq!(
        payload_codes(&run(&p, &und)),
        vec![("tool_call_undeclared", (s + 10) as u32)]
    );
    // Cut by the length limit inside the arguments: truncated, and the unfinished call is not read.
    let (cut, _) = sample(h, r#"{"city": "Pa"#, true, false);
    let f = run(&p, &cut);
    assert_eq!(codes(&f), vec!["truncated"]);
    // Without a byte table nothing of the payload is read.
    assert_eq!(run(&kimi(), &bad).flags, 0);
}

#[test]
fn every_sample_scope_code_has_exactly_one_rule_or_pass() {
    use crate::anomaly::Scope;
    let mut bound: Vec<Code> = super::rules::rules::<u32>()
        .iter()
        .map(|(c, _)| *c)
        .chain(super::OTHER_PASSES)
        .collect();
    bound.sort();
    let mut sample: Vec<Code> = Code::ALL
        .iter()
        .copied()
        .filter(|c| c.scope() == Scope::Sample)
        .collect();
    sample.sort();
    assert_eq!(
        bound, sample,
        "a sample-scope code needs one rule in check/rules.rs's rules() (or one pass in OTHER_PASSES)"
    );
}
