//! Stable-toolchain fuzzing (cargo fuzz needs nightly, which this project's machines cannot fetch): a
//! mutation fuzzer over the NumPy reader seeded from `fuzz-seeds/`, and a generator of arbitrary id
//! sequences for the per-sample checker under every built-in profile. Neither may panic; the checker's
//! output must stay within the sample. `TOKSCAN_FUZZ_CASES` sets the number of cases (`make fuzz` runs many).

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tokscan_core::check::{check_sample, Scratch, NO_POS};
use tokscan_core::source::numpy::{parse_header, NumpyShard};
use tokscan_core::token::MaskSlice;
use tokscan_core::Profile;

fn cases() -> u32 {
    std::env::var("TOKSCAN_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-seeds");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
}

fn mutate(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        match m {
            Mutation::Flip(i, x) if !b.is_empty() => {
                let n = b.len();
                b[i % n] ^= x;
            }
            Mutation::Truncate(n) => b.truncate(*n % (b.len() + 1)),
            Mutation::Insert(i, bytes) => {
                let at = i % (b.len() + 1);
                b.splice(at..at, bytes.iter().copied());
            }
            _ => {}
        }
    }
    b
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
    ]
}

#[test]
fn numpy_reader_never_panics_on_mutated_seeds() {
    let seeds = seeds();
    let tokens: Vec<_> = seeds
        .iter()
        .filter(|(n, _)| n.starts_with("tokens"))
        .cloned()
        .collect();
    let offsets: Vec<_> = seeds
        .iter()
        .filter(|(n, _)| n.starts_with("offsets"))
        .cloned()
        .collect();
    let masks: Vec<_> = seeds
        .iter()
        .filter(|(n, _)| n.starts_with("mask"))
        .cloned()
        .collect();
    let profile = Profile::load("kimi-k2", None).unwrap();
    let strategy = (
        0..tokens.len(),
        0..offsets.len(),
        proptest::option::of(0..masks.len()),
        proptest::collection::vec(mutation(), 0..4),
        proptest::collection::vec(mutation(), 0..4),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(t, o, m, mt, mo, mutate_mask)| {
            let dir = tempfile::tempdir().unwrap();
            let tb = mutate(tokens[t].1.clone(), &mt);
            let _ = parse_header(&tb);
            std::fs::write(dir.path().join("tokens.npy"), &tb).unwrap();
            std::fs::write(
                dir.path().join("offsets.npy"),
                mutate(offsets[o].1.clone(), &mo),
            )
            .unwrap();
            if let Some(m) = m {
                let mb = if mutate_mask {
                    mutate(masks[m].1.clone(), &mt)
                } else {
                    masks[m].1.clone()
                };
                std::fs::write(dir.path().join("loss_mask.npy"), mb).unwrap();
            }
            if let Ok(shard) = NumpyShard::open(dir.path()) {
                let rows = shard.rows() as usize;
                shard
                    .with_rows(0, rows, |b| {
                        let mut scratch = Scratch::default();
                        let mut counts = vec![0u64; profile.specials.len()];
                        for i in 0..b.rows() {
                            let r = b.ids.offsets.range(i);
                            if let tokscan_core::source::Tokens::I32(v) = b.ids.values {
                                let mask = b.mask.map(|m| m.values.row(m.offsets.range(i)));
                                check_sample(
                                    &profile,
                                    &v[r],
                                    None,
                                    mask,
                                    &mut scratch,
                                    &mut counts,
                                );
                            }
                        }
                        Ok(())
                    })
                    .unwrap();
            }
            Ok(())
        })
        .unwrap();
}

fn ids_for(profile: &Profile) -> impl Strategy<Value = Vec<i64>> {
    let mut special: Vec<i64> = profile.specials.iter().map(|s| i64::from(s.id)).collect();
    for r in &profile.roles {
        for (_, ids) in &r.names {
            special.extend(ids.iter().map(|&i| i64::from(i)));
        }
    }
    special.extend([-1, i64::from(profile.vocab_size), i64::from(u32::MAX) + 5]);
    let vocab = i64::from(profile.vocab_size);
    let token = prop_oneof![
        3 => proptest::sample::select(special),
        4 => 1000i64..vocab.min(100_000),
        1 => proptest::sample::select(vec![4242i64, 4343]),
    ];
    proptest::collection::vec(token, 0..300)
}

#[test]
fn checker_never_panics_and_stays_in_bounds() {
    for name in tokscan_core::profile::BUILTIN_PROFILES {
        let profile = Profile::load(name, None).unwrap();
        let strategy = (
            ids_for(&profile),
            proptest::option::of(any::<usize>()),
            proptest::option::of(proptest::collection::vec(0u8..2, 0..310)),
        );
        let mut runner = TestRunner::new(Config {
            cases: cases(),
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&strategy, |(ids, prompt_len, mask)| {
                let n = ids.len();
                let prompt_len = prompt_len.map(|p| p % (n + 1));
                let mut counts = vec![0u64; profile.specials.len()];
                let mask = mask.as_deref().map(MaskSlice::U8);
                let f = check_sample(
                    &profile,
                    &ids,
                    prompt_len,
                    mask,
                    &mut Scratch::default(),
                    &mut counts,
                );
                let l = f.lengths;
                prop_assert_eq!(l.total as usize, n);
                prop_assert!(l.prompt as usize <= n);
                prop_assert!((l.prompt + l.thinking + l.response) as usize <= n);
                prop_assert!(f.completion.0 <= f.completion.1 && f.completion.1 as usize <= n);
                for &p in &f.positions {
                    prop_assert!(p == NO_POS || (p as usize) < n);
                }
                Ok(())
            })
            .unwrap();
    }
}
