//! What pairing with a tokenizer costs per record: a record is tokenized at most twice however many samples compare
//! with it (a prompts file rotated by one line tokenized each record for the sample and its six neighbours), and a
//! record over the per-record limit is never rendered or tokenized.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;
use crate::pairing::PairFact;

/// Renders a record `{"messages": [{"role": "user", "content": TEXT}]}` to TEXT and tokenizes text as its bytes,
/// counting each call; no byte table, so neighbours are compared through their tokenized ids.
#[derive(Debug, Default)]
struct Counting {
    renders: AtomicUsize,
    encodes: AtomicUsize,
    encoded_bytes: AtomicUsize,
}

impl RecordEncoder for Counting {
    fn render(&self, record: &str) -> Result<String> {
        self.renders.fetch_add(1, Ordering::Relaxed);
        let v: serde_json::Value = serde_json::from_str(record).expect("test records are JSON");
        Ok(v["messages"][0]["content"]
            .as_str()
            .expect("a content")
            .to_string())
    }

    fn encode_text(&self, text: &str) -> Result<Vec<u32>> {
        self.encodes.fetch_add(1, Ordering::Relaxed);
        self.encoded_bytes.fetch_add(text.len(), Ordering::Relaxed);
        Ok(text.bytes().map(u32::from).collect())
    }

    fn describe(&self) -> String {
        "counting".into()
    }
}

fn content(i: usize) -> String {
    format!("prompt number {i} ").repeat(50)
}

fn record(line: usize, text: &str, too_large: bool) -> PromptRecord {
    let raw = serde_json::json!({"messages": [{"role": "user", "content": text}]}).to_string();
    PromptRecord {
        line: line as u32,
        users: 1,
        user_bytes: vec![text.len() as u32],
        raw: Some(raw.into()),
        too_large,
        ..PromptRecord::default()
    }
}

/// Pairs samples `0..n` (sample i's prompt is `content(i)`, stored apart from its completion) with `records`.
fn pair_all(records: Vec<PromptRecord>, n: usize, enc: &Arc<Counting>) -> Vec<PairFact> {
    let profile = Profile::load("deepseek", None).unwrap();
    let pairing = super::tests::one_file(records, n, Some(enc.clone() as Arc<dyn RecordEncoder>));
    let mut shape = PromptShape::default();
    (0..n)
        .map(|i| {
            let ids: Vec<u32> = content(i).bytes().map(u32::from).collect();
            let mut scratch = Scratch::default();
            let mut counts = vec![0u64; profile.specials.len()];
            crate::check::check_sample(
                &profile,
                &ids,
                Some(ids.len()),
                None,
                &mut scratch,
                &mut counts,
            );
            pair_sample(
                &pairing,
                &profile,
                0,
                i as u64,
                None,
                &ids,
                Some(ids.len()),
                &scratch,
                &mut shape,
            )
            .expect("the sample pairs")
        })
        .collect()
}

#[test]
fn a_rotated_prompts_file_tokenizes_each_record_at_most_twice() {
    let n = 40;
    // Line k holds sample k+1's prompt: every sample's own record differs, the one a line up is its prompt.
    let records = (0..n)
        .map(|k| record(k + 1, &content((k + 1) % n), false))
        .collect();
    let enc = Arc::new(Counting::default());
    let facts = pair_all(records, n, &enc);
    for (i, f) in facts.iter().enumerate() {
        assert!(f.fits[SHIFT_WINDOW].first_diff < NOT_RENDERED, "{i}: {f:?}");
        for (slot, fit) in f.fits.iter().enumerate() {
            let matches = fit.first_diff == TOKENS_MATCH;
            assert_eq!(
                matches,
                i >= 1 && slot == SHIFT_WINDOW - 1,
                "{i} {slot}: {f:?}"
            );
        }
    }
    // Each sample's own record is tokenized for its first difference; each neighbour once for all (six per
    // sample, 7n in all, before).
    let encodes = enc.encodes.load(Ordering::Relaxed);
    assert!(encodes <= 2 * n, "{encodes} tokenizations for {n} records");
}

#[test]
fn a_record_over_the_limit_is_never_rendered_and_is_judged_by_its_shape() {
    let n = 9;
    let big = "x".repeat(20_000);
    let records = (0..n)
        .map(|k| {
            if k == 4 {
                record(k + 1, &big, true)
            } else {
                record(k + 1, &content(k), false)
            }
        })
        .collect();
    let enc = Arc::new(Counting::default());
    let facts = pair_all(records, n, &enc);
    assert_eq!(facts[4].fits[SHIFT_WINDOW].first_diff, NOT_RENDERED);
    assert!(enc.encoded_bytes.load(Ordering::Relaxed) < big.len());
    // The other samples are their records' renderings: none compares with a neighbour, so the large record is
    // not rendered for them either.
    for (i, f) in facts.iter().enumerate().filter(|(i, _)| *i != 4) {
        assert_eq!(f.fits[SHIFT_WINDOW].first_diff, TOKENS_MATCH, "{i}");
    }
    // Not rendered: judged by its shape, not called a mismatch.
    let mut own = facts[4].fits[SHIFT_WINDOW];
    own.shape = true;
    assert!(fits(&own, None, true));
    own.shape = false;
    assert!(!fits(&own, None, true));
}
