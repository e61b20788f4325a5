//! Element types of token and mask arrays, normalised without copying the arrays.

/// A token id element. Values that cannot be a valid id (negative, above `u32::MAX`) map to
/// `u32::MAX`, which every profile treats as out of vocabulary.
pub trait TokenId: Copy + Send + Sync + 'static {
    fn id(self) -> u32;

    /// The id as an index into a table of one slot per id: `id()` for every id below `2^31`, and `2^31` or more
    /// for anything else (a negative `i32` is read as its two's-complement `u32`). For loops that test the
    /// index against the table's length anyway, one test fewer per token than `id()`.
    #[inline(always)]
    fn index(self) -> usize {
        self.id() as usize
    }

    /// 32 bits of the stored value, without a branch: equal elements give equal bits, unequal ones may not
    /// differ (an `i64` past `u32` keeps its low half). For hashes that only decide where to look.
    #[inline(always)]
    fn hash_bits(self) -> u32 {
        self.id()
    }

    /// The slice as little-endian `u32` bytes when its storage already is exactly that.
    fn as_le_u32_bytes(_ids: &[Self]) -> Option<&[u8]> {
        None
    }
}

/// Reinterprets 4-byte integers as bytes (any alignment is valid for `u8`).
fn four_byte_view<T>(ids: &[T]) -> Option<&[u8]> {
    if cfg!(target_endian = "little") && std::mem::size_of::<T>() == 4 {
        // SAFETY: same memory, `u8` has no alignment or validity requirements, length in bytes is exact.
        Some(unsafe {
            std::slice::from_raw_parts(ids.as_ptr().cast::<u8>(), std::mem::size_of_val(ids))
        })
    } else {
        None
    }
}

impl TokenId for u16 {
    #[inline(always)]
    fn id(self) -> u32 {
        u32::from(self)
    }
}

impl TokenId for u32 {
    #[inline(always)]
    fn id(self) -> u32 {
        self
    }

    fn as_le_u32_bytes(ids: &[Self]) -> Option<&[u8]> {
        four_byte_view(ids)
    }
}

impl TokenId for i32 {
    #[inline(always)]
    fn hash_bits(self) -> u32 {
        self as u32
    }

    #[inline(always)]
    fn id(self) -> u32 {
        if self < 0 {
            u32::MAX
        } else {
            self as u32
        }
    }

    #[inline(always)]
    fn index(self) -> usize {
        self as u32 as usize
    }

    /// Non-negative ids have the bytes of their `u32`; negative ones are out of vocabulary either way.
    fn as_le_u32_bytes(ids: &[Self]) -> Option<&[u8]> {
        four_byte_view(ids)
    }
}

impl TokenId for i64 {
    #[inline(always)]
    fn hash_bits(self) -> u32 {
        self as u32
    }

    #[inline(always)]
    fn id(self) -> u32 {
        u32::try_from(self).unwrap_or(u32::MAX)
    }
}

impl TokenId for u64 {
    #[inline(always)]
    fn hash_bits(self) -> u32 {
        self as u32
    }

    #[inline(always)]
    fn id(self) -> u32 {
        u32::try_from(self).unwrap_or(u32::MAX)
    }
}

/// A loss-mask element: anything non-zero means "trained on".
pub trait MaskValue: Copy + Send + Sync + 'static {
    fn on(self) -> bool;
}

macro_rules! mask_int {
    ($($t:ty),*) => { $( impl MaskValue for $t { #[inline(always)] fn on(self) -> bool { self != 0 } } )* };
}
mask_int!(u8, i8, i16, u16, i32, u32, i64, u64);

impl MaskValue for bool {
    #[inline(always)]
    fn on(self) -> bool {
        self
    }
}

impl MaskValue for f32 {
    #[inline(always)]
    fn on(self) -> bool {
        self != 0.0
    }
}

/// A borrowed loss-mask row of any supported element type.
#[derive(Debug, Clone, Copy)]
pub enum MaskSlice<'a> {
    Bool(&'a [bool]),
    U8(&'a [u8]),
    I8(&'a [i8]),
    I16(&'a [i16]),
    U16(&'a [u16]),
    I32(&'a [i32]),
    U32(&'a [u32]),
    I64(&'a [i64]),
    U64(&'a [u64]),
    F32(&'a [f32]),
}

macro_rules! with_mask {
    ($m:expr, $s:ident => $e:expr) => {
        match $m {
            MaskSlice::Bool($s) => $e,
            MaskSlice::U8($s) => $e,
            MaskSlice::I8($s) => $e,
            MaskSlice::I16($s) => $e,
            MaskSlice::U16($s) => $e,
            MaskSlice::I32($s) => $e,
            MaskSlice::U32($s) => $e,
            MaskSlice::I64($s) => $e,
            MaskSlice::U64($s) => $e,
            MaskSlice::F32($s) => $e,
        }
    };
}

impl MaskSlice<'_> {
    pub fn len(&self) -> usize {
        with_mask!(self, s => s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// First index in `range` where the mask is on.
    pub fn first_on(&self, range: std::ops::Range<usize>) -> Option<usize> {
        with_mask!(self, s => position_of(&s[range.clone()], true).map(|i| i + range.start))
    }

    /// First index in `range` where the mask is off.
    pub fn first_off(&self, range: std::ops::Range<usize>) -> Option<usize> {
        with_mask!(self, s => position_of(&s[range.clone()], false).map(|i| i + range.start))
    }

    /// The mask as 0/1 bytes (a copy; for fetching single samples, not for the scan).
    pub fn to_u8(&self) -> Vec<u8> {
        with_mask!(self, s => s.iter().map(|v| u8::from(v.on())).collect())
    }

    /// Calls `f(start, end)` with every maximal run of indices below `n` where the mask is on, in order (a loss
    /// mask is a few runs, one per assistant turn, so a loop over a run needs no test per token).
    #[inline]
    pub fn each_on_run(&self, n: usize, mut f: impl FnMut(usize, usize)) {
        with_mask!(self, s => {
            let s = &s[..n.min(s.len())];
            let mut i = 0;
            while let Some(a) = position_of(&s[i..], true) {
                let start = i + a;
                let end = position_of(&s[start..], false).map_or(s.len(), |b| start + b);
                f(start, end);
                i = end;
            }
        })
    }

    /// Start of the last run of ones, if any.
    pub fn last_run_start(&self) -> Option<usize> {
        with_mask!(self, s => {
            let end = rposition_of(s, true)?;
            Some(rposition_of(&s[..end], false).map_or(0, |i| i + 1))
        })
    }
}

/// Elements a mask search tests at once: a block whose every element is tested without a branch (so the
/// compiler vectorizes it) before the one with the hit is searched element by element. A loss mask is long
/// runs, so a search crosses many blocks per hit.
const BLOCK: usize = 64;

/// Index of the first element of `s` whose `on()` is `want`.
#[inline]
fn position_of<V: MaskValue>(s: &[V], want: bool) -> Option<usize> {
    let mut i = 0;
    for b in s.chunks_exact(BLOCK) {
        if b.iter().fold(false, |hit, v| hit | (v.on() == want)) {
            break;
        }
        i += BLOCK;
    }
    s[i..].iter().position(|v| v.on() == want).map(|p| i + p)
}

/// Index of the last element of `s` whose `on()` is `want`.
#[inline]
fn rposition_of<V: MaskValue>(s: &[V], want: bool) -> Option<usize> {
    let mut end = s.len();
    for b in s.rchunks_exact(BLOCK) {
        if b.iter().fold(false, |hit, v| hit | (v.on() == want)) {
            break;
        }
        end -= BLOCK;
    }
    s[..end].iter().rposition(|v| v.on() == want)
}

impl<'a> MaskSlice<'a> {
    /// The sub-slice `range` (a row of a ragged mask).
    pub fn row(self, range: std::ops::Range<usize>) -> MaskSlice<'a> {
        match self {
            MaskSlice::Bool(s) => MaskSlice::Bool(&s[range]),
            MaskSlice::U8(s) => MaskSlice::U8(&s[range]),
            MaskSlice::I8(s) => MaskSlice::I8(&s[range]),
            MaskSlice::I16(s) => MaskSlice::I16(&s[range]),
            MaskSlice::U16(s) => MaskSlice::U16(&s[range]),
            MaskSlice::I32(s) => MaskSlice::I32(&s[range]),
            MaskSlice::U32(s) => MaskSlice::U32(&s[range]),
            MaskSlice::I64(s) => MaskSlice::I64(&s[range]),
            MaskSlice::U64(s) => MaskSlice::U64(&s[range]),
            MaskSlice::F32(s) => MaskSlice::F32(&s[range]),
        }
    }
}

/// xxh3-64 of a sequence of ids, normalised to little-endian `u32` so equal ids hash equal whatever the
/// storage type.
pub fn hash_ids<T: TokenId>(ids: &[T]) -> u64 {
    if let Some(bytes) = T::as_le_u32_bytes(ids) {
        return xxhash_rust::xxh3::xxh3_64(bytes);
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = [0u8; 4096];
    for chunk in ids.chunks(buf.len() / 4) {
        for (dst, t) in buf.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&t.id().to_le_bytes());
        }
        h.update(&buf[..chunk.len() * 4]);
    }
    h.digest()
}

/// Ids a [`content_key`] reads from each end of a sample, and spread between them.
const KEY_IDS: usize = 16;

/// A key of a sample's content, cheap enough to take for every sample: xxh3-64 of its length and of 48 of its
/// ids (the first 16, the last 16, and 16 spread evenly between) of the part between its leading and trailing
/// runs of one repeated id (padding), normalised as [`hash_ids`]. Two rows with the same key hold the same
/// sample, or samples alike in length and in all 48 places: what `clean` checks to know that a report's row
/// still holds the sample the scan flagged there (a corpus without ids reordered since).
pub fn content_key<T: TokenId>(ids: &[T]) -> u64 {
    let n = ids.len();
    // Padding left and right (a run of one id) is skipped, so that the places read fall in the text.
    let lead = ids
        .iter()
        .take_while(|t| t.id() == ids[0].id())
        .count()
        .saturating_sub(1);
    let trail = ids
        .iter()
        .rev()
        .take_while(|t| t.id() == ids[n - 1].id())
        .count()
        .saturating_sub(1);
    let body = if lead + trail < n {
        &ids[lead..n - trail]
    } else {
        ids
    };
    let m = body.len();
    let mut buf = [0u8; 24 + 4 * 3 * KEY_IDS];
    buf[..8].copy_from_slice(&(n as u64).to_le_bytes());
    buf[8..16].copy_from_slice(&(lead as u64).to_le_bytes());
    buf[16..24].copy_from_slice(&(trail as u64).to_le_bytes());
    let mut at = 24;
    let mut put = |i: usize| {
        buf[at..at + 4].copy_from_slice(&body[i].id().to_le_bytes());
        at += 4;
    };
    if m <= 3 * KEY_IDS {
        (0..m).for_each(&mut put);
    } else {
        (0..KEY_IDS).for_each(&mut put);
        let inner = m - 2 * KEY_IDS;
        (0..KEY_IDS).for_each(|k| put(KEY_IDS + k * inner / KEY_IDS));
        (m - KEY_IDS..m).for_each(&mut put);
    }
    xxhash_rust::xxh3::xxh3_64(&buf[..at])
}

/// One key of many rows' contents: the wrapping sum of xxh3-64 of each `(row, content key)`, so it does not
/// depend on the order the rows are met in, and a row holding another sample changes it.
pub fn content_digest(rows: impl Iterator<Item = (u64, u64)>) -> u64 {
    rows.fold(0u64, |acc, (row, key)| {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&row.to_le_bytes());
        b[8..].copy_from_slice(&key.to_le_bytes());
        acc.wrapping_add(xxhash_rust::xxh3::xxh3_64(&b))
    })
}

/// The seed of the token mixes (the golden ratio).
pub(crate) const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// A 64-bit finalizer (MurmurHash3's `fmix64`).
pub(crate) fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A token's 64-bit mix.
#[inline]
fn token_mix<T: TokenId>(t: T) -> u64 {
    fmix(u64::from(t.id()) ^ MIX)
}

/// The 64-bit hash of each n-gram of `ids`, in order: a cyclic-polynomial rolling hash (buzhash: the XOR of
/// each token's mix rotated by its distance from the window's end) finished by `fmix`, so a window costs two
/// token mixes and a rotation whatever `n`, and no window waits on a chain of `n` multiplies. Rotations wrap at
/// 64, where equal tokens 64 apart would cancel, so n-grams longer than 64 are hashed window by window.
pub fn ngram_hashes<T: TokenId>(ids: &[T], n: usize) -> impl Iterator<Item = u64> + '_ {
    let n = n.max(1);
    let windows = (ids.len() + 1).saturating_sub(n);
    let rolling = n <= 64;
    let mut h = 0u64;
    if rolling && windows > 0 {
        for &t in &ids[..n - 1] {
            h = h.rotate_left(1) ^ token_mix(t);
        }
    }
    (0..windows).map(move |i| {
        if rolling {
            h = h.rotate_left(1) ^ token_mix(ids[i + n - 1]);
            if i > 0 {
                h ^= token_mix(ids[i - 1]).rotate_left(n as u32);
            }
            fmix(h ^ n as u64)
        } else {
            let w = &ids[i..i + n];
            fmix(
                w.iter()
                    .fold(n as u64, |h, &t| h.rotate_left(1) ^ token_mix(t)),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_key_tells_samples_apart_whatever_the_storage_type() {
        let v: Vec<u32> = (0..3000).map(|i| i * 37 % 160_000).collect();
        let k = content_key(&v);
        assert_eq!(
            content_key(&v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>()),
            k
        );
        assert_eq!(
            content_key(&v.iter().map(|&x| x as u16).collect::<Vec<_>>()),
            content_key(&v.iter().map(|&x| u32::from(x as u16)).collect::<Vec<_>>())
        );
        assert_ne!(content_key(&v[1..]), k);
        assert_ne!(content_key(&v[..2999]), k);
        let mut w = v.clone();
        w[2990] += 1; // among the last 16
        assert_ne!(content_key(&w), k);
        assert_ne!(content_key(&[1u32, 2]), content_key(&[2u32, 1]));
        assert_ne!(content_key::<u32>(&[]), content_key(&[0u32]));
        assert_eq!(content_key(&[7u32, 7, 7]), content_key(&[7u32, 7, 7]));
        // Fixed-length padded samples sharing a 20-token header: the places read fall in the text between.
        let padded = |text: u32| -> Vec<u32> {
            let mut v: Vec<u32> = (1000..1020).collect();
            v.extend((0..200).map(|i| text * 1000 + i));
            v.resize(4096, 0);
            v
        };
        assert_ne!(content_key(&padded(5)), content_key(&padded(6)));
    }

    #[test]
    fn hash_is_the_same_whatever_the_storage_type() {
        let v: Vec<u32> = (0..3000).map(|i| i * 37 % 160_000).collect();
        let h = hash_ids(&v);
        assert_eq!(
            hash_ids(&v.iter().map(|&x| x as i32).collect::<Vec<_>>()),
            h
        );
        assert_eq!(
            hash_ids(&v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>()),
            h
        );
        assert_eq!(
            hash_ids(&v.iter().map(|&x| u64::from(x)).collect::<Vec<_>>()),
            h
        );
        assert_ne!(hash_ids(&v[1..]), h);
    }

    proptest::proptest! {
        /// The block-wise searches find what a plain search finds, from either end, across block boundaries.
        #[test]
        fn block_searches_are_plain_searches(
            runs in proptest::collection::vec((0u8..2, 0usize..150), 0..8),
            from in 0usize..400,
        ) {
            let mask: Vec<u8> = runs.iter().flat_map(|&(v, n)| std::iter::repeat_n(v, n)).collect();
            let from = from.min(mask.len());
            for want in [false, true] {
                let s = &mask[from..];
                proptest::prop_assert_eq!(position_of(s, want), s.iter().position(|v| v.on() == want));
                proptest::prop_assert_eq!(rposition_of(s, want), s.iter().rposition(|v| v.on() == want));
            }
            let m = MaskSlice::U8(&mask);
            let last = mask.iter().rposition(|&v| v != 0).map(|e| {
                mask[..e].iter().rposition(|&v| v == 0).map_or(0, |i| i + 1)
            });
            proptest::prop_assert_eq!(m.last_run_start(), last);
        }

        /// The runs of `each_on_run`, laid end to end, are the indices below `n` where the mask is on; runs are
        /// maximal.
        #[test]
        fn runs_are_the_on_indices(mask in proptest::collection::vec(0i8..3, 0..200), n in 0usize..220) {
            let m = MaskSlice::I8(&mask);
            let want: Vec<usize> = (0..n.min(mask.len())).filter(|&i| mask[i] != 0).collect();
            let mut got = Vec::new();
            let mut last_end = None;
            m.each_on_run(n, |s, e| {
                assert!(s < e && e <= n.min(mask.len()));
                assert!(last_end.is_none_or(|l| l < s), "runs apart and in order");
                assert!(e == n.min(mask.len()) || mask[e] == 0, "a run ends where the mask is off");
                last_end = Some(e);
                got.extend(s..e);
            });
            proptest::prop_assert_eq!(got, want);
        }
    }
}
