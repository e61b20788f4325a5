use proptest::prelude::*;

use super::*;
use crate::anomaly::Code;

fn kimi() -> Arc<Profile> {
    Arc::new(Profile::load("kimi-k2", None).unwrap())
}

/// Ids drawn mostly from the profile's special tokens, so every rule gets exercised.
fn ids(profile: &Profile) -> impl Strategy<Value = Vec<i64>> {
    let mut special: Vec<i64> = profile.specials.iter().map(|s| i64::from(s.id)).collect();
    for r in &profile.roles {
        for (_, ids) in &r.names {
            special.extend(ids.iter().map(|&i| i64::from(i)));
        }
    }
    special.push(i64::from(profile.vocab_size));
    let token = prop_oneof![
        3 => proptest::sample::select(special),
        4 => 1000i64..90_000,
        1 => Just(4242i64),
    ];
    proptest::collection::vec(token, 0..120)
}

/// The oracle: each row through the scan's per-sample checker on its own.
fn one_by_one(profile: &Profile, rows: &[Vec<i64>], masks: Option<&[Vec<u8>]>) -> Vec<u64> {
    let mut counts = vec![0u64; profile.specials.len()];
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let m = masks.map(|m| MaskSlice::U8(&m[i]));
            check_sample(profile, r, None, m, &mut Scratch::default(), &mut counts).flags
        })
        .collect()
}

fn flatten<T: Clone>(rows: &[Vec<T>]) -> (Vec<T>, Vec<i64>) {
    let mut offsets = vec![0i64];
    let mut flat = Vec::new();
    for r in rows {
        flat.extend_from_slice(r);
        offsets.push(flat.len() as i64);
    }
    (flat, offsets)
}

fn padded(rows: &[Vec<i64>], pad: i64) -> (Vec<i64>, usize) {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0) + 3;
    let mut block = Vec::new();
    for r in rows {
        block.extend_from_slice(r);
        block.extend(std::iter::repeat_n(pad, width - r.len()));
    }
    (block, width)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_layout_and_thread_count_agrees_with_the_per_sample_checker(
        rows in proptest::collection::vec(ids(&kimi()), 0..40),
        mask_bits in proptest::collection::vec(any::<bool>(), 0..40),
    ) {
        let profile = kimi();
        // Masks: mostly the right length, some one short (a per-sample misalignment).
        let masks: Vec<Vec<u8>> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let short = mask_bits.get(i).copied().unwrap_or(false);
                let n = if short { r.len().saturating_sub(1) } else { r.len() };
                (0..n).map(|j| u8::from(j * 3 > n)).collect()
            })
            .collect();
        let want = one_by_one(&profile, &rows, None);
        let want_masked = one_by_one(&profile, &rows, Some(&masks));
        let (flat, offsets) = flatten(&rows);
        let (mflat, moffsets) = flatten(&masks);
        for threads in [1, 2] {
            let v = Validator::new(profile.clone(), None, threads).unwrap();
            let ragged = Rows::Ragged(Offsets::I64(&offsets));
            let got = v.check(&BatchView { ids: Tokens::I64(&flat), rows: ragged, mask: None, null_rows: None }).unwrap();
            prop_assert_eq!(&got.flags, &want);
            let lens: Vec<u32> = rows.iter().map(|r| r.len() as u32).collect();
            prop_assert_eq!(&got.lengths, &lens);

            let mask = Some((MaskSlice::U8(&mflat), Rows::Ragged(Offsets::I64(&moffsets))));
            let got = v.check(&BatchView { ids: Tokens::I64(&flat), rows: ragged, mask, null_rows: None }).unwrap();
            prop_assert_eq!(&got.flags, &want_masked);

            // 2-D padded with the profile's PAD: the same flags (trailing PAD is never part of a sample).
            let (block, width) = padded(&rows, i64::from(profile.pad.unwrap()));
            let got = v.check(&BatchView { ids: Tokens::I64(&block), rows: Rows::Padded { width }, mask: None, null_rows: None }).unwrap();
            prop_assert_eq!(&got.flags, &want);
        }
        // One buffer per sample.
        let v = Validator::new(profile.clone(), None, 1).unwrap();
        let each: Vec<Sequence<'_>> = rows.iter().map(|r| (Tokens::I64(r), None)).collect();
        prop_assert_eq!(&v.check_each(&each).flags, &want);
        let each: Vec<Sequence<'_>> = rows
            .iter()
            .zip(&masks)
            .map(|(r, m)| (Tokens::I64(r), Some(MaskSlice::U8(m))))
            .collect();
        prop_assert_eq!(&v.check_each(&each).flags, &want_masked);
    }
}

#[test]
fn unpadded_len_finds_the_last_non_pad_token() {
    for n in [0usize, 1, 31, 32, 33, 64, 100] {
        for k in 0..=n.min(70) {
            let mut row = vec![7u32; n - k];
            row.extend(std::iter::repeat_n(0u32, k));
            assert_eq!(unpadded_len(&row, 0), n - k, "n={n} k={k}");
        }
    }
    assert_eq!(unpadded_len(&[0u32, 5, 0, 0], 0), 2);
}

#[test]
fn padded_rows_with_a_custom_pad_id_and_mask() {
    let profile = kimi();
    let v = Validator::new(profile.clone(), Some(0), 1).unwrap();
    // Two rows of width 6: [5 ids + 1 pad], [2 ids + 4 pad].
    let block: Vec<u32> = vec![1000, 1001, 1002, 1003, 1004, 0, 1000, 200_000, 0, 0, 0, 0];
    let mask = vec![0u8; 12];
    let got = v
        .check(&BatchView {
            ids: Tokens::U32(&block),
            rows: Rows::Padded { width: 6 },
            mask: Some((MaskSlice::U8(&mask), Rows::Padded { width: 6 })),
            null_rows: None,
        })
        .unwrap();
    assert_eq!(got.lengths, vec![5, 2]);
    assert_eq!(got.flags[0] & Code::OutOfVocab.bit(), 0);
    assert_ne!(got.flags[1] & Code::OutOfVocab.bit(), 0);
    let mut counts = vec![0u64; profile.specials.len()];
    let alone = check_sample(
        &profile,
        &block[6..8],
        None,
        Some(MaskSlice::U8(&mask[..2])),
        &mut Scratch::default(),
        &mut counts,
    );
    assert_eq!(got.flags[1], alone.flags);
}

#[test]
fn null_rows_are_empty_samples() {
    let v = Validator::new(kimi(), None, 1).unwrap();
    let flat = vec![1000u32, 1001, 1002];
    let offsets = vec![0i32, 3, 3];
    let got = v
        .check(&BatchView {
            ids: Tokens::U32(&flat),
            rows: Rows::Ragged(Offsets::I32(&offsets)),
            mask: None,
            null_rows: Some(&[true, false]),
        })
        .unwrap();
    assert_eq!(got.lengths, vec![0, 0]);
    assert_eq!(got.flags[0], got.flags[1]);
}

#[test]
fn malformed_batches_are_usage_errors() {
    let v = Validator::new(kimi(), None, 1).unwrap();
    let flat = vec![1000u32; 10];
    let check = |rows: Rows<'_>, mask: Option<(MaskSlice<'_>, Rows<'_>)>| {
        v.check(&BatchView {
            ids: Tokens::U32(&flat),
            rows,
            mask,
            null_rows: None,
        })
        .unwrap_err()
        .to_string()
    };
    assert!(check(Rows::Ragged(Offsets::I32(&[0, 4, 11])), None).contains("past the 10 values"));
    assert!(check(Rows::Ragged(Offsets::I32(&[0, 4, 2])), None).contains("decrease"));
    assert!(check(Rows::Ragged(Offsets::I32(&[])), None).contains("empty"));
    assert!(check(Rows::Ragged(Offsets::I64(&[-1, 4])), None).contains("start at -1"));
    assert!(check(Rows::Padded { width: 3 }, None).contains("rows of width 3"));
    let m = [0u8; 10];
    assert!(check(
        Rows::Padded { width: 5 },
        Some((MaskSlice::U8(&m[..5]), Rows::Padded { width: 5 }))
    )
    .contains("loss_mask has 1 rows, ids have 2"));
    assert!(Validator::new(kimi(), None, 0).is_err());
    let mut no_pad = (*kimi()).clone();
    no_pad.pad = None;
    let v = Validator::new(Arc::new(no_pad), None, 1).unwrap();
    let err = v
        .check(&BatchView {
            ids: Tokens::U32(&flat),
            rows: Rows::Padded { width: 5 },
            mask: None,
            null_rows: None,
        })
        .unwrap_err();
    assert!(err.to_string().contains("give pad_id"));
}
