//! Degenerate-loop detection in a completion.
//!
//! **Loops.** A loop of period `p` is a maximal stretch `[s, e)` in which every token equals the one `p`
//! before it (`t[i] == t[i - p]` for `s + p <= i < e`): a block of `p` tokens repeated back to back, the last
//! repeat possibly partial. It is reported when `1 <= p <= max_period` and its span `e - s` is at least
//! `max(min_span, min_repeats * p)`. The answer is the loop with the earliest start (ties: the shorter period),
//! exactly what the plain O(n · max_period) search [`find_loop_naive`] returns.
//!
//! **How it is found in about O(n).** A qualifying loop of period `p` holds a run of
//! `m = span - p >= m0` matches, where `m0 = min over p of max(min_span, min_repeats * p) - p` (48 for the
//! default policy). The k-grams (k <= 4 tokens) starting every `w`-th position are inserted into a small
//! chained hash table; at every `b`-th position a block of `w` consecutive queries looks its k-grams up and
//! proposes the distance to every earlier inserted equal-hash k-gram (within `max_period`) as a period.
//! Inside a loop region every k-gram equals the one `p` earlier, and of `w` consecutive positions one is `p`
//! after an inserted position, so with `b = m0 + 2 - k - w` some block lies wholly inside the region and
//! proposes `p` itself. Each proposed period is verified exactly (by expanding its run of matches) and
//! never verified twice over the same run, so hashing only decides where to look, never the answer. The work
//! is about `1/w + w/b` hash look-ups per token (0.34 for the default policy), independent of `max_period`.

use std::cell::RefCell;

use crate::profile::RepetitionPolicy;
pub use crate::profile::MAX_PERIOD;
use crate::token::TokenId;

/// Slots of the k-gram head table (16 KiB of `u32`: L1-resident; it holds at most
/// `max_period / w + w` live entries).
const HEAD_BITS: u32 = 12;

/// A loop found in a completion (offsets relative to the slice searched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loop {
    /// First token of the first repeat.
    pub start: usize,
    /// Length of the repeated block.
    pub period: usize,
    /// Tokens from `start` to the end of the last (possibly partial) repeat.
    pub span: usize,
}

/// Minimum span of a loop of period `p` under `policy`.
#[inline]
pub fn need_span(policy: &RepetitionPolicy, p: usize) -> usize {
    (policy.min_span as usize).max(policy.min_repeats as usize * p)
}

/// Longest period worth searching in `n` tokens.
fn max_period_for(policy: &RepetitionPolicy, n: usize) -> usize {
    let r = (policy.min_repeats as usize).max(1);
    (policy.max_period as usize).min(MAX_PERIOD).min(n / r)
}

/// `min over 1 <= p <= maxp of need_span(p) - p`: the shortest run of matches any loop has. The function is
/// `max(min_span - p, (min_repeats - 1) p)`, decreasing then increasing, so its minimum is next to the
/// crossing point or at an end.
fn min_run(policy: &RepetitionPolicy, maxp: usize) -> usize {
    let r = (policy.min_repeats as usize).max(1);
    let cross = policy.min_span as usize / r;
    [1, maxp, cross, cross + 1]
        .into_iter()
        .filter(|&p| p >= 1 && p <= maxp)
        .map(|p| need_span(policy, p) - p)
        .min()
        .unwrap_or(1)
        .max(1)
}

/// Per-thread buffers, reused from sample to sample.
#[derive(Default)]
struct LoopScratch {
    /// k-gram hash slot -> latest inserted position (`base`-relative, 0 = empty).
    head: Vec<u32>,
    /// Ring indexed by inserted position / w: the previous position with the same slot.
    prev: Vec<u32>,
    /// Period -> first position (`base`-relative) where a proposal of it is worth verifying again.
    skip: Vec<u32>,
    /// Positions of the current sample are stored as `base + i`; anything below `base` is stale, so
    /// nothing is cleared between samples.
    base: u32,
}

thread_local! {
    static LOOP_SCRATCH: RefCell<LoopScratch> = RefCell::new(LoopScratch::default());
}

/// Hash of the 4 ids from `j` (ids past `k` count as 0).
#[inline(always)]
fn hash4<T: TokenId>(t: &[T], j: usize, k: usize) -> u64 {
    let (a, b, c, d) = if k == 4 {
        let w: &[T; 4] = t[j..j + 4].try_into().expect("4 ids");
        (
            w[0].hash_bits(),
            w[1].hash_bits(),
            w[2].hash_bits(),
            w[3].hash_bits(),
        )
    } else {
        let id = |o: usize| if o < k { t[j + o].hash_bits() } else { 0 };
        (id(0), id(1), id(2), id(3))
    };
    let lo = u64::from(a) | u64::from(b) << 32;
    let hi = u64::from(c) | u64::from(d) << 32;
    // One multiply: the top bits (the slot) depend on every input bit.
    (lo ^ hi.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline(always)]
fn kgram_slot<T: TokenId>(t: &[T], j: usize, k: usize) -> usize {
    slot_of(hash4(t, j, k))
}

#[inline(always)]
fn slot_of(h: u64) -> usize {
    (h >> (64 - HEAD_BITS)) as usize
}

/// [`hash4`] of a 4-gram of ids stored as little-endian `u32` bytes: the same value from two 8-byte loads
/// (`a | b << 32` is the bytes of `a, b`), a third of the instructions of four id loads.
#[inline(always)]
fn slot4_le(bytes: &[u8], j: usize) -> usize {
    let w: &[u8; 16] = bytes[4 * j..4 * j + 16].try_into().expect("16 bytes");
    let lo = u64::from_le_bytes(w[..8].try_into().expect("8 bytes"));
    let hi = u64::from_le_bytes(w[8..].try_into().expect("8 bytes"));
    slot_of((lo ^ hi.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The earliest loop in `t` (ties go to the shorter period), or `None`. Equals [`find_loop_naive`].
pub fn find_loop<T: TokenId + PartialEq>(t: &[T], policy: &RepetitionPolicy) -> Option<Loop> {
    let n = t.len();
    let maxp = max_period_for(policy, n);
    if maxp == 0 || n < policy.min_span as usize || n < 2 {
        return None;
    }
    let m0 = min_run(policy, maxp);
    let k = if m0 >= 24 { 4 } else { (m0 / 6).max(1) };
    let w = ((m0 + 1 - k) / 4).clamp(1, 8);
    let b = m0 + 2 - k - w;
    if n < k {
        return None;
    }
    match T::as_le_u32_bytes(t) {
        Some(bytes) if k == 4 => search(t, policy, maxp, k, w, b, |j| slot4_le(bytes, j)),
        _ => search(t, policy, maxp, k, w, b, |j| kgram_slot(t, j, k)),
    }
}

/// The search of [`find_loop`] with its parameters chosen; `slot(j)` is the head-table slot of the k-gram at `j`.
#[inline(always)]
fn search<T: PartialEq>(
    t: &[T],
    policy: &RepetitionPolicy,
    maxp: usize,
    k: usize,
    w: usize,
    b: usize,
    slot: impl Fn(usize) -> usize,
) -> Option<Loop> {
    let n = t.len();
    LOOP_SCRATCH.with(|s| {
        let s = &mut *s.borrow_mut();
        let ring = (maxp / w + 2).next_power_of_two();
        let ring_mask = ring - 1;
        if s.head.is_empty() {
            s.head = vec![0; 1 << HEAD_BITS];
        }
        if s.prev.len() < ring {
            s.prev.resize(ring, 0);
        }
        if s.skip.len() <= maxp {
            s.skip.resize(maxp + 1, 0);
        }
        let span_needed = n as u64 + maxp as u64 + 2;
        if s.base == 0 || u64::from(s.base) + 2 * span_needed >= u64::from(u32::MAX) {
            s.head.fill(0);
            s.skip.fill(0);
            s.base = 1;
        }
        let base = s.base;
        s.base += span_needed as u32;
        let done = base + n as u32 + 1;
        let (head, prev, skip) = (&mut s.head, &mut s.prev, &mut s.skip);

        let mut best: Option<(usize, usize)> = None;
        let mut next_ins = 0usize;
        // Insertions so far, `next_ins / w`: a counter, since a division per insertion was a tenth of the search.
        let mut ins_no = 0usize;
        let mut x = 0usize;
        while x + k <= n {
            if best.is_some_and(|(bs, _)| x >= bs + maxp + b) {
                break; // every loop starting at or before `best` has had its block
            }
            let jend = (x + w).min(n - k + 1);
            while next_ins < jend {
                let slot = slot(next_ins);
                prev[ins_no & ring_mask] = head[slot];
                head[slot] = base + next_ins as u32;
                next_ins += w;
                ins_no += 1;
            }
            for j in x..jend {
                // Entries below `lo` are older than `max_period` or from an earlier sample.
                let lo = base + j.saturating_sub(maxp) as u32;
                let mut cur = head[slot(j)];
                while cur >= lo {
                    let q = (cur - base) as usize;
                    if q < j {
                        let d = j - q;
                        if base + j as u32 >= skip[d] && t[j] == t[q] {
                            match verify(t, policy, d, j) {
                                Ok(start) => {
                                    if best.is_none_or(|bb| (start, d) < bb) {
                                        best = Some((start, d));
                                    }
                                    skip[d] = done;
                                }
                                Err(end) => skip[d] = base + end as u32 + 1,
                            }
                        }
                    }
                    cur = prev[(q / w) & ring_mask];
                }
            }
            x += b;
        }
        best.map(|(start, period)| Loop {
            start,
            period,
            span: run_end(t, start + period, period) - start,
        })
    })
}

/// End of the run of `t[i] == t[i - p]` that goes on from `i`.
fn run_end<T: PartialEq>(t: &[T], mut i: usize, p: usize) -> usize {
    while i < t.len() && t[i] == t[i - p] {
        i += 1;
    }
    i
}

/// Expands the run of period `d` through `j` (where `t[j] == t[j - d]`): `Ok(loop start)` when it is long
/// enough, else `Err(end of the run)`.
fn verify<T: PartialEq>(
    t: &[T],
    policy: &RepetitionPolicy,
    d: usize,
    j: usize,
) -> Result<usize, usize> {
    let mut s = j;
    while s > d && t[s - 1] == t[s - 1 - d] {
        s -= 1;
    }
    let start = s - d;
    let need = need_span(policy, d);
    let mut e = j + 1;
    while e < t.len() && e - start < need && t[e] == t[e - d] {
        e += 1;
    }
    if e - start >= need {
        Ok(start)
    } else {
        Err(e)
    }
}

/// The exhaustive definition, kept as the oracle for tests: for every period, its first run of matches that
/// is long enough.
pub fn find_loop_naive<T: PartialEq + Copy>(t: &[T], policy: &RepetitionPolicy) -> Option<Loop> {
    let mut best: Option<Loop> = None;
    for p in 1..=(policy.max_period as usize).min(MAX_PERIOD) {
        let need = need_span(policy, p);
        let mut i = p;
        while i < t.len() {
            if t[i] != t[i - p] {
                i += 1;
                continue;
            }
            let s = i;
            while i < t.len() && t[i] == t[i - p] {
                i += 1;
            }
            let span = i - s + p;
            if span >= need {
                let l = Loop {
                    start: s - p,
                    period: p,
                    span,
                };
                if best.is_none_or(|b| (l.start, l.period) < (b.start, b.period)) {
                    best = Some(l);
                }
                break;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests;
