//! A scan split into tasks (as on a cluster), merged in any tree and with its corpus-wide checks routed
//! through any number of buckets, writes the report of one local scan; and the scan does not depend on the
//! thread count or on the order paths are given in.

use std::fs::File;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder};
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use proptest::prelude::*;
use tokscan_core::corpus_checks::{
    find_repeats, resolve_units, route, Bucket, Found, Repeated, Resolution,
};
use tokscan_core::plan::{plan, Task};
use tokscan_core::records::Records;
use tokscan_core::report::Report;
use tokscan_core::scan::{scan, scan_task};
use tokscan_core::summary::Partial;
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

fn opts(threads: usize, flagged_detail: u64) -> ScanOptions {
    ScanOptions {
        threads,
        flagged_detail,
        ngram_coverage: true,
        vocab: Some(tokscan_core::vocab::VocabOptions {
            sizes: vec![4, 64],
            mapping: Some(16),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The report without `run` (when and how it ran): what must not depend on tasks, buckets or threads.
fn json(r: &Report) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap();
    v.as_object_mut().unwrap().remove("run");
    v
}

fn scan_local(paths: &[String], threads: usize, detail: u64) -> serde_json::Value {
    let profile = Profile::load("kimi-k2", None).unwrap();
    json(
        &scan(
            paths,
            &profile,
            &opts(threads, detail),
            &Progress::default(),
        )
        .unwrap(),
    )
}

/// What a cluster driver does, in one process: plan `n_tasks` tasks, scan them in the given order (each result
/// through its serialized form, as between processes), merge partials in a tree of the given fan-in, route
/// keys to `n_buckets` buckets, find repeats per bucket, resolve each task's records, build the report.
fn scan_distributed(
    paths: &[String],
    n_tasks: usize,
    n_buckets: usize,
    order: &[usize],
    fan_in: usize,
    threads: usize,
    detail: u64,
) -> serde_json::Value {
    let profile = Profile::load("kimi-k2", None).unwrap();
    let o = opts(threads, detail);
    let p = plan(paths, &Default::default(), n_tasks).unwrap();
    type Out = (Vec<u8>, Vec<Vec<u8>>, Vec<u8>);
    let mut results: Vec<Option<Out>> = vec![None; p.tasks.len()];
    for k in 0..p.tasks.len() {
        let start = order[k % order.len()] % p.tasks.len();
        let t = (start..p.tasks.len())
            .chain(0..start)
            .find(|&i| results[i].is_none())
            .unwrap();
        let task = Task::from_bytes(&p.tasks[t].to_bytes()).unwrap();
        let (partial, records) = scan_task(&task, &profile, &o, &Progress::default()).unwrap();
        // Folded as a Ray task folds them.
        let buckets = route(&records, n_buckets, &[])
            .into_iter()
            .map(|mut b| {
                b.fold();
                b.to_bytes()
            })
            .collect();
        results[t] = Some((partial.to_bytes(), buckets, records.to_bytes()));
    }
    let results: Vec<Out> = results.into_iter().map(Option::unwrap).collect();
    // Tree merge of partials, `fan_in` at a time, starting from the last task.
    let mut level: Vec<Partial> = results
        .iter()
        .rev()
        .map(|r| Partial::from_bytes(&r.0).unwrap())
        .collect();
    while level.len() > 1 {
        level = level
            .chunks(fan_in.max(2))
            .map(|c| {
                let mut m = Partial::new(0);
                for p in c {
                    m.merge(p.clone());
                }
                m
            })
            .collect();
    }
    let partial = level.pop().unwrap();
    let mut repeats = Repeated::default();
    for b in 0..n_buckets {
        let keys = results.iter().map(|r| Bucket::from_bytes(&r.1[b]).unwrap());
        repeats.merge(Repeated::from_bytes(&find_repeats(keys).to_bytes()).unwrap());
    }
    let resolution = Resolution::from_bytes(&Resolution::of(&partial, true).to_bytes()).unwrap();
    let mut corpus = Found::default();
    for r in results.iter().rev() {
        let records = Records::from_bytes(&r.2).unwrap();
        let found = resolve_units(&resolution, 1, |_| Ok(&records), &repeats).unwrap();
        corpus.merge(Found::from_bytes(&found.to_bytes()).unwrap());
    }
    // The cluster driver's last step: the local scan's `finish`, with no corpus and no records.
    let report = tokscan_core::scan::finish(
        partial,
        corpus,
        &[],
        &profile,
        p.inputs,
        &o,
        &o.passes(),
        None,
        Vec::new(),
        &Progress::default(),
    )
    .unwrap();
    json(&report)
}

/// Tasks of copies past the detail limit: each resolve task summarizes what is past the limit from its own
/// first row, and the report is the local one (the first duplicates listed in full, the rest summarized).
#[test]
fn copies_past_the_detail_limit_in_tasks_give_the_local_report() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<String> = (0..4)
        .map(|k| write_shard(dir.path(), k, &(0..30).collect::<Vec<u32>>()))
        .collect();
    for detail in [2, 1000] {
        let whole = scan_local(&paths, 2, detail);
        let listed = whole["flagged"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| {
                f["codes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c == "duplicate")
            })
            .count();
        // (A duplicate that the per-sample rules already summarized stays summarized.)
        assert!(listed >= 1 && listed <= detail as usize, "{listed}");
        let summarized = &whole["flagged_summarized"]["by_code"]["duplicate"];
        assert_eq!(
            summarized.as_u64().unwrap_or(0) > 0,
            detail == 2,
            "{summarized}"
        );
        for (n_tasks, n_buckets) in [(3, 2), (4, 1), (7, 3)] {
            let got = scan_distributed(&paths, n_tasks, n_buckets, &[0], 2, 1, detail);
            assert_eq!(
                got, whole,
                "{n_tasks} tasks, {n_buckets} buckets, detail {detail}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn tasks_buckets_and_merge_trees_give_the_local_report(
        sizes in proptest::collection::vec(1usize..40, 1..5),
        n_tasks in 1usize..9,
        n_buckets in 1usize..5,
        order in proptest::collection::vec(0usize..9, 1..9),
        fan_in in 2usize..4,
        threads in prop_oneof![Just(1usize), Just(2), Just(8)],
        // Past the detail limit, findings are summarized: in each resolve task from its own first row.
        detail in prop_oneof![Just(0u64), Just(1), Just(3), Just(1000)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut next = 0u32;
        let paths: Vec<String> = sizes.iter().enumerate().map(|(k, &n)| {
            // Every third shard repeats the first samples of the corpus: duplicates across shards.
            let seeds: Vec<u32> = if k % 3 == 2 {
                (0..n as u32).collect()
            } else {
                (next..next + n as u32).collect()
            };
            next += n as u32;
            write_shard(dir.path(), k, &seeds)
        }).collect();
        let whole = scan_local(&paths, 1, detail);
        prop_assert_eq!(&scan_distributed(&paths, n_tasks, n_buckets, &order, fan_in, threads, detail), &whole);
        let mut reversed: Vec<String> = paths.clone();
        reversed.reverse();
        prop_assert_eq!(&scan_local(&reversed, threads, detail), &whole);
    }
}
