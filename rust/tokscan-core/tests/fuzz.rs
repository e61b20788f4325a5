//! Stable-toolchain fuzzing (cargo fuzz needs nightly, which this project's machines cannot fetch): mutation
//! fuzzers over the input readers, one per format of the core's registry (a test checks; NumPy seeded from
//! `fuzz-seeds/`; Parquet, Arrow IPC, Megatron, JSONL and llm.c from small valid files written here), each mutated input discovered, opened, read sample by sample and
//! scanned; and a generator of arbitrary id sequences for the per-sample checker under every built-in
//! profile. Nothing may panic; a reader may return an error, which must name the input; the checker's output
//! must stay within the sample. `TOKSCAN_FUZZ_CASES` sets the number of cases per fuzzer (`make fuzz` runs
//! many).

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    Int32Builder, Int64Builder, Int8Builder, LargeListBuilder, ListBuilder, UInt32Builder,
};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
use arrow_ipc::CompressionType;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tokscan_core::check::{check_sample, Scratch, NO_POS};
use tokscan_core::source::numpy::{parse_header, NumpyShard};
use tokscan_core::source::{ColumnNames, Source};
use tokscan_core::token::MaskSlice;
use tokscan_core::{scan, Corpus, Profile, Progress, Report, ScanOptions};

/// Cases per fuzzer; which cases is proptest's `PROPTEST_RNG_SEED` (fixed by the Makefile for `make test`,
/// new and printed for each `make fuzz`).
fn cases() -> u32 {
    std::env::var("TOKSCAN_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
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
    /// A header field changed: `value` written little-endian over `width` bytes at an offset in the first 64
    /// bytes (`header`) or anywhere, aligned to `width` or not.
    Word {
        at: usize,
        width: usize,
        value: u64,
        header: bool,
        aligned: bool,
    },
    /// A piece of the syntax of one of the formats inserted (JSON punctuation, keys, numbers out of range).
    Token(usize, &'static [u8]),
    /// `len` bytes from `from` copied to `to` (a line, a message or a buffer repeated).
    Copy {
        from: usize,
        len: usize,
        to: usize,
    },
}

/// Field values that sit on the edges of what readers check.
const WORDS: &[u64] = &[
    0,
    1,
    2,
    3,
    7,
    8,
    9,
    0x7f,
    0xff,
    0x400,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 40,
    i64::MAX as u64,
    u64::MAX,
    20240520,
];

const TOKENS: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"-1",
    b"0.5",
    b"1e400",
    b"18446744073709551616",
    b"null",
    b"true",
    b"[[1,2]]",
    b"{\"a\":1}",
    b"\"input_ids\"",
    b"\"prompt_ids\"",
    b"\"output_ids\"",
    b"\"loss_mask\"",
    b"\"meta_info\"",
    b"\"outputs\"",
    b"\"finish_reason\"",
    b"\"completion_tokens\"",
    b"\xff\xfe",
    b"\xff\xff\xff\xff",
    b"ARROW1",
];

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
            Mutation::Word {
                at,
                width,
                value,
                header,
                aligned,
            } => {
                let room = if *header { b.len().min(64) } else { b.len() };
                if room >= *width {
                    let slots = if *aligned {
                        room / width
                    } else {
                        room - width + 1
                    };
                    let at = (at % slots) * if *aligned { *width } else { 1 };
                    b[at..at + width].copy_from_slice(&value.to_le_bytes()[..*width]);
                }
            }
            Mutation::Token(i, t) => {
                let at = i % (b.len() + 1);
                b.splice(at..at, t.iter().copied());
            }
            Mutation::Copy { from, len, to } if !b.is_empty() => {
                let from = from % b.len();
                let piece = b[from..(from + len).min(b.len())].to_vec();
                let to = to % (b.len() + 1);
                b.splice(to..to, piece);
            }
            _ => {}
        }
    }
    b
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        2 => (
            any::<usize>(),
            proptest::sample::select(vec![1usize, 2, 4, 8]),
            proptest::sample::select(WORDS),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(at, width, value, header, aligned)| Mutation::Word {
                at,
                width,
                value,
                header,
                aligned
            }),
        1 => (any::<usize>(), proptest::sample::select(TOKENS))
            .prop_map(|(i, t)| Mutation::Token(i, t)),
        1 => (any::<usize>(), 1usize..200, any::<usize>())
            .prop_map(|(from, len, to)| Mutation::Copy { from, len, to }),
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
                let rows = shard.rows();
                shard
                    .read_rows(0, rows, &mut |b| {
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

// --- Every other input format, through discovery, `Corpus` and the whole scan ---------------------------

/// One input as files in a directory, and the path to scan when the file is named (else the directory).
struct Seed {
    files: Vec<(&'static str, Vec<u8>)>,
    target: &'static str,
}

/// A Kimi-K2 conversation (system, user, assistant with reasoning), varied by `i`.
fn chat(i: i64) -> Vec<i64> {
    let mut v = vec![163594, 14062, 163601, 1000 + i, 163586]; // system
    v.extend([163587, 2482, 163601, 2000 + i, 2001, 163586]); // user
    v.extend([163588, 69702, 163601, 163606, 3000 + i, 163607, 4000 + i]); // assistant
    v.extend(std::iter::repeat_n(4242, (i % 3) as usize));
    v.push(163586);
    v
}

/// Mutates each seed's files, writes them, opens the corpus and reads every sample, then scans it. Never a
/// panic; an error names the input (and opening and scanning agree on it); a corpus that opens reads the same
/// samples and tokens as the scan counts. `check` adds the format's own property.
fn fuzz_format(
    seeds: &[Seed],
    profile: &str,
    check: impl Fn(&[Vec<u8>], &Result<Report, tokscan_core::Error>) -> Result<(), TestCaseError>,
) {
    let profile = Profile::load(profile, None).unwrap();
    let opts = ScanOptions {
        threads: 1,
        ..ScanOptions::default()
    };
    let strategy = (
        0..seeds.len(),
        proptest::collection::vec((any::<usize>(), mutation()), 0..5),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(s, muts, by_dir)| {
            let seed = &seeds[s];
            let mut files: Vec<Vec<u8>> = seed.files.iter().map(|f| f.1.clone()).collect();
            for (which, m) in &muts {
                let k = which % files.len();
                files[k] = mutate(std::mem::take(&mut files[k]), std::slice::from_ref(m));
            }
            let dir = tempfile::tempdir().unwrap();
            for ((name, _), bytes) in seed.files.iter().zip(&files) {
                std::fs::write(dir.path().join(name), bytes).unwrap();
            }
            let target = if by_dir {
                dir.path().to_path_buf()
            } else {
                dir.path().join(seed.target)
            };
            let paths = vec![target.display().to_string()];
            let named =
                |e: &tokscan_core::Error| e.to_string().contains(&dir.path().display().to_string());
            let scanned = scan(&paths, &profile, &opts, &Progress::default());
            match Corpus::open(&paths, &ColumnNames::default()) {
                Err(e) => {
                    prop_assert!(named(&e), "{}", e);
                    let same = scanned.as_ref().err().map(ToString::to_string);
                    prop_assert_eq!(same, Some(e.to_string()));
                }
                Ok(corpus) => {
                    let read = corpus.samples(0, corpus.len());
                    match &scanned {
                        Ok(r) => {
                            let read = read.map_err(|e| TestCaseError::fail(e.to_string()))?;
                            prop_assert_eq!(read.len() as u64, r.n_samples);
                            let tokens: usize = read.iter().map(|s| s.ids.len()).sum();
                            prop_assert_eq!(tokens as u64, r.n_tokens);
                        }
                        Err(e) => prop_assert!(named(e), "{}", e),
                    }
                }
            }
            check(&files, &scanned)
        })
        .unwrap();
}

fn ipc_bytes(batch: &RecordBatch, stream: bool, codec: Option<CompressionType>) -> Vec<u8> {
    let opts = IpcWriteOptions::default()
        .try_with_compression(codec)
        .unwrap();
    let pieces = (0..batch.num_rows()).step_by(3);
    if stream {
        let mut w = StreamWriter::try_new_with_options(Vec::new(), &batch.schema(), opts).unwrap();
        for a in pieces {
            w.write(&batch.slice(a, 3.min(batch.num_rows() - a)))
                .unwrap();
        }
        w.into_inner().unwrap()
    } else {
        let mut w = FileWriter::try_new_with_options(Vec::new(), &batch.schema(), opts).unwrap();
        for a in pieces {
            w.write(&batch.slice(a, 3.min(batch.num_rows() - a)))
                .unwrap();
        }
        w.into_inner().unwrap()
    }
}

/// Arrow IPC seeds: both formats, uncompressed / LZ4 / ZSTD, the column layouts the reader knows (input_ids
/// with a mask, ids and categories; prompt and output apart; rows as a batch of one with labels; uint32 with
/// a null row).
/// Small valid batches in the Arrow layouts the readers take: ids + mask + id + category, prompt/output
/// large lists, a batch of one `[[...]]` row with labels, and a nullable uint32 list with a null row.
fn seed_batches() -> [RecordBatch; 4] {
    let n = 7i64;
    let mut ids = ListBuilder::new(Int32Builder::new());
    let mut mask = ListBuilder::new(Int8Builder::new());
    for i in 0..n {
        let c = chat(i);
        ids.append_value(c.iter().map(|&t| Some(t as i32)));
        mask.append_value((0..c.len()).map(|k| Some(i8::from(k >= 13))));
    }
    let full = RecordBatch::try_from_iter([
        ("input_ids", Arc::new(ids.finish()) as ArrayRef),
        ("loss_mask", Arc::new(mask.finish()) as ArrayRef),
        (
            "sample_id",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("s{i}")),
            )) as ArrayRef,
        ),
        (
            "category",
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("c{}", i % 2)),
            )) as ArrayRef,
        ),
    ])
    .unwrap();
    let mut prompt = LargeListBuilder::new(Int64Builder::new());
    let mut output = LargeListBuilder::new(Int64Builder::new());
    for i in 0..n {
        let c = chat(i);
        prompt.append_value(c[..13].iter().map(|&t| Some(t)));
        output.append_value(c[13..].iter().map(|&t| Some(t)));
    }
    let split = RecordBatch::try_from_iter([
        ("prompt_ids", Arc::new(prompt.finish()) as ArrayRef),
        ("output_ids", Arc::new(output.finish()) as ArrayRef),
    ])
    .unwrap();
    let mut nested = ListBuilder::new(ListBuilder::new(Int64Builder::new()));
    let mut labels = ListBuilder::new(ListBuilder::new(Int64Builder::new()));
    for i in 0..n {
        let c = chat(i);
        nested.values().append_value(c.iter().map(|&t| Some(t)));
        nested.append(true);
        let l = c
            .iter()
            .enumerate()
            .map(|(k, &t)| Some(if k < 13 { -100 } else { t }));
        labels.values().append_value(l);
        labels.append(true);
    }
    let batch_of_one = RecordBatch::try_from_iter([
        ("input_ids", Arc::new(nested.finish()) as ArrayRef),
        ("labels", Arc::new(labels.finish()) as ArrayRef),
    ])
    .unwrap();
    let mut wide = ListBuilder::new(UInt32Builder::new());
    for i in 0..n {
        if i == 2 {
            wide.append(false);
        } else {
            wide.append_value(chat(i).iter().map(|&t| Some(t as u32)));
        }
    }
    let nullable =
        RecordBatch::try_from_iter([("input_ids", Arc::new(wide.finish()) as ArrayRef)]).unwrap();
    [full, split, batch_of_one, nullable]
}

fn ipc_seeds() -> Vec<Seed> {
    let [full, split, batch_of_one, nullable] = seed_batches();
    let one = |bytes| Seed {
        files: vec![("x.arrow", bytes)],
        target: "x.arrow",
    };
    vec![
        one(ipc_bytes(&full, false, None)),
        one(ipc_bytes(&full, true, Some(CompressionType::LZ4_FRAME))),
        one(ipc_bytes(&split, false, Some(CompressionType::ZSTD))),
        one(ipc_bytes(&split, true, None)),
        one(ipc_bytes(&batch_of_one, true, Some(CompressionType::ZSTD))),
        one(ipc_bytes(
            &nullable,
            false,
            Some(CompressionType::LZ4_FRAME),
        )),
    ]
}

#[test]
fn arrow_ipc_reader_never_panics_on_mutated_seeds() {
    let seeds = ipc_seeds();
    assert!(seeds.iter().all(|s| s.files[0].1.len() < 8 << 10));
    fuzz_format(&seeds, "kimi-k2", |_, _| Ok(()));
}

fn parquet_bytes(batch: &RecordBatch, codec: Compression) -> Vec<u8> {
    let props = WriterProperties::builder()
        .set_compression(codec)
        .set_max_row_group_row_count(Some(3))
        .build();
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
    buf
}

fn parquet_seeds() -> Vec<Seed> {
    let [full, split, batch_of_one, nullable] = seed_batches();
    let one = |bytes| Seed {
        files: vec![("x.parquet", bytes)],
        target: "x.parquet",
    };
    vec![
        one(parquet_bytes(&full, Compression::UNCOMPRESSED)),
        one(parquet_bytes(&full, Compression::ZSTD(Default::default()))),
        one(parquet_bytes(&split, Compression::SNAPPY)),
        one(parquet_bytes(&batch_of_one, Compression::UNCOMPRESSED)),
        one(parquet_bytes(&nullable, Compression::LZ4_RAW)),
    ]
}

#[test]
fn parquet_reader_never_panics_on_mutated_seeds() {
    let seeds = parquet_seeds();
    assert!(seeds.iter().all(|s| s.files[0].1.len() < 8 << 10));
    fuzz_format(&seeds, "kimi-k2", |_, _| Ok(()));
}

/// The case CI met (`Flip` of one byte of the batch-of-one seed): a page header now says its values are
/// dictionary-encoded while the column chunk has no dictionary page, and parquet 60's decoder panics
/// ("Decoder for dict should have been set") instead of returning an error. The scan refuses the file.
#[test]
fn parquet_page_without_its_dictionary_is_refused() {
    let seed = &parquet_seeds()[3];
    let bytes = mutate(
        seed.files[0].1.clone(),
        &[Mutation::Flip(5805839222718697050, 178)],
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.parquet");
    std::fs::write(&path, bytes).unwrap();
    let paths = vec![path.display().to_string()];
    let profile = Profile::load("kimi-k2", None).unwrap();
    let err = scan(
        &paths,
        &profile,
        &ScanOptions::default(),
        &Progress::default(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("a page the decoder cannot read"), "{msg}");
}

/// The formats with a mutation fuzzer in this file.
const FUZZED: &[&str] = &["parquet", "arrow", "megatron", "jsonl", "llmc", "numpy"];

/// A format added to the core's registry fails here until it has a fuzzer.
#[test]
fn every_registered_format_has_a_fuzzer() {
    let mut registered: Vec<&str> = tokscan_core::source::FORMATS
        .iter()
        .map(|f| f.name)
        .collect();
    registered.sort_unstable();
    let mut fuzzed = FUZZED.to_vec();
    fuzzed.sort_unstable();
    assert_eq!(registered, fuzzed);
}

/// A Megatron `.idx` as megatron-core's `_IndexWriter` writes it.
fn megatron_idx(code: u8, size: i64, lengths: &[i32], docs: &[i64]) -> Vec<u8> {
    let mut v = b"MMIDIDX\x00\x00".to_vec();
    v.extend(1u64.to_le_bytes());
    v.push(code);
    v.extend((lengths.len() as u64).to_le_bytes());
    v.extend((docs.len() as u64).to_le_bytes());
    for l in lengths {
        v.extend(l.to_le_bytes());
    }
    let mut p = 0i64;
    for l in lengths {
        v.extend(p.to_le_bytes());
        p += i64::from(*l) * size;
    }
    for d in docs {
        v.extend(d.to_le_bytes());
    }
    v
}

/// Megatron seeds: int32 documents of two sequences each, uint16 with an empty document, float32, uint8.
fn megatron_seeds() -> Vec<Seed> {
    let docs: Vec<Vec<i64>> = (0..5).map(chat).collect();
    let pair = |code: u8, size: i64, bytes: &dyn Fn(i64) -> Vec<u8>, split: bool| {
        let mut lengths = Vec::new();
        let mut doc_idx = vec![0i64];
        let mut bin = Vec::new();
        for (k, d) in docs.iter().enumerate() {
            let parts = if split {
                vec![&d[..13], &d[13..]]
            } else {
                vec![&d[..]]
            };
            for part in parts {
                lengths.push(part.len() as i32);
                bin.extend(part.iter().flat_map(|&t| bytes(t)));
            }
            doc_idx.push(lengths.len() as i64);
            if k == 2 && !split {
                lengths.push(0); // an empty document
                doc_idx.push(lengths.len() as i64);
            }
        }
        Seed {
            files: vec![
                ("d.bin", bin),
                ("d.idx", megatron_idx(code, size, &lengths, &doc_idx)),
            ],
            target: "d.bin",
        }
    };
    vec![
        pair(4, 4, &|t| (t as i32).to_le_bytes().to_vec(), true),
        pair(
            8,
            2,
            &|t| ((t % 60_000) as u16).to_le_bytes().to_vec(),
            false,
        ),
        pair(7, 4, &|t| (t as f32).to_le_bytes().to_vec(), false),
        pair(1, 1, &|t| vec![t as u8], true),
    ]
}

#[test]
fn megatron_reader_never_panics_on_mutated_seeds() {
    let seeds = megatron_seeds();
    // What opens holds exactly the tokens the index describes, each of the dtype's size.
    fuzz_format(&seeds, "plain", |files, scanned| {
        if let Some(r) = scanned
            .as_ref()
            .ok()
            .filter(|r| r.inputs[0].format == "megatron")
        {
            let size = match files[1][17] {
                1 | 2 => 1,
                3 | 8 => 2,
                4 | 7 => 4,
                _ => 8,
            };
            prop_assert_eq!(r.n_tokens * size, files[0].len() as u64);
        }
        Ok(())
    });
}

/// JSONL seeds: SGLang, vLLM and `input_ids` lines (with a mask, ids, categories, a blank and a bad line).
fn jsonl_seeds() -> Vec<Seed> {
    let list = |v: &[i64]| {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut sglang = String::new();
    let mut vllm = String::new();
    let mut plain = String::new();
    for i in 0..5 {
        let c = chat(i);
        let (p, o) = (list(&c[..13]), list(&c[13..]));
        sglang += &format!(
            "{{\"id\":\"s{i}\",\"category\":\"c{}\",\"prompt_ids\":[{p}],\"output_ids\":[{o}],\"meta_info\":\
             {{\"finish_reason\":{{\"type\":\"stop\",\"matched\":163586}},\"prompt_tokens\":13,\
             \"completion_tokens\":{}}}}}\n",
            i % 2,
            c.len() - 13
        );
        vllm += &format!(
            "{{\"request_id\":\"r{i}\",\"prompt_token_ids\":[{p}],\"outputs\":[{{\"index\":0,\"token_ids\":[{o}],\
             \"finish_reason\":\"{}\"}}]}}\n",
            if i == 3 { "length" } else { "stop" }
        );
        let mask = (0..c.len())
            .map(|k| if k >= 13 { "1" } else { "0" })
            .collect::<Vec<_>>()
            .join(",");
        plain += &format!(
            "{{\"input_ids\":[{}],\"loss_mask\":[{mask}],\"sample_id\":{i}}}\n",
            list(&c)
        );
        if i == 1 {
            plain += "\n   \n[1,2,3]\n";
        }
    }
    [sglang, vllm, plain]
        .into_iter()
        .map(|text| Seed {
            files: vec![("gen.jsonl", text.into_bytes())],
            target: "gen.jsonl",
        })
        .collect()
}

#[test]
fn jsonl_reader_never_panics_on_mutated_seeds() {
    // A malformed line is a finding, not an error: a file opens when any line is a sample, and then every
    // non-blank line is a sample.
    fuzz_format(&jsonl_seeds(), "kimi-k2", |files, scanned| {
        let lines = files[0]
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .count() as u64;
        // A file named explicitly is recognised by its content first: a mutation may give it another format's
        // magic.
        let b = &files[0];
        let other = b.starts_with(b"ARROW1")
            || b.starts_with(b"PAR1")
            || b.starts_with(b"MMIDIDX")
            || b.starts_with(&[0xff; 4])
            || b.starts_with(&20240520i32.to_le_bytes());
        match scanned {
            Ok(r) if r.inputs[0].format == "jsonl" => prop_assert_eq!(r.n_samples, lines),
            Err(e) if !other => {
                prop_assert!(e.to_string().contains("no line is a sample"), "{}", e)
            }
            _ => prop_assert!(other),
        }
        Ok(())
    });
}

/// An llm.c token file: header (magic, version, count) and the tokens.
fn llmc_file(version: i32, tokens: &[u32]) -> Vec<u8> {
    let mut header = [0i32; 256];
    header[..3].copy_from_slice(&[20240520, version, tokens.len() as i32]);
    let mut v: Vec<u8> = header.iter().flat_map(|h| h.to_le_bytes()).collect();
    for &t in tokens {
        if version == 1 {
            v.extend((t as u16).to_le_bytes());
        } else {
            v.extend(t.to_le_bytes());
        }
    }
    v
}

/// llm.c seeds: GPT-2 (uint16, documents after 50256, a cut document first), LLaMA-3 (uint32, after 128000),
/// and a file with no tokens.
fn llmc_seeds() -> Vec<Seed> {
    let doc = |delim: u32, i: u32| -> Vec<u32> {
        let mut d = vec![delim];
        d.extend((0..5 + i * 3).map(|k| 100 + (k * 7 + i) % 40_000));
        d
    };
    let mut gpt2 = vec![11, 12, 13];
    let mut llama = Vec::new();
    for i in 0..6 {
        gpt2.extend(doc(50256, i));
        llama.extend(
            doc(128000, i)
                .into_iter()
                .map(|t| t + u32::from(i == 4) * 100_000),
        );
    }
    let one = |bytes| Seed {
        files: vec![("x.bin", bytes)],
        target: "x.bin",
    };
    vec![
        one(llmc_file(1, &gpt2)),
        one(llmc_file(2, &llama)),
        one(llmc_file(1, &[])),
    ]
}

#[test]
fn llmc_reader_never_panics_on_mutated_seeds() {
    // What opens holds exactly the tokens its header declares.
    fuzz_format(&llmc_seeds(), "plain", |files, scanned| {
        if let Some(r) = scanned
            .as_ref()
            .ok()
            .filter(|r| r.inputs[0].format == "llmc")
        {
            let size = if files[0][4] == 1 { 2 } else { 4 };
            prop_assert_eq!(1024 + r.n_tokens * size, files[0].len() as u64);
        }
        Ok(())
    });
}
