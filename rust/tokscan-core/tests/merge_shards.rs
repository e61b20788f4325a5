//! Summaries of shards scanned apart, rebased and merged in any grouping, equal one scan over everything;
//! and the scan does not depend on the thread count or on the order paths are given in.

use std::fs::File;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use proptest::prelude::*;
use tokscan_core::scan::scan_summary;
use tokscan_core::summary::Summary;
use tokscan_core::{Profile, Progress, ScanOptions};

const IM_END: i32 = 163586;
const ASST: i32 = 163588;
const MID: i32 = 163601;
const THINK: i32 = 163606;
const UNTHINK: i32 = 163607;

fn sample(seed: u32, len: u32) -> Vec<i32> {
    let mut v = vec![
        163594,
        14062,
        MID,
        5000 + seed as i32,
        IM_END,
        163587,
        2482,
        MID,
    ];
    v.extend((0..len).map(|i| 1000 + ((i * 7919 + seed * 31) % 90000) as i32));
    v.extend([IM_END, ASST, 69702, MID, THINK]);
    v.extend((0..len).map(|i| 2000 + ((i * 104729 + seed) % 90000) as i32));
    if !seed.is_multiple_of(5) {
        v.push(UNTHINK); // every fifth sample: unterminated thinking
    }
    v.extend((0..seed % 7).map(|i| 3000 + i as i32));
    if !seed.is_multiple_of(4) {
        v.push(IM_END); // every fourth: truncated
    }
    v
}

fn write_shard(dir: &std::path::Path, k: usize, seeds: &[u32]) -> String {
    let mut ids = ListBuilder::new(Int32Builder::new());
    for &s in seeds {
        for t in sample(s % 13, 5 + s % 17) {
            ids.values().append_value(t);
        }
        ids.append(true);
    }
    let cats = StringArray::from(
        seeds
            .iter()
            .map(|s| format!("c{}", s % 3))
            .collect::<Vec<_>>(),
    );
    let batch = RecordBatch::try_from_iter([
        ("input_ids", Arc::new(ids.finish()) as ArrayRef),
        ("category", Arc::new(cats) as ArrayRef),
    ])
    .unwrap();
    let path = dir.join(format!("shard-{k:02}.parquet"));
    let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    path.display().to_string()
}

fn scan(paths: &[String], threads: usize) -> Summary {
    let profile = Profile::load("kimi-k2", None).unwrap();
    let opts = ScanOptions {
        threads,
        ..Default::default()
    };
    let (mut s, _) = scan_summary(paths, &profile, &opts, &Progress::default()).unwrap();
    s.normalize();
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn shard_summaries_merge_to_the_whole(
        sizes in proptest::collection::vec(1usize..20, 1..5),
        grouping in proptest::collection::vec(any::<bool>(), 5),
        threads in prop_oneof![Just(1usize), Just(2), Just(8)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut next = 0u32;
        let paths: Vec<String> = sizes.iter().enumerate().map(|(k, &n)| {
            let seeds: Vec<u32> = (next..next + n as u32).collect();
            next += n as u32;
            write_shard(dir.path(), k, &seeds)
        }).collect();
        let whole = scan(&paths, 1);
        // Scan shards apart (reversed order, chosen thread count), rebase, merge in the chosen grouping.
        let mut parts = Vec::new();
        let mut base = 0u64;
        for (k, p) in paths.iter().enumerate() {
            let mut s = scan(std::slice::from_ref(p), threads);
            let rows = s.records.len() as u64;
            s.rebase(base, k as u32);
            base += rows;
            parts.push(s);
        }
        parts.reverse();
        let mut merged = Summary::new(0);
        let mut group = Summary::new(0);
        for (i, p) in parts.into_iter().enumerate() {
            group.merge(p);
            if grouping[i % grouping.len()] {
                merged.merge(std::mem::replace(&mut group, Summary::new(0)));
            }
        }
        merged.merge(group);
        merged.normalize();
        prop_assert_eq!(&merged, &whole);
        let mut reversed: Vec<String> = paths.clone();
        reversed.reverse();
        prop_assert_eq!(&scan(&reversed, threads), &whole);
    }
}
