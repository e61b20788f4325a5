use super::*;
use proptest::prelude::*;

const POLICY: RepetitionPolicy = RepetitionPolicy {
    max_period: 1024,
    min_repeats: 4,
    min_span: 64,
};

/// Text-like ids: distinct enough that only planted repeats repeat.
fn text(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 1000 + (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) % 150_000)
        .collect()
}

#[test]
fn finds_a_short_loop_its_start_period_and_span() {
    let mut t: Vec<u32> = (0..100).collect();
    let at = t.len();
    for _ in 0..22 {
        t.extend_from_slice(&[7, 8, 9]);
    }
    t.extend(200..220);
    let want = Some(Loop {
        start: at,
        period: 3,
        span: 66,
    });
    assert_eq!(find_loop(&t, &POLICY), want);
    assert_eq!(find_loop_naive(&t, &POLICY), want);
}

#[test]
fn finds_a_paragraph_loop_cut_at_the_length_limit() {
    let mut t = text(1, 300);
    let unit = text(2, 400);
    for _ in 0..4 {
        t.extend_from_slice(&unit);
    }
    t.extend_from_slice(&unit[..123]); // truncated mid-repeat
    let want = Some(Loop {
        start: 300,
        period: 400,
        span: 1723,
    });
    assert_eq!(find_loop(&t, &POLICY), want);
    assert_eq!(find_loop_naive(&t, &POLICY), want);
    // Three and a half repeats are not enough.
    let mut t = text(1, 300);
    for _ in 0..3 {
        t.extend_from_slice(&unit);
    }
    t.extend_from_slice(&unit[..200]);
    assert_eq!(find_loop(&t, &POLICY), None);
    assert_eq!(find_loop_naive(&t, &POLICY), None);
}

#[test]
fn short_repeats_are_not_loops() {
    let mut t: Vec<u32> = (0..50).collect();
    for _ in 0..10 {
        t.extend_from_slice(&[1, 2, 3]);
    }
    t.extend(300..400);
    assert_eq!(find_loop(&t, &POLICY), None);
}

#[test]
fn the_old_short_period_policy_behaves_as_before() {
    // max_period = 8 alone (min_repeats 4, min_span 64): 64 tokens of a period <= 8, nothing longer.
    let old = RepetitionPolicy {
        max_period: 8,
        ..POLICY
    };
    let mut t = text(3, 50);
    for _ in 0..8 {
        t.extend_from_slice(&[5, 6, 7, 8, 9, 10, 11, 12]);
    }
    assert_eq!(
        find_loop(&t, &old).map(|l| (l.start, l.period)),
        Some((50, 8))
    );
    let mut t = text(3, 50);
    for _ in 0..7 {
        t.extend_from_slice(&[5, 6, 7, 8, 9, 10, 11, 12]);
    }
    assert_eq!(find_loop(&t, &old), None);
    let mut t = text(3, 50);
    let unit = text(4, 20);
    for _ in 0..10 {
        t.extend_from_slice(&unit);
    }
    assert_eq!(find_loop(&t, &old), None);
    assert_eq!(find_loop(&t, &POLICY).map(|l| l.period), Some(20));
}

#[test]
fn a_loop_of_one_token_prefers_the_shortest_period() {
    let mut t = text(5, 10);
    t.extend(std::iter::repeat_n(42u32, 3000));
    let want = Some(Loop {
        start: 10,
        period: 1,
        span: 3000,
    });
    assert_eq!(find_loop(&t, &POLICY), want);
    assert_eq!(find_loop_naive(&t, &POLICY), want);
}

#[test]
fn scratch_state_does_not_leak_between_samples() {
    // A loop in one sample, then a clean sample whose k-grams equal the first's: no false memory.
    let unit = text(6, 50);
    let mut a = Vec::new();
    for _ in 0..5 {
        a.extend_from_slice(&unit);
    }
    assert!(find_loop(&a, &POLICY).is_some());
    let b: Vec<u32> = unit.iter().chain(text(7, 300).iter()).copied().collect();
    assert_eq!(find_loop(&b, &POLICY), None);
    assert!(find_loop(&a, &POLICY).is_some());
}

fn build(prefix: &[u32], unit: &[u32], reps: usize, partial: usize, suffix: &[u32]) -> Vec<u32> {
    let mut t = prefix.to_vec();
    for _ in 0..reps {
        t.extend_from_slice(unit);
    }
    t.extend_from_slice(&unit[..partial.min(unit.len())]);
    t.extend_from_slice(suffix);
    t
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Planted loops of any period up to 1,200 (above the default max_period too), any number of repeats, a
    /// partial last repeat, noise around them (from a small alphabet, so near-loops and accidental repeats
    /// are common), and often nothing after the loop (a completion cut at the length limit).
    #[test]
    fn fingerprint_search_equals_exhaustive(
        prefix in proptest::collection::vec(0u32..8, 0..300),
        period in 1usize..1200,
        unit_alphabet in prop_oneof![Just(3u32), Just(8u32), Just(1_000_000u32)],
        unit_seed in any::<u64>(),
        reps in 0usize..7,
        partial in 0usize..1200,
        suffix in prop_oneof![Just(Vec::new()), proptest::collection::vec(0u32..8, 0..200)],
        noise in proptest::collection::vec((0usize..8000, 0u32..8), 0..3),
        max_period in prop_oneof![Just(1024u32), Just(8u32), 1u32..1300],
        min_repeats in 2u32..6,
        min_span in 2u32..200,
    ) {
        let mut x = unit_seed | 1;
        let unit: Vec<u32> = (0..period)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % u64::from(unit_alphabet)) as u32
            })
            .collect();
        let mut t = build(&prefix, &unit, reps, partial, &suffix);
        for (at, v) in noise {
            if !t.is_empty() {
                let i = at % t.len();
                t[i] = v;
            }
        }
        let policy = RepetitionPolicy { max_period, min_repeats, min_span };
        let want = find_loop_naive(&t, &policy);
        prop_assert_eq!(find_loop(&t, &policy), want);
        // The same ids as negative `i32`s (hashed from their bytes) and as `i64`s whose low halves collide
        // (hashed from 32 of their bits): the hash only decides where to look, so the answer is the same.
        let negative: Vec<i32> = t.iter().map(|&v| -1 - v as i32).collect();
        prop_assert_eq!(find_loop(&negative, &policy), want);
        let wide: Vec<i64> = t.iter().map(|&v| i64::from(v % 2) | i64::from(v / 2) << 32).collect();
        prop_assert_eq!(find_loop(&wide, &policy), want);
    }

    /// Text-like ids with several planted loops and near-loops.
    #[test]
    fn text_with_loops_equals_exhaustive(
        parts in proptest::collection::vec(
            (proptest::collection::vec(0u32..5000, 0..200), proptest::collection::vec(0u32..5000, 1..300), 0usize..6),
            1..5,
        ),
        min_repeats in 2u32..5,
        min_span in 16u32..100,
    ) {
        let policy = RepetitionPolicy { max_period: 1024, min_repeats, min_span };
        let mut t = Vec::new();
        for (text, unit, reps) in parts {
            t.extend(text);
            for _ in 0..reps { t.extend_from_slice(&unit); }
        }
        prop_assert_eq!(find_loop(&t, &policy), find_loop_naive(&t, &policy));
    }


}
