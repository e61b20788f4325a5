//! Degenerate-loop detection: a pattern of at most `max_period` tokens repeated back to back over at least
//! `min_span` tokens. For each period `p` a loop is a run of positions with `t[i] == t[i - p]`; the run is
//! found by probing every `stride`-th position and verifying candidates exactly, so the cost is about
//! `max_period / stride` comparisons per token and the answer is the same as an exhaustive search.

use crate::profile::RepetitionPolicy;

/// Longest loop unit the search supports (profiles are validated against it).
pub const MAX_PERIOD: usize = 64;

/// Start of the earliest loop in `t` (ties go to the shorter period), or `None`.
///
/// One pass over probe positions serves every period: a loop of period `p` needs a run of at least
/// `min_span - p >= min_span - max_period` matches, so probing every `stride`-th position, with `stride` a
/// quarter of that, puts at least four consecutive probes inside any qualifying run. A candidate is verified
/// by expanding its run exactly, so the answer equals the exhaustive search's.
pub fn find_loop<T: PartialEq + Copy>(t: &[T], policy: &RepetitionPolicy) -> Option<usize> {
    let n = t.len();
    let min_span = policy.min_span as usize;
    let maxp = (policy.max_period as usize).min(n / 2).min(MAX_PERIOD);
    if n < min_span || maxp == 0 || min_span <= maxp {
        return None;
    }
    let stride = ((min_span - maxp) / 4).max(1);
    let mut runs = [0usize; MAX_PERIOD + 1];
    // Probes below `skip[p]` belong to a run of period p already verified too short.
    let mut skip = [0usize; MAX_PERIOD + 1];
    let mut done = [false; MAX_PERIOD + 1];
    let mut best: Option<usize> = None;
    // Whether some `runs[p]` may be non-zero; while none is, a probe that equals none of the `maxp` tokens
    // before it (the usual case in text) is settled with one branch-free comparison of the whole window.
    let mut live = false;
    let mut i = 1;
    while i < n {
        if best.is_some_and(|b| i >= b + min_span + stride + maxp) {
            break; // a run detected from here on starts after `best`
        }
        let cur = t[i];
        if !live && i >= maxp && !t[i - maxp..i].iter().fold(false, |a, &x| a | (x == cur)) {
            i += stride;
            continue;
        }
        live = false;
        for p in 1..=maxp.min(i) {
            if done[p] || i < skip[p] {
                continue;
            }
            if cur != t[i - p] {
                runs[p] = 0;
                continue;
            }
            runs[p] += 1;
            live = true;
            let need = min_span - p;
            if runs[p] >= need / stride {
                let mut s = i;
                while s > p && t[s - 1] == t[s - 1 - p] {
                    s -= 1;
                }
                let mut e = i + 1;
                while e < n && t[e] == t[e - p] {
                    e += 1;
                }
                if e - s >= need {
                    let start = s - p;
                    if best.is_none_or(|b| start < b) {
                        best = Some(start);
                    }
                    done[p] = true;
                } else {
                    runs[p] = 0;
                    skip[p] = e + 1;
                }
            }
        }
        i += stride;
    }
    best
}

/// The exhaustive definition, kept as the oracle for tests.
pub fn find_loop_naive<T: PartialEq + Copy>(t: &[T], policy: &RepetitionPolicy) -> Option<usize> {
    let min_span = policy.min_span as usize;
    let mut best: Option<usize> = None;
    for p in 1..=(policy.max_period as usize) {
        if min_span <= p {
            continue;
        }
        let need = min_span - p;
        let mut run = 0usize;
        for i in p..t.len() {
            if t[i] == t[i - p] {
                run += 1;
                if run >= need {
                    let start = i + 1 - run - p;
                    if best.is_none_or(|b| start < b) {
                        best = Some(start);
                    }
                    break;
                }
            } else {
                run = 0;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const POLICY: RepetitionPolicy = RepetitionPolicy {
        max_period: 8,
        min_span: 64,
    };

    #[test]
    fn finds_a_loop_and_its_start() {
        let mut t: Vec<u32> = (0..100).collect();
        let at = t.len();
        for _ in 0..22 {
            t.extend_from_slice(&[7, 8, 9]);
        }
        t.extend(200..220);
        assert_eq!(find_loop(&t, &POLICY), Some(at));
        assert_eq!(find_loop_naive(&t, &POLICY), Some(at));
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

    proptest! {
        #[test]
        fn strided_search_equals_exhaustive(
            prefix in proptest::collection::vec(0u32..6, 0..200),
            unit in proptest::collection::vec(0u32..6, 1..9),
            reps in 0usize..40,
            suffix in proptest::collection::vec(0u32..6, 0..100),
            min_span in 16u32..80,
        ) {
            let policy = RepetitionPolicy { max_period: 8, min_span };
            let mut t = prefix;
            for _ in 0..reps { t.extend_from_slice(&unit); }
            t.extend(suffix);
            prop_assert_eq!(find_loop(&t, &policy), find_loop_naive(&t, &policy));
        }

        /// Text-like ids (a window rarely repeats a token), so the whole-window fast path is taken between
        /// the loops and near-loops.
        #[test]
        fn fast_path_over_text_equals_exhaustive(
            parts in proptest::collection::vec(
                (proptest::collection::vec(0u32..5000, 0..120), proptest::collection::vec(0u32..5000, 1..9), 0usize..12),
                1..6,
            ),
            min_span in 16u32..80,
        ) {
            let policy = RepetitionPolicy { max_period: 8, min_span };
            let mut t = Vec::new();
            for (text, unit, reps) in parts {
                t.extend(text);
                for _ in 0..reps { t.extend_from_slice(&unit); }
            }
            prop_assert_eq!(find_loop(&t, &policy), find_loop_naive(&t, &policy));
        }
    }
}
